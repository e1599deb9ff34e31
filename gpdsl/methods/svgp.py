"""Stochastic variational GP (SVGP) with a whitened q(u): the uncollapsed sparse bound of
Hensman, Matthews & Ghahramani (2015), as GPflow's ``SVGP(whiten=True)`` evaluates it.

With ``K_uu + jitter = L L^T`` the inducing values are ``u = L v``, v ~ N(0, I) a priori and
q(v) = N(m, S), S = R R^T with R lower-triangular (GPflow's ``q_sqrt``).  Hensman et al.'s bound,
a sum of one-dimensional expectations less one KL divergence, reads in the whitened basis::

    ELBO = sum_n E_q(f_n)[log p(y_n | f_n)] - KL[q(v) || N(0, I)]
    q(f_n) = N(a_n^T m, k_nn - |a_n|^2 + |R^T a_n|^2),   a_n = L^-1 k_u(x_n)
    KL = 1/2 (tr S + m^T m - M - log|S|),                log|S| = 2 sum_i log|R_ii|

The expectations are the likelihood's ``variational_expectations``; the whole data term is one
pure map over row chunks (``A = L^-1 K_uf`` is formed chunk by chunk and never stored), reduced
with :func:`gpdsl.chunks.map_rows`.  Its gradient needs no second pass: the chunk that forms
the marginals also forms the adjoint of its K_uf columns and the O(M^2) partials that the
adjoint of L (hence of K_uu, through the Cholesky factorisation) is built from after the
reduction (derivations in :func:`_data_pass` and :func:`_gradients`).

Variational parameters in ``values``: ``"variational.q_mu"`` (M,) and ``"variational.q_sqrt"``
(M (M + 1) / 2,), the lower triangle of R in ``np.tril_indices(M)`` order (:func:`pack_lower`).

:func:`optimise_q` moves q(v) to its optimum at fixed hyperparameters and Z by damped natural-
gradient steps (Khan & Lin 2017; Salimbeni, Eleftheriadis & Hensman 2018), one O(N M^2) pass each.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import linalg as sp_linalg

from ..chunks import add_partial, default_chunk_size, map_rows
from ..linalg import JITTER_LADDER, cholesky, inverse_lower, jitter_adjoint, solve_upper_t
from .collapsed import check_rows_nystrom, whitened_rows
from .common import NATGRAD_MIN_STEP, Evaluation, PredictiveState, damped_natural_steps, shifted


class ElboTerms(NamedTuple):
    """The bound and its two parts: ``elbo = expected_log_lik - kl``.

    Parameters
    ----------
    elbo : float
        The bound.
    kl : float
        KL[q(v) || p(v)].
    expected_log_lik : float
        sum_n E_q[log p(y_n | f_n)].
    """

    elbo: float
    kl: float
    expected_log_lik: float


def pack_lower(R):
    """The lower triangle of R (M, M) as a vector (M (M + 1) / 2,), ``np.tril_indices`` order.

    Parameters
    ----------
    R : ndarray, shape (M, M)

    Returns
    -------
    ndarray, shape (M (M + 1) / 2,)
    """
    return np.asarray(R, dtype=float)[np.tril_indices(R.shape[0])]


def unpack_lower(v, M):
    """The lower-triangular R (M, M) whose lower triangle is the vector v (M (M + 1) / 2,).

    Parameters
    ----------
    v : ndarray, shape (M (M + 1) / 2,)
    M : int

    Returns
    -------
    ndarray, shape (M, M)
        Zero above the diagonal.
    """
    v = np.asarray(v, dtype=float)
    if v.shape != (M * (M + 1) // 2,):
        raise ValueError(f"SVGP: variational.q_sqrt must hold the {M * (M + 1) // 2} entries of the lower "
                         f"triangle of an {M} x {M} matrix, got shape {v.shape}")
    R = np.zeros((M, M))
    R[np.tril_indices(M)] = v
    return R


def initial_values(M):
    """q(v) = N(0, I), i.e. q(u) = p(u) (GPflow's whitened default): q_mu zeros, q_sqrt the
    packed identity.  The KL term is then 0 and the first gradient is the data's alone.

    Parameters
    ----------
    M : int
        Number of inducing points.

    Returns
    -------
    dict of str to ndarray
        ``"variational.q_mu"`` (M,) zeros and ``"variational.q_sqrt"`` the packed identity.
    """
    return {"variational.q_mu": np.zeros(M), "variational.q_sqrt": pack_lower(np.eye(M))}


def evaluate(kernel, likelihood, values, X, y, Z, *, jitter=None, chunk_size=None, offset=None, need_grad=True,
             need_state=False, warm=None):
    """The whitened SVGP bound, its gradients and, if asked, the predictive state.

    X (N, D), y (N,) in the likelihood's coding, Z (M, D).  ``values`` holds the natural
    ``"kernel.*"`` and ``"likelihood.*"`` hyperparameters and the variational ``"variational.q_mu"``
    (M,) and ``"variational.q_sqrt"`` (packed lower triangle of R).  Gradients (``need_grad``) are
    d ELBO / d each of those entries (q_sqrt packed the same way) and d ELBO / d Z in ``dZ``.
    ``jitter`` is a multiple of mean(diag K_uu) (None: the dynamic ladder, which also moves on
    when K_uu factorises but gives Q_nn > K_nn); the bound depends on it, since L is part of the
    parameterisation.  ``warm`` is unused (SVGP has no local state).

    ``state``: f_* ~ N(b_*^T m, k_** - b_*^T (I - S) b_*) with b_* = L^-1 K_z* (q_mean = L m,
    q_cov = L S L^T are q(u)).  ``pseudo_data``: the Gaussian sites of the conjugate-computation
    view of q (Khan & Lin 2017), precision w_n = -2 dE/dv_n (clipped at 0 where log p is not
    concave) and r_n = dE/dm_n + w_n mean_n; for a Gaussian likelihood (1/s2, y/s2).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    likelihood : gpdsl.likelihoods.Likelihood
        Its ``variational_expectations`` give the data term.
    values : dict of str to ndarray
        Natural hyperparameter values (for :func:`evaluate` also ``"variational.q_mu"`` (M,)
        and ``"variational.q_sqrt"`` (M (M + 1) / 2,)).
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Targets in the likelihood's coding.
    Z : ndarray, shape (M, D)
        Inducing inputs.
    jitter : float or None, optional
        Multiple of mean(diag K_uu) (None: the ladder).
    chunk_size : int, optional
        Rows per block of the O(N M^2) passes.
    offset : ndarray, shape (N,), optional
        Per-row offset of the latent input (the likelihood sees f + offset).
    need_grad : bool, default True
        Compute the gradients.
    need_state : bool, default False
        Build the predictive state.
    warm : object, optional
        Unused.

    Returns
    -------
    gpdsl.methods.common.Evaluation
        The whitened ELBO (Hensman, Matthews & Ghahramani 2015, in v = L^-1 u), its gradients
        and dZ.
    """
    return _with_ladder(kernel, likelihood, values, X, y, Z, jitter, chunk_size, need_grad, need_state, offset)[1]


def elbo_terms(kernel, likelihood, values, X, y, Z, *, jitter=None, chunk_size=None, offset=None):
    """:class:`ElboTerms` (elbo, kl, expected_log_lik) at ``values``; arguments as :func:`evaluate`.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    likelihood : gpdsl.likelihoods.Likelihood
        Its ``variational_expectations`` give the data term.
    values : dict of str to ndarray
        Natural hyperparameter values (for :func:`evaluate` also ``"variational.q_mu"`` (M,)
        and ``"variational.q_sqrt"`` (M (M + 1) / 2,)).
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Targets in the likelihood's coding.
    Z : ndarray, shape (M, D)
        Inducing inputs.
    jitter : float or None, optional
        Multiple of mean(diag K_uu) (None: the ladder).
    chunk_size : int, optional
        Rows per block of the O(N M^2) passes.
    offset : ndarray, shape (N,), optional
        Per-row offset of the latent input (the likelihood sees f + offset).

    Returns
    -------
    ElboTerms
    """
    return _with_ladder(kernel, likelihood, values, X, y, Z, jitter, chunk_size, False, False, offset)[0]


def _with_ladder(kernel, likelihood, values, X, y, Z, jitter, chunk_size, need_grad, need_state, offset):
    m, R = _checked_q(values, Z.shape[0])
    kl = _kl(m, R)

    rungs = JITTER_LADDER if jitter is None else (float(jitter),)
    for attempt, rung in enumerate(rungs):
        try:
            result = _evaluate_at(kernel, likelihood, X, y, Z, m, R, kl, rung, chunk_size, need_grad,
                                  need_state, offset)
            break
        except (np.linalg.LinAlgError, FloatingPointError):
            if attempt == len(rungs) - 1:
                raise
    # Checked past the ladder: a likelihood that overflows is no matter of K_uu, and more
    # jitter would only repeat the pass.
    if not np.isfinite(result[0].elbo):
        raise FloatingPointError("SVGP: non-finite bound")
    return result


def _checked_q(q, M):
    """(m, R) from the ``"variational.*"`` entries of ``q``, checked.  q alone can make the bound
    infinite (a zero on R's diagonal); no jitter would help, so that is said before any pass."""
    m = np.asarray(q["variational.q_mu"], dtype=float)
    if m.shape != (M,):
        raise ValueError(f"SVGP: variational.q_mu must have shape ({M},) for {M} inducing points, got {m.shape}")
    R = unpack_lower(q["variational.q_sqrt"], M)
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(R)) and np.all(np.diag(R) != 0.0)):
        raise FloatingPointError("SVGP: non-finite q(v) or a zero on the diagonal of q_sqrt (S singular)")
    return m, R


