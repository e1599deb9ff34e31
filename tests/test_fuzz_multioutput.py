"""Issue 48: the multi-output fuzz variants (``tests/fuzz_multioutput.py``) and the checks they
add or generalise: registration after the single-output variants, the layouts and parts the cases
draw, and each property shown to fail on a posterior that breaks it (the seeded cases themselves
run in ``tests/test_fuzz.py``)."""
import warnings

import numpy as np
import pytest

import fuzz_cases
import fuzz_multioutput
import gpdsl as gd
from fuzz_cases import VARIANTS, make_case
from fuzz_multioutput import FORMS
from test_fuzz import _Altered, _fitted


def test_variants_are_registered_after_the_single_output_ones():
    """The multi-output variants come last in VARIANTS (the earlier variants' seeds, which take the
    index, are unchanged: 65 single-output variants) and cannot be registered twice."""
    assert VARIANTS[-len(FORMS):] == tuple(FORMS) and len(VARIANTS) == 65 + len(FORMS)
    assert VARIANTS.index("categorical_pg_minibatch") == 64
    assert all(fuzz_cases.VARIANT_FORMS[v] == FORMS[v] for v in FORMS)
    with pytest.raises(ValueError, match=r"register_variants: variants \['mo_exact'\] are registered already"):
        fuzz_cases.register_variants({"mo_exact": FORMS["mo_exact"]}, fuzz_multioutput.make_case)
    # The same (variant, seed) draws the same case.
    a, b = make_case("mo_laplace_dense", 3), make_case("mo_laplace_dense", 3)
    assert a.model == b.model and np.array_equal(a.y, b.y, equal_nan=True)


def test_cases_draw_every_layout_and_part():
    """Over 40 seeds: both layouts, missing entries, P = 2, 3 and 4, ICM and LMC, every family with
    Laplace; isotopic Y keeps an entry of each output, long X's output column is 0..P-1 with
    every output present, and the held-out data are in the training layout."""
    seen = set()
    for seed in range(40):
        case = make_case("mo_laplace_dense", seed)
        P = case.model.kernel.output_count
        seen |= {("P", P), ("kernel", type(case.model.kernel).__name__), ("layout", case.notes["layout"])}
        seen |= {("family", type(part).__name__) for part in case.model.likelihood.likelihoods}
        if case.notes["layout"] == "isotopic":
            assert case.y.shape == (case.X.shape[0], P) and np.all((~np.isnan(case.y)).any(axis=0))
            assert case.X_test.shape[1] == case.X.shape[1] and case.y_test.shape == (case.X_test.shape[0], P)
            seen |= {("missing", bool(np.isnan(case.y).any()))}
        else:
            assert set(case.X[:, -1]) == set(range(P)) and case.y.shape == (case.X.shape[0],)
            assert set(case.X_test[:, -1]) <= set(range(P)) and case.y_test.shape == (case.X_test.shape[0],)
        if P >= 3:
            assert {type(part).__name__ for part in case.model.likelihood.likelihoods} == {"Gaussian", "Bernoulli",
                                                                                           "Poisson"}
    assert {("P", 2), ("P", 3), ("P", 4), ("kernel", "ICM"), ("kernel", "LMC"), ("layout", "isotopic"),
            ("layout", "heterotopic"), ("missing", True), ("missing", False), ("family", "Gaussian"),
            ("family", "Bernoulli"), ("family", "Poisson")} <= seen


def _has_shared_z(post):
    return post.model.inducing is not None and not post.model.inducing.selects_training_rows


def test_fitted_inducing_is_the_shared_z_of_a_multi_output_fit():
    """The shared Z (M, D) of a multi-output fit is what the final-gradient check evaluates at: its
    expansion is the state's long Z; greedy selection's long rows are kept as they are."""
    case, post = _fitted("mo_vfe", want=_has_shared_z)
    Z = fuzz_cases.fitted_inducing(post)
    assert Z.shape[1] == post.input_dims
    np.testing.assert_array_equal(gd.multioutput.expand_inducing(Z, post.output_count), post.state.Z)
    case, post = _fitted("mo_vfe", want=lambda p: p.model.inducing.selects_training_rows)
    assert fuzz_cases.fitted_inducing(post) is post.state.Z


