"""The report ``gpdsl run`` prints (:mod:`gpdsl.cli`): the data, the model, the fit or the NUTS
run, the hyperparameters, the held-out metrics chosen by the likelihood's kind of targets, and an
ArviZ summary.  Every function prints to stdout and returns nothing but :func:`held_out_metrics`
(a dict, also used by the tests and by scripts that score a saved posterior).
"""
from __future__ import annotations

import warnings

import numpy as np

__all__ = ["HELD_OUT_METRICS", "SUMMARY_POINTS", "SUMMARY_DRAWS", "held_out_metrics", "metrics_kind", "report",
           "report_sampled"]

# The fit's report summarises f at this many held-out points from this many joint draws a chain.
SUMMARY_POINTS = 10
SUMMARY_DRAWS = 500


def _rmse(y, mean):
    return float(np.sqrt(np.mean((y - mean) ** 2)))


def _regression_metrics(posterior, X_test, y_test, offset=None):
    """RMSE of y_mean and the mean negative log predictive density (the posterior's
    ``log_predictive``: N(y | y_mean, y_var) for a fit, the mixture over the draws for a sampled
    run), where the noise variance at X_test is known (``y_var`` predicted)."""
    pred = posterior.predict(X_test, offset=offset)
    metrics = {"RMSE": _rmse(y_test, pred["y_mean"].values)}
    if "y_var" in pred:
        metrics["MNLPD"] = -float(np.mean(posterior.log_predictive(X_test, y_test, offset=offset)))
    return metrics


def _classification_metrics(posterior, X_test, y_test, offset=None):
    """Error rate of the label p(y* = 1) > 0.5, mean log p(y* | x*) and the Brier score."""
    # Labels may be 0/1, -1/+1, bool: coded by the rows' likelihood (a PerOutput's by their output's).
    positive = posterior.model.likelihood.for_rows(X_test).prepare_targets(y_test) > 0
    p = posterior.predict(X_test, offset=offset)["p"].values
    return {"error rate": float(np.mean((p > 0.5) != positive)),
            "mean log predictive": float(np.mean(posterior.log_predictive(X_test, y_test, offset=offset))),
            "Brier score": float(np.mean((p - positive) ** 2))}


def _multiclass_metrics(posterior, X_test, y_test, offset=None):
    """Error rate of the most probable class, mean log p(y* | x*) and the multi-class Brier score
    sum_k (p_k - [y* = k])^2 (Brier 1950), averaged over the points."""
    codes = posterior.model.likelihood.coded_targets(y_test, X_test.shape[0], "y_test").astype(np.intp)
    p = posterior.predict(X_test)["p"].values
    truth = np.eye(p.shape[1])[codes]
    return {"error rate": float(np.mean(np.argmax(p, axis=1) != codes)),
            "mean log predictive": float(np.mean(posterior.log_predictive(X_test, y_test))),
            "Brier score": float(np.mean(np.sum((p - truth) ** 2, axis=1)))}


def _mean_and_log_predictive_metrics(posterior, X_test, y_test, offset=None):
    """RMSE of the predictive mean and the mean log predictive density (the likelihood's own:
    negative binomial for counts, Student-t by quadrature)."""
    mean = posterior.predict(X_test, offset=offset)["y_mean"].values
    return {"RMSE": _rmse(y_test, mean),
            "mean log predictive": float(np.mean(posterior.log_predictive(X_test, y_test, offset=offset)))}


def _pooled_metrics(posterior, X_test, y_test, offset=None):
    """Rows of several kinds (a likelihood per output of different families): the mean of
    -log p(y* | x*) over every row, each row's by its own output's likelihood (a density of real
    targets, a probability of labels and counts).  It is the one score defined for every row;
    the RMSE of labels or the error rate of real targets is not."""
    return {"MNLPD": -float(np.mean(posterior.log_predictive(X_test, y_test, offset=offset)))}


