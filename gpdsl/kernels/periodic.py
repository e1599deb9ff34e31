"""The periodic kernel: a stationary kernel's profile of MacKay's periodic distance.

The distance and the (i, j, d) sweep of its gradient run in the jitted
:func:`gpdsl._jit.covariance.periodic_sqdist` and :func:`gpdsl._jit.covariance.periodic_adjoint`;
the profile and its slope are the base kernel's (``Stationary._profile`` and ``_slope``), so
that every stationary profile is periodic in the same way.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._jit import covariance as _cov
from ..parameters import check_hyperparameter, declared_value
from .base import Kernel, Parameter
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
        dim = X.shape[1]
        per = declared_value(self.period)
        if per.ndim == 1 and per.shape[0] != dim:
            raise ValueError(f"Periodic: period has {per.shape[0]} entries but X has {dim} features "
                             "(give a scalar for one period shared by every feature)")
        return self.base.parameters(X) + [Parameter("period", self.period, shape=(dim,) if per.ndim else None,
                                                     dims=("feature",) if per.ndim else ())]

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

    def _distances(self, X1, X2):
        """``(X1, X2, inv_ls, period)`` as the jitted sweeps take them, and r2 (n1, n2)."""
        dim = X1.shape[1]
        args = (np.ascontiguousarray(X1, dtype=float), np.ascontiguousarray(X2, dtype=float),
                1.0 / _vector(self.base.lengthscale, dim), _vector(self.period, dim))
        return args, _cov.periodic_sqdist(*args)

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
        K = self.base._profile(self._distances(X1, X2)[1])
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
        sweep, then the jitted (i, j, d) sweep of the periodic distance's derivatives.

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
        args, r2 = self._distances(X1, X2)
        if K is None:
            K = self.base._profile(r2)
            K *= float(self.base.variance)
        S, grads = self.base._slope(r2, K, G)
        d_X1, d_ls, d_period = _cov.periodic_adjoint(*args, S)
        grads["lengthscale"] = d_ls if np.ndim(self.base.lengthscale) else np.array(d_ls.sum())
        grads["period"] = d_period if np.ndim(self.period) else np.array(d_period.sum())
        return grads, d_X1

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
