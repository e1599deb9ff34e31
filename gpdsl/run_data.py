"""The ``[data]`` table of ``gpdsl run``'s model files (:mod:`gpdsl.cli`): the columns it names
read into the arrays ``Model.fit`` takes, in the layout the model's kernel asks for (one target
column, or for a multi-output kernel the long rows of :mod:`gpdsl.multioutput`), the checks of
the targets and offsets made before any fit, and the held-out share.  A problem is a
:class:`UsageError` (one line and exit status 2).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["UsageError", "DATA_KEYS", "DEFAULT_TEST_FRACTION", "load_table", "run_output_names", "check_offset", "check_targets",
           "held_out_size"]

DEFAULT_TEST_FRACTION = 0.2
# The [data] table's keys.
DATA_KEYS = {"path", "target", "targets", "output", "outputs", "features", "offset", "test_fraction", "seed",
             "standardize"}


class UsageError(Exception):
    """Bad user input: reported as one line and exit status 2."""



def check_table_keys(where, table, known):
    """spec's unknown-key check (:func:`gpdsl.io.spec.check_keys`) for the CLI's own tables, as a
    UsageError (one line, exit 2).

    Parameters
    ----------
    where : str
        The table, for messages (``"[data]"``).
    table : dict
    known : collection of str
        Its keys.

    Raises
    ------
    UsageError
        An unknown key.
    """
    from .io.spec import check_keys

    try:
        check_keys(where, table, known)
    except ValueError as err:
        raise UsageError(str(err)) from err



def load_table(data, output_count=None):
    """(X, y, offset, feature names, description) from the ``[data]`` table of a model file.

    A model of one output reads ``target``, one column.  A multi-output model (a kernel of P
    outputs, ``output_count``) reads its rows in the long layout (:mod:`gpdsl.multioutput`) from
    either of

    * ``targets = ["a", "b", ...]``: one column per output, in the order of the output index
      (isotopic); a blank or ``NA`` cell is an unobserved entry.  The observed entries become
      the rows, output-major (all of output 0's, then output 1's, ...);
    * ``target`` and ``output``: one row per observation (heterotopic), ``output`` naming the
      column of its output index (integers 0..P-1), or of its output's name where ``outputs``
      lists the P names in the order of the output index (``outputs = ["DAX", "SMI", ...]``).

    Parameters
    ----------
    data : dict
        The ``[data]`` table: ``path`` and ``target`` (or ``targets``; strings), optional
        ``output`` (a column name) and ``outputs`` (its labels), ``features`` (a list of column names; default every column
        but the target(s), the output and the offset), ``offset`` (the name of a column holding
        each row's offset of the latent input, e.g. log exposure; it is passed to
        ``Model.fit(offset=...)`` and to the held-out predictions; not with ``targets``),
        ``test_fraction``, ``seed``, ``standardize``.
    output_count : int, optional
        The model's number of outputs P (None: a model of one output).

    Returns
    -------
    X : ndarray, shape (N, D), or (n, D + 1) for a multi-output model
        The features, and for a multi-output model the output index as the last column.
    y : ndarray, shape (N,) or (n,)
        The targets: float64, or text (str) where any value of a single ``target`` column is not
        a number (class labels such as ``setosa``, which the likelihood then takes or refuses as
        ``Model.fit`` does).
    offset : ndarray, shape (N,), or None
        The offset column, None without ``offset``.
    features : list of str
    description : str
        The file, target(s), features and offset, for the report.

    Raises
    ------
    UsageError
        A missing or malformed key, a missing file or column, a column given two roles, a
        layout key the model does not take (``targets`` or ``output`` for a model of one
        output, a single ``target`` without ``output`` for a multi-output one, ``targets`` of
        another number than P, ``targets`` with ``output`` or ``offset``), an output index out
        of range, an output with no observed entry, or an unreadable table.
    """
    from .datasets import read_labelled_table, read_table

    if not isinstance(data, dict) or not data:
        raise UsageError("the model file has no [data] section (it needs path and target)")
    check_table_keys("[data]", data, DATA_KEYS)
    targets = _data_layout(data, output_count)
    if not isinstance(data.get("path"), str) or not data["path"]:
        raise UsageError("[data]: 'path' must be given as a string")
    path = Path(data["path"])
    if not path.is_file():
        raise UsageError(f"data file not found: {path}")
    output_names = _output_names(data, output_count)
    try:
        if output_names is not None:
            # The output column holds names: it is the labelled column, the target a number.
            header, table, y = read_labelled_table(path, data["output"], role="output")
        elif targets is None:
            header, table, y = read_labelled_table(path, data["target"])
        else:
            header, table = read_table(path, missing=targets)
    except (ValueError, UnicodeDecodeError) as err:
        raise UsageError(str(err) if str(path) in str(err) else f"{path}: {err}") from err
    roles = {"target": [data["target"]] if targets is None else targets}
    for key in ("offset", "output"):
        if data.get(key) is not None:
            if not isinstance(data[key], str) or not data[key]:
                raise UsageError(f"[data]: {key} must be a column name (a string), got {data[key]!r}")
            roles[key] = [data[key]]
    for role, names in roles.items():
        missing = [name for name in names if name not in header]
        if missing:
            raise UsageError(f"[data]: {role} column{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(map(repr, missing))} not in {path}; columns: {', '.join(header)}")
    seen = {}
    for role, names in roles.items():
        for name in names:
            if name in seen:
                raise UsageError(f"[data]: the {role} column {name!r} is also the {seen[name]}")
            seen[name] = role
    taken = list(seen)
    features = data.get("features")
    if features is None:
        features = [h for h in header if h not in taken]
    elif not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise UsageError(f"[data]: features must be a list of column names, got {features!r}")
    missing = [f for f in features if f not in header]
    if missing:
        raise UsageError(f"[data]: feature columns {missing} not in {path}; columns: {', '.join(header)}")
    for role, names in roles.items():
        both = [name for name in names if name in features]
        if both:
            raise UsageError(f"[data]: the {role} column {both[0]!r} is also listed in features")
    if not features:
        raise UsageError(f"[data]: {path} has no feature columns besides the {', '.join(roles)} columns")
    if table.shape[0] == 0:
        raise UsageError(f"{path}: no data rows")
    X = table[:, [header.index(f) for f in features]]
    offset = None if "offset" not in roles else table[:, header.index(data["offset"])]
    described = (f"target {data['target']!r}" if targets is None
                 else f"targets {', '.join(map(repr, targets))} as outputs 0..{len(targets) - 1}")
    if output_count is not None:
        X, y, described = _long_rows(data, output_count, output_names, table, header, X,
                                     y if targets is None else None,
                                     described)
    description = f"{path} ({described}; features {', '.join(features)}"
    if offset is None:
        return X, y, None, features, description + ")"
    return X, y, offset, features, description + f"; offset {data['offset']!r})"


def _data_layout(data, output_count):
    """The ``targets`` list of a multi-output model's isotopic ``[data]`` table, or None for one
    ``target`` column; a UsageError naming the keys for a combination the model does not take."""
    has = {key for key in ("target", "targets", "output") if data.get(key) is not None}
    if {"target", "targets"} <= has:
        raise UsageError("[data]: give target (one column) or targets (one column per output), not both")
    if output_count is None:
        if has & {"targets", "output"}:
            key = "targets" if "targets" in has else "output"
            raise UsageError(f"[data]: {key} is for a multi-output model (a kernel of several outputs: ICM, LMC); "
                             f"this kernel has one output: give target alone")
    elif "targets" in has and "output" in has:
        raise UsageError("[data]: output (a column of output indices, one observation a row) goes with target; "
                         "targets (one column per output) needs none")
    elif "target" in has and "output" not in has:
        raise UsageError(f"[data]: the kernel has {output_count} outputs: give targets = [{output_count} columns, one "
                         f"per output], or target with output = <the column of each row's output index>")
    if "targets" not in has:
        if not isinstance(data.get("target"), str) or not data["target"]:
            raise UsageError("[data]: 'target' must be given as a string")
        return None
    targets = data["targets"]
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t for t in targets):
        raise UsageError(f"[data]: targets must be a list of column names, got {targets!r}")
    if len(targets) != output_count:
        raise UsageError(f"[data]: targets names {len(targets)} columns but the kernel has {output_count} outputs "
                         "(one column per output)")
    if data.get("offset") is not None:
        raise UsageError("[data]: offset is one value a row, and targets make a row of every output: give the data "
                         "one observation a row (target and output) with its offset column")
    return targets


def run_output_names(data, output_count):
    """The output names a multi-output ``[data]`` table gives, in the order of the output index:
    ``targets``' column names (isotopic) or ``outputs`` (the output column's labels); None where
    it gives none (an output column of indices) or for a model of one output.  The fitted
    posterior carries them (``Posterior.output_names``: the ``output`` coordinate of its saved
    file and labelled results).

    Parameters
    ----------
    data : dict
        The ``[data]`` table, as :func:`load_table` has checked it.
    output_count : int or None

    Returns
    -------
    tuple of str, or None
    """
    if output_count is None:
        return None
    names = data.get("targets") if data.get("targets") is not None else data.get("outputs")
    return None if names is None else tuple(names)


def _output_names(data, output_count):
    """``[data] outputs``, the names the output column holds in the order of the output index,
    checked (a list of P distinct strings, with ``output``), or None."""
    names = data.get("outputs")
    if names is None:
        return None
    if data.get("output") is None or output_count is None:
        raise UsageError("[data]: outputs names the labels of the output column: it goes with output (and a kernel "
                         "of several outputs)")
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise UsageError(f"[data]: outputs must be a list of distinct names (strings), got {names!r}")
    if len(names) != output_count:
        raise UsageError(f"[data]: outputs names {len(names)} outputs but the kernel has {output_count}")
    return names


def _long_rows(data, output_count, names, table, header, X, y, described):
    """(X_long, y_long, description) of a multi-output ``[data]`` table (:func:`load_table`): ``y``
    None for ``targets``, else the target column, or with ``names`` (``[data] outputs``) the
    output column's labels."""
    from .multioutput import long_data

    if y is None:
        Y = table[:, [header.index(t) for t in data["targets"]]]
        observed = int(np.sum(~np.isnan(Y)))
        described += f", {observed} of {Y.size} entries observed"
        X, y = X, Y
    elif names is None:
        X = np.column_stack([X, table[:, header.index(data["output"])]])
        described += f"; output index {data['output']!r}"
    else:
        X = np.column_stack([X, _named_outputs(data["output"], names, y)])
        y = table[:, header.index(data["target"])]
        described += f"; outputs {', '.join(f'{name} = {p}' for p, name in enumerate(names))} from {data['output']!r}"
    try:
        X, y, _ = long_data(X, y, output_count, owner="[data]")
    except (ValueError, TypeError) as err:
        raise UsageError(str(err)) from err
    return X, y, described


