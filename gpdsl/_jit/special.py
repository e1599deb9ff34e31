"""Jitted scalar special functions of the standard normal distribution, and the logistic-normal
integral.

``norm_cdf``, ``norm_logcdf``, ``norm_ppf`` and Owen's T function ``owens_t`` for the EP/QP site
projections of :mod:`gpdsl._jit.projections` (scipy.special cannot be called from nopython code);
``norm_logcdf_ratio`` (through Cody's rational scaled complementary error function) for the
probit's variational expectations (:mod:`gpdsl._jit.bernoulli_expectations`);
``logit_normal_logp`` (log E[sigmoid(f)] under a normal f) for the logit classifier's predictive,
whose composite rule (``logit_normal_mode``, ``logit_normal_edges``) the logit site projections
share; ``digamma`` and the stable differences ``digamma_half_excess``, ``student_t_log_norm_excess``
and ``log1p_excess`` for the Student-t likelihood at any degrees of freedom (its Gaussian limit
included).
All functions take and return float scalars.  Accuracy, checked against scipy.special and mpmath
in ``tests/test_projections.py`` and ``tests/test_special_erfcx.py``:

* ``norm_cdf`` has a relative error of about x^2 eps / 2 in the lower tail (the rounding of
  x / sqrt 2 fed to erfc; 1e-13 at x = -30), ``norm_logcdf`` full relative accuracy for every x,
  including x far below -38 where Phi(x) underflows;
* ``_erfcx_tail`` (exp(x^2) erfc(x) for x > 0.46875, Cody's rational approximations) has a
  relative error within 3 eps; ``norm_logcdf_ratio`` (log Phi(z) and phi(z) / Phi(z) together) within 3 eps
  for z <= 0 and 2 eps max(1, z^2 / 2) for z > 0 (6e-14 at z = 33): the rounding of z^2 / 2 in
  exp(-z^2 / 2), which a last-bit change of z causes anyway;
* ``norm_ppf`` has a relative error of a few ulp over p in (1e-300, 1) (absolute 1e-16 near
  p = 1/2; the lower tail keeps its relative accuracy down to the smallest subnormal);
* ``owens_t`` has an absolute error below 1e-16 and a relative error below ~1e-13 for all real
  (h, a), infinite a included.

``GL_NODES`` / ``GL_WEIGHTS`` are the 20-point Gauss-Legendre rule on [-1, 1] (computed to 50
digits with mpmath and rounded); the projections module reuses them for its composite rules.
"""
import math

import numpy as np
from numba import njit

_SQRT2 = math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_INV_2PI = 1.0 / (2.0 * math.pi)

GL_NODES = np.array([
    -0.9931285991850949, -0.9639719272779138, -0.912234428251326, -0.8391169718222188,
    -0.7463319064601508, -0.636053680726515, -0.5108670019508271, -0.37370608871541955,
    -0.22778585114164507, -0.07652652113349734, 0.07652652113349734, 0.22778585114164507,
    0.37370608871541955, 0.5108670019508271, 0.636053680726515, 0.7463319064601508,
    0.8391169718222188, 0.912234428251326, 0.9639719272779138, 0.9931285991850949,
])
GL_WEIGHTS = np.array([
    0.017614007139152118, 0.04060142980038694, 0.06267204833410907, 0.08327674157670475,
    0.10193011981724044, 0.11819453196151841, 0.13168863844917664, 0.14209610931838204,
    0.14917298647260374, 0.15275338713072584, 0.15275338713072584, 0.14917298647260374,
    0.14209610931838204, 0.13168863844917664, 0.11819453196151841, 0.10193011981724044,
    0.08327674157670475, 0.06267204833410907, 0.04060142980038694, 0.017614007139152118,
])

# Acklam's rational approximation of the normal quantile (relative error < 1.15e-9), refined below
_PPF_A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
          1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00)
_PPF_B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
          6.680131188771972e+01, -1.328068155288572e+01)
_PPF_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
          -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00)
_PPF_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
          3.754408661907416e+00)
_PPF_LOW = 0.02425

# Laplace's continued fraction for the Mills ratio is used from t >= MILLS_CF_MIN; 40 levels reach
# double precision there (at t = 5 depth 20 still leaves 3e-15).  From t >= MILLS_CF_DEEP_MIN it
# takes 120 levels: D1 to D4 within 4 eps of 50-digit values at t = 2 (80 levels: 1e-12 in D4).
MILLS_CF_MIN = 5.0
MILLS_CF_DEEP_MIN = 2.0
_CF_DEPTH = 40
_CF_DEEP_DEPTH = 120


@njit(cache=True, nogil=True)
def norm_pdf(x):
    """Standard normal density phi(x)."""
    return _INV_SQRT2PI * math.exp(-0.5 * x * x)


@njit(cache=True, nogil=True)
def norm_cdf(x):
    """Standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2 (relative error ~x^2 eps / 2 for x << 0)."""
    return 0.5 * math.erfc(-x / _SQRT2)


