"""Model.fit: optimisation, fixed parameters, priors, restarts, progress and callbacks."""

import warnings

import numpy as np
import pytest

import gpdsl as gd

SE = gd.kernels.SquaredExponential


def _vfe(kernel=None, likelihood=None, inducing=None):
    return gd.Model(kernel=kernel or SE(1.0, 1.0), likelihood=likelihood or gd.likelihoods.Gaussian(0.1),
                    inducing=inducing or gd.inducing.KMeans(10, seed=0), inference=gd.inference.VFE())


def test_fit_increases_evidence_and_reaches_stationary_point(toy_regression):
    X, y = toy_regression
    model = _vfe()
    start = model.fit(X, y, optimize=False)
    post = model.fit(X, y)
    assert post.converged
    assert post.log_evidence > start.log_evidence + 1.0
    # At the optimum the log-space gradient vanishes (L-BFGS-B's pgtol is 1e-5).
    table = model.parameter_table(X, start.state.Z)
    ev = model.evaluate(post.values, X, y, post.state.Z)
    assert np.max(np.abs(table.chain(post.values, ev.grads))) < 1e-3


def test_fixed_by_name_and_by_wrapper(toy_regression):
    X, y = toy_regression
    post = _vfe().fit(X, y, fixed=("likelihood.variance",))
    assert post.values["likelihood.variance"] == 0.1
    assert "likelihood.variance" in post.fixed
    post2 = _vfe(kernel=SE(1.0, gd.Fixed(2.0))).fit(X, y)
    assert post2.values["kernel.variance"] == 2.0
    assert post2.values["kernel.lengthscale"] != 1.0
    with pytest.raises(ValueError, match=r"fixed names \['kernel.nope'\] are not hyperparameters"):
        _vfe().fit(X, y, fixed=("kernel.nope",))


def test_optimized_inducing_inputs_move_and_improve_bound(toy_regression):
    X, y = toy_regression
    fixed = _vfe(inducing=gd.inducing.Subsample(5, seed=1)).fit(X, y)
    moved = _vfe(inducing=gd.inducing.Optimized(gd.inducing.Subsample(5, seed=1))).fit(X, y)
    assert moved.log_evidence > fixed.log_evidence
    assert not np.allclose(moved.state.Z, fixed.state.Z)


def test_restarts_keep_the_best(toy_regression):
    X, y = toy_regression
    single = _vfe().fit(X, y)
    multi = _vfe().fit(X, y, restarts=3, seed=1)
    assert multi.log_evidence >= single.log_evidence - 1e-8


def test_map_with_prior_differs_from_ml_and_is_recorded(toy_regression):
    X, y = toy_regression
    ml = _vfe().fit(X, y)
    strong = gd.priors.LogNormal(np.log(5.0), 0.05)
    post = _vfe(kernel=SE(lengthscale=strong, variance=1.0)).fit(X, y)
    assert abs(post.values["kernel.lengthscale"] - 5.0) < abs(ml.values["kernel.lengthscale"] - 5.0)
    assert "kernel.lengthscale" in post.priors
    assert post.log_prior == pytest.approx(float(strong.log_density(post.values["kernel.lengthscale"])))
    ds = post.to_xarray()
    assert "LogNormal" in ds.attrs["priors"]
    from scipy import stats
    post_scipy = _vfe(kernel=SE(lengthscale=stats.lognorm(0.05, scale=5.0), variance=1.0)).fit(X, y)
    np.testing.assert_allclose(post_scipy.values["kernel.lengthscale"], post.values["kernel.lengthscale"],
                               rtol=1e-4)


def test_progress_and_callback(toy_regression, capsys):
    X, y = toy_regression
    steps = []
    post = _vfe().fit(X, y, progress=True, callback=steps.append)
    out = capsys.readouterr().out
    assert len(steps) == post.n_iterations > 0
    assert [s["iteration"] for s in steps] == list(range(1, len(steps) + 1))
    assert "objective" in out and "|grad|" in out
    objectives = [s["objective"] for s in steps]
    assert objectives[-1] == pytest.approx(-post.log_evidence, rel=1e-10)
    assert all(b <= a + 1e-9 for a, b in zip(objectives, objectives[1:]))


