"""Jitted per-row kernels of the Pólya-Gamma bound (thesis eq. 2.19, 4.7, 4.11, C.1).

The O(N M^2) products of a coordinate-ascent pass are BLAS-3 calls made by the Python layer
(:mod:`gpdsl.methods.polya_gamma`); what is left here is the O(N) and O(N M) work that would
otherwise need several NumPy temporaries: the PG moments and KL terms of the local parameters c,
and the marginals of q*(f) (column reductions of L_B^-1 A) with the closed-form c update.
"""
import numpy as np
from numba import njit

_LOG2 = np.log(2.0)


@njit(cache=True, nogil=True)
def _theta(cn, tanh_half):
    """theta for one c_n >= 0 given tanh(c_n / 2).  For c < 1e-3 the Taylor series
    1/4 - c^2/48 + c^4/480 is used: the quotient loses digits there and is 0/0 at c = 0."""
    if cn < 1e-3:
        c2 = cn * cn
        return 0.25 - c2 / 48.0 + c2 * c2 / 480.0
    return tanh_half / (2.0 * cn)


@njit(cache=True, nogil=True)
def pg_theta(c):
    """theta_n = E[omega_n] = tanh(c_n / 2) / (2 c_n) under q(omega_n) = PG(1, c_n) (eq. 2.19).
    c (N,) >= 0 -> theta (N,)."""
    theta = np.empty(c.shape[0])
    for n in range(c.shape[0]):
        cn = abs(c[n])
        theta[n] = _theta(cn, np.tanh(0.5 * cn))
    return theta


@njit(cache=True, nogil=True)
def pg_theta_kl(c):
    """theta_n (as :func:`pg_theta`) and -sum_n KL[PG(1, c_n) || PG(1, 0)] =
    sum_n [c_n/4 tanh(c_n/2) - log cosh(c_n/2)] (eq. C.1) in one pass: both need tanh(c_n/2),
    and a coordinate-ascent pass needs both.  c (N,) >= 0 -> (theta (N,), float).

    log cosh(x) is evaluated as |x| + log1p(exp(-2|x|)) - log 2, which cannot overflow.
    """
    theta = np.empty(c.shape[0])
    total = 0.0
    for n in range(c.shape[0]):
        x = 0.5 * abs(c[n])
        t = np.tanh(x)
        theta[n] = _theta(2.0 * x, t)
        total += 0.5 * x * t - (x + np.log1p(np.exp(-2.0 * x)) - _LOG2)
    return theta, total


@njit(cache=True, nogil=True)
def pg_marginals_update(V, g, residual, shift):
    """Marginals of q*(f) at the training inputs and the closed-form local update (eq. 4.11 with
    the bias and the row's latent offset in the likelihood's argument), for one chunk of rows.

    V (M, n) = L_B^-1 L^-1 K_uf, g (M,), residual (n,) = K_nn - Q_nn, shift (n,) = bias +
    offset_n:  mean_n = V[:, n]^T g, var_n = residual_n + |V[:, n]|^2 (eq. C.2 at the training
    inputs) and c_n = sqrt((mean_n + shift_n)^2 + var_n).  Returns (mean (n,), c (n,)).  The loop runs along
    the rows of V (contiguous) so that it streams V once.
    """
    m, n = V.shape
    mean = np.empty(n)                 # not np.zeros (covariance.slope_adjoint's comment)
    for j in range(n):
        mean[j] = 0.0
    var = residual.copy()
    for i in range(m):
        gi = g[i]
        for j in range(n):
            v = V[i, j]
            mean[j] += v * gi
            var[j] += v * v
    c = np.empty(n)
    for j in range(n):
        shifted = mean[j] + shift[j]
        c[j] = np.sqrt(shifted * shifted + max(var[j], 0.0))
    return mean, c
