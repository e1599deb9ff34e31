"""Observation models: predictive probabilities and log densities against scipy."""
import numpy as np
import pytest
from scipy import integrate, special, stats

import gpdsl as gd
import gpdsl.testing


def test_bernoulli_predictive_matches_quadrature():
    m, v = np.array([-1.5, 0.0, 0.7, 2.0]), np.array([0.3, 2.0, 0.01, 4.0])
    for link, f in (("probit", lambda t, b: special.ndtr(t + b)), ("logit", lambda t, b: special.expit(t + b))):
        lik = gd.likelihoods.Bernoulli(link, bias=0.4)
        p = lik.bind({"bias": np.array(0.4)}).predictive(m, v)["p"]
        for i in range(4):
            ref, _ = integrate.quad(lambda t: f(t, 0.4) * stats.norm.pdf(t, m[i], np.sqrt(v[i])), -np.inf, np.inf)
            assert p[i] == pytest.approx(ref, abs=1e-9)


def test_log_densities_match_scipy():
    f = np.array([-2.0, -0.3, 0.0, 1.1])
    bern = gd.likelihoods.Bernoulli("probit", bias=0.2)
    values = {"bias": np.array(0.2)}
    y = np.array([1.0, -1.0, 1.0, -1.0])
    np.testing.assert_allclose(bern.bind(values).log_density(y, f), np.log(special.ndtr(y * (f + 0.2))),
                               rtol=1e-12)
    logit = gd.likelihoods.Bernoulli("logit", bias=0.2)
    np.testing.assert_allclose(logit.bind(values).log_density(y, f), np.log(special.expit(y * (f + 0.2))),
                               rtol=1e-12)
    counts = np.array([0.0, 3.0, 1.0, 7.0])
    np.testing.assert_allclose(gd.likelihoods.Poisson().bind().log_density(counts, f),
                               stats.poisson.logpmf(counts, f ** 2), rtol=1e-12)
    with pytest.raises(ValueError, match="Bernoulli: link must be 'probit' or 'logit'"):
        gd.likelihoods.Bernoulli("cloglog")


def _logit_normal_logp_mpmath(mp, mu, s):
    """log E[sigma(f)], f ~ N(mu, s^2), by 50-digit quadrature split at the integrand's mode (in
    z = (f - mu)/s, found by bisection) and around sigma's transition z0 = -mu/s."""
    mu, s = mp.mpf(mu), mp.mpf(s)
    log_h = lambda z: -z * z / 2 - mp.log(1 + mp.exp(-(mu + s * z)))
    lo, hi = mp.mpf(0), s
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if s / (1 + mp.exp(mu + s * mid)) - mid > 0 else (lo, mid)
    top = log_h(lo)
    z0 = -mu / s
    points = [lo + d for d in (-30, -12, -6, -3, -1, 0, 1, 3, 6, 12, 30)]
    points += [z0 + d / s for d in (-8, -2, -0.5, 0, 0.5, 2, 8)]
    points = sorted(set(p for p in points if lo - 30 <= p <= lo + 30))
    return top + mp.log(mp.quad(lambda z: mp.exp(log_h(z) - top), points)) - mp.log(mp.sqrt(2 * mp.pi))


def test_logit_normal_logp_against_50_digit_quadrature():
    """The logit predictive's kernel to full double precision over latent means -500..300 and sds
    0..1e5: Gauss-Hermite up to sd 1, the composite rule beyond (100-point Gauss-Hermite alone is
    1e-2 off at mu = 2, sd = 20, and p rounds above 1 for confident predictions)."""
    mp = pytest.importorskip("mpmath")
    from gpdsl._jit import special as S
    mp.mp.dps = 50
    nodes, weights = np.polynomial.hermite_e.hermegauss(100)
    log_weights = np.log(weights / np.sqrt(2.0 * np.pi))
    worst = 0.0
    for mu in (-500.0, -60.0, -10.0, -0.3, 0.0, 2.0, 20.0, 300.0):
        for s in (0.0, 1e-6, 0.5, 1.0, 1.01, 5.0, 20.0, 1e3, 1e5):
            got = S.logit_normal_logp(mu, s, nodes, log_weights)
            ref = float(-mp.log(1 + mp.exp(-mp.mpf(mu))) if s == 0.0 else _logit_normal_logp_mpmath(mp, mu, s))
            worst = max(worst, abs(got - ref) / max(1.0, abs(ref)))
    assert worst < 1e-14, worst
    # limits and non-finite input: sd -> inf gives 1/2, mean -> +-inf gives 1 / 0, NaN propagates
    assert S.logit_normal_logp(3.0, np.inf, nodes, log_weights) == pytest.approx(-np.log(2.0), rel=1e-15)
    assert S.logit_normal_logp(np.inf, 5.0, nodes, log_weights) == 0.0
    assert S.logit_normal_logp(-np.inf, 5.0, nodes, log_weights) == -np.inf
    assert np.isnan(S.logit_normal_logp(np.nan, 5.0, nodes, log_weights))
    assert np.isnan(S.logit_normal_logp(1.0, np.nan, nodes, log_weights))
    # the fixed 100-point rule that this replaces beyond sd 1 really is off there
    p_gh = special.expit(2.0 + 20.0 * nodes) @ weights / np.sqrt(2.0 * np.pi)
    assert abs(p_gh - np.exp(S.logit_normal_logp(2.0, 20.0, nodes, log_weights))) > 1e-3


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_bernoulli_log_predictive_in_log_space(link):
    """log p(y* | x*) stays finite and accurate for confident predictions of either sign (where
    log(1 - p) of a rounded p is -inf or NaN), p stays in [0, 1], and both labels' probabilities
    sum to 1."""
    lik = gd.likelihoods.Bernoulli(link, bias=0.4)
    values = {"bias": np.array(0.4)}
    m = np.array([-80.0, -36.0, 0.3, 36.0, 80.0, 2.0])
    v = np.array([0.5, 1.5, 0.2, 1.5, 16.0, 400.0])
    up = lik.bind(values).log_predictive(m, v, np.ones(6))
    down = lik.bind(values).log_predictive(m, v, -np.ones(6))
    assert np.all(np.isfinite(up)) and np.all(np.isfinite(down)) and np.all(up <= 0) and np.all(down <= 0)
    np.testing.assert_allclose(np.exp(up) + np.exp(down), 1.0, rtol=0, atol=1e-14)
    p = lik.bind(values).predictive(m, v)["p"]
    assert np.all((p >= 0) & (p <= 1))
    np.testing.assert_allclose(p, np.exp(up), rtol=1e-15)
    f = (lambda t: special.log_ndtr(-(t + 0.4))) if link == "probit" else (lambda t: -np.logaddexp(0.0, t + 0.4))
    for i in (1, 3, 5):   # log p(y = -1) against quad of the integrand scaled at its peak (which
        sd = np.sqrt(v[i])  # sits far from m when y = -1 disagrees with m: t = 14 for m = 36)
        lo, hi = m[i] - 40 * sd, m[i] + 40 * sd
        grid = np.linspace(lo, hi, 400001)
        log_integrand = f(grid) + stats.norm.logpdf(grid, m[i], sd)
        peak = grid[np.argmax(log_integrand)]
        top = log_integrand.max()
        ref, _ = integrate.quad(lambda t: np.exp(f(t) + stats.norm.logpdf(t, m[i], sd) - top),
                                lo, hi, points=[-0.4, peak], limit=400, epsabs=0, epsrel=1e-12)
        assert down[i] == pytest.approx(top + np.log(ref), rel=1e-9), i


