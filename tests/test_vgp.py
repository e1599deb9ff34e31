"""The Opper-Archambeau VGP (gpdsl.methods.vgp) against independent computations: central
differences of every gradient, whitened SVGP with Z = X at the same q(f), the exact GP for a
Gaussian likelihood, and optima found by L-BFGS-B."""
import numpy as np
import pytest
from scipy import optimize

import gpdsl as gd
from gpdsl.components import bind
from gpdsl.methods import exact, svgp, vgp

from naive import bound_pair, central_difference
from variational_cases import KERNELS, LIKELIHOODS, Counting, predict_f

SE = gd.kernels.SquaredExponential


def _problem(seed, n=15, d=2, binary=False):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(n)
    q = {"variational.alpha": rng.standard_normal(n), "variational.lambda": rng.uniform(0.3, 2.0, n)}
    return X, (np.where(y > 0, 1.0, -1.0) if binary else y), q


@pytest.mark.parametrize("jitter", [0.0, 1e-3])
@pytest.mark.parametrize("lik", list(LIKELIHOODS))
@pytest.mark.parametrize("kern", list(KERNELS))
def test_gradients_match_central_differences(kern, lik, jitter):
    kernel, kernel_values = KERNELS[kern]
    likelihood, lik_values, binary = LIKELIHOODS[lik]
    X, y, q = _problem(1, binary=binary)
    values = {**kernel_values, **lik_values, **q}
    ev = vgp.evaluate(*bound_pair(kernel, likelihood, values), values, X, y, jitter=jitter)
    assert set(ev.grads) == set(values) and ev.dZ is None

    def objective(vals):
        return vgp.evaluate(*bound_pair(kernel, likelihood, vals), vals, X, y, jitter=jitter, need_grad=False).log_evidence

    for name, value in values.items():
        fd = central_difference(lambda v: objective({**values, name: v}), value)
        np.testing.assert_allclose(ev.grads[name], fd, rtol=1e-6, atol=1e-7, err_msg=name)


def _svgp_at_the_same_q(kernel, values, X, q):
    """Whitened SVGP parameters with Z = X, K = L L^T, describing q(f) = N(K alpha, Sigma):
    f = L v, so m = L^-1 K alpha = L^T alpha and S = L^-1 Sigma L^-T (dense, independent)."""
    K = bind(kernel, values, "kernel").gram(X, X)
    L = np.linalg.cholesky(K)
    lam2 = q["variational.lambda"] ** 2
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(lam2))
    S = np.linalg.solve(L, np.linalg.solve(L, Sigma).T)
    return {"variational.q_mu": L.T @ q["variational.alpha"],
            "variational.q_sqrt": svgp.pack_lower(np.linalg.cholesky(0.5 * (S + S.T)))}


@pytest.mark.parametrize("lik", ["gauss", "probit", "student-t"])
def test_bound_is_svgp_with_Z_equal_X_at_the_same_q(lik):
    """The same q(f) in both parameterisations gives the same bound (KL is invariant under
    f = L v) and the same predictions: to 1e-9 on a well-conditioned K."""
    kernel, kernel_values = KERNELS["se-ard"]
    likelihood, lik_values, binary = LIKELIHOODS[lik]
    X, y, q = _problem(2, binary=binary)
    values = {**kernel_values, **lik_values}
    ev = vgp.evaluate(*bound_pair(kernel, likelihood, {**values, **q}), {**values, **q}, X, y, jitter=0.0, need_state=True)
    sv = svgp.evaluate(*bound_pair(kernel, likelihood, {**values, **_svgp_at_the_same_q(kernel, values, X, q)}), {**values, **_svgp_at_the_same_q(kernel, values, X, q)}, X, y, X,
                       jitter=0.0, need_state=True)
    assert ev.log_evidence == pytest.approx(sv.log_evidence, rel=1e-9)
    Xs = np.random.default_rng(3).uniform(-2, 2, size=(6, 2))
    for a, b in zip(predict_f(kernel, values, ev.state, Xs), predict_f(kernel, values, sv.state, Xs)):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
    K = bind(kernel, values, "kernel").gram(X, X)
    np.testing.assert_allclose(ev.state.q_mean, K @ q["variational.alpha"], rtol=1e-12)


