"""One kernel per latent function: the prior of a likelihood of K latent functions
(:class:`gpdsl.likelihoods.Categorical`) whose latent GPs do not share a kernel.

``Separate((k_0, ..., k_{K-1}))`` declares f_k ~ GP(0, k_k), independent across k (GPflow's
``SeparateIndependent``, GPyTorch's batch kernel).  Its operations return one block per latent
function, stacked along a leading axis: ``gram`` (K, n1, n2), ``diag`` (K, n), and its ``vjp`` /
``diag_vjp`` take adjoints of those shapes.  A plain kernel in a K-latent model is shared by all K
latent functions; the multi-latent methods read the stack's depth from :attr:`Kernel.n_outputs`
(1 for a shared kernel, K here) and keep one K_uu factor per block.  Parameters are named by the
part's label, as in a sum: ``kernel.0.lengthscale``, or ``kernel.<name>.lengthscale`` for a named
part.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..chunks import add_partial
from .base import Kernel, _Composite


@dataclass(frozen=True, eq=False)
class Separate(_Composite):
    """K independent latent GPs, latent function k with the prior covariance ``kernels[k]``.

    Parameters
    ----------
    kernels : tuple of Kernel
        One kernel per latent function of the likelihood (at least two), each of one output;
        the model checks that there are ``likelihood.n_latent`` of them.
    active_dims, name : keyword only, optional
        As for every kernel (:class:`gpdsl.kernels.Kernel`).

    Raises
    ------
    TypeError
        If ``kernels`` is not a tuple of at least two kernels.
    ValueError
        If a part is itself a ``Separate`` kernel, or two parts share a name.
    """

    def __post_init__(self):
        super().__post_init__()
        nested = [i for i, k in enumerate(self.kernels) if k.n_outputs > 1]
        if nested:
            raise ValueError(f"Separate: each part is the kernel of one latent function, but part {nested[0]} is "
                             f"{self.kernels[nested[0]].describe()} of {self.kernels[nested[0]].n_outputs}")

    @property
    def n_outputs(self):
        """The number of latent functions, one per part."""
        return len(self.kernels)

    @classmethod
    def flat_parts(cls, kernel):
        return (kernel,)

    def gram(self, X1, X2):
        """Each latent function's covariance, stacked.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)

        Returns
        -------
        ndarray, shape (K, n1, n2)
        """
        return np.stack([k.gram(X1, X2) for k in self.kernels])

    def diag(self, X):
        """Each latent function's prior variances, stacked.

        Parameters
        ----------
        X : ndarray, shape (n, D)

        Returns
        -------
        ndarray, shape (K, n)
        """
        return np.stack([k.diag(X) for k in self.kernels])

    def vjp(self, X1, X2, G, K=None):
        """sum_k sum_ij G_kij dK_kij / d(.) over the parts.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)
        G : ndarray, shape (K, n1, n2)
            One adjoint per latent function.
        K : ndarray, shape (K, n1, n2), optional
            gram(X1, X2) when the caller has it.

        Returns
        -------
        grads : dict of str to ndarray
            By ``"<label>.<name>"``.
        d_X1 : ndarray, shape (n1, D)
        """
        grads, d_X1 = {}, np.zeros(X1.shape)
        for i, k in enumerate(self.kernels):
            g, dx = k.vjp(X1, X2, G[i], None if K is None else K[i])
            grads = add_partial(grads, self._named(i, g))
            d_X1 += dx
        return grads, d_X1

    def diag_vjp(self, X, g):
        """sum_k sum_i g_ki d diag_ki / d(.) over the parts.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        g : ndarray, shape (K, n)

        Returns
        -------
        dict of str to ndarray
        """
        grads = {}
        for i, k in enumerate(self.kernels):
            grads = add_partial(grads, self._named(i, k.diag_vjp(X, g[i])))
        return grads

    @classmethod
    def variants(cls):
        parts = Kernel.registry
        return (cls((parts["SquaredExponential"](0.7, 1.2), parts["Matern52"](np.array([1.0, 0.5]), 0.6),
                     parts["SquaredExponential"](1.5, 0.8))),)
