"""A deterministic finish for a minibatch SVGP run of K latent functions: L-BFGS-B on the
hyperparameters and q together, on the full-batch bound with its full analytic gradient
(issue 46: "a default fit that says converged is converged on the full objective").

Why jointly.  The full-batch polish of :mod:`gpdsl.methods.stochastic` runs L-BFGS-B on the
hyperparameters with q moved to its optimum by natural steps at every evaluation; for a K-class
likelihood those steps converge slowly or not at all (robust-max is not log-concave: its sites
are flat where the labelled latent dominates and of negative precision where it does not), so
that polish stopped at its first evaluation.  Here q is an optimisation variable like the
hyperparameters: one evaluation is one pass over the N rows (:func:`gpdsl.methods.svgp.evaluate`
with its gradient in q_mu and the packed q_sqrt), and every evaluated point is a point of the
objective, with no inner iteration whose path the line search could see.

The coordinates.  q is carried along the hyperparameters: with L = chol(K_uu + jitter) at u (one
factor per kernel block) and L0 at the start, q is held in u-space, mu_k = L0 m0_k and C_k =
L0 R0_k, and moved from there as

    m_k = L^-1 mu0_k + B_k z_k,        R_k = B_k T_k,        B_k = L^-1 C_k,

z_k in R^M and T_k lower-triangular (from z = 0, T = I: the run's m0, R0).  In the whitened (m, R)
a change of the kernel changes L and so every row's latent mean at fixed m: the length-scale and
q are strongly coupled, and L-BFGS-B zig-zags between them (below).  Held in u-space, q(u) stays
the distribution it was when the kernel moves.  Near q's optimum S_k^-1 = I + A W A^T, so in z the
bound's curvature is B^T S^-1 B, about I where the steps' S is near the optimum's: the
data-informed directions of m (curvature up to N per unit) are on the scale of the prior-dominated
ones.  The chain rule (:meth:`Coordinates.gradient`) gives dF/dz_k = B_k^T dF/dm_k,
dF/dT_k = lower(B_k^T dF/dR_k), and dF/du at fixed whitened q plus the pullback through L of its
adjoint Lbar = -L^-T sum_k (g_k m_k^T + G_k R_k^T) (F the negative objective, g and G its
objective's gradient in m and R; the Cholesky adjoint of :func:`gpdsl.methods.svgp._gradients`).
The diagonal of T is bounded below by :data:`DIAGONAL_FLOOR` (log|R_ii| enters the KL: R_ii = 0 is
a barrier the line search must not cross); the hyperparameters are the fit's free log-space vector u.

The stop.  The finish stops at the first evaluated point whose largest gradient entry, as
:func:`gpdsl.methods.stochastic.full_pass_check` measures it (the hyperparameters per e-fold, Z
per input standard deviation, q's entries in whitened units), is within
:func:`gpdsl.diagnostics.gradient_tolerance` (N): the same rule that sets ``converged``.  Otherwise
it returns the evaluated point of the largest objective after ``max_evaluations`` passes.

Measured (issue 46; ``benchmarks/exp_finish.py``, ``benchmarks/HISTORY.md``; robust-max
``GPClassifier()`` declarations, M = 100 optimised, one thread, on a shared 2-core machine at load
2-8): from the steps' end on digits (1,437 rows, K = 10: 58,300 variables; objective -719.8,
largest gradient 125 against 1.44) q carried in u-space reached the tolerance after 313 to 339
evaluations of about 0.06 CPU s (+140 nats; test NLPD 0.134 against the steps' end's 0.087); with
the whitened q held (z, T about R0 alone) 550 to 1,944, and with q_mu and q_sqrt as they are 840.
Each block alone converges in about ten evaluations (q at fixed hyperparameters, 53 nats;
hyperparameters at fixed q, 22 nats), but alternating them zig-zags (15 rounds of both, 390
evaluations: -589.4, gradient still 14).  The test's maximum over some 10^4 entries is reached
at a dip of a noisy tail, so the count varies from run to run.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: The lower bound on the diagonal of T (R = B T keeps the sign of B's diagonal and stays off 0).
DIAGONAL_FLOOR = 1e-6
#: L-BFGS-B's memory (pairs kept): with the whitened q held, 10 and 50 took 590 and 550 evaluations
#: on digits (20: 1,874 in a whole fit; 10: 1,944), no clear gain from more.
MEMORY = 10


class FinishPoint(NamedTuple):
    """One evaluation of the finish: what ``check`` returns at (u, q), read by :func:`finish`.

    Parameters
    ----------
    objective : float
        The full objective (bound plus log prior).
    largest : float
        Its largest gradient entry in the units of the convergence test.
    tolerance : float
        The convergence test's tolerance.
    gradient : ndarray, shape (P,)
        d(-objective)/du on the free log-space vector.
    q_gradient : dict of str to ndarray
        d objective / d ``variational.q_mu`` (M, K) and d objective / d ``variational.q_sqrt``
        (K, M (M + 1) / 2).
    """

    objective: float
    largest: float
    tolerance: float
    gradient: np.ndarray
    q_gradient: dict


class Coordinates:
    """The finish's coordinates x = (u, z, T) around a start (u0, q0), K latent functions of M
    inducing values (the module docstring), with q carried along the hyperparameters where
    ``transport`` is given.

    Parameters
    ----------
    u0 : ndarray, shape (P,)
        The hyperparameters' free log-space vector at the start.
    q0 : dict of str to ndarray
        ``variational.q_mu`` (M, K) and ``variational.q_sqrt`` (K, M (M + 1) / 2) at the start.
    transport : callable, optional
        ``transport(u) -> (Li, pullback)``: Li (G, M, M) the inverses of the factors L_g of K_uu
        at u (G = 1 for a kernel shared by the classes, K for one each), and ``pullback(Phi)``
        the gradient on u of the objective through L alone for Phi = L^T Lbar (G, M, M), Lbar
        its adjoint.  None: L = I, q's whitened (m, R) held when u moves.
    """

    def __init__(self, u0, q0, transport=None):
        self.u0 = np.array(u0, dtype=float)
        m0 = np.array(q0["variational.q_mu"], dtype=float)
        self.M, self.K = m0.shape
        self.rows, self.cols = np.tril_indices(self.M)
        R0 = self._unpacked(np.asarray(q0["variational.q_sqrt"], dtype=float))
        self.P, self.n_z = self.u0.size, self.M * self.K
        self.transport = transport
        # q in u-space, mu_k = L0 m0_k and C_k = L0 R0_k, held while u moves.
        L0 = np.eye(self.M)[None] if transport is None else np.linalg.inv(transport(self.u0)[0])
        self.mu0 = np.einsum("kij,jk->ik", self._blocks(L0), m0)
        self.C0 = self._blocks(L0) @ R0
        self._at = None

    def _unpacked(self, packed):
        R = np.zeros((self.K, self.M, self.M))
        R[:, self.rows, self.cols] = packed
        return R

    def _blocks(self, stack):
        """A (G, M, M) stack as one (M, M) block a class (K, M, M)."""
        return np.broadcast_to(stack, (self.K, self.M, self.M)) if stack.shape[0] == 1 else stack

    def start(self):
        """x at (u0, q0): z = 0, T = I.

        Returns
        -------
        ndarray, shape (P + M K + K M (M + 1) / 2,)
        """
        T = np.zeros((self.K, self.rows.size))
        T[:, self.rows == self.cols] = 1.0
        return np.concatenate([self.u0, np.zeros(self.n_z), T.ravel()])

    def bounds(self):
        """L-BFGS-B's bounds: T's diagonal at least :data:`DIAGONAL_FLOOR`, the rest free.

        Returns
        -------
        list of (float or None, float or None)
        """
        diagonal = np.tile(self.rows == self.cols, self.K)
        return ([(None, None)] * (self.P + self.n_z)
                + [(DIAGONAL_FLOOR, None) if d else (None, None) for d in diagonal])

    def point(self, x):
        """(u, q) at x: m_k = L_k^-1 mu0_k + B_k z_k, R_k = B_k T_k, B_k = L_k^-1 C0_k, L at u.

        Parameters
        ----------
        x : ndarray

        Returns
        -------
        u : ndarray, shape (P,)
        q : dict of str to ndarray
        """
        u = x[:self.P].copy()
        Li, pullback = (np.eye(self.M)[None], None) if self.transport is None else self.transport(u)
        shared = Li.shape[0] == 1
        Li = self._blocks(Li)
        z = x[self.P:self.P + self.n_z].reshape(self.K, self.M)
        T = self._unpacked(x[self.P + self.n_z:].reshape(self.K, -1))
        B = Li @ self.C0
        m = np.einsum("kij,jk->ik", Li, self.mu0) + np.einsum("kij,kj->ik", B, z)
        R = B @ T
        self._at = (x.copy(), B, m, R, pullback, shared)
        return u, {"variational.q_mu": m, "variational.q_sqrt": R[:, self.rows, self.cols]}

    def gradient(self, x, du, q_gradient):
        """dF/dx at x (the point last mapped by :meth:`point`) from F's gradient dF/du at fixed
        whitened q and the objective's in q (F = -objective):

            dF/dz_k = B_k^T dF/dm_k,   dF/dT_k = lower(B_k^T dF/dR_k),
            dF/du  += -pullback(Phi),  Phi_g = -sum_k (g_mk m_k^T + G_Rk R_k^T)

        (g, G the objective's gradient in m_k and R_k, the sum over the classes of block g): with
        m = L^-1 mu and R = L^-1 C, dm = -L^-1 dL m, so Lbar = -L^-T (g m^T + G R^T).

        Parameters
        ----------
        x : ndarray
        du : ndarray, shape (P,)
            dF/du at fixed whitened q.
        q_gradient : dict of str to ndarray
            d objective / d ``variational.q_mu`` and d objective / d ``variational.q_sqrt``.

        Returns
        -------
        ndarray, the shape of x
        """
        at, B, m, R, pullback, shared = self._at
        if not np.array_equal(at, x):
            raise ValueError("Coordinates.gradient: x is not the point last mapped by point()")
        g_m = np.asarray(q_gradient["variational.q_mu"], dtype=float)                  # (M, K)
        G_R = self._unpacked(np.asarray(q_gradient["variational.q_sqrt"], dtype=float))
        dz = -np.einsum("kij,ik->kj", B, g_m)
        dT = -np.transpose(B, (0, 2, 1)) @ G_R
        du = np.array(du, dtype=float)
        if pullback is not None:
            Phi = -(np.einsum("ik,jk->kij", g_m, m) + G_R @ np.transpose(R, (0, 2, 1)))
            du -= pullback(Phi.sum(axis=0, keepdims=True) if shared else Phi)
        return np.concatenate([du, dz.ravel(), dT[:, self.rows, self.cols].ravel()])


class FinishResult(NamedTuple):
    """What :func:`finish` ends with.

    Parameters
    ----------
    u : ndarray, shape (P,)
    q : dict of str to ndarray
    point : FinishPoint
        The evaluation at (u, q).
    evaluations : int
        Passes over the data (L-BFGS-B's evaluations, line-search trial points included).
    converged : bool
        Whether ``point.largest <= point.tolerance``.
    how : str
        How it ended, for the run's message.
    """

    u: np.ndarray
    q: dict
    point: FinishPoint
    evaluations: int
    converged: bool
    how: str


class _Converged(Exception):
    """Raised out of L-BFGS-B at the first point within the tolerance."""


def finish(check, u0, q0, max_evaluations, callback=None, transport=None):
    """L-BFGS-B on the hyperparameters and q together from (u0, q0) until an evaluated point's
    largest gradient entry is within the tolerance or ``max_evaluations`` passes are spent (the
    module docstring).

    Parameters
    ----------
    check : callable
        ``check(u, q) -> FinishPoint``: the full objective and its gradient at (u, q), one pass
        over the data; raises ``numpy.linalg.LinAlgError`` or ``FloatingPointError`` at a
        numerically impossible point (treated as +inf, the line search steps back).
    u0 : ndarray, shape (P,)
    q0 : dict of str to ndarray
        ``variational.q_mu`` (M, K) and ``variational.q_sqrt`` (K, M (M + 1) / 2).
    max_evaluations : int
        The cap on the passes (at least 1).
    callback : callable, optional
        Called after each finite evaluation with ``{"evaluation", "objective", "largest"}``.
    transport : callable, optional
        As :class:`Coordinates`': q carried along the hyperparameters (held in u-space).

    Returns
    -------
    FinishResult
        The first point within the tolerance, or else the evaluated point of the largest objective.
    """
    from scipy import optimize as sp_optimize     # here, not at import (issue 46: import gpdsl within 0.7 s)

    if int(max_evaluations) < 1:
        raise ValueError(f"finish: max_evaluations must be at least 1, got {max_evaluations!r}")
    coordinates = Coordinates(u0, q0, transport)
    best, count = {}, [0]

    def negative(x):
        count[0] += 1
        u, q = coordinates.point(x)
        try:
            point = check(u, q)
        except (np.linalg.LinAlgError, FloatingPointError):
            return np.inf, np.zeros_like(x)
        if not np.isfinite(point.objective):
            return np.inf, np.zeros_like(x)
        if callback is not None:
            callback({"evaluation": count[0], "objective": point.objective, "largest": point.largest})
        if not best or point.objective > best["point"].objective or point.largest <= point.tolerance:
            best.update(u=u, q=q, point=point)
        if point.largest <= point.tolerance:
            raise _Converged
        return -point.objective, coordinates.gradient(x, point.gradient, point.q_gradient)

    try:
        run = sp_optimize.minimize(negative, coordinates.start(), jac=True, method="L-BFGS-B",
                                   bounds=coordinates.bounds(),
                                   options={"maxfun": int(max_evaluations), "maxiter": int(max_evaluations),
                                            "maxcor": MEMORY})
        how = f"L-BFGS-B ended ({run.message}) after {count[0]} evaluations"
    except _Converged:
        how = f"within the tolerance after {count[0]} evaluations"
    if not best:
        raise FloatingPointError("finish: no evaluation was finite")
    point = best["point"]
    converged = point.largest <= point.tolerance
    if not converged:
        how += f"; its best point kept (largest gradient {point.largest:.3g}, tolerance {point.tolerance:.3g})"
    return FinishResult(best["u"], best["q"], point, count[0], converged, how)


__all__ = ["finish", "Coordinates", "FinishPoint", "FinishResult", "DIAGONAL_FLOOR", "MEMORY"]
