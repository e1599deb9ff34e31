"""The conformance suite: every registered component and every supported (likelihood, inference)
pair, checked against independent computations, with no list kept by hand.

The cases come from the registries (``Kernel.registry``, ``Likelihood.registry``,
``Inference.registry``, filled by each class's definition) and each class's ``variants()``, so a
new component is tested by defining it.  Per kernel: symmetric positive semi-definite Gram
matrices, ``diag`` equal to the Gram diagonal, the cross-covariance's transpose symmetry, and
``vjp`` / ``diag_vjp`` against central differences.  Per likelihood: the f-derivatives and the
hyperparameter derivatives of the log density against central differences, the variational
expectation against adaptive quadrature (and its derivatives against differences of itself), the
log predictive density against quadrature, the predictive mean against draws of ``sample``.
Per supported pair: every gradient of the method's objective (hyperparameters, and Z where the
inducing inputs are optimised) against central differences, a fitted model's save/load and
model-file round trips, and a Dask X equal to an in-memory one.  Last, the README's table of
supported pairs against ``gd.inference.supported_pairs()``.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate

import gpdsl as gd
from gpdsl.inference import Inference
from gpdsl.kernels import Kernel
from gpdsl.likelihoods import Likelihood
from naive import central_difference

# Components defined outside gpdsl join the registries by being imported, as a user's would.
import external_components  # noqa: F401

README = Path(__file__).resolve().parents[1] / "README.md"
rng = np.random.default_rng(2026)
X1 = rng.uniform(-1.5, 1.5, size=(7, 2))
X2 = rng.uniform(-1.5, 1.5, size=(5, 2))


def _label(component):
    return component.describe() if hasattr(component, "describe") else type(component).__name__


def _own(registry):
    """The registry's classes by their registered names, each once (an external class is also
    registered under its short name), less the variants a test module defines for its own oracle
    (``test_svgp_multiclass.Categorical20``, GPflow's 20-point rule, whose robust-max predictive
    sums to 0.954): they registered only where that module was collected first."""
    seen, out = set(), []
    for cls in registry.values():
        if cls.__module__.split(".")[-1].startswith("test_"):
            continue
        if cls not in seen:
            seen.add(cls)
            out.append(cls)
    return out


# Kernels of one output (a kernel of several latent functions, ``Separate``, returns stacks: its
# checks are in tests/test_separate.py).
KERNEL_CASES = [pytest.param(v, id=f"{cls.__name__}-{i}") for cls in _own(Kernel.registry)
                for i, v in enumerate(cls.variants()) if v.n_outputs == 1]


def _likelihoods(where, n_latent=1):
    """Every registered likelihood variant of ``n_latent`` latent functions (1, or "many") for
    which ``where(variant)`` holds (what a check needs)."""
    def latent(v):
        return v.n_latent == 1 if n_latent == 1 else v.n_latent > 1
    return [pytest.param(v, id=f"{cls.__name__}-{i}") for cls in _own(Likelihood.registry)
            for i, v in enumerate(cls.variants()) if latent(v) and where(v)]


def _implements(operation):
    return lambda v: getattr(type(v), operation) is not getattr(Likelihood, operation)


def _local_values(component, X):
    return {p.name: e.value for p, e in zip(component.parameters(X), component.entries("c", X))}


# -- kernels --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", KERNEL_CASES)
def test_kernel_gram_is_symmetric_psd_and_diag_is_its_diagonal(kernel):
    k = kernel.bind()
    K = k.gram(X1, X1)
    assert K.shape == (7, 7)
    np.testing.assert_allclose(K, K.T, rtol=1e-12, atol=1e-14)
    assert np.linalg.eigvalsh(K).min() >= -1e-10 * np.abs(K).max()
    np.testing.assert_allclose(k.diag(X1), np.diag(K), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(k.gram(X1, X2), k.gram(X2, X1).T, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kernel", KERNEL_CASES)
def test_kernel_gradients_match_central_differences(kernel):
    values = _local_values(kernel, X1)
    G = rng.normal(size=(7, 5))
    g = rng.normal(size=7)
    grads, dX1 = kernel.bind(values).vjp(X1, X2, G)
    dgrads = kernel.bind(values).diag_vjp(X1, g)
    assert set(grads) == set(values), "vjp must give a gradient for every parameter"
    for name, value in values.items():
        fd = central_difference(lambda v: np.sum(G * kernel.bind({**values, name: v}).gram(X1, X2)), value)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-5, atol=1e-8, err_msg=name)
        fd = central_difference(lambda v: np.sum(g * kernel.bind({**values, name: v}).diag(X1)), value)
        np.testing.assert_allclose(dgrads.get(name, 0.0), fd, rtol=1e-5, atol=1e-8, err_msg=f"diag {name}")
    fd = central_difference(lambda A: np.sum(G * kernel.bind(values).gram(A, X2)), X1)
    np.testing.assert_allclose(dX1, fd, rtol=1e-5, atol=1e-8, err_msg="X1")


@pytest.mark.parametrize("kernel", KERNEL_CASES)
def test_kernel_fitted_model_round_trips(kernel, tmp_path):
    """A GP with the kernel fits, saves, loads back (same values, same predictions to the bit)
    and round-trips through its model file."""
    model = gd.Model(kernel, gd.likelihoods.Gaussian(0.1))
    y = np.sin(X1[:, 0]) + 0.1 * X1[:, 1]
    post = model.fit(X1, y, max_iter=2)
    post.save(tmp_path / "post.nc")
    back = gd.load(tmp_path / "post.nc")
    assert back.model == model
    np.testing.assert_array_equal(back.predict(X2)["f_mean"].values, post.predict(X2)["f_mean"].values)
    toml = tmp_path / "model.toml"
    model.to_toml(toml)
    assert gd.Model.from_toml(toml) == model


@pytest.mark.parametrize("kernel", KERNEL_CASES)
def test_kernel_on_active_dims_is_the_kernel_on_those_columns(kernel):
    """``active_dims`` (handled by the Kernel base class for every kernel) reads the named
    columns, in their order, and scatters d/dX1 back into X's width (to rounding: the selected
    columns are a copy in another memory order)."""
    wide1 = np.column_stack([X1[:, 1], rng.normal(size=7), X1[:, 0]])
    wide2 = np.column_stack([X2[:, 1], rng.normal(size=5), X2[:, 0]])
    masked = dataclasses.replace(kernel, active_dims=(2, 0)).bind()
    plain = kernel.bind()
    np.testing.assert_allclose(masked.gram(wide1, wide2), plain.gram(X1, X2), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(masked.diag(wide1), plain.diag(X1), rtol=1e-12, atol=1e-14)
    G = rng.normal(size=(7, 5))
    grads, dX = masked.vjp(wide1, wide2, G)
    plain_grads, plain_dX = plain.vjp(X1, X2, G)
    np.testing.assert_allclose(dX[:, [2, 0]], plain_dX, rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(dX[:, 1], 0.0)
    for name, g in plain_grads.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-12, atol=1e-13)


# -- mean functions -------------------------------------------------------------------------------
MEAN_CASES = [pytest.param(v, id=f"{cls.__name__}-{i}") for cls in _own(gd.means.Mean.registry)
              for i, v in enumerate(cls.variants())]


@pytest.mark.parametrize("mean", MEAN_CASES)
def test_mean_gradients_match_central_differences(mean):
    values = _local_values(mean, X1)
    g = rng.normal(size=7)
    grads = mean.bind(values).vjp(X1, g)
    assert set(grads) == set(values), "vjp must give a gradient for every parameter"
    assert mean.bind(values).value(X1).shape == (7,)
    for name, value in values.items():
        fd = central_difference(lambda v: g @ mean.bind({**values, name: v}).value(X1), value)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-6, atol=1e-9, err_msg=name)


@pytest.mark.parametrize("mean", MEAN_CASES)
def test_mean_fitted_model_round_trips(mean, tmp_path):
    """A GP with the mean function fits, saves, loads back (same predictions to the bit, the
    mean included) and round-trips through its model file."""
    model = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Gaussian(0.1), mean=mean)
    y = 1.5 + np.sin(X1[:, 0]) + 0.1 * X1[:, 1]
    post = model.fit(X1, y, max_iter=3)
    fitted = mean.bind({k[len("mean."):]: v for k, v in post.values.items() if k.startswith("mean.")})
    # The same GP without a mean, at the fitted kernel and noise, on the residuals y - m(X).
    kernel, likelihood = model.bind(post.values)
    residual = gd.Model(kernel.component, likelihood.component).fit(X1, y - fitted.value(X1), optimize=False)
    f_mean, f_var = post.predict_f(X2)
    r_mean, r_var = residual.predict_f(X2)
    np.testing.assert_allclose(f_mean, r_mean + fitted.value(X2), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(f_var, r_var, rtol=1e-10, atol=1e-14)
    assert post.log_evidence == pytest.approx(residual.log_evidence, rel=1e-12)
    post.save(tmp_path / "post.nc")
    back = gd.load(tmp_path / "post.nc")
    assert back.model == model
    np.testing.assert_array_equal(back.predict_f(X2)[0], f_mean)
    toml = tmp_path / "model.toml"
    model.to_toml(toml)
    assert gd.Model.from_toml(toml) == model


# -- likelihoods ----------------------------------------------------------------------------------
def _targets(likelihood, f, seed=0):
    """Targets drawn from the likelihood at f (or f plus noise for one that draws none)."""
    r = np.random.default_rng(seed)
    try:
        y = likelihood.bind().sample(f, r)
    except NotImplementedError:
        y = f + 0.3 * r.standard_normal(f.shape)
    return likelihood.prepare_targets(np.asarray(y, dtype=float))


F = np.array([-2.1, -0.7, 0.05, 0.6, 1.9])
MEANS = np.array([-1.2, 0.3, 0.9])
VARS = np.array([0.4, 1.5, 0.02])


@pytest.mark.parametrize("likelihood", _likelihoods(lambda v: v.provides("log_density_derivatives")))
def test_log_density_derivatives_match_central_differences(likelihood):
    lik = likelihood.bind()
    y = _targets(likelihood, F)
    d = lik.log_density_derivatives(y, F)
    np.testing.assert_allclose(d[0], lik.log_density(y, F), rtol=1e-12, atol=1e-12)
    for k in range(3):
        fd = np.array([central_difference(lambda v, i=i: float(d_at(lik, y[i], v)[k][0]), F[i], step=1e-5)
                       for i in range(F.size)])
        np.testing.assert_allclose(d[k + 1], fd.ravel(), rtol=1e-5, atol=1e-7, err_msg=f"d{k + 1}")
    values = _local_values(likelihood, X1)
    params = likelihood.bind(values).log_density_param_derivatives(y, F)
    assert set(params) == set(values), "log_density_param_derivatives must cover every parameter"
    for name, value in values.items():
        for k in range(3):
            fd = central_difference(lambda v: np.sum(d_at(likelihood.bind({**values, name: v}), y, F)[k]), value)
            np.testing.assert_allclose(np.sum(params[name][k]), fd, rtol=1e-5, atol=1e-7, err_msg=f"{name} {k}")


def d_at(lik, y, f):
    return lik.log_density_derivatives(np.atleast_1d(y), np.atleast_1d(f))


def _expect(fn, mean, var):
    """E_N(f | mean, var)[fn(f)] by adaptive quadrature (the point 0 marked: log f^2 is singular there)."""
    sd = np.sqrt(var)
    lo, hi = mean - 12 * sd, mean + 12 * sd
    points = [0.0] if lo < 0.0 < hi else None
    val, _ = integrate.quad(lambda f: fn(f) * np.exp(-0.5 * (f - mean) ** 2 / var) / np.sqrt(2 * np.pi * var),
                            lo, hi, points=points, limit=400, epsabs=1e-13, epsrel=1e-12)
    return val


@pytest.mark.parametrize("likelihood", _likelihoods(lambda v: v.provides("variational_expectations")))
def test_variational_expectations_match_quadrature(likelihood):
    lik = likelihood.bind()
    y = _targets(likelihood, MEANS, seed=1)
    ve, d_mean, d_var, _ = lik.variational_expectations(y, MEANS, VARS)
    for i in range(MEANS.size):
        want = _expect(lambda f: float(lik.log_density(np.array([y[i]]), np.array([f]))[0]), MEANS[i], VARS[i])
        assert ve[i] == pytest.approx(want, rel=1e-8, abs=1e-9), i
        fd_m = central_difference(lambda m: lik.variational_expectations(y[i:i + 1], m, VARS[i:i + 1])[0][0],
                                  MEANS[i:i + 1], step=1e-5)
        fd_v = central_difference(lambda v: lik.variational_expectations(y[i:i + 1], MEANS[i:i + 1], v)[0][0],
                                  VARS[i:i + 1], step=1e-5)
        np.testing.assert_allclose(d_mean[i], fd_m[0], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(d_var[i], fd_v[0], rtol=1e-5, atol=1e-7)
    values = _local_values(likelihood, X1)
    grads = likelihood.bind(values).variational_expectations(y, MEANS, VARS)[3]
    assert set(grads) == set(values), "variational_expectations must give every parameter's gradient"
    for name, value in values.items():
        fd = central_difference(lambda v: np.sum(likelihood.bind({**values, name: v})
                                                 .variational_expectations(y, MEANS, VARS)[0]), value)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("likelihood", _likelihoods(_implements("log_predictive")))
def test_log_predictive_matches_quadrature_and_predictive_matches_draws(likelihood):
    lik = likelihood.bind()
    y = _targets(likelihood, MEANS, seed=2)
    lp = lik.log_predictive(MEANS, VARS, y)
    approximation = getattr(lik, "predictive_approximation", None)
    for i in range(MEANS.size):
        if approximation is not None:
            break
        want = _expect(lambda f: float(np.exp(lik.log_density(np.array([y[i]]), np.array([f]))[0])), MEANS[i], VARS[i])
        assert lp[i] == pytest.approx(np.log(want), rel=1e-7, abs=1e-8), i
    if approximation is not None:
        # Not the exact density (its documented approximation): it must still be a distribution.
        counts = np.arange(400.0)
        total = [np.sum(np.exp(lik.log_predictive(np.full(counts.size, m), np.full(counts.size, v), counts)))
                 for m, v in zip(MEANS, VARS)]
        np.testing.assert_allclose(total, 1.0, rtol=1e-8)
    summary = lik.predictive(MEANS, VARS)
    draws = 40_000
    f = MEANS + np.sqrt(VARS) * np.random.default_rng(3).standard_normal((draws, MEANS.size))
    ys = lik.sample(f, np.random.default_rng(4))
    if "p" in summary:
        mean, sd = np.mean(ys > 0, axis=0), np.std(ys > 0, axis=0)
        np.testing.assert_array_less(np.abs(mean - summary["p"]), 5 * sd / np.sqrt(draws) + 1e-3)
    else:
        mean, var = ys.mean(axis=0), ys.var(axis=0)
        np.testing.assert_array_less(np.abs(mean - summary["y_mean"]), 5 * np.sqrt(var / draws) + 1e-9)
        # The sample variance's standard error, sqrt((m4 - var^2) / n): heavy tails widen it.
        m4 = np.mean((ys - mean) ** 4, axis=0)
        np.testing.assert_array_less(np.abs(var - summary["y_var"]), 5 * np.sqrt((m4 - var * var) / draws) + 1e-9)


# q(f_n) of K = 3 latent functions at three points: far apart, level, and one wide.
MEANS_K = np.array([[-1.2, 0.3, 0.9], [0.5, 0.5, -0.4], [0.0, 2.5, 0.1]])
VARS_K = np.array([[0.4, 1.5, 0.02], [0.1, 0.9, 2.0], [1.0, 0.3, 0.6]])


@pytest.mark.parametrize("likelihood", _likelihoods(lambda v: v.provides("variational_expectations"), n_latent="many"))
def test_multi_latent_expectations_bound_draws_and_match_differences(likelihood):
    """K latent functions: E_q[log p(y | f)] is at most the average over 2e5 draws (every rule
    here is exact or a Jensen lower bound) and its derivatives in each mean and variance equal
    central differences."""
    lik = likelihood.bind()
    y = np.array([0.0, 1.0, 2.0])[: likelihood.n_latent]
    y = np.resize(y, MEANS_K.shape[0])
    ve, d_mean, d_var, grads = lik.variational_expectations(y, MEANS_K, VARS_K)
    assert ve.shape == (3,) and d_mean.shape == d_var.shape == MEANS_K.shape and grads == {}
    draws = MEANS_K + np.sqrt(VARS_K) * np.random.default_rng(8).standard_normal((200_000,) + MEANS_K.shape)
    logp = lik.log_density(np.broadcast_to(y, draws.shape[:2]), draws)
    mc, se = logp.mean(axis=0), logp.std(axis=0) / np.sqrt(draws.shape[0])
    np.testing.assert_array_less(ve, mc + 5 * se + 2e-3)
    for i in range(3):
        fd_m = central_difference(lambda m: lik.variational_expectations(y[i:i + 1], m[None], VARS_K[i:i + 1])[0][0],
                                  MEANS_K[i], step=1e-5)
        fd_v = central_difference(lambda v: lik.variational_expectations(y[i:i + 1], MEANS_K[i:i + 1], v[None])[0][0],
                                  VARS_K[i], step=1e-6)
        np.testing.assert_allclose(d_mean[i], fd_m, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(d_var[i], fd_v, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("likelihood", _likelihoods(_implements("predictive"), n_latent="many"))
def test_multi_latent_predictive_is_a_distribution_matching_draws(likelihood):
    """K latent functions: the class probabilities sum to 1, equal the frequencies of labels
    sampled at draws of f (to 5 standard errors plus the rule's 2e-3) and give log_predictive."""
    lik = likelihood.bind()
    p = lik.predictive(MEANS_K, VARS_K)["p"]
    # A rule (predictive_approximation) need not be normalised by construction: robust-max's
    # one-dimensional one sums to 1 - 6e-4 here.
    exact = getattr(lik, "predictive_approximation", None) is None
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12 if exact else 1e-3)
    draws = 100_000
    f = MEANS_K + np.sqrt(VARS_K) * np.random.default_rng(9).standard_normal((draws,) + MEANS_K.shape)
    labels = lik.sample(f, np.random.default_rng(10))
    freq = np.stack([np.mean(labels == k, axis=0) for k in range(likelihood.n_latent)], axis=1)
    np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / draws) + 2e-3)
    for k in range(likelihood.n_latent):
        codes = np.full(MEANS_K.shape[0], float(k))
        np.testing.assert_allclose(lik.log_predictive(MEANS_K, VARS_K, codes), np.log(p[:, k]), rtol=1e-10)


