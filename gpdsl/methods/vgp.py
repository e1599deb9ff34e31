"""The full variational Gaussian q(f) of Opper & Archambeau (2009), dense O(N^3) (GPflow's
``VGP_opper_archambeau``).

The optimal Gaussian q(f) under a factorising likelihood has a precision K^-1 plus a diagonal
(Opper & Archambeau 2009: the stationarity conditions of the bound), so ::

    q(f) = N(K alpha, Sigma),   Sigma = (K^-1 + Lam^2)^-1,   Lam = diag(lambda)

so 2N parameters (``"variational.alpha"`` unconstrained, ``"variational.lambda"`` positive)
describe it.  The bound is ::

    ELBO = sum_n E_q(f_n)[log p(y_n | f_n)] - KL[q(f) || N(0, K)]
    KL   = 1/2 (log|B| + tr B^-1 - N + alpha^T K alpha),   B = I + Lam K Lam

(with K^-1 Sigma = (I + Lam^2 K)^-1: tr(K^-1 Sigma) = tr B^-1, log|K| - log|Sigma| = log|B|),
and the marginals come from Sigma = K - K Lam B^-1 Lam K = K - C^T C, C = L_B^-1 Lam K.  Only B
(eigenvalues >= 1) is factorised: K^-1 never appears, and lambda -> 0 (q -> the prior) is
harmless.

:func:`optimise_q` moves q(f) to its optimum at fixed hyperparameters by damped natural-gradient
(conjugate-computation) steps on the sites (lambda^2, eta), O(N^3) each.
"""
from __future__ import annotations

import numpy as np

from .. import threads
from ..linalg import JITTER_LADDER, add_jitter, cholesky, inverse_lower, jitter_adjoint, solve_lower, solve_upper_t
from .common import Evaluation, PredictiveState, damped_natural_steps, extrapolates, shifted


def initial_values(N):
    """alpha = 0 and lambda = 1 (GPflow's start): q(f) = N(0, (K^-1 + I)^-1).

    lambda^2 is the precision of the Gaussian site that q puts on each f_n: 1 is the right
    order for standardised Gaussian targets (1/s2) and for the Bernoulli links at f = 0 (probit
    2/pi, logit 1/4).  A start near q = p(f) (lambda -> 0) would stall: dELBO/dlambda is O(lambda)
    there (Sigma moves with lambda^2), so its gradient in log lambda vanishes as lambda^2.

    Parameters
    ----------
    N : int
        Number of training points.

    Returns
    -------
    dict of str to ndarray
        ``"variational.alpha"`` (N,) zeros and ``"variational.lambda"`` (N,) ones.
    """
    return {"variational.alpha": np.zeros(N), "variational.lambda": np.ones(N)}


def evaluate(kernel, likelihood, values, X, y, Z=None, *, jitter=None, need_grad=True, need_state=False,
             warm=None, offset=None):
    """The Opper-Archambeau bound, its gradients and, if asked, the predictive state.

    X (N, D), y (N,) in the likelihood's coding; ``Z`` and ``warm`` are unused (dense, no local
    state).  ``values`` holds the natural ``"kernel.*"`` and ``"likelihood.*"`` hyperparameters
    and ``"variational.alpha"`` (N,), ``"variational.lambda"`` (N,); gradients are d ELBO / d
    each.  ``jitter``: a multiple of mean(diag K) added to the prior covariance K (None: the
    ladder, from 0, moving on only where B fails to factorise or a marginal variance of q comes
    out negative, i.e. where K is numerically indefinite).

    ``state`` is the exact-GP form of the Gaussian regression that has q(f) as its posterior:
    noise 1/lambda^2, targets t = (K + Lam^-2) alpha, so that f_* has mean k_*^T alpha and
    variance k_** - k_*^T (K + Lam^-2)^-1 k_*; ``pseudo_data`` = (lambda^2, lambda^2 t) =
    (lambda^2, lambda^2 K alpha + alpha) is that regression.

    ``offset`` (N,) shifts each row's latent input (the likelihood sees f + offset); with
    ``need_grad`` its gradient is ``grads["offset"]`` = d ELBO / d offset_n = dE_n/dmean_n (the
    offset enters only the expectations, as a shift of their mean argument).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    likelihood : gpdsl.likelihoods.Likelihood
        Its ``variational_expectations`` give the data term.
    values : dict of str to ndarray
        Natural hyperparameter values (for :func:`evaluate` also ``"variational.alpha"`` and
        ``"variational.lambda"``, (N,) each).
    X : ndarray, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Targets in the likelihood's coding.
    Z : None, optional
        Unused.
    jitter : float or None, optional
        Multiple of mean(diag K) (None: the ladder).
    need_grad : bool, default True
        Compute the gradients.
    need_state : bool, default False
        Build the predictive state.
    warm : object, optional
        Unused.
    offset : ndarray, shape (N,), optional
        Per-row offset of the latent input.

    Returns
    -------
    gpdsl.methods.common.Evaluation
        The Opper & Archambeau (2009) bound, its gradients and the pseudo-data.

    Raises
    ------
    numpy.linalg.LinAlgError, FloatingPointError
        If the last jitter rung fails or the bound is not finite.
    """
    rungs = JITTER_LADDER if jitter is None else (float(jitter),)
    with threads.bulk(float(X.shape[0]) ** 3):
        for attempt, rung in enumerate(rungs):
            try:
                ev = _evaluate_at(kernel, shifted(likelihood.for_rows(X), offset), values, X, y, rung, need_grad,
                                  need_state, offset is not None)
                break
            except (np.linalg.LinAlgError, FloatingPointError):
                if attempt == len(rungs) - 1:
                    raise
    # Checked past the ladder: an overflowing q or likelihood is no matter of K.
    if not np.isfinite(ev.log_evidence):
        raise FloatingPointError("VGP: non-finite bound")
    return ev


