"""The robust-max link's probability that the labelled class's latent value is the largest, in one
jitted pass over rows, nodes and classes (:func:`gpdsl.likelihoods.categorical._robustmax_largest`).

GPflow's ``RobustMax.prob_is_largest`` by the probabilists' Gauss-Hermite rule (x_q, w_q):

    P_n = sum_q w_q prod_{j != y} C(z_njq),   z_njq = (m_y + s_y x_q - m_j) / s_j,
    C(z) = Phi(z) (1 - 2 SQUASH) + SQUASH,     s_j = sqrt(max(var_j, 1e-10)),

and its exact derivatives in the means and variances.  The NumPy form builds several (n, K, Q)
temporaries (z, C, T and their products) and took 1.5 of the 4.2 s of a 200-row, 3-class
full-batch robust-max SVGP fit (issue 46); here each node's K values of C and C' live in
length-K scratch arrays.  The leave-one-out products prod_{l != y, j} C_l are prefix times
suffix products rather than the full product divided by C_j: no division, and exact where a
product would underflow.  Without derivatives, factors whose Phi rounds to 1 skip the exponential.

One specialisation: the wrapper (:func:`robustmax_largest`) passes int64 codes, C-ordered
writable float64 arrays, a float and a bool, and allocates the outputs (0-row derivative arrays
without ``need_grad``), so that the first robust-max fit compiles the kernel once, whoever calls it.
"""
import math

import numpy as np
from numba import njit

from .special import _ERF_SMALL, _INV_SQRT2, _INV_SQRT2PI, _erf_small, _erfcx_tail

# The variance clip of every class: s = sqrt(max(var, VAR_FLOOR)), derivative 0 at and below it.
VAR_FLOOR = 1e-10
# Above z = 8.5, Phi(-z) < 2^-54 and 1 - Phi(-z) rounds to 1: P's factor is exactly that of Phi = 1, with
# no exponential (most factors of a fitted model's rows, where the other classes lie far below the
# labelled one).  With derivatives phi(z) is still needed (it is not 0 there, and dP/dm_j of a class
# far below is a sum of such terms alone), but not the rational of Phi's tail: the same bits, 13 % of
# the factors of the 200-row, 3-class fit of benchmarks/bench_compile.py.
_SATURATED = 8.5


@njit(cache=True, nogil=True)
def _cdf_pdf(z):
    """Phi(z) and phi(z) from one exponential and one of Cody's rationals.

    With t = |z| / sqrt 2: Phi = (1 + erf(t sign z)) / 2 for t <= 0.46875; beyond,
    Phi(-|z|) = erfcx(t) exp(-z^2 / 2) / 2 shares its exponential with phi.  Relative error within
    a few eps, and z^2 eps / 2 in the lower tail (the rounding of z^2 / 2, which erfc(-z / sqrt 2)
    has as well); math.erfc and math.exp apart cost two calls where this costs one.
    """
    t = z * _INV_SQRT2
    gauss = math.exp(-0.5 * z * z)
    if abs(t) <= _ERF_SMALL:
        return 0.5 + 0.5 * _erf_small(t), _INV_SQRT2PI * gauss
    upper = 0.5 * _erfcx_tail(abs(t)) * gauss                   # Phi(-|z|)
    return (upper if z < 0.0 else 1.0 - upper), _INV_SQRT2PI * gauss


