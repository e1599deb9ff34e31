"""Model.sample against tensor-product grid quadrature of the same posterior (issue 47's acceptance:
"against grid quadrature on problems with <= 3 hyperparameters (your own data): means and quantiles
within Monte Carlo error").

The quadrature is independent of gpdsl: the log posterior on the unconstrained scale u = log theta,

    log p(u | y) = log p(y | theta) + sum_i log p_i(theta_i) + sum_i u_i     (the log-Jacobian),

is evaluated on a regular grid in u, the evidence by a dense formula written here (the Gaussian
marginal likelihood by Cholesky; Rasmussen & Williams' Laplace approximation by Newton's method,
Algorithm 3.1, and its evidence, eq. 3.32) and the priors by scipy.stats, then exponentiated (less
its maximum) and normalised by the grid sum.  A posterior mean of theta_i is sum exp(u_i) p / sum
p; a quantile is read off the marginal of u_i (the grid summed over the other axes), then mapped
by exp (monotone, so quantiles map).

The grid is wide enough: along each axis it reaches, both ways from the mode, the point where the
log density has fallen GRID_TAIL below the mode's, and each face is moved out until the largest log
density on it is GRID_TAIL below the grid's maximum (the priors are chosen with tails that fall
fast in u: log-normal and inverse-gamma), so that the mass outside is of order e^-16 ~ 1e-7 of the
total, far below the Monte Carlo errors (~1e-2 relative here).  It is fine enough: a quantile is
read from the marginal's log density interpolated by a cubic spline, and every mean and quantile computed with 2/3 of the points per axis must agree with the full
grid's within QUADRATURE_SHARE of the Monte Carlo standard error it is compared with.

Each NUTS estimate must lie within Z_MCSE Monte Carlo standard errors (``az.mcse``: the mean's and
each quantile's) of the quadrature.  N <= 12, 2 chains x (250 + 500) in parallel.
"""
from __future__ import annotations

import math
import warnings

import arviz as az
import numpy as np
import pytest
from scipy import special, stats

import gpdsl as gd
from gpdsl import priors as P
from gpdsl.sampling import SamplingWarning

Z_MCSE = 4.0
GRID_TAIL = 16.0
QUADRATURE_SHARE = 0.1
QUANTILES = (0.05, 0.5, 0.95)
CHAINS, TUNE, DRAWS = 2, 250, 500


def laplace_mode_and_sds(log_density, u0):
    """The mode of ``log_density`` (a function of u, (P,)) by Nelder-Mead, and the marginal sds
    sqrt(diag(-H^-1)) there, H by central differences: only to place the grid."""
    from scipy import optimize

    result = optimize.minimize(lambda u: -log_density(u), u0, method="Nelder-Mead",
                               options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 20000})
    mode, h = result.x, 1e-4
    P_ = mode.size
    H = np.empty((P_, P_))
    for i in range(P_):
        for j in range(P_):
            ei, ej = np.eye(P_)[i] * h, np.eye(P_)[j] * h
            H[i, j] = (log_density(mode + ei + ej) - log_density(mode + ei - ej) - log_density(mode - ei + ej)
                       + log_density(mode - ei - ej)) / (4 * h * h)
    return mode, np.sqrt(np.diag(np.linalg.inv(-H)))


def grid_bounds(log_density, mode, sds):
    """Per axis, the interval around the mode whose ends (the other coordinates at the mode) lie
    GRID_TAIL below the mode's log density: from 3 sds out, widened by 1.2 each time."""
    top, bounds = log_density(mode), []
    for i, sd in enumerate(sds):
        ends = []
        for sign in (-1.0, 1.0):
            step = 3.0 * sd
            while log_density(mode + sign * step * np.eye(mode.size)[i]) > top - GRID_TAIL:
                step *= 1.2
            ends.append(mode[i] + sign * step)
        bounds.append(ends)
    return bounds


