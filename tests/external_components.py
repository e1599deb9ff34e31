"""Components defined outside gpdsl, as a user writes them: the conformance suite and
tests/test_external_components.py take them up by their registration alone.

* :class:`CloglogBernoulli`: binary labels with the complementary log-log link,
  p(y = +1 | f) = 1 - exp(-exp(f)); it implements only the documented minimum (its log
  density's derivatives; the kind and coding of its targets), so Laplace and, by the default
  quadrature, SVGP and VGP accept it, EP does not, and its predictions, log predictive density
  and draws are the base class's defaults.
* :class:`LogisticNoise`: real-valued targets with logistic noise, y = f + e, p(e) = sigma(e)
  sigma(-e); only its log density's derivatives: it predicts f alone (no ``conditional_moments``)
  and draws no y (``to_inference_data`` leaves out its posterior-predictive group).
* :class:`WhiteSquaredExponential`: a subclass of gpdsl's squared-exponential kernel with an
  added white-noise variance on the diagonal of identical inputs.
"""
from dataclasses import dataclass

import numpy as np

import gpdsl as gd
from gpdsl.components import Parameter


@dataclass(frozen=True, eq=False)
class CloglogBernoulli(gd.likelihoods.Likelihood):
    """Labels in {-1, +1} with p(y = +1 | f) = 1 - exp(-exp(f)); no hyperparameters."""

    target_kind = "binary"

    def prepare_targets(self, y):
        if not set(np.unique(y).tolist()) <= {-1.0, 0.0, 1.0}:
            raise ValueError("CloglogBernoulli: y must be binary")
        return np.where(y > 0, 1.0, -1.0)

    def log_density_derivatives(self, y, f):
        e = np.exp(f)
        up = np.log(-np.expm1(-e))                  # log p(+1 | f)
        r = e * np.exp(-e) / -np.expm1(-e)          # d up / df
        dr = r * (1.0 - e - r)
        ddr = dr * (1.0 - e - r) + r * (-e - dr)
        pos = y > 0
        return np.where(pos, up, -e), np.where(pos, r, -e), np.where(pos, dr, -e), np.where(pos, ddr, -e)


@dataclass(frozen=True, eq=False)
class LogisticNoise(gd.likelihoods.Likelihood):
    """y = f + e with logistic e: log p(y | f) = -log(4 cosh^2((y - f) / 2)); no hyperparameters."""

    def log_density_derivatives(self, y, f):
        half = 0.5 * (y - f)
        t = np.tanh(half)
        sech2 = 1.0 - t * t
        log_p = -2.0 * (np.abs(half) + np.log1p(np.exp(-2.0 * np.abs(half))))    # -2 log(2 cosh(half))
        return log_p, t, -0.5 * sech2, -0.5 * sech2 * t


@dataclass(frozen=True, eq=False)
class WhiteSquaredExponential(gd.kernels.SquaredExponential):
    """The squared exponential plus ``white`` on the diagonal of identical inputs."""

    white: object = 0.1
    hyperparameters = ("lengthscale", "variance", "white")

    def parameters(self, X):
        return super().parameters(X) + [Parameter("white", self.white)]

    @staticmethod
    def _same(X1, X2):
        return np.all(X1[:, None, :] == X2[None, :, :], axis=-1).astype(float)

    def gram(self, X1, X2):
        return super().gram(X1, X2) + float(self.white) * self._same(X1, X2)

    def diag(self, X):
        return super().diag(X) + float(self.white)

    def vjp(self, X1, X2, G, K=None):
        grads, d_X1 = super().vjp(X1, X2, G)
        return {**grads, "white": np.array(np.sum(G * self._same(X1, X2)))}, d_X1

    def diag_vjp(self, X, g):
        return {**super().diag_vjp(X, g), "white": np.array(np.sum(g))}

    @classmethod
    def variants(cls):
        return (cls(lengthscale=0.7, variance=1.2, white=0.05),)
