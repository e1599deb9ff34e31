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

K latent functions (a likelihood with ``n_latent = K > 1``, :class:`gpdsl.likelihoods.Categorical`):
K independent GPs a priori sharing Z, and q(v) = prod_k N(m_k, R_k R_k^T); ``"variational.q_mu"``
is (M, K) (column k is m_k) and ``"variational.q_sqrt"`` (K, M (M + 1) / 2) (row k packs R_k).  With
one kernel shared by the classes one L and one A per chunk serve them all; with one kernel each
(``kernel.n_outputs == K``, :class:`gpdsl.kernels.Separate`, whose gram is a (K, M, M) stack) each
class has its own L_k and A_k (see :func:`_checked_q`).  The bound is
sum_n E_q[log p(y_n | f_n1..f_nK)] - sum_k KL[q(v_k) || N(0, I)], the likelihood taking each row's K
marginals (n, K); the kernel and Z gradients go through one kernel VJP per chunk (of a stack, for
one kernel each).  No latent offset with K > 1.  For K = 1 the shapes are the single-output ones.

:func:`minibatch_step` (what ``SVGP(batch_size=B)`` runs; :func:`minibatch_update` with q carried
between steps) is profiled against its flop bound in ``benchmarks/profile_multiclass_step.py`` (K
classes) and ``benchmarks/profile_minibatch_step.py`` (binary, with GPyTorch's step beside it); its
K classes' products are written into stacks that a run reuses (:mod:`gpdsl.methods.svgp_classes`).

:func:`optimise_q` moves q(v) to its optimum at fixed hyperparameters and Z by damped natural-
gradient steps (Khan & Lin 2017; Salimbeni, Eleftheriadis & Hensman 2018), one O(N M^2) pass each.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..chunks import add_partial, cache_bytes, default_chunk_size, is_chunked, map_rows
from ..linalg import JITTER_LADDER, inverse_lower, jitter_adjoint, lower_product, stacked, weighted_gram
from .collapsed import factor_blocks, whitened_blocks
from .common import (NATGRAD_MIN_STEP, SINGULAR_Q, Evaluation, PredictiveState, damped_natural_steps, extrapolates,
                     shifted)
from .svgp_classes import (Scratch, centred, centres, class_products, from_natural, gather, kept, natural, on_top,
                           prior_plus, project, subtract_class_products, weighted_grams)


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


def initial_values(M, K=1):
    """q(v_k) = N(0, I), i.e. q(u) = p(u) (GPflow's whitened default): q_mu zeros, q_sqrt the
    packed identity.  The KL term is then 0 and the first gradient is the data's alone.

    Parameters
    ----------
    M : int
        Number of inducing points.
    K : int, default 1
        Number of latent functions (``likelihood.n_latent``).

    Returns
    -------
    dict of str to ndarray
        ``"variational.q_mu"`` zeros, (M,) for K = 1 and (M, K) otherwise, and
        ``"variational.q_sqrt"`` the packed identity, (M (M + 1) / 2,) or one row per class
        (K, M (M + 1) / 2).
    """
    if K == 1:
        return {"variational.q_mu": np.zeros(M), "variational.q_sqrt": pack_lower(np.eye(M))}
    return {"variational.q_mu": np.zeros((M, K)), "variational.q_sqrt": np.tile(pack_lower(np.eye(M)), (K, 1))}


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
    q_cov = L S L^T are q(u)); for K > 1 per class, weights (M, K), correction (K, M, M), q_mean
    (M, K), q_cov (K, M, M).  ``pseudo_data``: the Gaussian sites of the conjugate-computation
    view of q (Khan & Lin 2017), precision w_n = -2 dE/dv_n (clipped at 0 where log p is not
    concave) and r_n = dE/dm_n + w_n mean_n, (N,) each or (N, K) per class; for a Gaussian
    likelihood (1/s2, y/s2).

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
    m, R = _checked_q(values, Z.shape[0], _latent_count(likelihood, offset))
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


def _latent_count(likelihood, offset=None):
    """K, the likelihood's latent functions (1 for a stand-in without ``n_latent``); no offsets
    with K > 1."""
    K = getattr(likelihood, "n_latent", 1)
    if K > 1 and offset is not None:
        raise ValueError(f"SVGP: a latent offset is not supported with {K} latent functions")
    return K


