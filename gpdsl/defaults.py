"""Defaults chosen by the data: how a multi-class model is fitted when its declaration leaves it open.

One rule, :func:`declaration`, used by both entry points:

* ``gd.Model(kernel, gd.likelihoods.Categorical(K))`` declared without ``inference``: the method
  is chosen when ``fit`` sees the data (:meth:`gpdsl.Model.resolved`), and the posterior carries
  the model it chose (``post.model``: its ``to_dict``, ``to_toml`` and ``save`` write the chosen
  method, so a saved or reloaded fit is the fit that ran; the unfitted model's ``to_dict`` omits
  ``inference`` and reads back as a model that chooses again);
* ``gpdsl.sklearn.GPClassifier()`` with more than two classes and ``inference=None``; its
  ``model_`` is the chosen model.

The rule, for N training rows, D input columns and K classes (``Categorical(K)``):

=======================  ======================================  =======================  ==========
rows N                   method                                  inducing points          batch
=======================  ======================================  =======================  ==========
N <= DENSE_MAX_ROWS      dense Laplace (R&W Algorithm 3.3)       none                     all rows
(softmax link)
otherwise                SVGP, minibatch natural-gradient steps  KMeans(min(100, N)),     256
                         (its own step sizes and stopping rule)  fixed; k-means on 20,000
                                                                 rows drawn above that
=======================  ======================================  =======================  ==========

A link other than softmax (robust-max, logistic-softmax) has no Laplace approximation here and
takes the SVGP row at every N.  Given parts override: an ``inducing`` spec given with no
``inference`` is kept (its M, not 100); an ``inference`` given is used as it is.  Step sizes and
the stopping rule are SVGP's defaults (``learning_rate``, ``natural_step``, ``stop_tol``,
``stop_window``; the confirmation of a stop by one full pass, issue 45), the step cap is
``fit(max_iter=...)``.  Neither D nor K changes the choice at the sizes measured.

What was measured (one thread, the issue-28 splits of ``benchmarks/multiclass_data.py``; CPU
seconds of the fit, test NLPD; ``benchmarks/HISTORY.md``, "Issue 46: multi-class defaults"):

* inducing points: digits (1,437 x 64, K = 10), robust-max minibatch SVGP, B = 256: M = 50 gave
  NLPD 0.136 in 17.5 s, M = 100 0.099 at 1,000 steps (12.4 s); M = 200 costs 4x a step (O(B M^2 K))
  for an acceptance budget of 30 s;
* ARD: see :data:`ARD` below;
* the dense Laplace limit: :data:`DENSE_MAX_ROWS`.

Defaults for one latent function (binary classification, regression) are not chosen here: a
``Model`` of such a likelihood declared without ``inference`` is ``Exact()`` as before, and
``GPClassifier`` keeps its binary defaults.
"""
from __future__ import annotations

from . import inducing as _inducing
from . import inference as _inference

#: The dense multi-class Laplace fit (R&W Algorithm 3.3, O(K N^3) a Newton step) is the default up
#: to this many training rows (softmax link); above, the minibatch SVGP.
DENSE_MAX_ROWS = 300
#: Inducing points of the SVGP default (at most N).
INDUCING_POINTS = 100
#: k-means runs on this many rows drawn at random above it (each Lloyd iteration is O(N M D)).
KMEANS_SAMPLE = 20_000
#: Rows per minibatch step of the SVGP default (at most N).
BATCH_SIZE = 256
#: Whether the default kernel has one length-scale per input column (ARD).
ARD = False


def chooses_inference(likelihood):
    """Whether a model of ``likelihood`` declared without an inference method has it chosen by
    :func:`declaration` at fit time: a likelihood of more than one latent function (``Categorical``).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood

    Returns
    -------
    bool
    """
    return int(getattr(likelihood, "n_latent", 1)) > 1


def declaration(n_rows, n_features, n_classes, likelihood, inducing=None, seed=0):
    """The inference method and inducing spec of a K-class model of N rows and D columns (the table
    of the module docstring).

    Parameters
    ----------
    n_rows : int
        N, the training rows.
    n_features : int
        D, the input columns (recorded; no choice depends on it at the sizes measured).
    n_classes : int
        K, the classes (the likelihood's latent functions).
    likelihood : gpdsl.likelihoods.Likelihood
        The model's likelihood: the dense Laplace row needs one that Laplace accepts (softmax).
    inducing : gpdsl.inducing.InducingSpec or None, default None
        A spec the user gave: kept (and the method is then a sparse one).
    seed : int, default 0
        Seed of the k-means start and of the minibatches.

    Returns
    -------
    dict
        ``{"inference": gpdsl.inference.Inference, "inducing": InducingSpec or None}``, the keyword
        arguments of :class:`gpdsl.Model` that the declaration left open.

    Raises
    ------
    ValueError
        N, D or K not positive integers, or K not the likelihood's number of latent functions.
    """
    for name, value in (("n_rows", n_rows), ("n_features", n_features), ("n_classes", n_classes)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"declaration: {name} must be a positive integer, got {value!r}")
    if int(n_classes) != int(getattr(likelihood, "n_latent", 1)):
        raise ValueError(f"declaration: n_classes = {n_classes}, but {likelihood!r} has "
                         f"{getattr(likelihood, 'n_latent', 1)} latent functions")
    n_rows = int(n_rows)
    if inducing is None and n_rows <= DENSE_MAX_ROWS:
        dense = _inference.Laplace()
        try:
            dense.check_likelihood(likelihood)
            return {"inference": dense, "inducing": None}
        except (TypeError, ValueError):
            pass                        # a link Laplace does not take: the SVGP row
    if inducing is None:
        inducing = _inducing.KMeans(min(INDUCING_POINTS, n_rows), seed=seed,
                                    sample=KMEANS_SAMPLE if n_rows > KMEANS_SAMPLE else None)
    return {"inference": _inference.SVGP(batch_size=min(BATCH_SIZE, n_rows), seed=seed), "inducing": inducing}


__all__ = ["declaration", "chooses_inference", "DENSE_MAX_ROWS", "INDUCING_POINTS", "BATCH_SIZE", "ARD"]
