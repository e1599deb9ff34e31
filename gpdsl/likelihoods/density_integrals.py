"""Integrals of a likelihood's density that the defaults of :class:`gpdsl.likelihoods.Likelihood`
compute from the density alone: log E_N(f|m,v)[p(y | f)] by a rule centred on the tilted mode
(:func:`log_gaussian_integral`), and the moments and draws of a count pmf by summation over the
counts where its mass lies (:func:`count_moments`, :func:`count_draws`).

Why not Gauss-Hermite on the prior: a likelihood narrower than the latent sd (Gaussian noise of sd
0.01 under latent variance 1, a count of 1000 under N(0, 0.01), a binary label under latent
variance 1e4) puts its mass between the prior's nodes, and the 100-point rule is off by up to
thousands of nats there.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import special

_LOG_2PI = np.log(2.0 * np.pi)

# The tilted rule: f = mode + (Laplace width / _SPREAD) sinh(s), s on _PANELS panels of
# _PANEL_NODES Gauss-Legendre nodes, over f in [min(m, mode) - _WINDOW_SDS sd, max(m, mode) +
# _WINDOW_SDS sd].  The Laplace width is too wide where the tilted density is not Gaussian-shaped
# (a binary label under latent variance 1e4: a plateau of sd 100 ending in a wall of width 1 that
# is 7 from the mode); a sixteenth of it spaces the nodes evenly in log distance from the mode down
# to there.  Measured against 30-digit quadrature (tests/test_likelihoods.py's grid: means -5..2,
# variances 1e-4..1e4, cloglog labels, counts 0..1000, Gaussian noise of sd 0.01): relative error
# 2e-12 at most, 7e-6 with the full width, 4e-10 with 384 nodes of 8 per panel.
_PANELS = 32
_PANEL_NODES = 16
_SPREAD = 16.0
_WINDOW_SDS = 12.0
# The tilted mode: doublings of the step from the mean that bracket it (sd 2^k, k < _EXPANSIONS,
# out to 1e300 sds), then safeguarded Newton steps (rtsafe), and the step (in units of the width)
# at which they stop.  A bisection halves the bracket, so 100 steps reach 1e-30 of it.
_EXPANSIONS = 1000
_NEWTON_STEPS = 100
_NEWTON_TOL = 1e-9


@lru_cache(maxsize=4)
def composite_legendre(panels, nodes):
    """Nodes u (K,) on [0, 1] and weights (K,) of the composite Gauss-Legendre rule of ``panels``
    equal panels of ``nodes`` points each (K = panels * nodes; the weights sum to 1).

    Parameters
    ----------
    panels, nodes : int

    Returns
    -------
    u, weights : ndarray, shape (K,)
    """
    x, w = np.polynomial.legendre.leggauss(nodes)
    starts = np.arange(panels) / panels
    u = (starts[:, None] + (x[None, :] + 1.0) / (2.0 * panels)).ravel()
    return u, np.tile(w / (2.0 * panels), panels)


def _log_tilted(likelihood, y, mean, offset, var):
    """h(f) = log p(y | f) - offset^2 / (2 var) at f = mean + offset, elementwise (NaN read as -inf).

    The prior's term takes the offset as given, not f - mean: where |mean| is many sds (f rounded
    to 1e-16 |mean|, e.g. 6e-5 at a mean of -3.6e11 and sd 24), f - mean carries that rounding into
    every node's weight and a rule for a density of mass 1 sums to 1 + 1e-7.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        h = likelihood.log_density(y, mean + offset) - 0.5 * offset ** 2 / var
    return np.where(np.isnan(h), -np.inf, h)


def _tilted_slope(likelihood, y, f, mean, precision):
    """h'(f) = d log p / df - (f - mean) precision and the curvature max(precision - d^2 log p /
    df^2, precision) (inf where d^2 log p / df^2 is not finite: no Newton step there)."""
    with np.errstate(over="ignore", invalid="ignore"):
        _, d1, d2, _ = likelihood.log_density_derivatives(y, f)
        slope = d1 - (f - mean) * precision
    curvature = np.where(np.isfinite(d2), np.maximum(precision - d2, precision), np.inf)
    return slope, curvature


