"""GPyTorch oracles for issue 48: the exact multitask GP (isotopic, Kronecker), per-task noise.

Run in GPyTorch's environment (``bash benchmarks/setup_peer_envs.sh gpytorch``), never gpdsl's:

    /tmp/peer-gpytorch/bin/python benchmarks/peers/oracle_multioutput_gpytorch.py [OUT_DIR]

(OUT_DIR defaults to tests/data/oracles/multioutput). One JSON per case, ``gpytorch_<case>.json``.

Model (torch.float64): ``ExactGP`` with mean ``MultitaskMean(ZeroMean(), P)``, kernel
``MultitaskKernel(ScaleKernel(RBFKernel()), num_tasks=P, rank=R)`` (the ScaleKernel's outputscale
is the base kernel's variance, so every gpdsl parameter has a peer gradient; GPyTorch's multitask
tutorial omits it, i.e. variance 1) and likelihood ``MultitaskGaussianLikelihood(P, rank=0,
has_global_noise=False)``: one noise variance per task, no global noise. GPyTorch's IndexKernel is
B = covar_factor covar_factor^T + diag(var), i.e. gpdsl's W = covar_factor, kappa = var.

Numbers: the un-normalised exact log marginal likelihood ``likelihood(model(X)).log_prob(Y)``
(``ExactMarginalLogLikelihood`` returns it divided by N*P; both are stored); its gradient in the
natural parameters, from torch autograd in GPyTorch's raw (softplus) parameters divided by
d natural / d raw (autograd of each constraint's transform), checked by central differences of the
log ML in the natural values; the latent predictive mean, variance and full covariance of f at test
inputs (eval mode, ``model(X_test)``). The dense NumPy formulas of ``oracle_multioutput_common``
recompute everything as a self-check.
"""
import os
import sys

import gpytorch
import linear_operator
import numpy as np
import torch

import oracle_multioutput_common as common

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "..", "tests", "data", "oracles", "multioutput")
torch.set_default_dtype(torch.float64)

CASES = {
    "icm_rank1_rbf_p3_n30_d1": dict(
        seed=4811, N=30, D=1,
        component=dict(variance=1.4, lengthscale=0.6, W=[[0.8], [-0.5], [0.3]], kappa=[0.15, 0.3, 0.1]),
        noise_variance=[0.02, 0.08, 0.15]),
    "icm_rank2_rbf_ard_p4_n40_d2": dict(
        seed=4812, N=40, D=2,
        component=dict(variance=0.9, lengthscale=[0.7, 1.5],
                       W=[[0.8, 0.1], [-0.4, 0.6], [0.5, -0.7], [0.2, 0.3]], kappa=[0.1, 0.2, 0.05, 0.3]),
        noise_variance=[0.05, 0.03, 0.1, 0.07]),
    "icm_rank3_rbf_p3_n25_d1": dict(
        seed=4813, N=25, D=1,
        component=dict(variance=1.1, lengthscale=1.2,
                       W=[[0.9, 0.2, -0.1], [-0.3, 0.7, 0.4], [0.5, -0.6, 0.3]], kappa=[0.05, 0.1, 0.2]),
        noise_variance=[0.04, 0.06, 0.09]),
}


def make_data(seed, N, P, D):
    """Isotopic data: every output at the same N inputs, mixing three latent functions with noise."""
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-2.0, 3.0, (N, D)), axis=0) if D == 1 else rng.uniform(-2.0, 3.0, (N, D))
    s = X.sum(1)
    g = np.column_stack([np.sin(1.5 * s), np.cos(0.8 * X[:, 0]), 0.3 * s])
    mix = rng.standard_normal((P, 3))
    Y = g @ mix.T + 0.2 * rng.standard_normal((N, P))
    return X, Y


