"""Standardisation: the affine maps between the data's units and the units a model is fitted in.

``Model.fit(X, y, standardize=True)`` fits in standardised units -- every input column shifted to
mean 0 and scaled to standard deviation 1, and for the Gaussian likelihood the targets too -- and
the :class:`~gpdsl.Posterior` keeps the :class:`Standardization`, so that everything it returns
is in the data's own units again: it maps new inputs before the kernel sees them and maps the
latent and observation predictive back::

    x_std = (x - x_mean) / x_scale,      y = y_mean + y_scale * y_std,
    f = y_mean + y_scale * f_std,        var f = y_scale^2 var f_std   (and so for y).

For the Gaussian likelihood this is the GP prior with the constant mean ``y_mean`` and every
variance (kernel and noise) scaled by ``y_scale^2``, and the log evidence of the data's targets is
that of the standardised ones less ``N log y_scale`` (the Jacobian of y -> y_std).  Classification
and count targets are not transformed (``y_mean = 0``, ``y_scale = 1``).  A constant column (or
target) keeps scale 1, as in scikit-learn's ``StandardScaler``.

A multi-output model (:mod:`gpdsl.multioutput`) standardises each output's targets by their own
mean and scale (scikit-learn's ``normalize_y`` per target column): ``y_mean`` and ``y_scale`` are
then (P,) arrays, and every map of targets, means and variances reads each row's pair through its
output index, the last column of the long rows X (n, D+1) it is given with::

    y_std,i = (y_i - y_mean[p_i]) / y_scale[p_i],      cov f_ij = y_scale[p_i] y_scale[p_j] cov f_std,ij.

The Jacobian of the log evidence is then - sum_i log y_scale[p_i].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks import ValueEquality


def _scale(sd):
    """Standard deviations with the zeros (constant columns) replaced by 1."""
    return np.where(sd > 0, sd, 1.0)


@dataclass(frozen=True, eq=False)
class Standardization(ValueEquality):
    """Shift and scale of the inputs, (D,) each, and of the targets (scalars, or one an output).

    Parameters
    ----------
    x_mean, x_scale : numpy.ndarray, shape (D,)
        Input column means and (positive) scales.
    y_mean, y_scale : float, or numpy.ndarray of shape (P,)
        Target mean and (positive) scale; 0 and 1 where the targets are left as they are.  (P,)
        arrays are a multi-output model's per-output pairs, read at each row's output index (the
        last column of the rows the methods are given with).
    """

    x_mean: np.ndarray
    x_scale: np.ndarray
    y_mean: float | np.ndarray = 0.0
    y_scale: float | np.ndarray = 1.0

    def __post_init__(self):
        x_mean = np.asarray(self.x_mean, dtype=float)
        x_scale = np.asarray(self.x_scale, dtype=float)
        if x_mean.ndim != 1 or x_scale.shape != x_mean.shape:
            raise ValueError(f"Standardization: x_mean and x_scale must be (D,) arrays of one shape, got shapes "
                             f"{x_mean.shape} and {x_scale.shape}")
        if not (np.all(np.isfinite(x_mean)) and np.all(np.isfinite(x_scale)) and np.all(x_scale > 0)):
            raise ValueError("Standardization: x_mean must be finite and x_scale finite and positive")
        y_mean, y_scale = np.asarray(self.y_mean, dtype=float), np.asarray(self.y_scale, dtype=float)
        if y_mean.ndim > 1 or y_scale.shape != y_mean.shape:
            raise ValueError(f"Standardization: y_mean and y_scale must be two numbers or two (P,) arrays (one an "
                             f"output), got shapes {y_mean.shape} and {y_scale.shape}")
        if not (np.all(np.isfinite(y_mean)) and np.all(np.isfinite(y_scale)) and np.all(y_scale > 0)):
            raise ValueError(f"Standardization: y_mean must be finite and y_scale finite and positive, got "
                             f"{self.y_mean!r} and {self.y_scale!r}")
        object.__setattr__(self, "x_mean", x_mean)
        object.__setattr__(self, "x_scale", x_scale)
        object.__setattr__(self, "y_mean", float(y_mean) if y_mean.ndim == 0 else y_mean)
        object.__setattr__(self, "y_scale", float(y_scale) if y_scale.ndim == 0 else y_scale)

    @property
    def per_output(self):
        """bool: whether the targets have a mean and scale an output ((P,) arrays)."""
        return np.ndim(self.y_mean) == 1

    def _at(self, value, X):
        """``value`` (y_mean or y_scale) at each row of X: the number itself, or for per-output
        arrays value[p_i] (n,) with p_i the row's output index, X's last column."""
        if not self.per_output:
            return value
        if X is None:
            raise ValueError("Standardization: per-output target scales map rows given with their inputs X "
                             "(the output index is X's last column)")
        return value[np.asarray(X[:, -1]).astype(np.intp)]

    def target_scale(self, X=None):
        """The targets' scale at each row of X: ``y_scale``, or y_scale[p_i] (n,) per output.

        Parameters
        ----------
        X : ndarray of shape (n, D+1), optional
            The rows (needed for per-output scales only: the output index is the last column).

        Returns
        -------
        float or ndarray of shape (n,)
        """
        return self._at(self.y_scale, X)

    @classmethod
    def of(cls, X, y=None):
        """The standardisation of the training inputs and, if given, targets.

        Parameters
        ----------
        X : ndarray, shape (N, D)
            Training inputs: column means and standard deviations (0 replaced by 1).
        y : ndarray, shape (N,), optional
            Training targets; without them the targets are left as they are (mean 0, scale 1).

        Returns
        -------
        Standardization
        """
        x_mean, x_scale = X.mean(axis=0), _scale(X.std(axis=0))
        if y is None:
            return cls(x_mean, x_scale)
        return cls(x_mean, x_scale, float(np.mean(y)), float(_scale(np.std(y))))

    def inputs(self, X):
        """Inputs in standardised units, (x - x_mean) / x_scale.

        Parameters
        ----------
        X : ndarray, shape (n, D)
            Inputs in the data's units.

        Returns
        -------
        ndarray, shape (n, D)
        """
        return (X - self.x_mean) / self.x_scale

    def targets(self, y, X=None):
        """Targets in standardised units, (y - y_mean) / y_scale (per output: each row's pair).

        Parameters
        ----------
        y : ndarray, shape (n,)
            Targets in the data's units.
        X : ndarray of shape (n, D+1), optional
            Their rows (needed for per-output scales only).

        Returns
        -------
        ndarray, shape (n,)
        """
        return (y - self._at(self.y_mean, X)) / self._at(self.y_scale, X)

    def mean(self, f, X=None):
        """A mean (or draw) from standardised units back to the data's: y_mean + y_scale f.

        Parameters
        ----------
        f : float or ndarray
            Latent or observation means (or draws) in standardised units, (n,) per output.
        X : ndarray of shape (n, D+1), optional
            Their rows (needed for per-output scales only).

        Returns
        -------
        float or ndarray
            Same shape as ``f`` ((n,) per output).
        """
        return self._at(self.y_mean, X) + self._at(self.y_scale, X) * f

    def variance(self, v, X=None):
        """A variance (or covariance) from standardised units back to the data's: y_scale^2 v, or
        y_scale[p_i] y_scale[p_j] v_ij per output.

        Parameters
        ----------
        v : float or ndarray
            Variances, shape (n,), or a covariance, shape (n, n), in standardised units.
        X : ndarray of shape (n, D+1), optional
            Their rows (needed for per-output scales only).

        Returns
        -------
        float or ndarray
            Same shape as ``v`` ((n,) for a number per output).
        """
        scale = self._at(self.y_scale, X)
        if np.ndim(v) == 2 and np.ndim(scale) == 1:
            return scale[:, None] * v * scale[None, :]
        return scale ** 2 * v

    def log_jacobian(self, X):
        """log |d y_std / d y| of the targets at the rows of X: added to a standardised log
        density to give the data's.

        Parameters
        ----------
        X : ndarray, shape (n, D) or (n, D+1)
            The targets' rows (their number; per output, their output index).

        Returns
        -------
        float
            -n log y_scale, or - sum_i log y_scale[p_i] per output.
        """
        return -float(np.sum(np.broadcast_to(np.log(self.target_scale(X)), (X.shape[0],))))
