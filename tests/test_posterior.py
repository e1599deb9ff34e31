"""Posterior as xarray, netCDF round trip, ArviZ InferenceData, model files."""
import warnings

import arviz as az
import numpy as np
import pytest

import gpdsl as gd

SE = gd.kernels.SquaredExponential


@pytest.fixture(scope="module")
def data():
    X, y = gd.datasets.snelson_like(120, seed=0)
    Xt, yt = gd.datasets.snelson_like(40, seed=1)
    return X, y, Xt, yt


MODELS = {
    "exact": gd.Model(kernel=SE(np.array([1.0]), 1.0), likelihood=gd.likelihoods.Gaussian(0.1)),
    "vfe": gd.Model(kernel=SE(1.0, 1.0), likelihood=gd.likelihoods.Gaussian(0.1),
                    inducing=gd.inducing.KMeans(12, seed=0), inference=gd.inference.VFE()),
    "fitc-sum": gd.Model(kernel=SE(1.0, gd.priors.Gamma(2.0, 2.0)) + gd.kernels.Matern32(2.0, 0.1),
                         likelihood=gd.likelihoods.Gaussian(gd.Fixed(0.1)),
                         inducing=gd.inducing.Optimized(gd.inducing.Subsample(10, seed=2)),
                         inference=gd.inference.FITC(jitter=1e-6)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_netcdf_round_trip_predicts_identically(data, tmp_path, name):
    X, y, Xt, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        post = MODELS[name].fit(X, y, max_iter=200)
    path = tmp_path / "fit.nc"
    post.save(path)
    loaded = gd.load(path)
    a, b = post.predict(Xt), loaded.predict(Xt)
    for var in ("f_mean", "f_var", "y_mean", "y_var"):
        np.testing.assert_array_equal(a[var].values, b[var].values)
    assert loaded.log_evidence == post.log_evidence
    assert loaded.model.to_dict() == post.model.to_dict()
    assert loaded.priors == post.priors and loaded.fixed == post.fixed


def test_to_xarray_layout(data):
    X, y, _, _ = data
    post = MODELS["vfe"].fit(X, y)
    ds = post.to_xarray()
    assert ds["Z"].dims == ("inducing", "feature") and ds.sizes["inducing"] == 12
    assert ds["q_mean"].dims == ("inducing",)
    assert ds["q_cov"].dims == ("inducing", "inducing_bis")
    for key in ("kernel.lengthscale", "kernel.variance", "likelihood.variance"):
        assert float(ds[key]) == pytest.approx(float(post.values[key]))
    for key in ("inference", "likelihood", "kernel", "log_evidence", "converged", "n_iterations", "jitter",
                "gpdsl_version"):
        assert key in ds.attrs
    assert ds.attrs["inference"] == "VFE" and ds.attrs["log_evidence"] == post.log_evidence
    exact = MODELS["exact"].fit(X, y)
    assert exact.to_xarray()["kernel.lengthscale"].dims == ("feature",)
    # q(u) is consistent with prediction at the inducing inputs (mean) for the sparse method.
    pred = post.predict(post.state.Z)
    np.testing.assert_allclose(pred.f_mean, ds["q_mean"], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(pred.f_var, np.diag(ds["q_cov"]), rtol=1e-5, atol=1e-8)


def test_inference_data_and_model_comparison(data):
    X, y, Xt, yt = data
    vfe = MODELS["vfe"].fit(X, y)
    exact = MODELS["exact"].fit(X, y)
    idata = vfe.to_inference_data(Xt, yt, draws=400, seed=0)
    for group in ("posterior", "posterior_predictive", "log_likelihood", "observed_data", "constant_data"):
        assert hasattr(idata, group), group
    assert idata.posterior["f"].dims == ("chain", "draw", "obs")
    assert idata.posterior["f"].shape == (4, 400, 40)
    # Draws follow the predictive: sample mean and variance within Monte Carlo error.
    pred = vfe.predict(Xt)
    f = idata.posterior["f"].values.reshape(-1, 40)
    np.testing.assert_allclose(f.mean(0), pred.f_mean, atol=5 * np.sqrt(pred.f_var.values.max() / 1600))
    np.testing.assert_allclose(f.var(0), pred.f_var, rtol=0.15)
    loo = az.loo(idata)
    assert np.isfinite(loo.elpd_loo if hasattr(loo, "elpd_loo") else loo.elpd)   # ArviZ 1.x: elpd
    comparison = az.compare({"vfe": idata, "exact": exact.to_inference_data(Xt, yt, draws=400, seed=0)})
    assert set(comparison.index) == {"vfe", "exact"}
    summary = az.summary(idata, var_names=["f"])
    assert summary.shape[0] == 40
    np.testing.assert_allclose(summary["mean"], pred.f_mean, atol=0.05)


def test_model_dict_and_toml(tmp_path):
    model = gd.Model(kernel=SE(lengthscale=gd.priors.LogNormal(0.0, 1.0), variance=gd.Fixed(2.0)),
                     likelihood=gd.likelihoods.Gaussian(0.1),
                     inducing=gd.inducing.Optimized(gd.inducing.KMeans(8, seed=3)), inference=gd.inference.VFE(1e-6))
    assert gd.Model.from_dict(model.to_dict()) == model
    toml = tmp_path / "model.toml"
    toml.write_text("""
[kernel]
type = "Matern52"
lengthscale = [1.0, 2.0]
variance = {fixed = 1.5}
[likelihood]
type = "Gaussian"
variance = {prior = "Gamma", shape = 2.0, rate = 20.0}
[inducing]
type = "KMeans"
m = 16
seed = 1
[inference]
type = "FITC"
jitter = 1e-6
""")
    parsed = gd.Model.from_toml(toml)
    assert parsed == gd.Model(kernel=gd.kernels.Matern52([1.0, 2.0], gd.Fixed(1.5)),
                              likelihood=gd.likelihoods.Gaussian(gd.priors.Gamma(2.0, 20.0)),
                              inducing=gd.inducing.KMeans(16, seed=1), inference=gd.inference.FITC(jitter=1e-6))
    with pytest.raises(ValueError, match="kernel: unknown type 'RBF'; known: .*Matern32"):
        gd.Model.from_dict({"kernel": {"type": "RBF"}, "likelihood": {"type": "Gaussian"}})
    with pytest.raises(FileNotFoundError, match="model file not found"):
        gd.Model.from_toml(tmp_path / "missing.toml")


def test_logit_log_predictive_finite_for_confident_predictions():
    """Separable data, test points far out: p(y* = -1) is about e^-36 and e^-51.  Before log-space
    evaluation, p rounded above 1 and log(1 - p) was NaN."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.uniform(-60, -1, 60), rng.uniform(1, 60, 60)][:, None]
    y = np.r_[-np.ones(60), np.ones(60)]
    post = gd.Model(gd.kernels.SquaredExponential(10.0, 100.0), gd.likelihoods.Bernoulli(link="logit"),
                    gd.inducing.GreedyVariance(m=20), gd.inference.PolyaGamma()).fit(X, y)
    Xs = np.array([[40.0], [60.0]])
    p = post.predict(Xs)["p"].values
    assert np.all((p >= 0.0) & (p <= 1.0))
    wrong = post.log_predictive(Xs, [0, 0])
    right = post.log_predictive(Xs, [1, 1])
    assert np.all(np.isfinite(wrong)) and np.all(wrong < -30.0), wrong
    np.testing.assert_allclose(np.exp(wrong) + np.exp(right), 1.0, atol=1e-15)
    # against the integral itself: log E[sigma(-(f + bias))] with f ~ N(mean, var), scaled at its peak
    mean, var = post.predict_f(Xs)
    mean = mean + float(post.values["likelihood.bias"])
    for i in range(2):
        sd = np.sqrt(var[i])
        grid = np.linspace(mean[i] - 40 * sd, mean[i] + 40 * sd, 400001)
        log_integrand = -np.logaddexp(0.0, grid) - 0.5 * ((grid - mean[i]) / sd) ** 2 - np.log(sd * np.sqrt(2 * np.pi))
        top = log_integrand.max()
        ref = top + np.log(np.trapezoid(np.exp(log_integrand - top), grid))
        assert wrong[i] == pytest.approx(ref, rel=1e-8)
