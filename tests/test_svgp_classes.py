"""gpdsl.methods.svgp_classes: the per-class products of a K-class SVGP pass written into one stack,
against dense NumPy products, and to the last bit against the one-class-at-a-time forms they replace
(gpdsl.linalg.lower_product, weighted_gram, inverse_lower), so that a fit takes the same steps."""
import numpy as np
import pytest
from scipy.linalg import lapack

import gpdsl as gd
from gpdsl.linalg import inverse_lower, lower_product, symmetric_from_lower, weighted_gram
from gpdsl.methods import svgp, svgp_classes
from gpdsl.sklearn import GPClassifier
from naive import bound_pair


def _factors(rng, K, M):
    """K lower-triangular R_k of positive diagonal, as q_sqrt's."""
    return np.tril(rng.standard_normal((K, M, M)), -1) * 0.3 + np.eye(M) * rng.uniform(0.5, 1.5, (K, 1, M))


@pytest.mark.parametrize("G", [1, 4])
def test_class_products_are_R_transpose_A_per_class(G):
    """U_k = R_k^T A_{g_k}: the dense product to rounding (rtol 1e-12), and lower_product's bits;
    R's upper triangle is not read."""
    rng = np.random.default_rng(0)
    K, M, n = 4, 7, 11
    R, A = _factors(rng, K, M), rng.standard_normal((G, M, n))
    block = [0] * K if G == 1 else range(K)
    garbage = R + np.triu(rng.standard_normal((K, M, M)), 1)
    U = svgp_classes.class_products(garbage, A, block)
    assert U.shape == (K, M, n) and U.flags.c_contiguous
    for k, g in enumerate(block):
        np.testing.assert_allclose(U[k], R[k].T @ A[g], rtol=1e-12, atol=1e-12)
        assert np.array_equal(U[k], lower_product(R[k], A[g], transpose=True))


def test_subtract_class_products_is_the_sum_of_R_V():
    """W - sum_k R_k V_k: the dense sum to rounding, and the bits of the loop it replaces
    (W -= lower_product(R_k, V_k), k in order); V is overwritten by the products."""
    rng = np.random.default_rng(1)
    K, M, n = 5, 6, 9
    R, V, W = _factors(rng, K, M), rng.standard_normal((K, M, n)), rng.standard_normal((M, n))
    expected = W - np.einsum("kij,kjn->in", R, V)
    loop = W.copy()
    for k in range(K):
        loop -= lower_product(R[k], V[k])
    products = np.stack([R[k] @ V[k] for k in range(K)])
    out = svgp_classes.subtract_class_products(W.copy(), R, V)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    assert np.array_equal(out, loop)
    np.testing.assert_allclose(V, products, rtol=1e-12, atol=1e-12)


def test_weighted_grams_are_each_class_A_diag_v_A_transpose():
    """Every case of weighted_gram in one stack: weights <= 0, >= 0, one number repeated, mixed
    signs, a NaN, with a kernel block per class: the dense A diag(v) A^T to rounding, exactly
    symmetric, and weighted_gram's bits class by class."""
    rng = np.random.default_rng(2)
    K, M, n = 6, 5, 13
    A = rng.standard_normal((K, M, n))
    V = np.stack([-rng.uniform(0.1, 2.0, n), rng.uniform(0.1, 2.0, n), np.full(n, 0.7), rng.standard_normal(n),
                  -rng.uniform(0.1, 2.0, n), rng.uniform(0.0, 1.0, n)])
    V[5, 3] = np.nan
    P = svgp_classes.weighted_grams(A, V, range(K))
    for k in range(5):
        np.testing.assert_allclose(P[k], (A[k] * V[k]) @ A[k].T, rtol=1e-12, atol=1e-12)
        assert np.array_equal(P[k], P[k].T)
    for k in range(K):
        assert np.array_equal(P[k], weighted_gram(A[k], V[k]), equal_nan=True)
    shared = svgp_classes.weighted_grams(A[:1], V[:3], [0, 0, 0])
    for k in range(3):
        np.testing.assert_allclose(shared[k], (A[0] * V[k]) @ A[0].T, rtol=1e-12, atol=1e-12)
    assert np.array_equal(svgp_classes.weighted_grams(A[:1, :, :0], V[:2, :0], [0, 0]), np.zeros((2, M, M)))


def test_weighted_gram_lower_is_the_full_ones_lower_triangle():
    """weighted_gram(..., lower=True), as the collapsed statistics' row blocks sum it: in every
    branch (weights <= 0, >= 0, one number repeated, mixed signs) the full form's lower triangle to
    the last bit with the strict upper one zero, and symmetric_from_lower of it the full form."""
    rng = np.random.default_rng(7)
    M, n = 6, 11
    A = rng.standard_normal((M, n))
    for v in (-rng.uniform(0.1, 2.0, n), rng.uniform(0.1, 2.0, n), np.full(n, 0.7), rng.standard_normal(n)):
        full, lower = weighted_gram(A, v), weighted_gram(A, v, lower=True)
        np.testing.assert_array_equal(lower, np.tril(full))
        np.testing.assert_array_equal(symmetric_from_lower(lower), full)