def _kl(m, R):
    """KL[N(m, R R^T) || N(0, I)]."""
    return 0.5 * (np.sum(R * R) + m @ m - m.shape[0]) - np.sum(np.log(np.abs(np.diag(R))))


def _evaluate_at(kernel, likelihood, X, y, Z, m, R, kl, jitter, chunk_size, need_grad, need_state, offset=None):
    n, M = X.shape[0], Z.shape[0]
    L, jit = cholesky(kernel.gram(Z, Z), jitter, what="K_uu")
    S = R @ R.T
    (ell, *partials), (mean, d_mean, d_var) = _data_pass(kernel, likelihood, X, y, Z, L, m, R, S,
                                                         chunk_size or default_chunk_size(n, M), need_grad,
                                                         offset=offset)
    terms = ElboTerms(elbo=float(ell - kl), kl=float(kl), expected_log_lik=float(ell))

    grads, dZ = {}, None
    if need_grad:
        grads, dZ = _gradients(kernel, Z, L, m, R, S, jit, *partials, d_offset=None if offset is None else d_mean)
    state = None
    if need_state:
        LR = L @ R
        state = PredictiveState(Z=Z, weights=m, correction=np.eye(M) - S, q_mean=L @ m, q_cov=LR @ LR.T, chol=L)
    w = np.maximum(-2.0 * d_var, 0.0)
    return terms, Evaluation(log_evidence=terms.elbo, grads=grads, dZ=dZ, jitter=jit, state=state,
                             pseudo_data=(w, d_mean + w * mean))


