"""Every public class and function of gpdsl has a numpydoc docstring (issue 17).

Public means reachable from ``import gpdsl as gd`` without a leading underscore: the package's
names and every submodule whose dotted path has no component starting with ``_`` (so
``gpdsl._jit`` and ``gpdsl.__main__`` are private).  In each module the names checked are those
of ``__all__`` where it is defined, else the functions and classes the module itself defines
under a public name; in each public class, the public methods, properties, static and class
methods that the class defines.  Each must have a docstring with a non-empty one-line summary,
and where it takes parameters other than ``self``/``cls`` and ``*args``/``**kwargs``, a numpydoc
``Parameters`` section naming every one of them.  A class documents its constructor's parameters
(a dataclass's fields) in its own docstring or in ``__init__``'s.  A method that overrides a
documented base-class method without a docstring of its own counts as documented by the base,
as :func:`inspect.getdoc` inherits it (its parameters are then checked against that docstring).

The parser is a small one (``numpydoc`` is not a dependency): the section is the block under a
``Parameters`` line underlined with dashes, up to the next underlined header, and a parameter is
a line of that block at the block's own indentation, ``name : type`` or ``a, b : type``.
"""
import dataclasses
import importlib
import inspect
import pkgutil
import re

import pytest

import gpdsl

SECTION_HEADER = re.compile(r"^(\S[^\n]*)\n-{3,}[ \t]*$", re.MULTILINE)
SKIPPED_KINDS = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def public_modules():
    """The package and its submodules without a ``_``-prefixed component, imported.

    Returns
    -------
    list of module
        ``gpdsl`` first, then its public submodules in ``pkgutil.walk_packages`` order.
    """
    modules = [gpdsl]
    for info in pkgutil.walk_packages(gpdsl.__path__, prefix="gpdsl."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        modules.append(importlib.import_module(info.name))
    return modules


def public_objects(module):
    """The public functions and classes of one module.

    Parameters
    ----------
    module : module
        A gpdsl module.

    Returns
    -------
    list of (str, object)
        ``(qualified name, object)`` for each name of ``module.__all__`` (if defined) that is a
        function or class, else for each public function or class defined in ``module``.
    """
    names = getattr(module, "__all__", None)
    if names is None:
        names = [name for name, obj in vars(module).items()
                 if not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__]
    found = []
    for name in names:
        obj = getattr(module, name)
        obj = getattr(obj, "py_func", obj)          # a Numba dispatcher documents its Python function
        if inspect.isclass(obj) or inspect.isfunction(obj):
            found.append((f"{obj.__module__}.{obj.__qualname__}", obj))
    return found


def parameters_section(doc):
    """The names listed in a numpydoc ``Parameters`` section.

    Parameters
    ----------
    doc : str
        A cleaned docstring (:func:`inspect.getdoc`).

    Returns
    -------
    set of str or None
        The parameter names without leading ``*``; None where there is no such section.
    """
    headers = list(SECTION_HEADER.finditer(doc))
    for index, header in enumerate(headers):
        if header.group(1).strip() != "Parameters":
            continue
        end = headers[index + 1].start() if index + 1 < len(headers) else len(doc)
        lines = [line for line in doc[header.end():end].splitlines() if line.strip()]
        if not lines:
            return set()
        indent = min(len(line) - len(line.lstrip()) for line in lines)
        names = set()
        for line in lines:
            if len(line) - len(line.lstrip()) == indent:
                names.update(part.strip().lstrip("*") for part in line.split(" : ")[0].split(","))
        return names
    return None


def named_parameters(func, *, bound):
    """The parameters a docstring must name.

    Parameters
    ----------
    func : callable
        A function, or a class (whose constructor signature is read).
    bound : bool
        True for a method or class method: its first parameter (``self``/``cls``) is dropped.

    Returns
    -------
    list of str
        The names in signature order, without ``*args``/``**kwargs``; empty where the signature
        cannot be read.
    """
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    params = list(signature.parameters.values())
    if bound and params and params[0].kind not in SKIPPED_KINDS:
        params = params[1:]
    return [p.name for p in params if p.kind not in SKIPPED_KINDS]


def docstring_gaps(label, doc, required):
    """What one docstring lacks.

    Parameters
    ----------
    label : str
        The qualified name reported with each gap.
    doc : str or None
        The docstring (:func:`inspect.getdoc`).
    required : list of str
        The parameter names it must list under ``Parameters``.

    Returns
    -------
    list of str
        One ``"label: what is missing"`` line per gap.
    """
    if not doc or not doc.strip().splitlines()[0].strip():
        return [f"{label}: no docstring" if not doc else f"{label}: empty one-line summary"]
    if not required:
        return []
    listed = parameters_section(doc)
    if listed is None:
        return [f"{label}: no 'Parameters' section (needs {', '.join(required)})"]
    missing = [name for name in required if name not in listed]
    return [f"{label}: 'Parameters' lacks {', '.join(missing)}"] if missing else []


def own_constructor(cls):
    """The ``__init__`` or ``__new__`` a class's constructor parameters come from, if gpdsl defines it.

    Parameters
    ----------
    cls : type
        A public class.

    Returns
    -------
    function or None
        The first ``__init__``/``__new__`` on the MRO defined in a gpdsl class (a dataclass's or
        NamedTuple's generated one included); None where the constructor is a builtin's (e.g.
        ``Exception``'s or ``object``'s).
    """
    for klass in cls.__mro__:
        for name in ("__init__", "__new__"):
            if name in vars(klass):
                return vars(klass)[name] if klass.__module__.startswith("gpdsl") else None
    return None


def class_gaps(label, cls, seen):
    """The gaps of a class's docstring and of its public methods.

    Methods come from every gpdsl class on the MRO, so that a public subclass of a private base
    (``SquaredExponential`` of ``Stationary``) has the base's methods checked; each is reported
    under the class that defines it, once.

    Parameters
    ----------
    label : str
        The class's qualified name.
    cls : type
        The class.
    seen : set of int
        ``id`` of the objects already checked; updated in place.

    Returns
    -------
    list of str
        One line per gap.
    """
    gaps = []
    init = own_constructor(cls)
    required = named_parameters(cls, bound=False) if init is not None else []
    class_doc = inspect.getdoc(cls)
    init_doc = inspect.getdoc(init) if inspect.isfunction(init) and init.__doc__ else None
    if init_doc and parameters_section(init_doc) is not None:
        gaps += docstring_gaps(label, class_doc, [])
        gaps += docstring_gaps(f"{label}.__init__", init_doc, required)
    else:
        gaps += docstring_gaps(label, class_doc, required)
    for klass in cls.__mro__:
        if not klass.__module__.startswith("gpdsl"):
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") or id(member) in seen:
                continue
            seen.add(id(member))
            member_label = f"{klass.__module__}.{klass.__qualname__}.{name}"
            if isinstance(member, property):
                gaps += docstring_gaps(member_label, inspect.getdoc(member), [])
            elif isinstance(member, staticmethod):
                gaps += docstring_gaps(member_label, inspect.getdoc(member.__func__),
                                       named_parameters(member.__func__, bound=False))
            elif isinstance(member, classmethod):
                gaps += docstring_gaps(member_label, inspect.getdoc(getattr(klass, name)),
                                       named_parameters(member.__func__, bound=True))
            elif inspect.isfunction(member):
                gaps += docstring_gaps(member_label, inspect.getdoc(getattr(klass, name)),
                                       named_parameters(member, bound=True))
    return gaps


def api_gaps():
    """Every gap of the public API.

    Returns
    -------
    list of str
        ``"module.qualname: what is missing"``, one per gap, each object checked once.
    """
    seen, gaps = set(), []
    for module in public_modules():
        for label, obj in public_objects(module):
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if inspect.isclass(obj):
                gaps += class_gaps(label, obj, seen)
            else:
                gaps += docstring_gaps(label, inspect.getdoc(obj), named_parameters(obj, bound=False))
    return gaps


def test_parser_reads_numpydoc_parameters():
    doc = inspect.cleandoc("""Summary.

        Parameters
        ----------
        X, Z : ndarray, shape (n, D)
            Inputs; a line at a deeper indent is not a name.
        *args
            Passed on.

        Returns
        -------
        float
        """)
    assert parameters_section(doc) == {"X", "Z", "args"}
    assert parameters_section("Summary only.") is None
    assert docstring_gaps("f", doc, ["X", "y"]) == ["f: 'Parameters' lacks y"]
    assert docstring_gaps("g", None, []) == ["g: no docstring"]


def test_class_check_reads_dataclass_fields_and_methods():
    def method(self, x):
        """Summary without a Parameters section."""

    fake = dataclasses.make_dataclass(
        "Fake", [("a", int), ("b", int)],
        namespace={"__doc__": "Summary.\n\nParameters\n----------\na : int\n    A.\n", "method": method})
    fake.__module__ = "gpdsl.fake"
    assert class_gaps("gpdsl.fake.Fake", fake, set()) == [
        "gpdsl.fake.Fake: 'Parameters' lacks b",
        "gpdsl.fake.Fake.method: no 'Parameters' section (needs x)"]


def test_public_api_has_numpydoc_docstrings():
    gaps = api_gaps()
    if gaps:
        pytest.fail(f"{len(gaps)} docstring gaps in gpdsl's public API:\n" + "\n".join(gaps), pytrace=False)
