"""Likelihoods at the limits of their parameters (issue 45, finding 5).

NegativeBinomial's log pmf and every derivative it provides (in f, in its dispersion, the EP / QP
site code) against 50-digit mpmath over dispersion 1e-30 to 1e3 and counts 0 to 1e6, reaching its
Poisson limit smoothly; the probit's derivatives against mpmath from z = -1e3 to 40; and, for
every registered likelihood, :func:`gpdsl.testing.check_likelihood_limits`: its density
normalised and its derivatives finite and equal to differences of itself over extreme but valid
parameter values, latent values and targets.
"""
from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest
from scipy import integrate, special

import gpdsl as gd
import gpdsl.testing as gt
from gpdsl._jit.likelihoods import negative_binomial as nb_sites
from gpdsl._jit.likelihoods import poisson as poisson_sites
from gpdsl._jit.special import scaled_log_rising
from gpdsl.likelihoods import Likelihood
from gpdsl.testing.common import _has_density
from gpdsl.testing.limits import COUNTS

EPS = np.finfo(float).eps
DISPERSIONS = np.logspace(-30, 3, 12)


def _latents(y, a):
    """Latent values for a count y at dispersion a: far below and above, at the mode log y, and
    where a e^f crosses 1 (the formulation's switch)."""
    base = [-50.0, -20.0, -3.0, 0.0, 3.0, 20.0, 50.0, -math.log(a), -math.log(a) + 1e-3]
    return sorted(set(base + [math.log(max(y, 1.0)) + d for d in (-1.0, 0.0, 1e-3, 1.0)]))


def _nb_reference(y, f, a, digits=120):
    """The seven terms of :func:`gpdsl._jit.likelihoods.negative_binomial.terms` by their textbook
    forms in r = 1/a (lgamma and digamma differences), with the magnitude of the terms each is a
    sum of.  Working precision 120 digits: lgamma(y + r) - lgamma(r) at r = 1e30 consumes ~50 of
    them, leaving over 50 in every result (``digits`` more for a smaller a)."""
    with mp.workdps(digits):
        y, f, a = mp.mpf(y), mp.mpf(f), mp.mpf(a)
        r, mu = 1 / a, mp.exp(f)
        x = a * mu
        log_x1 = mp.log1p(x)
        rising = mp.loggamma(y + r) - mp.loggamma(r) + y * mp.log(a)
        d_rising = r * (y - r * (mp.digamma(y + r) - mp.digamma(r)))
        logp = rising - mp.loggamma(y + 1) + y * f - (y + r) * log_x1
        d1 = y - (r + y) * mu / (r + mu)
        d2 = -(r + y) * r * mu / (r + mu) ** 2
        d3 = d2 * (r - mu) / (r + mu)
        # d/da = -r^2 d/dr, with log(r / (r + mu)) = -log1p(x) (no r + mu rounded at r = 1e30).
        d_a = -r ** 2 * (mp.digamma(y + r) - mp.digamma(r) - log_x1 + (mu - y) / (r + mu))
        d1_a = -r ** 2 * mu * (y - mu) / (r + mu) ** 2
        d2_a = r ** 2 * mu * ((2 * r + y) * (r + mu) - 2 * r * (r + y)) / (r + mu) ** 3
        t = 1 / (1 + x)
        m = mu * t
        excess = (log_x1 - x / (1 + x)) / a ** 2
        scales = [abs(y * f) + y * log_x1 + log_x1 / a + mp.loggamma(y + 1) + abs(rising)
                  + (abs(y * mp.log(a)) if x > 1 else 0),
                  y * t + m, abs(d2), abs(d2), abs(d_rising) + excess + y * m, m * (y * t + m),
                  m * t * (2 * (1 + a * y) * m + y)]
        return [logp, d1, d2, d3, d_a, d1_a, d2_a], scales


