"""Components defined outside the package: those of tests/external_components.py fit with Laplace
and with SVGP, save, and load back by the module name they are written under; the documented
minimum of a likelihood (its log density's derivatives) fits, predicts, scores and exports; the
guide's own ``CloglogBernoulli`` (a subclass of ``Bernoulli`` that changes the density, read from
docs/guide.md as a user copies it) gets cloglog answers from every method that accepts it and
none of Bernoulli's probit or logit closed forms; and ``gpdsl.testing`` runs on a user's class
in a folder outside the repository."""
import re
import subprocess
import sys
import textwrap
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize

import gpdsl as gd
import gpdsl.testing as gt
from external_components import CloglogBernoulli, LogisticNoise, WhiteSquaredExponential
from naive_laplace import laplace as naive_laplace

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"

rng = np.random.default_rng(3)
X = rng.uniform(-2, 2, size=(60, 2))
f_true = 1.5 * np.sin(X[:, 0]) + X[:, 1] - 0.5
y = np.where(rng.uniform(size=60) < -np.expm1(-np.exp(f_true)), 1.0, -1.0)


def test_registered_under_their_module():
    assert gd.likelihoods.LIKELIHOODS["external_components:CloglogBernoulli"] is CloglogBernoulli
    assert gd.kernels.KERNELS["external_components:WhiteSquaredExponential"] is WhiteSquaredExponential
    assert not CloglogBernoulli().provides("site_model")
    assert CloglogBernoulli().provides("log_density_derivatives")
    assert CloglogBernoulli().provides("variational_expectations")
    with pytest.raises(ValueError, match="CloglogBernoulli with EP is not supported"):
        gd.Model(WhiteSquaredExponential(), CloglogBernoulli(), inference=gd.inference.EP())


@pytest.mark.parametrize("inference,inducing", [(gd.inference.Laplace(), None),
                                                (gd.inference.SVGP(), gd.inducing.KMeans(12, seed=0))])
def test_fit_save_load(inference, inducing, tmp_path):
    model = gd.Model(WhiteSquaredExponential(1.0, 1.0, 0.05), CloglogBernoulli(), inducing, inference)
    post = model.fit(X, y, max_iter=200)
    assert post.diagnostics.converged
    assert set(post.values) >= {"kernel.lengthscale", "kernel.variance", "kernel.white"}
    X_test = rng.uniform(-2, 2, size=(200, 2))
    p_true = -np.expm1(-np.exp(1.5 * np.sin(X_test[:, 0]) + X_test[:, 1] - 0.5))
    p = post.predict(X_test)["p"].values
    assert np.mean(np.abs(p - p_true)) < 0.15          # the fit follows the cloglog truth
    post.save(tmp_path / "external.nc")
    back = gd.load(tmp_path / "external.nc")
    assert back.model == model
    np.testing.assert_array_equal(back.predict(X_test)["p"].values, p)
    assert gd.Model.from_dict(model.to_dict()) == model
    assert model.to_dict()["likelihood"]["type"] == "external_components:CloglogBernoulli"


# -- the documented minimum ------------------------------------------------------------------------
def test_minimal_binary_likelihood_predicts_scores_and_exports_by_quadrature():
    """Only log_density_derivatives (and its targets' kind): predict's p, log_predictive and the
    ArviZ export come from the base class's defaults, against quadrature of the cloglog density
    at the posterior's latent moments (adaptive, 1e-12)."""
    post = gd.Model(gd.kernels.SquaredExponential(), CloglogBernoulli(), inference=gd.inference.Laplace()).fit(
        X[:30], y[:30], max_iter=20)
    X_new, y_new = X[30:36], y[30:36]
    mean, var = post.predict_f(X_new)
    p = post.predict(X_new)["p"].values
    scores = post.log_predictive(X_new, y_new)
    for i in range(6):
        up = gt.expect(lambda f: -np.expm1(-np.exp(f)), mean[i], var[i])
        assert p[i] == pytest.approx(up, rel=1e-9)
        assert scores[i] == pytest.approx(np.log(up if y_new[i] > 0 else 1.0 - up), rel=1e-9)
    idata = post.to_inference_data(X_new, y_new, draws=50, chains=2, seed=1)
    assert set(np.unique(idata.posterior_predictive["y"].values)) <= {-1.0, 1.0}
    f = idata.posterior["f"].values
    want = np.where(y_new > 0, np.log(-np.expm1(-np.exp(f))), -np.exp(f))
    np.testing.assert_allclose(idata.log_likelihood["y"].values, want, rtol=1e-12)


