"""BLAS threads of gpdsl's own work, under gpdsl's control (through threadpoolctl).

Most of a fit is loops of small products: EP/QP site sweeps (blocks of 16 sites), Pólya-Gamma c
passes, M x M algebra, L-BFGS-B's bookkeeping.  Multi-threaded OpenBLAS only loses there: its
threads wake, spin and wait on every call, and when the cores are shared they wait on each
other.  Measured on a 2-core machine with the default two OpenBLAS threads, the user guide's EP/xor
example took 136 s against 10.4 s with one thread (benchmarks/HISTORY.md, issue 13).

So every public entry point that computes (``Model.fit``, ``Model.evaluate``, the predictions
of a ``Posterior``) runs inside :func:`managed`, which sets the BLAS libraries to one thread
and restores them afterwards.  Only large passes (at least :data:`BULK_FLOPS`) run with more, in
:func:`bulk`, at the *bulk count*:

* ``gd.set_num_threads(n)`` if the user called it, else
* the BLAS thread count in force when the entry point was called (what ``OMP_NUM_THREADS`` /
  ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` or an enclosing
  ``threadpoolctl.threadpool_limits`` set; by default the number of cores), reduced to the
  cores that other processes leave free (the 1-minute load average less this process's own
  share of it, read once per entry, or the CPUs' busy time over the last
  :data:`RECENT_LOAD_WINDOW` seconds where that is lower: see :class:`_RecentLoad`; a core
  counts as free under :data:`IDLE_LOAD` of other load): with one of two cores busy, two-thread
  products ran 1.3-2.4x slower than one-thread ones.

The automatic count applies to the dense O(N^3) factorisations (exact, Laplace, VGP) and to
full predictive covariances, which are a few large BLAS calls.  The row-chunked O(N M^2) passes
(:func:`gpdsl.chunks.map_rows`) interleave their products with as much elementwise Numba work
(K_uf's exponentials, quadratures), and OpenBLAS's second thread, spinning between calls, made
them slower, not faster, even on an idle machine (issue 29, 2 cores, load 0.2-0.9, one thread
against two: VFE on sine 90,000 x 1 at M = 128 9.8 s CPU / 9.8 s wall against 24.7 / 12.5;
FITC-EP on twonorm 5.4 / 5.4 against 11.0 / 6.3; full-batch probit SVGP 10.2 / 10.2 against
30.6 / 15.5).  So a pass of several blocks runs its *blocks* on the bulk count of threads
instead (:func:`block_workers`), each block with one BLAS thread: each thread is busy through a
whole block, with nothing to wait for.  That needs the GIL released through a block: every
Numba kernel is compiled with ``nogil=True`` and the two level-3 products of the passes go
through :mod:`gpdsl.released_blas`.  One bound and gradient of a collapsed LMC at 10^5 rows
(M P = 768, 74 blocks, idle 2 cores): 6.1 s wall on one thread, 3.5 s on two (CPU 6.1 -> 6.6 s),
the same bits.  A pass of one block keeps one thread unless ``gd.set_num_threads`` asked for
more.

:func:`set_num_threads` also caps Numba's thread pool, so that a parallel Numba kernel, if one
is added, obeys the same setting (none uses ``parallel=True``).
"""
from __future__ import annotations

import functools
import math
import os
import threading
import time
from contextlib import contextmanager

from .checks import is_integer

# A map_rows pass of at least this many flops (about N M^2) may use bulk(); below it
# the wake-up of the BLAS threads costs more than they win.
BULK_FLOPS = 1e8

# Other processes' load (the 1-minute load average less this process's share) up to which a core
# still counts as free: an idle VM's load average sits at 0.2-0.6, and this project's 2-core
# machine showed 0.8-1.0 with half a core in softirq work, where two block threads still halved a
# VFE fit's wall time (90,000 rows, M = 128: 3.7 s against 7.2, CPU 6.4 against 7.2); a process
# busy on a core adds 1 on top of that.  With no share of its own, the count is the old rule's
# (the load average read whole, plus one for this process).
IDLE_LOAD = 1.0
# The load average lags a process that has ended by about a minute; where it would cost a thread,
# the CPUs' busy time over this many seconds is read too (Linux /proc/stat), and kept for
# RECENT_LOAD_REUSE seconds (see _RecentLoad).
RECENT_LOAD_WINDOW = 0.1
RECENT_LOAD_REUSE = 5.0

_requested = None                 # gd.set_num_threads(n); None = automatic
_state = threading.local()        # .bulk: bulk thread count of the active managed() region
_controller = None


