"""The fitted posterior: predictions, xarray export and netCDF round trip.

A save replaces the file in one step (an interrupted save leaves the old file or the new one),
and a load checks the format version, a checksum of the content and the layout the model
implies before it builds anything (:class:`PosteriorFileError` otherwise).

xarray (and pandas behind it) is imported by the functions that return or read datasets, not
with the module: ``import gpdsl`` and a fit do not need it, and it took a third of a second.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import secrets
import stat
from typing import NamedTuple

import numpy as np

from . import threads
from ._version import __version__
from .checks import as_float_array, is_integer, is_number
from .chunks import default_chunk_size, is_chunked, lazy_rows, map_rows
from .diagnostics import FitDiagnostics
from .methods.common import PredictiveState
from .model import validate_inputs
from .parameters import declared_value
from .scaling import Standardization


class Posterior:
    """A fitted model, as ``Model.fit``, :func:`load` and :func:`from_xarray` return it.

    Every argument is kept as the attribute of the same name.

    Parameters
    ----------
    model : gpdsl.Model
        The fitted model's declaration.
    values : dict of str to array_like
        The fitted natural hyperparameters by name (``"kernel.lengthscale"``, ...).
    state : gpdsl.methods.common.PredictiveState
        What prediction needs: Z (M, D), whitened weights (M,) and correction (M, M), q(u), the
        Cholesky factor.
    log_evidence : float
        The exact LML (Exact), the collapsed bound (VFE, Titsias (2009) eq. 16), FITC's
        approximate LML, EP's approximation (EP, and QP, whose hyperparameters maximise EP's
        evidence formula at EP's sites, or at QP's own with ``QP(hyperparameters="qp")``), the
        collapsed Pólya-Gamma bound (PolyaGamma, Passerello (2021) eq. 4.7), the Laplace
        approximation or the ELBO (SVGP, VGP); in the data's units.
    log_prior : float, default 0.0
        The log prior of the hyperparameters that carry one, at ``values``.
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
    standardization : gpdsl.scaling.Standardization, optional
        The map from the data's units to those of the fit (``fit(standardize=True)``): Z, the
        hyperparameters and q(u) are in the fit's units, every prediction and the log evidence
        in the data's.
    subsample : dict, optional
        For ``fit(subsample=n)``: ``rows`` (n) and ``objective`` (the subsample fit's log
        evidence plus log prior, in the fit's units).

    Notes
    -----
    ``converged``, ``n_iterations``, ``jitter``, ``ridge``, ``reinit_stop``, ``constant_model``
    and ``total_sweeps`` are read-only views of ``diagnostics``.
    """

    def __init__(self, model, values, state, log_evidence, log_prior=0.0, diagnostics=None, priors=None,
                 fixed=(), sites=None, selection=None, reinit_history=None, standardization=None,
                 subsample=None):
        self.model = model
        self.values = {k: np.asarray(v, dtype=float) for k, v in values.items()}
        self.state = state
        self.log_evidence = float(log_evidence)
        self.log_prior = float(log_prior)
        self.diagnostics = FitDiagnostics("not_optimised") if diagnostics is None else diagnostics
        self.priors = dict(priors or {})
        self.fixed = list(fixed)
        self.sites = sites                  # EP/QP SiteState, PolyaGammaState, or None
        self.selection = selection
        self.reinit_history = reinit_history
        self.standardization = standardization
        self.subsample = subsample

    def __repr__(self):
        return (f"Posterior({type(self.model.inference).__name__}, log_evidence={self.log_evidence:.6g}, "
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
    def n_features(self):
        """int: the number of input features D the model was fitted on."""
        return self.state.Z.shape[1]

    @property
    def inducing_inputs(self):
        """Z (M, D) in the data's units (``state.Z`` is in the fit's)."""
        scaling = self.standardization
        return self.state.Z if scaling is None else scaling.x_mean + scaling.x_scale * self.state.Z

    def _fit_inputs(self, X_new, lazy=False):
        """X_new (n, D) checked and in the fit's units; a Dask X_new stays one with ``lazy``."""
        X_new = validate_inputs(X_new, "X_new", self.n_features, lazy=lazy)
        return X_new if self.standardization is None else self.standardization.inputs(X_new)

    # -- prediction ------------------------------------------------------------------------------
    @threads.managed
    def predict_f(self, X_new):
        """Latent predictive mean and variance at X_new (n, D) -> two (n,) arrays.

        For a Dask X_new (or an xarray object backed by one) they are lazily evaluated Dask
        arrays, one task per row block of X_new.

        With b_* = L^-1 K_z* (L the state's Cholesky factor): mean b_*^T weights and variance
        k_** - b_*^T correction b_* (:class:`gpdsl.methods.common.PredictiveState`); for VFE this
        is Titsias (2009) eq. 17's phi(f_m) carried to f_*.

        Parameters
        ----------
        X_new : array_like, shape (n, D)
            New inputs in the data's units.

        Returns
        -------
        mean : ndarray or dask.array.Array, shape (n,)
            Latent predictive mean, in the data's units.
        var : ndarray or dask.array.Array, shape (n,)
            Latent predictive variance (clipped at 0), in the data's units.

        Raises
        ------
        TypeError, ValueError
            Invalid inputs or a number of features other than the fit's.
        """
        return self._latent(self._fit_inputs(X_new, lazy=True))

    def _latent(self, X_new):
        """predict_f at checked inputs X_new (n, D) in the fit's units (NumPy, or Dask: lazy)."""
        if is_chunked((X_new,)):
            out = lazy_rows(self._latent_block, (X_new,), ("mean", "var"))
            return self._data_units(out["mean"], out["var"])

        def chunk(X_block):
            out = self._latent_block(X_block)
            return (), (out["mean"], out["var"])

        n, m = X_new.shape[0], self.state.Z.shape[0]
        _, (mean, var) = map_rows(chunk, (X_new,), default_chunk_size(n, m), width=m)
        return self._data_units(mean, var)

    def _latent_block(self, X_block):
        """{"mean", "var"}: the latent predictive mean and variance (n,) in the fit's units at a
        block X_block (n, D) of inputs in the fit's units."""
        kernel, state = self.model.kernel, self.state
        b = state.basis(kernel.gram(self.values, "kernel", state.Z, X_block))
        var = kernel.diag(self.values, "kernel", X_block) - np.einsum("ij,ij->j", b, state.correction @ b)
        return {"mean": b.T @ state.weights, "var": np.maximum(var, 0.0)}

    def _data_units(self, mean, var):
        """A latent mean and (co)variance from the fit's units to the data's."""
        scaling = self.standardization
        return (mean, var) if scaling is None else (scaling.mean(mean), scaling.variance(var))

    @threads.managed
    def predict_f_full_cov(self, X_new):
        """Latent predictive mean and full covariance at X_new (joint, for sampling and KL).

        Parameters
        ----------
        X_new : array_like, shape (n, D)
            New inputs in the data's units.

        Returns
        -------
        mean : ndarray, shape (n,)
            Latent predictive mean, in the data's units.
        cov : ndarray, shape (n, n)
            Symmetrised latent predictive covariance, in the data's units.

        Raises
        ------
        TypeError, ValueError
            Invalid inputs or a number of features other than the fit's.
        """
        X_new = self._fit_inputs(X_new)
        kernel, state = self.model.kernel, self.state
        with threads.bulk(float(X_new.shape[0]) ** 2 * state.Z.shape[0]):
            b = state.basis(kernel.gram(self.values, "kernel", state.Z, X_new))
            cov = kernel.gram(self.values, "kernel", X_new, X_new) - b.T @ state.correction @ b
        return self._data_units(b.T @ state.weights, 0.5 * (cov + cov.T))

    def noise_variance(self, X_new, noise_variance=None):
        """Observation-noise variances at X_new (the data's units), or None when they cannot be known.

        Parameters
        ----------
        X_new : ndarray, shape (n, D)
            Checked new inputs in the data's units.
        noise_variance : float or array_like of shape (n,), optional
            Variances to use as they are (checked and broadcast to (n,)).

        Returns
        -------
        ndarray, shape (n,), or None
            ``noise_variance`` if given; None for ``HeteroscedasticGaussian`` with known
            training variances (they say nothing about new inputs); else the likelihood's noise
            at X_new.

        Raises
        ------
        TypeError, ValueError
            A ``noise_variance`` that is not numeric, of another shape, negative or not finite.
        """
        if noise_variance is not None:
            nv = as_float_array("predict", "noise_variance", noise_variance, allow_bool=False,
                                expected="a number or an (n_new,) array of variances")
            if nv.shape not in ((), (X_new.shape[0],)):
                raise ValueError(f"predict: noise_variance must be a number or have shape ({X_new.shape[0]},) "
                                 f"(one per row of X_new), got shape {nv.shape}")
            if not np.all(np.isfinite(nv)) or np.any(nv < 0):
                raise ValueError("predict: noise_variance must be finite and non-negative")
            return np.broadcast_to(nv, (X_new.shape[0],))
        if getattr(self.model.likelihood, "known", False):
            return None   # known training variances say nothing about new inputs
        noise = self.model.likelihood.noise(self.values, "likelihood", self._fit_inputs(X_new))
        return noise if self.standardization is None else self.standardization.variance(noise)

    @threads.managed
    def predict(self, X_new, noise_variance=None):
        """xarray.Dataset over dim ``obs``: f_mean, f_var and the observation predictive --
        y_mean, y_var for Gaussian and Poisson likelihoods, p = p(y* = +1) for Bernoulli.

        For ``HeteroscedasticGaussian(variance=...)`` (known training variances) y_var needs
        ``noise_variance=`` at the new inputs and is left out otherwise.

        Parameters
        ----------
        X_new : array_like or Dask array, shape (n, D)
            New inputs in the data's units; a Dask X_new gives lazily evaluated variables.
        noise_variance : float or array_like of shape (n,), optional
            Observation-noise variances at X_new (Gaussian likelihoods only), used instead of
            the likelihood's.

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
        import xarray as xr

        X_new = validate_inputs(X_new, "X_new", self.n_features, lazy=True)
        if noise_variance is not None and not self.gaussian:
            raise ValueError(f"predict: noise_variance applies to Gaussian likelihoods only; "
                             f"{type(self.model.likelihood).__name__} has no observation noise to add")
        if is_chunked((X_new,)):
            # Checked here, on the whole X_new; each block then takes its rows of the variances.
            given = self.noise_variance(X_new, noise_variance) if noise_variance is not None else None
            rows = (X_new,) if given is None else (X_new, np.ascontiguousarray(given))
            data = lazy_rows(self._predict_block, rows, self._predict_names(given is not None))
        else:
            data = self._predict_block(X_new, noise_variance)
        return xr.Dataset({name: ("obs", value) for name, value in data.items()},
                          coords={"obs": np.arange(X_new.shape[0])},
                          attrs={"inference": type(self.model.inference).__name__})

    def _predict_block(self, X_block, noise_variance=None):
        """The variables of :meth:`predict` (a dict of (n,) arrays) at a block X_block (n, D) of
        checked inputs in the data's units, with ``noise_variance`` as :meth:`predict` takes it.
        (Not a managed entry point: it also runs inside Dask's tasks, where each thread would
        set and restore the process's BLAS threads under the others.)"""
        mean, var = self._latent(X_block if self.standardization is None else self.standardization.inputs(X_block))
        data = {"f_mean": mean, "f_var": var}
        if self.gaussian:
            data["y_mean"] = mean
            noise = self.noise_variance(X_block, noise_variance)
            if noise is not None:
                data["y_var"] = var + noise
        else:
            data.update(self.model.likelihood.predictive(self.values, "likelihood", mean, var))
        return data

    def _predict_names(self, noise_given):
        """The names of :meth:`predict`'s variables, known without the data (for lazy predictions)."""
        if self.gaussian:
            known = noise_given or not getattr(self.model.likelihood, "known", False)
            return ("f_mean", "f_var", "y_mean") + (("y_var",) if known else ())
        probe = self.model.likelihood.predictive(self.values, "likelihood", np.zeros(1), np.ones(1))
        return ("f_mean", "f_var") + tuple(probe)

    @property
    def gaussian(self):
        """True for the Gaussian-noise likelihoods (their predictive adds noise variances)."""
        return self.model.likelihood.observation_noise

    @threads.managed
    def log_predictive(self, X_new, y_new):
        """Pointwise log predictive probability of targets y_new at X_new (n,).

        Gaussian: log N(y | f_mean, f_var + noise); Bernoulli: log p(y | x) for y in {0, 1},
        {-1, +1} or bool; Poisson: the negative-binomial predictive of the QP paper (eq. 122).

        Parameters
        ----------
        X_new : array_like, shape (n, D)
            New inputs in the data's units.
        y_new : array_like, shape (n,)
            Targets at X_new, coded as for ``fit``.

        Returns
        -------
        ndarray, shape (n,)
            log p(y_new_i | X_new_i, training data), in the data's units.

        Raises
        ------
        TypeError, ValueError
            Invalid inputs or targets, or an unknown noise variance at X_new (known-variance
            heteroscedastic likelihood).
        """
        from .model import validate_targets
        X_new = validate_inputs(X_new, "X_new", self.n_features)
        y_new = self.model.likelihood.prepare_targets(validate_targets(y_new, X_new.shape[0], "y_new"))
        mean, var = self.predict_f(X_new)
        likelihood = self.model.likelihood
        if self.gaussian:
            noise = self.noise_variance(X_new)
            if noise is None:
                raise ValueError("log_predictive: the noise variance at X_new is unknown for known-variance "
                                 "heteroscedastic likelihoods")
            total = var + noise
            return -0.5 * (np.log(2.0 * np.pi * total) + (y_new - mean) ** 2 / total)
        return likelihood.log_predictive(self.values, "likelihood", mean, var, y_new)

    @threads.managed
    def to_inference_data(self, X_new, y_new, draws=1000, seed=0, chains=4):
        """arviz.InferenceData at X_new, y_new: ``chains`` x ``draws`` joint draws of f.

        See :mod:`gpdsl.arviz_io`.

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
            As :func:`gpdsl.arviz_io.to_inference_data`.
        """
        from .arviz_io import to_inference_data
        return to_inference_data(self, X_new, y_new, draws=draws, seed=seed, chains=chains)

    # -- xarray / netCDF ---------------------------------------------------------------------------
    def to_xarray(self):
        """The posterior as an xarray.Dataset: Z, q(u), the predictive cache, every
        hyperparameter, the method's local state and the greedy selection, with attrs.

        The attrs include ``format_version`` (:data:`FORMAT_VERSION`) and ``checksum``, the
        SHA-256 of everything else in the dataset (see :func:`from_xarray`).

        Returns
        -------
        xarray.Dataset
        """
        import xarray as xr

        state = self.state
        m, d = state.Z.shape
        data = {
            "Z": (("inducing", "feature"), state.Z),
            "q_mean": ("inducing", state.q_mean),
            "q_cov": (("inducing", "inducing_bis"), state.q_cov),
        }
        # Kept so that a loaded posterior predicts with the very same arithmetic.  The whitened
        # state has its own names, so that a reader that knows only the natural-basis ones of
        # earlier versions fails on it rather than predicting with it.
        data["predictive_whitened_weights"] = ("inducing", state.weights)
        data["predictive_whitened_correction"] = (("inducing", "inducing_bis"), state.correction)
        data["predictive_chol"] = (("inducing", "inducing_bis"), state.chol)
        for name, value in self.values.items():
            data[name] = (_hyper_dims(name, value, d), value)
        local_attrs = {}
        if self.sites is not None:
            local = self.model.inference.local_state
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
            data["standardization_x_mean"] = ("feature", scaling.x_mean)
            data["standardization_x_scale"] = ("feature", scaling.x_scale)
            scaling_attrs = {"standardization_y_mean": scaling.y_mean, "standardization_y_scale": scaling.y_scale}
        from .spec import model_to_dict
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
            "model_spec": json.dumps(model_to_dict(self.model)),
            "M": m,
            **local_attrs,
            **selection_attrs,
            **scaling_attrs,
        }
        coords = {"inducing": np.arange(m), "inducing_bis": np.arange(m), "feature": np.arange(d)}
        ds = xr.Dataset(data, coords=coords, attrs=attrs)
        ds.attrs["checksum"] = _checksum(ds)
        return ds

    def save(self, path):
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
            The file to write, ending in ``.nc``.  A symbolic link is followed: its target is
            replaced.  An existing file keeps its permission bits.

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
        path = _check_path("save", path)
        if os.path.splitext(path)[1].lower() != ".nc":
            # The file is netCDF whatever its name: "p.pkl" would promise a pickle it is not.
            raise ValueError(f"save: path must end in .nc (the posterior is written as netCDF), got {path!r}")
        target = os.path.realpath(path)
        # The whole save, serialisation included, runs with SIGINT held back: a KeyboardInterrupt
        # raised inside xarray's writer can land in a destructor (__del__), where Python prints
        # and drops it, and one raised between creating the temporary file and its removal
        # leaves the file behind.  A save takes well under a second per 10 MB, so Ctrl-C waits
        # at most that long.
        with _sigint_deferred():
            _write_replacing(target, _netcdf_bytes(self))