class MultitaskGP(gpytorch.models.ExactGP):
    def __init__(self, X, Y, likelihood, P, rank, ard_dims):
        super().__init__(X, Y, likelihood)
        self.mean_module = gpytorch.means.MultitaskMean(gpytorch.means.ZeroMean(), num_tasks=P)
        self.covar_module = gpytorch.kernels.MultitaskKernel(
            gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=ard_dims)), num_tasks=P, rank=rank)

    def forward(self, x):
        return gpytorch.distributions.MultitaskMultivariateNormal(self.mean_module(x), self.covar_module(x))


def constrained(model, likelihood):
    """(natural name, module, raw name) of every parameter, in gpdsl's terms."""
    scale = model.covar_module.data_covar_module
    return [("variance", scale, "raw_outputscale"), ("lengthscale", scale.base_kernel, "raw_lengthscale"),
            ("W", model.covar_module.task_covar_module, "covar_factor"),
            ("kappa", model.covar_module.task_covar_module, "raw_var"),
            ("noise_variance", likelihood, "raw_task_noises")]


def natural(module, raw_name):
    """(natural value tensor, constraint or None) of one raw parameter."""
    raw = getattr(module, raw_name)
    if raw_name == "covar_factor":
        return raw, None
    constraint = getattr(module, raw_name + "_constraint")
    return constraint.transform(raw), constraint


def build(case):
    c = case["component"]
    P, D = len(case["noise_variance"]), case["D"]
    X, Y = make_data(case["seed"], case["N"], P, D)
    ard = np.ndim(c["lengthscale"]) == 1
    likelihood = gpytorch.likelihoods.MultitaskGaussianLikelihood(num_tasks=P, rank=0, has_global_noise=False)
    model = MultitaskGP(torch.tensor(X), torch.tensor(Y), likelihood, P, np.shape(c["W"])[1], D if ard else None)
    values = {"variance": c["variance"], "lengthscale": c["lengthscale"], "W": c["W"], "kappa": c["kappa"],
              "noise_variance": case["noise_variance"]}
    set_natural(model, likelihood, values)
    return model, likelihood, X, Y


def set_natural(model, likelihood, values):
    """Set every parameter from natural values (raw = constraint.inverse_transform(natural))."""
    with torch.no_grad():
        for name, module, raw_name in constrained(model, likelihood):
            raw = getattr(module, raw_name)
            target = torch.as_tensor(np.asarray(values[name], dtype=float)).reshape(raw.shape)
            if raw_name == "covar_factor":
                raw.copy_(target)
            else:
                raw.copy_(getattr(module, raw_name + "_constraint").inverse_transform(target))


def log_ml(model, likelihood, X, Y):
    model.train()
    likelihood.train()
    return likelihood(model(X)).log_prob(Y)


