"""The checks of one component: a kernel, a mean function, a likelihood (each operation it
provides against its own log density)."""
from __future__ import annotations

import dataclasses
import tempfile
import warnings
from pathlib import Path

import numpy as np
from scipy import integrate, optimize

from .. import Model, load
from .._jit.mixed_sites import site_rows
from .._jit.projections import with_offset
from ..inputs import target_kind
from ..kernels import SquaredExponential
from ..likelihoods import Gaussian
from ..likelihoods import Likelihood
from .common import (X1, X2, _draws_y, _has_density, _local_values, _targets, at_each_row, central_difference,
                     expect, inputs_for, kernel_for, row_views)
from .limits import LIMIT_TARGET_KINDS, check_likelihood_limits

# Latent values, Gaussian q(f) = N(MEANS, VARS) and EP cavities the likelihood checks run at.
F = np.array([-2.1, -0.7, 0.05, 0.6, 1.9])
MEANS = np.array([-1.2, 0.3, 0.9])
VARS = np.array([0.4, 1.5, 0.02])
CAVITIES = [(-0.8, 0.5), (0.4, 2.0), (1.1, 0.05)]
# Where the log predictive is also checked: (q's mean, variance, the latent value the target is
# drawn at): a q far wider than the likelihood (sd 5), and a confident miss (the target drawn 25
# sds out of a narrow q), where a rule placed on q alone misses the likelihood.
PREDICTIVE_TAILS = ((0.5, 25.0, 5.5), (-1.0, 0.01, 1.5))
# q(f_n) of K = 3 latent functions at three points: far apart, level, and one wide.
MEANS_K = np.array([[-1.2, 0.3, 0.9], [0.5, 0.5, -0.4], [0.0, 2.5, 0.1]])
VARS_K = np.array([[0.4, 1.5, 0.02], [0.1, 0.9, 2.0], [1.0, 0.3, 0.6]])


# -- kernels --------------------------------------------------------------------------------------
def check_kernel_gram(kernel):
    """Gram matrix symmetric positive semi-definite, ``diag`` its diagonal, K(X1, X2) = K(X2, X1)^T
    (a kernel of P outputs at X1, X2 with the output column of :func:`inputs_for`).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        A kernel of one latent function.
    """
    k = kernel.bind()
    A, B = inputs_for(kernel, X1), inputs_for(kernel, X2)
    K = k.gram(A, A)
    assert K.shape == (7, 7)
    np.testing.assert_allclose(K, K.T, rtol=1e-12, atol=1e-14)
    assert np.linalg.eigvalsh(K).min() >= -1e-10 * np.abs(K).max()
    np.testing.assert_allclose(k.diag(A), np.diag(K), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(k.gram(A, B), k.gram(B, A).T, rtol=1e-12, atol=1e-14)


def check_kernel_gradients(kernel):
    """``vjp`` (hyperparameters and X1) and ``diag_vjp`` against central differences; for a
    kernel of P outputs d/dX1 of the output column (which holds integers) is 0.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
    """
    rng = np.random.default_rng(11)
    A, B = inputs_for(kernel, X1), inputs_for(kernel, X2)
    values = _local_values(kernel, A)
    G = rng.normal(size=(7, 5))
    g = rng.normal(size=7)
    grads, dX1 = kernel.bind(values).vjp(A, B, G)
    dgrads = kernel.bind(values).diag_vjp(A, g)
    assert set(grads) == set(values), "vjp must give a gradient for every parameter"
    for name, value in values.items():
        fd = central_difference(lambda v: np.sum(G * kernel.bind({**values, name: v}).gram(A, B)), value)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-5, atol=1e-8, err_msg=name)
        fd = central_difference(lambda v: np.sum(g * kernel.bind({**values, name: v}).diag(A)), value)
        np.testing.assert_allclose(dgrads.get(name, 0.0), fd, rtol=1e-5, atol=1e-8, err_msg=f"diag {name}")
    width = X1.shape[1]
    fd = central_difference(lambda U: np.sum(G * kernel.bind(values).gram(np.column_stack([U, A[:, width:]]), B)),
                            X1)
    np.testing.assert_allclose(dX1[:, :width], fd, rtol=1e-5, atol=1e-8, err_msg="X1")
    np.testing.assert_array_equal(dX1[:, width:], 0.0, err_msg="X1's output column")


