"""GPy oracles for issue 48: GPCoregionalizedRegression (ICM, LMC), heterotopic, per-output noise.

Run in GPy's environment (``bash benchmarks/setup_peer_envs.sh gpy``), never gpdsl's:

    /tmp/peer-gpy/bin/python benchmarks/peers/oracle_multioutput_gpy.py [OUT_DIR]

(OUT_DIR defaults to tests/data/oracles/multioutput). One JSON per case, ``gpy_<case>.json``.

Each case: P = 3 outputs observed at different inputs (heterotopic), GPy's mixed noise (one
Gaussian noise variance per output), at fixed, explicitly set hyperparameters; GPy's log marginal
likelihood ``model.log_likelihood()``, its gradient ``model.gradient`` (d log ML / d natural
parameter: paramz keeps the untransformed gradient there and applies the Logexp factors only in
``objective_function_gradients``; checked here by central differences of ``log_likelihood()`` in
the natural parameters, ``model[:] = x``), and ``predict_noiseless`` (latent f) at test inputs for
every output, diagonal and full covariance. The dense NumPy formulas of
``oracle_multioutput_common`` recompute the log ML and the predictions as a self-check.
"""
import os
import sys

import GPy
import paramz
import numpy as np
import scipy

import oracle_multioutput_common as common

# GPy's ExactGaussianInference factorises K + diag(noise + 1e-8), always (GPy 1.15.0,
# exact_gaussian_inference.py: ``diag.add(Ky, variance + 1e-8)``).  GPy's noise variances are set to
# noise_variance - GPY_DIAGONAL_JITTER so that the covariance it factorises is exactly the case's
# K + diag(noise_variance); the gradient in GPy's variance is then the one in noise_variance.
GPY_DIAGONAL_JITTER = 1e-8

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "..", "tests", "data", "oracles", "multioutput")


def make_data(seed, sizes, D):
    """Heterotopic data: output p at its own n_p inputs, mixing two latent functions with noise."""
    rng = np.random.default_rng(seed)
    mix = np.array([[1.0, 0.3], [-0.7, 0.8], [0.4, -1.1]])
    X_list, y_list = [], []
    for p, n in enumerate(sizes):
        X = np.sort(rng.uniform(-2.0, 3.0, (n, D)), axis=0) if D == 1 else rng.uniform(-2.0, 3.0, (n, D))
        g = np.column_stack([np.sin(1.7 * X.sum(1)), np.cos(0.9 * X[:, 0]) * np.exp(-0.1 * X.sum(1))])
        y_list.append(g @ mix[p] + 0.15 * (p + 1) * rng.standard_normal(n))
        X_list.append(X)
    return X_list, y_list


CASES = {
    "icm_rank1_rbf_d1": dict(
        seed=4801, sizes=(12, 18, 25), D=1,
        components=[dict(kernel="SquaredExponential", variance=1.3, lengthscale=0.7,
                         W=[[0.9], [-0.6], [0.4]], kappa=[0.2, 0.35, 0.15])],
        noise_variance=[0.02, 0.09, 0.2]),
    "icm_rank2_rbf_d1": dict(
        seed=4802, sizes=(15, 12, 22), D=1,
        components=[dict(kernel="SquaredExponential", variance=0.8, lengthscale=1.1,
                         W=[[0.9, 0.3], [-0.6, 0.5], [0.4, -0.8]], kappa=[0.1, 0.25, 0.05])],
        noise_variance=[0.05, 0.03, 0.12]),
    "icm_rank2_matern32_d1": dict(
        seed=4803, sizes=(20, 14, 17), D=1,
        components=[dict(kernel="Matern32", variance=1.5, lengthscale=0.9,
                         W=[[0.7, -0.2], [0.5, 0.6], [-0.3, 0.9]], kappa=[0.3, 0.1, 0.2])],
        noise_variance=[0.04, 0.1, 0.07]),
    "lmc_q2_rbf_matern32_d1": dict(
        seed=4804, sizes=(16, 24, 13), D=1,
        components=[dict(kernel="SquaredExponential", variance=1.1, lengthscale=1.4,
                         W=[[1.0], [-0.5], [0.6]], kappa=[0.05, 0.1, 0.08]),
                    dict(kernel="Matern32", variance=0.7, lengthscale=0.5,
                         W=[[0.3], [0.8], [-0.4]], kappa=[0.12, 0.06, 0.2])],
        noise_variance=[0.03, 0.06, 0.15]),
    "icm_rank2_rbf_ard_d2": dict(
        seed=4805, sizes=(21, 17, 25), D=2,
        components=[dict(kernel="SquaredExponential", variance=1.2, lengthscale=[0.8, 1.6],
                         W=[[0.8, 0.2], [-0.4, 0.7], [0.5, -0.6]], kappa=[0.15, 0.2, 0.1])],
        noise_variance=[0.06, 0.04, 0.1]),
    "lmc_q2_rbf_ard_matern32_d2": dict(
        seed=4806, sizes=(18, 25, 14), D=2,
        components=[dict(kernel="SquaredExponential", variance=0.9, lengthscale=[1.2, 0.7],
                         W=[[0.6, 0.3], [0.9, -0.2], [-0.5, 0.4]], kappa=[0.1, 0.05, 0.2]),
                    dict(kernel="Matern32", variance=1.4, lengthscale=0.8,
                         W=[[-0.3, 0.5], [0.2, 0.4], [0.7, 0.1]], kappa=[0.08, 0.15, 0.05])],
        noise_variance=[0.05, 0.08, 0.03]),
}


