"""Whitened SVGP with K latent GPs (gpdsl.methods.svgp with a Categorical likelihood) against
GPflow 2.11's SVGP with ``MultiClass(3, RobustMax(1e-3))`` on iris
(../shared/oracles/gpflow/multiclass_iris.json), central differences of every gradient for each
link, the natural-gradient q updates and the minibatch step."""
import json

import numpy as np
import pytest

import gpdsl as gd
from gpdsl.likelihoods.categorical import LINKS, Categorical
from gpdsl.methods import common, stochastic, svgp, svgp_classes

from conftest import shared_path
from naive import bound_pair, central_difference

SE = gd.kernels.SquaredExponential
GPFLOW_JITTER = 1e-6 / 2.0       # GPflow adds 1e-6 to K_uu; gpdsl's jitter is relative to mean(diag K_uu) = 2


class Categorical100(Categorical):
    """GPflow's MultiClass with num_gauss_hermite_points=100 (the oracle's second rule)."""

    quadrature_points = 100


class Categorical20(Categorical):
    """GPflow's MultiClass at its default num_gauss_hermite_points=20, in its predictions too."""

    prediction_points = 20


def _predict_f(kernel, state, Xs):
    """Per-class latent means and variances (n, K) from a K-class PredictiveState, written out:
    mean_k = b^T weights[:, k], var_k = k_** - b^T correction[k] b."""
    b = state.basis(kernel.gram(state.Z, Xs))
    return b.T @ state.weights, kernel.diag(Xs)[:, None] - np.einsum("mn,kmj,jn->nk", b, state.correction, b)


# -- the GPflow oracle ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def oracle():
    root = shared_path("oracles")
    data = json.loads((root / "gpflow" / "multiclass_iris.json").read_text())
    iris = np.loadtxt(root / "data" / "iris_std.csv", delimiter=",")        # x1..x4, label
    s = data["settings"]
    # GPflow's q_sqrt (K, M, M) lower-triangular: row k of ours is its packed lower triangle.
    values = {"kernel.lengthscale": np.array(1.3), "kernel.variance": np.array(2.0),
              "variational.q_mu": np.array(s["q_mu"]),
              "variational.q_sqrt": np.stack([svgp.pack_lower(np.array(R)) for R in s["q_sqrt_lower"]])}
    return data["results"], iris[:, :4], iris[:, 4], values


@pytest.mark.parametrize("rule, likelihood", [("robustmax_gh20", Categorical20(3, "robustmax")),
                                              ("robustmax_gh100", Categorical100(3, "robustmax"))])
