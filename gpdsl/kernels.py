"""Prior covariance functions (``gd.kernels``).

Kernels are frozen dataclasses validated on construction.  Distances go through a BLAS cross
term, profile values through NumPy's vectorised exp, and the fused elementwise sweep of the
gradient through the jitted :func:`gpdsl._jit.covariance.slope_adjoint`.  Hyperparameter values
come in as a dict ``name -> ndarray`` keyed ``"<prefix>.<field>"``.

A scalar ``lengthscale`` is isotropic (one hyperparameter); an array of length D is ARD (one
per input feature).  ``variance`` is the signal variance sf^2.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ._jit import covariance as _cov
from .checks import ValueEquality
from .chunks import add_partial
from .parameters import check_hyperparameter, declared_value, entry


class Kernel:
    """Interface shared by all kernels.

    * ``entries(prefix, dim, fixed_names)`` -> list of :class:`gpdsl.parameters.Entry`
    * ``gram(values, prefix, X1, X2)`` -> (n1, n2) covariance
    * ``diag(values, prefix, X)`` -> (n,) prior variances
    * ``vjp(values, prefix, X1, X2, G, K=None)`` -> (dict of d/d natural values, d/dX1 (n1, D)),
      the contraction sum_ij G_ij dK_ij/d(.); ``K`` optionally passes gram(X1, X2)
    * ``diag_vjp(values, prefix, X, g)`` -> dict, the contraction sum_i g_i d diag_i/d(.)
    """

    def __add__(self, other):
        return Sum((self, other))

    def __mul__(self, other):
        return Product((self, other))


@dataclass(frozen=True, eq=False)
class Stationary(ValueEquality, Kernel):
    lengthscale: object = 1.0
    variance: object = 1.0
    profile: ClassVar[int] = -1

    def __post_init__(self):
        name = type(self).__name__
        check_hyperparameter(name, "lengthscale", self.lengthscale)
        check_hyperparameter(name, "variance", self.variance)
        if declared_value(self.variance).ndim != 0:
            raise ValueError(f"{name}: variance must be a scalar, got shape "
                             f"{declared_value(self.variance).shape}")

    @property
    def ard(self):
        return declared_value(self.lengthscale).ndim == 1

    def entries(self, prefix, dim, fixed_names=()):
        ls = declared_value(self.lengthscale)
        if self.ard and ls.shape[0] != dim:
            raise ValueError(f"{type(self).__name__}: lengthscale has {ls.shape[0]} entries but X has "
                             f"{dim} features (give a scalar for an isotropic kernel)")
        return [entry(f"{prefix}.lengthscale", self.lengthscale, shape=(dim,) if self.ard else None,
                      fixed_names=fixed_names),
                entry(f"{prefix}.variance", self.variance, fixed_names=fixed_names)]

    def _unpack(self, values, prefix, dim):
        ls = np.asarray(values[f"{prefix}.lengthscale"], dtype=float)
        return np.broadcast_to(ls, (dim,)).astype(float), float(values[f"{prefix}.variance"])

    def _scaled_sqdist(self, X1, X2, ls):
        """r2 (n1, n2) by the BLAS cross term |a|^2 - 2 a.b + |b|^2 on inputs centred at the
        mean of X1 (centring keeps the cancellation error at eps * spread, not eps * |x|^2)."""
        centre = X1.mean(axis=0)
        A = (X1 - centre) / ls
        B = (X2 - centre) / ls
        r2 = A @ B.T
        r2 *= -2.0
        r2 += np.einsum("ij,ij->i", A, A)[:, None]
        r2 += np.einsum("ij,ij->i", B, B)[None, :]
        return np.maximum(r2, 0.0, out=r2)

    def _profile(self, r2):
        """Unit-variance profile p(r2) with NumPy's vectorised exp (a new array)."""
        if self.profile == _cov.SQUARED_EXPONENTIAL:
            p = np.multiply(r2, -0.5)
            return np.exp(p, out=p)
        root = np.sqrt(3.0) if self.profile == _cov.MATERN32 else np.sqrt(5.0)
        r = np.sqrt(r2) * root                      # sqrt(3) r or sqrt(5) r
        p = np.exp(-r)
        poly = 1.0 + r if self.profile == _cov.MATERN32 else 1.0 + r + r * r / 3.0
        return np.multiply(poly, p, out=p)

    def gram(self, values, prefix, X1, X2):
        ls, var = self._unpack(values, prefix, X1.shape[1])
        K = self._profile(self._scaled_sqdist(X1, X2, ls))
        K *= var
        return K

    def diag(self, values, prefix, X):
        return np.full(X.shape[0], float(values[f"{prefix}.variance"]))

    def vjp(self, values, prefix, X1, X2, G, K=None):
        """``K`` may pass gram(X1, X2) when the caller already has it (saves the exp)."""
        ls, var = self._unpack(values, prefix, X1.shape[1])
        if K is not None and self.profile == _cov.SQUARED_EXPONENTIAL:
            r2 = K      # the SE slope is -K/2: slope_adjoint never reads r2, skip the cross term
        else:
            r2 = self._scaled_sqdist(X1, X2, ls)
            if K is None:
                K = self._profile(r2)
                K *= var
        S, d_var = _cov.slope_adjoint(r2, K, np.ascontiguousarray(G), var, self.profile)
        # dr2_ij/dx1_id = 2 (x1_id - x2_jd) / ls_d^2 and dr2_ij/dls_d = -2 (x1_id - x2_jd)^2 / ls_d^3:
        # contract S with them through row/column sums and one thin product S @ X2.
        centre = X1.mean(axis=0)
        A1, A2 = X1 - centre, X2 - centre
        row, col = S.sum(axis=1), S.sum(axis=0)
        SA2 = S @ A2
        inv_ls = 1.0 / ls          # (1/ls)^2 underflows quietly where ls * ls would overflow
        inv_ls2 = inv_ls * inv_ls
        d_X1 = 2.0 * (A1 * row[:, None] - SA2) * inv_ls2
        d_ls = -2.0 * inv_ls2 * inv_ls * (row @ (A1 * A1) - 2.0 * np.einsum("ij,ij->j", A1, SA2) + col @ (A2 * A2))
        if not self.ard:
            d_ls = np.array(d_ls.sum())
        return {f"{prefix}.lengthscale": d_ls, f"{prefix}.variance": np.array(d_var)}, d_X1

    def diag_vjp(self, values, prefix, X, g):
        return {f"{prefix}.variance": np.array(np.sum(g))}

    def describe(self):
        return f"{type(self).__name__}({'ARD' if self.ard else 'isotropic'})"


