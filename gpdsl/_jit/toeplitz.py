"""The whitened blocks A = lam K + I of Exact's Kronecker path where K is Toeplitz, in O(n^2).

A stationary kernel on an evenly spaced one-dimensional grid gives a Toeplitz K (entry (i, j) a
function of |i - j| only), and then every block A = lam K + I_n of :func:`gpdsl.methods.exact._kronecker`
is a symmetric positive definite Toeplitz matrix, fixed by its first row r.  Schur's algorithm
gives its reflection coefficients and log|A| (the sum of the logs of its pivots) in O(n^2), from
which Durbin's recursion builds the solution of the Yule-Walker equations of r, and Trench's
recurrence then gives A^-1 row by row in O(n^2) (Golub & Van Loan, *Matrix Computations*, 4th
ed., Algorithms 4.7.1 and 4.7.3; Kailath & Sayed, *Fast Reliable Algorithms for Matrices with
Structure*, 1999, ch. 1), against the O(n^3) of a Cholesky factor or an eigendecomposition.

The rows of A^-1 are used as they are made and not stored: what the log evidence and its gradient
need of a block (a solve, tr(A^-1 K), the diagonal of A^-1, and lam A^-1 added into a sum) is
taken in the same sweep, so that a block costs a few passes over K rather than a dozen over an
n x n inverse (memory, not flops, is the cost at n = 1,860: 28 MB a matrix).  Both algorithms
are weakly stable (their errors grow with the condition number faster than a Cholesky factor's):
the caller bounds the condition number, and the solve is refined once against lam K + I itself.
"""
import numpy as np
from numba import njit


