"""Jitted EP / QP site code of the Student-t likelihood,
p(y | f) = Gamma((df+1)/2) / (Gamma(df/2) sqrt(df pi) scale) (1 + (y - f)^2 / (df scale^2))^(-(df+1)/2),
params (df, scale).

log Z, the mean, the variance and sigma* all come from one set of panels of the composite
20-point Gauss-Legendre rule (:func:`gpdsl._jit.quadrature.moments_on_edges`,
:func:`gpdsl._jit.quadrature.wasserstein_sd_edges`), ~300-1,500 density evaluations.  The window
and panels (checked against a 4x finer rule over a twice wider window, relative error < 1e-11):

In x = (f - y) / a with a = scale sqrt(df), where
q(x) ~ (1 + x^2)^-p N(x | loc, s2), p = (df+1)/2, loc = (mu - y)/a, s2 = sigma^2 / a^2.  Its
stationary points solve the cubic (x - loc)(1 + x^2) + 2 p s2 x = 0 and lie between 0 (y) and
loc (the cavity): one mode, or two with an antimode between (an outlier y), found by
bisection.  |d^2 log q| <= 2p + 1/s2 =: K everywhere, so log int q >= max log q + log
sqrt(2 pi / K).  From each mode the window reaches out, doubling its step, to where the mass
left beyond is provably below e^-46 of that bound (times a margin for the variance): outwards,
where log q falls monotonically, q(x) (d + 1.25 sqrt(s2)) bounds it (d: the distance left to
where both factors fall); towards the antimode, |mode - antimode| q(x); a mode whose whole side
is negligible is left out, and a gap between the two windows is one panel (its mass is
negligible, but QP's integrand phi(Phi^-1(F)) is not: F is constant there and the rule
integrates that exactly).  Panels are at most min(2 sqrt(s2), k/(1+k) sqrt(1+x^2)) wide with
k = min(1, 1/sqrt(2p)): the likelihood's branch points at x = +-i lie at least 1/k panel widths
away from every panel, and its local scale sqrt(1 + x^2) / sqrt(2p) is resolved.  sigma* sums
1 - F from the right (heavy tails).  Measured against the 4x finer, wider rule over df 0.5..1e5,
scales 0.01..5, y - mu up to 55: log Z 3e-14, variance 8e-12, mean 4e-12 of an sd, sigma*
3e-12, the gradient expectations 1e-13; the worst at a cavity 3,000 of its sds from y, where
rounding x (origin y) costs that much; 1e-13 otherwise.  At most ~70 panels.
"""
import math

import numpy as np
from numba import njit

from ..projections import SiteFunctions, site_function
from ..quadrature import edge_rules
from ..special import digamma_half_excess, log1p_excess, student_t_log_norm_excess

_T_TAIL_LOG = 46.0          # -log(1e-20): tilted mass left out of the Student-t window (plus a margin)
_T_PANEL_GAUSS = 2.0        # Student-t panel width / cavity sd
_T_PANEL_CORE = 1.0         # ... / (sqrt(1 + x^2) / sqrt(df + 1)), the likelihood's local scale
_T_PANEL_POLE = 1.0         # ... / sqrt(1 + x^2), the distance to its branch points (at most)
_T_MAX_PANELS = 4096        # reached only far outside the ranges of the module docstring
# The cavity's variance over the likelihood's curvature scale^2 df / (df + 1) (_t_curvature_scale2),
# or for _T_S2_MAX over scale^2 df, the rule's x = (f - y) / (scale sqrt(df)): below _T_S2_POINT the
# cavity is narrow on the likelihood's scale and the tilted moments are its expansion in the cavity variance
# (_student_t_degenerate; its error is O(s2^2), within 1e-16 of 40-digit quadrature from s2 = 1e-8
# down, where the panels' rounding had grown to 1e-12 and at s2 ~ 1e-38 gave log Z 7.7 for 0.14
# and a tilted variance 2e6 times the cavity's: fuzz, StudentT EP at kernel variance 5e-42);
# above _T_S2_MAX (a scale ~1e-125 cavity sds or less; scale^2 df underflowing to 0 among them)
# the rule's x^2 would overflow: refused as nan, the site skipped.  Without these tests
# var / (scale^2 df) or 1 / s2 raised Numba's bare ZeroDivisionError.
_T_S2_POINT = 1e-8
_T_S2_MAX = 1e250


