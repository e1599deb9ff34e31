"""gpdsl.io.arviz's held-out ELPD and model comparison: the same names and numbers under ArviZ 0.x
(InferenceData, ``elpd_loo``) and 1.x (xarray.DataTree, ``elpd``), checked against dense formulas."""
import warnings

import arviz as az
import numpy as np
import pytest

import gpdsl as gd
from gpdsl.io.arviz import compare, elpd_estimate, held_out_elpd

SE = gd.kernels.SquaredExponential


@pytest.fixture(scope="module")
def held_out():
    """Exact and VFE posteriors' draws at 40 held-out points, and their closed-form log predictive."""
    X, y = gd.datasets.snelson_like(120, seed=0)
    Xt, yt = gd.datasets.snelson_like(40, seed=1)
    models = {"exact": gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1)),
              "vfe": gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), gd.inducing.KMeans(4, seed=0),
                              gd.inference.VFE())}
    posteriors = {name: model.fit(X, y) for name, model in models.items()}
    idata = {name: post.to_inference_data(Xt, yt, draws=300, chains=2, seed=0) for name, post in posteriors.items()}
    exact = {name: post.log_predictive(Xt, yt) for name, post in posteriors.items()}
    return idata, exact


def _dense_pointwise(idata):
    """log (1/S) sum_s p(y_i | f_i^(s)) by exp and mean (the log-likelihoods here are of order 1)."""
    likelihood = np.exp(idata.log_likelihood["y"].values.reshape(-1, idata.log_likelihood["y"].shape[-1]))
    return np.log(likelihood.mean(axis=0)), likelihood


def test_held_out_elpd_is_the_log_mean_likelihood(held_out):
    idata, exact = held_out
    for name, data in idata.items():
        pointwise, likelihood = _dense_pointwise(data)
        estimate = elpd_estimate(held_out_elpd(data))
        assert set(estimate) == {"elpd", "se", "p", "n_samples", "n_data_points"}
        assert estimate["n_samples"] == 600 and estimate["n_data_points"] == 40 and estimate["p"] == 0.0
        # logsumexp against exp-then-log: both within a few ulps of the sum of 40 terms of order 1.
        np.testing.assert_allclose(estimate["elpd"], pointwise.sum(), rtol=1e-12)
        np.testing.assert_allclose(estimate["se"], np.sqrt(40 * pointwise.var()), rtol=1e-10)
        # The Monte Carlo estimate against the closed-form Gaussian predictive: the delta method's sd
        # of each point's log-mean, sd(L)/(mean(L) sqrt(S)), summed (a bound on the sum's sd however
        # the joint draws correlate the points), five times, plus the Jensen bias var/(2 mean^2 S).
        relative_var = likelihood.var(axis=0) / likelihood.mean(axis=0) ** 2 / likelihood.shape[0]
        tolerance = 5 * np.sum(np.sqrt(relative_var)) + np.sum(relative_var) / 2
        assert abs(estimate["elpd"] - exact[name].sum()) < tolerance, name


def test_compare_gives_the_same_columns_and_unrounded_numbers(held_out):
    idata, _ = held_out
    elpds = {name: held_out_elpd(data) for name, data in idata.items()}
    table = compare(elpds)
    pointwise = {name: _dense_pointwise(data)[0] for name, data in idata.items()}
    best = max(pointwise, key=lambda name: pointwise[name].sum())
    assert table.index[0] == best and list(table["rank"]) == [0, 1]
    for name, row in table.iterrows():
        # Unrounded (ArviZ 1.x rounds by default) and under 1.x's names in either version.
        assert row["elpd"] == elpd_estimate(elpds[name])["elpd"] and row["p"] == 0.0
        assert row["se"] == elpd_estimate(elpds[name])["se"]
        difference = pointwise[name] - pointwise[best]
        # 1.x's sign: the model's ELPD less the best one's, +0.0 for the best.
        np.testing.assert_allclose(row["elpd_diff"], difference.sum(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(row["dse"], np.sqrt(40 * difference.var()), rtol=1e-10, atol=1e-12)
    assert np.copysign(1.0, table.loc[best, "elpd_diff"]) == 1.0 and table["elpd_diff"].max() == 0.0
    np.testing.assert_allclose(table["weight"].sum(), 1.0, atol=1e-6)   # SLSQP's constraint tolerance


def test_compare_and_elpd_estimate_name_psis_loo_alike(held_out):
    """On InferenceData, az.compare runs ArviZ's own PSIS-LOO: its elpd and p come under the same
    names as az.loo's through elpd_estimate."""
    idata, _ = held_out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)          # Pareto k of held-out points
        table = compare(idata)
        for name, data in idata.items():
            loo = elpd_estimate(az.loo(data))
            assert table.loc[name, "elpd"] == pytest.approx(loo["elpd"], rel=1e-12)
            assert table.loc[name, "p"] == pytest.approx(loo["p"], rel=1e-12)


def test_held_out_elpd_rejects_what_it_cannot_score(held_out):
    idata, _ = held_out
    with pytest.raises(ValueError, match="held_out_elpd: idata has no log_likelihood group"):
        held_out_elpd(idata["exact"].posterior)
    with pytest.raises(ValueError, match=r"held_out_elpd: var_name='z' is not in the log_likelihood group"):
        held_out_elpd(idata["exact"], var_name="z")
