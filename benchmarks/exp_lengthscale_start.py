"""Issue 46: where ``GPClassifier()``'s length-scale starts, against the steps and the test NLPD.

The default kernel ``SquaredExponential()`` starts at length-scale 1 on inputs that the benchmarks
standardise, where a typical pair of rows lies sqrt(2 D) apart (digits: D = 64), so K_uf starts
near 0 and Adam (step 0.01 on the log length-scale) needs hundreds of steps to climb.  The usual
data-scaled start is the median heuristic: the median distance between rows.  This script fits
``GPClassifier(random_state=seed)`` with the kernel's start length-scale set by
``set_params(kernel__lengthscale=...)`` to each of ``--starts`` (``1``, ``median`` (the median
distance between 1,000 training rows drawn with seed 0), ``median/2``, or a number), in a fresh
process per fit, and prints the steps, process CPU, test NLPD and the fitted length-scale.

    OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_lengthscale_start.py --sets digits penbased --seeds 0 1 2
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def median_distance(X, rows=1000, seed=0):
    """The median Euclidean distance between pairs of (at most ``rows``) rows of X drawn at random."""
    S = X[np.random.default_rng(seed).choice(X.shape[0], min(rows, X.shape[0]), replace=False)]
    sq = np.sum((S[:, None, :] - S[None, :, :]) ** 2, axis=-1)
    return float(np.sqrt(np.median(sq[np.triu_indices(S.shape[0], 1)])))


def start_value(start, X):
    if start == "median":
        return median_distance(X)
    if start == "median/2":
        return median_distance(X) / 2
    return float(start)


def one_fit(name, start, seed):
    """In a child: the fit from one start; prints one JSON line."""
    import warnings

    from sklearn.metrics import log_loss

    from bench_multiclass_defaults import data
    from gpdsl.sklearn import GPClassifier
    d = data(name)
    value = start_value(start, d["X"])
    clf = GPClassifier(random_state=seed).set_params(kernel__lengthscale=value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c0 = time.process_time()
        clf.fit(d["X"], d["y"])
        cpu = time.process_time() - c0
    proba = clf.predict_proba(d["Xte"])
    print(json.dumps({"start": value, "steps": int(clf.posterior_.n_iterations), "cpu": cpu,
                      "link": clf.link_choice_.link, "nlpd": float(log_loss(d["yte"], proba, labels=clf.classes_)),
                      "lengthscale": float(clf.posterior_.values["kernel.lengthscale"])}))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="*", default=["digits", "penbased", "synth", "letter"])
    p.add_argument("--starts", nargs="*", default=["1", "median/2", "median"])
    p.add_argument("--seeds", nargs="*", type=int, default=[0])
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return one_fit(args.child[0], args.child[1], int(args.child[2]))
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}")
    print("set        seed  start      value  link       steps   CPU s    NLPD   fitted length-scale")
    for name in args.sets:
        for seed in args.seeds:
            for start in args.starts:
                out = subprocess.run([sys.executable, __file__, "--child", name, start, str(seed)],
                                     stdout=subprocess.PIPE, text=True, check=True).stdout.strip().splitlines()[-1]
                r = json.loads(out)
                print(f"{name:<10} {seed:>4}  {start:<9} {r['start']:6.2f}  {r['link']:<9} {r['steps']:>6} "
                      f"{r['cpu']:7.2f}  {r['nlpd']:.4f}  {r['lengthscale']:.2f}", flush=True)
    print(f"load {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
