"""Dask-chunked fits and lazy predictions (issue 16): X and y as Dask arrays (or xarray objects
backed by them) give the in-memory results, every O(N M^2) pass running as Dask tasks."""
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import gpdsl as gd

da = pytest.importorskip("dask.array")
xr = pytest.importorskip("xarray")

SE = gd.kernels.SquaredExponential
N, CHUNK = 240, 60          # four row blocks


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    X = rng.uniform(-3, 3, size=(N, 2))
    f = np.sin(X[:, 0]) + 0.5 * np.cos(2 * X[:, 1])
    y = f + 0.1 * rng.standard_normal(N)
    # Labels with 15% flipped: no separable ridge, so the classifiers' optima are well defined.
    labels = np.where((f > 0) != (rng.uniform(size=N) < 0.15), 1.0, -1.0)
    X_new = rng.uniform(-3, 3, size=(50, 2))
    return X, y, labels, X_new


def _dask(a, chunk=CHUNK):
    return da.from_array(a, chunks=(chunk,) + a.shape[1:])


def _relative(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _model(inference, likelihood=None, m=15):
    return gd.Model(SE(np.array([1.0, 1.2]), 1.0), likelihood or gd.likelihoods.Gaussian(0.1),
                    gd.inducing.Subsample(m, seed=1), inference)


def _assert_same_fit(post, ref, tol=1e-10):
    assert post.log_evidence == pytest.approx(ref.log_evidence, rel=tol)
    for name, value in ref.values.items():
        assert _relative(post.values[name], value) < tol, name
    assert _relative(post.state.Z, ref.state.Z) < tol


def _assert_same_predictions(post, ref, X_new, tol=1e-10):
    lazy, eager = post.predict(_dask(X_new, 20)), ref.predict(X_new)
    assert set(lazy.data_vars) == set(eager.data_vars)
    for name in eager.data_vars:
        assert isinstance(lazy[name].data, da.Array), name        # not computed
        assert _relative(lazy[name].compute().values, eager[name].values) < tol, name


@pytest.mark.parametrize("inference", [gd.inference.VFE(chunk_size=CHUNK), gd.inference.FITC(chunk_size=CHUNK)],
                         ids=["VFE", "FITC"])
def test_collapsed_fit_equals_in_memory(data, inference):
    X, y, _, X_new = data
    model = _model(inference)
    ref = model.fit(X, y)
    post = model.fit(_dask(X), _dask(y))
    # Same row blocks and the same tree of partial sums: the fits agree to rounding (here exactly).
    _assert_same_fit(post, ref)
    _assert_same_predictions(post, ref, X_new)


@pytest.mark.parametrize("fitc", [False, True], ids=["VFE", "FITC"])
def test_collapsed_evaluation_other_blocks(data, fitc):
    """Dask blocks of 70 rows against the in-memory default chunking: the objective, every
    gradient and the posterior at fixed hyperparameters agree to 1e-10."""
    X, y, _, X_new = data
    model = _model(gd.inference.FITC() if fitc else gd.inference.VFE())
    Z = X[::16] + 0.01
    values = model.parameter_table(X, Z).values()
    ref = model.evaluate(values, X, y, Z, need_state=True)
    ev = model.evaluate(values, _dask(X, 70), y, Z, need_state=True)
    assert ev.log_evidence == pytest.approx(ref.log_evidence, rel=1e-12)
    for name, g in ref.grads.items():
        assert _relative(ev.grads[name], g) < 1e-10, name
    assert _relative(ev.dZ, ref.dZ) < 1e-10
    assert _relative(ev.state.q_mean, ref.state.q_mean) < 1e-10


@pytest.mark.parametrize("inference", [gd.inference.PolyaGamma(chunk_size=CHUNK), gd.inference.Laplace(chunk_size=CHUNK)],
                         ids=["PolyaGamma", "FITC-Laplace"])
def test_logit_classifier_fit_equals_in_memory(data, inference):
    """Pólya-Gamma (every c sweep a Dask pass, L^-1 K_uf persisted with its block between sweeps)
    and FITC-Laplace (A^T = L^-1 K_uf held by X's row blocks, every product with it a pass)."""
    X, _, labels, X_new = data
    model = _model(inference, gd.likelihoods.Bernoulli("logit"))
    ref = model.fit(X, labels)
    post = model.fit(_dask(X), _dask(labels))
    _assert_same_fit(post, ref)
    if isinstance(inference, gd.inference.PolyaGamma):
        assert _relative(post.sites.c, ref.sites.c) < 1e-10
    _assert_same_predictions(post, ref, X_new)


@pytest.mark.parametrize("inference", [gd.inference.EP(schedule="parallel", chunk_size=CHUNK),
                                       gd.inference.QP(schedule="parallel", chunk_size=CHUNK),
                                       gd.inference.EP(schedule="parallel", chunk_size=CHUNK, approximation="dtc")],
                         ids=["EP", "QP", "DTC-EP"])
def test_parallel_site_schedule_equals_in_memory(data, inference):
    """FITC-EP/QP on the parallel schedule: the prior's refresh and marginals are Dask passes
    over X's blocks (ChunkedFITCPrior), never an (N, M) factor."""
    X, _, labels, X_new = data
    model = _model(inference, gd.likelihoods.Bernoulli("probit"))
    ref = model.fit(X, labels)
    post = model.fit(_dask(X), _dask(labels))
    # The in-memory refresh sums B - I and P^T nu over the same row blocks in the same tree.
    assert post.log_evidence == pytest.approx(ref.log_evidence, rel=1e-12)
    _assert_same_fit(post, ref, tol=1e-10)
    assert _relative(post.sites.tau, ref.sites.tau) < 1e-10
    _assert_same_predictions(post, ref, X_new)
    # At the declared hyperparameters (away from the optimum, where the gradient is ~0 and
    # cancels) the evidence, its gradients and the sites agree to 1e-10.
    Z = ref.state.Z
    values = model.parameter_table(X, Z).values()
    at = model.evaluate(values, X, labels, Z, need_state=True)
    chunked = model.evaluate(values, _dask(X), labels, Z, need_state=True)
    assert chunked.log_evidence == pytest.approx(at.log_evidence, rel=1e-12)
    for name, g in at.grads.items():
        assert _relative(chunked.grads[name], g) < 1e-10, name
    assert _relative(chunked.warm.tau, at.warm.tau) < 1e-10


@pytest.mark.parametrize("spec", [gd.inducing.GreedyVariance(m=20),
                                  gd.inducing.GreedyVariance(tol=1e-2, weighted=True, reinit=True)],
                         ids=["GV", "HGV-reinit"])
def test_greedy_variance_selection_equals_in_memory(data, spec):
    """Greedy variance selection on a Dask X keeps the factor's columns with X's row blocks and
    picks the same points, with the same traces, as the in-memory (M, N) factor."""
    X, y, _, _ = data
    model = gd.Model(SE(np.array([1.0, 1.2]), 1.0), gd.likelihoods.Gaussian(0.1), spec,
                     gd.inference.VFE(chunk_size=CHUNK))
    ref = model.fit(X, y)
    post = model.fit(_dask(X), _dask(y))
    np.testing.assert_array_equal(post.selection.indices, ref.selection.indices)
    assert _relative(post.selection.criterion, ref.selection.criterion) < 1e-12
    _assert_same_fit(post, ref)


def test_xarray_backed_by_dask_and_standardize(data):
    X, y, _, X_new = data
    model = _model(gd.inference.VFE(chunk_size=CHUNK))
    ref = model.fit(X, y, standardize=True)
    post = model.fit(xr.DataArray(_dask(X), dims=("obs", "feature")), xr.DataArray(_dask(y), dims="obs"),
                     standardize=True)
    # Dask's column means and deviations are summed in another order: agreement to ~1e-11.
    _assert_same_fit(post, ref, tol=1e-9)
    pred = post.predict(xr.DataArray(_dask(X_new, 25), dims=("obs", "feature")), noise_variance=0.2)
    assert isinstance(pred.y_var.data, da.Array)
    expected = ref.predict(X_new, noise_variance=0.2)
    for name in expected.data_vars:
        assert _relative(pred[name].values, expected[name].values) < 1e-9, name
    mean, var = post.predict_f(_dask(X_new, 25))
    assert isinstance(mean, da.Array) and isinstance(var, da.Array)
    assert _relative(mean.compute(), expected.f_mean.values) < 1e-9


def test_unchunked_methods_compute_dask_inputs(data):
    """Methods without a chunked form (here the exact GP) compute a Dask X into memory."""
    X, y, _, _ = data
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1))
    ref = model.fit(X[:80], y[:80], optimize=False)
    post = model.fit(_dask(X[:80], 30), _dask(y[:80], 30), optimize=False)
    assert post.log_evidence == ref.log_evidence


