"""Adam's step on q(v) = N(m_k, R_k R_k^T), K latent functions, fused with q's unpacking.

What ``SVGP(q_steps="adam")`` runs every minibatch step (robust-max's default): the displacement of
Adam (Kingma & Ba 2015, Algorithm 1) on the flat vector of q's parameters, ``variational.q_mu``
(M, K) raveled and then each latent function's packed lower triangle ``variational.q_sqrt`` (K, M
(M + 1) / 2) in ``np.tril_indices`` order, as GPflow's SVGP takes them.  In NumPy the step packed
R, concatenated, ran Adam's eight elementwise operations over the 51,500 entries of K = 10, M = 100
and unpacked again (0.8 ms of an 8 ms digits step); here it is one sweep over the entries, each
computed by the same operations in the same order as :meth:`gpdsl.methods.stochastic.Adam.step`,
so the result is the same to the last bit (tests/test_step_rules.py).
"""
import numpy as np
from numba import njit


# error_model="numpy": IEEE division (as NumPy's), without the zero checks that keep the sweeps from vectorising.
@njit(cache=True, nogil=True, error_model="numpy")
def adam_q_step(m, R, grad_mu, grad_sqrt, first, second, rate, beta1, beta2, eps, correction1, correction2):
    """q moved by one Adam step up the bound's gradient; Adam's moments updated in place.

    Parameters
    ----------
    m : ndarray, shape (M, K)
        q's whitened means.
    R : ndarray, shape (K, M, M)
        q's lower-triangular factors (the strict upper triangle is not read).
    grad_mu : ndarray, shape (M, K)
        d bound / d ``variational.q_mu``.
    grad_sqrt : ndarray, shape (K, M (M + 1) / 2)
        d bound / d ``variational.q_sqrt``, packed in ``np.tril_indices`` order.
    first, second : ndarray, shape (M K + K M (M + 1) / 2,)
        Adam's first and second moments of the gradient of the function minimised (the negative
        bound), in the flat order of the module docstring; overwritten by the updated moments.
    rate : float
        The learning rate.
    beta1, beta2, eps : float
        Adam's constants.
    correction1, correction2 : float
        The bias corrections 1 - beta1^t and 1 - beta2^t of this step t.

    Returns
    -------
    m_new : ndarray, shape (M, K)
    R_new : ndarray, shape (K, M, M)
        Lower-triangular, its strict upper triangle 0.
    valid : bool
        Every entry finite and no zero on a diagonal of R_new (S_k nonsingular).
    """
    M, K = m.shape
    m_new = np.empty((M, K))
    R_new = np.zeros((K, M, M))
    flat_m, flat_grad, flat_new = m.ravel(), grad_mu.ravel(), m_new.ravel()
    # 0 while every new entry is finite, NaN after any is not (inf * 0 and NaN * 0 are NaN): no branch
    # in the sweeps, and no array expressions, whose machinery doubled this kernel's compile time.
    finite = 0.0
    for e in range(M * K):
        g = -flat_grad[e]
        first[e] = beta1 * first[e] + (1.0 - beta1) * g
        second[e] = beta2 * second[e] + (1.0 - beta2) * g * g
        flat_new[e] = flat_m[e] - rate * (first[e] / correction1) / (np.sqrt(second[e] / correction2) + eps)
        finite += flat_new[e] * 0.0
    valid = True
    for k in range(K):
        for i in range(M):
            # Row i of R_k: packed entries i (i + 1) / 2 .. + i, flat ones after the M K of q_mu.
            packed = i * (i + 1) // 2
            base = M * K + k * (M * (M + 1) // 2) + packed
            for j in range(i + 1):
                e = base + j
                g = -grad_sqrt[k, packed + j]
                first[e] = beta1 * first[e] + (1.0 - beta1) * g
                second[e] = beta2 * second[e] + (1.0 - beta2) * g * g
                R_new[k, i, j] = R[k, i, j] - rate * (first[e] / correction1) / (np.sqrt(second[e] / correction2) + eps)
                finite += R_new[k, i, j] * 0.0
            valid = valid and R_new[k, i, i] != 0.0
    valid = valid and finite == 0.0
    return m_new, R_new, valid
