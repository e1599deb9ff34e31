"""GPML 4.2's kernel and mean-function oracles (``tests/data/oracles/gpml/kernels/*.json``) as a
check a test calls with the gpdsl model of the same configuration.

A case file holds GPML's log-space hyperparameters (``hyp_cov``, ``hyp_mean``, ``hyp_lik``), the
data set it used (``k1d``/``k2d``: ``data/<set>_{train,test,xu}.csv``) and GPML's results.  The test
gives the gpdsl model and ``natural(hyp_cov, hyp_mean, hyp_lik)``, the map from GPML's vector to
gpdsl's natural values by entry name; the gradients GPML reports (d nlZ / d hyp) are then gpdsl's
natural-scale gradients chained through that map's Jacobian, taken by a complex step (exact to
rounding for the exp/power maps used here).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import shared_path


def load_case(name):
    """The oracle ``gpml_<name>.json`` with its train/test/inducing arrays.

    Returns
    -------
    dict
        The file's fields plus ``X``, ``y``, ``Xs``, ``ys`` and (sparse files) ``Z``.
    """
    ref = json.loads(shared_path("oracles", "gpml", "kernels", f"gpml_{name}.json").read_text())
    # The EP files ran on Ripley's synth as standardised for GPML, with the first 40 test rows.
    stem, rows = (f"{ref['data']}_%s_std", 40) if ref["data"] == "synth" else (f"{ref['data']}_%s", None)
    train = np.loadtxt(shared_path("oracles", "data", f"{stem % 'train'}.csv"), delimiter=",", ndmin=2)
    test = np.loadtxt(shared_path("oracles", "data", f"{stem % 'test'}.csv"), delimiter=",", ndmin=2)[:rows]
    ref["X"], ref["y"] = train[:, :-1], train[:, -1]
    ref["Xs"], ref["ys"] = test[:, :-1], test[:, -1]
    if "xu" in ref:
        ref["Z"] = np.atleast_2d(np.asarray(ref["xu"], dtype=float))
        if ref["Z"].shape[0] == 1 and ref["X"].shape[1] == 1:
            ref["Z"] = ref["Z"].T
    return ref


def _flat(v):
    return np.atleast_1d(np.asarray(v, dtype=float))


def gpml_gradient(natural, ref, grads):
    """GPML's (dnlZ_cov, dnlZ_mean, dnlZ_lik) from gpdsl's natural gradients of the log evidence.

    Parameters
    ----------
    natural : callable (hyp_cov, hyp_mean, hyp_lik) -> dict of str to array_like
    ref : dict
        The case (its GPML hyperparameters).
    grads : dict of str to ndarray
        d log evidence / d natural value, by entry name.

    Returns
    -------
    tuple of ndarray
    """
    parts = [_flat(ref["hyp_cov"]), _flat(ref["hyp_mean"]), _flat(ref["hyp_lik"])]
    sizes = [p.size for p in parts]
    hyp = np.concatenate(parts)
    step = 1e-30
    total = np.zeros(hyp.size)
    for k in range(hyp.size):
        h = hyp.astype(complex)
        h[k] += 1j * step
        cov, mean, lik = np.split(h, np.cumsum(sizes)[:-1])
        for name, value in natural(cov, mean, lik).items():
            derivative = np.imag(np.asarray(value)) / step
            total[k] -= float(np.sum(np.asarray(grads[name]) * derivative))
    return tuple(np.split(total, np.cumsum(sizes)[:-1]))


def check_case(name, model, natural, *, rtol=1e-8, atol=1e-10):
    """Assert gpdsl's nlZ, its gradients (and d/dZ for sparse files) and the predictions at the
    test inputs equal GPML's.

    Parameters
    ----------
    name : str
        The case, without ``gpml_`` and ``.json``.
    model : gpdsl.Model
        The gpdsl model of the same configuration.
    natural : callable (hyp_cov, hyp_mean, hyp_lik) -> dict of str to array_like
        gpdsl's natural values by entry name from GPML's log-space vectors (works on complex
        arrays).
    rtol, atol : float
        Tolerances (1e-8 for exact files, 1e-6 for the sparse and EP files).

    Returns
    -------
    gpdsl.Posterior
    """
    ref = load_case(name)
    values = {k: np.real(np.asarray(v)) for k, v in
              natural(_flat(ref["hyp_cov"]), _flat(ref["hyp_mean"]), _flat(ref["hyp_lik"])).items()}
    Z = ref.get("Z")
    table = model.parameter_table(ref["X"], Z)
    start = table.values()
    start.pop("inducing.Z", None)          # Z is the file's; d/dZ comes back as evaluation.dZ
    missing = sorted(set(values) - set(start))
    assert not missing, f"natural() names entries the model does not have: {missing}"
    start.update({k: np.asarray(v, dtype=float).reshape(start[k].shape) for k, v in values.items()})
    y = model.likelihood.prepare_targets(ref["y"]) if hasattr(model.likelihood, "prepare_targets") else ref["y"]
    evaluation = model.evaluate(start, ref["X"], y, Z, need_grad=True)
    assert -evaluation.log_evidence == pytest.approx(ref["nlZ"], rel=rtol, abs=atol)
    d_cov, d_mean, d_lik = gpml_gradient(natural, ref, evaluation.grads)
    np.testing.assert_allclose(d_cov, _flat(ref["dnlZ_cov"]), rtol=rtol, atol=atol * 10)
    np.testing.assert_allclose(d_mean, _flat(ref["dnlZ_mean"]), rtol=rtol, atol=atol * 10)
    np.testing.assert_allclose(d_lik, _flat(ref["dnlZ_lik"]), rtol=rtol, atol=atol * 10)
    if Z is not None:
        np.testing.assert_allclose(-evaluation.dZ, np.asarray(ref["dnlZ_xu"]).reshape(Z.shape), rtol=rtol,
                                   atol=atol * 10)
    posterior = _posterior_at(model, start, ref)
    prediction = posterior.predict(ref["Xs"])
    np.testing.assert_allclose(prediction.f_mean, ref["fmu"], rtol=rtol, atol=atol * 10)
    np.testing.assert_allclose(prediction.f_var, ref["fs2"], rtol=rtol, atol=atol * 10)
    lp = posterior.log_predictive(ref["Xs"], ref["ys"])
    np.testing.assert_allclose(lp, ref["lp"], rtol=rtol, atol=atol * 10)
    if ref["lik"] == "likGauss":
        np.testing.assert_allclose(prediction.y_mean, ref["ymu"], rtol=rtol, atol=atol * 10)
        np.testing.assert_allclose(prediction.y_var, ref["ys2"], rtol=rtol, atol=atol * 10)
    return posterior


def _posterior_at(model, start, ref):
    """The posterior at ``start`` without optimising: the model with its parts holding
    ``start``'s values as declared values, fitted with ``optimize=False`` (the inducing spec the
    test declared gives Z)."""
    import dataclasses

    parts = {}
    for part in ("kernel", "likelihood", "mean"):
        component = getattr(model, part, None)
        if component is None:
            continue
        local = {k[len(part) + 1:]: v for k, v in start.items() if k.startswith(part + ".")}
        parts[part] = component.bind(local) if local else component
    return dataclasses.replace(model, **parts).fit(ref["X"], ref["y"], optimize=False)


__all__ = ["load_case", "check_case", "gpml_gradient"]
