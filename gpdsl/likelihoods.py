"""Observation models (``gd.likelihoods``).

Gaussian likelihoods expose their per-point noise variances ``lambda_n`` (shape (n,)) and the
contraction of an adjoint ``g = dF/dlambda`` with the derivatives of lambda with respect to
their hyperparameters; the inference methods need nothing else from them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .parameters import check_hyperparameter, declared_value, entry


def _check_real_targets(owner, y):
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{owner}: y must be finite (no NaN or inf)")


@dataclass(frozen=True)
class Gaussian:
    """Homoscedastic noise: y_n = f(x_n) + eps_n, eps_n ~ N(0, variance)."""

    variance: object = 1.0

    def __post_init__(self):
        check_hyperparameter("Gaussian", "variance", self.variance, ndim_max=0)

    def entries(self, prefix, X, fixed_names=()):
        return [entry(f"{prefix}.variance", self.variance, fixed_names=fixed_names)]

    def validate_targets(self, y):
        _check_real_targets("Gaussian", y)

    def noise(self, values, prefix, X):
        return np.full(X.shape[0], float(values[f"{prefix}.variance"]))

    def noise_vjp(self, values, prefix, X, g):
        return {f"{prefix}.variance": np.array(np.sum(g))}

    def describe(self):
        return "Gaussian"


@dataclass(frozen=True)
class HeteroscedasticGaussian:
    """Per-point noise: y_n = f(x_n) + eps_n, eps_n ~ N(0, lambda_n)  (thesis ch. 3, eq. 3.1).

    Give exactly one of

    * ``variance``: the known variances lambda, an array of shape (N,) matching the training
      data (not learned); predictions of y at new inputs then need ``noise_variance=``;
    * ``degree``: a learnable log-polynomial noise model (thesis 3.1.3 fits "a polynomial
      likelihood with learnable parameters"; the log keeps lambda positive):
      ``log lambda(x) = c_0 + sum_{k=1..degree} sum_d c_{k,d} x_d^k``, coefficients ordered
      ``[c_0, c_{1,1..D}, c_{2,1..D}, ...]``; default start c_0 = log(0.1), the rest 0.
    """

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
            if not isinstance(self.degree, (int, np.integer)) or self.degree < 0:
                raise ValueError(f"HeteroscedasticGaussian: degree must be a non-negative integer, "
                                 f"got {self.degree!r}")
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

    def validate_targets(self, y):
        _check_real_targets("HeteroscedasticGaussian", y)

    def noise(self, values, prefix, X):
        if self.known:
            return declared_value(self.variance)
        return np.exp(self.features(X) @ values[f"{prefix}.coefficients"])

    def noise_vjp(self, values, prefix, X, g):
        if self.known:
            return {}
        lam = self.noise(values, prefix, X)
        return {f"{prefix}.coefficients": self.features(X).T @ (g * lam)}

    def describe(self):
        return "HeteroscedasticGaussian(known)" if self.known else f"HeteroscedasticGaussian(degree={self.degree})"


LIKELIHOODS = {cls.__name__: cls for cls in (Gaussian, HeteroscedasticGaussian)}

__all__ = ["Gaussian", "HeteroscedasticGaussian", "LIKELIHOODS"]
