"""Greedy selection of the inducing inputs from the training inputs: greedy variance (GV, HGV)
and greedy bound maximisation.  Their rank-1 steps are the jitted kernels of
:mod:`gpdsl._jit.greedy`; on a Dask X the greedy-variance factor is held by X's row blocks.

A kernel of K latent functions (``n_outputs`` K, :class:`gpdsl.kernels.Separate`: diag (K, N),
gram (K, n1, n2)) gives each class its own residual k^k_nn - q^k_nn, so greedy variance keeps K
factors (K times the work) and sums the classes' criteria; one kernel shared by the classes keeps
one factor.

On a multi-output model (:mod:`gpdsl.multioutput`) the rules select in the long space: the
candidates are the training rows (input, output pair), each with its own residual variance under
the coregionalised kernel, and Z is the picked rows, (M, D+1) with their output index: an
inducing variable of one output at one input, where Z of the input-space specs is shared by all
outputs."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from .._jit import announce_compilation
from .._jit import greedy as _greedy
from ..backends import dask_array
from ..checks import as_float_array, check_bool, check_positive_int, check_positive_number, check_seed
from ..chunks import is_chunked, map_rows
from ..methods.common import ConvergenceWarning
from .base import InducingSpec, NoCandidateError, SelectionContext, Selection, _check_m, _check_m_le_n

# Added to diag(K_ff) and at each pivot, as in the thesis code (its ``greedy_variance``).
_JITTER = 1e-12
# Rough first-selection compile times on a 2-core machine, quoted by the notice (gpdsl._jit).
_COMPILE_SECONDS = {"GreedyVariance": 2, "GreedyBound": 5}
# GreedyVariance(first_round_max_m="auto"): the first round of an automatic-M loop selects at
# least this many points per input dimension (and at least _FIRST_ROUND_MIN points).  At long
# lengthscales the SE kernel is ~ sigma^2 (1 - |x - x'|^2 / 2 l^2): rank ~D + 2, so about D + 2
# points make its trace term vanish, while a short lengthscale needs many more.  With M ~ D in
# the first round the bound therefore prefers the near-linear model, the next selection at that
# lengthscale reaches tol at M ~ D again, and the loop never leaves it (an 18-D image-like set:
# 9 of 10 draws ended at M = 15-20, lengthscale 97-320, test error 0.11-0.30 against 0.07-0.11
# at a first round of 3 D points).  2 D points also escaped on that set; 3 D leaves a margin.
_FIRST_ROUND_PER_DIM = 3
_FIRST_ROUND_MIN = 20


def _check_reinit(owner, spec):
    check_bool(owner, "reinit", spec.reinit)
    check_positive_number(owner, "reinit_tol", spec.reinit_tol)
    check_positive_int(owner, "max_reinit", spec.max_reinit)


def _require_context(owner, context):
    if not isinstance(context, SelectionContext):
        raise TypeError(f"{owner}: selection needs a SelectionContext with the kernel and its hyperparameter "
                        f"values (Model.fit provides it), got context={context!r}")
    return context


def _per_point(owner, name, value, shape, nonnegative):
    """context.weights / context.targets as a finite float array of ``shape`` ((N,), or (N, K) one
    weight per class), >= 0 for weights."""
    a = np.asarray(value, dtype=float)
    if a.shape != shape or not np.all(np.isfinite(a)) or (nonnegative and np.any(a < 0)):
        rule = "finite and >= 0" if nonnegative else "finite"
        raise ValueError(f"{owner}: context.{name} must be an {shape} array, {rule}; got shape {a.shape}"
                         + (f", min {float(np.min(a))!r}" if a.size else ""))
    return a


def _inputs(owner, X):
    X = as_float_array(owner, "X", X)
    if X.ndim != 2 or X.shape[0] < 1:
        raise ValueError(f"{owner}: X must be a 2-D array (N, D) with N >= 1, got shape {X.shape}")
    return X


def _residual_start(context, X):
    """d = diag(K_ff) + eps (thesis code) and the floor a residual must exceed to count as positive.

    A point that duplicates a selected one keeps the residual 2 eps - eps^2 / d_j (the jitter at
    its own diagonal and at the pivot), up to rounding of a few eps_mach * K_nn; adding it would
    make K_uu singular, so such points count as exhausted.  Both are (N,), or (K, N) one row per
    class for a kernel of K latent functions.
    """
    kdiag = np.asarray(context.bound_kernel().diag(X), dtype=float)
    d = kdiag + _JITTER
    floor = 2.0 * _JITTER + 64.0 * np.finfo(float).eps * np.abs(kdiag)
    return d, floor


def _residual_rows(context, X_block):
    """((), (d, floor)) of :func:`_residual_start` for a row block X_block (n, D) (a map_rows pass)."""
    return (), _residual_start(context, X_block)


class _BlockFactor:
    """The pivoted Cholesky factor of greedy variance selection for a Dask X, held by X's row
    blocks: block b keeps its columns C[:, block b] (Dask delayed objects, persisted where they
    were computed), and the residual d (N,) is in memory.  Adding a pivot is one pass over the
    blocks (:func:`_factor_block_step`), which needs of the other blocks only the pivot's column
    C[:m, j] (M,) and x_j, fetched first.  The same O(N M) per pick as the in-memory step."""

    def __init__(self, context, X, d):
        self.context, self.X, self.d = context, X, d
        self.index = np.arange(X.shape[0])
        self.blocks, self.starts = None, np.cumsum((0,) + X.chunks[0][:-1])

    def add(self, m, j):
        """Add pivot j as row m of the factor; updates ``self.d``."""
        import dask

        c_j = np.zeros(0)
        if m > 0:
            b = int(np.searchsorted(self.starts, j, side="right")) - 1
            c_j = dask.delayed(_factor_column)(self.blocks[b], m, j - int(self.starts[b])).compute()
        x_j = np.asarray(self.X[j:j + 1])
        step = partial(_factor_block_step, self.context, x_j, m, c_j, float(self.d[j]), j)
        _, (self.d,), self.blocks = map_rows(step, (self.X, self.d, self.index), None, carried=self.blocks,
                                             keep=True)


def _factor_column(C, m, j):
    """C[:m, j] (m,) of a block's factor columns C (m, n)."""
    return np.ascontiguousarray(C[:m, j])


