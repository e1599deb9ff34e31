"""Inducing-point specs against independent computations."""
import numpy as np

import gpdsl as gd


def test_kmeans_is_a_lloyd_fixed_point_and_finds_separated_blobs():
    rng = np.random.default_rng(0)
    centres = np.array([[-5.0, 0.0], [0.0, 5.0], [5.0, 0.0]])
    X = np.vstack([c + 0.3 * rng.standard_normal((100, 2)) for c in centres])
    Z = gd.inducing.KMeans(3, seed=1).initial_Z(X, None)
    # Each returned centre is the mean of the points nearest to it (Lloyd's fixed point) ...
    labels = np.argmin(((X[:, None, :] - Z[None, :, :]) ** 2).sum(-1), axis=1)
    for k in range(3):
        np.testing.assert_allclose(Z[k], X[labels == k].mean(0), rtol=0, atol=1e-12)
    # ... and with well separated blobs the centres are the blob means.
    order = np.argsort(Z[:, 0] + 0.1 * Z[:, 1])
    truth = np.array([X[i * 100:(i + 1) * 100].mean(0) for i in range(3)])
    np.testing.assert_allclose(Z[order], truth[np.argsort(truth[:, 0] + 0.1 * truth[:, 1])], atol=1e-12)


def test_kmeans_on_a_sample_is_kmeans_of_the_sampled_rows():
    """KMeans(sample=s) clusters the s rows drawn by default_rng(seed) (sorted), its Lloyd
    iterations from there identical to KMeans on those rows alone; each centre is a Lloyd fixed
    point of the sample, and bad samples are refused."""
    import pytest
    rng = np.random.default_rng(4)
    X = rng.standard_normal((500, 3))
    Z = gd.inducing.KMeans(5, seed=2, sample=120).initial_Z(X, None)
    draw = np.random.default_rng(2)
    rows = X[np.sort(draw.choice(500, size=120, replace=False))]
    labels = np.argmin(((rows[:, None, :] - Z[None, :, :]) ** 2).sum(-1), axis=1)
    for k in range(5):
        np.testing.assert_allclose(Z[k], rows[labels == k].mean(0), rtol=0, atol=1e-12)
    # a sample as large as the data is the plain k-means
    np.testing.assert_array_equal(gd.inducing.KMeans(5, seed=2, sample=500).initial_Z(X, None),
                                  gd.inducing.KMeans(5, seed=2).initial_Z(X, None))
    with pytest.raises(ValueError, match="KMeans: sample must be None or at least m = 5, got 3"):
        gd.inducing.KMeans(5, sample=3)
    with pytest.raises(ValueError, match="KMeans: sample"):
        gd.inducing.KMeans(5, sample=0)


def test_subsample_draws_distinct_training_rows_reproducibly():
    X = np.arange(40.0).reshape(20, 2)
    Z = gd.inducing.Subsample(7, seed=3).initial_Z(X, None)
    assert len({tuple(z) for z in Z}) == 7
    assert all(any(np.array_equal(z, x) for x in X) for z in Z)
    np.testing.assert_array_equal(Z, gd.inducing.Subsample(7, seed=3).initial_Z(X, None))
    assert not np.array_equal(Z, gd.inducing.Subsample(7, seed=4).initial_Z(X, None))


def test_kmeans_squared_distances_are_the_dense_ones():
    """The Lloyd steps' distances, formed in place on X C^T: the dense sum of squared differences
    to rounding (atol 1e-10 on distances ~10-100), never negative, and the same bits as the
    expression they replaced, |x|^2 - 2 x.c + |c|^2 clipped at 0 (so k-means takes the same steps)."""
    from gpdsl.inducing.simple import _squared_distances
    rng = np.random.default_rng(7)
    X, C = 3.0 * rng.standard_normal((300, 4)), 3.0 * rng.standard_normal((9, 4))
    C[2] = X[5]                                      # a distance that cancels to 0
    x_sq = np.sum(X * X, 1)
    D = _squared_distances(X, C)
    np.testing.assert_allclose(D, ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1), rtol=0, atol=1e-10)
    assert D.min() >= 0.0
    assert np.array_equal(D, np.maximum(x_sq[:, None] - 2.0 * X @ C.T + np.sum(C * C, 1)[None, :], 0.0))
    assert np.array_equal(_squared_distances(X, C, x_sq), D)