def _netcdf_bytes(posterior):
    """The netCDF-3 bytes of ``posterior.to_xarray()`` (scipy backend), built in memory."""
    return posterior.to_xarray().to_netcdf(engine="scipy")


def _write_replacing(target, content):
    """Write ``content`` to ``target`` through a temporary file in its directory, fsynced and
    renamed over it (``os.replace``); the temporary file is removed on any failure."""
    directory, name = os.path.split(target)
    temporary = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
    # O_EXCL: never write into a file that someone else created under this name; mode 0o666
    # (less the umask) gives the permissions of any new file, where mkstemp's are 0o600.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        if os.path.exists(target):
            os.chmod(temporary, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(temporary, target)
    except BaseException:
        # Remove the partial file (already gone if the rename ran).
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    # The rename changes the directory: sync it too, or a crash can undo it (POSIX only:
    # Windows cannot open a directory as a file).
    if hasattr(os, "O_DIRECTORY"):
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


@contextlib.contextmanager
def _sigint_deferred():
    """Hold back SIGINT for the duration of the block, then deliver it to the previous handler.

    Inside the block SIGINT only records that it came (a handler that sets a flag cannot fail,
    wherever the interpreter runs it, destructors included).  On leaving -- normally or by an
    exception -- the previous handler is put back first and then, if SIGINT came, called once
    with it: Python's default handler raises KeyboardInterrupt there, a caller's own handler
    runs as it would have, ``SIG_DFL`` is re-raised as the signal itself.

    Python runs signal handlers in the main thread only and lets only the main thread install
    them, so elsewhere (and where SIGINT is ignored or its handler was not installed from
    Python) the block runs unchanged.
    """
    import signal
    import threading

    if not hasattr(signal, "SIGINT") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or previous is signal.SIG_IGN:
        yield
        return
    received = []

    def hold(signum, frame):
        received.append(frame)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            if previous is signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)
            else:
                previous(signal.SIGINT, received[0])


