"""scikit-learn estimators over a declared :class:`gpdsl.Model`: :class:`GPRegressor` and
:class:`GPClassifier`.

Each estimator takes the model's parts (``kernel``, ``likelihood``, ``inducing``, ``inference``,
``mean``) and the options of :meth:`gpdsl.Model.fit` (``optimize``, ``fixed``, ``restarts``,
``max_iter``, ``standardize``, ``random_state``) as constructor parameters, stored unchanged
(scikit-learn's rules: no validation before ``fit``, ``clone``/``get_params``/``set_params``).
``fit`` declares the model (filling the parts left at None with the defaults below), fits it and
keeps ``model_`` (the :class:`gpdsl.Model`) and ``posterior_`` (the :class:`gpdsl.Posterior`), so
every gpdsl view of the fit (``posterior_.to_xarray()``, ``to_inference_data``, ``save``) is at
hand.  They work in ``Pipeline``, ``GridSearchCV`` and ``cross_val_score`` and pass
``sklearn.utils.estimator_checks.check_estimator`` (``tests/test_sklearn.py``).

With a multi-output kernel (:mod:`gpdsl.multioutput`) ``GPRegressor`` is a multi-output regressor:
Y (N, P) with NaN for a missing entry, or long rows with the output index last; its Notes.

Nested parameters: ``get_params(deep=True)`` lists each dataclass field of a part as
``"<part>__<field>"`` (``kernel__lengthscale``, ``inference__damping``; deeper for a part held
by a part, ``kernel__base__lengthscale``), and ``set_params`` replaces the part by
:func:`dataclasses.replace` with the new field values (the part's own checks then run).  A part
left at None is given its default first for ``kernel`` (so ``GridSearchCV(GPRegressor(),
{"kernel__lengthscale": [...]})`` works); the other parts' defaults depend on the data, and
setting a field of one of them while it is None is refused.  Note that a hyperparameter set so is
the optimiser's *start* unless ``optimize=False`` or it is ``fixed`` (or declared
``gd.Fixed(value)``).

This module imports scikit-learn; ``import gpdsl`` does not import it.
"""
from __future__ import annotations

import dataclasses
import numbers
import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.metrics import r2_score
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_consistent_length, check_is_fitted

from . import defaults
from . import inducing as _inducing
from . import inference as _inference
from . import kernels as _kernels
from . import likelihoods as _likelihoods
from . import multioutput as _multioutput
from .checks import check_seed
from .inputs import target_kind
from .methods.common import ConvergenceWarning
from .model import Model

try:                                     # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _sk_validate_data
except ImportError:                      # pragma: no cover - older scikit-learn
    _sk_validate_data = None
#: check_array's keyword for finiteness (renamed in scikit-learn 1.6).
_FINITE = "ensure_all_finite" if _sk_validate_data is not None else "force_all_finite"

__all__ = ["GPRegressor", "GPClassifier", "choose_link"]

PARTS = ("kernel", "likelihood", "inducing", "inference", "mean")
#: The target kinds (:func:`gpdsl.inputs.target_kind`) of the likelihoods GPClassifier takes.
LABEL_KINDS = ("binary", "categorical")


def _validate_data(estimator, *args, reset=True, **kwargs):
    """scikit-learn's ``validate_data(estimator, X[, y])`` (>= 1.6) or the estimator method it
    replaced; ``fit`` passes y even when it is None (scikit-learn then says y is required)."""
    if _sk_validate_data is not None:
        return _sk_validate_data(estimator, *args, reset=reset, **kwargs)
    return estimator._validate_data(*args, reset=reset, **kwargs)  # pragma: no cover - older scikit-learn


def _seed(random_state):
    """Model.fit's ``seed`` from a scikit-learn ``random_state``: an int as it is, None as None
    (fresh entropy), a ``RandomState`` by one draw from it."""
    if random_state is None or isinstance(random_state, (numbers.Integral, np.integer)):
        return None if random_state is None else int(random_state)
    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


def _fields(part):
    """The init fields of a component (a dataclass instance), by name."""
    return {f.name: f for f in dataclasses.fields(part) if f.init}


def _nested_params(prefix, part, out):
    """``out[prefix__field] = value`` for every init field of ``part``, recursing into fields
    that are components themselves."""
    for name in _fields(part):
        value = getattr(part, name)
        out[f"{prefix}__{name}"] = value
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            _nested_params(f"{prefix}__{name}", value, out)


def _replace(part, changes, where):
    """``part`` with ``changes`` ({"field": value, "field__sub": value}) applied by
    :func:`dataclasses.replace`, recursing for ``field__sub`` keys."""
    if not dataclasses.is_dataclass(part) or isinstance(part, type):
        raise ValueError(f"set_params: {where} is {part!r}, which has no fields to set")
    known = _fields(part)
    direct, deeper = {}, {}
    for key, value in changes.items():
        name, delim, sub = key.partition("__")
        if name not in known:
            raise ValueError(f"set_params: {type(part).__name__} ({where}) has no field {name!r}; "
                             f"its fields: {sorted(known)}")
        if delim:
            deeper.setdefault(name, {})[sub] = value
        else:
            direct[name] = value
    for name, sub_changes in deeper.items():
        inner = direct.get(name, getattr(part, name))
        direct[name] = _replace(inner, sub_changes, f"{where}__{name}")
    return dataclasses.replace(part, **direct)