def _checked_q(q, n):
    alpha = np.asarray(q["variational.alpha"], dtype=float)
    lam = np.asarray(q["variational.lambda"], dtype=float)
    if alpha.shape != (n,) or lam.shape != (n,):
        raise ValueError(f"VGP: variational.alpha and variational.lambda must have shape ({n},), got "
                         f"{alpha.shape} and {lam.shape}")
    return alpha, lam


def _prior(kernel, X, jitter):
    K = kernel.gram(X, X)
    return add_jitter(K, jitter) if jitter else K


def _factor_b(K, lam):
    """L_B = chol(B), B = I + Lam K Lam (eigenvalues >= 1: no jitter)."""
    return cholesky(np.eye(K.shape[0]) + lam[:, None] * K * lam[None, :], 0.0, what="B = I + Lam K Lam")[0]


def _bound(likelihood, y, K, lam, alpha, LB):
    """The bound at q = (alpha, lambda) with L_B = chol(I + Lam K Lam), and its pieces:
    ``(elbo, C, L_B^-1, mean, var, g, d, likelihood gradients)``, C = L_B^-1 Lam K, g and d the
    likelihood's dE/dmean and dE/dvar at q's marginals (mean, var)."""
    n = K.shape[0]
    C = solve_lower(LB, lam[:, None] * K)                    # L_B^-1 Lam K
    kff = np.diag(K)
    var = kff - np.einsum("ij,ij->j", C, C)                  # diag(K - C^T C)
    if np.any(var < -1e-8 * kff):
        raise FloatingPointError("VGP: K is numerically indefinite (a marginal variance of q is negative)")
    mean = K @ alpha
    ve, g, d, lik_grads = likelihood.variational_expectations(y, mean, var)
    Li = inverse_lower(LB)
    kl = np.sum(np.log(np.diag(LB))) + 0.5 * (np.sum(Li * Li) - n + alpha @ mean)
    return float(np.sum(ve) - kl), C, Li, mean, var, g, d, lik_grads


def _evaluate_at(kernel, likelihood, values, X, y, jitter, need_grad, need_state, grad_offset=False):
    n = X.shape[0]
    alpha, lam = _checked_q(values, n)
    K = _prior(kernel, X, jitter)
    LB = _factor_b(K, lam)
    elbo, C, Li, mean, var, g, d, lik_grads = _bound(likelihood, y, K, lam, alpha, LB)
    Sigma = K - C.T @ C if need_grad or need_state else None

    grads = {}
    if need_grad:
        grads = _gradients(kernel, X, K, lam, alpha, LB, Li, C, Sigma, g, d, jitter)
        grads.update(lik_grads)
        if grad_offset:
            grads["offset"] = g
    state = None
    if need_state:
        # Regression with noise Lam^-2 and targets t = (K + Lam^-2) alpha: (K + Lam^-2)^-1 t = alpha,
        # so the whitened weights L^-1 t are L^T alpha, with no division by lambda^2.
        L, _ = cholesky(K + np.diag(1.0 / (lam * lam)), 0.0, what="K + Lam^-2")
        state = PredictiveState(Z=X, weights=L.T @ alpha, correction=None, q_mean=mean,
                                q_cov=0.5 * (Sigma + Sigma.T), chol=L)
    w = lam * lam
    return Evaluation(log_evidence=elbo, grads=grads, dZ=None, jitter=jitter, state=state,
                      pseudo_data=(w, w * mean + alpha))


