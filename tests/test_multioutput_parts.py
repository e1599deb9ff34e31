"""Per-output parts of multi-output models (issue 48): ``OutputGaussian`` (a noise variance per
output) and ``PerOutput`` (a mean function per output), against dense per-row formulas and central
differences, their refusals, and their model-file round trips."""
import numpy as np
import pytest

import gpdsl as gd
from gpdsl import multioutput
from gpdsl.checks import output_indices
from naive import central_difference

RNG = np.random.default_rng(48)
# Long-layout inputs: two features and the output index (3 outputs, rows in no particular order).
FEATURES = RNG.uniform(-1.5, 1.5, size=(11, 2))
INDEX = np.array([0, 2, 1, 1, 0, 2, 2, 0, 1, 2, 0])
X = np.column_stack([FEATURES, INDEX.astype(float)])
VARIANCES = np.array([0.2, 0.5, 1.1])


# -- OutputGaussian -------------------------------------------------------------------------------
def test_output_gaussian_noise_is_each_rows_output_variance():
    lik = gd.likelihoods.OutputGaussian(3, variance=VARIANCES).bind()
    want = np.array([VARIANCES[p] for p in INDEX])
    np.testing.assert_array_equal(lik.noise(X), want)
    np.testing.assert_allclose(lik.log_noise(X), np.log(want), rtol=1e-15)
    surrogate_w, surrogate_r = lik.surrogate(X, np.arange(11.0))
    np.testing.assert_allclose(surrogate_w, 1.0 / want, rtol=1e-15)
    np.testing.assert_allclose(surrogate_r, np.arange(11.0) / want, rtol=1e-15)
    # A scalar declared start is every output's.
    np.testing.assert_array_equal(gd.likelihoods.OutputGaussian(3, variance=0.7).bind().noise(X), np.full(11, 0.7))


def test_output_gaussian_noise_vjp_is_the_scatter_add_and_matches_central_differences():
    g = RNG.normal(size=11)
    lik = gd.likelihoods.OutputGaussian(3, variance=VARIANCES)
    grads = lik.bind().noise_vjp(X, g)
    np.testing.assert_allclose(grads["variance"], [g[INDEX == p].sum() for p in range(3)], rtol=1e-14)
    fd = central_difference(lambda v: g @ lik.bind({"variance": v}).noise(X), VARIANCES)
    np.testing.assert_allclose(grads["variance"], fd, rtol=1e-8, atol=1e-10)
    # An output without rows gets a zero gradient, still of shape (P,).
    out = gd.likelihoods.OutputGaussian(4, variance=0.3).bind().noise_vjp(X, g)["variance"]
    assert out.shape == (4,) and out[3] == 0.0


def test_output_gaussian_parameter_is_per_output_with_an_output_dim():
    (param,) = gd.likelihoods.OutputGaussian(3, variance=0.4).parameters(X)
    assert (param.name, param.shape, param.dims, param.positive) == ("variance", (3,), ("output",), True)
    (made,) = gd.likelihoods.OutputGaussian(3, variance=0.4).entries("likelihood", X)
    assert made.name == "likelihood.variance" and made.dims == ("output",)
    np.testing.assert_array_equal(made.value, [0.4, 0.4, 0.4])


def test_output_gaussian_provides_noise_only_and_the_collapsed_methods_accept_it():
    lik = gd.likelihoods.OutputGaussian(2)
    assert lik.provides("noise") and lik.observation_noise
    assert not lik.provides("log_density_derivatives") and not lik.provides("site_model")
    accepted = {name for name, method in gd.inference.INFERENCE.items() if method().accepts(lik)}
    assert accepted == {"Exact", "VFE", "DTC", "FITC"}
    assert lik.describe() == "OutputGaussian(2)" and not lik.reads_input_columns