@njit(cache=True, nogil=True)
def robustmax_pass(codes, mean, var, nodes, weights, squash, need_grad, P, d_mean, d_var, work):
    """P_n = sum_q w_q prod_{j != y_n} C(z_njq) into ``P`` and, with ``need_grad``, dP/dmean and
    dP/dvar into ``d_mean`` and ``d_var``.

    With T_njq = w_q (prod_{l != y, j} C_nlq) C'(z_njq) / s_j for j != y (C' = (1 - 2 SQUASH) phi):

        dP/dm_j = -sum_q T_njq,        dP/dm_y = sum_{j, q} T_njq,
        dP/ds_j = -sum_q T_njq z_njq,  dP/ds_y = sum_{j, q} T_njq x_q,

    and dP/dvar = dP/ds / (2 s), 0 where var <= 1e-10 (s is clipped there).  The outputs and the
    scratch are the caller's (:func:`robustmax_largest`): the same kernel allocating them compiled
    0.2-0.3 s slower.  A row whose code is not in 0..K-1 is left unwritten and counted: the check
    rides on the pass, where the wrapper's two reductions over the codes cost about 1 % of a
    robust-max SVGP fit (one pass a natural step).

    Parameters
    ----------
    codes : ndarray of int64, shape (n,)
        The labelled class y_n of each row, 0..K-1.
    mean, var : ndarray of float64, shape (n, K), C-ordered
        Moments of q(f_nk).
    nodes, weights : ndarray of float64, shape (Q,)
        The probabilists' Gauss-Hermite rule, weights summing to 1.
    squash : float
        SQUASH (GPflow's 1e-6; ``gpdsl.likelihoods.categorical.SQUASH``).
    need_grad : bool
        Whether to form ``d_mean`` and ``d_var``.
    P : ndarray, shape (n,)
        Output.
    d_mean, d_var : ndarray, shape (n, K), or any shape without ``need_grad``
        Outputs.
    work : ndarray, shape (6, K)
        Scratch.

    Returns
    -------
    int
        The rows whose code is outside 0..K-1 (skipped).
    """
    n, K = mean.shape
    Q = nodes.shape[0]
    scale, C, slope, z, suffix, d_sd = work[0], work[1], work[2], work[3], work[4], work[5]
    squeeze = 1.0 - 2.0 * squash
    bad = 0
    for i in range(n):
        y = codes[i]
        if y < 0 or y >= K:
            bad += 1
            continue
        for j in range(K):
            v = var[i, j]
            # v <= floor rather than max(v, floor): a NaN variance stays NaN, as NumPy's maximum
            scale[j] = 1.0 / math.sqrt(VAR_FLOOR if v <= VAR_FLOOR else v)      # 1 / s_j
        s_y = 1.0 / scale[y]
        m_y = mean[i, y]
        total = 0.0
        if not need_grad:
            for q in range(Q):
                f = m_y + s_y * nodes[q]
                prod = 1.0
                for j in range(K):
                    if j == y:
                        continue
                    zj = (f - mean[i, j]) * scale[j]
                    if zj > _SATURATED:
                        prod *= squeeze + squash
                    else:
                        cdf, _ = _cdf_pdf(zj)
                        prod *= cdf * squeeze + squash
                total += weights[q] * prod
            P[i] = total
            continue
        for j in range(K):
            d_sd[j] = 0.0
            d_mean[i, j] = 0.0
        label_sd = 0.0
        # The labelled class's factor is 1 and its T 0: it rides through the loops below unchanged.
        C[y], slope[y], z[y] = 1.0, 0.0, 0.0
        for q in range(Q):
            f = m_y + s_y * nodes[q]
            for j in range(K):
                if j != y:
                    zj = (f - mean[i, j]) * scale[j]
                    if zj > _SATURATED:
                        cdf, pdf = 1.0, _INV_SQRT2PI * math.exp(-0.5 * zj * zj)
                    else:
                        cdf, pdf = _cdf_pdf(zj)
                    z[j], C[j], slope[j] = zj, cdf * squeeze + squash, squeeze * pdf * scale[j]   # dC_j/df
            suffix[K - 1] = 1.0
            for j in range(K - 1, 0, -1):
                suffix[j - 1] = suffix[j] * C[j]
            prefix = 1.0
            node_sum = 0.0              # sum_j T_njq
            for j in range(K):
                t = weights[q] * prefix * suffix[j] * slope[j]
                prefix *= C[j]
                d_mean[i, j] -= t
                d_sd[j] -= t * z[j]
                node_sum += t
            total += weights[q] * prefix
            d_mean[i, y] += node_sum    # after -0 from the loop above
            label_sd += node_sum * nodes[q]
        P[i] = total
        d_sd[y] = label_sd
        for j in range(K):
            d_var[i, j] = 0.5 * d_sd[j] * scale[j] if var[i, j] > VAR_FLOOR else 0.0
    return bad


def _float_array(name, a, ndim):
    """``a`` as a C-ordered, writable float64 array of ``ndim`` dimensions (one Numba type for
    every caller: a read-only or strided array would compile a second specialisation)."""
    a = np.ascontiguousarray(a, dtype=np.float64)
    if a.ndim != ndim:
        raise ValueError(f"robustmax_largest: {name} must have {ndim} dimensions, got shape {a.shape}")
    return a if a.flags.writeable else a.copy()


def robustmax_largest(codes, mean, var, nodes, weights, squash, need_grad):
    """P_n = sum_q w_q prod_{j != y_n} C(z_njq) and, with ``need_grad``, its derivatives
    (:func:`robustmax_pass`), after checking and converting the arguments to the kernel's one
    signature.

    Parameters
    ----------
    codes : array_like of int, shape (n,)
        Class codes 0..K-1.
    mean, var : array_like, shape (n, K)
        Moments of q(f_nk).
    nodes, weights : array_like, shape (Q,)
        The probabilists' Gauss-Hermite rule.
    squash : float
        SQUASH.
    need_grad : bool

    Returns
    -------
    P : ndarray, shape (n,)
    d_mean, d_var : ndarray, shape (n, K)
        Only with ``need_grad``: ``(P,)`` or ``(P, d_mean, d_var)``.

    Raises
    ------
    ValueError
        If the shapes disagree or a code is not an integer in 0..K-1.
    """
    mean, var = _float_array("mean", mean, 2), _float_array("var", var, 2)
    nodes, weights = _float_array("nodes", nodes, 1), _float_array("weights", weights, 1)
    n, K = mean.shape
    codes = np.asarray(codes)
    if var.shape != mean.shape or codes.shape != (n,) or weights.shape != nodes.shape:
        raise ValueError(f"robustmax_largest: shapes codes {codes.shape}, mean {mean.shape}, var {var.shape}, "
                         f"nodes {nodes.shape}, weights {weights.shape} do not agree")
    if n and not (codes.dtype.kind in "iub" or np.all(codes == np.floor(codes))):
        raise ValueError(f"robustmax_largest: codes must be integers in 0..{K - 1}, got {codes.min()} to {codes.max()}")
    int_codes = np.ascontiguousarray(codes, dtype=np.int64)
    need_grad = bool(need_grad)
    P = np.empty(n)
    d_mean, d_var = (np.empty((n, K)), np.empty((n, K))) if need_grad else (np.empty((0, K)), np.empty((0, K)))
    if robustmax_pass(int_codes, mean, var, nodes, weights, float(squash), need_grad, P, d_mean, d_var,
                      np.empty((6, K))):
        raise ValueError(f"robustmax_largest: codes must be integers in 0..{K - 1}, got {codes.min()} to {codes.max()}")
    return (P, d_mean, d_var) if need_grad else (P,)
