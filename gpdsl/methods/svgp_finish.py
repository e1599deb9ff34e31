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

The coordinates.  The whitened q_k = N(m_k, R_k R_k^T) is moved as

    m_k = m0_k + R0_k z_k,        R_k = R0_k T_k,

z_k in R^M and T_k lower-triangular (from T_k = I), R0 the run's q_sqrt at the start.  Near q's
optimum S_k^-1 = I + A W_k A^T, so in z the bound's curvature is R0_k^T S_k^-1 R0_k, about I where
the steps' S is near the optimum's: the data-informed directions of m (curvature up to N per
unit) are on the scale of the prior-dominated ones.  The chain rule gives

    dF/dz_k = R0_k^T dF/dm_k,     dF/dT_k = lower(R0_k^T dF/dR_k),

F the negative objective.  The diagonal of T is bounded below by :data:`DIAGONAL_FLOOR` (log|R_ii|
enters the KL: R_ii = 0 is a barrier the line search must not cross); the hyperparameters are the
fit's free log-space vector u.

The stop.  The finish stops at the first evaluated point whose largest gradient entry, as
:func:`gpdsl.methods.stochastic.full_pass_check` measures it (the hyperparameters per e-fold, Z
per input standard deviation, q's entries in whitened units), is within
:func:`gpdsl.diagnostics.gradient_tolerance` (N): the same rule that sets ``converged``.  Otherwise
it returns the evaluated point of the largest objective after ``max_evaluations`` passes.

Measured (issue 46; ``benchmarks/exp_finish.py``, ``benchmarks/HISTORY.md``; robust-max
``GPClassifier()`` declarations, M = 100 optimised, one thread, on a shared 2-core machine at load
2-8): from the steps' end on digits (1,437 rows, K = 10: 58,300 variables; objective -719.8,
largest gradient 125 against 1.44) the finish reached the tolerance after 550 to 1,944 evaluations
of 0.05-0.08 CPU s, +142 nats, test NLPD 0.132 against the steps' end's 0.087; on penbased (9,892
rows) after 824 evaluations of about 0.3 s, NLPD 0.0096 against 0.0115.  Each block alone
converges in about ten evaluations (digits: q at fixed hyperparameters, 53 nats; hyperparameters
at fixed q, 22 nats), but alternating them zig-zags (15 rounds of both, 390 evaluations: -589.4,
gradient still 14): the length-scale and the whitened q are strongly coupled, since a change of
the kernel changes L and so every row's latent mean at fixed m.  q_mu and q_sqrt as they are (no
R0) took 840 evaluations on digits, the preconditioned coordinates 550 to 590 in the same
experiment; the test's maximum over some 10^4 entries is reached at a dip of a noisy tail, so the
count varies from run to run.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: The lower bound on the diagonal of T (R = R0 T keeps the sign of R0's diagonal and stays off 0).
DIAGONAL_FLOOR = 1e-6
#: L-BFGS-B's memory (pairs kept): 10 and 50 took 590 and 550 evaluations on digits (20: 1,874 in a
#: whole fit; 10: 1,944), no clear gain from more.
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
    inducing values (the module docstring).

    Parameters
    ----------
    u0 : ndarray, shape (P,)
        The hyperparameters' free log-space vector at the start.
    q0 : dict of str to ndarray
        ``variational.q_mu`` (M, K) and ``variational.q_sqrt`` (K, M (M + 1) / 2) at the start.
    """

    def __init__(self, u0, q0):
        self.u0 = np.array(u0, dtype=float)
        self.m0 = np.array(q0["variational.q_mu"], dtype=float)
        self.M, self.K = self.m0.shape
        self.rows, self.cols = np.tril_indices(self.M)
        self.R0 = self._unpacked(np.asarray(q0["variational.q_sqrt"], dtype=float))
        self.P, self.n_z = self.u0.size, self.M * self.K

    def _unpacked(self, packed):
        R = np.zeros((self.K, self.M, self.M))
        R[:, self.rows, self.cols] = packed
        return R

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
        """(u, q) at x.

        Parameters
        ----------
        x : ndarray

        Returns
        -------
        u : ndarray, shape (P,)
        q : dict of str to ndarray
        """
        z = x[self.P:self.P + self.n_z].reshape(self.K, self.M)
        T = self._unpacked(x[self.P + self.n_z:].reshape(self.K, -1))
        m = self.m0 + np.einsum("kij,kj->ik", self.R0, z)
        R = self.R0 @ T
        return x[:self.P].copy(), {"variational.q_mu": m, "variational.q_sqrt": R[:, self.rows, self.cols]}

    def gradient(self, du, q_gradient):
        """dF/dx from F's gradient d F / du and the objective's in q (F = -objective).

        Parameters
        ----------
        du : ndarray, shape (P,)
            dF/du.
        q_gradient : dict of str to ndarray
            d objective / d ``variational.q_mu`` and d objective / d ``variational.q_sqrt``.

        Returns
        -------
        ndarray, the shape of x
        """
        dm = -np.asarray(q_gradient["variational.q_mu"], dtype=float)                  # (M, K)
        dR = self._unpacked(-np.asarray(q_gradient["variational.q_sqrt"], dtype=float))
        dz = np.einsum("kij,ik->kj", self.R0, dm)
        dT = np.transpose(self.R0, (0, 2, 1)) @ dR
        return np.concatenate([np.asarray(du, dtype=float), dz.ravel(), dT[:, self.rows, self.cols].ravel()])


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


def finish(check, u0, q0, max_evaluations, callback=None):
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

    Returns
    -------
    FinishResult
        The first point within the tolerance, or else the evaluated point of the largest objective.
    """
    from scipy import optimize as sp_optimize     # here, not at import (issue 46: import gpdsl within 0.7 s)

    if int(max_evaluations) < 1:
        raise ValueError(f"finish: max_evaluations must be at least 1, got {max_evaluations!r}")
    coordinates = Coordinates(u0, q0)
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
        return -point.objective, coordinates.gradient(point.gradient, point.q_gradient)

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
