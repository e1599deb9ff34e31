"""EP / QP site projections (gpdsl._jit.likelihoods, gpdsl._jit.quadrature) and the normal special
functions behind them.

Oracles: the QP projection table in ../shared/oracles (brute-force quadrature, independent of
this code), scipy.special, scipy.integrate.quad of the tilted densities, and a dense composite
Gauss-Legendre integral of eq. (7) over the closed-form CDFs.
"""
import math

import numpy as np
import pytest
from scipy import integrate, special, stats

from conftest import shared_path
from gpdsl._jit import quadrature
from gpdsl._jit import special as S
from gpdsl._jit.likelihoods import bernoulli, gaussian, poisson, student_t

# The likelihoods' jitted site functions (gpdsl._jit.projections.SiteFunctions).
PROBIT, POISSON = bernoulli.PROBIT_SITE, poisson.SITE
LOGIT, STUDENT_T, GAUSSIAN = bernoulli.LOGIT_SITE, student_t.SITE, gaussian.SITE


def _site_projection(site, y, mu, var, params, quantile):
    """(log Z, mean, variance) of a site: the likelihood's ``project`` without a lookup table."""
    return site.project(y, mu, var, params, quantile, None, None)


def _project(site, y, mu, var, param, qp):
    """_site_projection with the likelihood's one parameter as a float (ignored for Poisson), or
    its parameter tuple."""
    params = param if isinstance(param, tuple) else (() if site is POISSON else (param,))
    return _site_projection(site, y, mu, var, params, qp)


def _log_z_gradient(site, y, mu, var, params):
    return site.log_z_gradient(y, mu, var, params)


def _probit_density(y, mu, sd, bias):
    return lambda f: special.ndtr(y * (f + bias)) * stats.norm.pdf(f, mu, sd)


def _poisson_density(y, mu, sd):
    return lambda f: f ** (2 * y) * np.exp(-f * f - special.gammaln(y + 1)) * stats.norm.pdf(f, mu, sd)


def _quad(fn, lo, hi, pieces=8):
    edges = np.linspace(lo, hi, pieces + 1)
    return sum(integrate.quad(fn, a, b, epsabs=0.0, epsrel=1e-13, limit=200)[0]
               for a, b in zip(edges[:-1], edges[1:]))


def _sigma_star_reference(cdf, lo, hi, panels=160):
    """Eq. (7) on [lo, hi] by 30-point Gauss-Legendre panels over a closed-form CDF."""
    x, w = np.polynomial.legendre.leggauss(30)
    edges = np.linspace(lo, hi, panels + 1)
    total = 0.0
    for a, b in zip(edges[:-1], edges[1:]):
        nodes = 0.5 * (b - a) * (x + 1.0) + a
        F = np.array([cdf(t) for t in nodes])
        tail = np.minimum(F, 1.0 - F)
        vals = np.where(tail > 0.0, stats.norm.pdf(special.ndtri(np.where(tail > 0.0, tail, 0.5))), 0.0)
        total += 0.5 * (b - a) * np.sum(w * vals)
    return total


# --------------------------------------------------------------------------- oracle table


def _table_rows():
    import csv
    with open(shared_path("oracles", "qp_projection_table.csv"), newline="") as fh:
        return list(csv.DictReader(fh))


def test_table_every_row():
    rows = _table_rows()
    assert len(rows) == 48
    for row in rows:
        kind = PROBIT if row["likelihood"] == "probit" else POISSON
        y, mu, sd = float(row["y"]), float(row["cavity_mu"]), float(row["cavity_sigma"])
        ep = _project(kind, y, mu, sd * sd, 0.0, False)
        qp = _project(kind, y, mu, sd * sd, 0.0, True)
        want = [float(row[c]) for c in ("logZ", "tilted_mean", "var_EP", "sd_QP")]
        got = [ep[0], ep[1], ep[2], math.sqrt(qp[2])]
        np.testing.assert_allclose(got, want, rtol=1e-9, err_msg=str(row))
        np.testing.assert_allclose(qp[2], float(row["var_QP"]), rtol=1e-9)
        assert qp[0] == ep[0] and qp[1] == ep[1]                # QP changes the variance only
        if kind == PROBIT:
            assert bernoulli.probit_qp_sd(y, mu, sd, 0.0) == pytest.approx(math.sqrt(qp[2]), rel=1e-15)
        else:
            assert poisson.poisson_square_qp_sd(y, mu, sd) == pytest.approx(math.sqrt(qp[2]), rel=1e-15)


# --------------------------------------------------------------------------- moments


@pytest.mark.parametrize("y,mu,sd,bias", [(1.0, -2.0, 0.7, 0.5), (-1.0, 0.3, 2.5, -1.2), (1.0, 1.5, 0.2, -3.0),
                                          (-1.0, -4.0, 1.0, 0.0)])
def test_probit_moments_with_bias_match_quadrature(y, mu, sd, bias):
    dens = _probit_density(y, mu, sd, bias)
    lo, hi = mu - 15 * sd, mu + 15 * sd
    Z = _quad(dens, lo, hi)
    m = _quad(lambda f: f * dens(f), lo, hi) / Z
    v = _quad(lambda f: (f - m) ** 2 * dens(f), lo, hi) / Z
    np.testing.assert_allclose(bernoulli.probit_tilted_moments(y, mu, sd * sd, bias), [math.log(Z), m, v], rtol=1e-10)


@pytest.mark.parametrize("y,mu,sd", [(2, -0.7, 1.3), (5, 0.0, 0.8), (8, 2.5, 0.6), (1, -3.0, 2.0), (12, -1.0, 0.4)])
def test_poisson_moments_match_quadrature(y, mu, sd):
    dens = _poisson_density(y, mu, sd)
    lo, hi = -abs(mu) - 12 * sd - 6, abs(mu) + 12 * sd + 6
    Z = _quad(dens, lo, hi, pieces=32)
    m = _quad(lambda f: f * dens(f), lo, hi, pieces=32) / Z
    v = _quad(lambda f: (f - m) ** 2 * dens(f), lo, hi, pieces=32) / Z
    np.testing.assert_allclose(poisson.poisson_square_tilted_moments(float(y), mu, sd * sd), [math.log(Z), m, v],
                               rtol=1e-10, atol=1e-13)


def test_probit_moments_stay_accurate_far_in_the_tail():
    # z = -40: Phi(z) underflows and r (z + r) -> 1; the continued fraction keeps all three
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    for z in (-40.0, -7.5, -5.5):
        mu = z * math.sqrt(2.0)                            # sd = 1
        r = mp.npdf(z) / mp.ncdf(z)
        want = [mp.log(mp.ncdf(z)), mu + r / mp.sqrt(2), (1 + (1 - r * (z + r))) / 2]
        np.testing.assert_allclose(bernoulli.probit_tilted_moments(1.0, mu, 1.0, 0.0), [float(w) for w in want],
                                   rtol=1e-14)