@pytest.mark.parametrize("column,shown", [(1.5, "1.5"), (3.0, "3.0"), (-1.0, "-1.0"), (np.nan, "nan")])
def test_output_gaussian_refuses_an_output_column_that_is_not_an_index(column, shown):
    bad = X.copy()
    bad[4, -1] = column
    lik = gd.likelihoods.OutputGaussian(3, variance=VARIANCES).bind()
    for call in (lambda: lik.noise(bad), lambda: lik.noise_vjp(bad, np.ones(11))):
        with pytest.raises(ValueError, match=rf"OutputGaussian: the last column of X is the output index and must "
                                             rf"hold integers 0..2 .*got {shown} at row 4"):
            call()


@pytest.mark.parametrize("kwargs,error,match", [
    ({}, TypeError, r"missing 1 required positional argument: 'output_count'"),
    ({"output_count": None}, ValueError, r"OutputGaussian: output_count must be a positive integer, got None"),
    ({"output_count": 0}, ValueError, r"output_count must be a positive integer, got 0"),
    ({"output_count": 2.0}, ValueError, r"output_count must be a positive integer, got 2.0"),
    ({"output_count": 3, "variance": [0.1, 0.2]}, ValueError, r"variance has 2 entries but output_count is 3"),
    ({"output_count": 2, "variance": [0.1, -0.2]}, ValueError, r"OutputGaussian: variance must be positive"),
    ({"output_count": 2, "variance": "0.1"}, TypeError, r"OutputGaussian: variance must be"),
])
def test_output_gaussian_refuses_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        gd.likelihoods.OutputGaussian(**kwargs)


def test_output_indices_names_the_owner_and_the_shape():
    np.testing.assert_array_equal(output_indices("owner", X, 3), INDEX)
    with pytest.raises(ValueError, match=r"owner: X must be a 2-D array whose last column is the output index, "
                                         r"got shape \(11,\)"):
        output_indices("owner", INDEX, 3)


# -- PerOutput ------------------------------------------------------------------------------------
PARTS = (gd.means.Constant(0.3), gd.means.Linear(np.array([0.5, -0.2])), gd.means.Constant(0.3) + gd.means.Linear(0.1))


def test_per_output_value_is_each_rows_own_mean_on_the_features():
    mean = gd.means.PerOutput(PARTS).bind()
    want = np.array([0.3 if p == 0 else (x @ [0.5, -0.2] if p == 1 else 0.3 + 0.1 * x.sum())
                     for x, p in zip(FEATURES, INDEX)])
    np.testing.assert_allclose(mean.value(X), want, rtol=1e-14, atol=1e-15)
    assert mean.output_count == 3 and not mean.reads_input_columns


def test_per_output_parameters_are_named_by_output_and_sized_by_the_features():
    names = {e.name: e.value.shape for e in gd.means.PerOutput(PARTS).entries("mean", X)}
    assert names == {"mean.0.constant": (), "mean.1.coefficients": (2,), "mean.2.0.constant": (),
                     "mean.2.1.coefficients": (2,)}


def test_per_output_vjp_matches_central_differences():
    mean = gd.means.PerOutput(PARTS)
    values = {p.name: e.value for p, e in zip(mean.parameters(X), mean.entries("m", X))}
    g = RNG.normal(size=11)
    grads = mean.bind(values).vjp(X, g)
    assert set(grads) == set(values)
    for name, value in values.items():
        fd = central_difference(lambda v: g @ mean.bind({**values, name: v}).value(X), value)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-7, atol=1e-10, err_msg=name)
    # Output 0's constant collects exactly its own rows' adjoints.
    np.testing.assert_allclose(grads["0.constant"], g[INDEX == 0].sum(), rtol=1e-14)


def test_per_output_with_an_output_without_rows_gives_it_zero_gradients():
    mean = gd.means.PerOutput(PARTS + (gd.means.Linear(np.array([1.0, 2.0])),)).bind()
    grads = mean.vjp(X, np.ones(11))
    np.testing.assert_array_equal(grads["3.coefficients"], [0.0, 0.0])


