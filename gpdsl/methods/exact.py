"""Exact (dense, O(N^3)) Gaussian-process regression: the reference every sparse method is tested against.

log p(y) = -1/2 y^T K^-1 y - 1/2 log|K| - N/2 log 2pi with K = K_ff + Lambda (Rasmussen &
Williams eq. 2.30), gradient 1/2 tr((alpha alpha^T - K^-1) dK) (eq. 5.9).  Targets y - o of a
latent offset o (f = o + g) give d log p / d o = K^-1 (y - o) = alpha (``offset_grad``).

The Kronecker path.  Where the kernel gives Kronecker factors at X (``kernel.kronecker_factors``:
an ICM on a full isotopic output-major grid of N inputs and P outputs, K_ff = B kron K_x) and the
noise is one value d_p per output block (Lambda = D kron I_N), the same log evidence and gradients
come from the eigendecompositions of the P x P and N x N factors, O(N^3 + P^3) rather than
O((N P)^3), with the N P x N P matrix never formed (Saatci (2012), ch. 5; Bonilla et al. (2008)):
:func:`_kronecker`.  It is taken when the jitter is left to the ladder and the whitened K is
well conditioned; otherwise the general path runs.  Where K_x is also Toeplitz (a stationary
kernel on an evenly spaced 1-D grid: a daily time series), a fit's evaluations solve its P
blocks lambda_a K_x + I by Schur's, Durbin's and Trench's algorithms in O(P N^2) instead
(:mod:`gpdsl._jit.toeplitz`): 0.10 against 0.90-1.2 CPU s for one log evidence and gradient at
P = 4, N = 1,860 (``benchmarks/bench_multioutput.py --parts kron``).  Its predictive state keeps the factors
(:class:`gpdsl.methods.kronecker_state.KroneckerState`: eigenvectors and eigenvalues of the
P x P and N x N factors, the whitened weights and q_mean), so that no N P x N P array is formed
from the fit through prediction, saving and loading; the general path's state holds the
Cholesky factor of K and the posterior covariance at X, (N P)^2 each.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg

from .. import threads
from .._jit import toeplitz
from ..chunks import add_partial
from ..linalg import cholesky, inverse_from_cholesky, jitter_adjoint, solve_lower
from .common import Evaluation, PredictiveState
from .kronecker_state import KroneckerState

_LOG_2PI = np.log(2.0 * np.pi)
# The Kronecker path's largest condition number of the whitened K (B~ kron K_x + I): beyond it the
# general path runs, whose Cholesky jitter ladder is what a near-singular K gets.
KRONECKER_MAX_CONDITION = 1e12
# The Toeplitz solves' largest bound on the condition number of a whitened block lambda K_x + I:
# their log-determinant, against a Cholesky factor's of the same Toeplitz matrix, is off by up to
# 2e-10 relative at 1e7 and 7e-9 at 1e8 (N = 1,860, squared-exponential K_x of length-scales 0.003
# to 0.3 on [0, 1]; the eigendecomposition's is 2e-9 at 4.5e8).  A fit of EuStockMarkets stays
# below 2e5 but for line-search points, one of which reached 3.8e7.
TOEPLITZ_MAX_CONDITION = 1e8
# How far, relative to K_x's largest entry, an entry may be from its diagonal's first for K_x to
# count as Toeplitz: a stationary kernel's cross-term distances carry rounding errors of about
# eps |x|^2 / lengthscale^2 (4e-11 at N = 1,860 on [0, 1] and a length-scale of 0.003).
TOEPLITZ_TOLERANCE = 1e-9
# The largest lambda_a |K_x - T|_F (T: the Toeplitz matrix of K_x's diagonals' means) the Toeplitz
# solves take: EuStockMarkets' fitted K_x gives 2e-6 (its rounding), uneven inputs under a
# near-constant kernel 1e-3 to 1e-2.
TOEPLITZ_MAX_PERTURBATION = 1e-5


def evaluate(kernel, likelihood, X, y, Z=None, *, jitter=None, chunk_size=None,
             need_grad=True, need_state=False, offset_grad=False):
    """Exact log marginal likelihood; X (N, D), y (N,).  ``Z`` and ``chunk_size`` are unused.

    The O(N^3) factorisation and inverse use the bulk BLAS thread count (gpdsl.threads).  Where
    the Kronecker path applies (the module docstring) it gives the result, else the general path.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    likelihood : gpdsl.likelihoods.Likelihood
        Gaussian or HeteroscedasticGaussian (its ``noise``).
    X : ndarray, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Targets.
    Z : None, optional
        Unused.
    jitter : float or None, optional
        Jitter of K_ff + noise (None: the ladder).
    chunk_size : int, optional
        Unused.
    need_grad : bool, default True
        Compute the gradients (kernel and noise hyperparameters).
    need_state : bool, default False
        Build the predictive state (Z = X; on the Kronecker path a
        :class:`~gpdsl.methods.kronecker_state.KroneckerState`, of the factors).
    offset_grad : bool, default False
        ``y`` is y - o for a latent offset o: with ``need_grad``, also ``grads["offset"]``,
        d log p / d o = alpha = K^-1 (y - o).

    Returns
    -------
    gpdsl.methods.common.Evaluation
        log p(y) of R&W eq. 2.30, its gradients (eq. 5.9), the pseudo-data (1/noise, y/noise).
    """
    if jitter is None:
        # The Kronecker path raises BLAS's threads for its O(N^3) eigendecomposition alone: its
        # Toeplitz solves' products are O(P N^2), where a second OpenBLAS thread only spins (one
        # log evidence and gradient on EuStockMarkets: 0.22 CPU s for 0.11 s of wall at idle).
        fast = _kronecker(kernel, likelihood, X, y, need_grad, need_state, offset_grad)
        if fast is not None:
            return fast
    with threads.bulk(float(X.shape[0]) ** 3):
        return _evaluate(kernel, likelihood, X, y, jitter, need_grad, need_state, offset_grad)


def _kronecker(kernel, likelihood, X, y, need_grad, need_state, offset_grad):
    """The exact log evidence, gradients and predictive state through Kronecker factors, or None
    where they do not apply.

    Rows in output-major order, y as the (P, N) matrix Y (row p: output p), vec row-major, so
    that (A kron C) vec(Y) = vec(A Y C^T).  With the noise D = diag(d_p) a block,

        K = B kron K_x + D kron I = (D^1/2 kron I) (B~ kron K_x + I) (D^1/2 kron I),
        B~ = D^-1/2 B D^-1/2 = U diag(lambda) U^T,   U~ = D^-1/2 U,
        K^-1 = (U~ kron I) blockdiag(A_a^-1) (U~ kron I)^T,   A_a = lambda_a K_x + I_N,

    so that, with the rotated targets Y^ = U~^T Y and Z the (P, N) matrix of rows Z_a = A_a^-1 Y^_a,

        alpha = K^-1 y = vec(A),  A = U~ Z,
        y^T K^-1 y = sum_ai Y^_ai Z_ai,   log|K| = N sum_p log d_p + sum_a log|A_a|.

    Gradients.  The adjoint of K is G = 1/2 (alpha alpha^T - K^-1) (R&W eq. 5.9); those of the
    factors are its contractions with dK: G_B[p, q] = sum_ij G[pi, qj] K_x[i, j], G_x[i, j] =
    sum_pq G[pi, qj] B[p, q], and the noise's g[pi] = G[pi, pi].  The alpha alpha^T half gives
    A K_x A^T, A^T B A and A_pi^2; the K^-1 half, through U~^T B U~ = diag(lambda), is

        G_B = 1/2 (A K_x A^T - U~ diag(tr(A_a^-1 K_x)) U~^T),
        G_x = 1/2 (A^T B A - sum_a lambda_a A_a^-1),
        g[pi] = 1/2 (A_pi^2 - sum_a U~_pa^2 (A_a^-1)_ii).

    The blocks come from K_x's eigendecomposition K_x = V diag(s) V^T, A_a^-1 = V diag(w_a) V^T with
    w_ak = 1 / (lambda_a s_k + 1) (:func:`_eigen_blocks`, O(N^3)), or, in a fit's evaluations where
    K_x is Toeplitz, from Schur's, Durbin's and Trench's algorithms (:func:`_toeplitz_blocks`, O(P N^2)).
    G_B and G_x go to ``kernel.kronecker_vjp``, g to ``likelihood.noise_vjp`` (a noise of one
    value an output block, checked on ``likelihood.noise(X)``).  The predictive state is a
    :class:`~gpdsl.methods.kronecker_state.KroneckerState` of the factors, with q_mean = K_ff alpha =
    vec(B A K_x).

    Returns
    -------
    gpdsl.methods.common.Evaluation or None
        None where the kernel gives no factors at X, the noise varies within an output block or
        is not positive, or the whitened K's condition number exceeds :data:`KRONECKER_MAX_CONDITION`.
    """
    factors = kernel.kronecker_factors(X)
    if factors is None:
        return None
    B, K_x = factors
    P, N = B.shape[0], K_x.shape[0]
    noise = likelihood.noise(X)
    noise_blocks = np.reshape(noise, (P, N))
    d = noise_blocks[:, 0]
    if not (np.all(noise_blocks == d[:, None]) and np.all(d > 0)):
        return None
    root = 1.0 / np.sqrt(d)
    # LAPACK's divide and conquer (syevd): 0.79 CPU s for K_x at N = 1,860 against NumPy's 0.98.
    # SciPy returns the vectors in Fortran order; C order as a loaded state's, so that a saved
    # state predicts bit for bit as the fitted one (the products' rounding follows the layout).
    lam, U = linalg.eigh(root[:, None] * B * root[None, :], driver="evd", check_finite=False)
    U = np.ascontiguousarray(U)
    U_t = root[:, None] * U
    rotated = U_t.T @ np.reshape(y, (P, N))                  # Y^ = U~^T Y, row a for the block A_a
    # The fit's evaluations take the O(N^2) Toeplitz solves where they apply; the predictive state
    # keeps K_x's eigenvectors, so it is built from the eigendecomposition.
    blocks = None if need_state else _toeplitz_blocks(K_x, lam, rotated, need_grad)
    if blocks is None:
        with threads.bulk(float(N) ** 3):
            blocks = _eigen_blocks(K_x, lam, rotated, need_grad)
        if blocks is None:
            return None
    A = U_t @ blocks.solved
    F = (-0.5 * np.sum(rotated * blocks.solved) - 0.5 * (N * np.sum(np.log(d)) + blocks.log_det)
         - 0.5 * N * P * _LOG_2PI)
    state = None
    if need_state:
        s, V = blocks.eigen
        state = KroneckerState.from_targets(X, y, (B @ A @ K_x).ravel(), d, U, lam, V, s)
    grads = {}
    if need_grad:
        G_B = 0.5 * (A @ K_x @ A.T - (U_t * blocks.traces) @ U_t.T)
        # In place: each N x N temporary is 28 MB of fresh pages at N = 1,860.
        G_x = A.T @ (B @ A)
        G_x -= blocks.inverse_sum
        G_x *= 0.5
        g = 0.5 * (A * A - (U_t * U_t) @ blocks.inverse_diagonals)
        grads = add_partial(kernel.kronecker_vjp(X, G_B, G_x, K_x), likelihood.noise_vjp(X, g.ravel()))
        if offset_grad:
            grads["offset"] = A.ravel()
    return Evaluation(log_evidence=float(F), grads=grads, dZ=None, jitter=0.0, state=state,
                      pseudo_data=(1.0 / noise, y / noise))


@dataclass(frozen=True)
class _Blocks:
    """What :func:`_kronecker` needs of the whitened diagonal blocks A_a = lambda_a K_x + I_N
    (a = 1..P) of (U~^T kron I) K (U~ kron I) = blockdiag(A_a).

    Attributes
    ----------
    solved : ndarray, shape (P, N)
        Row a: A_a^-1 Y^_a for the rotated targets Y^ = U~^T Y.
    log_det : float
        sum_a log|A_a|.
    traces : ndarray, shape (P,) or None
        tr(A_a^-1 K_x) (gradients only, as the next two).
    inverse_sum : ndarray, shape (N, N) or None
        sum_a lambda_a A_a^-1.
    inverse_diagonals : ndarray, shape (P, N) or None
        Row a: the diagonal of A_a^-1.
    eigen : tuple of ndarray or None
        (s, V), K_x = V diag(s) V^T, where the blocks came from the eigendecomposition.
    """

    solved: np.ndarray
    log_det: float
    traces: np.ndarray | None = None
    inverse_sum: np.ndarray | None = None
    inverse_diagonals: np.ndarray | None = None
    eigen: tuple | None = None


def _eigen_blocks(K_x, lam, rotated, need_grad):
    """:class:`_Blocks` through K_x = V diag(s) V^T: A_a^-1 = V diag(w_a) V^T with
    w_ak = 1 / (lambda_a s_k + 1); None where the condition number of the whitened K, max E / min E
    over E_ak = lambda_a s_k + 1, exceeds :data:`KRONECKER_MAX_CONDITION`."""
    s, V = linalg.eigh(K_x, driver="evd", check_finite=False)
    V = np.ascontiguousarray(V)
    E = np.outer(lam, s) + 1.0
    if not E.min() > E.max() / KRONECKER_MAX_CONDITION:
        return None
    w = 1.0 / E
    solved = ((rotated @ V) * w) @ V.T
    if not need_grad:
        return _Blocks(solved, float(np.sum(np.log(E))), eigen=(s, V))
    return _Blocks(solved, float(np.sum(np.log(E))), traces=w @ s, inverse_sum=_weighted_outer(V, lam @ w),
                   inverse_diagonals=w @ (V * V).T, eigen=(s, V))


def _toeplitz_blocks(K_x, lam, rotated, need_grad):
    """:class:`_Blocks` in O(P N^2) where K_x is Toeplitz (a stationary kernel on an evenly spaced
    1-D grid): each A_a = lambda_a K_x + I is then Toeplitz too, and Schur's, Durbin's and Trench's
    algorithms give its log-determinant and inverse (:func:`gpdsl._jit.toeplitz.toeplitz_block`).

    K_x counts as Toeplitz where every entry is within :data:`TOEPLITZ_TOLERANCE` of its diagonal's
    first entry, relative to the largest entry; the recurrences read the Toeplitz matrix T of its
    diagonals' means (:func:`gpdsl._jit.toeplitz.toeplitz_row`), and K_x = T + E.  Two bounds
    decide whether the path is taken:

    * max_a |lambda_a| |E|_F <= :data:`TOEPLITZ_MAX_PERTURBATION`: every error the perturbation
      leaves (the refined solve's, second order in it; log|A_a|'s after its first-order term, at
      most half its square; the gradients', first order) is then small.  A tolerance on E alone
      is not enough: near-constant K_x of uneven inputs (a length-scale far above their span) are
      within it, and lambda_a amplifies E (the review's case: 2.6 nats off);
    * Gershgorin's bound on the condition number of every A_a, 1 + max(lambda_a, 0) max_i sum_j
      |T[i, j]| (its eigenvalues are at least 1 - |lambda_a| |E|_2 where K_x is positive
      semi-definite), is within :data:`TOEPLITZ_MAX_CONDITION`: the recurrences are weakly
      stable, their errors growing with it.

    Returns
    -------
    _Blocks or None
        None where K_x is not Toeplitz, a bound is exceeded or Schur's recursion breaks down (a
        block not numerically positive definite): the eigendecomposition then runs.
    """
    N = K_x.shape[0]
    scale = np.max(np.abs(np.diagonal(K_x)))
    if not scale > 0.0:
        return None
    row, deviation, ok = toeplitz.toeplitz_row(K_x, TOEPLITZ_TOLERANCE * scale)
    if not (ok and np.abs(lam).max() * deviation <= TOEPLITZ_MAX_PERTURBATION):
        return None
    # A row of a Toeplitz T holds each |row[t]| at most twice (t > 0) and row[0] once.
    row_bound = 2.0 * np.sum(np.abs(row)) - abs(row[0])
    if not 1.0 + max(lam.max(), 0.0) * row_bound <= TOEPLITZ_MAX_CONDITION:
        return None
    solved, diagonals, traces = np.empty_like(rotated), np.empty_like(rotated), np.empty(len(lam))
    inverse_sum = np.zeros((N, N) if need_grad else (0, 0))
    log_det = 0.0
    for a, lam_a in enumerate(lam):
        solved[a], block_log_det, traces[a], diagonals[a] = toeplitz.toeplitz_block(
            row, K_x, float(lam_a), rotated[a], inverse_sum)
        if not np.isfinite(block_log_det):
            return None
        log_det += block_log_det
    if not need_grad:
        return _Blocks(solved, log_det)
    toeplitz.fill_lower(inverse_sum)
    return _Blocks(solved, log_det, traces=traces, inverse_sum=inverse_sum, inverse_diagonals=diagonals)


def _weighted_outer(V, c):
    """V diag(c) V^T (N, N) for V (N, N), c (N,): as R R^T with R = V diag(c)^1/2 where c >= 0
    (B~'s eigenvalues times K's inverse eigenvalues: always, but for rounding), which NumPy hands
    to BLAS's syrk, half the flops of the general product (0.18 -> 0.10 CPU s at N = 1,860, one thread)."""
    if np.all(c >= 0.0):
        R = V * np.sqrt(c)
        return R @ R.T
    return (V * c) @ V.T


def _evaluate(kernel, likelihood, X, y, jitter, need_grad, need_state, offset_grad):
    n = X.shape[0]
    Kff = kernel.gram(X, X)
    noise = likelihood.noise(X)
    K = Kff + np.diag(noise)
    L, jit = cholesky(K, jitter, what="K_ff + noise")
    alpha = linalg.cho_solve((L, True), y, check_finite=False)
    F = -0.5 * y @ alpha - np.sum(np.log(np.diag(L))) - 0.5 * n * _LOG_2PI
    K_inv = inverse_from_cholesky(L)
    grads = {}
    if need_grad:
        G = jitter_adjoint(0.5 * (np.outer(alpha, alpha) - K_inv), jit)
        grads, _ = kernel.vjp(X, X, G)
        grads = add_partial(grads, likelihood.noise_vjp(X, np.diag(G).copy()))
        if offset_grad:
            grads["offset"] = alpha
    state = None
    if need_state:
        # Whitened (b_* = L^-1 k_*): var_* = k_** - |b_*|^2 can never exceed the prior variance,
        # where k_*^T K^-1 k_* with K^-1 formed explicitly went wildly wrong (f_var 1000x the
        # kernel variance) once the fitted noise fell to ~1e-29 and cond(K) to ~1e17.
        A = solve_lower(L, Kff)
        q_cov = Kff - A.T @ A
        # correction None: the identity, not stored (PredictiveState).
        state = PredictiveState(Z=X, weights=solve_lower(L, y), correction=None, q_mean=Kff @ alpha,
                                q_cov=0.5 * (q_cov + q_cov.T), chol=L)
    return Evaluation(log_evidence=float(F), grads=grads, dZ=None, jitter=jit, state=state,
                      pseudo_data=(1.0 / noise, y / noise))
