"""gpdsl.sklearn.GPRegressor with a multi-output kernel (issue 48): the isotopic layout (Y (N, P),
NaN = missing) and the heterotopic ones (long rows X (n, D+1) with the output index last, lists of
per-output arrays), predictions at (n, D) -> (n, P) and at (n, D+1) -> (n,), the R² averaged over
outputs, GridSearchCV / cross_val_score / Pipeline, parameters, and the refusals.

The numbers are compared with ``Model.fit``'s posterior on the same data (to 1e-10), with a dense
NumPy GP on the long rows (tests/naive.py's ICM Gram) at fixed hyperparameters, and with R²
computed from its formula.
"""
import warnings

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn", minversion="1.6")

import gpdsl as gd  # noqa: E402
from gpdsl.sklearn import GPRegressor  # noqa: E402
from naive import coregion_matrix, icm_gram, stationary_point  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

P = 2
TOL = dict(rtol=1e-10, atol=1e-10)


def icm(rank=1):
    return gd.kernels.ICM(gd.kernels.SquaredExponential(lengthscale=[1.0, 1.5], variance=1.0), P, rank=rank,
                          W=np.full((P, rank), 0.7), kappa=[0.2, 0.3])


def regressor(**options):
    options.setdefault("random_state", 0)
    return GPRegressor(kernel=icm(options.pop("rank", 1)), likelihood=gd.likelihoods.OutputGaussian(P, [0.05, 0.1]),
                       **options)


@pytest.fixture(scope="module")
def data():
    """Two correlated outputs of two inputs, 30 rows, 20 % of Y missing (never a whole row)."""
    rng = np.random.default_rng(48)
    X = rng.uniform(-2.0, 2.0, (30, 2))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1]
    Y = np.column_stack([f, 0.8 * f + 0.3 * np.cos(2 * X[:, 0])]) + 0.1 * rng.standard_normal((30, P))
    missing = rng.random((30, P)) < 0.2
    missing[missing.all(axis=1), 0] = False
    Y[missing] = np.nan
    X_test = rng.uniform(-2.0, 2.0, (7, 2))
    return X, Y, X_test


def long_rows(X, Y):
    """The long layout of isotopic (X, Y), output-major, NaN entries dropped (by hand)."""
    rows = [(np.append(X[i], p), Y[i, p]) for p in range(Y.shape[1]) for i in range(len(X)) if not np.isnan(Y[i, p])]
    return np.array([r for r, _ in rows]), np.array([t for _, t in rows])


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        return fn(*args, **kwargs)


# -- numbers ---------------------------------------------------------------------------------------
def test_isotopic_fit_equals_model_fit(data):
    X, Y, X_test = data
    est = quiet(regressor(max_iter=40).fit, X, Y)
    post = quiet(gd.Model(icm(), gd.likelihoods.OutputGaussian(P, [0.05, 0.1])).fit, X, Y, seed=0, max_iter=40)
    assert est.layout_ == "isotopic" and est.n_features_in_ == 2 and est.n_outputs_ == P
    for name, value in post.values.items():
        np.testing.assert_allclose(est.hyperparameters_[name], value, **TOL)
    f_mean, f_var = post.predict_f(X_test)
    mean, std = est.predict(X_test, return_std=True)
    assert mean.shape == std.shape == (7, P)
    np.testing.assert_allclose(mean, f_mean, **TOL)
    np.testing.assert_allclose(std, np.sqrt(f_var), **TOL)
    _, cov = est.predict(X_test, return_cov=True)
    np.testing.assert_allclose(cov, post.predict_f_full_cov(X_test)[1], **TOL)
    assert cov.shape == (7, P, 7, P)
    noisy = est.set_params(include_noise=True)
    y_var = np.asarray(post.predict(X_test)["y_var"])
    np.testing.assert_allclose(noisy.predict(X_test, return_std=True)[1], np.sqrt(y_var), **TOL)
    cov_y = noisy.predict(X_test, return_cov=True)[1].reshape(7 * P, 7 * P)
    np.testing.assert_allclose(np.diag(cov_y), y_var.ravel(), **TOL)
    np.testing.assert_allclose(cov_y - np.diag(np.diag(cov_y)), cov.reshape(7 * P, 7 * P) -
                               np.diag(np.diag(cov.reshape(7 * P, 7 * P))), **TOL)


