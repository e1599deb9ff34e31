"""Row-chunked map-reduce: every O(N M^2) pass in gpdsl is written through :func:`map_rows`.

A pass is a pure function of its row blocks that returns ``(summed, rows)``: ``summed`` is a
tuple of partial sums (arrays, floats or dicts of arrays) added across chunks, ``rows`` a tuple
of per-row arrays concatenated in order.  Because a chunk depends on nothing but its row blocks
(and on broadcast inputs the function closes over, which no chunk changes), the same function
runs on NumPy slices in this process or, when a row input is a Dask array, as one Dask task per
row block with a tree reduction of the partial sums, on whatever scheduler is active (threads by
default, a ``distributed.Client`` when one exists).
"""
import collections
import contextlib
import contextvars
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import threads
from .backends import is_dask

# Aim for chunk blocks of about 2**20 doubles (8 MB) of K_uf: big enough for BLAS-3 speed, small
# enough that a block's elementwise passes (K_uf's exp, the squares of A) stream less memory.
# Against 2**21, one thread: VFE on 90,000 sine rows at M = 128 9.1 -> 8.2 s CPU, minibatch SVGP's
# final full-data pass at N = 10^6 2.15 -> 1.9 s, PGPR k-means on twonorm 2.24 -> 2.30 s.
_TARGET_BLOCK = 2 ** 20

# The bounds of a method's budget for per-block arrays kept between passes (:func:`cache_bytes`).
CACHE_BYTES_MIN, CACHE_BYTES_MAX = 2 ** 28, 2 ** 31

# Working arrays of one block in flight on a thread, in K_uf blocks (chunk rows x M doubles): a
# K-class SVGP block holds U = R_k^T A for its K classes besides K_uf and A.  With 2**20-double
# blocks, 128 MB a block: 2 threads within the least cache budget, 16 within the largest.
BLOCK_WORKING_ARRAYS = 16


def cache_bytes():
    """The budget of a method's per-block arrays kept between passes at fixed hyperparameters
    (A = L^-1 K_uf, and K_uf where both fit): an eighth of the memory available now (Linux's
    MemAvailable, else the free pages; and of the address-space limit, if one is set), within
    [:data:`CACHE_BYTES_MIN`, :data:`CACHE_BYTES_MAX`] (256 MB to 2 GB).  Beyond it the blocks are
    formed again at every pass.  A fixed 256 MB left PGPR's c passes at N = 10^6, M = 60 (A is
    480 MB) forming K_uf and A anew each time: 26 of the 41 s of the finish of
    ``fit(subsample=5000)`` on twonorm.

    Returns
    -------
    int
        Bytes.
    """
    limits = []
    try:
        with open("/proc/meminfo") as f:
            limits += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError):
        pass
    if not limits and hasattr(os, "sysconf"):
        try:
            limits.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError):
            pass
    try:
        import resource                      # not on Windows
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    except ImportError:
        pass
    budget = min(limits) // 8 if limits else CACHE_BYTES_MIN
    return int(min(max(budget, CACHE_BYTES_MIN), CACHE_BYTES_MAX))


