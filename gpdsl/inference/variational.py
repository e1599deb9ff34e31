"""The uncollapsed variational methods: sparse :class:`SVGP` (full batch or minibatch) and
dense :class:`VGP` (:mod:`gpdsl.methods.svgp`, :mod:`gpdsl.methods.vgp`), with the q options
they share (:class:`_Variational`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..checks import check_bool, check_positive_int, check_positive_number
from ..linalg import check_jitter
from ..methods import stochastic, svgp, vgp
from ..methods.common import VariationalState, gaussian_noise, shifted, variational_state_format
from ..methods.pending import PendingEvaluation
from ..parameters import entry
from .base import (_POLISH_PARAMETER, _STOCHASTIC_STOP_PARAMETERS, Inference, _check_chunk,
                   _check_minibatch_options)


Q_UPDATES = ("natural", "joint")
# The posterior's q, at the fitted hyperparameters, is polished to a gain below this (and a
# fixed-point residual below NATGRAD_RESIDUAL_PER_TOL times it) whatever ``q_tol`` the steps
# within a fit use: its gradient in q is then ~1e-8.  Within a fit a gain test of 1e-6 nats
# leaves the hyperparameters' gradient off by ~1e-3 (of order sqrt(q_tol)) and took the same
# L-BFGS-B iterations as 1e-10 on twonorm and breast cancer (full-batch SVGP, M = 128), the
# test NLPD within 2e-4, in 19 to 48 % less CPU (benchmarks/notes_full_batch_passes.md).
POLISHED_Q_TOL = 1e-10
_Q_PARAMETERS = """
    Parameters
    ----------
    q_updates : {"natural", "joint"}, default "natural"
        How q is optimised (see above).
    q_tol : float, default 1e-6
        Natural updates within a fit stop when a step gains less than this many nats; the
        posterior's q is polished to at most ``POLISHED_Q_TOL`` (1e-10) nats (see above).
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
    less than ``q_tol`` nats (for the posterior's q, at the fitted hyperparameters, less than
    t = min(q_tol, ``POLISHED_Q_TOL``) and also until the fixed-point residual, the sites'
    natural parameters less q's, is below ``10 t`` relative to q's largest natural parameter),
    or ``q_max_iter`` steps; L-BFGS-B then
    sees the bound maximised over q, whose gradient in the hyperparameters is the partial one at
    that q (the gradient left in q: below 5e-8 on the tests' problems).  q is the method's local
    state (saved with the posterior).  ``"joint"``: q's parameters are optimised with the
    hyperparameters by L-BFGS-B (GPflow's and the thesis' baseline): slow to converge, since the
    bound is ill-conditioned in q (VGP on 200 points: 5,000 iterations not converged).
    """

    q_updates: str = "natural"
    q_tol: float = 1e-6
    q_max_iter: int = 100
    requires = "variational_expectations"
    log_evidence_kind = "ELBO"
    marginalises_latent = False
    evidence_is_bound = True

    def __post_init__(self):
        name = type(self).__name__
        if self.q_updates not in Q_UPDATES:
            raise ValueError(f"{name}: q_updates must be one of {Q_UPDATES}, got {self.q_updates!r}")
        check_positive_number(name, "q_tol", self.q_tol)
        check_positive_int(name, "q_max_iter", self.q_max_iter)
        check_jitter(name, self.jitter)

    # Whether q moves by minibatch steps (SVGP(batch_size=...)) rather than to its optimum.
    fits_by_minibatch = False

    @property
    def local_state(self):
        """How q is saved with a posterior when it is the local state (``q_updates="natural"``)."""
        return self._state_format if self.q_updates == "natural" else None

    @property
    def optimises_variational_parameters(self):
        return self.q_updates == "joint"

    @property
    def tol(self):
        """The tolerance the convergence warning of an unconverged q quotes (the posterior's, polished)."""
        return self._q_step_tol(polish=True)

    def _q_step_tol(self, polish):
        """The gain (nats) below which the natural steps stop: ``q_tol`` within a fit, at most
        ``POLISHED_Q_TOL`` for the posterior's q."""
        return min(self.q_tol, POLISHED_Q_TOL) if polish else self.q_tol

    def check_likelihood(self, likelihood):
        super().check_likelihood(likelihood)
        if self.q_updates == "joint" and likelihood.n_latent > 1:
            raise ValueError(f"{type(self).__name__}: q_updates='joint' is for one latent function; "
                             f"{likelihood.describe()} has {likelihood.n_latent}: use q_updates='natural'")
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
                                   self._initial_q(X.shape[0], Z, likelihood.n_latent), polish=False)
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
        start = self._initial_q(X.shape[0], Z, likelihood.n_latent)
        warm_fits = warm is not None and all(np.shape(warm.q[k]) == np.shape(v) for k, v in start.items())
        if warm_fits and self.fits_by_minibatch:
            # The minibatch steps have moved q; the posterior is the bound at that q, without
            # full-batch passes over N rows (one O(N M^2) pass evaluates it).  With the state
            # asked for, that pass waits until the bound is read: the state is q's alone.
            q, at = warm.q, {**values, **warm.q}
            local = VariationalState(q, sweeps=0, converged=warm.converged)

            def complete():
                ev = self._evaluate(kernel, likelihood, at, X, y, Z, need_grad=False, need_state=False, offset=offset)
                ev.warm = local
                return ev

            if not need_state:
                return complete()
            state, jitter = svgp.state_at(kernel, likelihood, at, Z, jitter=self.jitter)
            return PendingEvaluation(complete, state=state, jitter=jitter, warm=local, data=(X, y, offset))
        if likelihood.sign_symmetric:
            # Not from the previous q: one that an extreme line-search point (a tiny prior
            # variance) drew towards 0 stays near the saddle there (coal mining: ELBO -290.7
            # against -177.8 from the surrogate).
            start = self.surrogate_q(kernel, shifted(likelihood, offset), X, y, Z)
        elif warm_fits:
            start = warm.q
        # The posterior's q (need_state) is polished to POLISHED_Q_TOL and a small fixed-point
        # residual; within a fit the gain test of q_tol suffices: the hyperparameters' gradient
        # at that q is off by O(sqrt(q_tol)), ~1e-3 at the default, far below the gradient the
        # fit's convergence check allows (a ConvergenceWarning past `gradient_tolerance`: 0.1 at
        # N = 40, 6.7 on twonorm).
        q, steps, converged = self._optimise_q(kernel, likelihood, values, X, y, Z, start, polish=need_state,
                                               offset=offset)
        ev = self._evaluate(kernel, likelihood, {**values, **q}, X, y, Z, need_grad=need_grad, need_state=need_state,
                            offset=offset)
        if warm_fits and start is warm.q and not converged:
            cold = self._cold_start_if_better(kernel, likelihood, values, X, y, Z, ev.log_evidence, offset)
            if cold is not None:
                q, cold_steps, converged = self._optimise_q(kernel, likelihood, values, X, y, Z, cold,
                                                            polish=need_state, offset=offset)
                steps += cold_steps
                ev = self._evaluate(kernel, likelihood, {**values, **q}, X, y, Z, need_grad=need_grad,
                                    need_state=need_state, offset=offset)
        # At q's optimum the bound is stationary in q: its gradient in the hyperparameters is the
        # partial one (the q entries of ev.grads are ~0 and not hyperparameters here).
        ev.grads = {k: v for k, v in ev.grads.items() if not k.startswith("variational.")}
        ev.warm = VariationalState(q, sweeps=steps, converged=converged)
        return ev

    def _cold_start_if_better(self, kernel, likelihood, values, X, y, Z, warm_bound, offset):
        """The cold start of q where the warm-started steps, ended unconverged, left the bound
        ``warm_bound`` below the cold start's own (or not finite); else None.  A q carried from an
        extreme line-search point can sit far below the optimum at the next point (fuzz, VGP on
        Gaussian, probit and Poisson outputs: -2.8e157 from the previous point's q against -9.35
        from the cold start at the same hyperparameters, which ended the fit as non-finite); one
        bound at the cold start, the cost of about one natural step, tells the two apart, so that
        an ordinary unconverged warm start (a step cap) takes no second optimisation.

        Returns
        -------
        dict of str to ndarray, or None
        """
        cold = self._initial_q(X.shape[0], Z, likelihood.n_latent)
        cold_bound = self._evaluate(kernel, likelihood, {**values, **cold}, X, y, Z, need_grad=False,
                                    need_state=False, offset=offset).log_evidence
        return cold if not np.isfinite(warm_bound) or cold_bound > warm_bound else None


# SVGP(one_pass=None) takes one pass a step up to this natural step (for one latent function): the
# gradient at the q a step starts from lags q by 1 / natural_step steps against 1 / natural_step - 1
# at the new q, at most twice as far here.
ONE_PASS_MAX_NATURAL_STEP = 0.5
# SVGP(q_steps=...): how a minibatch run moves q (gpdsl.methods.stochastic.q_steps).
Q_STEPS = ("auto", "natural", "adam")


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
    O(N M^2) pass.  A stop of the rule is confirmed by the full objective's gradient from one
    pass over the data, and polished by the full-batch fit where that is not small and N is at
    most 2,000 rows (``polish``); for K latent functions ``polish=True`` runs instead the joint
    finish of :mod:`gpdsl.methods.svgp_finish` (L-BFGS-B on the hyperparameters and q together,
    at most ``max_iter`` passes).
    Needs ``q_updates="natural"``.
    """ + _Q_PARAMETERS + """chunk_size : int or None, default None
        Rows per O(N M^2) chunk.
    batch_size : int or None, default None
        None: full batch; B: the stochastic optimiser with batches of B rows.
    learning_rate : float, default 0.01
        Stochastic: Adam's step on the log-hyperparameters (and optimised Z); half of it where q
        moves by Adam too (``q_steps``).
    natural_step : float in (0, 1], default 0.1
        Stochastic: the natural-gradient step on q.
    seed : int, default 0
        Stochastic: the seed of the batches.
    """ + _STOCHASTIC_STOP_PARAMETERS + _POLISH_PARAMETER + """    one_pass : bool or None, default None
        Stochastic: True takes each step's Adam gradient from the same pass over the batch as its
        natural step on q, at the q the step starts from (as ``PolyaGamma(minibatch=B)``'s
        steps); False takes it at the new q, from a second pass over the batch (the alternation
        of Salimbeni et al. 2018).  The gradient at the q before the step lags q by one step
        more: q trails the hyperparameters by about 1 / natural_step - 1 steps with two passes
        and 1 / natural_step with one.  None (default): one pass for a likelihood of one latent
        function where ``natural_step`` <= 0.5 (at most twice the lag), two otherwise.  Measured
        (one thread): twonorm at N = 10^6 (M = 128, B = 1,024, probit, natural_step 0.1; seeds
        0 / 1), one pass took the fit from 5.2 / 5.5 s CPU to 4.4 / 5.4 s, 440 / 460 to 440 /
        500 steps, test NLPD .0644 / .0645 to .0635 / .0632; the softmax classes of digits,
        penbased and letter (M = 100, B = 100), at about the same steps, test NLPD .2260 /
        .0505 / .4244 to .2374 / .0549 / .4695, hence two passes for K > 1; at natural_step 1
        (q at the batch's optimum each step) one pass held the hyperparameters back (whole batch
        of 120 sine rows, learning rate 0.05: 300 steps ended 0.19 nats below the optimum,
        against 1e-12 with two).
    q_steps : {"auto", "natural", "adam"}, default "auto"
        Stochastic: how q moves.  ``"natural"``: the natural-gradient steps of size
        ``natural_step``; ``"adam"``: Adam steps of size ``q_learning_rate`` on ``q_mu`` and the
        packed ``q_sqrt`` along the batch's gradient (GPflow's SVGP with Adam), from the same pass
        as the hyperparameters', whose Adam steps then take half of ``learning_rate`` (two
        timescales: q, slower to follow them than under natural steps, tracks them;
        :data:`gpdsl.methods.stochastic.ADAM_Q_HYPER_SHARE`); ``"auto"``: Adam where the
        likelihood's ``log_concave`` is False (robust-max), natural steps otherwise.  Measured on
        letter (18,000 rows, 26 classes, M = 100, B = 256, robust-max, at most 2,000 steps;
        ``benchmarks/exp_step_rules.py``, issue 46): natural steps stopped at test NLPD 0.916
        after 560 steps (2,000 steps with the sites unclipped: 0.956, full bound -34,151); Adam on
        q at the defaults 0.643 / 0.630 (seeds 0 / 1) after 1,220 / 1,240 steps, bound -26,332 /
        -26,582 (GPflow's Adam, 2,000 steps: 0.635).  Robust-max's sites are flat where the
        labelled latent dominates and of negative precision where it does not; natural steps
        from the prior settle in a far lower part of the bound.
    q_learning_rate : float, default 0.02
        Stochastic, ``q_steps`` Adam: the step on q.  Measured as above (hyperparameters at
        0.005): 0.02 gave 0.643; 0.03 0.651 (hyperparameters 0.003); 0.015 0.673 (0.004); at the
        hyperparameters' 0.01, 0.01 gave 0.679 (2,000 steps), 0.02 0.663, 0.03 0.657, 0.05 0.678.
    """
    jitter: float | None = None
    chunk_size: int | None = None
    batch_size: int | None = None
    learning_rate: float = 0.01
    natural_step: float = 0.1
    seed: int = 0
    # The stopping rule's defaults, as PolyaGamma's (measured there).
    stop_tol: float = 1e-3
    stop_window: int = 200
    step_decays: int = 0
    decay_factor: float = 0.3
    # Measured on single-output and K-class fits alike (the docstring's iterate_average).
    iterate_average: int = 50
    one_pass: bool | None = None
    polish: bool | str = "auto"
    q_steps: str = "auto"
    q_learning_rate: float = 0.02
    inducing_rule = "required"
    multi_latent = True
    # The options the minibatch remedies name (gpdsl.methods.stochastic.remedy).
    batch_option = "batch_size"
    q_steps_option = "q_max_iter"
    _state_format = variational_state_format({"q_mu": "inducing", "q_sqrt": "q_sqrt_index"})
    # K latent functions: q_mu (M, K), q_sqrt (K, M (M + 1) / 2), one q(v_k) a class.
    _class_state_format = variational_state_format({"q_mu": ("inducing", "class"),
                                                    "q_sqrt": ("class", "q_sqrt_index")})

    def __post_init__(self):
        super().__post_init__()
        _check_chunk("SVGP", self.chunk_size)
        _check_minibatch_options(self, "batch_size", self.batch_size)
        if self.one_pass is not None:
            check_bool("SVGP", "one_pass", self.one_pass, TypeError)
        if self.q_steps not in Q_STEPS:
            raise ValueError(f"SVGP: q_steps must be one of {Q_STEPS}, got {self.q_steps!r}")
        check_positive_number("SVGP", "q_learning_rate", self.q_learning_rate)
        if self.batch_size is not None and self.q_updates != "natural":
            raise ValueError("SVGP: batch_size needs q_updates='natural' (a minibatch run moves q by its own "
                             f"steps, natural or Adam: q_steps), got q_updates={self.q_updates!r}")

    @property
    def fits_by_minibatch(self):
        return self.batch_size is not None

    def minimise(self, objective, u0, max_iter, progress, callback):
        if self.batch_size is None:
            return super().minimise(objective, u0, max_iter, progress, callback)
        one_pass = self.one_pass
        if one_pass is None:
            one_pass = self.natural_step <= ONE_PASS_MAX_NATURAL_STEP and objective.model.likelihood.n_latent == 1
        return stochastic.minimise(objective, u0, max_iter, progress, callback, spec=self, one_pass=one_pass,
                                   full_batch=dataclasses.replace(self, batch_size=None))

    def local_state_for(self, likelihood):
        """q's format, with a class dimension for a likelihood of K > 1 latent functions.

        Parameters
        ----------
        likelihood : gpdsl.likelihoods.Likelihood
        """
        local = self.local_state
        return self._class_state_format if local is not None and likelihood.n_latent > 1 else local

    def _initial_q(self, n, Z, n_latent=1):
        return None if Z is None else svgp.initial_values(Z.shape[0], n_latent)

    def _optimise_q(self, kernel, likelihood, values, X, y, Z, start, polish, offset=None):
        return svgp.optimise_q(kernel, likelihood, values, X, y, Z, start, jitter=self.jitter,
                               chunk_size=self.chunk_size, offset=offset, tol=self._q_step_tol(polish),
                               max_iter=self.q_max_iter, polish=polish)

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

    def _initial_q(self, n, Z, n_latent=1):
        return vgp.initial_values(n)

    def _optimise_q(self, kernel, likelihood, values, X, y, Z, start, polish, offset=None):
        return vgp.optimise_q(kernel, shifted(likelihood, offset), values, X, y, start, jitter=self.jitter,
                              tol=self._q_step_tol(polish), max_iter=self.q_max_iter, polish=polish)

    def _evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, offset=None):
        return vgp.evaluate(kernel, likelihood, values, X, y, jitter=self.jitter, need_grad=need_grad,
                            need_state=need_state, offset=offset)
