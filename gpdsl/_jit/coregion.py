"""Jitted sweeps of the coregionalisation kernels (:mod:`gpdsl.kernels.coregion`) over the long
rows, with the base kernels evaluated once per distinct input.

An LMC's entry is ``K[i, j] = sum_q B_q[p1_i, p2_j] k_q(x1_i, x2_j)``, and the long layout repeats
an input once per output it is observed at: inducing inputs shared by P outputs are P copies of
M inputs.  The base kernels' values (and, for the gradient, their slopes in r^2) are formed on the
distinct inputs; these sweeps assemble the long Gram matrix from them and contract an adjoint G
of it with them, without the (n1, n2) temporaries per part that the NumPy expression (a gathered
copy of each part's values, a gathered B_q, their product, a sum) and the base kernel's own VJP
on the long rows (its exp and slope on every copy) needed: with them, one collapsed bound and
gradient at 10^5 heterotopic rows, Q = 3 and 768 long inducing rows took 15.4 CPU s, with these
sweeps 8.0 (benchmarks/HISTORY.md, issue 48).
"""
import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def output_runs(p2):
    """The starts of the runs of equal entries of ``p2`` (n2,), and n2 last: run k is
    ``range(starts[k], starts[k + 1])`` (a long layout's rows come output by output, so that its
    columns fall into few runs of one output)."""
    n2 = p2.shape[0]
    starts = np.empty(n2 + 1, dtype=np.intp)
    runs = 0
    for j in range(n2):
        if j == 0 or p2[j] != p2[j - 1]:
            starts[runs] = j
            runs += 1
    starts[runs] = n2
    return starts[:runs + 1]


@njit(cache=True, nogil=True)
def coregion_add(out, K, B, pos1, p1, p2, first):
    """``out[i, j] += B[p1_i, p2_j] K[pos1_i, j]`` (one part of an LMC's Gram matrix), or ``=``
    where ``first``; the parts added one call each, in order, make the same sums as adding each
    part's gathered values times its gathered B.

    Parameters
    ----------
    out : ndarray, shape (n1, n2)
        Updated in place.
    K : ndarray, shape (u1, n2)
        The part's base kernel at the distinct row inputs and every column.
    B : ndarray, shape (P, P)
        Its coregionalisation matrix.
    pos1, p1 : ndarray of intp, shape (n1,)
        Each long row's distinct input and output.
    p2 : ndarray of intp, shape (n2,)
        Each column's output.
    first : bool
        Write rather than add (``out`` may hold anything).
    """
    n1, n2 = out.shape
    # Runs of columns of one output (coregion_vjp_sweep's): B's entry one number, the loop a
    # contiguous vector update.
    run_start = output_runs(p2)
    for i in range(n1):
        K_m, a, out_i = K[pos1[i]], p1[i], out[i]
        for k in range(run_start.shape[0] - 1):
            start, stop = run_start[k], run_start[k + 1]
            b = B[a, p2[start]]
            if first:
                for j in range(start, stop):
                    out_i[j] = b * K_m[j]
            else:
                for j in range(start, stop):
                    out_i[j] += b * K_m[j]


@njit(cache=True, nogil=True, fastmath={"reassoc", "nsz", "contract"})
def coregion_vjp_sweep(G, K, T, B, pos1, p1, p2, A2t):
    """Contract the adjoint G of an LMC Gram block with each part's values and slopes.

    With ``S_q[i, j] = G[i, j] B[q, p1_i, p2_j] T[q, pos1_i, j]`` (the adjoint of part q's r^2,
    T = dk_q/dr^2), returns what the stationary base kernels' distance adjoint contracts
    (:meth:`gpdsl.kernels.stationary.Stationary.distance_vjp`): S_q's row and column sums and
    ``S_q @ A2``, and the adjoint of B_q, ``GB[q, a, p] = sum of G[i, j] K[q, pos1_i, j]`` over the
    rows i of output a and columns j of output p.  The sums are reassociated (fastmath
    ``reassoc``), so that they run as vector reductions: rounding-level differences from a
    left-to-right sum.

    Parameters
    ----------
    G : ndarray, shape (n1, n2)
    K, T : ndarray, shape (Q, u1, n2)
        Part q's values k_q and slopes dk_q/dr^2 at each distinct row input and column.
    B : ndarray, shape (Q, P, P)
    pos1, p1 : ndarray of intp, shape (n1,)
        Each row's distinct input and output.
    p2 : ndarray of intp, shape (n2,)
        Each column's output.
    A2t : ndarray, shape (D, n2)
        The column inputs less the centre the distance adjoint uses, transposed.

    Returns
    -------
    row : ndarray, shape (Q, n1)
    col : ndarray, shape (Q, n2)
    SA2 : ndarray, shape (Q, n1, D)
    GB : ndarray, shape (Q, P, P)
    """
    Q, P = K.shape[0], B.shape[1]
    n1, n2 = G.shape
    D = A2t.shape[0]
    # np.empty and element loops, not np.zeros (gpdsl._jit.covariance.slope_adjoint's comment).
    row, col, SA2, GB = np.empty((Q, n1)), np.empty((Q, n2)), np.empty((Q, n1, D)), np.empty((Q, P, P))
    S = np.empty(n2)
    # The columns in runs of one output (a long layout's rows come output by output), so that
    # within a run B_q's entry is one number and G K's block sum one accumulator, and each loop
    # over a run or a row is a contiguous vector reduction: 1.5 ns an entry at 768 x 1,365, Q = 3,
    # against 3.6 with B and the block sum indexed by each column's output.
    run_start = output_runs(p2)
    for q in range(Q):
        for j in range(n2):
            col[q, j] = 0.0
        for a in range(P):
            for p in range(P):
                GB[q, a, p] = 0.0
    for i in range(n1):
        m, a = pos1[i], p1[i]
        G_i = G[i]
        for q in range(Q):
            K_m, T_m, col_q = K[q, m], T[q, m], col[q]
            r = 0.0
            for k in range(run_start.shape[0] - 1):
                start, stop = run_start[k], run_start[k + 1]
                p = p2[start]
                b = B[q, a, p]
                gk = 0.0
                for j in range(start, stop):
                    g = G_i[j]
                    gk += g * K_m[j]
                    s = g * b * T_m[j]
                    S[j] = s
                    r += s
                    col_q[j] += s
                GB[q, a, p] += gk
            row[q, i] = r
            for d in range(D):
                A_d = A2t[d]
                acc = 0.0
                for j in range(n2):
                    acc += S[j] * A_d[j]
                SA2[q, i, d] = acc
    return row, col, SA2, GB
