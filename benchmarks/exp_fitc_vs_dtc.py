"""Issue 29: where gpdsl's FITC-EP and GPy's sparse EP (EPDTC) differ on twonorm and breast cancer.

The setup of ``bench_ep_peers.py`` (seeded 90/10 split, X standardised, M = 128 k-means Z0 from
``gd.inducing.KMeans(m, seed=seed)``, SE kernel started at lengthscale sqrt(D) and variance 1,
probit, bias fixed at 0), and these rows per (data set, seed), each a test NLPD and error:

gpdsl fits (L-BFGS-B, max_iter 1000, the plateau rule on unless said):
  ``fitc Zopt``      FITC-EP, Z optimised (the benchmark's row);
  ``fitc Zopt cap``  the same with the plateau rule off (``--cap``: twonorm takes minutes);
  ``fitc Zfix``      FITC-EP, Z fixed at Z0;
  ``dtc Zopt``       ``EP(approximation="dtc")``, Z optimised;
  ``dtc Zfix``       DTC-EP, Z fixed at Z0;
gpdsl EP without optimisation (``fit(optimize=False)``) at another run's hyperparameters and Z:
  ``fitc@gpy``, ``dtc@gpy``  at GPy's fitted ones; ``dtc@fitc``  DTC-EP at gpdsl's FITC-EP fit;
GPy 1.15 (``--python-gpy``; ``SparseGPClassification``, EPDTC, ``ep_mode="alternated"``):
  ``gpy Zopt``       ``m.optimize()`` (the benchmark's row);
  ``gpy Zfix``       the same with ``m.Z.fix()``;
  ``gpy@own``        a new model at GPy's own fitted hyperparameters and Z, no optimisation: EP run
                     again there (``alternated`` runs EP once, at the STARTING hyperparameters, and
                     then optimises VarDTC's bound of the Gaussian regression on those fixed sites:
                     the fitted model predicts with sites from variance 1, lengthscale sqrt(D));
  ``gpy@fitc``       GPy's EP at gpdsl's FITC-EP fitted hyperparameters and Z, no optimisation
                     (``--gpy-at-gpdsl``: one GPy EP run, pure Python, minutes on twonorm).

Every run is in this process or one GPy subprocess, with one BLAS / OpenMP / Numba thread.

    PYTHONPATH=. python benchmarks/exp_fitc_vs_dtc.py --datasets breast --seeds 0,1,2,3,4 \\
        --python-gpy /tmp/peer-gpy/bin/python --gpy-at-gpdsl --json breast.json
    PYTHONPATH=. python benchmarks/exp_fitc_vs_dtc.py --datasets twonorm --seeds 0,1 \\
        --python-gpy /tmp/peer-gpy/bin/python --cap --no-gpy-zfix --json twonorm.json
"""
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
MAX_ITER = 1000


def nlpd_and_error(p_true):
    p = np.clip(p_true, 1e-300, 1.0)
    return float(-np.mean(np.log(p))), float(np.mean(p < 0.5))


# ------------------------------------------------------------------------------------- GPy
def gpy_worker(data_path, out_path, seed, at_path, zfix=True):
    from threadpoolctl import threadpool_limits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import GPy
    d = dict(np.load(data_path))
    X, y, Xte, yte, Z0 = d["X"], d["y"], d["Xte"], d["yte"], d["Z0"]
    D, Y = X.shape[1], (d["y"] > 0).astype(float)[:, None]
    rows = []

    def report(name, m, t0, extra=None):
        p1 = m.predict(Xte)[0][:, 0]
        nlpd, err = nlpd_and_error(np.where(yte > 0, p1, 1.0 - p1))
        rows.append(dict(run=name, nlpd=nlpd, err=err, variance=float(np.ravel(m.kern.variance)[0]),
                         lengthscale=float(np.ravel(m.kern.lengthscale)[0]), objective=float(m.log_likelihood()),
                         cpu=time.process_time() - t0, **(extra or {})))
        print(json.dumps(rows[-1]), flush=True)

    def model(Z, ls, var):
        return GPy.models.SparseGPClassification(X, Y, Z=np.array(Z, dtype=float),
                                                 kernel=GPy.kern.RBF(D, lengthscale=ls, variance=var))
    fitted = {}
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, fix_z in (("gpy Zopt", False), ("gpy Zfix", True))[:2 if zfix else 1]:
            np.random.seed(seed)
            t0 = time.process_time()
            m = model(Z0, math.sqrt(D), 1.0)
            if fix_z:
                m.Z.fix()
            m.optimize()
            report(name, m, t0, {"status": m.optimization_runs[-1].status})
            if not fix_z:
                fitted = dict(Z=np.array(m.Z), ls=float(np.ravel(m.kern.lengthscale)[0]),
                              var=float(np.ravel(m.kern.variance)[0]))
        np.random.seed(seed)
        t0 = time.process_time()
        report("gpy@own", model(fitted["Z"], fitted["ls"], fitted["var"]), t0)
        if at_path:
            a = dict(np.load(at_path))
            np.random.seed(seed)
            t0 = time.process_time()
            report("gpy@fitc", model(a["Z"], float(a["ls"]), float(a["var"])), t0)
    np.savez(out_path, Z=fitted["Z"], ls=fitted["ls"], var=fitted["var"])
    print("ROWS " + json.dumps(rows), flush=True)