def marginal_quantile(axis, marginal, q):
    """The q-quantile of the marginal density known at the nodes ``axis`` (up to a constant): its
    log interpolated by a cubic spline (error O(h^4)) onto a grid 20 times finer, integrated by the
    trapezoid rule there and the CDF inverted linearly (errors O((h / 20)^2))."""
    from scipy.interpolate import CubicSpline

    fine = np.linspace(axis[0], axis[-1], 20 * (len(axis) - 1) + 1)
    density = np.exp(CubicSpline(axis, np.log(np.maximum(marginal, 1e-300)))(fine))
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(fine))])
    return float(np.interp(q, cdf / cdf[-1], fine))


def grid_moments(log_density_on_grid, bounds, points):
    """Posterior means and 5/50/95 % quantiles of exp(u_i) on a grid of ``points`` per axis over
    ``bounds`` (the marginal of u_i: the grid summed over the other axes), and per face of the
    grid (axis, end) its largest log density less the grid's maximum."""
    axes = [np.linspace(low, high, points) for low, high in bounds]
    mesh = np.meshgrid(*axes, indexing="ij")
    logp = log_density_on_grid(np.stack([g.ravel() for g in mesh], axis=1)).reshape(mesh[0].shape)
    top = logp.max()
    weights = np.exp(logp - top)
    weights /= weights.sum()
    faces = {(axis, end): np.take(logp, (0, -1)[end], axis=axis).max() - top
             for axis in range(len(axes)) for end in (0, 1)}
    means, quantiles = [], []
    for i, axis in enumerate(axes):
        means.append(float(np.sum(np.exp(mesh[i]) * weights)))
        marginal = weights.sum(axis=tuple(k for k in range(len(axes)) if k != i))
        quantiles.append([math.exp(marginal_quantile(axis, marginal, q)) for q in QUANTILES])
    return np.array(means), np.array(quantiles), faces


