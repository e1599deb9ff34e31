"""Dask inputs: detection without importing Dask, and the lazy form of the input checks.

``import gpdsl`` never imports Dask.  An object is taken for a Dask array when its class comes
from a ``dask`` module (so Dask is already imported by whoever made it), and an xarray object
for a Dask-backed one when its ``.data`` is such an array.  Only then is ``dask`` imported here.
"""
from __future__ import annotations

import numpy as np


def is_dask(x):
    """Whether ``x`` is a Dask array or an xarray DataArray (or Variable) whose data is one.

    Parameters
    ----------
    x : object
        Anything; Dask is not imported to tell.

    Returns
    -------
    bool
    """
    if type(x).__module__.startswith("dask"):
        return True
    return type(x).__module__.startswith("xarray") and type(getattr(x, "data", None)).__module__.startswith("dask")


def dask_array(x):
    """The Dask array behind ``x``.

    Parameters
    ----------
    x : dask.array.Array or xarray.DataArray
        A Dask array, or an xarray object backed by one.

    Returns
    -------
    dask.array.Array
    """
    return x if type(x).__module__.startswith("dask") else x.data


def materialize(x):
    """``x`` computed into memory (a NumPy array) if it is Dask-backed, else ``x`` as it is.

    Parameters
    ----------
    x : object
        An array, possibly Dask-backed.

    Returns
    -------
    ndarray or object
    """
    return np.asarray(dask_array(x)) if is_dask(x) else x


def validate_lazy_inputs(X, name, n_features=None):
    """A Dask-backed X checked as :func:`gpdsl.inputs.validate_inputs` checks NumPy input.

    Shape and dtype are checked from the metadata; finiteness and the overflow bound of
    :func:`gpdsl.checks.check_square_sums_finite` from one reduction over the chunks (the
    active scheduler computes it).

    Parameters
    ----------
    X : dask.array.Array or Dask-backed xarray.DataArray, shape (N, D)
        The inputs, with known chunk sizes.
    name : str
        The argument's name, for messages.
    n_features : int, optional
        D the model was fitted on, which X must match.

    Returns
    -------
    dask.array.Array, shape (N, D)
        float64, in row chunks with one chunk across the features.

    Raises
    ------
    TypeError
        If X is complex or not numeric.
    ValueError
        If X is not 2-D, has unknown chunk sizes, no rows or features, the wrong number of
        features, a non-finite entry, or entries whose squares overflow float64.
    """
    import dask
    import dask.array as da
    from .checks import check_square_bound
    X = dask_array(X)
    kind = X.dtype.kind
    if kind == "c":
        raise TypeError(f"{name} must be real, got a complex array")
    if kind not in "biuf":
        raise TypeError(f"{name} must be a numeric array, got a Dask array of dtype {X.dtype}")
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_points, n_features), got {X.ndim}-D with shape {X.shape}")
    if any(np.isnan(c) for c in X.chunks[0]) or np.isnan(X.shape[1]):
        raise ValueError(f"{name} has unknown chunk sizes; call compute_chunk_sizes() on it first")
    if X.shape[0] == 0:
        raise ValueError(f"{name} must contain at least one row")
    if X.shape[1] == 0:
        raise ValueError(f"{name} must have at least one feature (column), got shape {X.shape}")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"{name} has {X.shape[1]} features but the model was fitted on {n_features}")
    # One chunk across the features: a row block is then one task's whole input.
    X = X.astype(float).rechunk({1: -1})
    finite, peak, low = dask.compute(da.isfinite(X).all(), X.max(), X.min())
    if not finite:
        raise ValueError(f"{name} must be finite (contains NaN or inf)")
    check_square_bound("", name, max(float(peak), -float(low), 0.0), X.size)
    return X
