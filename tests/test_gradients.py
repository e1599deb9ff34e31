"""Every objective's analytic gradient (hyperparameters, Z, priors) against central differences."""
import numpy as np
import pytest

import gpdsl as gd
from naive import central_difference

rng = np.random.default_rng(11)
X = rng.uniform(-2, 2, size=(30, 2))
y = np.sin(2 * X[:, 0]) * X[:, 1] + 0.2 * rng.standard_normal(30)
Z0 = X[:6] + 0.1
KNOWN = rng.uniform(0.02, 0.3, size=30)

KERNELS = {
    "se-ard": gd.kernels.SquaredExponential(np.array([0.8, 1.7]), 1.3),
    "m32": gd.kernels.Matern32(1.1, 0.7),
    "m52-ard": gd.kernels.Matern52(np.array([0.6, 1.2]), 1.5),
    "sum": gd.kernels.SquaredExponential(0.9, 0.8) + gd.kernels.Matern32(1.4, 0.3),
}
LIKELIHOODS = {
    "gauss": gd.likelihoods.Gaussian(0.07),
    "hetero-known": gd.likelihoods.HeteroscedasticGaussian(variance=KNOWN),
    "hetero-poly": gd.likelihoods.HeteroscedasticGaussian(degree=2, coefficients=[-2.0, 0.1, -0.2, 0.3, 0.05]),
}
CASES = [("Exact", k, l) for k in KERNELS for l in LIKELIHOODS] + \
        [("VFE", k, l) for k in KERNELS for l in LIKELIHOODS] + \
        [("VFE-jitter", k, "gauss") for k in KERNELS] + \
        [("FITC", k, "gauss") for k in KERNELS]


def _model(method, kernel, likelihood):
    if method == "Exact":
        return gd.Model(kernel=KERNELS[kernel], likelihood=LIKELIHOODS[likelihood])
    inference = {"VFE": gd.inference.VFE(jitter=0.0), "VFE-jitter": gd.inference.VFE(jitter=1e-3),
                 "FITC": gd.inference.FITC(jitter=1e-6)}[method]
    return gd.Model(kernel=KERNELS[kernel], likelihood=LIKELIHOODS[likelihood],
                    inducing=gd.inducing.Optimized(Z0), inference=inference)


@pytest.mark.parametrize("method,kernel,likelihood", CASES)
def test_gradients_match_central_differences(method, kernel, likelihood):
    model = _model(method, kernel, likelihood)
    Z = Z0 if method != "Exact" else None
    table = model.parameter_table(X, Z)
    values = table.values()
    Zv = values.pop("inducing.Z", None)
    ev = model.evaluate(values, X, y, Zv)

    def objective(vals, Zz):
        return model.evaluate(vals, X, y, Zz, need_grad=False).log_evidence

    for name, value in values.items():
        fd = central_difference(lambda v: objective({**values, name: v}, Zv), value)
        np.testing.assert_allclose(ev.grads[name], fd, rtol=1e-5, atol=1e-7, err_msg=name)
    if Zv is not None:
        fd = central_difference(lambda Zz: objective(values, Zz), Zv)
        np.testing.assert_allclose(ev.dZ, fd, rtol=1e-5, atol=1e-7, err_msg="Z")


@pytest.mark.parametrize("prior", [gd.priors.Gamma(2.0, 3.0), gd.priors.LogNormal(0.2, 0.7)])
def test_map_objective_gradient_in_log_space(prior):
    """The optimiser's objective (-(evidence + log prior) over log-hyperparameters) and its gradient."""
    from gpdsl.fitting import _Objective

    model = gd.Model(kernel=gd.kernels.SquaredExponential(lengthscale=prior, variance=1.2),
                     likelihood=gd.likelihoods.Gaussian(0.1), inducing=gd.inducing.Optimized(Z0),
                     inference=gd.inference.VFE())
    table = model.parameter_table(X, Z0)
    objective = _Objective(model, table, X, y, Z0)
    u = table.pack(table.values()) + 0.05
    _, grad = objective(u)
    fd = central_difference(lambda v: objective(v)[0], u)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("prior", [gd.priors.Gamma(2.0, 3.0), gd.priors.LogNormal(0.2, 0.7)])
def test_prior_log_density_and_slope(prior):
    from scipy import stats
    frozen = (stats.gamma(2.0, scale=1 / 3.0) if isinstance(prior, gd.priors.Gamma)
              else stats.lognorm(0.7, scale=np.exp(0.2)))
    x = np.array([0.3, 1.0, 2.5])
    np.testing.assert_allclose(prior.log_density(x), frozen.logpdf(x), rtol=1e-12)
    fd = [central_difference(lambda v: float(prior.log_density(v)), xi) for xi in x]
    np.testing.assert_allclose(prior.grad_log_density(x), fd, rtol=1e-6)
    scipy_prior = gd.priors.ScipyPrior(frozen)
    np.testing.assert_allclose(scipy_prior.grad_log_density(x), prior.grad_log_density(x), rtol=1e-6)
