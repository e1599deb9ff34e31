"""The Kronecker form of Exact's predictive state (gpdsl/methods/kronecker_state.py): an ICM fit on
a full isotopic grid keeps the factors of K, not (N P) x (N P) arrays, and predicts what the dense
general path (Exact(jitter=0.0), whose state holds the Cholesky factor of K) predicts to 1e-10:
f's mean, variance and joint covariance over (point, output) pairs, y's predictive, the log
predictive density, q(u) and the draws of to_inference_data; a save and load give it back bit for
bit; the dense states keep their file layout (the identity correction written, read back as None),
and files of the dense layout (those written before the Kronecker form) still load."""
from __future__ import annotations

import dataclasses
import tracemalloc

import numpy as np
import pytest

import gpdsl as gd
import naive
from gpdsl.io.layout import checksum
from gpdsl.methods.kronecker_state import KroneckerState

RNG = np.random.default_rng(4850)
N, P = 30, 3
INPUTS = RNG.uniform(-2.0, 2.0, size=(N, 2))
Y = np.column_stack([np.sin(INPUTS[:, 0] + p) + 0.3 * INPUTS[:, 1] for p in range(P)]) + 0.1 * RNG.normal(size=(N, P))
NOISE = np.array([0.05, 0.3, 0.12])
W = np.array([[0.9, -0.2], [0.4, 0.7], [-0.5, 0.3]])
X_NEW = RNG.uniform(-2.5, 2.5, size=(6, 2))
Y_NEW = RNG.normal(size=(6, P))

CASES = {
    "rank-1": dict(rank=1),
    "rank-2": dict(rank=2),
    "rank-2-mean-standardized": dict(rank=2, mean=True, standardize=True),
}


def _model(rank, mean=False, jitter=None):
    kernel = gd.kernels.ICM(gd.kernels.Matern52(np.array([0.8, 1.4]), 1.2), P, rank=rank, W=W[:, :rank],
                            kappa=np.array([0.2, 0.4, 0.1]))
    return gd.Model(kernel, gd.likelihoods.OutputGaussian(P, variance=NOISE), None, gd.inference.Exact(jitter=jitter),
                    mean=gd.means.Constant(0.3) if mean else None)


_FITS = {}


def _fits(case):
    """(Kronecker posterior, general-path posterior) of the case, at the declared hyperparameters."""
    if case not in _FITS:
        spec = CASES[case]
        standardize = spec.get("standardize", False)
        fast = _model(spec["rank"], spec.get("mean", False)).fit(INPUTS, Y, optimize=False, standardize=standardize)
        general = _model(spec["rank"], spec.get("mean", False), jitter=0.0).fit(INPUTS, Y, optimize=False,
                                                                                standardize=standardize)
        _FITS[case] = fast, general
    return _FITS[case]


