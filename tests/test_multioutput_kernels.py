"""The coregionalisation kernels (gpdsl/kernels/coregion.py): ICM and LMC against the dense
references of tests/naive.py (entry by entry over the (input, output) pairs), their gradients
against central differences of those references, the one-output LMC against the single-output
kernel, the default start, the Kronecker factors, the output counts of sums and products, and
the refusals.  The registry's conformance checks run them too (tests/test_conformance.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gpdsl as gd
import naive
from naive import central_difference

RNG = np.random.default_rng(48)
P = 3
# Heterotopic rows: two input features, outputs in no order, some inputs at one output only.
X1 = np.column_stack([RNG.uniform(-1.5, 1.5, size=(9, 2)), [0, 2, 1, 1, 0, 2, 2, 0, 1]]).astype(float)
X2 = np.column_stack([RNG.uniform(-1.5, 1.5, size=(6, 2)), [1, 0, 2, 0, 1, 2]]).astype(float)
W3 = np.array([[0.8, -0.3], [0.5, 0.9], [-0.4, 0.6]])
KAPPA3 = np.array([0.3, 0.7, 0.2])


def _icm():
    return gd.kernels.ICM(gd.kernels.Matern52(np.array([0.7, 1.3]), 1.2), P, rank=2, W=W3, kappa=KAPPA3)


def _lmc():
    parts = (gd.kernels.SquaredExponential(0.9, 1.1), gd.kernels.Matern32(np.array([1.3, 0.6]), 0.8, name="rough"))
    W = np.array([[[0.6], [-0.4], [1.0]], [[0.2], [0.9], [0.5]]])
    kappa = np.array([[0.1, 0.4, 0.3], [0.6, 0.2, 0.5]])
    return gd.kernels.LMC(parts, P, W=W, kappa=kappa)


def _icm_dense(values):
    """naive.icm_gram of the ICM at ``values`` (its local parameter names)."""
    base = naive.stationary_point(values["kernel.lengthscale"], values["kernel.variance"], "m52")
    return lambda A, B: naive.icm_gram(A, B, values["W"], values["kappa"], base)


def _lmc_dense(values):
    kinds = {"0": "se", "rough": "m32"}
    parts = [(values[f"{q}.W"], values[f"{q}.kappa"],
              naive.stationary_point(values[f"{q}.lengthscale"], values[f"{q}.variance"], kind))
             for q, kind in kinds.items()]
    return lambda A, B: naive.lmc_gram(A, B, parts)


def _values(kernel, X=X1):
    return {e.name[len("k."):]: e.value for e in kernel.entries("k", X)}


CASES = [pytest.param(_icm, _icm_dense, id="ICM"), pytest.param(_lmc, _lmc_dense, id="LMC")]


@pytest.mark.parametrize("make,dense", CASES)
def test_gram_and_diag_match_the_pairwise_reference(make, dense):
    """gram (square and cross) and diag equal the loops over ((x, p), (x', p')) to 1e-13."""
    kernel = make()
    values = _values(kernel)
    bound = kernel.bind(values)
    ref = dense(values)
    np.testing.assert_allclose(bound.gram(X1, X2), ref(X1, X2), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(bound.gram(X1, X1), ref(X1, X1), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(bound.diag(X1), np.diag(ref(X1, X1)), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("make,dense", CASES)
def test_vjp_matches_central_differences_of_the_reference(make, dense):
    """vjp in every parameter and in X1's inputs, and diag_vjp, against central differences of
    the dense reference (rtol 1e-6); d/dX1 of the output column is exactly 0."""
    kernel = make()
    values = _values(kernel)
    G = RNG.normal(size=(len(X1), len(X2)))
    g = RNG.normal(size=len(X1))
    grads, d_X1 = kernel.bind(values).vjp(X1, X2, G)
    d_diag = kernel.bind(values).diag_vjp(X1, g)
    assert set(grads) == set(values) and set(d_diag) <= set(values)
    for name, value in values.items():
        fd = central_difference(lambda v: np.sum(G * dense({**values, name: v})(X1, X2)), value)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-6, atol=1e-8, err_msg=name)
        fd = central_difference(lambda v: np.sum(g * np.diag(dense({**values, name: v})(X1, X1))), value)
        np.testing.assert_allclose(d_diag.get(name, 0.0), fd, rtol=1e-6, atol=1e-8, err_msg=f"diag {name}")
    ref = dense(values)
    fd = central_difference(lambda A: np.sum(G * ref(np.column_stack([A, X1[:, -1]]), X2)), X1[:, :-1])
    np.testing.assert_allclose(d_X1[:, :-1], fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(d_X1[:, -1], 0.0)


# Long rows that repeat inputs, as shared inducing inputs (4 inputs at every output) and a data
# block with a repeated input at two outputs do: the kernels evaluate the base kernel once per
# distinct input (coregion.input_gram) and copy the entries.
_SHARED = RNG.uniform(-1.5, 1.5, size=(4, 2))
Z_LONG = np.column_stack([np.tile(_SHARED, (P, 1)), np.repeat(np.arange(P), 4)]).astype(float)
X_REPEATED = np.vstack([X2, np.column_stack([X2[:2, :-1], [2, 1]])])


@pytest.mark.parametrize("make,dense", CASES)
def test_repeated_inputs_give_the_pairwise_reference_and_its_derivatives(make, dense):
    """gram over rows that repeat inputs equals the pairwise loops to 1e-13 (square, cross both
    ways), and vjp's per-row d/dX1 and parameter gradients equal central differences (rtol 1e-6)."""
    kernel = make()
    values = _values(kernel)
    bound, ref = kernel.bind(values), dense(values)
    for A, B in ((Z_LONG, X_REPEATED), (X_REPEATED, Z_LONG), (Z_LONG, Z_LONG), (X_REPEATED, X_REPEATED)):
        np.testing.assert_allclose(bound.gram(A, B), ref(A, B), rtol=1e-13, atol=1e-14)
    G = RNG.normal(size=(len(Z_LONG), len(X_REPEATED)))
    grads, d_X1 = bound.vjp(Z_LONG, X_REPEATED, G)
    for name, value in values.items():
        fd = central_difference(lambda v: np.sum(G * dense({**values, name: v})(Z_LONG, X_REPEATED)), value)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-6, atol=1e-8, err_msg=name)
    fd = central_difference(lambda A: np.sum(G * ref(np.column_stack([A, Z_LONG[:, -1]]), X_REPEATED)),
                            Z_LONG[:, :-1])
    np.testing.assert_allclose(d_X1[:, :-1], fd, rtol=1e-6, atol=1e-8)