@site_function
@njit(cache=True, nogil=True)
def _log_density(x, loc, scale2, power, log_norm):
    """-power log(1 + x^2) - (x - loc)^2 / (2 scale2) - log_norm in x = (f - y) / a,
    a = scale sqrt(df) (power = (df + 1)/2, loc = (mu - y)/a, scale2 = cavity variance / a^2)."""
    u = x - loc
    return -power * math.log1p(x * x) - 0.5 * u * u / scale2 - log_norm


@site_function
@njit(cache=True, nogil=True)
def _extra_terms(x, loc, power):
    """The integrands of E[log(1 + x^2) - x^2 / (1 + x^2)] (formed without cancellation at small x,
    as the df gradient at large df needs) and E[x^2 / (1 + x^2)]."""
    x2 = x * x
    return log1p_excess(x2), x2 / (1.0 + x2)


_moments_on_edges, _wasserstein_sd_edges = edge_rules(_log_density, _extra_terms)


@njit(cache=True, nogil=True)
def _student_t_walk(lo, hi, step, cap, edges, count):
    """Panels from lo to hi after the edges[:count] already there (edges[count - 1] == lo), each
    [x, x + w] with w = min(cap, step sqrt(1 + x^2)); written to ``edges`` unless it is empty;
    returns the new count.  With ``step`` = k / (1 + k), since sqrt(1 + x^2) (the distance to
    the likelihood's branch points +-i) is 1-Lipschitz, every panel lies at least 1/k of its
    width from them, wherever it is."""
    fill = edges.shape[0] > 0
    x = lo
    while x < hi:
        b = x + min(cap, step * math.sqrt(1.0 + x * x))
        if not (b > x) or b > hi or count >= _T_MAX_PANELS:
            b = hi
        if fill:
            edges[count] = b
        count += 1
        x = b
    return count


@njit(cache=True, nogil=True)
def _student_t_edges(lo, gap_lo, gap_hi, hi, step, cap, edges):
    """The panels of [lo, gap_lo] and [gap_hi, hi] (:func:`_student_t_walk`) with the gap between
    as one panel; their edges written to ``edges`` unless it is empty; returns their number."""
    if edges.shape[0] > 0:
        edges[0] = lo
    count = _student_t_walk(lo, gap_lo, step, cap, edges, 1)
    if gap_hi > gap_lo:
        if edges.shape[0] > 0:
            edges[count] = gap_hi
        count += 1
    return _student_t_walk(gap_hi, hi, step, cap, edges, count)


@njit(cache=True, nogil=True)
def _student_t_log_q(x, loc, s2, power):
    u = x - loc
    return -power * math.log1p(x * x) - 0.5 * u * u / s2


@njit(cache=True, nogil=True)
def _student_t_cubic(x, loc, k):
    """(x - loc)(1 + x^2) + k x, k = 2 power s2: its roots are the stationary points of log q."""
    return (x - loc) * (1.0 + x * x) + k * x


@njit(cache=True, nogil=True)
def _student_t_root(lo, hi, loc, k):
    """The root of _student_t_cubic in [lo, hi] (a sign change) by bisection."""
    f_lo = _student_t_cubic(lo, loc, k)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not (lo < mid < hi):
            break
        f_mid = _student_t_cubic(mid, loc, k)
        if (f_mid < 0.0) == (f_lo < 0.0):
            lo, f_lo = mid, f_mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@njit(cache=True, nogil=True)
def _student_t_modes(loc, s2, power):
    """(x1, x2, antimode): the maxima of log q(x) = -power log(1 + x^2) - (x - loc)^2 / (2 s2),
    the likelihood's side first (x2 = x1 and antimode = nan when there is one).  The stationary
    points solve the cubic (x - loc)(1 + x^2) + 2 power s2 x = 0, whose roots all lie between 0
    and loc; it has three when its local maximum and minimum (the roots of its derivative
    3x^2 - 2 loc x + 1 + 2 power s2) straddle 0, else one."""
    if loc == 0.0:
        return 0.0, 0.0, math.nan
    sign = 1.0 if loc > 0.0 else -1.0
    big = abs(loc)                              # mirrored to loc > 0: the roots in (0, big)
    k = 2.0 * power * s2
    disc = big * big - 3.0 * (1.0 + k)
    if disc > 0.0:
        r = math.sqrt(disc)
        c1 = (big - r) / 3.0                    # the cubic's local maximum, then minimum
        c2 = (big + r) / 3.0
        f1 = _student_t_cubic(c1, big, k)
        f2 = _student_t_cubic(c2, big, k)
        if f1 >= 0.0 and f2 <= 0.0:
            x1 = _student_t_root(0.0, c1, big, k)
            x2 = _student_t_root(c2, big, big, k)
            return sign * x1, sign * x2, sign * _student_t_root(c1, c2, big, k)
        x = _student_t_root(0.0, c1, big, k) if f2 > 0.0 else _student_t_root(c2, big, big, k)
        return sign * x, sign * x, math.nan
    x = _student_t_root(0.0, big, big, k)
    return sign * x, sign * x, math.nan