@pytest.mark.parametrize("inference", [gd.inference.PolyaGamma(minibatch=40), gd.inference.EP()],
                         ids=["PolyaGamma-minibatch", "EP-sequential"])
def test_methods_that_do_not_chunk_compute_dask_inputs(data, inference):
    """Stochastic PG's minibatch steps and sequential EP read rows of an in-memory X: a Dask X is
    computed, and the fit equals the in-memory one exactly."""
    X, _, labels, _ = data
    model = _model(inference, gd.likelihoods.Bernoulli("logit"))
    assert not model._chunks_dask()
    ref = model.fit(X, labels, max_iter=15)
    post = model.fit(_dask(X), _dask(labels), max_iter=15)
    assert post.log_evidence == ref.log_evidence
    for name, value in ref.values.items():
        np.testing.assert_array_equal(post.values[name], value)


def test_kmeans_sample_reads_only_its_rows_of_a_dask_x(data):
    """KMeans(sample=s) on a Dask X computes only the sampled rows (lazy_inputs) and returns
    the same centres as on the in-memory X."""
    X, _, _, _ = data
    spec = gd.inducing.KMeans(6, seed=1, sample=100)
    assert spec.lazy_inputs and not gd.inducing.KMeans(6).lazy_inputs
    np.testing.assert_array_equal(spec.initial_Z(_dask(X), None), spec.initial_Z(X, None))


