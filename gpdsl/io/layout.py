"""The layout of a saved posterior: what :meth:`gpdsl.Posterior.to_xarray` writes, by part, its
format version and the checksum of its content, and the error of a file that breaks them.

:mod:`gpdsl.io.netcdf` checks a file against this layout before it builds anything from it.
"""
from __future__ import annotations

import hashlib
import json
from typing import NamedTuple

import numpy as np

from ..parameters import declared_value

# Version of the layout that to_xarray writes; raise it when the layout changes.  Version 2 added
# the "diagnostics" attribute; version-1 files still load (their record says "unrecorded").
# Version 3 has the hyperparameters of HYPERPARAMETERS_SINCE.
FORMAT_VERSION = 3
# Hyperparameters a model gained at a format version: a file of an earlier version has no variable
# for one, and its model held the value it declares (robust-max's epsilon was a constant of the
# likelihood before version 3); :func:`gpdsl.load` reads that value and lists it as held.
HYPERPARAMETERS_SINCE = {"likelihood.epsilon": 3}


class PosteriorFileError(ValueError):
    """A posterior file or dataset that :func:`load` or :func:`from_xarray` cannot read: not a
    readable netCDF-3 file, of another format version, damaged or edited without its checksum
    being recomputed (the checksum does not match), or not laid out as ``to_xarray`` writes its model.  The message names the file
    (or ``dataset``) and the variable or attribute at fault."""


def checksum(ds):
    """SHA-256 (hex) of a dataset's content: every variable, coordinates included, by name,
    dims, kind, shape and values, and every attribute but ``checksum``, in name order.

    Integers are hashed as int64 and floats as float64, little-endian: netCDF-3 stores an
    int64 as int32, so the writer's and the reader's dtypes differ while the content does not.

    Parameters
    ----------
    ds : xarray.Dataset
        A posterior's dataset (:meth:`gpdsl.Posterior.to_xarray`).

    Returns
    -------
    str
        ``"sha256:<hex digest>"``.
    """
    digest = hashlib.sha256()
    items = [(name, var.dims, var.values) for name, var in sorted(ds.variables.items())]
    items += [(name, None, value) for name, value in sorted(ds.attrs.items()) if name != "checksum"]
    for name, dims, value in items:
        if isinstance(value, str):
            kind, shape, payload = "str", (), value.encode("utf-8")
        else:
            array = np.asarray(value)
            if array.dtype.kind in "biu":
                kind, payload = "int", np.ascontiguousarray(array, dtype="<i8")
            elif array.dtype.kind == "f":
                kind, payload = "float", np.ascontiguousarray(array, dtype="<f8")
            elif array.dtype.kind in "UO" and all(isinstance(v, str) for v in array.ravel().tolist()):
                # Names (the "output" coordinate): "<U3" written, object read back from netCDF-3.
                kind, payload = "str", json.dumps(array.tolist()).encode("utf-8")
            else:   # never written by to_xarray; hashed so that a file holding one fails the check
                kind, payload = array.dtype.str, repr(array.tolist()).encode("utf-8")
            shape = array.shape
        # Each item is framed by a header that gives its length, so no two contents hash alike.
        header = json.dumps([name, dims, kind, list(shape), memoryview(payload).nbytes])
        digest.update(header.encode("utf-8") + b"\n")
        digest.update(payload)
    return "sha256:" + digest.hexdigest()


def hyperparameter_entries(model, Z):
    """The parameter-table entries of the hyperparameters (and a method's variational
    parameters) that a posterior of ``model`` with inducing inputs (or, for dense methods,
    training inputs) ``Z`` holds; Z itself, held as state, is not one of them.

    Parameters
    ----------
    model : gpdsl.Model
        The posterior's model.
    Z : ndarray, shape (M, D)
        The posterior's ``state.Z``.

    Returns
    -------
    list of gpdsl.parameters.Entry

    Raises
    ------
    ValueError
        The model does not fit Z's number of features (``parameter_table``'s error).
    """
    # The entries depend on X only through its number of columns, except that known
    # heteroscedastic variances (data, not hyperparameters) must have as many rows, and so must
    # a dense method's per-point variational parameters (VGP; Z is X for dense methods).
    known = getattr(model.likelihood, "known", False)
    rows = np.size(declared_value(model.likelihood.variance)) if known else Z.shape[0]
    # Zeros, not garbage: a kernel that checks a start against X's range (ChangePoint) finds none.
    table = model.parameter_table(np.zeros((rows, Z.shape[1])), Z if model.sparse else None)
    return [e for e in table.entries if e.name != "inducing.Z"]


