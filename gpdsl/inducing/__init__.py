"""Inducing-point specifications (``gd.inducing``).

A spec turns the training inputs into the initial inducing inputs Z (M, D) through
``initial_Z(X, y, context=None)``, or into a :class:`Selection` (Z plus, for the greedy rules,
the picked row indices, the criterion after each pick and why selection stopped) through
``select(X, y, context=None)``; ``optimize`` says whether Z then joins the gradient
optimisation, and ``reinit`` whether the model re-selects Z between hyperparameter fits
(the greedy-variance reinitialisation loop, thesis 2.7.2 / 4.3.2).

* :class:`Fixed`, :class:`Subsample`, :class:`KMeans`, :class:`Optimized` use X only.
* :class:`GreedyVariance` (GV; with ``weighted=True`` heteroscedastic GV, thesis 3.3.2) and
  :class:`GreedyBound` (Titsias 2009 section 3.2) pick training points and need a
  :class:`SelectionContext` (the kernel and its hyperparameter values, plus per-point weights
  and pseudo-targets) from the model.  Their rank-1 steps are the jitted kernels of
  :mod:`gpdsl._jit.greedy`.
"""
from .base import InducingSpec, NoCandidateError, Selection, SelectionContext
# The specs register themselves in the order they are defined: those of X only first.
from .simple import Fixed, KMeans, Optimized, Subsample  # isort: skip
from .greedy import GreedyBound, GreedyVariance  # isort: skip

# The registry model files (TOML) and ``gpdsl.load`` read: every inducing spec, by class name.
INDUCING = InducingSpec.registry

__all__ = ["InducingSpec", "SelectionContext", "Selection", "Fixed", "Subsample", "KMeans", "Optimized",
           "GreedyVariance", "GreedyBound", "NoCandidateError", "INDUCING"]
