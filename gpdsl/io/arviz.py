"""Everything that touches ArviZ lives here.

``to_inference_data`` draws the latent function at the given inputs from the Gaussian
approximate posterior (jointly, with the full predictive covariance), adds observation noise
for ``posterior_predictive`` (left out, with a warning and a note in the attrs, where the
likelihood cannot draw y: :meth:`gpdsl.likelihoods.Likelihood.sample`), and records the
pointwise log-likelihood of the given targets for ``az.loo`` / ``az.waic`` / ``az.compare``
(any likelihood). ``held_out_elpd``, ``elpd_estimate`` and ``compare`` score held-out
targets and compare models with the same names and numbers under ArviZ 0.x and 1.x.
"""
from __future__ import annotations

import warnings

import arviz as az
import numpy as np
from scipy.special import logsumexp

from ..checks import check_positive_int, check_seed
from ..inputs import validate_inputs
from ..linalg import cholesky
from ..likelihoods.gaussian import gaussian_log_density
from ..multioutput import query
from .layout import hyperparameter_entries


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
        A multi-output posterior at X_new (n, D) with y_new (n, P) (complete) draws every output
        jointly: f, y and the log-likelihood (chains, draws, n, P) over dims ``obs`` and
        ``output``, and the per-output hyperparameters along ``output``; at X_new (n, D+1), one
        output a row, as above.

    Raises
    ------
    ValueError
        If the inputs or targets are invalid, ``draws``/``chains`` not positive integers,
        ``seed`` not a non-negative integer or None, or the noise variance at ``X_new`` is
        unknown (a heteroscedastic likelihood with known variances).
    """
    q = query(X_new, posterior.input_dims, posterior.output_count, "to_inference_data")
    X_rows = validate_inputs(q.X, "X_new", posterior.n_features)
    y_rows = q.rows("to_inference_data", "y_new", y_new, scalar=False)
    if q.every_output and np.any(np.isnan(y_rows)):
        raise ValueError("to_inference_data: y_new (n, P) has missing entries (NaN); the draws of every output need "
                         "every target: give X_new with the output index (n, D+1) and a 1-D y_new of the observed rows")
    y_new = posterior._likelihood(X_rows).coded_targets(y_rows, X_rows.shape[0], "y_new")
    check_positive_int("to_inference_data", "draws", draws)
    check_positive_int("to_inference_data", "chains", chains)
    # Checked here, not left to default_rng, whose error names neither the function nor seed.
    check_seed("to_inference_data", seed)
    likelihood = posterior.model.likelihood
    f, y_rep, omitted, jitter = predictive_draws(posterior, X_rows, np.random.default_rng(seed), (chains, draws))
    if y_rep is None:
        warnings.warn(f"to_inference_data: no posterior_predictive group: {omitted}", UserWarning, stacklevel=2)
    if posterior.gaussian:
        log_lik = gaussian_log_density(y_new, f, posterior._log_noise_variance(X_rows))
    else:
        log_lik = posterior._likelihood(X_rows).log_density(y_new, f)
    X_new, y_dims = (np.asarray(X_new, dtype=float), ["obs", "output"]) if q.every_output else (X_rows, ["obs"])
    if q.every_output:
        # The draws over the long rows (point-major) as (..., n, P).
        f, log_lik, y_new = _wide(q, f), _wide(q, log_lik), q.wide(y_new)
        y_rep = None if y_rep is None else _wide(q, y_rep)
    hyper = {name.replace(".", "_"): v for name, v in posterior.values.items()}
    attrs = {"inference": type(posterior.model.inference).__name__,
             "log_evidence": posterior.log_evidence, "sampling_jitter": jitter}
    if y_rep is None:
        attrs["posterior_predictive_omitted"] = omitted
    coords = {"obs": np.arange(X_new.shape[0]), "feature": np.arange(X_new.shape[1])}
    f_dims = y_dims
    if posterior.n_latent > 1:
        coords["class"] = likelihood.class_labels()
        f_dims = ["obs", "class"]
    if posterior.output_count is not None:
        coords["output"] = posterior.output_labels
    groups = {"posterior": {"f": f}, "posterior_predictive": None if y_rep is None else {"y": y_rep},
              "log_likelihood": {"y": log_lik}, "observed_data": {"y": y_new}, "constant_data": {"X": X_new, **hyper}}
    dims = {"f": f_dims, "y": y_dims, "X": ["obs", "feature"], **_hyperparameter_dims(posterior)}
    return _from_dict(groups, coords=coords, dims=dims, attrs=attrs)


def _wide(q, draws):
    """Draws (..., n P) over a query's long rows as (..., n, P) (:class:`gpdsl.multioutput.Query`)."""
    return draws.reshape(draws.shape[:-1] + (q.n, q.P))


