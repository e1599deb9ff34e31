"""The multi-latent methods with one kernel per latent function (``gd.kernels.Separate``,
gram (K, n1, n2)): dense softmax Laplace (gpdsl.methods.laplace_multiclass) against the slow NK x NK
reference with a block-diagonal prior (tests/naive_multiclass.py) and its gradients against central
differences, and greedy (HGV) selection with one residual per class.  Each also with K identical
parts, which must equal the shared kernel (its gradients the parts' summed).  The collapsed
logistic-softmax method with Separate is tested beside its brute-force ELBO, in
tests/test_logistic_softmax.py."""
import numpy as np
import pytest
from scipy.linalg import solve_triangular

import gpdsl as gd
import naive_multiclass
from test_laplace_multiclass import _data, _evaluate
from gpdsl.components import bind

SE = gd.kernels.SquaredExponential
M52 = gd.kernels.Matern52

# Three different parts (an ARD squared exponential, a Matern 5/2, an isotropic SE), away from
# any optimum, and four for K = 4.
PARTS = (SE(np.ones(2), 1.0), M52(1.0, 1.0), SE(1.0, 1.0), M52(np.ones(2), 1.0))
PART_VALUES = ({"lengthscale": np.array([0.8, 1.4]), "variance": np.array(2.5)},
               {"lengthscale": np.array(0.6), "variance": np.array(4.0)},
               {"lengthscale": np.array(1.3), "variance": np.array(1.5)},
               {"lengthscale": np.array([1.1, 0.7]), "variance": np.array(3.0)})


def _separate(k):
    """Separate of the first k parts and its values ("kernel.<i>.<field>")."""
    values = {f"kernel.{i}.{field}": v for i in range(k) for field, v in PART_VALUES[i].items()}
    return gd.kernels.Separate(PARTS[:k]), values


def _identical(k):
    """Separate((SE, ..., SE)) with equal values, and the shared SE with the same values."""
    shared, values = SE(np.ones(2), 1.0), {"kernel.lengthscale": np.array([0.9, 1.6]), "kernel.variance": np.array(2.0)}
    parts = {f"kernel.{i}.{key.split('.')[1]}": v for i in range(k) for key, v in values.items()}
    return gd.kernels.Separate((shared,) * k), parts, shared, values


def _summed_over_parts(grads, k):
    """{"kernel.<field>": sum_i grads["kernel.<i>.<field>"]}."""
    out = {}
    for key, g in grads.items():
        _, part, field = key.split(".")
        assert 0 <= int(part) < k
        out[f"kernel.{field}"] = out.get(f"kernel.{field}", 0.0) + g
    return out


# -- dense softmax Laplace -----------------------------------------------------------------------
def _predict_per_class(state, bound, X_new):
    """Latent means (n, K) and covariances (n, K, K) from a PredictiveState with one factor per
    class (chol (K, N, N), b_*c = chol_c^-1 k^c_*, PredictiveState's docstring)."""
    Kzs, kss = bound.gram(state.Z, X_new), bound.diag(X_new)
    k = state.weights.shape[1]
    b = np.stack([solve_triangular(state.chol[c], Kzs[c], lower=True) for c in range(k)])
    cb = np.stack([state.coupling[c] @ b[c] for c in range(k)])
    cov = np.einsum("cmn,dmn->ncd", cb, cb)
    for c in range(k):
        cov[:, c, c] += kss[c] - np.einsum("ms,mn,ns->s", b[c], state.correction[c], b[c])
    return np.einsum("cms,mc->sc", b, state.weights), cov