def _moved(cov, change):
    out = np.array(cov)
    change(out.reshape(int(np.sqrt(out.size)), -1))
    return out


@pytest.mark.parametrize("change, kind", [
    (lambda C: C.__setitem__((0, 1), C[0, 1] + 1e-3 * C[0, 0]), "not symmetric"),
    (lambda C: C.__isub__(np.eye(C.shape[0]) * 1e3 * np.max(np.diag(C))), "not positive semi-definite"),
    (lambda C: C.__setitem__((1, 1), C[1, 1] * 1.01 + 1e-3), "diagonal is not predict's f_var"),
])
def test_full_covariance_property_fails_on_a_broken_covariance(change, kind):
    case, post = _fitted("mo_exact")
    assert fuzz_multioutput._check_full_covariance(case, post, []) is None
    mean, cov = post.predict_f_full_cov(case.X_test)
    broken = _Altered(post, predict_f_full_cov=lambda X: (mean, _moved(cov, change)))
    assert fuzz_multioutput._check_full_covariance(case, broken, []).kind == f"failure: predict_f_full_cov {kind}"
    shifted = _Altered(post, predict_f_full_cov=lambda X: (mean + 1.0, cov))
    outcome = fuzz_multioutput._check_full_covariance(case, shifted, [])
    assert outcome.kind == "failure: predict_f_full_cov mean is not predict's f_mean"


def test_save_load_property_fails_where_the_loaded_posterior_predicts_otherwise(monkeypatch):
    case, post = _fitted("mo_fitc")
    assert fuzz_multioutput._check_save_load(case, post, []) is None
    other = _Altered(post, predict=lambda X: post.predict(X) * 2.0)
    monkeypatch.setattr(gd, "load", lambda path: other)
    outcome = fuzz_multioutput._check_save_load(case, post, [])
    assert outcome.kind == "failure: loaded posterior predicts otherwise" and "f_mean" in outcome.detail


def _parts(model):
    return {type(part).__name__ for part in model.likelihood.likelihoods}


def _seeds_with(variant, want, seeds=range(80)):
    """The seeds of ``variant`` whose model (drawn, not fitted) ``want`` holds for, the cases fitted
    without optimisation first (quick to fit)."""
    cases = [make_case(variant, seed) for seed in seeds]
    return [case.seed for case in sorted(cases, key=lambda case: case.optimize) if want(case.model)]


def test_per_output_predictions_are_judged_by_each_rows_part():
    """A likelihood per output: NaN p is documented at a Gaussian or Poisson output's rows and is
    a failure at a Bernoulli output's; log_predictive > 0 fails at a Bernoulli or Poisson output's
    rows, not at a Gaussian output's."""
    case, post = _fitted("mo_laplace_dense",
                         seeds=_seeds_with("mo_laplace_dense", lambda m: {"Gaussian", "Bernoulli"} <= _parts(m)))
    assert fuzz_cases._check_predictions_everywhere(case, post, []) is None

    def without_p(X, offset=None):
        pred = post.predict(X, offset=offset)
        pred["p"] = pred["p"] * np.nan
        return pred

    outcome = fuzz_cases._check_predictions_everywhere(case, _Altered(post, predict=without_p), [])
    assert outcome.kind == "failure: non-finite p (held-out)"

    def above_zero_at(discrete):
        def log_predictive(X, y, offset=None):
            lp = post.log_predictive(X, y, offset=offset)
            rows = gd.multioutput.query(X, post.input_dims, post.output_count).X
            kinds = np.array([type(post.model.likelihood.likelihoods[int(p)]).__name__ != "Gaussian"
                              for p in rows[:, -1]]).reshape(lp.shape)
            return np.where(kinds == discrete, 1e-9, lp)
        return _Altered(post, log_predictive=log_predictive)

    assert fuzz_cases._check_predictions_everywhere(case, above_zero_at(discrete=False), []) is None
    outcome = fuzz_cases._check_predictions_everywhere(case, above_zero_at(discrete=True), [])
    assert outcome.kind == "failure: log_predictive > 0 for discrete targets"