@njit(cache=True, nogil=True, fastmath={"reassoc", "nsz", "contract"})
def toeplitz_block(row, K, lam, b, inverse_sum):
    """Solve, log-determinant, trace and diagonal of A^-1 for A = lam K + I_n, K symmetric and
    Toeplitz up to a small perturbation.

    The recurrences invert A_T = lam T + I for the Toeplitz matrix T of ``row``; K = T + E.  The
    solve is refined once against A itself (its error is then of order (lam |E|)^2), and log|A| is
    log|A_T| + lam tr(A_T^-1 E), first order in E (the caller bounds lam |E|_F,
    :func:`toeplitz_row`); the trace, the diagonal and the sum are A_T^-1's (first order in E).

    Parameters
    ----------
    row : ndarray, shape (n,)
        The first row of T (:func:`toeplitz_row`: K's diagonals' means).
    K : ndarray, shape (n, n)
        Symmetric.
    lam : float
        The block's weight; A must be positive definite.
    b : ndarray, shape (n,)
        Right-hand side.
    inverse_sum : ndarray, shape (n, n) or (0, 0)
        lam A^-1 is added into its upper triangle (i <= j); the strict lower triangle is not touched.
        Empty: nothing is added (an evaluation without gradients).

    Returns
    -------
    solved : ndarray, shape (n,)
        A^-1 b.
    log_det : float
        log|A_T| = sum_k log p_k over Schur's pivots p_k (p_0 = r0 = lam row[0] + 1), plus the
        first-order term; NaN where r0 or some p_k <= 0 (A not numerically positive definite), and
        then nothing else is computed nor added.
    trace : float
        tr(A^-1 K).
    diagonal : ndarray, shape (n,)
        The diagonal of A^-1.
    """
    n = K.shape[0]
    r0 = lam * row[0] + 1.0
    solved, diagonal = np.empty(n), np.empty(n)
    if not r0 > 0.0:
        return solved, np.nan, np.nan, diagonal
    m = n - 1
    log_det = n * np.log(r0)
    if m == 0:
        inverse = 1.0 / r0
        solved[0] = inverse * b[0]
        diagonal[0] = inverse
        if inverse_sum.shape[0] == n:
            inverse_sum[0, 0] += lam * inverse
        return solved, log_det + lam * inverse * (K[0, 0] - row[0]), inverse * K[0, 0], diagonal
    # Schur's algorithm: the generator pair (p, q) of A, p shifted and q's leading entry eliminated
    # at each step, gives the reflection coefficients g_k and the pivots p_k (log|A| = sum log p_k)
    # from generator entries alone.  Durbin's algorithm gets the same coefficients from inner
    # products, which lose digits with the condition number: its log|A| was off by 3e-6 at a
    # condition number of 1e6 (N = 1,860), Schur's by 3e-9, a Cholesky factor's accuracy.
    p, q = np.empty(n), np.empty(n)
    for j in range(n):
        p[j] = lam * row[j]
        q[j] = p[j]
    p[0] += 1.0
    q[0] = 0.0
    # Durbin's y (Algorithm 4.7.1) of the Yule-Walker system T_m y = -r[1:] / r0, T_m the leading
    # m x m block of A / r0, grown one order a step with the reflection coefficient alpha = -g.
    y, previous = np.empty(m), np.empty(m)
    for k in range(1, n):
        g = q[k] / p[k - 1]
        for j in range(n - 1, k - 1, -1):
            shifted = p[j - 1]
            p[j] = shifted - g * q[j]
            q[j] -= g * shifted
        if not p[k] > 0.0:
            return solved, np.nan, np.nan, diagonal
        log_det += np.log(p[k] / r0)
        alpha = -g
        for j in range(k - 1):
            previous[j] = y[j]
        for j in range(k - 1):
            y[j] = previous[j] + alpha * previous[k - 2 - j]
        y[k - 1] = alpha
    # Trench (Algorithm 4.7.3): gamma = 1 / (1 + r[1:] . y / r0), the last normalised pivot's
    # inverse, and v = gamma * reversed(y) give A^-1's first row, and each later entry (i, j),
    # i <= j, is its upper-left neighbour plus (v[m-j] v[m-i] - v[i-1] v[j-1]) / gamma (0-based);
    # everything is divided by r0 on the way (A^-1 = (A / r0)^-1 / r0).
    gamma = r0 / p[m]
    # v (entry 0 unused, so that v[i] is the 0-based v[i - 1]) and its reverse u[j] = v[m - j]: both
    # read forwards in the recurrence's inner loop.
    v, u = np.empty(n), np.empty(n)
    v[0] = 0.0
    for j in range(m):
        v[j + 1] = gamma * y[m - 1 - j] / r0
    for j in range(1, n):
        u[j] = v[m - j + 1]
    u[0] = 0.0
    step = r0 / gamma                     # v is divided by r0: (v v - v v) / gamma / r0 = that * r0 / gamma
    first = np.empty(n)
    first[0] = gamma / r0
    for j in range(1, n):
        first[j] = u[j]
    trace, perturbation = _sweep(first, v, u, step, b, solved, K, row, lam, inverse_sum, diagonal)
    log_det += lam * perturbation
    # One step of refinement: the residual against lam K + I, solved with the same rows again.
    residual = np.empty(n)
    for i in range(n):
        acc = 0.0
        for j in range(n):
            acc += K[i, j] * solved[j]
        residual[i] = b[i] - lam * acc - solved[i]
    correction = np.empty(n)
    _sweep(first, v, u, step, residual, correction, K, row, lam, inverse_sum, diagonal[:0])
    for i in range(n):
        solved[i] += correction[i]
    return solved, log_det, trace, diagonal