# --------------------------------------------------------------------------- CDFs


@pytest.mark.parametrize("y", [-1.0, 1.0])
@pytest.mark.parametrize("mu,sd,bias", [(-2.0, 0.5, 0.0), (0.0, 1.0, 0.0), (0.5, 3.0, 0.4), (1.5, 0.3, -1.5),
                                        (-0.8, 1.7, 0.8)])
def test_probit_cdf_matches_quadrature(y, mu, sd, bias):
    dens = _probit_density(y, mu, sd, bias)
    log_z, m, v = bernoulli.probit_tilted_moments(y, mu, sd * sd, bias)
    s = math.sqrt(v)
    lo = min(m, mu) - 14 * max(s, sd)
    for t in [m - 4 * s, m - s, mu, m, m + 0.3 * s, m + 2 * s, m + 5 * s, -bias]:
        want = _quad(dens, lo, t) / math.exp(log_z)
        assert bernoulli.probit_tilted_cdf(t, y, mu, sd, bias) == pytest.approx(want, abs=1e-9, rel=1e-9)


def test_probit_cdf_special_cases():
    # paper eqs. 47-49: t = mu, mu + bias = 0 and both; the corner is 1/2 - y arctan(sd) / pi
    for y in (-1.0, 1.0):
        for sd in (0.3, 1.0, 4.0):
            assert bernoulli.probit_tilted_cdf(0.0, y, 0.0, sd, 0.0) == pytest.approx(
                0.5 - y * math.atan(sd) / math.pi, abs=1e-15)
            assert bernoulli.probit_tilted_cdf(0.7, y, 0.7, sd, -0.7) == pytest.approx(
                0.5 - y * math.atan(sd) / math.pi, abs=1e-15)
            for mu, bias, t in [(0.8, 0.0, 0.8), (-0.5, 0.5, 1.1), (-0.5, 0.5, -2.0)]:
                here = bernoulli.probit_tilted_cdf(t, y, mu, sd, bias)
                assert here == pytest.approx(bernoulli.probit_tilted_cdf(t + 1e-9, y, mu, sd, bias), abs=1e-8)
                assert here == pytest.approx(bernoulli.probit_tilted_cdf(t - 1e-9, y, mu, sd, bias), abs=1e-8)


@pytest.mark.parametrize("y", [1, 2, 3, 6])
@pytest.mark.parametrize("mu,sd", [(-1.0, 0.5), (0.0, 1.0), (0.5, 0.4), (2.0, 1.0), (-2.5, 2.0)])
def test_poisson_cdf_matches_quadrature(y, mu, sd):
    dens = _poisson_density(y, mu, sd)
    log_z, m, v = poisson.poisson_square_tilted_moments(float(y), mu, sd * sd)
    s = math.sqrt(v)
    lo = -abs(m) - 15 * max(s, sd)
    for t in [m - 4 * s, m - s, -0.4, 0.0, 0.3, mu, m, m + 0.5 * s, m + 3 * s]:
        want = _quad(dens, lo, t, pieces=16) / math.exp(log_z)
        assert poisson.poisson_square_tilted_cdf(t, float(y), mu, sd) == pytest.approx(want, abs=1e-9, rel=1e-9)


def test_poisson_cdf_y0_is_gaussian():
    b, v = 0.7 / 3.0, 1.0 / 3.0
    for t in (-1.0, 0.0, 0.5, 2.0):
        assert poisson.poisson_square_tilted_cdf(t, 0.0, 0.7, 1.0) == pytest.approx(stats.norm.cdf(t, b, math.sqrt(v)),
                                                                                rel=1e-14)


# --------------------------------------------------------------------------- sigma*


@pytest.mark.parametrize("y,mu,sd,bias", [(1.0, -2.5, 0.8, 0.3), (-1.0, 1.0, 2.0, -0.5), (1.0, 0.0, 5.0, 0.0),
                                          (-1.0, -3.0, 0.1, 0.0)])
def test_probit_sigma_star_matches_dense_rule_over_closed_form_cdf(y, mu, sd, bias):
    _, m, v = bernoulli.probit_tilted_moments(y, mu, sd * sd, bias)
    lo = min(m - 14 * math.sqrt(v), mu - 12 * sd)
    hi = max(m + 14 * math.sqrt(v), mu + 12 * sd)
    want = _sigma_star_reference(lambda t: bernoulli.probit_tilted_cdf(t, y, mu, sd, bias), lo, hi)
    assert bernoulli.probit_qp_sd(y, mu, sd, bias) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("y,mu,sd", [(1, -0.3, 1.5), (4, 0.2, 0.9), (10, 0.5, 0.5), (2, 3.0, 0.3)])
def test_poisson_sigma_star_matches_dense_rule_over_closed_form_cdf(y, mu, sd):
    # (10, 0.5, 0.5) is bimodal with 6e-4 of the mass in the left mode
    b, v = mu / (1 + 2 * sd * sd), sd * sd / (1 + 2 * sd * sd)
    reach = 0.5 * (abs(b) + math.sqrt(b * b + 8 * y * v)) + 12 * math.sqrt(v)
    want = _sigma_star_reference(lambda t: poisson.poisson_square_tilted_cdf(t, float(y), mu, sd), -reach, reach)
    assert poisson.poisson_square_qp_sd(float(y), mu, sd) == pytest.approx(want, rel=1e-9)


def test_qp_never_exceeds_ep():
    for y in (-1.0, 1.0):
        for mu in (-5.0, -2.0, -0.5, 0.0, 0.7, 3.0):
            for sd in (0.05, 0.3, 1.0, 3.0, 10.0):
                _, _, v_ep = _project(PROBIT, y, mu, sd * sd, 0.25, False)
                _, _, v_qp = _project(PROBIT, y, mu, sd * sd, 0.25, True)
                assert v_qp <= v_ep * (1 + 1e-12)
    for y in (1.0, 2.0, 5.0, 20.0):
        for mu in (-3.0, -0.5, 0.0, 1.0, 4.0):
            for sd in (0.1, 0.5, 1.0, 3.0):
                _, _, v_ep = _project(POISSON, y, mu, sd * sd, 0.0, False)
                _, _, v_qp = _project(POISSON, y, mu, sd * sd, 0.0, True)
                assert v_qp <= v_ep * (1 + 1e-12)


def test_probit_mirror_symmetry():
    for y in (-1.0, 1.0):
        for mu, var, bias in [(0.4, 0.8, 0.0), (-2.0, 3.0, 0.7), (1.3, 0.05, -2.0)]:
            for qp in (False, True):
                a = _project(PROBIT, y, mu, var, bias, qp)
                b = _project(PROBIT, -y, -mu, var, -bias, qp)
                np.testing.assert_allclose([b[0], -b[1], b[2]], a, rtol=1e-13)
            t = mu + 0.3
            assert bernoulli.probit_tilted_cdf(t, y, mu, math.sqrt(var), bias) == pytest.approx(
                1.0 - bernoulli.probit_tilted_cdf(-t, -y, -mu, math.sqrt(var), -bias), abs=1e-14)