def test_per_output_refuses_bad_means_and_bad_output_columns():
    for bad in ((), [gd.means.Constant()], (gd.means.Constant(), "Zero")):
        with pytest.raises(TypeError, match="PerOutput: means must be a non-empty tuple of gd.means mean functions"):
            gd.means.PerOutput(bad)
    wrong = X.copy()
    wrong[2, -1] = 3.0
    with pytest.raises(ValueError, match=r"PerOutput: the last column of X is the output index .* 0..2 .*got 3.0 at "
                                         r"row 2"):
        gd.means.PerOutput(PARTS).bind().value(wrong)


def test_which_components_read_input_columns():
    """The flag the model reads to refuse a component that would take the output column for a
    feature: a linear mean (alone or in a sum) and the heteroscedastic noise model do."""
    assert gd.means.Linear().reads_input_columns and (gd.means.Constant() + gd.means.Linear()).reads_input_columns
    assert not gd.means.Constant().reads_input_columns and not gd.means.Zero().reads_input_columns
    assert not (gd.means.Constant() + gd.means.Zero()).reads_input_columns
    assert gd.likelihoods.HeteroscedasticGaussian(degree=1).reads_input_columns
    assert not gd.likelihoods.HeteroscedasticGaussian(variance=np.ones(3)).reads_input_columns
    assert not gd.likelihoods.Gaussian().reads_input_columns and not gd.likelihoods.Bernoulli().reads_input_columns


# -- model files ----------------------------------------------------------------------------------
def test_parts_round_trip_through_the_model_codec():
    from gpdsl.io.spec import component_from_dict, component_to_dict

    lik = gd.likelihoods.OutputGaussian(3, variance=gd.Fixed(np.array([0.2, 0.5, 1.1])))
    mean = gd.means.PerOutput(PARTS)
    assert component_from_dict("likelihood", component_to_dict(lik)) == lik
    assert component_to_dict(lik) == {"type": "OutputGaussian", "output_count": 3,
                                      "variance": {"fixed": [0.2, 0.5, 1.1]}}
    assert component_from_dict("mean", component_to_dict(mean)) == mean
    with pytest.raises(ValueError, match=r"likelihood \(OutputGaussian\): missing 'output_count'"):
        component_from_dict("likelihood", {"type": "OutputGaussian", "variance": 0.1})


# -- in a model -----------------------------------------------------------------------------------
BASE = gd.kernels.SquaredExponential(np.array([0.9, 1.3]), 1.1)
W0 = np.array([[0.8, -0.3], [0.5, 0.9], [-0.4, 0.6]])
KAPPA0 = np.array([0.3, 0.7, 0.2])
ICM = gd.kernels.ICM(BASE, 3, rank=2, W=W0, kappa=KAPPA0)
Y = np.sin(1.3 * FEATURES[:, 0]) + 0.4 * INDEX + 0.2 * FEATURES[:, 1] + 0.1 * RNG.normal(size=11)


def _dense_prior(X1, X2, lengthscale=np.array([0.9, 1.3]), variance=1.1, W=W0, kappa=KAPPA0):
    """B[p, p'] k(x, x') by broadcasting (tests/naive.py's SE kernel times the dense B)."""
    from naive import kernel

    B = W @ W.T + np.diag(kappa)
    p1, p2 = X1[:, -1].astype(int), X2[:, -1].astype(int)
    return B[np.ix_(p1, p2)] * kernel(X1[:, :-1], X2[:, :-1], lengthscale, variance, "se")


def _dense_mean(X_):
    return np.array([0.3 if p == 0 else (x @ [0.5, -0.2] if p == 1 else 0.3 + 0.1 * x.sum())
                     for x, p in zip(X_[:, :-1], X_[:, -1].astype(int))])