@njit(cache=True, nogil=True)
def _student_t_reach(x0, direction, stop, loc, s2, power, level, sx):
    """The first x = x0 + direction sd 2^j (j = 0, 1, ...; sd = the narrowest scale) where the
    mass that it leaves out is below e^level.  Towards an antimode ``stop`` (finite): that bound
    is |x0 - stop| q(x) (log q falls to the antimode and rises after it, so a gap's density is at
    most that at its ends), and ``stop`` itself if it is reached first.  Outwards (``stop`` nan,
    log q falls from x0 on): q(x) (d + sx sqrt(pi/2)) with d the distance from x to the last of
    0 and loc on that side, beyond which the likelihood and the cavity both fall."""
    sd = 1.0 / math.sqrt(2.0 * power + 1.0 / s2)
    inner = not math.isnan(stop)
    x = x0
    for j in range(1000):                       # 2^1000 sds: never reached for finite parameters
        step = x0 + direction * sd * 2.0 ** j
        if not math.isfinite(step):
            break
        x = step
        if inner:
            if (x - stop) * direction >= 0.0:
                return stop
            if _student_t_log_q(x, loc, s2, power) + math.log(abs(x0 - stop)) < level:
                return x
        else:
            beyond = max(0.0, max(0.0, loc * direction) - x * direction)
            if _student_t_log_q(x, loc, s2, power) + math.log(beyond + 1.2533141373155003 * sx) < level:
                return x
    return x


@njit(cache=True, nogil=True)
def _student_t_rule(y, mu, var, df, scale):
    """(edges, count, loc, scale2, power, a) of the Student-t tilted rule in x = (f - y) / a,
    a = scale sqrt(df), where the density is q(x) = (1 + x^2)^-power N(x | loc, scale2) up to a
    constant (see the module docstring for the windows and the panels)."""
    a = scale * math.sqrt(df)
    loc = (mu - y) / a
    s2 = var / (a * a)
    sx = math.sqrt(s2)
    power = 0.5 * (df + 1.0)
    curv = 2.0 * power + 1.0 / s2               # bounds |d^2 log q / dx^2|
    x1, x2, anti = _student_t_modes(loc, s2, power)
    l1, l2 = _student_t_log_q(x1, loc, s2, power), _student_t_log_q(x2, loc, s2, power)
    # log int q >= max log q + log sqrt(2 pi / curv) (log q >= its maximum - curv (x - mode)^2 / 2)
    low = max(l1, l2) + 0.5 * math.log(2.0 * math.pi / curv)
    level = low - _T_TAIL_LOG - 2.0 * math.log1p((abs(loc) + 10.0 * sx) * math.sqrt(curv))
    direction = 1.0 if loc >= 0.0 else -1.0     # from the likelihood's mode x1 towards the cavity's x2
    keep1, keep2 = True, True
    if not math.isnan(anti):
        # a mode whose whole side (antimode to infinity) is negligible is left out
        side2 = abs(x2 - anti) + abs(x2) + abs(loc) + 1.2533141373155003 * sx
        side1 = abs(x1 - anti) + abs(x1) + abs(loc) + 1.2533141373155003 * sx
        keep2 = l2 + math.log(side2) >= level
        keep1 = l1 + math.log(side1) >= level
    if math.isnan(anti) or not (keep1 and keep2):
        mode = x1 if keep1 else x2
        bounds = (_student_t_reach(mode, -direction, math.nan, loc, s2, power, level, sx),
                  _student_t_reach(mode, direction, math.nan, loc, s2, power, level, sx))
        lo, hi = min(bounds), max(bounds)
        gap_lo = gap_hi = hi
    else:
        out1 = _student_t_reach(x1, -direction, math.nan, loc, s2, power, level, sx)
        in1 = _student_t_reach(x1, direction, anti, loc, s2, power, level, sx)
        in2 = _student_t_reach(x2, -direction, anti, loc, s2, power, level, sx)
        out2 = _student_t_reach(x2, direction, math.nan, loc, s2, power, level, sx)
        lo, hi = min(out1, out2), max(out1, out2)
        gap_lo, gap_hi = min(in1, in2), max(in1, in2)
    k = min(_T_PANEL_POLE, _T_PANEL_CORE / math.sqrt(2.0 * power))
    step = k / (1.0 + k)
    cap = _T_PANEL_GAUSS * sx
    count = _student_t_edges(lo, gap_lo, gap_hi, hi, step, cap, np.empty(0))
    edges = np.empty(count)
    _student_t_edges(lo, gap_lo, gap_hi, hi, step, cap, edges)
    return edges, count, loc, s2, power, a


