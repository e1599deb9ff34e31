"""Exact's Kronecker path (gpdsl/methods/exact.py): an ICM on a full isotopic output-major grid
with a noise of one value an output gives the general path's log evidence, every gradient and
the latent offset's gradient to 1e-10 (per-output noise: OutputGaussian; a shared Gaussian;
known per-row variances constant per output), its gradients match central differences of the dense formula
(tests/naive.py), and the general path runs wherever the structure is absent."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gpdsl as gd
import naive
from gpdsl.components import Bound
from gpdsl.methods import exact
from naive import central_difference

RNG = np.random.default_rng(4848)
P, N = 3, 30
INPUTS = RNG.uniform(-2.0, 2.0, size=(N, 2))
X = naive.isotopic_grid(INPUTS, P)
Y = np.concatenate([np.sin(INPUTS[:, 0] + p) + 0.3 * INPUTS[:, 1] for p in range(P)]) + 0.1 * RNG.normal(size=N * P)
NOISE = np.array([0.05, 0.3, 0.12])


def _kernel(**kw):
    W = np.array([[0.9, -0.2], [0.4, 0.7], [-0.5, 0.3]])
    return gd.kernels.ICM(gd.kernels.Matern52(np.array([0.8, 1.4]), 1.2), P, rank=2, W=W,
                          kappa=np.array([0.2, 0.4, 0.1]), **kw)


LIKELIHOODS = [
    pytest.param(lambda: gd.likelihoods.OutputGaussian(P, variance=NOISE), id="per-output"),
    pytest.param(lambda: gd.likelihoods.Gaussian(0.2), id="shared"),
    pytest.param(lambda: gd.likelihoods.HeteroscedasticGaussian(variance=np.repeat(NOISE, N)), id="known-rows"),
]


def _bound(component, prefix):
    return Bound(component.bind(), prefix)


@pytest.mark.parametrize("make", LIKELIHOODS)
def test_kronecker_path_equals_the_general_path(make, monkeypatch):
    """Log evidence, every kernel and noise gradient and the offset gradient agree to 1e-10
    (relative to the largest entry); evaluate takes the Kronecker path (the general one is
    not called), without a state where none is asked for."""
    kernel, likelihood = _bound(_kernel(), "kernel"), _bound(make(), "likelihood")
    general = exact._evaluate(kernel, likelihood, X, Y, None, True, False, True)

    def refuse(*args):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(exact, "_evaluate", refuse)
    fast = exact.evaluate(kernel, likelihood, X, Y, offset_grad=True)
    assert fast.state is None and fast.jitter == 0.0
    np.testing.assert_allclose(fast.log_evidence, general.log_evidence, rtol=1e-12)
    assert set(fast.grads) == set(general.grads)
    assert {"kernel.W", "kernel.kappa", "kernel.kernel.lengthscale", "kernel.kernel.variance", "offset"} <= set(fast.grads)
    for name, g in general.grads.items():
        np.testing.assert_allclose(fast.grads[name], g, rtol=0, atol=1e-10 * np.abs(g).max(), err_msg=name)
    for a, b in zip(fast.pseudo_data, general.pseudo_data):
        np.testing.assert_array_equal(a, b)


def test_kronecker_gradients_match_central_differences_of_the_dense_formula():
    """Per-output noise: the Kronecker path's gradients in W, kappa, the base kernel's
    parameters and the noise variances against central differences of log N(y | 0,
    kron(B, K_x) + diag(noise)) formed densely (naive.exact_lml), rtol 1e-6; its log evidence
    equals that formula to 1e-11."""
    kernel = _kernel()
    values = {e.name[len("k."):]: e.value for e in kernel.entries("k", X)}
    values["noise"] = NOISE.copy()

    def dense(vals):
        base = naive.kernel(INPUTS, INPUTS, vals["kernel.lengthscale"], vals["kernel.variance"], "m52")
        return naive.exact_lml(np.kron(naive.coregion_matrix(vals["W"], vals["kappa"]), base),
                               np.repeat(vals["noise"], N), Y)

    ev = exact.evaluate(Bound(kernel.bind({k: v for k, v in values.items() if k != "noise"}), "kernel"),
                        Bound(gd.likelihoods.OutputGaussian(P, variance=values["noise"]).bind(), "likelihood"), X, Y)
    assert ev.state is None         # the Kronecker path
    np.testing.assert_allclose(ev.log_evidence, dense(values), rtol=1e-11)
    for name, value in values.items():
        key = "likelihood.variance" if name == "noise" else f"kernel.{name}"
        fd = central_difference(lambda v: dense({**values, name: v}), value)
        np.testing.assert_allclose(ev.grads[key], fd, rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("likelihood,noise", [
    pytest.param(gd.likelihoods.Gaussian(0.15), np.full(N * P, 0.15), id="shared"),
    pytest.param(gd.likelihoods.OutputGaussian(P, variance=NOISE), np.repeat(NOISE, N), id="per-output")])
def test_model_evaluation_and_predictions_equal_the_general_path(likelihood, noise):
    """Through the model (shared or per-output noise, a constant mean: the offset's gradient): Exact()
    and Exact(jitter=0.0) (which never takes the Kronecker path) agree to 1e-10 in the log
    evidence and every gradient; the fitted posterior's predictions at new inputs of every
    output equal the dense predictive formula (naive.exact_predict) to 1e-10."""
    mean = gd.means.Constant(0.3)
    fast_model = gd.Model(_kernel(), likelihood, None, gd.inference.Exact(), mean=mean)
    general_model = dataclasses.replace(fast_model, inference=gd.inference.Exact(jitter=0.0))
    values = fast_model.parameter_table(X).values()
    fast = fast_model.evaluate(values, X, Y, None)
    general = general_model.evaluate(values, X, Y, None)
    np.testing.assert_allclose(fast.log_evidence, general.log_evidence, rtol=1e-12)
    assert "mean.constant" in fast.grads
    for name, g in general.grads.items():
        np.testing.assert_allclose(fast.grads[name], g, rtol=0, atol=1e-10 * np.abs(g).max(), err_msg=name)
    post = fast_model.fit(X, Y, optimize=False)
    new = naive.isotopic_grid(RNG.uniform(-2.0, 2.0, size=(4, 2)), P)
    f_mean, f_var = post.predict_f(new)
    k = _kernel().bind()
    ref_mean, ref_var = naive.exact_predict(k.gram(X, X), k.gram(new, X), k.diag(new), noise, Y - 0.3)
    np.testing.assert_allclose(np.ravel(f_mean), ref_mean + 0.3, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.ravel(f_var), ref_var, rtol=1e-10, atol=1e-12)


def test_kronecker_path_reads_the_icms_active_columns():
    """An ICM with active_dims (an unread column that varies between the output blocks): the grid
    is checked on the columns it reads, and the Kronecker path equals the general one (1e-10)."""
    wide = np.column_stack([X[:, :2], RNG.normal(size=len(X)), X[:, 2]])
    kernel = _bound(_kernel(active_dims=(0, 1, 3)), "kernel")
    likelihood = _bound(gd.likelihoods.OutputGaussian(P, variance=NOISE), "likelihood")
    fast = exact._kronecker(kernel, likelihood, wide, Y, True, False, False)
    general = exact._evaluate(kernel, likelihood, wide, Y, None, True, False, False)
    np.testing.assert_allclose(fast.log_evidence, general.log_evidence, rtol=1e-12)
    for name, g in general.grads.items():
        np.testing.assert_allclose(fast.grads[name], g, rtol=0, atol=1e-10 * np.abs(g).max(), err_msg=name)


def _others():
    """(kernel, likelihood, X, y) where the Kronecker path does not apply, and why."""
    rows = np.r_[0:N * P - 1]
    order = np.argsort(np.tile(np.arange(N), P), kind="stable")
    lmc = gd.kernels.LMC((gd.kernels.SquaredExponential(0.9), gd.kernels.Matern32(1.3)), P)
    varying = np.repeat(NOISE, N)
    varying[4] *= 1.5
    return [
        pytest.param(_kernel(), gd.likelihoods.OutputGaussian(P, variance=NOISE), X[rows], Y[rows], id="missing-row"),
        pytest.param(_kernel(), gd.likelihoods.OutputGaussian(P, variance=NOISE), X[order], Y[order], id="input-major"),
        pytest.param(lmc, gd.likelihoods.OutputGaussian(P, variance=NOISE), X, Y, id="LMC"),
        pytest.param(_kernel(), gd.likelihoods.HeteroscedasticGaussian(variance=varying), X, Y, id="noise-varies"),
    ]


@pytest.mark.parametrize("kernel,likelihood,X_,y", _others())
def test_general_path_where_the_structure_is_absent(kernel, likelihood, X_, y):
    """A missing row, another row order, an LMC, or a noise that varies within an output: no
    Kronecker path (None), and evaluate gives the general path's result exactly."""
    k, lik = _bound(kernel, "kernel"), _bound(likelihood, "likelihood")
    assert exact._kronecker(k, lik, X_, y, True, True, False) is None
    ev, general = exact.evaluate(k, lik, X_, y), exact._evaluate(k, lik, X_, y, None, True, False, False)
    assert ev.log_evidence == general.log_evidence
    for name, g in general.grads.items():
        np.testing.assert_array_equal(ev.grads[name], g)


@pytest.mark.parametrize("make", LIKELIHOODS)
def test_kronecker_predictive_state_equals_the_general_path(make, monkeypatch):
    """need_state: the Kronecker path's state (of the factors: tests/test_kronecker_state.py) has
    the general path's q_mean and posterior covariance at X (formed on demand) to 1e-10, and so
    do the predictive moments at new inputs of every output; the general path is not called."""
    kernel, likelihood = _bound(_kernel(), "kernel"), _bound(make(), "likelihood")
    general = exact._evaluate(kernel, likelihood, X, Y, None, True, True, False)
    monkeypatch.setattr(exact, "_evaluate", lambda *a: pytest.fail("the general path ran"))
    fast = exact.evaluate(kernel, likelihood, X, Y, need_state=True)
    np.testing.assert_allclose(fast.log_evidence, general.log_evidence, rtol=1e-12)
    for name in ("Z", "q_mean", "q_cov"):
        a, b = getattr(fast.state, name), getattr(general.state, name)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10 * np.abs(b).max(), err_msg=name)
    new = naive.isotopic_grid(RNG.uniform(-2.0, 2.0, size=(4, 2)), P)
    moments = [ev.state.moments(ev.state.basis(kernel.gram(X, new)), kernel.diag(new)) for ev in (fast, general)]
    for a, b in zip(*moments):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_fixed_jitter_takes_the_general_path(monkeypatch):
    """A fixed jitter is the general path's (its K + jitter mean(diag K) I has no Kronecker form)."""
    kernel, likelihood = _bound(_kernel(), "kernel"), _bound(gd.likelihoods.OutputGaussian(P, variance=NOISE), "likelihood")
    fast = exact.evaluate(kernel, likelihood, X, Y)
    calls = []
    original = exact._evaluate
    monkeypatch.setattr(exact, "_evaluate", lambda *a: calls.append(a) or original(*a))
    fixed = exact.evaluate(kernel, likelihood, X, Y, jitter=1e-9)
    assert len(calls) == 1
    np.testing.assert_allclose(fixed.log_evidence, fast.log_evidence, rtol=1e-7)


def test_near_singular_whitened_matrix_takes_the_general_path():
    """A noise so small that B~ kron K_x + I has condition number above KRONECKER_MAX_CONDITION
    (duplicate inputs make K_x singular): the general path, with its jitter ladder, gives the result."""
    inputs = np.repeat(INPUTS[:5], 2, axis=0)
    grid = naive.isotopic_grid(inputs, P)
    y = RNG.normal(size=len(grid))
    kernel, likelihood = _bound(_kernel(), "kernel"), _bound(gd.likelihoods.Gaussian(1e-14), "likelihood")
    assert exact._kronecker(kernel, likelihood, grid, y, True, True, False) is None
    ev, general = exact.evaluate(kernel, likelihood, grid, y), exact._evaluate(kernel, likelihood, grid, y, None, True,
                                                                              False, False)
    assert ev.log_evidence == general.log_evidence
