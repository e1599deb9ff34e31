"""Synthetic benchmark generators and loaders for the benchmark CSV files.

Generators return ``(X, y)`` with ``X`` a float64 array of shape ``(n, D)`` and
``y`` a float64 array of shape ``(n,)``; classification labels are in
``{-1.0, +1.0}``.  Every generator takes ``seed`` and draws all randomness from
``np.random.default_rng(seed)``, so equal arguments give identical arrays.

The loaders read the normalised CSV files described in ``shared/data/MANIFEST.md``
(``<name>/<name>.csv``: header row, numeric columns, target column ``y`` last).
The package does not ship these files; :func:`data_home` says where they are
looked for.
"""

import csv
import os
from pathlib import Path

import numpy as np

__all__ = [
    "twonorm",
    "ringnorm",
    "xor",
    "banana",
    "snelson_like",
    "platform",
    "sine",
    "data_home",
    "read_table",
    "read_labelled_table",
    "load_csv",
    "load_split",
]


# ---------------------------------------------------------------------------
# argument checking
# ---------------------------------------------------------------------------

def _is_int(value):
    # bool is an int subclass, but n=True is almost certainly a mistake.
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value):
    return _is_int(value) or isinstance(value, (float, np.floating))


def _check_positive_int(func, name, value):
    if not _is_int(value):
        raise TypeError(f"{func}: {name} must be a positive integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{func}: {name} must be a positive integer, got {value!r}")
    return int(value)


def _check_nonneg_real(func, name, value):
    if not _is_real(value):
        raise TypeError(f"{func}: {name} must be a non-negative finite number, got {value!r}")
    if not (np.isfinite(value) and value >= 0):
        raise ValueError(f"{func}: {name} must be a non-negative finite number, got {value!r}")
    return float(value)


def _random_labels(rng, n):
    """n labels in {-1.0, +1.0}, each class with probability 1/2."""
    return np.where(rng.random(n) < 0.5, -1.0, 1.0)


# ---------------------------------------------------------------------------
# synthetic classification sets
# ---------------------------------------------------------------------------

def twonorm(n=400, dim=20, seed=0):
    """Breiman's *twonorm* problem.

    Source: L. Breiman (1996), "Bias, variance, and arcing classifiers",
    Technical Report 460, Statistics Department, UC Berkeley.  Class +1 is
    ``N(+a*1, I)`` and class -1 is ``N(-a*1, I)`` in ``dim`` dimensions with
    ``a = 2 / sqrt(dim)`` (``2/sqrt(20)`` in the original).  Each point's label
    is drawn independently with probability 1/2 per class.  The sign convention
    (+1 has positive mean) matches the Rätsch IDA copy ``raetsch_twonorm``,
    which is the same problem after column standardisation.

    Parameters
    ----------
    n : int, default 400
        Number of points (a positive integer).
    dim : int, default 20
        Number of input dimensions.
    seed : int or None, default 0
        Seed of ``np.random.default_rng``.

    Returns
    -------
    X : ndarray, shape (n, dim), float64
    y : ndarray, shape (n,), float64, values in {-1, +1}
    """
    n = _check_positive_int("twonorm", "n", n)
    dim = _check_positive_int("twonorm", "dim", dim)
    rng = np.random.default_rng(seed)
    y = _random_labels(rng, n)
    a = 2.0 / np.sqrt(dim)
    X = rng.standard_normal((n, dim)) + a * y[:, None]
    return X, y