def test_parameter_names_dims_and_shapes():
    """ICM: W (P, rank) dims (output, rank), kappa (P,) dims (output,), the base's under kernel.;
    LMC: the same per part, under the part's label, the base's flat beside them."""
    icm = {e.name: e for e in _icm().entries("kernel", X1)}
    assert list(icm) == ["kernel.W", "kernel.kappa", "kernel.kernel.lengthscale", "kernel.kernel.variance"]
    assert icm["kernel.W"].dims == ("output", "rank") and icm["kernel.W"].value.shape == (3, 2)
    assert not icm["kernel.W"].positive and icm["kernel.kappa"].positive
    assert icm["kernel.kappa"].dims == ("output",) and icm["kernel.kernel.lengthscale"].dims == ("feature",)
    lmc = {e.name: e for e in _lmc().entries("kernel", X1)}
    assert list(lmc) == ["kernel.0.W", "kernel.0.kappa", "kernel.0.lengthscale", "kernel.0.variance",
                         "kernel.rough.W", "kernel.rough.kappa", "kernel.rough.lengthscale", "kernel.rough.variance"]
    assert lmc["kernel.rough.W"].value.shape == (3, 1) and lmc["kernel.rough.W"].dims == ("output", "rank")


def test_lmc_of_one_output_is_the_single_output_kernel_scaled_by_B():
    """P = 1: B_q = w_q^2 + kappa_q, so the LMC is sum_q B_q k_q of the inputs: gram, diag and the
    base parameters' gradients are the single-output kernels' scaled by B_q (1e-13)."""
    k0, k1 = gd.kernels.SquaredExponential(0.8, 1.3), gd.kernels.Matern52(np.array([1.1, 0.5]), 0.7)
    lmc = gd.kernels.LMC((k0, k1), 1, W=np.array([[[0.6]], [[-1.2]]]), kappa=np.array([[0.5], [0.1]])).bind()
    B = [0.6 ** 2 + 0.5, 1.2 ** 2 + 0.1]
    A, C = np.column_stack([X1[:, :2], np.zeros(9)]), np.column_stack([X2[:, :2], np.zeros(6)])
    x1, x2 = X1[:, :2], X2[:, :2]
    np.testing.assert_allclose(lmc.gram(A, C), B[0] * k0.gram(x1, x2) + B[1] * k1.gram(x1, x2), rtol=1e-13)
    np.testing.assert_allclose(lmc.diag(A), B[0] * k0.diag(x1) + B[1] * k1.diag(x1), rtol=1e-13)
    G = RNG.normal(size=(9, 6))
    grads, d_A = lmc.vjp(A, C, G)
    for label, k, b in (("0", k0, B[0]), ("1", k1, B[1])):
        own, d_x = k.vjp(x1, x2, G)
        for name, v in own.items():
            np.testing.assert_allclose(grads[f"{label}.{name}"], b * v, rtol=1e-13, err_msg=name)
    np.testing.assert_allclose(d_A[:, :2], B[0] * k0.vjp(x1, x2, G)[1] + B[1] * k1.vjp(x1, x2, G)[1], rtol=1e-12)


