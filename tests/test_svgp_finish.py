"""The joint finish of a K-class minibatch SVGP run (:mod:`gpdsl.methods.svgp_finish`, issue 46):
L-BFGS-B on the hyperparameters and q together, on the full-batch bound, in the coordinates
m_k = m0_k + R0_k z_k, R_k = R0_k T_k, stopped by the full-pass gradient rule that sets
``converged``.

The tests: the coordinates' map and their chain-rule gradient against central differences of the
full objective (gpdsl.testing.central_difference); the finish's result against the full-batch
SVGP fit of the same model (the same optimum); its stop, cap and refusals.
"""
import dataclasses
import functools
import warnings

import numpy as np
import pytest

import gpdsl as gd
from gpdsl.fitting import _Objective
from gpdsl.methods import stochastic, svgp_finish
from gpdsl.methods.svgp import pack_lower
from gpdsl.testing import central_difference

SE = gd.kernels.SquaredExponential


def _classes(n, K=3, seed=0):
    """tests/test_minibatch_convergence.py's K-class data: x uniform on [-3, 3]^2, labels the
    Gumbel-noised arg-max of 2 (sin(x0 + k) + cos(x1 (k + 1) / 2))."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, size=(n, 2))
    f = 2.0 * np.stack([np.sin(X[:, 0] + k) + np.cos(X[:, 1] * (k + 1) / 2) for k in range(K)], axis=1)
    return X, np.argmax(f + 0.5 * rng.gumbel(size=f.shape), axis=1)


def _random_q(rng, M, K):
    R = np.stack([np.tril(0.3 * rng.standard_normal((M, M)), -1) + np.diag(rng.uniform(0.5, 1.0, M))
                  for _ in range(K)])
    return {"variational.q_mu": rng.standard_normal((M, K)), "variational.q_sqrt": np.stack([pack_lower(r) for r in R])}


def _check(model, X, y, Z):
    """``check(u, q)`` of the finish: stochastic.full_pass_check on the model's objective."""
    objective = _Objective(model, model.parameter_table(X, Z), X, model.likelihood.coded_targets(y, X.shape[0]), Z)
    full_batch = dataclasses.replace(model.inference, batch_size=None)
    return objective, lambda u, q: stochastic.full_pass_check(objective, u, q, full_batch)


@pytest.mark.parametrize("transported", [False, True], ids=["whitened", "transported"])
@pytest.mark.parametrize("link", ["softmax", "robustmax"])
def test_the_coordinates_gradient_is_the_central_difference(link, transported):
    """dF/dx of the coordinates (dF/dz_k = B_k^T dF/dm_k, dF/dT_k = lower(B_k^T dF/dR_k), and for q
    carried in u-space (stochastic._transport) dF/du less the pullback of Phi = -sum_k (g_k m_k^T +
    G_k R_k^T) through K_uu's Cholesky factor; F the negative full objective) against central
    differences of F(x) over every entry of x, at a point away from the start (u, z and T moved),
    off-optimum hyperparameters, Z optimised, 3 classes, M = 5 of 60 rows (K_uu well conditioned
    at no jitter).  Steps of 1e-6 relative: truncation ~1e-12 and rounding ~1e-16 |F| / 1e-6 ~
    1e-8 (|F| ~ 100): rtol 1e-5, atol 1e-6."""
    rng = np.random.default_rng(3)
    X, y = _classes(60)
    Z = X[::12]
    model = gd.Model(SE(1.3, 2.0), gd.likelihoods.Categorical(3, link), gd.inducing.Optimized(Z),
                     gd.inference.SVGP(batch_size=20, jitter=0.0))
    objective, check = _check(model, X, y, Z)
    full_batch = dataclasses.replace(model.inference, batch_size=None)
    transport = functools.partial(stochastic._transport, objective, full_batch) if transported else None
    u0 = objective.table.pack(objective.table.values()) + 0.2 * rng.standard_normal(objective.table.size)
    coordinates = svgp_finish.Coordinates(u0, _random_q(rng, 5, 3), transport)
    x = coordinates.start() + 0.1 * rng.standard_normal(coordinates.start().size)

    def F(x_):
        return -check(*coordinates.point(x_)).objective

    point = check(*coordinates.point(x))
    analytic = coordinates.gradient(x, point.gradient, point.q_gradient)
    np.testing.assert_allclose(analytic, central_difference(F, x), rtol=1e-5, atol=1e-6)


