"""The nearest peer of issue 48's sparse speed target: GPy's collapsed sparse coregionalised
regression (``GPy.models.SparseGPCoregionalizedRegression``, VarDTC with one Gaussian noise per
output) on the heterotopic LMC rows of ``bench_multioutput.py --parts sparse``.

Run in GPy's environment (``bash benchmarks/setup_peer_envs.sh gpy``), never gpdsl's, after
gpdsl's benchmark has written the inducing inputs and the start it uses::

    python3 benchmarks/bench_multioutput.py --parts sparse --rows 10000 --export /tmp/lmc10k
    /tmp/peer-gpy/bin/python benchmarks/peers/peer_multioutput_sparse.py --rows 10000 --start /tmp/lmc10k

The model is gpdsl's, term by term: GPy's ``LCM`` of RBF, Matern52, Matern32 (each a variance and
one lengthscale) times a rank-1 ``Coregionalize`` (B_q = W_q W_qᵀ + diag(kappa_q)), an output's
Gaussian noise, the same M inducing inputs in every output (M P long rows), fixed, and the same
starting values.  Prints the CPU and wall seconds of one bound + gradient (GPy computes both
whenever the parameters change: the median of ``--repeats`` settings of ``optimizer_array``),
then, unless ``--no-fit``, of ``optimize('lbfgsb')`` (GPy's default optimiser; ``--max-iter``,
GPy's default 1,000) with its number of evaluations and final bound.  Every line carries the
1-minute load average.
"""
import argparse
import json
import os
import statistics
import time

import GPy
import numpy as np

from lmc_data import lmc_data


def load():
    return f"load {os.getloadavg()[0]:.1f}"


def build(X, y, Z, start, P):
    D = X.shape[1] - 1
    X_list = [X[X[:, -1] == p, :-1] for p in range(P)]
    Y_list = [y[X[:, -1] == p][:, None] for p in range(P)]
    bases = [GPy.kern.RBF(D), GPy.kern.Matern52(D), GPy.kern.Matern32(D)]
    kernel = GPy.util.multioutput.LCM(input_dim=D, num_outputs=P, kernels_list=bases, W_rank=1)
    model = GPy.models.SparseGPCoregionalizedRegression(X_list, Y_list, Z_list=[Z] * P, kernel=kernel)
    model.inducing_inputs.fix()
    for q, part in enumerate(kernel.parts):
        base, coregion = part.parts
        base.variance = start[f"kernel.{q}.variance"]
        base.lengthscale = start[f"kernel.{q}.lengthscale"]
        coregion.W = np.asarray(start[f"kernel.{q}.W"])
        coregion.kappa = np.asarray(start[f"kernel.{q}.kappa"])
    for p, noise in enumerate(start["likelihood.variance"]):
        model.likelihood.parameters[p].variance = noise
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--outputs", type=int, default=3)
    ap.add_argument("--dims", type=int, default=2)
    ap.add_argument("--start", required=True, help="folder with Z.npy and start.json from bench_multioutput --export")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-iter", type=int, default=1000)
    ap.add_argument("--no-fit", action="store_true")
    args = ap.parse_args()
    X, y = lmc_data(args.rows, args.outputs, args.dims)
    Z = np.load(os.path.join(args.start, "Z.npy"))
    with open(os.path.join(args.start, "start.json")) as f:
        start = json.load(f)
    model = build(X, y, Z, start, args.outputs)
    print(f"GPy {GPy.__version__}; numpy {np.__version__}; {os.cpu_count()} cores; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}; {load()}")
    print(f"[gpy] SparseGPCoregionalizedRegression n={args.rows}, P={args.outputs}, M={Z.shape[0]} "
          f"({Z.shape[0] * args.outputs} long rows, fixed), LCM(RBF, Matern52, Matern32; W_rank 1)")
    print(f"[gpy] bound at the start {model.log_likelihood():.3f}")
    x = model.optimizer_array.copy()
    cpus, walls = [], []
    for _ in range(args.repeats + 1):
        c0, w0 = time.process_time(), time.perf_counter()
        model.optimizer_array = x      # recomputes the bound and its gradient (parameters_changed)
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    print(f"[gpy] one bound + gradient: CPU {statistics.median(cpus[1:]):.2f} s, wall "
          f"{statistics.median(walls[1:]):.2f} s (median of {args.repeats} after a warm-up); {load()}")
    if args.no_fit:
        return
    count = {"n": 0}
    objective = model._objective_grads

    def counted(x):
        count["n"] += 1
        return objective(x)

    model._objective_grads = counted
    before = load()
    c0, w0 = time.process_time(), time.perf_counter()
    model.optimize("lbfgsb", max_iters=args.max_iter)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    print(f"[gpy] optimize('lbfgsb', max_iters={args.max_iter}): CPU {cpu:.1f} s, wall {wall:.1f} s; "
          f"{count['n']} evaluations ({cpu / max(count['n'], 1):.2f} CPU s each); bound "
          f"{model.log_likelihood():.3f}; {before} -> {load()}")


if __name__ == "__main__":
    main()
