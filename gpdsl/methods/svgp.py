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
with :func:`gpdsl.chunks.map_reduce`.  Its gradient needs no second pass: the chunk that forms
the marginals also forms the adjoint of its K_uf columns and the O(M^2) partials that the
adjoint of L (hence of K_uu, through the Cholesky factorisation) is built from after the
reduction (derivations in :func:`_data_pass` and :func:`_gradients`).

Variational parameters in ``values``: ``"variational.q_mu"`` (M,) and ``"variational.q_sqrt"``
(M (M + 1) / 2,), the lower triangle of R in ``np.tril_indices(M)`` order (:func:`pack_lower`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..chunks import add_partial, default_chunk_size, map_reduce
from ..linalg import JITTER_LADDER, cholesky, inverse_lower, jitter_adjoint, solve_upper_t
from .collapsed import check_rows_nystrom, whitened_rows
from .common import Evaluation, PredictiveState


class ElboTerms(NamedTuple):
    """The bound and its two parts: ``elbo = expected_log_lik - kl``."""

    elbo: float
    kl: float
    expected_log_lik: float


def pack_lower(R):
    """The lower triangle of R (M, M) as a vector (M (M + 1) / 2,), ``np.tril_indices`` order."""
    return np.asarray(R, dtype=float)[np.tril_indices(R.shape[0])]


def unpack_lower(v, M):
    """The lower-triangular R (M, M) whose lower triangle is the vector v (M (M + 1) / 2,)."""
    v = np.asarray(v, dtype=float)
    if v.shape != (M * (M + 1) // 2,):
        raise ValueError(f"SVGP: variational.q_sqrt must hold the {M * (M + 1) // 2} entries of the lower "
                         f"triangle of an {M} x {M} matrix, got shape {v.shape}")
    R = np.zeros((M, M))
    R[np.tril_indices(M)] = v
    return R


def initial_values(M):
    """q(v) = N(0, I), i.e. q(u) = p(u) (GPflow's whitened default): q_mu zeros, q_sqrt the
    packed identity.  The KL term is then 0 and the first gradient is the data's alone."""
    return {"variational.q_mu": np.zeros(M), "variational.q_sqrt": pack_lower(np.eye(M))}


def evaluate(kernel, likelihood, values, X, y, Z, *, jitter=None, chunk_size=None, need_grad=True,
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
    """
    return _with_ladder(kernel, likelihood, values, X, y, Z, jitter, chunk_size, need_grad, need_state)[1]


def elbo_terms(kernel, likelihood, values, X, y, Z, *, jitter=None, chunk_size=None):
    """:class:`ElboTerms` (elbo, kl, expected_log_lik) at ``values``; arguments as :func:`evaluate`."""
    return _with_ladder(kernel, likelihood, values, X, y, Z, jitter, chunk_size, False, False)[0]


def _with_ladder(kernel, likelihood, values, X, y, Z, jitter, chunk_size, need_grad, need_state):
    M = Z.shape[0]
    m = np.asarray(values["variational.q_mu"], dtype=float)
    if m.shape != (M,):
        raise ValueError(f"SVGP: variational.q_mu must have shape ({M},) for {M} inducing points, got {m.shape}")
    R = unpack_lower(values["variational.q_sqrt"], M)
    # q alone can make the bound infinite; no jitter would help, so say so before any pass.
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(R)) and np.all(np.diag(R) != 0.0)):
        raise FloatingPointError("SVGP: non-finite q(v) or a zero on the diagonal of q_sqrt (S singular)")
    kl = 0.5 * (np.sum(R * R) + m @ m - M) - np.sum(np.log(np.abs(np.diag(R))))

    rungs = JITTER_LADDER if jitter is None else (float(jitter),)
    for attempt, rung in enumerate(rungs):
        try:
            result = _evaluate_at(kernel, likelihood, values, X, y, Z, m, R, kl, rung, chunk_size, need_grad,
                                  need_state)
            break
        except (np.linalg.LinAlgError, FloatingPointError):
            if attempt == len(rungs) - 1:
                raise
    # Checked past the ladder: a likelihood that overflows is no matter of K_uu, and more
    # jitter would only repeat the pass.
    if not np.isfinite(result[0].elbo):
        raise FloatingPointError("SVGP: non-finite bound")
    return result


def _evaluate_at(kernel, likelihood, values, X, y, Z, m, R, kl, jitter, chunk_size, need_grad, need_state):
    n, M = X.shape[0], Z.shape[0]
    L, jit = cholesky(kernel.gram(values, "kernel", Z, Z), jitter, what="K_uu")
    S = R @ R.T
    (ell, *partials), (mean, d_mean, d_var) = _data_pass(kernel, likelihood, values, X, y, Z, L, m, R, S,
                                                         chunk_size or default_chunk_size(n, M), need_grad)
    terms = ElboTerms(elbo=float(ell - kl), kl=float(kl), expected_log_lik=float(ell))

    grads, dZ = {}, None
    if need_grad:
        grads, dZ = _gradients(kernel, values, Z, L, m, R, S, jit, *partials)
    state = None
    if need_state:
        LR = L @ R
        state = PredictiveState(Z=Z, weights=m, correction=np.eye(M) - S, q_mean=L @ m, q_cov=LR @ LR.T, chol=L)
    w = np.maximum(-2.0 * d_var, 0.0)
    return terms, Evaluation(log_evidence=terms.elbo, grads=grads, dZ=dZ, jitter=jit, state=state,
                             pseudo_data=(w, d_mean + w * mean))


def _data_pass(kernel, likelihood, values, X, y, Z, L, m, R, S, chunk, need_grad):
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
    """
    beta = solve_upper_t(L, m)
    Li_T_C = solve_upper_t(L, np.eye(L.shape[0]) - S)          # L^-T (I - S)

    def chunk_pass(slc):
        Kuf, A, kff, residual = whitened_rows(kernel, values, X, Z, L, slc)
        check_rows_nystrom(residual, kff)
        # var_n = (k_nn - |a_n|^2) + |R^T a_n|^2: a sum of two non-negative parts, where
        # k_nn - a_n^T (I - S) a_n would cancel when S is near I.
        U = R.T @ A
        mean = m @ A
        var = residual + np.einsum("ij,ij->j", U, U)
        ve, g, d, lik_grads = likelihood.variational_expectations(values, "likelihood", y[slc], mean, var)
        if not need_grad:
            return (np.sum(ve),), (mean, g, d)
        Ad = A * d
        G_uf = Li_T_C @ Ad
        G_uf *= -2.0
        G_uf += np.outer(beta, g)
        kgrads, dZ = kernel.vjp(values, "kernel", Z, X[slc], G_uf, K=Kuf)
        grads = add_partial(add_partial(kgrads, kernel.diag_vjp(values, "kernel", X[slc], d)), lik_grads)
        return (np.sum(ve), A @ g, Ad @ A.T, grads, dZ), (mean, g, d)

    return map_reduce(chunk_pass, X.shape[0], chunk, width=L.shape[0])


def _gradients(kernel, values, Z, L, m, R, S, jit, Ag, P, grads, dZ):
    """Complete the gradient from the reduced partials of :func:`_data_pass`.

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
    uu_grads, dZ_uu = kernel.vjp(values, "kernel", Z, Z, G_uu)
    return add_partial(grads, uu_grads), dZ + 2.0 * dZ_uu