CAVITIES = [(-0.8, 0.5), (0.4, 2.0), (1.1, 0.05)]


@pytest.mark.parametrize("likelihood", _likelihoods(lambda v: v.provides("site_model")))
def test_site_model_matches_quadrature(likelihood):
    """EP's tilted moments (log Z, mean, variance) against adaptive quadrature; QP's variance not
    above EP's (Zhang et al. Theorem 2); d log Z / d theta against central differences; the
    offset wrapper equal to the shifted cavity."""
    from gpdsl._jit.projections import with_offset
    lik = likelihood.bind()
    site = lik.site_model()
    y = _targets(likelihood, np.array([m for m, _ in CAVITIES]), seed=7)
    values = _local_values(likelihood, X1)
    for (mu, var), yi in zip(CAVITIES, y):
        log_z, mean, variance = site.functions.project(yi, mu, var, site.params, None, None, None)
        density = lambda f: float(np.exp(lik.log_density(np.array([yi]), np.array([f]))[0]))
        z = _expect(density, mu, var)
        m1 = _expect(lambda f: f * density(f), mu, var) / z
        m2 = _expect(lambda f: (f - m1) ** 2 * density(f), mu, var) / z
        assert log_z == pytest.approx(np.log(z), rel=1e-9, abs=1e-9)
        assert mean == pytest.approx(m1, rel=1e-8, abs=1e-9 * np.sqrt(var))
        assert variance == pytest.approx(m2, rel=1e-7)
        qp_variance = site.functions.project(yi, mu, var, site.params, True, None, None)[2]
        assert 0.0 < qp_variance <= variance * (1.0 + 1e-10)
        grads = site.functions.log_z_gradient(yi, mu, var, site.params)
        assert len(grads) == len(site.params) == len(site.names)
        for k, name in enumerate(site.names):
            fd = central_difference(lambda v: likelihood.bind({**values, name: v}).site_model().functions.project(
                yi, mu, var, likelihood.bind({**values, name: v}).site_model().params, None, None, None)[0],
                values[name])
            np.testing.assert_allclose(grads[k], fd, rtol=1e-6, atol=1e-8, err_msg=name)
        shifted = with_offset(site.functions).project(np.array([yi, 0.3]), mu - 0.3, var, site.params, None, None,
                                                      None)
        np.testing.assert_allclose(shifted, (log_z, mean - 0.3, variance), rtol=1e-12, atol=1e-12)