@njit(cache=True, nogil=True)
def _student_t_log_norm(df, scale):
    """log of Gamma((df+1)/2) / (Gamma(df/2) sqrt(df pi) scale), the Student-t density at 0, without
    the lgammas' cancellation at large df (:func:`gpdsl._jit.special.student_t_log_norm_excess`)."""
    return student_t_log_norm_excess(df) - 0.5 * math.log(2.0 * math.pi) - math.log(scale)


@njit(cache=True, inline="always")
def _t_curvature_scale2(df, scale):
    """scale^2 df / (df + 1): the squared scale on which log p(y | f) turns at its mode (the inverse
    of its curvature there), the narrowest it turns anywhere; scale^2 for large df."""
    return scale * scale * (df / (df + 1.0))


@njit(cache=True, nogil=True)
def _student_t_ok(y, mu, var, df, scale):
    """Whether the rule applies: finite positive parameters, the cavity's variance at least
    _T_S2_POINT times the likelihood's curvature scale^2 and var / (scale^2 df) at most _T_S2_MAX."""
    if not (math.isfinite(y) and math.isfinite(mu) and var > 0.0 and math.isfinite(var) and df > 0.0
            and math.isfinite(df) and scale > 0.0 and math.isfinite(scale)):
        return False
    a2 = df * scale * scale
    return a2 > 0.0 and var >= _T_S2_POINT * _t_curvature_scale2(df, scale) and var / a2 <= _T_S2_MAX


@njit(cache=True, nogil=True)
def _student_t_degenerate(y, mu, var, df, scale):
    """The Student-t site's (log Z, mean, variance, E[log(1 + u) - u / (1 + u)], E[u / (1 + u)]) where
    the rule does not apply: a cavity of variance 0, or one so narrow on the likelihood's scale
    (var < _T_S2_POINT scale^2 df / (df + 1)) that the moments are their expansion in var about f = mu,
    log Z = log p + var (g^2 + h) / 2, mean = mu + var g, variance = var + var^2 h, with g and h the
    first two derivatives of log p(y | f) at mu (so that the site keeps the likelihood's
    curvature -h as its precision); else nan (the sweeps skip such a site and the evidence is
    refused).  The two expectations are taken at f = mu."""
    if (math.isfinite(y) and math.isfinite(mu) and 0.0 <= var < math.inf and 0.0 < df < math.inf
            and 0.0 < scale < math.inf and (var == 0.0 or var < _T_S2_POINT * _t_curvature_scale2(df, scale))):
        r = y - mu
        width2 = df * scale * scale
        u = r * r / width2
        # d/df log p = (df + 1) r / (df s^2 + r^2), d2 = (df + 1) (r^2 - df s^2) / (df s^2 + r^2)^2,
        # written with u so that no r^2 + df s^2 overflows.
        g = (df + 1.0) * r / width2 / (1.0 + u)
        h = (df + 1.0) * (u - 1.0) / width2 / ((1.0 + u) * (1.0 + u))
        log_p = _student_t_log_norm(df, scale) - 0.5 * (df + 1.0) * math.log1p(u)
        return (log_p + 0.5 * var * (g * g + h), mu + var * g, var + var * var * h, log1p_excess(u),
                u / (1.0 + u))
    return math.nan, math.nan, math.nan, math.nan, math.nan


@njit(cache=True, nogil=True)
def _student_t_moments(y, mu, var, df, scale, extra):
    """(log Z, mean, variance, E[log(1 + u) - u / (1 + u)], E[u / (1 + u)], edges, count, loc, scale2, power, a,
    log mass) of Student-t(y | f, df, scale) N(f | mu, var) / Z, u = (y - f)^2 / (df scale^2), on
    the panels of :func:`_student_t_rule`; without ``extra`` the two expectations are nan.
    Parameters as checked by _student_t_ok."""
    edges, count, loc, s2, power, a = _student_t_rule(y, mu, var, df, scale)
    log_mass, mean_x, var_x, e1, e2 = _moments_on_edges(loc, s2, power, edges, count, extra)
    # Z = a C / sqrt(2 pi var) int (1 + x^2)^-power exp(-(x - loc)^2 / (2 s2)) dx, a C = Gamma(power) /
    # (Gamma(df/2) sqrt(pi)); log Gamma(power) - log Gamma(df/2) by the excess, which is stable at
    # large df (the two lgammas differenced lose ~1e-16 df log df: an evidence of +22 at df 1e20).
    log_z = (log_mass + student_t_log_norm_excess(df) + 0.5 * math.log(0.5 * df) - 0.5 * math.log(math.pi)
             - 0.5 * math.log(2.0 * math.pi * var))
    return log_z, y + a * mean_x, a * a * var_x, e1, e2, edges, count, loc, s2, power, a, log_mass


