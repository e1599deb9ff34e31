"""Cholesky factorisation with the dynamic jitter ladder of thesis 5.1.3.

``jitter=None`` tries no jitter first, then ``JITTER_LADDER`` multiples of the mean diagonal
(the thesis author's code uses 1e-9 ... 1e0 absolute with unit signal variance; scaling by the
mean diagonal makes the ladder independent of the kernel variance), and raises past the last
rung.  A number fixes the jitter at that multiple of the mean diagonal (GPML's ``apxSparse``
uses 1e-6).  The jitter actually used is returned so that results can record it.
"""
import functools

import numpy as np
from scipy import linalg
from scipy.linalg import blas, lapack

from .checks import is_number
# lower_product lives with the other GIL-releasing product; imported from here by the methods.
from .released_blas import lower_gram, lower_product  # noqa: F401

JITTER_LADDER = (0.0, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2)


class NotPositiveDefiniteError(np.linalg.LinAlgError, ValueError):
    """A matrix stayed non positive definite after the whole jitter ladder."""


def check_jitter(owner, jitter):
    """Raise a ValueError naming ``owner`` unless ``jitter`` is None or a finite number >= 0.

    Parameters
    ----------
    owner : str
        The class the jitter is given to, for messages.
    jitter : object
        None (the dynamic ladder of thesis section 5.1.3) or a multiple of the mean diagonal;
        text and booleans are not numbers.

    Raises
    ------
    ValueError
        If ``jitter`` is not None and not a finite non-negative number.
    """
    if jitter is not None and not (is_number(jitter) and np.isfinite(jitter) and jitter >= 0):
        raise ValueError(f"{owner}: jitter must be None (dynamic ladder) or a non-negative number, "
                         f"got {jitter!r}")


def add_jitter(K, jitter):
    """K + jitter * mean(diag K) * I (a new array).

    Parameters
    ----------
    K : ndarray, shape (M, M)
        A symmetric matrix.
    jitter : float
        The multiple of the mean diagonal added to the diagonal.

    Returns
    -------
    ndarray, shape (M, M)
    """
    out = np.array(K, dtype=float)
    out[np.diag_indices_from(out)] += jitter * np.mean(np.diag(K))
    return out


def jitter_adjoint(G, jitter):
    """Adjoint of K from the adjoint G of K + jitter * mean(diag K) * I (the jitter moves with K).

    Parameters
    ----------
    G : ndarray, shape (M, M)
        d objective / d (K + jitter mean(diag K) I).
    jitter : float
        The multiple of the mean diagonal that was added.

    Returns
    -------
    ndarray, shape (M, M)
        d objective / d K: G plus ``jitter * trace(G) / M`` on the diagonal (G itself when the
        jitter is 0).
    """
    if jitter == 0.0:
        return G
    out = np.array(G, dtype=float)
    out[np.diag_indices_from(out)] += jitter * np.trace(G) / G.shape[0]
    return out


def cholesky(K, jitter=None, what="matrix"):
    """Lower Cholesky factor of K + jitter * mean(diag K) * I, with the dynamic jitter ladder.

    Passerello (2021), section 5.1.3 (dynamic jitter): with ``jitter=None`` the rungs of
    ``JITTER_LADDER`` are tried in turn, from no jitter up.

    Parameters
    ----------
    K : ndarray, shape (M, M)
        A symmetric positive semi-definite matrix.
    jitter : float or None, optional
        A fixed multiple of the mean diagonal, or None for the ladder.
    what : str, optional
        What K is, for the error message.

    Returns
    -------
    L : ndarray, shape (M, M)
        Lower-triangular, L L^T = K + jitter_used mean(diag K) I.
    jitter_used : float
        The rung that succeeded.

    Raises
    ------
    NotPositiveDefiniteError
        If every rung fails; the message names the likely cause read off K (non-finite
        entries, duplicate rows, a length-scale far longer than the inputs' spread).
    """
    rungs = JITTER_LADDER if jitter is None else (float(jitter),)
    for rung in rungs:
        try:
            L = linalg.cholesky(add_jitter(K, rung) if rung else K, lower=True, check_finite=False)
        except linalg.LinAlgError:
            continue
        if np.all(np.isfinite(L)) and np.all(np.diag(L) > 0):
            return L, rung
    raise NotPositiveDefiniteError(f"Cholesky of {what} failed with jitter up to {rungs[-1]:g} x mean diagonal: "
                                   f"{_likely_cause(K, jitter is not None)}")


# Correlation within this of 1 counts as identical rows (duplicate inputs give exactly 1).
_SAME_ROW_TOL = 1e-10


