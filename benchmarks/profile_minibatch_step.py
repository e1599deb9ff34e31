"""The binary minibatch step against its flop bound: process CPU per step of gpdsl's SVGP step on
twonorm (issue 29), beside the floating-point work the step cannot avoid, timed at this machine's
own DGEMM rate, and where the step's time goes.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 \\
        PYTHONPATH=. python3 benchmarks/profile_minibatch_step.py [--link probit] [--breakdown]

Problem: ``gd.datasets.twonorm(--n, seed=0)`` (D = 20), SE kernel at lengthscale sqrt(20),
variance 1, ``Bernoulli(--link)`` with its bias fixed at 0, Z the ``KMeans(--m, seed=0)``
centres of 10,000 rows (``bench_large_n.kmeans_start``), batches of ``--batch`` rows.

Timed, each as the median over ``--steps`` steps after ``--warm`` warm-up steps (process CPU):

* ``update, one pass`` / ``update, two passes``: :func:`gpdsl.methods.svgp.minibatch_update` alone
  (``one_pass`` True, SVGP's default, or False), q carried, a fresh batch each step;
* ``fit step``: one step of ``Model.fit`` with ``SVGP(batch_size=B)`` at its defaults (the update
  plus binding the kernel, priors, the chain rule and Adam), read between successive calls of
  fit's callback.

What the step must do, in flops (B rows, M inducing points, D inputs):

* K_uf (its distances) and its adjoint for Z and the lengthscale: 2 B M D each;
* A = L^-1 K_uf, a triangular solve: M^2 B;
* U = R^T A (triangular, M^2 B) for the marginal variances, P = A W A^T (symmetric, M^2 B);
* the K_uf adjoint L^-T (m g^T - 2 (I - S) A D) (two triangular products, 2 M^2 B) and its
  reduction against A for the K_uu adjoint, symmetric (A D A^T, M^2 B);
* two passes only: U again at the new q (M^2 B);
* O(M^3): the natural step's Cholesky factorisation and triangular inverse (2/3 M^3), K_uu's
  Cholesky factorisation and inverse (2/3 M^3) and the K_uu adjoint's two triangular products
  (2 M^3); K_uu and its adjoint for Z (4 M^2 D).

    flops = (6 or 7) M^2 B + 4 B M D + 10/3 M^3 + 4 M^2 D

The bound is flops / (the DGEMM rate measured here on the step's (M, M) x (M, B) product).  Not in
it: the transcendental work, B M exponentials of K_uf and the B Q log-densities of the Q-node
Gauss-Hermite expectations of each pass.  The script times that work alone too (``elementwise
floor``: NumPy's exp of an (M, B) block and the likelihood's expectations of B rows at latent
sd 0.4, the fit's median, per pass), which no arrangement of the products removes.
A second table times the one-pass step's own steps alone (K_uf, its triangular and symmetric
products, the adjoint's product, the kernel VJPs, the expectations, the O(M^3) factorisations and
products), each warm at the step's shapes, and sums them, the BLAS and LAPACK calls apart from
the rest: the step with nothing between its steps and every product at the rate OpenBLAS and
LAPACK reach on its own shape.  ``--breakdown`` adds a
cProfile table of the update's own time (cProfile's overhead inflates it; read the shares, not the
totals).
"""
import argparse
import cProfile
import os
import pstats
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpdsl as gd  # noqa: E402
from bench_large_n import kmeans_start  # noqa: E402
from profile_passes import BLAS, OTHER, cpu_median, print_steps, whitened_block  # noqa: E402
from gpdsl.methods import svgp, svgp_classes  # noqa: E402


def gemm_rate(M, B, repeats=200):
    """Flop/s of one (M, M) x (M, B) DGEMM, the step's shape, warm (median of single products)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((M, M)), rng.standard_normal((M, B))
    out = np.empty((M, B))
    times = []
    for _ in range(repeats):
        t = time.process_time()
        np.matmul(a, b, out=out)
        times.append(time.process_time() - t)
    # process_time's resolution is ~1 us; one product is ~100 us, and the median of many is stable.
    return 2.0 * M * M * B / float(np.median(times))


def step_flops(M, B, D, passes):
    return (5.0 + passes) * M * M * B + 4.0 * B * M * D + 10.0 / 3.0 * M ** 3 + 4.0 * M * M * D


def elementwise_floor(likelihood, y, M, B, passes, repeats=200):
    """Process CPU of a step's transcendental work alone: exp of an (M, B) block (K_uf, once a step)
    and ``passes`` times the likelihood's expectations of B rows at latent sd 0.4 (median)."""
    rng = np.random.default_rng(0)
    block = -rng.uniform(0.0, 20.0, size=(M, B))
    mean, var = rng.standard_normal(B) * 3.0, np.full(B, 0.4 ** 2)
    likelihood = likelihood.bind()
    rows = y[:B]
    times = []
    for _ in range(repeats):
        t = time.process_time()
        np.exp(block)
        for _ in range(passes):
            likelihood.variational_expectations(rows, mean, var)
        times.append(time.process_time() - t)
    return float(np.median(times))


