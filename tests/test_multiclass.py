"""K-class classification through the model: the Categorical likelihood's labels and errors, the
model's refusals, and (with the methods) predictions with a class dimension, save/load, ArviZ
and the command line."""
import numpy as np
import pytest

import gpdsl as gd
from gpdsl.likelihoods import Categorical


# -- the likelihood -------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"n_classes": 1}, "n_classes must be an integer >= 2"),
    ({"n_classes": 2.5}, "n_classes must be an integer >= 2"),
    ({"n_classes": True}, "n_classes must be an integer >= 2"),
    ({"n_classes": 3, "link": "probit"}, "link must be one of"),
    ({"n_classes": 3, "link": "robustmax", "epsilon": 1.0}, "epsilon must be a number in"),
    ({"n_classes": 3, "classes": ["a", "b"]}, "classes must be 3 distinct labels"),
    ({"n_classes": 3, "classes": ["a", "b", "a"]}, "classes must be 3 distinct labels"),
])
def test_bad_declarations_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Categorical(**kwargs)


def test_labels_are_coded_in_the_classes_order_and_unseen_labels_are_refused():
    lik = Categorical(3, classes=["setosa", "versicolor", "virginica"])
    np.testing.assert_array_equal(lik.coded_targets(np.array(["virginica", "setosa"]), 2), [2.0, 0.0])
    with pytest.raises(ValueError, match=r"not among the classes .*'rose'"):
        lik.coded_targets(np.array(["rose", "setosa"]), 2)
    with pytest.raises(ValueError, match=r"len\(y\) = 2 does not match len\(X\) = 3"):
        lik.coded_targets(np.array(["setosa", "setosa"]), 3)


def test_codes_must_be_integers_in_range():
    lik = Categorical(3)
    np.testing.assert_array_equal(lik.coded_targets([0, 2, 1], 3), [0.0, 2.0, 1.0])
    for bad in ([0, 3, 1], [0, 1.5, 1], [-1, 0, 1]):
        with pytest.raises(ValueError, match=r"integer class codes 0..2"):
            lik.coded_targets(bad, 3)


def test_labels_other_than_codes_become_the_sorted_classes():
    lik = Categorical(3)
    assert lik.with_labels_of(np.array([0, 2, 1, 2])) is lik
    labelled = lik.with_labels_of(np.array(["b", "c", "a", "b"]))
    assert labelled.classes == ("a", "b", "c")
    assert Categorical(3).with_labels_of(np.array([1, 2, 3])).classes == (1, 2, 3)
    with pytest.raises(ValueError, match="got 2 distinct values"):
        lik.with_labels_of(np.array(["a", "b", "a"]))


@pytest.mark.parametrize("link", ["softmax", "robustmax", "logistic_softmax"])
def test_log_density_is_the_log_of_the_class_probabilities(link):
    lik = Categorical(4, link)
    F = np.random.default_rng(0).normal(size=(50, 4)) * 2.0
    p = lik.class_probabilities(F)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-14)
    for k in range(4):
        np.testing.assert_allclose(lik.log_density(np.full(50, float(k)), F), np.log(p[:, k]), rtol=1e-12)
    # The definitions, written out.
    if link == "softmax":
        want = np.exp(F) / np.exp(F).sum(axis=1, keepdims=True)
    elif link == "logistic_softmax":
        s = 1.0 / (1.0 + np.exp(-F))
        want = s / s.sum(axis=1, keepdims=True)
    else:
        want = np.where(np.argmax(F, axis=1)[:, None] == np.arange(4), 1 - 1e-3, 1e-3 / 3)
    np.testing.assert_allclose(p, want, rtol=1e-12)


def test_samples_follow_the_class_probabilities():
    lik = Categorical(3, "softmax")
    F = np.array([[0.0, 1.0, -1.0]])
    draws = lik.sample(np.repeat(F, 200_000, axis=0), np.random.default_rng(1))
    p = lik.class_probabilities(F)[0]
    freq = np.bincount(draws.astype(int), minlength=3) / draws.size
    np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / draws.size))


def test_constant_model_is_uniform_over_the_classes():
    y = np.array([0.0, 1.0, 2.0, 2.0])
    assert Categorical(3).constant_model_log_likelihood(y) == pytest.approx(-4 * np.log(3), rel=1e-15)
    assert Categorical(3, "robustmax").constant_model_log_likelihood(y) is None


# -- the model's refusals ---------------------------------------------------------------------------
def test_methods_of_one_latent_function_refuse_k_classes():
    kernel = gd.kernels.SquaredExponential()
    for inference, inducing in ((gd.inference.Exact(), None), (gd.inference.EP(), None), (gd.inference.VGP(), None),
                                (gd.inference.VFE(), gd.inducing.KMeans(4))):
        with pytest.raises(ValueError, match="Categorical"):
            gd.Model(kernel, Categorical(3), inducing, inference)


def test_a_mean_function_is_refused_for_k_classes():
    with pytest.raises(ValueError, match="a mean function is for one latent function"):
        gd.Model(gd.kernels.SquaredExponential(), Categorical(3), gd.inducing.KMeans(4), gd.inference.SVGP(),
                 mean=gd.means.Constant())