def test_poisson_y0_qp_equals_ep():
    for mu in (-2.0, 0.0, 1.5):
        for var in (0.04, 1.0, 9.0):
            assert _project(POISSON, 0.0, mu, var, 0.0, True) == _project(POISSON, 0.0, mu, var, 0.0, False)


@pytest.mark.parametrize("mu", [-30.0, 0.0, 30.0])
@pytest.mark.parametrize("sd", [0.01, 50.0])
def test_extreme_cavities_are_finite(mu, sd):
    cases = [(PROBIT, y, b) for y in (-1.0, 1.0) for b in (0.0, 2.0)]
    cases += [(POISSON, y, 0.0) for y in (0.0, 1.0, 3.0, 30.0)]
    for kind, y, bias in cases:
        ep = _project(kind, y, mu, sd * sd, bias, False)
        qp = _project(kind, y, mu, sd * sd, bias, True)
        assert np.all(np.isfinite(ep)) and np.all(np.isfinite(qp)), (kind, y, bias, ep, qp)
        assert 0.0 < qp[2] <= ep[2] * (1 + 1e-12)


def test_far_tail_sigma_star_is_accurate():
    # z = -25: Z ~ 1e-138, beyond any closed-form CDF; the rule works on log densities.  The
    # tilted distribution tends to N(mu/(1+s2), s2/(1+s2)) (up to a 1/|g| factor), so QP ~ EP.
    mu, sd = -25.0 * math.sqrt(2.0), 1.0
    _, _, v_ep = _project(PROBIT, 1.0, mu, sd * sd, 0.0, False)
    s_qp = bernoulli.probit_qp_sd(1.0, mu, sd, 0.0)
    assert v_ep == pytest.approx(0.5, rel=2e-3)
    assert 0.9999 * math.sqrt(v_ep) < s_qp <= math.sqrt(v_ep)


# --------------------------------------------------------------------------- lookup tables


def test_lookup_table_interpolates_and_falls_back():
    mu_grid = np.linspace(-3.0, 3.0, 25)
    log_sd = np.linspace(-0.5, 0.5, 11)
    table = bernoulli.probit_qp_ratio_table(mu_grid, log_sd)
    args = (table, -3.0, 0.25, -0.5, 0.1)
    # exact at the nodes (y, bias folded in), interpolated between, direct outside
    sd = 10.0 ** log_sd[4]
    assert bernoulli.probit_qp_sd_lookup(*args, -1.0, 1.0, sd, -0.5) == pytest.approx(
        bernoulli.probit_qp_sd(1.0, -0.5, sd, 0.0), rel=1e-14)
    for y, mu, sd, bias in [(1.0, 0.3, 1.1, 0.0), (-1.0, 1.9, 0.6, -0.2), (1.0, -2.2, 2.5, 0.4)]:
        assert bernoulli.probit_qp_sd_lookup(*args, y, mu, sd, bias) == pytest.approx(
            bernoulli.probit_qp_sd(y, mu, sd, bias), rel=3e-4)
    assert bernoulli.probit_qp_sd_lookup(*args, 1.0, 8.0, 1.0, 0.0) == bernoulli.probit_qp_sd(1.0, 8.0, 1.0, 0.0)
    assert bernoulli.probit_qp_sd_lookup(*args, 1.0, 0.0, 10.0, 0.0) == bernoulli.probit_qp_sd(1.0, 0.0, 10.0, 0.0)


# --------------------------------------------------------------------------- special functions


def test_owens_t_matches_scipy():
    hs = np.array([0.0, 1e-12, 0.1, 0.5, 1.0, 2.0, 3.5, 6.0, 9.0, 12.0, 20.0, 38.0, 39.0, 100.0])
    hs = np.concatenate([hs, -hs[1:]])
    as_ = np.array([0.0, 1e-12, 1e-3, 0.2, 0.5, 0.99, 1.0, 1.01, 2.0, 10.0, 1e3, 1e8, np.inf])
    as_ = np.concatenate([as_, -as_[1:]])
    got = np.array([[S.owens_t(h, a) for a in as_] for h in hs])
    want = special.owens_t(hs[:, None], as_[None, :])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-16)
    rng = np.random.default_rng(3)
    h = rng.normal(scale=3.0, size=400)
    a = rng.standard_cauchy(size=400)
    np.testing.assert_allclose([S.owens_t(u, v) for u, v in zip(h, a)], special.owens_t(h, a),
                               rtol=1e-12, atol=1e-16)


def test_owens_t_relative_accuracy_against_mpmath():
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40

    def exact(h, a):
        cuts = [0] + [k / (4 * max(h, 1)) for k in range(1, 80) if k / (4 * max(h, 1)) < a] + [a]
        f = lambda x: mp.exp(-mp.mpf(h) ** 2 * (1 + x * x) / 2) / (1 + x * x)
        return float(mp.quad(f, cuts) / (2 * mp.pi))

    # scipy's owens_t is off by 1e-5 relative at (10, 1e-12); T ~ a exp(-h^2/2) / (2 pi) there
    for h, a in [(10.0, 1e-12), (0.3, 0.7), (3.0, 0.5), (7.0, 1.0), (15.0, 0.2), (25.0, 0.9), (2.0, 5.0)]:
        assert S.owens_t(h, a) == pytest.approx(exact(h, a), rel=1e-12)


def test_norm_ppf_matches_ndtri():
    p = np.concatenate([10.0 ** -np.arange(1.0, 300.5, 0.25), np.linspace(1e-6, 1 - 1e-6, 1001),
                        1.0 - 10.0 ** -np.arange(1.0, 16.0, 0.25), [0.02425, 0.97575, 0.5, 1e-310, 5e-324]])
    got = np.array([S.norm_ppf(q) for q in p])
    want = special.ndtri(p)
    np.testing.assert_allclose(got, want, rtol=2e-14, atol=2e-16)
    assert S.norm_ppf(0.0) == -np.inf and S.norm_ppf(1.0) == np.inf and np.isnan(S.norm_ppf(1.5))
    lo = 10.0 ** -np.arange(1.0, 300.0, 7.0)
    # the round trip is conditioned like x^2: Phi(x) moves by x^2 eps for a last-bit change of x
    np.testing.assert_allclose([S.norm_cdf(S.norm_ppf(q)) for q in lo], lo, rtol=1e-12)


