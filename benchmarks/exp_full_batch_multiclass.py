"""Issue 46: full-batch SVGP on the multi-class sets now that q's natural steps are extrapolated
(``gpdsl.methods.common.damped_natural_steps``): can a deterministic fit -- L-BFGS-B on the
hyperparameters, q moved to its optimum at every evaluation -- end converged (its gradient test)
in seconds, and at what test NLPD against the minibatch default?

For each set, link and Z treatment: process CPU seconds of ``model.fit`` (k-means included), the
evaluations, the natural steps in all and how many evaluations' steps converged, the stop reason,
the largest gradient entry against its tolerance, ``converged``, the bound, test NLPD and error.

    OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_full_batch_multiclass.py --sets digits
    python3 benchmarks/exp_full_batch_multiclass.py --sets digits --links softmax --z fixed --max-iter 200
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))            # this checkout's gpdsl
sys.path.insert(0, HERE)

from bench_multiclass_defaults import SETS, data, load  # noqa: E402

import gpdsl as gd  # noqa: E402


def run(d, link, z, M, max_iter):
    K = d["K"]
    kmeans = gd.inducing.KMeans(min(M, d["X"].shape[0]), seed=0)
    inducing = gd.inducing.Optimized(kmeans) if z == "optimised" else kmeans
    model = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Categorical(K, link), inducing,
                     gd.inference.SVGP())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c0 = time.process_time()
        post = model.fit(d["X"], d["y"], max_iter=max_iter)
        cpu = time.process_time() - c0
    p = np.clip(np.asarray(post.predict(d["Xte"])["p"], dtype=float), 1e-300, None)
    p = p / p.sum(axis=1, keepdims=True)          # as GPClassifier.predict_proba
    yte = d["yte"].astype(int)
    nlpd = -float(np.mean(np.log(p[np.arange(len(yte)), yte])))
    err = float(np.mean(np.argmax(p, 1) != yte))
    g = post.diagnostics
    return (f"{link:9s} Z {z:9s} {cpu:7.1f} s  evals {g.n_iterations:4d}  steps {g.local_sweeps:6d} "
            f"(converged {g.local_converged})  stop {g.stop_reason:16s} grad {g.grad_norm:.3g}/{g.grad_tol:.3g} "
            f"({g.grad_name})  converged {post.converged}  bound {post.log_evidence:.3f}  NLPD {nlpd:.4f}  err {err:.4f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="*", default=["digits"], choices=SETS)
    p.add_argument("--links", nargs="*", default=["softmax", "robustmax"])
    p.add_argument("--z", nargs="*", default=["fixed", "optimised"], choices=["fixed", "optimised"])
    p.add_argument("--M", type=int, default=100)
    p.add_argument("--max-iter", type=int, default=1000)
    a = p.parse_args(argv)
    print(f"load {load()}, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'default')}", flush=True)
    for name in a.sets:
        d = data(name)
        print(f"{name}: N {d['X'].shape[0]}, D {d['X'].shape[1]}, K {d['K']}, M {a.M}", flush=True)
        for link in a.links:
            for z in a.z:
                print("  " + run(d, link, z, a.M, a.max_iter), flush=True)
    print(f"load {load()}")


if __name__ == "__main__":
    main()