def test_laplace_with_k_classes_is_dense():
    with pytest.raises(ValueError, match="dense multi-class approximation"):
        gd.Model(gd.kernels.SquaredExponential(), Categorical(3), gd.inducing.KMeans(4), gd.inference.Laplace())


# -- fitted models ----------------------------------------------------------------------------------
def _iris():
    from sklearn.datasets import load_iris
    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, np.array(["setosa", "versicolor", "virginica"])[y]


@pytest.fixture(scope="module")
def iris_laplace():
    X, labels = _iris()
    model = gd.Model(gd.kernels.SquaredExponential(), Categorical(3), inference=gd.inference.Laplace())
    return X, labels, model.fit(X, labels)


def test_labels_become_the_class_coordinate_of_the_predictions(iris_laplace):
    X, labels, post = iris_laplace
    assert post.model.likelihood.classes == ("setosa", "versicolor", "virginica")
    pred = post.predict(X[::25])
    assert pred["p"].dims == ("obs", "class") and pred["f_mean"].dims == ("obs", "class")
    assert list(pred["class"].values) == ["setosa", "versicolor", "virginica"]
    np.testing.assert_allclose(pred["p"].sum("class"), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(pred["label"].values, pred["class"].values[np.argmax(pred["p"].values, axis=1)])
    # Iris is nearly separable: the training labels are predicted (all but a few).
    assert np.mean(post.predict(X)["label"].values == labels) > 0.96
    mean, var = post.predict_f(X[:7])
    assert mean.shape == var.shape == (7, 3)
    lp = post.log_predictive(X[::25], labels[::25])
    picked = pred["p"].values[np.arange(lp.size), post.model.likelihood.coded_targets(labels[::25], lp.size).astype(int)]
    np.testing.assert_allclose(lp, np.log(picked), rtol=1e-10)
    with pytest.raises(ValueError, match="not among the classes"):
        post.log_predictive(X[:2], ["setosa", "rose"])


def test_laplace_posterior_round_trips_and_exports_class_draws(iris_laplace, tmp_path):
    import arviz as az
    X, labels, post = iris_laplace
    post.save(tmp_path / "iris.nc")
    back = gd.load(tmp_path / "iris.nc")
    assert back.model == post.model
    np.testing.assert_array_equal(back.predict(X[:9])["p"].values, post.predict(X[:9])["p"].values)
    assert back.sites.weights.shape == (150, 3)
    idata = post.to_inference_data(X[::10], labels[::10], draws=300, seed=1)
    assert idata.posterior["f"].dims == ("chain", "draw", "obs", "class")
    assert idata.log_likelihood["y"].shape == (4, 300, 15)
    # The draws' class probabilities average to the predictive ones (Monte Carlo, 1200 draws).
    lik = post.model.likelihood
    p_draws = lik.class_probabilities(idata.posterior["f"].values).mean(axis=(0, 1))
    np.testing.assert_allclose(p_draws, post.predict(X[::10])["p"].values, atol=0.03)
    loo = az.loo(idata)
    assert np.isfinite(loo.elpd_loo if hasattr(loo, "elpd_loo") else loo.elpd)   # ArviZ 1.x: elpd


def test_joint_covariance_agrees_with_the_pointwise_one(iris_laplace):
    """predict_f_full_cov's (n, K, n, K) covariance (Laplace couples the classes) has each point's
    (K, K) block and the per-class variances of predict_f (to 1e-10)."""
    X, _, post = iris_laplace
    mean, cov = post.predict_f_full_cov(X[::15])
    f_mean, f_var = post.predict_f(X[::15])
    np.testing.assert_allclose(mean, f_mean, rtol=1e-12, atol=1e-12)
    idx = np.arange(mean.shape[0])
    np.testing.assert_allclose(np.stack([np.diag(cov[i, :, i, :]) for i in idx]), f_var, rtol=1e-10)
    np.testing.assert_allclose(cov.reshape(cov.shape[0] * 3, -1), cov.reshape(cov.shape[0] * 3, -1).T, atol=1e-9)


def test_greedy_selection_weights_sum_the_classes():
    """HGV for K classes: the residual variance k_nn - q_nn is every class's (one kernel, one Z), so
    the criterion sum_k w_nk (k_nn - q_nn) weights it by the classes' summed precisions; the
    classes' pseudo-targets are not one regression's, so GreedyBound gets none."""
    from gpdsl.fitting import _selection_data
    w = np.array([[0.1, 0.2, 0.3], [1.0, 0.0, 0.5]])
    data = _selection_data((w, -w))
    np.testing.assert_allclose(data["weights"], [0.6, 1.5], rtol=1e-15)
    assert data["targets"] is None
    X, labels = _iris()
    model = gd.Model(gd.kernels.SquaredExponential(), Categorical(3, "logistic_softmax"),
                     gd.inducing.GreedyVariance(m=12, weighted=True, reinit=True), gd.inference.PolyaGamma())
    post = model.fit(X, labels)
    assert post.state.Z.shape == (12, 4) and len(post.reinit_history) >= 2
    assert post.log_evidence == pytest.approx(max(r["objective"] for r in post.reinit_history), rel=1e-12)
