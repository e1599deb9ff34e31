"""Minibatch SVGP at large N against GPyTorch's SVGP (issue 15).

Data: ``gd.datasets.twonorm`` (20 features), ``--n`` training rows (default 100,000) and 10,000
test rows from the same seeded draw.  Model: isotropic SE starting at lengthscale sqrt(20),
variance 1; ``Bernoulli(--link)`` with its bias fixed at 0; ``KMeans(--m, seed=0)`` inducing
inputs (fixed); ``gd.inference.SVGP(batch_size=--batch-size)`` with its defaults (Adam learning
rate 0.01, natural-gradient step 0.1) until its stopping rule fires (``stop_tol``,
``stop_window``: :mod:`gpdsl.methods.stochastic`), at most ``--steps`` steps (fit's
``max_iter``).  ``--fixed-steps`` runs all ``--steps`` steps instead (a window longer than half
of them, so the rule cannot fire): the fixed-step run the rule's early stop is compared with.

``--data NPZ`` instead takes the data and the start Z0 written by
``benchmarks/peer_gpytorch_svgp.py --make-data`` (the peer's run then has the same data and
start): Z fixed at Z0, or optimised from it with ``--learn-z`` (as GPyTorch's run does); the
k-means is then outside the timing, as it is for the peer.

Timed as a user runs it, in the default environment: the whole ``fit`` (k-means, the minibatch
steps and the final full-batch pass), process CPU seconds (``time.process_time``, all threads)
and wall seconds, after an untimed warm-up fit on 2,000 rows (Numba compilation).  Printed: the
times, the full-batch ELBO at the fitted q, test NLPD and error rate.

Reference: the issue writer's GPyTorch SVGP with Adam at N = 100,000, 13 s CPU, test NLPD 0.062
(run it here with ``benchmarks/peer_gpytorch_svgp.py``).
"""
import argparse
import os
import resource
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpdsl as gd  # noqa: E402

GPYTORCH_CPU_S, GPYTORCH_NLPD = 13.0, 0.062


def model(link, inducing, batch_size, stop_window=200):
    return gd.Model(gd.kernels.SquaredExponential(np.sqrt(20.0), 1.0),
                    gd.likelihoods.Bernoulli(link, bias=gd.Fixed(0.0)), inducing,
                    gd.inference.SVGP(batch_size=batch_size, stop_window=stop_window))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--m", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=1000, help="the cap on the steps (fit's max_iter)")
    p.add_argument("--fixed-steps", action="store_true", help="run all --steps steps (the rule cannot fire)")
    p.add_argument("--link", default="logit")
    p.add_argument("--data", help="the data and Z0 of peer_gpytorch_svgp.py --make-data (overrides --n, --m)")
    p.add_argument("--learn-z", action="store_true", help="with --data: optimise Z from Z0")
    args = p.parse_args()
    if args.data:
        d = np.load(args.data)
        X, y, Xs, ys = d["X"], d["y"], d["Xte"], d["yte"]
        inducing = gd.inducing.Fixed(d["Z0"])
        inducing = gd.inducing.Optimized(inducing) if args.learn_z else inducing
        args.n, args.m = X.shape[0], d["Z0"].shape[0]
    else:
        X, y = gd.datasets.twonorm(args.n + 10_000, seed=0)
        X, y, Xs, ys = X[:args.n], y[:args.n], X[args.n:], y[args.n:]
        inducing = gd.inducing.KMeans(args.m, seed=0)
    warm_up = gd.inducing.Optimized(gd.inducing.KMeans(8, seed=0)) if args.learn_z else gd.inducing.KMeans(8, seed=0)
    # The rule needs two windows: one of more than half the steps (a multiple of 10) never fires.
    window = 10 * (args.steps // 20 + 1) if args.fixed_steps else 200
    with warnings.catch_warnings():
        # The warm-up's 20 steps and the fixed-step run end at their caps: not news here.
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        model(args.link, warm_up, 64).fit(X[:2000], y[:2000], max_iter=20)          # warm-up: compilation
        c0, w0 = time.process_time(), time.perf_counter()
        post = model(args.link, inducing, args.batch_size, window).fit(X, y, max_iter=args.steps)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    nlpd = -float(np.mean(post.log_predictive(Xs, ys)))
    error = float(np.mean((post.predict(Xs)["p"].values > 0.5) != (ys > 0)))
    how = "fixed" if args.fixed_steps else f"stopping rule, cap {args.steps}"
    print(f"twonorm N = {args.n}, M = {args.m}, batch {args.batch_size}, {post.n_iterations} steps ({how}, "
          f"converged={post.converged}), {args.link}, "
          f"{'Z0 from ' + args.data + (', Z learnt' if args.learn_z else ', Z fixed') if args.data else 'k-means Z (timed)'}; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    print(f"  gpdsl minibatch SVGP: CPU {cpu:.1f} s, wall {wall:.1f} s, "
          f"ELBO {post.log_evidence:.1f}, test NLPD {nlpd:.4f}, error {100 * error:.2f} %")
    print(f"  GPyTorch SVGP + Adam (issue, not run here): CPU {GPYTORCH_CPU_S:.0f} s, test NLPD {GPYTORCH_NLPD}")
    print(f"  GPyTorch CPU / gpdsl CPU = {GPYTORCH_CPU_S / cpu:.2f}x; NLPD {nlpd:.4f} vs {GPYTORCH_NLPD}")


if __name__ == "__main__":
    main()
