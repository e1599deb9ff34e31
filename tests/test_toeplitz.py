"""The Toeplitz solves of Exact's Kronecker path (gpdsl/_jit/toeplitz.py, gpdsl/methods/exact.py's
``_toeplitz_blocks``): each block's solve, log-determinant, trace, diagonal and inverse sum against
dense NumPy on the matrix itself; the path's log evidence and every gradient against the
eigendecomposition and the general N P x N P path where the inputs are an evenly spaced 1-D grid;
the eigendecomposition wherever the structure or the conditioning is absent; and a fit on a grid
that ends where the fit without the Toeplitz solves ends."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import linalg

import gpdsl as gd
import naive
from gpdsl._jit import toeplitz
from gpdsl.components import Bound
from gpdsl.methods import exact

RNG = np.random.default_rng(2611)
P, N = 3, 40
GRID = np.linspace(0.0, 3.0, N)[:, None]
X = naive.isotopic_grid(GRID, P)
Y = np.concatenate([np.sin(2.0 * GRID[:, 0] + p) for p in range(P)]) + 0.1 * RNG.normal(size=N * P)
NOISE = np.array([0.05, 0.3, 0.12])


def _stationary_gram(n, lengthscale):
    x = np.arange(n) * 0.25                           # exactly representable: K exactly Toeplitz
    return 1.7 * np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / lengthscale ** 2)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 131])
@pytest.mark.parametrize("lam", [0.0, 0.8, 250.0])
def test_block_equals_dense_linear_algebra(n, lam):
    """A = lam K + I for a squared-exponential K on a grid: the refined solve equals
    np.linalg.solve (1e-12 relative), log|A| slogdet (1e-12), tr(A^-1 K), the diagonal and the
    upper triangle of lam A^-1 added into inverse_sum the explicit inverse's (1e-11 relative to
    the largest entry), and the strict lower triangle is left as it was."""
    K = _stationary_gram(n, 0.6)
    A = lam * K + np.eye(n)
    b = RNG.normal(size=n)
    start = RNG.normal(size=(n, n))
    inverse_sum = start.copy()
    solved, log_det, trace, diagonal = toeplitz.toeplitz_block(K[0].copy(), K, lam, b, inverse_sum)
    inverse = np.linalg.inv(A)
    np.testing.assert_allclose(solved, np.linalg.solve(A, b), rtol=1e-12, atol=1e-12 * np.abs(solved).max())
    np.testing.assert_allclose(log_det, np.linalg.slogdet(A)[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(trace, np.trace(inverse @ K), rtol=1e-11)
    np.testing.assert_allclose(diagonal, np.diag(inverse), rtol=1e-11)
    upper = np.triu_indices(n)
    np.testing.assert_allclose(inverse_sum[upper], (start + lam * inverse)[upper], rtol=0,
                               atol=1e-11 * max(1.0, lam * np.abs(inverse).max()))
    lower = np.tril_indices(n, -1)
    np.testing.assert_array_equal(inverse_sum[lower], start[lower])


def test_block_of_a_matrix_not_positive_definite_gives_nan():
    """K with first row (1, 0.9, -0.9) is not positive semi-definite: A = 10 K + I is indefinite,
    Durbin's recursion breaks down, and the log-determinant is NaN with inverse_sum untouched."""
    K = linalg.toeplitz([1.0, 0.9, -0.9])
    assert np.linalg.eigvalsh(10.0 * K + np.eye(3)).min() < 0
    inverse_sum = np.zeros((3, 3))
    _, log_det, _, _ = toeplitz.toeplitz_block(K[0].copy(), K, 10.0, np.ones(3), inverse_sum)
    assert np.isnan(log_det)
    np.testing.assert_array_equal(inverse_sum, 0.0)
    # r0 = lam K[0, 0] + 1 <= 0, n = 1 and n = 3: NaN before any division, nothing added.
    for n in (1, 3):
        K = np.eye(n)
        inverse_sum = np.zeros((n, n))
        for lam in (-1.0, -2.0):
            _, log_det, _, _ = toeplitz.toeplitz_block(K[0].copy(), K, lam, np.ones(n), inverse_sum)
            assert np.isnan(log_det)
        np.testing.assert_array_equal(inverse_sum, 0.0)


