"""Jitted EP / QP site code of the Poisson likelihood, no parameters: with the square link (paper
appendix C.2), p(y | f) = f^{2y} exp(-f^2) / y!, y in {0, 1, 2, ...} (``SITE``), and with the log
link, p(y | f) = exp(y f - e^f) / y!, log-concave, by the generic rule
:func:`gpdsl._jit.quadrature.log_concave_rules` (``LOG_LINK_SITE``).  Square link:

log Z and the moments are closed forms (raw Gaussian moments by their recurrence, or quadrature
for counts above 2,048); sigma* uses the composite rule of
:func:`gpdsl._jit.quadrature.wasserstein_sd` (~150-300 density evaluations).  The closed-form
CDF (finite Gaussian partial-moment sums) is exported for reference and tests.  The window and
panels (checked against a 4x finer rule over a twice wider window for cavity means -30..30 and
standard deviations 0.01..50, relative error < 1e-12, and against the QP oracle table to ~1e-13):

* Poisson, q(f) ~ f^{2y} N(f | b, v) with b = mu/(1+2 sigma^2), v = sigma^2/(1+2 sigma^2): modes at
  (b +- sqrt(b^2 + 8 y v)) / 2, each windowed +-10 sqrt(v) unless its Laplace weight is below
  e^-46 of the other's; panels at most 2 sqrt(v) wide.
"""
import math

from numba import njit

from ..projections import SiteFunctions, site_function
from ..quadrature import HALF_LOG_2PI as _HALF_LOG_2PI
from ..quadrature import WINDOW as _WINDOW
from ..quadrature import log_concave_rules, wasserstein_rule
from ..special import GL_NODES, GL_WEIGHTS, norm_cdf, norm_pdf

_POISSON_PANEL = 2.0        # panel width / sqrt(v)
_MINOR_MODE_LOG = 46.0      # a Poisson mode lighter than e^-46 of the other is not windowed
_RECURRENCE_MAX_N = 4096    # raw moments E[f^n] by their recurrence up to this n, by quadrature beyond
_WINDOWED_HALF = 14.0       # quadrature window half-width in a mode's local standard deviations
_WINDOWED_PANEL = 2.0       # its panel width, in the same units


@site_function
@njit(cache=True, nogil=True)
def _log_density(x, loc, scale2, power, log_norm):
    """Log of the normalised tilted density of the sigma* rule: the density of f^power N(f | b, scale2)
    (power = 2y, e^{-f^2} absorbed in the Gaussian) at f = loc + x, where loc is a mode of it:
    g(loc + x) - g(loc) = power (log|1 + x/loc| - x/loc) - x^2 / (2 scale2), since
    power = loc (loc - b) / scale2 at a mode; b drops out, and so does power log|f| (~1e13 at a
    count of 1e12, whose rounding alone would be 1e-3).  ``log_norm`` holds the normaliser."""
    r = x / loc
    if r == -1.0:
        return -math.inf
    log_ratio = math.log1p(r) if r > -1.0 else math.log(-1.0 - r)
    return power * (log_ratio - r) - 0.5 * x * x / scale2 - log_norm


_wasserstein_sd = wasserstein_rule(_log_density)


@njit(cache=True, nogil=True)
def _gauss_raw_moments(n, b, v):
    """(log M_n, M_{n-1}/M_n) for M_k = E[f^k], f ~ N(b, v), b >= 0, n >= 0.

    M_k = b M_{k-1} + (k-1) v M_{k-2} has only non-negative terms for b >= 0; the running
    values are rescaled by 2^+-500 to stay in range.  The ratio is 0 where undefined.  Its
    cost grows with n: see :func:`_power_gaussian_moments`.
    """
    # An odd moment is ~ b times the even ones; for b ~ 1e-320 (a cavity mean that rounding has
    # left at a denormal) that ratio is beyond what the common rescaling below can hold, and the
    # even moments overflowed.  Below 1e-100 sqrt(v), b changes no moment at double precision.
    if b < 1e-100 * math.sqrt(v):
        b = 0.0
    m2, m1, m0 = 0.0, 0.0, 1.0                # M_{k-2}, M_{k-1}, M_k at k = 0
    log_scale = 0.0
    for k in range(1, n + 1):
        m2, m1 = m1, m0
        m0 = b * m1 + (k - 1) * v * m2
        if m0 > 1e150:
            m2 *= 2.0 ** -500
            m1 *= 2.0 ** -500
            m0 *= 2.0 ** -500
            log_scale += 500.0 * math.log(2.0)
        elif 0.0 < m0 < 1e-150:
            m2 *= 2.0 ** 500
            m1 *= 2.0 ** 500
            m0 *= 2.0 ** 500
            log_scale -= 500.0 * math.log(2.0)
    return math.log(m0) + log_scale, m1 / m0


