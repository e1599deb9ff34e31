"""d log evidence / d latent offset (``Evaluation.grads["offset"]``) of every method that returns
it, against central finite differences in the offset and, through a mean function, in the mean's
parameters; and GPML 4.2's mean-function oracles (exact inference).

EP and QP re-converge at every finite-difference point, warm-started from the central sites, to
a site change below 1e-12 (the evidence is stationary in the sites, so its error is of the
order of that change squared); Laplace's Newton stops at a gain below 1e-15 nats.
"""

import numpy as np
import pytest

import gpdsl as gd
from gpml_kernel_cases import check_case

SE = gd.kernels.SquaredExponential
N = 30
H = 1e-5                           # finite-difference step (offset and mean parameters)
rng = np.random.default_rng(2024)
X = rng.uniform(-2.0, 2.0, size=(N, 2))
LATENT = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1]
Z_FIXED = X[::3] + 0.05
OFFSET = 0.4 * rng.standard_normal(N)
TARGETS = {
    "gaussian": LATENT + 0.2 * rng.standard_normal(N),
    "bernoulli": np.where(LATENT + 0.5 * rng.standard_normal(N) > 0.0, 1.0, -1.0),
    "poisson": rng.poisson(np.exp(0.5 * LATENT + 0.5)).astype(float),
}
# Two outliers: Laplace's W < 0 there (its LU path, GPML's infLaplace with a non-log-concave likelihood).
TARGETS["studentt"] = TARGETS["gaussian"] + np.where(np.arange(N) % 14 == 3, 4.0, 0.0)
LIKELIHOODS = {
    "gaussian": lambda: gd.likelihoods.Gaussian(0.1),
    "probit": lambda: gd.likelihoods.Bernoulli("probit"),
    "logit": lambda: gd.likelihoods.Bernoulli("logit"),
    "poisson": lambda: gd.likelihoods.Poisson(link="log"),
    "studentt": lambda: gd.likelihoods.StudentT(df=4.0, scale=0.3),
}
EP_TOL = dict(tol=1e-12, max_sweeps=2000)

# (method id, inference, sparse, likelihood names)
CASES = [
    ("exact", gd.inference.Exact(), False, ("gaussian",)),
    ("vfe", gd.inference.VFE(), True, ("gaussian",)),
    ("dtc", gd.inference.DTC(), True, ("gaussian",)),
    ("fitc", gd.inference.FITC(), True, ("gaussian",)),
    ("laplace", gd.inference.Laplace(tol=1e-15), False, ("probit", "logit", "poisson", "studentt")),
    ("fitc-laplace", gd.inference.Laplace(tol=1e-15), True, ("probit", "logit", "poisson", "studentt")),
    ("ep", gd.inference.EP(**EP_TOL), False, ("probit", "logit", "poisson")),
    ("fitc-ep", gd.inference.EP(**EP_TOL), True, ("probit", "poisson")),
    ("parallel-ep", gd.inference.EP(schedule="parallel", **EP_TOL), False, ("probit", "poisson")),
    ("parallel-fitc-ep", gd.inference.EP(schedule="parallel", **EP_TOL), True, ("probit",)),
    ("qp", gd.inference.QP(**EP_TOL), False, ("probit",)),
    ("fitc-qp", gd.inference.QP(**EP_TOL), True, ("probit",)),
]
PARAMS = [pytest.param(inference, sparse, lik, id=f"{name}-{lik}")
          for name, inference, sparse, liks in CASES for lik in liks]


def _setup(inference, sparse, lik, mean=None):
    model = gd.Model(SE(0.9, 1.3), LIKELIHOODS[lik](), gd.inducing.Fixed(Z_FIXED) if sparse else None, inference,
                     mean=mean)
    Z = Z_FIXED if sparse else None
    values = model.parameter_table(X, Z).values()
    values.pop("inducing.Z", None)
    y = model.likelihood.prepare_targets(TARGETS["bernoulli" if lik in ("probit", "logit") else lik])
    return model, values, y, Z


def _evidence(model, values, y, Z, offset, warm):
    return model.evaluate(values, X, y, Z, need_grad=False, warm=warm, offset=offset).log_evidence


