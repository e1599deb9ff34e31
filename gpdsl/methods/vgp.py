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
"""
from __future__ import annotations

import numpy as np

from .. import threads
from ..linalg import JITTER_LADDER, add_jitter, cholesky, inverse_lower, jitter_adjoint, solve_lower, solve_upper_t
from .common import Evaluation, PredictiveState


def initial_values(N):
    """alpha = 0 and lambda = 1 (GPflow's start): q(f) = N(0, (K^-1 + I)^-1).

    lambda^2 is the precision of the Gaussian site that q puts on each f_n: 1 is the right
    order for standardised Gaussian targets (1/s2) and for the Bernoulli links at f = 0 (probit
    2/pi, logit 1/4).  A start near q = p(f) (lambda -> 0) would stall: dELBO/dlambda is O(lambda)
    there (Sigma moves with lambda^2), so its gradient in log lambda vanishes as lambda^2.
    """
    return {"variational.alpha": np.zeros(N), "variational.lambda": np.ones(N)}


def evaluate(kernel, likelihood, values, X, y, Z=None, *, jitter=None, need_grad=True, need_state=False,
             warm=None):
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
    """
    rungs = JITTER_LADDER if jitter is None else (float(jitter),)
    with threads.bulk(float(X.shape[0]) ** 3):
        for attempt, rung in enumerate(rungs):
            try:
                ev = _evaluate_at(kernel, likelihood, values, X, y, rung, need_grad, need_state)
                break
            except (np.linalg.LinAlgError, FloatingPointError):
                if attempt == len(rungs) - 1:
                    raise
    # Checked past the ladder: an overflowing q or likelihood is no matter of K.
    if not np.isfinite(ev.log_evidence):
        raise FloatingPointError("VGP: non-finite bound")
    return ev


def _evaluate_at(kernel, likelihood, values, X, y, jitter, need_grad, need_state):
    n = X.shape[0]
    alpha = np.asarray(values["variational.alpha"], dtype=float)
    lam = np.asarray(values["variational.lambda"], dtype=float)
    if alpha.shape != (n,) or lam.shape != (n,):
        raise ValueError(f"VGP: variational.alpha and variational.lambda must have shape ({n},), got "
                         f"{alpha.shape} and {lam.shape}")
    K = kernel.gram(values, "kernel", X, X)
    if jitter:
        K = add_jitter(K, jitter)
    LB, _ = cholesky(np.eye(n) + lam[:, None] * K * lam[None, :], 0.0, what="B = I + Lam K Lam")
    C = solve_lower(LB, lam[:, None] * K)                    # L_B^-1 Lam K
    Sigma = K - C.T @ C
    var = np.diag(Sigma).copy()
    kff = np.diag(K)
    if np.any(var < -1e-8 * kff):
        raise FloatingPointError("VGP: K is numerically indefinite (a marginal variance of q is negative)")
    mean = K @ alpha
    ve, g, d, lik_grads = likelihood.variational_expectations(values, "likelihood", y, mean, var)
    Li = inverse_lower(LB)
    kl = np.sum(np.log(np.diag(LB))) + 0.5 * (np.sum(Li * Li) - n + alpha @ mean)
    elbo = float(np.sum(ve) - kl)

    grads = {}
    if need_grad:
        grads = _gradients(kernel, values, X, K, lam, alpha, LB, Li, C, Sigma, g, d, jitter)
        grads.update(lik_grads)
    state = None
    if need_state:
        # Regression with noise Lam^-2 and targets t = (K + Lam^-2) alpha: (K + Lam^-2)^-1 t = alpha,
        # so the whitened weights L^-1 t are L^T alpha, with no division by lambda^2.
        L, _ = cholesky(K + np.diag(1.0 / (lam * lam)), 0.0, what="K + Lam^-2")
        state = PredictiveState(Z=X, weights=L.T @ alpha, correction=np.eye(n), q_mean=mean,
                                q_cov=0.5 * (Sigma + Sigma.T), chol=L)
    w = lam * lam
    return Evaluation(log_evidence=elbo, grads=grads, dZ=None, jitter=jitter, state=state,
                      pseudo_data=(w, w * mean + alpha))


def _gradients(kernel, values, X, K, lam, alpha, LB, Li, C, Sigma, g, d, jitter):
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
    grads, _ = kernel.vjp(values, "kernel", X, X, G)
    grads["variational.alpha"] = K @ (g - alpha)
    grads["variational.lambda"] = -2.0 * lam * ((Sigma * Sigma) @ d) - np.einsum("nm,m,mn->n", W, lam, W)
    return grads
