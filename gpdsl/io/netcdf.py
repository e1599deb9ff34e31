"""Reading posteriors back: :func:`load` (a netCDF file written by :meth:`gpdsl.Posterior.save`)
and :func:`from_xarray` (a dataset from :meth:`gpdsl.Posterior.to_xarray`).

A load checks the format version, a checksum of the content and the layout the model implies
(:mod:`gpdsl.io.layout`) before it builds anything (:class:`PosteriorFileError` otherwise).

xarray (and pandas behind it) is imported by the functions that read datasets, not with the
module: ``import gpdsl`` and a fit do not need it, and it took a third of a second.
"""
from __future__ import annotations

import io
import json
import os

import numpy as np

from ..checks import is_integer, is_number
from ..components import UntrustedTypeError, trusted_modules
from ..diagnostics import FitDiagnostics
from ..inducing import Selection
from ..methods.common import PredictiveState
from ..methods.kronecker_state import KroneckerState
from ..model import Model
from ..multioutput import saved_output_names
from ..posterior import FitRecord, Posterior
from ..scaling import Standardization
from .files import check_path
from .xarray_import import xarray
from .layout import (FORMAT_VERSION, HYPERPARAMETERS_SINCE, KRONECKER_LAYOUT, LAYOUT, OPTIONAL_PARTS, Part,
                     PosteriorFileError, checksum, hyperparameter_entries, model_layout, variable_dims)

# The predictive state of each form (gpdsl.io.layout.STATE_FORMS), rebuilt by its ``from_saved``.
_STATES = {"whitened": PredictiveState, "kronecker": KroneckerState}


def _error(source, item, problem):
    """The PosteriorFileError for ``item`` (a variable or attribute) of ``source``."""
    return PosteriorFileError(f"{source}: {item}: {problem}")


def from_xarray(ds, *, trust=None):
    """Rebuild a working :class:`Posterior` from :meth:`Posterior.to_xarray` output.

    The dataset is checked before anything is built from it: its ``format_version`` must
    be :data:`FORMAT_VERSION` (or 1, without the fit record) and its ``checksum`` must match the content (so a dataset
    damaged, or changed without its checksum being recomputed, after ``to_xarray`` is refused); ``model_spec`` must describe a model that the
    ``inference``, ``likelihood`` and ``kernel`` attributes describe too; the variables and
    attributes must be exactly those that ``to_xarray`` writes for that model's method, the
    variables with their dims and integer or finite float64 values, the attributes of their
    type, with one variable per hyperparameter of the model's parameter table, of its shape
    (and positive where the model declares it so).

    The checksum detects damage, not deliberate edits: anyone can recompute it.  So ``model_spec`` is read
    as :meth:`Model.from_dict` reads a dict: its types resolve only to classes registered in this
    process, and a module is imported only where ``trust`` names it.

    Parameters
    ----------
    ds : xarray.Dataset
        As :meth:`Posterior.to_xarray` wrote it.
    trust : str, iterable of str or None, default None
        Modules the reader may import to find a ``"module:QualName"`` component type in
        ``model_spec`` (:meth:`Model.from_dict`).

    Returns
    -------
    Posterior

    Raises
    ------
    TypeError
        ``ds`` is not an xarray.Dataset.
    gpdsl.UntrustedTypeError
        ``model_spec`` names a type whose class is not registered and whose module is not
        trusted (nothing was imported).
    PosteriorFileError
        A check failed; the message names the variable or attribute.
    """
    xr = xarray()

    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"from_xarray: ds must be an xarray.Dataset, got {type(ds).__name__}")
    return _posterior_from(ds, "dataset", trusted_modules(trust))


