"""Robust-max's epsilon as a likelihood hyperparameter (issue 46): ``"likelihood.epsilon"`` in the
model's table, bounded in (0, 1), learnt by a fit unless held (``fit(fixed=...)`` or
``gd.Fixed``), at the bound's stationary point in it after a full-batch fit, and kept by save/load,
model files and ``posterior.values``.  Its gradient against central differences is tested with the
likelihood (tests/test_categorical.py), with SVGP (tests/test_svgp_multiclass.py) and by the
conformance suite (every pair that takes robust-max)."""
import os

import numpy as np
import pytest

import gpdsl as gd
from gpdsl.likelihoods import Categorical
from gpdsl.likelihoods.base import gauss_hermite
from gpdsl.likelihoods.categorical import _robustmax_largest
from gpdsl.sklearn import GPClassifier

SE = gd.kernels.SquaredExponential


def _data(n=60, seed=0):
    """Three overlapping classes in two dimensions: a quarter of the training rows fall in
    another class's region, so the bound's best epsilon is well above 0."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, 2))
    scores = np.column_stack([np.sin(2.0 * X[:, 0]), X[:, 1], -X[:, 0] * X[:, 1]])
    y = np.argmax(scores + 0.4 * rng.standard_normal((n, 3)), axis=1).astype(float)
    return X, y


def _model(epsilon=1e-3, link="robustmax", batch_size=None):
    Z = np.array([[-1.5, -1.5], [-1.5, 1.5], [1.5, -1.5], [1.5, 1.5], [0.0, 0.0], [0.0, 1.0]])
    return gd.Model(SE(1.0, 1.0), Categorical(3, link, epsilon=epsilon), gd.inducing.Fixed(Z),
                    gd.inference.SVGP(batch_size=batch_size))


def test_epsilon_is_a_bounded_entry_of_robustmax_only():
    X, _ = _data()
    Z = _model().inducing.Z

    def entries(model):
        return {e.name: e for e in model.parameter_table(X, Z).entries}

    eps = entries(_model(0.02))["likelihood.epsilon"]
    assert float(eps.value) == 0.02 and eps.bounds == (0.0, 1.0) and not eps.positive
    assert not eps.fixed and eps.prior is None
    assert entries(_model(gd.Fixed(0.02)))["likelihood.epsilon"].fixed
    for link in ("softmax", "logistic_softmax"):
        assert not any(name.startswith("likelihood.") for name in entries(_model(link=link))), link


def test_full_batch_fit_learns_the_stationary_epsilon():
    """After a full-batch fit the learnt epsilon is 1 - mean_n P_n, P_n (the probability that the
    labelled latent is the largest, the bound's own 20-point rule) at the fitted q's marginals at
    the training rows: the bound's stationary point in epsilon, to the optimiser's tolerance
    (measured 4e-7 relative: 0.27010, 12 L-BFGS-B iterations); it moved far from its start 1e-3."""
    X, y = _data()
    post = _model().fit(X, y, max_iter=500)
    eps = float(post.values["likelihood.epsilon"])
    mean, var = post.predict_f(X)
    P = _robustmax_largest(y.astype(np.intp), np.asarray(mean), np.asarray(var), gauss_hermite(20))[0]
    assert eps > 0.1
    assert eps == pytest.approx(1.0 - P.mean(), rel=1e-4)


@pytest.mark.parametrize("how", ["fit", "declared"])
def test_held_epsilon_stays_at_its_start(how):
    """``fit(fixed=("likelihood.epsilon",))`` and ``epsilon=gd.Fixed(...)`` hold it (bit for bit),
    and both give the same fit."""
    X, y = _data()
    if how == "fit":
        post = _model(0.01).fit(X, y, max_iter=15, fixed=("likelihood.epsilon",))
    else:
        post = _model(gd.Fixed(0.01)).fit(X, y, max_iter=15)
    assert float(post.values["likelihood.epsilon"]) == 0.01
    other = _model(0.01).fit(X, y, max_iter=15, fixed=("likelihood.epsilon",))
    assert post.log_evidence == other.log_evidence


def test_minibatch_fit_moves_epsilon():
    """The minibatch steps take its (stochastic) gradient too: from 1e-3 it rises towards the
    bound's best, 1 - mean_n P_n at the fit's q (0.258 here), from below: Adam's steps on its logit
    are ~learning_rate each, and logit(1e-3) is 6.9 from logit(0.26) (measured: 0.0032, 0.011,
    0.056 after 300, 600 and 1,000 steps)."""
    X, y = _data(n=200)
    post = _model(batch_size=64).fit(X, y, max_iter=1000)
    mean, var = post.predict_f(X)
    P = _robustmax_largest(y.astype(np.intp), np.asarray(mean), np.asarray(var), gauss_hermite(20))[0]
    assert 0.02 < float(post.values["likelihood.epsilon"]) < 1.0 - P.mean()


def test_learnt_epsilon_is_saved_loaded_and_shown(tmp_path):
    X, y = _data()
    post = _model().fit(X, y, max_iter=20)
    eps = post.values["likelihood.epsilon"]
    assert np.ndim(eps) == 0 and 1e-3 < float(eps) < 1.0
    assert float(post.to_xarray()["likelihood.epsilon"]) == float(eps)
    post.save(tmp_path / "post.nc")
    back = gd.load(tmp_path / "post.nc")
    assert float(back.values["likelihood.epsilon"]) == float(eps)
    np.testing.assert_array_equal(back.predict(X[:5])["p"].values, post.predict(X[:5])["p"].values)
    # A model declared with the learnt value as its start predicts as the posterior does once bound.
    start = Categorical(3, "robustmax", epsilon=eps)
    assert start.epsilon == float(eps)


@pytest.mark.parametrize("epsilon", [0.02, gd.Fixed(0.05), gd.priors.LogNormal(np.log(0.01), 1.0)])
def test_model_files_round_trip_epsilon(tmp_path, epsilon):
    model = _model(epsilon)
    assert gd.Model.from_dict(model.to_dict()) == model
    path = tmp_path / "model.toml"
    path.write_text(model.to_toml())
    back = gd.Model.from_toml(path)
    assert back == model and back.likelihood.epsilon == model.likelihood.epsilon


@pytest.mark.parametrize("epsilon, error, message", [
    (gd.Fixed(1.0), ValueError, r"epsilon must be a number in \(0, 1\)"),
    (gd.Fixed(0.0), ValueError, r"epsilon must be a number in \(0, 1\)"),
    (-0.1, ValueError, r"epsilon must be a number in \(0, 1\)"),
    (np.array([0.1, 0.2]), ValueError, "epsilon must have at most 0 dimension"),
    ("0.1", TypeError, "epsilon must be a number"),
    (float("nan"), ValueError, "epsilon must be finite"),
])
def test_bad_epsilon_is_refused(epsilon, error, message):
    with pytest.raises(error, match=message):
        Categorical(3, "robustmax", epsilon=epsilon)


def test_classifier_holds_or_learns_epsilon():
    X, y = _data()
    held = GPClassifier(likelihood=Categorical(3, "robustmax"), fixed=("likelihood.epsilon",), max_iter=20).fit(X, y)
    assert float(held.posterior_.values["likelihood.epsilon"]) == 1e-3
    learnt = GPClassifier(likelihood=Categorical(3, "robustmax"), max_iter=20).fit(X, y)
    assert float(learnt.posterior_.values["likelihood.epsilon"]) != 1e-3


def test_classifier_default_holds_epsilon_where_the_pilot_separates_the_classes():
    """``defaults.classifier_likelihood``: robust-max's epsilon ``Fixed(1e-3)`` at a pilot error up
    to ``SEPARATED_ERROR``, learnt above it and where no pilot ran; softmax has none to hold."""
    from gpdsl import defaults
    held = defaults.classifier_likelihood(5, "robustmax", defaults.SEPARATED_ERROR)
    assert held.epsilon == gd.Fixed(1e-3)
    assert defaults.classifier_likelihood(5, "robustmax", defaults.SEPARATED_ERROR + 0.01).epsilon == 1e-3
    assert defaults.classifier_likelihood(5, "robustmax") == Categorical(5, "robustmax")
    assert defaults.classifier_likelihood(5, "softmax", 0.0) == Categorical(5, "softmax")
    X, y = _data()
    clf = GPClassifier(max_iter=20).fit(X[:40], np.where(X[:40, 0] > 0.7, 2, (X[:40, 1] > 0).astype(int)))
    assert clf.link_choice_.link == "robustmax" and clf.link_choice_.pilot_error <= defaults.SEPARATED_ERROR
    assert clf.model_.likelihood.epsilon == gd.Fixed(1e-3)
    assert float(clf.posterior_.values["likelihood.epsilon"]) == 1e-3


# p at X[:5] of OLD_FILE's posterior, predicted by the gpdsl that wrote it (dfce0d2^, epsilon a
# constant of the likelihood): the file's rows are X = default_rng(0).uniform(-2, 2, (60, 2)).
OLD_FILE = os.path.join(os.path.dirname(__file__), "data", "old_files", "robustmax_epsilon_constant.nc")
OLD_P = np.array([[9.5723050594278414e-01, 5.1114174473629542e-04, 4.2257353813478338e-02],
                  [9.7662907930662035e-01, 1.4667067917227218e-02, 8.7028542771511921e-03],
                  [2.8983178352820671e-03, 9.9659315218710831e-01, 5.0753147861179882e-04],
                  [8.7846459691695467e-01, 1.2103438696396442e-01, 5.0001762010031339e-04],
                  [2.3160820791601634e-03, 9.9697291501476804e-01, 7.1000440707062631e-04]])


def test_a_file_saved_while_epsilon_was_a_constant_loads_with_it_held(tmp_path):
    """A robust-max posterior saved at format version 2 has no likelihood.epsilon variable: it loads
    with the value its model declared (1e-3), listed as held, and predicts what it predicted then;
    saved again, it is a version-3 file with the variable."""
    post = gd.load(OLD_FILE)
    assert float(post.values["likelihood.epsilon"]) == 1e-3 and "likelihood.epsilon" in post.fixed
    X = np.random.default_rng(0).uniform(-2.0, 2.0, (60, 2))
    np.testing.assert_allclose(post.predict(X[:5])["p"].values, OLD_P, rtol=1e-12, atol=1e-15)
    post.save(tmp_path / "again.nc")
    again = gd.load(tmp_path / "again.nc")
    assert again.to_xarray().attrs["format_version"] == 3
    np.testing.assert_array_equal(again.predict(X[:5])["p"].values, post.predict(X[:5])["p"].values)
