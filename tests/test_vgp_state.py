"""VGP's predictive state (methods.vgp): its correction is the identity, held as None (the dense
methods' in-memory form, methods.common.WhitenedPrediction), and its predictions are those of q(f)
= N(K alpha, (K^-1 + Lambda^2)^-1) by the dense NumPy formulas."""
import numpy as np

import gpdsl as gd


def _gram(A, B, lengthscale, variance):
    d2 = (A[:, None, 0] - B[None, :, 0]) ** 2
    return variance * np.exp(-0.5 * d2 / lengthscale ** 2)


def test_vgp_correction_is_the_identity_and_predicts_q(tmp_path):
    rng = np.random.default_rng(5)
    X = np.sort(rng.uniform(-3.0, 3.0, 25))[:, None]
    y = (np.sin(X[:, 0]) + 0.3 * rng.standard_normal(25) > 0).astype(float)
    model = gd.Model(gd.kernels.SquaredExponential(0.9, 1.7), gd.likelihoods.Bernoulli(), inference=gd.inference.VGP())
    post = model.fit(X, y, fixed=("kernel.lengthscale", "kernel.variance"), max_iter=40)
    assert post.state.correction is None and post.jitter == 0.0
    alpha, lam = post.sites.q["variational.alpha"], post.sites.q["variational.lambda"]
    K = _gram(X, X, 0.9, 1.7)
    X_new = np.linspace(-4.0, 4.0, 9)[:, None]
    K_s = _gram(X_new, X, 0.9, 1.7)
    # Dense: q(f) = N(K alpha, (K^-1 + Lam^2)^-1); the GP conditional through it at X_new.
    mean = K_s @ alpha
    var = 1.7 - np.einsum("ij,ji->i", K_s, np.linalg.solve(K + np.diag(lam ** -2.0), K_s.T))
    f_mean, f_var = post.predict_f(X_new)
    np.testing.assert_allclose(f_mean, mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(f_var, var, rtol=1e-9, atol=1e-12)
    # (K^-1 + Lam^2)^-1 as K - K (K + Lam^-2)^-1 K (K's condition number here is ~1e17).
    q_cov = K - K @ np.linalg.solve(K + np.diag(lam ** -2.0), K)
    np.testing.assert_allclose(post.state.q_cov, q_cov, rtol=0, atol=1e-12)
    np.testing.assert_allclose(post.state.q_mean, K @ alpha, rtol=0, atol=1e-12)
    # Written as the identity it stands for, read back as None: the same predictions.
    post.save(tmp_path / "vgp.nc")
    back = gd.load(tmp_path / "vgp.nc")
    assert back.state.correction is None
    np.testing.assert_array_equal(back.predict_f(X_new)[1], f_var)