def minibatch_steps_alone(X, y, Z, kernel, likelihood, B, scale, repeats=200):
    """The one-pass step's own steps (``svgp.minibatch_update`` with ``one_pass=True``, one latent
    function), each timed alone at the step's shapes (warm, its memory reused; median of
    ``repeats``): [(name, kind, seconds)], ``kind`` as in :func:`profile_passes.vfe_steps_alone`.
    Their sum is the step with nothing between its steps and every product at the rate OpenBLAS
    and LAPACK reach on its own shape, where the flop bound prices all of them at the (M, M) x
    (M, B) DGEMM rate; the stochastic loop (batch draw, Adam) is left out."""
    kernel, likelihood = kernel.bind(), likelihood.bind()
    M = Z.shape[0]
    Xb, yb = X[:B], y[:B]
    Kuu, L, Li, K, A = whitened_block(kernel, Z, Xb)
    R = np.linalg.cholesky(np.eye(M) * 0.5 + 0.01 * np.ones((M, M)))
    rng = np.random.default_rng(0)
    m, g, d = 0.1 * rng.standard_normal(M), rng.standard_normal(B), -rng.uniform(0.1, 0.3, B)
    complement = np.eye(M) - R @ R.T
    lifted = gd.linalg.lower_product(Li, np.column_stack([m, complement]), transpose=True)
    operand = svgp._on_top(g, A, -2.0 * d)
    U = gd.linalg.lower_product(R, A, transpose=True)
    P = gd.linalg.weighted_gram(A, d)
    G, Phi = lifted @ operand, rng.standard_normal((M, M))
    Lam_hat = svgp_classes.prior_plus(-2.0 * P[None], scale)
    eta = rng.standard_normal((1, M))
    mean, var = rng.standard_normal(B) * 3.0, np.full(B, 0.4 ** 2)
    steps = [
        ("K_uu and its Cholesky factor", BLAS, lambda: gd.linalg.cholesky(kernel.gram(Z, Z), None, what="K_uu")),
        ("L^-1 (DTRTRI)", BLAS, lambda: gd.linalg.inverse_lower(L)),
        ("I - S, and [mu, E] = L^-T [m, I - S] (M^3)", BLAS,
         lambda: gd.linalg.lower_product(Li, np.column_stack([m, np.eye(M) - R @ R.T]), transpose=True)),
        ("K_uf (distances, exp)", OTHER, lambda: kernel.gram(Z, Xb)),
        ("A = L^-1 K_uf (DTRMM)", BLAS, lambda: gd.linalg.lower_product(Li, K)),
        ("K_nn - |a_n|^2", OTHER, lambda: kernel.diag(Xb) - np.einsum("mn,mn->n", A, A)),
        ("U = R^T A (DTRMM)", BLAS, lambda: gd.linalg.lower_product(R, A, transpose=True)),
        ("mean, var (a DGEMV, |u_n|^2)", OTHER, lambda: (A.T @ m, np.einsum("mn,mn->n", U, U))),
        ("expectations of B rows at sd 0.4", OTHER, lambda: likelihood.variational_expectations(yb, mean, var)),
        ("P = A D A^T (DSYRK, with its scaled copy)", BLAS, lambda: gd.linalg.weighted_gram(A, d)),
        ("A r, A g (two DGEMVs)", BLAS, lambda: (A @ g, A @ (g + d))),
        ("the K_uf adjoint's operand [g^T; -2 A D]", OTHER, lambda: svgp._on_top(g, A, -2.0 * d)),
        ("K_uf adjoint, (M, M+1) x (M+1, B) (DGEMM)", BLAS, lambda: lifted @ operand),
        ("(I - S) P (M^3 DGEMM)", BLAS, lambda: complement @ P),
        ("kernel VJP of K_uf", OTHER, lambda: kernel.vjp(Z, Xb, G, K=K)),
        ("kernel VJP of K_nn", OTHER, lambda: kernel.diag_vjp(Xb, d)),
        ("K_uu adjoint L^-T Phi L^-1 (two M^3 DGEMMs)", BLAS, lambda: Li.T @ Phi @ Li),
        ("kernel VJP of K_uu", OTHER, lambda: kernel.vjp(Z, Z, Phi, K=Kuu)),
        ("natural step: Cholesky factor, R, m (svgp_classes.from_natural)", BLAS,
         lambda: svgp_classes.from_natural(Lam_hat, eta)),
    ]
    return [(name, kind, cpu_median(fn, repeats)) for name, kind, fn in steps]