@njit(cache=True, nogil=True)
def mills_cf(t):
    """Denominators (D1, D2, D3, D4) of Laplace's continued fraction for t >= 2.

    ``Phi(-t) / phi(t) = 1 / D1`` with ``D_k = t + k / D_{k+1}``, evaluated bottom-up to a fixed
    depth (40 levels from t = 5, 120 below; see ``MILLS_CF_DEEP_MIN``).  Besides the Mills ratio this gives ``D_k - t = k / D_{k+1}`` without the cancellation
    of subtracting two numbers of size t, which the probit's variance and the third derivative of
    log Phi need for very negative z.
    """
    d = t
    for k in range(_CF_DEPTH if t >= MILLS_CF_MIN else _CF_DEEP_DEPTH, 4, -1):
        d = t + k / d
    d4 = t + 4.0 / d
    d3 = t + 3.0 / d4
    d2 = t + 2.0 / d3
    d1 = t + 1.0 / d2
    return d1, d2, d3, d4


@njit(cache=True, nogil=True)
def norm_logcdf(x):
    """log Phi(x) with full relative accuracy for all x (no underflow for x << 0)."""
    if x > 0.0:
        return math.log1p(-0.5 * math.erfc(x / _SQRT2))   # Phi(x) = 1 - Phi(-x), Phi(-x) <= 1/2
    if x > -20.0:
        return math.log(0.5 * math.erfc(-x / _SQRT2))
    if x == -math.inf:
        return -math.inf
    d1, _, _, _ = mills_cf(-x)                              # Phi(x) = phi(x) / D1
    return -0.5 * x * x - _HALF_LOG_2PI - math.log(d1)


# W. J. Cody's rational Chebyshev approximations ("Rational Chebyshev approximations for the error
# function", Math. Comp. 23 (1969) 631-638), with the coefficients of his CALERF in SPECFUN
# (netlib.org/specfun/erf, 1990 revision; copied from its f2c translation in
# github.com/jpc-cermics/scicos-4.4, src/calelm/calerf.c) and in CALERF's order, the leading
# coefficient of each numerator last: erf(x) = x A(x^2) / B(x^2) for |x| <= 0.46875,
# erfcx(x) = C(x) / D(x) on [0.46875, 4] and (1/sqrt(pi) - s P(s) / Q(s)) / x in s = 1/x^2 beyond,
# 18 digits each in exact arithmetic.  The last two need no exponential, which is what makes
# norm_logcdf_ratio cheaper than erfc, which multiplies such a rational by exp(-x^2).
_ERF_A = (3.16112374387056560e+00, 1.13864154151050156e+02, 3.77485237685302021e+02,
          3.20937758913846947e+03, 1.85777706184603153e-01)
_ERF_B = (2.36012909523441209e+01, 2.44024637934444173e+02, 1.28261652607737228e+03,
          2.84423683343917062e+03)
_ERFCX_C = (5.64188496988670089e-01, 8.88314979438837594e+00, 6.61191906371416295e+01,
            2.98635138197400131e+02, 8.81952221241769090e+02, 1.71204761263407058e+03,
            2.05107837782607147e+03, 1.23033935479799725e+03, 2.15311535474403846e-08)
_ERFCX_D = (1.57449261107098347e+01, 1.17693950891312499e+02, 5.37181101862009858e+02,
            1.62138957456669019e+03, 3.29079923573345963e+03, 4.36261909014324716e+03,
            3.43936767414372164e+03, 1.23033935480374942e+03)
_ERFCX_P = (3.05326634961232344e-01, 3.60344899949804439e-01, 1.25781726111229246e-01,
            1.60837851487422766e-02, 6.58749161529837803e-04, 1.63153871373020978e-02)
_ERFCX_Q = (2.56852019228982242e+00, 1.87295284992346047e+00, 5.27905102951428412e-01,
            6.05183413124413191e-02, 2.33520497626869185e-03)
