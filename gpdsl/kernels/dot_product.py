"""Dot-product kernels: the linear kernel (isotropic or ARD, with an optional constant offset) and
the polynomial kernel.

Both are functions of the inputs' inner products, so their Gram matrices are one BLAS product
and their gradients a few more; nothing here needs a jitted sweep.  Neither is stationary: their
``diag`` grows with |x|, which the greedy inducing-point rules (GV / HGV) read as it is.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..components import per_feature
from ..parameters import check_hyperparameter, declared_value
from .base import Kernel, Parameter


def _check_scalar(owner, name, spec):
    check_hyperparameter(owner, name, spec)
    if declared_value(spec).ndim != 0:
        raise ValueError(f"{owner}: {name} must be a scalar, got shape {declared_value(spec).shape}")


@dataclass(frozen=True, eq=False)
class Linear(Kernel):
    """Linear kernel k(x, z) = sum_d variance_d x_d z_d + offset (Rasmussen & Williams (2006),
    eq. 4.19 with Sigma_p = diag(variance); GPML's covLINiso / covLINard, whose length-scales are
    ell_d = variance_d^(-1/2), and covLINard + covConst when ``offset`` is given).

    Parameters
    ----------
    variance : float, array of shape (D,), Fixed or prior, default 1.0
        Positive weight-prior variances: a scalar is isotropic (one hyperparameter), an array of
        length D is ARD (one per input feature).
    offset : float, Fixed or prior, optional
        A positive constant added to every covariance (the variance of a bias term); None (the
        default) leaves it out, and the kernel has no such parameter.
    active_dims, name : keyword only, optional
        The columns the kernel reads and its label inside a sum or product, as for every
        kernel (:class:`gpdsl.kernels.Kernel`).

    Raises
    ------
    TypeError
        If a field is not a number, an array, ``Fixed(...)`` or a prior.
    ValueError
        If a field is not finite and positive, ``variance`` has more than one dimension or
        ``offset`` is not a scalar.
    """

    variance: object = 1.0
    offset: object = None
    hyperparameters = ("variance", "offset")

    def __post_init__(self):
        check_hyperparameter("Linear", "variance", self.variance)
        if self.offset is not None:
            _check_scalar("Linear", "offset", self.offset)

    @property
    def ard(self):
        """bool: True when ``variance`` is an array (one variance per input feature)."""
        return np.ndim(declared_value(self.variance)) == 1

    def parameters(self, X):
        """The variance (shape (D,) if ARD, dims ``("feature",)``) and, when given, the offset.

        Parameters
        ----------
        X : ndarray, shape (N, D)

        Returns
        -------
        list of Parameter

        Raises
        ------
        ValueError
            If an ARD variance has a number of entries other than D.
        """
        out = [per_feature("Linear", "variance", self.variance, X)]
        if self.offset is not None:
            out.append(Parameter("offset", self.offset))
        return out

    @classmethod
    def variants(cls):
        return (cls(variance=0.7), cls(variance=np.array([0.6, 1.4]), offset=0.8))

    def _offset(self):
        return 0.0 if self.offset is None else float(self.offset)

    def gram(self, X1, X2):
        """``(X1 * variance) @ X2.T + offset``.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        K = (X1 * self.variance) @ X2.T
        K += self._offset()
        return K

    def diag(self, X):
        """``sum_d variance_d x_d^2 + offset``.

        Parameters
        ----------
        X : ndarray, shape (n, D)

        Returns
        -------
        ndarray, shape (n,)
        """
        return (X * X) @ np.broadcast_to(self.variance, (X.shape[1],)) + self._offset()

    def vjp(self, X1, X2, G, K=None):
        """d/d variance (sum_ij G_ij x1_id x2_jd, summed over d if isotropic), d/d offset
        (sum_ij G_ij) and d/d X1 (variance_d (G X2)_id).

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
        GX2 = G @ X2
        d_var = np.einsum("id,id->d", X1, GX2)
        grads = {"variance": d_var if self.ard else np.array(d_var.sum())}
        if self.offset is not None:
            grads["offset"] = np.array(np.sum(G))
        return grads, GX2 * self.variance

    def diag_vjp(self, X, g):
        """d/d variance and d/d offset of sum_i g_i diag_i.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        g : ndarray, shape (n,)

        Returns
        -------
        dict of str to ndarray
        """
        d_var = g @ (X * X)
        grads = {"variance": d_var if self.ard else np.array(d_var.sum())}
        if self.offset is not None:
            grads["offset"] = np.array(np.sum(g))
        return grads

    def describe(self):
        """E.g. ``"Linear(ARD)"`` or ``"Linear(isotropic, offset)"``.

        Returns
        -------
        str
        """
        return f"Linear({'ARD' if self.ard else 'isotropic'}{', offset' if self.offset is not None else ''})"


@dataclass(frozen=True, eq=False)
class Polynomial(Kernel):
    """Polynomial kernel k(x, z) = variance * (offset + x . z)^degree (Rasmussen & Williams (2006),
    eq. 4.22; GPML's covPoly with c = offset and sf^2 = variance).

    Parameters
    ----------
    degree : int, default 2
        The positive integer power (a structural choice, not a hyperparameter).
    offset : float, Fixed or prior, default 1.0
        Positive constant c inside the power (GPML optimises log c).
    variance : float, Fixed or prior, default 1.0
        Positive scale sf^2.
    active_dims, name : keyword only, optional
        The columns the kernel reads and its label inside a sum or product, as for every
        kernel (:class:`gpdsl.kernels.Kernel`).

    Raises
    ------
    TypeError
        If ``degree`` is not an int, or a hyperparameter is not a number, an array, ``Fixed(...)``
        or a prior.
    ValueError
        If ``degree`` is below 1, or a hyperparameter is not a finite positive scalar.
    """

    degree: object = 2
    offset: object = 1.0
    variance: object = 1.0
    hyperparameters = ("offset", "variance")

    def __post_init__(self):
        if isinstance(self.degree, bool) or not isinstance(self.degree, numbers.Integral):
            raise TypeError(f"Polynomial: degree must be a positive int, got {self.degree!r}")
        if self.degree < 1:
            raise ValueError(f"Polynomial: degree must be a positive int, got {self.degree!r}")
        object.__setattr__(self, "degree", int(self.degree))
        _check_scalar("Polynomial", "offset", self.offset)
        _check_scalar("Polynomial", "variance", self.variance)

    @classmethod
    def variants(cls):
        return (cls(degree=3, offset=0.7, variance=1.3), cls(degree=1, offset=1.4, variance=0.6))

    def gram(self, X1, X2):
        """``variance * (offset + X1 @ X2.T) ** degree``.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        B = X1 @ X2.T
        B += float(self.offset)
        K = np.power(B, self.degree, out=B)
        K *= float(self.variance)
        return K

    def diag(self, X):
        """``variance * (offset + |x|^2) ** degree``.

        Parameters
        ----------
        X : ndarray, shape (n, D)

        Returns
        -------
        ndarray, shape (n,)
        """
        return float(self.variance) * (float(self.offset) + np.einsum("ij,ij->i", X, X)) ** self.degree

    def _adjoints(self, B, G):
        """(sum G B^p, the adjoint A = G * variance * p * B^(p-1) of B)."""
        p, var = self.degree, float(self.variance)
        lower = np.ones_like(B) if p == 1 else np.power(B, p - 1)
        A = G * lower
        d_var = np.sum(A * B)
        A *= var * p
        return d_var, A

    def vjp(self, X1, X2, G, K=None):
        """d/d offset (sum_ij A_ij), d/d variance (sum_ij G_ij (offset + x1_i . x2_j)^p) and
        d/d X1 (A X2), with A = G * variance * p * (offset + X1 X2^T)^(p-1).

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
        d_var, A = self._adjoints(X1 @ X2.T + float(self.offset), G)
        return {"offset": np.array(A.sum()), "variance": np.array(d_var)}, A @ X2

    def diag_vjp(self, X, g):
        """d/d offset and d/d variance of sum_i g_i diag_i.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        g : ndarray, shape (n,)

        Returns
        -------
        dict of str to ndarray
        """
        d_var, a = self._adjoints(float(self.offset) + np.einsum("ij,ij->i", X, X), g)
        return {"offset": np.array(a.sum()), "variance": np.array(d_var)}

    def describe(self):
        """E.g. ``"Polynomial(degree=2)"``.

        Returns
        -------
        str
        """
        return f"Polynomial(degree={self.degree})"


__all__ = ["Linear", "Polynomial"]
