"""predict_f(component=q) of an LMC (issue 48): the posterior of one latent part f_q, prior
covariance B_q (x) k_q, independent of the other parts a priori, through the fitted state's basis
with the part's cross-covariance -- against dense NumPy formulas with naive's explicit LMC Gram
(Exact, and VFE's q(u) written out), and the parts' means adding up to the whole; and a part of an
LMC or Sum with active_dims reads the composite's columns (the same posterior as on those alone)."""
import numpy as np
import pytest

import gpdsl as gd
from naive import icm_gram, isotopic_grid, kernel as dense_kernel, stationary_point

P = 2
W = np.array([[[0.9], [0.4]], [[-0.3], [0.8]]])          # (Q, P, rank)
KAPPA = np.array([[0.2, 0.1], [0.05, 0.3]])
BASES = ((0.8, 1.0, "se"), (1.5, 0.7, "m32"))
NOISE = np.array([0.05, 0.1])


def _model(inference=None, inducing=None):
    k0 = gd.kernels.SquaredExponential(BASES[0][0], BASES[0][1])
    k1 = gd.kernels.Matern32(BASES[1][0], BASES[1][1], name="rough")
    return gd.Model(gd.kernels.LMC((k0, k1), P, W=W, kappa=KAPPA), gd.likelihoods.OutputGaussian(P, variance=NOISE),
                    inference=inference or gd.inference.Exact(), inducing=inducing)


def _part(q, A, B):
    ls, var, kind = BASES[q]
    return icm_gram(A, B, W[q], KAPPA[q], stationary_point(ls, var, kind))


def _data():
    rng = np.random.default_rng(11)
    x = np.sort(rng.uniform(-2.0, 2.0, 9))[:, None]
    Y = np.column_stack([np.sin(2 * x[:, 0]), np.cos(x[:, 0])]) + 0.1 * rng.standard_normal((9, P))
    Y[3, 0] = np.nan
    return x, Y


def _long(x, Y):
    X = isotopic_grid(x, P)
    y = Y.T.ravel()
    keep = ~np.isnan(y)
    return X[keep], y[keep]


def _new():
    x_new = np.linspace(-2.5, 2.5, 5)[:, None]
    return x_new, np.column_stack([np.repeat(x_new, P, axis=0), np.tile(np.arange(P, dtype=float), len(x_new))])