# -- supported pairs ------------------------------------------------------------------------------
N, M = 14, 3
XP = np.random.default_rng(5).uniform(-1.5, 1.5, size=(N, 2))
Z0 = XP[:M] + 0.05
KERNEL = gd.kernels.SquaredExponential(np.array([0.9, 1.3]), 1.1)


# Local iterations to tight tolerances, so that the objective is a smooth function of the
# hyperparameters to the differences' resolution (the options each method has of these).
TIGHT = {"tol": 1e-13, "q_tol": 1e-14, "q_max_iter": 5000, "max_sweeps": 5000}


def _tight(method):
    fields = {f.name for f in dataclasses.fields(method)}
    return dataclasses.replace(method, **{k: v for k, v in TIGHT.items() if k in fields})


def _pair_cases(where=lambda likelihood, method: True):
    cases = []
    for method_cls in _own(Inference.registry):
        for method in method_cls.variants():
            for lik_cls in _own(Likelihood.registry):
                for i, lik in enumerate(lik_cls.variants()):
                    if method.accepts(lik) and where(lik, method):
                        cases.append(pytest.param(lik, _tight(method), id=f"{lik_cls.__name__}-{i}-{method_cls.__name__}"))
    return cases


PAIRS = _pair_cases()


def _model(likelihood, inference):
    inducing = gd.inducing.Optimized(Z0) if inference.inducing_rule != "forbidden" else None
    try:
        inference.check_inducing(likelihood, inducing)
    except ValueError:        # a method dense for this likelihood (multi-class Laplace)
        inducing = None
    return gd.Model(KERNEL, likelihood, inducing, inference)


