"""Collapsed sparse Gaussian regression: Titsias' VFE bound and the FITC (SPGP) evidence.

Both are ``log N(y | 0, Q_ff + Lambda)`` with ``Q_ff = K_fu K_uu^-1 K_uf`` and a diagonal
``Lambda = diag(lambda)``:

* VFE (Titsias 2009 eq. 16; eq. 21 with jitter v; thesis eq. 3.1 / B.1 for per-point noise):
  lambda_n is the likelihood's noise variance and the bound subtracts the trace term
  ``1/2 sum_n (K_nn - Q_nn) / lambda_n``.
* FITC (Snelson & Ghahramani 2006): lambda_n = K_nn - Q_nn + noise_n, no trace term.

Stable O(N M^2) form (thesis B.1, GPflow's SGPR):  with ``K_uu + jitter = L L^T``,
``P = K_uf Lambda^-1 K_fu`` and ``B = I + L^-1 P L^-T = L_B L_B^T``,
``c = L_B^-1 L^-1 K_uf Lambda^-1 y``::

    F = -N/2 log 2pi - 1/2 log|B| - 1/2 sum log lambda - 1/2 y^T Lambda^-1 y + 1/2 c^T c
        [VFE]  - 1/2 sum K_nn / lambda_n + 1/2 (tr B - M)

P and K_uf Lambda^-1 y are reductions over row chunks (pass 1); the gradient needs a second
chunked pass that forms the adjoint of K_uf column by column (derivation in the comments of
:func:`_gradient_pass`).  The optimal q(u) is Titsias eq. 17 / thesis eq. 3.3:
``m = K_uu Sigma^-1 K_uf Lambda^-1 y``, ``S = K_uu Sigma^-1 K_uu`` with
``Sigma = K_uu + P = L B L^T``.
"""
from __future__ import annotations

import numpy as np

from ..chunks import add_partial, default_chunk_size, map_reduce
from ..linalg import JITTER_LADDER, cholesky, jitter_adjoint, solve_lower, solve_upper_t
from .common import Evaluation, PredictiveState

_LOG_2PI = np.log(2.0 * np.pi)
_CACHE_BYTES = 2 ** 28      # 256 MB of cached K_uf


def evaluate(kernel, likelihood, values, X, y, Z, *, fitc, jitter=None, chunk_size=None,
             need_grad=True, need_state=False):
    """Objective (VFE bound or FITC log evidence), its gradients and, if asked, the posterior.

    X (N, D), y (N,), Z (M, D).  Gradients are with respect to the natural hyperparameter
    values (keys as in ``values``) and Z (``"inducing.Z"``).  With ``jitter=None`` the
    ladder moves to the next rung when K_uu, B or (FITC) the diagonal lambda fails: K_uu can
    factorise while still too ill-conditioned for B = I + L^-1 P L^-T.
    """
    rungs = JITTER_LADDER if jitter is None else (float(jitter),)
    for attempt, rung in enumerate(rungs):
        try:
            return _evaluate_at(kernel, likelihood, values, X, y, Z, fitc, rung, chunk_size, need_grad, need_state)
        except (np.linalg.LinAlgError, FloatingPointError):
            if attempt == len(rungs) - 1:
                raise