@pytest.mark.parametrize("inference,sparse,lik", PARAMS)
def test_offset_gradient_matches_finite_differences(inference, sparse, lik):
    model, values, y, Z = _setup(inference, sparse, lik)
    ev = model.evaluate(values, X, y, Z, offset=OFFSET)
    assert set(ev.grads) >= {"offset"}
    numeric = np.empty(N)
    for n in range(N):
        step = np.zeros(N)
        step[n] = H
        numeric[n] = (_evidence(model, values, y, Z, OFFSET + step, ev.warm)
                      - _evidence(model, values, y, Z, OFFSET - step, ev.warm)) / (2.0 * H)
    np.testing.assert_allclose(ev.grads["offset"], numeric, rtol=1e-6, atol=1e-7 * np.max(np.abs(numeric)))
    # No offset, no offset gradient; without need_grad, none either.
    assert "offset" not in model.evaluate(values, X, y, Z).grads
    assert "offset" not in model.evaluate(values, X, y, Z, need_grad=False, offset=OFFSET).grads


@pytest.mark.parametrize("inference,sparse,lik", PARAMS)
def test_mean_gradients_match_finite_differences(inference, sparse, lik):
    mean = gd.means.Constant(0.3) + gd.means.Linear(np.array([0.2, -0.1]))
    model, values, y, Z = _setup(inference, sparse, lik, mean=mean)
    ev = model.evaluate(values, X, y, Z, offset=OFFSET)
    assert "offset" not in ev.grads
    for name in ("mean.0.constant", "mean.1.coefficients"):
        analytic = np.atleast_1d(ev.grads[name])
        numeric = np.empty(analytic.size)
        for k in range(analytic.size):
            up, down = dict(values), dict(values)
            up[name] = np.array(values[name], dtype=float)
            down[name] = np.array(values[name], dtype=float)
            up[name].flat[k] += H
            down[name].flat[k] -= H
            numeric[k] = (_evidence(model, up, y, Z, OFFSET, ev.warm)
                          - _evidence(model, down, y, Z, OFFSET, ev.warm)) / (2.0 * H)
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("cls,options,lik", [
    (gd.inference.VFE, {}, "gaussian"), (gd.inference.DTC, {}, "gaussian"), (gd.inference.FITC, {}, "gaussian"),
    (gd.inference.Laplace, {"tol": 1e-15}, "poisson"),
    (gd.inference.EP, {"schedule": "parallel", **EP_TOL}, "probit")])
def test_offset_gradient_in_row_chunks_and_dask_is_the_in_memory_one(cls, options, lik):
    """The sparse methods' offset gradient through their row-chunked passes: small chunks and a
    Dask X in row blocks give the in-memory single-block vector."""
    da = pytest.importorskip("dask.array")
    model, values, y, Z = _setup(cls(**options), True, lik)
    ref = model.evaluate(values, X, y, Z, offset=OFFSET).grads["offset"]
    chunked = gd.Model(model.kernel, model.likelihood, model.inducing, cls(chunk_size=7, **options))
    np.testing.assert_allclose(chunked.evaluate(values, X, y, Z, offset=OFFSET).grads["offset"], ref,
                               rtol=1e-8, atol=1e-10)
    Xd = da.from_array(X, chunks=(8, 2))
    np.testing.assert_allclose(model.evaluate(values, Xd, y, Z, offset=OFFSET).grads["offset"], ref,
                               rtol=1e-8, atol=1e-10)


def test_ep_offset_gradient_is_gpmls_alpha_at_the_fixed_point():
    """At the EP fixed point d log Z_i / d mu_cav,i equals GPML infEP's alpha =
    (K + diag(1/tau))^-1 nu / tau (sites on f - o)."""
    model, values, y, _ = _setup(gd.inference.EP(**EP_TOL), False, "probit")
    ev = model.evaluate(values, X, y, None, offset=OFFSET)
    K = gd.components.bind(model.kernel, values, "kernel").gram(X, X)
    tau, nu = ev.warm.tau, ev.warm.nu
    alpha = np.linalg.solve(K + np.diag(1.0 / tau), nu / tau)
    np.testing.assert_allclose(ev.grads["offset"], alpha, rtol=1e-8, atol=1e-10)
    # A probit bias is a constant offset: its gradient is the vector's sum.
    assert np.sum(ev.grads["offset"]) == pytest.approx(float(ev.grads["likelihood.bias"]), rel=1e-10)


def _natural(cov, mean_names):
    """GPML's (hyp_cov, hyp_mean, hyp_lik) -> gpdsl's natural values, for an isotropic or ARD kernel
    with log sf last and the mean hyperparameters (not logged) split over ``mean_names``."""
    def natural(hyp_cov, hyp_mean, hyp_lik):
        out = {"kernel.lengthscale": np.exp(hyp_cov[:-1]) if cov == "ard" else np.exp(hyp_cov[0]),
               "kernel.variance": np.exp(2.0 * hyp_cov[-1]),
               "likelihood.variance": np.exp(2.0 * hyp_lik[0])}
        start = 0
        for name, size in mean_names:
            out[name] = hyp_mean[start] if size == 0 else hyp_mean[start:start + size]
            start += max(size, 1)
        return out
    return natural


