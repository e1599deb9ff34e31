"""Speed target for FITC-EP: seconds per sweep on twonorm at N = 100,000, M = 100.

The issue's item: sequential and parallel sweeps against N M^2 flops at the machine's measured
matmul rate, and against GPy's sparse EP classifier (``GPy.models.SparseGPClassification``) in
the same session; the goal is a sequential sweep within 3x of that bound and faster than GPy.

gpdsl's sequential sweep (``ep_sweeps.fitc_sequential_sweep``, called by
``FITCPrior.sequential_sweep``) keeps M = Sigma_u^-1 (``prior.Minv``) and gamma side by side and
delays their updates over blocks of b = ``ep_sweeps.FITC_BLOCK`` sites: per block four dgemm
calls (W = P_b [M | gamma], G = W P_b^T, U = C W, [M | gamma] -= U^T [alpha U | -beta]) and the b
sites in order on the b x b matrix G; about 4 N M^2 + 4 N b M flops a sweep.  It gives the sites
of one-site-at-a-time sequential EP, ``ep_sweeps.fitc_sequential_sweep_rank1`` (one gemv + one
rank-1 update per site, 4 N M^2 flops at level-2 speed), which is timed next to it.  Every timed
sweep starts from the same warm sites (``--warmup`` sweeps from zero, restored by an untimed
``prior.refresh``).  Printed, median of ``--repeats`` (minimum in brackets): (a) the sequential
sweep, the one-site-at-a-time kernel on the same state (with the largest site difference) and
the O(N M^2) refresh run after every sweep; (b) a parallel sweep; (c) a QP sweep (sigma* direct
and from the lookup table); the flop ratios; (d) full ``model.fit(X, y, optimize=False)`` runs;
(e) the blocked sweep's pieces replayed over all N / b blocks; (f) the sweep at other block
sizes; then GPy at the small ``--gpy-n`` (its sequential sweep is O(N^2 M^2)).
benchmarks/README.md describes each row.

    python benchmarks/bench_fitc_ep.py --threads 1        # N=100000 M=100 D=20, GPy at N=1000,2000
    python benchmarks/bench_fitc_ep.py --n 20000 --gpy-n 1000 --repeats 2
"""
import argparse
import math
import os
import statistics
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numba  # noqa: E402
from numba import njit  # noqa: E402

import gpdsl as gd  # noqa: E402
from gpdsl._jit import ep_sweeps  # noqa: E402
from gpdsl._jit.likelihoods import bernoulli  # noqa: E402
from gpdsl.methods import expectation_propagation as epm  # noqa: E402

NO_TABLE = epm._NO_TABLE


def timed(fn, repeats, setup=None):
    """Seconds of ``fn()`` over ``repeats`` calls, each after an untimed ``setup()``."""
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


med = statistics.median


def fmt(times):
    return f"{med(times):9.4f} s  ({min(times):.4f})"


def load():
    return "%.2f %.2f %.2f" % os.getloadavg()


def make_model(d, Z, schedule="sequential"):
    return gd.Model(kernel=gd.kernels.SquaredExponential(math.sqrt(d), 1.0),
                    likelihood=gd.likelihoods.Bernoulli("probit"),
                    inducing=gd.inducing.Fixed(Z), inference=gd.inference.EP(schedule=schedule))