# Every likelihood with per-point derivatives, at values away from its defaults.
_DIFFERENTIABLE = [
    (gd.likelihoods.Gaussian(0.3), {"variance": np.array(0.3)}, "real"),
    (gd.likelihoods.Bernoulli("probit", 0.2), {"bias": np.array(0.2)}, "labels"),
    (gd.likelihoods.Bernoulli("logit", -0.4), {"bias": np.array(-0.4)}, "labels"),
    (gd.likelihoods.StudentT(3.0, 0.7), {"df": np.array(3.0), "scale": np.array(0.7)}, "real"),
]


def _targets(kind, rng, n):
    return np.sign(rng.normal(size=n)) if kind == "labels" else rng.normal(size=n) * 2.0


@pytest.mark.parametrize("lik, values, kind", _DIFFERENTIABLE, ids=lambda p: getattr(p, "describe", lambda: "")())
def test_log_density_derivatives_by_finite_differences(lik, values, kind):
    """d^k log p / df^k (k = 1, 2, 3) and the derivatives in each hyperparameter of log p, d log p / df
    and d^2 log p / df^2, against central differences (step 1e-5, error < 1e-7 absolute + relative)."""
    rng = np.random.default_rng(0)
    y, f, h = _targets(kind, rng, 9), rng.normal(size=9) * 2.0, 1e-5
    derivs = lik.bind(values).log_density_derivatives(y, f)
    np.testing.assert_allclose(derivs[0], lik.bind(values).log_density(y, f), rtol=1e-14)
    for k in range(3):
        up, down = (lik.bind(values).log_density_derivatives(y, f + s)[k] for s in (h, -h))
        np.testing.assert_allclose((up - down) / (2 * h), derivs[k + 1], rtol=1e-7, atol=1e-7)
    params = lik.bind(values).log_density_param_derivatives(y, f)
    assert set(params) == set(values)
    for name, parts in params.items():
        for k in range(3):
            up, down = (lik.bind({**values, name: values[name] + s}).log_density_derivatives(y, f)[k]
                        for s in (h, -h))
            np.testing.assert_allclose((up - down) / (2 * h), parts[k], rtol=1e-7, atol=1e-7)


def test_student_t_density_matches_scipy():
    lik = gd.likelihoods.StudentT(df=2.5, scale=0.6)
    values = {"df": np.array(2.5), "scale": np.array(0.6)}
    y, f = np.array([0.3, -4.0, 10.0]), np.array([0.0, 1.0, -2.0])
    np.testing.assert_allclose(lik.bind(values).log_density(y, f), stats.t.logpdf(y, 2.5, loc=f, scale=0.6),
                               rtol=1e-13)
    m, v = np.array([0.1, -1.0]), np.array([0.5, 2.0])
    for i in range(2):
        ref, _ = integrate.quad(lambda t: stats.t.pdf(y[i], 2.5, loc=t, scale=0.6) * stats.norm.pdf(t, m[i], np.sqrt(v[i])),
                                -np.inf, np.inf, epsabs=0, epsrel=1e-13)
        assert lik.bind(values).log_predictive(m, v, y[:2])[i] == pytest.approx(np.log(ref), rel=1e-8)
    with pytest.raises(ValueError, match="StudentT: df must be positive"):
        gd.likelihoods.StudentT(df=-1.0)


@pytest.mark.parametrize("lik, values, kind", _DIFFERENTIABLE, ids=lambda p: getattr(p, "describe", lambda: "")())
def test_variational_expectations_against_quadrature_and_finite_differences(lik, values, kind):
    """E_N(m, v)[log p(y | f)] against adaptive quadrature (1e-9 relative at latent sds up to 2),
    and its gradients in (m, v) and the hyperparameters against central differences of itself."""
    rng = np.random.default_rng(1)
    y, m, v, h = _targets(kind, rng, 6), rng.normal(size=6), rng.uniform(0.05, 4.0, size=6), 1e-5
    ve, d_mean, d_var, grads = lik.bind(values).variational_expectations(y, m, v)
    for i in range(6):
        ref, _ = integrate.quad(lambda t: lik.bind(values).log_density(y[i:i + 1], np.array([t]))[0]
                                * stats.norm.pdf(t, m[i], np.sqrt(v[i])), m[i] - 30 * np.sqrt(v[i]),
                                m[i] + 30 * np.sqrt(v[i]), epsabs=0, epsrel=1e-13, limit=200)
        assert ve[i] == pytest.approx(ref, rel=1e-9, abs=1e-12)
    ve_at = lambda **kw: lik.bind(kw.get("values", values)).variational_expectations(y, kw.get("m", m),
                                                                          kw.get("v", v))[0]
    np.testing.assert_allclose((ve_at(m=m + h) - ve_at(m=m - h)) / (2 * h), d_mean, rtol=0, atol=1e-7)
    np.testing.assert_allclose((ve_at(v=v + h) - ve_at(v=v - h)) / (2 * h), d_var, rtol=0, atol=1e-7)
    assert set(grads) == set(values)
    for name, g in grads.items():
        fd = (ve_at(values={**values, name: values[name] + h}).sum()
              - ve_at(values={**values, name: values[name] - h}).sum()) / (2 * h)
        assert g == pytest.approx(fd, abs=1e-6)


@pytest.mark.parametrize("lik, values, kind", _DIFFERENTIABLE, ids=lambda p: getattr(p, "describe", lambda: "")())
def test_variational_expectations_in_row_blocks_equal_one_block(lik, values, kind, monkeypatch):
    """Above _EXPECTATION_BLOCK_ROWS rows the expectations run block by block (bounded
    temporaries): the same values and gradients as one block (1e-13)."""
    import gpdsl.likelihoods.base as likelihoods
    rng = np.random.default_rng(2)
    y, m, v = _targets(kind, rng, 23), rng.normal(size=23), rng.uniform(0.05, 4.0, size=23)
    whole = lik.bind(values).variational_expectations(y, m, v)
    monkeypatch.setattr(likelihoods, "_EXPECTATION_BLOCK_ROWS", 5)
    blocked = lik.bind(values).variational_expectations(y, m, v)
    for a, b in zip(whole[:3], blocked[:3]):
        np.testing.assert_allclose(b, a, rtol=1e-13, atol=0)
    assert set(blocked[3]) == set(whole[3])
    for name in whole[3]:
        assert blocked[3][name] == pytest.approx(whole[3][name], rel=1e-13)