def load(path, *, trust=None):
    """Load a posterior written by :meth:`Posterior.save`, checked as :func:`from_xarray` checks.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.nc`` file written by :meth:`Posterior.save`.
    trust : str, iterable of str or None, default None
        As :func:`from_xarray`: loading imports no module that ``trust`` does not name.

    Returns
    -------
    Posterior

    Raises
    ------
    FileNotFoundError
        There is no file at ``path``.
    gpdsl.UntrustedTypeError
        As :func:`from_xarray`.
    PosteriorFileError
        The file is not a readable netCDF-3 file or fails a check of :func:`from_xarray`
        (files written before format version 1, without the checksum, included); the
        message names the file and the variable or attribute at fault.
    """
    xr = xarray()

    path = check_path("load", path)
    trust = trusted_modules(trust)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"load: posterior file not found: {path}")
    with open(path, "rb") as fh:
        content = fh.read()
    # Parsed from memory, so that no memory map of the file outlives this call.  The reader's
    # failures on a damaged file are not documented (from TypeError to IndexError): any of
    # them means the file cannot be read.
    try:
        with xr.open_dataset(io.BytesIO(content), engine="scipy") as ds:
            ds = ds.load()
    except Exception as err:
        raise PosteriorFileError(f"{path}: not a readable netCDF-3 file "
                                 f"({type(err).__name__}: {err})") from err
    return _posterior_from(ds, path, trust)


def _posterior_from(ds, source, trust):
    """The :class:`Posterior` in ``ds`` (read from ``source``), after :func:`_validated`."""
    model, local, names, held, form = _validated(ds, source, trust)
    try:
        state = _STATES[form].from_saved({name: variable.values for name, variable in ds.variables.items()})
    except ValueError as err:       # the Kronecker factors' shapes and noise (KroneckerState's checks)
        raise _error(source, "variables 'predictive_kronecker_*'", str(err)) from err
    sites, total_sweeps = local.load(ds) if local is not None else (None, 0)
    selection = None
    if "selected_index" in ds:
        selection = Selection(Z=state.Z, indices=ds["selected_index"].values,
                              criterion=ds["selection_criterion"].values, stopped=ds.attrs["selection_stopped"])
    history = json.loads(ds.attrs["reinit_history"]) if "reinit_history" in ds.attrs else None
    standardization = _standardization(ds, source)
    record = FitRecord(diagnostics=_diagnostics(ds, source, total_sweeps), priors=json.loads(ds.attrs["priors"]),
                       fixed=json.loads(ds.attrs["fixed"]) + list(held), sites=sites, selection=selection, reinit_history=history,
                       subsample=({"rows": int(ds.attrs["subsample_rows"]),
                                   "objective": float(ds.attrs["subsample_objective"])}
                                  if "subsample_rows" in ds.attrs else None))
    return Posterior(model=model, values={**{name: ds[name].values for name in names}, **held}, state=state,
                     log_evidence=ds.attrs["log_evidence"], log_prior=ds.attrs["log_prior"],
                     standardization=standardization, record=record,
                     output_names=(saved_output_names(ds["output"].values, ds.sizes["output"])
                                   if "output" in ds.variables else None))


def _diagnostics(ds, source, total_sweeps):
    """The FitDiagnostics in ``ds``: its ``diagnostics`` attribute, which must agree with the flat
    attributes that repeat its fields for xarray readers; a file written before the record existed
    (no such attribute) gets one with ``stop_reason="unrecorded"`` and the flags it holds."""
    attrs = ds.attrs
    flat = {"converged": bool(attrs["converged"]), "n_iterations": int(attrs["n_iterations"]),
            "jitter": float(attrs["jitter"]), "ridge": attrs["ridge"] or None,
            "constant_model": bool(attrs["constant_model"]), "reinit_stop": attrs.get("reinit_stop"),
            "subsample": int(attrs["subsample_rows"]) if "subsample_rows" in attrs else None}
    if "diagnostics" not in attrs:
        return FitDiagnostics("unrecorded", recorded_converged=flat.pop("converged"), local_sweeps=int(total_sweeps),
                              **flat)
    try:
        diagnostics = FitDiagnostics.from_json(attrs["diagnostics"])
    except (TypeError, ValueError, KeyError) as err:
        raise _error(source, "attribute 'diagnostics'", f"not a fit record: {err}") from err
    for name, value in flat.items():
        # An old minibatch record's flag is the writer's True, read as False (unconfirmed_stop).
        if name == "converged" and diagnostics.unconfirmed_stop and value == diagnostics.recorded_converged:
            continue
        if getattr(diagnostics, name) != value:
            raise _error(source, "attribute 'diagnostics'",
                         f"its {name} is {getattr(diagnostics, name)!r} but the attribute {name!r} is {value!r}")
    return diagnostics