def quadrature(log_density_on_grid, log_density, u0, points):
    """The grid's means and quantiles (:func:`grid_moments`) on bounds from :func:`grid_bounds`,
    each face moved out by 20 % of its axis's width until its log density is GRID_TAIL below the
    top (a correlated posterior reaches a face off the axis through the mode); also those at 2/3
    of the points per axis, the resolution check."""
    bounds = grid_bounds(log_density, *laplace_mode_and_sds(log_density, u0))
    for _ in range(10):
        coarse_means, coarse_quantiles, faces = grid_moments(log_density_on_grid, bounds, 2 * points // 3)
        high = [face for face, value in faces.items() if value > -GRID_TAIL]
        if not high:
            break
        for axis, end in high:
            bounds[axis][end] += (-1, 1)[end] * 0.2 * (bounds[axis][1] - bounds[axis][0])
    means, quantiles, faces = grid_moments(log_density_on_grid, bounds, points)
    assert max(faces.values()) <= -GRID_TAIL, (faces, bounds)
    return (means, quantiles), (coarse_means, coarse_quantiles)


def mcse(x, **kwargs):
    """az.mcse of the (chain, draw) draws x as a float (ArviZ returns a 1-element array for some)."""
    return float(np.ravel(az.mcse(x, **kwargs))[0])


def check_against_quadrature(draws, names, log_density_on_grid, log_density, u0, points):
    """Every mean and 5/50/95 % quantile of the draws (natural scale) within Z_MCSE of az.mcse
    of the grid's, with the grid's width and resolution checked (module docstring)."""
    (means, quantiles), (coarse_means, coarse_quantiles) = quadrature(log_density_on_grid, log_density, u0, points)
    misses = []
    for i, name in enumerate(names):
        x = draws[name].values
        stats_ = [("mean", x.mean(), means[i], coarse_means[i], mcse(x, method="mean"))]
        stats_ += [(f"q{q:.2f}", np.quantile(x, q), quantiles[i][k], coarse_quantiles[i][k],
                    mcse(x, method="quantile", prob=q)) for k, q in enumerate(QUANTILES)]
        for stat, value, expected, coarse, error in stats_:
            # The quadrature's own error, bounded by the change from 2/3 of the points, must be
            # negligible beside the Monte Carlo error it is compared with.
            assert abs(coarse - expected) <= QUADRATURE_SHARE * error, (name, stat, coarse, expected, error)
            z = (value - expected) / error
            if not abs(z) <= Z_MCSE:
                misses.append(f"{name} {stat} {value:.5g} against {expected:.5g} ({z:+.2f} MCSE)")
    assert not misses, misses


def sample(model, X, y, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        s = model.sample(X, y, draws=DRAWS, tune=TUNE, chains=CHAINS, seed=11, cores=CHAINS, **kwargs)
    assert s.diagnostics.divergences == 0
    assert s.diagnostics.max_rhat <= 1.02
    return s


# -- an exact GP regression with three free hyperparameters ------------------------------------------
def regression_problem():
    rng = np.random.default_rng(21)
    X = np.sort(rng.uniform(-3.0, 3.0, 10))[:, None]
    y = np.sin(1.3 * X[:, 0]) + 0.3 * rng.standard_normal(10)
    return X, y


def gp_log_posterior(U, X, y):
    """log p(u | y) of the regression model at rows U (G, 3) of u = log(variance, lengthscale,
    noise variance): a batched Cholesky of K + noise I, log-normal(0, 1) on the variance,
    inverse-gamma(3, 2) on the length-scale, inverse-gamma(2, 0.1) on the noise variance, and
    the log-Jacobian sum u."""
    U = np.atleast_2d(U)
    variance, lengthscale, noise = np.exp(U[:, 0]), np.exp(U[:, 1]), np.exp(U[:, 2])
    d2 = (X[:, 0][:, None] - X[:, 0][None, :]) ** 2
    K = (variance[:, None, None] * np.exp(-0.5 * d2[None] / lengthscale[:, None, None] ** 2)
         + noise[:, None, None] * np.eye(len(y))[None])
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L, np.broadcast_to(y, (U.shape[0], len(y)))[..., None])[..., 0]
    evidence = (-0.5 * np.sum(alpha ** 2, axis=1) - np.sum(np.log(np.diagonal(L, axis1=1, axis2=2)), axis=1)
                - 0.5 * len(y) * math.log(2.0 * math.pi))
    priors = (stats.lognorm(1.0).logpdf(variance) + stats.invgamma(3.0, scale=2.0).logpdf(lengthscale)
              + stats.invgamma(2.0, scale=0.1).logpdf(noise))
    return evidence + priors + U.sum(axis=1)


def test_exact_gp_three_hyperparameters_against_grid_quadrature():
    X, y = regression_problem()
    model = gd.Model(kernel=gd.kernels.SquaredExponential(variance=P.LogNormal(0.0, 1.0),
                                                          lengthscale=P.InverseGamma(3.0, 2.0)),
                     likelihood=gd.likelihoods.Gaussian(variance=P.InverseGamma(2.0, 0.1)))
    s = sample(model, X, y)
    # The quadrature's density is gpdsl's own, up to a constant: checked at two draws.
    u = s.result.draws[0, [5, 400]]
    order = [e.name for e in s.table.free]
    assert order == ["kernel.lengthscale", "kernel.variance", "likelihood.variance"]
    ours = gp_log_posterior(u[:, [1, 0, 2]], X, y)
    np.testing.assert_allclose(ours - ours[0], s.sample_stats["lp"].values[0, [5, 400]]
                               - s.sample_stats["lp"].values[0, 5], atol=1e-8)
    check_against_quadrature(s.draws, ["kernel.variance", "kernel.lengthscale", "likelihood.variance"],
                             lambda U: gp_log_posterior(U, X, y), lambda u: float(gp_log_posterior(u, X, y)[0]),
                             np.array([0.0, 0.0, -2.0]), points=48)


# -- a Laplace classification with two free hyperparameters -----------------------------------------
def classification_problem():
    rng = np.random.default_rng(4)
    X = np.sort(rng.uniform(-3.0, 3.0, 12))[:, None]
    y = np.where(np.sin(1.5 * X[:, 0]) + 0.4 * rng.standard_normal(12) > 0, 1.0, -1.0)
    return X, y


def laplace_log_evidence(K, y, f0):
    """Rasmussen & Williams' Laplace approximation to log p(y | K) for the logit likelihood
    p(y | f) = sigmoid(y f), y in {-1, +1}: Newton's method for the mode f (Algorithm 3.1, to
    |step| < 1e-12), then -a^T f / 2 + log p(y | f) - sum log diag(L) with B = L L^T =
    I + W^1/2 K W^1/2 (eq. 3.32).  Returns the evidence and the mode (a warm start)."""
    n, f = len(y), f0.copy()
    t = (y + 1.0) / 2.0
    for _ in range(100):
        pi = special.expit(f)
        W = pi * (1.0 - pi)
        sW = np.sqrt(W)
        L = np.linalg.cholesky(np.eye(n) + sW[:, None] * K * sW[None, :])
        b = W * f + (t - pi)
        a = b - sW * np.linalg.solve(L.T, np.linalg.solve(L, sW * (K @ b)))
        new = K @ a
        step = np.max(np.abs(new - f))
        f = new
        if step < 1e-12:
            break
    pi = special.expit(f)
    sW = np.sqrt(pi * (1.0 - pi))
    L = np.linalg.cholesky(np.eye(n) + sW[:, None] * K * sW[None, :])
    a = (t - pi)                                     # at the mode f = K (t - pi)
    return -0.5 * a @ f + np.sum(special.log_expit(y * f)) - np.sum(np.log(np.diag(L))), f


def classification_log_posterior(U, X, y):
    """log p(u | y) at rows U (G, 2) of u = log(variance, lengthscale): the Laplace evidence,
    log-normal(0.5, 1) on the variance, inverse-gamma(4, 4) on the length-scale, and the
    log-Jacobian."""
    U = np.atleast_2d(U)
    out, f = np.empty(U.shape[0]), np.zeros(len(y))
    d2 = (X[:, 0][:, None] - X[:, 0][None, :]) ** 2
    for g, (log_variance, log_lengthscale) in enumerate(U):
        K = math.exp(log_variance) * np.exp(-0.5 * d2 / math.exp(2.0 * log_lengthscale))
        evidence, f = laplace_log_evidence(K + 1e-10 * np.eye(len(y)), y, f)
        out[g] = (evidence + stats.norm(0.5, 1.0).logpdf(log_variance) - log_variance
                  + stats.invgamma(4.0, scale=4.0).logpdf(math.exp(log_lengthscale)) + log_variance + log_lengthscale)
    return out


def test_laplace_classification_two_hyperparameters_against_grid_quadrature():
    X, y = classification_problem()
    model = gd.Model(kernel=gd.kernels.SquaredExponential(variance=P.LogNormal(0.5, 1.0),
                                                          lengthscale=P.InverseGamma(4.0, 4.0)),
                     likelihood=gd.likelihoods.Bernoulli(link="logit", bias=gd.Fixed(0.0)),
                     inference=gd.inference.Laplace())
    s = sample(model, X, y)
    u = s.result.draws[1, [3, 300]]
    assert [e.name for e in s.table.free] == ["kernel.lengthscale", "kernel.variance"]
    ours = classification_log_posterior(u[:, [1, 0]], X, y)
    np.testing.assert_allclose(ours - ours[0], s.sample_stats["lp"].values[1, [3, 300]]
                               - s.sample_stats["lp"].values[1, 3], atol=1e-6)
    check_against_quadrature(s.draws, ["kernel.variance", "kernel.lengthscale"],
                             lambda U: classification_log_posterior(U, X, y),
                             lambda u: float(classification_log_posterior(u, X, y)[0]), np.array([0.0, 0.0]),
                             points=48)
