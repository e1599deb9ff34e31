"""What every model component shares: declared parameters, binding to values, and a registry.

A component (a kernel, a likelihood, a mean function, an inference method) is a frozen
dataclass validated on construction.  Its hyperparameters are dataclass fields that hold what
the user declared (a number, an array, ``Fixed(...)`` or a prior); :meth:`Component.parameters`
says which fields those are, with their constraint and their dims.  The model compiles them into
a flat table (:class:`gpdsl.parameters.ParameterTable`) and, at every evaluation, *binds* each
component to the current values: :meth:`Component.bind` returns a copy whose parameter fields
hold natural-scale float arrays, so that a component's code reads ``self.variance`` (as tinygp
and GPJax do) and never sees a table or a name prefix.

Gradients come back from a component keyed by its own parameter names (``{"variance": ...}``);
:class:`Bound`, the object the inference methods receive, adds the component's place in the
model (``"kernel."``, ``"likelihood."``) to those keys, for the operations the component's
family lists in ``gradient_outputs``.  A new component therefore writes no prefix anywhere.

Every concrete subclass registers itself when its class statement runs (``__init_subclass__``),
under its class name in its family's registry, so that save/load, model files and the
conformance suite (``tests/test_conformance.py``) find it without a list kept by hand.  A class
defined outside gpdsl is also registered as ``"module:QualName"``, which is how it is written to
files.  Reading a file resolves a type only in these registries (:func:`lookup`): a name whose
class is not registered in the running process is refused (:class:`UntrustedTypeError`) unless the
caller trusts its module by name, because importing a module runs its code.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib
import sys
from typing import ClassVar

import numpy as np

from .checks import ValueEquality
from .parameters import declared_value, entry


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One hyperparameter a component declares.

    Parameters
    ----------
    name : str
        The field (for a composite, ``"<i>.<field>"``); entries are named ``"<prefix>.<name>"``.
    spec : object
        The declared field value: a number, an array, ``Fixed(...)`` or a prior.
    positive : bool, default True
        Optimised as its logarithm (a variance, a length-scale) rather than as is (a bias).
    shape : tuple of int or None, default None
        Broadcast the declared value to this shape (an ARD length-scale of a scalar start).
    dims : tuple of str, default ()
        The value's dimension names in the posterior's xarray view (``("feature",)``).
    bounds : tuple of float or None, default None
        (low, high): the value stays strictly inside, optimised as the logit of its place in the
        interval (a change-point's location within the data's range).
    """

    name: str
    spec: object
    positive: bool = True
    shape: tuple | None = None
    dims: tuple = ()
    bounds: tuple | None = None


class Component(ValueEquality):
    """Base of every component family.  A family's base class is declared with
    ``class Kernel(Component, family="kernel")``; its subclasses then register themselves in
    ``Kernel.registry``, except those declared ``abstract=True`` in the class statement or named
    with a leading underscore.
    """

    family: ClassVar[str] = ""
    registry: ClassVar[dict] = {}
    # Operation name -> function (output, qualify) returning the output with its gradient keys
    # qualified by ``qualify`` (a function of a local name): what :class:`Bound` rewrites.
    gradient_outputs: ClassVar[dict] = {}

    def __init_subclass__(cls, family=None, abstract=False, **kwargs):
        super().__init_subclass__(**kwargs)
        if family is not None:
            cls.family = family
            cls.registry = {}
            return
        if abstract or cls.__name__.startswith("_") or not cls.family:
            return
        key = type_name(cls)
        cls.registry[key] = cls
        if ":" in key and cls.__name__ not in cls.registry:
            cls.registry[cls.__name__] = cls

    # Names of the dataclass fields that hold hyperparameters, and those of them that are not
    # positive (optimised as they are, not as their logarithm).
    hyperparameters: ClassVar[tuple] = ()
    unconstrained: ClassVar[tuple] = ()
    # Field name -> the key model files and dicts write it under, where the two differ (the
    # field's name is read too: :mod:`gpdsl.io.spec`).
    file_keys: ClassVar[dict] = {}

    def parameters(self, X):
        """The declared hyperparameters: by default one scalar-or-array :class:`Parameter` per
        field in ``hyperparameters`` that is not None; a component whose parameters depend on the
        data (an ARD length-scale's width) overrides this.

        Parameters
        ----------
        X : ndarray, shape (N, D)
            Training inputs (their number and width size per-row or per-feature parameters).

        Returns
        -------
        list of Parameter
        """
        return [Parameter(name, getattr(self, name), positive=name not in self.unconstrained)
                for name in self.hyperparameters if getattr(self, name) is not None]

    @classmethod
    def variants(cls):
        """Example instances covering the class's branches (one per link, isotropic and ARD), at
        non-default values: what :func:`gpdsl.inference.supported_pairs` asks and what the
        conformance suite tests.  Inputs of two features are assumed.

        Returns
        -------
        tuple of Component
        """
        return (cls(),)

    def entries(self, prefix, X, fixed_names=()):
        """The model table's entries of :meth:`parameters`, named ``"<prefix>.<name>"``.

        Parameters
        ----------
        prefix : str
            The component's place in the model (``"kernel"``).
        X : ndarray, shape (N, D)
            Training inputs.
        fixed_names : collection of str, optional
            Entry names held at their declared value.

        Returns
        -------
        list of gpdsl.parameters.Entry
        """
        made = []
        for p in self.parameters(X):
            e = entry(f"{prefix}.{p.name}", p.spec, positive=p.positive, shape=p.shape, fixed_names=fixed_names,
                      bounds=p.bounds)
            made.append(dataclasses.replace(e, dims=_dims(p, e)))
        return made

    def bind(self, values=None):
        """A copy whose parameter fields hold natural-scale float arrays.

        Parameters
        ----------
        values : mapping of str to array_like, optional
            Values by local parameter name (a name left out keeps its declared value).

        Returns
        -------
        Component
            The bound copy (not validated again: the values come from the model's table).
        """
        values = values or {}
        bound = copy.copy(self)
        for name in self.hyperparameters:
            if name in values:
                object.__setattr__(bound, name, np.asarray(values[name], dtype=float))
            elif getattr(self, name) is not None:
                object.__setattr__(bound, name, declared_value(getattr(self, name)))
        return bound

    def describe(self):
        """A short text for summaries and attrs.

        Returns
        -------
        str
        """
        return type(self).__name__