def ringnorm(n=400, dim=20, seed=0):
    """Breiman's *ringnorm* problem.

    Source: L. Breiman (1996), "Bias, variance, and arcing classifiers",
    Technical Report 460, Statistics Department, UC Berkeley.  Class +1 is
    ``N(0, 4 I)`` and class -1 is ``N(a*1, I)`` in ``dim`` dimensions with
    ``a = 1 / sqrt(dim)``.  Each point's label is drawn independently with
    probability 1/2 per class.  The sign convention (+1 is the wide class)
    matches the Rätsch IDA copy ``raetsch_ringnorm`` (standardised columns).

    Parameters
    ----------
    n : int, default 400
        Number of points (a positive integer).
    dim : int, default 20
        Number of input dimensions.
    seed : int or None, default 0
        Seed of ``np.random.default_rng``.

    Returns
    -------
    X : ndarray, shape (n, dim), float64
    y : ndarray, shape (n,), float64, values in {-1, +1}
    """
    n = _check_positive_int("ringnorm", "n", n)
    dim = _check_positive_int("ringnorm", "dim", dim)
    rng = np.random.default_rng(seed)
    y = _random_labels(rng, n)
    a = 1.0 / np.sqrt(dim)
    Z = rng.standard_normal((n, dim))
    X = np.where(y[:, None] > 0, 2.0 * Z, Z + a)
    return X, y


_XOR_CENTRE = 1.5


def xor(n=200, noise=1.0, seed=0):
    """Two-dimensional "xor" problem of Naish-Guzman & Holden (2007), section 6.

    Source: A. Naish-Guzman and S. Holden, "The Generalized FITC Approximation",
    NIPS 2007, section 6: "four unit-variance Gaussian clusters at
    (+-1.5, +-1.5) with a small overlap, giving an optimal error rate of around
    13%".  Each point picks one of the four clusters uniformly at random and is
    drawn from ``N(centre, noise**2 I)`` (``noise=1`` is the paper's setting).
    The label is the XOR of the signs of the cluster centre: +1 for the
    clusters at (+1.5, -1.5) and (-1.5, +1.5), -1 for (+1.5, +1.5) and
    (-1.5, -1.5) (the paper does not say which pair is which class).  With
    ``noise=1`` the rule ``-sign(x1 * x2)`` errs on about 12.5% of points.

    Parameters
    ----------
    n : int, default 200
        Number of points (a positive integer).
    noise : float, default 1.0
        Standard deviation of each cluster (non-negative).
    seed : int or None, default 0
        Seed of ``np.random.default_rng``.

    Returns
    -------
    X : ndarray, shape (n, 2), float64
    y : ndarray, shape (n,), float64, values in {-1, +1}
    """
    n = _check_positive_int("xor", "n", n)
    noise = _check_nonneg_real("xor", "noise", noise)
    rng = np.random.default_rng(seed)
    signs = np.where(rng.random((n, 2)) < 0.5, -1.0, 1.0)
    X = _XOR_CENTRE * signs + noise * rng.standard_normal((n, 2))
    y = -signs[:, 0] * signs[:, 1]
    return X, y


def banana(n=400, noise=0.2, seed=0):
    """Two-class, banana-shaped 2-D set (a generated stand-in for Rätsch's banana).

    The IDA banana data (``load_csv("raetsch_banana")``) come without a
    generating formula, so this uses the two interleaved half-circles ("moons")
    construction: with ``t ~ U(0, pi)`` per point,

    * class +1 lies on the upper arc ``(cos t, sin t)``,
    * class -1 on the mirrored, shifted arc ``(1 - cos t, 0.5 - sin t)``,

    and isotropic Gaussian noise with standard deviation ``noise`` is added to
    both coordinates.  Labels are drawn with probability 1/2 per class.

    Parameters
    ----------
    n : int, default 400
        Number of points (a positive integer).
    noise : float, default 0.2
        Standard deviation of the Gaussian noise added to both coordinates (non-negative).
    seed : int or None, default 0
        Seed of ``np.random.default_rng``.

    Returns
    -------
    X : ndarray, shape (n, 2), float64
    y : ndarray, shape (n,), float64, values in {-1, +1}
    """
    n = _check_positive_int("banana", "n", n)
    noise = _check_nonneg_real("banana", "noise", noise)
    rng = np.random.default_rng(seed)
    y = _random_labels(rng, n)
    t = rng.uniform(0.0, np.pi, n)
    upper = np.column_stack([np.cos(t), np.sin(t)])
    lower = np.column_stack([1.0 - np.cos(t), 0.5 - np.sin(t)])
    X = np.where(y[:, None] > 0, upper, lower) + noise * rng.standard_normal((n, 2))
    return X, y


