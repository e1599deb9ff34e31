"""How a fit ended: one small record on every posterior (``Posterior.diagnostics``).

A fit ends by one stopping rule (:data:`STOP_REASONS`), after some iterations, at a point where
the objective still has some gradient, having perhaps reached a cap, used a jitter, walked up an
evidence ridge, run a method's own local iteration (EP/QP sweeps, Pólya-Gamma c updates, natural
steps on q), a re-selection loop or a subsample.  :class:`FitDiagnostics` holds all of that, and
``converged`` is derived from it by one rule (:func:`converged_rule`), so that a posterior never
says "converged" where one of its parts did not.

The gradient test is the one new computation: the largest entry of the objective's gradient at the
optimum, each entry taken in the units the optimiser moves (log of a positive hyperparameter,
a real hyperparameter itself, an inducing input's coordinate in units of that input column's
standard deviation, so that rescaling X changes nothing), must be at most
``GRAD_TOL_PER_POINT * max(N, GRAD_TOL_MIN_POINTS)`` nats.  The evidence of N points and its
curvature in those units grow in proportion to N, so this bounds the gain a Newton step could
still make to about ``GRAD_TOL_PER_POINT**2 * N / 2`` nats over the curvature per point: far
below what changes predictions, far above the rounding of an objective summed over N points.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass, field, fields

import numpy as np

# Why a hyperparameter optimisation ended.
STOP_REASONS = {
    "gradient": "SciPy's projected-gradient test (L-BFGS-B pgtol)",
    "objective_change": "SciPy's relative-reduction test on the objective (L-BFGS-B factr)",
    "plateau": "gpdsl's plateau rule (gpdsl.fitting.PLATEAU_WINDOW)",
    "stochastic_rule": "the minibatch optimiser's stopping rule on its smoothed objective",
    "max_iter": "the iteration (or evaluation) cap ran out",
    "line_search": "L-BFGS-B's line search could not find a better point",
    "outer_loop": "QP's Algorithm 1 outer loop (its own convergence test)",
    "not_optimised": "nothing to optimise: fit(optimize=False) or no free hyperparameter",
    "tolerance": "the largest gradient entry met gpdsl's tolerance (fit(subsample=n, refine=True) on all rows)",
    "unrecorded": "read from a file written before gpdsl recorded it",
}
# The stops that are convergence tests; every other one is a failure or a cap.
CONVERGED_STOPS = frozenset({"gradient", "objective_change", "plateau", "stochastic_rule", "outer_loop",
                             "not_optimised", "tolerance"})
# Stops whose convergence does not rest on the final gradient: QP's Algorithm 1 zeroes the gradient
# of eq. 4 at fixed sites (not of the evidence it reports), and an unoptimised fit claims no
# optimum.  A stochastic run's stop is confirmed by the full objective's gradient from one pass
# over the data (gpdsl.methods.stochastic.full_pass_check; issue 45), so it is not among them.
GRADIENT_FREE_STOPS = frozenset({"not_optimised", "outer_loop"})
# Caps that end a fit unconverged when reached; "max_m" (the selection's size cap) limits the model,
# not its optimisation, so it is recorded and warned about but leaves ``converged`` alone.
CONVERGENCE_CAPS = frozenset({"max_iter", "max_reinit", "max_sweeps", "max_outer"})

GRAD_TOL_PER_POINT = 1e-3
GRAD_TOL_MIN_POINTS = 100
# An evidence whose estimated rounding error (Evaluation.rounding) exceeds this many nats is
# flagged and warned about (EvidenceRoundingWarning): it cannot rank models or starts, and an
# optimiser that climbed it may have climbed noise.
EVIDENCE_ROUNDING_TOL = 1.0


class EvidenceRoundingWarning(UserWarning):
    """The reported log evidence is dominated by rounding: its estimated rounding error
    (``FitDiagnostics.evidence_rounding``) exceeds :data:`EVIDENCE_ROUNDING_TOL` nats."""


def warn_noisy_evidence(model, diagnostics, stacklevel=5):
    """Warn (:class:`EvidenceRoundingWarning`) when the record's evidence is rounding noise;
    returns the record.

    Parameters
    ----------
    model : gpdsl.Model
        The fitted model (its inference method names the warning).
    diagnostics : FitDiagnostics
        The fit's record.
    stacklevel : int, default 5
        Passed to :func:`warnings.warn` (the user's ``fit`` call).

    Returns
    -------
    FitDiagnostics
        ``diagnostics``.
    """
    rounding = diagnostics.evidence_rounding
    if rounding > EVIDENCE_ROUNDING_TOL:
        warnings.warn(f"{type(model.inference).__name__}: the log evidence is dominated by rounding: its "
                      f"estimated rounding error is {rounding:.3g} nats (ill-conditioned factors; jitter "
                      f"{diagnostics.jitter:g}), "
                      "so the number cannot rank models and the optimiser may have followed noise; fix the jitter "
                      "(e.g. VFE(jitter=1e-6)) or bound the kernel variance with a prior "
                      "(post.diagnostics.evidence_rounding records it)", EvidenceRoundingWarning,
                      stacklevel=stacklevel)
    return diagnostics


def gradient_tolerance(n_points):
    """The largest final gradient entry (nats per unit of the optimiser's coordinates) a converged
    fit of ``n_points`` rows may have (see the module docstring).

    Parameters
    ----------
    n_points : int
        N, the number of rows the objective sums over.

    Returns
    -------
    float
    """
    return GRAD_TOL_PER_POINT * max(int(n_points), GRAD_TOL_MIN_POINTS)


def largest_gradient(table, grad, X, scale=None):
    """The largest entry of the objective's gradient in scale-free units, and its parameter.

    Parameters
    ----------
    table : gpdsl.parameters.ParameterTable
        The fit's parameters (its ``free`` entries order ``grad``).
    grad : ndarray, shape (P,)
        d objective / d u, u the optimiser's free vector (log of positive entries).
    X : ndarray or Dask array, shape (N, D)
        The training inputs: an inducing input's gradient is multiplied by its column's standard
        deviation (so that it is per standard deviation moved, as the others are per e-fold).  A
        multi-output model's X has the output index as an extra last column, which inducing
        inputs shared by the outputs (M, D) do not have: their columns are X's first D.
    scale : ndarray, shape (D,) or (D + 1,), optional
        X's column standard deviations where the caller has them (an optimiser's objective
        computes them once: of a Dask X each is a pass over the data).

    Returns
    -------
    (float, str)
        The largest absolute entry and the name of its parameter (``(0.0, "")`` for an empty
        vector).
    """
    largest, name, offset = 0.0, "", 0
    for e in table.free:
        g = np.abs(np.asarray(grad[offset:offset + e.size], dtype=float)).reshape(e.value.shape)
        offset += e.size
        if e.name == "inducing.Z":
            column_scale = scale if scale is not None else np.asarray(np.std(X, axis=0), dtype=float)
            g = g * column_scale[None, :g.shape[1]]
        top = float(np.max(g, initial=0.0))
        if not np.isfinite(top) or top > largest:
            largest, name = top, e.name
            if not np.isfinite(top):
                break
    return largest, name


def converged_rule(stop_reason, grad_norm, grad_tol, caps_reached, local_converged, recorded=None):
    """``converged`` as every posterior reports it.

    A fit is converged when (1) its optimiser stopped by a convergence test
    (:data:`CONVERGED_STOPS`: SciPy's, the plateau rule, the stochastic rule, QP's outer loop, or
    nothing to optimise), (2) the final gradient is within its tolerance (except for stops in
    :data:`GRADIENT_FREE_STOPS`), (3) no cap in :data:`CONVERGENCE_CAPS` was reached, and (4) the
    method's own local iteration (EP/QP sweeps, c updates, natural steps on q), if any, converged.

    Parameters
    ----------
    stop_reason : str
        A key of :data:`STOP_REASONS`.
    grad_norm, grad_tol : float
        The final largest gradient entry and its tolerance (:func:`gradient_tolerance`).
    caps_reached : sequence of str
        The caps the fit reached.
    local_converged : bool or None
        The local iteration's verdict; None without one.
    recorded : bool or None
        For ``stop_reason="unrecorded"`` only: the flag the file's writer recorded, which is
        then the answer.

    Returns
    -------
    bool
    """
    if stop_reason == "unrecorded":
        return bool(recorded)
    if stop_reason not in CONVERGED_STOPS or local_converged is False:
        return False
    if any(cap in CONVERGENCE_CAPS for cap in caps_reached):
        return False
    return stop_reason in GRADIENT_FREE_STOPS or bool(grad_norm <= grad_tol)


@dataclass(frozen=True, eq=False)
class FitDiagnostics:
    """How a fit ended; ``converged`` is derived by :func:`converged_rule` (not an input).

    Parameters
    ----------
    stop_reason : str
        Which rule ended the hyperparameter optimisation (a key of :data:`STOP_REASONS`).
    message : str
        The optimiser's own words on it.
    n_iterations : int
        Optimiser iterations (L-BFGS-B iterations, minibatch steps), restarts of its memory
        included; for a minibatch run, its steps plus the full-batch polish's L-BFGS-B iterations,
        whether the polish was kept or not (``polish_iterations`` says how many).
    grad_norm : float
        Largest entry of the objective's final gradient in scale-free units
        (:func:`largest_gradient`).  For a minibatch run stopped by its stochastic rule, that of
        the full objective (hyperparameters and q) from the confirming pass over all rows at the
        kept end (:func:`gpdsl.methods.stochastic.full_pass_check`); for one that ran out of
        steps (no pass), or a record written before the pass, the norm of its smoothed (Adam
        first-moment) batch gradient, which no tolerance applies to; NaN where none was computed.
    grad_tol : float
        Its tolerance (:func:`gradient_tolerance` of the rows fitted), a minibatch run's confirming
        pass included; NaN for a minibatch run that ran out of steps, and in a record written
        before minibatch stops were confirmed (:attr:`unconfirmed_stop`).
    grad_name : str
        The parameter holding that entry ("" if none).
    optimizer_restarts : int
        Times L-BFGS-B was restarted with empty memory from its last point because SciPy's
        test had stopped it with a large gradient.
    caps_reached : tuple of str
        Caps the fit reached: "max_iter", "max_sweeps" (the local iteration), "max_outer" (QP's
        outer loop), "max_reinit", "max_m" (a selection stopped at its size cap).
    jitter : float
        Jitter used, as a multiple of the mean diagonal.
    ridge : str or None
        The hyperparameter that ran away along an evidence ridge (a kernel variance, or a bias
        that grew with it), or None.
    local_sweeps : int
        Sweeps (EP/QP), c updates (Pólya-Gamma) or natural steps over the whole fit (a minibatch
        fit's: those of its full-batch polish and final evaluation; its steps are ``n_iterations``).
    local_converged : bool or None
        Whether the method's local iteration converged at the final evaluation; None without one.
    clamped_sites : int
        EP/QP sites held at zero precision (the evidence gradient is then approximate).
    reinit_rounds : int
        Re-selection rounds run after the first fit (0 without the loop).
    reinit_stop : str or None
        Why the re-selection loop stopped, or None.
    small_m_replaced : int or None
        M of the moderate fixed-M round that replaced an automatic M far below its bound
        (``Model._probe_small_m``), or None.
    subsample : int or None
        Rows the hyperparameters were fitted on (``fit(subsample=n)``), or None.
    constant_model : bool
        The fit is no better than the constant model f = 0.
    recorded_converged : bool or None
        With ``stop_reason="unrecorded"`` (a file written before this record existed), the
        ``converged`` flag that file holds, which is then the answer.  With
        ``stop_reason="stochastic_rule"`` and no ``grad_tol`` (a minibatch record written before
        the stop was confirmed by a full pass, :attr:`unconfirmed_stop`), the ``True`` its writer
        recorded, which is not the answer: such a fit reads as ``converged=False``.  None
        otherwise.
    evidence_rounding : float
        An estimate of the rounding error of the reported log evidence in nats (the collapsed
        engines: :func:`gpdsl.methods.collapsed.evidence_rounding`); NaN where the method gives
        none (and in files written before it was recorded); inf where a perturbed evaluation
        failed on every jitter rung (JSON has no infinity: written as the string ``"inf"``).  Above
        :data:`EVIDENCE_ROUNDING_TOL` the fit warns (:class:`EvidenceRoundingWarning`) and the
        summary says so; ``converged`` does not read it.
    polish_iterations : int
        A minibatch fit's full-batch polish's L-BFGS-B iterations (included in ``n_iterations``,
        kept or not: its message says which); 0 without a polish (and in files written before).
    """

    stop_reason: str
    message: str = ""
    n_iterations: int = 0
    grad_norm: float = float("nan")
    grad_tol: float = float("nan")
    grad_name: str = ""
    optimizer_restarts: int = 0
    caps_reached: tuple = ()
    jitter: float = 0.0
    ridge: str | None = None
    local_sweeps: int = 0
    local_converged: bool | None = None
    clamped_sites: int = 0
    reinit_rounds: int = 0
    reinit_stop: str | None = None
    small_m_replaced: int | None = None
    subsample: int | None = None
    constant_model: bool = False
    recorded_converged: bool | None = None
    evidence_rounding: float = float("nan")
    polish_iterations: int = 0
    converged: bool = field(init=False)

    def __post_init__(self):
        if self.stop_reason not in STOP_REASONS:
            raise ValueError(f"FitDiagnostics: stop_reason must be one of {sorted(STOP_REASONS)}, "
                             f"got {self.stop_reason!r}")
        object.__setattr__(self, "caps_reached", tuple(dict.fromkeys(self.caps_reached)))
        object.__setattr__(self, "converged", converged_rule(self.stop_reason, self.grad_norm, self.grad_tol,
                                                             self.caps_reached, self.local_converged,
                                                             self.recorded_converged))

    @property
    def unconfirmed_stop(self):
        """A minibatch stop of the stochastic rule with no full-pass check recorded (``grad_tol``
        NaN): a record written before gpdsl confirmed such stops (issue 45), whose ``converged=True``
        rested on the batch objective alone.  Such a record reads as ``converged=False``: nothing
        says the fit reached the optimum.

        Returns
        -------
        bool
        """
        return self.stop_reason == "stochastic_rule" and not np.isfinite(self.grad_tol)

    def __eq__(self, other):
        # Field by field, except that a missing gradient (NaN) equals a missing gradient.
        return isinstance(other, FitDiagnostics) and self.to_json() == other.to_json()

    __hash__ = None

    def summary(self):
        """One line for ``repr(post)`` and the CLI report.

        Returns
        -------
        str
        """
        parts = [f"stop={self.stop_reason}", f"iterations={self.n_iterations}"]
        if np.isfinite(self.grad_norm) and np.isfinite(self.grad_tol):
            parts.append(f"max|grad|={self.grad_norm:.3g} (tol {self.grad_tol:.3g}"
                         + (f", {self.grad_name})" if self.grad_name else ")"))
        elif np.isfinite(self.grad_norm):
            # A minibatch run stopped by max_iter, or an old record's: Adam's smoothed batch
            # gradient, not tested against a tolerance.
            parts.append(f"|smoothed batch grad|={self.grad_norm:.3g}")
        if self.unconfirmed_stop:
            parts.append("no full-pass check recorded (written before minibatch stops were confirmed"
                         + (", its writer said converged=True" if self.recorded_converged else "")
                         + "): NOT confirmed converged")
        for label, value in (("restarts", self.optimizer_restarts), ("caps", ",".join(self.caps_reached)),
                             ("ridge", self.ridge), ("sweeps", self.local_sweeps), ("clamped", self.clamped_sites),
                             ("reinit", self.reinit_stop), ("small M replaced by", self.small_m_replaced),
                             ("subsample", self.subsample), ("polish iterations", self.polish_iterations),
                             ("jitter", self.jitter)):
            if value:
                parts.append(f"{label}={value:g}" if isinstance(value, float) else f"{label}={value}")
        if self.local_converged is False:
            parts.append("local iteration NOT converged")
        if self.constant_model:
            parts.append("constant model")
        if self.evidence_rounding > EVIDENCE_ROUNDING_TOL:
            parts.append(f"evidence is rounding noise (+-{self.evidence_rounding:.3g} nats)")
        return ", ".join(parts)

    def to_json(self):
        """The record as a JSON object string (``converged`` included, for readers of the file).

        Returns
        -------
        str
        """
        record = asdict(self)
        record["caps_reached"] = list(self.caps_reached)
        record["grad_norm"] = _finite_or_none(self.grad_norm)
        record["grad_tol"] = _finite_or_none(self.grad_tol)
        # inf is a flag (the evidence is noise), not a missing number: written as "inf".
        record["evidence_rounding"] = ("inf" if self.evidence_rounding == np.inf
                                       else _finite_or_none(self.evidence_rounding))
        return json.dumps(record)

    @classmethod
    def from_json(cls, text):
        """The record :meth:`to_json` wrote; ValueError if it is not one (or ``converged`` disagrees
        with the rule, except where an old minibatch record says True with no full-pass check:
        that reads as ``converged=False``, its True kept in ``recorded_converged`` and a note in
        ``message``; :attr:`unconfirmed_stop`).

        Parameters
        ----------
        text : str

        Returns
        -------
        FitDiagnostics
        """
        record = json.loads(text)
        if not isinstance(record, dict):
            raise ValueError("expected a JSON object")
        stated = record.pop("converged", None)
        record.setdefault("evidence_rounding", None)      # written before it was recorded
        record.setdefault("polish_iterations", 0)         # likewise
        names = {f.name for f in fields(cls) if f.init}
        if set(record) != names:
            raise ValueError(f"expected the keys {sorted(names | {'converged'})}, got {sorted(record)}")
        if isinstance(record["evidence_rounding"], str) and record["evidence_rounding"] != "inf":
            raise ValueError(f"FitDiagnostics.from_json: evidence_rounding is {record['evidence_rounding']!r}; "
                             "expected a number, null or \"inf\"")
        for key in ("grad_norm", "grad_tol", "evidence_rounding"):
            record[key] = float("nan") if record[key] is None else float(record[key])
        record["caps_reached"] = tuple(record["caps_reached"])
        if (stated is True and record["stop_reason"] == "stochastic_rule" and not np.isfinite(record["grad_tol"])
                and record["recorded_converged"] is None):
            # Written before a stochastic-rule stop was confirmed by a full pass (its gradient
            # test): the writer's True is kept as recorded, not believed (unconfirmed_stop).
            record["recorded_converged"] = True
            record["message"] = (f"{record['message']}; read from a record written before minibatch stops were "
                                 "confirmed by a full pass over the data: no check recorded, converged=False")
        diagnostics = cls(**record)
        if (stated is not None and stated != diagnostics.converged
                and not (diagnostics.unconfirmed_stop and stated == diagnostics.recorded_converged)):
            raise ValueError(f"'converged' is {stated} but the record's fields give {diagnostics.converged}")
        return diagnostics


def _finite_or_none(x):
    """JSON has no NaN: a missing number is null."""
    return float(x) if np.isfinite(x) else None
