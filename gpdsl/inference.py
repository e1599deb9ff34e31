"""Inference methods (``gd.inference``): small frozen declarations behind one interface.

Each class declares, beside its options, everything :class:`gpdsl.Model` needs to run it, so
that a method is added in one place (a class here and its numerical module in
:mod:`gpdsl.methods`) and ``Model`` holds no method-specific branch:

* ``requires``: the capability it asks of a likelihood (:meth:`gpdsl.likelihoods.Likelihood.provides`:
  ``"noise"``, ``"log_density_derivatives"``, ``"site_model"``, ``"variational_expectations"``,
  ``"polya_gamma"``); any likelihood that provides it is accepted, a user's subclass included;
* ``inducing_rule``: ``"required"``, ``"optional"`` or ``"forbidden"`` inducing inputs;
* :meth:`Inference.evaluate`: objective (log evidence or bound), its gradients in every free
  hyperparameter (a missing one is an error, :class:`gpdsl.MissingGradientError`), the
  predictive state and the local state that warm-starts the next evaluation;
* ``local_state``: how that local state is saved with a posterior (a
  :class:`gpdsl.methods.common.LocalStateFormat`), or None;
* :meth:`Inference.variational_entries`: parameters the method adds to the hyperparameters and
  optimises with them (SVGP's q(u), VGP's q(f));
* :meth:`Inference.outer_loop`: an optional loop run after the hyperparameter optimisation (QP's
  Algorithm 1);
* :meth:`Inference.minimise`: the optimiser (L-BFGS-B, or a method's own: the minibatch steps);
* ``log_evidence_kind``: what the posterior's ``log_evidence`` is, in words;
* ``supports_dask_chunks``: whether a sparse fit on a Dask X runs its passes as Dask tasks.

:data:`INFERENCE` is the one registry, by class name (model files and the CLI use it); a class
registers itself when defined.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .components import Component, type_name
from .likelihoods import Likelihood
from .checks import check_positive_int, check_positive_number, check_seed, is_integer, is_number
from .linalg import check_jitter
from .methods import (collapsed, exact, expectation_propagation, laplace, polya_gamma, stochastic,
                      stochastic_polya_gamma, svgp, vgp)
from .methods.common import VariationalState, gaussian_noise, shifted, variational_state_format
from .parameters import entry


def _less(y, offset):
    """Gaussian noise is a location family: p(y | f + o) is p(y - o | f)."""
    return y if offset is None else y - offset


def _check_chunk(owner, chunk_size):
    if chunk_size is not None and (not is_integer(chunk_size) or chunk_size < 1):
        raise ValueError(f"{owner}: chunk_size must be None or a positive integer, got {chunk_size!r}")


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

    def accepts(self, likelihood):
        """Whether ``likelihood`` provides the capability this method ``requires``.

        Parameters
        ----------
        likelihood : gpdsl.likelihoods.Likelihood

        Returns
        -------
        bool
        """
        return likelihood.provides(self.requires)

    def check_likelihood(self, likelihood):
        """Check that this method accepts ``likelihood`` (:meth:`accepts`).

        Parameters
        ----------
        likelihood : gpdsl.likelihoods.Likelihood
            The model's likelihood.

        Raises
        ------
        ValueError
            The pair is not supported: where another variant of the likelihood's class would be
            (another link), the message names it; otherwise it lists the supported pairs.
        """
        if self.accepts(likelihood):
            return
        name = type(self).__name__
        others = [v for v in type(likelihood).variants() if self.accepts(v)]
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


@dataclass(frozen=True)
class Exact(Inference):
    """Dense GP regression, O(N^3): the reference, log N(y | 0, K_ff + sigma^2 I) (Rasmussen &
    Williams eq. 2.30; Titsias 2009 eq. 4), with gradients and the exact predictive (eq. 3).

    Parameters
    ----------
    jitter : float or None, default None
        As for the sparse methods, on K_ff + noise: None for the dynamic ladder, or a fixed
        multiple of its mean diagonal (the noise variance usually makes it unnecessary).
    """

    jitter: float | None = None
    requires = "noise"
    log_evidence_kind = "exact log marginal likelihood"

    def __post_init__(self):
        check_jitter("Exact", self.jitter)

    def evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, warm, offset=None):
        return exact.evaluate(kernel, likelihood, X, _less(y, offset), jitter=self.jitter, need_grad=need_grad,
                              need_state=need_state)


_COLLAPSED_PARAMETERS = """
    Parameters
    ----------
    jitter : float or None, default None
        None for the dynamic ladder (thesis 5.1.3), or a fixed multiple of mean(diag K_uu)
        added to K_uu (GPML's apxSparse uses 1e-6).
    chunk_size : int or None, default None
        Rows per O(N M^2) chunk (None: chosen from N and M).
    """


@dataclass(frozen=True)
class _CollapsedGaussian(Inference):
    """Options shared by VFE, DTC and FITC (:mod:`gpdsl.methods.collapsed`).
    """

    __doc__ += _COLLAPSED_PARAMETERS

    jitter: float | None = None
    chunk_size: int | None = None
    requires = "noise"
    inducing_rule = "required"
    supports_dask_chunks = True
    fitc = False
    dtc = False

    def __post_init__(self):
        check_jitter(type(self).__name__, self.jitter)
        _check_chunk(type(self).__name__, self.chunk_size)

    def evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, warm, offset=None):
        return collapsed.evaluate(kernel, likelihood, X, _less(y, offset), Z, fitc=self.fitc, dtc=self.dtc,
                                  jitter=self.jitter, chunk_size=self.chunk_size, need_grad=need_grad,
                                  need_state=need_state)


@dataclass(frozen=True)
class VFE(_CollapsedGaussian):
    """Titsias' collapsed variational bound (2009, eq. 16) with the optimal q(u) (eq. 17).

    ``F_V = log N(y | 0, Q_ff + sigma^2 I) - tr(K_ff - Q_ff) / (2 sigma^2)`` with
    ``Q_ff = K_fu K_uu^-1 K_uf``: a lower bound on the exact log marginal likelihood for every Z.
    Gaussian and heteroscedastic Gaussian likelihoods (sigma^2 then per point).
    """

    __doc__ += _COLLAPSED_PARAMETERS
    log_evidence_kind = "collapsed variational bound"


@dataclass(frozen=True)
class DTC(_CollapsedGaussian):
    """The projected-process (PP) / deterministic training conditional approximate log marginal
    likelihood (Seeger, Williams & Lawrence 2003; Titsias 2009 eq. 5 with the Nyström Q_ff).

    ``F_PP = log N(y | 0, Q_ff + sigma^2 I)``, ``Q_ff = K_fu K_uu^-1 K_uf``: the VFE bound
    (eq. 16) without its trace term, so ``F_PP = F_V + tr(K_ff - Q_ff) / (2 sigma^2) >= F_V``; it is
    not a bound on the exact log marginal likelihood and can exceed it (Titsias' Figure 2(c)).  Its
    predictive is VFE's (Titsias section 3.1: the optimal q(u) of eq. 17 gives the PP predictive).
    The inducing inputs act as extra kernel hyperparameters; fitting them with the
    hyperparameters overfits (Titsias sections 4 and 5).  Gaussian noise, homoscedastic or per point.
    """

    __doc__ += _COLLAPSED_PARAMETERS
    log_evidence_kind = "DTC (projected process) approximate log marginal likelihood"
    dtc = True


@dataclass(frozen=True)
class FITC(_CollapsedGaussian):
    """The FITC / SPGP approximate marginal likelihood (Snelson & Ghahramani 2006; Titsias 2009
    eq. 5): ``log N(y | 0, Q_ff + diag(K_ff - Q_ff) + sigma^2 I)``.  Gaussian noise, homoscedastic or per
    point (sigma^2 then diagonal).
    """

    __doc__ += _COLLAPSED_PARAMETERS

    log_evidence_kind = "FITC approximate log marginal likelihood"
    fitc = True


SCHEDULES = ("sequential", "parallel")
QP_HYPERPARAMETERS = ("ep", "qp")
_SITE_PARAMETERS = """
    Parameters
    ----------
    damping : float in [0, 1), default 0
        Weight kept on the old site parameters in each update (0 = undamped); raised
        automatically when the site changes oscillate.
    max_sweeps : int, default 200
        Sweeps per EP run.
    tol : float, default 1e-6
        Convergence when the largest change of a site parameter in a sweep is below it.
    schedule : {"sequential", "parallel"}, default "sequential"
        One site at a time with rank-1 updates (Naish-Guzman & Holden section 3), or all sites
        from the current marginals, then one refresh.
    jitter : float or None, default None
        As for VFE (K_uu, or K_ff for the dense method).
    chunk_size : int or None, default None
        Rows per O(N M^2) chunk (FITC-EP).
    """


@dataclass(frozen=True)
class _SiteInference(Inference):
    """Options shared by EP and QP (they differ only in the site projection).

    ``damping``: weight kept on the old site parameters in each update (0 = undamped); it is
    raised automatically when the site changes oscillate.  ``max_sweeps``: sweeps per EP run.
    ``tol``: convergence when the largest change of a site parameter in a sweep is below it.
    ``schedule``: ``"sequential"`` (one site at a time, rank-1 updates, as Naish-Guzman &
    Holden section 3) or ``"parallel"`` (all sites from the current marginals, then one
    refresh).  Without an inducing spec the dense O(N^3) EP runs; with one, FITC-EP.
    """

    damping: float = 0.0
    max_sweeps: int = 200
    tol: float = 1e-6
    schedule: str = "sequential"
    jitter: float | None = None
    chunk_size: int | None = None
    inducing_rule = "optional"
    local_state = expectation_propagation.SITES_FORMAT
    requires = "site_model"

    def __post_init__(self):
        name = type(self).__name__
        if not (is_number(self.damping) and 0.0 <= self.damping < 1.0):
            raise ValueError(f"{name}: damping must be in [0, 1), got {self.damping!r}")
        check_positive_int(name, "max_sweeps", self.max_sweeps)
        check_positive_number(name, "tol", self.tol)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"{name}: schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        check_jitter(name, self.jitter)
        _check_chunk(name, self.chunk_size)

    @property
    def supports_dask_chunks(self):
        # Sequential EP is serial by nature; the parallel schedule's passes chunk.
        return self.schedule == "parallel"

    def evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, warm, offset=None):
        return expectation_propagation.evaluate(kernel, likelihood, X, y, Z, spec=self, warm=warm, offset=offset,
                                                need_grad=need_grad, need_state=need_state)


@dataclass(frozen=True)
class EP(_SiteInference):
    """Expectation propagation: sites by moment matching (KL projection); dense without an
    inducing spec, FITC-EP (Naish-Guzman & Holden 2007, section 3) with one.
    """

    __doc__ += _SITE_PARAMETERS

    quantile = False
    lookup = False
    log_evidence_kind = "EP approximation"


@dataclass(frozen=True)
class QP(_SiteInference):
    """Quantile propagation (Zhang et al. 2020): the EP mean and the L2-Wasserstein standard
    deviation sigma* = int phi(Phi^-1(F(f))) df of the tilted distribution (eq. 7).

    ``hyperparameters`` says which sites EP's evidence formula (the paper's eq. 4) is maximised at:

    * ``"ep"`` (default): EP's own, i.e. the EP evidence optimum; QP's posterior at those values.
    * ``"qp"``: QP's, by the outer loop of the paper's Algorithm 1 -- QP sweeps to convergence,
      then the hyperparameters (and optimised Z) maximise eq. 4 with those sites held fixed (a
      Gaussian regression on the pseudo-data nu/tau, noise 1/tau), repeated from EP's optimum
      until the free log-space parameters move by less than ``outer_tol`` in a round, at most
      ``max_outer`` rounds (else ``converged=False`` and a ConvergenceWarning).  Eq. 4 with the
      sites fixed does not involve the likelihood's parameters, so they keep EP's values.

    Either way ``log_evidence`` is EP's at the returned hyperparameters; the posterior and
    predictions are QP's.  ``lookup=True`` reads the probit sigma* from the Appendix J table
    (bilinear, ~1e-5 relative; outside the grid it is computed directly).
    """

    __doc__ += _SITE_PARAMETERS + """lookup : bool, default False
        Read the probit sigma* from the Appendix J table.
    hyperparameters : {"ep", "qp"}, default "ep"
        Whose sites EP's evidence formula is maximised at (see above).
    max_outer : int, default 200
        Rounds of Algorithm 1's outer loop at most (``hyperparameters="qp"``).
    outer_tol : float, default 1e-5
        The outer loop stops when the free log-space parameters move by less than this.
    """

    lookup: bool = False
    hyperparameters: str = "ep"
    max_outer: int = 200
    outer_tol: float = 1e-5
    quantile = True
    log_evidence_kind = "EP approximation at QP's hyperparameters"

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.lookup, bool):
            raise TypeError(f"QP: lookup must be True or False, got {self.lookup!r}")
        if self.hyperparameters not in QP_HYPERPARAMETERS:
            raise ValueError(f"QP: hyperparameters must be one of {QP_HYPERPARAMETERS}, got {self.hyperparameters!r}")
        check_positive_int("QP", "max_outer", self.max_outer)
        check_positive_number("QP", "outer_tol", self.outer_tol)

    def outer_loop(self, objective, u, max_iter):
        if self.hyperparameters != "qp":
            return None
        return expectation_propagation.qp_outer_loop(objective, u, max_iter, spec=self)


def _check_minibatch_options(spec, batch_name, batch):
    """The options of a minibatch optimiser (:mod:`gpdsl.methods.stochastic`), named after
    ``spec``'s class: the batch (None or a positive integer, under ``batch_name``),
    ``learning_rate``, ``natural_step`` in (0, 1], ``seed``, and the stopping rule's
    ``stop_tol`` (positive) and ``stop_window`` (a positive multiple of
    :data:`gpdsl.methods.stochastic.STOP_BLOCKS`, the blocks its noise is estimated from)."""
    owner = type(spec).__name__
    if batch is not None:
        check_positive_int(owner, batch_name, batch)
    check_positive_number(owner, "learning_rate", spec.learning_rate)
    if not (is_number(spec.natural_step) and 0.0 < spec.natural_step <= 1.0):
        raise ValueError(f"{owner}: natural_step must be in (0, 1], got {spec.natural_step!r}")
    check_seed(owner, spec.seed)
    check_positive_number(owner, "stop_tol", spec.stop_tol)
    check_positive_int(owner, "stop_window", spec.stop_window)
    if spec.stop_window % stochastic.STOP_BLOCKS:
        raise ValueError(f"{owner}: stop_window must be a multiple of {stochastic.STOP_BLOCKS} (the stopping rule "
                         f"estimates its noise from {stochastic.STOP_BLOCKS} blocks of a window), "
                         f"got {spec.stop_window!r}")


# The minibatch stopping rule's fields (gpdsl.methods.stochastic), shared by SVGP and PolyaGamma.
_STOCHASTIC_STOP_PARAMETERS = """stop_tol : float, default 1e-3
        Stochastic: the stopping rule's tolerance, in nats per data point, on the change of the
        smoothed objective between two windows of ``stop_window`` steps (the run also stops where
        the change is within 2 standard errors of its batch noise).
    stop_window : int, default 200
        Stochastic: steps per window of the stopping rule, a multiple of 10 (the run takes at
        least 2 ``stop_window`` steps before it can stop, unless ``max_iter`` is smaller).
"""


@dataclass(frozen=True)
class PolyaGamma(Inference):
    """Pólya-Gamma classification for the logit link: collapsed (PGPR, Passerello thesis ch. 4)
    or, with ``minibatch``, stochastic variational (Wenzel et al. 2019).

    ``minibatch=None`` (default), collapsed: q(u) is optimal in closed form (eq. 4.5), the bound
    is eq. 4.7 in the stable form C.1, and the local parameters c are updated in closed form
    (eq. 4.11) until the largest change of a c_n is below ``tol`` (the loop stops once
    ``max_iter`` passes over the data have been made in one evaluation, counting the first pass
    at the starting c and the pass that tests each update, so at least 2 and, with acceleration,
    at most ``max_iter`` + 2; not converging warns ``gd.ConvergenceWarning`` and flags the
    result).  ``acceleration=True`` adds safeguarded Anderson acceleration to the updates (the
    bound still never decreases); ``False`` runs the thesis' plain updates.  The kernel
    hyperparameters, the bias and optimised inducing inputs follow L-BFGS-B on the gradient at
    fixed c.  ``jitter`` and ``chunk_size`` as for VFE.

    ``minibatch=B`` (a positive integer), stochastic, for large N
    (:mod:`gpdsl.methods.stochastic_polya_gamma`): q(u) = N(L m, L S L^T) is kept explicitly
    (whitened, as SVGP's: the local state ``variational.q_mu``, ``variational.q_sqrt``), and each
    of fit's ``max_iter`` steps draws B rows (``seed``), sets their c_n in closed form at the
    current q (c_n^2 = E_q[(f_n + bias)^2]), and from one pass over them takes a
    natural-gradient step of size ``natural_step`` on q from their conjugate sites (their data
    term times N / B; step 1 with B = N is the collapsed optimal q(u) at those c) and an Adam
    step of size ``learning_rate`` on the log-hyperparameters (and optimised Z) along the
    batch's gradient at the current q: O(B M^2 + M^3) per step, nothing of size N.  The steps
    stop when the stopping rule of :mod:`gpdsl.methods.stochastic` fires (the mean per-point batch
    objective over the last ``stop_window`` steps differs from the window before by less than
    ``max(stop_tol, 2 standard errors)``), or after fit's ``max_iter`` steps, which warns
    ``gd.ConvergenceWarning`` and flags the result converged=False.  The posterior is the
    uncollapsed PG bound (``log_evidence``; at q's optimum it is the collapsed bound) and
    prediction at the q reached, one O(N M^2) pass.  Where no q has been reached (``optimize=False``) q is moved to its
    optimum by full-batch natural steps, at most ``max_iter``.  ``tol`` and ``acceleration``
    belong to the collapsed method and are unused here.

    Parameters
    ----------
    tol : float, default 1e-6
        Collapsed: convergence of the c updates (largest change of a c_n).
    max_iter : int, default 1000
        Collapsed: passes over the data per evaluation; stochastic without a reached q: natural
        steps at most.
    acceleration : bool, default True
        Collapsed: safeguarded Anderson acceleration of the c updates.
    jitter : float or None, default None
        As for VFE.
    chunk_size : int or None, default None
        Rows per O(N M^2) chunk.
    minibatch : int or None, default None
        None: collapsed; B: the stochastic method with batches of B rows.
    learning_rate : float, default 0.01
        Stochastic: Adam's step on the log-hyperparameters.
    natural_step : float in (0, 1], default 0.2
        Stochastic: the natural-gradient step on q.
    seed : int, default 0
        Stochastic: the seed of the batches.
    """
    __doc__ += _STOCHASTIC_STOP_PARAMETERS

    tol: float = 1e-6
    max_iter: int = 1000
    acceleration: bool = True
    jitter: float | None = None
    chunk_size: int | None = None
    minibatch: int | None = None
    learning_rate: float = 0.01
    # Measured on twonorm (N = 1e6, M = 128, batches of 1,024, 200 steps): test NLPD 0.0626 at 0.2,
    # 0.0636 at SVGP's 0.1, 0.0635 at 0.5 and 0.0670 at 1 (the closed-form optimum of the batch's
    # sites alone: too noisy); after 500 steps 0.1 to 0.3 are alike (0.0614 to 0.0620).
    natural_step: float = 0.2
    seed: int = 0
    # The stopping rule of gpdsl.methods.stochastic.  Measured at these defaults against the fixed
    # 1,000 steps (issue 25 item 4, issue 29): twonorm (20-D, N = 20,000, M = 64, batches of 1,024)
    # stops after 740 steps (SVGP 720) at test NLPD +0.0001 (SVGP -0.0004); at N = 1e5 (SVGP,
    # M = 64, batches of 256: benchmarks/bench_svgp_minibatch.py) after 420 at +0.0018; 5-D, N = 2,000, batches
    # of 100, after 500 (SVGP 520) at +0.0012 (SVGP +0.0002); banana (N = 400, batches of 32, 5
    # batch seeds) after 560 to 720 (SVGP 640 to 840) at +0.0035 on average (SVGP +0.0041), where a
    # single iterate's test NLPD moves by +-0.007 from one step count to the next (q's batch
    # noise).  A window of 200 steps is 10 blocks of 20, longer than q's memory of 1 / natural_step.
    stop_tol: float = 1e-3
    stop_window: int = 200
    inducing_rule = "required"
    # The Pólya-Gamma augmentation exists for the logistic link only.
    requires = "polya_gamma"
    # The bias enters the c loop as a scalar shift; a per-row one is not implemented.
    supports_offset = False

    def __post_init__(self):
        check_positive_number("PolyaGamma", "tol", self.tol)
        check_positive_int("PolyaGamma", "max_iter", self.max_iter)
        if not isinstance(self.acceleration, bool):
            raise TypeError(f"PolyaGamma: acceleration must be True or False, got {self.acceleration!r}")
        check_jitter("PolyaGamma", self.jitter)
        _check_chunk("PolyaGamma", self.chunk_size)
        _check_minibatch_options(self, "minibatch", self.minibatch)

    @property
    def local_state(self):
        """How the local state is saved: the c of the collapsed method, q of the stochastic one."""
        return polya_gamma.STATE_FORMAT if self.minibatch is None else SVGP._state_format

    @property
    def log_evidence_kind(self):
        return ("collapsed Polya-Gamma bound" if self.minibatch is None
                else "uncollapsed Polya-Gamma bound at the q reached")

    @property
    def supports_dask_chunks(self):
        # The minibatch steps index rows of an in-memory X.
        return self.minibatch is None

    @property
    def batch_size(self):
        """The minibatch's rows, under the name :func:`gpdsl.methods.stochastic.minimise` reads."""
        return self.minibatch

    def _variational(self):
        """The stochastic method's evaluation: minibatch SVGP's (the q the steps reached is
        evaluated as it stands; with none, q is moved to its optimum by full-batch natural
        steps), run on the closed-form Pólya-Gamma expectations instead of the likelihood's."""
        return SVGP(jitter=self.jitter, chunk_size=self.chunk_size, batch_size=self.minibatch,
                    learning_rate=self.learning_rate, natural_step=self.natural_step, seed=self.seed,
                    stop_tol=self.stop_tol, stop_window=self.stop_window, q_max_iter=self.max_iter)

    def evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, warm, offset=None):
        if self.minibatch is not None:
            return self._variational().evaluate(kernel, stochastic_polya_gamma.PolyaGammaExpectations(likelihood),
                                                values, X, y, Z, need_grad=need_grad, need_state=need_state,
                                                warm=warm)
        return polya_gamma.evaluate(kernel, likelihood, X, y, Z, spec=self, warm=warm, need_grad=need_grad,
                                    need_state=need_state)

    def minimise(self, objective, u0, max_iter, progress, callback):
        if self.minibatch is None:
            return super().minimise(objective, u0, max_iter, progress, callback)
        # One pass per step: the hyperparameters' gradient at the q the step starts from costs half
        # of the gradient at the q it moves to, and reached the same test NLPD on twonorm (N = 1e6).
        return stochastic.minimise(objective, u0, max_iter, progress, callback, spec=self,
                                   expectations=stochastic_polya_gamma.PolyaGammaExpectations, one_pass=True)


@dataclass(frozen=True)
class Laplace(Inference):
    """The Laplace approximation (Rasmussen & Williams section 3.4: Algorithms 3.1, 3.2 and 5.1;
    GPML's ``infLaplace``): dense without an inducing spec, under the FITC prior
    Q + diag(K - Q) with one (GPML's ``infLaplace`` with ``apxSparse``, O(N M^2), gradients in Z
    too).  Newton's method finds the mode from f = 0 at every evaluation and stops when a step
    gains less than ``tol`` nats, after ``max_iter`` steps at most.  A likelihood that is not
    log-concave (Student-t) gives negative W at outliers, handled as GPML does.

    Parameters
    ----------
    tol : float, default 1e-10
        Newton stops when a step gains less than this many nats.
    max_iter : int, default 100
        Newton steps at most per evaluation.
    jitter : float or None, default None
        As for FITC (K_uu only).
    chunk_size : int or None, default None
        Rows per O(N M^2) chunk (FITC prior).
    """

    tol: float = 1e-10
    max_iter: int = 100
    jitter: float | None = None
    chunk_size: int | None = None
    inducing_rule = "optional"
    requires = "log_density_derivatives"
    log_evidence_kind = "Laplace approximation"
    supports_dask_chunks = True

    def __post_init__(self):
        check_positive_number("Laplace", "tol", self.tol)
        check_positive_int("Laplace", "max_iter", self.max_iter)
        check_jitter("Laplace", self.jitter)
        _check_chunk("Laplace", self.chunk_size)

    def evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, warm, offset=None):
        return laplace.evaluate(kernel, shifted(likelihood, offset), X, y, Z, tol=self.tol, max_iter=self.max_iter,
                                jitter=self.jitter, chunk_size=self.chunk_size, need_grad=need_grad,
                                need_state=need_state)


Q_UPDATES = ("natural", "joint")
_Q_PARAMETERS = """
    Parameters
    ----------
    q_updates : {"natural", "joint"}, default "natural"
        How q is optimised (see above).
    q_tol : float, default 1e-10
        Natural updates stop when a step gains less than this many nats.
    q_max_iter : int, default 100
        Natural steps at most per evaluation.
    jitter : float or None, default None
        As for VFE (SVGP) or Exact (VGP).
    """


@dataclass(frozen=True)
class _Variational(Inference):
    """Options shared by SVGP and VGP: how q is optimised.

    ``q_updates="natural"`` (default): at every evaluation q moves to its optimum at the current
    hyperparameters by damped natural-gradient steps (conjugate-computation VI, Khan & Lin 2017;
    Salimbeni et al. 2018), warm-started from the previous evaluation's q, until a step gains
    less than ``q_tol`` nats (for the posterior's q, at the fitted hyperparameters, also until
    the fixed-point residual, the sites' natural parameters less q's, is below ``10 q_tol``
    relative to q's largest natural parameter), or ``q_max_iter`` steps; L-BFGS-B then
    sees the bound maximised over q, whose gradient in the hyperparameters is the partial one at
    that q (the gradient left in q: below 5e-8 on the tests' problems).  q is the method's local
    state (saved with the posterior).  ``"joint"``: q's parameters are optimised with the
    hyperparameters by L-BFGS-B (GPflow's and the thesis' baseline): slow to converge, since the
    bound is ill-conditioned in q (VGP on 200 points: 5,000 iterations not converged).
    """

    q_updates: str = "natural"
    q_tol: float = 1e-10
    q_max_iter: int = 100
    requires = "variational_expectations"
    log_evidence_kind = "ELBO"

    def __post_init__(self):
        name = type(self).__name__
        if self.q_updates not in Q_UPDATES:
            raise ValueError(f"{name}: q_updates must be one of {Q_UPDATES}, got {self.q_updates!r}")
        check_positive_number(name, "q_tol", self.q_tol)
        check_positive_int(name, "q_max_iter", self.q_max_iter)
        check_jitter(name, self.jitter)

    # Whether q moves by minibatch steps (SVGP(batch_size=...)) rather than to its optimum.
    _stochastic = False

    @property
    def local_state(self):
        """How q is saved with a posterior when it is the local state (``q_updates="natural"``)."""
        return self._state_format if self.q_updates == "natural" else None

    @property
    def optimises_variational_parameters(self):
        return self.q_updates == "joint"

    @property
    def tol(self):
        """The tolerance the convergence warning of an unconverged q quotes."""
        return self.q_tol

    def check_likelihood(self, likelihood):
        super().check_likelihood(likelihood)
        if self.q_updates == "joint" and likelihood.sign_symmetric:
            raise ValueError(f"{type(self).__name__}: q_updates='joint' starts q at the prior, whose mean 0 is a "
                             f"saddle of the bound for {likelihood.describe()} (p(y | f) = p(y | -f)), and stays "
                             "there; use q_updates='natural'")

    def surrogate_q(self, kernel, likelihood, X, y, Z):
        """q's start for a sign-symmetric likelihood: q fitted to its Gaussian surrogate regression.

        Where p(y | f) = p(y | -f) (Poisson with the square link) the prior's q, centred at 0, is a
        stationary point of the bound that the natural steps never leave.  The start is instead
        the optimal q of a Gaussian likelihood on the likelihood's surrogate targets
        (:meth:`gpdsl.likelihoods.Likelihood.surrogate`, for Poisson sqrt(y + 1/2), the positive
        branch EP starts from) with noise 1 / mean(weights): exact in one natural step.  The
        bound is then maximised on that branch: where the best latent function changes sign (the
        rate passes through 0) a q whose mean changes sign can be better, which this start, like
        EP's, does not look for (y ~ Poisson((2.5 x)^2) at 60 points in [-2, 2]: a q started from
        sign(x) sqrt(y + 1/2) reaches -141.26 against the fit's -142.12, EP's -142.12, at the
        fitted hyperparameters).

        Parameters
        ----------
        kernel : gpdsl.kernels.Kernel
            The prior covariance function.
        likelihood : gpdsl.likelihoods.Likelihood
            The model's (sign-symmetric) likelihood.
        X : ndarray, shape (N, D)
            Training inputs.
        y : ndarray, shape (N,)
            Targets in the likelihood's coding.
        Z : ndarray, shape (M, D), or None
            Inducing inputs (SVGP).

        Returns
        -------
        dict of str to ndarray
            The ``"variational.*"`` entries of the start.
        """
        weights, targets = likelihood.surrogate(X, y)
        q, _, _ = self._optimise_q(kernel, gaussian_noise(1.0 / np.mean(weights)), {}, X, targets / weights, Z,
                                   self._initial_q(X.shape[0], Z), polish=False)
        return q

    def variational_entries(self, n, Z, fixed_names=()):
        if self.q_updates != "joint":
            return []
        start = self._initial_q(n, Z)
        return [] if start is None else [entry(name, value, positive=name == "variational.lambda",
                                               fixed_names=fixed_names) for name, value in start.items()]

    def evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, warm, offset=None):
        if self.q_updates == "joint":
            return self._evaluate(kernel, likelihood, values, X, y, Z, need_grad=need_grad, need_state=need_state,
                                  offset=offset)
        start = self._initial_q(X.shape[0], Z)
        warm_fits = warm is not None and all(np.shape(warm.q[k]) == np.shape(v) for k, v in start.items())
        if warm_fits and self._stochastic:
            # The minibatch steps have moved q; the posterior is the bound at that q, without
            # full-batch passes over N rows (one O(N M^2) pass evaluates it).
            q, steps, converged = warm.q, 0, warm.converged
            ev = self._evaluate(kernel, likelihood, {**values, **q}, X, y, Z, need_grad=False, need_state=need_state,
                                offset=offset)
            ev.warm = VariationalState(q, sweeps=steps, converged=converged)
            return ev
        if likelihood.sign_symmetric:
            # Not from the previous q: one that an extreme line-search point (a tiny prior
            # variance) drew towards 0 stays near the saddle there (coal mining: ELBO -290.7
            # against -177.8 from the surrogate).
            start = self.surrogate_q(kernel, shifted(likelihood, offset), X, y, Z)
        elif warm_fits:
            start = warm.q
        # The posterior's q (need_state) is polished to a small fixed-point residual; within a
        # fit the gain test suffices: the hyperparameters' gradient at that q is off by O(its
        # residual), ~1e-5, below what L-BFGS-B's projected-gradient test (1e-5) resolves.
        q, steps, converged = self._optimise_q(kernel, likelihood, values, X, y, Z, start, polish=need_state,
                                               offset=offset)
        ev = self._evaluate(kernel, likelihood, {**values, **q}, X, y, Z, need_grad=need_grad, need_state=need_state,
                            offset=offset)
        # At q's optimum the bound is stationary in q: its gradient in the hyperparameters is the
        # partial one (the q entries of ev.grads are ~0 and not hyperparameters here).
        ev.grads = {k: v for k, v in ev.grads.items() if not k.startswith("variational.")}
        ev.warm = VariationalState(q, sweeps=steps, converged=converged)
        return ev


