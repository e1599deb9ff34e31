"""Checks of the data before any work: X and y (NumPy, pandas, xarray or Dask) and ``Model.fit``'s
keyword arguments, each refused with a message that names the argument; and the kind of targets
a likelihood models (:func:`target_kind`).

This module sits above :mod:`gpdsl.checks` (the checks of single values) and
:mod:`gpdsl.backends` (Dask and xarray detection), which it uses: the data checks need both,
and ``backends`` needs ``checks``, so putting them in either would make the two import each other.
"""
from __future__ import annotations

import numpy as np

from . import backends
from .checks import (as_float_array, check_bool, check_nonnegative_int, check_positive_int, check_seed,
                     check_square_sums_finite)
from .components import bind


def validate_inputs(X, name="X", n_features=None, lazy=False):
    """X as a finite float64 C-contiguous (N, D) array, or a ValueError/TypeError naming ``name``.

    Text, complex and ragged input is refused (:func:`gpdsl.checks.as_float_array`), and so are
    inputs so large that squared distances between rows overflow.  A Dask array (or an xarray
    object backed by one) is computed into memory, or with ``lazy=True`` checked lazily and
    returned as a float64 Dask array in row chunks (:func:`gpdsl.backends.validate_lazy_inputs`).

    Parameters
    ----------
    X : array_like, shape (N, D)
        Inputs: an array, nested list, pandas/xarray object or Dask array.
    name : str, default "X"
        The argument's name, for messages.
    n_features : int, optional
        D the model was fitted on, which X must match.
    lazy : bool, default False
        Keep a Dask-backed X as a Dask array (checked by one reduction) instead of computing it.

    Returns
    -------
    ndarray or dask.array.Array, shape (N, D)
        float64 (C-contiguous when in memory).

    Raises
    ------
    TypeError
        Text, complex numbers or other non-numbers.
    ValueError
        A ragged sequence, not 2-D, no rows or columns, a non-finite entry, the wrong number of
        features, or entries whose squared differences overflow float64.
    """
    if backends.is_dask(X):
        if lazy:
            return backends.validate_lazy_inputs(X, name, n_features)
        X = backends.materialize(X)
    X = as_float_array("", name, X)
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_points, n_features), got {X.ndim}-D with shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{name} must contain at least one row")
    if X.shape[1] == 0:
        raise ValueError(f"{name} must have at least one feature (column), got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} must be finite (contains NaN or inf)")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"{name} has {X.shape[1]} features but the model was fitted on {n_features}")
    check_square_sums_finite("", name, X)
    return np.ascontiguousarray(X)


def validate_targets(y, n, name="y"):
    """y as a finite float64 (n,) array, or a ValueError/TypeError naming ``name``.

    Booleans are accepted (labels); text, complex and ragged input is not, nor are targets
    whose squares overflow (the Gaussian evidence would not be finite).  A Dask-backed y is
    computed into memory.

    Parameters
    ----------
    y : array_like, shape (n,) or (n, 1)
        Targets, one per row of X; (n, 1) is flattened.
    n : int
        The number of rows of X.
    name : str, default "y"
        The argument's name, for messages.

    Returns
    -------
    ndarray, shape (n,)
        float64, C-contiguous.

    Raises
    ------
    TypeError
        Text, complex numbers or other non-numbers.
    ValueError
        A ragged sequence, not 1-D, a length other than ``n``, a non-finite entry, or targets
        whose squares overflow float64.
    """
    # The targets, O(N), are held in memory; only X's O(N M) work is spread over Dask's tasks.
    y = as_float_array("", name, backends.materialize(y))
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D with one target per row of X, got shape {y.shape}")
    if y.shape[0] != n:
        raise ValueError(f"len({name}) = {y.shape[0]} does not match len(X) = {n}")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{name} must be finite (contains NaN or inf)")
    check_square_sums_finite("", name, y)
    return np.ascontiguousarray(y)


def validate_offset(offset, n, inference=None, name="offset"):
    """A per-row offset of the latent input as a finite float64 (n,) array, or None.

    Parameters
    ----------
    offset : array_like of shape (n,), or None
        The offset o of each row: the likelihood sees f + o (log exposure for counts).
    n : int
        The number of rows of X.
    inference : gpdsl.inference.Inference, optional
        The method, which must support an offset (``supports_offset``).
    name : str, default "offset"
        The argument's name, for messages.

    Returns
    -------
    ndarray of shape (n,), or None

    Raises
    ------
    TypeError, ValueError
        Not numeric, of another length, not finite, or a method without offsets.
    """
    if offset is None:
        return None
    if inference is not None and not inference.supports_offset:
        raise ValueError(f"{name}: {type(inference).__name__} does not take a per-row offset")
    offset = validate_targets(offset, n, name)
    return offset


def check_fit_arguments(optimize, fixed, restarts, seed, max_iter, progress, callback):
    """``Model.fit``'s keyword arguments checked, or a ValueError/TypeError naming the argument.

    Parameters
    ----------
    optimize, fixed, restarts, seed, max_iter, progress, callback : object
        As :meth:`gpdsl.Model.fit` takes them.

    Returns
    -------
    tuple of str
        ``fixed`` as a tuple of names.

    Raises
    ------
    TypeError, ValueError
        An argument of the wrong type or out of range.
    """
    check_bool("fit", "optimize", optimize, error=TypeError)
    # A truthy string such as "no" would otherwise switch the printing on.
    check_bool("fit", "progress", progress, error=TypeError)
    if callback is not None and not callable(callback):
        raise TypeError(f"fit: callback must be None or a callable taking one dict, got {callback!r}")
    if isinstance(fixed, str):
        fixed = (fixed,)
    try:
        fixed = tuple(fixed)
    except TypeError as err:
        raise TypeError(f"fit: fixed must be a parameter name or a sequence of names, got {fixed!r}") from err
    if not all(isinstance(name, str) for name in fixed):
        raise TypeError(f"fit: fixed must hold parameter names (strings), got {fixed!r}")
    check_nonnegative_int("fit", "restarts", restarts)
    check_seed("fit", seed)
    check_positive_int("fit", "max_iter", max_iter)
    return fixed


def target_kind(likelihood):
    """What kind of targets a likelihood models: its class attribute ``target_kind`` (``"real"``,
    ``"binary"``, ``"count"`` or ``"categorical"``), or for a likelihood that declares none, ``"real"`` for Gaussian
    observation noise (``observation_noise``), else ``"binary"`` where its predictive is ``p``
    (p(y* = 1)) and ``"real"`` otherwise.  A likelihood whose rows differ and that declares no
    one kind (:class:`gpdsl.likelihoods.PerOutput` of parts of several kinds, which defines
    ``for_rows``) has none: None, and each output's kind is that of ``for_rows(X_p)`` with X_p
    rows of that output.  The CLI's held-out scores and the plots are chosen by it.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        A likelihood (bound or not).

    Returns
    -------
    str or None
        None for a likelihood of rows of several kinds.
    """
    kind = getattr(likelihood, "target_kind", None)
    if kind is not None:
        return kind
    if likelihood.observation_noise:       # Gaussian noise: the posterior adds it; no predictive of its own
        return "real"
    if likelihood.defines("for_rows"):
        # Its operations are its rows' (the declared PerOutput refuses them): no probe of one row.
        return None
    probe = bind(likelihood, {}, "likelihood").predictive(np.zeros(1), np.ones(1))
    return "binary" if "p" in probe else "real"


__all__ = ["validate_inputs", "validate_targets", "validate_offset", "check_fit_arguments", "target_kind"]
