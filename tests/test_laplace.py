"""gd.inference.Laplace (Rasmussen & Williams Algorithms 3.1, 3.2 and 5.1): against GPML's
infLaplace (likLogistic and likErf on Ripley's synth), finite differences for every gradient, and
the mode's defining equation.  FITC-Laplace (inducing inputs Z): against a slow dense Laplace on
the FITC covariance written out in full (tests/naive_laplace.py), the dense method at Z = X, the
exact FITC regression for a Gaussian likelihood, finite differences of its own evidence, chunking;
and the W < 0 branch (Student-t) of both."""

import numpy as np
import pytest

import gpdsl as gd
from gpdsl.components import bind
import naive
import naive_laplace
from gpdsl.methods import collapsed, exact, laplace
from gpdsl.methods.expectation_propagation import site_regression
from conftest import shared_path
from naive import bound_pair, central_difference

SE = gd.kernels.SquaredExponential


@pytest.fixture(scope="module")
def synth():
    data = np.loadtxt(shared_path("oracles", "data", "synth_train.csv"), delimiter=",")
    test = np.loadtxt(shared_path("oracles", "data", "synth_test.csv"), delimiter=",")
    return data[:, :2], data[:, 2], test[:, :2], test[:, 2]


def _model(link, bias=gd.Fixed(0.0)):
    return gd.Model(SE(1.0, 1.0), gd.likelihoods.Bernoulli(link=link, bias=bias), inference=gd.inference.Laplace())


@pytest.mark.parametrize("link,oracle", [("logit", "synth_infLaplace_likLogistic_full.json"),
                                         ("probit", "synth_infLaplace_likErf_full.json")])