def default_chunk_size(n, m):
    """Rows per block of a row-chunked pass: about 2**20 doubles of K_uf per block.

    Parameters
    ----------
    n : int
        Number of rows N.
    m : int
        Number of inducing points M (the block's width).

    Returns
    -------
    int
        ``2**20 // M`` clipped to [256, N] (at least 256).
    """
    return int(max(256, min(n, _TARGET_BLOCK // max(m, 1))))


def row_slices(n, chunk_size):
    """Consecutive row slices covering ``range(n)``.

    Parameters
    ----------
    n : int
        Number of rows.
    chunk_size : int
        Rows per slice (the last one may be shorter).

    Returns
    -------
    list of slice
    """
    return [slice(i, min(i + chunk_size, n)) for i in range(0, n, chunk_size)]


def add_partial(a, b):
    """a + b for partial results; dicts (of gradients) are added key by key into a new dict.

    Parameters
    ----------
    a, b : float, ndarray or dict of str to ndarray
        Two partial results of the same kind; for dicts, a key of only one of them is kept.

    Returns
    -------
    float, ndarray or dict
        The sum (a new dict for dicts; ``a`` is not changed).
    """
    if isinstance(a, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = out[k] + v if k in out else v
        return out
    return a + b


def _add_sums(a, b):
    return tuple(add_partial(x, z) for x, z in zip(a, b))


class _TreeSum:
    """Pairwise (tree) sum of the blocks' partial sums, pushed one at a time in block order.

    A binary counter: equal-sized subtrees are merged as soon as both exist, so at most
    log2(blocks) partials are held, and the tree is the same whether the partials are arrays
    (in memory) or Dask delayed objects (``add`` then builds the reduction's tasks): a Dask pass
    with the same blocks as an in-memory one adds in the same order and gives the same bits."""

    def __init__(self, add=_add_sums):
        self.add, self.stack = add, []

    def push(self, value):
        level = 0
        while self.stack and self.stack[-1][0] == level:
            value, level = self.add(self.stack.pop()[1], value), level + 1
        self.stack.append((level, value))

    def total(self):
        total = None
        for _, value in reversed(self.stack):
            total = value if total is None else self.add(value, total)
        return total


def _stack(rows):
    return tuple(np.concatenate(parts) for parts in zip(*rows)) if rows and rows[0] else ()


def is_chunked(rows):
    """Whether some array of ``rows`` is a Dask array (or Dask-backed xarray object).

    Parameters
    ----------
    rows : sequence of arrays
        Row-aligned arrays, first axis N each.

    Returns
    -------
    bool
    """
    return any(is_dask(a) for a in rows)


def map_rows(fn, rows, chunk_size, width=0, carried=None, keep=False):
    """Apply the pure function ``fn(*row_blocks) -> (summed, per_row)`` over row blocks of
    ``rows``; sum ``summed`` across blocks, concatenate ``per_row``.

    Parameters
    ----------
    fn : callable
        Called with one block of each array of ``rows`` (in order), then, with ``carried``, that
        block's carried item.  Returns ``(summed, per_row)``: a tuple of partial sums and a tuple
        of (block rows,) arrays; with ``keep``, ``(summed, per_row, kept)``.  Pure: blocks may
        run at once on threads (or Dask workers), so it changes nothing it did not create.
    rows : sequence of arrays
        Row-aligned arrays, first axis N each: NumPy arrays, or Dask arrays in row chunks (one
        chunk across any further axis).  With any Dask array, the blocks are the first Dask
        array's row chunks, every pass is one task per block and the partial sums are added in a
        tree reduction; otherwise blocks of ``chunk_size`` rows are sliced here.
    chunk_size : int
        Rows per block of in-memory input.
    width : int
        M of a pass whose blocks do O(rows M^2) BLAS work: an in-memory pass of more than one
        block and ``N width^2`` flops at least :data:`gpdsl.threads.BULK_FLOPS`, inside a fit or
        prediction, runs its blocks on :func:`gpdsl.threads.block_workers` threads, each with
        one BLAS thread (the results are the one-thread pass's to the bit); a pass of one block
        runs with the BLAS thread count ``gd.set_num_threads`` asked for
        (:func:`gpdsl.threads.bulk`; one thread without it, as measured faster there); 0 keeps
        one thread.  A Dask pass is parallel over its tasks.
    carried : list or None
        One item per block from an earlier pass's ``kept`` (what a block may reuse, such as
        L^-1 K_uf), or None.
    keep : bool
        Return the blocks' ``kept`` items as a third result: a list, of Dask delayed objects for
        Dask input (persisted where their blocks were computed: on the workers of a
        ``distributed.Client``), for a later pass's ``carried``.

    Returns
    -------
    (summed, per_row) or (summed, per_row, kept)
        ``summed`` the tuple of totals; ``per_row`` a tuple of (N, ...) NumPy arrays.
    """
    if is_chunked(rows):
        total, stacked, kept = _map_rows_dask(fn, rows, carried, keep)
    else:
        n = rows[0].shape[0]
        slices = row_slices(n, chunk_size)

        def block(i):
            return fn(*(tuple(a[slices[i]] for a in rows) + ((carried[i],) if carried is not None else ())))

        tree, parts, kept = _TreeSum(), [], []
        flops = float(n) * width * width
        workers = _block_threads(flops, len(slices), chunk_size, width)
        with contextlib.ExitStack() as region:
            if workers == 1:
                region.enter_context(threads.bulk(flops, automatic=False))
            for out in _in_order(block, len(slices), workers):
                tree.push(out[0])
                parts.append(out[1])
                kept.append(out[2] if keep else None)
        total, stacked = tree.total(), _stack(parts)
    return (total, stacked, kept) if keep else (total, stacked)


def _block_threads(flops, blocks, chunk_size, width):
    """Threads for an in-memory pass of ``blocks`` blocks of ``chunk_size`` rows:
    :func:`gpdsl.threads.block_workers`, and no more than the blocks, nor than keep the blocks in
    flight (:data:`BLOCK_WORKING_ARRAYS` K_uf-sized arrays each) within :func:`cache_bytes`."""
    workers = threads.block_workers(flops) if blocks > 1 else 1
    if workers == 1:
        return 1
    per_block = BLOCK_WORKING_ARRAYS * 8.0 * chunk_size * max(width, 1)
    return int(max(1, min(workers, blocks, cache_bytes() // per_block)))


def _in_order(block, count, workers):
    """``block(i)`` for i in range(count), yielded in order: called here with one worker, else run
    on ``workers`` threads with at most 2 ``workers`` blocks submitted ahead of the one yielded
    (``workers`` of them running, the rest finished or not yet started: so that the blocks held
    at once stay few).  Each block runs in a copy of the caller's context (its ``np.errstate``,
    for one).  The results, and so every sum of them, are the same as in order on one thread;
    the first block that raises stops the rest and re-raises."""
    if workers == 1:
        for i in range(count):
            yield block(i)
        return
    context = contextvars.copy_context()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="gpdsl-rows")
    try:
        pending = collections.deque()
        for i in range(count):
            # A context is entered by one thread at a time: each block gets its own copy.
            pending.append(pool.submit(context.copy().run, block, i))
            if len(pending) > 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def row_blocks(rows):
    """The row blocks of row-aligned arrays, some of them Dask arrays.

    Parameters
    ----------
    rows : sequence of arrays
        Row-aligned arrays, first axis N each, at least one a Dask array; the first Dask array's
        row chunks define the blocks (the other Dask arrays are rechunked to them).

    Returns
    -------
    blocks : list of tuple
        One entry per block: a tuple with one item per array of ``rows``, a Dask delayed object
        for a Dask array, a NumPy slice for an in-memory one.
    sizes : tuple of int
        The blocks' row counts.
    """
    lead = next(a for a in rows if is_dask(a))
    sizes = lead.chunks[0]
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    columns = []
    for a in rows:
        if is_dask(a):
            a = a.rechunk((sizes,) + tuple(-1 for _ in a.shape[1:]))
            columns.append(list(a.to_delayed().reshape(len(sizes), -1)[:, 0]))
        else:
            columns.append([a[bounds[i]:bounds[i + 1]] for i in range(len(sizes))])
    return list(zip(*columns)), sizes


def _map_rows_dask(fn, rows, carried, keep):
    import dask

    blocks, _ = row_blocks(rows)
    task = dask.delayed(fn, pure=False)
    outs = [task(*b, *((carried[i],) if carried is not None else ())) for i, b in enumerate(blocks)]
    if keep:
        # The blocks' results stay where they were computed (a distributed worker's memory, or
        # this process's with the local schedulers) for the next pass to take as carried items.
        outs = list(dask.persist(*outs))
    # Tree reduction: no task adds more than two partial sums, in the in-memory pass's order.
    tree = _TreeSum(dask.delayed(_add_sums, pure=False))
    for o in outs:
        tree.push(o[0])
    total, parts = dask.compute(tree.total(), [o[1] for o in outs])
    return total, _stack(parts), [o[2] for o in outs] if keep else None


def lazy_rows(fn, rows, names):
    """Per-row outputs of ``fn`` over the row blocks of ``rows`` as lazily evaluated Dask arrays.

    Parameters
    ----------
    fn : callable
        ``fn(*row_blocks) -> dict`` of (block rows,) float arrays, keys ``names``.
    rows : sequence of arrays
        Row-aligned arrays, at least one a Dask array (see :func:`map_rows`).
    names : sequence of str
        The keys of ``fn``'s dicts.

    Returns
    -------
    dict of dask.array.Array
        name -> (N,) array; one task per block computes every name's block.
    """
    import dask
    import dask.array as da

    blocks, sizes = row_blocks(rows)
    task = dask.delayed(fn, pure=False)
    outs = [task(*b) for b in blocks]
    return {name: da.concatenate([da.from_delayed(o[name], shape=(size,), dtype=float)
                                  for o, size in zip(outs, sizes)]) for name in names}
