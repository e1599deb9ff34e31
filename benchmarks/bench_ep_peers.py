"""Full sparse-EP probit classification fits: gpdsl's FITC-EP against GPy's EPDTC.

For each data set and seed: a seeded random 90/10 split, X standardised with the training mean
and sd, M = ``--m`` inducing inputs started at gpdsl's k-means centres of the training X (the
SAME Z0 for both libraries, computed once here and handed to the workers in a .npz), an isotropic
SE kernel (lengthscale sqrt(D), variance 1) and the probit likelihood; then a FULL fit of the
kernel hyperparameters and Z:

* gpdsl: ``Model(SquaredExponential, Bernoulli("probit"), Optimized(Fixed(Z0)), EP())``,
  ``fit(X, y, fixed=("likelihood.bias",))`` (GPy's Bernoulli has no bias), L-BFGS-B, max_iter 1000;
* GPy: ``SparseGPClassification(X, Y01, Z=Z0, kernel=RBF(D, lengthscale, variance=1))`` (default
  EPDTC, ``ep_mode="alternated"``) then ``m.optimize()`` with its defaults (L-BFGS-B, max_iters
  1000 = both maxiter and maxfun).

Data sets: twonorm (``--twonorm``, 7400 x 20, 6,660 training rows) and scikit-learn's breast
cancer (569 x 30, 512 training rows).  Every (library, data set, seed) runs in its own
subprocess with one BLAS / OpenMP / Numba thread (environment variables set before numpy is
imported, plus ``threadpoolctl.threadpool_limits(1)``).  CPU = ``time.process_time`` around
model construction + fit only; gpdsl's timed fit follows one untimed warm-up fit of the same
model type (N = 200, M = 10) in the same subprocess, so Numba compilation is excluded.  Printed:
per run CPU and wall seconds, optimiser iterations, whether a cap was hit, fitted kernel variance
and lengthscale, test NLPD (mean -log p(y*|x*)) and error rate, EP sweeps; then medians over
seeds and GPy CPU / gpdsl CPU.  Timings are printed, never asserted.

    python benchmarks/bench_ep_peers.py --python-gpy /tmp/peers/bin/python          # both, ~15 min
    python benchmarks/bench_ep_peers.py --libs gpy --python-gpy /tmp/peers/bin/python --json gpy.json
    python benchmarks/bench_ep_peers.py --libs gpdsl --gpdsl-path /tmp/gpdsl_base --merge gpy.json
    python benchmarks/bench_ep_peers.py --libs "" --merge a.json,b.json      # the summary of earlier runs only
    python benchmarks/bench_ep_peers.py --datasets breast --seeds 0,1,2,3,4,5,6,7,8,9 --libs gpdsl,gpdsl-cap

``--libs gpdsl-cap`` is gpdsl with the plateau rule switched off (``gpdsl.fitting.PLATEAU_PER_POINT =
0``): L-BFGS-B then stops by SciPy's tests or the iteration cap alone, as every fit did before issue
13, which gives "today's" test NLPD in the same setup; with both gpdsl rows the summary prints the
paired NLPD difference per data set.

The parent process imports gpdsl from ``--gpdsl-path`` (default: this repository) for
``load_csv`` and ``KMeans`` and needs scikit-learn for ``load_breast_cancer``; the GPy workers run
under ``--python-gpy`` (default: this interpreter) and need only numpy, GPy and threadpoolctl.
"""
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWONORM = "/work/shared/data/raetsch_twonorm/raetsch_twonorm.csv"
MAX_ITER = 1000                      # gpdsl's fit default; GPy's optimize default is also 1000


def nlpd_and_error(p_true):
    """Mean -log p(y*|x*) and error rate from the predictive probability of the true label."""
    p = np.clip(p_true, 1e-300, 1.0)
    return float(-np.mean(np.log(p))), float(np.mean(p < 0.5))


