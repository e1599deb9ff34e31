"""Issue 46: ``GPClassifier()``'s defaults with the minibatch size, the inducing size or the step cap
replaced, on the multi-class sets of ``bench_multiclass_defaults.py``.

The declaration is the defaults' own (:func:`gpdsl.defaults.declaration`: the link chosen by the
pilot, k-means Z optimised, ``SVGP(batch_size, seed)``), with ``batch_size`` set to ``--batch``
(at most N) and, with ``--m``, ``Optimized(KMeans(m))`` for the inducing spec; ``--cap`` is
``GPClassifier(max_iter=...)``; ``--link softmax`` (or ``robustmax``) gives the classifier
``Categorical(K, link)`` instead of the pilot's choice (robust-max's epsilon then learnt, where the
pilot's choice holds it at 1e-3 on well-separated sets); ``--start sklearn`` starts Z at
scikit-learn's k-means centres (``multiclass_data.kmeans_start``, the peer benchmark's start,
seeded by the fit's seed; its time is counted where gpdsl's k-means would be) instead of gpdsl's
``KMeans``.  Each fit runs in a fresh process (one JSON line: the set, the settings, the seed,
steps, process CPU s of the fit, test NLPD, the chosen link, ``converged``, the load average
before and after).

    OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_batch_size.py --sets letter --batch 256 384 512 --seeds 0 1
    OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_batch_size.py --sets letter --batch 384 --cap 1000 1200
    OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_batch_size.py --sets digits penbased synth --start sklearn --seeds 0 1
"""
import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))            # this checkout's gpdsl
sys.path.insert(0, HERE)

from bench_multiclass_defaults import SETS, data, load  # noqa: E402
from multiclass_data import kmeans_start  # noqa: E402


def one(name, batch, m, cap, seed, link, start):
    """Fit GPClassifier() with the declaration's batch (and M) replaced; returns the JSON record."""
    import numpy as np
    from sklearn.metrics import log_loss

    from gpdsl import defaults, inducing, likelihoods
    from gpdsl.sklearn import GPClassifier

    declaration = defaults.declaration

    def replaced(n_rows, *args, **kwargs):
        chosen = declaration(n_rows, *args, **kwargs)
        size = min(m or defaults.INDUCING_POINTS, n_rows)
        if m is not None:
            sample = defaults.KMEANS_SAMPLE if n_rows > defaults.KMEANS_SAMPLE else None
            chosen["inducing"] = inducing.Optimized(inducing.KMeans(size, seed=chosen["inference"].seed, sample=sample))
        if start == "sklearn":
            chosen["inducing"] = inducing.Optimized(kmeans_start(d["X"], size, seed))
        return {**chosen, "inference": dataclasses.replace(chosen["inference"], batch_size=min(batch, n_rows))}

    defaults.declaration = replaced
    d = data(name)
    before = load()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c0 = time.process_time()
        given = {} if cap is None else {"max_iter": cap}
        if link != "auto":
            given["likelihood"] = likelihoods.Categorical(d["K"], link)
        clf = GPClassifier(random_state=seed, **given).fit(d["X"], d["y"])
        cpu = time.process_time() - c0
    proba = clf.predict_proba(d["Xte"])
    post = clf.posterior_
    nlpd = float(log_loss(d["yte"], proba, labels=clf.classes_))
    return {"set": name, "batch": batch, "m": m, "cap": cap, "seed": seed, "start": start,
            "steps": int(post.n_iterations), "cpu": round(cpu, 2), "nlpd": round(nlpd, 4),
            "link": clf.model_.likelihood.link, "converged": bool(post.converged), "load": [before, load()]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="+", default=["letter"], choices=SETS)
    p.add_argument("--batch", nargs="+", type=int, default=[256])
    p.add_argument("--m", type=int, default=None, help="k-means inducing size (default: the defaults' 100)")
    p.add_argument("--cap", nargs="+", type=int, default=[None])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--link", default="auto", choices=["auto", "softmax", "robustmax"])
    p.add_argument("--start", default="gpdsl", choices=["gpdsl", "sklearn"])
    p.add_argument("--one", nargs=7, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        name, batch, m, cap, seed, link, start = args.one
        print(json.dumps(one(name, int(batch), None if m == "None" else int(m), None if cap == "None" else int(cap),
                             int(seed), link, start)), flush=True)
        return
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {load()}", flush=True)
    for name in args.sets:
        for batch in args.batch:
            for cap in args.cap:
                for seed in args.seeds:
                    subprocess.run([sys.executable, __file__, "--one", name, str(batch), str(args.m), str(cap),
                                    str(seed), args.link, args.start], check=True)


if __name__ == "__main__":
    main()
