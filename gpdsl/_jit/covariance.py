"""Jitted sweeps of the stationary covariances (the periodic kernel runs them on its circle maps).

A stationary kernel is ``k(x, z) = variance * p(r2)`` with the scaled squared distance
``r2 = sum_d (x_d - z_d)**2 / lengthscale_d**2``; ``kind`` selects the profile p (the integer
codes are the ``profile`` attributes of :mod:`gpdsl.kernels`).  The Python layer forms r2 with a
BLAS cross term and the values of p with NumPy's vectorised exp (several times faster than a
scalar exp in a jitted loop); what is left for this module is the fused elementwise sweep of
the vector-Jacobian product, which would otherwise need three temporaries.

The exponential (Matérn 1/2) profile needs more: its slope dp/dr2 = -p / (2 r) is unbounded as
r -> 0, so its distances and their contraction are formed pair by pair (:func:`scaled_sqdist`,
:func:`distance_adjoint`: the cross term's cancellation error, about eps |x|^2 in r2, would
become sqrt(eps) |x| in r).
"""
import numpy as np
from numba import njit

SQUARED_EXPONENTIAL = 0
MATERN32 = 1
MATERN52 = 2
EXPONENTIAL = 3
RATIONAL_QUADRATIC = 4

_SQRT3 = np.sqrt(3.0)
_SQRT5 = np.sqrt(5.0)


@njit(cache=True, nogil=True)
def slope_adjoint(r2, K, G, variance, kind, alpha):
    """Contract an adjoint G with K = variance * p(r2); all arrays (n1, n2).

    Returns ``(S, row, col, d_variance, d_alpha)`` with ``S = G * variance * dp/dr2`` (so that
    ``sum_ij G_ij dK_ij/dr2_ij * dr2_ij/dt = sum_ij S_ij dr2_ij/dt`` for any t), its row and
    column sums ``row`` (n1,) and ``col`` (n2,) (what the distance adjoint contracts, taken in
    this sweep rather than in two more passes over S: 0.6 ms of a VFE chunk of 32 x 30,000),
    ``d_variance = sum_ij G_ij p_ij`` and, for the rational quadratic profile
    ``p = (1 + r2 / (2 alpha))^(-alpha)``, ``d_alpha = sum_ij G_ij variance dp_ij/dalpha`` (0 for
    the others).  dp/dr2 is finite at r2 = 0 except for the exponential profile, whose S is set
    to 0 there: every dr2/dt vanishes at a coincident pair, and the pair's contribution to each
    gradient is 0 (its limit for the length-scales, the symmetric subgradient for the inputs).
    """
    n1, n2 = r2.shape
    S = np.empty((n1, n2))
    # np.empty and an element loop, not np.zeros: np.zeros brings in three more of Numba's own
    # overloads (np.zeros, np.empty with a dtype, the zero fill), compiled in every fresh process
    # for about 0.1 s (issue 46's cold start); the other kernels on a fit's path do the same.
    row, col = np.empty(n1), np.empty(n2)
    for j in range(n2):
        col[j] = 0.0
    d_variance = 0.0
    d_alpha = 0.0
    for i in range(n1):
        row_sum = 0.0
        for j in range(n2):
            g = G[i, j]
            d_variance += g * K[i, j]
            if kind == SQUARED_EXPONENTIAL:
                s = -0.5 * g * K[i, j]            # dp/dr2 = -p/2
            elif kind == MATERN32:
                s = -1.5 * g * variance * np.exp(-_SQRT3 * np.sqrt(r2[i, j]))
            elif kind == MATERN52:
                r = np.sqrt(r2[i, j])
                s = -5.0 / 6.0 * g * variance * (1.0 + _SQRT5 * r) * np.exp(-_SQRT5 * r)
            elif kind == EXPONENTIAL:
                r = np.sqrt(r2[i, j])
                s = -0.5 * g * K[i, j] / r if r > 0.0 else 0.0     # dp/dr2 = -p / (2 r)
            else:
                u = r2[i, j] / (2.0 * alpha)
                s = -0.5 * g * K[i, j] / (1.0 + u)                  # dp/dr2 = -p / (2 (1 + u))
                d_alpha += g * K[i, j] * (u / (1.0 + u) - np.log1p(u))    # d log p / d alpha
            S[i, j] = s
            row_sum += s
            col[j] += s
        row[i] = row_sum
    return S, row, col, d_variance / variance, d_alpha