class _GPEstimator(BaseEstimator):
    """What both estimators share: nested parameters, the fit options and the model's build."""

    #: Above this many training rows a model whose ``inducing`` and ``inference`` are both None
    #: is made sparse (``gd.inducing.KMeans(default_inducing)``): the dense methods cost O(N^3).
    exact_max_n = 2000
    #: The number of k-means inducing points given to a sparse default, or to a method that needs
    #: an inducing spec and was given none (at most the number of training rows).
    default_inducing = 200

    # -- parameters ----------------------------------------------------------------------------
    def get_params(self, deep=True):
        """The constructor's parameters; with ``deep``, each part's fields as ``part__field`` too.

        Parameters
        ----------
        deep : bool, default True
            Add the fields of the parts that are set (``kernel__lengthscale``, ...).

        Returns
        -------
        dict
        """
        params = super().get_params(deep=False)
        if deep:
            for part in PARTS:
                value = params.get(part)
                if dataclasses.is_dataclass(value) and not isinstance(value, type):
                    _nested_params(part, value, params)
        return params

    def set_params(self, **params):
        """Set parameters; ``part__field=value`` replaces that field of the part (module docstring).

        Parameters
        ----------
        **params
            Constructor parameters, and ``<part>__<field>`` for the parts' fields.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            An unknown parameter or field, or a field of a part left at None (other than the
            kernel, which then starts from its default).
        """
        plain, nested = {}, {}
        for key, value in params.items():
            part, delim, sub = key.partition("__")
            if delim:
                if part not in PARTS:
                    raise ValueError(f"Invalid parameter {part!r} for estimator {self}. Valid parameters are: "
                                     f"{sorted(super().get_params(deep=False))!r}.")
                nested.setdefault(part, {})[sub] = value
            else:
                plain[key] = value
        if plain:
            super().set_params(**plain)
        for part, changes in nested.items():
            current = getattr(self, part)
            if current is None:
                if part != "kernel":
                    raise ValueError(f"set_params: {part} is None (its default depends on the data); give "
                                     f"{part}=... before setting its fields {sorted(changes)}")
                current = self._default_kernel()
            setattr(self, part, _replace(current, changes, part))
        return self

    # -- the model -------------------------------------------------------------------------------
    def _default_kernel(self):
        return _kernels.SquaredExponential()

    def _sparse_default(self, n):
        """``gd.inducing.KMeans`` with min(default_inducing, n) centres."""
        seed = _seed(self.random_state)
        return _inducing.KMeans(min(self.default_inducing, n), seed=0 if seed is None else seed)

    def _inducing_for(self, inference, n):
        """The inducing spec: the one given, else a k-means default where ``inference`` needs one."""
        if self.inducing is not None:
            return self.inducing
        if getattr(inference, "inducing_rule", "forbidden") == "required":
            return self._sparse_default(n)
        return None

    def _fit_posterior(self, model, X, y, seed):
        """Model.fit with the estimator's fit options and ``seed`` (:func:`_seed` of ``random_state``,
        drawn once a fit); records model_, posterior_ and the fit's numbers.  The log evidence is
        read at the fit, as scikit-learn's estimators record theirs: a minibatch fit's bound is one
        more pass over the training rows (:class:`gpdsl.methods.common.PendingEvaluation`, 0.2 of
        letter's ~22 CPU s), read from the rows as they are now, not after the caller has changed
        X in place."""
        posterior = model.fit(X, y, optimize=self.optimize, fixed=self.fixed, restarts=self.restarts,
                              seed=seed, max_iter=self.max_iter, standardize=self.standardize)
        # A model left open (K > 2 classes) is the one its fit chose.
        self.model_ = posterior.model if model.inference is None else model
        self.posterior_ = posterior
        self.hyperparameters_ = {name: np.array(value) for name, value in posterior.values.items()
                                 if not name.startswith("variational.")}
        self.n_iter_ = int(posterior.n_iterations)
        self.log_marginal_likelihood_value_ = float(posterior.log_evidence)
        return posterior

    def _checked_inputs(self, X):
        check_is_fitted(self, "posterior_")
        return _validate_data(self, X, reset=False, dtype=np.float64)


