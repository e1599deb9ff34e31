"""The checks of a (likelihood, inference method) pair: the objective's gradients, a fit's
predictions through the likelihood, its round trips, Dask against memory."""
from __future__ import annotations

import dataclasses
import importlib.util
import tempfile
import warnings
from pathlib import Path

import numpy as np

from .. import Model, load
from ..components import bind
from ..inducing import Optimized
from ..inference import Inference
from ..kernels import SquaredExponential
from ..likelihoods import Likelihood
from .common import _draws_y, _instances, _targets, central_difference, inputs_for, kernel_for, registered

# The pair checks' problem: N points, M optimised inducing inputs.
N, M = 14, 3
XP = np.random.default_rng(5).uniform(-1.5, 1.5, size=(N, 2))
Z0 = XP[:M] + 0.05
KERNEL = SquaredExponential(np.array([0.9, 1.3]), 1.1)

# Local iterations to tight tolerances, so that the objective is a smooth function of the
# hyperparameters to the differences' resolution (the options each method has of these).
TIGHT = {"tol": 1e-13, "q_tol": 1e-14, "q_max_iter": 5000, "max_sweeps": 5000}


def tight(method):
    """The method with its local iterations at tight tolerances (:data:`TIGHT`, those it has).

    Parameters
    ----------
    method : gpdsl.inference.Inference

    Returns
    -------
    gpdsl.inference.Inference
    """
    fields = {f.name for f in dataclasses.fields(method)}
    return dataclasses.replace(method, **{k: v for k, v in TIGHT.items() if k in fields})


def pair_model(likelihood, inference, kernel=None):
    """The pair checks' model: ``kernel``, by default :data:`KERNEL` (for a likelihood of P
    outputs its ICM over them, :func:`kernel_for`), optimised inducing inputs from :data:`Z0`
    where the method takes them (shared by the outputs of a multi-output kernel, whose rows are
    :data:`XP` with the output column of :func:`inputs_for`: :func:`pair_inputs`).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
    inference : gpdsl.inference.Inference
    kernel : gpdsl.kernels.Kernel, optional
        A kernel of two input features (and an output index, for a multi-output one).

    Returns
    -------
    gpdsl.Model
    """
    inducing = Optimized(Z0) if inference.inducing_rule != "forbidden" else None
    try:
        inference.check_inducing(likelihood, inducing)
    except ValueError:        # a method dense for this likelihood (multi-class Laplace)
        inducing = None
    return Model(kernel_for(likelihood, KERNEL) if kernel is None else kernel, likelihood, inducing, inference)


def pair_inputs(model):
    """:data:`XP`, with the output index appended for a multi-output model (:func:`inputs_for`).

    Parameters
    ----------
    model : gpdsl.Model

    Returns
    -------
    ndarray, shape (N, 2) or (N, 3)
    """
    return inputs_for(model.kernel, XP)


def pair_targets(likelihood):
    """Targets at :data:`XP` (its rows for the likelihood: :func:`inputs_for`) drawn from the
    likelihood at a smooth latent function.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood

    Returns
    -------
    ndarray, shape (N,)
    """
    # A likelihood even in f (the square-link Poisson) gets data away from f = 0, where its tilted
    # laws are bimodal: EP clamps such sites, and its gradient is then documented as approximate.
    f = (3.5 if likelihood.sign_symmetric else 0.5) + 0.5 * np.sin(1.3 * XP[:, 0]) + 0.3 * XP[:, 1]
    if likelihood.n_latent > 1:
        # One latent function a class, each its own phase of the same pattern.
        f = np.column_stack([np.sin(1.3 * XP[:, 0] + 2.0 * k) + 0.3 * k * XP[:, 1]
                             for k in range(likelihood.n_latent)])
    return _targets(likelihood, f, seed=6, X=inputs_for(likelihood, XP))


