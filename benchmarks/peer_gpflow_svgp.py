"""GPflow's SVGP with L-BFGS-B, the full-batch peer of issue 15, on gpdsl's twonorm split.

Two steps, two environments (GPflow goes in the benchmark's own virtualenv, never in gpdsl's):

1. ``python3 benchmarks/bench_svgp.py --save-data /tmp/twonorm_svgp.npz`` (gpdsl's interpreter):
   the 90/10 split of ``raetsch_twonorm.csv`` (6,660 x 20 training rows, standardised) and the
   k-means Z0 (M = 128, seed 0) that ``bench_svgp.py``'s gpdsl fits use;
2. ``/tmp/gpf/bin/python benchmarks/peer_gpflow_svgp.py --data /tmp/twonorm_svgp.npz`` (``python3
   -m venv /tmp/gpf && /tmp/gpf/bin/pip install gpflow tensorflow-cpu``).

The model is GPflow's SVGP as the thesis' baseline and the issue use it: ``SquaredExponential``
(lengthscale sqrt(D), variance 1), ``Bernoulli`` with ``--link`` (GPflow's default invlink is the
probit; ``logit`` uses ``tf.sigmoid``), zero mean, ``whiten=True``, Z fixed at Z0
(not trainable), q(u) from GPflow's start (m = 0, S = I); ``gpflow.optimizers.Scipy().minimize``
(L-BFGS-B) of ``training_loss`` over q(u) and the kernel hyperparameters jointly, ``maxiter``
``--max-iter`` (1,000), one TensorFlow thread (intra- and inter-op).  Timed: the optimisation
(process CPU seconds and wall); printed: iterations, the ELBO, test NLPD and error rate.
Timings are printed, never asserted.
"""
import argparse
import math
import os
import time

import numpy as np


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="the npz of bench_svgp.py --save-data")
    p.add_argument("--link", default="probit", choices=("probit", "logit"))
    p.add_argument("--max-iter", type=int, default=1000)
    args = p.parse_args()
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import gpflow
    d = np.load(args.data)
    X, y = d["X"], (d["y"][:, None] > 0).astype(float)
    Xte, yte = d["Xte"], d["yte"] > 0
    kernel = gpflow.kernels.SquaredExponential(lengthscales=math.sqrt(X.shape[1]), variance=1.0)
    invlink = tf.sigmoid if args.link == "logit" else gpflow.likelihoods.Bernoulli().invlink
    model = gpflow.models.SVGP(kernel, gpflow.likelihoods.Bernoulli(invlink=invlink), d["Z0"].copy(),
                               whiten=True, num_data=X.shape[0])
    gpflow.set_trainable(model.inducing_variable, False)
    loss = model.training_loss_closure((X, y), compile=True)
    loss()                                                      # untimed: tracing and compilation
    c0, w0 = time.process_time(), time.perf_counter()
    result = gpflow.optimizers.Scipy().minimize(loss, model.trainable_variables,
                                                options={"maxiter": args.max_iter})
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    p1 = model.predict_y(Xte)[0].numpy().ravel()
    p_true = np.clip(np.where(yte, p1, 1.0 - p1), 1e-300, 1.0)
    print(f"GPflow {gpflow.__version__} (TensorFlow {tf.__version__}) SVGP {args.link}: train {X.shape}, "
          f"M = {d['Z0'].shape[0]} fixed, L-BFGS-B maxiter {args.max_iter}, 1 TF thread; load average "
          f"{'%.2f %.2f %.2f' % os.getloadavg()}")
    print(f"  CPU {cpu:.1f} s, wall {wall:.1f} s, {result.nit} iterations ({result.message}), "
          f"ELBO {-float(loss()):.2f}, test NLPD {-np.mean(np.log(p_true)):.4f}, "
          f"error {100 * np.mean(p_true < 0.5):.2f} %, lengthscale "
          f"{float(np.ravel(kernel.lengthscales.numpy())[0]):.4g}, variance {float(kernel.variance.numpy()):.4g}")


if __name__ == "__main__":
    main()
