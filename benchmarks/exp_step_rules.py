"""Issue 46: the minibatch step rules of SVGP(batch_size=B) on the multi-class benchmark data.

One minibatch fit of ``gd.inference.SVGP(batch_size=B, **options)`` on a split of
``multiclass_data.py`` (the benchmark's isotropic SE start and k-means Z, optimised), printed as
one JSON line: CPU, steps, converged, the full-pass check's message, the full ELBO, the
hyperparameters and the test error and NLPD.  ``--refit-q`` then moves q to its full-batch optimum
at the fitted hyperparameters and Z (``optimize=False``) and prints that posterior's ELBO and
test NLPD too: what the fit's q left on the table, apart from the hyperparameters.

    python3 benchmarks/exp_step_rules.py --data letter --link robustmax
    python3 benchmarks/exp_step_rules.py --data letter --n-train 3000 --link robustmax --opt natural_step=0.05
    python3 benchmarks/exp_step_rules.py --mean-check          # issue 45's constant-mean case

``--mean-check`` fits issue 45's constant-mean problem instead (Gaussian, 5 plus a sine, N = 5,000 by
default (``--n-train``), ``Constant`` mean from 0, B = ``--batch``): the mean the minibatch fit
reaches against the full-batch fit's.
"""
import argparse
import ast
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

import gpdsl as gd  # noqa: E402


def parse_options(pairs):
    out = {}
    for pair in pairs:
        key, value = pair.split("=", 1)
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def classification(args, options):
    from multiclass_data import load_problem, prepare
    d = load_problem(prepare(args.data, args.M, n_train=args.n_train))
    spec = gd.inference.SVGP(batch_size=args.batch, seed=args.seed, **options)
    model = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Categorical(d["K"], args.link),
                     gd.inducing.Optimized(d["Z"]), spec)
    checks = _record_checks()
    load0 = os.getloadavg()[0]
    c0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = model.fit(d["X"], d["y"].astype(float), max_iter=args.steps)
    cpu = time.process_time() - c0
    out = {"data": args.data, "N": int(d["X"].shape[0]), "link": args.link, "options": options, "cpu_s": round(cpu, 2),
           "load": round(load0, 2), "steps": int(post.n_iterations), "converged": bool(post.converged),
           **_scores(post, d), "lengthscale": float(post.values["kernel.lengthscale"]),
           "variance": float(post.values["kernel.variance"]), "message": post.diagnostics.message[-260:],
           "full_pass_gradients": checks}
    if args.refit_q:
        full = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Categorical(d["K"], args.link),
                        gd.inducing.Optimized(d["Z"]), gd.inference.SVGP(q_max_iter=args.refit_q))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            refit = full.fit(d["X"], d["y"].astype(float), optimize=False, start=post.values)
        out["refit_q"] = _scores(refit, d)
    print(json.dumps(out), flush=True)


def _record_checks():
    """The full-pass checks' largest entries and the gradient of the objective (not its negative) in
    the kernel's hyperparameters, as the run makes them."""
    from gpdsl.methods import stochastic
    seen, check = [], stochastic.full_pass_check

    def recording(objective, u, q, *args, **kwargs):
        out = check(objective, u, q, *args, **kwargs)
        names = [k for k in objective.table.names() if not k.startswith("inducing.")]
        seen.append({"largest": round(out.largest, 3), "name": out.name,
                     **{k: round(-float(g), 3) for k, g in zip(names, out.gradient[:len(names)])}})
        return out

    stochastic.full_pass_check = recording
    return seen


def _scores(post, d):
    probs = post.predict(d["Xte"])["p"].values
    p_true = np.clip(probs[np.arange(len(d["yte"])), d["yte"]], 1e-300, 1.0)
    return {"elbo": round(float(post.log_evidence), 2), "test_error": float(np.mean(np.argmax(probs, 1) != d["yte"])),
            "test_nlpd": round(float(-np.mean(np.log(p_true))), 4)}


def mean_check(args, options):
    """Issue 45's constant-mean case (tests/test_minibatch_convergence.py's data) at N = 5,000, above
    the polish's 2,000 rows: y = 5 + sin(2 x) + N(0, 1), x uniform on [-3, 3], KMeans(20), B = 100."""
    rng = np.random.default_rng(0)
    n = args.n_train or 5000
    X = rng.uniform(-3.0, 3.0, size=(n, 1))
    y = 5.0 + np.sin(2.0 * X[:, 0]) + rng.standard_normal(n)
    out = {"N": n, "options": options}
    for name, spec in (("minibatch", gd.inference.SVGP(batch_size=args.batch, seed=args.seed, **options)),
                       ("full", gd.inference.SVGP())):
        model = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Gaussian(), gd.inducing.KMeans(20, seed=0),
                         spec, mean=gd.means.Constant())
        c0 = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            post = model.fit(X, y, max_iter=args.steps)
        out[name] = {"mean": round(float(post.values["mean.constant"]), 4), "steps": int(post.n_iterations),
                     "converged": bool(post.converged), "elbo": round(float(post.log_evidence), 2),
                     "cpu_s": round(time.process_time() - c0, 2), "message": post.diagnostics.message[-200:]}
    print(json.dumps(out), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="letter")
    p.add_argument("--link", default="robustmax")
    p.add_argument("--M", type=int, default=100)
    p.add_argument("--n-train", type=int)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--refit-q", type=int, default=0, help="q_max_iter of the full-batch q at the fit's end (0: none)")
    p.add_argument("--mean-check", action="store_true")
    p.add_argument("--opt", action="append", default=[], help="SVGP option key=value (repeatable)")
    args = p.parse_args()
    options = parse_options(args.opt)
    (mean_check if args.mean_check else classification)(args, options)


if __name__ == "__main__":
    main()
