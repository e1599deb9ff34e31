"""Jitted negative binomial with the log link, params (dispersion,): its log pmf with every
derivative the likelihood provides (:func:`terms`, :func:`terms_many` for the NumPy class) and
its EP / QP site code.  With a = dispersion, mu = e^f, x = a mu and
G(y, a) = lgamma(y + 1/a) - lgamma(1/a) + y log a (:func:`gpdsl._jit.special.scaled_log_rising`),

    log p(y | f) = G(y, a) - lgamma(y + 1) + y f - (y + 1/a) log1p(x),

written so that a -> 0 reaches Poisson(y | mu) smoothly: for x <= 1 the last term is
y log1p(x) + mu log1p(x) / x, for x > 1 (where y f - y log1p(x) would cancel)
y log a + y log1p(1/x) + log1p(x) / a.  Log-concave in f, so the site code is the generic rule
:func:`gpdsl._jit.quadrature.log_concave_rules`."""
import math

import numpy as np
from numba import njit

from ..projections import SiteFunctions, site_function
from ..quadrature import log_concave_rules
from ..special import log1p_excess_ratio, scaled_log_rising


@njit(cache=True, nogil=True)
def terms(y, f, a):
    """log p(y | f) of NB(y | e^f, dispersion a >= 0) and its derivatives.

    With t = 1 / (1 + x), s = x t and m = mu t (= r s; no overflow as mu does):
    d1 = y t - m, d2 = -(1 + a y) m t, d3 = d2 (t - s);
    d/da log p = dG/da + (log1p(x) - x / (1 + x)) / a^2 - y m, d/da d1 = -m d1 and
    d/da d2 = m t (2 (1 + a y) m - y).  At a = 0 these are Poisson's, and
    d/da log p = ((y - mu)^2 - y) / 2.

    Parameters
    ----------
    y : float
        A count.
    f : float
        The latent value.
    a : float
        The dispersion, >= 0.

    Returns
    -------
    tuple of 7 float
        log p, d/df, d^2/df^2, d^3/df^3 of log p, then d/da of log p, of d log p/df and of
        d^2 log p / df^2.
    """
    mu = math.exp(f)
    if a == 0.0:
        x = 0.0
    elif math.isinf(mu):
        x = math.exp(math.log(a) + f)
    else:
        x = a * mu
    t = 1.0 / (1.0 + x)
    s = 1.0 - t if x > 1.0 else x * t
    rising, d_rising = scaled_log_rising(y, a)
    base = rising - math.lgamma(y + 1.0)
    if x <= 1.0:
        m = mu * t
        log_x1 = math.log1p(x)
        rate_term = mu if x == 0.0 else mu * (log_x1 / x)          # log1p(x) / a, Poisson's mu at a = 0
        logp = base + y * f - y * log_x1 - rate_term
        excess = mu * mu * log1p_excess_ratio(x)                     # (log1p(x) - x / (1 + x)) / a^2
    else:
        m = s / a
        # Where x = a e^f overflows (f of 1e3: a variational expectation's nodes about a large
        # latent mean), log1p(x) = log a + f (+ log1p(1 / x) = 0), finite as log p and its
        # derivatives are: an inf here made log p -inf and SVGP's bound non-finite.
        log_x1 = math.log(a) + f if math.isinf(x) else math.log1p(x)
        logp = base - y * math.log(a) - y * math.log1p(1.0 / x) - log_x1 / a
        # log1p_excess(x) / a^2, divided by a twice: a * a underflows to 0 below a = 1.5e-162 (a
        # dispersion of 5e-196 with f = 6e11 raised ZeroDivisionError), while the quotient is then
        # above 1e308 (log1p(x) - s >= 0.19 for x > 1) and rounds to inf, as its terms do.
        excess = (log_x1 - s) / a / a
    d1 = y * t - m
    d2 = -(1.0 + a * y) * m * t
    return (logp, d1, d2, d2 * (t - s), d_rising + excess - y * m, -m * d1,
            m * t * (2.0 * (1.0 + a * y) * m - y))


@njit(cache=True, nogil=True)
def terms_many(y, f, a):
    """:func:`terms` elementwise over 1-D arrays y, f (same length): an array (7, n)."""
    out = np.empty((7, y.shape[0]))
    for i in range(y.shape[0]):
        values = terms(y[i], f[i], a)
        for k in range(7):
            out[k, i] = values[k]
    return out


@site_function
@njit(cache=True, nogil=True)
def _log_likelihood(y, f, params):
    """(log p, d/df, d^2/df^2, d log p / d dispersion) of NB(y | e^f, dispersion) (:func:`terms`)."""
    logp, d1, d2, _, d_a, _, _ = terms(y, f, params[0])
    return logp, d1, d2, d_a


_tilted = log_concave_rules(_log_likelihood)


@site_function
@njit(cache=True, nogil=True)
def site(y, mu, var, params, quantile, table, grid):
    """The negative-binomial site's projection, params (dispersion,)."""
    log_z, mean, variance, _ = _tilted(y, mu, var, params, quantile is not None and quantile)
    return log_z, mean, variance


@site_function
@njit(cache=True, nogil=True)
def site_gradient(y, mu, var, params):
    """(d log Z / d dispersion,): the tilted expectation of d log p / d dispersion."""
    return (_tilted(y, mu, var, params, False)[3],)


SITE = SiteFunctions(site, site_gradient)
