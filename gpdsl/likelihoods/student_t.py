"""Heavy-tailed regression: :class:`StudentT`, with its own expectation rule (a sinh-mapped
composite Gauss-Legendre rule) for a likelihood much narrower than the latent sd."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from .._jit.likelihoods import student_t as sites
from .._jit.special import digamma_half_excess, log1p_excess_array, student_t_log_norm_excess
from ..parameters import check_hyperparameter
from .base import _LOG_2PI, Likelihood, SiteModel
from .density_integrals import composite_legendre

# Latent sds at or below this fraction of the Student-t width are treated as a point mass by its
# expectation rule.
_POINT_SD = 1e-8
# The Student-t expectation rule: f within mean +- _WINDOW_SDS latent sds, on _PANELS panels of
# _PANEL_NODES Gauss-Legendre nodes each.
_WINDOW_SDS = 12.0
_PANELS = 32
_PANEL_NODES = 8


@dataclass(frozen=True, eq=False)
class StudentT(Likelihood):
    """Heavy-tailed regression noise: p(y | f) = Student-t(y | f, df, scale)
    = Gamma((df+1)/2) / (Gamma(df/2) sqrt(df pi) scale) (1 + (y - f)^2 / (df scale^2))^(-(df+1)/2)
    (GPML's ``likT``; GPflow's ``StudentT``).  ``df`` and ``scale`` are learnable positive
    hyperparameters (fix df with ``fit(fixed="likelihood.df")`` as GPflow does).

    Not log-concave: EP keeps its site precisions non-negative (as GPML's infEP), and the
    variational methods integrate it by Gauss-Hermite quadrature.

    The density and its derivatives are computed stably for any df, the Gaussian limit
    N(y | f, scale^2) included: the Gamma-function ratio by an asymptotic series in 1/df
    (:func:`gpdsl._jit.special.student_t_log_norm_excess`) and every df scale^2 + r^2 divided by df.
    A df above ``DF_MAX`` = 1e100 is used as 1e100: the density is then the Gaussian limit to a
    relative 1e-100 (r / scale)^4, and the bound keeps scale sqrt(df) and the tilted rule's
    coordinates of EP / QP (:mod:`gpdsl._jit.projections`) inside float64's range.

    Parameters
    ----------
    df : float, Fixed or prior, default 4.0
        Positive degrees of freedom (used as min(df, 1e100)).
    scale : float, Fixed or prior, default 1.0
        Positive scale.

    Raises
    ------
    TypeError, ValueError
        If ``df`` or ``scale`` is not a positive finite scalar, ``Fixed`` or prior.
    """

    df: object = 4.0
    scale: object = 1.0
    hyperparameters = ("df", "scale")
    target_kind = "real"
    # The density reads its df and scale through _params (Likelihood.__init_subclass__).
    density_functions = ("log_density", "log_density_derivatives", "_params")

    @classmethod
    def variants(cls):
        """df 10, scale 0.3: light enough tails that draws from it have no outliers (sites whose
        W < 0, where EP clamps and VGP clips, and their gradients are documented as approximate).

        Returns
        -------
        tuple of StudentT
        """
        return (cls(df=10.0, scale=0.3),)

    def __post_init__(self):
        check_hyperparameter("StudentT", "df", self.df, ndim_max=0)
        check_hyperparameter("StudentT", "scale", self.scale, ndim_max=0)

    DF_MAX = 1e100

    def _params(self):
        """(min(df, DF_MAX), scale) as floats; FloatingPointError where one is not positive, which
        the declaration rules out and only an optimiser's exp(log value) underflowing to 0
        produces (a scale driven to 0 by a constant or noiseless target): the optimiser's signal
        to step back, where the divisions by them would raise a bare ZeroDivisionError."""
        nu, s = float(self.df), float(self.scale)
        if not (nu > 0.0 and s > 0.0):
            raise FloatingPointError(f"StudentT: df = {nu!r} and scale = {s!r} must be positive (one underflowed to "
                                     "0: a scale there means the target looks noiseless to the model; fix the "
                                     "scale or add a prior on it)")
        return min(nu, self.DF_MAX), s

    def site_model(self):
        """The Student-t site model, parameters (df, scale)."""
        return SiteModel(sites.SITE, self._params(), ("df", "scale"))

    def log_density_bound(self, y):
        # The density at f = y.
        return float(np.sum(self.log_density(y, y)))

    def log_density_derivatives(self, y, f):
        """With r = y - f and D = df scale^2 + r^2: d1 = (df + 1) r / D,
        d2 = (df + 1)(r^2 - df scale^2) / D^2, d3 = 2 (df + 1) r (r^2 - 3 df scale^2) / D^3, each
        evaluated with numerator and denominator divided by df (finite for any df), and
        log p = c(df) - log(2 pi) / 2 - log(scale) - (df + 1) / 2 log1p(r^2 / (df scale^2)) with
        c(df) = lgamma((df+1)/2) - lgamma(df/2) - log(df/2) / 2 from its series at large df
        (:func:`gpdsl._jit.special.student_t_log_norm_excess`): the Gaussian's log density to
        rounding as df grows.

        Parameters
        ----------
        y, f : ndarray
        """
        nu, s = self._params()
        r = y - f
        rn = r * r / nu                        # r^2 / df: D / df = s^2 + rn never overflows
        Dn = s * s + rn
        rho = 1.0 + 1.0 / nu                   # (df + 1) / df
        logp = (student_t_log_norm_excess(nu) - 0.5 * _LOG_2PI - np.log(s)
                - 0.5 * (nu + 1.0) * np.log1p((r / s) ** 2 / nu))
        return (logp, rho * r / Dn, rho * (rn - s * s) / Dn ** 2, 2.0 * rho * r * (rn - 3.0 * s * s) / (nu * Dn ** 3))

    def log_density_param_derivatives(self, y, f, derivatives=None):
        """Derivatives of log p in df and scale and their f-derivatives; ``derivatives`` is not
        used.  d/d df = (psi((df+1)/2) - psi(df/2) - 1/df - [log1p(x) - x/(1+x)] + x / (df (1 + x))) / 2
        with x = r^2 / (df scale^2), formed without cancellation.

        Parameters
        ----------
        y, f : ndarray
        derivatives : tuple of 4 ndarray, optional
        """
        nu, s = self._params()
        r = y - f
        r2 = r * r
        rn = r2 / nu
        Dn = s * s + rn                        # (df scale^2 + r^2) / df, as log_density_derivatives
        rho = 1.0 + 1.0 / nu
        x = (r / s) ** 2 / nu                  # r^2 / (df scale^2)
        # d/d df = (psi((df+1)/2) - psi(df/2) - 1/df - [log1p(x) - x/(1+x)] + x / (df (1 + x))) / 2:
        # two differences of terms ~1/df and ~x that tend to 0 like 1/df^2, each formed without
        # the cancellation (digamma_half_excess, log1p_excess).
        excess = log1p_excess_array(np.ravel(x).astype(float)).reshape(np.shape(x))
        d_nu = 0.5 * (digamma_half_excess(nu) - excess + x / (nu * (1.0 + x)))
        d1_nu = r * (r2 - s * s) / (nu * nu * Dn ** 2)
        d2_nu = ((rn - (2.0 + 1.0 / nu) * s * s) * Dn - 2.0 * s * s * rho * (rn - s * s)) / (nu * Dn ** 3)
        d_s = (-1.0 + rho * r2 / Dn) / s
        d1_s = -2.0 * s * rho * r / Dn ** 2
        d2_s = -2.0 * s * rho * (3.0 * rn - s * s) / Dn ** 3
        return {"df": (d_nu, d1_nu, d2_nu), "scale": (d_s, d1_s, d2_s)}

    def predictive(self, f_mean, f_var):
        """Mean ``y_mean`` = f_mean (NaN for df <= 1: the Student-t has no mean there, E|y*| is
        infinite) and variance ``y_var`` = f_var + scale^2 df / (df - 2) (inf for df <= 2).

        Parameters
        ----------
        f_mean, f_var : ndarray, shape (n,)
        """
        nu, s = self._params()
        noise = s * s * nu / (nu - 2.0) if nu > 2.0 else np.inf
        mean = f_mean if nu > 1.0 else np.full(np.shape(f_mean), np.nan)
        return {"y_mean": mean, "y_var": f_var + noise}

    def expectation_rule(self, y, mean, var):
        """Composite Gauss-Legendre in s, where f = y + w sinh(s) and w = sqrt(df) scale is the
        likelihood's width, over f in mean +- 12 sd (the Gaussian's mass beyond is 1e-33): nodes
        are dense within w of y, where log p turns, and spread geometrically towards the
        Gaussian's scale.  Gauss-Hermite cannot resolve a likelihood much narrower than the
        latent sd (100 points: 4% off in log_predictive at sd 5, scale 0.7); this rule (256 nodes,
        weights (n, 256) including the Gaussian density and the change of variables, no standard
        nodes) is within 3e-10 relative of 30-digit quadrature over means -1..2, sds 0.001..50, y
        in {-4, 0, 10} and (df, scale) in {(1.5, 0.05), (3, 0.7), (30, 2)}, the worst with y 8
        sds out (tests/test_likelihoods.py checks it).  A point with var = 0 gets the one node
        f = mean.

        Parameters
        ----------
        y, mean, var : ndarray, shape (n,)
        """
        nu, s = self._params()
        width = np.sqrt(nu) * s
        sd = np.sqrt(np.maximum(var, 0.0))
        lo = np.arcsinh((mean - _WINDOW_SDS * sd - y) / width)[:, None]
        hi = np.arcsinh((mean + _WINDOW_SDS * sd - y) / width)[:, None]
        u, omega = composite_legendre(_PANELS, _PANEL_NODES)
        s_nodes = lo + (hi - lo) * u[None, :]
        f = y[:, None] + width * np.sinh(s_nodes)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = (f - mean[:, None]) / sd[:, None]
            weights = np.exp(-0.5 * z * z) / (np.sqrt(2.0 * np.pi) * sd[:, None]) * width * np.cosh(s_nodes) * (hi - lo) * omega
        # A latent sd far below the scale on which log p turns, s sqrt(df / (df + 1)) at its mode
        # (the width above only spreads the nodes), is a point mass for it (the error is of order
        # (sd / that)^2); below ~1e-16 of |mean - y| the window also rounds to one value of s
        # (hi = lo), where the weights above vanish (fuzz: StudentT EP at kernel variance 5e-42).
        point = (sd <= _POINT_SD * s * np.sqrt(nu / (nu + 1.0))) | ~(hi[:, 0] > lo[:, 0])
        f[point], weights[point] = mean[point, None], np.where(np.arange(u.size) == 0, 1.0, 0.0)
        return f, weights, None

    def log_predictive(self, f_mean, f_var, y):
        """log E[p(y* | f*)] by :meth:`expectation_rule`, summed in log space.

        Parameters
        ----------
        f_mean, f_var, y : ndarray, shape (n,)
        """
        f, weights, _ = self.expectation_rule(y, f_mean, f_var)
        logp = self.log_density(np.broadcast_to(y[:, None], f.shape), f)
        with np.errstate(divide="ignore"):
            return special.logsumexp(logp + np.log(weights), axis=1)

    def sample(self, f, rng):
        """y = f + scale t, t ~ Student-t(df).

        Parameters
        ----------
        f : ndarray
        rng : numpy.random.Generator
        """
        nu, s = self._params()
        return f + s * rng.standard_t(nu, size=np.shape(f))

    def surrogate(self, X, y):
        """Gaussian regression at the Student-t's variance (scale^2 for df <= 2).

        Parameters
        ----------
        X : ndarray, shape (N, D)
        y : ndarray, shape (N,)
        """
        nu, s = self._params()
        w = np.full(X.shape[0], 1.0 / (s * s * (nu / (nu - 2.0) if nu > 2.0 else 1.0)))
        return w, w * y


__all__ = ["StudentT"]
