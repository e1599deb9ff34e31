"""What the minibatch fits' confirmation and polish cost against N (issue 45, "honest minibatch
convergence"): the measurements behind ``polish="auto"``'s row threshold
(:data:`gpdsl.methods.stochastic.POLISH_AUTO_MAX_ROWS`).

    OPENBLAS_NUM_THREADS=1 python benchmarks/exp_polish_cost.py [--n 2000 10000 30000] [--problems ...]
    OPENBLAS_NUM_THREADS=1 python benchmarks/exp_polish_cost.py --check-only --problems twonorm_svgp_1e6

Each fit runs with ``polish=True`` (``--check-only``: ``polish=False``), and the process CPU
seconds (``time.process_time``, one thread) of its phases are taken by wrapping
:func:`gpdsl.methods.stochastic.full_pass_check` and :func:`gpdsl.methods.stochastic._polish`:
the minibatch steps (``minimise`` less its check(s) and polish: not the inducing selection nor
the final evaluation, which only ``total`` holds), the confirming pass(es), and the polish with
its L-BFGS-B iterations and what it gained in the full objective.  Printed one line per fit.

Problems (``--n`` training rows each, after an untimed 500-row warm-up fit for Numba's cache):

* ``pg_binary``: twonorm (20-D), Bernoulli(logit), ``PolyaGamma(minibatch=256)``, KMeans(64) fixed;
* ``svgp_bernoulli``: the same data, Bernoulli(probit), ``SVGP(batch_size=256)``;
* ``svgp_poisson``: 2-D x uniform on [-3, 3], counts of rate exp(1 + sin x0 cos x1),
  Poisson(log), ``SVGP(batch_size=256)``, KMeans(64);
* ``svgp_constant_mean``: 1-D x uniform on [-3, 3], y = 5 + sin 2x + N(0, 1), a constant mean
  started at 0, Gaussian, ``SVGP(batch_size=256)``, KMeans(64);
* ``svgp_softmax`` / ``svgp_robustmax`` / ``pg_logistic_softmax``: 3 classes on 2-D x uniform on
  [-3, 3] (tests/test_minibatch_convergence.py's data), KMeans(20), ``SVGP(batch_size=100)``
  (softmax, robust-max) or ``PolyaGamma(minibatch=100)`` (logistic-softmax), as the review of
  issue 45 measured them;
* ``twonorm_svgp_1e5`` / ``twonorm_pg_1e5``: ``benchmarks/bench_svgp_minibatch.py``'s problem
  (twonorm 10^5, M = 64, B = 256) for SVGP (logit) and stochastic Pólya-Gamma;
* ``twonorm_svgp_1e6`` / ``twonorm_pg_1e6``: the README's 10^6 rows (``bench_peers.py``'s
  twonorm-1e6: ``twonorm(10^6, seed=0)``, M = 128 k-means on 20,000 rows, B = 1,024; probit SVGP,
  logit Pólya-Gamma); ``--n`` is ignored for the named sizes.
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpdsl as gd  # noqa: E402
from gpdsl.methods import stochastic  # noqa: E402

SE = gd.kernels.SquaredExponential


def _twonorm(n, link, inference, m=64, kmeans_rows=None):
    X, y = gd.datasets.twonorm(n, seed=0)
    model = gd.Model(SE(np.sqrt(20.0), 1.0), gd.likelihoods.Bernoulli(link, bias=gd.Fixed(0.0)),
                     gd.inducing.Fixed(gd.inducing.KMeans(m, seed=0, sample=kmeans_rows).initial_Z(X, y)), inference)
    return model, X, y


def _poisson(n, inference):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3.0, 3.0, size=(n, 2))
    y = rng.poisson(np.exp(1.0 + np.sin(X[:, 0]) * np.cos(X[:, 1]))).astype(float)
    return gd.Model(SE(), gd.likelihoods.Poisson("log"), gd.inducing.KMeans(64, seed=0), inference), X, y


def _classes(n, link, inference):
    """tests/test_minibatch_convergence.py's 3-class data (2-D x uniform on [-3, 3], Gumbel-noised
    argmax of 2 (sin(x0 + k) + cos(x1 (k + 1) / 2))), KMeans(20) as the review measured it."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3.0, 3.0, size=(n, 2))
    f = 2.0 * np.stack([np.sin(X[:, 0] + k) + np.cos(X[:, 1] * (k + 1) / 2) for k in range(3)], axis=1)
    y = np.argmax(f + 0.5 * rng.gumbel(size=f.shape), axis=1)
    return gd.Model(SE(), gd.likelihoods.Categorical(3, link), gd.inducing.KMeans(20, seed=0), inference), X, y


def _constant_mean(n, inference):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3.0, 3.0, size=(n, 1))
    y = 5.0 + np.sin(2.0 * X[:, 0]) + rng.standard_normal(n)
    return (gd.Model(SE(), gd.likelihoods.Gaussian(), gd.inducing.KMeans(64, seed=0), inference,
                     mean=gd.means.Constant()), X, y)


