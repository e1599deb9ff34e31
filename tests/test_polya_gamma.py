"""Pólya-Gamma collapsed classification (PGPR, thesis ch. 4 / Appendix C) against independent
computations: the uncollapsed PG ELBO (eq. 2.23) evaluated densely, the oracle of
../shared/oracles/pgpr_synth.json, GPML's infVB bound with Z = X, finite differences."""
import json
import warnings

import numpy as np
import pytest
from scipy.optimize import OptimizeResult

import gpdsl as gd
from naive import bound_pair
from gpdsl._jit.polya_gamma import pg_marginals_update, pg_theta, pg_theta_kl
from gpdsl.methods import collapsed, polya_gamma
from gpdsl.methods.polya_gamma import PolyaGammaState

import naive
from conftest import assert_same_optimum_in_fewer_sweeps, shared_path

SE = gd.kernels.SquaredExponential(1.0, 1.0)
LOGIT = gd.likelihoods.Bernoulli(link="logit")


def _values(lengthscale=1.0, variance=1.0, bias=0.0):
    return {"kernel.lengthscale": np.asarray(lengthscale, float), "kernel.variance": np.asarray(variance, float),
            "likelihood.bias": np.asarray(bias, float)}


def _problem(seed, n=60, m=8, d=2):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.where(np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    Z = X[rng.choice(n, m, replace=False)] + 0.05 * rng.standard_normal((m, d))
    return X, y, Z, rng


def _at_fixed_c(values, X, y, Z, c, kernel=SE, need_grad=False):
    """Bound and q*(u) at the given c: one evaluation that stops after the first update."""
    spec = gd.inference.PolyaGamma(max_iter=1, jitter=0.0)
    warm = PolyaGammaState(c=c, c_next=c)
    return polya_gamma.evaluate(*bound_pair(kernel, LOGIT, values), X, y, Z, spec=spec, warm=warm, need_grad=need_grad,
                                need_state=True)


# -- the oracle ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def oracle():
    root = shared_path("oracles")
    with open(root / "pgpr_synth.json") as fh:
        data = json.load(fh)
    train = np.loadtxt(root / "data" / "synth_train_std.csv", delimiter=",")
    test = np.loadtxt(root / "data" / "synth_test_std.csv", delimiter=",")
    return data, train, test


def test_synth_oracle_bound_c_and_predictions(oracle):
    data, train, test = oracle
    res = data["results"]
    Z = np.array(data["settings"]["Z"])
    spec = gd.inference.PolyaGamma(tol=1e-10)
    ev = polya_gamma.evaluate(*bound_pair(SE, LOGIT, _values()), train[:, :2], train[:, 2], Z, spec=spec, need_grad=False,
                              need_state=True)
    assert ev.jitter == 0.0                                   # the oracle used none; the ladder starts at 0
    assert ev.log_evidence == pytest.approx(res["L_star"], abs=1e-6)
    np.testing.assert_allclose(ev.warm.c, res["c_star"], atol=1e-6)
    np.testing.assert_allclose(ev.warm.theta, res["theta_star"], atol=1e-7)
    np.testing.assert_allclose(ev.state.q_mean, res["q_u_mean"], atol=1e-6)
    np.testing.assert_allclose(ev.state.q_cov, res["q_u_cov"], atol=1e-6)
    # The thesis' plain updates from c = 0.1 reproduce the oracle's first ten bounds and its
    # count of 35 updates; the accelerated default reaches the same c in fewer passes.
    plain = polya_gamma.evaluate(*bound_pair(SE, LOGIT, _values()), train[:, :2], train[:, 2], Z, need_grad=False,
                                 spec=gd.inference.PolyaGamma(tol=1e-10, acceleration=False))
    np.testing.assert_allclose(plain.warm.bound_history[:10], res["bound_history_first10"], atol=1e-6)
    assert len(plain.warm.bound_history) == res["n_c_updates"]
    np.testing.assert_allclose(plain.warm.c, ev.warm.c, atol=1e-9)
    assert ev.warm.sweeps < plain.warm.sweeps
    model = gd.Model(SE, LOGIT, gd.inducing.Fixed(Z), gd.inference.PolyaGamma())
    post = gd.Posterior(model=model, values=_values(), state=ev.state, log_evidence=ev.log_evidence)
    mean, var = post.predict_f(test[:, :2])
    np.testing.assert_allclose(mean, res["test_latent_mean"], atol=1e-6)
    np.testing.assert_allclose(var, res["test_latent_var"], atol=1e-6)
    p = post.predict(test[:, :2])["p"].values
    np.testing.assert_allclose(p, res["test_prob_y_plus1"], atol=1e-6)
    assert np.mean(post.log_predictive(test[:, :2], test[:, 2])) == pytest.approx(
        res["test_mean_log_pred_prob"], abs=1e-6)
    assert np.mean(np.where(p > 0.5, 1.0, -1.0) != test[:, 2]) == pytest.approx(res["test_error_rate"], abs=1e-12)


def test_z_equals_x_is_gpml_infvb_bound():
    """With Z = X the PG bound is the Jaakkola-Jordan bound GPML's infVB computes (raw synth)."""
    root = shared_path("oracles")
    with open(root / "pgpr_synth.json") as fh:
        expected = json.load(fh)["extras"]["full_bound_Z_equals_X"]
    train = np.loadtxt(root / "data" / "synth_train.csv", delimiter=",")
    X, y = train[:, :2], train[:, 2]
    ev = polya_gamma.evaluate(*bound_pair(SE, LOGIT, _values()), X, y, X.copy(), spec=gd.inference.PolyaGamma(tol=1e-10),
                              need_grad=False)
    assert ev.log_evidence == pytest.approx(expected["gpml_infVB_likLogistic_minus_nlZ_synth_raw"], abs=1e-6)


# -- the bound against the uncollapsed ELBO ---------------------------------------------------------
@pytest.mark.parametrize("seed,bias", [(0, 0.0), (1, 0.4), (2, -0.7)])
def test_collapsed_bound_equals_uncollapsed_elbo_at_optimal_q(seed, bias):
    X, y, Z, rng = _problem(seed)
    values = _values(0.9, 1.3, bias)
    c = rng.uniform(0.05, 3.0, X.shape[0])
    ev = _at_fixed_c(values, X, y, Z, c)
    Kuu = naive.kernel(Z, Z, 0.9, 1.3, "se")
    Kuf = naive.kernel(Z, X, 0.9, 1.3, "se")
    kff = np.full(X.shape[0], 1.3)
    m, S = ev.state.q_mean, ev.state.q_cov
    elbo = naive.polya_gamma_elbo(Kuu, Kuf, kff, y, bias, m, S, c)
    assert ev.warm.bound_history[0] == pytest.approx(elbo, abs=1e-8)
    # (m*, S*) is a stationary point: central differences of the dense ELBO in every direction.
    h = 1e-5
    grad_m = [(naive.polya_gamma_elbo(Kuu, Kuf, kff, y, bias, m + h * e, S, c)
               - naive.polya_gamma_elbo(Kuu, Kuf, kff, y, bias, m - h * e, S, c)) / (2 * h) for e in np.eye(len(m))]
    assert np.max(np.abs(grad_m)) < 1e-6
    # S directions L_S (e_i e_j^T + e_j e_i^T) L_S^T span the symmetric matrices and move every
    # eigenvalue of S by the same relative amount, which keeps the log|S| term's differences accurate.
    LS = np.linalg.cholesky(S)
    grad_S = []
    for i in range(len(m)):
        for j in range(i + 1):
            E = np.zeros_like(S)
            E[i, j] = E[j, i] = 1.0
            E = LS @ E @ LS.T
            grad_S.append((naive.polya_gamma_elbo(Kuu, Kuf, kff, y, bias, m, S + h * E, c)
                           - naive.polya_gamma_elbo(Kuu, Kuf, kff, y, bias, m, S - h * E, c)) / (2 * h))
    assert np.max(np.abs(grad_S)) < 1e-6
    # ... and a maximum: moving m or S away lowers the ELBO.
    assert naive.polya_gamma_elbo(Kuu, Kuf, kff, y, bias, m + 0.05 * rng.standard_normal(len(m)), S, c) < elbo
    assert naive.polya_gamma_elbo(Kuu, Kuf, kff, y, bias, m, 0.9 * S, c) < elbo


def test_bound_is_the_pseudo_regression_vfe_bound_plus_c_terms():
    """Thesis eq. 4.14: at fixed c, L* = VFE(targets y/(2 theta) - bias, noise 1/theta) + terms in c."""
    X, y, Z, rng = _problem(3)
    values = _values(1.1, 0.8, 0.25)
    c = rng.uniform(0.0, 4.0, X.shape[0])
    c[:3] = [0.0, 1e-5, 2e-3]                       # the series branch of theta and KL at small c
    ev = _at_fixed_c(values, X, y, Z, c)
    theta = pg_theta(c)
    pseudo = gd.likelihoods.HeteroscedasticGaussian(variance=1.0 / theta)
    kernel_values = {k: v for k, v in values.items() if k.startswith("kernel.")}
    vfe = collapsed.evaluate(*bound_pair(SE, pseudo, kernel_values), X, 0.5 * y / theta - 0.25, Z, fitc=False, jitter=0.0,
                             need_grad=False).log_evidence
    n = X.shape[0]
    c_terms = (0.5 * n * np.log(2 * np.pi) - 0.5 * np.sum(np.log(theta)) + np.sum(0.125 / theta)
               - n * np.log(2.0) + pg_theta_kl(c)[1])
    assert ev.warm.bound_history[0] == pytest.approx(vfe + c_terms, abs=1e-9)


def test_theta_and_kl_against_their_definitions():
    c = np.array([0.0, 1e-6, 1e-4, 9.9e-4, 1.1e-3, 0.3, 2.0, 30.0, 800.0])
    expected_theta = np.where(c > 0, np.tanh(c / 2) / (2 * np.where(c > 0, c, 1.0)), 0.25)
    np.testing.assert_allclose(pg_theta(c)[1:], expected_theta[1:], rtol=1e-12)
    assert pg_theta(c)[0] == 0.25
    # -KL[PG(1,c) || PG(1,0)] = c^2 theta / 2 - log cosh(c/2); log cosh by mpmath-free identity.
    kl = 0.5 * c * c * expected_theta - (np.logaddexp(c / 2, -c / 2) - np.log(2.0))
    theta, negative_kl = pg_theta_kl(c)
    assert negative_kl == pytest.approx(np.sum(kl), rel=1e-12)
    np.testing.assert_array_equal(theta, pg_theta(c))


def test_marginals_update_against_numpy():
    """mean = V^T g, var = residual + sum_i V_in^2, c = sqrt((mean + shift)^2 + max(var, 0)),
    shift (n,) = bias + each row's latent offset."""
    rng = np.random.default_rng(5)
    V, g = rng.standard_normal((7, 40)), rng.standard_normal(7)
    residual = rng.uniform(0.0, 2.0, 40)
    residual[0] = -(V[:, 0] @ V[:, 0]) - 1e-3          # a negative rounding var is clipped at 0
    shift = 0.3 + rng.standard_normal(40)
    mean, c = pg_marginals_update(V, g, residual, shift)
    np.testing.assert_allclose(mean, V.T @ g, rtol=1e-13, atol=1e-14)
    var = np.maximum(residual + np.sum(V * V, axis=0), 0.0)
    np.testing.assert_allclose(c, np.sqrt((V.T @ g + shift) ** 2 + var), rtol=1e-13)
    assert c[0] == pytest.approx(abs(mean[0] + shift[0]), rel=1e-13)


# -- the coordinate ascent --------------------------------------------------------------------------
@pytest.mark.parametrize("seed,acceleration", [(0, False), (4, False), (0, True), (4, True)])
def test_c_update_is_monotone_and_a_fixed_point(seed, acceleration):
    X, y, Z, _ = _problem(seed, n=80, m=10)
    values = _values(0.7, 20.0, -0.2)           # a large variance: slow plain updates
    ev = polya_gamma.evaluate(*bound_pair(SE, LOGIT, values), X, y, Z, need_grad=False, need_state=True,
                              spec=gd.inference.PolyaGamma(tol=1e-10, acceleration=acceleration))
    history = np.array(ev.warm.bound_history)
    assert len(history) > 5 and ev.warm.converged
    assert np.all(np.diff(history) >= -1e-10)                 # never decreases
    assert np.max(np.abs(ev.warm.c_next - ev.warm.c)) < 1e-10   # one more update moves nothing
    # eq. 4.11 independently: c_n^2 = (mu_n + bias)^2 + Sigma_q,nn from q*(f) at the training inputs.
    post = gd.Posterior(model=gd.Model(SE, LOGIT, gd.inducing.Fixed(Z), gd.inference.PolyaGamma()),
                        values=values, state=ev.state, log_evidence=ev.log_evidence)
    mean, var = post.predict_f(X)
    np.testing.assert_allclose(ev.warm.c, np.sqrt((mean - 0.2) ** 2 + var), atol=1e-8)


def test_gradients_match_central_differences_of_the_converged_bound():
    X, y, Z, _ = _problem(5, n=70, m=7)
    kernel = gd.kernels.SquaredExponential(np.array([0.8, 1.3]), 1.7)
    values = _values([0.8, 1.3], 1.7, 0.3)
    spec = gd.inference.PolyaGamma(tol=1e-12)
    ev = polya_gamma.evaluate(*bound_pair(kernel, LOGIT, values), X, y, Z, spec=spec)

    def bound(vals, Zs):
        return polya_gamma.evaluate(*bound_pair(kernel, LOGIT, vals), X, y, Zs, spec=spec, need_grad=False).log_evidence

    h = 1e-4
    for name in values:
        flat = np.atleast_1d(values[name]).astype(float)
        for i in range(flat.size):
            up, down = flat.copy(), flat.copy()
            up[i] += h
            down[i] -= h
            fd = (bound({**values, name: up.reshape(np.shape(values[name]))}, Z)
                  - bound({**values, name: down.reshape(np.shape(values[name]))}, Z)) / (2 * h)
            assert np.atleast_1d(ev.grads[name])[i] == pytest.approx(fd, rel=1e-4, abs=1e-6), name
    scale = np.max(np.abs(ev.dZ))
    for i, j in [(0, 0), (2, 1), (6, 0)]:
        up, down = Z.copy(), Z.copy()
        up[i, j] += h
        down[i, j] -= h
        fd = (bound(values, up) - bound(values, down)) / (2 * h)
        assert ev.dZ[i, j] == pytest.approx(fd, abs=1e-4 * scale)


# -- monotonicity in the inducing set (thesis C.4, Titsias Proposition 1) ---------------------------
@pytest.mark.parametrize("seed", range(4))
def test_adding_an_inducing_point_never_lowers_the_bound(seed):
    X, y, _, rng = _problem(seed, n=50)
    values = _values(0.6 + rng.uniform(), 0.5 + rng.uniform(), rng.normal(scale=0.3))
    order = rng.permutation(X.shape[0])[:12]
    c = rng.uniform(0.05, 3.0, X.shape[0])
    fixed_c, optimal_c = [], []
    for m in range(1, len(order) + 1):
        Z = X[order[:m]] + 1e-3 * rng.standard_normal((m, 2)) * (m % 2)   # training points or pseudo-inputs
        fixed_c.append(_at_fixed_c(values, X, y, Z, c).warm.bound_history[0])
        optimal_c.append(polya_gamma.evaluate(*bound_pair(SE, LOGIT, values), X, y, Z, spec=gd.inference.PolyaGamma(
            tol=1e-10, jitter=0.0), need_grad=False).log_evidence)
    assert np.all(np.diff(fixed_c) >= -1e-8)
    assert np.all(np.diff(optimal_c) >= -1e-8)


# -- the model ---------------------------------------------------------------------------------------
def test_fit_on_synth_raises_the_bound_and_records_c(oracle, tmp_path):
    data, train, test = oracle
    Z = train[:20, :2]
    model = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), LOGIT, gd.inducing.Fixed(Z), gd.inference.PolyaGamma())
    post = model.fit(train[:, :2], (train[:, 2] > 0).astype(int))
    # The declared hyperparameters (ell = sf = 1, bias 0) are the oracle's: fitting must improve on it.
    assert post.converged and post.log_evidence > data["results"]["L_star"] + 1.0
    ds = post.to_xarray()
    assert ds["c"].dims == ("obs",) and ds["theta"].dims == ("obs",)
    np.testing.assert_allclose(ds["theta"].values, pg_theta(ds["c"].values), rtol=1e-14)
    assert ds.attrs["inference"] == "PolyaGamma" and ds.attrs["pg_converged"] == 1
    # The fitted gradient vanishes (the optimum of max_c L*): L-BFGS-B stops by SciPy's relative
    # reduction test, which leaves |dF/d lengthscale| at 1e-4 to 2e-3 by the rounding of K's
    # products (at lengthscale 5.7, variance 80: 0.011 in log space, against the fit's gradient
    # tolerance 0.25).
    ev = model.evaluate(post.values, train[:, :2], train[:, 2], Z, warm=post.sites)
    assert max(np.max(np.abs(g)) for g in ev.grads.values()) < 5e-3
    error = np.mean(np.where(post.predict(test[:, :2])["p"].values > 0.5, 1, -1) != test[:, 2])
    assert error < 0.11
    path = tmp_path / "pg.nc"
    post.save(path)
    back = gd.load(path)
    np.testing.assert_array_equal(back.sites.c, post.sites.c)
    np.testing.assert_allclose(back.predict(test[:5, :2])["p"].values, post.predict(test[:5, :2])["p"].values,
                               rtol=1e-12)