# Rising and falling edge of the platform, their steepness, and the class +1
# probabilities off and on the plateau; chosen to resemble the thesis' data
# (see platform()).
_PLATFORM_EDGES = (0.45, 3.8)
_PLATFORM_STEEPNESS = 10.0
_PLATFORM_P_OFF, _PLATFORM_P_ON = 0.05, 0.95


def platform(n=50, seed=0):
    """One-dimensional "Platform" classification toy (Passerello, 2021 thesis).

    Source: G. Passerello, "Heteroscedastic Inducing Point Selection for Sparse
    Gaussian Process Classification", MEng thesis, Imperial College London,
    Table 5.1 ("Platform", N=50, D=1, toy dataset) and Figure 5.2.  The thesis
    gives no formula; its 50 points (``platform.csv`` in the author's SHGP
    repository, the same as GPflow's ``classif_1D`` demo data) have x in
    [0, 5.76], label 1 on roughly [0.6, 3.65] and 0 elsewhere, with one
    positive outlier at x = 0.18.

    This generator draws data of that shape: ``x ~ U(0, 6)`` and
    ``P(y = +1 | x) = p_off + (p_on - p_off) * s(k (x - 0.45)) * s(k (3.8 - x))``
    with ``s`` the logistic function, ``k = 10``, ``p_off = 0.05`` and
    ``p_on = 0.95``: a plateau of high probability between two low ends, so
    that occasional outliers occur on both.  Labels are mapped to {-1, +1}.

    Parameters
    ----------
    n : int, default 50
        Number of points (a positive integer).
    seed : int or None, default 0
        Seed of ``np.random.default_rng``.

    Returns
    -------
    X : ndarray, shape (n, 1), float64
    y : ndarray, shape (n,), float64, values in {-1, +1}
    """
    n = _check_positive_int("platform", "n", n)
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 6.0, n)
    lo, hi = _PLATFORM_EDGES
    k = _PLATFORM_STEEPNESS
    plateau = 1.0 / ((1.0 + np.exp(-k * (x - lo))) * (1.0 + np.exp(-k * (hi - x))))
    p = _PLATFORM_P_OFF + (_PLATFORM_P_ON - _PLATFORM_P_OFF) * plateau
    y = np.where(rng.random(n) < p, 1.0, -1.0)
    return x[:, None], y


# ---------------------------------------------------------------------------
# synthetic regression sets
# ---------------------------------------------------------------------------

def snelson_like(n=200, noise=0.3, seed=0):
    """1-D regression data resembling Snelson & Ghahramani's toy set.

    Source of the shape: E. Snelson and Z. Ghahramani, "Sparse Gaussian
    Processes using Pseudo-inputs", NIPS 2005 (200 training points on [0, 6];
    the real data are ``load_csv("snelson")``).  Here ``x ~ U(0, 6)`` and
    ``y = f(x) + noise * N(0, 1)`` with

        f(x) = -0.37 - 0.62 sin(x) - 0.47 cos(x) + 0.35 cos(2x)
               + 0.45 sin(3x) + 0.33 cos(3x),

    a least-squares fit of a three-harmonic Fourier series to Snelson's
    training points (coefficients rounded; residual sd about 0.33, hence the
    default ``noise=0.3``).

    Parameters
    ----------
    n : int, default 200
        Number of points (a positive integer).
    noise : float, default 0.3
        Standard deviation of the target noise (non-negative).
    seed : int or None, default 0
        Seed of ``np.random.default_rng``.

    Returns
    -------
    X : ndarray, shape (n, 1), float64
    y : ndarray, shape (n,), float64
    """
    n = _check_positive_int("snelson_like", "n", n)
    noise = _check_nonneg_real("snelson_like", "noise", noise)
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 6.0, n)
    f = (
        -0.37
        - 0.62 * np.sin(x)
        - 0.47 * np.cos(x)
        + 0.35 * np.cos(2.0 * x)
        + 0.45 * np.sin(3.0 * x)
        + 0.33 * np.cos(3.0 * x)
    )
    y = f + noise * rng.standard_normal(n)
    return x[:, None], y