def _close(a, b, rtol=1e-10):
    """a equals b to rtol relative to b's largest entry (a variance near 0 has no relative digits)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=0, atol=rtol * np.abs(b).max())


@pytest.mark.parametrize("case", CASES)
def test_kronecker_fit_keeps_the_factors(case):
    """The ICM fit takes the Kronecker form, the jitter-0 fit the dense one (its identity
    correction not stored); the Kronecker state holds no array of (N P)^2 entries (its largest
    is V, N^2), the dense one three."""
    fast, general = _fits(case)
    assert isinstance(fast.state, KroneckerState) and fast.state.form == "kronecker"
    assert general.state.form == "whitened" and general.state.correction is None
    NP = N * P
    sizes = {name: value.size for name, value in vars(fast.state).items() if isinstance(value, np.ndarray)}
    assert max(sizes.values()) == N * N and sizes["input_vectors"] == N * N, sizes
    assert all(size < NP * NP for size in sizes.values())
    dense = [name for name, value in vars(general.state).items() if isinstance(value, np.ndarray) and value.size == NP * NP]
    assert sorted(dense) == ["chol", "q_cov"]


@pytest.mark.parametrize("case", CASES)
def test_predictions_equal_the_general_path(case):
    """predict_f (every output, and one output a row), predict_f_full_cov over (point, output)
    pairs (n, P, n, P), predict's y_mean and y_var, log_predictive: the general path's to 1e-10."""
    fast, general = _fits(case)
    for a, b in zip(fast.predict_f(X_NEW), general.predict_f(X_NEW)):
        assert a.shape == (len(X_NEW), P)
        _close(a, b)
    rows = np.column_stack([X_NEW, np.arange(len(X_NEW)) % P])        # one output a row
    for a, b in zip(fast.predict_f(rows), general.predict_f(rows)):
        _close(a, b)
    (mean_a, cov_a), (mean_b, cov_b) = fast.predict_f_full_cov(X_NEW), general.predict_f_full_cov(X_NEW)
    assert cov_a.shape == (len(X_NEW), P, len(X_NEW), P)
    _close(mean_a, mean_b)
    _close(cov_a, cov_b)
    for a, b in zip(fast.predict_f_full_cov(rows), general.predict_f_full_cov(rows)):
        _close(a, b)
    ds_a, ds_b = fast.predict(X_NEW), general.predict(X_NEW)
    assert set(ds_a) == set(ds_b) == {"f_mean", "f_var", "y_mean", "y_var"}
    for name in ds_b:
        _close(ds_a[name].values, ds_b[name].values)
    _close(fast.log_predictive(X_NEW, Y_NEW), general.log_predictive(X_NEW, Y_NEW))


def test_predictions_equal_the_dense_formula():
    """Independently of both paths: the Kronecker posterior's f mean, variance and joint covariance
    at new points of every output equal K_*f (K + Lambda)^-1 y and K_** - K_*f (K + Lambda)^-1 K_f*
    formed densely (tests/naive.py) to 1e-10."""
    fast, _ = _fits("rank-2")
    k = _model(2).kernel.bind()
    X = naive.isotopic_grid(INPUTS, P)
    new = np.column_stack([np.repeat(X_NEW, P, axis=0), np.tile(np.arange(P), len(X_NEW))])   # point-major
    noise = np.repeat(NOISE, N)
    ref_mean, ref_var = naive.exact_predict(k.gram(X, X), k.gram(new, X), k.diag(new), noise, Y.T.ravel())
    K_inv = np.linalg.inv(k.gram(X, X) + np.diag(noise))
    ref_cov = k.gram(new, new) - k.gram(new, X) @ K_inv @ k.gram(X, new)
    mean, var = fast.predict_f(X_NEW)
    _close(np.ravel(mean), ref_mean)
    _close(np.ravel(var), ref_var)
    _close(fast.predict_f_full_cov(X_NEW)[1].reshape(len(new), len(new)), ref_cov)


@pytest.mark.parametrize("case", CASES)
def test_q_of_f_at_the_training_inputs_equals_the_general_path(case):
    """q_mean (held) and q_cov (formed on demand from the factors) equal the general path's
    K_ff alpha and K_ff - K_ff K^-1 K_ff to 1e-10."""
    fast, general = _fits(case)
    _close(fast.state.q_mean, general.state.q_mean)
    q_cov = fast.state.q_cov
    assert q_cov.shape == (N * P, N * P)
    np.testing.assert_array_equal(q_cov, q_cov.T)
    _close(q_cov, general.state.q_cov)


def test_draws_equal_the_general_path():
    """to_inference_data's joint draws of f and y at new points of every output (its
    predict_f_full_cov, factorised) equal the general path's at the same seed to 1e-8 (the
    covariance's 1e-10 through its Cholesky factor), and so does the log-likelihood of Y_NEW."""
    fast, general = _fits("rank-2")
    a = fast.to_inference_data(X_NEW, Y_NEW, draws=20, chains=2, seed=3)
    b = general.to_inference_data(X_NEW, Y_NEW, draws=20, chains=2, seed=3)
    assert a.posterior["f"].shape == (2, 20, len(X_NEW), P)
    _close(a.posterior["f"].values, b.posterior["f"].values, rtol=1e-8)
    _close(a.posterior_predictive["y"].values, b.posterior_predictive["y"].values, rtol=1e-8)
    _close(a.log_likelihood["y"].values, b.log_likelihood["y"].values, rtol=1e-8)


@pytest.mark.parametrize("case", CASES)
def test_save_and_load_give_the_state_back_bit_for_bit(case, tmp_path):
    """The file holds the factors and no (N P)^2 variable (no q_cov, correction or Cholesky
    factor); the loaded state has the very same arrays and predicts the very same numbers."""
    fast, _ = _fits(case)
    ds = fast.to_xarray()
    assert {"q_cov", "predictive_chol", "predictive_whitened_correction", "inducing_bis"}.isdisjoint(ds.variables)
    assert all(ds[name].size < (N * P) ** 2 for name in ds.variables)
    assert ds["predictive_kronecker_input_vectors"].dims == ("point", "point_eigen")
    fast.save(tmp_path / "kron.nc")
    back = gd.load(tmp_path / "kron.nc")
    assert isinstance(back.state, KroneckerState)
    for field in dataclasses.fields(KroneckerState):
        np.testing.assert_array_equal(getattr(back.state, field.name), getattr(fast.state, field.name),
                                      err_msg=field.name)
    for a, b in zip(back.predict_f_full_cov(X_NEW), fast.predict_f_full_cov(X_NEW)):
        np.testing.assert_array_equal(a, b)
    for name, value in fast.predict(X_NEW).items():
        np.testing.assert_array_equal(back.predict(X_NEW)[name].values, value.values, err_msg=name)
    np.testing.assert_array_equal(back.log_predictive(X_NEW, Y_NEW), fast.log_predictive(X_NEW, Y_NEW))


