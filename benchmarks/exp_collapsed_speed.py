"""The collapsed logistic-softmax augmentation's fit cost (issue 46, "a fast collapsed augmentation"):
fit CPU, L-BFGS-B evaluations, local sweeps (O(N K M^2) passes), mean steps (O(N K M) evaluations
of the mean steps between them) and test NLPD of
``PolyaGamma()`` with ``Categorical(K, "logistic_softmax")``, as ``peer_multiclass.py --method
augmented`` fits it (isotropic SE start lengthscale 1 and variance 1, Z optimised from the
shared k-means start, every other option at its default unless given here).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_collapsed_speed.py digits
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_collapsed_speed.py synth --profile 25
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_collapsed_speed.py penbased --n-train 3000

Data: ``digits``, ``penbased``, ``letter`` (``multiclass_data.py``'s splits and k-means start),
``classification`` (``bench_multiclass_defaults.py``'s 10^4 x 10 ``make_classification`` set), or
``synth``: N = 10,000 training and 2,000 test rows, D = 8 standard-normal inputs, K = 10 classes
from the argmax of K random-Fourier-feature draws of an SE GP (lengthscale 2, 200 features) plus
Gumbel noise of scale 0.3 (a Bayes error of a few per cent), its Z the k-means centres as for
the others.  Prints one JSON line per fit: process CPU of the fit (warm: a small fit runs first
to load the Numba kernels), evaluations (calls of the collapsed bound), their sweeps in total and
the largest, the mean steps in total, the optimiser's iterations, converged, test error and NLPD, and the load averages
before and after (the machine's other load makes CPU seconds noisy: compare runs made together).
``--profile S`` prints cProfile's top functions by total time instead of running to convergence
(``max_iter`` S optimiser iterations).  ``--save PATH`` writes the fit's hyperparameters and Z;
``--evaluate-at PATH`` runs, instead of a fit, one cold evaluation of the collapsed bound there at
``tol`` (1e-6): run by two versions of gpdsl, it says whether they reach the same fixed point.
"""
import argparse
import cProfile
import json
import os
import pstats
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import gpdsl as gd  # noqa: E402
from gpdsl.methods import logistic_softmax  # noqa: E402


def synth(n=10_000, n_test=2_000, D=8, K=10, lengthscale=2.0, features=200, noise=0.3, seed=0, M=100):
    """The 10^4 x 10 synthetic set of the module docstring, with its k-means Z (M centres)."""
    from multiclass_data import kmeans_start
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n + n_test, D))
    W = rng.standard_normal((D, features)) / lengthscale
    b = rng.uniform(0.0, 2.0 * np.pi, features)
    f = np.sqrt(2.0 / features) * np.cos(X @ W + b) @ rng.standard_normal((features, K)) * 3.0
    y = np.argmax(f + noise * rng.gumbel(size=f.shape), axis=1)
    return {"X": X[:n], "y": y[:n], "Xte": X[n:], "yte": y[n:], "K": K, "Z": kmeans_start(X[:n], M), "name": "synth"}


def classification(M):
    """``bench_multiclass_defaults.py``'s 10^4 x 10 ``make_classification`` set, its Z the k-means
    centres of its training rows."""
    from bench_multiclass_defaults import synthetic
    from multiclass_data import kmeans_start
    d = synthetic()
    return {**d, "Z": kmeans_start(d["X"], M), "name": "make_classification"}


def problem(name, M, n_train):
    if name == "synth":
        return synth(n=n_train or 10_000, M=M)
    if name == "classification":
        return classification(M)
    from multiclass_data import load_problem, prepare
    return load_problem(prepare(name, M, n_train))


class Counter:
    """Counts the collapsed evaluations and their sweeps (wraps logistic_softmax.evaluate)."""

    def __init__(self):
        self.inner = logistic_softmax.evaluate
        self.calls, self.sweeps, self.mean_steps = 0, [], []
        logistic_softmax.evaluate = self

    def __call__(self, *args, **kwargs):
        ev = self.inner(*args, **kwargs)
        self.calls += 1
        self.sweeps.append(int(ev.warm.sweeps))
        self.mean_steps.append(int(ev.warm.mean_steps))
        return ev


def evaluate_at(d, spec, path):
    """One cold collapsed evaluation (no warm start, tol ``spec.tol``) at the hyperparameters and Z
    that ``--save`` wrote: the fixed point the ascent reaches there, its bound and its cost."""
    saved = np.load(path)
    kernel = gd.kernels.SquaredExponential(float(saved["lengthscale"]), float(saved["variance"]))
    likelihood = gd.likelihoods.Categorical(d["K"], "logistic_softmax")
    load0 = os.getloadavg()
    c0 = time.process_time()
    ev = logistic_softmax.evaluate(kernel, likelihood, d["X"], np.asarray(d["y"], dtype=float), saved["Z"],
                                   spec=spec, need_grad=False)
    return {"data": d["name"], "evaluate_at": path, "cpu_s": round(time.process_time() - c0, 2),
            "sweeps": int(ev.warm.sweeps), "mean_steps": int(getattr(ev.warm, "mean_steps", 0)),
            "converged": bool(ev.warm.converged), "log_evidence": float(ev.log_evidence),
            "loadavg_start": [round(v, 2) for v in load0], "loadavg_end": [round(v, 2) for v in os.getloadavg()]}


