"""Stationary kernels of the length-scaled distance r: squared exponential, Matérn 1/2, 3/2,
5/2 and rational quadratic.

Distances go through a BLAS cross term, profile values through NumPy's vectorised exp, and the
fused elementwise sweep of the gradient through the jitted
:func:`gpdsl._jit.covariance.slope_adjoint`.  Matérn 1/2, whose profile has an unbounded slope
at r = 0, forms its distances and their contraction pair by pair instead
(:func:`gpdsl._jit.covariance.scaled_sqdist` and ``distance_adjoint``), as every profile does
where a length-scale is so far below the inputs' spread that the cross term's rounding would
show (:data:`EXPANSION_MAX_SCALED_NORM2`).  A scalar
``lengthscale`` is isotropic (one hyperparameter); an array of length D is ARD (one per input
feature).  ``variance`` is the signal variance sf^2.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .._jit import covariance as _cov
from ..components import per_feature
from ..parameters import check_hyperparameter, declared_value
from .base import ConstantDiagonal, Parameter

# Largest squared norm of a length-scaled, centred input for which distances are formed by the
# BLAS expansion |a|^2 - 2 a.b + |b|^2: its rounding error, ~eps (|a|^2 + |b|^2), is then at most
# ~1e-9 in r^2 (and in log K), and in the length-scale's gradient ~1e-9 of the adjoint's mass.
# Beyond it (a length-scale ~1,000 times below the inputs' spread) both are formed pair by pair,
# each from its own difference, exact at a coincident pair: with a length-scale of 2e-7 on inputs
# spread over 6, K was exactly diagonal yet the expansion's rounding put a gradient of 0.22 on
# log(lengthscale), where the true one is 0 (fuzz case poisson_vgp 50024).
EXPANSION_MAX_SCALED_NORM2 = 1e6

_PARAMETERS_DOC = """
    Parameters
    ----------
    lengthscale : float, array of shape (D,), Fixed or prior, default 1.0
        Positive length-scale: a scalar is isotropic, an array of length D is ARD (one per
        input feature).
    variance : float, Fixed or prior, default 1.0
        Positive signal variance sf^2 (a scalar).
    active_dims, name : keyword only, optional
        The columns the kernel reads and its label inside a sum or product, as for every
        kernel (:class:`gpdsl.kernels.Kernel`).

    Raises
    ------
    TypeError
        If a field is not a number, an array, ``Fixed(...)`` or a prior.
    ValueError
        If a field is not finite and positive, ``lengthscale`` has more than one dimension or
        ``variance`` is not a scalar.
