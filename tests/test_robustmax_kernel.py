"""The jitted robust-max kernel (gpdsl._jit.robustmax, issue 46) against the NumPy form it replaced
(tests/naive.py's ``robustmax_largest``: P, dP/dmean and dP/dvar to 1e-12) and its derivatives
against central differences of P; the wrapper's checks and its one Numba specialisation.  Under
``NUMBA_DISABLE_JIT=1`` the same tests run the kernel as Python (the last, in a fresh process, with Numba)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpdsl._jit.robustmax import VAR_FLOOR, robustmax_largest, robustmax_pass
from gpdsl.likelihoods.base import gauss_hermite
from gpdsl.likelihoods.categorical import SQUASH, _robustmax_largest

import naive

REPO = Path(__file__).resolve().parents[1]
RULE = gauss_hermite(20)


def _inputs(K, seed, repeats=3):
    """Rows with the labelled class at every position 0..K-1 (``repeats`` rows each) and moments
    that cover the kernel's cases: ordinary means and variances; ties (a row's means repeat
    another class's, the labelled one's included); variances exactly at the 1e-10 clip, below it
    and 0; and extreme means (differences of 40 to 1e4 over sds down to 1e-5, so |z| up to 1e9:
    Phi saturates and phi underflows)."""
    rng = np.random.default_rng(seed)
    codes = np.repeat(np.arange(K), repeats)
    n = codes.size
    mean = rng.normal(0.0, 1.5, (n, K))
    var = rng.uniform(0.05, 3.0, (n, K))
    kind = np.arange(n) % 4
    # ties: half of each tied row's classes copy the labelled class's mean or class 0's
    for i in np.flatnonzero(kind == 1):
        copies = rng.random(K) < 0.5
        mean[i, copies] = mean[i, codes[i]] if rng.random() < 0.5 else mean[i, 0]
    # the clip: variances at, below and at zero, the labelled class's among them
    for i in np.flatnonzero(kind == 2):
        clipped = rng.random(K) < 0.5
        var[i, clipped] = rng.choice([VAR_FLOOR, 1e-12, 0.0], clipped.sum())
    # extreme means
    for i in np.flatnonzero(kind == 3):
        mean[i] = rng.choice([-1e4, -40.0, 0.0, 40.0, 1e4], K)
        var[i] = rng.choice([1e-10, 1.0, 4.0], K)
    return codes, mean, var


def _close(kernel, reference, rtol, scale=0.0):
    """|kernel - reference| <= rtol (|reference| + scale), elementwise."""
    np.testing.assert_array_less(np.abs(kernel - reference), rtol * (np.abs(reference) + scale) + 1e-300)


def _sd_scale(d_mean, var):
    """The size of the terms of dP/dvar_j = -sum_q T_njq z_njq / (2 s_j), which cancel where the
    sum is ~0 (tied classes): |T z| <= 40 |T| (T = 0 to rounding where |z| > 38, phi underflows),
    sum_q |T_njq| = |dP/dm_j| <= the row's largest |dP/dm|, and |x_q| < 40 for the labelled class."""
    return 40.0 * np.max(np.abs(d_mean), axis=1, keepdims=True) / (2.0 * np.sqrt(np.maximum(var, VAR_FLOOR)))


@pytest.mark.parametrize("K", range(2, 27))
def test_kernel_matches_numpy_form(K):
    codes, mean, var = _inputs(K, seed=K)
    P, d_mean, d_var = _robustmax_largest(codes, mean, var, RULE, need_grad=True)
    ref_P, ref_mean, ref_var = naive.robustmax_largest(codes, mean, var, RULE, need_grad=True)
    # P's and dP/dmean's sums have terms of one sign: relative; dP/dvar's to its terms' size
    _close(P, ref_P, 1e-12)
    _close(d_mean, ref_mean, 1e-12)
    _close(d_var, ref_var, 1e-12, _sd_scale(ref_mean, var))
    # Without derivatives: the same products in the same order, factors of z > 8.5 taken as Phi = 1
    (P_only,) = _robustmax_largest(codes, mean, var, RULE)
    np.testing.assert_array_equal(P_only, P)
    # The cases are there: derivatives of both kinds, and exact zeros at the clip.
    clipped = var <= VAR_FLOOR
    assert clipped.any() and np.all(d_var[clipped] == 0.0) and np.any(np.abs(d_var[~clipped]) > 1e-3)
    assert np.all(d_mean[np.arange(codes.size), codes] >= 0.0)
    np.testing.assert_allclose(d_mean.sum(axis=1), 0.0, atol=1e-12 * np.abs(d_mean).max())


def test_tied_means_at_variance_zero_share_the_probability():
    """m classes tied for the largest mean at variance 0 (s clipped to 1e-5 for all): P_k of each
    tied class is 1/m of 1 less the squash's share, the same under the NumPy form."""
    mean = np.array([[1.0, 1.0, 1.0, -2.0]] * 4)
    var = np.zeros((4, 4))
    codes = np.arange(4)
    P, d_mean, d_var = _robustmax_largest(codes, mean, var, RULE, need_grad=True)
    ref = naive.robustmax_largest(codes, mean, var, RULE, need_grad=True)
    _close(P, ref[0], 1e-12)
    _close(d_mean, ref[1], 1e-12)
    assert np.all(d_var == 0.0)
    np.testing.assert_allclose(P[:3], 1.0 / 3.0, rtol=1e-4)
    assert P[3] < 1e-11