def tilted_mode(likelihood, y, mean, var):
    """The mode of the tilted density p(y | f) N(f | mean, var) and its Laplace width: a root of
    h'(f) = d log p / df - (f - mean) / var bracketed from f = mean by steps of sd 2^k in the
    direction h' points, then safeguarded Newton steps (rtsafe: the curvature floored at the
    prior's 1 / var, a bisection of the bracket where a step leaves it or does not halve the one
    before).  The bracket keeps h' > 0 at its lower end and < 0 at its upper end, so the root is a
    local maximum of h, the mode itself where log p is concave.  Plain Newton steps from the mean
    moved a Poisson log link's f by ~1 a step where exp(f) dominates (60 steps from a mean of 600
    ended at 540 for a mode at 10.6) and not at all where exp(f) overflows (a NaN step): the rule
    was centred far from the mass and returned -inf.  A row whose slope is NaN at the mean stays
    there.

    Parameters
    ----------
    likelihood : Likelihood
        Bound, with ``log_density_derivatives``.
    y, mean, var : ndarray, shape (n,)
        Targets (coded), and q(f)'s means and variances (> 0).

    Returns
    -------
    mode : ndarray, shape (n,)
    width : ndarray, shape (n,)
        (1 / var - d^2 log p / df^2)^(-1/2) at the mode (the prior's sd where log p curves
        upwards there).
    """
    precision = 1.0 / var
    sd = np.sqrt(var)
    f = mean.copy()
    slope, _ = _tilted_slope(likelihood, y, f, mean, precision)
    lo = np.where(slope >= 0.0, f, -np.inf)
    hi = np.where(slope <= 0.0, f, np.inf)
    direction = np.sign(slope)
    # Expansion: rows whose far end is still open (not NaN at the mean, not a root there).
    open_ = np.flatnonzero(np.isfinite(direction) & (direction != 0.0))
    for k in range(_EXPANSIONS):
        if not open_.size:
            break
        probe = mean[open_] + direction[open_] * sd[open_] * 2.0 ** k
        g, _ = _tilted_slope(likelihood, y[open_], probe, mean[open_], precision[open_])
        above = g < 0.0
        below = g > 0.0
        hi[open_[above]] = probe[above]
        lo[open_[below]] = probe[below]
        closed = (direction[open_] > 0.0) & above | (direction[open_] < 0.0) & below | (g == 0.0)
        f[open_[g == 0.0]] = probe[g == 0.0]
        lo[open_[g == 0.0]] = hi[open_[g == 0.0]] = probe[g == 0.0]
        open_ = open_[~closed & np.isfinite(probe)]
    active = np.flatnonzero(np.isfinite(lo) & np.isfinite(hi) & (lo < hi))
    f[active] = np.where(direction[active] > 0.0, lo[active], hi[active])
    previous = hi - lo
    for _ in range(_NEWTON_STEPS):
        if not active.size:
            break
        g, curvature = _tilted_slope(likelihood, y[active], f[active], mean[active], precision[active])
        lo[active[g > 0.0]] = f[active[g > 0.0]]
        hi[active[g < 0.0]] = f[active[g < 0.0]]
        with np.errstate(invalid="ignore"):
            # NaN (a bisection) where the curvature is not finite: no Newton step is known there.
            newton = np.where(np.isfinite(curvature), g / curvature, np.nan)
        tol = _NEWTON_TOL / np.sqrt(np.where(np.isfinite(curvature), curvature, precision[active]))
        converged = (np.abs(newton) <= tol) | (g == 0.0)
        trial = f[active] + newton
        bisect = ~((trial > lo[active]) & (trial < hi[active])) | (np.abs(newton) > 0.5 * previous[active])
        step = np.where(bisect & ~converged, 0.5 * (lo[active] + hi[active]) - f[active], np.where(g == 0.0, 0.0, newton))
        previous[active] = np.abs(step)
        f[active] = f[active] + step
        active = active[~converged & (hi[active] - lo[active] > tol)]
    _, _, d2, _ = likelihood.log_density_derivatives(y, f)
    curvature = np.where(np.isfinite(d2), np.maximum(precision - d2, precision), precision)
    return f, 1.0 / np.sqrt(curvature)


