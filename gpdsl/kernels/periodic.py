"""The periodic kernel: a stationary kernel's profile of MacKay's periodic distance.

The inputs are mapped onto circles, E(x) = (cos, sin)(2 pi x_d / period_d) (n, 2D), and the
base kernel's own distance code runs on E with each length-scale used for both coordinates of
its circle: a BLAS cross term for most bases, the exact pairwise sweep for Matérn 1/2 (whose
profile is not smooth in r^2).  The profile and its slope are the base's too
(``Stationary._profile``, ``_slope``, ``_distance_adjoint``), so that every stationary profile is
periodic in the same way, and the gradients in the inputs and the period follow from d/dE by
the chain rule through the angles.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from ..components import per_feature
from ..parameters import check_hyperparameter
from .base import Kernel
from .stationary import Matern12, Matern32, Matern52, RationalQuadratic, SquaredExponential

# The profiles a periodic kernel takes (each positive definite on R^(2D), where the embedding lives).
BASES = (SquaredExponential, Matern12, Matern32, Matern52, RationalQuadratic)


def _vector(value, dim):
    """A fresh contiguous float array of shape (dim,) from a scalar or a (dim,) array."""
    return np.array(np.broadcast_to(np.asarray(value, dtype=float), (dim,)))


@dataclass(frozen=True, eq=False)
class Periodic(Kernel):
    """Periodic kernel k(x, z) = variance * p(r^2), with the base kernel's unit-variance profile p
    applied to MacKay's (1998) periodic distance

        r^2 = 4 sum_d sin^2(pi (x_d - z_d) / period_d) / lengthscale_d^2,

    the squared distance of the inputs mapped onto circles (u_d(x) = (cos, sin)(2 pi x_d /
    period_d), |u_d(x) - u_d(z)|^2 = 4 sin^2(pi (x_d - z_d) / period_d)), so that the kernel is
    positive semi-definite for every base.  With a :class:`SquaredExponential` base and D = 1 it
    is variance * exp(-2 sin^2(pi |x - z| / period) / lengthscale^2): GPML's ``covPeriodic``,
    scikit-learn's ``ExpSineSquared`` and GPyTorch's ``PeriodicKernel``.  GPflow's ``Periodic``
    writes the same kernel with exp(-sin^2(...) / (2 l^2)): its lengthscale l is half of this one.

    The hyperparameters are flat: the base's own (``lengthscale``, scalar or shape (D,) for ARD;
    ``variance``; ``alpha`` for a :class:`RationalQuadratic` base) and ``period``.

    Parameters
    ----------
    base : SquaredExponential, Matern12, Matern32, Matern52 or RationalQuadratic, default SquaredExponential()
        The stationary kernel whose profile, length-scales, variance (and alpha) are used.
    period : float, array of shape (D,), Fixed or prior, default 1.0
        Positive period: a scalar is shared by every input feature, an array of length D gives
        one per feature.
    active_dims, name : keyword only, optional
        The columns the kernel reads and its label inside a sum or product, as for every
        kernel (:class:`gpdsl.kernels.Kernel`).

    Raises
    ------
    TypeError
        If ``base`` is not one of the kernels above, or ``period`` is not a number, an array,
        ``Fixed(...)`` or a prior.
    ValueError
        If ``period`` is not finite and positive or has more than one dimension.
    """

    base: object = SquaredExponential()
    period: object = 1.0
    hyperparameters = ("period",)

    def __post_init__(self):
        if not isinstance(self.base, BASES):
            raise TypeError(f"Periodic: base must be a {', '.join(c.__name__ for c in BASES[:-1])} or "
                            f"{BASES[-1].__name__} kernel, got {self.base!r}")
        check_hyperparameter("Periodic", "period", self.period)

    def parameters(self, X):
        """The base's parameters (``lengthscale``, ``variance``, ``alpha`` for an RQ base) and the
        period (shape (D,), dims ``("feature",)`` when one per feature, else a scalar).

        Parameters
        ----------
        X : ndarray, shape (N, D)

        Returns
        -------
        list of Parameter

        Raises
        ------
        ValueError
            If an ARD length-scale or a per-feature period has a number of entries other than D.
        """
        return self.base.parameters(X) + [per_feature("Periodic", "period", self.period, X)]

    def bind(self, values=None):
        """A copy whose ``period`` and base hold natural-scale float arrays.

        Parameters
        ----------
        values : mapping of str to array_like, optional
            Values by local parameter name: ``period`` and the base's names.

        Returns
        -------
        Periodic
        """
        values = values or {}
        bound = super().bind({k: v for k, v in values.items() if k == "period"})
        object.__setattr__(bound, "base", self.base.bind({k: v for k, v in values.items() if k != "period"}))
        return bound

    @classmethod
    def variants(cls):
        return (cls(SquaredExponential(0.8, 1.3), period=1.1),
                cls(Matern12(np.array([0.6, 1.4]), 0.9), period=np.array([0.9, 1.7])),
                cls(Matern32(0.7, 1.1), period=np.array([1.3, 0.8])),
                cls(Matern52(np.array([1.2, 0.7]), 0.8), period=1.4),
                cls(RationalQuadratic(0.9, 1.2, alpha=0.6), period=1.2))

    def _circles(self, X):
        """``(E, angles)``: E (n, 2D) = (cos, sin) of the angles 2 pi X / period (n, D)."""
        angles = X * (2.0 * np.pi / _vector(self.period, X.shape[1]))
        return np.concatenate([np.cos(angles), np.sin(angles)], axis=1), angles

    def _on_circles(self, dim):
        """The bound base with each length-scale repeated for the two coordinates of its circle."""
        wide = copy.copy(self.base)
        ls = _vector(self.base.lengthscale, dim)
        object.__setattr__(wide, "lengthscale", np.concatenate([ls, ls]))
        return wide

    def _distances(self, X1, X2):
        """``(E1, angles1, E2, angles2, wide, r2)``: the circle maps of both inputs, the base on
        them, and r2 (n1, n2) = 4 sum_d sin^2(pi (X1_id - X2_jd) / period_d) / lengthscale_d^2."""
        (E1, angles1), (E2, angles2) = self._circles(X1), self._circles(X2)
        wide = self._on_circles(X1.shape[1])
        return E1, angles1, E2, angles2, wide, wide._scaled_sqdist(E1, E2)

    def gram(self, X1, X2):
        """``variance * p(r^2)`` with MacKay's periodic r^2 (the class docstring) and the base's
        unit-variance profile ``p``.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        K = self.base._profile(self._distances(X1, X2)[-1])
        K *= float(self.base.variance)
        return K

    def diag(self, X):
        """The signal variance at every input (r = 0 on the diagonal).

        Parameters
        ----------
        X : ndarray, shape (n, D)

        Returns
        -------
        ndarray, shape (n,)
        """
        return np.full(X.shape[0], float(self.base.variance))

    def vjp(self, X1, X2, G, K=None):
        """d/d lengthscale, variance, (alpha,) period and X1 of sum_ij G_ij K_ij: the base's slope
        sweep and distance adjoint on the circle maps, then the chain rule through the angles
        (theta = 2 pi x / period: d theta / dx = 2 pi / period, d theta / d period = -theta / period).

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
        E1, angles1, E2, angles2, wide, r2 = self._distances(X1, X2)
        dim = X1.shape[1]
        if K is None:
            K = self.base._profile(r2)
            K *= float(self.base.variance)
        S, row, col, grads = self.base._slope(r2, K, G)
        d_E1, d_ls = wide._distance_adjoint(E1, E2, S, row, col)
        d_E2, _ = wide._distance_adjoint(E2, E1, np.ascontiguousarray(S.T), col, row)
        # d/d angle from d/d (cos, sin) of the angle.
        d_angles1 = np.cos(angles1) * d_E1[:, dim:] - np.sin(angles1) * d_E1[:, :dim]
        d_angles2 = np.cos(angles2) * d_E2[:, dim:] - np.sin(angles2) * d_E2[:, :dim]
        period = _vector(self.period, dim)
        d_period = -(np.einsum("id,id->d", angles1, d_angles1) + np.einsum("jd,jd->d", angles2, d_angles2)) / period
        d_ls = d_ls[:dim] + d_ls[dim:]
        grads["lengthscale"] = d_ls if np.ndim(self.base.lengthscale) else np.array(d_ls.sum())
        grads["period"] = d_period if np.ndim(self.period) else np.array(d_period.sum())
        return grads, d_angles1 * (2.0 * np.pi / period)

    def diag_vjp(self, X, g):
        """d/d variance of sum_i g_i diag_i; the diagonal depends on nothing else.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        g : ndarray, shape (n,)

        Returns
        -------
        dict of str to ndarray
        """
        return {"variance": np.array(np.sum(g))}

    def describe(self):
        """E.g. ``"Periodic(SquaredExponential(isotropic))"``.

        Returns
        -------
        str
        """
        return f"Periodic({self.base.describe()})"


__all__ = ["Periodic"]