def set_num_threads(n=None):
    """Set the number of threads gpdsl's large passes may use: the BLAS threads of its dense
    factorisations and of a row-chunked pass of one block, and the block threads (one BLAS
    thread each) of a row-chunked pass of several blocks (:func:`block_workers`).

    Parameters
    ----------
    n : int or None
        A positive integer, or None (the default) for automatic: the BLAS setting in force
        when gpdsl is called (environment variables, an enclosing
        ``threadpoolctl.threadpool_limits``), reduced to the cores other processes leave free
        (:data:`IDLE_LOAD`).  gpdsl's loops of small products use one thread either way.

    Raises
    ------
    ValueError
        If ``n`` is neither None nor a positive integer.
    """
    global _requested
    if n is not None and (not is_integer(n) or n < 1):
        raise ValueError(f"set_num_threads: n must be a positive integer or None, got {n!r}")
    _requested = None if n is None else int(n)
    import numba
    numba.set_num_threads(min(_requested or numba.config.NUMBA_NUM_THREADS, numba.config.NUMBA_NUM_THREADS))


def get_num_threads():
    """The number of BLAS threads gpdsl's large products would use if called now.

    Returns
    -------
    int
        Inside a running fit, that fit's bulk count; else ``set_num_threads``'s value, or the
        automatic count (the BLAS setting in force, capped by the cores and the free cores).
    """
    bulk = getattr(_state, "bulk", None)
    return bulk if bulk is not None else _bulk_count(_ambient_threads())


def _blas_controller():
    # Created on first use, when NumPy's and SciPy's BLAS libraries are loaded (gpdsl.linalg
    # imports scipy.linalg); threadpoolctl scans the loaded libraries once, here.
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController
        _controller = ThreadpoolController().select(user_api="blas")
    return _controller


def _ambient_threads():
    counts = [lib.num_threads for lib in _blas_controller().lib_controllers]
    return min(counts) if counts else 1


class _OwnLoad:
    """This process's share of the 1-minute load average: the same exponential average (Linux
    updates it every 5 s with weight exp(-5/60) on the old value) of this process's CPU rate
    (``process_time``, every thread), sampled when a :func:`managed` region is entered and
    left.  Without it a fit that had just run on both cores read its own load as the other
    processes' and took one thread: a 10^5-row LMC fit after one timed evaluation ran 254 s of
    wall on one core (load 1.1 at its start, all of it this process's).

    The CPU used between two samples counts as spent at an even rate over the interval, so work
    outside gpdsl followed by a pause (10 minutes busy, then 50 s idle) reads as more recent than
    it was, and another process's load then as less than it is, until the next sample.  A forked
    child starts afresh (its ``process_time`` restarts near 0; the parent's samples would make
    its rate negative).
    """

    def __init__(self, clock=time.monotonic, cpu_clock=time.process_time):
        self.clock, self.cpu_clock = clock, cpu_clock
        self.reset()

    def reset(self):
        # A new lock too: in a forked child, another thread of the parent may have held the old one.
        self.lock = threading.Lock()
        self.wall, self.cpu, self.average = self.clock(), self.cpu_clock(), 0.0

    def sample(self):
        with self.lock:
            wall, cpu = self.clock(), self.cpu_clock()
            elapsed = wall - self.wall
            if elapsed > 0.0:
                keep = math.exp(-elapsed / 60.0)
                self.average = keep * self.average + (1.0 - keep) * max(cpu - self.cpu, 0.0) / elapsed
                self.wall, self.cpu = wall, cpu
            return self.average


_own_load = _OwnLoad()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _own_load.reset())


def _cpu_times(path="/proc/stat"):
    """``(busy, total)`` CPU time of all cores in clock ticks (Linux), or None where unreadable."""
    try:
        with open(path) as stat:
            fields = stat.readline().split()
        ticks = [int(v) for v in fields[1:9]]    # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return None
    if len(ticks) < 8 or fields[0] != "cpu":
        return None
    total = sum(ticks)
    return total - ticks[3] - ticks[4], total