def test_norm_cdf_and_logcdf_match_scipy():
    x = np.concatenate([np.linspace(-60.0, 12.0, 721), [-1e5, -1e3, -38.5, -20.0, -19.999, 0.0, 1e-300, 40.0]])
    np.testing.assert_allclose([S.norm_logcdf(u) for u in x], special.log_ndtr(x), rtol=1e-13, atol=0)
    # Phi itself carries ~x^2 eps/2 from rounding x / sqrt 2 (a last-bit change of x moves Phi
    # by x^2 eps); scipy's ndtr splits x^2 and is exact to the last bits, so compare within that
    near = x[x >= -37.0]
    got = np.array([S.norm_cdf(u) for u in near])
    assert np.all(np.abs(got / special.ndtr(near) - 1.0) <= 4e-16 * np.maximum(1.0, near * near))
    assert S.norm_logcdf(-np.inf) == -np.inf and S.norm_logcdf(np.inf) == 0.0


def test_bivariate_normal_cdf():
    rng = np.random.default_rng(5)
    for _ in range(40):
        h, k = rng.normal(scale=1.5, size=2)
        rho = rng.uniform(-0.95, 0.95)
        want = stats.multivariate_normal(cov=[[1.0, rho], [rho, 1.0]]).cdf([h, k])
        assert S.bvn_cdf(h, k, rho) == pytest.approx(want, abs=1e-10)
    assert S.bvn_cdf(0.0, 0.0, 0.3) == pytest.approx(0.25 + math.asin(0.3) / (2 * math.pi), abs=1e-16)


def _rounding_of_rule(weights, x, k):
    """A bound on the rounding of ``weights @ x ** k`` in double precision (unit roundoff u):
    each weight and node is the exact value rounded (u each; x^k then carries k u), x ** k adds
    one rounding, each product another, and a sum of n terms in any order (BLAS blocks it by
    its thread count) at most (n - 1) u, all relative to sum |w_i x_i^k|: (n + k + 3) u times it."""
    u = np.finfo(float).eps / 2
    n = np.shape(weights)[-1]
    return (n + k + 3) * u * (np.abs(weights) @ np.abs(x) ** k)


def test_gauss_legendre_constants():
    x, w = np.polynomial.legendre.leggauss(20)
    np.testing.assert_allclose(S.GL_NODES, x, rtol=0, atol=1e-15)
    np.testing.assert_allclose(S.GL_WEIGHTS, w, rtol=1e-13)     # numpy's end weights are 7e-14 off
    x = S.GL_NODES
    for k in range(40):                                         # exact to degree 39
        exact = (1 + (-1) ** k) / (k + 1)
        assert abs(S.GL_WEIGHTS @ x ** k - exact) <= _rounding_of_rule(S.GL_WEIGHTS, x, k), k
    # the cumulative matrix integrates every polynomial of degree <= 19 exactly from -1 (the
    # reference's own rounding: x^(k+1) (k + 2) u, the difference and the division 2 u, relative
    # to its operands)
    u = np.finfo(float).eps / 2
    for k in range(20):
        want = (x ** (k + 1) - (-1.0) ** (k + 1)) / (k + 1)
        tol = _rounding_of_rule(quadrature._GL_CUMULATIVE, x, k) + (k + 4) * u * (np.abs(x) ** (k + 1) + 1) / (k + 1)
        assert np.all(np.abs(quadrature._GL_CUMULATIVE @ x ** k - want) <= tol), k


