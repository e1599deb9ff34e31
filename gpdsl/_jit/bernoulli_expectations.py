"""The Bernoulli likelihood's variational expectations in one jitted pass over rows and nodes.

E_N(f | m, v)[log p(y | f)] with p = Phi(y (f + bias)) (probit) or sigma(y (f + bias)) (logit),
by the Gauss-Hermite rule f_q = m + s x_q, s = sqrt(v), and its derivatives in m and v as
:meth:`gpdsl.likelihoods.Likelihood.variational_expectations` differentiates the rule's sum
(d/dm = sum_q w_q d log p/df, d/dv = sum_q w_q x_q d log p/df / (2 s), and at s = 0
1/2 d^2 log p/df^2), the last free of a cancellation that sum has for the logit.  The NumPy form of that method builds (rows, nodes) arrays of log p and of
its first three derivatives; here each node's log p and slope are formed and summed in place
(the minibatch step of binary SVGP spent 10 of its 25 ms there, B = 1024, 100 nodes), and each
row takes the smallest of a ladder of rules that reproduces the largest for it.
"""
import math

import numpy as np
from numba import njit

from .special import norm_logcdf_ratio


@njit(cache=True, nogil=True)
def _log_density_slopes(z, probit):
    """(log p, d log p / dz, d log p / dz less a constant, d^2 log p / dz^2) at z = y (f + bias).

    The third is the slope itself for the probit and -p for the logit (slope 1 - p): where a
    row's z is mostly negative, p is small and the logit's slope nearly constant, and the rule's
    sum_q w_q x_q (slope) is accumulated from -p instead (sum_q w_q x_q = 0 for the symmetric
    rule, so the constant drops out, and with it the cancellation that left 2e-17 of noise on a
    true -3e-18 at z = -40)."""
    if probit:
        # one rational erfcx and at most one exp and one log: 22 ns a node in
        # bernoulli_expectations, where norm_logcdf (erfc, then log or log1p) and the ratio as exp
        # of the log difference took 37 ns
        log_cdf, r = norm_logcdf_ratio(z)                           # r = phi(z) / Phi(z)
        return log_cdf, r, r, -r * (z + r)
    # One exponential: with e = exp(-|z|), sigma(|z|) = 1 / (1 + e) and sigma(-|z|) = e / (1 + e).
    e = math.exp(-abs(z))
    big, small = 1.0 / (1.0 + e), e / (1.0 + e)
    if z >= 0.0:
        return -math.log1p(e), small, -big, -big * small
    return z - math.log1p(e), big, -small, -big * small


@njit(cache=True, nogil=True)
def bernoulli_expectations(y, mean, var, bias, probit, nodes, weights, starts, sd_max, spread_max):
    """The rule's E_q[log p(y_n | f_n)] and its derivatives, row by row, each row by the first
    rule of a ladder that covers it.

    Rule r has the nodes and weights ``[starts[r]:starts[r + 1]]`` and covers a row whose sd s
    and centre z_0 = y (mean + bias) have s <= ``sd_max[r]`` and s |z_0| <= ``spread_max[r]``
    (the log-density's curvature and the exponential tilt of its tail, which the smaller rules
    integrate less well); the last rule's limits are infinite.  The minibatch step of binary
    SVGP spent 7.5 of its 18 ms on a single 100-node rule (B = 1024, two passes), where its rows'
    latent sds are mostly 0.3 to 0.6.

    Parameters
    ----------
    y : ndarray, shape (n,)
        Labels coded -1.0 / +1.0.
    mean, var : ndarray, shape (n,)
        Moments of q(f_n).
    bias : float
        The likelihood's bias.
    probit : bool
        Probit (True) or logit link.
    nodes, weights : ndarray, shape (sum of the rules' sizes,)
        The rules' Gauss-Hermite nodes x_q and weights w_q (each rule's summing to 1), one after
        another.
    starts : ndarray of int, shape (R + 1,)
        Where each rule starts, and the end of the last.
    sd_max, spread_max : ndarray, shape (R,)
        The rules' limits.

    Returns
    -------
    ve, d_mean, d_var : ndarray, shape (n,)
    """
    n, last = mean.shape[0], sd_max.shape[0] - 1
    ve, d_mean, d_var = np.empty(n), np.empty(n), np.empty(n)
    total_weight = weights[starts[last]:starts[last + 1]].sum()
    for i in range(n):
        s = math.sqrt(max(var[i], 0.0))
        e, g, h = 0.0, 0.0, 0.0
        centre = y[i] * (mean[i] + bias)
        small_p = (not probit) and centre < 0.0
        if s > 0.0:
            r = 0
            while r < last and (s > sd_max[r] or s * abs(centre) > spread_max[r]):
                r += 1
            for q in range(starts[r], starts[r + 1]):
                log_p, slope, varying, _ = _log_density_slopes(y[i] * (mean[i] + s * nodes[q] + bias), probit)
                e += weights[q] * log_p
                g += weights[q] * slope
                h += weights[q] * nodes[q] * (varying if small_p else slope)
            ve[i], d_mean[i], d_var[i] = e, y[i] * g, y[i] * h / (2.0 * s)
        else:
            log_p, slope, _, curvature = _log_density_slopes(centre, probit)
            ve[i], d_mean[i], d_var[i] = total_weight * log_p, total_weight * y[i] * slope, 0.5 * total_weight * curvature
    return ve, d_mean, d_var