def test_a_dense_file_of_a_kronecker_model_still_loads(tmp_path):
    """A file in the dense layout for the ICM model (as every file written before the Kronecker
    form, here the general path's state under the Exact() model) loads as the dense state and
    predicts as the Kronecker posterior does (1e-10)."""
    fast, general = _fits("rank-2")
    old = gd.Posterior(fast.model, fast.values, general.state, fast.log_evidence)
    old.save(tmp_path / "old.nc")
    back = gd.load(tmp_path / "old.nc")
    assert back.state.form == "whitened" and back.state.correction is None
    np.testing.assert_array_equal(back.state.chol, general.state.chol)
    for a, b in zip(back.predict_f_full_cov(X_NEW), fast.predict_f_full_cov(X_NEW)):
        _close(a, b)


def test_the_dense_identity_correction_is_written_and_read_back_as_none(tmp_path):
    """A single-output Exact posterior holds no correction (None, the identity), writes the
    identity (the layout every version reads) and reads it back as None, predicting the same
    numbers; a sparse method's correction (I - B^-1) is kept as it is."""
    x = INPUTS[:, :1]
    exact = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Gaussian(0.1), None,
                     gd.inference.Exact()).fit(x, Y[:, 0], optimize=False)
    assert exact.state.correction is None
    np.testing.assert_array_equal(exact.to_xarray()["predictive_whitened_correction"].values, np.eye(N))
    exact.save(tmp_path / "exact.nc")
    back = gd.load(tmp_path / "exact.nc")
    assert back.state.correction is None
    for a, b in zip(back.predict_f_full_cov(x[:5]), exact.predict_f_full_cov(x[:5])):
        np.testing.assert_array_equal(a, b)
    vfe = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Gaussian(0.1), gd.inducing.Fixed(x[:6]),
                   gd.inference.VFE()).fit(x, Y[:, 0], optimize=False)
    vfe.save(tmp_path / "vfe.nc")
    np.testing.assert_array_equal(gd.load(tmp_path / "vfe.nc").state.correction, vfe.state.correction)


def _resaved(ds, **changes):
    """ds with variables replaced (dims, values) and its checksum recomputed (a deliberate edit)."""
    ds = ds.copy(deep=True)
    for name, value in changes.items():
        ds[name] = value
    ds.attrs["checksum"] = checksum(ds)
    return ds


def test_inconsistent_kronecker_files_are_refused():
    """A noise variance that is not positive, eigenvectors of another shape, or the Kronecker form
    in a single-output posterior: PosteriorFileError naming the variable."""
    fast, _ = _fits("rank-1")
    ds = fast.to_xarray()
    with pytest.raises(gd.PosteriorFileError, match="predictive_kronecker.*noise must be positive"):
        gd.from_xarray(_resaved(ds, predictive_kronecker_noise=("output", -ds["predictive_kronecker_noise"].values)))
    factors = ["predictive_kronecker_input_vectors", "predictive_kronecker_input_values", "point", "point_eigen"]
    fewer = {"predictive_kronecker_input_vectors": (("point", "point_eigen"), np.eye(N - 1)),
             "predictive_kronecker_input_values": ("point_eigen", np.ones(N - 1)),
             "point": ("point", np.arange(N - 1)), "point_eigen": ("point_eigen", np.arange(N - 1))}
    with pytest.raises(gd.PosteriorFileError, match="predictive_kronecker.*weights must have shape"):
        gd.from_xarray(_resaved(ds.drop_vars(factors), **fewer))
    single = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Gaussian(0.1), None,
                      gd.inference.Exact()).fit(INPUTS[:, :1], Y[:, 0], optimize=False).to_xarray()
    extra = _resaved(single, predictive_kronecker_input_values=("point_eigen", np.ones(N)))
    with pytest.raises(gd.PosteriorFileError, match="predictive_kronecker_input_values.*multi-output kernel"):
        gd.from_xarray(extra)