def test_reference_formulas_are_the_derivatives_of_the_reference_density():
    """The hand-derived reference derivatives against mpmath.diff of the reference log pmf."""
    for y, f, a in [(7.0, 1.3, 0.3), (0.0, -0.4, 2.5), (120.0, 4.0, 1e-3)]:
        want, _ = _nb_reference(y, f, a)
        with mp.workdps(60):
            def logp(ff, aa):
                r = 1 / aa
                return (mp.loggamma(y + r) - mp.loggamma(r) - mp.loggamma(y + 1) + r * mp.log(r) + y * ff
                        - (r + y) * mp.log(r + mp.exp(ff)))
            F, A = mp.mpf(f), mp.mpf(a)
            diffs = [mp.diff(lambda ff: logp(ff, A), F, k) for k in (1, 2, 3)]
            diffs += [mp.diff(lambda aa: mp.diff(lambda ff: logp(ff, aa), F, k), A) if k else
                      mp.diff(lambda aa: logp(F, aa), A) for k in (0, 1, 2)]
        for got, ref in zip(diffs, want[1:]):
            assert abs(got - ref) <= 1e-30 * max(1, abs(ref))


def test_negative_binomial_matches_mpmath_from_dispersion_1e_30_to_1e3():
    """Every term (log p, d/df to third order, d/da of log p, d1 and d2) within 1e-10 relative of
    the 120-digit reference, plus 4 eps times the magnitude of the terms the quantity is a sum of:
    a float64 sum of terms of total size S carries ~eps S of rounding however it is formed (at
    y = mu = 1e6 the log pmf is -7.8 while y f is 1.4e7, as in scipy's Poisson logpmf); at
    every other point the relative 1e-10 binds.  On the old code the log pmf was exactly 0 from
    dispersion 1e-16 down."""
    names = ["log p", "d1", "d2", "d3", "d/da", "d1/da", "d2/da"]
    for a in DISPERSIONS:
        lik = gd.likelihoods.NegativeBinomial(dispersion=a).bind()
        for y in COUNTS:
            f = np.array(_latents(y, a))
            yy = np.full_like(f, y)
            got = np.vstack([*lik.log_density_derivatives(yy, f),
                             *lik.log_density_param_derivatives(yy, f)["dispersion"]])
            np.testing.assert_array_equal(got[0], lik.log_density(yy, f))
            for j, fj in enumerate(f):
                want, scales = _nb_reference(y, fj, a)
                for k in range(7):
                    err = abs(mp.mpf(got[k, j]) - want[k])
                    assert err <= 1e-10 * abs(want[k]) + 4 * EPS * scales[k], (names[k], a, y, fj, got[k, j],
                                                                                float(want[k]))


def test_negative_binomial_where_a_e_f_overflows():
    """Latent values so large that x = a e^f overflows a float (f from 709 to 5,000; the fuzz case
    negbin_svgp_minibatch seed 1155 ends at a latent mean of 1,045 on a count of 24,039 at
    dispersion 0.0039): log p = G - lgamma(y + 1) - y log a - y log1p(1/x) - log1p(x) / a is finite
    there (log1p(x) = log a + f), and every term matches the 120-digit reference as above, plus an
    absolute 1e-300 for d2, d3 and d d2 / da, whose true values (~t = 1 / (1 + x), 1e-305 to
    1e-2100) underflow to 0.  SVGP's expectation of the fuzz case's row, E log p under
    N(1044.565, 4.374), matches mpmath's quadrature of the reference log pmf to 1e-12 relative (log p
    is nearly linear in f there, so 20-point Gauss-Hermite is exact but for rounding).  Before
    the fix log1p(inf) made log p -inf, the expectation -inf and SVGP's bound non-finite (the
    code before the rewrite, with logaddexp, gave a finite value)."""
    names = ["log p", "d1", "d2", "d3", "d/da", "d1/da", "d2/da"]
    f = np.array([709.0, 710.0, 750.0, 1044.565, 5000.0])
    for a in [1e-30, 0.00388208, 0.4, 1e3]:
        lik = gd.likelihoods.NegativeBinomial(dispersion=a).bind()
        for y in [0.0, 24039.0, 1e6]:
            yy = np.full_like(f, y)
            got = np.vstack([*lik.log_density_derivatives(yy, f),
                             *lik.log_density_param_derivatives(yy, f)["dispersion"]])
            assert np.all(np.isfinite(got))
            for j, fj in enumerate(f):
                want, scales = _nb_reference(y, fj, a)
                for k in range(7):
                    err = abs(mp.mpf(got[k, j]) - want[k])
                    assert err <= 1e-10 * abs(want[k]) + 4 * EPS * scales[k] + 1e-300, (names[k], a, y, fj,
                                                                                          got[k, j], float(want[k]))
    a, y, mean, var = 0.00388208, 24039.0, 1044.56507656, 4.37435311
    lik = gd.likelihoods.NegativeBinomial(dispersion=a).bind()
    expectation = lik.variational_expectations(np.array([y]), np.array([mean]), np.array([var]))[0][0]
    with mp.workdps(40):
        A, Y, sd = mp.mpf(a), mp.mpf(y), mp.sqrt(var)
        r = 1 / A
        G = mp.loggamma(Y + r) - mp.loggamma(r) + Y * mp.log(A) - mp.loggamma(Y + 1)
        want = mp.quad(lambda z: (G + Y * (mean + sd * z) - (Y + r) * mp.log1p(A * mp.exp(mean + sd * z)))
                       * mp.npdf(z), [-mp.inf, -5, 0, 5, mp.inf])
    assert expectation == pytest.approx(float(want), rel=1e-12)


