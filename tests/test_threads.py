"""BLAS threads under gpdsl's control (gpdsl.threads): one thread inside fits and sweeps, the
automatic bulk count for dense factorisations, set_num_threads's count for large map_rows passes,
the user's setting respected and restored."""
import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import gpdsl as gd
from gpdsl import threads
from gpdsl.methods import collapsed, expectation_propagation

SE = gd.kernels.SquaredExponential


def _blas_threads():
    return sorted({lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"})


@pytest.fixture
def two_threads():
    """An ambient BLAS setting of two threads (the suite runs with one, see conftest.py), and
    gd.set_num_threads reset afterwards."""
    with threadpool_limits(2, user_api="blas"):
        assert _blas_threads() == [2]
        yield
    gd.set_num_threads(None)


def test_sweeps_run_on_one_thread_and_the_setting_is_restored(monkeypatch, two_threads):
    seen = []
    sweep = expectation_propagation.FITCPrior.sequential_sweep

    def spy(self, *args):
        seen.append(_blas_threads())
        return sweep(self, *args)

    monkeypatch.setattr(expectation_propagation.FITCPrior, "sequential_sweep", spy)
    X, y = gd.datasets.xor(120, seed=0)
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Bernoulli("probit"), gd.inducing.KMeans(8, seed=0),
                     gd.inference.EP())
    model.fit(X, y, optimize=False)
    assert seen and all(s == [1] for s in seen)
    assert _blas_threads() == [2]                      # the user's setting is back after the fit


def _vfe_pass_threads(monkeypatch, n):
    """BLAS threads seen inside the row chunks of one VFE evaluation with N = n, M = 64."""
    seen = []
    rows = collapsed.whitened_rows

    def spy(*args):
        seen.append(_blas_threads())
        return rows(*args)

    monkeypatch.setattr(collapsed, "whitened_rows", spy)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 1))
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), gd.inducing.Fixed(X[:64]), gd.inference.VFE())
    model.evaluate({"kernel.lengthscale": np.array(1.0), "kernel.variance": np.array(1.0),
                    "likelihood.variance": np.array(0.1)}, X, np.sin(X[:, 0]), X[:64], need_grad=False)
    return seen


def test_large_passes_use_the_bulk_count_small_ones_one_thread(monkeypatch, two_threads):
    gd.set_num_threads(2)
    assert gd.get_num_threads() == 2
    big = int(threads.BULK_FLOPS / 64 ** 2) + 1              # n M^2 just above the threshold
    assert all(s == [2] for s in _vfe_pass_threads(monkeypatch, big))
    assert all(s == [1] for s in _vfe_pass_threads(monkeypatch, 2000))


def test_row_passes_ignore_the_automatic_count_dense_factorisations_use_it(monkeypatch, two_threads):
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    gd.set_num_threads(None)
    assert gd.get_num_threads() == 2
    big = int(threads.BULK_FLOPS / 64 ** 2) + 1
    assert all(s == [1] for s in _vfe_pass_threads(monkeypatch, big))
    seen = []
    factor = gd.methods.exact.cholesky

    def spy(*args, **kwargs):
        seen.append(_blas_threads())
        return factor(*args, **kwargs)

    monkeypatch.setattr(gd.methods.exact, "cholesky", spy)
    n = int(round(threads.BULK_FLOPS ** (1 / 3))) + 1          # N^3 just above the threshold
    X = np.linspace(-3, 3, n)[:, None]
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), inference=gd.inference.Exact())
    model.fit(X, np.sin(X[:, 0]), optimize=False)
    assert seen and all(s == [2] for s in seen)


def test_an_enclosing_limit_caps_the_bulk_count(monkeypatch):
    gd.set_num_threads(None)
    with threadpool_limits(1, user_api="blas"):
        assert gd.get_num_threads() == 1
        big = int(threads.BULK_FLOPS / 64 ** 2) + 1
        assert all(s == [1] for s in _vfe_pass_threads(monkeypatch, big))


def test_automatic_count_leaves_busy_cores_alone(monkeypatch, two_threads):
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert gd.get_num_threads() == 2
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (2.5, 2.5, 2.5))    # another process on both
    assert gd.get_num_threads() == 1


@pytest.mark.parametrize("n", [0, -1, 1.5, "2", True])
def test_set_num_threads_validates(n):
    with pytest.raises(ValueError, match="set_num_threads: n must be a positive integer or None"):
        gd.set_num_threads(n)