def sine(n=50, noise=0.1, seed=0):
    """Noisy sine on a regular grid: ``x = linspace(-3, 3, n)``,
    ``y = sin(3x) + noise * default_rng(seed).standard_normal(n)``.

    Source: the project's oracle recipe (``shared/oracles/data/README_data.json``);
    ``sine()`` reproduces ``shared/oracles/data/sine_train.csv`` exactly.

    Parameters
    ----------
    n : int, default 50
        Number of points (a positive integer).
    noise : float, default 0.1
        Standard deviation of the target noise (non-negative).
    seed : int or None, default 0
        Seed of ``np.random.default_rng``.

    Returns
    -------
    X : ndarray, shape (n, 1), float64
    y : ndarray, shape (n,), float64
    """
    n = _check_positive_int("sine", "n", n)
    noise = _check_nonneg_real("sine", "noise", noise)
    x = np.linspace(-3.0, 3.0, n)
    # Same operation order as the oracle recipe so the floats match bit for bit.
    y = np.sin(3.0 * x) + noise * np.random.default_rng(seed).standard_normal(n)
    return x[:, None], y


# ---------------------------------------------------------------------------
# file-based datasets
# ---------------------------------------------------------------------------

def data_home(data_home=None):
    """Directory holding the benchmark dataset folders, as a ``pathlib.Path``.

    Resolution order:

    1. the ``data_home`` argument;
    2. the ``GPDSL_DATA`` environment variable;
    3. ``../shared/data`` relative to the current working directory;
    4. ``shared/data`` next to the repository (``<repo>/../shared/data``).

    An explicit argument or environment variable naming a missing directory is
    an error rather than silently falling through, so typos are caught.

    Parameters
    ----------
    data_home : str or os.PathLike, optional
        An explicit directory, which must exist.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    FileNotFoundError
        If no directory is found.
    """
    for source, value in (("data_home", data_home), ("GPDSL_DATA", os.environ.get("GPDSL_DATA"))):
        if value is not None and str(value) != "":
            path = Path(value).expanduser()
            if not path.is_dir():
                raise FileNotFoundError(f"data_home: {source} points to {str(path)!r}, which is not a directory")
            return path
    for path in (
        Path.cwd().parent / "shared" / "data",
        Path(__file__).resolve().parents[2] / "shared" / "data",
    ):
        if path.is_dir():
            return path
    raise FileNotFoundError(
        "data_home: no dataset directory found; set the GPDSL_DATA environment "
        "variable or pass data_home= to the directory holding the dataset folders"
    )


def _dataset_dir(func, name, data_home_):
    """Folder of dataset ``name``; ValueError listing the known ones if absent."""
    if not isinstance(name, (str, os.PathLike)):
        raise TypeError(f"{func}: name must be a string, got {name!r}")
    root = data_home(data_home_)
    folder = root / str(name)
    if not (folder / f"{name}.csv").is_file():
        available = sorted(p.name for p in root.iterdir() if (p / f"{p.name}.csv").is_file())
        raise ValueError(
            f"{func}: unknown dataset {str(name)!r} in {str(root)!r}; available: {', '.join(available)}"
        )
    return folder


# The cells a column that may have missing values holds for one (read as NaN): blank, and R's NA.
_MISSING_CELLS = ("", "NA")


