"""BLAS threads under gpdsl's control (gpdsl.threads): one thread inside fits and sweeps, the
bulk count for dense factorisations and as the block threads of large map_rows passes (one BLAS
thread each, the one-thread pass's results to the bit), the user's setting respected and restored."""
import threading
import types

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


def _vfe_pass_threads(monkeypatch, n, chunk_size=None):
    """(BLAS threads, the Python thread's name) seen inside the row chunks of one VFE evaluation
    with N = n, M = 64."""
    seen = []
    rows = collapsed.whitened_rows

    def spy(*args):
        seen.append((_blas_threads(), threading.current_thread().name))
        return rows(*args)

    monkeypatch.setattr(collapsed, "whitened_rows", spy)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 1))
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), gd.inducing.Fixed(X[:64]),
                     gd.inference.VFE(chunk_size=chunk_size))
    model.evaluate({"kernel.lengthscale": np.array(1.0), "kernel.variance": np.array(1.0),
                    "likelihood.variance": np.array(0.1)}, X, np.sin(X[:, 0]), X[:64], need_grad=False)
    return seen


def _on_block_threads(seen):
    """Every block with one BLAS thread, on gpdsl's row threads (not the caller's)."""
    return seen and all(blas == [1] and name.startswith("gpdsl-rows") for blas, name in seen)


def _on_caller(seen, blas_threads):
    return seen and all(blas == [blas_threads] and name == threading.current_thread().name for blas, name in seen)


def test_large_passes_run_blocks_on_threads_small_ones_on_one_thread(monkeypatch, two_threads):
    gd.set_num_threads(2)
    assert gd.get_num_threads() == 2
    big = int(threads.BULK_FLOPS / 64 ** 2) + 1              # n M^2 just above the threshold
    assert big > gd.chunks.default_chunk_size(big, 64)       # more than one block
    assert _on_block_threads(_vfe_pass_threads(monkeypatch, big))
    # One block of the same size: its products get the bulk count instead.
    assert _on_caller(_vfe_pass_threads(monkeypatch, big, chunk_size=big), 2)
    assert _on_caller(_vfe_pass_threads(monkeypatch, 2000, chunk_size=500), 1)
    gd.set_num_threads(1)
    assert _on_caller(_vfe_pass_threads(monkeypatch, big), 1)


def test_row_passes_and_dense_factorisations_use_the_automatic_count(monkeypatch, two_threads):
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    gd.set_num_threads(None)
    assert gd.get_num_threads() == 2
    big = int(threads.BULK_FLOPS / 64 ** 2) + 1
    assert _on_block_threads(_vfe_pass_threads(monkeypatch, big))
    # A single block's products stay on one thread unless set_num_threads asked for more.
    assert _on_caller(_vfe_pass_threads(monkeypatch, big, chunk_size=big), 1)
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


