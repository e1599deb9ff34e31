"""The interface every inference declaration follows (:class:`Inference`, described in
:mod:`gpdsl.inference`), the options checks and docstring blocks its families share, and
:func:`supported_pairs`."""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np

from ..checks import check_nonnegative_int, check_positive_int, check_positive_number, check_seed, is_integer, is_number
from ..components import Component, type_name
from ..likelihoods import Likelihood
from ..methods import stochastic, stopping_rule


def _less(y, offset):
    """Gaussian noise is a location family: p(y | f + o) is p(y - o | f)."""
    return y if offset is None else y - offset


def _check_chunk(owner, chunk_size):
    if chunk_size is not None and (not is_integer(chunk_size) or chunk_size < 1):
        raise ValueError(f"{owner}: chunk_size must be None or a positive integer, got {chunk_size!r}")


# The local iteration's tolerance of a fit's inner evaluations (EP/QP's sites, collapsed
# Pólya-Gamma's c: their ``fit_tol``).  Both objectives are stationary in their local state at its
# fixed point (EP's evidence in the sites, the Pólya-Gamma bound maximised over c), so a local state
# a residual r from it leaves the objective off by O(r^2) and its gradient by O(r), far below what
# the fit's convergence tests allow; the posterior's local state still converges to ``tol``, and a
# line search that fails under the looser tolerance goes on with ``tol``.  Measured on
# bench_peers.py's models (benchmarks/exp_fit_tol.py; notes_full_batch_passes.md, seventh round):
# FITC-EP (M = 128, Z optimised) on breast cancer and twonorm, seeds 0 and 1, the same L-BFGS-B
# iterations as at 1e-6 (one more on breast cancer seed 1), test NLPD within 4e-4, in 12 to 31 %
# less CPU; PGPR (k-means Z, M = 128, and HGV) on twonorm, the same test NLPD to 5 digits in 20 to
# 26 % less.
FIT_TOL = 1e-4


def _loosened_within_fit(spec):
    """``spec`` (a declaration with ``tol`` and ``fit_tol``) with its local iteration's tolerance
    at max(``fit_tol``, ``tol``): the declaration of a fit's inner evaluations (:data:`FIT_TOL`)."""
    return dataclasses.replace(spec, tol=max(spec.tol, spec.fit_tol))