# q is held stacked over the K latent functions whatever K is: m (M, K), its column k m_k, and
# R (K, M, M); the parameter dicts keep the single-output shapes (M,) and (M (M + 1) / 2,) for
# K = 1 (:func:`_checked_q` and :func:`_q_dict` convert).  The prior factor L is (G, M, M): G = 1
# for one kernel shared by the K latent functions (one L and one A = L^-1 K_uf per chunk serve
# them all), G = K for one kernel each (``kernel.n_outputs`` = K, whose gram is a (K, M, M)
# stack).  Every product below broadcasts a G-stack against a K-stack, so both cases are one code.
def _checked_q(q, M, K=1):
    """(m (M, K), R (K, M, M)) from the ``"variational.*"`` entries of ``q``, checked: (M,), the
    packed (M (M + 1) / 2,) for K = 1, (M, K), (K, M (M + 1) / 2) otherwise.  q alone can make the
    bound infinite (a zero on R's diagonal); no jitter would help, so that is said before any pass."""
    m = np.asarray(q["variational.q_mu"], dtype=float)
    shape = (M,) if K == 1 else (M, K)
    if m.shape != shape:
        raise ValueError(f"SVGP: variational.q_mu must have shape {shape} for {M} inducing points"
                         f"{'' if K == 1 else f' and {K} latent functions'}, got {m.shape}")
    if K == 1:
        R = unpack_lower(q["variational.q_sqrt"], M)[None]
    else:
        packed = np.asarray(q["variational.q_sqrt"], dtype=float)
        if packed.shape != (K, M * (M + 1) // 2):
            raise ValueError(f"SVGP: variational.q_sqrt must have one row per latent function, shape "
                             f"({K}, {M * (M + 1) // 2}), got {packed.shape}")
        R = np.zeros((K, M, M))
        R[(slice(None),) + np.tril_indices(M)] = packed
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(R)) and np.all(np.diagonal(R, axis1=-2, axis2=-1) != 0.0)):
        raise FloatingPointError(SINGULAR_Q)
    return m.reshape(M, K), R


def _q_dict(m, R):
    """``{"variational.q_mu", "variational.q_sqrt"}`` of the stacked (m, R), in the parameters'
    shapes (the inverse of :func:`_checked_q`)."""
    packed = R[(slice(None),) + np.tril_indices(R.shape[-1])]
    if m.shape[1] == 1:
        return {"variational.q_mu": m[:, 0].copy(), "variational.q_sqrt": packed[0]}
    return {"variational.q_mu": m, "variational.q_sqrt": packed}


def _kl(m, R):
    """sum_k KL[N(m_k, R_k R_k^T) || N(0, I)]."""
    return 0.5 * ((R * R).sum() + (m * m).sum() - m.size) - np.log(np.abs(R.diagonal(axis1=-2, axis2=-1))).sum()


def _whitened(kernel, X, Z, L, Li):
    """One row block's K_uf (G, M, n), A = L^-1 K_uf (G, M, n) and k_nn - |a_n|^2 (G, n), per
    kernel block (:func:`gpdsl.methods.collapsed.whitened_blocks`), with L's inverses Li formed."""
    Kuf = kernel.gram(Z, X)
    A, residual = whitened_blocks(Kuf, kernel.diag(X), L, Li)
    return (Kuf[None] if Kuf.ndim == 2 else Kuf), A, residual


class _Factors(NamedTuple):
    """K_uu's factors L (G, M, M) per kernel block (:func:`gpdsl.methods.collapsed.factor_blocks`),
    their inverses Li (G, M, M), formed once for a pass and the gradient after it, the jitter, and
    K_uu itself ((M, M) or (G, M, M), for the gradient's kernel VJP)."""

    L: np.ndarray
    Li: np.ndarray
    jitter: float
    Kuu: np.ndarray


def _factors(kernel, Z, jitter):
    """:class:`_Factors` of K_uu at Z (``jitter`` as :func:`gpdsl.methods.collapsed.factor_blocks`)."""
    L, jit, Kuu = factor_blocks(kernel, Z, jitter)
    return _Factors(L, stacked([inverse_lower(L_g) for L_g in L]), jit, Kuu)


def _unstacked(a, G):
    """A (G, ...) stack as the kernel's operations take it: the one block of a shared kernel."""
    return a[0] if G == 1 else a


def _evaluate_at(kernel, likelihood, X, y, Z, m, R, kl, jitter, chunk_size, need_grad, need_state, offset=None):
    n, M = X.shape[0], Z.shape[0]
    K = m.shape[1]
    factors = _factors(kernel, Z, jitter)
    (ell, *partials), (mean, d_mean, d_var) = _data_pass(kernel, likelihood, X, y, Z, factors, m, R,
                                                         chunk_size or default_chunk_size(n, M * K),
                                                         ("grad", "q_grad") if need_grad else (), offset)
    terms = ElboTerms(elbo=float(ell - kl), kl=float(kl), expected_log_lik=float(ell))
    if K == 1:
        mean, d_mean, d_var = mean[:, 0], d_mean[:, 0], d_var[:, 0]

    grads, dZ = {}, None
    if need_grad:
        grads, dZ = _gradients(kernel, Z, factors, m, R, *partials, d_offset=None if offset is None else d_mean)
    state = _state(Z, factors.L, m, R) if need_state else None
    w = np.maximum(-2.0 * d_var, 0.0)
    return terms, Evaluation(log_evidence=terms.elbo, grads=grads, dZ=dZ, jitter=factors.jitter, state=state,
                             pseudo_data=(w, d_mean + w * mean))


