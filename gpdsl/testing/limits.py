"""A likelihood at the limits of its parameters: its density normalised and its derivatives equal
to differences of themselves over extreme but valid hyperparameter values, latent values and
targets (:func:`check_likelihood_limits`; issue 45's NegativeBinomial lost all precision at
dispersion 1e-16, and the probit's third derivative at z = -40)."""
from __future__ import annotations

import math

import numpy as np
from scipy import integrate

from ..inputs import target_kind
from .common import _local_values, at_each_row, label

EPS = np.finfo(float).eps

# Extreme but valid hyperparameter values: a positive one times these factors, a real one plus
# these shifts (the likelihood's own variants' values in between).
POSITIVE_FACTORS = (1e-8, 1e-3, 1.0, 1e3, 1e8)
REAL_SHIFTS = (-30.0, 0.0, 30.0)
# Latent values and, for real targets, offsets of y from f, reaching far into the tails.
LATENT = np.array([-40.0, -5.0, -0.3, 0.7, 6.0, 40.0])
REAL_OFFSETS = np.array([-1e4, -3.0, -1e-6, 0.0, 2.0, 1e4])
# Count targets, from none to a million.
COUNTS = (0.0, 1.0, 2.0, 5.0, 10.0, 100.0, 1e3, 1e4, 1e6)
# The target kinds whose support the check knows (labels, counts 0, 1, ..., the real line), as
# gpdsl.inputs.target_kind reads them (a likelihood that declares none models real targets unless
# its predictive is a probability p).
LIMIT_TARGET_KINDS = ("binary", "count", "real")
# The most terms a count density is summed over; beyond, only sum <= 1 is checked.
COUNT_SUM_MAX = 2_000_000


def _parameter_grid(likelihood):
    """The likelihood bound at its own values and at each hyperparameter moved to each extreme."""
    values = _local_values(likelihood, np.zeros((1, 1)))
    positive = {p.name: p.positive for p in likelihood.parameters(np.zeros((1, 1)))}
    yield values
    for name, value in values.items():
        moves = [value * c for c in POSITIVE_FACTORS] if positive[name] else [value + s for s in REAL_SHIFTS]
        for moved in moves:
            yield {**values, name: moved}


def _cases(likelihood):
    """(y, f) pairs, flat, over the target kind's extreme targets and latent values."""
    kind = target_kind(likelihood)
    if kind == "count":
        y = np.array(COUNTS)
        f = LATENT if likelihood.describe() != "Poisson(square)" else np.array([-40.0, -3.0, -0.1, 0.1, 3.0, 40.0])
        yy, ff = np.meshgrid(y, f)
        return yy.ravel(), ff.ravel()
    if kind == "binary":
        codes = likelihood.prepare_targets(np.array([0.0, 1.0]))
        yy, ff = np.meshgrid(codes, LATENT)
        return yy.ravel(), ff.ravel()
    yy, ff = np.meshgrid(REAL_OFFSETS, LATENT)
    return (ff + yy).ravel(), ff.ravel()


