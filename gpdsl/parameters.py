"""Hyperparameter declarations and the flat vector the optimiser sees.

A component field may hold a number or array (a free starting value), ``Fixed(value)`` (held
constant), or a prior from :mod:`gpdsl.priors` (MAP; starts at the prior's initial value).
Positive hyperparameters are optimised as their logarithm (scikit-learn / GPflow practice), so
the optimiser never leaves the valid region and length-scales of different magnitude are
treated alike.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from .checks import ValueEquality, as_float_array
from .priors import as_prior, describe


@dataclass(frozen=True, eq=False)
class Fixed(ValueEquality):
    """Hold a hyperparameter at ``value`` during fitting: ``SquaredExponential(variance=Fixed(1.0))``.

    Parameters
    ----------
    value : float or ndarray
        The value the hyperparameter keeps (a number, or an array such as ARD length-scales of
        shape (D,)).

    Raises
    ------
    TypeError
        If ``value`` is a prior, another ``Fixed``, a bool or not numeric.
    """

    value: object

    def __post_init__(self):
        if as_prior(self.value) is not None or isinstance(self.value, Fixed):
            raise TypeError("Fixed: value must be a number or an array, not a prior or Fixed")
        as_float_array("Fixed", "value", self.value, allow_bool=False, expected="a number or an array")


@dataclass(frozen=True, eq=False)
class Shared(ValueEquality):
    """One hyperparameter used by several fields: every field declared ``Shared(name, ...)`` with
    the same ``name`` is one free parameter, e.g. the same period in two factors::

        period = gd.Shared("period", 12.0)
        kernel = gd.kernels.Periodic(period=period) * gd.kernels.SquaredExponential() + \
                 gd.kernels.Periodic(period=period, base=gd.kernels.Matern32())

    Each field keeps its own entry name in the posterior (``kernel.0.0.period``,
    ``kernel.1.period``), and they hold one value: the optimiser sees it once and its gradient
    is the sum of theirs.

    Parameters
    ----------
    name : str
        The tie's name: fields with equal names share one parameter.
    value : float, ndarray, Fixed or prior
        What the first field declares (every field of the tie must declare the same).

    Raises
    ------
    TypeError
        If ``name`` is not a non-empty string or ``value`` is another ``Shared``.
    """

    name: str
    value: object

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Shared: name must be a non-empty string, got {self.name!r}")
        if isinstance(self.value, Shared):
            raise TypeError("Shared: value must be a number, an array, Fixed(...) or a prior, not another Shared")


def unshared(spec):
    """The declared spec inside a :class:`Shared` (``spec`` itself otherwise)."""
    return spec.value if isinstance(spec, Shared) else spec


def declared_value(spec):
    """The starting value (float ndarray) of a field: the number, the Fixed value or the prior's initial value."""
    spec = unshared(spec)
    if isinstance(spec, Fixed):
        spec = spec.value
    prior = as_prior(spec)
    if prior is not None:
        spec = prior.initial_value()
    return np.asarray(spec, dtype=float)


def check_hyperparameter(owner, name, spec, positive=True, ndim_max=1):
    """Validate a declared hyperparameter on construction; raise naming the class and field."""
    spec = unshared(spec)
    if spec is None:
        raise TypeError(f"{owner}: {name} must be given")
    if as_prior(spec) is None and not isinstance(spec, Fixed):
        # declared_value's np.asarray(dtype=float) would parse "0.1" and take True as 1.0.
        as_float_array(owner, name, spec, allow_bool=False, expected="a number, an array, Fixed(...) or a prior")
    try:
        value = declared_value(spec)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{owner}: {name} must be a number, an array, Fixed(...) or a prior, "
                        f"got {spec!r}") from err
    if value.ndim > ndim_max:
        raise ValueError(f"{owner}: {name} must have at most {ndim_max} dimension(s), got shape {value.shape}")
    if value.size == 0:
        raise ValueError(f"{owner}: {name} must not be empty")
    if not np.all(np.isfinite(value)):
        raise ValueError(f"{owner}: {name} must be finite, got {value!r}")
    if positive and not np.all(value > 0):
        raise ValueError(f"{owner}: {name} must be positive, got {value!r}")


@dataclass
class Entry:
    """One named hyperparameter of a compiled model."""

    name: str
    value: np.ndarray          # natural-scale starting value
    positive: bool
    fixed: bool
    prior: object = None       # a gpdsl.priors.Prior or None
    dims: tuple | None = None  # the value's dims in the xarray view (None: named after the entry)
    tie: str | None = None     # the gpdsl.parameters.Shared name it shares a value under
    bounds: tuple | None = None  # (low, high): optimised as the logit of its place in the interval
    tied_to: str | None = None  # the entry of its tie that the optimiser sees (None: itself)

    @property
    def size(self):
        return self.value.size