def log_gaussian_integral(likelihood, y, mean, var):
    """log E_N(f | mean, var)[p(y | f)] = log int p(y | f) N(f | mean, var) df, elementwise.

    The rule is centred on the tilted mode f^ and spread by a sixteenth of its Laplace width, w
    (:func:`tilted_mode`): f = f^ + w sinh(s) with s on a composite Gauss-Legendre rule (512
    nodes) over f in [min(mean, f^) - 12 sd, max(mean, f^) + 12 sd], so that nodes are dense
    where p(y | f) N(f) turns and spread geometrically out to the prior's scale.  The sum runs in
    log space: log sum_k omega_k exp(h(f_k)) w cosh(s_k) / sqrt(2 pi var).  The window holds all
    but e^-72 of a tilted density whose log is concave (the tilted density is then more
    concentrated than the prior); where log p is not concave the prior's own window is in it too.
    A row of var = 0 is log p(y | mean).

    Parameters
    ----------
    likelihood : Likelihood
        Bound, with ``log_density`` and ``log_density_derivatives``.
    y, mean, var : ndarray, shape (n,)
        Targets (coded), q(f)'s means and variances (>= 0).

    Returns
    -------
    ndarray, shape (n,)
    """
    y, mean = np.asarray(y, dtype=float), np.asarray(mean, dtype=float)
    var = np.maximum(np.asarray(var, dtype=float), 0.0)
    out = np.empty(mean.shape)
    point = ~(var > 0.0)
    if point.any():
        out[point] = likelihood.log_density(y[point], mean[point])
    rows = np.flatnonzero(~point)
    if not rows.size:
        return out
    y, mean, var = y[rows], mean[rows], var[rows]
    sd = np.sqrt(var)
    if likelihood.provides("log_density_derivatives"):
        mode, width = tilted_mode(likelihood, y, mean, var)
    else:
        mode, width = mean, sd
    width = width / _SPREAD
    lo = np.arcsinh((np.minimum(mean, mode) - _WINDOW_SDS * sd - mode) / width)[:, None]
    hi = np.arcsinh((np.maximum(mean, mode) + _WINDOW_SDS * sd - mode) / width)[:, None]
    u, omega = composite_legendre(_PANELS, _PANEL_NODES)
    s = lo + (hi - lo) * u[None, :]
    offset = (mode - mean)[:, None] + width[:, None] * np.sinh(s)
    terms = _log_tilted(likelihood, np.broadcast_to(y[:, None], s.shape), mean[:, None], offset, var[:, None])
    with np.errstate(divide="ignore"):
        terms = terms + np.log(width[:, None] * np.cosh(s) * (hi - lo) * omega) - 0.5 * (_LOG_2PI + np.log(var))[:, None]
    out[rows] = special.logsumexp(terms, axis=1)
    # A window that rounds to one value of f (sd below ~1e-16 of |mean|) is a point mass.
    collapsed = ~(mean + offset[:, -1] > mean + offset[:, 0])
    out[rows[collapsed]] = likelihood.log_density(y[collapsed], mean[collapsed])
    return out


