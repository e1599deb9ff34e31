"""The evaluation a posterior is built from, and the checks every evaluation of a fit passes:
an evidence above the likelihood's bound on any marginal likelihood is a numerical failure, and a
fit that leaves float64's range is reported with the data's scale (:func:`out_of_range`).
Used by :mod:`gpdsl.fitting` (its objective and its final evaluation)."""
from __future__ import annotations

import numpy as np

from .components import bind

# Nats per row by which a log evidence may exceed the likelihood's bound on any marginal likelihood
# (Likelihood.log_density_bound) before it counts as a numerical failure: EP's and Laplace's
# approximations come within a small fraction of a nat per row of the true evidence, far below it.
EVIDENCE_BOUND_SLACK_PER_POINT = 0.1


def final_evaluation(model, values, X, y, Z, warm, optimize, need_grad=False, offset=None):
    """The evaluation (with its predictive state) a posterior is built from.

    It warm-starts from the local state (EP/QP sites, Pólya-Gamma c) of the optimiser's last
    evaluation, which may belong to a rejected line-search point; where that start fails
    numerically (FloatingPointError: the optimiser's signal to step back), it starts afresh.
    A failure from a fresh start too is the data's scale or the hyperparameters, raised as
    the ValueError of :func:`out_of_range`, as is a log evidence that is not finite (a posterior
    must never carry one).  A minibatch fit's evaluation (q as its steps left it, the state
    formed from q alone) runs its pass over the data, and these checks, when its log evidence is
    first read; a failure there has no fresh start to fall back on (that would move q), and
    raises the same ValueError then.

    Parameters
    ----------
    model : gpdsl.Model
        The declaration.
    values : dict of str to ndarray
        The natural hyperparameters.
    X : ndarray or Dask array, shape (N, D)
        Training inputs, checked.
    y : ndarray, shape (N,)
        Training targets, prepared by the likelihood.
    Z : ndarray, shape (M, D), or None
        The inducing inputs (None for dense methods).
    warm : object or None
        The local state to start from.
    optimize : bool
        Whether the values were fitted (the error messages say "fitted" or "declared").
    need_grad : bool, default False
        Also compute the gradient.
    offset : ndarray, shape (N,), optional
        The per-row offset of the latent input.

    Returns
    -------
    gpdsl.methods.common.Evaluation or gpdsl.methods.common.PendingEvaluation

    Raises
    ------
    ValueError
        The evaluation failed numerically from every start, or its log evidence is not finite.
    """
    where = "fitted" if optimize else "declared"

    def cannot(err):
        return out_of_range(f"the posterior at the {where} hyperparameters cannot be computed ({err})", X, y)

    def finite(evaluation):
        if not np.isfinite(evaluation.log_evidence):
            raise out_of_range(f"the log evidence at the {where} hyperparameters is {evaluation.log_evidence}",
                                X, y)
        return evaluation

    def checked(complete):
        try:
            evaluation = complete()
            check_evidence_bound(model.likelihood, values, X, y, evaluation.log_evidence)
        except FloatingPointError as err:
            raise cannot(err) from err
        return finite(evaluation)

    for start in ((warm, None) if warm is not None else (None,)):
        try:
            evaluation = model.evaluate(values, X, y, Z, need_grad=need_grad, need_state=True, warm=start,
                                        offset=offset)
            if evaluation.pending:
                return evaluation.then(checked)
            check_evidence_bound(model.likelihood, values, X, y, evaluation.log_evidence)
            return finite(evaluation)
        except FloatingPointError as err:
            failure = err
    raise cannot(failure) from failure


def check_evidence_bound(likelihood, values, X, y, log_evidence):
    """FloatingPointError when ``log_evidence`` exceeds the likelihood's upper bound on any marginal
    likelihood (``Likelihood.log_density_bound``) by more than EVIDENCE_BOUND_SLACK_PER_POINT per
    row plus one nat: no approximation comes near that, only arithmetic that lost its precision
    (EP with Student-t sites at a prior variance of 5e-42: 3e8 on 31 points, bound 14).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        The declared likelihood (bound to ``values`` here).
    values : dict of str to ndarray
        The natural hyperparameters.
    X : ndarray, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Training targets.
    log_evidence : float
        The evaluation's log evidence.

    Raises
    ------
    FloatingPointError
        ``log_evidence`` is above the bound by more than the slack.
    """
    bound = bind(likelihood, values, "likelihood").for_rows(X).log_density_bound(y)
    if bound is not None and log_evidence > bound + EVIDENCE_BOUND_SLACK_PER_POINT * y.size + 1.0:
        raise FloatingPointError(f"the log evidence {log_evidence:.6g} is above sum_n max_f log p(y_n | f) = "
                                 f"{bound:.6g}, which no marginal likelihood can exceed: the method lost its precision")


def out_of_range(what, X, y):
    """The ValueError of a fit that left float64's finite range: ``what`` happened, and the data's
    scale (the usual cause once the inputs' checks have passed) is named with the remedy.

    Parameters
    ----------
    what : str
        What happened.
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Training targets.

    Returns
    -------
    ValueError
        The error, to be raised by the caller.
    """
    return ValueError(f"fit: {what}; X spans up to {float(np.max(np.abs(X))):.3g} and y up to "
                      f"{float(np.max(np.abs(y))):.3g} in magnitude, far from the scale the declared hyperparameters "
                      "describe: standardise X and y (subtract the mean, divide by the standard deviation), or "
                      "declare the hyperparameters on the data's scale")