def _dims(parameter, made):
    if parameter.dims or made.value.ndim == 0:
        return tuple(parameter.dims)
    return tuple(f"{parameter.name.rsplit('.', 1)[-1]}_index{'' if i == 0 else i}" for i in range(made.value.ndim))


def type_name(cls):
    """The name a component class is registered and written to files under: the class name for
    gpdsl's own classes, ``"module:QualName"`` for one defined elsewhere.

    Parameters
    ----------
    cls : type

    Returns
    -------
    str
    """
    module = cls.__module__
    if module == "gpdsl" or module.startswith("gpdsl."):
        return cls.__name__
    return f"{module}:{cls.__qualname__}"


class UntrustedTypeError(ValueError):
    """A file, dict or dataset names a component type ``"module:QualName"`` whose class is not
    registered in the running process, and the caller does not trust ``module``: resolving it would
    import the module, which runs its code.

    Import the module before reading (defining the class registers it), or name it in the
    reader's ``trust=`` (``gpdsl run --trust MODULE``).  A ``ValueError``.
    """


def trusted_modules(trust):
    """The module names a reader's ``trust`` argument allows it to import.

    Parameters
    ----------
    trust : str, iterable of str or None
        One module name (``"mypackage.kernels"``) or several (any iterable, read once here: a
        reader normalises its argument with this function once and passes the frozenset on); None
        or empty trusts none.  A name lets a reader import that module, and Python imports its
        parent packages first, so trusting ``"pkg.sub"`` also runs ``pkg/__init__.py`` (whatever
        component classes that defines are then registered, and read as any registered class is).
        It names no other module: a type ``"pkg:Class"`` met before anything imported ``pkg``, or
        one of a submodule (``"pkg.sub.inner"``) or a sibling, is refused.

    Returns
    -------
    frozenset of str

    Raises
    ------
    TypeError
        ``trust`` is not a string, an iterable of strings or None.
    ValueError
        A name that is not an absolute dotted module name.
    """
    if trust is None:
        return frozenset()
    names = (trust,) if isinstance(trust, str) else trust
    try:
        names = tuple(names)
    except TypeError:
        raise TypeError(f"trust must be a module name or a list of them, got {trust!r}") from None
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"trust must hold module names (strings), got {name!r} in {trust!r}")
        if not name or not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"trust: {name!r} is not a module name (dotted identifiers, e.g. 'mypackage.kernels')")
    return frozenset(names)


def lookup(family_base, name, where, trust=None):
    """The registered class ``name`` of a family.

    A name that is not registered is imported only where it is ``"module:QualName"`` and
    ``module`` is trusted; reading a file never imports anything else.

    Parameters
    ----------
    family_base : type
        The family's base class (``Kernel``).
    name : str
        A registered name.
    where : str
        What is being read, for the error message.
    trust : str, iterable of str or None, default None
        Modules the caller allows the reader to import (:func:`trusted_modules`).

    Returns
    -------
    type

    Raises
    ------
    UntrustedTypeError
        ``"module:QualName"`` not registered, with ``module`` not imported and not trusted.
    ValueError
        An unknown name, or a trusted module that cannot be imported or defines no such class.
    """
    registry = family_base.registry
    trusted = trusted_modules(trust)
    if isinstance(name, str) and name in registry:
        return registry[name]
    if isinstance(name, str) and ":" in name:
        module = name.split(":", 1)[0]
        if module not in trusted and module not in sys.modules:
            raise UntrustedTypeError(
                f"{where}: {family_base.family} type {name!r} is not registered in this process, and reading it "
                f"would import (run) module {module!r}, which is not trusted; if you trust its code, "
                f"`import {module}` before reading, or pass trust=[{module!r}] to the reader "
                f"(gpdsl run: --trust {module})")
        if module in trusted:
            try:
                importlib.import_module(module)
            except ImportError as err:
                raise ValueError(f"{where}: {family_base.family} type {name!r} names module {module!r}, which cannot "
                                 f"be imported ({err}); put it on the import path (PYTHONPATH)") from err
        if name in registry:
            return registry[name]
        raise ValueError(f"{where}: module {module!r} defines no registered {family_base.family} type {name!r}")
    raise ValueError(f"{where}: unknown {family_base.family} type {name!r}; known: {sorted(k for k in registry if ':' not in k)}")