def test_kronecker_files_with_eigenvalues_that_give_no_w_are_refused():
    """The review's reproducer: input eigenvalues made negative (lambda s + 1 < 0) had loaded and
    predicted NaN (w^1/2 the root of a negative number); now PosteriorFileError, with lambda_a s_k
    named; a file at the edge a fit can give (s_k ~ -1e-15, rounding) still loads and predicts."""
    fast, _ = _fits("rank-1")
    ds = fast.to_xarray()
    s = ds["predictive_kronecker_input_values"].values
    with pytest.raises(gd.PosteriorFileError, match=r"predictive_kronecker_\*'.*KroneckerState: output_values and "
                                                     r"input_values must have lambda_a s_k \+ 1 > 0"):
        gd.from_xarray(_resaved(ds, predictive_kronecker_input_values=("point_eigen", -np.abs(s) - 5.0)))
    edge = s.copy()
    edge[np.argmin(s)] = -1e-15
    mean, var = gd.from_xarray(_resaved(ds, predictive_kronecker_input_values=("point_eigen", edge))).predict_f(
        INPUTS[:5] + 0.1)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(var))


def test_kronecker_state_checks_its_arguments():
    """Inconsistent shapes, a non-positive noise, or a K_z* of another number of rows: ValueError
    naming the class and the argument."""
    fast, _ = _fits("rank-1")
    fields = {f.name: getattr(fast.state, f.name) for f in dataclasses.fields(KroneckerState)}
    with pytest.raises(ValueError, match="KroneckerState: output_vectors must have shape"):
        KroneckerState(**{**fields, "output_vectors": fields["output_vectors"][:, :2]})
    with pytest.raises(ValueError, match="KroneckerState: noise must be positive"):
        KroneckerState(**{**fields, "noise": np.array([0.1, 0.0, 0.2])})
    with pytest.raises(ValueError, match="KroneckerState: Z must have"):
        KroneckerState(**{**fields, "Z": fields["Z"][:-1]})
    vectors = fields["input_vectors"].copy()
    vectors[2, 5] = np.nan
    with pytest.raises(ValueError, match=r"KroneckerState: input_vectors must be finite, got 1 NaN or infinite"):
        KroneckerState(**{**fields, "input_vectors": vectors})
    for s_3, product in ((-0.5, "-1.0"), (-1.5, "-3.0")):             # lambda_1 s_3 + 1 = 0 (w infinite), < 0
        lam, s = np.array([0.25, 2.0, 1.0]), fields["input_values"].copy()          # the least lambda s at a = 1
        s[3] = s_3
        with pytest.raises(ValueError, match=rf"lambda_a s_k \+ 1 > 0 .*got {product} at a = 1, k = 3 "
                                             rf"\(lambda_a = 2\.0, s_k = {s_3}\)"):
            KroneckerState(**{**fields, "output_values": lam, "input_values": s})
    with pytest.raises(ValueError, match=r"KroneckerState.basis: Kzs must have shape \(90, n\)"):
        fast.state.basis(np.ones((N, 4)))


def test_fit_predict_save_and_load_form_no_np_squared_array(tmp_path):
    """N = 200, P = 4 (N P = 800): the fit, predictions at 10 points, the save and the load hold
    less than half of one (N P)^2 array at any time (tracemalloc's peak: a few N x N arrays,
    (N P)^2 / 16 each; the dense path's state alone is three (N P)^2 arrays)."""
    n, outputs = 200, 4
    x = np.linspace(0.0, 1.0, n)[:, None]
    Y4 = np.column_stack([np.sin(6 * x[:, 0] + p) for p in range(outputs)]) + 0.05 * RNG.normal(size=(n, outputs))
    model = gd.Model(gd.kernels.ICM(gd.kernels.SquaredExponential(0.2), outputs, rank=1),
                     gd.likelihoods.OutputGaussian(outputs, 0.01), None, gd.inference.Exact())
    model.fit(x[:20], Y4[:20], optimize=False)          # imports and caches outside the measurement
    one = (n * outputs) ** 2 * 8
    tracemalloc.start()
    try:
        post = model.fit(x, Y4, optimize=False)
        post.predict_f(x[:10])
        post.predict_f_full_cov(x[:10])
        post.save(tmp_path / "big.nc")
        back = gd.load(tmp_path / "big.nc")
        back.predict(x[:10])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(post.state, KroneckerState)
    assert peak < one / 2, f"peak {peak / 1e6:.2f} MB against one (N P)^2 array of {one / 1e6:.2f} MB"
