"""Jitted per-row kernels of the logistic-softmax augmentation (:mod:`gpdsl.methods.logistic_softmax`).

The O(N K M^2) products of a coordinate-ascent pass are BLAS-3 calls made by the Python layer;
what is left here is the O(N K) work on the local variables of each row i and class k: the
closed-form local optimum (c_ik, gamma_ik, alpha_i) at given marginals of q(f_ik), the row sums of
the bound's local terms with the pseudo-regression weights theta_ik and linear terms kappa_ik, the
per-row bound at the local optimum with its derivatives (the stochastic method's expectations),
and the marginal variances |V_k[:, n]|^2 of a stack of whitened products.

Targets are the class codes 0..K-1 as floats, y_ik = 1 if code_i = k else 0.  Latent arrays are
(n, K).  The residual variances K^k_ii - Q^k_ii are (n, K), one column per class's kernel, or
(n, 1), the one column of a kernel shared by all classes (always C-ordered: one compiled
signature serves both).  beta_i = K at the optimum; alpha_i = 1 + sum_k gamma_ik (module docstring of the method).
"""
import math

import numpy as np
from numba import njit

from .special import digamma

_LOG2 = math.log(2.0)
# Trigamma's asymptotic series at x >= 10: 1/x + 1/(2x^2) + sum_k B_2k / x^(2k+1); first omitted
# term below 1e-16 / x there.
_TRIGAMMA_SERIES = (1.0 / 6.0, -1.0 / 30.0, 1.0 / 42.0, -1.0 / 30.0, 5.0 / 66.0, -691.0 / 2730.0)


@njit(cache=True, nogil=True)
def trigamma(x):
    """psi'(x) for x > 0: the recurrence psi'(x) = psi'(x + 1) + 1/x^2 up to x >= 10, then the
    asymptotic series; absolute error ~1e-16."""
    shift = 0.0
    while x < 10.0:
        shift += 1.0 / (x * x)
        x += 1.0
    inv2 = 1.0 / (x * x)
    series = 0.0
    for k in range(len(_TRIGAMMA_SERIES) - 1, -1, -1):
        series = series * inv2 + _TRIGAMMA_SERIES[k]
    return shift + 1.0 / x + 0.5 * inv2 + series * inv2 / x


@njit(cache=True, nogil=True)
def _theta1(c):
    """E[omega] under PG(1, c) = tanh(c/2) / (2c), Taylor series 1/4 - c^2/48 + c^4/480 below 1e-3."""
    if c < 1e-3:
        c2 = c * c
        return 0.25 - c2 / 48.0 + c2 * c2 / 480.0
    return math.tanh(0.5 * c) / (2.0 * c)


@njit(cache=True, nogil=True)
def _solve_alpha(H, K):
    """The root alpha >= 1 of alpha = 1 + exp(psi(alpha)) H / K (the joint optimum of q(lambda_i)
    and the gamma_ik; H = sum_k h_ik < K so the right side is a contraction) by Newton's method,
    whose derivative 1 - exp(psi) psi' H / K lies in (0, 1].  Stops at a step below 1e-15 alpha,
    or below 1e-9 alpha and no smaller than the step before (the rounding floor): as H -> K the
    root grows (alpha ~ K / (2 (K - H))) and the residual's rounding, ~alpha eps over a
    derivative ~(K - H) / K, leaves steps of ~1e-13 alpha at H = 0.99 K that never reach 1e-15
    alpha (the 100 iterations that made 10^4 rows at such H take 25 ms, issue 46).  Far from the
    root the steps grow in absolute size while alpha does, hence the 1e-9.  Starts at the root
    of the large-alpha form exp(psi(alpha)) ~ alpha - 1/2, (1 - r/2) / (1 - r) with r = H / K
    (1 at H = 0): 4 Newton steps where 1 + H took 5-7 at r from 0.7 to 0.999."""
    ratio = min(H / K, 1.0 - 1e-15)     # h_ik < 1, yet h_ik rounds to 1 at mean_ik = -c_ik < -37
    a = (1.0 - 0.5 * ratio) / (1.0 - ratio)
    last = math.inf
    for _ in range(100):
        e = math.exp(digamma(a))
        g = a - 1.0 - e * ratio
        slope = 1.0 - e * trigamma(a) * ratio
        if slope <= 0.0:                # rounding, at alpha ~ 1e15 (H = K to rounding): as near as it gets
            return a
        step = g / slope
        a_new = a - step
        if a_new < 1.0:
            a_new = 0.5 * (a + 1.0)
        change = abs(a_new - a)
        if change <= 1e-15 * a_new or (change >= last and change <= 1e-9 * a_new):
            return a_new
        last = change
        a = a_new
    return a


@njit(cache=True, nogil=True)
def _row_optimum(mean, var, i, c, gamma, tilt):
    """Row i's local optimum (:func:`ls_local_update`) written into c[i], gamma[i] and
    tilt[i] = exp(-c[i]) (what theta's tanh(c/2) = (1 - tilt) / (1 + tilt) reuses); returns
    alpha_i.  h_ik = exp(-(mean + c)/2) / (1 + exp(-c)) with mean + c >= 0: no overflow."""
    K = mean.shape[1]
    H = 0.0
    for k in range(K):
        m = mean[i, k]
        ck = math.sqrt(m * m + max(var[i, k], 0.0))
        q = math.exp(-ck)
        c[i, k] = ck
        tilt[i, k] = q
        h = math.exp(-0.5 * (m + ck)) / (1.0 + q)
        gamma[i, k] = h
        H += h
    a = _solve_alpha(H, K)
    scale = math.exp(digamma(a) - math.log(K))
    for k in range(K):
        gamma[i, k] *= scale
    return a