def _evaluate_at(kernel, likelihood, values, X, y, Z, fitc, jitter, chunk_size, need_grad, need_state):
    n, m = X.shape[0], Z.shape[0]
    chunk = chunk_size or default_chunk_size(n, m)
    Kuu = kernel.gram(values, "kernel", Z, Z)
    L, jit = cholesky(Kuu, jitter, what="K_uu")
    noise = likelihood.noise(values, "likelihood", X)
    if np.any(noise <= 0) or not np.all(np.isfinite(noise)):
        raise FloatingPointError("noise variances must be positive and finite")

    # K_uf chunks are kept between the value and gradient passes when they fit the budget;
    # recomputing them would cost the exp of N*M entries twice.
    cache = {} if need_grad and n * m * 8 <= _CACHE_BYTES else None

    def rows(slc):
        """K_uf, K_nn and lambda for one chunk (and L^-1 K_uf for FITC, whose lambda needs Q_nn)."""
        Xc = X[slc]
        Kuf = cache.get(slc.start) if cache is not None else None
        if Kuf is None:
            Kuf = kernel.gram(values, "kernel", Z, Xc)
            if cache is not None:
                cache[slc.start] = Kuf
        kff = kernel.diag(values, "kernel", Xc)
        if not fitc:
            return Kuf, kff, noise[slc], None
        A = solve_lower(L, Kuf)
        q_diag = np.einsum("ij,ij->j", A, A)
        if np.any(q_diag > kff * (1.0 + 1e-8)):
            raise FloatingPointError("K_uu too ill-conditioned: Q_nn > K_nn")   # as for VFE below
        lam = kff - q_diag + noise[slc]
        return Kuf, kff, lam, A

    def statistics_pass(slc):
        Kuf, kff, lam, _ = rows(slc)
        if np.any(lam <= 0):
            raise FloatingPointError("FITC diagonal K_nn - Q_nn + noise is not positive")
        w = 1.0 / lam
        yc = y[slc]
        Ks = Kuf * np.sqrt(w)
        # Ks @ Ks.T is dispatched to BLAS syrk (half the flops of a general product).
        return (Ks @ Ks.T, Kuf @ (w * yc), np.sum(np.log(lam)), np.sum(w * yc * yc), np.sum(w * kff)), ()

    (P, r, sum_log_lam, sum_wyy, sum_wkff), _ = map_reduce(statistics_pass, n, chunk)

    Li_P = solve_lower(L, P)
    B_minus_I = solve_lower(L, Li_P.T)
    B_minus_I = 0.5 * (B_minus_I + B_minus_I.T)
    B = np.eye(m) + B_minus_I
    LB, _ = cholesky(B, 0.0, what="B = I + L^-1 P L^-T")
    c = solve_lower(LB, solve_lower(L, r))
    log_det_B = 2.0 * np.sum(np.log(np.diag(LB)))
    F = -0.5 * n * _LOG_2PI - 0.5 * log_det_B - 0.5 * sum_log_lam - 0.5 * sum_wyy + 0.5 * c @ c
    if not fitc:
        # tr(Lambda^-1 Q_ff) = tr(B - I) cannot exceed tr(Lambda^-1 K_ff): when it does, K_uu
        # factorised but is too ill-conditioned for L^-1 P L^-T to mean anything -- treat it as
        # a failed factorisation so that the jitter ladder moves to its next rung.
        trace_Q = np.trace(B_minus_I)
        if trace_Q > sum_wkff * (1.0 + 1e-8):
            raise FloatingPointError("K_uu too ill-conditioned: tr(Q_ff) > tr(K_ff)")
        F += -0.5 * sum_wkff + 0.5 * trace_Q

    # Sigma^-1 = L^-T B^-1 L^-1, K_uu^-1 = L^-T L^-1, beta = Sigma^-1 K_uf Lambda^-1 y.
    Li = solve_lower(L, np.eye(m))
    LBi_Li = solve_lower(LB, Li)
    Sigma_inv = LBi_Li.T @ LBi_Li
    Kuu_inv = Li.T @ Li
    beta = solve_upper_t(L, solve_upper_t(LB, c))

    grads, dZ = {}, None
    if need_grad:
        grads, dZ = _gradient_pass(kernel, likelihood, values, X, y, Z, rows, n, chunk, fitc, jit,
                                   beta, Sigma_inv, Kuu_inv, B_minus_I, Li)
    state = None
    if need_state:
        Kuu_j = L @ L.T
        state = PredictiveState(Z=Z, weights=beta, correction=Kuu_inv - Sigma_inv,
                                q_mean=Kuu_j @ beta, q_cov=L @ np.linalg.solve(B, L.T))
    return Evaluation(log_evidence=float(F), grads=grads, dZ=dZ, jitter=jit, state=state,
                      pseudo_data=(1.0 / noise, y / noise))


