"""Multi-output data: the layouts a multi-output model accepts, the long layout every method sees,
and the maps between them.

A model is multi-output when its kernel has an ``output_count`` P (an int; None for a kernel of
one output, :func:`output_count`).  Its methods see ordinary rows (X, y) in the LONG layout:

* ``X_long`` (n, D+1): the D input columns and, last, the output index p in {0, ..., P-1} as an
  integer-valued float; ``y_long`` (n,): one target per observed (input, output) pair.

``Model.fit`` (and ``evaluate``, ``sample``) accept three layouts and turn them into the long one
(:func:`long_data`):

* isotopic: X (N, D) and Y (N, P), NaN marking a missing entry.  The rows are put in OUTPUT-MAJOR
  order (all of output 0's rows, then output 1's, ...; within an output block X's row order) and
  the NaN entries dropped: with no NaN, K_long = B (x) K_x for an intrinsic coregionalisation
  kernel (the Kronecker structure of Bonilla et al. (2008)).
* heterotopic, long: X (n, D+1) with the output column and y (n,), taken as they are.
* heterotopic, lists: ``[X_0, ..., X_{P-1}]`` ((n_p, D) each, or 1-D NumPy arrays (n_p,) for
  D = 1) and ``[y_0, ..., y_{P-1}]``, concatenated output-major.

Outputs have names where the data give them (:func:`data_output_names`): a pandas DataFrame Y's
columns, the keys of a dict layout ``{name: X_p}`` with ``{name: y_p}`` (or ``{name: (X_p, y_p)}``
with y None), or the names of per-output pandas Series in the list layout.  A fitted posterior
keeps them as ``output_names`` (None: unnamed) and every labelled result takes its ``output``
coordinate from :func:`output_labels`, the names or 0..P-1; the long rows' output index stays the
position 0..P-1 in either case.

Predictions go the other way (:class:`Query`): new inputs (n, D) ask for every output and are
expanded POINT-MAJOR (each point's P outputs together), so that a long result (n P,) reshapes to
(n, P) and a covariance (n P, n P) to (n, P, n, P); new inputs (n, D+1) ask for one output a row.

Sparse methods share the inducing inputs across outputs: Z (M, D) in input space stands for
Z x {0..P-1} (:func:`expand_inducing`, M P rows, output-major); a Z of D+1 columns is taken as
the long inducing inputs it is (an inducing variable of one output at one input: greedy
selection's, or M rows spread over the outputs as the data are).  Optimised shared Z's gradient
is the sum over its P copies; optimised long Z moves its input columns only
(:func:`inducing_gradient`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks import as_float_array, output_indices
from .inputs import validate_inputs
from .scaling import Standardization, _scale


def output_count(kernel):
    """P of a multi-output kernel (its ``output_count``), or None for a kernel of one output.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        A model's kernel (bound or not).

    Returns
    -------
    int or None
    """
    return getattr(kernel, "output_count", None)


def layout(X, y, P, owner="fit", kernel=None):
    """Which layout data are in (:func:`long_data`): ``"lists"`` for X a list or tuple of 2-D
    arrays (a nested list of rows is one array), or of 1-D NumPy arrays with y a list or tuple of P
    target arrays (one input column, D = 1); ``"isotopic"`` for a 2-D y (N, P) (with P = 1 also
    (N, 1)); else ``"long"``.

    With P = 1, y (n, 1) and X's last column all 0, X reads as long rows (n, D+1) whose output
    index is that column as well as isotopic inputs (N, D) with a constant last input: the
    ``kernel``, where given, decides by the width it takes (an ARD length-scale's D); where it
    takes both or is not given, refused.

    Parameters
    ----------
    X, y : object
        As :func:`long_data` takes them.
    P : int
        The kernel's number of outputs.
    owner : str, default "fit"
        The function the data are given to, for messages.
    kernel : gpdsl.kernels.Kernel, optional
        The model's kernel, for the P = 1 case above.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        The ambiguous P = 1 layout above.
    """
    if isinstance(X, dict):
        return "lists"
    if isinstance(X, (list, tuple)) and len(X) > 0:
        if all(np.ndim(part) == 2 for part in X):
            return "lists"
        if (all(isinstance(part, np.ndarray) and part.ndim == 1 for part in X) and isinstance(y, (list, tuple))
                and len(y) == P):
            return "lists"
    if np.ndim(y) == 2 and (np.shape(y)[1] != 1 or P == 1):
        last = (X[:, -1] if hasattr(X, "shape") else np.asarray(X)[:, -1]) if np.ndim(X) == 2 else None
        if P == 1 and last is not None and np.shape(X)[1] >= 2 and not np.any(np.asarray(last)):
            # The long rows the kernel would see: X as it is, or the isotopic X with the index appended.
            widths = {"long": np.shape(X)[1], "isotopic": np.shape(X)[1] + 1}
            taken = [kind for kind, width in widths.items() if kernel is not None and _takes_width(kernel, width)]
            if len(taken) == 1:
                return taken[0]
            raise ValueError(f"{owner}: with P = 1 output, y of shape {np.shape(y)} and X's last column all 0, X reads "
                             f"as long rows (n, D+1) with that column the output index and as isotopic inputs (N, D) "
                             f"with a constant last input{', and the kernel takes both' if kernel is not None else ''}; "
                             f"give a 1-D y for long rows, or drop the constant column")
        return "isotopic"
    return "long"


def _takes_width(kernel, width):
    """Whether ``kernel`` declares its parameters for long rows of ``width`` columns."""
    try:
        kernel.entries("kernel", np.zeros((1, width)))
    except (TypeError, ValueError):
        return False
    return True


def long_data(X, y, P, offset=None, *, owner="fit", every_output=True, kernel=None):
    """The long layout (X_long (n, D+1), y_long (n,), offset_long) of data given in any layout.

    Parameters
    ----------
    X : array_like of shape (N, D) or (n, D+1), or list of P arrays (n_p, D) or (n_p,)
        Inputs: isotopic (with a 2-D ``y`` of P columns), long (with a 1-D ``y``: the last
        column is the output index) or one array an output (1-D NumPy arrays: D = 1).
    y : array_like of shape (N, P) or (n,), or list of P arrays (n_p,)
        Targets in the layout of X; in the isotopic layout NaN marks a missing entry.  A 2-D y
        is isotopic (with P = 1 also (N, 1)); a 1-D y, or (n, 1) with P > 1, is long.
    P : int
        The kernel's number of outputs.
    offset : array_like or list, optional
        A per-row offset of the latent input in the layout of ``y`` (isotopic: (N, P), read at
        the observed entries only).
    owner : str, default "fit"
        The function the data are given to, for messages.
    every_output : bool, default True
        Refuse data without a row of some output (a fit's data must inform every output).
    kernel : gpdsl.kernels.Kernel, optional
        The model's kernel (:func:`layout`'s one ambiguous case).

    Returns
    -------
    X_long : ndarray, shape (n, D+1)
    y_long : ndarray, shape (n,)
        The targets as given (float for the isotopic layout; coded by the likelihood later).
    offset_long : ndarray of shape (n,), or None

    Raises
    ------
    TypeError, ValueError
        A layout that is none of the three, list lengths other than P, arrays whose rows or
        columns disagree, an output index that is not an integer in 0..P-1, Y of another width
        than P, an output with no observation (``every_output``); the message names the argument.
    """
    kind = layout(X, y, P, owner, kernel)
    if kind == "lists":
        return _from_lists(X, y, P, offset, owner)
    if kind == "isotopic":
        return _from_isotopic(X, y, P, offset, owner, every_output)
    X = validate_inputs(X, "X")
    if X.shape[1] < 2:
        raise ValueError(f"{owner}: a multi-output model's X is (N, D) with Y (N, P={P}), or (n, D+1) with the "
                         f"output index as its last column and a 1-D y; got X of shape {X.shape} and y of shape "
                         f"{np.shape(y)}")
    check_outputs(owner, "X", X, P, every_output)
    y = np.asarray(y)
    if y.ndim == 2:                                   # (n, 1)
        y = y[:, 0]
    _refuse_nan(owner, "y", y)
    offset = None if offset is None else np.ravel(as_float_array(owner, "offset", offset))
    return X, y, offset


def check_outputs(owner, name, X_long, P, every_output=True):
    """The output index of each row of X_long (n, D+1), checked: an integer-valued float in
    0..P-1, and with ``every_output`` each output on some row.

    Parameters
    ----------
    owner, name : str
        The function and the argument, for messages.
    X_long : ndarray, shape (n, D+1)
    P : int
    every_output : bool, default True

    Returns
    -------
    ndarray of intp, shape (n,)
        Each row's output.

    Raises
    ------
    ValueError
        An index that is not an integer in 0..P-1, or an output no row has.
    """
    try:
        index = output_indices(owner, X_long, P)
    except ValueError as err:
        raise ValueError(f"{owner}: {name}'s last column is the output index of a multi-output model: "
                         f"{str(err).split(': ', 1)[-1]}") from None
    if every_output:
        missing = np.setdiff1d(np.arange(P), index)
        if missing.size:
            raise ValueError(f"{owner}: {name} has no row of output(s) {missing.tolist()} of the kernel's P = {P}; "
                             f"every output needs an observation (or declare the kernel with fewer outputs)")
    return index


def _refuse_nan(owner, name, y):
    """Refuse NaN targets of the long and list layouts, where a row is an observation (NaN marks a
    missing entry only in the isotopic Y (N, P))."""
    if y.dtype.kind == "f" and np.any(np.isnan(y)):
        raise ValueError(f"{owner}: {name} has NaN at row(s) {np.flatnonzero(np.isnan(y))[:5].tolist()}; NaN marks a "
                         f"missing entry only in the isotopic layout Y (N, P), while each row of the long and list "
                         f"layouts is an observation: leave the unobserved rows out")


def _from_isotopic(X, Y, P, offset, owner, every_output):
    """The long layout of X (N, D) and Y (N, P) with NaN = missing, output-major."""
    X = validate_inputs(X, "X")
    Y = as_float_array(owner, "Y", Y)
    if Y.shape[1] != P:
        raise ValueError(f"{owner}: Y has {Y.shape[1]} columns but the kernel has P = {P} outputs (Y is (N, P), one "
                         f"column an output, NaN where an entry is missing)")
    if Y.shape[0] != X.shape[0]:
        raise ValueError(f"{owner}: Y has {Y.shape[0]} rows but X has {X.shape[0]}")
    if np.any(np.isinf(Y)):
        raise ValueError(f"{owner}: Y must be finite or NaN (NaN marks a missing entry), got inf")
    observed = ~np.isnan(Y)
    empty = np.flatnonzero(~observed.any(axis=0))
    if every_output and empty.size:
        raise ValueError(f"{owner}: Y's column(s) {empty.tolist()} are all NaN: every output needs an observation")
    if offset is not None:
        offset = as_float_array(owner, "offset", offset)
        if offset.shape != Y.shape:
            raise ValueError(f"{owner}: offset must have Y's shape {Y.shape} in the isotopic layout, got {offset.shape}")
        offset = offset.T[observed.T]
    outputs, rows = np.nonzero(observed.T)            # output-major: all of output 0's rows first
    X_long = np.column_stack([X[rows], outputs.astype(float)])
    return X_long, Y.T[observed.T], offset


def _from_lists(Xs, ys, P, offset, owner):
    """The long layout of one (X_p, y_p) an output, concatenated output-major."""
    if isinstance(Xs, dict):
        Xs, ys, offset = _dict_lists(Xs, ys, offset, owner)
    if len(Xs) != P:
        raise ValueError(f"{owner}: X is a list of {len(Xs)} arrays but the kernel has P = {P} outputs (one "
                         f"(n_p, D) array an output)")
    if not isinstance(ys, (list, tuple)) or len(ys) != P:
        raise ValueError(f"{owner}: with X a list of P = {P} arrays, y must be a list of P target arrays, got "
                         f"{type(ys).__name__}" + (f" of length {len(ys)}" if isinstance(ys, (list, tuple)) else ""))
    offsets = [None] * P
    if offset is not None:
        if not isinstance(offset, (list, tuple)) or len(offset) != P:
            raise ValueError(f"{owner}: with X a list of P = {P} arrays, offset must be a list of P arrays")
        offsets = [np.ravel(as_float_array(owner, f"offset[{p}]", o)) for p, o in enumerate(offset)]
    parts, targets = [], []
    for p, (X_p, y_p) in enumerate(zip(Xs, ys)):
        # A 1-D NumPy array is the one input column of its output's rows (layout's rule).
        X_p = validate_inputs(X_p[:, None] if isinstance(X_p, np.ndarray) and X_p.ndim == 1 else X_p, f"X[{p}]")
        if parts and X_p.shape[1] != parts[0].shape[1] - 1:
            raise ValueError(f"{owner}: X[{p}] has {X_p.shape[1]} columns but X[0] has {parts[0].shape[1] - 1}")
        y_p = np.asarray(y_p)
        if y_p.ndim == 2 and y_p.shape[1] == 1:
            y_p = y_p[:, 0]
        if y_p.shape != (X_p.shape[0],):
            raise ValueError(f"{owner}: y[{p}] must be 1-D with one target per row of X[{p}] ({X_p.shape[0]}), got "
                             f"shape {y_p.shape}")
        _refuse_nan(owner, f"y[{p}]", y_p)
        if offsets[p] is not None and offsets[p].shape != y_p.shape:
            raise ValueError(f"{owner}: offset[{p}] must have y[{p}]'s shape {y_p.shape}, got {offsets[p].shape}")
        parts.append(np.column_stack([X_p, np.full(X_p.shape[0], float(p))]))
        targets.append(y_p)
    return (np.concatenate(parts), np.concatenate(targets),
            None if offset is None else np.concatenate(offsets))


def _dict_lists(Xs, ys, offset, owner):
    """The lists layout of a dict layout, in the dict's key order: ``{name: X_p}`` with ``ys`` a
    dict of the same keys (and ``offset`` one too, if given), or ``{name: (X_p, y_p)}`` with
    ``ys`` None."""
    keys = list(Xs)
    if ys is None:
        if not all(isinstance(pair, (list, tuple)) and len(pair) == 2 for pair in Xs.values()):
            raise ValueError(f"{owner}: with y None, X must be a dict {{name: (X_p, y_p)}} of one (inputs, targets) "
                             f"pair an output")
        Xs, ys = {k: pair[0] for k, pair in Xs.items()}, {k: pair[1] for k, pair in Xs.items()}
    for name, given in (("y", ys), ("offset", offset)):
        if given is not None and (not isinstance(given, dict) or list(given) != keys):
            raise ValueError(f"{owner}: with X a dict of outputs {keys}, {name} must be a dict of the same keys in "
                             f"the same order, got "
                             f"{list(given) if isinstance(given, dict) else type(given).__name__}")
    return ([Xs[k] for k in keys], [ys[k] for k in keys],
            None if offset is None else [offset[k] for k in keys])


# The integers a netCDF-3 file (every gpdsl save) holds: output names are written as its output coordinate.
_INT32 = np.iinfo(np.int32)


def check_output_names(owner, name, names, P):
    """Output names, checked: P of them, distinct, all strings or all integers.

    Parameters
    ----------
    owner, name : str
        The function and the argument the names come from, for messages.
    names : sequence
    P : int or None
        The model's outputs (None: a kernel of one output, which takes no names).

    Returns
    -------
    tuple of str, or tuple of int

    Raises
    ------
    ValueError
        Names for a kernel of one output, not P names, a name that is neither a string nor an integer (bool included), a mix of
        the two, an integer outside int32 (a saved posterior's netCDF-3 file holds no wider
        integers), or a name given twice.
    """
    if P is None:
        raise ValueError(f"{owner}: {name} names outputs, but the kernel has one output (output names are a "
                         f"multi-output model's)")
    names = list(names)
    if len(names) != P:
        raise ValueError(f"{owner}: {name} gives {len(names)} output names but the kernel has P = {P} outputs")
    ints = [isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in names]
    strings = [isinstance(v, str) for v in names]
    if not (all(ints) or all(strings)):
        bad = next((v for v, i, s in zip(names, ints, strings) if not (i or s)), None)
        raise ValueError(f"{owner}: {name} must be output names that are all strings or all integers, got "
                         + (f"{bad!r} ({type(bad).__name__})" if bad is not None else f"a mix: {names!r}"))
    names = tuple(int(v) for v in names) if all(ints) else tuple(names)
    wide = [v for v in names if all(ints) and not _INT32.min <= v <= _INT32.max]
    if wide:
        raise ValueError(f"{owner}: {name} names output {wide[0]!r}, outside int32 ({_INT32.min} to {_INT32.max}), "
                         f"which a saved posterior cannot hold; name the outputs by strings")
    seen = set()
    for v in names:
        if v in seen:
            raise ValueError(f"{owner}: {name} names output {v!r} twice; output names must be distinct")
        seen.add(v)
    return names


def data_output_names(X, y, P, owner="fit"):
    """The output names data carry (module docstring), checked, or None for unnamed data.

    Parameters
    ----------
    X, y : object
        As :func:`long_data` takes them.
    P : int
    owner : str, default "fit"
        For messages.

    Returns
    -------
    tuple of str or int, or None

    Raises
    ------
    ValueError
        As :func:`check_output_names`.
    """
    if isinstance(X, dict):
        return check_output_names(owner, "X's keys", X.keys(), P)
    if isinstance(y, (list, tuple)) and len(y) > 0 and all(hasattr(part, "name") and np.ndim(part) == 1
                                                            for part in y):
        named = [part.name for part in y]
        if any(v is not None for v in named):
            return check_output_names(owner, "the names of y's Series", named, P)
        return None
    columns = getattr(y, "columns", None)
    if columns is not None and np.ndim(y) == 2 and layout(X, y, P, owner) == "isotopic":
        return check_output_names(owner, "Y's columns", columns, P)
    return None


def output_labels(names, P):
    """The ``output`` coordinate of a labelled result: the names, or 0..P-1 for unnamed outputs.

    Parameters
    ----------
    names : tuple or None
    P : int

    Returns
    -------
    ndarray, shape (P,)
    """
    return np.arange(P) if names is None else np.asarray(names)


def saved_output_names(labels, P):
    """Output names read back from a file's ``output`` coordinate: None for 0..P-1 (or no
    coordinate: files written before names existed), else the names.

    Parameters
    ----------
    labels : array_like of shape (P,), or None
    P : int

    Returns
    -------
    tuple or None

    Raises
    ------
    ValueError
        As :func:`check_output_names`.
    """
    if labels is None:
        return None
    labels = np.asarray(labels)
    if labels.dtype.kind in "iu" and np.array_equal(labels, np.arange(P)):
        return None
    values = labels.tolist() if labels.dtype.kind in "iu" else [str(v) for v in labels.tolist()]
    return check_output_names("load", "the 'output' coordinate", values, P)


def name_outputs(result, names):
    """``result`` (a fitted or sampled posterior) with its ``output_names`` set, and its MAP
    posterior's where it has one; returned for chaining.

    Parameters
    ----------
    result : gpdsl.Posterior or gpdsl.SampledPosterior
    names : sequence of str or int, or None
        None leaves ``result`` as it is (unnamed: a fresh fit or run).

    Returns
    -------
    ``result``

    Raises
    ------
    ValueError
        As :func:`check_output_names`, for ``result``'s kernel.
    """
    if names is None:
        return result                   # a fresh fit's or run's own None stands
    names = check_output_names("name_outputs", "names", names, output_count(result.model.kernel))
    result.output_names = names
    if getattr(result, "map_posterior", None) is not None:
        result.map_posterior.output_names = names
    return result


def output_groups(index, P, empty=False):
    """The rows of each output: (p, rows of output p) for p = 0..P-1, the row indices ascending;
    outputs without rows left out unless ``empty`` (a per-output part whose sums over no rows
    are 0, e.g. a mean's gradient).  The per-output parts (``gd.likelihoods.PerOutput``,
    ``gd.means.PerOutput``) dispatch their rows by it.

    Parameters
    ----------
    index : ndarray of int, shape (n,)
        Each row's output (:func:`gpdsl.checks.output_indices`).
    P : int
    empty : bool, default False

    Returns
    -------
    list of (int, ndarray of intp)
    """
    groups = [(p, np.flatnonzero(index == p)) for p in range(P)]
    return groups if empty else [(p, rows) for p, rows in groups if rows.size]


def unique_inputs(X_long):
    """The distinct input rows of X_long (n, D+1) without the output column, in order of first
    appearance: the candidates of the inducing specs that choose Z in input space (an input
    observed for several outputs is one candidate).

    Parameters
    ----------
    X_long : ndarray, shape (n, D+1)

    Returns
    -------
    ndarray, shape (U, D)
    """
    X = np.asarray(X_long)[:, :-1]
    _, first = np.unique(X, axis=0, return_index=True)
    return np.ascontiguousarray(X[np.sort(first)])


def selection_inputs(spec, X_long):
    """What a multi-output model's inducing spec selects from: the long rows X_long (n, D+1) for
    a spec that picks training rows with the kernel (greedy selection, ``selects_training_rows``)
    or is given Z of D+1 columns; else the distinct inputs (:func:`unique_inputs`), whose Z
    (M, D) the outputs share.

    Parameters
    ----------
    spec : gpdsl.inducing.InducingSpec
    X_long : ndarray, shape (n, D+1)

    Returns
    -------
    ndarray, shape (n, D+1) or (U, D)

    """
    if spec.selects_training_rows or spec.given_columns() == X_long.shape[1]:
        return X_long
    return unique_inputs(X_long)


def expand_inducing(Z, P):
    """Z (M, D) in input space as the long inducing inputs Z x {0..P-1}, output-major.

    Parameters
    ----------
    Z : ndarray, shape (M, D)
    P : int

    Returns
    -------
    ndarray, shape (M P, D+1)
        Rows p M .. (p+1) M - 1 are Z with output index p.
    """
    Z = np.asarray(Z, dtype=float)
    return np.column_stack([np.tile(Z, (P, 1)), np.repeat(np.arange(P, dtype=float), Z.shape[0])])


def inducing_gradient(dZ_method, Z, P):
    """d/dZ of the inducing inputs Z as given, from d/dZ of those the method saw
    (:func:`method_inducing`): for Z (M, D) shared by the outputs the sum over its P copies of
    d/dZ_long (M P, D+1) (the chain rule through :func:`expand_inducing`); for long Z (M, D+1)
    ``dZ_method`` with its output column 0 (the index is no parameter: an optimiser whose gradient
    there is always 0 never moves it, as L-BFGS-B does not).

    Parameters
    ----------
    dZ_method : ndarray of shape (M P, D+1) or of Z's shape, or None
    Z : ndarray of shape (M, D) or (M', D+1), or None
    P : int or None
        The model's outputs (None: a single-output model, ``dZ_method`` returned).

    Returns
    -------
    ndarray of Z's shape, or None
    """
    if P is None or dZ_method is None:
        return dZ_method
    dZ_method = np.array(dZ_method, dtype=float)
    if dZ_method.shape[1] == np.shape(Z)[1]:
        dZ_method[:, -1] = 0.0
        return dZ_method
    return dZ_method[:, :-1].reshape(P, -1, dZ_method.shape[1] - 1).sum(axis=0)


def method_inducing(Z, X, P, owner="evaluate"):
    """The inducing inputs a method sees: Z (M, D) expanded (:func:`expand_inducing`) where X is
    long (D+1 columns), a Z of X's width (or None) as it is.  A minibatch or other optimiser that
    calls a method directly, not through ``Model.evaluate``, passes its Z through this and the
    method's dZ back through :func:`inducing_gradient`.

    Parameters
    ----------
    Z : ndarray of shape (M, D) or (M', D+1), or None
    X : ndarray, shape (n, D+1)
    P : int or None
        The model's outputs (None: a single-output model, Z returned).
    owner : str, default "evaluate"
        The function Z is given to, for messages.

    Returns
    -------
    ndarray or None

    Raises
    ------
    ValueError
        Z of a width other than D or D+1.
    """
    if P is None or Z is None or np.shape(Z)[1] == np.shape(X)[1]:
        return Z
    if np.shape(Z)[1] != np.shape(X)[1] - 1:
        raise ValueError(f"{owner}: the inducing inputs Z have {np.shape(Z)[1]} columns; a multi-output model's are "
                         f"(M, D) in input space or (M, D+1) with the output index last, and X has D+1 = "
                         f"{np.shape(X)[1]}")
    return expand_inducing(Z, P)


def standardization(X_long, y, P):
    """:meth:`gpdsl.scaling.Standardization.of` of long inputs, with the output column left as it is
    (mean 0, scale 1), and the targets standardised per output: output p's rows by the mean and
    standard deviation of its own training targets (scikit-learn's ``normalize_y`` per target
    column; a constant output keeps scale 1), so that outputs in different units enter the fit on
    one scale.

    Parameters
    ----------
    X_long : ndarray or Dask array, shape (n, D+1)
    y : ndarray of shape (n,) or None
        The targets (None: left as they are).
    P : int
        The model's outputs (with ``y`` every output has a row: :func:`long_data`).

    Returns
    -------
    gpdsl.scaling.Standardization
        ``y_mean`` and ``y_scale`` (P,): without ``y`` zeros and ones (targets left as they are).
    """
    scaling = Standardization.of(X_long)
    x_mean, x_scale = scaling.x_mean.copy(), scaling.x_scale.copy()
    x_mean[-1], x_scale[-1] = 0.0, 1.0
    if y is None:
        return Standardization(x_mean, x_scale, np.zeros(P), np.ones(P))
    index = np.asarray(X_long[:, -1]).astype(np.intp)
    y = np.asarray(y, dtype=float)
    count = np.bincount(index, minlength=P)
    y_mean = np.bincount(index, y, minlength=P) / count
    sd = np.sqrt(np.bincount(index, (y - y_mean[index]) ** 2, minlength=P) / count)
    return Standardization(x_mean, x_scale, y_mean, _scale(sd))


def subsample_rows(X_long, size, rng, P=None):
    """``fit(subsample=size)``'s rows: a single-output model's drawn at random; a multi-output
    model's stratified by output, output p's share proportional to its n_p rows and at least one
    (largest remainders fill the rest), so that no output is left without a row (the subsample
    fit would not inform its B row and column, nor its noise).

    Parameters
    ----------
    X_long : ndarray or Dask array, shape (n, D+1)
        The long rows (every output has one: :func:`long_data`); a single-output model's X (N, D).
    size : int
        The number of rows, smaller than n.
    rng : numpy.random.Generator
    P : int, optional
        The model's outputs (None: a single-output model).

    Returns
    -------
    ndarray of intp, shape (size,)
        Sorted row indices.

    Raises
    ------
    ValueError
        ``size`` smaller than P.
    """
    if P is None:
        return np.sort(rng.choice(X_long.shape[0], size=size, replace=False))
    if size < P:
        raise ValueError(f"fit: subsample = {size} rows cannot hold a row of each of the P = {P} outputs")
    index = np.asarray(X_long[:, -1]).astype(np.intp)
    count = np.bincount(index, minlength=P)
    share = size * count / count.sum()
    quota = np.maximum(1, np.floor(share).astype(np.intp))
    while quota.sum() < size:            # the largest remainders among outputs with rows to spare
        quota[np.argmax(np.where(quota < count, share - quota, -np.inf))] += 1
    while quota.sum() > size:            # the minimum of one row took more than the shares
        quota[np.argmax(np.where(quota > 1, quota - share, -np.inf))] -= 1
    return np.sort(np.concatenate([rng.choice(np.flatnonzero(index == p), size=quota[p], replace=False)
                                   for p in range(P)]))


def draw_inputs(X, Z, rng, P=None):
    """A restart's inducing inputs in place of Z: rows of X drawn without replacement.

    A single-output model's Z (M, D) is M rows of X.  A multi-output model's shared Z (M, D) is M
    of its distinct inputs (:func:`unique_inputs`: no input twice); its long Z (M, D+1) keeps each
    row's output (the output index is no parameter) and draws the inputs of output p's m_p rows
    among the training rows of that output, or, where it has fewer than m_p, among the distinct
    inputs of every output (an inducing variable of output p needs no observation of p at its
    input, as shared Z's do not; drawn with replacement, two rows of one output at one input
    would make K_zz singular).

    Parameters
    ----------
    X : ndarray or Dask array, shape (N, D) or (n, D+1)
        The training inputs (a multi-output model's long rows).
    Z : ndarray, shape (M, D) or (M, D+1)
        The inducing inputs to replace.
    rng : numpy.random.Generator
    P : int, optional
        The model's outputs (None: a single-output model).

    Returns
    -------
    ndarray of Z's shape

    Raises
    ------
    ValueError
        A multi-output Z with more rows (of one output) than the data have distinct inputs.
    """
    if P is None:
        return np.asarray(X[rng.choice(X.shape[0], size=Z.shape[0], replace=False)])
    pool = unique_inputs(X)

    def draw(candidates, size, which):
        if size > candidates.shape[0]:
            raise ValueError(f"fit: restarts draw the inducing inputs anew among the training inputs, but Z has "
                             f"{size} rows{which} and the data only {candidates.shape[0]} distinct inputs; fit with "
                             f"restarts=0 or give Z fewer rows")
        return candidates[rng.choice(candidates.shape[0], size=size, replace=False)]

    if Z.shape[1] != X.shape[1]:
        return draw(pool, Z.shape[0], "")
    drawn = np.array(Z, dtype=float)
    for p in np.unique(Z[:, -1]):
        of_p, own = Z[:, -1] == p, np.asarray(X[X[:, -1] == p, :-1])
        size = int(of_p.sum())
        drawn[of_p, :-1] = draw(own if own.shape[0] >= size else pool, size, f" of output {int(p)} (which has "
                                f"{own.shape[0]} training rows)")
    return drawn


@dataclass(frozen=True)
class Query:
    """New inputs as a posterior predicts at them: ``X``, the rows it predicts at, and how its
    results are shaped back.

    For a multi-output posterior, inputs (n, D) ask for every output: ``X`` is their long
    expansion, point-major (n P rows: point 0's outputs 0..P-1, then point 1's, ...), and
    :meth:`wide` reshapes a result's leading n P to (n, P); inputs (n, D+1) ask for their row's
    output and are taken as they are.  For a single-output posterior X is passed through as given.

    Parameters
    ----------
    X : ndarray or object
        The rows to predict at.
    n : int or None
        The number of points of a query for every output (None otherwise).
    P : int or None
        The number of outputs of such a query (None otherwise).
    """

    X: object
    n: int | None = None
    P: int | None = None

    @property
    def every_output(self):
        """bool: whether the query asks for every output of each point (results (n, P))."""
        return self.P is not None

    def wide(self, a):
        """A result over the query's rows as (n, P, ...) for a query of every output.

        Parameters
        ----------
        a : ndarray, shape (n P, ...)

        Returns
        -------
        ndarray, shape (n, P, ...)
            ``a`` as it is for a per-row query.
        """
        return a if self.P is None else np.reshape(a, (self.n, self.P) + np.shape(a)[1:])

    def wide_cov(self, cov):
        """A covariance over the query's rows as (n, P, n, P) for a query of every output.

        Parameters
        ----------
        cov : ndarray, shape (n P, n P)

        Returns
        -------
        ndarray, shape (n, P, n, P)
            ``cov`` as it is for a per-row query.
        """
        return cov if self.P is None else np.reshape(cov, (self.n, self.P, self.n, self.P))

    def rows(self, owner, name, a, scalar=True):
        """An argument given per point and output as one value a row of ``X``.

        Parameters
        ----------
        owner, name : str
            The function and the argument, for messages.
        a : array_like of shape (n, P), a number, or None
            The argument (None and, with ``scalar``, a number are returned as they are).
        scalar : bool, default True
            Whether a number is allowed.

        Returns
        -------
        ndarray of shape (n P,), or ``a``
            Point-major, as ``X``'s rows; ``a`` as it is for a per-row query.

        Raises
        ------
        TypeError, ValueError
            ``a`` not numeric, or of a shape other than (n, P).
        """
        if a is None or self.P is None or scalar and np.ndim(a) == 0:
            return a
        a = as_float_array(owner, name, a)
        if a.shape != (self.n, self.P):
            raise ValueError(f"{owner}: {name} must {'be a number or ' if scalar else ''}have shape ({self.n}, {self.P}) "
                             f"(a value a point and output, as the results), got shape {a.shape}")
        return a.ravel()


def query(X_new, D, P, owner="predict", name="X_new"):
    """The :class:`Query` of new inputs for a posterior of D input columns and P outputs (P None:
    a single-output posterior, X_new passed through unchecked).

    Parameters
    ----------
    X_new : array_like, shape (n, D) or (n, D+1)
    D : int
        The input columns (without the output index).
    P : int or None
    owner, name : str
        For messages.

    Returns
    -------
    Query

    Raises
    ------
    TypeError, ValueError
        Inputs that are not numeric and finite, of a width other than D or D+1, or an output index
        that is not an integer in 0..P-1.
    """
    if P is None:
        return Query(X_new)
    X_new = validate_inputs(X_new, name)
    if X_new.shape[1] == D + 1:
        check_outputs(owner, name, X_new, P, every_output=False)
        return Query(X_new)
    if X_new.shape[1] != D:
        raise ValueError(f"{owner}: {name} has {X_new.shape[1]} columns; this multi-output posterior takes (n, D={D}) "
                         f"inputs (every output predicted, results (n, {P})) or (n, D+1={D + 1}) with the output "
                         f"index last (one output a row)")
    n = X_new.shape[0]
    X_long = np.column_stack([np.repeat(X_new, P, axis=0), np.tile(np.arange(P, dtype=float), n)])
    return Query(X_long, n, P)


__all__ = ["output_count", "layout", "long_data", "check_outputs", "output_groups", "check_output_names", "data_output_names",
           "output_labels", "saved_output_names", "name_outputs", "unique_inputs", "selection_inputs", "expand_inducing",
           "inducing_gradient", "method_inducing", "standardization", "subsample_rows", "draw_inputs", "Query", "query"]
