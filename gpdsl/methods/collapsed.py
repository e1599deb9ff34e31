"""Collapsed sparse Gaussian regression: Titsias' VFE bound, the DTC (projected-process) and the
FITC (SPGP) approximate log marginal likelihoods.

All three are ``log N(y | 0, Q_ff + Lambda)`` with ``Q_ff = K_fu K_uu^-1 K_uf`` and a diagonal
``Lambda = diag(lambda)``:

* VFE (Titsias 2009 eq. 16; eq. 21 with jitter v; thesis eq. 3.1 / B.1 for per-point noise):
  lambda_n is the likelihood's noise variance and the bound subtracts the trace term
  ``1/2 sum_n (K_nn - Q_nn) / lambda_n``.
* DTC, the projected process (Seeger, Williams & Lawrence 2003; Titsias 2009 eq. 5 with the
  Nyström Q_nn, "PP"): lambda_n is the noise variance, no trace term -- VFE's bound plus
  ``1/2 sum_n (K_nn - Q_nn) / lambda_n``, so never below it.
* FITC (Snelson & Ghahramani 2006; Titsias 2009 eq. 5, "SPGP"): lambda_n = K_nn - Q_nn + noise_n,
  no trace term.

Stable O(N M^2) form (thesis B.1, GPflow's SGPR):  with ``K_uu + jitter = L L^T``,
``A = L^-1 K_uf`` (whitened row by row), ``B = I + A Lambda^-1 A^T = L_B L_B^T`` and
``c = L_B^-1 A Lambda^-1 y``::

    F = -N/2 log 2pi - 1/2 log|B| - 1/2 sum log lambda - 1/2 y^T Lambda^-1 y + 1/2 c^T c
        [VFE]  - 1/2 sum_n (K_nn - |a_n|^2) / lambda_n          (a_n: column n of A)

B - I, A Lambda^-1 y and the trace term are reductions over row chunks (pass 1); the gradient needs a second
chunked pass that forms the adjoint of K_uf column by column (derivation in the comments of
:func:`_gradient_pass`).  The optimal q(u) is Titsias eq. 17 / thesis eq. 3.3:
``m = K_uu Sigma^-1 K_uf Lambda^-1 y``, ``S = K_uu Sigma^-1 K_uu`` with
``Sigma = K_uu + K_uf Lambda^-1 K_fu = L B L^T``; VFE and DTC share it (Titsias section 3.1:
the variational predictive is the projected process'), FITC's has its own Lambda.

Targets y - o of a latent offset o (f = o + g): the trace term does not involve y, so
d F / d o = (Q_ff + Lambda)^-1 (y - o) = Lambda^-1 (y - o - K_fu Sigma^-1 K_uf Lambda^-1 (y - o)),
whose row n is w_n e_n of the gradient pass (``offset_grad``).
"""
from __future__ import annotations

from functools import partial

import numpy as np

from .._jit.collapsed import contract_then_complete
from ..chunks import add_partial, cache_bytes, default_chunk_size, map_rows
from ..linalg import (JITTER_LADDER, cholesky, inverse_lower, jitter_adjoint, solve_lower, solve_upper_t,
                      stacked, symmetric_from_lower, weighted_gram, whiten)
from .common import Evaluation, PredictiveState

_LOG_2PI = np.log(2.0 * np.pi)


def whitened_rows(kernel, X, Z, L, inverse=None):
    """The whitened cross-covariances of one row block, ``A = L^-1 K_uf`` (thesis B.1).

    Shared by this engine, the Pólya-Gamma c loop, FITC-Laplace and SVGP.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The covariance function.
    X : ndarray, shape (n, D)
        The row block's inputs.
    Z : ndarray, shape (M, D)
        The inducing inputs.
    L : ndarray, shape (M, M)
        Lower Cholesky factor of K_uu (plus its jitter), ``K_uu = L L^T``.
    inverse : ndarray, shape (M, M), optional
        L^-1, where the caller has formed it for all its blocks (:func:`gpdsl.linalg.whiten`).

    Returns
    -------
    Kuf : ndarray, shape (M, n)
        K_uf = k(Z, X).
    A : ndarray, shape (M, n)
        L^-1 K_uf; column n is a_n, with Q_nn = |a_n|^2.
    kff : ndarray, shape (n,)
        diag K_ff.
    residual : ndarray, shape (n,)
        K_nn - Q_nn = K_nn - |a_n|^2, the diagonal of the conditional prior covariance
        (Titsias 2009 eq. 14's trace summand).
    """
    Kuf = kernel.gram(Z, X)
    A = whiten(L, Kuf, inverse=inverse)
    kff = kernel.diag(X)
    return Kuf, A, kff, kff - np.einsum("ij,ij->j", A, A)


