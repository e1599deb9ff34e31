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
