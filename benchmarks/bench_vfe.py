"""Speed target for the collapsed VFE bound: objective + gradient at N = 100,000, M = 256, D = 8.

Reports seconds per evaluation (median of ``--repeats`` after one warm-up call that compiles)
for

(a) gpdsl: ``Model.evaluate(values, X, y, Z, need_grad=True)`` for a VFE model whose inducing
    inputs are ``gd.inducing.Optimized`` (so dF/dZ is computed too), and the value alone
    (``need_grad=False``);
(b) a plain, unchunked NumPy implementation of the same bound and its gradient with respect to
    the lengthscales, the signal variance, the noise variance and Z (GPflow-SGPR style with
    ``A = L^-1 K_uf / sigma``; derived independently of gpdsl, checked against it to 1e-6
    relative on a small problem before timing);
(c) the matrix products no implementation can avoid: K_uf (the reference ``se_ard``: BLAS cross
    term + exp; and gpdsl's own ``kernel.gram(Z, X)`` on the kernel bound to its values), ``A @ A.T``
    ((M,N)@(N,M), a syrk) and the gemm ``G_P @ K_uf`` ((M,M)@(M,N)) that the gradient pass needs.

The goal stated in the issue: gpdsl within 2x of (K_uf + A A^T).  A breakdown of where gpdsl's
time goes follows: one evaluation with the kernel's ``gram`` / ``vjp`` / ``_scaled_sqdist`` /
``_profile`` methods and the Numba ``slope_adjoint`` wrapped in timers, then a replay of the
per-chunk NumPy/BLAS work of ``gpdsl/methods/collapsed.py`` and ``Stationary.vjp`` with timers.

Usage::

    python benchmarks/bench_vfe.py                      # N=100000 M=256 D=8, 5 repeats
    python benchmarks/bench_vfe.py --n 20000 --repeats 3
    python benchmarks/bench_vfe.py --profile            # + cProfile of one gpdsl evaluation
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import numpy as np
from scipy import linalg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numba  # noqa: E402

import gpdsl as gd  # noqa: E402
from gpdsl._jit import covariance as _cov  # noqa: E402
from gpdsl.components import bind  # noqa: E402

_LOG_2PI = np.log(2.0 * np.pi)


# --------------------------------------------------------------------------------------------
# Plain NumPy reference
# --------------------------------------------------------------------------------------------
def se_ard(X1, X2, ls, var):
    """var * exp(-r2 / 2) with r2 from the BLAS cross term |a|^2 + |b|^2 - 2 a.b."""
    A = X1 / ls
    B = X2 / ls
    r2 = A @ B.T
    r2 *= -2.0
    r2 += np.einsum("ij,ij->i", A, A)[:, None]
    r2 += np.einsum("ij,ij->i", B, B)[None, :]
    np.maximum(r2, 0.0, out=r2)
    r2 *= -0.5
    np.exp(r2, out=r2)
    r2 *= var
    return r2


def _se_contract(W, Z, X, ls):
    """For W = G o K(Z, X):  sum_ij W_ij (z_id - x_jd)^2  and  sum_j W_ij (z_id - x_jd)."""
    rw, cw = W.sum(1), W.sum(0)
    WX = W @ X                                          # (M, D), the only O(MND) product
    sq = rw @ (Z * Z) - 2.0 * np.einsum("id,id->d", Z, WX) + cw @ (X * X)
    lin = rw[:, None] * Z - WX
    return sq, lin


def numpy_vfe(X, y, Z, ls, var, noise, jitter=0.0):
    """Titsias' VFE bound and its gradient, written directly (no chunking, no gpdsl code).

    F = -N/2 log 2pi - 1/2 log|B| - N/2 log s2 - 1/2 y'y/s2 + 1/2 c'c - N var/(2 s2) + 1/2 tr(AA')
    with Kuu + jitter*mean(diag Kuu) I = L L', A = L^-1 Kuf / s, B = I + A A' = LB LB',
    c = LB^-1 A y / s.  Returns (F, dF/dls (D,), dF/dvar, dF/dnoise, dF/dZ (M, D)).
    """
    n, m = X.shape[0], Z.shape[0]
    sigma = np.sqrt(noise)
    Kuu = se_ard(Z, Z, ls, var)
    Kuu_j = Kuu + jitter * np.mean(np.diag(Kuu)) * np.eye(m)
    Kuf = se_ard(Z, X, ls, var)
    L = linalg.cholesky(Kuu_j, lower=True)
    A = linalg.solve_triangular(L, Kuf, lower=True)
    A /= sigma
    AAT = A @ A.T
    B = np.eye(m) + AAT
    LB = linalg.cholesky(B, lower=True)
    yt = y / sigma
    v = A @ yt
    c = linalg.solve_triangular(LB, v, lower=True)
    F = (-0.5 * n * _LOG_2PI - np.sum(np.log(np.diag(LB))) - 0.5 * n * np.log(noise)
         - 0.5 * yt @ yt + 0.5 * c @ c - 0.5 * n * var / noise + 0.5 * np.trace(AAT))

    # Reverse mode.  dF/dA = A - B^-1 A + s yt' - s (A's)',  s = B^-1 v.
    s = linalg.cho_solve((LB, True), v)
    G_A = A - linalg.cho_solve((LB, True), A)
    G_A += np.outer(s, yt)
    G_A -= np.outer(s, s @ A)
    # F depends on A only through A'A (rotation invariant), so S = G_A A' is symmetric and the
    # adjoint of Kuu through L is -1/2 L^-T S L^-1.  S from M x M quantities only:
    BiAAT = linalg.cho_solve((LB, True), AAT)
    S = AAT - BiAAT + np.outer(s, v) - np.outer(s, AAT @ s)
    S = 0.5 * (S + S.T)
    Li = linalg.solve_triangular(L, np.eye(m), lower=True)
    G_Kuu = -0.5 * Li.T @ S @ Li
    G_Kuu = 0.5 * (G_Kuu + G_Kuu.T)
    G_Kuf = linalg.solve_triangular(L, G_A, lower=True, trans="T")
    G_Kuf /= sigma

    # Noise: explicit terms, A = L^-1 Kuf / s and yt = y / s.
    dF_dsigma = (-np.trace(S) / sigma - (s @ v) / sigma - n / sigma
                 + (y @ y) / sigma ** 3 + n * var / sigma ** 3)
    d_noise = dF_dsigma / (2.0 * sigma)

    # SE-ARD contractions: dK/dls_d = K (z_d - x_d)^2 / ls_d^3, dK/dz_d = -K (z_d - x_d) / ls_d^2.
    W = G_Kuf * Kuf
    sq, lin = _se_contract(W, Z, X, ls)
    Wu = G_Kuu * Kuu
    sq_u, lin_u = _se_contract(Wu, Z, Z, ls)
    d_ls = (sq + sq_u) / ls ** 3
    d_Z = -(lin + 2.0 * lin_u) / ls ** 2
    # Every entry of K (and the jitter, a multiple of mean diag K_uu) is proportional to var.
    d_var = (W.sum() + np.sum(G_Kuu * Kuu_j)) / var - 0.5 * n / noise
    return float(F), d_ls, float(d_var), float(d_noise), d_Z


# --------------------------------------------------------------------------------------------
# Problem set-up
# --------------------------------------------------------------------------------------------
def make_problem(n, m, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.sin(X.sum(1)) + 0.1 * rng.standard_normal(n)
    Z = X[:m].copy()
    ls = np.full(d, np.sqrt(d))          # lengthscale ~ sqrt(D): a realistic, non-degenerate K
    model = gd.Model(kernel=gd.kernels.SquaredExponential(ls, 1.3),
                     likelihood=gd.likelihoods.Gaussian(0.05),
                     inducing=gd.inducing.Optimized(Z), inference=gd.inference.VFE())
    values = model.parameter_table(X, Z).values()
    values.pop("inducing.Z")
    return model, values, X, y, Z


def gpdsl_eval(model, values, X, y, Z):
    return model.evaluate(values, X, y, Z, need_grad=True)


def numpy_eval(values, X, y, Z, jitter):
    return numpy_vfe(X, y, Z, np.asarray(values["kernel.lengthscale"], float),
                     float(values["kernel.variance"]), float(values["likelihood.variance"]), jitter)


def _rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def check_agreement(n=2000, m=50, d=8, tol=1e-6):
    model, values, X, y, Z = make_problem(n, m, d, seed=1)
    # perturb away from the symmetric starting point so every gradient entry is distinct
    rng = np.random.default_rng(2)
    values["kernel.lengthscale"] = values["kernel.lengthscale"] * np.exp(0.3 * rng.standard_normal(d))
    Z = Z + 0.1 * rng.standard_normal(Z.shape)
    ev = gpdsl_eval(model, values, X, y, Z)
    F, d_ls, d_var, d_noise, d_Z = numpy_eval(values, X, y, Z, ev.jitter)
    errs = {
        "F": _rel(F, ev.log_evidence),
        "d lengthscale": _rel(d_ls, ev.grads["kernel.lengthscale"]),
        "d variance": _rel(d_var, ev.grads["kernel.variance"]),
        "d noise": _rel(d_noise, ev.grads["likelihood.variance"]),
        "d Z": _rel(d_Z, ev.dZ),
    }
    print(f"agreement check (N={n}, M={m}, D={d}, jitter={ev.jitter:g}): max relative difference "
          "numpy vs gpdsl")
    for k, e in errs.items():
        print(f"    {k:<14s} {e:.2e}")
    bad = {k: e for k, e in errs.items() if not e <= tol}
    assert not bad, f"NumPy reference and gpdsl disagree beyond {tol:g}: {bad}"
    print(f"    all within {tol:g}")


# --------------------------------------------------------------------------------------------
# Timing helpers
# --------------------------------------------------------------------------------------------
def median_time(fn, repeats, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times)


class _Timers:
    """Wrap functions (module attributes) or methods (on the class that defines them) in wall-clock
    timers while the context is active.  A wrapped call made inside another wrapped call is
    recorded under ``"outer/inner"`` too, so nested pieces can be told apart (``_scaled_sqdist``
    inside ``gram`` versus inside ``vjp``)."""

    def __init__(self):
        self.seconds, self.calls = {}, {}
        self._stack, self._undo = [], []

    def _record(self, key, dt):
        self.seconds[key] = self.seconds.get(key, 0.0) + dt
        self.calls[key] = self.calls.get(key, 0) + 1

    def _wrap(self, name, fn):
        timers = self

        def wrapper(*args, **kwargs):
            outer = timers._stack[-1] if timers._stack else None
            timers._stack.append(name)
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t
                timers._stack.pop()
                timers._record(name, dt)
                if outer is not None:
                    timers._record(f"{outer}/{name}", dt)
        return wrapper

    def function(self, module, attr, name=None):
        fn = getattr(module, attr)
        setattr(module, attr, self._wrap(name or attr, fn))
        self._undo.append(lambda: setattr(module, attr, fn))
        return self

    def method(self, cls, attr, name=None):
        owner = next(c for c in cls.__mro__ if attr in vars(c))
        fn = vars(owner)[attr]
        setattr(owner, attr, self._wrap(name or attr, fn))
        self._undo.append(lambda: setattr(owner, attr, fn))
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        while self._undo:
            self._undo.pop()()

    def get(self, key):
        return self.seconds.get(key, 0.0), self.calls.get(key, 0)


def kernel_timers(kernel):
    """Timers on the kernel class's gram / vjp / _scaled_sqdist / _profile and on the Numba
    ``slope_adjoint`` (looked up through the module by ``Stationary.vjp`` on every call)."""
    cls = type(kernel)
    t = _Timers()
    for attr in ("gram", "vjp", "_scaled_sqdist", "_profile"):
        t.method(cls, attr)
    t.function(_cov, "slope_adjoint")
    return t


def blas_info():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed (skipped)"
    parts = [f"{p.get('internal_api')} {p.get('version')} ({p.get('user_api')}): "
             f"{p.get('num_threads')} threads" for p in threadpool_info()]
    return "; ".join(parts) or "no thread pools found"


def breakdown(model, values, X, y, Z):
    """Where one gpdsl evaluation spends its time."""
    from gpdsl.chunks import default_chunk_size, row_slices
    from gpdsl._jit.collapsed import contract_then_complete
    from gpdsl.linalg import weighted_gram, whiten

    kernel = model.kernel
    n, m, d = X.shape[0], Z.shape[0], X.shape[1]
    chunk = model.inference.chunk_size or default_chunk_size(n, m)
    n_chunks = len(row_slices(n, chunk))
    gpdsl_eval(model, values, X, y, Z)                   # warm (compiled, caches populated)
    with kernel_timers(kernel) as T:
        t = time.perf_counter()
        gpdsl_eval(model, values, X, y, Z)
        total = time.perf_counter() - t
    gram, n_gram = T.get("gram")
    vjp, n_vjp = T.get("vjp")
    print(f"\nbreakdown of one gpdsl evaluation (instrumented run {total:.3f} s, chunk = {chunk} rows, "
          f"{n_chunks} chunks per pass)")
    print("  (a) timers on the kernel methods during a real evaluation:")
    rows = [
        ("kernel.gram", gram, n_gram, "K_uu + one K_uf per chunk per pass (pass 2 reuses them when 2 N M doubles fit the 256 MB cache)"),
        ("  _scaled_sqdist (BLAS cross term)", *T.get("gram/_scaled_sqdist"), ""),
        ("  _profile (np.exp)", *T.get("gram/_profile"), "other profiles than SE"),
        ("  rest (the SE's exp, *= variance)", gram - T.get("gram/_scaled_sqdist")[0]
         - T.get("gram/_profile")[0], n_gram, ""),
        ("kernel.vjp", vjp, n_vjp, "one per chunk (pass 2) + K_uu"),
        ("  _scaled_sqdist (BLAS cross term)", *T.get("vjp/_scaled_sqdist"), "recomputed r2"),
        ("  _profile (np.exp)", *T.get("vjp/_profile"), "K_uu only (K_uf passed in)"),
        ("  slope_adjoint (numba sweep)", *T.get("vjp/slope_adjoint"), ""),
        ("  rest (centring, S @ A2, d_ls)", vjp - T.get("vjp/_scaled_sqdist")[0]
         - T.get("vjp/_profile")[0] - T.get("vjp/slope_adjoint")[0], n_vjp, "see (b)"),
        ("outside the kernel", total - gram - vjp, None,
         "collapsed.py: whiten, syrk, (L^-T C_w) @ A, the sweep after it, M^3 algebra; see (b)"),
    ]
    for name, sec, calls, note in rows:
        c = f"{calls:4d} calls" if calls is not None else " " * 10
        print(f"    {name:<46s} {sec:8.3f} s  {c}  {note}")

    # (b) Replay the per-chunk dense work of collapsed.py (VFE, homoscedastic noise; everything in
    # the whitened basis A = L^-1 K_uf) and of Stationary.vjp with timers: the same operations on
    # the same shapes; K_uf from the real kernel.gram (not timed here), L from the real K_uu.  Not
    # replayed: the O(n) vectors after the sweep (dF/dw, g_lam).
    bound = bind(kernel, values, "kernel")
    ls, var = np.broadcast_to(bound.lengthscale, (d,)), float(bound.variance)
    rng = np.random.default_rng(0)
    Cm = rng.standard_normal((m, m)); Cm = Cm @ Cm.T / m
    alpha, beta = rng.standard_normal(m) / m, rng.standard_normal(m) / m
    L = np.linalg.cholesky(bound.gram(Z, Z) + 1e-6 * var * np.eye(m))
    noise = float(values["likelihood.variance"])
    names = ["pass 1: A = L^-1 Kuf (whiten: L^-1 by dtrtri, then dtrmm)", "pass 1: residual = kff - |a_n|^2",
             "pass 1: P = A W A^T (weighted_gram: syrk)", "pass 1: A @ (w y)",
             "pass 2: G = (L^-T C_w) @ A (gemm)", "pass 2: e = y - alpha A",
             "pass 2: k_n^T g_n, G = w (G + beta e^T) (one sweep)", "vjp: slope_adjoint (S, row/col sums)",
             "vjp: centring, S @ A2 (thin (M,n)@(n,D) gemm)", "vjp: d_X1, d_ls"]
    acc = dict.fromkeys(names, 0.0)
    for slc in row_slices(n, chunk):
        Xc, yc = X[slc], y[slc]
        Kuf = bound.gram(Z, Xc)
        w = np.full(Kuf.shape[1], 1.0 / noise)
        ts = [time.perf_counter()]
        A = whiten(L, Kuf); ts.append(time.perf_counter())
        var - np.einsum("ij,ij->j", A, A); ts.append(time.perf_counter())
        weighted_gram(A, w); ts.append(time.perf_counter())
        A @ (w * yc); ts.append(time.perf_counter())
        G = Cm @ A; ts.append(time.perf_counter())
        e = yc - alpha @ A; ts.append(time.perf_counter())
        contract_then_complete(G, Kuf, beta, e, w); ts.append(time.perf_counter())
        # the SE slope reads K, not r2 (Stationary.vjp passes K in r2's place)
        S, row, col, _, _ = _cov.slope_adjoint(Kuf, Kuf, G, var, kernel.profile, 1.0)
        ts.append(time.perf_counter())
        centre = Z.mean(axis=0)
        A1, A2 = Z - centre, Xc - centre
        SA2 = S @ A2; ts.append(time.perf_counter())
        inv_ls2 = 1.0 / (ls * ls)
        2.0 * (A1 * row[:, None] - SA2) * inv_ls2
        -2.0 * inv_ls2 / ls * (row @ (A1 * A1) - 2.0 * np.einsum("ij,ij->j", A1, SA2)
                               + col @ (A2 * A2))
        ts.append(time.perf_counter())
        for k, t0, t1 in zip(names, ts[:-1], ts[1:]):
            acc[k] += t1 - t0
    print(f"  (b) replayed per-chunk NumPy/BLAS work (summed over the {n_chunks} chunks):")
    for k, v in acc.items():
        print(f"    {k:<46s} {v:8.3f} s")
    print(f"    {'sum':<46s} {sum(acc.values()):8.3f} s")


def profile_once(model, values, X, y, Z, top=15):
    with _Timers().function(_cov, "slope_adjoint"):      # makes the Numba call visible by name
        prof = cProfile.Profile()
        prof.enable()
        gpdsl_eval(model, values, X, y, Z)
        prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    print("\ncProfile of one gpdsl evaluation (sorted by tottime):")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip()))


# --------------------------------------------------------------------------------------------
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--m", type=int, default=256)
    p.add_argument("--d", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-check", action="store_true", help="skip the small agreement check")
    p.add_argument("--no-breakdown", action="store_true", help="skip the time breakdown")
    p.add_argument("--profile", action="store_true", help="cProfile one gpdsl evaluation")
    p.add_argument("--threads", type=int, default=None,
                   help="limit BLAS (threadpoolctl) and Numba threads to this many; default: "
                        "leave them as they are.  On a loaded machine with few cores, 1 thread "
                        "gives far more stable numbers")
    args = p.parse_args(argv)
    if args.threads is not None:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            sys.exit("--threads needs threadpoolctl")
        numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
        with threadpool_limits(limits=args.threads):
            return _main(args)
    return _main(args)


def _main(args):

    print(f"gpdsl {gd.__version__}, numba {numba.__version__}, numpy {np.__version__}, "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(f"BLAS: {blas_info()}")
    print(f"numba threads (parallel=True only): {numba.get_num_threads()}")
    print("load average (1, 5, 15 min): %.2f %.2f %.2f  (anything near or above the CPU count "
          "means the timings below are contended)" % os.getloadavg())
    if not args.no_check:
        check_agreement()

    n, m, d = args.n, args.m, args.d
    model, values, X, y, Z = make_problem(n, m, d)
    print(f"\nproblem: N={n}, M={m}, D={d}, SE-ARD, Gaussian noise, Optimized Z; "
          f"median of {args.repeats} repeats after 1 warm-up (min in brackets)")

    t_g, t_g_min = median_time(lambda: gpdsl_eval(model, values, X, y, Z), args.repeats)
    t_v, t_v_min = median_time(lambda: model.evaluate(values, X, y, Z, need_grad=False),
                               args.repeats)
    jitter = gpdsl_eval(model, values, X, y, Z).jitter
    t_np, t_np_min = median_time(lambda: numpy_eval(values, X, y, Z, jitter), args.repeats)

    ls = np.asarray(values["kernel.lengthscale"], float)
    var = float(values["kernel.variance"])
    t_kuf_np, t_kuf_np_min = median_time(lambda: se_ard(Z, X, ls, var), args.repeats)
    bound = bind(model.kernel, values, "kernel")
    t_kuf_g, t_kuf_g_min = median_time(lambda: bound.gram(Z, X),
                                       args.repeats)
    A = se_ard(Z, X, ls, var)
    t_aat, t_aat_min = median_time(lambda: A @ A.T, args.repeats)
    G_P = np.random.default_rng(0).standard_normal((m, m))
    t_gemm, t_gemm_min = median_time(lambda: G_P @ A, args.repeats)

    t_kuf = min(t_kuf_np, t_kuf_g)
    kuf_src = "numpy se_ard" if t_kuf_np <= t_kuf_g else "gpdsl kernel.gram"
    rows = [
        ("gpdsl evaluate (value + grad, dZ)", t_g, t_g_min),
        ("gpdsl evaluate (value only)", t_v, t_v_min),
        ("plain NumPy VFE (value + grad, dZ)", t_np, t_np_min),
        ("K_uf numpy se_ard (cross term + exp)", t_kuf_np, t_kuf_np_min),
        ("K_uf gpdsl kernel.gram(Z, X)", t_kuf_g, t_kuf_g_min),
        ("A @ A.T   (M,N)@(N,M) syrk", t_aat, t_aat_min),
        ("G_P @ K_uf (M,M)@(M,N) gemm", t_gemm, t_gemm_min),
    ]
    print(f"\n{'':40s} {'median s':>10s} {'(min s)':>10s}")
    for name, med, mn in rows:
        print(f"{name:40s} {med:10.4f} {f'({mn:.4f})':>10s}")
    unavoidable = t_kuf + t_aat
    unavoidable_g = unavoidable + t_gemm
    print(f"\nK_uf below = the faster of the two ({kuf_src}, {t_kuf:.4f} s)")
    print(f"ratio gpdsl / numpy                        {t_g / t_np:6.2f}")
    print(f"ratio gpdsl / (K_uf + A A^T)               {t_g / unavoidable:6.2f}   (goal <= 2)")
    print(f"ratio gpdsl / (K_uf + A A^T + G_P K_uf)    {t_g / unavoidable_g:6.2f}")
    print(f"ratio gpdsl value only / (K_uf + A A^T)    {t_v / unavoidable:6.2f}")
    print(f"ratio numpy / (K_uf + A A^T)               {t_np / unavoidable:6.2f}")
    u_min = min(t_kuf_np_min, t_kuf_g_min) + t_aat_min
    print(f"same ratios from the minimum times: gpdsl/numpy {t_g_min / t_np_min:.2f}, "
          f"gpdsl/(K_uf + A A^T) {t_g_min / u_min:.2f}, "
          f"gpdsl/(K_uf + A A^T + G_P K_uf) {t_g_min / (u_min + t_gemm_min):.2f}")

    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    if not args.no_breakdown:
        breakdown(model, values, X, y, Z)
    if args.profile:
        profile_once(model, values, X, y, Z)


if __name__ == "__main__":
    main()
