"""The dense multi-class Laplace approximation for the softmax link (Rasmussen & Williams 2006,
section 3.5: Algorithms 3.3, 3.4 and 5.2), K latent GPs independent a priori with one shared
kernel k (the prior of the NK-vector f = (f_1, ..., f_K) is block diagonal, K_x in every block).

Latent arrays are (N, K): F[:, c] = f_c.  At f, pi = softmax(f) per row (N, K), the gradient of
log p(y | f) is g = Y - pi (Y one-hot) and the negative Hessian is W = D - Pi Pi^T with
D = diag(pi) (NK x NK, class-major) and Pi = D R, R = (I_N; ...; I_N) the NK x N stack: block
(c, c') of W is diag(pi_c) delta_cc' - diag(pi_c pi_c').  W is positive semi-definite and
singular (W (1_K (x) e_i) = 0), so the algorithms never form W^-1 or W^1/2.

* Newton (Algorithm 3.3): with B_c = I + D_c^1/2 K_x D_c^1/2 = L_c L_c^T,
  E_c = D_c^1/2 B_c^-1 D_c^1/2 = (K_x + D_c^-1)^-1 and M M^T = sum_c E_c (= R^T E R),
  Woodbury gives the NK x NK matrix (K + W^-1)^-1 = W (I + K W)^-1 without forming it:
  Rm = E - E R (M M^T)^-1 R^T E, block (c, c') = E_c delta_cc' - E_c (M M^T)^-1 E_c'.
  The Newton step is a_new = (I + W K)^-1 b = b - Rm K b with b = W f + g, i.e.
  c = E K b, a_new = b - c + E R M^-T M^-1 R^T c; each step is halved until
  Psi(a) = -1/2 a^T f + sum log p(y | f) rises (Psi is concave in a), and the last steps within
  Psi's rounding are taken while the residual g - a falls, as the binary method does
  (:func:`gpdsl.methods.laplace._rounding_step`).  Cost per step: K Cholesky factors and
  inverses of N x N matrices, O(K N^3); the NK x NK inverse is never formed.
* Evidence: log q(y) = Psi(a_hat) - 1/2 log|I + K W| with
  |I + K W| = |I + K D| |I_N - R^T D (I + K D)^-1 K D R| = prod_c |B_c| |sum_c E_c|
  (determinant lemma; D (I + K D)^-1 K D = D - E and sum_c D_c = I_N), so
  1/2 log|I + K W| = sum_c sum log diag L_c + sum log diag M.  (R&W's Algorithm 3.3 as printed
  leaves out the log|M| term; tests/naive_multiclass.py takes the determinant of I + K W.)
* Gradients (Algorithm 5.2): for C = dK_x / d theta (in every block),
  d log q / d theta = 1/2 sum_c a_c^T C a_c - 1/2 sum_c tr(Rm_cc C) + sum_c u_c^T C g_c, where
  the last term is the implicit one through the mode: d f_hat = (I + K W)^-1 C g and
  s2 = -1/2 d log|I + K W| / d f_hat, u = (I - Rm K) s2.  Per row i with the K x K block
  S_i of Sigma = (K^-1 + W)^-1 (the posterior covariance of f_i), v = diag S_i and
  d pi_c / d f_e = pi_c (delta_ce - pi_e):
  s2_ie = -1/2 tr(S_i dW_i / d f_ie) = -1/2 pi_e (v_e - pi^T v - 2 (S_i pi)_e + 2 pi^T S_i pi).
  S_i[c, c'] = delta_cc' (k_ii - (K_x E_c K_x)_ii) + (T_c^T T_c')_ii with T_c = M^-1 E_c K_x.
  The adjoint of the shared K_x is G = 1/2 A A^T - 1/2 sum_c Rm_cc + sym(U g^T) (A, U, g the
  (N, K) arrays), sum_c Rm_cc = M M^T - sum_c (M^-1 E_c)^T (M^-1 E_c), and one kernel VJP
  carries it to the hyperparameters (summed over the classes).
* Predictions (Algorithm 3.4): mean_*c = k_*^T a_c (= k_*^T (y_c - pi_c) at the mode) and
  cov_*(c, c') = delta_cc' (k_** - k_*^T E_c k_*) + (M^-1 E_c k_*)^T (M^-1 E_c' k_*) (R&W eq. 3.43
  with Rm).  With L_K L_K^T = K_x (+ jitter from the ladder) and b_* = L_K^-1 k_*, the
  :class:`~gpdsl.methods.common.PredictiveState` for K > 1 holds weights L_K^T A (N, K),
  correction[c] = L_K^T E_c L_K and coupling[c] = M^-1 E_c L_K (K, N, N): exact whatever
  jitter L_K needed (k_* = L_K b_* and L_K^-T L_K^T = I).  q(f_c) at X: mean f_hat[:, c],
  covariance K_x - K_x Rm_cc K_x (the block of Sigma).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import lapack

from .. import threads
from ..linalg import cholesky, solve_lower, solve_upper_t
from .common import Evaluation, PredictiveState
from .laplace import _rounding_step


@dataclass
class _Newton:
    """The factors of the Newton system at class probabilities P (N, K) (module docstring):
    E (K, N, N) with E[c] = E_c, M the Cholesky factor of sum_c E_c and half_log_det
    = 1/2 log|I + K W| = sum_c sum log diag L_c + sum log diag M."""

    E: np.ndarray
    M: np.ndarray
    half_log_det: float

    def solve_sum(self, v):
        """(sum_c E_c)^-1 v."""
        return solve_upper_t(self.M, solve_lower(self.M, v))

    def apply_R(self, V):
        """Rm V for V (N, K): (Rm V)_c = E_c v_c - E_c (M M^T)^-1 sum_c' E_c' v_c'."""
        EV = np.stack([self.E[c] @ V[:, c] for c in range(V.shape[1])], axis=1)
        t = self.solve_sum(EV.sum(axis=1))
        return EV - np.stack([self.E[c] @ t for c in range(V.shape[1])], axis=1)


