"""gpdsl.released_blas: DTRMM and DSYRK through SciPy's Cython BLAS pointers, against dense NumPy
products and SciPy's f2py wrappers (the same routine: the same bits), and the GIL released while
they run; every Numba kernel releases it too."""
import threading
import time

import numba
import numpy as np
import pytest
from scipy.linalg import blas
from threadpoolctl import threadpool_limits

import gpdsl._jit
from gpdsl.released_blas import lower_gram, lower_product


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (64, 200), (130, 7), (4, 0)])
def test_lower_product_is_the_dense_product_of_the_lower_triangle(shape, transpose):
    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    m, n = shape
    R, X = rng.standard_normal((m, m)), rng.standard_normal((m, n))     # R's upper triangle is not read
    lower = np.tril(R)
    got = lower_product(R, X, transpose)
    np.testing.assert_allclose(got, (lower.T if transpose else lower) @ X, rtol=1e-12, atol=1e-12)
    assert got.shape == (m, n) and got.flags.c_contiguous
    # f2py's wrapper of the same routine: the same bits.
    assert np.array_equal(got, blas.dtrmm(1.0, R, X.T, side=1, lower=1, trans_a=0 if transpose else 1).T)


def test_lower_product_takes_views_and_leaves_its_inputs_alone():
    rng = np.random.default_rng(1)
    R, X = rng.standard_normal((12, 12)), rng.standard_normal((30, 12))
    R_before, X_before = R.copy(), X.copy()
    got = lower_product(R.T[::1], X.T)                 # Fortran-ordered views
    np.testing.assert_allclose(got, np.tril(R.T) @ X.T, rtol=1e-12, atol=1e-12)
    assert np.array_equal(R, R_before) and np.array_equal(X, X_before)


def test_lower_product_names_a_shape_mismatch():
    with pytest.raises(ValueError, match=r"lower_product: R must be \(3, 3\)"):
        lower_product(np.eye(4), np.ones((3, 5)))


@pytest.mark.parametrize("alpha", [1.0, -2.5])
@pytest.mark.parametrize("shape", [(1, 1), (6, 40), (150, 33), (5, 0), (0, 4)])
def test_lower_gram_is_the_lower_triangle_of_the_dense_gram(shape, alpha):
    rng = np.random.default_rng(shape[0] + 7 * shape[1])
    A = rng.standard_normal(shape)
    got = lower_gram(A, alpha)
    np.testing.assert_allclose(got, np.tril(alpha * A @ A.T), rtol=1e-12, atol=1e-12)
    assert np.array_equal(np.triu(got, 1), np.zeros_like(got))
    if A.size:
        assert np.array_equal(got, blas.dsyrk(alpha, A.T, trans=1, lower=1))


def _spin_rate_while(work):
    """Turns per second of a Python loop in this thread while ``work`` runs in another: a call
    that holds the GIL lets the loop run only in the interpreter's switch slices around it."""
    started, done, count = threading.Event(), threading.Event(), 0
    times = []

    def run():
        started.set()
        times.append(time.perf_counter())
        work()
        times.append(time.perf_counter())
        done.set()

    worker = threading.Thread(target=run)
    worker.start()
    started.wait()
    while not done.is_set():
        count += 1
    worker.join()
    return count / (times[1] - times[0])


@numba.njit(nogil=False)
def _busy_holding_the_gil(n):
    total = 0.0
    for i in range(n):
        total += np.sqrt(i + total % 7.0)
    return total


def test_the_products_release_the_gil():
    """While one thread runs a long DSYRK or DTRMM, another runs Python freely: against a Numba
    loop compiled without ``nogil`` (the loop then runs only in switch slices), at least 20 times
    the turns per second (measured here: ~200 times; SciPy's f2py DSYRK, which holds the GIL
    through its call, 4.8 times).  Rates, not times, are compared."""
    rng = np.random.default_rng(2)
    A = rng.standard_normal((600, 30000))
    R = np.tril(rng.standard_normal((600, 600)))
    _busy_holding_the_gil(10)                              # compiled before it is timed
    with threadpool_limits(1, user_api="blas"):
        held = _spin_rate_while(lambda: _busy_holding_the_gil(30_000_000))
        for work in (lambda: lower_gram(A), lambda: lower_product(R, A)):
            assert _spin_rate_while(work) > 20 * held


def _dispatchers():
    import importlib
    import pkgutil
    seen = {}
    for info in pkgutil.walk_packages(gpdsl._jit.__path__, "gpdsl._jit."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if isinstance(obj, numba.core.registry.CPUDispatcher) and obj.__module__ == info.name:
                seen[f"{info.name}.{name}"] = obj
    return seen


def test_every_numba_kernel_is_cached_and_releases_the_gil():
    """Row blocks run on threads (gpdsl.chunks.map_rows): a kernel that kept the GIL would run
    them one at a time.  Kernels inlined into their callers ("always") are not called alone."""
    kernels = _dispatchers()
    assert len(kernels) > 50
    for name, kernel in kernels.items():
        options = kernel.targetoptions
        assert options.get("cache") or kernel._cache.__class__.__name__ != "NullCache", name
        if options.get("inline", "never") != "always":
            assert options.get("nogil") is True, name


def test_a_dimension_beyond_the_32_bit_interface_is_refused():
    from gpdsl import released_blas
    with pytest.raises(ValueError, match="exceeds the 32-bit BLAS interface"):
        released_blas._int(2 ** 31)
    assert released_blas._int(2 ** 31 - 1) is not None
