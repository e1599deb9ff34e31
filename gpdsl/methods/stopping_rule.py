"""The stopping rule of the minibatch optimiser (:mod:`gpdsl.methods.stochastic`), and its
shrinking of the steps on a plateau.

Each step's batch estimate of the negative objective, divided by N (the
batch noise of the N-scaled bound grows with N; per data point it depends on B only), is
e_t.  The smoothed objective is its mean over a window of W = ``stop_window`` steps.  Every
W / 10 steps from step 2 W on, the means of the last two windows, ebar_prev and ebar_last, give
the change d = ebar_prev - ebar_last, and the standard error of that change is taken from the
last window alone, split into K = 10 blocks of W / K steps (batch means: the spread of block
means, not of single steps, carries the correlation between successive steps that q's memory of
about 1 / natural_step steps gives):

    se(d) = sqrt(2) * sd(block means of the last window) / sqrt(K).

The run stops (``success``, stop reason ``"stochastic_rule"``) at the first check with

    |d| < max(stop_tol, 2 se(d)),

i.e. once the objective per data point changes by less than ``stop_tol`` nats per window, or by
less than the batch noise can tell from no change at about 95 %.  The noise is read from the
last window only: the first window of a run holds the transient from the starting q, whose
spread would mask a real change.  A run that reaches ``max_iter`` first reports so
(``success`` False, stop reason ``"max_iter"``), with the change it was still making.

Shrinking the steps on a plateau (``step_decays``, ``decay_factor``).  At fixed step sizes the
iterates settle into a cloud around the optimum whose width grows with the steps: q's natural
parameters are an exponential average of about 1 / natural_step batches' sites, so their batch
noise scales as natural_step / B (Salimbeni et al. 2018, section 4), and Adam's steps keep the
hyperparameters within about ``learning_rate`` of theirs.  With ``step_decays`` = n > 0 the first n
times the rule holds it does not stop the run: it multiplies ``natural_step``, ``learning_rate`` and
``q_learning_rate`` by ``decay_factor`` (PyTorch's ``ReduceLROnPlateau``) and the run goes on; the
next check is a whole window later, so that it compares a window at the smaller steps with the
plateau's.  Halving q's step halves its noise as doubling the batch would, at half the cost a step
(the stationary variance of a linear recursion, rho / (2 - rho) that of a batch's sites:
tests/test_stochastic_stopping.py).  Measured (issue 46, ``benchmarks/HISTORY.md``, "the steps shrunk
on a plateau"): on letter's softmax fit (18,000 rows, 26 classes, M = 100, B = 256) one decay of 0.5
after the default window of 200 took the test NLPD from 0.427 / 0.414 to 0.394 / 0.387 (seeds 0 /
1; 340-360 steps more), and one of 0.3 after a window of 100 to 0.399 / 0.400 in fewer steps than
no decay (1,130 / 1,010 against 1,200 / 1,420), both without the iterate average; with it (the
default since), the window of 200 without a decay did better (0.389 / 0.380), so no default decays;
where q moves by Adam (robust-max) it did not help (penbased 0.0099 / 0.0113 to 0.0114 / 0.0143,
digits 0.095 to 0.103, window 200, one decay of 0.5): there the bound's optimum predicts worse than
the early stop (HISTORY.md, "where the digits conflict comes from").
"""
from __future__ import annotations

import numpy as np

# Blocks per window of the stopping rule (batch means): 10 blocks of 20 steps at the default window
# of 200 are longer than q's memory (about 1 / natural_step = 5 to 10 steps) and leave 9 degrees
# of freedom to the noise estimate.
STOP_BLOCKS = 10
# Standard errors within which a change of the smoothed objective is taken for batch noise (a
# two-sided test at about 95 %).
STOP_Z = 2.0


def window_change(trail, window):
    """The change of the smoothed objective between the last two windows of a run.

    Parameters
    ----------
    trail : sequence of float
        The per-step, per-data-point batch estimates of the negative objective, at least
        ``2 * window`` of them.
    window : int
        Steps per window, a multiple of :data:`STOP_BLOCKS`.

    Returns
    -------
    change : float
        Mean of the second-to-last window minus mean of the last (positive while the objective,
        which is minimised, still falls).
    se : float
        Its standard error, sqrt(2) times the standard error of the last window's mean by batch
        means over :data:`STOP_BLOCKS` blocks.
    """
    last = np.asarray(trail[-window:], dtype=float)
    previous = np.asarray(trail[-2 * window:-window], dtype=float)
    blocks = last.reshape(STOP_BLOCKS, -1).mean(axis=1)
    se = np.sqrt(2.0) * np.std(blocks, ddof=1) / np.sqrt(STOP_BLOCKS)
    return float(previous.mean() - last.mean()), float(se)


