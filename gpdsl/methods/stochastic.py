"""The minibatch optimiser of the uncollapsed variational methods for large N: SVGP
(``gd.inference.SVGP(batch_size=B)``) and stochastic Pólya-Gamma classification
(``gd.inference.PolyaGamma(minibatch=B)``, the same steps on the closed-form expectations of
:mod:`gpdsl.methods.stochastic_polya_gamma`).

Hensman, Fusi & Lawrence (2013) and Hensman, Matthews & Ghahramani (2015, section 3): the bound
is a sum over data points plus a KL term, so a batch of B rows drawn at random, its data term
times N / B, is an unbiased estimate of it and of its gradient.  Each step (Salimbeni,
Eleftheriadis & Hensman 2018, "Natural gradients in practice"):

1. a natural-gradient step of size ``natural_step`` on q(v) from the batch
   (:func:`gpdsl.methods.svgp.minibatch_step`);
2. an Adam step (Kingma & Ba 2015, their defaults beta1 = 0.9, beta2 = 0.999, eps = 1e-8) of size
   ``learning_rate`` on the free log-space vector of hyperparameters (and optimised Z) along the
   batch's gradient at the new q (SVGP: a second pass over the batch) or, with ``one_pass``, at
   the q the step started from (stochastic Pólya-Gamma: one pass gives both steps), log priors
   included.

Every step is O(B M^2 + M^3); nothing of size N is formed.  The q reached is left as the
objective's warm start (flagged converged: the run has no convergence test); the model's final
evaluation reports the full-batch bound and the prediction at that q, one O(N M^2) pass.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import OptimizeResult

from .common import VariationalState
from .svgp import initial_values, minibatch_step

_ADAM_BETA1, _ADAM_BETA2, _ADAM_EPS = 0.9, 0.999, 1e-8


def minimise(objective, u0, max_iter, progress, callback, *, spec, likelihood=None, one_pass=False):
    """``max_iter`` minibatch steps from ``u0`` on ``objective`` (gpdsl.model's objective: its
    parameter table, data, Z and warm start); returns an OptimizeResult as L-BFGS-B's run does
    (``fun``: the last batch's estimate of the negative objective, ``success`` True: a stochastic
    run has no convergence test, it runs its steps).

    ``spec``: the inference declaration, read for ``batch_size``, ``seed``, ``natural_step``,
    ``learning_rate`` and ``jitter`` (its class names it in errors).  ``likelihood``: what the
    batch's expected log-likelihood is integrated by (its ``variational_expectations``); None:
    the model's likelihood.  ``one_pass``: each step's gradient is taken at the q it starts
    from, one pass over the batch, rather than at the q it moves to (see
    :func:`gpdsl.methods.svgp.minibatch_step`).

    Parameters
    ----------
    objective : gpdsl.model._Objective
        The model's objective; its ``warm`` is set to the final :class:`VariationalState`.
    u0 : ndarray, shape (P,)
        Free log-space starting vector.
    max_iter : int
        Number of minibatch steps.
    progress : bool
        Print each step.
    callback : callable or None
        Called each step with ``{"iteration", "objective", "grad_norm"}``.
    spec : gpdsl.inference.SVGP or gpdsl.inference.PolyaGamma
        The declaration.
    likelihood : gpdsl.likelihoods.Likelihood, optional
        What the expected log-likelihood integrates (None: the model's).
    one_pass : bool, default False
        Take the gradient at the q each step starts from.

    Returns
    -------
    scipy.optimize.OptimizeResult
        With ``x``, ``fun``, ``success`` (True), ``nit``, and gpdsl's ``plateau``, ``runaway``
        and ``start`` fields.
    """
    model, table, X, y = objective.model, objective.table, objective.X, objective.y
    likelihood = model.likelihood if likelihood is None else likelihood
    n = X.shape[0]
    batch = min(spec.batch_size, n)
    rng = np.random.default_rng(spec.seed)
    u = np.array(u0, dtype=float)
    first, second = np.zeros_like(u), np.zeros_like(u)
    values = table.unpack(u)
    Z = values.get("inducing.Z", objective.Z0)
    q = initial_values(Z.shape[0])
    # A re-selection round (the inducing spec's reinit loop) may have changed M: its q then
    # does not fit, and the steps start from the prior, as a fresh fit does.
    if objective.warm is not None and all(np.shape(objective.warm.q[k]) == np.shape(v) for k, v in q.items()):
        q = objective.warm.q
    elif model.likelihood.sign_symmetric:
        q = spec.surrogate_q(model.kernel, model.likelihood, {k: v for k, v in values.items() if k != "inducing.Z"},
                             X, y, Z)
    estimate = np.nan
    for step in range(1, max_iter + 1):
        rows = rng.choice(n, size=batch, replace=False)
        values = table.unpack(u)
        Z = values.pop("inducing.Z", objective.Z0)
        q, elbo, grads, dZ, _ = minibatch_step(model.kernel, likelihood, values, X[rows], y[rows], Z, q,
                                               scale=n / batch, rho=spec.natural_step, jitter=spec.jitter,
                                               one_pass=one_pass)
        if "inducing.Z" in table.names():
            grads["inducing.Z"] = dZ
            values["inducing.Z"] = Z
        log_prior, prior_grads = table.log_prior(values)
        table.check_gradients(type(spec).__name__, grads)
        for name, g in prior_grads.items():
            grads[name] = grads[name] + g
        estimate = -(elbo + log_prior)
        g = -table.chain(values, grads)
        first = _ADAM_BETA1 * first + (1.0 - _ADAM_BETA1) * g
        second = _ADAM_BETA2 * second + (1.0 - _ADAM_BETA2) * g * g
        u = u - spec.learning_rate * (first / (1.0 - _ADAM_BETA1 ** step)) / (
            np.sqrt(second / (1.0 - _ADAM_BETA2 ** step)) + _ADAM_EPS)
        report = {"iteration": step, "objective": float(estimate), "grad_norm": float(np.linalg.norm(g))}
        if progress:
            print(f"step {step:6d}  batch objective {report['objective']: .10g}  |grad| {report['grad_norm']:.3e}",
                  flush=True)
        if callback is not None:
            callback(report)
    objective.warm = VariationalState(q, sweeps=max_iter, converged=True)
    return OptimizeResult(x=u, fun=float(estimate), success=True, nit=max_iter, jac=None, plateau=False,
                          runaway=None, start=u0, message=f"{max_iter} minibatch steps of {batch} rows")
