"""The long version of the property/fuzz test (issue 14): many seeded random cases per method variant.

Draws the cases and checks them with the same code as ``tests/test_fuzz.py``
(``tests/fuzz_cases.py``) and prints, per variant, the cases run, passed and accepted (gpdsl's
documented refusals to fit), the failures by kind with their seeds, and then one reproduction
per distinct failure kind.  Case ``i`` of a variant uses seed ``--seed + i``.

    python3 benchmarks/bench_fuzz.py --cases 2000 --seed 0

``--cases`` is the total over all variants, split evenly (the first variants take the remainder).
``--variants`` restricts the run to some variants.  The exit status is 1 when any case failed.
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

from fuzz_cases import VARIANTS, check_case, describe, make_case, reproduction  # noqa: E402


def run(variants, cases, first_seed):
    """Check cases spread evenly over variants, printing one summary per variant.

    Parameters
    ----------
    variants : list of str
        Names from ``fuzz_cases.VARIANTS``.
    cases : int
        Total number of cases; the first variants take the remainder of the split.
    first_seed : int
        Seed of each variant's first case; the next ones count up from it.

    Returns
    -------
    dict
        ``{variant: [(seed, Outcome, seconds), ...]}``.
    """
    per_variant, extra = divmod(cases, len(variants))
    results = {}
    for k, variant in enumerate(variants):
        count = per_variant + (k < extra)
        rows = []
        for seed in range(first_seed, first_seed + count):
            start = time.perf_counter()
            outcome = check_case(make_case(variant, seed))
            rows.append((seed, outcome, time.perf_counter() - start))
        results[variant] = rows
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
    args = p.parse_args(argv)
    start = time.perf_counter()
    results = run(args.variants, args.cases, args.seed)
    total = sum(len(rows) for rows in results.values())
    failed = sum(outcome.failed for rows in results.values() for _, outcome, _ in rows)
    print(f"\n{total} cases, {failed} failed, {time.perf_counter() - start:.1f} s")
    return 1 if report_failures(results) else 0


if __name__ == "__main__":
    sys.exit(main())