def _state(Z, L, m, R):
    """The :class:`PredictiveState` of q (m (M, K), R (K, M, M)) at Z with L (G, M, M) stacked;
    for K > 1 (PredictiveState's docstring): weights (M, K), correction (K, M, M), q_mean (M, K),
    q_cov (K, M, M); chol (M, M) shared, or (K, M, M) one per latent function."""
    M, K = Z.shape[0], m.shape[1]
    S = R @ np.swapaxes(R, -1, -2)
    LR = L @ R
    q_mean = np.einsum("kij,jk->ik", L, m) if L.shape[0] > 1 else L[0] @ m
    return PredictiveState(Z=Z, weights=m[:, 0] if K == 1 else m, correction=_unstacked(np.eye(M) - S, K),
                           q_mean=q_mean[:, 0] if K == 1 else q_mean,
                           q_cov=_unstacked(LR @ np.swapaxes(LR, -1, -2), K), chol=_unstacked(L, L.shape[0]))


def state_at(kernel, likelihood, values, Z, *, jitter=None):
    """The predictive state of the q in ``values`` at Z, without a pass over the data: what a
    minibatch fit's posterior predicts from (:class:`gpdsl.methods.common.PendingEvaluation`).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    likelihood : gpdsl.likelihoods.Likelihood
        Read for its number of latent functions.
    values : dict of str to ndarray
        ``"variational.q_mu"`` and ``"variational.q_sqrt"`` (as :func:`evaluate`).
    Z : ndarray, shape (M, D)
        Inducing inputs.
    jitter : float or None, optional
        Multiple of mean(diag K_uu) (None: the factorisation's ladder, as each minibatch step's).

    Returns
    -------
    state : PredictiveState
    jitter : float
        The multiple of mean(diag K_uu) used.
    """
    m, R = _checked_q(values, Z.shape[0], _latent_count(likelihood))
    L, jit, _ = factor_blocks(kernel, Z, jitter)
    return _state(Z, L, m, R), jit