@njit(cache=True, nogil=True)
def student_t_tilted_moments(y, mu, var, df, scale):
    """(log Z, mean, variance) of Student-t(y | f, df, scale) N(f | mu, var) / Z by quadrature
    (:func:`_student_t_rule`); nan for parameters that are not finite and positive."""
    if not _student_t_ok(y, mu, var, df, scale):
        log_z, mean, var_t, _, _ = _student_t_degenerate(y, mu, var, df, scale)
        return log_z, mean, var_t
    r = _student_t_moments(y, mu, var, df, scale, bool(False))
    return r[0], r[1], r[2]


@njit(cache=True, nogil=True)
def _student_t_qp(y, mu, var, df, scale):
    """(log Z, mean, sigma*^2) of the Student-t tilted distribution (QP), sigma* on the panels of
    the moments (in x, times a)."""
    if not _student_t_ok(y, mu, var, df, scale):
        log_z, mean, var_t, _, _ = _student_t_degenerate(y, mu, var, df, scale)
        return log_z, mean, var_t
    log_z, mean, _, _, _, edges, count, loc, s2, power, a, log_mass = _student_t_moments(y, mu, var, df, scale,
                                                                                       bool(False))
    sd = a * _wasserstein_sd_edges(loc, s2, power, log_mass, edges, count)
    return log_z, mean, sd * sd


@njit(cache=True, nogil=True)
def student_t_qp_sd(y, mu, sd, df, scale):
    """QP standard deviation sigma* (eq. 7) of Student-t(y | f, df, scale) N(f | mu, sd^2) / Z."""
    return math.sqrt(_student_t_qp(y, mu, sd * sd, df, scale)[2])


@njit(cache=True, inline="always")     # as probit_project
def student_t_project(y, mu, var, df, scale, qp):
    """(log Z, mean, variance) of the Student-t tilted distribution with cavity N(mu, var): EP's
    moments, or with ``qp`` the QP variance sigma*^2 in place of EP's."""
    if qp:
        return _student_t_qp(y, mu, var, df, scale)
    return student_t_tilted_moments(y, mu, var, df, scale)


@njit(cache=True, nogil=True)
def student_t_log_z_gradient(y, mu, var, df, scale):
    """(d log Z / d df, d log Z / d scale) of the Student-t site: the tilted expectations of
    d log p / d theta, with u = (y - f)^2 / (df scale^2),
    d/d df = (psi((df+1)/2) - psi(df/2) - 1/df - [log(1 + u) - u / (1 + u)] + u / (df (1 + u))) / 2 and
    d/d scale = ((df + 1) u / (1 + u) - 1) / scale.  The df gradient tends to 0 like 1/df^2; its
    two differences (of the digammas less 1/df, and in the bracket) are formed without
    cancellation (gpdsl._jit.special's digamma_half_excess and log1p_excess), so it keeps its
    relative accuracy at any df."""
    if _student_t_ok(y, mu, var, df, scale):
        r = _student_t_moments(y, mu, var, df, scale, bool(True))
        e1, e2 = r[3], r[4]
    else:
        _, _, _, e1, e2 = _student_t_degenerate(y, mu, var, df, scale)
    g_df = 0.5 * (digamma_half_excess(df) - e1 + e2 / df)
    g_scale = ((df + 1.0) * e2 - 1.0) / scale
    return g_df, g_scale



@site_function
@njit(cache=True, nogil=True)
def site(y, mu, var, params, quantile, table, grid):
    """The Student-t site's projection (:mod:`gpdsl._jit.projections`), params (df, scale)."""
    if quantile is None:
        return student_t_tilted_moments(y, mu, var, params[0], params[1])
    return student_t_project(y, mu, var, params[0], params[1], quantile)


@site_function
@njit(cache=True, nogil=True)
def site_gradient(y, mu, var, params):
    """(d log Z / d df, d log Z / d scale) of the Student-t site."""
    return student_t_log_z_gradient(y, mu, var, params[0], params[1])


SITE = SiteFunctions(site, site_gradient)