def _standardization(ds, source):
    """The Standardization in ``ds`` (validated by :func:`_validated`), or None."""
    if "standardization_x_mean" not in ds:
        return None
    # A multi-output posterior's target mean and scale are variables over "output" (one an output).
    y = {name: ds[name].values if name in ds.variables else ds.attrs[name]
         for name in ("standardization_y_mean", "standardization_y_scale")}
    try:
        return Standardization(ds["standardization_x_mean"].values, ds["standardization_x_scale"].values,
                               y["standardization_y_mean"], y["standardization_y_scale"])
    except ValueError as err:
        raise _error(source, "variables and attributes 'standardization_*'", str(err)) from err


def _validated(ds, source, trust):
    """Check ``ds`` as :func:`from_xarray` describes; return ``(model, its LocalStateFormat or
    None, the names of the hyperparameters in ds, {name: declared value} of those the model gained
    after the file's version (layout.HYPERPARAMETERS_SINCE), the predictive state's form (a key of
    layout.STATE_FORMS: "kronecker" where a variable of the Kronecker form is there))`` or raise
    :class:`PosteriorFileError`."""
    attrs = ds.attrs
    version = attrs.get("format_version")
    if version is None:
        raise _error(source, "attribute 'format_version'",
                     f"missing: not a gpdsl posterior of format version {FORMAT_VERSION} (one written "
                     "by an older gpdsl lacks it and its checksum: load it with that version and save it again)")
    if not is_integer(version) or not 1 <= version <= FORMAT_VERSION:
        raise _error(source, "attribute 'format_version'",
                     f"expected {FORMAT_VERSION} (files of versions 1 to {FORMAT_VERSION - 1} are read too), "
                     f"got {version!r}")
    stored = attrs.get("checksum")
    if not isinstance(stored, str) or stored != checksum(ds):
        raise _error(source, "attribute 'checksum'", "missing or not the checksum of the content: the file "
                     "was damaged or edited after it was written")

    spec = _attribute(ds, source, "model_spec", "json-object")
    try:
        model = Model.from_dict(spec, trust=trust)
    except UntrustedTypeError as err:
        raise UntrustedTypeError(f"{source}: attribute 'model_spec': {err}") from err
    except (TypeError, ValueError, KeyError) as err:
        raise _error(source, "attribute 'model_spec'", f"does not describe a model: {err}") from err
    local = model.inference.local_state_for(model.likelihood)
    # The form is what the file holds: a variable of the Kronecker form's own makes it that form.
    kronecker = sorted((set(KRONECKER_LAYOUT["whitened"].variables) - set(LAYOUT["whitened"].variables))
                       & set(ds.variables))
    form = "kronecker" if kronecker else "whitened"
    try:
        state_layout = model_layout(model, form)
    except ValueError as err:
        raise _error(source, f"variable {kronecker[0]!r}", f"unexpected: {err}") from err
    layout = {**state_layout,
              **({local.name: Part(local.variables, local.attributes)} if local is not None else {})}
    # Version 2 added the fit's record ("diagnostics"); a version-1 file has none.
    parts = (["common", "whitened"] + (["diagnostics"] if version >= 2 else [])
             + ([local.name] if local is not None else []) + (["output"] if "output" in layout else []))
    # An optional part is expected whole as soon as one of its items is there.
    parts += [part for part in OPTIONAL_PARTS
              if any(name in ds.variables for name in LAYOUT[part].variables)
              or any(name in attrs for name in LAYOUT[part].attributes)]

    expected_attrs = {name: kind for part in parts for name, kind in layout[part].attributes.items()}
    for name, kind in expected_attrs.items():
        _attribute(ds, source, name, kind)
    extra = sorted(set(attrs) - set(expected_attrs))
    if extra:
        raise _error(source, f"attribute {extra[0]!r}", f"unexpected in a {attrs['inference']} posterior")
    # The descriptions must be those of the model in model_spec: a spec edited to another
    # kernel or method would otherwise predict with it.
    described = {"inference": type(model.inference).__name__, "likelihood": model.likelihood.describe(),
                 "kernel": model.kernel.describe(), "local_state": local.name if local is not None else None}
    for name, expected in described.items():
        if attrs.get(name) != expected:
            raise _error(source, f"attribute {name!r}",
                         f"expected {expected!r} (from model_spec), got {attrs.get(name)!r}")
    for name, low, high in (("jitter", 0.0, np.inf), ("ep_damping", 0.0, 1.0)):
        if name in attrs and not low <= attrs[name] < high:
            raise _error(source, f"attribute {name!r}",
                         f"expected a number in [{low}, {high}), got {attrs[name]!r}")

    expected_vars = {name: rule for part in parts for name, rule in layout[part].variables.items()}
    for name, (dims, kind) in expected_vars.items():
        _variable(ds, source, name, dims, kind)
    m = ds.sizes["inducing"]
    if "inducing_bis" in expected_vars and ds.sizes["inducing_bis"] != m:
        raise _error(source, "dimension 'inducing_bis'", f"has size {ds.sizes['inducing_bis']}, expected {m} "
                     "(the size of 'inducing')")
    if attrs["M"] != m:
        raise _error(source, "attribute 'M'", f"expected {m} (the size of 'inducing'), got {attrs['M']!r}")
    n_latent = model.likelihood.n_latent
    if n_latent > 1 and ds.sizes["class"] != n_latent:
        raise _error(source, "dimension 'class'", f"has size {ds.sizes['class']}, expected {n_latent} (the latent "
                     f"functions of {model.likelihood.describe()})")
    outputs = getattr(model.kernel, "output_count", None)
    if outputs is not None and ds.sizes["output"] != outputs:
        raise _error(source, "dimension 'output'", f"has size {ds.sizes['output']}, expected {outputs} (the outputs "
                     f"of {model.kernel.describe()})")

    entries = _hyperparameter_entries(model, ds["Z"].values, source)
    # A hyperparameter the model gained after the file's version: its declared value, held.
    held = {e.name: e.value for e in entries
            if version < HYPERPARAMETERS_SINCE.get(e.name, 0) and e.name not in ds.variables}
    entries = [e for e in entries if e.name not in held]
    for e in entries:
        values = _variable(ds, source, e.name, variable_dims(e.name, e.value, e.dims), "float")
        if values.shape != e.value.shape:
            raise _error(source, f"variable {e.name!r}", f"has shape {values.shape}, expected {e.value.shape}")
        if e.positive and not np.all(values > 0):
            raise _error(source, f"variable {e.name!r}", f"expected positive values, got {values!r}")
    names = [e.name for e in entries]
    extra = sorted(set(ds.variables) - set(expected_vars) - set(names))
    if extra:
        raise _error(source, f"variable {extra[0]!r}",
                     f"unexpected: the hyperparameters of this model are {names}")

    # The attributes that name hyperparameters name this model's (Z is fixed as "inducing.Z").
    for name, value, allowed in (("ridge", [attrs["ridge"]] if attrs["ridge"] else [], names),
                                 ("fixed", json.loads(attrs["fixed"]), names + ["inducing.Z"]),
                                 ("priors", json.loads(attrs["priors"]), names)):
        unknown = [key for key in value if key not in allowed]
        if unknown:
            raise _error(source, f"attribute {name!r}",
                         f"names {unknown!r}, which are not hyperparameters of this model")
    return model, local, names, held, form