def _gradient_pass(kernel, likelihood, values, X, y, Z, rows, n, chunk, fitc, jit,
                   beta, Sigma_inv, Kuu_inv, B_minus_I, Li):
    """Adjoints of K_uf (per chunk), K_uu, K_nn and lambda, contracted with the kernel VJPs.

    Writing k_n for column n of K_uf, w_n = 1/lambda_n and e_n = y_n - beta^T k_n, the
    log N(y | 0, Q + Lambda) part has (Sigma = K_uu + K_uf W K_fu)
        dF/dk_n  = w_n (-Sigma^-1 k_n + beta e_n)
        dF/dK_uu = 1/2 K_uu^-1 - 1/2 Sigma^-1 - 1/2 beta beta^T
        dF/dw_n  = -1/2 k_n^T Sigma^-1 k_n - 1/2 e_n^2 + 1/2 lambda_n.
    VFE adds T = -1/2 sum_n w_n (K_nn - k_n^T K_uu^-1 k_n):  dT/dk_n = w_n K_uu^-1 k_n,
    dT/dK_uu = -1/2 K_uu^-1 P K_uu^-1, dT/dK_nn = -w_n/2, dT/dw_n = -1/2 (K_nn - Q_nn).
    FITC instead chains dF/dlambda_n through lambda_n = K_nn - k_n^T K_uu^-1 k_n + noise_n.
    """
    C = Kuu_inv - Sigma_inv

    def pass_fn(slc):
        Kuf, kff, lam, A = rows(slc)
        w = 1.0 / lam
        e = y[slc] - beta @ Kuf
        if fitc:
            V = Sigma_inv @ Kuf
            dF_dw = -0.5 * np.einsum("ij,ij->j", Kuf, V) - 0.5 * e * e + 0.5 * lam
            g_lam = -w * w * dF_dw
            Kuu_inv_Kuf = Li.T @ A          # K_uu^-1 K_uf = L^-T (L^-1 K_uf)
            G_uf = np.outer(beta, e)
            G_uf -= V
            G_uf *= w
            G_uf -= 2.0 * Kuu_inv_Kuf * g_lam
            g_kff = g_lam
            G_uu_part = (Kuu_inv_Kuf * g_lam) @ Kuu_inv_Kuf.T
        else:
            G_uf = C @ Kuf
            dF_dw = 0.5 * np.einsum("ij,ij->j", Kuf, G_uf) - 0.5 * e * e + 0.5 * (lam - kff)
            g_lam = -w * w * dF_dw
            G_uf += np.outer(beta, e)
            G_uf *= w
            g_kff = -0.5 * w
            G_uu_part = 0.0
        kgrads, dZ = kernel.vjp(values, "kernel", Z, X[slc], G_uf, K=Kuf)
        kgrads = add_partial(kgrads, kernel.diag_vjp(values, "kernel", X[slc], g_kff))
        return (kgrads, dZ, G_uu_part), (g_lam,)

    (kgrads, dZ, G_uu_part), (g_lam,) = map_reduce(pass_fn, n, chunk)
    G_uu = 0.5 * (C - np.outer(beta, beta)) + G_uu_part
    if not fitc:
        G_uu = G_uu - 0.5 * Li.T @ B_minus_I @ Li          # -1/2 K_uu^-1 P K_uu^-1
    G_uu = jitter_adjoint(0.5 * (G_uu + G_uu.T), jit)
    uu_grads, dZ_uu = kernel.vjp(values, "kernel", Z, Z, G_uu)
    grads = add_partial(kgrads, uu_grads)
    grads = add_partial(grads, likelihood.noise_vjp(values, "likelihood", X, g_lam))
    return grads, dZ + 2.0 * dZ_uu