def _hyperparameter_dims(posterior):
    """The constant_data dims of a multi-output posterior's per-output hyperparameters (B's W and
    kappa, a per-output noise: their entries' declared dims, ``output`` among them), by the
    underscored names constant_data holds them under."""
    if posterior.output_count is None:
        return {}
    entries = hyperparameter_entries(posterior.model, posterior.state.Z)
    return {e.name.replace(".", "_"): list(e.dims) for e in entries
            if e.dims is not None and "output" in e.dims and e.name in posterior.values}


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
        return f, posterior._likelihood(X_new).sample(f, rng), None, jitter
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


# ArviZ 0.x names an ELPD estimate's fields and az.compare's columns after the estimator
# (elpd_loo, p_loo; elpd_waic, p_waic); ArviZ 1.x calls them elpd and p whatever the estimator.
_ESTIMATOR_NAMES = {"elpd_loo": "elpd", "p_loo": "p", "elpd_waic": "elpd", "p_waic": "p"}


def held_out_elpd(idata, var_name="y"):
    r"""ArviZ's ELPDData of the expected log predictive density of held-out targets.

    For points the posterior was not fitted to, the estimate needs no leave-one-out
    correction (PSIS-LOO's, which ``az.loo`` applies, is meant for the fitted points):

    .. math:: \widehat{\mathrm{elpd}}_i = \log \frac1S \sum_{s=1}^S p(y_i \mid f_i^{(s)}),
              \qquad \widehat{\mathrm{elpd}} = \sum_i \widehat{\mathrm{elpd}}_i,
              \qquad \mathrm{se} = \sqrt{n \operatorname{Var}_i \widehat{\mathrm{elpd}}_i}

    (the variance over the n points with divisor n, as ``az.compare``'s ``dse``), with
    ``p = 0``. The result goes to ``az.compare`` (or :func:`compare`) beside other ones.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        With a ``log_likelihood`` group of draws along ``chain`` and ``draw``, e.g. from
        :meth:`gpdsl.Posterior.to_inference_data` at held-out inputs and targets.
    var_name : str, default "y"
        The log-likelihood variable.

    Returns
    -------
    ELPDData
        The ELPDData class of the ArviZ in use (fields named as :func:`elpd_estimate`
        undoes), with the pointwise values (``loo_i`` under ArviZ 0.x, ``elpd_i`` under 1.x).

    Raises
    ------
    ValueError
        If ``idata`` has no ``log_likelihood`` group, the group no ``var_name``, or the
        variable no ``chain`` and ``draw`` dimensions.
    """
    group = getattr(idata, "log_likelihood", None)
    if group is None:
        raise ValueError(f"held_out_elpd: idata has no log_likelihood group (got {type(idata).__name__}); "
                         "expected e.g. Posterior.to_inference_data(X_new, y_new)")
    if var_name not in group.data_vars:
        raise ValueError(f"held_out_elpd: var_name={var_name!r} is not in the log_likelihood group; "
                         f"expected one of {sorted(group.data_vars)}")
    log_lik = group[var_name]
    if not {"chain", "draw"} <= set(log_lik.dims):
        raise ValueError(f"held_out_elpd: log_likelihood[{var_name!r}] has dims {log_lik.dims}; "
                         "expected 'chain' and 'draw' among them")
    n_samples = log_lik.sizes["chain"] * log_lik.sizes["draw"]
    pointwise = log_lik.reduce(logsumexp, dim=("chain", "draw")) - np.log(n_samples)
    n = pointwise.size
    elpd, se = float(pointwise.sum()), float(np.sqrt(n * pointwise.var()))
    if _legacy() is not None:
        # ArviZ 0.x's ELPDData is a pandas Series; az.compare reads the estimator from its index.
        return az.ELPDData(data=[elpd, se, 0.0, n_samples, n, False, pointwise, "log"],
                           index=["elpd_loo", "se", "p_loo", "n_samples", "n_data_points", "warning", "loo_i",
                                  "scale"])
    return az.ELPDData(elpd=elpd, se=se, p=0.0, n_samples=n_samples, n_data_points=n, scale="log",
                       warning=False, good_k=None, elpd_i=pointwise)


