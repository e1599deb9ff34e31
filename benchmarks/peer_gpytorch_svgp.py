"""GPyTorch's SVGP with Adam on minibatches, the large-N peer of issues 15 and 16, on gpdsl's data.

Two steps, two environments (GPyTorch goes in the benchmark's own virtualenv, never in gpdsl's):

1. with gpdsl's interpreter, write the data and the starting inducing inputs::

       PYTHONPATH=. python3 benchmarks/peer_gpytorch_svgp.py --make-data /tmp/twonorm_1e5.npz --n 100000 --m 128

   ``bench_large_n.py``'s problem: ``gd.datasets.twonorm(n, seed=0)`` to train on, an
   independent test draw of ``--test-n`` rows (seed 1), and Z0 its k-means start
   (``KMeans(m, seed=0)`` on ``--kmeans-rows`` training rows drawn at random; 0: all).
2. with the peer's interpreter (``python3 -m venv /tmp/gpyt && /tmp/gpyt/bin/pip install
   torch==2.13.0 gpytorch``), fit and print::

       /tmp/gpyt/bin/python benchmarks/peer_gpytorch_svgp.py --data /tmp/twonorm_1e5.npz

The model is GPyTorch's SVGP example for classification: ``ApproximateGP`` with a
``CholeskyVariationalDistribution`` and a whitened ``VariationalStrategy`` at Z0 (learnt),
``ScaleKernel(RBFKernel())`` started at lengthscale sqrt(D), outputscale 1 (gpdsl's start),
``BernoulliLikelihood`` (GPyTorch's is the probit link), ``VariationalELBO(num_data=N)``, Adam
(learning rate ``--lr``, 0.01) on all parameters, ``--steps`` steps (1,000) of ``--batch`` rows
(1,024) drawn at random, one torch thread.  Timed: the whole training loop (process CPU seconds
and wall seconds) and each step (its median after 20, process CPU; issue 29); then the test NLPD
and error rate, and the peak resident memory of the process (``resource.getrusage``, kilobytes on Linux).  Timings are printed, never asserted.
"""
import argparse
import os
import resource
import time

import numpy as np

from peer_fits import gpytorch_adam_steps, gpytorch_svgp_parts


def make_data(path, n, m, test_n, kmeans_rows):
    # bench_large_n.py's data and start (it lies beside this script).
    from bench_large_n import gd, kmeans_start, test_set
    X, y = gd.datasets.twonorm(n, seed=0)
    Xte, yte = test_set(test_n)
    Z0 = kmeans_start(X, m, kmeans_rows)
    np.savez(path, X=X, y=y, Xte=Xte, yte=yte, Z0=Z0)
    print(f"wrote {path}: N = {n}, test {test_n}, D = {X.shape[1]}, M = {m} (k-means on {kmeans_rows or n} rows)")


def fit(path, steps, batch, lr, seed):
    import gpytorch
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    d = np.load(path)
    X, y = torch.tensor(d["X"]), torch.tensor((d["y"] > 0).astype(float))
    Xte, yte = torch.tensor(d["Xte"]), d["yte"] > 0
    Z0 = d["Z0"]
    n = X.shape[0]
    model, likelihood, optimiser, elbo = gpytorch_svgp_parts(Z0, n, lr)   # bench_peers.py's GPyTorch model
    generator = torch.Generator().manual_seed(seed)
    c0, w0 = time.process_time(), time.perf_counter()
    marks = [c0]
    gpytorch_adam_steps(X, y, model, optimiser, elbo, steps, batch, generator,
                        after_step=lambda: marks.append(time.process_time()))
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    # Per step: the median after the first 20 (torch's first steps allocate and warm its caches).
    per_step = np.diff(marks)[20:]
    model.eval()
    likelihood.eval()
    with torch.no_grad(), gpytorch.settings.fast_pred_var():
        p1 = np.concatenate([likelihood(model(Xte[i:i + 2000])).mean.numpy() for i in range(0, Xte.shape[0], 2000)])
    p_true = np.clip(np.where(yte, p1, 1.0 - p1), 1e-300, 1.0)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"GPyTorch {gpytorch.__version__} (torch {torch.__version__}) SVGP + Adam: N = {n}, M = {Z0.shape[0]}, "
          f"batch {batch}, {steps} steps, lr {lr}, 1 torch thread; load average {'%.2f %.2f %.2f' % os.getloadavg()}")
    print(f"  CPU {cpu:.1f} s, wall {wall:.1f} s, test NLPD {-np.mean(np.log(p_true)):.4f}, "
          f"error {100 * np.mean(p_true < 0.5):.2f} %, peak RSS {peak_mb:.0f} MB, "
          f"lengthscale {model.covar_module.base_kernel.lengthscale.item():.3g}, "
          f"outputscale {model.covar_module.outputscale.item():.3g}")
    if per_step.size:
        print(f"  per step (process CPU, steps 21 to {steps}): median {1e3 * np.median(per_step):.2f} ms, "
              f"p10 {1e3 * np.percentile(per_step, 10):.2f}, p90 {1e3 * np.percentile(per_step, 90):.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--make-data", metavar="NPZ", help="write the data (gpdsl's interpreter) and stop")
    p.add_argument("--data", metavar="NPZ", help="fit GPyTorch's SVGP on this data (the peer's interpreter)")
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--m", type=int, default=128)
    p.add_argument("--test-n", type=int, default=100_000)
    p.add_argument("--kmeans-rows", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0, help="GPyTorch's minibatch and initialisation seed")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--lr", type=float, default=0.01)
    args = p.parse_args()
    if args.make_data:
        make_data(args.make_data, args.n, args.m, args.test_n, args.kmeans_rows)
    elif args.data:
        fit(args.data, args.steps, args.batch, args.lr, args.seed)
    else:
        p.error("give --make-data or --data")


if __name__ == "__main__":
    main()