def check_rows_nystrom(residual, kff):
    """Check the Nyström approximation's diagonal, Q_nn <= K_nn, row by row (to 1e-8 relative).

    Parameters
    ----------
    residual : ndarray, shape (n,)
        K_nn - Q_nn (from :func:`whitened_rows`).
    kff : ndarray, shape (n,)
        K_nn.

    Raises
    ------
    FloatingPointError
        Some Q_nn exceeds K_nn: K_uu factorised but is too ill-conditioned for L^-1 K_uf to mean
        anything, and the jitter ladder should move to its next rung.
    """
    if np.any(residual < -1e-8 * kff):
        raise FloatingPointError("K_uu too ill-conditioned: Q_nn > K_nn")


# The K-latent methods (SVGP, the logistic-softmax augmentation) with a kernel whose gram is a
# stack of G blocks (G = 1: one kernel shared by the latent functions; G = K: ``Separate``).
def factor_blocks(kernel, Z, jitter):
    """The factors L (G, M, M) of K_uu's kernel blocks and the one relative jitter used for all.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        Bound; its ``gram(Z, Z)`` is (M, M) (one block) or (G, M, M).
    Z : ndarray, shape (M, D)
    jitter : float or None
        As :func:`gpdsl.linalg.cholesky` (None: the ladder, block by block; where the blocks'
        rungs differ, all are factorised again at the highest, so that one jitter describes L).

    Returns
    -------
    L : ndarray, shape (G, M, M)
    jitter : float
    Kuu : ndarray, shape (M, M) or (G, M, M)
        K_uu as ``kernel.gram`` gives it, without the jitter (a gradient's kernel VJP reuses it).
    """
    Kuu = kernel.gram(Z, Z)
    blocks = Kuu[None] if Kuu.ndim == 2 else Kuu
    factors = [cholesky(K_g, jitter, what="K_uu") for K_g in blocks]
    jit = max(j for _, j in factors)
    if any(j != jit for _, j in factors):
        factors = [cholesky(K_g, jit, what="K_uu") for K_g in blocks]
    return np.stack([L_g for L_g, _ in factors]), jit, Kuu


def whitened_blocks(Kuf, kff, L, inverses=None):
    """:func:`whitened_rows` for each kernel block: A_g = L_g^-1 K^g_uf and k^g_nn - |a_gn|^2,
    checked as :func:`check_rows_nystrom`.

    Parameters
    ----------
    Kuf : ndarray, shape (M, n) or (G, M, n)
    kff : ndarray, shape (n,) or (G, n)
    L : ndarray, shape (G, M, M)
        :func:`factor_blocks`.
    inverses : ndarray, shape (G, M, M), optional
        The L_g^-1, where the caller has formed them (see :func:`gpdsl.linalg.whiten`).

    Returns
    -------
    A : ndarray, shape (G, M, n)
    residual : ndarray, shape (G, n)
    """
    if Kuf.ndim == 2:
        Kuf, kff = Kuf[None], kff[None]
    A = stacked([whiten(L_g, K_g, inverse=None if inverses is None else inverses[g])
                 for g, (L_g, K_g) in enumerate(zip(L, Kuf))])
    residual = kff - np.einsum("gmn,gmn->gn", A, A)
    check_rows_nystrom(residual, kff)
    return A, residual