def _power_gaussian_reference(n, b, v):
    """(log M_n, mean, variance) of f^n N(f | b, v) / M_n by 50-digit mpmath quadrature over both
    modes (an independent computation of what _power_gaussian_moments returns)."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(50):
        n, b, v = mpmath.mpf(n), mpmath.mpf(b), mpmath.mpf(v)
        root = mpmath.sqrt(b * b + 4 * n * v)
        modes = [(b + root) / 2, (b - root) / 2]
        log_g = [n * mpmath.log(abs(f)) - (f - b) ** 2 / (2 * v) for f in modes]
        ref = max(log_g)

        def density(f, k):
            return f ** k * mpmath.exp(n * mpmath.log(abs(f)) - (f - b) ** 2 / (2 * v) - ref)

        moments = []
        for k in range(3):
            total = 0
            for f in modes:
                sd = 1 / mpmath.sqrt(n / f ** 2 + 1 / v)
                total += mpmath.quad(lambda x: density(x, k), mpmath.linspace(f - 40 * sd, f + 40 * sd, 41))
            moments.append(total)
        mean = moments[1] / moments[0]
        return (float(ref + mpmath.log(moments[0]) - mpmath.log(2 * mpmath.pi * v) / 2), float(mean),
                float(moments[2] / moments[0] - mean ** 2))


@pytest.mark.parametrize("n,b,v", [(4098, 0.0, 1.0), (4098, 0.3, 0.5), (10000, 5.0, 2.0), (20000, 1e3, 1.0),
                                   (6000, 0.01, 1e-4), (2 * 10 ** 8, 0.7, 0.3), (2 * 10 ** 12, 0.2, 0.4)])
def test_large_count_moments_by_quadrature(n, b, v):
    """Issue 14 item 6: counts above 2,048 take the quadrature path, whose cost does not grow with the
    count (the recurrence took 11 s for two counts of 1e8 and minutes at 1e12, inside one jitted call
    that Ctrl-C cannot stop); against 50-digit quadrature: log M_n to 1e-13 relative, the mean to
    1e-13, the variance to 1e-9 (the recurrence's Stein form lost all of it at n = 2e12)."""
    log_m, mean, var, _ = poisson._power_gaussian_moments(n, b, v)
    ref = _power_gaussian_reference(n, b, v)
    assert log_m == pytest.approx(ref[0], rel=1e-13)
    assert mean == pytest.approx(ref[1], rel=1e-13, abs=1e-13 * math.sqrt(n * v))
    assert var == pytest.approx(ref[2], rel=1e-9)


@pytest.mark.parametrize("n", [4098, 8192])
def test_large_count_quadrature_agrees_with_the_recurrence(n):
    """At the switch, the two paths agree: the recurrence (Stein's identity) run past its threshold
    against the quadrature, over cavities from flat to sharp."""
    for b, v in [(0.0, 1.0), (0.3, 0.5), (5.0, 2.0), (1e3, 1.0), (0.01, 1e-4)]:
        log_m, r1 = poisson._gauss_raw_moments(n, b, v)
        mean = b + n * v * r1
        var = v * (n + 1.0 - n * r1 * mean)
        q = poisson._power_gaussian_moments(n, b, v)[:3]
        assert q[0] == pytest.approx(log_m, rel=1e-14)
        assert q[1] == pytest.approx(mean, rel=1e-13, abs=1e-13 * math.sqrt(n * v))
        assert q[2] == pytest.approx(var, rel=1e-10)


def test_poisson_projection_of_huge_counts_is_finite_and_gaussian_like():
    """y = 1e8 and 1e12 through the public projection (EP and QP): finite, and for such counts the
    tilted law is nearly Gaussian, so QP's variance equals EP's to ~1/sqrt(y)."""
    for y in (1e8, 1e12):
        log_z, mean, var = poisson.poisson_square_project(y, 0.5, 2.0, False)
        _, mean_qp, var_qp = poisson.poisson_square_project(y, 0.5, 2.0, True)
        assert np.isfinite([log_z, mean, var, var_qp]).all() and var > 0.0
        assert mean_qp == mean
        assert var_qp == pytest.approx(var, rel=10.0 / math.sqrt(y))


# --------------------------------------------------------------------------- logit and Student-t (issue 15)
# References: brute-force adaptive quadrature of the tilted densities (naive.tilted_moments,
# naive.tilted_sigma_star, naive.tilted_expectation: scipy.integrate.quad at relative tolerance
# 1e-13 on grids that resolve every feature), central finite differences of log Z, and the jitted
# rules themselves on 4x finer and wider panels (their discretisation error).

import naive  # noqa: E402

LOGIT_CASES = [(1.0, -2.0, 0.7, 0.5), (-1.0, 0.3, 2.5, -1.2), (1.0, 30.0, 0.01, 0.0), (-1.0, -30.0, 50.0, 0.0),
               (1.0, -30.0, 3.0, 0.0), (1.0, 5.0, 50.0, 1.0), (-1.0, 12.0, 0.05, -2.0), (1.0, -7.0, 0.01, 0.0)]
# (y, mu, sd, df, scale): near the cavity, bimodal outliers (wide cavity, far y), a narrow cavity far
# from y, df from 0.7 (heavier than Cauchy) to 1e4 (nearly Gaussian)
STUDENT_T_CASES = [(0.5, 0.3, 1.4, 4.0, 1.0), (8.0, 0.0, 3.0, 3.0, 0.5), (20.0, 0.0, 1.0, 4.0, 0.5),
                   (2.0, -30.0, 50.0, 2.0, 0.1), (0.0, 1.0, 0.01, 1.0, 1.0), (5.0, 0.0, 1.0, 100.0, 0.3),
                   (-25.0, 30.0, 0.1, 0.7, 2.0), (3.0, 0.0, 2.0, 1e4, 1.0), (4.0, 0.0, 1.0, 3.0, 0.3)]


def _logit_reference(y, mu, sd, bias):
    return naive.logit_log_lik(y, bias), [(-bias, 1.0)]


def _student_t_reference(y, df, scale):
    return naive.student_t_log_lik(y, df, scale), [(y, scale), (y, scale * math.sqrt(df))]


def _assert_moments(got, want, tol):
    """log Z relative to max(1, |log Z|), the mean relative to the tilted sd, the variance relative."""
    assert abs(got[0] - want[0]) <= tol * max(1.0, abs(want[0])), (got, want)
    assert abs(got[1] - want[1]) <= tol * math.sqrt(want[2]), (got, want)
    assert got[2] == pytest.approx(want[2], rel=tol), (got, want)


def test_site_functions_of_each_likelihood():
    """Each likelihood's SiteFunctions: its ``project`` is its module's EP / QP projection, and the
    probit alone has a QP lookup table."""
    assert _project(LOGIT, 1.0, 0.4, 2.0, 0.1, True) == bernoulli.logit_project(1.0, 0.4, 2.0, 0.1, True)
    assert _project(PROBIT, 1.0, 0.4, 2.0, 0.1, True) == bernoulli.probit_project(1.0, 0.4, 2.0, 0.1, True)
    assert _project(STUDENT_T, 1.0, 0.4, 2.0, (3.0, 0.5), None) == student_t.student_t_tilted_moments(1.0, 0.4, 2.0,
                                                                                                       3.0, 0.5)
    assert PROBIT.lookup_table is bernoulli.probit_lookup_table
    assert LOGIT.lookup_table is POISSON.lookup_table is STUDENT_T.lookup_table is GAUSSIAN.lookup_table is None


@pytest.mark.parametrize("y,mu,sd,bias", LOGIT_CASES)
def test_logit_projection_matches_brute_force_quadrature(y, mu, sd, bias):
    """log Z, mean, variance (EP) and sigma* (QP) of sigma(y (f + bias)) N(f | mu, sd^2) against
    adaptive quadrature: 1e-12 (log Z relative to max(1, |log Z|), the mean relative to the tilted
    sd, the variance and sigma* relative); measured ~1e-14."""
    log_lik, centres = _logit_reference(y, mu, sd, bias)
    want = naive.tilted_moments(log_lik, mu, sd, centres)
    ep = _site_projection(LOGIT, y, mu, sd * sd, (bias,), None)
    _assert_moments(ep, want, 1e-12)
    assert bernoulli.logit_tilted_moments(y, mu, sd * sd, bias) == ep
    qp = _site_projection(LOGIT, y, mu, sd * sd, (bias,), True)
    assert qp[:2] == ep[:2]
    assert math.sqrt(qp[2]) == pytest.approx(naive.tilted_sigma_star(log_lik, mu, sd, centres), rel=1e-12)
    assert math.sqrt(qp[2]) <= math.sqrt(ep[2]) * (1 + 1e-12)
    assert bernoulli.logit_qp_sd(y, mu, sd, bias) == math.sqrt(qp[2])
    assert _project(LOGIT, y, mu, sd * sd, bias, True) == qp


@pytest.mark.parametrize("y,mu,sd,df,scale", STUDENT_T_CASES)
def test_student_t_projection_matches_brute_force_quadrature(y, mu, sd, df, scale):
    """As for the logit, for Student-t(y | f, df, scale) N(f | mu, sd^2): 1e-12 (measured ~1e-14;
    log Z ~1e-13 at df = 1e4)."""
    log_lik, centres = _student_t_reference(y, df, scale)
    want = naive.tilted_moments(log_lik, mu, sd, centres)
    ep = _site_projection(STUDENT_T, y, mu, sd * sd, (df, scale), None)
    _assert_moments(ep, want, 1e-12)
    assert student_t.student_t_tilted_moments(y, mu, sd * sd, df, scale) == ep
    qp = _site_projection(STUDENT_T, y, mu, sd * sd, (df, scale), True)
    assert qp[:2] == ep[:2]
    assert math.sqrt(qp[2]) == pytest.approx(naive.tilted_sigma_star(log_lik, mu, sd, centres), rel=1e-12)
    assert math.sqrt(qp[2]) <= math.sqrt(ep[2]) * (1 + 1e-12)
    assert student_t.student_t_qp_sd(y, mu, sd, df, scale) == math.sqrt(qp[2])
    assert _project(STUDENT_T, y, mu, sd * sd, (df, scale), True) == qp


def test_student_t_outlier_tilted_distribution_is_bimodal_and_both_modes_count():
    """y = 4 against a cavity N(0, 1) with df 3, scale 0.3: the tilted density has two modes, at
    f = 1.58 (the cavity's side) and 3.63 (the likelihood's), the second holding 31% of the mass
    (brute-force quadrature either side of the antimode); the projection's mean lies between
    them, and its moments are those of brute-force quadrature (1e-12)."""
    y, df, scale = 4.0, 3.0, 0.3
    a = scale * math.sqrt(df)
    x1, x2, anti = student_t._student_t_modes(-y / a, 1.0 / a ** 2, 0.5 * (df + 1.0))
    assert not math.isnan(anti)
    np.testing.assert_allclose([y + a * x1, y + a * x2], [3.6317, 1.5801], atol=1e-4)
    log_lik = naive.student_t_log_lik(y, df, scale)
    dens = lambda f: math.exp(log_lik(f) - 0.5 * f * f)
    cut = y + a * anti
    share = _quad(dens, cut, y + 30.0) / _quad(dens, -30.0, y + 30.0)
    assert 0.3 < share < 0.32
    got = student_t.student_t_tilted_moments(y, 0.0, 1.0, df, scale)
    assert y + a * x2 < got[1] < y + a * x1
    _assert_moments(got, naive.tilted_moments(log_lik, 0.0, 1.0, [(y, scale), (y, a)]), 1e-12)


def _refined(edges, count, k=4, widen=0.5):
    """The panels split in k, plus 40 panels each side over ``widen`` times the window's width."""
    e = edges[:count]
    parts = (e[:-1, None] + (e[1:] - e[:-1])[:, None] * np.arange(k) / k).ravel()
    width = e[-1] - e[0]
    return np.ascontiguousarray(np.concatenate([np.linspace(e[0] - widen * width, e[0], 41)[:-1], parts,
                                                np.linspace(e[-1], e[-1] + widen * width, 41)]))


def test_logit_rule_is_converged_over_the_cavity_range():
    """The logit rule (special.logit_normal_edges on z* +- 10) against itself on 4x finer panels over a
    window twice as wide, for cavity means -30..30 and sds 0.01..50: log Z (relative to max(1, |log
    Z|)), the mean (relative to the sd), the variance, sigma* and the bias gradient's E[sigma(-g)]
    all within 1e-12 (measured 3e-13 at most, E[sigma(-g)]; the rest 1e-14)."""
    worst = np.zeros(5)
    for m in np.concatenate([np.linspace(-30.0, 30.0, 13), [-0.3, 0.1, 2.0]]):
        for s in np.geomspace(0.01, 50.0, 9):
            z_star, _ = S.logit_normal_mode(m, s)
            edges, count = S.logit_normal_edges(m, s, z_star - 10.0, z_star + 10.0)
            fine = _refined(edges, count)
            a = bernoulli._logit_moments_on_edges(m, 1.0, s, edges, count, True)
            b = bernoulli._logit_moments_on_edges(m, 1.0, s, fine, len(fine), True)
            sd_a = bernoulli._logit_wasserstein_sd_edges(m, 1.0, s, a[0], edges, count)
            sd_b = bernoulli._logit_wasserstein_sd_edges(m, 1.0, s, b[0], fine, len(fine))
            worst = np.maximum(worst, [abs(a[0] - b[0]) / max(1.0, abs(b[0])), abs(a[1] - b[1]) / math.sqrt(b[2]),
                                       abs(a[2] / b[2] - 1), abs(sd_a / sd_b - 1), abs(a[3] / b[3] - 1)])
    assert np.all(worst < 1e-12), worst


def test_student_t_rule_is_converged():
    """The Student-t rule against itself on 4x finer panels over a window twice as wide, for df
    0.5..1e5, scales 0.01..5, cavity means -30..30 and sds 0.01..50, y at 0, 2 and -25 (up to 3,000
    cavity sds away): log Z, the variance's two expectations (df, scale gradients) and sigma*
    within 1e-11 relative, the mean within 1e-11 of the tilted sd and the variance within 1e-10
    (measured 4e-12 and 8e-12 at worst, where the tilted mass lies 3,000 of its sds from y, the
    origin of the rule's coordinates, and rounding the coordinates costs that much; 1e-13
    elsewhere)."""
    worst = np.zeros(6)
    for df in (0.5, 2.0, 10.0, 1e3, 1e5):
        for scale in (0.01, 1.0, 5.0):
            for mu in (-30.0, 0.0, 30.0):
                for sd in (0.01, 1.0, 50.0):
                    for y in (0.0, 2.0, -25.0):
                        edges, count, loc, s2, power, a = student_t._student_t_rule(y, mu, sd * sd, df, scale)
                        fine = _refined(edges, count)
                        r = student_t._moments_on_edges(loc, s2, power, edges, count, True)
                        f = student_t._moments_on_edges(loc, s2, power, fine, len(fine), True)
                        sd_r = student_t._wasserstein_sd_edges(loc, s2, power, r[0], edges, count)
                        sd_f = student_t._wasserstein_sd_edges(loc, s2, power, f[0], fine, len(fine))
                        worst = np.maximum(worst, [abs(r[0] - f[0]) / max(1.0, abs(f[0])),
                                                   abs(r[1] - f[1]) / math.sqrt(f[2]), abs(r[2] / f[2] - 1),
                                                   abs(sd_r / sd_f - 1), abs(r[3] / f[3] - 1),
                                                   abs(r[4] / f[4] - 1)])
    assert worst[0] < 1e-11 and worst[1] < 1e-11 and worst[2] < 1e-10, worst
    assert worst[3] < 1e-11 and worst[4] < 1e-11 and worst[5] < 1e-11, worst


def test_qp_never_exceeds_ep_for_logit_and_student_t():
    for y in (-1.0, 1.0):
        for mu in (-30.0, -5.0, -0.5, 0.0, 0.7, 3.0, 30.0):
            for sd in (0.01, 0.3, 1.0, 3.0, 10.0, 50.0):
                _, _, v_ep = _project(LOGIT, y, mu, sd * sd, 0.25, False)
                _, _, v_qp = _project(LOGIT, y, mu, sd * sd, 0.25, True)
                assert 0.0 < v_qp <= v_ep * (1 + 1e-12), (y, mu, sd)
    for y in (0.0, 4.0, 40.0):
        for mu in (-30.0, -1.0, 0.0, 2.0, 30.0):
            for sd in (0.01, 0.5, 3.0, 50.0):
                for df, scale in ((0.7, 1.0), (3.0, 0.2), (30.0, 2.0)):
                    params = (df, scale)
                    ep = _site_projection(STUDENT_T, y, mu, sd * sd, params, None)
                    qp = _site_projection(STUDENT_T, y, mu, sd * sd, params, True)
                    assert np.all(np.isfinite(ep)) and np.all(np.isfinite(qp)), (y, mu, sd, params)
                    assert 0.0 < qp[2] <= ep[2] * (1 + 1e-12), (y, mu, sd, params)


def test_logit_mirror_symmetry_and_degenerate_cavities():
    for y, mu, var, bias in [(1.0, 0.4, 0.8, 0.0), (-1.0, -2.0, 3.0, 0.7), (1.0, 1.3, 0.05, -2.0)]:
        for qp in (False, True):
            a = _project(LOGIT, y, mu, var, bias, qp)
            b = _project(LOGIT, -y, -mu, var, -bias, qp)
            np.testing.assert_allclose([b[0], -b[1], b[2]], a, rtol=1e-13, atol=1e-15)
    # a point-mass cavity: Z is the likelihood there; a cavity that is not finite gives nan
    assert bernoulli.logit_tilted_moments(1.0, 0.3, 0.0, 0.1) == (-math.log1p(math.exp(-0.4)), 0.3, 0.0)
    assert np.all(np.isnan(bernoulli.logit_tilted_moments(1.0, np.nan, 1.0, 0.0)))
    assert np.all(np.isnan(student_t.student_t_tilted_moments(1.0, 0.0, np.inf, 4.0, 1.0)))
    assert np.all(np.isnan(student_t.student_t_tilted_moments(1.0, 0.0, 1.0, -4.0, 1.0)))


# --------------------------------------------------------------------------- likelihood-parameter gradients


def _log_z(kind, y, mu, var, params):
    return _site_projection(kind, y, mu, var, tuple(params), None)[0]


GRADIENT_CASES = [(PROBIT, 1.0, -0.7, 1.3, (0.4,)), (PROBIT, -1.0, 2.5, 0.2, (-1.0,)),
                  (LOGIT, 1.0, -0.7, 1.3, (0.4,)), (LOGIT, -1.0, 3.0, 9.0, (0.5,)), (LOGIT, 1.0, -12.0, 0.04, (2.0,)),
                  (GAUSSIAN, 0.3, -0.7, 1.3, (0.2,)), (GAUSSIAN, 4.0, 0.0, 0.01, (2.5,)),
                  (STUDENT_T, 0.5, 0.3, 2.0, (4.0, 1.0)), (STUDENT_T, 8.0, 0.0, 9.0, (3.0, 0.5)),
                  (STUDENT_T, -3.0, 1.0, 0.3, (0.8, 2.0)), (STUDENT_T, 2.0, 0.0, 1.0, (60.0, 0.7))]


@pytest.mark.parametrize("kind,y,mu,var,params", GRADIENT_CASES)
def test_log_z_parameter_gradient_matches_finite_differences(kind, y, mu, var, params):
    """tilted_log_z_param_gradient against central differences of log Z (steps 1e-5 relative):
    1e-7 relative (the differences' own error is ~1e-9)."""
    got = _log_z_gradient(kind, y, mu, var, params)
    assert isinstance(got, tuple) and len(got) == len(params)
    want = naive.central_difference(lambda p: _log_z(kind, y, mu, var, p), np.array(params), step=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-10)


def test_bias_gradient_is_the_cavity_mean_gradient_and_poisson_has_none():
    """For a bias, d log Z / d bias = d log Z / d mu = (tilted mean - mu) / var (exact identities);
    Poisson has no parameter, so an empty tuple."""
    for kind in (PROBIT, LOGIT):
        for y, mu, var, bias in [(1.0, -0.7, 1.3, 0.4), (-1.0, 2.0, 25.0, 0.0), (1.0, 4.0, 0.01, -1.0)]:
            (g,) = _log_z_gradient(kind, y, mu, var, (bias,))
            _, mean, _ = _site_projection(kind, y, mu, var, (bias,), None)
            assert g == pytest.approx((mean - mu) / var, rel=1e-11)
    assert _log_z_gradient(POISSON, 3.0, 0.5, 1.0, ()) == ()


def test_parameter_gradients_match_tilted_expectations():
    """The gradients as tilted expectations by brute-force quadrature (E[y sigma(-y (f + b))] for the
    logit bias, E[d log t / d df], E[d log t / d scale] for Student-t): 1e-11, including a confident
    logit site (m = 40) where E[sigma(-g)] ~ e^-40 and a difference of log Z would lose it all."""
    for y, mu, var, bias in [(1.0, -0.7, 1.3, 0.4), (1.0, 40.0, 4.0, 0.0), (-1.0, 30.0, 0.01, 0.0)]:
        log_lik, centres = _logit_reference(y, mu, math.sqrt(var), bias)
        want = y * naive.tilted_expectation(lambda f: special.expit(-y * (f + bias)), log_lik, mu, math.sqrt(var),
                                            centres)
        assert _log_z_gradient(LOGIT, y, mu, var, (bias,))[0] == pytest.approx(want, rel=1e-11)
    for y, mu, var, df, scale in [(0.5, 0.3, 2.0, 4.0, 1.0), (8.0, 0.0, 9.0, 3.0, 0.5), (2.0, 0.0, 1.0, 60.0, 0.7)]:
        log_lik, centres = _student_t_reference(y, df, scale)
        u = lambda f: (y - f) ** 2 / (df * scale * scale)
        d_df = lambda f: 0.5 * (special.digamma(0.5 * (df + 1)) - special.digamma(0.5 * df) - 1 / df
                                - math.log1p(u(f)) + (df + 1) * u(f) / (df * (1 + u(f))))
        d_scale = lambda f: ((df + 1) * u(f) / (1 + u(f)) - 1) / scale
        # E of each term, summed (the integrands change sign)
        e_log = naive.tilted_expectation(lambda f: math.log1p(u(f)), log_lik, mu, math.sqrt(var), centres)
        e_frac = naive.tilted_expectation(lambda f: u(f) / (1 + u(f)), log_lik, mu, math.sqrt(var), centres)
        want = (0.5 * (special.digamma(0.5 * (df + 1)) - special.digamma(0.5 * df) - 1 / df - e_log
                       + (df + 1) / df * e_frac), ((df + 1) * e_frac - 1) / scale)
        got = _log_z_gradient(STUDENT_T, y, mu, var, (df, scale))
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)
        assert d_df(y) == pytest.approx(0.5 * (special.digamma(0.5 * (df + 1)) - special.digamma(0.5 * df) - 1 / df))
        assert d_scale(y) == -1 / scale


