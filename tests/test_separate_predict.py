"""Predictions, posterior files and ArviZ draws of a K-class posterior whose kernel is
``gd.kernels.Separate`` (one kernel, one Cholesky factor L_k and one whitened basis a latent
function: ``PredictiveState.chol`` (K, M, M)).

The posteriors are built by hand from a predictive state (as ``gpdsl.fitting`` builds them from a
fit's): an SVGP-like state (random whitened q per class, independent classes) and a dense
Laplace-like one (Z = X, random coupling between the classes).  Each prediction is checked
against the dense formulas written out per class with the parts' own kernels:
b_k = L_k^-1 K^k_z*, mean_k = b_k^T w_k, cov_k = K^k_** - b_k^T C_k b_k (+ (G_k b_k)^T (G_k' b_k')
with coupling)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import solve_triangular

import gpdsl as gd
from gpdsl.components import bind
from gpdsl.io.layout import hyperparameter_entries
from gpdsl.methods.common import PredictiveState, VariationalState
from gpdsl.methods.laplace_multiclass import ModeState
from gpdsl.posterior import FitRecord, Posterior

K, M, D = 3, 6, 2
PARTS = (gd.kernels.SquaredExponential(0.7, 1.2), gd.kernels.Matern52(np.array([1.0, 0.5]), 0.6),
         gd.kernels.SquaredExponential(1.5, 0.8))
SHARED = gd.kernels.Matern32(0.9, 1.1)
rng = np.random.default_rng(28)
Z = rng.uniform(-1.5, 1.5, size=(M, D))
X_NEW = rng.uniform(-2.0, 2.0, size=(11, D))
Y_NEW = rng.integers(0, K, size=11).astype(float)


def _random_state(grams, coupled, seed):
    """A K-class PredictiveState at Z with one Cholesky factor a class of ``grams`` (K, M, M)
    (jittered): random whitened q(v_k) = N(w_k, R_k R_k^T), correction I - R_k R_k^T, and with
    ``coupled`` a random coupling (K, M, M).  Returns the state and q_sqrt packed (K, M (M+1)/2)."""
    r = np.random.default_rng(seed)
    chol = np.stack([np.linalg.cholesky(G + 1e-6 * np.eye(M)) for G in grams])
    weights = r.normal(size=(M, K))
    R = np.tril(r.normal(scale=0.3, size=(K, M, M)), -1) + np.stack([np.diag(r.uniform(0.2, 0.6, M))] * K)
    S = R @ np.swapaxes(R, 1, 2)
    state = PredictiveState(Z=Z, weights=weights, correction=np.eye(M) - S, q_mean=np.einsum("kij,jk->ik", chol, weights),
                            q_cov=chol @ S @ np.swapaxes(chol, 1, 2), chol=chol,
                            coupling=r.normal(scale=0.2, size=(K, M, M)) if coupled else None)
    return state, R[:, *np.tril_indices(M)]


def _posterior(kernel, state, q_sqrt, coupled):
    """A Posterior of ``kernel`` and a 3-class likelihood holding ``state``: SVGP's (sparse, q its
    local state) for an uncoupled state, dense Laplace's (Z = X, a mode) for a coupled one."""
    if coupled:
        model = gd.Model(kernel, gd.likelihoods.Categorical(K), inference=gd.inference.Laplace())
        sites = ModeState(np.random.default_rng(1).normal(size=(M, K)), sweeps=5)
    else:
        model = gd.Model(kernel, gd.likelihoods.Categorical(K, "robustmax"), gd.inducing.KMeans(M),
                         gd.inference.SVGP())
        sites = VariationalState({"variational.q_mu": state.weights, "variational.q_sqrt": q_sqrt}, sweeps=3,
                                 converged=True)
    values = {e.name: e.value for e in hyperparameter_entries(model, Z)}
    return Posterior(model, values, state, log_evidence=-12.5, record=FitRecord(sites=sites))


def _separate(coupled):
    kernel = gd.kernels.Separate(PARTS)
    return _posterior(kernel, *_random_state([p.bind().gram(Z, Z) for p in PARTS], coupled, 3), coupled)


