"""Issue 46: robust-max's epsilon learnt (``"likelihood.epsilon"``, the default) against held at its
start 1e-3 (``fit(fixed=("likelihood.epsilon",))``, GPflow's non-trainable ``RobustMax``).

Two fits, each in a process of its own (one JSON line each; the load average beside it):

* ``peer``: ``peer_multiclass.py``'s ``svgp-robustmax-minibatch`` (letter, digits, penbased at
  ``multiclass_data.py``'s splits): isotropic SE(1, 1), Z optimised from the shared k-means(100)
  start, ``SVGP(batch_size=256, seed=--seed)``, ``fit(max_iter=2000)``, every other option at its
  default: robust-max "at its default settings" as issue 46's letter criterion runs it.
* ``classifier``: ``GPClassifier(likelihood=Categorical(K, "robustmax"), random_state=--seed)`` (the
  defaults' method, inducing and steps with the link given), on the four sets of
  ``bench_multiclass_defaults.py`` (the synthetic 10^4 x 10 set included); ``--link softmax`` gives
  the softmax row to compare the link rule with, ``--link auto`` ``GPClassifier()`` itself.

Printed: process CPU of the fit, test NLPD (mean -log p of the true class), test error, steps, the
fitted epsilon, converged, ``uptime``'s load average before and after.

    python3 benchmarks/exp_robustmax_epsilon.py --fit peer --sets letter --seeds 0 1 2
    python3 benchmarks/exp_robustmax_epsilon.py --fit classifier --sets digits penbased synth
    python3 benchmarks/exp_robustmax_epsilon.py --fit classifier --sets letter --link softmax --epsilon learnt
"""
import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))            # this checkout's gpdsl
sys.path.insert(0, HERE)

SETS = ("digits", "letter", "penbased", "synth")
EPSILON = ("learnt", "fixed")


def load():
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def one(fit, name, seed, epsilon, link):
    """One fit in this process: a dict of its figures."""
    import gpdsl as gd
    from bench_multiclass_defaults import data
    from gpdsl.sklearn import GPClassifier
    d = data(name)
    K = int(d["K"])
    fixed = ("likelihood.epsilon",) if epsilon == "fixed" and link == "robustmax" else ()
    before = load()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c0 = time.process_time()
        if fit == "peer":
            model = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Categorical(K, link),
                             gd.inducing.Optimized(d["Z"]), gd.inference.SVGP(batch_size=256, seed=seed))
            post = model.fit(d["X"], d["y"].astype(float), max_iter=2000, fixed=fixed)
            cpu = time.process_time() - c0
            p = post.predict(d["Xte"])["p"].values
        else:
            likelihood = None if link == "auto" else gd.likelihoods.Categorical(K, link)
            clf = GPClassifier(likelihood=likelihood, fixed=fixed, random_state=seed).fit(d["X"], d["y"])
            cpu = time.process_time() - c0
            post = clf.posterior_
            p = np.zeros((d["Xte"].shape[0], K))
            p[:, clf.classes_] = clf.predict_proba(d["Xte"])
            link = post.model.likelihood.link
    yte = np.asarray(d["yte"]).astype(int)
    picked = np.clip(p[np.arange(yte.size), yte], 1e-300, None)
    eps = post.values.get("likelihood.epsilon")
    return {"fit": fit, "set": name, "seed": seed, "link": link, "epsilon_rule": epsilon, "cpu_s": round(cpu, 2),
            "nlpd": round(float(-np.mean(np.log(picked))), 4),
            "error": round(float(np.mean(np.argmax(p, 1) != yte)), 4),
            "steps": int(post.n_iterations), "epsilon": None if eps is None else float(eps),
            "converged": bool(post.converged), "load_before": before, "load_after": load()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fit", choices=("peer", "classifier"), default="peer")
    p.add_argument("--sets", nargs="*", default=["letter"], choices=SETS)
    p.add_argument("--seeds", nargs="*", type=int, default=[0])
    p.add_argument("--epsilon", nargs="*", default=list(EPSILON), choices=EPSILON)
    p.add_argument("--link", default="robustmax", choices=("robustmax", "softmax", "auto"))
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)   # the worker
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.fit, args.sets[0], args.seeds[0], args.epsilon[0], args.link)), flush=True)
        return
    if args.fit == "peer" and "synth" in args.sets:
        p.error("--fit peer runs the sets of multiclass_data.py (digits, letter, penbased)")
    for name in args.sets:
        for seed in args.seeds:
            for epsilon in args.epsilon:
                cmd = [sys.executable, __file__, "--one", "--fit", args.fit, "--sets", name, "--seeds", str(seed),
                       "--epsilon", epsilon, "--link", args.link]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                print(out.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