@njit(cache=True, nogil=True)
def profile_and_slope(r2, variance, kind, K, T):
    """``K = variance * p(r2)`` and ``T = variance * dp/dr2`` for the Matern 3/2 and 5/2 profiles,
    in one sweep (``T`` may be ``r2`` itself: each entry is read before it is written).

    With s = sqrt(3 r2), p = (1 + s) e^-s and dp/dr2 = -3/2 e^-s (Matern 3/2); with s = sqrt(5 r2),
    p = (1 + s + s^2 / 3) e^-s and dp/dr2 = -5/6 (1 + s) e^-s (Matern 5/2).

    Parameters
    ----------
    r2 : ndarray, shape (n1, n2)
    variance : float
    kind : int
        MATERN32 or MATERN52.
    K, T : ndarray, shape (n1, n2)
        Written.
    """
    n1, n2 = r2.shape
    for i in range(n1):
        for j in range(n2):
            if kind == MATERN32:
                s = _SQRT3 * np.sqrt(r2[i, j])
                e = variance * np.exp(-s)
                K[i, j] = (1.0 + s) * e
                T[i, j] = -1.5 * e
            else:
                s = _SQRT5 * np.sqrt(r2[i, j])
                e = variance * np.exp(-s)
                K[i, j] = (1.0 + s + s * s / 3.0) * e
                T[i, j] = -5.0 / 6.0 * (1.0 + s) * e


@njit(cache=True, nogil=True)
def scaled_sqdist(X1, X2, inv_ls):
    """``r2_ij = sum_d ((X1_id - X2_jd) inv_ls_d)^2`` pair by pair (exactly 0 at a coincident pair).

    X1 (n1, D), X2 (n2, D), inv_ls (D,); returns (n1, n2).
    """
    n1, dim = X1.shape
    n2 = X2.shape[0]
    r2 = np.empty((n1, n2))
    for i in range(n1):
        for j in range(n2):
            acc = 0.0
            for d in range(dim):
                t = (X1[i, d] - X2[j, d]) * inv_ls[d]
                acc += t * t
            r2[i, j] = acc
    return r2


@njit(cache=True, nogil=True)
def distance_adjoint(X1, X2, inv_ls, S):
    """Contract S (n1, n2), the adjoint of :func:`scaled_sqdist`'s r2, with its derivatives.

    Returns ``(d_X1, d_ls)``: ``d_X1_id = sum_j S_ij 2 (X1_id - X2_jd) inv_ls_d^2`` (n1, D) and
    ``d_ls_d = -sum_ij S_ij 2 (X1_id - X2_jd)^2 inv_ls_d^3`` (D,), each term formed from its own
    difference (no cancellation between large terms when S is large at close pairs).
    """
    n1, dim = X1.shape
    n2 = X2.shape[0]
    d_X1 = np.zeros((n1, dim))
    d_ls = np.zeros(dim)
    for i in range(n1):
        for j in range(n2):
            s = S[i, j]
            if s == 0.0:
                continue
            for d in range(dim):
                delta = X1[i, d] - X2[j, d]
                d_X1[i, d] += s * delta
                d_ls[d] += s * delta * delta
    for d in range(dim):
        w = inv_ls[d] * inv_ls[d]
        for i in range(n1):
            d_X1[i, d] *= 2.0 * w
        d_ls[d] *= -2.0 * w * inv_ls[d]
    return d_X1, d_ls