def entry(name, spec, positive=True, shape=None, fixed_names=(), bounds=None):
    """Build an :class:`Entry` from a declared field, broadcasting the value to ``shape`` if given;
    with ``bounds`` (low, high) the value must lie strictly inside them."""
    value = declared_value(spec)
    if shape is not None:
        value = np.broadcast_to(value, shape).astype(float)
    if bounds is not None and not (np.all(value > bounds[0]) and np.all(value < bounds[1])):
        raise ValueError(f"{name} must lie inside ({bounds[0]:.6g}, {bounds[1]:.6g}), got {value!r}")
    tie = spec.name if isinstance(spec, Shared) else None
    spec = unshared(spec)
    return Entry(name=name, value=np.array(value, dtype=float), positive=positive,
                 fixed=isinstance(spec, Fixed) or name in fixed_names, prior=as_prior(spec), tie=tie,
                 bounds=None if bounds is None else (float(bounds[0]), float(bounds[1])))


class ParameterTable:
    """Maps between named natural-scale values and the free unconstrained vector.

    ``unpack(u)`` returns a dict name -> ndarray of natural values (fixed entries keep theirs);
    ``chain(grads)`` turns a dict of d objective / d natural value into d objective / d u.
    Entries of one :class:`Shared` tie take the first one's value; only that one is in u.
    """

    def __init__(self, entries):
        names = [e.name for e in entries]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate hyperparameter names: {names}")
        self.entries = _tied(list(entries))
        self.free = [e for e in self.entries if not e.fixed and e.tied_to is None]
        self.followers = [e for e in self.entries if e.tied_to is not None]
        self.size = int(sum(e.size for e in self.free))

    def names(self):
        return [e.name for e in self.entries]

    def values(self):
        return {e.name: e.value.copy() for e in self.entries}

    def pack(self, values):
        parts = []
        for e in self.free:
            v = np.asarray(values[e.name], dtype=float).ravel()
            if e.bounds is not None:
                low, high = e.bounds
                parts.append(np.log(v - low) - np.log(high - v))
            else:
                parts.append(np.log(v) if e.positive else v)
        return np.concatenate(parts) if parts else np.zeros(0)

    def unpack(self, u):
        values = self.values()
        offset = 0
        for e in self.free:
            chunk = u[offset:offset + e.size].reshape(e.value.shape)
            if e.bounds is not None:
                low, high = e.bounds
                values[e.name] = low + (high - low) * special.expit(chunk)
            else:
                values[e.name] = np.exp(chunk) if e.positive else chunk.copy()
            offset += e.size
        for e in self.followers:
            values[e.name] = values[e.tied_to].copy()
        return values

    def check_gradients(self, owner, grads):
        """Raise MissingGradientError unless ``grads`` has every free entry: a method that left
        one out would otherwise freeze that hyperparameter silently."""
        missing = [e.name for e in self.free + [f for f in self.followers if not f.fixed] if e.name not in grads]
        if missing:
            raise MissingGradientError(f"{owner} returned no gradient for the free hyperparameter(s) {missing}; "
                                       "every method must differentiate its objective in each of them")

    def chain(self, values, grads):
        """d/du from d/d(natural value) ``grads``, which must hold every free entry
        (:meth:`check_gradients`)."""
        self.check_gradients("chain", grads)
        parts = []
        for e in self.free:
            g = np.asarray(grads[e.name], dtype=float).ravel()
            for f in self.followers:
                if f.tied_to == e.name:
                    g = g + np.asarray(grads[f.name], dtype=float).ravel()
            v = np.asarray(values[e.name]).ravel()
            if e.bounds is not None:
                low, high = e.bounds
                g = g * (v - low) * (high - v) / (high - low)
            elif e.positive:
                g = g * v
            parts.append(g)
        return np.concatenate(parts) if parts else np.zeros(0)

    def log_prior(self, values):
        """Sum of log prior densities and their natural-scale gradients (dict)."""
        total = 0.0
        grads = {}
        for e in self.entries:
            if e.prior is None or e.tied_to is not None:     # a tie's prior counts once
                continue
            v = values[e.name]
            total += float(np.sum(e.prior.log_density(v)))
            if not e.fixed:
                grads[e.name] = np.asarray(e.prior.grad_log_density(v), dtype=float)
        return total, grads

    def prior_descriptions(self):
        return {e.name: describe(e.prior) for e in self.entries if e.prior is not None}


def _tied(entries):
    """``entries`` with each :class:`Shared` tie's later members pointing at its first
    (``tied_to``), after checking that the members declare the same thing."""
    first = {}
    for e in entries:
        if e.tie is None:
            continue
        if e.tie not in first:
            first[e.tie] = e
            continue
        lead = first[e.tie]
        if (e.value.shape != lead.value.shape or not np.array_equal(e.value, lead.value) or e.positive != lead.positive
                or e.fixed != lead.fixed or (e.prior is None) != (lead.prior is None)
                or (e.prior is not None and describe(e.prior) != describe(lead.prior))):
            raise ValueError(f"Shared({e.tie!r}): {e.name} and {lead.name} share a parameter but are declared "
                             f"differently ({e.value!r} against {lead.value!r}); give them the same Shared value")
        e.tied_to = lead.name
    return entries


class MissingGradientError(RuntimeError):
    """An inference method returned no gradient for a hyperparameter it was asked to fit."""


__all__ = ["Fixed", "Shared"]