def _factor(Kx, P):
    """:class:`_Newton` at class probabilities P (N, K).

    Raises
    ------
    FloatingPointError
        B_c or sum_c E_c not positive definite (in exact arithmetic they always are).
    """
    n, k = P.shape
    E = np.empty((k, n, n))
    half_log_det = 0.0
    try:
        for c in range(k):
            sd = np.sqrt(P[:, c])
            B = sd[:, None] * Kx * sd[None, :]
            B[np.diag_indices(n)] += 1.0
            L, _ = cholesky(B, 0.0, what="B_c = I + D_c^1/2 K D_c^1/2")
            half_log_det += float(np.sum(np.log(np.diag(L))))
            Binv, info = lapack.dpotri(L, lower=1)
            if info != 0:
                raise np.linalg.LinAlgError(f"dpotri failed (info {info})")
            Binv = np.tril(Binv) + np.tril(Binv, -1).T
            E[c] = sd[:, None] * Binv * sd[None, :]
        S = E.sum(axis=0)
        M, _ = cholesky(0.5 * (S + S.T), 0.0, what="sum_c E_c")
    except np.linalg.LinAlgError as err:
        raise FloatingPointError(f"multi-class Laplace: {err}") from err
    half_log_det += float(np.sum(np.log(np.diag(M))))
    return _Newton(E, M, half_log_det)


def _one_hot(y, k):
    codes = np.asarray(y).astype(np.intp)
    Y = np.zeros((codes.size, k))
    Y[np.arange(codes.size), codes] = 1.0
    return Y


def _psi(likelihood, y, A, F):
    return float(-0.5 * np.sum(A * F) + np.sum(likelihood.log_density(y, F)))


