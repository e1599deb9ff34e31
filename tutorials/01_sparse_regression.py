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
# # Tutorial 1: sparse GP regression — Exact, VFE and FITC
#
# This tutorial fits the same 1-D regression problem three ways and compares them:
#
# * **Exact** GP regression, O(N³): the reference;
# * **VFE**, Titsias' (2009) collapsed variational bound with M inducing inputs, O(N M²);
# * **FITC** (Snelson & Ghahramani's SPGP), the other classic O(N M²) approximation.
#
# It then looks at the variational posterior q(u) over the inducing outputs, optimises the
# inducing inputs ("pseudo-inputs"), puts a prior on a length-scale, holds a hyperparameter
# fixed, and finishes with ArviZ (held-out ELPDs ranked by `az.compare`) and a netCDF round trip.
#
# Run it top to bottom with `python tutorials/01_sparse_regression.py`, or open it as a
# notebook with jupytext. It writes only to a temporary directory.

# %%
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import xarray as xr

try:
    import gpdsl as gd
except ImportError:              # not installed: use the checkout this tutorial lives in
    here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()  # script or notebook
    sys.path.insert(0, str(here.parent))
    import gpdsl as gd
from gpdsl.io.arviz import compare, elpd_estimate, held_out_elpd
from gpdsl.plotting import new_figure, show_figure

T_START = time.perf_counter()
workdir = Path(tempfile.mkdtemp(prefix="gpdsl_tutorial01_"))   # all files go here

# %% [markdown]
# ## Data
#
# `gd.datasets.snelson_like` draws inputs uniformly on [0, 6] around a smooth function that
# resembles Snelson & Ghahramani's toy set, with Gaussian noise of sd 0.3 (variance 0.09).
# The inputs are already in random order, so the first 150 points train and the last 50 are
# held out.

# %%
X, y = gd.datasets.snelson_like(n=200, seed=0)
X_train, y_train, X_test, y_test = X[:150], y[:150], X[150:], y[150:]
print(f"X_train {X_train.shape}, X_test {X_test.shape}")

# %% [markdown]
# ## Three models from the same four parts
#
# A `gd.Model` is declared from a kernel, a likelihood, an inducing-point specification and an
# inference method. Exact inference takes no inducing points. The sparse models here place
# M = 15 inducing inputs at k-means centres of the training inputs, and these stay fixed while
# the hyperparameters are fitted.

# %%
kernel = gd.kernels.SquaredExponential(lengthscale=1.0, variance=1.0)
likelihood = gd.likelihoods.Gaussian(variance=0.1)
M = 15

models = {
    "Exact": gd.Model(kernel=kernel, likelihood=likelihood),
    "VFE": gd.Model(kernel=kernel, likelihood=likelihood, inducing=gd.inducing.KMeans(M, seed=0),
                    inference=gd.inference.VFE()),
    "FITC": gd.Model(kernel=kernel, likelihood=likelihood, inducing=gd.inducing.KMeans(M, seed=0),
                     inference=gd.inference.FITC()),
}
posteriors = {name: model.fit(X_train, y_train) for name, model in models.items()}
for name, post in posteriors.items():
    v = post.values
    print(f"{name:5s}  log evidence {post.log_evidence:9.4f}   lengthscale {float(v['kernel.lengthscale']):.3f}"
          f"   signal var {float(v['kernel.variance']):.3f}   noise var {float(v['likelihood.variance']):.4f}")

# %% [markdown]
# ## Comparing the log evidence
#
# `post.log_evidence` is a different quantity for each method:
#
# * Exact: the log marginal likelihood log p(y | θ);
# * VFE: Titsias' lower bound F(θ, Z) ≤ log p(y | θ), tight when the inducing inputs
#   summarise the data perfectly;
# * FITC: the exact marginal likelihood of a *modified* GP model. It is not a bound and can
#   exceed the exact value.
#
# Because the VFE bound holds for every θ, its maximum cannot exceed the maximised exact log
# marginal likelihood. We also evaluate the bound *at the exact GP's hyperparameters*: we
# declare them as starting values and hold them all fixed (`fit(..., fixed=names)`). The gap
# there is the KL divergence from q to the exact posterior.

# %%
exact, vfe, fitc = posteriors["Exact"], posteriors["VFE"], posteriors["FITC"]
assert vfe.log_evidence <= exact.log_evidence
print(f"VFE bound at its optimum        {vfe.log_evidence:.4f} <= exact LML {exact.log_evidence:.4f}")

