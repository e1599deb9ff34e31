"""Jitted elementwise kernels of the Pólya-Gamma bound (thesis eq. 2.19, 4.7, 4.11, C.1).

The O(N M^2) products of a coordinate-ascent pass are BLAS-3 calls made by the Python layer
(:mod:`gpdsl.methods.polya_gamma`); what is left here is the per-row work that would otherwise
need several NumPy temporaries: the PG moments and KL terms of the local parameters c, and the
closed-form c update from the marginals of q*(f).
"""
import numpy as np
from numba import njit

_LOG2 = np.log(2.0)


@njit(cache=True)
def pg_theta(c):
    """theta_n = E[omega_n] = tanh(c_n / 2) / (2 c_n) under q(omega_n) = PG(1, c_n) (eq. 2.19).

    c (N,) >= 0 -> theta (N,).  For c < 1e-3 the Taylor series 1/4 - c^2/48 + c^4/480 is used:
    the quotient loses digits there and is 0/0 at c = 0.
    """
    theta = np.empty(c.shape[0])
    for n in range(c.shape[0]):
        cn = abs(c[n])
        if cn < 1e-3:
            c2 = cn * cn
            theta[n] = 0.25 - c2 / 48.0 + c2 * c2 / 480.0
        else:
            theta[n] = np.tanh(0.5 * cn) / (2.0 * cn)
    return theta


@njit(cache=True)
def pg_negative_kl(c):
    """-sum_n KL[PG(1, c_n) || PG(1, 0)] = sum_n [c_n/4 tanh(c_n/2) - log cosh(c_n/2)] (eq. C.1).

    log cosh(x) is evaluated as |x| + log1p(exp(-2|x|)) - log 2, which cannot overflow.
    """
    total = 0.0
    for n in range(c.shape[0]):
        x = 0.5 * abs(c[n])
        total += 0.5 * x * np.tanh(x) - (x + np.log1p(np.exp(-2.0 * x)) - _LOG2)
    return total


@njit(cache=True)
def pg_c_update(mean, var, bias):
    """The closed-form local update c_n = sqrt((mu_n + bias)^2 + v_n) (eq. 4.11 with the bias in
    the likelihood's argument): mean, var (N,) are the marginals of q*(f) at the training inputs."""
    c = np.empty(mean.shape[0])
    for n in range(mean.shape[0]):
        m = mean[n] + bias
        c[n] = np.sqrt(m * m + max(var[n], 0.0))
    return c

