"""Everything that touches ArviZ lives here.

``to_inference_data`` draws the latent function at the given inputs from the Gaussian
approximate posterior (jointly, with the full predictive covariance), adds observation noise
for ``posterior_predictive`` (left out, with a warning and a note in the attrs, where the
likelihood cannot draw y: :meth:`gpdsl.likelihoods.Likelihood.sample`), and records the
pointwise log-likelihood of the given targets for ``az.loo`` / ``az.waic`` / ``az.compare``
(any likelihood).
"""
from __future__ import annotations

import warnings

import arviz as az
import numpy as np

from ..checks import check_positive_int, check_seed
from ..components import bind
from ..inputs import validate_inputs
from ..linalg import cholesky
from ..likelihoods.gaussian import gaussian_log_density


def to_inference_data(posterior, X_new, y_new, draws=1000, seed=0, chains=4):
    """An ArviZ InferenceData of joint latent draws at new inputs and the targets' log-likelihood.

    Parameters
    ----------
    posterior : gpdsl.Posterior
        A fitted posterior.
    X_new : array_like, shape (n, D)
        Inputs where f is drawn.
    y_new : array_like, shape (n,)
        Targets at ``X_new``, for ``observed_data`` and the pointwise log-likelihood.
    draws : int, default 1000
        Draws per chain.
    seed : int or None, default 0
        Seed of ``np.random.default_rng``.
    chains : int, default 4
        Number of chains (independent blocks of draws).

    Returns
    -------
    arviz.InferenceData
        ``posterior.f`` (chains, draws, n) drawn from N(mean, cov) of ``predict_f_full_cov``,
        or (chains, draws, n, K) along a ``class`` dimension for K latent functions (a shared
        kernel or one a latent function, :class:`gpdsl.kernels.Separate`: the same draws);
        ``posterior_predictive.y`` (chains, draws, n) with observation noise added (left out,
        with ``attrs["posterior_predictive_omitted"]`` saying why, for a likelihood that cannot
        draw y);
        ``log_likelihood.y`` (chains, draws, n) of ``y_new`` given each draw (for ``az.loo``);
        ``observed_data.y`` (n,); ``constant_data`` with X (n, D) and the hyperparameters.

    Raises
    ------
    ValueError
        If the inputs or targets are invalid, ``draws``/``chains`` not positive integers,
        ``seed`` not a non-negative integer or None, or the noise variance at ``X_new`` is
        unknown (a heteroscedastic likelihood with known variances).
    """
    X_new = validate_inputs(X_new, "X_new", posterior.n_features)
    y_new = posterior.model.likelihood.coded_targets(y_new, X_new.shape[0], "y_new")
    check_positive_int("to_inference_data", "draws", draws)
    check_positive_int("to_inference_data", "chains", chains)
    # Checked here, not left to default_rng, whose error names neither the function nor seed.
    check_seed("to_inference_data", seed)
    likelihood = posterior.model.likelihood
    f, y_rep, omitted, jitter = predictive_draws(posterior, X_new, np.random.default_rng(seed), (chains, draws))
    if y_rep is None:
        warnings.warn(f"to_inference_data: no posterior_predictive group: {omitted}", UserWarning, stacklevel=2)
    if posterior.gaussian:
        log_lik = gaussian_log_density(y_new, f, posterior._log_noise_variance(X_new))
    else:
        log_lik = bind(likelihood, posterior.values, "likelihood").log_density(y_new, f)
    hyper = {name.replace(".", "_"): v for name, v in posterior.values.items()}
    attrs = {"inference": type(posterior.model.inference).__name__,
             "log_evidence": posterior.log_evidence, "sampling_jitter": jitter}
    if y_rep is None:
        attrs["posterior_predictive_omitted"] = omitted
    coords = {"obs": np.arange(X_new.shape[0]), "feature": np.arange(X_new.shape[1])}
    f_dims = ["obs"]
    if posterior.n_latent > 1:
        coords["class"] = likelihood.class_labels()
        f_dims = ["obs", "class"]
    groups = {"posterior": {"f": f}, "posterior_predictive": None if y_rep is None else {"y": y_rep},
              "log_likelihood": {"y": log_lik}, "observed_data": {"y": y_new}, "constant_data": {"X": X_new, **hyper}}
    return _from_dict(groups, coords=coords, dims={"f": f_dims, "y": ["obs"], "X": ["obs", "feature"]}, attrs=attrs)


def _legacy():
    """arviz.InferenceData where ArviZ 0.x defines it, else None (ArviZ 1.x, whose containers are
    xarray's DataTree; its module ``__getattr__`` answers the old name with a MigrationWarning, so
    the module's own names are looked at, not the attribute)."""
    return vars(az).get("InferenceData")