@pytest.mark.parametrize("df, scale", [(1.5, 0.05), (3.0, 0.7)])
def test_student_t_expectations_where_the_likelihood_is_narrower_than_the_latent_sd(df, scale):
    """Gauss-Hermite cannot resolve a Student-t much narrower than q(f); the sinh-mapped rule
    matches 30-digit quadrature to 1e-9 relative at latent sds up to 1000 times the
    likelihood's width, with y inside and 8 sds outside q(f)."""
    mp = pytest.importorskip("mpmath")
    lik = gd.likelihoods.StudentT(df, scale)
    values = {"df": np.array(df), "scale": np.array(scale)}
    cases = [(0.0, 0.5, -4.0), (0.0, 2.0, 10.0), (2.0, 5.0, 0.0), (-1.0, 50.0, 10.0), (0.0, 0.001, 0.0)]
    with mp.workdps(30):
        def log_p(t, y):
            return (mp.loggamma((df + 1) / 2) - mp.loggamma(df / 2) - 0.5 * mp.log(df * mp.pi) - mp.log(scale)
                    - (df + 1) / 2 * mp.log(1 + (y - t) ** 2 / (df * scale * scale)))
        for m, sd, y in cases:
            cuts = [m - 40 * sd] + [p for p in (y - 1, y - 0.1, y, y + 0.1, y + 1) if abs(p - m) < 40 * sd] + [m + 40 * sd]
            ve_ref = float(mp.quad(lambda t: log_p(t, y) * mp.npdf(t, m, sd), cuts))
            lp_ref = float(mp.log(mp.quad(lambda t: mp.exp(log_p(t, y)) * mp.npdf(t, m, sd), cuts)))
            bound = lik.bind(values)
            assert bound.variational_expectations(np.array([y]), np.array([m]), np.array([sd * sd]))[0][0] \
                == pytest.approx(ve_ref, rel=1e-9)
            assert bound.log_predictive(np.array([m]), np.array([sd * sd]), np.array([y]))[0] \
                == pytest.approx(lp_ref, rel=1e-9)


def test_capabilities_of_every_variant():
    """provides(): an operation where the class overrides it, variational expectations also by
    quadrature over log_density_derivatives, noise for Gaussian noise, Pólya-Gamma for the logit."""
    L = gd.likelihoods
    table = {v.describe(): tuple(c for c in L.CAPABILITIES if v.provides(c))
             for cls in L.LIKELIHOODS.values() if cls.__module__.startswith("gpdsl.") for v in cls.variants()}
    assert table == {
        "Gaussian": ("log_density_derivatives", "variational_expectations", "site_model", "noise"),
        "HeteroscedasticGaussian(degree=1)": ("noise",),
        "Bernoulli(probit)": ("log_density_derivatives", "variational_expectations", "site_model"),
        "Bernoulli(logit)": ("log_density_derivatives", "variational_expectations", "site_model", "polya_gamma"),
        "Poisson(square)": ("variational_expectations", "site_model"),
        "StudentT": ("log_density_derivatives", "variational_expectations", "site_model"),
        "Poisson(log)": ("log_density_derivatives", "variational_expectations", "site_model"),
        "NegativeBinomial(log)": ("log_density_derivatives", "variational_expectations", "site_model"),
        "Categorical(3, softmax)": ("log_density_derivatives", "variational_expectations"),
        "Categorical(3, robustmax)": ("variational_expectations",),
        "Categorical(3, logistic_softmax)": ("variational_expectations", "polya_gamma"),
        "OutputGaussian(3)": ("noise",),
        # A likelihood per output: what every part provides, EP/QP's site code where every part has one
        # (gpdsl.likelihoods.per_output, gpdsl._jit.mixed_sites).
        "PerOutput(Gaussian, Bernoulli(probit))": ("log_density_derivatives", "variational_expectations", "site_model"),
        "PerOutput(Gaussian, Gaussian)": ("log_density_derivatives", "variational_expectations", "site_model", "noise"),
        "PerOutput(Poisson(log), Poisson(log))": ("log_density_derivatives", "variational_expectations", "site_model"),
    }
    with pytest.raises(ValueError, match="unknown capability"):
        L.Gaussian().provides("laplace")
    own = [name for name, cls in L.LIKELIHOODS.items() if cls.__module__.startswith("gpdsl.")]
    assert own == ["Gaussian", "HeteroscedasticGaussian", "Bernoulli", "Poisson", "StudentT", "NegativeBinomial",
                   "Categorical", "OutputGaussian", "PerOutput"]