def check_model_gradients(model, X, y, Z=None):
    """Every gradient of the model's objective at its declared values (hyperparameters, and Z
    where optimised) against central differences (relative 2e-5, absolute 2e-6).

    Parameters
    ----------
    model : gpdsl.Model
    X : ndarray, shape (N, D)
    y : ndarray, shape (N,)
        Coded targets.
    Z : ndarray, shape (M, D), optional
        Inducing inputs of a sparse model.

    Returns
    -------
    The evaluation at the declared values.
    """
    table = model.parameter_table(X, Z if model.sparse else None)
    values = table.values()
    Z = values.pop("inducing.Z", None)
    ev = model.evaluate(values, X, y, Z)

    def objective(vals, Zz):
        return model.evaluate(vals, X, y, Zz, need_grad=False).log_evidence

    assert np.isfinite(ev.log_evidence)
    # EP's gradient is exact at a moment-matched fixed point; clamped sites would make it
    # approximate (documented), so these data must give none.
    assert getattr(ev.warm, "clamped", 0) == 0
    for e in table.free:
        if e.name == "inducing.Z":
            continue
        fd = central_difference(lambda v: objective({**values, e.name: v}, Z), values[e.name])
        np.testing.assert_allclose(ev.grads[e.name], fd, rtol=2e-5, atol=2e-6, err_msg=e.name)
    if Z is not None:
        fd = central_difference(lambda Zz: objective(values, Zz), Z)
        np.testing.assert_allclose(ev.dZ, fd, rtol=2e-5, atol=2e-6, err_msg="Z")
    return ev


def check_pair_gradients(likelihood, inference, kernel=None):
    """Every gradient of the method's objective with the likelihood against central differences.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
    inference : gpdsl.inference.Inference
        A method that accepts the likelihood.
    kernel : gpdsl.kernels.Kernel, optional
        As :func:`pair_model`.
    """
    model = pair_model(likelihood, inference, kernel)
    X = pair_inputs(model)
    check_model_gradients(model, X, likelihood.for_rows(X).prepare_targets(pair_targets(likelihood)), Z0)


def check_pair_fitted_model_round_trips(likelihood, inference, kernel=None):
    """A fitted model saves and loads back (same values and predictions to the bit) and
    round-trips through ``to_dict`` and its model file.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
    inference : gpdsl.inference.Inference
    kernel : gpdsl.kernels.Kernel, optional
        As :func:`pair_model`.
    """
    model = pair_model(likelihood, inference, kernel)
    post = model.fit(pair_inputs(model), pair_targets(likelihood), max_iter=3)
    with tempfile.TemporaryDirectory() as folder:
        post.save(Path(folder) / "post.nc")
        back = load(Path(folder) / "post.nc")
        assert back.model == model
        for name, value in post.values.items():
            np.testing.assert_array_equal(back.values[name], value, err_msg=name)
        X_new = inputs_for(model.kernel, XP[:4] + 0.1)
        a, b = post.predict(X_new), back.predict(X_new)
        for name in a.data_vars:
            np.testing.assert_array_equal(b[name].values, a[name].values, err_msg=name)
        assert Model.from_dict(model.to_dict()) == model
        toml = Path(folder) / "model.toml"
        toml.write_text(model.to_toml())
        assert Model.from_toml(toml) == model


