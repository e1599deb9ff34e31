"""PNG plots of a fitted posterior, and the figure helpers of the tutorials.

matplotlib is optional (``pip install gpdsl[plot]``) and imported only when a figure is made, so
``import gpdsl`` and ``import gpdsl.plotting`` never load it.  Figures are drawn on matplotlib's
Agg canvas directly: no display is needed and the global pyplot backend is left alone.
"""
from __future__ import annotations

import sys

import numpy as np

_INSTALL_HINT = "plotting needs matplotlib: pip install gpdsl[plot]  (or: pip install matplotlib)"


def _matplotlib():
    """matplotlib's Figure and Agg canvas, or an ImportError saying how to install it."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err
    return Figure, FigureCanvasAgg


# Printed by new_figure without matplotlib; the tutorials' tests look for it.
FIGURE_SKIPPED = "matplotlib is not installed: figure skipped"


def new_figure(width, height):
    """A matplotlib Figure on the Agg canvas, or None (after a one-line note) without matplotlib.

    For scripts and notebooks whose figures are optional, such as the tutorials: they draw only
    when a figure comes back, and without matplotlib print :data:`FIGURE_SKIPPED` in its place.
    No pyplot is used, so no global state changes and no display is needed.

    Parameters
    ----------
    width, height : float
        Size of the figure in inches.

    Returns
    -------
    matplotlib.figure.Figure or None
        A new figure with the constrained layout, attached to an Agg canvas; None when
        matplotlib cannot be imported, after printing ``"matplotlib is not installed: figure
        skipped"`` to stdout.
    """
    try:
        Figure, FigureCanvasAgg = _matplotlib()
    except ImportError:
        print(FIGURE_SKIPPED)
        return None
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def show_figure(fig, path, dpi=72):
    """Save ``fig`` as a PNG at ``path``, print ``wrote <path>``, and show it inline in Jupyter.

    The figure is displayed (as the saved PNG) only when running under an IPython kernel
    (``ipykernel`` is imported); a plain script just writes the file.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure, e.g. from :func:`new_figure`.
    path : str or os.PathLike
        Where the PNG is written; its directory must exist.
    dpi : float, default 72
        Resolution of the PNG, in dots per inch.

    Returns
    -------
    path
        ``path``, unchanged.
    """
    fig.savefig(path, dpi=dpi)
    print(f"wrote {path}")
    if sys.modules.get("ipykernel") is not None:       # imported (and not hidden): in a Jupyter kernel
        from IPython.display import Image, display
        display(Image(filename=str(path)))
    return path


def plot_fit(posterior, X, y, path, X_test=None, y_test=None, *, offset=None, offset_test=None):
    """Write a PNG of ``posterior`` fitted to ``(X, y)`` to ``path``; returns the path.

    The plot depends on the likelihood's kind of targets (:data:`PLOTS`).  Regression and counts, 1-D inputs: the
    data, the predictive mean, a +-2 sd band of y (of f when the noise variance at new inputs is
    unknown) and the inducing inputs marked along the bottom; D > 1: predicted against observed
    targets with 2 sd error bars.  Binary labels, 1-D inputs: p(y* = 1 | x) with the labels at
    0 and 1; 2-D inputs: a decision map (p over the input plane, its 0.5 contour, the points
    coloured by label, the inducing inputs); D > 2: p(y* = 1) against the observed label.  K
    classes, 2-D inputs: a map of the most probable class, faded as its probability falls, with
    the class boundaries and the points; otherwise each point's p(y* = its label).  A
    multi-output model of one input feature (X's rows (x, output index), no offset): a panel
    per output, as the 1-D plots above with that output's rows (any other multi-output model
    gets the scatter plots, each row predicted at its own output).  The
    D > 1 scatter plots show the held-out points when given, else the training points.  With
    an ``offset`` the plots over a grid of new inputs (1-D bands and curves, 2-D maps) are not
    drawn, since no offset is known between the rows: every D gets the scatter plot of the rows,
    predicted at their own offsets.  The figure is drawn with matplotlib's Agg canvas directly, so no display is needed and the
    global pyplot backend is left alone.

    Parameters
    ----------
    posterior : gpdsl.posterior.Posterior
    X, y : numpy.ndarray
        Training inputs (n, D) and targets (n,); a K-class likelihood's labels may be text, as
        ``fit`` takes them.
    path : str or os.PathLike
        Where the PNG is written.
    X_test, y_test : numpy.ndarray, optional
        Held-out inputs and targets, drawn with their own markers.
    offset, offset_test : numpy.ndarray, optional
        The training and held-out rows' offsets of the latent input (``fit(offset=...)``),
        shapes (n,) and (n_test,); ``offset_test`` is needed with ``offset`` and held-out rows.

    Returns
    -------
    path
        ``path``, unchanged.

    Raises
    ------
    ImportError
        matplotlib is not installed (the message says how to install it).
    ValueError
        ``offset`` with held-out rows but no ``offset_test``, or an offset of the wrong length.
    """
    Figure, FigureCanvasAgg = _matplotlib()
    from .inputs import target_kind, validate_inputs, validate_offset

    X = validate_inputs(X, "X", posterior.n_features)
    y = _targets(posterior, y, X.shape[0], "y")
    offset = validate_offset(offset, X.shape[0], name="offset")
    has_test = X_test is not None and y_test is not None and len(X_test) > 0
    if has_test:
        X_test = validate_inputs(X_test, "X_test", posterior.n_features)
        y_test = _targets(posterior, y_test, X_test.shape[0], "y_test")
        if offset is not None and offset_test is None:
            raise ValueError("plot_fit: offset_test is needed with offset and held-out rows")
        offset_test = validate_offset(offset_test, X_test.shape[0], name="offset_test")
    else:
        X_test = y_test = offset_test = None

    outputs = posterior.model.output_count
    kinds = None if outputs is None else [_output_kind(posterior, X, p) for p in range(outputs)]
    panels = outputs is not None and X.shape[1] == 2 and offset is None and \
        all(kind in _OUTPUT_PANEL_KINDS for kind in kinds)
    # Outputs of several kinds (a likelihood per output) without the 1-D panels: a scatter panel each.
    mixed = outputs is not None and not panels and target_kind(posterior.model.likelihood) is None
    height = max(4.5, 2.2 * outputs) if panels else (max(4.5, 3.2 * outputs) if mixed else 4.5)
    fig = Figure(figsize=(9, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    inference = type(posterior.model.inference).__name__
    title = (f"{inference}: {posterior.model.kernel.describe()}, "
             f"{posterior.model.likelihood.describe()} — log evidence {posterior.log_evidence:.5g}")
    if panels or mixed:
        if panels:
            _plot_outputs_1d(fig, posterior, X, y, X_test, y_test, kinds)
        else:
            _plot_outputs_scatter(fig, posterior, kinds, *((X, y, offset, "training") if X_test is None
                                                           else (X_test, y_test, offset_test, "held-out")))
        fig.suptitle(title)
        fig.savefig(path)
        return path
    ax = fig.add_subplot()
    draw = PLOTS.get(target_kind(posterior.model.likelihood), _plot_regression)
    if offset is None:
        draw(fig, ax, posterior, X, y, X_test, y_test)
    else:
        # No offset is known at new inputs between the rows, so no grid is drawn: the rows (the
        # held-out ones where there are any), each predicted at its own offset.
        which, X_rows, y_rows, o_rows = (("training", X, y, offset) if X_test is None
                                         else ("held-out", X_test, y_test, offset_test))
        scatter = _plot_probability_label if draw is _plot_classification else _plot_predicted_observed
        scatter(ax, posterior, X_rows, y_rows, which, offset=o_rows)
    ax.set_title(title)
    fig.savefig(path)
    return path


def _targets(posterior, y, n, name):
    """Targets checked as ``fit`` checks them: K-class labels (text included, ``"setosa"``) as
    given, for the likelihood to code; any other as :func:`gpdsl.inputs.validate_targets` returns them."""
    from .inputs import target_kind, validate_targets

    likelihood = posterior.model.likelihood
    if target_kind(likelihood) == "categorical":
        likelihood.coded_targets(y, n, name)
        return np.asarray(y)
    return validate_targets(y, n, name)


def _plot_regression(fig, ax, posterior, X, y, X_test, y_test):
    """Real-valued targets and counts: the predictive band (1-D) or predicted against observed."""
    if X.shape[1] == 1:
        _plot_1d(ax, posterior, X, y, X_test, y_test)
    elif X_test is not None:
        _plot_predicted_observed(ax, posterior, X_test, y_test, "held-out")
    else:
        _plot_predicted_observed(ax, posterior, X, y, "training")


def _plot_classification(fig, ax, posterior, X, y, X_test, y_test):
    """Binary labels: p(y* = 1) along x (1-D), a decision map (2-D) or against the label (D > 2)."""
    y = _as01(posterior, X, y)
    y_test = None if y_test is None else _as01(posterior, X_test, y_test)
    if X.shape[1] == 1:
        _plot_probability_1d(ax, posterior, X, y, X_test, y_test)
    elif X.shape[1] == 2:
        _plot_decision_map(fig, ax, posterior, X, y, X_test, y_test)
    elif X_test is not None:
        _plot_probability_label(ax, posterior, X_test, y_test, "held-out")
    else:
        _plot_probability_label(ax, posterior, X, y, "training")


def _grid_1d(X, X_test, n=400):
    """n points spanning the training and held-out inputs of one feature, padded by 5 %."""
    xs = X[:, 0] if X_test is None else np.concatenate([X[:, 0], X_test[:, 0]])
    lo, hi = xs.min(), xs.max()
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    return np.linspace(lo - pad, hi + pad, n)


def _mark_inducing_1d(ax, posterior):
    if posterior.model.sparse:
        Z = posterior.inducing_inputs[:, 0]
        # Marks just above the bottom edge of the axes, whatever the y range.
        ax.plot(Z, np.full_like(Z, 0.03), "^", color="C1", ms=7,
                transform=ax.get_xaxis_transform(), label=f"inducing inputs ({Z.size})")


def _predictive(posterior, X_new, offset=None):
    """Mean and sd of y at X_new (of f when y's noise is unknown there) and a label."""
    pred = posterior.predict(X_new, offset=offset)
    if "y_var" in pred:
        return pred["y_mean"].values, np.sqrt(pred["y_var"].values), "y"
    # f_mean is f's; the likelihood sees f + offset.
    shift = 0.0 if offset is None else offset
    return pred["f_mean"].values + shift, np.sqrt(pred["f_var"].values), "f"


def _plot_1d(ax, posterior, X, y, X_test, y_test):
    grid = _grid_1d(X, X_test)
    mean, sd, what = _predictive(posterior, grid[:, None])
    ax.fill_between(grid, mean - 2 * sd, mean + 2 * sd, color="C0", alpha=0.2,
                    label=f"mean ± 2 sd of {what}")
    ax.plot(grid, mean, color="C0", lw=2, label="predictive mean")
    ax.plot(X[:, 0], y, "o", color="k", ms=3, alpha=0.6, label=f"training ({X.shape[0]})")
    if X_test is not None:
        ax.plot(X_test[:, 0], y_test, "x", color="C3", ms=5, label=f"held-out ({X_test.shape[0]})")
    _mark_inducing_1d(ax, posterior)
    ax.set_xlim(grid[0], grid[-1])
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    # Outside the axes, so that it never hides data or the inducing marks.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")


def _output_kind(posterior, X, p):
    """Output p's kind of targets: that of the likelihood of a row of output p (X's first row
    moved to it; ``for_rows``: a likelihood per output gives its part's)."""
    from .inputs import target_kind

    row = np.asarray(X[:1], dtype=float).copy()
    row[:, -1] = p
    return target_kind(posterior.model.likelihood.for_rows(row))


def _as01(posterior, X, labels):
    """Binary labels of the rows X as 0/1 whatever their coding (0/1, -1/+1, bool), coded by the
    rows' likelihood, so that they sit on the p axis."""
    return (posterior.model.likelihood.for_rows(X).prepare_targets(labels) > 0).astype(float)


def _plot_outputs_1d(fig, posterior, X, y, X_test, y_test, kinds):
    """A multi-output model of one input feature (X's rows (x, output index)): a panel per
    output, its predictive band of y (or p(y* = 1) for an output of binary labels, ``kinds``:
    each output's kind of targets) over x from the prediction of every output at a grid, and
    that output's training and held-out rows."""
    grid = _grid_1d(X, X_test)
    pred = posterior.predict(grid[:, None])
    if any(kind != "binary" for kind in kinds):
        mean, sd, what = _predictive(posterior, grid[:, None])
    inducing = np.unique(posterior.inducing_inputs[:, 0]) if posterior.model.sparse else None
    axes = np.atleast_1d(fig.subplots(posterior.model.output_count, 1, sharex=True))
    for p, ax in enumerate(axes):
        rows, rows_test = X[:, -1] == p, None if X_test is None else X_test[:, -1] == p
        y_p, y_test_p = y[rows], None if X_test is None else y_test[rows_test]
        if kinds[p] == "binary":
            y_p = _as01(posterior, X[rows], y_p)
            y_test_p = None if X_test is None else _as01(posterior, X_test[rows_test], y_test_p)
            ax.plot(grid, pred["p"].values[:, p], color="C0", lw=2, label="p(y* = 1 | x)")
            ax.axhline(0.5, ls="--", color="k", lw=1)
            ax.set_ylim(-0.08, 1.08)
        else:
            ax.fill_between(grid, mean[:, p] - 2 * sd[:, p], mean[:, p] + 2 * sd[:, p], color="C0", alpha=0.2,
                            label=f"mean ± 2 sd of {what}")
            ax.plot(grid, mean[:, p], color="C0", lw=2, label="predictive mean")
        ax.plot(X[rows, 0], y_p, "o", color="k", ms=3, alpha=0.6, label="training rows")
        if X_test is not None:
            ax.plot(X_test[rows_test, 0], y_test_p, "x", color="C3", ms=5, label="held-out rows")
        if inducing is not None:
            ax.plot(inducing, np.full_like(inducing, 0.03), "^", color="C1", ms=7, transform=ax.get_xaxis_transform(),
                    label=f"inducing inputs ({inducing.size})")
        ax.set_ylabel(f"output {p}")
        ax.set_xlim(grid[0], grid[-1])
        if p == 0 or kinds[p] != kinds[0]:       # the legend of each kind's first panel
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    axes[-1].set_xlabel("x")


def _plot_outputs_scatter(fig, posterior, kinds, X, y, offset, which):
    """Outputs of several kinds (a likelihood per output) where no 1-D panels are drawn: a panel
    per output of its rows, predicted against observed (real targets, counts) or p(y* = 1)
    against the label (binary), each row at its own offset."""
    axes = np.atleast_1d(fig.subplots(posterior.model.output_count, 1))
    for p, ax in enumerate(axes):
        rows = X[:, -1] == p
        o_rows = None if offset is None else offset[rows]
        ax.set_title(f"output {p}" + ("" if rows.any() else f": no {which} rows"), fontsize="small")
        if not rows.any():
            ax.set_axis_off()
        elif kinds[p] == "binary":
            _plot_probability_label(ax, posterior, X[rows], _as01(posterior, X[rows], y[rows]), which, offset=o_rows)
        else:
            _plot_predicted_observed(ax, posterior, X[rows], y[rows], which, offset=o_rows)


def _plot_predicted_observed(ax, posterior, X, y, which, offset=None):
    mean, sd, what = _predictive(posterior, X, offset)
    ax.errorbar(y, mean, yerr=2 * sd, fmt="o", ms=3, color="C0", ecolor="C0", elinewidth=0.8,
                alpha=0.7, label=f"{which} points ({y.size}), ± 2 sd of {what}")
    lo = min(y.min(), (mean - 2 * sd).min())
    hi = max(y.max(), (mean + 2 * sd).max())
    ax.plot([lo, hi], [lo, hi], "--", color="k", lw=1, label="predicted = observed")
    ax.set_xlabel("observed y")
    ax.set_ylabel("predicted y")
    ax.legend(loc="best", fontsize="small")


def _plot_probability_1d(ax, posterior, X, y, X_test, y_test):
    grid = _grid_1d(X, X_test)
    ax.plot(grid, posterior.predict(grid[:, None])["p"].values, color="C0", lw=2,
            label="p(y* = 1 | x)")
    ax.axhline(0.5, ls="--", color="k", lw=1)
    ax.plot(X[:, 0], y, "o", color="k", ms=3, alpha=0.6, label=f"training labels ({X.shape[0]})")
    if X_test is not None:
        ax.plot(X_test[:, 0], y_test, "x", color="C3", ms=5, label=f"held-out labels ({X_test.shape[0]})")
    _mark_inducing_1d(ax, posterior)
    ax.set_xlim(grid[0], grid[-1])
    ax.set_ylim(-0.08, 1.08)
    ax.set_xlabel("x")
    ax.set_ylabel("p(y = 1)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")


def _plot_decision_map(fig, ax, posterior, X, y, X_test, y_test, n=120):
    points = X if X_test is None else np.vstack([X, X_test])
    lo, hi = points.min(axis=0), points.max(axis=0)
    pad = np.where(hi > lo, 0.05 * (hi - lo), 1.0)
    g0 = np.linspace(lo[0] - pad[0], hi[0] + pad[0], n)
    g1 = np.linspace(lo[1] - pad[1], hi[1] + pad[1], n)
    G0, G1 = np.meshgrid(g0, g1)
    p = posterior.predict(np.column_stack([G0.ravel(), G1.ravel()]))["p"].values.reshape(G0.shape)
    filled = ax.contourf(G0, G1, p, levels=np.linspace(0.0, 1.0, 11), cmap="RdBu_r", alpha=0.6)
    fig.colorbar(filled, ax=ax, label="p(y* = 1 | x)")
    ax.contour(G0, G1, p, levels=[0.5], colors="k", linewidths=1.5)
    # Black edges keep the points visible on the background of their own class.
    for label, colour in ((0.0, "C0"), (1.0, "C3")):
        train = y == label
        ax.scatter(X[train, 0], X[train, 1], s=14, color=colour, edgecolors="k", linewidths=0.5,
                   label=f"training y = {label:g} ({int(train.sum())})")
        if X_test is not None:
            test = y_test == label
            ax.scatter(X_test[test, 0], X_test[test, 1], s=30, marker="D", color=colour,
                       edgecolors="k", linewidths=1.0,
                       label=f"held-out y = {label:g} ({int(test.sum())})")
    if posterior.model.sparse:
        Z = posterior.inducing_inputs
        ax.plot(Z[:, 0], Z[:, 1], "^", color="C1", mec="k", ms=8, label=f"inducing inputs ({Z.shape[0]})")
    ax.set_xlim(g0[0], g0[-1])
    ax.set_ylim(g1[0], g1[-1])
    ax.set_xlabel("x[0]")
    ax.set_ylabel("x[1]")
    # Below the axes: the colour bar takes the right-hand side.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize="small")


def _plot_probability_label(ax, posterior, X, y, which, offset=None):
    if offset is not None:      # the labels as 0/1, as _plot_classification makes them (0/1 stay)
        y = _as01(posterior, X, y)
    p = posterior.predict(X, offset=offset)["p"].values
    # A seeded horizontal jitter spreads the points of each label, so that the plot does not
    # change from run to run.
    jitter = np.random.default_rng(0).uniform(-0.15, 0.15, y.size)
    wrong = (p > 0.5) != (y > 0.5)
    ax.scatter(y[~wrong] + jitter[~wrong], p[~wrong], s=12, color="C0",
               label=f"{which} points classified right ({int((~wrong).sum())} of {y.size})")
    ax.scatter(y[wrong] + jitter[wrong], p[wrong], s=12, color="C3",
               label=f"{which} points misclassified ({int(wrong.sum())})")
    ax.axhline(0.5, ls="--", color="k", lw=1, label="p = 0.5")
    ax.set_xticks([0.0, 1.0])
    ax.set_xlim(-0.5, 1.5)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("observed label y")
    ax.set_ylabel("predicted p(y = 1)")
    ax.legend(loc="best", fontsize="small")


def _plot_multiclass(fig, ax, posterior, X, y, X_test, y_test, n=120):
    """K classes: a decision map over the input plane (2-D: each grid point coloured by its most
    probable class, faded as that probability falls, the points coloured by label), otherwise
    each point's predicted probability of its own label against that label."""
    likelihood = posterior.model.likelihood
    codes = likelihood.coded_targets(y, X.shape[0])
    codes_test = None if X_test is None else likelihood.coded_targets(y_test, X_test.shape[0], "y_test")
    labels = likelihood.class_labels()
    colours = [f"C{k % 10}" for k in range(labels.size)]
    if X.shape[1] != 2:
        which, X_rows, y_rows, c_rows = (("training", X, y, codes) if X_test is None
                                         else ("held-out", X_test, y_test, codes_test))
        p_own = np.exp(posterior.log_predictive(X_rows, y_rows))
        jitter = np.random.default_rng(0).uniform(-0.2, 0.2, c_rows.size)
        ax.scatter(c_rows + jitter, p_own, s=12, c=[colours[int(k)] for k in c_rows],
                   label=f"{which} points ({c_rows.size})")
        ax.set_xticks(np.arange(labels.size), [str(label) for label in labels])
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("observed class")
        ax.set_ylabel("predicted p(y* = observed class)")
        ax.legend(loc="best", fontsize="small")
        return
    from matplotlib.colors import to_rgb

    points = X if X_test is None else np.vstack([X, X_test])
    lo, hi = points.min(axis=0), points.max(axis=0)
    pad = np.where(hi > lo, 0.05 * (hi - lo), 1.0)
    g0 = np.linspace(lo[0] - pad[0], hi[0] + pad[0], n)
    g1 = np.linspace(lo[1] - pad[1], hi[1] + pad[1], n)
    G0, G1 = np.meshgrid(g0, g1)
    p = posterior.predict(np.column_stack([G0.ravel(), G1.ravel()]))["p"].values
    best, confidence = np.argmax(p, axis=1), np.max(p, axis=1)
    rgb = np.array([to_rgb(c) for c in colours])[best]
    # Faded towards white where the most probable class is barely ahead (1/K: no preference).
    fade = ((confidence - 1.0 / labels.size) / (1.0 - 1.0 / labels.size))[:, None]
    ax.imshow((1.0 - 0.6 * fade + 0.6 * fade * rgb).reshape(G0.shape + (3,)), origin="lower", aspect="auto",
              extent=(g0[0], g0[-1], g1[0], g1[-1]))
    ax.contour(G0, G1, best.reshape(G0.shape), levels=np.arange(labels.size) + 0.5, colors="k", linewidths=1.0)
    for k, label in enumerate(labels):
        train = codes == k
        ax.scatter(X[train, 0], X[train, 1], s=14, color=colours[k], edgecolors="k", linewidths=0.5,
                   label=f"training {label} ({int(train.sum())})")
        if X_test is not None:
            test = codes_test == k
            ax.scatter(X_test[test, 0], X_test[test, 1], s=30, marker="D", color=colours[k], edgecolors="k",
                       linewidths=1.0, label=f"held-out {label} ({int(test.sum())})")
    if posterior.model.sparse:
        Z = posterior.inducing_inputs
        ax.plot(Z[:, 0], Z[:, 1], "^", color="w", mec="k", ms=8, label=f"inducing inputs ({Z.shape[0]})")
    ax.set_xlabel("x[0]")
    ax.set_ylabel("x[1]")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize="small")


# The kinds of targets a multi-output model of one input feature draws a panel per output of.
_OUTPUT_PANEL_KINDS = ("real", "count", "binary")
# kind of targets (gpdsl.inputs.target_kind) -> drawing function; a kind not listed gets the
# regression plot (real targets and counts, whose predictive has y_mean and y_var).
PLOTS = {"binary": _plot_classification, "categorical": _plot_multiclass}
