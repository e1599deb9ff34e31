"""The declarative :class:`Model` and its compilation to a fitted :class:`~gpdsl.posterior.Posterior`.

A Model is an immutable declaration of four parts.  ``fit`` runs its inference method through
the interface of :class:`gpdsl.inference.Inference` (which also says which likelihoods the
method accepts), builds the flat log-space parameter vector, optimises evidence (+ log prior)
with L-BFGS-B on the analytic gradient, and evaluates the optimal posterior once more at the
optimum.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize as sp_optimize

from . import inference as inf
from . import likelihoods as lik
from . import backends, threads
from .checks import (as_float_array, check_bool, check_nonnegative_int, check_positive_int, check_seed,
                     check_square_sums_finite)
from .diagnostics import GRADIENT_FREE_STOPS, FitDiagnostics, gradient_tolerance, largest_gradient
from .inducing import InducingSpec
from .inference import supported_pairs  # noqa: F401  (public here before the registry moved)
from .kernels import Kernel
from .methods.common import ConvergenceWarning
from .parameters import Entry, ParameterTable
from .scaling import Standardization


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


# Objective margin (nats) over the constant model below which a fit is flagged (Model._no_better_than_constant).
CONSTANT_MODEL_TOL = 1e-3
# Nats per row by which a log evidence may exceed the likelihood's bound on any marginal likelihood
# (Likelihood.log_density_bound) before it counts as a numerical failure: EP's and Laplace's
# approximations come within a small fraction of a nat per row of the true evidence, far below it.
EVIDENCE_BOUND_SLACK_PER_POINT = 0.1
# Gap (nats per training row) by which a moderate fixed M must beat an automatic M that ended
# smaller for the fit to call the automatic one a different optimum (Model._probe_small_m).  The
# trace rule's default tol (1e-3 per row) costs the bound about half that, so a gap of 1e-2 per
# row is far beyond what the rule allows.
SMALL_M_GAP_PER_POINT = 1e-2

def validate_inputs(X, name="X", n_features=None, lazy=False):
    """X as a finite float64 C-contiguous (N, D) array, or a ValueError/TypeError naming ``name``.

    Text, complex and ragged input is refused (:func:`gpdsl.checks.as_float_array`), and so are
    inputs so large that squared distances between rows overflow.  A Dask array (or an xarray
    object backed by one) is computed into memory, or with ``lazy=True`` checked lazily and
    returned as a float64 Dask array in row chunks (:func:`gpdsl.backends.validate_lazy_inputs`).

    Parameters
    ----------
    X : array_like, shape (N, D)
        Inputs: an array, nested list, pandas/xarray object or Dask array.
    name : str, default "X"
        The argument's name, for messages.
    n_features : int, optional
        D the model was fitted on, which X must match.
    lazy : bool, default False
        Keep a Dask-backed X as a Dask array (checked by one reduction) instead of computing it.

    Returns
    -------
    ndarray or dask.array.Array, shape (N, D)
        float64 (C-contiguous when in memory).

    Raises
    ------
    TypeError
        Text, complex numbers or other non-numbers.
    ValueError
        A ragged sequence, not 2-D, no rows or columns, a non-finite entry, the wrong number of
        features, or entries whose squared differences overflow float64.
    """
    if backends.is_dask(X):
        if lazy:
            return backends.validate_lazy_inputs(X, name, n_features)
        X = backends.materialize(X)
    X = as_float_array("", name, X)
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_points, n_features), got {X.ndim}-D with shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{name} must contain at least one row")
    if X.shape[1] == 0:
        raise ValueError(f"{name} must have at least one feature (column), got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} must be finite (contains NaN or inf)")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"{name} has {X.shape[1]} features but the model was fitted on {n_features}")
    check_square_sums_finite("", name, X)
    return np.ascontiguousarray(X)


def _check_fit_arguments(optimize, fixed, restarts, seed, max_iter, progress, callback):
    """Model.fit's keyword arguments, or a ValueError/TypeError naming the argument; returns
    ``fixed`` as a tuple of names."""
    check_bool("fit", "optimize", optimize, error=TypeError)
    # A truthy string such as "no" would otherwise switch the printing on.
    check_bool("fit", "progress", progress, error=TypeError)
    if callback is not None and not callable(callback):
        raise TypeError(f"fit: callback must be None or a callable taking one dict, got {callback!r}")
    if isinstance(fixed, str):
        fixed = (fixed,)
    try:
        fixed = tuple(fixed)
    except TypeError as err:
        raise TypeError(f"fit: fixed must be a parameter name or a sequence of names, got {fixed!r}") from err
    if not all(isinstance(name, str) for name in fixed):
        raise TypeError(f"fit: fixed must hold parameter names (strings), got {fixed!r}")
    check_nonnegative_int("fit", "restarts", restarts)
    check_seed("fit", seed)
    check_positive_int("fit", "max_iter", max_iter)
    return fixed


def validate_targets(y, n, name="y"):
    """y as a finite float64 (n,) array, or a ValueError/TypeError naming ``name``.

    Booleans are accepted (labels); text, complex and ragged input is not, nor are targets
    whose squares overflow (the Gaussian evidence would not be finite).  A Dask-backed y is
    computed into memory.

    Parameters
    ----------
    y : array_like, shape (n,) or (n, 1)
        Targets, one per row of X; (n, 1) is flattened.
    n : int
        The number of rows of X.
    name : str, default "y"
        The argument's name, for messages.

    Returns
    -------
    ndarray, shape (n,)
        float64, C-contiguous.

    Raises
    ------
    TypeError
        Text, complex numbers or other non-numbers.
    ValueError
        A ragged sequence, not 1-D, a length other than ``n``, a non-finite entry, or targets
        whose squares overflow float64.
    """
    # The targets, O(N), are held in memory; only X's O(N M) work is spread over Dask's tasks.
    y = as_float_array("", name, backends.materialize(y))
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D with one target per row of X, got shape {y.shape}")
    if y.shape[0] != n:
        raise ValueError(f"len({name}) = {y.shape[0]} does not match len(X) = {n}")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{name} must be finite (contains NaN or inf)")
    check_square_sums_finite("", name, y)
    return np.ascontiguousarray(y)


@dataclass(frozen=True)
class Model:
    """A GP model declared from its four parts; ``fit(X, y)`` returns a Posterior.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function (``gd.kernels``).
    likelihood : gpdsl.likelihoods.Likelihood
        One of ``gd.likelihoods.LIKELIHOODS``.
    inducing : gpdsl.inducing.InducingSpec or None, default None
        How the inducing inputs Z are chosen: required by VFE, FITC, PolyaGamma and SVGP,
        optional for EP, QP and Laplace (FITC prior with it, dense without), refused by Exact
        and VGP.
    inference : gpdsl.inference.Inference, default Exact()
        One of ``gd.inference.INFERENCE``; it must accept the likelihood.

    Raises
    ------
    TypeError
        A part of the wrong type, or a method that needs an inducing spec given none.
    ValueError
        A likelihood the method does not support, or an inducing spec given to a method that
        uses none.
    """

    kernel: Kernel
    likelihood: object
    inducing: InducingSpec | None = None
    inference: object = field(default_factory=inf.Exact)

    def __post_init__(self):
        if not isinstance(self.kernel, Kernel):
            raise TypeError(f"Model: kernel must be a gd.kernels kernel, got {self.kernel!r}")
        if type(self.likelihood) not in lik.LIKELIHOODS.values():
            raise TypeError(f"Model: likelihood must be one of gd.likelihoods.{list(lik.LIKELIHOODS)}, "
                            f"got {self.likelihood!r}")
        if type(self.inference) not in inf.INFERENCE.values():
            raise TypeError(f"Model: inference must be one of gd.inference.{list(inf.INFERENCE)}, "
                            f"got {self.inference!r}")
        self.inference.check_likelihood(self.likelihood)
        rule = self.inference.inducing_rule
        if self.inducing is not None and not isinstance(self.inducing, InducingSpec):
            raise TypeError(f"Model: inducing must be None or a spec from gd.inducing, got {self.inducing!r}")
        if rule == "required" and self.inducing is None:
            raise TypeError(f"Model: {type(self.inference).__name__} needs an inducing spec from "
                            f"gd.inducing, got {self.inducing!r}")
        if rule == "forbidden" and self.inducing is not None:
            raise ValueError(f"Model: {type(self.inference).__name__} inference uses no inducing points; "
                             "pass inducing=None")

    @property
    def sparse(self):
        """True when the model has inducing inputs (VFE, FITC, FITC-EP/QP)."""
        return self.inducing is not None

    # -- construction from files --------------------------------------------------------------
    @classmethod
    def from_dict(cls, spec):
        """The model declared by a plain dict (the inverse of :meth:`to_dict`).

        Parameters
        ----------
        spec : dict
            ``{"kernel": {...}, "likelihood": {...}, "inducing": {...}, "inference": {...}}``,
            each part ``{"type": "<ClassName>", <field>: <value>, ...}`` (:mod:`gpdsl.spec`);
            ``data``, ``fit`` and ``output`` sections are allowed and ignored.

        Returns
        -------
        Model

        Raises
        ------
        ValueError
            An unknown section, a missing kernel or likelihood, or a bad part (the message
            names the table).
        """
        from .spec import model_from_dict
        return model_from_dict(spec)

    @classmethod
    def from_toml(cls, path):
        """The model declared by a TOML model file (its ``[data]``/``[fit]``/``[output]`` ignored).

        Parameters
        ----------
        path : str or pathlib.Path
            The model file (:mod:`gpdsl.spec` describes its tables).

        Returns
        -------
        Model

        Raises
        ------
        FileNotFoundError
            If there is no such file.
        ValueError
            Invalid TOML or a bad table.
        """
        from .spec import model_from_toml
        return model_from_toml(path)[0]

    def to_dict(self):
        """The model as a plain dict of its four parts, for TOML and ``from_dict``.

        Returns
        -------
        dict
            ``{part: {"type": "<ClassName>", <field>: <value>, ...}}``; a part left at None is
            omitted.

        Raises
        ------
        ValueError
            A scipy prior whose distribution cannot be found by name in ``scipy.stats``.
        """
        from .spec import model_to_dict
        return model_to_dict(self)

    # -- compilation ----------------------------------------------------------------------------
    def parameter_table(self, X, Z=None, fixed=()):
        """The model's parameters as a :class:`gpdsl.parameters.ParameterTable`.

        The hyperparameters (kernel, likelihood), the method's variational parameters and, for
        optimised inducing inputs, Z.

        Parameters
        ----------
        X : ndarray, shape (N, D)
            Training inputs (their rows matter only to likelihoods and methods with per-point
            parameters).
        Z : ndarray, shape (M, D), optional
            Inducing inputs; entered as ``"inducing.Z"`` when the spec optimises them.
        fixed : sequence of str, optional
            Names held at their declared value.

        Returns
        -------
        gpdsl.parameters.ParameterTable

        Raises
        ------
        ValueError
            If a name in ``fixed`` is not a parameter of the model.
        """
        entries = (self.kernel.entries("kernel", X.shape[1], fixed)
                   + self.likelihood.entries("likelihood", X, fixed)
                   + self.inference.variational_entries(X.shape[0], Z, fixed))
        if Z is not None and self.inducing is not None and self.inducing.optimize:
            entries.append(Entry("inducing.Z", np.array(Z), positive=False,
                                 fixed="inducing.Z" in fixed))
        known = {e.name for e in entries}
        unknown = [name for name in fixed if name not in known]
        if unknown:
            raise ValueError(f"fit: fixed names {unknown} are not hyperparameters of this model; "
                             f"known: {sorted(known)}")
        return ParameterTable(entries)

    @threads.managed
    def evaluate(self, values, X, y, Z, need_grad=True, need_state=False, warm=None):
        """Run the inference method once at natural hyperparameter ``values``.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural-scale values keyed as in :meth:`parameter_table` (``"kernel.variance"``, ...).
        X : ndarray, shape (N, D)
            Training inputs.
        y : ndarray, shape (N,)
            Training targets (as ``likelihood.prepare_targets`` returns them).
        Z : ndarray, shape (M, D) or None
            Inducing inputs (None for methods without).
        need_grad : bool, default True
            Compute the gradients of the log evidence.
        need_state : bool, default False
            Build the predictive state a Posterior needs.
        warm : object, optional
            The method's local state from a previous evaluation (EP/QP sites, Pólya-Gamma c),
            to start from; None starts afresh.

        Returns
        -------
        gpdsl.methods.common.Evaluation
            The log evidence (or bound), its gradients by name and d/dZ, the jitter used, and
            the requested state.
        """
        return self.inference.evaluate(self.kernel, self.likelihood, values, X, y, Z, need_grad=need_grad,
                                       need_state=need_state, warm=warm)

    @threads.managed
    def fit(self, X, y, *, optimize=True, fixed=(), restarts=0, seed=0, max_iter=1000,
            progress=False, callback=None, standardize=False, subsample=None):
        """Fit hyperparameters (and Z for ``gd.inducing.Optimized``) by maximising the evidence.

        The objective is the method's log evidence or bound (e.g. Titsias (2009) eq. 16 for VFE)
        plus the log prior of hyperparameters that carry one, maximised by L-BFGS-B on its
        analytic gradient over the log of positive hyperparameters.

        Parameters
        ----------
        X : array_like or Dask array, shape (N, D)
            Training inputs.
        y : array_like, shape (N,)
            Training targets: reals for ``Gaussian``/``StudentT``, labels for ``Bernoulli``,
            counts for ``Poisson``.
        optimize : bool, default True
            False evaluates the posterior at the declared hyperparameters without optimising.
        fixed : str or sequence of str, default ()
            Names such as ``"likelihood.variance"`` held at their declared value.
        restarts : int, default 0
            Extra L-BFGS-B runs from random starts (log-hyperparameters perturbed by N(0, 1);
            optimised Z re-drawn from the training inputs), the best by objective kept.
        seed : int or None, default 0
            Seed of the restarts' and the subsample's random draws.
        max_iter : int, default 1000
            L-BFGS-B iteration cap per run.
        progress : bool, default False
            Print iteration, objective and gradient norm.
        callback : callable, optional
            Called each iteration with ``{"iteration", "objective", "grad_norm"}``.
        standardize : bool, default False
            Fit in standardised units (see below).
        subsample : int, optional
            Fit on this many rows drawn at random (see below).

        Returns
        -------
        gpdsl.Posterior
            The fitted hyperparameters, the optimal posterior's predictive state and the fit's
            record (evidence, convergence, selection, ridge and constant-model flags).

        Raises
        ------
        TypeError, ValueError
            Invalid data or keyword arguments (the message names the argument); a ``fixed``
            name that is not a parameter; ``subsample`` with per-row likelihood parameters or
            ``q_updates="joint"``; an objective or evidence that leaves float64's range.

        Notes
        -----

        Inducing specs that select from the data (``gd.inducing.GreedyVariance``,
        ``GreedyBound``) select with the declared hyperparameters; with ``reinit=True`` the
        fit then alternates re-selection (at the fitted hyperparameters, weighted by the
        method's pseudo-data) and re-fitting until the objective changes by less than
        ``reinit_tol`` times its magnitude, a selection repeats an earlier one, or ``max_reinit``
        rounds have run (which warns), and keeps the best round (thesis 4.3.2; Burt et al.'s
        greedy-variance reinitialisation); ``reinit_stop`` in the result says which.

        L-BFGS-B stops by SciPy's tests or by the plateau rule (:data:`PLATEAU_WINDOW`); a run
        that SciPy's test stopped with the gradient still large restarts from its last point
        (:meth:`_Objective.minimise`); a run that ends on an evidence ridge warns and names the
        runaway hyperparameter (``Posterior.ridge``).  How the fit ended is recorded in
        ``Posterior.diagnostics`` (:class:`gpdsl.diagnostics.FitDiagnostics`), and ``converged``
        is derived from it by :func:`gpdsl.diagnostics.converged_rule`; every way of falling
        short of it warns ``ConvergenceWarning``.  The fit runs with one BLAS thread except in its
        large passes
        (:mod:`gpdsl.threads`).
        With M chosen by ``tol`` the first selection stops at ``first_round_max_m`` points.

        ``standardize=True`` fits with every input column scaled to mean 0 and standard
        deviation 1 and, for the ``Gaussian`` likelihood, the targets too (a constant mean); the
        hyperparameters and Z are then in those units, while the posterior predicts, and reports
        its log evidence, in the data's (:mod:`gpdsl.scaling`).

        X and y may be Dask arrays (or xarray objects backed by them; ``pip install
        "gpdsl[dask]"``).  VFE, FITC, Pólya-Gamma, FITC-Laplace and FITC-EP/QP on the parallel
        schedule then run every O(N M^2) pass as one Dask task per row block of X with a tree
        reduction of the M x M / M-vector partials, on the active scheduler (threads, or a
        ``distributed.Client`` when one exists), and ``GreedyVariance`` selects with its factor
        held by the blocks.  X stays distributed; y and the per-point vectors (O(N)) are held in
        memory.  With the method's ``chunk_size`` equal to X's row chunks the result is the
        in-memory fit's to the bit (the partial sums are added in the same tree; EP/QP within
        1e-10, FITC-Laplace to rounding); otherwise to rounding.  Other methods and inducing specs compute X into memory.

        ``subsample=n`` fits on n rows drawn at random (``np.random.default_rng(seed)``): the
        hyperparameters, Z and any greedy selection (with its reinitialisation loop) are those of
        the fit on the n rows, and the posterior is then computed on all N rows at them, with no
        further optimisation (for VFE and FITC one pass; for PolyaGamma its c iteration, for EP
        its sweeps, over all N).  ``Posterior.subsample`` records n and the subsample fit's
        objective; ``log_evidence`` is the full data's.  None (default) fits on all rows; n >= N
        is refused (ValueError), since it would silently mean all rows.  Greedy selection's
        ``indices`` refer to rows of X; ``standardize=True`` scales by
        all N rows.  Refused (ValueError) for a likelihood with per-row parameters
        (``HeteroscedasticGaussian(variance=...)``) and for ``q_updates="joint"``.

        A fit whose objective is within ``CONSTANT_MODEL_TOL`` nats of the constant model f = 0
        (a classifier's at its bias, white noise at its best variance for Gaussian regression)
        or below it warns ``ConvergenceWarning`` and is flagged ``constant_model=True``.
        """
        from .inducing import SelectionContext
        from .posterior import Posterior

        X = validate_inputs(X, lazy=self._chunks_dask())
        y = self.likelihood.prepare_targets(validate_targets(y, X.shape[0]))
        fixed = _check_fit_arguments(optimize, fixed, restarts, seed, max_iter, progress, callback)
        check_bool("fit", "standardize", standardize, error=TypeError)
        if subsample is not None:
            check_positive_int("fit", "subsample", subsample)
        scaling = None
        if standardize:
            scaling = Standardization.of(X, y if self.likelihood.standardizes_targets else None)
            X, y = scaling.inputs(X), scaling.targets(y)
        rows = None
        if subsample is not None and subsample >= X.shape[0]:
            raise ValueError(f"fit: subsample = {subsample} must be smaller than the number of rows, "
                             f"N = {X.shape[0]} (leave it None to fit on all rows)")
        if subsample is not None:
            self._check_subsample()
            if self.sparse:
                self.inducing.check_subsample(subsample, X.shape[0])
            rows = np.sort(np.random.default_rng(seed).choice(X.shape[0], size=subsample, replace=False))
        # A subsample's rows are read into memory (of a Dask X, those rows only).
        X_fit, y_fit = (X, y) if rows is None else (np.array(X[rows]), y[rows])
        # Declared kernel and likelihood values (Z is not chosen yet, so it cannot be named).
        declared = self.parameter_table(X_fit, None, tuple(f for f in fixed if f != "inducing.Z")).values()
        selection = None
        if self.sparse:
            weights, targets = self.likelihood.surrogate(declared, "likelihood", X_fit, y_fit)
            context = SelectionContext(self.kernel, declared, weights=weights, targets=targets,
                                       first_round=True)
            selection = self.inducing.select(self._selection_inputs(X_fit), y_fit, context)
        fit = self._fit_at(X_fit, y_fit, selection, fixed, optimize, restarts, seed, max_iter, progress, callback,
                           start=None, warm=None)
        rounds, reinit_stop = [(selection, fit)], None
        if self.sparse and self.inducing.reinit:
            rounds, reinit_stop = self._reinit_loop(X_fit, y_fit, fixed, optimize, restarts, seed, max_iter,
                                                    progress, callback, rounds)
        # Only a loop that settled (or none) is probed: one stopped at max_reinit has warned already,
        # and one that found no candidate collapsed the kernel variance.
        if self.sparse and optimize and reinit_stop in (None, "objective", "repeated_selection"):
            rounds, small_m_replaced = self._probe_small_m(X_fit, y_fit, fixed, seed, max_iter, rounds)
        else:
            small_m_replaced = None
        # The thesis author's reinitialisation loop returns the best round, not the last.
        selection, fit = max(rounds, key=lambda r: r[1]["objective"])
        subsample_record = None
        if rows is not None:
            selection, fit, subsample_record = self._finish_on_all_rows(X, y, rows, selection, fit, fixed,
                                                                        max_iter)
        evaluation = fit["evaluation"]
        constant_model = self._no_better_than_constant(y, fit["values"], evaluation.log_evidence)
        diagnostics = self._diagnostics(fit, rounds, reinit_stop, selection, subsample_record, constant_model,
                                        small_m_replaced)
        self._warn_unconverged(diagnostics, fit, evaluation.warm)
        history = None
        if self.sparse and self.inducing.reinit:
            history = [{"M": int(f["Z"].shape[0]), "objective": float(f["objective"])} for _, f in rounds]
        log_evidence = evaluation.log_evidence + (scaling.log_jacobian(y.size) if scaling is not None else 0.0)
        return Posterior(model=self, values=fit["values"], state=evaluation.state,
                         log_evidence=log_evidence, log_prior=fit["log_prior"], diagnostics=diagnostics,
                         priors=fit["table"].prior_descriptions(),
                         fixed=[e.name for e in fit["table"].entries if e.fixed],
                         sites=evaluation.warm, selection=selection, reinit_history=history,
                         standardization=scaling, subsample=subsample_record)

    def _diagnostics(self, fit, rounds, reinit_stop, selection, subsample_record, constant_model,
                     small_m_replaced):
        """The :class:`gpdsl.diagnostics.FitDiagnostics` of the kept round ``fit``."""
        local = fit["evaluation"].warm
        record = dict(fit["optimiser"])
        caps = record.pop("caps_reached") + (["max_iter"] if record["stop_reason"] == "max_iter" else [])
        if local is not None and not local.converged and self._local_cap_reached(local):
            caps.append("max_sweeps")
        if reinit_stop == "max_reinit":
            caps.append("max_reinit")
        if selection is not None and selection.stopped == "max_m":
            caps.append("max_m")
        total_sweeps = (sum(f["total_sweeps"] for _, f in rounds)
                        + (fit["total_sweeps"] if subsample_record is not None else 0))
        return FitDiagnostics(**record, caps_reached=tuple(caps), jitter=float(fit["evaluation"].jitter),
                              ridge=fit["ridge"], local_sweeps=int(total_sweeps),
                              local_converged=None if local is None else bool(local.converged),
                              clamped_sites=int(getattr(local, "clamped", 0) or 0),
                              reinit_rounds=len(rounds) - 1, reinit_stop=reinit_stop,
                              small_m_replaced=small_m_replaced,
                              subsample=None if subsample_record is None else subsample_record["rows"],
                              constant_model=constant_model)

    def _local_cap_reached(self, local):
        """Whether the method's local iteration stopped at its cap (else it stalled below it)."""
        cap = next((getattr(self.inference, a) for a in ("max_sweeps", "max_iter", "q_max_iter")
                    if hasattr(self.inference, a)), None)
        return cap is None or local.sweeps >= cap

    def _warn_unconverged(self, diagnostics, fit, local):
        """One ConvergenceWarning for each way the fit fell short that its record holds: a ridge (not
        for a fit already flagged as the constant model, which its own warning explains), the
        optimiser's stop, the final gradient, the local iteration.  A cap of the reinit loop or the
        selection warns where it is reached (``_reinit_loop``, the inducing spec)."""
        name = type(self.inference).__name__
        if diagnostics.ridge is not None and not diagnostics.constant_model:
            _warn_ridge(diagnostics.ridge, *fit["ridge_move"], diagnostics.message, self.likelihood.ridge_cause)
        stop = diagnostics.stop_reason
        if stop in ("max_iter", "line_search") and diagnostics.ridge is None:
            warnings.warn(f"{name}: the hyperparameter optimisation did not converge ({stop}: {diagnostics.message}); "
                          "the result is flagged converged=False", ConvergenceWarning, stacklevel=4)
        elif (stop not in ("max_iter", "line_search", "outer_loop") and diagnostics.ridge is None
              and not diagnostics.converged and not diagnostics.grad_norm <= diagnostics.grad_tol):
            warnings.warn(f"{name}: the optimiser stopped ({stop}: {diagnostics.message}) after "
                          f"{diagnostics.optimizer_restarts} restart(s) with the gradient still large: "
                          f"|d objective / d {diagnostics.grad_name}| = {diagnostics.grad_norm:.3g} > "
                          f"{diagnostics.grad_tol:.3g}; the result is flagged converged=False (raise max_iter, "
                          "or refit from post.values)", ConvergenceWarning, stacklevel=4)
        # A minibatch run's q is the optimiser's (its flag is the stopping rule's, warned about above).
        if local is not None and not local.converged and not fit["minibatch"]:
            # ``sweeps`` counts the method's accepted local iterations (EP/QP site sweeps, c
            # updates, natural-gradient steps): below the cap they stopped because no step could
            # raise the objective any more, which the message must not call running out of sweeps.
            why = (f"did not converge in {local.sweeps} sweeps" if "max_sweeps" in diagnostics.caps_reached
                   else f"stalled after {local.sweeps} accepted local updates (no step raised the objective)")
            warnings.warn(f"{name} {why} (tol {self.inference.tol:g}); the result is flagged converged=False",
                          ConvergenceWarning, stacklevel=4)

    def _probe_small_m(self, X, y, fixed, seed, max_iter, rounds):
        """An automatic M that ended small is checked against one fit at a moderate M (the
        inducing spec's ``small_m_probe``), selected and started at the best round's
        hyperparameters.  Where the probe's objective is above the best round's by more than
        SMALL_M_GAP_PER_POINT * N nats, the automatic rule stopped in another optimum (an 18-D
        image-like set: M = 15-20 at length-scales of 100-300, 120-250 nats below the fits at
        M >= 54); the probe round is appended to the rounds (and so kept as the best), and a
        ConvergenceWarning says so.  Returns the rounds and the probe's M where it was kept, else None."""
        from .inducing import SelectionContext

        _, best = max(rounds, key=lambda r: r[1]["objective"])
        probe = self.inducing.small_m_probe(X.shape[1], best["Z"].shape[0], X.shape[0])
        if probe is None:
            return rounds, None
        weights, targets = best["evaluation"].pseudo_data
        context = SelectionContext(self.kernel, best["values"], weights=weights, targets=targets)
        probe_selection = probe.select(self._selection_inputs(X), y, context)
        probed = self._fit_at(X, y, probe_selection, fixed, True, 0, seed, max_iter, False, None,
                              start=best["values"], warm=None)
        gap = probed["objective"] - best["objective"]
        if gap <= SMALL_M_GAP_PER_POINT * X.shape[0]:
            return rounds, None
        warnings.warn(f"{type(self.inducing).__name__}: the automatic M = {best['Z'].shape[0]} stopped "
                      f"{gap:.4g} nats below a fit at M = {probe_selection.Z.shape[0]} (the small M held the fit in a "
                      f"smoother optimum, length-scale up to {_largest(best['values'], 'lengthscale')}); the "
                      f"M = {probe_selection.Z.shape[0]} round is kept (diagnostics.small_m_replaced); give m or a "
                      "smaller tol", ConvergenceWarning, stacklevel=4)
        return rounds + [(probe_selection, probed)], int(probe_selection.Z.shape[0])

    def _check_subsample(self):
        """fit(subsample=n)'s refusals: a likelihood with per-row parameters (they would have to be
        subsampled with the rows) and q optimised as hyperparameters (the finish does not optimise,
        so q would stay the subsample's)."""
        if self.likelihood.per_row_parameters:
            raise ValueError(f"fit: subsample cannot subsample the per-row parameters of "
                             f"{self.likelihood!r}; draw the rows of X, y and those parameters yourself")
        if self.inference.optimises_variational_parameters:
            raise ValueError(f"fit: subsample needs q moved to its optimum on all rows, which "
                             f"{type(self.inference).__name__}(q_updates='joint') does only by optimising; use "
                             "q_updates='natural'")

    def _finish_on_all_rows(self, X, y, rows, selection, fit, fixed, max_iter):
        """fit(subsample=n)'s last step: the posterior on all rows of X at the hyperparameters and
        Z of ``fit`` (the subsample's best round), with no optimisation.  Returns the selection
        (its indices mapped to rows of X), the full data's fit record (the subsample fit's
        optimiser record and ridge kept) and the Posterior's ``subsample`` record."""
        from dataclasses import replace
        if selection is not None:
            selection = replace(selection, Z=fit["Z"],
                                indices=None if selection.indices is None else rows[selection.indices])
        # The subsample's local state (per-row sites, c) does not carry over; q(u) would, but a
        # fresh start is what optimize=False gives every method.
        finish = self._fit_at(X, y, selection, fixed, False, 0, 0, max_iter, False, None,
                              start=fit["values"], warm=None)
        # The record is the subsample fit's: its optimiser's stop, gradient and ridge.
        finish.update(optimiser=fit["optimiser"], ridge=fit["ridge"], ridge_move=fit["ridge_move"])
        return selection, finish, {"rows": int(rows.size), "objective": float(fit["objective"])}

    def _reinit_loop(self, X, y, fixed, optimize, restarts, seed, max_iter, progress, callback, rounds):
        """Re-select Z at the last fit's hyperparameters (weighted by its pseudo-data) and re-fit,
        until the objective changes by at most ``reinit_tol`` relative to its size, a selection
        repeats, nothing is left to select, or ``max_reinit`` rounds have run (which warns).
        Returns the rounds and why the loop stopped: "objective", "repeated_selection",
        "no_candidate" or "max_reinit"."""
        from .inducing import NoCandidateError, SelectionContext

        spec = self.inducing
        selection, fit = rounds[-1]
        seen = {frozenset(selection.indices.tolist())}
        for _ in range(spec.max_reinit):
            values, evaluation = fit["values"], fit["evaluation"]
            weights, targets = evaluation.pseudo_data
            context = SelectionContext(self.kernel, values, weights=weights, targets=targets)
            try:
                selection = spec.select(self._selection_inputs(X), y, context)
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
            previous = fit["objective"]
            fit = self._fit_at(X, y, selection, fixed, optimize, restarts, seed, max_iter, progress, callback,
                               start=values, warm=evaluation.warm)
            rounds.append((selection, fit))
            if abs(fit["objective"] - previous) <= spec.reinit_tol * max(1.0, abs(previous)):
                return rounds, "objective"
        change = rounds[-1][1]["objective"] - rounds[-2][1]["objective"]
        warnings.warn(f"{type(spec).__name__}: the reinitialisation loop stopped at max_reinit={spec.max_reinit} "
                      f"rounds with the objective still changing ({change:+.4g} in the last round, M "
                      f"{rounds[0][1]['Z'].shape[0]} -> {rounds[-1][1]['Z'].shape[0]}); the best round is kept "
                      "(flagged reinit_stop='max_reinit'); raise max_reinit or reinit_tol",
                      ConvergenceWarning, stacklevel=4)
        return rounds, "max_reinit"

    def _selection_inputs(self, X):
        """X for the inducing spec's selection: selection from the data (k-means, greedy) reads X
        in memory, so a Dask X is computed for it; Fixed and Subsample read no more than Z."""
        return X if self.inducing.lazy_inputs else backends.materialize(X)

    def _chunks_dask(self):
        """Whether this model's fit runs its O(N M^2) passes as Dask tasks when X is a Dask array:
        VFE, FITC, Pólya-Gamma and FITC-Laplace, and FITC-EP/QP on the parallel schedule, with a likelihood whose
        noise does not depend on X's values.  Other methods compute a Dask X into memory (dense
        methods are O(N^2) anyway; sequential EP is serial by nature)."""
        return self.sparse and self.inference.supports_dask_chunks and self.likelihood.supports_dask_chunks

    def _no_better_than_constant(self, y, values, log_evidence):
        """Warn (ConvergenceWarning) and return True when the objective is within
        CONSTANT_MODEL_TOL nats of the constant model's (the likelihood's
        ``constant_model_log_likelihood``), which every method here reaches exactly as the kernel
        variance goes to 0.  That is a true optimum (the Pólya-Gamma bound falls
        into it on crabs with K-means Z, 5 of 50 splits; raw Boston housing, targets ~22 and
        inputs up to ~700, fits noise 584 and predicts 0) and the right answer for targets that
        do not depend on X, but usually a poor one: it predicts the same everywhere."""
        constant = self.likelihood.constant_model_log_likelihood(values, "likelihood", y)
        if constant is None or log_evidence - constant >= CONSTANT_MODEL_TOL:
            return False
        variance = float(np.max(values.get("kernel.variance", np.nan)))
        cause = ("the kernel variance has collapsed" if variance < 1e-4 else
                 f"the fit failed at kernel variance {variance:.3g}" if variance > 1e8 else
                 "the posterior ignores X")
        warnings.warn(f"{type(self.inference).__name__}: the fitted objective {log_evidence:.6g} is no better "
                      f"than the constant model's {constant:.6g} ({cause}); if the targets depend on X, "
                      "standardise the data (fit(standardize=True)) or refit with restarts= or other "
                      "starting values (flagged constant_model=True)", ConvergenceWarning, stacklevel=4)
        return True

    def _fit_at(self, X, y, selection, fixed, optimize, restarts, seed, max_iter, progress, callback, start,
                warm):
        """One L-BFGS-B fit (with restarts) at the selected inducing inputs, from the declared
        hyperparameters or ``start`` (a values dict); returns a dict describing the optimum."""
        Z0 = selection.Z if selection is not None else None
        table = self.parameter_table(X, Z0, fixed)
        run = _Objective(self, table, X, y, Z0)
        run.warm = warm
        values0 = table.values()
        if start is not None:      # a re-selection round continues from the previous optimum
            # (a method's variational parameters only where M has not changed)
            values0.update({k: v for k, v in start.items() if k in values0 and np.shape(v) == values0[k].shape})
        u0 = table.pack(values0)
        result = None
        if optimize and table.size > 0:
            rng = np.random.default_rng(seed)
            starts = [u0] + [_random_start(table, u0, X, rng) for _ in range(restarts)]
            for u_start in starts:
                # Each start from the same local state, and the best start's kept: a minibatch
                # method's q is its result (the posterior is evaluated at it as it stands).
                run.warm = warm
                try:
                    res = self.inference.minimise(run, u_start, max_iter, progress, callback)
                except FloatingPointError as err:
                    # L-BFGS-B steps back from such points (the objective returns inf); a minibatch
                    # optimiser has no line search to do so (fuzz: minibatch SVGP, Poisson counts
                    # to 4e5 with Z 1e-3 apart).
                    raise _out_of_range(f"the optimiser stepped to a numerically impossible point ({err})",
                                        X, y) from err
                if result is None or res.fun < result.fun:
                    result, best_warm = res, run.warm
            run.warm = best_warm
            if not np.all(np.isfinite(result.x)):
                raise _out_of_range("L-BFGS-B stepped to non-finite hyperparameters (the objective and its "
                                    "gradient at the start are too large for its float64 arithmetic)", X, y)
            u_best, runaway = result.x, result.runaway
            # A minibatch run has no full-batch gradient (jac None), and its rule does not use one;
            # its steps move q too, so q's convergence is the optimiser's.
            minibatch = result.jac is None
            ridge, ridge_move = (None, None) if runaway is None else (runaway[0], runaway[1:])
            optimiser = {"stop_reason": result.stop_reason, "message": str(result.message),
                         "n_iterations": int(result.nit), "grad_norm": float(result.grad_norm),
                         "grad_tol": gradient_tolerance(X.shape[0]), "grad_name": result.get("grad_name", ""),
                         "optimizer_restarts": int(getattr(result, "optimizer_restarts", 0)), "caps_reached": []}
            outer = self.inference.outer_loop(run, u_best, max_iter)
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
        need_grad = not minibatch and optimiser["stop_reason"] not in GRADIENT_FREE_STOPS
        evaluation = self._final_evaluation(values, X, y, Z, run.warm, optimize, need_grad)
        if not np.isfinite(evaluation.log_evidence):
            # A posterior must never carry a NaN or infinite evidence.
            raise _out_of_range(f"the log evidence at the {'fitted' if optimize else 'declared'} hyperparameters "
                                f"is {evaluation.log_evidence}", X, y)
        if evaluation.warm is not None:
            run.total_sweeps += evaluation.warm.sweeps
        if need_grad:
            _, gradient = run.negated({**values, **({"inducing.Z": Z} if "inducing.Z" in table.names() else {})},
                                      evaluation)
            optimiser["grad_norm"], optimiser["grad_name"] = largest_gradient(table, gradient, X)
        log_prior, _ = table.log_prior({**values, "inducing.Z": Z})
        return {"values": values, "Z": Z, "evaluation": evaluation, "table": table, "optimiser": optimiser,
                "log_prior": log_prior, "total_sweeps": run.total_sweeps, "ridge": ridge,
                "ridge_move": ridge_move, "minibatch": minibatch,
                "objective": evaluation.log_evidence + log_prior}


    def _final_evaluation(self, values, X, y, Z, warm, optimize, need_grad=False):
        """The evaluation (with its predictive state) a posterior is built from.

        It warm-starts from the local state (EP/QP sites, Pólya-Gamma c) of the optimiser's last
        evaluation, which may belong to a rejected line-search point; where that start fails
        numerically (FloatingPointError: the optimiser's signal to step back), it starts afresh.
        A failure from a fresh start too is the data's scale or the hyperparameters, raised as
        the ValueError of :func:`_out_of_range`."""
        for start in ((warm, None) if warm is not None else (None,)):
            try:
                evaluation = self.evaluate(values, X, y, Z, need_grad=need_grad, need_state=True, warm=start)
                _check_evidence_bound(self.likelihood, values, y, evaluation.log_evidence)
                return evaluation
            except FloatingPointError as err:
                failure = err
        where = "fitted" if optimize else "declared"
        raise _out_of_range(f"the posterior at the {where} hyperparameters cannot be computed ({failure})",
                            X, y) from failure


def _check_evidence_bound(likelihood, values, y, log_evidence):
    """FloatingPointError when ``log_evidence`` exceeds the likelihood's upper bound on any marginal
    likelihood (``Likelihood.log_density_bound``) by more than EVIDENCE_BOUND_SLACK_PER_POINT per
    row plus one nat: no approximation comes near that, only arithmetic that lost its precision
    (EP with Student-t sites at a prior variance of 5e-42: 3e8 on 31 points, bound 14)."""
    bound = likelihood.log_density_bound(values, "likelihood", y)
    if bound is not None and log_evidence > bound + EVIDENCE_BOUND_SLACK_PER_POINT * y.size + 1.0:
        raise FloatingPointError(f"the log evidence {log_evidence:.6g} is above sum_n max_f log p(y_n | f) = "
                                 f"{bound:.6g}, which no marginal likelihood can exceed: the method lost its precision")


def _largest(values, suffix):
    """The largest value of the hyperparameters whose names end in ``suffix``, as text."""
    found = [float(np.max(v)) for k, v in values.items() if k.endswith(suffix)]
    return f"{max(found):.3g}" if found else "?"


def _out_of_range(what, X, y):
    """The ValueError of a fit that left float64's finite range: ``what`` happened, and the data's
    scale (the usual cause once the inputs' checks have passed) is named with the remedy."""
    return ValueError(f"fit: {what}; X spans up to {float(np.max(np.abs(X))):.3g} and y up to "
                      f"{float(np.max(np.abs(y))):.3g} in magnitude, far from the scale the declared hyperparameters "
                      "describe: standardise X and y (subtract the mean, divide by the standard deviation), or "
                      "declare the hyperparameters on the data's scale")


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


def _warn_ridge(name, start, end, how, cause):
    """One ConvergenceWarning for a run that ended (``how``) with hyperparameter ``name`` run away
    from ``start`` to ``end``; ``cause`` is the likelihood's usual one (``Likelihood.ridge_cause``)."""
    prior = ("gd.priors.LogNormal(0.0, 2.0)" if start > 0 and end > 0
             else "gd.priors.ScipyPrior(scipy.stats.norm(0.0, 3.0), initial=0.0)")
    warnings.warn(f"L-BFGS-B stopped on an evidence ridge ({how}): {name} ran from {start:.3g} to {end:.3g} "
                  f"while the objective barely changed, and would keep running: {cause}. The fit is usable; to "
                  f"pin {name} down put a prior on it, e.g. {name.split('.')[-1]}={prior} (flagged ridge={name!r})",
                  ConvergenceWarning, stacklevel=5)


def _random_start(table, u0, X, rng):
    """Hyperparameters perturbed (log-space N(0, 1)), Z re-drawn from X; a method's variational
    parameters keep their start, which does not depend on the hyperparameters."""
    values = table.unpack(u0)
    for e in table.free:
        if e.name.startswith("variational."):
            continue
        if e.name == "inducing.Z":
            values[e.name] = np.asarray(X[rng.choice(X.shape[0], size=e.value.shape[0], replace=False)])
        elif e.positive:
            values[e.name] = values[e.name] * np.exp(rng.standard_normal(e.value.shape))
        else:
            values[e.name] = values[e.name] + rng.standard_normal(e.value.shape)
    return table.pack(values)


class _Objective:
    """Negative (evidence + log prior) and its gradient on the free log-space vector."""

    def __init__(self, model, table, X, y, Z0, evaluate=None):
        self.model, self.table, self.X, self.y, self.Z0 = model, table, X, y, Z0
        # model.evaluate, or a fixed-site objective (QP's Algorithm 1 outer step).
        self.evaluate = evaluate or model.evaluate
        self.last = None
        self.warm = None          # EP/QP sites persist between evaluations (as in GPML and GPy)
        self.total_sweeps = 0

    def restricted(self, table, evaluate):
        """An objective on the same data with another parameter table and evaluation (QP's
        Algorithm 1 optimises eq. 4 at fixed sites with the likelihood's parameters held)."""
        return _Objective(self.model, table, self.X, self.y, self.Z0, evaluate=evaluate)

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
        (:func:`_check_evidence_bound`) raised as FloatingPointError."""
        ev = self.evaluate(values, self.X, self.y, Z, warm=warm)
        _check_evidence_bound(self.model.likelihood, values, self.y, ev.log_evidence)
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
        rule or the iteration cap, else None; see :meth:`_runaway`) and ``start`` (``u0``)."""
        trail = []                # objectives of the accepted iterates
        plateau = PLATEAU_WINDOW * PLATEAU_PER_POINT * self.X.shape[0]
        tolerance = gradient_tolerance(self.X.shape[0])

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
            if _on_plateau(trail, plateau):
                raise StopIteration

        u, iterations, restarts = u0, 0, 0
        while True:
            result = sp_optimize.minimize(self, u, jac=True, method="L-BFGS-B", callback=report,
                                          options={"maxiter": max_iter - iterations})
            iterations += int(result.nit)
            if not (np.isfinite(result.fun) and np.any(result.jac)):
                # SciPy's last gradient is a failed evaluation's zeros (or the point failed): the
                # gradient at the point it returns, evaluated afresh, or none (inf) if that fails.
                fun, jac = self(result.x)
                result.jac = jac if np.isfinite(fun) else np.full_like(jac, np.inf)
            result.stop_reason = _stop_reason(result)
            result.grad_norm, result.grad_name = (largest_gradient(self.table, result.jac, self.X)
                                                  if result.jac is not None else (np.nan, ""))
            stuck = result.stop_reason in ("objective_change", "line_search") and not result.grad_norm <= tolerance
            gained = restarts == 0 or result.nit > 0
            if not (stuck and gained and restarts < MEMORY_RESTARTS and iterations < max_iter):
                break
            u, restarts = result.x, restarts + 1
        result.nit, result.optimizer_restarts = iterations, restarts
        result.plateau = result.stop_reason == "plateau"
        if result.plateau:
            result.success = True
            result.message = (f"the objective gained less than {plateau:.3g} in the last {PLATEAU_WINDOW} "
                              "iterations (plateau rule)")
        elif result.stop_reason == "line_search" and result.message.rstrip().endswith(":"):
            # SciPy's ABNORMAL termination carries no reason of its own.
            result.message = (f"{result.message.rstrip()} the line search found no lower objective along "
                              "L-BFGS-B's direction (an objective or gradient that is inaccurate or not smooth)")
        # A run that SciPy's own tests ended is taken as converged, however far it went: on breast
        # cancer the Pólya-Gamma optimum has kernel variance ~5e3-1e4 from every start.
        result.runaway = self._runaway(u0, result.x) if result.plateau or not result.success else None
        result.start = u0
        return result

    def _runaway(self, u0, u):
        """``(name, start, end)`` of the free hyperparameter that moved furthest from its start, by
        a factor above RUNAWAY_FACTOR (with its element's values at ``u0`` and ``u``), or None.

        A positive hyperparameter's move is the factor it changed by.  A real one (a
        classifier's bias, which on an evidence ridge grows with the kernel variance: FITC-EP on
        Rätsch titanic, variance 6e3 with bias -30) moves on the latent scale, the square root of
        the variance's, so its move is the square of the factor by which its magnitude (counted
        from 1) changed: a bias from 0 to -31.6 counts as a variance growing 1e3-fold.  Moves
        towards a simpler model are not counted: a length-scale that grows switches its feature
        off (automatic relevance determination, the intended answer), and a kernel variance that
        collapses is the constant model, which ``_no_better_than_constant`` reports."""
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
            moves[e.name] = (float(np.abs(np.ravel(log_ratio)[i])), float(np.ravel(start[e.name])[i]),
                             float(np.ravel(end[e.name])[i]))
        name = max(moves, key=lambda k: moves[k][0], default=None)
        return (name, *moves[name][1:]) if name is not None and moves[name][0] > np.log(RUNAWAY_FACTOR) else None