def _factor_block_step(context, x_j, m, c_j, d_j, j, X_block, d, index, C=None):
    """One pick on a row block (a pure map_rows pass): the block's factor columns C (m, n) (None
    before the first pick) grow by row m, its residual d (n,) is updated (copies of both; the
    in-place kernel then writes the copies).  ``index`` (n,) are the block's global row indices,
    j the pivot's, x_j (1, D) its input, c_j = C[:m, j] and d_j its residual before the pick."""
    C_new = np.empty((m + 1, X_block.shape[0]))
    if m > 0:
        C_new[:m] = C
    d = d.copy()
    # The row K(x_j, X_block), centred at x_j as _kernel_column's: the same bits per element.
    k = context.bound_kernel().gram(x_j, X_block)[0]
    local = j - int(index[0]) if index[0] <= j <= index[-1] else -1
    _greedy.block_step(C_new, m, c_j, d_j, k, local, d, _JITTER)
    return (), (d,), C_new


def _kernel_column(context, X, j):
    """K(X, x_j) (N,), or (K, N) one per class, computed as the row K(x_j, X): the kernels centre
    the inputs at the mean of their first argument, here x_j itself, so the squared distances are
    plain sums of squares (no cancellation, k_jj exact) and one (N, D) pass is saved."""
    return context.bound_kernel().gram(X[j:j + 1], X)[..., 0, :]


def _pick(d, w, floor):
    """The next greedy-variance pivot: ``(j, criterion_j, trace)`` of
    :func:`gpdsl._jit.greedy.weighted_argmax` for one residual d (N,) and weights w (N,).  With one
    residual per class, d and floor (K, N) and w (N, K), the criterion is the sum of the classes'
    sum_k w_nk d_kn, the first maximum among the points with a positive criterion and some class's
    residual above its floor (a point exhausted in every class duplicates a selected one; j = -1
    when none is left), and the trace sum_nk w_nk d_kn."""
    if d.ndim == 1:
        return _greedy.weighted_argmax(d, w, floor)
    v = np.einsum("nk,kn->n", w, d)
    open_ = (v > 0.0) & np.any(d > floor, axis=0)
    j = int(np.argmax(np.where(open_, v, -np.inf))) if open_.any() else -1
    return j, float(v[j]) if j >= 0 else 0.0, float(np.sum(v))


