"""The fitted posterior: predictions, xarray export and netCDF round trip.

xarray (and pandas behind it) is imported by the functions that return or read datasets, not
with the module: ``import gpdsl`` and a fit do not need it, and it took a third of a second.
"""
from __future__ import annotations

import json

import numpy as np

from . import threads
from ._version import __version__
from .chunks import default_chunk_size, map_reduce
from .likelihoods import Bernoulli, Gaussian, HeteroscedasticGaussian
from .methods.common import PredictiveState
from .methods.expectation_propagation import SiteState
from .methods.polya_gamma import PolyaGammaState
from .model import validate_inputs


class Posterior:
    """A fitted model.  ``log_evidence`` is the exact LML (Exact), the collapsed bound (VFE),
    FITC's approximate LML, EP's approximation (EP, and QP, whose hyperparameters maximise EP's
    evidence formula at EP's sites, or at QP's own with ``QP(hyperparameters="qp")``) or
    the collapsed Pólya-Gamma bound (PolyaGamma); ``values`` holds the fitted natural
    hyperparameters by name, ``sites`` the method's local state (EP/QP sites, Pólya-Gamma c),
    ``selection`` the greedy inducing selection (indices, criterion) and ``reinit_history`` the
    objective and M of each re-selection round and ``reinit_stop`` why that loop stopped
    ("objective", "repeated_selection", "no_candidate" or "max_reinit"; None without the loop).
    ``constant_model`` is True when the fit is no better than the constant model f = 0, and
    ``ridge`` names a hyperparameter that ran away along an evidence ridge (see
    :meth:`gpdsl.Model.fit`), else None."""

    def __init__(self, model, values, state, log_evidence, log_prior=0.0, converged=True,
                 n_iterations=0, jitter=0.0, priors=None, fixed=(), sites=None, total_sweeps=0,
                 selection=None, reinit_history=None, constant_model=False, ridge=None, reinit_stop=None):
        self.model = model
        self.values = {k: np.asarray(v, dtype=float) for k, v in values.items()}
        self.state = state
        self.log_evidence = float(log_evidence)
        self.log_prior = float(log_prior)
        self.converged = bool(converged)
        self.n_iterations = int(n_iterations)
        self.jitter = float(jitter)
        self.priors = dict(priors or {})
        self.fixed = list(fixed)
        self.sites = sites                  # EP/QP SiteState, PolyaGammaState, or None
        self.total_sweeps = int(total_sweeps)
        self.selection = selection
        self.reinit_history = reinit_history
        self.constant_model = bool(constant_model)
        self.ridge = ridge
        self.reinit_stop = reinit_stop

    def __repr__(self):
        return (f"Posterior({type(self.model.inference).__name__}, log_evidence={self.log_evidence:.6g}, "
                f"M={self.state.Z.shape[0]}, converged={self.converged})")

    @property
    def n_features(self):
        return self.state.Z.shape[1]

    # -- prediction ------------------------------------------------------------------------------
    @threads.managed
    def predict_f(self, X_new):
        """Latent predictive mean and variance at X_new (n, D) -> two (n,) arrays."""
        X_new = validate_inputs(X_new, "X_new", self.n_features)
        kernel, state = self.model.kernel, self.state

        def chunk(slc):
            b = state.basis(kernel.gram(self.values, "kernel", state.Z, X_new[slc]))
            mean = b.T @ state.weights
            var = kernel.diag(self.values, "kernel", X_new[slc]) - np.einsum("ij,ij->j", b, state.correction @ b)
            return (), (mean, np.maximum(var, 0.0))

        n, m = X_new.shape[0], state.Z.shape[0]
        _, (mean, var) = map_reduce(chunk, n, default_chunk_size(n, m), width=m)
        return mean, var

    @threads.managed
    def predict_f_full_cov(self, X_new):
        """Latent predictive mean (n,) and full covariance (n, n) at X_new (joint, for sampling and KL)."""
        X_new = validate_inputs(X_new, "X_new", self.n_features)
        kernel, state = self.model.kernel, self.state
        with threads.bulk(float(X_new.shape[0]) ** 2 * state.Z.shape[0]):
            b = state.basis(kernel.gram(self.values, "kernel", state.Z, X_new))
            cov = kernel.gram(self.values, "kernel", X_new, X_new) - b.T @ state.correction @ b
        return b.T @ state.weights, 0.5 * (cov + cov.T)

    def noise_variance(self, X_new, noise_variance=None):
        """Observation-noise variances at X_new, or None when they cannot be known."""
        if noise_variance is not None:
            nv = np.broadcast_to(np.asarray(noise_variance, dtype=float), (X_new.shape[0],))
            if not np.all(np.isfinite(nv)) or np.any(nv < 0):
                raise ValueError("predict: noise_variance must be finite and non-negative")
            return nv
        if getattr(self.model.likelihood, "known", False):
            return None   # known training variances say nothing about new inputs
        return self.model.likelihood.noise(self.values, "likelihood", X_new)

    @threads.managed
    def predict(self, X_new, noise_variance=None):
        """xarray.Dataset over dim ``obs``: f_mean, f_var and the observation predictive --
        y_mean, y_var for Gaussian and Poisson likelihoods, p = p(y* = +1) for Bernoulli.

        For ``HeteroscedasticGaussian(variance=...)`` (known training variances) y_var needs
        ``noise_variance=`` at the new inputs and is left out otherwise.
        """
        import xarray as xr

        X_new = validate_inputs(X_new, "X_new", self.n_features)
        mean, var = self.predict_f(X_new)
        data = {"f_mean": ("obs", mean), "f_var": ("obs", var)}
        if self.gaussian:
            data["y_mean"] = ("obs", mean)
            noise = self.noise_variance(X_new, noise_variance)
            if noise is not None:
                data["y_var"] = ("obs", var + noise)
        else:
            for name, value in self.model.likelihood.predictive(self.values, "likelihood", mean, var).items():
                data[name] = ("obs", value)
        return xr.Dataset(data, coords={"obs": np.arange(X_new.shape[0])},
                          attrs={"inference": type(self.model.inference).__name__})

    @property
    def gaussian(self):
        """True for the Gaussian-noise likelihoods (their predictive adds noise variances)."""
        return isinstance(self.model.likelihood, (Gaussian, HeteroscedasticGaussian))

    @threads.managed
    def log_predictive(self, X_new, y_new):
        """Pointwise log predictive probability of targets y_new at X_new (n,).

        Gaussian: log N(y | f_mean, f_var + noise); Bernoulli: log p(y | x) for y in {0, 1},
        {-1, +1} or bool; Poisson: the negative-binomial predictive of the QP paper (eq. 122).
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
        if isinstance(likelihood, Bernoulli):
            return likelihood.log_predictive(self.values, "likelihood", mean, var, y_new)
        return likelihood.log_predictive(mean, var, y_new)

    @threads.managed
    def to_inference_data(self, X_new, y_new, draws=1000, seed=0, chains=4):
        """arviz.InferenceData at X_new, y_new: ``chains`` x ``draws`` independent draws (see :mod:`gpdsl.arviz_io`)."""
        from .arviz_io import to_inference_data
        return to_inference_data(self, X_new, y_new, draws=draws, seed=seed, chains=chains)

    # -- xarray / netCDF ---------------------------------------------------------------------------
    def to_xarray(self):
        """xarray.Dataset: Z, q(u), the predictive cache, every hyperparameter, attrs."""
        import xarray as xr

        state = self.state
        m, d = state.Z.shape
        data = {
            "Z": (("inducing", "feature"), state.Z),
            "q_mean": ("inducing", state.q_mean),
            "q_cov": (("inducing", "inducing_bis"), state.q_cov),
        }
        # Kept so that a loaded posterior predicts with the very same arithmetic.  The whitened
        # state of the sparse methods has its own names, so that a reader that knows only the
        # natural-basis ones fails on it rather than predicting with it.
        kind = "whitened_" if state.chol is not None else ""
        data[f"predictive_{kind}weights"] = ("inducing", state.weights)
        data[f"predictive_{kind}correction"] = (("inducing", "inducing_bis"), state.correction)
        if state.chol is not None:
            data["predictive_chol"] = (("inducing", "inducing_bis"), state.chol)
        for name, value in self.values.items():
            data[name] = (_hyper_dims(name, value, d), value)
        local_attrs = {}
        if self.sites is not None:
            name, export, _ = _LOCAL_STATES[type(self.sites)]
            local_vars, local_attrs = export(self.sites, self.total_sweeps)
            data.update(local_vars)
            local_attrs["local_state"] = name
        selection_attrs = {}
        if self.selection is not None and self.selection.indices is not None:
            data["selected_index"] = ("inducing", self.selection.indices)
            data["selection_criterion"] = ("inducing", self.selection.criterion)
            selection_attrs["selection_stopped"] = str(self.selection.stopped)
        if self.reinit_history is not None:
            selection_attrs["reinit_history"] = json.dumps(self.reinit_history)
            selection_attrs["reinit_stop"] = str(self.reinit_stop)
        from .spec import model_to_dict
        attrs = {
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
            "gpdsl_version": __version__,
            "priors": json.dumps(self.priors),
            "fixed": json.dumps(self.fixed),
            "model_spec": json.dumps(model_to_dict(self.model)),
            "M": m,
            **local_attrs,
            **selection_attrs,
        }
        coords = {"inducing": np.arange(m), "inducing_bis": np.arange(m), "feature": np.arange(d)}
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def save(self, path):
        """Write the posterior to netCDF (xarray's writer, scipy backend: no extra dependency)."""
        self.to_xarray().to_netcdf(path, engine="scipy")


def _hyper_dims(name, value, n_features):
    if value.ndim == 0:
        return ()
    if name.endswith("lengthscale") and value.shape == (n_features,):
        return ("feature",)
    return (name.rsplit(".", 1)[-1] + "_index",)


def from_xarray(ds):
    """Rebuild a working :class:`Posterior` from :meth:`Posterior.to_xarray` output."""
    from .spec import model_from_dict
    model = model_from_dict(json.loads(ds.attrs["model_spec"]))
    kind = "whitened_" if "predictive_chol" in ds else ""
    state = PredictiveState(Z=ds["Z"].values, weights=ds[f"predictive_{kind}weights"].values,
                            correction=ds[f"predictive_{kind}correction"].values,
                            q_mean=ds["q_mean"].values, q_cov=ds["q_cov"].values,
                            chol=ds["predictive_chol"].values if kind else None)
    skip = {"Z", "q_mean", "q_cov", "predictive_weights", "predictive_correction", "predictive_chol",
            "predictive_whitened_weights", "predictive_whitened_correction", "selected_index",
            "selection_criterion"} | _LOCAL_VARIABLES
    values = {name: ds[name].values for name in ds.data_vars if name not in skip}
    sites, total_sweeps = _local_state_from(ds)
    selection = None
    if "selected_index" in ds:
        from .inducing import Selection
        selection = Selection(Z=state.Z, indices=ds["selected_index"].values,
                              criterion=ds["selection_criterion"].values, stopped=ds.attrs["selection_stopped"])
    history = json.loads(ds.attrs["reinit_history"]) if "reinit_history" in ds.attrs else None
    return Posterior(model=model, values=values, state=state, log_evidence=ds.attrs["log_evidence"],
                     log_prior=ds.attrs["log_prior"], converged=bool(ds.attrs["converged"]),
                     n_iterations=ds.attrs["n_iterations"], jitter=ds.attrs["jitter"],
                     priors=json.loads(ds.attrs["priors"]), fixed=json.loads(ds.attrs["fixed"]),
                     sites=sites, total_sweeps=total_sweeps, selection=selection, reinit_history=history,
                     constant_model=bool(ds.attrs.get("constant_model", 0)), ridge=ds.attrs.get("ridge") or None,
                     reinit_stop=ds.attrs.get("reinit_stop"))


def _export_sites(sites, total_sweeps):
    return ({"site_precision": ("obs", sites.tau), "site_location": ("obs", sites.nu)},
            {"ep_sweeps_final": sites.sweeps, "ep_converged": int(sites.converged), "ep_damping": sites.damping,
             "ep_total_sweeps": total_sweeps})


def _import_sites(ds):
    sites = SiteState(tau=ds["site_precision"].values, nu=ds["site_location"].values,
                      sweeps=int(ds.attrs["ep_sweeps_final"]), converged=bool(ds.attrs["ep_converged"]),
                      damping=float(ds.attrs["ep_damping"]))
    return sites, int(ds.attrs["ep_total_sweeps"])


def _export_polya_gamma(local, total_updates):
    return ({"c": ("obs", local.c), "theta": ("obs", local.theta), "c_next": ("obs", local.c_next),
             "bound_history": ("c_update", np.asarray(local.bound_history))},
            {"pg_c_updates_final": local.sweeps, "pg_converged": int(local.converged),
             "pg_total_c_updates": total_updates})


def _import_polya_gamma(ds):
    local = PolyaGammaState(c=ds["c"].values, c_next=ds["c_next"].values, sweeps=int(ds.attrs["pg_c_updates_final"]),
                            converged=bool(ds.attrs["pg_converged"]), bound_history=list(ds["bound_history"].values))
    return local, int(ds.attrs["pg_total_c_updates"])


# The local state of each method that has one: (name in the netCDF attrs, export, import).
_LOCAL_STATES = {
    SiteState: ("ep_sites", _export_sites, _import_sites),
    PolyaGammaState: ("polya_gamma", _export_polya_gamma, _import_polya_gamma),
}
_LOCAL_VARIABLES = {"site_precision", "site_location", "c", "theta", "c_next", "bound_history"}


def _local_state_from(ds):
    """(local state, total sweeps) from a dataset written by :meth:`Posterior.to_xarray`."""
    name = ds.attrs.get("local_state")
    if name is None:
        return None, 0
    return next(load for key, _, load in _LOCAL_STATES.values() if key == name)(ds)


def load(path):
    """Load a posterior written by :meth:`Posterior.save`."""
    import xarray as xr

    with xr.open_dataset(path, engine="scipy") as ds:
        return from_xarray(ds.load())
