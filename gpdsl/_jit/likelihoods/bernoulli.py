"""Jitted EP / QP site code of the Bernoulli likelihood: the probit link (with its QP lookup
table) and the logit link, each with a bias added to f (paper appendix C.1 for the probit).

* probit, p(y | f) = Phi(y (f + bias)), y in {-1, +1}: log Z and the moments are closed forms;
  sigma* uses the composite rule of :func:`gpdsl._jit.quadrature.wasserstein_sd` on a window set
  from the closed-form moments (~150-300 density evaluations).  The closed-form CDF (Owen's T) is
  exported for reference and tests: it loses relative accuracy when Z underflows (z << 0),
  which the quadrature does not, since it works with log-densities throughout.
* logit, p(y | f) = sigma(y (f + bias)), y in {-1, +1}: log Z, the mean, the variance and sigma*
  all come from one set of panels (:func:`gpdsl._jit.quadrature.moments_on_edges`,
  :func:`gpdsl._jit.quadrature.wasserstein_sd_edges`), ~200-500 density evaluations.

Window and panel widths (checked against a 4x finer rule over a twice wider window for cavity
means -30..30 and standard deviations 0.01..50, relative error < 1e-12, against brute-force
adaptive quadrature to ~1e-14, and for the probit against the QP oracle table to ~1e-13):

* probit, in g = y (f + bias) where q(g) ~ Phi(g) N(g | y (mu + bias), sigma^2): -log q is convex
  with curvature between 1/sigma^2 and 1 + 1/sigma^2, so no feature is narrower than
  sigma / sqrt(1 + sigma^2); beyond g = 8 Phi(g) is 1 and the density is the cavity's.  Panels are
  at most 4 sigma/sqrt(1+sigma^2) wide up to g = 8 and 2 sigma beyond.  The window spans the
  tilted mean +-10 tilted sds, widened on the right until the cavity mass beyond is 1e-17 Z
  (tilted mass 1e-17) and cut on the left where the Gaussian N(mu/(1+sigma^2), sigma^2/(1+sigma^2))
  that bounds the density for g < 0 has no mass left.
* logit, in the cavity's standard units z = (g - m) / sigma, m = y (mu + bias): the density
  sigma(m + sigma z) phi(z) is log-concave (log sigma is concave, curvature sigma (1 - sigma)
  <= 1/4) with curvature between 1 and 1 + sigma^2/4, so everything beyond 10 of its mode z* lies
  50 nats below the peak (tilted mass < 1e-22, and at most that times 100 in the variance).  The
  window z* +- 10 is cut at steps of 2 (the curvature is at least 1, so no feature is narrower
  than 1) and, where sigma's transition g = 0 (z0 = -m / sigma) falls inside, at z0 +- 2^k /
  sigma, panels halving towards it down to width 1 in g: sigma's poles at g = +-i pi then lie at
  least 3 half-widths from every panel's centre (the logit predictive's rule,
  :func:`gpdsl._jit.special.logit_normal_edges`).  Measured against the 4x finer, wider rule:
  log Z 1e-15, mean (in sds) 1e-14, variance 2e-15, sigma* 4e-15, E[sigma(-g)] 2e-15.
"""
import math
from functools import lru_cache

import numpy as np
from numba import njit

from ..projections import SiteFunctions, bilinear, site_function
from ..quadrature import HALF_LOG_2PI as _HALF_LOG_2PI
from ..quadrature import WINDOW as _WINDOW
from ..quadrature import edge_rules, wasserstein_rule
from ..special import (MILLS_CF_DEEP_MIN, MILLS_CF_MIN, bvn_cdf, log_sigmoid, logit_normal_edges, logit_normal_mode,
                       mills_cf, norm_cdf, norm_logcdf, norm_logcdf_ratio, norm_pdf)