def check_pair_predictions(likelihood, inference, kernel=None):
    """A fitted model predicts, scores and exports through the likelihood's operations: the
    predictive summaries are ``predictive`` at ``predict_f``'s moments, ``log_predictive`` is
    the likelihood's at them and finite, and ``to_inference_data`` records ``log_density`` of
    its draws (with a posterior-predictive group exactly where the likelihood draws y).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        One of one latent function without Gaussian observation noise.
    inference : gpdsl.inference.Inference
    kernel : gpdsl.kernels.Kernel, optional
        As :func:`pair_model`.
    """
    y = pair_targets(likelihood)
    model = pair_model(likelihood, inference, kernel)
    post = model.fit(pair_inputs(model), y, max_iter=3)
    X_new, y_new = inputs_for(model.kernel, XP[:5] + 0.1), y[:5]
    bound = bind(likelihood, post.values, "likelihood").for_rows(X_new)
    mean, var = post.predict_f(X_new)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)       # a predictive of f alone says so
        summary = bound.predictive(mean, var)
        predicted = post.predict(X_new)
    for name, value in summary.items():
        np.testing.assert_allclose(predicted[name].values, value, rtol=1e-12, atol=1e-14, err_msg=name)
    scores = post.log_predictive(X_new, y_new)
    assert np.all(np.isfinite(scores))
    np.testing.assert_allclose(scores, bound.log_predictive(mean, var, bound.prepare_targets(y_new)),
                               rtol=1e-12, atol=1e-14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)       # a likelihood that draws no y says so
        idata = post.to_inference_data(X_new, y_new, draws=20, chains=1)
    f = idata.posterior["f"].values
    np.testing.assert_allclose(idata.log_likelihood["y"].values,
                               bound.log_density(bound.prepare_targets(y_new), f), rtol=1e-12, atol=1e-14)
    assert hasattr(idata, "posterior_predictive") == _draws_y(bound)


def check_pair_dask_equals_in_memory(likelihood, inference, kernel=None):
    """The objective and its gradients with a Dask X (chunks of 5 rows) equal the in-memory ones.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
    inference : gpdsl.inference.Inference
        A method and likelihood that both support Dask chunks.
    kernel : gpdsl.kernels.Kernel, optional
        As :func:`pair_model`.
    """
    import dask.array as da
    chunked = dataclasses.replace(inference, chunk_size=5) if hasattr(inference, "chunk_size") else inference
    model = pair_model(likelihood, chunked, kernel)
    X = pair_inputs(model)
    y = likelihood.for_rows(X).prepare_targets(pair_targets(likelihood))
    table = model.parameter_table(X, Z0 if model.sparse else None)
    values = table.values()
    Z = values.pop("inducing.Z", None)
    memory = model.evaluate(values, X, y, Z)
    lazy = model.evaluate(values, da.from_array(X, chunks=(5, X.shape[1])), y, Z)
    np.testing.assert_allclose(lazy.log_evidence, memory.log_evidence, rtol=1e-10, atol=1e-10)
    for name, g in memory.grads.items():
        np.testing.assert_allclose(lazy.grads[name], g, rtol=1e-9, atol=1e-10, err_msg=name)


def pair_checks(likelihood, inference):
    """The pair checks that apply to a (likelihood, method) pair the method accepts.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
    inference : gpdsl.inference.Inference

    Returns
    -------
    list of callable
        Each ``check(likelihood, inference)``.
    """
    checks = [check_pair_gradients, check_pair_fitted_model_round_trips]
    if likelihood.n_latent == 1 and not likelihood.observation_noise:
        checks.append(check_pair_predictions)
    if (inference.supports_dask_chunks and likelihood.supports_dask_chunks
            and importlib.util.find_spec("dask") is not None):
        checks.append(check_pair_dask_equals_in_memory)
    return checks


def pairs(likelihoods=None, methods=None):
    """Every (likelihood variant, tightened method variant) pair the method accepts.

    Parameters
    ----------
    likelihoods : list of Likelihood classes or instances, optional
        Default: the registered likelihood classes (:func:`registered`).
    methods : list of Inference classes or instances, optional
        Default: the registered methods.

    Returns
    -------
    list of (Likelihood, Inference)
    """
    likelihoods = registered(Likelihood) if likelihoods is None else likelihoods
    methods = registered(Inference) if methods is None else methods
    return [(lik, tight(method)) for m in methods for method in _instances(m)
            for c in likelihoods for lik in _instances(c) if method.accepts(lik)]
