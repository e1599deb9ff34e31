"""Slow, obviously-correct dense NumPy references that the fast paths are compared with."""
import numpy as np
from scipy import stats

# The central differences every gradient test takes: gpdsl.testing's, the one users' checks run.
from gpdsl.testing import central_difference  # noqa: F401


def kernel(X1, X2, lengthscale, variance, kind):
    """Dense stationary kernel by broadcasting; kind in {"se", "m32", "m52"}."""
    ls = np.broadcast_to(np.asarray(lengthscale, float), (X1.shape[1],))
    r2 = (((X1[:, None, :] - X2[None, :, :]) / ls) ** 2).sum(-1)
    r = np.sqrt(r2)
    if kind == "se":
        return variance * np.exp(-0.5 * r2)
    if kind == "m32":
        return variance * (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)
    return variance * (1 + np.sqrt(5) * r + 5 * r2 / 3) * np.exp(-np.sqrt(5) * r)


def exact_lml(K, noise, y):
    return stats.multivariate_normal(mean=np.zeros(len(y)), cov=K + np.diag(noise)).logpdf(y)


def exact_predict(Kff, Ksf, kss, noise, y):
    C = np.linalg.inv(Kff + np.diag(noise))
    return Ksf @ C @ y, kss - np.einsum("ij,jk,ik->i", Ksf, C, Ksf)


def nystrom(Kuu, Kuf, jitter=0.0):
    Kj = Kuu + jitter * np.mean(np.diag(Kuu)) * np.eye(len(Kuu))
    return Kuf.T @ np.linalg.solve(Kj, Kuf), Kj


def vfe_bound(Kff_diag, Kuu, Kuf, noise, y, jitter=0.0):
    """Titsias eq. (16)/(21), thesis eq. (3.1): dense N x N evaluation."""
    Q, _ = nystrom(Kuu, Kuf, jitter)
    dense = stats.multivariate_normal(mean=np.zeros(len(y)), cov=Q + np.diag(noise)).logpdf(y)
    return dense - 0.5 * np.sum((Kff_diag - np.diag(Q)) / noise)


def fitc_lml(Kff_diag, Kuu, Kuf, noise, y, jitter=0.0):
    Q, _ = nystrom(Kuu, Kuf, jitter)
    cov = Q + np.diag(Kff_diag - np.diag(Q) + noise)
    return stats.multivariate_normal(mean=np.zeros(len(y)), cov=cov).logpdf(y)


def titsias_qu(Kuu, Kuf, noise, y, jitter=0.0):
    """Optimal phi*(f_m) of Titsias eq. (17) with per-point noise (thesis eq. 3.3)."""
    _, Kj = nystrom(Kuu, Kuf, jitter)
    Sigma = np.linalg.inv(Kj + (Kuf / noise) @ Kuf.T)
    mu = Kj @ Sigma @ Kuf @ (y / noise)
    A = Kj @ Sigma @ Kj
    return mu, A, Kj


def sparse_predict(Ksu, kss, Kuu_jittered, mu, A):
    """Titsias eq. (8): q(f*) with q(u) = N(mu, A)."""
    Ki = np.linalg.inv(Kuu_jittered)
    mean = Ksu @ Ki @ mu
    var = kss - np.einsum("ij,jk,ik->i", Ksu, Ki - Ki @ A @ Ki, Ksu)
    return mean, var