def _gradients(kernel, X, K, lam, alpha, LB, Li, C, Sigma, g, d, jitter):
    """d ELBO / d (kernel hyperparameters, alpha, lambda); g = dE/dmean, d = dE/dvar (N,).

    With W = B^-1 Lam K = L_B^-T C, H = Lam B^-1 Lam and E = K^-1 Sigma = I - H K = I - Lam W:
    * dSigma = E^T dK E (from Sigma = K - K H K), so sum_n d_n Sigma_nn contributes E D E^T to
      the adjoint of K; the mean K alpha contributes g alpha^T; the KL alpha^T K alpha / 2
      -alpha alpha^T / 2; log|B| + tr B^-1 with dB = Lam dK Lam contributes
      -1/2 Lam (B^-1 - B^-2) Lam = -1/2 H K H (B^-1 - B^-2 = B^-1 Lam K Lam B^-1), i.e. -1/2 (Lam W) H.
    * alpha: K g - K alpha.
    * lambda: dSigma = -Sigma d(Lam^2) Sigma gives -2 lambda_n (Sigma D Sigma)_nn; the KL's
      d/dlambda_n = ((B^-1 - B^-2) Lam K)_nn = (W Lam W)_nn.
    """
    n = K.shape[0]
    W = solve_upper_t(LB, C)
    J = lam[:, None] * W                                     # H K
    E = np.eye(n) - J
    V = Li * lam[None, :]                                    # L_B^-1 Lam
    G = (E * d[None, :]) @ E.T + np.outer(g, alpha) - 0.5 * np.outer(alpha, alpha) - 0.5 * (J @ (V.T @ V))
    G = jitter_adjoint(0.5 * (G + G.T), jitter)
    grads, _ = kernel.vjp(X, X, G)
    grads["variational.alpha"] = K @ (g - alpha)
    grads["variational.lambda"] = -2.0 * lam * ((Sigma * Sigma) @ d) - np.einsum("nm,m,mn->n", W, lam, W)
    return grads


# Floor of the site precisions lambda^2 that optimise_q sets, relative to 1 / mean(diag K): the
# sites w = -2 dE/dvar are clipped at 0 (lambda is real), and lambda = 0 would be log(0) for the
# optimiser's log-space lambda and an infinite noise in the predictive state's regression.
MIN_SITE_PRECISION = 1e-12