@dataclass(frozen=True, eq=False)
class SquaredExponential(Stationary):
    """k(x, z) = variance * exp(-r^2 / 2), r^2 = sum_d (x_d - z_d)^2 / lengthscale_d^2."""

    profile: ClassVar[int] = _cov.SQUARED_EXPONENTIAL


@dataclass(frozen=True, eq=False)
class Matern32(Stationary):
    """k = variance * (1 + sqrt(3) r) exp(-sqrt(3) r)."""

    profile: ClassVar[int] = _cov.MATERN32


@dataclass(frozen=True, eq=False)
class Matern52(Stationary):
    """k = variance * (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)."""

    profile: ClassVar[int] = _cov.MATERN52


@dataclass(frozen=True)
class _Composite(Kernel):
    kernels: tuple

    def __post_init__(self):
        if len(self.kernels) < 2 or not all(isinstance(k, Kernel) for k in self.kernels):
            raise TypeError(f"{type(self).__name__}: kernels must be a tuple of at least two kernels, "
                            f"got {self.kernels!r}")

    def _parts(self, prefix):
        return [(k, f"{prefix}.{i}") for i, k in enumerate(self.kernels)]

    def entries(self, prefix, dim, fixed_names=()):
        return [e for k, p in self._parts(prefix) for e in k.entries(p, dim, fixed_names)]

    def describe(self):
        return f"{type(self).__name__}({', '.join(k.describe() for k in self.kernels)})"


@dataclass(frozen=True)
class Sum(_Composite):
    """k = k_0 + k_1 + ...; hyperparameters are named ``<prefix>.<i>.<field>``."""

    def gram(self, values, prefix, X1, X2):
        return sum(k.gram(values, p, X1, X2) for k, p in self._parts(prefix))

    def diag(self, values, prefix, X):
        return sum(k.diag(values, p, X) for k, p in self._parts(prefix))

    def vjp(self, values, prefix, X1, X2, G, K=None):
        grads, d_X1 = {}, np.zeros(X1.shape)
        for k, p in self._parts(prefix):
            g, dx = k.vjp(values, p, X1, X2, G)
            grads = add_partial(grads, g)
            d_X1 += dx
        return grads, d_X1

    def diag_vjp(self, values, prefix, X, g):
        grads = {}
        for k, p in self._parts(prefix):
            grads = add_partial(grads, k.diag_vjp(values, p, X, g))
        return grads


@dataclass(frozen=True)
class Product(_Composite):
    """k = k_0 * k_1 * ... (elementwise); the VJP of each factor sees G times the others."""

    def gram(self, values, prefix, X1, X2):
        return np.prod([k.gram(values, p, X1, X2) for k, p in self._parts(prefix)], axis=0)

    def diag(self, values, prefix, X):
        return np.prod([k.diag(values, p, X) for k, p in self._parts(prefix)], axis=0)

    def vjp(self, values, prefix, X1, X2, G, K=None):
        parts = self._parts(prefix)
        mats = [k.gram(values, p, X1, X2) for k, p in parts]
        grads, d_X1 = {}, np.zeros(X1.shape)
        for i, (k, p) in enumerate(parts):
            others = np.prod([m for j, m in enumerate(mats) if j != i], axis=0)
            g, dx = k.vjp(values, p, X1, X2, G * others)
            grads = add_partial(grads, g)
            d_X1 += dx
        return grads, d_X1

    def diag_vjp(self, values, prefix, X, g):
        parts = self._parts(prefix)
        diags = [k.diag(values, p, X) for k, p in parts]
        grads = {}
        for i, (k, p) in enumerate(parts):
            others = np.prod([d for j, d in enumerate(diags) if j != i], axis=0)
            grads = add_partial(grads, k.diag_vjp(values, p, X, g * others))
        return grads


# Explicit registry used by model files (TOML) and by `gpdsl.load`.
KERNELS = {cls.__name__: cls for cls in (SquaredExponential, Matern32, Matern52)}

__all__ = ["Kernel", "SquaredExponential", "Matern32", "Matern52", "Sum", "Product", "KERNELS"]