def evaluate(kernel, likelihood, X, y, Z, *, fitc, dtc=False, jitter=None, chunk_size=None,
             need_grad=True, need_state=False, offset_grad=False, estimate_rounding=True):
    """The collapsed objective, its gradients and, if asked, the posterior q(u).

    The objective is ``log N(y | 0, Q_ff + Lambda)`` (Titsias 2009 eq. 5), less, for VFE, the
    trace term ``1/2 sum_n (K_nn - Q_nn) / lambda_n`` (eq. 16): see the module docstring.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The covariance function.
    likelihood : gpdsl.likelihoods.Gaussian or HeteroscedasticGaussian
        Supplies the noise variances (``noise``) and their adjoint (``noise_vjp``).
    X : ndarray or dask.array.Array, shape (N, D)
        Training inputs (a Dask array runs the row passes as Dask tasks).
    y : ndarray, shape (N,)
        Training targets.
    Z : ndarray, shape (M, D)
        Inducing inputs.
    fitc : bool
        FITC's lambda_n = K_nn - Q_nn + noise_n (Snelson & Ghahramani 2006).
    dtc : bool, default False
        Without ``fitc``: the DTC / projected-process objective (no trace term) instead of the
        VFE bound.  Both flags at once is an error.
    jitter : float or None
        A fixed multiple of mean(diag K_uu) added to K_uu, or None for the ladder
        :data:`gpdsl.linalg.JITTER_LADDER`, which moves to its next rung when K_uu fails to
        factorise or factorises while too ill-conditioned for L^-1 K_uf to mean anything
        (Q_nn > K_nn: row by row for FITC, whose lambda needs it, in the Lambda^-1-weighted trace
        for VFE and DTC), or when FITC's lambda is not positive.
    chunk_size : int or None
        Rows per O(N M^2) block (None: :func:`gpdsl.chunks.default_chunk_size`).
    need_grad : bool
        Compute the gradients (a second pass over the rows).
    need_state : bool
        Compute the predictive state and q(u) (Titsias eq. 17).
    offset_grad : bool, default False
        ``y`` is y - o for a latent offset o: with ``need_grad``, also ``grads["offset"]`` (N,),
        d F / d o = (Q_ff + Lambda)^-1 (y - o) (module docstring).
    estimate_rounding : bool, default True
        With ``need_state``, also :func:`evidence_rounding` (``ROUNDING_DRAWS`` more passes over
        the rows) into ``Evaluation.rounding``.  Callers whose objective is not this F (EP's and
        QP's site regressions, Pólya-Gamma's pseudo-regression) pass False and pay nothing.

    Returns
    -------
    gpdsl.methods.common.Evaluation
        ``log_evidence`` (the objective), ``grads`` (natural hyperparameter name -> array of
        the value's shape), ``dZ`` ((M, D), or None), the jitter used, the state (or None) and
        the pseudo-data (1 / noise, y / noise).

    Raises
    ------
    ValueError
        ``fitc`` and ``dtc`` both set.
    numpy.linalg.LinAlgError, FloatingPointError
        No rung of the jitter ladder (or the fixed ``jitter``) gives a usable factorisation.
    """
    if fitc and dtc:
        raise ValueError("collapsed.evaluate: fitc and dtc are different objectives; set at most one")
    rungs = JITTER_LADDER if jitter is None else (float(jitter),)
    for attempt, rung in enumerate(rungs):
        try:
            evaluation = _evaluate_at(kernel, likelihood, X, y, Z, fitc, dtc, rung, chunk_size, need_grad,
                                      need_state, offset_grad)
        except (np.linalg.LinAlgError, FloatingPointError):
            if attempt == len(rungs) - 1:
                raise
            continue
        if need_state and estimate_rounding:
            # The evaluation a posterior is built from carries its rounding estimate.
            evaluation.rounding = evidence_rounding(kernel, likelihood, X, y, Z, fitc, dtc, evaluation.jitter,
                                                    chunk_size, evaluation.log_evidence)
        return evaluation


