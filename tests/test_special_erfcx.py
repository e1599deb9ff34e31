"""Cody's scaled complementary error function (``_erfcx_tail``) and the probit's (log Phi, phi / Phi) pair
``norm_logcdf_ratio`` of gpdsl._jit.special, against scipy.special.erfcx and 40-digit mpmath.

Tolerances are in units of eps = 2.2e-16 and sit a little above the largest errors measured on
denser samples than these (stated per test), so that a lost bit in a coefficient or a branch
fails them.
"""
import numpy as np
import pytest
from scipy import special

from gpdsl._jit import special as S

EPS = np.finfo(float).eps
# Cody's interval ends in x, and where norm_logcdf_ratio changes branch in z = -sqrt 2 x
ERFCX_BREAKS = (0.46875, 4.0)
RATIO_BREAKS = tuple(sign * b * np.sqrt(2.0) for b in ERFCX_BREAKS for sign in (-1.0, 1.0))


def _ulps_around(points, count=4):
    """Each point and the ``count`` doubles either side of it."""
    out = []
    for p in points:
        lo = hi = p
        out.append(p)
        for _ in range(count):
            lo, hi = np.nextafter(lo, -np.inf), np.nextafter(hi, np.inf)
            out += [lo, hi]
    return np.array(out)


def test_erfcx_tail_matches_scipy():
    """Relative error against scipy's erfcx below 5.5 eps over (0.46875, 1e300], breakpoints
    included (within 3 eps of mpmath measured); the results stay normal numbers up to 1e300, and
    erfcx(inf) = 0."""
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(0.47, 6.0, 5531), rng.uniform(0.47, 1e3, 3000),
                        10.0 ** rng.uniform(-0.3, 300.0, 2000), _ulps_around(ERFCX_BREAKS),
                        [26.5, 1e154, 1e300]])
    x = x[x > ERFCX_BREAKS[0]]
    got = np.array([S._erfcx_tail(v) for v in x])
    np.testing.assert_allclose(got, special.erfcx(x), rtol=5.5 * EPS, atol=0)
    assert S._erfcx_tail(np.inf) == 0.0 and np.isnan(S._erfcx_tail(np.nan))


def _log_cdf_and_ratio(mp, z):
    """log Phi(z) (through log1p of Phi(-z) for z > 0, where Phi(z) is 1 to 40 digits) and
    phi(z) / Phi(z), in mpmath."""
    z = mp.mpf(z)
    log_cdf = mp.log1p(-mp.ncdf(-z)) if z > 0 else mp.log(mp.ncdf(z))
    return float(log_cdf), float(mp.npdf(z) / mp.ncdf(z))


def test_norm_logcdf_ratio_against_mpmath():
    """log Phi(z) and phi(z) / Phi(z) to 4 eps relative for z <= 0 (3 eps measured) and to
    4 eps max(1, z^2 / 2) for z > 0 (2 eps max(1, z^2 / 2) measured: exp(-z^2 / 2) carries the
    rounding of z^2 / 2), over z in [-1e6, 37] with its branch points; beyond z = 37.5 both
    are subnormal.  (Farther down, 40 digits no longer hold z^2 / 2 and its fraction, and mpmath's
    ratio goes wrong: see test_norm_logcdf_ratio_limits.)"""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    rng = np.random.default_rng(2)
    z = np.concatenate([np.linspace(-12.0, 12.0, 961), rng.uniform(-1.0, 1.0, 200),
                        rng.uniform(-40.0, 37.0, 300), -(10.0 ** rng.uniform(1.0, 6.0, 150)),
                        _ulps_around(RATIO_BREAKS), [-1e6, -38.5, -20.0, 0.0, 1e-300, -1e-300, 37.0]])
    want = np.array([_log_cdf_and_ratio(mp, v) for v in z])
    got = np.array([S.norm_logcdf_ratio(v) for v in z])
    tol = 4.0 * EPS * np.where(z > 0.0, np.maximum(1.0, 0.5 * z * z), 1.0)
    for k in (0, 1):
        assert np.all(np.abs(got[:, k] / want[:, k] - 1.0) <= tol), k


def test_norm_logcdf_ratio_limits():
    """Infinities and nan as norm_logcdf with exp(log phi - log Phi) for the ratio gives them
    (the probit's variational expectations used that pair before); far down the ratio is -z
    (its next term, -1/z, is below the last bit) and log Phi is -z^2 / 2 to rounding, or -inf
    once z^2 overflows; past z = 37.5, where Phi(-z) and phi(z) are subnormal or 0, the values
    are within a subnormal step of mpmath's (Phi(-38) = 2.885428351e-316, phi(38) =
    1.097221052e-314)."""
    assert S.norm_logcdf_ratio(np.inf) == (0.0, 0.0)
    log_cdf, ratio = S.norm_logcdf_ratio(-np.inf)
    assert log_cdf == -np.inf and np.isnan(ratio)
    assert all(np.isnan(S.norm_logcdf_ratio(np.nan)))
    for z in (-1e20, -1e150):
        assert S.norm_logcdf_ratio(z) == pytest.approx((-0.5 * z * z, -z), rel=EPS)
    log_cdf, ratio = S.norm_logcdf_ratio(-1e160)
    assert log_cdf == -np.inf and ratio == pytest.approx(1e160, rel=2 * EPS)
    log_cdf, ratio = S.norm_logcdf_ratio(38.0)
    assert abs(log_cdf + 2.885428351e-316) <= 1e-323 and abs(ratio - 1.097221052e-314) <= 1e-323
    assert S.norm_logcdf_ratio(40.0) == (0.0, 0.0)