class _RecentLoad:
    """Other processes' load now: the cores' busy share over :data:`RECENT_LOAD_WINDOW` seconds
    (``/proc/stat``, softirq and steal included) times the cores, less this process's CPU rate over
    the same window; reused for :data:`RECENT_LOAD_REUSE` seconds.  The 1-minute load average
    still holds a process that ended a minute ago: a 10^5-row LMC fit started 80 s after another
    two-thread process read load 1.69, took one thread, and ran 73.4 s against 45.6-49.8 s on two.
    None where /proc/stat cannot be read (the load average alone decides there)."""

    def __init__(self, times=_cpu_times, clock=time.monotonic, cpu_clock=time.process_time, sleep=time.sleep):
        self.times, self.clock, self.cpu_clock, self.sleep = times, clock, cpu_clock, sleep
        self.reset()

    def reset(self):
        # A new lock too: in a forked child, another thread of the parent may have held the old one.
        self.lock, self.read_at, self.value = threading.Lock(), None, None

    def others(self, cores):
        with self.lock:
            now = self.clock()
            if self.read_at is not None and now - self.read_at < RECENT_LOAD_REUSE:
                return self.value
            first, cpu = self.times(), self.cpu_clock()
            self.sleep(RECENT_LOAD_WINDOW)
            second, own = self.times(), self.cpu_clock() - cpu
            self.value = None
            if first is not None and second is not None and second[1] > first[1]:
                busy = cores * (second[0] - first[0]) / (second[1] - first[1])
                self.value = max(0.0, busy - own / RECENT_LOAD_WINDOW)
            self.read_at = now
            return self.value


_recent_load = _RecentLoad()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _recent_load.reset())


def _bulk_count(ambient):
    own = _own_load.sample()
    if _requested is not None:
        return _requested
    cores = os.cpu_count() or 1
    try:
        # Cores the other processes leave free: a core counts as free under up to IDLE_LOAD of
        # other work.
        others = max(0.0, os.getloadavg()[0] - own)
        if math.floor(cores - others + IDLE_LOAD) < min(ambient, cores):
            # Only where the load average would cost a thread: it may hold an ended process.
            recent = _recent_load.others(cores)
            if recent is not None:
                others = min(others, recent)
        free = math.floor(cores - others + IDLE_LOAD)
    except (AttributeError, OSError):       # no load average on this platform (Windows)
        free = cores
    return max(1, min(ambient, cores, free))


@contextmanager
def limit(n):
    """Context manager: BLAS limited to ``n`` threads inside the block (a no-op without BLAS libraries).

    Parameters
    ----------
    n : int
        The thread count.
    """
    with _blas_controller().limit(limits=int(n)):
        yield


def managed(func):
    """Run ``func`` with one BLAS thread, remembering the bulk thread count for :func:`bulk`.

    Nested managed calls keep the outermost region's count (the inner one would read the one
    thread the outer one set).

    Parameters
    ----------
    func : callable
        The entry point to wrap (``Model.fit``, ``Posterior.predict``, ...).

    Returns
    -------
    callable
        ``func`` wrapped, with its name and docstring.
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if getattr(_state, "bulk", None) is not None:
            return func(*args, **kwargs)
        _state.bulk = _bulk_count(_ambient_threads())
        try:
            with limit(1):
                return func(*args, **kwargs)
        finally:
            _state.bulk = None
            _own_load.sample()
    return wrapper


def block_workers(flops):
    """The threads an in-memory row-chunked pass of ``flops`` runs its blocks on
    (:func:`gpdsl.chunks.map_rows`), each block with one BLAS thread.

    Inside a :func:`managed` region, a pass of at least :data:`BULK_FLOPS` flops gets the
    region's bulk count (automatic, or ``set_num_threads``'s); otherwise, and outside a region
    (where the user's BLAS setting is in force), one.  Unlike OpenBLAS's threads inside each
    product, block threads have no small calls to wake up for: a block is one slice of rows
    through every product and elementwise pass of the method, whose Numba kernels and BLAS
    calls release the GIL (:mod:`gpdsl.released_blas`).

    Parameters
    ----------
    flops : float
        The pass's work, about N M^2.

    Returns
    -------
    int
    """
    count = getattr(_state, "bulk", None)
    return 1 if count is None or flops < BULK_FLOPS else count


@contextmanager
def bulk(flops, automatic=True):
    """Context manager: raise BLAS to the region's bulk thread count for a large pass.

    Inside a :func:`managed` region, a pass of at least :data:`BULK_FLOPS` flops runs with the
    region's bulk count; otherwise BLAS is left as it is (one thread inside a region; the
    user's own setting outside one).

    Parameters
    ----------
    flops : float
        The pass's work, about N M^2.
    automatic : bool
        Whether the automatic count applies (dense factorisations); False for a row-chunked
        pass of one block, whose products run on one thread unless ``set_num_threads`` asked for
        more (see the module's docstring for the measurements; a pass of several blocks runs
        its blocks on threads instead, :func:`block_workers`).
    """
    count = getattr(_state, "bulk", None)
    if count is None or count == 1 or flops < BULK_FLOPS or not (automatic or _requested is not None):
        yield
        return
    with limit(count):
        yield