def _hyperparameter_entries(model, Z, source):
    """The parameter-table entries of the hyperparameters (and a method's variational
    parameters) that a posterior of ``model`` with inducing inputs (or, for dense methods,
    training inputs) ``Z`` holds (:func:`gpdsl.io.layout.hyperparameter_entries`), or
    PosteriorFileError naming ``model_spec`` where the model does not fit Z."""
    try:
        return hyperparameter_entries(model, Z)
    except ValueError as err:
        raise _error(source, "attribute 'model_spec'",
                     f"does not fit the {Z.shape[1]} feature(s) of Z: {err}") from err


def _json_of(kind):
    """A check that a string holds JSON of the Python type ``kind``."""
    def problem(value):
        try:
            parsed = json.loads(value)
        except (TypeError, ValueError):
            return "expected a JSON string"
        except RecursionError:
            # json reads nested arrays and objects recursively: too deep a nesting exhausts the stack.
            return "nested too deeply to be read as JSON"
        return None if isinstance(parsed, kind) else f"expected JSON of a {kind.__name__}"
    return problem


# Attribute kinds: a check returning what is wrong with a value, or None.
_ATTRIBUTE_KINDS = {
    "str": lambda v: None if isinstance(v, str) else "expected a string",
    "count": lambda v: None if is_integer(v) and v >= 0 else "expected a non-negative integer",
    "flag": lambda v: None if is_integer(v) and v in (0, 1) else "expected 0 or 1",
    "real": lambda v: None if is_number(v) and np.isfinite(v) else "expected a finite number",
    "json-object": _json_of(dict),
    "json-list": _json_of(list),
}


