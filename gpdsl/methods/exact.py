"""Exact (dense, O(N^3)) Gaussian-process regression: the reference every sparse method is tested against.

log p(y) = -1/2 y^T K^-1 y - 1/2 log|K| - N/2 log 2pi with K = K_ff + Lambda (Rasmussen &
Williams eq. 2.30), gradient 1/2 tr((alpha alpha^T - K^-1) dK) (eq. 5.9).  Targets y - o of a
latent offset o (f = o + g) give d log p / d o = K^-1 (y - o) = alpha (``offset_grad``).
"""
from __future__ import annotations

import numpy as np
from scipy import linalg

from .. import threads
from ..chunks import add_partial
from ..linalg import cholesky, inverse_from_cholesky, jitter_adjoint, solve_lower
from .common import Evaluation, PredictiveState

_LOG_2PI = np.log(2.0 * np.pi)


def evaluate(kernel, likelihood, X, y, Z=None, *, jitter=None, chunk_size=None,
             need_grad=True, need_state=False, offset_grad=False):
    """Exact log marginal likelihood; X (N, D), y (N,).  ``Z`` and ``chunk_size`` are unused.

    The O(N^3) factorisation and inverse use the bulk BLAS thread count (gpdsl.threads).

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
        Build the predictive state (Z = X).
    offset_grad : bool, default False
        ``y`` is y - o for a latent offset o: with ``need_grad``, also ``grads["offset"]``,
        d log p / d o = alpha = K^-1 (y - o).

    Returns
    -------
    gpdsl.methods.common.Evaluation
        log p(y) of R&W eq. 2.30, its gradients (eq. 5.9), the pseudo-data (1/noise, y/noise).
    """
    with threads.bulk(float(X.shape[0]) ** 3):
        return _evaluate(kernel, likelihood, X, y, jitter, need_grad, need_state, offset_grad)


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
        state = PredictiveState(Z=X, weights=solve_lower(L, y), correction=np.eye(n), q_mean=Kff @ alpha,
                                q_cov=0.5 * (q_cov + q_cov.T), chol=L)
    return Evaluation(log_evidence=float(F), grads=grads, dZ=None, jitter=jit, state=state,
                      pseudo_data=(1.0 / noise, y / noise))