@pytest.mark.parametrize("name,kernel,mean,cov,mean_names", [
    ("mean_const", SE(), gd.means.Constant(0.0), "iso", [("mean.constant", 0)]),
    ("mean_linear", SE(np.ones(2)), gd.means.Linear(np.zeros(2)), "ard", [("mean.coefficients", 2)]),
    ("mean_const_plus_linear", gd.kernels.Matern52(), gd.means.Constant(0.0) + gd.means.Linear(np.zeros(1)),
     "iso", [("mean.0.constant", 0), ("mean.1.coefficients", 1)]),
])
def test_gpml_mean_oracles(name, kernel, mean, cov, mean_names):
    """GPML's nlZ, its gradients (dnlZ.cov, dnlZ.mean, dnlZ.lik) and the predictions (which
    include m(X*)) to rtol 1e-8."""
    model = gd.Model(kernel, gd.likelihoods.Gaussian(), inference=gd.inference.Exact(), mean=mean)
    check_case(name, model, _natural(cov, mean_names))


@pytest.mark.parametrize("sparse", [False, True])
def test_qp_algorithm1_step_has_the_mean_gradients_of_eq4_at_fixed_sites(sparse):
    """QP(hyperparameters="qp"): eq. 4 at sites swept at the latent offset o_s holds them fixed in
    f, log N(nu/tau + o_s - o | 0, K + diag(1/tau)); its mean gradients against finite
    differences, at mean values away from those of the sweep (o != o_s)."""
    from gpdsl.methods.quantile_propagation import evaluate_at_sites, qp_sites
    mean = gd.means.Constant(0.3) + gd.means.Linear(np.array([0.2, -0.1]))
    spec = gd.inference.QP(hyperparameters="qp", **EP_TOL)
    model, values, y, Z = _setup(spec, sparse, "probit", mean=mean)
    kernel, likelihood = model.bind(values)
    site_offset = model.latent_offset(values, X, OFFSET)
    sites = qp_sites(kernel, likelihood, X, y, Z, spec=spec, offset=site_offset)
    at = dict(values, **{"mean.0.constant": np.array(0.1), "mean.1.coefficients": np.array([0.3, 0.05])})

    def eq4(v, need_grad=False):
        return evaluate_at_sites(model, v, X, y, Z, spec=spec, sites=sites, site_offset=site_offset,
                                 need_grad=need_grad, offset=OFFSET)

    same = eq4(values)
    plain = gd.methods.expectation_propagation.site_regression(
        kernel, X, Z, sites.tau, sites.nu, jitter=spec.jitter, chunk_size=None, need_grad=False, need_state=False)
    assert same.log_evidence == pytest.approx(plain.log_evidence, rel=1e-12)
    ev = eq4(at, need_grad=True)
    assert "offset" not in ev.grads
    for name in ("mean.0.constant", "mean.1.coefficients"):
        analytic = np.atleast_1d(ev.grads[name])
        for k in range(analytic.size):
            up, down = dict(at), dict(at)
            up[name], down[name] = np.array(at[name], dtype=float), np.array(at[name], dtype=float)
            up[name].flat[k] += H
            down[name].flat[k] -= H
            numeric = (eq4(up).log_evidence - eq4(down).log_evidence) / (2.0 * H)
            assert analytic[k] == pytest.approx(numeric, rel=1e-6, abs=1e-7), name


def test_qp_algorithm1_fits_a_mean_function():
    """Algorithm 1 with a constant mean converges; the constant adds to the probit bias (one
    parameter between them), so the fit ends at the evidence of the fit without it."""
    fits = [gd.Model(SE(0.9, 1.3), gd.likelihoods.Bernoulli("probit"), None, gd.inference.QP(hyperparameters="qp"),
                     mean=mean).fit(X, TARGETS["bernoulli"], offset=OFFSET)
            for mean in (None, gd.means.Constant(0.3))]
    assert all(post.converged for post in fits)
    assert fits[1].log_evidence == pytest.approx(fits[0].log_evidence, abs=1e-4)
    assert fits[1].values["mean.constant"] != pytest.approx(0.3, abs=1e-2)
