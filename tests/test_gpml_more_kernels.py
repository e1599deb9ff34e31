"""The dot-product, constant, white, spectral-mixture and change-point kernels: exact GPs against
GPML 4.2's oracles (nlZ, its gradients, predictions, at rtol 1e-8), and each kernel against an
independent formula (scikit-learn's DotProduct for Linear and Polynomial, the identity for White,
the dense switch formula for ChangePoint)."""
import numpy as np
import pytest

import gpdsl as gd
from gpdsl.components import bind
from gpdsl.inducing import GreedyVariance, SelectionContext
from gpml_kernel_cases import check_case
from naive import kernel as naive_kernel

K = gd.kernels
rng = np.random.default_rng(11)
XA = rng.normal(size=(6, 2))
XB = rng.normal(size=(4, 2))


def _exact(kernel):
    return gd.Model(kernel, gd.likelihoods.Gaussian(), inference=gd.inference.Exact())


# -- GPML oracles ---------------------------------------------------------------------------------
def test_gpml_linear_ard():
    def natural(cov, mean, lik):          # covLINard: variance_d = ell_d^-2
        return {"kernel.variance": np.exp(-2.0 * cov), "likelihood.variance": np.exp(2.0 * lik[0])}
    check_case("linear_ard", _exact(K.Linear(variance=np.ones(2))), natural)


def test_gpml_poly2():
    def natural(cov, mean, lik):          # covPoly: sf^2 (c + x.z)^2, hyp [log c; log sf]
        return {"kernel.offset": np.exp(cov[0]), "kernel.variance": np.exp(2.0 * cov[1]),
                "likelihood.variance": np.exp(2.0 * lik[0])}
    check_case("poly2", _exact(K.Polynomial(degree=2)), natural)


def test_gpml_se_plus_const_plus_white():
    def natural(cov, mean, lik):
        return {"kernel.0.lengthscale": np.exp(cov[0]), "kernel.0.variance": np.exp(2.0 * cov[1]),
                "kernel.1.variance": np.exp(2.0 * cov[2]), "kernel.2.variance": np.exp(2.0 * cov[3]),
                "likelihood.variance": np.exp(2.0 * lik[0])}
    check_case("se_plus_const_plus_white", _exact(K.SquaredExponential() + K.Constant() + K.White()), natural)


def test_gpml_spectral_mixture_q2():
    def natural(cov, mean, lik):          # covSM: [log w; log m; log sqrt(v)], s = sqrt(v)
        return {"kernel.weights": np.exp(cov[0:2]), "kernel.means": np.exp(cov[2:4]).reshape(2, 1),
                "kernel.scales": np.exp(cov[4:6]).reshape(2, 1), "likelihood.variance": np.exp(2.0 * lik[0])}
    check_case("spectral_mixture_q2", _exact(K.SpectralMixture(n_components=2)), natural)


def test_gpml_active_dims_se_x1_plus_lin_x2():
    def natural(cov, mean, lik):          # covMask(SEiso) on column 1 + covMask(LINiso) on column 2
        return {"kernel.0.lengthscale": np.exp(cov[0]), "kernel.0.variance": np.exp(2.0 * cov[1]),
                "kernel.1.variance": np.exp(-2.0 * cov[2]), "likelihood.variance": np.exp(2.0 * lik[0])}
    kernel = K.SquaredExponential(active_dims=[0]) + K.Linear(active_dims=[1])
    check_case("active_dims_se_x1_plus_lin_x2", _exact(kernel), natural)


# -- independent formulas ------------------------------------------------------------------------
def test_linear_and_polynomial_match_scikit_learn():
    from sklearn.gaussian_process.kernels import ConstantKernel, DotProduct
    sigma0 = 0.7
    lin = K.Linear(variance=1.0, offset=sigma0 ** 2).bind()
    np.testing.assert_allclose(lin.gram(XA, XB), DotProduct(sigma_0=sigma0)(XA, XB), rtol=1e-13)
    np.testing.assert_allclose(lin.diag(XA), DotProduct(sigma_0=sigma0).diag(XA), rtol=1e-13)
    v = np.array([0.5, 2.0])                 # ARD: DotProduct of the inputs scaled by sqrt(v)
    ard = K.Linear(variance=v).bind()
    want = DotProduct(sigma_0=0.0)(XA * np.sqrt(v), XB * np.sqrt(v))
    np.testing.assert_allclose(ard.gram(XA, XB), want, rtol=1e-12, atol=1e-14)
    for degree in (1, 2, 3):
        poly = K.Polynomial(degree=degree, offset=sigma0 ** 2, variance=1.6).bind()
        ref = ConstantKernel(1.6) * DotProduct(sigma_0=sigma0) ** degree
        np.testing.assert_allclose(poly.gram(XA, XB), ref(XA, XB), rtol=1e-12)
        np.testing.assert_allclose(poly.diag(XA), ref.diag(XA), rtol=1e-12)


