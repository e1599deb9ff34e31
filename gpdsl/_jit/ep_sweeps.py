"""Jitted EP / QP site sweeps for the dense prior and the FITC prior.

Sites are Gaussian in natural parameters: precision ``tau`` and location ``nu`` (precision x
mean).  One sweep visits every site: the cavity is the current marginal with the site removed,
the tilted distribution ``p(y_i | f_i) N(f_i | cavity)`` is projected onto a Gaussian by
:func:`gpdsl._jit.projections.project` (moment matching for EP, the L2-Wasserstein projection
for QP; ``quantile`` selects it), and the site becomes the ratio of that Gaussian to the
cavity.  Damping keeps the weight ``damping`` on the old site.  Sweeps return the largest
change of a site parameter and the number of sites skipped because their cavity had
non-positive precision (the update would be meaningless; the site keeps its value).
"""
import numpy as np
from numba import njit

from .projections import project_tabulated


@njit(cache=True)
def _site_update(i, marginal_var, marginal_mean, tau, nu, y, param, kind, quantile, damping, table, grid):
    """New (tau_i, nu_i) from the marginal N(marginal_mean, marginal_var); ok=False if the cavity is improper.

    ``param`` is the likelihood's scalar parameter (probit bias, Gaussian noise variance);
    ``table``/``grid``: the optional QP lookup table (empty to compute sigma* directly).
    """
    tau_cav = 1.0 / marginal_var - tau[i]
    nu_cav = marginal_mean / marginal_var - nu[i]
    if tau_cav <= 0.0:
        return tau[i], nu[i], False
    _, mean, var = project_tabulated(kind, y[i], nu_cav / tau_cav, 1.0 / tau_cav, param, quantile, table, grid)
    # Site precisions are kept non-negative (GPML's infEP does the same): a negative one, possible
    # for likelihoods that are not log-concave (Poisson with the square link), can make the
    # posterior improper; the marginal mean is still matched.
    tau_new = max(1.0 / var - tau_cav, 0.0)
    nu_new = mean * (tau_cav + tau_new) - nu_cav      # keeps the marginal mean at the tilted mean
    tau_new = (1.0 - damping) * tau_new + damping * tau[i]
    nu_new = (1.0 - damping) * nu_new + damping * nu[i]
    return tau_new, nu_new, True


@njit(cache=True)
def dense_sequential_sweep(Sigma, mu, tau, nu, y, param, kind, quantile, damping, table, grid):
    """One sequential sweep over a dense posterior (Rasmussen & Williams Algorithm 3.5).

    Sigma (N, N) and mu (N,) are the posterior covariance and mean, updated in place by rank-1
    updates after each site; tau, nu (N,) the site parameters, updated in place.
    """
    n = y.shape[0]
    max_change, skipped = 0.0, 0
    for i in range(n):
        tau_new, nu_new, ok = _site_update(i, Sigma[i, i], mu[i], tau, nu, y, param, kind, quantile, damping,
                                           table, grid)
        if not ok:
            skipped += 1
            continue
        d_tau = tau_new - tau[i]
        d_nu = nu_new - nu[i]
        max_change = max(max_change, abs(d_tau), abs(d_nu))
        s_ii = Sigma[i, i]
        c = d_tau / (1.0 + d_tau * s_ii)
        s = Sigma[:, i].copy()
        # mu_new = (Sigma - c s s^T)(nu + d_nu e_i) = mu + s (d_nu (1 - c s_ii) - c mu_i)
        coef = d_nu * (1.0 - c * s_ii) - c * mu[i]
        for a in range(n):
            mu[a] += coef * s[a]
            ca = c * s[a]
            for b in range(n):
                Sigma[a, b] -= ca * s[b]
        tau[i] = tau_new
        nu[i] = nu_new
    return max_change, skipped


