"""VFE and FITC against dense O(N^3) formulas, the exact GP (Z = X) and GPML's apxSparse."""
import numpy as np
import pytest

import gpdsl as gd
from naive import bound_pair
from gpdsl.methods import collapsed
import naive

SE = gd.kernels.SquaredExponential


def _model(inference, Z, kernel=None, likelihood=None, optimize_Z=False):
    spec = gd.inducing.Optimized(Z) if optimize_Z else gd.inducing.Fixed(Z)
    return gd.Model(kernel=kernel or SE(np.array([0.9, 1.5]), 1.2),
                    likelihood=likelihood or gd.likelihoods.Gaussian(0.05),
                    inducing=spec, inference=inference)


@pytest.mark.parametrize("jitter", [0.0, 1e-4])
@pytest.mark.parametrize("fitc", [False, True])
def test_objective_and_posterior_match_dense(toy_regression, jitter, fitc):
    X, y = toy_regression
    Z = X[::4] + 0.05
    inference = gd.inference.FITC(jitter=jitter) if fitc else gd.inference.VFE(jitter=jitter, chunk_size=7)
    post = _model(inference, Z).fit(X, y, optimize=False)
    ls, var, noise = np.array([0.9, 1.5]), 1.2, np.full(len(y), 0.05)
    Kuu, Kuf = naive.kernel(Z, Z, ls, var, "se"), naive.kernel(Z, X, ls, var, "se")
    kff = np.full(len(y), var)
    dense = (naive.fitc_lml if fitc else naive.vfe_bound)(kff, Kuu, Kuf, noise, y, jitter)
    assert post.log_evidence == pytest.approx(dense, rel=1e-10)
    assert post.jitter == jitter
    if fitc:
        noise = kff - np.diag(naive.nystrom(Kuu, Kuf, jitter)[0]) + noise
    mu, A, Kj = naive.titsias_qu(Kuu, Kuf, noise, y, jitter)
    np.testing.assert_allclose(post.state.q_mean, mu, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(post.state.q_cov, A, rtol=1e-7, atol=1e-10)
    Xs = np.random.default_rng(3).uniform(-3, 3, size=(6, 2))
    mean, fvar = naive.sparse_predict(naive.kernel(Xs, Z, ls, var, "se"), np.full(6, var), Kj, mu, A)
    pred = post.predict(Xs)
    np.testing.assert_allclose(pred.f_mean, mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(pred.f_var, fvar, rtol=1e-7, atol=1e-10)


def test_chunking_does_not_change_results(toy_regression):
    X, y = toy_regression
    Z = X[:8]
    values = None
    results = []
    for chunk in (None, 1, 7, 13):
        model = _model(gd.inference.VFE(chunk_size=chunk), Z, optimize_Z=True)
        table = model.parameter_table(X, Z)
        values = table.values()
        Zv = values.pop("inducing.Z")
        results.append(model.evaluate(values, X, y, Zv))
    for r in results[1:]:
        assert r.log_evidence == pytest.approx(results[0].log_evidence, rel=1e-12)
        np.testing.assert_allclose(r.dZ, results[0].dZ, rtol=1e-9, atol=1e-12)


def test_vfe_is_a_lower_bound(toy_regression):
    X, y = toy_regression
    exact = gd.Model(kernel=SE(np.array([0.9, 1.5]), 1.2), likelihood=gd.likelihoods.Gaussian(0.05)).fit(
        X, y, optimize=False).log_evidence
    rng = np.random.default_rng(7)
    for m in (1, 3, 10, 25):
        Z = rng.uniform(-3, 3, size=(m, 2))
        bound = _model(gd.inference.VFE(), Z).fit(X, y, optimize=False).log_evidence
        assert bound <= exact


def test_vfe_with_Z_equal_X_equals_exact(toy_regression):
    X, y = toy_regression
    exact = gd.Model(kernel=SE(np.array([0.9, 1.5]), 1.2), likelihood=gd.likelihoods.Gaussian(0.05)).fit(
        X, y, optimize=False)
    vfe = _model(gd.inference.VFE(), X).fit(X, y, optimize=False)
    assert vfe.log_evidence == pytest.approx(exact.log_evidence, rel=1e-6)
    Xs = np.linspace(-3, 3, 5)[:, None].repeat(2, 1)
    np.testing.assert_allclose(vfe.predict(Xs).f_mean, exact.predict(Xs).f_mean, rtol=1e-5, atol=1e-7)


def test_method_equivalence_after_optimisation(toy_regression):
    """GPflow's test_method_equivalence: VFE with Z = X optimises to the exact GP's hyperparameters."""
    X, y = toy_regression
    kernel, likelihood = SE(np.array([1.0, 1.0]), 1.0), gd.likelihoods.Gaussian(0.1)
    exact = gd.Model(kernel=kernel, likelihood=likelihood).fit(X, y)
    vfe = gd.Model(kernel=kernel, likelihood=likelihood, inducing=gd.inducing.Fixed(X),
                   inference=gd.inference.VFE()).fit(X, y)
    assert vfe.log_evidence == pytest.approx(exact.log_evidence, rel=1e-6)
    for name, value in exact.values.items():
        np.testing.assert_allclose(vfe.values[name], value, rtol=1e-3, err_msg=name)


def test_gpml_sine_fitc(gpml):
    ref = gpml("sine_infGaussLik_FITC_xu7.json")
    res = ref["results"]
    X, y = gd.datasets.sine(50, 0.1, 0)
    Z = np.array(ref["sparse"]["xu"])[:, None]
    model = _model(gd.inference.FITC(jitter=1e-6), Z, kernel=SE(1.0, 1.0),
                   likelihood=gd.likelihoods.Gaussian(0.01), optimize_Z=True)
    post = model.fit(X, y, optimize=False)
    assert -post.log_evidence == pytest.approx(res["nlZ"], rel=1e-8)
    pred = post.predict(np.array(ref["xs"])[:, None])
    np.testing.assert_allclose(pred.f_mean, res["pred"]["fmu"], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(pred.f_var, res["pred"]["fs2"], rtol=1e-8)
    np.testing.assert_allclose(pred.y_var, res["pred"]["ys2"], rtol=1e-8)
    table = model.parameter_table(X, Z)
    values = table.values()
    ev = model.evaluate(values, X, y, values.pop("inducing.Z"))
    np.testing.assert_allclose(-ev.dZ[:, 0], res["dnlZ_xu"], rtol=1e-8)
    assert -ev.grads["kernel.lengthscale"] == pytest.approx(res["dnlZ_cov"][0], rel=1e-8)
    assert -2 * ev.grads["kernel.variance"] == pytest.approx(res["dnlZ_cov"][1], rel=1e-8)
    assert -2 * 0.01 * ev.grads["likelihood.variance"] == pytest.approx(res["dnlZ_lik"], rel=1e-8)


def _twonorm_pseudo_regression():
    """300 twonorm points in 20-D with PGPR-like pseudo-noise 1/theta in [4, 20] and targets y/(2 theta)."""
    X, labels = gd.datasets.twonorm(300, dim=20, seed=0)
    rng = np.random.default_rng(0)
    noise = rng.uniform(4.0, 20.0, 300)
    y = 0.5 * np.where(labels > 0, 1.0, -1.0) * noise
    return X, y, noise, X[rng.choice(300, 21, replace=False)]


def test_vfe_at_an_ill_conditioned_kuu_matches_an_extended_precision_reference():
    """A long length-scale and a large variance (PGPR's near-linear optimum on twonorm, pseudo-noise
    1/theta): cond(K_uu) ~ 3e8.  The whitened engine keeps the bound to ~2e-7 nats and its gradient to
    ~1e-8 relative of an 80-bit dense evaluation; forming K_uf Lambda^-1 K_fu before whitening (the
    engine before) was 0.14 nats and 1e-3 off here, 1.9 nats at length-scale 600."""
    if np.finfo(np.longdouble).eps > 1e-18:
        pytest.skip("np.longdouble is not extended precision on this platform")
    X, y, noise, Z = _twonorm_pseudo_regression()
    ls, var = 300.0, 1e6
    assert np.linalg.cond(naive.kernel(Z, Z, ls, var, "se")) > 1e8
    ev = collapsed.evaluate(*bound_pair(SE(1.0, 1.0), gd.likelihoods.HeteroscedasticGaussian(noise), {"kernel.lengthscale": np.asarray(ls), "kernel.variance": np.asarray(var)}),
                            X, y, Z, fitc=False, jitter=0.0)
    assert ev.log_evidence == pytest.approx(float(naive.vfe_bound_extended(X, Z, ls, var, noise, y)), abs=1e-5)
    # A Gaussian likelihood (noise variance 8) adds the noise gradient, which goes through
    # a_n^T (I - B^-1) a_n; every gradient against a central difference of the 80-bit bound.
    sigma2 = 8.0
    ev_g = collapsed.evaluate(*bound_pair(SE(1.0, 1.0), gd.likelihoods.Gaussian(sigma2), {"kernel.lengthscale": np.asarray(ls), "kernel.variance": np.asarray(var),
                               "likelihood.variance": np.asarray(sigma2)}), X, y, Z, fitc=False, jitter=0.0)
    h = 1e-4
    cases = [(ev, noise, "kernel.lengthscale", (np.exp(h), 1.0, 1.0)), (ev, noise, "kernel.variance", (1.0, np.exp(h), 1.0)),
             (ev_g, None, "kernel.lengthscale", (np.exp(h), 1.0, 1.0)),
             (ev_g, None, "likelihood.variance", (1.0, 1.0, np.exp(h)))]
    for evaluation, known, name, (s_ls, s_var, s_noise) in cases:
        def bound(k):
            lam = known if known is not None else np.full(300, sigma2 * s_noise ** k)
            return naive.vfe_bound_extended(X, Z, ls * s_ls ** k, var * s_var ** k, lam, y)
        value = {"kernel.lengthscale": ls, "kernel.variance": var, "likelihood.variance": sigma2}[name]
        assert evaluation.grads[name] * value == pytest.approx(float((bound(1) - bound(-1)) / (2 * h)), rel=1e-5), name


def test_predictions_at_an_ill_conditioned_kuu_match_an_extended_precision_reference():
    """cond(K_uu) ~ 9e10: the whitened predictive state (b_* = L^-1 k_*) keeps the latent variance
    (0.26 .. 2.1 here) to ~3e-5; the natural-basis form k_** - k_*^T (K_uu^-1 - Sigma^-1) k_* was off
    by 69 (and by 1e10 at cond 1e15), which gave twonorm's K-means PGPR fit NLL 0.085 instead of 0.063."""
    if np.finfo(np.longdouble).eps > 1e-18:
        pytest.skip("np.longdouble is not extended precision on this platform")
    X, y, noise, Z = _twonorm_pseudo_regression()
    X_new, _ = gd.datasets.twonorm(50, dim=20, seed=1)
    ls, var = 3000.0, 1e8
    assert np.linalg.cond(naive.kernel(Z, Z, ls, var, "se")) > 1e10
    model = _model(gd.inference.VFE(), Z, kernel=SE(ls, var), likelihood=gd.likelihoods.HeteroscedasticGaussian(noise))
    post = model.fit(X, y, optimize=False)
    assert post.jitter == 0.0
    mean, fvar = post.predict_f(X_new)
    ref_mean, ref_var = naive.vfe_predict_extended(X, Z, X_new, ls, var, noise, y)
    np.testing.assert_allclose(mean, ref_mean.astype(float), rtol=0, atol=1e-6)
    np.testing.assert_allclose(fvar, ref_var.astype(float), rtol=0, atol=1e-3)
    # Saved and loaded, the posterior predicts with the same (whitened) arithmetic; the whitened
    # state has its own names, so a reader of the natural-basis names cannot misuse it.
    ds = post.to_xarray()
    assert {"predictive_chol", "predictive_whitened_weights", "predictive_whitened_correction"} <= set(ds)
    assert "predictive_weights" not in ds and "predictive_correction" not in ds
    back = gd.from_xarray(ds)
    assert set(back.values) == set(post.values)
    np.testing.assert_array_equal(back.predict_f(X_new)[1], fvar)


def _nested_sine(seed):
    """Issue 14 item 14's family: n = 76 noisy sine points, noise 0.003, an SE kernel of unit
    variance and a random length-scale, and inducing sets growing by one training point."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(76, 1)) * rng.uniform(0.5, 3)
    y = np.sin(2 * X[:, 0]) + 0.05 * rng.normal(size=76)
    ls = rng.uniform(0.3, 3)
    values = {"kernel.variance": 1.0, "kernel.lengthscale": ls, "likelihood.variance": 0.003}
    return X, y, ls, values, rng.permutation(76)


def _nested_bounds(X, y, values, order, jitter):
    kernel, lik = SE(values["kernel.lengthscale"], 1.0), gd.likelihoods.Gaussian(0.003)
    evs = [collapsed.evaluate(*bound_pair(kernel, lik, values), X, y, X[order[:m]], fitc=False, jitter=jitter, need_grad=False)
           for m in range(1, 77)]
    return np.array([ev.log_evidence for ev in evs]), np.array([ev.jitter for ev in evs])


@pytest.mark.parametrize("seed", [3, 6, 13, 25])
def test_vfe_bound_at_a_fixed_jitter_never_drops_when_an_inducing_point_is_added(seed):
    """Titsias (2009) section 6: the bound with K_uu + v I is the bound of the noisy inducing
    variables f_u + eps, eps ~ N(0, v I), a lower bound on the log evidence for every fixed v that
    cannot drop when one more such variable is added.  The default ladder picks the rung per
    evaluation, so on these sequences it moves 0 -> 1e-9 at some M and the bound drops there (by
    up to 2,800 nats over 40 random sequences; issue 14 item 14): bounds compare across M only
    at equal jitter, and a fixed jitter is how to make that comparison.  Every bound is below the
    exact log evidence."""
    X, y, ls, values, order = _nested_sine(seed)
    exact = naive.exact_lml(naive.kernel(X, X, ls, 1.0, "se"), np.full(76, 0.003), y)
    fixed, _ = _nested_bounds(X, y, values, order, 1e-9)
    assert np.all(np.diff(fixed) >= -1e-7 * np.abs(fixed[1:]))
    ladder, rungs = _nested_bounds(X, y, values, order, None)
    assert np.all(fixed <= exact) and np.all(ladder <= exact)
    assert np.all(ladder >= fixed - 1e-7 * np.abs(fixed))        # a smaller rung never gives less
    step = np.nonzero(np.diff(rungs))[0][0]                      # where the ladder first leaves 0
    assert rungs[step] == 0.0 and rungs[step + 1] == 1e-9
    assert ladder[step + 1] < ladder[step] - 1.0
    # The drop is the cost of the jitter, not rounding: at v = 1e-9 both bounds are what an
    # extended-precision evaluation gives.
    for m in (step + 1, step + 2):
        ref = float(naive.vfe_bound_extended(X, X[order[:m]], ls, 1.0, np.full(76, 0.003), y, jitter=1e-9))
        assert fixed[m - 1] == pytest.approx(ref, rel=1e-7)


@pytest.mark.parametrize("m,n", [(1, 5), (21, 1000), (64, 300)])
def test_whiten_is_the_left_triangular_solve(m, n):
    """linalg.whiten (BLAS dtrsm on the transposed view) == L^-1 K by NumPy's general solver."""
    from gpdsl.linalg import whiten
    rng = np.random.default_rng(m)
    G = rng.standard_normal((m, 3 * m + 2))
    L = np.linalg.cholesky(G @ G.T / m + np.eye(m))
    K = rng.standard_normal((m, n))
    K_before = K.copy()
    A = whiten(L, K)
    assert A.shape == (m, n) and A.flags.c_contiguous
    np.testing.assert_allclose(A, np.linalg.solve(L, K), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(K, K_before)           # the input is not overwritten
    np.testing.assert_allclose(whiten(L, K[:, 0]), A[:, 0], rtol=1e-14, atol=1e-15)   # a 1-D K