def test_evidence_bound_is_checked_on_the_long_rows():
    """The evidence bound of a likelihood per output without Gaussian parts (whose bound is none)
    is the sum of its parts' on the long rows: an evidence far above it fails."""
    case, post = _fitted("mo_vgp", seeds=_seeds_with("mo_vgp", lambda m: "Gaussian" not in _parts(m)))
    assert fuzz_cases._check_evidence_bound(case, post, []) is None
    above = _Altered(post, log_evidence=1e6)
    outcome = fuzz_cases._check_evidence_bound(case, above, [])
    assert outcome.kind == "failure: log evidence above the likelihood's bound"


@pytest.mark.parametrize("flagged", [True, False])
def test_constant_model_property_fails_on_a_wrong_flag(flagged):
    """A multi-output Gaussian fit whose constant_model flag says otherwise than the dense constant
    model fails, and so does a flag without its warning; fits of both kinds occur among the seeds."""
    case, post = _fitted("mo_exact", want=lambda p: p.constant_model == flagged)
    said = [warnings.WarningMessage(gd.ConvergenceWarning("Exact: ... no better than the constant model's ..."),
                                    gd.ConvergenceWarning, __file__, 0)]
    assert fuzz_multioutput._check_constant_model_flag(case, post, said if flagged else []) is None
    wrong = _Altered(post, constant_model=not flagged)
    outcome = fuzz_multioutput._check_constant_model_flag(case, wrong, said)
    assert outcome.kind == "failure: constant_model flag disagrees with the constant model"
    if flagged:
        outcome = fuzz_multioutput._check_constant_model_flag(case, post, [])
        assert outcome.kind == "failure: constant_model=True without its ConvergenceWarning"


def test_vgp_fit_of_mixed_outputs_on_unit_scale_data():
    """Mixed Gaussian, Bernoulli and Poisson outputs on unit-scale data (found while fuzzing):
    VGP's q warm-started from a line-search point's q (bound -1.2e80 where a cold start gives
    4.5) ended its capped steps at -2.8e157 at an earlier iterate's hyperparameters (-9.348 cold),
    and the fit refused as out of range; an unconverged warm start below the cold start's bound is
    now redone cold (tests/test_vgp.py), and the fit ends finite."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-1.0, 1.0, (15, 1))
    Y = np.column_stack([np.sin(3.0 * X[:, 0]), (X[:, 0] > 0).astype(float), rng.poisson(2.0, 15).astype(float)])
    Y[2, 0] = Y[5, 1] = np.nan
    L = gd.likelihoods
    model = gd.Model(gd.kernels.ICM(gd.kernels.SquaredExponential(), 3, rank=2),
                     L.PerOutput((L.Gaussian(0.1), L.Bernoulli("probit"), L.Poisson(link="log"))),
                     inference=gd.inference.VGP())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        post = model.fit(X, Y, max_iter=5)
    assert np.isfinite(post.log_evidence)


def _site_draws(case):
    """What an EP/QP case drew: its form, parts (Bernoulli with its link and whether it has a
    bias, Poisson with its link), mean, layout, schedule and QP's hyperparameter rule."""
    model = case.model
    inference = model.inference
    drawn = {("form", "dense" if model.inducing is None else inference.approximation),
             ("layout", case.notes["layout"]), ("mean", type(model.mean).__name__),
             ("schedule", inference.schedule), ("kernel", type(model.kernel).__name__)}
    if isinstance(inference, gd.inference.QP):
        drawn.add(("hyperparameters", inference.hyperparameters))
    for part in model.likelihood.likelihoods:
        name = type(part).__name__
        if isinstance(part, gd.likelihoods.Bernoulli):
            name += f"({part.link}, bias {'0' if part.bias == 0.0 else 'drawn'})"
        elif isinstance(part, gd.likelihoods.Poisson):
            name += f"({part.link})"
        drawn.add(("part", name))
    return drawn


