"""Issue 46: the stochastic stopping rule's window for ``GPClassifier()``'s defaults, measured again.

The defaults' SVGP stops when the batch estimates' means over the last two ``stop_window``-step
windows differ by less than max(stop_tol, 2 standard errors) (:mod:`gpdsl.methods.stochastic`); with
the default window of 200 the rule cannot fire before 400 steps and fired at 960-1,820 steps on
the issue's sets, where 750 steps already reach GPflow's test NLPD on digits and penbased
(``exp_steps_at_equal_nlpd.py``).  Issue 29 measured a window of 100 on the multi-class fits of its
day (+0.013 NLPD on average) and kept 200.  This script fits ``GPClassifier(random_state=seed)`` on
each set with the defaults' declaration and its window replaced by each of ``--windows`` (the
declaration of :func:`gpdsl.defaults.declaration` wrapped in this process), in a fresh process per
fit, and prints steps, process CPU and test NLPD side by side.

    OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_stop_window_defaults.py --sets digits penbased --seeds 0 1 2
"""
import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def one_fit(name, window, seed):
    """In a child: GPClassifier(random_state=seed) with the defaults' window set to ``window``."""
    from exp_steps_at_equal_nlpd import classifier_row
    from gpdsl import defaults
    declared = defaults.declaration

    def with_window(*args, **kwargs):
        chosen = declared(*args, **kwargs)
        return {**chosen, "inference": dataclasses.replace(chosen["inference"], stop_window=window)}

    defaults.declaration = with_window
    print(json.dumps(classifier_row(name, random_state=seed)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="*", default=["digits", "penbased", "letter", "synth"])
    p.add_argument("--windows", nargs="*", type=int, default=[200, 100])
    p.add_argument("--seeds", nargs="*", type=int, default=[0])
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return one_fit(args.child[0], int(args.child[1]), int(args.child[2]))
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}")
    print("set       seed  " + "  ".join(f"w={w}: steps   CPU s   NLPD  " for w in args.windows))
    for name in args.sets:
        for seed in args.seeds:
            cells = []
            for window in args.windows:
                out = subprocess.run([sys.executable, __file__, "--child", name, str(window), str(seed)],
                                     stdout=subprocess.PIPE, text=True, check=True).stdout.strip().splitlines()[-1]
                r = json.loads(out)
                cells.append(f"{r['steps']:>11} {r['cpu']:7.2f} {r['nlpd']:.4f}")
            print(f"{name:<9} {seed:>4}  " + "  ".join(cells), flush=True)
    print(f"load {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