def run_gpy(args, data_path, tmp, seed, at_path):
    out = os.path.join(tmp, "gpy_fit.npz")
    cmd = [args.python_gpy, os.path.abspath(__file__), "--gpy-worker", data_path, out, str(seed), at_path or "",
           "0" if args.no_gpy_zfix else "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("ROWS "):
            return json.loads(line[5:]), dict(np.load(out))
    raise RuntimeError(f"GPy worker failed (rc {proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")


# ------------------------------------------------------------------------------------ gpdsl
def gpdsl_run(d, name, approx, Z, ls, var, optimise_z, optimize=True, plateau=True):
    import gpdsl as gd
    import gpdsl.fitting
    from threadpoolctl import threadpool_limits
    saved = gpdsl.fitting.PLATEAU_PER_POINT
    if not plateau:
        gpdsl.fitting.PLATEAU_PER_POINT = 0.0
    inducing = gd.inducing.Optimized(gd.inducing.Fixed(Z)) if optimise_z else gd.inducing.Fixed(Z)
    model = gd.Model(kernel=gd.kernels.SquaredExponential(ls, var), likelihood=gd.likelihoods.Bernoulli("probit"),
                     inducing=inducing, inference=gd.inference.EP(approximation=approx))
    try:
        with threadpool_limits(1), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.process_time()
            post = model.fit(d["X"], d["y"], fixed=("likelihood.bias",), max_iter=MAX_ITER, optimize=optimize)
            cpu = time.process_time() - t0
            nlpd, err = nlpd_and_error(np.exp(post.log_predictive(d["Xte"], d["yte"])))
    finally:
        gpdsl.fitting.PLATEAU_PER_POINT = saved
    row = dict(run=name, nlpd=nlpd, err=err, variance=float(post.values["kernel.variance"]),
               lengthscale=float(np.ravel(post.values["kernel.lengthscale"])[0]), objective=post.log_evidence,
               iters=post.n_iterations, cpu=cpu, bias=float(post.values["likelihood.bias"]), ridge=getattr(post, "ridge", None),
               warnings=sorted({w.category.__name__ for w in caught}))
    print(json.dumps(row), flush=True)
    return row, post


def main(argv=None):
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--gpy-worker":
        return gpy_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] or None, sys.argv[6] == "1")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="twonorm,breast")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--m", type=int, default=128)
    p.add_argument("--python-gpy", default=None, help="interpreter with GPy (no GPy rows without it)")
    p.add_argument("--gpy-at-gpdsl", action="store_true", help="also GPy's EP at gpdsl's FITC-EP fit")
    p.add_argument("--no-gpy-zfix", action="store_true", help="leave out the GPy Z-fixed fit (minutes on twonorm)")
    p.add_argument("--cap", action="store_true", help="also FITC-EP with the plateau rule off")
    p.add_argument("--twonorm", default="/work/shared/data/raetsch_twonorm/raetsch_twonorm.csv")
    p.add_argument("--timeout", type=float, default=3600.0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from bench_ep_peers import prepare
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for ds in args.datasets.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                d = prepare(ds, seed, args.m, args)
                D, Z0 = d["X"].shape[1], d["Z0"]
                print(f"# {ds} seed {seed}: N={len(d['y'])}, test {len(d['yte'])}, sum(Z0)={Z0.sum():.10g}", flush=True)
                rows = []
                start = (math.sqrt(D), 1.0)
                r, fitc = gpdsl_run(d, "fitc Zopt", "fitc", Z0, *start, True)
                rows.append(r)
                if args.cap:
                    rows.append(gpdsl_run(d, "fitc Zopt cap", "fitc", Z0, *start, True, plateau=False)[0])
                rows.append(gpdsl_run(d, "fitc Zfix", "fitc", Z0, *start, False)[0])
                rows.append(gpdsl_run(d, "dtc Zopt", "dtc", Z0, *start, True)[0])
                rows.append(gpdsl_run(d, "dtc Zfix", "dtc", Z0, *start, False)[0])
                at = dict(Z=fitc.state.Z, ls=rows[0]["lengthscale"], var=rows[0]["variance"])
                rows.append(gpdsl_run(d, "dtc@fitc", "dtc", at["Z"], at["ls"], at["var"], False, optimize=False)[0])
                if args.python_gpy:
                    path = os.path.join(tmp, "data.npz")
                    np.savez(path, **d)
                    at_path = None
                    if args.gpy_at_gpdsl:
                        at_path = os.path.join(tmp, "at.npz")
                        np.savez(at_path, **at)
                    gpy_rows, g = run_gpy(args, path, tmp, seed, at_path)
                    for gr in gpy_rows:
                        print(json.dumps(gr), flush=True)
                    rows += gpy_rows
                    for approx in ("fitc", "dtc"):
                        rows.append(gpdsl_run(d, f"{approx}@gpy", approx, g["Z"], float(g["ls"]), float(g["var"]),
                                              False, optimize=False)[0])
                for r in rows:
                    r.update(ds=ds, seed=seed)
                results += rows
                print(f"{'run':<14s} {'NLPD':>7s} {'error':>6s} {'variance':>9s} {'lscale':>7s} {'iters':>5s} "
                      f"{'CPU s':>7s} {'objective':>10s}")
                for r in rows:
                    print(f"{r['run']:<14s} {r['nlpd']:7.4f} {r['err']:6.4f} {r['variance']:9.4g} "
                          f"{r['lengthscale']:7.4g} {str(r.get('iters', '')):>5s} {r['cpu']:7.1f} "
                          f"{r['objective']:10.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