@pytest.mark.parametrize("n", [1, 5, 200])
def test_block_of_a_perturbed_toeplitz_matrix(n):
    """K = T + E with E symmetric noise of 1e-9 relative (|lam E|_F ~ 1e-5 at lam = 40), A = lam K + I
    with a condition number ~ 1e3: the refined solve equals A's dense solve (1e-10 relative: one
    pass against T alone is off by ~1e-6), log|A| with its first-order term equals slogdet(A)
    (1e-10 absolute: log|A_T| alone is off by ~1e-7), and an empty inverse_sum gives the same
    solve and log-determinant."""
    T = _stationary_gram(n, 0.6)
    E = 1e-9 * RNG.uniform(-1, 1, size=(n, n))
    K = T + E + E.T
    lam = 40.0
    A = lam * K + np.eye(n)
    b = RNG.normal(size=n)
    solved, log_det, trace, diagonal = toeplitz.toeplitz_block(T[0].copy(), K, lam, b, np.zeros((n, n)))
    np.testing.assert_allclose(solved, np.linalg.solve(A, b), rtol=0, atol=1e-10 * np.abs(solved).max())
    np.testing.assert_allclose(log_det, np.linalg.slogdet(A)[1], rtol=0, atol=1e-10)
    if n > 1:
        assert abs(np.linalg.slogdet(lam * T + np.eye(n))[1] - np.linalg.slogdet(A)[1]) > 1e-9
    alone, alone_log_det, _, _ = toeplitz.toeplitz_block(T[0].copy(), K, lam, b, np.zeros((0, 0)))
    np.testing.assert_array_equal(alone, solved)
    assert alone_log_det == log_det


def test_toeplitz_row_and_fill_lower():
    """toeplitz_row gives the diagonals' means of a matrix within its tolerance of Toeplitz (against
    a loop over np.diagonal) and the matrix's Frobenius distance from their Toeplitz matrix, and
    refuses one entry off by more; fill_lower makes the symmetric
    matrix of the upper triangle (n = 130: tiles of 64 and a remainder)."""
    K = _stationary_gram(50, 1.3)
    row, deviation, ok = toeplitz.toeplitz_row(K, 0.0)
    assert ok and deviation < 1e-13
    np.testing.assert_allclose(row, K[0], rtol=1e-14)
    near = K + 1e-13 * RNG.uniform(-1, 1, size=K.shape)
    assert not toeplitz.toeplitz_row(near, 0.0)[2]
    row, deviation, ok = toeplitz.toeplitz_row(near, 2e-13)
    means = np.array([np.mean(np.r_[np.diagonal(near, t), np.diagonal(near, -t)]) for t in range(50)])
    assert ok
    np.testing.assert_allclose(row, means, rtol=1e-14)
    # Both sides subtract means from entries ~1: agreement to their rounding, 1e-16 an entry.
    np.testing.assert_allclose(deviation, np.linalg.norm(near - linalg.toeplitz(means)), rtol=0, atol=50 * 1e-16)
    off = K.copy()
    off[30, 12] += 1e-9
    assert not toeplitz.toeplitz_row(off, 1e-12)[2]
    S = RNG.normal(size=(130, 130))
    expected = np.triu(S) + np.triu(S, 1).T
    toeplitz.fill_lower(S)
    np.testing.assert_array_equal(S, expected)


def _kernel():
    W = np.array([[0.9, -0.2], [0.4, 0.7], [-0.5, 0.3]])
    return gd.kernels.ICM(gd.kernels.Matern52(0.7, 1.2), P, rank=2, W=W, kappa=np.array([0.2, 0.4, 0.1]))


LIKELIHOODS = [
    pytest.param(lambda: gd.likelihoods.OutputGaussian(P, variance=NOISE), id="per-output"),
    pytest.param(lambda: gd.likelihoods.Gaussian(0.02), id="shared"),
]


def _bound(component, prefix):
    return Bound(component.bind(), prefix)


def _spy_toeplitz(monkeypatch):
    """Record whether each _toeplitz_blocks call gave blocks."""
    taken = []
    original = exact._toeplitz_blocks
    monkeypatch.setattr(exact, "_toeplitz_blocks", lambda *a: taken.append(original(*a)) or taken[-1])
    return taken