def test_digamma_matches_scipy():
    x = np.concatenate([np.geomspace(1e-3, 1e6, 400), [1.4616321449683622, 0.5, 1.0, 10.0]])
    np.testing.assert_allclose([S.digamma(t) for t in x], special.digamma(x), rtol=1e-13, atol=1e-15)
    nu = np.geomspace(0.01, 1e8, 300)
    want = special.digamma(0.5 * (nu + 1)) - special.digamma(0.5 * nu)
    # scipy's difference loses ~1e-16 log(nu) absolute to cancellation at large nu; the expansion does not
    got = np.array([S.digamma_half_difference(v) for v in nu])
    assert np.all(np.abs(got - want) <= 1e-13 * np.abs(want) + 4e-16 * np.log(nu + 2.0))
    assert math.isnan(S.digamma(0.0)) and math.isnan(S.digamma_half_difference(-1.0))


# --------------------------------------------------------------------------- dense EP reference (issue 15)


def _dense_problem(n=20, seed=11):
    """N = 20 inputs on [-3, 3], an SE kernel (lengthscale 0.9, variance 2.5) and fixed sites:
    precisions in [0.05, 3], locations of either sign."""
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3.0, 3.0, size=(n, 1)), axis=0)
    K = naive.kernel(X, X, 0.9, 2.5, "se") + 1e-10 * np.eye(n)
    tau = rng.uniform(0.05, 3.0, n)
    nu = rng.normal(0.0, 1.0, n) * tau
    return X, K, tau, nu, rng


