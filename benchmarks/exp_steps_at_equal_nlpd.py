"""Issue 46's escape clause for its 5x target: how many minibatch steps ``GPClassifier()``'s default
needs to reach the fastest peer's test NLPD, and what those steps cost against the step's flop bound.

For each set, ``GPClassifier(max_iter=n)`` (the default declaration, the link pilot included, one
step cap n per fit, each in a fresh process so every fit pays what a user's does) is fitted for each
n of ``--caps``; printed: the steps taken (the stopping rule may fire first), the process CPU of the
whole fit, CPU per step (the fit's CPU less the pilot's, over the steps), the test NLPD and error.
Beside them the peer's CPU and NLPD (``bench_peers.py``'s table, RESULTS.md: GPflow's robust-max
SVGP, the fastest peer at equal NLPD on digits and penbased) and the CPU the 5x target allows.
The step's flop bound at this machine's DGEMM rate is printed once per set.  The K-class step with
Adam on q (robust-max; ``svgp._data_pass`` with the "grad" and "q_grad" outputs, one kernel shared by
the classes) forms, per class, U_k = R_k^T A and R_k (U_k D_k) (triangular, M^2 B each), the gram
A D_k A^T (symmetric, M^2 B) and P_k R_k (M^3); shared by the classes, A = L^-1 K_uf and the K_uf
adjoint L^-T W (triangular, M^2 B each) and W A^T (2 M^2 B); and K_uu's Cholesky and inverse (2/3
M^3): (3 K + 4) M^2 B + (K + 2/3) M^3 flops.  The bound divides that by the DGEMM rate on the
(K M, M) x (M, B) shape; the elementwise work (K_uf's exponentials, the likelihood's quadrature, q's
Adam step on K M (M + 1) / 2 + K M entries) is left out, so the bound is below what a step can reach.

    OPENBLAS_NUM_THREADS=1 python3 benchmarks/exp_steps_at_equal_nlpd.py --sets digits penbased
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from profile_multiclass_step import gemm_rate  # noqa: E402

# bench_peers.py's fastest peer at equal NLPD (RESULTS.md; peers/mc46-s12, 2026-11-30): (name, CPU s, NLPD).
PEERS = {"digits": ("GPflow robust-max SVGP (Adam)", 30.3, 0.0950),
         "penbased": ("GPflow robust-max SVGP (Adam)", 29.8, 0.0104),
         "letter": ("GPyTorch softmax SVGP (Adam)", 162.8, 0.4178)}
EQUAL = 0.003          # bench_peers.py's margin for "equal NLPD"


def classifier_row(name, **params):
    """``GPClassifier(**params)`` fitted on the set's training rows (warnings silenced): its steps,
    process CPU, link pilot's CPU and link, test NLPD (``log_loss``) and error, and ``converged``."""
    import warnings

    from sklearn.metrics import log_loss

    from bench_multiclass_defaults import data
    from gpdsl.sklearn import GPClassifier
    d = data(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c0 = time.process_time()
        clf = GPClassifier(**params).fit(d["X"], d["y"])
        cpu = time.process_time() - c0
    proba = clf.predict_proba(d["Xte"])
    return {"steps": int(clf.posterior_.n_iterations), "cpu": cpu, "pilot": clf.link_choice_.pilot_cpu,
            "link": clf.link_choice_.link, "nlpd": float(log_loss(d["yte"], proba, labels=clf.classes_)),
            "err": float(np.mean(clf.classes_[np.argmax(proba, 1)] != d["yte"])),
            "converged": bool(clf.posterior_.converged)}


def one_fit(name, cap):
    """Run in a child: the fit at one step cap; prints one JSON line."""
    print(json.dumps({"cap": cap, **classifier_row(name, max_iter=cap)}))


def flop_bound(K, M=100, B=256):
    """(flops, DGEMM flop/s, bound s) of one robust-max Adam step (module docstring)."""
    rate = gemm_rate(K, M, B)
    flops = (3 * K + 4) * M * M * B + (K + 2 / 3) * M ** 3
    return flops, rate, flops / rate


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="*", default=["digits", "penbased"], choices=sorted(PEERS))
    p.add_argument("--caps", nargs="*", type=int, default=[250, 500, 750, 1000, 1500, 2000])
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return one_fit(args.child[0], int(args.child[1]))
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}")
    for name in args.sets:
        peer, peer_cpu, peer_nlpd = PEERS[name]
        K = {"digits": 10, "penbased": 10, "letter": 26}[name]
        flops, rate, bound = flop_bound(K)
        print(f"\n{name}: peer {peer} {peer_cpu} CPU s at NLPD {peer_nlpd} (5x: <= {peer_cpu / 5:.2f} s at NLPD "
              f"<= {peer_nlpd + EQUAL:.4f}); step bound {flops:.3g} flops at {rate / 1e9:.0f} GFLOP/s = "
              f"{1e3 * bound:.2f} ms")
        print("  cap  steps  link       CPU s  pilot s  ms/step  x bound  NLPD    error   equal  5x")
        for cap in args.caps:
            out = subprocess.run([sys.executable, __file__, "--child", name, str(cap)], stdout=subprocess.PIPE,
                                 text=True, check=True).stdout.strip().splitlines()[-1]
            r = json.loads(out)
            per_step = (r["cpu"] - r["pilot"]) / max(r["steps"], 1)
            equal = r["nlpd"] <= peer_nlpd + EQUAL
            print(f"  {cap:>4}  {r['steps']:>5}  {r['link']:<9} {r['cpu']:6.2f}  {r['pilot']:6.2f}  "
                  f"{1e3 * per_step:7.2f}  {per_step / bound:6.2f}  {r['nlpd']:.4f}  {r['err']:.4f}  "
                  f"{'yes' if equal else 'no':<5}  {'yes' if equal and r['cpu'] <= peer_cpu / 5 else 'no'}",
                  flush=True)
        print(f"  at the bound, the steps alone of a 5x fit: <= {peer_cpu / 5 / bound:.0f} steps")
    print(f"\nload {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
