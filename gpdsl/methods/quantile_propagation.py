"""Zhang et al.'s Algorithm 1 for quantile propagation (QP) with its own hyperparameters
(``QP(hyperparameters="qp")``): QP's sites swept to convergence, then the paper's eq. 4 maximised
with those sites held fixed, repeated until the hyperparameters settle.

The sweeps, the priors and the site regression are EP's (:mod:`gpdsl.methods.expectation_propagation`);
this module is the loop around them.
"""
from __future__ import annotations

import warnings
from dataclasses import replace
from functools import partial

import numpy as np

from ..multioutput import inducing_gradient, method_inducing
from ..parameters import ParameterTable
from .common import ConvergenceWarning, Evaluation, shifted
from .expectation_propagation import _is_dtc, _prior, _with_offset, run_sites, site_regression, site_start


def qp_sites(kernel, likelihood, X, y, Z=None, *, spec, warm=None, offset=None):
    """QP's sites swept to convergence from ``warm`` (Algorithm 1's inner loop).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    likelihood : gpdsl.likelihoods.Likelihood
        The observation model (its :meth:`~gpdsl.likelihoods.Likelihood.site_model`).
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Coded targets.
    Z : ndarray, shape (M, D), optional
        Inducing inputs: the FITC prior with them, the dense prior without.
    spec : gpdsl.inference.EP or gpdsl.inference.QP
        The declaration (damping, max_sweeps, tol, schedule, jitter, chunk_size, QP options).
    warm : SiteState, optional
        Sites to start from (used when there are N of them); None starts from :func:`site_start`.
    offset : ndarray, shape (N,), optional
        Per-row offset of the latent input (the likelihood sees f + offset).

    Returns
    -------
    SiteState
    """
    start = site_start(shifted(likelihood, offset), X, y)
    site, y = _with_offset(likelihood.for_rows(X).site_model(), y, offset)
    return run_sites(_prior(kernel, X, Z, spec), y, site, spec, warm, quantile=True, start=start)


def qp_outer_loop(objective, u, max_iter, *, spec):
    """Zhang et al.'s Algorithm 1 for QP from ``u`` (EP's optimum): QP sweeps to convergence
    (warm), then L-BFGS-B on eq. 4 with those sites fixed, until a round moves the free
    log-space parameters by less than ``spec.outer_tol``.  ``objective`` is the model's objective
    (gpdsl.model), whose warm start and sweep count this updates.  Returns (u, converged,
    iterations).

    Eq. 4 at fixed sites does not involve the likelihood's parameters: the steps hold them at
    their value.  A step that L-BFGS-B reports as failed away from a stationary point (gradient
    above 1e-3 per unit log-parameter; at ~1e-5 its line search can fail on rounding alone) ends
    the loop, flagged not converged.

    Parameters
    ----------
    objective : gpdsl.fitting._Objective
        The model's objective (its ``warm`` and ``total_sweeps`` are updated).
    u : ndarray, shape (P,)
        Free log-space parameters at EP's optimum.
    max_iter : int
        L-BFGS-B iteration cap per round.
    spec : gpdsl.inference.QP
        The declaration (``max_outer``, ``outer_tol``).

    Returns
    -------
    u : ndarray, shape (P,)
    converged : bool
    iterations : int
        L-BFGS-B iterations over all rounds.
    """
    model, table, iterations = objective.model, objective.table, 0
    for _ in range(spec.max_outer):
        values = table.unpack(u)
        Z = values.pop("inducing.Z", objective.Z0)
        kernel, likelihood = model.bind(values)
        offset = model.latent_offset(values, objective.X, objective.offset)
        # Z (M, D) shared by a multi-output model's outputs: the methods see its copies (as Model.evaluate's).
        Z_method = method_inducing(Z, objective.X, model.output_count)
        sites = qp_sites(kernel, likelihood, objective.X, objective.y, Z_method, spec=spec, warm=objective.warm,
                         offset=offset)
        objective.warm, objective.total_sweeps = sites, objective.total_sweeps + sites.sweeps
        held = ParameterTable([replace(e, value=np.asarray(values[e.name], dtype=float), fixed=True)
                               if e.name.startswith("likelihood.") else e for e in table.entries])
        step = objective.restricted(held, partial(evaluate_at_sites, model, spec=spec, sites=sites,
                                                  site_offset=offset))
        result = step.minimise(held.pack({**values, "inducing.Z": Z}), max_iter, False, None)
        iterations += int(result.nit)
        u_new = table.pack(held.unpack(result.x))
        moved = float(np.max(np.abs(u_new - u), initial=0.0))
        u = u_new
        if not result.success and np.max(np.abs(result.jac), initial=0.0) > 1e-3:
            warnings.warn(f"QP(hyperparameters='qp'): an L-BFGS-B step of Algorithm 1 failed: {result.message}; "
                          f"the result is flagged converged=False", ConvergenceWarning, stacklevel=5)
            return u, False, iterations
        if moved < spec.outer_tol:
            return u, True, iterations
    warnings.warn(f"QP(hyperparameters='qp'): the outer loop of Algorithm 1 did not converge in "
                  f"{spec.max_outer} rounds (outer_tol {spec.outer_tol:g}); the result is flagged "
                  f"converged=False", ConvergenceWarning, stacklevel=5)
    return u, False, iterations