# Version of the layout that to_xarray writes; raise it when the layout changes.  Version 2 added
# the "diagnostics" attribute; version-1 files still load (their record says "unrecorded").
FORMAT_VERSION = 2


class PosteriorFileError(ValueError):
    """A posterior file or dataset that :func:`load` or :func:`from_xarray` cannot trust: not a
    readable netCDF-3 file, of another format version, damaged or edited (its checksum does
    not match), or not laid out as ``to_xarray`` writes its model.  The message names the file
    (or ``dataset``) and the variable or attribute at fault."""


def _error(source, item, problem):
    """The PosteriorFileError for ``item`` (a variable or attribute) of ``source``."""
    return PosteriorFileError(f"{source}: {item}: {problem}")


def _check_path(owner, path):
    """``path`` as a str, or TypeError/ValueError naming ``owner``'s argument."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"{owner}: path must be a str or os.PathLike, got {path!r}")
    if not path:
        raise ValueError(f"{owner}: path must not be empty")
    return path


def _hyper_dims(name, value, n_features):
    if value.ndim == 0:
        return ()
    if name.endswith("lengthscale") and value.shape == (n_features,):
        return ("feature",)
    return (name.rsplit(".", 1)[-1] + "_index",)


def _checksum(ds):
    """SHA-256 (hex) of a dataset's content: every variable, coordinates included, by name,
    dims, kind, shape and values, and every attribute but ``checksum``, in name order.

    Integers are hashed as int64 and floats as float64, little-endian: netCDF-3 stores an
    int64 as int32, so the writer's and the reader's dtypes differ while the content does not.
    """
    digest = hashlib.sha256()
    items = [(name, var.dims, var.values) for name, var in sorted(ds.variables.items())]
    items += [(name, None, value) for name, value in sorted(ds.attrs.items()) if name != "checksum"]
    for name, dims, value in items:
        if isinstance(value, str):
            kind, shape, payload = "str", (), value.encode("utf-8")
        else:
            array = np.asarray(value)
            if array.dtype.kind in "biu":
                kind, payload = "int", np.ascontiguousarray(array, dtype="<i8")
            elif array.dtype.kind == "f":
                kind, payload = "float", np.ascontiguousarray(array, dtype="<f8")
            else:   # never written by to_xarray; hashed so that a file holding one fails the check
                kind, payload = array.dtype.str, repr(array.tolist()).encode("utf-8")
            shape = array.shape
        # Each item is framed by a header that gives its length, so no two contents hash alike.
        header = json.dumps([name, dims, kind, list(shape), memoryview(payload).nbytes])
        digest.update(header.encode("utf-8") + b"\n")
        digest.update(payload)
    return "sha256:" + digest.hexdigest()


def from_xarray(ds):
    """Rebuild a working :class:`Posterior` from :meth:`Posterior.to_xarray` output.

    The dataset is checked before anything is built from it: its ``format_version`` must
    be :data:`FORMAT_VERSION` (or 1, without the fit record) and its ``checksum`` must match the content (so a dataset
    edited after ``to_xarray`` is refused); ``model_spec`` must describe a model that the
    ``inference``, ``likelihood`` and ``kernel`` attributes describe too; the variables and
    attributes must be exactly those that ``to_xarray`` writes for that model's method, the
    variables with their dims and integer or finite float64 values, the attributes of their
    type, with one variable per hyperparameter of the model's parameter table, of its shape
    (and positive where the model declares it so).

    Parameters
    ----------
    ds : xarray.Dataset
        As :meth:`Posterior.to_xarray` wrote it.

    Returns
    -------
    Posterior

    Raises
    ------
    TypeError
        ``ds`` is not an xarray.Dataset.
    PosteriorFileError
        A check failed; the message names the variable or attribute.
    """
    import xarray as xr

    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"from_xarray: ds must be an xarray.Dataset, got {type(ds).__name__}")
    return _posterior_from(ds, "dataset")


def load(path):
    """Load a posterior written by :meth:`Posterior.save`, checked as :func:`from_xarray` checks.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.nc`` file written by :meth:`Posterior.save`.

    Returns
    -------
    Posterior

    Raises
    ------
    FileNotFoundError
        There is no file at ``path``.
    PosteriorFileError
        The file is not a readable netCDF-3 file or fails a check of :func:`from_xarray`
        (files written before format version 1, without the checksum, included); the
        message names the file and the variable or attribute at fault.
    """
    import xarray as xr

    path = _check_path("load", path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"load: posterior file not found: {path}")
    with open(path, "rb") as fh:
        content = fh.read()
    # Parsed from memory, so that no memory map of the file outlives this call.  The reader's
    # failures on a damaged file are not documented (from TypeError to IndexError): any of
    # them means the file cannot be read.
    try:
        with xr.open_dataset(io.BytesIO(content), engine="scipy") as ds:
            ds = ds.load()
    except Exception as err:
        raise PosteriorFileError(f"{path}: not a readable netCDF-3 file "
                                 f"({type(err).__name__}: {err})") from err
    return _posterior_from(ds, path)


def _posterior_from(ds, source):
    """The :class:`Posterior` in ``ds`` (read from ``source``), after :func:`_validated`."""
    from .inducing import Selection

    model, local, names = _validated(ds, source)
    state = PredictiveState(Z=ds["Z"].values, weights=ds["predictive_whitened_weights"].values,
                            correction=ds["predictive_whitened_correction"].values,
                            q_mean=ds["q_mean"].values, q_cov=ds["q_cov"].values,
                            chol=ds["predictive_chol"].values)
    sites, total_sweeps = local.load(ds) if local is not None else (None, 0)
    selection = None
    if "selected_index" in ds:
        selection = Selection(Z=state.Z, indices=ds["selected_index"].values,
                              criterion=ds["selection_criterion"].values, stopped=ds.attrs["selection_stopped"])
    history = json.loads(ds.attrs["reinit_history"]) if "reinit_history" in ds.attrs else None
    standardization = _standardization(ds, source)
    return Posterior(model=model, values={name: ds[name].values for name in names}, state=state,
                     log_evidence=ds.attrs["log_evidence"], log_prior=ds.attrs["log_prior"],
                     diagnostics=_diagnostics(ds, source, total_sweeps), priors=json.loads(ds.attrs["priors"]),
                     fixed=json.loads(ds.attrs["fixed"]), sites=sites, selection=selection, reinit_history=history,
                     standardization=standardization,
                     subsample=({"rows": int(ds.attrs["subsample_rows"]),
                                 "objective": float(ds.attrs["subsample_objective"])}
                                if "subsample_rows" in ds.attrs else None))


def _diagnostics(ds, source, total_sweeps):
    """The FitDiagnostics in ``ds``: its ``diagnostics`` attribute, which must agree with the flat
    attributes that repeat its fields for xarray readers; a file written before the record existed
    (no such attribute) gets one with ``stop_reason="unrecorded"`` and the flags it holds."""
    attrs = ds.attrs
    flat = {"converged": bool(attrs["converged"]), "n_iterations": int(attrs["n_iterations"]),
            "jitter": float(attrs["jitter"]), "ridge": attrs["ridge"] or None,
            "constant_model": bool(attrs["constant_model"]), "reinit_stop": attrs.get("reinit_stop"),
            "subsample": int(attrs["subsample_rows"]) if "subsample_rows" in attrs else None}
    if "diagnostics" not in attrs:
        return FitDiagnostics("unrecorded", recorded_converged=flat.pop("converged"), local_sweeps=int(total_sweeps),
                              **flat)
    try:
        diagnostics = FitDiagnostics.from_json(attrs["diagnostics"])
    except (TypeError, ValueError, KeyError) as err:
        raise _error(source, "attribute 'diagnostics'", f"not a fit record: {err}") from err
    for name, value in flat.items():
        if getattr(diagnostics, name) != value:
            raise _error(source, "attribute 'diagnostics'",
                         f"its {name} is {getattr(diagnostics, name)!r} but the attribute {name!r} is {value!r}")
    return diagnostics


def _standardization(ds, source):
    """The Standardization in ``ds`` (validated by :func:`_validated`), or None."""
    if "standardization_x_mean" not in ds:
        return None
    try:
        return Standardization(ds["standardization_x_mean"].values, ds["standardization_x_scale"].values,
                               ds.attrs["standardization_y_mean"], ds.attrs["standardization_y_scale"])
    except ValueError as err:
        raise _error(source, "variables and attributes 'standardization_*'", str(err)) from err


def _validated(ds, source):
    """Check ``ds`` as :func:`from_xarray` describes; return ``(model, its LocalStateFormat or
    None, hyperparameter names)`` or raise :class:`PosteriorFileError`."""
    from .spec import model_from_dict

    attrs = ds.attrs
    version = attrs.get("format_version")
    if version is None:
        raise _error(source, "attribute 'format_version'",
                     f"missing: not a gpdsl posterior of format version {FORMAT_VERSION} (one written "
                     "by an older gpdsl lacks it and its checksum: load it with that version and save it again)")
    if not is_integer(version) or version not in (1, FORMAT_VERSION):
        raise _error(source, "attribute 'format_version'",
                     f"expected {FORMAT_VERSION} (files of version 1 are read too), got {version!r}")
    checksum = attrs.get("checksum")
    if not isinstance(checksum, str) or checksum != _checksum(ds):
        raise _error(source, "attribute 'checksum'", "missing or not the checksum of the content: the file "
                     "was damaged or edited after it was written")

    spec = _attribute(ds, source, "model_spec", "json-object")
    try:
        model = model_from_dict(spec)
    except (TypeError, ValueError, KeyError) as err:
        raise _error(source, "attribute 'model_spec'", f"does not describe a model: {err}") from err
    local = model.inference.local_state
    layout = {**_LAYOUT, **({local.name: _Part(local.variables, local.attributes)} if local is not None else {})}
    # Version 2 added the fit's record ("diagnostics"); a version-1 file has none.
    parts = (["common", "whitened"] + (["diagnostics"] if version >= 2 else [])
             + ([local.name] if local is not None else []))
    # An optional part is expected whole as soon as one of its items is there.
    parts += [part for part in _OPTIONAL_PARTS
              if any(name in ds.variables for name in _LAYOUT[part].variables)
              or any(name in attrs for name in _LAYOUT[part].attributes)]

    expected_attrs = {name: kind for part in parts for name, kind in layout[part].attributes.items()}
    for name, kind in expected_attrs.items():
        _attribute(ds, source, name, kind)
    extra = sorted(set(attrs) - set(expected_attrs))
    if extra:
        raise _error(source, f"attribute {extra[0]!r}", f"unexpected in a {attrs['inference']} posterior")
    # The descriptions must be those of the model in model_spec: a spec edited to another
    # kernel or method would otherwise predict with it.
    described = {"inference": type(model.inference).__name__, "likelihood": model.likelihood.describe(),
                 "kernel": model.kernel.describe(), "local_state": local.name if local is not None else None}
    for name, expected in described.items():
        if attrs.get(name) != expected:
            raise _error(source, f"attribute {name!r}",
                         f"expected {expected!r} (from model_spec), got {attrs.get(name)!r}")
    for name, low, high in (("jitter", 0.0, np.inf), ("ep_damping", 0.0, 1.0)):
        if name in attrs and not low <= attrs[name] < high:
            raise _error(source, f"attribute {name!r}",
                         f"expected a number in [{low}, {high}), got {attrs[name]!r}")

    expected_vars = {name: rule for part in parts for name, rule in layout[part].variables.items()}
    for name, (dims, kind) in expected_vars.items():
        _variable(ds, source, name, dims, kind)
    m, d = ds.sizes["inducing"], ds.sizes["feature"]
    if ds.sizes["inducing_bis"] != m:
        raise _error(source, "dimension 'inducing_bis'", f"has size {ds.sizes['inducing_bis']}, expected {m} "
                     "(the size of 'inducing')")
    if attrs["M"] != m:
        raise _error(source, "attribute 'M'", f"expected {m} (the size of 'inducing'), got {attrs['M']!r}")

    entries = _hyperparameter_entries(model, ds["Z"].values, source)
    for e in entries:
        values = _variable(ds, source, e.name, _hyper_dims(e.name, e.value, d), "float")
        if values.shape != e.value.shape:
            raise _error(source, f"variable {e.name!r}", f"has shape {values.shape}, expected {e.value.shape}")
        if e.positive and not np.all(values > 0):
            raise _error(source, f"variable {e.name!r}", f"expected positive values, got {values!r}")
    names = [e.name for e in entries]
    extra = sorted(set(ds.variables) - set(expected_vars) - set(names))
    if extra:
        raise _error(source, f"variable {extra[0]!r}",
                     f"unexpected: the hyperparameters of this model are {names}")

    # The attributes that name hyperparameters name this model's (Z is fixed as "inducing.Z").
    for name, value, allowed in (("ridge", [attrs["ridge"]] if attrs["ridge"] else [], names),
                                 ("fixed", json.loads(attrs["fixed"]), names + ["inducing.Z"]),
                                 ("priors", json.loads(attrs["priors"]), names)):
        unknown = [key for key in value if key not in allowed]
        if unknown:
            raise _error(source, f"attribute {name!r}",
                         f"names {unknown!r}, which are not hyperparameters of this model")
    return model, local, names


def _hyperparameter_entries(model, Z, source):
    """The parameter-table entries of the hyperparameters (and a method's variational
    parameters) that a posterior of ``model`` with inducing inputs (or, for dense methods,
    training inputs) ``Z`` holds; Z itself, held as state, is not one of them."""
    # The entries depend on X only through its number of columns, except that known
    # heteroscedastic variances (data, not hyperparameters) must have as many rows, and so must
    # a dense method's per-point variational parameters (VGP; Z is X for dense methods).
    known = getattr(model.likelihood, "known", False)
    rows = np.size(declared_value(model.likelihood.variance)) if known else Z.shape[0]
    try:
        table = model.parameter_table(np.empty((rows, Z.shape[1])), Z if model.sparse else None)
    except ValueError as err:
        raise _error(source, "attribute 'model_spec'",
                     f"does not fit the {Z.shape[1]} feature(s) of Z: {err}") from err
    return [e for e in table.entries if e.name != "inducing.Z"]


def _json_of(kind):
    """A check that a string holds JSON of the Python type ``kind``."""
    def problem(value):
        try:
            parsed = json.loads(value)
        except (TypeError, ValueError):
            return "expected a JSON string"
        return None if isinstance(parsed, kind) else f"expected JSON of a {kind.__name__}"
    return problem


# Attribute kinds: a check returning what is wrong with a value, or None.
_ATTRIBUTE_KINDS = {
    "str": lambda v: None if isinstance(v, str) else "expected a string",
    "count": lambda v: None if is_integer(v) and v >= 0 else "expected a non-negative integer",
    "flag": lambda v: None if is_integer(v) and v in (0, 1) else "expected 0 or 1",
    "real": lambda v: None if is_number(v) and np.isfinite(v) else "expected a finite number",
    "json-object": _json_of(dict),
    "json-list": _json_of(list),
}


def _attribute(ds, source, name, kind):
    """The attribute ``name`` (parsed, for JSON kinds), or PosteriorFileError unless it is
    present and of ``kind`` (a key of :data:`_ATTRIBUTE_KINDS`)."""
    item = f"attribute {name!r}"
    if name not in ds.attrs:
        raise _error(source, item, "missing")
    value = ds.attrs[name]
    problem = _ATTRIBUTE_KINDS[kind](value)
    if problem is not None:
        raise _error(source, item, f"{problem}, got {_short(value)}")
    return json.loads(value) if kind.startswith("json") else value


def _float_problem(values):
    """What is wrong with values that must be finite float64 numbers, or None."""
    if values.dtype != np.float64:
        return f"expected float64 values, got dtype {values.dtype}"
    bad = values.size - np.count_nonzero(np.isfinite(values))
    return f"expected finite values, got {bad} NaN or infinite" if bad else None


# Variable kinds: a check returning what is wrong with the values, or None.
_VARIABLE_KINDS = {
    "float": _float_problem,
    "count": lambda v: None if v.dtype.kind in "iu" and np.all(v >= 0) else "expected non-negative integers",
    "index": lambda v: (None if v.dtype.kind in "iu" and np.array_equal(v, np.arange(v.size))
                        else "expected the integers 0, 1, ..., n - 1"),
}


def _variable(ds, source, name, dims, kind):
    """The values of variable ``name``, or PosteriorFileError unless it is present with
    ``dims`` and of ``kind`` (a key of :data:`_VARIABLE_KINDS`)."""
    item = f"variable {name!r}"
    if name not in ds.variables:
        raise _error(source, item, "missing")
    variable = ds.variables[name]
    if variable.dims != tuple(dims):
        raise _error(source, item, f"has dims {variable.dims}, expected {tuple(dims)}")
    problem = _VARIABLE_KINDS[kind](variable.values)
    if problem is not None:
        raise _error(source, item, problem)
    return variable.values


def _short(value, limit=80):
    """repr(value), cut at ``limit`` characters for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class _Part(NamedTuple):
    """Variables (name -> (dims, kind)) and attributes (name -> kind) that to_xarray writes together."""

    variables: dict
    attributes: dict


