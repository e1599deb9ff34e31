"""The interface of the inducing-point specifications: :class:`InducingSpec`, what a selection
returns (:class:`Selection`) and what the data-dependent rules need from the model
(:class:`SelectionContext`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_positive_int
from ..components import Component, bind


def _check_m(owner, m):
    check_positive_int(owner, "m", m)


def _check_m_le_n(owner, m, n):
    if m > n:
        raise ValueError(f"{owner}: m = {m} inducing points is larger than the N = {n} training points")


class NoCandidateError(ValueError):
    """No training point has a residual (weighted) prior variance above the duplicate floor, so a
    greedy rule has nothing to select: at the declared hyperparameters a bad declaration, in a
    reinitialisation round a kernel whose variance collapsed in the previous fit."""


@dataclass(frozen=True)
class SelectionContext:
    """What data-dependent selection rules need from the model at the current hyperparameters.

    * ``kernel``: a :mod:`gpdsl.kernels` Kernel;
    * ``values``: natural hyperparameter values, keys like ``"kernel.lengthscale"`` (prefix ``"kernel"``);
    * ``weights``: (N,) HGV weights w_n >= 0, i.e. 1/noise_n (Theta for Polya-Gamma, Lambda^-1
      for heteroscedastic regression, site precisions for EP/QP); (N, K) one per class, w_nk,
      for a kernel of K latent functions (``kernel.n_outputs`` K: one residual per class);
      None = uniform;
    * ``targets``: (N,) weighted pseudo-targets r_n = w_n * ytilde_n (for GreedyBound);
      None = not available;
    * ``first_round``: True for the selection at the declared hyperparameters that starts a
      reinitialisation loop (``GreedyVariance.first_round_max_m`` caps it).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The model's kernel.
    values : dict of str to ndarray
        Natural hyperparameter values.
    weights : ndarray, shape (N,) or (N, K), optional
        HGV weights w_n >= 0 (w_nk for a kernel of K latent functions).
    targets : ndarray, shape (N,), optional
        Weighted pseudo-targets r_n.
    first_round : bool, default False
        The first selection of a reinitialisation loop.
    """

    kernel: object
    values: dict
    weights: np.ndarray | None = None
    targets: np.ndarray | None = None
    first_round: bool = False


    def bound_kernel(self):
        """The kernel bound to ``values`` (:func:`gpdsl.components.bind` under ``"kernel"``), whose
        operations the selection rules call (``gram(X1, X2)``, ``diag(X)``).

        Returns
        -------
        gpdsl.components.Bound
        """
        return bind(self.kernel, self.values, "kernel")


@dataclass
class Selection:
    """Result of :meth:`InducingSpec.select`.

    * ``Z`` (M, D): the inducing inputs;
    * ``indices`` (M,): row indices into X in pick order (None for non-greedy specs);
    * ``criterion`` (M,): the rule's criterion after each pick (GV/HGV: the (weighted) trace
      Tr(W (K_ff - Q_ff)); GreedyBound: the VFE bound value); None for non-greedy specs;
    * ``stopped``: why selection ended, ``"m"``, ``"tol"``, ``"max_m"``,
      ``"first_round_max_m"`` (see :class:`GreedyVariance`) or ``"exhausted"`` (no candidate
      left with positive residual variance); None for non-greedy specs.

    Parameters
    ----------
    Z : ndarray, shape (M, D)
        The inducing inputs.
    indices : ndarray of int, shape (M,), or None
        Row indices into X in pick order.
    criterion : ndarray, shape (M,), or None
        The rule's criterion after each pick.
    stopped : str or None
        Why selection ended.
    """

    Z: np.ndarray
    indices: np.ndarray | None
    criterion: np.ndarray | None
    stopped: str | None


class InducingSpec(Component, family="inducing"):
    """Base class of the inducing-point specifications: ``initial_Z`` and ``select``.

    Class attributes: ``optimize`` (Z joins the gradient optimisation), ``reinit`` (the model
    re-selects Z between fits), ``lazy_inputs`` (the spec works on a Dask X without reading
    all of it) and ``selects_training_rows`` (the spec picks training rows with the kernel).

    A multi-output model (:mod:`gpdsl.multioutput`) gives a spec that does not select training
    rows the distinct inputs (U, D) without the output column: its Z (M, D) is shared by the P
    outputs (the methods see Z x {0..P-1}, M P rows).  A spec that selects training rows gets the
    long rows (n, D+1) and picks (input, output) pairs: its Z (M, D+1) is taken as it is (and,
    under ``Optimized``, only its input columns move), as is a ``Fixed`` Z of D+1 columns.
    """

    optimize = False
    reinit = False
    # Whether select picks training rows by the kernel's (weighted) residual variance or bound
    # (the greedy rules): on a multi-output model it then reads the long rows, output column and
    # all, which only the kernel can compare.
    selects_training_rows = False
    # Whether initial_Z/select work on a Dask X without reading all of it (Model.fit computes
    # X into memory for the specs that do not).
    lazy_inputs = False

    def initial_Z(self, X, y, context=None):
        """The initial inducing inputs.

        Parameters
        ----------
        X : ndarray or Dask array, shape (N, D)
            Training inputs (in the fit's units).
        y : ndarray, shape (N,)
            Training targets (unused by the specs that look at X only).
        context : SelectionContext, optional
            The kernel, its hyperparameter values and per-point weights/targets; required by
            the greedy rules.

        Returns
        -------
        ndarray, shape (M, D)

        Raises
        ------
        ValueError
            If the spec cannot be met by X (more points than rows, Z of another width).
        TypeError
            If a greedy rule is given no :class:`SelectionContext`.
        """
        raise NotImplementedError

    def select(self, X, y, context=None):
        """:class:`Selection` with Z = ``initial_Z`` and no indices, criterion or stop reason.

        Parameters
        ----------
        X : ndarray or Dask array, shape (N, D)
            Training inputs (in the fit's units).
        y : ndarray, shape (N,)
            Training targets (unused by the specs that look at X only).
        context : SelectionContext, optional
            The kernel, its hyperparameter values and per-point weights/targets; required by
            the greedy rules.

        Returns
        -------
        Selection
        """
        return Selection(Z=self.initial_Z(X, y, context), indices=None, criterion=None, stopped=None)

    def given_columns(self):
        """The number of columns of inducing inputs given to the spec as they are (``Fixed``'s Z),
        or None for a spec that chooses them.  A multi-output model gives a spec whose Z has the
        long rows' D+1 columns (the output index last) the long rows to check it against.

        Returns
        -------
        int or None
        """
        return None

    def small_m_probe(self, n_features, m_kept, n_rows):
        """A spec that selects a moderate fixed M, when this spec chose M itself and kept fewer;
        else None.  ``Model.fit`` fits it once at the kept round's hyperparameters to see whether
        the automatic M stopped in a near-linear optimum far below a moderate M's bound.

        Parameters
        ----------
        n_features : int
            D, the number of input columns.
        m_kept : int
            M of the round the fit kept.
        n_rows : int
            N, the rows the selection chooses from.

        Returns
        -------
        InducingSpec or None
            None for specs with a given M (the default).
        """
        return None

    def check_subsample(self, n_rows, n_total):
        """Warn when a setting means something else on ``fit(subsample=n_rows)`` than on all
        ``n_total`` rows; nothing by default.

        Parameters
        ----------
        n_rows, n_total : int
            The subsample's and the data's number of rows.
        """