def test_exact_evidence_with_per_output_noise_and_means_is_the_dense_gaussian():
    """log N(y | m(X), B[p, p'] k(x, x') + diag(variance[p])) with the per-output mean, to 1e-10."""
    from naive import exact_lml

    model = gd.Model(ICM, gd.likelihoods.OutputGaussian(3, variance=VARIANCES), mean=gd.means.PerOutput(PARTS))
    values = model.parameter_table(X).values()
    ev = model.evaluate(values, X, Y, None)
    want = exact_lml(_dense_prior(X, X), VARIANCES[INDEX], Y - _dense_mean(X))
    np.testing.assert_allclose(ev.log_evidence, want, rtol=1e-10)


@pytest.mark.parametrize("method", ["Exact", "VFE", "FITC"])
def test_model_gradients_with_per_output_parts_match_central_differences(method):
    import gpdsl.testing as gt

    inference = gt.tight(gd.inference.INFERENCE[method]())
    inducing = gd.inducing.Optimized(FEATURES[:4] + 0.05) if method != "Exact" else None
    model = gd.Model(ICM, gd.likelihoods.OutputGaussian(3, variance=VARIANCES), inducing, inference,
                     mean=gd.means.PerOutput(PARTS))
    ev = gt.check_model_gradients(model, X, Y, FEATURES[:4] + 0.05 if inducing else None)
    assert {"likelihood.variance", "mean.0.constant", "mean.2.1.coefficients", "kernel.W"} <= set(ev.grads)
    assert ev.grads["likelihood.variance"].shape == (3,)


def test_vfe_with_every_input_inducing_equals_exact_with_per_output_noise():
    """Z = the distinct inputs (each at every output) makes the VFE bound the exact evidence."""
    lik = gd.likelihoods.OutputGaussian(3, variance=VARIANCES)
    exact = gd.Model(ICM, lik, mean=gd.means.PerOutput(PARTS))
    vfe = gd.Model(ICM, lik, gd.inducing.Fixed(FEATURES), gd.inference.VFE(), mean=gd.means.PerOutput(PARTS))
    values = exact.parameter_table(X).values()
    a = exact.evaluate(values, X, Y, None)
    b = vfe.evaluate(values, X, Y, FEATURES)
    np.testing.assert_allclose(b.log_evidence, a.log_evidence, rtol=1e-7)
    for name, g in a.grads.items():
        np.testing.assert_allclose(b.grads[name], g, rtol=1e-5, atol=1e-7, err_msg=name)


def _fitted(optimize=False, **fit):
    model = gd.Model(ICM, gd.likelihoods.OutputGaussian(3, variance=VARIANCES), mean=gd.means.PerOutput(PARTS))
    return model, model.fit(X, Y, optimize=optimize, **fit)


X_NEW = np.column_stack([FEATURES[:5] + 0.1, [0, 1, 2, 1, 2]])
Y_NEW = np.array([0.1, 0.7, 1.4, 0.2, -0.3])


