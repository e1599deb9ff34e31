"""The minibatch step rules of issue 46 against their derivations on small problems.

Where the likelihood is not log-concave (robust-max) a minibatch SVGP run moves q by Adam steps
along the batch's gradient in q's parameters (``SVGP(q_steps="auto")``, the default;
:func:`gpdsl.methods.stochastic.q_steps`), as GPflow's SVGP does, rather than by natural steps:
the gradient those steps follow (:func:`gpdsl.methods.stochastic.batch_gradient`) is checked
against finite differences of the batch's own estimate of the bound, the Adam update against
Kingma & Ba's algorithm, and the dispatch against the likelihood's ``log_concave``.
"""
import re

import numpy as np
import pytest

import gpdsl as gd
from gpdsl.methods import stochastic, svgp, svgp_classes


def _classes(n=10, K=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n, 2))
    return X, rng.integers(0, K, size=n).astype(float), X[:4] + 0.1


def _random_q(rng, M, K):
    R = np.tril(0.2 * rng.standard_normal((K, M, M)), -1) + np.eye(M) * rng.uniform(0.5, 1.0, (K, 1, M))
    return svgp.CarriedQ(0.5 * rng.standard_normal((M, K)), R)


@pytest.mark.parametrize("link", ["robustmax", "softmax"])
def test_the_first_order_q_gradient_is_the_batch_estimates_gradient(link):
    """stochastic.batch_gradient's q entries (what the Adam steps on q follow) against central
    differences of its own estimate scale E_batch - KL over every entry of q_mu and the packed
    q_sqrt, at a random q, 10 rows standing for 70 (scale 7): steps of 1e-5 on an estimate of
    ~1e2 leave a truncation error ~1e-10 and a rounding error ~1e-16 * 1e2 / 1e-5 = 1e-9
    relative to the entries (~1 to 10): rtol 1e-6, atol 1e-6.  Its estimate is that of the
    one-pass natural step at the same q with its class mean taken out (which that step centres),
    its hyperparameter gradients that step's (the same pass), to rounding."""
    rng = np.random.default_rng(3)
    X, y, Z = _classes()
    kernel, likelihood = gd.kernels.SquaredExponential(1.3, 0.8), gd.likelihoods.Categorical(3, link)
    state = _random_q(rng, Z.shape[0], 3)
    elbo, grads, dZ, q_grads, _ = stochastic.batch_gradient(kernel, likelihood, X, y, Z, state, scale=7.0,
                                                            jitter=1e-8)
    _, elbo_natural, grads_natural, dZ_natural, _ = svgp.minibatch_update(kernel, likelihood, X, y, Z, state,
                                                                          scale=7.0, rho=0.1, jitter=1e-8,
                                                                          one_pass=True)
    # The natural step takes its pass at q with the class mean taken out (both links are shift-invariant):
    # the estimate there is higher by K |mbar|^2 / 2, the gradients (the data term's) the same.
    mbar = state.m.mean(axis=1)
    centred = stochastic.batch_gradient(kernel, likelihood, X, y, Z, state._replace(m=state.m - mbar[:, None]),
                                        scale=7.0, jitter=1e-8)[0]
    assert centred == pytest.approx(elbo_natural, rel=1e-13)
    assert elbo_natural - elbo == pytest.approx(3 * mbar @ mbar / 2.0, rel=1e-9)
    for key in grads:
        np.testing.assert_allclose(grads[key], grads_natural[key], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dZ, dZ_natural, rtol=1e-10, atol=1e-10)
    q = state.as_dict()
    h = 1e-5

    def estimate(q_):
        return stochastic.batch_gradient(kernel, likelihood, X, y, Z, svgp.CarriedQ.of(q_, Z.shape[0], 3), scale=7.0,
                                       jitter=1e-8)[0]

    for key in q:
        numeric = []
        for i in range(q[key].size):
            up, down = {**q, key: q[key].copy()}, {**q, key: q[key].copy()}
            up[key].flat[i] += h
            down[key].flat[i] -= h
            numeric.append((estimate(up) - estimate(down)) / (2.0 * h))
        np.testing.assert_allclose(np.ravel(q_grads[key]), numeric, rtol=1e-6, atol=1e-6)


def test_adam_is_kingma_and_bas_update():
    """stochastic.Adam against Algorithm 1 of Kingma & Ba (2015) written out for three steps."""
    rng = np.random.default_rng(0)
    adam, m, v = stochastic.Adam(0.05), np.zeros(4), np.zeros(4)
    for t in range(1, 4):
        g = rng.standard_normal(4)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        expected = 0.05 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
        np.testing.assert_allclose(adam.step(g), expected, rtol=1e-14)