def _likely_cause(K, fixed):
    """The cause of a failed factorisation that can be read off K itself, for the error message.

    Non-finite entries come from hyperparameters that overflowed (typically data on a scale far
    from the declared values); a pair of rows with correlation 1 from duplicate inputs; every
    pair so from a length-scale far longer than the inputs' spread.  Anything else is put down
    to extreme hyperparameters, since a kernel matrix is positive semi-definite in exact
    arithmetic.  ``fixed``: the caller fixed the jitter (the ladder was not tried).
    """
    scale = "standardise X and y (subtract the mean, divide by the standard deviation)"
    if not np.all(np.isfinite(K)):
        return (f"it has NaN or infinite entries, so a hyperparameter overflowed or collapsed (data on a scale "
                f"far from the declared hyperparameters?); {scale}")
    if np.any(np.diag(K) <= 0):
        return "its diagonal has entries <= 0 (a kernel variance of 0, or not a covariance matrix)"
    d = np.sqrt(np.diag(K))
    off = np.abs(K / d[:, None] / d[None, :] - 1.0) <= _SAME_ROW_TOL
    np.fill_diagonal(off, False)
    i, j = np.nonzero(np.triu(off))
    m = K.shape[0]
    if i.size and i.size == m * (m - 1) // 2:
        return ("all its rows are equal to rounding: the length-scale is far longer than the spread of the "
                f"inputs, or the inputs coincide; {scale}")
    if i.size:
        return (f"{i.size} pair(s) of its rows are identical to rounding, e.g. rows {i[0]} and {j[0]}: duplicate "
                "inputs; remove them" + (", or pass jitter=None for the dynamic jitter ladder" if fixed else ""))
    return (f"no duplicate rows, so the hyperparameters are extreme for the data (a very long length-scale, "
            f"a variance many orders of magnitude from the targets'); {scale}")


def solve_lower(L, B):
    """Solve L X = B for lower-triangular L.

    Parameters
    ----------
    L : ndarray, shape (M, M)
        Lower-triangular.
    B : ndarray, shape (M,) or (M, k)
        Right-hand side(s).

    Returns
    -------
    ndarray, shape of B
        L^-1 B.
    """
    return linalg.solve_triangular(L, B, lower=True, check_finite=False)


def whiten(L, K, transpose=False, inverse=None):
    """L^-1 K (or, with ``transpose``, L^-T K) for lower-triangular L (M, M) and K (M, n) -> (M, n),
    C-ordered.

    With at least M columns, as the triangular product of L^-1 (:func:`inverse_lower`, M^3 / 3
    flops once) and K (:func:`lower_product`): OpenBLAS's triangular product runs at twice the
    rate of its triangular solve (one thread, n = 16,384: 2.0 against 4.0 ms at M = 60, 7.4
    against 12.6 ms at M = 128, the inverse included), and against a 40-digit solve both are
    accurate to the same 1e-13 to 2e-12 relative for cond(L) 5e3 to 7e4 (K_uu of an SE kernel
    with jitter 1e-6 to 1e-10).  With fewer columns, the solve posed as X L^T = K^T (X L = K^T)
    on the transposed (Fortran-ordered, so not copied) view, which OpenBLAS runs 1.6x (M = 256)
    to 2.3x (M = 21) faster than the left-sided solve that SciPy makes from a C-ordered K.  A 1-D
    K (M,) gives L^-1 K (M,).  K is not overwritten.

    Parameters
    ----------
    L : ndarray, shape (M, M)
        Lower-triangular.
    K : ndarray, shape (M, n) or (M,)
        Right-hand side(s).
    transpose : bool, default False
        Solve with L^T.
    inverse : ndarray, shape (M, M), optional
        L^-1, where the caller has formed it already (a pass over row chunks forms it once).

    Returns
    -------
    ndarray, shape of K
        L^-1 K or L^-T K, C-ordered.
    """
    K = np.asarray(K, dtype=float)
    if K.ndim == 1:
        return whiten(L, K[:, None], transpose, inverse)[:, 0]
    if K.shape[1] >= L.shape[0]:
        return lower_product(inverse_lower(L) if inverse is None else inverse, K, transpose)
    return blas.dtrsm(1.0, L, K.T, side=1, lower=1, trans_a=0 if transpose else 1).T


def stacked(blocks):
    """``np.stack(blocks)``, except that one block is returned as a view with a new leading axis
    rather than copied: the row-chunked passes stack one block per kernel block or latent
    function, and with one (a shared kernel, one latent function) the copy of an (M, n) block
    was 16 % of the final full-data pass of a minibatch SVGP fit at N = 10^6 (0.44 of 2.77 s).

    Parameters
    ----------
    blocks : sequence of ndarray
        Arrays of one shape.

    Returns
    -------
    ndarray, shape (len(blocks), ...)
    """
    return blocks[0][None] if len(blocks) == 1 else np.stack(blocks)