def test_fit_updates_c_to_fit_tol_and_the_posterior_to_tol(oracle):
    """The collapsed fit's inner evaluations stop the c updates at max(fit_tol, tol) (within_fit),
    the posterior's at tol: at the default fit_tol = 1e-4 the fit reaches the optimum of the fit
    whose every evaluation updates c to tol = 1e-6, in fewer passes over the data, and its c is a
    fixed point of eq. 4.11 to tol."""
    from gpdsl.inference.base import FIT_TOL
    assert FIT_TOL == 1e-4 and gd.inference.PolyaGamma().within_fit().tol == 1e-4
    assert gd.inference.PolyaGamma(tol=1e-3).within_fit().tol == 1e-3          # never tighter than tol
    stochastic = gd.inference.PolyaGamma(minibatch=32)
    assert stochastic.within_fit() is stochastic
    with pytest.raises(ValueError, match="PolyaGamma: fit_tol must be a positive finite number, got 0"):
        gd.inference.PolyaGamma(fit_tol=0)
    data, train, test = oracle
    Z = train[:20, :2]
    fits = {tol: gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), LOGIT, gd.inducing.Fixed(Z),
                          gd.inference.PolyaGamma(fit_tol=tol)).fit(train[:, :2], (train[:, 2] > 0).astype(int))
            for tol in (1e-4, 1e-6)}
    loose, tight = fits[1e-4], fits[1e-6]
    # The optimum to the resolution of SciPy's relative-reduction stop, which leaves gradients of
    # 1e-4 to 3e-3 along the optimum's flat directions, where the stopping point also moves with
    # the rounding of the objective (another BLAS summation order moved it 2e-3 -> 6e-3).  The
    # helper asserts the evidences agree to delta = 1e-6 |F| (9e-5 nats); points within delta of
    # the optimum lie within sqrt(2 delta / lambda) of it along a direction of curvature lambda, and
    # the evidence's flattest curvatures here (second differences in log length-scale, log variance
    # and bias at the optimum, steps 0.02-0.1) are 0.012-0.015 nearly along the bias (|bias| 5.04)
    # and 0.3-1.7 along the log variance: the values agree to the larger relative distance.
    delta = 1e-6 * abs(tight.log_evidence)
    values_rtol = max(np.sqrt(2 * delta / 0.012) / 5.04, np.sqrt(2 * delta / 0.3))      # 0.025
    assert_same_optimum_in_fewer_sweeps(loose, tight, values_rtol=values_rtol)
    assert loose.sites.converged and np.max(np.abs(loose.sites.c_next - loose.sites.c)) < 1e-6


