"""Result types shared by the inference methods."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class PredictiveState:
    """What prediction needs, in one form for every Gaussian method.

    f_* | y ~ N(K_*z weights, k_** - diag(K_*z correction K_z*)); for sparse methods Z are the
    inducing inputs, ``weights = Sigma^-1 K_uf Lambda^-1 y`` and
    ``correction = K_uu^-1 - Sigma^-1``; for the exact GP Z = X, ``weights = (K + Lambda)^-1 y``
    and ``correction = (K + Lambda)^-1``.  ``q_mean`` (M,) and ``q_cov`` (M, M) are the
    Gaussian q(u) (for Exact: the posterior of f at X).
    """

    Z: np.ndarray
    weights: np.ndarray
    correction: np.ndarray
    q_mean: np.ndarray
    q_cov: np.ndarray


@dataclass
class Evaluation:
    """One evaluation of an inference method at fixed hyperparameters."""

    log_evidence: float
    grads: dict                 # d log_evidence / d natural hyperparameter value
    dZ: np.ndarray | None       # d log_evidence / d Z (None when not computed)
    jitter: float               # multiple of mean(diag) actually added (ladder or fixed)
    state: PredictiveState | None
    warm: object = None         # EP/QP sites, Polya-Gamma c: the local state that warm-starts the next evaluation
    # (weights w (N,), weighted targets r (N,)) of the Gaussian pseudo-regression the method
    # amounts to at these hyperparameters -- noise 1/w, targets r/w.  Greedy inducing selection
    # reads them (HGV weights, GreedyBound's bound); None where the method does not provide them.
    pseudo_data: tuple | None = None
