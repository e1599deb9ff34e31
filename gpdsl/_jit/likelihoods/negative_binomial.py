"""Jitted EP / QP site code of the negative binomial with the log link, params (dispersion,):
with r = 1 / dispersion and mu = e^f,
log p(y | f) = lgamma(y + r) - lgamma(r) - lgamma(y + 1) + r log r + y f - (r + y) log(r + mu),
log-concave in f, by the generic rule :func:`gpdsl._jit.quadrature.log_concave_rules`."""
import math

from numba import njit

from ..projections import SiteFunctions, site_function
from ..quadrature import log_concave_rules
from ..special import digamma, log_sigmoid


@site_function
@njit(cache=True)
def _log_likelihood(y, f, params):
    """(log p, d/df, d^2/df^2, d log p / d dispersion) of NB(y | e^f, 1 / dispersion), with
    s = mu / (r + mu), t = 1 - s: d1 = y - (r + y) s, d2 = -(r + y) s t, and
    d/d dispersion = -r^2 (psi(y + r) - psi(r) + log t + s - y t / r)."""
    r = 1.0 / params[0]
    log_r = math.log(r)
    u = f - log_r
    log_r_mu = log_r - log_sigmoid(-u)               # log(r + mu) = log r + log(1 + e^u)
    s = math.exp(log_sigmoid(u))                     # mu / (r + mu)
    t = math.exp(log_sigmoid(-u))
    logp = (math.lgamma(y + r) - math.lgamma(r) - math.lgamma(y + 1.0) + r * log_r + y * f
            - (r + y) * log_r_mu)
    d_r = digamma(y + r) - digamma(r) + (log_r - log_r_mu) + s - y * t / r
    return logp, y - (r + y) * s, -(r + y) * s * t, -r * r * d_r


_tilted = log_concave_rules(_log_likelihood)


@site_function
@njit(cache=True)
def site(y, mu, var, params, quantile, table, grid):
    """The negative-binomial site's projection, params (dispersion,)."""
    log_z, mean, variance, _ = _tilted(y, mu, var, params, quantile is not None and quantile)
    return log_z, mean, variance


@site_function
@njit(cache=True)
def site_gradient(y, mu, var, params):
    """(d log Z / d dispersion,): the tilted expectation of d log p / d dispersion."""
    return (_tilted(y, mu, var, params, False)[3],)


SITE = SiteFunctions(site, site_gradient)