def find_mode(likelihood, Kx, y, tol, max_iter, warm=None):
    """Algorithm 3.3: Newton's method for the mode of Psi(a) = -1/2 a^T K a + log p(y | K a).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Categorical
        The softmax link (``class_probabilities`` and ``log_density``).
    Kx : ndarray, shape (N, N)
        The shared prior covariance.
    y : ndarray, shape (N,)
        Class codes 0..K-1.
    tol : float
        Stop when a step raises Psi by less than this (nats).
    max_iter : int
        Most Newton steps.
    warm : ndarray, shape (N, K), optional
        a = K^-1 f of a previous mode: the start when its Psi is above that of a = 0.

    Returns
    -------
    A : ndarray, shape (N, K)
        K^-1 f_hat per class.
    F : ndarray, shape (N, K)
        The mode f_hat.
    psi : float
    P : ndarray, shape (N, K)
        The class probabilities at f_hat.
    newton : _Newton or None
        The factors at P when the last Newton iteration computed them there (else None).

    Raises
    ------
    FloatingPointError
        The mode was not reached in ``max_iter`` steps.
    """
    n, k = Kx.shape[0], likelihood.n_latent
    Y = _one_hot(y, k)
    A, F = np.zeros((n, k)), np.zeros((n, k))
    psi = _psi(likelihood, y, A, F)
    if warm is not None:
        A_w = np.array(warm, dtype=float)
        if A_w.shape != (n, k):
            raise ValueError(f"multi-class Laplace: warm must have shape {(n, k)}, got {A_w.shape}")
        F_w = Kx @ A_w
        psi_w = _psi(likelihood, y, A_w, F_w)
        if np.isfinite(psi_w) and psi_w > psi:
            A, F, psi = A_w, F_w, psi_w
    P = likelihood.class_probabilities(F)
    for _ in range(max_iter):
        newton = _factor(Kx, P)
        G = Y - P
        PF = P * F
        b = PF - P * PF.sum(axis=1, keepdims=True) + G          # W f + g
        KB = Kx @ b
        C = np.stack([newton.E[c] @ KB[:, c] for c in range(k)], axis=1)   # E K b
        t = newton.solve_sum(C.sum(axis=1))
        step = b - C + np.stack([newton.E[c] @ t for c in range(k)], axis=1) - A
        residual = np.max(np.abs(G - A), initial=0.0)
        for _ in range(60):            # halve until Psi rises (it is concave in a)
            A_try = A + step
            F_try = Kx @ A_try
            psi_try = _psi(likelihood, y, A_try, F_try)
            P_try = likelihood.class_probabilities(F_try)
            if psi_try >= psi or _rounding_step(psi, psi_try, residual, Y - P_try - A_try):
                break
            step = 0.5 * step
        else:
            return A, F, psi, P, newton          # no rise left even for a tiny step: at the mode
        gain = psi_try - psi
        A, F, psi, P = A_try, F_try, psi_try, P_try
        if gain < tol:
            return A, F, psi, P, None
    raise FloatingPointError(f"multi-class Laplace: Newton's method did not reach the mode in {max_iter} steps")


def evaluate(kernel, likelihood, X, y, *, tol, max_iter, need_grad=True, need_state=False, warm=None):
    """Multi-class (softmax) Laplace log evidence, its kernel gradients and posterior (dense).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function shared by the K latent GPs (bound: its gradients come back
        qualified, ``"kernel.<name>"``).
    likelihood : gpdsl.likelihoods.Categorical
        K classes, the softmax link.
    X : ndarray, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Class codes 0..K-1 (floats).
    tol : float
        Newton stops when a step raises Psi by less than this (nats).
    max_iter : int
        Most Newton steps.
    need_grad : bool, default True
        Compute the gradients in the kernel hyperparameters (Algorithm 5.2).
    need_state : bool, default False
        Build the predictive state (K > 1 form, with ``coupling``).
    warm : ndarray, shape (N, K), optional
        ``Evaluation.warm`` of a previous evaluation (a = K^-1 f_hat): Newton starts there when
        its Psi beats that of f = 0.

    Returns
    -------
    gpdsl.methods.common.Evaluation
        log q(y), its gradients (summed over the classes), dZ None, the jitter 0 (the Newton
        factors need none), the state, ``warm`` = a = K^-1 f_hat (N, K), and the pseudo-data
        (w, r) (N, K) with w = pi - pi^2 (the diagonal of W's blocks) and r = g + w f_hat.

    Raises
    ------
    ValueError
        A likelihood with another link or a single latent function.
    FloatingPointError
        Newton did not converge in ``max_iter`` steps, or a factor failed.
    """
    k = getattr(likelihood, "n_latent", 1)
    if k < 2 or getattr(likelihood, "link", None) != "softmax":
        raise ValueError("multi-class Laplace needs a Categorical likelihood with the softmax link")
    X = np.asarray(X, dtype=float)
    with threads.bulk(float(k) * float(X.shape[0]) ** 3):
        return _evaluate(kernel, likelihood, X, y, tol, max_iter, need_grad, need_state, warm)


