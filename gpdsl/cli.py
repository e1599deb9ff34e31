"""The ``gpdsl`` command line.

``gpdsl run [MODEL.toml] [--out DIR] [--trust MODULE ...]`` fits a model, prints its declaration, evidence, fitted
hyperparameters, held-out metrics and an ArviZ summary, and writes the posterior (netCDF) and a
plot (PNG) to DIR.  Without MODEL.toml it fits the built-in default model to embedded data
(:func:`gpdsl.datasets.snelson_like`), so it needs no download.

A model file runs no code: a component type ``"module:Class"`` is read only where ``--trust
module`` is given (:meth:`gpdsl.Model.from_dict`).  Run it as the ``gpdsl`` script or ``python -P
-m gpdsl``: plain ``python -m gpdsl`` imports gpdsl's dependencies while the working folder is first
on the import path, before :mod:`gpdsl.__main__` can take the folder off.

A ``[data] offset`` column holds each row's offset of the latent input (log exposure for
counts): the fit and the held-out metrics take it (``fit(offset=...)``, ``predict(offset=...)``).
A multi-output model (a kernel of P outputs: ICM, LMC) reads ``[data] targets = [P columns]``
(one column per output, a blank or ``NA`` cell unobserved) or ``target`` with ``output``, the
column of each row's output index (or name, with ``outputs`` listing the names in index order;
:func:`gpdsl.run_data.load_table`); its rows, and the held-out ones among them, are (input,
output) pairs, and the held-out metrics are also given by output.

A ``[sample]`` table (keys ``draws``, ``tune``, ``chains``, ``seed``, ``target_accept``,
``cores``; an empty one takes Model.sample's defaults) makes ``gpdsl run`` draw the
hyperparameters' posterior by NUTS (:meth:`gpdsl.Model.sample`) instead of fitting: it prints the
sampler's diagnostics and ArviZ's summary of the draws and writes the run
(:meth:`gpdsl.SampledPosterior.save`) as ``[output] posterior`` (it draws no plot: ``[output]
plot`` is refused with it).

Bad input (a missing file, invalid TOML, an unknown component, a missing column, an offset with
a method that takes none, a ``[fit] subsample`` not below the training rows, an output name the
writers would refuse, ...)
prints one line ``gpdsl: error: <message>`` on stderr and exits with status 2, before any fitting;
a numerical failure while fitting or a failure to write the outputs exits with status 1.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

# The [data] table's reader (and UsageError) and held_out_metrics stay importable from here, where
# they were first defined.
from .run_data import (DEFAULT_TEST_FRACTION, UsageError, check_offset, check_table_keys, check_targets,  # noqa: F401
                       held_out_size, load_table, run_output_names)
from .run_report import held_out_metrics, report, report_sampled  # noqa: F401


DEFAULT_OUT = "gpdsl_run"
DEFAULT_POSTERIOR = "posterior.nc"
DEFAULT_PLOT = "fit.png"
SPLIT_SEED = 0
_OUTPUT_KEYS = {"posterior", "plot"}
# The [sample] table's keys: Model.sample's arguments that a model file sets.
SAMPLE_KEYS = ("draws", "tune", "chains", "seed", "target_accept", "cores")
# The plot's formats: those matplotlib writes with its own backends and Pillow (one of its
# dependencies), chosen by the name's extension; pgf (needs LaTeX) and raw pixel dumps are left out.
PLOT_FORMATS = (".png", ".pdf", ".svg", ".svgz", ".eps", ".ps", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")
# Longest file name most file systems take (ext4, XFS, APFS, NTFS: 255 bytes or UTF-16 units).
_NAME_MAX = 255
# save() writes the posterior first as ".<name>.<12 hex digits>.tmp": 18 more bytes.
_SAVE_TEMPORARY_EXTRA = 18


class RunError(Exception):
    """A failure while running (numerical, writing files): one line and exit status 1."""


# -- data ---------------------------------------------------------------------------------------
def split_rows(n, n_test, seed=SPLIT_SEED):
    """Row indices of the seeded random train / held-out split (:func:`split`).

    Parameters
    ----------
    n : int
        Rows in the data.
    n_test : int
        Held-out rows.
    seed : int, default SPLIT_SEED
        Seed of the permutation.

    Returns
    -------
    train : ndarray of int, shape (n - n_test,)
    test : ndarray of int, shape (n_test,)
        Each part's rows in increasing order.
    """
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def split(X, y, n_test, seed=SPLIT_SEED):
    """Seeded random train / held-out split with ``n_test`` held-out rows.

    Parameters
    ----------
    X : ndarray, shape (N, D)
        Inputs.
    y : ndarray, shape (N,)
        Targets.
    n_test : int
        Held-out rows.
    seed : int, default SPLIT_SEED
        Seed of the permutation.

    Returns
    -------
    X_train : ndarray, shape (N - n_test, D)
    y_train : ndarray, shape (N - n_test,)
    X_test : ndarray, shape (n_test, D)
    y_test : ndarray, shape (n_test,)
        Each part's rows in their original order (the rows of :func:`split_rows`).
    """
    train, test = split_rows(X.shape[0], n_test, seed)
    return X[train], y[train], X[test], y[test]


def default_problem():
    """The built-in model and the embedded data: 150 training and 50 held-out points."""
    import gpdsl as gd

    model = gd.Model(kernel=gd.kernels.SquaredExponential(1.0, 1.0),
                     likelihood=gd.likelihoods.Gaussian(variance=0.1),
                     inducing=gd.inducing.KMeans(15, seed=0),
                     inference=gd.inference.VFE())
    X, y = gd.datasets.snelson_like(n=200, seed=0)
    return model, split(X, y, n_test=50), "gd.datasets.snelson_like(n=200, seed=0)"


def fit_options(fit):
    """Keyword arguments for Model.fit from the ``[fit]`` table (checked against its signature).

    Parameters
    ----------
    fit : dict
        The ``[fit]`` table: keyword-only arguments of :meth:`gpdsl.Model.fit` except
        ``callback``, and ``standardize`` and ``offset`` (which belong to ``[data]``).

    Returns
    -------
    dict
        The options, ``fixed`` as a tuple.

    Raises
    ------
    UsageError
        If ``fit`` is not a table or has an unknown key.
    """
    from .model import Model

    if not isinstance(fit, dict):
        raise UsageError(f"[fit] must be a table, got {fit!r}")
    params = inspect.signature(Model.fit).parameters
    # standardize and offset belong to [data] (properties of the columns; the offset is a column).
    allowed = sorted(name for name, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
                     and name not in ("callback", "standardize", "offset"))
    check_table_keys("[fit]", fit, allowed)
    options = dict(fit)
    if isinstance(options.get("fixed"), list):
        options["fixed"] = tuple(options["fixed"])
    return options


def sample_options(sample, fit, data):
    """Keyword arguments for Model.sample from the ``[sample]`` table.

    A model file with a ``[sample]`` table (empty: the defaults) is sampled by NUTS
    (:meth:`gpdsl.Model.sample`) instead of fitted.  Model.sample fits the MAP itself (its
    starting point), in the data's units, so of ``[fit]`` only ``fixed`` applies, and ``[data]``
    may not ask for standardisation or an offset, which Model.sample does not take.

    Parameters
    ----------
    sample : dict
        The ``[sample]`` table: any of :data:`SAMPLE_KEYS`, checked by Model.sample before any fit.
    fit : dict
        The ``[fit]`` table.
    data : dict
        The ``[data]`` table.

    Returns
    -------
    dict
        The options, with ``[fit] fixed`` as a tuple.

    Raises
    ------
    UsageError
        ``sample`` is not a table or has an unknown key; ``[fit]`` has a key other than
        ``fixed``; ``[data]`` has an ``offset`` or ``standardize = true``.
    """
    if not isinstance(sample, dict):
        raise UsageError(f"[sample] must be a table, got {sample!r}")
    check_table_keys("[sample]", sample, SAMPLE_KEYS)
    point_fit = sorted(set(fit) - {"fixed"})
    if point_fit:
        raise UsageError(f"[fit]: {point_fit} configure a point fit; with [sample] the run samples by NUTS "
                         f"(Model.sample fits its own starting point) and takes only [fit] fixed")
    if data.get("offset") is not None:
        raise UsageError("[data]: offset is not taken by Model.sample; leave it out of a model file with [sample]")
    if data.get("standardize", False) is not False:
        raise UsageError(f"[data]: standardize = {data['standardize']!r} with [sample]: Model.sample works in the "
                         f"data's units (the priors are declared in them); set standardize = false or leave it out")
    return {**fit_options(fit), **sample}


def output_names(output):
    """File names inside ``--out`` from the ``[output]`` table.

    Parameters
    ----------
    output : dict
        The ``[output]`` table (``posterior``, ``plot``; both optional).

    Returns
    -------
    dict
        ``{"posterior": name, "plot": name}``, defaults filled in.

    Raises
    ------
    UsageError
        A key is unknown, or a name is not a plain file name: empty, ``.`` or ``..``, or
        holding a path separator (which also covers absolute paths); a name holds a NUL or is
        longer than a file system takes; ``posterior`` does not end in ``.nc`` or ``plot`` in
        one of :data:`PLOT_FORMATS` (matplotlib picks the format from the extension).
    """
    if not isinstance(output, dict):
        raise UsageError(f"[output] must be a table, got {output!r}")
    check_table_keys("[output]", output, _OUTPUT_KEYS)
    names = {"posterior": DEFAULT_POSTERIOR, "plot": DEFAULT_PLOT}
    for key in sorted(_OUTPUT_KEYS & set(output)):
        name = output[key]
        # The outputs must stay inside --out: a separator or '..' would let a model file write
        # anywhere the user can (over the model file or the data, say).  Both separators are
        # refused on every platform, so that a model file means the same everywhere.
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name:
            raise UsageError(f"[output]: {key} must be a plain file name inside --out "
                             f"(no path separator, no '..'), got {name!r}")
        # Every check that a name can fail is made here, before the fit: a name the writer
        # refuses would otherwise surface as a traceback after minutes of fitting (issue 25).
        if "\0" in name:
            raise UsageError(f"[output]: {key} must not contain a NUL character, got {name!r}")
        extra = _SAVE_TEMPORARY_EXTRA if key == "posterior" else 0
        if len(name.encode("utf-8", "surrogateescape")) + extra > _NAME_MAX:
            raise UsageError(f"[output]: {key} must be at most {_NAME_MAX - extra} bytes long "
                             f"(a file system limit), got {len(name.encode('utf-8', 'surrogateescape'))}")
        if key == "posterior" and not name.lower().endswith(".nc"):
            raise UsageError(f"[output]: posterior must end in .nc (it is written as netCDF), got {name!r}")
        if key == "plot" and os.path.splitext(name)[1].lower() not in PLOT_FORMATS:
            raise UsageError(f"[output]: plot must end in an image format's extension "
                             f"({', '.join(PLOT_FORMATS)}; the extension picks the format), got {name!r}")
        names[key] = name
    return names


def check_output_paths(out, names):
    """Raise a UsageError, before any fitting, where the outputs cannot be written to ``out``.

    Parameters
    ----------
    out : pathlib.Path
        The ``--out`` directory; it need not exist yet (it is created after the fit).
    names : dict
        The output file names, ``posterior`` and ``plot`` (:func:`output_names`).

    Raises
    ------
    UsageError
        ``--out`` or the nearest of its parents that exists is not a directory, or an output's
        path inside it is a directory or a symbolic link (which would lead the output out of
        ``--out``; the run writes each output by replacing the name, never through a link).
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    if not out.exists():
        parent = out.absolute().parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise UsageError(f"--out {out}: cannot create it, {parent} is not a directory")
        return
    for key, name in sorted(names.items()):
        if (out / name).is_symlink():
            raise UsageError(f"[output]: {key} {out / name} is a symbolic link (to {os.readlink(out / name)}); "
                             f"gpdsl run writes no file through a link: remove it, or choose another --out")
        if (out / name).is_dir():
            raise UsageError(f"[output]: {key} {out / name} is a directory, not a file")