def _data(likelihood):
    # A likelihood even in f (the square-link Poisson) gets data away from f = 0, where its tilted
    # laws are bimodal: EP clamps such sites, and its gradient is then documented as approximate.
    f = (3.5 if likelihood.sign_symmetric else 0.5) + 0.5 * np.sin(1.3 * XP[:, 0]) + 0.3 * XP[:, 1]
    if likelihood.n_latent > 1:
        # One latent function a class, each its own phase of the same pattern.
        f = np.column_stack([np.sin(1.3 * XP[:, 0] + 2.0 * k) + 0.3 * k * XP[:, 1]
                             for k in range(likelihood.n_latent)])
    return _targets(likelihood, f, seed=6)


def _check_gradients(model, y):
    """Every gradient of the model's objective at its declared values (hyperparameters, and Z
    where optimised) against central differences; returns the evaluation."""
    table = model.parameter_table(XP, Z0 if model.sparse else None)
    values = table.values()
    Z = values.pop("inducing.Z", None)
    ev = model.evaluate(values, XP, y, Z)

    def objective(vals, Zz):
        return model.evaluate(vals, XP, y, Zz, need_grad=False).log_evidence

    assert np.isfinite(ev.log_evidence)
    # EP's gradient is exact at a moment-matched fixed point; clamped sites would make it
    # approximate (documented), so these data must give none.
    assert getattr(ev.warm, "clamped", 0) == 0
    for e in table.free:
        if e.name == "inducing.Z":
            continue
        fd = central_difference(lambda v: objective({**values, e.name: v}, Z), values[e.name])
        np.testing.assert_allclose(ev.grads[e.name], fd, rtol=2e-5, atol=2e-6, err_msg=e.name)
    if Z is not None:
        fd = central_difference(lambda Zz: objective(values, Zz), Z)
        np.testing.assert_allclose(ev.dZ, fd, rtol=2e-5, atol=2e-6, err_msg="Z")
    return ev


