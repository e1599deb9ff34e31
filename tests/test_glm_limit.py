"""A GP whose kernel is (almost) nothing is its mean function: with a Linear + Constant mean and a
kernel of tiny fixed variance, the fitted evidence and coefficients are the maximum-likelihood
GLM's, here statsmodels' (an independent reference for the mean-function gradients in a
Gaussian and in a non-Gaussian method)."""
from __future__ import annotations

import numpy as np
import pytest

import gpdsl as gd

sm = pytest.importorskip("statsmodels.api")

# Kernel variance 1e-12: the latent g ~ GP(0, 1e-12 k) moves the evidence by O(1e-12 N max W),
# far below the 1e-6 asserted.
TINY = gd.Fixed(1e-12)


def _data(seed, n=120):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return rng, X


def _mean():
    return gd.means.Constant(0.0) + gd.means.Linear(0.0)


def _coefficients(values):
    return np.concatenate([[values["mean.0.constant"]], values["mean.1.coefficients"]])


# Laplace, not EP: EP's d/d offset is (tilted mean - cavity mean) / cavity variance, whose
# rounding error eps |f| / v grows to ~1e-4 a site at v = 1e-12 (measured: the gradient at the
# GLM's coefficients 7e-4 instead of 0, the evidence still equal to 4e-11).
@pytest.mark.parametrize("inference", [gd.inference.Laplace()], ids=["Laplace"])
def test_poisson_log_gp_with_a_linear_mean_is_the_poisson_glm(inference):
    rng, X = _data(0)
    y = rng.poisson(np.exp(0.4 + 0.6 * X[:, 0] - 0.3 * X[:, 1])).astype(float)
    glm = sm.GLM(y, sm.add_constant(X), family=sm.families.Poisson()).fit(tol=1e-14)
    model = gd.Model(gd.kernels.SquaredExponential(1.0, TINY), gd.likelihoods.Poisson(link="log"),
                     inference=inference, mean=_mean())
    post = model.fit(X, y)
    np.testing.assert_allclose(_coefficients(post.values), glm.params, rtol=1e-6, atol=1e-6)
    assert post.log_evidence == pytest.approx(glm.llf, abs=1e-6)
    # At the GLM's coefficients the evidence's gradient in them vanishes.
    table = model.parameter_table(X)
    values = {**table.values(), "mean.0.constant": np.array(glm.params[0]), "mean.1.coefficients": glm.params[1:]}
    grads = model.evaluate(values, X, y, None).grads
    assert abs(grads["mean.0.constant"]) < 1e-6 and np.all(np.abs(grads["mean.1.coefficients"]) < 1e-6)


def test_gaussian_gp_with_a_linear_mean_is_least_squares():
    rng, X = _data(1)
    y = 1.2 + 0.8 * X[:, 0] - 0.5 * X[:, 1] + 0.3 * rng.standard_normal(X.shape[0])
    ols = sm.OLS(y, sm.add_constant(X)).fit()
    model = gd.Model(gd.kernels.SquaredExponential(1.0, TINY), gd.likelihoods.Gaussian(0.1), mean=_mean())
    post = model.fit(X, y)
    np.testing.assert_allclose(_coefficients(post.values), ols.params, rtol=1e-6, atol=1e-6)
    # The Gaussian GLM's maximum likelihood: the noise variance is the mean squared residual.
    assert float(post.values["likelihood.variance"]) == pytest.approx(ols.ssr / X.shape[0], rel=1e-6)
    assert post.log_evidence == pytest.approx(ols.llf, abs=1e-6)