@pytest.mark.parametrize("outputs", [1, 2, 3, 4, 7])
def test_default_start_has_unit_diagonal_and_independent_distinct_columns(outputs):
    """The default W has full column rank for every rank (no zero or repeated column: not the
    symmetric saddle W = 0 or equal columns), B's diagonal is 1 and kappa >= 1/2; an LMC's parts
    start at different B_q; the gradient in W at the start under a generic adjoint is not 0."""
    for rank in range(1, outputs + 1):
        values = _values(gd.kernels.ICM(gd.kernels.SquaredExponential(), outputs, rank=rank),
                         np.zeros((1, 2)))
        W, kappa = values["W"], values["kappa"]
        assert np.linalg.matrix_rank(W) == rank
        np.testing.assert_allclose(np.diag(naive.coregion_matrix(W, kappa)), 1.0, rtol=1e-14)
        assert kappa.min() >= 0.5 - 1e-15
        G_B = RNG.normal(size=(outputs, outputs))
        assert np.linalg.matrix_rank((G_B + G_B.T) @ W) == rank
    lmc = gd.kernels.LMC((gd.kernels.SquaredExponential(),) * 3, 4, rank=2)
    values = _values(lmc, np.zeros((1, 2)))
    Bs = [naive.coregion_matrix(values[f"{q}.W"], values[f"{q}.kappa"]) for q in "012"]
    for a in range(3):
        for b in range(a):
            assert np.abs(Bs[a] - Bs[b]).max() > 0.05


def test_kronecker_factors_on_an_isotopic_grid_only():
    """On a full output-major grid kron(B, K_x) is the Gram matrix (1e-14); rows out of that
    order, a missing row, or blocks at different inputs give None; the base kernel of a Sum or
    an LMC gives None (no such structure)."""
    icm = _icm().bind()
    x = RNG.uniform(-1, 1, size=(5, 2))
    X = naive.isotopic_grid(x, P)
    B, K_x = icm.kronecker_factors(X)
    np.testing.assert_allclose(np.kron(B, K_x), icm.gram(X, X), rtol=1e-14, atol=1e-15)
    order = np.argsort(np.tile(np.arange(5), P), kind="stable")        # input-major: not the layout
    moved = X.copy()
    moved[7, 0] += 0.1
    for other in (X[order], X[:-1], moved):
        assert icm.kronecker_factors(other) is None
    assert _lmc().bind().kronecker_factors(X) is None
    assert gd.kernels.SquaredExponential().bind().kronecker_factors(x) is None