@pytest.mark.parametrize("likelihood,inference", PAIRS)
def test_pair_gradients_match_central_differences(likelihood, inference):
    _check_gradients(_model(likelihood, inference), likelihood.prepare_targets(_data(likelihood)))


@pytest.mark.parametrize("likelihood,inference", PAIRS)
def test_pair_fitted_model_round_trips(likelihood, inference, tmp_path):
    model = _model(likelihood, inference)
    y = _data(likelihood)
    post = model.fit(XP, y, max_iter=3)
    post.save(tmp_path / "post.nc")
    back = gd.load(tmp_path / "post.nc")
    assert back.model == model
    for name, value in post.values.items():
        np.testing.assert_array_equal(back.values[name], value, err_msg=name)
    X_new = XP[:4] + 0.1
    a, b = post.predict(X_new), back.predict(X_new)
    for name in a.data_vars:
        np.testing.assert_array_equal(b[name].values, a[name].values, err_msg=name)
    assert gd.Model.from_dict(model.to_dict()) == model
    toml = tmp_path / "model.toml"
    toml.write_text(model.to_toml())
    assert gd.Model.from_toml(toml) == model


@pytest.mark.parametrize("likelihood,inference", _pair_cases(
    lambda likelihood, method: method.supports_dask_chunks and likelihood.supports_dask_chunks))