@pytest.mark.parametrize("make", LIKELIHOODS)
def test_toeplitz_path_equals_the_eigendecomposition_and_the_general_path(make, monkeypatch):
    """On an evenly spaced 1-D grid the Toeplitz solves are taken, and the log evidence (1e-12
    relative), every kernel, noise and offset gradient (1e-10 of the largest entry) equal those of
    the eigendecomposition (the same evaluation with need_state) and of the general path."""
    kernel, likelihood = _bound(_kernel(), "kernel"), _bound(make(), "likelihood")
    general = exact._evaluate(kernel, likelihood, X, Y, None, True, False, True)
    eigen = exact._kronecker(kernel, likelihood, X, Y, True, True, True)
    taken = _spy_toeplitz(monkeypatch)
    fast = exact.evaluate(kernel, likelihood, X, Y, offset_grad=True)
    assert len(taken) == 1 and taken[0] is not None and taken[0].eigen is None
    for reference in (eigen, general):
        np.testing.assert_allclose(fast.log_evidence, reference.log_evidence, rtol=1e-12)
        assert set(fast.grads) == set(reference.grads)
        for name, g in reference.grads.items():
            np.testing.assert_allclose(fast.grads[name], g, rtol=0, atol=1e-10 * np.abs(g).max(), err_msg=name)


def test_toeplitz_path_without_gradients(monkeypatch):
    """need_grad=False: the same log evidence as with gradients, and no gradients."""
    kernel, likelihood = _bound(_kernel(), "kernel"), _bound(LIKELIHOODS[0].values[0](), "likelihood")
    taken = _spy_toeplitz(monkeypatch)
    with_grad = exact.evaluate(kernel, likelihood, X, Y)
    without = exact.evaluate(kernel, likelihood, X, Y, need_grad=False)
    assert all(t is not None for t in taken) and len(taken) == 2
    assert without.grads == {} and without.log_evidence == with_grad.log_evidence


def _not_toeplitz():
    uneven = np.sort(RNG.uniform(0.0, 3.0, size=N))[:, None]
    two_d = np.column_stack([GRID[:, 0], GRID[:, 0] ** 2])
    return [
        pytest.param(naive.isotopic_grid(uneven, P), _kernel(), id="uneven-grid"),
        pytest.param(naive.isotopic_grid(two_d, P),
                     gd.kernels.ICM(gd.kernels.Matern52(np.array([0.7, 2.0]), 1.2), P, rank=1), id="2-D"),
        pytest.param(X, gd.kernels.ICM(gd.kernels.Linear(0.5), P, rank=1), id="linear-kernel"),
    ]


@pytest.mark.parametrize("X_,kernel", _not_toeplitz())
def test_eigendecomposition_where_the_gram_is_not_toeplitz(X_, kernel, monkeypatch):
    """Uneven inputs, 2-D inputs or a non-stationary kernel: no Toeplitz blocks (None), and the
    Kronecker path's result is the eigendecomposition's to the last bit."""
    k, lik = _bound(kernel, "kernel"), _bound(gd.likelihoods.OutputGaussian(P, variance=NOISE), "likelihood")
    eigen = exact._kronecker(k, lik, X_, Y, True, True, False)
    taken = _spy_toeplitz(monkeypatch)
    ev = exact.evaluate(k, lik, X_, Y)
    assert taken == [None]
    assert ev.log_evidence == eigen.log_evidence
    for name, g in eigen.grads.items():
        np.testing.assert_array_equal(ev.grads[name], g)


def test_eigendecomposition_beyond_the_condition_bound(monkeypatch):
    """A noise so small that Gershgorin's bound on a block's condition number passes
    TOEPLITZ_MAX_CONDITION: the eigendecomposition runs (the whitened K is within
    KRONECKER_MAX_CONDITION, so the Kronecker path still does)."""
    k, lik = _bound(_kernel(), "kernel"), _bound(gd.likelihoods.Gaussian(1e-9), "likelihood")
    taken = _spy_toeplitz(monkeypatch)
    ev = exact.evaluate(k, lik, X, Y)
    assert taken == [None] and ev.state is None
    eigen = exact._kronecker(k, lik, X, Y, True, True, False)
    assert ev.log_evidence == eigen.log_evidence