def _evaluate_at(kernel, likelihood, X, y, Z, fitc, dtc, jitter, chunk_size, need_grad, need_state, offset_grad,
                 perturb=None):
    n, m = X.shape[0], Z.shape[0]
    chunk = chunk_size or default_chunk_size(n, m)
    Kuu = kernel.gram(Z, Z)
    if perturb is not None:
        Kuu = Kuu * (1.0 + _rounding_sized(perturb, m))
    L, jit = cholesky(Kuu, jitter, what="K_uu")
    # L^-1 once for every block's whitening (whiten forms it per call otherwise: at M = 768 and
    # 74 blocks of 10^5 rows, 0.8 s of an evaluation).
    Li = inverse_lower(L)
    noise = likelihood.noise(X)
    if np.any(noise <= 0) or not np.all(np.isfinite(noise)):
        raise FloatingPointError("noise variances must be positive and finite")

    # A = L^-1 K_uf and K_nn - Q_nn of each block (and K_uf too, when both fit the budget) are
    # kept between the value and gradient passes (the triangular solve costs about twice the
    # kernel's exp): the statistics pass returns them and the gradient pass takes them back as its
    # blocks' carried items (for Dask input, persisted where the blocks were computed), so that no
    # chunk function holds state.
    cache = need_grad and n * m * 8 <= cache_bytes()
    keep_kuf = 2 * n * m * 8 <= cache_bytes()
    rows = partial(_block_rows, kernel, Z, L, Li, fitc, cache, keep_kuf)

    def statistics_pass(Xb, yb, noise_b, hit=None):
        (_, A, kff, residual, lam), kept = rows(Xb, noise_b, hit)
        if np.any(lam <= 0):
            raise FloatingPointError("FITC diagonal K_nn - Q_nn + noise is not positive")
        w = 1.0 / lam
        return (weighted_gram(A, w, lower=True), A @ (w * yb), np.sum(np.log(lam)), np.sum(w * yb * yb), np.sum(w * kff),
                np.sum(w * residual)), (), kept

    data = (X, y, noise)
    (P, r, sum_log_lam, sum_wyy, sum_wkff, sum_wres), _, kept = map_rows(statistics_pass, data, chunk, width=m,
                                                                         keep=True)

    B_minus_I = symmetric_from_lower(P)   # A Lambda^-1 A^T = L^-1 K_uf Lambda^-1 K_fu L^-T
    if perturb is not None:
        B_minus_I = B_minus_I * (1.0 + _rounding_sized(perturb, m))
        r = r * (1.0 + np.finfo(float).eps * perturb.standard_normal(m))
    B = np.eye(m) + B_minus_I
    LB, _ = cholesky(B, 0.0, what="B = I + A Lambda^-1 A^T")
    c = solve_lower(LB, r)
    log_det_B = 2.0 * np.sum(np.log(np.diag(LB)))
    F = -0.5 * n * _LOG_2PI - 0.5 * log_det_B - 0.5 * sum_log_lam - 0.5 * sum_wyy + 0.5 * c @ c
    if not fitc:
        # tr(Lambda^-1 (K_ff - Q_ff)) cannot be negative: when it is, K_uu factorised but is too
        # ill-conditioned for L^-1 K_uf to mean anything -- treat it as a failed factorisation so
        # that the jitter ladder moves to its next rung.  DTC has no trace term but the same A.
        if sum_wres < -1e-8 * sum_wkff:
            raise FloatingPointError("K_uu too ill-conditioned: tr(Q_ff) > tr(K_ff)")
        if not dtc:
            F += -0.5 * sum_wres

    # Whitened forms: alpha = B^-1 L^-1 K_uf Lambda^-1 y = L^T Sigma^-1 K_uf Lambda^-1 y and
    # I - B^-1 = L^T (K_uu^-1 - Sigma^-1) L, with Sigma = K_uu + K_uf Lambda^-1 K_fu.
    LBi = inverse_lower(LB)
    B_inv = LBi.T @ LBi
    alpha = solve_upper_t(LB, c)

    grads, dZ = {}, None
    if need_grad:
        grads, dZ = _gradient_pass(kernel, likelihood, data, Z, rows, kept, chunk, fitc, dtc, jit,
                                   alpha, solve_upper_t(L, alpha), B_inv, B_minus_I, Li, offset_grad)
    state = None
    if need_state:
        L_LBi = L @ LBi.T
        state = PredictiveState(Z=Z, weights=alpha, correction=np.eye(m) - B_inv, chol=L,
                                q_mean=L @ alpha, q_cov=L_LBi @ L_LBi.T)
    return Evaluation(log_evidence=float(F), grads=grads, dZ=dZ, jitter=jit, state=state,
                      pseudo_data=(1.0 / noise, y / noise))


