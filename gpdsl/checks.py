"""Argument checks shared by the declarative components and ``Model.fit``, and their value equality.

Each raises an error that names the owner (class or function), the argument and the value.
Python and NumPy scalars are accepted alike; ``True`` and ``False`` are not numbers here.
"""
from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np


def is_integer(value):
    """Whether ``value`` is an int or NumPy integer, not a bool.

    Parameters
    ----------
    value : object
        Anything.

    Returns
    -------
    bool
    """
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_number(value):
    """Whether ``value`` is a real int/float or NumPy scalar, not a bool.

    Parameters
    ----------
    value : object
        Anything.

    Returns
    -------
    bool
    """
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def check_bool(owner, name, value, error=ValueError):
    """Raise unless ``value`` is True or False (a NumPy bool included).

    Parameters
    ----------
    owner : str
        The class or function the value is given to, for messages.
    name : str
        The argument's name, for messages.
    value : object
        The value to check.
    error : type of Exception, default ValueError
        The exception raised.

    Raises
    ------
    ValueError
        (or ``error``) If ``value`` is not a bool.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise error(f"{owner}: {name} must be True or False, got {value!r}")


class IntegerTypeError(TypeError, ValueError):
    """A value that must be an integer is of another type (2.0, True, None): a TypeError, as
    scikit-learn's parameter validation raises for a wrong type (its ``InvalidParameterError`` is
    both too), and a ValueError, which gpdsl's integer checks raised before and callers catch."""


def check_positive_int(owner, name, value):
    """Raise unless ``value`` is an integer >= 1 (not a bool).

    Parameters
    ----------
    owner : str
        The class or function the value is given to, for messages.
    name : str
        The argument's name, for messages.
    value : object
        The value to check.

    Raises
    ------
    IntegerTypeError
        If ``value`` is not an integer (a TypeError and a ValueError).
    ValueError
        If it is an integer below 1.
    """
    if not is_integer(value):
        raise IntegerTypeError(f"{owner}: {name} must be a positive integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")


def check_positive_number(owner, name, value):
    """Raise unless ``value`` is a finite real number > 0 (not a bool).

    Parameters
    ----------
    owner : str
        The class or function the value is given to, for messages.
    name : str
        The argument's name, for messages.
    value : object
        The value to check.

    Raises
    ------
    ValueError
        If ``value`` is not a positive finite number.
    """
    if not is_number(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{owner}: {name} must be a positive finite number, got {value!r}")


def check_nonnegative_int(owner, name, value):
    """Raise unless ``value`` is an integer >= 0 (not a bool).

    Parameters
    ----------
    owner : str
        The class or function the value is given to, for messages.
    name : str
        The argument's name, for messages.
    value : object
        The value to check.

    Raises
    ------
    ValueError
        If ``value`` is not a non-negative integer.
    """
    if not is_integer(value) or value < 0:
        raise ValueError(f"{owner}: {name} must be a non-negative integer, got {value!r}")


def check_seed(owner, value):
    """Raise unless ``value`` is a seed for ``np.random.default_rng``.

    A seed is a non-negative integer, or None for fresh entropy.

    Parameters
    ----------
    owner : str
        The class or function the seed is given to, for messages.
    value : object
        The seed.

    Raises
    ------
    ValueError
        If ``value`` is neither None nor a non-negative integer.
    """
    if value is not None and (not is_integer(value) or value < 0):
        raise ValueError(f"{owner}: seed must be a non-negative integer or None, got {value!r}")


def output_indices(owner, X, output_count):
    """The output index of each row of a multi-output input array: its last column, which holds
    integer-valued floats in 0..P-1 (the long layout of :mod:`gpdsl.multioutput`).

    Parameters
    ----------
    owner : str
        The class or function that reads the column, for messages.
    X : ndarray, shape (n, D + 1)
        Inputs whose last column is the output index.
    output_count : int
        The number of outputs P.

    Returns
    -------
    ndarray of intp, shape (n,)

    Raises
    ------
    ValueError
        If X is not 2-D, or an entry of its last column is not an integer in 0..P-1 (the first
        such row and value are named).
    """
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] < 1:
        raise ValueError(f"{owner}: X must be a 2-D array whose last column is the output index, got shape "
                         f"{X.shape}")
    column = X[:, -1]
    index = np.zeros(column.shape, dtype=np.intp)
    valid = np.isfinite(column) & (column == np.round(column)) & (column >= 0) & (column < output_count)
    if not np.all(valid):
        row = int(np.flatnonzero(~valid)[0])
        raise ValueError(f"{owner}: the last column of X is the output index and must hold integers 0..{output_count - 1} "
                         f"(one per output), got {float(column[row])!r} at row {row}")
    index[:] = column
    return index