def test_gpml_inflaplace(gpml, synth, link, oracle):
    """nlZ, dnlZ (log ell, log sf) and the latent predictions of GPML 4.2's infLaplace run to
    convergence (its 'converged' record), at ell = sf = 1."""
    X, y, X_test, y_test = synth
    ref = gpml(oracle)["results"]["converged"]
    post = _model(link).fit(X, y, optimize=False)
    assert -post.log_evidence == pytest.approx(ref["nlZ"], abs=1e-8)
    ev = post.model.evaluate(post.values, X, y, None)
    dnlz = [-float(ev.grads["kernel.lengthscale"]), -2.0 * float(ev.grads["kernel.variance"])]
    np.testing.assert_allclose(dnlz, ref["dnlZ_cov"], rtol=0, atol=1e-8)
    mean, var = post.predict_f(X_test)
    np.testing.assert_allclose(mean, ref["pred"]["fmu"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(var, ref["pred"]["fs2"], rtol=0, atol=1e-8)
    if link == "probit":        # GPML's likLogistic lp is an erf-mixture approximation; likErf's is exact
        np.testing.assert_allclose(post.log_predictive(X_test, y_test), ref["pred"]["lp"], rtol=0, atol=1e-8)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_likelihood_derivatives_by_finite_differences(link):
    lik = gd.likelihoods.Bernoulli(link=link)
    values = {"likelihood.bias": np.array(0.3)}
    f = np.linspace(-12.0, 9.0, 43)
    for label in (1.0, -1.0):
        y = np.full(f.size, label)
        lp, d1, d2, d3 = bind(lik, values, "likelihood").log_density_derivatives(y, f)
        np.testing.assert_allclose(lp, bind(lik, values, "likelihood").log_density(y, f), rtol=1e-14)
        h = 1e-5
        shifted = [bind(lik, values, "likelihood").log_density_derivatives(y, f + s) for s in (h, -h)]
        for k, d in enumerate((d1, d2, d3)):
            fd = (shifted[0][k] - shifted[1][k]) / (2 * h)
            # atol: differencing d2 in the probit tail (z < -10, d2 ~ -1) loses ~1e-7.
            np.testing.assert_allclose(d, fd, rtol=1e-6, atol=3e-7)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_gradients_by_finite_differences(synth, link):
    """Kernel length-scales (ARD), variance and the bias, at a point away from the optimum."""
    X, y = synth[0][:80], synth[1][:80]
    y = np.where(y > 0, 1.0, -1.0)
    kernel = SE(np.array([0.7, 1.3]), 2.0)
    model = gd.Model(kernel, gd.likelihoods.Bernoulli(link=link, bias=0.4), inference=gd.inference.Laplace())
    values = {"kernel.lengthscale": np.array([0.7, 1.3]), "kernel.variance": np.array(2.0),
              "likelihood.bias": np.array(0.4)}
    ev = model.evaluate(values, X, y, None)
    for name in values:
        def objective(v, name=name):
            return model.evaluate({**values, name: v}, X, y, None, need_grad=False).log_evidence
        np.testing.assert_allclose(ev.grads[name], central_difference(objective, values[name], 1e-5),
                                   rtol=1e-6, atol=1e-7, err_msg=name)


def test_the_mode_solves_its_equation(synth):
    """f_hat = K d log p(y | f_hat) (R&W eq. 3.17), and Newton gains nothing more from there."""
    X, y = synth[0], np.where(synth[1] > 0, 1.0, -1.0)
    lik = gd.likelihoods.Bernoulli(link="logit", bias=-0.2)
    values = {"likelihood.bias": np.array(-0.2)}
    K = bind(SE(1.0, 1.0), {"kernel.lengthscale": np.array(1.0), "kernel.variance": np.array(1.0)}, "kernel").gram(X, X)
    a, f, psi, (lp, g, _, _) = laplace.find_mode(bind(lik, values, 'likelihood'), K, y, tol=1e-12, max_iter=100)
    np.testing.assert_allclose(f, K @ g, rtol=0, atol=1e-9)
    np.testing.assert_allclose(a, g, rtol=0, atol=1e-9)
    assert psi == pytest.approx(-0.5 * g @ K @ g + np.sum(lp), abs=1e-9)


def test_fit_save_load_and_model_file(synth, tmp_path):
    X, y, X_test, y_test = synth
    post = _model("logit", bias=0.0).fit(X, y)
    assert post.converged
    start = _model("logit", bias=0.0).fit(X, y, optimize=False)
    assert post.log_evidence > start.log_evidence + 1.0
    post.save(tmp_path / "laplace.nc")
    back = gd.load(tmp_path / "laplace.nc")
    np.testing.assert_array_equal(back.predict(X_test).p, post.predict(X_test).p)
    assert gd.Model.from_dict(post.model.to_dict()) == post.model
    assert np.mean((post.predict(X_test).p.values > 0.5) != (y_test > 0)) < 0.12


def test_declaration_errors():
    with pytest.raises(ValueError, match="Laplace: tol must be"):
        gd.inference.Laplace(tol=-1.0)
    with pytest.raises(ValueError, match="HeteroscedasticGaussian with Laplace is not supported"):
        gd.Model(SE(1.0, 1.0), gd.likelihoods.HeteroscedasticGaussian(degree=1), inference=gd.inference.Laplace())


# ---------------------------------------------------------------------------------------------
# FITC-Laplace


def five_point_difference(f, x, step):
    """Gradient of scalar f at array x by the fourth-order central stencil (absolute step):
    truncation ~step^4, so that the tests can ask for 1e-6 relative where the evidence carries
    ~1e-13 of Newton-stopping and rounding noise."""
    x = np.array(x, dtype=float)
    g = np.zeros_like(x)
    for i in range(x.size):
        def at(t):
            z = x.copy()
            z.flat[i] += t
            return f(z)
        g.flat[i] = (-at(2 * step) + 8 * at(step) - 8 * at(-step) + at(-2 * step)) / (12 * step)
    return g


def assert_gradient(got, want, name, rtol=1e-6):
    """Each entry to ``rtol`` of itself or, for entries near zero, of the largest entry."""
    want = np.asarray(want, dtype=float)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(np.max(np.abs(want)), 1e-3), err_msg=name)


SYNTH_VALUES = {"kernel.lengthscale": np.array([0.7, 1.3]), "kernel.variance": np.array(2.0),
                "likelihood.bias": np.array(0.4)}
JITTER = 1e-6


@pytest.fixture(scope="module")
def synth_fitc(synth):
    """80 synth points and 12 inducing inputs drawn uniformly over their box (none at a data point)."""
    X, y = synth[0][:80], np.where(synth[1][:80] > 0, 1.0, -1.0)
    Z = np.random.default_rng(0).uniform(X.min(axis=0), X.max(axis=0), size=(12, 2))
    return X, y, Z, synth[2][:50]


def _se(values):
    return lambda A, B: naive.kernel(A, B, values["kernel.lengthscale"], values["kernel.variance"], "se")


def _reference(likelihood, values, X, y, Z, jitter=JITTER):
    """Dense Laplace on Kt (K itself for Z None) formed by hand."""
    k = _se(values)
    K = k(X, X) if Z is None else naive_laplace.fitc_covariance(k(X, X), k(Z, X), k(Z, Z), jitter)
    return naive_laplace.laplace(K, lambda f: bind(likelihood, values, "likelihood").log_density_derivatives(y, f))


def _reference_prediction(values, X, Z, X_test, ref, jitter=JITTER):
    """Mean Q_*f a and variance k_** - Q_*f W_+ (I + Kt W_+)^-1 Q_f* of the FITC (Z) or dense (Z None)
    Laplace posterior at X_test, from the dense reference; W_+ = max(W, 0), the posterior's site
    precisions where W < 0 (laplace's module docstring: the variance stays within the prior's)."""
    k = _se(values)
    if Z is None:
        cross, K = k(X_test, X), k(X, X)
    else:
        Kj = k(Z, Z) + jitter * np.mean(np.diag(k(Z, Z))) * np.eye(len(Z))
        cross = k(X_test, Z) @ np.linalg.solve(Kj, k(Z, X))
        K = naive_laplace.fitc_covariance(k(X, X), k(Z, X), k(Z, Z), jitter)
    W = np.maximum(ref["W"], 0.0)
    R = W[:, None] * np.linalg.inv(np.eye(len(W)) + K * W[None, :])
    return cross @ ref["a"], np.diag(k(X_test, X_test)) - np.einsum("ij,jk,ik->i", cross, R, cross)


def _predict(state, values, X_test):
    """f_* | y from a PredictiveState (its documented form)."""
    kern = SE(values["kernel.lengthscale"], values["kernel.variance"])
    b = state.basis(bind(kern, values, "kernel").gram(state.Z, X_test))
    return b.T @ state.weights, bind(kern, values, "kernel").diag(X_test) - np.einsum("ij,ij->j", b, b if state.correction is None else state.correction @ b)


def _fitc(likelihood, values, X, y, Z, **options):
    kern = SE(values["kernel.lengthscale"], values["kernel.variance"])
    options = {"tol": 1e-15, "max_iter": 200, "jitter": JITTER, **options}
    return laplace.evaluate(*bound_pair(kern, likelihood, values), X, y, Z, **options)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_fitc_matches_dense_laplace_on_the_fitc_covariance(synth_fitc, link):
    """Evidence (1e-10), predictions (1e-9) and every gradient (kernel, bias, each entry of Z;
    1e-6 relative) against a dense Laplace on Kt(theta, Z) = Q + diag(K - Q) formed by hand,
    its gradients by finite differences through Kt."""
    X, y, Z, X_test = synth_fitc
    lik = gd.likelihoods.Bernoulli(link=link, bias=0.4)
    values = SYNTH_VALUES
    ev = _fitc(lik, values, X, y, Z, need_state=True)
    ref = _reference(lik, values, X, y, Z)
    assert ev.log_evidence == pytest.approx(ref["log_evidence"], abs=1e-10)
    mean, var = _predict(ev.state, values, X_test)
    mean_ref, var_ref = _reference_prediction(values, X, Z, X_test, ref)
    np.testing.assert_allclose(mean, mean_ref, rtol=0, atol=1e-9)
    np.testing.assert_allclose(var, var_ref, rtol=0, atol=1e-9)
    for name in values:
        fd = five_point_difference(lambda v, name=name: _reference(lik, {**values, name: v}, X, y, Z)["log_evidence"],
                                   values[name], 1e-3)
        assert_gradient(ev.grads[name], fd, name)
    fd = five_point_difference(lambda z: _reference(lik, values, X, y, z.reshape(Z.shape))["log_evidence"],
                               Z.ravel(), 1e-3)
    assert_gradient(ev.dZ, fd.reshape(Z.shape), "inducing.Z")


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_fitc_gradients_by_finite_differences(synth_fitc, link):
    """Central differences of the FITC-Laplace evidence itself: length-scales, variance, bias and
    every entry of Z, 1e-6 relative, at the dynamic jitter ladder (no jitter needed here)."""
    X, y, Z, _ = synth_fitc
    lik = gd.likelihoods.Bernoulli(link=link, bias=0.4)
    values = SYNTH_VALUES
    ev = _fitc(lik, values, X, y, Z, jitter=None)
    assert ev.jitter == 0.0
    for name in values:
        fd = five_point_difference(
            lambda v, name=name: _fitc(lik, {**values, name: v}, X, y, Z, jitter=None, need_grad=False).log_evidence,
            values[name], 1e-3)
        assert_gradient(ev.grads[name], fd, name)
    fd = five_point_difference(
        lambda z: _fitc(lik, values, X, y, z.reshape(Z.shape), jitter=None, need_grad=False).log_evidence,
        Z.ravel(), 1e-3)
    assert_gradient(ev.dZ, fd.reshape(Z.shape), "inducing.Z")


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_fitc_with_inducing_inputs_at_the_data_is_dense_laplace(synth_fitc, link):
    """Z = X and a jitter of 1e-12 x mean diag K_uu: Kt = K to ~1e-12, so the evidence, the
    gradients in the kernel hyperparameters and the bias and the predictions are the dense
    method's (1e-8)."""
    X, y, _, X_test = synth_fitc
    lik = gd.likelihoods.Bernoulli(link=link, bias=0.4)
    values = SYNTH_VALUES
    dense = _fitc(lik, values, X, y, None, need_state=True)
    sparse = _fitc(lik, values, X, y, X, jitter=1e-12, need_state=True)
    assert sparse.log_evidence == pytest.approx(dense.log_evidence, abs=1e-8)
    for name in values:
        np.testing.assert_allclose(sparse.grads[name], dense.grads[name], rtol=0, atol=1e-8, err_msg=name)
    for got, want in zip(_predict(sparse.state, values, X_test), _predict(dense.state, values, X_test)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


def test_fitc_chunked_equals_unchunked(synth_fitc):
    """chunk_size=7 (12 chunks, the last short) against one chunk: 1e-12 relative (the sums
    differ in order only)."""
    X, y, Z, X_test = synth_fitc
    lik = gd.likelihoods.Bernoulli(link="logit", bias=0.4)
    one = _fitc(lik, SYNTH_VALUES, X, y, Z, need_state=True)
    chunked = _fitc(lik, SYNTH_VALUES, X, y, Z, chunk_size=7, need_state=True)
    assert chunked.log_evidence == pytest.approx(one.log_evidence, rel=1e-12)
    for name in SYNTH_VALUES:
        np.testing.assert_allclose(chunked.grads[name], one.grads[name], rtol=1e-12, atol=1e-13, err_msg=name)
    np.testing.assert_allclose(chunked.dZ, one.dZ, rtol=1e-12, atol=1e-13)
    for got, want in zip(_predict(chunked.state, SYNTH_VALUES, X_test), _predict(one.state, SYNTH_VALUES, X_test)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_fitc_mode_and_state_are_the_site_regressions(synth_fitc, link):
    """At the mode f = Kt g (R&W eq. 3.17 with Kt formed by hand), and the predictive state is
    that of the Gaussian regression on the pseudo-data (EP's site_regression with sites W,
    W f + g), to 1e-10."""
    X, y, Z, _ = synth_fitc
    lik = gd.likelihoods.Bernoulli(link=link, bias=0.4)
    values = SYNTH_VALUES
    ev = _fitc(lik, values, X, y, Z, need_state=True)
    prior = laplace.FITCCovariance(bind(SE(1.0, 1.0), values, "kernel"), X, Z, JITTER, None)
    a, f, _, (_, g, _, _) = laplace.find_mode(bind(lik, values, 'likelihood'), prior, y, tol=1e-15, max_iter=100)
    k = _se(values)
    Kt = naive_laplace.fitc_covariance(k(X, X), k(Z, X), k(Z, Z), JITTER)
    np.testing.assert_allclose(f, Kt @ g, rtol=0, atol=1e-10)
    np.testing.assert_allclose(a, g, rtol=0, atol=1e-9)
    W, nu = ev.pseudo_data
    state = site_regression(bind(SE(1.0, 1.0), values, "kernel"), X, Z, W, nu, jitter=JITTER, chunk_size=None, need_grad=False,
                            need_state=True).state
    for field in ("weights", "correction", "q_mean", "q_cov", "chol"):
        np.testing.assert_allclose(getattr(ev.state, field), getattr(state, field), rtol=0, atol=1e-10,
                                   err_msg=field)


def test_gaussian_likelihood_gives_the_exact_and_fitc_regressions(toy_regression):
    """With a Gaussian likelihood the Laplace approximation is exact (d^3 log p = 0): dense, the
    exact GP's evidence, gradients (kernel, noise variance) and predictions; with Z, the
    collapsed FITC engine's, dZ included (1e-9)."""
    X, y = toy_regression
    Z = X[::4] + 0.05
    lik = gd.likelihoods.Gaussian(0.3)
    values = {"kernel.lengthscale": np.array([0.8, 1.1]), "kernel.variance": np.array(1.5),
              "likelihood.variance": np.array(0.3)}
    kern = SE(values["kernel.lengthscale"], values["kernel.variance"])
    X_test = np.random.default_rng(5).uniform(-3, 3, size=(20, 2))
    for Zi in (None, Z):
        ev = laplace.evaluate(*bound_pair(kern, lik, values), X, y, Zi, tol=1e-15, max_iter=50, jitter=JITTER, need_state=True)
        if Zi is None:
            want = exact.evaluate(*bound_pair(kern, lik, values), X, y, jitter=None, need_grad=True, need_state=True)
        else:
            want = collapsed.evaluate(*bound_pair(kern, lik, values), X, y, Zi, fitc=True, jitter=JITTER, need_grad=True,
                                      need_state=True)
            np.testing.assert_allclose(ev.dZ, want.dZ, rtol=0, atol=1e-9)
        assert ev.log_evidence == pytest.approx(want.log_evidence, abs=1e-9)
        for name in values:
            np.testing.assert_allclose(ev.grads[name], want.grads[name], rtol=0, atol=1e-9, err_msg=name)
        for got, exp in zip(_predict(ev.state, values, X_test), _predict(want.state, values, X_test)):
            np.testing.assert_allclose(got, exp, rtol=0, atol=1e-9)


@pytest.fixture(scope="module")
def outliers():
    """1-D regression with six gross outliers: the Student-t's W = -d^2 log p is negative there."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, size=(60, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(60)
    y[::10] += rng.choice([-4.0, 4.0], size=6)
    return X, y, np.linspace(-2.8, 2.9, 9)[:, None], np.linspace(-3.5, 3.5, 15)[:, None]


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "fitc"])
def test_negative_w_student_t(outliers, sparse):
    """A likelihood that is not log-concave (GPML's infLaplace / infFITC_Laplace: Newton with
    max(W, 0), evidence and gradients at the unclipped W, the posterior at max(W, 0)): evidence
    (1e-9) and predictions (1e-9) against the dense reference, whose W < 0 at the outliers, and the gradients (kernel, df,
    scale, Z) against its finite differences (1e-6 relative)."""
    X, y, Z, X_test = outliers
    Z = Z if sparse else None
    lik = gd.likelihoods.StudentT(3.0, 0.2)
    values = {"kernel.lengthscale": np.array(0.9), "kernel.variance": np.array(1.2), "likelihood.df": np.array(3.0),
              "likelihood.scale": np.array(0.2)}
    ev = _fitc(lik, values, X, y, Z, need_state=True)
    ref = _reference(lik, values, X, y, Z)
    assert np.sum(ref["W"] < 0) >= 3
    assert ev.log_evidence == pytest.approx(ref["log_evidence"], abs=1e-9)
    for got, want in zip(_predict(ev.state, values, X_test), _reference_prediction(values, X, Z, X_test, ref)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    for name in values:
        fd = five_point_difference(lambda v, name=name: _reference(lik, {**values, name: v}, X, y, Z)["log_evidence"],
                                   values[name], 1e-3)
        assert_gradient(ev.grads[name], fd, name)
    if sparse:
        fd = five_point_difference(lambda z: _reference(lik, values, X, y, z.reshape(Z.shape))["log_evidence"],
                                   Z.ravel(), 1e-3)
        assert_gradient(ev.dZ, fd.reshape(Z.shape), "inducing.Z")


def test_fitc_refuses_a_too_negative_w():
    """FITC: 1 + W (K_nn - Q_nn) <= 0 at the mode is a FloatingPointError (GPML returns NaN)."""
    X = np.array([[0.0], [5.0]])
    values = {"kernel.lengthscale": np.array(1.0), "kernel.variance": np.array(1.0)}
    prior = laplace.FITCCovariance(bind(SE(1.0, 1.0), values, "kernel"), X, np.array([[0.0]]), 0.0, None)
    with pytest.raises(FloatingPointError, match="W too negative"):
        prior.factor(np.array([0.5, -2.0]))


def test_fitc_laplace_through_the_model(synth, tmp_path):
    """gd.Model with an inducing spec runs FITC-Laplace (inducing_rule "optional"): a fit with
    optimised Z converges, classifies synth, predicts from the FITC state, and survives a
    save/load round trip."""
    X, y, X_test, y_test = synth
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Bernoulli(link="probit"),
                     gd.inducing.Optimized(gd.inducing.KMeans(10)), gd.inference.Laplace(jitter=1e-6, chunk_size=64))
    post = model.fit(X, y)
    assert post.converged
    assert np.mean((post.predict(X_test).p.values > 0.5) != (y_test > 0)) < 0.12
    post.save(tmp_path / "fitc_laplace.nc")
    np.testing.assert_array_equal(gd.load(tmp_path / "fitc_laplace.nc").predict(X_test).p, post.predict(X_test).p)
    with pytest.raises(ValueError, match="Laplace: jitter must be"):
        gd.inference.Laplace(jitter=-1.0)