"""


@dataclass(frozen=True, eq=False)
class Stationary(ConstantDiagonal, abstract=True):
    """Base of the kernels of the length-scaled distance r; a subclass sets ``profile``."""

    lengthscale: object = 1.0
    variance: object = 1.0
    hyperparameters = ("lengthscale", "variance")
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
        """bool: True when ``lengthscale`` is an array (one length-scale per input feature)."""
        return np.ndim(declared_value(self.lengthscale)) == 1

    def parameters(self, X):
        """The length-scale (shape (D,) if ARD, dims ``("feature",)``) and the variance (scalar).

        Parameters
        ----------
        X : ndarray, shape (N, D)

        Returns
        -------
        list of Parameter

        Raises
        ------
        ValueError
            If an ARD length-scale has a number of entries other than D.
        """
        return [per_feature(type(self).__name__, "lengthscale", self.lengthscale, X), Parameter("variance", self.variance)]

    @classmethod
    def variants(cls):
        return (cls(lengthscale=0.8, variance=1.3), cls(lengthscale=np.array([0.6, 1.4]), variance=0.9))

    def _inv_ls(self, dim):
        """1 / lengthscale as a (dim,) array (an isotropic length-scale repeated)."""
        return np.array(1.0 / np.broadcast_to(np.asarray(self.lengthscale, dtype=float), (dim,)))

    def _scaled_sqdist(self, X1, X2, scale=1.0, out=None):
        """r2 (n1, n2) = |a|^2 - 2 a.b + |b|^2 on inputs centred at the mean of X1 (centring
        keeps the cancellation error at eps * spread, not eps * |x|^2), as one BLAS product of
        the rows [-2 a, |a|^2, 1] and [b, 1, |b|^2]: the n1 x n2 result is written once, where
        the cross term followed by three elementwise passes over it (scale, add each norm) took
        3.6 of a (128 x 16,384) block's 9.0 ms.  With ``scale``, scale * r2 (clamped where r2
        would be negative) from the same product, the factor folded into its rows: for a power
        of two (the squared exponential's -1/2) the result is the same to the last bit as r2 then
        scaled, with no pass of its own.  Where a scaled input's squared norm exceeds
        :data:`EXPANSION_MAX_SCALED_NORM2` the expansion's rounding would matter, and r2 is formed
        pair by pair instead (:func:`gpdsl._jit.covariance.scaled_sqdist`).  ``out`` (n1, n2), where
        given, receives the expansion's result (the caller has checked that it applies)."""
        centre = X1.mean(axis=0)
        D = X1.shape[1]
        left, right = np.empty((X1.shape[0], D + 2)), np.empty((X2.shape[0], D + 2))
        for rows, X in ((left, X1), (right, X2)):
            np.subtract(X, centre, out=rows[:, :D])
            rows[:, :D] /= self.lengthscale
        left[:, D], left[:, D + 1] = scale * np.einsum("ij,ij->i", left[:, :D], left[:, :D]), 1.0
        right[:, D], right[:, D + 1] = 1.0, scale * np.einsum("ij,ij->i", right[:, :D], right[:, :D])
        if max(np.max(np.abs(left[:, D]), initial=0.0), np.max(np.abs(right[:, D + 1]), initial=0.0)) > \
                abs(scale) * EXPANSION_MAX_SCALED_NORM2:
            r2 = _cov.scaled_sqdist(np.ascontiguousarray(X1, dtype=float), np.ascontiguousarray(X2, dtype=float),
                                    self._inv_ls(D))
            return np.multiply(r2, scale, out=r2) if scale != 1.0 else r2
        left[:, :D] *= -2.0 * scale
        r2 = np.matmul(left, right.T, out=out)
        return (np.maximum if scale > 0.0 else np.minimum)(r2, 0.0, out=r2)

    def _profile(self, r2, out=None):
        """Unit-variance profile p(r2) with NumPy's vectorised exp: a new array, or ``out``
        (which may be ``r2`` itself)."""
        if self.profile == _cov.SQUARED_EXPONENTIAL:
            p = np.multiply(r2, -0.5, out=out)
            return np.exp(p, out=p)
        if self.profile == _cov.EXPONENTIAL:
            p = np.sqrt(r2, out=out)
            np.negative(p, out=p)
            return np.exp(p, out=p)
        if self.profile == _cov.RATIONAL_QUADRATIC:      # (1 + r2 / (2 alpha))^(-alpha)
            alpha = float(self.alpha)
            p = np.log1p(np.multiply(r2, 0.5 / alpha, out=out), out=out)
            p *= -alpha
            return np.exp(p, out=p)
        root = np.sqrt(3.0) if self.profile == _cov.MATERN32 else np.sqrt(5.0)
        r = np.sqrt(r2) * root                      # sqrt(3) r or sqrt(5) r
        p = np.exp(-r)
        poly = 1.0 + r if self.profile == _cov.MATERN32 else 1.0 + r + r * r / 3.0
        return np.multiply(poly, p, out=p if out is None else out)

    def gram(self, X1, X2):
        """``variance * p(r^2)`` with ``r^2 = sum_d (x1_d - x2_d)^2 / lengthscale_d^2`` and the
        class's unit-variance profile ``p`` (Rasmussen & Williams (2006), eqs. 4.9 and 4.17).

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        if self.profile == _cov.SQUARED_EXPONENTIAL:
            # -r2 / 2 from the product itself, bit for bit: one pass less over the result
            K = self._scaled_sqdist(X1, X2, -0.5)
            np.exp(K, out=K)
        else:
            r2 = self._scaled_sqdist(X1, X2)
            K = self._profile(r2, out=r2)      # r2 is this call's own temporary
        K *= float(self.variance)
        return K

    def vjp(self, X1, X2, G, K=None):
        """d/d lengthscale (shape (D,) if ARD, else scalar), d/d variance and d/d X1 of
        sum_ij G_ij K_ij, through the jitted slope sweep.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)
        G : ndarray, shape (n1, n2)
        K : ndarray, shape (n1, n2), optional

        Returns
        -------
        grads : dict of str to ndarray
        d_X1 : ndarray, shape (n1, D)
        """
        var = float(self.variance)
        if K is not None and self.profile == _cov.SQUARED_EXPONENTIAL:
            r2 = K      # the SE slope is -K/2: slope_adjoint never reads r2, skip the cross term
        else:
            r2 = self._scaled_sqdist(X1, X2)
            if K is None:
                K = self._profile(r2)
                K *= var
        S, row, col, grads = self._slope(r2, K, G)
        d_X1, d_ls = self._distance_adjoint(X1, X2, S, row, col)
        if np.ndim(self.lengthscale) == 0:
            d_ls = np.array(d_ls.sum())
        return {"lengthscale": d_ls, **grads}, d_X1

    def _slope(self, r2, K, G):
        """``(S, row, col, grads)``: S = G * dK/dr2 (n1, n2), its row (n1,) and column (n2,) sums,
        and the gradients in the hyperparameters other than the length-scales (``variance``, and
        ``alpha`` where the kernel has one)."""
        var = float(self.variance)
        alpha = float(self.alpha) if "alpha" in self.hyperparameters else 1.0
        S, row, col, d_var, d_alpha = _cov.slope_adjoint(r2, K, np.ascontiguousarray(G, dtype=float), var,
                                                         self.profile, alpha)
        grads = {"variance": np.array(d_var)}
        if "alpha" in self.hyperparameters:
            grads["alpha"] = np.array(d_alpha)
        return S, row, col, grads

    def _distance_adjoint(self, X1, X2, S, row, col):
        """``(d_X1 (n1, D), d_ls (D,))``: S, the adjoint of r2, contracted with dr2/dX1 and dr2/dls
        (``row`` and ``col`` its row and column sums, from :meth:`_slope`)."""
        # dr2_ij/dx1_id = 2 (x1_id - x2_jd) / ls_d^2 and dr2_ij/dls_d = -2 (x1_id - x2_jd)^2 / ls_d^3:
        # contract S with them through row/column sums and one thin product S @ X2.
        centre = X1.mean(axis=0)
        A1, A2 = X1 - centre, X2 - centre
        inv_ls = self._inv_ls(X1.shape[1])      # (1/ls)^2 underflows quietly
        inv_ls2 = inv_ls * inv_ls
        if max(np.max((A1 * A1) @ inv_ls2, initial=0.0), np.max((A2 * A2) @ inv_ls2, initial=0.0)) > \
                EXPANSION_MAX_SCALED_NORM2:
            return _cov.distance_adjoint(np.ascontiguousarray(X1, dtype=float), np.ascontiguousarray(X2, dtype=float),
                                         inv_ls, np.ascontiguousarray(S, dtype=float))
        return self.distance_vjp(A1, A2, row, col, S @ A2)

    def distance_vjp(self, A1, A2, row, col, SA2):
        """``(d_X1 (n1, D), d_ls (D,))`` from an adjoint S (n1, n2) of r2 given by its row sums,
        column sums and ``SA2 = S @ A2`` (through the expanded distances: the caller has checked
        :data:`EXPANSION_MAX_SCALED_NORM2`).

        Parameters
        ----------
        A1 : ndarray, shape (n1, D)
            X1 less a centre c (any c: r2 does not depend on it).
        A2 : ndarray, shape (n2, D)
            X2 less the same c.
        row : ndarray, shape (n1,)
        col : ndarray, shape (n2,)
        SA2 : ndarray, shape (n1, D)

        Returns
        -------
        d_X1 : ndarray, shape (n1, D)
        d_ls : ndarray, shape (D,)
            Per input dimension (summed by the caller for an isotropic length-scale).
        """
        inv_ls = self._inv_ls(A1.shape[1])
        inv_ls2 = inv_ls * inv_ls
        d_X1 = 2.0 * (A1 * row[:, None] - SA2) * inv_ls2
        d_ls = -2.0 * inv_ls2 * inv_ls * (row @ (A1 * A1) - 2.0 * np.einsum("ij,ij->j", A1, SA2) + col @ (A2 * A2))
        return d_X1, d_ls

    def slope_fields(self, X1, X2, K, T):
        """K = k(X1, X2) and its slope T = dK/dr2 written into ``K`` and ``T``, for a VJP that
        contracts its adjoint with them elsewhere (an LMC's, :func:`gpdsl.kernels.coregion.coregion_vjp`);
        returns the centre for :meth:`distance_vjp`, or None (K and T unwritten) where this
        kernel's VJP does not go through the expanded distances with these fields alone: the
        exponential and rational quadratic profiles (a slope unbounded at r = 0; alpha's own
        field), a kernel reading only some columns (``active_dims``), a subclass with its own
        ``gram``, ``vjp`` or hyperparameters (these fields are Stationary's covariance, whose
        gradient the subclass may no longer have), or a scaled input beyond
        :data:`EXPANSION_MAX_SCALED_NORM2`.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)
        K, T : ndarray, shape (n1, n2)
            C-ordered, overwritten.

        Returns
        -------
        ndarray of shape (D,), or None
            X1's mean.
        """
        cls = type(self)
        if (self.active_dims is not None or self.profile not in (_cov.SQUARED_EXPONENTIAL, _cov.MATERN32,
                                                                 _cov.MATERN52)
                or cls.gram is not Stationary.gram or cls.vjp is not Stationary.vjp
                or cls.hyperparameters != Stationary.hyperparameters):
            return None
        centre = X1.mean(axis=0)
        inv_ls2 = self._inv_ls(X1.shape[1]) ** 2
        if max(np.max(((X1 - centre) ** 2) @ inv_ls2, initial=0.0),
               np.max(((X2 - centre) ** 2) @ inv_ls2, initial=0.0)) > EXPANSION_MAX_SCALED_NORM2:
            return None
        if self.profile == _cov.SQUARED_EXPONENTIAL:
            # As gram; dp/dr2 = -p/2.
            np.exp(self._scaled_sqdist(X1, X2, -0.5, out=K), out=K)
            K *= float(self.variance)
            np.multiply(K, -0.5, out=T)
        else:
            # One jitted sweep from r2 (in T): the profile's NumPy form and the slope from it took
            # several passes with temporaries (all parts' fields 1.37 of a 9.4 s LMC evaluation at
            # 10^5 rows; with the sweep 0.7, benchmarks/HISTORY.md, issue 48).
            _cov.profile_and_slope(self._scaled_sqdist(X1, X2, out=T), float(self.variance), self.profile, K, T)
        return centre

    def describe(self):
        """E.g. ``"SquaredExponential(ARD)"`` or ``"Matern32(isotropic)"``.

        Returns
        -------
        str
        """
        return f"{type(self).__name__}({'ARD' if self.ard else 'isotropic'})"


@dataclass(frozen=True, eq=False)
class SquaredExponential(Stationary):
    """Squared-exponential kernel k(x, z) = variance * exp(-r^2 / 2), r^2 = sum_d (x_d - z_d)^2 /
    lengthscale_d^2 (Rasmussen & Williams (2006), eq. 4.9, with ARD length-scales as in their
    eq. 5.2).
    """

    profile: ClassVar[int] = _cov.SQUARED_EXPONENTIAL


@dataclass(frozen=True, eq=False)
class Matern12(Stationary):
    """Matérn 1/2 (exponential, Ornstein-Uhlenbeck) kernel k = variance * exp(-r), r the
    length-scaled distance of :class:`SquaredExponential` (Rasmussen & Williams (2006), eq. 4.18;
    GPML's ``covMaterniso`` with d = 1).

    Its slope dp/dr2 = -exp(-r) / (2 r) is unbounded at r = 0, so distances and their contraction
    are formed pair by pair (a coincident pair's r is exactly 0, not the square root of a
    rounding error), and a coincident pair contributes 0 to every gradient: its limit for the
    length-scales and the symmetric subgradient for the inputs.
    """

    profile: ClassVar[int] = _cov.EXPONENTIAL

    def _scaled_sqdist(self, X1, X2):
        return _cov.scaled_sqdist(np.ascontiguousarray(X1, dtype=float), np.ascontiguousarray(X2, dtype=float),
                                  self._inv_ls(X1.shape[1]))

    def _distance_adjoint(self, X1, X2, S, row, col):
        # pair by pair: the row and column sums are not used
        return _cov.distance_adjoint(np.ascontiguousarray(X1, dtype=float), np.ascontiguousarray(X2, dtype=float),
                                     self._inv_ls(X1.shape[1]), S)


@dataclass(frozen=True, eq=False)
class Matern32(Stationary):
    """Matérn 3/2 kernel k = variance * (1 + sqrt(3) r) exp(-sqrt(3) r), r the length-scaled
    distance of :class:`SquaredExponential` (Rasmussen & Williams (2006), eq. 4.17, nu = 3/2).
    """

    profile: ClassVar[int] = _cov.MATERN32


@dataclass(frozen=True, eq=False)
class Matern52(Stationary):
    """Matérn 5/2 kernel k = variance * (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r), r the
    length-scaled distance of :class:`SquaredExponential` (Rasmussen & Williams (2006), eq. 4.17,
    nu = 5/2).
    """

    profile: ClassVar[int] = _cov.MATERN52


@dataclass(frozen=True, eq=False)
class RationalQuadratic(Stationary):
    """Rational quadratic kernel k = variance * (1 + r^2 / (2 alpha))^(-alpha), r the length-scaled
    distance of :class:`SquaredExponential`: a scale mixture of squared exponentials, which it
    approaches as alpha -> infinity (Rasmussen & Williams (2006), eq. 4.19; GPML's ``covRQiso``
    and ``covRQard``).

    Parameters
    ----------
    lengthscale : float, array of shape (D,), Fixed or prior, default 1.0
        Positive length-scale: a scalar is isotropic, an array of length D is ARD (one per
        input feature).
    variance : float, Fixed or prior, default 1.0
        Positive signal variance sf^2 (a scalar).
    alpha : float, Fixed or prior, default 1.0
        Positive shape parameter (a scalar): the mixture's Gamma shape.
    active_dims, name : keyword only, optional
        The columns the kernel reads and its label inside a sum or product, as for every
        kernel (:class:`gpdsl.kernels.Kernel`).

    Raises
    ------
    TypeError
        If a field is not a number, an array, ``Fixed(...)`` or a prior.
    ValueError
        If a field is not finite and positive, ``lengthscale`` has more than one dimension or
        ``variance`` or ``alpha`` is not a scalar.
    """

    alpha: object = 1.0
    hyperparameters = ("lengthscale", "variance", "alpha")
    profile: ClassVar[int] = _cov.RATIONAL_QUADRATIC

    def __post_init__(self):
        super().__post_init__()
        check_hyperparameter(type(self).__name__, "alpha", self.alpha)
        if declared_value(self.alpha).ndim != 0:
            raise ValueError(f"{type(self).__name__}: alpha must be a scalar, got shape "
                             f"{declared_value(self.alpha).shape}")

    def parameters(self, X):
        """The length-scale (shape (D,) if ARD, dims ``("feature",)``), the variance and alpha (scalars).

        Parameters
        ----------
        X : ndarray, shape (N, D)

        Returns
        -------
        list of Parameter

        Raises
        ------
        ValueError
            If an ARD length-scale has a number of entries other than D.
        """
        return super().parameters(X) + [Parameter("alpha", self.alpha)]

    @classmethod
    def variants(cls):
        return (cls(lengthscale=0.8, variance=1.3, alpha=0.7),
                cls(lengthscale=np.array([0.6, 1.4]), variance=0.9, alpha=2.5))


for _kernel in (Stationary, SquaredExponential, Matern12, Matern32, Matern52):
    _kernel.__doc__ += _PARAMETERS_DOC

__all__ = ["SquaredExponential", "Matern12", "Matern32", "Matern52", "RationalQuadratic", "Stationary"]
