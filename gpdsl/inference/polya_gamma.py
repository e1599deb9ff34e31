"""Pólya-Gamma classification (:class:`PolyaGamma`): collapsed (:mod:`gpdsl.methods.polya_gamma`)
or stochastic variational (:mod:`gpdsl.methods.stochastic_polya_gamma`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..checks import check_positive_int, check_positive_number
from ..linalg import check_jitter
from ..methods import logistic_softmax, polya_gamma, stochastic, stochastic_polya_gamma
from .base import (FIT_TOL, _POLISH_PARAMETER, _STOCHASTIC_STOP_PARAMETERS, Inference, _check_chunk,
                   _check_minibatch_options, _loosened_within_fit)


@dataclass(frozen=True)
class PolyaGamma(Inference):
    """Pólya-Gamma classification for the logit link: collapsed (PGPR, Passerello thesis ch. 4)
    or, with ``minibatch``, stochastic variational (Wenzel et al. 2019).  For K classes under the
    logistic softmax (``Categorical(K, "logistic_softmax")``) the same two forms run the
    Pólya-Gamma + Poisson augmentation of Galy-Fajou, Wenzel, Donner & Opper (2020)
    (:mod:`gpdsl.methods.logistic_softmax`): closed-form updates of the locals (c, gamma, alpha)
    with q(u_k) collapsed, or minibatch natural steps on q(u_k).

    ``minibatch=None`` (default), collapsed: q(u) is optimal in closed form (eq. 4.5), the bound
    is eq. 4.7 in the stable form C.1, and the local parameters c are updated in closed form
    (eq. 4.11) until the largest change of a c_n is below ``tol`` (the loop stops once
    ``max_iter`` passes over the data have been made in one evaluation, counting the first pass
    at the starting c and the pass that tests each update, so at least 2 and, with acceleration,
    at most ``max_iter`` + 2; not converging warns ``gd.ConvergenceWarning`` and flags the
    result).  ``acceleration=True`` adds safeguarded Anderson acceleration to the updates (the
    bound still never decreases); ``False`` runs the thesis' plain updates.  The kernel
    hyperparameters, the bias and optimised inducing inputs follow L-BFGS-B on the gradient at
    fixed c.  ``jitter`` and ``chunk_size`` as for VFE.  A per-row offset o of the latent input
    (``fit(offset=...)``, a mean function's m(X)) shifts the bias row by row (z_n = f_n + bias +
    o_n in both variants), and the bound's derivative in o fits a mean function.

    ``minibatch=B`` (a positive integer), stochastic, for large N
    (:mod:`gpdsl.methods.stochastic_polya_gamma`): q(u) = N(L m, L S L^T) is kept explicitly
    (whitened, as SVGP's: the local state ``variational.q_mu``, ``variational.q_sqrt``), and each
    of fit's ``max_iter`` steps draws B rows (``seed``), sets their c_n in closed form at the
    current q (c_n^2 = E_q[z_n^2]), and from one pass over them takes a
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
        Collapsed: convergence of the c updates (largest change of a c_n; for K classes of a
        gamma_ik or of a c_ik over sqrt(max(c_ik, 1)): :mod:`gpdsl.methods.logistic_softmax`), for the posterior's c
        (a fit's final evaluation) and every evaluation outside a fit.
    fit_tol : float, default 1e-4
        Collapsed: the same test for the optimiser's evaluations within a fit, at
        max(fit_tol, tol) (the bound is maximised over c, so c a residual r from its optimum
        leaves the bound off by O(r^2) and its gradient by O(r); see
        ``gpdsl.inference.base.FIT_TOL``);
        ``fit_tol=tol`` runs every evaluation's updates to ``tol``.  For K classes see
        ``class_fit_tol``.
    max_iter : int, default 1000
        Collapsed: passes over the data per evaluation; stochastic without a reached q: natural
        steps at most.
    acceleration : bool, default True
        Collapsed: safeguarded Anderson acceleration of the c updates; for K classes, L-BFGS
        steps on the means of q(u_k) between the updates of the locals
        (:mod:`gpdsl.methods.logistic_softmax`, "Mean steps").  Either way the bound never
        decreases.
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
    __doc__ += _STOCHASTIC_STOP_PARAMETERS + _POLISH_PARAMETER + """
    class_tol : float or None, default None
        Collapsed, K classes (logistic softmax): the test of the (c, gamma) loop in place of
        ``tol`` (None: ``tol``).
    class_fit_tol : float, default 1e-3
        Collapsed, K classes: the loop's test within a fit, at max(class_fit_tol, class_tol or
        tol), in place of ``fit_tol``; ``class_fit_tol=tol`` runs every evaluation to ``tol``.
        Measured (issue 46, ``benchmarks/exp_collapsed_speed.py``, HISTORY.md 2026-11-29): against
        1e-4, digits (M = 100, Z optimised) took 543 sweeps instead of 732 to the same converged
        optimum (bound -2561.181 / -2561.179, test NLPD 0.33359 / 0.33381), and penbased's first
        8 iterations 586 instead of 788 along the same path (NLPD 0.08648 / 0.08668); at 3e-3
        digits ended on the plateau rule unconverged (NLPD 0.3352).
"""

    tol: float = 1e-6
    fit_tol: float = FIT_TOL
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
    step_decays: int = 0
    decay_factor: float = 0.3
    iterate_average: int = 50
    polish: bool | str = "auto"
    class_tol: float | None = None
    class_fit_tol: float = 1e-3
    inducing_rule = "required"
    # The options the minibatch remedies name (gpdsl.methods.stochastic.remedy).
    batch_option = "minibatch"
    q_steps_option = "max_iter"
    # The Pólya-Gamma augmentation exists for the logistic link only (and, with the Poisson one,
    # for K classes under the logistic softmax).
    requires = "polya_gamma"
    multi_latent = True

    def __post_init__(self):
        check_positive_number("PolyaGamma", "tol", self.tol)
        check_positive_number("PolyaGamma", "fit_tol", self.fit_tol)
        if self.class_tol is not None:
            check_positive_number("PolyaGamma", "class_tol", self.class_tol)
        check_positive_number("PolyaGamma", "class_fit_tol", self.class_fit_tol)
        check_positive_int("PolyaGamma", "max_iter", self.max_iter)
        if not isinstance(self.acceleration, bool):
            raise TypeError(f"PolyaGamma: acceleration must be True or False, got {self.acceleration!r}")
        check_jitter("PolyaGamma", self.jitter)
        _check_chunk("PolyaGamma", self.chunk_size)
        _check_minibatch_options(self, "minibatch", self.minibatch)

    def within_fit(self):
        """Collapsed: the c updates of a fit's inner evaluations stop at max(``fit_tol``,
        ``tol``) (see :data:`FIT_TOL`), for K classes at max(``class_fit_tol``, ``class_tol``
        or ``tol``); the posterior's c at ``tol`` (``class_tol``).  Stochastic: itself.

        Returns
        -------
        PolyaGamma
        """
        if self.minibatch is not None:
            return self
        class_tol = max(self.tol if self.class_tol is None else self.class_tol, self.class_fit_tol)
        return dataclasses.replace(_loosened_within_fit(self), class_tol=class_tol)

    @property
    def local_tolerance_for_classes(self):
        """float: the K-class (c, gamma) loop's test, ``class_tol`` or, if None, ``tol``."""
        return self.tol if self.class_tol is None else self.class_tol

    @property
    def local_state(self):
        """How the local state is saved: the c of the collapsed method, q of the stochastic one."""
        from .variational import SVGP
        return polya_gamma.STATE_FORMAT if self.minibatch is None else SVGP._state_format

    def local_state_for(self, likelihood):
        """K classes: the augmentation's locals (c, gamma, alpha, beta), or q with a class dimension.

        Parameters
        ----------
        likelihood : gpdsl.likelihoods.Likelihood
        """
        if likelihood.n_latent == 1:
            return self.local_state
        from .variational import SVGP
        return logistic_softmax.STATE_FORMAT if self.minibatch is None else SVGP._class_state_format

    @staticmethod
    def _expectations(likelihood):
        """The per-row bound of the augmentation at its optimal locals, as SVGP's likelihood: the
        Jaakkola-Jordan bound for two classes, the logistic-softmax augmentation's for K."""
        if likelihood.n_latent > 1:
            return logistic_softmax.LogisticSoftmaxExpectations(likelihood)
        return stochastic_polya_gamma.PolyaGammaExpectations(likelihood)

    evidence_is_bound = True

    @property
    def marginalises_latent(self):
        # The minibatch form optimises an uncollapsed q(u) with the hyperparameters.
        return self.minibatch is None

    @property
    def fits_by_minibatch(self):
        return self.minibatch is not None

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
        # Imported here, not at the top: gpdsl.inference imports this module before SVGP's, so
        # that PolyaGamma registers before SVGP (the registry's order).
        from .variational import SVGP
        return SVGP(jitter=self.jitter, chunk_size=self.chunk_size, batch_size=self.minibatch,
                    learning_rate=self.learning_rate, natural_step=self.natural_step, seed=self.seed,
                    stop_tol=self.stop_tol, stop_window=self.stop_window, step_decays=self.step_decays,
                    decay_factor=self.decay_factor, iterate_average=self.iterate_average, q_max_iter=self.max_iter)

    def evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, warm, offset=None):
        if self.minibatch is not None:
            return self._variational().evaluate(kernel, self._expectations(likelihood),
                                                values, X, y, Z, need_grad=need_grad, need_state=need_state,
                                                warm=warm, offset=offset)
        if likelihood.n_latent > 1:
            return logistic_softmax.evaluate(kernel, likelihood, X, y, Z, spec=self, warm=warm, need_grad=need_grad,
                                             need_state=need_state, offset=offset)
        return polya_gamma.evaluate(kernel, likelihood, X, y, Z, spec=self, warm=warm, need_grad=need_grad,
                                    need_state=need_state, offset=offset)

    def minimise(self, objective, u0, max_iter, progress, callback):
        if self.minibatch is None:
            return super().minimise(objective, u0, max_iter, progress, callback)
        # One pass per step: the hyperparameters' gradient at the q the step starts from costs half
        # of the gradient at the q it moves to, and reached the same test NLPD on twonorm (N = 1e6).
        return stochastic.minimise(objective, u0, max_iter, progress, callback, spec=self,
                                   expectations=self._expectations, one_pass=True,
                                   full_batch=dataclasses.replace(self._variational(), batch_size=None))