def test_a_line_search_ended_by_the_within_fit_tolerance_goes_on_with_exact_evaluations(oracle, monkeypatch):
    """Where L-BFGS-B's line search fails under the within-fit declaration (c to fit_tol), the fit
    goes on from that point with the model's own evaluations (c to tol) rather than stopping flagged:
    here the first run is made to stop at once as an ABNORMAL line search does, and the fit ends at
    the optimum of a fit run exactly throughout."""
    from scipy import optimize as sp_optimize          # what gpdsl.fitting calls (it imports it at the fit)
    data, train, test = oracle
    Z = train[:20, :2]
    real, tolerances = sp_optimize.minimize, []

    def first_run_abnormal(fun, x0, **kwargs):
        objective = fun
        if not tolerances:
            f, g = objective(x0)
            tolerances.append(objective.evaluate is not objective.exact)
            return OptimizeResult(x=x0, fun=f, jac=g, nit=0, status=2, success=False,
                                  message="ABNORMAL: ")
        tolerances.append(objective.evaluate is not objective.exact)
        return real(fun, x0, **kwargs)

    monkeypatch.setattr(sp_optimize, "minimize", first_run_abnormal)
    model = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), LOGIT, gd.inducing.Fixed(Z), gd.inference.PolyaGamma())
    post = model.fit(train[:, :2], (train[:, 2] > 0).astype(int))
    monkeypatch.setattr(sp_optimize, "minimize", real)
    exact = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), LOGIT, gd.inducing.Fixed(Z),
                     gd.inference.PolyaGamma(fit_tol=1e-6)).fit(train[:, :2], (train[:, 2] > 0).astype(int))
    assert tolerances == [True, False]                     # inexact, then exact evaluations
    assert post.converged and post.diagnostics.optimizer_restarts == 1
    # Both stop by SciPy's relative-reduction test, which on this flat optimum resolves the bound to
    # about 1e-4 nats (the two started from different c: the first run's evaluation left its own).
    assert post.log_evidence == pytest.approx(exact.log_evidence, abs=5e-4)