class Inference(Component, family="inference"):
    """Base class of the inference declarations: the interface of the module docstring."""

    requires = ""
    inducing_rule = "forbidden"
    local_state = None
    # What ``Posterior.log_evidence`` is for this method, in words (the CLI prints it).
    log_evidence_kind = "log evidence"
    # Whether its sparse fit runs its O(N M^2) passes as Dask tasks on a Dask X (gpdsl.chunks.map_rows);
    # otherwise a Dask X is computed into memory.
    supports_dask_chunks = False
    # Whether variational_entries adds q's parameters to the optimised hyperparameters.
    optimises_variational_parameters = False
    # Whether evaluate takes a per-row offset of the latent input (Model.fit(offset=...)).
    supports_offset = True
    # Whether the objective is a function of the hyperparameters alone, f (or u) integrated out
    # (Model.sample needs that): False for a method that holds a q it optimises (SVGP, VGP, minibatch
    # Polya-Gamma), whose objective depends on (theta, q).
    marginalises_latent = True
    # Whether log_evidence is a lower bound on the log marginal likelihood (VFE, Polya-Gamma, the
    # ELBOs) rather than an approximation of it: Model.sample's draws are then of a pseudo-posterior.
    evidence_is_bound = False
    # Whether the method handles a likelihood of K > 1 latent functions (``n_latent``, a K-class
    # likelihood): K GPs a priori independent under one kernel, sharing Z.
    multi_latent = False
    # Whether minimise runs the method's own minibatch optimiser (gpdsl.methods.stochastic), not
    # L-BFGS-B: fit(subsample=n, refine=True), an L-BFGS-B run on all rows, is refused for it.
    fits_by_minibatch = False

    def accepts(self, likelihood):
        """Whether ``likelihood`` provides the capability this method ``requires`` (and, for a
        likelihood of several latent functions, whether the method handles those).

        Parameters
        ----------
        likelihood : gpdsl.likelihoods.Likelihood

        Returns
        -------
        bool
        """
        if likelihood.n_latent > 1 and not self.multi_latent:
            return False
        return likelihood.provides(self.requires)

    def check_inducing(self, likelihood, inducing):
        """Refuse an inducing spec this method cannot use with ``likelihood`` (beyond its
        ``inducing_rule``, which the model checks); nothing by default.

        Parameters
        ----------
        likelihood : gpdsl.likelihoods.Likelihood
        inducing : gpdsl.inducing.InducingSpec or None

        Raises
        ------
        ValueError
            The pair cannot use it.
        """

    def local_state_for(self, likelihood):
        """How the local state is saved with a posterior of this method and ``likelihood``
        (:class:`gpdsl.methods.common.LocalStateFormat`, or None): ``local_state`` unless the
        likelihood's latent functions give it another shape.

        Parameters
        ----------
        likelihood : gpdsl.likelihoods.Likelihood

        Returns
        -------
        gpdsl.methods.common.LocalStateFormat or None
        """
        return self.local_state

    def check_likelihood(self, likelihood):
        """Check that this method accepts ``likelihood`` (:meth:`accepts`).

        Parameters
        ----------
        likelihood : gpdsl.likelihoods.Likelihood
            The model's likelihood.

        Raises
        ------
        ValueError
            The pair is not supported: where the likelihood's class defines the operation the
            method requires but refuses it for these settings (``PerOutput``'s ``site_model`` for
            parts of several families), the message gives its reason (and a variant it would
            take); else where another variant of the likelihood's class would be (another link),
            the message names it; otherwise it lists the supported pairs.
        """
        if self.accepts(likelihood):
            return
        name = type(self).__name__
        others = [v for v in type(likelihood).variants() if self.accepts(v)]
        reason = _refusal(likelihood, self.requires)
        if reason is not None:
            example = f"; it takes e.g. {_variant_text(others[0], likelihood)}" if others else ""
            raise ValueError(f"Model: {name} (which needs {self.requires!r}): {reason}{example}")
        if others:
            wanted = " or ".join(_variant_text(v, likelihood) for v in others)
            raise ValueError(f"Model: {name} needs {wanted}, got {_variant_text(likelihood, others[0])}")
        raise ValueError(f"Model: {type(likelihood).__name__} with {name} is not supported; supported pairs: "
                         f"{', '.join(supported_pairs())} ({name} needs a likelihood that provides {self.requires!r})")

    def evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, warm, offset=None):
        """One evaluation of the method's objective at fixed hyperparameters.

        Parameters
        ----------
        kernel : gpdsl.kernels.Kernel
            The covariance function.
        likelihood : gpdsl.likelihoods.Likelihood
            The likelihood (one this method accepts, :meth:`check_likelihood`).
        values : dict
            Natural hyperparameter values by name (``"kernel.*"``, ``"likelihood.*"`` and, for
            ``q_updates="joint"``, ``"variational.*"``), each a float array of its entry's shape.
        X : ndarray or dask.array.Array, shape (N, D)
            Training inputs.
        y : ndarray, shape (N,)
            Training targets as prepared by the likelihood.
        Z : ndarray, shape (M, D), or None
            Inducing inputs (None for a dense method).
        need_grad : bool
            Compute the gradients in every free hyperparameter (and Z).
        need_state : bool
            Compute the predictive state.
        warm : object or None
            The local state of the previous evaluation (``Evaluation.warm``: EP/QP sites,
            Pólya-Gamma c, q), or None to start afresh.
        offset : ndarray, shape (N,), optional
            A known per-row offset o of the latent input: the likelihood is p(y_n | f_n + o_n)
            (``supports_offset``).

        Returns
        -------
        gpdsl.methods.common.Evaluation
            The objective (``log_evidence``: the log evidence, bound or approximation the
            method's ``log_evidence_kind`` names), its gradients, the jitter used, the state and
            the local state.
        """
        raise NotImplementedError

    def within_fit(self):
        """The declaration a fit's inner evaluations (the optimiser's) use; the fit's final
        evaluation, which builds the posterior, and every evaluation outside a fit use this one.

        Itself, unless the method can stop its local state's iterations sooner within a fit at no
        cost to the optimum (EP and QP: sites swept to ``fit_tol``; collapsed Pólya-Gamma: c
        updated to ``fit_tol``).  Where L-BFGS-B's line search fails under that declaration, the
        fit goes on from that point with this one's evaluations (``gpdsl.fitting._Objective``).

        Returns
        -------
        Inference
        """
        return self

    def variational_entries(self, n, Z, fixed_names=()):
        """Entries of the variational parameters optimised with the hyperparameters (none here).

        Parameters
        ----------
        n : int
            Number of training points N.
        Z : ndarray, shape (M, D), or None
            Inducing inputs.
        fixed_names : sequence of str
            Names held fixed in the fit (``Model.fit(fixed=...)``).

        Returns
        -------
        list of gpdsl.parameters.Entry
            The extra entries (empty unless the method optimises q with the hyperparameters).
        """
        return []

    def minimise(self, objective, u0, max_iter, progress, callback):
        """Maximise the objective over the free log-space vector from ``u0``.

        L-BFGS-B under gpdsl's stopping rule (gpdsl.model's objective) unless the method has its
        own optimiser (minibatch SVGP and Pólya-Gamma).

        Parameters
        ----------
        objective : gpdsl.fitting._Objective
            The negative objective (plus log prior) over the free log-space vector, with its
            gradient.
        u0 : ndarray, shape (P,)
            The starting point.
        max_iter : int
            Iteration (or, for minibatch methods, step) limit.
        progress : bool
            Show a progress bar.
        callback : callable or None
            Called after each iteration, as ``Model.fit`` documents.

        Returns
        -------
        scipy.optimize.OptimizeResult
            With the fields the model reads (``x``, ``nit``, ``success``, ``message``).
        """
        return objective.minimise(u0, max_iter, progress, callback)

    def outer_loop(self, objective, u, max_iter):
        """An optional loop run after the hyperparameter optimisation (QP's Algorithm 1).

        Parameters
        ----------
        objective : gpdsl.fitting._Objective
            The fit's objective.
        u : ndarray, shape (P,)
            Its optimum, the free log-space vector.
        max_iter : int
            The fit's iteration limit, for the loop's inner optimisations.

        Returns
        -------
        tuple or None
            ``(u, converged, iterations)``, or None when the method has no outer loop.
        """
        return None