def _dense(post, X):
    """The latent means (n, K) and joint covariance (n, K, n, K) written out per class from the
    parts' own kernels (bound to the posterior's values) and the state's arrays."""
    state, n = post.state, X.shape[0]
    parts = [bind(p, post.values, f"kernel.{i}") for i, p in enumerate(post.model.kernel.kernels)]
    b = [solve_triangular(state.chol[k], parts[k].gram(Z, X), lower=True) for k in range(K)]
    mean = np.stack([b[k].T @ state.weights[:, k] for k in range(K)], axis=1)
    cov = np.zeros((n, K, n, K))
    for k in range(K):
        cov[:, k, :, k] = parts[k].gram(X, X) - b[k].T @ state.correction[k] @ b[k]
        for j in range(K):
            if state.coupling is not None:
                cov[:, k, :, j] += (state.coupling[k] @ b[k]).T @ (state.coupling[j] @ b[j])
    return mean, cov


@pytest.mark.parametrize("coupled", [False, True], ids=["independent", "coupled"])
def test_predictions_are_the_dense_formulas_per_class(coupled):
    """predict_f, predict_f_full_cov, predict's probabilities and log_predictive against the
    per-class formulas (1e-12 relative, 1e-13 absolute)."""
    post = _separate(coupled)
    want_mean, want_cov = _dense(post, X_NEW)
    idx = np.arange(X_NEW.shape[0])
    want_var = np.stack([np.diag(want_cov[:, k, :, k]) for k in range(K)], axis=1)
    mean, var = post.predict_f(X_NEW)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(var, want_var, rtol=1e-12, atol=1e-13)
    full_mean, cov = post.predict_f_full_cov(X_NEW)
    np.testing.assert_allclose(full_mean, want_mean, rtol=1e-12, atol=1e-13)
    if coupled:
        assert cov.shape == (11, K, 11, K)
        np.testing.assert_allclose(cov, 0.5 * (want_cov + want_cov.transpose(2, 3, 0, 1)), rtol=1e-12, atol=1e-13)
    else:
        assert cov.shape == (K, 11, 11)
        np.testing.assert_allclose(cov, np.stack([want_cov[:, k, :, k] for k in range(K)]), rtol=1e-12,
                                   atol=1e-13)
    likelihood = post.model.likelihood
    point_cov = want_cov[idx, :, idx, :]                      # (n, K, K) each point's joint covariance
    p = likelihood.predictive(want_mean, point_cov if coupled else want_var)["p"]
    pred = post.predict(X_NEW)
    np.testing.assert_allclose(pred["p"].values, p, rtol=1e-12)
    np.testing.assert_allclose(pred["f_var"].values, want_var, rtol=1e-12, atol=1e-13)
    want_lp = likelihood.log_predictive(want_mean, point_cov if coupled else want_var, Y_NEW)
    np.testing.assert_allclose(post.log_predictive(X_NEW, Y_NEW), want_lp, rtol=1e-12)


