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
# # Tutorial 9: hyperparameter uncertainty — MAP against NUTS
#
# `model.fit` returns one value of the hyperparameters: the maximum of evidence × prior (MAP).
# With few data the evidence is flat in some directions and that one value hides a range of
# length-scales and amplitudes that explain the data about as well. `model.sample` draws the
# hyperparameters' posterior instead, by NUTS (Stan's sampler: `gpdsl.nuts`), and its
# predictions average the method's posterior over the draws.
#
# Two small problems:
#
# 1. **Regression**: posteriordb's `gp_pois_regr-gp_regr` data (11 points), with the priors of its
#    Stan model, so the draws can be set beside Stan's reference posterior (gpdsl's tests do so).
# 2. **Classification**: iris versicolor against virginica by petal width, on a training set of
#    30 flowers, with EP; the held-out 70 flowers score MAP's and NUTS's predictions.
#
# For each we check the chains (R-hat, ESS, divergences, `az.summary`, a trace plot), compare the
# hyperparameters' posterior with the MAP value, and compare the predictive bands.
#
# Run it with `python tutorials/09_hyperparameter_uncertainty.py` (about 2 minutes; with
# `GPDSL_TUTORIAL_SMALL=1` shorter chains). It writes only to a temporary directory (kept with
# `GPDSL_TUTORIAL_KEEP=1`).

# %%
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import arviz as az
import numpy as np
from scipy import stats

try:
    import gpdsl as gd
except ImportError:              # not installed: use the checkout this tutorial lives in
    here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()  # script or notebook
    sys.path.insert(0, str(here.parent))
    import gpdsl as gd
from gpdsl import priors as P
from gpdsl.plotting import new_figure, show_figure

T_START = time.perf_counter()
SMALL = os.environ.get("GPDSL_TUTORIAL_SMALL") == "1"          # the test suite's quick run
DRAWS, TUNE = (200, 200) if SMALL else (1000, 1000)            # per chain
print(f"{DRAWS} draws after {TUNE} warmup iterations per chain" + ("  (small size: GPDSL_TUTORIAL_SMALL=1)" if SMALL else ""))
workdir = Path(tempfile.mkdtemp(prefix="gpdsl_tutorial09_"))   # all files go here

# %% [markdown]
# ## 1. Regression on 11 points
#
# The data of posteriordb's `gp_regr` (inputs −10, −8, …, 10). Its Stan model has a
# squared-exponential kernel with length-scale ρ ~ Gamma(25, 4), amplitude α ~ half-Normal(0, 2)
# (α² is the kernel variance, so the prior is on the square root of gpdsl's `variance`:
# `P.OnTransformed(P.HalfNormal(2.0), "sqrt")`) and a noise *variance* σ ~ half-Normal(0, 1).
# `model.sample` refuses a sampled hyperparameter without a prior, naming it.

# %%
x = np.arange(-10.0, 11.0, 2.0)
X = x[:, None]
y = np.array([4.75906, 1.59423, 2.99548, 5.27501, 1.66472, 2.24347, 2.8914, 4.08681, 4.60588, 0.802364,
              3.92136])

regression = gd.Model(
    kernel=gd.kernels.SquaredExponential(lengthscale=P.Gamma(25.0, 4.0),
                                         variance=P.OnTransformed(P.HalfNormal(2.0), "sqrt")),
    likelihood=gd.likelihoods.Gaussian(variance=P.HalfNormal(1.0)),
)
map_fit = regression.fit(X, y)
print("MAP:", {name: round(float(v), 4) for name, v in map_fit.values.items()})

nuts_fit = regression.sample(X, y, draws=DRAWS, tune=TUNE, chains=4, seed=0)
print(nuts_fit)
print(nuts_fit.diagnostics)

# %% [markdown]
# `sample` fits the MAP first, starts four chains around the mode of the sampled density (on the
# log scale of each positive hyperparameter, Jacobian included) and runs them in parallel
# processes. The diagnostics record holds what a Bayesian checks before reading anything else:
# divergences, the largest rank-normalised R-hat, the smallest bulk and tail ESS, and each
# chain's E-BFMI; any of them out of range warns `gd.SamplingWarning`.
#
# `to_inference_data()` hands the run to ArviZ.