# What to_xarray writes, by part.  A file holds "common"; the predictive cache, "whitened" (every
# method's: see methods.common.PredictiveState); the part of its method's
# local state, if any; and "selection", "reinit" and "standardization" when the fit made them
# (whole or not at all).  Its hyperparameters, one variable each, are those of its model's parameter table.
_LAYOUT = {
    "common": _Part(
        {"inducing": (("inducing",), "index"), "inducing_bis": (("inducing_bis",), "index"),
         "feature": (("feature",), "index"), "Z": (("inducing", "feature"), "float"),
         "q_mean": (("inducing",), "float"), "q_cov": (("inducing", "inducing_bis"), "float")},
        {"format_version": "count", "checksum": "str", "inference": "str", "likelihood": "str", "kernel": "str",
         "log_evidence": "real", "log_prior": "real", "converged": "flag", "constant_model": "flag",
         "ridge": "str", "n_iterations": "count", "jitter": "real", "gpdsl_version": "str",
         "priors": "json-object", "fixed": "json-list", "model_spec": "json-object", "M": "count"}),
    "whitened": _Part(
        {"predictive_whitened_weights": (("inducing",), "float"),
         "predictive_whitened_correction": (("inducing", "inducing_bis"), "float"),
         "predictive_chol": (("inducing", "inducing_bis"), "float")}, {}),
    "selection": _Part(
        {"selected_index": (("inducing",), "count"), "selection_criterion": (("inducing",), "float")},
        {"selection_stopped": "str"}),
    "reinit": _Part({}, {"reinit_history": "json-list", "reinit_stop": "str"}),
    "subsample": _Part({}, {"subsample_rows": "count", "subsample_objective": "real"}),
    # The fit's record (gpdsl.diagnostics.FitDiagnostics as JSON), from format version 2 on.
    "diagnostics": _Part({}, {"diagnostics": "json-object"}),
    "standardization": _Part(
        {"standardization_x_mean": (("feature",), "float"), "standardization_x_scale": (("feature",), "float")},
        {"standardization_y_mean": "real", "standardization_y_scale": "real"}),
}
_OPTIONAL_PARTS = ("selection", "reinit", "subsample", "standardization")
