"""gpdsl.linalg's triangular helpers against dense NumPy/SciPy products and solves."""
import numpy as np
import pytest
from scipy import linalg

from gpdsl.linalg import lower_product, whiten


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
