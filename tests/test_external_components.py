"""A likelihood and a kernel defined outside the package (tests/external_components.py) fit with
Laplace and with SVGP, save, and load back by the module name they are written under."""
import numpy as np
import pytest

import gpdsl as gd
from external_components import CloglogBernoulli, WhiteSquaredExponential

rng = np.random.default_rng(3)
X = rng.uniform(-2, 2, size=(60, 2))
f_true = 1.5 * np.sin(X[:, 0]) + X[:, 1] - 0.5
y = np.where(rng.uniform(size=60) < -np.expm1(-np.exp(f_true)), 1.0, -1.0)


def test_registered_under_their_module():
    assert gd.likelihoods.LIKELIHOODS["external_components:CloglogBernoulli"] is CloglogBernoulli
    assert gd.kernels.KERNELS["external_components:WhiteSquaredExponential"] is WhiteSquaredExponential
    assert not CloglogBernoulli().provides("site_model")
    assert CloglogBernoulli().provides("log_density_derivatives")
    assert CloglogBernoulli().provides("variational_expectations")
    with pytest.raises(ValueError, match="CloglogBernoulli with EP is not supported"):
        gd.Model(WhiteSquaredExponential(), CloglogBernoulli(), inference=gd.inference.EP())


@pytest.mark.parametrize("inference,inducing", [(gd.inference.Laplace(), None),
                                                (gd.inference.SVGP(), gd.inducing.KMeans(12, seed=0))])
def test_fit_save_load(inference, inducing, tmp_path):
    model = gd.Model(WhiteSquaredExponential(1.0, 1.0, 0.05), CloglogBernoulli(), inducing, inference)
    post = model.fit(X, y, max_iter=200)
    assert post.diagnostics.converged
    assert set(post.values) >= {"kernel.lengthscale", "kernel.variance", "kernel.white"}
    X_test = rng.uniform(-2, 2, size=(200, 2))
    p_true = -np.expm1(-np.exp(1.5 * np.sin(X_test[:, 0]) + X_test[:, 1] - 0.5))
    p = post.predict(X_test)["p"].values
    assert np.mean(np.abs(p - p_true)) < 0.15          # the fit follows the cloglog truth
    post.save(tmp_path / "external.nc")
    back = gd.load(tmp_path / "external.nc")
    assert back.model == model
    np.testing.assert_array_equal(back.predict(X_test)["p"].values, p)
    assert gd.Model.from_dict(model.to_dict()) == model
    assert model.to_dict()["likelihood"]["type"] == "external_components:CloglogBernoulli"