def _total_mass(lik, kind, f):
    """(sum or integral of p(y | f) over y, whether it covered all the mass)."""
    if kind == "binary":
        codes = lik.prepare_targets(np.array([0.0, 1.0]))
        return float(np.sum(np.exp(lik.log_density(codes, np.full(2, f))))), True
    if kind == "count":
        # Counts 0 .. top - 1, top growing fourfold until the upper half of them holds less than
        # 1e-13 of the sum (the tails of count laws fall at least geometrically).
        top = 1024
        while True:
            p = np.exp(lik.log_density(np.arange(top, dtype=float), np.full(top, f)))
            total = math.fsum(p)
            if math.fsum(p[top // 2:]) <= 1e-13 * total or top >= COUNT_SUM_MAX:
                return total, math.fsum(p[top // 2:]) <= 1e-13 * total
            top *= 4
    # Real targets: quadrature over panels growing geometrically away from y = f, so that a
    # density of any width from 1e-12 to 1e12 is resolved; the mass is all there when the two
    # outermost panels (|y - f| from 3e11 to 1e12) hold less than 1e-12 of it.
    edges = f + np.concatenate([-np.logspace(12, -12, 49), [0.0], np.logspace(-12, 12, 49)])
    parts = [integrate.quad(lambda v: math.exp(float(lik.log_density(np.array([v]), np.array([f]))[0])),
                            lo, hi, epsabs=0.0, epsrel=1e-12, limit=200)[0] for lo, hi in zip(edges[:-1], edges[1:])]
    total = math.fsum(parts)
    return total, parts[0] + parts[-1] <= 1e-12 * total


def _agrees(analytic, fn, x, h):
    """The analytic derivative against central differences of fn (ndarray valued) at steps h / 4^k,
    k = 0 .. 8, Richardson-extrapolated from each pair of steps; each element takes the pair whose
    two quotients differ least.  Agreement: within 1e-6 of its size (plus 1e-8),
    plus four times that spread (the truncation error), plus the rounding of fn over the step,
    64 eps |fn| / h (fn is summed from terms a few times its size: a count of 1e6 at its mode has
    log p = -7.8 from terms of 1e7)."""
    best, best_bound = np.full(np.shape(analytic), np.nan), np.full(np.shape(analytic), np.inf)
    with np.errstate(all="ignore"):
        size = np.abs(fn(x))
        previous = None
        for k in range(9):
            step = h / 4.0 ** k
            # Steps as the points x +- step are rounded (exact differences of floats), so that
            # their rounding does not enter the quotient (at f = 40, 1e-15 of a step of 1e-8).
            up, down = x + step, x - step
            quotient = (fn(up) - fn(down)) / (up - down)
            if previous is not None:
                spread = np.abs(quotient - previous)
                bound = 4 * spread + 64 * EPS * size / step
                better = bound < best_bound
                best = np.where(better, quotient + (quotient - previous) / 15.0, best)
                best_bound = np.where(better, bound, best_bound)
            previous = quotient
    ok = np.abs(analytic - best) <= 1e-6 * np.abs(analytic) + 1e-8 + best_bound
    return ok | ~np.isfinite(best)


@at_each_row
def check_likelihood_limits(likelihood):
    """A likelihood's density and derivatives over extreme but valid values: each hyperparameter at
    its own value and moved far (positive ones times 1e-8 ... 1e8, real ones +-30), latent values
    from -40 to 40, targets of its kind from the smallest to the largest (counts to 1e6, real
    targets 1e4 away from f).  Checks

    * ``log_density`` finite, and ``log_density_derivatives[0]`` equal to it;
    * the density normalised: p(y | f) summed (counts, labels) or integrated (real targets) over y
      is 1 to 1e-8 (summing up to 2e6 terms of ~eps each) where the sum reaches the mass (its
      outermost terms or panels hold < 1e-12 of it), and at most 1 + 1e-8 where it cannot (a
      log pmf of 0, the old NegativeBinomial's at dispersion 1e-16, fails here);
    * d1, d2, d3 in f and the three d/d theta of every hyperparameter finite and equal to
      Richardson-extrapolated central differences of the term below (steps from 1e-2 of
      min(max(1, |f|), |d2|^-1/2) in f, 2e-2 relative in a positive hyperparameter, 1e-3 in a
      real one, down by 4^8; see ``_agrees``).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        A likelihood of one latent function with a density (``log_density`` or
        ``log_density_derivatives``) whose targets (:func:`gpdsl.inputs.target_kind`) are of a
        kind of :data:`LIMIT_TARGET_KINDS`.

    Raises
    ------
    AssertionError
        Naming the likelihood, the values and the failing quantity.
    """
    kind = target_kind(likelihood)
    with_derivatives = likelihood.provides("log_density_derivatives")
    y, f = _cases(likelihood)
    for values in _parameter_grid(likelihood):
        lik = likelihood.bind(values)
        where = f"{label(likelihood)} at {values}"
        logp = lik.log_density(y, f)
        assert np.all(np.isfinite(logp)), f"{where}: log_density not finite at y={y[~np.isfinite(logp)]}"
        # (Real targets at f = 0 only: at f != 0 the rounding of f + u, ulp(f) against a density
        # of width 3e-9, moves the integral by 1e-8.)
        for f0 in ((0.0,) if kind == "real" else (-5.0, -0.3, 0.7, 6.0)):
            total, complete = _total_mass(lik, kind, f0)
            assert total <= 1.0 + 1e-8 and (not complete or abs(total - 1.0) <= 1e-8), \
                f"{where}: p(y | f={f0}) sums to {total!r} over y"
        if not with_derivatives:
            continue
        d = lik.log_density_derivatives(y, f)
        np.testing.assert_allclose(d[0], logp, rtol=1e-12, atol=0, err_msg=where)
        # Steps from 1e-2 of the scale on which log p varies in f: |d2|^-1/2 where it curves
        # (1e-4 of a Student-t's scale at df 1e-7), else max(1, |f|).
        with np.errstate(divide="ignore"):
            width = np.where(np.abs(d[2]) > 0, 1.0 / np.sqrt(np.abs(d[2])), np.inf)
        h = 1e-2 * np.minimum(np.maximum(1.0, np.abs(f)), width)
        for k in range(1, 4):
            assert np.all(np.isfinite(d[k])), f"{where}: d{k} not finite"
            ok = _agrees(d[k], lambda v, k=k: lik.log_density_derivatives(y, v)[k - 1], f, h)
            assert np.all(ok), f"{where}: d{k} differs from differences of d{k - 1} at y={y[~ok]}, f={f[~ok]}"
        params = lik.log_density_param_derivatives(y, f)
        positive = {p.name: p.positive for p in likelihood.parameters(np.zeros((1, 1)))}
        assert set(params) == set(values), f"{where}: log_density_param_derivatives must cover every parameter"
        for name, value in values.items():
            value = float(value)
            step = 0.02 * value if positive[name] else 1e-3

            def term(v, k, name=name):
                return likelihood.bind({**values, name: v}).log_density_derivatives(y, f)[k]
            for k in range(3):
                assert np.all(np.isfinite(params[name][k])), f"{where}: d{k}/d{name} not finite"
                ok = _agrees(params[name][k], lambda v, k=k: term(v, k), value, step)
                assert np.all(ok), f"{where}: d{k}/d{name} differs from differences at y={y[~ok]}, f={f[~ok]}"


__all__ = ["check_likelihood_limits", "LIMIT_TARGET_KINDS", "POSITIVE_FACTORS", "REAL_SHIFTS", "LATENT", "REAL_OFFSETS", "COUNTS",
           "COUNT_SUM_MAX"]
