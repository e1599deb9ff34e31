"""``gd.kernels.Separate``: one kernel per latent function of a K-latent likelihood.

Its stacks against the parts computed one by one, its gradients against central differences,
the refusals that keep it where it means something, and its model-file round trip.  Fits with
it are tested with each multi-latent method: SVGP in tests/test_svgp_multiclass.py, Laplace and
greedy selection in tests/test_separate_methods.py, the augmented method in
tests/test_logistic_softmax.py, predictions and files in tests/test_separate_predict.py."""
from __future__ import annotations

import numpy as np
import pytest

import gpdsl as gd
from naive import central_difference

rng = np.random.default_rng(7)
X1 = rng.uniform(-1.5, 1.5, size=(7, 2))
X2 = rng.uniform(-1.5, 1.5, size=(5, 2))
PARTS = (gd.kernels.SquaredExponential(0.7, 1.2), gd.kernels.Matern52(np.array([1.0, 0.5]), 0.6),
         gd.kernels.Periodic(period=1.3, name="cycle"))
SEPARATE = gd.kernels.Separate(PARTS)


def _values(kernel, X):
    return {p.name: e.value for p, e in zip(kernel.parameters(X), kernel.entries("c", X))}


def test_stacks_are_the_parts_one_by_one():
    k = SEPARATE.bind()
    assert k.n_outputs == 3
    assert k.gram(X1, X2).shape == (3, 7, 5) and k.diag(X1).shape == (3, 7)
    for i, part in enumerate(PARTS):
        np.testing.assert_array_equal(k.gram(X1, X2)[i], part.bind().gram(X1, X2))
        np.testing.assert_array_equal(k.diag(X1)[i], part.bind().diag(X1))
    assert [p.name for p in SEPARATE.parameters(X1)][:2] == ["0.lengthscale", "0.variance"]
    assert "cycle.period" in [p.name for p in SEPARATE.parameters(X1)]


def test_gradients_match_central_differences():
    values = _values(SEPARATE, X1)
    G = rng.normal(size=(3, 7, 5))
    g = rng.normal(size=(3, 7))
    grads, dX1 = SEPARATE.bind(values).vjp(X1, X2, G)
    dgrads = SEPARATE.bind(values).diag_vjp(X1, g)
    assert set(grads) == set(values)
    for name, value in values.items():
        fd = central_difference(lambda v: np.sum(G * SEPARATE.bind({**values, name: v}).gram(X1, X2)), value)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-5, atol=1e-8, err_msg=name)
        fd = central_difference(lambda v: np.sum(g * SEPARATE.bind({**values, name: v}).diag(X1)), value)
        np.testing.assert_allclose(dgrads.get(name, 0.0), fd, rtol=1e-5, atol=1e-8, err_msg=f"diag {name}")
    fd = central_difference(lambda A: np.sum(G * SEPARATE.bind(values).gram(A, X2)), X1)
    np.testing.assert_allclose(dX1, fd, rtol=1e-5, atol=1e-8)


def test_refusals_name_the_problem():
    with pytest.raises(ValueError, match="Model: kernel Separate.*3 latent functions.*Categorical.* has 4"):
        gd.Model(SEPARATE, gd.likelihoods.Categorical(4), inference=gd.inference.Laplace())
    with pytest.raises(ValueError, match="3 latent functions.*has 1"):
        gd.Model(SEPARATE, gd.likelihoods.Bernoulli(), inference=gd.inference.Laplace())
    with pytest.raises(ValueError, match="Sum: a kernel of several latent functions"):
        SEPARATE + gd.kernels.SquaredExponential()
    with pytest.raises(ValueError, match="Separate: each part is the kernel of one latent function"):
        gd.kernels.Separate((SEPARATE, gd.kernels.SquaredExponential()))
    with pytest.raises(TypeError, match="Separate: kernels must be a tuple of at least two kernels"):
        gd.kernels.Separate((gd.kernels.SquaredExponential(),))


def test_model_file_round_trips(tmp_path):
    model = gd.Model(SEPARATE, gd.likelihoods.Categorical(3), inference=gd.inference.Laplace())
    model.to_toml(tmp_path / "m.toml")
    assert gd.Model.from_toml(tmp_path / "m.toml") == model
