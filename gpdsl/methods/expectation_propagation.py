"""Expectation and quantile propagation under the dense GP prior and the FITC prior.

* Dense EP (Rasmussen & Williams section 3.6, GPML's ``infEP``): the reference, O(N^3).
* FITC-EP (Naish-Guzman & Holden 2007, section 3): the prior is Q_ff + diag(K_ff - Q_ff); the
  posterior is kept as A = D + P M P^T, h = nu + P gamma with O(M^2) site updates and a full
  O(N M^2) refresh before the first sweep and after the last.  ``EP(approximation="dtc")``
  runs the same sweeps on the DTC prior Q_ff (D0 = 0; GPy's EPDTC prior), its evidence
  gradients and predictions from :func:`gpdsl.methods.collapsed.evaluate` with ``dtc=True`` on
  the pseudo-data.
* QP (Zhang et al. 2020) swaps the site projection only; the sweeps are shared.  Its
  hyperparameters maximise EP's evidence formula (the paper's eq. 4), by default at EP's sites
  (the EP optimum), then QP sweeps, warm-started from EP's sites, give the posterior.  With
  ``QP(hyperparameters="qp")`` the model alternates QP's sweeps (Algorithm 1's inner loop) and
  L-BFGS-B on eq. 4 with the sites held fixed (its line 15): :mod:`gpdsl.methods.quantile_propagation`.

After convergence the EP posterior equals a Gaussian-regression posterior with pseudo-targets
nu_i / tau_i and noise 1 / tau_i.  At an EP fixed point the gradient of the EP log evidence with
respect to prior hyperparameters and inducing inputs is that of log N(mu~ | 0, K + S~^-1) at
fixed sites (Seeger 2005; GPML ``infEP``; FITC paper section 4), so the gradients and the
predictive state come from the exact / FITC Gaussian engines run on the pseudo-data.  The
likelihood's parameters theta (the bias, a Student-t's df and scale) enter only the likelihood:
d log Z / d theta = sum_i d log Z_i / d theta at fixed cavities
(the likelihood's ``log_z_gradient``, :mod:`gpdsl._jit.projections`; for a bias, d log Z_i / d mu_cav,i).
A latent offset o (the likelihood sees f + o; sites and cavities on f) enters only log Z_i, a function
of mu_cav,i + o_i: d log Z_EP / d o_i = d log Z_i / d mu_cav,i = (mean_tilted,i - mu_cav,i) / var_cav,i,
at the fixed point [(K + diag(1/tau))^-1 nu / tau]_i, GPML infEP's -dnlZ.mean per unit of dm.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial

import numpy as np

from .._jit import announce_compilation, ep_sweeps
from .._jit.mixed_sites import site_rows
from .._jit.projections import with_offset
from ..chunks import default_chunk_size, is_chunked, map_rows
from ..linalg import cholesky, inverse_from_cholesky, solve_lower, solve_upper_t
from . import collapsed, exact
from .common import ConvergenceWarning, Evaluation, LocalStateFormat, known_noise, shifted

# Site precisions below this are treated as this when the pseudo-data noise 1/tau is formed.
_TAU_FLOOR = 1e-12
# The largest damping the oscillation guard of run_sites raises to (a declared damping above it is kept).
MAX_DAMPING = 0.9375
# Sweeps without a new smallest fixed-point residual after which that guard raises the damping.
GUARD_PATIENCE = 20
# A site counts as clamped when its tilted variance exceeds its cavity variance by more than this
# relative margin (rounding of the moments is far below it).
CLAMP_MARGIN = 1e-8
# Rough first-fit compile times on a 2-core machine, for the notice: bench_compile.py's cold less
# warm fit, 3.2-3.7 s (EP) and 4.1-4.9 s (QP) at 2f04484 (HISTORY.md, "Issue 46: cold start, second round").
_COMPILE_SECONDS = {"EP": 4, "QP": 5}


def _announce(kernel, args, quantile):
    """The one-line notice before ``kernel(*args)`` compiles (see :mod:`gpdsl._jit`)."""
    family = "EP" if quantile is None else "QP"
    announce_compilation(family, _COMPILE_SECONDS[family], kernel, args)


@dataclass
class SiteState:
    """Site parameters carried between evaluations (warm start) and reported in the result.

    Parameters
    ----------
    tau : ndarray, shape (N,)
        Site precisions.
    nu : ndarray, shape (N,)
        Site locations (precision x mean).
    sweeps : int, default 0
        Sweeps of the last run.
    converged : bool, default False
        Whether the largest site change fell below the tolerance.
    damping : float, default 0.0
        The damping in force at the end (raised by the oscillation guard).
    skipped : int, default 0
        Sites skipped in the last sweep.
    clamped : int, default 0
        Sites whose moment-matched precision is negative at the final marginals, held at 0 (as
        GPML's infEP does): their variance is not matched, so the sites are no EP fixed point and
        the evidence gradient at fixed sites is not the evidence's gradient (see :func:`evaluate`).
    """

    tau: np.ndarray
    nu: np.ndarray
    sweeps: int = 0
    converged: bool = False
    damping: float = 0.0
    skipped: int = 0
    clamped: int = 0


def _export_sites(sites, total_sweeps):
    return ({"site_precision": ("obs", sites.tau), "site_location": ("obs", sites.nu)},
            {"ep_sweeps_final": sites.sweeps, "ep_converged": int(sites.converged), "ep_damping": sites.damping,
             "ep_total_sweeps": total_sweeps, "ep_clamped": sites.clamped})


def _load_sites(ds):
    sites = SiteState(tau=ds["site_precision"].values, nu=ds["site_location"].values,
                      sweeps=int(ds.attrs["ep_sweeps_final"]), converged=bool(ds.attrs["ep_converged"]),
                      damping=float(ds.attrs["ep_damping"]), clamped=int(ds.attrs.get("ep_clamped", 0)))
    return sites, int(ds.attrs["ep_total_sweeps"])


SITES_FORMAT = LocalStateFormat(
    "ep_sites",
    {"site_precision": (("obs",), "float"), "site_location": (("obs",), "float")},
    {"local_state": "str", "ep_sweeps_final": "count", "ep_converged": "flag", "ep_damping": "real",
     "ep_total_sweeps": "count", "ep_clamped": "count"},
    _export_sites, _load_sites)


class DensePrior:
    """Posterior Sigma = (K^-1 + T)^-1 through B = I + T^1/2 K T^1/2 (GPML's stable form).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    X : ndarray, shape (N, D)
        Training inputs.
    """

    # B is positive definite for any PSD K and tau >= 0, so the dense prior needs no jitter.
    jitter = 0.0
    # Sigma is rebuilt after every sequential sweep (R&W section 3.6): its rank-1 updates act on
    # K's scale, so rounding in the marginals of strongly constrained sites grows with cond(K).
    refresh_every_sweep = True

    def __init__(self, kernel, X):
        self.K = kernel.gram(X, X)

    def refresh(self, tau, nu):
        """Sigma = K - V^T V, mu = Sigma nu and log |B| from the sites (GPML's stable form, R&W section 3.6).

        Parameters
        ----------
        tau : ndarray, shape (N,)
            Site precisions, >= 0.
        nu : ndarray, shape (N,)
            Site locations.
        """
        sw = np.sqrt(tau)
        B = np.eye(len(tau)) + sw[:, None] * self.K * sw[None, :]
        LB, _ = cholesky(B, 0.0, what="I + T^1/2 K T^1/2")
        V = solve_lower(LB, sw[:, None] * self.K)
        self.Sigma = self.K - V.T @ V
        self.mu = self.Sigma @ nu
        self.log_det_B = 2.0 * np.sum(np.log(np.diag(LB)))

    def marginals(self):
        """Copies of diag(Sigma) and mu.

        Returns
        -------
        var : ndarray, shape (N,)
            Posterior marginal variances.
        mean : ndarray, shape (N,)
            Posterior marginal means.
        """
        return np.diag(self.Sigma).copy(), self.mu.copy()

    def sequential_sweep(self, tau, nu, y, param, project, quantile, damping, table, grid):
        """One sequential sweep with rank-1 updates of Sigma and mu (R&W Algorithm 3.5).

        Parameters
        ----------
        tau, nu : ndarray, shape (N,)
            Site precisions and locations, updated in place.
        y : ndarray, shape (N,)
            Coded targets.
        param : tuple of float
            The likelihood's parameters (see :mod:`gpdsl._jit.ep_sweeps`).
        project : numba dispatcher
            The likelihood's jitted projection (``SiteModel.functions.project``).
        quantile : bool or None
            QP's projection (True), EP's (False or None; None compiles EP's alone).
        damping : float
            Weight kept on the old site, in [0, 1).
        table, grid : ndarray or None
            The QP probit lookup table and its grid, or None.

        Returns
        -------
        max_change : float
            Largest change of a site parameter.
        skipped : int
            Sites skipped because their cavity precision was not positive.
        """
        args = (self.Sigma, self.mu, tau, nu, y, param, project, quantile, damping, table, grid)
        _announce(ep_sweeps.dense_sequential_sweep, args, quantile)
        return ep_sweeps.dense_sequential_sweep(*args)


class FITCPrior:
    """FITC prior D0 + P0 K_uu^-1 P0^T with D0 = diag(K_ff - Q_ff), P0 = K_fu (Naish-Guzman & Holden),
    held in the whitened basis: A0 = P0 L_u^-T (K_uu = L_u L_u^T), so that the prior is
    D0 + A0 A0^T.

    The paper's sweep state (P, M = Sigma_u^-1, gamma) is basis-free: the marginals
    d_i + p_i^T M p_i and nu_i + p_i^T gamma, and every site update, are unchanged by
    p -> L_u^-1 p, M -> L_u^T M L_u, gamma -> L_u^T gamma.  In the natural basis M carries
    cond(K_uu) (~1e17 for duplicated inputs or length-scales of hundreds) and the marginals lost
    every digit; in the whitened basis M = B^-1 with B = I + A0^T W A0, whose eigenvalues lie in
    (0, 1].

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    X : ndarray, shape (N, D)
        Training inputs.
    Z : ndarray, shape (M, D)
        Inducing inputs.
    jitter : float or None
        Jitter of K_uu (None: the dynamic ladder).
    chunk_size : int or None
        Rows per block of the O(N M^2) passes (None: automatic).
    dtc : bool, default False
        The DTC prior P0 K_uu^-1 P0^T instead (D0 = 0; ``EP(approximation="dtc")``).

    Raises
    ------
    gpdsl.NotPositiveDefiniteError
        If K_uu cannot be factorised.
    """

    # The sequential sweeps keep d, P, M and gamma current, and in the whitened basis M's
    # eigenvalues lie in (0, 1] and each marginal d_i + p_i^T M p_i is a sum of two non-negative
    # terms, so a sweep's rounding stays at float64's (~N eps).  The state is rebuilt before the
    # first sweep and after the last (which gives log |B|), not between them: at the
    # benchmarks' 4-5 sweeps per evaluation the rebuilds between sweeps were a quarter of a
    # FITC-EP fit (breast cancer, N = 512, M = 128).
    refresh_every_sweep = False

    def __init__(self, kernel, X, Z, jitter, chunk_size, dtc=False):
        Lu, self.jitter = cholesky(kernel.gram(Z, Z), jitter, what="K_uu")
        self.A0 = np.ascontiguousarray(solve_lower(Lu, kernel.gram(Z, X)).T)
        self.d0 = (np.zeros(X.shape[0]) if dtc else
                   np.maximum(kernel.diag(X) - np.einsum("ij,ij->i", self.A0, self.A0), 0.0))
        self.chunk = chunk_size or default_chunk_size(X.shape[0], Z.shape[0])

    def refresh(self, tau, nu):
        """The O(N M^2) refresh of section 3: D, P, M = Sigma_u^-1, nu, gamma (whitened basis).

        With W = diag(tau / (1 + d0 tau)): B = I + A0^T W A0 (the whitened Sigma_u), M = B^-1,
        P = diag(1 / (1 + d0 tau)) A0 and gamma = M P^T nu; log |B| is the log-determinant the
        evidence needs.  B's eigenvalues are >= 1, so its Cholesky cannot fail.

        Parameters
        ----------
        tau : ndarray, shape (N,)
            Site precisions, >= 0.
        nu : ndarray, shape (N,)
            Site locations.
        """
        scale = 1.0 + self.d0 * tau
        w = tau / scale

        # B - I and P^T nu = A0^T (nu / scale) summed over row blocks as ChunkedFITCPrior sums
        # them, so that a Dask X's fit is this one's to the bit.
        (B, Pt_nu), _ = map_rows(_refresh_partials, (self.A0, w, nu / scale), self.chunk)
        B[np.diag_indices_from(B)] += 1.0
        LB, _ = cholesky(B, 0.0, what="I + A0^T W A0")
        self.Minv = inverse_from_cholesky(LB)            # M = B^-1, updated in the sweeps
        self.d = self.d0 / scale
        self.P = np.ascontiguousarray(self.A0 / scale[:, None])
        self.nu_vec = self.d * nu
        self.gamma = solve_upper_t(LB, solve_lower(LB, Pt_nu))
        self.log_det_B = np.sum(np.log(scale)) + 2.0 * np.sum(np.log(np.diag(LB)))

    def marginals(self):
        """Marginals d_i + p_i^T M p_i and nu_i + p_i^T gamma (Naish-Guzman & Holden section 3).

        Returns
        -------
        var : ndarray, shape (N,)
            Posterior marginal variances.
        mean : ndarray, shape (N,)
            Posterior marginal means.
        """
        return self.d + np.einsum("ij,ij->i", self.P @ self.Minv, self.P), self.nu_vec + self.P @ self.gamma

    def sequential_sweep(self, tau, nu, y, param, project, quantile, damping, table, grid):
        """One sequential sweep with O(M^2) site updates in blocks (Naish-Guzman & Holden section 3).

        A site whose update would lose definiteness triggers a refresh and is skipped.

        Parameters
        ----------
        tau, nu : ndarray, shape (N,)
            Site precisions and locations, updated in place.
        y : ndarray, shape (N,)
            Coded targets.
        param : tuple of float
            The likelihood's parameters (see :mod:`gpdsl._jit.ep_sweeps`).
        project : numba dispatcher
            The likelihood's jitted projection (``SiteModel.functions.project``).
        quantile : bool or None
            QP's projection (True), EP's (False or None; None compiles EP's alone).
        damping : float
            Weight kept on the old site, in [0, 1).
        table, grid : ndarray or None
            The QP probit lookup table and its grid, or None.

        Returns
        -------
        max_change : float
            Largest change of a site parameter.
        skipped : int
            Sites skipped because their cavity precision was not positive.
        """
        max_change, skipped, start = 0.0, 0, 0
        while True:
            # Blocked delayed updates (ep_sweeps.FITC_BLOCK sites per level-3 BLAS block), the same
            # sites as one-at-a-time sequential EP.
            args = (self.d, self.P, self.Minv, self.nu_vec, self.gamma, tau, nu, y, param, project, quantile, damping,
                    table, grid, start, ep_sweeps.FITC_BLOCK)
            _announce(ep_sweeps.fitc_sequential_sweep, args, quantile)
            change, skip, stop = ep_sweeps.fitc_sequential_sweep(*args)
            max_change, skipped = max(max_change, change), skipped + skip
            if stop < 0:
                return max_change, skipped
            # An update would lose definiteness: rebuild from the sites and skip that site this sweep.
            self.refresh(tau, nu)
            start, skipped = stop + 1, skipped + 1


def _refresh_partials(A0, w, nu_scaled):
    """The partials (A0^T diag(w) A0, A0^T nu_scaled) of B - I and P^T nu for a row block A0
    (n, M) of the whitened factor; w = tau / scale >= 0, nu_scaled = nu / scale (n,)."""
    As = A0 * np.sqrt(w)[:, None]
    return (As.T @ As, A0.T @ nu_scaled), ()


class ChunkedFITCPrior:
    """:class:`FITCPrior` for a Dask X, whose O(N M) factor A0 = K_fu L_u^-T is never held: each
    refresh and each marginals call is one pass of Dask tasks over X's row blocks that forms its
    block of A0 again (O(N M^2) work, as the refresh's own product) and returns M x M / M-vector
    partial sums or per-row results.  For the parallel schedule only (the sequential sweep
    updates the factors row by row).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    X : Dask array, shape (N, D)
        Training inputs.
    Z : ndarray, shape (M, D)
        Inducing inputs.
    jitter : float or None
        Jitter of K_uu (None: the dynamic ladder).
    chunk_size : int or None
        Rows per block of the O(N M^2) passes (None: automatic).
    dtc : bool, default False
        The DTC prior (D0 = 0), as for :class:`FITCPrior`.
    """

    def __init__(self, kernel, X, Z, jitter, chunk_size, dtc=False):
        self.Lu, self.jitter = cholesky(kernel.gram(Z, Z), jitter, what="K_uu")
        self.block, self.X = partial(_prior_block, kernel, Z, self.Lu), X
        if dtc:
            self.d0 = np.zeros(X.shape[0])
        else:
            _, (self.d0,) = map_rows(partial(_residual_block, self.block), (X,), chunk_size)
        self.chunk = chunk_size

    def refresh(self, tau, nu):
        """As :meth:`FITCPrior.refresh`: B = I + A0^T W A0 and A0^T (nu / (1 + d0 tau)) from one pass.

        Parameters
        ----------
        tau : ndarray, shape (N,)
            Site precisions, >= 0.
        nu : ndarray, shape (N,)
            Site locations.
        """
        scale = 1.0 + self.d0 * tau
        w = tau / scale
        (B, Pt_nu), _ = map_rows(partial(_refresh_block, self.block), (self.X, w, nu / scale), self.chunk)
        B[np.diag_indices_from(B)] += 1.0
        LB, _ = cholesky(B, 0.0, what="I + A0^T W A0")
        self.Minv = inverse_from_cholesky(LB)
        self.scale, self.d = scale, self.d0 / scale
        self.nu_vec = self.d * nu
        self.gamma = solve_upper_t(LB, solve_lower(LB, Pt_nu))
        self.log_det_B = np.sum(np.log(scale)) + 2.0 * np.sum(np.log(np.diag(LB)))

    def marginals(self):
        """As :meth:`FITCPrior.marginals`, from one pass over X's row blocks.

        Returns
        -------
        var : ndarray, shape (N,)
            Posterior marginal variances.
        mean : ndarray, shape (N,)
            Posterior marginal means.
        """
        _, (quad, shift) = map_rows(partial(_marginal_block, self.block, self.Minv, self.gamma),
                                    (self.X, self.scale), self.chunk)
        return self.d + quad, self.nu_vec + shift


def _prior_block(kernel, Z, Lu, X_block):
    """(A0 block (n, M), d0 = K_nn - Q_nn clipped at 0 (n,)) of a row block X_block (n, D)."""
    A0 = np.ascontiguousarray(solve_lower(Lu, kernel.gram(Z, X_block)).T)
    return A0, np.maximum(kernel.diag(X_block) - np.einsum("ij,ij->i", A0, A0), 0.0)


def _residual_block(block, X_block):
    """Per-row d0 = K_nn - Q_nn (clipped at 0) of a row block."""
    return (), (block(X_block)[1],)


def _refresh_block(block, X_block, w, nu_scaled):
    """The partials (A0^T diag(w) A0, A0^T nu_scaled) of B - I and P^T nu for a row block
    X_block (n, D), its A0 formed here; w = tau / scale, nu_scaled = nu / scale (n,)."""
    return _refresh_partials(block(X_block)[0], w, nu_scaled)


def _marginal_block(block, Minv, gamma, X_block, scale):
    """Per-row (p_i^T M p_i, p_i^T gamma) of a row block, p_i = a0_i / scale_i."""
    P = block(X_block)[0] / scale[:, None]
    return (), (np.einsum("ij,ij->i", P @ Minv, P), P @ gamma)


# "No lookup table" in the array form of the kernels' table arguments (sigma* computed directly),
# for callers that pass arrays whether or not they want a table.
_NO_TABLE = (np.zeros((0, 0)), np.zeros(4))


def run_sites(prior, y, site, spec, warm, quantile, start=None):
    """Sweep until the largest site change is below ``spec.tol`` or ``spec.max_sweeps``;
    ``site`` is the likelihood's :class:`gpdsl.likelihoods.SiteModel`; ``quantile`` selects the QP
    projection instead of EP's moment matching.

    Parameters
    ----------
    prior : DensePrior, FITCPrior or ChunkedFITCPrior
        The prior, refreshed before the first sweep and after the last (and after every sweep
        where its ``refresh_every_sweep`` says so, or the schedule is parallel).
    y : ndarray, shape (N,)
        Coded targets.
    site : gpdsl.likelihoods.SiteModel
        The likelihood's site model.
    spec : gpdsl.inference.EP or gpdsl.inference.QP
        The declaration.
    warm : SiteState, optional
        Sites to start from (used when there are N of them).
    quantile : bool or None
        True for QP's projection; False or None for EP's (None when the caller wants EP only).
    start : (ndarray, ndarray), optional
        (tau, nu) to start from without such a warm start (:func:`site_start`); None: zero sites.

    Returns
    -------
    SiteState
        The sites, the sweep count, whether they converged and the final damping.

    References
    ----------
    Rasmussen & Williams (2006), Algorithm 3.5 (dense sweeps); Naish-Guzman & Holden (2007),
    section 3 (FITC site updates and refresh); Zhang et al. (2020), eq. 7 and Appendix C (QP's
    projection, sigma* = int phi(Phi^-1(F(f))) df).
    """
    # The kernels' projection arguments (gpdsl._jit.ep_sweeps): quantile=None for EP compiles EP's
    # code alone; QP's fits choose EP or QP at run time, so that the EP sweeps of their evidence
    # share the QP sweeps' kernel.  A likelihood with a QP lookup table reads it with lookup=True.
    project, param, table, grid = site.functions.project, site.params, None, None
    if (quantile or spec.quantile) and spec.lookup and site.functions.lookup_table is not None:
        table, grid = site.functions.lookup_table()
    elif not (quantile or spec.quantile):
        quantile = None
    n = len(y)
    if warm is not None and len(warm.tau) == n:
        tau, nu = warm.tau.copy(), warm.nu.copy()
    elif start is not None:
        tau, nu = np.array(start[0], dtype=float), np.array(start[1], dtype=float)
    else:
        tau, nu = np.zeros(n), np.zeros(n)
    # A float from the start: an integer damping would compile the sweep kernels once more.
    damping, best, stale = float(spec.damping), np.inf, 0
    # The parallel schedule's updates leave the prior's state behind, so it is rebuilt after
    # each of their sweeps; a sequential sweep updates it site by site, and the prior (one with
    # a sequential_sweep) says whether it is rebuilt between such sweeps or only after the last.
    refresh_every_sweep = spec.schedule != "sequential" or prior.refresh_every_sweep
    prior.refresh(tau, nu)
    state = SiteState(tau, nu, damping=damping)
    for sweep in range(1, spec.max_sweeps + 1):
        try:
            if spec.schedule == "sequential":
                change, skipped = prior.sequential_sweep(tau, nu, y, param, project, quantile, damping, table,
                                                         grid)
            else:
                var, mean = prior.marginals()
                args = (var, mean, tau, nu, y, param, project, quantile, damping, table, grid)
                _announce(ep_sweeps.parallel_site_updates, args, quantile)
                change, skipped = ep_sweeps.parallel_site_updates(*args)
        except ZeroDivisionError as err:
            # Numba's kernels raise Python's error on a float division by zero, which here means
            # sites or cavities that left float64's range (fuzz: Poisson FITC-EP with a count of
            # 1.9e5 at length-scale 115): a numerically impossible point, which the optimiser
            # steps back from and a final evaluation reports as the data's scale.
            raise FloatingPointError(f"an EP sweep divided by zero at sweep {sweep}: the sites left float64's "
                                     "range") from err
        if refresh_every_sweep:
            prior.refresh(tau, nu)
        state.sweeps, state.skipped = sweep, skipped
        # The fixed-point residual is the undamped update: a damped step is (1 - damping) times
        # it, so testing the damped change would call any iteration converged once the guard
        # below has raised the damping far enough (Poisson on raw years: damping 1 - 2^-31 and a
        # "converged" undamped step of 0.2).
        residual = change / (1.0 - damping)
        if residual < spec.tol:
            state.converged = True
            break
        # Oscillation guard: GUARD_PATIENCE sweeps without a new smallest residual raise the
        # damping, at most to MAX_DAMPING (beyond it the sites barely move and the sweeps would
        # only run out).  Patient, because a residual that rises for a few sweeps while sites
        # change regime is no oscillation (Poisson on raw years: 7 rising sweeps, then undamped
        # EP converges geometrically; damped it takes three times the sweeps).
        stale = 0 if residual < best else stale + 1
        best = min(best, residual)
        if stale >= GUARD_PATIENCE:
            damping, stale = min(0.5 + 0.5 * damping, max(MAX_DAMPING, float(spec.damping))), 0
    if not refresh_every_sweep:
        prior.refresh(tau, nu)
    state.damping = damping
    return state


def cavity_terms(prior, state, y, site, quantile=None):
    """log Z_i, cavity natural parameters, the marginal means and d sum_i log Z_i / d theta for
    the likelihood's parameters theta (``site.params``, at fixed cavities) at the final (EP)
    marginals.

    EP's moments whatever ``quantile``: False (QP's fits) instead of None only reuses the
    projection compiled for the sweeps of a QP fit (the likelihood's ``project``).

    Parameters
    ----------
    prior : DensePrior, FITCPrior or ChunkedFITCPrior
        The prior, refreshed at ``state``'s sites.
    state : SiteState
        The converged sites.
    y : ndarray, shape (N,)
        Coded targets.
    site : gpdsl.likelihoods.SiteModel
        The likelihood's site model.
    quantile : bool or None, optional
        As for the sweeps; the moments are EP's either way.

    Returns
    -------
    log_z : ndarray, shape (N,)
        log Z_i of the tilted distributions.
    param_grads : ndarray, shape (len(site.params),)
        d sum_i log Z_i / d theta at fixed cavities.
    tau_cav, nu_cav : ndarray, shape (N,)
        Cavity precisions and locations.
    mean : ndarray, shape (N,)
        Posterior marginal means.
    clamped : int
        Sites whose moment-matched precision 1 / var_tilted - tau_cav is negative (beyond a
        relative CLAMP_MARGIN): the sweeps hold them at 0, so their variance is not matched.
    d_cavity : ndarray, shape (N,)
        d log Z_i / d mu_cav,i = (mean_tilted,i - mu_cav,i) tau_cav,i (a latent offset's gradient).

    Raises
    ------
    FloatingPointError
        If the posterior lost positive definiteness (a cavity precision <= 0).
    """
    var, mean = prior.marginals()
    with np.errstate(divide="ignore", invalid="ignore"):
        tau_cav = 1.0 / var - state.tau
        nu_cav = mean / var - state.nu
    # Exactly, var_i < 1 / tau_i (the cavity keeps the prior's precision); otherwise rounding has
    # broken the posterior at these hyperparameters: a numerical failure, which the optimiser
    # answers by stepping back, never a log evidence.
    if not (np.all(var > 0.0) and np.all(tau_cav > 0.0) and np.all(np.isfinite(nu_cav))):
        raise FloatingPointError("EP/QP posterior lost positive definiteness (marginal variance not below 1 / site "
                                 "precision): the hyperparameters are numerically extreme")
    mu_cav, var_cav = nu_cav / tau_cav, 1.0 / tau_cav
    log_z, tilted_mean, tilted_var = ep_sweeps.tilted_projections(y, mu_cav, var_cav, site.params,
                                                                  site.functions.project, quantile)
    # A likelihood without parameters has nothing to differentiate (and an empty tuple to index).
    param_grads = (ep_sweeps.summed_log_z_gradient(y, mu_cav, var_cav, site.params, site.functions.log_z_gradient)
                   if len(site.params) else np.zeros(0))
    clamped = int(np.sum(tilted_var * tau_cav > 1.0 + CLAMP_MARGIN))
    return log_z, param_grads, tau_cav, nu_cav, mean, clamped, tilted_mean * tau_cav - nu_cav


def log_evidence(prior, state, log_z, tau_cav, nu_cav, mean):
    """EP log evidence (Rasmussen & Williams eq. 3.65; GPML infEP's stable form, zero prior mean).

    Parameters
    ----------
    prior : DensePrior, FITCPrior or ChunkedFITCPrior
        The prior refreshed at the sites (its ``log_det_B``).
    state : SiteState
        The sites.
    log_z : ndarray, shape (N,)
        log Z_i of the tilted distributions.
    tau_cav, nu_cav : ndarray, shape (N,)
        Cavity precisions and locations.
    mean : ndarray, shape (N,)
        Posterior marginal means.

    Returns
    -------
    float
    """
    tt, tn = state.tau, state.nu
    return float(-0.5 * prior.log_det_B + np.sum(log_z) + 0.5 * tn @ mean
                 + 0.5 * nu_cav @ ((tt / tau_cav * nu_cav - 2.0 * tn) / (tt + tau_cav))
                 - 0.5 * np.sum(tn ** 2 / (tau_cav + tt)) + 0.5 * np.sum(np.log1p(tt / tau_cav)))


def _with_offset(site, y, offset):
    """The site model and targets for a per-row latent offset (:func:`gpdsl._jit.projections.with_offset`):
    targets as rows (y, o) and the likelihood's site functions wrapped to read them; a site model
    of parts (a likelihood per output's rows) takes rows (part, y, o) itself
    (:func:`gpdsl._jit.mixed_sites.site_rows`)."""
    if site.parts is not None:
        return site, site_rows(site.parts, y, offset)
    if offset is None:
        return site, y
    return site._replace(functions=with_offset(site.functions)), np.column_stack([y, offset])


def evaluate(kernel, likelihood, X, y, Z=None, *, spec, warm=None, need_grad=True, need_state=False, offset=None):
    """EP / QP log evidence, gradients (kernel, Z, bias) and posterior; dense without Z, FITC with Z.

    ``spec`` is the gd.inference.EP / QP declaration; ``warm`` a :class:`SiteState` to start from.
    ``spec.jitter`` applies to K_uu of FITC-EP (the dense form needs none).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    likelihood : gpdsl.likelihoods.Likelihood
        The observation model (its :meth:`~gpdsl.likelihoods.Likelihood.site_model`).
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Coded targets.
    Z : ndarray, shape (M, D), optional
        Inducing inputs: the FITC prior with them, the dense prior without.
    spec : gpdsl.inference.EP or gpdsl.inference.QP
        The declaration (damping, max_sweeps, tol, schedule, jitter, chunk_size, QP options).
    warm : SiteState, optional
        Sites to start from (used when there are N of them); None starts from :func:`site_start`.
    offset : ndarray, shape (N,), optional
        Per-row offset of the latent input (the likelihood sees f + offset).
    need_grad : bool, default True
        Compute the gradients.
    need_state : bool, default False
        Build the predictive state.

    Returns
    -------
    gpdsl.methods.common.Evaluation

    References
    ----------
    Rasmussen & Williams (2006), section 3.6 and eq. 3.65 (dense EP evidence); Naish-Guzman &
    Holden (2007), sections 3-4 (FITC-EP, its evidence gradients in the kernel, Z and the probit
    bias); Zhang et al. (2020), eq. 4 (QP's hyperparameters by EP's evidence formula).
    """
    start = site_start(shifted(likelihood, offset), X, y)
    site, y = _with_offset(likelihood.for_rows(X).site_model(), y, offset)
    prior = _prior(kernel, X, Z, spec)
    # The evidence and its gradients are EP's for QP too (Zhang et al. fit hyperparameters with
    # EP's evidence): the gradient identity needs the moment-matching fixed point.
    state = run_sites(prior, y, site, spec, warm, quantile=False, start=start)
    log_z, param_grads, tau_cav, nu_cav, mean, state.clamped, d_cavity = cavity_terms(
        prior, state, y, site, False if spec.quantile else None)
    F = log_evidence(prior, state, log_z, tau_cav, nu_cav, mean)
    if need_state and state.clamped:
        # The gradient identity below needs every site moment-matched.  With clamped sites the
        # evidence is still a smooth function of the hyperparameters (a fixed point of the
        # clamped sweeps), but its gradient also carries d F / d tau_j (nonzero: the clamped
        # sites' variance mismatch) times d tau_j / d theta of the free sites, which is not
        # computed (on the coal-mining counts with raw years, lengthscale 1: 22.1 against 12.8
        # by finite differences).  The fit's final evaluation says so.
        warnings.warn(f"{type(spec).__name__}: {state.clamped} of {len(y)} sites have a tilted distribution wider "
                      "than their cavity (a likelihood that is not log-concave), so their precisions are held at 0 "
                      "and the EP evidence gradient is only approximate there: the hyperparameters may not be at "
                      "a stationary point of the evidence; standardise X or start from longer lengthscales "
                      "(flagged ep_clamped)", ConvergenceWarning, stacklevel=4)
    grads, dZ = {}, None
    if need_grad:
        ev = site_regression(kernel, X, Z, state.tau, state.nu, jitter=prior.jitter,
                             chunk_size=spec.chunk_size, need_grad=True, need_state=False, dtc=_is_dtc(spec))
        grads, dZ = dict(ev.grads), ev.dZ
        # The sites depend on the likelihood's parameters, but at an EP fixed point the evidence
        # is stationary in them: only the explicit dependence of the log Z_i remains.
        grads.update({name: np.array(g) for name, g in zip(site.names, param_grads)})
        if offset is not None:
            grads["offset"] = d_cavity          # likewise for a latent offset (module docstring)
    post_state, sites = None, state
    if need_state:
        if spec.quantile:
            sites = run_sites(prior, y, site, spec, state, quantile=True)
        post_state = site_regression(kernel, X, Z, sites.tau, sites.nu, jitter=prior.jitter,
                                     chunk_size=spec.chunk_size, need_grad=False, need_state=True,
                                     dtc=_is_dtc(spec)).state
    return Evaluation(log_evidence=F, grads=grads, dZ=dZ, jitter=prior.jitter, state=post_state, warm=sites,
                      pseudo_data=(sites.tau, sites.nu))


def site_start(likelihood, X, y):
    """The sites EP and QP start from without a warm start: None (zero sites), or for a likelihood
    even in f (``sign_symmetric``: Poisson's square link) the (weights, weighted targets) of its
    surrogate regression.  With a zero-mean prior f -> -f is then a symmetry, and sites started at
    zero stay at a zero mean (a bimodal tilted law, clamped precisions); the surrogate starts
    them on one branch instead (Poisson: tau = 1, nu = sqrt(y + 1/2), f ~ sqrt(y), the same rate
    f^2 as the other).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        The observation model.
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Coded targets.

    Returns
    -------
    (ndarray, ndarray) or None
    """
    return likelihood.surrogate(X, y) if likelihood.sign_symmetric else None


def _is_dtc(spec):
    """Whether ``spec`` (EP / QP) declares the DTC prior rather than FITC's."""
    return getattr(spec, "approximation", "fitc") == "dtc"


def _prior(kernel, X, Z, spec):
    if Z is None:
        return DensePrior(kernel, X)
    if is_chunked((X,)):
        return ChunkedFITCPrior(kernel, X, Z, spec.jitter, spec.chunk_size, dtc=_is_dtc(spec))
    return FITCPrior(kernel, X, Z, spec.jitter, spec.chunk_size, dtc=_is_dtc(spec))


def site_regression(kernel, X, Z, tau, nu, *, jitter, chunk_size, need_grad, need_state, offset_grad=False,
                    dtc=False):
    """The Gaussian regression whose posterior is that of Gaussian sites with precisions tau and
    locations nu (N,) each: targets nu/tau, noise 1/tau, dense (Z None), FITC, or DTC (``dtc``).  EP's and QP's
    sites, and the Laplace approximation's (tau = W, nu = W f_hat + d log p), go through it.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    Z : ndarray, shape (M, D) or None
        Inducing inputs (None: dense).
    tau : ndarray, shape (N,)
        Site precisions (floored at 1e-12).
    nu : ndarray, shape (N,)
        Site locations.
    jitter : float or None
        Jitter of K_uu.
    chunk_size : int or None
        Rows per block.
    need_grad : bool
        Compute the gradients (kernel hyperparameters and Z).
    need_state : bool
        Build the predictive state.
    offset_grad : bool, default False
        Also ``grads["offset"]`` = (K + diag(1/tau))^-1 nu/tau, d/d o of targets nu/tau - o.
    dtc : bool, default False
        With Z: the DTC prior K = Q_ff (``collapsed.evaluate(dtc=True)``) instead of FITC's.

    Returns
    -------
    gpdsl.methods.common.Evaluation
        Of log N(nu/tau | 0, K + diag(1/tau)) (K dense, FITC or DTC).
    """
    tau = np.maximum(tau, _TAU_FLOOR)
    pseudo = known_noise(1.0 / tau)
    if Z is None:
        return exact.evaluate(kernel, pseudo, X, nu / tau, jitter=None, need_grad=need_grad, need_state=need_state,
                              offset_grad=offset_grad)
    return collapsed.evaluate(kernel, pseudo, X, nu / tau, Z, fitc=not dtc, dtc=dtc, jitter=jitter,
                              chunk_size=chunk_size, need_grad=need_grad, need_state=need_state,
                              offset_grad=offset_grad, estimate_rounding=False)   # F is not EP's evidence