@dataclass(frozen=True)
class SVGP(_Variational):
    """The uncollapsed sparse variational GP (Hensman, Matthews & Ghahramani 2015) with a
    whitened q(u) = N(L m, L S L^T), S = R R^T (GPflow's ``SVGP(whiten=True)``), for any
    likelihood with ``variational_expectations``: ``variational.q_mu`` (M,) and
    ``variational.q_sqrt`` (the lower triangle of R), from the prior (m = 0, R = I).  The
    hyperparameters and, for ``gd.inducing.Optimized``, Z follow L-BFGS-B on the full batch; q
    as ``q_updates`` says (see below).  ``log_evidence`` is the ELBO.  ``jitter`` and
    ``chunk_size`` as for VFE.
    """

    __doc__ += _Variational.__doc__ + """
    ``batch_size``: None fits on the full batch as above; an integer B runs the stochastic
    optimiser of Hensman et al. (2015) with the natural-gradient steps of Salimbeni et al. (2018)
    for large N: each of fit's ``max_iter`` steps draws B rows (``seed``), takes a
    natural-gradient step of size ``natural_step`` on q from them (their data term times N / B)
    and an Adam step of size ``learning_rate`` on the log-hyperparameters (and optimised Z) along
    the batch's gradient, until the stopping rule of :mod:`gpdsl.methods.stochastic` fires (the
    mean per-point batch objective over the last ``stop_window`` steps differs from the window
    before by less than ``max(stop_tol, 2 standard errors)``) or ``max_iter`` steps have been
    taken, which warns ``gd.ConvergenceWarning`` and flags the result converged=False; the
    posterior is then the full-batch bound (``log_evidence``) and prediction at that q, one
    O(N M^2) pass.  Needs ``q_updates="natural"``.
    """ + _Q_PARAMETERS + """chunk_size : int or None, default None
        Rows per O(N M^2) chunk.
    batch_size : int or None, default None
        None: full batch; B: the stochastic optimiser with batches of B rows.
    learning_rate : float, default 0.01
        Stochastic: Adam's step on the log-hyperparameters (and optimised Z).
    natural_step : float in (0, 1], default 0.1
        Stochastic: the natural-gradient step on q.
    seed : int, default 0
        Stochastic: the seed of the batches.
    """ + _STOCHASTIC_STOP_PARAMETERS
    jitter: float | None = None
    chunk_size: int | None = None
    batch_size: int | None = None
    learning_rate: float = 0.01
    natural_step: float = 0.1
    seed: int = 0
    # The stopping rule's defaults, as PolyaGamma's (measured there).
    stop_tol: float = 1e-3
    stop_window: int = 200
    inducing_rule = "required"
    _state_format = variational_state_format({"q_mu": "inducing", "q_sqrt": "q_sqrt_index"})

    def __post_init__(self):
        super().__post_init__()
        _check_chunk("SVGP", self.chunk_size)
        _check_minibatch_options(self, "batch_size", self.batch_size)
        if self.batch_size is not None and self.q_updates != "natural":
            raise ValueError("SVGP: batch_size needs q_updates='natural' (the minibatch steps on q are "
                             f"natural-gradient steps), got q_updates={self.q_updates!r}")

    @property
    def _stochastic(self):
        return self.batch_size is not None

    def minimise(self, objective, u0, max_iter, progress, callback):
        if self.batch_size is None:
            return super().minimise(objective, u0, max_iter, progress, callback)
        return stochastic.minimise(objective, u0, max_iter, progress, callback, spec=self)

    def _initial_q(self, n, Z):
        return None if Z is None else svgp.initial_values(Z.shape[0])

    def _optimise_q(self, kernel, likelihood, values, X, y, Z, start, polish, offset=None):
        return svgp.optimise_q(kernel, likelihood, values, X, y, Z, start, jitter=self.jitter,
                               chunk_size=self.chunk_size, offset=offset, tol=self.q_tol, max_iter=self.q_max_iter,
                               polish=polish)

    def _evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, offset=None):
        return svgp.evaluate(kernel, likelihood, values, X, y, Z, jitter=self.jitter, chunk_size=self.chunk_size,
                             offset=offset, need_grad=need_grad, need_state=need_state)