def check_subsample(options, n_train, n_test):
    """Raise a UsageError unless ``[fit] subsample`` (if given) is fewer rows than the training rows.

    ``Model.fit(subsample=n)`` fits on n of the N training rows and then finishes on all N; with
    n >= N there is nothing to subsample, and a model file saying so is most likely written for
    other data, so it is refused rather than read as "all rows".

    Parameters
    ----------
    options : dict
        The ``[fit]`` options (:func:`fit_options`).
    n_train : int
        Training rows N (the data's rows less the held-out ones).
    n_test : int
        Held-out rows, for the message.

    Raises
    ------
    UsageError
        ``subsample`` is not a positive integer less than ``n_train``.
    """
    n = options.get("subsample")
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UsageError(f"[fit] subsample must be a positive integer (rows to fit on), got {n!r}")
    if n >= n_train:
        held_out = f" ({n_train + n_test} rows less {n_test} held out)" if n_test else ""
        raise UsageError(f"[fit] subsample = {n} is not less than the N = {n_train} training rows"
                         f"{held_out}; give a smaller subsample, or leave it out to fit on all rows")


def trusted_option(names):
    """The ``--trust`` module names, checked whether or not a model file is given.

    Parameters
    ----------
    names : list of str
        The ``--trust`` values.

    Returns
    -------
    frozenset of str
        As :func:`gpdsl.components.trusted_modules`.

    Raises
    ------
    UsageError
        A value that is not a dotted module name.
    """
    from .components import trusted_modules

    try:
        return trusted_modules(names)
    except (TypeError, ValueError) as err:
        raise UsageError(f"--{err}") from err