@njit(cache=True, nogil=True)
def _power_gaussian_moments(n, b, v):
    """(log M_n, mean, variance, log mass) of the density f^n N(f | b, v) / M_n, M_n = E[f^n]
    under N(b, v), for b >= 0 and even n >= 0 (n = 2y for a count y); the log mass is
    log int e^(g(f) - g(f_+)) df about the positive mode f_+ (the QP rule's normaliser, free of
    the ~n log f_+ that log M_n carries).

    Up to _RECURRENCE_MAX_N by the raw-moment recurrence and Stein's identity (mean = b + n v r1,
    variance = v (n + 1 - n r1 mean), r1 = M_{n-1}/M_n), whose cost grows with n and whose
    variance cancels ~n eps; beyond, at a cost independent of n, by quadrature: the log density
    g(f) = n log|f| - (f - b)^2 / (2v) has a mode at each root of f^2 - b f - n v = 0 with
    curvature kappa = n / f^2 + 1/v, and for n > 4096 each mode's window of
    +-_WINDOWED_HALF / sqrt(kappa) lies within 0.22 |f| of it (the other mode and f = 0 are far
    outside), so composite 20-point Gauss-Legendre panels over the two windows integrate
    e^(g - g(mode)) to rounding; the moments are accumulated about the heavier mode, which keeps
    the variance free of cancellation.
    """
    root = math.sqrt(b * b + 4.0 * n * v)
    centre = 0.5 * (b + root)                 # b >= 0: the positive mode is the heavier one
    if n <= _RECURRENCE_MAX_N:
        log_m, r1 = _gauss_raw_moments(n, b, v)
        if n == 0:
            return log_m, b, v, 0.5 * math.log(v) + _HALF_LOG_2PI
        mean = b + n * v * r1
        log_mass = log_m + 0.5 * math.log(v) + _HALF_LOG_2PI - n * math.log(centre) + 0.5 * (centre - b) ** 2 / v
        return log_m, mean, v * (n + 1.0 - n * r1 * mean), log_mass
    s0 = s1 = s2 = 0.0
    nq = GL_NODES.shape[0]
    for mode, log_rel in ((centre, 0.0),
                          (0.5 * (b - root), n * math.log1p(-2.0 * b / (root + b)) - 0.5 * root * b / v)):
        # log_rel = g(mode) - g(centre); g(mode + d) - g(mode) = n (log1p(d/mode) - d/mode) - d^2/(2v)
        # (n = mode (mode - b) / v at a mode), which keeps the exponent's rounding to ~1e-9 at
        # n = 2e12, where n log|f| alone is ~1e13.
        if log_rel < -_MINOR_MODE_LOG:
            continue
        width = 1.0 / math.sqrt(n / (mode * mode) + 1.0 / v)
        half = 0.5 * _WINDOWED_PANEL * width
        for p in range(int(round(2.0 * _WINDOWED_HALF / _WINDOWED_PANEL))):
            for j in range(nq):
                d = (2.0 * p - _WINDOWED_HALF / (0.5 * _WINDOWED_PANEL)) * half + half * (GL_NODES[j] + 1.0)
                x = d / mode
                w = half * GL_WEIGHTS[j] * math.exp(log_rel + n * (math.log1p(x) - x) - 0.5 * d * d / v)
                offset = (mode - centre) + d  # f - centre
                s0 += w
                s1 += w * offset
                s2 += w * offset * offset
    log_ref = n * math.log(centre) - 0.5 * (centre - b) ** 2 / v
    shift = s1 / s0
    return (log_ref + math.log(s0) - 0.5 * math.log(v) - _HALF_LOG_2PI, centre + shift, s2 / s0 - shift * shift,
            math.log(s0))


@njit(cache=True, nogil=True)
def _poisson_square_gaussian(mu, var):
    """(b, v) with exp(-f^2) N(f | mu, var) proportional to N(f | b, v)."""
    c = 1.0 + 2.0 * var
    return mu / c, var / c