def _data_pass(kernel, likelihood, X, y, Z, factors, m, R, chunk, outputs, offset=None, keep=False, carried=None,
               clip=False, scratch=None):
    """sum_n E_q[log p(y_n | f_n)] and the partial sums of what ``outputs`` asks for.

    m (M, K), R (K, M, M) stacked (see :func:`_checked_q`); ``factors`` the :class:`_Factors` of K_uu
    (L and its inverses Li, (G, M, M) each).  With
    g_nk = dE_n/dmean_nk and d_nk = dE_n/dvar_nk (from the likelihood), mean_nk = a_n^T m_k and
    var_nk = (k_nn - |a_n|^2) + |u_nk|^2, u_nk = R_k^T a_n (a sum of two non-negative parts, where
    k_nn - a_n^T (I - S_k) a_n would cancel when S_k = R_k R_k^T is near I), a_n the row's column
    of A = L^-1 K_uf of latent function k's kernel block:

    * ``"natural"``: A W_k A^T (K, M, M) and (A r_k)^T (K, M), the data part of the natural
      parameters of q(v_k) from the conjugate sites w = -2 d, r = g + w mean, W_k = diag(w_k);
      w is clipped at 0 with ``clip`` (the minibatch steps, :func:`minibatch_step`), not otherwise
      (see :func:`optimise_q`).
    * ``"grad"``: A g (M, K), Phi (G, M, M), the kernel/likelihood gradients (a dict) and the
      K_uf part of d/dZ (M, D).  dE/da_n = sum_k [g_nk m_k - 2 d_nk (I - S_k) a_n], so the adjoint
      of K_uf (through A = L^-1 K_uf) is L^-T G_A with G_A = m g^T - 2 W, where
      W = sum_k (I - S_k) A D_k (D_k = diag(d_k)) sums the K latent functions of each kernel
      block: one kernel VJP per chunk.  Where each block holds one class (G = K, so also K = 1)
      that adjoint is [mu_k, E_k] [g_k^T; -2 A_k D_k] with [mu_k, E_k] = L_k^-T [m_k, I - S_k]
      formed once a pass: one general product a class (2 M^2 n), where W's R_k (U_k D_k)
      (U_k = R_k^T A) and L^-T G_A took two triangular ones and five elementwise passes over
      (M, n) blocks.  A kernel shared by K > 1 classes keeps W (one L^-T G_A for all K).
      The adjoint of L is -L^-T G_A A^T; :func:`_gradients` needs its reduction
      Phi = L^T Lbar = 2 W A^T - m (A g)^T (per block), where W A^T = sum_k (I - S_k) P_k with
      P_k = A D_k A^T: an M^3 product once P_k is formed (G = K; for G = 1 < K the one product
      W A^T, where K classes' P_k were 25x the work at K = 10, M = B = 100).
    * ``"q_grad"``: P_k R_k (K, M, M), for dELBO/dR_k = 2 P_k R_k - R_k + diag(1/R_ii).

    The O(n M^2) products, per class: U_k (triangular, n M^2), the K_uf adjoint (a general
    product, 2 n M^2; with a shared kernel and K > 1, R_k (U_k D_k) and L^-T G_A, n M^2 each),
    and P_k = A D_k A^T (:func:`gpdsl.linalg.weighted_gram`: a
    symmetric rank-n update, n M^2, where d_k keeps one sign, as for every log-concave
    likelihood), which also gives "natural"'s A W_k A^T = -2 P_k where w_k = -2 d_k is not
    clipped; a clipped w_k takes its own rank-n update.

    Returns ``((ell, *partials), (mean, g, d))`` (the partials in the order of the list above,
    for the ``outputs`` given; the per-row arrays (N, K) for the pseudo-data) and, with ``keep``,
    the blocks' (K_uf, A, k_nn - |a_n|^2) for a later pass at the same Z and hyperparameters
    (``carried``).  ``offset`` (N,) shifts each row's latent input (:class:`Shifted`; K = 1 only).
    ``scratch`` (:class:`gpdsl.methods.svgp_classes.Scratch`) holds the stacks U, the grams,
    A W A^T and P R (the last two then returned in it) where the pass is one in-memory block (a
    minibatch step's); it is ignored otherwise.
    """
    L, Li = factors.L, factors.Li
    G, K, M = L.shape[0], m.shape[1], Z.shape[0]
    if "grad" in outputs and G == K:
        complement = [np.eye(M) - R_k @ R_k.T for R_k in R]                 # I - S_k
        lifted = [lower_product(Li_k, np.column_stack([m[:, k], complement[k]]), transpose=True)
                  for k, Li_k in enumerate(Li)]                             # [mu_k, E_k], (M, M + 1) each

    def chunk_pass(X_block, y_block, *rest):
        offset_block = rest[0] if offset is not None else None
        Kuf, A, residual = rest[-1] if carried is not None else _whitened(kernel, X_block, Z, L, Li)
        block = [0] * K if G == 1 else range(K)                      # latent function k's kernel block
        U = class_products(R, A, block, kept(scratch, "U", (K,) + A.shape[1:]))    # R_k^T A
        mean = project(A, m)
        var = residual.T + np.einsum("kmn,kmn->nk", U, U)
        rows_likelihood = shifted(likelihood.for_rows(X_block), offset_block)
        if K == 1:
            ve, g, d, lik_grads = rows_likelihood.variational_expectations(y_block, mean[:, 0], var[:, 0])
            g, d = g[:, None], d[:, None]
        else:
            ve, g, d, lik_grads = rows_likelihood.variational_expectations(y_block, mean, var)
        out = [np.sum(ve)]
        dT = np.ascontiguousarray(d.T)                               # (K, n)
        # The per-class products run one class at a time: their (M, n) operands stay in cache,
        # where one stacked product over (K, M, n) temporaries ran 1.4x (P) to 2x (V) slower.
        P = [None] * K

        def weighted_d(k):
            """P_k = A D_k A^T, formed once a chunk, when first asked for."""
            if P[k] is None:
                P[k] = weighted_gram(A[block[k]], dT[k])
            return P[k]

        if "natural" in outputs:
            w = np.maximum(-2.0 * d, 0.0) if clip else -2.0 * d
            # Where the clip left w_k = -2 d_k (d_k <= 0: every log-concave likelihood), A W_k A^T is -2 P_k;
            # the other classes take their clipped w_k's gram.  One stack of grams either way, and no masks
            # without the clip (every natural step of a full-batch fit: the same numbers in one call, not five).
            unclipped = np.all(dT <= 0.0, axis=1) if clip else None         # (True on a chunk of no rows)
            grams = weighted_grams(A, dT if unclipped is None else np.where(unclipped[:, None], dT, w.T), block,
                                   kept(scratch, "grams", (K, M, M)))
            AWA = np.multiply(grams, -2.0 if unclipped is None else np.where(unclipped, -2.0, 1.0)[:, None, None],
                              out=kept(scratch, "AWA", (K, M, M)))
            for k in range(K) if unclipped is None else np.flatnonzero(unclipped):
                P[k] = grams[k]
            out += [AWA, gather(A, g + w * mean).T]
        if "grad" in outputs:
            Ag = gather(A, g)
            Phi = -((m @ Ag.T)[None] if G == 1 else m.T[:, :, None] * Ag.T[:, None, :])
            if G == K:
                # G_uf_k = [mu_k, E_k] [g_k^T; -2 A_k D_k]; Phi_k += 2 (I - S_k) P_k.
                G_uf = stacked([lifted[k] @ on_top(g[:, k], A[k], -2.0 * dT[k]) for k in range(K)])
                for k in range(K):
                    Phi[k] += 2.0 * (complement[k] @ weighted_d(k))
            else:
                # One kernel block, K classes: W = sum_k A D_k - R_k U_k D_k.
                UD = np.multiply(U, dT[:, None, :], out=U)
                # P_k R_k = A D_k A^T R_k = A (U_k D_k)^T before W overwrites U D: no grams (0.5 of an 8 ms step).
                PR = np.matmul(A[0], np.swapaxes(UD, 1, 2), out=kept(scratch, "PR", (K, M, M))) \
                    if "q_grad" in outputs else None
                W = subtract_class_products(A[0] * dT.sum(axis=0), R, UD)
                G_uf = lower_product(Li[0], m @ g.T - 2.0 * W, transpose=True)[None]
                Phi[0] += 2.0 * (W @ A[0].T)
            kgrads, dZ = kernel.vjp(Z, X_block, _unstacked(G_uf, G), K=_unstacked(Kuf, G))
            d_diag = dT.sum(axis=0) if G == 1 else dT
            grads = add_partial(add_partial(kgrads, kernel.diag_vjp(X_block, d_diag)), lik_grads)
            out += [Ag, Phi, grads, dZ]
        if "q_grad" in outputs:
            if "grad" not in outputs or G == K:
                grams = (weighted_grams(A, dT, block, kept(scratch, "grams", (K, M, M))) if all(p is None for p in P)
                         else np.stack([weighted_d(k) for k in range(K)]))
                PR = np.matmul(grams, R, out=kept(scratch, "PR", (K, M, M)))
            out.append(PR)
        return (tuple(out), (mean, g, d)) + (((Kuf, A, residual),) if keep else ())

    rows = (X, y) if offset is None else (X, y, offset)
    if is_chunked(rows) or chunk < X.shape[0]:
        scratch = None          # blocks whose sums outlive them, or Dask's, which may run at once
    # Each block on one BLAS thread (several blocks on threads of their own: gpdsl.threads): the
    # chunks' elementwise work (K_uf's exp, the likelihood's quadrature) is as large as their
    # BLAS-3 products, and OpenBLAS's second thread spinning beside it made the pass slower:
    # twonorm full-batch probit fit 30.6 s CPU / 15.5 s wall with two threads, 10.2 / 10.2 with one.
    return map_rows(chunk_pass, rows, chunk, width=Z.shape[0], carried=carried, keep=keep)