_TAIL_LOG = 39.2            # -log(1e-17): cavity tail mass left out of the probit window, over Z
_PROBIT_EDGE = 8.0          # Phi(g) == 1 in double precision for g > 8.3
_PROBIT_PANEL_INNER = 4.0   # panel width / (sigma / sqrt(1 + sigma^2)) below the edge
_PROBIT_PANEL_OUTER = 2.0   # panel width / sigma above it
_LOGIT_EXTRA_REACH = 64.0   # the logit gradient's window reaches at most this far past the tilted one (in sds)


# ----------------------------------------------------------------------------------------------
# probit


@site_function
@njit(cache=True, nogil=True)
def _probit_log_density(x, loc, scale2, power, log_norm):
    """log Phi(x) + log N(x | loc, scale2) - log_norm: the normalised tilted density of the
    probit's sigma* rule in g = y (f + bias) (``power`` unused)."""
    u = x - loc
    return norm_logcdf(x) - 0.5 * u * u / scale2 - log_norm


_probit_wasserstein_sd = wasserstein_rule(_probit_log_density)


# inline="always" here and on probit_log_z_bias_gradient: small helpers of the EP path, each a
# dispatcher less to compile in a fresh process (issue 46).
@njit(cache=True, inline="always")
def _probit_ratio(z):
    """(r, delta) with r = phi(z) / Phi(z) and delta = 1 - r (z + r) in (0, 1].

    For z < -5 both come from the continued fraction (``mills_cf``): r = D1 and
    delta = (2/D3 - 1/D2) / D2, free of the cancellation in z + r ~ -1/z.
    """
    if z >= -MILLS_CF_MIN:
        r = norm_pdf(z) / norm_cdf(z)
        return r, 1.0 - r * (z + r)
    d1, d2, d3, _ = mills_cf(-z)
    return d1, (2.0 / d3 - 1.0 / d2) / d2


@njit(cache=True, nogil=True)
def probit_log_cdf_slopes(z):
    """(d1, d2, d3): the first three derivatives of log Phi(z) in z.

    With r = phi(z) / Phi(z): d1 = r, d2 = -r (z + r), d3 = r ((z + r)(z + 2 r) - 1).  Below
    z = -2 each of z + r and (z + r)(z + 2 r) - 1 is a difference of terms ~t times (~t^4 times)
    its size, t = -z (a relative error of 2e-4 in d3 at z = -40 from log space), so there they come
    from the continued fraction's denominators D_k = t + k / D_{k+1} (``mills_cf``): r = D1,
    z + r = D1 - t = 1 / D2, and with z + 2 r = 1 / D2 + D1 and D1 - D2 = 1 / D2 - 2 / D3,
    (z + r)(z + 2 r) - 1 = (2 / D2)(1 / D2 - 1 / D3) = 2 (3 / D4 - 2 / D3) / (D2^2 D3), using
    D3 - D2 = 3 / D4 - 2 / D3 (~1 / t, nothing cancels); so d2 = -D1 / D2 and
    d3 = 2 D1 (3 / D4 - 2 / D3) / (D2^2 D3) ~ 2 / t^3.  Above, r from ``norm_logcdf_ratio``.

    Parameters
    ----------
    z : float

    Returns
    -------
    d1, d2, d3 : float
    """
    if z >= -MILLS_CF_DEEP_MIN:
        _, r = norm_logcdf_ratio(z)
        s = z + r
        return r, -r * s, r * (s * (s + r) - 1.0)
    d1, d2, d3, d4 = mills_cf(-z)
    return d1, -d1 / d2, 2.0 * d1 * (3.0 / d4 - 2.0 / d3) / (d2 * d2 * d3)


@njit(cache=True, nogil=True)
def probit_log_cdf_slopes_many(z):
    """:func:`probit_log_cdf_slopes` at each element of z (float64, shape (n,)): an array (3, n)."""
    out = np.empty((3, z.size))
    for i in range(z.size):
        out[0, i], out[1, i], out[2, i] = probit_log_cdf_slopes(z[i])
    return out