def _first(a, test):
    """``(v,)`` for the first element v of the array ``a`` that passes ``test``, or None (the tuple
    keeps an element that is itself None apart from "no such element")."""
    return next(((v,) for v in a.flat if test(v)), None)


def _is_text(v):
    return isinstance(v, (str, bytes, np.str_, np.bytes_))


def _is_complex(v):
    return isinstance(v, numbers.Complex) and not isinstance(v, numbers.Real)


def _is_bool(v):
    return isinstance(v, (bool, np.bool_))


def as_float_array(owner, name, value, *, allow_bool=True, expected="a numeric array"):
    """``value`` as a float ndarray, refusing what NumPy would coerce silently.

    ``np.asarray(value, dtype=float)`` parses numeric text (``"0.1"``), drops the imaginary
    part of complex numbers (with only a warning) and turns ``True`` into 1.0; each of these
    hides a mistake in the caller's data, so each is an error here.

    Parameters
    ----------
    owner : str
        The class or function the value is given to, for messages; ``""`` for none.
    name : str
        The argument's name, for messages.
    value : object
        A number, a (nested) sequence of numbers or an array.
    allow_bool : bool
        Whether booleans count as numbers (data such as 0/1 labels: yes; hyperparameters: no).
    expected : str
        What ``value`` should have been, for messages.

    Returns
    -------
    numpy.ndarray
        ``value`` as float64 (not copied when it already is).

    Raises
    ------
    TypeError
        Text, complex numbers, booleans where they are not allowed, or other non-numbers.
    ValueError
        A ragged nested sequence (rows of different lengths).
    """
    prefix = f"{owner}: " if owner else ""
    try:
        a = np.asarray(value)
    except ValueError as err:       # NumPy refuses ragged nested sequences
        raise ValueError(f"{prefix}{name} must be a rectangular array, got a ragged nested sequence "
                         f"(rows of different lengths): {err}") from err
    kind = a.dtype.kind
    if kind == "O":
        # An object array (mixed lists, a pandas object column) is judged by its elements, since
        # astype(float) would parse any numeric text among them.
        for test, element_kind in ((_is_text, "U"), (_is_complex, "c"), (_is_bool, "b")):
            if _first(a, test) is not None:
                kind = element_kind
                break
    if kind in "US":
        example = str(a.flat[0] if a.dtype.kind in "US" else _first(a, _is_text)[0])
        raise TypeError(f"{prefix}{name} must be {expected}, got text (e.g. {example!r}, dtype "
                        f"{a.dtype}); numbers given as text are not parsed: convert them with float(), "
                        "and encode class labels as numbers (e.g. 0/1)")
    if kind == "c":
        got = "a complex array" if a.ndim else f"a complex number {value!r}"
        raise TypeError(f"{prefix}{name} must be real, got {got}")
    if kind == "b" and not allow_bool:
        raise TypeError(f"{prefix}{name} must be {expected}, got {value!r} (True and False are not numbers here)")
    if kind not in "biufO":
        raise TypeError(f"{prefix}{name} must be {expected}, got {type(value).__name__} of dtype {a.dtype}")
    # astype(float) would make None a NaN and call __float__ on anything that has one.
    bad = _first(a, lambda v: not isinstance(v, numbers.Real)) if kind == "O" else None
    if bad is not None:
        got = f"{type(value).__name__} holding {type(bad[0]).__name__} {bad[0]!r}" if a.ndim else repr(value)
        raise TypeError(f"{prefix}{name} must be {expected}, got {got}")
    return np.asarray(a, dtype=float)