@dataclass(frozen=True)
class GreedyVariance(InducingSpec):
    """Greedy variance (GV; Burt et al. 2020, thesis 2.7.2) and, with ``weighted=True``,
    heteroscedastic greedy variance (HGV; thesis 3.3.2 / 4.3.2) selection from the training inputs.

    Each step adds the training point with the largest ``diag[W (K_ff - Q_ff)]`` (W = I for GV,
    ``diag(context.weights)`` for HGV; weights None means uniform), by one rank-1 step of a
    pivoted Cholesky factorisation of K_ff + 1e-12 I: O(N M) per point, O(N M^2) in all, an
    (M, N) factor in memory.  The numerics are the thesis code's: d = diag(K_ff) + 1e-12,
    +1e-12 at the pivot, d <- max(d - e^2, 0).  Ties go to the first maximum (the thesis code
    permutes the data at random first; this spec does not, so the result is deterministic).

    Selection stops at the first of: ``m`` points ("m"); the weighted trace
    ``sum_n w_n d_n`` below the threshold ("tol" -- the point that took it below is kept, so M
    is the number selected at that moment; at least one point is always selected); ``max_m``
    points ("max_m"); no point left whose residual exceeds the duplicate floor of 2e-12 (plus
    rounding) with a positive weighted residual ("exhausted", e.g. m larger than the number of
    distinct inputs).  ``criterion[i]`` is the weighted trace ``Tr(W (K_ff - Q_ff))`` (of the
    jittered K) after pick i.

    With one kernel per latent function (``context.kernel.n_outputs`` K > 1,
    :class:`gpdsl.kernels.Separate`) each class k has its own residual k^k_nn - q^k_nn and the
    criterion is the sum of the classes' HGV criteria, ``sum_k w_nk (k^k_nn - q^k_nn)``, with
    ``context.weights`` (N, K) (GV: w_nk = 1/K, the classes' mean residual, which is the shared
    kernel's GV criterion when the parts are equal); the trace sums it over n.  K factors are
    kept, K times the memory and work, and a point stays a candidate while some class's residual
    is above the duplicate floor.  A Dask X is refused for such a kernel.

    The threshold is ``tol`` (absolute) or ``tol_per_point * n`` with n the number of rows the
    selection sums over.  The trace is a sum over those rows, so an absolute ``tol`` asks for a
    different residual per point at each N, and under ``Model.fit(subsample=n)`` (where the
    selection sums over the n rows) ``tol = 1e-3 N`` asked N / n times too little: twonorm at
    N = 10^6 with a 5,000-row subsample kept M = 4 and then 1 (test error 4.0 %, Bayes 2.25 %).
    ``tol_per_point`` means the same mean weighted residual (about twice the bound's loss per
    point, thesis 2.7.2) at any N and with or without a subsample.

    With M chosen by the threshold (``m=None``), reaching ``max_m`` warns
    (:class:`gpdsl.ConvergenceWarning`): the threshold was not met, so the approximation is
    coarser than asked for; ``stopped == "max_m"`` records it.

    ``reinit``, ``reinit_tol``, ``max_reinit`` configure the model's reinitialisation loop:
    re-select Z after each hyperparameter fit until the objective changes by at most
    ``reinit_tol`` times its magnitude, at most ``max_reinit`` times (ending there warns).

    ``first_round_max_m`` caps the first selection of that loop when M is chosen by the
    threshold (``m=None``, ``reinit=True``, ``context.first_round``), stop reason
    "first_round_max_m".  The first selection is made at the declared hyperparameters, where the
    trace rarely reaches a threshold meant for fitted ones (on twonorm, lengthscale sqrt(20)
    against a fitted ~800), so without the cap it runs to ``max_m`` and that first fit dominates
    the whole loop (396 of 416 s at N = 100,000, max_m = 300); later rounds select at fitted
    hyperparameters up to ``max_m``.  The cap must not be so small that the first fit cannot
    represent a short lengthscale: at M ~ D the bound prefers a near-linear model (the SE kernel
    at long lengthscales has rank ~D + 2), every later selection at its lengthscale reaches the
    threshold at M ~ D again, and the loop stays there (an 18-D image-like set, tol 1e-3 N: 9
    of 10 draws ended at M = 15-20, lengthscale 97-320, test error up to 0.30 against 0.11 at
    a first round of 3 D points).  ``"auto"`` (default) caps at ``max(20, 3 D)``; an integer is
    taken as it is; None: no cap (the thesis' loop as written).

    Parameters
    ----------
    m : int, optional
        Number of points to select (at most ``max_m`` and N).
    tol : float, optional
        Absolute trace threshold that chooses M (thesis 4.3.2).
    max_m : int, default 500
        Cap on M.
    weighted : bool, default False
        HGV: weight the residual variances by ``context.weights``.
    reinit : bool, default False
        Re-select Z after each hyperparameter fit (the reinitialisation loop, thesis 4.3.2).
    reinit_tol : float, default 1e-3
        The loop stops when the objective changes by at most this times its magnitude.
    max_reinit : int, default 10
        Most re-selection rounds (ending there warns).
    first_round_max_m : int, "auto" or None, default "auto"
        Cap on the loop's first selection when M is chosen by the threshold.
    tol_per_point : float, optional
        Threshold on the mean weighted residual ``sum_n w_n d_n / n``; at most one of ``tol``
        and ``tol_per_point``, and at least one of them or ``m``.

    Raises
    ------
    ValueError
        Neither ``m`` nor a threshold, both thresholds, ``m`` above ``max_m``, or an argument
        out of range.
    """

    m: int | None = None
    tol: float | None = None
    max_m: int = 500
    weighted: bool = False
    reinit: bool = False
    reinit_tol: float = 1e-3
    max_reinit: int = 10
    first_round_max_m: int | str | None = "auto"
    tol_per_point: float | None = None

    def __post_init__(self):
        owner = "GreedyVariance"
        if self.m is None and self.tol is None and self.tol_per_point is None:
            raise ValueError(f"{owner}: give m (the number of points), tol or tol_per_point (a trace threshold) "
                             f"or both, got m={self.m!r}, tol={self.tol!r}")
        if self.tol is not None and self.tol_per_point is not None:
            raise ValueError(f"{owner}: give tol (absolute) or tol_per_point (per row selected from), not both; got "
                             f"tol={self.tol!r}, tol_per_point={self.tol_per_point!r}")
        if self.m is not None:
            _check_m(owner, self.m)
        if self.tol is not None:
            check_positive_number(owner, "tol", self.tol)
        if self.tol_per_point is not None:
            check_positive_number(owner, "tol_per_point", self.tol_per_point)
        check_positive_int(owner, "max_m", self.max_m)
        if self.m is not None and self.m > self.max_m:
            raise ValueError(f"{owner}: m = {self.m!r} is larger than max_m = {self.max_m!r}")
        check_bool(owner, "weighted", self.weighted)
        _check_reinit(owner, self)
        if self.first_round_max_m is not None and self.first_round_max_m != "auto":
            check_positive_int(owner, "first_round_max_m", self.first_round_max_m)

    def threshold(self, n):
        """The trace threshold for a selection over n rows: ``tol``, ``tol_per_point * n``, or
        None when M is given by ``m`` alone.

        Parameters
        ----------
        n : int
            Number of rows the selection sums over.

        Returns
        -------
        float or None
        """
        if self.tol_per_point is not None:
            return self.tol_per_point * n
        return self.tol

    def first_round_cap(self, n_features):
        """The first round's cap on M for inputs with ``n_features`` columns (None: no cap).

        Parameters
        ----------
        n_features : int
            D, the number of input columns.

        Returns
        -------
        int or None
        """
        if self.first_round_max_m == "auto":
            return max(_FIRST_ROUND_MIN, _FIRST_ROUND_PER_DIM * int(n_features))
        return self.first_round_max_m

    lazy_inputs = True
    selects_training_rows = True

    def small_m_probe(self, n_features, m_kept, n_rows):
        # The moderate M is the "auto" first round's (see _FIRST_ROUND_PER_DIM): where the
        # near-linear optimum cannot win by making the trace term vanish.
        moderate = min(max(_FIRST_ROUND_MIN, _FIRST_ROUND_PER_DIM * int(n_features)), self.max_m, int(n_rows))
        if self.m is not None or m_kept >= moderate:
            return None
        return replace(self, m=moderate, tol=None, tol_per_point=None, reinit=False)

    def check_subsample(self, n_rows, n_total):
        if self.tol is not None:
            warnings.warn(f"GreedyVariance: tol = {self.tol:g} is an absolute threshold on a sum over the "
                          f"{n_rows} subsampled rows (not all {n_total}), so it allows {n_total / n_rows:.3g} times "
                          "the residual per row it would on all rows; tol_per_point means the same on both",
                          ConvergenceWarning, stacklevel=5)

    def initial_Z(self, X, y, context=None):
        return self.select(X, y, context).Z

    def select(self, X, y, context=None):
        """Greedy (weighted) variance selection: X (N, D) -> :class:`Selection` with M <= m rows.

        For a Dask X (checked by ``Model.fit``) the factor's columns stay with X's row blocks
        (:class:`_BlockFactor`) and each pick is one pass of Dask tasks over them.

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
            With indices, the weighted trace after each pick and the stop reason.

        Raises
        ------
        TypeError
            If ``context`` is not a :class:`SelectionContext`.
        ValueError
            ``m`` above N, weights of the wrong shape ((N,), or (N, K) for a kernel of K latent
            functions), negative or not finite, or a Dask X with a kernel of K latent functions.
        NoCandidateError
            If no point has a positive (weighted) prior variance.
        """
        chunked = is_chunked((X,))
        X = dask_array(X) if chunked else _inputs("GreedyVariance", X)
        n = X.shape[0]
        if self.m is not None:
            _check_m_le_n("GreedyVariance", self.m, n)
        context = _require_context("GreedyVariance", context)
        k = context.kernel.n_outputs
        if chunked and k > 1:
            raise ValueError(f"GreedyVariance: a Dask X with a kernel of {k} latent functions "
                             f"({context.kernel.describe()}) is not supported (the factor held by X's row "
                             "blocks is one kernel's); give X as a NumPy array, or use another inducing spec")
        shape = (n,) if k == 1 else (n, k)
        # Unweighted, one residual per class counts as their mean: a shared kernel's GV trace.
        w = (_per_point("GreedyVariance", "weights", context.weights, shape, nonnegative=True)
             if self.weighted and context.weights is not None else np.full(shape, 1.0 / k))
        if chunked:
            _, (d, floor) = map_rows(partial(_residual_rows, context), (X,), None)
        else:
            d, floor = _residual_start(context, X)
        j, _, _ = _pick(d, w, floor)
        if j < 0:
            raise NoCandidateError("GreedyVariance: no training point has a positive (weighted) prior variance "
                                   "to select")
        first_cap = (self.first_round_cap(X.shape[1]) if self.m is None and self.reinit and context.first_round
                     else None)
        tol = self.threshold(n)
        cap = min(self.m or self.max_m, first_cap or n, n)
        factor = _BlockFactor(context, X, d) if chunked else None
        # np.empty only reserves address space: rows are committed as they are written.
        C = None if chunked else np.empty((cap, n) if k == 1 else (k, cap, n))
        indices, traces, stopped = [], [], None
        while stopped is None:
            if chunked:
                factor.add(len(indices), j)
                nxt, _, trace = _greedy.weighted_argmax(factor.d, w, floor)
            elif k > 1:
                # One rank-1 step per class's factor C[c] and residual d[c] (views, updated in place).
                m, column = len(indices), _kernel_column(context, X, j)
                for c in range(k):
                    args = (C[c], m, np.ascontiguousarray(C[c, :m, j]), d[c, j], column[c], j, d[c], _JITTER)
                    announce_compilation("greedy-variance selection", _COMPILE_SECONDS["GreedyVariance"],
                                         _greedy.block_step, args)
                    _greedy.block_step(*args)
                nxt, _, trace = _pick(d, w, floor)
            else:
                args = (C, len(indices), j, _kernel_column(context, X, j), d, w, floor, _JITTER)
                announce_compilation("greedy-variance selection", _COMPILE_SECONDS["GreedyVariance"],
                                     _greedy.pivoted_cholesky_step, args)
                nxt, _, trace = _greedy.pivoted_cholesky_step(*args)
            indices.append(j)
            traces.append(trace)
            stopped = self._stop(len(indices), trace, tol, nxt < 0 or len(indices) == n, first_cap)
            j = nxt
        indices = np.array(indices)
        if stopped == "max_m" and self.m is None:
            # M was to be chosen by the threshold and was not: the approximation is coarser
            # than asked for, and nothing else in the fit would say so.
            warnings.warn(f"GreedyVariance: selection stopped at max_m={self.max_m} points with the weighted "
                          f"trace {traces[-1]:.4g} still above the threshold {tol:.4g} ({traces[-1] / n:.3g} per "
                          f"row against {tol / n:.3g}; flagged selection.stopped='max_m'); raise max_m or the "
                          "threshold", ConvergenceWarning, stacklevel=2)
        # np.array copies a NumPy X's rows and computes a Dask X's.
        return Selection(Z=np.array(X[indices]), indices=indices, criterion=np.array(traces), stopped=stopped)

    def _stop(self, count, trace, tol, exhausted, first_cap):
        if self.m is not None and count == self.m:
            return "m"
        if tol is not None and trace < tol:
            return "tol"
        if count == self.max_m:
            return "max_m"
        if count == first_cap:
            return "first_round_max_m"
        return "exhausted" if exhausted else None


