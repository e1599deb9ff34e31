"""SVGP and VGP through gd.Model: the fitted bounds against the collapsed and exact methods, the
optimality of the fitted q, and the joint (GPflow-style) optimisation of q."""
import warnings

import numpy as np
import pytest

import gpdsl as gd
from naive import bound_pair
from gpdsl.methods import svgp

SE = gd.kernels.SquaredExponential


@pytest.fixture(scope="module")
def sine():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3.0, 3.0, size=(120, 1))
    return X, np.sin(2.0 * X[:, 0]) + 0.2 * rng.standard_normal(120)


def test_svgp_fit_equals_the_vfe_fit_and_vgp_the_exact_gp(sine):
    """With a Gaussian likelihood the natural-gradient q is optimal in one step, so the fitted
    SVGP bound is Titsias' collapsed bound at the same optimum and VGP's is the exact log
    marginal likelihood (1e-8; L-BFGS-B runs the same path on the same objective up to rounding)."""
    X, y = sine
    Z = gd.inducing.KMeans(12, seed=0)
    pairs = ((gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), Z, gd.inference.SVGP()),
              gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), Z, gd.inference.VFE())),
             (gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), None, gd.inference.VGP()),
              gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), None, gd.inference.Exact())))
    for variational, reference in pairs:
        fit, ref = variational.fit(X, y), reference.fit(X, y)
        assert fit.converged and fit.sites.converged and fit.sites.sweeps <= 2
        assert fit.log_evidence == pytest.approx(ref.log_evidence, rel=0, abs=1e-8)
        for name, value in ref.values.items():
            np.testing.assert_allclose(fit.values[name], value, rtol=1e-5, err_msg=name)
        for a, b in zip(fit.predict_f(X[:7]), ref.predict_f(X[:7])):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_fitted_svgp_q_is_stationary_and_svgp_with_z_at_x_is_vgp(sine, link):
    """Issue 15: after a converged fit with the default q_tol, q(u) satisfies its ELBO's
    optimality condition: gradient in q_mu and q_sqrt below 1e-6 (measured 8.0e-8 probit, 2.1e-8
    logit: the posterior's q is polished to a small fixed-point residual, not only to a small
    gain of the bound, which is quadratic in it).  SVGP with Z = X fits the same bound as VGP (1e-6)."""
    X, y = sine[0][:60], (sine[1][:60] > 0).astype(float)
    lik = gd.likelihoods.Bernoulli(link)
    fits = {}
    for name, inducing, inference in (("svgp", gd.inducing.Fixed(X), gd.inference.SVGP(jitter=1e-8)),
                                      ("vgp", None, gd.inference.VGP(jitter=1e-8))):
        fits[name] = gd.Model(SE(1.0, 1.0), lik, inducing, inference).fit(X, y)
        assert fits[name].converged
    post = fits["svgp"]
    ev = svgp.evaluate(*bound_pair(post.model.kernel, lik, {**post.values, **post.sites.q}), {**post.values, **post.sites.q}, X, lik.prepare_targets(y), X,
                       jitter=1e-8)
    for name in post.sites.q:
        assert np.max(np.abs(ev.grads[name])) < 1e-6, name
    assert fits["svgp"].log_evidence == pytest.approx(fits["vgp"].log_evidence, abs=1e-6)