def test_minimal_real_likelihood_predicts_f_and_exports_without_posterior_predictive():
    """Real-valued targets with only log_density_derivatives: predict reports f with a warning
    that says what y_mean / y_var need; log_predictive is log E[p(y | f)] (adaptive quadrature);
    to_inference_data leaves out the posterior-predictive group with a warning and a note, and
    sample says what needs it."""
    lik = LogisticNoise()
    y_real = np.sin(X[:30, 0]) + 0.3 * rng.logistic(size=30)
    post = gd.Model(gd.kernels.SquaredExponential(), lik, inference=gd.inference.Laplace()).fit(X[:30], y_real, max_iter=20)
    X_new, y_new = X[30:35], np.sin(X[30:35, 0])
    with pytest.warns(UserWarning, match="LogisticNoise defines no conditional_moments"):
        predicted = post.predict(X_new)
    assert set(predicted.data_vars) == {"f_mean", "f_var"}
    mean, var = post.predict_f(X_new)
    scores = post.log_predictive(X_new, y_new)
    for i in range(5):
        want = gt.expect(lambda f: float(np.exp(lik.log_density(np.array([y_new[i]]), np.array([f]))[0])),
                         mean[i], var[i])
        assert scores[i] == pytest.approx(np.log(want), rel=1e-9)
    with pytest.raises(NotImplementedError, match="LogisticNoise does not provide sampling.*to_inference_data"):
        lik.sample(np.zeros(3), np.random.default_rng(0))
    with pytest.warns(UserWarning, match="no posterior_predictive group"):
        idata = post.to_inference_data(X_new, y_new, draws=20, chains=1)
    assert not hasattr(idata, "posterior_predictive")
    assert "sample" in idata.attrs["posterior_predictive_omitted"]
    np.testing.assert_allclose(idata.log_likelihood["y"].values,
                               lik.log_density(y_new, idata.posterior["f"].values), rtol=1e-12)


# -- the guide's CloglogBernoulli ------------------------------------------------------------------
def guide_module():
    """The guide's "Extending gpdsl" classes, its code blocks of ``Cosine`` and ``CloglogBernoulli``
    executed as a user's module ``guide_extending`` (registered under that name, so that they save
    and load)."""
    module = sys.modules.get("guide_extending")
    if module is None:
        text = GUIDE.read_text()
        blocks = [re.search(r"```python\n((?:from dataclasses[^`]*?)?@dataclass\(frozen=True, eq=False\)\nclass "
                            + name + r"\(.*?)```", text, re.S).group(1) for name in ("Cosine", "CloglogBernoulli")]
        module = types.ModuleType("guide_extending")
        sys.modules["guide_extending"] = module
        exec(compile("\n".join(blocks), str(GUIDE), "exec"), module.__dict__)
    return module


def guide_cloglog():
    """The guide's ``CloglogBernoulli``."""
    return guide_module().CloglogBernoulli


def test_guide_cosine_passes_the_kernel_checks():
    """The guide's kernel example, through gpdsl.testing as the guide shows."""
    gt.check_kernel(guide_module().Cosine(period=1.5))


def cloglog_derivatives(y, f):
    """log p(y | f) of the cloglog link and its first two derivatives in f, written directly
    (p = 1 - exp(-e^f), 1 - p = exp(-e^f)) for the dense references."""
    e = np.exp(f)
    p = -np.expm1(-e)
    d1_up = e * np.exp(-e) / p
    d2_up = d1_up * (1.0 - e) - d1_up ** 2
    pos = y > 0
    return np.where(pos, np.log(p), -e), np.where(pos, d1_up, -e), np.where(pos, d2_up, -e), None


def test_guide_cloglog_inherits_none_of_bernoullis_closed_forms():
    cls = guide_cloglog()
    reset = cls.inherited_without_density()
    assert {"log_density", "site_model", "variational_expectations", "predictive", "log_predictive", "sample",
            "provides", "describe", "variants"} <= set(reset)
    assert set(reset.values()) == {"Bernoulli"}
    # Bernoulli's probit and logit variants would be two identical cloglog instances.
    assert len(cls.variants()) == 1
    for lik in cls.variants():
        assert lik.provides("log_density_derivatives") and lik.provides("variational_expectations")
        assert not lik.provides("site_model") and not lik.provides("polya_gamma"), lik.link
        assert lik.describe() == "CloglogBernoulli"
    with pytest.raises(NotImplementedError, match="Bernoulli.site_model is for Bernoulli's density"):
        cls().site_model()
    for method in (gd.inference.EP(), gd.inference.QP(), gd.inference.PolyaGamma()):
        with pytest.raises(ValueError, match="CloglogBernoulli with"):
            gd.Model(gd.kernels.SquaredExponential(), cls(link="logit"), inference=method)
    # Its density is the cloglog one, through log_density too.
    f = np.linspace(-3, 2, 7)
    np.testing.assert_allclose(cls().log_density(np.ones(7), f), np.log(-np.expm1(-np.exp(f))), rtol=1e-13)


