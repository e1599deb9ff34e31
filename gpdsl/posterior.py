"""The fitted posterior: predictions, the xarray view and the file it saves to.

A save replaces the file in one step (an interrupted save leaves the old file or the new one:
:mod:`gpdsl.io.files`); :func:`gpdsl.load` (:mod:`gpdsl.io.netcdf`) reads it back, checked.
This module imports nothing above it (not the model, the fit loop or the readers): what it needs
of the model it gets as the object ``posterior.model``.

xarray (and pandas behind it) is imported by the functions that return datasets, not with the
module: ``import gpdsl`` and a fit do not need it, and it took a third of a second.
"""
from __future__ import annotations

import dataclasses
import json
import os
from functools import partial

import numpy as np

from . import threads
from ._version import __version__
from .checks import as_float_array
from .chunks import default_chunk_size, is_chunked, lazy_rows, map_rows
from .components import Bound, bind
from .diagnostics import FitDiagnostics
from .inputs import validate_inputs, validate_offset
from .io.files import check_path, sigint_deferred, write_replacing
from .kernels import LMC, Sum
from .likelihoods.gaussian import gaussian_log_density
from .multioutput import check_output_names, output_count, output_labels, query
from .io.layout import FORMAT_VERSION, checksum, hyperparameter_entries, model_layout, variable_dims
from .io.xarray_import import coordinate, xarray


@dataclasses.dataclass(frozen=True)
class FitRecord:
    """How a posterior was fitted: what :class:`Posterior` keeps beside its predictive state.

    Parameters
    ----------
    diagnostics : gpdsl.diagnostics.FitDiagnostics, optional
        How the fit ended (stop reason, iterations, final gradient, caps, jitter, ridge, local
        sweeps, reinit and subsample records) and ``converged`` derived from it; default: a
        posterior that was not optimised.
    priors : dict of str to str, optional
        Descriptions of the priors by hyperparameter name.
    fixed : sequence of str, default ()
        Names of the hyperparameters held fixed.
    sites : object, optional
        The method's local state (EP/QP ``SiteState``, ``PolyaGammaState``, ``VariationalState``).
    selection : gpdsl.inducing.Selection, optional
        The greedy inducing selection (indices, criterion).
    reinit_history : list of dict, optional
        ``{"M", "objective"}`` of each re-selection round.
    subsample : dict, optional
        For ``fit(subsample=n)``: ``rows`` (n) and ``objective`` (the subsample fit's log
        evidence plus log prior, in the fit's units).
    """

    diagnostics: FitDiagnostics | None = None
    priors: dict | None = None
    fixed: tuple = ()
    sites: object = None
    selection: object = None
    reinit_history: list | None = None
    subsample: dict | None = None

    def __post_init__(self):
        if self.diagnostics is None:
            object.__setattr__(self, "diagnostics", FitDiagnostics("not_optimised"))
        object.__setattr__(self, "priors", dict(self.priors or {}))
        object.__setattr__(self, "fixed", list(self.fixed))


