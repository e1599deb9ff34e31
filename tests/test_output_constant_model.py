"""Issue 48: the constant model of a multi-output Gaussian noise (``Model.fit``'s flag of a fit no
better than f = 0).

``OutputGaussian`` has one noise variance an output, so its constant model is f = 0 with each
output's best noise s_p^2 = mean(y_p^2): log N(y | 0, diag(s_{p_n}^2)), the sum over outputs of
each output's Gaussian constant.  It is reached through ``for_rows(X)`` (the rows' outputs), as
``PerOutput``'s is.  Checked here against the dense Gaussian density of scipy, which is also checked to be
largest at those variances, and on fits: targets that do not depend on X are flagged, targets
that do are not.
"""
import warnings

import numpy as np
import pytest
from scipy import stats

import gpdsl as gd
from gpdsl.components import bind
from gpdsl.fit_warnings import CONSTANT_MODEL_TOL

L = gd.likelihoods
P = 3
ROWS = np.column_stack([np.linspace(-1.0, 1.0, 9), [2, 0, 1, 0, 2, 2, 1, 0, 2]])
TARGETS = np.array([0.3, -1.2, 40.0, 2.5, -0.01, 0.07, -25.0, 0.8, 0.2])


def _dense_constant(X, y, variances=None):
    """log N(y | 0, diag(s_{p_n}^2)) by scipy's multivariate normal, s_p^2 = mean(y_p^2) unless given."""
    index = X[:, -1].astype(int)
    if variances is None:
        variances = np.array([np.mean(y[index == p] ** 2) for p in range(P)])
    return stats.multivariate_normal(np.zeros(y.size), np.diag(variances[index])).logpdf(y)


@pytest.mark.parametrize("likelihood", [L.OutputGaussian(P, variance=np.array([0.1, 2.0, 5.0])),
                                        L.PerOutput((L.Gaussian(0.1), L.Gaussian(2.0), L.Gaussian(5.0)))],
                         ids=["OutputGaussian", "PerOutput"])
def test_constant_model_is_the_dense_density_at_each_outputs_best_noise(likelihood):
    """The constant model's value is the dense density at s_p^2 = mean(y_p^2), whatever the declared
    variances, bound or through a model's Bound; moving any s_p^2 by 1e-3 lowers the density
    (the maximum over the per-output noise)."""
    want = _dense_constant(ROWS, TARGETS)
    for rows in (likelihood.bind().for_rows(ROWS), bind(likelihood, {}, "likelihood").for_rows(ROWS)):
        assert rows.constant_model_log_likelihood(TARGETS) == pytest.approx(want, rel=1e-13)
    best = np.array([np.mean(TARGETS[ROWS[:, -1] == p] ** 2) for p in range(P)])
    for p in range(P):
        for factor in (1.0 - 1e-3, 1.0 + 1e-3):
            moved = best.copy()
            moved[p] *= factor
            assert _dense_constant(ROWS, TARGETS, moved) < want - 1e-8
    # The rows' order is the rows' own: a permutation of rows and targets together gives the same value.
    order = np.random.default_rng(0).permutation(ROWS.shape[0])
    assert likelihood.bind().for_rows(ROWS[order]).constant_model_log_likelihood(TARGETS[order]) == \
        pytest.approx(want, rel=1e-13)


def test_rows_of_output_gaussian_keep_its_noise_and_check_their_targets():
    """``for_rows`` changes nothing of the noise (``noise``, ``noise_vjp`` at any X) nor of the
    declaration; targets of another length than the rows are refused, naming both."""
    likelihood = L.OutputGaussian(P, variance=np.array([0.1, 2.0, 5.0]))
    rows = likelihood.bind().for_rows(ROWS)
    np.testing.assert_array_equal(rows.noise(ROWS), [5.0, 0.1, 2.0, 0.1, 5.0, 5.0, 2.0, 0.1, 5.0])
    g = np.arange(9.0)
    np.testing.assert_array_equal(rows.noise_vjp(ROWS, g)["variance"], [1 + 3 + 7, 2 + 6, 0 + 4 + 5 + 8])
    assert rows.describe() == "OutputGaussian(3)" and likelihood.constant_model_log_likelihood(TARGETS) is None
    with pytest.raises(ValueError, match=r"OutputGaussian: y has shape \(4,\) but the likelihood is of 9 rows"):
        rows.constant_model_log_likelihood(TARGETS[:4])
    with pytest.raises(ValueError, match="OutputGaussian"):
        likelihood.for_rows(np.column_stack([ROWS[:, 0], np.full(9, 3.0)]))


def _fit(likelihood, inference, inducing, Y):
    X = np.linspace(0.0, 5.0, Y.shape[0])[:, None]
    model = gd.Model(gd.kernels.ICM(gd.kernels.SquaredExponential(), 2), likelihood, inference=inference,
                     inducing=inducing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = model.fit(X, Y)
    return post, [str(w.message) for w in caught if issubclass(w.category, gd.ConvergenceWarning)]


@pytest.mark.parametrize("likelihood", [L.OutputGaussian(2), L.PerOutput((L.Gaussian(), L.Gaussian()))],
                         ids=["OutputGaussian", "PerOutput"])
@pytest.mark.parametrize("inference, inducing", [(gd.inference.Exact(), None),
                                                 (gd.inference.VFE(), gd.inducing.KMeans(8))], ids=["Exact", "VFE"])
def test_a_fit_that_ignores_X_is_flagged_and_a_real_one_is_not(likelihood, inference, inducing):
    """Targets drawn independently of X (white noise of sd 1 and 10 per output) fit to the constant
    model's objective within CONSTANT_MODEL_TOL and are flagged with a ConvergenceWarning; targets
    that are functions of X (sd 0.1 noise) clear it by far and are not."""
    rng = np.random.default_rng(1)
    t = np.linspace(0.0, 5.0, 30)
    noise = rng.standard_normal((30, 2)) * [1.0, 10.0]
    post, said = _fit(likelihood, inference, inducing, noise)
    # Each output's Gaussian constant: column p of the isotopic Y at s_p = root mean square of the column.
    constant = stats.norm(0.0, np.sqrt(np.mean(noise ** 2, axis=0))).logpdf(noise).sum()
    assert post.constant_model and abs(post.log_evidence - constant) < CONSTANT_MODEL_TOL
    assert any("no better than the constant model" in message for message in said)
    signal = np.column_stack([np.sin(2.0 * t), 10.0 * np.cos(2.0 * t)]) + 0.1 * rng.standard_normal((30, 2))
    post, said = _fit(likelihood, inference, inducing, signal)
    constant = stats.norm(0.0, np.sqrt(np.mean(signal ** 2, axis=0))).logpdf(signal).sum()
    assert not post.constant_model and post.log_evidence > constant + 50.0
    assert not any("constant model" in message for message in said)
