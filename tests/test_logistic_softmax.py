"""The logistic-softmax augmentation (Galy-Fajou et al. 2020; gpdsl.methods.logistic_softmax)
against independent computations: the bound term by term by quadrature and summation over the
augmentation variables, the exact log marginal likelihood by tensor Gauss-Hermite quadrature,
finite differences, the monotone coordinate ascent and the stochastic method's fixed point; with one
kernel per class (``gd.kernels.Separate``) the same checks of the collapsed method, and K equal
parts against the shared kernel."""
import math

import numpy as np
import pytest
from scipy import integrate, special, stats

import gpdsl as gd
from gpdsl._jit.logistic_softmax import ls_expectations, ls_local_terms, ls_local_update, trigamma
from gpdsl.methods import logistic_softmax as ls
from gpdsl.methods import svgp
from naive import bound_pair

SE = gd.kernels.SquaredExponential(1.0, 1.0)
LIK = gd.likelihoods.Categorical(3, "logistic_softmax")


def _values(lengthscale=1.0, variance=2.0):
    return {"kernel.lengthscale": np.asarray(lengthscale, float), "kernel.variance": np.asarray(variance, float)}


def _problem(seed=0, n=60, m=8, d=2, K=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    F = np.stack([np.sin(2 * X[:, 0]), X[:, 1], -X[:, 0]], 1)[:, :K]
    y = np.argmax(F + 0.3 * rng.standard_normal((n, K)), 1).astype(float)
    Z = X[:m] + 0.05
    return X, y, Z


def _evaluate(values, X, y, Z, warm=None, lik=LIK, kernel=SE, **options):
    spec = gd.inference.PolyaGamma(**{"tol": 1e-12, "max_iter": 5000, "jitter": 0.0, **options})
    return ls.evaluate(*bound_pair(kernel, lik, values), X, y, Z, spec=spec, warm=warm, need_grad=True,
                       need_state=True)


# -- (a) the bound against brute-force quadrature ---------------------------------------------------
def _pg_mean(b, c, terms=200_000):
    """E[omega] under PG(b, c) from its definition as the infinite sum of gamma variables
    (Polson, Scott & Windle 2013): omega = 1/(2 pi^2) sum_j g_j / ((j - 1/2)^2 + c^2 / (4 pi^2)),
    g_j ~ Gamma(b, 1); the tail of the series past ``terms`` by its integral."""
    d = c / (2.0 * np.pi)
    j = np.arange(1, terms + 1)
    head = np.sum(1.0 / ((j - 0.5) ** 2 + d * d))
    tail = (np.pi / 2 - np.arctan(terms / d)) / d if d > 0 else 1.0 / terms
    return b * (head + tail) / (2.0 * np.pi ** 2)


def _brute_force_bound(X, y, Z, kernel, local, state, K):
    """The uncollapsed ELBO at q(u_k) = N(q_mean[:, k], q_cov[k]) and the given locals, each term
    by numerical integration or summation: E over lambda by adaptive quadrature against the
    Gamma density, over n by summing the Poisson weights, E[omega | n] by the defining series,
    the Gamma entropy by quadrature, the Gaussian KL densely.  Independent of the module's closed
    forms (digamma, tanh(c/2)/(2c), the cancellation of E[log n!], the collapsed algebra).
    ``kernel`` is bound; a stack of grams (one kernel per class) gives class k its own prior."""
    def per_class(a):
        return a if a.ndim == 3 else np.broadcast_to(a, (K,) + a.shape)

    Kzz, Kzx, Kxx = (per_class(kernel.gram(A, B)) for A, B in ((Z, Z), (Z, X), (X, X)))
    Kzz_inv = np.linalg.inv(Kzz)
    ns = np.arange(0, 80)
    elbo = 0.0
    for i in range(X.shape[0]):
        a_i, b_i = local.alpha[i], local.beta[i]
        gamma_pdf = stats.gamma(a_i, scale=1.0 / b_i).pdf
        E_log_lam = integrate.quad(lambda t: np.log(t) * gamma_pdf(t), 0, np.inf, limit=200)[0]
        E_lam = integrate.quad(lambda t: t * gamma_pdf(t), 0, np.inf, limit=200)[0]
        entropy = integrate.quad(lambda t: -special.xlogy(gamma_pdf(t), gamma_pdf(t)), 0, np.inf, limit=200)[0]
        elbo += entropy                         # flat prior on lambda: log p(lambda) = 0
        for k in range(K):
            a = Kzx[k, :, i] @ Kzz_inv[k]
            mean = a @ state.q_mean[:, k]
            var = Kxx[k, i, i] - a @ Kzx[k, :, i] + a @ state.q_cov[k] @ a
            second = mean * mean + var
            y_ik = 1.0 if y[i] == k else 0.0
            g, c = local.gamma[i, k], local.c[i, k]
            weights = stats.poisson(g).pmf(ns)
            term = 0.0
            for n, w in zip(ns, weights):
                if w == 0.0:
                    continue
                b = y_ik + n
                E_omega = _pg_mean(b, c) if b > 0 else 0.0
                log_po_lam = n * E_log_lam - E_lam - math.lgamma(n + 1)       # E_lambda log Po(n | lambda)
                log_q_n = stats.poisson(g).logpmf(n)
                # log p(y, n, omega | f, lambda) - log q(n) - log q(omega | n) in expectation: the PG
                # densities' ratio is the exponential tilt cosh^b(c/2) exp(-c^2 omega / 2).
                term += w * (log_po_lam - log_q_n - b * math.log(2.0) + 0.5 * (y_ik - n) * mean
                             - 0.5 * E_omega * second - b * math.log(math.cosh(c / 2)) + 0.5 * c * c * E_omega)
            elbo += term
    for k in range(K):
        S, mu = state.q_cov[k], state.q_mean[:, k]
        kl = 0.5 * (np.trace(Kzz_inv[k] @ S) + mu @ Kzz_inv[k] @ mu - Z.shape[0] + np.linalg.slogdet(Kzz[k])[1]
                    - np.linalg.slogdet(S)[1])
        elbo -= kl
    return elbo


def test_bound_against_quadrature_at_convergence_and_at_arbitrary_locals():
    """N = 4, K = 3, M = N: the collapsed bound at convergence, and at arbitrary locals (one
    evaluation with max_iter=1 stays at its warm start), equals the ELBO assembled by quadrature
    and summation over lambda, n and omega at the collapsed q*(u) to 1e-7."""
    X, y, _ = _problem(1, n=4)
    y = np.array([0.0, 1.0, 2.0, 1.0])
    Z = X.copy()
    values = _values(0.8, 1.5)
    ev = _evaluate(values, X, y, Z)
    assert ev.warm.converged
    kernel = bound_pair(SE, LIK, values)[0]
    assert _brute_force_bound(X, y, Z, kernel, ev.warm, ev.state, 3) == pytest.approx(ev.log_evidence, abs=1e-7)

    rng = np.random.default_rng(5)
    c = rng.uniform(0.2, 3.0, (4, 3))
    gamma = rng.uniform(0.05, 1.5, (4, 3))
    alpha = rng.uniform(1.2, 4.0, 4)                   # not 1 + sum gamma: the general Lambda_i
    warm = ls.LogisticSoftmaxState(c, gamma, alpha, np.full(4, 3.0), c, gamma, alpha)
    at = _evaluate(values, X, y, Z, warm=warm, max_iter=1)
    assert np.array_equal(at.warm.c, c) and np.array_equal(at.warm.gamma, gamma)
    assert at.log_evidence < ev.log_evidence
    assert _brute_force_bound(X, y, Z, kernel, at.warm, at.state, 3) == pytest.approx(at.log_evidence, abs=1e-7)


# -- (b) a lower bound on the exact log marginal likelihood ----------------------------------------
def _exact_log_marginal(X, y, values, K, nodes):
    """log p(y) = log E_prior[prod_i p(y_i | f_i)] for N = 2 by tensor Gauss-Hermite quadrature in
    the K N = 6 whitened coordinates (f_k = L z_k, z_k ~ N(0, I_2))."""
    kernel = bound_pair(SE, LIK, values)[0]
    L = np.linalg.cholesky(kernel.gram(X, X))
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    grid = np.stack(np.meshgrid(z, z, indexing="ij"), -1).reshape(-1, 2)        # (nodes^2, 2): one class's z
    gw = np.outer(w, w).ravel()
    f = grid @ L.T                                                               # (nodes^2, N = 2)
    total = 0.0
    # classes 0 and 1 on a grid, class 2 looped; p(y | f) from the likelihood's own log_density
    F01 = np.stack(np.meshgrid(np.arange(len(gw)), np.arange(len(gw)), indexing="ij"), -1).reshape(-1, 2)
    w01 = gw[F01[:, 0]] * gw[F01[:, 1]]
    for j in range(len(gw)):
        F = np.stack([f[F01[:, 0]], f[F01[:, 1]], np.broadcast_to(f[j], (len(F01), 2))], -1)   # (P, N, K)
        loglik = sum(LIK.log_density(np.full(len(F), y[i]), F[:, i, :]) for i in range(2))
        total += gw[j] * np.sum(w01 * np.exp(loglik))
    return math.log(total)


def test_bound_is_below_the_exact_log_marginal_likelihood():
    """N = 2, K = 3, M = N: the converged bound is below log p(y) of the logistic-softmax model
    (6-D Gauss-Hermite quadrature: 12 and 14 nodes per dimension agree to 3e-7, 14 and 16 to 7e-8),
    and not far below it: log p(y) = -2.24400, the bound -3.08136, a gap of 0.42 nats per point
    (the mean-field gap of q(lambda) q(n); at f = 0 it is 0.31 nats per point in closed form)."""
    X = np.array([[0.0, 0.3], [0.9, -0.4]])
    y = np.array([2.0, 0.0])
    values = _values(1.0, 1.5)
    exact = _exact_log_marginal(X, y, values, 3, 14)
    assert exact == pytest.approx(_exact_log_marginal(X, y, values, 3, 12), abs=1e-6)
    bound = _evaluate(values, X, y, X.copy()).log_evidence
    assert bound < exact
    assert exact - bound < 1.0


# -- (c) gradients ----------------------------------------------------------------------------------
def test_gradients_match_finite_differences_of_the_converged_bound():
    """d L* / d (lengthscale, variance, Z) at the fixed point (the envelope theorem) against
    central differences of the bound re-converged at each perturbed point: rtol 1e-6."""
    X, y, Z = _problem(0)
    values = _values(1.0, 2.0)
    ev = _evaluate(values, X, y, Z)
    h = 1e-5
    for name in values:
        up, down = dict(values), dict(values)
        up[name] = values[name] + h
        down[name] = values[name] - h
        fd = (_evaluate(up, X, y, Z).log_evidence - _evaluate(down, X, y, Z).log_evidence) / (2 * h)
        assert ev.grads[name] == pytest.approx(fd, rel=1e-6, abs=1e-7), name
    for i, j in [(0, 0), (3, 1), (7, 0)]:
        Zu, Zd = Z.copy(), Z.copy()
        Zu[i, j] += h
        Zd[i, j] -= h
        fd = (_evaluate(values, X, y, Zu).log_evidence - _evaluate(values, X, y, Zd).log_evidence) / (2 * h)
        assert ev.dZ[i, j] == pytest.approx(fd, rel=1e-6, abs=1e-7)


# -- (d) monotone coordinate ascent -----------------------------------------------------------------
@pytest.mark.parametrize("acceleration", [False, True])
def test_coordinate_ascent_never_decreases_the_bound(acceleration):
    """Every accepted point raises the bound (to rounding, 1e-10 relative), plain and with
    safeguarded Anderson steps, and both reach the same fixed point (1e-9)."""
    X, y, Z = _problem(2, n=80, m=10)
    ev = _evaluate(_values(0.7, 4.0), X, y, Z, acceleration=acceleration, tol=1e-10)
    history = np.array(ev.warm.bound_history)
    assert ev.warm.converged and len(history) > 5
    assert np.all(np.diff(history) >= -1e-10 * abs(history[-1]))
    other = _evaluate(_values(0.7, 4.0), X, y, Z, acceleration=not acceleration, tol=1e-10)
    assert other.log_evidence == pytest.approx(ev.log_evidence, abs=1e-9)
    # The locals satisfy their closed-form updates at the fixed point, alpha = 1 + sum gamma.
    assert np.allclose(ev.warm.alpha, 1.0 + ev.warm.gamma.sum(axis=1), rtol=1e-12)


def test_warm_start_resumes_at_the_fixed_point():
    X, y, Z = _problem(3)
    ev = _evaluate(_values(), X, y, Z)
    again = _evaluate(_values(), X, y, Z, warm=ev.warm)
    assert again.warm.sweeps == 2
    assert again.log_evidence == pytest.approx(ev.log_evidence, abs=1e-10)



def test_bound_curvature_in_c_behind_the_scaled_convergence_test():
    """The convergence test divides a change of c_ik by sqrt(max(c_ik, 1)) because the bound's
    second derivative in c_ik at its optimum c* = sqrt(mean^2 + var) is -(y + gamma) / (2 c*) for
    large c* and at most 0.11 (y + gamma) in size (module docstring): checked by central
    differences of the terms of the bound in c (ls_local_terms' (B) and (A)'s -theta (mean^2 +
    var) / 2) at one row's locals, against the formula at c* = 30 and 200 (relative error of the
    asymptote ~1/c*, the differences' ~1e-6) and the bound at c* from 0.1 to 30."""
    from gpdsl._jit.logistic_softmax import ls_local_terms
    codes, alpha, beta = np.array([0.0]), np.array([1.7]), np.array([2.0])
    gamma = 0.4

    def bound(c, second_moment):
        c_row, gamma_row = np.array([[c, c]]), np.array([[gamma, gamma]])
        theta, _, local = ls_local_terms(codes, c_row, gamma_row, alpha, beta, np.zeros((1, 1)))
        return local - 0.5 * theta.sum() * second_moment

    weights = 1.0 + 2.0 * gamma              # sum of y + gamma over the label and another class
    for c_star in (0.1, 0.5, 1.0, 3.0, 10.0, 30.0, 200.0):
        second_moment, h = c_star ** 2, 1e-3 * c_star
        second = (bound(c_star + h, second_moment) - 2.0 * bound(c_star, second_moment)
                  + bound(c_star - h, second_moment)) / h ** 2
        first = (bound(c_star + h, second_moment) - bound(c_star - h, second_moment)) / (2.0 * h)
        assert abs(first) < 1e-5 * weights                      # c* is the optimum
        assert -0.11 * weights <= second < 0.0
        if c_star >= 30.0:
            assert second == pytest.approx(-weights / (2.0 * c_star), rel=2.0 / c_star)


def test_fit_runs_the_class_loop_to_class_fit_tol_and_the_posterior_to_tol(monkeypatch):
    """Within a fit the K-class loop stops at max(class_fit_tol, class_tol or tol) (within_fit),
    the posterior's at tol; at the default class_fit_tol = 1e-3 the fit ends at the optimum that
    the fit with every evaluation at tol = 1e-6 reaches, in fewer sweeps."""
    PG = gd.inference.PolyaGamma
    assert PG().within_fit().class_tol == 1e-3 and PG().within_fit().tol == 1e-4
    assert PG(class_fit_tol=1e-6).within_fit().class_tol == 1e-6
    assert PG(tol=1e-2).within_fit().class_tol == 1e-2                  # never tighter than tol
    assert PG(class_tol=1e-8, class_fit_tol=1e-9).within_fit().class_tol == 1e-8
    assert PG(class_tol=1e-8).local_tolerance_for_classes == 1e-8 and PG().local_tolerance_for_classes == 1e-6
    with pytest.raises(ValueError, match="PolyaGamma: class_fit_tol must be a positive finite number, got 0"):
        PG(class_fit_tol=0)
    X, y, Z = _problem(2, n=120, m=8)
    used = []
    evaluate = ls.evaluate

    def spy(*args, spec, **kwargs):
        ev = evaluate(*args, spec=spec, **kwargs)
        used.append((spec.local_tolerance_for_classes, ev.warm.sweeps))
        return ev

    monkeypatch.setattr(ls, "evaluate", spy)
    fits = {}
    for class_fit_tol in (1e-3, 1e-6):
        used.clear()
        model = gd.Model(SE, LIK, gd.inducing.Fixed(Z), PG(class_fit_tol=class_fit_tol))
        fits[class_fit_tol] = (model.fit(X, y), list(used))
    (loose, loose_used), (tight, tight_used) = fits[1e-3], fits[1e-6]
    # The fit's evaluations at 1e-3, then those at tol: the confirmation of the optimiser's stop
    # (gpdsl.fitting: a stop is confirmed by the model's own evaluation) and the posterior's.
    first_tight = [t for t, _ in loose_used].index(1e-6)
    assert first_tight > 0 and {t for t, _ in loose_used[:first_tight]} == {1e-3}
    assert {t for t, _ in loose_used[first_tight:]} == {1e-6}
    assert {t for t, _ in tight_used} == {1e-6}
    assert loose.converged and tight.converged and loose.sites.converged
    assert sum(s for _, s in loose_used) < sum(s for _, s in tight_used)
    # The same optimum to the resolution of the stopping rules (gradient 1e-3 N = 0.12 per unit
    # log-parameter, SciPy's relative reduction): 2.6e-7 apart here, 305 sweeps against 553.
    assert loose.log_evidence == pytest.approx(tight.log_evidence, rel=1e-6)


@pytest.mark.parametrize("lengthscale, variance", [(2.0, 300.0), (1.0, 100.0)])
def test_cold_start_reaches_the_fixed_point_of_the_path_from_unit_variance(lengthscale, variance):
    """The coordinate ascent has more than one fixed point at a large kernel variance.  A cold
    evaluation (no warm state: the start a fit's fresh-start fallback, its first evaluation and a
    subsample's finish get) reaches the one that warm starts reach along the kernel variance from
    1, as a fit's evaluations do; from the prior's marginals N(0, K_ii) (the start before issue 46)
    the first case converged to -247.48 instead of -215.88 in 918 sweeps instead of 377."""
    X, y, Z = _problem(n=200, m=10, K=3)
    cold = _evaluate(_values(lengthscale, variance), X, y, Z)
    warm = None
    for v in np.geomspace(1.0, variance, 12):
        path = _evaluate(_values(lengthscale, v), X, y, Z, warm=warm)
        warm = path.warm
    assert cold.warm.converged and path.warm.converged
    # Both converged to tol 1e-12 in c and gamma: the bounds agree to rounding (~1e-13 of 200 nats).
    assert cold.log_evidence == pytest.approx(path.log_evidence, rel=1e-10)

# -- (e) the stochastic method ----------------------------------------------------------------------
@pytest.mark.parametrize("rho", [1.0, 0.5])
def test_full_batch_natural_steps_reach_the_collapsed_optimum(rho):
    """SVGP's minibatch_step on the augmentation's per-row bound (LogisticSoftmaxExpectations) with
    the whole batch (scale 1): q(u_k) converges to the collapsed q*(u_k) at
    the collapsed fixed point (means and covariances to 1e-8) and its bound to L* (1e-8); the
    gradients at that q are the collapsed ones (1e-7)."""
    X, y, Z = _problem(4)
    values = _values(1.0, 2.0)
    kernel, lik = bound_pair(SE, LIK, values)
    ev = _evaluate(values, X, y, Z)
    augmented = ls.LogisticSoftmaxExpectations(lik)
    q = svgp.initial_values(Z.shape[0], 3)
    elbos = []
    for _ in range(150):
        q, elbo, grads, dZ, _ = svgp.minibatch_step(kernel, augmented, X, y, Z, q, scale=1.0, rho=rho, jitter=0.0)
        elbos.append(elbo)
    if rho == 1.0:
        assert np.all(np.diff(elbos) >= -1e-9)          # step 1 is CAVI: monotone
    at = svgp.evaluate(kernel, augmented, q, X, y, Z, jitter=0.0, need_state=True)
    assert at.log_evidence == pytest.approx(ev.log_evidence, abs=1e-8)
    assert np.allclose(at.state.q_mean, ev.state.q_mean, atol=1e-8)
    assert np.allclose(at.state.q_cov, ev.state.q_cov, atol=1e-8)
    for name in values:
        assert at.grads[name] == pytest.approx(ev.grads[name], rel=1e-7, abs=1e-8)
    assert np.allclose(at.dZ, ev.dZ, atol=1e-7)
    moved, steps, converged = svgp.optimise_q(kernel, augmented, {}, X, y, Z, jitter=0.0, tol=1e-12, max_iter=500)
    assert converged
    assert np.allclose(moved["variational.q_mu"], at.state.weights, atol=1e-7)


def test_bound_at_q_gradients_match_finite_differences():
    """At an arbitrary q (not the optimum): the uncollapsed bound's gradient in the kernel and Z,
    with the locals at their optimum given q (envelope theorem), against central differences."""
    X, y, Z = _problem(5)
    rng = np.random.default_rng(0)
    q = svgp.initial_values(Z.shape[0], 3)
    q["variational.q_mu"] = 0.5 * rng.standard_normal(q["variational.q_mu"].shape)
    q["variational.q_sqrt"] = 0.7 * q["variational.q_sqrt"] + 0.01 * rng.standard_normal(q["variational.q_sqrt"].shape)
    values = _values(0.9, 1.7)

    def bound(v, Zv):
        kernel, lik = bound_pair(SE, LIK, v)
        return svgp.evaluate(kernel, ls.LogisticSoftmaxExpectations(lik), q, X, y, Zv, jitter=0.0,
                             need_grad=False).log_evidence

    kernel, lik = bound_pair(SE, LIK, values)
    at = svgp.evaluate(kernel, ls.LogisticSoftmaxExpectations(lik), q, X, y, Z, jitter=0.0)
    h = 1e-6
    for name in values:
        up, down = dict(values), dict(values)
        up[name] = values[name] + h
        down[name] = values[name] - h
        assert at.grads[name] == pytest.approx((bound(up, Z) - bound(down, Z)) / (2 * h), rel=1e-6)
    Zu, Zd = Z.copy(), Z.copy()
    Zu[2, 1] += h
    Zd[2, 1] -= h
    assert at.dZ[2, 1] == pytest.approx((bound(values, Zu) - bound(values, Zd)) / (2 * h), rel=1e-6)


def test_minibatch_steps_approach_the_optimum():
    """Batches of 20 of 60 rows (scale 3), Robbins-Monro natural steps min(0.5, 10 / (t + 20)),
    600 steps: q's means within 5 % of the collapsed q*(u)'s largest (measured 2.2 %) and the
    full bound at q within 0.02 nats of L* (measured 0.005)."""
    X, y, Z = _problem(6)
    values = _values(1.0, 2.0)
    kernel, lik = bound_pair(SE, LIK, values)
    ev = _evaluate(values, X, y, Z)
    rng = np.random.default_rng(1)
    augmented = ls.LogisticSoftmaxExpectations(lik)
    q = svgp.initial_values(Z.shape[0], 3)
    for step in range(600):
        rows = rng.choice(60, 20, replace=False)
        q, *_ = svgp.minibatch_step(kernel, augmented, X[rows], y[rows], Z, q, scale=3.0,
                                    rho=min(0.5, 10.0 / (step + 20)), jitter=0.0)
    at = svgp.evaluate(kernel, augmented, q, X, y, Z, jitter=0.0, need_grad=False, need_state=True)
    scale = np.max(np.abs(ev.state.q_mean))
    assert np.max(np.abs(at.state.q_mean - ev.state.q_mean)) < 0.05 * scale
    assert ev.log_evidence - 0.02 < at.log_evidence <= ev.log_evidence + 1e-9


def test_expectations_adapter_and_local_optimum():
    """The per-row bound l_i at the closed-form locals is their maximum (perturbing gamma or c
    lowers the row's ELBO contribution) and its derivatives are those of l_i itself."""
    rng = np.random.default_rng(2)
    mean, var = rng.standard_normal((5, 4)), rng.uniform(0.1, 2.0, (5, 4))
    codes = np.array([0.0, 3.0, 1.0, 2.0, 3.0])
    adapter = ls.LogisticSoftmaxExpectations(gd.likelihoods.Categorical(4, "logistic_softmax"))
    bound, d_mean, d_var, extra = adapter.variational_expectations(codes, mean, var)
    assert extra == {} and bound.shape == (5,) and d_mean.shape == (5, 4)
    h = 1e-6
    for i, k in [(0, 0), (1, 3), (4, 1)]:
        for arr, d in ((mean, d_mean), (var, d_var)):
            up, down = arr.copy(), arr.copy()
            up[i, k] += h
            down[i, k] -= h
            args_up = (up, var) if arr is mean else (mean, up)
            args_down = (down, var) if arr is mean else (mean, down)
            fd = (ls_expectations(codes, *args_up)[0][i] - ls_expectations(codes, *args_down)[0][i]) / (2 * h)
            assert d[i, k] == pytest.approx(fd, rel=1e-6, abs=1e-9)
    c, gamma, alpha = ls_local_update(codes, mean, var)
    assert np.allclose(alpha, 1.0 + gamma.sum(axis=1), rtol=1e-13)


def test_trigamma():
    x = np.array([1e-3, 0.3, 1.0, 4.5, 9.99, 10.0, 250.0])
    assert np.allclose([trigamma(v) for v in x], special.polygamma(1, x), rtol=1e-13)


def test_offset_and_bad_targets_are_errors():
    X, y, Z = _problem(0, n=10, m=3)
    spec = gd.inference.PolyaGamma()
    kernel, lik = bound_pair(SE, LIK, _values())
    with pytest.raises(ValueError, match="offsets"):
        ls.evaluate(kernel, lik, X, y, Z, spec=spec, offset=np.zeros(10))
    with pytest.raises(ValueError, match="class codes"):
        ls.evaluate(kernel, lik, X, y + 5, Z, spec=spec)


# -- (f) one kernel per class ----------------------------------------------------------------------
SEPARATE = gd.kernels.Separate((gd.kernels.SquaredExponential(1.0, 1.0), gd.kernels.Matern52(np.ones(2), 1.0),
                                gd.kernels.SquaredExponential(1.0, 1.0)))


def _separate_values():
    return {"kernel.0.lengthscale": np.array(0.8), "kernel.0.variance": np.array(1.5),
            "kernel.1.lengthscale": np.array([1.2, 0.6]), "kernel.1.variance": np.array(2.5),
            "kernel.2.lengthscale": np.array(1.4), "kernel.2.variance": np.array(0.9)}


def test_separate_bound_against_quadrature_at_convergence():
    """One kernel per class, N = 4, K = 3, M = N: the converged collapsed bound equals the ELBO
    assembled by quadrature and summation with each class's own K_uu, K_uf at the collapsed
    q*(u_k) (chol one factor per class) to 1e-7 (measured 7e-13)."""
    X, _, _ = _problem(1, n=4)
    y = np.array([0.0, 1.0, 2.0, 1.0])
    values = _separate_values()
    ev = _evaluate(values, X, y, X.copy(), kernel=SEPARATE)
    assert ev.warm.converged and ev.state.chol.shape == (3, 4, 4)
    kernel = bound_pair(SEPARATE, LIK, values)[0]
    assert _brute_force_bound(X, y, X.copy(), kernel, ev.warm, ev.state, 3) == pytest.approx(ev.log_evidence,
                                                                                             abs=1e-7)


def test_separate_gradients_match_finite_differences():
    """d L* / d (every part's hyperparameters, Z) at the fixed point against central differences
    of the re-converged bound: rtol 1e-6 (measured 3e-8)."""
    X, y, Z = _problem(0)
    values = _separate_values()
    ev = _evaluate(values, X, y, Z, kernel=SEPARATE)
    assert set(ev.grads) == set(values)
    h = 1e-5
    for name, value in values.items():
        for i in range(value.size):
            up, down = value.astype(float).ravel(), value.astype(float).ravel()
            up[i] += h
            down[i] -= h
            fd = (_evaluate(dict(values, **{name: up.reshape(value.shape)}), X, y, Z, kernel=SEPARATE).log_evidence
                  - _evaluate(dict(values, **{name: down.reshape(value.shape)}), X, y, Z,
                              kernel=SEPARATE).log_evidence) / (2 * h)
            assert np.ravel(ev.grads[name])[i] == pytest.approx(fd, rel=1e-6, abs=1e-7), (name, i)
    for i, j in [(0, 0), (3, 1), (7, 0)]:
        Zu, Zd = Z.copy(), Z.copy()
        Zu[i, j] += h
        Zd[i, j] -= h
        fd = (_evaluate(values, X, y, Zu, kernel=SEPARATE).log_evidence
              - _evaluate(values, X, y, Zd, kernel=SEPARATE).log_evidence) / (2 * h)
        assert ev.dZ[i, j] == pytest.approx(fd, rel=1e-6, abs=1e-7)


def test_separate_identical_parts_equal_the_shared_kernel():
    """Separate((SE, SE, SE)) with equal values is the shared SE: the bound, the locals, q(u_k)
    and dZ to 1e-10, and its gradients summed over the parts are the shared ones (1e-10; measured
    4e-14)."""
    X, y, Z = _problem(3)
    values = _values(0.9, 1.8)
    parts = {f"kernel.{k}.{key.split('.')[1]}": v for k in range(3) for key, v in values.items()}
    separate = gd.kernels.Separate((SE,) * 3)
    ev = _evaluate(parts, X, y, Z, kernel=separate)
    ref = _evaluate(values, X, y, Z)
    assert ev.log_evidence == pytest.approx(ref.log_evidence, abs=1e-10)
    np.testing.assert_allclose(ev.warm.c, ref.warm.c, rtol=0, atol=1e-10)
    np.testing.assert_allclose(ev.warm.gamma, ref.warm.gamma, rtol=0, atol=1e-10)
    for name in values:
        summed = sum(ev.grads[f"kernel.{k}.{name.split('.')[1]}"] for k in range(3))
        assert summed == pytest.approx(ref.grads[name], rel=0, abs=1e-10), name
    np.testing.assert_allclose(ev.dZ, ref.dZ, rtol=0, atol=1e-10)
    for k in range(3):
        np.testing.assert_allclose(ev.state.chol[k], ref.state.chol, rtol=0, atol=1e-10)
    for field in ("weights", "correction", "q_mean", "q_cov"):
        np.testing.assert_allclose(getattr(ev.state, field), getattr(ref.state, field), rtol=0, atol=1e-10,
                                   err_msg=field)



# -- (g) the mean steps of the collapsed loop (issue 46) ---------------------------------------------
@pytest.mark.parametrize("K", [3, 10, 26])
def test_alpha_solves_its_equation_up_to_the_rounding_floor(K):
    """alpha = 1 + exp(psi(alpha)) H / K to a few ulp of alpha (psi by scipy.special) for H / K from
    0 up to 1 - 1e-7, where alpha ~ K / (2 (K - H)) reaches 10^8 and Newton's steps end on the
    rounding floor (the stopping rule of _solve_alpha); the residual's own rounding is ~alpha eps.
    H = K, reached by rounding, raised ZeroDivisionError before issue 46."""
    from gpdsl._jit.logistic_softmax import _solve_alpha
    for fraction in np.concatenate([[0.0, 0.01, 0.3, 0.7], 1.0 - np.geomspace(0.1, 1e-7, 13)]):
        H = fraction * K
        alpha = _solve_alpha(H, K)
        assert alpha >= 1.0
        assert abs(alpha - 1.0 - math.exp(special.digamma(alpha)) * H / K) <= 8e-16 * alpha * 4
    assert _solve_alpha(0.0, K) == 1.0
    # h_ik < 1, yet it rounds to 1 at mean_ik = -c_ik below -37: H = K gives a finite root near
    # 1 / (2 * 1e-15) (the ratio is held below 1 by 1e-15) instead of a ZeroDivisionError.
    assert 1e14 < _solve_alpha(float(K), K) < 1e16


def _dense_row_terms(A, codes, var):
    """sum_i l_i(mean_i, var_i), sum_i a_ki dl_i / dmean_ik and the means at whitened means mu,
    with A (M, N) dense."""
    def row_terms(mu):
        mean = A.T @ mu
        bound, d_mean, _ = ls_expectations(codes, mean, var)
        return bound.sum(), A @ d_mean, mean
    return row_terms


def _locals_and_marginals(variance, sweeps=3):
    """A problem at a large kernel variance, its locals after a few plain coordinate-ascent
    sweeps, the dense A = L^-1 K_uf, the factor (L_Bk^-1, mu_k) of those locals and the marginal
    variances of the optimal q(u) there."""
    X, y, Z = _problem(4, n=120, m=10)
    kernel, _ = bound_pair(SE, LIK, _values(1.0, variance))
    warm = _evaluate(_values(1.0, variance), X, y, Z, acceleration=False, max_iter=sweeps).warm
    c, gamma, alpha = warm.c, warm.gamma, warm.alpha
    L = np.linalg.cholesky(kernel.gram(Z, Z))
    A = np.linalg.solve(L, kernel.gram(Z, X))
    residual = kernel.diag(X) - np.sum(A * A, axis=0)
    theta, kappa, _ = ls_local_terms(y, c, gamma, alpha, warm.beta, residual[:, None])
    LBi, mu, var = [], [], []
    for k in range(3):
        B = np.eye(10) + (A * theta[:, k]) @ A.T
        LBi.append(np.linalg.inv(np.linalg.cholesky(B)))
        mu.append(np.linalg.solve(B, A @ kappa[:, k]))
        var.append(residual + np.sum((LBi[-1] @ A) ** 2, axis=0))
    return A, y, np.stack(var, 1), (np.stack(LBi), np.stack(mu, 1))


def _dense_F(A, codes, var, mu):
    return ls_expectations(codes, A.T @ mu, var)[0].sum() - 0.5 * np.sum(mu * mu)


def test_mean_steps_raise_the_bound_from_the_coordinate_ascent_and_reach_its_maximum(monkeypatch):
    """_optimise_means starts at the coordinate ascent's q(u) (two steps already raise F from
    there: a start elsewhere, as L_Bk mu_k instead of L_Bk^T mu_k, left F 80,000 nats lower on
    penbased and still lower after 50 steps) and, run to a tight test, stops at the maximum of
    F(mu) = sum_i l_i(a_i^T mu, var_i) - |mu|^2 / 2 at fixed variances: its central differences
    (step 1e-5, rounding ~1e-9) vanish there to 1e-5 of their size at the start."""
    A, codes, var, factor = _locals_and_marginals(200.0)
    dense = _dense_row_terms(A, codes, var)
    asked = []

    def row_terms(mu):
        asked.append(mu)
        return dense(mu)

    start = _dense_F(A, codes, var, factor[1])
    monkeypatch.setattr(ls, "_MEAN_STEPS", 2)
    mean, evaluations = ls._optimise_means(row_terms, factor, 1e-3)
    assert np.allclose(asked[0], factor[1], rtol=1e-10, atol=1e-12 * np.max(np.abs(factor[1])))
    assert evaluations == len(asked) >= 3
    mu_two = np.linalg.lstsq(A.T, mean, rcond=None)[0]
    assert _dense_F(A, codes, var, mu_two) > start
    monkeypatch.setattr(ls, "_MEAN_STEPS", 500)
    mean, evaluations = ls._optimise_means(dense, factor, 1e-12)
    mu = np.linalg.lstsq(A.T, mean, rcond=None)[0]
    assert np.allclose(A.T @ mu, mean, atol=1e-8 * np.max(np.abs(mean)))
    assert _dense_F(A, codes, var, mu) > _dense_F(A, codes, var, mu_two)

    def central_gradient(at):
        g, h = np.empty_like(at), 1e-5
        for index in np.ndindex(at.shape):
            up, down = at.copy(), at.copy()
            up[index] += h
            down[index] -= h
            g[index] = (_dense_F(A, codes, var, up) - _dense_F(A, codes, var, down)) / (2 * h)
        return g

    assert np.max(np.abs(central_gradient(mu))) < 1e-5 * np.max(np.abs(central_gradient(factor[1])))


def test_mean_steps_cut_the_sweeps_at_a_large_kernel_variance():
    """At kernel variance 300 the coordinate ascent converges slowly (a class whose mean is far
    below 0 at a row moves by the prior's pull alone, module docstring); with the mean steps the
    loop reaches the same fixed point (both to tol 1e-10 in c and gamma: bounds equal to 1e-10)
    in a fifth of the plain loop's sweeps or fewer."""
    X, y, Z = _problem(n=200, m=10, K=3)
    plain = _evaluate(_values(2.0, 300.0), X, y, Z, acceleration=False, tol=1e-10)
    fast = _evaluate(_values(2.0, 300.0), X, y, Z, tol=1e-10)
    assert plain.warm.converged and fast.warm.converged
    assert fast.log_evidence == pytest.approx(plain.log_evidence, rel=1e-10)
    assert fast.warm.sweeps * 5 <= plain.warm.sweeps
    assert np.all(np.diff(fast.warm.bound_history) >= -1e-10 * abs(fast.log_evidence))


def test_dask_rows_take_the_same_mean_steps():
    """The mean steps' O(N K M) evaluations are map_rows passes too: a Dask X in row chunks
    reaches the in-memory fixed point (both to tol 1e-9: bounds equal to 1e-10 relative, kernel
    gradients to 1e-6 of their size; the chunks only reorder sums, ~1e-13)."""
    da = pytest.importorskip("dask.array")
    X, y, Z = _problem(5, n=90, m=8)
    here = _evaluate(_values(1.5, 30.0), X, y, Z, tol=1e-9)
    chunked = _evaluate(_values(1.5, 30.0), da.from_array(X, chunks=30), y, Z, tol=1e-9)
    assert here.warm.mean_steps > 0 and chunked.warm.mean_steps > 0
    assert chunked.log_evidence == pytest.approx(here.log_evidence, rel=1e-10)
    for name, g in here.grads.items():
        assert np.allclose(chunked.grads[name], g, rtol=1e-6, atol=1e-6 * np.max(np.abs(g)))
