"""fit(subsample=n): hyperparameters and Z from a fit on n random rows, the posterior on all N
(issue 16's "fit on a subsample, finish on all N"), against independent computations: the same
model fitted on those rows by hand, and the method's own evaluation on all rows."""
import numpy as np
import pytest

import gpdsl as gd

SE = gd.kernels.SquaredExponential


@pytest.fixture(scope="module")
def regression():
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, size=(400, 2))
    return X, np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(400)


def _rows(n, subsample, seed):
    return np.sort(np.random.default_rng(seed).choice(n, size=subsample, replace=False))


def test_vfe_subsample_fit_is_the_subsample_optimum_evaluated_on_all_rows(regression, tmp_path):
    X, y = regression
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), gd.inducing.KMeans(12, seed=0), gd.inference.VFE())
    post = model.fit(X, y, subsample=150, seed=5)
    by_hand = model.fit(X[_rows(400, 150, 5)], y[_rows(400, 150, 5)])
    for name, value in by_hand.values.items():
        np.testing.assert_array_equal(post.values[name], value, err_msg=name)
    np.testing.assert_array_equal(post.state.Z, by_hand.state.Z)
    # The posterior is the method's on all 400 rows at those values: its bound and predictions.
    full = model.evaluate(post.values, X, y, post.state.Z, need_grad=False, need_state=True)
    assert post.log_evidence == pytest.approx(full.log_evidence, rel=1e-12)
    assert post.subsample == {"rows": 150, "objective": pytest.approx(by_hand.log_evidence, rel=1e-12)}
    assert post.n_iterations == by_hand.n_iterations and post.converged
    at_values = gd.Model(SE(post.values["kernel.lengthscale"], post.values["kernel.variance"]),
                         gd.likelihoods.Gaussian(post.values["likelihood.variance"]), gd.inducing.Fixed(post.state.Z),
                         gd.inference.VFE()).fit(X, y, optimize=False)
    for a, b in zip(post.predict_f(X[:9]), at_values.predict_f(X[:9])):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    post.save(tmp_path / "post.nc")
    loaded = gd.load(tmp_path / "post.nc")
    assert loaded.subsample == post.subsample
    # All rows or more would silently mean all rows: refused (issue 25 item 8).
    for n in (400, 1000):
        with pytest.raises(ValueError, match=f"subsample = {n} must be smaller than the number of rows, N = 400"):
            model.fit(X, y, subsample=n)


def test_pgpr_hgv_subsample_selects_rows_of_x_and_finishes_the_c_iteration_on_all_rows():
    """HGV with its reinitialisation loop runs on the subsample; the selected indices are rows of
    X, and the c iteration of the finish runs to convergence over all N (the bound equals the
    collapsed method's evaluation on all rows)."""
    X, y = gd.datasets.banana(500, seed=1)
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Bernoulli("logit"),
                     gd.inducing.GreedyVariance(m=10, weighted=True, reinit=True), gd.inference.PolyaGamma())
    post = model.fit(X, y, subsample=200, seed=2)
    np.testing.assert_array_equal(X[post.selection.indices], post.state.Z)
    assert set(post.selection.indices) <= set(_rows(500, 200, 2))
    assert post.sites.c.shape == (500,) and post.sites.converged
    full = model.evaluate(post.values, X, y, post.state.Z, need_grad=False, need_state=True)
    assert post.log_evidence == pytest.approx(full.log_evidence, rel=1e-8)


def test_subsample_is_validated(regression):
    X, y = regression
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), gd.inducing.KMeans(5), gd.inference.VFE())
    for bad in (0, -3, 2.5, "100"):
        with pytest.raises((ValueError, TypeError), match="fit: subsample"):
            model.fit(X, y, subsample=bad)


def test_subsample_of_a_dask_x_reads_its_rows(regression):
    da = pytest.importorskip("dask.array")
    X, y = regression
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), gd.inducing.KMeans(12, seed=0), gd.inference.VFE())
    ref = model.fit(X, y, subsample=150, seed=5)
    post = model.fit(da.from_array(X, chunks=(100, 2)), da.from_array(y, chunks=100), subsample=150, seed=5)
    for name, value in ref.values.items():
        np.testing.assert_array_equal(post.values[name], value)
    assert post.log_evidence == pytest.approx(ref.log_evidence, rel=1e-10)


def test_subsample_refuses_per_row_parameters_and_joint_q(regression):
    X, y = regression
    hetero = gd.Model(SE(1.0, 1.0), gd.likelihoods.HeteroscedasticGaussian(variance=np.full(400, 0.01)),
                      gd.inducing.KMeans(5), gd.inference.VFE())
    with pytest.raises(ValueError, match="fit: subsample cannot subsample the per-row parameters"):
        hetero.fit(X, y, subsample=100)
    labels = np.where(y > 0, 1.0, -1.0)
    for inducing, inference in ((None, gd.inference.VGP(q_updates="joint")),
                                (gd.inducing.KMeans(5), gd.inference.SVGP(q_updates="joint"))):
        model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Bernoulli("logit"), inducing, inference)
        with pytest.raises(ValueError, match=r"fit: subsample needs q .*q_updates='joint'"):
            model.fit(X, labels, subsample=100)


def test_subsample_counts_the_finishing_sweeps():
    """EP's sweeps on all rows after the subsample fit are counted in total_sweeps."""
    X, y = gd.datasets.banana(300, seed=2)
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Bernoulli("probit"), gd.inducing.KMeans(8, seed=0),
                     gd.inference.EP())
    post = model.fit(X, y, subsample=100, max_iter=5)
    sub = model.fit(X[_rows(300, 100, 0)], y[_rows(300, 100, 0)], max_iter=5)
    assert post.total_sweeps == sub.total_sweeps + post.sites.sweeps and post.sites.sweeps > 0
