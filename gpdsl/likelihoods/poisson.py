"""Counts: :class:`Poisson` with the log link (rate exp(f), the GLM's) or the square link (rate
f^2, the QP paper's), the closed-form E[log f^2] of the square link's variational expectations
(:func:`expected_log_square`), and helpers the count likelihoods share."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from .._jit.likelihoods import poisson as sites
from .base import Likelihood, SiteModel
from .density_integrals import log_gaussian_integral

LINKS = ("square", "log")


def check_counts(owner, y):
    """The counts as they are; ValueError unless they are non-negative integers.

    Parameters
    ----------
    owner : str
        The likelihood's name, for the message.
    y : ndarray, shape (N,)

    Returns
    -------
    ndarray, shape (N,)
    """
    if np.any(y < 0) or np.any(y != np.round(y)):
        raise ValueError(f"{owner}: y must hold non-negative integer counts")
    return y


def log_normal_mean(f_mean, f_var):
    """E[exp(f)] under f ~ N(f_mean, f_var) (inf where it overflows).

    Parameters
    ----------
    f_mean, f_var : ndarray, shape (n,)

    Returns
    -------
    ndarray, shape (n,)
    """
    with np.errstate(over="ignore"):
        return np.exp(f_mean + 0.5 * f_var)


def log_normal_spread(f_mean, f_var, dispersion=0.0):
    """(1 + dispersion) E[exp(2f)] - E[exp(f)]^2 under f ~ N(f_mean, f_var): the part of a
    log-link count's predictive variance beyond E[exp f] (dispersion 0: Var[exp f]).

    It is exp(2 m + 2 v) (dispersion - expm1(-v)), taken from its logarithm: written as
    E[exp f]^2 ((1 + dispersion) e^v - 1) the square underflows to 0 where e^v overflows (a far
    held-out point under a large kernel variance) and the product is 0 * inf = NaN, where the
    value itself is 0 (or inf where its logarithm exceeds float64's range).

    Parameters
    ----------
    f_mean, f_var : ndarray, shape (n,)
    dispersion : float, default 0

    Returns
    -------
    ndarray, shape (n,)
    """
    with np.errstate(over="ignore", divide="ignore"):
        return np.exp(2.0 * (f_mean + f_var) + np.log(dispersion - np.expm1(-f_var)))


def rule_log_predictive(likelihood, f_mean, f_var, y):
    """log E[p(y | f)] under N(f_mean, f_var) by the rule centred on the tilted mode
    (:func:`gpdsl.likelihoods.density_integrals.log_gaussian_integral`; Gauss-Hermite on q was
    8.8e-3 nats off at y = 50, q = N(0, 1)).

    Parameters
    ----------
    likelihood : Likelihood
        A bound likelihood with ``log_density`` and ``log_density_derivatives``.
    f_mean, f_var, y : ndarray, shape (n,)

    Returns
    -------
    ndarray, shape (n,)
    """
    return log_gaussian_integral(likelihood, y, f_mean, f_var)

# E[log f^2] under N(m, v): Gauss-Legendre nodes of Dawson's integral (a = m^2 / 2v below
# 1 / _LOG_SQUARE_ASYMPTOTIC_S) and the terms of the asymptotic series in s = 2v / m^2 above it.
# At the switch (s = 0.01) both are accurate to ~1e-14 relative in the value and both
# derivatives (at s = 0.02 the series' d/dv was off by 1e-11: its 13th term).
_LOG_SQUARE_NODES = 40
_LOG_SQUARE_ASYMPTOTIC_S = 0.01
_LOG_SQUARE_SERIES_TERMS = 12


@lru_cache(maxsize=1)
def _log_square_rule():
    """Gauss-Legendre nodes and weights on [-1, 1], and the series coefficients
    c_k = (2k - 1)!! / (2^k k), k = 1 .. _LOG_SQUARE_SERIES_TERMS."""
    x, w = np.polynomial.legendre.leggauss(_LOG_SQUARE_NODES)
    k = np.arange(1, _LOG_SQUARE_SERIES_TERMS + 1)
    return x, w, special.factorial2(2 * k - 1) / (2.0 ** k * k)


def expected_log_square(mean, var):
    """E[log f^2] under f ~ N(mean, var), and its derivatives in mean and var, in closed form.

    f^2 / v is noncentral chi-square with one degree of freedom and noncentrality 2a,
    a = m^2 / (2v): a Poisson(a) mixture of chi-square laws with 1 + 2j degrees of freedom, whose
    E[log] is log 2 + psi(1/2 + j).  Summing the mixture (d/da of the Poisson weights telescopes
    the digammas) gives ::

        E[log f^2] = log(2v) + h(a),   h(a) = psi(1/2) + 4 int_0^sqrt(a) D(x) dx,
        h'(a) = g(a) = 2 D(sqrt a) / sqrt a

    with D Dawson's integral (the quantity Lloyd et al. 2015 write through their G~ function, here
    through scipy's ``dawsn``): d/dm = g m / v, d/dv = (1 - a g) / v.  For large a (s = 1/a
    small, v -> 0 included) the asymptotic series of D gives
    E = log m^2 - sum_k c_k s^k, c_k = (2k - 1)!! / (2^k k), d/dm = (2/m)(1 + sum_k k c_k s^k),
    d/dv = -(2/m^2) sum_k k c_k s^(k-1); it is used below s = 0.01, where its truncation error
    is ~1e-14.  At m = v = 0 the expectation is -inf; a NaN mean or variance gives NaNs; a
    variance below 0 (rounding in a marginal variance) is taken as 0.

    Parameters
    ----------
    mean : ndarray, shape (n,)
        Means m of f.
    var : ndarray, shape (n,)
        Variances v of f, >= 0.

    Returns
    -------
    value : ndarray, shape (n,)
        E[log f^2].
    d_mean : ndarray, shape (n,)
        d value / d mean.
    d_var : ndarray, shape (n,)
        d value / d var.
    """
    x, w, c = _log_square_rule()
    mean, var = np.broadcast_arrays(np.asarray(mean, dtype=float), np.maximum(np.asarray(var, dtype=float), 0.0))
    m2 = mean * mean
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(m2 > 0.0, 2.0 * var / np.where(m2 > 0.0, m2, 1.0), np.inf)
    value, d_mean, d_var = (np.empty_like(m2) for _ in range(3))
    far = s < _LOG_SQUARE_ASYMPTOTIC_S
    if np.any(far):
        powers = s[far][:, None] ** np.arange(_LOG_SQUARE_SERIES_TERMS)      # s^(k-1)
        k_series = powers @ (np.arange(1, _LOG_SQUARE_SERIES_TERMS + 1) * c)  # sum k c_k s^(k-1)
        value[far] = np.log(m2[far]) - s[far] * (powers @ c)
        d_mean[far] = 2.0 / mean[far] * (1.0 + s[far] * k_series)
        d_var[far] = -2.0 / m2[far] * k_series
    near = ~far
    if np.any(near):
        v, m = var[near], mean[near]
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.where(m2[near] > 0.0, m2[near] / (2.0 * v), 0.0)
            root = np.sqrt(a)
            dawson_integral = 0.5 * root * (special.dawsn(root[:, None] * (x[None, :] + 1.0) * 0.5) @ w)
            g = np.where(root > 0.0, 2.0 * special.dawsn(root) / np.where(root > 0.0, root, 1.0), 2.0)
            value[near] = np.log(2.0 * v) + special.digamma(0.5) + 4.0 * dawson_integral
            d_mean[near] = g * m / v
            d_var[near] = (1.0 - a * g) / v
    unknown = np.isnan(mean) | np.isnan(var)   # m2 > 0 is False for NaN: it took the m = 0 branch
    for out in (value, d_mean, d_var):
        out[unknown] = np.nan
    return value, d_mean, d_var


@dataclass(frozen=True, eq=False)
class Poisson(Likelihood):
    """Counts y ~ Poisson(rate).

    ``link="log"``: rate exp(f), the Poisson GLM's; log p = y f - exp(f) - log y!, with
    derivatives for Laplace and closed-form variational expectations.  An exposure t enters as
    the per-row offset log t (``Model.fit(X, y, offset=np.log(t))``: rate t exp(f)).

    ``link="square"`` (the default, for the QP paper): rate f^2 (QP paper Appendix C.2),
    p(y | f) = f^(2y) e^(-f^2) / y!.  Its log |f| is singular at f = 0, so it gives no
    :meth:`~Likelihood.log_density_derivatives` (no Laplace); its variational expectations are in
    closed form.

    Parameters
    ----------
    link : {"square", "log"}, default "square"
        The link: rate f^2 or exp(f).

    Raises
    ------
    ValueError
        Any other link.
    """

    link: str = "square"
    target_kind = "count"

    def __post_init__(self):
        if self.link not in LINKS:
            raise ValueError(f"Poisson: link must be 'square' or 'log', got {self.link!r}")

    @property
    def sign_symmetric(self):
        return self.link == "square"

    @property
    def predictive_approximation(self):
        """What the log predictive density approximates the exact one by, or None where it is exact
        (the conformance suite checks an exact one against quadrature, an approximate one for
        summing to 1): the square link's moment-matched negative binomial (QP paper Appendix H)."""
        return "moment-matched negative binomial (QP paper, Appendix H)" if self.link == "square" else None

    @classmethod
    def variants(cls):
        """The square and the log link.

        Returns
        -------
        tuple of Poisson
        """
        return (cls("square"), cls("log"))

    def provides(self, capability):
        if capability == "log_density_derivatives":
            return self.link == "log"
        return super().provides(capability)

    def prepare_targets(self, y):
        """The counts as they are; raises unless they are non-negative integers.

        Parameters
        ----------
        y : ndarray, shape (N,)
            Checked float targets.

        Returns
        -------
        ndarray, shape (N,)

        Raises
        ------
        ValueError
            If the targets are not valid for the likelihood.
        """
        return check_counts("Poisson", y)

    def log_density_derivatives(self, y, f):
        """Log link: y f - exp(f) - log y!, y - exp(f), -exp(f), -exp(f).

        Parameters
        ----------
        y, f : ndarray
        """
        if self.link != "log":
            raise self._unsupported("derivatives of its log density (the square link's log |f| is singular at 0)")
        rate = np.exp(f)
        return y * f - rate - special.gammaln(y + 1.0), y - rate, -rate, -rate

    def log_density_param_derivatives(self, y, f, derivatives=None):
        """No hyperparameters: an empty dict.

        Parameters
        ----------
        y, f : ndarray
        derivatives : tuple, optional
        """
        return {}

    def site_model(self):
        """The Poisson site model, no parameters: the square link's (QP paper Appendix C.2) or
        the log link's (the generic log-concave rule)."""
        return SiteModel(sites.LOG_LINK_SITE if self.link == "log" else sites.SITE, (), ())

    def surrogate(self, X, y):
        """Square link: unit weights and targets sqrt(y + 1/2), the positive branch f ~ sqrt(y)
        that EP's sites start from.  Log link: the Newton step's pseudo-regression at
        f = log(y + 1/2), weights y + 1/2 and targets (weighted) (y + 1/2) log(y + 1/2).

        Parameters
        ----------
        X : ndarray, shape (N, D)
        y : ndarray, shape (N,)
        """
        if self.link == "log":
            w = y + 0.5
            return w, w * np.log(w)
        return np.ones(X.shape[0]), np.sqrt(y + 0.5)

    @staticmethod
    def negative_binomial(f_mean, f_var):
        """Shape k and scale c of the Gamma law matched to g = f^2 (QP paper Appendix H, eq. 119).

        Parameters
        ----------
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.

        Returns
        -------
        k : ndarray, shape (n,)
            Shape (m^2 + v)^2 / (2 v (2 m^2 + v)).
        c : ndarray, shape (n,)
            Scale 2 v (2 m^2 + v) / (m^2 + v).
        """
        m2 = f_mean * f_mean
        spread = 2.0 * f_var * (2.0 * m2 + f_var)
        return (m2 + f_var) ** 2 / spread, spread / (m2 + f_var)

    def predictive(self, f_mean, f_var):
        """Square link: mean ``y_mean`` = k c and variance ``y_var`` = k c (1 + c) of the count under
        the negative-binomial predictive NB(k, c/(1+c)) (eq. 122).  Log link: the log-normal
        Poisson mixture's y_mean = E[exp f], y_var = E[exp f] + Var[exp f].

        Parameters
        ----------
        f_mean, f_var : ndarray, shape (n,)
        """
        if self.link == "log":
            # E[mu^2] - E[mu]^2 from its logarithm: no inf - inf, nor 0 * inf, where the moments
            # overflow or underflow.
            first = log_normal_mean(f_mean, f_var)
            return {"y_mean": first, "y_var": first + log_normal_spread(f_mean, f_var)}
        # k c = m^2 + v and k c^2 = the spread, written out: at f_var = 0 (k infinite, c = 0) the
        # products would be NaN where the limit is the Poisson law of rate m^2.
        rate = f_mean * f_mean + f_var
        return {"y_mean": rate, "y_var": rate + 2.0 * f_var * (2.0 * f_mean * f_mean + f_var)}

    def log_predictive(self, f_mean, f_var, y):
        """Square link: log NB(y | k, c / (1 + c)) of eq. (122).  Log link: log E[Poisson(y | exp f)]
        by the expectation rule, in log space.

        Parameters
        ----------
        f_mean, f_var, y : ndarray, shape (n,)
        """
        if self.link == "log":
            return rule_log_predictive(self, f_mean, f_var, y)
        rate = f_mean * f_mean + f_var
        poisson = special.xlogy(y, rate) - rate - special.gammaln(y + 1.0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            k, c = self.negative_binomial(f_mean, f_var)
            # log Gamma(k + y) - log Gamma(k) = log Gamma(y) - log B(k, y): no cancellation of two
            # numbers of size k log k when the variance is small and k huge (0 for y = 0).
            y_pos = np.maximum(y, 1.0)
            log_rising = np.where(y > 0, special.gammaln(y_pos) - special.betaln(k, y_pos), 0.0)
            nb = log_rising - special.gammaln(y + 1.0) + special.xlogy(y, c) - (k + y) * np.log1p(c)
        # At f_var = 0 (c = 0, k infinite) the NB is its limit, the Poisson law of rate m^2.
        return np.where((c > 0.0) & np.isfinite(k), nb, poisson)

    def variational_expectations(self, y, mean, var):
        """Closed form.  Square link: y E[log f^2] - (m^2 + v) - log y! (:func:`expected_log_square`);
        -inf where y_n > 0 and q(f_n) is a point mass at 0.  Log link: y m - exp(m + v/2) - log y!.
        No hyperparameters (an empty dict).

        Parameters
        ----------
        y, mean, var : ndarray, shape (n,)
        """
        if self.link == "log":
            rate = np.exp(mean + 0.5 * var)
            return y * mean - rate - special.gammaln(y + 1.0), y - rate, -0.5 * rate, {}
        log_square, d_mean, d_var = expected_log_square(mean, var)
        counted = y > 0.0   # 0 * E[log f^2] is 0 even where E[log f^2] is -inf
        with np.errstate(invalid="ignore"):
            terms = [np.where(counted, y * t, 0.0) for t in (log_square, d_mean, d_var)]
        ve = terms[0] - (mean * mean + var) - special.gammaln(y + 1.0)
        return ve, terms[1] - 2.0 * mean, terms[2] - 1.0, {}

    def log_density_bound(self, y):
        # The count's own rate (f^2 = y or exp(f) = y).
        return float(np.sum(special.xlogy(y, y) - y - special.gammaln(y + 1.0)))

    def log_density(self, y, f):
        """log Poisson(y | rate): 2 y log |f| - f^2 - log y! (square), y f - exp(f) - log y! (log).

        Parameters
        ----------
        y, f : ndarray
        """
        if self.link == "log":
            return y * f - np.exp(f) - special.gammaln(y + 1.0)
        return special.xlogy(2.0 * y, np.abs(f)) - f * f - special.gammaln(y + 1.0)

    def sample(self, f, rng):
        """Counts drawn from Poisson(rate).

        Parameters
        ----------
        f : ndarray
        rng : numpy.random.Generator
        """
        return rng.poisson(np.exp(f) if self.link == "log" else f * f).astype(float)

    def describe(self):
        """``Poisson(square)`` or ``Poisson(log)``.

        Returns
        -------
        str
        """
        return f"Poisson({self.link})"


__all__ = ["Poisson", "expected_log_square"]
