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
# # Tutorial 6: a million points — stochastic fits and Dask
#
# The collapsed and full-batch methods pass over all N rows at every optimiser step. Two ways
# past that:
#
# * **minibatch optimisation**: `gd.inference.PolyaGamma(minibatch=B)` (stochastic variational
#   Pólya-Gamma, Wenzel et al. 2019) and `gd.inference.SVGP(batch_size=B)` (Hensman et al.
#   2015) take each step from B random rows, at O(B M² + M³) whatever N is, and make one full
#   pass at the end for the bound and the posterior;
# * **Dask**: with X a chunked Dask array, every O(N M²) pass of VFE, FITC, the collapsed
#   PolyaGamma, FITC-Laplace and parallel FITC-EP runs as one task per row block, so X never
#   has to be in memory at once.
#
# Part 1 classifies N = 1,000,000 points of `gd.datasets.twonorm` (20 dimensions) with both
# minibatch methods and checks them against the collapsed bound fitted on fewer rows and
# against the Bayes classifier. Part 2 fits a regression on a Dask array of N rows that is
# drawn block by block and never materialised, and checks that the Dask fit gives the
# in-memory numbers.
#
# Run it with `python tutorials/06_large_n_stochastic_and_dask.py` (about 30 s and 0.6 GB
# on a laptop). `GPDSL_TUTORIAL_N=...` sets N (e.g. 10000000 for ten million rows, a few minutes and
# several GB for part 1); `GPDSL_TUTORIAL_SMALL=1` runs N = 20,000 in a few seconds. It needs
# Dask (`pip install "gpdsl[dask]"`) and writes only to a temporary directory (kept with
# `GPDSL_TUTORIAL_KEEP=1`).

# %%
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import xarray as xr

try:
    import gpdsl as gd
except ImportError:              # not installed: use the checkout this tutorial lives in
    here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()  # script or notebook
    sys.path.insert(0, str(here.parent))
    import gpdsl as gd
from gpdsl.plotting import new_figure, show_figure

T_START = time.perf_counter()
SMALL = os.environ.get("GPDSL_TUTORIAL_SMALL") == "1"          # the test suite's quick run
N = int(os.environ.get("GPDSL_TUTORIAL_N", 20_000 if SMALL else 1_000_000))
workdir = Path(tempfile.mkdtemp(prefix="gpdsl_tutorial06_"))   # all files go here

print(f"N = {N:,}" + ("  (small size: GPDSL_TUTORIAL_SMALL=1)" if SMALL else ""))

# %% [markdown]
# ## Part 1: twonorm with a million rows
#
# Twonorm draws each class from a 20-D Gaussian with mean ±(2/√20)·1 and identity covariance,
# so the Bayes classifier is known, p(+1 | x) = σ(2a Σ_d x_d) with a = 2/√20, and its test NLPD
# is the floor any fit can reach. The test set is an independent draw of 10,000 rows.

# %%
t0 = time.perf_counter()
X, y = gd.datasets.twonorm(N, seed=0)
X_test, y_test = gd.datasets.twonorm(10_000, seed=1)
bayes_nlpd = float(np.mean(np.logaddexp(0.0, -y_test * (4.0 / np.sqrt(20.0)) * X_test.sum(axis=1))))
print(f"X {X.shape} ({X.nbytes / 1e6:.0f} MB) drawn in {time.perf_counter() - t0:.1f} s; "
      f"Bayes-classifier test NLPD {bayes_nlpd:.4f}")


def classification_scores(post):
    """Test NLPD and test error (threshold p = 0.5) on the held-out twonorm rows."""
    p = post.predict(X_test)["p"].values
    return {"test NLPD": float(-np.mean(post.log_predictive(X_test, y_test))),
            "test error": float(np.mean((p > 0.5) != (y_test > 0)))}


# %% [markdown]
# The model: an isotropic squared-exponential kernel starting at length-scale √20, the logistic
# likelihood with its bias held at 0 (the classes are balanced), and M = 64 inducing inputs at
# k-means centres. `KMeans(sample=10_000)` clusters 10,000 random rows: k-means of all N rows
# would take longer than the fit. Each minibatch method takes steps of 1,024 rows, with a
# natural-gradient step on q(u) and an Adam step on the hyperparameters at each, until its
# stopping rule finds the smoothed objective settled (the mean per-row batch objective of the last
# 200 steps within 1e-3 nats, or within its noise, of the 200 before); `max_iter` caps the steps,
# and a run that reaches the cap warns and is flagged `converged=False`. When the rule fires, one
# chunked pass over all N rows computes the full objective's gradient: where it is above the
# tolerance a full-batch fit uses, the fit warns and says `converged=False` too, since a settled
# batch objective is not an optimum (at N = 20,000 both fits stop with a length-scale gradient of
# 150-280 against 20, yet predict within 0.006 nats of the collapsed reference below;
# `polish=True` continues with the full-batch fit). `post.diagnostics` says which happened, after
# how many steps, and the full pass's largest gradient entry. A minibatch posterior predicts from q(u) alone; its
# `log_evidence`, the bound on all N rows, takes one pass over them when first read (here inside
# the timing, for the table's ELBO column).