def check_kernel_fitted_model_round_trips(kernel):
    """A GP with the kernel fits, saves, loads back (same values, same predictions to the bit)
    and round-trips through its model file.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
    """
    model = Model(kernel, Gaussian(0.1))
    y = np.sin(X1[:, 0]) + 0.1 * X1[:, 1]
    post = model.fit(inputs_for(kernel, X1), y, max_iter=2)
    X_new = inputs_for(kernel, X2)
    with tempfile.TemporaryDirectory() as folder:
        post.save(Path(folder) / "post.nc")
        back = load(Path(folder) / "post.nc")
        assert back.model == model
        np.testing.assert_array_equal(back.predict(X_new)["f_mean"].values, post.predict(X_new)["f_mean"].values)
        toml = Path(folder) / "model.toml"
        model.to_toml(toml)
        assert Model.from_toml(toml) == model


def check_kernel_active_dims(kernel):
    """``active_dims`` (handled by the Kernel base class for every kernel) reads the named
    columns, in their order, and scatters d/dX1 back into X's width (to rounding: the selected
    columns are a copy in another memory order).  The wide inputs hold the last column first, an
    unread column, then the others (``active_dims`` (2, 0) for two columns; a kernel of P outputs
    has the output column of :func:`inputs_for` last).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
    """
    rng = np.random.default_rng(12)
    A, B = inputs_for(kernel, X1), inputs_for(kernel, X2)
    wide1 = np.column_stack([A[:, -1], rng.normal(size=7), A[:, :-1]])
    wide2 = np.column_stack([B[:, -1], rng.normal(size=5), B[:, :-1]])
    read = tuple(range(2, A.shape[1] + 1)) + (0,)
    masked = dataclasses.replace(kernel, active_dims=read).bind()
    plain = kernel.bind()
    np.testing.assert_allclose(masked.gram(wide1, wide2), plain.gram(A, B), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(masked.diag(wide1), plain.diag(A), rtol=1e-12, atol=1e-14)
    G = rng.normal(size=(7, 5))
    grads, dX = masked.vjp(wide1, wide2, G)
    plain_grads, plain_dX = plain.vjp(A, B, G)
    np.testing.assert_allclose(dX[:, list(read)], plain_dX, rtol=1e-12, atol=1e-13)
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
    X = inputs_for(mean, X1)
    values = _local_values(mean, X)
    g = np.random.default_rng(13).normal(size=7)
    grads = mean.bind(values).vjp(X, g)
    assert set(grads) == set(values), "vjp must give a gradient for every parameter"
    assert mean.bind(values).value(X).shape == (7,)
    for name, value in values.items():
        fd = central_difference(lambda v: g @ mean.bind({**values, name: v}).value(X), value)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-6, atol=1e-9, err_msg=name)


