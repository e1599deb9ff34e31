"""Declarative model files: Model <-> plain dict <-> TOML (``Model.from_dict``, ``Model.to_dict``,
``Model.from_toml``; this module imports no Model: it reads and writes the parts).

A component is ``{"type": "<ClassName>", <field>: <value>, ...}`` (``"module:QualName"`` for a
component class defined outside gpdsl); a type resolves only to a class registered in the running
process, and a module is imported only where the reader's ``trust`` names it
(:func:`gpdsl.components.lookup`), so reading a file runs no code of its choosing.  A field is
written under the key its class's ``file_keys`` gives (``Categorical``'s ``n_classes`` as ``K``) and
read under either.  A hyperparameter value is a
number or list, ``{"fixed": value}``, or ``{"prior": "Gamma", "shape": a, "rate": b}`` /
``{"prior": "LogNormal", "mu": m, "sigma": s}`` (any family of ``gpdsl.priors.Prior.registry``
by its fields; ``OnTransformed``'s ``base`` is itself a prior table) / ``{"prior": "scipy", "distribution": "gamma",
"args": [2.0], "kwds": {"scale": 0.5}}`` (``scipy.stats.gamma(2.0, scale=0.5)``, optionally with
``"initial"``), or ``{"shared": name, "value": ...}`` (:class:`gpdsl.Shared`, one parameter for
every field of that name).  A field holding components (``Sum``'s ``kernels``, ``Periodic``'s
``base``) holds their tables.  A TOML model file holds the tables ``[kernel] [likelihood] [inducing]
[inference]`` and optionally ``[mean]``, plus ``[data]`` (``path``, ``target``, optional ``features``), and optionally
``[fit]`` (keyword arguments of ``Model.fit``) and ``[output]`` (``posterior``, ``plot``).  TOML
has no null: a field left at a ``None`` default is omitted, and a field set to ``None`` against
another default (``GreedyVariance(first_round_max_m=None)``) is written as the string ``"none"``.  A key a table does not know, or a required one missing, is
an error (ValueError) naming the table, e.g. ``kernel.kernels[1] (Matern52)`` or
``kernel.variance: {prior = 'Gamma'}``; nothing is dropped silently.
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

import numpy as np
from scipy import stats

from .. import inducing as ind
from .. import inference as inf
from .. import kernels as ker
from .. import likelihoods as lik
from .. import means as mea
from .. import priors
from ..components import Component, lookup, trusted_modules, type_name
from ..parameters import Fixed, Shared

_NONE = "none"
# The most levels of tables and lists a part may nest (a part's own table is level 1; each Sum in
# a Sum adds two): far above any model (a sum of sums 49 deep), far below where reading it or
# building its model would exhaust Python's recursion limit (a model's dict, a posterior's
# model_spec and a model file are all read through here).
MAX_NESTING = 100
# The parts of a model (the mean is optional), by the base class of their family.
_PARTS = {
    "kernel": ker.Kernel,
    "likelihood": lik.Likelihood,
    "inducing": ind.InducingSpec,
    "inference": inf.Inference,
    "mean": mea.Mean,
}


def _class(part, kind, where, trust):
    """The class a table's ``type`` names (:func:`gpdsl.components.lookup`), or ValueError naming
    the table and the known types."""
    registry = _PARTS[part].registry
    if not isinstance(kind, str) or (kind not in registry and ":" not in kind):
        known = sorted(name for name in registry if ":" not in name)
        raise ValueError(f"{where}: unknown type {kind!r}; known: {', '.join(known)}")
    return lookup(_PARTS[part], kind, where, trust)


def _is_composite(cls):
    """A kernel made of kernels (``Sum``, ``Product``): its field ``kernels`` holds them."""
    return issubclass(cls, ker.Kernel) and "kernels" in {f.name for f in dataclasses.fields(cls) if f.init}


def _encode(value):
    if isinstance(value, Shared):
        return {"shared": value.name, "value": _encode(value.value)}
    if isinstance(value, Fixed):
        return {"fixed": _encode(value.value)}
    if isinstance(value, priors.ScipyPrior):
        return _encode_scipy(value)
    if isinstance(value, priors.Prior):
        # Field by field, so that a prior holding a prior (OnTransformed's base) writes its table.
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"prior": type(value).__name__, **{k: _encode(v) for k, v in fields.items() if v is not None}}
    if priors.as_prior(value) is not None:
        return _encode(priors.as_prior(value))
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value


def _encode_scipy(prior):
    """``{"prior": "scipy", "distribution": family, "args": [...], "kwds": {...}}`` (plus
    ``"initial"`` when the prior has one): what ``scipy.stats.<family>(*args, **kwds)`` rebuilds.

    Raises
    ------
    ValueError
        The distribution is not a ``scipy.stats`` family found by its name (a user-defined
        ``rv_continuous``), so it could not be read back.
    """
    frozen = prior.distribution
    name = getattr(frozen.dist, "name", None)
    if not isinstance(name, str) or type(getattr(stats, name, None)) is not type(frozen.dist):
        raise ValueError(f"to_dict: the prior {priors.describe(prior)} is not a scipy.stats distribution "
                         "that can be found by its name, so it cannot be written; use a scipy.stats family "
                         "or gd.priors.Gamma / LogNormal")
    out = {"prior": "scipy", "distribution": name, "args": [_encode(a) for a in frozen.args],
           "kwds": {k: _encode(v) for k, v in frozen.kwds.items()}}
    if prior.initial is not None:
        out["initial"] = _encode(prior.initial)
    return out


# The scipy form, and the one written before the distribution itself was kept (a description
# and the starting value), which can only be read back as that starting value.
_SCIPY_KEYS = {"prior", "distribution", "args", "kwds", "initial"}
_DESCRIBED_SCIPY_KEYS = {"prior", "description", "initial"}


def _decode_scipy(value, where):
    """The prior of a ``{prior = "scipy", ...}`` table: the frozen distribution (a ScipyPrior
    when ``initial`` is given), or the starting value alone for the described form."""
    table = f"{where}: {{prior = 'scipy'}}"
    if "description" in value:
        check_keys(table, value, _DESCRIBED_SCIPY_KEYS, required=("initial",))
        return value["initial"]
    check_keys(table, value, _SCIPY_KEYS, required=("distribution",))
    name, args, kwds = value["distribution"], value.get("args", []), value.get("kwds", {})
    # Only continuous scipy.stats families: the name must not reach any other attribute.
    family = getattr(stats, name, None) if isinstance(name, str) else None
    if not isinstance(family, stats.rv_continuous):
        raise ValueError(f"{table}: distribution must name a continuous scipy.stats distribution "
                         f"(e.g. 'gamma', 'lognorm'), got {name!r}")
    if not isinstance(args, list) or not isinstance(kwds, dict):
        raise ValueError(f"{table}: args must be a list and kwds a table, got args={args!r}, kwds={kwds!r}")
    try:
        frozen = family(*args, **kwds)
        return frozen if "initial" not in value else priors.ScipyPrior(frozen, value["initial"])
    except (TypeError, ValueError) as err:
        raise ValueError(f"{table}: {err}") from err


def check_keys(where, table, known, required=()):
    """Raise a ValueError naming ``where`` for a key of ``table`` outside ``known`` or a missing ``required`` one.

    A misspelt key would otherwise be dropped and its default used silently.

    Parameters
    ----------
    where : str
        The table's place in the model (``kernel.kernels[1] (Matern52)``), for messages.
    table : dict
        The table as read.
    known : collection of str
        The keys it may have.
    required : sequence of str, optional
        The keys it must have.

    Raises
    ------
    ValueError
        An unknown or a missing key.
    """
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; known: {sorted(known)}")
    missing = [key for key in required if key not in table]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(repr(k) for k in missing)}")


def _decode(value, where="value"):
    """A declared field value: ``{shared = name, value = ..}`` -> Shared, ``{fixed = ..}`` ->
    Fixed, ``{prior = ..}`` -> a prior (the
    ``"scipy"`` form -> the frozen scipy distribution; its older ``description`` form -> its
    ``initial`` value), anything else unchanged.

    Parameters
    ----------
    value : object
        The value as read from TOML or a dict.
    where : str
        Its place in the model (``kernel.variance``), for messages.

    Raises
    ------
    ValueError
        A ``fixed`` or ``prior`` table with an unknown or a missing key, or an unknown prior.
    """
    if isinstance(value, dict) and "shared" in value:
        check_keys(f"{where}: {{shared = ...}}", value, {"shared", "value"}, required=("shared", "value"))
        try:
            return Shared(value["shared"], _decode(value["value"], where))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from err
    if isinstance(value, dict) and "fixed" in value:
        check_keys(f"{where}: {{fixed = ...}}", value, {"fixed"})
        try:
            return Fixed(_decode(value["fixed"], where))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from err
    if isinstance(value, dict) and "prior" in value:
        kind = value["prior"]
        if kind == "scipy":
            return _decode_scipy(value, where)
        known = priors.Prior.registry
        if not isinstance(kind, str) or kind not in known:
            raise ValueError(f"{where}: unknown prior {kind!r}; known: {sorted(known)}")
        fields = dataclasses.fields(known[kind])
        check_keys(f"{where}: {{prior = {kind!r}}}", value, {"prior"} | {f.name for f in fields},
                    required=[f.name for f in fields if f.default is dataclasses.MISSING])
        try:
            return known[kind](**{k: _decode(v, f"{where}.{k}") for k, v in value.items() if k != "prior"})
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from err
    return value


def component_to_dict(obj):
    """One component as a ``{"type": "<ClassName>", <field>: <value>, ...}`` dict.

    Parameters
    ----------
    obj : Kernel, Likelihood, InducingSpec or Inference
        A component dataclass; ``Sum``/``Product`` write ``kernels`` as a list of tables,
        ``Optimized`` its ``init``, and a field holding a component (``Periodic``'s ``base``)
        is written as that component's table.  ``type`` is :func:`gpdsl.components.type_name` of its class:
        the class name for gpdsl's own, ``"module:QualName"`` for one defined elsewhere.

    Returns
    -------
    dict
        Field values by the key the class's ``file_keys`` gives (its field name otherwise), encoded for TOML: arrays as lists, ``Fixed`` as ``{"fixed": ...}``, priors
        as ``{"prior": ...}`` tables; a None field is omitted where None is its default and
        written as ``"none"`` otherwise.

    Raises
    ------
    ValueError
        A scipy prior whose distribution cannot be found by name in ``scipy.stats``.
    """
    kind = type_name(type(obj))
    if isinstance(obj, ind.Optimized):
        return {"type": kind, "init": component_to_dict(obj.init)}
    out = {"type": kind}
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), obj.file_keys.get(f.name, f.name)
        if isinstance(value, Component):
            out[key] = component_to_dict(value)
        elif isinstance(value, tuple) and value and all(isinstance(v, Component) for v in value):
            out[key] = [component_to_dict(v) for v in value]
        elif isinstance(value, tuple):
            out[key] = [_encode(v) for v in value]
        elif value is not None:
            out[key] = _encode(value)
        elif f.default is not None:
            out[key] = _NONE
    return out


def component_from_dict(part, spec, trust=None):
    """The component declared by ``spec`` for ``part`` (``"kernel"``, ``"likelihood"``,
    ``"inducing"``, ``"inference"`` or ``"mean"``).

    Parameters
    ----------
    part : str
        Which part ``spec`` declares.
    spec : dict
        ``{"type": "<ClassName>", <field>: <value>, ...}``; ``Sum`` / ``Product`` take
        ``kernels`` (a list of kernel tables), ``Optimized`` takes ``init`` (a table or an array);
        any other field given as a table with a ``type`` (``Periodic``'s ``base``) is read as a
        component of the same part.  A field is keyed as the class's ``file_keys`` spells it
        (``K`` for ``Categorical``'s ``n_classes``) or by its field name, not both.
    trust : str, iterable of str or None, default None
        Modules that a ``"module:QualName"`` type whose class is not registered may import
        (:func:`gpdsl.components.lookup`); any other such type is refused.

    Returns
    -------
    object
        The kernel, likelihood, inducing spec, inference method or mean.

    Raises
    ------
    gpdsl.UntrustedTypeError
        A type whose class is not registered and whose module is not trusted.
    ValueError
        The message names the table (``kernel.kernels[1]``) and what it expected: no ``type``,
        an unknown type, an unknown or missing key, a field the class rejects, or tables and
        lists nested more than :data:`MAX_NESTING` levels deep.
    TypeError
        ``trust`` is not a module name, an iterable of them or None.
    """
    trust = trusted_modules(trust)
    _check_nesting(spec, part)
    return _component(part, spec, part, trust)


def _check_nesting(value, where):
    """ValueError naming ``where`` if ``value`` nests tables and lists more than
    :data:`MAX_NESTING` levels deep (measured without recursion, so any depth is measured)."""
    containers = (dict, list, tuple)
    level, depth = ([value] if isinstance(value, containers) else []), 0
    while level and depth < MAX_NESTING:
        depth += 1
        level = [child for item in level for child in (item.values() if isinstance(item, dict) else item)
                 if isinstance(child, containers)]
    if level:
        raise ValueError(f"{where}: nested too deeply: more than {MAX_NESTING} levels of tables and lists "
                         "(no model needs that many)")


def _in_file_spelling(cls, table, where):
    """``table`` with a field given by its field name keyed as the class's ``file_keys`` spells
    it (``n_classes`` -> ``K``: files written before the key was renamed), or ValueError where
    both spellings are given."""
    table = dict(table)
    for field, key in cls.file_keys.items():
        if field in table:
            if key in table:
                raise ValueError(f"{where}: {key!r} and {field!r} are the same field; give {key!r} only")
            table[key] = table.pop(field)
    return table


def _component(part, spec, where, trust):
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError(f"{where}: expected a table with a 'type' key, got {spec!r}")
    kind = spec["type"]
    cls = _class(part, kind, where, trust)
    fields = _in_file_spelling(cls, {k: v for k, v in spec.items() if k != "type"}, f"{where} ({kind})")
    if _is_composite(cls) and "kernels" in fields:
        kernels = fields["kernels"]
        if not isinstance(kernels, list) or len(kernels) < 2:
            raise ValueError(f"{where} ({kind}): 'kernels' must be a list of at least two kernel "
                             f"tables, got {kernels!r}")
    if issubclass(cls, ind.Optimized):
        check_keys(f"{where} (Optimized)", fields, {"init"}, required=("init",))
        init = fields["init"]
        if isinstance(init, dict):
            init = _component("inducing", init, f"{where}.init", trust)
        try:
            return cls(init)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}.init: expected an inducing table ({{type = ...}}) or an "
                             f"(M, D) array of inputs, got {init!r} ({err})") from err
    declared = [f for f in dataclasses.fields(cls) if f.init]
    key = {f.name: cls.file_keys.get(f.name, f.name) for f in declared}
    check_keys(f"{where} ({kind})", fields, set(key.values()),
               required=[key[f.name] for f in declared
                         if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING])
    # Decoded before the class is called, so that a malformed {fixed}/{prior} table is reported
    # with its own message rather than as the class's complaint about a dict.
    values = {}
    for f in declared:
        if key[f.name] in fields:
            value = fields[key[f.name]]
            # "none" is None where the default is not (TOML has no null).
            values[f.name] = (None if isinstance(value, str) and value == _NONE and f.default is not None
                              else _decode_field(part, value, f"{where}.{key[f.name]}", trust))
    try:
        return cls(**values)
    except TypeError as err:
        raise ValueError(f"{where}: bad fields for {kind}: {err}") from err


def _decode_field(part, value, where, trust):
    """A field's value: a component table (a kernel's ``base``) or a list of them (``kernels``)
    read as components of ``part``'s family, a list of numbers kept a list (an array or
    ``active_dims``), anything else by :func:`_decode`."""
    if isinstance(value, dict) and "type" in value:
        return _component(part, value, where, trust)
    if isinstance(value, list) and value and all(isinstance(v, dict) and "type" in v for v in value):
        return tuple(_component(part, v, f"{where}[{i}]", trust) for i, v in enumerate(value))
    return _decode(value, where)


def model_to_dict(model):
    """A model as a plain dict of its parts (what ``Model.to_dict`` returns).

    Parameters
    ----------
    model : gpdsl.Model
        The model.

    Returns
    -------
    dict
        ``{"kernel": ..., "likelihood": ..., "inducing": ..., "inference": ...}``, each as
        :func:`component_to_dict` writes it; a part that is None is omitted.
    """
    return {part: component_to_dict(getattr(model, part)) for part in _PARTS
            if getattr(model, part) is not None}


def model_parts(spec, trust=None):
    """The parts of the model a plain dict declares (``Model.from_dict`` builds the model of them).

    Parameters
    ----------
    spec : dict
        Sections ``kernel`` and ``likelihood`` (required), ``inducing``, ``inference`` and
        ``mean`` (optional), each a component table; ``data``, ``fit`` and ``output`` are allowed
        and ignored.
    trust : str, iterable of str or None, default None
        As :func:`component_from_dict`.

    Returns
    -------
    dict
        ``{"kernel": ..., "likelihood": ..., "inducing": ..., "inference": ...}``: the
        components, the keyword arguments of ``gpdsl.Model`` (a part the dict leaves out is left
        out).

    Raises
    ------
    gpdsl.UntrustedTypeError
        As :func:`component_from_dict`.
    ValueError
        An unknown section, a missing kernel or likelihood, or a bad component table (one
        nested too deeply included).
    TypeError
        ``spec`` is not a dict, or ``trust`` not a module name, an iterable of them or None.
    """
    trust = trusted_modules(trust)
    if not isinstance(spec, dict):
        raise TypeError(f"model: expected a dict of sections (kernel, likelihood, ...), got {type(spec).__name__}")
    unknown = set(spec) - set(_PARTS) - {"data", "fit", "sample", "output"}
    if unknown:
        raise ValueError(f"model: unknown sections {sorted(unknown)}; expected {sorted(_PARTS)}")
    for part in ("kernel", "likelihood"):
        if part not in spec:
            raise ValueError(f"model: the [{part}] section is missing")
    return {part: component_from_dict(part, spec[part], trust) for part in _PARTS if part in spec}


def read_model_file(path):
    """Read a TOML model file: its model tables and its ``[data]``/``[fit]``/``[sample]``/``[output]`` tables
    (``gpdsl.Model.from_toml`` and the CLI build the model with ``Model.from_dict``).

    Parameters
    ----------
    path : str or pathlib.Path
        The model file; a relative ``[data] path`` in it is taken relative to the file's folder.

    Returns
    -------
    spec : dict
        The file's tables as read (what ``gpdsl.Model.from_dict`` takes).
    config : dict
        ``{"data": {...}, "fit": {...}, "output": {...}}``, each table empty where absent, and
        ``"sample"`` where the file has a ``[sample]`` table (``gpdsl run`` then samples).

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    ValueError
        Invalid TOML, or a data/fit/output entry that is not a table.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not valid TOML: not UTF-8 text ({err})") from err
    spec, config = _parsed(text, path)
    if isinstance(config["data"].get("path"), str) and config["data"]["path"] \
            and not Path(config["data"]["path"]).is_absolute():
        config["data"]["path"] = str(path.parent / config["data"]["path"])
    return spec, config


def read_model_source(source):
    """Read a model file or a model's TOML text (what ``gpdsl.Model.from_toml`` takes).

    ``source`` is a path where it is an ``os.PathLike`` or a string naming an existing file;
    otherwise a string holding a line break is TOML text (a model has at least a ``kernel`` and a
    ``likelihood``, so its text always has one: ``Model.to_toml()``'s output).

    Parameters
    ----------
    source : str or os.PathLike
        The file (as :func:`read_model_file`), or the text; a relative ``[data] path`` in text is
        left relative to the working folder.

    Returns
    -------
    spec, config
        As :func:`read_model_file`.

    Raises
    ------
    TypeError
        ``source`` is not a str or os.PathLike.
    FileNotFoundError
        A one-line string that names no file.
    ValueError
        Invalid TOML, or a data/fit/output entry that is not a table.
    """
    if isinstance(source, os.PathLike) or (isinstance(source, str) and os.path.isfile(source)):
        return read_model_file(source)
    if not isinstance(source, str):
        raise TypeError(f"from_toml: expected a model file's path or a model's TOML text, got {type(source).__name__}")
    if "\n" not in source:
        shown = source if len(source) <= 80 else source[:80] + "..."
        raise FileNotFoundError(f"from_toml: model file not found: {shown!r} (and not a model's TOML text, "
                                "which has one line per key)")
    return _parsed(source, "model text")


def _parsed(text, source):
    """(spec, config) of TOML ``text`` read from ``source`` (a path or a description), as
    :func:`read_model_file` returns them before taking a relative ``[data] path`` to the file's folder."""
    try:
        spec = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{source}: not valid TOML: {err}") from err
    except RecursionError as err:
        # tomllib reads nested arrays and inline tables recursively: some hundreds of levels
        # exhaust the interpreter's stack before any check of ours can count them.
        raise ValueError(f"{source}: not read: its arrays or inline tables are nested too deeply for the "
                         f"TOML reader (a model nests at most {MAX_NESTING} levels)") from err
    config = {k: spec.get(k, {}) for k in ("data", "fit", "output")}
    if "sample" in spec:
        # Present only where the file has it: a [sample] table, even empty, makes `gpdsl run` sample.
        config["sample"] = spec["sample"]
    for name, table in config.items():
        # `data = "x.csv"` is valid TOML but not a table; say so rather than fail on it later.
        if not isinstance(table, dict):
            raise ValueError(f"{source}: [{name}] must be a table, got {name} = {table!r}")
    return spec, config