def _gradients(kernel, Z, factors, m, R, Ag, Phi, grads, dZ, PR=None, d_offset=None):
    """Complete the gradient from the reduced partials of :func:`_data_pass`.

    A latent offset o enters the bound only through E_q[log p(y_n | o_n + f_n)], as a shift of
    its mean argument: d ELBO / d o_n = dE_n/dmean_n, the rows' g (``d_offset``, (N,)), kept
    as ``grads["offset"]`` (None: no offset, no entry).

    q(v_k), per latent function (with ``PR``, the reduced P_k R_k): dELBO/dm_k = A g_k - m_k and
    dELBO/dR_k = 2 (P_k - I/2 + S_k^-1/2) R_k, whose lower triangle is that of 2 P_k R_k - R_k
    plus diag(1/R_ii) (S^-1 R = R^-T is upper-triangular).

    K_uu: the bound depends on each kernel block's K_uu only through its L = chol(K_uu + jitter).
    With the adjoint of L Lbar = -L^-T G_A A^T, L^T Lbar = Phi (reduced in :func:`_data_pass`),
    the adjoint of K_uu through the Cholesky factorisation (Murray 2016, "Differentiation of the
    Cholesky decomposition") is sym(L^-T Phi~(L^T Lbar) L^-1), Phi~ taking the lower triangle with
    its diagonal halved: from dL = L Phi~(L^-1 dK L^-T), <Lbar, dL> = <Phi~(L^T Lbar), L^-1 dK L^-T>
    for any Lbar.  ``factors`` is the :class:`_Factors` of the pass (its Li, jitter and K_uu).
    """
    Li, jit = factors.Li, factors.jitter
    G, M = Li.shape[0], Li.shape[1]
    grads = dict(grads)
    if PR is not None:
        dR = 2.0 * PR - R
        diag = np.arange(M)
        dR[:, diag, diag] += 1.0 / R[:, diag, diag]
        q = _q_dict(Ag - m, dR)
        grads["variational.q_mu"], grads["variational.q_sqrt"] = q["variational.q_mu"], q["variational.q_sqrt"]
    Phi = np.tril(Phi)
    Phi[:, np.arange(M), np.arange(M)] *= 0.5
    G_uu = []
    for Li_g, Phi_g in zip(Li, Phi):
        G_g = Li_g.T @ Phi_g @ Li_g
        G_uu.append(jitter_adjoint(0.5 * (G_g + G_g.T), jit))
    uu_grads, dZ_uu = kernel.vjp(Z, Z, _unstacked(np.stack(G_uu), G), K=factors.Kuu)
    if d_offset is not None:
        grads["offset"] = d_offset
    return add_partial(grads, uu_grads), dZ + 2.0 * dZ_uu


