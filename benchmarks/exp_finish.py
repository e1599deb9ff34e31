"""Issue 46: ``GPClassifier()`` on the multi-class sets with the joint finish of
:mod:`gpdsl.methods.svgp_finish` after the minibatch steps, which the defaults do not run (``polish="auto"``
keeps the natural-step polish for K classes, at most ``stochastic.POLISH_AUTO_MAX_ROWS`` rows times
classes).

For each set: the default fit (the link pilot, the steps, the confirming pass) and then the finish,
run by ``polish=True`` in the declaration :func:`gpdsl.defaults.declaration` makes (wrapped for this
process; otherwise the defaults' own, ``clf.model_``); printed: the process CPU seconds of
the whole fit and of the finish alone, the finish's evaluations (passes over the data), the full
objective and its largest gradient entry at the steps' end and at the finish's end against the
tolerance, ``converged``, and the test NLPD and error (``bench_multiclass_defaults.run_set``).

    OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_finish.py --sets digits
    OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_finish.py --sets penbased --max-evaluations 300

``--max-evaluations`` caps the finish's passes (default: what the fit gives it, its step cap of
2,000), the steps' cap unchanged.
"""
import argparse
import dataclasses
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))            # this checkout's gpdsl
sys.path.insert(0, HERE)

from bench_multiclass_defaults import SETS, load, run_set  # noqa: E402

from gpdsl import defaults  # noqa: E402
from gpdsl.methods import stochastic, svgp_finish  # noqa: E402


def _polished(declaration):
    """defaults.declaration with polish=True in its inference."""
    def declared(*args, **kwargs):
        chosen = declaration(*args, **kwargs)
        return {**chosen, "inference": dataclasses.replace(chosen["inference"], polish=True)}
    return declared


class _Timed:
    """CPU seconds and results of svgp_finish.finish and the checks, recorded around a fit."""

    def __init__(self, cap=None):
        self.cap, self.cpu, self.results, self.checks = cap, 0.0, [], []
        self._finish, self._check = svgp_finish.finish, stochastic.full_pass_check

    def __enter__(self):
        def finish(check, u0, q0, max_evaluations, **kwargs):
            t = time.process_time()
            out = self._finish(check, u0, q0, max_evaluations if self.cap is None else self.cap, **kwargs)
            self.cpu += time.process_time() - t
            self.results.append(out)
            return out

        def check(*args, **kwargs):
            out = self._check(*args, **kwargs)
            if not self.checks:
                self.checks.append(out)
            return out

        svgp_finish.finish, stochastic.full_pass_check = finish, check
        return self

    def __exit__(self, *exc):
        svgp_finish.finish, stochastic.full_pass_check = self._finish, self._check


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="*", default=["digits", "penbased", "synth"], choices=SETS)
    p.add_argument("--max-evaluations", type=int, default=None)
    args = p.parse_args(argv)
    defaults.declaration = _polished(defaults.declaration)
    print(f"load average {load()} at the start; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    for name in args.sets:
        with _Timed(args.max_evaluations) as timed:
            row = run_set(name)
        start = timed.checks[0] if timed.checks else None
        print(f"\n{name}: CPU {row['cpu']:.1f} s (finish {timed.cpu:.1f} s), NLPD {row['nlpd']:.4f}, error "
              f"{row['err']:.4f}, converged {row['converged']}, steps + evaluations {row['steps']}")
        if start is not None:
            print(f"  steps' end: objective {start.objective:.2f}, largest gradient {start.largest:.4g} "
                  f"({start.name}), tolerance {start.tolerance:.4g}")
        for done in timed.results:
            print(f"  finish: {done.evaluations} evaluations, objective {done.point.objective:.2f}, largest gradient "
                  f"{done.point.largest:.4g} ({done.point.name}); {done.how}")
        print(f"  link {row['link'].link}; load {load()}")


if __name__ == "__main__":
    main()