def fit(d, spec, max_iter, subsample=None, save=None):
    model = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Categorical(d["K"], "logistic_softmax"),
                     gd.inducing.Optimized(d["Z"]), spec)
    counter = Counter()
    load0 = os.getloadavg()
    c0, w0 = time.process_time(), time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            post = model.fit(d["X"], np.asarray(d["y"], dtype=float), max_iter=max_iter, subsample=subsample)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    finally:
        logistic_softmax.evaluate = counter.inner
    if save:
        np.savez(save, lengthscale=post.values["kernel.lengthscale"], variance=post.values["kernel.variance"],
                 Z=post.inducing_inputs)
    p = post.predict(d["Xte"])["p"].values
    yte = np.asarray(d["yte"], dtype=int)
    p_true = np.clip(p[np.arange(len(yte)), yte], 1e-300, 1.0)
    return {"data": d["name"], "N": int(d["X"].shape[0]), "K": int(d["K"]), "M": int(d["Z"].shape[0]),
            "fit_cpu_s": round(cpu, 2), "fit_wall_s": round(wall, 2), "evaluations": counter.calls,
            "sweeps_total": int(sum(counter.sweeps)), "sweeps_max": int(max(counter.sweeps, default=0)),
            "sweeps_each": counter.sweeps, "mean_steps_total": int(sum(counter.mean_steps)),
            "n_iterations": int(post.n_iterations), "converged": bool(post.converged),
            "stop_reason": post.diagnostics.stop_reason, "grad_norm": float(post.diagnostics.grad_norm),
            "grad_tol": float(post.diagnostics.grad_tol),
            "log_evidence": float(post.log_evidence), "lengthscale": float(post.values["kernel.lengthscale"]),
            "variance": float(post.values["kernel.variance"]),
            "test_error": float(np.mean(np.argmax(p, 1) != yte)), "test_nlpd": float(-np.mean(np.log(p_true))),
            "warnings": sorted({str(w.message)[:100] for w in caught}),
            "loadavg_start": [round(v, 2) for v in load0], "loadavg_end": [round(v, 2) for v in os.getloadavg()]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", choices=("synth", "classification", "digits", "penbased", "letter"))
    p.add_argument("--M", type=int, default=100)
    p.add_argument("--n-train", type=int, help="a stratified subset of the training rows (synth: N)")
    p.add_argument("--max-iter", type=int, default=1000, help="fit's max_iter (1000, peer_multiclass's --steps)")
    p.add_argument("--fit-tol", type=float, help="PolyaGamma's fit_tol (default: its own)")
    p.add_argument("--class-fit-tol", type=float, help="PolyaGamma's class_fit_tol (default: its own, 1e-3)")
    p.add_argument("--no-acceleration", action="store_true")
    p.add_argument("--profile", type=int, metavar="S", help="cProfile S optimiser iterations")
    p.add_argument("--subsample", type=int, help="fit(subsample=n): the hyperparameters on n rows, then all rows")
    p.add_argument("--save", metavar="PATH", help="write the fitted lengthscale, variance and Z to PATH (.npz)")
    p.add_argument("--evaluate-at", metavar="PATH", help="instead of a fit, one cold evaluation at tol at --save's PATH")
    args = p.parse_args()
    d = problem(args.data, args.M, args.n_train)
    options = {} if args.fit_tol is None else {"fit_tol": args.fit_tol}
    if args.class_fit_tol is not None:
        options["class_fit_tol"] = args.class_fit_tol
    if args.no_acceleration:
        options["acceleration"] = False
    spec = gd.inference.PolyaGamma(**options)
    warm = {"X": d["X"][:200], "y": d["y"][:200], "Xte": d["Xte"][:10], "yte": d["yte"][:10], "K": d["K"],
            "Z": d["Z"][:10], "name": "warm-up"}
    fit(warm, spec, 3)                      # loads the Numba kernels from the cache
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        out = fit(d, spec, args.profile)
        prof.disable()
        print(json.dumps(out))
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return
    if args.evaluate_at:
        print(json.dumps(evaluate_at(d, spec, args.evaluate_at)))
        return
    print(json.dumps(fit(d, spec, args.max_iter, args.subsample, args.save)))


if __name__ == "__main__":
    main()