def _data_pass(kernel, likelihood, X, y, Z, L, m, R, S, chunk, need_grad, natural=False, offset=None):
    """sum_n E_q[log p(y_n | f_n)] and, with ``need_grad``, the partials of its gradient.

    With g_n = dE/dmean_n and d_n = dE/dvar_n (from the likelihood), mean_n = a_n^T m and
    var_n = k_nn - a_n^T (I - S) a_n give
        dE/da_n  = g_n m - 2 d_n (I - S) a_n      (columns of G_A, (M, n))
        dE/dk_nn = d_n,   dE/dm = A g,   dE/dS = A diag(d) A^T =: P.
    Through A = L^-1 K_uf: the adjoint of K_uf is L^-T G_A = beta g^T - 2 L^-T (I - S) A diag(d)
    (beta = L^-T m), contracted with the kernel's VJP here, chunk by chunk; the adjoint of L is
    -L^-T G_A A^T, which needs only the reduced A g and P (see :func:`_gradients`).

    Returns ``((ell, A g, P, grads, dZ_uf) or (ell,), (mean, g, d))``: the per-row arrays
    (N,) are the marginal means and the likelihood's derivatives, for the pseudo-data.

    ``natural`` (for :func:`optimise_q`) returns ``((ell, A W A^T, A r), ())`` instead: the data
    part of the natural parameters that the conjugate sites w = -2 d (not clipped), r = g + w mean
    give q(v), W = diag(w).  ``offset`` (N,) shifts each row's latent input (:class:`Shifted`).
    """
    if need_grad:
        beta = solve_upper_t(L, m)
        Li_T_C = solve_upper_t(L, np.eye(L.shape[0]) - S)      # L^-T (I - S)

    def chunk_pass(X_block, y_block, offset_block=None):
        rows_likelihood = shifted(likelihood, offset_block)
        Kuf, A, kff, residual = whitened_rows(kernel, X_block, Z, L)
        check_rows_nystrom(residual, kff)
        # var_n = (k_nn - |a_n|^2) + |R^T a_n|^2: a sum of two non-negative parts, where
        # k_nn - a_n^T (I - S) a_n would cancel when S is near I.
        U = R.T @ A
        mean = m @ A
        var = residual + np.einsum("ij,ij->j", U, U)
        ve, g, d, lik_grads = rows_likelihood.variational_expectations(y_block, mean, var)
        if natural:
            w = -2.0 * d                  # not clipped: see optimise_q
            return (np.sum(ve), (A * w) @ A.T, A @ (g + w * mean)), ()
        if not need_grad:
            return (np.sum(ve),), (mean, g, d)
        Ad = A * d
        G_uf = Li_T_C @ Ad
        G_uf *= -2.0
        G_uf += np.outer(beta, g)
        kgrads, dZ = kernel.vjp(Z, X_block, G_uf, K=Kuf)
        grads = add_partial(add_partial(kgrads, kernel.diag_vjp(X_block, d)), lik_grads)
        return (np.sum(ve), A @ g, Ad @ A.T, grads, dZ), (mean, g, d)

    # One BLAS thread (width 0): the chunks' elementwise work (K_uf's exp, the likelihood's
    # quadrature) is as large as their BLAS-3 products, and OpenBLAS's second thread spinning
    # beside it made the pass slower, not faster: twonorm full-batch probit fit in the default
    # environment 30.6 s CPU / 15.5 s wall with the bulk thread count, 10.2 / 10.2 with one; the
    # final pass of stochastic PG at N = 10^6, 3.33 s wall against 2.53.
    return map_rows(chunk_pass, (X, y) if offset is None else (X, y, offset), chunk, width=0)