@pytest.mark.parametrize("coupled", [False, True], ids=["independent", "coupled"])
def test_full_covariance_diagonal_is_predict_f_variance(coupled):
    """The (K, n, n) or (n, K, n, K) covariance's diagonal is predict_f's variance (1e-12)."""
    post = _separate(coupled)
    _, var = post.predict_f(X_NEW)
    _, cov = post.predict_f_full_cov(X_NEW)
    diag = (np.diagonal(cov.reshape(11 * K, 11 * K)).reshape(11, K) if coupled
            else np.diagonal(cov, axis1=1, axis2=2).T)
    np.testing.assert_allclose(diag, var, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("coupled", [False, True], ids=["independent", "coupled"])
def test_three_equal_parts_predict_as_the_shared_kernel(coupled):
    """Separate((k, k, k)) with the factor of k's K_zz repeated predicts what k shared does (1e-12):
    the per-class path and the shared one are the same arithmetic."""
    state, q_sqrt = _random_state([SHARED.bind().gram(Z, Z)] * K, coupled, 5)
    separate = _posterior(gd.kernels.Separate((SHARED,) * K), state, q_sqrt, coupled)
    shared = _posterior(SHARED, PredictiveState(**{**vars(state), "chol": state.chol[0]}), q_sqrt, coupled)
    for a, b in zip(separate.predict_f(X_NEW), shared.predict_f(X_NEW)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    for a, b in zip(separate.predict_f_full_cov(X_NEW), shared.predict_f_full_cov(X_NEW)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(separate.predict(X_NEW)["p"].values, shared.predict(X_NEW)["p"].values, rtol=1e-12)
    np.testing.assert_allclose(separate.log_predictive(X_NEW, Y_NEW), shared.log_predictive(X_NEW, Y_NEW),
                               rtol=1e-12)


@pytest.mark.parametrize("coupled", [False, True], ids=["independent", "coupled"])
def test_posterior_file_round_trips_bit_for_bit(coupled, tmp_path):
    post = _separate(coupled)
    ds = post.to_xarray()
    assert ds["predictive_chol"].dims == ("class", "inducing", "inducing_bis")
    post.save(tmp_path / "separate.nc")
    back = gd.load(tmp_path / "separate.nc")
    assert back.model == post.model
    for name, value in vars(post.state).items():
        if value is None:
            assert getattr(back.state, name) is None
        else:
            np.testing.assert_array_equal(getattr(back.state, name), value, err_msg=name)
    for a, b in zip(back.predict_f_full_cov(X_NEW), post.predict_f_full_cov(X_NEW)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(back.predict(X_NEW)["p"].values, post.predict(X_NEW)["p"].values)


def test_a_file_with_one_factor_for_a_separate_kernel_is_refused():
    """A Separate model's file must hold a factor a class: one (M, M) factor is refused, naming
    the variable and its dims."""
    from gpdsl.io.layout import checksum
    ds = _separate(False).to_xarray()
    ds["predictive_chol"] = (("inducing", "inducing_bis"), ds["predictive_chol"].values[0])
    ds.attrs["checksum"] = checksum(ds)
    with pytest.raises(gd.PosteriorFileError, match=r"variable 'predictive_chol': has dims \('inducing', "
                                                     r"'inducing_bis'\), expected \('class', 'inducing'"):
        gd.from_xarray(ds)


def test_inference_data_draws_each_class_from_its_own_kernel():
    """to_inference_data's joint draws (4 x 2000) have the per-class means and variances of
    predict_f (Monte Carlo: within 5 standard errors), and the parts' hyperparameters."""
    post = _separate(False)
    idata = post.to_inference_data(X_NEW, Y_NEW, draws=2000, seed=3)
    f = idata.posterior["f"]
    assert f.dims == ("chain", "draw", "obs", "class") and f.shape == (4, 2000, 11, K)
    assert idata.log_likelihood["y"].shape == (4, 2000, 11)
    mean, var = post.predict_f(X_NEW)
    draws = f.values.reshape(-1, 11, K)
    np.testing.assert_array_less(np.abs(draws.mean(axis=0) - mean), 5 * np.sqrt(var / draws.shape[0]) + 1e-12)
    np.testing.assert_allclose(draws.var(axis=0), var, rtol=0.2, atol=1e-8)
    np.testing.assert_array_equal(idata.constant_data["kernel_1_lengthscale"].values, [1.0, 0.5])


def test_mismatched_kernel_and_state_name_the_argument():
    """A per-class state under a shared kernel (or the reverse) fails naming ``Kzs`` and both
    shapes; a component of a Separate kernel is refused (it is not a Sum)."""
    separate = _separate(False)
    shared = _posterior(SHARED, separate.state, None, False)
    with pytest.raises(ValueError, match=r"PredictiveState.basis: Kzs must have shape \(3, M, n\) for chol of "
                                         r"shape \(3, 6, 6\), got shape \(6, 11\)"):
        shared.predict_f(X_NEW)
    one = PredictiveState(**{**vars(separate.state), "chol": separate.state.chol[0]})
    with pytest.raises(ValueError, match=r"Kzs must have shape \(M, n\) for chol of shape \(6, 6\), got shape "
                                         r"\(3, 6, 11\)"):
        _posterior(separate.model.kernel, one, None, False).predict(X_NEW)
    with pytest.raises(ValueError, match=r"Kzs must have shape \(2, M, n\)"):
        PredictiveState(**{**vars(separate.state), "chol": separate.state.chol[:2]}).basis(
            separate._kernel().gram(Z, X_NEW))
    with pytest.raises(ValueError, match="component=0 needs a Sum kernel"):
        separate.predict_f(X_NEW, component=0)
    with pytest.raises(ValueError, match="X_new"):
        separate.predict_f(X_NEW[:, :1])
