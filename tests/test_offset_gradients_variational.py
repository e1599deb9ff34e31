"""The latent offset's gradient (``grads["offset"]``, d bound / d o) of the variational methods
(SVGP, VGP, collapsed and stochastic Pólya-Gamma) against finite differences, the mean-function
gradients it gives through a Model, the Pólya-Gamma bound with an offset against its dense
definition, and a stochastic SVGP fit that recovers a constant mean."""
import numpy as np
import pytest

import gpdsl as gd
import naive
from gpdsl.methods import polya_gamma
from naive import bound_pair

SE = gd.kernels.SquaredExponential(0.9, 1.3)
LOGIT = gd.likelihoods.Bernoulli("logit")
POISSON = gd.likelihoods.Poisson(link="log")
N, M = 30, 6


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, 2))
    labels = np.where(np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(N) > 0, 1.0, -1.0)
    counts = rng.poisson(np.exp(0.5 + 0.6 * np.sin(X[:, 0]))).astype(float)
    Z = X[:M] + 0.05 * rng.standard_normal((M, 2))
    offset = 0.6 * rng.standard_normal(N)
    return X, labels, counts, Z, offset


# q and c are moved to their optima at every point (tight tolerances), so the bound is max over
# them and its derivative in o is the partial one that the methods return (envelope theorem).
METHODS = {
    "svgp-logit": (LOGIT, gd.inference.SVGP(q_tol=1e-13, q_max_iter=500), True),
    "svgp-poisson": (POISSON, gd.inference.SVGP(q_tol=1e-13, q_max_iter=500), True),
    "vgp-logit": (LOGIT, gd.inference.VGP(q_tol=1e-13, q_max_iter=500), False),
    "vgp-poisson": (POISSON, gd.inference.VGP(q_tol=1e-13, q_max_iter=500), False),
    "polya-gamma": (LOGIT, gd.inference.PolyaGamma(tol=1e-12, jitter=0.0), True),
    # Without a reached q the stochastic method's evaluation moves q to its optimum by full-batch
    # natural steps: SVGP's bound on the closed-form Pólya-Gamma expectations.
    "polya-gamma-stochastic": (LOGIT, gd.inference.PolyaGamma(minibatch=10, max_iter=500), True),
}


def _setup(name, mean=None):
    likelihood, inference, sparse = METHODS[name]
    X, labels, counts, Z, offset = _problem()
    model = gd.Model(SE, likelihood, gd.inducing.Fixed(Z) if sparse else None, inference, mean=mean)
    y = likelihood.prepare_targets(counts if likelihood is POISSON else labels)
    Z = Z if sparse else None
    values = {e.name: e.value for e in model.parameter_table(X, Z).entries}
    return model, values, X, y, Z, offset


def _log_evidence(model, values, X, y, Z, offset):
    return model.evaluate(values, X, y, Z, need_grad=False, need_state=True, offset=offset).log_evidence


@pytest.mark.parametrize("name", sorted(METHODS))
def test_offset_gradient_against_finite_differences(name):
    model, values, X, y, Z, offset = _setup(name)
    # need_state: a posterior's evaluation, whose q is polished to POLISHED_Q_TOL (1e-10 nats) even
    # where the method's own q tolerance within a fit is looser (the stochastic one's SVGP, 1e-6).
    ev = model.evaluate(values, X, y, Z, need_state=True, offset=offset)
    grad = ev.grads["offset"]
    assert grad.shape == (N,)
    fd = naive.central_difference(lambda o: _log_evidence(model, values, X, y, Z, o), offset, step=1e-5)
    # The FD truncation (h^2 f''' ~ 1e-10) and the tolerance of q or c (a bound 1e-13 from its
    # optimum moves by ~1e-13 / h = 1e-8 per difference; 1e-10 / h = 1e-5 at the polished one,
    # measured below 1e-6 here, where the fixed-point residual test holds q much closer) are below 1e-6.
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6)
    # The bias shifts every row: its gradient is the offset's sum.
    if "likelihood.bias" in ev.grads:
        assert float(ev.grads["likelihood.bias"]) == pytest.approx(np.sum(grad), rel=1e-10, abs=1e-12)


def test_no_offset_gradient_without_an_offset():
    model, values, X, y, Z, _ = _setup("svgp-logit")
    assert "offset" not in model.evaluate(values, X, y, Z).grads


@pytest.mark.parametrize("name", ["svgp-logit", "svgp-poisson", "vgp-poisson", "polya-gamma"])
def test_mean_gradients_through_the_model(name):
    mean = gd.means.Constant(0.3) + gd.means.Linear(np.array([0.2, -0.1]))
    model, values, X, y, Z, offset = _setup(name, mean=mean)
    names = [k for k in values if k.startswith("mean.")]
    assert sorted(names) == ["mean.0.constant", "mean.1.coefficients"]
    ev = model.evaluate(values, X, y, Z, offset=offset)
    assert "offset" not in ev.grads
    for key in names:
        fd = naive.central_difference(lambda v: _log_evidence(model, {**values, key: v}, X, y, Z, offset),
                                      values[key], step=1e-5)
        np.testing.assert_allclose(ev.grads[key], fd, rtol=1e-6, atol=1e-6)