at_exact = gd.Model(
    kernel=gd.kernels.SquaredExponential(lengthscale=float(exact.values["kernel.lengthscale"]),
                                         variance=float(exact.values["kernel.variance"])),
    likelihood=gd.likelihoods.Gaussian(variance=float(exact.values["likelihood.variance"])),
    inducing=gd.inducing.KMeans(M, seed=0), inference=gd.inference.VFE(),
).fit(X_train, y_train, fixed=tuple(exact.values))
gap = exact.log_evidence - at_exact.log_evidence
print(f"VFE bound at the exact θ         {at_exact.log_evidence:.4f}  (gap = KL(q || p) = {gap:.2e})")
assert 0.0 <= gap
print(f"FITC approximate LML            {fitc.log_evidence:.4f}  (not a bound)")

# %% [markdown]
# ## Predictions are xarray Datasets
#
# `post.predict(X_new)` returns an `xarray.Dataset` over the dimension `obs` with the latent
# mean and variance (`f_mean`, `f_var`) and the predictive of a new observation (`y_mean`,
# `y_var`). Concatenating along a new `model` dimension puts the three methods side by side.

# %%
preds = xr.concat([post.predict(X_test) for post in posteriors.values()],
                  dim=xr.DataArray(list(posteriors), dims="model", name="model"), combine_attrs="drop")
print(preds)

err = preds["y_mean"] - xr.DataArray(y_test, dims="obs")
rmse = np.sqrt((err ** 2).mean("obs"))
mnlpd = (0.5 * np.log(2 * np.pi * preds["y_var"]) + 0.5 * err ** 2 / preds["y_var"]).mean("obs")
print(xr.Dataset({"RMSE": rmse, "MNLPD": mnlpd}).to_dataframe().round(4))

# %% [markdown]
# ## The variational posterior q(u)
#
# `post.to_xarray()` exports everything a fitted posterior holds: the inducing inputs `Z`, the
# mean and covariance of q(u) (`q_mean`, `q_cov`), the cached predictive weights, every
# hyperparameter, and attributes (inference method, log evidence, model declaration, ...).

# %%
ds = vfe.to_xarray()
print(ds)
q_sd = np.sqrt(np.diag(ds["q_cov"].values))
order = np.argsort(ds["Z"].values[:, 0])
print("\n   z      E[u]    sd[u]")
for i in order:
    print(f"{ds['Z'].values[i, 0]:6.3f}  {ds['q_mean'].values[i]:7.3f}  {q_sd[i]:6.3f}")

# %% [markdown]
# ## Optimising the inducing inputs
#
# `gd.inducing.Optimized(init)` starts from another specification (here the k-means centres)
# and optimises Z jointly with the hyperparameters. For VFE the inducing inputs are variational
# parameters: moving them can only tighten the bound, apart from local optima, and it never
# pushes the bound above the exact LML. With few inducing points the gain is large. For FITC,
# Z are extra parameters of a different model, and its objective can rise above the exact LML,
# which is a sign of overfitting.

# %%
M_SMALL = 6
for name, inference in (("VFE", gd.inference.VFE()), ("FITC", gd.inference.FITC())):
    fixed_Z = gd.Model(kernel=kernel, likelihood=likelihood, inducing=gd.inducing.KMeans(M_SMALL, seed=0),
                       inference=inference).fit(X_train, y_train)
    optimised = gd.Model(kernel=kernel, likelihood=likelihood,
                         inducing=gd.inducing.Optimized(gd.inducing.KMeans(M_SMALL, seed=0)),
                         inference=inference).fit(X_train, y_train)
    print(f"{name} with M = {M_SMALL}: k-means Z {fixed_Z.log_evidence:9.4f}   optimised Z "
          f"{optimised.log_evidence:9.4f}   (exact LML {exact.log_evidence:.4f})")
    if name == "VFE":
        vfe_opt = optimised
        assert optimised.log_evidence >= fixed_Z.log_evidence - 1e-6
        assert optimised.log_evidence <= exact.log_evidence
    else:
        print("  FITC's objective may exceed the exact LML: it is the evidence of a different model")
print("optimised Z:", np.round(np.sort(vfe_opt.state.Z[:, 0]), 3))

# %% [markdown]
# ## A prior on the length-scale, and a fixed noise variance
#
# Any hyperparameter can be given a prior instead of a starting value; the fit then maximises
# log evidence + log prior (MAP). `gd.priors.Gamma(shape, rate)` starts at its mean.
# `gd.Fixed(value)` holds a hyperparameter at a value. Here we hold the noise at the true
# variance 0.3² = 0.09. (`gd.Fixed` is not `gd.inducing.Fixed`, which fixes the inducing
# inputs.)

