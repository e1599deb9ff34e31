"""The multi-latent operations of gpdsl.likelihoods.Categorical: the variational expectations of
the three links (against independent formulas, GPflow's RobustMax rule written out as GPflow
does, and central differences of their gradients) and the predictive rules (the exact K = 2
softmax, GPflow's predict_y, the Sobol rule against a finer one)."""
import numpy as np
import pytest
from scipy import special
from scipy.stats import qmc

import gpdsl as gd
from gpdsl.components import bind
from gpdsl.likelihoods.categorical import LINKS, Categorical


def _rows(seed=0, n=6, K=4, low=0.05, high=3.0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, K, n).astype(float), rng.normal(0.0, 1.5, (n, K)), rng.uniform(low, high, (n, K)))


def _gpflow_prob_is_largest(y, mu, var, points, eps=1e-6):
    """GPflow 2.11's RobustMax.prob_is_largest, transcribed: physicists' Gauss-Hermite nodes,
    X = mu_y + x sqrt(2 var_y), Phi by erf, squashed, the labelled factor set to 1."""
    gh_x, gh_w = np.polynomial.hermite.hermgauss(points)
    K = mu.shape[1]
    on = np.eye(K)[y.astype(int)]
    X = (on * mu).sum(1)[:, None] + gh_x * np.sqrt(np.clip(2.0 * (on * var).sum(1), 1e-10, np.inf))[:, None]
    dist = (X[:, None, :] - mu[:, :, None]) / np.sqrt(np.clip(var, 1e-10, np.inf))[:, :, None]
    cdfs = 0.5 * (1.0 + special.erf(dist / np.sqrt(2.0))) * (1 - 2 * eps) + eps
    cdfs = cdfs * (1.0 - on)[:, :, None] + on[:, :, None]
    return np.prod(cdfs, axis=1) @ (gh_w / np.sqrt(np.pi))


def _sobol_normals(K, log2_points, seed=7):
    return special.ndtri(qmc.Sobol(d=K, scramble=True, seed=seed).random(2 ** log2_points))


class _Robust100(Categorical):
    quadrature_points = 100