def test_exact_component_is_the_dense_posterior_of_its_part():
    x, Y = _data()
    X, y = _long(x, Y)
    post = _model().fit(x, Y, optimize=False)
    assert post.jitter == 0.0
    x_new, S = _new()
    K = sum(_part(q, X, X) for q in range(2))
    C = K + np.diag(NOISE[X[:, -1].astype(int)])
    means = []
    for q, label in ((0, 0), (1, "rough")):
        K_sx = _part(q, S, X)
        mean = K_sx @ np.linalg.solve(C, y)
        var = np.diag(_part(q, S, S)) - np.einsum("ij,ji->i", K_sx, np.linalg.solve(C, K_sx.T))
        f_mean, f_var = post.predict_f(x_new, component=label)
        assert f_mean.shape == f_var.shape == (5, P)
        np.testing.assert_allclose(f_mean.ravel(), mean, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(f_var.ravel(), var, rtol=1e-9, atol=1e-12)
        # The long query (one output a row) gives the same numbers.
        np.testing.assert_allclose(post.predict_f(S, component=label)[0], f_mean.ravel(), rtol=1e-12, atol=1e-14)
        means.append(f_mean)
    np.testing.assert_allclose(means[0] + means[1], post.predict_f(x_new)[0], rtol=1e-10, atol=1e-12)


def test_vfe_component_is_its_part_through_q_of_u():
    x, Y = _data()
    X, y = _long(x, Y)
    Z = np.array([[-1.5], [-0.3], [0.6], [1.7]])
    post = _model(gd.inference.VFE(), gd.inducing.Fixed(Z)).fit(x, Y, optimize=False)
    Zl = isotopic_grid(Z, P)
    assert post.jitter == 0.0
    K_uu = sum(_part(q, Zl, Zl) for q in range(2))
    K_uf = sum(_part(q, Zl, X) for q in range(2))
    lam = NOISE[X[:, -1].astype(int)]
    # Titsias (2009): q(u) = N(K_uu Sigma K_uf Lam^-1 y, K_uu Sigma K_uu), Sigma = (K_uu + K_uf Lam^-1 K_fu)^-1.
    Sigma = np.linalg.inv(K_uu + (K_uf / lam) @ K_uf.T)
    m_u, S_u = K_uu @ Sigma @ (K_uf / lam) @ y, K_uu @ Sigma @ K_uu
    x_new, S = _new()
    for q in range(2):
        A = np.linalg.solve(K_uu, _part(q, Zl, S)).T               # K^q_*u K_uu^-1
        mean = A @ m_u
        var = np.diag(_part(q, S, S)) - np.einsum("ij,ji->i", A, _part(q, Zl, S)) + np.einsum("ij,jk,ik->i", A, S_u, A)
        f_mean, f_var = post.predict_f(x_new, component=q)
        np.testing.assert_allclose(f_mean.ravel(), mean, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(f_var.ravel(), var, rtol=1e-7, atol=1e-10)


def test_component_refusals():
    x, Y = _data()
    post = _model().fit(x, Y, optimize=False)
    with pytest.raises(ValueError, match=r"LMC: no part labelled 'smooth'; the parts are \['0', 'rough'\]"):
        post.predict_f(x, component="smooth")
    icm = gd.Model(gd.kernels.ICM(gd.kernels.SquaredExponential(), P), gd.likelihoods.Gaussian(0.1)).fit(
        x, Y, optimize=False)
    with pytest.raises(ValueError, match=r"component=0 needs a Sum kernel \(k1 \+ k2\) or an LMC"):
        icm.predict_f(x, component=0)


def test_part_kernel_is_its_share_of_the_gram():
    lmc = _model().kernel
    x, _ = _data()
    X = isotopic_grid(x, P)
    np.testing.assert_allclose(lmc.part_kernel("rough").gram(X, X), _part(1, X, X), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(lmc.part_kernel(0).gram(X, X) + lmc.part_kernel("rough").gram(X, X), lmc.gram(X, X),
                               rtol=1e-13, atol=1e-15)
    assert np.allclose(dense_kernel(x, x, 0.8, 1.0, "se"), _part(0, X[:9], X[:9]) / (W[0, 0, 0] ** 2 + KAPPA[0, 0]))


def _with_noise_column(x, seed):
    """x (n, 1) with a column of noise after it: (n, 2), which a kernel on column 0 must not read."""
    return np.column_stack([x, np.random.default_rng(seed).standard_normal(len(x))])


@pytest.mark.parametrize("outer, inner", [((0, 2), None), ((1, 0, 2), (1,))])
def test_lmc_component_reads_the_lmc_active_dims(outer, inner):
    """An LMC on columns ``outer`` of (x, noise, output) -- its base kernels on their ``inner``
    columns of those -- reads x alone: every part's posterior is the one fitted on x alone (the
    review's reproducer: the part had lost the LMC's active_dims, 0.53 off), and the parts add up."""
    x, Y = _data()
    k0 = gd.kernels.SquaredExponential(BASES[0][0], BASES[0][1], active_dims=inner)
    k1 = gd.kernels.Matern32(BASES[1][0], BASES[1][1], name="rough", active_dims=inner)
    masked = gd.Model(gd.kernels.LMC((k0, k1), P, W=W, kappa=KAPPA, active_dims=outer),
                      gd.likelihoods.OutputGaussian(P, variance=NOISE), inference=gd.inference.Exact()).fit(
        _with_noise_column(x, 1), Y, optimize=False)
    plain = _model().fit(x, Y, optimize=False)
    x_new, _ = _new()
    wide = _with_noise_column(x_new, 2)
    means = []
    for label in (0, "rough"):
        got, want = masked.predict_f(wide, component=label), plain.predict_f(x_new, component=label)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-12)
        means.append(got[0])
    np.testing.assert_allclose(means[0] + means[1], masked.predict_f(wide)[0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("outer, inner", [((0,), None), ((1, 0), (1,))])
def test_sum_component_reads_the_sum_active_dims(outer, inner):
    """The same for a Sum of one output (Sum.part carries the Sum's active_dims, composed with
    the part's own): each part's posterior is the dense one on x alone, and the parts add up."""
    rng = np.random.default_rng(5)
    x = np.sort(rng.uniform(-2.0, 2.0, 12))[:, None]
    y = np.sin(2 * x[:, 0]) + 0.1 * rng.standard_normal(12)
    se = gd.kernels.SquaredExponential(0.8, 1.0, active_dims=inner)
    m32 = gd.kernels.Matern32(1.5, 0.7, name="rough", active_dims=inner)
    post = gd.Model(gd.kernels.Sum((se, m32), active_dims=outer), gd.likelihoods.Gaussian(0.1),
                    inference=gd.inference.Exact()).fit(_with_noise_column(x, 3), y, optimize=False)
    assert post.jitter == 0.0
    x_new = np.linspace(-2.5, 2.5, 5)[:, None]
    parts = ((0.8, 1.0, "se"), (1.5, 0.7, "m32"))
    C = sum(dense_kernel(x, x, *p) for p in parts) + 0.1 * np.eye(12)
    means = []
    for label, p in zip((0, "rough"), parts):
        K_sx = dense_kernel(x_new, x, *p)
        mean, var = post.predict_f(_with_noise_column(x_new, 4), component=label)
        np.testing.assert_allclose(mean, K_sx @ np.linalg.solve(C, y), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(var, p[1] - np.einsum("ij,ji->i", K_sx, np.linalg.solve(C, K_sx.T)),
                                   rtol=1e-9, atol=1e-12)
        means.append(mean)
    np.testing.assert_allclose(means[0] + means[1], post.predict_f(_with_noise_column(x_new, 4))[0],
                               rtol=1e-10, atol=1e-12)


def test_part_on_the_composite_columns():
    """part() composes the composite's active_dims with the part's (the part's index the
    composite's columns) and refuses a part's column the composite does not read."""
    se, m32 = gd.kernels.SquaredExponential(active_dims=(1,)), gd.kernels.Matern32()
    total = gd.kernels.Sum((se, m32), active_dims=(3, 0))
    assert total.part(0).active_dims == (0,) and total.part(1).active_dims == (3, 0)
    assert gd.kernels.Sum((se, m32)).part(0) is se
    X = np.random.default_rng(6).standard_normal((4, 5))
    np.testing.assert_allclose(total.part(0).gram(X, X) + total.part(1).gram(X, X), total.gram(X, X), rtol=1e-14)
    with pytest.raises(ValueError, match=r"Sum: part Matern32\(isotropic\)'s active_dims \(2,\) name a column beyond "
                                         r"the 2 the sum reads \(active_dims \(3, 0\)\)"):
        gd.kernels.Sum((se, gd.kernels.Matern32(active_dims=(2,))), active_dims=(3, 0)).part(1)
    lmc = gd.kernels.LMC((gd.kernels.SquaredExponential(), gd.kernels.Matern32()), P, active_dims=(2, 0))
    assert lmc.part_kernel(1).active_dims == (2, 0)
    X[:, 0] = np.arange(4) % P                                  # the LMC's output column
    np.testing.assert_allclose(lmc.part_kernel(0).gram(X, X) + lmc.part_kernel(1).gram(X, X), lmc.gram(X, X),
                               rtol=1e-14)
