"""The dense multi-class softmax Laplace approximation (gpdsl.methods.laplace_multiclass;
Rasmussen & Williams Algorithms 3.3, 3.4 and 5.2): against the slow NK x NK reference
(tests/naive_multiclass.py) for the mode, the log evidence, the predictive means and K x K
covariances, q(f) and the pseudo-data; its kernel gradients against central differences in
log-space hyperparameters; K = 2 against the binary logit Laplace with kernel 2k on
g = f_1 - f_0; warm starts; and its errors."""

import numpy as np
import pytest

import gpdsl as gd
import naive_multiclass
from gpdsl.components import bind
from gpdsl.methods import laplace_multiclass

SE = gd.kernels.SquaredExponential
M52 = gd.kernels.Matern52

# (kernel, values): an ARD squared exponential and a Matern 5/2, away from any optimum.
KERNELS = {
    "se_ard": (SE(np.ones(2), 1.0), {"kernel.lengthscale": np.array([0.8, 1.4]), "kernel.variance": np.array(2.5)}),
    "matern52": (M52(1.0, 1.0), {"kernel.lengthscale": np.array(0.6), "kernel.variance": np.array(4.0)}),
}
TOL = 1e-13


def _data(n, k, seed):
    """Inputs (n, 2) and labels that depend on them (with noise), every class present."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    centres = rng.normal(size=(k, 2)) * 1.5
    scores = -((X[:, None, :] - centres[None]) ** 2).sum(-1) + rng.gumbel(size=(n, k))
    y = np.argmax(scores, axis=1)
    y[:k] = np.arange(k)
    return X, y.astype(float), rng.normal(size=(6, 2))


def _evaluate(kernel, values, X, y, k, **kw):
    kw.setdefault("tol", TOL)
    kw.setdefault("max_iter", 100)
    return laplace_multiclass.evaluate(bind(kernel, values, "kernel"), gd.likelihoods.Categorical(k, "softmax"),
                                       X, y, **kw)


def _predict(state, kernel, X_new):
    """Latent means (n, K) and covariances (n, K, K) from the K > 1 PredictiveState (its docstring)."""
    b = state.basis(kernel.gram(state.Z, X_new))
    kss = kernel.diag(X_new)
    k = state.weights.shape[1]
    cb = [state.coupling[c] @ b for c in range(k)]
    cov = np.einsum("cmn,dmn->ncd", np.array(cb), np.array(cb))
    for c in range(k):
        cov[:, c, c] += kss - np.einsum("ms,mn,ns->s", b, state.correction[c], b)
    return b.T @ state.weights, cov


@pytest.mark.parametrize("k", [3, 4])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_against_naive(name, k):
    """Mode, log evidence, predictive mean and K x K covariance (new inputs and training inputs),
    q(f) and the pseudo-data equal the NK x NK reference to 1e-8 (measured ~1e-14).

    Both modes are first checked to satisfy the mode equation a = y - pi (R&W eq. 3.37) to 1e-12:
    two points that do so differ by at most ||(K^-1 + W)^-1|| ||r|| <= lambda_max(K) ||r||
    (<= 96 x 1e-12 here: K's entries are at most 4 on NK <= 96 rows), and every quantity compared
    is Lipschitz in the mode with constants of K's size, so 1e-8 holds whatever the BLAS summation
    order.  (A reference stopped when Psi no longer rose located the mode only to
    sqrt(rounding of Psi / curvature) ~ 1e-7, and missed 1e-8 under one BLAS thread: the reference
    now finishes on the mode equation.)"""
    kernel, values = KERNELS[name]
    X, y, X_new = _data(30 if k == 3 else 24, k, seed=k)
    ev = _evaluate(kernel, values, X, y, k, need_state=True)
    bound = bind(kernel, values, "kernel")
    ref = naive_multiclass.laplace(bound.gram(X, X), y, k)
    P_mode = gd.likelihoods.Categorical(k).class_probabilities(ev.state.q_mean)
    np.testing.assert_allclose(ev.warm.weights, ref["Y"] - P_mode, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ref["a"], ref["Y"] - ref["P"], rtol=0, atol=1e-12)
    assert ev.log_evidence == pytest.approx(ref["log_evidence"], abs=1e-8)
    np.testing.assert_allclose(ev.state.q_mean, ref["f"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(ev.warm.weights, ref["a"], rtol=0, atol=1e-8)
    X_all = np.vstack([X_new, X[:5]])
    mean, cov = _predict(ev.state, bound, X_all)
    ref_mean, ref_cov = naive_multiclass.predict(ref, bound.gram(X, X_all), bound.diag(X_all))
    np.testing.assert_allclose(mean, ref_mean, rtol=0, atol=1e-8)
    np.testing.assert_allclose(cov, ref_cov, rtol=0, atol=1e-8)
    np.testing.assert_allclose(mean[len(X_new):], ref["f"][:5], rtol=0, atol=1e-8)   # the mode at X
    # q(f_c) at X: the diagonal blocks of the posterior covariance.
    for c in range(k):
        np.testing.assert_allclose(np.diag(ev.state.q_cov[c])[:5], ref_cov[len(X_new):, c, c], rtol=0, atol=1e-8)
    w, r = ev.pseudo_data
    P = ref["P"]
    np.testing.assert_allclose(w, P - P * P, rtol=0, atol=1e-8)
    np.testing.assert_allclose(r, ref["Y"] - P + (P - P * P) * ref["f"], rtol=0, atol=1e-8)
    # Without the state or the gradients: the same evidence.
    bare = _evaluate(kernel, values, X, y, k, need_grad=False)
    assert bare.log_evidence == ev.log_evidence and bare.grads == {} and bare.state is None
    state_only = _evaluate(kernel, values, X, y, k, need_grad=False, need_state=True).state
    for field in ("weights", "correction", "coupling", "q_mean", "q_cov", "chol"):
        np.testing.assert_array_equal(getattr(state_only, field), getattr(ev.state, field))


def test_mode_equation():
    """At the mode a = y - pi (R&W eq. 3.37: f = K (y - pi)) to 1e-10."""
    kernel, values = KERNELS["se_ard"]
    X, y, _ = _data(40, 4, seed=7)
    ev = _evaluate(kernel, values, X, y, 4, need_state=True)
    P = gd.likelihoods.Categorical(4).class_probabilities(ev.state.q_mean)
    np.testing.assert_allclose(ev.warm.weights, np.eye(4)[y.astype(int)] - P, rtol=0, atol=1e-10)


@pytest.mark.parametrize("k", [3, 4])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_gradients_by_finite_differences(name, k):
    """d log q / d log theta for every kernel hyperparameter (each ARD length-scale) against
    central differences of the log evidence with step 1e-5 in log theta: 1e-6 relative
    (measured ~1e-9)."""
    kernel, values = KERNELS[name]
    X, y, _ = _data(30, k, seed=10 + k)
    ev = _evaluate(kernel, values, X, y, k)
    assert set(ev.grads) == set(values)
    h = 1e-5
    for key, value in values.items():
        value = np.asarray(value, dtype=float)
        for i in range(value.size):
            def at(step):
                log_value = np.log(value).ravel()
                log_value[i] += step
                moved = dict(values, **{key: np.exp(log_value).reshape(value.shape)})
                return _evaluate(kernel, moved, X, y, k, need_grad=False).log_evidence

            fd = (at(h) - at(-h)) / (2 * h)
            analytic = float(np.ravel(ev.grads[key])[i] * value.ravel()[i])
            assert analytic == pytest.approx(fd, rel=1e-6, abs=1e-8), (key, i)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_two_classes_equal_binary_logit(name):
    """K = 2 softmax Laplace is the binary logit Laplace on g = f_1 - f_0 with kernel 2 k: the
    likelihood sees only g, and the prior of f_0 + f_1 (independent of g, equal variances)
    integrates out; the Laplace approximation is invariant under that linear change of variables.
    Log evidence, the latent mean of g (mean_1 - mean_0) and its variance v_0 + v_1 - 2 c_01 at
    new inputs to 1e-8 (measured ~1e-15)."""
    kernel, values = KERNELS[name]
    X, y01, X_new = _data(35, 2, seed=3)
    ev = _evaluate(kernel, values, X, y01, 2, need_state=True)
    doubled = dict(values, **{"kernel.variance": 2.0 * values["kernel.variance"]})
    binary = gd.Model(type(kernel)(**{key.split(".")[1]: val for key, val in doubled.items()}),
                      gd.likelihoods.Bernoulli("logit", bias=gd.Fixed(0.0)), inference=gd.inference.Laplace(tol=TOL))
    post = binary.fit(X, np.where(y01 > 0, 1.0, -1.0), optimize=False)
    assert ev.log_evidence == pytest.approx(post.log_evidence, abs=1e-8)
    mean, cov = _predict(ev.state, bind(kernel, values, "kernel"), X_new)
    g_mean, g_var = post.predict_f(X_new)
    np.testing.assert_allclose(mean[:, 1] - mean[:, 0], np.ravel(g_mean), rtol=0, atol=1e-8)
    np.testing.assert_allclose(cov[:, 0, 0] + cov[:, 1, 1] - 2.0 * cov[:, 0, 1], np.ravel(g_var), rtol=0, atol=1e-8)
    # The binary gradients: d/d variance of the binary kernel (2 v) is half the multi-class one's.
    ev_b = binary.evaluate(post.values, X, np.where(y01 > 0, 1.0, -1.0), None)
    assert float(ev.grads["kernel.variance"]) == pytest.approx(2.0 * float(ev_b.grads["kernel.variance"]),
                                                               rel=1e-7, abs=1e-9)
    for i, g in enumerate(np.ravel(ev.grads["kernel.lengthscale"])):
        assert g == pytest.approx(np.ravel(ev_b.grads["kernel.lengthscale"])[i], rel=1e-7, abs=1e-9)


class _Counting:
    """A likelihood that counts its log_density calls (one per Newton trial point)."""

    def __init__(self, likelihood):
        self.likelihood, self.calls = likelihood, 0

    def __getattr__(self, name):
        return getattr(self.likelihood, name)

    def log_density(self, y, F):
        self.calls += 1
        return self.likelihood.log_density(y, F)


def test_warm_start():
    """Warm from the mode at hyperparameters 1% away: the same evidence and gradients (1e-9) in
    fewer Newton steps (5 trial points instead of 8, counting f = 0 and the warm start); a warm
    start worse than f = 0 is ignored."""
    kernel, values = KERNELS["se_ard"]
    values = dict(values, **{"kernel.variance": np.array(30.0)})     # a mode some Newton steps away
    X, y, _ = _data(40, 3, seed=5)
    near = dict(values, **{"kernel.variance": values["kernel.variance"] * 1.01})
    first = _evaluate(kernel, near, X, y, 3)
    cold_lik, warm_lik = (_Counting(gd.likelihoods.Categorical(3, "softmax")) for _ in range(2))
    bound = bind(kernel, values, "kernel")
    cold = laplace_multiclass.evaluate(bound, cold_lik, X, y, tol=TOL, max_iter=100)
    warm = laplace_multiclass.evaluate(bound, warm_lik, X, y, tol=TOL, max_iter=100, warm=first.warm)
    assert warm.log_evidence == pytest.approx(cold.log_evidence, abs=1e-9)
    for key in values:
        np.testing.assert_allclose(warm.grads[key], cold.grads[key], rtol=1e-9, atol=1e-10)
    assert warm_lik.calls <= cold_lik.calls - 3
    bad = _evaluate(kernel, values, X, y, 3, warm=laplace_multiclass.ModeState(-50.0 * np.eye(3)[y.astype(int)]))
    assert bad.log_evidence == pytest.approx(cold.log_evidence, abs=1e-9)


def test_errors():
    kernel, values = KERNELS["matern52"]
    X, y, _ = _data(20, 3, seed=1)
    bound = bind(kernel, values, "kernel")
    for lik in (gd.likelihoods.Categorical(3, "robustmax"), gd.likelihoods.Bernoulli("logit")):
        with pytest.raises(ValueError, match="softmax"):
            laplace_multiclass.evaluate(bound, lik, X, y, tol=TOL, max_iter=100)
    with pytest.raises(ValueError, match="warm"):
        _evaluate(kernel, values, X, y, 3, warm=laplace_multiclass.ModeState(np.zeros((20, 2))))
    with pytest.raises(FloatingPointError, match="did not reach the mode"):
        _evaluate(kernel, values, X, y, 3, max_iter=1)