# Counts: every latent value first sums y = 0.._COUNT_FIRST - 1 (on to _COUNT_SECOND where the pmf
# falls by then); one whose pmf is not done there gets a window [lo, hi] around the pmf's mode, out to where log p is _COUNT_DROP below its maximum
# (the mass beyond is below 1e-19 of it for a pmf that is log-concave in y), found by doubling and
# bisection over counts up to _COUNT_LIMIT, and sums every h-th count of it times h, h = ceil((hi -
# lo + 1) / _COUNT_CELLS): all of them for a window of up to _COUNT_CELLS counts, else the
# trapezoid rule of a pmf smooth on the scale of h (about a thirtieth of its sd), whose error is of
# order exp(-2 pi^2 (sd / h)^2).  A sum more than _COUNT_NORMALISED from 1, plus the rounding of
# a log pmf at the window's counts (terms of size y log y, rounded to 1e-16 of that), is a pmf
# that is not normalised (or not smooth), and refused.
_COUNT_FIRST = 32
_COUNT_SECOND = 512
_COUNT_CELLS = 512
_COUNT_DROP = 46.0
_COUNT_LIMIT = 2 ** 40
_COUNT_EXACT_SPAN = 1 << 22
_COUNT_NORMALISED = 1e-6
_COUNT_TAIL = 1e-16


def _log_pmf(likelihood, y, f):
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        lp = likelihood.log_density(y, f)
    return np.where(np.isnan(lp), -np.inf, lp)


def _first_counts(likelihood, f, visit):
    """Calls ``visit(rows, counts, pmf (rows, C))`` on blocks of p(y | f) over y = 0, 1, ...:
    _COUNT_FIRST counts, then doubling blocks up to _COUNT_SECOND counts for the rows whose pmf
    falls at the end of the last (its mode passed) and is not done: done where, past half its
    mass, it falls at the last count by a ratio r and the geometric tail p_last r / (1 - r) is
    below 1e-16 of the mass.  Returns the done mask (n,)."""
    mass, done = np.zeros(f.size), np.zeros(f.size, dtype=bool)
    rows, start, size = np.arange(f.size), 0, _COUNT_FIRST
    while rows.size and start < _COUNT_SECOND:
        counts = np.arange(float(start), float(start + size))
        log_pmf = _log_pmf(likelihood, counts[None, :], f[rows, None])
        pmf = np.exp(log_pmf)
        visit(rows, counts, pmf)
        mass[rows] += pmf.sum(axis=1)
        # Falling by its logs (the pmf itself underflows to 0 far below its mode).
        with np.errstate(invalid="ignore"):
            ratio = np.exp(log_pmf[:, -1] - log_pmf[:, -2])
        falling = ratio < 1.0
        done[rows] = (mass[rows] > 0.5) & falling & (pmf[:, -1] * ratio <= _COUNT_TAIL * (1.0 - ratio) * mass[rows])
        rows = rows[~done[rows] & falling]
        start, size = start + size, start + size
    return done


def _bisect(predicate, lo, hi):
    """The smallest integer y in [lo, hi] with predicate(y, rows) True, elementwise, given that
    it is True at hi and monotone (False then True) on [lo, hi]."""
    lo, hi = lo.copy(), hi.copy()
    rows = np.arange(lo.size)
    while True:
        open_ = rows[lo < hi]
        if not open_.size:
            return hi
        mid = np.floor(0.5 * (lo[open_] + hi[open_]))
        true = predicate(mid, open_)
        hi[open_[true]] = mid[true]
        lo[open_[~true]] = mid[~true] + 1.0


