"""The fit loop behind :meth:`gpdsl.Model.fit`: starts, L-BFGS-B and its stopping rules, the
inducing inputs' re-selection, the subsample's finish and the fit's record (its convergence
warnings: :mod:`gpdsl.fit_warnings`).

:func:`fit` checks the data and arguments (:mod:`gpdsl.inputs`), selects the inducing inputs,
runs :func:`fit_at` (one L-BFGS-B fit, with restarts, at one selection: a :class:`FitResult`)
for each round of the re-selection loop and the small-M probe, keeps the best round, records how
the fit ended (:class:`gpdsl.diagnostics.FitDiagnostics`), warns for every way it fell short and
returns the :class:`gpdsl.posterior.Posterior`.  The model is read as an object (its parameter
table, ``evaluate`` and parts); this module does not import :mod:`gpdsl.model`.
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
from scipy import special

from . import backends, multioutput
from .checks import check_bool, check_positive_int
from .components import bind
from .diagnostics import GRADIENT_FREE_STOPS, FitDiagnostics, gradient_tolerance, largest_gradient, warn_noisy_evidence
from .evidence_checks import check_evidence_bound, final_evaluation, out_of_range
from .fit_warnings import local_cap_reached, no_better_than_constant, warn_unconverged
from .inducing import NoCandidateError, SelectionContext
from .inputs import check_fit_arguments, validate_inputs, validate_offset
from .methods.common import ConvergenceWarning, shifted
from .parameters import ParameterTable
from .posterior import FitRecord, Posterior
from .scaling import Standardization

#: L-BFGS-B's iteration cap per run where ``Model.fit(max_iter=None)`` (a method chosen at fit
#: takes :data:`gpdsl.defaults.MAX_STEPS` instead: minibatch steps, or L-BFGS-B iterations where
#: the full batch is chosen).
DEFAULT_MAX_ITER = 1000

# Stopping rule of the hyperparameter optimiser.  L-BFGS-B runs with SciPy's tests (projected
# gradient below 1e-5, relative change of the objective below 2.2e-9) and one more, the plateau
# rule: over the last PLATEAU_WINDOW iterations the objective gained less than
# PLATEAU_PER_POINT * N nats per iteration, and the gains are not dying out (the second half of
# the window gained at least PLATEAU_STEADY times what the first half did).  L-BFGS-B converging
# to a well-defined optimum shrinks its gains geometrically and ends by SciPy's tests; the plateau
# rule ends the steady walks along evidence ridges, where a classifier's kernel variance grows
# without bound (FITC-EP on twonorm, N = 6,660: kernel variance ~1e7 and a gain of ~0.02 nats an
# iteration after 1,000 iterations, at a worse test NLPD than after 30).  1e-4 nats per point and
# iteration is far below what changes predictions.
PLATEAU_WINDOW = 10
PLATEAU_PER_POINT = 1e-4
PLATEAU_STEADY = 0.5
# A free positive hyperparameter that has moved by more than this factor in a run stopped by the
# plateau rule or the iteration cap is named in a ridge warning (and Posterior.ridge).
RUNAWAY_FACTOR = 1e3
_SCIPY_CALLBACK_STOP = 99                   # OptimizeResult.status when the callback raised StopIteration
# Restarts of L-BFGS-B with empty memory after SciPy's test stopped it at a large gradient.
MEMORY_RESTARTS = 2


# Gap (nats per training row) by which a moderate fixed M must beat an automatic M that ended
# smaller for the fit to call the automatic one a different optimum (_probe_small_m).  The
# trace rule's default tol (1e-3 per row) costs the bound about half that, so a gap of 1e-2 per
# row is far beyond what the rule allows.
SMALL_M_GAP_PER_POINT = 1e-2


@dataclasses.dataclass(frozen=True)
class FitResult:
    """One L-BFGS-B fit (with restarts) at one selection of the inducing inputs, as :func:`fit_at`
    returns it: the optimum and how the optimiser got there.

    Parameters
    ----------
    values : dict of str to ndarray
        The natural hyperparameters at the optimum ("inducing.Z" taken out into ``Z``).
    Z : ndarray of shape (M, D), or None
        The inducing inputs at the optimum (None for dense methods).
    evaluation : gpdsl.methods.common.Evaluation or gpdsl.methods.common.PendingEvaluation
        The method's evaluation at the optimum, with its predictive state (a minibatch fit's
        log evidence waits for its pass over the data until read).
    table : gpdsl.parameters.ParameterTable
        The parameter table the fit ran on.
    optimiser : dict
        The fields of :class:`gpdsl.diagnostics.FitDiagnostics` the optimiser decides
        (``stop_reason``, ``message``, ``caps_reached``, and for an optimised fit
        ``n_iterations``, ``grad_norm``, ``grad_tol``, ``grad_name``, ``optimizer_restarts``).
    log_prior : float
        The log prior at the optimum.
    total_sweeps : int
        The method's local iterations over the fit (EP/QP sweeps, c updates, natural steps).
    ridge : str or None
        The hyperparameter that ran away along an evidence ridge.
    ridge_move : tuple, or None
        ``(start, end, entry)`` of the ridge's hyperparameter: the values of the element that
        moved, and its index tuple in an array hyperparameter (None for a scalar).
    minibatch : bool
        The optimiser was a minibatch one (no full-batch gradient; q moved with its steps).
    objective_estimate : float or None
        A minibatch run's smoothed batch estimate of the objective, log prior included (the
        mean over its stopping rule's last window); None otherwise.
    """

    values: dict
    Z: np.ndarray | None
    evaluation: object
    table: ParameterTable
    optimiser: dict
    log_prior: float
    total_sweeps: int
    ridge: str | None = None
    ridge_move: tuple | None = None
    minibatch: bool = False
    objective_estimate: float | None = None

    @property
    def objective(self):
        """float: the log evidence plus the log prior at the optimum (what the fit maximised)."""
        return self.evaluation.log_evidence + self.log_prior


def fit(model, X, y, *, optimize=True, fixed=(), restarts=0, seed=0, max_iter=DEFAULT_MAX_ITER, progress=False, callback=None,
        standardize=False, subsample=None, offset=None, start=None, refine=False):
    """Fit ``model`` to X, y: what :meth:`gpdsl.Model.fit` runs (its docstring describes the fit).

    Parameters
    ----------
    model : gpdsl.Model
        The declaration.
    X : array_like or Dask array, shape (N, D)
        Training inputs.
    y : array_like, shape (N,)
        Training targets.
    optimize, fixed, restarts, seed, max_iter, progress, callback, standardize, subsample, offset, start, refine : object
        As :meth:`gpdsl.Model.fit` takes them.

    Returns
    -------
    gpdsl.Posterior

    Raises
    ------
    TypeError, ValueError
        As :meth:`gpdsl.Model.fit`.
    """
    X = validate_inputs(X, lazy=model._chunks_dask())
    labelled = model.likelihood.with_labels_of(y)
    if labelled is not model.likelihood:
        model = dataclasses.replace(model, likelihood=labelled)
    y = model.likelihood.for_rows(X).coded_targets(y, X.shape[0])     # each row's by its likelihood
    fixed = check_fit_arguments(optimize, fixed, restarts, seed, max_iter, progress, callback)
    offset = validate_offset(offset, X.shape[0], model.inference)
    if offset is not None and model.likelihood.n_latent > 1:
        raise ValueError(f"fit: offset is an offset of one latent function; {model.likelihood.describe()} has "
                         f"{model.likelihood.n_latent}")
    check_bool("fit", "standardize", standardize, error=TypeError)
    if subsample is not None:
        check_positive_int("fit", "subsample", subsample)
    check_bool("fit", "refine", refine, error=TypeError)
    if refine and subsample is None:
        raise ValueError("fit: refine=True continues a subsample's fit on all rows; pass subsample=n with it "
                         "(a fit on all rows is refined already)")
    if refine and not optimize:
        raise ValueError("fit: refine=True continues the optimisation on all rows; it needs optimize=True")
    if refine and model.inference.fits_by_minibatch:
        raise ValueError(f"fit: refine=True continues with L-BFGS-B on all rows, but "
                         f"{type(model.inference).__name__} here fits by minibatch steps, each of which costs "
                         "the same on all rows as on a subsample; fit on all rows without subsample, or use "
                         "refine=False")
    scaling = None
    if standardize:
        # A multi-output model's output column is an index, not a feature: left unscaled; its
        # targets are standardised per output (multioutput.standardization).
        targets = y if model.likelihood.standardizes_targets else None
        scaling = (Standardization.of(X, targets) if model.output_count is None
                   else multioutput.standardization(X, targets, model.output_count))
        X, y = scaling.inputs(X), scaling.targets(y, X)
        if offset is not None and model.likelihood.standardizes_targets:
            offset = offset / scaling.target_scale(X)     # an offset in y's units, as the targets are scaled
    rows = None
    if subsample is not None and subsample >= X.shape[0]:
        raise ValueError(f"fit: subsample = {subsample} must be smaller than the number of rows, "
                         f"N = {X.shape[0]} (leave it None to fit on all rows)")
    if subsample is not None:
        _check_subsample(model)
        if model.sparse:
            model.inducing.check_subsample(subsample, X.shape[0])
        rows = multioutput.subsample_rows(X, subsample, np.random.default_rng(seed), model.output_count)
    # A subsample's rows are read into memory (of a Dask X, those rows only).
    X_fit, y_fit = (X, y) if rows is None else (np.array(X[rows]), y[rows])
    offset_fit = offset if rows is None or offset is None else offset[rows]
    # Declared kernel and likelihood values (Z is not chosen yet, so it cannot be named).
    declared_table = model.parameter_table(X_fit, None, tuple(f for f in fixed if f != "inducing.Z"))
    declared = declared_table.values()
    # The fit options of every round (the small-M probe takes the first four).
    options = {"fixed": fixed, "seed": seed, "max_iter": max_iter, "offset": offset_fit}
    every = {**options, "optimize": optimize, "restarts": restarts, "progress": progress, "callback": callback}
    selection = None
    if model.sparse:
        _, likelihood = model.bind(declared)
        surrogate = shifted(likelihood, model.latent_offset(declared, X_fit, offset_fit)).surrogate(X_fit, y_fit)
        context = SelectionContext(model.kernel, declared, **_selection_data(surrogate, model.kernel.n_outputs),
                                   first_round=True)
        selection = model.inducing.select(_selection_inputs(model, X_fit), y_fit, context)
    # A subsample fit to be refined needs only come near: it stops at the tolerance of its n rows.
    result = fit_at(model, X_fit, y_fit, selection, **every, start=_checked_start(start, declared_table), warm=None,
                    until_tolerance=refine and rows is not None)
    rounds, reinit_stop = [(selection, result)], None
    if model.sparse and model.inducing.reinit:
        rounds, reinit_stop = _reinit_loop(model, X_fit, y_fit, rounds, **every)
    # Only a loop that settled (or none) is probed: one stopped at max_reinit has warned already,
    # and one that found no candidate collapsed the kernel variance.
    if model.sparse and optimize and reinit_stop in (None, "objective", "repeated_selection"):
        rounds, small_m_replaced = _probe_small_m(model, X_fit, y_fit, rounds, **options)
    else:
        small_m_replaced = None
    # The thesis author's reinitialisation loop returns the best round, not the last.
    selection, result = _best_round(rounds)
    subsample_record = None
    # Whether the subsample's fit met its own rows' tolerance (its remedies are named only if not).
    subsample_settled = bool(result.optimiser.get("grad_norm", np.nan) <= result.optimiser.get("grad_tol", np.nan))
    if rows is not None:
        selection, result, subsample_record = _finish_on_all_rows(
            model, X, y, rows, selection, result, fixed=fixed, max_iter=max_iter, offset=offset,
            refine=refine, progress=progress, callback=callback)
    evaluation = result.evaluation
    # The constant model is f = 0 without an offset or a mean function; with one there is no such reference.
    constant_model = offset is None and model.mean is None and no_better_than_constant(model, X, y, result)
    diagnostics = _diagnostics(model, result, rounds, reinit_stop, selection, subsample_record, constant_model,
                               small_m_replaced)
    # The rows the hyperparameters were fitted on last (a subsample's, unless refined on all)
    # decide the minibatch remedies.
    last_rows = X.shape[0] if refine else X_fit.shape[0]
    warn_unconverged(model, warn_noisy_evidence(model, diagnostics), result, evaluation.warm, last_rows,
                     subsample=None if rows is None or refine else int(rows.size), subsample_settled=subsample_settled)
    history = None
    if model.sparse and model.inducing.reinit:
        history = [{"M": int(r.Z.shape[0]), "objective": float(r.objective)} for _, r in rounds]
    jacobian = scaling.log_jacobian(X) if scaling is not None else 0.0
    # A minibatch fit's full-data bound waits until it is read (PendingEvaluation).
    log_evidence = ((lambda: evaluation.log_evidence + jacobian) if evaluation.pending
                    else evaluation.log_evidence + jacobian)
    record = FitRecord(diagnostics=diagnostics, priors=result.table.prior_descriptions(),
                       fixed=[e.name for e in result.table.entries if e.fixed], sites=evaluation.warm,
                       selection=selection, reinit_history=history, subsample=subsample_record)
    return Posterior(model=model, values=result.values, state=evaluation.state, log_evidence=log_evidence,
                     log_prior=result.log_prior, standardization=scaling, record=record)


def _diagnostics(model, fit, rounds, reinit_stop, selection, subsample_record, constant_model,
                 small_m_replaced):
    """The :class:`gpdsl.diagnostics.FitDiagnostics` of the kept round ``fit``."""
    local = fit.evaluation.warm
    record = dict(fit.optimiser)
    caps = record.pop("caps_reached") + (["max_iter"] if record["stop_reason"] == "max_iter" else [])
    if local is not None and not local.converged and local_cap_reached(model, local):
        caps.append("max_sweeps")
    if reinit_stop == "max_reinit":
        caps.append("max_reinit")
    if selection is not None and selection.stopped == "max_m":
        caps.append("max_m")
    total_sweeps = (sum(f.total_sweeps for _, f in rounds)
                    + (fit.total_sweeps if subsample_record is not None else 0))
    return FitDiagnostics(**record, caps_reached=tuple(caps), jitter=float(fit.evaluation.jitter),
                          ridge=fit.ridge, local_sweeps=int(total_sweeps),
                          local_converged=None if local is None else bool(local.converged),
                          clamped_sites=int(getattr(local, "clamped", 0) or 0),
                          reinit_rounds=len(rounds) - 1, reinit_stop=reinit_stop,
                          small_m_replaced=small_m_replaced,
                          subsample=None if subsample_record is None else subsample_record["rows"],
                          constant_model=constant_model, evidence_rounding=getattr(fit.evaluation, "rounding", np.nan))


def _probe_small_m(model, X, y, rounds, *, fixed, seed, max_iter, offset):
    """An automatic M that ended small is checked against one fit at a moderate M (the
    inducing spec's ``small_m_probe``), selected and started at the best round's
    hyperparameters.  Where the probe's objective is above the best round's by more than
    SMALL_M_GAP_PER_POINT * N nats, the automatic rule stopped in another optimum (an 18-D
    image-like set: M = 15-20 at length-scales of 100-300, 120-250 nats below the fits at
    M >= 54); the probe round is appended to the rounds (and so kept as the best), and a
    ConvergenceWarning says so.  Returns the rounds and the probe's M where it was kept, else None."""
    _, best = _best_round(rounds)
    probe = model.inducing.small_m_probe(X.shape[1], best.Z.shape[0], X.shape[0])
    if probe is None:
        return rounds, None
    context = SelectionContext(model.kernel, best.values, **_selection_data(best.evaluation.pseudo_data,
                                                                                   model.kernel.n_outputs))
    probe_selection = probe.select(_selection_inputs(model, X), y, context)
    probed = fit_at(model, X, y, probe_selection, fixed=fixed, optimize=True, restarts=0, seed=seed,
                    max_iter=max_iter, progress=False, callback=None, start=best.values, warm=None, offset=offset)
    gap = probed.objective - best.objective
    if gap <= SMALL_M_GAP_PER_POINT * X.shape[0]:
        return rounds, None
    warnings.warn(f"{type(model.inducing).__name__}: the automatic M = {best.Z.shape[0]} stopped "
                  f"{gap:.4g} nats below a fit at M = {probe_selection.Z.shape[0]} (the small M held the fit in a "
                  f"smoother optimum, length-scale up to {_largest(best.values, 'lengthscale')}); the "
                  f"M = {probe_selection.Z.shape[0]} round is kept (diagnostics.small_m_replaced); give m or a "
                  "smaller tol", ConvergenceWarning, stacklevel=5)
    return rounds + [(probe_selection, probed)], int(probe_selection.Z.shape[0])


def _selection_data(pseudo_data, n_outputs=1):
    """The weights and targets greedy selection reads from a method's pseudo-regression (w, r),
    for a kernel of ``n_outputs`` latent functions (``model.kernel.n_outputs``).

    With K latent functions sharing one kernel and Z (w and r of shape (N, K)) the residual
    variance k_nn - q_nn is the same for every class, so HGV's criterion summed over the classes
    is sum_k w_nk (k_nn - q_nn): the weights are summed.  With one kernel per class
    (``n_outputs`` K) each class has its own residual and the criterion is
    sum_k w_nk (k^k_nn - q^k_nn): the weights stay (N, K); the likelihood's surrogate before the
    first fit, (N,) the classes' equal curvatures summed, is spread evenly over them.  The
    classes' Gaussian bounds do not add up to one bound of summed targets, so there are no
    targets (GreedyBound refuses them)."""
    weights, targets = pseudo_data
    if n_outputs > 1:
        weights = np.asarray(weights, dtype=float)
        if weights.ndim == 1:
            weights = np.repeat(weights[:, None] / n_outputs, n_outputs, axis=1)
        return {"weights": weights, "targets": None}
    if np.ndim(weights) == 2:
        return {"weights": np.sum(weights, axis=1), "targets": None}
    return {"weights": weights, "targets": targets}


def _check_subsample(model):
    """fit(subsample=n)'s refusals: a likelihood with per-row parameters (they would have to be
    subsampled with the rows) and q optimised as hyperparameters (the finish does not optimise,
    so q would stay the subsample's)."""
    if model.likelihood.per_row_parameters:
        raise ValueError(f"fit: subsample cannot subsample the per-row parameters of "
                         f"{model.likelihood!r}; draw the rows of X, y and those parameters yourself")
    if model.inference.optimises_variational_parameters:
        raise ValueError(f"fit: subsample needs q moved to its optimum on all rows, which "
                         f"{type(model.inference).__name__}(q_updates='joint') does only by optimising; use "
                         "q_updates='natural'")


def _finish_on_all_rows(model, X, y, rows, selection, fit, *, fixed, max_iter, offset, refine, progress, callback):
    """fit(subsample=n)'s last step, on all rows of X from the hyperparameters and Z of ``fit``
    (the subsample's best round).  Returns the selection (its indices mapped to rows of X), the
    full data's fit result and the Posterior's ``subsample`` record.

    Without ``refine``, the posterior at those values, not optimised further: the record is the
    subsample fit's (its optimiser's stop and ridge, and whether it was a minibatch run), except
    that its gradient is the full objective's there, so that ``converged`` says whether the
    subsample's optimum is one of all rows.  With ``refine``, L-BFGS-B continues on all rows from
    there until the full gradient is within its tolerance, and the record is that run's."""
    if selection is not None:
        selection = dataclasses.replace(selection, Z=fit.Z,
                            indices=None if selection.indices is None else rows[selection.indices])
    record = {"rows": int(rows.size), "objective": float(fit.objective)}
    # The subsample's local state (per-row sites, c) does not carry over; q(u) would, but a
    # fresh start is what each method's fit from given hyperparameters gives.
    options = {"fixed": fixed, "restarts": 0, "seed": 0, "max_iter": max_iter, "start": fit.values, "warm": None,
               "offset": offset}
    if refine:
        return selection, fit_at(model, X, y, selection, optimize=True, progress=progress, callback=callback,
                                 until_tolerance=True, plateau_rule=False, **options), record
    gradient_free = fit.optimiser["stop_reason"] in GRADIENT_FREE_STOPS
    finish = fit_at(model, X, y, selection, optimize=False, progress=False, callback=None,
                    confirm_gradient=not gradient_free, **options)
    optimiser = dict(fit.optimiser)
    if not gradient_free:
        optimiser.update({key: finish.optimiser[key] for key in ("grad_norm", "grad_name", "grad_tol")})
    finish = dataclasses.replace(finish, optimiser=optimiser, ridge=fit.ridge, ridge_move=fit.ridge_move,
                                 minibatch=fit.minibatch)
    return selection, finish, record


def _reinit_loop(model, X, y, rounds, *, fixed, optimize, restarts, seed, max_iter, progress, callback, offset):
    """Re-select Z at the last fit's hyperparameters (weighted by its pseudo-data) and re-fit,
    until the objective changes by at most ``reinit_tol`` relative to its size, a selection
    repeats, nothing is left to select, or ``max_reinit`` rounds have run (which warns).
    Returns the rounds and why the loop stopped: "objective", "repeated_selection",
    "no_candidate" or "max_reinit"."""
    spec = model.inducing
    selection, fit = rounds[-1]
    seen = {frozenset(selection.indices.tolist())}
    for _ in range(spec.max_reinit):
        values, evaluation = fit.values, fit.evaluation
        context = SelectionContext(model.kernel, values, **_selection_data(evaluation.pseudo_data,
                                                                                  model.kernel.n_outputs))
        try:
            selection = spec.select(_selection_inputs(model, X), y, context)
        except NoCandidateError:
            # The last fit collapsed the kernel variance (below the 1e-12 selection jitter):
            # nothing to re-select by; the best round so far is kept.
            return rounds, "no_candidate"
        chosen = frozenset(selection.indices.tolist())
        if chosen in seen:
            # A set selected before: the rounds would cycle (HGV alternates between two sets
            # on some data), so stop as if converged.
            return rounds, "repeated_selection"
        seen.add(chosen)
        previous = fit.objective
        fit = fit_at(model, X, y, selection, fixed=fixed, optimize=optimize, restarts=restarts, seed=seed,
                     max_iter=max_iter, progress=progress, callback=callback, start=values, warm=evaluation.warm,
                     offset=offset)
        rounds.append((selection, fit))
        if abs(fit.objective - previous) <= spec.reinit_tol * max(1.0, abs(previous)):
            return rounds, "objective"
    change = rounds[-1][1].objective - rounds[-2][1].objective
    warnings.warn(f"{type(spec).__name__}: the reinitialisation loop stopped at max_reinit={spec.max_reinit} "
                  f"rounds with the objective still changing ({change:+.4g} in the last round, M "
                  f"{rounds[0][1].Z.shape[0]} -> {rounds[-1][1].Z.shape[0]}); the best round is kept "
                  "(flagged reinit_stop='max_reinit'); raise max_reinit or reinit_tol",
                  ConvergenceWarning, stacklevel=5)
    return rounds, "max_reinit"


def _selection_inputs(model, X):
    """X for the inducing spec's selection: selection from the data (k-means, greedy) reads X
    in memory, so a Dask X is computed for it; Fixed and Subsample read no more than Z.  A
    multi-output model's specs read what :func:`gpdsl.multioutput.selection_inputs` gives them."""
    if model.output_count is not None:
        return multioutput.selection_inputs(model.inducing, X)
    return X if model.inducing.lazy_inputs else backends.materialize(X)


def _best_round(rounds):
    """The (selection, FitResult) of the highest objective; a single round without reading its
    objective (a minibatch fit's waits for its pass over the data until it is needed)."""
    return rounds[0] if len(rounds) == 1 else max(rounds, key=lambda r: r[1].objective)


def _checked_start(start, table):
    """``fit(start=...)``: None, or a mapping of names the model has (``post.values``), each of
    its entry's shape ("inducing.Z" and a method's variational parameters are taken where their
    shapes still fit); a fixed entry keeps its declared value."""
    if start is None:
        return None
    entries = {e.name: e for e in table.entries if not e.fixed}
    known = {e.name for e in table.entries}
    if not hasattr(start, "items"):
        raise TypeError(f"fit: start must be None or a mapping of hyperparameter names to values (post.values), "
                        f"got {type(start).__name__}")
    out = {}
    for name, value in start.items():
        if name in entries:
            e, value = entries[name], np.asarray(value, dtype=float)
            if value.shape != e.value.shape:
                raise ValueError(f"fit: start[{name!r}] has shape {value.shape}, the model's entry {e.value.shape}")
            low, high = e.bounds if e.bounds is not None else ((0.0 if e.positive else -np.inf), np.inf)
            if not np.all(np.isfinite(value) & (value > low) & (value < high)):
                raise ValueError(f"fit: start[{name!r}] = {value!r} must be finite and inside ({low:g}, {high:g})")
        elif name in known:
            continue                                    # fixed: held at its declared value
        elif name != "inducing.Z" and not name.startswith("variational."):
            raise ValueError(f"fit: start names {name!r}, which is not a hyperparameter of this model; known: "
                             f"{sorted(known)}")
        out[name] = value
    return out


def fit_at(model, X, y, selection, *, fixed, optimize, restarts, seed, max_iter, progress, callback, start, warm,
           offset=None, until_tolerance=False, plateau_rule=True, confirm_gradient=False):
    """One L-BFGS-B fit (with restarts) at the selected inducing inputs, from the declared
    hyperparameters or ``start``.

    Parameters
    ----------
    model : gpdsl.Model
        The declaration.
    X : ndarray or Dask array, shape (N, D)
        Training inputs, checked (and in the fit's units).
    y : ndarray, shape (N,)
        Training targets, prepared by the likelihood.
    selection : gpdsl.inducing.Selection or None
        The inducing inputs (None for dense methods).
    fixed, optimize, restarts, seed, max_iter, progress, callback : object
        As :meth:`gpdsl.Model.fit` takes them (``fixed`` a tuple of names).
    start : dict of str to ndarray, or None
        Values to start from (a re-selection round continues from the previous optimum; a
        method's variational parameters only where M has not changed); None: the declared ones.
    warm : object or None
        The method's local state to start from.
    offset : ndarray, shape (N,), optional
        The per-row offset of the latent input.
    until_tolerance : bool, default False
        Stop L-BFGS-B at the first point whose largest gradient entry is within
        :func:`gpdsl.diagnostics.gradient_tolerance` (``fit(subsample=n, refine=True)``: the
        subsample's fit and the finish on all rows).
    plateau_rule : bool, default True
        Apply the plateau rule (:data:`PLATEAU_WINDOW`); the refining finish does not (see
        :meth:`_Objective.minimise`).
    confirm_gradient : bool, default False
        Compute the gradient at the final point even where nothing was optimised, and record its
        largest entry against the tolerance (``fit(subsample=n)``'s finish checks the
        subsample's optimum on all rows).

    Returns
    -------
    FitResult
    """
    Z0 = selection.Z if selection is not None else None
    table = model.parameter_table(X, Z0, fixed)
    run = _Objective(model, table, X, y, Z0, offset=offset)
    run.warm, run.until_tolerance, run.plateau_rule = warm, until_tolerance, plateau_rule
    values0 = table.values()
    if start is not None:      # a re-selection round continues from the previous optimum
        # (a method's variational parameters only where M has not changed)
        values0.update({k: v for k, v in start.items() if k in values0 and np.shape(v) == values0[k].shape})
    u0 = table.pack(values0)
    result = None
    if optimize and table.size > 0:
        rng = np.random.default_rng(seed)
        starts = [u0] + [_random_start(table, u0, X, rng, model.output_count) for _ in range(restarts)]
        for u_start in starts:
            # Each start from the same local state, and the best start's kept: a minibatch
            # method's q is its result (the posterior is evaluated at it as it stands).
            run.warm = warm
            try:
                res = model.inference.minimise(run, u_start, max_iter, progress, callback)
            except FloatingPointError as err:
                # L-BFGS-B steps back from such points (the objective returns inf); a minibatch
                # optimiser has no line search to do so (fuzz: minibatch SVGP, Poisson counts
                # to 4e5 with Z 1e-3 apart).
                raise out_of_range(f"the optimiser stepped to a numerically impossible point ({err})",
                                   X, y) from err
            if result is None or res.fun < result.fun:
                result, best_warm = res, run.warm
        run.warm = best_warm
        if not np.all(np.isfinite(result.x)):
            raise out_of_range("L-BFGS-B stepped to non-finite hyperparameters (the objective and its "
                               "gradient at the start are too large for its float64 arithmetic)", X, y)
        u_best, runaway = result.x, result.runaway
        # A minibatch run has no L-BFGS-B gradient (jac None): its stop is confirmed by the full
        # pass of gpdsl.methods.stochastic.full_pass_check (grad_norm, grad_tol); its steps move q
        # too, so q's convergence is the optimiser's.
        minibatch = result.jac is None
        ridge, ridge_move = (None, None) if runaway is None else (runaway[0], runaway[1:])
        optimiser = {"stop_reason": result.stop_reason, "message": str(result.message),
                     "n_iterations": int(result.nit), "grad_norm": float(result.grad_norm),
                     # A minibatch run's stop is confirmed by its full pass (grad_tol of N rows); one
                     # that ran out of steps made no pass (nan).
                     "grad_tol": float(result.grad_tol) if minibatch else gradient_tolerance(X.shape[0]),
                     "grad_name": result.get("grad_name", ""),
                     "optimizer_restarts": int(getattr(result, "optimizer_restarts", 0)), "caps_reached": [],
                     "polish_iterations": int(result.get("polish_iterations", 0))}
        outer = model.inference.outer_loop(run, u_best, max_iter)
        if outer is not None:
            u_best, outer_converged, outer_iter = outer
            # Algorithm 1 maximises eq. 4 at fixed sites: its own test, not the gradient, decides.
            optimiser.update(stop_reason="outer_loop", caps_reached=[] if outer_converged else ["max_outer"],
                             n_iterations=optimiser["n_iterations"] + outer_iter,
                             message=f"{optimiser['message']}; then QP's outer loop "
                                     f"{'converged' if outer_converged else 'did not converge'}")
    else:
        u_best, ridge, ridge_move, minibatch = u0, None, None, False
        optimiser = {"stop_reason": "not_optimised", "caps_reached": [],
                     "message": "no optimisation (optimize=False or no free hyperparameter)"}
    values = table.unpack(u_best)
    Z = values.pop("inducing.Z", Z0)
    # The final gradient is the posterior's own: where the method has a local state (EP/QP
    # sites), the optimiser's last gradient may belong to another of its fixed points (fuzz:
    # Poisson FITC-EP, 1.4e-6 at the optimiser's sites, 3e6 at the posterior's).
    need_grad = (not minibatch and optimiser["stop_reason"] not in GRADIENT_FREE_STOPS) or confirm_gradient
    evaluation = final_evaluation(model, values, X, y, Z, run.warm, optimize, need_grad, offset)
    if evaluation.warm is not None:
        run.total_sweeps += evaluation.warm.sweeps
    if need_grad:
        _, gradient = run.negated({**values, **({"inducing.Z": Z} if "inducing.Z" in table.names() else {})},
                                  evaluation)
        optimiser["grad_norm"], optimiser["grad_name"] = run._largest_gradient(gradient)
        optimiser.setdefault("grad_tol", gradient_tolerance(X.shape[0]))
    log_prior, _ = table.log_prior({**values, "inducing.Z": Z})
    return FitResult(values=values, Z=Z, evaluation=evaluation, table=table, optimiser=optimiser,
                     log_prior=log_prior, total_sweeps=run.total_sweeps, ridge=ridge, ridge_move=ridge_move,
                     minibatch=minibatch, objective_estimate=-float(result.fun) if minibatch else None)


def _largest(values, suffix):
    """The largest value of the hyperparameters whose names end in ``suffix``, as text."""
    found = [float(np.max(v)) for k, v in values.items() if k.endswith(suffix)]
    return f"{max(found):.3g}" if found else "?"


def _on_plateau(trail, plateau):
    """The plateau rule on the objectives of the accepted iterates (see PLATEAU_WINDOW)."""
    if len(trail) <= PLATEAU_WINDOW:
        return False
    middle = trail[-1 - PLATEAU_WINDOW // 2]
    first, second = trail[-1 - PLATEAU_WINDOW] - middle, middle - trail[-1]
    return first + second < plateau and second >= PLATEAU_STEADY * first


def _stop_reason(result):
    """Which rule ended SciPy's L-BFGS-B run (a key of gpdsl.diagnostics.STOP_REASONS)."""
    if result.status == _SCIPY_CALLBACK_STOP:
        return "plateau"
    if result.status == 1:
        return "max_iter"
    if result.status == 0:
        return "gradient" if "GRADIENT" in result.message.upper() else "objective_change"
    return "line_search"


def _random_start(table, u0, X, rng, output_count=None):
    """Hyperparameters perturbed (log-space N(0, 1)), Z re-drawn from X (a multi-output model's by
    :func:`gpdsl.multioutput.draw_inputs`); a method's variational parameters keep their start,
    which does not depend on the hyperparameters."""
    values = table.unpack(u0)
    for e in table.free:
        if e.name.startswith("variational."):
            continue
        if e.name == "inducing.Z":
            values[e.name] = multioutput.draw_inputs(X, values[e.name], rng, output_count)
        elif e.bounds is not None:
            low, high = e.bounds
            logit = np.log(values[e.name] - low) - np.log(high - values[e.name])
            values[e.name] = low + (high - low) * special.expit(logit + rng.standard_normal(e.value.shape))
        elif e.positive:
            values[e.name] = values[e.name] * np.exp(rng.standard_normal(e.value.shape))
        else:
            values[e.name] = values[e.name] + rng.standard_normal(e.value.shape)
    return table.pack(values)


class _Objective:
    """Negative (evidence + log prior) and its gradient on the free log-space vector."""

    def __init__(self, model, table, X, y, Z0, evaluate=None, offset=None):
        self.model, self.table, self.X, self.y, self.Z0, self.offset = model, table, X, y, Z0, offset
        # ``exact``: model.evaluate, or a fixed-site objective (QP's Algorithm 1 outer step);
        # ``evaluate``: what the optimiser calls, model.evaluate under the method's within-fit
        # declaration where that differs (EP/QP's sites, Pólya-Gamma's c to fit_tol; minimise
        # falls back on ``exact`` where it ends a line search).
        self.exact = evaluate or model.evaluate
        within_fit = model.inference.within_fit()
        self.evaluate = (self.exact if evaluate is not None or within_fit == model.inference
                         else dataclasses.replace(model, inference=within_fit).evaluate)
        self.last = None
        self.warm = None          # EP/QP sites persist between evaluations (as in GPML and GPy)
        self.total_sweeps = 0
        # fit(subsample=n, refine=True): stop at the first point (the start included) whose
        # largest gradient entry is within gpdsl's tolerance, the converged rule's own test; its
        # finish on all rows without the plateau rule (see minimise).
        self.until_tolerance, self.plateau_rule = False, True
        self._input_scale = None  # X's column standard deviations, once (see _largest_gradient)

    def restricted(self, table, evaluate):
        """An objective on the same data with another parameter table and evaluation (QP's
        Algorithm 1 optimises eq. 4 at fixed sites with the likelihood's parameters held)."""
        return _Objective(self.model, table, self.X, self.y, self.Z0, evaluate=evaluate, offset=self.offset)

    def __call__(self, u):
        with np.errstate(over="ignore"):
            values = self.table.unpack(u)
        Z = values.get("inducing.Z", self.Z0)
        try:
            if not all(np.all(np.isfinite(v)) for v in values.values()):
                raise FloatingPointError("a hyperparameter overflowed")
            if any(e.positive and not np.all(values[e.name] > 0) for e in self.table.free):
                raise FloatingPointError("a positive hyperparameter underflowed to 0")
            ev = self._evaluate_from_warm_or_cold(values, Z)
        except (np.linalg.LinAlgError, FloatingPointError):
            # Numerically impossible point: tell the line search to step back.
            return np.inf, np.zeros_like(u)
        if ev.warm is not None:
            self.warm = ev.warm
            self.total_sweeps += ev.warm.sweeps
        f, g = self.negated(values, ev)
        if not (np.isfinite(f) and np.all(np.isfinite(g))):
            # Overflowed (NaN or inf) like the failures above: step back rather than mislead L-BFGS-B.
            return np.inf, np.zeros_like(u)
        self.last = (u.copy(), f, g)
        return f, g

    def negated(self, values, ev):
        """``(-(log evidence + log prior), its gradient on the free log-space vector)`` of the
        evaluation ``ev`` at natural ``values`` (with "inducing.Z" where Z is optimised)."""
        log_prior, prior_grads = self.table.log_prior(values)
        grads = dict(ev.grads)
        if ev.dZ is not None:
            grads["inducing.Z"] = ev.dZ
        # Checked before the priors' gradients are added, which would hide a missing one.
        self.table.check_gradients(type(self.model.inference).__name__, grads)
        for name, g in prior_grads.items():
            grads[name] = grads[name] + g
        return -(ev.log_evidence + log_prior), -self.table.chain(values, grads)

    def _checked_evaluation(self, values, Z, warm):
        """model.evaluate at ``values`` from ``warm``, with an evidence above the likelihood's bound
        (:func:`gpdsl.evidence_checks.check_evidence_bound`) raised as FloatingPointError."""
        # An offset is passed only where there is one: a fixed-site or test objective need not take it.
        extra = {} if self.offset is None else {"offset": self.offset}
        ev = self.evaluate(values, self.X, self.y, Z, warm=warm, **extra)
        check_evidence_bound(self.model.likelihood, values, self.X, self.y, ev.log_evidence)
        return ev

    def _evaluate_from_warm_or_cold(self, values, Z):
        """The evaluation at ``values`` from the warm local state (EP/QP sites, c, q), or, where
        that start fails numerically, from a fresh one.  A warm state left by an extreme line-search
        point can fail where the point itself is fine (Poisson EP: sites from u = (94, -168) broke
        the evaluation at an accepted point whose gradient was 65 times the tolerance, and the
        failure's zero gradient ended L-BFGS-B as "converged")."""
        if self.warm is None:
            return self._checked_evaluation(values, Z, None)
        try:
            return self._checked_evaluation(values, Z, self.warm)
        except (np.linalg.LinAlgError, FloatingPointError):
            return self._checked_evaluation(values, Z, None)

    def minimise(self, u0, max_iter, progress, callback):
        """L-BFGS-B from ``u0`` under gpdsl's stopping rule (see :data:`PLATEAU_WINDOW`).

        A run that SciPy's relative-reduction test or a failed line search ends while the
        gradient is above :func:`gpdsl.diagnostics.gradient_tolerance` (the test fires on a step
        that was cut to nothing, which says nothing about the gradient) is restarted from its last
        point with L-BFGS-B's memory emptied, at most :data:`MEMORY_RESTARTS` times and only while
        the restarts gain: a first step along the gradient is cheap and usually all it takes.

        Returns SciPy's OptimizeResult (``nit`` over all restarts) with more fields:
        ``stop_reason`` (a key of :data:`gpdsl.diagnostics.STOP_REASONS`), ``plateau`` (True when
        the plateau rule stopped the run), ``grad_norm`` and ``grad_name`` (the largest final
        gradient entry, :func:`gpdsl.diagnostics.largest_gradient`), ``optimizer_restarts``,
        ``runaway`` (the hyperparameter that ran away from ``u0`` in a run stopped by the plateau
        rule or the iteration cap, else None; see :meth:`_runaway`) and ``start`` (``u0``).

        With ``until_tolerance`` set, a start or an accepted iterate whose largest gradient entry
        is within the tolerance ends the run there ("tolerance").  Without ``plateau_rule`` the
        plateau rule is off: the refining finish on all rows runs without it, since it stops
        ridge walks, which the subsample's fit before it would have met, and near an optimum it
        can stop a warm start's first few steps short of the tolerance."""
        trail = []                # objectives of the accepted iterates
        plateau = PLATEAU_WINDOW * PLATEAU_PER_POINT * self.X.shape[0]
        tolerance = gradient_tolerance(self.X.shape[0])
        met = []                  # set when an accepted iterate met the tolerance (until_tolerance)

        def report(intermediate_result):
            u_last, _, g = self.last
            # The accepted iterate is normally the last point evaluated by the line search.
            grad_norm = np.linalg.norm(g) if np.array_equal(u_last, intermediate_result.x) else np.nan
            step = {"iteration": len(trail) + 1, "objective": float(intermediate_result.fun),
                    "grad_norm": float(grad_norm)}
            if progress:
                print(f"iter {step['iteration']:5d}  objective {step['objective']: .10g}  "
                      f"|grad| {step['grad_norm']:.3e}", flush=True)
            if callback is not None:
                callback(step)
            trail.append(step["objective"])
            if (self.until_tolerance and np.array_equal(u_last, intermediate_result.x)
                    and self._largest_gradient(g)[0] <= tolerance):
                met.append(True)
                raise StopIteration
            if self.plateau_rule and _on_plateau(trail, plateau):
                raise StopIteration

        # Imported here, not at the top: `import gpdsl` (e.g. to load a posterior and predict) then
        # does not pay scipy.optimize's 0.05 s (issue 46).
        from scipy import optimize as sp_optimize

        u, iterations, restarts, confirmations = u0, 0, 0, 0
        # (``first_call``: SciPy's function, whose first call at u0 _checked_start may answer)
        first_call, at_start = self, None
        if self.until_tolerance:
            first_call, at_start = self._checked_start(u0, tolerance)
        while True:
            met.clear()
            if at_start is not None:          # the start met the tolerance: no step taken
                result, at_start = at_start, None
                met.append(True)
            else:
                result = sp_optimize.minimize(first_call, u, jac=True, method="L-BFGS-B", callback=report,
                                              options={"maxiter": max_iter - iterations})
            first_call = self
            iterations += int(result.nit)
            if not (np.isfinite(result.fun) and np.any(result.jac)):
                # SciPy's last gradient is a failed evaluation's zeros (or the point failed): the
                # gradient at the point it returns, evaluated afresh, or none (inf) if that fails.
                fun, jac = self(result.x)
                result.jac = jac if np.isfinite(fun) else np.full_like(jac, np.inf)
            result.stop_reason = "tolerance" if met else _stop_reason(result)
            result.grad_norm, result.grad_name = (self._largest_gradient(result.jac)
                                                  if result.jac is not None else (np.nan, ""))
            stuck = result.stop_reason in ("objective_change", "line_search") and not result.grad_norm <= tolerance
            gained = restarts == 0 or result.nit > 0
            if result.stop_reason == "line_search" and self.evaluate is not self.exact and iterations < max_iter:
                # Near the optimum the objective's changes can fall below the error that the
                # within-fit declaration's local tolerance leaves (Pólya-Gamma on banana, split 55
                # of 200: an ABNORMAL line search at gradient 0.003): go on from there with the
                # model's own evaluations, those of the posterior.
                self.evaluate = self.exact
                u, restarts = result.x, restarts + 1
                continue
            if (self.warm is not None and confirmations < MEMORY_RESTARTS
                    and result.stop_reason in ("gradient", "objective_change", "tolerance")
                    and result.grad_norm <= tolerance):
                # A method with a local iteration (EP/QP's sites, Pólya-Gamma's c, q) gives a gradient
                # only as good as that iteration's tolerance, which bounds it on the evidence's own
                # scale, and within a fit the declaration's fit_tol is looser still: Poisson's square
                # link under EP, evidence -3.4e6, stopped at a within-fit gradient of 0.089 where the
                # model's own evaluations, from one set of sites to the next, give 2.56, 1.55 and
                # 1.64 (fuzz poisson_ep_dense 70110; its sites do not settle below a change of 1e-6).
                # The stop is confirmed by the model's own evaluation from where the fit's local
                # state ended, and the run goes on from there where that gradient is not small.
                self.evaluate, confirmations = self.exact, confirmations + 1
                fun, jac = self(result.x)
                if np.isfinite(fun):
                    result.fun, result.jac = fun, jac
                else:
                    result.jac = np.full_like(jac, np.inf)
                result.grad_norm, result.grad_name = self._largest_gradient(result.jac)
                if not result.grad_norm <= tolerance and iterations < max_iter:
                    u, restarts = result.x, restarts + 1
                    continue
                if not result.grad_norm <= tolerance and result.stop_reason == "tolerance":
                    # The within-fit gradient met the tolerance, the model's own does not, and no
                    # iteration is left to go on: the cap, not the tolerance, ended the run.
                    result.stop_reason = "max_iter"
                    result.message = (f"all {max_iter} iterations used; the model's own evaluation refused "
                                      f"the stop at the gradient tolerance (|d objective / d {result.grad_name}| "
                                      f"= {result.grad_norm:.3g} > {tolerance:.3g})")
            if not (stuck and gained and restarts < MEMORY_RESTARTS and iterations < max_iter):
                break
            u, restarts = result.x, restarts + 1
        result.nit, result.optimizer_restarts = iterations, restarts
        result.plateau = result.stop_reason == "plateau"
        if result.plateau:
            result.success = True
            result.message = (f"the objective gained less than {plateau:.3g} in the last {PLATEAU_WINDOW} "
                              "iterations (plateau rule)")
        elif result.stop_reason == "tolerance":
            result.success = True
            result.message = (f"the largest gradient entry, |d objective / d {result.grad_name}| = "
                              f"{result.grad_norm:.3g}, is within the tolerance {tolerance:.3g}")
        elif result.stop_reason == "line_search" and result.message.rstrip().endswith(":"):
            # SciPy's ABNORMAL termination carries no reason of its own.
            result.message = (f"{result.message.rstrip()} the line search found no lower objective along "
                              "L-BFGS-B's direction (an objective or gradient that is inaccurate or not smooth)")
        # A run that SciPy's own tests ended is taken as converged, however far it went: on breast
        # cancer the Pólya-Gamma optimum has kernel variance ~5e3-1e4 from every start.
        result.runaway = self._runaway(u0, result.x) if result.plateau or not result.success else None
        result.start = u0
        return result

    def _largest_gradient(self, g):
        """:func:`gpdsl.diagnostics.largest_gradient` of ``g``, X's column scales (for an optimised
        Z) computed once: of a Dask X each is a pass over the data, and the tolerance stop reads
        the gradient at every iteration."""
        if self._input_scale is None and any(e.name == "inducing.Z" for e in self.table.free):
            self._input_scale = np.asarray(np.std(self.X, axis=0), dtype=float)
        return largest_gradient(self.table, g, self.X, self._input_scale)

    def _checked_start(self, u0, tolerance):
        """``(fun, result)`` for a run that stops within the gradient tolerance: where the
        gradient at ``u0`` is already within it, ``result`` is that zero-step run's; otherwise
        None, and ``fun`` is this objective with its first call at ``u0`` answered by the
        evaluation made here (SciPy's L-BFGS-B starts by evaluating ``u0``)."""
        from scipy.optimize import OptimizeResult

        f0, g0 = self(u0)
        if np.isfinite(f0) and self._largest_gradient(g0)[0] <= tolerance:
            return self, OptimizeResult(x=u0.copy(), fun=f0, jac=g0, nit=0, nfev=1, status=0, success=True,
                                        message="the start is within the gradient tolerance")
        first = [(u0.copy(), f0, g0)]

        def answered(u):
            if first and np.array_equal(u, first[0][0]):
                return first.pop()[1:]
            first.clear()
            return self(u)

        return answered, None

    def _runaway(self, u0, u):
        """``(name, start, end, entry)`` of the free hyperparameter that moved furthest from its
        start, by a factor above RUNAWAY_FACTOR (with its element's values at ``u0`` and ``u``, and
        the element's index tuple for an array, None for a scalar), or None.

        A positive hyperparameter's move is the factor it changed by.  A real one (a
        classifier's bias, which on an evidence ridge grows with the kernel variance: FITC-EP on
        Rätsch titanic, variance 6e3 with bias -30) moves on the latent scale, the square root of
        the variance's, so its move is the square of the factor by which its magnitude (counted
        from 1) changed: a bias from 0 to -31.6 counts as a variance growing 1e3-fold.  Moves
        towards a simpler model are not counted: a length-scale that grows switches its feature
        off (automatic relevance determination, the intended answer), and a kernel variance that
        collapses is the constant model, which ``gpdsl.fit_warnings.no_better_than_constant`` reports."""
        start, end = self.table.unpack(u0), self.table.unpack(u)
        moves = {}
        for e in self.table.free:
            if e.name.startswith("variational.") or e.name == "inducing.Z":
                continue
            if e.positive:
                log_ratio = np.log(end[e.name] / start[e.name])
                if e.name.endswith("lengthscale"):
                    log_ratio = np.minimum(log_ratio, 0.0)
                elif e.name.startswith("kernel.") and e.name.endswith("variance"):
                    log_ratio = np.maximum(log_ratio, 0.0)
            else:
                log_ratio = 2.0 * np.log(np.maximum(np.abs(end[e.name]), 1.0) / np.maximum(np.abs(start[e.name]), 1.0))
            i = int(np.argmax(np.abs(np.ravel(log_ratio))))
            # A vector's entry is named (a per-output noise variance: ``likelihood.variance[2]``).
            entry = None if np.ndim(end[e.name]) == 0 else np.unravel_index(i, np.shape(end[e.name]))
            moves[e.name] = (float(np.abs(np.ravel(log_ratio)[i])), float(np.ravel(start[e.name])[i]),
                             float(np.ravel(end[e.name])[i]), entry)
        name = max(moves, key=lambda k: moves[k][0], default=None)
        return (name, *moves[name][1:]) if name is not None and moves[name][0] > np.log(RUNAWAY_FACTOR) else None


__all__ = ["FitResult", "fit", "fit_at"]