def _moved_q_by_numpy(q, q_grads, adam):
    """Adam's step on q as stochastic._moved_q took it before its fused kernel: q packed to the flat
    vector of q_mu and q_sqrt, Adam.step on it, unpacked."""
    keys = ("variational.q_mu", "variational.q_sqrt")
    current = q.as_dict()
    flat = np.concatenate([np.ravel(current[k]) for k in keys])
    moved = flat - adam.step(-np.concatenate([np.ravel(q_grads[k]) for k in keys]))
    size = np.size(current[keys[0]])
    M, K = q.m.shape
    return svgp.CarriedQ.of({keys[0]: moved[:size].reshape(np.shape(current[keys[0]])),
                             keys[1]: moved[size:].reshape(np.shape(current[keys[1]]))}, M, K)


@pytest.mark.parametrize("M, K", [(5, 3), (4, 1)])
def test_the_fused_adam_step_on_q_is_numpys_to_the_bit(M, K):
    """stochastic._moved_q (gpdsl._jit.adam.adam_q_step) against Adam.step on the packed flat vector,
    five steps of fresh gradients: q and Adam's moments equal to the last bit; a step that makes a
    diagonal entry of R zero or an entry non-finite raises FloatingPointError, as the unpacking did."""
    rng = np.random.default_rng(3)
    q = q_ref = _random_q(rng, M, K)
    fused, reference = stochastic.Adam(0.02), stochastic.Adam(0.02)
    for _ in range(5):
        grads = {"variational.q_mu": rng.standard_normal((M, K)),
                 "variational.q_sqrt": rng.standard_normal((K, M * (M + 1) // 2))}
        if K == 1:
            grads = {"variational.q_mu": grads["variational.q_mu"][:, 0], "variational.q_sqrt": grads["variational.q_sqrt"][0]}
        q, q_ref = stochastic._moved_q(q, grads, fused), _moved_q_by_numpy(q_ref, grads, reference)
        np.testing.assert_array_equal(q.m, q_ref.m)
        np.testing.assert_array_equal(q.R, q_ref.R)
        np.testing.assert_array_equal(fused.first, reference.first)
        np.testing.assert_array_equal(fused.second, reference.second)
        assert fused.count == reference.count
    with pytest.raises(ValueError, match="size"):
        fused.advance(fused.first.size + 1)      # a vector of another length: refused, not written past
    for bad in (np.nan, None):
        grads = {"variational.q_mu": np.zeros((M, K)), "variational.q_sqrt": np.zeros((K, M * (M + 1) // 2))}
        if bad is None:
            # A step that lands R_11 of the first latent function on 0: Adam's first step moves an
            # entry of gradient -1 by exactly rate / (1 + eps) (both bias-corrected moments are 1).
            start = svgp.CarriedQ(q.m, q.R.copy())
            start.R[0, 0, 0] = 0.02 * 1.0 / (1.0 + 1e-8)
            grads["variational.q_sqrt"][0, 0] = -1.0
        else:
            start = q
            grads["variational.q_mu"][0, 0] = bad
        with pytest.raises(FloatingPointError, match="S singular"):
            stochastic._moved_q(start, grads if K > 1 else {k: v.reshape(-1) for k, v in grads.items()},
                                stochastic.Adam(0.02))


@pytest.mark.parametrize("link, steps", [("robustmax", "adam"), ("softmax", "natural"),
                                         ("logistic_softmax", "natural")])
def test_q_steps_follow_the_likelihood(link, steps):
    """SVGP(q_steps="auto"), the default: Adam on q where the likelihood says log p is not concave in
    f (robust-max), natural steps otherwise; an explicit choice is kept."""
    likelihood = gd.likelihoods.Categorical(3, link)
    assert stochastic.q_steps(gd.inference.SVGP(batch_size=10), likelihood) == steps
    for explicit in ("natural", "adam"):
        assert stochastic.q_steps(gd.inference.SVGP(batch_size=10, q_steps=explicit), likelihood) == explicit


def test_a_subclass_with_its_own_density_does_not_inherit_log_concave():
    """log_concave describes a density (DERIVED_FROM_DENSITY, issue 45's rule): a robust-max
    Categorical subclass that redefines log_density does not inherit robust-max's False (nor
    softmax's True) and is not stated (None: natural steps under q_steps="auto") unless it says
    so itself; one that keeps the density keeps the link's answer."""

    class TemperedCategorical(gd.likelihoods.Categorical):
        def log_density(self, y, f):
            return super().log_density(y, 0.5 * np.asarray(f))

    class TemperedConcaveCategorical(TemperedCategorical):
        log_concave = True

    class RenamedCategorical(gd.likelihoods.Categorical):
        pass

    spec = gd.inference.SVGP(batch_size=10)
    for link in ("robustmax", "softmax"):
        assert TemperedCategorical(3, link).log_concave is None
        assert TemperedConcaveCategorical(3, link).log_concave is True
        assert RenamedCategorical(3, link).log_concave is gd.likelihoods.Categorical(3, link).log_concave
    assert TemperedCategorical.inherited_without_density()["log_concave"] == "Categorical"
    assert stochastic.q_steps(spec, TemperedCategorical(3, "robustmax")) == "natural"
    assert stochastic.q_steps(spec, RenamedCategorical(3, "robustmax")) == "adam"


@pytest.mark.parametrize("link, hyper_share, q_rate", [("robustmax", stochastic.ADAM_Q_HYPER_SHARE, 0.02),
                                                       ("softmax", 1.0, None)])
def test_the_rates_of_a_run_follow_its_q_steps(link, hyper_share, q_rate, monkeypatch):
    """A minibatch run's Adam rates: where q moves by Adam (robust-max, by default) q's at
    q_learning_rate and the hyperparameters' at ADAM_Q_HYPER_SHARE of learning_rate (two
    timescales); under natural steps (softmax) the hyperparameters' at learning_rate, and no Adam on
    q.  Recorded from the run's Adam objects, three steps on 60 rows."""
    rates = []

    class Recorded(stochastic.Adam):
        def __init__(self, rate):
            rates.append(rate)
            super().__init__(rate)

    monkeypatch.setattr(stochastic, "Adam", Recorded)
    X, y, _ = _classes(n=60)
    model = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Categorical(3, link),
                     gd.inducing.KMeans(5, seed=0), gd.inference.SVGP(batch_size=20, learning_rate=0.04))
    with pytest.warns(gd.ConvergenceWarning):
        model.fit(X, y, max_iter=3)
    assert rates == ([q_rate] if q_rate else []) + [0.04 * hyper_share]


@pytest.mark.parametrize("invariant", [True, False])
def test_adams_q_is_centred_every_step_and_its_gradients_stay_centred(invariant, monkeypatch):
    """A robust-max run's Adam steps on q (its default) centre q's class mean, as the natural steps
    do (``shift_invariant``, one kernel): every q a batch's gradient is taken at has class mean 0
    to 1e-12, so the gradient's q_mu entries (up to 16 here) have class mean 0 to 1e-12 too (the
    data term's sum_k dE/dmean_k = 0, the KL's -m_k centred) and Adam's first moment, their running
    mean, stays centred unchanged; its second moment, per entry, scales each entry's step, which
    moves the class mean and is what the centring takes out.  Recorded over six steps on 60 rows
    from the prior; with ``shift_invariant`` off the class mean drifts by about q_learning_rate / K
    a step (measured 0.023 by the sixth)."""
    monkeypatch.setattr(gd.likelihoods.Categorical, "shift_invariant", invariant)
    seen, gradient = [], stochastic.batch_gradient

    def recorded(kernel, likelihood, X, y, Z, state, **options):
        result = gradient(kernel, likelihood, X, y, Z, state, **options)
        seen.append((state.m.mean(axis=1), result[3]["variational.q_mu"].mean(axis=1)))
        return result

    monkeypatch.setattr(stochastic, "batch_gradient", recorded)
    X, y, _ = _classes(n=60)
    model = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Categorical(3, "robustmax"),
                     gd.inducing.KMeans(5, seed=0), gd.inference.SVGP(batch_size=20))
    with pytest.warns(gd.ConvergenceWarning):
        model.fit(X, y, max_iter=6)
    assert len(seen) == 6
    drift = np.max(np.abs(seen[-1][0]))
    if not invariant:
        assert drift > 1e-4
        return
    for mbar, gbar in seen:
        np.testing.assert_allclose(mbar, 0.0, rtol=0, atol=1e-12)
        np.testing.assert_allclose(gbar, 0.0, rtol=0, atol=1e-12)


def _mean_problem():
    """40 rows of 5 + sin(2 x) + noise 0.3, a Constant mean at 1.5, Z every eighth row, one_pass
    steps of 10 rows standing for 40 (scale 4)."""
    rng = np.random.default_rng(2)
    X = rng.uniform(-3.0, 3.0, size=(40, 1))
    y = 5.0 + np.sin(2.0 * X[:, 0]) + 0.3 * rng.standard_normal(40)
    model = gd.Model(gd.kernels.SquaredExponential(1.2, 0.9), gd.likelihoods.Gaussian(0.2), gd.inducing.KMeans(5),
                     gd.inference.SVGP(batch_size=10), mean=gd.means.Constant(1.5))
    return X, y, X[::8], model, {"kernel.lengthscale": np.array(1.2), "kernel.variance": np.array(0.9),
                                 "likelihood.variance": np.array(0.2), "mean.constant": np.array(1.5)}


def test_the_carried_mean_gradient_is_the_bounds_along_the_carried_direction():
    """stochastic._MeanCarry: the batch estimate's derivative in the constant c with q's whitened
    mean carried, m(c) = m - L^-1 (mu_c(Z) - mu_c0(Z)), against a central difference of the
    one-pass estimate along that path (steps 1e-5 on an estimate ~1e2: truncation ~1e-10, rounding
    ~1e-9 relative: rtol 1e-6); and the carried q keeps its latent mean at Z, L m + mu(Z), and its
    natural parameters consistent (S^-1 m)."""
    X, y, Z, model, values = _mean_problem()
    rows = np.arange(10)
    rng = np.random.default_rng(4)
    state = _random_q(rng, Z.shape[0], 1)
    state = svgp.CarriedQ(state.m, state.R, svgp_classes.natural(state.m, state.R))

    def estimate(c, q):
        vals = {**values, "mean.constant": np.array(c)}
        kernel, likelihood = model.bind(vals)
        latent = model.latent_offset(vals, X[rows])
        return svgp.minibatch_update(kernel, likelihood, X[rows], y[rows], Z, q, scale=4.0, rho=0.1, jitter=1e-8,
                                     one_pass=True, offset=latent)

    _, _, grads, _, jit = estimate(1.5, state)
    kernel, _ = model.bind(values)
    carry = stochastic._MeanCarry(model, values, kernel, Z, jit, X[rows], state, grads)
    stochastic._mean_gradients(model, values, X[rows], grads)
    at_fixed_q = float(grads["mean.constant"])
    carry.correct(grads)
    h = 1e-5

    def along(c):
        q = carry.moved(state, {**values, "mean.constant": np.array(c)})
        return estimate(c, q)[1], q

    (up, q_up), (down, _) = along(1.5 + h), along(1.5 - h)
    assert float(grads["mean.constant"]) == pytest.approx((up - down) / (2.0 * h), rel=1e-6)
    assert abs(at_fixed_q - float(grads["mean.constant"])) > 1e-2 * abs(at_fixed_q)     # the carry matters
    L = np.linalg.inv(carry.Li)
    np.testing.assert_allclose(L @ q_up.m[:, 0] + 1.5 + h, L @ state.m[:, 0] + 1.5, rtol=0, atol=1e-12)
    Lam, eta = q_up.natural
    np.testing.assert_allclose(eta[0], Lam[0] @ q_up.m[:, 0], rtol=1e-10, atol=1e-10)


def test_a_run_of_adam_steps_on_q_ends_at_the_full_bounds_optimum():
    """The Adam-on-q run as minimise wires it (batch_gradient at scale N / B, the step up the
    gradient, q carried between steps) ascends the same bound as the full-batch fit: softmax
    (log-concave, one optimum) with q_steps="adam" on 60 rows, batches of 30 (scale 2), the
    length-scale free, ends where the stopping rule fires with its bound (the full pass at the
    steps' end, q as the steps left it, polish off) within 0.5 nats below the full-batch fit's
    optimum (converged, q_max_iter 1,000).  Measured: 0.11 below; with the steps at scale 1 (the
    batch standing for itself) 2.1 below, with q left at the prior 81 below."""
    rng = np.random.default_rng(1)
    X = rng.uniform(-2.0, 2.0, size=(60, 2))
    y = np.argmax(np.c_[X[:, 0], X[:, 1], -X[:, 0]] + 0.5 * rng.standard_normal((60, 3)), axis=1).astype(float)

    def model(inference):
        return gd.Model(gd.kernels.SquaredExponential(1.0, gd.Fixed(2.0)), gd.likelihoods.Categorical(3, "softmax"),
                        gd.inducing.KMeans(5, seed=0), inference)

    # q_max_iter 1,000: the default 100 natural sweeps fall short of tol 1e-10 at an evaluation here.
    reference = model(gd.inference.SVGP(q_max_iter=1000)).fit(X, y)
    assert reference.converged
    with pytest.warns(gd.ConvergenceWarning):
        post = model(gd.inference.SVGP(batch_size=30, q_steps="adam", polish=False, stop_window=100)).fit(
            X, y, max_iter=3000)
    assert post.diagnostics.stop_reason == "stochastic_rule"
    assert -0.5 < post.log_evidence - reference.log_evidence < 1e-6


@pytest.mark.parametrize("q_steps, one_pass", [("natural", True), ("natural", False), ("adam", False)])
def test_the_carried_mean_is_corrected_at_the_q_its_gradients_were_taken_at(q_steps, one_pass, monkeypatch):
    """minimise hands _MeanCarry the q the batch's gradients were taken at (its correction
    J^T L^-T dELBO/dm needs dELBO/dm there): the step's starting q where one pass gives both
    steps (one_pass natural steps, Adam's steps on q), the new q where the gradient pass follows
    the natural step.  Recorded over three steps of the constant-mean problem."""
    steps, carried = [], []
    update, gradient, carry = stochastic.minibatch_update, stochastic.batch_gradient, stochastic._MeanCarry

    def recorded_update(kernel, likelihood, X, y, Z, state, **options):
        result = update(kernel, likelihood, X, y, Z, state, **options)
        steps.append((state, result[0]))
        return result

    def recorded_gradient(kernel, likelihood, X, y, Z, state, **options):
        steps.append((state, None))
        return gradient(kernel, likelihood, X, y, Z, state, **options)

    class Recorded(carry):
        def __init__(self, model, values, kernel, Z, jitter, X_batch, q_at, grads):
            carried.append(q_at)
            super().__init__(model, values, kernel, Z, jitter, X_batch, q_at, grads)

    monkeypatch.setattr(stochastic, "minibatch_update", recorded_update)
    monkeypatch.setattr(stochastic, "batch_gradient", recorded_gradient)
    monkeypatch.setattr(stochastic, "_MeanCarry", Recorded)
    X, y, _, model, _ = _mean_problem()
    model = gd.Model(model.kernel, model.likelihood, model.inducing,
                     gd.inference.SVGP(batch_size=10, q_steps=q_steps, one_pass=one_pass), mean=model.mean)
    with pytest.warns(gd.ConvergenceWarning):
        model.fit(X, y, max_iter=3)
    assert len(carried) == len(steps) == 3
    for (start, moved), q_at in zip(steps, carried):
        assert q_at is (start if q_steps == "adam" or one_pass else moved)


def test_the_step_rule_options_are_checked_and_round_trip(tmp_path):
    """SVGP's q_steps and q_learning_rate: a bad value is a ValueError naming the class, the field
    and the value; set values survive to_dict / to_toml and a saved posterior; a declaration
    written before them (no such keys) reads at the defaults ("auto", 0.02)."""
    for options, field in (({"q_steps": "Adam"}, "q_steps"), ({"q_steps": None}, "q_steps"),
                           ({"q_learning_rate": 0.0}, "q_learning_rate"),
                           ({"q_learning_rate": float("nan")}, "q_learning_rate")):
        with pytest.raises(ValueError, match=rf"SVGP: {field} must .*got {re.escape(repr(options[field]))}"):
            gd.inference.SVGP(batch_size=10, **options)
    X, y, _ = _classes(n=30)
    model = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Categorical(3, "robustmax"),
                     gd.inducing.KMeans(4, seed=0), gd.inference.SVGP(batch_size=10, q_steps="natural",
                                                                      q_learning_rate=0.07))
    assert gd.Model.from_dict(model.to_dict()) == model and gd.Model.from_toml(model.to_toml()) == model
    with pytest.warns(gd.ConvergenceWarning):
        model.fit(X, y, max_iter=2).save(tmp_path / "fit.nc")
    back = gd.load(tmp_path / "fit.nc").model.inference
    assert (back.q_steps, back.q_learning_rate) == ("natural", 0.07)
    old = model.to_dict()
    del old["inference"]["q_steps"], old["inference"]["q_learning_rate"]
    read = gd.Model.from_dict(old).inference
    assert (read.q_steps, read.q_learning_rate) == ("auto", 0.02)
