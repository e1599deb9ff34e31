"""Matern12, RationalQuadratic and Periodic against GPML 4.2 (``gpml/kernels/*.json``: exact GP,
nlZ, its gradients and the predictions to rtol 1e-8), Periodic's period, and Periodic with a
squared-exponential base against scikit-learn's ExpSineSquared."""
import numpy as np
import pytest

import gpdsl as gd
from gpml_kernel_cases import check_case

K = gd.kernels


def _model(kernel):
    return gd.Model(kernel, gd.likelihoods.Gaussian(), inference=gd.inference.Exact())


def _noise(lik):
    return {"likelihood.variance": np.exp(2 * lik[0])}


def test_matern12_iso():
    def natural(cov, mean, lik):      # [log ell; log sf]
        return {"kernel.lengthscale": np.exp(cov[0]), "kernel.variance": np.exp(2 * cov[1]), **_noise(lik)}
    check_case("matern12_iso", _model(K.Matern12()), natural)


def test_rq_iso():
    def natural(cov, mean, lik):      # [log ell; log sf; log alpha]
        return {"kernel.lengthscale": np.exp(cov[0]), "kernel.variance": np.exp(2 * cov[1]),
                "kernel.alpha": np.exp(cov[2]), **_noise(lik)}
    check_case("rq_iso", _model(K.RationalQuadratic()), natural)


def test_rq_ard():
    def natural(cov, mean, lik):      # [log ell_1; log ell_2; log sf; log alpha]
        return {"kernel.lengthscale": np.exp(cov[:2]), "kernel.variance": np.exp(2 * cov[2]),
                "kernel.alpha": np.exp(cov[3]), **_noise(lik)}
    check_case("rq_ard", _model(K.RationalQuadratic(lengthscale=np.ones(2))), natural)


@pytest.mark.filterwarnings("ignore:Exact. the fitted objective")   # the harness's fit at GPML's values
def test_periodic():
    def natural(cov, mean, lik):      # [log ell; log p; log sf]
        return {"kernel.lengthscale": np.exp(cov[0]), "kernel.period": np.exp(cov[1]),
                "kernel.variance": np.exp(2 * cov[2]), **_noise(lik)}
    check_case("periodic", _model(K.Periodic(K.SquaredExponential())), natural)


def test_mauna_loa_like():
    """covSum(covSEiso, covProd(covSEiso, covPeriodic), covRQiso)."""
    kernel = K.Sum((K.SquaredExponential(), K.Product((K.SquaredExponential(), K.Periodic())),
                    K.RationalQuadratic()))

    def natural(cov, mean, lik):
        return {"kernel.0.lengthscale": np.exp(cov[0]), "kernel.0.variance": np.exp(2 * cov[1]),
                "kernel.1.0.lengthscale": np.exp(cov[2]), "kernel.1.0.variance": np.exp(2 * cov[3]),
                "kernel.1.1.lengthscale": np.exp(cov[4]), "kernel.1.1.period": np.exp(cov[5]),
                "kernel.1.1.variance": np.exp(2 * cov[6]),
                "kernel.2.lengthscale": np.exp(cov[7]), "kernel.2.variance": np.exp(2 * cov[8]),
                "kernel.2.alpha": np.exp(cov[9]), **_noise(lik)}
    check_case("mauna_loa_like", _model(kernel), natural)


PERIODICS = [K.Periodic(K.SquaredExponential(0.7, 1.3), period=1.7),
             K.Periodic(K.Matern12(np.array([0.5, 1.1]), 0.8), period=np.array([0.9, 2.3])),
             K.Periodic(K.Matern52(0.9), period=np.array([1.4, 0.6])),
             K.Periodic(K.RationalQuadratic(np.array([0.8, 0.4]), 1.1, alpha=0.5), period=0.8)]