def gpy_base(c, D):
    ard = np.ndim(c["lengthscale"]) == 1
    cls = {"SquaredExponential": GPy.kern.RBF, "Matern32": GPy.kern.Matern32}[c["kernel"]]
    return cls(D, variance=c["variance"], lengthscale=np.atleast_1d(c["lengthscale"]).astype(float), ARD=ard)


def build(case):
    """The GPy model at the case's hyperparameters, and its ICM parts in component order."""
    D, P = case["D"], len(case["sizes"])
    comps = case["components"]
    X_list, y_list = make_data(case["seed"], case["sizes"], D)
    bases = [gpy_base(c, D) for c in comps]
    rank = np.shape(comps[0]["W"])[1]
    if len(comps) == 1:
        kern = GPy.util.multioutput.ICM(D, P, bases[0], W_rank=rank)
        icms = [kern]
    else:
        kern = GPy.util.multioutput.LCM(D, P, bases, W_rank=rank)
        icms = list(kern.parts)
    for icm, c in zip(icms, comps):
        icm.B.W[:] = np.asarray(c["W"], dtype=float)
        icm.B.kappa[:] = np.asarray(c["kappa"], dtype=float)
    model = GPy.models.GPCoregionalizedRegression(X_list, [y[:, None] for y in y_list], kernel=kern)
    for p, v in enumerate(case["noise_variance"]):
        model.likelihood.likelihoods_list[p].variance[:] = v - GPY_DIAGONAL_JITTER
    return model, icms, X_list, y_list