# Perturbed evaluations behind evidence_rounding's estimate.
ROUNDING_DRAWS = 3


def _rounding_sized(rng, m):
    """A symmetric (m, m) matrix of relative perturbations of the size of one rounding, eps g_ij."""
    g = rng.standard_normal((m, m))
    return np.finfo(float).eps * (g + g.T) / np.sqrt(2.0)


def evidence_rounding(kernel, likelihood, X, y, Z, fitc, dtc, jitter, chunk_size, log_evidence):
    """An estimate, in nats, of the rounding error of the collapsed objective F as
    :func:`evaluate` computed it in float64 (``Evaluation.rounding``; the fit records it in
    ``FitDiagnostics.evidence_rounding`` and warns when it exceeds 1 nat).

    F sums terms that cancel (-1/2 log|B| and 1/2 c^T c against -1/2 y^T Lambda^-1 y; for VFE,
    1/2 sum_n |a_n|^2 / lambda_n against -1/2 sum_n K_nn / lambda_n), each formed through
    L = chol(K_uu) and L_B = chol(B), so its error is their condition numbers times eps times the
    size of the terms -- but a bound from condition numbers (kappa(B) (M + c^T c) eps / 2 and the
    like) was off by factors of 1e-6 to 12 against the actual scatter of F, because which
    directions of B and L the data's vectors meet decides it.  So it is measured instead, as a
    backward error: F is evaluated again with its ill-conditioned inputs K_uu, B - I and
    r = A Lambda^-1 y each perturbed by relative amounts of one rounding (entries times
    1 + eps g, g standard normal, symmetric for the matrices) -- perturbations the float64
    computation of those inputs makes anyway -- and R is the largest change of F over
    :data:`ROUNDING_DRAWS` draws (a fixed seed: the same answer every time).

    A draw that fails at F's jitter rung (the perturbed K_uu no longer factorises or fails the
    Q_nn <= K_nn checks) says K_uu is singular to rounding there, not that F is noise: a 300 x 1
    VFE fit ending at cond K_uu = 1e17, jitter 0, failed every draw while F moved 2.5e-4 nats
    under few-ulp moves of the hyperparameters.  That draw is taken again at the next rungs of
    :data:`gpdsl.linalg.JITTER_LADDER` until it factorises, and its change is still measured
    against the reported F: the smallest jitter at which the perturbed K_uu is usable is the
    smallest perturbation of K_uu's near-null directions the computation can resolve, so the
    change (which includes the jitter's own effect) errs high -- over 12 seeds of that fit,
    7.6e-4 nats against that 2.5e-4 scatter, and at most 0.30 where the scatter was 1.2e-8:
    below the 1-nat threshold, though a fit whose evidence moves by more than a nat under the
    next rung's jitter would be flagged.  Perturbing only the well-posed inputs instead (B - I
    and r, or the factor L, or D K_uu D with D = diag(1 + eps g)) missed K_uu's share: 2e-9
    against the 2.5e-4 scatter, or failed too.  Only a draw that fails on every rung gives
    R = inf.

    Against the standard deviation of F over hyperparameters moved by a few ulp (4e-16
    relative), on VFE with N = 1e3 and 5e3, M = 10 ... 40, length-scales 10 and 208 and kernel
    variances 1e2 ... 1e10 (45 cases, no jitter), R was 1.2 to 15 times that scatter in every
    case: an upper estimate of the noise that neither misses it nor inflates it by orders of
    magnitude.  It costs ROUNDING_DRAWS (more where a draw moves up the ladder) passes over the
    data for each evaluation with a posterior state: the fit's final evaluation, and again for each
    restart and for a subsample fit's finishing evaluation.

    Parameters
    ----------
    kernel, likelihood, X, y, Z, fitc, dtc, chunk_size
        As in :func:`evaluate`.
    jitter : float
        The jitter rung F was computed with.
    log_evidence : float
        F as computed.

    Returns
    -------
    float
        R in nats (inf where a draw fails on every rung from ``jitter`` up).
    """
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(ROUNDING_DRAWS):
        moved, draw = None, rng.bit_generator.state
        for rung in (jitter,) + tuple(r for r in JITTER_LADDER if r > jitter):
            rng.bit_generator.state = draw        # the same perturbation on every rung
            try:
                moved = _evaluate_at(kernel, likelihood, X, y, Z, fitc, dtc, rung, chunk_size, False, False,
                                     False, perturb=rng)
                break
            except (np.linalg.LinAlgError, FloatingPointError):
                continue
        if moved is None:
            return np.inf
        worst = max(worst, abs(moved.log_evidence - log_evidence))
    return float(worst)