@pytest.mark.parametrize("kernel", PERIODICS, ids=lambda k: k.describe())
def test_periodic_is_periodic(kernel):
    """k(x + p_d e_d, z) = k(x, z) = k(x, z + 3 p_d e_d) for each feature d."""
    rng = np.random.default_rng(11)
    X, Z = rng.uniform(-2, 2, size=(6, 2)), rng.uniform(-2, 2, size=(4, 2))
    k = kernel.bind()
    period = np.broadcast_to(k.period, (2,))
    K0 = k.gram(X, Z)
    for d in range(2):
        shift = np.zeros(2)
        shift[d] = period[d]
        np.testing.assert_allclose(k.gram(X + shift, Z), K0, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(k.gram(X, Z - 3 * shift), K0, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(k.gram(X + period, Z + 2 * period), K0, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("lengthscale,period,variance", [(1.0, 1.0, 1.0), (0.6, 2.5, 1.7), (2.3, 0.4, 0.3)])
def test_periodic_se_is_sklearn_exp_sine_squared(lengthscale, period, variance):
    from sklearn.gaussian_process.kernels import ConstantKernel, ExpSineSquared

    rng = np.random.default_rng(3)
    X, Z = rng.uniform(-3, 3, size=(8, 1)), rng.uniform(-3, 3, size=(5, 1))
    ours = K.Periodic(K.SquaredExponential(lengthscale, variance), period=period).bind()
    theirs = ConstantKernel(variance) * ExpSineSquared(length_scale=lengthscale, periodicity=period)
    np.testing.assert_allclose(ours.gram(X, Z), theirs(X, Z), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ours.diag(X), theirs.diag(X), rtol=1e-14)


def test_matern12_coincident_pairs_have_finite_zero_gradients():
    """A coincident pair contributes 0 to every gradient, without NaN or inf, however close
    another pair is."""
    X = np.array([[0.3, -1.2], [0.3, -1.2], [0.3 + 1e-13, -1.2], [1.5, 0.4]])
    for kernel in (K.Matern12(np.array([0.7, 1.6]), 1.4), K.Periodic(K.Matern12(0.8), period=1.3)):
        k = kernel.bind()
        G = np.ones((4, 4))
        grads, dX = k.vjp(X, X, G)
        assert all(np.all(np.isfinite(g)) for g in grads.values()) and np.all(np.isfinite(dX))
        np.testing.assert_array_equal(np.diag(k.gram(X, X)), k.diag(X))
        # Only the coincident pairs (0, 0), (0, 1), (1, 0), (1, 1): every gradient is 0.
        grads, dX = k.vjp(X[:2], X[:2], np.ones((2, 2)))
        assert np.all(dX == 0.0) and np.all(grads["lengthscale"] == 0.0)


def test_periodic_validation_and_model_file(tmp_path):
    with pytest.raises(TypeError, match="Periodic: base must be .*got Sum"):
        K.Periodic(K.SquaredExponential() + K.Matern32())
    with pytest.raises(ValueError, match="Periodic: period must be positive"):
        K.Periodic(period=-1.0)
    with pytest.raises(ValueError, match="period has 3 entries but X has 2 features"):
        K.Periodic(period=np.ones(3)).entries("kernel", np.zeros((1, 2)))
    model = _model(K.Periodic(K.RationalQuadratic(np.array([0.5, 2.0]), alpha=gd.Fixed(0.3)), period=[1.0, 3.0]))
    assert model.to_dict()["kernel"]["base"]["type"] == "RationalQuadratic"
    assert gd.Model.from_dict(model.to_dict()) == model
    model.to_toml(tmp_path / "model.toml")
    assert gd.Model.from_toml(tmp_path / "model.toml") == model
    with pytest.raises(ValueError, match=r"kernel.base: unknown type 'Matern13'"):
        gd.Model.from_dict({"kernel": {"type": "Periodic", "base": {"type": "Matern13"}},
                            "likelihood": {"type": "Gaussian"}})
    with pytest.raises(ValueError, match="Periodic: base must be"):
        gd.Model.from_dict({"kernel": {"type": "Periodic", "base": {"type": "Sum", "kernels": [
            {"type": "Matern32"}, {"type": "Matern52"}]}}, "likelihood": {"type": "Gaussian"}})
