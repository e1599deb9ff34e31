"""Issue 25: every posterior carries a record of how its fit ended (gpdsl.diagnostics.FitDiagnostics),
``converged`` is derived from it by one rule, and a fit never says "converged" with a large gradient."""

import json
import os
import warnings

import numpy as np
import pytest

import gpdsl as gd
from fuzz_cases import final_gradient
from gpdsl.diagnostics import STOP_REASONS, FitDiagnostics, converged_rule, gradient_tolerance

SE = gd.kernels.SquaredExponential


def test_item2_scipy_stop_on_a_zero_step_restarts_and_never_claims_convergence():
    """Issue 25 item 2, its reproduction: at 126e8de this VFE fit stopped after 10 iterations at
    evidence 773.8, converged=True, with |dLE/dlog lengthscale| = 9.5e3.  Now L-BFGS-B is restarted
    from its last point, which climbs far higher, and converged=True only with a small gradient.

    Where it climbs to, the kernel variance ~4e10 without jitter, the evidence is rounding noise:
    that it is flagged (evidence_rounding > 1 nat, gd.EvidenceRoundingWarning) and that the fit
    with jitter=1e-6 is not, is tests/test_evidence_rounding.py's.  Here: the predictions are
    fine all the same.  On 500 held-out rows the latent mean is within the noise sd 0.1 of
    sin(x_1) in root mean square (measured 0.056), and the mean log predictive density of noisy
    targets within 0.3 nats of the true model's, N(y | sin(x_1), 0.1^2) (measured 0.75 against
    0.86; 0.3 is what a mean off by ~0.08 rms costs)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (5000, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(5000)
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), gd.inducing.Fixed(X[:20].copy()), gd.inference.VFE())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = model.fit(X, y)
    d = post.diagnostics
    assert d.optimizer_restarts >= 1
    grad, name = final_gradient(model, post.values, post.state.Z, X, y)
    np.testing.assert_allclose(d.grad_norm, grad, rtol=1e-6)
    assert d.grad_name == name
    assert d.grad_tol == pytest.approx(5.0)           # 1e-3 * N
    if post.converged:
        assert grad <= d.grad_tol
    else:
        assert any(issubclass(w.category, gd.ConvergenceWarning) for w in caught)
    X_test = np.random.default_rng(5).uniform(-3, 3, (500, 3))
    truth = np.sin(X_test[:, 0])
    y_test = truth + 0.1 * np.random.default_rng(6).standard_normal(500)
    mean, _ = post.predict_f(X_test)
    assert np.sqrt(np.mean((mean - truth) ** 2)) < 0.1
    true_model = np.mean(-0.5 * np.log(2 * np.pi * 0.01) - 0.5 * (y_test - truth) ** 2 / 0.01)
    assert np.mean(post.log_predictive(X_test, y_test)) > true_model - 0.3


def test_a_stop_is_confirmed_by_the_models_own_evaluation():
    """EP within a fit runs its sites to fit_tol = 1e-4; on Poisson's square link with counts up to
    ~1e6 (evidence -3.4e6) L-BFGS-B stopped where that gradient was 0.089, and the fit said
    converged (fuzz poisson_ep_dense 70110).  The model's own evaluations there, each from the
    previous one's sites (all converged to EP's tol = 1e-6, none settling below it), give 2.56,
    1.55 and 1.64: the gradient is not small at any resolution the sites reach.  The stop is now
    confirmed by the model's own evaluation from the fit's last sites; here that says 2.56, and the
    fit says converged=False, with a ConvergenceWarning."""
    from fuzz_cases import make_case, _evaluated_model
    case = make_case("poisson_ep_dense", 70110)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = case.model.fit(case.X, case.y, optimize=case.optimize, max_iter=case.max_iter, offset=case.offset)
    model, warm, Z, tolerance = _evaluated_model(case, post)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grad, _ = final_gradient(model, post.values, Z, case.X, case.y, warm=warm, offset=case.offset)
    d = post.diagnostics
    assert grad > 10 * tolerance                       # measured 1.55 against 0.1
    assert not post.converged
    assert d.grad_norm > d.grad_tol                    # measured 2.56
    assert any(issubclass(w.category, gd.ConvergenceWarning) for w in caught)


def test_converged_rule_table():
    """The documented rule, case by case."""
    tol = 1.0
    assert converged_rule("gradient", 0.5, tol, (), None)
    assert not converged_rule("gradient", 2.0, tol, (), None)            # large final gradient
    assert converged_rule("plateau", 0.5, tol, (), True)
    assert not converged_rule("plateau", 0.5, tol, (), False)            # local iteration not converged
    assert not converged_rule("max_iter", 0.0, tol, ("max_iter",), None)
    assert not converged_rule("line_search", 0.0, tol, (), None)
    assert not converged_rule("objective_change", 0.5, tol, ("max_reinit",), None)
    assert converged_rule("objective_change", 0.5, tol, ("max_m",), None)   # a size cap, recorded only
    # A stochastic stop is confirmed by the full pass's gradient (issue 45): none, no claim.
    assert converged_rule("stochastic_rule", 0.5, tol, (), True)
    assert not converged_rule("stochastic_rule", 2.0, tol, (), True)
    assert not converged_rule("stochastic_rule", np.nan, tol, (), True)
    assert converged_rule("not_optimised", np.nan, tol, (), None)
    assert not converged_rule("gradient", np.nan, tol, (), None)          # no gradient, no claim
    assert converged_rule("unrecorded", np.nan, tol, (), None, recorded=True)
    assert gradient_tolerance(10) == pytest.approx(0.1) and gradient_tolerance(5000) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="stop_reason must be one of"):
        FitDiagnostics("tired")


def test_every_fit_has_a_record_shown_saved_and_loaded(toy_regression, tmp_path):
    X, y = toy_regression
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), gd.inducing.KMeans(10, seed=0), gd.inference.VFE())
    post = model.fit(X, y)
    d = post.diagnostics
    assert d.stop_reason in STOP_REASONS and d.stop_reason in ("gradient", "objective_change")
    assert post.converged == d.converged and d.converged
    assert d.grad_norm <= d.grad_tol and d.n_iterations == post.n_iterations > 0
    assert (post.jitter, post.ridge, post.constant_model) == (d.jitter, d.ridge, d.constant_model)
    assert f"stop={d.stop_reason}" in repr(post) and "max|grad|=" in repr(post)
    path = tmp_path / "p.nc"
    post.save(path)
    assert gd.load(path).diagnostics == d
    attrs = post.to_xarray().attrs
    assert json.loads(attrs["diagnostics"])["converged"] is True and attrs["converged"] == 1
    unoptimised = model.fit(X, y, optimize=False).diagnostics
    assert unoptimised.stop_reason == "not_optimised" and unoptimised.converged and np.isnan(unoptimised.grad_norm)


def test_a_version_1_file_loads_with_its_flags_and_an_unrecorded_stop(toy_regression):
    """Files written before the record (format version 1) still load: their converged flag is kept."""
    from gpdsl.io.layout import checksum as _checksum
    X, y = toy_regression
    post = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), gd.inducing.KMeans(10, seed=0),
                    gd.inference.VFE()).fit(X, y)
    ds = post.to_xarray()
    del ds.attrs["diagnostics"]
    ds.attrs["format_version"] = 1
    del ds.attrs["checksum"]
    ds.attrs["checksum"] = _checksum(ds)
    old = gd.from_xarray(ds)
    assert old.diagnostics.stop_reason == "unrecorded" and old.converged and old.n_iterations == post.n_iterations
    np.testing.assert_array_equal(old.predict_f(X[:5])[0], post.predict_f(X[:5])[0])
    ds2 = post.to_xarray()
    ds2.attrs["converged"] = 0                       # disagrees with the record
    del ds2.attrs["checksum"]
    ds2.attrs["checksum"] = _checksum(ds2)
    with pytest.raises(gd.PosteriorFileError, match="'diagnostics'"):
        gd.from_xarray(ds2)


def test_item3_the_stopping_rule_is_recorded_and_a_bias_that_runs_away_is_a_ridge():
    """Issue 25 item 3: fits stopped by the plateau rule said nothing, and a likelihood bias that grew
    with the kernel variance was not looked at.  Imbalanced, separable labels (a probit
    classifier with a free bias: one class beyond x = 1.5) send the kernel variance and the bias
    up together; the record names the rule and the ridge, and the warning the parameter."""
    rng = np.random.default_rng(3)
    X = np.sort(rng.uniform(-3, 3, (60, 1)), axis=0)
    y = np.where(X[:, 0] > 1.5, 1.0, -1.0)
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Bernoulli("probit", bias=0.0),
                     gd.inducing.Optimized(gd.inducing.KMeans(6, seed=0)), gd.inference.EP())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = model.fit(X, y)
    d = post.diagnostics
    assert d.stop_reason in STOP_REASONS
    assert d.ridge in ("kernel.variance", "likelihood.bias")
    ridge = [str(w.message) for w in caught if "evidence ridge" in str(w.message)]
    assert len(ridge) == 1 and d.ridge in ridge[0] and "classes are nearly separable" in ridge[0]


def test_item3_a_regression_ridge_is_not_explained_as_a_classifier():
    """Issue 25 item 3: the ridge message spoke of "a classifier's latent scale" when it stopped a
    Gaussian regression on a linear trend."""
    X = np.linspace(0, 10, 80)[:, None]
    y = 3.0 * X[:, 0] + 0.05 * np.random.default_rng(0).standard_normal(80)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1)).fit(X, y)
    messages = [str(w.message) for w in caught if issubclass(w.category, gd.ConvergenceWarning)]
    assert all("classif" not in m and "classes" not in m for m in messages)
    if post.ridge is not None:
        assert any("evidence ridge" in m and "trend" in m for m in messages)


def test_subsample_at_or_above_n_is_refused(toy_regression):
    """Issue 25 item 8: fit(subsample=n) with n >= N was accepted silently."""
    X, y = toy_regression
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), gd.inducing.KMeans(5, seed=0), gd.inference.VFE())
    for n in (X.shape[0], X.shape[0] + 1):
        with pytest.raises(ValueError, match=rf"subsample = {n} must be smaller than the number of rows, N = 40"):
            model.fit(X, y, subsample=n)


def test_an_abnormal_line_search_stop_is_named_and_explained(toy_regression, monkeypatch):
    """Issue 25 item 8: a full VFE fit on 180,000 rows reported "ABNORMAL: " with an empty reason
    (SciPy's L-BFGS-B gives none for a failed line search).  The record names the rule, the
    message explains it, and the fit is not converged (with a warning)."""
    from scipy import optimize as sp_optimize          # what gpdsl.fitting calls (it imports it at the fit)
    from scipy.optimize import OptimizeResult

    X, y = toy_regression

    def abnormal(fun, x0, **kwargs):
        f, g = fun(x0)
        return OptimizeResult(x=x0, fun=f, jac=g, nit=3, status=2, success=False, message="ABNORMAL: ")

    monkeypatch.setattr(sp_optimize, "minimize", abnormal)
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), gd.inducing.KMeans(10, seed=0), gd.inference.VFE())
    with pytest.warns(gd.ConvergenceWarning, match="line_search: ABNORMAL: the line search found no lower objective"):
        post = model.fit(X, y)
    d = post.diagnostics
    assert d.stop_reason == "line_search" and not post.converged
    assert d.message.startswith("ABNORMAL: the line search found no lower objective")


def test_a_constant_model_fit_gets_no_ridge_warning_on_top(monkeypatch):
    """Issue 25 item 8: the ridge warning fired on a fit already flagged as the constant model
    (whose own warning explains it).  The xor FITC-EP fit of tests/test_fit.py runs up a ridge;
    flagged constant (as a collapsed fit would be), it keeps its ridge record but warns only once."""
    X, y = gd.datasets.xor(40, seed=0)
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Bernoulli("probit", bias=gd.Fixed(0.0)),
                     gd.inducing.Optimized(gd.inducing.KMeans(8, seed=0)), gd.inference.EP())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ridge = model.fit(X, y)
    assert ridge.ridge == "kernel.variance" and any("evidence ridge" in str(w.message) for w in caught)
    import gpdsl.fitting as fitting

    monkeypatch.setattr(fitting, "no_better_than_constant", lambda model, X, y, fit: True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flagged = model.fit(X, y)
    assert flagged.constant_model and flagged.ridge == "kernel.variance"
    assert not any("evidence ridge" in str(w.message) for w in caught)


# A converged minibatch fit's record as gpdsl wrote it before a stochastic-rule stop was confirmed
# by a full pass (dc2ffb8^: "stochastic_rule" was a gradient-free stop, grad_tol NaN written as
# null, converged true), copied from the file tests/data/old_files/minibatch_before_full_pass_check.nc.
OLD_MINIBATCH_RECORD = (
    '{"stop_reason": "stochastic_rule", "message": "stochastic stopping rule after 760 steps: the smoothed '
    'objective per data point changed by 0.0105 nats between the last two 200-step windows (|change| < 0.0157 '
    '= max(stop_tol 0.001, 2 SE 0.0157))", "n_iterations": 760, "grad_norm": 73.82204349742143, "grad_tol": null, '
    '"grad_name": "", "optimizer_restarts": 0, "caps_reached": [], "jitter": 0.0, "ridge": null, "local_sweeps": 0, '
    '"local_converged": true, "clamped_sites": 0, "reinit_rounds": 0, "reinit_stop": null, "small_m_replaced": null, '
    '"subsample": null, "constant_model": false, "recorded_converged": null, "converged": true}')


def test_an_old_minibatch_record_without_a_full_pass_check_reads_as_unconfirmed():
    """Review of issue 45, finding 1: the old record's converged=True is neither refused nor
    believed: it reads as converged=False, says why in its message and summary, keeps the
    writer's True in recorded_converged, and round-trips."""
    d = FitDiagnostics.from_json(OLD_MINIBATCH_RECORD)
    assert d.unconfirmed_stop and d.converged is False and d.recorded_converged is True
    assert "no check recorded, converged=False" in d.message
    assert "no full-pass check recorded" in d.summary() and "NOT confirmed converged" in d.summary()
    assert FitDiagnostics.from_json(d.to_json()) == d
    # A current record of the same stop has its check's tolerance and no such note.
    checked = FitDiagnostics("stochastic_rule", grad_norm=0.05, grad_tol=0.4)
    assert checked.converged and not checked.unconfirmed_stop and "full-pass" not in checked.summary()
    # Any other disagreement is still refused.
    record = json.loads(checked.to_json())
    record["converged"] = False
    with pytest.raises(ValueError, match="'converged' is False but the record's fields give True"):
        FitDiagnostics.from_json(json.dumps(record))


def test_an_old_minibatch_file_loads_unconfirmed_and_saves_again(tmp_path):
    """The file itself, written by gpdsl before the full-pass check (dc2ffb8^: SVGP(batch_size=50)
    on 400 rows of sin(2x) + noise, flat attribute converged=1), loads as converged=False with the
    note in its repr, and a save of it loads again unchanged."""
    path = os.path.join(os.path.dirname(__file__), "data", "old_files", "minibatch_before_full_pass_check.nc")
    post = gd.load(path)
    assert post.converged is False and post.diagnostics.recorded_converged is True
    assert post.diagnostics.n_iterations == 760 and "NOT confirmed converged" in repr(post)
    post.save(tmp_path / "again.nc")
    back = gd.load(tmp_path / "again.nc")
    assert back.converged is False and back.diagnostics == post.diagnostics