# %%
kernel = gd.kernels.SquaredExponential(lengthscale=np.sqrt(20.0), variance=1.0)
logit = gd.likelihoods.Bernoulli("logit", bias=gd.Fixed(0.0))
inducing = gd.inducing.KMeans(64, seed=0, sample=10_000)
STEPS, BATCH = 1000, 1024
stochastic = {"stochastic PG": gd.inference.PolyaGamma(minibatch=BATCH),
              "minibatch SVGP": gd.inference.SVGP(batch_size=BATCH)}
results, posts = {}, {}
for name, inference in stochastic.items():
    c0, w0 = time.process_time(), time.perf_counter()
    posts[name] = gd.Model(kernel, logit, inducing, inference).fit(X, y, max_iter=STEPS)
    results[name] = {"N": N, **classification_scores(posts[name]), "ELBO / N": posts[name].log_evidence / N,
                     "CPU s": time.process_time() - c0, "wall s": time.perf_counter() - w0}
    d = posts[name].diagnostics
    print(f"{name}: {results[name]['wall s']:.1f} s wall, test NLPD {results[name]['test NLPD']:.4f}, "
          f"{d.stop_reason} after {d.n_iterations} steps (converged={d.converged})")

# %% [markdown]
# ## The collapsed bound as a reference
#
# The collapsed PGPR bound is the optimum the stochastic PG fit aims at: with q(u) optimal the
# two bounds are equal. Its every L-BFGS-B step passes over all rows, so we fit it on the
# first 50,000 rows with `fit(subsample=5_000)`: the hyperparameters from 5,000 random rows,
# then the posterior on all 50,000. Twonorm needs few points per length-scale, so its test
# NLPD is already near the floor at this size.