def polya_gamma_elbo(Kuu, Kuf, kff, y, bias, m, S, c):
    """The uncollapsed Pólya-Gamma ELBO (thesis eq. 2.23, with a bias inside the logistic) at
    q(u) = N(m, S), q(omega_n) = PG(1, c_n), from its definition:
    sum_n E[log p(y_n | omega_n, f_n)] - KL[q(u) || p(u)] - sum_n KL[PG(1, c_n) || PG(1, 0)],
    with p(y | omega, f) = 1/2 exp(y z / 2 - omega z^2 / 2), z = f + bias; ``bias`` a scalar or
    (n,), the bias plus each row's latent offset."""
    theta = np.where(c > 0, np.tanh(c / 2) / (2 * np.where(c > 0, c, 1.0)), 0.25)
    Kinv = np.linalg.inv(Kuu)
    W = Kinv @ Kuf
    mu = W.T @ m
    var = kff - np.einsum("ij,ij->j", Kuf, W) + np.einsum("ij,ik,kj->j", W, S, W)
    z_mean = mu + bias
    expected = np.sum(-np.log(2.0) + 0.5 * y * z_mean - 0.5 * theta * (z_mean ** 2 + var))
    kl_u = 0.5 * (np.trace(Kinv @ S) + m @ Kinv @ m - len(m) + np.linalg.slogdet(Kuu)[1] - np.linalg.slogdet(S)[1])
    kl_pg = np.sum(np.logaddexp(c / 2, -c / 2) - np.log(2.0) - 0.5 * c * c * theta)
    return expected - kl_u - kl_pg


def greedy_variance(K, weights=None, m=None, tol=None):
    """Dense GV / HGV: each step recomputes diag(W (K - K[:, S] K[S, S]^-1 K[S, :])) from
    scratch and adds its first argmax to S; stops at m points or once the weighted trace after a
    pick is below tol.  K (N, N) should carry the jitter of the fast path (K_ff + 1e-12 I).
    Returns (indices, weighted trace after each pick)."""
    n = K.shape[0]
    w = np.ones(n) if weights is None else np.asarray(weights, float)
    S, traces = [], []
    residual = np.diag(K).copy()
    while len(S) < n:
        S.append(int(np.argmax(w * residual)))
        K_S = K[S]
        residual = np.diag(K) - np.einsum("ij,ij->j", K_S, np.linalg.solve(K[np.ix_(S, S)], K_S))
        traces.append(float(np.sum(w * residual)))
        if (m is not None and len(S) == m) or (tol is not None and traces[-1] < tol):
            break
    return np.array(S), np.array(traces)


def vfe_bound_weighted(K, S, weights, targets):
    """Collapsed bound with per-point noise 1/w_n and targets r_n / w_n, inducing points = the
    training points S (thesis eq. 3.1), by the dense N x N Gaussian density:
    log N(ytilde | 0, Q + W^-1) - 1/2 sum_n w_n (K_nn - Q_nn) with Q = K[:, S] K[S, S]^-1 K[S, :]
    (Q = 0 for empty S).  K (N, N) as in :func:`greedy_variance`; weights > 0."""
    S = list(S)
    w = np.asarray(weights, float)
    Q = K[:, S] @ np.linalg.solve(K[np.ix_(S, S)], K[S]) if S else np.zeros_like(K)
    dense = stats.multivariate_normal(mean=np.zeros(len(w)), cov=Q + np.diag(1.0 / w)).logpdf(targets / w)
    return dense - 0.5 * np.sum(w * (np.diag(K) - np.diag(Q)))


def _cholesky_extended(A):
    """Lower Cholesky factor in np.longdouble (80-bit on x86-64 Linux), column by column."""
    A = np.asarray(A, dtype=np.longdouble)
    L = np.zeros_like(A)
    for j in range(A.shape[0]):
        L[j, j] = np.sqrt(A[j, j] - L[j, :j] @ L[j, :j])
        L[j + 1:, j] = (A[j + 1:, j] - L[j + 1:, :j] @ L[j, :j]) / L[j, j]
    return L


def _solve_lower_extended(L, B):
    X = np.zeros(B.shape, dtype=np.longdouble)
    for i in range(L.shape[0]):
        X[i] = (B[i] - L[i, :i] @ X[:i]) / L[i, i]
    return X


def _se_gram_extended(P, Q, lengthscale, variance):
    ld = np.longdouble
    d = ((P.astype(ld)[:, None, :] - Q.astype(ld)[None, :, :]) / ld(lengthscale)) ** 2
    return ld(variance) * np.exp(-d.sum(-1) / 2)