# ---------------------------------------------------------------------------------- workers
def work_gpdsl(d, plateau_rule=True):
    import gpdsl as gd
    import gpdsl.fitting
    from threadpoolctl import threadpool_limits
    if not plateau_rule:          # "gpdsl-cap": SciPy's tests alone, as before issue 13's plateau rule
        gpdsl.fitting.PLATEAU_PER_POINT = 0.0
    X, y, Xte, yte, Z0 = d["X"], d["y"], d["Xte"], d["yte"], d["Z0"]
    D, fix = X.shape[1], ("likelihood.bias",)

    def model(Z):
        return gd.Model(kernel=gd.kernels.SquaredExponential(math.sqrt(D), 1.0),
                        likelihood=gd.likelihoods.Bernoulli("probit"),
                        inducing=gd.inducing.Optimized(gd.inducing.Fixed(Z)), inference=gd.inference.EP())
    with threadpool_limits(1), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rng = np.random.default_rng(0)                      # untimed warm-up: Numba compilation
        Xw = rng.standard_normal((200, D))
        yw = np.where(Xw[:, 0] + 0.5 * rng.standard_normal(200) > 0, 1.0, -1.0)
        model(Xw[:10]).fit(Xw, yw, fixed=fix, max_iter=20)
        del caught[:]
        c0, w0 = time.process_time(), time.perf_counter()
        post = model(Z0).fit(X, y, fixed=fix, max_iter=MAX_ITER)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        nlpd, err = nlpd_and_error(np.exp(post.log_predictive(Xte, yte)))
    return {"lib": "gpdsl" if plateau_rule else "gpdsl-cap", "version": gd.__version__, "where": os.path.dirname(gd.__file__), "cpu": cpu,
            "wall": wall, "iters": post.n_iterations, "cap": post.n_iterations >= MAX_ITER,
            "variance": float(post.values["kernel.variance"]),
            "lengthscale": float(np.ravel(post.values["kernel.lengthscale"])[0]), "nlpd": nlpd, "err": err,
            "log_ev": post.log_evidence, "converged": post.converged, "sweeps": post.total_sweeps,
            "note": f"ridge={getattr(post, 'ridge', None)}; warnings: "
                    + (" | ".join(f"{w.category.__name__}: {w.message}" for w in caught) or "none")}


def work_gpy(d, seed):
    import scipy.optimize
    from threadpoolctl import threadpool_limits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import GPy
        from GPy.inference.latent_function_inference.expectation_propagation import EPDTC
    X, y, Xte, yte, Z0 = d["X"], d["y"], d["Xte"], d["yte"], d["Z0"]
    count, info = {"ep": 0, "sweeps": 0}, {}

    def counted(name, key):                               # count calls only (class-level wrapper)
        orig = getattr(EPDTC, name)

        def wrapper(*a, **k):
            count[key] += 1
            return orig(*a, **k)
        setattr(EPDTC, name, wrapper)
    counted("expectation_propagation", "ep")
    counted("_local_updates", "sweeps")
    lbfgsb = scipy.optimize.fmin_l_bfgs_b                 # paramz calls scipy.optimize.fmin_l_bfgs_b

    def capture(*a, **k):
        out = lbfgsb(*a, **k)
        info.update({key: out[2][key] for key in ("nit", "funcalls", "warnflag")}, task=str(out[2]["task"]))
        info.update(maxiter=k.get("maxiter"), maxfun=k.get("maxfun"))
        return out
    scipy.optimize.fmin_l_bfgs_b = capture
    np.random.seed(seed)
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c0, w0 = time.process_time(), time.perf_counter()
        m = GPy.models.SparseGPClassification(X, (y > 0).astype(float)[:, None], Z=Z0.copy(),
                                              kernel=GPy.kern.RBF(X.shape[1], lengthscale=math.sqrt(X.shape[1]),
                                                                  variance=1.0))
        m.optimize()
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        p1 = m.predict(Xte)[0][:, 0]
    nlpd, err = nlpd_and_error(np.where(yte > 0, p1, 1.0 - p1))
    run = m.optimization_runs[-1]
    return {"lib": "gpy", "version": GPy.__version__, "where": os.path.dirname(GPy.__file__), "cpu": cpu,
            "wall": wall, "iters": info.get("nit"), "cap": info.get("warnflag") == 1,
            "variance": float(np.ravel(m.kern.variance)[0]), "lengthscale": float(np.ravel(m.kern.lengthscale)[0]),
            "nlpd": nlpd, "err": err, "log_ev": float(m.log_likelihood()), "converged": run.status == "Converged",
            "sweeps": count["sweeps"],
            "note": f"status={run.status!r}; scipy task={info.get('task')!r}; funcalls={info.get('funcalls')} "
                    f"(maxiter={info.get('maxiter')}, maxfun={info.get('maxfun')}); EP runs={count['ep']} "
                    f"(ep_mode={m.inference_method.ep_mode!r}); numpy {np.__version__}"}


