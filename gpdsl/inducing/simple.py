"""The inducing specs that look at X only: the given Z, a random subsample, k-means centres,
and Z optimised with the hyperparameters from any of them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backends import materialize
from ..checks import as_float_array, check_positive_int, check_seed, check_square_sums_finite
from ..chunks import row_slices
from .base import InducingSpec, _check_m, _check_m_le_n


@dataclass(frozen=True, eq=False)
class Fixed(InducingSpec):
    """Use the given inducing inputs Z (M, D) as they are.

    Z is stored as a read-only float copy, so that the frozen spec cannot change through the
    caller's array; two specs are equal when their Z are.

    Parameters
    ----------
    Z : array_like, shape (M, D)
        Finite inducing inputs, M >= 1.

    Raises
    ------
    TypeError, ValueError
        If Z is not a finite numeric 2-D array with at least one row.
    """

    Z: object
    lazy_inputs = True

    def __post_init__(self):
        Z = np.array(as_float_array("Fixed", "Z", self.Z, expected="an (M, D) array of inducing inputs"),
                     dtype=float)
        if Z.ndim != 2 or Z.shape[0] < 1:
            raise ValueError(f"Fixed: Z must be a 2-D array (M, D) with M >= 1, got shape {Z.shape}")
        if not np.all(np.isfinite(Z)):
            raise ValueError("Fixed: Z must be finite (no NaN or inf)")
        check_square_sums_finite("Fixed", "Z", Z)
        Z.flags.writeable = False
        object.__setattr__(self, "Z", Z)

    def given_columns(self):
        return self.Z.shape[1]

    def initial_Z(self, X, y, context=None):
        if self.Z.shape[1] != X.shape[1]:
            raise ValueError(f"Fixed: Z has {self.Z.shape[1]} columns but X has {X.shape[1]} features")
        return self.Z.copy()


@dataclass(frozen=True)
class Subsample(InducingSpec):
    """m training inputs drawn uniformly without replacement (``np.random.default_rng(seed)``).

    Parameters
    ----------
    m : int
        Number of inducing points M (at most N).
    seed : int or None, default 0
        Seed of the draw.

    Raises
    ------
    ValueError
        If ``m`` is not a positive integer or ``seed`` not a valid seed.
    """

    m: int
    seed: int = 0
    lazy_inputs = True

    def __post_init__(self):
        _check_m("Subsample", self.m)
        check_seed("Subsample", self.seed)

    def initial_Z(self, X, y, context=None):
        _check_m_le_n("Subsample", self.m, X.shape[0])
        idx = np.random.default_rng(self.seed).choice(X.shape[0], size=self.m, replace=False)
        # np.array copies a NumPy X's rows and computes a Dask X's.
        return np.array(X[np.sort(idx)])


def _squared_distances(X, C, x_sq=None):
    """(n, k) squared distances between the rows of X and of C; ``x_sq`` the rows' squared norms
    if already at hand (they are the same numbers as computed here)."""
    x_sq = np.sum(X * X, 1) if x_sq is None else x_sq
    # In place on the product (the same numbers as x_sq - 2 X C^T + |c|^2 term by term: the factor
    # -2 is exact): three (n, k) temporaries fewer, half of each Lloyd iteration's time at
    # n = 8,192, k = 100 (letter's k-means, 130 iterations).
    D = X @ C.T
    D *= -2.0
    D += x_sq[:, None]
    D += np.sum(C * C, 1)
    return np.maximum(D, 0.0, out=D)


@dataclass(frozen=True)
class KMeans(InducingSpec):
    """Cluster centres of k-means (k-means++ initialisation, Arthur & Vassilvitskii 2007, then
    Lloyd iterations until no assignment changes or ``max_iter``).

    ``sample``: None clusters every training row; an integer clusters that many rows drawn
    uniformly without replacement (``np.random.default_rng(seed)``), the usual practice at large
    N (each Lloyd iteration is O(N M D): k-means of 10^6 twonorm rows at M = 128 takes ~80 s, of
    10^4 sampled rows 0.6 s), and of a Dask X only those rows are read.

    Parameters
    ----------
    m : int
        Number of clusters M (at most N).
    seed : int or None, default 0
        Seed of the k-means++ draws and of ``sample``.
    max_iter : int, default 100
        Most Lloyd iterations.
    sample : int, optional
        Cluster this many rows drawn at random (at least ``m``); None clusters all rows.

    Raises
    ------
    ValueError
        If an argument is out of range.
    """

    m: int
    seed: int = 0
    max_iter: int = 100
    sample: int | None = None

    def __post_init__(self):
        _check_m("KMeans", self.m)
        check_seed("KMeans", self.seed)
        check_positive_int("KMeans", "max_iter", self.max_iter)
        if self.sample is not None:
            check_positive_int("KMeans", "sample", self.sample)
            if self.sample < self.m:
                raise ValueError(f"KMeans: sample must be None or at least m = {self.m}, got {self.sample!r}")

    @property
    def lazy_inputs(self):
        return self.sample is not None

    def initial_Z(self, X, y, context=None):
        n = X.shape[0]
        _check_m_le_n("KMeans", self.m, n)
        rng = np.random.default_rng(self.seed)
        if self.sample is not None and self.sample < n:
            # np.array copies a NumPy X's rows and computes a Dask X's.
            X = np.array(X[np.sort(rng.choice(n, size=self.sample, replace=False))])
            n = self.sample
        else:                                  # all rows (lazy_inputs leaves a Dask X as it is)
            X = materialize(X)
        # Overflowing distances would reach rng.choice as NaN probabilities.
        check_square_sums_finite("KMeans", "X", X)
        x_sq = np.sum(X * X, 1)
        centres = np.empty((self.m, X.shape[1]))
        centres[0] = X[rng.integers(n)]
        closest = _squared_distances(X, centres[:1], x_sq)[:, 0]
        for k in range(1, self.m):
            total = closest.sum()
            # All remaining points coincide with a centre: any choice is as good.
            idx = rng.integers(n) if total <= 0 else rng.choice(n, p=closest / total)
            centres[k] = X[idx]
            closest = np.minimum(closest, _squared_distances(X, centres[k:k + 1], x_sq)[:, 0])
        labels = np.full(n, -1)
        for _ in range(self.max_iter):
            new = np.concatenate([np.argmin(_squared_distances(X[s], centres, x_sq[s]), 1)
                                  for s in row_slices(n, 8192)])
            if np.array_equal(new, labels):
                break
            labels = new
            counts = np.bincount(labels, minlength=self.m)
            # Per-column bincounts add each cluster's rows in row order, as np.add.at did (the
            # same sums), at a fraction of its cost.
            sums = np.stack([np.bincount(labels, weights=X[:, d], minlength=self.m) for d in range(X.shape[1])],
                            axis=1)
            filled = counts > 0       # an empty cluster keeps its previous centre
            centres[filled] = sums[filled] / counts[filled, None]
        return centres


@dataclass(frozen=True)
class Optimized(InducingSpec):
    """Start from ``init`` (another spec, or an (M, D) array) and optimise Z with the hyperparameters.

    Pseudo-inputs (Snelson & Ghahramani 2006; Titsias 2009 section 3; Naish-Guzman & Holden
    (2007) section 4 for the FITC-EP gradient in Z).

    Parameters
    ----------
    init : InducingSpec or array_like of shape (M, D)
        Where Z starts; an array is taken as ``Fixed(init)``.

    Raises
    ------
    TypeError, ValueError
        If ``init`` is itself ``Optimized``, or neither a spec nor a valid (M, D) array.
    """

    init: object
    optimize = True

    def __post_init__(self):
        init = self.init
        if isinstance(init, Optimized):
            raise TypeError("Optimized: init must not itself be Optimized")
        if not isinstance(init, InducingSpec):
            try:
                init = Fixed(init)
            except (TypeError, ValueError) as err:
                # Fixed's own message names Fixed and Z, which the caller never wrote.
                raise type(err)(f"Optimized: init must be a gd.inducing spec or an (M, D) array of inducing "
                                f"inputs, got {init!r} ({err})") from err
        object.__setattr__(self, "init", init)

    @property
    def lazy_inputs(self):
        return self.init.lazy_inputs

    @property
    def selects_training_rows(self):
        return self.init.selects_training_rows

    def given_columns(self):
        return self.init.given_columns()

    def initial_Z(self, X, y, context=None):
        return self.init.initial_Z(X, y, context)

    def select(self, X, y, context=None):
        """The ``init`` spec's selection (Z is then optimised by ``Model.fit``).

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
        return self.init.select(X, y, context)