@pytest.mark.parametrize("k", [3, 4])
def test_laplace_against_naive_block_diagonal(k):
    """Mode, a = K^-1 f, log evidence, predictive means and K x K covariances (new and training
    inputs), q(f_c) and the pseudo-data equal the NK x NK reference with blockdiag(K_1, ..., K_K)
    to 1e-8 (measured ~1e-14); the state holds one Cholesky factor per class."""
    kernel, values = _separate(k)
    X, y, X_new = _data(30 if k == 3 else 24, k, seed=k)
    ev = _evaluate(kernel, values, X, y, k, need_state=True)
    bound = bind(kernel, values, "kernel")
    ref = naive_multiclass.laplace(bound.gram(X, X), y, k)
    assert ev.log_evidence == pytest.approx(ref["log_evidence"], abs=1e-8)
    np.testing.assert_allclose(ev.state.q_mean, ref["f"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(ev.warm.weights, ref["a"], rtol=0, atol=1e-8)
    assert ev.state.chol.shape == (k, len(X), len(X))
    X_all = np.vstack([X_new, X[:5]])
    mean, cov = _predict_per_class(ev.state, bound, X_all)
    ref_mean, ref_cov = naive_multiclass.predict(ref, bound.gram(X, X_all), bound.diag(X_all))
    np.testing.assert_allclose(mean, ref_mean, rtol=0, atol=1e-8)
    np.testing.assert_allclose(cov, ref_cov, rtol=0, atol=1e-8)
    np.testing.assert_allclose(mean[len(X_new):], ref["f"][:5], rtol=0, atol=1e-8)
    for c in range(k):
        np.testing.assert_allclose(np.diag(ev.state.q_cov[c])[:5], ref_cov[len(X_new):, c, c], rtol=0, atol=1e-8)
    w, r = ev.pseudo_data
    P = ref["P"]
    np.testing.assert_allclose(w, P - P * P, rtol=0, atol=1e-8)
    np.testing.assert_allclose(r, ref["Y"] - P + (P - P * P) * ref["f"], rtol=0, atol=1e-8)
    bare = _evaluate(kernel, values, X, y, k, need_grad=False)
    assert bare.log_evidence == ev.log_evidence and bare.grads == {} and bare.state is None


def test_laplace_gradients_by_finite_differences():
    """d log q / d log theta for every hyperparameter of every part (each ARD length-scale)
    against central differences of the log evidence with step 1e-5 in log theta, to 1e-8
    absolute (measured 2e-10)."""
    k = 3
    kernel, values = _separate(k)
    X, y, _ = _data(30, k, seed=13)
    ev = _evaluate(kernel, values, X, y, k)
    assert set(ev.grads) == set(values)
    h = 1e-5
    for key, value in values.items():
        for i in range(value.size):
            def at(step):
                log_value = np.log(value).ravel()
                log_value[i] += step
                moved = dict(values, **{key: np.exp(log_value).reshape(value.shape)})
                return _evaluate(kernel, moved, X, y, k, need_grad=False).log_evidence

            fd = (at(h) - at(-h)) / (2 * h)
            analytic = float(np.ravel(ev.grads[key])[i] * value.ravel()[i])
            assert analytic == pytest.approx(fd, rel=0, abs=1e-8), (key, i)


@pytest.mark.parametrize("k", [3, 4])
def test_laplace_identical_parts_equal_the_shared_kernel(k):
    """Separate((k, ..., k)) is the shared kernel k: the same log evidence, mode and predictive
    state (each class's factor the shared one) to 1e-10, and its gradients summed over the parts
    are the shared kernel's to 1e-10 (measured 3e-15)."""
    separate, parts, shared, values = _identical(k)
    X, y, _ = _data(30, k, seed=20 + k)
    ev = _evaluate(separate, parts, X, y, k, need_state=True)
    ref = _evaluate(shared, values, X, y, k, need_state=True)
    assert ev.log_evidence == pytest.approx(ref.log_evidence, abs=1e-10)
    np.testing.assert_allclose(ev.warm.weights, ref.warm.weights, rtol=0, atol=1e-10)
    summed = _summed_over_parts(ev.grads, k)
    assert set(summed) == set(ref.grads)
    for key in ref.grads:
        np.testing.assert_allclose(summed[key], ref.grads[key], rtol=0, atol=1e-10, err_msg=key)
    for c in range(k):
        np.testing.assert_allclose(ev.state.chol[c], ref.state.chol, rtol=0, atol=1e-10)
    for field in ("weights", "correction", "coupling", "q_mean", "q_cov"):
        np.testing.assert_allclose(getattr(ev.state, field), getattr(ref.state, field), rtol=0, atol=1e-10,
                                   err_msg=field)


# -- greedy selection ----------------------------------------------------------------------------
EPS = 1e-12     # greedy selection's jitter (gpdsl.inducing.greedy._JITTER): its K is K_ff + eps I


def _dense_residuals(bound, X, S):
    """k^k_nn - q^k_nn(S) (K, N) of K_k + eps I by dense solves, one class at a time."""
    out = []
    for Kk in bound.gram(X, X):
        Kj = Kk + EPS * np.eye(len(X))
        Q = Kj[:, S] @ np.linalg.solve(Kj[np.ix_(S, S)], Kj[S, :]) if S else 0.0
        out.append(np.diag(Kj - Q))
    return np.array(out)


def _context(kernel, values, weights=None, **kw):
    return gd.inducing.SelectionContext(kernel, values, weights=weights, **kw)


def test_greedy_variance_separate_picks_the_summed_class_criteria():
    """HGV with one kernel per class, weights (N, K): every pick maximises sum_k w_nk (k^k_nn -
    q^k_nn) over the points not yet picked, and the criterion after each pick is its sum over n,
    both from dense solves per class (relative 1e-8; measured 7e-16)."""
    kernel, values = _separate(3)
    X, _, _ = _data(80, 3, seed=31)
    w = np.random.default_rng(2).uniform(0.05, 0.25, size=(80, 3))
    sel = gd.inducing.GreedyVariance(m=12, weighted=True).select(X, None, _context(kernel, values, w))
    bound = bind(kernel, values, "kernel")
    assert sel.stopped == "m" and len(set(sel.indices.tolist())) == 12
    for i, j in enumerate(sel.indices):
        crit = np.sum(w.T * _dense_residuals(bound, X, sel.indices[:i].tolist()), axis=0)
        crit[sel.indices[:i]] = -np.inf
        assert crit[j] == pytest.approx(crit.max(), rel=1e-8), i
        after = np.sum(w.T * _dense_residuals(bound, X, sel.indices[:i + 1].tolist()))
        assert sel.criterion[i] == pytest.approx(after, rel=1e-8), i


@pytest.mark.parametrize("weighted", [True, False])
def test_greedy_variance_identical_parts_equal_the_shared_selection(weighted):
    """Separate((k, k, k)) with the classes' weights (N, K) selects what the shared kernel k does
    with their sums (HGV), or unweighted (GV, whose per-class criterion is the classes' mean
    residual): the same points in the same order, the same criteria to 1e-10 relative, and the
    same stop by tol_per_point."""
    separate, parts, shared, values = _identical(3)
    X, _, _ = _data(120, 3, seed=32)
    w = np.random.default_rng(3).uniform(0.05, 0.25, size=(120, 3))
    spec = gd.inducing.GreedyVariance(tol_per_point=2e-3, max_m=60, weighted=weighted)
    sel = spec.select(X, None, _context(separate, parts, w))
    ref = spec.select(X, None, _context(shared, values, w.sum(axis=1)))
    assert sel.stopped == ref.stopped == "tol"
    np.testing.assert_array_equal(sel.indices, ref.indices)
    np.testing.assert_allclose(sel.criterion, ref.criterion, rtol=1e-10, atol=0)


def test_fit_selects_with_one_kernel_per_class():
    """Model.fit with HGV and Separate: the selection reads the method's per-class weights (N, K)
    (the first round the likelihood's surrogate spread over the classes), and with identical
    parts the selections and the kept round's objective are the shared kernel's (1e-8)."""
    separate, _, shared, _ = _identical(3)
    values = {"kernel.lengthscale": np.array([1.5, 1.5]), "kernel.variance": np.array(10.0)}
    parts = {f"kernel.{i}.{key.split('.')[1]}": v for i in range(3) for key, v in values.items()}
    X = np.random.default_rng(33).normal(size=(90, 2))
    y = np.argmax(X @ np.array([[3.0, -3.0, 0.0], [0.0, 0.0, 3.0]]), axis=1).astype(float)
    lik = gd.likelihoods.Categorical(3, "logistic_softmax")
    spec = gd.inducing.GreedyVariance(tol_per_point=5e-3, max_m=40, weighted=True, reinit=True)
    fits = []
    for kernel, start in ((separate, parts), (shared, values)):
        model = gd.Model(kernel, lik, inducing=spec, inference=gd.inference.PolyaGamma())
        fits.append(model.fit(X, y, optimize=False, start=start))
    sep, ref = fits
    np.testing.assert_array_equal(sep.record.selection.indices, ref.record.selection.indices)
    assert sep.log_evidence == pytest.approx(ref.log_evidence, abs=1e-8)
    assert len(sep.record.reinit_history) == len(ref.record.reinit_history) > 1


def test_greedy_refusals_name_the_problem():
    kernel, values = _separate(3)
    X, _, _ = _data(30, 3, seed=34)
    context = _context(kernel, values, np.ones((30, 3)), targets=np.zeros(30))
    with pytest.raises(ValueError, match="GreedyBound: .*Separate.* prior of 3 latent functions"):
        gd.inducing.GreedyBound(m=5).select(X, None, context)
    with pytest.raises(ValueError, match=r"GreedyVariance: context.weights must be an \(30, 3\) array"):
        gd.inducing.GreedyVariance(m=5, weighted=True).select(X, None, _context(kernel, values, np.ones(30)))
    da = pytest.importorskip("dask.array")
    with pytest.raises(ValueError, match="GreedyVariance: a Dask X with a kernel of 3 latent functions"):
        gd.inducing.GreedyVariance(m=5).select(da.from_array(X, chunks=10), None, context)