def test_negative_binomial_where_the_square_of_the_dispersion_underflows():
    """Issue 45 fuzz (negbin_vgp 10026): VGP's line search reached dispersion 5.3e-196 with a latent
    value of 6.2e11 on a count of 405,439, where a e^f > 1 and the dispersion gradient's
    (log1p(x) - x / (1 + x)) / a^2 divided by a * a = 0 (underflow below a = 1.5e-162): the kernel
    raised ZeroDivisionError out of the fit.  Every term against the reference (500 digits: r = 1/a
    of 1e196 needs ~250 for the lgamma difference), as in the tests above; a reference beyond
    float64's range (the d/da terms, ~1e340 to 1e400 here) must be the inf of its sign."""
    big = np.finfo(float).max
    for a in [1e-170, 5.31767462834172e-196]:
        lik = gd.likelihoods.NegativeBinomial(dispersion=a).bind()
        f = np.array([-math.log(a) + 1e-3, -math.log(a) + 5.0, 617572235280.5658])
        for y in [0.0, 405439.0]:
            yy = np.full_like(f, y)
            got = np.vstack([*lik.log_density_derivatives(yy, f),
                             *lik.log_density_param_derivatives(yy, f)["dispersion"]])
            for j, fj in enumerate(f):
                want, scales = _nb_reference(y, fj, a, digits=500)
                for k in range(7):
                    if abs(want[k]) > big:
                        assert got[k, j] == math.copysign(math.inf, want[k]), (k, a, y, fj, got[k, j])
                    else:
                        err = abs(mp.mpf(got[k, j]) - want[k])
                        assert err <= 1e-10 * abs(want[k]) + 4 * EPS * scales[k] + 1e-300, (k, a, y, fj, got[k, j],
                                                                                              float(want[k]))


@pytest.mark.parametrize("a", [0.0, 1e-30, 1e-17, 1e-9, 0.05, 0.1, 0.1000001, 9.5, 1e3])
def test_scaled_log_rising_matches_mpmath(a):
    """G(y, a) = sum_{j<y} log1p(a j) and dG/da to 1e-13 relative (measured 4e-15): a few ulp of
    libm's lgamma, log1p and digamma, times the factor ~50 the lgamma difference loses just above
    a = 0.1, where the series hands over to it."""
    for y in [0.0, 1.0, 2.0, 3.0, 17.0, 31.0, 100.0, 1e3, 1e5, 1e6]:
        g, dg = scaled_log_rising(y, a)
        with mp.workdps(120):
            Y = mp.mpf(y)
            if a == 0.0:
                G, dG = mp.mpf(0), Y * (Y - 1) / 2
            else:
                A = mp.mpf(a)
                r = 1 / A
                G = mp.loggamma(Y + r) - mp.loggamma(r) + Y * mp.log(A)
                dG = r * (Y - r * (mp.digamma(Y + r) - mp.digamma(r)))
        # (1e-60: the reference's own cancellation at 120 digits leaves ~1e-90 where G(1, a) = 0.)
        assert abs(g - G) <= 1e-13 * abs(G) + 1e-60, (y, g, float(G))
        assert abs(dg - dG) <= 1e-13 * abs(dG) + 1e-60, (y, dg, float(dG))