class Posterior:
    """A fitted model, as ``Model.fit``, :func:`gpdsl.load` and :func:`gpdsl.from_xarray` return it.

    Every argument is kept as the attribute of the same name, and so is every field of
    ``record`` (``diagnostics``, ``priors``, ``fixed``, ``sites``, ``selection``,
    ``reinit_history``, ``subsample``: read-only properties).

    Parameters
    ----------
    model : gpdsl.Model
        The fitted model's declaration.
    values : dict of str to array_like
        The fitted natural hyperparameters by name (``"kernel.lengthscale"``, ...).
    state : gpdsl.methods.common.PredictiveState or gpdsl.methods.kronecker_state.KroneckerState
        What prediction needs: Z (M, D), whitened weights (M,) and correction (M, M), q(u), the
        Cholesky factor (M, M), or one a latent function (K, M, M) for a kernel of K outputs
        (:class:`gpdsl.kernels.Separate`); or the Kronecker factors of Exact's Kronecker path.
        Prediction asks it only for its whitened basis, weights and correction
        (:class:`gpdsl.methods.common.WhitenedPrediction`), a save for its ``saved_arrays``.
    log_evidence : float or callable
        The exact LML (Exact), the collapsed bound (VFE, Titsias (2009) eq. 16), FITC's
        approximate LML, EP's approximation (EP, and QP, whose hyperparameters maximise EP's
        evidence formula at EP's sites, or at QP's own with ``QP(hyperparameters="qp")``), the
        collapsed Pólya-Gamma bound (PolyaGamma, Passerello (2021) eq. 4.7), the Laplace
        approximation or the ELBO (SVGP, VGP); in the data's units.  A callable (no
        arguments) gives it when it is first read: a minibatch fit's full-data bound, one pass
        over the N training rows that prediction does not need (the posterior holds the
        callable, and through it the training data, until then).
    log_prior : float, default 0.0
        The log prior of the hyperparameters that carry one, at ``values``.
    standardization : gpdsl.scaling.Standardization, optional
        The map from the data's units to those of the fit (``fit(standardize=True)``): Z, the
        hyperparameters and q(u) are in the fit's units, every prediction and the log evidence
        in the data's.
    record : FitRecord, optional
        How the fit went (diagnostics, priors, fixed names, the method's local state, the
        selection, the re-selection history, the subsample); default: ``FitRecord()``, a
        posterior that was not optimised.
    output_names : tuple of str or int, optional
        A multi-output model's output names (:func:`gpdsl.multioutput.data_output_names`), the
        ``output`` coordinate of its labelled results; None: 0..P-1.  Checked as
        :func:`gpdsl.multioutput.check_output_names` (ValueError).

    Notes
    -----
    ``converged``, ``n_iterations``, ``jitter``, ``ridge``, ``reinit_stop``, ``constant_model``
    and ``total_sweeps`` are read-only views of ``diagnostics``.
    """

    def __init__(self, model, values, state, log_evidence, log_prior=0.0, standardization=None, record=None,
                 output_names=None):
        self.model = model
        self.values = {k: np.asarray(v, dtype=float) for k, v in values.items()}
        self.state = state
        self._log_evidence = log_evidence if callable(log_evidence) else float(log_evidence)
        self.log_prior = float(log_prior)
        self.standardization = standardization
        self.record = FitRecord() if record is None else record
        self.output_names = (None if output_names is None else
                             check_output_names("Posterior", "output_names", output_names, self.output_count))

    @property
    def log_evidence(self):
        """float: the log evidence or bound (the class's ``log_evidence`` parameter); a minibatch
        fit's is computed here when first read, one pass over the training rows."""
        if callable(self._log_evidence):
            self._log_evidence = float(self._log_evidence())
        return self._log_evidence

    @property
    def log_evidence_pending(self):
        """bool: whether ``log_evidence`` waits for its pass over the training rows (a minibatch
        fit's, not yet read)."""
        return callable(self._log_evidence)

    @property
    def diagnostics(self):
        """gpdsl.diagnostics.FitDiagnostics: ``record.diagnostics``, how the fit ended."""
        return self.record.diagnostics

    @property
    def priors(self):
        """dict of str to str: ``record.priors``, the priors' descriptions by hyperparameter name."""
        return self.record.priors

    @property
    def fixed(self):
        """list of str: ``record.fixed``, the names of the hyperparameters held fixed."""
        return self.record.fixed

    @property
    def sites(self):
        """object: ``record.sites``, the method's local state (EP/QP sites, Pólya-Gamma c, q), or None."""
        return self.record.sites

    @property
    def selection(self):
        """gpdsl.inducing.Selection or None: ``record.selection``, the inducing selection."""
        return self.record.selection

    @property
    def reinit_history(self):
        """list of dict or None: ``record.reinit_history``, ``{"M", "objective"}`` of each round."""
        return self.record.reinit_history

    @property
    def subsample(self):
        """dict or None: ``record.subsample``, ``fit(subsample=n)``'s ``rows`` and ``objective``."""
        return self.record.subsample

    def __repr__(self):
        # A pending bound is not computed for a repr: a notebook echoing the posterior would pay a
        # pass over the training rows.
        evidence = "computed when read" if self.log_evidence_pending else f"{self.log_evidence:.6g}"
        return (f"Posterior({type(self.model.inference).__name__}, log_evidence={evidence}, "
                f"M={self.state.Z.shape[0]}, converged={self.converged}; {self.diagnostics.summary()})")

    @property
    def converged(self):
        """bool: ``diagnostics.converged`` (:func:`gpdsl.diagnostics.converged_rule`)."""
        return self.diagnostics.converged

    @property
    def n_iterations(self):
        """int: ``diagnostics.n_iterations``, the optimiser's iterations."""
        return self.diagnostics.n_iterations

    @property
    def jitter(self):
        """float: ``diagnostics.jitter``, the jitter used as a multiple of the mean diagonal."""
        return self.diagnostics.jitter

    @property
    def ridge(self):
        """str or None: ``diagnostics.ridge``, a hyperparameter that ran away along an evidence ridge."""
        return self.diagnostics.ridge

    @property
    def reinit_stop(self):
        """str or None: ``diagnostics.reinit_stop``, why the re-selection loop stopped."""
        return self.diagnostics.reinit_stop

    @property
    def constant_model(self):
        """bool: ``diagnostics.constant_model``, the fit is no better than the constant model f = 0."""
        return self.diagnostics.constant_model

    @property
    def total_sweeps(self):
        """int: ``diagnostics.local_sweeps``, the local iteration's sweeps over the whole fit."""
        return self.diagnostics.local_sweeps

    @property
    def n_latent(self):
        """int: the number of latent functions (K for a K-class likelihood, else 1)."""
        return self.model.likelihood.n_latent

    @property
    def n_features(self):
        """int: the number of columns of the rows the model was fitted on: D, or for a
        multi-output model D+1, its long rows' (:mod:`gpdsl.multioutput`)."""
        return self.state.Z.shape[1]

    @property
    def output_count(self):
        """int or None: P, the outputs of a multi-output model; None for a model of one output."""
        return output_count(self.model.kernel)

    @property
    def input_dims(self):
        """int: D, the input columns (the long rows' without the output index)."""
        return self.n_features - (self.output_count is not None)

    @property
    def output_labels(self):
        """ndarray (P,): the ``output`` coordinate of labelled results, ``output_names`` or 0..P-1."""
        return output_labels(self.output_names, self.output_count)

    def _query(self, X_new, owner):
        """X_new as :func:`gpdsl.multioutput.query` takes it for this posterior's D and P."""
        return query(X_new, self.input_dims, self.output_count, owner)

    @property
    def inducing_inputs(self):
        """Z (M, D) in the data's units (``state.Z`` is in the fit's); a multi-output model's long
        inducing rows (M P, D+1 for Z shared by the outputs), the output index last."""
        scaling = self.standardization
        return self.state.Z if scaling is None else scaling.x_mean + scaling.x_scale * self.state.Z

    def _fit_inputs(self, X_new, lazy=False):
        """X_new (n, D) checked and in the fit's units; a Dask X_new stays one with ``lazy``."""
        X_new = validate_inputs(X_new, "X_new", self.n_features, lazy=lazy)
        return X_new if self.standardization is None else self.standardization.inputs(X_new)

    # -- prediction ------------------------------------------------------------------------------
    @threads.managed
    def predict_f(self, X_new, component=None):
        """Latent predictive mean and variance at X_new (n, D) -> two (n,) arrays.

        For a Dask X_new (or an xarray object backed by one) they are lazily evaluated Dask
        arrays, one task per row block of X_new.

        With b_* = L^-1 K_z* (L the state's Cholesky factor; the Kronecker form's W^T K_z*,
        :mod:`gpdsl.methods.kronecker_state`): mean m(x_*) + b_*^T weights and
        variance k_** - b_*^T correction b_* (:class:`gpdsl.methods.common.PredictiveState`;
        with a kernel per latent function, latent function k's own L_k, K^k_z* and k^k_**);
        for VFE this is Titsias (2009) eq. 17's phi(f_m) carried to f_*.  One additive part f_c
        of a sum kernel (``component``) has the same posterior with k_c in place of k in K_z*
        and k_** (its cross-covariance with the inducing variables; the parts are independent
        a priori), and no prior mean (Rasmussen & Williams (2006) §5.4.3, Duvenaud's additive
        decompositions); so has one latent part f_q of an LMC, with B_q (x) k_q
        (:meth:`gpdsl.kernels.LMC.part_kernel`; GPflow's LinearCoregionalization parts).

        A multi-output posterior (:mod:`gpdsl.multioutput`) predicts every output at X_new (n, D),
        results (n, P), or at X_new (n, D+1) the output each row names (its last column).

        Parameters
        ----------
        X_new : array_like, shape (n, D)
            New inputs in the data's units.
        component : str or int, optional
            The label of one part of the model's ``Sum`` or ``LMC`` kernel (its ``name``, or its
            index): that part's posterior alone.  None (default) predicts f whole, prior mean included.

        Returns
        -------
        mean : ndarray or dask.array.Array, shape (n,), or (n, K) for K latent functions
            Latent predictive mean, in the data's units (a component's mean is scaled, not
            shifted, by a standardisation: the targets' mean belongs to the whole f).  A K-class
            likelihood has one column per class, a multi-output posterior at X_new (n, D) one per
            output, (n, P).
        var : ndarray or dask.array.Array, shape (n,), or (n, K) or (n, P)
            Latent predictive variance (clipped at 0), in the data's units.

        Raises
        ------
        TypeError, ValueError
            Invalid inputs or a number of features other than the fit's; a ``component`` that
            is not the label of a part of a ``Sum`` or ``LMC`` kernel.
        """
        kernel, q = self._kernel(component), self._query(X_new, "predict_f")
        mean, var = self._latent(self._fit_inputs(q.X, lazy=self.n_latent == 1), kernel, with_mean=component is None)
        if component is not None and self.standardization is not None:
            mean = mean - self.standardization.mean(0.0, q.X)      # a part carries no share of the targets' mean
        return q.wide(mean), q.wide(var)

    def _latent(self, X_new, kernel=None, with_mean=True):
        """predict_f at checked inputs X_new (n, D) in the fit's units (NumPy, or Dask: lazy),
        with ``kernel`` (default: the model's) and the prior mean added unless ``with_mean`` is False."""
        block = partial(self._latent_block, kernel=kernel, with_mean=with_mean)
        if is_chunked((X_new,)):
            out = lazy_rows(block, (X_new,), ("mean", "var"))
            return self._data_units(out["mean"], out["var"], X_new)

        def chunk(X_block):
            out = block(X_block)
            return (), (out["mean"], out["var"])

        n, m = X_new.shape[0], self.state.Z.shape[0]
        _, (mean, var) = map_rows(chunk, (X_new,), default_chunk_size(n, m), width=m)
        return self._data_units(mean, var, X_new)

    def _latent_block(self, X_block, kernel=None, with_mean=True):
        """{"mean", "var"}: the latent predictive mean and variance (n,) in the fit's units at a
        block X_block (n, D) of inputs in the fit's units."""
        kernel, state = kernel or self._kernel(), self.state
        mean, var = state.moments(state.basis(kernel.gram(state.Z, X_block)), kernel.diag(X_block))
        if with_mean:
            mean = mean + self._prior_mean(X_block)
        return {"mean": mean, "var": var}

    def _prior_mean(self, X_block):
        """The mean function m at X_block (n, D) in the fit's units (0 without one)."""
        if self.model.mean is None:
            return 0.0
        return bind(self.model.mean, self.values, "mean").value(X_block)

    def _kernel(self, component=None):
        """The model's kernel, or its part labelled ``component``, bound to the fitted values
        (:class:`gpdsl.components.Bound`)."""
        if component is None:
            return bind(self.model.kernel, self.values, "kernel")
        kernel = self.model.kernel
        if not isinstance(component, (str, int)) or isinstance(component, bool):
            raise TypeError(f"predict_f: component must be a part's name or index, got {component!r}")
        if not isinstance(kernel, (Sum, LMC)):
            raise ValueError(f"predict_f: component={component!r} needs a Sum kernel (k1 + k2) or an LMC, and the "
                             f"model's kernel is {kernel.describe()}")
        labels = kernel.labels()
        label = labels[component] if isinstance(component, int) and 0 <= component < len(labels) else str(component)
        if isinstance(kernel, LMC):     # part q's B_q (x) k_q, of the LMC's fitted values
            return Bound(bind(kernel, self.values, "kernel").component.part_kernel(label), f"kernel.{label}")
        return bind(kernel.part(label), self.values, f"kernel.{label}")

    def _likelihood(self, X_rows=None):
        """The model's likelihood bound to the fitted values (:class:`gpdsl.components.Bound`),
        for the rows X_rows (n, D) where given (:meth:`gpdsl.likelihoods.Likelihood.for_rows`: a
        likelihood per output reads each row's output there)."""
        bound = bind(self.model.likelihood, self.values, "likelihood")
        return bound if X_rows is None else bound.for_rows(X_rows)

    def _data_units(self, mean, var, X):
        """A latent mean and (co)variance at the rows X from the fit's units to the data's (a
        multi-output model's targets are scaled per output: X's last column)."""
        scaling = self.standardization
        return (mean, var) if scaling is None else (scaling.mean(mean, X), scaling.variance(var, X))

    @threads.managed
    def predict_f_full_cov(self, X_new):
        """Latent predictive mean and full covariance at X_new (joint, for sampling and KL).

        Parameters
        ----------
        X_new : array_like, shape (n, D)
            New inputs in the data's units.

        Returns
        -------
        mean : ndarray, shape (n,), or (n, K) for K latent functions
            Latent predictive mean, in the data's units.
        cov : ndarray, shape (n, n); K latent functions: (K, n, n) or (n, K, n, K)
            Symmetrised latent predictive covariance, in the data's units.  K latent functions
            independent in the posterior give one (n, n) block a class; where the posterior
            couples them (multi-class Laplace) it is the joint (n, K, n, K) covariance.  A
            multi-output posterior at X_new (n, D) gives mean (n, P) and the covariance over
            (point, output) pairs, (n, P, n, P): cov[i, p, j, q] = Cov(f_p(x_i), f_q(x_j));
            at X_new (n, D+1), one output a row, (n,) and (n, n).

        Raises
        ------
        TypeError, ValueError
            Invalid inputs or a number of features other than the fit's.
        """
        q = self._query(X_new, "predict_f_full_cov")
        X_new = self._fit_inputs(q.X)
        kernel, state = self._kernel(), self.state
        with threads.bulk(float(X_new.shape[0]) ** 2 * state.Z.shape[0] * self.n_latent):
            b = state.basis(kernel.gram(state.Z, X_new))
            if self.n_latent > 1:
                return state.mean(b), self._class_covariance(kernel.gram(X_new, X_new), b)
            cov = state.covariance(b, kernel.gram(X_new, X_new))
        mean, cov = self._data_units(state.mean(b) + self._prior_mean(X_new), cov, X_new)
        return q.wide(mean), q.wide_cov(cov)

    def _class_covariance(self, prior, b):
        """The joint latent covariance of K latent functions at n points, from the prior Gram
        (n, n) of a shared kernel and the whitened basis b (M, n), or a kernel per latent
        function's Grams (K, n, n) and bases b (K, M, n): (K, n, n), one block a class, for
        independent classes; (n, K, n, K) where the posterior couples them (``state.coupling``)."""
        state = self.state
        if b.ndim == 3:
            blocks = prior - np.swapaxes(b, 1, 2) @ (state.correction @ b)
        else:
            blocks = prior[None] - np.einsum("in,kij,jm->knm", b, state.correction, b)
        blocks = 0.5 * (blocks + np.swapaxes(blocks, 1, 2))
        if state.coupling is None:
            return blocks
        G = state.coupling @ b                                           # (K, M, n)
        cov = np.einsum("kin,lim->nkml", G, G)
        idx = np.arange(self.n_latent)
        cov[:, idx, :, idx] += blocks
        return cov

    def noise_variance(self, X_new, noise_variance=None):
        """Observation-noise variances at X_new (the data's units), or None when they cannot be known.

        A multi-output posterior takes X_new as :meth:`predict_f` does: (n, D) gives every
        output's, (n, P), and (n, D+1) the output each row names, (n,).

        Parameters
        ----------
        X_new : ndarray, shape (n, D)
            New inputs in the data's units.
        noise_variance : float or array_like of shape (n,), optional
            Variances to use as they are (checked and broadcast to (n,); (n, P) for every output).

        Returns
        -------
        ndarray, shape (n,) or (n, P), or None
            ``noise_variance`` if given; None for ``HeteroscedasticGaussian`` with known
            training variances (they say nothing about new inputs); else the likelihood's noise
            at X_new.

        Raises
        ------
        TypeError, ValueError
            Invalid inputs; a ``noise_variance`` that is not numeric, of another shape, negative or
            not finite.
        """
        q = self._query(X_new, "noise_variance")
        X_new, noise_variance = q.X, q.rows("predict", "noise_variance", noise_variance)
        if noise_variance is not None:
            nv = as_float_array("predict", "noise_variance", noise_variance, allow_bool=False,
                                expected="a number or an (n_new,) array of variances")
            if nv.shape not in ((), (X_new.shape[0],)):
                raise ValueError(f"predict: noise_variance must be a number or have shape ({X_new.shape[0]},) "
                                 f"(one per row of X_new), got shape {nv.shape}")
            if not np.all(np.isfinite(nv)) or np.any(nv < 0):
                raise ValueError("predict: noise_variance must be finite and non-negative")
            return q.wide(np.broadcast_to(nv, (X_new.shape[0],)))
        if getattr(self.model.likelihood, "known", False):
            return None   # known training variances say nothing about new inputs
        noise = self._likelihood().noise(self._fit_inputs(X_new))
        return q.wide(noise if self.standardization is None else self.standardization.variance(noise, X_new))

    def _log_noise_variance(self, X_new):
        """log of :meth:`noise_variance` (X_new checked, in the data's units), or None where that is
        None, from the likelihood's ``log_noise``: finite where the variance itself overflows
        float64 (a learned log-polynomial noise above ~709 at an input far from the data)."""
        if getattr(self.model.likelihood, "known", False):
            return None
        log_noise = self._likelihood().log_noise(self._fit_inputs(X_new))
        scaling = self.standardization
        return log_noise if scaling is None else log_noise + 2.0 * np.log(scaling.target_scale(X_new))

    @threads.managed
    def predict(self, X_new, noise_variance=None, offset=None):
        """xarray.Dataset over dim ``obs``: f_mean, f_var and the observation predictive --
        y_mean, y_var for Gaussian and Poisson likelihoods, p = p(y* = +1) for Bernoulli.

        For ``HeteroscedasticGaussian(variance=...)`` (known training variances) y_var needs
        ``noise_variance=`` at the new inputs and is left out otherwise.  A multi-output posterior
        at X_new (n, D) predicts every output: variables over dims ``obs`` and ``output`` (n, P),
        ``noise_variance`` and ``offset`` then (n, P) too; at X_new (n, D+1) one output a row.

        Parameters
        ----------
        X_new : array_like or Dask array, shape (n, D)
            New inputs in the data's units; a Dask X_new gives lazily evaluated variables.
        noise_variance : float or array_like of shape (n,), optional
            Observation-noise variances at X_new (Gaussian likelihoods only), used instead of
            the likelihood's.
        offset : array_like of shape (n,), optional
            The new rows' offset of the latent input (as ``fit(offset=...)`` took the training
            rows'): the likelihood's predictive is taken at f + offset; ``f_mean`` is f's.

        Returns
        -------
        xarray.Dataset
            Variables of dim ``obs`` (n,): ``f_mean``, ``f_var`` and the likelihood's
            predictive (``y_mean``/``y_var``, or ``p``), in the data's units.

        Raises
        ------
        TypeError, ValueError
            Invalid inputs, or ``noise_variance`` given to a non-Gaussian likelihood or invalid.
        """
        xr = xarray()

        q = self._query(X_new, "predict")
        X_new = validate_inputs(q.X, "X_new", self.n_features, lazy=self.n_latent == 1)
        noise_variance = q.rows("predict", "noise_variance", noise_variance)
        offset = validate_offset(q.rows("predict", "offset", offset, scalar=False), X_new.shape[0], name="offset")
        if self.n_latent > 1:
            if offset is not None:
                raise ValueError(f"predict: offset is an offset of one latent function; "
                                 f"{self.model.likelihood.describe()} has {self.n_latent}")
            return self._class_dataset(xr, X_new, self._class_predictions(X_new))
        if noise_variance is not None and not self.gaussian:
            raise ValueError(f"predict: noise_variance applies to Gaussian likelihoods only; "
                             f"{type(self.model.likelihood).__name__} has no observation noise to add")
        if is_chunked((X_new,)):
            # Checked here, on the whole X_new; each block then takes its rows of the variances.
            given = self.noise_variance(X_new, noise_variance) if noise_variance is not None else None
            rows = (X_new,) + (() if given is None else (np.ascontiguousarray(given),))
            rows += () if offset is None else (offset,)
            block = partial(_block_with, self, given is not None, offset is not None)
            data = lazy_rows(block, rows, self._predict_names(given is not None))
        else:
            data = self._predict_block(X_new, noise_variance, offset)
        if q.every_output:
            return xr.Dataset({name: (("obs", "output"), q.wide(value)) for name, value in data.items()},
                              coords={"obs": coordinate(range(q.n)), "output": coordinate(self.output_labels)},
                              attrs={"inference": type(self.model.inference).__name__})
        return xr.Dataset({name: ("obs", value) for name, value in data.items()},
                          coords={"obs": coordinate(range(X_new.shape[0]))},
                          attrs={"inference": type(self.model.inference).__name__})

    def _predict_block(self, X_block, noise_variance=None, offset=None):
        """The variables of :meth:`predict` (a dict of (n,) arrays) at a block X_block (n, D) of
        checked inputs in the data's units, with ``noise_variance`` and ``offset`` as :meth:`predict`
        takes them.
        (Not a managed entry point: it also runs inside Dask's tasks, where each thread would
        set and restore the process's BLAS threads under the others.)"""
        mean, var = self._latent(X_block if self.standardization is None else self.standardization.inputs(X_block))
        data = {"f_mean": mean, "f_var": var}
        if offset is not None:
            mean = mean + offset
        if self.gaussian:
            data["y_mean"] = mean
            noise = self.noise_variance(X_block, noise_variance)
            if noise is not None:
                data["y_var"] = var + noise
        else:
            data.update(self._likelihood(X_block).predictive(mean, var))
        return data

    def _class_moments(self, X_block):
        """The latent means (n, K) and variances (n, K) of a K-class likelihood at a block X_block
        (n, D) of inputs in the fit's units, or each point's (K, K) covariance (n, K, K) where the
        posterior couples the classes (multi-class Laplace)."""
        kernel, state = self._kernel(), self.state
        return state.moments(state.basis(kernel.gram(state.Z, X_block)), kernel.diag(X_block),
                             full=state.coupling is not None)

    def _class_rows(self, X_new, fn, *rows):
        """``fn(mean, var, *row_blocks) -> tuple of (n_block, ...) arrays`` over row blocks of the
        checked inputs X_new (n, D) in the data's units and the row arrays ``rows``, concatenated."""
        X_fit = X_new if self.standardization is None else self.standardization.inputs(X_new)

        def chunk(X_block, *row_blocks):
            return (), fn(*self._class_moments(X_block), *row_blocks)

        n, m = X_fit.shape[0], self.state.Z.shape[0]
        return map_rows(chunk, (X_fit,) + rows, default_chunk_size(n, m * self.n_latent), width=m)[1]

    def _class_predictions(self, X_new):
        """{"f_mean", "f_var", "p"}: (n, K) each, the latent moments and class probabilities of
        a K-class likelihood at checked inputs X_new (n, D) in the data's units (the probabilities
        integrate over each point's joint latent covariance where the posterior has one)."""
        likelihood = self._likelihood()

        def predictions(mean, var):
            diag = np.diagonal(var, axis1=1, axis2=2) if var.ndim == 3 else var
            return mean, diag, likelihood.predictive(mean, var)["p"]

        mean, var, p = self._class_rows(X_new, predictions)
        return {"f_mean": mean, "f_var": var, "p": p}

    def _class_dataset(self, xr, X_new, data):
        """The xarray.Dataset of :meth:`predict` for a K-class likelihood: dims ``obs`` and
        ``class`` (the class labels), and ``label``, each row's most probable class."""
        labels = self.model.likelihood.class_labels()
        variables = {name: (("obs", "class"), value) for name, value in data.items()}
        variables["label"] = ("obs", labels[np.argmax(data["p"], axis=1)])
        return xr.Dataset(variables, coords={"obs": coordinate(range(X_new.shape[0])), "class": coordinate(labels)},
                          attrs={"inference": type(self.model.inference).__name__})

    def _predict_names(self, noise_given):
        """The names of :meth:`predict`'s variables, known without the data (for lazy predictions)."""
        if self.gaussian:
            known = noise_given or not getattr(self.model.likelihood, "known", False)
            return ("f_mean", "f_var", "y_mean") + (("y_var",) if known else ())
        # A probe row of each output (the summaries of a likelihood per output are their union).
        probe_rows = np.zeros((self.output_count or 1, self.n_features))
        if self.output_count is not None:
            probe_rows[:, -1] = np.arange(self.output_count)
        probe = self._likelihood(probe_rows).predictive(np.zeros(probe_rows.shape[0]), np.ones(probe_rows.shape[0]))
        return ("f_mean", "f_var") + tuple(probe)

    @property
    def gaussian(self):
        """True for the Gaussian-noise likelihoods (their predictive adds noise variances)."""
        return self.model.likelihood.observation_noise

    @threads.managed
    def log_predictive(self, X_new, y_new, offset=None):
        """Pointwise log predictive probability of targets y_new at X_new (n,).

        Gaussian: log N(y | f_mean, f_var + noise); Bernoulli: log p(y | x) for y in {0, 1},
        {-1, +1} or bool; Poisson: the negative-binomial predictive of the QP paper (eq. 122).

        Parameters
        ----------
        X_new : array_like, shape (n, D)
            New inputs in the data's units.
        y_new : array_like, shape (n,)
            Targets at X_new, coded as for ``fit``.
        offset : array_like, shape (n,), optional
            The new rows' offset of the latent input (see :meth:`predict`).

        Returns
        -------
        ndarray, shape (n,)
            log p(y_new_i | X_new_i, training data), in the data's units.  A multi-output
            posterior at X_new (n, D) takes y_new (n, P) (and ``offset``), NaN where an entry is
            missing, and returns (n, P), NaN at the missing entries; at X_new (n, D+1), (n,).

        Raises
        ------
        TypeError, ValueError
            Invalid inputs or targets, or an unknown noise variance at X_new (known-variance
            heteroscedastic likelihood).
        """
        q = self._query(X_new, "log_predictive")
        if q.every_output:
            y_rows = q.rows("log_predictive", "y_new", y_new, scalar=False)
            offset = q.rows("log_predictive", "offset", offset, scalar=False)
            observed, out = ~np.isnan(y_rows), np.full(y_rows.shape, np.nan)
            if observed.any():
                out[observed] = self.log_predictive(q.X[observed], y_rows[observed],
                                                    None if offset is None else offset[observed])
            return q.wide(out)
        X_new = validate_inputs(q.X, "X_new", self.n_features)
        y_new = self._likelihood(X_new).coded_targets(y_new, X_new.shape[0], "y_new")
        if self.n_latent > 1:
            if offset is not None:
                raise ValueError(f"log_predictive: offset is an offset of one latent function; "
                                 f"{self.model.likelihood.describe()} has {self.n_latent}")
            likelihood = self._likelihood()
            return self._class_rows(X_new, lambda mean, var, y: (likelihood.log_predictive(mean, var, y),), y_new)[0]
        mean, var = self.predict_f(X_new)
        offset = validate_offset(offset, X_new.shape[0], name="offset")
        if offset is not None:
            mean = mean + offset
        if self.gaussian:
            log_noise = self._log_noise_variance(X_new)
            if log_noise is None:
                raise ValueError("log_predictive: the noise variance at X_new is unknown for known-variance "
                                 "heteroscedastic likelihoods")
            # log(f_var + noise) from the logs: the noise alone may overflow float64 (log noise
            # 743 gave -inf) where log N(y | mean, f_var + noise) is finite.
            with np.errstate(divide="ignore"):
                log_total = np.logaddexp(np.log(var), log_noise)
            return gaussian_log_density(y_new, mean, log_total)
        return self._likelihood(X_new).log_predictive(mean, var, y_new)

    @threads.managed
    def to_inference_data(self, X_new, y_new, draws=1000, seed=0, chains=4):
        """arviz.InferenceData at X_new, y_new: ``chains`` x ``draws`` joint draws of f.

        See :mod:`gpdsl.io.arviz`.

        Parameters
        ----------
        X_new : array_like, shape (n, D)
            Inputs where the latent function is drawn jointly.
        y_new : array_like, shape (n,)
            Targets at X_new, for the pointwise log-likelihood (``az.loo``, ``az.waic``).
        draws : int, default 1000
            Draws per chain.
        seed : int or None, default 0
            Seed of ``np.random.default_rng``.
        chains : int, default 4
            Number of chains.

        Returns
        -------
        arviz.InferenceData
            Groups posterior (``f``), posterior_predictive (``y``), log_likelihood (``y``), each
            (chains, draws, n); observed_data; constant_data (X and the hyperparameters).

        Raises
        ------
        TypeError, ValueError
            As :func:`gpdsl.io.arviz.to_inference_data`.
        """
        from .io.arviz import to_inference_data
        return to_inference_data(self, X_new, y_new, draws=draws, seed=seed, chains=chains)

    # -- xarray / netCDF ---------------------------------------------------------------------------
    def to_xarray(self):
        """The posterior as an xarray.Dataset: Z, q(u), the predictive cache, every
        hyperparameter, the method's local state and the greedy selection, with attrs.

        The attrs include ``format_version`` (:data:`gpdsl.io.layout.FORMAT_VERSION`) and
        ``checksum``, the SHA-256 of everything else in the dataset (see :func:`gpdsl.from_xarray`).
        A hyperparameter's variable has the dims its entry declares (an ARD length-scale's
        ``feature``; :func:`gpdsl.io.layout.variable_dims`).

        Returns
        -------
        xarray.Dataset
        """
        xr = xarray()

        state = self.state
        m, d = state.Z.shape
        layout = model_layout(self.model, state.form)
        # Kept so that a loaded posterior predicts with the very same arithmetic.  The whitened
        # state has its own names, so that a reader that knows only the natural-basis ones of
        # earlier versions fails on it rather than predicting with it; so has the Kronecker form's.
        dims = {**layout["common"].variables, **layout["whitened"].variables, **layout["coupling"].variables}
        data = {name: (dims[name][0], value) for name, value in state.saved_arrays().items()}
        try:
            declared = {e.name: e.dims for e in hyperparameter_entries(self.model, state.Z)}
        except ValueError:
            declared = {}       # values that do not fit the model's table: named after the entry
        for name, value in self.values.items():
            data[name] = (variable_dims(name, value, declared.get(name)), value)
        local_attrs = {}
        if self.sites is not None:
            local = self.model.inference.local_state_for(self.model.likelihood)
            local_vars, local_attrs = local.export(self.sites, self.total_sweeps)
            data.update(local_vars)
            local_attrs["local_state"] = local.name
        selection_attrs = {}
        if self.selection is not None and self.selection.indices is not None:
            data["selected_index"] = ("inducing", self.selection.indices)
            data["selection_criterion"] = ("inducing", self.selection.criterion)
            selection_attrs["selection_stopped"] = str(self.selection.stopped)
        if self.reinit_history is not None:
            selection_attrs["reinit_history"] = json.dumps(self.reinit_history)
            selection_attrs["reinit_stop"] = str(self.reinit_stop)
        if self.subsample is not None:
            selection_attrs["subsample_rows"] = self.subsample["rows"]
            selection_attrs["subsample_objective"] = self.subsample["objective"]
        scaling_attrs = {}
        if self.standardization is not None:
            scaling = self.standardization
            columns = layout["standardization"].variables["standardization_x_mean"][0]
            data["standardization_x_mean"] = (columns, scaling.x_mean)
            data["standardization_x_scale"] = (columns, scaling.x_scale)
            # Per output (a multi-output layout's): variables over "output"; else attributes.
            for name, value in (("standardization_y_mean", scaling.y_mean), ("standardization_y_scale", scaling.y_scale)):
                if name in layout["standardization"].variables:
                    data[name] = (layout["standardization"].variables[name][0], value)
                else:
                    scaling_attrs[name] = value
        attrs = {
            "format_version": FORMAT_VERSION,
            "inference": type(self.model.inference).__name__,
            "likelihood": self.model.likelihood.describe(),
            "kernel": self.model.kernel.describe(),
            "log_evidence": self.log_evidence,
            "log_prior": self.log_prior,
            "converged": int(self.converged),
            "constant_model": int(self.constant_model),
            "ridge": self.ridge or "",
            "n_iterations": self.n_iterations,
            "jitter": self.jitter,
            "diagnostics": self.diagnostics.to_json(),
            "gpdsl_version": __version__,
            "priors": json.dumps(self.priors),
            "fixed": json.dumps(self.fixed),
            "model_spec": json.dumps(self.model.to_dict()),
            "M": m,
            **local_attrs,
            **selection_attrs,
            **scaling_attrs,
        }
        # "inducing_bis" only where the state has (M, M) arrays (not the Kronecker form).
        coords = {name: np.arange(m) for name in ("inducing", "inducing_bis") if name in layout["common"].variables}
        coords["feature"] = np.arange(d)
        if self.n_latent > 1:
            coords["class"] = np.arange(self.n_latent)
        if self.output_count is not None:
            # Z's long columns, the D inputs of the hyperparameters' dims, the outputs (B's W, kappa).
            coords.update(column=np.arange(d), feature=np.arange(d - 1), output=self.output_labels)
        # The state's own index dimensions (the Kronecker form's eigenbases), sized by its arrays.
        sizes = {dim: size for dims_, value in data.values() for dim, size in zip(dims_, np.shape(value))}
        coords.update({name: np.arange(sizes[name]) for name, (_, kind) in layout["whitened"].variables.items()
                       if kind == "index"})
        ds = xr.Dataset(data, coords=coords, attrs=attrs)
        ds.attrs["checksum"] = checksum(ds)
        return ds

    def save(self, path, *, follow_symlinks=True):
        """Write the posterior to netCDF (xarray's writer, scipy backend: no extra dependency).

        The file is written under a temporary name in the target's directory, flushed to
        disk (fsync) and renamed over ``path`` in one step (``os.replace``).  A save that is
        interrupted -- an exception, SIGINT, SIGKILL, a crash -- leaves at ``path`` either the
        file that was there before or the complete new one.

        Called from the main thread, the save holds back SIGINT (Ctrl-C) until it is over: an
        interrupt that arrives meanwhile is delivered to the caller's handler once the file is
        in place (or the failed save's temporary file is removed), so it surfaces as a
        KeyboardInterrupt from ``save`` and is never lost inside the netCDF writer's
        destructors, and no temporary file is left behind.  A save killed outright (SIGKILL, a
        crash) may leave its temporary file, ``.<name>.<random hex>.tmp``, beside the target.

        Parameters
        ----------
        path : str or os.PathLike
            The file to write, ending in ``.nc``.  An existing file keeps its permission bits.
        follow_symlinks : bool, default True
            A symbolic link at ``path`` is followed (its target is replaced); with False the link
            itself is replaced by the file, and nothing is written where it points (what
            ``gpdsl run`` does inside its ``--out`` folder).

        Raises
        ------
        TypeError
            If ``path`` is not a str or os.PathLike.
        ValueError
            If ``path`` does not end in ``.nc``.
        KeyboardInterrupt
            A SIGINT arrived during the save (with Python's default handler); the save was
            completed or failed first, as above.
        """
        path = check_path("save", path)
        if os.path.splitext(path)[1].lower() != ".nc":
            # The file is netCDF whatever its name: "p.pkl" would promise a pickle it is not.
            raise ValueError(f"save: path must end in .nc (the posterior is written as netCDF), got {path!r}")
        target = os.path.realpath(path) if follow_symlinks else path
        # The whole save, serialisation included, runs with SIGINT held back: a KeyboardInterrupt
        # raised inside xarray's writer can land in a destructor (__del__), where Python prints
        # and drops it, and one raised between creating the temporary file and its removal
        # leaves the file behind.  A save takes well under a second per 10 MB, so Ctrl-C waits
        # at most that long.
        with sigint_deferred():
            # The netCDF-3 bytes (scipy backend), built in memory.
            write_replacing(target, self.to_xarray().to_netcdf(engine="scipy"))



def _block_with(posterior, noise_given, offset_given, X_block, *rows):
    """:meth:`Posterior._predict_block` of one Dask block, its row arrays (noise variances,
    offset) in that order where given."""
    rows = list(rows)
    noise = rows.pop(0) if noise_given else None
    offset = rows.pop(0) if offset_given else None
    return posterior._predict_block(X_block, noise, offset)



__all__ = ["Posterior", "FitRecord"]
