"""How far EP's and Laplace's evidences move the hyperparameter posterior of a Poisson latent GP
from the exact one (issue 47).

posteriordb's gp_pois_regr-gp_pois_regr (N = 11, SE kernel, rho ~ gamma(25, 4), alpha ~ half-normal(0,
2) on sqrt(variance), k ~ Poisson(exp f)): ``Model.sample`` at its defaults (4 chains x (1000 + 1000))
with latent="marginalised" under EP() and Laplace(), and with latent="joint" (exact), each against
Stan's reference (10 x 1000 draws; tests/data/posteriordb_gp_pois_regr.json).  For rho and alpha:
the mean and the 5/50/95 % quantiles, their difference from the reference in combined MCSEs (ours
from az.mcse, the reference's) and relative; for f at the 11 inputs: the marginalised runs'
mixture mean of f (``predict_f``, 200 draws) against the reference's posterior means.

    python3 benchmarks/exp_latent_joint_evidences.py [--methods joint,EP,Laplace]
"""
import argparse
import json
import math
import os
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np

import gpdsl as gd
from gpdsl import priors as P

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "data" / "posteriordb_gp_pois_regr.json"


def model(inference):
    return gd.Model(kernel=gd.kernels.SquaredExponential(variance=P.OnTransformed(P.HalfNormal(2.0), "sqrt"),
                                                         lengthscale=P.Gamma(25.0, 4.0)),
                    likelihood=gd.likelihoods.Poisson(link="log"), inference=inference)


def compare(x, reference):
    """{stat: (value, difference in combined MCSEs, relative difference)} for mean, q05, q50, q95."""
    out = {}
    estimates = {"mean": (x.mean(), az.mcse(x, method="mean"))}
    for q in (5, 50, 95):
        estimates[f"q{q:02d}"] = (np.quantile(x, q / 100), az.mcse(x, method="quantile", prob=q / 100))
    for stat, (value, mcse) in estimates.items():
        z = (value - reference[stat]) / math.hypot(float(np.ravel(mcse)[0]), reference[f"mcse_{stat}"])
        out[stat] = (float(value), float(z), float(value / reference[stat] - 1.0))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="joint,EP,Laplace")
    args = parser.parse_args()
    ref = json.loads(REFERENCE.read_text())
    X, k = np.array(ref["x"], dtype=float)[:, None], np.array(ref["k"])
    print(f"load average {os.getloadavg()[0]:.1f}")
    for method in args.methods.split(","):
        latent = "joint" if method == "joint" else "marginalised"
        inference = gd.inference.Laplace() if method in ("joint", "Laplace") else getattr(gd.inference, method)()
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s = model(inference).sample(X, k, latent=latent)
        wall = time.perf_counter() - start
        d = s.diagnostics
        print(f"\n{method} (latent={latent}): {wall:.1f} s wall, divergences {d.divergences}, max R-hat "
              f"{d.max_rhat:.4f}, min bulk ESS {d.min_ess_bulk:.0f}, mean leapfrog steps "
              f"{float(s.sample_stats['n_steps'].mean()):.1f}, warnings {len(caught)}")
        ours = {"rho": s.draws["kernel.lengthscale"].values, "alpha": np.sqrt(s.draws["kernel.variance"].values)}
        for name, x in ours.items():
            row = compare(x, ref["reference"][name])
            print(f"  {name:5s} " + "  ".join(f"{stat} {v:.4f} ({z:+.1f} MCSE, {100 * r:+.1f} %)"
                                              for stat, (v, z, r) in row.items()))
        f_ref = np.array([ref["reference"][f"f[{i + 1}]"]["mean"] for i in range(X.shape[0])])
        if latent == "joint":
            f_mean = s.draws["f"].values.mean(axis=(0, 1))
        else:
            f_mean = s.predict_f(X)[0]
        print(f"  f means: largest |difference| from the reference {np.max(np.abs(f_mean - f_ref)):.4f} "
              f"(mean {np.mean(np.abs(f_mean - f_ref)):.4f}); differences {np.round(f_mean - f_ref, 4).tolist()}")


if __name__ == "__main__":
    main()