# kind of scores (:func:`metrics_kind`) -> (metrics function, the rows the report prints:
# (metric, what it is)).  A metrics function is called as f(posterior, X_test, y_test, offset)
# with the held-out rows' offset (None without ``[data] offset``).  Each kind of target gets the
# scores its literature reports; a regression score such as the RMSE of y_mean has no meaning
# for labels, whose predictive is p(y* = 1).  "gaussian" is real targets under Gaussian observation noise (a closed-form
# predictive density); "real" other real targets (Student-t), scored by the likelihood's own.
HELD_OUT_METRICS = {
    "gaussian": (_regression_metrics, (("RMSE", "root mean squared error of y_mean"),
                                       ("MNLPD", "mean negative log predictive density"))),
    "real": (_mean_and_log_predictive_metrics, (
        ("RMSE", "root mean squared error of y_mean"),
        ("mean log predictive", "mean of log p(y* | x*), the likelihood's predictive"))),
    "binary": (_classification_metrics, (
        ("error rate", "fraction of labels on the other side of p(y* = 1) = 0.5"),
        ("mean log predictive", "mean of log p(y* | x*); 0 is perfect"),
        ("Brier score", "mean of (p(y* = 1) - [y* = 1])^2"))),
    "categorical": (_multiclass_metrics, (
        ("error rate", "fraction of points whose most probable class is not their label"),
        ("mean log predictive", "mean of log p(y* | x*); 0 is perfect"),
        ("Brier score", "mean of sum_k (p(y* = k) - [y* = k])^2"))),
    "count": (_mean_and_log_predictive_metrics, (
        ("RMSE", "root mean squared error of the predictive mean count"),
        ("mean log predictive", "mean of log p(y* | x*), the likelihood's predictive of counts"))),
    "mixed": (_pooled_metrics, (
        ("MNLPD", "mean of -log p(y* | x*) over every row, each by its output's likelihood: densities of real "
                  "targets and probabilities of labels or counts pooled, the one score every row has; each "
                  "output's own scores below"),)),
}


def metrics_kind(likelihood):
    """The key of :data:`HELD_OUT_METRICS` for a likelihood: its kind of targets
    (:func:`gpdsl.inputs.target_kind`), with real targets under Gaussian observation noise
    (``observation_noise``) as ``"gaussian"`` and rows of several kinds (a
    :class:`~gpdsl.likelihoods.PerOutput` of different families) as ``"mixed"``.  Ask it of the
    likelihood of the scored rows, ``likelihood.for_rows(X_test)``: one output's rows are of
    that output's kind.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood

    Returns
    -------
    str
    """
    from .inputs import target_kind

    kind = target_kind(likelihood)
    if kind is None:
        return "mixed"
    return "gaussian" if kind == "real" and likelihood.observation_noise else kind
# Why a reported metric can be missing from the dict its function returns.
_UNAVAILABLE = {"MNLPD": "the noise variance at new inputs is unknown"}


def held_out_metrics(posterior, X_test, y_test, offset=None):
    """Held-out scores of a fitted posterior, chosen by the kind of targets of its likelihood
    of X_test's rows (:func:`metrics_kind` of ``for_rows(X_test)``, :data:`HELD_OUT_METRICS`).

    Parameters
    ----------
    posterior : gpdsl.posterior.Posterior
    X_test : numpy.ndarray
        Held-out inputs, shape (n, D), n >= 1.
    y_test : numpy.ndarray
        Held-out targets, shape (n,), coded as the training targets may be.
    offset : numpy.ndarray, optional
        The held-out rows' offset of the latent input, shape (n,) (``[data] offset``); the
        predictions and log predictive densities are taken at f + offset.

    Returns
    -------
    dict
        Metric name -> float.  Gaussian likelihoods: ``RMSE`` of y_mean and ``MNLPD`` (left out
        where the noise variance at new inputs is unknown); ``Bernoulli`` and ``Categorical``:
        ``error rate``, ``mean log predictive`` and ``Brier score``; ``Poisson``: ``RMSE`` of the predictive
        mean count and ``mean log predictive``; rows of several kinds (a ``PerOutput`` likelihood
        of different families over outputs): ``MNLPD``, the pooled mean of -log p(y* | x*), each
        output's rows scored in their own kind by calling this with those rows.
    """
    compute, _ = HELD_OUT_METRICS[_rows_kind(posterior, X_test)]
    return compute(posterior, X_test, y_test, offset)


def _rows_kind(posterior, X_rows):
    """:func:`metrics_kind` of the posterior's likelihood of the rows X_rows."""
    return metrics_kind(posterior.model.likelihood.for_rows(X_rows))


# Arrays longer than this (a method's variational parameters) are summarised, not printed.
_PRINTED_VALUES = 20


def _format_value(value):
    value = np.asarray(value)
    if value.ndim == 0:
        return f"{float(value):.6g}"
    if value.size > _PRINTED_VALUES:
        return f"{value.size} values in [{value.min():.6g}, {value.max():.6g}] (saved in the posterior file)"
    return "[" + ", ".join(f"{v:.6g}" for v in value.ravel()) + "]"


