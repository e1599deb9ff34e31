"""Multi-class classification: :class:`Categorical`, K classes through K latent functions.

The likelihood sees a row's K latent values at once: its operations take latent arrays of shape
(n, K) (``n_latent = K``) where the single-output likelihoods take (n,), and the targets are the
class codes 0..K-1 as floats.  The links:

* ``"softmax"``: p(y = k | f) = exp(f_k) / sum_j exp(f_j).
* ``"robustmax"`` (GPflow's ``RobustMax``): p(y = k | f) = 1 - epsilon if k = argmax_j f_j, else
  epsilon / (K - 1).
* ``"logistic_softmax"`` (Galy-Fajou, Wenzel, Donner & Opper 2020):
  p(y = k | f) = sigma(f_k) / sum_j sigma(f_j), the link the Pólya-Gamma + Poisson augmentation
  makes conditionally conjugate (:mod:`gpdsl.methods.logistic_softmax`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy import special

from ..checks import is_integer, is_number
from .base import Likelihood

LINKS = ("softmax", "robustmax", "logistic_softmax")


def _log_normaliser(link, F):
    """log sum_j g(f_j) of the link's unnormalised class weights g, shape F.shape[:-1]."""
    if link == "softmax":
        return special.logsumexp(F, axis=-1)
    return special.logsumexp(-np.logaddexp(0.0, -F), axis=-1)


