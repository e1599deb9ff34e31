"""GPflow's SGPR with L-BFGS-B and a composite kernel, the peer of issue 27's VFE row.

Two environments (GPflow goes in the benchmark's own virtualenv, never in gpdsl's):

1. ``python3 benchmarks/bench_composite_kernels.py --save-data /tmp/composite.npz`` (gpdsl's
   interpreter) writes the synthetic seasonal series (N = 20,000), the fixed inducing inputs Z, the
   starting hyperparameters and gpdsl's VFE optimum (gpdsl's parameter names, natural scale);
2. ``/tmp/gpf/bin/python benchmarks/peer_gpflow_sgpr.py --data /tmp/composite.npz`` (``python3 -m
   venv /tmp/gpf && /tmp/gpf/bin/pip install gpflow tensorflow-cpu``).

``bench_composite_kernels.py --python-gpflow /tmp/gpf/bin/python`` runs both steps and prints the
comparison itself (it reads this script's ``--out`` JSON).

The model: ``SGPR(data, kernel, Z, noise_variance)``, zero mean function, Z not trainable, and the
kernel of gpdsl's ``trend + seasonal + irregular``

    SquaredExponential(l_t, v_t)
    + Periodic(SquaredExponential(l_p / 2, v_p), period) * SquaredExponential(l_e, 1 [not trainable])
    + RationalQuadratic(l_i, v_i, alpha)

(GPflow's periodic length-scale is half of gpdsl's / scikit-learn's).  GPflow's default jitter
(1e-6 on K_uu) is what gpdsl's ``VFE(jitter=1e-6)`` adds.  ``gpflow.optimizers.Scipy().minimize``
(L-BFGS-B) of ``training_loss``, ``maxiter`` ``--max-iter`` (1,000), one TensorFlow thread (intra-
and inter-op), float64; each of ``--repeats`` fits starts from a fresh model at the start values
(the loss closure traced untimed; Scipy's own ``tf.function`` of loss and gradient is traced
inside the timed call, as in ``peer_gpflow_svgp.py``).  Timed: the ``minimize`` call (process CPU
seconds and wall).  Printed: the ELBO at the start, each fit's CPU, wall, iterations, message and
final ELBO, the ELBO at gpdsl's optimum (if the npz holds one) and the fitted hyperparameters.
Timings are printed, never asserted.
"""
import argparse
import json
import os
import time

import numpy as np


def build(gpflow, d, values):
    """A fresh SGPR at ``values`` (gpdsl's names, natural scale)."""
    K = gpflow.kernels
    trend = K.SquaredExponential(lengthscales=values["kernel.trend.lengthscale"],
                                 variance=values["kernel.trend.variance"])
    periodic = K.Periodic(K.SquaredExponential(lengthscales=0.5 * values["kernel.seasonal.0.lengthscale"],
                                               variance=values["kernel.seasonal.0.variance"]),
                          period=values["kernel.seasonal.0.period"])
    envelope = K.SquaredExponential(lengthscales=values["kernel.seasonal.1.lengthscale"],
                                    variance=values["kernel.seasonal.1.variance"])
    gpflow.set_trainable(envelope.variance, False)
    irregular = K.RationalQuadratic(lengthscales=values["kernel.irregular.lengthscale"],
                                    variance=values["kernel.irregular.variance"],
                                    alpha=values["kernel.irregular.alpha"])
    kernel = trend + periodic * envelope + irregular
    model = gpflow.models.SGPR((d["X"], d["y"][:, None]), kernel, inducing_variable=d["Z"].copy(),
                               noise_variance=values["likelihood.variance"])
    gpflow.set_trainable(model.inducing_variable, False)
    return model, (trend, periodic, envelope, irregular)