def _evaluate(kernel, likelihood, X, y, tol, max_iter, need_grad, need_state, warm):
    Kx = kernel.gram(X, X)
    n, k = Kx.shape[0], likelihood.n_latent
    A, F, psi, P, newton = find_mode(likelihood, Kx, y, tol, max_iter, warm)
    if newton is None:
        newton = _factor(Kx, P)
    log_evidence = psi - newton.half_log_det
    if not np.isfinite(log_evidence):
        raise FloatingPointError("multi-class Laplace: non-finite evidence")
    G = _one_hot(y, k) - P                                     # d log p / d f at the mode
    w = P - P * P
    grads, state = {}, None
    if need_grad or need_state:
        E, M = newton.E, newton.M
        U = np.empty((k, n, n))                                # M^-1 E_c
        T = np.empty((k, n, n))                                # M^-1 E_c K
        kek = np.empty((n, k))                                 # diag(K E_c K)
        for c in range(k):
            U[c] = solve_lower(M, E[c])
            T[c] = U[c] @ Kx
            kek[:, c] = np.einsum("ij,ij->j", Kx, M @ T[c])    # E_c K = M T_c
    if need_grad:
        # The K x K blocks S_i of Sigma = (K^-1 + W)^-1 at the training inputs.
        S = np.einsum("cji,dji->icd", T, T)
        S[:, np.arange(k), np.arange(k)] += np.diag(Kx)[:, None] - kek
        v = S[:, np.arange(k), np.arange(k)]
        Sp = np.einsum("icd,id->ic", S, P)
        pSp = np.sum(P * Sp, axis=1, keepdims=True)
        s2 = -0.5 * P * (v - np.sum(v * P, axis=1, keepdims=True) - 2.0 * Sp + 2.0 * pSp)
        u = s2 - newton.apply_R(Kx @ s2)                       # (I - Rm K) s2
        sum_R = M @ M.T - np.einsum("cji,cjl->il", U, U)       # sum_c Rm_cc
        adj = 0.5 * (A @ A.T) - 0.5 * sum_R + u @ G.T
        grads, _ = kernel.vjp(X, X, 0.5 * (adj + adj.T))
    if need_state:
        LK, _ = cholesky(Kx, None, what="K")
        correction = np.empty((k, n, n))
        coupling = np.empty((k, n, n))
        q_cov = np.empty((k, n, n))
        for c in range(k):
            ELK = E[c] @ LK
            correction[c] = LK.T @ ELK
            correction[c] = 0.5 * (correction[c] + correction[c].T)
            coupling[c] = U[c] @ LK
            cov = Kx - Kx @ (M @ T[c]) + T[c].T @ T[c]
            q_cov[c] = 0.5 * (cov + cov.T)
        state = PredictiveState(Z=X, weights=LK.T @ A, correction=correction, q_mean=F.copy(), q_cov=q_cov,
                                chol=LK)
        state.coupling = coupling       # a field of PredictiveState for K > 1 (INTERFACE), set either way
    return Evaluation(log_evidence=float(log_evidence), grads=grads, dZ=None, jitter=0.0, state=state,
                      warm=A.copy(), pseudo_data=(w, G + w * F))
