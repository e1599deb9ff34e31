"""The No-U-Turn sampler (NUTS) as Stan defines it, with Stan's warmup adaptation.

Sources followed:

* Stan's ``src/stan/mcmc/hmc/nuts/base_nuts.hpp`` (Stan >= 2.21): multinomial sampling of the
  trajectory, *biased* progressive sampling when a new subtree is merged into the trajectory and
  uniform progressive sampling inside a subtree, the generalised no-U-turn criterion on the
  "sharp" momenta ``M^{-1} p`` with the two extra checks across each merge (the criterion is also
  demanded of the trajectory extended by one state across the join, which catches U-turns the
  endpoints alone miss), divergence when the energy error ``H - H0`` exceeds 1000, and the
  acceptance statistic ``mean(min(1, exp(H0 - H)))`` over every state built, including those of
  a rejected subtree;
* Stan's ``base_hmc::init_stepsize`` (the doubling/halving heuristic aiming at a one-step
  acceptance of 0.8), ``stepsize_adaptation.hpp`` (Nesterov dual averaging, Hoffman & Gelman
  2014, JMLR 15, Algorithm 6) and ``windowed_adaptation.hpp`` / ``var_adaptation.hpp`` /
  ``covar_adaptation.hpp`` (the warmup schedule and the regularised metric estimates);
* Betancourt (2017), "A Conceptual Introduction to Hamiltonian Monte Carlo", arXiv:1701.02434,
  sections 4-5 and appendix A for the multinomial scheme and the criterion;
* the Stan Reference Manual's "HMC algorithm parameters" chapter for the defaults (tree depth 10,
  ``delta`` 0.8, ``gamma`` 0.05, ``t0`` 10, ``kappa`` 0.75, buffers 75 / 25 / 50).

The sampler is NumPy, not Numba: it targets log densities such as a GP evidence, whose O(N^3)
factorisation dominates.  Its own cost measured 8-9.5 us of CPU per gradient evaluation (the
tree building, leapfrog and criterion in Python; Gaussian targets of P = 5 and 50, diagonal and
dense metric, one BLAS thread, a 2-core machine at load average 4.5), against 0.8 ms for one
exact-GP evidence and gradient at N = 80, so about 1 % there; a Numba sampler would still pay
the interpreter to call the Python log density at each step.

Everything is on the unconstrained scale: ``logp_and_grad`` returns the log density (Jacobian
included) and its gradient.  A non-finite log density or gradient, or a ``LinAlgError`` /
``ArithmeticError`` raised by it, inside a trajectory ends the trajectory as a divergence.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import multiprocessing
import os
import time

import numpy as np

from .checks import as_float_array, check_bool, check_nonnegative_int, check_positive_int, check_seed, is_number
from .linalg import cholesky, inverse_lower
from .threads import limit

__all__ = ["sample", "NUTSResult"]

OWNER = "gpdsl.nuts.sample"
# Stan's defaults (Reference Manual, "HMC algorithm parameters").
MAX_ENERGY_ERROR = 1000.0           # H - H0 above this is a divergence (base_nuts max_deltaH_)
STEP_SIZE_GAMMA = 0.05              # dual-averaging regularisation scale
STEP_SIZE_T0 = 10.0                 # dual-averaging iteration offset
STEP_SIZE_KAPPA = 0.75              # dual-averaging relaxation exponent
INIT_BUFFER, BASE_WINDOW, TERM_BUFFER = 75, 25, 50
# Below this many warmup iterations Stan adapts the step size only (windowed_adaptation.hpp).
MIN_METRIC_WARMUP = 20
# The heuristic's one-step acceptance target and its bounds (base_hmc::init_stepsize).
HEURISTIC_LOG_ACCEPT = math.log(0.8)
LARGEST_STEP_SIZE = 1e7
# The log-density's failures that end a trajectory as a divergence rather than the run
# (gpdsl.NotPositiveDefiniteError is a LinAlgError).
TRAJECTORY_FAILURES = (ArithmeticError, np.linalg.LinAlgError)


@dataclasses.dataclass(frozen=True)
class NUTSResult:
    """The draws and per-draw statistics of :func:`sample` (warmup excluded), as plain arrays.

    Parameters
    ----------
    draws : numpy.ndarray, shape (chains, draws, P)
        The unconstrained positions.
    lp : numpy.ndarray, shape (chains, draws)
        ``logp_and_grad``'s log density at each draw (Stan's ``lp__``).
    diverging : numpy.ndarray of bool, shape (chains, draws)
        Whether the transition's trajectory diverged (energy error above 1000, or a non-finite
        log density or gradient).
    tree_depth : numpy.ndarray of int, shape (chains, draws)
        Doublings of the trajectory that were kept (Stan's ``treedepth__``), at most
        ``max_tree_depth``.
    n_steps : numpy.ndarray of int, shape (chains, draws)
        Leapfrog steps, hence gradient evaluations, of the transition (``n_leapfrog__``).
    step_size : numpy.ndarray, shape (chains, draws)
        The step size used (constant after warmup).
    energy : numpy.ndarray, shape (chains, draws)
        The Hamiltonian ``-log p(q) + p^T M^{-1} p / 2`` at the draw (``energy__``).
    acceptance_rate : numpy.ndarray, shape (chains, draws)
        ``mean(min(1, exp(H0 - H)))`` over the trajectory's states (``accept_stat__``).
    adapted_step_size : numpy.ndarray, shape (chains,)
        Each chain's step size after warmup.
    inverse_metric : numpy.ndarray, shape (chains, P) or (chains, P, P)
        Each chain's adapted inverse mass matrix, the diagonal for ``metric="diag"``.
    max_tree_depth : int
        The cap the run used.
    """

    draws: np.ndarray
    lp: np.ndarray
    diverging: np.ndarray
    tree_depth: np.ndarray
    n_steps: np.ndarray
    step_size: np.ndarray
    energy: np.ndarray
    acceptance_rate: np.ndarray
    adapted_step_size: np.ndarray
    inverse_metric: np.ndarray
    max_tree_depth: int


class _Metric:
    """The interface of an inverse mass matrix ``M^{-1}``: momentum draws, the velocity ``M^{-1} p``
    and the regularised estimate from a warmup window.  Subclasses register under ``name``."""

    registry = {}
    name = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _Metric.registry[cls.name] = cls


class _DiagonalMetric(_Metric):
    """``M^{-1} = diag(inverse)``; momenta ``p ~ N(0, M)``."""

    name = "diag"

    def __init__(self, inverse):
        self.inverse = inverse
        self._momentum_scale = 1.0 / np.sqrt(inverse)

    @classmethod
    def identity(cls, dim):
        """The unit metric of dimension ``dim``."""
        return cls(np.ones(dim))

    @classmethod
    def from_window(cls, window):
        """Stan's regularised variance of a window of draws ``(n, P)``:
        ``n/(n+5) var + 1e-3 * 5/(n+5)`` (var_adaptation.hpp)."""
        n = window.shape[0]
        return cls(n / (n + 5.0) * window.var(axis=0, ddof=1) + 1e-3 * 5.0 / (n + 5.0))

    def momentum(self, rng):
        """A draw of ``p ~ N(0, M)``."""
        return rng.standard_normal(self.inverse.shape[0]) * self._momentum_scale

    def velocity(self, p):
        """``M^{-1} p``, the "sharp" momentum."""
        return self.inverse * p


class _DenseMetric(_Metric):
    """A full ``M^{-1} = L L^T``; momenta ``p = L^{-T} z`` have covariance ``M``."""

    name = "dense"

    def __init__(self, inverse):
        # The jitter ladder guards a window whose draws lie (numerically) on a subspace; the
        # metric is then the jittered matrix, so that momenta and velocities agree.
        lower, jitter = cholesky(inverse, what="the adapted inverse metric")
        self.inverse = lower @ lower.T if jitter else inverse
        self._momentum_map = inverse_lower(lower).T

    @classmethod
    def identity(cls, dim):
        """The unit metric of dimension ``dim``."""
        return cls(np.eye(dim))

    @classmethod
    def from_window(cls, window):
        """Stan's regularised covariance of a window of draws ``(n, P)``:
        ``n/(n+5) cov + 1e-3 * 5/(n+5) I`` (covar_adaptation.hpp)."""
        n, dim = window.shape
        covariance = np.atleast_2d(np.cov(window, rowvar=False, ddof=1))
        return cls(n / (n + 5.0) * covariance + 1e-3 * 5.0 / (n + 5.0) * np.eye(dim))

    def momentum(self, rng):
        """A draw of ``p ~ N(0, M)``."""
        return self._momentum_map @ rng.standard_normal(self.inverse.shape[0])

    def velocity(self, p):
        """``M^{-1} p``, the "sharp" momentum."""
        return self.inverse @ p


class _DualAveraging:
    """Stan's step-size adaptation (stepsize_adaptation.hpp): dual averaging of
    ``log eps`` towards mean acceptance statistic ``target``, shrunk towards ``mu = log(10 eps0)``.

    ``s_t = (1 - 1/(t+t0)) s_{t-1} + (delta - a_t)/(t+t0)``,
    ``x_t = mu - sqrt(t) s_t / gamma``, ``xbar_t = t^-kappa x_t + (1 - t^-kappa) xbar_{t-1}``.
    """

    def __init__(self, target):
        self.target = target
        self.restart(1.0)

    def restart(self, step_size):
        """Start afresh around ``step_size`` (after the heuristic, at each metric update)."""
        self.mu = math.log(10.0 * step_size)
        self.counter = 0
        self.s_bar = 0.0
        self.x_bar = 0.0

    def update(self, accept_stat):
        """Learn from one transition's acceptance statistic; returns the next step size."""
        self.counter += 1
        accept_stat = min(1.0, accept_stat)
        eta = 1.0 / (self.counter + STEP_SIZE_T0)
        self.s_bar = (1.0 - eta) * self.s_bar + eta * (self.target - accept_stat)
        x = self.mu - self.s_bar * math.sqrt(self.counter) / STEP_SIZE_GAMMA
        x_eta = self.counter ** -STEP_SIZE_KAPPA
        self.x_bar = (1.0 - x_eta) * self.x_bar + x_eta * x
        return math.exp(x)

    def final(self, step_size):
        """The step size after warmup, ``exp(xbar)`` (``step_size`` if nothing was learned)."""
        return math.exp(self.x_bar) if self.counter else step_size


def _window_schedule(tune):
    """Stan's windowed metric adaptation for ``tune`` warmup iterations.

    Returns
    -------
    start, stop : int
        Iterations ``start <= i < stop`` add their draw to the current window.
    ends : list of int
        The iterations after which the metric is re-estimated from the window (each window
        twice the previous one, the last stretched to ``stop - 1``); empty below 20 iterations.
    """
    if tune < MIN_METRIC_WARMUP:
        return 0, 0, []
    init_buffer, base_window, term_buffer = INIT_BUFFER, BASE_WINDOW, TERM_BUFFER
    if init_buffer + base_window + term_buffer > tune:
        init_buffer, term_buffer = int(0.15 * tune), int(0.1 * tune)
        base_window = tune - (init_buffer + term_buffer)
    last = tune - term_buffer - 1
    size, end = base_window, init_buffer + base_window - 1
    ends = [end]
    while end != last:
        size *= 2
        end += size
        if end + 2 * size >= tune - term_buffer:
            end = last
        ends.append(end)
    return init_buffer, tune - term_buffer, ends


class _Point:
    """A phase-space state: position ``q``, momentum ``p``, ``log p(q)``, its gradient and
    the velocity ``M^{-1} p`` (``sharp``)."""

    __slots__ = ("q", "p", "logp", "grad", "sharp")

    def __init__(self, q, p, logp, grad, sharp):
        self.q, self.p, self.logp, self.grad, self.sharp = q, p, logp, grad, sharp

    def hamiltonian(self):
        """``H = -log p(q) + p^T M^{-1} p / 2``, +inf where the state is not finite."""
        h = 0.5 * float(self.p @ self.sharp) - self.logp
        return h if h == h and math.isfinite(self.logp) else math.inf


class _Subtree:
    """What a finished (valid) subtree hands to its parent: the state at its far end, its
    proposal, the log of its summed weights ``exp(H0 - H)``, its summed momenta ``rho``, and the
    momenta and sharp momenta at its first (``beg``) and last (``end``) states."""

    __slots__ = ("end_state", "proposal", "log_weight", "rho", "p_beg", "sharp_beg", "p_end", "sharp_end")

    def __init__(self, end_state, proposal, log_weight, rho, p_beg, sharp_beg, p_end, sharp_end):
        self.end_state, self.proposal, self.log_weight, self.rho = end_state, proposal, log_weight, rho
        self.p_beg, self.sharp_beg, self.p_end, self.sharp_end = p_beg, sharp_beg, p_end, sharp_end


def _no_u_turn(sharp_minus, sharp_plus, rho):
    """The generalised no-U-turn criterion: the trajectory may go on while both ends' sharp
    momenta point along the summed momentum ``rho``."""
    return float(sharp_plus @ rho) > 0.0 and float(sharp_minus @ rho) > 0.0


def _log_add_exp(a, b):
    """``log(exp(a) + exp(b))`` of two finite floats."""
    return max(a, b) + math.log1p(math.exp(-abs(a - b)))


def _evaluate(logp_and_grad, q):
    """``(log p(q), gradient)``; ``(-inf, None)`` where the log density fails numerically."""
    try:
        logp, grad = logp_and_grad(q)
    except TRAJECTORY_FAILURES:
        return -math.inf, None
    return float(logp), np.asarray(grad, dtype=float)


class _Transition:
    """One chain's NUTS transitions at a fixed metric (Stan's base_nuts::transition)."""

    def __init__(self, logp_and_grad, metric, max_tree_depth, rng):
        self.logp_and_grad = logp_and_grad
        self.metric = metric
        self.max_tree_depth = max_tree_depth
        self.rng = rng
        # Per-transition accumulators, reset by run().
        self.step_size = self.h0 = math.nan
        self.n_steps, self.sum_metro_prob, self.divergent = 0, 0.0, False

    def fresh_point(self, q, logp, grad):
        """The state at ``q`` with a new momentum draw."""
        p = self.metric.momentum(self.rng)
        return _Point(q, p, logp, grad, self.metric.velocity(p))

    def leapfrog(self, z, step):
        """One leapfrog step of signed size ``step`` from ``z``."""
        p_half = z.p + 0.5 * step * z.grad
        q = z.q + step * self.metric.velocity(p_half)
        logp, grad = _evaluate(self.logp_and_grad, q)
        if grad is None or not math.isfinite(logp):
            return _Point(q, p_half, -math.inf, None, p_half)
        p = p_half + 0.5 * step * grad
        return _Point(q, p, logp, grad, self.metric.velocity(p))

    def run(self, q, logp, grad, step_size):
        """One transition from ``q``.

        Returns
        -------
        _Point, tuple
            The new state and ``(tree_depth, n_steps, diverging, energy, acceptance_rate)``.
        """
        self.step_size, self.n_steps, self.sum_metro_prob, self.divergent = step_size, 0, 0.0, False
        z = self.fresh_point(q, logp, grad)
        self.h0 = z.hamiltonian()
        z_fwd = z_bck = z_sample = z
        p_fwd_fwd = p_fwd_bck = p_bck_fwd = p_bck_bck = z.p
        sharp_fwd_fwd = sharp_fwd_bck = sharp_bck_fwd = sharp_bck_bck = z.sharp
        rho = z.p
        log_sum_weight = 0.0            # log exp(H0 - H0)
        depth = 0
        while depth < self.max_tree_depth:
            if self.rng.uniform() > 0.5:
                # Extend forward: the trajectory so far becomes the backward part.
                rho_bck, p_bck_fwd, sharp_bck_fwd = rho, p_fwd_fwd, sharp_fwd_fwd
                tree = self.build_tree(depth, z_fwd, 1.0)
                if tree is None:
                    break
                z_fwd, rho_fwd = tree.end_state, tree.rho
                p_fwd_bck, sharp_fwd_bck = tree.p_beg, tree.sharp_beg
                p_fwd_fwd, sharp_fwd_fwd = tree.p_end, tree.sharp_end
            else:
                rho_fwd, p_fwd_bck, sharp_fwd_bck = rho, p_bck_bck, sharp_bck_bck
                tree = self.build_tree(depth, z_bck, -1.0)
                if tree is None:
                    break
                z_bck, rho_bck = tree.end_state, tree.rho
                p_bck_fwd, sharp_bck_fwd = tree.p_beg, tree.sharp_beg
                p_bck_bck, sharp_bck_bck = tree.p_end, tree.sharp_end
            depth += 1
            # Biased progressive sampling: move to the new subtree with probability
            # min(1, w_new / w_old), which favours states far from the start.
            if tree.log_weight > log_sum_weight or self.rng.uniform() < math.exp(tree.log_weight - log_sum_weight):
                z_sample = tree.proposal
            log_sum_weight = _log_add_exp(log_sum_weight, tree.log_weight)
            rho = rho_bck + rho_fwd
            if not (_no_u_turn(sharp_bck_bck, sharp_fwd_fwd, rho)
                    and _no_u_turn(sharp_bck_bck, sharp_fwd_bck, rho_bck + p_fwd_bck)
                    and _no_u_turn(sharp_bck_fwd, sharp_fwd_fwd, rho_fwd + p_bck_fwd)):
                break
        stats = (depth, self.n_steps, self.divergent, z_sample.hamiltonian(), self.sum_metro_prob / self.n_steps)
        return z_sample, stats

    def build_tree(self, depth, z, direction):
        """A subtree of ``2**depth`` leapfrog steps from ``z`` in ``direction``; None if it
        diverged or one of its own subtrees U-turned (the whole subtree is then rejected)."""
        if depth == 0:
            z = self.leapfrog(z, direction * self.step_size)
            self.n_steps += 1
            h = z.hamiltonian()
            if h - self.h0 > MAX_ENERGY_ERROR:
                self.divergent = True
            log_weight = self.h0 - h
            self.sum_metro_prob += 1.0 if log_weight > 0.0 else math.exp(log_weight)
            if self.divergent:
                return None
            return _Subtree(z, z, log_weight, z.p, z.p, z.sharp, z.p, z.sharp)
        init = self.build_tree(depth - 1, z, direction)
        if init is None:
            return None
        final = self.build_tree(depth - 1, init.end_state, direction)
        if final is None:
            return None
        # Uniform progressive sampling inside a subtree: the final half's proposal with
        # probability w_final / (w_init + w_final).
        log_weight = _log_add_exp(init.log_weight, final.log_weight)
        proposal = final.proposal if self.rng.uniform() < math.exp(final.log_weight - log_weight) else init.proposal
        rho = init.rho + final.rho
        # The criterion across the whole subtree, then across each join extended by one state.
        if not (_no_u_turn(init.sharp_beg, final.sharp_end, rho)
                and _no_u_turn(init.sharp_beg, final.sharp_beg, init.rho + final.p_beg)
                and _no_u_turn(init.sharp_end, final.sharp_end, final.rho + init.p_end)):
            return None
        return _Subtree(final.end_state, proposal, log_weight, rho, init.p_beg, init.sharp_beg,
                        final.p_end, final.sharp_end)

    def initial_step_size(self, q, logp, grad, step_size):
        """Stan's heuristic: double (or halve) the step size until one leapfrog step's
        acceptance ``exp(H0 - H)`` crosses 0.8, a fresh momentum each try."""
        def one_step_log_accept(eps):
            z = self.fresh_point(q, logp, grad)
            return z.hamiltonian() - self.leapfrog(z, eps).hamiltonian()

        direction = 1 if one_step_log_accept(step_size) > HEURISTIC_LOG_ACCEPT else -1
        while True:
            delta_h = one_step_log_accept(step_size)
            if (direction == 1 and not delta_h > HEURISTIC_LOG_ACCEPT) or \
                    (direction == -1 and not delta_h < HEURISTIC_LOG_ACCEPT):
                return step_size
            step_size = 2.0 * step_size if direction == 1 else 0.5 * step_size
            if step_size > LARGEST_STEP_SIZE:
                raise ValueError(f"{OWNER}: the step size grew past {LARGEST_STEP_SIZE:g} with the acceptance "
                                 "still above 0.8: the posterior is improper (check logp_and_grad's priors)")
            if step_size == 0.0:
                raise ValueError(f"{OWNER}: no step size is small enough for a finite energy at the initial "
                                 "point: logp_and_grad or its gradient is not finite near it")


def _run_chain(logp_and_grad, q, metric_class, options, seed_sequence, chain):
    """Warmup then sampling of one chain; returns a dict of its arrays."""
    draws, tune, target_accept, max_tree_depth, progress = options
    rng = np.random.default_rng(seed_sequence)
    logp, grad = logp_and_grad(q)
    logp, grad = float(logp), np.asarray(grad, dtype=float)
    dim = q.shape[0]
    transition = _Transition(logp_and_grad, metric_class.identity(dim), max_tree_depth, rng)
    step_size = transition.initial_step_size(q, logp, grad, 1.0)
    adaptation = _DualAveraging(target_accept)
    adaptation.restart(step_size)
    start, stop, ends = _window_schedule(tune)
    window = []
    total = tune + draws
    out = {"draws": np.empty((draws, dim)), "lp": np.empty(draws), "diverging": np.zeros(draws, bool),
           "tree_depth": np.empty(draws, int), "n_steps": np.empty(draws, int), "step_size": np.empty(draws),
           "energy": np.empty(draws), "acceptance_rate": np.empty(draws)}
    divergences = 0
    started = time.perf_counter()
    with np.errstate(all="ignore"):
        for i in range(total):
            if i == tune:
                step_size = adaptation.final(step_size)
            z, (depth, n_steps, diverging, energy, accept) = transition.run(q, logp, grad, step_size)
            q, logp, grad = z.q, z.logp, z.grad
            divergences += diverging
            if i < tune:
                step_size = adaptation.update(accept)
                if start <= i < stop:
                    window.append(q)
                if ends and i == ends[0]:
                    ends.pop(0)
                    transition.metric = metric_class.from_window(np.array(window))
                    window = []
                    step_size = transition.initial_step_size(q, logp, grad, step_size)
                    adaptation.restart(step_size)
            else:
                k = i - tune
                out["draws"][k], out["lp"][k], out["diverging"][k] = q, logp, diverging
                out["tree_depth"][k], out["n_steps"][k], out["step_size"][k] = depth, n_steps, step_size
                out["energy"][k], out["acceptance_rate"][k] = energy, accept
            if progress and (i + 1) % max(1, total // 10) == 0:
                print(_progress_line(chain, i + 1, total, "warmup" if i < tune else "sampling",
                                     time.perf_counter() - started, step_size, divergences), flush=True)
    out["adapted_step_size"] = step_size
    out["inverse_metric"] = transition.metric.inverse
    return out


def _progress_line(chain, done, total, phase, elapsed, step_size, divergences):
    """One chain's progress: a ten-character bar, iterations done, the phase, the wall time so far
    and the time left at the rate so far, the current step size and the divergences so far."""
    filled = round(10 * done / total)
    left = elapsed * (total - done) / done
    return (f"chain {chain}: {done}/{total} ({phase}) [{'#' * filled}{'.' * (10 - filled)}] {elapsed:.1f} s, "
            f"~{left:.0f} s left  step size {step_size:.3g}  divergences {divergences}")


# The chain runner of a forked pool's child, handed over as the pool's initializer argument:
# fork passes a process's arguments by inheritance, not pickling, and the log density is usually
# a closure (over the data and the model), which pickle cannot send.  The parent's value stays None,
# so concurrent calls of sample() do not share it.
_FORKED_WORK = None


def _adopt_work(work):
    global _FORKED_WORK
    _FORKED_WORK = work


def _run_forked_chain(chain):
    # One BLAS thread per process: the pool already fills the cores, and more threads per chain
    # would only contend (see gpdsl.threads).
    with limit(1):
        return _FORKED_WORK(chain)


def _map_chains(work, chains, cores):
    """``[work(c) for c in range(chains)]``, in a forked process pool where fork exists (and
    this process may have children: a pool's own workers are daemons, which may not)."""
    if cores == 1 or chains == 1 or "fork" not in multiprocessing.get_all_start_methods() \
            or multiprocessing.current_process().daemon:
        return [work(chain) for chain in range(chains)]
    with multiprocessing.get_context("fork").Pool(min(cores, chains), initializer=_adopt_work,
                                                  initargs=(work,)) as pool:
        return pool.map(_run_forked_chain, range(chains), chunksize=1)


def _check_initial(logp_and_grad, initial, chains):
    """``initial`` as a finite (chains, P) array at which the log density and gradient are finite."""
    q = as_float_array(OWNER, "initial", initial, allow_bool=False)
    if q.ndim == 1:
        q = np.broadcast_to(q, (chains, q.shape[0]))
    if q.ndim != 2 or q.shape[0] != chains or q.shape[1] == 0:
        raise ValueError(f"{OWNER}: initial must have shape (P,) or (chains, P) = ({chains}, P) with P >= 1, "
                         f"got shape {np.shape(initial)}")
    if not np.all(np.isfinite(q)):
        raise ValueError(f"{OWNER}: initial must be finite, got {q!r}")
    for chain, point in enumerate(q):
        try:
            logp, grad = logp_and_grad(point.copy())
        except TRAJECTORY_FAILURES as err:
            raise ValueError(f"{OWNER}: logp_and_grad failed at initial[{chain}] = {point!r}: {err}") from err
        grad = np.asarray(grad, dtype=float)
        if np.ndim(logp) != 0 or grad.shape != point.shape:
            raise ValueError(f"{OWNER}: logp_and_grad must return (float, ndarray of shape {point.shape}), got "
                             f"a log density of shape {np.shape(logp)} and a gradient of shape {grad.shape}")
        if not (math.isfinite(float(logp)) and np.all(np.isfinite(grad))):
            raise ValueError(f"{OWNER}: the log density and its gradient must be finite at initial[{chain}] = "
                             f"{point!r}, got log density {float(logp)!r} and gradient {grad!r}")
    return np.array(q)


def sample(logp_and_grad, initial, *, draws=1000, tune=1000, chains=4, seed=0, target_accept=0.8,
           max_tree_depth=10, metric="diag", cores=None, progress=False):
    """Draw from ``exp(logp)`` by NUTS with Stan's warmup, several chains in parallel.

    Each transition draws a momentum ``p ~ N(0, M)``, builds a leapfrog trajectory of the
    Hamiltonian ``H(q, p) = -log p(q) + p^T M^{-1} p / 2`` by repeated doubling in random
    directions until the generalised no-U-turn criterion ``(M^{-1} p_end)^T rho > 0`` fails
    (``rho`` the summed momenta) or ``2**max_tree_depth - 1`` steps are reached, and draws the
    next state from the trajectory with weights ``exp(-H)`` (multinomial, biased progressive).
    Warmup adapts the step size by dual averaging towards ``target_accept`` and the inverse
    metric ``M^{-1}`` to the draws' regularised (co)variance in Stan's doubling windows.

    Parameters
    ----------
    logp_and_grad : callable
        ``logp_and_grad(theta) -> (float, ndarray of shape (P,))``: the log density on the
        unconstrained scale (log-Jacobians included) and its gradient.
    initial : array_like, shape (P,) or (chains, P)
        Starting points: one shared by every chain, or one per chain (dispersed starting points
        make R-hat sensitive to chains stuck in different modes).  The log density and gradient
        must be finite there.
    draws : int, default 1000
        Draws kept per chain, after warmup.
    tune : int, default 1000
        Warmup iterations per chain (adaptation; discarded).  Below 20, only the step size
        adapts.
    chains : int, default 4
        Independent chains.
    seed : int or None, default 0
        Seeds the chains' independent streams (``numpy.random.SeedSequence(seed).spawn``), so
        the draws do not depend on ``cores``.  None draws fresh entropy.
    target_accept : float, default 0.8
        The mean acceptance statistic the step size aims at (Stan's ``delta``), in (0, 1).
    max_tree_depth : int, default 10
        The most doublings of a trajectory.
    metric : {"diag", "dense"}, default "diag"
        The adapted inverse mass matrix: diagonal, or full.
    cores : int or None, default None
        Processes to run the chains in, each with one BLAS thread; None for
        ``min(chains, os.cpu_count())``.  More than one needs the fork start method (Linux,
        macOS); elsewhere the chains run one after another, in this process.
    progress : bool, default False
        Print each chain's progress every tenth of its iterations.

    Returns
    -------
    NUTSResult
        The draws ``(chains, draws, P)``, the per-draw statistics ``(chains, draws)`` and each
        chain's adapted step size and inverse metric.

    Raises
    ------
    TypeError
        ``logp_and_grad`` not callable, or non-numeric ``initial``.
    ValueError
        An argument out of range, or a non-finite log density or gradient at ``initial``.
    """
    if not callable(logp_and_grad):
        raise TypeError(f"{OWNER}: logp_and_grad must be a callable theta -> (log density, gradient), "
                        f"got {type(logp_and_grad).__name__}")
    check_positive_int(OWNER, "draws", draws)
    check_nonnegative_int(OWNER, "tune", tune)
    check_positive_int(OWNER, "chains", chains)
    check_seed(OWNER, seed)
    if not is_number(target_accept) or not 0.0 < float(target_accept) < 1.0:
        raise ValueError(f"{OWNER}: target_accept must be a number in (0, 1), got {target_accept!r}")
    check_positive_int(OWNER, "max_tree_depth", max_tree_depth)
    if not isinstance(metric, str) or metric not in _Metric.registry:
        raise ValueError(f"{OWNER}: metric must be one of {sorted(_Metric.registry)}, got {metric!r}")
    if cores is not None:
        check_positive_int(OWNER, "cores", cores)
    check_bool(OWNER, "progress", progress)
    q0 = _check_initial(logp_and_grad, initial, chains)
    cores = min(chains, os.cpu_count() or 1) if cores is None else cores
    seeds = np.random.SeedSequence(seed).spawn(chains)
    options = (int(draws), int(tune), float(target_accept), int(max_tree_depth), bool(progress))
    metric_class = _Metric.registry[metric]

    # Each chain starts from the same copy of a stateful log density (EP's warm-started sites in
    # gpdsl.sampling.LogPosterior), as a forked chain does, so that chains run one after another
    # do not inherit the previous chain's state and the draws do not depend on cores.
    pristine = copy.deepcopy(logp_and_grad)

    def work(chain):
        return _run_chain(copy.deepcopy(pristine), q0[chain], metric_class, options, seeds[chain], chain)

    runs = _map_chains(work, int(chains), int(cores))
    stacked = {key: np.stack([run[key] for run in runs]) for key in runs[0]}
    return NUTSResult(**stacked, max_tree_depth=int(max_tree_depth))
