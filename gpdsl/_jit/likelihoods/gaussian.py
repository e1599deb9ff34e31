"""Jitted EP / QP site code of the Gaussian likelihood, p(y | f) = N(y | f, noise), params
(noise variance,): the tilted distribution is Gaussian, so EP is exact and QP's projection equals
EP's (a check of the sweeps)."""
import math

from numba import njit

from ..projections import SiteFunctions, site_function


@njit(cache=True, nogil=True)
def gaussian_tilted_moments(y, mu, var, noise):
    """(log Z, mean, variance) of N(y | f, noise) N(f | mu, var) / Z: Gaussian, so EP is exact and
    QP's projection equals EP's."""
    total = var + noise
    r = y - mu
    return -0.5 * (math.log(2.0 * math.pi * total) + r * r / total), mu + var * r / total, var * noise / total


@njit(cache=True, nogil=True)
def gaussian_log_z_noise_gradient(y, mu, var, noise):
    """d log Z / d noise variance of the Gaussian site: (r^2 / (var + noise) - 1) / (2 (var + noise))."""
    total = var + noise
    r = y - mu
    return 0.5 * (r * r / total - 1.0) / total



@site_function
@njit(cache=True, nogil=True)
def site(y, mu, var, params, quantile, table, grid):
    """The Gaussian site's projection (:mod:`gpdsl._jit.projections`), params (noise variance,)."""
    return gaussian_tilted_moments(y, mu, var, params[0])


@site_function
@njit(cache=True, nogil=True)
def site_gradient(y, mu, var, params):
    """(d log Z / d noise variance,) of the Gaussian site."""
    return (gaussian_log_z_noise_gradient(y, mu, var, params[0]),)


SITE = SiteFunctions(site, site_gradient)
