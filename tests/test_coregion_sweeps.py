"""The coregionalisation kernels' sweeps (gpdsl/_jit/coregion.py) and the stationary
kernels' slope fields they read (``Stationary.slope_fields``, ``covariance.profile_and_slope``):
each against the plain NumPy formula it replaces, the fields against central differences of
the Gram matrix, and the fused ICM/LMC VJP against the per-part path it bypasses (taken where a
base kernel reads only some columns).  The gradients through them are also the conformance
suite's and tests/test_multioutput_kernels.py's (central differences of the dense references)."""
import dataclasses
import tracemalloc

import numpy as np
import pytest

import gpdsl as gd
from gpdsl._jit import coregion as sweeps
from gpdsl._jit import covariance as cov
from gpdsl.kernels.coregion import coregion_vjp
from naive import central_difference
from test_cold_start import _numpy_functions

rng = np.random.default_rng(4801)
P, Q, U1, U2 = 3, 2, 5, 4
# Long rows: each of U1 (U2) distinct inputs at some outputs, outputs in no order.
POS1, P1 = np.array([0, 1, 2, 3, 4, 0, 1, 2, 0, 4]), np.array([0, 0, 1, 2, 1, 1, 2, 2, 2, 0])
POS2, P2 = np.array([0, 1, 2, 3, 1, 0, 3]), np.array([1, 0, 2, 2, 1, 0, 0])
B = rng.standard_normal((Q, P, P))
FIELD_K, FIELD_T = rng.uniform(0.1, 2.0, (Q, U1, U2)), rng.standard_normal((Q, U1, U2))


def test_output_runs_split_the_columns_where_the_output_changes():
    np.testing.assert_array_equal(sweeps.output_runs(P2), [0, 1, 2, 4, 5, 7])
    np.testing.assert_array_equal(sweeps.output_runs(np.zeros(0, dtype=np.intp)), [0])


def test_coregion_add_makes_the_sum_of_the_gathered_parts_to_the_last_bit():
    want, got = 0, np.full((len(POS1), len(POS2)), np.nan)       # the first part writes over anything
    for q in range(Q):
        want = want + FIELD_K[q][np.ix_(POS1, POS2)] * B[q][np.ix_(P1, P2)]
        sweeps.coregion_add(got, FIELD_K[q][:, POS2], B[q], POS1, P1, P2, q == 0)
    np.testing.assert_array_equal(got, want)