def _from_dict(groups, coords, dims, attrs):
    """``az.from_dict`` of the groups (name -> dict of arrays, or None to leave a group out) in
    either ArviZ's signature: 0.x takes each group as a keyword and the attrs as the root's,
    1.x the groups as one dict and the root's attrs under "/"."""
    groups = {name: group for name, group in groups.items() if group is not None}
    if _legacy() is not None:
        return az.from_dict(**groups, coords=coords, dims=dims, attrs=attrs)
    return az.from_dict(groups, coords=coords, dims=dims, attrs={"/": attrs})


def inference_data(attrs=None, **groups):
    """The container ArviZ takes, of ready xarray Datasets: arviz.InferenceData under ArviZ 0.x,
    xarray.DataTree (one child node a group) under ArviZ 1.x.

    Parameters
    ----------
    attrs : dict, optional
        The root's attributes.
    **groups : xarray.Dataset
        Each group by its ArviZ name (``posterior``, ``sample_stats``, ...).

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
    """
    legacy = _legacy()
    if legacy is not None:
        container = legacy(**groups)
    else:
        from xarray import DataTree
        container = DataTree.from_dict({f"/{name}": group for name, group in groups.items()})
    container.attrs.update(attrs or {})
    return container


def predictive_draws(posterior, X_new, rng, size):
    """Joint draws of f at X_new from ``posterior`` and of y given each (the likelihood's noise).

    Parameters
    ----------
    posterior : gpdsl.Posterior
    X_new : ndarray, shape (n, D)
        Checked inputs, in the data's units.
    rng : numpy.random.Generator
        Drawn from in this order: f, then y.
    size : tuple of int
        The leading shape of the draws, e.g. (chains, draws).

    Returns
    -------
    f : ndarray, shape size + (n,), or size + (n, K) for K latent functions
        Draws of N(mean, cov) of ``predict_f_full_cov``.
    y : ndarray of f's leading shape + (n,), or None
        y given each draw of f: f + N(0, noise variance) for a Gaussian likelihood, the
        likelihood's ``sample`` otherwise; None for a likelihood that cannot draw y.
    omitted : str or None
        Why y is None.
    jitter : float
        The largest jitter the Cholesky factorisation of the covariance added.

    Raises
    ------
    ValueError
        The noise variance at X_new is unknown (a heteroscedastic likelihood with known variances).
    """
    if posterior.gaussian:
        # In logs: the learned noise may overflow float64 where its density is finite.
        log_noise = posterior._log_noise_variance(X_new)
        if log_noise is None:
            raise ValueError("to_inference_data: the noise variance at X_new is unknown for known-variance "
                             "heteroscedastic likelihoods; use posterior.predict(noise_variance=...)")
    mean, cov = posterior.predict_f_full_cov(X_new)
    f, jitter = _joint_draws(mean, cov, rng, size)
    if posterior.gaussian:
        return f, f + np.exp(0.5 * log_noise) * rng.standard_normal(f.shape), None, jitter
    try:
        return f, bind(posterior.model.likelihood, posterior.values, "likelihood").sample(f, rng), None, jitter
    except NotImplementedError as missing:
        # A likelihood that cannot draw y (real-valued targets without ``sample``): the other
        # groups stand without the posterior-predictive one, which the attrs say is left out.
        return f, None, str(missing), jitter


def _joint_draws(mean, cov, rng, size):
    """Draws of size + mean.shape from N(mean, cov) as :meth:`gpdsl.Posterior.predict_f_full_cov`
    gives them: mean (n,) with cov (n, n); mean (n, K) with cov (K, n, n) (independent latent
    functions, drawn a class at a time) or (n, K, n, K) (jointly).  Returns the draws and the
    largest jitter the Cholesky factorisations added."""
    if mean.ndim == 1 or cov.ndim == 4:
        L, jitter = cholesky(cov.reshape(mean.size, mean.size), None, what="predictive covariance of f")
        return (mean.reshape(-1) + rng.standard_normal(size + (mean.size,)) @ L.T).reshape(size + mean.shape), jitter
    draws, jitters = [], []
    for k in range(mean.shape[1]):
        f_k, jitter = _joint_draws(mean[:, k], cov[k], rng, size)
        draws.append(f_k)
        jitters.append(jitter)
    return np.stack(draws, axis=-1), max(jitters)


def summary(idata, **kwargs):
    """``az.summary``: kept here so that no other module imports ArviZ.

    Parameters
    ----------
    idata : arviz.InferenceData
        E.g. from :func:`to_inference_data`.
    **kwargs
        Passed on to ``arviz.summary``.

    Returns
    -------
    pandas.DataFrame
    """
    return az.summary(idata, **kwargs)
