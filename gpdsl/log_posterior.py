"""The log posterior of the hyperparameters on the unconstrained scale, which both of
:meth:`gpdsl.Model.sample`'s targets build on: :mod:`gpdsl.sampling` (f integrated out by the
method's evidence) and :mod:`gpdsl.latent_joint` (f sampled with the hyperparameters).

    log p(u | y) = log p(y | theta(u)) + sum log p(theta(u)) + log |d theta / d u|,

u the optimiser's unconstrained scale (:class:`gpdsl.parameters.ParameterTable`: log theta for a
positive hyperparameter, the logit of its place in (low, high) for a bounded one, theta itself for
a real one); :mod:`gpdsl.sampling`'s docstring gives the terms.  Its own module, below both
targets, so that neither imports the other.
"""
from __future__ import annotations

import numpy as np
from scipy import special

from . import fitting

__all__ = ["LogPosterior", "check_priors"]


def check_priors(table):
    """Every sampled entry of ``table`` must carry a prior whose support covers the entry's domain.

    Parameters
    ----------
    table : gpdsl.parameters.ParameterTable

    Raises
    ------
    ValueError
        Naming the free entries without a prior (with the remedy), or an entry whose prior's
        support is narrower than the values the entry may take.
    """
    missing = [e.name for e in table.free if e.prior is None]
    if missing:
        raise ValueError(f"Model.sample: the hyperparameter(s) {missing} carry no prior; a posterior needs one on "
                         f"every sampled parameter: declare a prior (e.g. gd.priors.HalfNormal(1.0), "
                         f"gd.priors.Gamma(2.0, 1.0)) or hold them with fixed={tuple(missing)!r}")
    for e in table.free:
        low, high = e.prior.support
        domain = e.bounds if e.bounds is not None else ((0.0, np.inf) if e.positive else (-np.inf, np.inf))
        if low > domain[0] or high < domain[1]:
            raise ValueError(f"Model.sample: {e.name} takes values in ({domain[0]:g}, {domain[1]:g}) but its prior "
                             f"{e.prior!r} has support ({low:g}, {high:g}); the sampler would leave it; declare a "
                             f"prior on ({domain[0]:g}, {domain[1]:g})")


class LogPosterior:
    """log p(u | y) on the unconstrained scale (module docstring) and its gradient.

    Parameters
    ----------
    model : gpdsl.Model
        The declaration (resolved, with the likelihood's labels: ``post.model``).
    table : gpdsl.parameters.ParameterTable
        The sampled entries (``table.free``) and the held ones.
    X : ndarray, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Training targets as the likelihood codes them.
    Z : ndarray, shape (M, D), or None
        Inducing inputs (None for a dense method).

    Notes
    -----
    Calling it with u (P,) returns ``(log p(u | y) + const, gradient (P,))``; a point where the
    evidence cannot be computed (a failed factorisation, an overflow) gives ``(-inf, zeros)``,
    which :func:`gpdsl.nuts.sample` counts as a divergence.  A method with a local state (EP's
    sites) starts each evaluation from the previous one's.
    """

    def __init__(self, model, table, X, y, Z):
        check_priors(table)
        self.table = table
        # The method's own evaluation (not a fit's loosened one): EP's sites to its tol.
        self.objective = fitting._Objective(model, table, X, y, Z, evaluate=model.evaluate)

    def log_jacobian(self, u):
        """log |d theta / d u| and its gradient in u (module docstring).

        Parameters
        ----------
        u : ndarray, shape (P,)

        Returns
        -------
        value : float
        gradient : ndarray, shape (P,)
        """
        value, gradient, offset = 0.0, np.zeros_like(u), 0
        for e in self.table.free:
            chunk = u[offset:offset + e.size]
            if e.bounds is not None:
                low, high = e.bounds
                # log(expit(u) (1 - expit(u))) + log(high - low), from log-expit for large |u|.
                value += (float(np.sum(special.log_expit(chunk) + special.log_expit(-chunk)))
                          + e.size * np.log(high - low))
                gradient[offset:offset + e.size] = 1.0 - 2.0 * special.expit(chunk)
            elif e.positive:
                value += float(np.sum(chunk))
                gradient[offset:offset + e.size] = 1.0
            offset += e.size
        return value, gradient

    def __call__(self, u):
        u = np.asarray(u, dtype=float)
        negated, negated_gradient = self.objective(u)
        if not np.isfinite(negated):
            return -np.inf, np.zeros_like(u)
        jacobian, jacobian_gradient = self.log_jacobian(u)
        return -negated + jacobian, -negated_gradient + jacobian_gradient