def test_link_and_options_are_validated():
    with pytest.raises(ValueError, match="PolyaGamma needs Bernoulli\\(link='logit'\\)"):
        gd.Model(SE, gd.likelihoods.Bernoulli(), gd.inducing.Subsample(5), gd.inference.PolyaGamma())
    # EP and QP take either link (issue 15); the exact GP takes Gaussian noise only.
    assert gd.Model(SE, LOGIT, gd.inducing.Subsample(5), gd.inference.EP()).likelihood.link == "logit"
    with pytest.raises(ValueError, match="Bernoulli with Exact is not supported; supported pairs: "):
        gd.Model(SE, LOGIT, None, gd.inference.Exact())
    with pytest.raises(TypeError, match="needs an inducing spec"):
        gd.Model(SE, LOGIT, None, gd.inference.PolyaGamma())
    with pytest.raises(ValueError, match="PolyaGamma: tol must be a positive finite number, got -1"):
        gd.inference.PolyaGamma(tol=-1)
    with pytest.raises(ValueError, match="PolyaGamma: max_iter must be a positive integer, got 0"):
        gd.inference.PolyaGamma(max_iter=0)
    with pytest.raises(ValueError, match="Bernoulli: y must be binary"):
        gd.Model(SE, LOGIT, gd.inducing.Subsample(2), gd.inference.PolyaGamma()).fit(
            np.zeros((4, 1)), [0, 1, 2, 1])