def vfe_bound_extended(X, Z, lengthscale, variance, noise, y, jitter=0.0):
    """Titsias eq. (16) (eq. 21 with K_uu + jitter * variance * I) for an isotropic SE kernel,
    dense N x N, every step in np.longdouble: log N(y | 0, Q_ff + Lambda) - 1/2 sum_n (K_nn -
    Q_nn) / lambda_n.  A reference where cond(K_uu) puts float64 evaluations at the edge of their
    precision."""
    ld = np.longdouble
    Kuu = _se_gram_extended(Z, Z, lengthscale, variance)
    L = _cholesky_extended(Kuu + ld(jitter) * ld(variance) * np.eye(len(Z), dtype=ld))
    V = _solve_lower_extended(L, _se_gram_extended(Z, X, lengthscale, variance))   # Q_ff = V^T V
    C = V.T @ V + np.diag(np.asarray(noise, dtype=ld))
    LC = _cholesky_extended(C)
    alpha = _solve_lower_extended(LC, np.asarray(y, dtype=ld)[:, None])[:, 0]
    n = len(y)
    log_normal = -n / 2 * np.log(2 * np.pi) - np.sum(np.log(np.diag(LC))) - alpha @ alpha / 2
    trace = np.sum((ld(variance) - np.sum(V * V, axis=0)) / np.asarray(noise, dtype=ld))
    return log_normal - trace / 2


def vfe_predict_extended(X, Z, X_new, lengthscale, variance, noise, y):
    """Titsias eq. (8) with the optimal q(u) of eq. (17) for an isotropic SE kernel, in
    np.longdouble and the whitened basis a = L^-1 k_u (K_uu = L L^T, B = I + A Lambda^-1 A^T):
    mean = a_*^T B^-1 A Lambda^-1 y, var = k_** - |a_*|^2 + a_*^T B^-1 a_*."""
    ld = np.longdouble
    L = _cholesky_extended(_se_gram_extended(Z, Z, lengthscale, variance))
    A = _solve_lower_extended(L, _se_gram_extended(Z, X, lengthscale, variance))
    A_new = _solve_lower_extended(L, _se_gram_extended(Z, X_new, lengthscale, variance))
    w = 1 / np.asarray(noise, dtype=ld)
    LB = _cholesky_extended(np.eye(len(Z), dtype=ld) + (A * w) @ A.T)
    V = _solve_lower_extended(LB, A_new)                      # L_B^-1 a_*
    g = _solve_lower_extended(LB, (A @ (w * np.asarray(y, dtype=ld)))[:, None])[:, 0]
    return V.T @ g, ld(variance) - np.sum(A_new * A_new, axis=0) + np.sum(V * V, axis=0)


# --------------------------------------------------------------------------- tilted distributions (EP / QP)
# Brute-force references for the jitted site projections of gpdsl._jit.likelihoods: any
# log-likelihood callable f -> log p(y | f), the cavity N(mu, sd^2), and adaptive quadrature
# (scipy.integrate.quad, relative tolerance 1e-13) on a grid of breakpoints fine enough that no
# piece hides a feature from it.
import math  # noqa: E402  (this file is extended by appending)
import warnings  # noqa: E402

from scipy import integrate, special  # noqa: E402


def tilted_grid(mu, sd, centres=(), pieces=64, reach=40.0):
    """Sorted breakpoints over [mu - reach sd, mu + reach sd]: ``pieces`` equal pieces, the cavity's
    mu + sd {0, +-0.5, ..., +-20}, and around each (centre, scale) of ``centres`` the points
    centre + scale {0, +-0.25, +-0.5, +-1, +-2, +-5, +-10, +-20, +-50, +-100} (features of the
    likelihood: the logistic's transition, a Student-t's peak at y)."""
    lo, hi = mu - reach * sd, mu + reach * sd
    offsets = np.array([0.0, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0])
    offsets = np.concatenate([-offsets[1:], offsets])
    points = [np.linspace(lo, hi, pieces + 1), mu + sd * np.array([-20, -10, -5, -3, -2, -1, -0.5, 0, 0.5, 1, 2, 3, 5,
                                                                   10, 20])]
    for centre, scale in centres:
        points.append(centre + scale * offsets)
    grid = np.unique(np.concatenate(points))
    return grid[(grid >= lo) & (grid <= hi)]