def test_white_is_the_identity_on_distinct_inputs_and_zero_between_them():
    white = K.White(variance=0.3).bind()
    np.testing.assert_array_equal(white.gram(XA, XA), 0.3 * np.eye(6))
    np.testing.assert_array_equal(white.gram(XA, XB), np.zeros((6, 4)))
    both = np.vstack([XB, XA[2:3]])          # a repeated point: the same point, not the same index
    expected = np.zeros((6, 5))
    expected[2, 4] = 0.3
    np.testing.assert_array_equal(white.gram(XA, both), expected)
    np.testing.assert_array_equal(white.diag(XB), np.full(4, 0.3))
    np.testing.assert_array_equal(K.Constant(0.4).bind().gram(XA, XB), np.full((6, 4), 0.4))


def _sigmoid(t):
    return 1.0 / (1.0 + np.exp(-t))


def test_change_point_matches_the_dense_formula():
    k0, k1 = K.SquaredExponential(0.8, 1.3), K.Matern52(np.array([0.6, 1.5]), 0.7)
    cp = K.ChangePoint((k0, k1), location=0.2, steepness=3.0, dimension=1)
    values = {e.name: e.value for e in cp.entries("kernel", XA)}
    assert set(values) == {"kernel.0.lengthscale", "kernel.0.variance", "kernel.1.lengthscale",
                           "kernel.1.variance", "kernel.location", "kernel.steepness"}
    s1, s2 = _sigmoid(3.0 * (XA[:, 1] - 0.2)), _sigmoid(3.0 * (XB[:, 1] - 0.2))
    # kernels = (before, after): the first holds where the switch is 0, the second where it is 1.
    want = (np.outer(1 - s1, 1 - s2) * naive_kernel(XA, XB, 0.8, 1.3, "se")
            + np.outer(s1, s2) * naive_kernel(XA, XB, [0.6, 1.5], 0.7, "m52"))
    bound = bind(cp, values, "kernel")
    np.testing.assert_allclose(bound.gram(XA, XB), want, rtol=1e-13)
    np.testing.assert_allclose(bound.diag(XA), (1 - s1) ** 2 * 1.3 + s1 ** 2 * 0.7, rtol=1e-13)


