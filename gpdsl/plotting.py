"""PNG plots of a fitted posterior (matplotlib is optional: ``pip install gpdsl[plot]``)."""
from __future__ import annotations

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


def plot_fit(posterior, X, y, path, X_test=None, y_test=None):
    """Write a PNG of ``posterior`` fitted to ``(X, y)`` to ``path``; returns the path.

    1-D inputs: the data, the predictive mean, a +-2 sd band of y (of f when the noise variance
    at new inputs is unknown) and the inducing inputs marked along the bottom.  D > 1: predicted
    against observed targets with 2 sd error bars (held-out points when given, else training).
    The figure is drawn with matplotlib's Agg canvas directly, so no display is needed and the
    global pyplot backend is left alone.
    """
    Figure, FigureCanvasAgg = _matplotlib()
    from .model import validate_inputs, validate_targets

    X = validate_inputs(X, "X", posterior.n_features)
    y = validate_targets(y, X.shape[0], "y")
    has_test = X_test is not None and y_test is not None and len(X_test) > 0
    if has_test:
        X_test = validate_inputs(X_test, "X_test", posterior.n_features)
        y_test = validate_targets(y_test, X_test.shape[0], "y_test")

    fig = Figure(figsize=(9, 4.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if X.shape[1] == 1:
        _plot_1d(ax, posterior, X, y, X_test if has_test else None, y_test if has_test else None)
    else:
        if has_test:
            _plot_predicted_observed(ax, posterior, X_test, y_test, "held-out")
        else:
            _plot_predicted_observed(ax, posterior, X, y, "training")
    inference = type(posterior.model.inference).__name__
    ax.set_title(f"{inference}: {posterior.model.kernel.describe()}, "
                 f"{posterior.model.likelihood.describe()} — log evidence {posterior.log_evidence:.5g}")
    fig.savefig(path)
    return path


def _predictive(posterior, X_new):
    """Mean and sd of y at X_new (of f when y's noise is unknown there) and a label."""
    pred = posterior.predict(X_new)
    if "y_var" in pred:
        return pred["y_mean"].values, np.sqrt(pred["y_var"].values), "y"
    return pred["f_mean"].values, np.sqrt(pred["f_var"].values), "f"


def _plot_1d(ax, posterior, X, y, X_test, y_test):
    xs = X[:, 0] if X_test is None else np.concatenate([X[:, 0], X_test[:, 0]])
    lo, hi = xs.min(), xs.max()
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    grid = np.linspace(lo - pad, hi + pad, 400)
    mean, sd, what = _predictive(posterior, grid[:, None])
    ax.fill_between(grid, mean - 2 * sd, mean + 2 * sd, color="C0", alpha=0.2,
                    label=f"mean ± 2 sd of {what}")
    ax.plot(grid, mean, color="C0", lw=2, label="predictive mean")
    ax.plot(X[:, 0], y, "o", color="k", ms=3, alpha=0.6, label=f"training ({X.shape[0]})")
    if X_test is not None:
        ax.plot(X_test[:, 0], y_test, "x", color="C3", ms=5, label=f"held-out ({X_test.shape[0]})")
    if posterior.model.sparse:
        Z = posterior.state.Z[:, 0]
        # Marks just above the bottom edge of the axes, whatever the y range.
        ax.plot(Z, np.full_like(Z, 0.03), "^", color="C1", ms=7,
                transform=ax.get_xaxis_transform(), label=f"inducing inputs ({Z.size})")
    ax.set_xlim(grid[0], grid[-1])
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    # Outside the axes, so that it never hides data or the inducing marks.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")


def _plot_predicted_observed(ax, posterior, X, y, which):
    mean, sd, what = _predictive(posterior, X)
    ax.errorbar(y, mean, yerr=2 * sd, fmt="o", ms=3, color="C0", ecolor="C0", elinewidth=0.8,
                alpha=0.7, label=f"{which} points ({y.size}), ± 2 sd of {what}")
    lo = min(y.min(), (mean - 2 * sd).min())
    hi = max(y.max(), (mean + 2 * sd).max())
    ax.plot([lo, hi], [lo, hi], "--", color="k", lw=1, label="predicted = observed")
    ax.set_xlabel("observed y")
    ax.set_ylabel("predicted y")
    ax.legend(loc="best", fontsize="small")