def test_state_predicts_the_opper_archambeau_posterior():
    """f_* mean k_*^T alpha and variance k_** - k_*^T (K + Lam^-2)^-1 k_* (dense), and the
    pseudo-regression (lambda^2, lambda^2 K alpha + alpha) has q(f) as its exact posterior."""
    kernel, kernel_values = KERNELS["m52"]
    likelihood, lik_values, _ = LIKELIHOODS["logit"]
    X, y, q = _problem(4, binary=True)
    values = {**kernel_values, **lik_values, **q}
    ev = vgp.evaluate(*bound_pair(kernel, likelihood, values), values, X, y, need_grad=False, need_state=True)
    assert ev.jitter == 0.0 and ev.grads == {} and ev.warm is None
    alpha, lam = q["variational.alpha"], q["variational.lambda"]
    K = bind(kernel, values, "kernel").gram(X, X)
    Xs = np.random.default_rng(5).uniform(-2, 2, size=(6, 2))
    Ks = bind(kernel, values, "kernel").gram(X, Xs)
    mean, var = predict_f(kernel, values, ev.state, Xs)
    np.testing.assert_allclose(mean, Ks.T @ alpha, rtol=1e-10)
    np.testing.assert_allclose(var, 0.7 - np.einsum("ij,ij->j", Ks, np.linalg.solve(K + np.diag(lam ** -2), Ks)),
                               rtol=1e-9)
    np.testing.assert_allclose(ev.state.q_cov, np.linalg.inv(np.linalg.inv(K) + np.diag(lam ** 2)), rtol=1e-8,
                               atol=1e-12)
    w, r = ev.pseudo_data
    np.testing.assert_allclose(w, lam ** 2, rtol=1e-15)
    # Exact regression on (noise 1/w, targets r/w): posterior mean K (K + W^-1)^-1 r/w = K alpha.
    np.testing.assert_allclose(K @ np.linalg.solve(K + np.diag(1.0 / w), r / w), K @ alpha, rtol=1e-9, atol=1e-12)


def test_gaussian_closed_form_optimum_is_the_exact_marginal_likelihood():
    """Gaussian noise s2: alpha = (K + s2 I)^-1 y, lambda^2 = 1/s2 make q(f) the exact posterior;
    the bound is then log p(y) (to 1e-10), its gradient in q vanishes, its hyperparameter
    gradients are the exact GP's (envelope theorem), its state predicts as the exact GP's."""
    kernel, kernel_values = KERNELS["se-ard"]
    X, y, _ = _problem(6, n=20)
    s2 = 0.2
    likelihood = gd.likelihoods.Gaussian(s2)
    values = {**kernel_values, "likelihood.variance": np.array(s2)}
    K = bind(kernel, values, "kernel").gram(X, X)
    q = {"variational.alpha": np.linalg.solve(K + s2 * np.eye(20), y), "variational.lambda": np.full(20, s2 ** -0.5)}
    ev = vgp.evaluate(*bound_pair(kernel, likelihood, {**values, **q}), {**values, **q}, X, y, jitter=0.0, need_state=True)
    ref = exact.evaluate(*bound_pair(kernel, likelihood, values), X, y, jitter=0.0, need_state=True)
    assert ev.log_evidence == pytest.approx(ref.log_evidence, rel=1e-10)
    for name in q:
        np.testing.assert_allclose(ev.grads[name], 0.0, atol=1e-9, err_msg=name)
    for name in values:
        np.testing.assert_allclose(ev.grads[name], ref.grads[name], rtol=1e-8, atol=1e-9, err_msg=name)
    Xs = np.random.default_rng(7).uniform(-2, 2, size=(6, 2))
    for a, b in zip(predict_f(kernel, values, ev.state, Xs), predict_f(kernel, values, ref.state, Xs)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ev.pseudo_data[0], 1.0 / s2, rtol=1e-14)
    np.testing.assert_allclose(ev.pseudo_data[1], y / s2, rtol=1e-10)