def test_the_coordinates_start_at_the_runs_end():
    """x = start() maps back to (u0, q0) to rounding (z = 0, T = I: m = m0, R = R0 I), and T's
    diagonal, and only it, is bounded below by DIAGONAL_FLOOR."""
    rng = np.random.default_rng(0)
    q0 = _random_q(rng, 4, 3)
    u0 = rng.standard_normal(2)
    coordinates = svgp_finish.Coordinates(u0, q0)
    u, q = coordinates.point(coordinates.start())
    np.testing.assert_array_equal(u, u0)
    for key in q0:
        np.testing.assert_allclose(q[key], q0[key], rtol=0, atol=1e-15)
    bounds = coordinates.bounds()
    assert len(bounds) == coordinates.start().size == 2 + 4 * 3 + 3 * 10
    floors = [i for i, b in enumerate(bounds) if b[0] is not None]
    diagonal = [2 + 12 + k * 10 + j for k in range(3) for j in (0, 2, 5, 9)]
    assert floors == diagonal and all(bounds[i] == (svgp_finish.DIAGONAL_FLOOR, None) for i in floors)


def test_a_softmax_minibatch_fit_finishes_at_the_full_batch_optimum():
    """3 classes, 300 rows, M = 10 fixed, softmax, polish=True: the rule stops the steps above the
    tolerance, the joint finish takes the fit to a point within it (converged=True, the message
    names the finish), and that point is the full-batch SVGP fit's optimum (fitted from the
    declared start, q moved by natural steps at every L-BFGS-B evaluation).  Measured: the finish
    -194.645 after 218 evaluations (largest gradient 0.26 against the tolerance 1e-3 N = 0.3; q
    carried in u-space; -194.672 after 284 with whitened q held), the full-batch fit -194.631
    (plateau rule, hyperparameters' gradient 0.005, 666 extrapolated natural steps in all, 4,563
    plain ones for -194.637; its posterior's q polish does not reach 1e-10 nats in q_max_iter, the
    warning ignored here), length-scale 4.008 against 4.039, variance 30.64 against 31.56: the
    tolerance leaves some hundredths of a nat in the flat directions (a few per cent of the
    variance).  Those figures are from the steps' last iterate (``iterate_average=0``); from the
    default's average of the last ~50 (where the finish now starts): -194.692 after 150 evaluations
    (gradient 0.288 against 0.3), length-scale 3.996, variance 29.83 (-6 %; the last iterate's start
    31.13, -1.8 %, at the same commit).  Asserted: bounds within 0.1 nats, length-scale within 5 %,
    the variance, the flattest direction, within 10 %."""
    X, y = _classes(300)
    Z = gd.inducing.KMeans(10, seed=0).initial_Z(X, y)
    model = gd.Model(SE(), gd.likelihoods.Categorical(3, "softmax"), gd.inducing.Fixed(Z),
                     gd.inference.SVGP(batch_size=50, polish=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", gd.ConvergenceWarning)
        post = model.fit(X, y)
    d = post.diagnostics
    assert post.converged and d.polish_iterations > 0 and d.grad_norm <= d.grad_tol
    assert "joint L-BFGS-B on the hyperparameters and q, within the tolerance" in d.message
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        full = dataclasses.replace(model, inference=gd.inference.SVGP()).fit(X, y)
    assert abs(post.log_evidence - full.log_evidence) < 0.1
    assert post.values["kernel.lengthscale"] == pytest.approx(full.values["kernel.lengthscale"], rel=0.05)
    assert post.values["kernel.variance"] == pytest.approx(full.values["kernel.variance"], rel=0.10)


def test_a_capped_finish_keeps_its_best_point_and_says_unconverged():
    """With max_evaluations = 5 the finish cannot reach the tolerance from a random q: it returns
    the evaluated point of the largest objective (at least the start's), its own check, and says
    so; at most L-BFGS-B's cap plus a line search's overrun of passes."""
    rng = np.random.default_rng(1)
    X, y = _classes(60)
    Z = X[::12]
    model = gd.Model(SE(), gd.likelihoods.Categorical(3, "softmax"), gd.inducing.Fixed(Z),
                     gd.inference.SVGP(batch_size=20))
    objective, check = _check(model, X, y, Z)
    u0 = objective.table.pack(objective.table.values())
    q0 = _random_q(rng, 5, 3)
    seen = []
    start = check(u0, q0)
    done = svgp_finish.finish(check, u0, q0, 5, callback=seen.append)
    assert not done.converged and "its best point kept" in done.how
    assert done.point.objective >= start.objective and done.point.objective == max(s["objective"] for s in seen)
    assert done.point.objective == pytest.approx(check(done.u, done.q).objective, rel=1e-12)
    assert 5 <= done.evaluations <= 5 + 20 and len(seen) == done.evaluations


def test_the_finish_refuses_a_bad_cap_and_a_bound_that_is_never_finite():
    rng = np.random.default_rng(2)
    q0 = _random_q(rng, 3, 2)
    with pytest.raises(ValueError, match="finish: max_evaluations must be at least 1, got 0"):
        svgp_finish.finish(lambda u, q: None, np.zeros(1), q0, 0)

    def broken(u, q):
        raise FloatingPointError("SVGP: non-finite bound")

    with pytest.raises(FloatingPointError, match="finish: no evaluation was finite"):
        svgp_finish.finish(broken, np.zeros(1), q0, 3)