def evaluate_at_sites(model, values, X, y, Z=None, *, spec, sites, site_offset=None, warm=None, need_grad=True,
                      need_state=False, offset=None):
    """Zhang et al.'s eq. (4) with the sites (tau, nu) held fixed, less its constant
    sum_i log(Z~_i / sqrt(2 pi)): log N(nu/tau | 0, K + diag(1/tau)) with the dense or FITC
    prior K, and its gradient (kernel hyperparameters, Z).  The objective of Algorithm 1's line
    15; ``y`` and ``warm`` are unused (the sites carry the data).

    Sites swept at the latent offset o_s = ``site_offset`` and held fixed in f + o have the means
    nu/tau + o_s - o at the latent offset o of ``values``: eq. 4 is then GPML's log N(mu~ | m, K +
    Sigma~), whose gradient in o, (K + diag(1/tau))^-1 (nu/tau + o_s - o), gives the mean's.

    Parameters
    ----------
    model : gpdsl.model.Model
        The model (its kernel is bound to ``values``).
    values : dict of str to ndarray
        Natural hyperparameter values by qualified name.
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Coded targets.
    Z : ndarray, shape (M, D), optional
        Inducing inputs: the FITC prior with them, the dense prior without.
    spec : gpdsl.inference.EP or gpdsl.inference.QP
        The declaration (damping, max_sweeps, tol, schedule, jitter, chunk_size, QP options).
    sites : SiteState
        The sites held fixed.
    site_offset : ndarray, shape (N,), optional
        The latent offset the sites were swept at (None: none).
    warm : object, optional
        Unused.
    offset : ndarray, optional
        The fit's per-row offset (without the mean function).
    need_grad : bool, default True
        Compute the gradients.
    need_state : bool, default False
        Build the predictive state.

    Returns
    -------
    gpdsl.methods.common.Evaluation
    """
    kernel, _ = model.bind(values)
    nu, mean = sites.nu, model.mean is not None
    if mean:
        nu = nu + sites.tau * (site_offset - model.latent_offset(values, X, offset))
    P = model.output_count
    ev = site_regression(kernel, X, method_inducing(Z, X, P), sites.tau, nu, jitter=spec.jitter,
                         chunk_size=spec.chunk_size, need_grad=need_grad, need_state=need_state, offset_grad=mean,
                         dtc=_is_dtc(spec))
    grads = dict(ev.grads)
    if mean and need_grad:
        grads.update(model.mean_gradients(values, X, grads.pop("offset")))
    return Evaluation(log_evidence=ev.log_evidence, grads=grads, dZ=inducing_gradient(ev.dZ, Z, P), jitter=ev.jitter,
                      state=ev.state)
