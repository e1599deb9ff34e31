"""Full SVGP classification fits on twonorm (6,660 x 20 training rows, M = 128 k-means inducing
inputs), against the GPflow SVGP figure reported in the issue.

Set-up (as ``bench_ep_peers.py``): ``raetsch_twonorm.csv`` (7,400 x 20), a random 90/10 split
seeded by ``--seed`` (6,660 training / 740 test rows), X standardised with the training mean and
sd; an isotropic SE kernel starting at lengthscale sqrt(20), variance 1; ``Bernoulli`` with the
logit and / or probit link and its bias fixed at 0 (GPflow's SVGP has a zero mean function);
``gd.inducing.KMeans(128, seed=0)`` (Z fixed at the k-means centres of the training X); then

    gd.Model(kernel, likelihood, KMeans(128, seed=0), gd.inference.SVGP(**options)).fit(
        X, y, fixed=("likelihood.bias",))

i.e. the whitened q(u) (m: M values, q_sqrt: M (M + 1) / 2 = 8,256 values) moved to its
optimum by natural-gradient steps at every evaluation, L-BFGS-B on the kernel hyperparameters
(``q_updates="natural"``, the default), or optimised jointly with them by L-BFGS-B
(``--svgp-options q_updates='joint'``, GPflow's way).  ``--svgp-options key=value,...`` passes
options to ``gd.inference.SVGP``, each value read as a Python literal where it parses as one.

Timed: construction + fit + the final state (``time.process_time`` of the process, i.e. CPU
seconds over every thread, and wall clock), after one untimed warm-up fit on 200 points (Numba
compilation).  The fit runs in the default environment: BLAS / Numba thread counts as the
machine's defaults and gpdsl's own thread policy (:mod:`gpdsl.threads`) leave them, unless
``--threads K`` limits them (threadpoolctl).  Each link is fitted with fit's stopping rule
(``--plateau on``) and with the plateau rule switched off (``off``: SciPy's tests and max_iter
alone, ``gpdsl.fitting.PLATEAU_PER_POINT = 0`` as ``bench_ep_peers.py``'s gpdsl-cap).  Printed per
fit: CPU and wall seconds, L-BFGS-B iterations, converged, the ELBO, the fitted lengthscale and
variance, test NLPD (mean -log p(y*|x*), ``post.log_predictive``) and test error rate, warnings,
and (untimed) the *q gap*: the ELBO that ``gpdsl.methods.svgp.optimise_q`` (natural-gradient q
updates, tol 1e-6, under gpdsl's thread policy ``gpdsl.threads.managed`` as fit is) gains from the
fitted q at the fitted hyperparameters, i.e. how far short of its own optimum in q the joint
optimiser stopped.

Reference: the issue writer's GPflow SVGP on the same problem, 102 s CPU, test NLPD 0.066; run
GPflow here on the same split and Z0 with ``--save-data`` and ``benchmarks/peer_gpflow_svgp.py``.

    python benchmarks/bench_svgp.py                      # logit and probit, ~minutes each
    python benchmarks/bench_svgp.py --links logit --threads 1
    python benchmarks/bench_svgp.py --svgp-options chunk_size=2048
"""
import argparse
import ast
import dataclasses
import datetime
import math
import os
import platform
import sys
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import gpdsl as gd  # noqa: E402
import gpdsl.fitting as gdfitting  # noqa: E402
from gpdsl import threads  # noqa: E402
from gpdsl.methods import svgp  # noqa: E402

TWONORM = "/work/shared/data/raetsch_twonorm/raetsch_twonorm.csv"
GPFLOW_REFERENCE = {"cpu": 102.0, "nlpd": 0.066}        # the issue writer's GPflow SVGP


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def prepare(path, seed):
    """The standardised 90/10 split of bench_ep_peers.py and the k-means Z of the training X."""
    X, y = gd.datasets.load_csv(path, target="y")
    n = X.shape[0]
    perm = np.random.default_rng(seed).permutation(n)
    te, tr = perm[:int(round(0.1 * n))], perm[int(round(0.1 * n)):]
    mu, sd = X[tr].mean(0), X[tr].std(0)
    sd[sd == 0] = 1.0
    return (X[tr] - mu) / sd, y[tr], (X[te] - mu) / sd, y[te]