def test_pair_dask_equals_in_memory(likelihood, inference):
    import dask.array as da
    chunked = inference
    if hasattr(inference, "chunk_size"):
        chunked = dataclasses.replace(inference, chunk_size=5)
    model = _model(likelihood, chunked)
    y = likelihood.prepare_targets(_data(likelihood))
    table = model.parameter_table(XP, Z0 if model.sparse else None)
    values = table.values()
    Z = values.pop("inducing.Z", None)
    memory = model.evaluate(values, XP, y, Z)
    lazy = model.evaluate(values, da.from_array(XP, chunks=(5, 2)), y, Z)
    assert lazy.log_evidence == pytest.approx(memory.log_evidence, rel=1e-10, abs=1e-10)
    for name, g in memory.grads.items():
        np.testing.assert_allclose(lazy.grads[name], g, rtol=1e-9, atol=1e-10, err_msg=name)


def test_readme_pairs_table_is_supported_pairs():
    text = README.read_text()
    section = text[text.index("## Supported (likelihood, inference) pairs"):]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| likelihood"))
    header = lines[start]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    methods = [c.strip().strip("`") for c in header.strip("|").split("|")[1:]]
    listed = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        name = re.match(r"`(\w+)", cells[0]).group(1)
        assert len(cells) == len(methods) + 1, row
        for method, cell in zip(methods, cells[1:]):
            assert cell in ("yes", "no"), row
            if cell == "yes":
                listed.add(f"{name} + {method}")
        variant = re.match(r"`(\w+)\((K, )?link=\"(\w+)\"\)`", cells[0])
        if variant:   # a row per link: each cell is what the method says of that link (K = 3 classes)
            lik = getattr(gd.likelihoods, variant.group(1))(*([3] if variant.group(2) else []), link=variant.group(3))
            for method, cell in zip(methods, cells[1:]):
                assert gd.inference.INFERENCE[method]().accepts(lik) == (cell == "yes"), (row, method)
    assert set(methods) == set(gd.inference.INFERENCE)
    assert sorted(listed) == gd.inference.supported_pairs()