def _maximise(fun_grad, x0):
    res = optimize.minimize(lambda x: tuple(-v for v in fun_grad(x)), x0, jac=True, method="L-BFGS-B",
                            options={"maxiter": 20000, "maxfun": 40000, "ftol": 1e-13, "gtol": 1e-9})
    return -res.fun, res.x


def _vgp_optimum(kernel, likelihood, values, X, y):
    """L-BFGS-B over (alpha, log lambda) from the initial values."""
    n = X.shape[0]

    def fun_grad(x):
        q = {"variational.alpha": x[:n], "variational.lambda": np.exp(x[n:])}
        ev = vgp.evaluate(*bound_pair(kernel, likelihood, {**values, **q}), {**values, **q}, X, y, jitter=0.0)
        d_log_lambda = ev.grads["variational.lambda"] * q["variational.lambda"]
        return ev.log_evidence, np.concatenate([ev.grads["variational.alpha"], d_log_lambda])

    start = vgp.initial_values(n)
    return _maximise(fun_grad, np.concatenate([start["variational.alpha"], np.log(start["variational.lambda"])]))


def _svgp_optimum(kernel, likelihood, values, X, y):
    """L-BFGS-B over (q_mu, packed q_sqrt) with Z = X, from GPflow's whitened start."""
    n = X.shape[0]

    def fun_grad(x):
        q = {"variational.q_mu": x[:n], "variational.q_sqrt": x[n:]}
        ev = svgp.evaluate(*bound_pair(kernel, likelihood, {**values, **q}), {**values, **q}, X, y, X, jitter=0.0)
        return ev.log_evidence, np.concatenate([ev.grads["variational.q_mu"], ev.grads["variational.q_sqrt"]])

    start = svgp.initial_values(n)
    return _maximise(fun_grad, np.concatenate([start["variational.q_mu"], start["variational.q_sqrt"]]))


def _optimum_problem():
    """16 points 0.4 apart and a length-scale of 0.5 below: cond(K) ~ 600.  (With 0.8, cond ~ 3e6,
    L-BFGS-B needs ~10^4 steps in alpha, whose gradient K (g - alpha) is scaled by K.)"""
    rng = np.random.default_rng(8)
    X = np.linspace(-3, 3, 16)[:, None] + 0.05 * rng.standard_normal((16, 1))
    y = np.sin(2 * X[:, 0]) + 0.2 * rng.standard_normal(16)
    return X, y


@pytest.mark.parametrize("lik", ["gauss", "probit"])
def test_optimised_vgp_equals_optimised_svgp_with_Z_equal_X(lik):
    """VGP maximised over q by L-BFGS-B on its own gradient reaches SVGP's optimum with Z = X
    (to 1e-8; Opper & Archambeau's form holds the optimal Gaussian q(f)): for Gaussian noise
    SVGP's closed-form optimum S = (I + A A^T / s2)^-1, m = S A y / s2, which is also the exact
    log marginal likelihood; for probit SVGP's own L-BFGS-B optimum."""
    kernel = SE(0.5, 1.1)
    likelihood, lik_values, binary = LIKELIHOODS[lik]
    X, y = _optimum_problem()
    if binary:
        y = np.where(y > 0, 1.0, -1.0)
    values = {"kernel.lengthscale": np.array(0.5), "kernel.variance": np.array(1.1), **lik_values}
    best_vgp, _ = _vgp_optimum(kernel, likelihood, values, X, y)
    if lik == "gauss":
        s2 = float(lik_values["likelihood.variance"])
        A = np.linalg.cholesky(bind(kernel, values, "kernel").gram(X, X)).T        # L^-1 K = L^T with Z = X
        S = np.linalg.inv(np.eye(X.shape[0]) + A @ A.T / s2)
        q = {"variational.q_mu": S @ A @ y / s2, "variational.q_sqrt": svgp.pack_lower(np.linalg.cholesky(S))}
        best_svgp = svgp.evaluate(*bound_pair(kernel, likelihood, {**values, **q}), {**values, **q}, X, y, X, jitter=0.0,
                                  need_grad=False).log_evidence
        ref = exact.evaluate(*bound_pair(kernel, likelihood, values), X, y, jitter=0.0, need_grad=False).log_evidence
        assert best_svgp == pytest.approx(ref, rel=1e-10)
    else:
        best_svgp, _ = _svgp_optimum(kernel, likelihood, values, X, y)
    assert best_vgp == pytest.approx(best_svgp, rel=1e-8)


