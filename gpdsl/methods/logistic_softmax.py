"""Conditionally conjugate multi-class classification with the logistic-softmax link
(Galy-Fajou, Wenzel, Donner & Opper, "Multi-Class Gaussian Process Classification Made Conjugate:
Efficient Inference via Data Augmentation", UAI 2019 / AISTATS 2020): the K-class counterpart of
the two-class Pólya-Gamma method (:mod:`gpdsl.methods.polya_gamma`, collapsed, and
:mod:`gpdsl.methods.stochastic_polya_gamma`, stochastic), for ``Categorical(K, "logistic_softmax")``.

Likelihood.  K latent GPs f_k (shared inducing inputs Z), y_i in 0..K-1, y_ik = [y_i = k], sigma
the logistic function:  p(y_i | f_i) = sigma(f_iy) / sum_j sigma(f_ij).  The GPs share one kernel
(gram (n1, n2): one K_uu, one K_uf for all classes) or have one each (``kernel.n_outputs`` K, gram
(K, n1, n2): :class:`gpdsl.kernels.Separate`); below, the shared case reads K^k = K for every k.

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
1/theta_ik) and linear terms kappa_ik (targets kappa/theta) under its prior K^k, so, as in thesis
eq. C.1 for PGPR (written for one class, with A = A_k, L = L_k below),

    K^k_uu = L_k L_k^T,  A_k = L_k^-1 K^k_uf,  B_k = I + A_k Theta_k A_k^T = L_Bk L_Bk^T,  g_k = L_Bk^-1 A_k kappa_k,
    L* = sum_k [-1/2 log|B_k| + 1/2 g_k^T g_k - 1/2 sum_i theta_ik (K^k_ii - Q^k_ii)] + sum_ik (B) + sum_i Lambda_i,

the collapsed bound (Titsias' VFE bound of each pseudo-regression plus 1/2 log(2 pi / theta) +
kappa^2 / (2 theta) per point, which cancel its Gaussian constants: no 1/theta is formed).
q(u_k) = N(L_k B_k^-1 A_k kappa_k, L_k B_k^-1 L_k^T), and the marginals mean_ik = a_ki^T B_k^-1 A_k kappa_k,
var_ik = K^k_ii - Q^k_ii + |L_Bk^-1 a_ki|^2 (a_ki column i of A_k).  At the optimal c and
(gamma, alpha) the per-row bound is

    l_i = lgamma(alpha_i) - log K - (alpha_i - 1)(digamma(alpha_i) - 1) + mean_iy / 2 - log(2 cosh(c_iy / 2)),

with derivatives (envelope theorem) dl_i/dmean_ik = kappa_ik - theta_ik mean_ik, dl_i/dvar_ik =
-theta_ik / 2: conjugate sites (precision theta, natural location kappa) for the stochastic method.

Collapsed (:func:`evaluate`): each evaluation runs the coordinate ascent c, (gamma, alpha) <- optimum
at q*(u) of the current locals, to convergence (largest change of a gamma_ik, or of a c_ik over
sqrt(max(c_ik, 1)), below ``spec.class_tol`` or ``spec.tol``, within a fit ``class_fit_tol``: at
its optimum c* = sqrt(mean^2 + var) the bound's second derivative in c_ik is -(y_ik + gamma_ik) /
(2 c*) for large c* and at most 0.11 (y_ik + gamma_ik) in size below 1, so a residual r sqrt(c*)
costs the bound about (y + gamma) r^2 / 4 at any scale, where an absolute test would demand of
c* = 50 what matters at c* = 1); gradients in the kernel and Z are those of the K
pseudo-regressions at fixed locals, valid at the fixed point by the envelope theorem.

Mean steps (``spec.acceleration``, issue 46).  The plain ascent is slow where a class's latent mean
is far below 0 at a row: its pseudo-target kappa/theta is about its own mean (-c), so the row
holds it where it is with weight theta ~ 1/(2c) while the row's own bound l_i is nearly flat in
it, and the mean moves by the prior's pull alone, a fraction ~1/(1 + theta K_ii) of the way a
sweep (60-180 sweeps an evaluation on penbased at kernel variance 10^3).  So between the
O(N K M^2) passes the means of q(u_k) are moved to the maximum of the bound at q's current
covariances, F(mu) = sum_i l_i(a_i^T mu, var_i) - sum_k |mu_k|^2 / 2 + const (the locals at their
closed-form optimum given the marginals; l_i as for the stochastic method below), by L-BFGS
preconditioned with B_k, the curvature of the ascent's quadratic model: O(N K M) a step
(:func:`_optimise_means`).  The bound never decreases: with q_t = (mu_t, S_t) optimal at locals_t,
L*(locals_t) = F_aug(q_t, locals_t) <= F(mu_t; S_t) <= F(mu*; S_t) = F_aug((mu*, S_t), locals_t+1)
<= L*(locals_t+1), locals_t+1 the optimum at the marginals of (mu*, S_t).  The fixed points are
the plain ascent's (at one, the gradient of F in mu vanishes: the mean steps do not move).  A shared
kernel keeps one factor L and one A for all K regressions; one kernel per class costs K of each.
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
from ..chunks import add_partial, cache_bytes, default_chunk_size, map_rows
from ..linalg import JITTER_LADDER, cholesky, inverse_lower, jitter_adjoint, solve_lower
from . import collapsed
from .common import Evaluation, LocalStateFormat, PredictiveState, RowIndependentExpectations

_BLOCK_DOUBLES = 2 ** 22    # rows per block: the (K, M, rows) stack of L_Bk^-1 A of 32 MB
# The mean steps (_optimise_means) stop on the change of the means, not on the bound's: F is nearly
# flat along the slow directions, so a relative gain of 1e-8 left means that moved the locals by
# more than 1e-6 and the final evaluation of penbased at tol 1e-6 took 581 passes (issue 46).
_MEAN_STEPS = 100
_MEAN_FTOL = 1e-15
_MEAN_SETTLE = 1.0         # of the locals' tol: 0.25 took 3,368 steps and 147 passes on penbased, 1.0 2,539 and 176
_COMPILE_SECONDS = 3


@dataclass
class LogisticSoftmaxState:
    """The local variational parameters and the inner loop's record.

    ``c``, ``gamma`` (N, K), ``alpha``, ``beta`` (N,) are where the bound, gradients and
    posterior were evaluated; ``c_next``, ``gamma_next``, ``alpha_next`` the one further update
    (the next warm start); ``sweeps`` the updates of the locals plus one (each a pass for the
    marginals and one for the sums: O(N K M^2)); ``bound_history`` the bound at each accepted
    point (non-decreasing); ``mean_steps`` the O(N K M) evaluations of the mean steps.

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
    mean_steps : int, default 0
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
    mean_steps: int = 0


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
    # Whole numbers in [0, K): np.isin's test (NaN and inf fail both) without its sort, which was
    # 0.1 ms of each of the thousands of passes of a small K-class fit (issue 46's cold start).
    if codes.ndim != 1 or not np.all((codes >= 0.0) & (codes < K) & (np.trunc(codes) == codes)):
        raise ValueError(f"logistic-softmax: targets must be class codes 0..{K - 1}, shape (N,)")
    return codes