def _print_held_out(posterior, X_test, y_test, offset_test=None):
    """Print the held-out metrics of a fitted or sampled posterior (:func:`held_out_metrics`).

    Returns
    -------
    bool
        False where there are no held-out points (``test_fraction = 0``).
    """
    if X_test.shape[0] == 0:
        print("\nheld-out: none (test_fraction = 0)")
        return False
    unit = "points" if posterior.model.output_count is None else "(input, output) rows"
    print(f"\nheld-out ({X_test.shape[0]} {unit})")
    metrics = held_out_metrics(posterior, X_test, y_test, offset_test)
    kind = _rows_kind(posterior, X_test)
    _print_metrics(metrics, HELD_OUT_METRICS[kind][1], "  ")
    if posterior.model.output_count is None:
        return True
    # Each output's rows scored alone: outputs of other scales or noise weigh alike here.
    index = X_test[:, -1].astype(int)
    mixed = kind == "mixed"
    names = [name for name, _ in HELD_OUT_METRICS[kind][1] if name in metrics]
    print("  by output (each in its own kind's scores)" if mixed else f"  by output ({', '.join(names)})")
    # Each output by its name (the posterior's output_labels: the file's names, else its index).
    for p, label in enumerate(posterior.output_labels.tolist()):
        held = np.flatnonzero(index == p)
        if held.size == 0:
            print(f"    output {label}  no held-out rows")
            continue
        part = held_out_metrics(posterior, X_test[held], y_test[held],
                                None if offset_test is None else offset_test[held])
        if mixed:
            # Outputs of different kinds: each line names its scores (those of its kind's report).
            print(f"    output {label}  ({_rows_kind(posterior, X_test[held])}, {held.size} rows)")
            _print_metrics(part, HELD_OUT_METRICS[_rows_kind(posterior, X_test[held])][1], "      ")
        else:
            print(f"    output {label}  {'  '.join(f'{part[name]:.6g}' for name in names)}  ({held.size} rows)")
    return True


def _print_metrics(metrics, rows, indent):
    """One line a reported metric (:data:`HELD_OUT_METRICS`' rows): its value and what it is, or
    why it is not available."""
    width = max(len(name) for name, _ in rows)
    for name, meaning in rows:
        if name in metrics:
            print(f"{indent}{name:<{width}}  {metrics[name]:.6g}  ({meaning})")
        else:
            print(f"{indent}{name:<{width}}  not available ({_UNAVAILABLE[name]})")