def test_lmc_and_the_sparse_default_equal_model_fit(data):
    """An LMC kernel, and the VFE + k-means default above ``exact_max_n`` long rows, fit as
    ``Model.fit`` does on the same data."""
    X, Y, X_test = data
    lmc = gd.kernels.LMC((gd.kernels.SquaredExponential(), gd.kernels.Matern32(lengthscale=3.0)), P)
    est = quiet(GPRegressor(lmc, gd.likelihoods.OutputGaussian(P), max_iter=20, random_state=0).fit, X, Y)
    post = quiet(gd.Model(lmc, gd.likelihoods.OutputGaussian(P)).fit, X, Y, seed=0, max_iter=20)
    f_mean, f_var = post.predict_f(X_test)
    mean, std = est.predict(X_test, return_std=True)
    np.testing.assert_allclose(mean, f_mean, **TOL)
    np.testing.assert_allclose(std, np.sqrt(f_var), **TOL)
    sparse = regressor(optimize=False)
    sparse.exact_max_n, sparse.default_inducing = 20, 10
    sparse.fit(X, Y)
    assert isinstance(sparse.model_.inference, gd.inference.VFE)
    assert sparse.model_.inducing == gd.inducing.KMeans(10, seed=0)
    post = gd.Model(icm(), gd.likelihoods.OutputGaussian(P, [0.05, 0.1]), gd.inducing.KMeans(10, seed=0),
                    gd.inference.VFE()).fit(X, Y, optimize=False)
    np.testing.assert_allclose(sparse.predict(X_test), post.predict_f(X_test)[0], **TOL)


def test_isotopic_with_nan_equals_a_dense_gp_on_the_observed_entries(data):
    """At the declared hyperparameters, the (n, D) predictions are the dense GP's on the long rows of
    the observed entries only: NaN entries are left out, not imputed."""
    X, Y, X_test = data
    est = regressor(optimize=False).fit(X, Y)
    X_long, y_long = long_rows(X, Y)
    base = stationary_point([1.0, 1.5], 1.0, "se")
    W, kappa = np.full((P, 1), 0.7), [0.2, 0.3]
    X_star = np.array([np.append(x, p) for x in X_test for p in range(P)])      # point-major
    K = icm_gram(X_long, X_long, W, kappa, base) + np.diag(np.array([0.05, 0.1])[X_long[:, -1].astype(int)])
    Ks = icm_gram(X_star, X_long, W, kappa, base)
    mean = Ks @ np.linalg.solve(K, y_long)
    cov = icm_gram(X_star, X_star, W, kappa, base) - Ks @ np.linalg.solve(K, Ks.T)
    np.testing.assert_allclose(est.predict(X_test), mean.reshape(7, P), **TOL)
    np.testing.assert_allclose(est.predict(X_test, return_cov=True)[1].reshape(7 * P, 7 * P), cov, **TOL)
    np.testing.assert_allclose(est.predict(X_star), mean, **TOL)                # one output a row
    assert np.allclose(coregion_matrix(W, kappa), est.kernel.W @ est.kernel.W.T + np.diag(est.kernel.kappa))


def test_long_and_list_layouts_equal_the_isotopic_fit(data):
    X, Y, X_test = data
    iso = quiet(regressor(max_iter=40).fit, X, Y)
    X_long, y_long = long_rows(X, Y)
    long = quiet(regressor(max_iter=40).fit, X_long, y_long)
    Xs = [X[~np.isnan(Y[:, p])] for p in range(P)]
    ys = [Y[~np.isnan(Y[:, p]), p] for p in range(P)]
    lists = quiet(regressor(max_iter=40).fit, Xs, ys)
    assert (long.layout_, long.n_features_in_) == ("long", 3) and (lists.layout_, lists.n_features_in_) == ("long", 3)
    X_star = np.column_stack([np.repeat(X_test, P, axis=0), np.tile(np.arange(P), 7)])
    for est in (long, lists):
        np.testing.assert_allclose(est.predict(X_test), iso.predict(X_test), **TOL)
        np.testing.assert_allclose(est.predict(X_star), iso.predict(X_test).ravel(), **TOL)
        np.testing.assert_allclose(est.predict(X_star, return_std=True)[1],
                                   iso.predict(X_test, return_std=True)[1].ravel(), **TOL)
        assert est.predict(X_star).shape == (7 * P,)
    # score: the same number from either layout of the same data
    np.testing.assert_allclose(long.score(X_long, y_long), iso.score(X, Y), **TOL)


def r2_by_formula(y, pred):
    return 1.0 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2)


