"""The Laplace approximation for GP classification, dense (Rasmussen & Williams 2006, section 3.4).

q(f | y) = N(f_hat, (K^-1 + W)^-1) at the mode f_hat of log p(y | f) + log N(f | 0, K), with
W = -d^2 log p(y | f_hat) / df^2 (diagonal; positive for the log-concave probit and logit).

* Mode (Algorithm 3.1): Newton steps in a = K^-1 f with B = I + W^1/2 K W^1/2 = L L^T,
  b = W f + d log p, a_new = b - W^1/2 L^-T L^-1 W^1/2 K b, each step halved until
  Psi(a) = -1/2 a^T f + sum log p(y | f) rises (GPML's infLaplace searches the same line).
* Evidence (eq. 3.32): log q(y) = -1/2 a^T f_hat + sum log p(y | f_hat) - sum log diag L.
* Gradient (Algorithm 5.1, with the sign of GPML's infLaplace in the implicit term):
  d log q / d theta = 1/2 a^T C a - 1/2 tr(R C) + s2^T (C g - K R C g) for C = dK/d theta,
  g = d log p, R = W^1/2 B^-1 W^1/2 and s2 = 1/2 diag((K^-1 + W)^-1) d^3 log p; a likelihood
  hyperparameter theta (the bias, which shifts f) has sum d log p / d theta
  + 1/2 diag((K^-1 + W)^-1)^T d^3 log p / df^2 d theta + s2^T (b - K R b), b = K d^2 log p / df d theta.
* Prediction: the Gaussian regression with noise 1/W and targets f_hat + g / W has this
  posterior (its (K + W^-1)^-1 targets is a = g at the mode): the sites W, W f_hat + g go
  through EP's ``site_regression`` and the exact engine's whitened state (Algorithm 3.2).
"""
from __future__ import annotations

import numpy as np

from .. import threads
from ..linalg import cholesky, solve_lower, solve_upper_t
from .common import Evaluation
from .expectation_propagation import site_regression


def evaluate(kernel, likelihood, values, X, y, Z=None, *, tol, max_iter, need_grad=True, need_state=False):
    """Laplace log evidence, its gradients (kernel hyperparameters, bias) and posterior.

    X (N, D), y (N,) in {-1, +1}; ``Z`` is unused (dense).  ``tol``: Newton stops when a step
    raises Psi by less than this (nats); ``max_iter`` steps at most, else FloatingPointError (the
    optimiser's signal to step back).  The O(N^3) work uses the bulk BLAS threads.
    """
    with threads.bulk(float(X.shape[0]) ** 3):
        return _evaluate(kernel, likelihood, values, X, y, tol, max_iter, need_grad, need_state)


def _newton_system(K, W):
    """(sqrt W, L) with L L^T = B = I + W^1/2 K W^1/2 (positive definite for W >= 0)."""
    sw = np.sqrt(W)
    B = np.eye(K.shape[0]) + sw[:, None] * K * sw[None, :]
    L, _ = cholesky(B, 0.0, what="B = I + W^1/2 K W^1/2")
    return sw, L


def find_mode(likelihood, values, K, y, tol, max_iter):
    """Algorithm 3.1 from f = 0: returns (a, f_hat, Psi, derivatives at f_hat)."""
    n = K.shape[0]
    a, f = np.zeros(n), np.zeros(n)
    derivs = likelihood.log_density_derivatives(values, "likelihood", y, f)
    psi = float(np.sum(derivs[0]))
    for _ in range(max_iter):
        _, d1, d2, _ = derivs
        W = np.maximum(-d2, 0.0)
        sw, L = _newton_system(K, W)
        b = W * f + d1
        step = b - sw * solve_upper_t(L, solve_lower(L, sw * (K @ b))) - a
        for _ in range(60):            # halve until Psi rises (it is concave in a)
            a_try = a + step
            f_try = K @ a_try
            d_try = likelihood.log_density_derivatives(values, "likelihood", y, f_try)
            psi_try = float(-0.5 * a_try @ f_try + np.sum(d_try[0]))
            if psi_try >= psi:
                break
            step = 0.5 * step
        else:
            return a, f, psi, derivs          # no rise left even for a tiny step: at the mode
        gain = psi_try - psi
        a, f, psi, derivs = a_try, f_try, psi_try, d_try
        if gain < tol:
            return a, f, psi, derivs
    raise FloatingPointError(f"Laplace: Newton's method did not reach the mode in {max_iter} steps")


def _evaluate(kernel, likelihood, values, X, y, tol, max_iter, need_grad, need_state):
    K = kernel.gram(values, "kernel", X, X)
    a, f, psi, (_, g, d2, d3) = find_mode(likelihood, values, K, y, tol, max_iter)
    W = np.maximum(-d2, 0.0)
    sw, L = _newton_system(K, W)
    F = psi - float(np.sum(np.log(np.diag(L))))
    if not np.isfinite(F):
        raise FloatingPointError("Laplace: non-finite evidence")
    grads = {}
    if need_grad:
        Li = solve_lower(L, np.diag(sw))                      # L^-1 W^1/2
        R = Li.T @ Li                                         # W^1/2 B^-1 W^1/2
        C = solve_lower(L, sw[:, None] * K)                   # L^-1 W^1/2 K
        posterior_var = np.diag(K) - np.einsum("ij,ij->j", C, C)   # diag (K^-1 + W)^-1
        s2 = 0.5 * posterior_var * d3
        # Adjoint of K: 1/2 a a^T - 1/2 R from the explicit terms, (I - R K) s2 g^T from the
        # implicit change of f_hat (symmetrised: dK is symmetric).
        G = 0.5 * np.outer(a, a) - 0.5 * R + np.outer(s2 - R @ (K @ s2), g)
        grads, _ = kernel.vjp(values, "kernel", X, X, 0.5 * (G + G.T))
        # GPML's infLaplace for each likelihood hyperparameter theta: the explicit terms
        # sum d log p / d theta + 1/2 diag((K^-1 + W)^-1)^T d^3 log p / df^2 d theta and the
        # implicit change of f_hat through b = K d^2 log p / df d theta.
        for name, (dlp, d1p, d2p) in likelihood.log_density_param_derivatives(values, "likelihood", y, f).items():
            b = K @ d1p
            grads[name] = np.array(np.sum(dlp) + 0.5 * posterior_var @ d2p + s2 @ (b - K @ (R @ b)))
    state = None
    if need_state:
        state = site_regression(kernel, values, X, None, W, W * f + g, jitter=None, chunk_size=None,
                                need_grad=False, need_state=True).state
    return Evaluation(log_evidence=F, grads=grads, dZ=None, jitter=0.0, state=state, pseudo_data=(W, W * f + g))
