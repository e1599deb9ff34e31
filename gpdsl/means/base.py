"""The mean-function interface and sums of mean functions.

A mean function is a frozen dataclass (:class:`gpdsl.components.Component`) whose
hyperparameters are fields, bound to natural values as the kernels are.  The model adds
m(X) to the latent function's prior mean: the inference methods see it as a per-row offset of
the latent input (f = m(x) + g, g ~ GP(0, k)) and return d objective / d offset, which the
model contracts with :meth:`Mean.vjp`.  A new mean subclasses :class:`Mean`, declares
``hyperparameters`` (or overrides ``parameters``) and implements:

==========================  =====================================================================
``value(X)``                m(X), shape (n,)
``vjp(X, g)``               {name: sum_i g_i dm(x_i) / d theta}, natural scale, by local name
==========================  =====================================================================
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..chunks import add_partial
from ..components import Component, bind_parts, part_parameters, qualify_keys


class Mean(Component, family="mean"):
    """Base class of the prior mean functions: the interface of the module docstring."""

    gradient_outputs = {"vjp": qualify_keys}
    # Whether value(X) reads the columns of X as input features.  In a multi-output model X's
    # last column is the output index (gpdsl.multioutput), which such a mean would read as a
    # feature: the model refuses one outside gd.means.PerOutput, which gives each part the
    # feature columns only.
    reads_input_columns = False

    def __add__(self, other):
        if not isinstance(other, Mean):
            return NotImplemented
        left = self.means if isinstance(self, SumMean) else (self,)
        right = other.means if isinstance(other, SumMean) else (other,)
        return SumMean(left + right)

    def value(self, X):
        """m(X).

        Parameters
        ----------
        X : ndarray, shape (n, D)

        Returns
        -------
        ndarray, shape (n,)
        """
        raise NotImplementedError(f"{type(self).__name__} does not define value")

    def vjp(self, X, g):
        """The contraction sum_i g_i dm(x_i)/d theta for each hyperparameter theta.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        g : ndarray, shape (n,)
            The adjoint d objective / d m(X).

        Returns
        -------
        dict of str to ndarray
            By local name, natural scale.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define vjp")


@dataclass(frozen=True, eq=False)
class SumMean(Mean):
    """m = m_0 + m_1 + ...; hyperparameters named ``<i>.<field>``.  ``m1 + m2`` builds one.

    Parameters
    ----------
    means : tuple of Mean
        At least two mean functions.

    Raises
    ------
    TypeError
        If ``means`` is not a tuple of at least two mean functions.
    """

    means: tuple

    def __post_init__(self):
        if not isinstance(self.means, tuple) or len(self.means) < 2 or not all(isinstance(m, Mean) for m in self.means):
            raise TypeError(f"SumMean: means must be a tuple of at least two gd.means mean functions, got {self.means!r}")

    @property
    def reads_input_columns(self):
        return any(m.reads_input_columns for m in self.means)

    def parameters(self, X):
        return part_parameters([str(i) for i in range(len(self.means))], self.means, X)

    def bind(self, values=None):
        return dataclasses.replace(self, means=bind_parts([str(i) for i in range(len(self.means))], self.means, values))

    @classmethod
    def variants(cls):
        parts = Mean.registry
        return (cls((parts["Constant"](0.3), parts["Linear"](np.array([0.5, -0.2])))),)

    def value(self, X):
        return sum(m.value(X) for m in self.means)

    def vjp(self, X, g):
        grads = {}
        for i, m in enumerate(self.means):
            grads = add_partial(grads, {f"{i}.{k}": v for k, v in m.vjp(X, g).items()})
        return grads

    def describe(self):
        return f"SumMean({', '.join(m.describe() for m in self.means)})"


__all__ = ["Mean", "SumMean"]