def test_initial_values_and_shape_checks():
    kernel, kernel_values = KERNELS["se-ard"]
    X, y, _ = _problem(9)
    start = vgp.initial_values(15)
    np.testing.assert_array_equal(start["variational.alpha"], 0.0)
    np.testing.assert_array_equal(start["variational.lambda"], 1.0)
    values = {**kernel_values, "likelihood.variance": np.array(0.2)}
    ev = vgp.evaluate(*bound_pair(kernel, gd.likelihoods.Gaussian(0.2), {**values, **start}), {**values, **start}, X, y)
    # Dense, from the definitions: q(f) = N(0, Sigma), Sigma = (K^-1 + I)^-1, Gaussian expectations
    # in closed form, KL[N(0, Sigma) || N(0, K)].
    K = bind(kernel, values, "kernel").gram(X, X)
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.eye(15))
    ell = np.sum(-0.5 * np.log(2 * np.pi * 0.2) - (y * y + np.diag(Sigma)) / (2 * 0.2))
    kl = 0.5 * (np.trace(np.linalg.solve(K, Sigma)) - 15 + np.linalg.slogdet(K)[1] - np.linalg.slogdet(Sigma)[1])
    assert ev.log_evidence == pytest.approx(ell - kl, rel=1e-10)
    with pytest.raises(ValueError, match="variational.alpha"):
        vgp.evaluate(*bound_pair(kernel, gd.likelihoods.Gaussian(0.2), {**values, **vgp.initial_values(14)}), {**values, **vgp.initial_values(14)}, X, y)


# -- natural-gradient updates of q (optimise_q) ---------------------------------------------------
def _natgrad_problem(lik, seed=3, n=30):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(n)
    kernel, kernel_values = KERNELS["se-ard"]
    likelihood, lik_values, binary = LIKELIHOODS[lik]
    return kernel, likelihood, {**kernel_values, **lik_values}, X, (np.where(y > 0, 1.0, -1.0) if binary else y)


