"""Jitted EP / QP site sweeps for the dense prior and the FITC prior.

Sites are Gaussian in natural parameters: precision ``tau`` and location ``nu`` (precision x
mean).  One sweep visits every site: the cavity is the current marginal with the site removed,
the tilted distribution ``p(y_i | f_i) N(f_i | cavity)`` is projected onto a Gaussian (moment
matching for EP, the L2-Wasserstein projection for QP), and the site becomes the ratio of that
Gaussian to the cavity.  Damping keeps the weight ``damping`` on the old site.  Sweeps return the
largest change of a site parameter and the number of sites skipped because their cavity had
non-positive precision (the update would be meaningless; the site keeps its value).

The projection is the likelihood's jitted function ``project``, an argument of every sweep
(:mod:`gpdsl._jit.projections`): Numba compiles a sweep once per function passed, so a fit compiles
its own likelihood's code alone, and no code here knows a likelihood.  ``params`` (the
likelihood's parameter tuple), ``quantile`` (None for EP, which compiles EP's code alone; a bool
for QP fits, and for EP fits of a likelihood whose QP code is late-bound: QP's projection if True)
and ``table``, ``grid`` (a QP lookup table and its grid, or None) are passed through to it.
"""
import llvmlite.binding as _llvm
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import get_cython_function_address, intrinsic


# inline="always" on the helpers below that the FITC sweep calls once each (_site_update, _fitc_site,
# _block_sites, _blas_workspace, _apply_block): Numba then types and lowers their bodies as part of
# the caller instead of compiling each as a dispatcher of its own, which LLVM optimised and emitted
# again in every caller above it.  A cold first FITC-EP fit compiled for about 1 s (of 4.7) less
# (issue 46, benchmarks/HISTORY.md).  _gemm, called from four places, stays compiled once: inlined
# at each it compiled for 0.7 s more.
@njit(cache=True, inline="always")
def _site_update(i, marginal_var, marginal_mean, tau, nu, y, param, project, quantile, damping, table, grid):
    """New (tau_i, nu_i) from the marginal N(marginal_mean, marginal_var); ok=False if the cavity is improper.

    ``project(y_i, cavity mean, cavity variance, param, quantile, table, grid)``: the likelihood's
    projection, ``param`` its parameter tuple (see the module docstring).
    """
    # A marginal variance that is not positive (or NaN) only arises when rounding has broken the
    # posterior (e.g. a kernel variance of 1e27 during a line search): the site keeps its value
    # and the caller's checks on the refreshed posterior report the failure.  Numba raises
    # ZeroDivisionError on a float division by zero, so these tests come before the divisions.
    if not marginal_var > 0.0:
        return tau[i], nu[i], False
    tau_cav = 1.0 / marginal_var - tau[i]
    nu_cav = marginal_mean / marginal_var - nu[i]
    if not tau_cav > 0.0:
        return tau[i], nu[i], False
    _, mean, var = project(y[i], nu_cav / tau_cav, 1.0 / tau_cav, param, quantile, table, grid)
    if not var > 0.0:
        return tau[i], nu[i], False
    # Site precisions are kept non-negative (GPML's infEP does the same): a negative one, possible
    # for likelihoods that are not log-concave (Poisson with the square link), can make the
    # posterior improper; the marginal mean is still matched.
    tau_new = max(1.0 / var - tau_cav, 0.0)
    nu_new = mean * (tau_cav + tau_new) - nu_cav      # keeps the marginal mean at the tilted mean
    tau_new = (1.0 - damping) * tau_new + damping * tau[i]
    nu_new = (1.0 - damping) * nu_new + damping * nu[i]
    return tau_new, nu_new, True