def test_guide_cloglog_passes_the_conformance_checks():
    """gpdsl.testing's checks of every operation the guide's class provides (derivatives,
    expectations, log predictive, predictive against quadrature and draws, and its Laplace, SVGP
    and VGP pairs).  On the library before issue 45 the same class failed the suite (its
    log_density was Bernoulli's probit)."""
    gt.check_likelihood(guide_cloglog())


def test_bernoulli_closed_forms_declared_again_for_another_density_fail_the_conformance_checks():
    """What the library used to do silently: a subclass that changes the density but keeps
    Bernoulli's probit closed forms (here declared again, as a user may) fails the checks of EP's
    tilted moments and of the expectations against quadrature of its own density."""
    base = guide_cloglog()
    inconsistent = type("ProbitFormsCloglog", (base,), {
        "site_model": gd.likelihoods.Bernoulli.site_model,
        "variational_expectations": gd.likelihoods.Bernoulli.variational_expectations,
        "__module__": "guide_extending"})
    lik = inconsistent()
    assert lik.provides("site_model")
    with pytest.raises(AssertionError, match="log Z"):
        gt.check_likelihood_site_model(lik)
    with pytest.raises(AssertionError, match="E_q"):
        gt.check_likelihood_variational_expectations(lik)
    with pytest.raises(AssertionError, match="check_likelihood_variational_expectations failed for ProbitFormsCloglog"):
        gt.check_likelihood(lik)


# A small problem for the dense references: 8 points in one dimension.
XS = np.linspace(-2.0, 2.0, 8)[:, None]
YS = np.array([-1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, 1.0])
SE = gd.kernels.SquaredExponential(0.8, 1.3)


def _gram():
    return SE.bind().gram(XS, XS)


