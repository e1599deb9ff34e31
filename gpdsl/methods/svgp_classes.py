"""The per-class products of a K-class SVGP pass, written into one (K, ...) stack, q's natural
parameters and the centring of its class mean (:mod:`gpdsl.methods.svgp`).

A pass over n rows with M inducing points and K latent functions forms, for each class k, the
triangular products U_k = R_k^T A (M, n) and R_k (U_k D_k), the weighted grams A D_k A^T (M, M),
and each natural step refactorises K precisions.  Each of these is one BLAS or LAPACK call of
O(M^2 n) or O(M^3) a class; what this module saves is the copying around those calls, which at
letter's shape (K = 26, M = 100, n = 256) cost about as much as the products themselves:

* SciPy's wrappers copy an operand that they overwrite (``overwrite_b=0``) and a C-ordered
  triangle that LAPACK reads in Fortran order; here each U_k is written into its slot of the stack
  (the slot filled with A first, then multiplied in place), R_k is handed over as the
  Fortran-ordered view of R_k^T (an upper triangle), and the K results need no ``np.stack``;
* the weighted grams' rank-n updates each leave one triangle, made symmetric once for the stack
  rather than once a class;
* the natural step's triangular inverse works in place on the reversed Cholesky factor;
* a run of minibatch steps keeps its stacks from step to step (:class:`Scratch`).

Measured on letter's ``GPClassifier()`` (benchmarks/HISTORY.md, "letter's GPClassifier() under 30
CPU s", default environment, load 3.5-3.9): 31.7 -> 21.9 CPU s, the same fit; the 26 products
U_k at n = 256 5.4-6.1 -> 1.7 ms; 1.0-1.7 million page faults -> 19-23 thousand.

Every function returns the same numbers, to the last bit, as the one-class-at-a-time form it
replaces (:func:`gpdsl.linalg.lower_product`, :func:`gpdsl.linalg.weighted_gram`,
:func:`gpdsl.linalg.inverse_lower`: the same BLAS and LAPACK routines on the same operands;
tests/test_svgp_classes.py), so a fit takes the same steps.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import blas, lapack

from ..linalg import inverse_from_cholesky, weighted_gram
from ..released_blas import lower_gram


class Scratch:
    """Arrays that a run of minibatch steps reuses from step to step, by name: the stacks of a
    batch pass (U, the weighted grams, A W A^T), which are dead once the step has used them.

    Why: a step's (K, M, B) and (K, M, M) temporaries, 5.3 and 2.1 MB at letter's shape, were
    fresh pages each step (the C library hands the freed top of its heap back to the system and
    faults it in again: ~1,000 page faults a step), about 4 of the 30 CPU s of letter's
    ``GPClassifier()`` (benchmarks/HISTORY.md, "letter's GPClassifier() under 30 CPU s").  One
    Scratch serves one run in one thread (:class:`gpdsl.methods.svgp.CarriedQ` carries it); a
    pass over several row blocks, whose sums outlive a block, takes none.
    """

    def __init__(self):
        self._arrays = {}

    def array(self, name, shape):
        """The array kept under ``name``, (re)allocated where its shape is not ``shape``; its
        contents are whatever the last user left.

        Parameters
        ----------
        name : str
        shape : tuple of int

        Returns
        -------
        ndarray
            C-ordered float64.
        """
        kept = self._arrays.get(name)
        if kept is None or kept.shape != tuple(shape):
            kept = self._arrays[name] = np.empty(shape)
        return kept


def kept(scratch, name, shape):
    """``scratch``'s array ``name`` of ``shape`` (:meth:`Scratch.array`), or None (a new array) without
    a scratch.

    Parameters
    ----------
    scratch : Scratch or None
    name : str
    shape : tuple of int

    Returns
    -------
    ndarray or None
    """
    return None if scratch is None else scratch.array(name, shape)


def on_top(row, A, scale):
    """The (M + 1, n) array [row; A diag(scale)], written in one pass: the right operand of the K_uf
    adjoint's one product a class (:func:`gpdsl.methods.svgp._data_pass`).

    Parameters
    ----------
    row : ndarray, shape (n,)
    A : ndarray, shape (M, n)
    scale : ndarray, shape (n,)

    Returns
    -------
    ndarray, shape (M + 1, n)
    """
    out = np.empty((A.shape[0] + 1, A.shape[1]))
    out[0] = row
    np.multiply(A, scale, out=out[1:])
    return out


def project(A, c):
    """a_gn^T c_k for every row n and latent function k: (n, K) from A (G, M, n), c (M, K).

    Parameters
    ----------
    A : ndarray, shape (G, M, n)
        A = L^-1 K_uf per kernel block (G = 1 shared by the K latent functions, or K).
    c : ndarray, shape (M, K)

    Returns
    -------
    ndarray, shape (n, K)
    """
    return A[0].T @ c if A.shape[0] == 1 else np.einsum("kmn,mk->nk", A, c)


def gather(A, r):
    """sum_n a_gn r_nk: (M, K) from A (G, M, n), r (n, K) (the transpose of :func:`project`).

    Parameters
    ----------
    A : ndarray, shape (G, M, n)
    r : ndarray, shape (n, K)

    Returns
    -------
    ndarray, shape (M, K)
    """
    return A[0] @ r if A.shape[0] == 1 else np.einsum("kmn,nk->mk", A, r)


def class_products(R, A, block, out=None):
    """U_k = R_k^T A_{g_k} for every class k, stacked: (K, M, n).

    Parameters
    ----------
    R : ndarray, shape (K, M, M)
        Lower-triangular R_k (C-ordered; the upper triangle is not read).
    A : ndarray, shape (G, M, n)
        A = L^-1 K_uf per kernel block.
    block : sequence of int
        g_k, class k's kernel block (all 0 for a kernel shared by the classes).
    out : ndarray, shape (K, M, n), optional
        C-ordered; written (a new array where None).

    Returns
    -------
    ndarray, shape (K, M, n)
        C-ordered (``out`` where given).
    """
    U = np.empty((R.shape[0],) + A.shape[1:]) if out is None else out
    for k, g_k in enumerate(block):
        U[k] = A[g_k]
        # (U_k^T R_k), i.e. U_k = R_k^T A, in place on the Fortran-ordered view U_k^T; R_k^T is
        # R_k's Fortran-ordered view, an upper triangle (no copy).
        blas.dtrmm(1.0, R[k].T, U[k].T, side=1, lower=0, trans_a=1, overwrite_b=1)
    return U


def subtract_class_products(W, R, V):
    """W -= sum_k R_k V_k, the classes taken in order, with V overwritten (V_k <- R_k V_k).

    Parameters
    ----------
    W : ndarray, shape (M, n)
        Updated in place.
    R : ndarray, shape (K, M, M)
        Lower-triangular R_k.
    V : ndarray, shape (K, M, n)
        C-ordered; overwritten by the products R_k V_k.

    Returns
    -------
    ndarray, shape (M, n)
        W.
    """
    for k in range(R.shape[0]):
        blas.dtrmm(1.0, R[k].T, V[k].T, side=1, lower=0, trans_a=0, overwrite_b=1)
        W -= V[k]
    return W


def weighted_grams(A, V, block, out=None):
    """A_{g_k} diag(v_k) A_{g_k}^T for every class k, stacked: (K, M, M), each exactly
    :func:`gpdsl.linalg.weighted_gram`'s: its rank-n updates (v_k of one sign, not constant) of A
    scaled in one buffer, made symmetric in their slots; its other cases are its own.

    Parameters
    ----------
    A : ndarray, shape (G, M, n)
        Per kernel block.
    V : ndarray, shape (K, n)
        Class k's weights v_k.
    block : sequence of int
        g_k, class k's kernel block.
    out : ndarray, shape (K, M, M), optional
        C-ordered; written (a new array where None).

    Returns
    -------
    ndarray, shape (K, M, M)
        Symmetric to the last bit (``out`` where given).
    """
    K, M, n = V.shape[0], A.shape[1], A.shape[2]
    out = np.empty((K, M, M)) if out is None else out
    if n == 0:
        out[...] = 0.0
        return out
    low, high = V.min(axis=1), V.max(axis=1)
    # A NaN weight fails both sign tests, as in weighted_gram: that class takes its general product.
    ranked = (low != high) & ((low >= 0.0) | (high <= 0.0))
    scaled = np.empty((M, n))
    for k in range(K):
        if not ranked[k]:
            if low[k] == high[k]:
                out[k] = weighted_gram(A[block[k]], V[k])
            else:
                # weighted_gram's general product, whose sign tests are the ones above: weights
                # of both signs (robust-max's sites, in every natural step of its fits), or NaN.
                general = np.multiply(A[block[k]], V[k], out=scaled) @ A[block[k]].T
                np.add(general, general.T, out=out[k])
                out[k] *= 0.5
            continue
        sign, root = (1.0, np.sqrt(V[k])) if low[k] >= 0.0 else (-1.0, np.sqrt(-V[k]))
        P = out[k]
        # The Fortran-ordered result's lower triangle is the upper one of its transpose (the other 0);
        # each entry then the sum of its pair, as weighted_gram's lower + lower^T, the diagonal kept.
        P[...] = lower_gram(np.multiply(A[block[k]], root, out=scaled), sign).T
        diagonal = P.diagonal().copy()
        P += P.T
        P.flat[::M + 1] = diagonal
    return out


def natural(m, R):
    """q's natural parameters (S_k^-1 (K, M, M), S_k^-1 m_k (K, M)) from the stacked m (M, K) and
    R (K, M, M), S_k = R_k R_k^T.

    Parameters
    ----------
    m : ndarray, shape (M, K)
    R : ndarray, shape (K, M, M)
        Lower-triangular.

    Returns
    -------
    Lam : ndarray, shape (K, M, M)
    eta : ndarray, shape (K, M)
    """
    Lam = np.stack([inverse_from_cholesky(R_k) for R_k in R])     # S^-1
    return Lam, np.einsum("kij,jk->ki", Lam, m)


def from_natural(Lam, eta):
    """The stacked (m (M, K), R (K, M, M)) with R_k R_k^T = S_k = Lam_k^-1, R_k lower-triangular,
    m_k = S_k eta_k: the inverse of :func:`natural`.

    Lam_k = U U^T with U = J C J upper (C the Cholesky factor of the reversed J Lam_k J, J the
    reversal), so R_k = U^-T with no inverse of Lam_k formed: U^-1 by LAPACK's triangular inverse
    in place on a Fortran-ordered copy of U (the operand :func:`gpdsl.linalg.inverse_lower` hands
    it, without that function's two further copies and mask).

    Parameters
    ----------
    Lam : ndarray, shape (K, M, M)
        S_k^-1, symmetric positive definite (only its upper triangle is read).
    eta : ndarray, shape (K, M)
        S_k^-1 m_k.

    Returns
    -------
    m : ndarray, shape (M, K)
    R : ndarray, shape (K, M, M)

    Raises
    ------
    numpy.linalg.LinAlgError
        Some Lam_k is not positive definite.
    """
    R = np.empty_like(Lam)
    U = np.empty(Lam.shape[1:], order="F")
    for k, Lam_k in enumerate(Lam):
        # LAPACK's dpotrf as scipy.linalg.cholesky calls it (clean: the other triangle zeroed), without
        # that wrapper's checks: 9 of its 11 us at M = 10, K times a natural step of a K-class fit.
        C, info = lapack.dpotrf(Lam_k[::-1, ::-1], lower=1, clean=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"SVGP: S^-1 of latent function {k} is not positive definite "
                                        f"(dpotrf info {info})")
        U[...] = C[::-1, ::-1]
        _, info = lapack.dtrtri(U, lower=0, overwrite_c=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"SVGP: the Cholesky factor of S^-1 of latent function {k} is singular "
                                        f"(dtrtri info {info})")
        R[k] = U.T
    return np.einsum("kij,kj->ik", R, np.einsum("kji,kj->ki", R, eta)), R


def prior_plus(AWA, scale=1.0, out=None):
    """I + scale A W A^T (per class for a (K, M, M) stack): the sites' natural precision of q(v)
    with the prior's.  A W A^T must be symmetric to the last bit, as :func:`gpdsl.methods.svgp`'s
    passes form it (each class's rank-n update made symmetric, the chunks' sums entry by entry).

    Parameters
    ----------
    AWA : ndarray, shape (K, M, M)
    scale : float, default 1.0
    out : ndarray, shape (K, M, M), optional
        C-ordered, where to write (may be ``AWA`` itself); None: a new array.

    Returns
    -------
    ndarray, shape (K, M, M)
        C-ordered (``out`` where given).
    """
    Lam_hat = np.multiply(AWA, scale, out=out)
    M = AWA.shape[-1]
    Lam_hat.reshape(-1, M * M)[:, ::M + 1] += 1.0       # each diagonal (a view: Lam_hat is C-ordered)
    return Lam_hat


def centres(kernel, likelihood, K):
    """Whether q's class mean is centred (:func:`centred`) for ``likelihood`` under ``kernel``: K > 1
    latent functions, a likelihood that sees only the differences of the f_k (``shift_invariant``:
    softmax, robust-max) and one kernel shared by the classes, so that f_nk = a_n^T m_k with one a_n
    for every k and m_k -> m_k + delta (every k) adds a_n^T delta to every f_nk of a row alike: the
    data term does not see it, whatever the batch.  With one kernel a class (``kernel.n_outputs``
    K) the a_n differ and the shift is seen.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
    likelihood : gpdsl.likelihoods.Likelihood
    K : int
        Latent functions.

    Returns
    -------
    bool
    """
    return K > 1 and getattr(likelihood, "shift_invariant", False) and getattr(kernel, "n_outputs", 1) == 1


def centred(m, natural=None):
    """q's whitened means with their class mean taken out, m_k - mean_j m_j, and its natural
    parameters moved alike: where :func:`centres` holds, the data term is unchanged and the KL's
    sum_k |m_k|^2 / 2 is least there, so this is the exact maximum of the bound (or of any batch's
    estimate of it) along that direction, at fixed S_k.

    Parameters
    ----------
    m : ndarray, shape (M, K)
    natural : tuple of ndarray, optional
        (S_k^-1 (K, M, M), S_k^-1 m_k (K, M)) of (m, R): S_k^-1 is kept, S_k^-1 m_k loses
        S_k^-1 mean_j m_j.

    Returns
    -------
    m : ndarray, shape (M, K)
    natural : tuple of ndarray, or None
    """
    shift = m.mean(axis=1)
    m = m - shift[:, None]
    if natural is None:
        return m, None
    Lam, eta = natural
    return m, (Lam, eta - Lam @ shift)