# -- natural-gradient updates of q ----------------------------------------------------------------


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

    K latent functions: each class has its own natural parameters and sites (w_nk = -2 dE_n/dvar_nk,
    r_nk likewise), and one step size serves all classes (the likelihood couples them in the
    bound).  The per-class sites leave out that coupling, so convergence can be slower.  Where the
    likelihood sees only the differences of the f_k (``shift_invariant``: softmax, robust-max) and
    the classes share one kernel (f_k = A^T m_k), the data term is unchanged by m_k -> m_k + delta
    for every k, and the KL's sum_k |m_k|^2 / 2 is least at delta = -mean_k m_k.  The sites barely
    see that direction (only the prior acts along it: the class mean of bench_compile.py's
    robust-max q moved by 0.013 % of its distance a step), so every q the steps reach is centred
    so, the exact maximum along it; the map iterated is then x -> T(centred x).  Its fixed points are
    T's: at a centred q whose sites would shift every m_k by one c (S_k unchanged), the bound's
    gradient in m_k is S_k^-1 c, whose sum over k, its gradient along the class mean, is 0 there,
    so c = 0.  Polished to tol 1e-12 from the prior on a 40-point, 3-class problem: softmax 17
    steps (24 plain; 36 and 88 uncentred), logistic-softmax 14 (28; not shift-invariant),
    robust-max 62 and 78 (plain: :func:`gpdsl.methods.common.extrapolates`; 325 and 2,724
    uncentred), each to the uncentred steps' bound within 1e-12 nats.

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
    K = _latent_count(likelihood, offset)
    if q is None:
        q = values if all(k in values for k in _Q_KEYS) else initial_values(M, K)
    m, R = _checked_q(q, M, K)
    chunk = chunk_size or default_chunk_size(n, M * K)
    # Each block's K_uf, A = L^-1 K_uf and k_nn - |a_n|^2 do not depend on q: they are kept between
    # the steps' passes when they fit the budget (twonorm, N = 6,660, M = 128: ten passes an
    # evaluation, each of which formed them again), and handed back as the blocks' carried items.
    cache = 2 * n * M * getattr(kernel, "n_outputs", 1) * 8 <= cache_bytes()
    kept = None

    def natural_pass(factors, m, R):
        nonlocal kept
        (ell, AWA, Ar), _, *blocks = _data_pass(kernel, likelihood, X, y, Z, factors, m, R, chunk, ("natural",), offset,
                                                keep=cache, carried=kept)
        kept = blocks[0] if cache else None
        elbo = float(ell - _kl(m, R))
        if not np.isfinite(elbo):
            raise FloatingPointError("SVGP: non-finite bound")
        return elbo, prior_plus(AWA), Ar

    # q's class mean, which a shift-invariant likelihood's data term does not see, at the KL's optimum 0 (see above).
    centre = centres(kernel, likelihood, K)
    m = centred(m)[0] if centre else m
    rungs = JITTER_LADDER if jitter is None else (float(jitter),)
    for attempt, rung in enumerate(rungs):
        try:
            kept = None                       # blocks of a failed rung's L are not this one's
            factors = _factors(kernel, Z, rung)
            elbo, Lam_hat, eta_hat = natural_pass(factors, m, R)
            break
        except (np.linalg.LinAlgError, FloatingPointError):
            if attempt == len(rungs) - 1:
                raise

    def at(natural):
        m_c, R_c = from_natural(*natural)
        if centre:
            m_c = centred(m_c)[0]
        elbo_c, Lam_hat_c, eta_hat_c = natural_pass(factors, m_c, R_c)
        return elbo_c, (Lam_hat_c, eta_hat_c), (m_c, R_c)

    # One step size for all classes: the bound couples them through the likelihood.
    moved, n_steps, converged = damped_natural_steps(natural(m, R), (Lam_hat, eta_hat), elbo, at, tol, max_iter,
                                                     polish, extrapolate=extrapolates(likelihood))
    return _q_dict(*(moved if moved is not None else (m, R))), n_steps, converged


