"""The local iterations' tolerance within a fit (``fit_tol`` of EP/QP's sites and of PolyaGamma's
c): fit CPU, L-BFGS-B iterations, local sweeps and test NLPD of ``bench_peers.py``'s models at
each ``fit_tol`` given, for ``notes_full_batch_passes.md``'s seventh round.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/exp_fit_tol.py fitc-ep breast,twonorm 0,1 1e-6,1e-4
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/exp_fit_tol.py pgpr,pgpr-hgv twonorm 0,1 1e-6,1e-4

Methods (``peer_fits.py``'s models, the declaration's other options at their defaults):
``fitc-ep`` (probit, Z optimised from the k-means start), ``pgpr`` (logit, Z fixed at it),
``pgpr-hgv`` (logit, greedy variance selection with re-selection rounds) and ``pgpr-hgv-subsample``
(the same fitted on 5,000 rows, ``twonorm-1e6`` only).  ``fit_tol`` = ``tol`` (1e-6) sweeps every
evaluation to convergence, as before the option.  One process; each (problem, seed) runs the
tolerances in the order given, ``--repeats`` times (default 2) alternating them, so that a
comparison is made in the same minutes.  CPU is the fit's process CPU, as ``bench_peers.py``
measures it but warm (the process's first fit also loads the kernels from Numba's cache).
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import gpdsl as gd  # noqa: E402
from bench_peers import TWONORM, prepare  # noqa: E402
from peer_fits import SUBSAMPLE, _gpdsl_classifier, _hgv  # noqa: E402

METHODS = {
    "fitc-ep": lambda d, tol: _gpdsl_classifier(d, gd.inducing.Optimized(gd.inducing.Fixed(d["Z0"])),
                                                gd.inference.EP(fit_tol=tol)),
    "pgpr": lambda d, tol: _gpdsl_classifier(d, gd.inducing.Fixed(d["Z0"]), gd.inference.PolyaGamma(fit_tol=tol),
                                             "logit"),
    "pgpr-hgv": lambda d, tol: _gpdsl_classifier(d, _hgv(), gd.inference.PolyaGamma(fit_tol=tol), "logit"),
    "pgpr-hgv-subsample": lambda d, tol: _gpdsl_classifier(d, _hgv(), gd.inference.PolyaGamma(fit_tol=tol), "logit",
                                                           subsample=SUBSAMPLE),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("methods", help=f"comma-separated subset of {', '.join(METHODS)}")
    parser.add_argument("problems", help="comma-separated bench_peers problems (breast, twonorm, twonorm-1e6)")
    parser.add_argument("seeds", help="comma-separated split seeds")
    parser.add_argument("tolerances", help="comma-separated fit_tol values")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    tolerances = [float(t) for t in args.tolerances.split(",")]
    for problem in args.problems.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            d, _ = prepare(problem, seed, TWONORM)
            for method in args.methods.split(","):
                for _ in range(args.repeats):
                    for tol in tolerances:
                        r = METHODS[method](d, tol)
                        print(f"{method:18s} {problem:12s} seed {seed}  fit_tol {tol:7.0e}  CPU {r['cpu']:6.2f} s  "
                              f"iters {r['iters']:4d}  sweeps {r['sweeps']:5d}  M {r['M']:3d}  NLPD {r['nlpd']:.5f}  "
                              f"{r['note'][:70]}", flush=True)


if __name__ == "__main__":
    main()
