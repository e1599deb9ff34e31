"""Where breast cancer's test-NLPD gap between gpdsl's full-batch SVGP and GPflow's SVGP comes from
(issue 29: +0.026 in bench_peers' table, medians of seeds 0 and 1).

    bash benchmarks/setup_peer_envs.sh gpflow
    python benchmarks/exp_breast_svgp_gap.py [--peer-gpflow /tmp/peer-gpflow] [--seeds 0,1]

For each seed, on bench_peers' breast split and k-means Z0 (M = 128), the same model as
``peer_fits.gpdsl_svgp`` / ``peer_fits.gpflow_svgp``:

* GPflow's SVGP at its defaults, whose ``Bernoulli()`` is the probit with a floor,
  ``p = Phi(f) (1 - 2e-3) + 1e-3`` (``gpflow.likelihoods.utils.inv_probit``): a different
  likelihood from gpdsl's (and GPyTorch's and GPy's) exact probit; and GPflow's SVGP with the
  exact probit ``Phi(f)`` as its ``invlink``;
* gpdsl's SVGP fit (``Bernoulli("probit")``), and gpdsl's posterior at GPflow's default fit's
  hyperparameters and Z (q at its optimum there);
* the per-test-point difference of -log p(y*|x*) between gpdsl's fit and GPflow's default: its
  mean (the NLPD gap), its paired standard error over the test points, and the largest point.

The GPflow half runs under GPflow's interpreter (this file with ``--gpflow-fit``, importing only
NumPy and GPflow there).  Prints a table; nothing is asserted.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def gpflow_fit(data_path, out_path, exact):
    """GPflow's SVGP on the npz's arrays (as ``peer_fits.gpflow_svgp``), its probit floored (GPflow's
    default) or exact; writes the fitted kernel values, Z, the ELBO, the test probabilities of
    y = 1 and L-BFGS-B's stop to ``out_path``."""
    sys.path.insert(0, HERE)
    import peer_fits
    tf = peer_fits._tensorflow_one_thread()
    import gpflow
    d = dict(np.load(data_path))
    X, y = d["X"], (d["y"][:, None] > 0).astype(float)
    kernel = gpflow.kernels.SquaredExponential(lengthscales=math.sqrt(X.shape[1]), variance=1.0)
    likelihood = (gpflow.likelihoods.Bernoulli(invlink=lambda f: 0.5 * (1.0 + tf.math.erf(f / np.sqrt(2.0))))
                  if exact else gpflow.likelihoods.Bernoulli())
    model = gpflow.models.SVGP(kernel, likelihood, d["Z0"].copy(), whiten=True, num_data=X.shape[0])
    nit, success, message = peer_fits._gpflow_minimise(gpflow, model, (X, y))
    np.savez(out_path, elbo=float(model.elbo((X, y)).numpy()), ls=float(kernel.lengthscales.numpy()),
             var=float(kernel.variance.numpy()), Z=model.inducing_variable.Z.numpy(),
             p1=model.predict_y(d["Xte"])[0].numpy().ravel(), nit=nit, message=str(message))


def gpdsl_log_predictive(d, lengthscale, variance, inducing, optimize):
    """gpdsl's SVGP posterior (probit, bias fixed at 0): its ELBO and per-test-point log p(y*|x*)."""
    import gpdsl as gd
    model = gd.Model(gd.kernels.SquaredExponential(lengthscale, variance),
                     gd.likelihoods.Bernoulli("probit", bias=gd.Fixed(0.0)), inducing, gd.inference.SVGP())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = model.fit(d["X"], d["y"], optimize=optimize)
    values = post.values
    return (post.log_evidence, post.log_predictive(d["Xte"], d["yte"]),
            float(values["kernel.lengthscale"]), float(values["kernel.variance"]))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer-gpflow", default=os.environ.get("PEER_GPFLOW", "/tmp/peer-gpflow"))
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--gpflow-fit", nargs=3, metavar=("DATA", "OUT", "EXACT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.gpflow_fit:
        data_path, out_path, exact = args.gpflow_fit
        gpflow_fit(data_path, out_path, exact == "1")
        return
    sys.path.insert(0, HERE)
    import bench_peers
    import gpdsl as gd
    env = {**os.environ, **{k: "1" for k in bench_peers.THREAD_VARS}}
    print("| seed | fit | L-BFGS-B | lengthscale | variance | ELBO (own likelihood) | test NLPD |")
    print("|---|---|---|---:|---:|---:|---:|")
    gaps = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            d, _ = bench_peers.prepare("breast", seed, bench_peers.TWONORM)
            data_path = os.path.join(tmp, f"breast{seed}.npz")
            np.savez(data_path, **d)
            peers = {}
            for exact in (0, 1):
                out = os.path.join(tmp, f"gpflow{seed}_{exact}.npz")
                subprocess.run([os.path.join(args.peer_gpflow, "bin", "python"), __file__, "--gpflow-fit", data_path,
                                out, str(exact)], env=env, check=True, capture_output=True)
                peers[exact] = dict(np.load(out))
            yte = d["yte"]
            rows = []
            for exact, name in ((0, "GPflow SVGP, default Bernoulli (probit floored at 1e-3)"),
                                (1, "GPflow SVGP, exact probit")):
                g = peers[exact]
                lp = np.log(np.where(yte > 0, g["p1"], 1.0 - g["p1"]))
                rows.append((name, f"{int(g['nit'])}: {str(g['message'])[:40]}", float(g["ls"]), float(g["var"]),
                             float(g["elbo"]), lp))
            D = d["X"].shape[1]
            elbo, lp_own, ls, var = gpdsl_log_predictive(d, math.sqrt(D), 1.0,
                                                         gd.inducing.Optimized(gd.inducing.Fixed(d["Z0"])), True)
            rows.append(("gpdsl SVGP", "plateau rule", ls, var, elbo, lp_own))
            g = peers[0]
            elbo_at, lp_at, _, _ = gpdsl_log_predictive(d, float(g["ls"]), float(g["var"]), gd.inducing.Fixed(g["Z"]),
                                                        False)
            rows.append(("gpdsl at GPflow default's hyperparameters and Z", "not optimised", float(g["ls"]),
                         float(g["var"]), elbo_at, lp_at))
            for name, stop, ls, var, elbo, lp in rows:
                print(f"| {seed} | {name} | {stop} | {ls:.3g} | {var:.4g} | {elbo:.3f} | {-lp.mean():.4f} |")
            diff = rows[0][5] - lp_own            # gpdsl's -log p minus GPflow default's, per test point
            worst = int(np.argmax(diff))
            gaps.append(dict(seed=seed, n_test=int(yte.size), gap=float(diff.mean()),
                             paired_se=float(diff.std(ddof=1) / np.sqrt(diff.size)), largest_point=float(diff[worst]),
                             p_true_gpdsl=float(np.exp(lp_own[worst])), p_true_gpflow=float(np.exp(rows[0][5][worst])),
                             gap_without_largest=float(np.delete(diff, worst).mean())))
    print()
    print("test NLPD gap, gpdsl SVGP minus GPflow SVGP (default), per seed:")
    for g in gaps:
        print(json.dumps(g))


if __name__ == "__main__":
    main()
