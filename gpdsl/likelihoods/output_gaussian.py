"""Gaussian observation noise of one variance per output (:class:`OutputGaussian`) for
multi-output models, whose inputs carry the output index in their last column
(:mod:`gpdsl.multioutput`'s long layout).

Its constant model (``Model.fit``'s flag of a fit no better than f = 0) is per output: with f = 0
each output's best noise is s_p^2 = mean(y_p^2) over its rows, so the baseline is

    sum_p log N(y_p | 0, s_p^2 I) = -1/2 sum_p n_p (log(2 pi s_p^2) + 1),

the sum of each output's Gaussian constant, which needs the rows' outputs: the likelihood of
given rows (:meth:`OutputGaussian.for_rows`, :class:`_OutputRows`) has it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..checks import check_positive_int, output_indices
from ..components import Parameter
from ..multioutput import output_groups
from ..parameters import check_hyperparameter, declared_value
from .gaussian import Gaussian, _GaussianNoise


@dataclass(frozen=True, eq=False)
class OutputGaussian(_GaussianNoise):
    """Per-output noise: y_n = f(x_n, p_n) + eps_n, eps_n ~ N(0, variance[p_n]), where p_n is
    row n's output index, the last column of X (GPy's ``MixedNoise`` of one Gaussian per output,
    GPyTorch's ``MultitaskGaussianLikelihood`` without its shared term).

    The noise depends on the row's output, which the per-point operations of
    :class:`~gpdsl.likelihoods.Likelihood` (which see only y and f) cannot read: like
    :class:`~gpdsl.likelihoods.HeteroscedasticGaussian` it is a model for the exact GP and the
    collapsed engines (``noise``), and the posterior's ``predict`` (y_var = f_var + variance[p]),
    ``log_predictive`` and ArviZ draws of y read the noise per row of X_new from the same
    column.  A plain :class:`~gpdsl.likelihoods.Gaussian` in a multi-output model is one noise
    shared by every output.

    Parameters
    ----------
    output_count : int
        The number of outputs P (>= 1).
    variance : float or array_like of shape (P,), Fixed or prior, default 1.0
        Positive noise variances, one per output (a scalar starts them all at that value).
        Named ``likelihood.variance`` with dims ``("output",)``.

    Raises
    ------
    ValueError
        An ``output_count`` that is not a positive integer, or a ``variance`` that is not
        positive and finite or has a length other than P.
    TypeError
        A ``variance`` that is not a number, an array, ``Fixed(...)`` or a prior.
    """

    output_count: int
    variance: object = 1.0
    hyperparameters = ("variance",)
    # fit(standardize=True) may shift and scale the targets: y -> a + b y maps this model to
    # itself with a constant mean and every variance (each output's noise too) times b^2.
    standardizes_targets = True

    def __post_init__(self):
        check_positive_int("OutputGaussian", "output_count", self.output_count)
        check_hyperparameter("OutputGaussian", "variance", self.variance)
        value = declared_value(self.variance)
        if value.ndim == 1 and value.shape[0] != self.output_count:
            raise ValueError(f"OutputGaussian: variance has {value.shape[0]} entries but output_count is "
                             f"{self.output_count} (give one per output, or a scalar for a common start)")

    @classmethod
    def variants(cls):
        """Three outputs of distinct variances.

        Returns
        -------
        tuple of OutputGaussian
        """
        return (cls(3, variance=np.array([0.2, 0.5, 1.1])),)

    def parameters(self, X):
        """The variances, shape (P,), dims ``("output",)``, positive.

        Parameters
        ----------
        X : ndarray, shape (N, D + 1)
            Training inputs (not read: P is declared).

        Returns
        -------
        list of Parameter
        """
        return [Parameter("variance", self.variance, shape=(self.output_count,), dims=("output",))]

    def _variances(self):
        """The (P,) variances (a scalar declared start broadcast)."""
        return np.broadcast_to(np.asarray(self.variance, dtype=float), (self.output_count,))

    def noise(self, X):
        """variance[p_n] at each row, p_n = X[n, -1].

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)
            Inputs whose last column is the output index.

        Returns
        -------
        ndarray, shape (n,)

        Raises
        ------
        ValueError
            An output index that is not an integer in 0..P-1.
        """
        return self._variances()[output_indices("OutputGaussian", X, self.output_count)]

    def noise_vjp(self, X, g):
        """``{"variance": s}`` with s_p = sum of g_n over the rows n of output p (a scatter-add).

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)
        g : ndarray, shape (n,)
            The adjoint d objective / d lambda_n.

        Returns
        -------
        dict of str to ndarray
            The variance's gradient, shape (P,).
        """
        index = output_indices("OutputGaussian", X, self.output_count)
        return {"variance": np.bincount(index, weights=np.asarray(g, dtype=float), minlength=self.output_count)}

    def for_rows(self, X):
        """This noise for the rows of X (:class:`_OutputRows`): the same likelihood, which knows
        each row's output for its constant model (the module docstring).

        Parameters
        ----------
        X : ndarray or Dask array, shape (n, D + 1)
            The rows' inputs, the output index last (only that column is read).

        Returns
        -------
        _OutputRows

        Raises
        ------
        ValueError
            An output index that is not an integer in 0..P-1.
        """
        index = output_indices("OutputGaussian", np.asarray(X[:, -1:]), self.output_count)
        return _OutputRows(self.output_count, self.variance, index=index)

    def describe(self):
        """``OutputGaussian(P)``.

        Returns
        -------
        str
        """
        return f"OutputGaussian({self.output_count})"


@dataclass(frozen=True, eq=False)
class _OutputRows(OutputGaussian):
    """An :class:`OutputGaussian` for given rows (:meth:`OutputGaussian.for_rows`): the same noise,
    with each row's output, which its :meth:`constant_model_log_likelihood` reads.  Not a
    component of a model (not registered).

    Parameters
    ----------
    output_count, variance : object
        The owner's.
    index : ndarray of intp, shape (n,), keyword only
        Each row's output.
    """

    index: np.ndarray = dataclasses.field(default=None, kw_only=True)

    def constant_model_log_likelihood(self, y):
        """The constant model f = 0 at each output's best noise s_p^2 = mean(y_p^2):
        sum_p -1/2 n_p (log(2 pi s_p^2) + 1), each output's Gaussian constant on its rows.

        Parameters
        ----------
        y : ndarray, shape (n,)
            The rows' targets, coded.

        Returns
        -------
        float

        Raises
        ------
        ValueError
            ``y`` of another length than the rows'.
        """
        y = np.asarray(y, dtype=float)
        if y.shape != self.index.shape:
            raise ValueError(f"OutputGaussian: y has shape {y.shape} but the likelihood is of {self.index.shape[0]} "
                             "rows (for_rows(X) with X of these rows)")
        return sum(Gaussian().constant_model_log_likelihood(y[rows])
                   for _, rows in output_groups(self.index, self.output_count))


__all__ = ["OutputGaussian"]