def _attribute(ds, source, name, kind):
    """The attribute ``name`` (parsed, for JSON kinds), or PosteriorFileError unless it is
    present and of ``kind`` (a key of :data:`_ATTRIBUTE_KINDS`)."""
    item = f"attribute {name!r}"
    if name not in ds.attrs:
        raise _error(source, item, "missing")
    value = ds.attrs[name]
    problem = _ATTRIBUTE_KINDS[kind](value)
    if problem is not None:
        raise _error(source, item, f"{problem}, got {_short(value)}")
    return json.loads(value) if kind.startswith("json") else value


def _float_problem(values):
    """What is wrong with values that must be finite float64 numbers, or None."""
    if values.dtype != np.float64:
        return f"expected float64 values, got dtype {values.dtype}"
    bad = values.size - np.count_nonzero(np.isfinite(values))
    return f"expected finite values, got {bad} NaN or infinite" if bad else None


# Variable kinds: a check returning what is wrong with the values, or None.
_VARIABLE_KINDS = {
    "float": _float_problem,
    "count": lambda v: None if v.dtype.kind in "iu" and np.all(v >= 0) else "expected non-negative integers",
    "index": lambda v: (None if v.dtype.kind in "iu" and np.array_equal(v, np.arange(v.size))
                        else "expected the integers 0, 1, ..., n - 1"),
    # Output names (gpdsl.multioutput.saved_output_names): distinct integers or strings.
    "labels": lambda v: (None if (v.dtype.kind in "iu" or all(isinstance(x, str) for x in v.tolist()))
                         and len(set(v.tolist())) == v.size else "expected distinct integers or strings"),
}


def _variable(ds, source, name, dims, kind):
    """The values of variable ``name``, or PosteriorFileError unless it is present with
    ``dims`` and of ``kind`` (a key of :data:`_VARIABLE_KINDS`)."""
    item = f"variable {name!r}"
    if name not in ds.variables:
        raise _error(source, item, "missing")
    variable = ds.variables[name]
    if variable.dims != tuple(dims):
        raise _error(source, item, f"has dims {variable.dims}, expected {tuple(dims)}")
    problem = _VARIABLE_KINDS[kind](variable.values)
    if problem is not None:
        raise _error(source, item, problem)
    return variable.values


def _short(value, limit=80):
    """repr(value), cut at ``limit`` characters for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


__all__ = ["load", "from_xarray", "PosteriorFileError", "FORMAT_VERSION"]
