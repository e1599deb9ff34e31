"""Issue 14 items 11-13: no silent coercion of arguments, value equality of components, scipy
priors kept by model files, and data scales that float64 cannot hold refused with a clear error."""
import numpy as np
import pytest
from scipy import stats

import gpdsl as gd
from gpdsl.linalg import cholesky
from gpdsl.inputs import validate_targets

SE = gd.kernels.SquaredExponential
X = np.random.default_rng(0).normal(size=(20, 2))
y = X[:, 0] - X[:, 1]


def _vfe(inducing=None, noise=0.1):
    return gd.Model(kernel=SE(1.0, 1.0), likelihood=gd.likelihoods.Gaussian(noise),
                    inducing=inducing or gd.inducing.Subsample(5), inference=gd.inference.VFE())


# -- item 11: silent coercions -------------------------------------------------------------------

@pytest.mark.parametrize("make,error,match", [
    (lambda: _vfe().fit(X, y + 1j), TypeError, "y must be real, got a complex array"),
    (lambda: gd.inducing.Fixed(X[:4] + 1j), TypeError, "Fixed: Z must be real, got a complex array"),
    (lambda: _vfe().fit(X.astype(str), y), TypeError, r"X must be a numeric array, got text \(e.g. '0.12"),
    (lambda: _vfe().fit(X, y.astype(str)), TypeError, "y must be a numeric array, got text"),
    (lambda: _vfe().fit(X, np.array([1.0, "2"] * 10, dtype=object)), TypeError, "y must be a numeric array, got text"),
    (lambda: _vfe().fit(X, [None] * 20), TypeError, "y must be a numeric array, got list holding NoneType None"),
    (lambda: gd.likelihoods.Gaussian("0.1"), TypeError,
     r"Gaussian: variance must be a number, an array, Fixed\(...\) or a prior, got text \(e.g. '0.1'"),
    (lambda: gd.Fixed("1.0"), TypeError, "Fixed: value must be a number or an array, got text"),
    (lambda: SE(lengthscale=True), TypeError,
     r"SquaredExponential: lengthscale must be a number, .*got True \(True and False are not numbers here\)"),
    (lambda: SE(variance=np.bool_(True)), TypeError, "SquaredExponential: variance must be a number"),
    (lambda: gd.likelihoods.Bernoulli(bias=False), TypeError, "Bernoulli: bias must be a number"),
    (lambda: gd.likelihoods.HeteroscedasticGaussian(degree=True), ValueError,
     "HeteroscedasticGaussian: degree must be a non-negative integer, got True"),
])
def test_no_silent_coercion(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_numbers_in_any_container_are_still_accepted():
    assert _vfe().fit(X.tolist(), np.array(list(y), dtype=object), optimize=False).converged
    assert np.array_equal(validate_targets(np.array([True, False]), 2), [1.0, 0.0])   # bool labels
    assert SE(lengthscale=np.float32(2.0), variance=np.int64(3)).variance == 3


def test_progress_must_be_a_bool(capsys):
    with pytest.raises(TypeError, match="fit: progress must be True or False, got 'no'"):
        _vfe().fit(X, y, progress="no", max_iter=2)
    assert capsys.readouterr().out == ""
    with pytest.raises(TypeError, match="fit: callback must be None or a callable taking one dict, got 5"):
        _vfe().fit(X, y, callback=5)


def test_to_inference_data_names_its_arguments():
    post = _vfe().fit(X, y, optimize=False)
    with pytest.raises(ValueError, match="to_inference_data: seed must be a non-negative integer or None, got 'a'"):
        post.to_inference_data(X, y, seed="a")
    with pytest.raises(ValueError, match="to_inference_data: draws must be a positive integer, got True"):
        post.to_inference_data(X, y, draws=True)
    with pytest.raises(ValueError, match="X_new must be a rectangular array, got a ragged nested sequence"):
        post.to_inference_data([[1.0, 2.0], [1.0]], [1.0, 2.0])
    with pytest.raises(ValueError, match="y_new must be a rectangular array, got a ragged nested sequence"):
        post.to_inference_data(X[:2], [[1.0], [1.0, 2.0]])


@pytest.mark.parametrize("make,error,match", [
    (lambda: gd.inducing.Fixed("abc"), TypeError,
     r"Fixed: Z must be an \(M, D\) array of inducing inputs, got text \(e.g. 'abc'"),
    (lambda: gd.inducing.Optimized("x"), TypeError,
     r"Optimized: init must be a gd.inducing spec or an \(M, D\) array of inducing inputs, got 'x'"),
    (lambda: gd.inducing.Optimized(np.zeros(3)), ValueError, r"Optimized: init must be .* got array"),
    (lambda: gd.inference.VFE(jitter="a"), ValueError,
     r"VFE: jitter must be None \(dynamic ladder\) or a non-negative number, got 'a'"),
    (lambda: gd.inference.EP(jitter=True), ValueError, "EP: jitter must be None"),
    (lambda: gd.priors.LogNormal("0", 1.0), ValueError, "LogNormal: mu must be a finite number, got '0'"),
    (lambda: gd.priors.ScipyPrior("gamma"), TypeError, "ScipyPrior: distribution must be a frozen scipy.stats"),
])
def test_errors_name_the_class_and_argument(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_string_labels_say_why():
    model = gd.Model(SE(), gd.likelihoods.Bernoulli(), inference=gd.inference.EP())
    with pytest.raises(TypeError, match=r"y must be a numeric array, got text \(e.g. 'a', dtype <U1\); .*"
                                        r"encode class labels as numbers \(e.g. 0/1\)"):
        model.fit(X, np.array(["a", "b"] * 10))


# -- item 12: equality, scipy priors in model files ------------------------------------------------

def test_components_holding_arrays_compare_by_value():
    Z = X[:4]
    a, b = gd.inducing.Fixed(Z), gd.inducing.Fixed(Z.copy())
    assert a == b and hash(a) == hash(b)
    assert a != gd.inducing.Fixed(Z + 1.0)

    def model(Z):
        return gd.Model(SE(np.ones(2), gd.Fixed(np.array(1.0))), gd.likelihoods.Gaussian(stats.lognorm(1.0)),
                        gd.inducing.Optimized(Z), gd.inference.VFE())

    assert model(Z) == model(Z.copy()) and len({model(Z), model(Z.copy())}) == 1
    assert model(Z) != model(Z + 1.0)
    assert SE(np.ones(2)) != SE(np.ones(2) * 2.0)
    # A list and the array it declares are one model (a model read back from a file holds arrays).
    assert SE([0.9, 1.5], 1.2) == SE(np.array([0.9, 1.5]), 1.2)
    assert hash(SE([0.9, 1.5], 1.2)) == hash(SE(np.array([0.9, 1.5]), 1.2))
    assert SE(1.0, 1.2) == SE(np.array(1.0), np.float64(1.2)) and SE([0.9, 1.5]) != SE([0.9, 1.6])
    assert gd.likelihoods.HeteroscedasticGaussian(variance=np.ones(3)) == \
        gd.likelihoods.HeteroscedasticGaussian(variance=np.ones(3))


def test_fixed_inducing_inputs_are_a_read_only_copy():
    Z = X[:4].copy()
    spec = gd.inducing.Fixed(Z)
    Z[0, 0] = 99.0                     # the caller's array is not the spec's
    assert spec.Z[0, 0] == X[0, 0]
    with pytest.raises(ValueError):
        spec.Z[0, 0] = 1.0


def _scipy_model():
    return gd.Model(SE(lengthscale=stats.gamma(2.0, scale=0.5),
                       variance=gd.priors.ScipyPrior(stats.lognorm(0.5), initial=1.5)),
                    gd.likelihoods.Gaussian(gd.Fixed(0.1)))


def test_scipy_prior_survives_to_dict_and_from_dict():
    model = _scipy_model()
    spec = model.to_dict()
    assert spec["kernel"]["lengthscale"] == {"prior": "scipy", "distribution": "gamma", "args": [2.0],
                                             "kwds": {"scale": 0.5}}
    again = gd.Model.from_dict(spec)
    assert again == model
    first, second = model.fit(X, y), again.fit(X, y)
    assert second.log_evidence == first.log_evidence and second.log_prior == first.log_prior


def test_scipy_prior_reads_from_toml(tmp_path):
    path = tmp_path / "model.toml"
    path.write_text('[kernel]\ntype = "SquaredExponential"\n'
                    'lengthscale = {prior = "scipy", distribution = "gamma", args = [2.0], kwds = {scale = 0.5}}\n'
                    '[likelihood]\ntype = "Gaussian"\n')
    assert gd.Model.from_toml(path).kernel == SE(lengthscale=stats.gamma(2.0, scale=0.5))


def test_scipy_prior_survives_save_and_load(tmp_path):
    model = _scipy_model()
    post = model.fit(X, y)
    post.save(tmp_path / "p.nc")
    loaded = gd.load(tmp_path / "p.nc")
    assert loaded.model == model
    assert loaded.model.fit(X, y).log_evidence == post.log_evidence


@pytest.mark.parametrize("table,match", [
    ({"prior": "scipy"}, r"kernel.variance: \{prior = 'scipy'\}: missing 'distribution'"),
    ({"prior": "scipy", "distribution": "os"}, "distribution must name a continuous scipy.stats distribution"),
    ({"prior": "scipy", "distribution": "poisson", "args": [1.0]}, "must name a continuous scipy.stats"),
    ({"prior": "scipy", "distribution": "gamma", "args": 2.0}, "args must be a list and kwds a table"),
    ({"prior": "scipy", "distribution": "gamma", "args": [2.0], "kwds": {"sclae": 1.0}},
     r"\{prior = 'scipy'\}: .*sclae"),
])
def test_bad_scipy_prior_tables(table, match):
    with pytest.raises(ValueError, match=match):
        gd.Model.from_dict({"kernel": {"type": "SquaredExponential", "variance": table},
                            "likelihood": {"type": "Gaussian"}})


def test_unwritable_scipy_prior_is_an_error_not_dropped():
    class Custom(stats.rv_continuous):
        def _pdf(self, x):
            return np.exp(-x)

    model = gd.Model(SE(variance=gd.priors.ScipyPrior(Custom(a=0.0, name="custom")(), initial=1.0)),
                     gd.likelihoods.Gaussian(0.1))
    with pytest.raises(ValueError, match="to_dict: the prior .* cannot be written"):
        model.to_dict()


# -- item 13: data scales float64 cannot hold ------------------------------------------------------

def test_inputs_whose_distances_overflow_are_refused():
    with pytest.raises(ValueError, match=r"X holds values up to 2.33e\+300 in magnitude, too large for float64.*"
                                         "rescale X"):
        _vfe(gd.inducing.KMeans(5)).fit(X * 1e300, y)
    with pytest.raises(ValueError, match="KMeans: X holds values up to"):
        gd.inducing.KMeans(5).initial_Z(X * 1e300, y)


@pytest.mark.parametrize("inference", ["VFE", "Exact"])
def test_targets_whose_squares_overflow_are_refused(inference):
    model = _vfe() if inference == "VFE" else gd.Model(SE(), gd.likelihoods.Gaussian(0.1))
    with pytest.raises(ValueError, match=r"y holds values up to 2.11e\+200 in magnitude.*rescale y"):
        model.fit(X, y * 1e200)


def test_optimiser_overflow_names_the_data_scale_not_duplicate_inputs():
    with pytest.raises(ValueError, match=r"fit: L-BFGS-B stepped to non-finite hyperparameters.* y up to "
                                         r"2.11e\+100 .*standardise X and y") as caught:
        _vfe().fit(X, y * 1e100)
    assert not isinstance(caught.value, gd.NotPositiveDefiniteError)


def test_non_finite_evidence_is_never_returned():
    with pytest.raises(ValueError, match="fit: the log evidence at the declared hyperparameters is nan"):
        _vfe(noise=1e-10).fit(X, y * 1e150, optimize=False)


@pytest.mark.parametrize("K,jitter,match", [
    (np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), 0.0,
     r"1 pair\(s\) of its rows are identical to rounding, e.g. rows 0 and 1: duplicate inputs; remove them, "
     r"or pass jitter=None"),
    (np.full((3, 3), np.nan), None, "it has NaN or infinite entries"),
    (np.ones((3, 3)), 0.0, "all its rows are equal to rounding: the length-scale is far longer"),
    (np.array([[1.0, 0.0], [0.0, -5.0]]), None, r"its diagonal has entries <= 0"),
    (np.array([[1.0, 2.0], [2.0, 1.0]]), None, "no duplicate rows, so the hyperparameters are extreme"),
])
def test_not_positive_definite_hint_names_what_it_detects(K, jitter, match):
    with pytest.raises(gd.NotPositiveDefiniteError, match=match) as caught:
        cholesky(K, jitter, what="K_uu")
    if "duplicate" not in match:
        assert "duplicate inputs" not in str(caught.value)


def test_duplicate_inducing_inputs_are_named_when_present():
    Z = np.vstack([X[:4], X[:1]])
    model = gd.Model(SE(), gd.likelihoods.Gaussian(0.1), gd.inducing.Fixed(Z), gd.inference.VFE(jitter=0.0))
    with pytest.raises(gd.NotPositiveDefiniteError, match="rows 0 and 4: duplicate inputs"):
        model.fit(X, y, optimize=False)