@njit(cache=True, nogil=True, fastmath={"reassoc", "nsz", "contract"})
def _sweep(first, v, u, step, b, out, K, T, lam, inverse_sum, diagonal):
    """Make A_T^-1's upper triangle row by row (Trench's recurrence, with v and u as
    :func:`toeplitz_block` shifts and reverses them) and set out = A_T^-1 b; where ``diagonal`` has
    n entries, also write A_T^-1's diagonal into it, add lam A_T^-1 into ``inverse_sum``'s upper
    triangle (where it is n x n) and return (tr(A_T^-1 K), tr(A_T^-1 (K - T))) for the Toeplitz T
    of first row ``T`` (an empty ``diagonal``: only the solve, and (0, 0)).  The choice is by the
    array's length, not a bool argument: the constants True and False at the two calls would be
    typed as two literals and compile this twice (0.3 s)."""
    n = first.shape[0]
    accumulate = diagonal.shape[0] == n
    into_sum = accumulate and inverse_sum.shape[0] == n
    row, previous = first.copy(), np.empty(n)
    for i in range(n):
        out[i] = 0.0
    trace = 0.0
    perturbation = 0.0
    for i in range(n):
        if i > 0:
            row, previous = previous, row
            for j in range(i, n):
                row[j] = previous[j - 1] + (u[j] * u[i] - v[i] * v[j]) * step
        acc = row[i] * b[i]
        for j in range(i + 1, n):
            acc += row[j] * b[j]
            out[j] += row[j] * b[i]
        out[i] += acc
        if accumulate:
            diagonal[i] = row[i]
            t = 0.0
            e = 0.0
            for j in range(i + 1, n):
                t += row[j] * K[i, j]
                e += row[j] * (K[i, j] - T[j - i])
            trace += row[i] * K[i, i] + 2.0 * t
            perturbation += row[i] * (K[i, i] - T[0]) + 2.0 * e
            if into_sum:
                for j in range(i, n):
                    inverse_sum[i, j] += lam * row[j]
    return trace, perturbation


@njit(cache=True, nogil=True)
def toeplitz_row(K, tolerance):
    """The means of K's diagonals, where every K[i, j] is within ``tolerance`` of K[0, |i - j|],
    and K's distance from their Toeplitz matrix.

    Parameters
    ----------
    K : ndarray, shape (n, n)
    tolerance : float

    Returns
    -------
    row : ndarray, shape (n,)
        row[t] = the mean of K[i, j] over |i - j| = t: the Toeplitz matrix T of the means is the
        nearest one to K in the Frobenius norm, and where K is Toeplitz up to rounding (a
        stationary kernel's distances formed through a cross term carry an error of about
        eps |x|^2 / lengthscale^2) K's rounding errors average out in it.
    deviation : float
        |K - T|_F.
    ok : bool
        False where an entry is further than ``tolerance`` from K[0, |i - j|] (``row`` and
        ``deviation`` are then not filled in), found at the end of the first row that has one,
        so that a matrix far from Toeplitz costs a row or two.
    """
    n = K.shape[0]
    # One pass: each diagonal's sum and sum of squares of the deviations d = K[i, j] - K[0, t] give
    # its mean K[0, t] + sum d / count and sum (K - mean)^2 = sum d^2 - (sum d)^2 / count (formed
    # from the small deviations, not from K's entries, so that nothing cancels); a row at a time,
    # its entries with j >= i (t = j - i) and j < i (t = i - j) in two contiguous loops.
    sums, squares = np.empty(n), np.empty(n)
    for t in range(n):
        sums[t] = 0.0
        squares[t] = 0.0
    for i in range(n):
        largest = 0.0
        for j in range(i, n):
            d = K[i, j] - K[0, j - i]
            largest = max(largest, abs(d))
            sums[j - i] += d
            squares[j - i] += d * d
        for j in range(i):
            d = K[i, j] - K[0, i - j]
            largest = max(largest, abs(d))
            sums[i - j] += d
            squares[i - j] += d * d
        if not largest <= tolerance:
            return sums, np.nan, False
    row = np.empty(n)
    total = 0.0
    for t in range(n):
        count = n if t == 0 else 2 * (n - t)
        row[t] = K[0, t] + sums[t] / count
        total += max(squares[t] - sums[t] * sums[t] / count, 0.0)
    return row, np.sqrt(total), True


@njit(cache=True, nogil=True)
def fill_lower(S):
    """Copy S's upper triangle into its strict lower one in place (S (n, n)), in 64 x 64 tiles so
    that the transposed reads stay in cache."""
    n = S.shape[0]
    tile = 64
    for i0 in range(0, n, tile):
        for j0 in range(0, i0 + 1, tile):
            for i in range(i0, min(i0 + tile, n)):
                for j in range(j0, min(j0 + tile, i)):
                    S[i, j] = S[j, i]