def evaluate(kernel, likelihood, X, y, Z, *, spec, warm=None, need_grad=True, need_state=False, offset=None):
    """Collapsed logistic-softmax bound L* (module docstring), its gradients in the kernel
    hyperparameters (summed over the K classes) and Z, and, if asked, the posterior.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The kernel shared by the K latent GPs, or one per latent GP (``n_outputs`` K, gram
        (K, n1, n2): :class:`gpdsl.kernels.Separate`).
    likelihood : gpdsl.likelihoods.Categorical
        K classes, link ``"logistic_softmax"`` (no hyperparameters).
    X : ndarray or Dask array, shape (N, D)
    y : ndarray, shape (N,)
        Class codes 0..K-1 (floats).
    Z : ndarray, shape (M, D)
        Inducing inputs, shared by the classes.
    spec : gpdsl.inference.PolyaGamma
        Read for ``class_tol`` or ``tol`` (largest change of a gamma_ik, or of a c_ik over
        sqrt(max(c_ik, 1)); ``local_tolerance_for_classes``), ``max_iter`` (updates of the
        locals per evaluation, plus one for the first pass), ``acceleration`` (the mean steps
        between updates; False: the plain ascent), ``jitter``, ``chunk_size``.
    warm : LogisticSoftmaxState, optional
        Start from its ``*_next``; None starts at the local optimum at the marginals N(0, 0) (c = 0).
    need_grad : bool, default True
    need_state : bool, default False
        Build the :class:`PredictiveState` (weights (M, K), correction (K, M, M), q_mean (M, K),
        q_cov (K, M, M); chol (M, M) for a shared kernel, (K, M, M) one per class).
    offset : None
        Offsets are not supported for K > 1.

    Returns
    -------
    gpdsl.methods.common.Evaluation
        ``log_evidence`` L* at the converged locals, ``grads`` ("kernel.*", a shared kernel's summed
        over the classes), ``dZ`` (M, D),
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


def _start(K, X, codes, warm):
    n = X.shape[0]
    if warm is not None and np.shape(warm.c_next) == (n, K):
        return np.array(warm.c_next), np.array(warm.gamma_next), np.array(warm.alpha_next)
    # The local optimum at the marginals N(0, 0): c = 0, the largest weights theta = (y + gamma) / 4
    # (as the two-class method starts at c = 0.1).  Not the prior's marginals N(0, K^k_ii): at a
    # large kernel variance their c ~ sqrt(K_ii) leave gamma ~ exp(-c/2) and theta ~ 1/c near 0 for
    # every class but the label's, so the wrong classes barely see the data, and the coordinate
    # ascent stays near that start: on digits at lengthscale 82, variance 988 (the fit's optimum)
    # it converged to a bound of -3388 in 124 sweeps against -2563 in 83 from c = 0; on 3,000
    # penbased rows at 29.7, 3,735 to -7027 in 1,083 sweeps against -4406 in 312
    # (tests/test_logistic_softmax.py::test_cold_start_reaches_the_better_fixed_point).
    return ls_local_update(codes, np.zeros((n, K)), np.zeros((n, K)))


def _whitened_rows(Kuf, kff, L):
    """A = L^-1 K_uf and the residual variances K_ii - Q_ii of a row block in this module's
    shapes (:func:`gpdsl.methods.collapsed.whitened_blocks`).

    Parameters
    ----------
    Kuf : ndarray, shape (M, n) or (K, M, n)
        k(Z, X_block), shared or one per class.
    kff : ndarray, shape (n,) or (K, n)
        diag k(X_block).
    L : ndarray, shape (M, M) or (K, M, M)
        The factor(s) of K_uu.

    Returns
    -------
    A : ndarray, shape (M, n) or (K, M, n)
        One A for all classes, or A_k = L_k^-1 K^k_uf.
    residual : ndarray, shape (n, K) or (n, 1)
        K^k_ii - Q^k_ii, C-ordered (the jitted kernels' one signature); a shared kernel's one
        column serves every class.

    Raises
    ------
    FloatingPointError
        Q_ii > K_ii (:func:`gpdsl.methods.collapsed.check_rows_nystrom`).
    """
    A, residual = collapsed.whitened_blocks(Kuf, kff, L if L.ndim == 3 else L[None])
    return (A[0] if L.ndim == 2 else A), np.ascontiguousarray(residual.T)


def _class_means(A, weights):
    """mean_ik = a_ki^T weights[:, k] (n, K): one product A^T weights for a shared A (M, n), one
    per class for a stack (K, M, n)."""
    if A.ndim == 2:
        return A.T @ weights
    return np.einsum("kmi,mk->ik", A, weights)


def _evaluate_at(kernel, K, X, codes, Z, spec, jitter, progress, need_grad, need_state):
    """One evaluation at one jitter rung (as :func:`gpdsl.methods.polya_gamma._evaluate_at`)."""
    n, m = X.shape[0], Z.shape[0]
    chunk = spec.chunk_size or max(64, min(default_chunk_size(n, m), _BLOCK_DOUBLES // (K * m)))
    L, jit, _ = collapsed.factor_blocks(kernel, Z, jitter)
    L = L if kernel.n_outputs > 1 else L[0]       # this module's shapes: (M, M) for a shared kernel
    cache = n * m * 8 * (L.size // (m * m)) <= cache_bytes()       # A is (K, M, N) with a factor per class
    kept = None
    beta = np.full(n, float(K))

    def over_rows(block_fn, rows):
        nonlocal kept
        fn = partial(block_fn, kernel, Z, L, cache)
        total, per_row, blocks = map_rows(fn, (X,) + tuple(rows), chunk, carried=kept, keep=True)
        kept = blocks if cache else None
        return total, per_row

    def row_terms(mu, var):
        (rows_bound, grad), (means,) = over_rows(partial(_means_block, weights=mu), (codes, var))
        return rows_bound, grad, means

    point = _start(K, X, codes, progress["warm"])
    announce_compilation("logistic-softmax", _COMPILE_SECONDS, ls_local_terms,
                         (codes[:1], point[0][:1], point[1][:1], point[2][:1], beta[:1], beta[:1, None]))
    sums, _ = over_rows(_sums_block, (codes,) + point + (beta,))
    factor, bound = _bound(sums)
    history, converged, sweeps, mean_steps = [bound], False, 1, 0
    while True:
        _, (mean, var) = over_rows(partial(_marginals_block, factor=factor), ())
        sweeps += 1
        if spec.acceleration:
            mean, steps = _optimise_means(partial(row_terms, var=var), factor, spec.local_tolerance_for_classes)
            mean_steps += steps
        target = ls_local_update(codes, mean, var)
        # c_ik on the scale of the bound's curvature in it (module docstring).
        change = max(np.max(np.abs(target[0] - point[0]) / np.sqrt(np.maximum(point[0], 1.0))),
                     np.max(np.abs(target[1] - point[1])))
        if change < spec.local_tolerance_for_classes:
            converged = True
            break
        if sweeps >= spec.max_iter:
            break
        point = target
        sums, _ = over_rows(_sums_block, (codes,) + point + (beta,))
        factor, bound = _bound(sums)
        history.append(bound)

    c, gamma, alpha = point
    progress["warm"] = LogisticSoftmaxState(c, gamma, alpha, beta, *target)
    progress["passes"] += sweeps
    theta, kappa, _ = ls_local_terms(codes, c, gamma, alpha, beta, np.zeros((n, 1)))
    grads, dZ, state = {}, None, None
    LBi, weights = factor
    B_inv = np.matmul(np.transpose(LBi, (0, 2, 1)), LBi)
    if need_grad:
        grads, dZ = _collapsed_gradients(kernel, X, codes, Z, L, jit, point, beta, weights, B_inv, sums[0], kept, chunk)
    if need_state:
        L_LBiT = np.matmul(L, np.transpose(LBi, (0, 2, 1)))
        q_mean = L @ weights if L.ndim == 2 else np.matmul(L, weights.T[:, :, None])[:, :, 0].T
        state = PredictiveState(Z=Z, weights=weights, correction=np.eye(m) - B_inv, q_mean=q_mean,
                                q_cov=np.matmul(L_LBiT, np.transpose(L_LBiT, (0, 2, 1))), chol=L)
    local = LogisticSoftmaxState(c, gamma, alpha, beta, *target, sweeps=sweeps, converged=converged,
                                 bound_history=history, mean_steps=mean_steps)
    return Evaluation(log_evidence=history[-1], grads=grads, dZ=dZ, jitter=jit, state=state, warm=local,
                      pseudo_data=(theta, kappa))


def _block_rows(kernel, Z, L, cache, Xb, hit):
    """(A, residual) of a row block (:func:`_whitened_rows`), formed or carried from an earlier
    pass, and what the block keeps for the next pass."""
    A, residual = _whitened_rows(kernel.gram(Z, Xb), kernel.diag(Xb), L) if hit is None else hit
    return A, residual, ((A, residual) if cache else None)


def _sums_block(kernel, Z, L, cache, Xb, codes_b, cb, gb, ab, bb, hit=None):
    """One block's sums at its locals: P_k = A_k Theta_k A_k^T (K, M, M), (A_k kappa_k)_k (M, K)
    and the local terms.  Returns (sums, (), kept)."""
    A, residual, kept = _block_rows(kernel, Z, L, cache, Xb, hit)
    theta, kappa, local = ls_local_terms(codes_b, cb, gb, ab, bb, residual)
    K, m = theta.shape[1], A.shape[-2]
    P = np.empty((K, m, m))
    for k in range(K):
        As = (A if A.ndim == 2 else A[k]) * np.sqrt(theta[:, k])
        P[k] = As @ As.T
    r = A @ kappa if A.ndim == 2 else np.einsum("kmi,ik->mk", A, kappa)
    return (P, r, local), (), kept


def _marginals_block(kernel, Z, L, cache, Xb, hit=None, *, factor):
    """One block's marginals of q*(u) at ``factor = (L_Bk^-1 (K, M, M), weights (M, K))``:
    mean_ik = a_ki^T weights_k, var_ik = residual_ik + |L_Bk^-1 a_ki|^2.  Returns ((), (mean, var), kept)."""
    A, residual, kept = _block_rows(kernel, Z, L, cache, Xb, hit)
    # L_Bk^-1 A by products with the explicit inverses (B_k >= I, so |L_Bk^-1| <= 1; as for two
    # classes, the matmul runs several times faster than the triangular solve).
    return (), (_class_means(A, factor[1]), ls_variances(np.matmul(factor[0], A), residual)), kept


def _means_block(kernel, Z, L, cache, Xb, codes_b, var_b, hit=None, *, weights):
    """One block's part of the bound at fixed marginal variances and whitened means ``weights``
    (M, K): (sum_i l_i, sum_i a_ki dl_i/dmean_ik (M, K)) and the means.  Returns (sums, (mean,), kept)."""
    A, _, kept = _block_rows(kernel, Z, L, cache, Xb, hit)
    mean = _class_means(A, weights)
    bound, d_mean, _ = ls_expectations(codes_b, mean, var_b)
    grad = A @ d_mean if A.ndim == 2 else np.einsum("kmi,ik->mk", A, d_mean)
    return (float(bound.sum()), grad), (mean,), kept


def _optimise_means(row_terms, factor, tol):
    """The whitened means of q(u_k) that maximise the bound at fixed covariances (so at fixed
    marginal variances) with the locals at their optimum,

        F(mu) = sum_i l_i(mean_i, var_i) - sum_k |mu_k|^2 / 2 + const,   mean_ik = a_ki^T mu_k,

    by L-BFGS in z_k = L_Bk^T mu_k from the coordinate ascent's mu_k = ``factor[1]``: there the
    Hessian of the coordinate ascent's quadratic model, -(I + A_k Theta_k A_k^T), is -I, and
    L-BFGS learns the rest, the directions where the rows' own curvature is far below theta
    (module docstring).  O(N K M) a step.  Stops once a step moves no mean_ik by more than
    ``tol`` (``_MEAN_SETTLE``) on the scale of the locals' test (over sqrt(max(|mean_ik|, 1))), or after
    ``_MEAN_STEPS`` steps; L-BFGS never accepts a step that lowers F.

    Parameters
    ----------
    row_terms : callable
        mu (M, K) -> (sum_i l_i, sum_i a_ki dl_i/dmean_ik (M, K), mean (N, K)).
    factor : tuple
        (L_Bk^-1 (K, M, M), mu (M, K)) of the current locals (:func:`_bound`).
    tol : float
        The locals' convergence test.

    Returns
    -------
    mean : ndarray, shape (N, K)
        The means at the last accepted mu.
    evaluations : int
        Calls of ``row_terms``.
    """
    # Imported here: scipy.optimize costs ~0.1 s of `import gpdsl`, which no other module pays
    # at import (issue 46's cold start).
    from scipy import optimize

    LBi, start = factor
    K, m = start.shape[1], start.shape[0]

    def means(z):
        return np.einsum("kji,kj->ik", LBi, z.reshape(K, m))         # mu_k = L_Bk^-T z_k, (M, K)

    last = {}

    def negative_bound(z):
        mu = means(z)
        bound, grad, last["mean"] = row_terms(mu)
        last["z"] = np.array(z)
        return -(bound - 0.5 * np.sum(mu * mu)), -np.einsum("kij,jk->ki", LBi, grad - mu).ravel()

    def settled(intermediate_result):
        previous = last.get("accepted")
        if not np.array_equal(last["z"], intermediate_result.x):
            return
        last["accepted"] = last["mean"]
        if previous is not None and np.max(np.abs(last["mean"] - previous) / np.sqrt(
                np.maximum(np.abs(previous), 1.0))) < _MEAN_SETTLE * tol:
            raise StopIteration

    z0 = np.linalg.solve(np.transpose(LBi, (0, 2, 1)), start.T[:, :, None])[:, :, 0].ravel()   # L_Bk^T mu_k
    result = optimize.minimize(negative_bound, z0, jac=True, method="L-BFGS-B", callback=settled,
                               options={"maxiter": _MEAN_STEPS, "ftol": _MEAN_FTOL, "gtol": 0.0, "maxcor": 20})
    evaluations = int(result.nfev)
    if not np.array_equal(last["z"], result.x):
        negative_bound(result.x)
        evaluations += 1
    return last["mean"], evaluations


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
    (:func:`gpdsl.methods.collapsed._gradient_pass`, trace case).  With C_k = I - B_k^-1,
    w_k = weights[:, k], e'_ik = kappa_ik - theta_ik mean_ik, class k's adjoints are
        G^k_uf = L_k^-T [C_k A_k Theta_k + w_k e'_k^T],  dL*/dK^k_ii = -1/2 theta_ik,
        G^k_uu = L_k^-T [1/2 (C_k - w_k w_k^T - P_k)] L_k^-1;
    a shared kernel takes their sums over the classes (one VJP of (M, n)), a kernel per class
    their stack (one VJP of (K, M, n))."""
    K, m = B_inv.shape[0], L.shape[-1]
    per_class = L.ndim == 3
    Li = np.stack([inverse_lower(Lk) for Lk in L]) if per_class else inverse_lower(L)

    def pass_fn(Xb, codes_b, cb, gb, ab, bb, hit=None):
        Kuf = kernel.gram(Z, Xb)
        A, residual = _whitened_rows(Kuf, kernel.diag(Xb), L) if hit is None else hit
        theta, kappa, _ = ls_local_terms(codes_b, cb, gb, ab, bb, residual)
        e = kappa - theta * _class_means(A, weights)
        if per_class:
            G = np.empty(A.shape)
            for k in range(K):
                At = A[k] * theta[:, k]
                G[k] = Li[k].T @ (At - B_inv[k] @ At + np.outer(weights[:, k], e[:, k]))
            kgrads, dZ = kernel.vjp(Z, Xb, G, K=Kuf)
            return (add_partial(kgrads, kernel.diag_vjp(Xb, -0.5 * theta.T)), dZ), ()
        G = A * theta.sum(axis=1)
        for k in range(K):
            G -= B_inv[k] @ (A * theta[:, k])
        G += weights @ e.T
        kgrads, dZ = kernel.vjp(Z, Xb, Li.T @ G, K=Kuf)
        return (add_partial(kgrads, kernel.diag_vjp(Xb, -0.5 * theta.sum(axis=1))), dZ), ()

    (kgrads, dZ), _ = map_rows(pass_fn, (X, codes) + tuple(point) + (beta,), chunk, carried=kept)
    if per_class:
        G_uu = np.empty(L.shape)
        for k in range(K):
            G_white = 0.5 * (np.eye(m) - B_inv[k] - np.outer(weights[:, k], weights[:, k]) - P[k])
            G_k = Li[k].T @ G_white @ Li[k]
            G_uu[k] = jitter_adjoint(0.5 * (G_k + G_k.T), jit)
    else:
        G_white = 0.5 * (K * np.eye(m) - B_inv.sum(axis=0) - weights @ weights.T - P.sum(axis=0))
        G_uu = Li.T @ G_white @ Li
        G_uu = jitter_adjoint(0.5 * (G_uu + G_uu.T), jit)
    uu_grads, dZ_uu = kernel.vjp(Z, Z, G_uu)
    return add_partial(kgrads, uu_grads), dZ + 2.0 * dZ_uu


# -- stochastic variational (Hoffman, Blei, Wang & Paisley 2013 SVI; the K-class counterpart of
# gd.inference.PolyaGamma(minibatch=B)) -------------------------------------------------------------
# q(v_k) = N(m_k, R_k R_k^T) in the whitened basis u_k = L v_k is SVGP's (gpdsl.methods.svgp, K
# classes).  The locals of a row are always at their closed-form optimum given q, so the bound is
# sum_i l_i(mean_i, var_i) - sum_k KL[q(v_k) || N(0, I)]: SVGP's bound with l_i as the row's
# expected log-likelihood (LogisticSoftmaxExpectations), whose conjugate sites -2 dl/dvar = theta
# and dl/dmean + theta mean = kappa make SVGP's natural step of size 1 from all rows the collapsed
# method's optimal q(u_k) at those locals.


class LogisticSoftmaxExpectations(RowIndependentExpectations):
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