_Q_KEYS = ("variational.q_mu", "variational.q_sqrt")


def minibatch_step(kernel, likelihood, X, y, Z, q, *, scale, rho, jitter=None, one_pass=False, offset=None):
    """One stochastic step on a minibatch X (B, D), y (B,) of N = ``scale`` B rows (Hensman et
    al. 2015 section 3; Salimbeni, Eleftheriadis & Hensman 2018): the natural-gradient step of
    size ``rho`` on q from the batch's sites (see :func:`optimise_q`), their part of the natural
    parameters times ``scale`` (an unbiased estimate of the full batch's), halved while the new
    S^-1 fails to factorise, q's class mean centred before and after it where
    :func:`~gpdsl.methods.svgp_classes.centres` says (as :func:`optimise_q`'s); and the batch's
    estimate of the bound, scale E_batch - KL, with its gradient in the kernel and likelihood
    hyperparameters and Z, which is ``scale`` times the batch's (KL[q(v) || p(v)] does not
    depend on them in the whitened basis).

    The sites' precisions w = -2 dE/dvar are clipped at 0 here (unlike :func:`optimise_q`'s):
    where the likelihood is not log-concave (robust-max, Student-t) a batch's negative
    precisions, scaled by N / B, made the steps chaotic.  On a 2,000-row, 10-class robust-max
    problem (M = 20, B = 64, rho = 0.2) the unclipped steps' batch bound jumped between -1e4 and
    -3e6 over 40 steps; clipped, it rose steadily from -8e3 to about -5e3.  For a log-concave
    likelihood w >= 0 already and nothing changes.

    ``one_pass=False``: the estimate and gradient are taken at the new q (a second pass over
    the batch), so that with the whole batch, ``scale`` 1 and ``rho`` 1 on conjugate sites q is
    at its optimum where the gradient is taken.  ``one_pass=True``: both come from one pass at
    the q the step starts from (a simultaneous update of q and the hyperparameters, at about
    half the cost).

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
    state = CarriedQ.of(q, Z.shape[0], _latent_count(likelihood, offset))
    state, elbo, grads, dZ, jit = minibatch_update(kernel, likelihood, X, y, Z, state, scale=scale, rho=rho,
                                                   jitter=jitter, one_pass=one_pass, offset=offset)
    return state.as_dict(), elbo, grads, dZ, jit


class CarriedQ(NamedTuple):
    """q(v) as a run of minibatch steps carries it from step to step: the stacked m (M, K) and
    R (K, M, M) (see :func:`_checked_q`) and, once a step has formed them, q's natural parameters
    (S_k^-1 (K, M, M), S_k^-1 m_k (K, M)), so that the next step need not form them from R again
    (K inverses of M x M factors a step: 3.8 of about 30 ms at K = 26, M = 100, B = 256).

    Parameters
    ----------
    m : ndarray, shape (M, K)
    R : ndarray, shape (K, M, M)
    natural : tuple of ndarray, or None
        (S^-1, S^-1 m) of (m, R), or None (formed when needed).
    scratch : gpdsl.methods.svgp_classes.Scratch or None
        The run's reused batch-pass arrays, handed on from step to step (None: a step takes a new one).
    """

    m: np.ndarray
    R: np.ndarray
    natural: tuple | None = None
    scratch: Scratch | None = None

    @classmethod
    def of(cls, q, M, K):
        """The carried form of a q dict (``"variational.q_mu"``, ``"variational.q_sqrt"``), checked.

        Parameters
        ----------
        q : dict of str to ndarray
        M : int
            Inducing points.
        K : int
            Latent functions.

        Returns
        -------
        CarriedQ
        """
        return cls(*_checked_q(q, M, K))

    def as_dict(self):
        """``{"variational.q_mu", "variational.q_sqrt"}`` in the parameters' shapes.

        Returns
        -------
        dict of str to ndarray
        """
        return _q_dict(self.m, self.R)


def minibatch_update(kernel, likelihood, X, y, Z, state, *, scale, rho, jitter=None, one_pass=False, offset=None):
    """:func:`minibatch_step` on a :class:`CarriedQ`: what a run of steps calls, q kept in the
    carried form between steps.  Arguments and results as :func:`minibatch_step`'s, with
    ``state`` (a CarriedQ) in place of the q dicts.

    Parameters
    ----------
    kernel, likelihood, X, y, Z, scale, rho, jitter, one_pass, offset
        As for :func:`minibatch_step`.
    state : CarriedQ
        The current q.

    Returns
    -------
    state : CarriedQ
        The new q, with its natural parameters.
    elbo : float
    grads : dict of str to ndarray
    dZ : ndarray, shape (M, D)
    jitter : float
    """
    m, R, carried = state.m, state.R, state.natural
    scratch = state.scratch if state.scratch is not None else Scratch()
    # Before the step: a no-op but on a run's first q.  Exact for a batch's estimate too (each row's term ignores it).
    centre = centres(kernel, likelihood, m.shape[1])
    if centre:
        m, carried = centred(m, carried)
    if one_pass:
        factors, ((ell, AWA, Ar, Ag, Phi, grads, dZ), (_, g, _)) = _batch_pass(
            kernel, likelihood, X, y, Z, m, R, jitter, ("natural", "grad"), offset, clip=True, scratch=scratch)
        elbo = scale * float(ell) - _kl(m, R)
        grads, dZ = _gradients(kernel, Z, factors, m, R, Ag, Phi, grads, dZ,
                               d_offset=None if offset is None else g[:, 0])
    else:
        # The second pass, at the new q, reuses this one's K_uf and A (same Z and hyperparameters).
        factors, ((_, AWA, Ar), _, kept) = _batch_pass(kernel, likelihood, X, y, Z, m, R, jitter, ("natural",),
                                                       offset, keep=True, clip=True, scratch=scratch)
    Lam_hat = prior_plus(AWA, scale, out=AWA)              # this step's own array (the scratch's)
    Lam, eta = carried if carried is not None else natural(m, R)
    while True:
        try:
            moved_Lam = np.multiply(Lam, 1.0 - rho)             # carried on: a new array
            moved_Lam += np.multiply(Lam_hat, rho, out=scratch.array("rho Lam_hat", Lam_hat.shape))
            moved = (moved_Lam, (1.0 - rho) * eta + rho * scale * Ar)
            m, R = from_natural(*moved)
            break
        except np.linalg.LinAlgError:
            rho *= 0.5
            if rho < NATGRAD_MIN_STEP:
                raise FloatingPointError("SVGP: no natural-gradient step keeps S positive definite") from None
    if centre:
        m, moved = centred(m, moved)
    if not one_pass:
        (ell, Ag, Phi, grads, dZ), (_, g, _) = _data_pass(kernel, likelihood, X, y, Z, factors, m, R, X.shape[0],
                                                          ("grad",), offset, carried=kept, scratch=scratch)
        elbo = scale * float(ell) - _kl(m, R)
        grads, dZ = _gradients(kernel, Z, factors, m, R, Ag, Phi, grads, dZ,
                               d_offset=None if offset is None else g[:, 0])
    if not np.isfinite(elbo):
        raise FloatingPointError("SVGP: non-finite bound")
    grads = {k: scale * g_k for k, g_k in grads.items()}
    return CarriedQ(m, R, moved, scratch), elbo, grads, scale * dZ, factors.jitter


def _batch_pass(kernel, likelihood, X, y, Z, m, R, jitter, outputs, offset, **options):
    """K_uu's factors and :func:`_data_pass` over the whole batch X, the jitter ladder climbed where
    K_uu factorises but the batch's Q_nn exceeds K_nn, as the full-batch passes' (:func:`_with_ladder`):
    without it a step at a long length-scale raised that as a numerical failure (issue 45: logit
    Pólya-Gamma, 2,000 rows of X uniform on [-3, 3], M = 100, failed at step 284 with "standardise
    X and y"; NegativeBinomial SVGP at step 129)."""
    rungs = JITTER_LADDER if jitter is None else (float(jitter),)
    for attempt, rung in enumerate(rungs):
        try:
            factors = _factors(kernel, Z, rung)
            return factors, _data_pass(kernel, likelihood, X, y, Z, factors, m, R, X.shape[0], outputs, offset,
                                       **options)
        except (np.linalg.LinAlgError, FloatingPointError):
            if attempt == len(rungs) - 1:
                raise