def test_negative_binomial_reaches_its_poisson_limit_smoothly():
    """(log NB(y | f, a) - log Poisson(y | e^f)) / a tends to ((y - mu)^2 - y) / 2, the dispersion
    gradient at a = 0, with an error O(a): checked from a = 1e-6 down to 1e-30 at relative 300 a
    (the second-order term over the first, -(y^3 + 2 mu^3 - 3 y mu^2) / 3 over ((y - mu)^2 - y) / 2
    to leading order: 1.4e-4 at a = 1e-6 for y = 40, mu = 49), and a = 0's gradient is that
    limit."""
    y = np.array([0.0, 1.0, 3.0, 12.0, 40.0])
    f = np.array([-1.0, 0.2, 1.5, 2.0, 3.9])
    mu = np.exp(f)
    poisson = gd.likelihoods.Poisson(link="log").bind()
    slope = 0.5 * ((y - mu) ** 2 - y)
    for a in [1e-6, 1e-9, 1e-12, 1e-16, 1e-20, 1e-30]:
        lik = gd.likelihoods.NegativeBinomial(dispersion=a).bind()
        # Below a ~ 1e-10 the difference is below the rounding of log p itself, ~eps times the
        # size of its terms y f, mu and lgamma(y + 1) (both densities sum them).
        gap = lik.log_density(y, f) - poisson.log_density(y, f)
        bound = 300 * a * np.abs(a * slope) + 8 * EPS * (np.abs(y * f) + mu + special.gammaln(y + 1))
        assert np.all(np.abs(gap - a * slope) <= bound), (a, gap, a * slope)
        np.testing.assert_allclose(lik.log_density_param_derivatives(y, f)["dispersion"][0], slope,
                                   rtol=300 * a + 1e-12)
    at_zero = nb_sites.terms_many(y, f, 0.0)
    np.testing.assert_allclose(at_zero[4], slope, rtol=1e-14)
    np.testing.assert_allclose(at_zero[:4], np.vstack(poisson.log_density_derivatives(y, f)), rtol=1e-14)


@pytest.mark.parametrize("a", [1e-30, 1e-17, 1e-6, 0.4, 50.0])
@pytest.mark.parametrize("y,mu,var", [(0.0, 0.5, 1.0), (7.0, 1.0, 0.3), (250.0, 3.0, 2.0)])
def test_site_code_matches_quadrature_and_the_poisson_site_at_the_limit(a, y, mu, var):
    """The jitted EP site (log Z, mean, variance) and its dispersion gradient E_tilted[d log p / da]
    against adaptive quadrature of the likelihood's own NumPy log pmf and gradient (1e-9 in log Z,
    1e-8 relative in the moments and the gradient: quad at epsrel 1e-10 around the mode); below
    a = 1e-16 the site equals the Poisson-log site to 1e-12."""
    lik = gd.likelihoods.NegativeBinomial(dispersion=a).bind()
    params = (a,)
    log_z, mean, variance = nb_sites.site(y, mu, var, params, None, None, None)
    (grad,) = nb_sites.site_gradient(y, mu, var, params)

    def g(f):
        return float(lik.log_density(np.array([y]), np.array([f]))[0]) - 0.5 * (f - mu) ** 2 / var
    peak, sd = g(mean), math.sqrt(variance)
    lo, hi = mean - 40 * sd, mean + 40 * sd

    def moment(h):
        return integrate.quad(lambda f: h(f) * math.exp(g(f) - peak), lo, hi, points=[mean],
                              epsabs=0, epsrel=1e-10, limit=400)[0]
    z = moment(lambda f: 1.0)
    m1 = moment(lambda f: f) / z
    m2 = moment(lambda f: (f - m1) ** 2) / z
    d_a = moment(lambda f: float(lik.log_density_param_derivatives(np.array([y]), np.array([f]))["dispersion"][0][0])) / z
    assert log_z == pytest.approx(peak + math.log(z) - 0.5 * math.log(2 * math.pi * var), abs=1e-9)
    assert mean == pytest.approx(m1, abs=1e-8 * sd)
    assert variance == pytest.approx(m2, rel=1e-8)
    assert grad == pytest.approx(d_a, rel=1e-8, abs=1e-10)
    if a < 1e-16:
        poisson = poisson_sites.log_link_site(y, mu, var, (), None, None, None)
        np.testing.assert_allclose((log_z, mean, variance), poisson, rtol=1e-12, atol=1e-12)


# -- every registered likelihood ------------------------------------------------------------------
LIMIT_CASES = [pytest.param(v, id=f"{type(v).__name__}-{i}") for cls in gt.registered(Likelihood)
               for i, v in enumerate(cls.variants()) if gt.check_likelihood_limits in gt.likelihood_checks(v)]


