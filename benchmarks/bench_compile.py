"""Cold start: the first fit of every method in a fresh process, with and without Numba's cache.

Issue 46's targets, in process CPU seconds: with no Numba cache, the first fit of each of the
twelve methods below (N = 200, M = 10; the K-class ones included) within 5 s, all twelve in one
process within 15 s; with the cache within 1.5 s each; ``import gpdsl`` within 0.7 s.  (Issue 13's
were wall seconds: 10 s each, 25 s for the six binary ones together, import 1 s.)  CPU rather than
wall: on a shared machine the wall time measures the other processes too.  Each row also shows the
1-minute load average when its subprocess ended.

Everything is measured in fresh ``python`` subprocesses, so nothing is shared in memory.  A
*cold* run gets a new, empty ``NUMBA_CACHE_DIR`` (the package's own ``__pycache__`` is neither
read nor touched by Numba, so other processes using the checkout do not disturb it); the *warm*
run that follows uses the cache the cold run filled.  Before measuring, gpdsl's Python bytecode is
compiled (``python -m compileall`` on the package, into its ``__pycache__``), as ``pip install``
leaves an installed package: otherwise, where ``PYTHONDONTWRITEBYTECODE`` is set (as on the
development machines), every subprocess compiles gpdsl's ~90 modules from source, 0.12 s of the
import that a user's second and later processes never pay.

1. ``import gpdsl``: the best (least CPU) of ``--repeats`` (at least 3) subprocesses, wall and
   process CPU, and which of xarray, arviz, pandas, matplotlib, sklearn, scipy.optimize,
   scipy.stats and numba it imported;
2. each method alone: its first fit, cold then warm;
3. all the methods in one process (in the order of the table), cold then warm.

A fit subprocess times each first fit (wall and process CPU seconds, ``model.fit`` only: the
interpreter start and ``import gpdsl`` are reported apart) and, after its fits, walks every Numba
dispatcher defined in ``gpdsl._jit``: the specialisations it holds (compiled or loaded; more than
one for a dispatcher means its argument types varied), and its cache hits (loaded from disk) and
misses (compiled).  A cold run with hits, or a warm run with misses, is flagged.  The dispatcher
table of the cold all-methods run is printed, so a signature explosion shows.  The warm CPU is
the fit itself (kernels loaded from the cache): cold CPU less warm CPU is what compiling cost,
printed as *compile* beside each row and the totals with the specialisations the cold run compiled
(*specs*; in the all-in-one rows, those of the process after that fit less those before it), so
that a total over its target says whether compiling or the fits themselves are the cost.

Set-up: regression on ``gd.datasets.snelson_like(n=200, seed=0)`` (Gaussian noise 0.1; Exact,
VFE, FITC), classification on ``gd.datasets.banana(n=200, seed=0)`` (probit for EP and QP, logit
for PolyaGamma; the K-class methods: 3 classes from the same inputs); a squared-exponential
kernel (1, 1); ``KMeans(10, seed=0)`` inducing inputs for every method but Exact and Laplace-K;
``model.fit(X, y)`` with its defaults.

Usage::

    python benchmarks/bench_compile.py                             # all twelve, alone and together
    python benchmarks/bench_compile.py --repeats 3 --threads 1     # steadier on a busy machine
    python benchmarks/bench_compile.py --methods EP,QP --no-all
    python benchmarks/bench_compile.py --methods binary            # the six binary/regression ones
    python benchmarks/bench_compile.py --methods multiclass --no-all
    python benchmarks/bench_compile.py --no-single                 # all twelve in one process only
    python3 -m venv /tmp/fresh && /tmp/fresh/bin/pip install . && \
        python benchmarks/bench_compile.py --python /tmp/fresh/bin/python   # as a new user installs it
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ("Exact", "VFE", "FITC", "EP", "QP", "PolyaGamma")
# Issue 28's K-class methods: 3 classes.
MULTICLASS = ("Laplace-K", "SVGP-softmax-K", "SVGP-robustmax-K", "SVGP-logistic_softmax-K", "PolyaGamma-K",
              "PolyaGamma-minibatch-K")
GROUPS = {"binary": METHODS, "multiclass": MULTICLASS, "all": METHODS + MULTICLASS}
HEAVY = ("xarray", "arviz", "pandas", "matplotlib", "sklearn", "scipy.optimize", "scipy.stats", "numba")
TARGETS = {"cold": 5.0, "all_cold": 15.0, "warm": 1.5, "import": 0.7}      # process CPU seconds

FIT_SCRIPT = r"""
import json, os, sys, time, warnings
warnings.simplefilter("ignore")
t0 = time.perf_counter()
import gpdsl as gd
t_import = time.perf_counter() - t0
from numba.core.registry import CPUDispatcher