def run_case(name, case, out_dir):
    model, likelihood, X, Y = build(case)
    P, D, N = len(case["noise_variance"]), case["D"], case["N"]
    ard = np.ndim(case["component"]["lengthscale"]) == 1
    Xt, Yt = torch.tensor(X), torch.tensor(Y)
    with gpytorch.settings.max_cholesky_size(800):
        model.zero_grad()
        lml = log_ml(model, likelihood, Xt, Yt)
        lml.backward()
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
        mll_value = float(mll(model(Xt), Yt).detach())

        # Natural values and gradients: d lml / d natural = (d lml / d raw) / (d natural / d raw).
        nat_values, nat_grads = {}, {}
        for pname, module, raw_name in constrained(model, likelihood):
            raw = getattr(module, raw_name)
            g_raw = raw.grad.detach().clone()
            if raw_name == "covar_factor":
                nat_values[pname], nat_grads[pname] = raw.detach().clone(), g_raw
                continue
            r = raw.detach().clone().requires_grad_(True)
            nat = getattr(module, raw_name + "_constraint").transform(r)
            (dnat_draw,) = torch.autograd.grad(nat.sum(), r)  # elementwise transform: the diagonal
            nat_values[pname], nat_grads[pname] = nat.detach(), g_raw / dnat_draw
        shape = {"variance": (), "lengthscale": (D,) if ard else (), "W": None, "kappa": (P,),
                 "noise_variance": (P,)}
        vals = {k: (v.numpy().reshape(shape[k]) if shape[k] is not None else v.numpy()) for k, v in nat_values.items()}
        grads = {k: (v.numpy().reshape(shape[k]) if shape[k] is not None else v.numpy()) for k, v in nat_grads.items()}

        # Central differences of the log ML in the natural values (set through the raw parameters).
        keys = ["variance", "lengthscale", "W", "kappa", "noise_variance"]
        sizes = [np.size(vals[k]) for k in keys]
        x0 = np.concatenate([np.ravel(vals[k]) for k in keys])

        def lml_at(x):
            parts = np.split(x, np.cumsum(sizes)[:-1])
            set_natural(model, likelihood, dict(zip(keys, parts)))
            with torch.no_grad():
                return float(log_ml(model, likelihood, Xt, Yt))

        g_fd = common.central_difference(lml_at, x0)
        set_natural(model, likelihood, dict(zip(keys, np.split(x0, np.cumsum(sizes)[:-1]))))
        g_an = np.concatenate([np.ravel(grads[k]) for k in keys])
        fd_abs = float(np.max(np.abs(g_fd - g_an)))
        fd_rel = float(np.max(np.abs(g_fd - g_an) / np.maximum(1.0, np.abs(g_an))))

        # Predictions of latent f at test inputs, every task.
        X_test = np.linspace(-2.5, 3.5, 6)[:, None] if D == 1 else \
            np.array([[-1.5, 0.2], [0.0, 0.0], [0.7, 2.1], [2.4, -0.8], [3.2, 3.4]])
        T = len(X_test)
        model.eval()
        likelihood.eval()
        with torch.no_grad(), gpytorch.settings.fast_pred_var(False):
            f = model(torch.tensor(X_test))
            f_mean, f_var = f.mean.numpy(), f.variance.numpy()  # (T, P)
            # GPyTorch's multitask covariance is interleaved: row t*P + p.
            f_cov = f.covariance_matrix.numpy().reshape(T, P, T, P)

    comp = dict(kernel="SquaredExponential", variance=float(vals["variance"]),
                lengthscale=vals["lengthscale"] if ard else float(vals["lengthscale"]), W=vals["W"],
                kappa=vals["kappa"])
    noise = vals["noise_variance"]
    nominal = case["component"]
    for key in ("variance", "lengthscale", "W", "kappa"):
        assert np.allclose(comp[key], nominal[key], rtol=1e-14, atol=0), (name, key)
    assert np.allclose(noise, case["noise_variance"], rtol=1e-14, atol=0)

    XL, y_long = common.long_from_isotopic(X, Y)
    dense_lml = common.dense_log_ml(XL, y_long, [comp], noise)
    dgrad = common.flatten_gradient(*common.dense_log_ml_gradient(XL, y_long, [comp], noise))
    grad_component = dict(variance=float(grads["variance"]),
                          lengthscale=grads["lengthscale"] if ard else float(grads["lengthscale"]),
                          W=grads["W"], kappa=grads["kappa"])
    gdiff = common.flatten_gradient([grad_component], grads["noise_variance"]) - dgrad
    XL_test = common.test_grid_long(X_test, P)
    dmean, dcov = common.dense_predict(XL, y_long, XL_test, [comp], noise)
    dmean, dcov = common.to_point_output(dmean, T, P), common.to_point_output(dcov, T, P)

    lml = float(lml.detach())
    record = {
        "peer": {"library": "GPyTorch", "gpytorch": gpytorch.__version__, "torch": torch.__version__,
                 "linear_operator": linear_operator.__version__, **common.base_environment(),
                 "model": "ExactGP, MultitaskMean(ZeroMean(), P), MultitaskKernel(ScaleKernel(RBFKernel("
                          + ("ard_num_dims=D" if ard else "") + ")), num_tasks=P, rank=rank), "
                          "MultitaskGaussianLikelihood(P, rank=0, has_global_noise=False); torch.float64, "
                          "gpytorch.settings.max_cholesky_size(800) (N*P < 800)",
                 "linalg": "KroneckerProductAddedDiagLinearOperator: log-determinant by Cholesky (N*P < "
                           "max_cholesky_size; the per-task noise diagonal is not constant), solves by "
                           "linear_operator's Kronecker eigendecomposition route (Rakitsch et al. 2013), float64",
                 "script": "benchmarks/peers/oracle_multioutput_gpytorch.py"},
        "case": name,
        "layout": "isotopic",
        "P": P, "D": D, "N": N, "Q": 1, "rank": np.shape(comp["W"])[1],
        "data": {"X": X, "Y": Y, "X_long": XL, "y_long": y_long},
        "parameters": {"components": [comp], "noise_variance": noise},
        "log_marginal_likelihood": lml,
        "gpytorch_exact_mll": {"value": mll_value, "divided_by": N * P,
                               "note": "ExactMarginalLogLikelihood's output = log_marginal_likelihood / (N*P)"},
        "gradient": {"components": [grad_component], "noise_variance": grads["noise_variance"]},
        "predict": {"X_test": X_test, "f_mean": f_mean, "f_var": f_var, "f_cov": f_cov},
        "peer_parameters": {
            "covar_module.data_covar_module.outputscale": comp["variance"],
            "covar_module.data_covar_module.base_kernel.lengthscale": comp["lengthscale"],
            "covar_module.task_covar_module.covar_factor": comp["W"],
            "covar_module.task_covar_module.var": comp["kappa"],
            "likelihood.task_noises": noise},
        "self_check": {
            "dense_numpy_log_ml": dense_lml,
            "log_ml_minus_dense": lml - dense_lml,
            "exact_mll_times_NP_minus_log_ml": mll_value * N * P - lml,
            "gradient_max_abs_diff_dense": float(np.max(np.abs(gdiff))),
            "gradient_max_rel_diff_dense": float(np.max(np.abs(gdiff) / np.maximum(1.0, np.abs(dgrad)))),
            "gradient_vs_central_difference_max_abs": fd_abs,
            "gradient_vs_central_difference_max_rel": fd_rel,
            "central_difference": "of the log ML over the natural values (variance, lengthscale, W, kappa, "
                                  "noise_variance), set through raw = constraint.inverse_transform(value), "
                                  "step 1e-6*max(1,|x|)",
            "f_mean_max_abs_diff_dense": float(np.max(np.abs(f_mean - dmean))),
            "f_var_max_abs_diff_dense": float(np.max(np.abs(f_var - np.einsum("tptp->tp", dcov)))),
            "f_cov_max_abs_diff_dense": float(np.max(np.abs(f_cov - dcov))),
        },
    }
    path = os.path.join(out_dir, f"gpytorch_{name}.json")
    common.write_json(path, record)
    sc = record["self_check"]
    print(f"{name}: log ML {lml:.12f}  -dense {sc['log_ml_minus_dense']:.1e}"
          f"  mll*NP {sc['exact_mll_times_NP_minus_log_ml']:.1e}"
          f"  grad-FD {fd_abs:.1e} (rel {fd_rel:.1e})  grad-dense {sc['gradient_max_rel_diff_dense']:.1e}"
          f"  f_mean/var/cov-dense {sc['f_mean_max_abs_diff_dense']:.1e}/{sc['f_var_max_abs_diff_dense']:.1e}"
          f"/{sc['f_cov_max_abs_diff_dense']:.1e}")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    for name, case in CASES.items():
        run_case(name, case, out_dir)


if __name__ == "__main__":
    main()