def worker(args):
    d = dict(np.load(args.worker_data))
    try:
        out = (work_gpy(d, args.worker_seed) if args.worker == "gpy" else
               work_gpdsl(d, plateau_rule=args.worker == "gpdsl"))
    except ImportError as exc:
        out = {"skip": f"{type(exc).__name__}: {exc}"}
    print("RESULT " + json.dumps(out), flush=True)


# ---------------------------------------------------------------------------------- parent
def prepare(name, seed, m, args):
    """Standardised 90/10 split and k-means Z0 (gpdsl.inducing.KMeans), as a dict of arrays."""
    import gpdsl as gd
    if name == "twonorm":
        X, y = gd.datasets.load_csv(args.twonorm, target="y")
    else:
        from sklearn.datasets import load_breast_cancer
        X, t = load_breast_cancer(return_X_y=True)
        y = np.where(t > 0, 1.0, -1.0)
    n = X.shape[0]
    perm = np.random.default_rng(seed).permutation(n)
    te, tr = perm[:int(round(0.1 * n))], perm[int(round(0.1 * n)):]
    mu, sd = X[tr].mean(0), X[tr].std(0)
    sd[sd == 0] = 1.0
    Xtr, Xte = (X[tr] - mu) / sd, (X[te] - mu) / sd
    Z0 = gd.inducing.KMeans(m, seed=seed).select(Xtr, y[tr]).Z
    return {"X": Xtr, "y": y[tr], "Xte": Xte, "yte": y[te], "Z0": Z0}


