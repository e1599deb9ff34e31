"""Declarative model files: Model <-> plain dict <-> TOML.

A component is ``{"type": "<ClassName>", <field>: <value>, ...}``; a hyperparameter value is a
number or list, ``{"fixed": value}``, or ``{"prior": "Gamma", "shape": a, "rate": b}`` /
``{"prior": "LogNormal", "mu": m, "sigma": s}``.  A TOML model file holds the four tables
``[kernel] [likelihood] [inducing] [inference]`` plus ``[data]`` (``path``, ``target``,
optional ``features``), and optionally ``[fit]`` (keyword arguments of ``Model.fit``) and
``[output]`` (``posterior``, ``plot``).  TOML has no null: a field left at a ``None`` default is
omitted, and a field set to ``None`` against another default (``GreedyVariance(first_round_max_m=None)``)
is written as the string ``"none"``.
"""
from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import numpy as np

from . import inducing as ind
from . import inference as inf
from . import kernels as ker
from . import likelihoods as lik
from . import priors
from .parameters import Fixed

_COMPOSITES = {"Sum": ker.Sum, "Product": ker.Product}
_NONE = "none"
_PRIORS = {"Gamma": priors.Gamma, "LogNormal": priors.LogNormal}
_PARTS = {
    "kernel": {**ker.KERNELS, **_COMPOSITES},
    "likelihood": lik.LIKELIHOODS,
    "inducing": ind.INDUCING,
    "inference": inf.INFERENCE,
}


def _encode(value):
    if isinstance(value, Fixed):
        return {"fixed": _encode(value.value)}
    if isinstance(value, priors.ScipyPrior):
        # A frozen scipy distribution cannot be written back; keep its description and start.
        return {"prior": "scipy", "description": priors.describe(value), "initial": value.initial_value()}
    if isinstance(value, priors.Prior):
        return {"prior": type(value).__name__, **{k: v for k, v in dataclasses.asdict(value).items()
                                                   if v is not None}}
    if priors.as_prior(value) is not None:
        return _encode(priors.as_prior(value))
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value


def _decode(value):
    if isinstance(value, dict) and "fixed" in value:
        return Fixed(_decode(value["fixed"]))
    if isinstance(value, dict) and "prior" in value:
        kind = value["prior"]
        if kind == "scipy":
            return value["initial"]
        if kind not in _PRIORS:
            raise ValueError(f"unknown prior {kind!r}; known: {sorted(_PRIORS)}")
        return _PRIORS[kind](**{k: v for k, v in value.items() if k != "prior"})
    return value


def component_to_dict(obj):
    if isinstance(obj, ker._Composite):
        return {"type": type(obj).__name__, "kernels": [component_to_dict(k) for k in obj.kernels]}
    if isinstance(obj, ind.Optimized):
        return {"type": "Optimized", "init": component_to_dict(obj.init)}
    out = {"type": type(obj).__name__}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is not None:
            out[f.name] = _encode(value)
        elif f.default is not None:
            out[f.name] = _NONE
    return out


def component_from_dict(part, spec):
    registry = _PARTS[part]
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError(f"{part}: expected a table with a 'type' key, got {spec!r}")
    kind = spec["type"]
    if kind not in registry:
        raise ValueError(f"{part}: unknown type {kind!r}; known: {', '.join(sorted(registry))}")
    fields = {k: v for k, v in spec.items() if k != "type"}
    if kind in _COMPOSITES:
        return registry[kind](tuple(component_from_dict("kernel", k) for k in fields["kernels"]))
    if kind == "Optimized":
        init = fields.get("init")
        return ind.Optimized(component_from_dict("inducing", init) if isinstance(init, dict) else init)
    defaults = {f.name: f.default for f in dataclasses.fields(registry[kind])}
    try:
        return registry[kind](**{k: None if v == _NONE and defaults.get(k) is not None else _decode(v)
                                 for k, v in fields.items()})
    except TypeError as err:
        raise ValueError(f"{part}: bad fields for {kind}: {err}") from err


def model_to_dict(model):
    return {part: component_to_dict(getattr(model, part)) for part in _PARTS
            if getattr(model, part) is not None}


def model_from_dict(spec):
    from .model import Model
    unknown = set(spec) - set(_PARTS) - {"data", "fit", "output"}
    if unknown:
        raise ValueError(f"model: unknown sections {sorted(unknown)}; expected {sorted(_PARTS)}")
    for part in ("kernel", "likelihood"):
        if part not in spec:
            raise ValueError(f"model: the [{part}] section is missing")
    parts = {part: component_from_dict(part, spec[part]) for part in _PARTS if part in spec}
    return Model(**parts)


def model_from_toml(path):
    """Read a TOML model file; returns ``(model, config)`` where config has data/fit/output."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    with path.open("rb") as fh:
        try:
            spec = tomllib.load(fh)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"{path}: not valid TOML: {err}") from err
    config = {k: spec.get(k, {}) for k in ("data", "fit", "output")}
    if config["data"].get("path") and not Path(config["data"]["path"]).is_absolute():
        config["data"]["path"] = str(path.parent / config["data"]["path"])
    return model_from_dict(spec), config