@njit(cache=True, nogil=True)
def dense_sequential_sweep(Sigma, mu, tau, nu, y, param, project, quantile, damping, table, grid):
    """One sequential sweep over a dense posterior (Rasmussen & Williams Algorithm 3.5).

    Sigma (N, N) and mu (N,) are the posterior covariance and mean, updated in place by rank-1
    updates after each site; tau, nu (N,) the site parameters, updated in place.
    """
    n = y.shape[0]
    max_change, skipped = 0.0, 0
    for i in range(n):
        tau_new, nu_new, ok = _site_update(i, Sigma[i, i], mu[i], tau, nu, y, param, project, quantile, damping,
                                           table, grid)
        if not ok:
            skipped += 1
            continue
        d_tau = tau_new - tau[i]
        d_nu = nu_new - nu[i]
        s_ii = Sigma[i, i]
        # 1 + d_tau s_ii = s_ii (tau_cav + tau_new) > 0 in exact arithmetic; with a cavity
        # precision at rounding level and tau_new clamped at 0 it can round to 0 (or below):
        # the update would break the posterior, so the site is skipped as an improper one is.
        denom = 1.0 + d_tau * s_ii
        if not denom > 0.0:
            skipped += 1
            continue
        max_change = max(max_change, abs(d_tau), abs(d_nu))
        c = d_tau / denom
        s = Sigma[:, i].copy()
        # mu_new = (Sigma - c s s^T)(nu + d_nu e_i) = mu + s (d_nu (1 - c s_ii) - c mu_i)
        coef = d_nu * (1.0 - c * s_ii) - c * mu[i]
        for a in range(n):
            mu[a] += coef * s[a]
            ca = c * s[a]
            for b in range(n):
                Sigma[a, b] -= ca * s[b]
        tau[i] = tau_new
        nu[i] = nu_new
    return max_change, skipped


@njit(cache=True, nogil=True)
def parallel_site_updates(marginal_var, marginal_mean, tau, nu, y, param, project, quantile, damping, table, grid):
    """Update every site from the same marginals (the caller refreshes the posterior after)."""
    n = y.shape[0]
    max_change, skipped = 0.0, 0
    tau_old = tau.copy()
    nu_old = nu.copy()
    for i in range(n):
        tau_new, nu_new, ok = _site_update(i, marginal_var[i], marginal_mean[i], tau_old, nu_old, y, param,
                                           project, quantile, damping, table, grid)
        if not ok:
            skipped += 1
            continue
        max_change = max(max_change, abs(tau_new - tau_old[i]), abs(nu_new - nu_old[i]))
        tau[i] = tau_new
        nu[i] = nu_new
    return max_change, skipped


# --- FITC-EP --------------------------------------------------------------------------------------
# The blocked sweep multiplies sub-blocks of work arrays and accumulates into M in place, which
# Numba's np.dot does not offer: it calls dgemm itself, scipy's BLAS entry point (the one np.dot
# uses), registered under a gpdsl symbol and declared as an external function, so that the cached
# machine code refers to it by name.  All arguments are pointers (the Fortran convention).

@njit(cache=True, nogil=True)
def tilted_projections(y, mu_cav, var_cav, param, project, quantile):
    """log Z_i and the tilted mean and variance of every site at its cavity N(mu_cav_i, var_cav_i),
    (N,) each: ``project`` as in the sweeps (no lookup table: the moments are EP's or QP's own)."""
    n = mu_cav.shape[0]
    log_z, mean, var = np.empty(n), np.empty(n), np.empty(n)
    for i in range(n):
        log_z[i], mean[i], var[i] = project(y[i], mu_cav[i], var_cav[i], param, quantile, None, None)
    return log_z, mean, var


@njit(cache=True, nogil=True)
def summed_log_z_gradient(y, mu_cav, var_cav, param, log_z_gradient):
    """sum_i d log Z_i / d theta at fixed cavities, (len(param),): ``log_z_gradient(y_i, mu, var,
    param)`` the likelihood's tuple of derivatives (:mod:`gpdsl._jit.projections`)."""
    total = np.empty(len(param))       # not np.zeros (covariance.slope_adjoint's comment)
    for j in range(len(param)):
        total[j] = 0.0
    for i in range(mu_cav.shape[0]):
        g = log_z_gradient(y[i], mu_cav[i], var_cav[i], param)
        for j in range(len(param)):
            total[j] += g[j]
    return total


