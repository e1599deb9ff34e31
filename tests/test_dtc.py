"""gd.inference.DTC, the projected-process objective log N(y | 0, Q_ff + sigma^2 I) (Seeger et al.
2003; Titsias 2009 eq. 5, "PP"): against a dense N x N evaluation, against VFE plus its trace term
(Titsias eq. 16), against the exact GP at Z = X, against central differences, and through fit,
save/load, Dask blocks and the model-file registry."""
import warnings

import numpy as np
import pytest
from scipy import stats

import gpdsl as gd
from naive import bound_pair
from gpdsl.methods import collapsed
import naive

SE = gd.kernels.SquaredExponential
LENGTHSCALE, VARIANCE, NOISE = np.array([0.9, 1.5]), 1.2, 0.05


def _model(inference, Z, kernel=None, likelihood=None, optimize_Z=False):
    spec = gd.inducing.Optimized(Z) if optimize_Z else gd.inducing.Fixed(Z)
    return gd.Model(kernel=kernel or SE(LENGTHSCALE, VARIANCE), likelihood=likelihood or gd.likelihoods.Gaussian(NOISE),
                    inducing=spec, inference=inference)


def _at_declared(model, X, y):
    """The posterior at the declared hyperparameters (``fit(optimize=False)``), without the
    constant-model warning that unfitted values may raise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        return model.fit(X, y, optimize=False)


def _dense_dtc(X, y, Z, jitter):
    """log N(y | 0, Q_ff + sigma^2 I), Q_ff = K_fu (K_uu + jitter mean(diag K_uu) I)^-1 K_uf, densely."""
    Kuu, Kuf = naive.kernel(Z, Z, LENGTHSCALE, VARIANCE, "se"), naive.kernel(Z, X, LENGTHSCALE, VARIANCE, "se")
    Q, _ = naive.nystrom(Kuu, Kuf, jitter)
    return stats.multivariate_normal(mean=np.zeros(len(y)), cov=Q + NOISE * np.eye(len(y))).logpdf(y), Kuu, Kuf


@pytest.mark.parametrize("jitter", [0.0, 1e-4])
@pytest.mark.parametrize("chunk_size", [None, 7])
def test_objective_and_posterior_match_dense(toy_regression, jitter, chunk_size):
    X, y = toy_regression
    Z = X[::4] + 0.05
    post = _at_declared(_model(gd.inference.DTC(jitter=jitter, chunk_size=chunk_size), Z), X, y)
    dense, Kuu, Kuf = _dense_dtc(X, y, Z, jitter)
    assert post.log_evidence == pytest.approx(dense, rel=1e-10)
    assert post.jitter == jitter
    # q(u) is Titsias' eq. 17 and the predictive his eq. 8 with it (the PP predictive).
    mu, A, Kj = naive.titsias_qu(Kuu, Kuf, np.full(len(y), NOISE), y, jitter)
    np.testing.assert_allclose(post.state.q_mean, mu, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(post.state.q_cov, A, rtol=1e-7, atol=1e-10)
    Xs = np.random.default_rng(3).uniform(-3, 3, size=(6, 2))
    mean, fvar = naive.sparse_predict(naive.kernel(Xs, Z, LENGTHSCALE, VARIANCE, "se"), np.full(6, VARIANCE), Kj, mu, A)
    pred = post.predict(Xs)
    np.testing.assert_allclose(pred.f_mean, mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(pred.f_var, fvar, rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("jitter", [0.0, 1e-3])
def test_dtc_is_vfe_plus_its_trace_term(toy_regression, jitter):
    """F_PP = F_V + tr(K_ff - Q_ff) / (2 sigma^2) (Titsias eq. 16), the trace formed densely."""
    X, y = toy_regression
    rng = np.random.default_rng(5)
    for m in (1, 4, 12):
        Z = rng.uniform(-3, 3, size=(m, 2))
        dtc = _at_declared(_model(gd.inference.DTC(jitter=jitter), Z), X, y).log_evidence
        vfe = _at_declared(_model(gd.inference.VFE(jitter=jitter), Z), X, y).log_evidence
        Kuu, Kuf = naive.kernel(Z, Z, LENGTHSCALE, VARIANCE, "se"), naive.kernel(Z, X, LENGTHSCALE, VARIANCE, "se")
        trace = np.sum(VARIANCE - np.diag(naive.nystrom(Kuu, Kuf, jitter)[0]))
        assert trace > 1.0                                  # the two objectives differ visibly here
        assert dtc == pytest.approx(vfe + trace / (2 * NOISE), rel=1e-10)


def test_Z_equal_X_gives_the_exact_log_marginal_likelihood():
    """At Z = X the Nyström Q_ff is K_ff: DTC = VFE = exact GP (a Matérn-3/2 kernel keeps K_uu well
    conditioned, cond ~ 1e3, so that 1e-8 is rounding and not the jitter)."""
    rng = np.random.default_rng(2)
    X = rng.uniform(-3, 3, size=(30, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(30)
    kernel, likelihood = gd.kernels.Matern32(0.7, 1.1), gd.likelihoods.Gaussian(0.02)
    exact = gd.Model(kernel, likelihood).fit(X, y, optimize=False)
    dtc = gd.Model(kernel, likelihood, gd.inducing.Fixed(X), gd.inference.DTC(jitter=0.0)).fit(X, y, optimize=False)
    assert np.linalg.cond(naive.kernel(X, X, 0.7, 1.1, "m32")) < 1e5
    assert dtc.log_evidence == pytest.approx(exact.log_evidence, rel=1e-8)
    Xs = rng.uniform(-3, 3, size=(5, 2))
    np.testing.assert_allclose(dtc.predict(Xs).f_mean, exact.predict(Xs).f_mean, rtol=1e-8, atol=1e-10)


KERNELS = {
    "se-ard": SE(np.array([0.8, 1.7]), 1.3),
    "m52-ard": gd.kernels.Matern52(np.array([0.6, 1.2]), 1.5),
    "sum": SE(0.9, 0.8) + gd.kernels.Matern32(1.4, 0.3),
}


@pytest.mark.parametrize("jitter", [0.0, 1e-3])
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_gradients_match_central_differences(toy_regression, kernel, jitter):
    """Every hyperparameter and every coordinate of Z; ``jitter=1e-3`` adds the jitter's adjoint
    (it scales with mean(diag K_uu), which the kernel variance moves)."""
    X, y = toy_regression
    Z0 = X[:6] + 0.1
    model = _model(gd.inference.DTC(jitter=jitter, chunk_size=11), Z0, kernel=KERNELS[kernel],
                   likelihood=gd.likelihoods.Gaussian(0.07), optimize_Z=True)
    values = model.parameter_table(X, Z0).values()
    Z = values.pop("inducing.Z")
    ev = model.evaluate(values, X, y, Z)
    assert ev.jitter == jitter

    def objective(vals, Zz):
        return model.evaluate(vals, X, y, Zz, need_grad=False).log_evidence

    assert set(ev.grads) == set(values)
    for name, value in values.items():
        fd = naive.central_difference(lambda v: objective({**values, name: v}, Z), value)
        np.testing.assert_allclose(ev.grads[name], fd, rtol=1e-6, atol=1e-8, err_msg=name)
    fd = naive.central_difference(lambda Zz: objective(values, Zz), Z)
    np.testing.assert_allclose(ev.dZ, fd, rtol=1e-6, atol=1e-8, err_msg="Z")


def test_predictions_equal_vfe_at_the_same_parameters(toy_regression):
    X, y = toy_regression
    Z = X[::3] + 0.02
    Xs = np.random.default_rng(1).uniform(-3, 3, size=(9, 2))
    dtc = _at_declared(_model(gd.inference.DTC(), Z), X, y)
    vfe = _at_declared(_model(gd.inference.VFE(), Z), X, y)
    assert dtc.jitter == vfe.jitter
    pd, pv = dtc.predict(Xs), vfe.predict(Xs)
    for name in ("f_mean", "f_var", "y_mean", "y_var"):
        np.testing.assert_allclose(pd[name], pv[name], rtol=1e-12, atol=1e-14, err_msg=name)
    np.testing.assert_allclose(dtc.state.q_cov, vfe.state.q_cov, rtol=1e-12, atol=1e-14)


def test_fit_reaches_at_least_the_vfe_optimum(toy_regression):
    """F_PP >= F_V pointwise, so max F_PP >= F_PP(VFE's optimum) >= max F_V; the fitted posterior's
    log_evidence is the objective at the fitted values."""
    X, y = toy_regression
    Z0 = X[:6]
    fits = {}
    for name in ("DTC", "VFE"):
        model = _model(gd.inference.INFERENCE[name](), Z0, kernel=SE(np.array([1.0, 1.0]), 1.0),
                       likelihood=gd.likelihoods.Gaussian(0.1), optimize_Z=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gd.ConvergenceWarning)
            fits[name] = (model, model.fit(X, y, max_iter=300))
    (dtc_model, dtc), (_, vfe) = fits["DTC"], fits["VFE"]
    assert np.isfinite(dtc.log_evidence)
    assert dtc.log_evidence >= vfe.log_evidence
    at_vfe = dtc_model.evaluate(dict(vfe.values), X, y, vfe.state.Z, need_grad=False).log_evidence
    assert at_vfe >= vfe.log_evidence
    again = dtc_model.evaluate(dict(dtc.values), X, y, dtc.state.Z, need_grad=False).log_evidence
    assert again == pytest.approx(dtc.log_evidence, rel=1e-10)
    assert dtc.model.inference.log_evidence_kind.startswith("DTC")


def test_save_load_round_trip(toy_regression, tmp_path):
    X, y = toy_regression
    model = _model(gd.inference.DTC(jitter=1e-6), X[:8], optimize_Z=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        post = model.fit(X, y, max_iter=30)
    post.save(tmp_path / "dtc.nc")
    back = gd.load(tmp_path / "dtc.nc")
    assert back.model.inference == model.inference
    assert isinstance(back.model.inference, gd.inference.DTC)
    assert back.log_evidence == post.log_evidence
    Xs = np.random.default_rng(4).uniform(-3, 3, size=(7, 2))
    for name in ("f_mean", "f_var", "y_mean", "y_var"):
        np.testing.assert_array_equal(back.predict(Xs)[name], post.predict(Xs)[name])


def test_dask_blocks_equal_in_memory(toy_regression):
    da = pytest.importorskip("dask.array")
    X, y = toy_regression
    model = _model(gd.inference.DTC(chunk_size=10), X[:7], optimize_Z=True)
    assert model.inference.supports_dask_chunks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        ref = model.fit(X, y, max_iter=40)
        post = model.fit(da.from_array(X, chunks=(10, 2)), da.from_array(y, chunks=10), max_iter=40)
    # Same row blocks and the same tree of partial sums as in memory.
    assert post.log_evidence == pytest.approx(ref.log_evidence, rel=1e-10)
    for name, value in ref.values.items():
        np.testing.assert_allclose(post.values[name], value, rtol=1e-10, err_msg=name)
    np.testing.assert_allclose(post.state.Z, ref.state.Z, rtol=1e-10, atol=1e-12)
    # Other blocks (13 rows against the in-memory chunks of 10): objective and gradients to 1e-10.
    values = model.parameter_table(X, X[:7]).values()
    Z = values.pop("inducing.Z")
    ev, ev_ref = model.evaluate(values, da.from_array(X, chunks=(13, 2)), y, Z), model.evaluate(values, X, y, Z)
    assert ev.log_evidence == pytest.approx(ev_ref.log_evidence, rel=1e-12)
    for name, g in ev_ref.grads.items():
        np.testing.assert_allclose(ev.grads[name], g, rtol=1e-10, err_msg=name)
    np.testing.assert_allclose(ev.dZ, ev_ref.dZ, rtol=1e-10, atol=1e-12)


def test_model_file_and_cli_name(tmp_path, capsys):
    from gpdsl import cli
    from gpdsl.io import spec
    model = _model(gd.inference.DTC(jitter=1e-5, chunk_size=64), np.zeros((3, 2)))
    as_dict = spec.model_to_dict(model)
    assert as_dict["inference"] == {"type": "DTC", "jitter": 1e-5, "chunk_size": 64}
    assert gd.Model.from_dict(as_dict).inference == model.inference
    x = np.linspace(-3, 3, 40)
    (tmp_path / "data.csv").write_text("x,y\n" + "".join(f"{a:.17g},{np.sin(2 * a):.17g}\n" for a in x))
    (tmp_path / "model.toml").write_text("""
[kernel]
type = "SquaredExponential"
[likelihood]
type = "Gaussian"
variance = 0.1
[inducing]
type = "Subsample"
m = 8
[inference]
type = "DTC"
[data]
path = "data.csv"
target = "y"
[fit]
max_iter = 50
""")
    assert cli.main(["run", str(tmp_path / "model.toml"), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "DTC" in out and "projected process" in out


@pytest.mark.parametrize("likelihood", [gd.likelihoods.StudentT(), gd.likelihoods.Bernoulli("probit")],
                         ids=["student-t", "probit"])
def test_only_gaussian_noise(likelihood):
    with pytest.raises(ValueError, match="DTC"):
        gd.Model(SE(1.0, 1.0), likelihood, gd.inducing.KMeans(4), gd.inference.DTC())


def test_per_point_noise_is_the_dense_formula(toy_regression):
    """Gaussian noise per point (a capability of HeteroscedasticGaussian, accepted since DTC asks
    for noise, not a class): log N(y | 0, Q_ff + diag(noise)) written out (1e-10)."""
    X, y = toy_regression
    Z = X[::7] + 0.05
    noise = np.random.default_rng(4).uniform(0.02, 0.3, size=len(y))
    model = gd.Model(SE(LENGTHSCALE, VARIANCE), gd.likelihoods.HeteroscedasticGaussian(variance=noise),
                     gd.inducing.Fixed(Z), gd.inference.DTC(jitter=0.0))
    values = {"kernel.lengthscale": LENGTHSCALE, "kernel.variance": np.asarray(VARIANCE)}
    ev = model.evaluate(values, X, y, Z, need_grad=False)
    Kuf = naive.kernel(Z, X, LENGTHSCALE, VARIANCE, "se")
    Q = Kuf.T @ np.linalg.solve(naive.kernel(Z, Z, LENGTHSCALE, VARIANCE, "se"), Kuf)
    want = stats.multivariate_normal.logpdf(y, np.zeros(len(y)), Q + np.diag(noise))
    assert ev.log_evidence == pytest.approx(want, rel=1e-10)


def test_options_are_checked_and_objectives_exclusive(toy_regression):
    with pytest.raises(ValueError, match="DTC: chunk_size"):
        gd.inference.DTC(chunk_size=0)
    with pytest.raises(ValueError, match="DTC"):
        gd.inference.DTC(jitter=-1.0)
    X, y = toy_regression
    values = {"kernel.lengthscale": LENGTHSCALE, "kernel.variance": np.asarray(VARIANCE),
              "likelihood.variance": np.asarray(NOISE)}
    with pytest.raises(ValueError, match="at most one"):
        collapsed.evaluate(*bound_pair(SE(LENGTHSCALE, VARIANCE), gd.likelihoods.Gaussian(NOISE), values), X, y, X[:4],
                           fitc=True, dtc=True)


@pytest.mark.parametrize("inference", [gd.inference.DTC(jitter=0.0), gd.inference.FITC(jitter=0.0),
                                       gd.inference.VFE(jitter=0.0)], ids=["dtc", "fitc", "vfe"])
def test_log_predictive_where_the_learned_noise_overflows(inference):
    """Issue 45's fuzz (hetero_dtc 24, hetero_fitc 281): a learned log-polynomial noise of ~800 nats
    at held-out inputs far from the data overflows exp to inf, and log_predictive was -inf there
    though log N(y | m, v + lambda) is about -0.5 (log 2 pi + 800).  Against the dense projected-
    process predictive (Titsias eq. 8 with q(u) of eq. 17, DTC's; FITC's and VFE's f moments are
    checked elsewhere, here only their log density) and the density in mpmath at 50 digits from
    log lambda; 1e-9 relative covers the 1e-8-relative f moments, which weigh v / lambda < 1e-3
    of the density near the data and nothing (v / lambda ~ e^-790) far out."""
    mpmath = pytest.importorskip("mpmath")
    rng = np.random.default_rng(11)
    X = rng.uniform(-3, 3, size=(20, 1))
    y = np.sin(2 * X[:, 0]) + 0.3 * rng.standard_normal(20)
    Z, coefficients = np.linspace(-2.5, 2.5, 5)[:, None], np.array([-2.0, 0.1, 0.5])
    model = gd.Model(SE(0.8, 1.1), gd.likelihoods.HeteroscedasticGaussian(degree=2, coefficients=coefficients),
                     gd.inducing.Fixed(Z), inference)
    post = _at_declared(model, X, y)
    Xs, ys = np.array([[0.4], [-1.7], [40.0], [-45.0]]), np.array([0.3, -2.0, 5.0, -1.0])
    log_noise = coefficients[0] + coefficients[1] * Xs[:, 0] + coefficients[2] * Xs[:, 0] ** 2
    assert log_noise[2:].min() > np.log(np.finfo(float).max)          # exp(log_noise) is inf in float64
    mean, fvar = post.predict_f(Xs)
    if isinstance(inference, gd.inference.DTC):
        Kuu, Kuf = naive.kernel(Z, Z, 0.8, 1.1, "se"), naive.kernel(Z, X, 0.8, 1.1, "se")
        noise = np.exp(coefficients[0] + coefficients[1] * X[:, 0] + coefficients[2] * X[:, 0] ** 2)
        mu, A, Kj = naive.titsias_qu(Kuu, Kuf, noise, y)
        mean, fvar = naive.sparse_predict(naive.kernel(Xs, Z, 0.8, 1.1, "se"), np.full(4, 1.1), Kj, mu, A)
    mpmath.mp.dps = 50
    want = [float(-0.5 * (mpmath.log(2 * mpmath.pi) + mpmath.log(mpmath.mpf(v) + mpmath.exp(mpmath.mpf(c)))
                          + (mpmath.mpf(t) - mpmath.mpf(m)) ** 2 / (mpmath.mpf(v) + mpmath.exp(mpmath.mpf(c)))))
            for t, m, v, c in zip(ys, mean, fvar, log_noise)]
    got = post.log_predictive(Xs, ys)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-9)