def _check_minibatch_options(spec, batch_name, batch):
    """The options of a minibatch optimiser (:mod:`gpdsl.methods.stochastic`), named after
    ``spec``'s class: the batch (None or a positive integer, under ``batch_name``),
    ``learning_rate``, ``natural_step`` in (0, 1], ``seed``, and the stopping rule's
    ``stop_tol`` (positive), ``stop_window`` (a positive multiple of
    :data:`gpdsl.methods.stopping_rule.STOP_BLOCKS`, the blocks its noise is estimated from),
    ``step_decays`` and ``iterate_average`` (non-negative integers) and ``decay_factor`` (in (0,
    1))."""
    owner = type(spec).__name__
    if batch is not None:
        check_positive_int(owner, batch_name, batch)
    check_positive_number(owner, "learning_rate", spec.learning_rate)
    if not (is_number(spec.natural_step) and 0.0 < spec.natural_step <= 1.0):
        raise ValueError(f"{owner}: natural_step must be in (0, 1], got {spec.natural_step!r}")
    check_seed(owner, spec.seed)
    check_positive_number(owner, "stop_tol", spec.stop_tol)
    check_positive_int(owner, "stop_window", spec.stop_window)
    check_nonnegative_int(owner, "step_decays", spec.step_decays)
    check_nonnegative_int(owner, "iterate_average", spec.iterate_average)
    if not (is_number(spec.decay_factor) and 0.0 < spec.decay_factor < 1.0):
        raise ValueError(f"{owner}: decay_factor must be in (0, 1), got {spec.decay_factor!r}")
    if not isinstance(spec.polish, (bool, str)):
        raise TypeError(f"{owner}: polish must be True, False or 'auto', got {spec.polish!r}")
    if isinstance(spec.polish, str) and spec.polish != "auto":
        raise ValueError(f"{owner}: polish must be True, False or 'auto', got {spec.polish!r}")
    if spec.stop_window % stopping_rule.STOP_BLOCKS:
        raise ValueError(f"{owner}: stop_window must be a multiple of {stopping_rule.STOP_BLOCKS} (the stopping rule "
                         f"estimates its noise from {stopping_rule.STOP_BLOCKS} blocks of a window), "
                         f"got {spec.stop_window!r}")


