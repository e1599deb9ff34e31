"""The dense multi-class Laplace approximation for the softmax link (Rasmussen & Williams 2006,
section 3.5: Algorithms 3.3, 3.4 and 5.2), K latent GPs independent a priori.  The prior of the
NK-vector f = (f_1, ..., f_K) is block diagonal, K = blockdiag(K_1, ..., K_K): one shared kernel k
puts K_c = K_x in every block (K_x (N, N), one Gram matrix for all classes), a kernel of K outputs
(:class:`gpdsl.kernels.Separate`, whose gram is a stack (K, N, N)) puts its own K_c in block c.
R&W write every formula with a per-class K_c, so each holds for both; below, the shared case reads
K_c = K_x throughout.

Latent arrays are (N, K): F[:, c] = f_c.  At f, pi = softmax(f) per row (N, K), the gradient of
log p(y | f) is g = Y - pi (Y one-hot) and the negative Hessian is W = D - Pi Pi^T with
D = diag(pi) (NK x NK, class-major) and Pi = D R, R = (I_N; ...; I_N) the NK x N stack: block
(c, c') of W is diag(pi_c) delta_cc' - diag(pi_c pi_c').  W is positive semi-definite and
singular (W (1_K (x) e_i) = 0), so the algorithms never form W^-1 or W^1/2.

* Newton (Algorithm 3.3): with B_c = I + D_c^1/2 K_c D_c^1/2 = L_c L_c^T,
  E_c = D_c^1/2 B_c^-1 D_c^1/2 = (K_c + D_c^-1)^-1 and M M^T = sum_c E_c (= R^T E R),
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
* Gradients (Algorithm 5.2): for C_c = dK_c / d theta (block c of dK / d theta),
  d log q / d theta = 1/2 sum_c a_c^T C_c a_c - 1/2 sum_c tr(Rm_cc C_c) + sum_c u_c^T C_c g_c, where
  the last term is the implicit one through the mode: d f_hat = (I + K W)^-1 C g and
  s2 = -1/2 d log|I + K W| / d f_hat, u = (I - Rm K) s2.  Per row i with the K x K block
  S_i of Sigma = (K^-1 + W)^-1 (the posterior covariance of f_i), v = diag S_i and
  d pi_c / d f_e = pi_c (delta_ce - pi_e):
  s2_ie = -1/2 tr(S_i dW_i / d f_ie) = -1/2 pi_e (v_e - pi^T v - 2 (S_i pi)_e + 2 pi^T S_i pi).
  S_i[c, c'] = delta_cc' ((K_c)_ii - (K_c E_c K_c)_ii) + (T_c^T T_c')_ii with T_c = M^-1 E_c K_c.
  The adjoint of K_c is G_c = 1/2 a_c a_c^T - 1/2 Rm_cc + sym(u_c g_c^T), Rm_cc = E_c -
  (M^-1 E_c)^T (M^-1 E_c).  A shared K_x takes their sum G = 1/2 A A^T - 1/2 sum_c Rm_cc +
  sym(U g^T) (A, U, g the (N, K) arrays), sum_c Rm_cc = M M^T - sum_c (M^-1 E_c)^T (M^-1 E_c),
  and one kernel VJP carries it to the hyperparameters (summed over the classes); a stack of K
  kernels takes the stack (G_1, ..., G_K) (K, N, N) in its one VJP.
* Predictions (Algorithm 3.4): with k^c_* = k_c(X, x_*), mean_*c = k^c_*^T a_c (= k^c_*^T (y_c -
  pi_c) at the mode) and cov_*(c, c') = delta_cc' (k^c_** - k^c_*^T E_c k^c_*) + (M^-1 E_c k^c_*)^T
  (M^-1 E_c' k^c'_*) (R&W eq. 3.43 with Rm).  With L_c L_c^T = K_c (+ jitter from the ladder) and
  b_*c = L_c^-1 k^c_*, the :class:`~gpdsl.methods.common.PredictiveState` for K > 1 holds weights
  (L_c^T a_c)_c (N, K), correction[c] = L_c^T E_c L_c and coupling[c] = M^-1 E_c L_c (K, N, N):
  exact whatever jitter L_c needed (k^c_* = L_c b_*c and L_c^-T L_c^T = I).  ``chol`` is L_x (N, N)
  for a shared kernel, the stack (L_1, ..., L_K) (K, N, N) for one kernel per class.  q(f_c) at X:
  mean f_hat[:, c], covariance K_c - K_c Rm_cc K_c (the block of Sigma).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import blas, lapack

from .. import threads
from ..linalg import cholesky, solve_lower, solve_upper_t, whiten
from .common import Evaluation, LocalStateFormat, PredictiveState
from .laplace import _rounding_step


@dataclass
class ModeState:
    """The warm start of the next evaluation and the local state a posterior keeps: a = K^-1 f_hat
    (N, K) at the mode (``weights``; the start at new hyperparameters is K_new a, with nothing
    solved against an ill-conditioned K) and the Newton steps of the evaluation (``sweeps``).

    Parameters
    ----------
    weights : ndarray, shape (N, K)
    sweeps : int, default 0
    converged : bool, default True
        Newton reached the mode (an evaluation that does not raises FloatingPointError).
    """

    weights: np.ndarray
    sweeps: int = 0
    converged: bool = True


def _export_mode(state, total_steps):
    return ({"laplace_mode_weights": (("obs", "class"), state.weights)},
            {"newton_steps_final": state.sweeps, "newton_total_steps": total_steps})


def _load_mode(ds):
    return (ModeState(ds["laplace_mode_weights"].values, sweeps=int(ds.attrs["newton_steps_final"])),
            int(ds.attrs["newton_total_steps"]))


MODE_FORMAT = LocalStateFormat(
    "laplace_mode", {"laplace_mode_weights": (("obs", "class"), "float")},
    {"local_state": "str", "newton_steps_final": "count", "newton_total_steps": "count"}, _export_mode, _load_mode)


@dataclass
class _Newton:
    """The factors of the Newton system at class probabilities P (N, K) (module docstring):
    E (K, N, N) with E[c] = E_c (held as the Fortran-ordered E[c].T for LAPACK in place: its
    lower triangle, E[c]'s upper one, until :meth:`full` fills in the other), M the Cholesky
    factor of sum_c E_c and half_log_det
    = 1/2 log|I + K W| = sum_c sum log diag L_c + sum log diag M."""

    E: np.ndarray
    M: np.ndarray
    half_log_det: float
    symmetric: bool = False

    def solve_sum(self, v):
        """(sum_c E_c)^-1 v."""
        return solve_upper_t(self.M, solve_lower(self.M, v))

    def times_E(self, V):
        """(E_1 v_1, ..., E_K v_K) for V (N, K)."""
        return np.stack([blas.dsymv(1.0, self.E[c].T, V[:, c], lower=1) for c in range(V.shape[1])], axis=1)

    def apply_R(self, V):
        """Rm V for V (N, K): (Rm V)_c = E_c v_c - E_c (M M^T)^-1 sum_c' E_c' v_c'."""
        EV = self.times_E(V)
        t = self.solve_sum(EV.sum(axis=1))
        return EV - self.times_E(np.repeat(t[:, None], V.shape[1], axis=1))

    def full(self):
        """E with both triangles filled (in place)."""
        if not self.symmetric:
            lower = np.tril_indices(self.E.shape[1], -1)
            for Ec in self.E:
                Ec[lower] = Ec.T[lower]
            self.symmetric = True
        return self.E


def _block(Kx, c):
    """K_c: the shared prior covariance Kx (N, N), or block c of a stack Kx (K, N, N)."""
    return Kx if Kx.ndim == 2 else Kx[c]


def _times_K(Kx, V):
    """K V for the block-diagonal prior and V (N, K): (K_1 v_1, ..., K_K v_K), one product Kx V
    for a shared Kx (N, N), one per class for a stack Kx (K, N, N)."""
    if Kx.ndim == 2:
        return Kx @ V
    return np.matmul(Kx, V.T[:, :, None])[:, :, 0].T


def _factor(Kx, P):
    """:class:`_Newton` at class probabilities P (N, K) and the prior covariance Kx (N, N), or
    (K, N, N) one per class: per class B_c = L_c L_c^T (LAPACK potrf)
    and E_c = D_c^1/2 B_c^-1 D_c^1/2 from potri, in place in E[c].T and one triangle only (potrf
    of sum_c E_c reads no more): O(K N^3) with one N x N temporary.

    Raises
    ------
    FloatingPointError
        B_c or sum_c E_c not positive definite (in exact arithmetic they always are).
    """
    n, k = P.shape
    E = np.empty((k, n, n))
    half_log_det = 0.0
    diag = np.diag_indices(n)
    for c in range(k):
        sd = np.sqrt(P[:, c])
        scale = np.outer(sd, sd)
        B = np.multiply(_block(Kx, c), scale, out=E[c])
        B[diag] += 1.0
        L, info = lapack.dpotrf(B.T, lower=1, clean=0, overwrite_a=1)
        if info != 0:
            raise FloatingPointError("multi-class Laplace: B_c = I + D_c^1/2 K D_c^1/2 is not positive definite")
        half_log_det += float(np.sum(np.log(np.diag(L))))
        Binv, info = lapack.dpotri(L, lower=1, overwrite_c=1)
        if info != 0:
            raise FloatingPointError("multi-class Laplace: B_c is singular")
        Binv *= scale.T                # in place (scale is symmetric: scale.T has Binv's layout)
    M, info = lapack.dpotrf(E.sum(axis=0).T, lower=1, clean=1, overwrite_a=1)
    if info != 0:
        raise FloatingPointError("multi-class Laplace: sum_c E_c is not positive definite")
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
    Kx : ndarray, shape (N, N) or (K, N, N)
        The shared prior covariance, or one per class.
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
    steps : int
        The Newton steps taken.

    Raises
    ------
    FloatingPointError
        The mode was not reached in ``max_iter`` steps.
    """
    n, k = Kx.shape[-1], likelihood.n_latent
    Y = _one_hot(y, k)
    A, F = np.zeros((n, k)), np.zeros((n, k))
    psi = _psi(likelihood, y, A, F)
    if warm is not None:
        A_w = np.array(warm, dtype=float)
        if A_w.shape != (n, k):
            raise ValueError(f"multi-class Laplace: warm must have shape {(n, k)}, got {A_w.shape}")
        F_w = _times_K(Kx, A_w)
        psi_w = _psi(likelihood, y, A_w, F_w)
        if np.isfinite(psi_w) and psi_w > psi:
            A, F, psi = A_w, F_w, psi_w
    P = likelihood.class_probabilities(F)
    for steps in range(1, max_iter + 1):
        newton = _factor(Kx, P)
        G = Y - P
        PF = P * F
        b = PF - P * PF.sum(axis=1, keepdims=True) + G          # W f + g
        C = newton.times_E(_times_K(Kx, b))                      # E K b
        t = newton.solve_sum(C.sum(axis=1))
        step = b - C + newton.times_E(np.repeat(t[:, None], k, axis=1)) - A
        residual = np.max(np.abs(G - A), initial=0.0)
        for _ in range(60):            # halve until Psi rises (it is concave in a)
            A_try = A + step
            F_try = _times_K(Kx, A_try)
            psi_try = _psi(likelihood, y, A_try, F_try)
            P_try = likelihood.class_probabilities(F_try)
            if psi_try >= psi or _rounding_step(psi, psi_try, residual, Y - P_try - A_try):
                break
            step = 0.5 * step
        else:
            return A, F, psi, P, newton, steps   # no rise left even for a tiny step: at the mode
        gain = psi_try - psi
        A, F, psi, P = A_try, F_try, psi_try, P_try
        if gain < tol:
            return A, F, psi, P, None, steps
    raise FloatingPointError(f"multi-class Laplace: Newton's method did not reach the mode in {max_iter} steps")


def evaluate(kernel, likelihood, X, y, *, tol, max_iter, need_grad=True, need_state=False, warm=None):
    """Multi-class (softmax) Laplace log evidence, its kernel gradients and posterior (dense).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function shared by the K latent GPs, or one per latent GP
        (``n_outputs`` K, gram (K, N, N): :class:`gpdsl.kernels.Separate`); bound, so its
        gradients come back qualified, ``"kernel.<name>"``.
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
    warm : ModeState, optional
        ``Evaluation.warm`` of a previous evaluation (a = K^-1 f_hat): Newton starts there when
        its Psi beats that of f = 0.

    Returns
    -------
    gpdsl.methods.common.Evaluation
        log q(y), its gradients (a shared kernel's summed over the classes), dZ None, the jitter 0 (the Newton
        factors need none), the state, ``warm`` (:class:`ModeState`, a = K^-1 f_hat), and the pseudo-data
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
    Kx = kernel.gram(X, X)                                     # (N, N) shared, or (K, N, N) per class
    per_class = Kx.ndim == 3
    n, k = Kx.shape[-1], likelihood.n_latent
    A, F, psi, P, newton, steps = find_mode(likelihood, Kx, y, tol, max_iter,
                                            None if warm is None else warm.weights)
    if newton is None:
        newton = _factor(Kx, P)
    log_evidence = psi - newton.half_log_det
    if not np.isfinite(log_evidence):
        raise FloatingPointError("multi-class Laplace: non-finite evidence")
    G = _one_hot(y, k) - P                                     # d log p / d f at the mode
    w = P - P * P
    grads, state = {}, None
    if need_grad or need_state:
        E, M = newton.full(), newton.M
        T = np.empty((k, n, n))                                # M^-1 E_c K_c
        kek = np.empty((n, k))                                 # diag(K_c E_c K_c)
        if per_class:
            adj = np.empty((k, n, n))                          # G_c, its -1/2 Rm_cc first
        else:
            sum_UU = np.zeros((n, n))                          # sum_c (M^-1 E_c)^T (M^-1 E_c)
        if need_state:
            LK = (np.stack([cholesky(Kx[c], None, what=f"K_{c}")[0] for c in range(k)]) if per_class
                  else cholesky(Kx, None, what="K")[0])
            correction, coupling, q_cov = (np.empty((k, n, n)) for _ in range(3))
        for c in range(k):
            Kc = _block(Kx, c)
            U = whiten(M, E[c])                                # M^-1 E_c
            EK = E[c] @ Kc
            T[c] = whiten(M, EK)
            kek[:, c] = np.einsum("ij,ij->j", Kc, EK)
            if need_grad and per_class:
                adj[c] = -0.5 * (E[c] - U.T @ U)
            elif need_grad:
                sum_UU = blas.dsyrk(1.0, U, beta=1.0, c=sum_UU, trans=1, lower=1, overwrite_c=1)
            if need_state:
                Lc = _block(LK, c)
                corr = Lc.T @ (E[c] @ Lc)
                correction[c] = 0.5 * (corr + corr.T)
                coupling[c] = U @ Lc
                cov = Kc - Kc @ EK + T[c].T @ T[c]
                q_cov[c] = 0.5 * (cov + cov.T)
    if need_grad:
        # The K x K blocks S_i of Sigma = (K^-1 + W)^-1 at the training inputs.
        S = np.einsum("cji,dji->icd", T, T)
        S[:, np.arange(k), np.arange(k)] += np.diagonal(Kx, axis1=-2, axis2=-1).T.reshape(n, -1) - kek
        v = S[:, np.arange(k), np.arange(k)]
        Sp = np.einsum("icd,id->ic", S, P)
        pSp = np.sum(P * Sp, axis=1, keepdims=True)
        s2 = -0.5 * P * (v - np.sum(v * P, axis=1, keepdims=True) - 2.0 * Sp + 2.0 * pSp)
        u = s2 - newton.apply_R(_times_K(Kx, s2))              # (I - Rm K) s2
        if per_class:
            for c in range(k):
                adj[c] += 0.5 * np.outer(A[:, c], A[:, c]) + np.outer(u[:, c], G[:, c])
            grads, _ = kernel.vjp(X, X, 0.5 * (adj + np.transpose(adj, (0, 2, 1))))
        else:
            sum_UU = np.tril(sum_UU) + np.tril(sum_UU, -1).T
            sum_R = M @ M.T - sum_UU                           # sum_c Rm_cc
            adj = 0.5 * (A @ A.T) - 0.5 * sum_R + u @ G.T
            grads, _ = kernel.vjp(X, X, 0.5 * (adj + adj.T))
    if need_state:
        weights = _times_K(np.transpose(LK, (0, 2, 1)) if per_class else LK.T, A)     # (L_c^T a_c)_c
        state = PredictiveState(Z=X, weights=weights, correction=correction, q_mean=F.copy(), q_cov=q_cov,
                                chol=LK, coupling=coupling)
    return Evaluation(log_evidence=float(log_evidence), grads=grads, dZ=None, jitter=0.0, state=state,
                      warm=ModeState(A.copy(), sweeps=steps), pseudo_data=(w, G + w * F))