def test_block_threads_give_the_one_thread_evaluation_to_the_bit(two_threads, monkeypatch):
    """VFE's bound and every gradient (two passes, the second over the first's kept blocks) on
    two block threads against one: the same partial sums added in the same tree."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, (6000, 2))
    y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(6000)
    Z = X[:150]
    model = gd.Model(gd.kernels.Matern52(np.array([1.0, 1.5]), 1.0), gd.likelihoods.Gaussian(0.1),
                     gd.inducing.Fixed(Z), gd.inference.VFE(chunk_size=700))
    values = model.parameter_table(X, Z).values()
    in_order, workers = gd.chunks._in_order, []
    monkeypatch.setattr(gd.chunks, "_in_order", lambda block, count, n: workers.append(n) or in_order(block, count, n))
    out = {}
    for count in (1, 2):
        gd.set_num_threads(count)
        workers.clear()
        out[count] = model.evaluate(values, X, y, Z)
        assert workers == [count, count]             # the statistics and the gradient passes
    assert out[2].log_evidence == out[1].log_evidence
    assert out[2].grads.keys() == out[1].grads.keys()
    for name in out[1].grads:
        assert np.array_equal(out[2].grads[name], out[1].grads[name]), name
    assert np.array_equal(out[2].dZ, out[1].dZ)


def test_a_failing_block_stops_the_pass_and_raises(two_threads):
    """The first block that raises (in block order) re-raises in the caller, and the blocks not
    yet started are not run."""
    started = []

    def fn(x):
        started.append(int(x[0]))
        if x[0] == 4:
            raise FloatingPointError("block 4")
        return (x.sum(),), (x,)

    rows = (np.arange(400.0),)

    @threads.managed
    def run():
        return gd.chunks.map_rows(fn, rows, 1, width=10 ** 4)

    gd.set_num_threads(2)
    with pytest.raises(FloatingPointError, match="block 4"):
        run()
    assert 4 in started and len(started) < 400
    gd.set_num_threads(1)
    started.clear()
    with pytest.raises(FloatingPointError, match="block 4"):
        run()
    assert started == [0, 1, 2, 3, 4]


def test_block_threads_keep_the_block_order(two_threads):
    """Per-row results concatenated in row order and partial sums added in the one-thread tree,
    whatever order the threads finish in."""
    delays = np.random.default_rng(0).uniform(0, 2e-3, 64)
    rng = np.random.default_rng(0)
    partials = rng.uniform(0.1, 1.0, 64) / 3.0 * 10.0 ** rng.integers(0, 8, 64)

    def fn(x):
        import time
        time.sleep(delays[int(x[0]) // 7])
        # Partials of magnitudes 0.03 to 3e6 that round when added (seed 0: the tree's total
        # and the left-to-right and right-to-left sums differ in the last bits).
        i = int(x[0]) // 7
        return (np.array([partials[i], (x / 3.0).sum()]),), (x * 2.0,)

    rows = (np.arange(448.0),)

    @threads.managed
    def run():
        return gd.chunks.map_rows(fn, rows, 7, width=10 ** 4)

    gd.set_num_threads(1)
    (one,), (per_row_one,) = run()
    gd.set_num_threads(3)
    (three,), (per_row_three,) = run()
    assert np.array_equal(per_row_three, np.arange(448.0) * 2.0)
    assert np.array_equal(per_row_one, per_row_three)
    assert np.array_equal(one, three)


def test_an_enclosing_limit_caps_the_bulk_count(monkeypatch):
    gd.set_num_threads(None)
    with threadpool_limits(1, user_api="blas"):
        assert gd.get_num_threads() == 1
        big = int(threads.BULK_FLOPS / 64 ** 2) + 1
        assert _on_caller(_vfe_pass_threads(monkeypatch, big), 1)


def _no_recent_reading(monkeypatch):
    """The load average alone decides (as where /proc/stat cannot be read)."""
    monkeypatch.setattr(threads, "_recent_load", types.SimpleNamespace(others=lambda cores: None))


def test_automatic_count_leaves_busy_cores_alone(monkeypatch, two_threads):
    _no_recent_reading(monkeypatch)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert gd.get_num_threads() == 2
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (2.5, 2.5, 2.5))    # another process on both
    assert gd.get_num_threads() == 1


@pytest.mark.parametrize("n", [0, -1, 1.5, "2", True])
def test_set_num_threads_validates(n):
    with pytest.raises(ValueError, match="set_num_threads: n must be a positive integer or None"):
        gd.set_num_threads(n)


def test_the_automatic_count_discounts_this_process_own_load(monkeypatch, two_threads):
    """The 1-minute load average counts this process's own recent work; what the count reads is
    the rest.  A fake clock: 60 s at two busy threads gives this process's average
    2 (1 - e^-1) = 1.264, which the load average (the same average) shows as well."""
    _no_recent_reading(monkeypatch)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    clock = {"wall": 1000.0, "cpu": 50.0}
    own = threads._OwnLoad(clock=lambda: clock["wall"], cpu_clock=lambda: clock["cpu"])
    monkeypatch.setattr(threads, "_own_load", own)
    clock.update(wall=1060.0, cpu=170.0)
    expected = 2.0 * (1.0 - np.exp(-1.0))
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (expected + 0.05, 0.0, 0.0))
    assert gd.get_num_threads() == 2                       # only this process was busy
    np.testing.assert_allclose(own.average, expected, rtol=1e-12)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (expected + 1.3, 0.0, 0.0))
    assert gd.get_num_threads() == 1                       # and another process on one core
    # Idle since: the average decays as the load average does (e^-1 a minute later).
    clock.update(wall=1120.0)
    decayed = expected * np.exp(-1.0)
    for others, count in ((threads.IDLE_LOAD + 0.3, 1), (threads.IDLE_LOAD - 0.05, 2)):
        monkeypatch.setattr(threads.os, "getloadavg", lambda: (decayed + others, 0.0, 0.0))
        assert gd.get_num_threads() == count
    np.testing.assert_allclose(own.average, decayed, rtol=1e-12)
    # A CPU clock that went back (a forked child's, before its reset) never counts as negative load.
    clock.update(wall=1130.0, cpu=1.0)
    np.testing.assert_allclose(own.sample(), decayed * np.exp(-10.0 / 60.0), rtol=1e-12)


class _FakeStat:
    """/proc/stat's (busy, total) ticks, advancing by ``busy`` of ``total`` ticks a read; a clock,
    a CPU clock and a sleep that advance the clock."""

    def __init__(self, busy_share, cores=2, own_cpu=0.0):
        self.busy, self.total, self.share, self.cores = 0, 0, busy_share, cores
        self.wall, self.cpu, self.own_cpu, self.reads = 100.0, 10.0, own_cpu, 0

    def times(self):
        self.reads += 1
        return self.busy, self.total

    def sleep(self, seconds):
        ticks = int(100 * seconds * self.cores)           # 100 ticks a second a core
        self.busy, self.total = self.busy + int(round(self.share * ticks)), self.total + ticks
        self.cpu += self.own_cpu * seconds
        self.wall += seconds

    def recent(self):
        return threads._RecentLoad(times=self.times, clock=lambda: self.wall, cpu_clock=lambda: self.cpu,
                                   sleep=self.sleep)


def test_an_ended_process_in_the_load_average_does_not_cost_a_thread(monkeypatch, two_threads):
    """The load average still holds a process that ended a minute ago (a 10^5-row LMC fit started
    80 s after another two-thread process read 1.69 and took one thread: 73.4 s against 45.6-49.8
    on two).  Where it would cost a thread, the CPUs' busy time over RECENT_LOAD_WINDOW is read:
    idle now gives both threads; both cores busy now keeps one."""
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (2.5, 2.0, 1.0))
    for share, count in ((0.0, 2), (0.3, 2), (0.9, 1)):
        monkeypatch.setattr(threads, "_recent_load", _FakeStat(share).recent())
        assert gd.get_num_threads() == count
    # An idle load average is not second-guessed (no reading, no wait).
    fake = _FakeStat(1.0)
    monkeypatch.setattr(threads, "_recent_load", fake.recent())
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    assert gd.get_num_threads() == 2 and fake.reads == 0


def test_the_recent_load_is_the_busy_share_less_this_process_and_is_reused():
    """others = cores x busy ticks / all ticks over the window, less this process's CPU rate over
    it; reused for RECENT_LOAD_REUSE seconds, then read again."""
    fake = _FakeStat(0.75, cores=2, own_cpu=0.5)
    recent = fake.recent()
    assert recent.others(2) == pytest.approx(2 * 0.75 - 0.5, abs=1e-9) and fake.reads == 2
    fake.share = 0.0
    fake.wall += threads.RECENT_LOAD_REUSE / 2
    assert recent.others(2) == pytest.approx(1.0, abs=1e-9) and fake.reads == 2     # reused
    fake.wall += threads.RECENT_LOAD_REUSE
    assert recent.others(2) == 0.0 and fake.reads == 4                              # read again, clamped at 0


def test_cpu_times_reads_proc_stat_and_refuses_what_it_cannot_read(tmp_path):
    good = tmp_path / "stat"
    good.write_text("cpu  100 5 50 1000 20 3 7 2 0 0\ncpu0 50 2 25 500 10 1 3 1 0 0\n")
    assert threads._cpu_times(str(good)) == (100 + 5 + 50 + 3 + 7 + 2, 100 + 5 + 50 + 1000 + 20 + 3 + 7 + 2)
    bad = tmp_path / "bad"
    bad.write_text("intr 1 2 3\n")
    assert threads._cpu_times(str(bad)) is None
    assert threads._cpu_times(str(tmp_path / "missing")) is None
    short = tmp_path / "short"
    short.write_text("cpu 1 2 x\n")
    assert threads._cpu_times(str(short)) is None
    empty = tmp_path / "empty"
    empty.write_text("")
    assert threads._cpu_times(str(empty)) is None


@pytest.mark.skipif(not hasattr(threads.os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_its_own_load_afresh():
    """The parent's samples are not the child's: its process_time restarts near 0."""
    import os
    import time
    threads._own_load.sample()
    end = time.process_time() + 0.3
    while time.process_time() < end:                 # parent CPU that a child must not inherit
        pass
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                     # the child
        os.close(read)
        ok = threads._own_load.cpu <= time.process_time() and threads._own_load.average == 0.0
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    os.close(read)
    assert answer == b"1"


def test_a_managed_region_samples_its_own_load_on_leaving(monkeypatch):
    calls = []
    monkeypatch.setattr(threads._own_load, "sample", lambda: calls.append(1) or 0.0)

    @threads.managed
    def work():
        return len(calls)

    assert work() == 1 and len(calls) == 2


def _fit_and_predict(model, X, y, X_new):
    post = model.fit(X, y, optimize=False)
    return post.log_evidence, post.predict(X_new)


@pytest.mark.parametrize("case", ["VFE", "FITC", "SVGP-probit", "Laplace-FITC", "SVGP-softmax-K"])
def test_every_threaded_pass_gives_the_one_thread_bits(case, two_threads, monkeypatch):
    """Each method whose row passes qualify for block threads (N M^2 >= BULK_FLOPS, several
    blocks): the posterior's evidence and predictions (mean and variance, a threaded pass of
    their own) on two threads against one, to the bit."""
    rng = np.random.default_rng(5)
    n, m = 2600, 200
    X = rng.uniform(-3, 3, (n, 2))
    f = np.sin(X[:, 0]) + np.cos(1.3 * X[:, 1])
    assert n * m * m >= threads.BULK_FLOPS
    kernel = gd.kernels.Matern52(np.array([1.0, 1.2]), 1.0)
    inducing = gd.inducing.Fixed(X[:m])
    if case in ("VFE", "FITC"):
        likelihood, y = gd.likelihoods.Gaussian(0.1), f + 0.3 * rng.standard_normal(n)
        inference = getattr(gd.inference, case)(chunk_size=450)
    elif case == "SVGP-softmax-K":
        likelihood, y = gd.likelihoods.Categorical(3), np.digitize(f, [-0.5, 0.7]).astype(float)
        inference = gd.inference.SVGP(chunk_size=450)
    else:
        likelihood, y = gd.likelihoods.Bernoulli("probit"), (f > 0).astype(float)
        inference = (gd.inference.SVGP(chunk_size=450) if case == "SVGP-probit"
                     else gd.inference.Laplace(chunk_size=450))
    model = gd.Model(kernel, likelihood, inducing, inference)
    X_new = rng.uniform(-3, 3, (12000, 2))        # several prediction blocks too (one would get 2 BLAS threads)
    assert X_new.shape[0] > gd.chunks.default_chunk_size(X_new.shape[0], m)
    in_order, workers = gd.chunks._in_order, []

    def spy(block, count, n_workers):
        workers.append(n_workers)
        return in_order(block, count, n_workers)

    monkeypatch.setattr(gd.chunks, "_in_order", spy)
    out = {}
    for count in (1, 2):
        gd.set_num_threads(count)
        workers.clear()
        out[count] = _fit_and_predict(model, X, y, X_new)
        # The fit's first pass and the predictions' last one both ran on `count` threads.
        assert workers[0] == count and workers[-1] == count
    assert out[2][0] == out[1][0]
    for name in out[1][1]:
        assert np.array_equal(np.asarray(out[2][1][name]), np.asarray(out[1][1][name])), name


def test_blocks_run_in_the_callers_context(two_threads):
    """NumPy 2 keeps np.errstate in a context variable, which a new thread does not inherit: the
    blocks run in copies of the caller's context, so its errstate holds in them."""
    def fn(x):
        return (np.array([1.0]),), (np.array([np.geterr()["divide"] == "raise"] * x.shape[0]),)

    @threads.managed
    def run():
        with np.errstate(divide="raise"):
            return gd.chunks.map_rows(fn, (np.arange(40.0),), 4, width=10 ** 4)

    gd.set_num_threads(2)
    _, (raised,) = run()
    assert raised.all()


def test_block_threads_stay_within_the_memory_budget(monkeypatch):
    """No more threads than blocks, nor than BLOCK_WORKING_ARRAYS K_uf-sized arrays each fit in
    cache_bytes()."""
    monkeypatch.setattr(threads, "block_workers", lambda flops: 64)
    monkeypatch.setattr(gd.chunks, "cache_bytes", lambda: 2 ** 28)
    per_block = gd.chunks.BLOCK_WORKING_ARRAYS * 8 * 1024 * 1024
    assert gd.chunks._block_threads(1e12, 100, 1024, 1024) == 2 ** 28 // per_block == 2
    assert gd.chunks._block_threads(1e12, 100, 1024, 16) == 64
    assert gd.chunks._block_threads(1e12, 5, 1024, 16) == 5
    assert gd.chunks._block_threads(1e12, 1, 1024, 16) == 1