@njit(cache=True, nogil=True)
def probit_tilted_moments(y, mu, var, bias):
    """(log Z, mean, variance) of Phi(y (f + bias)) N(f | mu, var) / Z, y = +-1.

    Rasmussen & Williams eq. (3.58) with z = y (mu + bias) / sqrt(1 + var), r = N(z)/Phi(z):
    mean = mu + y var r / sqrt(1 + var) and variance = var - var^2 r (z + r) / (1 + var), written
    as var (1 + var delta) / (1 + var) with delta = 1 - r (z + r) so that nothing cancels.
    """
    c = math.sqrt(1.0 + var)
    z = y * (mu + bias) / c
    r, delta = _probit_ratio(z)
    return norm_logcdf(z), mu + y * var * r / c, var * (1.0 + var * delta) / (1.0 + var)


@njit(cache=True, nogil=True)
def probit_tilted_cdf(t, y, mu, sd, bias):
    """CDF at t of the probit tilted distribution (paper appendix C.1, eqs. 45-49).

    With h = (t - mu)/sd, z = y (mu + bias)/sqrt(1 + sd^2) and rho = -y sd / sqrt(1 + sd^2),
    F(t) = Phi2(h, z; rho) / Phi(z), the bivariate normal CDF written with Owen's T
    (``bvn_cdf``; its h = 0, z = 0 and h = z = 0 branches are the paper's special cases 47-49,
    with case 49 equal to 1/2 - y arctan(sd) / pi).  The absolute error is ~1e-16 / Phi(z), so
    the result is meaningless once Phi(z) is below ~1e-8 and nan once it underflows.
    """
    c = math.sqrt(1.0 + sd * sd)
    z = y * (mu + bias) / c
    den = norm_cdf(z)
    if not den > 0.0:
        return math.nan
    value = bvn_cdf((t - mu) / sd, z, -y * sd / c) / den
    return min(max(value, 0.0), 1.0)


@njit(cache=True, nogil=True)
def _probit_qp_sd(y, mu, sd, bias, log_z, mean, var_t):
    """sigma* of the probit tilted distribution given its closed-form log Z, mean and variance."""
    loc = y * (mu + bias)                     # cavity mean in g = y (f + bias)
    mean_g = y * (mean + bias)
    s_t = math.sqrt(var_t)
    c2 = 1.0 + sd * sd
    s_in = sd / math.sqrt(c2)                 # narrowest feature of the density
    lo = max(mean_g - _WINDOW * s_t, loc / c2 - _WINDOW * s_in)
    hi = max(mean_g + _WINDOW * s_t, loc + sd * math.sqrt(2.0 * (_TAIL_LOG - log_z)))
    if not (math.isfinite(lo) and math.isfinite(hi) and sd > 0.0):
        return math.nan
    mid = min(max(_PROBIT_EDGE, lo), hi)
    log_norm = log_z + math.log(sd) + _HALF_LOG_2PI
    return _probit_wasserstein_sd(loc, sd * sd, 0.0, log_norm, lo, mid, hi,
                                  _PROBIT_PANEL_INNER * s_in, _PROBIT_PANEL_OUTER * sd)


@njit(cache=True, nogil=True)
def probit_qp_sd(y, mu, sd, bias):
    """QP standard deviation sigma* (eq. 7) of Phi(y (f + bias)) N(f | mu, sd^2) / Z."""
    log_z, mean, var_t = probit_tilted_moments(y, mu, sd * sd, bias)
    return _probit_qp_sd(y, mu, sd, bias, log_z, mean, var_t)


# inline="always" (Numba inlines the body into its callers): a thin wrapper, which compiled on its
# own would have LLVM optimise and emit the QP quadrature beneath it once more.
@njit(cache=True, inline="always")
def probit_project(y, mu, var, bias, qp):
    """(log Z, mean, variance) of the probit tilted distribution with cavity N(mu, var): EP's
    moments, or with ``qp`` the QP variance sigma*^2 in place of EP's."""
    log_z, mean, var_t = probit_tilted_moments(y, mu, var, bias)
    if qp:
        sd = _probit_qp_sd(y, mu, math.sqrt(var), bias, log_z, mean, var_t)
        var_t = sd * sd
    return log_z, mean, var_t