def test_dask_inputs_are_checked(data):
    X, y, _, _ = data
    model = _model(gd.inference.VFE())
    bad = X.copy()
    bad[100, 1] = np.nan
    with pytest.raises(ValueError, match="finite"):
        model.fit(_dask(bad), y)
    with pytest.raises(ValueError, match="2-D"):
        model.fit(_dask(X[:, 0]), y)
    post = model.fit(X, y)
    with pytest.raises(ValueError, match="features"):
        post.predict(_dask(np.ones((10, 3)), 5))


def test_distributed_local_cluster(data):
    """A fit on a two-process distributed.LocalCluster equals the in-memory fit."""
    distributed = pytest.importorskip("distributed")
    X, y, _, X_new = data
    model = _model(gd.inference.VFE(chunk_size=CHUNK))
    ref = model.fit(X, y)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        post = model.fit(_dask(X), _dask(y))
        pred = post.predict(_dask(X_new, 25)).compute()
        assert len(client.scheduler_info()["workers"]) == 2
    _assert_same_fit(post, ref)
    assert _relative(pred.y_mean.values, ref.predict(X_new).y_mean.values) < 1e-10


def test_import_does_not_import_dask():
    code = "import sys, gpdsl; sys.exit(int(any(m.split('.')[0] in ('dask', 'distributed') for m in sys.modules)))"
    root = Path(__file__).resolve().parents[1]
    assert subprocess.run([sys.executable, "-c", code], cwd=root, env={"PYTHONPATH": str(root)}).returncode == 0


def test_kmeans_sample_at_least_n_reads_a_dask_x_whole(data):
    X, _, _, _ = data
    spec = gd.inducing.KMeans(6, seed=1, sample=X.shape[0] + 10)
    np.testing.assert_array_equal(spec.initial_Z(_dask(X), None), gd.inducing.KMeans(6, seed=1).initial_Z(X, None))


def test_fitc_laplace_on_a_local_cluster_equals_in_memory_when_the_blocks_match():
    """Issue 25 item 8: "FITC-Laplace on a 2-worker LocalCluster differs from in-memory by 6.6e-4
    in predictions (the threaded scheduler is bit-identical)".  Measured: the difference is the
    partition of the rows, not the scheduler.  With ``chunk_size`` equal to X's row chunks the
    fit on two processes is the in-memory fit to the bit (evidence, predictions); with the
    default chunk_size the sums run over other blocks and differ by rounding (3.5e-9 in
    predictions here) on the threaded scheduler just as on the cluster, which a longer
    optimisation can grow (Model.fit's docstring says so)."""
    distributed = pytest.importorskip("distributed")
    dask = pytest.importorskip("dask")
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (400, 2))
    y = np.where(np.sin(X[:, 0]) + 0.3 * rng.standard_normal(400) > 0, 1.0, -1.0)
    X_new = rng.uniform(-3, 3, (50, 2))

    def model(chunk_size):
        return gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Bernoulli("logit"),
                        gd.inducing.KMeans(16, seed=0), gd.inference.Laplace(chunk_size=chunk_size))

    def fit(chunk_size, X):
        # Five iterations keep the cluster's many small tasks within seconds (the cap warns).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gd.ConvergenceWarning)
            return model(chunk_size).fit(X, y, max_iter=5)

    X_dask = da.from_array(X, chunks=(100, 2))
    matched, unmatched = fit(100, X), fit(None, X)
    with dask.config.set(scheduler="threads"):
        threaded = fit(None, X_dask)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        on_cluster = fit(100, X_dask)
    assert on_cluster.log_evidence == matched.log_evidence
    np.testing.assert_array_equal(on_cluster.predict_f(X_new)[0], matched.predict_f(X_new)[0])
    np.testing.assert_array_equal(on_cluster.predict_f(X_new)[1], matched.predict_f(X_new)[1])
    # Unmatched blocks on the threaded scheduler: rounding only.  Not the scheduler: on full fits
    # (no max_iter) a cluster fit with unmatched blocks equalled the threaded one to the bit, both
    # 3.5e-9 from in-memory in predictions (measured for issue 25).
    assert np.max(np.abs(threaded.predict_f(X_new)[0] - unmatched.predict_f(X_new)[0])) > 0.0
    np.testing.assert_allclose(threaded.predict_f(X_new)[0], unmatched.predict_f(X_new)[0], rtol=0, atol=1e-7)