_ERF_SMALL = 0.46875
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRTPI = 1.0 / math.sqrt(math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


# inline="always" on Cody's two rationals, each called once by robust-max's CDF (_jit.robustmax) and once by
# norm_logcdf_ratio: typed in their callers rather than compiled (and then optimised again there) as
# dispatchers of their own, a cold robust-max kernel compiled 0.07-0.19 s (of ~1) less (issue 46).
@njit(cache=True, inline="always")
def _erf_small(x):
    """erf(x) for |x| <= 0.46875 (Cody's first interval)."""
    s = x * x
    num = (((_ERF_A[4] * s + _ERF_A[0]) * s + _ERF_A[1]) * s + _ERF_A[2]) * s + _ERF_A[3]
    den = (((s + _ERF_B[0]) * s + _ERF_B[1]) * s + _ERF_B[2]) * s + _ERF_B[3]
    return x * num / den


@njit(cache=True, inline="always")
def _erfcx_tail(y):
    """The scaled complementary error function exp(y^2) erfc(y) for y > 0.46875 (nan for nan),
    without an exponential (Cody 1969; relative error within 3 eps)."""
    if y <= 4.0:
        c, d = _ERFCX_C, _ERFCX_D
        num = (((((((c[8] * y + c[0]) * y + c[1]) * y + c[2]) * y + c[3]) * y + c[4]) * y + c[5]) * y
               + c[6]) * y + c[7]
        den = (((((((y + d[0]) * y + d[1]) * y + d[2]) * y + d[3]) * y + d[4]) * y + d[5]) * y
               + d[6]) * y + d[7]
        return num / den
    s = 1.0 / (y * y)                   # 0 once y * y overflows, where erfcx = 1 / (y sqrt(pi))
    p, q = _ERFCX_P, _ERFCX_Q
    num = ((((p[5] * s + p[0]) * s + p[1]) * s + p[2]) * s + p[3]) * s + p[4]
    den = ((((s + q[0]) * s + q[1]) * s + q[2]) * s + q[3]) * s + q[4]
    return (_INV_SQRTPI - s * num / den) / y


@njit(cache=True, nogil=True)
def norm_logcdf_ratio(z):
    """log Phi(z) and the ratio phi(z) / Phi(z) together, from one rational erfcx.

    With t = |z| / sqrt 2: for t <= 0.46875 (|z| <= 0.663) Phi(z) = (1 + erf(z / sqrt 2)) / 2.
    For z < -0.663, Phi(z) = erfcx(t) exp(-t^2) / 2, so log Phi = log(erfcx(t) / 2) - z^2 / 2
    and the ratio is sqrt(2 / pi) / erfcx(t): no exponential, and neither underflows however
    negative z.  For z > 0.663, u = Phi(-z) = erfcx(t) exp(-z^2 / 2) / 2 shares its exponential
    with phi(z), and log Phi = log1p(-u), the ratio phi / (1 - u).  (log1p is cheaper here than
    log(1 - u) corrected by u / ((1 - u) - 1), which needs a division more.)

    Parameters
    ----------
    z : float

    Returns
    -------
    log_cdf, ratio : float
        log Phi(z) and phi(z) / Phi(z), relative errors within 3 eps for z <= 0 and
        2 eps max(1, z^2 / 2) for z > 0 (see the module docstring).  z = +inf gives (0, 0),
        z = -inf (-inf, nan) and nan (nan, nan), as ``norm_logcdf`` with the ratio taken as
        exp(log phi - log Phi) does.
    """
    t = z * _INV_SQRT2
    if abs(t) <= _ERF_SMALL:
        cdf = 0.5 + 0.5 * _erf_small(t)
        return math.log(cdf), _INV_SQRT2PI * math.exp(-0.5 * z * z) / cdf
    scaled = _erfcx_tail(abs(t))
    if z < 0.0:
        if z == -math.inf:
            return -math.inf, math.nan
        return math.log(0.5 * scaled) - 0.5 * z * z, _SQRT_2_OVER_PI / scaled
    gauss = math.exp(-0.5 * z * z)
    upper = 0.5 * scaled * gauss                                  # Phi(-z) <= Phi(-0.663) = 0.25
    return math.log1p(-upper), _INV_SQRT2PI * gauss / (1.0 - upper)


@njit(cache=True, nogil=True)
def norm_ppf(p):
    """Standard normal quantile Phi^{-1}(p); -inf at p = 0, +inf at p = 1, nan outside [0, 1].

    Acklam's approximation followed by one Halley step on Phi(x) - p.  In the lower tail the
    residual is formed relative to p through log Phi, so the step neither underflows nor
    overflows down to the smallest subnormal p; the upper tail uses the exact complement 1 - p.
    """
    if not (p >= 0.0 and p <= 1.0):
        return math.nan
    if p == 0.0:
        return -math.inf
    if p == 1.0:
        return math.inf
    if p < _PPF_LOW:
        q = math.sqrt(-2.0 * math.log(p))
        x = ((((((_PPF_C[0] * q + _PPF_C[1]) * q + _PPF_C[2]) * q + _PPF_C[3]) * q + _PPF_C[4])
              * q + _PPF_C[5])
             / ((((_PPF_D[0] * q + _PPF_D[1]) * q + _PPF_D[2]) * q + _PPF_D[3]) * q + 1.0))
        log_p = math.log(p)
        # u = (Phi(x) - p) / phi(x), written as relative residual times p / phi(x)
        u = (math.expm1(norm_logcdf(x) - log_p)
             * math.exp(log_p + 0.5 * x * x + _HALF_LOG_2PI))
    elif p <= 1.0 - _PPF_LOW:
        q = p - 0.5
        r = q * q
        x = ((((((_PPF_A[0] * r + _PPF_A[1]) * r + _PPF_A[2]) * r + _PPF_A[3]) * r + _PPF_A[4])
              * r + _PPF_A[5]) * q
             / (((((_PPF_B[0] * r + _PPF_B[1]) * r + _PPF_B[2]) * r + _PPF_B[3]) * r + _PPF_B[4])
                * r + 1.0))
        u = (norm_cdf(x) - p) / norm_pdf(x)
    else:
        pc = 1.0 - p                                        # exact for p >= 1/2
        q = math.sqrt(-2.0 * math.log(pc))
        x = -((((((_PPF_C[0] * q + _PPF_C[1]) * q + _PPF_C[2]) * q + _PPF_C[3]) * q + _PPF_C[4])
               * q + _PPF_C[5])
              / ((((_PPF_D[0] * q + _PPF_D[1]) * q + _PPF_D[2]) * q + _PPF_D[3]) * q + 1.0))
        u = (pc - 0.5 * math.erfc(x / _SQRT2)) / norm_pdf(x)   # Phi(x) - p = (1-p) - Phi(-x)
    return x - u / (1.0 + 0.5 * x * u)                      # Halley: f'' = -x f'


@njit(cache=True, nogil=True)
def _owens_t_quad(h, a):
    """T(h, a) for h >= 0 and 0 < a <= 1 by 20-point Gauss-Legendre.

    The integrand exp(-h^2 (1 + x^2) / 2) / (1 + x^2) is negligible (relative 1e-18) beyond
    x = 9 / h, so the range is cut there; on [0, min(a, 9/h)] the rule is exact to rounding.
    """
    b = a
    if h * a > 9.0:
        b = 9.0 / h
    half = 0.5 * b
    hh = 0.5 * h * h
    total = 0.0
    for i in range(GL_NODES.shape[0]):
        x = half * (GL_NODES[i] + 1.0)
        xx = 1.0 + x * x
        total += GL_WEIGHTS[i] * math.exp(-hh * xx) / xx
    return total * half * _INV_2PI


@njit(cache=True, nogil=True)
def owens_t(h, a):
    """Owen's T function T(h, a) = 1/(2 pi) int_0^a exp(-h^2 (1 + x^2) / 2) / (1 + x^2) dx.

    Even in h, odd in a.  For |a| > 1 the identity
    T(h, a) = [Phi(h) Phi(-ah) + Phi(-h) Phi(ah)] / 2 - T(ah, 1/a)   (a > 0)
    maps back to |a| < 1; its first term is a sum of positive numbers and the result is at least
    a quarter of it, so no relative accuracy is lost.
    """
    if math.isnan(h) or math.isnan(a):
        return math.nan
    sign = 1.0
    if a < 0.0:
        sign = -1.0
        a = -a
    h = abs(h)
    if a == 0.0:
        return 0.0
    if h == 0.0:
        return sign * math.atan(a) * _INV_2PI
    if math.isinf(a):
        return sign * 0.25 * math.erfc(h / _SQRT2)          # T(h, inf) = Phi(-h) / 2
    if a <= 1.0:
        return sign * _owens_t_quad(h, a)
    ah = a * h
    first = 0.5 * (norm_cdf(h) * norm_cdf(-ah) + norm_cdf(-h) * norm_cdf(ah))
    return sign * (first - _owens_t_quad(ah, 1.0 / a))


@njit(cache=True, nogil=True)
def bvn_cdf(h, k, rho):
    """Bivariate standard normal CDF P(X1 <= h, X2 <= k) with correlation |rho| < 1 (Owen 1956).

    Phi2 = Phi(h)/2 + Phi(k)/2 - T(h, a_h) - T(k, a_k) - eta with
    a_h = (k - rho h) / (h sqrt(1 - rho^2)), a_k likewise, eta = 1/2 when hk < 0; the limits
    h -> 0 and k -> 0 and the corner h = k = 0 are taken in closed form.  The terms are of size
    min(Phi(h), Phi(k)) or larger, so the absolute error is ~1e-16 and tiny results lose
    relative accuracy.
    """
    sq = math.sqrt((1.0 - rho) * (1.0 + rho))
    if h == 0.0 and k == 0.0:
        return 0.25 + math.asin(rho) * _INV_2PI
    if h == 0.0:
        return 0.5 * norm_cdf(k) + owens_t(k, rho / sq)
    if k == 0.0:
        return 0.5 * norm_cdf(h) + owens_t(h, rho / sq)
    value = (0.5 * norm_cdf(h) + 0.5 * norm_cdf(k)
             - owens_t(h, (k - rho * h) / (h * sq)) - owens_t(k, (h - rho * k) / (k * sq)))
    if h * k < 0.0:
        value -= 0.5
    upper = min(norm_cdf(h), norm_cdf(k))
    return min(max(value, 0.0), upper)


# ------------------------------------------------------------------ logistic-normal integral
# log E[sigma(f)] for f ~ N(mu, s^2), the logit classifier's predictive (Passerello eq. C.2 and
# the Gauss-Hermite step after it).  Written in z = (f - mu) / s, the integrand
# h(z) = sigma(mu + s z) phi(z) is log-concave with curvature >= 1, so everything beyond 10 of its
# mode z* lies more than 50 nats below h(z*) and is dropped (relative effect < 2e-22).  Up to
# s = LOGIT_GH_MAX_SD the 100-point Gauss-Hermite rule is exact to ~1e-13; beyond, the transition
# of sigma at z0 = -mu / s is 1/s wide and no fixed rule resolves it (100-point Gauss-Hermite is
# 1e-2 off at mu = 2, s = 20), so the window [z* - 10, z* + 10] is cut at steps of 2 and at
# z0 +- 2^k / s (panels that halve towards z0 down to width 1/s), each panel summed with GL_NODES.
LOGIT_GH_MAX_SD = 1.0
_WINDOW = 10.0


@njit(cache=True, nogil=True)
def log_sigmoid(x):
    """log sigma(x) = -log(1 + exp(-x)) without overflow or loss for either sign of x."""
    if x >= 0.0:
        return -math.log1p(math.exp(-x))
    return x - math.log1p(math.exp(x))


@njit(cache=True, nogil=True)
def _log_h(z, mu, s):
    return log_sigmoid(mu + s * z) - 0.5 * z * z - _HALF_LOG_2PI


@njit(cache=True, nogil=True)
def _mode(mu, s):
    """The root of d/dz log h = s sigma(-(mu + s z)) - z, decreasing in z, bracketed by [0, s]."""
    lo, hi = 0.0, s
    z = 0.5 * s
    for _ in range(200):
        x = mu + s * z
        sig_neg = math.exp(log_sigmoid(-x))
        g = s * sig_neg - z
        if g > 0.0:
            lo = z
        else:
            hi = z
        if hi - lo <= 1e-15 * (1.0 + abs(z)):
            break
        step = g / (s * s * sig_neg * (1.0 - sig_neg) + 1.0)      # Newton on the concave log h
        z_new = z + step
        z = z_new if lo < z_new < hi else 0.5 * (lo + hi)
    return z


@njit(cache=True, nogil=True)
def _panel_sum(a, b, mu, s, ref):
    """sum over the GL_NODES of [a, b] of exp(log h - ref), times the panel's half width."""
    half, mid = 0.5 * (b - a), 0.5 * (a + b)
    total = 0.0
    for k in range(GL_NODES.shape[0]):
        total += GL_WEIGHTS[k] * math.exp(_log_h(mid + half * GL_NODES[k], mu, s) - ref)
    return half * total


@njit(cache=True, nogil=True)
def logit_normal_mode(mu, s):
    """(z*, log h(z*)): the mode of h(z) = sigma(mu + s z) phi(z) and its log, s > 0 finite."""
    z_star = _mode(mu, s)
    return z_star, _log_h(z_star, mu, s)


@njit(cache=True, nogil=True)
def logit_normal_edges(mu, s, lo, hi):
    """(edges, count): the panel edges in z of the composite rule for h(z) = sigma(mu + s z) phi(z)
    on [lo, hi] (the window [z* - 10, z* + 10] about its mode z*, or wider), 0 < s < inf; panels
    are edges[k], edges[k + 1] for k < count - 1.

    The window is cut at steps of 2 from its left end and, near sigma's transition z0 = -mu / s,
    at z0 - 2^k / s (k falling), z0, z0 + 2^k / s (k rising) for widths 2^k / s below 2: panels
    that halve towards z0 down to width 1/s, i.e. width 1 in g = mu + s z, whose nearest poles of
    sigma are at g = +-i pi.  A panel [w, 2w] from z0 then sees them at 3 half-widths or more from
    its centre (Bernstein ellipse rho >= 3 + sqrt 8), which the 20-point rule integrates to
    ~rho^-40 and, for the QP CDF, interpolates to ~rho^-20 = 5e-16.
    """
    z0 = -mu / s
    levels = 0
    width = 1.0 / s
    while width < 2.0:
        levels += 1
        width *= 2.0
    capacity = 2 * levels + int(0.5 * (hi - lo)) + 8
    edges = np.empty(capacity)
    edges[0] = lo
    count = 1
    # Walk the window from lo to hi; the next panel edge is the nearest of the next step of 2
    # and, near z0, the next of z0 - 2^k / s (k falling), z0, z0 + 2^k / s (k rising), for
    # widths 2^k / s below 2: panels that halve towards sigma's transition.
    a = lo
    while a < hi:
        b = min(lo + 2.0 * (math.floor((a - lo) / 2.0) + 1.0), hi)
        d = a - z0
        width = 1.0 / s
        if d < 0.0:
            # the next edge left of or at z0: the smallest z0 - 2^k/s above a, else z0
            nxt = z0
            while width < 2.0:
                if z0 - width > a:
                    nxt = z0 - width
                width *= 2.0
            b = min(b, nxt)
        else:
            while width < 2.0:
                if z0 + width > a:
                    b = min(b, z0 + width)
                    break
                width *= 2.0
        if b <= a:            # rounding at an edge: step on
            b = min(a + 1.0 / s, hi)
        if count == capacity - 1:
            b = hi            # only after repeated rounding steps (never seen): close the window
        edges[count] = b
        count += 1
        a = b
    return edges, count


@njit(cache=True, nogil=True)
def logit_normal_logp(mu, s, gh_nodes, gh_log_weights):
    """log E[sigma(f)], f ~ N(mu, s^2), s >= 0; <= 0 and finite for finite mu.

    ``gh_nodes``, ``gh_log_weights``: the probabilists' Gauss-Hermite rule (nodes, log of
    weights / sqrt(2 pi)) used up to s = LOGIT_GH_MAX_SD; composite Gauss-Legendre beyond
    (:func:`logit_normal_edges`).  (Scalar loops only: array expressions and np.sort here
    tripled the cold compile time.)
    """
    if math.isnan(mu) or math.isnan(s):
        return math.nan
    if s == 0.0 or math.isinf(mu):
        return log_sigmoid(mu)
    if math.isinf(s):
        return -math.log(2.0)             # the limit; the panel walk below needs 1/s > 0
    if s <= LOGIT_GH_MAX_SD:
        top, total = -math.inf, 0.0      # one-pass log-sum-exp, rescaled when the maximum grows
        for k in range(gh_nodes.shape[0]):
            term = gh_log_weights[k] + log_sigmoid(mu + s * gh_nodes[k])
            if term > top:
                total = total * math.exp(top - term) + 1.0
                top = term
            else:
                total += math.exp(term - top)
        return min(top + math.log(total), 0.0)
    z_star, ref = logit_normal_mode(mu, s)
    edges, count = logit_normal_edges(mu, s, z_star - _WINDOW, z_star + _WINDOW)
    total = 0.0
    for k in range(count - 1):
        total += _panel_sum(edges[k], edges[k + 1], mu, s, ref)
    return min(ref + math.log(total), 0.0)


@njit(cache=True, nogil=True)
def logit_normal_logp_many(mu, s, gh_nodes, gh_log_weights):
    """``logit_normal_logp`` elementwise over arrays mu (n,), s (n,)."""
    out = np.empty(mu.shape[0])
    for i in range(mu.shape[0]):
        out[i] = logit_normal_logp(mu[i], s[i], gh_nodes, gh_log_weights)
    return out


# ------------------------------------------------------------------ digamma
# psi(x) for x > 0: the recurrence psi(x) = psi(x + 1) - 1/x up to x >= 10, then the asymptotic
# series ln x - 1/(2x) - sum_k B_2k / (2k x^2k), whose first omitted term (k = 8) is below
# 4e-17 / x at x >= 10 (for the Student-t likelihood's gradient in its degrees of freedom).
_DIGAMMA_SERIES = (1.0 / 12.0, -1.0 / 120.0, 1.0 / 252.0, -1.0 / 240.0, 1.0 / 132.0, -691.0 / 32760.0, 1.0 / 12.0)


@njit(cache=True, nogil=True)
def digamma(x):
    """The digamma function psi(x) = d log Gamma(x) / dx for x > 0 (nan otherwise); absolute
    error ~1e-15 (relative near its root x = 1.4616 is lost to cancellation, as in any
    implementation that does not expand about it)."""
    if not x > 0.0:
        return math.nan
    if math.isinf(x):
        return math.inf
    shift = 0.0
    while x < 10.0:
        shift -= 1.0 / x
        x += 1.0
    inv2 = 1.0 / (x * x)
    series = 0.0
    for k in range(len(_DIGAMMA_SERIES) - 1, -1, -1):
        series = series * inv2 + _DIGAMMA_SERIES[k]
    return shift + math.log(x) - 0.5 / x - series * inv2


@njit(cache=True, nogil=True)
def digamma_half_excess(nu):
    """psi((nu + 1) / 2) - psi(nu / 2) - 1 / nu for nu > 0 (nan otherwise), the d/d nu of twice
    :func:`student_t_log_norm_excess`.  It tends to 0 like 1 / (2 nu^2): the difference of the
    digammas minus 1/nu would lose all of it to cancellation from nu ~ 1e8 on (the Student-t
    df gradient at large df), so beyond nu = 30 it is the expansion 1/(2 nu^2) - 1/(4 nu^4)
    + 1/(2 nu^6) - 17/(8 nu^8) + 31/(2 nu^10) - 691/(4 nu^12), relative error < 2e-14 at nu = 30
    and < 2e-16 from nu = 100 on (checked against 50-digit mpmath); below, the difference
    (absolute error ~1e-15)."""
    if not nu > 0.0:
        return math.nan
    if nu < 30.0:
        return digamma(0.5 * (nu + 1.0)) - digamma(0.5 * nu) - 1.0 / nu
    if math.isinf(nu):
        return 0.0
    t = 1.0 / nu
    t2 = t * t
    return t2 * (0.5 + t2 * (-0.25 + t2 * (0.5 + t2 * (-17.0 / 8.0 + t2 * (31.0 / 2.0 - t2 * 691.0 / 4.0)))))


@njit(cache=True, nogil=True)
def digamma_half_difference(nu):
    """psi((nu + 1) / 2) - psi(nu / 2) for nu > 0 without the cancellation of the difference at
    large nu: 1 / nu + :func:`digamma_half_excess` (relative error < 2e-16 beyond nu = 30,
    absolute ~1e-15 below)."""
    return 1.0 / nu + digamma_half_excess(nu) if nu > 0.0 else math.nan


@njit(cache=True, nogil=True)
def student_t_log_norm_excess(nu):
    """lgamma((nu + 1) / 2) - lgamma(nu / 2) - log(nu / 2) / 2 for nu > 0 (nan otherwise), so that
    the Student-t log density at 0 is this - log(2 pi) / 2 - log(scale).

    The two lgammas are ~nu log(nu) / 2 each and their difference ~log(nu) / 2: differenced,
    they lose ~1e-16 nu log(nu) absolute (all of it from nu ~ 1e15: a log evidence of -547
    where the Gaussian limit is -4.5).  Beyond nu = 30 this is the asymptotic series of
    lgamma(z + 1/2) - lgamma(z) - log(z) / 2 in z = nu / 2 (sum over n of (-1)^n (2^(1-n) - 2)
    B_n / (n (n - 1) z^(n-1)), B_n the Bernoulli numbers): -1/(4 nu) + 1/(24 nu^3) - 1/(20 nu^5)
    + 17/(112 nu^7) - 31/(36 nu^9) + 691/(88 nu^11), whose first omitted term is below 1e-17
    relative at nu = 30; 0 at nu = inf (the Gaussian limit).  Below nu = 30 the lgamma difference
    (absolute error < 1e-14)."""
    if not nu > 0.0:
        return math.nan
    if nu < 30.0:
        return math.lgamma(0.5 * (nu + 1.0)) - math.lgamma(0.5 * nu) - 0.5 * math.log(0.5 * nu)
    if math.isinf(nu):
        return 0.0
    t = 1.0 / nu
    t2 = t * t
    return t * (-0.25 + t2 * (1.0 / 24.0 + t2 * (-0.05 + t2 * (17.0 / 112.0 + t2 * (-31.0 / 36.0 + t2 * 691.0 / 88.0)))))


_LOG1P_EXCESS_SERIES_MAX = 0.1


@njit(cache=True, nogil=True)
def log1p_excess_ratio(x):
    """(log(1 + x) - x / (1 + x)) / x^2 for x > -1 (1/2 at x = 0, nan below -1): the excess of
    :func:`log1p_excess` divided by its leading x^2 so that it neither underflows nor divides 0 by 0
    for tiny x (the negative binomial's dispersion gradient near its Poisson limit); below
    |x| = 0.1 the series sum_k>=2 (-1)^k (k - 1) / k x^(k - 2) to k = 20 (first omitted term
    < 1e-18), above the closed form, which loses at most a factor 2 / x = 20 of eps to
    cancellation."""
    if not x > -1.0:
        return math.nan
    if abs(x) < _LOG1P_EXCESS_SERIES_MAX:
        total = 0.0
        for k in range(20, 1, -1):
            total = total * x + (1.0 - 1.0 / k) * (1.0 if k % 2 == 0 else -1.0)
        return total
    return (math.log1p(x) - x / (1.0 + x)) / (x * x)


@njit(cache=True, nogil=True)
def log1p_excess(x):
    """log(1 + x) - x / (1 + x) >= 0 for x >= 0 (nan below -1): the Student-t df gradient's
    difference of two terms ~x, whose value ~x^2 / 2 would be lost to cancellation for small x
    (large df), so below |x| = 0.1 it is x^2 times the series of :func:`log1p_excess_ratio`."""
    if not x >= -1.0:
        return math.nan
    if abs(x) < _LOG1P_EXCESS_SERIES_MAX:
        return log1p_excess_ratio(x) * x * x
    return math.log1p(x) - x / (1.0 + x)


@njit(cache=True, nogil=True)
def log1p_excess_array(x):
    """:func:`log1p_excess` elementwise over a 1-D float array, for the NumPy code of
    :class:`gpdsl.likelihoods.StudentT`."""
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = log1p_excess(x[i])
    return out


# ------------------------------------------------------------------ log rising factorial
# Stirling's series lgamma(z) ~ (z - 1/2) log z - z + log(2 pi) / 2 + sum_k C_k / z^(2k - 1),
# C_k = B_2k / (2k (2k - 1)), and psi's, sum_k D_k / z^2k with D_k = B_2k / 2k: from z = 10 on,
# the first omitted terms (k = 8) are below 3e-17 (lgamma) and 2e-16 / z (psi) in absolute value.
_STIRLING_LGAMMA = (1.0 / 12.0, -1.0 / 360.0, 1.0 / 1260.0, -1.0 / 1680.0, 1.0 / 1188.0, -691.0 / 360360.0,
                    1.0 / 156.0)
# Where scaled_log_rising switches from lgamma / digamma differences to the series in x = a y.
RISING_SERIES_MIN_R = 10.0
# Below x = 0.1 the x-series of (1 + x) log1p(x) - x and x - log1p(x) (to x^20, first omitted
# term < 1e-19 of the leading one); above, the closed forms lose at most a factor 2 / x = 20 of eps.
_RISING_SMALL_X = 0.1
_RISING_TERMS = 20


@njit(cache=True, nogil=True)
def _rising_h1(x):
    """((1 + x) log1p(x) - x) / x = sum_n>=2 (-1)^n x^(n-1) / (n (n - 1)) for x >= 0."""
    if x < _RISING_SMALL_X:
        total = 0.0
        for n in range(_RISING_TERMS, 1, -1):
            total = total * x + (1.0 if n % 2 == 0 else -1.0) / (n * (n - 1.0))
        return total * x
    return ((1.0 + x) * math.log1p(x) - x) / x


@njit(cache=True, nogil=True)
def _rising_k1(x):
    """(x - log1p(x)) / x = sum_n>=2 (-1)^n x^(n-1) / n for x >= 0."""
    if x < _RISING_SMALL_X:
        total = 0.0
        for n in range(_RISING_TERMS, 1, -1):
            total = total * x + (1.0 if n % 2 == 0 else -1.0) / n
        return total * x
    return (x - math.log1p(x)) / x


@njit(cache=True, nogil=True)
def scaled_log_rising(y, a):
    """G(y, a) = lgamma(y + 1/a) - lgamma(1/a) + y log a = sum_{j<y} log1p(a j) and dG / da =
    sum_{j<y} j / (1 + a j), for counts y >= 0 and a >= 0 (G = 0, dG/da = y (y - 1) / 2 at a = 0):
    the part of the negative binomial's log pmf that depends on its dispersion a alone.

    Differenced as written, lgamma(y + r) - lgamma(r) (r = 1/a) loses ~eps y log r absolute where
    G ~ a y^2 / 2: all of it from a ~ 1e-16 on.  So for r >= :data:`RISING_SERIES_MIN_R` both
    lgammas take Stirling's series, whose difference in x = a y is

        G = y H(x) - log1p(x) / 2 + sum_k C_k a^(2k-1) expm1(-(2k - 1) log1p(x)),
        dG/da = y K(x) / a - y / (2 (1 + x)) + sum_k D_k a^(2k-2) expm1(-2k log1p(x)),

    with H(x) = ((1 + x) log1p(x) - x) / x and K(x) = (x - log1p(x)) / x taken by their series
    for small x: every term carries its own powers of a, so nothing cancels beyond the factor
    y / (y - 1) of the leading terms and nothing underflows.  Below r = 10 (a > 0.1) the lgamma
    and :func:`digamma` differences, dG/da = r (y - r (psi(y + r) - psi(r))), lose at most a
    factor ~50 of eps.  Relative error < 1e-14 for a in [1e-30, 1e3] and y in [0, 1e6]
    (``tests/test_likelihood_limits.py``, against 50-digit mpmath).

    Parameters
    ----------
    y : float
        A count (a non-negative integer value).
    a : float
        The dispersion, >= 0.

    Returns
    -------
    (float, float)
        G(y, a) and dG / da.
    """
    if y < 2.0:
        return 0.0, 0.0                      # the empty sum (y = 0) and log1p(0) (y = 1)
    if a == 0.0:
        return 0.0, 0.5 * y * (y - 1.0)
    r = 1.0 / a
    if r < RISING_SERIES_MIN_R:
        value = math.lgamma(y + r) - math.lgamma(r) + y * math.log(a)
        return value, r * (y - r * (digamma(y + r) - digamma(r)))
    x = a * y
    log_x1 = math.log1p(x)
    value = y * _rising_h1(x) - 0.5 * log_x1
    slope = y * _rising_k1(x) * r - 0.5 * y / (1.0 + x)
    a2 = a * a
    power = 1.0                                        # a^(2k - 2)
    for k in range(len(_STIRLING_LGAMMA)):
        value += _STIRLING_LGAMMA[k] * power * a * math.expm1(-(2.0 * k + 1.0) * log_x1)
        slope += _DIGAMMA_SERIES[k] * power * math.expm1(-(2.0 * k + 2.0) * log_x1)
        power *= a2
    return value, slope