@njit(cache=True, nogil=True)
def ls_local_update(codes, mean, var):
    """The local optimum at the marginals q(f_ik) = N(mean_ik, var_ik): c_ik = sqrt(mean^2 + var),
    and jointly (gamma_ik, alpha_i, beta_i = K) with gamma_ik = exp(psi(alpha_i) - log K) h_ik,
    h_ik = exp(-mean_ik/2) / (2 cosh(c_ik/2)), alpha_i = 1 + sum_k gamma_ik.
    codes (n,), mean (n, K), var (n, K) -> (c (n, K), gamma (n, K), alpha (n,))."""
    n, K = mean.shape
    c = np.empty((n, K))
    gamma = np.empty((n, K))
    tilt = np.empty((n, K))
    alpha = np.empty(n)
    for i in range(n):
        alpha[i] = _row_optimum(mean, var, i, c, gamma, tilt)
    return c, gamma, alpha


@njit(cache=True, nogil=True)
def ls_local_terms(codes, c, gamma, alpha, beta, residual):
    """theta_ik = (y_ik + gamma_ik) tanh(c_ik/2) / (2 c_ik), kappa_ik = (y_ik - gamma_ik) / 2 and the
    row sums of the bound's terms in the local variables alone (module docstring, eq. (B)):

        sum_ik [gamma (psi_i - log gamma + 1 - log 2) - y log 2 + (y + gamma)(c/4 tanh(c/2) - log cosh(c/2))]
        + sum_i [-K alpha_i / beta_i + H(Gamma(alpha_i, beta_i))] - 1/2 sum_ik theta_ik residual_ik,

    psi_i = digamma(alpha_i) - log beta_i, residual (n, K) or (n, 1) = K^k_ii - Q^k_ii.  Returns
    (theta (n, K), kappa (n, K), float)."""
    n, K = c.shape
    shared = residual.shape[1] == 1
    theta = np.empty((n, K))
    kappa = np.empty((n, K))
    total = 0.0
    for i in range(n):
        a, b = alpha[i], beta[i]
        dg = digamma(a)
        psi = dg - math.log(b)
        total += -K * a / b + a - math.log(b) + math.lgamma(a) + (1.0 - a) * dg
        label = int(codes[i])
        for k in range(K):
            y = 1.0 if k == label else 0.0
            g = gamma[i, k]
            ck = abs(c[i, k])
            x = 0.5 * ck
            t = math.tanh(x)
            log_cosh = x + math.log1p(math.exp(-2.0 * x)) - _LOG2
            th = (y + g) * _theta1(ck)
            theta[i, k] = th
            kappa[i, k] = 0.5 * (y - g)
            if g > 0.0:
                total += g * (psi - math.log(g) + 1.0 - _LOG2)
            total += -y * _LOG2 + (y + g) * (0.5 * x * t - log_cosh) - 0.5 * th * residual[i, 0 if shared else k]
    return theta, kappa, total


@njit(cache=True, nogil=True)
def ls_expectations(codes, mean, var):
    """The per-row bound at the local optimum (:func:`ls_local_update`) of given marginals, and its
    derivatives (envelope theorem: the partials at the optimal locals):

        l_i = lgamma(alpha) - log K - (alpha - 1)(psi(alpha) - 1) + mean_iy/2 - log(2 cosh(c_iy/2)),
        dl_i/dmean_ik = kappa_ik - theta_ik mean_ik,   dl_i/dvar_ik = -theta_ik / 2.

    codes (n,), mean (n, K), var (n, K) -> (l (n,), d_mean (n, K), d_var (n, K))."""
    n, K = mean.shape
    c = np.empty((n, K))
    gamma = np.empty((n, K))
    tilt = np.empty((n, K))
    bound = np.empty(n)
    d_mean = np.empty((n, K))
    d_var = np.empty((n, K))
    logK = math.log(K)
    for i in range(n):
        a = _row_optimum(mean, var, i, c, gamma, tilt)
        label = int(codes[i])
        bound[i] = (math.lgamma(a) - logK - (a - 1.0) * (digamma(a) - 1.0) + 0.5 * mean[i, label]
                    - 0.5 * c[i, label] - math.log1p(tilt[i, label]))
        for k in range(K):
            y = 1.0 if k == label else 0.0
            ck, q = c[i, k], tilt[i, k]
            # E[omega] under PG(1, c) = tanh(c/2) / (2c), as _theta1 (its series below 1e-3).
            th1 = _theta1(ck) if ck < 1e-3 else (1.0 - q) / ((1.0 + q) * 2.0 * ck)
            th = (y + gamma[i, k]) * th1
            d_mean[i, k] = 0.5 * (y - gamma[i, k]) - th * mean[i, k]
            d_var[i, k] = -0.5 * th
    return bound, d_mean, d_var


@njit(cache=True, nogil=True)
def ls_variances(V, residual):
    """var_ik = residual_ik + |V[k, :, i]|^2 for a stack V (K, M, n) of whitened products
    (L_Bk^-1 L_k^-1 K^k_uf, or R_k^T L^-1 K_uf) and residual (n, K), or (n, 1) shared by the
    classes.  Streams each V[k] along its rows.  -> (n, K).

    Element loops, no slice assignments: those pull in Numba's broadcasting code, which made
    this kernel's cold compile about 2 s longer (issue 46)."""
    K, m, n = V.shape
    shared = residual.shape[1] == 1
    out = np.empty((n, K))
    acc = np.empty(n)
    for k in range(K):
        column = 0 if shared else k
        for i in range(n):
            acc[i] = residual[i, column]
        for j in range(m):
            for i in range(n):
                v = V[k, j, i]
                acc[i] += v * v
        for i in range(n):
            out[i, k] = acc[i]
    return out