def variable_dims(name, value, dims=None):
    """The dims of the variable that holds hyperparameter ``name``: none for a scalar, the
    entry's declared ``dims`` (:attr:`gpdsl.parameters.Entry.dims`, e.g. an ARD length-scale's
    ``("feature",)``), else ``("<field>_index",)`` after the last part of the name (the entries
    made outside the components: a method's variational parameters).

    Parameters
    ----------
    name : str
        The entry's name (``"kernel.lengthscale"``).
    value : ndarray
        Its value.
    dims : tuple of str or None, optional
        The entry's declared dims.

    Returns
    -------
    tuple of str
    """
    if np.ndim(value) == 0:
        return ()
    if dims is not None:
        return tuple(dims)
    return (name.rsplit(".", 1)[-1] + "_index",)


class Part(NamedTuple):
    """Variables (name -> (dims, kind)) and attributes (name -> kind) that to_xarray writes together."""

    variables: dict
    attributes: dict


# What to_xarray writes, by part.  A file holds "common"; the predictive cache, "whitened" (every
# method's: see methods.common.PredictiveState); the part of its method's
# local state, if any; and "selection", "reinit" and "standardization" when the fit made them
# (whole or not at all).  Its hyperparameters, one variable each, are those of its model's parameter table.
LAYOUT = {
    "common": Part(
        {"inducing": (("inducing",), "index"), "inducing_bis": (("inducing_bis",), "index"),
         "feature": (("feature",), "index"), "Z": (("inducing", "feature"), "float"),
         "q_mean": (("inducing",), "float"), "q_cov": (("inducing", "inducing_bis"), "float")},
        {"format_version": "count", "checksum": "str", "inference": "str", "likelihood": "str", "kernel": "str",
         "log_evidence": "real", "log_prior": "real", "converged": "flag", "constant_model": "flag",
         "ridge": "str", "n_iterations": "count", "jitter": "real", "gpdsl_version": "str",
         "priors": "json-object", "fixed": "json-list", "model_spec": "json-object", "M": "count"}),
    "whitened": Part(
        {"predictive_whitened_weights": (("inducing",), "float"),
         "predictive_whitened_correction": (("inducing", "inducing_bis"), "float"),
         "predictive_chol": (("inducing", "inducing_bis"), "float")}, {}),
    "selection": Part(
        {"selected_index": (("inducing",), "count"), "selection_criterion": (("inducing",), "float")},
        {"selection_stopped": "str"}),
    "reinit": Part({}, {"reinit_history": "json-list", "reinit_stop": "str"}),
    "subsample": Part({}, {"subsample_rows": "count", "subsample_objective": "real"}),
    # The fit's record (gpdsl.diagnostics.FitDiagnostics as JSON), from format version 2 on.
    "diagnostics": Part({}, {"diagnostics": "json-object"}),
    "standardization": Part(
        {"standardization_x_mean": (("feature",), "float"), "standardization_x_scale": (("feature",), "float")},
        {"standardization_y_mean": "real", "standardization_y_scale": "real"}),
}
LAYOUT["coupling"] = Part({"predictive_whitened_coupling": (("class", "inducing", "inducing_bis"), "float")}, {})
OPTIONAL_PARTS = ("selection", "reinit", "subsample", "standardization", "coupling")

# A posterior of K latent functions (a K-class likelihood) has one q(u_k) and one predictive
# cache a class (gpdsl.methods.common.PredictiveState), along the dimension "class" (0..K-1; the
# labels are the likelihood's, in model_spec); multi-class Laplace adds the part "coupling".
CLASS_LAYOUT = {
    "common": Part({**LAYOUT["common"].variables, "class": (("class",), "index"),
                    "q_mean": (("inducing", "class"), "float"),
                    "q_cov": (("class", "inducing", "inducing_bis"), "float")}, LAYOUT["common"].attributes),
    "whitened": Part({"predictive_whitened_weights": (("inducing", "class"), "float"),
                      "predictive_whitened_correction": (("class", "inducing", "inducing_bis"), "float"),
                      "predictive_chol": (("inducing", "inducing_bis"), "float")}, {}),
}
# A kernel per latent function (gpdsl.kernels.Separate) has one K_uu factor a class.
SEPARATE_WHITENED = Part({**CLASS_LAYOUT["whitened"].variables,
                          "predictive_chol": (("class", "inducing", "inducing_bis"), "float")}, {})
