"""Numba covariance kernels and their VJPs against dense NumPy and finite differences."""
import numpy as np
import pytest

import gpdsl as gd
from gpdsl.components import bind
from naive import central_difference, kernel as naive_kernel

KINDS = [(gd.kernels.SquaredExponential, "se"), (gd.kernels.Matern32, "m32"), (gd.kernels.Matern52, "m52")]
rng = np.random.default_rng(0)
X1 = rng.normal(size=(7, 3))
X2 = np.vstack([rng.normal(size=(4, 3)), X1[:1]])     # a coincident pair exercises r = 0


def _values(ls, var):
    return {"kernel.lengthscale": np.asarray(ls, float), "kernel.variance": np.asarray(var, float)}


@pytest.mark.parametrize("cls,kind", KINDS)
@pytest.mark.parametrize("ls", [0.8, np.array([0.5, 1.3, 2.0])])
def test_gram_matches_dense(cls, kind, ls):
    k = cls(lengthscale=ls, variance=1.7)
    K = bind(k, _values(ls, 1.7), "kernel").gram(X1, X2)
    np.testing.assert_allclose(K, naive_kernel(X1, X2, ls, 1.7, kind), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(bind(k, _values(ls, 1.7), "kernel").diag(X1), 1.7)


@pytest.mark.parametrize("cls,kind", KINDS)
@pytest.mark.parametrize("ls", [0.8, np.array([0.5, 1.3, 2.0])])
def test_vjp_matches_finite_differences(cls, kind, ls):
    k = cls(lengthscale=ls, variance=1.7)
    G = rng.normal(size=(X1.shape[0], X2.shape[0]))
    grads, dX1 = bind(k, _values(ls, 1.7), "kernel").vjp(X1, X2, G)

    def contract(l, v, A=X1):
        return np.sum(G * naive_kernel(A, X2, l, v, kind))

    fd_ls = central_difference(lambda l: contract(l, 1.7), np.asarray(ls, float))
    if np.ndim(ls) == 0:
        fd_ls = fd_ls.sum()
    np.testing.assert_allclose(grads["kernel.lengthscale"], fd_ls, rtol=1e-5)
    fd_var = central_difference(lambda v: contract(ls, v), np.array(1.7))
    np.testing.assert_allclose(grads["kernel.variance"], fd_var, rtol=1e-5)
    fd_X = central_difference(lambda A: contract(ls, 1.7, A), X1)
    np.testing.assert_allclose(dX1, fd_X, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("combine", ["sum", "product"])
def test_composite_kernels(combine):
    a = gd.kernels.SquaredExponential(0.7, 1.2)
    b = gd.kernels.Matern52(np.array([1.0, 2.0, 0.5]), 0.6)
    k = a + b if combine == "sum" else a * b
    entries = k.entries("kernel", np.zeros((1, 3)))
    values = {e.name: e.value for e in entries}
    assert set(values) == {"kernel.0.lengthscale", "kernel.0.variance", "kernel.1.lengthscale",
                           "kernel.1.variance"}
    Ka = naive_kernel(X1, X2, 0.7, 1.2, "se")
    Kb = naive_kernel(X1, X2, [1.0, 2.0, 0.5], 0.6, "m52")
    expected = Ka + Kb if combine == "sum" else Ka * Kb
    np.testing.assert_allclose(bind(k, values, "kernel").gram(X1, X2), expected, rtol=1e-13)
    G = rng.normal(size=expected.shape)
    grads, dX1 = bind(k, values, "kernel").vjp(X1, X2, G)
    for name, v in values.items():
        def f(x, name=name):
            return np.sum(G * bind(k, {**values, name: x}, "kernel").gram(X1, X2))
        np.testing.assert_allclose(grads[name], central_difference(f, v), rtol=1e-5)
    fd_X = central_difference(lambda A: np.sum(G * bind(k, values, "kernel").gram(A, X2)), X1)
    np.testing.assert_allclose(dX1, fd_X, rtol=1e-5, atol=1e-8)
    g = rng.normal(size=X1.shape[0])
    dg = bind(k, values, "kernel").diag_vjp(X1, g)
    for name in ("kernel.0.variance", "kernel.1.variance"):
        f = lambda x, name=name: np.sum(g * bind(k, {**values, name: x}, "kernel").diag(X1))
        np.testing.assert_allclose(dg[name], central_difference(f, values[name]), rtol=1e-6)


@pytest.mark.parametrize("bad,match", [
    (dict(lengthscale=-1.0), "SquaredExponential: lengthscale must be positive"),
    (dict(variance=0.0), "SquaredExponential: variance must be positive"),
    (dict(lengthscale=np.nan), "lengthscale must be finite"),
    (dict(variance=[1.0, 2.0]), "variance must be a scalar"),
    (dict(lengthscale="abc"), "lengthscale must be a number"),
])
def test_kernel_validation(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        gd.kernels.SquaredExponential(**bad)


def test_ard_length_mismatch():
    k = gd.kernels.Matern32(lengthscale=[1.0, 2.0])
    with pytest.raises(ValueError, match="lengthscale has 2 entries but X has 3 features"):
        k.entries("kernel", np.zeros((1, 3)))


def test_change_point_refuses_a_fitted_location_outside_the_inputs(tmp_path):
    """A ChangePoint location outside the training inputs' range along its dimension is flat there
    (no gradient: a fit left it at its start and said converged): refused at fit with the class,
    the argument, the value and the range.  Declared Fixed it is held there on purpose; nested in a
    sum it is checked as well; a saved model reads back."""
    X = np.linspace(-3.0, 3.0, 25)[:, None]
    y = np.sin(X[:, 0]) + 0.1 * np.random.default_rng(3).normal(size=25)
    parts = (gd.kernels.SquaredExponential(), gd.kernels.Constant())
    far = gd.Model(gd.kernels.ChangePoint(parts, location=100.0), gd.likelihoods.Gaussian(0.1))
    match = (r"ChangePoint: location = 100 lies outside the training inputs' range \[-3, 3\] along dimension 0"
             r".*gd.Fixed\(100\)")
    with pytest.raises(ValueError, match=match):
        far.fit(X, y, max_iter=20)
    nested = gd.Model(gd.kernels.ChangePoint(parts, location=-7.5) + gd.kernels.White(0.1), gd.likelihoods.Gaussian())
    with pytest.raises(ValueError, match=r"location = -7.5 lies outside .*\[-3, 3\]"):
        nested.fit(X, y, max_iter=20)
    held = gd.Model(gd.kernels.ChangePoint(parts, location=gd.Fixed(100.0)), gd.likelihoods.Gaussian(0.1))
    post = held.fit(X, y, max_iter=20)
    assert float(post.values["kernel.location"]) == 100.0
    edge = gd.Model(gd.kernels.ChangePoint(parts, location=3.0), gd.likelihoods.Gaussian(0.1))   # the range is closed
    assert -3.0 <= float(edge.fit(X, y, max_iter=200).values["kernel.location"]) <= 3.0
    inside = gd.Model(gd.kernels.ChangePoint(parts, location=1.0), gd.likelihoods.Gaussian(0.1)).fit(X, y, max_iter=50)
    assert -3.0 < float(inside.values["kernel.location"]) < 3.0
    inside.save(tmp_path / "change_point.nc")
    back = gd.load(tmp_path / "change_point.nc")
    assert float(back.values["kernel.location"]) == float(inside.values["kernel.location"])


# Clusters of inputs a length-scale apart, the clusters spread over ~6: the scaled inputs' squared
# norms reach ~1e13, far past EXPANSION_MAX_SCALED_NORM2, where the BLAS expansion of r^2 rounds
# to ~1e-3 (fuzz case poisson_vgp 50024: a gradient of 0.22 on a length-scale whose K was diagonal).
TINY_LS = 1e-6
_centres = np.repeat(rng.uniform(-3.0, 3.0, size=(4, 2)), 3, axis=0)
FAR_X1 = _centres + TINY_LS * rng.normal(size=_centres.shape)
FAR_X2 = np.vstack([FAR_X1[::2] + TINY_LS * rng.normal(size=(6, 2)), FAR_X1[:1]])


@pytest.mark.parametrize("cls,kind", KINDS)
def test_gram_and_vjp_at_a_length_scale_far_below_the_inputs_spread(cls, kind):
    assert np.max(np.sum(FAR_X1 ** 2, axis=1)) / TINY_LS ** 2 > 1e3 * gd.kernels.stationary.EXPANSION_MAX_SCALED_NORM2
    k = bind(cls(lengthscale=TINY_LS, variance=1.7), _values(TINY_LS, 1.7), "kernel")
    K = k.gram(FAR_X1, FAR_X2)
    dense = naive_kernel(FAR_X1, FAR_X2, TINY_LS, 1.7, kind)
    assert np.count_nonzero(dense > 1e-3) > FAR_X1.shape[0]      # close pairs, not only a diagonal
    np.testing.assert_allclose(K, dense, rtol=1e-12, atol=1e-15)
    G = rng.normal(size=K.shape)
    grads, dX1 = k.vjp(FAR_X1, FAR_X2, G)
    # In log(lengthscale): relative steps, as the optimiser takes them.
    fd_log_ls = central_difference(
        lambda t: np.sum(G * naive_kernel(FAR_X1, FAR_X2, TINY_LS * np.exp(t), 1.7, kind)), np.array(0.0))
    np.testing.assert_allclose(grads["kernel.lengthscale"] * TINY_LS, fd_log_ls, rtol=1e-6, atol=1e-9)
    # In units of the length-scale (a step relative to |x| ~ 3 would span many length-scales), a
    # step of 1e-3 of it: the dense differences of inputs ~3 carry ~1e-16 absolute rounding.
    fd_X = central_difference(lambda T: np.sum(G * naive_kernel(FAR_X1 + TINY_LS * T, FAR_X2, TINY_LS, 1.7, kind)),
                              np.zeros_like(FAR_X1), step=1e-3)
    np.testing.assert_allclose(dX1 * TINY_LS, fd_X, rtol=1e-5, atol=1e-9)


def test_a_diagonal_gram_has_no_length_scale_gradient():
    """Distinct inputs 5e-3 apart at a length-scale of 2e-7: K is exactly diagonal (what
    poisson_vgp 50024 reached), so d/d lengthscale of any contraction is exactly 0."""
    X = np.linspace(-3.0, 3.0, 36)[:, None] + 1e-3 * rng.uniform(size=(36, 1))
    k = bind(gd.kernels.SquaredExponential(), _values(2e-7, 1.4e5), "kernel")
    K = k.gram(X, X)
    assert np.array_equal(K, np.diag(np.full(36, 1.4e5)))
    grads, _ = k.vjp(X, X, rng.normal(size=K.shape))
    assert grads["kernel.lengthscale"] == 0.0