def test_unconverged_inner_loop_is_flagged():
    X, y, Z, _ = _problem(6)
    model = gd.Model(SE, LOGIT, gd.inducing.Fixed(Z), gd.inference.PolyaGamma(max_iter=2))
    with pytest.warns(gd.ConvergenceWarning, match="PolyaGamma did not converge"):
        post = model.fit(X, y, optimize=False)
    assert not post.converged and not post.sites.converged


def test_a_fit_no_better_than_the_constant_model_is_flagged(tmp_path):
    """At kernel variance -> 0 every method's objective is sum_n log p(y_n | f_n = 0), here
    -N log 2 (logit, no bias); a fit within 1e-3 nats of it warns and is flagged (a true
    optimum of the bound, 5 of 50 crabs K-means splits fall into it), a real fit is not."""
    X, y, Z, _ = _problem(6)
    collapsed_kernel = gd.kernels.SquaredExponential(1.0, 1e-12)
    model = gd.Model(collapsed_kernel, LOGIT, gd.inducing.Fixed(Z), gd.inference.PolyaGamma())
    with pytest.warns(gd.ConvergenceWarning,
                      match=r"no better than the constant model's -41.5888 \(the kernel variance has collapsed\)"):
        post = model.fit(X, y, optimize=False, fixed=("likelihood.bias",))
    assert post.log_evidence == pytest.approx(-X.shape[0] * np.log(2.0), abs=1e-6)
    assert post.constant_model and post.converged
    post.save(tmp_path / "constant.nc")
    assert gd.load(tmp_path / "constant.nc").constant_model
    with warnings.catch_warnings():
        warnings.simplefilter("error", gd.ConvergenceWarning)
        fitted = gd.Model(SE, LOGIT, gd.inducing.Fixed(Z), gd.inference.PolyaGamma()).fit(X, y)
    assert not fitted.constant_model and fitted.to_xarray().attrs["constant_model"] == 0
    assert fitted.log_evidence > -X.shape[0] * np.log(2.0) + 1.0