def test_joint_q_updates_optimise_q_with_the_hyperparameters(sine):
    """q_updates="joint" (GPflow's way) makes q's parameters hyperparameters of the fit: they are
    in the values (and saved as such), they start at the prior, and L-BFGS-B moves them towards
    the natural-gradient fit's bound (which it does not reach in 30 iterations, hence the
    comparison is one-sided)."""
    X, y = sine[0][:60], (sine[1][:60] > 0).astype(float)
    model = gd.Model(SE(1.0, 1.0), gd.likelihoods.Bernoulli("logit"), gd.inducing.KMeans(8, seed=0),
                     gd.inference.SVGP(q_updates="joint"))
    assert set(model.parameter_table(X, X[:8]).names()) >= {"variational.q_mu", "variational.q_sqrt"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        joint = model.fit(X, y, max_iter=30)
    natural = gd.Model(SE(1.0, 1.0), gd.likelihoods.Bernoulli("logit"), gd.inducing.KMeans(8, seed=0),
                       gd.inference.SVGP()).fit(X, y)
    assert joint.sites is None and joint.values["variational.q_sqrt"].shape == (36,)
    start = model.fit(X, y, optimize=False).log_evidence
    assert start < joint.log_evidence <= natural.log_evidence + 1e-9


def test_variational_options_are_validated():
    with pytest.raises(ValueError, match="SVGP: q_updates must be one of"):
        gd.inference.SVGP(q_updates="adam")
    with pytest.raises(ValueError, match="SVGP: batch_size needs q_updates='natural'"):
        gd.inference.SVGP(batch_size=64, q_updates="joint")
    with pytest.raises(ValueError, match="SVGP: natural_step must be in \\(0, 1\\], got 0"):
        gd.inference.SVGP(batch_size=64, natural_step=0)
    with pytest.raises(ValueError, match="SVGP: batch_size must be a positive integer"):
        gd.inference.SVGP(batch_size=0)
    with pytest.raises(ValueError, match="VGP: q_tol must be a positive"):
        gd.inference.VGP(q_tol=0.0)
    with pytest.raises(ValueError, match="HeteroscedasticGaussian with SVGP is not supported"):
        gd.Model(SE(1.0, 1.0), gd.likelihoods.HeteroscedasticGaussian(degree=1), gd.inducing.KMeans(4),
                 gd.inference.SVGP())
    with pytest.raises(TypeError, match="SVGP needs an inducing spec"):
        gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(), None, gd.inference.SVGP())


def test_minibatch_svgp_with_the_whole_batch_is_adam_on_the_vfe_bound(sine):
    """SVGP(batch_size=N, natural_step=1) with a Gaussian likelihood: each natural-gradient step
    from the whole batch puts q at its optimum for the current hyperparameters, where the bound
    is Titsias' and its gradient VFE's, so the run is Adam on the VFE bound: the fitted SVGP's
    log evidence is the VFE bound at the hyperparameters it reached (1e-8), and 300 steps of
    learning rate 0.05 bring it within 0.05 nats of VFE's L-BFGS-B optimum."""
    X, y = sine
    inducing = gd.inducing.KMeans(12, seed=0)
    stochastic = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), inducing,
                          gd.inference.SVGP(batch_size=X.shape[0], natural_step=1.0, learning_rate=0.05))
    post = stochastic.fit(X, y, max_iter=300)
    vfe = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1), inducing, gd.inference.VFE())
    table = vfe.parameter_table(X, post.state.Z)
    bound = vfe.evaluate(post.values, X, y, post.state.Z, need_grad=False).log_evidence
    assert post.log_evidence == pytest.approx(bound, abs=1e-8)
    assert post.n_iterations == 300 and set(table.names()) == set(post.values)
    assert post.log_evidence > vfe.fit(X, y).log_evidence - 0.05


def test_minibatch_svgp_classifies_as_the_full_batch_fit():
    """Minibatch SVGP (batches of 100 of 2,000 twonorm points, 800 steps) reaches a test NLPD
    within 0.02 of the full-batch natural-gradient fit (ELBO optimum), and saves and loads."""
    X, y = gd.datasets.twonorm(3000, dim=5, seed=0)
    X, y, Xs, ys = X[:2000], y[:2000], X[2000:], y[2000:]
    fits = {}
    for name, options in (("minibatch", {"batch_size": 100}), ("full", {})):
        model = gd.Model(SE(2.0, 1.0), gd.likelihoods.Bernoulli("logit"), gd.inducing.KMeans(16, seed=0),
                         gd.inference.SVGP(**options))
        fits[name] = model.fit(X, y, max_iter=800)
    nlpd = {name: -float(np.mean(post.log_predictive(Xs, ys))) for name, post in fits.items()}
    assert abs(nlpd["minibatch"] - nlpd["full"]) < 0.02, nlpd
    assert fits["minibatch"].log_evidence <= fits["full"].log_evidence + 1e-6