def _bind_blas(name, n_args):
    symbol = "gpdsl_ep_sweeps_" + name
    _llvm.add_symbol(symbol, get_cython_function_address("scipy.linalg.cython_blas", name))
    return types.ExternalFunction(symbol, types.void(*([types.voidptr] * n_args)))


_dgemm = _bind_blas("dgemm", 13)
_NO_TRANS, _TRANS = 78, 84      # dgemm's flags, the characters N and T

# Sites per block of the sequential FITC-EP sweep (measured on twonorm N = 100,000, M = 100 with
# one BLAS thread: benchmarks/bench_fitc_ep.py).
FITC_BLOCK = 16


@njit(cache=True, inline="always")
def _blas_workspace():
    """Argument storage for dgemm: the characters N and T, 6 integers, 2 doubles."""
    # np.empty with a positional dtype: np.zeros(n, dtype=...) compiled for half a second more;
    # _gemm sets every integer and double before each call.
    ch = np.empty(2, np.uint8)
    ch[0], ch[1] = _NO_TRANS, _TRANS
    return ch, np.empty(6, np.int32), np.empty(2)


@njit(cache=True, nogil=True)
def _gemm(trans_a, trans_b, p, q, k, alpha, A, B, beta, C, ch, iw, fw):
    """C[:p, :q] = alpha op(A) op(B) + beta C[:p, :q] for C-ordered 2-D arrays, op(A) (p, k) and
    op(B) (k, q) their leading blocks (or those of their transposes); row strides from the shapes.

    A row-major (r, c) block is the column-major (c, r) matrix, so this is the column-major
    C^T = op(B)^T op(A)^T: dgemm with the operands swapped and the same transpose flags.
    """
    iw[0], iw[1], iw[2] = q, p, k
    iw[3], iw[4], iw[5] = B.shape[1], A.shape[1], C.shape[1]
    fw[0], fw[1] = alpha, beta
    ta, tb = (1 if trans_a else 0), (1 if trans_b else 0)
    _dgemm(_address(ch, tb), _address(ch, ta), _address(iw, 0), _address(iw, 1), _address(iw, 2), _address(fw, 0),
           _address(B, 0), _address(iw, 3), _address(A, 0), _address(iw, 4), _address(fw, 1), _address(C, 0),
           _address(iw, 5))