def test_a_step_to_where_the_bound_is_lost_to_rounding_is_stepped_back():
    """On Pima (split 0, GV-weighted M = 10) an L-BFGS-B step reached lengthscale 3e-7 and
    kernel variance 4e47, where eq. C.1 came out as +7.6e30 (tr(Theta K_ff) - tr(A A^T) in
    rounding); a positive bound now counts as a failed point, the line search steps back and
    the fit converges to a finite negative bound equal to a fresh evaluation there."""
    from gpdsl.datasets import load_csv
    X, y = load_csv(str(shared_path("data", "pima-indians-diabetes", "pima-indians-diabetes.csv")))
    train = np.random.default_rng(0).permutation(len(y))[:int(0.9 * len(y))]
    Xtr = (X[train] - X[train].mean(0)) / X[train].std(0)
    model = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), LOGIT,
                     gd.inducing.GreedyVariance(m=10, weighted=True), gd.inference.PolyaGamma())
    with warnings.catch_warnings():
        warnings.simplefilter("error", gd.ConvergenceWarning)
        post = model.fit(Xtr, y[train], fixed=("likelihood.bias",))
    assert post.converged and -400.0 < post.log_evidence < -300.0
    again = model.evaluate(post.values, Xtr, model.likelihood.prepare_targets(y[train]), post.state.Z,
                           need_grad=False)
    assert again.log_evidence == pytest.approx(post.log_evidence, abs=1e-6)