def _gradients(kernel, Z, L, m, R, S, jit, Ag, P, grads, dZ, d_offset=None):
    """Complete the gradient from the reduced partials of :func:`_data_pass`.

    A latent offset o enters the bound only through E_q[log p(y_n | o_n + f_n)], as a shift of
    its mean argument: d ELBO / d o_n = dE_n/dmean_n, the rows' g (``d_offset``, (N,)), kept
    as ``grads["offset"]`` (None: no offset, no entry).

    q(v): dELBO/dm = A g - m and, with S = R R^T, dELBO/dR = 2 (P - I/2 + S^-1/2) R, whose lower
    triangle is that of 2 P R - R plus diag(1/R_ii) (S^-1 R = R^-T is upper-triangular).

    K_uu: the bound depends on K_uu only through L = chol(K_uu + jitter).  With the adjoint of L
    Lbar = -L^-T G_A A^T, so L^T Lbar = 2 (I - S) P - m (A g)^T, the adjoint of K_uu through the
    Cholesky factorisation (Murray 2016, "Differentiation of the Cholesky decomposition") is
    sym(L^-T Phi(L^T Lbar) L^-1), Phi taking the lower triangle with its diagonal halved: from
    dL = L Phi(L^-1 dK L^-T), <Lbar, dL> = <Phi(L^T Lbar), L^-1 dK L^-T> for any Lbar.
    """
    M = L.shape[0]
    grads = dict(grads)
    grads["variational.q_mu"] = Ag - m
    dR = 2.0 * (P @ R) - R
    dR[np.diag_indices(M)] += 1.0 / np.diag(R)
    grads["variational.q_sqrt"] = pack_lower(dR)

    Phi = np.tril(2.0 * ((np.eye(M) - S) @ P) - np.outer(m, Ag))
    Phi[np.diag_indices(M)] *= 0.5
    Li = inverse_lower(L)
    G_uu = Li.T @ Phi @ Li
    G_uu = jitter_adjoint(0.5 * (G_uu + G_uu.T), jit)
    uu_grads, dZ_uu = kernel.vjp(Z, Z, G_uu)
    if d_offset is not None:
        grads["offset"] = d_offset
    return add_partial(grads, uu_grads), dZ + 2.0 * dZ_uu