class GPRegressor(RegressorMixin, _GPEstimator):
    """Gaussian-process regression with a declared :class:`gpdsl.Model`, as a scikit-learn regressor.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel or None, default None
        The prior covariance; None is ``gd.kernels.SquaredExponential()`` (isotropic, length-scale
        and variance 1, both fitted).
    likelihood : gpdsl.likelihoods.Likelihood or None, default None
        None is ``gd.likelihoods.Gaussian()`` (noise variance 1 at the start, fitted).
    inducing : gpdsl.inducing.InducingSpec or None, default None
        The inducing inputs' spec.  None: dense when the model is (``Exact``), and for more than
        :attr:`exact_max_n` training rows (with ``inference`` None too) or a method that needs one,
        ``gd.inducing.KMeans(min(default_inducing, N))``.
    inference : gpdsl.inference.Inference or None, default None
        None: ``gd.inference.Exact()`` without inducing points, ``gd.inference.VFE()`` with them
        (given, or the large-N default above).
    mean : gpdsl.means.Mean or None, default None
        The prior mean function (None: zero).
    optimize : bool, default True
        Fit the hyperparameters (False: the posterior at the declared values, as scikit-learn's
        ``optimizer=None``).
    fixed : tuple of str, default ()
        Hyperparameters held at their declared values (``"likelihood.variance"``).
    restarts : int, default 0
        Extra L-BFGS-B runs from random starts (``n_restarts_optimizer``).
    max_iter : int, default 1000
        L-BFGS-B iterations per run.
    standardize : bool, default False
        ``Model.fit(standardize=True)``: inputs and targets scaled to mean 0 and sd 1 for the fit,
        predictions in the data's units (scikit-learn's ``normalize_y``, and the inputs too).
    include_noise : bool, default False
        Whether ``predict``'s ``std``/``cov`` and ``sample_y`` include the likelihood's noise.
        False (the default) is scikit-learn's ``GaussianProcessRegressor`` with its noise given as
        ``alpha``: the latent function's predictive, f(x*) | data.  True is the noisy target's,
        y(x*) | data, which is what scikit-learn returns when the noise is a ``WhiteKernel`` in
        its kernel.  The mean is the same either way.
    random_state : int, RandomState instance or None, default None
        Seed of the restarts' draws and of the default k-means start (None: fresh draws for the
        restarts, seed 0 for k-means).

    Notes
    -----
    Multi-output regression: with a kernel of P outputs (``kernel=gd.kernels.ICM(k, P)``, ``LMC``;
    :mod:`gpdsl.multioutput`), ``fit`` takes the isotopic layout, X (N, D) and Y (N, P) with NaN
    marking a missing entry (scikit-learn's multi-output regressors' shape; ``n_features_in_`` is
    D), or the heterotopic ones: long rows X (n, D+1) whose last column is the output index with y
    (n,) (``n_features_in_`` is D+1), or lists of P arrays ``[X_0, ...]``, ``[y_0, ...]`` (taken as
    long rows).  Either fit predicts at X (n, D), every output: ``predict`` gives (n, P), its std
    (n, P) and its covariance (n, P, n, P), ``sample_y`` (n, P, n_samples); and at X (n, D+1), the
    output each row names: (n,).  ``score`` is R² averaged over the outputs, missing entries left
    out (:meth:`score`); ``scoring="r2"`` in a model selection cannot take NaN targets, the default
    scoring (``score``) can.  The isotopic layout is the one for ``Pipeline``, ``GridSearchCV``
    and ``cross_val_score`` (a fold's rows are points, every output with them); in a ``Pipeline``
    on long rows a scaler must leave the output column as it is
    (``ColumnTransformer([("x", StandardScaler(), slice(0, D))], remainder="passthrough")`` keeps
    it last), and ``fit`` refuses an output column that is no longer integer-valued.

    Attributes
    ----------
    model_ : gpdsl.Model
        The model fitted (defaults filled in).
    posterior_ : gpdsl.Posterior
        The fit: ``posterior_.predict(X)`` (an xarray Dataset), ``values``, ``to_xarray()``, ...
    log_marginal_likelihood_value_ : float
        ``posterior_.log_evidence``: the exact log marginal likelihood (``Exact``), or the
        method's bound or approximation (VFE's collapsed bound, ...).
    hyperparameters_ : dict of str to ndarray
        The fitted hyperparameters by name (``"kernel.lengthscale"``, ...).
    n_iter_ : int
        L-BFGS-B iterations of the fit (0 with ``optimize=False``).
    n_outputs_ : int
        P, the kernel's outputs (1 for a kernel of one output).
    layout_ : str or None
        A multi-output fit's layout, ``"isotopic"`` or ``"long"`` (lists are long); None for one
        output.
    n_features_in_ : int
        D; D+1 for a multi-output fit on long rows.
    feature_names_in_ : ndarray of str
        Only when X has string column names (a DataFrame).
    """

    def __init__(self, kernel=None, likelihood=None, inducing=None, inference=None, mean=None, *,
                 optimize=True, fixed=(), restarts=0, max_iter=1000, standardize=False,
                 include_noise=False, random_state=None):
        self.kernel = kernel
        self.likelihood = likelihood
        self.inducing = inducing
        self.inference = inference
        self.mean = mean
        self.optimize = optimize
        self.fixed = fixed
        self.restarts = restarts
        self.max_iter = max_iter
        self.standardize = standardize
        self.include_noise = include_noise
        self.random_state = random_state

    def _build_model(self, n):
        """The Model for n training rows, the parts left at None filled with the defaults."""
        kernel = self.kernel if self.kernel is not None else self._default_kernel()
        likelihood = self.likelihood if self.likelihood is not None else _likelihoods.Gaussian()
        inference = self.inference
        if inference is None:
            dense = self.inducing is None and n <= self.exact_max_n
            inference = _inference.Exact() if dense else _inference.VFE()
        return Model(kernel=kernel, likelihood=likelihood, inducing=self._inducing_for(inference, n),
                     inference=inference, mean=self.mean)

    def fit(self, X, y):
        """Fit the model to X (N, D) and real targets y (N,); with a multi-output kernel also to
        Y (N, P) with NaN for a missing entry, or long rows (class docstring).

        Parameters
        ----------
        X : array_like, shape (N, D) or (n, D+1), or list of P arrays (n_p, D)
            The inputs; (n, D+1) and the list are a multi-output kernel's heterotopic layouts
            (the last column the output index 0..P-1; one array an output).
        y : array_like, shape (N,) or (N, P), or list of P arrays (n_p,)
            The targets; (N, P) with X (N, D) is a multi-output kernel's isotopic layout (NaN
            marks a missing entry).  A pandas DataFrame Y's columns (or a dict layout's keys)
            name the outputs: ``posterior_.output_names``, the ``output`` coordinate of
            ``posterior_``'s labelled results.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            For a multi-output kernel: Y of a width other than P, an all-NaN column, inf in Y,
            an output index that is not an integer in 0..P-1 (a scaler applied to the output
            column), an output with no row, list lengths other than P.
        """
        P = self._output_count()
        self.n_outputs_ = 1 if P is None else P
        self.layout_ = None
        if P is None:
            shape = np.shape(np.asarray(y)) if y is not None else ()
            if len(shape) == 2 and shape[1] > 1:
                raise ValueError(f"GPRegressor.fit: y has shape {shape}; targets of several outputs need a "
                                 f"multi-output kernel (kernel=gd.kernels.ICM(k, {shape[1]}) or LMC)")
            X, y = _validate_data(self, X, y, dtype=np.float64, y_numeric=True)
            y = np.asarray(y, dtype=float)
        else:
            # Names the data give (a DataFrame Y's columns, a dict's keys): the posterior's output_names.
            names = _multioutput.data_output_names(X, y, P, owner="GPRegressor.fit")
            X, y = self._long_data(X, y, P)
        self._fit_posterior(self._build_model(X.shape[0]), X, y, _seed(self.random_state))
        if P is not None:
            _multioutput.name_outputs(self.posterior_, names)
        return self

    def _output_count(self):
        """P of the estimator's kernel, or None for a kernel of one output (or no kernel)."""
        return None if self.kernel is None else _multioutput.output_count(self.kernel)

    def _long_data(self, X, y, P):
        """A multi-output fit's data checked and in the long layout (X_long (n, D+1), y_long (n,));
        records ``layout_`` and, as scikit-learn's validation does, ``n_features_in_`` (D for the
        isotopic layout, D+1 for the long one) and ``feature_names_in_``."""
        owner = "GPRegressor.fit"
        if _multioutput.layout(X, y, P) == "lists":
            X, y, _ = _multioutput.long_data(X, y, P, owner=owner)
        if _multioutput.layout(X, y, P) == "isotopic":
            self.layout_ = "isotopic"
            X = _validate_data(self, X, dtype=np.float64)
            # scikit-learn's y checks refuse NaN, here the mark of a missing entry (long_data
            # refuses inf, naming the estimator).
            Y = check_array(y, dtype=np.float64, input_name="y", **{_FINITE: False})
            check_consistent_length(X, Y)
            X_long, y_long, _ = _multioutput.long_data(X, Y, P, owner=owner)
            return X_long, y_long
        self.layout_ = "long"
        X, y = _validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        X_long, y_long, _ = _multioutput.long_data(X, y, P, owner=owner)
        return X_long, np.asarray(y_long, dtype=float)

    def _checked_inputs(self, X):
        """X checked for prediction; a multi-output fit takes (n, D) (every output) and (n, D+1)
        (the output index last) whichever layout it was fitted in."""
        check_is_fitted(self, "posterior_")
        P = self.posterior_.output_count
        if P is None or np.ndim(X) == 2 and np.shape(X)[1] == self.n_features_in_:
            return _validate_data(self, X, reset=False, dtype=np.float64)
        X = check_array(X, dtype=np.float64, input_name="X")
        D = self.posterior_.input_dims
        if X.shape[1] == D + 1:
            _multioutput.check_outputs("GPRegressor.predict", "X", X, P, every_output=False)
        elif X.shape[1] != D:
            raise ValueError(f"GPRegressor.predict: X has {X.shape[1]} features; this multi-output fit takes "
                             f"(n, D={D}) inputs (every output predicted, results (n, {P})) or (n, D+1={D + 1}) "
                             f"with the output index last (one output a row)")
        return X

    def _moments(self, X):
        """Predictive mean, latent variance and the observation's extra variance at checked X."""
        data = self.posterior_.predict(X)
        f_var = np.asarray(data["f_var"], dtype=float)
        mean = np.asarray(data["y_mean"] if "y_mean" in data else data["f_mean"], dtype=float)
        if "y_var" in data:
            extra = np.maximum(np.asarray(data["y_var"], dtype=float) - f_var, 0.0)
        else:
            extra = np.zeros_like(f_var)
        return mean, f_var, extra

    def predict(self, X, return_std=False, return_cov=False):
        """Predictive mean at X, and its standard deviation or covariance.

        Parameters
        ----------
        X : array_like, shape (n, D), or (n, D+1) for a multi-output fit
            For a multi-output fit, (n, D) predicts every output and (n, D+1) the output named
            by each row's last column.
        return_std : bool, default False
            Also return the predictive standard deviation (of f, or of y with ``include_noise``).
        return_cov : bool, default False
            Also return the joint predictive covariance (n, n) (likewise).

        Returns
        -------
        y_mean : ndarray, shape (n,), or (n, P) for a multi-output fit at X (n, D)
        y_std : ndarray, shape of y_mean
            With ``return_std``.
        y_cov : ndarray, shape (n, n), or (n, P, n, P) for a multi-output fit at X (n, D)
            With ``return_cov``; ``y_cov[i, p, j, q]`` = Cov(y_p(x_i), y_q(x_j)).

        Raises
        ------
        RuntimeError
            Both ``return_std`` and ``return_cov`` (as scikit-learn's regressor).
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        X = self._checked_inputs(X)
        mean, f_var, extra = self._moments(X)
        if return_cov:
            _, cov = self.posterior_.predict_f_full_cov(X)
            cov = np.array(cov, dtype=float)
            if self.include_noise:
                # The noise is independent across (point, output) pairs: the flattened diagonal.
                flat = cov.reshape(extra.size, extra.size)
                flat[np.diag_indices_from(flat)] += extra.ravel()
            return mean, cov
        if return_std:
            return mean, np.sqrt(f_var + extra if self.include_noise else f_var)
        return mean

    def sample_y(self, X, n_samples=1, random_state=0):
        """Joint draws of the predictive at X (of f, or of y with ``include_noise``).

        As scikit-learn's ``GaussianProcessRegressor.sample_y``: ``rng.multivariate_normal(mean,
        cov, n_samples).T`` with ``rng = check_random_state(random_state)``; for a multi-output
        fit at X (n, D) one joint draw over the n P (point, output) pairs, point-major.

        Parameters
        ----------
        X : array_like, shape (n, D), or (n, D+1) for a multi-output fit
        n_samples : int, default 1
        random_state : int, RandomState instance or None, default 0

        Returns
        -------
        ndarray, shape (n, n_samples), or (n, P, n_samples) for a multi-output fit at X (n, D)
            (scikit-learn's shape for several targets).
        """
        mean, cov = self.predict(X, return_cov=True)
        rng = check_random_state(random_state)
        draws = rng.multivariate_normal(mean.ravel(), cov.reshape(mean.size, mean.size), n_samples).T
        return draws.reshape(mean.shape + (n_samples,))

    def score(self, X, y, sample_weight=None):
        """The coefficient of determination R² of ``predict(X)``.

        One output: scikit-learn's ``RegressorMixin.score``.  A multi-output fit: R² of each
        output on its observed targets, averaged over the outputs with equal weights
        (scikit-learn's ``multioutput="uniform_average"``), whether X is (n, D) with Y (n, P)
        (NaN entries left out) or long rows (n, D+1) with y (n,) (each output's rows); so both
        layouts of one data set score the same.  An output with fewer than two targets in the
        data scored is left out of the average.

        Parameters
        ----------
        X : array_like, shape (n, D), or (n, D+1) for a multi-output fit
        y : array_like, shape (n,), or (n, P) with X (n, D) for a multi-output fit
        sample_weight : array_like of shape (n,), optional
            A weight a row of X.

        Returns
        -------
        float

        Raises
        ------
        ValueError
            For a multi-output fit: y of another shape than the predictions, or no output with
            two targets.
        """
        check_is_fitted(self, "posterior_")
        if self.posterior_.output_count is None:
            return super().score(X, y, sample_weight=sample_weight)
        X = self._checked_inputs(X)
        pred = self.predict(X)
        y = check_array(y, dtype=np.float64, input_name="y", ensure_2d=False, **{_FINITE: "allow-nan"})
        if y.shape != pred.shape and not (pred.ndim == 1 and y.shape == pred.shape + (1,)):
            what = "(n, P), NaN where an entry is missing" if pred.ndim == 2 else "(n,), one target a row"
            raise ValueError(f"GPRegressor.score: y must have shape {pred.shape} for X of shape {X.shape} ({what}), "
                             f"got {y.shape}")
        weight = np.ones(X.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=float)
        check_consistent_length(X, weight)
        if pred.ndim == 2:
            columns = [(y[:, p], pred[:, p], weight) for p in range(pred.shape[1])]
        else:
            y, outputs = y.reshape(-1), X[:, -1]
            if np.isnan(y).any():
                raise ValueError("GPRegressor.score: y holds NaN, which marks a missing entry only in the isotopic "
                                 "layout Y (n, P); long rows are the observed (input, output) pairs")
            columns = [(y[outputs == p], pred[outputs == p], weight[outputs == p]) for p in np.unique(outputs)]
        scores = []
        for target, predicted, w in columns:
            seen = ~np.isnan(target)
            if seen.sum() >= 2:
                scores.append(r2_score(target[seen], predicted[seen], sample_weight=w[seen]))
        if not scores:
            raise ValueError("GPRegressor.score: no output has two observed targets in y to score")
        return float(np.mean(scores))

    def __sklearn_tags__(self):
        """scikit-learn's tags; a multi-output kernel's regressor takes targets (N, P)."""
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = self._output_count() is not None
        return tags


def choose_link(X, codes, n_classes, kernel, *, seed=0, standardize=False):
    """GPClassifier's link for K > 2 classes, chosen by how much the classes overlap: the softmax
    pilot of :func:`gpdsl.defaults.link_pilot` fitted for :data:`gpdsl.defaults.PILOT_STEPS` steps,
    its error counted on at most :data:`gpdsl.defaults.PILOT_ERROR_ROWS` training rows (the arg-max
    of its latent mean), and :func:`gpdsl.defaults.link_choice`'s rule (robust-max up to 20 %
    error, softmax above; why, in :mod:`gpdsl.defaults`).

    Parameters
    ----------
    X : ndarray, shape (N, D)
        The training inputs, as the fit sees them.
    codes : array_like, shape (N,)
        Class codes 0..K-1 (integer-valued; ``np.unique(y, return_inverse=True)[1]``).
    n_classes : int
        K >= 2.
    kernel : gpdsl.kernels.Kernel
        The classifier's kernel (its declared start: the pilot fits its own hyperparameters; the
        classifier's ``fixed``, ``inducing``, ``mean`` and ``optimize`` are not the pilot's).
    seed : int or None, default 0
        Seed of the pilot's k-means start, batches and error rows (None: 0).
    standardize : bool, default False
        As the fit (``Model.fit(standardize=...)``).

    Returns
    -------
    gpdsl.defaults.LinkChoice

    Raises
    ------
    ValueError
        ``n_classes`` not an integer >= 2, ``codes`` not N codes in 0..K-1, or a bad ``seed``.
    """
    if isinstance(n_classes, bool) or not isinstance(n_classes, (numbers.Integral, np.integer)) or n_classes < 2:
        raise ValueError(f"choose_link: n_classes must be an integer >= 2, got {n_classes!r}")
    codes = np.asarray(codes)
    if codes.ndim != 1 or codes.shape[0] != np.shape(X)[0] or not np.all(np.isin(codes, np.arange(n_classes))):
        raise ValueError(f"choose_link: codes must be the {np.shape(X)[0]} rows' class codes 0..{n_classes - 1} "
                         f"(np.unique(y, return_inverse=True)[1]), got {codes!r}")
    check_seed("choose_link", seed)
    seed = 0 if seed is None else int(seed)
    n_rows = int(codes.shape[0])
    start = time.process_time()
    pilot = Model(kernel=kernel, **defaults.link_pilot(n_rows, n_classes, seed))
    with warnings.catch_warnings():
        # The pilot is short by design: its unconverged fit's warning is not the user's fit's.
        warnings.simplefilter("ignore", ConvergenceWarning)
        post = pilot.fit(X, codes.astype(float), seed=seed, max_iter=defaults.PILOT_STEPS, standardize=standardize)
    rows = np.arange(n_rows) if n_rows <= defaults.PILOT_ERROR_ROWS else \
        np.random.default_rng(seed).permutation(n_rows)[:defaults.PILOT_ERROR_ROWS]
    mean, _ = post.predict_f(np.asarray(X)[rows])
    error = np.mean(np.argmax(np.asarray(mean), axis=1) != codes[rows].astype(int))
    return defaults.link_choice(error, time.process_time() - start)


class GPClassifier(ClassifierMixin, _GPEstimator):
    """Gaussian-process classification with a declared :class:`gpdsl.Model`, as a scikit-learn classifier.

    Any labels scikit-learn accepts (``classes_`` is their sorted set).  Two classes fit one latent
    function with a binary likelihood (``classes_[1]`` is the positive class, y = 1); K > 2 fit K
    latent functions with ``gd.likelihoods.Categorical(K)`` on the class codes 0..K-1 (in
    ``classes_`` order).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel or None, default None
        None is :func:`gpdsl.defaults.classifier_kernel`'s: ``gd.kernels.SquaredExponential()``
        (isotropic; length-scale and variance fitted), its variance held at 1 under robust-max, whose
        bound does not depend on it.  On (nearly) separable classes the evidence keeps rising with
        the kernel variance and gpdsl warns of a ridge: a prior
        (``SquaredExponential(variance=gd.priors.LogNormal(0.0, 2.0))``) pins it.  ``set_params(
        kernel__lengthscale=...)`` on a kernel left at None starts from this default for the
        likelihood given (the free-variance one where the link is left to the data's pilot).
    likelihood : gpdsl.likelihoods.Likelihood or None, default None
        None: ``gd.likelihoods.Bernoulli("logit")`` for two classes (its bias fitted: a class
        prior), ``gd.likelihoods.Categorical(K, link)`` for K > 2 with the link chosen by the data
        (:func:`choose_link`: robust-max where a short softmax pilot errs on at most
        20 % of the training rows, softmax where the classes overlap more; ``link_choice_``
        records it; near 20 % folds of one data set may choose differently: give the likelihood
        to pin the link); with an ``inference`` given, the first of softmax, robust-max and
        logistic-softmax it takes (no pilot).  A given likelihood must
        model class labels (its ``target_kind``, :func:`gpdsl.inputs.target_kind`, "binary" or
        "categorical"; checked by ``fit``) and fit the number of classes (``n_latent`` 1 for two
        classes, K otherwise).
    inducing : gpdsl.inducing.InducingSpec or None, default None
        None: for two classes dense when the method can run dense and N <= :attr:`exact_max_n`,
        else (and for a method that needs one, SVGP) ``gd.inducing.KMeans(min(default_inducing,
        N))``; for K > 2 with ``inference`` None, :func:`gpdsl.defaults.declaration`'s
        ``KMeans(min(100, N))`` (a spec given is kept).
    inference : gpdsl.inference.Inference or None, default None
        None: ``gd.inference.Laplace()`` for two classes (Rasmussen & Williams' Laplace
        approximation, scikit-learn's ``GaussianProcessClassifier``'s method; dense, or under the
        FITC prior with inducing points; ``EP()`` for a likelihood without log-density
        derivatives); for K > 2 the method of :func:`gpdsl.defaults.declaration` for the data's N,
        D and K (the table in :mod:`gpdsl.defaults` and the guide: minibatch
        ``gd.inference.SVGP(batch_size=min(256, N))``, or the full batch ``SVGP()`` for softmax on
        at most 256 rows), shown by ``model_``.  An inference given
        is used as it is.
    mean : gpdsl.means.Mean or None, default None
        The prior mean function (binary only).
    optimize, fixed, restarts, standardize, random_state
        As :class:`GPRegressor` (``standardize`` scales the inputs only).  For the K > 2 default
        ``random_state`` seeds its k-means start, its batches and the link's pilot.
    max_iter : int or None, default None
        L-BFGS-B iterations per run, or a minibatch method's steps.  None: 1,000, but 2,000
        (:data:`gpdsl.defaults.MAX_STEPS`) for the K > 2 default, room for its stopping rule
        (steps, or L-BFGS-B iterations where the default is the full batch).

    Attributes
    ----------
    classes_ : ndarray, shape (n_classes,)
    n_classes_ : int
    model_ : gpdsl.Model
        The model fitted, every default filled in (for K > 2 the declaration chosen by the data).
    link_choice_ : gpdsl.defaults.LinkChoice or None
        For K > 2 with ``likelihood=None`` and ``inference=None``: the link chosen, the pilot's
        training error, the threshold and the pilot's CPU seconds; None otherwise.
    posterior_ : gpdsl.Posterior
        Its ``predict(X)["p"]``: p(y = classes_[1]) (dim ``obs``) for two classes, the class
        probabilities (dims ``obs``, ``class``) for K > 2.
    log_marginal_likelihood_value_ : float
        ``posterior_.log_evidence`` (Laplace's approximation, the ELBO, ...).
    hyperparameters_ : dict of str to ndarray
    n_iter_ : int
    n_features_in_ : int
    feature_names_in_ : ndarray of str
    """

    #: Two classes: the dense Laplace fit is O(N^3) per Newton step, sparse above this many rows
    #: (K > 2 classes: :mod:`gpdsl.defaults`).
    exact_max_n = 1000
    #: The default k-means inducing points of the binary sparse defaults and of a method given
    #: without an inducing spec.
    default_inducing = 100

    def __init__(self, kernel=None, likelihood=None, inducing=None, inference=None, mean=None, *,
                 optimize=True, fixed=(), restarts=0, max_iter=None, standardize=False, random_state=None):
        self.kernel = kernel
        self.likelihood = likelihood
        self.inducing = inducing
        self.inference = inference
        self.mean = mean
        self.optimize = optimize
        self.fixed = fixed
        self.restarts = restarts
        self.max_iter = max_iter
        self.standardize = standardize
        self.random_state = random_state

    def _default_kernel(self, likelihood=None):
        """The kernel of ``kernel=None``: :func:`gpdsl.defaults.classifier_kernel` of ``likelihood``
        (the fit's), else of the likelihood given (before the data are seen: set_params, the pilot)."""
        return defaults.classifier_kernel(self.likelihood if likelihood is None else likelihood)

    def _likelihood_for(self, n_classes, link=defaults.LINK, pilot_error=None):
        """The likelihood of ``n_classes`` classes: the one given (checked), else the default (for
        K > 2 ``Categorical(K, link)``, robust-max's epsilon held or learnt by the link pilot's
        ``pilot_error``: :func:`gpdsl.defaults.classifier_likelihood`)."""
        likelihood = self.likelihood
        if likelihood is None:
            if n_classes == 2:
                return _likelihoods.Bernoulli("logit")
            return defaults.classifier_likelihood(n_classes, link, pilot_error)
        if not isinstance(likelihood, _likelihoods.Likelihood):
            raise TypeError(f"GPClassifier: likelihood must be None or a gpdsl likelihood of class labels "
                            f"(gd.likelihoods.Bernoulli(), gd.likelihoods.Categorical(K)), got {likelihood!r}")
        # Asked of the likelihood (its target_kind, or what its predictive returns), so that a
        # user's own likelihood of labels is taken as Bernoulli and Categorical are.
        kind = target_kind(likelihood)
        if kind not in LABEL_KINDS:
            raise ValueError(f"GPClassifier: likelihood must model class labels (target kind 'binary', e.g. "
                             f"gd.likelihoods.Bernoulli(), or 'categorical', e.g. gd.likelihoods.Categorical(K)); "
                             f"got {likelihood!r}, whose targets are {kind!r} (use GPRegressor or gd.Model "
                             f"for those)")
        latent = int(getattr(likelihood, "n_latent", 1))
        if latent == 1 and n_classes > 2:
            raise ValueError(f"GPClassifier: the likelihood {likelihood!r} is binary, and y holds {n_classes} "
                             f"classes; give likelihood=None or gd.likelihoods.Categorical({n_classes})")
        if latent > 1 and latent != n_classes:
            raise ValueError(f"GPClassifier: the likelihood {likelihood!r} has {latent} classes, and y holds "
                             f"{n_classes}")
        return likelihood

    def _build_model(self, n, likelihood):
        """The Model for n training rows, the parts left at None filled with the defaults (for K > 2
        classes left open: ``Model.fit`` fills them by :func:`gpdsl.defaults.declaration`; the kernel
        :func:`gpdsl.defaults.classifier_kernel`'s)."""
        kernel = self.kernel if self.kernel is not None else self._default_kernel(likelihood)
        inference = self.inference
        if inference is None and defaults.chooses_inference(likelihood):
            # Left open: Model.fit chooses the method (gpdsl.defaults.declaration) and its step cap.
            return Model(kernel=kernel, likelihood=likelihood, inducing=self.inducing, mean=self.mean)
        if inference is None:
            inference = _inference.Laplace()
            try:
                inference.check_likelihood(likelihood)
            except (TypeError, ValueError):
                inference = _inference.EP()
            inducing = self.inducing
            if inducing is None and (inference.inducing_rule == "required" or n > self.exact_max_n):
                inducing = self._sparse_default(n)
        else:
            inducing = self._inducing_for(inference, n)
        return Model(kernel=kernel, likelihood=likelihood, inducing=inducing, inference=inference, mean=self.mean)

    def fit(self, X, y):
        """Fit the model to X (N, D) and labels y (N,).

        Parameters
        ----------
        X : array_like, shape (N, D)
        y : array_like, shape (N,)
            Any labels (at least two distinct values).

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Fewer than two classes, continuous targets, a likelihood that does not model class
            labels (``target_kind`` other than "binary" or "categorical": ``Gaussian()``,
            ``Poisson()``, ...) or one that does not fit the number of classes.
        TypeError
            A likelihood that is not a gpdsl likelihood.
        """
        X, y = _validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        if classes.shape[0] < 2:
            raise ValueError(f"GPClassifier needs samples of at least 2 classes in the data, but the data "
                             f"contain only one class: {classes[0]!r}")
        n_classes = int(classes.shape[0])
        seed = _seed(self.random_state)            # once: a RandomState is drawn from once a fit
        self.link_choice_ = None
        link = defaults.LINK
        if self.likelihood is None and n_classes > 2:
            if self.inference is None:
                kernel = self.kernel if self.kernel is not None else self._default_kernel()
                self.link_choice_ = choose_link(X, codes, n_classes, kernel, seed=0 if seed is None else seed,
                                                standardize=self.standardize)
                link = self.link_choice_.link
            else:
                link = self._link_for_inference(n_classes)
        likelihood = self._likelihood_for(n_classes, link,
                                          None if self.link_choice_ is None else self.link_choice_.pilot_error)
        targets = codes.astype(float)
        order = None
        label_classes = getattr(likelihood, "classes", None)
        if int(getattr(likelihood, "n_latent", 1)) > 1 and label_classes is not None:
            # A Categorical declared with its labels: it takes them, in its own class order.
            listed = list(label_classes)
            missing = [c for c in classes.tolist() if c not in listed]
            if missing:
                raise ValueError(f"GPClassifier: y holds labels {missing[:6]} that are not among the "
                                 f"likelihood's classes {listed}")
            order = np.array([listed.index(c) for c in classes.tolist()])
            targets = y
        self.classes_ = classes
        self.n_classes_ = n_classes
        self._column_order = order
        self._fit_posterior(self._build_model(X.shape[0], likelihood), X, targets, seed)
        return self

    def _link_for_inference(self, n_classes):
        """The K-class link of a classifier given an ``inference`` and no likelihood: the first of
        softmax, robust-max and logistic-softmax that the method takes (no pilot: the method is the
        user's choice, and it may take one link only, e.g. ``Laplace`` softmax, ``PolyaGamma``
        logistic-softmax)."""
        refusals = []
        for link in ("softmax", "robustmax", "logistic_softmax"):
            try:
                self.inference.check_likelihood(defaults.classifier_likelihood(n_classes, link))
            except (TypeError, ValueError) as err:
                refusals.append(f"{link}: {err}")
                continue
            return link
        raise ValueError(f"GPClassifier: inference={self.inference!r} takes no Categorical({n_classes}) link "
                         f"({'; '.join(refusals)}); give a likelihood it takes")

    def predict_proba(self, X):
        """Class probabilities at X, columns in ``classes_`` order.

        Parameters
        ----------
        X : array_like, shape (n, D)

        Returns
        -------
        ndarray, shape (n, n_classes)
        """
        X = self._checked_inputs(X)
        p = np.asarray(self.posterior_.predict(X)["p"], dtype=float)
        if p.ndim == 1:
            p = np.clip(p, 0.0, 1.0)
            proba = np.column_stack([1.0 - p, p])
        else:
            proba = np.clip(p if self._column_order is None else p[:, self._column_order], 0.0, None)
        return proba / proba.sum(axis=1, keepdims=True)

    def predict(self, X):
        """The most probable class at each row of X.

        Parameters
        ----------
        X : array_like, shape (n, D)

        Returns
        -------
        ndarray, shape (n,)
            Labels from ``classes_``.
        """
        proba = self.predict_proba(X)           # first: it checks that the estimator is fitted
        return self.classes_[np.argmax(proba, axis=1)]
