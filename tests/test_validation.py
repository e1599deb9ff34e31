"""Bad input raises a clear error naming the argument, before any work."""
import numpy as np
import pytest

import gpdsl as gd

SE = gd.kernels.SquaredExponential
X = np.random.default_rng(0).normal(size=(20, 2))
y = X[:, 0] - X[:, 1]


def _model(inducing=None, inference=None):
    return gd.Model(kernel=SE(1.0, 1.0), likelihood=gd.likelihoods.Gaussian(0.1),
                    inducing=inducing or gd.inducing.Subsample(5), inference=inference or gd.inference.VFE())


@pytest.mark.parametrize("Xbad,ybad,match", [
    (np.where(np.eye(20, 2) > 0, np.nan, X), y, "X must be finite"),
    (X, np.where(np.arange(20) == 3, np.inf, y), "y must be finite"),
    (X[:, 0], y, "X must be 2-D"),
    (X, y[:-1], r"len\(y\) = 19 does not match len\(X\) = 20"),
    (X, np.c_[y, y], "y must be 1-D"),
    ("abc", y, "X must be a numeric array"),
])
def test_bad_data(Xbad, ybad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        _model().fit(Xbad, ybad)


def test_bad_inducing():
    with pytest.raises(ValueError, match="Fixed: Z has 3 columns but X has 2 features"):
        _model(inducing=gd.inducing.Fixed(np.zeros((4, 3)))).fit(X, y)
    with pytest.raises(ValueError, match="Subsample: m = 21 inducing points is larger than the N = 20"):
        _model(inducing=gd.inducing.Subsample(21)).fit(X, y)
    with pytest.raises(ValueError, match="KMeans: m = 30 inducing points is larger"):
        _model(inducing=gd.inducing.KMeans(30)).fit(X, y)
    with pytest.raises(ValueError, match="KMeans: m must be a positive integer"):
        gd.inducing.KMeans(0)
    with pytest.raises(ValueError, match="Fixed: Z must be finite"):
        gd.inducing.Fixed(np.full((2, 2), np.nan))
    with pytest.raises(ValueError, match="Fixed: Z must be a 2-D array"):
        gd.inducing.Fixed(np.zeros(3))


def test_bad_components():
    with pytest.raises(ValueError, match="Gaussian: variance must be positive"):
        gd.likelihoods.Gaussian(-0.1)
    with pytest.raises(TypeError, match="Model: kernel must be a gd.kernels kernel"):
        gd.Model(kernel="SE", likelihood=gd.likelihoods.Gaussian(0.1))
    with pytest.raises(TypeError, match="VFE needs an inducing spec"):
        gd.Model(kernel=SE(), likelihood=gd.likelihoods.Gaussian(0.1), inference=gd.inference.VFE())
    with pytest.raises(ValueError, match="Exact inference uses no inducing points"):
        gd.Model(kernel=SE(), likelihood=gd.likelihoods.Gaussian(0.1), inducing=gd.inducing.Subsample(3))
    with pytest.raises(ValueError, match=r"HeteroscedasticGaussian with FITC is not supported; supported pairs: "
                                         r"Bernoulli \+ EP, .*Gaussian \+ Exact"):
        gd.Model(kernel=SE(), likelihood=gd.likelihoods.HeteroscedasticGaussian(degree=1),
                 inducing=gd.inducing.Subsample(3), inference=gd.inference.FITC())
    with pytest.raises(ValueError, match="VFE: jitter must be None"):
        gd.inference.VFE(jitter=-1.0)
    with pytest.raises(TypeError, match="give exactly one of variance="):
        gd.likelihoods.HeteroscedasticGaussian()
    with pytest.raises(ValueError, match=r"HeteroscedasticGaussian: variance must have shape \(20,\)"):
        gd.Model(kernel=SE(), likelihood=gd.likelihoods.HeteroscedasticGaussian(variance=np.ones(5))).fit(X, y)
    with pytest.raises(ValueError, match="Gamma: rate must be a positive"):
        gd.priors.Gamma(1.0, 0.0)
    with pytest.raises(ValueError, match="fit: restarts must be a non-negative integer"):
        _model().fit(X, y, restarts=-1)


def test_bad_prediction_inputs():
    post = _model().fit(X, y, optimize=False)
    with pytest.raises(ValueError, match="X_new has 3 features but the model was fitted on 2"):
        post.predict(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="X_new must be finite"):
        post.predict(np.full((2, 2), np.nan))
    with pytest.raises(ValueError, match=r"len\(y_new\) = 3 does not match len\(X\) = 2"):
        post.to_inference_data(np.zeros((2, 2)), np.zeros(3))


def test_jitter_ladder_handles_duplicate_inducing_inputs():
    Z = np.vstack([X[:4], X[:1]])        # a duplicated row makes K_uu singular
    post = _model(inducing=gd.inducing.Fixed(Z)).fit(X, y, optimize=False)
    assert post.jitter > 0
    assert post.to_xarray().attrs["jitter"] == post.jitter
    assert np.isfinite(post.log_evidence)
    with pytest.raises(gd.NotPositiveDefiniteError, match="Cholesky of K_uu failed with jitter up to 0"):
        _model(inducing=gd.inducing.Fixed(Z), inference=gd.inference.VFE(jitter=0.0)).fit(X, y, optimize=False)


def test_cholesky_ladder_gives_up_with_an_error():
    from gpdsl.linalg import cholesky
    with pytest.raises(gd.NotPositiveDefiniteError, match="failed with jitter up to 0.01"):
        cholesky(np.array([[1.0, 0.0], [0.0, -5.0]]))
    L, jitter = cholesky(np.ones((3, 3)))
    assert 0 < jitter <= 1e-2


def test_ladder_retries_when_B_fails_after_K_uu_factorises():
    """K_uu of 20 k-means centres on [0, 6] with lengthscale 1 factorises without jitter but is
    too ill-conditioned for B = I + L^-1 P L^-T; the ladder must move on instead of failing."""
    X, y = gd.datasets.snelson_like(200, seed=0)
    model = gd.Model(kernel=SE(1.0, 1.0), likelihood=gd.likelihoods.Gaussian(0.1),
                     inducing=gd.inducing.KMeans(20, seed=0), inference=gd.inference.VFE())
    post = model.fit(X, y)
    assert np.isfinite(post.log_evidence) and post.converged