# -- natural-gradient updates of q ----------------------------------------------------------------
# Smallest step size tried before a damped natural-gradient iteration gives up (2^-30: by then the
# step is a first-order move whose gain has the sign of the directional derivative).


def optimise_q(kernel, likelihood, values, X, y, Z, q=None, *, jitter=None, chunk_size=None, offset=None, tol=1e-8,
               max_iter=100, polish=False):
    """q(v) moved to its optimum at fixed hyperparameters and Z by damped natural-gradient steps.

    Returns ``(q, n_steps, converged)``: ``q`` the dict ``{"variational.q_mu", "variational.q_sqrt"}``,
    ``n_steps`` the number of steps taken (each raised the bound, or left it unchanged), and
    ``converged`` whether the last step raised the bound by less than ``tol`` nats (absolute).

    ``values`` holds the ``"kernel.*"`` and ``"likelihood.*"`` values; ``q`` the start (None: the
    ``"variational.*"`` entries of ``values`` if it has them, otherwise :func:`initial_values`).
    ``jitter`` and ``chunk_size`` as for :func:`evaluate` (the ladder is climbed at the first pass,
    and its rung kept: L does not depend on q).

    Conjugate-computation VI (Khan & Lin 2017; for SVGP Salimbeni, Eleftheriadis & Hensman 2018):
    in the natural parameters (S^-1, S^-1 m) of q(v) = N(m, S), whose prior is N(0, I), a
    natural-gradient step of size rho on the bound is::

        S^-1   <- (1 - rho) S^-1   + rho (I + A W A^T)
        S^-1 m <- (1 - rho) S^-1 m + rho A r

    with A = L^-1 K_uf and the conjugate sites of the current marginals q(f_n) = N(mean_n, var_n),
    w_n = -2 dE_n/dvar_n, W = diag(w), r_n = dE_n/dmean_n + w_n mean_n (E_n the likelihood's
    ``variational_expectations``): rho = 1 replaces the likelihood by the Gaussian sites that
    match its expectations' slopes at q, which for a Gaussian likelihood is the optimum in one
    step.  Each step is one chunked O(N M^2) pass (:func:`_data_pass` with ``natural=True``),
    which gives the bound at the step's q and the sites for the next.  rho starts at 1 and is
    halved while a step does not raise the bound (so the bound never decreases); below
    :data:`gpdsl.methods.common.NATGRAD_MIN_STEP` the iteration stops unconverged.  After a step that raised it, the
    next rho is chosen from the change of the residual (:func:`gpdsl.methods.common.next_step_size`): 1 while the
    fixed-point iteration contracts, about 1/2 where it oscillates.  A step that lowers the bound
    by less than ``tol`` is treated as converged (the bound's rounding at the optimum) and not
    taken.  ``polish=True`` also requires the fixed-point residual to be small
    (:func:`gpdsl.methods.common.damped_natural_steps`): the q of a posterior, whose gradient in
    q is then ~1e-8 rather than ~1e-5 (the steps within a fit use the gain test alone).

    w_n is not clipped at 0 here (the pseudo-data clip it): where a likelihood that is not
    log-concave (Student-t at an outlier) gives w_n < 0, I + A W A^T may be indefinite, and a
    step whose S^-1 does not factorise counts as one that did not raise the bound, so rho is
    halved until the convex combination with the current S^-1 (positive definite) is.  The fixed
    point is then the stationary point of the bound (with clipped sites it is not: 1e-4 nats short
    and a q_sqrt gradient of 0.05 on a 60-point Student-t problem with three outliers).  The new
    R is U^-T for S^-1 = U U^T, U upper-triangular (a Cholesky factorisation of the reversed
    S^-1), so that S is never formed or re-factorised.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    likelihood : gpdsl.likelihoods.Likelihood
        Its ``variational_expectations`` give the data term.
    values : dict of str to ndarray
        Natural hyperparameter values (for :func:`evaluate` also ``"variational.q_mu"`` (M,)
        and ``"variational.q_sqrt"`` (M (M + 1) / 2,)).
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Targets in the likelihood's coding.
    Z : ndarray, shape (M, D)
        Inducing inputs.
    q : dict of str to ndarray, optional
        The starting q.
    jitter : float or None, optional
        Multiple of mean(diag K_uu) (None: the ladder).
    chunk_size : int, optional
        Rows per block of the O(N M^2) passes.
    offset : ndarray, shape (N,), optional
        Per-row offset of the latent input (the likelihood sees f + offset).
    tol : float, default 1e-8
        Gain (nats) below which the steps are converged.
    max_iter : int, default 100
        Most natural-gradient steps.
    polish : bool, default False
        Also require a small fixed-point residual.

    Returns
    -------
    q : dict of str to ndarray
    n_steps : int
    converged : bool
    """
    n, M = X.shape[0], Z.shape[0]
    if q is None:
        q = values if all(k in values for k in _Q_KEYS) else initial_values(M)
    m, R = _checked_q(q, M)
    chunk = chunk_size or default_chunk_size(n, M)

    def natural_pass(L, m, R):
        (ell, AWA, Ar), _ = _data_pass(kernel, likelihood, X, y, Z, L, m, R, None, chunk, False,
                                       natural=True, offset=offset)
        elbo = float(ell - _kl(m, R))
        if not np.isfinite(elbo):
            raise FloatingPointError("SVGP: non-finite bound")
        Lam_hat = 0.5 * (AWA + AWA.T)
        Lam_hat[np.diag_indices(M)] += 1.0
        return elbo, Lam_hat, Ar

    Kuu = kernel.gram(Z, Z)
    rungs = JITTER_LADDER if jitter is None else (float(jitter),)
    for attempt, rung in enumerate(rungs):
        try:
            L, _ = cholesky(Kuu, rung, what="K_uu")
            elbo, Lam_hat, eta_hat = natural_pass(L, m, R)
            break
        except (np.linalg.LinAlgError, FloatingPointError):
            if attempt == len(rungs) - 1:
                raise

    Ri = inverse_lower(R)
    Lam = Ri.T @ Ri                                       # S^-1

    def at(natural):
        m_c, R_c = _from_natural(*natural)
        elbo_c, Lam_hat_c, eta_hat_c = natural_pass(L, m_c, R_c)
        return elbo_c, (Lam_hat_c, eta_hat_c), (m_c, R_c)

    moved, n_steps, converged = damped_natural_steps((Lam, Lam @ m), (Lam_hat, eta_hat), elbo, at, tol, max_iter,
                                                     polish)
    m, R = moved if moved is not None else (m, R)
    return {"variational.q_mu": m, "variational.q_sqrt": pack_lower(R)}, n_steps, converged