class StoppingRule:
    """The rule of the module docstring over one run's trail of per-step estimates: after each step,
    whether the run goes on, shrinks its steps (the first ``step_decays`` times the rule holds) or
    stops.

    Parameters
    ----------
    spec : gpdsl.inference.SVGP or gpdsl.inference.PolyaGamma
        Read for ``stop_tol``, ``stop_window``, ``step_decays`` and ``decay_factor``.

    Attributes
    ----------
    decayed_at : list of int
        The steps at which the rule held and the steps were shrunk.
    message : str
        After a ``"stop"``: the rule's numbers at the stop.
    """

    def __init__(self, spec):
        self.tol, self.window = spec.stop_tol, spec.stop_window
        self.decays, self.factor = spec.step_decays, spec.decay_factor
        self.decayed_at, self.message = [], ""

    def verdict(self, trail):
        """What the run does after the step that appended the last entry of ``trail``.

        Checks every ``stop_window / STOP_BLOCKS`` steps from two windows on, and a whole window
        after the last decay at the earliest (the check then compares the smaller steps' window
        with the plateau's).

        Parameters
        ----------
        trail : list of float
            The run's per-step, per-data-point batch estimates of the negative objective so far.

        Returns
        -------
        str
            ``"go on"``, ``"decay"`` (the caller multiplies its step sizes by ``decay_factor``;
            recorded in :attr:`decayed_at`) or ``"stop"`` (:attr:`message` set).
        """
        step, window = len(trail), self.window
        since = self.decayed_at[-1] if self.decayed_at else 0
        if step < 2 * window or step - since < window or step % (window // STOP_BLOCKS):
            return "go on"
        change, se = window_change(trail, window)
        threshold = max(self.tol, STOP_Z * se)
        # A NaN change (an overflowed estimate) compares False: the run goes on to its cap.
        if not abs(change) < threshold:
            return "go on"
        if len(self.decayed_at) < self.decays:
            self.decayed_at.append(step)
            return "decay"
        self.message = (f"stochastic stopping rule after {step} steps: the smoothed objective per data point "
                        f"changed by {change:.3g} nats between the last two {window}-step windows "
                        f"(|change| < {threshold:.3g} = max(stop_tol {self.tol:g}, {STOP_Z:g} SE "
                        f"{STOP_Z * se:.3g}))")
        if self.decayed_at:
            plural = "s" if len(self.decayed_at) > 1 else ""
            self.message += (f"; the steps were shrunk by {self.factor:g} at step{plural} "
                             + ", ".join(str(s) for s in self.decayed_at))
        return "stop"

    def cap_message(self, trail, max_iter):
        """The message of a run whose ``max_iter`` steps ran out before the rule fired: the change
        per 100 steps it was still making (over the last two windows, or over the two halves of a
        run too short for them).

        Parameters
        ----------
        trail : list of float
        max_iter : int

        Returns
        -------
        str
        """
        window = self.window
        head = f"max_iter={max_iter} steps ran out before the stochastic stopping rule fired"
        if len(trail) >= 2 * window:
            change, se = window_change(trail, window)
            return (f"{head} (smoothed objective per data point still changing by {100.0 * change / window:.3g} "
                    f"nats per 100 steps: {change:.3g} between the last two {window}-step windows, not below "
                    f"max(stop_tol, {STOP_Z:g} SE = {STOP_Z * se:.3g}))")
        half = len(trail) // 2
        if half == 0:
            return f"{head} (it needs 2 x stop_window = {2 * window} steps)"
        change = float(np.mean(trail[-2 * half:-half]) - np.mean(trail[-half:]))
        return (f"{head} (it needs 2 x stop_window = {2 * window} steps; smoothed objective per data point still "
                f"changing by {100.0 * change / half:.3g} nats per 100 steps, between the two halves of the run)")