# A multi-output model (gpdsl.multioutput): its Z, q(u) and predictive cache are over the long
# inducing rows (M P for Z shared by the outputs) as any model's over its inducing inputs, and Z
# and the inputs' standardisation are over the long rows' D+1 columns, dimension "column";
# "feature" is the D input columns the hyperparameters' dims name (an ARD length-scale), "output"
# the outputs, labelled 0..P-1 or by the fit's output names (distinct strings, or integers within
# int32), over which are B's W and kappa, a noise variance an output, and the targets' mean and
# scale (a multi-output fit standardises each output's targets by its own, so they are variables
# over "output", not the single-output layout's two attributes).
OUTPUT_LAYOUT = {
    "common": Part({**LAYOUT["common"].variables, "column": (("column",), "index"),
                    "Z": (("inducing", "column"), "float")}, LAYOUT["common"].attributes),
    "standardization": Part({"standardization_x_mean": (("column",), "float"),
                             "standardization_x_scale": (("column",), "float"),
                             "standardization_y_mean": (("output",), "float"),
                             "standardization_y_scale": (("output",), "float")}, {}),
    "output": Part({"output": (("output",), "labels")}, {}),
}
# The Kronecker form of a multi-output Exact fit's predictive state
# (gpdsl.methods.kronecker_state.KroneckerState): no q_cov, correction or Cholesky factor, each
# (N P, N P), but the factors they come from -- the noise variance of each output, the
# eigenvectors (columns) and eigenvalues of B~ = D^-1/2 B D^-1/2 over "output" x "output_eigen",
# and of K_x over "point" x "point_eigen" (the N inputs of the grid) -- beside the whitened weights.
# It replaces OUTPUT_LAYOUT's "common" (without q_cov and "inducing_bis") and LAYOUT's "whitened";
# a reader that knows only those refuses such a file (q_cov missing) rather than misreading it.
KRONECKER_LAYOUT = {
    "common": Part({name: rule for name, rule in OUTPUT_LAYOUT["common"].variables.items()
                    if name not in ("q_cov", "inducing_bis")}, LAYOUT["common"].attributes),
    "whitened": Part({"predictive_whitened_weights": (("inducing",), "float"),
                      "output_eigen": (("output_eigen",), "index"), "point": (("point",), "index"),
                      "point_eigen": (("point_eigen",), "index"),
                      "predictive_kronecker_noise": (("output",), "float"),
                      "predictive_kronecker_output_vectors": (("output", "output_eigen"), "float"),
                      "predictive_kronecker_output_values": (("output_eigen",), "float"),
                      "predictive_kronecker_input_vectors": (("point", "point_eigen"), "float"),
                      "predictive_kronecker_input_values": (("point_eigen",), "float")}, {}),
}
# The forms of a predictive state (its ``form``) and the parts each replaces.
STATE_FORMS = {"whitened": {}, "kronecker": KRONECKER_LAYOUT}


def model_layout(model, form="whitened"):
    """The parts a posterior of ``model`` is written in: :data:`LAYOUT`, with :data:`CLASS_LAYOUT`'s
    for a likelihood of K > 1 latent functions, and :data:`SEPARATE_WHITENED` for a kernel of K
    outputs (one Cholesky factor a latent function: ``PredictiveState.chol`` (K, M, M)); a
    multi-output kernel's (``output_count`` P), :data:`OUTPUT_LAYOUT`'s, and with the state
    ``form`` "kronecker" :data:`KRONECKER_LAYOUT`'s.

    Parameters
    ----------
    model : gpdsl.Model
        The posterior's model.
    form : {"whitened", "kronecker"}, default "whitened"
        The ``form`` of the posterior's predictive state (a key of :data:`STATE_FORMS`).

    Returns
    -------
    dict of str to Part

    Raises
    ------
    ValueError
        An unknown ``form``, or "kronecker" for a model whose kernel has no outputs.
    """
    if form not in STATE_FORMS:
        raise ValueError(f"model_layout: form must be one of {sorted(STATE_FORMS)}, got {form!r}")
    if getattr(model.kernel, "output_count", None) is not None:
        return {**LAYOUT, **OUTPUT_LAYOUT, **STATE_FORMS[form]}
    if form != "whitened":
        raise ValueError(f"model_layout: a {form!r} predictive state needs a multi-output kernel, and the model's "
                         f"kernel is {model.kernel.describe()}")
    if model.likelihood.n_latent == 1:
        return LAYOUT
    # The kernel's number of outputs, not the state, decides: a reader has only the model.
    separate = {"whitened": SEPARATE_WHITENED} if model.kernel.n_outputs > 1 else {}
    return {**LAYOUT, **CLASS_LAYOUT, **separate}


__all__ = ["FORMAT_VERSION", "HYPERPARAMETERS_SINCE", "PosteriorFileError", "checksum", "hyperparameter_entries", "variable_dims", "LAYOUT",
           "CLASS_LAYOUT", "SEPARATE_WHITENED", "OUTPUT_LAYOUT", "KRONECKER_LAYOUT", "STATE_FORMS", "OPTIONAL_PARTS",
           "model_layout"]