def test_bound_likelihood_qualifies_gradient_keys():
    """Gradients come back by local name; gpdsl.components.Bound adds the model's prefix."""
    from gpdsl.components import Bound, bind
    y, f = np.array([1.0, -1.0]), np.array([0.3, -0.2])
    bern = gd.likelihoods.Bernoulli("logit", bias=0.1)
    assert set(bern.bind().log_density_param_derivatives(y, f)) == {"bias"}
    bound = Bound(bern.bind({"bias": 0.1}), "likelihood")
    assert set(bound.log_density_param_derivatives(y, f)) == {"likelihood.bias"}
    assert set(bound.variational_expectations(y, f, np.ones(2))[3]) == {"likelihood.bias"}
    assert bound.site_model().names == ("likelihood.bias",) and bound.site_model().params == (0.1,)
    t = bind(gd.likelihoods.StudentT(), {"likelihood.df": np.array(3.0), "likelihood.scale": np.array(0.5)}, "likelihood")
    assert t.site_model().names == ("likelihood.df", "likelihood.scale") and t.site_model().params == (3.0, 0.5)
    X = np.arange(6.0).reshape(3, 2)
    het = gd.likelihoods.HeteroscedasticGaussian(degree=1)
    assert [e.name for e in het.entries("likelihood", X)] == ["likelihood.coefficients"]
    assert het.entries("likelihood", X)[0].dims == ("coefficient",)
    np.testing.assert_allclose(het.bind().noise(X), 0.1)
    assert set(Bound(het.bind(), "likelihood").noise_vjp(X, np.ones(3))) == {"likelihood.coefficients"}
    assert Bound(gd.likelihoods.Gaussian(0.2).bind(), "likelihood").noise_vjp(X, np.ones(3)) == {"likelihood.variance": 3.0}


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_bernoulli_rule_ladder_is_the_100_point_rule(link):
    """Each row's smaller rule of the jitted expectations' ladder (RULE_LADDER) gives the 100-point
    rule's numbers to rounding: 1e-12 relative in E and d/dmean (atol 1e-300: tails near
    underflow included), 1e-10 in d/dvar where above 1e-6, on a grid of means to |z_0| = 45 and
    latent sds 0.2 to 1.5 that crosses every rule's limits (below sd 0.2 d/dvar is a cancelling
    sum of slopes, rounding noise for either rule)."""
    from gpdsl._jit.bernoulli_expectations import bernoulli_expectations
    from gpdsl.likelihoods.base import gauss_hermite
    from gpdsl.likelihoods.bernoulli import _rule_ladder
    x, w = gauss_hermite(100)
    single = (x, w, np.array([0, 100]), np.array([np.inf]), np.array([np.inf]))
    m, sd = np.meshgrid(np.linspace(-45.0, 45.0, 721), np.arange(0.2, 1.5, 0.01))
    m, v = m.ravel(), sd.ravel() ** 2
    for label in (-1.0, 1.0):
        y = np.full_like(m, label)
        ladder = bernoulli_expectations(y, m, v, 0.3, link == "probit", *_rule_ladder(link, 100))
        rule = bernoulli_expectations(y, m, v, 0.3, link == "probit", *single)
        np.testing.assert_allclose(ladder[0], rule[0], rtol=1e-12)
        np.testing.assert_allclose(ladder[1], rule[1], rtol=1e-12, atol=1e-300)
        moderate = np.abs(rule[2]) > 1e-6
        np.testing.assert_allclose(ladder[2][moderate], rule[2][moderate], rtol=1e-10)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_bernoulli_jitted_expectations_are_the_base_rule(link):
    """Bernoulli's jitted variational expectations are the base class's Gauss-Hermite rule over
    (rows, nodes) arrays, to rounding (1e-12 relative; d/dvar 1e-10, a sum of slopes as large as
    |z| = 45 that cancels to 0.5; rows at var 0 included), on rows where
    that rule's d/dvar is itself accurate; where it is not (the logit at |z| = 40, whose slope
    1 - p is constant to 1e-18 across the nodes), the jitted d/dvar is 1/2 E[d^2 log p / df^2]
    under the same rule (the identity the rule's sum approximates; 1e-10 relative at latent sds
    up to 1.6)."""
    from gpdsl.likelihoods.base import Likelihood, gauss_hermite
    rng = np.random.default_rng(3)
    n = 400
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    m = np.concatenate([rng.normal(size=n - 100) * 3, rng.normal(size=100) * 15])
    v = np.exp(rng.uniform(-3.0, 1.0, size=n))
    v[:5] = 0.0
    lik = gd.likelihoods.Bernoulli(link, bias=0.3).bind()
    jitted = lik.variational_expectations(y, m, v)
    arrays = Likelihood.variational_expectations(lik, y, m, v)
    np.testing.assert_allclose(jitted[0], arrays[0], rtol=1e-12)
    np.testing.assert_allclose(jitted[1], arrays[1], rtol=1e-12, atol=1e-300)
    moderate = np.abs(arrays[2]) > 1e-6
    np.testing.assert_allclose(jitted[2][moderate], arrays[2][moderate], rtol=1e-10)
    assert jitted[3]["bias"] == pytest.approx(arrays[3]["bias"], rel=1e-12)
    if link == "logit":
        nodes, weights = gauss_hermite(lik.quadrature_points)
        z = y[:, None] * (m[:, None] + np.sqrt(v)[:, None] * nodes + 0.3)
        half_curvature = 0.5 * np.sum(weights * -special.expit(z) * special.expit(-z), axis=1)
        tails = (~moderate) & (v > 0) & (np.abs(half_curvature) > 1e-300)
        assert tails.sum() > 20
        np.testing.assert_allclose(jitted[2][tails], half_curvature[tails], rtol=1e-10)


# -- capabilities follow the density, and the base class's defaults --------------------------------
def test_no_builtin_likelihood_loses_an_operation_to_the_density_rule():
    """Every gpdsl likelihood defines its density where its operations are (the Gaussian-noise
    base, which has none, keeps its surrogate and noise flag for both Gaussian classes)."""
    for cls in gd.likelihoods.LIKELIHOODS.values():
        if cls.__module__.startswith("gpdsl."):
            assert cls.inherited_without_density() == {}, cls.__name__
    assert gd.likelihoods.Gaussian().defines("surrogate") and gd.likelihoods.Gaussian().observation_noise


def test_a_subclass_that_redefines_the_density_runs_the_defaults_not_the_parents_forms():
    """A Poisson subclass with another log density (a shifted log link): its log_density_derivatives
    are reset (Poisson's are for Poisson's density) and say so; its log predictive is the
    default quadrature of its own density, not Poisson's closed form; an operation it declares
    again is kept."""
    from dataclasses import dataclass

    @dataclass(frozen=True, eq=False)
    class ShiftedRate(gd.likelihoods.Poisson):
        def log_density(self, y, f):
            return stats.poisson.logpmf(y, np.exp(f + 1.0))

    @dataclass(frozen=True, eq=False)
    class ShiftedRateKeepsSites(ShiftedRate):
        site_model = gd.likelihoods.Poisson.site_model

    lik = ShiftedRate(link="log")
    assert set(ShiftedRate.inherited_without_density()) >= {"log_density_derivatives", "site_model",
                                                              "log_predictive", "predictive", "sample"}
    assert not lik.provides("log_density_derivatives") and not lik.provides("variational_expectations")
    assert not lik.provides("site_model")
    with pytest.raises(NotImplementedError, match=r"ShiftedRate does not provide derivatives of its log density "
                                                  r"\(Poisson.log_density_derivatives is for Poisson's density"):
        lik.log_density_derivatives(np.ones(2), np.zeros(2))
    with pytest.raises(ValueError, match="ShiftedRate with Laplace is not supported"):
        gd.Model(gd.kernels.SquaredExponential(), lik, inference=gd.inference.Laplace())
    m, v, y = np.array([0.2]), np.array([0.5]), np.array([3.0])
    ref, _ = integrate.quad(lambda f: stats.poisson.pmf(3, np.exp(f + 1.0)) * stats.norm.pdf(f, 0.2, np.sqrt(0.5)),
                            -10, 10, epsabs=1e-14)
    assert lik.bind().log_predictive(m, v, y)[0] == pytest.approx(np.log(ref), rel=1e-10)
    assert ShiftedRateKeepsSites(link="log").provides("site_model")
    assert "site_model" not in ShiftedRateKeepsSites.inherited_without_density()


