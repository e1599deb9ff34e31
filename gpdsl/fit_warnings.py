"""The convergence warnings of :func:`gpdsl.fitting.fit`: one ``ConvergenceWarning`` for each
way a fit fell short that its record (:class:`gpdsl.diagnostics.FitDiagnostics`) holds, and the
constant-model flag (:func:`no_better_than_constant`)."""
from __future__ import annotations

import warnings

import numpy as np

from .components import bind
from .methods import stochastic
from .methods.common import ConvergenceWarning

# Objective margin (nats) over the constant model below which a fit is flagged (no_better_than_constant).
CONSTANT_MODEL_TOL = 1e-3
# A minibatch fit's smoothed batch estimate of its objective (the mean over its stopping rule's last
# window) that clears the constant model's by more than this share of the constant's size (plus
# CONSTANT_MODEL_TOL) settles that check without the full-data bound, whose pass then waits until
# the posterior's log_evidence is read.  The estimate lags q and carries batch noise, both well below
# this share: on twonorm at N = 10^6 (seeds 0 and 1, minibatch SVGP and stochastic Pólya-Gamma) it
# was 170 to 880 nats from the full-data bound, 0.02 to 0.13 % of the constant's 693,147, against
# a clearance of 90 % of it.
CONSTANT_SCREEN_SHARE = 0.01


def local_cap_reached(model, local):
    """Whether the method's local iteration stopped at its cap (else it stalled below it).

    Parameters
    ----------
    model : gpdsl.Model
        Its inference method's cap (``max_sweeps``, ``max_iter`` or ``q_max_iter``) is read.
    local : object
        The method's local state at the optimum (``sweeps``).

    Returns
    -------
    bool
    """
    cap = next((getattr(model.inference, a) for a in ("max_sweeps", "max_iter", "q_max_iter")
                if hasattr(model.inference, a)), None)
    return cap is None or local.sweeps >= cap


def warn_unconverged(model, diagnostics, fit, local, n, subsample=None, subsample_settled=True):
    """One ConvergenceWarning for each way the fit fell short that its record holds: a ridge (not
    for a fit already flagged as the constant model, which its own warning explains), the
    optimiser's stop, the final gradient, the local iteration.  A cap of the reinit loop or the
    selection warns where it is reached (``gpdsl.fitting._reinit_loop``, the inducing spec).

    Parameters
    ----------
    model : gpdsl.Model
    diagnostics : gpdsl.diagnostics.FitDiagnostics
        The fit's record.
    fit : gpdsl.fitting.FitResult
        The kept round.
    local : object or None
        The method's local state at the optimum (``sweeps``, ``converged``).
    n : int
        The fit's rows (a minibatch fit's remedies depend on it: :func:`gpdsl.methods.stochastic.remedy`).
    subsample : int, optional
        The rows of a ``fit(subsample=n)`` that was not refined on all rows: its gradient is the
        full objective's at the subsample's optimum, and the remedy is to refine.
    subsample_settled : bool, default True
        Whether that subsample's fit met its own rows' tolerance; if not, its remedies are named too.
    """
    name = type(model.inference).__name__
    if diagnostics.ridge is not None and not diagnostics.constant_model:
        warn_ridge(diagnostics.ridge, *fit.ridge_move, diagnostics.message, model.likelihood.ridge_cause)
    stop = diagnostics.stop_reason
    if stop in ("max_iter", "line_search") and diagnostics.ridge is None:
        warnings.warn(f"{name}: the hyperparameter optimisation did not converge ({stop}: {diagnostics.message}); "
                      "the result is flagged converged=False", ConvergenceWarning, stacklevel=5)
    elif (stop not in ("max_iter", "line_search", "outer_loop") and diagnostics.ridge is None
          and not diagnostics.converged and not diagnostics.grad_norm <= diagnostics.grad_tol):
        # A minibatch fit's remedies are its own: the polish, the full-batch method, more steps.
        remedy = (stochastic.remedy(model.inference, n, int(getattr(model.likelihood, "n_latent", 1))) if fit.minibatch
                  else "raise max_iter, or continue with fit(..., start=post.values)")
        if subsample is not None:
            remedy = (f"the gradient is all rows' at the optimum of fit(subsample={subsample})'s {subsample} rows: "
                      f"fit(..., subsample={subsample}, refine=True) continues on all rows from there, or take a "
                      "larger subsample" + ("" if subsample_settled else f"; on the subsample: {remedy}"))
        warnings.warn(f"{name}: the optimiser stopped ({stop}: {diagnostics.message}) after "
                      f"{diagnostics.optimizer_restarts} restart(s) with the gradient still large: "
                      f"|d objective / d {diagnostics.grad_name}| = {diagnostics.grad_norm:.3g} > "
                      f"{diagnostics.grad_tol:.3g}; the result is flagged converged=False ({remedy})",
                      ConvergenceWarning, stacklevel=5)
    # A minibatch run's q is the optimiser's (its flag is the stopping rule's, warned about above).
    if local is not None and not local.converged and not fit.minibatch:
        # ``sweeps`` counts the method's accepted local iterations (EP/QP site sweeps, c
        # updates, natural-gradient steps): below the cap they stopped because no step could
        # raise the objective any more, which the message must not call running out of sweeps.
        why = (f"did not converge in {local.sweeps} sweeps" if "max_sweeps" in diagnostics.caps_reached
               else f"stalled after {local.sweeps} accepted local updates (no step raised the objective)")
        warnings.warn(f"{name} {why} (tol {model.inference.tol:g}); the result is flagged converged=False",
                      ConvergenceWarning, stacklevel=5)


