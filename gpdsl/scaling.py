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
    """Shift and scale of the inputs, (D,) each, and of the targets (scalars).

    Parameters
    ----------
    x_mean, x_scale : numpy.ndarray, shape (D,)
        Input column means and (positive) scales.
    y_mean, y_scale : float
        Target mean and (positive) scale; 0 and 1 where the targets are left as they are.
    """

    x_mean: np.ndarray
    x_scale: np.ndarray
    y_mean: float = 0.0
    y_scale: float = 1.0

    def __post_init__(self):
        x_mean = np.asarray(self.x_mean, dtype=float)
        x_scale = np.asarray(self.x_scale, dtype=float)
        if x_mean.ndim != 1 or x_scale.shape != x_mean.shape:
            raise ValueError(f"Standardization: x_mean and x_scale must be (D,) arrays of one shape, got shapes "
                             f"{x_mean.shape} and {x_scale.shape}")
        if not (np.all(np.isfinite(x_mean)) and np.all(np.isfinite(x_scale)) and np.all(x_scale > 0)):
            raise ValueError("Standardization: x_mean must be finite and x_scale finite and positive")
        if not (np.isfinite(self.y_mean) and np.isfinite(self.y_scale) and self.y_scale > 0):
            raise ValueError(f"Standardization: y_mean must be finite and y_scale finite and positive, got "
                             f"{self.y_mean!r} and {self.y_scale!r}")
        object.__setattr__(self, "x_mean", x_mean)
        object.__setattr__(self, "x_scale", x_scale)
        object.__setattr__(self, "y_mean", float(self.y_mean))
        object.__setattr__(self, "y_scale", float(self.y_scale))

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

    def targets(self, y):
        """Targets in standardised units, (y - y_mean) / y_scale.

        Parameters
        ----------
        y : ndarray, shape (n,)
            Targets in the data's units.

        Returns
        -------
        ndarray, shape (n,)
        """
        return (y - self.y_mean) / self.y_scale

    def mean(self, f):
        """A mean (or draw) from standardised units back to the data's: y_mean + y_scale f.

        Parameters
        ----------
        f : float or ndarray
            Latent or observation means (or draws) in standardised units.

        Returns
        -------
        float or ndarray
            Same shape as ``f``.
        """
        return self.y_mean + self.y_scale * f

    def variance(self, v):
        """A variance (or covariance) from standardised units back to the data's: y_scale^2 v.

        Parameters
        ----------
        v : float or ndarray
            Variances, shape (n,), or a covariance, shape (n, n), in standardised units.

        Returns
        -------
        float or ndarray
            Same shape as ``v``.
        """
        return self.y_scale ** 2 * v

    def log_jacobian(self, n):
        """log |d y_std / d y| of n targets: added to a standardised log density to give the data's.

        Parameters
        ----------
        n : int
            Number of targets.

        Returns
        -------
        float
            -n log y_scale.
        """
        return -n * np.log(self.y_scale)