@pytest.fixture(scope="module")
def minimal_count():
    """A count likelihood with only its log density's derivatives (Poisson, log link)."""
    from dataclasses import dataclass

    @dataclass(frozen=True, eq=False)
    class MinimalPoisson(gd.likelihoods.Likelihood):
        target_kind = "count"

        def log_density_derivatives(self, y, f):
            rate = np.exp(f)
            return y * f - rate - special.gammaln(y + 1.0), y - rate, -rate, -rate

    return MinimalPoisson()


def test_count_defaults_sum_the_pmf(minimal_count):
    """The defaults of a count likelihood: E[y | f], Var[y | f] by summing the pmf (Poisson: both
    e^f, to 1e-10), predictive y_mean and y_var equal to Poisson's closed forms E[e^f] and
    E[e^f] + Var[e^f] (to the 100-point rule's 1e-9 here), log_predictive to Poisson's
    quadrature, and draws whose frequencies follow the pmf (5 standard errors)."""
    lik = minimal_count
    f = np.array([-3.0, 0.0, 1.5, 4.0])
    mean, var = lik.conditional_moments(f)
    np.testing.assert_allclose(mean, np.exp(f), rtol=1e-10)
    np.testing.assert_allclose(var, np.exp(f), rtol=1e-10)
    m, v = np.array([-1.0, 0.5, 2.0]), np.array([0.2, 0.8, 0.1])
    summary = lik.predictive(m, v)
    e_rate = np.exp(m + v / 2)
    np.testing.assert_allclose(summary["y_mean"], e_rate, rtol=1e-9)
    np.testing.assert_allclose(summary["y_var"], e_rate + e_rate ** 2 * np.expm1(v), rtol=1e-9)
    y = np.array([0.0, 2.0, 9.0])
    np.testing.assert_allclose(lik.log_predictive(m, v, y),
                               gd.likelihoods.Poisson(link="log").bind().log_predictive(m, v, y), rtol=1e-9)
    draws = lik.sample(np.full(100_000, 1.0), np.random.default_rng(0))
    p = stats.poisson.pmf(np.arange(8), np.e)
    freq = np.array([np.mean(draws == k) for k in range(8)])
    np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / draws.size))
    # And through the public conformance checks (quadrature of the density, draws of sample).
    gpdsl.testing.check_likelihood_log_predictive(lik)
    gpdsl.testing.check_likelihood_predictive(lik)


def test_count_defaults_refuse_an_unnormalised_pmf(minimal_count):
    """A pmf that does not sum to 1 (here 0.5) is refused, naming its total."""
    from dataclasses import dataclass

    @dataclass(frozen=True, eq=False)
    class HalfMass(type(minimal_count)):
        def log_density_derivatives(self, y, f):
            d = super().log_density_derivatives(y, f)
            return (d[0] - np.log(2.0),) + d[1:]

    with pytest.raises(NotImplementedError, match=r"HalfMass does not provide count moments .* sums to 0.5"):
        HalfMass().conditional_moments(np.zeros(2))


