"""BLAS threads out of the box: issue 13's four rows, default environment against one thread.

Each row runs as a user runs it, in a fresh ``python`` subprocess (warm Numba cache: one
untimed run of the row first), once with the environment as it is (OpenBLAS starts as many
threads as there are cores) and once with ``OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS=1``;
``--load`` repeats both while another process runs a two-thread NumPy matmul loop (the "busy
machine" column).  Printed per row: wall and process CPU seconds (user + system of the child,
from ``os.wait4``), median over ``--repeats``, and default / one-thread ratios.  Before gpdsl
managed its BLAS threads, the default column was 2-17x the one-thread one.

Rows (issue 13's first table):

* ``ep_xor``: the user guide's EP snippet (docs/guide.md) (FITC-EP, optimised k-means Z, M = 10, xor N = 400, restarts=2);
* ``pgpr_hgv``: the user guide's PGPR/HGV snippet (banana N = 400, HGV with automatic M);
* ``tutorial03``: ``python tutorials/03_classification_pgpr_and_greedy.py``;
* ``pgpr_twonorm``: PGPR on twonorm, N = 3,000, D = 20, M = 50 k-means inducing points.

    python benchmarks/bench_threads.py                      # idle machine, 3 repeats
    python benchmarks/bench_threads.py --load --repeats 2   # also with a 2-thread process running
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SNIPPETS = {
    "ep_xor": """
import gpdsl as gd
model = gd.Model(kernel=gd.kernels.SquaredExponential(1.0, 1.0),
                 likelihood=gd.likelihoods.Bernoulli(link="probit", bias=0.0),
                 inducing=gd.inducing.Optimized(gd.inducing.KMeans(10, seed=0)),
                 inference=gd.inference.EP())
X, y = gd.datasets.xor(400, seed=0)
post = model.fit(X, y, restarts=2)
""",
    "pgpr_hgv": """
import gpdsl as gd
model = gd.Model(kernel=gd.kernels.SquaredExponential(1.0, 1.0),
                 likelihood=gd.likelihoods.Bernoulli(link="logit"),
                 inducing=gd.inducing.GreedyVariance(tol=1e-3, max_m=300, weighted=True, reinit=True),
                 inference=gd.inference.PolyaGamma())
X, y = gd.datasets.banana(400, seed=0)
post = model.fit(X, y)
""",
    "pgpr_twonorm": """
import gpdsl as gd
X, y = gd.datasets.twonorm(3000, dim=20, seed=0)
model = gd.Model(kernel=gd.kernels.SquaredExponential(1.0, 1.0),
                 likelihood=gd.likelihoods.Bernoulli(link="logit"),
                 inducing=gd.inducing.KMeans(50, seed=0), inference=gd.inference.PolyaGamma())
post = model.fit(X, y)
""",
}
ROWS = ("ep_xor", "pgpr_hgv", "tutorial03", "pgpr_twonorm")
ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
HOG = """
import time, numpy as np
a = np.random.default_rng(0).standard_normal((1500, 1500))
while True:
    a @ a
"""


def command(row):
    if row == "tutorial03":
        return [sys.executable, os.path.join(REPO, "tutorials", "03_classification_pgpr_and_greedy.py")]
    return [sys.executable, "-c", "import warnings; warnings.simplefilter('ignore')\n" + SNIPPETS[row]]


def run_once(row, env):
    """(wall seconds, child CPU seconds) of one subprocess run."""
    t = time.perf_counter()
    proc = subprocess.Popen(command(row), env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{row} failed: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=",".join(ROWS), help="comma-separated subset of " + ", ".join(ROWS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--load", action="store_true", help="also measure with a 2-thread matmul process running")
    args = p.parse_args(argv)
    base = dict(os.environ)
    base["PYTHONPATH"] = REPO + (os.pathsep + base["PYTHONPATH"] if base.get("PYTHONPATH") else "")
    for var in ONE_THREAD:
        base.pop(var, None)
    one = dict(base, **{var: "1" for var in ONE_THREAD})
    from threadpoolctl import threadpool_info
    import numpy  # noqa: F401  (so threadpool_info sees NumPy's BLAS)
    print(f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}, BLAS by default: "
          + ", ".join(f"{i['internal_api']} {i['version']} {i['num_threads']} threads" for i in threadpool_info()
                      if i["user_api"] == "blas"))
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg())
    conditions = [("idle", False)] + ([("busy", True)] if args.load else [])
    print(f"{'row':<14s} {'machine':<7s} {'default wall':>13s} {'1-thread wall':>14s} {'ratio':>6s}   "
          f"{'default CPU':>12s} {'1-thread CPU':>13s} {'ratio':>6s}")
    for row in args.rows.split(","):
        run_once(row, one)                      # fill the Numba cache; not timed
        for label, busy in conditions:
            hog = subprocess.Popen([sys.executable, "-c", HOG], env=dict(base, OPENBLAS_NUM_THREADS="2")) \
                if busy else None
            try:
                if hog is not None:
                    time.sleep(1.0)
                times = {"default": [], "one": []}
                for _ in range(args.repeats):       # alternate, so drift hits both columns alike
                    times["default"].append(run_once(row, base))
                    times["one"].append(run_once(row, one))
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
            med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                   for k, v in times.items()}
            print(f"{row:<14s} {label:<7s} {med['default'][0]:13.2f} {med['one'][0]:14.2f} "
                  f"{med['default'][0] / med['one'][0]:6.2f}   {med['default'][1]:12.2f} {med['one'][1]:13.2f} "
                  f"{med['default'][1] / med['one'][1]:6.2f}", flush=True)


if __name__ == "__main__":
    main()
