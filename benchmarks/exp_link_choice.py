"""Issue 46: the measurements behind GPClassifier's K-class link choice and its Z treatment
(``gpdsl.defaults``: ``link_pilot``, ``link_choice``; ``gpdsl.sklearn.choose_link``).

Four experiments on ``bench_multiclass_defaults.py``'s sets (digits, letter, penbased: the issue-28
splits; synth: ``make_classification``'s 10^4 x 10 set), each printing process CPU seconds and the
machine's load beside its numbers:

* ``--links``: ``GPClassifier(likelihood=Categorical(K, link))`` for robust-max and softmax (the
  defaults otherwise), the full-data ELBO (``log_evidence``) and the test NLPD of each: does the
  converged bound rank the links as the test NLPD does?
* ``--pilots``: short fits of both links (``SVGP(batch_size=256)``, ``KMeans(M)`` fixed, S steps):
  does a short pilot's bound rank them as the full fits do?
* ``--pilot-error``: the softmax pilot alone at (M, S), its training error (arg-max of the latent
  mean on the rows ``choose_link`` counts: all up to 5,000, else 5,000 at random) and test error: the overlap signal ``link_choice`` reads;
* ``--inducing``: the defaults with Z optimised from the k-means start (``Optimized(KMeans(100))``)
  against k-means fixed (``KMeans(100)``), at the chosen link and the default step cap;
* ``--epsilon``: robust-max's test NLPD on letter with its epsilon changed after the fit (the q
  fitted at epsilon = 1e-3 predicting at others): how much of its loss a larger epsilon recovers.

    python3 benchmarks/exp_link_choice.py --links --sets digits letter
    python3 benchmarks/exp_link_choice.py --pilot-error
"""
import argparse
import dataclasses
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))            # this checkout's gpdsl
sys.path.insert(0, HERE)

from bench_multiclass_defaults import SETS, data  # noqa: E402

PILOTS = ((20, 200), (20, 400), (50, 200))
PILOT_ERRORS = ((20, 200), (50, 200), (50, 400))
EPSILONS = (1e-3, 3e-3, 1e-2, 2e-2, 5e-2, 1e-1)


def load():
    return f"load {os.getloadavg()[0]:.1f}"


def codes_of(d):
    classes = np.unique(d["y"])
    return classes, np.searchsorted(classes, d["y"]), np.searchsorted(classes, d["yte"])


def nlpd(p, yte):
    return float(-np.mean(np.log(np.clip(p[np.arange(len(yte)), yte], 1e-300, 1.0))))


def links(name, d):
    import gpdsl as gd
    from gpdsl.sklearn import GPClassifier
    classes, _, yte = codes_of(d)
    for link in ("robustmax", "softmax"):
        c0 = time.process_time()
        clf = GPClassifier(likelihood=gd.likelihoods.Categorical(len(classes), link)).fit(d["X"], d["y"])
        cpu = time.process_time() - c0
        post = clf.posterior_
        print(f"{name} {link}: CPU {cpu:.1f} s, steps {post.n_iterations}, ELBO {post.log_evidence:.1f} "
              f"({post.log_evidence / len(d['y']):.4f} a row), test NLPD {nlpd(clf.predict_proba(d['Xte']), yte):.4f}; "
              f"{load()}", flush=True)


def pilot_model(K, link, M):
    import gpdsl as gd
    return gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Categorical(K, link),
                    gd.inducing.KMeans(M, seed=0), gd.inference.SVGP(batch_size=256, seed=0))


def pilots(name, d):
    classes, codes, _ = codes_of(d)
    for M, S in PILOTS:
        out = []
        for link in ("robustmax", "softmax"):
            c0 = time.process_time()
            post = pilot_model(len(classes), link, M).fit(d["X"], codes, max_iter=S)
            out.append((link, time.process_time() - c0, post.log_evidence / len(codes)))
        print(f"{name} M {M}, {S} steps: " + " | ".join(f"{link} {cpu:.1f} s, ELBO {e:.4f} a row" for link, cpu, e in out)
              + f" -> higher: {max(out, key=lambda t: t[2])[0]}; {load()}", flush=True)


def pilot_errors(name, d):
    from gpdsl import defaults
    classes, codes, yte = codes_of(d)
    for M, S in PILOT_ERRORS:
        c0 = time.process_time()
        post = pilot_model(len(classes), "softmax", M).fit(d["X"], codes, max_iter=S)
        cpu = time.process_time() - c0
        # The rows choose_link counts on: all up to PILOT_ERROR_ROWS, else that many at random.
        n, cap = len(codes), defaults.PILOT_ERROR_ROWS
        rows = np.arange(n) if n <= cap else np.random.default_rng(0).permutation(n)[:cap]
        train = np.argmax(np.asarray(post.predict_f(d["X"][rows])[0]), 1) != codes[rows]
        test = np.argmax(np.asarray(post.predict_f(d["Xte"])[0]), 1) != yte
        print(f"{name} softmax pilot M {M}, {S} steps: CPU {cpu:.1f} s, training error {train.mean():.4f}, "
              f"test error {test.mean():.4f}; {load()}", flush=True)


def inducing(name, d):
    import gpdsl as gd
    from gpdsl.sklearn import GPClassifier
    _, _, yte = codes_of(d)
    for label, spec in (("optimised", gd.inducing.Optimized(gd.inducing.KMeans(100, seed=0))),
                        ("fixed", gd.inducing.KMeans(100, seed=0))):
        c0 = time.process_time()
        clf = GPClassifier(inducing=spec).fit(d["X"], d["y"])
        cpu = time.process_time() - c0
        print(f"{name} Z {label}: link {clf.link_choice_.link}, CPU {cpu:.1f} s, steps {clf.posterior_.n_iterations}, "
              f"test NLPD {nlpd(clf.predict_proba(d['Xte']), yte):.4f}; {load()}", flush=True)


def epsilon(name, d):
    import gpdsl as gd
    from gpdsl.sklearn import GPClassifier
    classes, codes, yte = codes_of(d)
    clf = GPClassifier(likelihood=gd.likelihoods.Categorical(len(classes), "robustmax")).fit(d["X"], d["y"])
    post = clf.posterior_
    mean, var = (np.asarray(a) for a in post.predict_f(d["Xte"]))
    likelihood = post.model.likelihood
    for eps in EPSILONS:
        changed = dataclasses.replace(likelihood, epsilon=eps)
        print(f"{name} robust-max fitted at epsilon 1e-3, predicting at {eps:g}: test NLPD "
              f"{-np.mean(changed.log_predictive(mean, var, yte.astype(float))):.4f}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="*", default=list(SETS), choices=SETS)
    for flag in ("links", "pilots", "pilot-error", "inducing", "epsilon"):
        p.add_argument(f"--{flag}", action="store_true")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; {load()}")
    for name in args.sets:
        d = data(name)
        for flag, run in (("links", links), ("pilots", pilots), ("pilot_error", pilot_errors),
                          ("inducing", inducing), ("epsilon", epsilon)):
            if getattr(args, flag):
                run(name, d)


if __name__ == "__main__":
    main()