def test_score_is_the_r2_of_each_output_averaged_over_outputs(data):
    X, Y, X_test = data
    est = regressor(optimize=False).fit(X, Y)
    pred = est.predict(X)
    expected = np.mean([r2_by_formula(Y[~np.isnan(Y[:, p]), p], pred[~np.isnan(Y[:, p]), p]) for p in range(P)])
    np.testing.assert_allclose(est.score(X, Y), expected, **TOL)
    # weights: each output's weighted R²; a weight of 0 leaves the row out
    w = np.ones(len(X))
    w[:5] = 0.0
    kept = np.mean([r2_by_formula(Y[5:][~np.isnan(Y[5:, p]), p], pred[5:][~np.isnan(Y[5:, p]), p]) for p in range(P)])
    np.testing.assert_allclose(est.score(X, Y, sample_weight=w), kept, **TOL)
    # an output with under two targets is left out of the average
    one = Y.copy()
    one[:, 1] = np.nan
    one[0, 1] = 1.0
    np.testing.assert_allclose(est.score(X, one), r2_by_formula(Y[~np.isnan(Y[:, 0]), 0],
                                                                 pred[~np.isnan(Y[:, 0]), 0]), **TOL)


def test_sample_y_is_one_joint_draw_over_points_and_outputs(data):
    X, Y, X_test = data
    est = regressor(optimize=False).fit(X, Y)
    draws = est.sample_y(X_test, n_samples=3, random_state=5)
    assert draws.shape == (7, P, 3)
    mean, cov = est.predict(X_test, return_cov=True)
    expected = np.random.RandomState(5).multivariate_normal(mean.ravel(), cov.reshape(7 * P, 7 * P), 3).T
    np.testing.assert_allclose(draws, expected.reshape(7, P, 3), **TOL)


# -- model selection and pipelines ------------------------------------------------------------------
def test_grid_search_over_icm_rank_and_cross_val_score(data):
    X, Y, _ = data
    folds = KFold(3, shuffle=True, random_state=0)
    # W and kappa at ICM's default start, which follows the rank (a declared W fixes it)
    start = GPRegressor(gd.kernels.ICM(gd.kernels.SquaredExponential(), P), gd.likelihoods.OutputGaussian(P),
                        max_iter=15, random_state=0)
    search = quiet(GridSearchCV(start, {"kernel__rank": [1, 2]}, cv=folds).fit, X, Y)
    assert search.best_estimator_.kernel.rank == search.best_params_["kernel__rank"]
    assert search.best_estimator_.posterior_.values["kernel.W"].shape == (P, search.best_params_["kernel__rank"])
    for i, rank in enumerate([1, 2]):
        manual = []
        for train, test in folds.split(X):
            est = quiet(clone(start).set_params(kernel__rank=rank).fit, X[train], Y[train])
            manual.append(est.score(X[test], Y[test]))
        np.testing.assert_allclose(search.cv_results_["mean_test_score"][i], np.mean(manual), **TOL)
        if rank == 1:
            scores = quiet(cross_val_score, start, X, Y, cv=folds)
            np.testing.assert_allclose(scores, manual, **TOL)


def test_pipeline_scales_x_of_the_isotopic_layout(data):
    X, Y, X_test = data
    pipe = make_pipeline(StandardScaler(), regressor(optimize=False)).fit(X, Y)
    scaler = StandardScaler().fit(X)
    direct = regressor(optimize=False).fit(scaler.transform(X), Y)
    np.testing.assert_allclose(pipe.predict(X_test), direct.predict(scaler.transform(X_test)), **TOL)
    np.testing.assert_allclose(pipe.score(X, Y), direct.score(scaler.transform(X), Y), **TOL)


def test_pipeline_on_long_rows_must_leave_the_output_column(data):
    X, Y, X_test = data
    X_long, y_long = long_rows(X, Y)
    with pytest.raises(ValueError, match=r"GPRegressor.fit: X's last column is the output index"):
        make_pipeline(StandardScaler(), regressor(optimize=False)).fit(X_long, y_long)
    keep = ColumnTransformer([("x", StandardScaler(), slice(0, 2))], remainder="passthrough")
    pipe = make_pipeline(keep, regressor(optimize=False)).fit(X_long, y_long)
    scaler = StandardScaler().fit(X_long[:, :2])
    direct = regressor(optimize=False).fit(np.column_stack([scaler.transform(X_long[:, :2]), X_long[:, 2]]), y_long)
    X_star = np.column_stack([X_test, np.arange(7) % P])
    expected = direct.predict(np.column_stack([scaler.transform(X_test), X_star[:, 2]]))
    np.testing.assert_allclose(pipe.predict(X_star), expected, **TOL)