def report(posterior, X, X_test, y_test, data_description, wall_time, offset_test=None):
    """Print the run's report: data, model, fit, hyperparameters and held-out metrics.

    Parameters
    ----------
    posterior : gpdsl.Posterior
        The fitted posterior.
    X : ndarray, shape (N, D)
        Training inputs (a multi-output model's long rows: (n, D + 1), the output index last).
    X_test : ndarray, shape (n, D)
        Held-out inputs (n may be 0: no held-out section).
    y_test : ndarray, shape (n,)
        Held-out targets.
    data_description : str
        What the data are, printed first.
    wall_time : float
        The fit's wall time in seconds.
    offset_test : ndarray, shape (n,), optional
        The held-out rows' offset (``[data] offset``), for the held-out metrics.
    """
    model = posterior.model
    inference = type(model.inference).__name__
    _print_data(model, X, X_test, data_description)
    _print_model(model)

    print("\nfit")
    print(f"  log evidence     {posterior.log_evidence:.6g}  ({model.inference.log_evidence_kind})")
    if posterior.priors:
        print(f"  log prior        {posterior.log_prior:.6g}")
    state = "converged" if posterior.converged else "NOT converged"
    print(f"  optimiser        {state} after {posterior.n_iterations} iteration(s)")
    print(f"  diagnostics      {posterior.diagnostics.summary()}")
    print(f"  stopped by       {posterior.diagnostics.message}")
    if model.sparse and model.output_count is not None:
        Z = posterior.state.Z
        print(f"  inducing points  {Z.shape[0]} (input, output) pairs at {np.unique(Z[:, :-1], axis=0).shape[0]} "
              f"inputs")
    elif model.sparse:
        print(f"  inducing points  {posterior.state.Z.shape[0]}")
    else:
        print(f"  inducing points  none ({inference} uses all {X.shape[0]} training points)")
    print(f"  wall time        {wall_time:.3g} s")

    scaling = posterior.standardization
    units = "" if scaling is None else (
        " (in standardised units: inputs" + (" and targets" if model.likelihood.standardizes_targets else "")
        + " scaled to mean 0, sd 1" + (", each output's targets by its own" if posterior.output_count else "")
        + "; predictions and metrics in the data's units)")
    print(f"\nhyperparameters{units}")
    width = max(len(name) for name in posterior.values) if posterior.values else 0
    for name, value in posterior.values.items():
        notes = []
        if name in posterior.fixed:
            notes.append("fixed")
        if name in posterior.priors:
            notes.append(f"prior {posterior.priors[name]}")
        note = f"  ({'; '.join(notes)})" if notes else ""
        print(f"  {name:<{width}}  {_format_value(value)}{note}")

    if not _print_held_out(posterior, X_test, y_test, offset_test):
        return

    k = min(SUMMARY_POINTS, X_test.shape[0])
    # The summary prints only the latent f, which the offset does not shift (the likelihood
    # sees f + offset), so the held-out offset is not needed here.
    try:
        idata = posterior.to_inference_data(X_test[:k], y_test[:k], draws=SUMMARY_DRAWS, seed=0)
    except ValueError as err:
        print(f"\nArviZ summary skipped: {err}")
        return
    from .io.arviz import summary

    chains = idata.posterior.sizes["chain"]
    print(f"\nArviZ summary of f at the first {k} held-out points ({chains} chains x {SUMMARY_DRAWS} draws)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = summary(idata, var_names=["f"])
    print(table.to_string())



def _print_data(model, X, X_test, data_description):
    """The report's data lines: what the data are, the training and held-out rows and the features
    (for a multi-output model: (input, output) rows, the features and the outputs)."""
    from .multioutput import output_count

    print(f"data         {data_description}")
    outputs = output_count(model.kernel)
    if outputs is None:
        print(f"             {X.shape[0]} training / {X_test.shape[0]} held-out points, {X.shape[1]} feature(s)")
    else:
        print(f"             {X.shape[0]} training / {X_test.shape[0]} held-out (input, output) rows, "
              f"{X.shape[1] - 1} feature(s), {outputs} outputs")


def _print_model(model):
    """The report's model section: each declared part's repr."""
    print("\nmodel")
    for part in ("kernel", "likelihood", "inducing", "inference", "mean"):
        if part != "mean" or model.mean is not None:
            print(f"  {part:<11} {getattr(model, part)!r}")


def report_sampled(sampled, X, X_test, y_test, data_description, wall_time):
    """Print a sampled run's report: data, model, the sampler's settings and diagnostics, ArviZ's
    summary of the hyperparameters' draws, and the held-out metrics of the predictions integrated
    over the draws (:meth:`gpdsl.SampledPosterior.predict` and ``log_predictive``).

    Parameters
    ----------
    sampled : gpdsl.SampledPosterior
    X : ndarray, shape (N, D)
        Training inputs (a multi-output model's long rows: (n, D + 1), the output index last).
    X_test : ndarray, shape (n, D)
        Held-out inputs.
    y_test : ndarray, shape (n,)
        Held-out targets.
    data_description : str
    wall_time : float
        Model.sample's wall time in seconds (the MAP fit included).
    """
    from .io.arviz import summary

    model, d = sampled.model, sampled.diagnostics
    _print_data(model, X, X_test, data_description)
    _print_model(model)
    print("\nsampled by NUTS (Model.sample)")
    print(f"  chains x draws   {d.chains} x {d.draws} (after warmup)")
    print(f"  divergences      {d.divergences}")
    print(f"  max R-hat        {d.max_rhat:.4g} ({d.worst['max_rhat']})")
    print(f"  min ESS          bulk {d.min_ess_bulk:.4g} ({d.worst['min_ess_bulk']}), "
          f"tail {d.min_ess_tail:.4g} ({d.worst['min_ess_tail']})")
    print(f"  E-BFMI           {', '.join(f'{b:.3g}' for b in d.bfmi)}")
    print(f"  diagnostics      {'all in range' if d.ok else '; '.join(d.problems())}")
    if sampled.fixed:
        print(f"  held             {', '.join(sorted(sampled.fixed))}")
    print(f"  wall time        {wall_time:.3g} s")
    print("\nArviZ summary of the hyperparameters' draws")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = summary(sampled.to_inference_data())
    print(table.to_string())
    _print_held_out(sampled, X_test, y_test)