def test_from_natural_is_the_inverse_of_the_precision_and_keeps_the_bits():
    """R_k R_k^T = Lam_k^-1 and m_k = Lam_k^-1 eta_k (dense inverses, rtol 1e-10), R_k lower-triangular,
    and the same R as the reversed factor's inverse through inverse_lower (the form it replaces)."""
    rng = np.random.default_rng(3)
    K, M = 3, 8
    B = rng.standard_normal((K, M, M))
    Lam, eta = B @ np.swapaxes(B, 1, 2) + M * np.eye(M), rng.standard_normal((K, M))
    m, R = svgp_classes.from_natural(Lam, eta)
    for k in range(K):
        S = np.linalg.inv(Lam[k])
        np.testing.assert_allclose(R[k] @ R[k].T, S, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(m[:, k], S @ eta[k], rtol=1e-10, atol=1e-12)
        C, _ = lapack.dpotrf(Lam[k][::-1, ::-1], lower=1, clean=1)
        assert np.array_equal(R[k], inverse_lower(np.ascontiguousarray(C[::-1, ::-1].T)))
    assert np.all(np.triu(R, 1) == 0.0)


def test_prior_plus_adds_the_prior_precision():
    """I + scale A W A^T (dense), the same bits as the symmetrised form scale sym(A W A^T) + I for
    the exactly symmetric A W A^T that the passes form."""
    rng = np.random.default_rng(4)
    B = rng.standard_normal((2, 5, 7))
    AWA = np.einsum("kmn,kln->kml", B, B)
    assert np.array_equal(AWA, np.swapaxes(AWA, 1, 2))
    out = svgp_classes.prior_plus(AWA, 3.7)
    np.testing.assert_allclose(out, np.eye(5) + 3.7 * AWA, rtol=1e-15)
    assert np.array_equal(out, 3.7 * 0.5 * (AWA + np.swapaxes(AWA, 1, 2)) + np.eye(5))
    in_place = AWA.copy()
    assert svgp_classes.prior_plus(in_place, 3.7, out=in_place) is in_place and np.array_equal(in_place, out)


@pytest.mark.parametrize("link", ["softmax", "robustmax"])
def test_a_minibatch_steps_natural_precision_is_exactly_symmetric(link):
    """The natural pass's A W A^T is symmetric to the last bit (prior_plus relies on it), with the
    clip of robust-max's negative site precisions among the classes; and the whole step agrees with
    its dense form: each class's new S^-1 = (1 - rho) S^-1 + rho (I + scale A W_k A^T) (rtol 1e-10)."""
    rng = np.random.default_rng(5)
    K, M, B, D = 4, 6, 30, 2
    X, Z = rng.standard_normal((B, D)), rng.standard_normal((M, D))
    y = rng.integers(0, K, B).astype(float)
    kernel, likelihood = bound_pair(gd.kernels.SquaredExponential(1.3, 2.0), gd.likelihoods.Categorical(K, link), {})
    state = svgp.CarriedQ(0.5 * rng.standard_normal((M, K)), _factors(rng, K, M))
    factors = svgp._factors(kernel, Z, 1e-8)
    (_, AWA, _), (_, _, d), _ = svgp._data_pass(kernel, likelihood, X, y, Z, factors, state.m, state.R, B,
                                                 ("natural",), keep=True, clip=True)
    assert np.array_equal(AWA, np.swapaxes(AWA, 1, 2))
    A = np.linalg.solve(factors.L[0], kernel.gram(Z, X))
    w = np.maximum(-2.0 * d, 0.0)
    np.testing.assert_allclose(AWA, np.einsum("mn,nk,ln->kml", A, w, A), rtol=1e-10, atol=1e-10)
    if link == "robustmax":
        assert np.any(d > 0.0)          # the clip's case is exercised
    moved, *_ = svgp.minibatch_update(kernel, likelihood, X, y, Z, state, scale=3.0, rho=0.2, jitter=1e-8)
    Lam0 = np.linalg.inv(state.R @ np.swapaxes(state.R, 1, 2))
    expected = 0.8 * Lam0 + 0.2 * (np.eye(M) + 3.0 * np.einsum("mn,nk,ln->kml", A, w, A))
    np.testing.assert_allclose(np.linalg.inv(moved.R @ np.swapaxes(moved.R, 1, 2)), expected, rtol=1e-8, atol=1e-8)


@pytest.mark.filterwarnings("ignore::gpdsl.ConvergenceWarning")
def test_classifier_records_its_log_evidence_at_the_fit():
    """GPClassifier's K-class default (a minibatch fit, whose full-data bound is pending in the
    posterior) reads the bound at the fit, as scikit-learn's estimators record theirs: the value
    is the posterior's, and an unfitted classifier has no such attribute."""
    rng = np.random.default_rng(6)
    X = np.concatenate([rng.normal(c, 0.6, (20, 2)) for c in ((0, 0), (3, 0), (0, 3))])
    y = np.repeat([0, 1, 2], 20)
    clf = GPClassifier(max_iter=30)
    assert not hasattr(clf, "log_marginal_likelihood_value_")
    clf.fit(X, y)
    assert not clf.posterior_.log_evidence_pending
    value = clf.log_marginal_likelihood_value_
    assert value == clf.posterior_.log_evidence and np.isfinite(value)


def test_scratch_keeps_one_array_per_name_and_shape():
    """Scratch.array hands back the same array for the same name and shape, a new one for a new shape."""
    scratch = svgp_classes.Scratch()
    a = scratch.array("U", (2, 3, 4))
    assert scratch.array("U", (2, 3, 4)) is a and a.flags.c_contiguous and a.dtype == np.float64
    b = scratch.array("U", (2, 3, 5))
    assert b.shape == (2, 3, 5) and scratch.array("U", (2, 3, 5)) is b
    assert scratch.array("grams", (2, 3, 3)) is not b


@pytest.mark.parametrize("link", ["softmax", "robustmax"])
def test_steps_with_a_carried_scratch_are_the_steps_without(link):
    """Minibatch steps (natural and Adam's batch gradient) that reuse one Scratch from step to step
    give the same q, bound and gradients to the last bit as steps that allocate afresh; the batch
    gradient's P_k R_k is the dense (A D_k A^T) R_k (rtol 1e-10)."""
    from gpdsl.methods import stochastic
    rng = np.random.default_rng(8)
    K, M, B, D = 3, 5, 20, 2
    X, Z = rng.standard_normal((3 * B, D)), rng.standard_normal((M, D))
    y = rng.integers(0, K, 3 * B).astype(float)
    kernel, likelihood = bound_pair(gd.kernels.SquaredExponential(1.1, 1.5), gd.likelihoods.Categorical(K, link), {})
    start = svgp.CarriedQ(0.3 * rng.standard_normal((M, K)), _factors(rng, K, M))
    fresh, carried = start, start._replace(scratch=svgp_classes.Scratch())
    for step in range(3):
        rows = slice(step * B, (step + 1) * B)
        fresh, *a = svgp.minibatch_update(kernel, likelihood, X[rows], y[rows], Z, fresh._replace(scratch=None),
                                          scale=3.0, rho=0.3, jitter=1e-8)
        carried, *b = svgp.minibatch_update(kernel, likelihood, X[rows], y[rows], Z, carried, scale=3.0, rho=0.3,
                                            jitter=1e-8)
        assert carried.scratch is not None and np.array_equal(fresh.R, carried.R) and np.array_equal(fresh.m, carried.m)
        assert a[0] == b[0] and np.array_equal(a[2], b[2]) and all(np.array_equal(a[1][k], b[1][k]) for k in a[1])
        g_fresh = stochastic.batch_gradient(kernel, likelihood, X[rows], y[rows], Z, fresh._replace(scratch=None),
                                            scale=3.0, jitter=1e-8)
        g_carried = stochastic.batch_gradient(kernel, likelihood, X[rows], y[rows], Z, carried, scale=3.0, jitter=1e-8)
        assert g_fresh[0] == g_carried[0]
        for name in g_fresh[3]:
            assert np.array_equal(g_fresh[3][name], g_carried[3][name])
    factors = svgp._factors(kernel, Z, 1e-8)
    (_, PR), (_, _, d) = svgp._data_pass(kernel, likelihood, X[:B], y[:B], Z, factors, carried.m, carried.R, B,
                                         ("q_grad",), scratch=carried.scratch)
    A = np.linalg.solve(factors.L[0], kernel.gram(Z, X[:B]))
    np.testing.assert_allclose(PR, np.einsum("mn,nk,ln,klj->kmj", A, d, A, carried.R), rtol=1e-10, atol=1e-12)


def test_a_pass_over_several_blocks_takes_no_scratch():
    """A pass over several row blocks sums its blocks' A W A^T: a scratch given to it is not used
    (each block's array would be the next one's), so its sums are those of the pass without it."""
    rng = np.random.default_rng(9)
    K, M, n = 3, 4, 20
    X, Z, y = rng.standard_normal((n, 2)), rng.standard_normal((M, 2)), rng.integers(0, K, n).astype(float)
    kernel, likelihood = bound_pair(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Categorical(K), {})
    m, R = 0.2 * rng.standard_normal((M, K)), _factors(rng, K, M)
    factors = svgp._factors(kernel, Z, 1e-8)
    plain = svgp._data_pass(kernel, likelihood, X, y, Z, factors, m, R, 7, ("natural", "q_grad"))
    given = svgp._data_pass(kernel, likelihood, X, y, Z, factors, m, R, 7, ("natural", "q_grad"),
                            scratch=svgp_classes.Scratch())
    for a, b in zip(plain[0], given[0]):
        assert np.array_equal(a, b)
    whole = svgp._data_pass(kernel, likelihood, X, y, Z, factors, m, R, n, ("natural",))
    np.testing.assert_allclose(plain[0][1], whole[0][1], rtol=1e-12, atol=1e-12)