@njit(cache=True, nogil=True)
def poisson_square_tilted_moments(y, mu, var):
    """(log Z, mean, variance) of f^{2y} e^{-f^2} / y! N(f | mu, var) / Z, y = 0, 1, 2, ...

    exp(-f^2) N(f | mu, var) = N(mu | 0, 1/2 + var) sqrt(pi) N(f | b, v) (paper eq. 52), so
    Z = M_{2y} N(mu | 0, 1/2 + var) sqrt(pi) / y! with M_k the raw moments of N(b, v) -- the
    hypergeometric forms of eqs. 53-60.  With r1 = M_{2y-1}/M_{2y}, Stein's identity gives
    mean = b + 2y v r1 and variance = v (2y + 1 - 2y r1 mean) (computed for |b|; mirrored);
    for counts above 2,048 by quadrature instead (:func:`_power_gaussian_moments`).
    """
    ny = int(y + 0.5)
    b, v = _poisson_square_gaussian(mu, var)
    log_m, mean_abs, var_t, _ = _power_gaussian_moments(2 * ny, abs(b), v)
    log_z = log_m - math.lgamma(ny + 1.0) - 0.5 * math.log1p(2.0 * var) - mu * mu / (1.0 + 2.0 * var)
    return log_z, math.copysign(mean_abs, b), var_t


@njit(cache=True, nogil=True)
def _poisson_square_cdf_nonneg(t, n, b, v):
    """CDF at t of f^n N(f | b, v) / M_n for b >= 0 and even n >= 2 (exact finite sums).

    Everything is scaled to max(|t|, b, sqrt v) = 1 first (the CDF is scale free).  With
    s = (t - b)/sqrt(v) and the Gaussian partial moments K_k(s) = int_s^inf x^k phi(x) dx
    (K_k = (k-1) K_{k-2} + s^{k-1} phi(s)) and E_k(s) = int_s^inf (x - s)^k phi(x) dx
    (E_k = (k-1) E_{k-2} - s E_{k-1}):
    * t >= b: 1 - F = sum_k C(n,k) b^{n-k} v^{k/2} K_k(s) / M_n (the paper's binomial sum
      around b, eq. 66), all terms >= 0;
    * 0 <= t < b: 1 - F = sum_k C(n,k) t^{n-k} v^{k/2} E_k(s) / M_n (binomial sum around t), all
      terms >= 0;
    * t < 0: F = sum_k C(n,k) (-b)^{n-k} v^{k/2} K_k(s') / M_n, s' = (b - t)/sqrt(v), the mirror
      image; the terms alternate, with absolute error up to ~eps ((2b - t)/(-t))^n F.
    """
    scale = max(abs(t), b, math.sqrt(v))
    t = t / scale
    b = b / scale
    v = v / (scale * scale)
    sv = math.sqrt(v)
    log_m, _ = _gauss_raw_moments(n, b, v)
    if t >= b:
        s, base, upper, around_t = (t - b) / sv, b, True, False
    elif t >= 0.0:
        s, base, upper, around_t = (t - b) / sv, t, True, True
    else:
        s, base, upper, around_t = (b - t) / sv, -b, False, False
    pdf = norm_pdf(s)
    g2 = norm_cdf(-s)                          # order k - 2
    if around_t:
        g1 = pdf - s * g2                      # E_1
    else:
        g1 = pdf                               # K_1
    total = g2 * base ** n                     # k = 0
    binom = 1.0
    for k in range(1, n + 1):
        if k >= 2:
            if around_t:
                gk = (k - 1) * g2 - s * g1
            else:
                gk = (k - 1) * g2 + s ** (k - 1) * pdf
            g2, g1 = g1, gk
        binom = binom * (n - k + 1) / k
        total += binom * base ** (n - k) * sv ** k * g1
    tail = total / math.exp(log_m)
    if upper:
        tail = 1.0 - tail
    return min(max(tail, 0.0), 1.0)


@njit(cache=True, nogil=True)
def poisson_square_tilted_cdf(t, y, mu, sd):
    """CDF at t of the Poisson square-link tilted distribution (paper appendix C.2).

    Exact finite sums of Gaussian partial moments, equivalent to the incomplete-gamma sum of
    eq. 66 (see ``_poisson_square_cdf_nonneg``); b < 0 is mirrored to b > 0.  Absolute error
    ~1e-15 for y up to ~100 (larger y overflows the sums).
    """
    ny = int(y + 0.5)
    b, v = _poisson_square_gaussian(mu, sd * sd)
    if ny == 0:
        return norm_cdf((t - b) / math.sqrt(v))
    if b < 0.0:
        return 1.0 - _poisson_square_cdf_nonneg(-t, 2 * ny, -b, v)
    return _poisson_square_cdf_nonneg(t, 2 * ny, b, v)


