"""Observation models: predictive probabilities and log densities against scipy."""
import numpy as np
import pytest
from scipy import integrate, special, stats

import gpdsl as gd


def test_bernoulli_predictive_matches_quadrature():
    m, v = np.array([-1.5, 0.0, 0.7, 2.0]), np.array([0.3, 2.0, 0.01, 4.0])
    for link, f in (("probit", lambda t, b: special.ndtr(t + b)), ("logit", lambda t, b: special.expit(t + b))):
        lik = gd.likelihoods.Bernoulli(link, bias=0.4)
        p = lik.predictive({"likelihood.bias": np.array(0.4)}, "likelihood", m, v)["p"]
        for i in range(4):
            ref, _ = integrate.quad(lambda t: f(t, 0.4) * stats.norm.pdf(t, m[i], np.sqrt(v[i])), -np.inf, np.inf)
            assert p[i] == pytest.approx(ref, abs=1e-9)


def test_log_densities_match_scipy():
    f = np.array([-2.0, -0.3, 0.0, 1.1])
    bern = gd.likelihoods.Bernoulli("probit", bias=0.2)
    values = {"likelihood.bias": np.array(0.2)}
    y = np.array([1.0, -1.0, 1.0, -1.0])
    np.testing.assert_allclose(bern.log_density(values, "likelihood", y, f), np.log(special.ndtr(y * (f + 0.2))),
                               rtol=1e-12)
    logit = gd.likelihoods.Bernoulli("logit", bias=0.2)
    np.testing.assert_allclose(logit.log_density(values, "likelihood", y, f), np.log(special.expit(y * (f + 0.2))),
                               rtol=1e-12)
    counts = np.array([0.0, 3.0, 1.0, 7.0])
    np.testing.assert_allclose(gd.likelihoods.Poisson().log_density({}, "likelihood", counts, f),
                               stats.poisson.logpmf(counts, f ** 2), rtol=1e-12)
    with pytest.raises(ValueError, match="Bernoulli: link must be 'probit' or 'logit'"):
        gd.likelihoods.Bernoulli("cloglog")
