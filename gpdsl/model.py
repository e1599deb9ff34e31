"""The declarative :class:`Model`: a GP model declared from its four parts and an optional mean function.

A Model is an immutable declaration of a kernel, a likelihood, an inducing spec and an
inference method.  It compiles its parts' parameters into a table
(:meth:`Model.parameter_table`), binds its parts to values (:meth:`Model.bind`) and evaluates
its inference method once at given values (:meth:`Model.evaluate`).  ``fit`` runs the fit loop
of :mod:`gpdsl.fitting` (L-BFGS-B on the evidence and its analytic gradient, with gpdsl's
stopping rules) and returns a :class:`~gpdsl.posterior.Posterior`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import defaults, fitting, threads
from . import inference as inf
from .checks import check_positive_int, check_seed
from .components import bind, trusted_modules
from .inducing import InducingSpec
from .inference import Inference
from .inputs import check_fit_arguments, validate_inputs
from .kernels import Kernel
from .likelihoods import Likelihood
from .means import Mean
from .multioutput import (data_output_names, inducing_gradient, layout, long_data, method_inducing, name_outputs,
                          output_count)
from .parameters import Entry, ParameterTable


@dataclass(frozen=True)
class Model:
    """A GP model declared from its four parts and an optional mean; ``fit(X, y)`` returns a Posterior.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function (``gd.kernels``).
    likelihood : gpdsl.likelihoods.Likelihood
        The observation model (``gd.likelihoods``, or any subclass of ``Likelihood``).
    inducing : gpdsl.inducing.InducingSpec or None, default None
        How the inducing inputs Z are chosen: required by VFE, FITC, PolyaGamma and SVGP,
        optional for EP, QP and Laplace (FITC prior with it, dense without), refused by Exact
        and VGP.
    inference : gpdsl.inference.Inference or None, default None
        The inference method (``gd.inference``, or any subclass of ``Inference``); it must
        accept the likelihood.  None: ``Exact()`` for a likelihood of one latent function; for
        a multi-class likelihood (``Categorical``) the method is chosen by the data when ``fit``
        sees them (:func:`gpdsl.defaults.declaration`, :meth:`resolved`), and the posterior
        carries the model with the method chosen (``post.model``).
    mean : gpdsl.means.Mean or None, default None
        The prior mean function m (``gd.means``): f ~ GP(m, k).  None is the zero mean.  Every
        method sees it as a per-row offset of the latent input that moves with its
        hyperparameters (``"mean.<name>"``); predictions include it.

    Raises
    ------
    TypeError
        A part of the wrong type, or a method that needs an inducing spec given none.
    ValueError
        A likelihood the method does not support, or an inducing spec given to a method that
        uses none.
    """

    kernel: Kernel
    likelihood: Likelihood
    inducing: InducingSpec | None = None
    inference: Inference | None = None
    mean: Mean | None = None

    def __post_init__(self):
        if not isinstance(self.kernel, Kernel):
            raise TypeError(f"Model: kernel must be a gd.kernels kernel, got {self.kernel!r}")
        if not isinstance(self.likelihood, Likelihood):
            raise TypeError(f"Model: likelihood must be a gd.likelihoods likelihood (a Likelihood), "
                            f"got {self.likelihood!r}")
        if self.inference is None and not defaults.chooses_inference(self.likelihood):
            object.__setattr__(self, "inference", inf.Exact())
        if self.inducing is not None and not isinstance(self.inducing, InducingSpec):
            raise TypeError(f"Model: inducing must be None or a spec from gd.inducing, got {self.inducing!r}")
        if self.inference is None:
            # Chosen at fit (resolved); what depends on the method is checked then.
            self._check_latent_parts()
            return
        if not isinstance(self.inference, Inference):
            raise TypeError(f"Model: inference must be a gd.inference method (an Inference), "
                            f"got {self.inference!r}")
        if self.mean is not None and not isinstance(self.mean, Mean):
            raise TypeError(f"Model: mean must be None or a gd.means mean function (a Mean), got {self.mean!r}")
        if self.mean is not None and not self.inference.supports_offset:
            raise ValueError(f"Model: {type(self.inference).__name__} takes no offset of the latent input, so it cannot "
                             f"have a mean function; leave mean=None")
        self.inference.check_likelihood(self.likelihood)
        self._check_latent_parts()
        rule = self.inference.inducing_rule
        if rule == "required" and self.inducing is None:
            raise TypeError(f"Model: {type(self.inference).__name__} needs an inducing spec from "
                            f"gd.inducing, got {self.inducing!r}")
        if rule == "forbidden" and self.inducing is not None:
            raise ValueError(f"Model: {type(self.inference).__name__} inference uses no inducing points; "
                             "pass inducing=None")
        self.inference.check_inducing(self.likelihood, self.inducing)

    def _check_latent_parts(self):
        """The kernel's outputs and the mean function against the likelihood's latent functions,
        and a multi-output kernel's partners (:meth:`_check_multi_output`)."""
        self._check_multi_output()
        if self.kernel.n_outputs not in (1, self.likelihood.n_latent):
            raise ValueError(f"Model: kernel {self.kernel.describe()} is the prior of {self.kernel.n_outputs} latent "
                             f"functions, but {self.likelihood.describe()} has {self.likelihood.n_latent}; give one "
                             f"kernel per latent function, or one kernel to share")
        if self.mean is not None and self.likelihood.n_latent > 1:
            raise ValueError(f"Model: a mean function is for one latent function; {self.likelihood.describe()} has "
                             f"{self.likelihood.n_latent} (leave mean=None)")

    @property
    def output_count(self):
        """int or None: P, the number of outputs of a multi-output model (its kernel's
        ``output_count``, :mod:`gpdsl.multioutput`); None for a model of one output."""
        return output_count(self.kernel)

    def _check_multi_output(self):
        """A multi-output kernel's partners: one latent function a row, a mean and likelihood that do
        not read X's columns as features (the last is the output index)."""
        P = self.output_count
        parts = [(part, what) for part, what in ((self.mean, "mean"), (self.likelihood, "likelihood"))
                 if getattr(part, "output_count", None) is not None]
        for part, what in parts:
            if part.output_count != P:
                raise ValueError(f"Model: the {what} {part!r} has {part.output_count} outputs but the kernel "
                                 f"{self.kernel.describe()} has {'none (one output)' if P is None else P}"
                                 + ("" if P is not None else "; declare a multi-output kernel (gd.kernels.ICM, LMC)"))
        if P is None:
            return
        check_positive_int("Model", "kernel.output_count", P)     # None (one output) returned above
        if self.likelihood.n_latent > 1:
            raise ValueError(f"Model: a multi-output kernel ({self.kernel.describe()}, P = {P}) gives one latent "
                             f"function a row; {self.likelihood.describe()} needs {self.likelihood.n_latent}")
        for part, what in ((self.mean, "mean"), (self.likelihood, "likelihood")):
            if getattr(part, "reads_input_columns", False):
                raise ValueError(f"Model: the {what} {part!r} reads X's columns as features, but a multi-output "
                                 f"model's last column is the output index; wrap it per output "
                                 f"(gd.means.PerOutput for a mean)")

    def _check_row_order(self, owner, X, y):
        """A likelihood with per-row parameters (known noise variances) is refused data in a layout
        that :func:`gpdsl.multioutput.long_data` reorders: its parameters follow the long rows."""
        kind = layout(X, y, self.output_count, owner, self.kernel)
        if self.likelihood.per_row_parameters and kind != "long":
            raise ValueError(f"{owner}: {self.likelihood.describe()} has a parameter a row, which follows the long rows "
                             f"(n, D+1) the fit sees; data in the {kind} layout are reordered output-major, so give "
                             f"X with the output column and a 1-D y in the order of those parameters")

    def resolved(self, X, seed=0, n_rows=None):
        """This model with the parts its declaration left to the data chosen for inputs X.

        A multi-class model declared without ``inference`` gets the method (and, unless given, the
        inducing spec) of :func:`gpdsl.defaults.declaration` for X's N rows and D columns; any
        other model is returned as it is.  ``fit`` calls it, so the posterior's ``model`` is the
        resolved one.

        Parameters
        ----------
        X : array_like or Dask array, shape (N, D)
            The training inputs (only their shape is read, unless it is not that of N >= 1 rows
            and D >= 1 columns: then X is checked as ``fit`` checks it).
        seed : int, default 0
            Seed of a chosen k-means start and of the minibatches (``fit`` passes its own; None
            is 0).
        n_rows : int, optional
            The rows the fit runs on where fewer than X's (``fit(subsample=n)``'s n).

        Returns
        -------
        Model

        Raises
        ------
        TypeError, ValueError
            X as ``fit`` refuses it, or a bad seed.
        """
        if self.inference is not None:
            return self
        check_seed("Model.resolved", seed)
        try:
            shape = np.shape(X)
        except ValueError:          # ragged
            shape = ()
        if len(shape) != 2 or not min(shape) >= 1:          # (a Dask X of unknown rows: nan)
            shape = validate_inputs(X, lazy=True).shape     # raises fit's own message for such an X
        n = shape[0]
        if isinstance(n_rows, (int, np.integer)) and not isinstance(n_rows, bool) and 0 < n_rows < n:
            n = int(n_rows)                 # (a bad subsample is left to fit's own check)
        chosen = defaults.declaration(n, shape[1], self.likelihood.n_latent, self.likelihood, inducing=self.inducing,
                                      seed=0 if seed is None else int(seed))
        return replace(self, **chosen)

    def _require_inference(self, what):
        if self.inference is None:
            raise ValueError(f"Model.{what}: this model's inference is chosen by the data at fit; call "
                             f"model.resolved(X) first (or declare inference=...)")

    @property
    def sparse(self):
        """True when the model has inducing inputs (VFE, FITC, FITC-EP/QP)."""
        return self.inducing is not None

    # -- construction from files --------------------------------------------------------------
    @classmethod
    def from_dict(cls, spec, *, trust=None):
        """The model declared by a plain dict (the inverse of :meth:`to_dict`).

        A component's ``type`` resolves only to a class registered in this process (gpdsl's
        own, and any class whose module has been imported): reading a dict runs no code of its
        choosing.  A ``"module:QualName"`` type of a module not yet imported is refused unless
        ``trust`` names the module.

        Parameters
        ----------
        spec : dict
            ``{"kernel": {...}, "likelihood": {...}, "inducing": {...}, "inference": {...},
            "mean": {...}}``, each part ``{"type": "<ClassName>", <field>: <value>, ...}``
            (:mod:`gpdsl.io.spec`); ``data``, ``fit`` and ``output`` sections are allowed and
            ignored.
        trust : str, iterable of str or None, default None
            Modules the reader may import to find a ``"module:QualName"`` type (each name covers
            that module only).  Trust only code you would run: importing a module runs it.

        Returns
        -------
        Model

        Raises
        ------
        gpdsl.UntrustedTypeError
            A type whose class is not registered and whose module is not in ``trust`` (a
            ``ValueError``; the message says how to trust it).
        ValueError
            An unknown section, a missing kernel or likelihood, a bad part (the message names
            the table), or tables and lists nested more than ``gpdsl.io.spec.MAX_NESTING`` (100)
            levels deep.
        """
        from .io.spec import model_parts
        return cls(**model_parts(spec, trust))

    @classmethod
    def from_toml(cls, path, *, trust=None):
        """The model declared by a TOML model file or text (its ``[data]``/``[fit]``/``[output]`` ignored).

        Parameters
        ----------
        path : str or os.PathLike
            The model file (:mod:`gpdsl.io.spec` describes its tables), or the model's TOML text
            (:meth:`to_toml`'s output; the parameter keeps its name ``path`` from when only a
            file was read): an ``os.PathLike`` or a string naming an existing file is read as a
            file, any other string holding a line break as TOML text.
        trust : str, iterable of str or None, default None
            As :meth:`from_dict` (checked before the file is read).

        Returns
        -------
        Model

        Raises
        ------
        FileNotFoundError
            A one-line string that names no file.
        gpdsl.UntrustedTypeError
            As :meth:`from_dict`.
        TypeError
            ``path`` is neither a str nor an os.PathLike, or ``trust`` is not a module name, an
            iterable of them or None.
        ValueError
            Invalid TOML, a bad table, or tables nested too deeply.
        """
        from .io.spec import read_model_source
        trust = trusted_modules(trust)
        return cls.from_dict(read_model_source(path)[0], trust=trust)

    def to_dict(self):
        """The model as a plain dict of its parts, for TOML and ``from_dict``.

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
        from .io.spec import model_to_dict
        return model_to_dict(self)

    def to_toml(self, path=None):
        """The model as the text of a model file (:meth:`from_toml` reads it back), written to
        ``path`` when one is given (replacing the file whole, never half-written).

        Parameters
        ----------
        path : str or os.PathLike, optional
            Where to write it.

        Returns
        -------
        str
            The TOML text (``[kernel]``, ``[likelihood]``, ``[inducing]``, ``[inference]``).

        Raises
        ------
        ValueError
            As :meth:`to_dict`.
        """
        import tomli_w

        from .io.files import check_path, write_replacing
        text = tomli_w.dumps(self.to_dict())
        if path is not None:
            write_replacing(check_path("to_toml", path), text.encode())
        return text

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
        self._require_inference("parameter_table")
        P = self.output_count
        entries = (self.kernel.entries("kernel", X, fixed)
                   + self.likelihood.entries("likelihood", X, fixed)
                   + ([] if self.mean is None else self.mean.entries("mean", X, fixed))
                   # A method's q(u) is over the inducing variables it sees (M P of shared Z).
                   + self.inference.variational_entries(X.shape[0], method_inducing(Z, X, P, "parameter_table"),
                                                        fixed))
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
    def evaluate(self, values, X, y, Z, need_grad=True, need_state=False, warm=None, offset=None):
        """Run the inference method once at natural hyperparameter ``values``.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural-scale values keyed as in :meth:`parameter_table` (``"kernel.variance"``, ...).
        X : ndarray, shape (N, D)
            Training inputs.  A multi-output model's are the long rows (n, D+1) as ``fit`` passes
            them (taken unchecked), or X and y in another layout of :meth:`fit` (converted).
        y : ndarray, shape (N,)
            Training targets (as ``likelihood.prepare_targets`` returns them).
        Z : ndarray, shape (M, D) or None
            Inducing inputs (None for methods without).  A multi-output model's (M, D) in input
            space are shared by the outputs: the method sees their M P long rows
            (:func:`gpdsl.multioutput.method_inducing`) and ``dZ`` is summed over the copies
            (:func:`~gpdsl.multioutput.inducing_gradient`); (M, D+1) are taken as they are, ``dZ``
            0 in their output column.
        need_grad : bool, default True
            Compute the gradients of the log evidence.
        need_state : bool, default False
            Build the predictive state a Posterior needs.
        warm : object, optional
            The method's local state from a previous evaluation (EP/QP sites, Pólya-Gamma c),
            to start from; None starts afresh.
        offset : ndarray, shape (N,), optional
            A per-row offset of the latent input (``fit(offset=...)``).

        Returns
        -------
        gpdsl.methods.common.Evaluation
            The log evidence (or bound), its gradients by name and d/dZ, the jitter used, and
            the requested state.  With an ``offset`` and no mean function, ``grads["offset"]``
            (N,) is the derivative in the offset.
        """
        self._require_inference("evaluate")
        P = self.output_count
        if P is not None and layout(X, y, P, "evaluate", self.kernel) != "long":
            X, y, offset = long_data(X, y, P, offset, owner="evaluate", every_output=False, kernel=self.kernel)
            y = self.likelihood.for_rows(X).coded_targets(y, X.shape[0])
        kernel, likelihood = self.bind(values)
        evaluation = self.inference.evaluate(kernel, likelihood, values, X, y, method_inducing(Z, X, P),
                                             need_grad=need_grad, need_state=need_state, warm=warm,
                                             offset=self.latent_offset(values, X, offset))
        if P is not None:
            # Z (M, D) shared by the outputs: its gradient sums over its P copies.
            evaluation.dZ = inducing_gradient(evaluation.dZ, Z, P)
        # A mean function's gradients are made of d/d offset; without one, grads["offset"] stays
        # (the derivative in a known offset) and the parameter table ignores it.
        if self.mean is not None and evaluation.grads is not None and "offset" in evaluation.grads:
            evaluation.grads.update(self.mean_gradients(values, X, evaluation.grads.pop("offset")))
        return evaluation

    def latent_offset(self, values, X, offset=None):
        """The per-row shift of the latent input the inference methods see: m(X) plus the known
        ``offset`` (None when the model has no mean function and there is no offset).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural-scale values (``"mean.<name>"`` entries bind the mean function).
        X : ndarray, shape (n, D)
        offset : ndarray, shape (n,), optional

        Returns
        -------
        ndarray of shape (n,) or None
        """
        if self.mean is None:
            return offset
        shift = np.asarray(bind(self.mean, values, "mean").value(X), dtype=float)
        return shift if offset is None else shift + offset

    def mean_gradients(self, values, X, d_offset):
        """d objective / d mean hyperparameter from d objective / d latent offset (the vector a
        method returns as ``grads["offset"]``): the mean function's vector-Jacobian product.

        Parameters
        ----------
        values : dict of str to ndarray
        X : ndarray, shape (n, D)
        d_offset : ndarray, shape (n,)

        Returns
        -------
        dict of str to ndarray
            Keyed ``"mean.<name>"`` (empty without a mean function).
        """
        if self.mean is None:
            return {}
        return bind(self.mean, values, "mean").vjp(X, np.asarray(d_offset, dtype=float))

    def bind(self, values):
        """The kernel and the likelihood bound to ``values``, as the inference methods receive them.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural-scale values keyed as in :meth:`parameter_table` (``"kernel.variance"``, ...);
            a part's parameter left out keeps its declared value.

        Returns
        -------
        kernel : gpdsl.components.Bound
            The kernel with its hyperparameter fields holding ``values["kernel.<name>"]``.
        likelihood : gpdsl.components.Bound
            The likelihood with its fields holding ``values["likelihood.<name>"]``.
        """
        return bind(self.kernel, values, "kernel"), bind(self.likelihood, values, "likelihood")

    @threads.managed
    def fit(self, X, y, *, optimize=True, fixed=(), restarts=0, seed=0, max_iter=None,
            progress=False, callback=None, standardize=False, subsample=None, offset=None, start=None,
            refine=False):
        """Fit hyperparameters (and Z for ``gd.inducing.Optimized``) by maximising the evidence.

        The objective is the method's log evidence or bound (e.g. Titsias (2009) eq. 16 for VFE)
        plus the log prior of hyperparameters that carry one, maximised by L-BFGS-B on its
        analytic gradient over the log of positive hyperparameters.

        Parameters
        ----------
        X : array_like or Dask array, shape (N, D)
            Training inputs.  A multi-output model (a kernel with ``output_count`` P,
            :mod:`gpdsl.multioutput`) takes X (N, D) with Y (N, P) (NaN where an entry is
            missing), X (n, D+1) whose last column is the output index with a 1-D y, or a list of
            P arrays (n_p, D) with a list of P target arrays; it fits on the long rows (n, D+1),
            output-major, in memory.  Data that name the outputs -- Y a pandas DataFrame (its
            columns), X a dict {name: X_p} with y {name: y_p} (or {name: (X_p, y_p)} with y None),
            y a list of named pandas Series -- give the posterior's ``output_names``, the
            ``output`` coordinate of its labelled results (:mod:`gpdsl.multioutput`).
        y : array_like, shape (N,)
            Training targets: reals for ``Gaussian``/``StudentT``, labels for ``Bernoulli``,
            counts for ``Poisson``; (N, P) or a list for a multi-output model, as X.
        optimize : bool, default True
            False evaluates the posterior at the declared hyperparameters without optimising.
        fixed : str or sequence of str, default ()
            Names such as ``"likelihood.variance"`` held at their declared value.
        restarts : int, default 0
            Extra L-BFGS-B runs from random starts (log-hyperparameters perturbed by N(0, 1);
            optimised Z re-drawn from the training inputs), the best by objective kept.
        seed : int or None, default 0
            Seed of the restarts' and the subsample's random draws, and, for a model whose
            inference is chosen at fit (:meth:`resolved`), of the chosen k-means start and
            minibatches (None: 0 for those).
        max_iter : int or None, default None
            L-BFGS-B iteration cap per run, or the step cap of a minibatch method.  None: 1,000,
            but for a model whose inference is chosen at fit (:meth:`resolved`)
            :data:`gpdsl.defaults.MAX_STEPS` (2,000): minibatch steps, or L-BFGS-B iterations
            where the full batch is chosen (softmax on at most 256 rows).
        progress : bool, default False
            Print iteration, objective and gradient norm.
        callback : callable, optional
            Called each iteration with ``{"iteration", "objective", "grad_norm"}``.
        standardize : bool, default False
            Fit in standardised units (see below).
        subsample : int, optional
            Fit on this many rows drawn at random (see below).
        offset : array_like, shape (N,), optional
            A known offset of each row's latent input: the likelihood sees f(x_n) + offset_n
            (a GLM's offset; log exposure for counts, ``np.log(exposure)``).  Every method
            takes one; predictions take the new rows' (``predict(X, offset=...)``).  A
            multi-output model takes it in y's layout.
        start : mapping of str to array_like, optional
            Values to start from in place of the declared ones, by name (``post.values`` of an
            earlier fit, e.g. to continue one that stopped short; in the fit's units, so with the
            same ``standardize``); names it leaves out keep their declared start.  ``restarts``
            perturb it.
        refine : bool, default False
            With ``subsample``: continue the fit on all rows from the subsample's optimum until
            the full objective's gradient is within its tolerance (see below).

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

        L-BFGS-B stops by SciPy's tests or by the plateau rule (:data:`gpdsl.fitting.PLATEAU_WINDOW`); a run
        that SciPy's test stopped with the gradient still large restarts from its last point
        (:meth:`gpdsl.fitting._Objective.minimise`); a run that ends on an evidence ridge warns and names the
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
        its log evidence, in the data's (:mod:`gpdsl.scaling`).  A multi-output model's output
        column is not scaled, and each output's targets are standardised by the mean and
        standard deviation of its own training entries (scikit-learn's ``normalize_y`` per
        target column; ``Posterior.standardization.y_mean``/``y_scale`` (P,)): every result maps
        back per row, y_mean[p] + y_scale[p] f.  A shared ``Gaussian`` noise sigma^2 is then
        sigma^2 y_scale[p]^2 in output p's data units, proportional to its variance;
        ``OutputGaussian``'s variances are per output anyway.

        X and y may be Dask arrays (or xarray objects backed by them; ``pip install
        "gpdsl[dask]"``).  VFE, FITC, Pólya-Gamma, FITC-Laplace and FITC-EP/QP on the parallel
        schedule then run every O(N M^2) pass as one Dask task per row block of X with a tree
        reduction of the M x M / M-vector partials, on the active scheduler (threads, or a
        ``distributed.Client`` when one exists), and ``GreedyVariance`` selects with its factor
        held by the blocks.  X stays distributed; y and the per-point vectors (O(N)) are held in
        memory.  With the method's ``chunk_size`` equal to X's row chunks the result is the
        in-memory fit's to the bit (the partial sums are added in the same tree; EP/QP within
        1e-10, FITC-Laplace to rounding; a ``Linear`` mean's X^T g is summed in Dask's order, to
        rounding); otherwise to rounding.  Other methods and inducing specs compute X into memory.

        ``subsample=n`` fits on n rows drawn at random (``np.random.default_rng(seed)``): the
        hyperparameters, Z and any greedy selection (with its reinitialisation loop) are those of
        the fit on the n rows, and the posterior is then computed on all N rows at them, with no
        further optimisation (for VFE and FITC one pass; for PolyaGamma its c iteration, for EP
        its sweeps, over all N).  Its gradient there is computed on all N rows too (one gradient
        pass), and ``converged`` is True only where it is within the tolerance of N rows
        (:func:`gpdsl.diagnostics.gradient_tolerance`): the subsample's optimum is then one of all
        rows; otherwise a ``ConvergenceWarning`` names the gradient.  ``refine=True`` instead
        continues L-BFGS-B on all rows from the subsample's hyperparameters and Z, and stops at
        the first point whose gradient is within that tolerance (``stop_reason="tolerance"``;
        the start itself when it is): a converged fit of all rows that takes a few full-data
        evaluations where the direct fit takes tens.  A multi-output model draws n of its long rows (input, output
        pairs), stratified by output: each output's share of n in proportion to its rows, and at
        least one (:func:`gpdsl.multioutput.subsample_rows`).  ``Posterior.subsample`` records n and the subsample fit's
        objective; ``log_evidence`` is the full data's.  None (default) fits on all rows; n >= N
        is refused (ValueError), since it would silently mean all rows.  Greedy selection's
        ``indices`` refer to rows of X; ``standardize=True`` scales by
        all N rows.  Refused (ValueError) for a likelihood with per-row parameters
        (``HeteroscedasticGaussian(variance=...)``) and for ``q_updates="joint"``.

        A fit whose objective is within ``gpdsl.fit_warnings.CONSTANT_MODEL_TOL`` nats of the constant model f = 0
        (a classifier's at its bias, white noise at its best variance for Gaussian regression)
        or below it warns ``ConvergenceWarning`` and is flagged ``constant_model=True``.
        """

        model, names = self, None
        if self.output_count is not None:
            self._check_row_order("fit", X, y)
            names = data_output_names(X, y, self.output_count)
            X, y, offset = long_data(X, y, self.output_count, offset, kernel=self.kernel)
        if self.inference is None and defaults.chooses_inference(self.likelihood):
            max_iter = defaults.max_steps(max_iter)
        if max_iter is None:
            max_iter = fitting.DEFAULT_MAX_ITER
        if self.inference is None:
            # fit's arguments checked before the choice reads seed (a bad one is fit's error, not KMeans').
            check_fit_arguments(optimize, fixed, restarts, seed, max_iter, progress, callback)
            model = self.resolved(X, seed, subsample)
        return name_outputs(fitting.fit(model, X, y, optimize=optimize, fixed=fixed, restarts=restarts, seed=seed,
                                        max_iter=max_iter, progress=progress, callback=callback, standardize=standardize,
                                        subsample=subsample, offset=offset, start=start, refine=refine), names)

    @threads.managed
    def sample(self, X, y, *, draws=1000, tune=1000, chains=4, seed=0, target_accept=0.8, fixed=(), cores=None,
               progress=False, latent="marginalised"):
        """Draw the hyperparameters' posterior by NUTS (the fully Bayesian counterpart of :meth:`fit`).

        The target is log p(u | y) = log evidence + sum log prior(theta) + log |d theta / d u| on
        the optimiser's unconstrained scale u (log of positive hyperparameters, logit of bounded
        ones; :mod:`gpdsl.sampling`), drawn by Stan's NUTS (:func:`gpdsl.nuts.sample`).  The
        model is fitted first (MAP, :meth:`fit`: a sparse method's inducing inputs are those of
        this fit, held while sampling); each chain starts at the mode of log p(u | y) (L-BFGS-B
        from the declared values) plus an independent N(0, 0.5^2) perturbation
        (:data:`gpdsl.sampling.START_SCALE`).

        Parameters
        ----------
        X : array_like, shape (N, D)
            Training inputs (a multi-output model's in any layout of :meth:`fit`).
        y : array_like, shape (N,)
            Training targets (in X's layout).
        draws : int, default 1000
            Draws kept per chain.
        tune : int, default 1000
            Warmup iterations per chain (step size and diagonal metric adaptation).
        chains : int, default 4
            Independent chains.
        seed : int or None, default 0
            Seed of the MAP fit, the starts and the chains.
        target_accept : float, default 0.8
            The mean acceptance statistic the step size aims at, in (0, 1).
        fixed : str or sequence of str, default ()
            Names held at their declared value (they need no prior).
        cores : int or None, default None
            Processes the chains run in (None: one a chain, up to the CPUs).
        progress : bool, default False
            Print each chain's progress every tenth of its iterations: a bar, the phase (warmup or
            sampling), the wall time so far and left, the step size and the divergences so far.
        latent : {"marginalised", "joint"}, default "marginalised"
            "marginalised": the hyperparameters alone, f integrated out by the method's evidence.
            "joint": a dense model with a non-Gaussian likelihood sampled exactly, the N latent
            values drawn with the hyperparameters as f = m(X) + L(theta) v, v ~ N(0, I)
            (:mod:`gpdsl.latent_joint`; O(N^3) a gradient, N <= 1,000); the draws then hold
            ``f`` (chain, draw, obs) and predictions use the GP conditional on each draw's f.

        Returns
        -------
        gpdsl.SampledPosterior
            The draws (natural scale, dims chain, draw, ...), the sampler's statistics, the
            diagnostics record, and predictions integrated over the draws.

        Raises
        ------
        ValueError
            A sampled hyperparameter without a prior (named), a prior whose support is narrower
            than its hyperparameter's values, or a method whose q is not marginalised (SVGP,
            VGP); latent="joint" for a sparse model, a Gaussian or multi-latent likelihood, or
            N > 1,000; bad arguments, as :meth:`fit` and :func:`gpdsl.nuts.sample` refuse them.

        Warns
        -----
        gpdsl.SamplingWarning
            A divergence, R-hat above 1.01, a bulk or tail ESS below 100 per chain, a chain's
            E-BFMI below 0.3, or transitions at the tree-depth cap.
        """
        from .sampling import sample
        names = None
        if self.output_count is not None:
            self._check_row_order("sample", X, y)
            names = data_output_names(X, y, self.output_count, owner="sample")
            X, y, _ = long_data(X, y, self.output_count, owner="sample", kernel=self.kernel)
        return name_outputs(sample(self, X, y, draws=draws, tune=tune, chains=chains, seed=seed,
                                   target_accept=target_accept, fixed=fixed, cores=cores, progress=progress,
                                   latent=latent), names)

    def _chunks_dask(self):
        """Whether this model's fit runs its O(N M^2) passes as Dask tasks when X is a Dask array:
        VFE, FITC, Pólya-Gamma and FITC-Laplace, and FITC-EP/QP on the parallel schedule, with a likelihood whose
        noise does not depend on X's values.  Other methods compute a Dask X into memory (dense
        methods are O(N^2) anyway; sequential EP is serial by nature)."""
        return self.sparse and self.inference.supports_dask_chunks and self.likelihood.supports_dask_chunks


__all__ = ["Model"]