def count_windows(likelihood, f):
    """The counts [lo, hi] that hold a pmf's mass at each latent value (see the module's notes).

    Parameters
    ----------
    likelihood : Likelihood
        Bound, with a count ``log_density``.
    f : ndarray, shape (n,)

    Returns
    -------
    lo, hi : ndarray, shape (n,)
        Float counts (0 where not found).
    from_zero : ndarray of bool, shape (n,)
        Where the mass starts at y = 0 (the window's lower end is not in the pmf's tail: summing
        every h-th count is not accurate there, every count is summed).
    failure : ndarray of object, shape (n,)
        None, or why no window was found: a pmf that is 0 at every count scanned, or whose mass
        reaches beyond 2^40 counts.
    """
    scan = np.concatenate([[0.0], 2.0 ** np.arange(int(np.log2(_COUNT_LIMIT)) + 1)])
    lp = _log_pmf(likelihood, scan[None, :], f[:, None])
    k = np.argmax(lp, axis=1)
    at = lambda y, rows: _log_pmf(likelihood, y, f[rows])  # noqa: E731
    # The mode: the first count past which log p does not rise over a step of sqrt(y) / 4 counts,
    # between the scan's neighbours of k (adjacent counts would differ by less than the rounding of
    # log p near the mode of a pmf at 10^9 counts, and a pmf's sd is about sqrt(y) or more).
    step = lambda y: np.maximum(1.0, np.floor(0.25 * np.sqrt(y)))  # noqa: E731
    mode = _bisect(lambda y, rows: at(y + step(y), rows) <= at(y, rows), scan[np.maximum(k - 1, 0)],
                   scan[np.minimum(k + 1, scan.size - 1)])
    floor = at(mode, np.arange(f.size)) - _COUNT_DROP
    # The right edge: below the floor at a scanned count above the mode, else beyond the limit.
    beyond = (lp < floor[:, None]) & (scan[None, :] > mode[:, None])
    failure = np.full(f.size, None, dtype=object)
    failure[~beyond.any(axis=1)] = "its mass reaches beyond y = 2^40"
    failure[~np.isfinite(floor)] = "it is 0 at every count scanned (0 and 2^j up to 2^40)"
    found = failure == None  # noqa: E711
    right = np.where(found, scan[np.argmax(beyond, axis=1)], mode)
    floor = np.where(found, floor, np.inf)
    hi = _bisect(lambda y, rows: at(y, rows) < floor[rows], mode, right)
    start = at(np.zeros(f.size), np.arange(f.size)) >= floor
    lo = np.where(start | ~found, 0.0, _bisect(lambda y, rows: at(y, rows) >= floor[rows], np.zeros(f.size), mode) - 1.0)
    return np.maximum(lo, 0.0), np.where(found, hi, 0.0), start & found, failure


def _failure(f, failure):
    """The message of the first latent value with a failure, or None."""
    bad = np.flatnonzero(failure != None)  # noqa: E711
    return None if not bad.size else f"p(y | f) at f = {f[bad[0]]:.6g}: {failure[bad[0]]}"