# %%
idata = nuts_fit.to_inference_data()
summary = az.summary(idata, round_to=4)
print(summary)
assert nuts_fit.diagnostics.divergences == 0 and nuts_fit.diagnostics.max_rhat < 1.01

# %% [markdown]
# The trace plot, drawn from `nuts_fit.draws` (dims chain, draw): each chain's draws in order
# (left) and each chain's histogram (right). Chains that have mixed overlap everywhere.
# (`az.plot_trace(idata)` draws the same; its way of taking matplotlib axes differs between
# ArviZ 0.x and 1.x, so the tutorial draws its own.)

# %%
fig = new_figure(10, 6)
if fig is not None:
    axes = fig.subplots(3, 2)
    for row, name in zip(axes, nuts_fit.draws.data_vars):
        for chain in nuts_fit.draws["chain"].values:
            values = nuts_fit.draws[name].sel(chain=chain).values
            row[0].plot(values, lw=0.5, alpha=0.7)
            row[1].hist(values, bins=40, histtype="step", density=True)
        row[0].set_ylabel(name)
    axes[-1, 0].set_xlabel("draw")
    show_figure(fig, workdir / "regression_trace.png")

# %% [markdown]
# ### The posterior of the hyperparameters against the MAP
#
# The MAP sits near the posterior's mode, but the posterior is wide: a 90 % interval of the
# length-scale spans a factor of about two, and the noise variance, the quantity 11 points say
# least about, a factor of ten or more. (In the unconstrained log scale the sampler works in, the
# mode of the density is not the MAP in θ: the Jacobian shifts it.)

# %%
rows = {}
for name in nuts_fit.draws.data_vars:
    draws = nuts_fit.draws[name].values.ravel()
    low, median, high = np.quantile(draws, [0.05, 0.5, 0.95])
    rows[name] = (float(map_fit.values[name]), low, median, high)
    print(f"{name:20s} MAP {rows[name][0]:8.4f}   posterior 5 % {low:8.4f}  50 % {median:8.4f}  95 % {high:8.4f}")

fig = new_figure(10, 2.8)
if fig is not None:
    axes = fig.subplots(1, 3)
    for ax, (name, (at_map, *_)) in zip(axes, rows.items()):
        ax.hist(nuts_fit.draws[name].values.ravel(), bins=40, density=True, color="C0", alpha=0.6)
        ax.axvline(at_map, color="k", lw=1.5, label="MAP")
        ax.set_title(name)
    axes[0].legend()
    show_figure(fig, workdir / "regression_hyperparameters.png")

# %% [markdown]
# ### Predictive bands
#
# `nuts_fit.predict(X_new)` averages the method's predictive distribution over 200 draws spread
# over the chains: the mean of the means, and the law of total variance for the variance. Its
# band adds the spread of the hyperparameters to the MAP's. The difference is largest where the
# data say least: between the points and beyond them, where a shorter length-scale or a larger
# amplitude among the draws lets f move further.

# %%
grid = np.linspace(-16.0, 16.0, 161)[:, None]
at_map = map_fit.predict(grid)
integrated = nuts_fit.predict(grid)
width_map = 2 * 1.96 * np.sqrt(at_map["f_var"].values)
width_nuts = 2 * 1.96 * np.sqrt(integrated["f_var"].values)
inside = np.abs(grid[:, 0]) <= 10.0
print(f"95 % band of f, mean width: MAP {width_map[inside].mean():.3f}, NUTS {width_nuts[inside].mean():.3f} "
      f"(inside the data); MAP {width_map[~inside].mean():.3f}, NUTS {width_nuts[~inside].mean():.3f} (beyond)")
print(f"draws used by predict: {integrated.attrs['draws_used']}")

fig = new_figure(9, 3.5)
if fig is not None:
    ax = fig.subplots()
    for result, label, colour in ((at_map, "MAP", "C1"), (integrated, "NUTS", "C0")):
        mean, sd = result["f_mean"].values, np.sqrt(result["f_var"].values)
        ax.fill_between(grid[:, 0], mean - 1.96 * sd, mean + 1.96 * sd, color=colour, alpha=0.25,
                        label=f"{label}: 95 % band of f")
        ax.plot(grid[:, 0], mean, color=colour)
    ax.plot(x, y, "k.", ms=8, label="data")
    ax.legend(loc="upper left")
    show_figure(fig, workdir / "regression_bands.png")