def test_non_convergence_warns_and_is_flagged(toy_regression):
    X, y = toy_regression
    with pytest.warns(gd.ConvergenceWarning, match="did not converge"):
        post = _vfe().fit(X, y, max_iter=1)
    assert not post.converged
    assert post.to_xarray().attrs["converged"] == 0


def test_heteroscedastic_polynomial_noise_recovers_growth():
    rng = np.random.default_rng(5)
    X = rng.uniform(-3, 3, size=(300, 1))
    true_var = 0.01 + 0.05 * X[:, 0] ** 2
    y = np.sin(X[:, 0]) + np.sqrt(true_var) * rng.standard_normal(300)
    hetero = gd.Model(kernel=SE(1.0, 1.0), likelihood=gd.likelihoods.HeteroscedasticGaussian(degree=2),
                      inducing=gd.inducing.KMeans(15, seed=0), inference=gd.inference.VFE()).fit(X, y)
    homo = _vfe(inducing=gd.inducing.KMeans(15, seed=0)).fit(X, y)
    assert hetero.log_evidence > homo.log_evidence + 10
    pred = hetero.predict(np.array([[0.0], [2.5]]))
    noise = pred.y_var.values - pred.f_var.values
    assert noise[1] > 5 * noise[0]


def test_known_heteroscedastic_noise_needs_noise_variance_for_y(toy_regression):
    X, y = toy_regression
    lik = gd.likelihoods.HeteroscedasticGaussian(variance=np.full(len(y), 0.05))
    post = gd.Model(kernel=SE(1.0, 1.0), likelihood=lik, inducing=gd.inducing.KMeans(8, seed=0),
                    inference=gd.inference.VFE()).fit(X, y)
    homo = _vfe(likelihood=gd.likelihoods.Gaussian(gd.Fixed(0.05)),
                inducing=gd.inducing.KMeans(8, seed=0)).fit(X, y)
    assert post.log_evidence == pytest.approx(homo.log_evidence, rel=1e-6)
    pred = post.predict(X[:3])
    assert "y_var" not in pred
    pred = post.predict(X[:3], noise_variance=0.05)
    np.testing.assert_allclose(pred.y_var - pred.f_var, 0.05)


def test_a_method_that_leaves_out_a_gradient_is_an_error(toy_regression):
    """Issue 15: ParameterTable.chain counted a missing gradient as zero, so a method that forgot
    one froze that hyperparameter silently (even one with a prior, whose gradient was added)."""
    from dataclasses import replace

    from gpdsl.fitting import _Objective
    from gpdsl.parameters import MissingGradientError

    X, y = toy_regression
    model = _vfe(likelihood=gd.likelihoods.Gaussian(gd.priors.Gamma(2.0, 20.0, initial=0.1)))
    table = model.parameter_table(X)

    def forgetful(values, X, y, Z, warm=None):
        ev = model.evaluate(values, X, y, Z, warm=warm)
        return replace(ev, grads={k: v for k, v in ev.grads.items() if k != "likelihood.variance"})

    run = _Objective(model, table, X, y, gd.inducing.KMeans(10, seed=0).initial_Z(X, y), evaluate=forgetful)
    with pytest.raises(MissingGradientError, match=r"VFE returned no gradient for .*'likelihood.variance'"):
        run(table.pack(table.values()))
    with pytest.raises(MissingGradientError, match="chain"):
        table.chain(table.values(), {})


# -- the stopping rule (issue 13) -------------------------------------------------------------------
def test_plateau_rule_on_synthetic_objective_trails():
    """The plateau rule fires on steady small gains only: not on large gains, not on gains that
    die out geometrically (L-BFGS-B converging to an optimum), not before a full window."""
    from gpdsl.fitting import PLATEAU_WINDOW, _on_plateau
    steady = list(100.0 - 0.01 * np.arange(PLATEAU_WINDOW + 1))           # 0.01 per iteration
    assert _on_plateau(steady, plateau=0.2)
    assert not _on_plateau(steady, plateau=0.05)                          # gains above the threshold
    assert not _on_plateau(steady[:-1], plateau=0.2)                      # window not yet full
    converging = list(100.0 - np.cumsum(0.05 * 0.5 ** np.arange(PLATEAU_WINDOW + 1)))
    assert not _on_plateau(converging, plateau=1.0)                       # halving gains: an optimum