_Q_KEYS = ("variational.q_mu", "variational.q_sqrt")


def minibatch_step(kernel, likelihood, X, y, Z, q, *, scale, rho, jitter=None, one_pass=False, offset=None):
    """One stochastic step on a minibatch X (B, D), y (B,) of N = ``scale`` B rows (Hensman et
    al. 2015 section 3; Salimbeni, Eleftheriadis & Hensman 2018): the natural-gradient step of
    size ``rho`` on q from the batch's sites (see :func:`optimise_q`), their part of the natural
    parameters times ``scale`` (an unbiased estimate of the full batch's), halved while the new
    S^-1 fails to factorise (sites of a likelihood that is not log-concave); and the batch's
    estimate of the bound, scale E_batch - KL, with its gradient in the kernel and likelihood
    hyperparameters and Z, which is ``scale`` times the batch's (KL[q(v) || p(v)] does not
    depend on them in the whitened basis).

    ``one_pass=False``: the estimate and gradient are taken at the new q (a second pass over
    the batch), so that with the whole batch, ``scale`` 1 and ``rho`` 1 on conjugate sites q is
    at its optimum where the gradient is taken.  ``one_pass=True``: both come from one pass at
    the q the step starts from (a simultaneous update of q and the hyperparameters, at about
    half the cost): with the batch's d_n = dE_n/dvar_n, g_n = dE_n/dmean_n, the partials
    P = A diag(d) A^T and A g of the gradient (:func:`_data_pass`) give the sites' part of the
    natural parameters, w = -2 d and r = g + w mean (mean = A^T m): A W A^T = -2 P,
    A r = A g - 2 P m.

    Returns ``(q, elbo_estimate, grads, dZ, jitter)``: the new ``q`` (as in :func:`optimise_q`),
    the estimate and its gradients (at the new q, or with ``one_pass`` at the starting one).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    likelihood : gpdsl.likelihoods.Likelihood
        Its ``variational_expectations`` give the data term.
    X : ndarray, shape (B, D)
        Training inputs.
    y : ndarray, shape (B,)
        Targets in the likelihood's coding.
    Z : ndarray, shape (M, D)
        Inducing inputs.
    q : dict of str to ndarray
        The current q.
    scale : float
        N / B.
    rho : float
        Natural-gradient step size.
    jitter : float or None, optional
        Multiple of mean(diag K_uu) (None: the ladder).
    offset : ndarray, shape (B,), optional
        Per-row offset of the latent input.
    one_pass : bool, default False
        Take the estimate and gradient at the starting q.

    Returns
    -------
    q : dict of str to ndarray
    elbo : float
        The batch's estimate of the bound.
    grads : dict of str to ndarray
        Its gradients in the hyperparameters.
    dZ : ndarray, shape (M, D)
    jitter : float
    """
    M = Z.shape[0]
    m, R = _checked_q(q, M)
    L, jit = cholesky(kernel.gram(Z, Z), jitter, what="K_uu")
    if one_pass:
        S = R @ R.T
        (ell, Ag, P, grads, dZ), (_, g, _) = _data_pass(kernel, likelihood, X, y, Z, L, m, R, S, X.shape[0], True,
                                                        offset=offset)
        elbo = scale * float(ell) - _kl(m, R)
        if not np.isfinite(elbo):
            raise FloatingPointError("SVGP: non-finite bound")
        grads, dZ = _gradients(kernel, Z, L, m, R, S, jit, Ag, P, grads, dZ, d_offset=None if offset is None else g)
        AWA, Ar = -2.0 * P, Ag - 2.0 * (P @ m)
    else:
        (_, AWA, Ar), _ = _data_pass(kernel, likelihood, X, y, Z, L, m, R, None, X.shape[0], False, offset=offset,
                                     natural=True)
    Lam_hat = scale * 0.5 * (AWA + AWA.T)
    Lam_hat[np.diag_indices(M)] += 1.0
    Ri = inverse_lower(R)
    Lam = Ri.T @ Ri
    while True:
        try:
            m, R = _from_natural((1.0 - rho) * Lam + rho * Lam_hat, (1.0 - rho) * (Lam @ m) + rho * scale * Ar)
            break
        except np.linalg.LinAlgError:
            rho *= 0.5
            if rho < NATGRAD_MIN_STEP:
                raise FloatingPointError("SVGP: no natural-gradient step keeps S positive definite") from None
    q = {"variational.q_mu": m, "variational.q_sqrt": pack_lower(R)}
    if not one_pass:
        terms, ev = _evaluate_at(kernel, likelihood, X, y, Z, m, R, _kl(m, R), jit, X.shape[0],
                                 True, False, offset)
        elbo, grads, dZ = scale * terms.expected_log_lik - terms.kl, ev.grads, ev.dZ
    grads = {k: scale * g for k, g in grads.items() if k not in _Q_KEYS}
    return q, elbo, grads, scale * dZ, jit


def _from_natural(Lam, eta):
    """(m, R) with R R^T = S = Lam^-1, R lower-triangular, m = S eta.  Lam = U U^T with U upper
    (the reversed Cholesky factor), so R = U^-T with no inverse of Lam formed."""
    U = sp_linalg.cholesky(Lam[::-1, ::-1], lower=True, check_finite=False)[::-1, ::-1]
    R = inverse_lower(np.ascontiguousarray(U.T))
    return R @ (R.T @ eta), R