def test_fit_on_a_grid_ends_where_the_fit_without_toeplitz_solves_ends(monkeypatch):
    """Model.fit of an ICM with per-output noise and means on a grid: most evaluations take the
    Toeplitz solves (those of the line searches' far points, beyond the condition bound, do not),
    and the fit reaches the same optimum (log evidence 1e-9 relative, hyperparameters 1e-5) as the
    fit whose evaluations all take the eigendecomposition, with predictions that agree to 1e-6."""
    model = gd.Model(gd.kernels.ICM(gd.kernels.SquaredExponential(), P, rank=1), gd.likelihoods.OutputGaussian(P),
                     mean=gd.means.PerOutput(tuple(gd.means.Constant() for _ in range(P))))
    Y_wide = np.reshape(Y, (P, N)).T
    taken = _spy_toeplitz(monkeypatch)
    fast = model.fit(GRID, Y_wide)
    used = sum(t is not None for t in taken)
    print(f"Toeplitz blocks in {used} of {len(taken)} evaluations")
    assert used >= 0.5 * len(taken) > 0
    monkeypatch.setattr(exact, "_toeplitz_blocks", lambda *a: None)
    slow = model.fit(GRID, Y_wide)
    np.testing.assert_allclose(fast.log_evidence, slow.log_evidence, rtol=1e-9)
    for name, value in slow.values.items():
        np.testing.assert_allclose(fast.values[name], value, rtol=1e-5, atol=1e-8, err_msg=name)
    new = np.linspace(-0.5, 3.5, 9)[:, None]
    for a, b in zip(fast.predict_f(new), slow.predict_f(new)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


def test_uneven_inputs_under_a_near_constant_kernel_take_the_eigendecomposition(monkeypatch):
    """The review's case: uneven inputs and a length-scale far above their span make K_x
    near-constant, within TOEPLITZ_TOLERANCE of Toeplitz, but lambda |K_x - T|_F ~ 1e-2 (noise 1e-4):
    the Toeplitz solves are refused (their log evidence was 2.6 nats off), and the result is the
    eigendecomposition's to the last bit."""
    uneven = np.sort(np.random.default_rng(5).uniform(0.0, 3.0, 300))[:, None]
    rng = np.random.default_rng(1)
    X_ = naive.isotopic_grid(uneven, P)
    y = np.concatenate([np.sin(2.0 * uneven[:, 0] + p) for p in range(P)]) + 0.1 * rng.normal(size=300 * P)
    k = _bound(gd.kernels.ICM(gd.kernels.SquaredExponential(2e4, 1.0), P, rank=2, W=rng.normal(size=(P, 2)),
                              kappa=np.full(P, 0.1)), "kernel")
    lik = _bound(gd.likelihoods.OutputGaussian(P, variance=np.full(P, 1e-4)), "likelihood")
    _, K_x = k.kronecker_factors(X_)
    assert toeplitz.toeplitz_row(K_x, exact.TOEPLITZ_TOLERANCE * K_x[0, 0])[2]
    eigen = exact._kronecker(k, lik, X_, y, True, True, False)
    taken = _spy_toeplitz(monkeypatch)
    ev = exact.evaluate(k, lik, X_, y)
    assert taken == [None]
    assert ev.log_evidence == eigen.log_evidence


@pytest.mark.parametrize("factor,taken", [(0.5, True), (2.0, False)])
def test_condition_bound_on_either_side_of_its_limit(factor, taken, monkeypatch):
    """A shared noise that puts Gershgorin's bound at half or twice TOEPLITZ_MAX_CONDITION: the
    Toeplitz solves are taken below it, with the eigendecomposition's log evidence (1e-10
    relative) and gradients (1e-6 of the largest entry), and refused above it.  (The general
    path's Cholesky factor is the less accurate one there: 1e-9 relative from both.)"""
    kernel = _bound(gd.kernels.ICM(gd.kernels.SquaredExponential(0.7, 1.0), P, rank=1, W=np.ones((P, 1)),
                                   kappa=np.full(P, 0.1)), "kernel")
    B, K_x = kernel.kronecker_factors(X)
    row_bound = 2.0 * np.sum(np.abs(K_x[0])) - K_x[0, 0]
    noise = np.linalg.eigvalsh(B).max() * row_bound / (factor * exact.TOEPLITZ_MAX_CONDITION)
    likelihood = _bound(gd.likelihoods.Gaussian(noise), "likelihood")
    spied = _spy_toeplitz(monkeypatch)
    fast = exact.evaluate(kernel, likelihood, X, Y)
    assert (spied[0] is not None) == taken
    eigen = exact._kronecker(kernel, likelihood, X, Y, True, True, False)
    np.testing.assert_allclose(fast.log_evidence, eigen.log_evidence, rtol=1e-10)
    for name, g in eigen.grads.items():
        np.testing.assert_allclose(fast.grads[name], g, rtol=0, atol=1e-6 * np.abs(g).max(), err_msg=name)
