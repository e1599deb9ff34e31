"""Jitted sweeps of the coregionalisation kernels (:mod:`gpdsl.kernels.coregion`) over the long
rows, with the base kernels evaluated once per distinct input.

An LMC's entry is ``K[i, j] = sum_q B_q[p1_i, p2_j] k_q(x1_i, x2_j)``, and the long layout repeats
an input once per output it is observed at: inducing inputs shared by P outputs are P copies of
M inputs.  The base kernels' values (and, for the gradient, their slopes in r^2) are formed on the
distinct inputs; these sweeps assemble the long Gram matrix from them and contract an adjoint G
of it with them, without the (n1, n2) temporaries per part that the NumPy expression (a gathered
copy of each part's values, a gathered B_q, their product, a sum) and the base kernel's own VJP
on the long rows (its exp and slope on every copy) needed: at 10^5 heterotopic rows, Q = 3 and
768 long inducing rows those were 9 of the 14 s of one collapsed bound and gradient
(benchmarks/HISTORY.md, issue 48).
"""
import numpy as np
from numba import njit


@njit(cache=True)
def coregion_gram(K, B, pos1, p1, pos2, p2):
    """``out[i, j] = sum_q B[q, p1_i, p2_j] K[q, pos1_i, pos2_j]``, the parts added in order q = 0, 1, ...

    Parameters
    ----------
    K : ndarray, shape (Q, u1, u2)
        The base kernels' values on the distinct inputs.
    B : ndarray, shape (Q, P, P)
        The coregionalisation matrices.
    pos1, p1 : ndarray of intp, shape (n1,)
        Each long row's distinct input and output.
    pos2, p2 : ndarray of intp, shape (n2,)
        The same for the columns.

    Returns
    -------
    ndarray, shape (n1, n2)
    """
    Q = K.shape[0]
    n1, n2 = pos1.shape[0], pos2.shape[0]
    out = np.empty((n1, n2))
    for i in range(n1):
        m, a = pos1[i], p1[i]
        for j in range(n2):
            acc = 0.0
            for q in range(Q):
                acc += B[q, a, p2[j]] * K[q, m, pos2[j]]
            out[i, j] = acc
    return out


@njit(cache=True)
def coregion_vjp_sweep(G, K, T, B, pos1, p1, pos2, p2, A2):
    """Contract the adjoint G of an LMC Gram block with each part's values and slopes.

    With ``S_q[i, j] = G[i, j] B[q, p1_i, p2_j] T[q, pos1_i, pos2_j]`` (the adjoint of part q's r^2,
    T = dk_q/dr^2), returns what the stationary base kernels' distance adjoint contracts
    (:meth:`gpdsl.kernels.stationary.Stationary.distance_vjp`): S_q's row and column sums and
    ``S_q @ A2``, and the adjoint of B_q, ``GB[q, a, p] = sum of G[i, j] K[q, pos1_i, j]`` over the
    rows i of output a and columns j of output p (K[q, pos1_i, pos2_j] in the sum).

    Parameters
    ----------
    G : ndarray, shape (n1, n2)
    K, T : ndarray, shape (Q, u1, u2)
        Part q's values k_q and slopes dk_q/dr^2 on the distinct inputs.
    B : ndarray, shape (Q, P, P)
    pos1, p1 : ndarray of intp, shape (n1,)
        Each row's distinct input and output.
    pos2, p2 : ndarray of intp, shape (n2,)
        Each column's distinct input and output.
    A2 : ndarray, shape (n2, D)
        The column inputs less the centre the distance adjoint uses.

    Returns
    -------
    row : ndarray, shape (Q, n1)
    col : ndarray, shape (Q, n2)
    SA2 : ndarray, shape (Q, n1, D)
    GB : ndarray, shape (Q, P, P)
    """
    Q, P = K.shape[0], B.shape[1]
    n1, n2 = G.shape
    D = A2.shape[1]
    # np.empty and element loops, not np.zeros (gpdsl._jit.covariance.slope_adjoint's comment).
    row, col, SA2, GB = np.empty((Q, n1)), np.empty((Q, n2)), np.empty((Q, n1, D)), np.empty((Q, P, P))
    gb, sa = np.empty(P), np.empty(D)
    for q in range(Q):
        for j in range(n2):
            col[q, j] = 0.0
        for a in range(P):
            for p in range(P):
                GB[q, a, p] = 0.0
    for i in range(n1):
        m, a = pos1[i], p1[i]
        for q in range(Q):
            r = 0.0
            for p in range(P):
                gb[p] = 0.0
            for d in range(D):
                sa[d] = 0.0
            for j in range(n2):
                g = G[i, j]
                p, c = p2[j], pos2[j]
                gb[p] += g * K[q, m, c]
                s = g * B[q, a, p] * T[q, m, c]
                r += s
                col[q, j] += s
                for d in range(D):
                    sa[d] += s * A2[j, d]
            row[q, i] = r
            for d in range(D):
                SA2[q, i, d] = sa[d]
            for p in range(P):
                GB[q, a, p] += gb[p]
    return row, col, SA2, GB