# %% [markdown]
# ## 2. Classification on 30 flowers
#
# Iris versicolor (0) against virginica (1) by petal width, from scikit-learn's copy of the
# data. 30 flowers train the model, the other 70 score it. EP approximates the evidence at each
# draw of the kernel's length-scale and variance and the likelihood's bias (a constant added to f), each
# with a prior (EP's evidence is an
# approximation, so the draws are of EP's posterior, which issue 47's checks compare with an
# exact sampler of f and θ jointly).

# %%
from sklearn.datasets import load_iris

iris = load_iris()
keep = iris.target > 0
width = iris.data[keep, 3]
label = (iris.target[keep] == 2).astype(float)
order = np.random.default_rng(0).permutation(width.size)
train, test = order[:30], order[30:]
X_train, y_train = width[train, None], label[train]
X_test, y_test = width[test, None], label[test]

classifier = gd.Model(
    kernel=gd.kernels.SquaredExponential(lengthscale=P.Gamma(4.0, 4.0),
                                         variance=P.OnTransformed(P.HalfNormal(3.0), "sqrt")),
    likelihood=gd.likelihoods.Bernoulli(link="probit", bias=P.Normal(0.0, 2.0)),
    inference=gd.inference.EP(),
)
map_class = classifier.fit(X_train, y_train)
nuts_class = classifier.sample(X_train, y_train, draws=DRAWS, tune=TUNE, chains=4, seed=1)
print("MAP:", {name: round(float(v), 4) for name, v in map_class.values.items()})
print(nuts_class)
print(az.summary(nuts_class.to_inference_data(), round_to=4))

# %% [markdown]
# ### Held-out scores
#
# The negative log predictive density of the 70 held-out labels under each: p(y* = 1) is EP's
# predictive probability at the MAP, and its average over the draws for NUTS.

# %%
def nlpd(p, y):
    """Mean negative log probability of the labels y under P(y = 1) = p."""
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))


p_map = map_class.predict(X_test)["p"].values
p_nuts = nuts_class.predict(X_test)["p"].values
scores = {"MAP": {"NLPD": nlpd(p_map, y_test), "error": float(np.mean((p_map > 0.5) != y_test))},
          "NUTS": {"NLPD": nlpd(p_nuts, y_test), "error": float(np.mean((p_nuts > 0.5) != y_test))}}
for name, row in scores.items():
    print(f"{name:5s} held-out NLPD {row['NLPD']:.4f}   error {row['error']:.3f}")

# %%
grid_w = np.linspace(0.8, 2.7, 200)[:, None]
fig = new_figure(9, 3.5)
if fig is not None:
    ax = fig.subplots()
    for post, label_, colour in ((map_class, "MAP", "C1"), (nuts_class, "NUTS", "C0")):
        ax.plot(grid_w[:, 0], post.predict(grid_w)["p"].values, color=colour, label=f"{label_}: p(virginica)")
    jitter = np.random.default_rng(2).uniform(-0.03, 0.03, y_train.size)
    ax.plot(X_train[:, 0], y_train + jitter, "k.", label="training flowers")
    ax.plot(X_test[:, 0], y_test + jitter.mean(), "x", color="0.6", ms=4, label="held out")
    ax.set_xlabel("petal width (cm)")
    ax.legend(loc="center right")
    show_figure(fig, workdir / "classification_probability.png")

# %% [markdown]
# ## Saving a run
#
# A run is written to netCDF whole (draws, statistics, the unconstrained draws, the adapted step
# sizes and metrics, the data and the model) and read back with the model it was sampled from.

# %%
path = workdir / "regression_run.nc"
nuts_fit.save(path)
loaded = gd.SampledPosterior.load(path, regression)
assert np.array_equal(loaded.draws["kernel.lengthscale"].values, nuts_fit.draws["kernel.lengthscale"].values)
print(loaded)

# %% [markdown]
# ## Clean up

# %%
if not os.environ.get("GPDSL_TUTORIAL_KEEP"):
    shutil.rmtree(workdir, ignore_errors=True)
print(f"tutorial 9 finished in {time.perf_counter() - T_START:.1f} s")