def run_case(name, case, out_dir):
    model, icms, X_list, y_list = build(case)
    P, D, comps = len(case["sizes"]), case["D"], case["components"]
    # The parameters GPy holds must be the case's: read them back in the gpdsl convention.
    held = [dict(kernel=c["kernel"], variance=float(icm.parts[0].variance[0]),
                 lengthscale=(icm.parts[0].lengthscale.values.copy() if np.ndim(c["lengthscale"])
                              else float(icm.parts[0].lengthscale[0])),
                 W=icm.B.W.values.copy(), kappa=icm.B.kappa.values.copy()) for icm, c in zip(icms, comps)]
    noise = np.array([lik.variance[0] for lik in model.likelihood.likelihoods_list]) + GPY_DIAGONAL_JITTER
    for h, c in zip(held, comps):
        for key in ("variance", "lengthscale", "W", "kappa"):
            assert np.array_equal(np.asarray(h[key], float), np.asarray(c[key], float)), (name, key)
    assert np.allclose(noise, case["noise_variance"], rtol=1e-15, atol=0)

    log_ml = float(model.log_likelihood())
    grad_components = [dict(variance=float(icm.parts[0].variance.gradient[0]),
                            lengthscale=(icm.parts[0].lengthscale.gradient.copy() if np.ndim(c["lengthscale"])
                                         else float(icm.parts[0].lengthscale.gradient[0])),
                            W=icm.B.W.gradient.copy(), kappa=icm.B.kappa.gradient.copy())
                       for icm, c in zip(icms, comps)]
    grad_noise = np.array([lik.variance.gradient[0] for lik in model.likelihood.likelihoods_list])
    peer_names = [p.hierarchy_name() for p in model.flattened_parameters]
    peer_params = {n: p.values.ravel().copy() for n, p in zip(peer_names, model.flattened_parameters)}
    peer_grad = {n: p.gradient.ravel().copy() for n, p in zip(peer_names, model.flattened_parameters)}

    # Verify that model.gradient is d log ML / d natural parameter: central differences of
    # log_likelihood() over model.param_array (natural values; optimizer_array is the transformed one).
    x0 = model.param_array.copy()
    g_analytic = model.gradient.copy()

    def lml_at(x):
        model[:] = x
        return float(model.log_likelihood())

    g_fd = common.central_difference(lml_at, x0)
    model[:] = x0
    assert float(model.log_likelihood()) == log_ml
    fd_abs = float(np.max(np.abs(g_fd - g_analytic)))
    fd_rel = float(np.max(np.abs(g_fd - g_analytic) / np.maximum(1.0, np.abs(g_analytic))))
    # The gradient paramz gives the optimiser (-d log ML / d transformed parameter): FD must NOT match it.
    g_transformed = -model.objective_function_gradients()
    g_transformed = model._transform_gradients(g_transformed.copy())
    fd_transformed = float(np.max(np.abs(g_fd - g_transformed)))

    # Predictions of latent f at every output.
    X_test = np.linspace(-2.5, 3.5, 5)[:, None] if D == 1 else \
        np.array([[-1.5, 0.2], [0.0, 0.0], [0.7, 2.1], [2.4, -0.8], [3.2, 3.4]])
    T = len(X_test)
    XL_test = common.test_grid_long(X_test, P)
    mean_long, var_long = model.predict_noiseless(XL_test, full_cov=False)
    _, cov_long = model.predict_noiseless(XL_test, full_cov=True)

    # Self-check: dense NumPy formulas at the same numbers.
    XL, y_long = common.long_from_lists(X_list, y_list)
    assert np.array_equal(XL, model.X) and np.array_equal(y_long, model.Y[:, 0])
    dense_lml = common.dense_log_ml(XL, y_long, comps, case["noise_variance"])
    dgrad = common.flatten_gradient(*common.dense_log_ml_gradient(XL, y_long, comps, case["noise_variance"]))
    gdiff = common.flatten_gradient(grad_components, grad_noise) - dgrad
    dmean, dcov = common.dense_predict(XL, y_long, XL_test, comps, case["noise_variance"])

    record = {
        "peer": {"library": "GPy", "GPy": GPy.__version__, "paramz": paramz.__version__, "scipy": scipy.__version__,
                 **common.base_environment(),
                 "model": "GPy.models.GPCoregionalizedRegression(X_list, Y_list, kernel=K) with K = "
                          + ("GPy.util.multioutput.ICM(D, P, base, W_rank=rank)" if len(comps) == 1 else
                             "GPy.util.multioutput.LCM(D, P, [base_0, base_1], W_rank=rank)")
                          + "; likelihood: GPy's MixedNoise of one Gaussian per output",
                 "gpy_noise_offset": "GPy adds 1e-8 to every noise variance in ExactGaussianInference; its "
                                     "Gaussian_noise_p.variance was set to noise_variance[p] - 1e-8 (see "
                                     "peer_parameters), so every number here is for noise_variance exactly",
                 "script": "benchmarks/peers/oracle_multioutput_gpy.py"},
        "case": name,
        "layout": "heterotopic",
        "P": P, "D": D, "Q": len(comps), "rank": np.shape(comps[0]["W"])[1],
        "data": {"X_list": X_list, "y_list": y_list, "X_long": XL, "y_long": y_long},
        "parameters": {"components": comps, "noise_variance": case["noise_variance"]},
        "log_marginal_likelihood": log_ml,
        "gradient": {"components": grad_components, "noise_variance": grad_noise},
        "predict": {"X_test": X_test, "f_mean": common.to_point_output(mean_long[:, 0], T, P),
                    "f_var": common.to_point_output(var_long[:, 0], T, P),
                    "f_cov": common.to_point_output(cov_long, T, P)},
        "peer_parameters": peer_params,
        "peer_gradient": peer_grad,
        "self_check": {
            "dense_numpy_log_ml": dense_lml,
            "log_ml_minus_dense": log_ml - dense_lml,
            "f_mean_max_abs_diff_dense": float(np.max(np.abs(mean_long[:, 0] - dmean))),
            "f_var_max_abs_diff_dense": float(np.max(np.abs(var_long[:, 0] - np.diag(dcov)))),
            "f_cov_max_abs_diff_dense": float(np.max(np.abs(cov_long - dcov))),
            "gradient_max_abs_diff_dense": float(np.max(np.abs(gdiff))),
            "gradient_max_rel_diff_dense": float(np.max(np.abs(gdiff) / np.maximum(1.0, np.abs(dgrad)))),
            "gradient_vs_central_difference_max_abs": fd_abs,
            "gradient_vs_central_difference_max_rel": fd_rel,
            "transformed_gradient_vs_central_difference_max_abs": fd_transformed,
            "central_difference": "of model.log_likelihood() over model.param_array (natural values), "
                                  "step 1e-6*max(1,|x|); the transformed (Logexp) gradient, last key, does not "
                                  "match it, model.gradient does: model.gradient is the natural-scale one",
        },
    }
    path = os.path.join(out_dir, f"gpy_{name}.json")
    common.write_json(path, record)
    print(f"{name}: log ML {log_ml:.12f}  -dense {log_ml - dense_lml:.1e}  grad-FD {fd_abs:.1e} "
          f"(rel {fd_rel:.1e}, transformed {fd_transformed:.1e})  "
          f"grad-dense {record['self_check']['gradient_max_rel_diff_dense']:.1e}  "
          f"f_cov-dense {record['self_check']['f_cov_max_abs_diff_dense']:.1e}")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    os.makedirs(out_dir, exist_ok=True)
    for name, case in CASES.items():
        run_case(name, case, out_dir)


if __name__ == "__main__":
    main()