def test_gpflow_multiclass_robustmax(oracle, rule, likelihood):
    """ELBO, KL and expected log likelihood, predict_f and predict_y at the oracle's fixed q, each
    to 1e-10 (measured: 7e-13 absolute on the ELBO of -811, 5e-14 on the latent moments, 7e-15 on
    the probabilities)."""
    res, X, y, values = oracle
    ref = res[rule]
    kernel, bound = bound_pair(SE(1.3, 2.0), likelihood, values)
    Z, Xs = X[:12], X[::15]
    terms = svgp.elbo_terms(kernel, bound, values, X, y, Z, jitter=GPFLOW_JITTER)
    assert terms.elbo == pytest.approx(ref["elbo"], rel=1e-12, abs=1e-10)
    assert terms.kl == pytest.approx(ref["kl"], rel=1e-12, abs=1e-10)
    assert terms.expected_log_lik == pytest.approx(ref["expected_log_lik"], rel=1e-12, abs=1e-10)
    ev = svgp.evaluate(kernel, bound, values, X, y, Z, jitter=GPFLOW_JITTER, need_grad=False, need_state=True)
    assert ev.log_evidence == terms.elbo
    assert ev.state.weights.shape == (12, 3) and ev.state.correction.shape == (3, 12, 12)
    mean, var = _predict_f(kernel, ev.state, Xs)
    np.testing.assert_allclose(mean, ref["f_mean"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(var, ref["f_var"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(bound.predictive(mean, var)["p"], ref["p_y"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(bound.predictive(np.array(ref["f_mean"]), np.array(ref["f_var"]))["p"], ref["p_y"],
                               rtol=0, atol=1e-14)
    codes = np.argmax(ref["p_y"], axis=1).astype(float)
    np.testing.assert_allclose(bound.log_predictive(mean, var, codes),
                               np.log(np.max(ref["p_y"], axis=1)), rtol=0, atol=1e-10)


# -- small random problems ------------------------------------------------------------------------
def _problem(link, seed=0, n=30, m=6, K=3, variance=1.4):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    scores = np.column_stack([np.sin(2 * X[:, 0]), X[:, 1], -X[:, 0] * X[:, 1]])[:, :K]
    y = np.argmax(scores + 0.4 * rng.standard_normal((n, K)), axis=1).astype(float)
    Z = X[:m] + 0.1 * rng.standard_normal((m, 2))
    R = np.tril(0.3 * rng.standard_normal((K, m, m)))
    idx = np.arange(m)
    R[:, idx, idx] = np.abs(R[:, idx, idx]) + 0.4
    R[1, 2, 2] *= -1.0                       # log|S_k| takes |R_ii|: a negative diagonal entry is allowed
    q = {"variational.q_mu": rng.standard_normal((m, K)),
         "variational.q_sqrt": np.stack([svgp.pack_lower(R_k) for R_k in R])}
    kernel = SE(np.array([0.8, 1.3]), variance)
    values = {"kernel.lengthscale": np.array([0.8, 1.3]), "kernel.variance": np.array(variance), **q}
    if link == "robustmax":               # its one hyperparameter, away from its start 1e-3
        values["likelihood.epsilon"] = np.array(0.05)
    return kernel, Categorical(K, link), values, X, y, Z


@pytest.mark.parametrize("link", LINKS)
def test_gradients_match_central_differences(link):
    """d ELBO / d q_mu (M, K), q_sqrt (K, M (M + 1) / 2), the kernel's hyperparameters (summed over
    the classes), robust-max's epsilon and Z against central differences of the bound (rtol 1e-6,
    atol 1e-7; chunked in 7 rows)."""
    kernel, likelihood, values, X, y, Z = _problem(link)
    ev = svgp.evaluate(*bound_pair(kernel, likelihood, values), values, X, y, Z, jitter=1e-6, chunk_size=7)
    assert ev.grads["variational.q_mu"].shape == (6, 3) and ev.grads["variational.q_sqrt"].shape == (3, 21)
    _assert_central_differences(ev, kernel, likelihood, values, X, y, Z)


def _assert_central_differences(ev, kernel, likelihood, values, X, y, Z):
    """``ev``'s gradient in every entry of ``values`` and in Z against central differences of the
    bound (rtol 1e-6, atol 1e-7)."""
    assert set(ev.grads) == set(values)

    def objective(vals, Zz):
        return svgp.evaluate(*bound_pair(kernel, likelihood, vals), vals, X, y, Zz, jitter=1e-6,
                             need_grad=False).log_evidence

    for name, value in values.items():
        fd = central_difference(lambda v: objective({**values, name: v}, Z), value)
        np.testing.assert_allclose(ev.grads[name], fd, rtol=1e-6, atol=1e-7, err_msg=name)
    np.testing.assert_allclose(ev.dZ, central_difference(lambda Zz: objective(values, Zz), Z), rtol=1e-6, atol=1e-7,
                               err_msg="Z")


def test_bound_state_and_pseudo_data_are_the_classes_marginals():
    """The ELBO is sum_n ve_n (at the marginals the predictive state gives at X) - sum_k KL_k; the
    pseudo-data are the conjugate sites per class; chunking changes nothing beyond rounding."""
    kernel, likelihood, values, X, y, Z = _problem("softmax")
    bk, bl = bound_pair(kernel, likelihood, values)
    ev = svgp.evaluate(bk, bl, values, X, y, Z, jitter=1e-6, need_state=True)
    M = Z.shape[0]
    L = ev.state.chol
    mean, var = _predict_f(bk, ev.state, X)
    ve, g, d, _ = bl.variational_expectations(y, mean, var)
    kl = 0.0
    for k in range(3):
        R = svgp.unpack_lower(values["variational.q_sqrt"][k], M)
        m = values["variational.q_mu"][:, k]
        S = R @ R.T
        kl += 0.5 * (np.trace(S) + m @ m - M - np.linalg.slogdet(S)[1])
        np.testing.assert_allclose(ev.state.q_mean[:, k], L @ m, rtol=1e-12)
        np.testing.assert_allclose(ev.state.q_cov[k], L @ S @ L.T, rtol=1e-12, atol=1e-14)
    assert ev.log_evidence == pytest.approx(np.sum(ve) - kl, rel=1e-12)
    w = np.maximum(-2.0 * d, 0.0)
    np.testing.assert_allclose(ev.pseudo_data[0], w, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(ev.pseudo_data[1], g + w * mean, rtol=1e-10, atol=1e-12)
    for chunk in (1, 7):
        other = svgp.evaluate(bk, bl, values, X, y, Z, jitter=1e-6, chunk_size=chunk)
        assert other.log_evidence == pytest.approx(ev.log_evidence, rel=1e-13)
        for name in values:
            np.testing.assert_allclose(other.grads[name], ev.grads[name], rtol=1e-11, atol=1e-13, err_msg=name)


def test_shapes_offsets_and_initial_values():
    kernel, likelihood, values, X, y, Z = _problem("robustmax")
    start = svgp.initial_values(6, 3)
    assert start["variational.q_mu"].shape == (6, 3) and start["variational.q_sqrt"].shape == (3, 21)
    terms = svgp.elbo_terms(*bound_pair(kernel, likelihood, values), {**values, **start}, X, y, Z, jitter=1e-6)
    assert terms.kl == 0.0
    with pytest.raises(ValueError, match="offset"):
        svgp.evaluate(*bound_pair(kernel, likelihood, values), values, X, y, Z, offset=np.zeros(X.shape[0]))
    with pytest.raises(ValueError, match="q_mu"):
        svgp.evaluate(*bound_pair(kernel, likelihood, values), {**values, "variational.q_mu": np.zeros(6)}, X, y, Z)
    with pytest.raises(ValueError, match="q_sqrt"):
        svgp.evaluate(*bound_pair(kernel, likelihood, values), {**values, "variational.q_sqrt": np.zeros(21)}, X, y, Z)


@pytest.mark.parametrize("link, seed, most", [("softmax", 0, 50), ("logistic_softmax", 0, 50), ("robustmax", 1, 120)])
def test_optimise_q_reaches_a_stationary_point_monotonically(link, seed, most):
    """From the prior, damped natural-gradient steps (one step size for all classes) converge to
    a q whose gradient (evaluate's) is below 1e-6, and the bound never decreases along them.

    Steps taken (polished, tol 1e-12; with Anderson's extrapolation, the plain damped steps' in
    brackets, test below): logistic-softmax 14 (28), softmax 17 (24); robust-max, plain steps, 62
    (not log-concave: sites of negative precision, and a bound nearly flat where the labelled
    latent dominates).  Softmax and robust-max centre q's class mean (test below): uncentred, the
    per-class sites miss the direction that shifts all classes together, which contracted slowly
    (softmax 36 (88), robust-max 325 here and 2,724 on seed 0), hence the caps."""
    kernel, likelihood, values, X, y, Z = _problem(link, seed=seed, n=40, m=8)
    hyper = {k: v for k, v in values.items() if k.startswith("kernel.")}
    bk, bl = bound_pair(kernel, likelihood, hyper)
    q, steps, converged = svgp.optimise_q(bk, bl, hyper, X, y, Z, jitter=1e-8, tol=1e-12, polish=True, max_iter=most)
    assert converged and 1 < steps < most
    ev = svgp.evaluate(bk, bl, {**hyper, **q}, X, y, Z, jitter=1e-8)
    for name in q:
        np.testing.assert_allclose(ev.grads[name], 0.0, atol=1e-6, err_msg=name)
    bounds = [svgp.elbo_terms(bk, bl, {**hyper, **svgp.initial_values(8, 3)}, X, y, Z, jitter=1e-8).elbo]
    for k in range(1, min(steps, 8) + 1):
        qk, sk, _ = svgp.optimise_q(bk, bl, hyper, X, y, Z, jitter=1e-8, tol=1e-12, max_iter=k)
        assert sk == k
        bounds.append(svgp.elbo_terms(bk, bl, {**hyper, **qk}, X, y, Z, jitter=1e-8).elbo)
    assert np.all(np.diff(bounds) >= 0.0)
    # A warm start at the optimum stays there.
    warm, warm_steps, warm_converged = svgp.optimise_q(bk, bl, {**hyper, **q}, X, y, Z, jitter=1e-8, tol=1e-12)
    assert warm_converged and warm_steps <= 1


@pytest.mark.parametrize("link, fewest", [("softmax", 1.25), ("logistic_softmax", 1.5)])
def test_extrapolated_natural_steps_reach_the_plain_steps_fixed_point(link, fewest, monkeypatch):
    """Anderson's extrapolation of the damped natural steps (``damped_natural_steps``) changes the
    path, not the fixed point: polished to tol 1e-12 from the prior, the bound equals the plain
    steps' (``NATGRAD_ANDERSON_MEMORY`` 0) to 1e-9 nats and q to 2e-6 (both runs' q gradients are
    below 1e-6, the test above), in at most 1 / ``fewest`` of the plain steps.  Measured: softmax
    17 against 24 (with its class mean centred; 36 against 88 without), logistic-softmax 14
    against 28."""
    kernel, likelihood, values, X, y, Z = _problem(link, seed=0, n=40, m=8)
    hyper = {k: v for k, v in values.items() if k.startswith("kernel.")}
    bk, bl = bound_pair(kernel, likelihood, hyper)
    assert common.extrapolates(bl)
    runs = {}
    for memory in (common.NATGRAD_ANDERSON_MEMORY, 0):
        monkeypatch.setattr(common, "NATGRAD_ANDERSON_MEMORY", memory)
        q, steps, converged = svgp.optimise_q(bk, bl, hyper, X, y, Z, jitter=1e-8, tol=1e-12, polish=True,
                                              max_iter=5000)
        assert converged
        runs[memory] = (q, steps, svgp.elbo_terms(bk, bl, {**hyper, **q}, X, y, Z, jitter=1e-8).elbo)
    (q, steps, bound), (q_plain, steps_plain, bound_plain) = runs.values()
    assert bound == pytest.approx(bound_plain, rel=0, abs=1e-9)
    for name in q:
        np.testing.assert_allclose(q[name], q_plain[name], rtol=0, atol=2e-6, err_msg=name)
    assert steps * fewest <= steps_plain


def test_robustmax_keeps_the_plain_natural_steps(monkeypatch):
    """Robust-max says it is not log-concave, so its natural steps are not extrapolated
    (``common.extrapolates``): the same q, bit for bit, whatever the extrapolation's memory."""
    kernel, likelihood, values, X, y, Z = _problem("robustmax", seed=1, n=40, m=8)
    hyper = {k: v for k, v in values.items() if k.startswith("kernel.")}
    bk, bl = bound_pair(kernel, likelihood, hyper)
    assert not common.extrapolates(bl) and common.extrapolates(Categorical(3, "softmax"))
    runs = []
    for memory in (common.NATGRAD_ANDERSON_MEMORY, 0):
        monkeypatch.setattr(common, "NATGRAD_ANDERSON_MEMORY", memory)
        runs.append(svgp.optimise_q(bk, bl, hyper, X, y, Z, jitter=1e-8, tol=1e-12, polish=True, max_iter=400))
    (q, steps, _), (q_plain, steps_plain, _) = runs
    assert steps == steps_plain
    for name in q:
        np.testing.assert_array_equal(q[name], q_plain[name])


@pytest.mark.parametrize("link", ["softmax", "robustmax", "logistic_softmax"])
def test_shift_invariance_is_what_the_expectations_do(link):
    """``shift_invariant`` says what the variational expectations do: softmax's (its Jensen bound)
    and robust-max's are unchanged, to 1e-12, by one value per row added to every class's mean,
    and their mean derivatives sum to 0 over the classes; logistic-softmax's change.  A subclass
    with a density of its own does not inherit the property."""
    rng = np.random.default_rng(5)
    mean, var = rng.normal(0.0, 1.5, (20, 3)), rng.uniform(0.05, 2.0, (20, 3))
    y = (np.arange(20) % 3).astype(float)
    likelihood = Categorical(3, link)
    ve, d_mean, _, _ = likelihood.variational_expectations(y, mean, var)
    moved = likelihood.variational_expectations(y, mean + rng.normal(0.0, 2.0, (20, 1)), var)[0]
    assert likelihood.shift_invariant == (link != "logistic_softmax")
    if likelihood.shift_invariant:
        np.testing.assert_allclose(moved, ve, rtol=0, atol=1e-12)
        np.testing.assert_allclose(d_mean.sum(axis=1), 0.0, rtol=0, atol=1e-12)
    else:
        assert np.max(np.abs(moved - ve)) > 1e-2

    class Tempered(Categorical):
        def log_density(self, y, f):
            return super().log_density(y, 0.5 * np.asarray(f))

    assert Tempered(3, link).shift_invariant is False

    class Biased(Categorical):
        """The review's case: its own bound, which a common shift of the classes changes."""

        def variational_expectations(self, y, mean, var):
            ve, *rest = super().variational_expectations(y, mean, var)
            return (ve + 0.5 * np.asarray(mean)[:, 0], *rest)

    assert Biased(3, link).shift_invariant is False


@pytest.mark.parametrize("link", LINKS)
def test_only_robustmax_bound_and_predictive_ignore_the_kernel_variance(link):
    """``scale_invariant`` says what the bound does: at fixed whitened q the robust-max ELBO (its data
    term and KL) and its predictive class probabilities are the same at the kernel variances 1.4 and
    1.4 x 37 to 1e-10 relative (each latent mean scales by sqrt(37), each variance by 37, and only the
    largest f_k counts); softmax's and logistic-softmax's move by more than 1e-3.  A subclass with its
    own bound does not inherit the property."""
    kernel, likelihood, values, X, y, Z = _problem(link)
    assert likelihood.scale_invariant == (link == "robustmax")
    runs = []
    for scale in (1.0, 37.0):
        scaled = {**values, "kernel.variance": np.array(1.4 * scale)}
        bk, bl = bound_pair(SE(np.array([0.8, 1.3]), 1.4 * scale), likelihood, scaled)
        terms = svgp.elbo_terms(bk, bl, scaled, X, y, Z, jitter=1e-6)
        state = svgp.state_at(bk, bl, scaled, Z, jitter=1e-6)[0]
        mean, var = state.moments(state.basis(bk.gram(Z, X)), bk.diag(X))
        runs.append((terms.elbo, bl.predictive(mean, var)["p"]))
    (bound, p), (bound_scaled, p_scaled) = runs
    if likelihood.scale_invariant:
        assert bound_scaled == pytest.approx(bound, rel=1e-10)
        np.testing.assert_allclose(p_scaled, p, rtol=1e-10, atol=1e-13)
    else:
        assert abs(bound_scaled - bound) > 1e-3

    class Biased(Categorical):
        def variational_expectations(self, y, mean, var):
            ve, *rest = super().variational_expectations(y, mean, var)
            return (ve + 0.5 * np.asarray(mean)[:, 0], *rest)

    assert Biased(3, link).scale_invariant is False


def test_robustmax_ridge_warning_names_the_unidentified_variance():
    """The fit's ridge warning under robust-max names the kernel variance the bound cannot see and
    how to hold it; softmax keeps the separable-classes cause."""
    assert "not identified" in Categorical(3, "robustmax").ridge_cause
    assert "gd.Fixed(1.0)" in Categorical(3, "robustmax").ridge_cause
    assert "separable" in Categorical(3, "softmax").ridge_cause


def test_one_kernel_a_class_is_not_centred():
    """centres: a kernel a class (Separate, n_outputs = K) sees a common shift of the classes'
    whitened means (each class its own projection), so q is not centred there; one shared kernel is."""
    centres = svgp_classes.centres
    shared = gd.kernels.SquaredExponential()
    separate = gd.kernels.Separate(tuple(gd.kernels.SquaredExponential() for _ in range(3)))
    assert separate.n_outputs == 3
    assert centres(shared, Categorical(3, "softmax"), 3)
    assert not centres(separate, Categorical(3, "softmax"), 3)
    assert not centres(shared, Categorical(3, "logistic_softmax"), 3)
    assert not centres(shared, Categorical(3, "softmax"), 1)


@pytest.mark.parametrize("link, fewest", [("softmax", 1.5), ("robustmax", 10.0)])
def test_centred_natural_steps_reach_the_uncentred_fixed_point(link, fewest, monkeypatch):
    """Centring q's class mean (``optimise_q``, for a shift-invariant likelihood under a shared
    kernel) changes the steps' path, not their fixed point: polished to tol 1e-12 from the prior's
    q with 2 added to every mean, the bound equals the uncentred steps' (``shift_invariant`` off)
    to 1e-9 nats and q to 5e-6, the centred q's class mean is 0 to rounding, in at most 1 /
    ``fewest`` of the steps.  Measured: softmax 17 against 32 (extrapolated), robust-max 78
    against 3,013; bounds within 2e-12, q within 1e-6."""
    kernel, likelihood, values, X, y, Z = _problem(link, seed=0, n=40, m=8)
    hyper = {k: v for k, v in values.items() if k.startswith("kernel.")}
    bk, bl = bound_pair(kernel, likelihood, hyper)
    start = svgp.initial_values(8, 3)
    start["variational.q_mu"] = start["variational.q_mu"] + 2.0
    runs = []
    for invariant in (True, False):
        monkeypatch.setattr(Categorical, "shift_invariant", invariant)
        q, steps, converged = svgp.optimise_q(bk, bl, hyper, X, y, Z, start, jitter=1e-8, tol=1e-12, polish=True,
                                              max_iter=5000)
        assert converged
        runs.append((q, steps, svgp.elbo_terms(bk, bl, {**hyper, **q}, X, y, Z, jitter=1e-8).elbo))
    (q, steps, bound), (q_plain, steps_plain, bound_plain) = runs
    assert bound == pytest.approx(bound_plain, rel=0, abs=1e-9)
    for name in q:
        np.testing.assert_allclose(q[name], q_plain[name], rtol=0, atol=5e-6, err_msg=name)
    np.testing.assert_allclose(q["variational.q_mu"].mean(axis=1), 0.0, rtol=0, atol=1e-15)
    assert steps * fewest <= steps_plain


@pytest.mark.parametrize("link", LINKS)
def test_centring_keeps_the_data_term_and_lowers_the_kl_by_its_formula(link):
    """The bound at q and at q with its class mean taken out (svgp_classes.centred), written out:
    for softmax and robust-max under a shared kernel (``centres``) the expected log-likelihood is
    the same to 1e-12 relative, on all rows and on a batch's estimate (10 of 30 rows, scale 3),
    and the KL is lower by K |mbar|^2 / 2, mbar = mean_k m_k (sum_k |m_k - mbar|^2 = sum_k |m_k|^2
    - K |mbar|^2), to 1e-10; the centred q's natural parameters are those of (centred m, R).
    Logistic-softmax's data term sees the shift (``centres`` False)."""
    kernel, likelihood, values, X, y, Z = _problem(link)
    bk, bl = bound_pair(kernel, likelihood, values)
    q = svgp.CarriedQ.of(values, Z.shape[0], 3)
    natural = svgp_classes.natural(q.m, q.R)
    m_c, natural_c = svgp_classes.centred(q.m, natural)
    mbar = q.m.mean(axis=1)
    np.testing.assert_allclose(m_c, q.m - mbar[:, None], rtol=0, atol=1e-15)
    for got, want in zip(natural_c, svgp_classes.natural(m_c, q.R)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    centred_values = {**values, **svgp.CarriedQ(m_c, q.R).as_dict()}
    before, after = (svgp.elbo_terms(bk, bl, v, X, y, Z, jitter=1e-6) for v in (values, centred_values))
    assert svgp_classes.centres(bk, bl, 3) == (link != "logistic_softmax")
    rows = np.arange(0, 30, 3)
    estimates = [stochastic.batch_gradient(bk, bl, X[rows], y[rows], Z, state, scale=3.0, jitter=1e-6)[0]
                 for state in (q, svgp.CarriedQ(m_c, q.R))]
    if link == "logistic_softmax":
        assert abs(after.expected_log_lik - before.expected_log_lik) > 1e-2
        return
    assert after.expected_log_lik == pytest.approx(before.expected_log_lik, rel=1e-12)
    assert before.kl - after.kl == pytest.approx(3 * mbar @ mbar / 2.0, rel=1e-10)
    assert estimates[1] - estimates[0] == pytest.approx(3 * mbar @ mbar / 2.0, rel=1e-10)


@pytest.mark.parametrize("one_pass", [False, True])
@pytest.mark.parametrize("link", ["softmax", "robustmax"])
def test_the_minibatch_step_centres_the_q_it_reaches(link, one_pass, monkeypatch):
    """From a centred q, minibatch_update's step is the uncentred step's (``shift_invariant`` off)
    with the class mean mbar of the q it reached taken out by hand: m_k - mbar, S_k^-1 m_k -
    S_k^-1 mbar, R the same (1e-12); the estimate at the new q (``one_pass`` False) higher by
    K |mbar|^2 / 2, at the starting one (``one_pass``) the same; the hyperparameters' and Z's
    gradients the same (the data term ignores the shift, the KL has no hyperparameters)."""
    kernel, likelihood, values, X, y, Z = _problem(link)
    bk, bl = bound_pair(kernel, likelihood, values)
    q = svgp.CarriedQ.of(values, Z.shape[0], 3)
    start = q._replace(m=svgp_classes.centred(q.m)[0])
    runs = []
    for invariant in (False, True):
        monkeypatch.setattr(Categorical, "shift_invariant", invariant)
        runs.append(svgp.minibatch_update(bk, bl, X[:12], y[:12], Z, start, scale=2.5, rho=0.3, jitter=1e-6,
                                          one_pass=one_pass))
    (plain, elbo_plain, grads_plain, dZ_plain, _), (moved, elbo, grads, dZ, _) = runs
    mbar = plain.m.mean(axis=1)
    assert np.max(np.abs(mbar)) > 1e-3                    # the step moved the class mean
    np.testing.assert_allclose(moved.m, plain.m - mbar[:, None], rtol=0, atol=1e-12)
    np.testing.assert_allclose(moved.R, plain.R, rtol=0, atol=1e-12)
    np.testing.assert_allclose(moved.natural[0], plain.natural[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(moved.natural[1], plain.natural[1] - plain.natural[0] @ mbar, rtol=1e-12, atol=1e-12)
    assert elbo - elbo_plain == pytest.approx(0.0 if one_pass else 3 * mbar @ mbar / 2.0, rel=1e-9, abs=1e-9)
    for name in grads:
        np.testing.assert_allclose(grads[name], grads_plain[name], rtol=1e-9, atol=1e-9, err_msg=name)
    np.testing.assert_allclose(dZ, dZ_plain, rtol=1e-9, atol=1e-9)


class _ClippedCurvature:
    """A likelihood whose dE/dvar is capped at 0: its conjugate sites are the minibatch step's
    clipped ones, w = max(-2 dE/dvar, 0)."""

    def __init__(self, likelihood):
        # Capping dE/dvar keeps a shift-invariant likelihood's terms invariant: centred as the step is.
        self.likelihood, self.n_latent = likelihood, likelihood.n_latent
        self.shift_invariant = likelihood.shift_invariant

    def for_rows(self, X):
        # The same density at every row (the likelihood interface's hook, which SVGP's pass calls).
        return self

    def variational_expectations(self, y, mean, var):
        ve, g, d, grads = self.likelihood.variational_expectations(y, mean, var)
        return ve, g, np.minimum(d, 0.0), grads


@pytest.mark.parametrize("one_pass", [False, True])
@pytest.mark.parametrize("link", ["softmax", "logistic_softmax"])
def test_minibatch_step_on_the_whole_batch(one_pass, link):
    """With the whole batch, scale 1: the step is optimise_q's first step of size rho on the sites
    with their precisions clipped at 0 (softmax: log-concave, nothing to clip, q's class mean
    centred before and after as both centre it; logistic softmax: some dE/dvar > 0 here), and its
    estimate and gradients are evaluate's (at the new q, or with ``one_pass`` at the old one,
    centred)."""
    kernel, likelihood, values, X, y, Z = _problem(link)
    bk, bl = bound_pair(kernel, likelihood, values)
    q0 = {k: values[k] for k in ("variational.q_mu", "variational.q_sqrt")}
    q, elbo, grads, dZ, jit = svgp.minibatch_step(bk, bl, X, y, Z, q0, scale=1.0, rho=1.0, jitter=1e-6,
                                                  one_pass=one_pass)
    clipped = _ClippedCurvature(bl)
    ref_q, steps, _ = svgp.optimise_q(bk, clipped, values, X, y, Z, q0, jitter=1e-6, max_iter=1)
    state = svgp.evaluate(bk, bl, values, X, y, Z, jitter=1e-6, need_state=True).state
    d = bl.variational_expectations(y, *_predict_f(bk, state, X))[2]
    assert (np.max(d) > 0.0) == (link == "logistic_softmax")
    if steps == 1:                            # the full step raised the bound, so optimise_q took it
        for name in q:
            np.testing.assert_allclose(q[name], ref_q[name], rtol=1e-10, atol=1e-12, err_msg=name)
    # The step starts from q0 with its class mean taken out where it centres (softmax).
    start = svgp.CarriedQ.of(q0, Z.shape[0], 3)
    start = start._replace(m=svgp_classes.centred(start.m)[0]) if link == "softmax" else start
    ev = svgp.evaluate(bk, bl, {**values, **(start.as_dict() if one_pass else q)}, X, y, Z, jitter=1e-6)
    assert jit == ev.jitter and elbo == pytest.approx(ev.log_evidence, rel=1e-12)
    assert set(grads) == {"kernel.lengthscale", "kernel.variance"}
    for name in grads:
        np.testing.assert_allclose(grads[name], ev.grads[name], rtol=1e-10, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(dZ, ev.dZ, rtol=1e-10, atol=1e-12)


# -- one kernel per latent function (gd.kernels.Separate) -------------------------------------------
def _separate_problem(link, parts=None):
    """_problem's data and q with a Separate kernel: by default three different parts (ARD SE,
    Matern 5/2, isotropic SE), each class its own K_uu."""
    _, likelihood, values, X, y, Z = _problem(link)
    parts = parts or (SE(np.array([0.8, 1.3]), 1.4), gd.kernels.Matern52(0.9, 0.7), SE(1.6, 2.1))
    kernel = gd.kernels.Separate(parts)
    values = {**{f"kernel.{p.name}": e.value for p, e in zip(kernel.parameters(X), kernel.entries("c", X))},
              **{k: v for k, v in values.items() if k.startswith(("variational.", "likelihood."))}}
    return kernel, likelihood, values, X, y, Z


@pytest.mark.parametrize("link", ["softmax", "robustmax"])
def test_separate_kernels_gradients_match_central_differences(link):
    """With one kernel per class, d ELBO / d every part's hyperparameters, q and Z against central
    differences (rtol 1e-6, atol 1e-7), chunked in 7 rows; the predictive state holds one factor
    per class, L_k L_k^T = K^k_uu + jitter."""
    kernel, likelihood, values, X, y, Z = _separate_problem(link)
    bk, bl = bound_pair(kernel, likelihood, values)
    ev = svgp.evaluate(bk, bl, values, X, y, Z, jitter=1e-6, chunk_size=7, need_state=True)
    assert "kernel.1.lengthscale" in ev.grads
    Kuu = bk.gram(Z, Z)
    assert ev.state.chol.shape == (3, 6, 6)
    for k in range(3):
        jittered = Kuu[k] + 1e-6 * np.mean(np.diag(Kuu[k])) * np.eye(6)
        np.testing.assert_allclose(ev.state.chol[k] @ ev.state.chol[k].T, jittered, rtol=1e-12, atol=1e-14)
    _assert_central_differences(ev, kernel, likelihood, values, X, y, Z)


def test_separate_copies_of_one_kernel_are_the_shared_kernel():
    """Separate((k, k, k)) is k shared by the three classes: the same bound, q gradients and dZ,
    and each shared hyperparameter's gradient is the sum of the parts' (rtol 1e-12); the
    minibatch step moves q alike."""
    shared_kernel, likelihood, values, X, y, Z = _problem("logistic_softmax")
    kernel, _, sep_values, _, _, _ = _separate_problem("logistic_softmax", parts=(shared_kernel,) * 3)
    shared = svgp.evaluate(*bound_pair(shared_kernel, likelihood, values), values, X, y, Z, jitter=1e-6)
    separate = svgp.evaluate(*bound_pair(kernel, likelihood, sep_values), sep_values, X, y, Z, jitter=1e-6)
    assert separate.log_evidence == pytest.approx(shared.log_evidence, rel=1e-12)
    for name in ("variational.q_mu", "variational.q_sqrt"):
        np.testing.assert_allclose(separate.grads[name], shared.grads[name], rtol=1e-12, atol=1e-13, err_msg=name)
    for field in ("lengthscale", "variance"):
        total = sum(separate.grads[f"kernel.{k}.{field}"] for k in range(3))
        np.testing.assert_allclose(total, shared.grads[f"kernel.{field}"], rtol=1e-12, err_msg=field)
    np.testing.assert_allclose(separate.dZ, shared.dZ, rtol=1e-12, atol=1e-13)
    q0 = {k: values[k] for k in ("variational.q_mu", "variational.q_sqrt")}
    q_shared = svgp.minibatch_step(*bound_pair(shared_kernel, likelihood, values), X, y, Z, q0, scale=2.0, rho=0.5,
                                   jitter=1e-6)[0]
    q_sep = svgp.minibatch_step(*bound_pair(kernel, likelihood, sep_values), X, y, Z, q0, scale=2.0, rho=0.5,
                                jitter=1e-6)[0]
    for name in q0:
        np.testing.assert_allclose(q_sep[name], q_shared[name], rtol=1e-11, atol=1e-12, err_msg=name)


def test_separate_kernels_fit_predict_and_round_trip(tmp_path):
    """An SVGP fit with one kernel per class learns different hyperparameters per class, predicts
    through each class's own basis (predict_f against the state's formula per class, rtol 1e-10)
    and saves and loads bit for bit."""
    _, _, _, X, y, Z = _problem("softmax", n=60)
    kernel = gd.kernels.Separate((SE(1.0, 1.0), SE(1.0, 1.0), SE(1.0, 1.0)))
    model = gd.Model(kernel, Categorical(3), gd.inducing.Fixed(Z), gd.inference.SVGP())
    post = model.fit(X, y.astype(int), max_iter=30)
    ls = [float(post.values[f"kernel.{k}.lengthscale"]) for k in range(3)]
    assert len(set(np.round(ls, 6))) == 3
    Xs = X[:5] + 0.05
    mean, var = post.predict_f(Xs)
    bk = post.model.kernel.bind({k[7:]: v for k, v in post.values.items() if k.startswith("kernel.")})
    Kzs, kss = bk.gram(Z, Xs), bk.diag(Xs)
    state = post.state
    for k in range(3):
        b = np.linalg.solve(state.chol[k], Kzs[k])
        np.testing.assert_allclose(mean[:, k], b.T @ state.weights[:, k], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(var[:, k], kss[k] - np.einsum("mn,mp,pn->n", b, state.correction[k], b),
                                   rtol=1e-10, atol=1e-12)
    post.save(tmp_path / "post.nc")
    back = gd.load(tmp_path / "post.nc")
    np.testing.assert_array_equal(back.predict(Xs)["p"].values, post.predict(Xs)["p"].values)