def test_predictions_add_each_rows_output_noise_to_the_dense_posterior():
    """predict at long rows: f from the dense GP formulas (the mean added back), y_var = f_var +
    variance[p]; at inputs (n, D) every output's, the same per column; log_predictive is the
    normal density of those moments."""
    from naive import exact_predict
    from scipy import stats

    _, post = _fitted()
    mean, var = exact_predict(_dense_prior(X, X), _dense_prior(X_NEW, X), np.diag(_dense_prior(X_NEW, X_NEW)),
                              VARIANCES[INDEX], Y - _dense_mean(X))
    mean = mean + _dense_mean(X_NEW)
    pred = post.predict(X_NEW)
    p = X_NEW[:, -1].astype(int)
    np.testing.assert_allclose(pred["f_mean"].values, mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pred["f_var"].values, var, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pred["y_var"].values, var + VARIANCES[p], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(post.log_predictive(X_NEW, Y_NEW), stats.norm.logpdf(Y_NEW, mean, np.sqrt(var + VARIANCES[p])),
                               rtol=1e-9)
    wide = post.predict(FEATURES[:3] + 0.1)
    assert wide["y_var"].dims == ("obs", "output")
    np.testing.assert_allclose(wide["y_var"].values, wide["f_var"].values + VARIANCES[None, :], rtol=1e-12)
    # Row 1 of X_NEW is FEATURES[1] + 0.1 at output 1: the same as the wide prediction's.
    np.testing.assert_allclose(wide["y_var"].values[1, 1], pred["y_var"].values[1], rtol=1e-10)


def test_arviz_draws_of_y_use_each_rows_output_noise():
    """The log_likelihood group is log N(y | f_draw, variance[p]) of the row's output."""
    from scipy import stats

    _, post = _fitted()
    idata = post.to_inference_data(X_NEW, Y_NEW, draws=50, chains=2)
    f = idata.posterior["f"].values
    p = X_NEW[:, -1].astype(int)
    np.testing.assert_allclose(idata.log_likelihood["y"].values, stats.norm.logpdf(Y_NEW, f, np.sqrt(VARIANCES[p])),
                               rtol=1e-10)
    noise = idata.posterior_predictive["y"].values - f
    assert noise.shape == f.shape and np.all(np.isfinite(noise))


def test_fitted_posterior_with_per_output_parts_saves_and_loads(tmp_path):
    """A fitted ICM + OutputGaussian + PerOutput posterior loads back with the same values (the
    noise with its ``output`` dim) and the same predictions to the bit."""
    model, post = _fitted(optimize=True, max_iter=5)
    post.save(tmp_path / "post.nc")
    back = gd.load(tmp_path / "post.nc")
    assert back.model == model
    for name, value in post.values.items():
        np.testing.assert_array_equal(back.values[name], value, err_msg=name)
    for a, b in ((post.predict(X_NEW), back.predict(X_NEW)), (post.predict(FEATURES[:3]), back.predict(FEATURES[:3]))):
        for name in a.data_vars:
            np.testing.assert_array_equal(b[name].values, a[name].values, err_msg=name)
    assert post.to_xarray()["likelihood.variance"].dims == ("output",)


@pytest.mark.parametrize("kernel", [ICM, gd.kernels.LMC((BASE, gd.kernels.Matern32(0.7, name="rough")), 3, rank=2)])
def test_multi_output_models_round_trip_through_dicts_and_model_files(kernel, tmp_path):
    """ICM and LMC with OutputGaussian, PerOutput (a sum among its parts, a fixed noise) and
    optimised inducing inputs: to_dict/from_dict and to_toml/from_toml give the same model."""
    model = gd.Model(kernel, gd.likelihoods.OutputGaussian(3, variance=gd.Fixed(VARIANCES)),
                     gd.inducing.Optimized(FEATURES[:4]), gd.inference.VFE(), mean=gd.means.PerOutput(PARTS))
    assert gd.Model.from_dict(model.to_dict()) == model
    (tmp_path / "model.toml").write_text(model.to_toml())
    assert gd.Model.from_toml(tmp_path / "model.toml") == model
    assert gd.Model.from_toml(model.to_toml()) == model


def test_standardized_fit_adds_each_outputs_noise_in_the_datas_units():
    """standardize=True scales each output's targets by their own mean and scale (the fit to
    targets standardised per output by hand): output p's noise is its fitted variance times
    y_scale[p]^2 in predict, log_predictive and noise_variance."""
    from scipy import stats

    model = gd.Model(ICM, gd.likelihoods.OutputGaussian(3, variance=VARIANCES), mean=gd.means.PerOutput(PARTS))
    scale, shift = np.array([10.0, 0.1, 300.0]), np.array([3.0, -1.0, 50.0])
    y = Y * scale[INDEX] + shift[INDEX]
    post = model.fit(X, y, max_iter=5, standardize=True)
    mu = np.array([y[INDEX == p].mean() for p in range(3)])
    sd = np.array([y[INDEX == p].std() for p in range(3)])
    np.testing.assert_allclose(post.standardization.y_mean, mu, rtol=1e-13)
    np.testing.assert_allclose(post.standardization.y_scale, sd, rtol=1e-13)
    x_mu, x_sd = FEATURES.mean(axis=0), FEATURES.std(axis=0)
    manual = model.fit(np.column_stack([(FEATURES - x_mu) / x_sd, INDEX]), (y - mu[INDEX]) / sd[INDEX], max_iter=5)
    for name, value in manual.values.items():
        np.testing.assert_allclose(post.values[name], value, rtol=1e-8, err_msg=name)
    p = X_NEW[:, -1].astype(int)
    noise = post.values["likelihood.variance"][p] * sd[p] ** 2
    np.testing.assert_allclose(post.noise_variance(X_NEW), noise, rtol=1e-12)
    pred = post.predict(X_NEW)
    np.testing.assert_allclose(pred["y_var"].values - pred["f_var"].values, noise, rtol=1e-10)
    X_hand = np.column_stack([(X_NEW[:, :-1] - x_mu) / x_sd, p])
    np.testing.assert_allclose(pred["y_mean"].values, mu[p] + sd[p] * manual.predict(X_hand)["y_mean"].values,
                               rtol=1e-8)
    np.testing.assert_allclose(post.log_predictive(X_NEW, Y_NEW),
                               stats.norm.logpdf(Y_NEW, pred["y_mean"].values, np.sqrt(pred["y_var"].values)),
                               rtol=1e-10)


def test_noise_variance_takes_the_inputs_predict_f_takes():
    """noise_variance at inputs (n, D) gives every output's, (n, P), as predict_f; at long rows
    (n, D+1) each row's output's; given variances are (n, P) there, and another shape is refused."""
    post = gd.Model(ICM, gd.likelihoods.OutputGaussian(3, variance=VARIANCES)).fit(X, Y, optimize=False)
    np.testing.assert_array_equal(post.noise_variance(FEATURES[:4]), np.tile(VARIANCES, (4, 1)))
    assert post.noise_variance(FEATURES[:4]).shape == post.predict_f(FEATURES[:4])[1].shape
    np.testing.assert_array_equal(post.noise_variance(X_NEW), VARIANCES[X_NEW[:, -1].astype(int)])
    given = np.arange(1.0, 7.0).reshape(2, 3)
    np.testing.assert_array_equal(post.noise_variance(FEATURES[:2], given), given)
    with pytest.raises(ValueError, match=r"predict: noise_variance must be a number or have shape \(2, 3\)"):
        post.noise_variance(FEATURES[:2], np.ones(2))


def test_a_dask_X_of_long_rows_gives_the_in_memory_objective_with_per_output_parts():
    """VFE with OutputGaussian and PerOutput on a Dask X (chunks of 4 long rows) equals in memory."""
    da = pytest.importorskip("dask.array")
    Z = FEATURES[:4]
    model = gd.Model(ICM, gd.likelihoods.OutputGaussian(3, variance=VARIANCES), gd.inducing.Fixed(Z),
                     gd.inference.VFE(chunk_size=4), mean=gd.means.PerOutput(PARTS))
    values = model.parameter_table(X, Z).values()
    memory = model.evaluate(values, X, Y, Z)
    lazy = model.evaluate(values, da.from_array(X, chunks=(4, 3)), Y, Z)
    np.testing.assert_allclose(lazy.log_evidence, memory.log_evidence, rtol=1e-12)
    for name, g in memory.grads.items():
        np.testing.assert_allclose(lazy.grads[name], g, rtol=1e-10, atol=1e-12, err_msg=name)


def test_output_groups_are_each_outputs_rows():
    """multioutput.output_groups, which both PerOutput parts dispatch by: each output's rows in
    order, outputs without rows left out unless asked for (then empty)."""
    index = np.array([2, 0, 2, 2, 0])
    assert [(p, rows.tolist()) for p, rows in multioutput.output_groups(index, 4)] == [(0, [1, 4]), (2, [0, 2, 3])]
    every = multioutput.output_groups(index, 4, empty=True)
    assert [p for p, _ in every] == [0, 1, 2, 3] and every[1][1].size == every[3][1].size == 0
    assert all(rows.dtype == np.intp for _, rows in every)