# Element addresses rather than ``x[k:].ctypes``: each slice and its ctypes object brought Numba's
# slicing and reference-counting code, 3,000 lines of IR for the 13 arguments (_gemm compiled for
# about 0.07 s more in every fresh process).
@intrinsic
def _address(typingctx, array, index):
    """The address of the element ``index`` places after the first of an array whose elements
    are contiguous from there on (a pointer for dgemm, as ``array[index:].ctypes``; no bounds
    check: the callers pass 0, or an index below the size of a 1-D workspace).  Only C-contiguous
    arrays type (another layout's strides would be read wrong), so misuse fails to compile."""
    if not (isinstance(array, types.Array) and array.layout == "C" and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        offset = context.cast(builder, args[1], signature.args[1], types.intp)
        return builder.bitcast(builder.gep(data, [offset]), ir.IntType(8).as_pointer())
    return types.voidptr(array, index), codegen


_UPDATED, _SKIPPED, _STOP = 0, 1, 2


# An inlined body is lowered with its caller's flags: the fastmath reference kernel below calls
# _fitc_site through _fitc_site_exact, compiled on its own without fastmath.
@njit(cache=True, inline="always")
def _fitc_site(i, s, h_i, d, P, nu_vec, tau, nu, y, param, project, quantile, damping, table, grid):
    """Site i of a sequential FITC-EP sweep from its marginal N(h_i, d_i + s), s = p_i^T M p_i: the
    formulas of :func:`fitc_sequential_sweep_rank1`'s docstring.  Updates the site and row i of the
    posterior (d_i, p_i, nu_vec_i) and returns (status, c, step, change): on _UPDATED the caller
    applies M -= c w w^T and gamma += step w with w = M p_i (before this site); _SKIPPED (improper
    cavity, or 1 + pi d_i <= 0) and _STOP (M would lose definiteness) change nothing."""
    a_ii = d[i] + s
    tau_new, nu_new, ok = _site_update(i, a_ii, h_i, tau, nu, y, param, project, quantile, damping, table, grid)
    pi = tau_new - tau[i]
    b = nu_new - nu[i]
    denom = 1.0 + pi * d[i]
    if not ok or denom <= 0.0:
        return _SKIPPED, 0.0, 0.0, 0.0
    # 1 + pi a_ii = a_ii (tau_cav + tau_new) > 0 in exact arithmetic, but rounds to 0 (Numba
    # would raise ZeroDivisionError) when the cavity precision is at rounding level and tau_new
    # is clamped at 0: M would lose definiteness, so the caller refreshes, as for keep <= 0.
    marginal_denom = 1.0 + pi * a_ii
    if not marginal_denom > 0.0:
        return _STOP, 0.0, 0.0, 0.0
    c = pi / marginal_denom
    keep = 1.0 - c * s
    if not keep > 0.0:
        return _STOP, 0.0, 0.0, 0.0
    step = (b - pi * h_i) / denom * keep
    scale = 1.0 / denom
    for a in range(P.shape[1]):
        P[i, a] *= scale
    nu_vec[i] += d[i] * (b - pi * nu_vec[i]) / denom
    d[i] /= denom
    tau[i] = tau_new
    nu[i] = nu_new
    return _UPDATED, c, step, max(abs(pi), abs(b))


# fastmath=False explicitly: Numba compiles a function that sets no fastmath option with the
# fastmath of the caller that compiles it first, and then serves that version (from the disk cache
# too) to every caller.
@njit(cache=True, nogil=True, fastmath=False)
def _fitc_site_exact(i, s, h_i, d, P, nu_vec, tau, nu, y, param, project, quantile, damping, table, grid):
    """:func:`_fitc_site` without fastmath, for :func:`fitc_sequential_sweep_rank1` (fastmath)."""
    return _fitc_site(i, s, h_i, d, P, nu_vec, tau, nu, y, param, project, quantile, damping, table, grid)


@njit(cache=True, inline="always")
def _block_sites(i0, r, G, T, hv, alpha, beta, d, P, nu_vec, tau, nu, y, param, project, quantile, damping,
                 table, grid):
    """Sites i0 .. i0+r-1 in order, each exactly as in :func:`fitc_sequential_sweep_rank1`, with the
    earlier sites of the block applied in the r-dimensional coordinates of the block.

    On entry G[:r, :r] = P_b M P_b^T and hv = nu_vec_b + P_b gamma at the block's start.  With
    u_l = M_l p_l (M_l: M before site l) and g_kl = p_k^T u_l, the marginal of site k is
        p_k^T M_k p_k = G_kk - sum_{l<k} alpha_l g_kl^2,   h_k = hv_k + sum_{l<k} beta_l g_kl,
        g_kl = G_kl - sum_{j<l} alpha_j g_kj g_lj
    (a row-oriented LDL^T of G, O(k^2) per site); row k of G is overwritten by g_kl (l < k) and
    row k of T by alpha_l g_kl, so that U = (I + T)^-1 W with W = P_b M (u_k = w_k - sum_{l<k} T_kl u_l).
    Returns (max_change, skipped, stop): stop is the block offset of a site whose update would
    lose definiteness (the sites before it are done), or -1.
    """
    max_change, skipped = 0.0, 0
    for k in range(r):
        i = i0 + k
        for l in range(k):
            t = G[k, l]
            for j in range(l):
                t -= T[k, j] * G[l, j]
            G[k, l] = t
            T[k, l] = alpha[l] * t
        s = G[k, k]
        h_i = hv[k]
        for l in range(k):
            s -= T[k, l] * G[k, l]
            h_i += beta[l] * G[k, l]
        alpha[k], beta[k] = 0.0, 0.0
        status, c, step, change = _fitc_site(i, s, h_i, d, P, nu_vec, tau, nu, y, param, project, quantile, damping,
                                             table, grid)
        if status == _SKIPPED:
            skipped += 1
            continue
        if status == _STOP:
            return max_change, skipped, k
        max_change = max(max_change, change)
        alpha[k], beta[k] = c, step
    return max_change, skipped, -1


@njit(cache=True, inline="always")
def _apply_block(ME, WE, T, alpha, beta, C, UE, UaE, r, no, tr, ch, iw, fw):
    """The delayed update of a block's first r sites on ME = [M | gamma]:
    U = (I + T)^-1 W (row k: u_k = M_k p_k), M -= U^T diag(alpha) U and gamma += U^T beta, as
    C = (I + T)^-1 (unit lower triangular, O(r^3)), UE = C WE and ME -= UE^T [diag(alpha) U | -beta].
    ``no``, ``tr``: False and True, :func:`_gemm`'s transpose flags (see fitc_sequential_sweep)."""
    if r == 0:
        return
    m = ME.shape[0]
    for k in range(r):
        for j in range(r):
            C[k, j] = 0.0
        C[k, k] = 1.0
        for l in range(k):
            t = T[k, l]
            if t != 0.0:
                for j in range(l + 1):
                    C[k, j] -= t * C[l, j]
    _gemm(no, no, r, m + 1, r, 1.0, C, WE, 0.0, UE, ch, iw, fw)
    for k in range(r):
        a = alpha[k]
        for j in range(m):
            UaE[k, j] = a * UE[k, j]
        UaE[k, m] = -beta[k]
    _gemm(tr, no, m, m + 1, r, -1.0, UE, UaE, 1.0, ME, ch, iw, fw)


@njit(cache=True, nogil=True)
def fitc_sequential_sweep(d, P, Minv, nu_vec, gamma, tau, nu, y, param, project, quantile, damping, table, grid,
                          start, block):
    """One sequential FITC-EP sweep from site ``start`` (Naish-Guzman & Holden, section 3), with
    delayed updates: the same site order and updates as :func:`fitc_sequential_sweep_rank1` (each
    cavity from the posterior after all earlier sites), its O(M^2) work done by dgemm on blocks.

    M and gamma are kept side by side as ME = [M | gamma] (M, M+1).  Per block of ``block`` sites
    with rows P_b (b, M): WE = P_b ME = [W | P_b gamma] with W = P_b M (2 b M^2 flops) and
    G = W P_b^T (2 b^2 M); the b sites in order on G (:func:`_block_sites`, O(b^2) each); then
    the rank-b change of M and gamma (:func:`_apply_block`, 2 b^2 M + 2 b M^2).  About
    4 N M^2 + 4 N b M flops per sweep, all in dgemm.

    Arguments and returns as :func:`fitc_sequential_sweep_rank1` (``stop``: the site whose update
    would lose definiteness, or -1; the sites before it are done, it and those after are not).
    """
    n, m = P.shape
    if not P.flags.c_contiguous:
        raise ValueError("fitc_sequential_sweep: P must be C-contiguous (dgemm reads its rows in place)")
    B = max(1, min(block, n))
    ch, iw, fw = _blas_workspace()
    # The transpose flags as run-time values: Numba compiles a callee once per combination of
    # constant arguments (literal types), which made three copies of _gemm.
    no, tr = ch[0] == _TRANS, ch[1] == _TRANS
    # Element loops rather than slice assignments, whose shape-mismatch error message alone
    # compiled for seconds.
    ME = np.empty((m, m + 1))
    for a in range(m):
        for b in range(m):
            ME[a, b] = Minv[a, b]
        ME[a, m] = gamma[a]
    WE, UE, UaE = np.empty((B, m + 1)), np.empty((B, m + 1)), np.empty((B, m + 1))
    G, T, C = np.empty((B, B)), np.empty((B, B)), np.empty((B, B))
    hv, alpha, beta = np.empty(B), np.empty(B), np.empty(B)
    max_change, skipped, stop = 0.0, 0, -1
    for i0 in range(start, n, B):
        r = min(B, n - i0)
        Pb = P[i0:i0 + r]
        _gemm(no, no, r, m + 1, m, 1.0, Pb, ME, 0.0, WE, ch, iw, fw)
        _gemm(no, tr, r, r, m, 1.0, WE, Pb, 0.0, G, ch, iw, fw)
        for k in range(r):
            hv[k] = nu_vec[i0 + k] + WE[k, m]
        change, skip, k_stop = _block_sites(i0, r, G, T, hv, alpha, beta, d, P, nu_vec, tau, nu, y, param,
                                            project, quantile, damping, table, grid)
        max_change, skipped = max(max_change, change), skipped + skip
        # One call site, so that _apply_block is inlined once: the sites before a stop, else all r.
        _apply_block(ME, WE, T, alpha, beta, C, UE, UaE, k_stop if k_stop >= 0 else r, no, tr, ch, iw, fw)
        if k_stop >= 0:
            stop = i0 + k_stop
            break
    for a in range(m):
        for b in range(m):
            Minv[a, b] = ME[a, b]
        gamma[a] = ME[a, m]
    return max_change, skipped, stop


@njit(cache=True, nogil=True, fastmath=True)
def fitc_sequential_sweep_rank1(d, P, Minv, nu_vec, gamma, tau, nu, y, param, project, quantile, damping, table, grid,
                                start):
    """One sequential FITC-EP sweep from site ``start``, one site at a time (Naish-Guzman & Holden,
    section 3): the reference that :func:`fitc_sequential_sweep` (used by FITCPrior) reproduces with
    delayed updates; kept for the tests and benchmarks/bench_fitc_ep.py.

    The posterior is A = D + P M P^T, h = nu_vec + P gamma with D = diag(d) (N,), P (N, M) and
    M (M, M) symmetric.  The paper keeps M through its Cholesky factor (M = R^T R); here M itself
    is kept (``Minv``: M is the inverse of Sigma_u = K_uu + P0^T W P0) because its rank-1 change
    is one contiguous O(M^2) pass, about ten times faster than triangular solves plus a factor
    up/downdate, and the refresh after a run's last sweep rebuilds it from a fresh Cholesky
    factor, so rounding drift lasts one run of sweeps (in the whitened basis, where M's
    eigenvalues lie in (0, 1], about N eps per sweep).  With w = M p_i, A_ii = d_i + p_i^T w
    and a change pi of the site precision (b of its location):
        M        -= c w w^T,  c = pi / (1 + pi A_ii)     (positive definite iff 1 - c p^T w > 0)
        nu_vec_i += d_i (b - pi nu_vec_i) / (1 + pi d_i)
        gamma    += (b - pi h_i) / (1 + pi d_i) M_new p_i,   M_new p_i = (1 - c p^T w) w
        d_i /= 1 + pi d_i;  p_i /= 1 + pi d_i.
    (The paper prints ``b + pi nu_i``; expanding h_new = A_new (A^-1 h + b e_i) gives the minus
    sign, and the tests compare with dense EP on the same prior.)

    Returns (max_change, skipped, stop): ``stop`` is -1 after a full sweep, or the index of a
    site whose update would lose definiteness (footnote 3) -- the caller refreshes and goes on.
    """
    n, m = P.shape
    max_change, skipped = 0.0, 0
    w = np.empty(m)
    for i in range(start, n):
        for a in range(m):
            t = 0.0
            for k in range(m):
                t += Minv[a, k] * P[i, k]
            w[a] = t
        pw = 0.0
        pg = 0.0
        for a in range(m):
            pw += P[i, a] * w[a]
            pg += P[i, a] * gamma[a]
        status, c, step, change = _fitc_site_exact(i, pw, nu_vec[i] + pg, d, P, nu_vec, tau, nu, y, param, project,
                                                   quantile, damping, table, grid)
        if status == _SKIPPED:
            skipped += 1
            continue
        if status == _STOP:
            return max_change, skipped, i
        max_change = max(max_change, change)
        for a in range(m):
            ca = c * w[a]
            for k in range(m):
                Minv[a, k] -= ca * w[k]
            gamma[a] += step * w[a]
    return max_change, skipped, -1