def test_active_dims_select_the_inputs_and_the_output_column():
    """active_dims (2, 0) on [output, noise, input] reads (input, output): the plain ICM's values."""
    wide1 = np.column_stack([X1[:, 2], RNG.normal(size=9), X1[:, 0]])
    wide2 = np.column_stack([X2[:, 2], RNG.normal(size=6), X2[:, 0]])
    kernel = gd.kernels.ICM(gd.kernels.SquaredExponential(0.7, 1.1), P, rank=2, W=W3, kappa=KAPPA3)
    masked, plain = dataclasses.replace(kernel, active_dims=(2, 0)).bind(), kernel.bind()
    narrow1, narrow2 = X1[:, [0, 2]], X2[:, [0, 2]]
    np.testing.assert_allclose(masked.gram(wide1, wide2), plain.gram(narrow1, narrow2), rtol=1e-14)
    G = RNG.normal(size=(9, 6))
    (grads, dX), (ref, ref_dX) = masked.vjp(wide1, wide2, G), plain.vjp(narrow1, narrow2, G)
    np.testing.assert_allclose(dX[:, 2], ref_dX[:, 0], rtol=1e-13)
    np.testing.assert_array_equal(dX[:, :2], 0.0)
    for name in ref:
        np.testing.assert_allclose(grads[name], ref[name], rtol=1e-13)


def test_output_counts_of_sums_and_products():
    """Kernel.output_count: None for a kernel of one output, P for ICM/LMC and for a Sum or
    Product of parts of one P; a mix, or different P, is refused naming both parts."""
    se = gd.kernels.SquaredExponential()
    icm = gd.kernels.ICM(se, 2)
    assert se.output_count is None and (se + se).output_count is None
    assert icm.output_count == 2 and (icm + icm).output_count == 2 and (icm * icm).output_count == 2
    assert gd.kernels.LMC((se, se), 4).output_count == 4
    with pytest.raises(ValueError, match=r"Sum: .*ICM\(SquaredExponential\(isotropic\); 2 outputs, rank 1\) "
                                         r"\(2 outputs\) and SquaredExponential\(isotropic\) \(one output\)"):
        icm + se
    with pytest.raises(ValueError, match=r"Product: .*\(2 outputs\) and .*\(3 outputs\)"):
        icm * gd.kernels.ICM(se, 3)
    with pytest.raises(ValueError, match="ChangePoint: a kernel of several outputs .* Sum or Product only"):
        gd.kernels.ChangePoint((icm, icm))


@pytest.mark.parametrize("bad,match", [
    (0.5, "0.5"), (3.0, "3.0"), (-1.0, "-1.0"), (np.nan, "nan")])
def test_output_column_must_hold_output_indices(bad, match):
    """A value of the output column that is not an integer in [0, P) is refused, named with its row."""
    X = X1.copy()
    X[4, -1] = bad
    icm, lmc = _icm().bind(), _lmc().bind()
    for call in (lambda: icm.gram(X, X2), lambda: icm.diag(X), lambda: icm.vjp(X, X2, np.ones((9, 6))),
                 lambda: lmc.gram(X2, X), lambda: lmc.diag_vjp(X, np.ones(9)), lambda: _icm().parameters(X)):
        with pytest.raises(ValueError, match=r"the last column of X is the output index and must hold integers 0..2 "
                                             r"\(one per output\), got " + match + " at row 4"):
            call()
    with pytest.raises(ValueError, match=r"ICM: X must hold the inputs and, as its last column, the output index"):
        icm.gram(X1[:, -1:], X1[:, -1:])