class Bound:
    """A bound component as the inference methods receive it: its operations, with the gradient
    keys of those its family lists in ``gradient_outputs`` qualified by its place in the model.

    Parameters
    ----------
    component : Component
        A bound component (:meth:`Component.bind`).
    prefix : str
        Its place in the model (``"kernel"``, ``"likelihood"``).
    """

    __slots__ = ("component", "prefix")

    def __init__(self, component, prefix):
        self.component = component
        self.prefix = prefix

    def qualify(self, name):
        """``"<prefix>.<name>"``.

        Parameters
        ----------
        name : str
            A local parameter name.

        Returns
        -------
        str
        """
        return f"{self.prefix}.{name}"

    def __reduce__(self):
        # A bound component travels to Dask workers; __getattr__ must not answer pickle's lookups.
        return (Bound, (self.component, self.prefix))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        attr = getattr(self.component, name)
        rewrite = type(self.component).gradient_outputs.get(name)
        if rewrite is None:
            return attr

        def qualified(*args, **kwargs):
            return rewrite(attr(*args, **kwargs), self.qualify)
        return qualified

    def __repr__(self):
        return f"Bound({self.component!r}, {self.prefix!r})"


def per_feature(owner, name, spec, X, positive=True, always=False):
    """The :class:`Parameter` of a field that is a scalar (shared by every feature) or an array
    of one value per feature of X (an ARD length-scale, a per-feature period); with ``always``
    one per feature either way (a scalar is then every feature's start).

    Parameters
    ----------
    owner : str
        The class, for the message.
    name : str
        The field.
    spec : object
        Its declared value.
    X : ndarray, shape (N, D)
    positive : bool, default True
    always : bool, default False

    Returns
    -------
    Parameter
        Shape (D,) with dims ``("feature",)`` for an array (or ``always``), a scalar otherwise.

    Raises
    ------
    ValueError
        An array with a number of entries other than D.
    """
    dim = X.shape[1]
    value = declared_value(spec)
    if value.ndim == 1 and value.shape[0] != dim:
        raise ValueError(f"{owner}: {name} has {value.shape[0]} entries but X has {dim} features (give a scalar "
                         f"for one {name} shared by every feature)")
    array = value.ndim == 1 or always
    return Parameter(name, spec, positive=positive, shape=(dim,) if array else None, dims=("feature",) if array else ())


def part_parameters(labels, parts, X):
    """The parameters of a composite's parts, each named ``"<label>.<name>"``.

    Parameters
    ----------
    labels : sequence of str
        Each part's label (its name or its index).
    parts : sequence of Component
    X : ndarray, shape (N, D)

    Returns
    -------
    list of Parameter
    """
    return [dataclasses.replace(p, name=f"{label}.{p.name}") for label, part in zip(labels, parts)
            for p in part.parameters(X)]


def bind_parts(labels, parts, values):
    """Each part of a composite bound to its share of ``values`` (keys ``"<label>.<name>"``).

    Parameters
    ----------
    labels : sequence of str
    parts : sequence of Component
    values : mapping of str to array_like or None

    Returns
    -------
    tuple of Component
    """
    values = values or {}
    return tuple(part.bind({k[len(label) + 1:]: v for k, v in values.items() if k.startswith(label + ".")})
                 for label, part in zip(labels, parts))


def qualify_keys(grads, qualify):
    """A dict of gradients with its keys passed through ``qualify``.

    Parameters
    ----------
    grads : dict
    qualify : callable of str to str

    Returns
    -------
    dict
    """
    return {qualify(k): v for k, v in grads.items()}


def bind(component, values, prefix):
    """The :class:`Bound` ``component`` at the model's ``values`` (keys ``"<prefix>.<name>"``).

    Parameters
    ----------
    component : Component
    values : mapping of str to ndarray
        The model's natural values by qualified name.
    prefix : str

    Returns
    -------
    Bound
    """
    start = len(prefix) + 1
    local = {k[start:]: v for k, v in values.items() if k.startswith(prefix + ".")}
    return Bound(component.bind(local), prefix)


__all__ = ["Component", "Parameter", "Bound", "UntrustedTypeError", "bind", "bind_parts", "lookup", "trusted_modules", "part_parameters", "per_feature",
           "type_name"]