def _block_rows(kernel, Z, L, Li, fitc, cache, keep_kuf, Xb, noise_b, hit):
    """((K_uf, A = L^-1 K_uf, K_nn, K_nn - Q_nn, lambda), kept) for the row block Xb (n, D) with
    noise variances noise_b (n,), Li = L^-1; ``hit`` is the block's kept item of an earlier pass
    (None: compute afresh), ``kept`` what a later pass may reuse (None unless ``cache``; without
    ``keep_kuf``, K_uf is left out of it and recomputed).

    Everything downstream is formed from A rather than from K_uf and K_uu^-1: with a long
    length-scale and a large variance (the near-linear optimum of twonorm, cond K_uu ~ 1e7)
    P = K_uf W K_fu has entries ~1e15 that L^-1 P L^-T then cancels, which left ~0.1 nats of
    rounding noise in the bound and ~1 in its gradient; A W A^T loses nothing of that size.
    """
    if hit is None:
        hit = whitened_rows(kernel, Xb, Z, L, Li)
        if fitc:
            check_rows_nystrom(hit[3], hit[2])     # VFE checks the weighted trace
    kept = (hit if keep_kuf else (None,) + hit[1:]) if cache else None
    Kuf, A, kff, residual = hit
    if Kuf is None:
        Kuf = kernel.gram(Z, Xb)
    lam = residual + noise_b if fitc else noise_b
    return (Kuf, A, kff, residual, lam), kept