class Problem:
    """twonorm data, the FITC prior and warm sites; ``restore()`` puts the warm state back."""

    def __init__(self, n, m, d, warmup):
        self.X, self.y = gd.datasets.twonorm(n, dim=d, seed=0)
        self.Z = gd.inducing.Subsample(m, seed=0).initial_Z(self.X, self.y)
        self.d = d
        model = make_model(d, self.Z)
        values = model.parameter_table(self.X, self.Z).values()
        # The probit's jitted projection and its parameter tuple, with the kernels' table arguments.
        kernel, likelihood = model.bind(values)
        site = likelihood.site_model()
        self.kind, self.bias = site.functions.project, site.params
        self.prior = epm.FITCPrior(kernel, self.X, self.Z, 1e-6, None)
        self.tau, self.nu = np.zeros(n), np.zeros(n)
        self.prior.refresh(self.tau, self.nu)
        self.warm_changes = []
        for _ in range(warmup):
            self.warm_changes.append(self.sequential()[0])
            self.prior.refresh(self.tau, self.nu)
        self.tau0, self.nu0 = self.tau.copy(), self.nu.copy()

    def restore(self):
        self.tau[:], self.nu[:] = self.tau0, self.nu0
        self.prior.refresh(self.tau, self.nu)

    def sequential(self, quantile=False, table=NO_TABLE):
        return self.prior.sequential_sweep(self.tau, self.nu, self.y, self.bias, self.kind, quantile, 0.0, *table)

    def sequential_rank1(self):
        """The one-site-at-a-time kernel on the prior's state (no stop expected on this problem)."""
        p = self.prior
        _, _, stop = ep_sweeps.fitc_sequential_sweep_rank1(p.d, p.P, p.Minv, p.nu_vec, p.gamma, self.tau, self.nu,
                                                           self.y, self.bias, self.kind, False, 0.0, *NO_TABLE, 0)
        assert stop < 0, "the one-site-at-a-time sweep stopped (definiteness); not timed"

    def blocked(self, block):
        """The library's blocked kernel with ``block`` sites per block (FITC_BLOCK in the library)."""
        p = self.prior
        ep_sweeps.fitc_sequential_sweep(p.d, p.P, p.Minv, p.nu_vec, p.gamma, self.tau, self.nu, self.y, self.bias,
                                        self.kind, False, 0.0, *NO_TABLE, 0, block)

    def site_difference(self, fn):
        """Largest |difference| of the sites after ``fn()`` from those after the library's sweep."""
        self.restore()
        self.sequential()
        tau, nu = self.tau.copy(), self.nu.copy()
        self.restore()
        fn()
        return max(np.max(np.abs(self.tau - tau)), np.max(np.abs(self.nu - nu)))

    def parallel(self):
        var, mean = self.prior.marginals()
        ep_sweeps.parallel_site_updates(var, mean, self.tau, self.nu, self.y, self.bias, self.kind, False, 0.0,
                                        *NO_TABLE)
        self.prior.refresh(self.tau, self.nu)

    def time_sweeps(self, repeats):
        """Seconds of a sequential sweep, the refresh after it, and a parallel sweep (+ refresh)."""
        seq = timed(self.sequential, repeats, self.restore)
        ref = timed(lambda: self.prior.refresh(self.tau, self.nu), repeats)
        return seq, ref, timed(self.parallel, repeats, self.restore)

    def fit(self, schedule):
        """Full EP fit at fixed hyperparameters: (seconds, sweeps, converged, log evidence), after an
        untimed fit of the same model on 50 rows, so that Numba compilation is not timed."""
        make_model(self.d, self.Z[:5], schedule).fit(self.X[:50], self.y[:50], optimize=False)
        model = make_model(self.d, self.Z, schedule)
        t = time.perf_counter()
        post = model.fit(self.X, self.y, optimize=False)
        dt = time.perf_counter() - t
        return dt, post.total_sweeps, post.sites.converged, post.log_evidence


def matmul_rate(n, m, repeats):
    """GFLOP/s of NumPy's (M, N) @ (N, M) and (N, M) @ (M, M) products (2 N M^2 flops each)."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((n, m)), rng.standard_normal((m, m))
    out = {}
    for name, fn in (("(M,N)@(N,M)", lambda: A.T @ A), ("(N,M)@(M,M)", lambda: A @ B)):
        fn()
        times = timed(fn, max(repeats, 3))
        out[name] = (2.0 * n * m * m / med(times) / 1e9, times)
    return out


# (e) the blocked sweep's pieces, replayed over all N / b blocks of the real P and M
@njit
def _loop_gemm(which, P, ME, b):
    """One of the sweep's four dgemm calls per block (ep_sweeps._gemm, as in fitc_sequential_sweep)."""
    n, m = P.shape
    ch, iw, fw = ep_sweeps._blas_workspace()
    WE, UE, UaE = np.ones((b, m + 1)), np.ones((b, m + 1)), np.full((b, m + 1), 1e-12)
    G, C = np.empty((b, b)), np.tril(np.ones((b, b)))
    ME = ME.copy()
    for i0 in range(0, n - b + 1, b):
        Pb = P[i0:i0 + b]
        if which == 0:
            ep_sweeps._gemm(False, False, b, m + 1, m, 1.0, Pb, ME, 0.0, WE, ch, iw, fw)
        elif which == 1:
            ep_sweeps._gemm(False, True, b, b, m, 1.0, WE, Pb, 0.0, G, ch, iw, fw)
        elif which == 2:
            ep_sweeps._gemm(False, False, b, m + 1, b, 1.0, C, WE, 0.0, UE, ch, iw, fw)
        else:
            ep_sweeps._gemm(True, False, m, m + 1, b, -1.0, UE, UaE, 1.0, ME, ch, iw, fw)
    return ME[0, 0] + G[0, 0]