PROBLEMS = {
    "pg_binary": lambda n, polish: _twonorm(n, "logit", gd.inference.PolyaGamma(minibatch=256, polish=polish)),
    "svgp_bernoulli": lambda n, polish: _twonorm(n, "probit", gd.inference.SVGP(batch_size=256, polish=polish)),
    "svgp_poisson": lambda n, polish: _poisson(n, gd.inference.SVGP(batch_size=256, polish=polish)),
    "svgp_constant_mean": lambda n, polish: _constant_mean(n, gd.inference.SVGP(batch_size=256, polish=polish)),
    "svgp_softmax": lambda n, polish: _classes(n, "softmax", gd.inference.SVGP(batch_size=100, polish=polish)),
    "svgp_robustmax": lambda n, polish: _classes(n, "robustmax", gd.inference.SVGP(batch_size=100, polish=polish)),
    "pg_logistic_softmax": lambda n, polish: _classes(n, "logistic_softmax",
                                                      gd.inference.PolyaGamma(minibatch=100, polish=polish)),
    "twonorm_svgp_1e5": lambda n, polish: _twonorm(100_000, "logit", gd.inference.SVGP(batch_size=256, polish=polish)),
    "twonorm_pg_1e5": lambda n, polish: _twonorm(100_000, "logit", gd.inference.PolyaGamma(minibatch=256,
                                                                                          polish=polish)),
    "twonorm_svgp_1e6": lambda n, polish: _twonorm(1_000_000, "probit", gd.inference.SVGP(batch_size=1024,
                                                                                         polish=polish),
                                                   m=128, kmeans_rows=20_000),
    "twonorm_pg_1e6": lambda n, polish: _twonorm(1_000_000, "logit", gd.inference.PolyaGamma(minibatch=1024,
                                                                                            polish=polish),
                                                 m=128, kmeans_rows=20_000),
}


class _Phases:
    """CPU seconds spent inside the wrapped functions of gpdsl.methods.stochastic."""

    def __init__(self):
        self.check, self.polish, self.minimise, self.checks, self.gains = 0.0, 0.0, 0.0, [], []
        self._check, self._polish, self._minimise = stochastic.full_pass_check, stochastic._polish, stochastic.minimise

    def __enter__(self):
        def minimise(*args, **kwargs):
            t = time.process_time()
            out = self._minimise(*args, **kwargs)
            self.minimise += time.process_time() - t
            return out

        def check(*args, **kwargs):
            t = time.process_time()
            out = self._check(*args, **kwargs)
            self.check += time.process_time() - t
            self.checks.append(out)
            return out

        def polish(*args, **kwargs):
            t = time.process_time()
            out = self._polish(*args, **kwargs)
            self.polish += time.process_time() - t
            self.iterations = out[2]
            return out
        self.iterations = 0
        stochastic.full_pass_check, stochastic._polish, stochastic.minimise = check, polish, minimise
        return self

    def __exit__(self, *exc):
        stochastic.full_pass_check, stochastic._polish, stochastic.minimise = self._check, self._polish, self._minimise


def measure(problem, n, polish, max_iter=1000):
    model, X, y = PROBLEMS[problem](n, polish)
    with warnings.catch_warnings(record=True) as caught, _Phases() as phases:
        warnings.simplefilter("always")
        t = time.process_time()
        post = model.fit(X, y, max_iter=max_iter)
        total = time.process_time() - t
    first = phases.checks[0] if phases.checks else None
    last = phases.checks[-1] if phases.checks else None
    gain = (last.objective - first.objective) if len(phases.checks) > 1 else 0.0
    return dict(problem=problem, N=X.shape[0], polish=polish, total=total, check=phases.check,
                # The steps alone: the optimiser's time less its check(s) and polish (not the
                # inducing selection, the model's set-up or the final evaluation, which are "total"'s).
                polish_s=phases.polish, steps_s=phases.minimise - phases.check - phases.polish,
                steps=int(post.diagnostics.n_iterations) - phases.iterations, polish_iters=phases.iterations,
                grad_before=None if first is None else first.largest, tol=None if first is None else first.tolerance,
                grad_after=None if last is None else last.largest, gain=gain, converged=post.converged,
                stop=post.diagnostics.stop_reason, warned=len([w for w in caught
                                                               if issubclass(w.category, gd.ConvergenceWarning)]))


def _g(x):
    return "-" if x is None else f"{x:.3g}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[2000, 10000, 30000])
    p.add_argument("--problems", nargs="+", default=["pg_binary", "svgp_bernoulli", "svgp_poisson",
                                                      "svgp_constant_mean"])
    p.add_argument("--check-only", action="store_true", help="polish=False: the steps and the confirming pass")
    p.add_argument("--max-iter", type=int, default=1000, help="fit(max_iter=...): the cap on the steps")
    args = p.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for problem in args.problems:
            if problem in PROBLEMS and not problem.startswith("twonorm"):
                measure(problem, 500, False)
    for problem in args.problems:
        for n in (args.n if not problem.startswith("twonorm") else [None]):
            r = measure(problem, n, not args.check_only, args.max_iter)
            print(f"{r['problem']:20s} N={r['N']:8d} polish={r['polish']!s:5s} total {r['total']:7.2f} s: steps "
                  f"{r['steps_s']:6.2f} s ({r['steps']} steps), check {r['check']:5.2f} s, polish {r['polish_s']:6.2f} s "
                  f"({r['polish_iters']} it); |grad| {_g(r['grad_before'])} -> {_g(r['grad_after'])} "
                  f"(tol {_g(r['tol'])}); gain {r['gain']:.4g} nats; converged {r['converged']}, "
                  f"{r['warned']} warning(s), stop {r['stop']}", flush=True)


if __name__ == "__main__":
    main()