def count_moments(likelihood, f):
    """E[y | f] and Var[y | f] of a count pmf by summation (see the module's notes), elementwise.

    Parameters
    ----------
    likelihood : Likelihood
        Bound, with a count ``log_density``.
    f : ndarray, shape (n,)

    Returns
    -------
    mean, var : ndarray, shape (n,)
        NaN where the summation failed.
    failure : str or None
        Why it failed at the first latent value where it did: a pmf whose mass lies beyond 2^40
        counts, or one that does not sum to 1 (to 1e-6) over the counts that hold its mass.
    """
    f = np.asarray(f, dtype=float)
    sums, failure = np.zeros((3, f.size)), np.full(f.size, None, dtype=object)
    def add(rows, counts, pmf):
        sums[:, rows] += (pmf.sum(axis=1), pmf @ counts, pmf @ (counts * counts))

    done = _first_counts(likelihood, f, add)
    mass = sums[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        first = sums[1] / mass
        second = sums[2] / mass - first * first
    rest = np.flatnonzero(~done)
    if rest.size:
        lo, hi, from_zero, failure[rest] = count_windows(likelihood, f[rest])
        failure[rest[from_zero & (hi + 1.0 > _COUNT_EXACT_SPAN)]] = "its mass spreads from 0 over more than 2^22 counts"
        step = np.where(from_zero, 1.0, np.maximum(1.0, np.ceil((hi - lo + 1.0) / _COUNT_CELLS)))
        # Moments about the window's middle: Var = E[(y - c)^2] - (E[y] - c)^2 without the
        # cancellation of E[y^2] - E[y]^2 at counts of 10^9.
        centre = np.floor(0.5 * (lo + hi))
        sums = np.zeros((3, rest.size))
        cells = np.minimum(np.ceil((hi - lo + 1.0) / step), _COUNT_EXACT_SPAN)
        for offset in range(0, int(cells.max()), _COUNT_CELLS):
            rows = np.flatnonzero(cells > offset)
            y = lo[rows, None] + step[rows, None] * (offset + np.arange(_COUNT_CELLS)[None, :])
            inside = y <= hi[rows, None]
            p = np.where(inside, np.exp(_log_pmf(likelihood, np.where(inside, y, lo[rows, None]), f[rest[rows], None])), 0.0)
            d = y - centre[rows, None]
            sums[:, rows] += (p.sum(axis=1), (p * d).sum(axis=1), (p * d * d).sum(axis=1))
        mass[rest] = step * sums[0]
        with np.errstate(invalid="ignore", divide="ignore"):
            shift = sums[1] / sums[0]
            second[rest] = sums[2] / sums[0] - shift * shift
        first[rest] = centre + shift
    # The sum's own rounding: log p(y | f) of counts to y_max holds terms of size y log y (log y!,
    # y log rate), rounded to eps of that (2e-6 nats at 10^9 counts); a pmf off by more is refused.
    top = np.zeros(f.size)
    if rest.size:
        top[rest] = hi
    tolerance = _COUNT_NORMALISED + 16.0 * np.finfo(float).eps * top * (1.0 + np.log1p(top))
    off = (failure == None) & ~(np.abs(mass - 1.0) <= tolerance)  # noqa: E711
    failure[off] = [f"it sums to {m:.6g} over the counts that hold its mass, not 1" for m in mass[off]]
    bad = failure != None  # noqa: E711
    first[bad], second[bad] = np.nan, np.nan
    return first, np.maximum(second, 0.0), _failure(f, failure)


def _window_draws(likelihood, f, u, lo, hi, step):
    """Draws within windows [lo, hi] (n,) in the pmf's tails at both ends, in two levels: the
    bucket of ``step`` counts by the window's _COUNT_CELLS buckets (each's mass ``step`` times the
    pmf at its middle: to about (step / sd)^2 / 24 < 1e-4 of it, a window of ~18 sds in 512
    buckets), then the count within it by its own running sum."""
    rows = np.arange(f.size)
    j = np.arange(_COUNT_CELLS)[None, :]
    inside = lo[:, None] + step[:, None] * j <= hi[:, None]
    middle = np.where(inside, lo[:, None] + step[:, None] * j + np.floor(0.5 * (step[:, None] - 1.0)), lo[:, None])
    mass = np.where(inside, step[:, None] * np.exp(_log_pmf(likelihood, middle, f[:, None])), 0.0)
    running = np.cumsum(mass, axis=1)
    target = u * running[:, -1]
    bucket = np.minimum(np.sum(running <= target[:, None], axis=1), np.sum(inside, axis=1) - 1)
    below = np.where(bucket > 0, running[rows, np.maximum(bucket - 1, 0)], 0.0)
    first = lo + step * bucket
    counts = first[:, None] + np.arange(step.max())[None, :]
    valid = (counts < (first + step)[:, None]) & (counts <= hi[:, None])
    cumulative = np.cumsum(np.where(valid, np.exp(_log_pmf(likelihood, np.where(valid, counts, first[:, None]),
                                                           f[:, None])), 0.0), axis=1)
    # The rest of u's mass within the bucket, as a share of the bucket's sum.
    bucket_mass = mass[rows, bucket]
    share = (target - below) / np.where(bucket_mass > 0, bucket_mass, 1.0)
    k = np.minimum(np.sum(cumulative <= (share * cumulative[:, -1])[:, None], axis=1), np.sum(valid, axis=1) - 1)
    return first + k


def _draws_from_zero(likelihood, f, u, hi):
    """Draws of pmfs whose mass starts at 0 by their running sums from y = 0, in doubling blocks
    of counts, each row until its sum passes u (the sums are 1 to rounding; a u above the last
    sum takes ``hi``): the cost is the count drawn, not the window."""
    draws, cdf = hi.copy(), np.zeros(f.size)
    rows, start, size = np.arange(f.size), 0.0, 1024
    while rows.size:
        counts = start + np.arange(float(size))
        running = cdf[rows, None] + np.cumsum(np.exp(_log_pmf(likelihood, counts[None, :], f[rows, None])), axis=1)
        passed = running[:, -1] > u[rows]
        draws[rows[passed]] = counts[np.argmax(running[passed] > u[rows[passed], None], axis=1)]
        cdf[rows] = running[:, -1]
        rows = rows[~passed & (start + size <= hi[rows])]
        start, size = start + size, int(min(2 * size, max(1024, (1 << 22) // max(rows.size, 1))))
    return draws


def count_draws(likelihood, f, u):
    """Counts y with P(y' < y | f) <= u < P(y' <= y | f): draws of the pmf at f by inverting its
    cumulative sum (the first counts; a window from 0 count by count; else the window's buckets,
    then the counts of one).

    Parameters
    ----------
    likelihood : Likelihood
        Bound, with a count ``log_density``.
    f, u : ndarray, shape (n,)
        Latent values and uniform draws.

    Returns
    -------
    draws : ndarray, shape (n,)
        NaN where no draw could be made.
    failure : str or None
        Why, at the first latent value where none could: as :func:`count_windows` says.
    """
    # The first counts: the draw is the first count whose running sum passes u (the sums are 1 to
    # rounding; a u above the last sum takes the last count).
    cdf, draws, left = np.zeros(f.size), np.zeros(f.size), np.ones(f.size, dtype=bool)
    def invert(rows, counts, pmf):
        running = cdf[rows, None] + np.cumsum(pmf, axis=1)
        passed = left[rows] & (running[:, -1] > u[rows])
        draws[rows[passed]] = counts[np.argmax(running[passed] > u[rows[passed], None], axis=1)]
        draws[rows[left[rows] & ~passed]] = counts[-1]
        left[rows[passed]] = False
        cdf[rows] = running[:, -1]

    done = _first_counts(likelihood, f, invert)
    failure = np.full(f.size, None, dtype=object)
    rest = np.flatnonzero(~done)
    if rest.size:
        lo, hi, from_zero, failure[rest] = count_windows(likelihood, f[rest])
        failure[rest[from_zero & (hi + 1.0 > _COUNT_EXACT_SPAN)]] = "its mass spreads from 0 over more than 2^22 counts"
        step = np.maximum(1.0, np.ceil((hi - lo + 1.0) / _COUNT_CELLS))
        ok = failure[rest] == None  # noqa: E711
        zero = np.flatnonzero(from_zero & ok)
        draws[rest[zero]] = _draws_from_zero(likelihood, f[rest[zero]], u[rest[zero]], hi[zero])
        # The other rows in groups whose (rows, counts) blocks stay below 2^22 cells.
        order = np.flatnonzero(~from_zero & ok)
        order = order[np.argsort(step[order])]
        start = 0
        while start < order.size:
            size = max(1, int((1 << 22) // (_COUNT_CELLS + step[order[start:]].max())))
            group = order[start:start + size]
            draws[rest[group]] = _window_draws(likelihood, f[rest[group]], u[rest[group]], lo[group], hi[group],
                                               step[group])
            start += size
    draws[failure != None] = np.nan  # noqa: E711
    return draws, _failure(f, failure)


__all__ = ["log_gaussian_integral", "tilted_mode", "composite_legendre", "count_windows", "count_moments",
           "count_draws"]