@pytest.mark.parametrize("likelihood", [Categorical(4, "robustmax"), _Robust100(4, "robustmax", epsilon=0.01)])
def test_robustmax_is_gpflows_rule(likelihood):
    """ve = P log(1 - eps) + (1 - P) log(eps / (K - 1)) and predict_y with GPflow's P (to 1e-14),
    at ``quadrature_points`` and ``prediction_points`` nodes."""
    y, mean, var = _rows()
    eps, K = likelihood.epsilon, 4
    P = _gpflow_prob_is_largest(y, mean, var, likelihood.quadrature_points)
    ve = likelihood.variational_expectations(y, mean, var)[0]
    np.testing.assert_allclose(ve, P * np.log(1 - eps) + (1 - P) * np.log(eps / (K - 1)), rtol=1e-14, atol=1e-14)
    p = likelihood.predictive(mean, var)["p"]
    for k in range(K):
        Pk = _gpflow_prob_is_largest(np.full(6, float(k)), mean, var, likelihood.prediction_points)
        np.testing.assert_allclose(p[:, k], Pk * (1 - eps) + (1 - Pk) * eps / (K - 1), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(likelihood.log_predictive(mean, var, y), np.log(p[np.arange(6), y.astype(int)]),
                               rtol=1e-14)


@pytest.mark.parametrize("link", LINKS)
def test_expectation_gradients_match_central_differences(link):
    """d ve / d mean and d ve / d var (n, K) are the derivatives of the rule's own sum: central
    differences (step 1e-6) agree to 1e-8 (measured 2e-10 to 9e-10)."""
    likelihood = Categorical(4, link)
    y, mean, var = _rows(1)
    ve, d_mean, d_var, grads = likelihood.variational_expectations(y, mean, var)
    assert set(grads) == ({"epsilon"} if link == "robustmax" else set())
    assert ve.shape == (6,) and d_mean.shape == d_var.shape == (6, 4)
    h = 1e-6
    for i in range(4):
        step = np.zeros_like(mean)
        step[:, i] = h
        fd_mean = (likelihood.variational_expectations(y, mean + step, var)[0]
                   - likelihood.variational_expectations(y, mean - step, var)[0]) / (2 * h)
        fd_var = (likelihood.variational_expectations(y, mean, var + step)[0]
                  - likelihood.variational_expectations(y, mean, var - step)[0]) / (2 * h)
        np.testing.assert_allclose(d_mean[:, i], fd_mean, rtol=0, atol=1e-8, err_msg=f"mean {i}")
        np.testing.assert_allclose(d_var[:, i], fd_var, rtol=0, atol=1e-8, err_msg=f"var {i}")


@pytest.mark.parametrize("epsilon", [1e-3, 0.05, 0.6])
def test_robustmax_epsilon_gradient_is_the_closed_form(epsilon):
    """d sum_n ve_n / d epsilon = sum_n [(1 - P_n) / epsilon - P_n / (1 - epsilon)] with GPflow's
    P_n (to 1e-12 relative) and central differences of the bound's own sum in epsilon (relative
    step 1e-5: agreement to 1e-7 relative, the difference's rounding ~1e-16 * |sum ve| / h being
    1e-9 of it); the rows may be split into row blocks (2 ** 18 / (K nodes) rows) and still sum to
    the one total."""
    y, mean, var = _rows(4, n=40)
    likelihood = Categorical(4, "robustmax", epsilon=epsilon)
    grads = likelihood.variational_expectations(y, mean, var)[3]
    assert set(grads) == {"epsilon"} and np.ndim(grads["epsilon"]) == 0
    P = _gpflow_prob_is_largest(y, mean, var, likelihood.quadrature_points)
    np.testing.assert_allclose(grads["epsilon"], np.sum((1 - P) / epsilon - P / (1 - epsilon)), rtol=1e-12)
    h = 1e-5 * epsilon

    def total(e):
        return np.sum(bind(likelihood, {"likelihood.epsilon": np.array(e)}, "likelihood")
                      .variational_expectations(y, mean, var)[0])

    np.testing.assert_allclose(grads["epsilon"], (total(epsilon + h) - total(epsilon - h)) / (2 * h), rtol=1e-7)


def test_robustmax_epsilon_maximising_the_bound_is_one_minus_the_mean_p():
    """At fixed q the bound is concave in epsilon with its maximum at 1 - mean_n P_n: the gradient
    vanishes there (to 1e-9 of its scale N / epsilon) and has the sign that points to it either
    side."""
    y, mean, var = _rows(5, n=50)
    P = _gpflow_prob_is_largest(y, mean, var, 20)
    best = 1.0 - P.mean()

    def grad(e):
        return Categorical(4, "robustmax", epsilon=e).variational_expectations(y, mean, var)[3]["epsilon"]

    assert abs(grad(best)) < 1e-9 * 50 / best
    assert grad(0.5 * best) > 0 > grad(min(2 * best, 0.5 * (1 + best)))


def test_logistic_softmax_gradient_at_zero_variance_is_the_limit():
    """At var = 0, d ve / d var is 1/2 E[g''] (the limit of d/ds / (2 s)): to 1e-7 of var = 1e-12."""
    likelihood = Categorical(4, "logistic_softmax")
    y, mean, _ = _rows(2)
    at_zero = likelihood.variational_expectations(y, mean, np.zeros_like(mean))[2]
    near = likelihood.variational_expectations(y, mean, np.full_like(mean, 1e-12))[2]
    np.testing.assert_allclose(at_zero, near, rtol=0, atol=1e-7)


def test_softmax_and_logistic_softmax_are_lower_bounds():
    """softmax: m_y - log sum_j exp(m_j + v_j / 2) exactly, below E[log softmax_y] (2^18 Sobol
    points); logistic-softmax: below E[log sigma(f_y) - log sum_j sigma(f_j)] likewise."""
    y, mean, var = _rows(3, n=5, K=3, low=0.3, high=2.0)
    E = _sobol_normals(3, 18)
    softmax, logistic = Categorical(3, "softmax"), Categorical(3, "logistic_softmax")
    ve = softmax.variational_expectations(y, mean, var)[0]
    codes = y.astype(int)
    np.testing.assert_allclose(ve, mean[np.arange(5), codes] - special.logsumexp(mean + var / 2, axis=1), rtol=1e-15)
    for likelihood, bound in ((softmax, ve), (logistic, logistic.variational_expectations(y, mean, var)[0])):
        F = mean[:, None, :] + np.sqrt(var)[:, None, :] * E
        exact = likelihood.log_density(np.repeat(y, E.shape[0]), F.reshape(-1, 3)).reshape(5, -1).mean(axis=1)
        assert np.all(bound < exact)


@pytest.mark.parametrize("full", [False, True])
def test_softmax_two_classes_is_the_exact_logit_normal(full):
    """K = 2 softmax: p(y = 1) = E[sigma(f_1 - f_0)], f_1 - f_0 ~ N(m_1 - m_0, v_0 + v_1 - 2 c_01),
    the Bernoulli logit's exact log predictive (to 1e-14)."""
    rng = np.random.default_rng(4)
    mean = rng.normal(0, 2, (7, 2))
    var = rng.uniform(0.01, 4.0, (7, 2))
    cov = np.zeros((7, 2, 2))
    cov[:, 0, 0], cov[:, 1, 1] = var[:, 0], var[:, 1]
    cov[:, 0, 1] = cov[:, 1, 0] = 0.5 * np.sqrt(var[:, 0] * var[:, 1]) * rng.uniform(-1, 1, 7)
    diff_var = var.sum(1) - (2 * cov[:, 0, 1] if full else 0.0)
    likelihood = Categorical(2, "softmax")
    assert likelihood.predictive_approximation is None
    logit = bind(gd.likelihoods.Bernoulli("logit"), {"likelihood.bias": np.array(0.0)}, "likelihood")
    y = rng.integers(0, 2, 7).astype(float)
    ref = logit.log_predictive(mean[:, 1] - mean[:, 0], diff_var, 2 * y - 1)
    np.testing.assert_allclose(likelihood.log_predictive(mean, cov if full else var, y), ref, rtol=1e-14, atol=1e-15)
    p = likelihood.predictive(mean, cov if full else var)["p"]
    np.testing.assert_allclose(p[:, 1], np.exp(logit.log_predictive(mean[:, 1] - mean[:, 0], diff_var, np.ones(7))),
                               rtol=1e-14)
    np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-14)