@pytest.mark.parametrize("variant", ["mo_ep", "mo_qp"])
def test_site_method_cases_draw_every_form_part_and_mean(variant):
    """Over 60 seeds an EP/QP case draws the dense form and the sparse form with FITC's and DTC's
    prior, every family with a site model (Bernoulli probit and logit with a drawn bias, Poisson
    of either link, Student-t, negative binomial) beside Gaussian outputs, a mean per output and
    none, both layouts, both schedules, ICM and LMC, and QP's Algorithm 1; the parts are mixed
    (two families at least) and a mean per output has one part an output."""
    seen = set()
    for seed in range(60):
        case = make_case(variant, seed)
        P = case.model.kernel.output_count
        parts = case.model.likelihood.likelihoods
        assert isinstance(case.model.likelihood, gd.likelihoods.PerOutput) and len(parts) == P
        assert len({type(part) for part in parts}) >= 2
        if case.model.mean is not None:
            assert isinstance(case.model.mean, gd.means.PerOutput) and len(case.model.mean.means) == P
        seen |= _site_draws(case)
    wanted = {("form", "dense"), ("form", "fitc"), ("form", "dtc"), ("layout", "isotopic"),
              ("layout", "heterotopic"), ("mean", "PerOutput"), ("mean", "NoneType"), ("schedule", "sequential"),
              ("schedule", "parallel"), ("kernel", "ICM"), ("kernel", "LMC"), ("part", "Gaussian"),
              ("part", "StudentT"), ("part", "Bernoulli(probit, bias drawn)"), ("part", "Bernoulli(logit, bias drawn)"),
              ("part", "Poisson(log)"), ("part", "Poisson(square)"), ("part", "NegativeBinomial")}
    if variant == "mo_qp":
        wanted |= {("hyperparameters", "qp"), ("hyperparameters", "ep")}
    assert wanted <= seen, sorted(wanted - seen)


def test_student_t_parts_undefined_moments_are_allowed_at_their_rows_only():
    """A Student-t part's y_mean is NaN for df <= 1 (documented): NaN at its rows passes where its
    fitted df is <= 1 and fails where it is above 1, and NaN at another part's rows fails."""
    case, post = _fitted("mo_ep", seeds=_seeds_with("mo_ep", lambda m: "StudentT" in _parts(m)))
    assert fuzz_cases._check_predictions_everywhere(case, post, []) is None
    p = next(p for p, part in enumerate(post.model.likelihood.likelihoods)
             if isinstance(part, gd.likelihoods.StudentT))

    def nan_mean_at(outputs, df):
        def predict(X, offset=None):
            pred = post.predict(X, offset=offset)
            rows = gd.multioutput.query(X, post.input_dims, post.output_count).X
            at = np.isin(rows[:, -1], outputs).reshape(pred["y_mean"].shape)
            pred["y_mean"] = pred["y_mean"].where(~at)
            return pred
        return _Altered(post, predict=predict, values={**post.values, f"likelihood.{p}.df": df})

    assert fuzz_cases._check_predictions_everywhere(case, nan_mean_at([p], 0.8), []) is None
    outcome = fuzz_cases._check_predictions_everywhere(case, nan_mean_at([p], 1.5), [])
    assert outcome.kind == "failure: non-finite y_mean (held-out)"
    every = list(range(post.output_count))
    outcome = fuzz_cases._check_predictions_everywhere(case, nan_mean_at(every, 0.8), [])
    assert outcome.kind == "failure: non-finite y_mean (held-out)"
