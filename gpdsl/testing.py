"""Conformance checks for components, gpdsl's own and a user's (in the spirit of scikit-learn's
``check_estimator`` / ``parametrize_with_checks``).

Each check takes one instance and raises ``AssertionError`` when the component disagrees with an
independent computation: central differences for every gradient, adaptive quadrature
(:func:`scipy.integrate.quad`) for every expectation over a Gaussian latent, draws for a predictive,
and a fit that saves, loads and round-trips through its model file.  What is checked follows from
what a component provides (:meth:`gpdsl.likelihoods.Likelihood.provides`), so a likelihood is
checked on every operation it offers, its own and the base class's quadrature defaults alike,
against its *own* log density::

    import gpdsl.testing

    gpdsl.testing.check_likelihood(MyLikelihood)      # every variant, every check; raises on failure
    gpdsl.testing.check_kernel(MyKernel(0.5))

    @gpdsl.testing.parametrize_with_checks([MyLikelihood, MyKernel])
    def test_gpdsl_conformance(component, check):    # one pytest case per (variant, check)
        check(component)

:func:`check_likelihood` also runs, with every registered inference method that accepts the
likelihood, the method's gradients, a fit's predictions and its save/load round trip;
:func:`check_method` does the same for a method with every registered likelihood it accepts.
Partners are taken from the registries (``Likelihood.registry``, ``Inference.registry``), less the
classes defined in modules named ``test_*`` (a test's oracle variants).

Per kernel: a symmetric positive semi-definite Gram matrix, ``diag`` its diagonal, the
cross-covariance's transpose symmetry, ``vjp`` / ``diag_vjp`` against central differences, the
kernel on ``active_dims`` equal to the kernel on those columns, and a fitted model's round trips.
Per mean function: its gradients against central differences and a fitted model equal to a
zero-mean GP on y - m(X).  Per likelihood: the derivatives of its log density in f and in its
hyperparameters against central differences; its variational expectations against adaptive
quadrature of its log density, their derivatives against differences of themselves; its log
predictive density against quadrature (a documented approximation must still be normalised);
its predictive summaries against draws of ``sample``; EP's tilted moments against quadrature of
the tilted distribution, QP's variance not above EP's, d log Z / d theta against differences.
Per (likelihood, method) pair: every gradient of the objective (hyperparameters, and Z where
optimised) against central differences; a fit whose ``predict``, ``log_predictive`` and
``to_inference_data`` agree with the likelihood's operations; its save/load and model-file round
trips; a Dask X equal to an in-memory one.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import tempfile
import warnings
from pathlib import Path

import numpy as np
from scipy import integrate

from . import Model, load
from .inducing import Optimized
from .inference import Inference
from .kernels import Kernel, SquaredExponential
from .likelihoods import Gaussian, Likelihood
from .means import Mean

# Inputs of the component checks: two features on [-1.5, 1.5].
_INPUTS = np.random.default_rng(2026)
X1 = _INPUTS.uniform(-1.5, 1.5, size=(7, 2))
X2 = _INPUTS.uniform(-1.5, 1.5, size=(5, 2))

# Latent values, Gaussian q(f) = N(MEANS, VARS) and EP cavities the likelihood checks run at.
F = np.array([-2.1, -0.7, 0.05, 0.6, 1.9])
MEANS = np.array([-1.2, 0.3, 0.9])
VARS = np.array([0.4, 1.5, 0.02])
CAVITIES = [(-0.8, 0.5), (0.4, 2.0), (1.1, 0.05)]
# q(f_n) of K = 3 latent functions at three points: far apart, level, and one wide.
MEANS_K = np.array([[-1.2, 0.3, 0.9], [0.5, 0.5, -0.4], [0.0, 2.5, 0.1]])
VARS_K = np.array([[0.4, 1.5, 0.02], [0.1, 0.9, 2.0], [1.0, 0.3, 0.6]])

# The (likelihood, method) checks' problem: N points, M optimised inducing inputs.
N, M = 14, 3
XP = np.random.default_rng(5).uniform(-1.5, 1.5, size=(N, 2))
Z0 = XP[:M] + 0.05
KERNEL = SquaredExponential(np.array([0.9, 1.3]), 1.1)

# Local iterations to tight tolerances, so that the objective is a smooth function of the
# hyperparameters to the differences' resolution (the options each method has of these).
TIGHT = {"tol": 1e-13, "q_tol": 1e-14, "q_max_iter": 5000, "max_sweeps": 5000}


# -- helpers --------------------------------------------------------------------------------------
def central_difference(f, x, step=1e-6):
    """Gradient of a scalar function at an array by central differences of relative steps.

    Parameters
    ----------
    f : callable
        ``f(x) -> float``.
    x : array_like
        The point.
    step : float, default 1e-6
        Relative step h_i = step * max(|x_i|, 1).

    Returns
    -------
    ndarray, the shape of x
        (f(x + h_i e_i) - f(x - h_i e_i)) / (2 h_i).
    """
    x = np.array(x, dtype=float)
    g = np.zeros_like(x)
    for i in range(x.size):
        h = step * max(abs(x.flat[i]), 1.0)
        xp, xm = x.copy(), x.copy()
        xp.flat[i] += h
        xm.flat[i] -= h
        g.flat[i] = (f(xp) - f(xm)) / (2 * h)
    return g


def expect(fn, mean, var):
    """E_N(f | mean, var)[fn(f)] by adaptive quadrature over mean +- 12 sd (the point 0 marked: a
    log f^2 is singular there).

    Parameters
    ----------
    fn : callable
        ``fn(f) -> float`` of a scalar f.
    mean, var : float
        The Gaussian's moments (var > 0).

    Returns
    -------
    float
    """
    sd = np.sqrt(var)
    lo, hi = mean - 12 * sd, mean + 12 * sd
    points = [0.0] if lo < 0.0 < hi else None
    val, _ = integrate.quad(lambda f: fn(f) * np.exp(-0.5 * (f - mean) ** 2 / var) / np.sqrt(2 * np.pi * var),
                            lo, hi, points=points, limit=400, epsabs=1e-13, epsrel=1e-12)
    return val


def registered(base):
    """The classes of a registry (``Kernel``, ``Likelihood``, ``Mean``, ``Inference``), each
    once, less those defined in modules named ``test_*`` (a test's oracle variants).

    Parameters
    ----------
    base : type
        A family's base class.

    Returns
    -------
    list of type
    """
    seen, out = set(), []
    for cls in base.registry.values():
        if cls.__module__.split(".")[-1].startswith("test_") or cls in seen:
            continue
        seen.add(cls)
        out.append(cls)
    return out


def label(component):
    """A component's name for messages and test ids: ``describe()`` where it has one."""
    return component.describe() if hasattr(component, "describe") else type(component).__name__


def _instances(component):
    """A class's ``variants()``, or the instance alone."""
    return tuple(component.variants()) if isinstance(component, type) else (component,)


def _local_values(component, X):
    return {p.name: e.value for p, e in zip(component.parameters(X), component.entries("c", X))}


def _targets(likelihood, f, seed=0):
    """Targets drawn from the likelihood at f (or f plus noise for one that draws none)."""
    r = np.random.default_rng(seed)
    try:
        y = likelihood.bind().sample(f, r)
    except NotImplementedError:
        y = f + 0.3 * r.standard_normal(f.shape)
    return likelihood.prepare_targets(np.asarray(y, dtype=float))


def _has_density(likelihood):
    return likelihood.defines("log_density") or likelihood.defines("log_density_derivatives")


def _draws_y(likelihood):
    """Whether the likelihood draws y (its own ``sample`` or the default's for binary and count targets)."""
    return likelihood.defines("sample") or likelihood.target_kind in ("binary", "count")


# -- kernels --------------------------------------------------------------------------------------
def check_kernel_gram(kernel):
    """Gram matrix symmetric positive semi-definite, ``diag`` its diagonal, K(X1, X2) = K(X2, X1)^T.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        A kernel of one output.
    """
    k = kernel.bind()
    K = k.gram(X1, X1)
    assert K.shape == (7, 7)
    np.testing.assert_allclose(K, K.T, rtol=1e-12, atol=1e-14)
    assert np.linalg.eigvalsh(K).min() >= -1e-10 * np.abs(K).max()
    np.testing.assert_allclose(k.diag(X1), np.diag(K), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(k.gram(X1, X2), k.gram(X2, X1).T, rtol=1e-12, atol=1e-14)


def check_kernel_gradients(kernel):
    """``vjp`` (hyperparameters and X1) and ``diag_vjp`` against central differences.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
    """
    rng = np.random.default_rng(11)
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


def check_kernel_fitted_model_round_trips(kernel):
    """A GP with the kernel fits, saves, loads back (same values, same predictions to the bit)
    and round-trips through its model file.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
    """
    model = Model(kernel, Gaussian(0.1))
    y = np.sin(X1[:, 0]) + 0.1 * X1[:, 1]
    post = model.fit(X1, y, max_iter=2)
    with tempfile.TemporaryDirectory() as folder:
        post.save(Path(folder) / "post.nc")
        back = load(Path(folder) / "post.nc")
        assert back.model == model
        np.testing.assert_array_equal(back.predict(X2)["f_mean"].values, post.predict(X2)["f_mean"].values)
        toml = Path(folder) / "model.toml"
        model.to_toml(toml)
        assert Model.from_toml(toml) == model


def check_kernel_active_dims(kernel):
    """``active_dims`` (handled by the Kernel base class for every kernel) reads the named
    columns, in their order, and scatters d/dX1 back into X's width (to rounding: the selected
    columns are a copy in another memory order).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
    """
    rng = np.random.default_rng(12)
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


KERNEL_CHECKS = (check_kernel_gram, check_kernel_gradients, check_kernel_fitted_model_round_trips,
                 check_kernel_active_dims)


# -- mean functions -------------------------------------------------------------------------------
def check_mean_gradients(mean):
    """``value`` of shape (n,) and ``vjp`` against central differences.

    Parameters
    ----------
    mean : gpdsl.means.Mean
    """
    values = _local_values(mean, X1)
    g = np.random.default_rng(13).normal(size=7)
    grads = mean.bind(values).vjp(X1, g)
    assert set(grads) == set(values), "vjp must give a gradient for every parameter"
    assert mean.bind(values).value(X1).shape == (7,)
    for name, value in values.items():
        fd = central_difference(lambda v: g @ mean.bind({**values, name: v}).value(X1), value)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-6, atol=1e-9, err_msg=name)


def check_mean_fitted_model_round_trips(mean):
    """A GP with the mean function fits, saves, loads back (same predictions to the bit, the
    mean included) and round-trips through its model file; at the fitted values it is the
    zero-mean GP on the residuals y - m(X).

    Parameters
    ----------
    mean : gpdsl.means.Mean
    """
    model = Model(SquaredExponential(), Gaussian(0.1), mean=mean)
    y = 1.5 + np.sin(X1[:, 0]) + 0.1 * X1[:, 1]
    post = model.fit(X1, y, max_iter=3)
    fitted = mean.bind({k[len("mean."):]: v for k, v in post.values.items() if k.startswith("mean.")})
    kernel, likelihood = model.bind(post.values)
    residual = Model(kernel.component, likelihood.component).fit(X1, y - fitted.value(X1), optimize=False)
    f_mean, f_var = post.predict_f(X2)
    r_mean, r_var = residual.predict_f(X2)
    np.testing.assert_allclose(f_mean, r_mean + fitted.value(X2), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(f_var, r_var, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(post.log_evidence, residual.log_evidence, rtol=1e-12)
    with tempfile.TemporaryDirectory() as folder:
        post.save(Path(folder) / "post.nc")
        back = load(Path(folder) / "post.nc")
        assert back.model == model
        np.testing.assert_array_equal(back.predict_f(X2)[0], f_mean)
        toml = Path(folder) / "model.toml"
        model.to_toml(toml)
        assert Model.from_toml(toml) == model


MEAN_CHECKS = (check_mean_gradients, check_mean_fitted_model_round_trips)


# -- likelihoods ----------------------------------------------------------------------------------
def _d_at(lik, y, f):
    return lik.log_density_derivatives(np.atleast_1d(y), np.atleast_1d(f))


def check_likelihood_derivatives(likelihood):
    """``log_density_derivatives``: its first term equal to ``log_density``, d1..d3 against
    central differences of the term below; ``log_density_param_derivatives`` for every
    hyperparameter against central differences in it.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One that provides ``"log_density_derivatives"``.
    """
    lik = likelihood.bind()
    y = _targets(likelihood, F)
    d = lik.log_density_derivatives(y, F)
    np.testing.assert_allclose(d[0], lik.log_density(y, F), rtol=1e-12, atol=1e-12,
                               err_msg="log_density_derivatives(y, f)[0] must be log_density(y, f)")
    for k in range(3):
        fd = np.array([central_difference(lambda v, i=i: float(_d_at(lik, y[i], v)[k][0]), F[i], step=1e-5)
                       for i in range(F.size)])
        np.testing.assert_allclose(d[k + 1], fd.ravel(), rtol=1e-5, atol=1e-7, err_msg=f"d{k + 1}")
    values = _local_values(likelihood, X1)
    params = likelihood.bind(values).log_density_param_derivatives(y, F)
    assert set(params) == set(values), "log_density_param_derivatives must cover every parameter"
    for name, value in values.items():
        for k in range(3):
            fd = central_difference(lambda v: np.sum(_d_at(likelihood.bind({**values, name: v}), y, F)[k]), value)
            np.testing.assert_allclose(np.sum(params[name][k]), fd, rtol=1e-5, atol=1e-7, err_msg=f"{name} {k}")


def check_likelihood_variational_expectations(likelihood):
    """E_q[log p(y | f)] against adaptive quadrature of ``log_density``; its derivatives in the
    mean and variance and in every hyperparameter against central differences of itself.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One of one latent function that provides ``"variational_expectations"``.
    """
    lik = likelihood.bind()
    y = _targets(likelihood, MEANS, seed=1)
    ve, d_mean, d_var, _ = lik.variational_expectations(y, MEANS, VARS)
    for i in range(MEANS.size):
        want = expect(lambda f: float(lik.log_density(np.array([y[i]]), np.array([f]))[0]), MEANS[i], VARS[i])
        np.testing.assert_allclose(ve[i], want, rtol=1e-8, atol=1e-9, err_msg=f"E_q[log p] at q {i}")
        fd_m = central_difference(lambda m: lik.variational_expectations(y[i:i + 1], m, VARS[i:i + 1])[0][0],
                                  MEANS[i:i + 1], step=1e-5)
        fd_v = central_difference(lambda v: lik.variational_expectations(y[i:i + 1], MEANS[i:i + 1], v)[0][0],
                                  VARS[i:i + 1], step=1e-5)
        np.testing.assert_allclose(d_mean[i], fd_m[0], rtol=1e-5, atol=1e-7, err_msg=f"d/dmean at q {i}")
        np.testing.assert_allclose(d_var[i], fd_v[0], rtol=1e-5, atol=1e-7, err_msg=f"d/dvar at q {i}")
    values = _local_values(likelihood, X1)
    grads = likelihood.bind(values).variational_expectations(y, MEANS, VARS)[3]
    assert set(grads) == set(values), "variational_expectations must give every parameter's gradient"
    for name, value in values.items():
        fd = central_difference(lambda v: np.sum(likelihood.bind({**values, name: v})
                                                 .variational_expectations(y, MEANS, VARS)[0]), value)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-5, atol=1e-7, err_msg=name)


def check_likelihood_log_predictive(likelihood):
    """log E[p(y | f)] against adaptive quadrature of ``log_density`` (a documented
    ``predictive_approximation`` must still be a distribution over the counts 0..399).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One of one latent function with a density.
    """
    lik = likelihood.bind()
    y = _targets(likelihood, MEANS, seed=2)
    lp = lik.log_predictive(MEANS, VARS, y)
    if getattr(lik, "predictive_approximation", None) is not None:
        # Not the exact density (its documented approximation): it must still be a distribution.
        counts = np.arange(400.0)
        total = [np.sum(np.exp(lik.log_predictive(np.full(counts.size, m), np.full(counts.size, v), counts)))
                 for m, v in zip(MEANS, VARS)]
        np.testing.assert_allclose(total, 1.0, rtol=1e-8)
        return
    for i in range(MEANS.size):
        want = expect(lambda f: float(np.exp(lik.log_density(np.array([y[i]]), np.array([f]))[0])), MEANS[i], VARS[i])
        np.testing.assert_allclose(lp[i], np.log(want), rtol=1e-7, atol=1e-8, err_msg=f"log_predictive at q {i}")


def check_likelihood_predictive(likelihood):
    """``predictive`` against 40,000 draws of ``sample`` at draws of f: ``p`` to 5 standard
    errors plus 1e-3, ``y_mean`` and ``y_var`` to 5 standard errors (the variance's from the
    fourth moment); binary targets' ``p`` also against quadrature of ``log_density``.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One of one latent function that draws y.
    """
    lik = likelihood.bind()
    summary = lik.predictive(MEANS, VARS)
    assert "p" in summary or "y_mean" in summary, f"predictive gave neither p nor y_mean: {sorted(summary)}"
    draws = 40_000
    f = MEANS + np.sqrt(VARS) * np.random.default_rng(3).standard_normal((draws, MEANS.size))
    ys = lik.sample(f, np.random.default_rng(4))
    if "p" in summary:
        positive = lik.prepare_targets(np.array([0.0, 1.0]))[1]
        mean, sd = np.mean(ys == positive, axis=0), np.std(ys == positive, axis=0)
        np.testing.assert_array_less(np.abs(mean - summary["p"]), 5 * sd / np.sqrt(draws) + 1e-3)
        for i in range(MEANS.size):
            want = expect(lambda v: float(np.exp(lik.log_density(np.array([positive]), np.array([v]))[0])),
                          MEANS[i], VARS[i])
            np.testing.assert_allclose(summary["p"][i], want, rtol=1e-7, atol=1e-10, err_msg=f"p at q {i}")
    else:
        mean, var = ys.mean(axis=0), ys.var(axis=0)
        np.testing.assert_array_less(np.abs(mean - summary["y_mean"]), 5 * np.sqrt(var / draws) + 1e-9)
        # The sample variance's standard error, sqrt((m4 - var^2) / n): heavy tails widen it.
        m4 = np.mean((ys - mean) ** 4, axis=0)
        np.testing.assert_array_less(np.abs(var - summary["y_var"]), 5 * np.sqrt((m4 - var * var) / draws) + 1e-9)


def check_likelihood_site_model(likelihood):
    """EP's tilted moments (log Z, mean, variance) against adaptive quadrature of the tilted
    distribution cavity x p(y | f) of ``log_density``; QP's variance not above EP's (Zhang et
    al. Theorem 2); d log Z / d theta against central differences; the offset wrapper equal to
    the shifted cavity.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One that provides ``"site_model"``.
    """
    from ._jit.projections import with_offset
    lik = likelihood.bind()
    site = lik.site_model()
    y = _targets(likelihood, np.array([m for m, _ in CAVITIES]), seed=7)
    values = _local_values(likelihood, X1)
    for (mu, var), yi in zip(CAVITIES, y):
        log_z, mean, variance = site.functions.project(yi, mu, var, site.params, None, None, None)
        density = lambda f: float(np.exp(lik.log_density(np.array([yi]), np.array([f]))[0]))  # noqa: E731
        z = expect(density, mu, var)
        m1 = expect(lambda f: f * density(f), mu, var) / z
        m2 = expect(lambda f: (f - m1) ** 2 * density(f), mu, var) / z
        where = f"cavity ({mu}, {var}), y = {yi}"
        np.testing.assert_allclose(log_z, np.log(z), rtol=1e-9, atol=1e-9, err_msg=f"log Z at {where}")
        np.testing.assert_allclose(mean, m1, rtol=1e-8, atol=1e-9 * np.sqrt(var), err_msg=f"tilted mean at {where}")
        np.testing.assert_allclose(variance, m2, rtol=1e-7, err_msg=f"tilted variance at {where}")
        qp_variance = site.functions.project(yi, mu, var, site.params, True, None, None)[2]
        assert 0.0 < qp_variance <= variance * (1.0 + 1e-10), (qp_variance, variance)
        grads = site.functions.log_z_gradient(yi, mu, var, site.params)
        assert len(grads) == len(site.params) == len(site.names)
        for k, name in enumerate(site.names):
            def log_z_at(v, name=name):
                moved = likelihood.bind({**values, name: v}).site_model()
                return moved.functions.project(yi, mu, var, moved.params, None, None, None)[0]
            np.testing.assert_allclose(grads[k], central_difference(log_z_at, values[name]), rtol=1e-6, atol=1e-8,
                                       err_msg=name)
        shifted = with_offset(site.functions).project(np.array([yi, 0.3]), mu - 0.3, var, site.params, None, None,
                                                      None)
        np.testing.assert_allclose(shifted, (log_z, mean - 0.3, variance), rtol=1e-12, atol=1e-12)


def check_likelihood_multi_latent_expectations(likelihood):
    """K latent functions: E_q[log p(y | f)] is at most the average over 2e5 draws (every rule
    here is exact or a Jensen lower bound) and its derivatives in each mean and variance equal
    central differences.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One of K >= 2 latent functions that provides ``"variational_expectations"``.
    """
    lik = likelihood.bind()
    y = np.resize(np.array([0.0, 1.0, 2.0])[: likelihood.n_latent], MEANS_K.shape[0])
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


def check_likelihood_multi_latent_predictive(likelihood):
    """K latent functions: the class probabilities sum to 1, equal the frequencies of labels
    sampled at draws of f (to 5 standard errors plus the rule's 2e-3) and give log_predictive.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One of K >= 2 latent functions that defines ``predictive``.
    """
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


def likelihood_checks(likelihood):
    """The likelihood checks that apply to a likelihood instance: those of the operations it
    provides (its own and the base class's defaults).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood

    Returns
    -------
    list of callable
        Each takes the likelihood.
    """
    if likelihood.n_latent > 1:
        return ([check_likelihood_multi_latent_expectations] if likelihood.provides("variational_expectations") else []) \
            + ([check_likelihood_multi_latent_predictive] if likelihood.defines("predictive") else [])
    checks = []
    if likelihood.provides("log_density_derivatives"):
        checks.append(check_likelihood_derivatives)
    if likelihood.provides("variational_expectations"):
        checks.append(check_likelihood_variational_expectations)
    if _has_density(likelihood):
        checks.append(check_likelihood_log_predictive)
        if _draws_y(likelihood):
            checks.append(check_likelihood_predictive)
    if likelihood.provides("site_model"):
        checks.append(check_likelihood_site_model)
    return checks


# -- (likelihood, method) pairs -------------------------------------------------------------------
def tight(method):
    """The method with its local iterations at tight tolerances (:data:`TIGHT`, those it has).

    Parameters
    ----------
    method : gpdsl.inference.Inference

    Returns
    -------
    gpdsl.inference.Inference
    """
    fields = {f.name for f in dataclasses.fields(method)}
    return dataclasses.replace(method, **{k: v for k, v in TIGHT.items() if k in fields})


def pair_model(likelihood, inference):
    """The pair checks' model: :data:`KERNEL`, optimised inducing inputs from :data:`Z0` where
    the method takes them.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
    inference : gpdsl.inference.Inference

    Returns
    -------
    gpdsl.Model
    """
    inducing = Optimized(Z0) if inference.inducing_rule != "forbidden" else None
    try:
        inference.check_inducing(likelihood, inducing)
    except ValueError:        # a method dense for this likelihood (multi-class Laplace)
        inducing = None
    return Model(KERNEL, likelihood, inducing, inference)


def pair_targets(likelihood):
    """Targets at :data:`XP` drawn from the likelihood at a smooth latent function.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood

    Returns
    -------
    ndarray, shape (N,)
    """
    # A likelihood even in f (the square-link Poisson) gets data away from f = 0, where its tilted
    # laws are bimodal: EP clamps such sites, and its gradient is then documented as approximate.
    f = (3.5 if likelihood.sign_symmetric else 0.5) + 0.5 * np.sin(1.3 * XP[:, 0]) + 0.3 * XP[:, 1]
    if likelihood.n_latent > 1:
        # One latent function a class, each its own phase of the same pattern.
        f = np.column_stack([np.sin(1.3 * XP[:, 0] + 2.0 * k) + 0.3 * k * XP[:, 1]
                             for k in range(likelihood.n_latent)])
    return _targets(likelihood, f, seed=6)


def check_model_gradients(model, X, y, Z=None):
    """Every gradient of the model's objective at its declared values (hyperparameters, and Z
    where optimised) against central differences (relative 2e-5, absolute 2e-6).

    Parameters
    ----------
    model : gpdsl.Model
    X : ndarray, shape (N, D)
    y : ndarray, shape (N,)
        Coded targets.
    Z : ndarray, shape (M, D), optional
        Inducing inputs of a sparse model.

    Returns
    -------
    The evaluation at the declared values.
    """
    table = model.parameter_table(X, Z if model.sparse else None)
    values = table.values()
    Z = values.pop("inducing.Z", None)
    ev = model.evaluate(values, X, y, Z)

    def objective(vals, Zz):
        return model.evaluate(vals, X, y, Zz, need_grad=False).log_evidence

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


def check_pair_gradients(likelihood, inference):
    """Every gradient of the method's objective with the likelihood against central differences.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
    inference : gpdsl.inference.Inference
        A method that accepts the likelihood.
    """
    check_model_gradients(pair_model(likelihood, inference), XP, likelihood.prepare_targets(pair_targets(likelihood)),
                          Z0)


def check_pair_fitted_model_round_trips(likelihood, inference):
    """A fitted model saves and loads back (same values and predictions to the bit) and
    round-trips through ``to_dict`` and its model file.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
    inference : gpdsl.inference.Inference
    """
    model = pair_model(likelihood, inference)
    post = model.fit(XP, pair_targets(likelihood), max_iter=3)
    with tempfile.TemporaryDirectory() as folder:
        post.save(Path(folder) / "post.nc")
        back = load(Path(folder) / "post.nc")
        assert back.model == model
        for name, value in post.values.items():
            np.testing.assert_array_equal(back.values[name], value, err_msg=name)
        X_new = XP[:4] + 0.1
        a, b = post.predict(X_new), back.predict(X_new)
        for name in a.data_vars:
            np.testing.assert_array_equal(b[name].values, a[name].values, err_msg=name)
        assert Model.from_dict(model.to_dict()) == model
        toml = Path(folder) / "model.toml"
        toml.write_text(model.to_toml())
        assert Model.from_toml(toml) == model


def check_pair_predictions(likelihood, inference):
    """A fitted model predicts, scores and exports through the likelihood's operations: the
    predictive summaries are ``predictive`` at ``predict_f``'s moments, ``log_predictive`` is
    the likelihood's at them and finite, and ``to_inference_data`` records ``log_density`` of
    its draws (with a posterior-predictive group exactly where the likelihood draws y).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One of one latent function without Gaussian observation noise.
    inference : gpdsl.inference.Inference
    """
    from .components import bind
    y = pair_targets(likelihood)
    post = pair_model(likelihood, inference).fit(XP, y, max_iter=3)
    X_new, y_new = XP[:5] + 0.1, y[:5]
    bound = bind(likelihood, post.values, "likelihood")
    mean, var = post.predict_f(X_new)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)       # a predictive of f alone says so
        summary = bound.predictive(mean, var)
        predicted = post.predict(X_new)
    for name, value in summary.items():
        np.testing.assert_allclose(predicted[name].values, value, rtol=1e-12, atol=1e-14, err_msg=name)
    scores = post.log_predictive(X_new, y_new)
    assert np.all(np.isfinite(scores))
    np.testing.assert_allclose(scores, bound.log_predictive(mean, var, likelihood.prepare_targets(y_new)),
                               rtol=1e-12, atol=1e-14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)       # a likelihood that draws no y says so
        idata = post.to_inference_data(X_new, y_new, draws=20, chains=1)
    f = idata.posterior["f"].values
    np.testing.assert_allclose(idata.log_likelihood["y"].values,
                               bound.log_density(likelihood.prepare_targets(y_new), f), rtol=1e-12, atol=1e-14)
    assert hasattr(idata, "posterior_predictive") == _draws_y(likelihood)


def check_pair_dask_equals_in_memory(likelihood, inference):
    """The objective and its gradients with a Dask X (chunks of 5 rows) equal the in-memory ones.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
    inference : gpdsl.inference.Inference
        A method and likelihood that both support Dask chunks.
    """
    import dask.array as da
    chunked = dataclasses.replace(inference, chunk_size=5) if hasattr(inference, "chunk_size") else inference
    model = pair_model(likelihood, chunked)
    y = likelihood.prepare_targets(pair_targets(likelihood))
    table = model.parameter_table(XP, Z0 if model.sparse else None)
    values = table.values()
    Z = values.pop("inducing.Z", None)
    memory = model.evaluate(values, XP, y, Z)
    lazy = model.evaluate(values, da.from_array(XP, chunks=(5, 2)), y, Z)
    np.testing.assert_allclose(lazy.log_evidence, memory.log_evidence, rtol=1e-10, atol=1e-10)
    for name, g in memory.grads.items():
        np.testing.assert_allclose(lazy.grads[name], g, rtol=1e-9, atol=1e-10, err_msg=name)


def pair_checks(likelihood, inference):
    """The pair checks that apply to a (likelihood, method) pair the method accepts.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
    inference : gpdsl.inference.Inference

    Returns
    -------
    list of callable
        Each ``check(likelihood, inference)``.
    """
    checks = [check_pair_gradients, check_pair_fitted_model_round_trips]
    if likelihood.n_latent == 1 and not likelihood.observation_noise:
        checks.append(check_pair_predictions)
    if (inference.supports_dask_chunks and likelihood.supports_dask_chunks
            and importlib.util.find_spec("dask") is not None):
        checks.append(check_pair_dask_equals_in_memory)
    return checks


def pairs(likelihoods=None, methods=None):
    """Every (likelihood variant, tightened method variant) pair the method accepts.

    Parameters
    ----------
    likelihoods : list of Likelihood classes or instances, optional
        Default: the registered likelihood classes (:func:`registered`).
    methods : list of Inference classes or instances, optional
        Default: the registered methods.

    Returns
    -------
    list of (Likelihood, Inference)
    """
    likelihoods = registered(Likelihood) if likelihoods is None else likelihoods
    methods = registered(Inference) if methods is None else methods
    return [(lik, tight(method)) for m in methods for method in _instances(m)
            for c in likelihoods for lik in _instances(c) if method.accepts(lik)]


# -- whole components -----------------------------------------------------------------------------
def _named(check, **partners):
    """``check`` with its partner arguments bound, named for test ids (``check[partner]``)."""
    bound = functools.partial(check, **partners)
    bound.__name__ = f"{check.__name__}[{', '.join(label(p) for p in partners.values())}]"
    return bound


def checks(component):
    """Every check that applies to a component instance, each a callable taking it.

    Parameters
    ----------
    component : Kernel, Mean, Likelihood or Inference instance

    Returns
    -------
    list of callable

    Raises
    ------
    TypeError
        For anything else, or a kernel of several outputs (checked by its own tests).
    """
    if isinstance(component, Kernel):
        if component.n_outputs != 1:
            raise TypeError(f"gpdsl.testing: {label(component)} has {component.n_outputs} outputs; the kernel "
                            "checks take kernels of one output")
        return list(KERNEL_CHECKS)
    if isinstance(component, Mean):
        return list(MEAN_CHECKS)
    if isinstance(component, Likelihood):
        return likelihood_checks(component) + [
            _named(check, inference=method) for lik, method in pairs([component])
            for check in pair_checks(lik, method)]
    if isinstance(component, Inference):
        out = []
        for lik, method in pairs(methods=[component]):
            out += [_named(_against_likelihood(check), likelihood=lik) for check in pair_checks(lik, method)]
        return out
    raise TypeError(f"gpdsl.testing: expected a Kernel, Mean, Likelihood or Inference (class or instance), "
                    f"got {type(component).__name__}")


def _against_likelihood(check):
    """A pair check that takes the method first (``check(inference, likelihood=...)``)."""
    def run(inference, likelihood):
        return check(likelihood, tight(inference))
    run.__name__ = check.__name__
    return run


def _run(component):
    """Run every check on every variant of a component (class or instance); the first failure is
    raised as an AssertionError naming the variant and the check."""
    for instance in _instances(component):
        for check in checks(instance):
            try:
                check(instance)
            except AssertionError as failure:
                raise AssertionError(f"{check.__name__} failed for {label(instance)}: {failure}") from failure


def check_likelihood(likelihood):
    """Every likelihood check, and the pair checks with every registered method that accepts
    it, on each variant of a likelihood class (or on one instance).

    Parameters
    ----------
    likelihood : Likelihood subclass or instance

    Raises
    ------
    AssertionError
        The first failed check, named with the variant.
    """
    _run(likelihood)


def check_kernel(kernel):
    """Every kernel check on each variant of a kernel class (or on one instance).

    Parameters
    ----------
    kernel : Kernel subclass or instance

    Raises
    ------
    AssertionError
        The first failed check, named with the variant.
    """
    _run(kernel)


def check_mean(mean):
    """Every mean-function check on each variant of a mean class (or on one instance).

    Parameters
    ----------
    mean : Mean subclass or instance

    Raises
    ------
    AssertionError
        The first failed check, named with the variant.
    """
    _run(mean)


def check_method(method):
    """The pair checks of an inference method with every registered likelihood it accepts, on
    each variant of the method class (or on one instance).

    Parameters
    ----------
    method : Inference subclass or instance

    Raises
    ------
    AssertionError
        The first failed check, named with the variant.
    """
    _run(method)


def parametrize_with_checks(components):
    """A ``pytest.mark.parametrize`` over (component, check) for every variant of each
    component and every check that applies to it, ids ``<variant>-<check>``::

        @parametrize_with_checks([MyLikelihood, MyKernel(0.5)])
        def test_gpdsl_conformance(component, check):
            check(component)

    Parameters
    ----------
    components : iterable of classes or instances
        Kernels, mean functions, likelihoods and inference methods.

    Returns
    -------
    pytest.MarkDecorator
    """
    import pytest
    params = [pytest.param(instance, check, id=f"{label(instance)}-{check.__name__}")
              for component in components for instance in _instances(component) for check in checks(instance)]
    return pytest.mark.parametrize("component,check", params)


__all__ = ["check_likelihood", "check_kernel", "check_mean", "check_method", "parametrize_with_checks", "checks",
           "likelihood_checks", "pair_checks", "pairs", "registered", "central_difference", "expect",
           "check_model_gradients", "tight", "pair_model", "pair_targets"]
