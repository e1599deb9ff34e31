"""Cold-start cost: Numba compilation of gpdsl's kernels versus a warm (cached) start.

gpdsl jits one function, ``gpdsl._jit.covariance.slope_adjoint`` (the fused elementwise sweep of
the stationary-kernel VJP); distances and profile values are NumPy/BLAS and need no compiling.

Each measurement is a fresh ``python`` subprocess, so nothing is shared in memory:

1. clear the Numba cache of gpdsl (the ``*.nbi`` / ``*.nbc`` files under ``__pycache__``
   directories of the package), then run a small VFE fit in a subprocess -> cold (compile) time;
2. run the same subprocess again -> warm time (Numba loads the cached machine code);
3. clear the cache again and time ``python -m gpdsl run --out <tmpdir>`` (the same code as the
   ``gpdsl run`` console command) cold, then warm.  If the command fails (e.g. no CLI yet) that
   is reported and only the small fit is timed.

Each subprocess prints the time of ``import gpdsl`` and of the fit separately; the parent also
reports the whole subprocess wall time (interpreter start-up included).

``--isolated`` points ``NUMBA_CACHE_DIR`` at a fresh temporary directory instead of deleting the
cache files in the package (useful when other processes share the checkout: nothing in it is
touched, and nobody else can re-populate the cache between the clear and the cold run).

Usage::

    python benchmarks/bench_compile.py
    python benchmarks/bench_compile.py --isolated --repeats 2
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, "gpdsl")

FIT_SCRIPT = r"""
import glob, json, os, sys, time, warnings
warnings.simplefilter("ignore")
t0 = time.time()
import numpy as np
t_np = time.time()
import gpdsl as gd
t_import = time.time()
rng = np.random.default_rng(0)
X = rng.uniform(-3, 3, size=(300, 2))
y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(300)
model = gd.Model(kernel=gd.kernels.SquaredExponential(np.ones(2), 1.0),
                 likelihood=gd.likelihoods.Gaussian(0.1),
                 inducing=gd.inducing.Optimized(gd.inducing.KMeans(16, seed=0)),
                 inference=gd.inference.VFE())
post = model.fit(X, y, max_iter=50)
t_fit = time.time()
post.predict(X[:50])
t_pred = time.time()
# gpdsl's only jitted function is the slope-adjoint sweep of the stationary-kernel VJP (distances
# and exp are NumPy/BLAS); any other dispatchers added to the module are counted as well.
from gpdsl._jit import covariance as _cov
from gpdsl._jit.covariance import slope_adjoint
from numba.core.registry import CPUDispatcher
disp = [slope_adjoint] + [f for f in vars(_cov).values()
                          if isinstance(f, CPUDispatcher) and f is not slope_adjoint]
hits = sum(sum(f.stats.cache_hits.values()) for f in disp)
misses = sum(sum(f.stats.cache_misses.values()) for f in disp)
print(json.dumps({"jitted": [f.py_func.__name__ for f in disp],
                  "cache_hits": hits, "cache_misses": misses, "numpy_import": t_np - t0, "gpdsl_import": t_import - t_np,
                  "fit": t_fit - t_import, "predict": t_pred - t_fit, "total": t_pred - t0,
                  "iterations": post.n_iterations}))
"""


def cache_files(root):
    return [p for ext in ("nbi", "nbc") for p in glob.glob(os.path.join(root, "**", f"*.{ext}"),
                                                           recursive=True)]


def clear_package_cache():
    files = [p for p in cache_files(PACKAGE) if os.sep + "__pycache__" + os.sep in p]
    for p in files:
        try:
            os.remove(p)
        except FileNotFoundError:
            pass
    return len(files)


def run(cmd, env, cwd):
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - t, proc


def fit_once(env, label):
    wall, proc = run([sys.executable, "-c", FIT_SCRIPT], env, REPO)
    if proc.returncode != 0:
        print(f"{label}: small fit FAILED (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
        return None
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{label:<22s} subprocess {wall:7.2f} s | import gpdsl {info['gpdsl_import']:6.2f} s, "
          f"fit {info['fit']:6.2f} s ({info['iterations']} L-BFGS iterations), "
          f"predict {info['predict']:6.3f} s, in-process total {info['total']:6.2f} s; "
          f"numba cache hits/misses {info['cache_hits']}/{info['cache_misses']} "
          f"({', '.join(info['jitted'])})")
    return wall, info


def cli_once(env, label):
    out = tempfile.mkdtemp(prefix="gpdsl_bench_cli_")
    try:
        wall, proc = run([sys.executable, "-m", "gpdsl", "run", "--out", out], env, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        msg = (proc.stderr.strip() or proc.stdout.strip())[-1500:]
        print(f"{label}: `python -m gpdsl run` FAILED (exit {proc.returncode}): {msg}")
        return None
    print(f"{label:<22s} subprocess {wall:7.2f} s  (`python -m gpdsl run --out <tmpdir>`)")
    return wall


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--isolated", action="store_true",
                   help="use a fresh NUMBA_CACHE_DIR instead of deleting the package's cache files")
    p.add_argument("--repeats", type=int, default=1, help="cold/warm pairs per measurement")
    p.add_argument("--no-cli", action="store_true", help="skip the `gpdsl run` timing")
    p.add_argument("--threads", type=int, default=None,
                   help="set OPENBLAS/OMP/MKL/NUMBA thread counts of the subprocesses (on a loaded "
                        "machine with few cores, 1 makes the warm numbers far less noisy)")
    args = p.parse_args(argv)

    env = dict(os.environ)
    if args.threads is not None:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS"):
            env[var] = str(args.threads)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    import numba
    print(f"numba {numba.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"cache: {'isolated NUMBA_CACHE_DIR' if args.isolated else 'package __pycache__'}, "
          f"subprocess threads: {args.threads or 'default'}, load average %.2f %.2f %.2f"
          % os.getloadavg())

    def clear():
        if args.isolated:
            env["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="gpdsl_numba_cache_")
            return "fresh NUMBA_CACHE_DIR"
        return f"deleted {clear_package_cache()} cache files"

    summary = {"fit": [], "cli": []}
    cli_ok = not args.no_cli
    for r in range(args.repeats):
        what = clear()
        print(f"\n[{r + 1}] cleared Numba cache ({what})")
        cold = fit_once(env, "small fit, cold")
        warm = fit_once(env, "small fit, warm")
        if cold and warm:
            summary["fit"].append((cold[0], warm[0]))
        n_cached = len(cache_files(env.get("NUMBA_CACHE_DIR", PACKAGE)))
        print(f"    cache files after the runs: {n_cached}")
        if cli_ok:
            what = clear()
            print(f"[{r + 1}] cleared Numba cache ({what})")
            c = cli_once(env, "gpdsl run, cold")
            w = cli_once(env, "gpdsl run, warm") if c is not None else None
            if c is None or w is None:
                cli_ok = False
                print("    (CLI timing skipped from here on; only the small fit is timed)")
            else:
                summary["cli"].append((c, w))

    print("\nsummary (subprocess wall seconds, interpreter start-up included):")
    for key, name in (("fit", "small VFE fit + predict"), ("cli", "gpdsl run (default model)")):
        for cold, warm in summary[key]:
            print(f"    {name:<28s} cold {cold:6.2f}   warm {warm:6.2f}   "
                  f"compile overhead {cold - warm:6.2f}")
    if args.isolated:
        for d in glob.glob(os.path.join(tempfile.gettempdir(), "gpdsl_numba_cache_*")):
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