# The minibatch optimiser's confirmation and polish (gpdsl.methods.stochastic), shared by SVGP and PolyaGamma.
_POLISH_PARAMETER = """    polish : bool or "auto", default "auto"
        Stochastic: where the full objective's gradient at the stopping rule's stop (one pass over
        the data) is above the full-batch tolerance, True continues with the full-batch fit from
        there (L-BFGS-B, q at its optimum at every evaluation), kept where it gains; False keeps the
        steps' end, which is then flagged converged=False with a ConvergenceWarning that says how
        to reach the optimum.  "auto" polishes fits of at most
        ``gpdsl.methods.stochastic.POLISH_AUTO_MAX_ROWS`` (2,000) rows, where it cost less than
        the steps for single-output SVGP and 3 to 56 times them for Pólya-Gamma (at most 34 s, 3
        classes at 2,000 rows), and not above, where its O(N M^2) passes cost many times the steps that the
        minibatch is chosen for (one thread, M = 64, B = 256: twonorm, binary Pólya-Gamma 1.2 s
        of steps then 12.7 s of polish at N = 5,000, 0.6 s then 23 s at 10^4; probit SVGP
        0.7 s then 1.6 s at 5,000 and 0.6 s then 6.5 s at 3 x 10^4; 0.7 s then 22 s at 10^5;
        the table in :mod:`gpdsl.methods.stochastic`).  For K latent functions True runs the joint
        finish instead (:mod:`gpdsl.methods.svgp_finish`: L-BFGS-B over the hyperparameters and q
        together, one full pass an evaluation, stopped by the rule that sets ``converged``), which
        "auto" does not choose: it needed 339 to over 2,000 passes on the multi-class benchmark
        sets (``benchmarks/HISTORY.md``, issue 46).
"""
# The minibatch stopping rule's fields (gpdsl.methods.stochastic), shared by SVGP and PolyaGamma.
_STOCHASTIC_STOP_PARAMETERS = """stop_tol : float, default 1e-3
        Stochastic: the stopping rule's tolerance, in nats per data point, on the change of the
        smoothed objective between two windows of ``stop_window`` steps (the run also stops where
        the change is within 2 standard errors of its batch noise).
    stop_window : int, default 200
        Stochastic: steps per window of the stopping rule, a multiple of 10 (the run takes at
        least 2 ``stop_window`` steps before it can stop, unless ``max_iter`` is smaller).  The
        window sets how slow a drift the rule can tell from batch noise.  100 halves the steps
        of a large-batch fit, at an accuracy cost that depends on the data: test NLPD and steps,
        windows of 100 against 200, on twonorm (probit SVGP and logit Pólya-Gamma) at N = 10^6
        (M = 128, B = 1,024, Z fixed) .06395 against .06349 (220 against 440 steps) and .06190
        against .06164 (300 against 540); at N = 2e4 (B = 1,024) and 1e5 (B = 256), M = 64, Z
        fixed or optimised, within -0.0013 to +0.0011 of the 200-step window's (8 fits, 210 to
        320 steps against 420 to 480).  On two real sets at B = 1,024, M = 64, Z fixed or
        optimised (MAGIC gamma telescope, 19,020 x 10, and electricity, 45,312 x 8; both
        methods), 100 was -0.0001 to +0.0063 worse (5 of 8 fits by more than 0.003; 210 to 360
        steps against 420 to 780); softmax, robust-max and logistic-softmax fits of 10 and 26
        classes (B = 256, M = 100, Z optimised) 0.013 worse on average (-0.017 to +0.068; 5 of 9
        by more than 0.003), and banana (N = 400, B = 32, 5 seeds, both methods) 0.011 (8 of
        10 worse).  The default window itself stops some fits short of a long run's accuracy:
        windows of 1,000 (2,100 to 3,000 steps) were better by up to 0.006 on the real sets (4 of
        8 fits by more than 0.003) and within 0.0017 on twonorm.
        ``benchmarks/exp_stop_window.py`` reruns these fits.
    step_decays : int, default 0
        Stochastic: how many times the stopping rule, where it holds, shrinks the steps instead of
        stopping the run (PyTorch's ``ReduceLROnPlateau``): ``natural_step``, ``learning_rate``
        (and SVGP's ``q_learning_rate``) are multiplied by ``decay_factor`` and the run goes on, the
        next check a whole window later (:mod:`gpdsl.methods.stochastic`).  Smaller steps leave
        less batch noise in q and the hyperparameters at the plateau: letter's softmax fit (26
        classes, B = 256, window 100) went from test NLPD 0.427 / 0.414 (seeds 0 / 1, window 200, no
        decay) to 0.399 / 0.400 with one decay of 0.3, in fewer steps (1,130 / 1,010 against
        1,200 / 1,420).  It did not help where q moves by Adam (robust-max).
    decay_factor : float in (0, 1), default 0.3
        Stochastic: the factor of each of the ``step_decays``.  Measured on letter as above (one
        decay, seeds 0-2, mean test NLPD): 0.5 0.408, 0.3 0.4005, 0.2 0.4003, 0.1 0.4025; two
        decays of 0.5 0.403 and of 0.25 0.398, at 50-130 steps more.
    iterate_average : int, default 50
        Stochastic: T > 0 returns an exponential moving average of the iterates over about the last
        T steps (a_t = a_{t-1} + (x_t - a_{t-1}) / T, of the log-hyperparameters, Z and q's m and R:
        Polyak averaging, PyTorch's ``swa_utils.AveragedModel``) instead of the last iterate; the
        steps are unchanged.  0: the last iterate.  Measured at T = 50 against 0 (test NLPD; same
        steps and CPU): ``GPClassifier()``'s K-class defaults, seeds 0-2, digits 0.0952 / 0.1091 /
        0.1012 to 0.0916 / 0.1001 / 0.0982, penbased 0.0099 / 0.0113 / 0.0137 to 0.0087 / 0.0105 /
        0.0112, letter (seeds 0 / 1) 0.3987 / 0.4001 to 0.3962 / 0.3973, the 10^4-row synthetic set
        both ways (0.2678 / 0.2636 / 0.2437 to 0.2703 / 0.2581 / 0.2508); one latent function
        (``benchmarks/exp_iterate_average.py``: B = 256, KMeans(100), seeds 0-2), SVGP and
        stochastic PolyaGamma on six KEEL binary sets (banana, magic, phoneme, ring, spambase,
        twonorm) better on 29 of 36 fits (by up to 0.0135, worse by at most 0.0067), SVGP
        regression on kin40k, abalone and Friedman #1 better on 8 of 9 (worse by 0.0025 once).
"""