@njit(fastmath=True)
def _loop_project(project, y, mu, var, bias, qp, table, grid):
    acc = 0.0
    for i in range(y.shape[0]):
        _, mean, v = project(y[i], mu[i], var[i], bias, qp, table, grid)
        acc += mean + v
    return acc


def breakdown(pb, sweep_s, block):
    prior = pb.prior
    pb.restore()
    n, m = prior.P.shape
    ME = np.ascontiguousarray(np.hstack([prior.Minv, prior.gamma[:, None]]))
    var, mean = prior.marginals()
    n_qp = max(n // 20, 1)
    table = bernoulli.probit_lookup_table()
    y, kind, bias = pb.y, pb.kind, pb.bias
    b = block
    rows = [("W = P_b [M | gamma]", 2 * m * (m + 1), n, lambda: _loop_gemm(0, prior.P, ME, b)),
            ("G = W P_b^T", 2 * b * m, n, lambda: _loop_gemm(1, prior.P, ME, b)),
            ("U = C W", 2 * b * (m + 1), n, lambda: _loop_gemm(2, prior.P, ME, b)),
            ("[M | gamma] -= U^T [aU | -b]", 2 * m * (m + 1), n, lambda: _loop_gemm(3, prior.P, ME, b)),
            ("project, EP (probit moments)", 0, n,
             lambda: _loop_project(kind, y, mean, var, bias, False, *NO_TABLE)),
            ("project, QP (sigma* direct)", 0, n_qp,
             lambda: _loop_project(kind, y[:n_qp], mean[:n_qp], var[:n_qp], bias, True, *NO_TABLE)),
            ("project, QP (lookup table)", 0, n_qp,
             lambda: _loop_project(kind, y[:n_qp], mean[:n_qp], var[:n_qp], bias, True, *table))]
    print(f"\n(e) the blocked sweep's pieces (b = {b}), each dgemm replayed over the N / b = {n // b} blocks of "
          f"the real P and [M | gamma] in a Numba loop, the projections over the N = {n} marginals (QP over {n_qp}):")
    print(f"    {'piece':<32s} {'s per N sites':>13s} {'us/site':>8s} {'GFLOP/s':>8s}")
    us = {}
    for name, flops, count, fn in rows:
        fn()                                           # compile
        dt = min(timed(fn, 2))
        us[name] = dt / count * 1e6
        rate = f"{flops / (us[name] * 1e3):8.2f}" if flops else ""
        print(f"    {name:<32s} {dt * n / count:13.4f} {us[name]:8.3f} {rate}")
    est = sum(us[name] for name, flops, _, _ in rows if flops)
    print(f"    the four dgemm = {est:.3f} us/site = {est * n * 1e-6:.4f} s per sweep; the rest of the measured "
          f"sweep ({sweep_s:.4f} s) is the b sites in order per block (projection, the O(b^2) in-block "
          f"corrections, P, d, nu updates): {(sweep_s - est * n * 1e-6) / n * 1e6:.3f} us/site")


# (f) the library's blocked sweep at other block sizes, from the same warm state
def block_scan(pb, blocks, repeats, old_s, bound):
    print(f"\n(f) fitc_sequential_sweep with other block sizes b (the library uses FITC_BLOCK = "
          f"{ep_sweeps.FITC_BLOCK}), from the same warm state; max |difference| of its new sites from the library "
          "sweep's:")
    for b in blocks:
        pb.restore()
        pb.blocked(b)                                  # compile (first call only)
        times = timed(lambda: pb.blocked(b), repeats, pb.restore)
        err = pb.site_difference(lambda: pb.blocked(b))
        print(f"    b = {b:<4d} {fmt(times)}   {med(times) / bound:5.1f} x N M^2 bound   "
              f"{old_s / med(times):4.2f} x faster than one site at a time   max|d site| {err:.1e}"
              + ("" if err < 1e-10 else "   DISAGREES (> 1e-10)"))


# GPy
def gpy_section(n, m, d, repeats):
    print(f"\n--- GPy.models.SparseGPClassification (EPDTC) vs gpdsl at N = {n}, M = {m} ---")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import GPy
            from GPy.inference.latent_function_inference import EPDTC
            from GPy.inference.latent_function_inference.expectation_propagation import posteriorParamsDTC
            from paramz import ObsAr
    except Exception as exc:                        # not installed, or broken on this numpy
        print(f"GPy not available: {type(exc).__name__}: {exc}")
        return
    print(f"GPy {GPy.__version__}")
    pb = Problem(n, m, d, warmup=2)
    y01 = (pb.y > 0).astype(float)[:, None]
    kern = GPy.kern.RBF(d, lengthscale=math.sqrt(d), variance=1.0)
    Kmm, Kmn = kern.K(pb.Z), kern.K(pb.Z, pb.X)

    def timed_site_loops(ep):
        """Wrap ep._local_updates (GPy's site loop, one call per sweep); returns its list of seconds."""
        loops, local = [], ep._local_updates

        def wrapper(*a, **k):
            t = time.perf_counter()
            out = local(*a, **k)
            loops.append(time.perf_counter() - t)
            return out
        ep._local_updates = wrapper
        return loops

    per_sweep = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, par in (("sequential (default)", False), ("parallel_updates=True", True)):
            # One run of repeats + 1 sweeps (first dropped), each sweep's site loop plus one
            # _recompute, the refresh GPy runs after every sweep.
            np.random.seed(0)
            ep = EPDTC(max_iters=repeats + 1, epsilon=0.0, parallel_updates=par)
            loops = timed_site_loops(ep)
            _, ga, _ = ep.expectation_propagation(Kmm, Kmn, ObsAr(y01), GPy.likelihoods.Bernoulli(), None)
            rec = timed(lambda: posteriorParamsDTC._recompute(Kmm, Kmn, ga), repeats)
            per_sweep[label] = [s + med(rec) for s in loops[1:]]
            print(f"GPy EPDTC one sweep, {label:<22s} {fmt(per_sweep[label])}   (of which _recompute {fmt(rec)})")
        np.random.seed(0)
        ep = EPDTC()
        loops = timed_site_loops(ep)
        t = time.perf_counter()
        gm = GPy.models.SparseGPClassification(pb.X, y01, Z=pb.Z, kernel=kern.copy(), inference_method=ep)
        gpy_full = time.perf_counter() - t
    print(f"GPy full EP run (model construction, EPDTC defaults): {gpy_full:.3f} s, {len(loops)} sweeps, "
          f"{gpy_full / max(len(loops), 1):.3f} s/sweep, log likelihood {float(gm.log_likelihood()):.3f}")
    seq, ref, par = pb.time_sweeps(repeats)
    print(f"gpdsl one sequential sweep            {fmt(seq)}   + refresh {fmt(ref)}")
    print(f"gpdsl one parallel sweep (+ refresh)  {fmt(par)}")
    dt, sweeps, conv, F = pb.fit("sequential")
    print(f"gpdsl full fit(optimize=False), EP sequential: {dt:.3f} s, {sweeps} sweeps (converged={conv}), "
          f"{dt / max(sweeps, 1):.3f} s/sweep, log evidence {F:.3f}")
    ratio = med(per_sweep["sequential (default)"]) / (med(seq) + med(ref))
    print(f"sequential sweep (+ refresh): GPy / gpdsl = {ratio:.0f}x;  full run: GPy / gpdsl = {gpy_full / dt:.1f}x")


# --------------------------------------------------------------------------------------------
def run(args):
    n, m, d, R = args.n, args.m, args.d, args.repeats
    print(f"gpdsl {gd.__version__}, numba {numba.__version__}, numpy {np.__version__}, "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    try:
        from threadpoolctl import threadpool_info
        print("BLAS: " + "; ".join(f"{p['internal_api']} {p['version']}: {p['num_threads']} threads"
                                   for p in threadpool_info()) + f"; Numba threads: {numba.get_num_threads()}")
    except ImportError:
        print("BLAS: (threadpoolctl not installed)")
    print(f"load average (1, 5, 15 min): {load()}  (near or above the CPU count: contended timings)")

    rates = matmul_rate(n, m, R)
    rate_name = max(rates, key=lambda k: rates[k][0])
    rate = rates[rate_name][0]
    bound = n * m * m / (rate * 1e9)
    print(f"\nmatmul rate (NumPy, N={n}, M={m}; 2 N M^2 flops per product, median):")
    for k, (r, times) in rates.items():
        print(f"    {k:<14s} {r:7.1f} GFLOP/s   {fmt(times)}")
    print(f"  -> rate = {rate:.1f} GFLOP/s ({rate_name}); bound N M^2 / rate = {bound:.4f} s")

    pb = Problem(n, m, d, args.warmup)
    print(f"\nproblem: twonorm N={n}, D={d}, M={m} (subsampled Z), SE lengthscale {math.sqrt(d):.3f}, variance 1, "
          f"probit; FITCPrior jitter 1e-6; {args.warmup} warm-up sweeps (max site "
          f"change {', '.join(f'{c:.2e}' for c in pb.warm_changes)}); median of {R} (min in brackets)")
    seq, ref, par = pb.time_sweeps(R)
    old = timed(pb.sequential_rank1, R, pb.restore)
    old_err = pb.site_difference(pb.sequential_rank1)
    marg = timed(pb.prior.marginals, R)
    qp_direct = timed(lambda: pb.sequential(quantile=True), R, pb.restore)
    t = time.perf_counter()
    table = bernoulli.probit_lookup_table()
    t_table = time.perf_counter() - t
    qp_lookup = timed(lambda: pb.sequential(quantile=True, table=table), R, pb.restore)
    s, b = med(seq), ep_sweeps.FITC_BLOCK
    print(f"(a) sequential sweep (fitc_sequential_sweep, blocks of b = {b})   {fmt(seq)}   {s / n * 1e6:.2f} us/site")
    print(f"    one site at a time (fitc_sequential_sweep_rank1)  {fmt(old)}   {med(old) / n * 1e6:.2f} us/site;  "
          f"blocked {med(old) / s:.2f} x faster, max |d site| {old_err:.1e}"
          + ("" if old_err < 1e-10 else "   DISAGREES (> 1e-10)"))
    print(f"    refresh (O(N M^2), after every sweep)      {fmt(ref)}")
    print(f"(b) parallel sweep (+ refresh)                 {fmt(par)}   (of which marginals {fmt(marg)})")
    print(f"(c) QP sequential sweep, sigma* direct         {fmt(qp_direct)}")
    print(f"    QP sequential sweep, lookup table          {fmt(qp_lookup)}   (table built once: {t_table:.3f} s)")

    print(f"\nflop ratios (bound = N M^2 / {rate:.1f} GFLOP/s = {bound:.4f} s; goal: sequential <= 3):")
    flops = 2 * n * m * (m + 1) * 2 + 2 * n * b * m + 2 * n * b * (m + 1)
    print(f"    sequential sweep / bound                   {s / bound:7.1f}")
    print(f"    sequential sweep + refresh / bound         {(s + med(ref)) / bound:7.1f}")
    print(f"    parallel sweep / bound                     {med(par) / bound:7.1f}")
    print(f"    one-site-at-a-time sweep / bound           {med(old) / bound:7.1f}")
    print(f"    sequential sweep / (its flops / rate)      {s / (flops / (rate * 1e9)):7.1f}   "
          f"(its four dgemm per block: {flops / (n * m * m):.2f} N M^2 flops)")
    print(f"    sequential sweep achieves {flops / s / 1e9:.2f} GFLOP/s on those; the one-site-at-a-time sweep "
          f"{4 * n * m * m / med(old) / 1e9:.2f} GFLOP/s on its 4 N M^2")

    print("\n(d) full model.fit(X, y, optimize=False) with gd.inference.EP():")
    for schedule in ("sequential", "parallel"):
        dt, sweeps, conv, F = pb.fit(schedule)
        print(f"    {schedule:<10s} {dt:8.3f} s, {sweeps:3d} sweeps (converged={conv}), {dt / max(sweeps, 1):.3f} "
              f"s/sweep incl. cavities + pseudo-regression; log evidence {F:.3f}")

    breakdown(pb, s, b)
    block_scan(pb, [int(v) for v in args.blocks.split(",")], R, med(old), bound)
    print(f"load average after the N = {n} part: {load()}")

    for n_gpy in (int(v) for v in args.gpy_n.split(",")):
        if n_gpy > 0:
            gpy_section(n_gpy, m, d, R)
    print(f"\nload average at the end: {load()}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--m", type=int, default=100)
    p.add_argument("--d", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2, help="sequential sweeps before timing")
    p.add_argument("--blocks", default="4,8,12,24,32,64", help="other block sizes for (f)")
    p.add_argument("--gpy-n", default="1000,2000", help="N list for the GPy comparison; 0 skips it")
    p.add_argument("--threads", type=int, default=None, help="limit BLAS and Numba threads (needs threadpoolctl)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    if args.threads:
        from threadpoolctl import threadpool_limits
        numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
        with threadpool_limits(limits=args.threads):
            run(args)
    else:
        run(args)
    print(f"total script time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