def problem_from_toml(path, trust=None):
    """Everything ``gpdsl run MODEL.toml`` needs from a model file.

    Parameters
    ----------
    path : str or pathlib.Path
        The TOML model file (:mod:`gpdsl.io.spec`).
    trust : sequence of str, optional
        Modules the model file's ``"module:QualName"`` types may import (``--trust``;
        :meth:`gpdsl.Model.from_dict`).

    Returns
    -------
    model : gpdsl.Model
    data : tuple
        ``(X, y, X_test, y_test, offset, offset_test)``: the rows of :func:`split`, and the
        ``[data] offset`` column split with them (both None without an offset).
    description : str
    options : dict
        Keyword arguments of ``Model.fit`` (``standardize`` from ``[data]``, default True),
        without ``offset`` (pass ``data``'s): ``model.fit(X, y, offset=offset, **options)``;
        with a ``[sample]`` table, ``{"sample": keyword arguments of Model.sample}``
        (:func:`sample_options`).
    names : dict
        Output file names, ``posterior`` and ``plot``.
    outputs : tuple or None
        A multi-output model's output names where the file gives them
        (:func:`gpdsl.run_data.run_output_names`; the rows' output index counts them in this
        order), for the posterior (:func:`gpdsl.multioutput.name_outputs`); else None.

    Raises
    ------
    UsageError
        Any problem with the file or its data (a type whose module is not trusted included),
        naming the file.
    """
    from .io.spec import read_model_file
    from .model import Model
    from .multioutput import output_count

    try:
        spec, config = read_model_file(path)
        model = Model.from_dict(spec, trust=trust)
    except FileNotFoundError as err:
        raise UsageError(str(err)) from err
    except (ValueError, TypeError) as err:
        message = str(err)
        raise UsageError(message if str(path) in message else f"{path}: {message}") from err
    try:
        data = config["data"]
        X, y, offset, _, description = load_table(data, output_count(model.kernel))
        check_targets(model, X, y, data["target"] if data.get("targets") is None else "targets")
        check_offset(model, offset, data.get("offset"))
        n_test = held_out_size(data, X.shape[0])
        seed = data.get("seed", SPLIT_SEED)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise UsageError(f"[data]: seed must be an integer, got {seed!r}")
        standardize = data.get("standardize", True)
        if not isinstance(standardize, bool):
            raise UsageError(f"[data]: standardize must be true or false, got {standardize!r}")
        if "sample" in config:
            options = {"sample": sample_options(config["sample"], config["fit"], data)}
            if isinstance(config["output"], dict) and "plot" in config["output"]:
                # Refused, not ignored: a sampled run writes only its posterior (run_sampled).
                raise UsageError("[output]: plot is not drawn with [sample] (a sampled run writes only its posterior; "
                                 "az.plot_trace(SampledPosterior.to_inference_data()) draws the chains); leave it out")
        else:
            options = {**fit_options(config["fit"]), "standardize": standardize}
            check_subsample(options, X.shape[0] - n_test, n_test)
        outputs = run_output_names(data, output_count(model.kernel))
        train, test = split_rows(X.shape[0], n_test, seed)
        offsets = (None, None) if offset is None else (offset[train], offset[test])
        rows = (X[train], y[train], X[test], y[test]) + offsets
        return model, rows, description, options, output_names(config["output"]), outputs
    except UsageError as err:
        raise UsageError(f"{path}: {err}") from err