# %%
N_REFERENCE = min(N, 50_000)
c0, w0 = time.process_time(), time.perf_counter()
collapsed = gd.Model(kernel, logit, inducing, gd.inference.PolyaGamma()).fit(
    X[:N_REFERENCE], y[:N_REFERENCE], subsample=min(5_000, N_REFERENCE // 2))
results["collapsed PG (reference)"] = {"N": N_REFERENCE, **classification_scores(collapsed),
                                       "ELBO / N": collapsed.log_evidence / N_REFERENCE,
                                       "CPU s": time.process_time() - c0, "wall s": time.perf_counter() - w0}
summary = xr.Dataset({key: ("fit", [row[key] for row in results.values()]) for key in next(iter(results.values()))},
                     coords={"fit": list(results)}).to_dataframe()
print(summary.round(4).to_string())
print(f"Bayes classifier: test NLPD {bayes_nlpd:.4f}")
for name in stochastic:
    gap = results[name]["test NLPD"] - results["collapsed PG (reference)"]["test NLPD"]
    print(f"{name}: test NLPD {gap:+.4f} from the collapsed reference")

# %% [markdown]
# Both minibatch fits land within a few thousandths of the collapsed reference and of the Bayes
# floor (with a 10,000-row test set, NLPDs are measured to about ±0.003). Per
# row, the stochastic PG bound lies below the collapsed one: a minibatch q(u) hovers about its
# optimum, where the two coincide, within its batch noise (and the collapsed fit has its own N). SVGP's ELBO, with
# the logistic likelihood's expectation computed directly, lies above the Pólya-Gamma bound,
# as it must: at any q(u) the Pólya-Gamma (Jaakkola-Jordan) bound is below E_q[log σ(y f)].

# %%
fig = new_figure(10, 3.5)
if fig is not None:
    # The latent mean along the direction that separates the classes: the Bayes classifier's
    # logit 2a s with s = Σ_d x_d is a straight line.
    s = X_test.sum(axis=1)
    order = np.argsort(s)
    ax_f, ax_t = fig.subplots(1, 2)
    ax_f.plot(s[order], (4.0 / np.sqrt(20.0)) * s[order], "k--", lw=1, label="Bayes classifier")
    for i, (name, post) in enumerate({**posts, "collapsed PG (reference)": collapsed}.items()):
        ax_f.plot(s[order], post.predict_f(X_test)[0][order], ".", color=f"C{i}", ms=1, label=name)
    ax_f.set_xlabel("Σ_d x_d of a test input")
    ax_f.set_ylabel("latent mean f(x)")
    ax_f.legend(fontsize=8, markerscale=6)
    names = list(results)
    ax_t.barh(names, [results[n]["wall s"] for n in names], color=["C0", "C1", "C2"])
    ax_t.set_xlabel("wall seconds (k-means, fit and final pass)")
    for i, n in enumerate(names):
        ax_t.text(results[n]["wall s"], i, f"  N = {results[n]['N']:,}", va="center", fontsize=8)
    ax_t.set_xlim(0, 1.4 * max(results[n]["wall s"] for n in names))
    show_figure(fig, workdir / "large_n_classification.png")

# %% [markdown]
# ## Part 2: Dask, without holding X
#
# Here X is a Dask array whose blocks are drawn on demand: `da.from_delayed` wraps one seeded
# draw per block, so a pass over X draws each block again and the full array never exists in
# memory (with real data, `da.from_zarr` or `dd.read_parquet(...).to_dask_array(lengths=True)`
# play that part). The targets y, 8 bytes a row, are held in memory, as gpdsl holds every per-row
# vector. The data: y = sin(2x₁) + cos(x₂) + 0.1ε with x ~ N(0, I₂).
#
# The model is VFE with 32 k-means inducing inputs (enough in two dimensions);
# `KMeans(sample=20_000)` reads only the rows it samples. `fit(subsample=20_000)` fits the
# hyperparameters on 20,000 random rows, then computes the VFE posterior on all N in one pass of
# Dask tasks (one per block, on the threaded scheduler here; a `distributed.Client`, when one
# exists, is used instead). `chunk_size` equal to the Dask blocks makes the tasks the same row
# blocks as an in-memory fit's, so the two agree to rounding.

# %%
BLOCK = min(100_000, N // 4)
SUBSAMPLE = min(20_000, N // 4)


def draw_block(i, rows):
    """Rows of block i: a seeded draw, the same at every pass."""
    rng = np.random.default_rng([7, i])
    X_block = rng.standard_normal((rows, 2))
    return X_block, np.sin(2.0 * X_block[:, 0]) + np.cos(X_block[:, 1]) + 0.1 * rng.standard_normal(rows)


sizes = [min(BLOCK, N - start) for start in range(0, N, BLOCK)]
X_lazy = da.concatenate([da.from_delayed(dask.delayed(lambda i, r: draw_block(i, r)[0])(i, r),
                                         shape=(r, 2), dtype=float) for i, r in enumerate(sizes)])
y_dask_data = np.concatenate([draw_block(i, r)[1] for i, r in enumerate(sizes)])
print(f"X: a Dask array {X_lazy.shape}, {X_lazy.numblocks[0]} blocks of {BLOCK:,} rows "
      f"({X_lazy.nbytes / 1e6:.0f} MB if it were computed)")

regression = gd.Model(gd.kernels.SquaredExponential(np.ones(2), 1.0), gd.likelihoods.Gaussian(0.1),
                      gd.inducing.KMeans(32, seed=0, sample=20_000), gd.inference.VFE(chunk_size=BLOCK))
w0 = time.perf_counter()
with dask.config.set(scheduler="threads"):
    dask_post = regression.fit(X_lazy, y_dask_data, subsample=SUBSAMPLE)
dask_seconds = time.perf_counter() - w0
print(f"Dask fit: {dask_seconds:.1f} s wall; log evidence / N {dask_post.log_evidence / N:.5f}; "
      f"noise variance {float(dask_post.values['likelihood.variance']):.5f} (true 0.01)")

# %% [markdown]
# Predictions on a Dask X are lazy too: `predict` returns an xarray Dataset backed by Dask
# arrays, computed when asked for.

# %%
X_new = da.from_array(np.random.default_rng(99).standard_normal((20_000, 2)), chunks=(5_000, 2))
lazy = dask_post.predict(X_new)
print(type(lazy["f_mean"].data))
f_true = np.sin(2.0 * X_new[:, 0]) + np.cos(X_new[:, 1])
rmse = float(np.sqrt(((lazy["f_mean"].data - f_true) ** 2).mean().compute()))
print(f"RMSE of the latent mean against the noise-free function on 20,000 new rows: {rmse:.4f}")

# %% [markdown]
# The same fit with X computed into memory gives the same posterior (the Dask tasks are pure
# functions of their blocks, reduced in the same tree):

# %%
w0 = time.perf_counter()
memory_post = regression.fit(X_lazy.compute(), y_dask_data, subsample=SUBSAMPLE)
memory_seconds = time.perf_counter() - w0
difference = abs(dask_post.log_evidence - memory_post.log_evidence) / abs(memory_post.log_evidence)
print(f"in-memory fit: {memory_seconds:.1f} s wall; relative difference of the log evidence {difference:.1e}")
assert difference < 1e-10

# %% [markdown]
# ## Clean up

# %%
if not os.environ.get("GPDSL_TUTORIAL_KEEP"):
    shutil.rmtree(workdir, ignore_errors=True)
print(f"tutorial 6 finished in {time.perf_counter() - T_START:.1f} s")