@njit(cache=True, nogil=True)
def _mode_log_weight(f, n, b, v):
    """Laplace estimate of the log mass of f^n N(f | b, v) around a mode f (unnormalised)."""
    if f == 0.0:                              # f^n vanishes there (and n / f^2 would divide by 0)
        return -math.inf
    return n * math.log(abs(f)) - 0.5 * (f - b) ** 2 / v - 0.5 * math.log(n / (f * f) + 1.0 / v)


@njit(cache=True, nogil=True)
def _poisson_square_qp_sd(ny, mu, sd, var_t):
    """sigma* of the Poisson square-link tilted distribution (y >= 1 needs the rule)."""
    if ny == 0:
        return math.sqrt(var_t)               # the tilted distribution is Gaussian
    # sigma* is unchanged by the mirror f -> -f, so b >= 0 (the positive mode the heavier one).
    b, v = _poisson_square_gaussian(abs(mu), sd * sd)
    n = 2 * ny
    sv = math.sqrt(v)
    root = math.sqrt(b * b + 4.0 * n * v)     # modes solve f^2 - b f - n v = 0
    f_hi = 0.5 * (b + root)
    # The product of the roots is -n v: b - root would cancel to 0 when b^2 >> n v.
    f_lo = -n * v / f_hi
    if not (math.isfinite(f_hi) and math.isfinite(f_lo) and v > 0.0):
        return math.nan
    lo = f_lo if _mode_log_weight(f_lo, n, b, v) >= _mode_log_weight(f_hi, n, b, v) - _MINOR_MODE_LOG else f_hi
    _, _, _, log_mass = _power_gaussian_moments(n, b, v)
    # Coordinates relative to the mode f_hi (see _log_density).
    return _wasserstein_sd(f_hi, v, float(n), log_mass, lo - f_hi - _WINDOW * sv, _WINDOW * sv, _WINDOW * sv,
                           _POISSON_PANEL * sv, 1.0)


@njit(cache=True, nogil=True)
def poisson_square_qp_sd(y, mu, sd):
    """QP standard deviation sigma* (eq. 7) of the Poisson square-link tilted distribution."""
    ny = int(y + 0.5)
    _, _, var_t = poisson_square_tilted_moments(y, mu, sd * sd)
    return _poisson_square_qp_sd(ny, mu, sd, var_t)


@njit(cache=True, inline="always")     # as probit_project
def poisson_square_project(y, mu, var, qp):
    """(log Z, mean, variance) of the Poisson square-link tilted distribution with cavity
    N(mu, var): EP's moments, or with ``qp`` the QP variance sigma*^2 in place of EP's."""
    log_z, mean, var_t = poisson_square_tilted_moments(y, mu, var)
    ny = int(y + 0.5)
    if qp and ny > 0:                         # y = 0: the tilted distribution is Gaussian
        sd = _poisson_square_qp_sd(ny, mu, math.sqrt(var), var_t)
        var_t = sd * sd
    return log_z, mean, var_t



@site_function
@njit(cache=True, nogil=True)
def site(y, mu, var, params, quantile, table, grid):
    """The Poisson site's projection (:mod:`gpdsl._jit.projections`), params ()."""
    if quantile is None:
        return poisson_square_tilted_moments(y, mu, var)
    return poisson_square_project(y, mu, var, quantile)


@site_function
@njit(cache=True, nogil=True)
def site_gradient(y, mu, var, params):
    """(): the likelihood has no parameters."""
    return ()


SITE = SiteFunctions(site, site_gradient)


# -- the log link: p(y | f) = exp(y f - e^f) / y!, log-concave in f ------------------------------
@site_function
@njit(cache=True, nogil=True)
def _log_link_log_likelihood(y, f, params):
    """(log p, d/df, d^2/df^2, 0) of Poisson(y | exp(f)); no parameter."""
    rate = math.exp(f)
    return y * f - rate - math.lgamma(y + 1.0), y - rate, -rate, 0.0


_log_link_tilted = log_concave_rules(_log_link_log_likelihood)


@site_function
@njit(cache=True, nogil=True)
def log_link_site(y, mu, var, params, quantile, table, grid):
    """The log-link Poisson site's projection (:func:`gpdsl._jit.quadrature.log_concave_rules`),
    params ()."""
    log_z, mean, variance, _ = _log_link_tilted(y, mu, var, params, quantile is not None and quantile)
    return log_z, mean, variance


LOG_LINK_SITE = SiteFunctions(log_link_site, site_gradient)
