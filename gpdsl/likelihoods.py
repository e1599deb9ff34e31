"""Observation models (``gd.likelihoods``).

Gaussian likelihoods expose their per-point noise variances ``lambda_n`` (shape (n,)) and the
contraction of an adjoint ``g = dF/dlambda`` with the derivatives of lambda with respect to
their hyperparameters; the inference methods need nothing else from them.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from ._jit.projections import POISSON_SQUARE, PROBIT
from ._jit.special import logit_normal_logp_many
from .checks import ValueEquality, check_nonnegative_int
from .parameters import check_hyperparameter, declared_value, entry


def _check_real_targets(owner, y):
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{owner}: y must be finite (no NaN or inf)")
    return y


class _GaussianNoise:
    def surrogate(self, values, prefix, X, y):
        """Weights 1/lambda_n and weighted targets y_n/lambda_n: the regression itself, which is
        what greedy inducing selection scores before the first fit."""
        w = 1.0 / self.noise(values, prefix, X)
        return w, w * y


@dataclass(frozen=True, eq=False)
class Gaussian(ValueEquality, _GaussianNoise):
    """Homoscedastic noise: y_n = f(x_n) + eps_n, eps_n ~ N(0, variance)."""

    variance: object = 1.0
    # fit(standardize=True) may shift and scale the targets: y -> a + b y maps this model to
    # itself with a constant mean and variances times b^2 (gpdsl.scaling).
    standardizes_targets = True

    def __post_init__(self):
        check_hyperparameter("Gaussian", "variance", self.variance, ndim_max=0)

    def entries(self, prefix, X, fixed_names=()):
        return [entry(f"{prefix}.variance", self.variance, fixed_names=fixed_names)]

    def prepare_targets(self, y):
        """Validated targets (unchanged)."""
        return _check_real_targets("Gaussian", y)

    def noise(self, values, prefix, X):
        return np.full(X.shape[0], float(values[f"{prefix}.variance"]))

    def noise_vjp(self, values, prefix, X, g):
        return {f"{prefix}.variance": np.array(np.sum(g))}

    def constant_model_log_likelihood(self, values, prefix, y):
        """log N(y | 0, s^2 I) at its best s^2 = mean(y^2): white noise (f = 0), where VFE and
        the exact GP go as the kernel variance goes to 0 and FITC as the inducing points stop
        explaining anything (``Model.fit`` flags fits no better than it; raw Boston housing:
        VFE noise 582, FITC kernel variance = noise = 292, mean(y^2) = 584)."""
        return -0.5 * y.size * (np.log(2.0 * np.pi * np.mean(y * y)) + 1.0)

    def describe(self):
        return "Gaussian"


@dataclass(frozen=True, eq=False)
class HeteroscedasticGaussian(ValueEquality, _GaussianNoise):
    """Per-point noise: y_n = f(x_n) + eps_n, eps_n ~ N(0, lambda_n)  (thesis ch. 3, eq. 3.1).

    Give exactly one of

    * ``variance``: the known variances lambda, an array of shape (N,) matching the training
      data (not learned); predictions of y at new inputs then need ``noise_variance=``;
    * ``degree``: a learnable log-polynomial noise model (thesis 3.1.3 fits "a polynomial
      likelihood with learnable parameters"; the log keeps lambda positive):
      ``log lambda(x) = c_0 + sum_{k=1..degree} sum_d c_{k,d} x_d^k``, coefficients ordered
      ``[c_0, c_{1,1..D}, c_{2,1..D}, ...]``; default start c_0 = log(0.1), the rest 0.
    """

    # The known variances and the noise model are in the targets' units: fit(standardize=True)
    # scales X only.
    standardizes_targets = False

    variance: object = None
    degree: int | None = None
    coefficients: object = None

    def __post_init__(self):
        if (self.variance is None) == (self.degree is None):
            raise TypeError("HeteroscedasticGaussian: give exactly one of variance= (known per-point "
                            "variances) or degree= (learnable polynomial noise model)")
        if self.variance is not None:
            check_hyperparameter("HeteroscedasticGaussian", "variance", self.variance)
        else:
            check_nonnegative_int("HeteroscedasticGaussian", "degree", self.degree)
            if self.coefficients is not None:
                check_hyperparameter("HeteroscedasticGaussian", "coefficients", self.coefficients,
                                     positive=False)

    @property
    def known(self):
        return self.variance is not None

    def features(self, X):
        """Polynomial design matrix (n, 1 + degree * D)."""
        cols = [np.ones((X.shape[0], 1))] + [X ** k for k in range(1, self.degree + 1)]
        return np.hstack(cols)

    def entries(self, prefix, X, fixed_names=()):
        n, dim = X.shape
        if self.known:
            var = declared_value(self.variance)
            if var.shape != (n,):
                raise ValueError(f"HeteroscedasticGaussian: variance must have shape ({n},) to match y, "
                                 f"got {var.shape}")
            return []
        size = 1 + self.degree * dim
        if self.coefficients is None:
            start = np.zeros(size)
            start[0] = np.log(0.1)
            return [entry(f"{prefix}.coefficients", start, positive=False, fixed_names=fixed_names)]
        coef = declared_value(self.coefficients)
        if coef.shape != (size,):
            raise ValueError(f"HeteroscedasticGaussian: coefficients must have shape ({size},) "
                             f"for degree {self.degree} and {dim} features, got {coef.shape}")
        return [entry(f"{prefix}.coefficients", self.coefficients, positive=False, fixed_names=fixed_names)]

    def prepare_targets(self, y):
        return _check_real_targets("HeteroscedasticGaussian", y)

    def noise(self, values, prefix, X):
        if self.known:
            return declared_value(self.variance)
        return np.exp(self.features(X) @ values[f"{prefix}.coefficients"])

    def noise_vjp(self, values, prefix, X, g):
        if self.known:
            return {}
        lam = self.noise(values, prefix, X)
        return {f"{prefix}.coefficients": self.features(X).T @ (g * lam)}

    def constant_model_log_likelihood(self, values, prefix, y):
        """None: per-point noise has no single constant model to compare a fit with."""
        return None

    def describe(self):
        return "HeteroscedasticGaussian(known)" if self.known else f"HeteroscedasticGaussian(degree={self.degree})"




@lru_cache(maxsize=1)
def _gauss_hermite_log():
    """The 100-point probabilists' Gauss-Hermite rule as (nodes, log(weights / sqrt(2 pi))),
    computed once (an eigenproblem of size 100) rather than at every prediction."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(100)
    return nodes, np.log(weights / np.sqrt(2.0 * np.pi))


@dataclass(frozen=True, eq=False)
class Bernoulli(ValueEquality):
    """Binary labels through a link: p(y | f) = Phi(y (f + bias)) for ``link="probit"``
    (Naish-Guzman & Holden eq. 4; the bias beta is a learnable, unconstrained hyperparameter)
    or sigma(y (f + bias)) for ``link="logit"``.  Labels may be {0, 1}, {-1, +1} or bool."""

    standardizes_targets = False     # labels: fit(standardize=True) scales X only

    link: str = "probit"
    bias: object = 0.0

    def __post_init__(self):
        if self.link not in ("probit", "logit"):
            raise ValueError(f"Bernoulli: link must be 'probit' or 'logit', got {self.link!r}")
        check_hyperparameter("Bernoulli", "bias", self.bias, positive=False, ndim_max=0)

    projection = PROBIT

    def entries(self, prefix, X, fixed_names=()):
        return [entry(f"{prefix}.bias", self.bias, positive=False, fixed_names=fixed_names)]

    def prepare_targets(self, y):
        """Labels as float +-1; raises unless y is coded 0/1, -1/+1 or bool.  Labels of one class
        only are accepted (as GPML and GPflow do): the fit then drives p towards that class, and a
        classifier fit no better than the constant model warns (``Model.fit``)."""
        values = set(np.unique(y).tolist())
        if not values <= {-1.0, 1.0} and not values <= {0.0, 1.0}:
            raise ValueError(f"Bernoulli: y must be binary, coded {{0, 1}}, {{-1, +1}} or bool; "
                             f"got values {sorted(values)[:6]}")
        return np.where(y > 0, 1.0, -1.0)

    def bias_value(self, values, prefix):
        return float(values[f"{prefix}.bias"])

    def predictive(self, values, prefix, f_mean, f_var):
        """p(y* = +1) = E[p(+1 | f*)] under N(f_mean, f_var), arrays (n,) -> {"p": (n,)}; see
        :meth:`log_predictive` for how it is computed."""
        return {"p": np.exp(self.log_predictive(values, prefix, f_mean, f_var, np.ones_like(f_mean)))}

    def log_predictive(self, values, prefix, f_mean, f_var, y):
        """log p(y* | x*) = log E[p(y* | f*)] under N(f_mean, f_var) for labels y in {-1, +1},
        arrays (n,), computed in log space (finite for confident predictions either way).

        Probit: log Phi(y (f_mean + bias) / sqrt(1 + f_var)) (Naish-Guzman & Holden 3.1).  Logit:
        log E[sigma(y (f* + bias))], Passerello eq. (C.2) with 100-point Gauss-Hermite quadrature
        up to latent sd 1 and, beyond, a composite Gauss-Legendre rule that resolves sigma's
        transition (:func:`gpdsl._jit.special.logit_normal_logp`; relative error < 1e-15 against
        50-digit quadrature for any mean and sd, where 100-point Gauss-Hermite alone is 1e-2 off at
        sd 20)."""
        shifted = y * (f_mean + self.bias_value(values, prefix))
        if self.link == "probit":
            return special.log_ndtr(shifted / np.sqrt(1.0 + f_var))
        return logit_normal_logp_many(np.ascontiguousarray(shifted, dtype=float),
                                      np.sqrt(np.maximum(np.asarray(f_var, dtype=float), 0.0)),
                                      *_gauss_hermite_log())

    def log_density(self, values, prefix, y, f):
        """log p(y | f) for labels y in {-1, +1}, elementwise."""
        if self.link == "probit":
            return special.log_ndtr(y * (f + self.bias_value(values, prefix)))
        return -np.logaddexp(0.0, -y * (f + self.bias_value(values, prefix)))

    def log_density_derivatives(self, values, prefix, y, f):
        """log p(y | f) and its first three derivatives in f, elementwise (n,) each: what the
        Laplace approximation needs (Rasmussen & Williams Algorithms 3.1 and 5.1; the same in
        the bias, which shifts f).  With z = y (f + bias): probit, r = phi(z) / Phi(z) from log
        space, d1 = y r, d2 = -r (z + r), d3 = y r ((z + r)(z + 2 r) - 1); logit, p = sigma(z),
        d1 = y (1 - p), d2 = -p (1 - p), d3 = -y p (1 - p)(1 - 2 p)."""
        z = y * (f + self.bias_value(values, prefix))
        if self.link == "probit":
            log_cdf = special.log_ndtr(z)
            r = np.exp(-0.5 * z * z - 0.5 * np.log(2.0 * np.pi) - log_cdf)
            return log_cdf, y * r, -r * (z + r), y * r * ((z + r) * (z + 2.0 * r) - 1.0)
        p, q = special.expit(z), special.expit(-z)
        return -np.logaddexp(0.0, -z), y * q, -p * q, -y * p * q * (q - p)

    def surrogate(self, values, prefix, X, y):
        """The Pólya-Gamma pseudo-regression at c = 0 (theta = 1/4, weighted targets
        y/2 - bias/4): what greedy inducing selection scores before the first fit."""
        w = np.full(X.shape[0], 0.25)
        return w, 0.5 * y - w * self.bias_value(values, prefix)

    def constant_model_log_likelihood(self, values, prefix, y):
        """sum_n log p(y_n | f_n = 0): the classifier's limit as the kernel variance goes to 0
        (``Model.fit`` flags fits no better than it)."""
        return float(np.sum(self.log_density(values, prefix, y, np.zeros_like(y))))

    def describe(self):
        return f"Bernoulli({self.link})"


@dataclass(frozen=True)
class Poisson:
    """Counts with rate f^2 (``link="square"``, QP paper Appendix C.2): p(y | f) = f^(2y) e^(-f^2) / y!."""

    standardizes_targets = False     # counts: fit(standardize=True) scales X only

    link: str = "square"

    def __post_init__(self):
        if self.link != "square":
            raise ValueError(f"Poisson: link must be 'square', got {self.link!r}")

    projection = POISSON_SQUARE

    def entries(self, prefix, X, fixed_names=()):
        return []

    def prepare_targets(self, y):
        if np.any(y < 0) or np.any(y != np.round(y)):
            raise ValueError("Poisson: y must hold non-negative integer counts")
        return y

    def bias_value(self, values, prefix):
        return 0.0

    def surrogate(self, values, prefix, X, y):
        """Unit weights and targets sqrt(y + 1/2), the positive branch f ~ sqrt(y) that EP's
        sites start from: what greedy inducing selection scores before the first fit."""
        return np.ones(X.shape[0]), np.sqrt(y + 0.5)

    @staticmethod
    def negative_binomial(f_mean, f_var):
        """Shape k and scale c of the Gamma law matched to g = f^2 (QP paper Appendix H, eq. 119)."""
        m2 = f_mean * f_mean
        spread = 2.0 * f_var * (2.0 * m2 + f_var)
        return (m2 + f_var) ** 2 / spread, spread / (m2 + f_var)

    def predictive(self, values, prefix, f_mean, f_var):
        """Mean and variance of the count under the negative-binomial predictive NB(k, c/(1+c)) (eq. 122)."""
        k, c = self.negative_binomial(f_mean, f_var)
        return {"y_mean": k * c, "y_var": k * c * (1.0 + c)}

    def log_predictive(self, f_mean, f_var, y):
        """log NB(y | k, c / (1 + c)) of eq. (122), elementwise."""
        k, c = self.negative_binomial(f_mean, f_var)
        return (special.gammaln(k + y) - special.gammaln(k) - special.gammaln(y + 1.0)
                + y * np.log(c) - (k + y) * np.log1p(c))

    def log_density(self, values, prefix, y, f):
        """log Poisson(y | f^2), elementwise."""
        return special.xlogy(2.0 * y, np.abs(f)) - f * f - special.gammaln(y + 1.0)

    def constant_model_log_likelihood(self, values, prefix, y):
        """None: f = 0 is a rate of 0, no model of counts to compare a fit with."""
        return None

    def describe(self):
        return f"Poisson({self.link})"


LIKELIHOODS = {cls.__name__: cls for cls in (Gaussian, HeteroscedasticGaussian, Bernoulli, Poisson)}

__all__ = ["Gaussian", "HeteroscedasticGaussian", "Bernoulli", "Poisson", "LIKELIHOODS"]
