"""Stochastic variational Pólya-Gamma classification (``gd.inference.PolyaGamma(minibatch=B)``).

Wenzel, Galy-Fajou, Donner, Kloft & Opper (2019), "Efficient Gaussian process classification
using Pólya-Gamma data augmentation" (AAAI): the logistic likelihood
p(y_n | f_n) = sigma(y_n z_n), z_n = f_n + bias (+ the row's latent offset, which SVGP's passes
add to mean_n below), y_n in {-1, +1}, augmented with
omega_n ~ PG(1, 0) is conditionally Gaussian in f_n,

    p(y_n | f_n, omega_n) = 1/2 exp(y_n z_n / 2 - omega_n z_n^2 / 2),

and the mean-field bound with q(omega_n) = PG(1, c_n), q(u) Gaussian (Passerello thesis
eq. 2.23) is, per point, with q(f_n) = N(mean_n, var_n) and theta(c) = tanh(c/2) / (2 c),

    E_n(c_n) = y_n (mean_n + bias) / 2 - log(2 cosh(c_n / 2))
               - theta(c_n) / 2 [(mean_n + bias)^2 + var_n - c_n^2]                  (1)

(their augmented ELBO is sum_n E_n - KL[q(u) || p(u)]).  Its closed-form local optimum
(Wenzel et al.'s local update; thesis eq. 4.11) is

    c_n^2 = (mean_n + bias)^2 + var_n,                                            (2)

where the bracket of (1) vanishes: E_n = y_n (mean_n + bias) / 2 - log(2 cosh(c_n / 2)), the
Jaakkola-Jordan bound on E_q[log sigma(y_n z_n)].  Since c_n maximises (1), the derivatives of
max_c E_n in (mean_n, var_n) are the partial ones at fixed c_n (envelope theorem):

    dE_n/dmean_n = y_n / 2 - theta_n (mean_n + bias),   dE_n/dvar_n = -theta_n / 2,     (3)

i.e. conjugate Gaussian sites of precision w_n = theta_n and natural location
r_n = dE_n/dmean_n + w_n mean_n = y_n / 2 - theta_n bias.  So the whole SVGP machinery of
:mod:`gpdsl.methods.svgp` applies with (1)-(3) in place of the likelihood's quadrature: the
natural-gradient step on q(u) from a minibatch (Wenzel et al.'s global step, with the local
step (2) taken inside it at the batch's current marginals), the full bound and its gradients in the
hyperparameters and Z at fixed q.  A natural step of size 1 from all N rows is the collapsed
method's closed-form optimal q(u) at those c (thesis eq. 4.5), and at convergence the bound is
the collapsed PG bound (:mod:`gpdsl.methods.polya_gamma`) at the same hyperparameters and Z.

Everything is closed form: no quadrature over q(f_n), which is what SVGP with the logit link
pays for at every row.
"""
from __future__ import annotations

import numpy as np

from .._jit.polya_gamma import pg_theta
from .common import RowIndependentExpectations


def jaakkola_jordan_expectations(y, shifted_mean, var):
    """The Pólya-Gamma bound (1) at its optimal c (2) and its derivatives (3).

    Parameters
    ----------
    y : (n,) labels in {-1, +1}.
    shifted_mean : (n,) mean_n + bias of the latent z_n under q.
    var : (n,) var_n >= 0.

    Returns
    -------
    (bound, d_mean, d_var) : arrays (n,): E_n at c_n = sqrt(shifted_mean^2 + var),
    dE_n/dmean_n = y_n / 2 - theta_n shifted_mean_n (also dE_n/dbias), dE_n/dvar_n = -theta_n / 2.
    log(2 cosh(c/2)) is evaluated as c/2 + log1p(exp(-c)), which cannot overflow, and
    (y z - c) / 2 for y z > 0 as -var / (2 (|z| + c)): the difference of two near-equal numbers
    where the point is far on its own side (z = 800, var = 1e-4: -3.125e-8, where the
    subtraction keeps 5 digits).
    """
    var = np.maximum(var, 0.0)
    c = np.hypot(shifted_mean, np.sqrt(var))          # no overflow of z^2 for |z| > 1e154
    theta = pg_theta(c)
    margin = y * shifted_mean
    half_gap = np.where(margin > 0.0, -0.5 * var / (np.abs(shifted_mean) + c + (c == 0.0)), 0.5 * (margin - c))
    return half_gap - np.log1p(np.exp(-c)), 0.5 * y - theta * shifted_mean, -0.5 * theta


class PolyaGammaExpectations(RowIndependentExpectations):
    """The closed-form expectations (1)-(3) of a ``Bernoulli("logit")`` likelihood, in the
    likelihood interface that :mod:`gpdsl.methods.svgp` integrates by
    (``variational_expectations``): what turns SVGP's passes into the Pólya-Gamma method's.
    ``likelihood`` is the model's bound Bernoulli (:class:`gpdsl.components.Bound`).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Bernoulli
        The model's logit Bernoulli.
    """

    # As the Likelihood attributes: the logit bound is not even in f, q starts from the prior;
    # one latent function.
    sign_symmetric = False
    n_latent = 1

    def __init__(self, likelihood):
        self.likelihood = likelihood

    def variational_expectations(self, y, mean, var):
        """(bound, d_mean, d_var, {bias: d sum_n bound_n / d bias}) for labels y (n,) and
        q(f_n) = N(mean_n, var_n), arrays (n,): as the likelihood's own method, with the
        Pólya-Gamma bound (1) at c (2) in place of E_q[log sigma(y_n z_n)].

        Parameters
        ----------
        y : ndarray, shape (n,)
            Labels in {-1, +1}.
        mean : ndarray, shape (n,)
            Means of q(f_n).
        var : ndarray, shape (n,)
            Variances of q(f_n).

        Returns
        -------
        bound : ndarray, shape (n,)
        d_mean : ndarray, shape (n,)
        d_var : ndarray, shape (n,)
        param_grads : dict of str to ndarray
            Keyed by the likelihood's qualified bias name.
        """
        bound, d_mean, d_var = jaakkola_jordan_expectations(y, mean + float(self.likelihood.bias), var)
        return bound, d_mean, d_var, {self.likelihood.qualify("bias"): np.array(np.sum(d_mean))}
