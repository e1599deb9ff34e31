"""Over-dispersed counts: :class:`NegativeBinomial` with the log link and a learnt dispersion."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..parameters import check_hyperparameter
from .._jit.likelihoods import negative_binomial as sites
from .base import Likelihood, SiteModel
from .poisson import check_counts, log_normal_mean, log_normal_spread, rule_log_predictive


@dataclass(frozen=True, eq=False)
class NegativeBinomial(Likelihood):
    """Counts with mean mu = exp(f) and variance mu + dispersion mu^2 (the NB2 law of Cameron &
    Trivedi 2013, section 3.3; statsmodels' ``alpha``): with r = 1 / dispersion,

        p(y | f) = Gamma(y + r) / (Gamma(r) y!) (r / (r + mu))^r (mu / (r + mu))^y.

    As the dispersion goes to 0 it is Poisson(y | exp(f)), which the log pmf and every derivative
    reach smoothly: they are accurate to 1e-10 relative (plus the rounding of the terms they sum)
    for dispersions from 1e-30 to 1e3 and counts to 1e6 (``tests/test_likelihood_limits.py``,
    against mpmath).  An exposure enters as a per-row offset on f
    (``Model.fit(..., offset=log(exposure))``).

    Parameters
    ----------
    dispersion : float, Fixed or prior, default 1.0
        The positive dispersion alpha = 1 / r (a scalar, learnt by default).

    Raises
    ------
    TypeError, ValueError
        A dispersion that is not a positive finite scalar, ``Fixed`` or prior.
    """

    dispersion: object = 1.0
    hyperparameters = ("dispersion",)
    target_kind = "count"
    # The log pmf and its derivatives are written through _terms (Likelihood.__init_subclass__).
    density_functions = ("log_density", "log_density_derivatives", "_terms")
    ridge_cause = ("the latent scale grows while the dispersion falls: the counts look Poisson with a rate the "
                   "kernel cannot follow smoothly")

    def __post_init__(self):
        check_hyperparameter("NegativeBinomial", "dispersion", self.dispersion, ndim_max=0)

    @classmethod
    def variants(cls):
        return (cls(dispersion=0.4),)

    def prepare_targets(self, y):
        """The counts as they are; raises unless they are non-negative integers.

        Parameters
        ----------
        y : ndarray, shape (N,)

        Returns
        -------
        ndarray, shape (N,)
        """
        return check_counts("NegativeBinomial", y)

    def _terms(self, y, f):
        """:func:`gpdsl._jit.likelihoods.negative_binomial.terms` over y, f broadcast: (7, *shape)."""
        y, f = np.broadcast_arrays(np.asarray(y, dtype=float), np.asarray(f, dtype=float))
        flat = sites.terms_many(np.ascontiguousarray(y).ravel(), np.ascontiguousarray(f).ravel(),
                                float(self.dispersion))
        return flat.reshape((7,) + y.shape)

    def log_density(self, y, f):
        """log NB(y | exp(f), 1 / dispersion), accurate to its Poisson limit: with a = dispersion,
        x = a e^f, G(y, a) = lgamma(y + 1/a) - lgamma(1/a) + y log a (its series in a y for
        a <= 0.1, where the lgamma difference would lose it),
        log p = G(y, a) - lgamma(y + 1) + y f - (y + 1/a) log1p(x)
        (:mod:`gpdsl._jit.likelihoods.negative_binomial`).

        Parameters
        ----------
        y, f : ndarray
        """
        return self._terms(y, f)[0]

    def log_density_derivatives(self, y, f):
        """With t = 1 / (1 + a e^f), s = 1 - t and m = e^f t: d1 = y t - m,
        d2 = -(1 + a y) m t, d3 = d2 (t - s) (Poisson's y - mu, -mu, -mu at a = 0).

        Parameters
        ----------
        y, f : ndarray
        """
        return tuple(self._terms(y, f)[:4])

    def log_density_param_derivatives(self, y, f, derivatives=None):
        """d/d dispersion a, with t, m and G as in :meth:`log_density_derivatives` and
        :meth:`log_density`: d log p / da = dG/da + (log1p(x) - x / (1 + x)) / a^2 - y m,
        d d1 / da = -m d1, d d2 / da = m t (2 (1 + a y) m - y); at the Poisson limit
        d log p / da = ((y - mu)^2 - y) / 2.

        Parameters
        ----------
        y, f : ndarray
        derivatives : tuple, optional
            Not used.
        """
        values = self._terms(y, f)
        return {"dispersion": (values[4], values[5], values[6])}

    def site_model(self):
        """The negative-binomial site model (the generic log-concave rule), params (dispersion,)."""
        return SiteModel(sites.SITE, (float(self.dispersion),), ("dispersion",))

    def predictive(self, f_mean, f_var):
        """y_mean = E[mu] = exp(m + v/2); y_var = E[mu] + (1 + dispersion) E[mu^2] - E[mu]^2,
        written E[mu] + E[mu]^2 ((1 + dispersion) e^v - 1) (E[mu^2] = E[mu]^2 e^v) and taken from
        its logarithm (:func:`gpdsl.likelihoods.poisson.log_normal_spread`): no inf - inf, nor
        0 * inf, where the moments overflow or underflow.

        Parameters
        ----------
        f_mean, f_var : ndarray, shape (n,)
        """
        first = log_normal_mean(f_mean, f_var)
        return {"y_mean": first, "y_var": first + log_normal_spread(f_mean, f_var, float(self.dispersion))}

    def log_predictive(self, f_mean, f_var, y):
        """log E[NB(y | exp(f), r)] under N(f_mean, f_var), by the likelihood's quadrature rule
        in log space.

        Parameters
        ----------
        f_mean, f_var, y : ndarray, shape (n,)
        """
        return rule_log_predictive(self, f_mean, f_var, y)

    def sample(self, f, rng):
        """Counts drawn from NB(exp(f), r) as a Gamma-Poisson mixture.

        Parameters
        ----------
        f : ndarray
        rng : numpy.random.Generator
        """
        a = float(self.dispersion)
        return rng.poisson(rng.gamma(1.0 / a, np.exp(f) * a)).astype(float)

    def surrogate(self, X, y):
        """The Gaussian pseudo-regression of a Newton step at f = log(y + 1/2): weights
        -d2 there, targets f (weighted).

        Parameters
        ----------
        X : ndarray, shape (N, D)
        y : ndarray, shape (N,)
        """
        f0 = np.log(y + 0.5)
        w = -self.log_density_derivatives(y, f0)[2]
        return w, w * f0

    def log_density_bound(self, y):
        # At mu = y (log density 0 at y = 0 as mu -> 0).
        y_pos = np.where(y > 0, y, 1.0)
        at_y = self.log_density(y, np.log(y_pos))
        return float(np.sum(np.where(y > 0, at_y, 0.0)))

    def describe(self):
        """``NegativeBinomial(log)``.

        Returns
        -------
        str
        """
        return "NegativeBinomial(log)"


__all__ = ["NegativeBinomial"]
