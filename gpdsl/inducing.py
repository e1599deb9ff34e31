"""Inducing-point specifications (``gd.inducing``).

A spec turns the training inputs into the initial inducing inputs Z (M, D) through
``initial_Z(X, y)``; ``optimize`` says whether Z then joins the gradient optimisation.
The greedy selection rules of the later issue plug in here as further specs with the same
``initial_Z`` hook.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .chunks import row_slices


def _check_m(owner, m):
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"{owner}: m must be a positive integer, got {m!r}")


def _check_m_le_n(owner, m, n):
    if m > n:
        raise ValueError(f"{owner}: m = {m} inducing points is larger than the N = {n} training points")


class InducingSpec:
    optimize = False

    def initial_Z(self, X, y):
        raise NotImplementedError


@dataclass(frozen=True)
class Fixed(InducingSpec):
    """Use the given inducing inputs Z (M, D) as they are."""

    Z: object

    def __post_init__(self):
        Z = np.asarray(self.Z, dtype=float)
        if Z.ndim != 2 or Z.shape[0] < 1:
            raise ValueError(f"Fixed: Z must be a 2-D array (M, D) with M >= 1, got shape {Z.shape}")
        if not np.all(np.isfinite(Z)):
            raise ValueError("Fixed: Z must be finite (no NaN or inf)")
        object.__setattr__(self, "Z", Z)

    def initial_Z(self, X, y):
        if self.Z.shape[1] != X.shape[1]:
            raise ValueError(f"Fixed: Z has {self.Z.shape[1]} columns but X has {X.shape[1]} features")
        return self.Z.copy()


@dataclass(frozen=True)
class Subsample(InducingSpec):
    """m training inputs drawn uniformly without replacement (``np.random.default_rng(seed)``)."""

    m: int
    seed: int = 0

    def __post_init__(self):
        _check_m("Subsample", self.m)

    def initial_Z(self, X, y):
        _check_m_le_n("Subsample", self.m, X.shape[0])
        idx = np.random.default_rng(self.seed).choice(X.shape[0], size=self.m, replace=False)
        return X[np.sort(idx)].copy()


def _squared_distances(X, C):
    return np.maximum(np.sum(X * X, 1)[:, None] - 2.0 * X @ C.T + np.sum(C * C, 1)[None, :], 0.0)


@dataclass(frozen=True)
class KMeans(InducingSpec):
    """Cluster centres of k-means (k-means++ initialisation, Arthur & Vassilvitskii 2007, then
    Lloyd iterations until no assignment changes or ``max_iter``)."""

    m: int
    seed: int = 0
    max_iter: int = 100

    def __post_init__(self):
        _check_m("KMeans", self.m)
        if not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 1:
            raise ValueError(f"KMeans: max_iter must be a positive integer, got {self.max_iter!r}")

    def initial_Z(self, X, y):
        n = X.shape[0]
        _check_m_le_n("KMeans", self.m, n)
        rng = np.random.default_rng(self.seed)
        centres = np.empty((self.m, X.shape[1]))
        centres[0] = X[rng.integers(n)]
        closest = _squared_distances(X, centres[:1])[:, 0]
        for k in range(1, self.m):
            total = closest.sum()
            # All remaining points coincide with a centre: any choice is as good.
            idx = rng.integers(n) if total <= 0 else rng.choice(n, p=closest / total)
            centres[k] = X[idx]
            closest = np.minimum(closest, _squared_distances(X, centres[k:k + 1])[:, 0])
        labels = np.full(n, -1)
        for _ in range(self.max_iter):
            new = np.concatenate([np.argmin(_squared_distances(X[s], centres), 1)
                                  for s in row_slices(n, 8192)])
            if np.array_equal(new, labels):
                break
            labels = new
            counts = np.bincount(labels, minlength=self.m)
            sums = np.zeros_like(centres)
            np.add.at(sums, labels, X)
            filled = counts > 0       # an empty cluster keeps its previous centre
            centres[filled] = sums[filled] / counts[filled, None]
        return centres


@dataclass(frozen=True)
class Optimized(InducingSpec):
    """Start from ``init`` (another spec, or an (M, D) array) and optimise Z with the
    hyperparameters (pseudo-inputs, Snelson & Ghahramani 2006; Titsias 2009 section 3)."""

    init: object
    optimize = True

    def __post_init__(self):
        init = self.init
        if not isinstance(init, InducingSpec):
            init = Fixed(init)
        elif isinstance(init, Optimized):
            raise TypeError("Optimized: init must not itself be Optimized")
        object.__setattr__(self, "init", init)

    def initial_Z(self, X, y):
        return self.init.initial_Z(X, y)


INDUCING = {cls.__name__: cls for cls in (Fixed, Subsample, KMeans, Optimized)}

__all__ = ["InducingSpec", "Fixed", "Subsample", "KMeans", "Optimized", "INDUCING"]