@njit(cache=True)
def parallel_site_updates(marginal_var, marginal_mean, tau, nu, y, param, kind, quantile, damping, table, grid):
    """Update every site from the same marginals (the caller refreshes the posterior after)."""
    n = y.shape[0]
    max_change, skipped = 0.0, 0
    tau_old = tau.copy()
    nu_old = nu.copy()
    for i in range(n):
        tau_new, nu_new, ok = _site_update(i, marginal_var[i], marginal_mean[i], tau_old, nu_old, y, param,
                                           kind, quantile, damping, table, grid)
        if not ok:
            skipped += 1
            continue
        max_change = max(max_change, abs(tau_new - tau_old[i]), abs(nu_new - nu_old[i]))
        tau[i] = tau_new
        nu[i] = nu_new
    return max_change, skipped


@njit(cache=True, fastmath=True)
def fitc_sequential_sweep(d, P, Minv, nu_vec, gamma, tau, nu, y, param, kind, quantile, damping, table, grid,
                          start):
    """One sequential FITC-EP sweep from site ``start`` (Naish-Guzman & Holden, section 3).

    The posterior is A = D + P M P^T, h = nu_vec + P gamma with D = diag(d) (N,), P (N, M) and
    M (M, M) symmetric.  The paper keeps M through its Cholesky factor (M = R^T R); here M itself
    is kept (``Minv``: M is the inverse of Sigma_u = K_uu + P0^T W P0) because its rank-1 change
    is one contiguous O(M^2) pass, about ten times faster than triangular solves plus a factor
    up/downdate, and the refresh after every sweep rebuilds it from a fresh Cholesky factor, so
    rounding drift lasts one sweep.  With w = M p_i, A_ii = d_i + p_i^T w and a change pi of the
    site precision (b of its location):
        M        -= c w w^T,  c = pi / (1 + pi A_ii)     (positive definite iff 1 - c p^T w > 0)
        nu_vec_i += d_i (b - pi nu_vec_i) / (1 + pi d_i)
        gamma    += (b - pi h_i) / (1 + pi d_i) M_new p_i,   M_new p_i = (1 - c p^T w) w
        d_i /= 1 + pi d_i;  p_i /= 1 + pi d_i.
    (The paper prints ``b + pi nu_i``; expanding h_new = A_new (A^-1 h + b e_i) gives the minus
    sign, and the tests compare with dense EP on the same prior.)

    Returns (max_change, skipped, stop): ``stop`` is -1 after a full sweep, or the index of a
    site whose update would lose definiteness (footnote 3) -- the caller refreshes and goes on.
    """
    n, m = P.shape
    max_change, skipped = 0.0, 0
    w = np.empty(m)
    for i in range(start, n):
        for a in range(m):
            t = 0.0
            for k in range(m):
                t += Minv[a, k] * P[i, k]
            w[a] = t
        pw = 0.0
        pg = 0.0
        for a in range(m):
            pw += P[i, a] * w[a]
            pg += P[i, a] * gamma[a]
        a_ii = d[i] + pw
        h_i = nu_vec[i] + pg
        tau_new, nu_new, ok = _site_update(i, a_ii, h_i, tau, nu, y, param, kind, quantile, damping, table, grid)
        pi = tau_new - tau[i]
        b = nu_new - nu[i]
        denom = 1.0 + pi * d[i]
        if not ok or denom <= 0.0:
            skipped += 1
            continue
        c = pi / (1.0 + pi * a_ii)
        keep = 1.0 - c * pw
        if not keep > 0.0:
            return max_change, skipped, i
        for a in range(m):
            ca = c * w[a]
            for k in range(m):
                Minv[a, k] -= ca * w[k]
        max_change = max(max_change, abs(pi), abs(b))
        step = (b - pi * h_i) / denom * keep
        for a in range(m):
            gamma[a] += step * w[a]
            P[i, a] /= denom
        nu_vec[i] += d[i] * (b - pi * nu_vec[i]) / denom
        d[i] /= denom
        tau[i] = tau_new
        nu[i] = nu_new
    return max_change, skipped, -1