def check_mean_fitted_model_round_trips(mean):
    """A GP with the mean function fits, saves, loads back (same predictions to the bit, the
    mean included) and round-trips through its model file; at the fitted values it is the
    zero-mean GP on the residuals y - m(X).

    Parameters
    ----------
    mean : gpdsl.means.Mean
    """
    model = Model(kernel_for(mean, SquaredExponential()), Gaussian(0.1), mean=mean)
    X, X_new = inputs_for(mean, X1), inputs_for(mean, X2)
    y = 1.5 + np.sin(X1[:, 0]) + 0.1 * X1[:, 1]
    post = model.fit(X, y, max_iter=3)
    fitted = mean.bind({k[len("mean."):]: v for k, v in post.values.items() if k.startswith("mean.")})
    kernel, likelihood = model.bind(post.values)
    residual = Model(kernel.component, likelihood.component).fit(X, y - fitted.value(X), optimize=False)
    f_mean, f_var = post.predict_f(X_new)
    r_mean, r_var = residual.predict_f(X_new)
    np.testing.assert_allclose(f_mean, r_mean + fitted.value(X_new), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(f_var, r_var, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(post.log_evidence, residual.log_evidence, rtol=1e-12)
    with tempfile.TemporaryDirectory() as folder:
        post.save(Path(folder) / "post.nc")
        back = load(Path(folder) / "post.nc")
        assert back.model == model
        np.testing.assert_array_equal(back.predict_f(X_new)[0], f_mean)
        toml = Path(folder) / "model.toml"
        model.to_toml(toml)
        assert Model.from_toml(toml) == model


MEAN_CHECKS = (check_mean_gradients, check_mean_fitted_model_round_trips)


# -- likelihoods ----------------------------------------------------------------------------------
def _d_at(lik, y, f):
    return lik.log_density_derivatives(np.atleast_1d(y), np.atleast_1d(f))


@at_each_row
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


@at_each_row
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


def _log_expect_density(lik, y, m, v, near):
    """log E_N(f|m,v)[p(y | f)] by adaptive quadrature split at the tilted mode: the maximum of
    log p(y | f) + log N(f | m, v) on a grid over [min(m, near) - 12 sd, max(m, near) + 12 sd],
    refined by a bounded scalar search (``near``: a latent value where p(y | f) is large)."""
    sd = np.sqrt(v)
    lo, hi = min(m, near) - 12 * sd, max(m, near) + 12 * sd

    def h(f):
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            out = lik.log_density(np.full(np.size(f), y), np.atleast_1d(np.asarray(f, dtype=float)))
        return np.where(np.isnan(out), -np.inf, out) - (np.atleast_1d(f) - m) ** 2 / (2 * v)

    grid = np.linspace(lo, hi, 4001)
    k = int(np.argmax(h(grid)))
    mode = optimize.minimize_scalar(lambda f: -h(f)[0], bounds=(grid[max(k - 1, 0)], grid[min(k + 1, 4000)]),
                                    method="bounded", options={"xatol": 1e-10 * max(1.0, sd)}).x
    top = h(mode)[0]
    value, _ = integrate.quad(lambda f: np.exp(h(f)[0] - top), lo, hi, points=[mode], limit=500, epsabs=0.0,
                              epsrel=1e-12)
    return top + np.log(value) - 0.5 * np.log(2 * np.pi * v)


def _count_predictive_moments(lik, m, v):
    """Mean and variance of the predictive pmf exp(log_predictive(m, v, y)) summed over y = 0, 1,
    ... in blocks of 256 until, past half its mass, a block adds below 1e-16 (at most 10^5)."""
    sums, start = np.zeros(3), 0
    while start < 100_000:
        y = np.arange(start, start + 256.0)
        p = np.exp(lik.log_predictive(np.full(y.size, m), np.full(y.size, v), y))
        sums += (p.sum(), p @ y, p @ (y * y))
        start += 256
        if sums[0] > 0.5 and p.sum() <= 1e-16 * sums[0]:
            break
    mean = sums[1] / sums[0]
    return sums[0], mean, sums[2] / sums[0] - mean * mean


def _real_predictive_moments(lik, m, v, centre, scale):
    """Mass, mean and variance of the predictive density exp(log_predictive(m, v, y)) by a composite
    Gauss-Legendre rule (200 panels of 16 nodes) over centre +- 40 scale."""
    x, w = np.polynomial.legendre.leggauss(16)
    edges = np.linspace(centre - 40 * scale, centre + 40 * scale, 201)
    half = 0.5 * np.diff(edges)[:, None]
    y = ((edges[:-1, None] + edges[1:, None]) / 2 + half * x[None, :]).ravel()
    weights = (half * w[None, :]).ravel()
    p = np.exp(lik.log_predictive(np.full(y.size, m), np.full(y.size, v), y)) * weights
    mean = (p @ y) / p.sum()
    return p.sum(), mean, (p @ (y - mean) ** 2) / p.sum()


def _check_predictive_moments(lik, summary, label):
    """``y_mean`` / ``y_var`` at MEANS, VARS against the moments of exp(log_predictive): summed
    over counts, or integrated over y (where the summary is finite); the predictive must be
    normalised (to 1e-8)."""
    for i, (m, v) in enumerate(zip(MEANS, VARS)):
        mean, var = summary["y_mean"][i], summary["y_var"][i]
        if not (np.isfinite(mean) and np.isfinite(var)):
            continue
        if target_kind(lik) == "count":
            mass, ref_mean, ref_var = _count_predictive_moments(lik, m, v)
        else:
            mass, ref_mean, ref_var = _real_predictive_moments(lik, m, v, mean, np.sqrt(var))
        where = f"at q {i}: {label}"
        np.testing.assert_allclose(mass, 1.0, rtol=1e-8, err_msg=f"predictive mass {where}")
        np.testing.assert_allclose(mean, ref_mean, rtol=1e-7, atol=1e-8 * np.sqrt(var), err_msg=f"y_mean {where}")
        np.testing.assert_allclose(var, ref_var, rtol=1e-6, err_msg=f"y_var {where}")


@at_each_row
def check_likelihood_log_predictive(likelihood):
    """log E[p(y | f)] against adaptive quadrature of ``log_density``, at q(f) = N(MEANS, VARS) and
    at :data:`PREDICTIVE_TAILS` (the quadrature split at the tilted mode).  A documented
    ``predictive_approximation`` of counts must still be a distribution whose mean and variance
    are ``predictive``'s (a moment-matched approximation; to the sums' rounding).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One of one latent function with a density.
    """
    lik = likelihood.bind()
    y = _targets(likelihood, MEANS, seed=2)
    lp = lik.log_predictive(MEANS, VARS, y)
    if getattr(lik, "predictive_approximation", None) is not None:
        # Not the exact density (its documented approximation): a distribution with predictive's moments.
        if target_kind(lik) == "count":
            _check_predictive_moments(lik, lik.predictive(MEANS, VARS), f"the {lik.predictive_approximation}")
        return
    for i in range(MEANS.size):
        want = expect(lambda f: float(np.exp(lik.log_density(np.array([y[i]]), np.array([f]))[0])), MEANS[i], VARS[i])
        np.testing.assert_allclose(lp[i], np.log(want), rtol=1e-7, atol=1e-8, err_msg=f"log_predictive at q {i}")
    for m, v, at in PREDICTIVE_TAILS:
        yi = _targets(likelihood, np.array([at]), seed=5)
        got = lik.log_predictive(np.array([m]), np.array([v]), yi)[0]
        want = _log_expect_density(lik, yi[0], m, v, at)
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-8, err_msg=f"log_predictive at q = N({m}, {v}), y = {yi[0]}")


@at_each_row
def check_likelihood_predictive(likelihood):
    """``predictive`` against 40,000 draws of ``sample`` at draws of f: ``p`` to 5 standard
    errors plus 1e-3, ``y_mean`` and ``y_var`` to 5 standard errors (the variance's from the
    fourth moment); binary targets' ``p`` also against quadrature of ``log_density``; ``y_mean``
    and ``y_var`` also against the moments of the predictive density exp(``log_predictive``)
    (summed over counts, or by quadrature over y) and, for counts, against the base class's
    default (the pmf of ``log_density`` summed at Gauss-Hermite nodes in f).

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
        if getattr(lik, "predictive_approximation", None) is None:
            _check_predictive_moments(lik, summary, "the moments of exp(log_predictive)")
        if target_kind(lik) == "count":
            with warnings.catch_warnings():
                # Rows the summation cannot reach are NaN (with a warning): compared where it can.
                warnings.simplefilter("ignore", UserWarning)
                default = Likelihood.predictive(lik, MEANS, VARS) if lik.defines("conditional_moments") else \
                    Likelihood._count_predictive(lik, MEANS, VARS)
            reached = np.isfinite(default["y_mean"])
            assert reached.any(), "the summed pmfs of log_density reach none of the checked q(f)"
            for key in ("y_mean", "y_var"):
                np.testing.assert_allclose(summary[key][reached], default[key][reached], rtol=1e-9,
                                           err_msg=f"{key} against the summed pmfs of log_density")


@at_each_row
def check_likelihood_noise(likelihood):
    """Gaussian observation noise: ``log_density(y, f)`` is the normal log density of variance
    ``noise(X)`` (where the likelihood has a density: its noise is then the same at every row),
    and ``noise_vjp`` against central differences of ``noise`` in every hyperparameter.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One that provides ``"noise"``.
    """
    X = inputs_for(likelihood, X1)
    values = _local_values(likelihood, X)
    lik = likelihood.bind(values)
    lam = lik.noise(X)
    assert lam.shape == (X.shape[0],) and np.all(lam > 0), f"noise(X) must be positive, shape (n,): {lam}"
    if _has_density(likelihood):
        # Row r's density (for_rows: the same at every row for a density of (y, f) alone, which
        # then has one noise variance) is the normal one of variance noise(X)[r].
        y = F + np.linspace(-1.0, 1.5, F.size)
        for r in range(X.shape[0]):
            want = -0.5 * (y - F) ** 2 / lam[r] - 0.5 * np.log(2 * np.pi * lam[r])
            np.testing.assert_allclose(lik.for_rows(X[r:r + 1]).log_density(y, F), want, rtol=1e-12, atol=1e-12,
                                       err_msg=f"log_density at row {r} must be the normal density of variance "
                                               f"noise(X)[{r}] = {lam[r]}")
    g = np.random.default_rng(14).normal(size=X.shape[0])
    grads = lik.noise_vjp(X, g)
    for name, value in values.items():
        fd = central_difference(lambda v: g @ likelihood.bind({**values, name: v}).noise(X), value)
        np.testing.assert_allclose(grads.get(name, 0.0), fd, rtol=1e-6, atol=1e-9, err_msg=f"noise_vjp {name}")


@at_each_row
def check_likelihood_site_model(likelihood):
    """EP's tilted moments (log Z, mean, variance) against adaptive quadrature of the tilted
    distribution cavity x p(y | f) of ``log_density``; QP's variance not above EP's (Zhang et
    al. Theorem 2); d log Z / d theta against central differences; the offset wrapper (the
    offset column of a site model of rows, :func:`gpdsl._jit.mixed_sites.site_rows`) equal to
    the shifted cavity.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One that provides ``"site_model"``.
    """
    lik = likelihood.bind()
    site = lik.site_model()
    y = _targets(likelihood, np.array([m for m, _ in CAVITIES]), seed=7)
    values = _local_values(likelihood, X1)
    rows = y if site.parts is None else site_rows(site.parts, y)        # what the sweeps pass
    for (mu, var), yi, row in zip(CAVITIES, y, rows):
        log_z, mean, variance = site.functions.project(row, mu, var, site.params, None, None, None)
        density = lambda f: float(np.exp(lik.log_density(np.array([yi]), np.array([f]))[0]))  # noqa: E731
        z = expect(density, mu, var)
        m1 = expect(lambda f: f * density(f), mu, var) / z
        m2 = expect(lambda f: (f - m1) ** 2 * density(f), mu, var) / z
        where = f"cavity ({mu}, {var}), y = {yi}"
        np.testing.assert_allclose(log_z, np.log(z), rtol=1e-9, atol=1e-9, err_msg=f"log Z at {where}")
        np.testing.assert_allclose(mean, m1, rtol=1e-8, atol=1e-9 * np.sqrt(var), err_msg=f"tilted mean at {where}")
        np.testing.assert_allclose(variance, m2, rtol=1e-7, err_msg=f"tilted variance at {where}")
        qp_variance = site.functions.project(row, mu, var, site.params, True, None, None)[2]
        assert 0.0 < qp_variance <= variance * (1.0 + 1e-10), (qp_variance, variance)
        grads = site.functions.log_z_gradient(row, mu, var, site.params)
        assert len(grads) == len(site.params) == len(site.names)
        for k, name in enumerate(site.names):
            def log_z_at(v, name=name):
                moved = likelihood.bind({**values, name: v}).site_model()
                return moved.functions.project(row, mu, var, moved.params, None, None, None)[0]
            np.testing.assert_allclose(grads[k], central_difference(log_z_at, values[name]), rtol=1e-6, atol=1e-8,
                                       err_msg=name)
        if site.parts is None:
            shifted = with_offset(site.functions).project(np.array([yi, 0.3]), mu - 0.3, var, site.params, None,
                                                          None, None)
        else:
            shifted = site.functions.project(site_rows(site.parts, [yi], [0.3])[0], mu - 0.3, var, site.params, None, None,
                                             None)
        np.testing.assert_allclose(shifted, (log_z, mean - 0.3, variance), rtol=1e-12, atol=1e-12)


def check_likelihood_multi_latent_expectations(likelihood):
    """K latent functions: E_q[log p(y | f)] is at most the average over 2e5 draws (every rule
    here is exact or a Jensen lower bound) and its derivatives in each mean and variance and in
    every hyperparameter equal central differences.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One of K >= 2 latent functions that provides ``"variational_expectations"``.
    """
    lik = likelihood.bind()
    y = np.resize(np.array([0.0, 1.0, 2.0])[: likelihood.n_latent], MEANS_K.shape[0])
    ve, d_mean, d_var, grads = lik.variational_expectations(y, MEANS_K, VARS_K)
    values = _local_values(likelihood, X1)
    assert ve.shape == (3,) and d_mean.shape == d_var.shape == MEANS_K.shape and set(grads) == set(values), \
        "variational_expectations must give every parameter's gradient"
    for name, value in values.items():
        fd = central_difference(lambda v: np.sum(likelihood.bind({**values, name: v})
                                                 .variational_expectations(y, MEANS_K, VARS_K)[0]), value)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-5, atol=1e-7, err_msg=name)
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
    provides (its own and the base class's defaults), and, for one latent function with a density
    of binary, count or real targets, its limits (:func:`gpdsl.testing.limits.check_likelihood_limits`).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood

    Returns
    -------
    list of callable
        Each takes the likelihood.
    """
    views = row_views(likelihood)
    if views is not None:
        # A density that depends on the row: the checks that apply at each row (run at each).
        listed = [likelihood_checks(view) for view in views]
        return [check for check in listed[0] if all(check in other for other in listed[1:])]
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
    if likelihood.provides("noise"):
        checks.append(check_likelihood_noise)
    if _has_density(likelihood) and target_kind(likelihood) in LIMIT_TARGET_KINDS:
        checks.append(check_likelihood_limits)
    return checks