# -- parameters, tags ------------------------------------------------------------------------------
def test_params_clone_round_trip_and_tags(data):
    X, Y, _ = data
    est = regressor(rank=2)
    deep = est.get_params()
    assert deep["kernel__rank"] == 2 and deep["kernel__output_count"] == P
    np.testing.assert_array_equal(deep["kernel__kernel__lengthscale"], [1.0, 1.5])
    np.testing.assert_array_equal(deep["likelihood__variance"], [0.05, 0.1])
    est.set_params(kernel__kernel__lengthscale=2.0, likelihood__variance=[0.2, 0.3])
    assert est.kernel.kernel.lengthscale == 2.0 and est.kernel.rank == 2
    np.testing.assert_array_equal(est.likelihood.variance, [0.2, 0.3])
    fitted = regressor(optimize=False).fit(X, Y)
    other = clone(fitted)
    assert not hasattr(other, "posterior_") and other.kernel == fitted.kernel and other.kernel is not fitted.kernel
    np.testing.assert_allclose(other.fit(X, Y).predict(X), fitted.predict(X), **TOL)
    assert regressor().__sklearn_tags__().target_tags.multi_output
    assert not GPRegressor().__sklearn_tags__().target_tags.multi_output


# -- refusals --------------------------------------------------------------------------------------
@pytest.mark.parametrize("case, match", [
    ("width", r"GPRegressor.fit: Y has 3 columns but the kernel has P = 2"),
    ("all_nan", r"GPRegressor.fit: Y's column\(s\) \[1\] are all NaN"),
    ("inf", r"GPRegressor.fit: Y must be finite or NaN"),
    ("rows", r"Found input variables with inconsistent numbers of samples"),
    ("index", r"GPRegressor.fit: X's last column is the output index"),
    ("range", r"GPRegressor.fit: X's last column is the output index"),
    ("narrow", r"GPRegressor.fit: a multi-output model's X is \(N, D\) with Y"),
    ("lists", r"GPRegressor.fit: X is a list of 3 arrays but the kernel has P = 2"),
    ("single", r"GPRegressor.fit: y has shape \(30, 2\).*multi-output kernel"),
])
def test_fit_refusals(data, case, match):
    X, Y, _ = data
    X_long, y_long = long_rows(X, Y)
    bad_index, bad_range = X_long.copy(), X_long.copy()
    bad_index[0, -1] = 0.5
    bad_range[0, -1] = 2.0
    Y_nan, Y_inf = Y.copy(), Y.copy()
    Y_nan[:, 1] = np.nan
    Y_inf[0, 0] = np.inf
    est = GPRegressor() if case == "single" else regressor(optimize=False)
    args = {"width": (X, np.column_stack([Y, Y[:, 0]])), "all_nan": (X, Y_nan), "inf": (X, Y_inf),
            "rows": (X[:-1], Y), "index": (bad_index, y_long), "range": (bad_range, y_long),
            "narrow": (X[:, :1], y_long[:30]), "lists": ([X, X, X], [Y[:, 0]] * 3), "single": (X, Y)}[case]
    with pytest.raises(ValueError, match=match):
        est.fit(*args)


def test_predict_and_score_refusals(data):
    X, Y, X_test = data
    est = regressor(optimize=False).fit(X, Y)
    with pytest.raises(ValueError, match=r"GPRegressor.predict: X has 4 features; .*\(n, D=2\).*\(n, D\+1=3\)"):
        est.predict(np.ones((3, 4)))
    with pytest.raises(ValueError, match=r"GPRegressor.predict: X's last column is the output index"):
        est.predict(np.column_stack([X_test, np.full(7, 2.0)]))
    with pytest.raises(ValueError, match=r"GPRegressor.score: y must have shape \(30, 2\)"):
        est.score(X, Y[:, 0])
    none = np.full_like(Y, np.nan)
    none[0] = 1.0
    with pytest.raises(ValueError, match="GPRegressor.score: no output has two observed targets"):
        est.score(X, none)
    long_X = np.column_stack([np.repeat(X, 2, axis=0), np.tile([0.0, 1.0], X.shape[0])])
    long_y = Y.reshape(-1).copy()
    long_y[0] = np.nan
    with pytest.raises(ValueError, match=r"GPRegressor.score: y holds NaN, .*only in the isotopic layout"):
        est.score(long_X, long_y)
    with pytest.raises(sklearn.exceptions.NotFittedError):
        regressor().predict(X_test)