def check_square_sums_finite(owner, name, a):
    """Raise unless sums of squared differences of the entries of ``a`` stay finite in float64.

    Squared distances between rows of X (the kernels, k-means) and sums of squared targets
    (the Gaussian evidence) overflow to inf when the entries are large enough, and inf - inf
    then turns into NaN far from the cause.  ``(2 max|a|)^2 * a.size`` bounds every such sum.

    Parameters
    ----------
    owner : str
        The class or function ``a`` is given to, for messages; ``""`` for none.
    name : str
        The argument's name, for messages.
    a : numpy.ndarray
        Finite float values.

    Raises
    ------
    ValueError
        The bound overflows: the message gives the largest magnitude and suggests rescaling.
    """
    # max and -min rather than max(abs(a)): no temporary copy of a large X.
    check_square_bound(owner, name, float(max(np.max(a, initial=0.0), -np.min(a, initial=0.0))), a.size)


def check_square_bound(owner, name, peak, size):
    """:func:`check_square_sums_finite` from an array's largest magnitude and number of entries.

    Used where the array is lazy (a Dask array's two numbers come from one reduction).

    Parameters
    ----------
    owner : str
        The class or function the array is given to, for messages; ``""`` for none.
    name : str
        The argument's name, for messages.
    peak : float
        The largest magnitude max |a|.
    size : int
        The number of entries of the array.

    Raises
    ------
    ValueError
        If ``(2 peak)^2 * size`` overflows float64.
    """
    with np.errstate(over="ignore"):
        bound = np.square(np.float64(2.0) * peak) * size
    if not np.isfinite(bound):
        prefix = f"{owner}: " if owner else ""
        raise ValueError(f"{prefix}{name} holds values up to {peak:.3g} in magnitude, too large for float64: "
                         "their squared differences and sums of squares overflow, so the kernel and the "
                         f"evidence would not be finite; rescale {name} (e.g. divide by its largest "
                         "magnitude, then standardise: subtract the mean, divide by the standard deviation)")


def is_frozen_scipy(value):
    """Whether ``value`` is a frozen ``scipy.stats`` distribution (``scipy.stats.gamma(2.0)``), usable as a prior.

    Parameters
    ----------
    value : object
        Anything.

    Returns
    -------
    bool
        True when it has ``logpdf`` and ``dist`` attributes.
    """
    return hasattr(value, "logpdf") and hasattr(value, "dist")


def _value_key(value):
    """What ``==`` and ``hash`` see of one field value of a :class:`ValueEquality` component.

    Arrays compare by shape and values (``ndarray ==`` is elementwise, so the dataclass
    ``__eq__`` raised "truth value ... is ambiguous"), and so do real numbers and lists or tuples
    of them, so that ``SquaredExponential([0.9, 1.5])`` equals ``SquaredExponential(np.array([0.9,
    1.5]))`` and a 0-d array equals its float (a model read back from a file holds arrays where the
    declaration had lists or floats); frozen ``scipy.stats`` distributions by family and parameters
    (they compare by identity, so a copy read back from a model file differed); other sequences
    element by element; anything else as itself.

    Parameters
    ----------
    value : object
        A field value of a component.

    Returns
    -------
    hashable
        The key ``==`` and ``hash`` compare.
    """
    if isinstance(value, (list, tuple, numbers.Real)) and not isinstance(value, bool):
        numeric = np.asarray(value, dtype=object)
        if numeric.size and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in numeric.ravel()):
            value = np.asarray(value, dtype=float)
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        # + 0.0 folds -0.0 into 0.0, which == treats as equal and the hash must too.
        return ("array", value.shape, tuple((value.astype(float) + 0.0).ravel().tolist()))
    if is_frozen_scipy(value):
        return ("scipy", type(value.dist), _value_key(tuple(value.args)),
                tuple(sorted((k, _value_key(v)) for k, v in value.kwds.items())))
    if isinstance(value, (list, tuple)):
        return tuple(_value_key(v) for v in value)
    return value


class ValueEquality:
    """``==`` and ``hash`` by field values for frozen dataclass components that may hold arrays
    or scipy distributions (use with ``@dataclass(frozen=True, eq=False)``, so that the
    generated ``__eq__`` does not replace this one).  Equal components declare the same model,
    so ``Model ==`` works for every declaration."""

    def _key(self):
        return (type(self),) + tuple(_value_key(getattr(self, f.name)) for f in dataclasses.fields(self))

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self):
        return hash(self._key())
