"""The fused elementwise sweeps of the row passes against the NumPy passes they replace.

``slope_adjoint``'s row and column sums (what the distance adjoint contracts), the collapsed
gradient pass's ``contract_then_complete``, and the squared exponential's Gram matrix with its
-r2 / 2 taken from the BLAS product itself: each is checked here against the plain formula
(the last also against its own r2 scaled afterwards, to the last bit).  The gradients through
them are the conformance suite's (finite differences) and the GPML oracles'.
"""
import numpy as np
import pytest

import gpdsl as gd
from gpdsl._jit import covariance as cov
from gpdsl._jit.collapsed import contract_then_complete

rng = np.random.default_rng(5)


@pytest.mark.parametrize("kind", [cov.SQUARED_EXPONENTIAL, cov.MATERN32, cov.MATERN52, cov.EXPONENTIAL,
                                  cov.RATIONAL_QUADRATIC])
def test_slope_adjoint_sums_are_those_of_its_slope(kind):
    r2 = rng.uniform(0.0, 4.0, size=(7, 11))
    r2[2, 3] = 0.0                           # a coincident pair (the exponential profile's S = 0 there)
    K = 1.7 * np.exp(-0.5 * r2)              # any K: the sweep reads it, not the profile's own values
    G = rng.standard_normal((7, 11))
    S, row, col, d_variance, _ = cov.slope_adjoint(r2, K, G, 1.7, kind, 0.8)
    np.testing.assert_allclose(row, S.sum(axis=1), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(col, S.sum(axis=0), rtol=1e-13, atol=1e-15)
    assert d_variance == pytest.approx(np.sum(G * K) / 1.7, rel=1e-13)
    if kind == cov.SQUARED_EXPONENTIAL:
        np.testing.assert_allclose(S, -0.5 * G * K, rtol=1e-15)


def test_contract_then_complete_is_the_einsum_then_the_rank_one_update():
    M, n = 9, 23
    G, K = rng.standard_normal((M, n)), rng.uniform(0.0, 2.0, (M, n))
    beta, e, w = rng.standard_normal(M), rng.standard_normal(n), rng.uniform(0.1, 3.0, n)
    want_contraction = np.einsum("ij,ij->j", K, G)
    want_G = w * (G + np.outer(beta, e))
    got = G.copy()
    contraction = contract_then_complete(got, K, beta, e, w)
    np.testing.assert_allclose(contraction, want_contraction, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(got, want_G, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("lengthscale, variance", [(0.7, 1.3), (np.array([0.4, 2.5, 1.1]), 250.0), (3.0, 1e-4)])
def test_squared_exponential_gram_is_the_pairwise_formula(lengthscale, variance):
    X1, X2 = rng.standard_normal((6, 3)) + 5.0, rng.standard_normal((8, 3)) + 5.0
    X2[0] = X1[0]                             # a coincident pair: k = variance
    kernel = gd.kernels.SquaredExponential(lengthscale, variance).bind()
    ls = np.broadcast_to(lengthscale, (3,))
    r2 = (((X1[:, None, :] - X2[None, :, :]) / ls) ** 2).sum(axis=-1)
    want = variance * np.exp(-0.5 * r2)
    got = kernel.gram(X1, X2)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0.0)
    assert got[0, 0] == pytest.approx(variance, rel=1e-14)
    # -1/2 is a power of two: folded into the product it rounds exactly as r2 scaled afterwards
    assert np.array_equal(got, variance * np.exp(-0.5 * kernel._scaled_sqdist(X1, X2)))