def _log_integrand(log_lik, mu, sd):
    return lambda f: log_lik(f) - 0.5 * ((f - mu) / sd) ** 2


def _reference_log(log_g, grid):
    """max of log_g over the grid and its midpoints (the integrands are scaled by it)."""
    probe = np.concatenate([grid, 0.5 * (grid[1:] + grid[:-1])])
    values = np.array([log_g(t) for t in probe])
    return float(np.max(values[np.isfinite(values)])), float(probe[np.argmax(np.where(np.isfinite(values), values,
                                                                                          -np.inf))])


def _quad(fn, a, b):
    """quad at relative tolerance 1e-13; its warning that rounding stops it short of that (near
    double precision, on smooth integrands) is silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        return integrate.quad(fn, a, b, epsabs=0.0, epsrel=1e-13, limit=200)[0]


def _piecewise_quad(fn, grid):
    return sum(_quad(fn, a, b) for a, b in zip(grid[:-1], grid[1:]))


def tilted_moments(log_lik, mu, sd, centres=(), pieces=64, reach=40.0):
    """(log Z, mean, variance) of the tilted density exp(log_lik(f)) N(f | mu, sd^2) / Z, by
    adaptive quadrature on :func:`tilted_grid`: Z, then the mean about the grid's highest point,
    then the variance about the mean (two passes, so nothing cancels)."""
    grid = tilted_grid(mu, sd, centres, pieces, reach)
    log_g = _log_integrand(log_lik, mu, sd)
    ref, top = _reference_log(log_g, grid)
    g = lambda f: math.exp(log_g(f) - ref)
    mass = _piecewise_quad(g, grid)
    mean = top + _piecewise_quad(lambda f: (f - top) * g(f), grid) / mass
    var = _piecewise_quad(lambda f: (f - mean) ** 2 * g(f), grid) / mass
    return ref + math.log(mass) - math.log(sd * math.sqrt(2.0 * math.pi)), mean, var


def tilted_expectation(fn, log_lik, mu, sd, centres=(), pieces=64, reach=40.0):
    """E[fn(f)] under the tilted density, fn >= 0 (the likelihood-parameter gradients)."""
    grid = tilted_grid(mu, sd, centres, pieces, reach)
    log_g = _log_integrand(log_lik, mu, sd)
    ref, _ = _reference_log(log_g, grid)
    g = lambda f: math.exp(log_g(f) - ref)
    return _piecewise_quad(lambda f: fn(f) * g(f), grid) / _piecewise_quad(g, grid)


def tilted_sigma_star(log_lik, mu, sd, centres=(), pieces=64, reach=40.0, split=2, order=20):
    """QP's sigma* = int phi(Phi^-1(F(t))) dt (Zhang et al. 2020, eq. 7) of the tilted
    distribution: each piece of :func:`tilted_grid` split in ``split``, ``order``-point
    Gauss-Legendre on each part, and F at every node by adaptive quadrature, from the left below
    the median and from the right above it (1 - F summed from the right keeps its relative
    accuracy in the upper tail)."""
    grid = tilted_grid(mu, sd, centres, pieces, reach)
    parts = grid[:-1, None] + (grid[1:] - grid[:-1])[:, None] * np.arange(split) / split
    grid = np.unique(np.concatenate([parts.ravel(), grid[-1:]]))
    log_g = _log_integrand(log_lik, mu, sd)
    ref, _ = _reference_log(log_g, grid)
    g = lambda f: math.exp(log_g(f) - ref)
    quad = lambda a, b: _quad(g, a, b)
    masses = np.array([quad(a, b) for a, b in zip(grid[:-1], grid[1:])])
    total = masses.sum()
    before = np.concatenate([[0.0], np.cumsum(masses)[:-1]])
    after = np.concatenate([np.cumsum(masses[::-1])[::-1][1:], [0.0]])
    x, w = np.polynomial.legendre.leggauss(order)
    sd_star = 0.0
    for k, (a, b) in enumerate(zip(grid[:-1], grid[1:])):
        for t, wt in zip(0.5 * (b - a) * (x + 1.0) + a, 0.5 * (b - a) * w):
            if before[k] < 0.5 * total:
                tail = (before[k] + quad(a, t)) / total
            else:
                tail = (after[k] + quad(t, b)) / total
            tail = min(tail, 1.0 - tail)
            if tail > 0.0:
                sd_star += wt * stats.norm.pdf(special.ndtri(tail))
    return sd_star


def logit_log_lik(y, bias):
    """f -> log sigma(y (f + bias))."""
    return lambda f: -math.log1p(math.exp(-y * (f + bias))) if y * (f + bias) > -30 else \
        y * (f + bias) - math.log1p(math.exp(y * (f + bias)))


def student_t_log_lik(y, df, scale):
    """f -> log Student-t(y | f, df, scale)."""
    const = (special.gammaln(0.5 * (df + 1.0)) - special.gammaln(0.5 * df) - 0.5 * math.log(df * math.pi)
             - math.log(scale))
    return lambda f: const - 0.5 * (df + 1.0) * math.log1p((y - f) ** 2 / (df * scale * scale))


def dense_ep_cavities(K, tau, nu):
    """Cavity means and variances (N,) of dense EP with sites (tau >= 0, nu) on the prior N(0, K):
    the posterior Sigma = (K^-1 + diag(tau))^-1 = K - K S (I + S K S)^-1 S K with S = diag(sqrt(tau))
    (a dense solve; no inverse of K, which may be near singular), mu = Sigma nu, then
    tau_cav = 1/Sigma_ii - tau_i, nu_cav = mu_i/Sigma_ii - nu_i (Rasmussen & Williams eq. 3.56).
    Returns (cavity mean, cavity variance, Sigma, mu)."""
    s = np.sqrt(tau)
    B = np.eye(len(tau)) + s[:, None] * K * s[None, :]
    Sigma = K - (K * s[None, :]) @ np.linalg.solve(B, s[:, None] * K)
    Sigma = 0.5 * (Sigma + Sigma.T)
    mu = Sigma @ nu
    var = np.diag(Sigma)
    tau_cav = 1.0 / var - tau
    nu_cav = mu / var - nu
    return nu_cav / tau_cav, 1.0 / tau_cav, Sigma, mu


def expected_log_square_series(m, v):
    """E[log f^2] under f ~ N(m, v > 0) by the Poisson mixture of noncentral chi-square laws:
    f^2 / v given J ~ Poisson(m^2 / 2v) is chi-square with 1 + 2J degrees of freedom, whose
    E[log] is log 2 + psi(1/2 + J); the sum runs over J up to a + 40 sqrt(a) + 200, and the weights
    are renormalised (scipy's pmf drifts by ~1e-9 at a = 5e5)."""
    from scipy import special
    a = m * m / (2.0 * v)
    j = np.arange(0, int(a + 40.0 * np.sqrt(a) + 200))
    weights = stats.poisson.pmf(j, a)
    return float(np.log(2.0 * v) + np.sum(weights * special.digamma(0.5 + j)) / np.sum(weights))


def bound_pair(kernel, likelihood, values):
    """The (kernel, likelihood) pair bound to a model's qualified ``values``, as the inference
    methods receive them (``Model.bind``)."""
    from gpdsl.components import bind
    if hasattr(likelihood, "bind"):
        likelihood = bind(likelihood, values, "likelihood")
    elif hasattr(getattr(likelihood, "likelihood", None), "bind"):
        # A test's counting wrapper: its likelihood is bound in place.
        likelihood.likelihood = bind(likelihood.likelihood, values, "likelihood")
    # Otherwise a stand-in (an oracle's expectations) is used as it is.
    return bind(kernel, values, "kernel"), likelihood


# --------------------------------------------------------------------------- multi-output (coregionalisation)
# Dense references of the ICM and LMC kernels in the long layout (X's last column the output index),
# entry by entry over the pairs ((x, p), (x', p')), and of the isotopic grid they are tested on.
def coregion_matrix(W, kappa):
    """B = W W^T + diag(kappa), (P, P)."""
    W = np.asarray(W, float)
    return W @ W.T + np.diag(np.asarray(kappa, float))


def icm_gram(X1, X2, W, kappa, base):
    """K[i, j] = B[p_i, p_j] base(x_i, x_j) by explicit loops; ``base(a, b)`` a float of two input
    rows (without the output column)."""
    B = coregion_matrix(W, kappa)
    K = np.empty((len(X1), len(X2)))
    for i, a in enumerate(X1):
        for j, b in enumerate(X2):
            K[i, j] = B[int(a[-1]), int(b[-1])] * base(a[:-1], b[:-1])
    return K


def lmc_gram(X1, X2, parts):
    """sum_q of :func:`icm_gram` over ``parts``, a list of (W_q, kappa_q, base_q)."""
    return sum(icm_gram(X1, X2, W, kappa, base) for W, kappa, base in parts)


def stationary_point(lengthscale, variance, kind):
    """``base(a, b)`` of :func:`kernel` at two input rows."""
    return lambda a, b: float(kernel(np.atleast_2d(a), np.atleast_2d(b), lengthscale, variance, kind)[0, 0])


def isotopic_grid(x, P):
    """The long layout of every input row of x (N, D) at every output, output-major: (N P, D + 1)."""
    x = np.asarray(x, float)
    return np.column_stack([np.tile(x, (P, 1)), np.repeat(np.arange(P), len(x)).astype(float)])


# --------------------------------------------------------------------------- robust-max
# gpdsl.likelihoods.categorical's NumPy form of GPflow's RobustMax.prob_is_largest, as it was before
# the jitted kernel (gpdsl._jit.robustmax) replaced it: (n, K, nodes) arrays, one formula a line.
ROBUSTMAX_SQUASH = 1e-6


def robustmax_largest(codes, mean, var, rule, need_grad=False):
    """P_n = sum_q w_q prod_{j != y} C(z_njq), z_njq = (m_y + s_y x_q - m_j) / s_j,
    C(z) = Phi(z) (1 - 2 SQUASH) + SQUASH, s = sqrt(max(var, 1e-10)); with ``need_grad``
    T_njq = w_q (prod_q / C_njq) C'(z_njq) / s_j (j != y), dP/dm_j = -sum_q T_njq,
    dP/dm_y = sum_jq T_njq, dP/ds_j = -sum_q T_njq z_njq, dP/ds_y = sum_jq T_njq x_q,
    dP/dvar = dP/ds / (2 s), 0 at and below the clip.  ``(P,)`` or ``(P, dP/dmean, dP/dvar)``."""
    nodes, weights = rule
    rows = np.arange(codes.size)
    s = np.sqrt(np.maximum(var, 1e-10))
    var_y = var[rows, codes]
    s_y = np.sqrt(np.maximum(var_y, 1e-10))
    f = mean[rows, codes][:, None] + s_y[:, None] * nodes
    z = (f[:, None, :] - mean[:, :, None]) / s[:, :, None]
    C = special.ndtr(z) * (1.0 - 2.0 * ROBUSTMAX_SQUASH) + ROBUSTMAX_SQUASH
    C[rows, codes] = 1.0
    prod = np.prod(C, axis=1)
    P = prod @ weights
    if not need_grad:
        return (P,)
    T = (weights * prod)[:, None, :] / C * ((1.0 - 2.0 * ROBUSTMAX_SQUASH) * np.exp(-0.5 * z * z)
                                           / np.sqrt(2.0 * np.pi))
    T /= s[:, :, None]
    T[rows, codes] = 0.0
    per_class = T.sum(axis=2)
    d_mean = -per_class
    d_mean[rows, codes] = per_class.sum(axis=1)
    d_sd = -np.einsum("nkq,nkq->nk", T, z)
    d_var = np.where(var > 1e-10, d_sd / (2.0 * s), 0.0)
    d_var[rows, codes] = np.where(var_y > 1e-10, (T.sum(axis=1) @ nodes) / (2.0 * s_y), 0.0)
    return P, d_mean, d_var


def grid_tilted_moments(log_lik, mu, var, nodes=4001, reach=20.0):
    """(log Z, mean, variance) of the tilted density exp(log_lik(f)) N(f | mu, var) / Z by the
    trapezoid rule on mu + sd [-reach, reach] (``nodes`` points, ``log_lik`` vectorised): the
    integrands are analytic and decay as Gaussians, where the rule converges geometrically (to
    rounding at a step of sd / 100)."""
    sd = math.sqrt(var)
    t = np.linspace(-reach, reach, nodes)
    f = mu + sd * t
    log_g = log_lik(f) - 0.5 * t * t
    ref = np.max(log_g)
    g = np.exp(log_g - ref)
    mass = np.sum(g)
    mean = np.sum(f * g) / mass
    variance = np.sum((f - mean) ** 2 * g) / mass
    return ref + math.log(mass * (t[1] - t[0])) - 0.5 * math.log(2.0 * math.pi), mean, variance


def dense_ep(K, tilted, sweeps=500, tol=1e-12):
    """Sequential dense EP on the prior N(0, K) in plain NumPy (Rasmussen & Williams Algorithm 3.5,
    the posterior recomputed from the sites at every site by :func:`dense_ep_cavities`), site i's
    tilted (log Z, mean, variance) at the cavity N(m, v) from ``tilted(i, m, v)``; every site
    precision must come out positive (log-concave likelihoods).  Returns (tau, nu, evidence) with
    the evidence log N(mu~ | 0, K + S~^-1) + sum_i log Z~_i, log Z~_i = log Z_i
    + log N(m_i | mu~_i, v_i + 1/tau_i) (R&W eq. 3.65 and above)."""
    n = K.shape[0]
    tau, nu = np.zeros(n), np.zeros(n)
    for _ in range(sweeps):
        old = np.concatenate([tau, nu])
        for i in range(n):
            _, _, Sigma, mu = dense_ep_cavities(K, tau, nu)
            t_cav, n_cav = 1.0 / Sigma[i, i] - tau[i], mu[i] / Sigma[i, i] - nu[i]
            _, mean, var = tilted(i, n_cav / t_cav, 1.0 / t_cav)
            tau[i] = 1.0 / var - t_cav
            nu[i] = mean / var - n_cav
        if np.max(np.abs(np.concatenate([tau, nu]) - old)) < tol:
            break
    assert np.all(tau > 0.0), "dense_ep: a site precision is not positive"
    m_cav, v_cav, _, _ = dense_ep_cavities(K, tau, nu)
    mu_t, v_t = nu / tau, 1.0 / tau
    log_z = np.array([tilted(i, m_cav[i], v_cav[i])[0] for i in range(n)])
    log_z_tilde = log_z + 0.5 * np.log(2 * np.pi * (v_cav + v_t)) + 0.5 * (m_cav - mu_t) ** 2 / (v_cav + v_t)
    lml = stats.multivariate_normal(mean=np.zeros(n), cov=K + np.diag(v_t)).logpdf(mu_t)
    return tau, nu, float(lml + np.sum(log_z_tilde))