@dataclass(frozen=True)
class VGP(_Variational):
    """The full variational Gaussian q(f) = N(K alpha, (K^-1 + diag(lambda^2))^-1) of Opper &
    Archambeau (2009) (GPflow's ``VGP_opper_archambeau``; the QP paper's VB baseline), dense
    O(N^3): ``variational.alpha`` and ``variational.lambda`` (N each), from alpha = 0, lambda = 1;
    the hyperparameters follow L-BFGS-B, q as ``q_updates`` says (see below).  ``log_evidence`` is
    the ELBO.  ``jitter`` as for Exact.
    """

    __doc__ += _Variational.__doc__ + _Q_PARAMETERS
    jitter: float | None = None
    _state_format = variational_state_format({"alpha": "obs", "lambda": "obs"})

    def _initial_q(self, n, Z):
        return vgp.initial_values(n)

    def _optimise_q(self, kernel, likelihood, values, X, y, Z, start, polish, offset=None):
        return vgp.optimise_q(kernel, shifted(likelihood, offset), values, X, y, start, jitter=self.jitter,
                              tol=self.q_tol, max_iter=self.q_max_iter, polish=polish)

    def _evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, offset=None):
        return vgp.evaluate(kernel, shifted(likelihood, offset), values, X, y, jitter=self.jitter, need_grad=need_grad,
                            need_state=need_state)


# The registry model files (TOML), saved posteriors and the CLI read: every concrete method.
INFERENCE = Inference.registry


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
    return sorted(f"{cls.__name__} + {name}" for name, method in INFERENCE.items() if name == type_name(method)
                  for cls in own if any(variant.provides(method.requires) for variant in cls.variants()))


__all__ = ["Inference", "Exact", "VFE", "DTC", "FITC", "EP", "QP", "PolyaGamma", "Laplace", "SVGP", "VGP", "INFERENCE"]