def _probit_reference(z):
    """d1, d2, d3 of log Phi(z) in z at 50 digits: r = phi / Phi, r, -r (z + r), r ((z + r)(z + 2 r) - 1)."""
    with mp.workdps(50):
        z = mp.mpf(z)
        r = mp.npdf(z) / mp.ncdf(z)
        s = z + r
        return r, -r * s, r * (s * (s + r) - 1)


def test_probit_derivatives_match_mpmath_from_z_minus_1e3_to_40():
    """Bernoulli(probit)'s d1, d2, d3 in f against 50-digit mpmath over z = y (f + bias) from
    -1e3 to 40 (both labels, a bias): within the larger of 1e-13 and 4 eps z^2 relative.  1e-13:
    measured 1.4e-15, 2.3e-15, 7.2e-14 in d1, d2, d3 for z <= 8 (d3 at z = -1.7 carries r's 3 eps
    times the cancellation in (z + r)(z + 2 r) - 1 ~ 2 / z^4; the continued fraction takes over
    below z = -2); 4 eps z^2: r's own rounding beyond, 2 eps z^2 / 2 from exp(-z^2 / 2) (measured
    209 eps at z = 32); plus the smallest normal float where phi(z) underflows (z > 37.5).  The
    old log-space form was 2e-4 off in d3 at z = -40 (5e6 at z = -1e3) and 1e-5 in d2 at z = -1e3."""
    z = np.concatenate([-np.logspace(3, -3, 200), [0.0], np.linspace(-6.0, 0.0, 121),
                        np.logspace(-3, math.log10(40.0), 100)])
    bias = 0.25
    for label in (1.0, -1.0):
        lik = gd.likelihoods.Bernoulli("probit", bias=bias).bind()
        f = label * z - bias
        y = np.full_like(z, label)
        _, d1, d2, d3 = lik.log_density_derivatives(y, f)
        zz = y * (f + bias)          # z as rounded through f
        for j, zj in enumerate(zz):
            tol = max(1e-13, 4 * EPS * zj * zj)
            for k, (got, want) in enumerate(zip((d1[j] * label, d2[j], d3[j] * label), _probit_reference(zj))):
                assert abs(mp.mpf(got) - want) <= tol * abs(want) + np.finfo(float).tiny, (k + 1, zj, got, float(want))


def test_every_likelihood_with_a_density_is_covered():
    """gpdsl.testing runs the limits check on every registered likelihood of one latent function
    with a density; only those without a density of their own (a per-row noise model) or of
    several latent functions (Categorical: its own check below) are left out; OutputGaussian is a
    noise model of the output column as HeteroscedasticGaussian is of x."""
    noise_models = {"HeteroscedasticGaussian", "OutputGaussian"}
    left_out = {type(v).__name__ for cls in gt.registered(Likelihood) for v in cls.variants()
                if gt.check_likelihood_limits not in gt.likelihood_checks(v)}
    assert left_out <= noise_models | {"Categorical"}, left_out
    assert all(not _has_density(v) for cls in gt.registered(Likelihood) for v in cls.variants()
               if type(v).__name__ in noise_models)


@pytest.mark.parametrize("likelihood", LIMIT_CASES)
def test_likelihood_limits(likelihood):
    gt.check_likelihood_limits(likelihood)


@pytest.mark.parametrize("link", ["softmax", "robustmax", "logistic_softmax"])
def test_categorical_probabilities_sum_to_one_at_extreme_latents(link):
    """A K-class likelihood: log p(k | f) finite and sum_k p(k | f) = 1 to 1e-12 for latent rows
    over 80 units, ties among the largest included (robust-max shares the largest mass among the
    tied classes)."""
    lik = gd.likelihoods.Categorical(3, link=link).with_labels_of(np.array([0.0, 1.0, 2.0])).bind()
    rows = np.array(list(itertools.product([-40.0, 0.0, 40.0], repeat=3)))
    total = np.zeros(len(rows))
    for k in range(3):
        logp = lik.log_density(np.full(len(rows), float(k)), rows)
        assert np.all(np.isfinite(logp))
        total += np.exp(logp)
    np.testing.assert_allclose(total, 1.0, rtol=1e-12)