def _named_outputs(column, names, labels):
    """The output index of each row from its output's name (``[data] outputs``), as floats."""
    if labels.dtype.kind != "U":
        raise UsageError(f"[data]: outputs names text labels, but the output column {column!r} holds numbers (the "
                         "output indices themselves): leave outputs out")
    known = {name: p for p, name in enumerate(names)}
    unknown = [label for label in dict.fromkeys(labels.tolist()) if label not in known]
    if unknown:
        raise UsageError(f"[data]: the output column {column!r} holds {unknown[0]!r}, which outputs does not name "
                         f"({', '.join(map(repr, names))})")
    return np.array([known[label] for label in labels], dtype=float)


def check_offset(model, offset, name):
    """Raise a UsageError unless the model's method takes an offset and the column is finite.

    Checked before the split and the fit, as :func:`check_targets` checks the targets.

    Parameters
    ----------
    model : gpdsl.Model
    offset : numpy.ndarray or None
        The offset column, shape (n,); None (no offset) passes.
    name : str
        Its name, for the message.
    """
    from .inputs import validate_offset

    if offset is None:
        return
    try:
        validate_offset(offset, offset.shape[0], model.inference, name=f"offset column {name!r}")
    except (ValueError, TypeError) as err:
        raise UsageError(f"[data]: {err}") from err


