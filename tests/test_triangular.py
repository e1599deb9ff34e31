"""gpdsl.linalg's triangular helpers against dense NumPy/SciPy products and solves."""
import numpy as np
import pytest
from scipy import linalg

from gpdsl.linalg import inverse_lower, lower_product, stacked, weighted_gram, whiten


@pytest.mark.parametrize("transpose", [False, True])
def test_lower_product_is_the_dense_product_of_the_lower_triangle(transpose):
    rng = np.random.default_rng(0)
    R, X = rng.standard_normal((7, 7)), rng.standard_normal((7, 11))   # R's upper triangle is not read
    lower = np.tril(R)
    expected = (lower.T if transpose else lower) @ X
    got = lower_product(R, X, transpose=transpose)
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-13)
    assert got.flags.c_contiguous


@pytest.mark.parametrize("transpose", [False, True])
def test_whiten_is_scipys_triangular_solve(transpose):
    rng = np.random.default_rng(1)
    L = np.tril(rng.standard_normal((6, 6))) + 4.0 * np.eye(6)
    K = rng.standard_normal((6, 9))
    expected = linalg.solve_triangular(L, K, lower=True, trans="T" if transpose else "N")
    np.testing.assert_allclose(whiten(L, K, transpose=transpose), expected, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(whiten(L, K[:, 0], transpose=transpose), expected[:, 0], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("signs", ["non-negative", "non-positive", "mixed", "constant"])
def test_weighted_gram_is_the_dense_weighted_product(signs):
    """A diag(v) A^T: the rank-n update of A sqrt(|v|) where v keeps one sign (of A scaled by v
    where v is one number repeated), the general product otherwise, equal to the dense formula to
    1e-13 relative and exactly symmetric."""
    rng = np.random.default_rng(3)
    A = rng.standard_normal((40, 300))
    v = rng.uniform(0.0, 2.0, 300) * {"non-negative": 1.0, "non-positive": -1.0}.get(signs, 1.0)
    if signs == "mixed":
        v -= 1.0
    if signs == "constant":
        v = np.full(300, 0.37)
    P = weighted_gram(A, v)
    dense = np.einsum("mn,n,kn->mk", A, v, A)
    np.testing.assert_allclose(P, dense, rtol=1e-13, atol=1e-13 * np.abs(dense).max())
    np.testing.assert_array_equal(P, P.T)


def test_weighted_gram_branches_at_the_edges():
    """The sign tests (from v's least and largest entries, issue 46) choose as np.all did: a NaN
    weight takes the general product (NaN where it enters), zeros of either sign count as one
    repeated number, and an empty v gives the zero matrix."""
    rng = np.random.default_rng(4)
    A = rng.standard_normal((5, 8))
    v = rng.uniform(0.1, 1.0, 8)
    v[3] = np.nan
    P = weighted_gram(A, v)
    assert np.all(np.isnan(P))
    zeros = np.array([0.0, -0.0] * 4)
    np.testing.assert_array_equal(np.abs(weighted_gram(A, zeros)), np.zeros((5, 5)))
    np.testing.assert_array_equal(weighted_gram(np.zeros((5, 0)), np.zeros(0)), np.zeros((5, 5)))


def test_inverse_lower_reads_only_the_lower_triangle():
    """Entries above the diagonal of L are neither read nor carried into L^-1 (np.tril's mask)."""
    rng = np.random.default_rng(6)
    X = rng.standard_normal((7, 20))
    L = np.linalg.cholesky(X @ X.T)
    noisy = L + np.triu(rng.standard_normal((7, 7)), 1)
    np.testing.assert_array_equal(inverse_lower(noisy), inverse_lower(L))
    np.testing.assert_allclose(inverse_lower(noisy) @ L, np.eye(7), atol=1e-12)


def test_inverse_lower_is_the_triangular_inverse_and_refuses_a_singular_factor():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((30, 60))
    L = np.linalg.cholesky(X @ X.T)
    Li = inverse_lower(L)
    np.testing.assert_allclose(Li @ L, np.eye(30), atol=1e-12)
    np.testing.assert_array_equal(Li, np.tril(Li))
    assert Li.flags.c_contiguous
    L[4, 4] = 0.0
    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        inverse_lower(L)


def test_stacked_is_a_view_for_one_block_and_a_stack_for_more():
    a, b = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    one = stacked([a])
    assert one.shape == (1, 2, 3) and np.shares_memory(one, a)
    np.testing.assert_array_equal(stacked([a, b]), np.stack([a, b]))