def warn_ridge(name, start, end, entry, how, cause):
    """One ConvergenceWarning for a run that ended on an evidence ridge.

    Parameters
    ----------
    name : str
        The hyperparameter that ran away.
    start, end : float
        The value of its element that moved, at the start and at the end of the run.
    entry : tuple of int or None
        That element's index in an array hyperparameter (None for a scalar).
    how : str
        How the run ended (the optimiser's message).
    cause : str
        The likelihood's usual cause (``Likelihood.ridge_cause``), for a hyperparameter that grew.
    """
    prior = ("gd.priors.LogNormal(0.0, 2.0)" if start > 0 and end > 0
             else "gd.priors.ScipyPrior(scipy.stats.norm(0.0, 3.0), initial=0.0)")
    label = name if entry is None else f"{name}[{', '.join(str(int(i)) for i in entry)}]"
    if 0 < end < start:
        # A positive hyperparameter collapsing (the ridge rule does not count a kernel variance or a
        # length-scale moving that way) is a noise variance the latent function has absorbed.
        cause = ("it fell towards 0: the latent function interpolates those targets (near-duplicate inputs, or "
                 "an output that another output explains exactly), so the noise left is unidentified")
    warnings.warn(f"L-BFGS-B stopped on an evidence ridge ({how}): {label} ran from {start:.3g} to {end:.3g} "
                  f"while the objective barely changed, and would keep running: {cause}. The fit is usable; to "
                  f"pin {name} down put a prior on it, e.g. {name.split('.')[-1]}={prior} (flagged ridge={name!r})",
                  ConvergenceWarning, stacklevel=6)


def no_better_than_constant(model, X, y, fit):
    """Warn (ConvergenceWarning) and return True when the objective of ``fit`` (a FitResult) is
    within CONSTANT_MODEL_TOL nats of the constant model's (``constant_model_log_likelihood`` of the
    rows' likelihood ``for_rows(X)``: per output for OutputGaussian, PerOutput), which every method
    here reaches exactly as the kernel variance goes to 0.  That is a true optimum (the Pólya-Gamma
    bound falls into it on crabs with K-means Z, 5 of 50 splits; raw Boston housing, targets ~22 and
    inputs up to ~700, fits noise 584 and predicts 0) and the right answer for targets that
    do not depend on X, but usually a poor one: it predicts the same everywhere.

    A minibatch fit whose smoothed batch estimate clears the constant model by more than
    CONSTANT_SCREEN_SHARE of its size is not flagged without its full-data bound (on twonorm at
    N = 10^6, minibatch SVGP: estimate -65,822 against the bound's -65,434, constant -693,147).

    Parameters
    ----------
    model : gpdsl.Model
        The fitted model.
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Training targets, prepared by the likelihood.
    fit : gpdsl.fitting.FitResult
        The kept round.

    Returns
    -------
    bool
        Whether the fit is flagged ``constant_model``.
    """
    values, evaluation = fit.values, fit.evaluation
    constant = bind(model.likelihood, values, "likelihood").for_rows(X).constant_model_log_likelihood(y)
    if constant is None:
        return False
    if evaluation.pending and fit.objective_estimate is not None:
        clearance = fit.objective_estimate - fit.log_prior - constant
        if clearance >= CONSTANT_MODEL_TOL + CONSTANT_SCREEN_SHARE * abs(constant):
            return False
    log_evidence = evaluation.log_evidence
    if log_evidence - constant >= CONSTANT_MODEL_TOL:
        return False
    variance = float(np.max(values.get("kernel.variance", np.nan)))
    cause = ("the kernel variance has collapsed" if variance < 1e-4 else
             f"the fit failed at kernel variance {variance:.3g}" if variance > 1e8 else
             "the posterior ignores X")
    warnings.warn(f"{type(model.inference).__name__}: the fitted objective {log_evidence:.6g} is no better "
                  f"than the constant model's {constant:.6g} ({cause}); if the targets depend on X, "
                  "standardise the data (fit(standardize=True)) or refit with restarts= or other "
                  "starting values (flagged constant_model=True)", ConvergenceWarning, stacklevel=5)
    return True