def parts(link, n, M):
    X, y = gd.datasets.twonorm(n, seed=0)
    Z = kmeans_start(X, M, 10_000)
    kernel = gd.kernels.SquaredExponential(float(np.sqrt(X.shape[1])), 1.0)
    likelihood = gd.likelihoods.Bernoulli(link, bias=gd.Fixed(0.0))
    return X, y, Z, kernel, likelihood


def update_times(X, y, Z, kernel, likelihood, B, warm, steps, profile=None, one_pass=True):
    """Process CPU of each warm minibatch_update, q carried (the fit's natural step 0.1)."""
    kernel, likelihood = kernel.bind(), likelihood.bind()
    n, M = X.shape[0], Z.shape[0]
    rng = np.random.default_rng(0)
    state = svgp.CarriedQ.of(svgp.initial_values(M), M, 1)
    yc = likelihood.prepare_targets(y) if hasattr(likelihood, "prepare_targets") else y
    times = []
    for step in range(warm + steps):
        rows = rng.choice(n, size=B, replace=False)
        Xb, yb = X[rows], yc[rows]
        if profile is not None and step == warm:
            profile.enable()
        t = time.process_time()
        state, *_ = svgp.minibatch_update(kernel, likelihood, Xb, yb, Z, state, scale=n / B, rho=0.1,
                                          one_pass=one_pass)
        times.append(time.process_time() - t)
    if profile is not None:
        profile.disable()
    return np.array(times[warm:])


def fit_step_times(X, y, Z, kernel, likelihood, B, warm, steps):
    """Process CPU between successive callbacks of a fixed-step SVGP fit (the rule cannot fire)."""
    marks = []
    model = gd.Model(kernel, likelihood, gd.inducing.Fixed(Z),
                     gd.inference.SVGP(batch_size=B, stop_window=10 * ((warm + steps) // 10 + 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        model.fit(X, y, max_iter=warm + steps, callback=lambda _: marks.append(time.process_time()))
    return np.diff(marks)[warm - 1:]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--m", type=int, default=128)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--link", default="probit")
    p.add_argument("--warm", type=int, default=20)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--breakdown", action="store_true", help="cProfile the updates (top functions by own time)")
    args = p.parse_args()
    X, y, Z, kernel, likelihood = parts(args.link, args.n, args.m)
    B, M, D = args.batch, args.m, X.shape[1]
    rate = gemm_rate(M, B)
    print(f"threads OMP={os.environ.get('OMP_NUM_THREADS')} OPENBLAS={os.environ.get('OPENBLAS_NUM_THREADS')} "
          f"NUMBA={os.environ.get('NUMBA_NUM_THREADS')}; twonorm N={args.n}, D={D}, M={M}, B={B}, {args.link}; "
          f"medians of {args.steps} steps after {args.warm}; load average {'%.2f %.2f %.2f' % os.getloadavg()}")
    print(f"DGEMM ({M}x{M})x({M}x{B}) {rate / 1e9:.1f} GFLOP/s")
    y_prepared = likelihood.bind().prepare_targets(y) if hasattr(likelihood, "prepare_targets") else y
    print("| what | step ms (median) | p10 ms | p90 ms | flop bound ms | ratio to bound | elementwise floor ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, passes, times in (
            ("update, one pass", 1, update_times(X, y, Z, kernel, likelihood, B, args.warm, args.steps)),
            ("update, two passes", 2, update_times(X, y, Z, kernel, likelihood, B, args.warm, args.steps,
                                                   one_pass=False)),
            ("fit step (one pass)", 1, fit_step_times(X, y, Z, kernel, likelihood, B, args.warm, args.steps))):
        med, bound = float(np.median(times)), step_flops(M, B, D, passes) / rate
        floor = elementwise_floor(likelihood, y_prepared, M, B, passes)
        print(f"| {name} | {1e3 * med:.2f} | {1e3 * np.percentile(times, 10):.2f} | "
              f"{1e3 * np.percentile(times, 90):.2f} | {1e3 * bound:.2f} | {med / bound:.2f} | {1e3 * floor:.2f} |",
              flush=True)
    print_steps("The one-pass step's steps, each alone (median of 200):",
                minibatch_steps_alone(X, y_prepared, Z, kernel, likelihood, B, args.n / B),
                step_flops(M, B, D, 1) / rate)
    if args.breakdown:
        profile = cProfile.Profile()
        update_times(X, y, Z, kernel, likelihood, B, args.warm, args.steps, profile)
        pstats.Stats(profile).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