SE = gd.kernels.SquaredExponential
regression = gd.datasets.snelson_like(n=200, seed=0)
classification = gd.datasets.banana(n=200, seed=0)


def problem(method):
    if method.endswith("-K"):
        # Three classes on the banana inputs: the sign of x_0 and whether x_1 > 1.
        X, _ = classification
        labels = (X[:, 0] > 0).astype(int) + (X[:, 1] > 1)
        name, *link = method[:-2].split("-")
        inducing = None if name == "Laplace" else gd.inducing.KMeans(10, seed=0)
        link = {"Laplace": "softmax", "PolyaGamma": "logistic_softmax"}.get(name, link[0] if link else None)
        inference = (gd.inference.PolyaGamma(minibatch=64, seed=0) if link == "logistic_softmax" and "minibatch"
                     in method else getattr(gd.inference, name)())
        return gd.Model(SE(1.0, 1.0), gd.likelihoods.Categorical(3, link), inducing, inference), (X, labels)
    inducing = None if method == "Exact" else gd.inducing.KMeans(10, seed=0)
    if method in ("Exact", "VFE", "FITC"):
        likelihood, data = gd.likelihoods.Gaussian(0.1), regression
    elif method in ("EP", "QP"):
        likelihood, data = gd.likelihoods.Bernoulli("probit"), classification
    else:
        likelihood, data = gd.likelihoods.Bernoulli("logit"), classification
    return gd.Model(SE(1.0, 1.0), likelihood, inducing, getattr(gd.inference, method)()), data


def jit_dispatchers():
    # {module.function: (specialisations, cache hits, cache misses)} of gpdsl._jit's dispatchers in use.
    found = {}
    for name, module in sorted(sys.modules.items()):
        if name.startswith("gpdsl._jit.") and module is not None:
            for attr, obj in vars(module).items():
                if isinstance(obj, CPUDispatcher) and obj.__module__ == name and obj.signatures:
                    found[f"{name[len('gpdsl._jit.'):]}.{attr}"] = (
                        len(obj.signatures), sum(obj.stats.cache_hits.values()), sum(obj.stats.cache_misses.values()))
    return found


fits, specs = {}, {}
for method in sys.argv[1].split(","):
    model, (X, y) = problem(method)
    before = sum(count for count, _, _ in jit_dispatchers().values())
    wall, cpu = time.perf_counter(), time.process_time()
    model.fit(X, y)
    fits[method] = (time.perf_counter() - wall, time.process_time() - cpu)
    specs[method] = sum(count for count, _, _ in jit_dispatchers().values()) - before

print(json.dumps({"import": t_import, "fits": fits, "specs": specs, "dispatchers": jit_dispatchers(),
                  "load": os.getloadavg()[0]}))
