"""Jitted stationary covariance functions and their vector-Jacobian products.

Every function here takes only arrays and scalars; validation and bookkeeping live in
:mod:`gpdsl.kernels`.  A stationary kernel is ``k(x, z) = variance * profile(r2)`` with the
scaled squared distance ``r2 = sum_d (x_d - z_d)**2 / lengthscale_d**2``; ``kind`` selects the
profile (the integer codes are the keys of :data:`gpdsl.kernels.PROFILE_CODES`).

The vector-Jacobian product (VJP) contracts an adjoint matrix ``G = dF/dK`` with the kernel's
derivatives without ever forming ``dK/dtheta``: that is what keeps the gradient of an
O(N M^2) objective at O(N M D) extra work.
"""
import numpy as np
from numba import njit

SQUARED_EXPONENTIAL = 0
MATERN32 = 1
MATERN52 = 2

_SQRT3 = np.sqrt(3.0)
_SQRT5 = np.sqrt(5.0)


@njit(cache=True)
def profile_and_slope(r2, kind):
    """Return ``(p(r2), dp/dr2)`` for the unit-variance profile ``kind``.

    The slope is taken with respect to r2 (not r) because it stays finite at r = 0 for all
    three profiles, so gradients at coincident points need no special case.
    """
    if kind == SQUARED_EXPONENTIAL:
        p = np.exp(-0.5 * r2)
        return p, -0.5 * p
    r = np.sqrt(r2)
    if kind == MATERN32:
        e = np.exp(-_SQRT3 * r)
        return (1.0 + _SQRT3 * r) * e, -1.5 * e
    # MATERN52
    e = np.exp(-_SQRT5 * r)
    return (1.0 + _SQRT5 * r + 5.0 / 3.0 * r2) * e, -5.0 / 6.0 * (1.0 + _SQRT5 * r) * e


@njit(cache=True)
def cross_covariance(X1, X2, lengthscale, variance, kind):
    """K[i, j] = k(X1[i], X2[j]); X1 (n1, D), X2 (n2, D), lengthscale (D,) -> (n1, n2)."""
    n1, dim = X1.shape
    n2 = X2.shape[0]
    inv_ls = 1.0 / lengthscale
    A = X1 * inv_ls
    B = X2 * inv_ls
    K = np.empty((n1, n2))
    for i in range(n1):
        for j in range(n2):
            r2 = 0.0
            for d in range(dim):
                t = A[i, d] - B[j, d]
                r2 += t * t
            p, _ = profile_and_slope(r2, kind)
            K[i, j] = variance * p
    return K


@njit(cache=True)
def covariance_vjp(X1, X2, G, lengthscale, variance, kind):
    """Contract the adjoint ``G`` (n1, n2) with the derivatives of ``K(X1, X2)``.

    Returns ``(d_lengthscale (D,), d_variance, d_X1 (n1, D))`` where, for example,
    ``d_lengthscale[d] = sum_ij G[i, j] * dK[i, j]/d lengthscale[d]``.  For a symmetric Gram
    matrix K(Z, Z) with symmetric G the gradient with respect to Z is ``2 * d_X1``.
    """
    n1, dim = X1.shape
    n2 = X2.shape[0]
    inv_ls = 1.0 / lengthscale
    inv_ls2 = inv_ls * inv_ls
    d_ls = np.zeros(dim)
    d_var = 0.0
    d_X1 = np.zeros((n1, dim))
    diff = np.empty(dim)
    for i in range(n1):
        for j in range(n2):
            g = G[i, j]
            if g == 0.0:
                continue
            r2 = 0.0
            for d in range(dim):
                t = X1[i, d] - X2[j, d]
                diff[d] = t
                r2 += t * t * inv_ls2[d]
            p, slope = profile_and_slope(r2, kind)
            d_var += g * p
            # dK/d(diff_d) = variance * slope * 2 diff_d / ls_d^2
            w = g * variance * slope * 2.0
            for d in range(dim):
                t = diff[d] * inv_ls2[d]
                d_X1[i, d] += w * t
                # dr2/dls_d = -2 diff_d^2 / ls_d^3
                d_ls[d] -= w * t * diff[d] * inv_ls[d]
    return d_ls, d_var, d_X1