def test_dense_logit_ep_at_fixed_sites_matches_brute_force_quadrature():
    """Issue 15's acceptance check: at FIXED sites (tau, nu) on a small dense problem (N = 20, SE
    kernel), the cavities from the dense posterior (naive.dense_ep_cavities, explicit inverses), and
    at each the jitted logit projection (site_projection and the sweep kernels' own path) against
    brute-force quadrature of the tilted moments: log Z, mean and variance to 1e-8 (measured ~1e-14);
    the site updates that parallel EP makes from them to 1e-8 as well."""
    from gpdsl._jit import ep_sweeps
    X, K, tau, nu, rng = _dense_problem()
    y = np.where(rng.uniform(size=len(X)) < 1.0 / (1.0 + np.exp(-2.0 * np.sin(2.0 * X[:, 0]))), 1.0, -1.0)
    bias = 0.3
    mu_c, var_c, Sigma, mu = naive.dense_ep_cavities(K, tau, nu)
    assert np.all(var_c > 0.0)
    want_tau, want_nu = np.empty(len(y)), np.empty(len(y))
    for i in range(len(y)):
        log_lik, centres = _logit_reference(y[i], mu_c[i], math.sqrt(var_c[i]), bias)
        want = naive.tilted_moments(log_lik, mu_c[i], math.sqrt(var_c[i]), centres)
        got = _site_projection(LOGIT, y[i], mu_c[i], var_c[i], (bias,), None)
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-12)
        want_tau[i] = 1.0 / want[2] - 1.0 / var_c[i]
        want_nu[i] = want[1] / want[2] - mu_c[i] / var_c[i]
    # the sweep kernels' update from the same marginals (no damping): tau = 1/var - tau_cav,
    # nu = mean (tau_cav + tau) - nu_cav
    tau_new, nu_new = tau.copy(), nu.copy()
    ep_sweeps.parallel_site_updates(np.diag(Sigma).copy(), mu.copy(), tau_new, nu_new, y, (bias,), LOGIT.project, None,
                                    0.0, None, None)
    np.testing.assert_allclose(tau_new, np.maximum(want_tau, 0.0), rtol=1e-8)
    np.testing.assert_allclose(nu_new, want_nu, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("kind", ["logit", "student_t"])
def test_dense_ep_fixed_point_matches_brute_force_moments(kind):
    """Dense sequential EP (the jitted sweep) run to a fixed point (site changes < 1e-10) with the
    logit link, and with a Student-t likelihood on data with two outliers: at the final sites the
    posterior marginal of every site equals the brute-force tilted moments at its cavity (moment
    matching, the definition of an EP fixed point) to 1e-8; the Student-t outliers' sites are
    clamped at precision 0 (negative otherwise) and match the mean only."""
    from gpdsl._jit import ep_sweeps
    X, K, _, _, rng = _dense_problem(seed=5)
    n = len(X)
    f = 1.5 * np.sin(2.0 * X[:, 0])
    if kind == "logit":
        y = np.where(rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-2.0 * f)), 1.0, -1.0)
        code, params = LOGIT, (0.2,)
        reference = lambda yi: naive.logit_log_lik(yi, 0.2)
        centres = lambda yi: [(-0.2, 1.0)]
    else:
        y = f + 0.1 * rng.standard_normal(n)
        y[[4, 13]] += (6.0, -8.0)
        code, params = STUDENT_T, (3.0, 0.15)
        reference = lambda yi: naive.student_t_log_lik(yi, 3.0, 0.15)
        centres = lambda yi: [(yi, 0.15), (yi, 0.15 * math.sqrt(3.0))]
    tau, nu = np.zeros(n), np.zeros(n)
    Sigma, mu = K.copy(), np.zeros(n)
    for sweep in range(200):
        change, skipped = ep_sweeps.dense_sequential_sweep(Sigma, mu, tau, nu, y, params, code.project, None, 0.0, None,
                                                           None)
        # refresh from the sites (as the library does), which also clears the rank-1 drift
        mu_c, var_c, Sigma, mu = naive.dense_ep_cavities(K, tau, nu)
        if change < 1e-10:
            break
    assert change < 1e-10 and skipped == 0
    mu_c, var_c, Sigma, mu = naive.dense_ep_cavities(K, tau, nu)
    for i in range(n):
        want = naive.tilted_moments(reference(y[i]), mu_c[i], math.sqrt(var_c[i]), centres(y[i]))
        if tau[i] == 0.0:
            # a site whose precision would be negative is clamped to 0 (the outliers here): only
            # the marginal mean is matched
            assert kind == "student_t" and i in (4, 13)
            assert mu[i] == pytest.approx(want[1], rel=1e-8, abs=1e-10)
            continue
        np.testing.assert_allclose([mu[i], Sigma[i, i]], want[1:], rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("y, mu, var", [(17.0, 8.458416057343502e26, 14903.908635701833),
                                        (9583.0, -3.7913856741581453e23, 81231.08608349772),
                                        (3.0, 1e12, 1.0)])
def test_poisson_square_qp_far_out_is_ep(y, mu, var):
    """A cavity mean far beyond its sd (a broken line-search state of a fuzz case, mean 1e26)
    makes the tilted distribution Gaussian: sigma* equals EP's sd (1e-6 relative).  The minor
    mode f_lo = (b - sqrt(b^2 + 4 n v)) / 2 cancelled to 0 there and divided by zero; it is
    now -n v / f_hi."""
    _, _, var_ep = poisson.poisson_square_tilted_moments(y, mu, var)
    assert poisson.poisson_square_qp_sd(y, mu, math.sqrt(var)) == pytest.approx(math.sqrt(var_ep), rel=1e-6)