# %%
map_model = gd.Model(
    kernel=gd.kernels.SquaredExponential(lengthscale=gd.priors.Gamma(shape=4.0, rate=8.0), variance=1.0),
    likelihood=gd.likelihoods.Gaussian(variance=gd.Fixed(0.09)),
    inducing=gd.inducing.KMeans(M, seed=0),
    inference=gd.inference.VFE(),
)
map_post = map_model.fit(X_train, y_train)
print(f"priors: {map_post.priors}")
print(f"fixed:  {map_post.fixed}")
print(f"log evidence {map_post.log_evidence:.4f}, log prior {map_post.log_prior:.4f}")
print(f"lengthscale: MAP {float(map_post.values['kernel.lengthscale']):.3f} (prior mean 0.5) vs "
      f"ML {float(vfe.values['kernel.lengthscale']):.3f}")
assert float(map_post.values["likelihood.variance"]) == 0.09

# %% [markdown]
# ## ArviZ: InferenceData, held-out ELPD and model comparison
#
# `to_inference_data(X_new, y_new)` draws the latent function jointly at the new inputs from
# the Gaussian posterior (`chains` × `draws` independent draws), adds observation noise for the
# `posterior_predictive` group and stores the pointwise log-likelihood of `y_new`: ArviZ's
# container, an `InferenceData` under ArviZ 0.x and an xarray `DataTree` under ArviZ 1.x,
# with the same groups. Here it scores the *held-out* points under each posterior, so this is a
# predictive comparison on test data, not leave-one-out on the training data. For points the
# posterior was not fitted to, the expected log predictive density (ELPD) of each is the log of
# the likelihood averaged over the draws, `held_out_elpd` (PSIS-LOO's correction, which `az.loo`
# applies, is meant for the fitted points). `compare` hands these to `az.compare`, which ranks
# the models and gives each one's difference from the best (`elpd_diff`, <= 0), its standard
# error (`dse`) and stacking weights, with the columns named and signed as ArviZ 1.x does
# (`elpd`, `p`: 0.x's `elpd_loo`, `p_loo`) under either version. Expect the exact GP and a good
# VFE fit to be indistinguishable.

# %%
idata = {name: posteriors[name].to_inference_data(X_test, y_test, draws=250, chains=4, seed=0)
         for name in ("Exact", "VFE")}
print(idata["VFE"])
held_out = {name: held_out_elpd(data) for name, data in idata.items()}
for name, elpd in held_out.items():
    estimate = elpd_estimate(elpd)
    exact_density = float(np.sum(posteriors[name].log_predictive(X_test, y_test)))
    print(f"{name:5s} held-out ELPD {estimate['elpd']:8.3f} (se {estimate['se']:.3f}) from "
          f"{estimate['n_samples']} draws, {exact_density:8.3f} in closed form")
comparison = compare(held_out)
print(comparison[["rank", "elpd", "p", "elpd_diff", "dse", "weight"]].round(3))

# %% [markdown]
# ## Save and load
#
# A posterior is saved as netCDF with xarray's scipy backend, so no netCDF4 package is needed.
# Loading rebuilds the model from the stored declaration, so the loaded posterior predicts
# exactly as the original one did.

# %%
path = workdir / "vfe_posterior.nc"
vfe.save(path)
again = gd.load(path)
print(f"saved {path.name} ({path.stat().st_size} bytes); loaded {again!r}")
np.testing.assert_allclose(again.predict(X_test)["y_mean"], vfe.predict(X_test)["y_mean"], rtol=0, atol=1e-12)
assert again.log_evidence == vfe.log_evidence

# %% [markdown]
# ## A figure (only if matplotlib is installed)
#
# The figure is drawn on matplotlib's Agg canvas and saved to the temporary directory.

# %%
fig = new_figure(12, 3.6)
if fig is not None:
    grid = np.linspace(-0.5, 6.5, 300)[:, None]
    panels = {"Exact": exact, "VFE (k-means Z)": vfe, "FITC (k-means Z)": fitc,
              f"VFE, {M_SMALL} optimised Z": vfe_opt}
    axes = fig.subplots(1, len(panels), sharey=True)
    for ax, (title, post) in zip(axes, panels.items()):
        p = post.predict(grid)
        mean, sd = p["y_mean"].values, np.sqrt(p["y_var"].values)
        ax.plot(X_train[:, 0], y_train, ".", color="0.6", ms=3)
        ax.plot(grid[:, 0], mean, "C0")
        ax.fill_between(grid[:, 0], mean - 2 * sd, mean + 2 * sd, color="C0", alpha=0.2)
        if post.model.inducing is not None:
            ax.plot(post.state.Z[:, 0], np.full(post.state.Z.shape[0], y.min() - 0.4), "k|", ms=10)
        ax.set_title(f"{title}\nlog evidence {post.log_evidence:.2f}", fontsize=9)
    show_figure(fig, workdir / "sparse_regression.png")

# %% [markdown]
# ## Clean up

# %%
if not os.environ.get("GPDSL_TUTORIAL_KEEP"):
    shutil.rmtree(workdir, ignore_errors=True)
print(f"tutorial 1 finished in {time.perf_counter() - T_START:.1f} s")
