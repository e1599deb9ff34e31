"""The spectral-mixture kernel (Wilson & Adams 2013): a stationary kernel whose spectral density is
a mixture of Q Gaussians, one per component, with a mean frequency and a frequency spread per
input feature.

The Gram matrix and its vector-Jacobian product are loops over (i, j, q, d) in
:mod:`gpdsl._jit.spectral_mixture`.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from .._jit import spectral_mixture as _sm
from ..parameters import check_hyperparameter, declared_value
from .base import Kernel, Parameter


def _column_summary(X):
    """(range, Nyquist frequency of the typical spacing) per column of X: the spacing is
    range / (N - 1); a column without spread (or not finite: the placeholder X a saved model is
    read back with) counts as range 1."""
    X = np.asarray(X, dtype=float) if not hasattr(X, "compute") else X
    n = X.shape[0]
    lo, hi = np.asarray(X.min(axis=0), dtype=float), np.asarray(X.max(axis=0), dtype=float)
    spread = hi - lo
    spread = np.where(np.isfinite(spread) & (spread > 0), spread, 1.0)
    nyquist = max(n - 1, 1) / (2.0 * spread)
    return spread, nyquist


@dataclass(frozen=True, eq=False)
class SpectralMixture(Kernel):
    """Spectral-mixture kernel (Wilson & Adams (2013), eq. 12; GPML's covSM):

    k(x, z) = sum_q w_q prod_d exp(-2 pi^2 tau_d^2 s_qd^2) cos(2 pi tau_d m_qd),  tau = x - z,

    the covariance whose spectral density is the mixture of the Gaussians N(+-m_q, diag(s_q^2))
    with weights w_q.  GPML's hyperparameters are ``[log w; log m; log sqrt(v)]`` with s = sqrt(v).

    Parameters
    ----------
    n_components : int, default 1
        The number Q of mixture components (a structural choice, not a hyperparameter).
    weights : float or array of shape (Q,), Fixed or prior, optional
        Positive component weights w_q (k(x, x) = sum_q w_q).  None starts them at 1/Q each.
    means : float or array of shape (Q, D), Fixed or prior, optional
        Positive mean frequencies m_qd (cycles per unit of the input).  None starts component q
        at ``(q + 1) / (Q + 1)`` of the Nyquist frequency of the typical spacing of each column,
        ``(N - 1) / (2 * range)``: evenly spread over (0, Nyquist).
    scales : float or array of shape (Q, D), Fixed or prior, optional
        Positive frequency spreads s_qd (1 / (2 pi s_qd) is a length-scale).  None starts them at
        ``1 / range`` of each column of X.

    A scalar is broadcast to its parameter's shape; the starts from the data are made by
    ``parameters(X)`` from the training inputs (deterministic).
    active_dims, name : keyword only, optional
        The columns the kernel reads and its label inside a sum or product, as for every
        kernel (:class:`gpdsl.kernels.Kernel`).

    Raises
    ------
    TypeError
        If ``n_components`` is not an int, or a hyperparameter is not a number, an array,
        ``Fixed(...)`` or a prior.
    ValueError
        If ``n_components`` is below 1, a hyperparameter is not finite and positive, or its
        shape does not fit ``n_components``.
    """

    n_components: object = 1
    weights: object = None
    means: object = None
    scales: object = None
    hyperparameters = ("weights", "means", "scales")

    def __post_init__(self):
        q = self.n_components
        if isinstance(q, bool) or not isinstance(q, numbers.Integral):
            raise TypeError(f"SpectralMixture: n_components must be a positive int, got {q!r}")
        if q < 1:
            raise ValueError(f"SpectralMixture: n_components must be a positive int, got {q!r}")
        object.__setattr__(self, "n_components", int(q))
        if self.weights is not None:
            check_hyperparameter("SpectralMixture", "weights", self.weights)
            shape = declared_value(self.weights).shape
            if shape not in ((), (q,)):
                raise ValueError(f"SpectralMixture: weights must be a scalar or have shape ({q},) "
                                 f"(n_components), got shape {shape}")
        for name in ("means", "scales"):
            spec = getattr(self, name)
            if spec is None:
                continue
            check_hyperparameter("SpectralMixture", name, spec, ndim_max=2)
            shape = declared_value(spec).shape
            if shape != () and (len(shape) != 2 or shape[0] != q):
                raise ValueError(f"SpectralMixture: {name} must be a scalar or have shape ({q}, D) "
                                 f"(n_components, features), got shape {shape}")

    def parameters(self, X):
        """The weights (Q,), dims ``("component",)``, and the means and scales (Q, D), dims
        ``("component", "feature")``; a field left None starts from X as the class docstring says.

        Parameters
        ----------
        X : ndarray, shape (N, D)

        Returns
        -------
        list of Parameter

        Raises
        ------
        ValueError
            If means or scales have a number of columns other than D.
        """
        q, dim = self.n_components, X.shape[1]
        for name in ("means", "scales"):
            spec = getattr(self, name)
            if spec is not None and declared_value(spec).ndim == 2 and declared_value(spec).shape[1] != dim:
                raise ValueError(f"SpectralMixture: {name} has {declared_value(spec).shape[1]} columns but X has "
                                 f"{dim} features")
        weights, means, scales = self.weights, self.means, self.scales
        if means is None or scales is None:
            spread, nyquist = _column_summary(X)
            if means is None:
                means = np.outer(np.arange(1, q + 1) / (q + 1), nyquist)
            if scales is None:
                scales = np.broadcast_to(1.0 / spread, (q, dim)).copy()
        if weights is None:
            weights = np.full(q, 1.0 / q)
        return [Parameter("weights", weights, shape=(q,), dims=("component",)),
                Parameter("means", means, shape=(q, dim), dims=("component", "feature")),
                Parameter("scales", scales, shape=(q, dim), dims=("component", "feature"))]

    @classmethod
    def variants(cls):
        return (cls(n_components=1, weights=0.8, means=np.array([[0.3, 0.15]]), scales=np.array([[0.4, 0.7]])),
                cls(n_components=2, weights=np.array([0.7, 0.4]), means=np.array([[0.2, 0.5], [0.35, 0.1]]),
                    scales=np.array([[0.3, 0.2], [0.25, 0.6]])))

    def _arrays(self, dim):
        """The bound weights (Q,), means and scales (Q, D) as contiguous float arrays."""
        q = self.n_components
        if self.weights is None or self.means is None or self.scales is None:
            raise ValueError("SpectralMixture: weights, means and scales must be set to evaluate the kernel "
                             "(a model starts the ones left None from the data: bind it with its table's values)")
        return (np.ascontiguousarray(np.broadcast_to(np.asarray(self.weights, dtype=float), (q,))),
                np.ascontiguousarray(np.broadcast_to(np.asarray(self.means, dtype=float), (q, dim))),
                np.ascontiguousarray(np.broadcast_to(np.asarray(self.scales, dtype=float), (q, dim))))

    def gram(self, X1, X2):
        """sum_q w_q prod_d exp(-2 pi^2 tau_d^2 s_qd^2) cos(2 pi tau_d m_qd), tau = x1_i - x2_j.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        w, m, s = self._arrays(X1.shape[1])
        return _sm.sm_gram(np.ascontiguousarray(X1, dtype=float), np.ascontiguousarray(X2, dtype=float), w, m, s)

    def diag(self, X):
        """``sum_q w_q`` at every input (tau = 0).

        Parameters
        ----------
        X : ndarray, shape (n, D)

        Returns
        -------
        ndarray, shape (n,)
        """
        w, _, _ = self._arrays(X.shape[1])
        return np.full(X.shape[0], float(np.sum(w)))

    def vjp(self, X1, X2, G, K=None):
        """d/d weights (Q,), means and scales (Q, D) and X1 of sum_ij G_ij K_ij by the jitted
        sweep :func:`gpdsl._jit.spectral_mixture.sm_vjp`.

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
        w, m, s = self._arrays(X1.shape[1])
        d_w, d_m, d_s, d_X1 = _sm.sm_vjp(np.ascontiguousarray(X1, dtype=float), np.ascontiguousarray(X2, dtype=float),
                                         np.ascontiguousarray(G, dtype=float), w, m, s)
        grads = {"weights": d_w, "means": d_m, "scales": d_s}
        # A scalar field bound as it was declared (no table): its gradient is the sum over its broadcast.
        for name in grads:
            if np.ndim(getattr(self, name)) == 0:
                grads[name] = np.array(grads[name].sum())
        return grads, d_X1

    def diag_vjp(self, X, g):
        """d/d weights of sum_i g_i diag_i (each sum_i g_i); the diagonal does not depend on the
        means and scales.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        g : ndarray, shape (n,)

        Returns
        -------
        dict of str to ndarray
        """
        total = float(np.sum(g))
        return {"weights": np.array(total) if np.ndim(self.weights) == 0 else np.full(self.n_components, total)}

    def describe(self):
        """E.g. ``"SpectralMixture(Q=2)"``.

        Returns
        -------
        str
        """
        return f"SpectralMixture(Q={self.n_components})"


__all__ = ["SpectralMixture"]
