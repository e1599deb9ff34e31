"""gd.inference.Laplace (Rasmussen & Williams Algorithms 3.1, 3.2 and 5.1): against GPML's
infLaplace (likLogistic and likErf on Ripley's synth), finite differences for every gradient, and
the mode's defining equation."""
import numpy as np
import pytest

import gpdsl as gd
from gpdsl.methods import laplace
from conftest import shared_path
from naive import central_difference

SE = gd.kernels.SquaredExponential


@pytest.fixture(scope="module")
def synth():
    data = np.loadtxt(shared_path("oracles", "data", "synth_train.csv"), delimiter=",")
    test = np.loadtxt(shared_path("oracles", "data", "synth_test.csv"), delimiter=",")
    return data[:, :2], data[:, 2], test[:, :2], test[:, 2]


def _model(link, bias=gd.Fixed(0.0)):
    return gd.Model(SE(1.0, 1.0), gd.likelihoods.Bernoulli(link=link, bias=bias), inference=gd.inference.Laplace())


@pytest.mark.parametrize("link,oracle", [("logit", "synth_infLaplace_likLogistic_full.json"),
                                         ("probit", "synth_infLaplace_likErf_full.json")])
def test_gpml_inflaplace(gpml, synth, link, oracle):
    """nlZ, dnlZ (log ell, log sf) and the latent predictions of GPML 4.2's infLaplace run to
    convergence (its 'converged' record), at ell = sf = 1."""
    X, y, X_test, y_test = synth
    ref = gpml(oracle)["results"]["converged"]
    post = _model(link).fit(X, y, optimize=False)
    assert -post.log_evidence == pytest.approx(ref["nlZ"], abs=1e-8)
    ev = post.model.evaluate(post.values, X, y, None)
    dnlz = [-float(ev.grads["kernel.lengthscale"]), -2.0 * float(ev.grads["kernel.variance"])]
    np.testing.assert_allclose(dnlz, ref["dnlZ_cov"], rtol=0, atol=1e-8)
    mean, var = post.predict_f(X_test)
    np.testing.assert_allclose(mean, ref["pred"]["fmu"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(var, ref["pred"]["fs2"], rtol=0, atol=1e-8)
    if link == "probit":        # GPML's likLogistic lp is an erf-mixture approximation; likErf's is exact
        np.testing.assert_allclose(post.log_predictive(X_test, y_test), ref["pred"]["lp"], rtol=0, atol=1e-8)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_likelihood_derivatives_by_finite_differences(link):
    lik = gd.likelihoods.Bernoulli(link=link)
    values = {"likelihood.bias": np.array(0.3)}
    f = np.linspace(-12.0, 9.0, 43)
    for label in (1.0, -1.0):
        y = np.full(f.size, label)
        lp, d1, d2, d3 = lik.log_density_derivatives(values, "likelihood", y, f)
        np.testing.assert_allclose(lp, lik.log_density(values, "likelihood", y, f), rtol=1e-14)
        h = 1e-5
        shifted = [lik.log_density_derivatives(values, "likelihood", y, f + s) for s in (h, -h)]
        for k, d in enumerate((d1, d2, d3)):
            fd = (shifted[0][k] - shifted[1][k]) / (2 * h)
            # atol: differencing d2 in the probit tail (z < -10, d2 ~ -1) loses ~1e-7.
            np.testing.assert_allclose(d, fd, rtol=1e-6, atol=3e-7)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_gradients_by_finite_differences(synth, link):
    """Kernel length-scales (ARD), variance and the bias, at a point away from the optimum."""
    X, y = synth[0][:80], synth[1][:80]
    y = np.where(y > 0, 1.0, -1.0)
    kernel = SE(np.array([0.7, 1.3]), 2.0)
    model = gd.Model(kernel, gd.likelihoods.Bernoulli(link=link, bias=0.4), inference=gd.inference.Laplace())
    values = {"kernel.lengthscale": np.array([0.7, 1.3]), "kernel.variance": np.array(2.0),
              "likelihood.bias": np.array(0.4)}
    ev = model.evaluate(values, X, y, None)
    for name in values:
        def objective(v, name=name):
            return model.evaluate({**values, name: v}, X, y, None, need_grad=False).log_evidence
        np.testing.assert_allclose(ev.grads[name], central_difference(objective, values[name], 1e-5),
                                   rtol=1e-6, atol=1e-7, err_msg=name)


def test_the_mode_solves_its_equation(synth):
    """f_hat = K d log p(y | f_hat) (R&W eq. 3.17), and Newton gains nothing more from there."""
    X, y = synth[0], np.where(synth[1] > 0, 1.0, -1.0)
    lik = gd.likelihoods.Bernoulli(link="logit", bias=-0.2)
    values = {"likelihood.bias": np.array(-0.2)}
    K = SE(1.0, 1.0).gram({"kernel.lengthscale": np.array(1.0), "kernel.variance": np.array(1.0)}, "kernel", X, X)
    a, f, psi, (lp, g, _, _) = laplace.find_mode(lik, values, K, y, tol=1e-12, max_iter=100)
    np.testing.assert_allclose(f, K @ g, rtol=0, atol=1e-9)
    np.testing.assert_allclose(a, g, rtol=0, atol=1e-9)
    assert psi == pytest.approx(-0.5 * g @ K @ g + np.sum(lp), abs=1e-9)


def test_fit_save_load_and_model_file(synth, tmp_path):
    X, y, X_test, y_test = synth
    post = _model("logit", bias=0.0).fit(X, y)
    assert post.converged
    start = _model("logit", bias=0.0).fit(X, y, optimize=False)
    assert post.log_evidence > start.log_evidence + 1.0
    post.save(tmp_path / "laplace.nc")
    back = gd.load(tmp_path / "laplace.nc")
    np.testing.assert_array_equal(back.predict(X_test).p, post.predict(X_test).p)
    assert gd.Model.from_dict(post.model.to_dict()) == post.model
    assert np.mean((post.predict(X_test).p.values > 0.5) != (y_test > 0)) < 0.12


def test_declaration_errors():
    with pytest.raises(ValueError, match="Laplace: tol must be"):
        gd.inference.Laplace(tol=-1.0)
    with pytest.raises(ValueError, match="Laplace inference uses no inducing points"):
        gd.Model(SE(1.0, 1.0), gd.likelihoods.Bernoulli(), gd.inducing.KMeans(5), gd.inference.Laplace())
    with pytest.raises(ValueError, match="Gaussian with Laplace is not supported"):
        gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(), inference=gd.inference.Laplace())
