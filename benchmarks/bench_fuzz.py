"""The long version of the property/fuzz test (issue 14): many seeded random cases per method variant.

Draws the cases and checks them with the same code as ``tests/test_fuzz.py``
(``tests/fuzz_cases.py``) and prints, per variant, the cases run, passed and accepted (gpdsl's
documented refusals to fit), the failures by kind with their seeds, and then one reproduction
per distinct failure kind.  Case ``i`` of a variant uses seed ``--seed + i``.

    python3 benchmarks/bench_fuzz.py --cases 2000 --seed 0 [--seconds 600]

``--cases`` is the total over all variants, run round-robin (``fuzz_cases.schedule``): round r
checks seed ``--seed + r`` of every variant in turn, so the first variants take the remainder and
a run cut short still covers every variant (issue 45: a run that went variant by variant left 13 of
65 unreached).  ``--seconds`` ends the run after the round in which that much time has passed.
``--variants`` restricts the run to some variants (issue 48's multi-output variants, ``mo_*``, are
registered by ``tests/fuzz_multioutput.py`` when ``fuzz_cases`` is imported).  The exit status is 1 when any case failed or
any variant was not reached.
"""
import argparse
import collections
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The checkout's gpdsl (not an installed copy) and the shared case generator beside its tests.
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
# One BLAS thread, as tests/conftest.py sets for the test suite, before NumPy loads OpenBLAS.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from fuzz_cases import VARIANTS, check_case, describe, make_case, reproduction, schedule, unreached  # noqa: E402


def run(variants, cases, first_seed, seconds=None):
    """Check cases round-robin over variants, then print one summary per variant.

    Parameters
    ----------
    variants : list of str
        Names from ``fuzz_cases.VARIANTS``.
    cases : int
        Total number of cases (at least one per variant); the first variants take the remainder.
    first_seed : int
        Seed of each variant's first case; the next ones count up from it.
    seconds : float, optional
        Stop after the round in which this much wall time has passed.

    Returns
    -------
    dict
        ``{variant: [(seed, Outcome, seconds), ...]}``, every variant a key.
    """
    results = {variant: [] for variant in variants}
    began = time.perf_counter()
    for i, (variant, seed) in enumerate(schedule(variants, cases, first_seed)):
        start = time.perf_counter()
        outcome = check_case(make_case(variant, seed))
        results[variant].append((seed, outcome, time.perf_counter() - start))
        if outcome.failed:
            print(f"{variant} seed={seed}: {outcome.kind}", flush=True)
        end_of_round = (i + 1) % len(variants) == 0
        if end_of_round and seconds is not None and time.perf_counter() - began > seconds:
            print(f"time budget of {seconds:g} s reached after {(i + 1) // len(variants)} rounds", flush=True)
            break
    for variant, rows in results.items():
        print(_summary_line(variant, rows), flush=True)
    return results


def _summary_line(variant, rows):
    """The summary of one variant's rows: counts, accepted refusals, failures with their seeds."""
    kinds = collections.Counter(outcome.kind for _, outcome, _ in rows)
    passed = kinds.pop("passed", 0)
    accepted = {k: v for k, v in kinds.items() if k.startswith("accepted")}
    failed = sum(v for k, v in kinds.items() if k.startswith("failure"))
    seconds = sum(t for _, _, t in rows)
    line = f"{variant:18s} run {len(rows):5d}  passed {passed:5d}  failed {failed:4d}  ({seconds:6.1f} s)"
    for kind, count in sorted(accepted.items()):
        line += f"\n{'':20s}{kind}: {count}"
    for kind in sorted(k for k in kinds if k.startswith("failure")):
        seeds = [seed for seed, outcome, _ in rows if outcome.kind == kind]
        line += f"\n{'':20s}{kind}: {len(seeds)}  seeds {seeds}"
    return line


def report_failures(results):
    """Print the first case of each distinct (variant, failure kind) with its detail and a reproduction.

    Parameters
    ----------
    results : dict
        As returned by :func:`run`.

    Returns
    -------
    bool
        True when any case failed.
    """
    shown = set()
    for variant, rows in results.items():
        for seed, outcome, _ in rows:
            if not outcome.failed or (variant, outcome.kind) in shown:
                continue
            shown.add((variant, outcome.kind))
            case = make_case(variant, seed)
            print(f"\n== {outcome.kind}\n{describe(case)}\n{outcome.detail}\n{reproduction(case)}")
    return bool(shown)


def main(argv=None):
    """Parse the command line, run the cases and report; returns the exit status (1 on failures)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=2000, help="total cases over all variants (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="first seed of every variant (default 0)")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                   help="variants to run (default: all)")
    p.add_argument("--seconds", type=float, default=None,
                   help="stop after the round in which this much wall time has passed (default: no limit)")
    args = p.parse_args(argv)
    if args.cases < len(args.variants):
        p.error(f"--cases {args.cases} cannot reach each of the {len(args.variants)} variants")
    start = time.perf_counter()
    results = run(args.variants, args.cases, args.seed, args.seconds)
    total = sum(len(rows) for rows in results.values())
    failed = sum(outcome.failed for rows in results.values() for _, outcome, _ in rows)
    missing = unreached(args.variants, [variant for variant, rows in results.items() for _ in rows])
    print(f"\n{total} cases, {failed} failed, {time.perf_counter() - start:.1f} s; "
          f"{len(args.variants) - len(missing)} of {len(args.variants)} variants reached"
          + (f" (not reached: {missing})" if missing else ""))
    return 1 if report_failures(results) or missing else 0


if __name__ == "__main__":
    sys.exit(main())