def read_table(path, missing=()):
    """Header names and a float64 array of the rows of a numeric CSV file.

    Parameters
    ----------
    path : str or os.PathLike
        A CSV file with a header row; blank lines are skipped.
    missing : collection of str, optional
        Columns whose missing values (a blank cell or ``NA``) are read
        as NaN (a multi-output target column with unobserved entries); elsewhere such a cell is
        an error.

    Returns
    -------
    header : list of str
        The column names, stripped.
    data : ndarray, shape (n, n_columns), float64

    Raises
    ------
    ValueError
        An empty file, a row with a number of fields other than the header's, a column of
        ``missing`` not in it, or a non-numeric value (the message names the column and line).
    """
    header, body = _read_rows(path)
    absent = [name for name in missing if name not in header]
    if absent:
        raise ValueError(f"column {absent[0]!r} not in {str(path)!r}; columns: {', '.join(header)}")
    gaps = {j for j, name in enumerate(header) if name in set(missing)}
    if gaps:
        body = [(lineno, ["nan" if j in gaps and cell.strip() in _MISSING_CELLS else cell for j, cell in enumerate(row)])
                for lineno, row in body]
    return header, _numeric(header, body, path, range(len(header)))


def read_labelled_table(path, label, role="target"):
    """:func:`read_table` where column ``label`` may hold text labels (``setosa``): a classifier's
    target, kept as text when any of its cells is not a number, as a likelihood that takes labels
    (``Categorical``) takes them from ``Model.fit``.

    Parameters
    ----------
    path : str or os.PathLike
        A CSV file with a header row; blank lines are skipped.
    label : str
        The column that may hold text.
    role : str, default "target"
        What the column is, for the message where it is missing.

    Returns
    -------
    header : list of str
        The column names, stripped.
    data : ndarray, shape (n, n_columns), float64
        As :func:`read_table`; ``label``'s column is NaN where it holds text.
    labels : ndarray, shape (n,)
        ``label``'s column: float64 where every cell is a number, else its cells as text (str,
        stripped of surrounding blanks).

    Raises
    ------
    ValueError
        As :func:`read_table` (a non-numeric value in another column), ``label`` not a column
        (the message lists them), or an empty cell in a column of text labels.
    """
    header, body = _read_rows(path)
    if label not in header:
        raise ValueError(f"{role} column {label!r} not in {str(path)!r}; columns: {', '.join(header)}")
    column = header.index(label)
    others = [j for j in range(len(header)) if j != column]
    data = np.full((len(body), len(header)), np.nan)
    data[:, others] = _numeric(header, body, path, others)
    cells = [row[column].strip() for _, row in body]
    try:
        labels = np.array(cells, dtype=np.float64)
    except ValueError:
        for lineno, row in body:
            if not row[column].strip():
                raise ValueError(f"load_csv: empty value in column {label!r} at line {lineno} of {str(path)!r}") from None
        return header, data, np.array(cells)
    data[:, column] = labels
    return header, data, labels