@pytest.mark.parametrize("jitter", [0.0, 1e-6])
def test_optimise_q_gaussian_one_step_is_the_closed_form(jitter):
    """Gaussian noise s2: the first step (rho = 1) gives alpha = (K + s2 I)^-1 y and
    lambda^2 = 1/s2 from any start (with the jitter on K), whose bound is log p(y)."""
    kernel, likelihood, values, X, y = _natgrad_problem("gauss")
    n, s2 = X.shape[0], float(values["likelihood.variance"])
    K = bind(kernel, values, "kernel").gram(X, X)
    K = K + jitter * np.mean(np.diag(K)) * np.eye(n)
    alpha = np.linalg.solve(K + s2 * np.eye(n), y)
    _, _, start = _problem(12, n=n)
    for q0 in (None, start):
        q, steps, converged = vgp.optimise_q(*bound_pair(kernel, likelihood, values), values, X, y, q0, jitter=jitter, max_iter=1)
        assert steps == 1 and not converged
        np.testing.assert_allclose(q["variational.alpha"], alpha, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(q["variational.lambda"], s2 ** -0.5, rtol=1e-13)
        q, steps, converged = vgp.optimise_q(*bound_pair(kernel, likelihood, values), values, X, y, q0, jitter=jitter)
        assert converged and steps <= 2
        ev = vgp.evaluate(*bound_pair(kernel, likelihood, {**values, **q}), {**values, **q}, X, y, jitter=jitter, need_grad=False)
        if jitter == 0.0:
            ref = exact.evaluate(*bound_pair(kernel, likelihood, values), X, y, jitter=0.0, need_grad=False).log_evidence
            assert ev.log_evidence == pytest.approx(ref, rel=1e-11)


@pytest.mark.parametrize("lik", ["probit", "logit"])
def test_optimise_q_reaches_the_optimum_monotonically(lik):
    """Bernoulli: the converged q(f) has |dELBO/d(alpha, lambda)| < 1e-6 by evaluate's gradients,
    the bound after k steps never decreases in k (max_iter=k gives the run's first k steps), and
    a warm start from the optimum (q=None: the variational entries of ``values``) stops at once."""
    kernel, likelihood, values, X, y = _natgrad_problem(lik)
    counting = Counting(likelihood)
    q, steps, converged = vgp.optimise_q(*bound_pair(kernel, counting, values), values, X, y, jitter=0.0, tol=1e-12)
    assert converged and 1 < steps < 30 and counting.calls >= steps + 1
    ev = vgp.evaluate(*bound_pair(kernel, likelihood, {**values, **q}), {**values, **q}, X, y, jitter=0.0)
    for name in q:
        np.testing.assert_allclose(ev.grads[name], 0.0, atol=1e-6, err_msg=name)
    bounds = [vgp.evaluate(*bound_pair(kernel, likelihood, {**values, **vgp.initial_values(X.shape[0])}), {**values, **vgp.initial_values(X.shape[0])}, X, y, jitter=0.0,
                           need_grad=False).log_evidence]
    for k in range(1, steps + 1):
        qk, sk, _ = vgp.optimise_q(*bound_pair(kernel, likelihood, values), values, X, y, jitter=0.0, tol=1e-12, max_iter=k)
        assert sk == k
        bounds.append(vgp.evaluate(*bound_pair(kernel, likelihood, {**values, **qk}), {**values, **qk}, X, y, jitter=0.0,
                                   need_grad=False).log_evidence)
    assert np.all(np.diff(bounds) >= 0.0) and bounds[-1] == ev.log_evidence
    _, warm_steps, warm_converged = vgp.optimise_q(*bound_pair(kernel, likelihood, {**values, **q}), {**values, **q}, X, y, jitter=0.0, tol=1e-12)
    assert warm_converged and warm_steps <= 1


@pytest.mark.parametrize("lik", ["probit", "logit"])
def test_optimise_q_agrees_with_svgp_with_Z_equal_X(lik):
    """The natural-gradient optima of VGP and of whitened SVGP with Z = X are the same q(f): the
    same bound (to 1e-10) and, mapped to SVGP's parameters (m = L^T alpha, S = L^-1 Sigma L^-T),
    the same q(v) (to 1e-6)."""
    kernel = SE(0.5, 1.1)
    likelihood, lik_values, _ = LIKELIHOODS[lik]
    X, y = _optimum_problem()
    y = np.where(y > 0, 1.0, -1.0)
    values = {"kernel.lengthscale": np.array(0.5), "kernel.variance": np.array(1.1), **lik_values}
    q, _, converged = vgp.optimise_q(*bound_pair(kernel, likelihood, values), values, X, y, jitter=0.0, tol=1e-12)
    qs, _, converged_s = svgp.optimise_q(*bound_pair(kernel, likelihood, values), values, X, y, X, jitter=0.0, tol=1e-12)
    assert converged and converged_s
    bound = vgp.evaluate(*bound_pair(kernel, likelihood, {**values, **q}), {**values, **q}, X, y, jitter=0.0, need_grad=False).log_evidence
    bound_s = svgp.elbo_terms(*bound_pair(kernel, likelihood, {**values, **qs}), {**values, **qs}, X, y, X, jitter=0.0).elbo
    assert bound == pytest.approx(bound_s, rel=1e-10)
    mapped = _svgp_at_the_same_q(kernel, values, X, q)
    np.testing.assert_allclose(mapped["variational.q_mu"], qs["variational.q_mu"], rtol=1e-6, atol=1e-7)
    n = X.shape[0]
    R, Rs = svgp.unpack_lower(mapped["variational.q_sqrt"], n), svgp.unpack_lower(qs["variational.q_sqrt"], n)
    np.testing.assert_allclose(R @ R.T, Rs @ Rs.T, rtol=1e-6, atol=1e-8)


def test_optimise_q_clips_negative_site_precisions():
    """Student-t with outliers: the sites that would have a negative precision stay at the
    floor (lambda > 0), the bound rises monotonically from the start, and it ends at or below
    SVGP's with Z = X, which does not clip."""
    kernel, likelihood, values, X, y = _natgrad_problem("student-t")
    y = y.copy()
    y[:3] += 6.0
    start = vgp.evaluate(*bound_pair(kernel, likelihood, {**values, **vgp.initial_values(X.shape[0])}), {**values, **vgp.initial_values(X.shape[0])}, X, y, jitter=0.0,
                         need_grad=False).log_evidence
    q, steps, converged = vgp.optimise_q(*bound_pair(kernel, likelihood, values), values, X, y, jitter=0.0, tol=1e-10)
    lam = q["variational.lambda"]
    floor = np.sqrt(vgp.MIN_SITE_PRECISION / np.mean(np.diag(bind(kernel, values, "kernel").gram(X, X))))
    # At the floor to the rounding of an extrapolated step (a weighted sum of floored iterates whose
    # weights sum to 1: measured 4e-8 relative; the plain steps' rho = 1 put it there exactly).
    assert converged and np.all(lam > 0) and np.any(np.isclose(lam, floor, rtol=1e-6, atol=0.0))
    bound = vgp.evaluate(*bound_pair(kernel, likelihood, {**values, **q}), {**values, **q}, X, y, jitter=0.0, need_grad=False).log_evidence
    qs, _, _ = svgp.optimise_q(*bound_pair(kernel, likelihood, values), values, X, y, X, jitter=0.0, tol=1e-10)
    assert start < bound <= svgp.elbo_terms(*bound_pair(kernel, likelihood, {**values, **qs}), {**values, **qs}, X, y, X, jitter=0.0).elbo + 1e-9


def test_an_unconverged_warm_start_below_the_cold_start_is_redone_cold():
    """A q carried from another point (here one far from any optimum) whose capped steps end
    unconverged below the cold start's bound is replaced by the cold start's run: the result is
    the cold evaluation's bit for bit; a warm start from a good q is kept (fewer steps, the same
    optimum within the steps' tolerance)."""
    from gpdsl.methods.common import VariationalState

    rng = np.random.default_rng(3)
    X = rng.uniform(-1.0, 1.0, (20, 1))
    y = np.where(np.sin(3.0 * X[:, 0]) + 0.3 * rng.standard_normal(20) > 0, 1.0, -1.0)
    kernel, likelihood = gd.kernels.SquaredExponential(0.5, 1.5).bind(), gd.likelihoods.Bernoulli("probit").bind()
    inference = gd.inference.VGP(q_max_iter=1)
    values = {}

    def run(warm):
        return inference.evaluate(kernel, likelihood, values, X, y, None, need_grad=True, need_state=False, warm=warm)

    cold = run(None)
    far = VariationalState({"variational.alpha": np.full(20, 40.0), "variational.lambda": np.full(20, 1e-3)},
                           sweeps=3, converged=False)
    redone = run(far)
    assert redone.log_evidence == cold.log_evidence
    for name in cold.warm.q:
        np.testing.assert_array_equal(redone.warm.q[name], cold.warm.q[name])
    assert redone.warm.sweeps > cold.warm.sweeps            # both runs counted
    good = VariationalState(run(None).warm.q, sweeps=3, converged=True)
    kept = run(good)
    assert kept.warm.sweeps == 1 and kept.log_evidence >= cold.log_evidence - 1e-9
