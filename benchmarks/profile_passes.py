"""The full-batch O(N M^2) passes against their flop bound: process CPU of one pass of each path at
one shape, beside the floating-point work of its BLAS-3 products timed at this machine's DGEMM rate.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python3 benchmarks/profile_passes.py
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python3 benchmarks/profile_passes.py --n 90000 --m 128 --d 1

Shape: N rows of ``gd.datasets.twonorm(N, dim=D)`` (the targets' signs for the classifiers, the
first feature plus noise for regression), M inducing inputs (the first M rows), an isotropic SE
kernel at lengthscale sqrt(D).  The passes, each warm (compiled, caches loaded), median of
``--repeats``:

==================  =================================================================  ==========================
pass                what runs                                                          flops counted
==================  =================================================================  ==========================
VFE value+grad      ``collapsed.evaluate(..., need_grad=True)`` with dZ (bench_vfe's)  4 N M^2 + 4 N M D
SVGP natural        one of ``svgp.optimise_q``'s passes: K_uf, A = L^-1 K_uf,          5 N M^2 + 2 N M D
                    U = R^T A, A W A^T, A r (``_data_pass(..., ("natural",))``)
... blocks kept      the same with each block's K_uf and A kept from an earlier pass (what     4 N M^2
                    ``optimise_q`` does between its steps when they fit ``cache_bytes()``)
SVGP gradient       the gradient pass at q: K_uf, A, U, W, L^-T G_A, the kernel VJP,   10 N M^2 + 4 N M D
                    Phi = 2 W A^T, P R (``_data_pass(..., ("grad", "q_grad"))``)
expectations        ``Bernoulli("probit").variational_expectations`` of N rows         (not BLAS: ns per row)
==================  =================================================================  ==========================

(N M^2 for a triangular solve or a syrk, 2 N M^2 for a general product, 2 N M D for the kernel's
cross term; the counts are those of the passes before issue 29's triangular products, R^T A now
costing N M^2, so that ratios before and after compare the same work.)  The bound is flops / the rate of one (M, N) x (N, M)-shaped DGEMM measured here, so the
ratio says how far a pass is from a machine doing nothing but its products at full speed; the
expectations' cost, which no product count includes, is printed per row beside it.  A full-batch
SVGP evaluation is one natural pass per q step (about ten per L-BFGS-B evaluation on twonorm) and
one gradient pass.

A second table times the VFE pass's own steps alone (K_uf, A, A W A^T, the K_uf adjoint's product,
its contraction sweep, the kernel VJP), each on one row block, warm, scaled to N rows, and sums
them: the pass with nothing between its steps, no allocator cost and each product at the rate
OpenBLAS reaches on its own shape.  A fit's evaluations times that sum is the least the fit's
passes can take in this arrangement (``RESULTS.md``, the peer benchmark's section, uses it for the
sine rows).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpdsl as gd  # noqa: E402
from gpdsl._jit.collapsed import contract_then_complete  # noqa: E402
from gpdsl.methods import collapsed, svgp  # noqa: E402


def cpu_median(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def dgemm_rate(n, m, repeats=5):
    """Flop/s of an (M, N) x (N, M) product: the shape of every pass's reductions."""
    a = np.random.default_rng(0).standard_normal((m, n))
    t = cpu_median(lambda: a @ a.T.copy(), repeats)
    return 2.0 * n * m * m / t


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--m", type=int, default=128)
    p.add_argument("--d", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    N, M, D = args.n, args.m, args.d
    X, labels = gd.datasets.twonorm(N, dim=D, seed=0)
    Z = X[:M].copy()
    kernel = gd.kernels.SquaredExponential(float(np.sqrt(D)), 1.0).bind()
    probit = gd.likelihoods.Bernoulli("probit").bind()
    noise = gd.likelihoods.Gaussian(0.1).bind()
    y_reg = X[:, 0] + 0.3 * np.random.default_rng(1).standard_normal(N)
    chunk = svgp.default_chunk_size(N, M)
    factors = svgp._factors(kernel, Z, None)
    rng = np.random.default_rng(2)
    m = 0.1 * rng.standard_normal((M, 1))
    R = np.linalg.cholesky(np.eye(M) * 0.5 + 0.01 * np.ones((M, M)))[None]
    rate = dgemm_rate(N, M)
    blocks = svgp._data_pass(kernel, probit, X, labels, Z, factors, m, R, chunk, ("natural",), keep=True)[2]
    rows = [
        ("VFE value+grad", 4 * N * M * M + 4 * N * M * D,
         lambda: collapsed.evaluate(kernel, noise, X, y_reg, Z, fitc=False, need_grad=True)),
        ("SVGP natural", 5 * N * M * M + 2 * N * M * D,
         lambda: svgp._data_pass(kernel, probit, X, labels, Z, factors, m, R, chunk, ("natural",))),
        ("SVGP natural, blocks kept", 4 * N * M * M,
         lambda: svgp._data_pass(kernel, probit, X, labels, Z, factors, m, R, chunk, ("natural",), carried=blocks)),
        ("SVGP gradient", 10 * N * M * M + 4 * N * M * D,
         lambda: svgp._data_pass(kernel, probit, X, labels, Z, factors, m, R, chunk, ("grad", "q_grad"))),
    ]
    print(f"N = {N}, M = {M}, D = {D}; threads OMP={os.environ.get('OMP_NUM_THREADS')} "
          f"OPENBLAS={os.environ.get('OPENBLAS_NUM_THREADS')}; DGEMM {rate / 1e9:.1f} GFLOP/s; "
          f"load average {os.getloadavg()[0]:.2f}; median of {args.repeats}")
    print("| pass | ms | flops | bound ms | ratio |\n|---|---:|---:|---:|---:|")
    for name, flops, fn in rows:
        t = cpu_median(fn, args.repeats)
        print(f"| {name} | {1e3 * t:.1f} | {flops:.2e} | {1e3 * flops / rate:.1f} | {t * rate / flops:.2f} |", flush=True)
    mean, var = 0.5 * rng.standard_normal(N), rng.uniform(0.01, 2.0, N)
    t = cpu_median(lambda: probit.variational_expectations(labels, mean, var), args.repeats)
    print(f"| expectations (probit, {N} rows) | {1e3 * t:.1f} | {1e9 * t / N:.0f} ns a row | | |")
    print_vfe_parts(kernel, X, y_reg, Z, chunk, args.repeats)


def print_vfe_parts(kernel, X, y, Z, chunk, repeats):
    """The VFE value-and-gradient pass's own steps, each timed alone on one row block of the
    pass's size (warm: its memory reused, in cache where it fits) and scaled to N rows, and their
    sum: what the pass would take with no glue between its steps and no allocator or memory cost.
    The products are timed at the rates OpenBLAS reaches on their own shapes (a triangular or
    symmetric product runs at about 0.7 of the general one's rate), not at the DGEMM rate of the
    bound above."""
    n, m = X.shape[0], Z.shape[0]
    Xb, yb = X[:chunk], y[:chunk]
    L = np.linalg.cholesky(kernel.gram(Z, Z) + 1e-6 * np.eye(m))
    Li = gd.linalg.inverse_lower(L)
    K = kernel.gram(Z, Xb)
    A = gd.linalg.lower_product(Li, K)
    C = Li.T @ Li            # a dense (M, M) matrix, as the pass's L^-T (I - B^-1)
    G = C @ A
    beta, e, w = 0.1 * np.ones(m), yb.copy(), np.full(chunk, 10.0)
    parts = [
        ("K_uf (distances, exp)", lambda: kernel.gram(Z, Xb)),
        ("A = L^-1 K_uf (DTRMM)", lambda: gd.linalg.lower_product(Li, K)),
        ("A W A^T (DSYRK)", lambda: gd.linalg.weighted_gram(A, w)),
        ("K_uf adjoint (DGEMM)", lambda: C @ A),
        ("its contraction sweep", lambda: contract_then_complete(G, K, beta, e, w)),
        ("kernel VJP of K_uf", lambda: kernel.vjp(Z, Xb, G, K=K)),
    ]
    scale = n / chunk
    print(f"\nVFE value+grad, its steps alone on one block of {chunk} rows, scaled to N = {n}:")
    print("| step | ms |\n|---|---:|")
    total = 0.0
    for name, fn in parts:
        t = scale * cpu_median(fn, max(repeats, 20))
        total += t
        print(f"| {name} | {1e3 * t:.1f} |")
    print(f"| sum | {1e3 * total:.1f} |")


if __name__ == "__main__":
    main()
