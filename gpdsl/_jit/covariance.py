"""Jitted slope-adjoint kernel for stationary covariances.

A stationary kernel is ``k(x, z) = variance * p(r2)`` with the scaled squared distance
``r2 = sum_d (x_d - z_d)**2 / lengthscale_d**2``; ``kind`` selects the profile p (the integer
codes are the ``profile`` attributes of :mod:`gpdsl.kernels`).  The Python layer forms r2 with a
BLAS cross term and the values of p with NumPy's vectorised exp (several times faster than a
scalar exp in a jitted loop); what is left for this module is the fused elementwise sweep of
the vector-Jacobian product, which would otherwise need three temporaries.
"""
import numpy as np
from numba import njit

SQUARED_EXPONENTIAL = 0
MATERN32 = 1
MATERN52 = 2

_SQRT3 = np.sqrt(3.0)
_SQRT5 = np.sqrt(5.0)


@njit(cache=True)
def slope_adjoint(r2, K, G, variance, kind):
    """Contract an adjoint G with K = variance * p(r2); all arrays (n1, n2).

    Returns ``(S, d_variance)`` with ``S = G * variance * dp/dr2`` (so that
    ``sum_ij G_ij dK_ij/dr2_ij * dr2_ij/dt = sum_ij S_ij dr2_ij/dt`` for any t) and
    ``d_variance = sum_ij G_ij p_ij``.  dp/dr2 is finite at r2 = 0 for all three profiles.
    """
    n1, n2 = r2.shape
    S = np.empty((n1, n2))
    d_variance = 0.0
    for i in range(n1):
        for j in range(n2):
            g = G[i, j]
            d_variance += g * K[i, j]
            if kind == SQUARED_EXPONENTIAL:
                S[i, j] = -0.5 * g * K[i, j]            # dp/dr2 = -p/2
            elif kind == MATERN32:
                S[i, j] = -1.5 * g * variance * np.exp(-_SQRT3 * np.sqrt(r2[i, j]))
            else:
                r = np.sqrt(r2[i, j])
                S[i, j] = -5.0 / 6.0 * g * variance * (1.0 + _SQRT5 * r) * np.exp(-_SQRT5 * r)
    return S, d_variance / variance