"""

IMPORT_SCRIPT = r"""
import json, os, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import gpdsl
print(json.dumps({"import": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                  "heavy": [m for m in %r if m in sys.modules], "load": os.getloadavg()[0]}))
""" % (HEAVY,)


def run_python(script, args, env):
    """(subprocess wall seconds, parsed JSON of its last stdout line) or raises with its stderr.

    Runs under ``env["BENCH_PYTHON"]`` in ``env["BENCH_CWD"]`` (see ``--python``)."""
    env = dict(env)
    python, cwd = env.pop("BENCH_PYTHON"), env.pop("BENCH_CWD")
    start = time.perf_counter()
    proc = subprocess.run([python, "-c", script, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=900)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"subprocess failed (exit {proc.returncode}):\n{proc.stderr.strip()[-3000:]}")
    return wall, json.loads(proc.stdout.strip().splitlines()[-1])


def cold_warm(methods, env, repeats):
    """The cold and warm runs of one fit subprocess, each the best (least fit CPU) of ``repeats``."""
    best = {"cold": None, "warm": None}
    for _ in range(repeats):
        cache = tempfile.mkdtemp(prefix="gpdsl_numba_cache_")
        try:
            for kind in ("cold", "warm"):
                wall, info = run_python(FIT_SCRIPT, [",".join(methods)], {**env, "NUMBA_CACHE_DIR": cache})
                info["subprocess"] = wall
                total = sum(cpu for _, cpu in info["fits"].values())
                if best[kind] is None or total < sum(cpu for _, cpu in best[kind]["fits"].values()):
                    best[kind] = info
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    return best["cold"], best["warm"]


def cache_flag(info, kind):
    hits = sum(h for _, h, _ in info["dispatchers"].values())
    misses = sum(m for _, _, m in info["dispatchers"].values())
    bad = (kind == "cold" and hits) or (kind == "warm" and misses)
    return f"{hits:3d}/{misses:<3d}{' !' if bad else '  '}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=1,
                   help="subprocesses per measurement; the best (least CPU) is shown")
    p.add_argument("--methods", default="all",
                   help="comma-separated subset of " + ",".join(METHODS + MULTICLASS) + ", or a group: "
                        + ", ".join(f"{k} ({len(v)})" for k, v in GROUPS.items()) + " (default: all)")
    p.add_argument("--no-all", action="store_true", help="skip the all-methods-in-one-process runs")
    p.add_argument("--no-single", action="store_true", help="skip the one-method-per-process runs")
    p.add_argument("--threads", type=int, default=None,
                   help="set OPENBLAS/OMP/MKL/NUMBA thread counts of the subprocesses")
    p.add_argument("--python", default=None,
                   help="interpreter of an environment with gpdsl installed (e.g. a fresh virtualenv): the "
                        "subprocesses run under it, import the installed gpdsl and start outside the checkout; "
                        "default: this interpreter with the checkout first on PYTHONPATH")
    args = p.parse_args(argv)
    methods = [m for part in args.methods.split(",") if part for m in GROUPS.get(part, (part,))]
    unknown = set(methods) - set(METHODS) - set(MULTICLASS)
    if unknown:
        p.error(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS + MULTICLASS)}")
    if args.no_single and (args.no_all or len(methods) == 1):
        p.error("--no-single leaves nothing to run without the all-in-one-process run (--no-all, or one method)")

    env = dict(os.environ)
    env.pop("NUMBA_CACHE_DIR", None)
    if args.threads is not None:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
            env[var] = str(args.threads)
    if args.python is None:
        env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update(BENCH_PYTHON=sys.executable, BENCH_CWD=REPO)
    else:                          # `python -c` puts the working directory first on sys.path
        env.update(BENCH_PYTHON=args.python, BENCH_CWD=tempfile.mkdtemp(prefix="gpdsl_bench_cwd_"))
    where = subprocess.run([env["BENCH_PYTHON"], "-c", "import gpdsl, numba, sys; print(gpdsl.__file__, "
                            "numba.__version__, sys.version.split()[0])"], env={k: v for k, v in env.items()
                           if not k.startswith("BENCH_")}, cwd=env["BENCH_CWD"], capture_output=True, text=True,
                           check=True).stdout.split()
    # gpdsl's bytecode, as an installed package has it (see the module docstring).
    subprocess.run([env["BENCH_PYTHON"], "-m", "compileall", "-q", os.path.dirname(where[0])], cwd=env["BENCH_CWD"],
                   env={k: v for k, v in env.items() if not k.startswith("BENCH_")}, capture_output=True, check=True)
    load = "load average %.2f %.2f %.2f" % os.getloadavg() if hasattr(os, "getloadavg") else "load n/a"
    print(f"gpdsl from {os.path.dirname(where[0])}, numba {where[1]}, python {where[2]} ({env['BENCH_PYTHON']}), "
          f"{os.cpu_count()} CPUs, {load}, subprocess threads: {args.threads or 'default'}, best of {args.repeats}")

    imports = [run_python(IMPORT_SCRIPT, [], env)[1] for _ in range(max(args.repeats, 3))]
    best_import = min(imports, key=lambda info: info["cpu"])
    heavy = ", ".join(best_import["heavy"]) or "none"
    print(f"\nimport gpdsl: {best_import['cpu']:.2f} s CPU, {best_import['import']:.2f} s wall (best of "
          f"{len(imports)}, load {best_import['load']:.2f}; target <= {TARGETS['import']:.1f} s CPU; gpdsl's bytecode "
          f"compiled beforehand); heavy modules imported: {heavy}")

    print("\nfirst fit (model.fit only), seconds wall / CPU; Numba cache hits/misses over gpdsl's dispatchers "
          "('!': a cold run that loaded, or a warm run that compiled); the load average at the end of each run; "
          "compile: cold CPU less warm CPU, and the specialisations the cold run compiled")
    print(f"{'':24s} {'cold wall':>9s} {'cpu':>6s} {'hits/miss':>11s} {'load':>5s}   {'warm wall':>9s} {'cpu':>6s} "
          f"{'hits/miss':>11s} {'load':>5s}   {'compile':>7s} {'specs':>5s}")

    def row(name, cold_times, warm_times, specs, flags=("", ""), loads=None):
        load = [f"{x:5.2f}" for x in loads] if loads else ["", ""]
        print(f"{name:24s} {cold_times[0]:9.2f} {cold_times[1]:6.2f} {flags[0]:>11s} {load[0]:>5s}   "
              f"{warm_times[0]:9.2f} {warm_times[1]:6.2f} {flags[1]:>11s} {load[1]:>5s}   "
              f"{cold_times[1] - warm_times[1]:7.2f} {specs:5d}")

    runs = [] if args.no_single else [(m, [m]) for m in methods]
    if not args.no_all and len(methods) > 1:
        runs.append(("all in one process", methods))
    results = {}
    for label, subset in runs:
        cold, warm = results[label] = cold_warm(subset, env, args.repeats)
        flags = (cache_flag(cold, "cold"), cache_flag(warm, "warm"))
        loads = (cold["load"], warm["load"])
        if len(subset) == 1:
            row(label, cold["fits"][label], warm["fits"][label], cold["specs"][label], flags, loads)
            continue
        print(label)
        for method in subset:
            row(f"  {method}", cold["fits"][method], warm["fits"][method], cold["specs"][method])
        totals = [[sum(times[j] for times in info["fits"].values()) for j in (0, 1)] for info in (cold, warm)]
        row("  total", *totals, sum(cold["specs"].values()), flags, loads)

    print(f"\ntargets (CPU): cold <= {TARGETS['cold']:.0f} s each and <= {TARGETS['all_cold']:.0f} s for all of them "
          f"in one process; warm <= {TARGETS['warm']} s each; import <= {TARGETS['import']} s")
    misses = []
    for label, (cold, warm) in results.items():
        for method, (_, cc) in cold["fits"].items():
            if cc > TARGETS["cold"]:
                misses.append(f"{label}: {method} cold {cc:.1f} s")
        for method, (_, wc) in warm["fits"].items():
            if wc > TARGETS["warm"]:
                misses.append(f"{label}: {method} warm {wc:.1f} s")
        if len(cold["fits"]) > 1 and sum(c for _, c in cold["fits"].values()) > TARGETS["all_cold"]:
            cold_total, warm_total = (sum(c for _, c in info["fits"].values()) for info in (cold, warm))
            misses.append(f"{label}: cold total {cold_total:.1f} s (the fits themselves {warm_total:.1f} s, "
                          f"compiling {cold_total - warm_total:.1f} s)")
    if best_import["cpu"] > TARGETS["import"]:
        misses.append(f"import {best_import['cpu']:.2f} s")
    print("missed: " + ("; ".join(misses) if misses else "none"))

    label = runs[-1][0]
    cold = results[label][0]
    print(f"\nspecialisations per dispatcher after the cold run of '{label}', with cache hits/misses (more than "
          f"one: several argument types; by design the EP/QP sweep kernels have one per projection, EP's and QP's)")
    for name, (count, hits, misses_) in sorted(cold["dispatchers"].items()):
        print(f"    {name:42s} {count:3d}   {hits}/{misses_}")
    print(f"    {'total':42s} {sum(c for c, _, _ in cold['dispatchers'].values()):3d}")


if __name__ == "__main__":
    main()
