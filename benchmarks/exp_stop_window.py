"""The stochastic stopping rule's window: test NLPD and steps at ``stop_window`` 100 against the
default 200 (and 1,000, a long reference run), for the ``stop_window`` entry of SVGP's and
PolyaGamma's docstrings and issue 29's N = 10^6 rows.

    python benchmarks/exp_stop_window.py binary 200 100 1000     # twonorm and banana, one latent function
    python benchmarks/exp_stop_window.py multiclass 200 100      # digits, penbased, letter (multiclass_data.py)
    python benchmarks/exp_stop_window.py large 200 100           # twonorm at N = 10^6, bench_peers' models
    python benchmarks/exp_stop_window.py real 200 100 1000       # magic, electricity (../shared/data)

Prints one line a fit: the part, the window, the problem, the method, test NLPD, steps.  Every fit
runs at the method's defaults but for ``stop_window`` (``max_iter`` 1,000 steps, 3,000 for windows
of 1,000 or more, 2,000 for the multi-class fits as in ``bench_peers.py``).  Timings are not
printed: the fits are compared by their accuracy and their steps (a step's cost does not depend on
the window).

binary: twonorm (``gd.datasets.twonorm``, D = 20, a 10 % test split) at N = 2e4 (B = 1,024) and
1e5 (B = 256), M = 64 k-means points held fixed or optimised, probit SVGP and logit Pólya-Gamma;
banana (``gd.datasets.banana(500, seed)``, 20 % test, M = 16, B = 32), seeds 0 to 4, logit SVGP
and Pólya-Gamma; the likelihood's bias learned (its default).
multiclass: the splits and k-means starts of ``multiclass_data.py`` (M = 100, Z optimised), B = 256,
softmax and robust-max SVGP and logistic-softmax Pólya-Gamma.
large: ``bench_peers.py``'s twonorm-1e6 split of seed 0 (``prepare``), its minibatch SVGP (probit)
and stochastic Pólya-Gamma (logit) fits, Z fixed at the k-means start, the bias fixed at 0.
real: two real binary sets of ``../shared/data`` (skipped where it is absent), standardised, a
10 % test split: MAGIC gamma telescope (19,020 x 10) and electricity (elecNormNew, 45,312 x 8),
B = 1,024, M = 64 k-means points held fixed or optimised, probit SVGP and logit Pólya-Gamma.
"""
import math
import os
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import gpdsl as gd  # noqa: E402


def _split(X, y, seed, test_share):
    idx = np.random.default_rng(seed).permutation(len(y))
    k = int(len(y) * test_share)
    return X[idx[k:]], y[idx[k:]], X[idx[:k]], y[idx[:k]]


def _fit(X, y, Xte, yte, likelihood, inducing, inference, max_iter):
    model = gd.Model(gd.kernels.SquaredExponential(math.sqrt(X.shape[1]), 1.0), likelihood, inducing, inference)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = model.fit(X, y, max_iter=max_iter)
    return float(-np.mean(post.log_predictive(Xte, yte))), int(post.n_iterations)


def binary(window):
    problems = [(f"banana{seed}", *_split(*gd.datasets.banana(500, seed=seed), seed, 0.2), 16, 32, False)
                for seed in range(5)]
    for n, batch in ((20_000, 1024), (100_000, 256)):
        X, y = gd.datasets.twonorm(int(n * 1.1), seed=0)
        split = _split(X, y, 1, 0.1 / 1.1)
        problems += [(f"twonorm{n:g} Z {'optimised' if free else 'fixed'}", *split, 64, batch, free)
                     for free in (False, True)]
    for name, X, y, Xte, yte, M, batch, free in problems:
        for method, link, inference in (
                ("SVGP", "probit" if name.startswith("twonorm") else "logit",
                 gd.inference.SVGP(batch_size=batch, stop_window=window)),
                ("PG", "logit", gd.inference.PolyaGamma(minibatch=batch, stop_window=window))):
            inducing = gd.inducing.KMeans(M, seed=0)
            inducing = gd.inducing.Optimized(inducing) if free else inducing
            yield name, method, _fit(X, y, Xte, yte, gd.likelihoods.Bernoulli(link), inducing, inference,
                                     3000 if window >= 1000 else 1000)


def multiclass(window):
    import multiclass_data
    for data in ("digits", "penbased", "letter"):
        d = multiclass_data.load_problem(multiclass_data.prepare(data, 100))
        for method, link, inference in (
                ("softmax SVGP", "softmax", gd.inference.SVGP(batch_size=256, stop_window=window)),
                ("robust-max SVGP", "robustmax", gd.inference.SVGP(batch_size=256, stop_window=window)),
                ("logistic-softmax PG", "logistic_softmax", gd.inference.PolyaGamma(minibatch=256,
                                                                                     stop_window=window))):
            model = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Categorical(d["K"], link),
                             gd.inducing.Optimized(d["Z"]), inference)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                post = model.fit(d["X"], d["y"].astype(float), max_iter=2000)
            nlpd = float(-np.mean(post.log_predictive(d["Xte"], d["yte"].astype(float))))
            yield data, method, (nlpd, int(post.n_iterations))


def large(window):
    import bench_peers
    d, _ = bench_peers.prepare("twonorm-1e6", 0, bench_peers.TWONORM)
    for method, link, inference in (
            ("SVGP", "probit", gd.inference.SVGP(batch_size=1024, stop_window=window)),
            ("PG", "logit", gd.inference.PolyaGamma(minibatch=1024, stop_window=window))):
        likelihood = gd.likelihoods.Bernoulli(link, bias=gd.Fixed(0.0))
        yield "twonorm 10^6", method, _fit(d["X"], d["y"], d["Xte"], d["yte"], likelihood,
                                           gd.inducing.Fixed(d["Z0"]), inference, 1000)


def real(window):
    data = os.path.join(os.path.dirname(HERE), "..", "shared", "data")
    for name in ("magic", "electricity"):
        path = os.path.join(data, name, f"{name}.csv")
        if not os.path.exists(path):
            print(f"real: {path} not found, {name} skipped", flush=True)
            continue
        table = np.loadtxt(path, delimiter=",", skiprows=1)
        X = (table[:, :-1] - table[:, :-1].mean(0)) / table[:, :-1].std(0)
        split = _split(X, table[:, -1], 1, 0.1)
        for free in (False, True):
            for method, link, inference in (
                    ("SVGP", "probit", gd.inference.SVGP(batch_size=1024, stop_window=window)),
                    ("PG", "logit", gd.inference.PolyaGamma(minibatch=1024, stop_window=window))):
                inducing = gd.inducing.KMeans(64, seed=0)
                inducing = gd.inducing.Optimized(inducing) if free else inducing
                yield (f"{name} Z {'optimised' if free else 'fixed'}", method,
                       _fit(*split, gd.likelihoods.Bernoulli(link), inducing, inference,
                            3000 if window >= 1000 else 1000))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    part = {"binary": binary, "multiclass": multiclass, "large": large, "real": real}[argv[0]]
    windows = [int(w) for w in argv[1:]]
    for window in windows:
        for problem, method, (nlpd, steps) in part(window):
            print(f"{argv[0]}  window {window:5d}  {problem:<26s} {method:<20s} NLPD {nlpd:.5f}  steps {steps}",
                  flush=True)


if __name__ == "__main__":
    main()