def parse_options(text):
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, _, value = item.partition("=")
        try:
            out[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[key.strip()] = value.strip()
    return out


def model(link, m, D, options):
    return gd.Model(kernel=gd.kernels.SquaredExponential(lengthscale=math.sqrt(D), variance=1.0),
                    likelihood=gd.likelihoods.Bernoulli(link=link),
                    inducing=gd.inducing.KMeans(m, seed=0), inference=gd.inference.SVGP(**options))


def warmup(link, D, options):
    rng = np.random.default_rng(0)
    Xw = rng.standard_normal((200, D))
    yw = np.where(Xw[:, 0] + 0.5 * rng.standard_normal(200) > 0, 1.0, -1.0)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = model(link, 10, D, options).fit(Xw, yw, fixed=("likelihood.bias",), max_iter=20)
        post.log_predictive(Xw, yw)
    return time.perf_counter() - t


def run(link, m, X, y, Xte, yte, options, max_iter, plateau):
    saved = gdfitting.PLATEAU_PER_POINT
    if not plateau:                 # SciPy's tests and max_iter alone, as bench_ep_peers' "gpdsl-cap"
        gdfitting.PLATEAU_PER_POINT = 0.0
    mod = model(link, m, X.shape[1], options)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c0, w0 = time.process_time(), time.perf_counter()
            post = mod.fit(X, y, fixed=("likelihood.bias",), max_iter=max_iter)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    finally:
        gdfitting.PLATEAU_PER_POINT = saved
    logp = np.asarray(post.log_predictive(Xte, yte), dtype=float).ravel()
    nlpd, err = float(-np.mean(logp)), float(np.mean(np.exp(logp) < 0.5))
    # How far the joint optimiser left q from its optimum at the fitted hyperparameters: the
    # natural-gradient q updates (svgp.optimise_q) from the fitted q, untimed.
    yp = mod.likelihood.prepare_targets(y)
    # q is a hyperparameter in the joint mode and the local state in the natural one.
    fitted = {**post.values, **(post.sites.q if post.sites is not None else {})}
    args = (*mod.bind(fitted), fitted, X, yp, post.state.Z)
    elbo = svgp.elbo_terms(*args, jitter=post.jitter).elbo
    t = time.perf_counter()
    q, steps, q_converged = threads.managed(svgp.optimise_q)(*args, jitter=post.jitter, tol=1e-6, max_iter=200)
    q_s = time.perf_counter() - t
    gap = svgp.elbo_terms(*args[:2], {**fitted, **q}, *args[3:], jitter=post.jitter).elbo - elbo
    return {"link": link, "plateau": plateau, "cpu": cpu, "wall": wall, "iters": post.n_iterations,
            "converged": post.converged, "elbo": post.log_evidence, "nlpd": nlpd, "err": err,
            "lengthscale": float(np.ravel(post.values["kernel.lengthscale"])[0]),
            "variance": float(post.values["kernel.variance"]), "ridge": getattr(post, "ridge", None),
            "q_gap": gap, "q_steps": steps, "q_converged": q_converged, "q_s": q_s,
            "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--twonorm", default=TWONORM, help="raetsch_twonorm.csv (header x1..x20,y)")
    p.add_argument("--seed", type=int, default=0, help="split seed (default 0)")
    p.add_argument("--m", type=int, default=128, help="k-means inducing inputs (default 128)")
    p.add_argument("--links", default="logit,probit", help="comma list of logit, probit")
    p.add_argument("--max-iter", type=int, default=1000, help="fit max_iter (default 1000, fit's default)")
    p.add_argument("--plateau", default="on,off",
                   help="comma list: on (fit's stopping rule), off (the plateau rule switched off: SciPy's "
                        "tests and max_iter alone); default both")
    p.add_argument("--svgp-options", default="", help="key=value,... passed to gd.inference.SVGP")
    p.add_argument("--threads", type=int, default=None, help="limit BLAS / Numba threads (default: as they are)")
    p.add_argument("--save-data", metavar="NPZ",
                   help="write the split and the k-means Z0 for benchmarks/peer_gpflow_svgp.py, and stop")
    args = p.parse_args()
    if args.save_data:
        X, y, Xte, yte = prepare(args.twonorm, args.seed)
        Z0 = gd.inducing.KMeans(args.m, seed=0).initial_Z(X, y)
        np.savez(args.save_data, X=X, y=y, Xte=Xte, yte=yte, Z0=Z0)
        print(f"wrote {args.save_data}: train {X.shape}, test {Xte.shape}, Z0 {Z0.shape}")
        return
    options = parse_options(args.svgp_options)
    limits = None
    if args.threads:
        from threadpoolctl import threadpool_limits
        import numba
        limits = threadpool_limits(args.threads)
        numba.set_num_threads(args.threads)

    fields = [f.name for f in dataclasses.fields(gd.inference.SVGP)]
    print(f"bench_svgp  {datetime.datetime.now().isoformat(timespec='seconds')}  {platform.node()}  "
          f"{os.cpu_count()} CPUs, python {platform.python_version()}, numpy {np.__version__}, "
          f"gpdsl {getattr(gd, '__version__', '?')}")
    print(f"load average at start: {loadavg()}; threads: {args.threads or 'default'} "
          f"(OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
          f"NUMBA_NUM_THREADS={os.environ.get('NUMBA_NUM_THREADS')})")
    print(f"gd.inference.SVGP fields: {fields}; options used: {options or 'defaults'} "
          f"-> q_updates={gd.inference.SVGP(**options).q_updates!r}")
    X, y, Xte, yte = prepare(args.twonorm, args.seed)
    print(f"data: twonorm train {X.shape[0]} x {X.shape[1]}, test {Xte.shape[0]} (90/10 split, seed {args.seed}, "
          f"standardised); M = {args.m} k-means (seed 0), Z fixed; SE(sqrt(D), 1); bias fixed at 0")

    rows = []
    plateaus = [v.strip() == "on" for v in args.plateau.split(",") if v.strip()]
    for link in filter(None, (s.strip() for s in args.links.split(","))):
        print(f"\n--- Bernoulli({link!r}) + SVGP: warm-up {warmup(link, X.shape[1], options):.1f} s (untimed)",
              flush=True)
        for plateau in plateaus:
            print(f"    fitting, plateau rule {'on' if plateau else 'off'} [load {loadavg()}]", flush=True)
            r = run(link, args.m, X, y, Xte, yte, options, args.max_iter, plateau)
            rows.append(r)
            print(f"    CPU {r['cpu']:.1f} s, wall {r['wall']:.1f} s, {r['iters']} iterations, "
                  f"converged={r['converged']}, ELBO {r['elbo']:.3f}, lengthscale {r['lengthscale']:.4g}, "
                  f"variance {r['variance']:.4g}, test NLPD {r['nlpd']:.4f}, error {100 * r['err']:.2f} %, "
                  f"ridge={r['ridge']}", flush=True)
            print(f"    q at the fitted hyperparameters: optimise_q gains {r['q_gap']:.4f} nats in {r['q_steps']} "
                  f"natural-gradient steps (converged={r['q_converged']}, {r['q_s']:.1f} s, untimed above)")
            for w in r["warnings"]:
                print(f"    WARNING {w}")

    print(f"\n=== twonorm, M = {args.m}; load average at the end {loadavg()}")
    print("| method | plateau rule | CPU (s) | wall (s) | iterations | converged | ELBO | q gap (nats) "
          "| test NLPD | test error |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| gpdsl SVGP {r['link']} | {'on' if r['plateau'] else 'off'} | {r['cpu']:.1f} | {r['wall']:.1f} | "
              f"{r['iters']} | {r['converged']} | {r['elbo']:.2f} | {r['q_gap']:.3f} | {r['nlpd']:.4f} | "
              f"{100 * r['err']:.2f} % |")
    print(f"| GPflow SVGP (issue, not run here) | | {GPFLOW_REFERENCE['cpu']:.0f} | | | | | | "
          f"{GPFLOW_REFERENCE['nlpd']:.3f} | |")
    for r in rows:
        print(f"{r['link']}, plateau {'on' if r['plateau'] else 'off'}: GPflow CPU / gpdsl CPU = "
              f"{GPFLOW_REFERENCE['cpu'] / r['cpu']:.2f}x, NLPD {r['nlpd']:.4f} vs {GPFLOW_REFERENCE['nlpd']:.3f}")
    if limits is not None:
        limits.restore_original_limits()


if __name__ == "__main__":
    main()