def test_well_defined_optimum_is_reached_not_cut_by_the_plateau_rule():
    """Exact regression on 100 points (plateau threshold 0.1 nats over 10 iterations): the fit
    ends by SciPy's own tests at the optimum of an independent dense computation (tests/naive.py,
    BFGS on finite differences), to 1e-7 nats; a plateau stop would leave ~1e-2 on the table."""
    from scipy import optimize
    from naive import exact_lml, kernel
    X, y = gd.datasets.sine(100, seed=3)
    post = gd.Model(kernel=SE(1.0, 1.0), likelihood=gd.likelihoods.Gaussian(0.1)).fit(X, y)
    assert post.converged and post.ridge is None

    def negative(u):
        ell, sf2, sn2 = np.exp(u)
        return -exact_lml(kernel(X, X, ell, sf2, "se"), np.full(len(y), sn2), y)

    ref = optimize.minimize(negative, np.zeros(3), method="BFGS", options={"gtol": 1e-7})
    ours = np.log([post.values["kernel.lengthscale"], post.values["kernel.variance"],
                   post.values["likelihood.variance"]])
    assert post.log_evidence == pytest.approx(-ref.fun, abs=1e-7)
    np.testing.assert_allclose(ours, ref.x, atol=2e-3)


def test_runaway_kernel_variance_warns_once_and_is_flagged(tmp_path):
    """FITC-EP on 40 xor points with 8 optimised pseudo-inputs: the probit evidence keeps rising as
    the kernel variance grows (a hard classifier).  The fit ends on the plateau rule within a few
    tens of iterations with one ConvergenceWarning naming kernel.variance and suggesting a prior,
    flagged Posterior.ridge (also through netCDF); with that prior the fit converges silently."""
    X, y = gd.datasets.xor(40, seed=0)
    probit = gd.likelihoods.Bernoulli("probit", bias=gd.Fixed(0.0))
    inducing = gd.inducing.Optimized(gd.inducing.KMeans(8, seed=0))
    with pytest.warns(gd.ConvergenceWarning, match="evidence ridge") as record:
        post = gd.Model(SE(1.0, 1.0), probit, inducing, gd.inference.EP()).fit(X, y)
    ridge = [w for w in record if "ridge" in str(w.message)]
    assert len(ridge) == 1 and "plateau rule" in str(ridge[0].message)
    assert "kernel.variance ran from 1 to" in str(ridge[0].message) and "gd.priors" in str(ridge[0].message)
    assert post.converged and post.ridge == "kernel.variance" and post.values["kernel.variance"] > 1e3
    assert post.n_iterations < 100
    post.save(tmp_path / "ridge.nc")
    assert gd.load(tmp_path / "ridge.nc").ridge == "kernel.variance"
    with warnings.catch_warnings():
        warnings.simplefilter("error", gd.ConvergenceWarning)
        held = gd.Model(SE(1.0, gd.priors.LogNormal(0.0, 2.0)), probit, inducing, gd.inference.EP()).fit(X, y)
    assert held.ridge is None and held.values["kernel.variance"] < 1e3


def test_collapsing_noise_of_one_output_is_named_by_entry():
    """A per-output noise variance that collapses (output 1 is noise-free, so the latent function
    interpolates it) is reported as that entry, ``likelihood.variance[1]``, with the cause of a
    collapse rather than the kernel-growth advice; the flagged name stays the parameter's."""
    x = np.linspace(0, 5, 30)[:, None]
    noisy = np.sin(x[:, 0]) + 0.1 * np.random.default_rng(0).standard_normal(30)
    Y = np.column_stack([noisy, np.sin(x[:, 0])])
    model = gd.Model(gd.kernels.ICM(SE(), 2), gd.likelihoods.OutputGaussian(2, variance=0.1),
                     inference=gd.inference.Exact())
    with pytest.warns(gd.ConvergenceWarning, match="evidence ridge") as record:
        post = model.fit(x, Y)
    message = next(str(w.message) for w in record if "evidence ridge" in str(w.message))
    assert "likelihood.variance[1] ran from 0.1 to" in message and "fell towards 0" in message
    assert "standardize" not in message
    assert post.ridge == "likelihood.variance" and post.values["likelihood.variance"][1] < 1e-8
    assert post.values["likelihood.variance"][0] > 1e-4
