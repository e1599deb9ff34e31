"""Inference methods (``gd.inference``): small frozen declarations behind one interface.

Each class declares, beside its options, everything :class:`gpdsl.Model` needs to run it, so
that a method is added in one place (a class in one of this package's modules and its numerical
module in :mod:`gpdsl.methods`) and ``Model`` holds no method-specific branch:

* ``requires``: the capability it asks of a likelihood (:meth:`gpdsl.likelihoods.Likelihood.provides`:
  ``"noise"``, ``"log_density_derivatives"``, ``"site_model"``, ``"variational_expectations"``,
  ``"polya_gamma"``); any likelihood that provides it is accepted, a user's subclass included;
* ``inducing_rule``: ``"required"``, ``"optional"`` or ``"forbidden"`` inducing inputs;
* :meth:`Inference.evaluate`: objective (log evidence or bound), its gradients in every free
  hyperparameter (a missing one is an error, :class:`gpdsl.MissingGradientError`), the
  predictive state and the local state that warm-starts the next evaluation;
* ``local_state``: how that local state is saved with a posterior (a
  :class:`gpdsl.methods.common.LocalStateFormat`), or None;
* :meth:`Inference.within_fit`: the declaration the optimiser's evaluations use (EP and QP sweep
  their sites, collapsed Pólya-Gamma updates its c, to a looser tolerance there than for the
  posterior);
* :meth:`Inference.variational_entries`: parameters the method adds to the hyperparameters and
  optimises with them (SVGP's q(u), VGP's q(f));
* :meth:`Inference.outer_loop`: an optional loop run after the hyperparameter optimisation (QP's
  Algorithm 1);
* :meth:`Inference.minimise`: the optimiser (L-BFGS-B, or a method's own: the minibatch steps);
* ``log_evidence_kind``: what the posterior's ``log_evidence`` is, in words;
* ``supports_dask_chunks``: whether a sparse fit on a Dask X runs its passes as Dask tasks;
* ``marginalises_latent``: whether the objective is a function of the hyperparameters alone, f
  integrated out (what :meth:`gpdsl.Model.sample` needs; False for SVGP, VGP and minibatch
  PolyaGamma, which optimise a q with them);
* ``evidence_is_bound``: whether ``log_evidence`` is a lower bound (VFE, PolyaGamma, the ELBOs), so
  that :meth:`gpdsl.Model.sample` draws a pseudo-posterior.
* ``fits_by_minibatch``: whether :meth:`Inference.minimise` is the method's own minibatch optimiser
  (SVGP with ``batch_size``, PolyaGamma with ``minibatch``), not L-BFGS-B.

:data:`INFERENCE` is the one registry, by class name (model files and the CLI use it); a class
registers itself when defined.

The package's modules: :mod:`~gpdsl.inference.base` (the :class:`Inference` interface, the
shared options checks, :func:`supported_pairs`), :mod:`~gpdsl.inference.gaussian` (Exact, VFE,
DTC, FITC), :mod:`~gpdsl.inference.sites` (EP, QP), :mod:`~gpdsl.inference.polya_gamma`
(PolyaGamma), :mod:`~gpdsl.inference.laplace` (Laplace) and :mod:`~gpdsl.inference.variational`
(SVGP, VGP).
"""
from .base import Inference, supported_pairs
# Imported in the order INFERENCE has always listed them (registration order).
from .gaussian import DTC, FITC, VFE, Exact  # isort: skip
from .sites import EP, QP, QP_HYPERPARAMETERS, SCHEDULES  # isort: skip
from .polya_gamma import PolyaGamma  # isort: skip
from .laplace import Laplace  # isort: skip
from .variational import Q_UPDATES, SVGP, VGP  # isort: skip

# The registry model files (TOML), saved posteriors and the CLI read: every concrete method.
INFERENCE = Inference.registry

__all__ = ["Inference", "Exact", "VFE", "DTC", "FITC", "EP", "QP", "PolyaGamma", "Laplace", "SVGP", "VGP", "INFERENCE"]
