"""Binary classification: :class:`Bernoulli` with a probit or logit link and a learnable bias."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from .._jit.bernoulli_expectations import bernoulli_expectations
from .._jit.likelihoods import bernoulli as sites
from .._jit.special import logit_normal_logp_many
from ..parameters import check_hyperparameter
from .base import Likelihood, SiteModel, gauss_hermite


# The smaller Gauss-Hermite rules the jitted expectations take for a row before the 100-point rule,
# per link: (nodes, the largest latent sd s, the largest s |y (mean + bias)|) each.  Within these
# limits a rule reproduces the 100-point rule's numbers to rounding: over |mean| <= 45 and sds 0.01
# to 1.5, 0.01 apart, at most 1.2e-13 relative in E and d/dmean, and in d/dvar (where above 1e-6)
# 1.3e-13 for the logit, for the probit 1.7e-10 at sd 0.01 (there a cancelling sum of slopes; the
# grid from sd 0.2 is tests/test_likelihoods.py's, 1e-12 and 1e-10 relative).  The
# probit's limit in s |z_0| is that of its tails: for z_0 >> 0, d/dmean ~ phi(m + s x) has an
# exponential tilt of rate s z_0, which the smaller rules integrate to less than 1e-12 relative.
# The minibatch rows of a twonorm fit have sds of 0.3 to 0.8: 2.1x fewer nodes on average there.
RULE_LADDER = {"probit": ((20, 0.45, 2.5), (32, 0.65, 2.5), (48, 0.95, 2.5)),
               "logit": ((20, 0.55, np.inf), (32, 0.9, np.inf), (48, 1.1, np.inf))}


@lru_cache(maxsize=4)
def _rule_ladder(link, points):
    """(nodes, weights, starts, sd_max, spread_max) of the jitted expectations' rules: those of
    :data:`RULE_LADDER` then the ``points``-node rule (alone unless ``points`` is 100, the rule
    the ladder was measured against)."""
    ladder = RULE_LADDER[link] if points == 100 else ()
    rules = [gauss_hermite(q) for q, _, _ in ladder] + [gauss_hermite(points)]
    starts = np.cumsum([0] + [x.size for x, _ in rules])
    return (np.concatenate([x for x, _ in rules]), np.concatenate([w for _, w in rules]), starts,
            np.array([sd for _, sd, _ in ladder] + [np.inf]), np.array([c for _, _, c in ladder] + [np.inf]))


@dataclass(frozen=True, eq=False)
class Bernoulli(Likelihood):
    """Binary labels through a link: p(y | f) = Phi(y (f + bias)) for ``link="probit"``
    (Naish-Guzman & Holden eq. 4; the bias beta is a learnable, unconstrained hyperparameter)
    or sigma(y (f + bias)) for ``link="logit"``.  Labels may be {0, 1}, {-1, +1} or bool.

    Parameters
    ----------
    link : {"probit", "logit"}, default "probit"
        The link from f to p(y = +1 | f).
    bias : float, Fixed or prior, default 0.0
        The learnable bias beta added to f (unconstrained scalar).

    Raises
    ------
    ValueError
        An unknown link.
    TypeError, ValueError
        A bias that is not a finite scalar, ``Fixed`` or prior.
    """

    link: str = "probit"
    target_kind = "binary"
    ridge_cause = "the latent scale (with the bias) grows without bound when the classes are nearly separable"
    bias: object = 0.0
    hyperparameters = ("bias",)
    unconstrained = ("bias",)

    def __post_init__(self):
        if self.link not in ("probit", "logit"):
            raise ValueError(f"Bernoulli: link must be 'probit' or 'logit', got {self.link!r}")
        check_hyperparameter("Bernoulli", "bias", self.bias, positive=False, ndim_max=0)

    def provides(self, capability):
        """As :meth:`Likelihood.provides`, and ``"polya_gamma"`` for the logit link (the
        Pólya-Gamma augmentation of sigma).

        Parameters
        ----------
        capability : str
        """
        if capability == "polya_gamma":
            return self.link == "logit"
        return super().provides(capability)

    @classmethod
    def variants(cls):
        """The probit and the logit link.

        Returns
        -------
        tuple of Bernoulli
        """
        return (cls("probit"), cls("logit"))

    def prepare_targets(self, y):
        """Labels as float +-1; raises unless y is coded 0/1, -1/+1 or bool.  Labels of one class
        only are accepted (as GPML and GPflow do): the fit then drives p towards that class, and a
        classifier fit no better than the constant model warns (``Model.fit``).

        Parameters
        ----------
        y : ndarray, shape (N,)
            Checked float targets.

        Returns
        -------
        ndarray, shape (N,)
            Labels -1.0 / +1.0.

        Raises
        ------
        ValueError
            If the targets are not valid for the likelihood.
        """
        values = set(np.unique(y).tolist())
        if not values <= {-1.0, 1.0} and not values <= {0.0, 1.0}:
            raise ValueError(f"Bernoulli: y must be binary, coded {{0, 1}}, {{-1, +1}} or bool; "
                             f"got values {sorted(values)[:6]}")
        return np.where(y > 0, 1.0, -1.0)

    def site_model(self):
        """The probit or logit site model, parameter (bias,)."""
        return SiteModel(sites.PROBIT_SITE if self.link == "probit" else sites.LOGIT_SITE, (float(self.bias),), ("bias",))

    def predictive(self, f_mean, f_var):
        """``p`` = p(y* = +1) = E[p(+1 | f*)], by :meth:`log_predictive`.

        Parameters
        ----------
        f_mean, f_var : ndarray, shape (n,)
        """
        return {"p": np.exp(self.log_predictive(f_mean, f_var, np.ones_like(f_mean)))}

    def log_predictive(self, f_mean, f_var, y):
        """log E[p(y* | f*)] for labels y in {-1, +1}, computed in log space (finite for
        confident predictions either way).

        Probit: log Phi(y (f_mean + bias) / sqrt(1 + f_var)) (Naish-Guzman & Holden 3.1).  Logit:
        log E[sigma(y (f* + bias))], Passerello eq. (C.2) with 100-point Gauss-Hermite quadrature
        up to latent sd 1 and, beyond, a composite Gauss-Legendre rule that resolves sigma's
        transition (:func:`gpdsl._jit.special.logit_normal_logp`; relative error < 1e-15 against
        50-digit quadrature for any mean and sd, where 100-point Gauss-Hermite alone is 1e-2 off at
        sd 20).

        Parameters
        ----------
        f_mean, f_var, y : ndarray, shape (n,)
        """
        shifted = y * (f_mean + float(self.bias))
        if self.link == "probit":
            return special.log_ndtr(shifted / np.sqrt(1.0 + f_var))
        nodes, weights = gauss_hermite(100)
        return logit_normal_logp_many(np.ascontiguousarray(shifted, dtype=float),
                                      np.sqrt(np.maximum(np.asarray(f_var, dtype=float), 0.0)),
                                      nodes, np.log(weights))

    def variational_expectations(self, y, mean, var):
        """E_q[log p(y_n | f_n)] under q(f_n) = N(mean_n, var_n), its derivatives in mean_n and
        var_n, and d/d bias: the base class's ``quadrature_points`` Gauss-Hermite rule, summed in
        one jitted pass (:func:`gpdsl._jit.bernoulli_expectations.bernoulli_expectations`) rather than over
        (rows, nodes) arrays; the same numbers to rounding (tests/test_likelihoods.py).  With the
        default 100 points, a row of small latent sd takes the smallest rule of
        :data:`RULE_LADDER` that gives those numbers for it (to 1e-12 relative, d/dvar 1e-10).

        Parameters
        ----------
        y : ndarray, shape (n,)
            Labels coded -1.0 / +1.0.
        mean, var : ndarray, shape (n,)

        Returns
        -------
        ve, d_mean, d_var : ndarray, shape (n,)
        param_grads : dict of str to ndarray
            ``{"bias": sum_n d ve_n / d mean_n}`` (the bias shifts f).
        """
        ve, d_mean, d_var = bernoulli_expectations(np.ascontiguousarray(y, dtype=float),
                                                   np.ascontiguousarray(mean, dtype=float),
                                                   np.ascontiguousarray(var, dtype=float), float(self.bias),
                                                   self.link == "probit", *_rule_ladder(self.link,
                                                                                        self.quadrature_points))
        return ve, d_mean, d_var, {"bias": np.array(np.sum(d_mean))}

    def log_density_bound(self, y):
        # p(y | f) -> 1 as y (f + bias) -> infinity.
        return 0.0

    def log_density(self, y, f):
        """log Phi(z) or log sigma(z), z = y (f + bias).

        Parameters
        ----------
        y, f : ndarray
        """
        z = y * (f + float(self.bias))
        return special.log_ndtr(z) if self.link == "probit" else -np.logaddexp(0.0, -z)

    def log_density_derivatives(self, y, f):
        """With z = y (f + bias): probit, r = phi(z) / Phi(z), d1 = y r, d2 = -r (z + r),
        d3 = y r ((z + r)(z + 2 r) - 1), below z = -2 from the Mills ratio's continued fraction
        free of the cancellation in z + r (:func:`gpdsl._jit.likelihoods.bernoulli.probit_log_cdf_slopes`;
        within 1e-13 relative of 50-digit values for z <= 0, tests/test_likelihood_limits.py);
        logit, p = sigma(z), d1 = y (1 - p), d2 = -p (1 - p), d3 = -y p (1 - p)(1 - 2 p).

        Parameters
        ----------
        y, f : ndarray
        """
        z = y * (f + float(self.bias))
        if self.link == "probit":
            shape = np.shape(z)
            d1, d2, d3 = sites.probit_log_cdf_slopes_many(np.ascontiguousarray(z, dtype=float).ravel())
            return special.log_ndtr(z), y * d1.reshape(shape), d2.reshape(shape), y * d3.reshape(shape)
        p, q = special.expit(z), special.expit(-z)
        return -np.logaddexp(0.0, -z), y * q, -p * q, -y * p * q * (q - p)

    def log_density_param_derivatives(self, y, f, derivatives=None):
        """The bias shifts f: its derivatives are d1, d2, d3 of :meth:`log_density_derivatives`.

        Parameters
        ----------
        y, f : ndarray
        derivatives : tuple of 4 ndarray, optional
        """
        if derivatives is None:
            derivatives = self.log_density_derivatives(y, f)
        return {"bias": derivatives[1:]}

    def sample(self, f, rng):
        """Labels -1.0 / +1.0 drawn with p(y = +1 | f).

        Parameters
        ----------
        f : ndarray
        rng : numpy.random.Generator
        """
        p = np.exp(self.log_density(np.ones_like(f), f))
        return np.where(rng.uniform(size=np.shape(f)) < p, 1.0, -1.0)

    def surrogate(self, X, y):
        """The Pólya-Gamma pseudo-regression at c = 0 (theta = 1/4, weighted targets
        y/2 - bias/4).

        Parameters
        ----------
        X : ndarray, shape (N, D)
        y : ndarray, shape (N,)
        """
        w = np.full(X.shape[0], 0.25)
        return w, 0.5 * y - w * float(self.bias)

    def constant_model_log_likelihood(self, y):
        """sum_n log p(y_n | f_n = 0): the classifier's limit as the kernel variance goes to 0.

        Parameters
        ----------
        y : ndarray, shape (N,)
        """
        return float(np.sum(self.log_density(y, np.zeros_like(y))))

    def describe(self):
        """``Bernoulli(probit)`` or ``Bernoulli(logit)``.

        Returns
        -------
        str
        """
        return f"Bernoulli({self.link})"


__all__ = ["Bernoulli"]