def test_change_point_far_from_the_location_is_each_part():
    k0, k1 = K.SquaredExponential(0.8, 1.3), K.Linear(np.array([0.5, 2.0]))
    cp = K.ChangePoint((k0, k1), location=0.0, steepness=4.0).bind()
    after = XA + np.array([20.0, 0.0])       # s = 1 to rounding
    before = XB - np.array([20.0, 0.0])      # s = 0 to rounding
    np.testing.assert_allclose(cp.gram(before, before), k0.bind().gram(before, before), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(cp.gram(after, after), k1.bind().gram(after, after), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cp.gram(after, before), 0.0, atol=1e-12)


def _round_trips(model, tmp_path):
    toml = tmp_path / "model.toml"
    toml.write_text(model.to_toml())
    return gd.Model.from_toml(toml) == model and gd.Model.from_dict(model.to_dict()) == model


def test_change_point_starts_its_location_at_the_midpoint(tmp_path):
    X = np.column_stack([np.linspace(-1.0, 3.0, 9), np.linspace(10.0, 20.0, 9)])
    cp = K.ChangePoint((K.SquaredExponential(), K.Matern32()), dimension=1)
    values = {e.name: e.value for e in cp.entries("kernel", X)}
    assert values["kernel.location"] == 15.0
    assert not next(e for e in cp.entries("kernel", X) if e.name == "kernel.location").positive
    model = _exact(cp)
    assert _round_trips(model, tmp_path)


def test_spectral_mixture_starts_from_the_data_and_matches_the_formula(tmp_path):
    X = np.column_stack([np.linspace(0.0, 6.0, 31), np.linspace(-1.0, 1.0, 31)])
    sm = K.SpectralMixture(n_components=3)
    entries = {e.name: e for e in sm.entries("kernel", X)}
    np.testing.assert_allclose(entries["kernel.weights"].value, np.full(3, 1 / 3))
    nyquist = 30 / (2 * np.array([6.0, 2.0]))
    np.testing.assert_allclose(entries["kernel.means"].value, np.outer([0.25, 0.5, 0.75], nyquist))
    np.testing.assert_allclose(entries["kernel.scales"].value, np.tile([1 / 6, 1 / 2], (3, 1)))
    assert entries["kernel.means"].dims == ("component", "feature")
    assert entries["kernel.weights"].dims == ("component",)
    w, m, s = np.array([0.7, 0.4]), np.array([[0.2, 0.5], [0.35, 0.1]]), np.array([[0.3, 0.2], [0.25, 0.6]])
    k = K.SpectralMixture(2, w, m, s).bind()
    tau = XA[:, None, :] - XB[None, :, :]
    want = sum(w[q] * np.prod(np.exp(-2 * np.pi ** 2 * tau ** 2 * s[q] ** 2) * np.cos(2 * np.pi * tau * m[q]), axis=-1)
               for q in range(2))
    np.testing.assert_allclose(k.gram(XA, XB), want, rtol=1e-12, atol=1e-15)
    model = _exact(sm)
    assert _round_trips(model, tmp_path)


def test_greedy_variance_reads_the_linear_kernel_diagonal():
    X = rng.normal(size=(30, 2))
    kernel = K.Linear(np.array([1.0, 3.0]))
    values = {"kernel.variance": np.array([1.0, 3.0])}
    sel = GreedyVariance(m=2).select(X, None, SelectionContext(kernel, values))
    assert sel.indices[0] == np.argmax(X[:, 0] ** 2 + 3.0 * X[:, 1] ** 2)


@pytest.mark.parametrize("make,match", [
    (lambda: K.Polynomial(degree=2.0), "Polynomial: degree"),
    (lambda: K.Polynomial(degree=0), "Polynomial: degree"),
    (lambda: K.Polynomial(offset=-1.0), "Polynomial: offset"),
    (lambda: K.Linear(variance=np.ones((2, 2))), "Linear: variance"),
    (lambda: K.Linear(offset=[1.0, 2.0]), "Linear: offset"),
    (lambda: K.Constant(variance=0.0), "Constant: variance"),
    (lambda: K.White(variance="1"), "White: variance"),
    (lambda: K.SpectralMixture(n_components=0), "SpectralMixture: n_components"),
    (lambda: K.SpectralMixture(n_components=2, weights=[1.0, 2.0, 3.0]), "SpectralMixture: weights"),
    (lambda: K.SpectralMixture(n_components=2, means=np.ones((3, 1))), "SpectralMixture: means"),
    (lambda: K.ChangePoint((K.SquaredExponential(), K.Matern32(), K.Matern52())), "ChangePoint: kernels"),
    (lambda: K.ChangePoint((K.SquaredExponential(), K.Matern32()), dimension=-1), "ChangePoint: dimension"),
    (lambda: K.ChangePoint((K.SquaredExponential(), K.Matern32()), steepness=0.0), "ChangePoint: steepness"),
])
def test_validation_names_the_class_and_field(make, match):
    with pytest.raises((TypeError, ValueError), match=match):
        make()


def test_change_point_location_stays_inside_the_data():
    """A location that starts inside the data's range is optimised inside it (the logit of its
    place there); one declared Fixed outside it is left there (a free one there is refused:
    tests/test_kernels.py)."""
    X = np.linspace(0.0, 10.0, 40)[:, None]
    y = np.where(X[:, 0] < 3.0, np.sin(3 * X[:, 0]), 0.0)
    inside = gd.Model(K.ChangePoint((K.SquaredExponential(0.5), K.Constant(0.01))), gd.likelihoods.Gaussian(0.01))
    entry = {e.name: e for e in inside.parameter_table(X).entries}["kernel.location"]
    assert entry.bounds == (0.0, 10.0) and entry.value == 5.0
    post = inside.fit(X, y, max_iter=200)
    assert 0.0 < float(post.values["kernel.location"]) < 10.0
    outside = gd.Model(K.ChangePoint((K.SquaredExponential(), K.Constant()), location=gd.Fixed(12.0)),
                       gd.likelihoods.Gaussian())
    assert {e.name: e for e in outside.parameter_table(X).entries}["kernel.location"].bounds is None
