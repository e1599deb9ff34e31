"""The kernel interface and the composites (sums and products of kernels).

A kernel is a frozen dataclass (:class:`gpdsl.components.Component`) whose hyperparameters are
fields; the methods below run on a bound kernel (:meth:`Component.bind`), whose fields hold
natural-scale float arrays.  Inputs are float arrays of shape (n, D).  A new kernel subclasses
:class:`Kernel`, declares ``hyperparameters`` (or overrides ``parameters``) and implements:

==========================================  ==================================================
``gram(X1, X2)``                            the covariance matrix, shape (n1, n2)
``diag(X)``                                 k(x_i, x_i), shape (n,)
``vjp(X1, X2, G, K=None)``                  (grads, d_X1): grads = {name: sum_ij G_ij dK_ij /
                                            d theta} on the natural scale, d_X1 (n1, D) =
                                            sum_j G_ij dK_ij / dX1_i; ``K`` optionally passes
                                            gram(X1, X2)
``diag_vjp(X, g)``                          {name: sum_i g_i d diag_i / d theta}
==========================================  ==================================================

Gradients are keyed by the kernel's own parameter names; the model qualifies them
(:class:`gpdsl.components.Bound`).  Defining the class registers it (``Kernel.registry``) and
puts it under the conformance suite (``tests/test_conformance.py``: positive semi-definite Gram
matrices, ``diag`` against ``gram``, every gradient against finite differences, save/load and
model-file round trips).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..chunks import add_partial
from ..components import Component, Parameter, qualify_keys


def _qualify_vjp(output, qualify):
    grads, d_X1 = output
    return qualify_keys(grads, qualify), d_X1


class Kernel(Component, family="kernel"):
    """Base class of the covariance functions: the interface of the module docstring."""

    gradient_outputs = {"vjp": _qualify_vjp, "diag_vjp": qualify_keys}

    def __add__(self, other):
        return Sum((self, other))

    def __mul__(self, other):
        return Product((self, other))

    def gram(self, X1, X2):
        """Cross-covariance matrix k(X1, X2).

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        raise NotImplementedError(f"{type(self).__name__} does not define gram")

    def diag(self, X):
        """Prior variances k(x_i, x_i), the diagonal of ``gram(X, X)``.

        Parameters
        ----------
        X : ndarray, shape (n, D)

        Returns
        -------
        ndarray, shape (n,)
        """
        return np.diag(self.gram(X, X)).copy()

    def vjp(self, X1, X2, G, K=None):
        """Vector-Jacobian product of ``gram``: the contraction sum_ij G_ij dK_ij/d(.).

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)
        G : ndarray, shape (n1, n2)
            The adjoint d objective / d K.
        K : ndarray, shape (n1, n2), optional
            gram(X1, X2) when the caller already has it.

        Returns
        -------
        grads : dict of str to ndarray
            d/d each hyperparameter (natural scale), by local name.
        d_X1 : ndarray, shape (n1, D)
            d/d X1 (the inducing-input gradient when X1 is Z).
        """
        raise NotImplementedError(f"{type(self).__name__} does not define vjp")

    def diag_vjp(self, X, g):
        """Vector-Jacobian product of ``diag``: the contraction sum_i g_i d diag_i/d(.).

        Parameters
        ----------
        X : ndarray, shape (n, D)
        g : ndarray, shape (n,)
            The adjoint d objective / d diag.

        Returns
        -------
        dict of str to ndarray
            By local name.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define diag_vjp")


@dataclass(frozen=True, eq=False)
class _Composite(Kernel):
    kernels: tuple

    def __post_init__(self):
        if len(self.kernels) < 2 or not all(isinstance(k, Kernel) for k in self.kernels):
            raise TypeError(f"{type(self).__name__}: kernels must be a tuple of at least two kernels, "
                            f"got {self.kernels!r}")

    def parameters(self, X):
        """Every part's parameters, named ``"<i>.<name>"`` (part 0 first).

        Parameters
        ----------
        X : ndarray, shape (N, D)

        Returns
        -------
        list of Parameter
        """
        return [dataclasses.replace(p, name=f"{i}.{p.name}")
                for i, k in enumerate(self.kernels) for p in k.parameters(X)]

    def bind(self, values=None):
        values = values or {}
        parts = []
        for i, k in enumerate(self.kernels):
            head = f"{i}."
            parts.append(k.bind({name[len(head):]: v for name, v in values.items() if name.startswith(head)}))
        bound = dataclasses.replace(self, kernels=tuple(parts))
        return bound

    @classmethod
    def variants(cls):
        parts = Kernel.registry
        return (cls((parts["SquaredExponential"](0.7, 1.2), parts["Matern52"](np.array([1.0, 0.5]), 0.6))),)

    @staticmethod
    def _named(i, grads):
        return {f"{i}.{name}": g for name, g in grads.items()}

    def describe(self):
        """A short text for summaries and attrs, e.g. ``"Sum(SquaredExponential(ARD), Matern32(isotropic))"``.

        Returns
        -------
        str
        """
        return f"{type(self).__name__}({', '.join(k.describe() for k in self.kernels)})"


@dataclass(frozen=True, eq=False)
class Sum(_Composite):
    """Sum kernel k = k_0 + k_1 + ...; hyperparameters are named ``<i>.<field>`` under the kernel.

    Parameters
    ----------
    kernels : tuple of Kernel
        At least two kernels; ``k1 + k2`` builds one.

    Raises
    ------
    TypeError
        If ``kernels`` is not a tuple of at least two kernels.
    """

    def gram(self, X1, X2):
        return sum(k.gram(X1, X2) for k in self.kernels)

    def diag(self, X):
        return sum(k.diag(X) for k in self.kernels)

    def vjp(self, X1, X2, G, K=None):
        grads, d_X1 = {}, np.zeros(X1.shape)
        for i, k in enumerate(self.kernels):
            g, dx = k.vjp(X1, X2, G)
            grads = add_partial(grads, self._named(i, g))
            d_X1 += dx
        return grads, d_X1

    def diag_vjp(self, X, g):
        grads = {}
        for i, k in enumerate(self.kernels):
            grads = add_partial(grads, self._named(i, k.diag_vjp(X, g)))
        return grads


@dataclass(frozen=True, eq=False)
class Product(_Composite):
    """Product kernel k = k_0 * k_1 * ... (elementwise); the VJP of each factor sees G times the
    others.  Hyperparameters are named ``<i>.<field>`` under the kernel.

    Parameters
    ----------
    kernels : tuple of Kernel
        At least two kernels; ``k1 * k2`` builds one.

    Raises
    ------
    TypeError
        If ``kernels`` is not a tuple of at least two kernels.
    """

    def gram(self, X1, X2):
        return np.prod([k.gram(X1, X2) for k in self.kernels], axis=0)

    def diag(self, X):
        return np.prod([k.diag(X) for k in self.kernels], axis=0)

    def vjp(self, X1, X2, G, K=None):
        mats = [k.gram(X1, X2) for k in self.kernels]
        grads, d_X1 = {}, np.zeros(X1.shape)
        for i, k in enumerate(self.kernels):
            others = np.prod([m for j, m in enumerate(mats) if j != i], axis=0)
            g, dx = k.vjp(X1, X2, G * others)
            grads = add_partial(grads, self._named(i, g))
            d_X1 += dx
        return grads, d_X1

    def diag_vjp(self, X, g):
        diags = [k.diag(X) for k in self.kernels]
        grads = {}
        for i, k in enumerate(self.kernels):
            others = np.prod([d for j, d in enumerate(diags) if j != i], axis=0)
            grads = add_partial(grads, self._named(i, k.diag_vjp(X, g * others)))
        return grads


__all__ = ["Kernel", "Sum", "Product", "Parameter"]