@njit(cache=True, inline="always")
def probit_log_z_bias_gradient(y, mu, var, bias):
    """d log Z / d bias of the probit site: y r / sqrt(1 + var), r = phi(z) / Phi(z) (the same as
    d log Z / d mu)."""
    c = math.sqrt(1.0 + var)
    r, _ = _probit_ratio(y * (mu + bias) / c)
    return y * r / c



@site_function
@njit(cache=True, nogil=True)
def probit_site(y, mu, var, params, quantile, table, grid):
    """The probit site's projection (:mod:`gpdsl._jit.projections`), params (bias,); with a
    non-empty lookup ``table`` QP's sigma* is read from it (:func:`probit_qp_sd_lookup`)."""
    bias = params[0]
    if quantile is None:
        return probit_tilted_moments(y, mu, var, bias)
    if table is not None:
        if quantile and table.shape[0] > 0:
            log_z, mean, _ = probit_tilted_moments(y, mu, var, bias)
            sd = probit_qp_sd_lookup(table, grid[0], grid[1], grid[2], grid[3], y, mu, math.sqrt(var), bias)
            return log_z, mean, sd * sd
    return probit_project(y, mu, var, bias, quantile)


@site_function
@njit(cache=True, nogil=True)
def probit_site_gradient(y, mu, var, params):
    """(d log Z / d bias,) of the probit site."""
    return (probit_log_z_bias_gradient(y, mu, var, params[0]),)


# ----------------------------------------------------------------------------------------------
# the probit's QP lookup table (paper appendix J)


@njit(cache=True, nogil=True)
def probit_qp_ratio_table(mu_grid, log10_sd_grid):
    """Table (n_mu, n_sd) of sigma*/sigma_EP for y = +1, bias 0 on the given grids.

    A site with label y, bias b and cavity (mu, sd) reads it at (y (mu + b), log10 sd): the
    tilted distribution in g = y (f + b) is the y = +1, bias 0 one with cavity mean y (mu + b),
    and sigma* and sigma_EP are invariant under that map.  The ratio (0.98..1 for the probit) is
    smoother than sigma* itself, so bilinear interpolation of it loses less.
    """
    table = np.empty((mu_grid.shape[0], log10_sd_grid.shape[0]))
    for i in range(mu_grid.shape[0]):
        for j in range(log10_sd_grid.shape[0]):
            sd = 10.0 ** log10_sd_grid[j]
            log_z, mean, var_t = probit_tilted_moments(1.0, mu_grid[i], sd * sd, 0.0)
            table[i, j] = _probit_qp_sd(1.0, mu_grid[i], sd, 0.0, log_z, mean, var_t) / math.sqrt(var_t)
    return table


@njit(cache=True, nogil=True)
def probit_qp_sd_lookup(table, mu_first, mu_step, log10_sd_first, log10_sd_step, y, mu, sd, bias):
    """sigma* by bilinear interpolation of ``probit_qp_ratio_table`` on uniform grids.

    The grids are mu_first + i mu_step and log10_sd_first + j log10_sd_step; a cavity outside
    them is computed directly (the paper falls back to sigma_EP there instead).
    """
    log_z, mean, var_t = probit_tilted_moments(y, mu, sd * sd, bias)
    ratio = bilinear(table, (y * (mu + bias) - mu_first) / mu_step, (math.log10(sd) - log10_sd_first) / log10_sd_step)
    if math.isnan(ratio):
        return _probit_qp_sd(y, mu, sd, bias, log_z, mean, var_t)
    return ratio * math.sqrt(var_t)