def _gradient_pass(kernel, likelihood, data, Z, rows, kept, chunk, fitc, dtc, jit,
                   alpha, beta, B_inv, B_minus_I, Li, offset_grad):
    """Adjoints of K_uf (per chunk), K_uu, K_nn and lambda, contracted with the kernel VJPs, and
    with ``offset_grad`` d F / d y = -w_n e_n, negated into ``grads["offset"]``.

    Writing k_n for column n of K_uf, w_n = 1/lambda_n and e_n = y_n - beta^T k_n, the
    log N(y | 0, Q + Lambda) part has (Sigma = K_uu + K_uf W K_fu)
        dF/dk_n  = w_n (-Sigma^-1 k_n + beta e_n)
        dF/dK_uu = 1/2 K_uu^-1 - 1/2 Sigma^-1 - 1/2 beta beta^T
        dF/dw_n  = -1/2 k_n^T Sigma^-1 k_n - 1/2 e_n^2 + 1/2 lambda_n.
    VFE adds T = -1/2 sum_n w_n (K_nn - k_n^T K_uu^-1 k_n):  dT/dk_n = w_n K_uu^-1 k_n,
    dT/dK_uu = -1/2 K_uu^-1 P K_uu^-1, dT/dK_nn = -w_n/2, dT/dw_n = -1/2 (K_nn - Q_nn).
    FITC instead chains dF/dlambda_n through lambda_n = K_nn - k_n^T K_uu^-1 k_n + noise_n; DTC
    is the log N part alone, with lambda_n = noise_n.

    Every product with K_uu^-1 or Sigma^-1 is taken in the whitened basis, a_n = L^-1 k_n:
    Sigma^-1 k_n = L^-T B^-1 a_n, K_uu^-1 k_n = L^-T a_n, k_n^T Sigma^-1 k_n = a_n^T B^-1 a_n,
    beta^T k_n = alpha^T a_n, and dF/dK_uu = L^-T G L^-1 with G formed in that basis, so that no
    two large matrices are subtracted (see :func:`_block_rows`).  ``alpha`` (M,) is
    B^-1 L^-1 K_uf Lambda^-1 y, ``beta = L^-T alpha``; ``data`` the row inputs (X, y, noise),
    ``rows`` the block function of :func:`_block_rows` and ``kept`` the statistics pass's kept
    blocks.
    """
    m = Li.shape[0]
    trace = not (fitc or dtc)
    C_white = np.eye(m) - B_inv                  # L^T (K_uu^-1 - Sigma^-1) L
    Li_T_C_white = Li.T @ C_white if trace else None     # K_uu^-1 - Sigma^-1 = Li_T_C_white Li

    def pass_fn(Xb, yb, noise_b, hit):
        (Kuf, A, kff, residual, lam), _ = rows(Xb, noise_b, hit)
        w = 1.0 / lam
        e = yb - alpha @ A
        g_kff = None
        G_uu_part = 0.0
        if not trace:
            B_inv_A = B_inv @ A
            dF_dw = -0.5 * np.einsum("ij,ij->j", A, B_inv_A) - 0.5 * e * e + 0.5 * lam
            g_lam = -w * w * dF_dw
            # dF/dk_n = w_n (beta e_n - Sigma^-1 k_n) [- 2 g_lam_n K_uu^-1 k_n for FITC], under L^-T.
            G_white = np.outer(alpha, e)
            G_white -= B_inv_A
            G_white *= w
            if fitc:
                G_white -= 2.0 * A * g_lam
                g_kff = g_lam
                G_uu_part = (A * g_lam) @ A.T    # L^T (K_uu^-1 K_uf diag(g) K_fu K_uu^-1) L
            G_uf = Li.T @ G_white
        else:
            # One (M, M) @ (M, n) product: G_uf = w (L^-T C_white A + beta e^T), and
            # k_n^T L^-T C_white a_n = a_n^T C_white a_n (k_n = L a_n).  Both associations
            # round at eps |L^-T| |C_white a_n|, with no difference of large terms (C_white
            # has eigenvalues in [0, 1)).  The contraction and the rest of G_uf, w (. + beta e^T),
            # are then one sweep over the block.
            G_uf = Li_T_C_white @ A
            dF_dw = 0.5 * contract_then_complete(G_uf, Kuf, beta, e, w) - 0.5 * e * e + 0.5 * (lam - kff)
            g_lam = -w * w * dF_dw
            g_kff = -0.5 * w
        kgrads, dZ = kernel.vjp(Z, Xb, G_uf, K=Kuf)
        if g_kff is not None:                    # DTC's objective does not involve K_nn
            kgrads = add_partial(kgrads, kernel.diag_vjp(Xb, g_kff))
        return (kgrads, dZ, G_uu_part), (g_lam, w * e)

    (kgrads, dZ, G_uu_part), (g_lam, d_offset) = map_rows(pass_fn, data, chunk, width=m, carried=kept)
    G_uu_white = 0.5 * (C_white - np.outer(alpha, alpha)) + G_uu_part
    if trace:
        G_uu_white = G_uu_white - 0.5 * B_minus_I           # -1/2 K_uu^-1 P K_uu^-1, whitened
    G_uu = Li.T @ G_uu_white @ Li
    G_uu = jitter_adjoint(0.5 * (G_uu + G_uu.T), jit)
    uu_grads, dZ_uu = kernel.vjp(Z, Z, G_uu)
    grads = add_partial(kgrads, uu_grads)
    grads = add_partial(grads, likelihood.noise_vjp(data[0], g_lam))
    if offset_grad:
        grads["offset"] = d_offset
    return grads, dZ + 2.0 * dZ_uu