def test_guide_cloglog_laplace_is_the_dense_cloglog_laplace():
    """Laplace's evidence and latent predictive at fixed hyperparameters against a dense Newton
    iteration on the cloglog density (tests/naive_laplace.py): equal to 1e-9, and 0.04 nat (four
    thousand times that tolerance) from the probit's, which the library used before."""
    cls = guide_cloglog()
    K = _gram()
    ref = naive_laplace(K, lambda f: cloglog_derivatives(YS, f))
    post = gd.Model(SE, cls(bias=gd.Fixed(0.0)), inference=gd.inference.Laplace(tol=1e-13)).fit(XS, YS, optimize=False)
    assert post.log_evidence == pytest.approx(ref["log_evidence"], rel=1e-9)
    mean, var = post.predict_f(XS)
    np.testing.assert_allclose(mean, ref["f"], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(var, ref["var"], rtol=1e-7, atol=1e-10)
    probit = gd.Model(SE, gd.likelihoods.Bernoulli(bias=gd.Fixed(0.0)), inference=gd.inference.Laplace()).fit(
        XS, YS, optimize=False)
    assert abs(post.log_evidence - probit.log_evidence) > 0.01


def _dense_cloglog_elbo(K):
    """max over q(f) = N(m, L L^T) of E_q[sum log p(y | f)] - KL[q || N(0, K)], the cloglog
    expectations by a 200-node Gauss-Hermite rule, maximised by L-BFGS-B over (m, L) from
    scratch (dense, no whitening)."""
    n = K.shape[0]
    nodes, weights = np.polynomial.hermite_e.hermegauss(200)
    weights = weights / np.sqrt(2 * np.pi)
    Kinv = np.linalg.inv(K)
    _, logdet_K = np.linalg.slogdet(K)
    rows, cols = np.tril_indices(n)

    def negative(theta):
        m, L = theta[:n], np.zeros((n, n))
        L[rows, cols] = theta[n:]
        S = L @ L.T
        f = m[:, None] + np.sqrt(np.diag(S))[:, None] * nodes[None, :]
        expected = np.sum(cloglog_derivatives(YS[:, None], f)[0] @ weights)
        kl = 0.5 * (np.trace(Kinv @ S) + m @ Kinv @ m - n + logdet_K - 2 * np.sum(np.log(np.abs(np.diag(L)))))
        return -(expected - kl)

    start = np.concatenate([np.zeros(n), np.linalg.cholesky(K)[rows, cols]])
    result = optimize.minimize(negative, start, method="L-BFGS-B", options={"maxiter": 20000, "maxfun": 10 ** 6,
                                                                             "ftol": 1e-15, "gtol": 1e-10})
    return -result.fun


@pytest.mark.parametrize("inference,inducing", [(gd.inference.VGP(q_tol=1e-12), None),
                                                (gd.inference.SVGP(q_tol=1e-12), gd.inducing.Fixed(XS))],
                         ids=["VGP", "SVGP"])
def test_guide_cloglog_variational_bound_is_the_dense_cloglog_elbo(inference, inducing):
    """VGP's and SVGP's bound (inducing inputs at the data: the same family of q) at fixed
    hyperparameters against the dense ELBO of the cloglog density maximised from scratch
    (1e-6: the reference optimiser's finite-difference gradients), and 0.08 nat from the probit's."""
    cls = guide_cloglog()
    ref = _dense_cloglog_elbo(_gram())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        post = gd.Model(SE, cls(bias=gd.Fixed(0.0)), inducing, inference).fit(XS, YS, optimize=False)
        probit = gd.Model(SE, gd.likelihoods.Bernoulli(bias=gd.Fixed(0.0)), inducing, inference).fit(
            XS, YS, optimize=False)
    assert post.log_evidence == pytest.approx(ref, abs=1e-6)
    assert abs(probit.log_evidence - ref) > 0.01


# -- gpdsl.testing outside the repository ---------------------------------------------------------
USER_MODULE = '''
from dataclasses import dataclass
import numpy as np
import gpdsl as gd


@dataclass(frozen=True, eq=False)
class ShiftedLogit(gd.likelihoods.Likelihood):
    """Binary labels, p(y = 1 | f) = sigma(f + shift), in a user's package."""
    shift: object = 0.3
    hyperparameters = ("shift",)
    unconstrained = ("shift",)
    target_kind = "binary"

    def prepare_targets(self, y):
        return np.where(y > 0, 1.0, -1.0)

    def log_density_derivatives(self, y, f):
        z = y * (f + float(self.shift))
        p = 1.0 / (1.0 + np.exp(-z))
        return -np.logaddexp(0.0, -z), y * (1 - p), -p * (1 - p), -y * p * (1 - p) * (1 - 2 * p)

    def log_density_param_derivatives(self, y, f, derivatives=None):
        d = self.log_density_derivatives(y, f) if derivatives is None else derivatives
        return {"shift": d[1:]}


@dataclass(frozen=True, eq=False)
class WrongSlope(ShiftedLogit):
    """Its first derivative is off by 1 %."""
    def log_density_derivatives(self, y, f):
        d = super().log_density_derivatives(y, f)
        return (d[0], 1.01 * d[1]) + tuple(d[2:])

    def log_density_param_derivatives(self, y, f, derivatives=None):
        d = self.log_density_derivatives(y, f) if derivatives is None else derivatives
        return {"shift": d[1:]}
'''

USER_TEST = '''
import pytest
import gpdsl.testing
from user_likelihoods import ShiftedLogit, WrongSlope


@gpdsl.testing.parametrize_with_checks([ShiftedLogit])
def test_gpdsl_conformance(component, check):
    check(component)


def test_a_wrong_derivative_is_caught():
    with pytest.raises(AssertionError, match="check_likelihood_derivatives failed for WrongSlope"):
        gpdsl.testing.check_likelihood(WrongSlope)
'''


def test_gpdsl_testing_runs_on_a_users_class_outside_the_repository(tmp_path):
    """A user's module and test file in a folder outside the repository, run by pytest there in
    a fresh interpreter (no tests/ on the path): every check of the user's likelihood passes, one
    case a check, and a wrong derivative fails the check that names it."""
    (tmp_path / "user_likelihoods.py").write_text(textwrap.dedent(USER_MODULE))
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TEST))
    run = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-o", "addopts=",
                          "--rootdir", str(tmp_path), "test_user.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    # Its five likelihood checks, and with each method that accepts it (Laplace, SVGP, VGP; not
    # EP, QP or PolyaGamma) the gradients, round trips and predictions.
    checks = ["check_likelihood_derivatives", "check_likelihood_variational_expectations",
              "check_likelihood_log_predictive", "check_likelihood_predictive", "check_likelihood_limits"]
    checks += [f"{check}[{method}]" for method in ("Laplace", "SVGP", "VGP")
               for check in ("check_pair_gradients", "check_pair_fitted_model_round_trips", "check_pair_predictions")]
    for check in checks:
        assert f"test_gpdsl_conformance[ShiftedLogit-{check}] PASSED" in run.stdout, check
    assert "[EP]" not in run.stdout and "PolyaGamma" not in run.stdout
    assert "test_a_wrong_derivative_is_caught PASSED" in run.stdout