# -- every method with a composite of the new kernels and a mean function -----------------------
COMPOSITE = (gd.kernels.Periodic(gd.kernels.RationalQuadratic(0.9, 1.1, alpha=0.8), period=1.7)
             * gd.kernels.Linear(0.5, active_dims=[1])
             + gd.kernels.Matern12(0.8, 0.3, name="rough"))
AFFINE = gd.means.Constant(0.2) + gd.means.Linear(np.array([0.3, -0.2]))


def _method_cases():
    """Each registered method's first variant with the first of a few likelihoods it accepts."""
    likelihoods = [gd.likelihoods.Gaussian(0.3), gd.likelihoods.Bernoulli("logit"), gd.likelihoods.Bernoulli("probit"),
                   gd.likelihoods.Poisson(link="log")]
    cases = []
    for method_cls in _own(Inference.registry):
        method = _tight(method_cls.variants()[0])
        chosen = next((lik for lik in likelihoods if method.accepts(lik)), None)
        if chosen is not None and method.supports_offset:
            cases.append(pytest.param(chosen, method, id=f"{type(chosen).__name__}-{method_cls.__name__}"))
    return cases


@pytest.mark.parametrize("likelihood,inference", _method_cases())
def test_method_with_composite_kernel_and_mean_matches_central_differences(likelihood, inference):
    """Every method runs a composite of the new kernels (periodic of an RQ base, a linear kernel on
    one column, a named Matérn 1/2) with an affine mean: its gradients in every kernel, likelihood
    and mean parameter and in Z against central differences."""
    inducing = gd.inducing.Optimized(Z0) if inference.inducing_rule != "forbidden" else None
    model = gd.Model(COMPOSITE, likelihood, inducing, inference, mean=AFFINE)
    ev = _check_gradients(model, likelihood.prepare_targets(_data(likelihood)))
    assert {"mean.0.constant", "mean.1.coefficients", "kernel.rough.lengthscale"} <= set(ev.grads)