def elpd_estimate(elpd_data):
    """An ELPD estimate's numbers under the names ArviZ 1.x gives them, from either ArviZ.

    Parameters
    ----------
    elpd_data : ELPDData
        From ``az.loo``, ``az.waic`` or :func:`held_out_elpd`.

    Returns
    -------
    dict
        ``elpd``, ``se``, ``p``, ``n_samples`` and ``n_data_points``. ArviZ 0.x's ``az.loo``
        takes the ``se`` over points with divisor n, 1.x's with n - 1.
    """
    if _legacy() is not None:
        return {_ESTIMATOR_NAMES.get(key, key): elpd_data[key] for key in elpd_data.index
                if _ESTIMATOR_NAMES.get(key, key) in ("elpd", "se", "p", "n_samples", "n_data_points")}
    return {key: elpd_data[key] for key in ("elpd", "se", "p", "n_samples", "n_data_points")}


def compare(compare_dict, **kwargs):
    """``az.compare`` with the same columns and unrounded numbers under either ArviZ.

    ArviZ 1.x rounds its table unless asked not to (``round_to="none"``, a keyword 0.x lacks),
    names two columns ``elpd`` and ``p``, which 0.x calls ``elpd_loo`` and ``p_loo``
    (``elpd_waic``, ``p_waic``), and gives ``elpd_diff`` as the model's ELPD less the best
    one's (<= 0), where 0.x gives the best one's less the model's: the result has 1.x's names
    and sign. Other columns are each version's own (0.x: ``warning``, ``scale``; 1.x:
    ``p_worse``, ``diag_diff``, ...). For InferenceData the ELPDs are ArviZ's PSIS-LOO, whose
    implementations differ in the last digits (and 1.x's ``se`` has divisor n - 1); for
    :func:`held_out_elpd`'s estimates both give the same numbers.

    Parameters
    ----------
    compare_dict : dict
        Model name -> InferenceData / DataTree, or ELPDData (e.g. :func:`held_out_elpd`).
    **kwargs
        Passed on to ``arviz.compare`` (``method``, ``var_name``, ...).

    Returns
    -------
    pandas.DataFrame
        One row a model, best first: ``rank``, ``elpd``, ``p``, ``elpd_diff``, ``se``,
        ``dse``, ``weight`` and the version's others.
    """
    if _legacy() is not None:
        with warnings.catch_warnings():
            # pandas' deprecation notes on ArviZ 0.x's own calls: nothing a caller can act on.
            warnings.simplefilter("ignore", DeprecationWarning)
            table = az.compare(compare_dict, **kwargs).rename(columns=_ESTIMATOR_NAMES)
        table["elpd_diff"] = 0.0 - table["elpd_diff"]     # not -x: the best model's 0 stays +0.0
        return table
    return az.compare(compare_dict, round_to="none", **kwargs)