def _read_rows(path):
    """(stripped header, body) of a CSV file: the body's rows as (line number, list of str), blank
    lines dropped; ValueError for an empty file or a row of another width than the header."""
    # utf-8-sig drops a byte-order mark that would otherwise stick to the first name.
    with open(path, newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise ValueError(f"load_csv: {str(path)!r} is empty (expected a header row)")
    header = [h.strip() for h in rows[0]]
    for lineno, row in enumerate(rows[1:], start=2):
        if row and len(row) != len(header):
            raise ValueError(
                f"load_csv: {str(path)!r} line {lineno} has {len(row)} fields, header has {len(header)}"
            )
    return header, [(lineno, r) for lineno, r in enumerate(rows[1:], start=2) if r]  # tolerate blank lines


def _numeric(header, body, path, columns):
    """The float64 (n, len(columns)) array of ``columns`` of the body rows, or ValueError naming
    the first non-numeric cell's column and line."""
    columns = list(columns)
    every = columns == list(range(len(header)))
    cells = [row if every else [row[j] for j in columns] for _, row in body]
    try:
        return np.array(cells, dtype=np.float64).reshape(len(body), len(columns))
    except ValueError:
        # Locate the offending cell only on failure, to keep the common path vectorised.
        for lineno, row in body:
            for j in columns:
                try:
                    float(row[j])
                except ValueError:
                    raise ValueError(
                        f"load_csv: non-numeric value {row[j]!r} in column {header[j]!r} "
                        f"at line {lineno} of {str(path)!r}"
                    ) from None
        raise


def load_csv(name, data_home=None, target="y"):
    """Load ``<data_home>/<name>/<name>.csv`` as ``(X, y)``.

    ``name`` is a dataset folder name (see ``shared/data/MANIFEST.md``), or a
    path to a ``.csv`` file, which is read directly.  The file must have a
    header row and numeric columns; ``target`` names the column returned as
    ``y`` and all other columns, in file order, form ``X``.

    Parameters
    ----------
    name : str or os.PathLike
        A dataset folder name, or a path to a ``.csv`` file.
    data_home : str or os.PathLike, optional
        Where the dataset folders are (see :func:`data_home`).
    target : str, default "y"
        The header name of the target column.

    Returns
    -------
    X : ndarray, shape (n, D), float64
    y : ndarray, shape (n,), float64

    Raises
    ------
    ValueError
        Unknown dataset (the message lists the available ones), missing target
        column (lists the columns), non-numeric values or ragged rows.
    FileNotFoundError
        No data directory, or a ``.csv`` path that does not exist.
    """
    if isinstance(name, (str, os.PathLike)) and str(name).lower().endswith(".csv"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"load_csv: no such file {str(path)!r}")
    else:
        path = _dataset_dir("load_csv", name, data_home) / f"{name}.csv"
    header, data = read_table(path)
    if target not in header:
        raise ValueError(
            f"load_csv: target column {target!r} not in {str(path)!r}; columns: {', '.join(header)}"
        )
    j = header.index(target)
    return np.delete(data, j, axis=1), data[:, j].copy()


def _read_indices(path):
    """One integer index array per non-empty line of a split file."""
    with open(path, encoding="utf-8") as fh:
        return [np.array(line.split(","), dtype=np.intp) for line in fh if line.strip()]


def load_split(name, realisation=1, data_home=None):
    """Train/test split number ``realisation`` (1-based) of a Rätsch benchmark.

    Reads ``<name>.csv`` and the split files ``<name>_train_idx.csv`` /
    ``<name>_test_idx.csv`` in ``<data_home>/<name>/`` (line k holds the
    comma-separated 0-based row indices of realisation k); see
    ``shared/data/MANIFEST.md``.

    Parameters
    ----------
    name : str
        A dataset folder name with split files (``raetsch_banana``, ...).
    realisation : int, default 1
        The split number, 1-based.
    data_home : str or os.PathLike, optional
        Where the dataset folders are (see :func:`data_home`).

    Returns
    -------
    X_train : ndarray, shape (n_train, D), float64
    y_train : ndarray, shape (n_train,), float64
    X_test : ndarray, shape (n_test, D), float64
    y_test : ndarray, shape (n_test,), float64

    Raises
    ------
    ValueError
        Unknown dataset, a dataset without split files, or a realisation that
        is not present (the message says how many there are).
    """
    realisation = _check_positive_int("load_split", "realisation", realisation)
    folder = _dataset_dir("load_split", name, data_home)
    train_file = folder / f"{name}_train_idx.csv"
    test_file = folder / f"{name}_test_idx.csv"
    if not (train_file.is_file() and test_file.is_file()):
        raise ValueError(
            f"load_split: dataset {name!r} has no {train_file.name} / {test_file.name} split files"
        )
    train, test = _read_indices(train_file), _read_indices(test_file)
    count = min(len(train), len(test))
    if realisation > count:
        raise ValueError(
            f"load_split: {name!r} has {count} realisation(s) (1-{count}), got realisation={realisation}"
        )
    X, y = load_csv(name, data_home=data_home)
    tr, te = train[realisation - 1], test[realisation - 1]
    for kind, idx in (("train", tr), ("test", te)):
        if idx.size and (idx.min() < 0 or idx.max() >= len(y)):
            raise ValueError(
                f"load_split: {name!r} realisation {realisation} {kind} indices fall outside 0..{len(y) - 1}"
            )
    return X[tr], y[tr], X[te], y[te]
