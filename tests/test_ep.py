"""EP and QP: dense and FITC-EP against the GPML toolbox, each other, and finite differences."""

import numpy as np
import pytest

import gpdsl as gd
from conftest import shared_path
from naive import central_difference

SE = gd.kernels.SquaredExponential


@pytest.fixture(scope="module")
def synth():
    train = np.loadtxt(shared_path("oracles", "data", "synth_train.csv"), delimiter=",")
    test = np.loadtxt(shared_path("oracles", "data", "synth_test.csv"), delimiter=",")
    return train[:, :2], train[:, 2], test[:, :2], test[:, 2]


def _classifier(inference, inducing=None, kernel=None, bias=gd.Fixed(0.0)):
    return gd.Model(kernel=kernel or SE(1.0, 1.0), likelihood=gd.likelihoods.Bernoulli("probit", bias=bias),
                    inducing=inducing, inference=inference)


@pytest.mark.parametrize("name,sparse", [("synth_infEP_likErf_full.json", False),
                                         ("synth_infEP_likErf_FITC_xu10.json", True)])
def test_matches_gpml_converged(gpml, synth, name, sparse):
    ref = gpml(name)
    res = ref["results"]["converged"]
    X, y, Xs, ys = synth
    inducing = gd.inducing.Optimized(np.array(ref["sparse"]["xu"])) if sparse else None
    model = _classifier(gd.inference.EP(tol=1e-12, jitter=1e-6), inducing)
    post = model.fit(X, y, optimize=False)
    assert post.converged
    assert -post.log_evidence == pytest.approx(res["nlZ"], rel=1e-6)
    pred = post.predict(Xs)
    np.testing.assert_allclose(pred.f_mean, res["pred"]["fmu"], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(pred.f_var, res["pred"]["fs2"], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.log(np.where(ys > 0, pred.p, 1 - pred.p)), res["pred"]["lp"], rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(post.log_predictive(Xs, ys), res["pred"]["lp"], rtol=1e-6, atol=1e-8)
    table = model.parameter_table(X, inducing.initial_Z(X, y) if sparse else None)
    values = table.values()
    Z = values.pop("inducing.Z", None)
    ev = model.evaluate(values, X, y, Z)
    assert -ev.grads["kernel.lengthscale"] == pytest.approx(res["dnlZ_cov"][0], rel=1e-6)
    assert -2 * ev.grads["kernel.variance"] == pytest.approx(res["dnlZ_cov"][1], rel=1e-6)


@pytest.mark.parametrize("schedule", ["sequential", "parallel"])
@pytest.mark.parametrize("quantile", [False, True])
def test_fitc_ep_equals_dense_ep_on_the_fitc_prior(synth, schedule, quantile):
    """FITC-EP's O(M^2) rank-1 updates against dense EP run on the explicit FITC covariance."""
    from gpdsl.methods import expectation_propagation as epm
    X, y = synth[0][:80], synth[1][:80]
    Z = X[:7] + 0.05
    kernel = SE(0.8, 1.3)
    values = {"kernel.lengthscale": np.array(0.8), "kernel.variance": np.array(1.3)}
    spec = (gd.inference.QP if quantile else gd.inference.EP)(tol=1e-12, schedule=schedule, jitter=1e-6)
    fitc = epm.FITCPrior(kernel, values, X, Z, 1e-6, None)
    fitc_state = epm.run_sites(fitc, y, 0.3, 0, spec, None, quantile)
    dense = epm.DensePrior(kernel, values, X)
    dense.K = fitc.P0 @ np.linalg.solve(fitc.Kuu, fitc.P0.T) + np.diag(fitc.d0)
    dense_state = epm.run_sites(dense, y, 0.3, 0, spec, None, quantile)
    assert fitc_state.converged and dense_state.converged
    np.testing.assert_allclose(fitc_state.tau, dense_state.tau, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(fitc_state.nu, dense_state.nu, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(fitc.marginals()[0], dense.marginals()[0], rtol=1e-8)
    assert fitc.log_det_B == pytest.approx(dense.log_det_B, rel=1e-9)


def test_fitc_ep_with_Z_equal_X_equals_dense_ep(synth):
    # A short length-scale keeps K_ff well conditioned, so that Q_ff = K_ff holds without jitter
    # (at ell = 1 these 60 points give cond(K_ff) ~ 1e18 and no jitter reproduces K_ff).
    X, y = synth[0][:60], synth[1][:60]
    kernel = SE(0.15, 1.0)
    dense = _classifier(gd.inference.EP(tol=1e-12), kernel=kernel).fit(X, y, optimize=False)
    fitc = _classifier(gd.inference.EP(tol=1e-12, jitter=0.0), gd.inducing.Fixed(X), kernel=kernel).fit(
        X, y, optimize=False)
    assert fitc.log_evidence == pytest.approx(dense.log_evidence, rel=1e-6)
    Xs = synth[2][:20]
    np.testing.assert_allclose(fitc.predict(Xs).f_mean, dense.predict(Xs).f_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fitc.predict(Xs).f_var, dense.predict(Xs).f_var, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("quantile", [False, True])
def test_evidence_gradients_match_finite_differences(synth, sparse, quantile):
    X, y = synth[0][:70], synth[1][:70]
    Z0 = X[:6] + 0.1 if sparse else None
    spec = (gd.inference.QP if quantile else gd.inference.EP)(tol=1e-13, jitter=1e-6)
    model = _classifier(spec, gd.inducing.Optimized(Z0) if sparse else None,
                        kernel=SE(np.array([0.7, 1.2]), 1.4), bias=0.2)
    _check_evidence_gradients(model, X, y, Z0)


def _check_evidence_gradients(model, X, y, Z0):
    """Analytic gradients of the converged EP evidence against central differences (1e-4)."""
    table = model.parameter_table(X, Z0)
    values = table.values()
    Z = values.pop("inducing.Z", None)
    ev = model.evaluate(values, X, y, Z)
    assert ev.warm.converged

    def evidence(vals, Zz):
        return model.evaluate(vals, X, y, Zz, need_grad=False, warm=ev.warm).log_evidence

    for name, value in values.items():
        fd = central_difference(lambda v: evidence({**values, name: v}, Z), value, step=1e-5)
        np.testing.assert_allclose(ev.grads[name], fd, rtol=1e-4, atol=1e-6, err_msg=name)
    if Z is not None:
        fd = central_difference(lambda Zz: evidence(values, Zz), Z, step=1e-5)
        np.testing.assert_allclose(ev.dZ, fd, rtol=1e-4, atol=1e-6, err_msg="Z")


def test_gaussian_projection_reproduces_exact_regression_in_one_sweep():
    """With a Gaussian likelihood the tilted law is Gaussian, so one EP sweep (the jitted
    sequential sweep with rank-1 updates) gives the exact GP posterior and the next changes nothing."""
    from gpdsl._jit.projections import GAUSSIAN
    from gpdsl.methods import expectation_propagation as epm
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(25, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(25)
    values = {"kernel.lengthscale": np.array(0.7), "kernel.variance": np.array(1.0)}
    exact = gd.Model(kernel=SE(0.7, 1.0), likelihood=gd.likelihoods.Gaussian(0.01)).fit(X, y, optimize=False)
    for schedule in ("sequential", "parallel"):
        prior = epm.DensePrior(SE(0.7, 1.0), values, X)
        one = epm.run_sites(prior, y, 0.01, GAUSSIAN, gd.inference.EP(max_sweeps=1, schedule=schedule), None, False)
        np.testing.assert_allclose(prior.mu, exact.predict(X).f_mean, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(np.diag(prior.Sigma), exact.predict(X).f_var, rtol=1e-8)
        np.testing.assert_allclose(one.tau, 100.0, rtol=1e-9)          # site precision = 1 / noise
        again = epm.run_sites(prior, y, 0.01, GAUSSIAN, gd.inference.EP(tol=1e-8, schedule=schedule), one, False)
        assert again.converged and again.sweeps == 1


def test_qp_variances_not_larger_than_ep(synth):
    X, y, Xs, _ = synth
    ep = _classifier(gd.inference.EP(tol=1e-10)).fit(X, y, optimize=False)
    qp = _classifier(gd.inference.QP(tol=1e-10)).fit(X, y, optimize=False)
    assert np.all(qp.predict(Xs).f_var.values <= ep.predict(Xs).f_var.values + 1e-12)


def test_labels_and_bad_input(synth):
    X, y = synth[0][:40], synth[1][:40]
    a = _classifier(gd.inference.EP()).fit(X, y, optimize=False)
    b = _classifier(gd.inference.EP()).fit(X, (y > 0).astype(int), optimize=False)
    c = _classifier(gd.inference.EP()).fit(X, y > 0, optimize=False)
    assert a.log_evidence == b.log_evidence == c.log_evidence
    with pytest.raises(ValueError, match="Bernoulli: y must be binary"):
        _classifier(gd.inference.EP()).fit(X, np.arange(40.0), optimize=False)
    with pytest.raises(ValueError, match="EP: damping must be in"):
        gd.inference.EP(damping=1.5)
    with pytest.raises(ValueError, match="QP: schedule must be one of"):
        gd.inference.QP(schedule="random")
    with pytest.raises(ValueError, match="Poisson: y must hold non-negative integer counts"):
        gd.Model(kernel=SE(), likelihood=gd.likelihoods.Poisson(), inference=gd.inference.EP()).fit(
            X, np.full(40, 1.5), optimize=False)


def test_non_convergence_is_flagged(synth):
    X, y = synth[0][:40], synth[1][:40]
    with pytest.warns(gd.ConvergenceWarning, match="EP did not converge in 1 sweeps"):
        post = _classifier(gd.inference.EP(max_sweeps=1)).fit(X, y, optimize=False)
    assert not post.converged
    assert post.to_xarray().attrs["ep_converged"] == 0


def test_qp_lookup_table_matches_direct_qp(synth):
    X, y, Xs, _ = synth
    direct = _classifier(gd.inference.QP(tol=1e-10)).fit(X, y, optimize=False)
    table = _classifier(gd.inference.QP(tol=1e-10, lookup=True)).fit(X, y, optimize=False)
    np.testing.assert_allclose(table.sites.tau, direct.sites.tau, rtol=1e-3)
    np.testing.assert_allclose(table.predict(Xs).f_var, direct.predict(Xs).f_var, rtol=1e-4)
    np.testing.assert_allclose(table.predict(Xs).p, direct.predict(Xs).p, atol=1e-5)


@pytest.fixture(scope="module")
def counts():
    rng = np.random.default_rng(3)
    X = np.sort(rng.uniform(0, 5, size=(60, 1)), axis=0)
    rate = (1.0 + np.sin(1.5 * X[:, 0])) ** 2 + 0.2
    return X, rng.poisson(rate).astype(float)


def _poisson(inference, inducing=None):
    return gd.Model(kernel=SE(1.0, 1.5), likelihood=gd.likelihoods.Poisson("square"), inducing=inducing,
                    inference=inference)


@pytest.mark.parametrize("sparse", [False, True])
def test_poisson_evidence_gradients(counts, sparse):
    X, y = counts
    Z0 = X[::10] + 0.05 if sparse else None
    model = _poisson(gd.inference.EP(tol=1e-13, jitter=1e-6), gd.inducing.Optimized(Z0) if sparse else None)
    _check_evidence_gradients(model, X, y, Z0)


def test_poisson_qp_and_negative_binomial_predictive(counts):
    X, y = counts
    ep = _poisson(gd.inference.EP(tol=1e-10)).fit(X, y, optimize=False)
    qp = _poisson(gd.inference.QP(tol=1e-10)).fit(X, y, optimize=False)
    Xs = np.linspace(0, 5, 25)[:, None]
    pe, pq = ep.predict(Xs), qp.predict(Xs)
    assert np.all(pq.f_var.values <= pe.f_var.values + 1e-12)
    # The NB predictive has the mean and variance of y when f ~ N(m, v) and y | f ~ Poisson(f^2).
    m, v = pe.f_mean.values, pe.f_var.values
    np.testing.assert_allclose(pe.y_mean, m ** 2 + v, rtol=1e-12)
    np.testing.assert_allclose(pe.y_var, m ** 2 + v + 2 * v ** 2 + 4 * m ** 2 * v, rtol=1e-12)
    # and it is a distribution over counts: the pointwise probabilities sum to one.
    grid = np.arange(0, 400.0)
    total = [np.exp(ep.log_predictive(np.full((400, 1), x), grid)).sum() for x in (0.5, 2.5, 4.5)]
    np.testing.assert_allclose(total, 1.0, rtol=1e-9)
    assert qp.log_evidence == pytest.approx(ep.log_evidence, rel=1e-9)   # QP reports EP's evidence


def test_classifier_posterior_round_trip_and_arviz(synth, tmp_path):
    import arviz as az
    X, y, Xs, ys = synth
    post = _classifier(gd.inference.QP(), gd.inducing.KMeans(8, seed=0), bias=0.0).fit(X, y, max_iter=30)
    post.save(tmp_path / "clf.nc")
    loaded = gd.load(tmp_path / "clf.nc")
    np.testing.assert_array_equal(loaded.predict(Xs).p.values, post.predict(Xs).p.values)
    np.testing.assert_array_equal(loaded.sites.tau, post.sites.tau)
    ds = post.to_xarray()
    assert ds["site_precision"].dims == ("obs",) and ds.attrs["ep_total_sweeps"] >= ds.attrs["ep_sweeps_final"]
    idata = post.to_inference_data(Xs[:50], ys[:50], draws=200)
    assert set(np.unique(idata.posterior_predictive["y"].values)) <= {-1.0, 1.0}
    assert np.isfinite(az.loo(idata).elpd_loo)
    error = np.mean(np.where(post.predict(Xs).p > 0.5, 1, -1) != ys)
    assert error < 0.12
