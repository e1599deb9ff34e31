"""The zero, constant and linear mean functions (GPML's meanZero, meanConst, meanLinear)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..components import per_feature
from ..parameters import check_hyperparameter
from .base import Mean


@dataclass(frozen=True, eq=False)
class Zero(Mean):
    """m(x) = 0, the default: the GP prior of every model without a mean function."""

    def value(self, X):
        return np.zeros(X.shape[0])

    def vjp(self, X, g):
        return {}


@dataclass(frozen=True, eq=False)
class Constant(Mean):
    """m(x) = constant (GPML's meanConst).

    Parameters
    ----------
    constant : float, Fixed or prior, default 0.0
        The mean's value, any real.

    Raises
    ------
    TypeError
        If ``constant`` is not a number, ``Fixed(...)`` or a prior.
    ValueError
        If it is not a finite scalar.
    """

    constant: object = 0.0
    hyperparameters = ("constant",)
    unconstrained = ("constant",)

    def __post_init__(self):
        check_hyperparameter("Constant", "constant", self.constant, positive=False, ndim_max=0)

    @classmethod
    def variants(cls):
        return (cls(0.4),)

    def value(self, X):
        return np.full(X.shape[0], float(self.constant))

    def vjp(self, X, g):
        return {"constant": np.array(np.sum(g))}


@dataclass(frozen=True, eq=False)
class Linear(Mean):
    """m(x) = sum_d coefficients_d x_d (GPML's meanLinear; add a :class:`Constant` for an
    intercept: ``Constant() + Linear()``).

    Parameters
    ----------
    coefficients : float or array of shape (D,), Fixed or prior, default 0.0
        One slope per input feature (a scalar starts them all at that value).

    Raises
    ------
    TypeError
        If ``coefficients`` is not a number, an array, ``Fixed(...)`` or a prior.
    ValueError
        If it is not finite or has more than one dimension; at fit time, if its length is not D.
    """

    coefficients: object = 0.0
    hyperparameters = ("coefficients",)
    unconstrained = ("coefficients",)
    reads_input_columns = True

    def __post_init__(self):
        check_hyperparameter("Linear", "coefficients", self.coefficients, positive=False)

    @classmethod
    def variants(cls):
        return (cls(np.array([0.5, -0.3])),)

    def parameters(self, X):
        """The coefficients, shape (D,), dims ``("feature",)``.

        Parameters
        ----------
        X : ndarray, shape (N, D)

        Returns
        -------
        list of Parameter

        Raises
        ------
        ValueError
            If ``coefficients`` has a length other than D.
        """
        return [per_feature("Linear", "coefficients", self.coefficients, X, positive=False, always=True)]

    def value(self, X):
        return X @ np.broadcast_to(self.coefficients, (X.shape[1],))

    def vjp(self, X, g):
        return {"coefficients": g @ X}


__all__ = ["Zero", "Constant", "Linear"]
