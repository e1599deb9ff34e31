"""Pólya-Gamma collapsed classification, PGPR (Passerello thesis chapter 4, Appendix C).

Logistic likelihood p(y_n | f_n) = sigma(y_n (f_n + bias)), y_n in {-1, +1}.  With
q(omega_n) = PG(1, c_n) and theta_n = E[omega_n] = tanh(c_n/2) / (2 c_n) the optimal q(u) is
eq. 4.5 and the collapsed bound eq. 4.7, computed in the stable form of eq. C.1:

    K_uu = L L^T,  A = L^-1 K_uf Theta^1/2,  B = I + A A^T = L_B L_B^T,
    g = L_B^-1 L^-1 K_uf (y/2 - Theta bias)             (the thesis' c vector with a bias)
    L* = -1/2 log|B| - 1/2 tr(Theta K_ff) + 1/2 tr(A A^T) + 1/2 g^T g - N log 2
         + sum_n [c_n/4 tanh(c_n/2) - log cosh(c_n/2)] + 1/2 sum_n (y_n bias - theta_n bias^2).

(The last term is zero without a bias; the thesis has none.)  At fixed c the bound is Titsias'
collapsed VFE bound of the Gaussian pseudo-regression with targets y/(2 theta) - bias and noise
variances 1/theta (thesis eq. 4.14), plus terms that depend on c only.  So the kernel and
inducing-input gradients at fixed c, q*(u) and the predictive eq. C.2 all come from
:mod:`gpdsl.methods.collapsed` run on that pseudo-data.

A per-row latent offset o (a mean function's m(X), a GLM offset: f_n = o_n + g_n, g ~ GP(0, k))
enters exactly as the bias does, row by row: the augmented likelihood 1/2 exp(y z/2 - omega z^2/2)
with z_n = g_n + s_n, s_n = bias + o_n, is Gaussian in g with pseudo-targets y/(2 theta) - s (Wenzel
et al. 2019 with a shifted argument), so bias becomes s_n above: g = L_B^-1 L^-1 K_uf (y/2 - Theta s),
the last term 1/2 sum_n (y_n s_n - theta_n s_n^2), and the c update c_n^2 = (mean_n + s_n)^2 + var_n
(E[z_n^2] under q).  At the optimal c the bound is stationary in c, so its derivative in o_n is
the explicit one at fixed c, that of the pseudo-regression: y_n/2 - theta_n (s_n + mean_n), mean_n
the marginal mean of q*(g_n); the bias gradient is its sum.

Each evaluation first runs the closed-form coordinate ascent c_n^2 = [Sigma_q + mu mu^T]_nn
(eq. 4.11) to convergence, warm-started from the previous evaluation's c; every update is a
coordinate-ascent step of the uncollapsed ELBO, so the bound never decreases.  Because c then
maximises the bound, the gradient of the bound at fixed c is the gradient of max_c L* (the
envelope theorem), which is what L-BFGS-B sees: kernel steps and c updates alternate at every
optimiser evaluation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from .._jit import announce_compilation
from .._jit.polya_gamma import pg_marginals_update, pg_theta, pg_theta_kl
from ..chunks import cache_bytes, default_chunk_size, map_rows
from ..linalg import JITTER_LADDER, cholesky, inverse_lower, lower_product, solve_lower
from . import collapsed
from .common import Anderson, Evaluation, LocalStateFormat, known_noise

# The thesis author's code starts every c_n at 0.1 (`PolyaGammaLikelihood(variance=0.1)`).
C_INIT = 0.1
_LOG2 = np.log(2.0)
_ANDERSON_MEMORY = 10
_COMPILE_SECONDS = 2        # rough first-fit compile time on a 2-core machine, for the notice


@dataclass
class PolyaGammaState:
    """The local variational parameters and the inner loop's record.

    ``c`` (N,) is where the bound, gradients and posterior were evaluated; ``c_next`` the one
    further update (the warm start of the next evaluation); ``sweeps`` the O(N M^2) passes over
    the data; ``bound_history`` the bound at each accepted c (non-decreasing).

    Parameters
    ----------
    c : ndarray, shape (N,)
        The PG parameters c_n at which the bound was evaluated.
    c_next : ndarray, shape (N,)
        One further eq. 4.11 update (the next warm start).
    sweeps : int, default 0
        O(N M^2) passes over the data.
    converged : bool, default False
        Whether the c iteration converged.
    bound_history : list of float, optional
        The bound at each accepted c.
    """

    c: np.ndarray
    c_next: np.ndarray
    sweeps: int = 0
    converged: bool = False
    bound_history: list = field(default_factory=list)

    @property
    def theta(self):
        """ndarray, shape (N,): theta_n = E[omega_n] = tanh(c_n / 2) / (2 c_n) (Passerello section 4.1.1)."""
        return pg_theta(self.c)


def _export_state(local, total_updates):
    return ({"c": ("obs", local.c), "theta": ("obs", local.theta), "c_next": ("obs", local.c_next),
             "bound_history": ("c_update", np.asarray(local.bound_history))},
            {"pg_c_updates_final": local.sweeps, "pg_converged": int(local.converged),
             "pg_total_c_updates": total_updates})


def _load_state(ds):
    local = PolyaGammaState(c=ds["c"].values, c_next=ds["c_next"].values, sweeps=int(ds.attrs["pg_c_updates_final"]),
                            converged=bool(ds.attrs["pg_converged"]), bound_history=list(ds["bound_history"].values))
    return local, int(ds.attrs["pg_total_c_updates"])


STATE_FORMAT = LocalStateFormat(
    "polya_gamma",
    {"c": (("obs",), "float"), "theta": (("obs",), "float"), "c_next": (("obs",), "float"),
     "bound_history": (("c_update",), "float")},
    {"local_state": "str", "pg_c_updates_final": "count", "pg_converged": "flag", "pg_total_c_updates": "count"},
    _export_state, _load_state)


def evaluate(kernel, likelihood, X, y, Z, *, spec, warm=None, need_grad=True, need_state=False, offset=None):
    """Collapsed PG bound L*, its gradients (kernel, Z, bias, and with ``offset`` the latent
    offset: ``grads["offset"]`` (N,)) and, if asked, the posterior.

    X (N, D), y (N,) in {-1, +1}, Z (M, D); ``spec`` the gd.inference.PolyaGamma declaration;
    ``warm`` a :class:`PolyaGammaState` to start c from.  With ``spec.jitter=None`` the jitter
    ladder of thesis 5.1.3 moves to its next rung when K_uu or B fails or K_uu is too
    ill-conditioned for Q_nn <= K_nn to hold.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    likelihood : gpdsl.likelihoods.Likelihood
        Bernoulli with the logit link.
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Labels in {-1, +1}.
    Z : ndarray, shape (M, D)
        Inducing inputs.
    spec : gpdsl.inference.PolyaGamma
        The declaration (tol, max_iter, acceleration, jitter, chunk_size).
    warm : PolyaGammaState, optional
        State to start c from (``c_next``); None starts at c_n = 0.1.
    need_grad : bool, default True
        Compute the gradients.
    need_state : bool, default False
        Build the predictive state (Passerello eq. C.2).
    offset : ndarray, shape (N,), optional
        Per-row offset of the latent input (the likelihood sees f + offset + bias).

    Returns
    -------
    gpdsl.methods.common.Evaluation
        The bound L* (Passerello eq. 4.7 in the stable form of eq. C.1), its gradients at the
        converged c (eq. 4.11 updates), the :class:`PolyaGammaState` as ``warm`` and the
        pseudo-data (theta, y/2 - theta (bias + offset)).

    Raises
    ------
    numpy.linalg.LinAlgError, FloatingPointError
        If the last jitter rung fails.
    """
    rungs = JITTER_LADDER if spec.jitter is None else (float(spec.jitter),)
    progress = {"warm": warm, "passes": 0}
    for attempt, rung in enumerate(rungs):
        try:
            ev = _evaluate_at(kernel, likelihood, X, y, Z, spec, rung, progress, need_grad, need_state, offset)
            ev.warm.sweeps = progress["passes"]
            return ev
        except (np.linalg.LinAlgError, FloatingPointError):
            if attempt == len(rungs) - 1:
                raise


def _evaluate_at(kernel, likelihood, X, y, Z, spec, jitter, progress, need_grad, need_state, offset):
    """One evaluation at one jitter rung.  ``progress["warm"]`` is the state to start c from;
    the c loop leaves its converged state there and adds its passes to ``progress["passes"]``,
    so that when the gradient step fails at this rung the next rung starts from c that is
    already (nearly) converged, and the passes of every rung are counted."""
    warm = progress["warm"]
    n, m = X.shape[0], Z.shape[0]
    # Each row's shift of the latent input, s = bias + offset.  No offset is a zero one: the sums
    # of s^2 = bias^2 + o (2 bias + o) then add exact zeros to those of the bias alone.
    bias = float(likelihood.bias)
    offset_rows = np.zeros(n) if offset is None else offset
    shift = bias + offset_rows
    chunk = spec.chunk_size or default_chunk_size(n, m)
    L, jit = cholesky(kernel.gram(Z, Z), jitter, what="K_uu")
    # L^-1 K_uf and K_nn - Q_nn of each block are kept between the passes when they fit the
    # budget: every sweep returns them and the next takes them back as its blocks' carried items
    # (for Dask input, persisted where the blocks were computed), so that no chunk function holds
    # state.
    cache = n * m * 8 <= cache_bytes()
    kept = None
    half_y = 0.5 * y

    def sweep(c, factor=None, accumulate=True):
        """One pass over the rows.  Without a factor: the sums P = A Theta A^T, r,
        tr(Theta (K_ff - Q_ff)), -KL, sum theta and sum theta o (2 bias + o) of c (the row sums of
        eq. C.1).  With ``factor = (L_B^-1, g)`` of c:
        the marginal means of q*(f) and the update target of eq. 4.11 (rows), and, if
        ``accumulate``, the sums of that target."""
        nonlocal kept
        fn = partial(_sweep_block, kernel, Z, L, bias, factor, accumulate, cache)
        total, rows, blocks = map_rows(fn, (X, half_y, c, offset_rows), chunk, carried=kept, keep=True)
        kept = blocks if cache else None
        return total, rows

    # The plain update (eq. 4.11) converges linearly and slowly when the kernel variance is
    # large: 543 updates at variance 86 on the banana data.  Anderson acceleration (Walker & Ni
    # 2011) over the last _ANDERSON_MEMORY updates cut that to about 60; a proposal is kept only
    # if it raises the bound, otherwise the plain update is taken, so the accepted bounds never
    # decrease.  Every step costs two O(N M^2) products (L_B^-1 A for the marginals,
    # a rank-N update for the next point's B); the sums of the plain target are formed only
    # when the plain step is taken.
    def pseudo_regression(c, need_grad, need_state):
        """At fixed c the bound is the VFE bound of the pseudo-regression (targets y/(2 theta) -
        bias - offset, noise 1/theta) plus terms in c only: its gradients and q*(u) come from the
        collapsed engine, at the same jitter and in the same whitened basis (so the rung is
        chosen by the row checks of ``whitened`` alone, a function of the hyperparameters; the
        engine's weighted-trace check is implied by them).  Should the engine still fail, the
        caller moves to the next rung, whose c loop starts from the c converged here."""
        theta = pg_theta(c)
        return collapsed.evaluate(kernel, known_noise(1.0 / theta), X,
                                  half_y / theta - shift, Z, fitc=False, jitter=jit, chunk_size=spec.chunk_size,
                                  need_grad=need_grad, need_state=need_state,
                                  estimate_rounding=False)     # not the bound the fit reports

    c = np.array(warm.c_next if warm is not None and warm.c_next.shape == (n,) else np.full(n, C_INIT))
    # The kernels of this module are compiled (or loaded) together, so one stands for all.
    announce_compilation("Polya-Gamma", _COMPILE_SECONDS, pg_theta_kl, (c,))
    sums, _ = sweep(c)
    bias_sums = (n, bias, float(np.sum(y)), float(y @ offset_rows))
    factor, bound = _bound(sums, *bias_sums)
    history, converged, sweeps = [bound], False, 1
    iterates = Anderson(_ANDERSON_MEMORY)
    while True:
        extrapolate = spec.acceleration and len(iterates) > 0
        sums_target, (target, mean) = sweep(c, factor, accumulate=not extrapolate)
        sweeps += 1
        if np.max(np.abs(target - c)) < spec.tol:
            converged = True
            break
        if sweeps >= spec.max_iter:
            break
        iterates.push(c, target)
        if extrapolate:
            proposal = np.maximum(iterates.proposal(), 0.0)      # c >= 0
            sums_proposal, _ = sweep(proposal)
            sweeps += 1
            factor_proposal, bound_proposal = _bound(sums_proposal, *bias_sums)
            if bound_proposal >= bound:
                c, sums, factor, bound = proposal, sums_proposal, factor_proposal, bound_proposal
                history.append(bound)
                continue
            iterates.restart()
            sums_target, _ = sweep(target)
            sweeps += 1
        c, sums = target, sums_target
        factor, bound = _bound(sums, *bias_sums)
        history.append(bound)

    progress["warm"] = PolyaGammaState(c=c, c_next=target)
    progress["passes"] += sweeps
    theta = pg_theta(c)
    grads, dZ, state = {}, None, None
    if need_grad or need_state:
        ev = pseudo_regression(c, need_grad, need_state)
        grads, dZ, state = dict(ev.grads), ev.dZ, ev.state
        if need_grad:
            # d/d s_n of the pseudo-regression at fixed c: theta_n (ytilde_n - mu_n); the bias
            # shifts every row.
            d_shift = half_y - theta * (shift + mean)
            grads[likelihood.qualify("bias")] = np.array(np.sum(d_shift))
            if offset is not None:
                grads["offset"] = d_shift
    local = PolyaGammaState(c=c, c_next=target, sweeps=sweeps, converged=converged, bound_history=history)
    return Evaluation(log_evidence=history[-1], grads=grads, dZ=dZ, jitter=jit, state=state, warm=local,
                      pseudo_data=(theta, half_y - theta * shift))


def _sweep_block(kernel, Z, L, bias, factor, accumulate, cache, Xb, half_yb, cb, ob, hit=None):
    """One block of a c sweep (see ``sweep`` in :func:`_evaluate_at`): Xb (n, D), half_yb = y/2,
    cb = c and ob = the latent offset (n,) each; ``hit`` the block's (L^-1 K_uf, K_nn - Q_nn)
    from an earlier sweep, or None.  Returns (sums, rows, kept)."""
    if hit is None:
        _, A, kff, residual = collapsed.whitened_rows(kernel, Xb, Z, L)
        collapsed.check_rows_nystrom(residual, kff)
    else:
        A, residual = hit
    kept = (A, residual) if cache else None
    sb = bias + ob
    rows, c_sums = (), cb
    if factor is not None:
        # L_B^-1 A as a triangular product with the explicit (M, M) inverse: OpenBLAS's
        # triangular solve with M ~ 20 and many right-hand sides runs at a quarter of the
        # matmul's speed (the triangular product at 1.5x the matmul's: 4.3 against 6.6 ms at
        # M = 60, 35,000 rows), and B = I + A Theta A^T has eigenvalues >= 1, so |L_B^-1| <= 1
        # (against an 80-bit evaluation at cond B ~ 5e7, c is as accurate as with the solve).
        mean, c_sums = pg_marginals_update(lower_product(factor[0], A), factor[1], residual, sb)
        rows = (c_sums, mean)
        if not accumulate:
            return (), rows, kept
    theta, negative_kl = pg_theta_kl(c_sums)
    As = A * np.sqrt(theta)
    return (As @ As.T, A @ (half_yb - theta * sb), theta @ residual, negative_kl, np.sum(theta),
            theta @ (ob * (2.0 * bias + ob))), rows, kept


def _bound(sums, n, bias, sum_y, sum_y_offset):
    """Eq. C.1 (with the shift term, s^2 = bias^2 + o (2 bias + o)) from the row sums at c (see
    ``sweep``), N, the bias, sum_n y_n and sum_n y_n o_n; returns ((L_B^-1, g), L*)."""
    P, r, trace_theta_residual, negative_kl, sum_theta, sum_theta_offset = sums
    m = P.shape[0]
    LB, _ = cholesky(np.eye(m) + 0.5 * (P + P.T), 0.0, what="B = I + A A^T")
    g = solve_lower(LB, r)
    # -1/2 tr(Theta K_ff) + 1/2 tr(A A^T) of eq. C.1 summed row by row as theta_n (K_nn - Q_nn):
    # the two traces are ~1e9 each at twonorm's optimum (variance ~1e6) and cancel.
    bound = (-np.sum(np.log(np.diag(LB))) - 0.5 * trace_theta_residual + 0.5 * g @ g
             - n * _LOG2 + negative_kl + 0.5 * (bias * sum_y - bias * bias * sum_theta + sum_y_offset
                                                - sum_theta_offset))
    if not bound <= 0.0:
        # A lower bound on log p(y) of binary labels is negative: a positive (or NaN) value is
        # rounding, e.g. of K_nn - Q_nn at kernel variance 1e47, which an L-BFGS-B
        # step reached on Pima; report it as a failed point so that the line search steps back.
        raise FloatingPointError(f"Polya-Gamma bound {bound:.3g} > 0 is lost to rounding")
    return (inverse_lower(LB), g), float(bound)