@pytest.mark.parametrize("make,error,match", [
    (lambda se: gd.kernels.ICM(se, 3, rank=4), ValueError, r"ICM: rank must be in \[1, 3\] \(at most output_count\), got 4"),
    (lambda se: gd.kernels.ICM(se, 0), ValueError, "ICM: output_count must be a positive integer, got 0"),
    (lambda se: gd.kernels.ICM(se, 2.0), TypeError, "ICM: output_count must be a positive integer, got 2.0"),
    (lambda se: gd.kernels.ICM(se), TypeError, "ICM: output_count must be a positive integer, got None"),
    (lambda se: gd.kernels.LMC((se, se), 2, rank=1.0), TypeError, "LMC: rank must be a positive integer, got 1.0"),
    (lambda se: gd.kernels.ICM("se", 2), TypeError, "ICM: kernel must be a gpdsl kernel"),
    (lambda se: gd.kernels.ICM(se, 3, W=np.ones((3, 2))), ValueError,
     r"ICM: W must have shape \(3, 1\) \(outputs, rank\) or be a scalar, got shape \(3, 2\)"),
    (lambda se: gd.kernels.ICM(se, 2, kappa=np.array([0.5, 0.0])), ValueError, "ICM: kappa must be positive"),
    (lambda se: gd.kernels.ICM(gd.kernels.ICM(se, 2), 2), ValueError, "ICM: the base kernel must be a kernel of one"),
    (lambda se: gd.kernels.LMC((se, gd.kernels.ICM(se, 2)), 2), ValueError,
     "LMC: a kernel of several outputs|LMC: each base kernel"),
    (lambda se: gd.kernels.LMC((se, se), 2, W=np.ones((1, 2, 1))), ValueError,
     r"LMC: W must have shape \(2, 2, 1\) \(parts, outputs, rank\) or be a scalar, got shape \(1, 2, 1\)"),
    (lambda se: gd.kernels.LMC((se, se), 2, kappa=np.array([[1.0, 1.0], [1.0, -1.0]])), ValueError,
     "LMC: kappa must be positive"),
    (lambda se: gd.kernels.LMC((se, se), 2, W=gd.Shared("w", 0.5)), TypeError, "LMC: W cannot be gd.Shared"),
    (lambda se: gd.kernels.LMC((se, se), 2, kappa=(gd.Fixed(np.ones(2)), np.ones(2))), TypeError,
     r"LMC: kappa must be an array of shape \(2, 2\), Fixed\(...\) of one or a prior"),
    (lambda se: gd.kernels.LMC((se,), 2), TypeError, "LMC: kernels must be a tuple of at least two kernels"),
])
def test_bad_declarations_are_refused_by_name(make, error, match):
    with pytest.raises(error, match=match):
        make(gd.kernels.SquaredExponential())


def test_every_output_count_is_checked_alike():
    """ICM, LMC, OutputGaussian and the Model check P by one rule (gpdsl.checks.check_positive_int):
    a non-integer is one error, a TypeError (scikit-learn's type for a wrong type) that is also a
    ValueError (what gpdsl's integer checks raised before), with one message form."""
    from gpdsl.checks import IntegerTypeError

    se = gd.kernels.SquaredExponential()
    icm = gd.kernels.ICM(se, 2)
    object.__setattr__(icm, "output_count", 2.0)          # a kernel whose P is not an int
    calls = {"ICM": lambda: gd.kernels.ICM(se, 2.0), "LMC": lambda: gd.kernels.LMC((se, se), 2.0),
             "OutputGaussian": lambda: gd.likelihoods.OutputGaussian(2.0),
             "Model": lambda: gd.Model(icm, gd.likelihoods.Gaussian(0.1))}
    for owner, call in calls.items():
        with pytest.raises(IntegerTypeError, match=rf"{owner}: (kernel\.)?output_count must be a positive integer, "
                                                   rf"got 2\.0") as info:
            call()
        assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    assert not hasattr(gd.kernels.LMC, "coregions")     # dead (no caller): each part's B is ICM.coregion()


def test_lmc_declarations_slice_by_part_and_round_trip_through_model_files():
    """An LMC's W and kappa are one declared value each: part q's start is its slice (a Fixed
    array's slice is Fixed), a prior is every part's; the model's dict and TOML give it back."""
    se = gd.kernels.SquaredExponential()
    kappa = gd.Fixed(np.array([[1.0, 0.5, 0.2], [0.3, 0.4, 0.6]]))
    lmc = gd.kernels.LMC((se, gd.kernels.Matern32(0.7)), 3, W=gd.priors.Normal(0.0, 1.0), kappa=kappa)
    entries = {e.name: e for e in lmc.entries("kernel", X1)}
    assert entries["kernel.1.kappa"].fixed and not entries["kernel.1.W"].fixed
    np.testing.assert_array_equal(entries["kernel.1.kappa"].value, [0.3, 0.4, 0.6])
    assert entries["kernel.0.W"].prior is not None and entries["kernel.0.W"].value.shape == (3, 1)
    model = gd.Model(lmc, gd.likelihoods.Gaussian(0.1))
    assert gd.Model.from_dict(model.to_dict()) == model
    assert gd.Model.from_toml(model.to_toml()) == model


def test_describe():
    assert _icm().describe() == "ICM(Matern52(ARD); 3 outputs, rank 2)"
    assert _lmc().describe() == "LMC(SquaredExponential(isotropic), Matern32(ARD); 3 outputs, rank 1)"
