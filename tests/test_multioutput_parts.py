"""Per-output parts of multi-output models (issue 48): ``OutputGaussian`` (a noise variance per
output) and ``PerOutput`` (a mean function per output), against dense per-row formulas and central
differences, their refusals, and their model-file round trips."""
import numpy as np
import pytest

import gpdsl as gd
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
    ({}, ValueError, r"OutputGaussian: output_count must be a positive integer, got None"),
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
