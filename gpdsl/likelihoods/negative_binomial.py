"""Over-dispersed counts: :class:`NegativeBinomial` with the log link and a learnt dispersion."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from ..parameters import check_hyperparameter
from .._jit.likelihoods import negative_binomial as sites
from .base import Likelihood, SiteModel
from .poisson import check_counts, log_normal_mean, rule_log_predictive


@dataclass(frozen=True, eq=False)
class NegativeBinomial(Likelihood):
    """Counts with mean mu = exp(f) and variance mu + dispersion mu^2 (the NB2 law of Cameron &
    Trivedi 2013, section 3.3; statsmodels' ``alpha``): with r = 1 / dispersion,

        p(y | f) = Gamma(y + r) / (Gamma(r) y!) (r / (r + mu))^r (mu / (r + mu))^y.

    As the dispersion goes to 0 it is Poisson(y | exp(f)).  An exposure enters as a per-row
    offset on f (``Model.fit(..., offset=log(exposure))``).

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

    def _r(self):
        return 1.0 / float(self.dispersion)

    def log_density(self, y, f):
        """log NB(y | exp(f), r), with log(r + mu) as r + log1p(exp(f - log r)) computed stably.

        Parameters
        ----------
        y, f : ndarray
        """
        r = self._r()
        log_r_mu = np.logaddexp(np.log(r), f)
        return (special.gammaln(y + r) - special.gammaln(r) - special.gammaln(y + 1.0)
                + r * np.log(r) + y * f - (r + y) * log_r_mu)

    def log_density_derivatives(self, y, f):
        """With s = mu / (r + mu) = sigmoid(f - log r): d1 = y - (r + y) s,
        d2 = -(r + y) s (1 - s), d3 = -(r + y) s (1 - s)(1 - 2 s).

        Parameters
        ----------
        y, f : ndarray
        """
        r = self._r()
        s = special.expit(f - np.log(r))
        t = special.expit(np.log(r) - f)        # 1 - s without cancellation
        w = (r + y) * s * t
        return self.log_density(y, f), y - (r + y) * s, -w, -w * (t - s)

    def log_density_param_derivatives(self, y, f, derivatives=None):
        """d/d dispersion = -r^2 d/dr, with s = mu / (r + mu), t = 1 - s:
        d/dr log p = psi(y + r) - psi(r) + log t + s - y t / r, d/dr d1 = -s + (r + y) s t / r and
        d/dr d2 = -s t - (r + y) s t (s - t) / r.

        Parameters
        ----------
        y, f : ndarray
        derivatives : tuple, optional
            Not used.
        """
        r = self._r()
        log_share = np.log(r) - np.logaddexp(np.log(r), f)          # log(r / (r + mu))
        s = special.expit(f - np.log(r))                             # mu / (r + mu)
        t = special.expit(np.log(r) - f)                             # r / (r + mu)
        d_r = special.digamma(y + r) - special.digamma(r) + log_share + s - y * t / r
        d1_r = -s + (r + y) * s * t / r
        d2_r = -s * t - (r + y) * s * t * (s - t) / r
        scale = -r * r
        return {"dispersion": (scale * d_r, scale * d1_r, scale * d2_r)}

    def site_model(self):
        """The negative-binomial site model (the generic log-concave rule), params (dispersion,)."""
        return SiteModel(sites.SITE, (float(self.dispersion),), ("dispersion",))

    def predictive(self, f_mean, f_var):
        """y_mean = E[mu] = exp(m + v/2); y_var = E[mu] + (1 + dispersion) E[mu^2] - E[mu]^2,
        written E[mu] + E[mu]^2 ((1 + dispersion) e^v - 1) (E[mu^2] = E[mu]^2 e^v): no inf - inf
        where the moments overflow.

        Parameters
        ----------
        f_mean, f_var : ndarray, shape (n,)
        """
        first = log_normal_mean(f_mean, f_var)
        spread = float(self.dispersion) * np.exp(f_var) + np.expm1(f_var)
        with np.errstate(over="ignore"):
            return {"y_mean": first, "y_var": first + first * first * spread}

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
        r = self._r()
        return rng.poisson(rng.gamma(r, np.exp(f) / r)).astype(float)

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
