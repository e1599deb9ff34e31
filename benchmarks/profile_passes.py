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

A second table times the VFE pass's own steps alone (every BLAS and LAPACK call of
``collapsed._evaluate_at``, the kernel's distances, exponentials and VJPs, the jitted sweeps), the
row-block ones on one block scaled to N rows, and sums them, the BLAS and LAPACK calls apart from
the rest: the pass with nothing between its steps, no allocator cost and each product at the rate
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
    vfe_flops = 4 * N * M * M + 4 * N * M * D
    rows = [
        ("VFE value+grad", vfe_flops,
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
    print_steps(f"VFE value+grad, its steps alone ({chunk} rows a block, scaled to N = {N}):",
                vfe_steps_alone(kernel, X, y_reg, Z, chunk, args.repeats), vfe_flops / rate)


BLAS = "BLAS / LAPACK"
OTHER = "kernel, sweeps"


def whitened_block(kernel, Z, Xb):
    """(K_uu, L, L^-1, K_uf, A = L^-1 K_uf) for the rows Xb: the operands the steps-alone tables
    time their steps on."""
    Kuu = kernel.gram(Z, Z)
    L = gd.linalg.cholesky(Kuu, None, what="K_uu")[0]
    Li = gd.linalg.inverse_lower(L)
    K = kernel.gram(Z, Xb)
    return Kuu, L, Li, K, gd.linalg.lower_product(Li, K)


def vfe_steps_alone(kernel, X, y, Z, chunk, repeats):
    """The VFE value-and-gradient pass's own steps (``collapsed._evaluate_at``), each timed alone
    (warm: its memory reused, in cache where it fits): [(name, kind, seconds)], the row-block
    steps on one block of ``chunk`` rows scaled to N rows, the once-an-evaluation O(M^3) steps as
    they are.  Their sum is the pass with nothing between its steps and no allocator or memory
    cost, each product at the rate OpenBLAS reaches on its own shape rather than the bound's DGEMM
    rate; ``kind`` is BLAS (a BLAS or LAPACK call) or OTHER (the kernel's distances, exponentials
    and sweeps, the jitted sweeps, reductions)."""
    n, m = X.shape[0], Z.shape[0]
    Xb, yb = X[:chunk], y[:chunk]
    Kuu, L, Li, K, A = whitened_block(kernel, Z, Xb)
    w = np.full(chunk, 10.0)
    B = np.eye(m) + gd.linalg.weighted_gram(A, w)
    LB = gd.linalg.cholesky(B, 0.0, what="B")[0]
    C = Li.T @ Li            # a dense (M, M) matrix, as the pass's L^-T (I - B^-1)
    G = C @ A
    # beta = 0 and w = 1 leave G as it is: contract_then_complete completes G in place.
    beta, alpha, ones = np.zeros(m), np.full(m, 0.1), np.ones(chunk)
    block = [
        ("K_uf (distances, exp)", OTHER, lambda: kernel.gram(Z, Xb)),
        ("L^-1, formed for each block (DTRTRI)", BLAS, lambda: gd.linalg.inverse_lower(L)),
        ("A = L^-1 K_uf (DTRMM)", BLAS, lambda: gd.linalg.lower_product(Li, K)),
        ("K_nn - |a_n|^2", OTHER, lambda: kernel.diag(Xb) - np.einsum("mn,mn->n", A, A)),
        ("A W A^T (DSYRK)", BLAS, lambda: gd.linalg.weighted_gram(A, w)),
        ("A W y (DGEMV)", BLAS, lambda: A @ (w * yb)),
        ("e = y - alpha^T A (DGEMV)", BLAS, lambda: yb - alpha @ A),
        ("K_uf adjoint (DGEMM)", BLAS, lambda: C @ A),
        ("its contraction sweep", OTHER, lambda: contract_then_complete(G, K, beta, yb, ones)),
        ("kernel VJP of K_uf", OTHER, lambda: kernel.vjp(Z, Xb, G, K=K)),
        ("kernel VJP of K_nn", OTHER, lambda: kernel.diag_vjp(Xb, w)),
    ]
    once = [
        ("K_uu and its Cholesky factor", BLAS, lambda: gd.linalg.cholesky(kernel.gram(Z, Z), None, what="K_uu")),
        ("B's Cholesky factor", BLAS, lambda: gd.linalg.cholesky(B, 0.0, what="B")),
        ("L^-1, L_B^-1 (DTRTRI)", BLAS, lambda: (gd.linalg.inverse_lower(L), gd.linalg.inverse_lower(LB))),
        ("B^-1, L^-T (I - B^-1), L^-T G L^-1 (four M^3 DGEMMs)", BLAS, lambda: (LB.T @ LB, Li.T @ C, Li.T @ C @ Li)),
        ("kernel VJP of K_uu", OTHER, lambda: kernel.vjp(Z, Z, C, K=Kuu)),
    ]
    repeats = max(repeats, 20)
    return ([(name, kind, n / chunk * cpu_median(fn, repeats)) for name, kind, fn in block]
            + [(name, kind, cpu_median(fn, repeats)) for name, kind, fn in once])


def print_steps(title, steps, bound=None):
    """A markdown table of ``steps`` [(name, kind, seconds)] with the sum of each kind and of all
    (and, with ``bound`` in seconds, the sums' ratios to it)."""
    print(f"\n{title}\n| step | kind | ms |\n|---|---|---:|")
    for name, kind, t in steps:
        print(f"| {name} | {kind} | {1e3 * t:.3f} |")
    for label, kinds in ((f"sum of {BLAS}", (BLAS,)), (f"sum of {OTHER}", (OTHER,)), ("sum", (BLAS, OTHER))):
        total = sum(t for _, kind, t in steps if kind in kinds)
        ratio = f" ({total / bound:.2f}x the bound)" if bound else ""
        print(f"| {label} | | {1e3 * total:.2f}{ratio} |")


if __name__ == "__main__":
    main()