# -- commands -------------------------------------------------------------------------------------
def run(args):
    """The ``run`` command: fit, report, write the posterior and the plot.

    Parameters
    ----------
    args : argparse.Namespace
        ``model`` (a TOML path, or None for the built-in default model), ``out`` (the
        output directory) and ``trust`` (module names, ``--trust``).

    Returns
    -------
    int
        0 (exit status).

    Raises
    ------
    UsageError
        Bad model file, data or fit arguments.
    RunError
        A failed fit (not positive definite) or an output that cannot be written.
    """
    trust = trusted_option(args.trust)
    if args.model is None:
        model, (X, y, X_test, y_test), description = default_problem()
        offset = offset_test = None
        options, names, outputs = {}, {"posterior": DEFAULT_POSTERIOR, "plot": DEFAULT_PLOT}, None
        description += " (embedded)"
    else:
        model, (X, y, X_test, y_test, offset, offset_test), description, options, names, outputs = \
            problem_from_toml(args.model, trust)
    from .multioutput import name_outputs

    out = Path(args.out)
    check_output_paths(out, names)
    if "sample" in options:
        return run_sampled(model, (X, y, X_test, y_test), description, options["sample"], out, names, args.model,
                           outputs)

    posterior, wall_time = _timed(lambda: name_outputs(model.fit(X, y, offset=offset, **options), outputs), "fit",
                                  args.model)
    _make_out(out)
    report(posterior, X, X_test, y_test, description, wall_time, offset_test=offset_test)

    print()
    # Both outputs replace whatever is at their name (a link made during the fit included)
    # rather than write through it: nothing outside --out is written.
    posterior_path = out / names["posterior"]
    try:
        posterior.save(posterior_path, follow_symlinks=False)
    except OSError as err:
        raise RunError(f"cannot write {posterior_path}: {err}") from err
    print(f"wrote {posterior_path}")

    from .io.files import sigint_deferred, write_replacing
    from .plotting import plot_fit

    plot_path = out / names["plot"]
    try:
        # Drawn in a private folder, then moved in as save moves the posterior.
        with tempfile.TemporaryDirectory() as scratch:
            drawn = Path(scratch) / plot_path.name
            plot_fit(posterior, X, y, drawn, X_test=X_test, y_test=y_test, offset=offset, offset_test=offset_test)
            with sigint_deferred():
                write_replacing(str(plot_path), drawn.read_bytes())
    except ImportError as err:
        print(f"gpdsl: note: plot skipped: {_one_line(err)}", file=sys.stderr)
    except OSError as err:
        raise RunError(f"cannot write {plot_path}: {err}") from err
    else:
        print(f"wrote {plot_path}")
    return 0


