"""Jitted sweeps of the spectral-mixture kernel (Wilson & Adams 2013; GPML's covSM).

``k(x, z) = sum_q w_q prod_d exp(-2 pi^2 tau_d^2 s_qd^2) cos(2 pi tau_d m_qd)`` with ``tau = x - z``.
The product over d of cosines does not factor through a BLAS product, so the Gram matrix and the
vector-Jacobian product are loops over (i, j, q, d).  The trigonometric functions are taken once
per point, not per pair: ``cos(a (x - z)) = cos(a x) cos(a z) + sin(a x) sin(a z)`` and
``sin(a (x - z)) = sin(a x) cos(a z) - cos(a x) sin(a z)`` on inputs centred at X1's mean (which
keeps the phases, and so their rounding, at the size of the data's spread), leaving one exp and
arithmetic per (i, j, q).  The VJP forms, per (i, j, q), the product of the cosines without each
factor by prefix and suffix products (no division by a cosine, which may be zero).
"""
import numpy as np
from numba import njit

_TWO_PI = 2.0 * np.pi
_TWO_PI2 = 2.0 * np.pi * np.pi


@njit(cache=True, nogil=True)
def _phases(X, centre, means):
    """(cos, sin) of 2 pi m_qd (x_id - centre_d), each (Q, n, D)."""
    n, dim = X.shape
    n_q = means.shape[0]
    cos_ = np.empty((n_q, n, dim))
    sin_ = np.empty((n_q, n, dim))
    for q in range(n_q):
        for i in range(n):
            for d in range(dim):
                phase = _TWO_PI * means[q, d] * (X[i, d] - centre[d])
                cos_[q, i, d] = np.cos(phase)
                sin_[q, i, d] = np.sin(phase)
    return cos_, sin_


@njit(cache=True, nogil=True)
def sm_gram(X1, X2, weights, means, scales):
    """The (n1, n2) spectral-mixture Gram matrix of X1 (n1, D) and X2 (n2, D) for weights (Q,),
    means (Q, D) and scales (Q, D)."""
    n1, dim = X1.shape
    n2 = X2.shape[0]
    n_q = weights.shape[0]
    centre = np.zeros(dim)
    for i in range(n1):
        for d in range(dim):
            centre[d] += X1[i, d] / n1
    c1, s1 = _phases(X1, centre, means)
    c2, s2 = _phases(X2, centre, means)
    K = np.zeros((n1, n2))
    for i in range(n1):
        for j in range(n2):
            total = 0.0
            for q in range(n_q):
                expo = 0.0
                cosines = 1.0
                for d in range(dim):
                    tau = (X1[i, d] - X2[j, d]) * scales[q, d]
                    expo += tau * tau
                    cosines *= c1[q, i, d] * c2[q, j, d] + s1[q, i, d] * s2[q, j, d]
                total += weights[q] * np.exp(-_TWO_PI2 * expo) * cosines
            K[i, j] = total
    return K


@njit(cache=True, nogil=True)
def sm_vjp(X1, X2, G, weights, means, scales):
    """Contract the adjoint G (n1, n2) with the derivatives of ``sm_gram``.

    Returns ``(d_weights (Q,), d_means (Q, D), d_scales (Q, D), d_X1 (n1, D))``, each
    ``sum_ij G_ij dK_ij / d(.)``.
    """
    n1, dim = X1.shape
    n2 = X2.shape[0]
    n_q = weights.shape[0]
    centre = np.zeros(dim)
    for i in range(n1):
        for d in range(dim):
            centre[d] += X1[i, d] / n1
    c1, s1 = _phases(X1, centre, means)
    c2, s2 = _phases(X2, centre, means)
    d_w = np.zeros(n_q)
    d_m = np.zeros((n_q, dim))
    d_s = np.zeros((n_q, dim))
    d_X1 = np.zeros((n1, dim))
    tau = np.empty(dim)
    cos_ = np.empty(dim)
    sin_ = np.empty(dim)
    before = np.empty(dim + 1)      # before[d] = prod_{d' < d} cos_d'
    after = np.empty(dim + 1)       # after[d] = prod_{d' >= d} cos_d'
    for i in range(n1):
        for j in range(n2):
            g_ij = G[i, j]
            if g_ij == 0.0:
                continue
            for d in range(dim):
                tau[d] = X1[i, d] - X2[j, d]
            for q in range(n_q):
                expo = 0.0
                for d in range(dim):
                    expo += tau[d] * tau[d] * scales[q, d] * scales[q, d]
                    cos_[d] = c1[q, i, d] * c2[q, j, d] + s1[q, i, d] * s2[q, j, d]
                    sin_[d] = s1[q, i, d] * c2[q, j, d] - c1[q, i, d] * s2[q, j, d]
                e = np.exp(-_TWO_PI2 * expo)
                before[0] = 1.0
                after[dim] = 1.0
                for d in range(dim):
                    before[d + 1] = before[d] * cos_[d]
                    after[dim - 1 - d] = after[dim - d] * cos_[dim - 1 - d]
                p = e * before[dim]                 # prod_d exp(.) cos(.)
                d_w[q] += g_ij * p
                g = g_ij * weights[q]
                for d in range(dim):
                    # the product without cos_d: d/d(phase_d) of p is -e * others * sin_d
                    others = e * before[d] * after[d + 1]
                    slope = -4.0 * np.pi * np.pi * tau[d] * p          # dp/dtau from the exp, / s^2
                    d_s[q, d] += g * slope * tau[d] * scales[q, d]
                    d_m[q, d] -= g * others * sin_[d] * _TWO_PI * tau[d]
                    d_X1[i, d] += g * (slope * scales[q, d] * scales[q, d]
                                       - others * sin_[d] * _TWO_PI * means[q, d])
    return d_w, d_m, d_s, d_X1