@pytest.mark.parametrize("link", LINKS)
def test_sobol_predictive_rule(link):
    """The 4096-point Sobol rule (softmax and logistic-softmax; robust-max with a full covariance):
    within 2e-4 (softmax, logistic-softmax) and 2e-3 (robust-max's step) of a 2^18-point rule at
    latent variances up to 3, with correlated classes; rows sum to 1; the diagonal covariance
    gives the independent-classes answer; log_predictive is the log of the labelled p."""
    rng = np.random.default_rng(5)
    K, n = 3, 6
    mean = rng.normal(0, 1.5, (n, K))
    B = rng.normal(0, 0.6, (n, K, K))
    cov = B @ np.swapaxes(B, 1, 2) + np.eye(K) * rng.uniform(0.01, 1.0, (n, 1, 1))
    likelihood = Categorical(K, link)
    p = likelihood.predictive(mean, cov)["p"]
    E = _sobol_normals(K, 18)
    F = mean[:, None, :] + np.einsum("nkj,sj->nsk", np.linalg.cholesky(cov), E)
    ref = likelihood.class_probabilities(F).mean(axis=1)
    np.testing.assert_allclose(p, ref, rtol=0, atol=2e-3 if link == "robustmax" else 2e-4)
    np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-12)
    y = rng.integers(0, K, n).astype(float)
    np.testing.assert_allclose(likelihood.log_predictive(mean, cov, y), np.log(p[np.arange(n), y.astype(int)]),
                               rtol=1e-12)
    if link != "robustmax":
        var = np.diagonal(cov, axis1=1, axis2=2)
        diagonal = np.einsum("nk,kj->nkj", var, np.eye(K))
        np.testing.assert_allclose(likelihood.predictive(mean, diagonal)["p"], likelihood.predictive(mean, var)["p"],
                                   rtol=1e-12)


def _tied_rows(K):
    """Latent rows (n, K) with every pattern of exact ties for the largest value: all K tied, each
    pair and triple tied above the rest, and no tie; with values from -40 to 40."""
    rows = [np.zeros(K), np.full(K, 40.0), np.full(K, -40.0)]
    for m in range(1, K):
        for first in range(K):
            tied = [(first + i) % K for i in range(m)]
            row = np.linspace(-40.0, -1.0, K)
            row[tied] = 3.5
            rows.append(row)
    return np.array(rows)


