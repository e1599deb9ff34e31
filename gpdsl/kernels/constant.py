"""Kernels that do not vary with the inputs' values: a constant (a random offset shared by every
point) and white noise (independent at every distinct point).

Neither has an input gradient: ``d_X1`` is zero (White's indicator is flat almost everywhere).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..parameters import check_hyperparameter, declared_value
from .base import ConstantDiagonal


@dataclass(frozen=True, eq=False)
class _ScalarVariance(ConstantDiagonal):
    """A kernel with one positive scalar hyperparameter, ``variance``."""

    variance: object = 1.0
    hyperparameters = ("variance",)

    def __post_init__(self):
        owner = type(self).__name__
        check_hyperparameter(owner, "variance", self.variance)
        if declared_value(self.variance).ndim != 0:
            raise ValueError(f"{owner}: variance must be a scalar, got shape {declared_value(self.variance).shape}")

    @classmethod
    def variants(cls):
        return (cls(variance=0.8),)



_PARAMETERS_DOC = """
    Parameters
    ----------
    variance : float, Fixed or prior, default 1.0
        Positive variance (a scalar).
    active_dims, name : keyword only, optional
        The columns the kernel reads and its label inside a sum or product, as for every
        kernel (:class:`gpdsl.kernels.Kernel`).

    Raises
    ------
    TypeError
        If ``variance`` is not a number, an array, ``Fixed(...)`` or a prior.
    ValueError
        If ``variance`` is not a finite positive scalar.
"""


@dataclass(frozen=True, eq=False)
class Constant(_ScalarVariance):
    """Constant kernel k(x, z) = variance (GPML's covConst with sf^2 = variance): the prior of a
    constant function with a N(0, variance) value (Rasmussen & Williams (2006), section 2.7).
    """

    def gram(self, X1, X2):
        """``variance`` everywhere.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        return np.full((X1.shape[0], X2.shape[0]), float(self.variance))

    def vjp(self, X1, X2, G, K=None):
        """d/d variance = sum_ij G_ij; d/d X1 is zero.

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
        return {"variance": np.array(np.sum(G))}, np.zeros(X1.shape)


def same_points(X1, X2):
    """The (n1, n2) boolean matrix of ``X1[i] == X2[j]`` in every coordinate, one column at a time
    (no (n1, n2, D) temporary).

    Parameters
    ----------
    X1 : ndarray, shape (n1, D)
    X2 : ndarray, shape (n2, D)

    Returns
    -------
    ndarray of bool, shape (n1, n2)
    """
    same = np.ones((X1.shape[0], X2.shape[0]), dtype=bool)
    for d in range(X1.shape[1]):
        same &= X1[:, d, None] == X2[None, :, d]
    return same


@dataclass(frozen=True, eq=False)
class White(_ScalarVariance):
    """White-noise kernel k(x, z) = variance * [x = z] (GPML's covNoise with s^2 = variance): the
    indicator is 1 where the two inputs are the same point (every coordinate equal), so
    ``gram(X, X)`` is ``variance * I`` on distinct inputs, a cross-covariance is zero except at
    repeated points, and ``diag`` is ``variance`` (what adds to the latent variance at new inputs).
    """

    def gram(self, X1, X2):
        """``variance`` where ``X1[i]`` and ``X2[j]`` are the same point, 0 elsewhere.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        return same_points(X1, X2) * float(self.variance)

    def vjp(self, X1, X2, G, K=None):
        """d/d variance = the sum of G over the pairs of the same point; d/d X1 is zero.

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
        return {"variance": np.array(np.sum(G, where=same_points(X1, X2)))}, np.zeros(X1.shape)


for _kernel in (Constant, White):
    _kernel.__doc__ += _PARAMETERS_DOC

__all__ = ["Constant", "White"]