@lru_cache(maxsize=1)
def probit_lookup_table():
    """The probit QP table of sigma*/sigma_EP (QP paper Appendix J) and its grid, built once per
    process: cavity mean y (mu + bias) in [-10, 10] step 0.05, log10 cavity sd in [-1, 1.5] step
    0.02 (about a second); cavities outside it are computed directly."""
    grid = np.array([-10.0, 0.05, -1.0, 0.02])
    table = probit_qp_ratio_table(grid[0] + grid[1] * np.arange(401), grid[2] + grid[3] * np.arange(126))
    return table, grid


# ----------------------------------------------------------------------------------------------
# logit


@site_function
@njit(cache=True, nogil=True)
def _logit_log_density(x, loc, scale2, power, log_norm):
    """log sigma(loc + power x) - x^2 / 2 - log_norm in the cavity's standard units
    x = (g - loc) / power (loc = y (mu + bias), power = the cavity sd; scale2 unused), where the
    Gaussian factor is exact and the rounding of g only enters log sigma, whose slope is below 1."""
    return log_sigmoid(loc + power * x) - 0.5 * x * x - log_norm


@site_function
@njit(cache=True, nogil=True)
def _logit_extra_terms(x, loc, power):
    """The integrand of E_tilted[sigma(-g)] (the bias gradient's) and 0."""
    return math.exp(log_sigmoid(-(loc + power * x))), 0.0


_logit_moments_on_edges, _logit_wasserstein_sd_edges = edge_rules(_logit_log_density, _logit_extra_terms)


@njit(cache=True, nogil=True)
def _logit_slope_mode(m, s):
    """The mode in z of sigma'(m + s z) phi(z): the root of s (1 - 2 sigma(m + s z)) = z,
    decreasing in z and bracketed by [-s, s]; by bisection."""
    lo, hi = -s, s
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not (lo < mid < hi):
            break
        if s * (1.0 - 2.0 * math.exp(log_sigmoid(m + s * mid))) > mid:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@njit(cache=True, nogil=True)
def _logit_rule(y, mu, var, bias, extra):
    """(log Z, mean, variance, E[sigma(-g)], edges, count, m, s, log mass) of
    sigma(y (f + bias)) N(f | mu, var) / Z, y = +-1, in g = y (f + bias) = m + s z with
    m = y (mu + bias), s = sqrt(var): the density in z, sigma(m + s z) phi(z), is log-concave with
    curvature between 1 and 1 + s^2/4, integrated on the panels of
    :func:`gpdsl._jit.special.logit_normal_edges` (the logit predictive's rule) over z* +- 10
    (z* its mode), which leave out a mass below e^-50 of the peak's.  With ``extra`` the fourth
    value is E_tilted[sigma(-g)] (else nan), on a window widened to cover its integrand too.
    The cavity must be finite with var > 0."""
    m = y * (mu + bias)
    s = math.sqrt(var)
    z_star, _ = logit_normal_mode(m, s)
    lo, hi = z_star - _WINDOW, z_star + _WINDOW
    if extra:
        # E[sigma(-g)]'s integrand sigma'(g) phi(z) is log-concave with curvature >= 1 too, about
        # its own mode (sigma(-g) ~ e^-m puts it up to ~sqrt(m) below z*): the window covers both
        z_e = _logit_slope_mode(m, s)
        z_e = min(max(z_e, z_star - _LOGIT_EXTRA_REACH), z_star + _LOGIT_EXTRA_REACH)
        lo, hi = min(lo, z_e - _WINDOW), max(hi, z_e + _WINDOW)
    edges, count = logit_normal_edges(m, s, lo, hi)
    log_mass, mean_z, var_z, e1, _ = _logit_moments_on_edges(m, 1.0, s, edges, count, extra)
    return log_mass - _HALF_LOG_2PI, mu + y * s * mean_z, var * var_z, e1, edges, count, m, s, log_mass


