"""gd.likelihoods.PerOutput: a likelihood per output of different families sharing an ICM's
latent processes (issue 48), through Likelihood.for_rows.  References: a dense NumPy Laplace
(tests/naive_laplace.py) with a per-row density written here from the formulas, central
differences, the single shared likelihood and OutputGaussian, and the parts' own operations."""
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats

import gpdsl as gd
from gpdsl.components import bind
from naive import central_difference, icm_gram, stationary_point
from naive_laplace import laplace as dense_laplace

L = gd.likelihoods
RNG = np.random.default_rng(48)
N = 24
x = np.sort(RNG.uniform(-2.0, 2.0, N))
OUT = np.r_[np.zeros(N // 2), np.ones(N // 2)]
X = np.column_stack([x, OUT])
F = np.sin(1.5 * x)
Y_GAUSS = np.r_[F[:N // 2] + 0.3 * RNG.standard_normal(N // 2), np.zeros(N // 2)]
Y_BINARY = (RNG.uniform(size=N) < stats.norm.cdf(2.0 * F)).astype(float)
Y_COUNT = RNG.poisson(np.exp(0.5 + F)).astype(float)
ICM = gd.kernels.ICM(gd.kernels.SquaredExponential(0.8, 1.0), 2, W=np.array([[0.9], [0.7]]), kappa=np.array([0.2, 0.3]))


def _values(model, X_):
    return model.parameter_table(X_).values()


def _dense_K(values):
    base = stationary_point(values["kernel.kernel.lengthscale"], values["kernel.kernel.variance"], "se")
    return icm_gram(X, X, values["kernel.W"], values["kernel.kappa"], base)


def _gauss_rows(y, f, s2):
    r = y - f
    return -0.5 * np.log(2 * np.pi * s2) - 0.5 * r * r / s2, r / s2, np.full_like(f, -1 / s2), np.zeros_like(f)


def _probit_rows(y, f, bias):
    """log Phi(s z), s = +-1, z = f + bias, and its derivatives (R&W eq. 3.16 and below)."""
    s = np.where(y > 0, 1.0, -1.0)
    z = s * (f + bias)
    lp = special.log_ndtr(z)
    ratio = np.exp(stats.norm.logpdf(z) - lp)
    d1 = s * ratio
    d2 = -ratio * ratio - z * ratio
    d3 = s * (-2 * ratio * (-ratio * ratio - z * ratio) - ratio - z * (-ratio * ratio - z * ratio))
    return lp, d1, d2, d3


def _poisson_rows(y, f):
    rate = np.exp(f)
    return y * f - rate - special.gammaln(y + 1), y - rate, -rate, -rate


def _per_row(first, second):
    """A density of rows 0..N/2-1 by ``first``, the rest by ``second`` (each (f) -> 4 arrays)."""
    half = N // 2

    def derivatives(f):
        a, b = first(f[:half]), second(f[half:])
        return tuple(np.r_[u, v] for u, v in zip(a, b))
    return derivatives


CASES = {
    "bernoulli": (L.PerOutput((L.Gaussian(0.15), L.Bernoulli("probit", bias=0.2))),
                  np.r_[Y_GAUSS[:N // 2], Y_BINARY[N // 2:]],
                  lambda v, y: _per_row(lambda f: _gauss_rows(y[:N // 2], f, v["likelihood.0.variance"]),
                                        lambda f: _probit_rows(y[N // 2:], f, v["likelihood.1.bias"]))),
    "poisson": (L.PerOutput((L.Gaussian(0.15), L.Poisson(link="log"))),
                np.r_[Y_GAUSS[:N // 2], Y_COUNT[N // 2:]],
                lambda v, y: _per_row(lambda f: _gauss_rows(y[:N // 2], f, v["likelihood.0.variance"]),
                                      lambda f: _poisson_rows(y[N // 2:], f))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_laplace_matches_dense_laplace_and_central_differences(case):
    """Laplace with a Gaussian and a Bernoulli (or Poisson) output: log q(y) equals the dense
    NumPy Laplace on the hand-built ICM Gram with the per-row density (1e-9 relative), every
    gradient equals central differences of the evidence (2e-5 relative)."""
    likelihood, y_raw, density = CASES[case]
    model = gd.Model(ICM, likelihood, inference=gd.inference.Laplace(tol=1e-13))
    y = likelihood.for_rows(X).coded_targets(y_raw, N)
    values = _values(model, X)
    ev = model.evaluate(values, X, y, None)
    ref = dense_laplace(_dense_K(values), density(values, y))
    np.testing.assert_allclose(ev.log_evidence, ref["log_evidence"], rtol=1e-9)
    assert {"likelihood.0.variance", "kernel.W"} <= set(ev.grads)
    for name, value in values.items():
        fd = central_difference(lambda v: model.evaluate({**values, name: v}, X, y, None, need_grad=False).log_evidence,
                                value)
        np.testing.assert_allclose(ev.grads[name], fd, rtol=2e-5, atol=2e-7, err_msg=name)


def test_dense_reference_probit_derivatives_are_central_differences():
    """The test's own probit density: d1..d3 are central differences of the term below."""
    f, y = np.array([-1.3, 0.2, 2.1]), np.array([1.0, -1.0, 1.0])
    d = _probit_rows(y, f, 0.2)
    for k in range(3):
        fd = [central_difference(lambda v, i=i: _probit_rows(y[i:i + 1], v, 0.2)[k][0], f[i:i + 1], step=1e-5)[0]
              for i in range(3)]
        np.testing.assert_allclose(d[k + 1], fd, rtol=1e-6)


def _same_evaluation(model_a, model_b, y, tied):
    """model_a (PerOutput of identical parts) and model_b (the shared part): log evidence to 1e-10
    and each gradient, the shared parameter's as the sum of its per-output copies (``tied``)."""
    va, vb = _values(model_a, X), _values(model_b, X)
    for name in tied:
        va[f"likelihood.0.{name}"] = va[f"likelihood.1.{name}"] = vb[f"likelihood.{name}"]
    ea, eb = model_a.evaluate(va, X, y, None), model_b.evaluate(vb, X, y, None)
    np.testing.assert_allclose(ea.log_evidence, eb.log_evidence, rtol=1e-10)
    for name, g in eb.grads.items():
        if name.startswith("likelihood."):
            local = name[len("likelihood."):]
            got = ea.grads[f"likelihood.0.{local}"] + ea.grads[f"likelihood.1.{local}"]
        else:
            got = ea.grads[name]
        np.testing.assert_allclose(got, g, rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("method", [gd.inference.Laplace(tol=1e-13), gd.inference.VGP()], ids=["Laplace", "VGP"])
def test_identical_parts_equal_the_shared_likelihood(method):
    part = L.Bernoulli("probit", bias=0.2)
    y = part.prepare_targets(Y_BINARY)
    _same_evaluation(gd.Model(ICM, L.PerOutput((part, part)), inference=method),
                     gd.Model(ICM, part, inference=method), y, ["bias"])


def test_identical_poisson_parts_equal_the_shared_likelihood_under_ep():
    """EP takes parts that share one site code without site parameters (log-link Poisson)."""
    part = L.Poisson(link="log")
    _same_evaluation(gd.Model(ICM, L.PerOutput((part, part)), inference=gd.inference.EP()),
                     gd.Model(ICM, part, inference=gd.inference.EP()), Y_COUNT, [])


def test_gaussian_parts_equal_output_gaussian_under_exact():
    """PerOutput of Gaussians is OutputGaussian's model (exact log ML and gradients to 1e-10), and
    its predictions add each row's noise."""
    variances = np.array([0.15, 0.4])
    per = gd.Model(ICM, L.PerOutput((L.Gaussian(variances[0]), L.Gaussian(variances[1]))))
    one = gd.Model(ICM, L.OutputGaussian(2, variance=variances))
    y = Y_GAUSS + OUT * F
    ea, eb = per.evaluate(_values(per, X), X, y, None), one.evaluate(_values(one, X), X, y, None)
    np.testing.assert_allclose(ea.log_evidence, eb.log_evidence, rtol=1e-12)
    for p in range(2):
        np.testing.assert_allclose(ea.grads[f"likelihood.{p}.variance"], eb.grads["likelihood.variance"][p], rtol=1e-10)
    for name in ("kernel.W", "kernel.kappa", "kernel.kernel.lengthscale"):
        np.testing.assert_allclose(ea.grads[name], eb.grads[name], rtol=1e-10, err_msg=name)
    for standardize in (False, True):       # (the targets of both outputs share one shift and scale)
        a = per.fit(X, y, optimize=False, standardize=standardize).predict(X[::5])
        b = one.fit(X, y, optimize=False, standardize=standardize).predict(X[::5])
        for name in ("f_mean", "f_var", "y_var"):
            np.testing.assert_allclose(a[name].values, b[name].values, rtol=1e-10, err_msg=f"{name} {standardize}")


@pytest.fixture(scope="module")
def fitted():
    likelihood, y_raw, _ = CASES["bernoulli"]
    return gd.Model(ICM, likelihood, inference=gd.inference.Laplace()).fit(X, y_raw), y_raw


def test_predictions_are_each_parts_on_its_rows(fitted):
    """predict / log_predictive per row equal the fitted parts' own predictive on their rows;
    a summary one part lacks is NaN at the other's rows; every-output queries give (n, P)."""
    post, _ = fitted
    X_new = np.column_stack([np.linspace(-1.5, 1.5, 6), [0, 1, 1, 0, 1, 0]])
    y_new = np.array([0.3, 1.0, 0.0, -0.4, 1.0, 0.9])
    mean, var = post.predict_f(X_new)
    pred, scores = post.predict(X_new), post.log_predictive(X_new, y_new)
    parts = bind(post.model.likelihood, post.values, "likelihood").component.likelihoods
    for p, part in enumerate(parts):
        rows = X_new[:, -1] == p
        want = part.predictive(mean[rows], var[rows])
        for name, value in want.items():
            np.testing.assert_allclose(pred[name].values[rows], value, rtol=1e-13, err_msg=name)
        np.testing.assert_allclose(scores[rows], part.log_predictive(mean[rows], var[rows],
                                                                     part.prepare_targets(y_new[rows])), rtol=1e-13)
    gaussian_rows = X_new[:, -1] == 0
    assert np.all(np.isnan(pred["p"].values[gaussian_rows])) and np.all(np.isnan(pred["y_var"].values[~gaussian_rows]))
    wide = post.predict(X_new[:3, :1])
    assert wide["p"].shape == (3, 2)
    second = np.column_stack([X_new[:3, 0], np.ones(3)])
    np.testing.assert_allclose(wide["p"].values[:, 1], parts[1].predictive(*post.predict_f(second))["p"], rtol=1e-13)
    idata = post.to_inference_data(X_new, y_new, draws=30, chains=2)
    f = idata.posterior["f"].values
    codes = post.model.likelihood.for_rows(X_new).coded_targets(y_new, 6)
    for p, part in enumerate(parts):
        rows = X_new[:, -1] == p
        np.testing.assert_allclose(idata.log_likelihood["y"].values[..., rows],
                                   part.log_density(codes[rows], f[..., rows]), rtol=1e-13)
    draws = idata.posterior_predictive["y"].values
    assert set(np.unique(draws[..., X_new[:, -1] == 1])) <= {-1.0, 1.0}
    assert len(np.unique(draws[..., X_new[:, -1] == 0])) == draws[..., X_new[:, -1] == 0].size   # real-valued


def test_save_load_and_model_file_round_trip(fitted):
    post, _ = fitted
    X_new = np.column_stack([np.linspace(-1, 1, 4), [0, 1, 0, 1]])
    with tempfile.TemporaryDirectory() as folder:
        post.save(Path(folder) / "post.nc")
        back = gd.load(Path(folder) / "post.nc")
        assert back.model == post.model
        for name in ("f_mean", "y_mean", "p"):
            np.testing.assert_array_equal(back.predict(X_new)[name].values, post.predict(X_new)[name].values)
        toml = Path(folder) / "model.toml"
        toml.write_text(post.model.to_toml())
        assert gd.Model.from_toml(toml) == post.model
    assert gd.Model.from_dict(post.model.to_dict()) == post.model


def test_each_part_codes_and_checks_its_own_targets():
    likelihood = CASES["bernoulli"][0]
    y = likelihood.for_rows(X).coded_targets(np.r_[Y_GAUSS[:N // 2], Y_BINARY[N // 2:]], N)
    np.testing.assert_array_equal(y[:N // 2], Y_GAUSS[:N // 2])
    np.testing.assert_array_equal(y[N // 2:], np.where(Y_BINARY[N // 2:] > 0, 1.0, -1.0))
    model = gd.Model(ICM, likelihood, inference=gd.inference.Laplace())
    with pytest.raises(ValueError, match="Bernoulli: y must be binary"):
        model.fit(X, np.r_[Y_GAUSS[:N // 2], F[N // 2:]])          # real values on the Bernoulli output
    with pytest.raises(NotImplementedError, match=r"PerOutput.prepare_targets: .*for_rows\(X\)"):
        likelihood.prepare_targets(Y_BINARY)
    with pytest.raises(NotImplementedError, match=r"PerOutput.log_predictive: .*for_rows\(X\)"):
        likelihood.bind().log_predictive(np.zeros(2), np.ones(2), np.zeros(2))


def test_refusals_are_named():
    mixed = CASES["bernoulli"][0]
    with pytest.raises(NotImplementedError, match=r"PerOutput.site_model: .*call for_rows\(X\)"):
        mixed.bind().site_model()           # each row's site code is its part's (tests/test_per_output_sites.py)
    no_sites = L.PerOutput((L.Gaussian(), L.HeteroscedasticGaussian(degree=1)))
    with pytest.raises(ValueError, match=r"EP \(which needs .site_model.\).*part 1, Heteroscedastic.*no site model"):
        gd.Model(ICM, no_sites, inference=gd.inference.EP())
    with pytest.raises(ValueError, match=r"PerOutput: part 1, Categorical.*3 latent functions"):
        L.PerOutput((L.Gaussian(), L.Categorical(3)))
    with pytest.raises(ValueError, match="PerOutput: part 0, OutputGaussian"):
        L.PerOutput((L.OutputGaussian(2),))
    with pytest.raises(TypeError, match="PerOutput: likelihoods must be a non-empty tuple"):
        L.PerOutput([L.Gaussian()])
    with pytest.raises(ValueError, match="3"):
        gd.Model(ICM, L.PerOutput((L.Gaussian(), L.Gaussian(), L.Bernoulli())), inference=gd.inference.Laplace())
    with pytest.raises(ValueError, match="PerOutput: X must be|integer in 0..1|output"):
        mixed.for_rows(np.column_stack([x, np.full(N, 2.0)]))


def test_single_output_likelihoods_are_their_own_rows():
    """for_rows is the identity of every other likelihood, and a Bound keeps its prefix."""
    lik = L.Bernoulli()
    assert lik.for_rows(X) is lik
    values = {"likelihood.0.variance": 0.2, "likelihood.1.bias": 0.1}
    rows = bind(CASES["bernoulli"][0], values, "likelihood").for_rows(X)
    grads = rows.log_density_param_derivatives(np.ones(N), np.zeros(N))
    assert set(grads) == {"likelihood.0.variance", "likelihood.1.bias"}
    np.testing.assert_array_equal(grads["likelihood.1.bias"][0][:N // 2], 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rows.describe() == "PerOutput(Gaussian, Bernoulli(probit))"


def test_joint_latent_log_posterior_gradient_matches_central_differences():
    """Model.sample(latent="joint")'s target with a Gaussian and a Bernoulli output: the
    likelihood of the training rows (for_rows) inside the joint log posterior; its gradient in the
    hyperparameters and the latent whitened values equals central differences."""
    from gpdsl.latent_joint import JointLogPosterior
    _, y_raw, _ = CASES["bernoulli"]
    likelihood = L.PerOutput((L.Gaussian(gd.priors.HalfNormal(1.0)), L.Bernoulli(bias=gd.priors.Normal(0.0, 1.0))))
    model = gd.Model(ICM, likelihood, inference=gd.inference.Laplace())
    table = model.parameter_table(X, None, ("kernel.W", "kernel.kappa", "kernel.kernel.lengthscale",
                                            "kernel.kernel.variance"))
    logp = JointLogPosterior(model, table, X, likelihood.for_rows(X).coded_targets(y_raw, N))
    w = logp.start() + np.random.default_rng(3).uniform(-0.5, 0.5, logp.size)
    value, grad = logp(w)
    assert np.isfinite(value)
    np.testing.assert_allclose(grad, central_difference(lambda v: logp(v)[0], w, step=1e-6), rtol=1e-5, atol=1e-6)


def test_fit_checks_read_the_rows_parts():
    """The fit's constant-model flag and its evidence-bound check ask the rows' likelihood
    (for_rows): each part's constant model and sum_n max_f log p on its own rows, summed. Parts
    all alike give the shared likelihood's numbers, the flag is raised for a fit that collapsed to
    f = 0 as it is for the shared likelihood, and mixed parts sum their own by rows."""
    Y = (np.random.default_rng(0).uniform(size=(40, 2)) < 0.5).astype(float)
    X1 = np.random.default_rng(1).uniform(0, 10, (40, 1))
    flat = gd.kernels.ICM(gd.kernels.SquaredExponential(1.0, 1e-6), 2, W=np.full((2, 1), 1e-3),
                          kappa=np.full(2, 1e-6))
    for likelihood in (L.Bernoulli("probit"), L.PerOutput((L.Bernoulli("probit"), L.Bernoulli("probit")))):
        with pytest.warns(gd.ConvergenceWarning, match="no better than the constant model"):
            post = gd.Model(flat, likelihood, inference=gd.inference.Laplace()).fit(X1, Y, optimize=False)
        assert post.constant_model
    counts = np.array([1.0, 0.0, 3.0, 2.0, 0.0, 5.0])
    rows = np.column_stack([np.arange(6.0), [0, 0, 0, 1, 1, 1]])
    poisson = L.Poisson(link="log").bind()
    both = L.PerOutput((L.Poisson(link="log"), L.Poisson(link="log"))).bind().for_rows(rows)
    assert both.log_density_bound(counts) == pytest.approx(poisson.log_density_bound(counts), rel=1e-14)
    mixed = L.PerOutput((L.Gaussian(0.5), L.Poisson(link="log"))).bind().for_rows(rows)
    gaussian = L.Gaussian(0.5).bind()
    for operation in ("log_density_bound", "constant_model_log_likelihood"):
        parts = [getattr(gaussian, operation)(counts[:3]), getattr(poisson, operation)(counts[3:])]
        expected = None if None in parts else sum(parts)
        assert getattr(mixed, operation)(counts) == (pytest.approx(expected, rel=1e-14) if expected is not None
                                                     else None)