def test_coregion_vjp_sweep_is_the_dense_contraction():
    G = rng.standard_normal((len(POS1), len(POS2)))
    A2 = rng.standard_normal((len(POS2), 2))
    K, T = FIELD_K[:, :, POS2], FIELD_T[:, :, POS2]             # the fields along the columns
    row, col, SA2, GB = sweeps.coregion_vjp_sweep(G, K, T, B, POS1, P1, P2, np.ascontiguousarray(A2.T))
    one_hot1, one_hot2 = np.eye(P)[P1], np.eye(P)[P2]
    for q in range(Q):
        S = G * B[q][np.ix_(P1, P2)] * FIELD_T[q][np.ix_(POS1, POS2)]
        np.testing.assert_allclose(row[q], S.sum(axis=1), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(col[q], S.sum(axis=0), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(SA2[q], S @ A2, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(GB[q], one_hot1.T @ (G * FIELD_K[q][np.ix_(POS1, POS2)]) @ one_hot2,
                                   rtol=1e-13, atol=1e-15)


def test_the_sweeps_allocate_without_np_zeros():
    """As the other kernels on every fit's path (tests/test_cold_start.py): np.zeros would compile
    three more of Numba's overloads in every fresh process."""
    G = np.ones((len(POS1), len(POS2)))
    used = [_numpy_functions(sweeps.coregion_add, G.copy(), FIELD_K[0][:, POS2], B[0], POS1, P1, P2, True),
            _numpy_functions(sweeps.coregion_vjp_sweep, G, FIELD_K[:, :, POS2], FIELD_T[:, :, POS2], B, POS1, P1,
                             P2, np.ones((2, len(POS2)))),
            _numpy_functions(cov.profile_and_slope, FIELD_K[0], 1.0, cov.MATERN32, FIELD_K[0].copy(),
                             FIELD_T[0].copy())]
    used.append(_numpy_functions(sweeps.output_runs, P2))
    assert [np.zeros in found for found in used] == [False] * 4


KINDS = [gd.kernels.SquaredExponential, gd.kernels.Matern32, gd.kernels.Matern52]


@pytest.mark.parametrize("cls", KINDS)
def test_slope_fields_are_the_gram_and_its_r2_derivative(cls):
    """K equals gram (to the last bit for the squared exponential, whose sweep is gram's own) and
    T = dK/dr2 satisfies dK/dls = T dr2/dls = -2 T r2 / ls: contracted with a random H, against
    central differences in ls of sum H * gram."""
    X1, X2 = rng.uniform(-1, 1, (6, 2)), rng.uniform(-1, 1, (5, 2))
    X2[0] = X1[0]                            # a coincident pair: the slope's finite limit
    ls = 0.7
    kernel = cls(ls, 1.3)
    K, T = np.empty((2, 6, 5))
    centre = kernel.slope_fields(X1, X2, K, T)
    np.testing.assert_array_equal(centre, X1.mean(axis=0))
    if cls is gd.kernels.SquaredExponential:
        np.testing.assert_array_equal(K, kernel.gram(X1, X2))
    np.testing.assert_allclose(K, kernel.gram(X1, X2), rtol=1e-14)
    r2 = ((X1[:, None, :] - X2[None]) ** 2).sum(-1) / ls ** 2
    H = rng.standard_normal((6, 5))
    fd = central_difference(lambda v: np.sum(H * cls(v, 1.3).gram(X1, X2)), ls)
    assert np.sum(H * -2.0 * T * r2 / ls) == pytest.approx(fd, rel=1e-7)


@pytest.mark.parametrize("kernel", [gd.kernels.Matern12(0.7), gd.kernels.RationalQuadratic(0.7),
                                    gd.kernels.SquaredExponential(0.7, active_dims=(0, 1)),
                                    gd.kernels.Matern52(1e-5)])
def test_slope_fields_decline_what_their_contraction_cannot_carry(kernel):
    """The exponential and rational quadratic profiles, a column selection, and inputs beyond the
    expansion's range (length-scale 1e-5 on inputs spread over 2) give None and leave K, T alone."""
    X = rng.uniform(-1, 1, (4, 2))
    K, T = np.full((2, 4, 4), 7.0)
    assert kernel.slope_fields(X, X, K, T) is None
    np.testing.assert_array_equal(K, 7.0)
    np.testing.assert_array_equal(T, 7.0)


@dataclasses.dataclass(frozen=True, eq=False)
class _Doubled(gd.kernels.SquaredExponential):
    """A user's subclass with its own covariance (twice its parent's) and gradient."""

    def gram(self, X1, X2):
        return 2.0 * super().gram(X1, X2)

    def vjp(self, X1, X2, G, K=None):
        return super().vjp(X1, X2, 2.0 * G)


def test_a_subclass_with_its_own_covariance_keeps_its_gradient_in_an_icm():
    """The review's case: slope_fields declines a subclass that defines gram or vjp (the fields are
    Stationary's covariance), so the ICM's VJP goes through the subclass's own and matches central
    differences of its gram (the fused fields gave half the length-scale's gradient)."""
    X = np.column_stack([rng.uniform(-1, 1, (6, 1)), [0, 1, 0, 1, 0, 1]])
    W, kappa = np.array([[0.5], [0.2]]), np.array([0.3, 0.4])
    G = rng.standard_normal((6, 6))
    K, T = np.full((2, 6, 6), 7.0)
    assert _Doubled(0.7, 1.3).slope_fields(X[:, :1], X[:, :1], K, T) is None
    grads, _ = gd.kernels.ICM(_Doubled(0.7, 1.3), 2, W=W, kappa=kappa).vjp(X, X, G)
    for name, index in (("kernel.lengthscale", 0), ("kernel.variance", 1)):
        def objective(v):
            args = [0.7, 1.3]
            args[index] = v
            return np.sum(G * gd.kernels.ICM(_Doubled(*args), 2, W=W, kappa=kappa).gram(X, X))
        fd = central_difference(objective, [0.7, 1.3][index])
        assert float(grads[name]) == pytest.approx(fd, rel=1e-7), name


def _lmc(select=None):
    parts = (gd.kernels.SquaredExponential(0.9, 1.1, active_dims=select),
             gd.kernels.Matern32(np.array([1.3, 0.6]), 0.8, active_dims=select),
             gd.kernels.Matern52(0.5, 1.4, active_dims=select))
    W = rng.standard_normal((3, P, 2))
    return gd.kernels.LMC(parts, P, rank=2, W=W, kappa=rng.uniform(0.1, 1.0, (3, P)))


def _icm(select=None):
    return gd.kernels.ICM(gd.kernels.Matern52(np.array([0.7, 1.3]), 1.2, active_dims=select), P, rank=1)


# Shared inducing inputs (every input at every output) against heterotopic rows with a repeat.
Z_LONG = np.column_stack([np.tile(rng.uniform(-1, 1, (4, 2)), (P, 1)), np.repeat(np.arange(P), 4)])
X_ROWS = np.column_stack([rng.uniform(-1, 1, (7, 2)), [2, 0, 1, 1, 0, 2, 1]])
X_ROWS = np.vstack([X_ROWS, np.column_stack([X_ROWS[:2, :-1], [1, 2]])])


@pytest.mark.parametrize("make", [_lmc, _icm], ids=["LMC", "ICM"])
@pytest.mark.parametrize("A,B_", [(Z_LONG, X_ROWS), (X_ROWS, Z_LONG), (Z_LONG, Z_LONG), (X_ROWS, X_ROWS)],
                         ids=["uf", "fu", "uu", "ff"])
def test_fused_vjp_equals_the_per_part_path(make, A, B_):
    """The fused VJP (the base kernels on every column: slope fields) and the per-part one (the
    same base kernels reading their columns through active_dims, which declines the fields) give
    the same gradients and d/dX1 to 1e-12, and the same Gram matrix (ff: mostly distinct row
    inputs, so the LMC's parts go one per sweep)."""
    fused, per_part = make(), make((0, 1))
    values = {e.name[2:]: e.value for e in fused.entries("k", A)}
    fused, per_part = fused.bind(values), per_part.bind(values)
    G = rng.standard_normal((len(A), len(B_)))
    kernels = fused.kernels if isinstance(fused, gd.kernels.LMC) else (fused.kernel,)
    assert coregion_vjp("test", kernels, np.zeros((len(kernels), P, 1)), np.zeros((len(kernels), P, P)), A, B_,
                        G) is not None
    np.testing.assert_allclose(fused.gram(A, B_), per_part.gram(A, B_), rtol=1e-14)
    (g_fused, d_fused), (g_part, d_part) = fused.vjp(A, B_, G), per_part.vjp(A, B_, G)
    assert set(g_fused) == set(g_part) == set(values)
    for name in values:
        np.testing.assert_allclose(g_fused[name], g_part[name], rtol=1e-12, atol=1e-13, err_msg=name)
    np.testing.assert_allclose(d_fused, d_part, rtol=1e-12, atol=1e-13)


def test_fused_vjp_on_x_x_holds_fields_of_one_part_at_a_time():
    """The review's memory case: an LMC of Q = 4 parts on 300 heterotopic rows, VJP on (X, X):
    tracemalloc's peak stays within 5 n^2 doubles (one part's values and slopes, 2 n^2, beside
    G's copy and the gathered fields), where all four parts' fields at once took 8 n^2."""
    n = 300
    X = np.column_stack([rng.uniform(-1, 1, (n, 2)), rng.integers(0, P, n)])
    parts = tuple(gd.kernels.SquaredExponential(0.5 + 0.1 * q, 1.0) for q in range(4))
    lmc = gd.kernels.LMC(parts, P, W=rng.standard_normal((4, P, 1)), kappa=np.ones((4, P)))
    G = rng.standard_normal((n, n))
    lmc.vjp(X, X, G)
    tracemalloc.start()
    try:
        lmc.vjp(X, X, G)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 5 * n * n * 8