def read_back(model, parts):
    """The model's hyperparameters in gpdsl's names (natural scale)."""
    trend, periodic, envelope, irregular = parts
    f = lambda p: float(np.ravel(p.numpy())[0])  # noqa: E731
    return {"kernel.trend.lengthscale": f(trend.lengthscales), "kernel.trend.variance": f(trend.variance),
            "kernel.seasonal.0.lengthscale": 2.0 * f(periodic.base_kernel.lengthscales),
            "kernel.seasonal.0.variance": f(periodic.base_kernel.variance),
            "kernel.seasonal.0.period": f(periodic.period),
            "kernel.seasonal.1.lengthscale": f(envelope.lengthscales), "kernel.seasonal.1.variance": f(envelope.variance),
            "kernel.irregular.lengthscale": f(irregular.lengthscales), "kernel.irregular.variance": f(irregular.variance),
            "kernel.irregular.alpha": f(irregular.alpha), "likelihood.variance": f(model.likelihood.variance)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="the npz of bench_composite_kernels.py --save-data")
    p.add_argument("--max-iter", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args()
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import gpflow
    d = dict(np.load(args.data))
    start = json.loads(str(d["start"]))
    gpdsl_opt = json.loads(str(d["gpdsl_opt"])) if "gpdsl_opt" in d else None
    gpdsl_cap_opt = json.loads(str(d["gpdsl_cap_opt"])) if "gpdsl_cap_opt" in d else None
    print(f"GPflow {gpflow.__version__} (TensorFlow {tf.__version__}) SGPR: N = {d['X'].shape[0]}, "
          f"M = {d['Z'].shape[0]} fixed, jitter {gpflow.config.default_jitter()}, L-BFGS-B maxiter "
          f"{args.max_iter}, 1 TF thread; load average {'%.2f %.2f %.2f' % os.getloadavg()}")
    model, _ = build(gpflow, d, start)
    start_elbo = float(model.elbo())
    print(f"  ELBO at the start {start_elbo:.10g}")
    at_gpdsl = None
    if gpdsl_opt is not None:
        at_gpdsl = float(build(gpflow, d, gpdsl_opt)[0].elbo())
        print(f"  ELBO at gpdsl's optimum {at_gpdsl:.10g}")
    at_gpdsl_cap = None
    if gpdsl_cap_opt is not None:
        at_gpdsl_cap = float(build(gpflow, d, gpdsl_cap_opt)[0].elbo())
        print(f"  ELBO at gpdsl's optimum with the plateau rule off {at_gpdsl_cap:.10g}")
    runs = []
    for r in range(args.repeats):
        model, parts = build(gpflow, d, start)
        loss = model.training_loss_closure(compile=True)
        loss()                                                   # untimed: tracing
        c0, w0 = time.process_time(), time.perf_counter()
        result = gpflow.optimizers.Scipy().minimize(loss, model.trainable_variables,
                                                    options={"maxiter": args.max_iter})
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        elbo = float(model.elbo())
        runs.append({"cpu": cpu, "wall": wall, "nit": int(result.nit), "nfev": int(result.nfev),
                     "message": str(result.message), "elbo": elbo, "values": read_back(model, parts),
                     "load": os.getloadavg()})
        print(f"  fit {r + 1}: CPU {cpu:.2f} s, wall {wall:.2f} s, {result.nit} iterations, {result.nfev} "
              f"evaluations ({result.message}), ELBO {elbo:.6f}; load average {'%.2f %.2f %.2f' % os.getloadavg()}")
    cpus = sorted(r["cpu"] for r in runs)
    print(f"  CPU median {cpus[len(cpus) // 2]:.2f} s, min {cpus[0]:.2f} s")
    print("  fitted: " + ", ".join(f"{k.replace('kernel.', '')} {v:.4g}" for k, v in runs[-1]["values"].items()))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"gpflow": gpflow.__version__, "tensorflow": tf.__version__, "start_elbo": start_elbo,
                       "elbo_at_gpdsl": at_gpdsl,
                       "elbo_at_gpdsl_cap": at_gpdsl_cap, "runs": runs}, fh, indent=1)


if __name__ == "__main__":
    main()