@njit(cache=True, nogil=True)
def _logit_degenerate(y, mu, var, bias):
    """The logit site's (log Z, mean, variance, E[sigma(-g)]) where the rule does not apply: a
    cavity of variance 0 (a point mass), else nan (not finite, or negative)."""
    m = y * (mu + bias)
    if var == 0.0 and math.isfinite(m):
        return log_sigmoid(m), mu, 0.0, math.exp(log_sigmoid(-m))
    return math.nan, math.nan, math.nan, math.nan


@njit(cache=True, nogil=True)
def _logit_ok(y, mu, var, bias):
    return var > 0.0 and math.isfinite(var) and math.isfinite(y * (mu + bias))


@njit(cache=True, nogil=True)
def logit_tilted_moments(y, mu, var, bias):
    """(log Z, mean, variance) of sigma(y (f + bias)) N(f | mu, var) / Z, y = +-1, by quadrature
    (:func:`_logit_rule`); nan for a cavity that is not finite."""
    if not _logit_ok(y, mu, var, bias):
        log_z, mean, var_t, _ = _logit_degenerate(y, mu, var, bias)
        return log_z, mean, var_t
    log_z, mean, var_t, _, _, _, _, _, _ = _logit_rule(y, mu, var, bias, bool(False))
    return log_z, mean, var_t


@njit(cache=True, nogil=True)
def _logit_qp(y, mu, var, bias):
    """(log Z, mean, sigma*^2) of the logit tilted distribution (QP): sigma* on the panels of the
    moments (:func:`gpdsl._jit.quadrature.wasserstein_sd_edges`, in z, times s)."""
    if not _logit_ok(y, mu, var, bias):
        log_z, mean, var_t, _ = _logit_degenerate(y, mu, var, bias)
        return log_z, mean, var_t
    log_z, mean, _, _, edges, count, m, s, log_mass = _logit_rule(y, mu, var, bias, bool(False))
    sd = s * _logit_wasserstein_sd_edges(m, 1.0, s, log_mass, edges, count)
    return log_z, mean, sd * sd


@njit(cache=True, nogil=True)
def logit_qp_sd(y, mu, sd, bias):
    """QP standard deviation sigma* (eq. 7) of sigma(y (f + bias)) N(f | mu, sd^2) / Z."""
    return math.sqrt(_logit_qp(y, mu, sd * sd, bias)[2])


@njit(cache=True, inline="always")     # as probit_project
def logit_project(y, mu, var, bias, qp):
    """(log Z, mean, variance) of the logit tilted distribution with cavity N(mu, var): EP's
    moments, or with ``qp`` the QP variance sigma*^2 in place of EP's."""
    if qp:
        return _logit_qp(y, mu, var, bias)
    return logit_tilted_moments(y, mu, var, bias)


@njit(cache=True, nogil=True)
def logit_log_z_bias_gradient(y, mu, var, bias):
    """d log Z / d bias of the logit site: E_tilted[y sigma(-y (f + bias))] (= d log Z / d mu),
    integrated directly (all terms positive, so it keeps its relative accuracy where
    sigma(-g) ~ e^-30)."""
    if not _logit_ok(y, mu, var, bias):
        return y * _logit_degenerate(y, mu, var, bias)[3]
    return y * _logit_rule(y, mu, var, bias, bool(True))[3]



@site_function
@njit(cache=True, nogil=True)
def logit_site(y, mu, var, params, quantile, table, grid):
    """The logit site's projection (:mod:`gpdsl._jit.projections`), params (bias,)."""
    if quantile is None:
        return logit_tilted_moments(y, mu, var, params[0])
    return logit_project(y, mu, var, params[0], quantile)


@site_function
@njit(cache=True, nogil=True)
def logit_site_gradient(y, mu, var, params):
    """(d log Z / d bias,) of the logit site."""
    return (logit_log_z_bias_gradient(y, mu, var, params[0]),)


PROBIT_SITE = SiteFunctions(probit_site, probit_site_gradient, probit_lookup_table)
LOGIT_SITE = SiteFunctions(logit_site, logit_site_gradient)
