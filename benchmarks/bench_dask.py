"""Dask-chunked fits beyond memory (issue 16): N = 10^7 from a Dask array built block by block,
and the same fit on the threaded scheduler against a ``distributed.LocalCluster``.

Data: regression in ``--dim`` (2) dimensions, y = sin(2 x_1) + cos(x_2) + 0.1 e with
x ~ N(0, I) (the other dimensions are irrelevant features).  Block i of ``--chunk`` rows is drawn by
``np.random.default_rng([seed, i])``: X is ``da.from_delayed`` of one task per block, so it is
never materialised (every pass draws its blocks again); y (8 bytes a row) is drawn block by block
up front and held in memory, as gpdsl holds every per-row vector.

Model: SE with one lengthscale per dimension (ARD; 1 each, variance 1), Gaussian noise 0.1, ``KMeans(--m, seed=0,
sample=20,000)`` (k-means of 20,000 random rows: only those rows of X are read),
``gd.inference.VFE(chunk_size=--chunk)``.

Runs (``--runs``):

* ``big``: ``fit(X, y, subsample=--subsample)`` at ``--n`` (10^7): the hyperparameters from the
  subsample, then the VFE posterior on all N, one Dask task per block, on the threaded
  scheduler; then ``predict_f`` on 10,000 new rows (in memory) and their RMSE against the noise
  free function.  Printed: wall and process CPU seconds, the driver's peak RSS against the
  size of one block's K_uf (``--chunk`` x M doubles), what X would take in memory, and the
  log evidence per row.
* ``compare``: a full fit (L-BFGS-B, every evaluation a Dask pass) at ``--compare-n`` (10^6)
  rows, first on the threaded scheduler, then on a ``LocalCluster(n_workers=2,
  threads_per_worker=1)`` (a ``Client`` made the active scheduler); the two posteriors are
  compared (they are equal up to rounding), and the ratio of wall times printed with each
  worker's peak RSS.

Timings are printed, never asserted.

    python3 benchmarks/bench_dask.py                          # both runs, a few minutes
    python3 benchmarks/bench_dask.py --runs big --n 2000000   # smaller
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


def block(seed, i, rows, dim):
    """(X, y) of block i: the seeded draw that every pass repeats."""
    rng = np.random.default_rng([seed, i])
    X = rng.standard_normal((rows, dim))
    return X, truth(X) + 0.1 * rng.standard_normal(rows)


def truth(X):
    return np.sin(2.0 * X[:, 0]) + np.cos(X[:, 1])


def data(n, chunk, dim, seed):
    """X as a Dask array of blocks drawn on demand, y in memory."""
    import dask
    import dask.array as da
    sizes = [min(chunk, n - start) for start in range(0, n, chunk)]
    X = da.concatenate([da.from_delayed(dask.delayed(lambda i, r: block(seed, i, r, dim)[0])(i, r),
                                        shape=(r, dim), dtype=float) for i, r in enumerate(sizes)])
    y = np.concatenate([block(seed, i, r, dim)[1] for i, r in enumerate(sizes)])
    return X, y


def model(m, chunk, dim):
    return gd.Model(gd.kernels.SquaredExponential(np.ones(dim), 1.0), gd.likelihoods.Gaussian(0.1),
                    gd.inducing.KMeans(m, seed=0, sample=20_000), gd.inference.VFE(chunk_size=chunk))


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def high_water_mb():
    """This process's own peak resident memory (VmHWM; Linux), for the cluster's workers."""
    with open("/proc/self/status") as status:
        return next(float(line.split()[1]) / 1024.0 for line in status if line.startswith("VmHWM"))


def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def run_big(args):
    X, y = data(args.n, args.chunk, args.dim, seed=0)
    Xt, _ = block(99, 0, 10_000, args.dim)
    print(f"big: N = {args.n:,}, D = {args.dim}, {X.numblocks[0]} blocks of {args.chunk:,} rows; X would take "
          f"{X.nbytes / 1e9:.2f} GB in memory, one block's K_uf {args.chunk * args.m * 8 / 1e6:.0f} MB; "
          f"driver RSS before the fit {peak_rss_mb():.0f} MB (y held: {y.nbytes / 1e6:.0f} MB)")
    post, cpu, wall = timed(lambda: model(args.m, args.chunk, args.dim).fit(X, y, subsample=args.subsample))
    mean, _ = post.predict_f(Xt)
    print(f"  fit(subsample={args.subsample:,}) + VFE posterior on all rows (threads): wall {wall:.1f} s, "
          f"process CPU {cpu:.1f} s; log evidence / N {post.log_evidence / args.n:.5f}; "
          f"noise {float(post.values['likelihood.variance']):.4g}, lengthscale "
          f"{np.array2string(post.values['kernel.lengthscale'][:3], precision=3)}...; RMSE of the mean against f on "
          f"10,000 new rows {np.sqrt(np.mean((mean - truth(Xt)) ** 2)):.4f}; driver peak RSS {peak_rss_mb():.0f} MB")


def run_compare(args):
    from distributed import Client, LocalCluster
    X, y = data(args.compare_n, args.chunk, args.dim, seed=0)
    print(f"compare: N = {args.compare_n:,}, {X.numblocks[0]} blocks of {args.chunk:,} rows, M = {args.m}, full "
          f"L-BFGS-B fit (max_iter {args.max_iter}), every evaluation a pass of Dask tasks")
    fit = lambda: model(args.m, args.chunk, args.dim).fit(X, y, max_iter=args.max_iter)  # noqa: E731
    threaded, cpu_t, wall_t = timed(fit)
    print(f"  threaded scheduler: wall {wall_t:.1f} s, process CPU {cpu_t:.1f} s, {threaded.n_iterations} "
          f"iterations, log evidence {threaded.log_evidence:.6f}; driver peak RSS {peak_rss_mb():.0f} MB")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        cluster_post, cpu_c, wall_c = timed(fit)
        workers = client.run(high_water_mb)
    print(f"  LocalCluster(2 workers x 1 thread): wall {wall_c:.1f} s, driver CPU {cpu_c:.1f} s, "
          f"{cluster_post.n_iterations} iterations, log evidence {cluster_post.log_evidence:.6f}; worker peak RSS "
          + ", ".join(f"{v:.0f} MB" for v in workers.values()))
    print(f"  cluster / threads wall time: {wall_c / wall_t:.2f}; log evidences differ by "
          f"{abs(cluster_post.log_evidence - threaded.log_evidence):.2e}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default="big,compare")
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--compare-n", type=int, default=1_000_000)
    p.add_argument("--chunk", type=int, default=250_000)
    p.add_argument("--dim", type=int, default=2)
    p.add_argument("--m", type=int, default=64)
    p.add_argument("--subsample", type=int, default=20_000)
    p.add_argument("--max-iter", type=int, default=30)
    args = p.parse_args()
    warnings.simplefilter("ignore", gd.ConvergenceWarning)
    print(f"bench_dask: {os.cpu_count()} CPUs, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    model(8, 1000, args.dim).fit(*block(5, 0, 2000, args.dim), max_iter=3)          # warm-up (Numba), untimed
    for name in args.runs.split(","):
        {"big": run_big, "compare": run_compare}[name.strip()](args)
    print(f"load average at the end {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