def weighted_gram(A, v, lower=False):
    """A diag(v) A^T (M, M), symmetric, for A (M, n) and v (n,): where v keeps one sign, the
    symmetric rank-n update of A sqrt(|v|) (DSYRK, M^2 n flops, on the transposed view so that
    nothing is copied to Fortran order; of A itself, scaled by v, where v is one number repeated),
    else the general product (2 M^2 n).

    Parameters
    ----------
    A : ndarray, shape (M, n)
    v : ndarray, shape (n,)
    lower : bool, default False
        Return only the lower triangle (the strict upper one zero): for a sum over row blocks,
        mirrored once at the end (:func:`symmetric_from_lower`) rather than per block (3.8 of a
        17.4 ms block at M = 768, n = 1,365).

    Returns
    -------
    ndarray, shape (M, M)
    """
    # The sign tests from v's least and largest entries: two reductions rather than up to three
    # np.all passes (each about 3 us of NumPy's Python wrapper, three times per class in every
    # natural pass of a K-class SVGP fit); a NaN fails each comparison, as it failed each np.all.
    low, high = (v.min(), v.max()) if v.size else (0.0, 0.0)
    finish = (lambda triangle: triangle) if lower else symmetric_from_lower
    if v.size and low == high:
        # One weight (a homoscedastic noise's 1 / sigma^2): v A A^T, with no scaled copy of A.
        return finish(lower_gram(A, float(v[0])))
    if low >= 0.0:
        sign, root = 1.0, np.sqrt(v)
    elif high <= 0.0:
        sign, root = -1.0, np.sqrt(-v)
    else:
        P = (A * v) @ A.T
        P = 0.5 * (P + P.T)          # symmetric to the last bit, as the rank-n update's
        return np.tril(P) if lower else P
    return finish(lower_gram(A * root, sign))


def symmetric_from_lower(lower):
    """The symmetric matrix whose lower triangle is ``lower``'s: lower + lower^T with the doubled
    diagonal put back, exactly symmetric, and without the mask that ``np.tril`` builds.

    Parameters
    ----------
    lower : ndarray, shape (M, M)
        Its strict upper triangle zero, as DSYRK leaves it.

    Returns
    -------
    ndarray, shape (M, M)
    """
    out = lower + lower.T
    out.flat[::out.shape[0] + 1] = lower.diagonal()      # np.fill_diagonal's assignment, without its wrapper
    return out


def solve_upper_t(L, B):
    """Solve L^T X = B for lower-triangular L.

    Parameters
    ----------
    L : ndarray, shape (M, M)
        Lower-triangular.
    B : ndarray, shape (M,) or (M, k)
        Right-hand side(s).

    Returns
    -------
    ndarray, shape of B
        L^-T B.
    """
    return linalg.solve_triangular(L, B, lower=True, trans="T", check_finite=False)


def inverse_lower(L):
    """L^-1 for lower-triangular L.

    Parameters
    ----------
    L : ndarray, shape (M, M)
        Lower-triangular.

    Returns
    -------
    ndarray, shape (M, M)
        Lower-triangular L^-1.
    """
    # LAPACK's triangular inverse (M^3 / 3 flops; the solve against I is M^3: 0.11 against 0.15 ms
    # at M = 128), on the transposed view: L^T is upper-triangular and Fortran-ordered, so nothing
    # is copied, and the inverse comes back as the transpose of (L^-1)^T.
    inverse_t, info = lapack.dtrtri(np.asarray(L, dtype=float).T, lower=0)
    if info > 0:
        raise np.linalg.LinAlgError(f"singular matrix: zero on the diagonal at {info - 1}")
    # np.tril's own mask (np.tri) took 6 of its 8 us at M = 10, three times a natural pass.
    return np.where(_lower_mask(inverse_t.shape[0]), inverse_t.T, 0.0)


@functools.lru_cache(maxsize=16)
def _lower_mask(M):
    """The (M, M) boolean mask of the lower triangle (diagonal included), read-only: ``np.tril``'s."""
    mask = np.tri(M, dtype=bool)
    mask.setflags(write=False)
    return mask


def inverse_from_cholesky(L):
    """(L L^T)^{-1} as a symmetric array.

    Parameters
    ----------
    L : ndarray, shape (M, M)
        Lower Cholesky factor.

    Returns
    -------
    ndarray, shape (M, M)
        L^-T L^-1.
    """
    Li = inverse_lower(L)
    return Li.T @ Li
