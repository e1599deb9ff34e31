"""fit(standardize=True) and gpdsl.scaling (issue 14 item 8): a fit in standardised units equals
the same fit made by hand on standardised data, with every prediction and the log evidence
mapped back to the data's units; raw columns on very different scales otherwise fit the constant
model, which is now flagged for regression too."""
import warnings

import numpy as np
import pytest

import gpdsl as gd
from gpdsl.scaling import Standardization

import naive

SE = gd.kernels.SquaredExponential


def raw_regression(n=120, seed=0):
    """Boston-like columns: targets of mean ~22, inputs on scales 1e-2, 1e2 and 7e2."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(0, 0.02, n), rng.uniform(0, 100, n), rng.uniform(0, 700, n)])
    y = 22.0 + 4.0 * np.sin(X[:, 2] / 90.0) + 300.0 * X[:, 0] + 0.5 * rng.standard_normal(n)
    return X, y


def _model(inference=None, inducing=None):
    return gd.Model(SE(np.ones(3), 1.0), gd.likelihoods.Gaussian(1.0), inducing=inducing,
                    inference=inference or gd.inference.Exact())


@pytest.mark.parametrize("sparse", [False, True], ids=["Exact", "VFE"])
def test_standardized_fit_equals_the_fit_on_standardized_data(sparse):
    X, y = raw_regression()
    model = _model(gd.inference.VFE(), gd.inducing.KMeans(15, seed=0)) if sparse else _model()
    post = model.fit(X, y, standardize=True)
    scaling = post.standardization
    np.testing.assert_allclose(scaling.x_mean, X.mean(0), rtol=1e-14)
    np.testing.assert_allclose(scaling.x_scale, X.std(0), rtol=1e-14)
    assert scaling.y_mean == pytest.approx(y.mean(), rel=1e-14) and scaling.y_scale == pytest.approx(y.std())
    by_hand = model.fit((X - X.mean(0)) / X.std(0), (y - y.mean()) / y.std())
    # The evidence of the data's targets: the standardised one plus the Jacobian -N log sd(y).
    assert post.log_evidence == pytest.approx(by_hand.log_evidence - y.size * np.log(y.std()), rel=1e-12)
    X_new = raw_regression(7, seed=1)[0]
    S_new = (X_new - X.mean(0)) / X.std(0)
    f_mean, f_var = by_hand.predict_f(S_new)
    pred = post.predict(X_new)
    np.testing.assert_allclose(pred.f_mean, y.mean() + y.std() * f_mean, rtol=1e-12)
    np.testing.assert_allclose(pred.f_var, y.std() ** 2 * f_var, rtol=1e-12)
    noise = float(by_hand.values["likelihood.variance"])
    np.testing.assert_allclose(pred.y_var, y.std() ** 2 * (f_var + noise), rtol=1e-12)
    mean, cov = post.predict_f_full_cov(X_new)
    np.testing.assert_allclose(np.diag(cov), pred.f_var, rtol=1e-10)
    np.testing.assert_allclose(mean, pred.f_mean, rtol=1e-12)
    # log N(y | mean, var) in the data's units, densely.
    y_new = y[:7]
    total = pred.y_var.values
    dense = -0.5 * (np.log(2 * np.pi * total) + (y_new - pred.y_mean.values) ** 2 / total)
    np.testing.assert_allclose(post.log_predictive(X_new, y_new), dense, rtol=1e-12)
    np.testing.assert_allclose(post.inducing_inputs, X.mean(0) + X.std(0) * post.state.Z, rtol=1e-14)


def test_exact_standardized_evidence_is_the_dense_gaussian_of_the_raw_targets():
    """At the fitted values the raw-unit evidence is log N(y | y_mean, s^2 (K + noise I)), with
    K from the standardised inputs: the GP with a constant mean and scaled variances."""
    X, y = raw_regression(40)
    post = _model().fit(X, y, standardize=True)
    s = post.standardization
    v = post.values
    K = naive.kernel(s.inputs(X), s.inputs(X), v["kernel.lengthscale"], float(v["kernel.variance"]), "se")
    dense = naive.exact_lml(s.y_scale ** 2 * K, np.full(40, s.y_scale ** 2 * float(v["likelihood.variance"])),
                            y - s.y_mean)
    assert post.log_evidence == pytest.approx(dense, rel=1e-10)


def test_raw_columns_fit_the_constant_model_and_say_so():
    """The item's reproduction in miniature (raw Boston housing with VFE, KMeans(20): kernel
    variance 0.057, noise 582 ~ mean(y^2) = 584, held-out RMSE 25.0 against a target sd of 9.4;
    standardised 3.6): raw columns give a kernel variance near 0, noise near mean(y^2) and every
    prediction near 0, now with a warning and constant_model=True; standardised, the fit
    explains y."""
    X, y = raw_regression()
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(1.0), gd.inducing.KMeans(10, seed=0),
                     gd.inference.VFE())
    with pytest.warns(gd.ConvergenceWarning, match="no better than the constant model"):
        raw = model.fit(X, y)
    assert raw.constant_model
    assert float(raw.values["likelihood.variance"]) == pytest.approx(np.mean(y * y), rel=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("error", gd.ConvergenceWarning)
        std = model.fit(X, y, standardize=True)
    assert not std.constant_model
    X_test, y_test = raw_regression(50, seed=2)
    def rmse(post):
        return np.sqrt(np.mean((post.predict(X_test).y_mean.values - y_test) ** 2))

    assert rmse(raw) > 5 * y_test.std()         # it predicts ~0 for targets of mean ~25
    assert rmse(std) < 0.8 * y_test.std()


def test_classification_standardizes_inputs_only():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2)) * [1000.0, 0.001]
    y = (X[:, 0] / 1000.0 + X[:, 1] / 0.001 > 0).astype(float)
    model = gd.Model(gd.kernels.SquaredExponential(np.ones(2), 1.0), gd.likelihoods.Bernoulli(),
                     inference=gd.inference.EP())
    post = model.fit(X, y, standardize=True)
    assert post.standardization.y_mean == 0.0 and post.standardization.y_scale == 1.0
    by_hand = model.fit(post.standardization.inputs(X), y)
    assert post.log_evidence == pytest.approx(by_hand.log_evidence, rel=1e-10)
    X_new = rng.normal(size=(5, 2)) * [1000.0, 0.001]
    np.testing.assert_allclose(post.predict(X_new).p, by_hand.predict(post.standardization.inputs(X_new)).p,
                               rtol=1e-10)


def test_standardization_survives_save_and_load(tmp_path):
    X, y = raw_regression()
    post = _model(gd.inference.VFE(), gd.inducing.KMeans(10, seed=0)).fit(X, y, standardize=True)
    post.save(tmp_path / "p.nc")
    back = gd.load(tmp_path / "p.nc")
    assert back.standardization == post.standardization
    X_new = raw_regression(9, seed=3)[0]
    np.testing.assert_array_equal(back.predict(X_new).y_mean, post.predict(X_new).y_mean)
    assert back.log_evidence == post.log_evidence


def test_a_damaged_standardization_is_refused(tmp_path):
    X, y = raw_regression()
    ds = _model().fit(X, y, standardize=True).to_xarray()
    from gpdsl.io.layout import checksum as _checksum
    ds["standardization_x_scale"].values[1] = -1.0
    ds.attrs["checksum"] = _checksum(ds)
    with pytest.raises(gd.PosteriorFileError, match="standardization"):
        gd.from_xarray(ds)
    ds = _model().fit(X, y, standardize=True).to_xarray()
    del ds.attrs["standardization_y_scale"]
    ds.attrs["checksum"] = _checksum(ds)
    with pytest.raises(gd.PosteriorFileError, match="standardization_y_scale"):
        gd.from_xarray(ds)


def test_bad_arguments():
    X, y = raw_regression(20)
    with pytest.raises(TypeError, match="fit: standardize must be True or False"):
        _model().fit(X, y, standardize="yes")
    with pytest.raises(ValueError, match="x_scale finite and positive"):
        Standardization(np.zeros(2), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="y_scale"):
        Standardization(np.zeros(2), np.ones(2), 0.0, -1.0)
    with pytest.raises(ValueError, match=r"\(D,\) arrays of one shape"):
        Standardization(np.zeros(2), np.ones(3))


def test_a_constant_column_keeps_scale_one():
    X, y = raw_regression(30)
    X[:, 1] = 5.0
    s = Standardization.of(X, y)
    assert s.x_scale[1] == 1.0 and np.all(np.isfinite(s.inputs(X)))