@dataclass(frozen=True)
class GreedyBound(InducingSpec):
    """Greedy selection that maximises the collapsed variational bound (Titsias 2009 section 3.2).

    Starting from the empty set, each step draws a working set J of ``working_set`` candidates
    (``np.random.default_rng(seed)``, without replacement) from the points not yet selected
    whose residual variance exceeds the duplicate floor (all of them, in index order and without
    a draw, when at most ``working_set`` remain) and adds the candidate that increases the most

        F = -1/2 log|B| + 1/2 c^T c - 1/2 sum_n w_n K_nn + 1/2 tr(B - I) + const,

    the collapsed bound (thesis eq. 3.1 / B.1) with per-point noise 1/w_n and targets r_n / w_n
    (``context.weights``, ``context.targets``), where K_uu = L L^T, A = L^-1 K_uf W^1/2,
    B = I + A A^T = L_B L_B^T and c = L_B^-1 L^-1 K_uf r.  K is K_ff + 1e-12 I throughout (the
    factor is the pivoted Cholesky factor of :class:`GreedyVariance`), so F is the bound of the
    prior with that jitter.  Each candidate is scored in O(N M) by bordering L_B (a rank-1
    Schur complement), a step costs O(|J| N M).  By Titsias' Proposition 1 F never decreases.

    ``criterion[i]`` is F after pick i without the Z-independent constant
    ``const = -N/2 log 2 pi + 1/2 sum_n log w_n - 1/2 sum_n r_n^2 / w_n``; before any pick it is
    ``-1/2 sum_n w_n (K_nn + 1e-12)``.  Selection stops at ``m`` points ("m") or when no
    candidate is left ("exhausted").  ``reinit*`` as for :class:`GreedyVariance`.

    Parameters
    ----------
    m : int
        Number of points to select (at most N).
    working_set : int, default 100
        Candidates scored per step.
    seed : int or None, default 0
        Seed of the working-set draws.
    reinit : bool, default False
        Re-select Z after each hyperparameter fit (the reinitialisation loop, thesis 4.3.2).
    reinit_tol : float, default 1e-3
        The loop stops when the objective changes by at most this times its magnitude.
    max_reinit : int, default 10
        Most re-selection rounds (ending there warns).

    Raises
    ------
    ValueError
        If an argument is out of range.
    """

    selects_training_rows = True

    m: int
    working_set: int = 100
    seed: int = 0
    reinit: bool = False
    reinit_tol: float = 1e-3
    max_reinit: int = 10

    def __post_init__(self):
        owner = "GreedyBound"
        _check_m(owner, self.m)
        check_positive_int(owner, "working_set", self.working_set)
        check_seed(owner, self.seed)
        _check_reinit(owner, self)

    def initial_Z(self, X, y, context=None):
        return self.select(X, y, context).Z

    def select(self, X, y, context=None):
        """Greedy bound maximisation: X (N, D) -> :class:`Selection` with M <= m rows.

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
            With indices, the bound F (less its constant) after each pick and the stop reason.

        Raises
        ------
        TypeError
            If ``context`` is not a :class:`SelectionContext` or lacks weights or targets.
        ValueError
            ``m`` above N, weights/targets of the wrong shape or not finite, or a kernel of
            several latent functions.
        NoCandidateError
            If no point has a positive prior variance.
        """
        owner = "GreedyBound"
        X = _inputs(owner, X)
        n = X.shape[0]
        _check_m_le_n(owner, self.m, n)
        context = _require_context(owner, context)
        if context.kernel.n_outputs > 1:
            raise ValueError(f"{owner}: the bound is that of one Gaussian regression, but the kernel "
                             f"{context.kernel.describe()} is the prior of {context.kernel.n_outputs} latent "
                             "functions; use GreedyVariance(weighted=True)")
        for name in ("weights", "targets"):
            if getattr(context, name) is None:
                raise TypeError(f"{owner}: context.{name} is None; the bound needs context.weights (noise "
                                "precisions w_n) and context.targets (r_n = w_n ytilde_n)")
        w = _per_point(owner, "weights", context.weights, (n,), nonnegative=True)
        r = _per_point(owner, "targets", context.targets, (n,), nonnegative=False)
        d, floor = _residual_start(context, X)
        C, LB, c = np.empty((self.m, n)), np.zeros((self.m, self.m)), np.zeros(self.m)
        available = np.ones(n, dtype=bool)
        rng = np.random.default_rng(self.seed)
        log_det_B, cc = 0.0, 0.0
        indices, bounds, stopped = [], [], "m"
        for count in range(self.m):
            pool = np.flatnonzero(available & (d > floor))
            if pool.size == 0:
                stopped = "exhausted"
                break
            J = pool if pool.size <= self.working_set else rng.choice(pool, size=self.working_set, replace=False)
            K_J = np.ascontiguousarray(context.bound_kernel().gram(X, X[J]).T)
            args = (C, count, J, K_J, d, w, r, LB, c, _JITTER)
            announce_compilation("greedy-bound selection", _COMPILE_SECONDS["GreedyBound"], _greedy.bound_scores,
                                 args)
            gains, gammas, c_new, G = _greedy.bound_scores(*args)
            t = int(np.argmax(gains))
            j = int(J[t])
            LB[count, :count] = G[t]
            LB[count, count] = gammas[t]
            c[count] = c_new[t]
            # The residual update takes the pick's column as GreedyVariance does (exact at x_j and at
            # its duplicates, see _kernel_column): the block K(X, X[J]) carries ~1e-13 of rounding
            # there, which left a duplicate's residual above the floor and let it be picked.
            _, _, trace = _greedy.pivoted_cholesky_step(C, count, j, _kernel_column(context, X, j), d, w, floor,
                                                        _JITTER)
            log_det_B += 2.0 * np.log(gammas[t])
            cc += c_new[t] ** 2
            bounds.append(-0.5 * log_det_B + 0.5 * cc - 0.5 * trace)
            available[j] = False
            indices.append(j)
        if not indices:
            raise NoCandidateError(f"{owner}: no training point has a positive prior variance to select")
        indices = np.array(indices)
        return Selection(Z=X[indices].copy(), indices=indices, criterion=np.array(bounds), stopped=stopped)