def check_targets(model, X, y, target):
    """Raise a UsageError unless the whole target column suits the model's likelihood.

    The fit checks only the training rows; checking the column before the split means that a
    value the likelihood cannot take (a label 2 for ``Bernoulli``) is reported whether it falls
    into the training or the held-out rows, before any time is spent fitting.  Each row is coded
    as the fit codes it (:func:`gpdsl.fitting.fit`): by the likelihood of its row
    (``for_rows(X)``), which for :class:`gpdsl.likelihoods.PerOutput` is its output's part.

    Parameters
    ----------
    model : gpdsl.Model
    X : numpy.ndarray
        The rows' inputs, shape (n, D) (a multi-output model's long rows: (n, D + 1), the
        output index last).
    y : numpy.ndarray
        The target column, shape (n,).
    target : str
        Its name, for the message.
    """
    try:
        model.likelihood.with_labels_of(y).for_rows(X).coded_targets(y, y.shape[0], f"target column {target!r}")
    except (ValueError, TypeError) as err:
        raise UsageError(f"[data]: target column {target!r}: {err}") from err


def held_out_size(data, n):
    """The number of held-out rows: ``round(test_fraction * n)`` (``[data] test_fraction``).

    Parameters
    ----------
    data : dict
        The ``[data]`` table; ``test_fraction`` in [0, 1) (default ``DEFAULT_TEST_FRACTION``).
    n : int
        Rows in the data.

    Returns
    -------
    int

    Raises
    ------
    UsageError
        A ``test_fraction`` outside [0, 1) or one that leaves no training rows.
    """
    fraction = data.get("test_fraction", DEFAULT_TEST_FRACTION)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise UsageError(f"[data]: test_fraction must be a number in [0, 1), got {fraction!r}")
    n_test = int(round(fraction * n))
    if n - n_test < 1:
        raise UsageError(f"[data]: test_fraction {fraction} leaves no training rows out of {n}")
    return n_test