@pytest.mark.parametrize("K", [2, 3, 5, 10, 26])
def test_derivatives_against_central_differences(K):
    """dP_n/dmean_n and dP_n/dvar_n of each row (the labelled class at every position) against
    central differences of that row's P_n, with the variances above the clip (a step there
    crosses it) and moderate means."""
    rng = np.random.default_rng(100 + K)
    codes = np.arange(K)
    mean = rng.normal(0.0, 1.0, (K, K))
    mean[codes, codes] += 2.0           # P_n of order 0.1 or more at K = 26, not 1e-6
    var = rng.uniform(0.2, 2.0, (K, K))
    _, d_mean, d_var = _robustmax_largest(codes, mean, var, RULE, need_grad=True)
    for i in range(K):
        row = slice(i, i + 1)
        fd_mean = naive.central_difference(
            lambda m: float(_robustmax_largest(codes[row], m[None], var[row], RULE)[0][0]), mean[i])
        fd_var = naive.central_difference(
            lambda v: float(_robustmax_largest(codes[row], mean[row], v[None], RULE)[0][0]), var[i])
        scale = np.abs(d_mean[i]).max()
        np.testing.assert_allclose(d_mean[i], fd_mean, rtol=1e-6, atol=1e-8 * scale)
        np.testing.assert_allclose(d_var[i], fd_var, rtol=1e-6, atol=1e-8 * scale)
        assert np.abs(fd_mean).max() > 1e-3 and np.abs(fd_var).max() > 1e-4


def test_P_is_flat_below_the_clip():
    """Below the clip s is 1e-5 whatever the variance: P does not move, so its derivative 0 is exact."""
    rng = np.random.default_rng(7)
    mean = rng.normal(size=(6, 4))
    codes = np.arange(6) % 4
    values = [_robustmax_largest(codes, mean, np.full((6, 4), v), RULE)[0] for v in (0.0, 1e-13, 1e-11, VAR_FLOOR)]
    for P in values[1:]:
        np.testing.assert_array_equal(P, values[0])


def test_wrapper_checks_and_converts():
    mean, var = np.zeros((3, 4)), np.ones((3, 4))
    nodes, weights = RULE
    with pytest.raises(ValueError, match="codes must be integers in 0..3"):
        robustmax_largest(np.array([0, 1, 4]), mean, var, nodes, weights, SQUASH, False)
    with pytest.raises(ValueError, match="codes must be integers"):
        robustmax_largest(np.array([0.0, 1.5, 2.0]), mean, var, nodes, weights, SQUASH, False)
    with pytest.raises(ValueError, match="codes must be integers"):
        robustmax_largest(np.array([0, -1, 2]), mean, var, nodes, weights, SQUASH, False)
    with pytest.raises(ValueError, match="do not agree"):
        robustmax_largest(np.array([0, 1, 2]), mean, np.ones((3, 3)), nodes, weights, SQUASH, False)
    with pytest.raises(ValueError, match="do not agree"):
        robustmax_largest(np.array([0, 1]), mean, var, nodes, weights, SQUASH, False)
    with pytest.raises(ValueError, match="var must have 2 dimensions"):
        robustmax_largest(np.array([0, 1, 2]), mean, np.ones(3), nodes, weights, SQUASH, False)
    assert robustmax_largest(np.zeros(0, int), np.zeros((0, 4)), np.zeros((0, 4)), nodes, weights, SQUASH,
                             True)[1].shape == (0, 4)


def test_one_specialisation():
    """Float and int32 codes, Fortran-ordered, strided and read-only moments, a rule given as lists
    and NumPy bools all reach the kernel as the same types: one compiled specialisation, the same
    numbers."""
    if not hasattr(robustmax_pass, "signatures"):
        pytest.skip("NUMBA_DISABLE_JIT=1: the kernel is a plain function")
    codes, mean, var = _inputs(5, seed=3)
    expected = _robustmax_largest(codes, mean, var, RULE, need_grad=True)
    read_only = var.copy()
    read_only.flags.writeable = False
    wide = np.zeros((mean.shape[0], 2 * mean.shape[1]))
    wide[:, ::2] = mean
    calls = [(codes.astype(float), np.asfortranarray(mean), var, RULE, np.True_),
             (codes.astype(np.int32), wide[:, ::2], read_only, RULE, True),
             (codes, mean, var, (list(RULE[0]), list(RULE[1])), False)]
    for codes_, mean_, var_, rule, grad in calls:
        got = _robustmax_largest(codes_, mean_, var_, rule, need_grad=grad)
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
    assert len(robustmax_pass.signatures) == 1, robustmax_pass.signatures


def test_cody_rationals_compile_inside_their_caller(tmp_path):
    """Cody's rationals (``special._erf_small``, ``_erfcx_tail``) are typed inside the robust-max CDF
    (``inline="always"``), not compiled as dispatchers of their own and optimised again in it: on a
    fresh cache, a robust-max pass with derivatives leaves them no specialisation, the kernel one."""
    code = ("import json, numpy as np\n"
            "from gpdsl._jit import robustmax, special\n"
            "from gpdsl.likelihoods.base import gauss_hermite\n"
            "nodes, weights = gauss_hermite(20)\n"
            "robustmax.robustmax_largest(np.arange(4) % 3, np.eye(4, 3), np.ones((4, 3)), nodes, weights, 1e-6, True)\n"
            "print(json.dumps([len(f.signatures) for f in (special._erf_small, special._erfcx_tail, "
            "robustmax._cdf_pdf, robustmax.robustmax_pass)]))\n")
    environ = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    environ.pop("NUMBA_DISABLE_JIT", None)
    proc = subprocess.run([sys.executable, "-c", code], env=environ, cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [0, 0, 1, 1]
