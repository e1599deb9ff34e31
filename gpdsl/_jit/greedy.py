"""Jitted rank-1 steps of greedy inducing-point selection (:mod:`gpdsl.inducing`).

Both greedy rules grow the pivoted Cholesky factor of ``K = K_ff + eps I`` over the selected
training points S (thesis 2.7.2 / 3.3.2 after Burt et al. 2020):  the rows ``C (M, N)``
satisfy ``C^T C = Q_ff = K_fS K_SS^-1 K_Sf`` (so ``C = L^-1 K_Sf`` with ``K_SS = L L^T``), and
``d (N,) = diag(K - Q_ff)`` is the residual variance.  Adding pivot j appends the row

    e = (k_j + eps delta_j - C[:, j]^T C) / sqrt(d_j),        d <- max(d - e^2, 0)

in O(N M), where k_j = K_ff[:, j] is the kernel column without jitter.  The O(N M) products
go to BLAS (``np.dot``): they read all of C once per step, which bounds the speed.
"""
import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def weighted_argmax(d, w, floor):
    """``(j, w_j d_j, sum_n w_n d_n)`` with j the first n maximising w_n d_n among the points
    with d_n > floor_n and w_n d_n > 0 (j = -1 when there is none).  d, w, floor (N,)."""
    best, best_value, trace = -1, 0.0, 0.0
    for i in range(d.shape[0]):
        v = w[i] * d[i]
        trace += v
        if v > best_value and d[i] > floor[i]:
            best, best_value = i, v
    return best, best_value, trace


@njit(cache=True, nogil=True)
def pivoted_cholesky_step(C, m, j, k, d, w, floor, eps):
    """Add pivot j: write row m of C (cap, N) and update d (N,) in place.  k (N,) is K(X, x_j).

    Returns :func:`weighted_argmax` of the updated residual: the next greedy-variance pivot,
    its criterion and the weighted trace ``sum_n w_n d_n``.
    """
    block_step(C, m, np.ascontiguousarray(C[:m, j]), d[j], k, j, d, eps)
    return weighted_argmax(d, w, floor)


@njit(cache=True, nogil=True)
def block_step(C, m, c_j, d_j, k, j, d, eps):
    """Add a pivot to the columns of one row block: write row m of C (cap, n) and update the
    block's residual d (n,) in place.  c_j (m,) is the pivot's column C[:m, j] of the whole
    factor and d_j its residual before the update, k (n,) the kernel column K(X_block, x_j), and
    j the pivot's index in this block (-1 when the pivot lies in another block)."""
    e = C[m]
    # An element loop: ``e[:] = k`` compiled Numba's shape-mismatch message, four seconds of a cold
    # start.
    for i in range(e.shape[0]):
        e[i] = k[i]
    if j >= 0:
        e[j] += eps
    if m > 0:
        e -= np.dot(c_j, C[:m])
    e /= np.sqrt(d_j)
    for i in range(d.shape[0]):
        v = d[i] - e[i] * e[i]
        d[i] = v if v > 0.0 else 0.0


@njit(cache=True, nogil=True)
def bound_scores(C, m, candidates, K_cand, d, w, r, LB, c, eps):
    """Increase of the collapsed bound when each candidate joins S (Titsias 2009 section 3.2).

    State for the current S (M = m points): C (cap, N) as above, d (N,), weights w (N,),
    weighted targets r (N,), L_B (cap, cap) whose top-left m x m block is the lower Cholesky
    factor of ``B = I + C W C^T``, and c (cap,) whose first m entries are ``L_B^-1 C r``.
    candidates (J,) are point indices and K_cand (J, N) their kernel columns K(X, x_j).

    For candidate j with new row e of C, B grows by the border ``b = C W e``,
    ``beta = 1 + e^T W e`` (a rank-1 Schur complement), so L_B grows by the row
    ``[g^T, gamma]`` with ``g = L_B^-1 b``, ``gamma^2 = beta - g^T g``, and c by
    ``c_new = (e^T r - g^T c) / gamma``; the log-determinant, data-fit and trace terms of F change by

        gain = -log gamma + c_new^2 / 2 + e^T W e / 2.

    O(N M + M^2) per candidate (two BLAS-3 products over the working set).  Returns gains (J,),
    gamma (J,), c_new (J,) and G (J, m) whose row t is g for candidate t.
    """
    nj = candidates.shape[0]
    E = K_cand.copy()
    for t in range(nj):
        E[t, candidates[t]] += eps
    if m > 0:
        E -= np.dot(C[:m, candidates].T, C[:m])
    ewe, er = np.empty(nj), np.empty(nj)
    for t in range(nj):
        row = E[t]
        row /= np.sqrt(d[candidates[t]])
        er[t] = np.dot(row, r)
        s = 0.0
        for i in range(row.shape[0]):
            we = w[i] * row[i]
            s += we * row[i]
            row[i] = we              # E becomes E W, for the borders b = C W e
        ewe[t] = s
    G = np.zeros((nj, m))
    if m > 0:
        G = np.dot(E, C[:m].T)
    gains, gammas, c_new = np.empty(nj), np.empty(nj), np.empty(nj)
    for t in range(nj):
        g = G[t]
        gg, gc = 0.0, 0.0
        for q in range(m):           # forward substitution L_B g = b
            s = g[q]
            for p in range(q):
                s -= LB[q, p] * g[p]
            g[q] = s / LB[q, q]
            gg += g[q] * g[q]
            gc += g[q] * c[q]
        # gamma^2 = 1 + e^T W^1/2 (I + W^1/2 C^T C W^1/2)^-1 W^1/2 e >= 1 exactly; the
        # subtraction can only undershoot 1 by rounding.
        gammas[t] = np.sqrt(max(1.0 + ewe[t] - gg, 1.0))
        c_new[t] = (er[t] - gc) / gammas[t]
        gains[t] = -np.log(gammas[t]) + 0.5 * c_new[t] * c_new[t] + 0.5 * ewe[t]
    return gains, gammas, c_new, G
