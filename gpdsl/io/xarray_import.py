"""xarray for gpdsl's results, without importing dask until a Dask array can exist.

xarray asks, for every array it wraps, whether it is a Dask array, and to answer it imports dask
if dask is installed (``xarray.namedarray.pycompat.array_type("dask")``): 245 modules and 0.3 to
2 s on the first ``Posterior.predict`` of a process that never uses Dask.  No object can be a Dask
array before ``dask.array`` has been imported, so until then xarray's record of the dask module
can answer as for a missing dask; :func:`xarray` installs a record that does, and that hands over
to xarray's own as soon as ``dask.array`` is in ``sys.modules``.  The record is xarray's private
cache: where a future xarray lacks it, nothing is installed and xarray imports dask as before.

xarray also asks dask itself (``dask.base.is_dask_collection``) about each array it turns into a
dimension coordinate's index, unless that array is already a pandas Index: gpdsl's result
coordinates are built as pandas indexes (:func:`coordinate`) for that reason.
"""
from __future__ import annotations

import sys


class _DeferredDaskRecord:
    """Stands in for xarray's ``DuckArrayModule("dask")`` while ``dask.array`` is not imported:
    no module, no array types, not available, version 0.  Once it is, xarray's real record
    replaces this one in xarray's cache and answers."""

    def __init__(self, cache, record_type, version):
        self._cache, self._record_type, self._version = cache, record_type, version

    def __getattr__(self, name):
        if "dask.array" in sys.modules:
            real = self._record_type("dask")
            self._cache["dask"] = real
            return getattr(real, name)
        absent = {"module": None, "type": (), "available": False, "version": self._version}
        if name not in absent:
            raise AttributeError(name)
        return absent[name]


def coordinate(values):
    """A result coordinate's values as a pandas index (module docstring).

    Parameters
    ----------
    values : array_like or range
        ``range(n)`` for the ``obs`` rows (a RangeIndex), or the labels.

    Returns
    -------
    pandas.Index
    """
    import pandas as pd
    return pd.Index(values)


def xarray():
    """The xarray module, with xarray's record of dask deferred (module docstring).

    Returns
    -------
    module
        ``xarray``.
    """
    import xarray as xr

    if "dask.array" not in sys.modules:
        try:
            from packaging.version import Version
            from xarray.namedarray import pycompat
            cache, record_type = pycompat._cached_duck_array_modules, pycompat.DuckArrayModule
        except (ImportError, AttributeError):
            return xr
        cache.setdefault("dask", _DeferredDaskRecord(cache, record_type, Version("0.0.0")))
    return xr