def launch(lib, path, seed, args):
    env = dict(os.environ)
    py = sys.executable
    if lib != "gpy":
        env["PYTHONPATH"] = os.pathsep.join([args.gpdsl_path] + [p for p in [env.get("PYTHONPATH")] if p])
    else:
        py = args.python_gpy or sys.executable
    cmd = [py, os.path.abspath(__file__), "--worker", lib, "--worker-data", path, "--worker-seed", str(seed)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"skip": f"timed out after {args.timeout} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"skip": f"worker failed (rc {proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}"}


ROW = "{:<8s} {:>4s} {:<6s} {:>8s} {:>8s} {:>6s} {:>4s} {:>9s} {:>8s} {:>7s} {:>6s} {:>10s} {:>5s} {:>6s}"


def row(ds, seed, r, cap=None, conv=None):
    return ROW.format(ds, str(seed), r["lib"], f"{r['cpu']:.1f}", f"{r['wall']:.1f}", f"{r['iters']:g}",
                      cap or ("yes" if r["cap"] else "no"), f"{r['variance']:.4g}", f"{r['lengthscale']:.4g}",
                      f"{r['nlpd']:.4f}", f"{r['err']:.4f}", f"{r['log_ev']:.2f}",
                      conv or str(bool(r["converged"])), f"{r['sweeps']:g}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="twonorm,breast")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--m", type=int, default=128)
    p.add_argument("--libs", default="gpdsl,gpy",
                   help="gpdsl, gpdsl-cap (the plateau rule off: SciPy's tests and the cap alone, as before "
                        "issue 13) and gpy")
    p.add_argument("--python-gpy", default=None, help="interpreter of the GPy environment")
    p.add_argument("--gpdsl-path", default=ROOT, help="directory put first on sys.path / PYTHONPATH for gpdsl")
    p.add_argument("--twonorm", default=TWONORM, help="raetsch_twonorm.csv (header x1..x20,y)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per worker subprocess")
    p.add_argument("--json", default=None, help="write the per-run results to this file")
    p.add_argument("--merge", default=None, help="comma-separated --json files of earlier runs for the summary")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-data", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    args.gpdsl_path = os.path.abspath(args.gpdsl_path)
    sys.path.insert(0, args.gpdsl_path)
    rev = subprocess.run(["git", "-C", args.gpdsl_path, "describe", "--always", "--dirty"],
                         capture_output=True, text=True).stdout.strip() or "?"
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} CPUs, load average "
          f"{'%.2f %.2f %.2f' % os.getloadavg()}; gpdsl from {args.gpdsl_path} (git {rev}); GPy python "
          f"{args.python_gpy or sys.executable}\none BLAS/OpenMP/Numba thread per worker; CPU = process_time of "
          "construction + fit; gpdsl timed after an untimed warm-up fit (N=200, M=10: Numba compilation "
          f"excluded); M = {args.m}; max iterations {MAX_ITER} (gpdsl max_iter; GPy max_iters = maxiter = maxfun)")
    libs = [v for v in args.libs.split(",") if v]
    if set(libs) - {"gpdsl", "gpdsl-cap", "gpy"}:
        p.error(f"--libs: expected a comma-separated subset of gpdsl, gpdsl-cap, gpy; got {args.libs!r}")
    results = []
    head = ROW.format("data", "seed", "lib", "CPU s", "wall s", "iters", "cap", "variance", "lscale", "NLPD",
                      "error", "log ev/lik", "conv", "sweeps")
    print("columns: iters = L-BFGS-B iterations (gpdsl post.n_iterations, GPy scipy nit); cap = iteration cap hit "
          "(gpdsl n_iterations >= max_iter, GPy warnflag 1); NLPD / error on the test split; log ev/lik = gpdsl "
          "post.log_evidence (FITC-EP) / GPy m.log_likelihood() (DTC-EP); conv = gpdsl post.converged / GPy status "
          "'Converged'; sweeps = gpdsl post.total_sweeps / GPy EP sweeps (_local_updates calls)")
    print("\n" + head)
    with tempfile.TemporaryDirectory() as tmp:
        for ds in args.datasets.split(",") if libs else ():     # --libs "": the --merge summary only
            for seed in (int(s) for s in args.seeds.split(",")):
                try:
                    d = prepare(ds, seed, args.m, args)
                except Exception as exc:
                    print(f"{ds} seed {seed}: data preparation failed: {type(exc).__name__}: {exc}")
                    continue
                path = os.path.join(tmp, f"{ds}_{seed}.npz")
                np.savez(path, **d)
                print(f"# {ds} seed {seed}: N={d['X'].shape[0]} train, {d['Xte'].shape[0]} test, D={d['X'].shape[1]}, "
                      f"sum(Z0)={d['Z0'].sum():.10g}", flush=True)
                for lib in libs:
                    r = launch(lib, path, seed, args)
                    if "skip" in r:
                        print(f"{ds:<8s} {seed:>4d} {lib:<6s} skipped: {r['skip']}", flush=True)
                        continue
                    results.append(dict(r, ds=ds, seed=seed))
                    print(row(ds, seed, r) + f"\n    {r['lib']} {r['version']} ({r['where']}): {r['note']}",
                          flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    for f in (args.merge.split(",") if args.merge else []):
        with open(f) as fh:
            results += json.load(fh)
    print("\nmedians over seeds" + (" (including --merge runs)" if args.merge else "") + ":\n" + head)
    med = {}
    for ds in dict.fromkeys(r["ds"] for r in results):
        for lib in dict.fromkeys(r["lib"] for r in results):
            rs = [r for r in results if r["ds"] == ds and r["lib"] == lib]
            if not rs:
                continue
            mr = {k: statistics.median(r[k] for r in rs) for k in
                  ("cpu", "wall", "iters", "variance", "lengthscale", "nlpd", "err", "log_ev", "sweeps")}
            med[ds, lib] = dict(mr, lib=lib)
            print(row(ds, "med", med[ds, lib], f"{sum(bool(r['cap']) for r in rs)}/{len(rs)}",
                      f"{sum(bool(r['converged']) for r in rs)}/{len(rs)}"))
        if (ds, "gpy") in med and (ds, "gpdsl") in med:
            print(f"{ds}: GPy CPU / gpdsl CPU = {med[ds, 'gpy']['cpu'] / med[ds, 'gpdsl']['cpu']:.2f} "
                  f"(medians {med[ds, 'gpy']['cpu']:.1f} s / {med[ds, 'gpdsl']['cpu']:.1f} s)")
        paired = {(r["seed"], r["lib"]): r for r in results if r["ds"] == ds}
        diffs = [paired[s, "gpdsl"]["nlpd"] - paired[s, "gpdsl-cap"]["nlpd"]
                 for s in dict.fromkeys(r["seed"] for r in results if r["ds"] == ds)
                 if (s, "gpdsl") in paired and (s, "gpdsl-cap") in paired]
        if diffs:
            print(f"{ds}: test NLPD, plateau rule - run to the cap, paired over {len(diffs)} seeds: median "
                  f"{statistics.median(diffs):+.4f}, mean {statistics.fmean(diffs):+.4f}, range "
                  f"{min(diffs):+.4f} .. {max(diffs):+.4f}")
    print(f"load average at the end: {'%.2f %.2f %.2f' % os.getloadavg()}")


if __name__ == "__main__":
    main()