@pytest.mark.parametrize("lengthscale,variance,seed", [(1600.0, 1.1e6, 0), (2600.0, 7.6e6, 1), (1700.0, 3.1e6, 2)])
def test_bound_does_not_depend_on_the_warm_start_at_an_ill_conditioned_kuu(lengthscale, variance, seed):
    """Twonorm's near-linear optimum (cond K_uu ~ 1e7..1e10): the jitter rung and the bound are
    functions of the hyperparameters, not of the c the inner loop starts from.  Before the collapsed
    engine worked in the whitened basis, its tr(Theta Q_ff) <= tr(Theta K_ff) check at the warm c
    picked the rung: at 14 of 40 such points the three starts below gave different rungs (0 to 1e-6)
    and bounds up to 480 nats apart."""
    n = 2000
    X, labels = gd.datasets.twonorm(n, dim=20, seed=0)
    y = np.where(labels > 0, 1.0, -1.0)
    Z = X[np.random.default_rng(seed).choice(n, 21, replace=False)]
    values = _values(lengthscale, variance, 0.0)
    runs = []
    for c0 in (0.1, 3.0, 30.0):
        warm = PolyaGammaState(c=np.full(n, c0), c_next=np.full(n, c0))
        ev = polya_gamma.evaluate(*bound_pair(SE, LOGIT, values), X, y, Z, spec=gd.inference.PolyaGamma(), warm=warm)
        assert ev.warm.converged
        runs.append((ev.jitter, ev.log_evidence))
    assert len({jitter for jitter, _ in runs}) == 1, runs
    bounds = [bound for _, bound in runs]
    assert max(bounds) - min(bounds) < 1e-5, runs
