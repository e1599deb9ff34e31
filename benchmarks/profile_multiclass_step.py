"""The K-class minibatch step against its flop bound: process CPU per step of gpdsl's SVGP step
(``gpdsl.methods.svgp.minibatch_update``, what ``SVGP(batch_size=B)`` runs each step) at the
shapes of issue 28's data sets, beside the floating-point work the step cannot avoid, timed at
this machine's own DGEMM rate.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python3 benchmarks/profile_multiclass_step.py

The step (shared kernel, B rows, M inducing points, K classes; see the svgp module docstring):
pass 1 forms U_k = R_k^T A and P_k = A W_k A^T (the sites' natural parameters), the natural step
refactorises each class's S_k^-1, pass 2 (at the new q) forms U_k again and V = sum_k R_k U_k D_k
for the K_uf adjoint.  Four products of 2 K M^2 B flops each, plus K Cholesky factorisations and
triangular inverses (4/3 K M^3) and the O(M^3) K_uu terms:

    flops(two-pass) = 8 K M^2 B + 4/3 K M^3 + 6 M^3,   flops(one-pass) = 6 K M^2 B + 4/3 K M^3 + 6 M^3

(one pass: the gradient at the q the step starts from, as stochastic Pólya-Gamma takes it).  The
bound is flops / (the DGEMM rate measured here on the step's own stacked shape (K M, M) x (M, B)),
so "ratio" is how far the step is from a machine running nothing but its products at full speed.
"""
import argparse
import os
import time

import numpy as np

# (name, K, D) of issue 28's data sets; M = 100 and B = 256 as in peer_multiclass.py's runs.
SHAPES = (("digits", 10, 64), ("penbased", 10, 16), ("letter", 26, 16))


def gemm_rate(K, M, B, repeats=20):
    """Flop/s of one (K M, M) x (M, B) DGEMM, the step's dominant product, warm."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((K * M, M)), rng.standard_normal((M, B))
    a @ b
    t = time.process_time()
    for _ in range(repeats):
        a @ b
    return 2.0 * K * M * M * B * repeats / (time.process_time() - t)


def step_time(K, D, M, B, link, one_pass, steps):
    """Process CPU seconds per minibatch step, warm (compiled, caches loaded)."""
    import gpdsl as gd
    from gpdsl.methods import svgp
    rng = np.random.default_rng(1)
    X, y, Z = rng.standard_normal((B, D)), rng.integers(0, K, B).astype(float), rng.standard_normal((M, D))
    kernel = gd.kernels.SquaredExponential(float(np.sqrt(D)), 1.0).bind()
    likelihood = gd.likelihoods.Categorical(K, link).bind()
    state = svgp.CarriedQ.of(svgp.initial_values(M, K), M, K)
    for _ in range(3):
        state, *_ = svgp.minibatch_update(kernel, likelihood, X, y, Z, state, scale=50.0, rho=0.1, one_pass=one_pass)
    t = time.process_time()
    for _ in range(steps):
        state, *_ = svgp.minibatch_update(kernel, likelihood, X, y, Z, state, scale=50.0, rho=0.1, one_pass=one_pass)
    return (time.process_time() - t) / steps


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--M", type=int, default=100)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=50)
    args = p.parse_args()
    M, B = args.M, args.batch
    print(f"threads OMP={os.environ.get('OMP_NUM_THREADS')} OPENBLAS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
          f"M={M}, B={B}, {args.steps} warm steps each")
    print("| data | K | link | pass | step ms | flops | DGEMM GFLOP/s | bound ms | ratio |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|")
    for name, K, D in SHAPES:
        rate = gemm_rate(K, M, B)
        for link in ("softmax", "robustmax"):
            for one_pass in (False, True):
                flops = (6 if one_pass else 8) * K * M * M * B + 4.0 / 3.0 * K * M ** 3 + 6.0 * M ** 3
                t = step_time(K, D, M, B, link, one_pass, args.steps)
                print(f"| {name} | {K} | {link} | {'one' if one_pass else 'two'} | {1e3 * t:.1f} | {flops:.2e} | "
                      f"{rate / 1e9:.0f} | {1e3 * flops / rate:.1f} | {t * rate / flops:.2f} |", flush=True)


if __name__ == "__main__":
    main()
