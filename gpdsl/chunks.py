"""Row-chunked map-reduce: every O(N M^2) pass in gpdsl is written through :func:`map_reduce`.

A pass is a pure function of one row slice that returns ``(summed, rows)``: ``summed`` is a
tuple of partial sums (arrays, floats or dicts of arrays) added across chunks, ``rows`` a tuple
of per-row arrays concatenated in order.  Because a chunk depends on nothing but its rows and
broadcast inputs, the same function can later be mapped over Dask workers.
"""
import numpy as np

from . import threads

# Aim for chunk blocks of about 2**21 doubles (16 MB) of K_uf: big enough for BLAS-3 speed,
# small enough to stay in cache-friendly memory at N = 10^5..10^6.
_TARGET_BLOCK = 2 ** 21


def default_chunk_size(n, m):
    return int(max(256, min(n, _TARGET_BLOCK // max(m, 1))))


def row_slices(n, chunk_size):
    return [slice(i, min(i + chunk_size, n)) for i in range(0, n, chunk_size)]


def add_partial(a, b):
    """a + b for partial results; dicts (of gradients) are added key by key into a new dict."""
    if isinstance(a, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = out[k] + v if k in out else v
        return out
    return a + b


def map_reduce(fn, n, chunk_size, width=0):
    """Apply ``fn(slice) -> (summed, rows)`` over row chunks; sum ``summed``, concatenate ``rows``.

    ``width``: M of a pass whose chunks do O(rows M^2) BLAS work; with ``n * width**2`` flops at
    least :data:`gpdsl.threads.BULK_FLOPS` the pass runs with the bulk BLAS thread count
    (:func:`gpdsl.threads.bulk`); 0 keeps one thread (loops of small products).
    """
    total, rows = None, []
    with threads.bulk(float(n) * width * width):
        for slc in row_slices(n, chunk_size):
            summed, per_row = fn(slc)
            total = summed if total is None else tuple(add_partial(a, b) for a, b in zip(total, summed))
            rows.append(per_row)
    stacked = tuple(np.concatenate(parts) for parts in zip(*rows)) if rows and rows[0] else ()
    return total, stacked
