"""Argument checks shared by the declarative components and ``Model.fit``.

Each raises an error that names the owner (class or function), the argument and the value.
Python and NumPy scalars are accepted alike; ``True`` and ``False`` are not numbers here.
"""
from __future__ import annotations

import math
import numbers

import numpy as np


def is_integer(value):
    """An int or NumPy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_number(value):
    """A real int/float or NumPy scalar, not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def check_bool(owner, name, value, error=ValueError):
    if not isinstance(value, (bool, np.bool_)):
        raise error(f"{owner}: {name} must be True or False, got {value!r}")


def check_positive_int(owner, name, value):
    if not is_integer(value) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")


def check_positive_number(owner, name, value):
    if not is_number(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{owner}: {name} must be a positive finite number, got {value!r}")


def check_nonnegative_int(owner, name, value):
    if not is_integer(value) or value < 0:
        raise ValueError(f"{owner}: {name} must be a non-negative integer, got {value!r}")


def check_seed(owner, value):
    """A seed for ``np.random.default_rng``: a non-negative integer, or None for fresh entropy."""
    if value is not None and (not is_integer(value) or value < 0):
        raise ValueError(f"{owner}: seed must be a non-negative integer or None, got {value!r}")