# -- Pólya-Gamma with an offset against its dense definition ---------------------------------------
def _pg(X, y, Z, values, offset, need_grad=True):
    spec = gd.inference.PolyaGamma(tol=1e-12, jitter=0.0)
    return polya_gamma.evaluate(*bound_pair(SE, LOGIT, values), X, y, Z, spec=spec, need_grad=need_grad,
                                need_state=True, offset=offset)


def test_polya_gamma_offset_bound_against_the_dense_elbo():
    X, y, _, Z, offset = _problem(1)
    bias = -0.2
    values = {"kernel.lengthscale": np.array(0.9), "kernel.variance": np.array(1.3), "likelihood.bias": np.array(bias)}
    ev = _pg(X, y, Z, values, offset)
    Kuu, Kuf = naive.kernel(Z, Z, 0.9, 1.3, "se"), naive.kernel(Z, X, 0.9, 1.3, "se")
    kff = np.full(N, 1.3)
    m, S, c = ev.state.q_mean, ev.state.q_cov, ev.warm.c
    shift = bias + offset
    elbo = naive.polya_gamma_elbo(Kuu, Kuf, kff, y, shift, m, S, c)
    assert ev.log_evidence == pytest.approx(elbo, abs=1e-9)
    # c is the closed-form optimum c_n^2 = E_q[(g_n + bias + o_n)^2] of the dense ELBO ...
    W = np.linalg.solve(Kuu, Kuf)
    mu = W.T @ m
    var = kff - np.einsum("ij,ij->j", Kuf, W) + np.einsum("ij,ik,kj->j", W, S, W)
    np.testing.assert_allclose(c, np.sqrt((mu + shift) ** 2 + var), rtol=1e-9)
    # ... and the offset's gradient is the dense ELBO's explicit derivative in o at (q*, c).
    fd = naive.central_difference(lambda o: naive.polya_gamma_elbo(Kuu, Kuf, kff, y, bias + o, m, S, c), offset,
                                  step=1e-5)
    np.testing.assert_allclose(ev.grads["offset"], fd, rtol=1e-7, atol=1e-8)


def test_polya_gamma_zero_offset_is_no_offset():
    X, y, _, Z, _ = _problem(2)
    values = {"kernel.lengthscale": np.array(0.9), "kernel.variance": np.array(1.3), "likelihood.bias": np.array(0.1)}
    plain, zero = _pg(X, y, Z, values, None), _pg(X, y, Z, values, np.zeros(N))
    assert zero.log_evidence == plain.log_evidence
    assert "offset" not in plain.grads
    for key, g in plain.grads.items():
        np.testing.assert_array_equal(zero.grads[key], g)
    np.testing.assert_array_equal(zero.warm.c, plain.warm.c)
    np.testing.assert_array_equal(zero.pseudo_data[1], plain.pseudo_data[1])


def test_polya_gamma_constant_offset_is_the_bias():
    """A constant offset o is the bias moved by o: same bound, the offset's gradient sums to the
    bias gradient."""
    X, y, _, Z, _ = _problem(3)
    values = {"kernel.lengthscale": np.array(0.9), "kernel.variance": np.array(1.3), "likelihood.bias": np.array(0.1)}
    shifted = _pg(X, y, Z, values, np.full(N, 0.4))
    biased = _pg(X, y, Z, {**values, "likelihood.bias": np.array(0.5)}, None)
    assert shifted.log_evidence == pytest.approx(biased.log_evidence, abs=1e-10)
    assert np.sum(shifted.grads["offset"]) == pytest.approx(float(biased.grads["likelihood.bias"]), abs=1e-8)


# -- a stochastic fit of a mean function -------------------------------------------------------------
def test_stochastic_svgp_recovers_a_constant_mean():
    """y = 6 + sin(2 x) + noise: the minibatch steps fit the Constant mean, from 0, to the shift.

    The full-batch (L-BFGS-B) fit puts the constant at 5.90: the GP's own level is one direction
    with it, and absorbing part of the shift costs the GP prior less than the last 0.1.  The
    stochastic fit reached 5.879 to 5.918 over batch seeds 0-3, 420 steps each; the test asks
    for the full-batch constant within 0.1 (a few times that spread, which is Adam's last steps
    of size ~learning_rate times its normalised gradient, not q's batch noise) and 6 within 0.3.
    natural_step=1 (q at the batch sites' optimum each step) and batches of N / 2 keep q's level
    from lagging the data: with q moved a tenth of the way per step, the first steps' gradient
    in the constant is N 6 / noise ~ 1e5, Adam's second moment remembers it for ~1/(1 - 0.999)
    steps, and the constant moved only 0.1 in 420 steps (q then carried the level)."""
    rng = np.random.default_rng(0)
    n = 1000
    X = rng.uniform(-3.0, 3.0, (n, 1))
    y = 6.0 + np.sin(2.0 * X[:, 0]) + 0.2 * rng.standard_normal(n)

    def fit(inference):
        model = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Gaussian(0.1),
                         gd.inducing.KMeans(15), inference, mean=gd.means.Constant(0.0))
        return float(model.fit(X, y, max_iter=3000).values["mean.constant"])

    full = fit(gd.inference.SVGP())
    stochastic = fit(gd.inference.SVGP(batch_size=500, learning_rate=0.1, natural_step=1.0, seed=1))
    assert full == pytest.approx(6.0, abs=0.3)
    assert stochastic == pytest.approx(full, abs=0.1)