@pytest.mark.parametrize("K,epsilon", [(2, 1e-3), (3, 1e-3), (5, 0.2)])
def test_robustmax_ties_share_the_largest_mass(K, epsilon):
    """Robust-max with m classes tied exactly for the largest latent value: each tied class has
    p = (1 - eps) / m + (1 - 1 / m) eps / (K - 1), every other eps / (K - 1), and both
    class_probabilities and exp(log_density) over the classes sum to 1 to 4 eps (K terms of
    size <= 1).  (Before: every tied class had 1 - eps in log_density, summing to 2.997 for
    K = 3, and class_probabilities gave all of it to the first tied class.)"""
    likelihood = Categorical(K, "robustmax", epsilon=epsilon)
    F = _tied_rows(K)
    tied = F == F.max(axis=1, keepdims=True)
    m = tied.sum(axis=1, keepdims=True)
    low = epsilon / (K - 1)
    want = np.where(tied, (1 - epsilon) / m + (1 - 1 / m) * low, low)
    p = likelihood.class_probabilities(F)
    dense = np.exp(np.column_stack([likelihood.log_density(np.full(len(F), float(k)), F) for k in range(K)]))
    for got in (p, dense):
        np.testing.assert_allclose(got, want, rtol=4 * np.finfo(float).eps)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=0, atol=4 * np.finfo(float).eps)
    assert np.any(m > 1)


def test_robustmax_without_ties_is_unchanged():
    """Without a tie, robust-max's class_probabilities and log_density are the one-hot rule's
    values exactly (1 - eps at the argmax, eps / (K - 1) elsewhere, log1p(-eps) and
    log(eps / (K - 1)) in log space): no rounding enters them."""
    K, epsilon = 4, 1e-3
    likelihood = Categorical(K, "robustmax", epsilon=epsilon)
    F = np.random.default_rng(8).normal(0.0, 20.0, (200, K))
    win = np.argmax(F, axis=1)[:, None] == np.arange(K)
    np.testing.assert_array_equal(likelihood.class_probabilities(F), np.where(win, 1 - epsilon, epsilon / (K - 1)))
    for k in range(K):
        np.testing.assert_array_equal(likelihood.log_density(np.full(200, float(k)), F),
                                      np.where(win[:, k], np.log1p(-epsilon), np.log(epsilon / (K - 1))))


@pytest.mark.parametrize("variance", [0.0, 1e-12, 1e-10])
def test_robustmax_predictive_of_tied_means_at_vanishing_variance(variance):
    """GPflow's predict_y rule at latent variances at or below its 1e-10 clip, with means tied
    exactly: the tied classes are predicted alike and the rows sum to 1 within the squash's
    K * 1e-6 (measured 1e-6 to 2e-6), as at any variance.  (With GPflow's 5e-11 clip for the
    labelled class, three classes tied at variance 0 summed to 0.912.)"""
    for K in (3, 4):
        likelihood = Categorical(K, "robustmax")
        F = _tied_rows(K)
        p = likelihood.predictive(F, np.full_like(F, variance))["p"]
        np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=K * 1e-6)
        tied = F == F.max(axis=1, keepdims=True)
        for row, mask in zip(p, tied):
            np.testing.assert_allclose(row[mask], row[mask][0], rtol=1e-12)


def test_logsumexp_matches_scipy():
    """categorical._logsumexp (no array-API dispatch) against scipy.special.logsumexp, over wide
    ranges, along either axis, with -inf entries and a row of only -inf."""
    from gpdsl.likelihoods.categorical import _logsumexp

    rng = np.random.default_rng(0)
    a = rng.normal(scale=300.0, size=(50, 7))
    a[3, 2] = -np.inf
    a[5] = -np.inf
    for axis in (0, 1, -1):
        expected = special.logsumexp(a, axis=axis)
        # Both shift by the largest entry t and sum exp(a - t) <= K in (0, K]: they differ by a few
        # ulps of |t| (the log of a sum of at most 50 terms adds a few more of 1).
        tol = 8 * np.finfo(float).eps * (np.abs(np.where(np.isfinite(expected), expected, 0.0)) + 50.0)
        got = _logsumexp(a, axis=axis)
        finite = np.isfinite(expected)
        np.testing.assert_array_equal(got[~finite], expected[~finite])
        assert np.all(np.abs(got[finite] - expected[finite]) <= tol[finite])
    assert _logsumexp(a, axis=1)[5] == -np.inf
    F = rng.normal(size=(4, 6, 3))
    np.testing.assert_allclose(_logsumexp(F, axis=-1), special.logsumexp(F, axis=-1), rtol=0, atol=1e-14)
    # Edges as scipy: +inf, NaN, integers.
    edges = np.array([[np.inf, 800.0], [np.nan, 1.0], [-np.inf, 2.0]])
    np.testing.assert_array_equal(_logsumexp(edges, axis=1), special.logsumexp(edges, axis=1))
    ints = np.array([[1, 2, 3], [700, 701, 702]])
    np.testing.assert_allclose(_logsumexp(ints, axis=1), special.logsumexp(ints, axis=1), rtol=1e-15)