def _timed(call, what, model_path):
    """``call()`` (a fit or a sampling run) and its wall time in seconds, with the
    ConvergenceWarnings it raised printed on stderr after it.

    Raises
    ------
    RunError
        ``what`` failed numerically (not positive definite).
    UsageError
        ``call`` refused its arguments (ValueError, TypeError), prefixed by ``model_path``
        (None for the built-in default model).
    """
    import gpdsl as gd

    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", gd.ConvergenceWarning)
        try:
            result = call()
        except gd.NotPositiveDefiniteError as err:
            raise RunError(f"{what} failed: {err}") from err
        except (ValueError, TypeError) as err:
            raise UsageError(str(err) if model_path is None else f"{model_path}: {err}") from err
    wall_time = time.perf_counter() - start
    for w in caught:
        if issubclass(w.category, gd.ConvergenceWarning):
            print(f"gpdsl: warning: {w.message}", file=sys.stderr)
    return result, wall_time


def _make_out(out):
    """Create the ``--out`` directory (a RunError where that fails)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunError(f"cannot create the output directory {out}: {err}") from err


def run_sampled(model, rows, description, options, out, names, model_path, output_names=None):
    """The ``run`` command for a model file with a ``[sample]`` table: Model.sample, the report
    (:func:`report_sampled`) and the saved run (:meth:`gpdsl.SampledPosterior.save`) in ``out``.
    No plot is drawn (``az.plot_trace`` on ``SampledPosterior.to_inference_data()`` draws one).

    Parameters
    ----------
    model : gpdsl.Model
    rows : tuple
        ``(X, y, X_test, y_test)``.
    description : str
    options : dict
        Keyword arguments of Model.sample (:func:`sample_options`).
    out : pathlib.Path
    names : dict
        The output file names (``posterior``: the saved run).
    model_path : str
        The model file, for messages.
    output_names : tuple, optional
        The outputs' names (the saved run's ``output`` coordinate).

    Returns
    -------
    int
        0 (exit status).

    Raises
    ------
    UsageError
        An argument Model.sample refuses (checked before its MAP fit), or a sampled parameter
        without a prior.
    RunError
        A numerical failure, or an output that cannot be written.
    """
    from .multioutput import name_outputs

    X, y, X_test, y_test = rows
    sampled, wall_time = _timed(lambda: name_outputs(model.sample(X, y, **options), output_names), "sampling",
                                model_path)
    _make_out(out)
    report_sampled(sampled, X, X_test, y_test, description, wall_time)
    print()
    path = out / names["posterior"]
    try:
        sampled.save(path, follow_symlinks=False)
    except OSError as err:
        raise RunError(f"cannot write {path}: {err}") from err
    print(f"wrote {path} (read it back with gd.SampledPosterior.load(path, model))")
    return 0


def build_parser():
    """The ``gpdsl`` argument parser, with its ``run`` command.

    Returns
    -------
    argparse.ArgumentParser
    """
    from ._version import __version__

    parser = argparse.ArgumentParser(
        prog="gpdsl", description="Fit sparse Gaussian-process models declared in TOML files.")
    parser.add_argument("--version", action="version", version=f"gpdsl {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run_parser = commands.add_parser(
        "run", help="fit a model file (or the built-in default model) and write its posterior",
        description="Fit MODEL.toml (without it: the built-in default model on embedded data), "
                    "print a report and write the posterior (netCDF) and a plot (PNG) to --out.")
    run_parser.add_argument("model", nargs="?", metavar="MODEL.toml",
                            help="model file; omit to fit the default model on embedded data")
    run_parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                            help=f"output directory (default: ./{DEFAULT_OUT})")
    run_parser.add_argument("--trust", action="append", default=[], metavar="MODULE",
                            help="let the model file's types named 'MODULE:Class' import MODULE (it runs its "
                                 "code); repeat for several modules.  Without it only gpdsl's own types are read")
    run_parser.set_defaults(handler=run)
    return parser


def main(argv=None) -> int:
    """The ``gpdsl`` command line; errors are printed as one line.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        Exit status: 0 on success, 2 for a usage error, 1 for a run error or a closed pipe.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:      # --help, --version, or argparse's own usage error
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        return args.handler(args)
    except UsageError as err:
        print(f"gpdsl: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except RunError as err:
        print(f"gpdsl: error: {_one_line(err)}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (``gpdsl run | head``): stop quietly, as other command-line tools do.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1


def _one_line(err):
    return " ".join(str(err).split())


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