@dataclass(frozen=True, eq=False)
class Categorical(Likelihood):
    """K classes, one latent function each: p(y = k | f_1..f_K) through ``link``.

    Labels are the integers 0..K-1, or any K distinct values given as ``classes`` (their order is
    the class order; the posterior's ``class`` coordinate).

    Parameters
    ----------
    n_classes : int
        K >= 2, the number of classes (and of latent functions).
    link : {"softmax", "robustmax", "logistic_softmax"}, default "softmax"
        The link from the K latent values to the class probabilities (module docstring).
    epsilon : float, default 1e-3
        ``"robustmax"``: the probability mass, in (0, 1), spread over the classes that are not the
        argmax (GPflow's default); unused by the other links.
    classes : sequence or None, default None
        The K labels, in class order; None: the labels are the codes 0..K-1.

    Raises
    ------
    ValueError
        K < 2 or not an integer, an unknown link, epsilon outside (0, 1), or ``classes`` not K
        distinct labels.
    """

    n_classes: int
    link: str = "softmax"
    epsilon: float = 1e-3
    classes: tuple | None = None
    target_kind = "categorical"
    ridge_cause = "the latent scale grows without bound when the classes are nearly separable"

    def __post_init__(self):
        if isinstance(self.n_classes, bool) or not is_integer(self.n_classes) or self.n_classes < 2:
            raise ValueError(f"Categorical: n_classes must be an integer >= 2 (one latent function per class), "
                             f"got {self.n_classes!r}")
        object.__setattr__(self, "n_classes", int(self.n_classes))
        if self.link not in LINKS:
            raise ValueError(f"Categorical: link must be one of {LINKS}, got {self.link!r}")
        if isinstance(self.epsilon, bool) or not is_number(self.epsilon) or not 0.0 < float(self.epsilon) < 1.0:
            raise ValueError(f"Categorical: epsilon must be a number in (0, 1), got {self.epsilon!r}")
        object.__setattr__(self, "epsilon", float(self.epsilon))
        if self.classes is not None:
            classes = tuple(np.asarray(self.classes).tolist())
            if np.ndim(self.classes) != 1 or len(classes) != self.n_classes or len(set(classes)) != len(classes):
                raise ValueError(f"Categorical: classes must be {self.n_classes} distinct labels (one per class), "
                                 f"got {self.classes!r}")
            object.__setattr__(self, "classes", classes)

    @property
    def n_latent(self):
        """K: the latent functions a row's likelihood depends on."""
        return self.n_classes

    @classmethod
    def variants(cls):
        """One instance per link, three classes each.

        Returns
        -------
        tuple of Categorical
        """
        return tuple(cls(3, link) for link in LINKS)

    def provides(self, capability):
        """As :meth:`Likelihood.provides`; ``"polya_gamma"`` for the logistic-softmax link (its
        augmentation), ``"log_density_derivatives"`` (Laplace) for the softmax link only.

        Parameters
        ----------
        capability : str
        """
        if capability == "polya_gamma":
            return self.link == "logistic_softmax"
        if capability == "log_density_derivatives":
            return self.link == "softmax"
        if capability == "site_model":
            return False
        return super().provides(capability)

    def class_labels(self):
        """The class coordinate: ``classes``, or 0..K-1.

        Returns
        -------
        ndarray, shape (K,)
        """
        return np.asarray(self.classes) if self.classes is not None else np.arange(self.n_classes)

    def encode(self, y, name="y"):
        """Labels as float class codes 0..K-1.

        Parameters
        ----------
        y : array_like, shape (n,) or (n, 1)
            Labels: the values of ``classes``, or integers 0..K-1 when ``classes`` is None.
        name : str, default "y"
            The argument's name, for messages.

        Returns
        -------
        ndarray, shape (n,)
            float codes.

        Raises
        ------
        ValueError
            A label that is not one of the classes (or not an integer in 0..K-1).
        """
        labels = np.asarray(y)
        if labels.ndim == 2 and labels.shape[1] == 1:
            labels = labels[:, 0]
        if labels.ndim != 1:
            raise ValueError(f"Categorical: {name} must be 1-D with one label per row, got shape {labels.shape}")
        if self.classes is None:
            if labels.dtype.kind not in "biuf":
                raise ValueError(f"Categorical: {name} must be integer class codes 0..{self.n_classes - 1} (pass "
                                 f"classes=[...] for labels of another kind), got dtype {labels.dtype}")
            codes = labels.astype(float)
            bad = ~np.isin(codes, np.arange(self.n_classes))
            if np.any(bad):
                raise ValueError(f"Categorical: {name} must be integer class codes 0..{self.n_classes - 1}; got "
                                 f"{sorted(set(labels[bad].tolist()))[:6]}")
            return codes
        lookup = {label: code for code, label in enumerate(self.classes)}
        listed = labels.tolist()
        unseen = sorted({label for label in listed if label not in lookup}, key=str)
        if unseen:
            raise ValueError(f"Categorical: {name} holds labels that are not among the classes "
                             f"{list(self.classes)}: {unseen[:6]}")
        return np.array([lookup[label] for label in listed], dtype=float)

    def with_labels_of(self, y):
        """With ``classes=None`` and labels that are not the codes 0..K-1: this likelihood with
        ``classes`` the K distinct labels of y, sorted (scikit-learn's order); otherwise self.

        Parameters
        ----------
        y : array_like, shape (N,)

        Raises
        ------
        ValueError
            Labels that are not codes and not K distinct values.
        """
        if self.classes is not None:
            return self
        labels = np.asarray(y)
        labels = labels[:, 0] if labels.ndim == 2 and labels.shape[1] == 1 else labels
        if labels.dtype.kind in "biuf" and np.all(np.isin(labels, np.arange(self.n_classes))):
            return self
        distinct = np.unique(labels)
        if distinct.size != self.n_classes:
            raise ValueError(f"Categorical: y must be the codes 0..{self.n_classes - 1} or {self.n_classes} distinct "
                             f"labels (n_classes={self.n_classes}); got {distinct.size} distinct values "
                             f"{distinct.tolist()[:6]}")
        return dataclasses.replace(self, classes=tuple(distinct.tolist()))

    def coded_targets(self, y, n, name="y"):
        """Labels (the ``classes``, or the codes 0..K-1) as float codes (n,), checked against n rows.

        Parameters
        ----------
        y : array_like, shape (n,)
        n : int
        name : str, default "y"

        Raises
        ------
        ValueError
            Another length, or a label that is not a class.
        """
        codes = self.encode(y, name)
        if codes.shape[0] != n:
            raise ValueError(f"len({name}) = {codes.shape[0]} does not match len(X) = {n}")
        return codes

    def prepare_targets(self, y):
        """Float class codes checked to be 0..K-1.

        Parameters
        ----------
        y : ndarray, shape (N,)
        """
        codes = np.asarray(y, dtype=float)
        if not np.all(np.isin(codes, np.arange(self.n_classes))):
            raise ValueError(f"Categorical: coded targets must be 0..{self.n_classes - 1}")
        return codes

    def log_density(self, y, F):
        """log p(y_n | f_n) for codes y (n,) and latent values F (n, K) -> (n,).

        Parameters
        ----------
        y : ndarray, shape (n,)
        F : ndarray, shape (n, K)
        """
        F = np.asarray(F, dtype=float)
        codes = np.asarray(y).astype(np.intp)
        picked = np.take_along_axis(F, codes[..., None], axis=-1)[..., 0]
        if self.link == "robustmax":
            win = picked >= F.max(axis=-1)
            return np.where(win, np.log1p(-self.epsilon), np.log(self.epsilon / (self.n_classes - 1)))
        if self.link == "softmax":
            return picked - _log_normaliser("softmax", F)
        return -np.logaddexp(0.0, -picked) - _log_normaliser("logistic_softmax", F)

    def class_probabilities(self, F):
        """p(y = k | f) for latent values F (..., K) -> (..., K).

        Parameters
        ----------
        F : ndarray, shape (..., K)
        """
        F = np.asarray(F, dtype=float)
        if self.link == "robustmax":
            win = np.argmax(F, axis=-1)[..., None] == np.arange(self.n_classes)
            return np.where(win, 1.0 - self.epsilon, self.epsilon / (self.n_classes - 1))
        g = F if self.link == "softmax" else -np.logaddexp(0.0, -F)
        return np.exp(g - _log_normaliser(self.link, F)[..., None])

    def sample(self, F, rng):
        """Class codes drawn with p(y | f), F (..., K) -> (...).

        Parameters
        ----------
        F : ndarray, shape (..., K)
        rng : numpy.random.Generator
        """
        cumulative = np.cumsum(self.class_probabilities(F), axis=-1)
        u = rng.uniform(size=cumulative.shape[:-1] + (1,)) * cumulative[..., -1:]
        return np.sum(cumulative < u, axis=-1).astype(float)

    def constant_model_log_likelihood(self, y):
        """sum_n log p(y_n | f = 0) = -N log K, the limit of every method as the kernel variance
        goes to 0 (softmax and logistic softmax); None for robust-max, whose f = 0 ties every class.

        Parameters
        ----------
        y : ndarray, shape (N,)
        """
        return None if self.link == "robustmax" else -float(len(y) * np.log(self.n_classes))

    def surrogate(self, X, y):
        """Greedy selection's weights before the first fit: the classes' curvatures at f = 0 summed,
        which are the same for every row (so HGV's first round is GV's); no targets (the classes'
        regressions are not one).

        Parameters
        ----------
        X : ndarray, shape (N, D)
        y : ndarray, shape (N,)

        Returns
        -------
        weights : ndarray, shape (N,)
        targets : None
        """
        # softmax: the Hessian's diagonal 1/K (1 - 1/K) a class; the logistic softmax's and the
        # robust-max's are of that order too, and a constant is all the first round can use.
        return np.full(X.shape[0], (self.n_classes - 1.0) / self.n_classes), None

    def log_density_bound(self, y):
        # p(y | f) -> 1 (robust-max: 1 - epsilon) as the labelled latent dominates.
        return float(len(y) * np.log1p(-self.epsilon)) if self.link == "robustmax" else 0.0

    def describe(self):
        """``Categorical(3, softmax)``.

        Returns
        -------
        str
        """
        return f"Categorical({self.n_classes}, {self.link})"


__all__ = ["Categorical", "LINKS"]
