"""Conditionally conjugate multi-class classification with the logistic-softmax link
(Galy-Fajou, Wenzel, Donner & Opper, "Multi-Class Gaussian Process Classification Made Conjugate:
Efficient Inference via Data Augmentation", UAI 2019 / AISTATS 2020): the K-class counterpart of
the two-class Pólya-Gamma method (:mod:`gpdsl.methods.polya_gamma`, collapsed, and
:mod:`gpdsl.methods.stochastic_polya_gamma`, stochastic), for ``Categorical(K, "logistic_softmax")``.

Likelihood.  K latent GPs f_k (one shared kernel, shared inducing inputs Z), y_i in 0..K-1,
y_ik = [y_i = k], sigma the logistic function:  p(y_i | f_i) = sigma(f_iy) / sum_j sigma(f_ij).

Augmentation (derived here; three identities):

1. 1/x = int_0^inf exp(-lambda x) dlambda for x > 0, so
   p(y_i | f_i) = int_0^inf sigma(f_iy) prod_j exp(-lambda_i sigma(f_ij)) dlambda_i.
2. sigma(f) = 1 - sigma(-f), so exp(-lambda sigma(f)) = e^-lambda exp(lambda sigma(-f))
   = sum_{n >= 0} Po(n | lambda) sigma(-f)^n.
3. sigma(z)^a sigma(-z)^b = e^{a z} / (1 + e^z)^{a + b} = 2^-(a+b) e^{(a - b) z / 2}
   E_{PG(omega | a + b, 0)}[exp(-omega z^2 / 2)]  (Polson, Scott & Windle 2013).

With a = y_ik, b = n_ik (a + b = 0 is the point mass omega = 0), the augmented joint, whose
integral over lambda_i (Lebesgue: an improper flat prior p(lambda) = 1, our choice) and sums over
n_ik and omega_ik is exactly p(y_i | f_i), is

    p(y_i, lambda_i, n_i, omega_i | f_i) = prod_k Po(n_ik | lambda_i) 2^-(y_ik + n_ik)
        exp((y_ik - n_ik) f_ik / 2 - omega_ik f_ik^2 / 2) PG(omega_ik | y_ik + n_ik, 0):

Gaussian in f given (n, omega).  Mean field q(lambda_i) = Gamma(alpha_i, beta_i),
q(n_ik) = Po(gamma_ik), q(omega_ik | n_ik) = PG(y_ik + n_ik, c_ik), q(u_k) Gaussian, with
q(f_ik) = N(mean_ik, var_ik) its marginals.  With psi_i = E[log lambda_i] = digamma(alpha_i) - log
beta_i, E[omega | n] = (y + n) tanh(c/2) / (2c), KL[PG(b, c) || PG(b, 0)] = b (log cosh(c/2) -
c/4 tanh(c/2)) and the Poisson's E[log n!] cancelling between E[log Po(n | lambda)] and the entropy
of q(n), the bound is  ELBO = sum_ik E_ik + sum_i Lambda_i - sum_k KL[q(u_k) || p(u_k)]  with

    E_ik = kappa_ik mean_ik - theta_ik (mean_ik^2 + var_ik) / 2                                 (A)
           + gamma_ik (psi_i - log gamma_ik + 1 - log 2) - y_ik log 2
           + (y_ik + gamma_ik) (c_ik/4 tanh(c_ik/2) - log cosh(c_ik/2))                         (B)
    Lambda_i = -K alpha_i / beta_i + alpha_i - log beta_i + lgamma(alpha_i) + (1 - alpha_i) digamma(alpha_i)
    theta_ik = E[omega_ik] = (y_ik + gamma_ik) tanh(c_ik/2) / (2 c_ik),  kappa_ik = (y_ik - gamma_ik) / 2.

Closed-form coordinate updates (each the exact maximiser of the ELBO in its block):

    c_ik = sqrt(mean_ik^2 + var_ik)                         (independent of y + gamma > 0)
    gamma_ik = exp(psi_i) exp(-mean_ik / 2) / (2 cosh(c_ik / 2))      (d/dgamma at that c: log 2 from (B))
    alpha_i = 1 + sum_k gamma_ik,  beta_i = K                  (flat prior: q ~ lambda^{sum gamma} e^{-K lambda})

The factor 2 in 2 cosh is the 2^-(y + n) of identity 3.  gamma_i and alpha_i are optimised jointly:
with h_ik = e^{-mean/2} / (2 cosh(c/2)) < sigma(-mean_ik) < 1 the root of alpha = 1 +
exp(digamma(alpha)) sum_k h_ik / K is unique (a contraction), found by Newton's method per row
(:func:`gpdsl._jit.logistic_softmax.ls_local_update`).  At beta = K and alpha = 1 + sum gamma,
Lambda_i + sum_k gamma_ik psi_i = lgamma(alpha_i) - alpha_i log K.  q(u_k)'s optimum at fixed
local variables: (A) is the Gaussian pseudo-regression of class k with weights theta_ik (noise
1/theta_ik) and linear terms kappa_ik (targets kappa/theta), so, as in thesis eq. C.1 for PGPR,

    K_uu = L L^T,  A = L^-1 K_uf,  B_k = I + A Theta_k A^T = L_Bk L_Bk^T,  g_k = L_Bk^-1 A kappa_k,
    L* = sum_k [-1/2 log|B_k| + 1/2 g_k^T g_k - 1/2 sum_i theta_ik (K_ii - Q_ii)] + sum_ik (B) + sum_i Lambda_i,

the collapsed bound (Titsias' VFE bound of each pseudo-regression plus 1/2 log(2 pi / theta) +
kappa^2 / (2 theta) per point, which cancel its Gaussian constants: no 1/theta is formed).
q(u_k) = N(L B_k^-1 A kappa_k, L B_k^-1 L^T), and the marginals mean_ik = a_i^T B_k^-1 A kappa_k,
var_ik = K_ii - Q_ii + |L_Bk^-1 a_i|^2.  At the optimal c and (gamma, alpha) the per-row bound is

    l_i = lgamma(alpha_i) - log K - (alpha_i - 1)(digamma(alpha_i) - 1) + mean_iy / 2 - log(2 cosh(c_iy / 2)),

with derivatives (envelope theorem) dl_i/dmean_ik = kappa_ik - theta_ik mean_ik, dl_i/dvar_ik =
-theta_ik / 2: conjugate sites (precision theta, natural location kappa) for the stochastic method.

Collapsed (:func:`evaluate`): each evaluation runs the coordinate ascent c, (gamma, alpha) <- optimum
at q*(u) of the current locals, to convergence (largest change of a c_ik or gamma_ik below
``spec.tol``), optionally with Anderson acceleration on (c, log gamma) kept only where it raises
the bound, so the bound never decreases; gradients in the kernel and Z are those of the K
pseudo-regressions at fixed locals, valid at the fixed point by the envelope theorem.
Stochastic (:func:`minibatch_step`, Hoffman et al. 2013 SVI as for two classes): a batch's
locals at their closed-form optimum, a natural-gradient step on every q(u_k) in the whitened
basis, and the batch's bound and hyperparameter gradient at fixed q.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from .._jit import announce_compilation
from .._jit.logistic_softmax import ls_expectations, ls_local_terms, ls_local_update, ls_variances
from ..chunks import add_partial, default_chunk_size, map_rows
from ..linalg import JITTER_LADDER, cholesky, inverse_lower, jitter_adjoint, solve_lower
from . import collapsed
from .common import NATGRAD_MIN_STEP, Evaluation, LocalStateFormat, PredictiveState
from .svgp import _from_natural, pack_lower, unpack_lower

_CACHE_BYTES = 2 ** 28      # 256 MB of cached L^-1 K_uf, as for the two-class method
_BLOCK_DOUBLES = 2 ** 22    # rows per block: the (K, M, rows) stack of L_Bk^-1 A of 32 MB
_ANDERSON_MEMORY = 10
_COMPILE_SECONDS = 3
_LOG_FLOOR = -700.0         # log gamma of an Anderson proposal is kept above this (gamma > 0)


@dataclass
class LogisticSoftmaxState:
    """The local variational parameters and the inner loop's record.

    ``c``, ``gamma`` (N, K), ``alpha``, ``beta`` (N,) are where the bound, gradients and
    posterior were evaluated; ``c_next``, ``gamma_next``, ``alpha_next`` the one further update
    (the next warm start); ``sweeps`` the O(N K M^2) passes; ``bound_history`` the bound at each
    accepted point (non-decreasing).

    Parameters
    ----------
    c, gamma : ndarray, shape (N, K)
        PG parameters c_ik and Poisson means gamma_ik.
    alpha, beta : ndarray, shape (N,)
        Gamma shape and rate of q(lambda_i).
    c_next, gamma_next : ndarray, shape (N, K)
        The next update.
    alpha_next : ndarray, shape (N,)
        The next update.
    sweeps : int, default 0
    converged : bool, default False
    bound_history : list of float, optional
    """

    c: np.ndarray
    gamma: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    c_next: np.ndarray
    gamma_next: np.ndarray
    alpha_next: np.ndarray
    sweeps: int = 0
    converged: bool = False
    bound_history: list = field(default_factory=list)


def _export_state(local, total_updates):
    obs_class = ("obs", "class")
    return ({"c": (obs_class, local.c), "gamma": (obs_class, local.gamma), "alpha": ("obs", local.alpha),
             "beta": ("obs", local.beta), "c_next": (obs_class, local.c_next),
             "gamma_next": (obs_class, local.gamma_next), "alpha_next": ("obs", local.alpha_next),
             "bound_history": ("c_update", np.asarray(local.bound_history))},
            {"ls_updates_final": local.sweeps, "ls_converged": int(local.converged),
             "ls_total_updates": total_updates})


def _load_state(ds):
    get = {name: ds[name].values for name in ("c", "gamma", "alpha", "beta", "c_next", "gamma_next", "alpha_next")}
    local = LogisticSoftmaxState(**get, sweeps=int(ds.attrs["ls_updates_final"]),
                                 converged=bool(ds.attrs["ls_converged"]),
                                 bound_history=list(ds["bound_history"].values))
    return local, int(ds.attrs["ls_total_updates"])


_OC = (("obs", "class"), "float")
STATE_FORMAT = LocalStateFormat(
    "logistic_softmax",
    {"c": _OC, "gamma": _OC, "alpha": (("obs",), "float"), "beta": (("obs",), "float"), "c_next": _OC,
     "gamma_next": _OC, "alpha_next": (("obs",), "float"), "bound_history": (("c_update",), "float")},
    {"local_state": "str", "ls_updates_final": "count", "ls_converged": "flag", "ls_total_updates": "count"},
    _export_state, _load_state)


def _codes(y, K):
    codes = np.asarray(y, dtype=float)
    if codes.ndim != 1 or not np.all(np.isin(codes, np.arange(K))):
        raise ValueError(f"logistic-softmax: targets must be class codes 0..{K - 1}, shape (N,)")
    return codes


def evaluate(kernel, likelihood, X, y, Z, *, spec, warm=None, need_grad=True, need_state=False, offset=None):
    """Collapsed logistic-softmax bound L* (module docstring), its gradients in the kernel
    hyperparameters (summed over the K classes) and Z, and, if asked, the posterior.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The kernel shared by the K latent GPs.
    likelihood : gpdsl.likelihoods.Categorical
        K classes, link ``"logistic_softmax"`` (no hyperparameters).
    X : ndarray or Dask array, shape (N, D)
    y : ndarray, shape (N,)
        Class codes 0..K-1 (floats).
    Z : ndarray, shape (M, D)
        Inducing inputs, shared by the classes.
    spec : gpdsl.inference.PolyaGamma
        Read for ``tol`` (largest change of a c_ik or gamma_ik), ``max_iter`` (passes per
        evaluation, counted as for two classes), ``acceleration``, ``jitter``, ``chunk_size``.
    warm : LogisticSoftmaxState, optional
        Start from its ``*_next``; None starts at the local optimum under q(u) = p(u).
    need_grad : bool, default True
    need_state : bool, default False
        Build the :class:`PredictiveState` (weights (M, K), correction (K, M, M), q_mean (M, K),
        q_cov (K, M, M)).
    offset : None
        Offsets are not supported for K > 1.

    Returns
    -------
    gpdsl.methods.common.Evaluation
        ``log_evidence`` L* at the converged locals, ``grads`` ("kernel.*"), ``dZ`` (M, D),
        ``warm`` the :class:`LogisticSoftmaxState`, ``pseudo_data`` (theta (N, K), kappa (N, K)).

    Raises
    ------
    ValueError
        An offset, or targets that are not codes 0..K-1.
    numpy.linalg.LinAlgError, FloatingPointError
        If the last jitter rung fails.
    """
    if offset is not None:
        raise ValueError("logistic-softmax: offsets (mean functions) are not supported for K > 1 classes")
    K = int(likelihood.n_latent)
    codes = _codes(y, K)
    rungs = JITTER_LADDER if spec.jitter is None else (float(spec.jitter),)
    progress = {"warm": warm, "passes": 0}
    for attempt, rung in enumerate(rungs):
        try:
            ev = _evaluate_at(kernel, K, X, codes, Z, spec, rung, progress, need_grad, need_state)
            ev.warm.sweeps = progress["passes"]
            return ev
        except (np.linalg.LinAlgError, FloatingPointError):
            if attempt == len(rungs) - 1:
                raise


def _start(kernel, K, X, codes, warm):
    n = X.shape[0]
    if warm is not None and np.shape(warm.c_next) == (n, K):
        return np.array(warm.c_next), np.array(warm.gamma_next), np.array(warm.alpha_next)
    # The local optimum under q(u) = p(u): marginals N(0, K_ii).
    kff = np.asarray(kernel.diag(X), dtype=float)
    return ls_local_update(codes, np.zeros((n, K)), np.repeat(kff[:, None], K, axis=1))


def _evaluate_at(kernel, K, X, codes, Z, spec, jitter, progress, need_grad, need_state):
    """One evaluation at one jitter rung (as :func:`gpdsl.methods.polya_gamma._evaluate_at`)."""
    n, m = X.shape[0], Z.shape[0]
    chunk = spec.chunk_size or max(64, min(default_chunk_size(n, m), _BLOCK_DOUBLES // (K * m)))
    L, jit = cholesky(kernel.gram(Z, Z), jitter, what="K_uu")
    cache = n * m * 8 <= _CACHE_BYTES
    kept = None
    beta = np.full(n, float(K))

    def sweep(point, factor=None, accumulate=True):
        nonlocal kept
        fn = partial(_sweep_block, kernel, Z, L, factor, accumulate, cache)
        total, rows, blocks = map_rows(fn, (X, codes) + tuple(point) + (beta,), chunk, carried=kept, keep=True)
        kept = blocks if cache else None
        return total, rows

    point = _start(kernel, K, X, codes, progress["warm"])
    announce_compilation("logistic-softmax", _COMPILE_SECONDS, ls_local_terms,
                         (codes[:1], point[0][:1], point[1][:1], point[2][:1], beta[:1], beta[:1]))
    sums, _ = sweep(point)
    factor, bound = _bound(sums)
    history, converged, sweeps = [bound], False, 1
    points, targets = [], []
    while True:
        extrapolate = spec.acceleration and len(points) > 0
        sums_target, rows = sweep(point, factor, accumulate=not extrapolate)
        target = rows[:3]
        sweeps += 1
        change = max(np.max(np.abs(target[0] - point[0])), np.max(np.abs(target[1] - point[1])))
        if change < spec.tol:
            converged = True
            break
        if sweeps >= spec.max_iter:
            break
        points = points[-_ANDERSON_MEMORY:] + [_flat(point)]
        targets = targets[-_ANDERSON_MEMORY:] + [_flat(target)]
        if extrapolate:
            proposal = _unflat(_anderson(points, targets), n, K)
            sums_proposal, _ = sweep(proposal)
            sweeps += 1
            factor_proposal, bound_proposal = _bound(sums_proposal)
            if bound_proposal >= bound:
                point, sums, factor, bound = proposal, sums_proposal, factor_proposal, bound_proposal
                history.append(bound)
                continue
            points, targets = points[-1:], targets[-1:]
            sums_target, _ = sweep(target)
            sweeps += 1
        point, sums = target, sums_target
        factor, bound = _bound(sums)
        history.append(bound)

    c, gamma, alpha = point
    progress["warm"] = LogisticSoftmaxState(c, gamma, alpha, beta, *target)
    progress["passes"] += sweeps
    theta, kappa, _ = ls_local_terms(codes, c, gamma, alpha, beta, np.zeros(n))
    grads, dZ, state = {}, None, None
    LBi, weights = factor
    B_inv = np.matmul(np.transpose(LBi, (0, 2, 1)), LBi)
    if need_grad:
        grads, dZ = _collapsed_gradients(kernel, X, codes, Z, L, jit, point, beta, weights, B_inv, sums[0], kept, chunk)
    if need_state:
        L_LBiT = np.matmul(L, np.transpose(LBi, (0, 2, 1)))
        state = PredictiveState(Z=Z, weights=weights, correction=np.eye(m) - B_inv, q_mean=L @ weights,
                                q_cov=np.matmul(L_LBiT, np.transpose(L_LBiT, (0, 2, 1))), chol=L)
    local = LogisticSoftmaxState(c, gamma, alpha, beta, *target, sweeps=sweeps, converged=converged,
                                 bound_history=history)
    return Evaluation(log_evidence=history[-1], grads=grads, dZ=dZ, jitter=jit, state=state, warm=local,
                      pseudo_data=(theta, kappa))


def _flat(point):
    """(c, gamma, alpha) -> the vector (c, log gamma) that Anderson extrapolates."""
    return np.concatenate([point[0].ravel(), np.log(np.maximum(point[1], 1e-300)).ravel()])


def _unflat(x, n, K):
    c = np.maximum(x[:n * K], 0.0).reshape(n, K)
    gamma = np.exp(np.maximum(x[n * K:], _LOG_FLOOR)).reshape(n, K)
    return c, gamma, 1.0 + gamma.sum(axis=1)


def _anderson(points, targets):
    """Anderson's extrapolation (Walker & Ni 2011, type II) of the iterates and their updates.  The
    least-squares fit of the last residual by the residual differences is solved by its normal
    equations (at most 10 x 10; the vectors have 2 N K entries, where an SVD-based lstsq on them
    took a tenth of an evaluation): a poorly conditioned fit only gives a proposal that the bound
    test rejects."""
    G = np.array(targets)
    R = G - np.array(points)
    dR = np.diff(R, axis=0)
    coef = np.linalg.lstsq(dR @ dR.T, dR @ R[-1], rcond=None)[0]
    return G[-1] - np.diff(G, axis=0).T @ coef


def _sweep_block(kernel, Z, L, factor, accumulate, cache, Xb, codes_b, cb, gb, ab, bb, hit=None):
    """One block of a pass: without ``factor`` the sums (P_k = A Theta_k A^T (K, M, M),
    A kappa (M, K), the local terms) at the block's locals; with ``factor = (L_Bk^-1 (K, M, M),
    weights (M, K))`` of the current point also the rows' update (c, gamma, alpha, mean), and, if
    ``accumulate``, the sums at that update.  Returns (sums, rows, kept)."""
    if hit is None:
        _, A, kff, residual = collapsed.whitened_rows(kernel, Xb, Z, L)
        collapsed.check_rows_nystrom(residual, kff)
    else:
        A, residual = hit
    kept = (A, residual) if cache else None
    rows = ()
    if factor is not None:
        # L_Bk^-1 A by products with the explicit inverses (B_k >= I, so |L_Bk^-1| <= 1; as
        # for two classes, the matmul runs several times faster than the triangular solve).
        mean = A.T @ factor[1]
        var = ls_variances(np.matmul(factor[0], A), residual)
        cb, gb, ab = ls_local_update(codes_b, mean, var)
        rows = (cb, gb, ab, mean)
        if not accumulate:
            return (), rows, kept
    theta, kappa, local = ls_local_terms(codes_b, cb, gb, ab, bb, residual)
    K, m = theta.shape[1], A.shape[0]
    P = np.empty((K, m, m))
    for k in range(K):
        As = A * np.sqrt(theta[:, k])
        P[k] = As @ As.T
    return (P, A @ kappa, local), rows, kept


def _bound(sums):
    """L* from the sums of a pass; returns ((L_Bk^-1 (K, M, M), weights (M, K)), L*), weights_k =
    B_k^-1 A kappa_k (the whitened predictive weights)."""
    P, r, local = sums
    K, m = P.shape[0], P.shape[1]
    LBi, weights = np.empty_like(P), np.empty((m, K))
    bound = local
    for k in range(K):
        LB, _ = cholesky(np.eye(m) + 0.5 * (P[k] + P[k].T), 0.0, what="B = I + A Theta A^T")
        g = solve_lower(LB, r[:, k])
        bound += -np.sum(np.log(np.diag(LB))) + 0.5 * g @ g
        LBi[k] = inverse_lower(LB)
        weights[:, k] = LBi[k].T @ g
    if not bound <= 0.0:
        raise FloatingPointError(f"logistic-softmax bound {bound:.3g} > 0 is lost to rounding")
    return (LBi, weights), float(bound)


def _collapsed_gradients(kernel, X, codes, Z, L, jit, point, beta, weights, B_inv, P, kept, chunk):
    """d L* / d (kernel, Z) at fixed locals: the VFE gradients of the K pseudo-regressions
    (:func:`gpdsl.methods.collapsed._gradient_pass`, trace case) summed over the classes before
    the kernel's VJPs.  With C_k = I - B_k^-1, w_k = weights[:, k], e'_ik = kappa_ik - theta_ik mean_ik:
        G_uf = L^-T [sum_k C_k A Theta_k + w e'^T],  dL*/dK_ii = -1/2 sum_k theta_ik,
        G_uu = L^-T [1/2 sum_k (C_k - w_k w_k^T - P_k)] L^-1."""
    K, m = B_inv.shape[0], L.shape[0]
    Li = inverse_lower(L)

    def pass_fn(Xb, codes_b, cb, gb, ab, bb, hit=None):
        Kuf = kernel.gram(Z, Xb)
        if hit is None:
            A = solve_lower(L, Kuf)
            residual = kernel.diag(Xb) - np.einsum("ij,ij->j", A, A)
        else:
            A, residual = hit
        theta, kappa, _ = ls_local_terms(codes_b, cb, gb, ab, bb, residual)
        mean = A.T @ weights
        G = A * theta.sum(axis=1)
        for k in range(K):
            G -= B_inv[k] @ (A * theta[:, k])
        G += weights @ (kappa - theta * mean).T
        kgrads, dZ = kernel.vjp(Z, Xb, Li.T @ G, K=Kuf)
        kgrads = add_partial(kgrads, kernel.diag_vjp(Xb, -0.5 * theta.sum(axis=1)))
        return (kgrads, dZ), ()

    (kgrads, dZ), _ = map_rows(pass_fn, (X, codes) + tuple(point) + (beta,), chunk, carried=kept)
    G_white = 0.5 * (K * np.eye(m) - B_inv.sum(axis=0) - weights @ weights.T - P.sum(axis=0))
    G_uu = Li.T @ G_white @ Li
    G_uu = jitter_adjoint(0.5 * (G_uu + G_uu.T), jit)
    uu_grads, dZ_uu = kernel.vjp(Z, Z, G_uu)
    return add_partial(kgrads, uu_grads), dZ + 2.0 * dZ_uu


# -- stochastic variational (Hoffman, Blei, Wang & Paisley 2013 SVI; the K-class counterpart of
# gd.inference.PolyaGamma(minibatch=B)) -------------------------------------------------------------
# q(v_k) = N(m_k, R_k R_k^T) in the whitened basis u_k = L v_k, as SVGP's: "variational.q_mu" (M, K),
# "variational.q_sqrt" (K, M (M + 1) / 2) (row k the packed lower triangle of R_k).  The locals of a
# row are always at their closed-form optimum given q (ls_expectations), so the bound is
# sum_i l_i(mean_i, var_i) - sum_k KL[q(v_k) || N(0, I)] and a natural step of size 1 on q(v_k)
# from all rows is the collapsed method's optimal q(u_k) at those locals.

_Q_KEYS = ("variational.q_mu", "variational.q_sqrt")


class LogisticSoftmaxExpectations:
    """The closed-form per-row bound of the augmentation at its local optimum, in the multi-latent
    likelihood interface (``variational_expectations(y (n,), mean (n, K), var (n, K))``): what turns a
    K-class SVGP's passes into this method's, as
    :class:`gpdsl.methods.stochastic_polya_gamma.PolyaGammaExpectations` does for two classes.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Categorical
        The model's logistic-softmax likelihood.
    """

    sign_symmetric = False

    def __init__(self, likelihood):
        self.likelihood = likelihood

    def __getattr__(self, name):
        return getattr(self.likelihood, name)

    def variational_expectations(self, y, mean, var):
        """(l (n,), dl/dmean (n, K), dl/dvar (n, K), {}): module docstring, l_i.

        Parameters
        ----------
        y : ndarray, shape (n,)
        mean, var : ndarray, shape (n, K)
        """
        K = mean.shape[1]
        bound, d_mean, d_var = ls_expectations(_codes(y, K), np.ascontiguousarray(mean, dtype=float),
                                               np.ascontiguousarray(var, dtype=float))
        return bound, d_mean, d_var, {}


def initial_values(M, K):
    """q(v_k) = N(0, I) for every class: ``q_mu`` zeros (M, K), ``q_sqrt`` K packed identities.

    Parameters
    ----------
    M, K : int

    Returns
    -------
    dict of str to ndarray
    """
    return {"variational.q_mu": np.zeros((M, K)),
            "variational.q_sqrt": np.tile(pack_lower(np.eye(M)), (K, 1))}


def _checked_q(q, M, K):
    m = np.asarray(q["variational.q_mu"], dtype=float)
    packed = np.asarray(q["variational.q_sqrt"], dtype=float)
    if m.shape != (M, K) or packed.shape != (K, M * (M + 1) // 2):
        raise ValueError(f"logistic-softmax: q_mu must have shape ({M}, {K}) and q_sqrt ({K}, {M * (M + 1) // 2}), "
                         f"got {m.shape} and {packed.shape}")
    R = np.stack([unpack_lower(row, M) for row in packed])
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(R)) and np.all(np.diagonal(R, axis1=1, axis2=2) != 0.0)):
        raise FloatingPointError("logistic-softmax: non-finite q(v) or a zero on the diagonal of q_sqrt")
    return m, R


def _kl(m, R):
    """sum_k KL[N(m_k, R_k R_k^T) || N(0, I)]."""
    diag = np.abs(np.diagonal(R, axis1=1, axis2=2))
    return float(0.5 * (np.sum(R * R) + np.sum(m * m) - m.size) - np.sum(np.log(diag)))


def _data_pass(kernel, X, codes, Z, L, m, R, chunk, need_grad):
    """sum_i l_i and the partials of its gradient, as :func:`gpdsl.methods.svgp._data_pass` per
    class: with g = dl/dmean, d = dl/dvar (n, K), P_k = A diag(d_k) A^T, S_k = R_k R_k^T,
    G_uf = L^-T [m g^T - 2 sum_k (I - S_k) A diag(d_k)] and dl/dK_ii = sum_k d_ik.
    Returns ((ell, A g (M, K), P (K, M, M)[, kgrads, dZ_uf]), (mean, g, d))."""
    K = m.shape[1]
    S = np.matmul(R, np.transpose(R, (0, 2, 1)))
    RT = np.ascontiguousarray(np.transpose(R, (0, 2, 1)))
    Li = inverse_lower(L) if need_grad else None

    def chunk_pass(Xb, codes_b):
        Kuf, A, kff, residual = collapsed.whitened_rows(kernel, Xb, Z, L)
        collapsed.check_rows_nystrom(residual, kff)
        mean = A.T @ m
        var = ls_variances(np.matmul(RT, A), residual)
        ve, g, d = ls_expectations(codes_b, mean, var)
        Ad = [A * d[:, k] for k in range(K)]
        P = np.stack([Ad[k] @ A.T for k in range(K)])
        out = (float(np.sum(ve)), A @ g, P)
        if need_grad:
            G = m @ g.T - 2.0 * A * d.sum(axis=1)
            for k in range(K):
                G += 2.0 * (S[k] @ Ad[k])
            kgrads, dZ = kernel.vjp(Z, Xb, Li.T @ G, K=Kuf)
            out += (add_partial(kgrads, kernel.diag_vjp(Xb, d.sum(axis=1))), dZ)
        return out, (mean, g, d)

    return map_rows(chunk_pass, (X, codes), chunk, width=0)


def _q_gradients(kernel, Z, L, jit, m, R, Ag, P, kgrads, dZ):
    """The K_uu part (svgp._gradients, summed over classes): Phi = tril(sum_k 2 (I - S_k) P_k -
    m_k (A g_k)^T) with its diagonal halved, G_uu = sym(L^-T Phi L^-1)."""
    M = L.shape[0]
    S = np.matmul(R, np.transpose(R, (0, 2, 1)))
    Phi = 2.0 * (P.sum(axis=0) - np.matmul(S, P).sum(axis=0)) - m @ Ag.T
    Phi = np.tril(Phi)
    Phi[np.diag_indices(M)] *= 0.5
    Li = inverse_lower(L)
    G_uu = Li.T @ Phi @ Li
    uu_grads, dZ_uu = kernel.vjp(Z, Z, jitter_adjoint(0.5 * (G_uu + G_uu.T), jit))
    return add_partial(kgrads, uu_grads), dZ + 2.0 * dZ_uu


def bound_at_q(kernel, likelihood, X, y, Z, q, *, jitter=None, chunk_size=None, need_grad=True, need_state=False):
    """The uncollapsed bound at q (locals at their optimum), its gradients in the kernel and Z at
    fixed q, and, if asked, the predictive state (weights = q_mu, correction[k] = I - S_k).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
    likelihood : gpdsl.likelihoods.Categorical
    X : ndarray, shape (N, D)
    y : ndarray, shape (N,)
    Z : ndarray, shape (M, D)
    q : dict of str to ndarray
        ``"variational.q_mu"`` (M, K), ``"variational.q_sqrt"`` (K, M (M + 1) / 2).
    jitter : float or None
    chunk_size : int or None
    need_grad, need_state : bool

    Returns
    -------
    gpdsl.methods.common.Evaluation
        ``warm`` is q; ``pseudo_data`` (theta, kappa) (N, K) of the sites.
    """
    K, M = int(likelihood.n_latent), Z.shape[0]
    codes = _codes(y, K)
    m, R = _checked_q(q, M, K)
    chunk = chunk_size or default_chunk_size(X.shape[0], M)
    rungs = JITTER_LADDER if jitter is None else (float(jitter),)
    for attempt, rung in enumerate(rungs):
        try:
            L, jit = cholesky(kernel.gram(Z, Z), rung, what="K_uu")
            (ell, Ag, P, *partials), (mean, g, d) = _data_pass(kernel, X, codes, Z, L, m, R, chunk, need_grad)
            break
        except (np.linalg.LinAlgError, FloatingPointError):
            if attempt == len(rungs) - 1:
                raise
    elbo = ell - _kl(m, R)
    grads, dZ, state = {}, None, None
    if need_grad:
        grads, dZ = _q_gradients(kernel, Z, L, jit, m, R, Ag, P, *partials)
    if need_state:
        LR = np.matmul(L, R)
        state = PredictiveState(Z=Z, weights=m, correction=np.eye(M) - np.matmul(R, np.transpose(R, (0, 2, 1))),
                                q_mean=L @ m, q_cov=np.matmul(LR, np.transpose(LR, (0, 2, 1))), chol=L)
    theta = -2.0 * d
    return Evaluation(log_evidence=float(elbo), grads=grads, dZ=dZ, jitter=jit, state=state, warm=q,
                      pseudo_data=(theta, g + theta * mean))


def _natural_step(m, R, AWA, Ar, scale, rho):
    """Every q(v_k) moved by a natural-gradient step of size rho towards the optimum of the sites
    (precisions in AWA (K, M, M) = A Theta_k A^T, locations Ar (M, K) = A kappa_k), times ``scale``."""
    K, M = R.shape[0], R.shape[1]
    m_new, R_new = np.empty_like(m), np.empty_like(R)
    for k in range(K):
        Ri = inverse_lower(R[k])
        Lam = Ri.T @ Ri
        Lam_hat = scale * 0.5 * (AWA[k] + AWA[k].T)
        Lam_hat[np.diag_indices(M)] += 1.0
        step = rho
        while True:
            try:
                m_new[:, k], R_new[k] = _from_natural((1.0 - step) * Lam + step * Lam_hat,
                                                      (1.0 - step) * (Lam @ m[:, k]) + step * scale * Ar[:, k])
                break
            except np.linalg.LinAlgError:
                step *= 0.5
                if step < NATGRAD_MIN_STEP:
                    raise FloatingPointError("logistic-softmax: no natural step keeps S_k positive definite") from None
    return m_new, R_new


def _pack(m, R):
    return {"variational.q_mu": m, "variational.q_sqrt": np.stack([pack_lower(Rk) for Rk in R])}


def minibatch_step(kernel, likelihood, X, y, Z, q, *, scale, rho, jitter=None, one_pass=True, offset=None):
    """One SVI step on a batch X (B, D), y (B,) of N = ``scale`` B rows, as
    :func:`gpdsl.methods.svgp.minibatch_step` (same signature and return): the batch's locals at
    their closed-form optimum given q (:func:`gpdsl._jit.logistic_softmax.ls_local_update`), a
    natural-gradient step of size ``rho`` on every q(v_k) from their conjugate sites (theta_ik,
    kappa_ik) times ``scale`` (step 1 with the whole batch: the collapsed optimum q*(u_k) at those
    locals), and the batch's bound estimate ``scale * sum_batch l_i - KL`` with its gradient in
    the kernel hyperparameters and Z at the starting q (``one_pass=True``) or at the new q (False).
    ``likelihood``: the Categorical, or :class:`LogisticSoftmaxExpectations` around it.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
    likelihood : gpdsl.likelihoods.Categorical
    X : ndarray, shape (B, D)
    y : ndarray, shape (B,)
    Z : ndarray, shape (M, D)
    q : dict of str to ndarray
    scale : float
        N / B.
    rho : float
        The natural step.
    jitter : float or None
    one_pass : bool, default True
    offset : None
        Not supported for K > 1.

    Returns
    -------
    q : dict of str to ndarray
    elbo : float
    grads : dict of str to ndarray
    dZ : ndarray, shape (M, D)
    jitter : float
    """
    if offset is not None:
        raise ValueError("logistic-softmax: offsets (mean functions) are not supported for K > 1 classes")
    K, M = int(likelihood.n_latent), Z.shape[0]
    codes = _codes(y, K)
    m, R = _checked_q(q, M, K)
    L, jit = cholesky(kernel.gram(Z, Z), jitter, what="K_uu")
    (ell, Ag, P, *partials), _ = _data_pass(kernel, X, codes, Z, L, m, R, X.shape[0], one_pass)
    if one_pass:
        elbo = scale * ell - _kl(m, R)
        grads, dZ = _q_gradients(kernel, Z, L, jit, m, R, Ag, P, *partials)
    # Sites: A Theta_k A^T = -2 P_k, A kappa_k = A g_k - 2 P_k m_k.
    m_new, R_new = _natural_step(m, R, -2.0 * P, Ag - 2.0 * np.einsum("kij,jk->ik", P, m), scale, rho)
    if not one_pass:
        (ell, Ag, P, *partials), _ = _data_pass(kernel, X, codes, Z, L, m_new, R_new, X.shape[0], True)
        elbo = scale * ell - _kl(m_new, R_new)
        grads, dZ = _q_gradients(kernel, Z, L, jit, m_new, R_new, Ag, P, *partials)
    if not np.isfinite(elbo):
        raise FloatingPointError("logistic-softmax: non-finite bound")
    return _pack(m_new, R_new), float(elbo), {k: scale * g for k, g in grads.items()}, scale * dZ, jit


def optimise_q(kernel, likelihood, X, y, Z, q=None, *, jitter=None, chunk_size=None, tol=1e-8, max_iter=100):
    """q moved to its optimum at fixed hyperparameters and Z by full-batch natural steps of size 1:
    each is the exact coordinate maximiser of every q(v_k) at the optimal locals of the current q
    (CAVI), so the bound never decreases.  Stops once a step gains less than ``tol`` nats.

    Parameters
    ----------
    kernel, likelihood, X, y, Z
        As :func:`bound_at_q`.
    q : dict of str to ndarray, optional
        The start (None: :func:`initial_values`).
    jitter : float or None
    chunk_size : int or None
    tol : float, default 1e-8
    max_iter : int, default 100

    Returns
    -------
    q : dict of str to ndarray
    n_steps : int
    converged : bool
    """
    K, M = int(likelihood.n_latent), Z.shape[0]
    codes = _codes(y, K)
    m, R = _checked_q(initial_values(M, K) if q is None else q, M, K)
    chunk = chunk_size or default_chunk_size(X.shape[0], M)
    L, _ = cholesky(kernel.gram(Z, Z), jitter, what="K_uu")
    previous = -np.inf
    for step in range(1, max_iter + 1):
        (ell, Ag, P), _ = _data_pass(kernel, X, codes, Z, L, m, R, chunk, False)
        elbo = ell - _kl(m, R)
        if elbo - previous < tol:
            return _pack(m, R), step - 1, True
        previous = elbo
        m, R = _natural_step(m, R, -2.0 * P, Ag - 2.0 * np.einsum("kij,jk->ik", P, m), 1.0, 1.0)
    return _pack(m, R), max_iter, False