def test_real_targets_without_conditional_moments_predict_f_only_and_draw_nothing():
    """Real-valued targets: predictive warns and gives no y summary; with conditional_moments
    it gives y_mean = E[E[y | f]], y_var = E[Var[y | f]] + Var[E[y | f]] (a Gaussian: m and
    v + noise, to the rule's rounding)."""
    from dataclasses import dataclass

    @dataclass(frozen=True, eq=False)
    class UnitNoise(gd.likelihoods.Likelihood):
        def log_density_derivatives(self, y, f):
            r = y - f
            return -0.5 * r * r - 0.5 * np.log(2 * np.pi), r, -np.ones_like(r), np.zeros_like(r)

    @dataclass(frozen=True, eq=False)
    class UnitNoiseWithMoments(UnitNoise):
        def conditional_moments(self, f):
            return f, np.ones_like(f)

    m, v = np.array([0.3, -1.0]), np.array([0.5, 2.0])
    with pytest.warns(UserWarning, match="UnitNoise defines no conditional_moments"):
        assert UnitNoise().predictive(m, v) == {}
    with pytest.raises(NotImplementedError, match="UnitNoise does not provide sampling"):
        UnitNoise().sample(m, np.random.default_rng(0))
    summary = UnitNoiseWithMoments().predictive(m, v)
    np.testing.assert_allclose(summary["y_mean"], m, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(summary["y_var"], v + 1.0, rtol=1e-12)
    np.testing.assert_allclose(UnitNoise().log_predictive(m, v, np.array([1.0, 2.0])),
                               stats.norm.logpdf([1.0, 2.0], m, np.sqrt(v + 1.0)), rtol=1e-12)


# -- the defaults' integrals over a narrow or a wide likelihood -------------------------------------
@pytest.fixture(scope="module")
def minimal_likelihoods(minimal_count):
    """Likelihoods with only their log density's derivatives, and their log densities in mpmath:
    Gaussian noise of sd 0.01 and 0.3 (narrower than the latent sd), binary labels through the
    cloglog link (wide in f), and minimal_count's Poisson counts (log link: 1000 under N(0, 0.01)
    is 60 sds out)."""
    from dataclasses import dataclass
    mp = pytest.importorskip("mpmath")

    @dataclass(frozen=True, eq=False)
    class NormalNoise(gd.likelihoods.Likelihood):
        sd: float = 0.01
        target_kind = "real"

        def log_density_derivatives(self, y, f):
            r, s2 = y - f, self.sd ** 2
            return -0.5 * r * r / s2 - 0.5 * np.log(2 * np.pi * s2), r / s2, np.full_like(r, -1 / s2), 0 * r

    @dataclass(frozen=True, eq=False)
    class Cloglog(gd.likelihoods.Likelihood):
        target_kind = "binary"

        def prepare_targets(self, y):
            return np.where(y > 0, 1.0, -1.0)

        def log_density_derivatives(self, y, f):
            e = np.exp(f)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                r = e * np.exp(-e) / -np.expm1(-e)
                dr = r * (1.0 - e - r)
            pos = y > 0
            return (np.where(pos, np.log(-np.expm1(-e)), -e), np.where(pos, r, -e), np.where(pos, dr, -e),
                    np.where(pos, dr * (1.0 - e - r) + r * (-e - dr), -e))

    def normal(sd):
        return lambda y, f: -(y - f) ** 2 / (2 * sd ** 2) - mp.log(2 * mp.pi * sd ** 2) / 2

    def cloglog(y, f):
        return mp.log(-mp.expm1(-mp.exp(f))) if y > 0 else -mp.exp(f)

    def poisson(y, f):
        return y * f - mp.exp(f) - mp.loggamma(y + 1)

    return mp, [(NormalNoise(0.01), normal(0.01), (0.3, 3.0)), (NormalNoise(0.3), normal(0.3), (0.0, -2.0)),
                (Cloglog(), cloglog, (1.0, -1.0)), (minimal_count, poisson, (0.0, 3.0, 50.0, 1000.0))]


def _log_gaussian_integral_mpmath(mp, log_p, y, m, v, lik):
    """log int p(y | f) N(f | m, v) df by 30-digit quadrature, split at the tilted mode (the
    maximum of a grid over the prior's +-60 sds and over [-10, 10], where these likelihoods peak,
    refined on a finer grid; located with the likelihood's own float log density, which only
    places the split) and at 10^k fine steps around it."""
    mp.mp.dps = 30
    h = lambda f: log_p(mp.mpf(y), f) - (f - m) ** 2 / (2 * mp.mpf(v))  # noqa: E731
    sd = np.sqrt(v)
    lo, hi = min(m - 60 * sd, -10.0), max(m + 60 * sd, 10.0)
    grid = np.concatenate([np.linspace(m - 60 * sd, m + 60 * sd, 2001), np.linspace(-10.0, 10.0, 20_001)])
    def tilted(f):
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            return lik.log_density(np.full(f.size, y), f) - (f - m) ** 2 / (2 * v)

    coarse = grid[int(np.argmax(tilted(grid)))]
    spacing = max(120 * sd / 2000, 1e-3)
    fine = np.linspace(coarse - 2 * spacing, coarse + 2 * spacing, 2001)
    top_f = mp.mpf(fine[int(np.argmax(tilted(fine)))])
    step = mp.mpf(4 * spacing / 2000)
    points = sorted({mp.mpf(lo), mp.mpf(hi)}
                    | {top_f + d * step for d in (-1e6, -1e5, -1e4, -1e3, -1e2, -10, -1, 0, 1, 10, 1e2, 1e3, 1e4, 1e5, 1e6)})
    points = [p for p in points if lo <= p <= hi]
    top = h(top_f)
    return float(top + mp.log(mp.quad(lambda f: mp.exp(h(f) - top), points)) - mp.log(mp.sqrt(2 * mp.pi * v)))


def test_default_log_predictive_against_30_digit_quadrature(minimal_likelihoods):
    """The default log predictive (the tilted-mode rule) within 1e-10 relative (of max(1, |value|))
    of 30-digit quadrature for means -5..2 and latent variances 1e-4..1e4, where the likelihood is
    far narrower than the latent sd (noise sd 0.01 under variance 1: the 100-point Gauss-Hermite
    rule gave -101.1 for -0.964) or far wider (a cloglog label under variance 1e4: 3.7e-2 off),
    and counts up to 1000 (60 latent sds out under N(0, 0.01)); p of binary targets with it."""
    mp, cases = minimal_likelihoods
    for lik, log_p, targets in cases:
        bound = lik.bind()
        for y in targets:
            for m in (-5.0, 0.0, 2.0):
                for v in (1e-4, 1e-2, 1.0, 100.0, 1e4):
                    got = bound.log_predictive(np.array([m]), np.array([v]), np.array([y]))[0]
                    want = _log_gaussian_integral_mpmath(mp, log_p, y, m, v, bound)
                    assert abs(got - want) <= 1e-10 * max(1.0, abs(want)), (type(lik).__name__, y, m, v, got, want)
    cloglog = cases[2][0].bind()
    for m, v in ((0.0, 100.0), (-5.0, 1e4), (2.0, 1e4)):
        want = np.exp(_log_gaussian_integral_mpmath(mp, cases[2][1], 1.0, m, v, cloglog))
        assert cloglog.predictive(np.array([m]), np.array([v]))["p"][0] == pytest.approx(want, rel=1e-10)


def test_default_log_predictive_at_a_point_mass(minimal_likelihoods):
    """Latent variance 0 (or below the rounding of the mean) is log p(y | mean)."""
    _, cases = minimal_likelihoods
    lik = cases[1][0].bind()
    m, y = np.array([0.4, 1e8]), np.array([0.1, 1e8 + 0.2])
    for v in (np.zeros(2), np.array([0.0, 1e-30])):
        np.testing.assert_allclose(lik.log_predictive(m, v, y), lik.log_density(y, m), rtol=1e-13)


def test_default_log_predictive_far_from_zero_sums_to_at_most_one(minimal_likelihoods):
    """Issue 45 fuzz (poisson_log_svgp 10057, 20042, 20137): a latent mean of many sds (-3.6e11 at sd 24,
    -66 at sd 3.6e-4, -2.4e7 at sd 1.07) rounded every node's f - mean by ~1e-16 |mean|, and log
    p(y = 0) of a Poisson log link came out +1.4e-7, +1.1e-12 and +1.3e-11 (a probability above 1).  Against the closed forms:
    log E[exp(-e^f)] = -e^(m + v/2) + e^(2m + 2v) / 2 + ... (mpmath, the first two terms, exact here
    to far below the rule's rounding; log p(0 | f) = -e^f has no rounding of its own at these f);
    tolerance 1e-13 absolute: 512 nodes of terms up to 1 with weights summing to 1 round by at most
    ~512 eps."""
    mp, _ = minimal_likelihoods
    mp.mp.dps = 30
    poisson = gd.likelihoods.Poisson("log").bind()
    m = np.array([-358175210177.42615, -65.9907093197041, -23952658.60847904, -1e8, -40.0, -1e15])
    v = np.array([572.343276445401, 1.2921225334139308e-07, 1.1444464291603254, 1e-4, 1e-9, 1.0])
    got = poisson.log_predictive(m, v, np.zeros(m.size))
    want = [float(-mp.exp(mp.mpf(a) + mp.mpf(b) / 2) + mp.exp(2 * mp.mpf(a) + 2 * mp.mpf(b)) / 2) for a, b in zip(m, v)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    assert np.all(got <= 1e-13)



def test_default_log_predictive_with_the_mode_far_below_the_mean():
    """Issue 45 fuzz (poisson_log_ep_dense 10012): held-out rows of a Poisson log link with a latent
    mean of 4.1e5 (sd 1,366) on a count of 38,561 gave -inf: exp(f) overflowed at the mean, the
    Newton step was NaN and the tilted-mode search never moved; from a finite start (mean 600,
    100, 300) it moved f by ~1 a step (exp(f) dominates) and stopped 60 steps later, centring the
    rule hundreds of units from the mass (-8.0e6 for -33.46, -1.7e99 for -43584).  Against mpmath:
    the mode by Newton's method at 40 digits from log y, and the 40-digit quadrature of
    p(y | f) N(f | m, v) split at it and +-1, 60 tilted widths; tolerance 1e-12 relative (the
    rule's error is 2e-12 at most over the grid above) plus 4 eps times |y f| + log y! at the mode,
    the terms log p is a sum of (7.8e5 at y = 38,561: 3.4e-11 measured on -33.46)."""
    import mpmath as mp

    rows = [(38561.0, 413118.076816772, 1865208.2555983216), (38561.0, 600.0, 1e4), (38561.0, 100.0, 10.0),
            (5.0, 300.0, 1.0), (3.0, 60.0, 100.0), (0.0, 800.0, 4.0)]
    y, m, v = map(np.array, zip(*rows))
    got = gd.likelihoods.Poisson("log").bind().log_predictive(m, v, y)
    for (yy, mm, vv), value in zip(rows, got):
        with mp.workdps(40):
            want = _poisson_log_predictive_mpmath(mp, yy, mm, vv)
        scale = yy * abs(np.log(max(yy, 1.0))) + special.gammaln(yy + 1.0)     # |y f| + log y! at the mode
        assert abs(value - want) <= 1e-12 * abs(want) + 4 * np.finfo(float).eps * scale, (yy, mm, vv, value, want)


def _poisson_log_predictive_mpmath(mp, yy, mm, vv):
    """log int Poisson(y | e^f) N(f | m, v) df by mpmath quadrature split at the tilted mode."""
    h = lambda f: yy * f - mp.exp(f) - mp.loggamma(yy + 1) - (f - mm) ** 2 / (2 * vv)  # noqa: E731
    mode = mp.findroot(lambda f: yy - mp.exp(f) - (f - mm) / vv, mp.log(max(yy, 1.0)), verify=False)
    width = 1 / mp.sqrt(1 / vv + mp.exp(mode))
    top = h(mode)
    want = top + mp.log(mp.quad(lambda f: mp.exp(h(f) - top), [mode + k * width for k in (-60, -1, 0, 1, 60)]))
    return float(want - mp.log(mp.sqrt(2 * mp.pi * vv)))


# -- the density rule: helpers, mixins, variants ---------------------------------------------------
def test_a_subclass_that_redefines_a_density_helper_runs_the_defaults():
    """A subclass that changes the density through a helper of ``density_functions``
    (NegativeBinomial._terms, StudentT._params, Gaussian._variance, Categorical._log_probabilities)
    keeps the parent's log density and derivatives (written through the helper) but none of the
    parent's closed forms: EP's sites, predictions, Gaussian noise; its log predictive is then the
    quadrature of its own density."""
    from dataclasses import dataclass

    L = gd.likelihoods

    @dataclass(frozen=True, eq=False)
    class DoubledRate(L.NegativeBinomial):
        def _terms(self, y, f):
            return super()._terms(y, f + np.log(2.0))

    @dataclass(frozen=True, eq=False)
    class WiderT(L.StudentT):
        def _params(self):
            nu, s = super()._params()
            return nu, 2.0 * s

    @dataclass(frozen=True, eq=False)
    class NoisierGaussian(L.Gaussian):
        def _variance(self):
            return 4.0 * super()._variance()

    @dataclass(frozen=True, eq=False)
    class SharperSoftmax(L.Categorical):
        def _log_probabilities(self, F):
            return super()._log_probabilities(2.0 * F)

    for instance, parent in ((DoubledRate(), L.NegativeBinomial), (WiderT(), L.StudentT),
                             (NoisierGaussian(), L.Gaussian), (SharperSoftmax(3), L.Categorical)):
        reset = type(instance).inherited_without_density()
        assert {"predictive", "log_predictive", "sample"} <= set(reset), type(instance).__name__
        assert set(reset.values()) == {parent.__name__}, type(instance).__name__
        assert not instance.provides("site_model"), type(instance).__name__
    for cls in (DoubledRate, WiderT, NoisierGaussian):
        assert cls().provides("log_density_derivatives") and "log_density_derivatives" not in cls.inherited_without_density()
    assert not NoisierGaussian().provides("noise") and L.Gaussian().provides("noise")
    assert not SharperSoftmax(3).provides("variational_expectations")
    lik = DoubledRate(dispersion=0.5).bind({"dispersion": np.array(0.5)})
    m, v, y = 0.3, 0.4, 4.0
    ref, _ = integrate.quad(lambda f: stats.nbinom.pmf(4, 2.0, 2.0 / (2.0 + 2.0 * np.exp(f))) * stats.norm.pdf(f, m, np.sqrt(v)),
                            m - 12 * np.sqrt(v), m + 12 * np.sqrt(v), epsabs=1e-14, epsrel=1e-12)
    assert lik.log_predictive(np.array([m]), np.array([v]), np.array([y]))[0] == pytest.approx(np.log(ref), rel=1e-10)


def test_plain_mixins_are_accepted_by_the_density_rule():
    """A plain (non-Likelihood) mixin that states a density, or one that states none, does not
    break class creation (it raised RuntimeError: generator raised StopIteration); a mixin with
    no density keeps its operation below a parent whose density is redefined."""
    from dataclasses import dataclass

    class UnitNormalDensity:
        def log_density(self, y, f):
            return -0.5 * (y - f) ** 2 - 0.5 * np.log(2 * np.pi)

    class DrawsNothing:
        def sample(self, f, rng):
            return np.zeros_like(f)

    @dataclass(frozen=True, eq=False)
    class UnitNormal(UnitNormalDensity, gd.likelihoods.Likelihood):
        def log_density_derivatives(self, y, f):
            r = y - f
            return self.log_density(y, f), r, -np.ones_like(r), np.zeros_like(r)

    @dataclass(frozen=True, eq=False)
    class Flat(DrawsNothing, gd.likelihoods.Bernoulli):
        def log_density_derivatives(self, y, f):
            return (np.full(np.shape(f), -np.log(2.0)),) + (np.zeros(np.shape(f)),) * 3

    assert UnitNormal().provides("variational_expectations")
    np.testing.assert_allclose(UnitNormal().log_density(np.array([1.0]), np.array([0.0])), -0.5 - 0.5 * np.log(2 * np.pi))
    assert Flat().defines("sample") and "sample" not in Flat.inherited_without_density()
    assert not Flat().provides("site_model") and not Flat().provides("polya_gamma")


def test_variants_are_reset_with_the_density():
    """A subclass that redefines its parent's density does not inherit the parent's variants
    (Bernoulli's probit and logit: two identical instances for a cloglog subclass that ignores
    the link): it gets ``(cls(),)`` unless it declares its own."""
    from dataclasses import dataclass

    @dataclass(frozen=True, eq=False)
    class Cloglog(gd.likelihoods.Bernoulli):
        def log_density_derivatives(self, y, f):
            e = np.exp(f)
            return np.log(-np.expm1(-e)), e, e, e  # only the variants are looked at here

    @dataclass(frozen=True, eq=False)
    class CloglogWithVariants(Cloglog):
        @classmethod
        def variants(cls):
            return (cls(bias=0.0), cls(bias=1.0))

    assert len(Cloglog.variants()) == 1 and Cloglog.inherited_without_density()["variants"] == "Bernoulli"
    assert not Cloglog().defines("variants") and CloglogWithVariants().defines("variants")
    assert [v.bias for v in CloglogWithVariants.variants()] == [0.0, 1.0]
    assert len(gd.likelihoods.Bernoulli.variants()) == 2


# -- the count defaults at large latent variances ---------------------------------------------------
def test_count_predictive_by_summed_pmfs_up_to_latent_variance_16(minimal_count):
    """The default count predictive (pmfs summed over the counts that hold their mass, at the nodes
    of a rule sized to the latent sd) against closed forms: a log-link Poisson's E[e^f] and
    E[e^f] + Var[e^f] at latent variances to 4 (it raised 'sums to 0 ... not 1' from 4: nodes
    reached counts above 10^6), and a square-link Poisson's m^2 + v and m^2 + v + 2v(2m^2 + v) at
    variances to 16; the summation's rounding is ~1e-14 relative here, the rule's below 1e-15."""
    from dataclasses import dataclass

    @dataclass(frozen=True, eq=False)
    class MinimalSquarePoisson(gd.likelihoods.Likelihood):
        target_kind = "count"

        def log_density_derivatives(self, y, f):
            rate = f * f
            with np.errstate(divide="ignore", invalid="ignore"):
                return (special.xlogy(y, rate) - rate - special.gammaln(y + 1.0), 2 * y / f - 2 * f,
                        -2 * y / f ** 2 - 2, 4 * y / f ** 3)

    m = np.array([-1.0, 0.0, 0.5, 2.0, 5.0, 12.0])
    for v in (0.01, 0.5, 1.0, 2.5, 4.0):
        summary = minimal_count.predictive(m[:5], np.full(5, v))
        rate = np.exp(m[:5] + v / 2)
        np.testing.assert_allclose(summary["y_mean"], rate, rtol=1e-11, err_msg=f"v = {v}")
        np.testing.assert_allclose(summary["y_var"], rate + rate ** 2 * np.expm1(v), rtol=1e-11, err_msg=f"v = {v}")
    square = MinimalSquarePoisson()
    for v in (0.01, 1.0, 4.0, 9.0, 16.0):
        summary = square.predictive(m, np.full(m.size, v))
        want = gd.likelihoods.Poisson(link="square").bind().predictive(m, np.full(m.size, v))
        np.testing.assert_allclose(summary["y_mean"], want["y_mean"], rtol=1e-11, err_msg=f"v = {v}")
        np.testing.assert_allclose(summary["y_var"], want["y_var"], rtol=1e-10, err_msg=f"v = {v}")


def test_count_predictive_beyond_the_summation_is_nan_with_a_warning_that_says_why(minimal_count):
    """A log-link pmf under latent variance 16 needs counts beyond 2^40 (the variance of y lies
    there): those rows are NaN and a warning names the latent value, the limit and the remedy;
    the other rows are computed; a class that gives conditional_moments is exact at any variance."""
    from dataclasses import dataclass

    @dataclass(frozen=True, eq=False)
    class PoissonWithMoments(type(minimal_count)):
        def conditional_moments(self, f):
            return np.exp(f), np.exp(f)

    m, v = np.array([0.0, 1.0]), np.array([16.0, 0.3])
    with pytest.warns(UserWarning, match=r"1 of 2 rows are NaN: .* p\(y \| f\) at f = [0-9.]+: its mass reaches "
                                         r"beyond y = 2\^40 \(define conditional_moments"):
        summary = minimal_count.predictive(m, v)
    assert np.isnan(summary["y_mean"][0]) and np.isnan(summary["y_var"][0])
    assert summary["y_mean"][1] == pytest.approx(np.exp(1.15), rel=1e-12)
    with pytest.raises(NotImplementedError, match=r"count moments by summation \(p\(y \| f\) at f = 40: its mass "
                                                  r"reaches beyond y = 2\^40\)"):
        minimal_count.conditional_moments(np.array([1.0, 40.0]))
    exact = PoissonWithMoments().predictive(m, v)
    rate = np.exp(m + v / 2)
    np.testing.assert_allclose(exact["y_mean"], rate, rtol=1e-12)
    np.testing.assert_allclose(exact["y_var"], rate + rate ** 2 * np.expm1(v), rtol=1e-9)


def test_count_draws_at_large_rates(minimal_count):
    """Draws of a count pmf whose mass lies far from 0 (rate e^16 = 8.9e6: the old summation from
    0 stopped at 10^6 counts) by inverting its sum over the window that holds it: mean and
    variance within 5 standard errors of Poisson's."""
    for f in (3.0, 9.0, 16.0):
        draws = minimal_count.sample(np.full(20_000, f), np.random.default_rng(5))
        rate = np.exp(f)
        assert abs(draws.mean() - rate) < 5 * np.sqrt(rate / draws.size), f
        assert abs(draws.var() / rate - 1.0) < 5 * np.sqrt(2.0 / draws.size), f


def test_count_moments_and_draws_of_a_pmf_from_0_with_a_long_tail():
    """A negative binomial of mean e^8 and dispersion 2 (p(0) = 0.013, mass out to 2.7e5 counts):
    its window starts at 0, where summing every h-th count would be off by ~h p(0) / 2 (1.9e-4 in
    the mass of dispersion 0.4 at mean 37), so every count is summed: mean mu and variance
    mu + 2 mu^2 to 1e-10, and draws' mean within 5 standard errors."""
    from gpdsl.likelihoods.density_integrals import count_draws, count_moments
    lik = gd.likelihoods.NegativeBinomial(dispersion=2.0).bind({"dispersion": np.array(2.0)})
    f = np.array([3.6, 8.0])
    mean, var, failure = count_moments(lik, f)
    assert failure is None
    np.testing.assert_allclose(mean, np.exp(f), rtol=1e-10)
    np.testing.assert_allclose(var, np.exp(f) + 2.0 * np.exp(2 * f), rtol=1e-10)
    draws, failure = count_draws(lik, np.full(4000, 8.0), np.random.default_rng(6).uniform(size=4000))
    assert failure is None
    assert abs(draws.mean() - np.exp(8.0)) < 5 * np.sqrt((np.exp(8.0) + 2 * np.exp(16.0)) / draws.size)