def optimise_q(kernel, likelihood, values, X, y, q=None, *, jitter=None, tol=1e-8, max_iter=100,
               polish=False):
    """q(f) moved to its optimum at fixed hyperparameters by damped natural-gradient steps.

    Returns ``(q, n_steps, converged)``: ``q`` the dict ``{"variational.alpha", "variational.lambda"}``,
    ``n_steps`` the number of steps taken (each raised the bound, or left it unchanged), and
    ``converged`` whether the last step raised the bound by less than ``tol`` nats (absolute).
    ``values`` holds the ``"kernel.*"`` and ``"likelihood.*"`` values; ``q`` the start (None: the
    ``"variational.*"`` entries of ``values`` if it has them, otherwise :func:`initial_values`).
    ``jitter`` as for :func:`evaluate` (the ladder is climbed at the first evaluation, and its
    rung kept).

    At the optimum of the bound (Opper & Archambeau 2009) lambda_n^2 = -2 dE_n/dvar_n and
    alpha_n = dE_n/dmean_n.  In the natural parameters of q(f), precision K^-1 + Lam^2 and
    location eta = Sigma^-1 K alpha = alpha + lambda^2 * (K alpha), the natural-gradient step of
    size rho (Khan & Lin 2017) moves only the sites::

        lambda^2 <- (1 - rho) lambda^2 + rho w,    w = -2 dE/dvar  (clipped, see below)
        eta      <- (1 - rho) eta      + rho r,    r = dE/dmean + w * mean

    at q's current marginals (rho = 1 is the fixed-point iteration of those conditions, exact in
    one step for a Gaussian likelihood).  alpha is recovered without K^-1 from
    (I + Lam^2 K) alpha = eta: alpha = eta - Lam B^-1 Lam K eta, B = I + Lam K Lam (the matrix the
    bound factorises anyway).  Step-size control as :func:`gpdsl.methods.svgp.optimise_q`: rho
    starts at 1, is halved while a step does not raise the bound (so the bound never decreases),
    and after a step that raised it is chosen by :func:`gpdsl.methods.common.next_step_size` from
    the change of the residual (w - lambda^2, r - eta); a step that lowers the bound by less than
    ``tol`` is not taken and ends the iteration as converged; ``polish`` as there.

    w is clipped at :data:`MIN_SITE_PRECISION` / mean(diag K) (lambda is real and positive): for a
    likelihood that is not log-concave (Student-t at an outlier) the optimal Gaussian q(f) may
    have a negative site precision, which this family cannot hold, and the iteration then ends
    where the clipped step stops raising the bound, a little short of the best q of the family
    (30 points with three Student-t outliers: 2e-4 to 1e-3 nats below what L-BFGS-B reaches in
    (alpha, log lambda)).  SVGP's :func:`~gpdsl.methods.svgp.optimise_q`, whose S is a full
    matrix, does not clip.  For log-concave likelihoods the fixed point is the optimum of the
    bound.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    likelihood : gpdsl.likelihoods.Likelihood
        Its ``variational_expectations`` give the data term.
    values : dict of str to ndarray
        Natural hyperparameter values (for :func:`evaluate` also ``"variational.alpha"`` and
        ``"variational.lambda"``, (N,) each).
    X : ndarray, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Targets in the likelihood's coding.
    q : dict of str to ndarray, optional
        The starting q.
    jitter : float or None, optional
        Multiple of mean(diag K) (None: the ladder).
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
    n = X.shape[0]
    likelihood = likelihood.for_rows(X)         # the likelihood of X's rows (one per output reads each row's)
    if q is None:
        q = values if all(k in values for k in _Q_KEYS) else initial_values(n)
    alpha, lam = _checked_q(q, n)
    if not (np.all(np.isfinite(alpha)) and np.all(np.isfinite(lam))):
        raise FloatingPointError("VGP: non-finite q(f)")
    values = {k: v for k, v in values.items() if k not in _Q_KEYS}
    K0 = kernel.gram(X, X)
    floor = MIN_SITE_PRECISION / np.mean(np.diag(K0))

    def step_targets(mean, g, d):
        w = np.maximum(-2.0 * d, floor)
        return w, g + w * mean

    rungs = JITTER_LADDER if jitter is None else (float(jitter),)
    with threads.bulk(float(n) ** 3):
        for attempt, rung in enumerate(rungs):
            try:
                K = add_jitter(K0, rung) if rung else K0
                elbo, _, _, mean, _, g, d, _ = _bound(likelihood, y, K, lam, alpha, _factor_b(K, lam))
                if not np.isfinite(elbo):
                    raise FloatingPointError("VGP: non-finite bound")
                break
            except (np.linalg.LinAlgError, FloatingPointError):
                if attempt == len(rungs) - 1:
                    raise
        def at(natural):
            lam2_c, eta_c = natural
            lam_c = np.sqrt(lam2_c)
            LB = _factor_b(K, lam_c)
            alpha_c = eta_c - lam_c * solve_upper_t(LB, solve_lower(LB, lam_c * (K @ eta_c)))
            elbo_c, _, _, mean_c, _, g_c, d_c, _ = _bound(likelihood, y, K, lam_c, alpha_c, LB)
            return elbo_c, step_targets(mean_c, g_c, d_c), (alpha_c, lam_c)

        moved, n_steps, converged = damped_natural_steps((lam * lam, alpha + lam * lam * mean),
                                                         step_targets(mean, g, d), elbo, at, tol, max_iter, polish,
                                                         project=lambda natural: (np.maximum(natural[0], floor),
                                                                                  natural[1]),
                                                         extrapolate=extrapolates(likelihood))
        alpha, lam = moved if moved is not None else (alpha, lam)
    return {"variational.alpha": alpha, "variational.lambda": lam}, n_steps, converged


_Q_KEYS = ("variational.alpha", "variational.lambda")