def _refusal(likelihood, operation):
    """Why ``likelihood`` refuses ``operation`` where its class defines it, takes no arguments,
    and raises NotImplementedError for these settings (the error's message); else None."""
    if not callable(vars(Likelihood).get(operation)) or not likelihood.defines(operation):
        return None
    bound = likelihood.bind()
    call = getattr(bound, operation)
    if any(p.default is inspect.Parameter.empty for p in inspect.signature(call).parameters.values()):
        return None         # an operation of rows or arguments: nothing to ask without them
    try:
        call()
    except NotImplementedError as err:
        return str(err)
    return None


def _variant_text(variant, other):
    """``Bernoulli(link='logit')``: the class and the fields in which ``variant`` differs from ``other``."""
    fields = [f.name for f in dataclasses.fields(variant) if type(other) is type(variant)
              and not _same(getattr(variant, f.name), getattr(other, f.name))]
    return f"{type(variant).__name__}({', '.join(f'{f}={getattr(variant, f)!r}' for f in fields)})"


def _same(a, b):
    try:
        return bool(np.all(a == b))
    except (TypeError, ValueError):
        return a is b


def supported_pairs():
    """Every pair of gpdsl's likelihoods and inference methods that the methods accept: a pair is
    listed when some variant of the likelihood class (:meth:`Likelihood.variants`, e.g. one per
    link) provides what the method requires.  (A class defined outside gpdsl is accepted by the
    same rule but not listed here.)

    Returns
    -------
    list of str
        ``"Likelihood + Inference"`` (e.g. ``"Gaussian + DTC"``), sorted.
    """
    own = [cls for name, cls in Likelihood.registry.items() if name == type_name(cls) and ":" not in name]
    return sorted(f"{cls.__name__} + {name}" for name, method in Inference.registry.items() if name == type_name(method)
                  for cls in own if any((variant.n_latent == 1 or method.multi_latent) and variant.provides(method.requires)
                                        for variant in cls.variants()))
