"""The minibatch optimiser of the uncollapsed variational methods for large N: SVGP
(``gd.inference.SVGP(batch_size=B)``) and stochastic Pólya-Gamma classification
(``gd.inference.PolyaGamma(minibatch=B)``, the same steps on the closed-form expectations of
:mod:`gpdsl.methods.stochastic_polya_gamma`).

Hensman, Fusi & Lawrence (2013) and Hensman, Matthews & Ghahramani (2015, section 3): the bound
is a sum over data points plus a KL term, so a batch of B rows drawn at random, its data term
times N / B, is an unbiased estimate of it and of its gradient.  Each step (Salimbeni,
Eleftheriadis & Hensman 2018, "Natural gradients in practice"):

1. a natural-gradient step of size ``natural_step`` on q(v) from the batch
   (:func:`gpdsl.methods.svgp.minibatch_step`); or, where the likelihood is not log-concave
   (robust-max; :func:`q_steps`), an Adam step of size ``q_learning_rate`` on q's parameters
   (``q_mu`` and the packed ``q_sqrt``, as GPflow's SVGP) along the batch's gradient, from the
   pass that gives the hyperparameters' (:func:`batch_gradient`).  Either way, for softmax and
   robust-max under one kernel shared by the classes, q's class mean is then centred
   (:func:`gpdsl.methods.svgp_classes.centres`): no batch's rows see it, and the KL is least there;
2. an Adam step (Kingma & Ba 2015, their defaults beta1 = 0.9, beta2 = 0.999, eps = 1e-8) of size
   ``learning_rate`` on the free log-space vector of hyperparameters (and optimised Z) along the
   batch's gradient, log priors included: with ``one_pass`` (stochastic Pólya-Gamma, and SVGP's
   default for one latent function at natural steps up to 0.5) at the q the step started from, so
   that one pass over the batch gives both steps; otherwise at the new q, from a second pass.
   A mean function's parameters step with q's whitened mean carried along (:class:`_MeanCarry`),
   so that the mean takes over the level q held rather than waiting on the batches' noise.

Every step is O(B M^2 + M^3); nothing of size N is formed.  The q reached is left as the
objective's warm start; the model's final evaluation reports the full-batch bound and the
prediction at that q, one O(N M^2) pass.

The stopping rule (:mod:`gpdsl.methods.stopping_rule`) ends the run where the smoothed batch
objective stops changing beyond its noise, or first shrinks the steps there (``step_decays``); a
run that reaches ``max_iter`` first reports so (``success`` False, stop reason ``"max_iter"``), with
the change it was still making.

The confirmation.  The rule says only that the smoothed batch objective stopped changing beyond
its noise, not that the run is at the optimum: with Adam's steps of about ``learning_rate`` in
the log-hyperparameters, a constant mean started at 0 for data at 5 moved to 0.12 in 420 steps
and stopped there (3.2 with q's mean carried, issue 46), and q's batch noise at ``natural_step`` 0.1 leaves the hyperparameters'
gradient at many times the full-batch tolerance (issue 45).  So a stop of the rule is confirmed
by one pass over all N rows (:func:`full_pass_check`, chunked as every full-batch pass): the
largest entry of the full objective's gradient, in the hyperparameters and in q, against
:func:`gpdsl.diagnostics.gradient_tolerance` (N), the full-batch fits' tolerance.  Where it is
larger, ``polish=True`` continues with the full-batch fit from there (L-BFGS-B on the bound with
q moved to its optimum at every evaluation by natural steps, at most ``max_iter`` iterations,
its best iterate returned; stopped at its first evaluation where q's natural steps do not
converge there, since L-BFGS-B's objective then depends on the path of q's warm starts:
:func:`_polish`), kept where it raised the full objective, and is confirmed again.  The result
reports the last check (``grad_norm``, ``grad_name``, ``grad_tol``; ``fun`` the negative full
objective), so that the fit says ``converged=False`` and warns where the gradient is still large
(:func:`remedy` says what gives a converged fit).  ``polish=False`` keeps the steps' end and its
verdict.  For K latent functions (``Categorical``) ``polish=True`` runs instead the joint finish
of :mod:`gpdsl.methods.svgp_finish`: L-BFGS-B on the hyperparameters and q together, one pass an
evaluation, at most ``max_iter`` evaluations, stopped at the first point within the tolerance
(issue 46: q's full-batch natural steps did not converge for 3 classes at the first evaluation,
robust-max's not in 5,000 steps, so the polish above stops there); ``"auto"`` keeps the polish
above for them, by the finish's cost (below).

The polish's cost.  Each of its L-BFGS-B evaluations takes q to its optimum by full-batch
natural steps, O(N M^2) each, so it grows with N while the steps' cost does not; the check is
one pass.  ``polish="auto"`` (the default) polishes fits of at most :data:`POLISH_AUTO_MAX_ROWS`
rows.  Measured (``benchmarks/exp_polish_cost.py``, one thread, M = 64, B = 256; steps, check,
polish in CPU seconds; steps taken, L-BFGS-B iterations):

    ==================  =======  ============  =====  =======================
    problem             N        steps         check  polish (iterations)
    ==================  =======  ============  =====  =======================
    binary Pólya-Gamma  5,000    1.22 (1000)   0.03   12.65 (17)
    (twonorm, logit)    10,000   0.59 (460)    0.07   23.39 (20)
                        30,000   0.57 (440)    0.16   62.26 (17)
    SVGP Bernoulli      2,000    1.05 (620)    0.02   0.75 (15)
    (twonorm, probit)   5,000    0.74 (520)    0.03   1.59 (14)
                        10,000   0.72 (420)    0.10   2.07 (14)
                        30,000   0.62 (420)    0.18   6.45 (16)
    SVGP Poisson        2,000    0.54 (420)    0.01   0.17 (11)
    (2-D, log link)     10,000   0.68 (420)    0.06   0.70 (9)
                        30,000   1.24 (420)    0.14   2.13 (10)
    SVGP Gaussian,      2,000    0.61 (420)    0.01   0.24 (26)
    constant mean       10,000   0.73 (420)    0.03   0.58 (15)
                        30,000   1.45 (420)    0.08   2.00 (22)
    ==================  =======  ============  =====  =======================

At 2,000 rows every single-output SVGP polish cost less than the steps; from 5,000 on the
Pólya-Gamma polish cost 10 to 100 times the steps (its full-batch natural steps on q alternate
with the closed-form c, about 100 passes per evaluation), and SVGP's 2 times at 5,000, 0.8 to 3
at 10^4 and 1.4 to 10 at 3 x 10^4.  The exceptions at or below 2,000 rows (the same script after
the review of issue 45, steps timed without the inducing selection and the final evaluation;
multi-class: 3 classes, M = 20, B = 100):

    ========================  =====  ===========  =====  ===========  ========  ==============
    problem                   N      steps        check  polish (it)  gain      converged
    ========================  =====  ===========  =====  ===========  ========  ==============
    binary Pólya-Gamma        2,000  1.70 (1040)  0.01   5.01 (15)    43.4      yes
    (twonorm, max_iter 3000)
    logistic-softmax PG       1,000  0.76 (800)   0.01   12.36 (14)   2.9       no (15 vs 1)
                              2,000  0.59 (580)   0.01   33.59 (17)   29.4      yes
    softmax SVGP              1,000  0.59 (440)   0.01   0.21 (0)     5.9       no (32 vs 1)
                              2,000  0.49 (400)   0.01   0.44 (0)     10.0      no (83 vs 2)
    robust-max SVGP           1,000  0.78 (520)   0.01   0.69 (0)     52.6      no (133 vs 1)
                              2,000  0.64 (420)   0.02   1.36 (0)     155.6     no (168 vs 2)
    ========================  =====  ===========  =====  ===========  ========  ==============

The Pólya-Gamma polish costs 3 (binary) to 56 (3 classes) times the steps at these sizes, at most
34 s, and buys convergence (29 to 43 nats); "auto" keeps it for one latent function, since the
polish is what makes a small minibatch fit reach the optimum, and ``polish=False`` or the
collapsed method are the cheaper choices a user can make knowingly.  For K latent functions a
full-batch pass costs K times as much: on digits (1,437 rows, 10 classes, M = 100, issue 46) the
logistic-softmax polish took about 150 CPU s after 10 s of steps, ended unconverged and moved the
test NLPD from 0.392 to 0.405; so "auto" polishes where N K is at most
:data:`POLISH_AUTO_MAX_ROWS` (:func:`polishes`), which leaves out the 3-class rows above.  The
multi-class SVGP polishes above stopped at their first evaluation (0 iterations), q's natural
steps not converging there; they are now the joint finish (:mod:`gpdsl.methods.svgp_finish`),
which on the 1,000-row, 3-class softmax fit ends within the tolerance after 148 evaluations (1.0 s,
+10.2 nats) and on robust-max runs to its 1,000-evaluation cap (6.9 s, +128.9 nats, gradient 6.5
against 1).  On the acceptance sets of issue 46 (``benchmarks/exp_finish.py``, ``benchmarks/HISTORY.md``)
it needed 339 evaluations on digits (robust-max, 1,437 rows x 10 classes: 20.1 CPU s after the
steps' 19, load 4) and ended at a worse test NLPD (0.134 against the steps' end's 0.087); on iris
(150 rows, 3 classes, M = 100, ``GPClassifier()`` in a Pipeline) it took the fit from 6.3 to 10.2
CPU s for 0.2 nats, and tests/test_sklearn.py's 5-fold cross-validation on iris to 336 s (wall,
load 6-8; both before q was carried in u-space).  So ``"auto"`` does not run it: ``polish=True``
does.  (Binary Pólya-Gamma at 2,000 rows under the default max_iter ran out of its 1,000 steps
of 256 rows before the rule fired: no check, no polish.)  Every polish above reached the
tolerance but the constant
mean's at 10^4 (28 against 10).  At twonorm N = 10^5 (M = 64, B = 256, SVGP) the polish took 16
iterations and 22 s after the steps' 0.7 s and raised the bound by 865 nats (test NLPD .0636 to
.0587).  The check alone (``--check-only``): at twonorm 10^5 (M = 64, B = 256) 0.18 to 0.26 s;
at 10^6 (M = 128, B = 1,024, the README's speed table's rows) 4.4 to 4.8 s for probit SVGP and
3.3 to 3.8 s for Pólya-Gamma, more than their steps' 2.6 to 2.8 s (one thread, two runs on a
loaded machine), and it flagged all four fits (gradient 783 and 3.5e3 against 100 at 10^5,
2.0e3 and 1.1e4 against 10^3 at 10^6).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from .._jit.adam import adam_q_step
from ..diagnostics import gradient_tolerance, largest_gradient
from ..multioutput import inducing_gradient, method_inducing, output_count
from . import svgp, svgp_finish
from .common import SINGULAR_Q, VariationalState, shifted
from .stopping_rule import StoppingRule
from .svgp import CarriedQ, initial_values, minibatch_update
from .svgp_classes import Scratch, centred, centres

_ADAM_BETA1, _ADAM_BETA2, _ADAM_EPS = 0.9, 0.999, 1e-8
# Where q moves by Adam (q_steps), the hyperparameters' Adam steps take this share of learning_rate:
# two timescales, q (which Adam moves by about q_learning_rate a step, many steps from its optimum
# for new hyperparameters where natural steps take about 1 / natural_step) tracking them.  Measured
# on letter's robust-max (M 100, B 256, q_learning_rate 0.02, seeds 0 / 1): test NLPD 0.643 / 0.630
# at 0.005 (this share of 0.01), 0.663 at the whole 0.01; the length-scale, which the bound pulls
# up while the test NLPD worsens, 5.3 against 6.2 at the stop.
ADAM_Q_HYPER_SHARE = 0.5
# polish="auto" polishes a fit of at most this many rows times latent functions (the module
# docstring's measurements: at 2,000 rows every single-output SVGP polish cost less than the steps
# and Pólya-Gamma's 3 to 56 times them, at most 34 s, for 29 to 43 nats and convergence; from 5,000
# Pólya-Gamma's cost 10 to 100 times the steps, growing with N; 10 classes at 1,437 rows 150 s).
POLISH_AUTO_MAX_ROWS = 2000


class Adam:
    """Kingma & Ba (2015)'s steps on a vector, their defaults beta1 = 0.9, beta2 = 0.999,
    eps = 1e-8: the displacement -rate m_hat / (sqrt(v_hat) + eps) of bias-corrected moving
    averages of the gradient and its square.

    Parameters
    ----------
    rate : float
        The learning rate.
    """

    def __init__(self, rate):
        self.rate, self.first, self.second, self.count = rate, 0.0, 0.0, 0

    def step(self, gradient):
        """The displacement to subtract for ``gradient`` (of the function minimised).

        Parameters
        ----------
        gradient : ndarray

        Returns
        -------
        ndarray
        """
        first, second, correction1, correction2 = self.advance(np.size(gradient))
        self.first = _ADAM_BETA1 * first + (1.0 - _ADAM_BETA1) * gradient
        self.second = _ADAM_BETA2 * second + (1.0 - _ADAM_BETA2) * gradient * gradient
        return self.rate * (self.first / correction1) / (np.sqrt(self.second / correction2) + _ADAM_EPS)

    def mean_gradient(self):
        """The bias-corrected first moment m_hat (0 before the first step)."""
        return self.first / (1.0 - _ADAM_BETA1 ** self.count) if self.count else np.zeros(1)

    def advance(self, size):
        """The next step's bookkeeping, for :meth:`step` and for a caller that applies the step itself
        (:func:`gpdsl._jit.adam.adam_q_step`): the step count advanced and the moments as arrays of
        ``size`` entries (zeros before the first step), to be updated as :meth:`step` updates them.

        Parameters
        ----------
        size : int
            The entries of the vector stepped.

        Returns
        -------
        first, second : ndarray, shape (size,)
            The moments, updated in place by the caller.
        correction1, correction2 : float
            The bias corrections 1 - beta1^t and 1 - beta2^t of this step t.
        """
        if np.ndim(self.first) == 0:
            self.first, self.second = np.zeros(size), np.zeros(size)
        elif self.first.shape != (size,):
            # The jitted caller writes size entries unchecked: a vector of another length is refused here.
            raise ValueError(f"Adam.advance: size {size} is not that of the moments ({self.first.size})")
        self.count += 1
        return self.first, self.second, 1.0 - _ADAM_BETA1 ** self.count, 1.0 - _ADAM_BETA2 ** self.count


class IterateAverage:
    """An exponential moving average of a run's iterates (``iterate_average`` = T steps): a_1 = x_1,
    a_t = a_{t-1} + (x_t - a_{t-1}) / T, for each of the arrays handed to :meth:`update`.

    Why: at fixed steps the minibatch iterates scatter around the optimum by the batches' noise
    (:mod:`gpdsl.methods.stopping_rule`); an average over the last ~T steps scatters less
    (Polyak & Juditsky 1992; PyTorch's ``swa_utils.AveragedModel`` with an EMA).  The steps
    themselves are unchanged: the average is what the run returns.

    Parameters
    ----------
    steps : int
        T >= 1 (1: the last iterate).
    """

    def __init__(self, steps):
        self.weight, self.values, self._scratch = 1.0 / steps, None, None

    def update(self, *arrays):
        """Fold this step's iterates into the averages (copies at the first step).

        Every minibatch fit runs this a step (SVGP's and PolyaGamma's default), so the difference
        is formed in a buffer kept across steps rather than two new arrays a step: the same
        operations in the same order, so the same bits.

        Parameters
        ----------
        *arrays : ndarray
            The same arrays, in the same order and shapes, at every step.
        """
        if self.values is None:
            self.values = [np.array(a, dtype=float) for a in arrays]
            self._scratch = [np.empty_like(v) for v in self.values]
            return
        for average, a, change in zip(self.values, arrays, self._scratch):
            np.subtract(a, average, out=change)
            change *= self.weight
            average += change


def batch_gradient(kernel, likelihood, X, y, Z, state, *, scale, jitter=None, offset=None):
    """The batch's estimate of the bound, scale E_batch - KL, and its gradient in the
    hyperparameters, Z and q, from one pass at ``state``'s q: what an Adam step on q
    (``SVGP(q_steps="adam")``) follows.  dELBO/dm_k = scale A g_k - m_k and dELBO/dR_k = lower
    triangle of 2 scale P_k R_k - R_k + diag(1/R_ii) (:func:`gpdsl.methods.svgp._gradients`).

    Parameters
    ----------
    kernel, likelihood, X, y, Z, scale, jitter, offset
        As for :func:`gpdsl.methods.svgp.minibatch_update`.
    state : gpdsl.methods.svgp.CarriedQ
        The current q.

    Returns
    -------
    elbo : float
        The batch's estimate of the bound.
    grads : dict of str to ndarray
        Its gradients in the hyperparameters.
    dZ : ndarray, shape (M, D)
    q_grads : dict of str to ndarray
        Its gradient in ``variational.q_mu`` (M, K) and the packed ``variational.q_sqrt``.
    jitter : float
    """
    m, R = state.m, state.R
    factors, ((ell, Ag, Phi, grads, dZ, PR), (_, g, _)) = svgp._batch_pass(
        kernel, likelihood, X, y, Z, m, R, jitter, ("grad", "q_grad"), offset, scratch=state.scratch)
    elbo = scale * float(ell) - svgp._kl(m, R)
    if not np.isfinite(elbo):
        raise FloatingPointError("SVGP: non-finite bound")
    # A g and P R enter only q's gradient: scaled here, the hyperparameters' below.
    grads, dZ = svgp._gradients(kernel, Z, factors, m, R, scale * Ag, Phi, grads, dZ, PR=scale * PR,
                           d_offset=None if offset is None else g[:, 0])
    q_grads = {k: grads.pop(k) for k in svgp._Q_KEYS}
    return elbo, {k: scale * g_k for k, g_k in grads.items()}, scale * dZ, q_grads, factors.jitter


class _MeanCarry:
    """A mean function's parameters theta stepped with q's whitened mean carried along.

    In the coordinates (theta, m~) with m = m~ - L^-1 mu_theta(Z) (mu the mean function, L the
    factor of K_uu), a change of theta leaves q's latent mean at Z, hence (where mu lies in the
    kernel's span) at every row, as it was: the mean takes over what q held.  The bound's gradient
    in theta there is d/dtheta at fixed m less J^T L^-T dELBO/dm, J = d mu_theta(Z) / dtheta:
    the batch's rows enter only through g_n (dmu(x_n) - k_n^T K_uu^-1 dmu(Z)), what the mean
    explains that the inducing values could not, and the KL's pull m^T L^-1 J stays.  At fixed m
    the rows' residual noise (N / sqrt(B) times their spread) swamps that pull, and Adam's steps
    in theta, learning_rate times the gradient's signal-to-noise ratio, barely move it (issue 45:
    a constant at 0.08 where the data's level is 5)."""

    def __init__(self, model, values, kernel, Z, jitter, X_batch, q_at, grads):
        self.model, self.values, self.Z = model, values, Z
        self.Li = svgp._factors(kernel, Z, jitter).Li[0]
        d_rows = grads["offset"]
        dm = self.Li @ (kernel.gram(Z, X_batch) @ d_rows) - q_at.m[:, 0]
        self.correction = model.mean_gradients(values, Z, self.Li.T @ dm)

    def correct(self, grads):
        for name, g in self.correction.items():
            grads[name] = grads[name] - g

    def moved(self, q, new_values):
        shift = self.Li @ (self.model.latent_offset(new_values, self.Z) - self.model.latent_offset(self.values, self.Z))
        m = q.m - shift[:, None]
        if q.natural is None:
            return CarriedQ(m, q.R, scratch=q.scratch)
        Lam, eta = q.natural
        return CarriedQ(m, q.R, (Lam, eta - np.einsum("kij,j->ki", Lam, shift)), q.scratch)


def _moved_q(q, q_grads, adam):
    """q after an Adam step up the bound's gradient in its parameters (``variational.q_mu`` and the
    packed ``variational.q_sqrt``, as GPflow's SVGP takes them): :meth:`Adam.step` on their flat
    vector, fused with q's unpacking (:func:`gpdsl._jit.adam.adam_q_step`, the same bits)."""
    M, K = q.m.shape
    first, second, correction1, correction2 = adam.advance(M * K + K * M * (M + 1) // 2)
    m, R, valid = adam_q_step(
        np.ascontiguousarray(q.m, dtype=float), np.ascontiguousarray(q.R, dtype=float),
        np.ascontiguousarray(q_grads["variational.q_mu"], dtype=float).reshape(M, K),
        np.ascontiguousarray(q_grads["variational.q_sqrt"], dtype=float).reshape(K, -1),
        first, second, float(adam.rate), _ADAM_BETA1, _ADAM_BETA2, _ADAM_EPS, correction1, correction2)
    if not valid:
        raise FloatingPointError(SINGULAR_Q)
    return CarriedQ(m, R, scratch=q.scratch)


def q_steps(spec, likelihood):
    """How a minibatch run moves q: ``spec.q_steps`` where it is ``"natural"`` or ``"adam"``; for
    ``"auto"``, Adam where the likelihood says it is not log-concave (``log_concave`` False:
    robust-max), natural steps otherwise.

    Parameters
    ----------
    spec : gpdsl.inference.SVGP or gpdsl.inference.PolyaGamma
    likelihood : gpdsl.likelihoods.Likelihood

    Returns
    -------
    str
        ``"natural"`` or ``"adam"``.
    """
    rule = getattr(spec, "q_steps", "natural")
    if rule != "auto":
        return rule
    return "adam" if getattr(likelihood, "log_concave", None) is False else "natural"


def polishes(spec, n, n_latent=1):
    """Whether a minibatch fit of ``n`` rows continues with the full-batch polish where its
    confirming pass finds the gradient large: ``spec.polish`` where it is True or False; for
    ``"auto"``, where ``n`` times the likelihood's latent functions is at most
    :data:`POLISH_AUTO_MAX_ROWS` (a full-batch pass is O(N K M^2)).

    Parameters
    ----------
    spec : gpdsl.inference.SVGP or gpdsl.inference.PolyaGamma
        The declaration (its ``polish``).
    n : int
        The fit's rows.
    n_latent : int, default 1
        K, the likelihood's latent functions.

    Returns
    -------
    bool
    """
    return spec.polish if isinstance(spec.polish, bool) else n * n_latent <= POLISH_AUTO_MAX_ROWS


def remedy(spec, n, n_latent=1):
    """What gives a converged fit where a minibatch fit of ``n`` rows ended with the full
    objective's gradient above the tolerance: the polish (where it did not run), the full-batch
    method, more steps; for the unconverged-fit warning.

    Parameters
    ----------
    spec : gpdsl.inference.SVGP or gpdsl.inference.PolyaGamma
        The declaration.
    n : int
        The fit's rows.
    n_latent : int, default 1
        K, the likelihood's latent functions.

    Returns
    -------
    str
    """
    name, batch = type(spec).__name__, spec.batch_option
    full_batch = f"the full-batch method ({name}({batch}=None)) fits the same bound with L-BFGS-B"
    steps = "a longer stop_window takes more steps before the stopping rule can fire"
    if spec.polish is True and n_latent > 1:
        return (f"the joint finish (L-BFGS-B on the hyperparameters and q) ran out of its max_iter evaluations: "
                f"a larger max_iter gives it more; or {full_batch}")
    joint = ("; polish=True runs the joint finish (L-BFGS-B on the hyperparameters and q) instead"
             if n_latent > 1 else "")
    if polishes(spec, n, n_latent):
        return (f"the full-batch polish stopped short too: its natural steps on q may need a larger "
                f"{spec.q_steps_option}{joint}; or {full_batch}")
    skipped = (f"polish='auto' skips it above {POLISH_AUTO_MAX_ROWS:,} rows times latent functions, here "
               f"{n:,} x {n_latent}, since its full-batch passes cost many times the steps" if spec.polish == "auto"
               else "polish=False")
    finish = "the joint finish of the hyperparameters and q" if n_latent > 1 else "the full-batch fit"
    return (f"polish=True continues with {finish} from the steps' end ({skipped}); or {full_batch}; or {steps}")


def minimise(objective, u0, max_iter, progress, callback, *, spec, full_batch, expectations=None, one_pass=False):
    """Minibatch steps from ``u0`` on ``objective`` (gpdsl.model's objective: its parameter table,
    data, Z and warm start) until the stopping rule of :mod:`gpdsl.methods.stopping_rule` stops
    it or ``max_iter`` steps have been taken; returns an OptimizeResult as L-BFGS-B's run does.

    ``spec``: the inference declaration, read for ``batch_size``, ``seed``, ``natural_step``,
    ``learning_rate``, ``q_steps`` and ``q_learning_rate`` (SVGP's; :func:`q_steps`), ``jitter``,
    ``stop_tol``, ``stop_window``, ``step_decays``, ``decay_factor``, ``iterate_average`` and
    ``polish`` (its class names
    it in errors); a stop of the rule is confirmed, and polished where :func:`polishes` says, as
    the module docstring says.  ``likelihood``: what the batch's expected log-likelihood is integrated by (its
    ``variational_expectations``); None: the model's likelihood.  ``one_pass``: each step's
    gradient is taken at the q it starts from, one pass over the batch, rather than at the q it
    moves to (see :func:`gpdsl.methods.svgp.minibatch_step`).

    Parameters
    ----------
    objective : gpdsl.fitting._Objective
        The model's objective; its ``warm`` is set to the final :class:`VariationalState`
        (``sweeps``: the steps taken, ``converged``: whether the rule fired).
    u0 : ndarray, shape (P,)
        Free log-space starting vector.
    max_iter : int
        The cap on the minibatch steps.
    progress : bool
        Print each step.
    callback : callable or None
        Called each step with ``{"iteration", "objective", "grad_norm"}`` (the batch's).
    spec : gpdsl.inference.SVGP or gpdsl.inference.PolyaGamma
        The declaration.
    full_batch : gpdsl.inference.SVGP
        The full-batch declaration of the same bound (``batch_size=None``): its evaluation (q at
        its optimum) is what the confirmation's pass and the polish run.
    expectations : callable, optional
        Maps the bound likelihood to what the expected log-likelihood integrates (None: the
        likelihood itself).
    one_pass : bool, default False
        Take the gradient at the q each step starts from.

    Returns
    -------
    scipy.optimize.OptimizeResult
        ``x`` (the last iterate, or the polish's), ``fun`` (after a stop of the rule the negative
        full objective from the confirming pass; after ``max_iter`` steps the smoothed objective:
        N times the mean per-point batch estimate over the last ``stop_window`` steps, or all
        steps if fewer), ``nit`` (steps taken, plus the polish's L-BFGS-B iterations),
        ``success`` (True only when the stopping rule fired), ``stop_reason``
        (``"stochastic_rule"`` or ``"max_iter"``), ``message`` (the rule's numbers and the
        checks'), ``grad_norm``, ``grad_name`` and ``grad_tol`` (after a stop of the rule the
        confirming pass's :class:`FullPassCheck`; after ``max_iter`` steps the norm of Adam's
        bias-corrected first moment, "" and nan), ``jac`` (None), and gpdsl's ``plateau``
        (False), ``runaway`` (None) and ``start`` (``u0``).
    """
    model, table, X, y, offset = objective.model, objective.table, objective.X, objective.y, objective.offset
    n, n_latent = X.shape[0], int(getattr(model.likelihood, "n_latent", 1))
    batch = min(spec.batch_size, n)
    window = spec.stop_window
    rng = np.random.default_rng(spec.seed)
    u = np.array(u0, dtype=float)
    values = table.unpack(u)
    _, Z = _method_inducing(objective, dict(values))
    q = initial_values(Z.shape[0], model.likelihood.n_latent)
    # A re-selection round (the inducing spec's reinit loop) may have changed M: its q then
    # does not fit, and the steps start from the prior, as a fresh fit does.
    if objective.warm is not None and all(np.shape(objective.warm.q[k]) == np.shape(v) for k, v in q.items()):
        q = objective.warm.q
    elif model.likelihood.sign_symmetric:
        kernel, likelihood = model.bind(values)
        q = spec.surrogate_q(kernel, shifted(likelihood, model.latent_offset(values, X, offset)), X, y, Z)
    q = CarriedQ.of(q, Z.shape[0], model.likelihood.n_latent)._replace(scratch=Scratch())
    trail = []               # per-step batch estimates of the negative objective, per data point
    first_order = q_steps(spec, model.likelihood) == "adam"
    # Adam's q centred as the natural steps' (minibatch_update): from a centred start every gradient's class
    # mean in q_mu is 0 (sum_k dE/dmean_k = 0, the KL's -m_k centred), so Adam's moments need no change.
    centre = first_order and centres(model.kernel, model.likelihood, model.likelihood.n_latent)
    if centre:
        q = q._replace(m=centred(q.m)[0])
    q_adam = Adam(getattr(spec, "q_learning_rate", spec.learning_rate)) if first_order else None
    hyper_steps = Adam(spec.learning_rate * (ADAM_Q_HYPER_SHARE if first_order else 1.0))
    fired, message, step = False, "", 0
    rho, rule = spec.natural_step, StoppingRule(spec)
    average = IterateAverage(spec.iterate_average) if spec.iterate_average else None
    for step in range(1, max_iter + 1):
        rows = rng.choice(n, size=batch, replace=False)
        values = table.unpack(u)
        Z_declared, Z = _method_inducing(objective, values)
        # The latent offset of the batch: the mean function's value there plus the known offset.
        X_batch = X[rows]
        kernel, likelihood, latent = _bound(model, values, X_batch, None if offset is None else offset[rows],
                                            expectations)
        start = q
        if first_order:
            elbo, grads, dZ, q_grads, jit = batch_gradient(kernel, likelihood, X_batch, y[rows], Z, q,
                                                           offset=latent, scale=n / batch, jitter=spec.jitter)
            q = _moved_q(q, q_grads, q_adam)
            if centre:
                # Adam's per-entry scaling moves the class mean though its gradient is 0: projected out.
                q = q._replace(m=centred(q.m)[0])
        else:
            q, elbo, grads, dZ, jit = minibatch_update(kernel, likelihood, X_batch, y[rows], Z, q, offset=latent,
                                                       scale=n / batch, rho=rho, jitter=spec.jitter,
                                                       one_pass=one_pass)
        carry = None
        if model.mean is not None:
            # The gradients are at the q the step started from where one pass gave them (Adam's
            # steps on q always), at the new q otherwise.
            carry = _MeanCarry(model, values, kernel, Z, jit, X_batch, start if one_pass or first_order else q, grads)
        # Already scaled by N / B, as the batch's other gradients.
        _mean_gradients(model, values, X_batch, grads)
        if carry is not None:
            carry.correct(grads)
        if "inducing.Z" in table.names():
            grads["inducing.Z"] = inducing_gradient(dZ, Z_declared, output_count(model.kernel))
            values["inducing.Z"] = Z_declared
        log_prior, prior_grads = table.log_prior(values)
        table.check_gradients(type(spec).__name__, grads)
        for name, g in prior_grads.items():
            grads[name] = grads[name] + g
        estimate = -(elbo + log_prior)
        trail.append(float(estimate) / n)
        g = -table.chain(values, grads)
        u = u - hyper_steps.step(g)
        if carry is not None:
            q = carry.moved(q, table.unpack(u))
        report = {"iteration": step, "objective": float(estimate), "grad_norm": float(np.linalg.norm(g))}
        if progress:
            print(f"step {step:6d}  batch objective {report['objective']: .10g}  |grad| {report['grad_norm']:.3e}",
                  flush=True)
        if callback is not None:
            callback(report)
        if average is not None:
            average.update(u, q.m, q.R)
        verdict = rule.verdict(trail)
        if verdict == "decay":
            rho *= spec.decay_factor
            hyper_steps.rate *= spec.decay_factor
            if q_adam is not None:
                q_adam.rate *= spec.decay_factor
            if progress:
                print(f"step {step:6d}  plateau: steps shrunk by {spec.decay_factor:g}", flush=True)
        elif verdict == "stop":
            fired, message = True, rule.message
            break
    if progress and fired:
        print(message, flush=True)
    if average is not None:
        # The averages of q's m and R (not of its natural parameters): the form each step leaves q in.
        u, m, R = average.values
        q = CarriedQ(m, R)
    q = q.as_dict()
    smoothed = n * float(np.mean(trail[-window:])) if trail else np.nan
    from scipy.optimize import OptimizeResult       # here, not at import (issue 46: import gpdsl within 0.7 s)

    result = OptimizeResult(x=u, fun=smoothed, success=fired, stop_reason="stochastic_rule" if fired else "max_iter",
                            nit=step, jac=None, grad_norm=float(np.linalg.norm(hyper_steps.mean_gradient())),
                            grad_tol=np.nan, grad_name="", plateau=False, runaway=None, start=u0, message=message,
                            polish_iterations=0)
    if not fired:
        result.message = rule.cap_message(trail, max_iter)
    else:
        check = full_pass_check(objective, result.x, q, full_batch, expectations)
        result.message += f"; {check.describe()} at the steps' end"
        if polishes(spec, n, n_latent) and not check.largest <= check.tolerance:
            if n_latent > 1 and spec.polish is True:
                # K latent functions: q's full-batch natural steps do not converge (robust-max) or
                # converge slowly, so q and the hyperparameters move together (svgp_finish); only
                # where asked for, by its cost (the module docstring).
                done = svgp_finish.finish(functools.partial(_checked_at, objective, full_batch, expectations),
                                          result.x, q, max_iter,
                                          transport=functools.partial(_transport, objective, full_batch))
                u_polished, q_polished, iterations, sweeps = done.u, done.q, done.evaluations, 0
                how, polished = f"joint L-BFGS-B on the hyperparameters and q, {done.how}", done.point
            else:
                u_polished, q_polished, iterations, how, sweeps = _polish(objective, result.x, q, full_batch,
                                                                          expectations, max_iter, progress, callback,
                                                                          steps=step)
                polished = full_pass_check(objective, u_polished, q_polished, full_batch, expectations)
            # Counted whether the polish is kept or not: nit (the record's n_iterations) is the
            # work done; polish_iterations says how much of it was the polish's.
            result.nit += iterations
            result.polish_iterations = iterations
            objective.total_sweeps += sweeps
            # Kept only where it raised the full objective: an L-BFGS-B run whose evaluations move q
            # by natural steps that do not converge (robust-max) can end lower than it started.
            kept = polished.objective >= check.objective
            result.message += (f"; then a full-batch polish ({how}): {polished.describe()}, objective "
                               f"{polished.objective - check.objective:+.4g}"
                               + ("" if kept else ", lower: the steps' end is kept"))
            if kept:
                result.x, q, check = u_polished, q_polished, polished
        result.grad_norm, result.grad_name, result.grad_tol = check.largest, check.name, check.tolerance
        result.fun = -check.objective
    objective.warm = VariationalState(q, sweeps=step, converged=fired)
    return result


class FullPassCheck(NamedTuple):
    """The full objective at the end of a minibatch run (:func:`full_pass_check`).

    Parameters
    ----------
    objective : float
        The bound on all N rows plus the log prior at the run's hyperparameters and q.
    largest : float
        The largest entry of its gradient, in the units of :func:`gpdsl.diagnostics.largest_gradient`
        (per e-fold of a positive hyperparameter) for the hyperparameters and in the whitened
        coordinates of q (``variational.q_mu``, the packed ``variational.q_sqrt``: per prior
        standard deviation) for q.
    name : str
        Its parameter.
    tolerance : float
        :func:`gpdsl.diagnostics.gradient_tolerance` of N rows, the full-batch fits' tolerance.
    gradient : ndarray, shape (P,)
        The gradient of the negative objective on the free log-space vector of hyperparameters.
    q_gradient : dict of str to ndarray
        d bound / d q entries.
    """

    objective: float
    largest: float
    name: str
    tolerance: float
    gradient: np.ndarray
    q_gradient: dict

    def describe(self):
        """The check's numbers, for the run's message.

        Returns
        -------
        str
        """
        return (f"full pass: largest gradient entry |d objective / d {self.name}| = {self.largest:.3g} "
                f"(tolerance {self.tolerance:.3g})")


def _method_inducing(objective, values):
    """``(Z_declared, Z)``: the inducing inputs popped from ``values`` (the run's selection where
    they are not fitted) and the method's: a multi-output model's Z shared by the outputs (M, D)
    as its M P long rows (:func:`gpdsl.multioutput.method_inducing`; ``dZ`` goes back through
    :func:`~gpdsl.multioutput.inducing_gradient`), any other Z as it is."""
    Z = values.pop("inducing.Z", objective.Z0)
    return Z, method_inducing(Z, objective.X, output_count(objective.model.kernel))


def full_pass_check(objective, u, q, full_batch, expectations=None):
    """The full objective's gradient at the end of a minibatch run, from one pass over all N rows.

    A stop of the stochastic rule says only that the smoothed batch objective stopped changing
    beyond its noise; it does not say the run is at the optimum (issue 45: robust-max and
    constant-mean fits stopped with the hyperparameters barely moved from their start).  The
    run's end is confirmed as full-batch fits are: the bound over (hyperparameters, q) is
    stationary at the optimum, so the largest entry of its gradient, in the hyperparameters
    (:func:`gpdsl.diagnostics.largest_gradient`, log priors included) and in q's whitened
    coordinates (d bound / d q_mu = A g - m, d bound / d R = 2 P R - R + diag(1 / R_ii): the
    natural-gradient residual's Euclidean form), must be at most
    :func:`gpdsl.diagnostics.gradient_tolerance` (N).  The pass is :func:`gpdsl.methods.svgp.evaluate`'s,
    a pure map over row chunks reduced from O(M^2) partials (:func:`gpdsl.chunks.map_rows`).

    Why q's entries are tested raw, per prior standard deviation, rather than by a Newton
    decrement g^T S g / 2.  At fixed S the bound is concave in the whitened mean m with Hessian
    -(I + A Wbar A^T), Wbar the rows' expected curvature, which is S^-1 at q's fixed point; a
    Newton step from a gradient g in m gains g^T S g / 2 nats.  In a direction the data inform
    with curvature c per row, S ~ 1 / (N c), and an entry at the tolerance t = 1e-3 N gains about
    t^2 / (2 N c) = 1e-6 N / (2 c): the same gain the hyperparameters' test bounds (the module
    docstring of :mod:`gpdsl.diagnostics`), so one tolerance keeps one meaning over the whole
    vector.  For a log-concave likelihood (Wbar >= 0) S <= I, so the gain is at most |g|^2 / 2
    whatever the direction; in a prior-dominated one (S ~ I) an entry at t could still gain
    t^2 / 2, more than the decrement form would allow.  That looseness is accepted: there the
    gradient is -m_i plus what little the data add, which the run's natural steps (memory about
    1 / natural_step steps) shrink, and a decrement test would need a tolerance in nats that the
    hyperparameters' test does not have (two meanings of "converged" in one record), with no
    equally simple form for q_sqrt's entries.

    Parameters
    ----------
    objective : gpdsl.fitting._Objective
        The fit's objective (model, parameter table, data, Z and offset).
    u : ndarray, shape (P,)
        The free log-space vector at the end.
    q : dict of str to ndarray
        ``"variational.q_mu"`` and ``"variational.q_sqrt"`` at the end.
    full_batch : gpdsl.inference.SVGP
        The full-batch declaration of the run (its ``jitter`` and ``chunk_size`` are read).
    expectations : callable, optional
        As :func:`minimise`'s.

    Returns
    -------
    FullPassCheck
    """
    model, table, X = objective.model, objective.table, objective.X
    values = table.unpack(u)
    Z_declared, Z = _method_inducing(objective, values)
    kernel, likelihood, latent = _bound(model, values, X, objective.offset, expectations)
    ev = svgp.evaluate(kernel, likelihood, {**values, **q}, X, objective.y, Z, jitter=full_batch.jitter,
                       chunk_size=full_batch.chunk_size, offset=latent, need_grad=True)
    q_gradient = {k: ev.grads.pop(k) for k in list(ev.grads) if k.startswith("variational.")}
    _mean_gradients(model, values, X, ev.grads)
    if "inducing.Z" in table.names():
        values["inducing.Z"] = Z_declared
        ev.dZ = inducing_gradient(ev.dZ, Z_declared, output_count(model.kernel))
    else:
        ev.dZ = None
    value, gradient = objective.negated(values, ev)
    largest, name = largest_gradient(table, gradient, X)
    for key, g in q_gradient.items():
        top = float(np.max(np.abs(g)))
        if not top <= largest:
            largest, name = top, key
    return FullPassCheck(objective=-float(value), largest=float(largest), name=name,
                         tolerance=gradient_tolerance(X.shape[0]), gradient=gradient, q_gradient=q_gradient)


def _checked_at(objective, full_batch, expectations, u, q):
    """:func:`full_pass_check` at (u, q), as :func:`gpdsl.methods.svgp_finish.finish` calls it."""
    return full_pass_check(objective, u, q, full_batch, expectations)


def _transport(objective, full_batch, u):
    """K_uu's factors at u and the pullback through them, for the joint finish's q carried in
    u-space (:class:`gpdsl.methods.svgp_finish.Coordinates`): ``(Li, pullback)``, Li (G, M, M) the
    inverses of L_g = chol(K_uu^g + jitter) as the full pass forms them, ``pullback(Phi)`` the
    gradient on u of the objective through L alone for Phi = L^T Lbar (G, M, M), by the Cholesky
    adjoint of :func:`gpdsl.methods.svgp._gradients` (the kernel's and Z's entries; 0 for the
    likelihood's)."""
    table = objective.table
    values = table.unpack(u)
    Z_declared, Z = _method_inducing(objective, values)
    kernel, _ = objective.model.bind(values)
    factors = svgp._factors(kernel, Z, full_batch.jitter)

    def pullback(Phi):
        grads, dZ = svgp._gradients(kernel, Z, factors, None, None, None, Phi, {}, np.zeros_like(Z))
        natural = {**values, "inducing.Z": Z_declared}
        complete = {name: np.zeros(np.shape(natural[name])) for name in table.names()}
        complete.update({name: g for name, g in grads.items() if name in complete})
        complete["inducing.Z"] = inducing_gradient(dZ, Z_declared, output_count(objective.model.kernel))
        return table.chain(natural, complete)
    return factors.Li, pullback


def _polish(objective, u, q, full_batch, expectations, max_iter, progress, callback, steps):
    """After the stochastic rule's stop: L-BFGS-B on the full-batch bound from ``u``, q moved to
    its optimum at every evaluation by full-batch natural steps from the previous one's (the
    full-batch SVGP fit, ``full_batch``'s evaluation, warm-started from the run's ``q``), at most
    ``max_iter`` iterations.  The callback sees the iterations numbered on from the run's
    ``steps``.

    What it returns is the best (u, q) among its start and L-BFGS-B's accepted iterates (not a
    line search's trial points, which may sit on a spike of the bound: fuzz poisson_svgp_minibatch
    66, a length-scale of 3e-6), by the full objective (bound plus log prior) at each one's own
    q, with q then moved to its optimum there (natural steps never lower the bound), rather than
    L-BFGS-B's last point with q re-optimised from the last evaluation's: where q's natural steps stop short of
    ``q_max_iter`` the objective L-BFGS-B sees depends on the path its warm starts took, and its
    line search can end below where it began (robust-max, 1,000 rows, 3 classes: -1355.2 at the
    first evaluation, -1559.1 at the end).  For the same reason the polish stops at its first
    evaluation where q's steps do not converge there (L-BFGS-B is then not run): the first
    evaluation's q is kept if it raised the objective.

    Returns
    -------
    u : ndarray, shape (P,)
    q : dict of str to ndarray
    iterations : int
        L-BFGS-B iterations (0 where it stopped at the first evaluation).
    how : str
        How it ended, for the run's message.
    sweeps : int
        Natural steps on q over all its evaluations and the final one.
    """
    table, best, latest = objective.table, {}, {}

    def keep_latest():
        if latest and not latest["objective"] <= best.get("objective", -np.inf):
            best.update(latest)

    def report(step):
        # An accepted iterate is the last point evaluated where its gradient is known (see
        # gpdsl.fitting._Objective.minimise): only those, and the start, are candidates, not a
        # line search's trial points (a rejected one can sit on a spike of the bound).
        if np.isfinite(step["grad_norm"]):
            keep_latest()
        if callback is not None:
            callback({**step, "iteration": steps + step["iteration"]})

    def evaluation(values, X, y, Z, warm=None, offset=None):
        here = table.pack(values)
        ev = _full_batch_evaluation(objective.model, full_batch, expectations, values, X, y, Z, warm=warm,
                                    offset=offset)
        value = float(ev.log_evidence + table.log_prior(values)[0])
        latest.clear()
        if np.isfinite(value):
            latest.update(objective=value, u=here, q=ev.warm.q)
        return ev

    run = objective.restricted(table, evaluation)
    run.warm = VariationalState(q, sweeps=0, converged=True)
    run(u)
    keep_latest()
    if run.warm is not None and not run.warm.converged:
        iterations = 0
        how = (f"stopped at its first evaluation: q's full-batch natural steps did not converge in "
               f"{run.warm.sweeps} steps (q_max_iter), so the objective L-BFGS-B would see depends on the "
               "path of its warm starts; L-BFGS-B not run")
    else:
        polished = run.minimise(u, max_iter, progress, report)
        iterations = int(polished.nit)
        how = f"L-BFGS-B stopped after {iterations} iterations, {polished.stop_reason}; its best iterate kept"
    if not best:
        return u, q, iterations, how + " (no evaluation was finite: the steps' end kept)", run.total_sweeps
    values = table.unpack(best["u"])
    _, Z = _method_inducing(objective, values)
    kernel, likelihood, latent = _bound(objective.model, values, objective.X, objective.offset, expectations)
    q, final_steps, _ = full_batch._optimise_q(kernel, likelihood, values, objective.X, objective.y, Z, best["q"],
                                               polish=True, offset=latent)
    return best["u"], q, iterations, how, run.total_sweeps + final_steps


def _full_batch_evaluation(model, full_batch, expectations, values, X, y, Z, warm=None, offset=None):
    """The full-batch bound at ``values`` with q moved to its optimum from ``warm`` (``full_batch``'s
    evaluation), as :meth:`gpdsl.Model.evaluate` gives it (a multi-output model's shared Z expanded,
    its dZ summed back), on ``expectations`` of the likelihood where given."""
    kernel, likelihood, latent = _bound(model, values, X, offset, expectations)
    P = output_count(model.kernel)
    ev = full_batch.evaluate(kernel, likelihood, values, X, y, method_inducing(Z, X, P), need_grad=True,
                             need_state=False, warm=warm, offset=latent)
    if ev.dZ is not None:
        ev.dZ = inducing_gradient(ev.dZ, Z, P)
    _mean_gradients(model, values, X, ev.grads)
    return ev


def _bound(model, values, X, offset, expectations):
    """The model's kernel and likelihood bound at ``values`` (the likelihood mapped by
    ``expectations`` where given) and the latent offset of the rows X (the mean function's value
    there plus the known ``offset``)."""
    kernel, likelihood = model.bind(values)
    if expectations is not None:
        likelihood = expectations(likelihood)
    return kernel, likelihood, model.latent_offset(values, X, offset)


def _mean_gradients(model, values, X, grads):
    """A mean function's gradients in place of d bound / d offset in ``grads`` (as
    :meth:`gpdsl.Model.evaluate` converts them); without a mean function the entry stays."""
    if model.mean is not None and "offset" in grads:
        grads.update(model.mean_gradients(values, X, grads.pop("offset")))
