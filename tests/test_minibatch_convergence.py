"""Honest minibatch convergence (issue 45, finding 4 and two items of finding 7).

A stop of the minibatch optimiser's stochastic rule (:mod:`gpdsl.methods.stochastic`) says that the
smoothed batch objective stopped changing beyond its noise, not that the fit is at the optimum: the
issue's probe found robust-max, softmax, logistic-softmax, binary Pólya-Gamma and constant-mean fits
stopped far below the full-batch optimum with ``converged=True`` and no warning.  Now the stop is
confirmed by the full objective's gradient from one pass over the data
(:func:`gpdsl.methods.stochastic.full_pass_check`), tested against the full-batch tolerance
(:func:`gpdsl.diagnostics.gradient_tolerance`); where it is not small, a full-batch polish
(L-BFGS-B with q at its optimum; ``polish=True``, or the default ``"auto"`` at most 2,000 rows)
continues from there, and a fit still short of it warns and is flagged ``converged=False``.

Finding 7: minibatch Pólya-Gamma (logit) and minibatch SVGP with NegativeBinomial on 2,000 rows of
X uniform on [-3, 3] raised "standardise X and y": a minibatch step at a long length-scale met
Q_nn > K_nn, which the full-batch passes answer by climbing the jitter ladder and the steps did not.
"""
import dataclasses
import warnings

import numpy as np
import pytest

import gpdsl as gd
from gpdsl.diagnostics import gradient_tolerance, largest_gradient
from gpdsl.io import spec
from gpdsl.methods import stochastic
from gpdsl.methods.stochastic_polya_gamma import PolyaGammaExpectations

SE = gd.kernels.SquaredExponential


def _offset_data(n=1000, noise=1.0, seed=0):
    """y = 5 + sin(2 x) + noise: a constant mean far from its start at 0."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, size=(n, 1))
    return X, 5.0 + np.sin(2.0 * X[:, 0]) + noise * rng.standard_normal(n)


def _binary_data(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, size=(n, 2))
    p = 1.0 / (1.0 + np.exp(-3.0 * np.sin(X[:, 0]) * np.cos(X[:, 1])))
    return X, (rng.uniform(size=n) < p).astype(float)


def _classes_data(n=1000, K=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, size=(n, 2))
    f = 2.0 * np.stack([np.sin(X[:, 0] + k) + np.cos(X[:, 1] * (k + 1) / 2) for k in range(K)], axis=1)
    return X, np.argmax(f + 0.5 * rng.gumbel(size=f.shape), axis=1)


def _mean_model(**options):
    return gd.Model(SE(), gd.likelihoods.Gaussian(), gd.inducing.KMeans(20, seed=0),
                    gd.inference.SVGP(batch_size=100, **options), mean=gd.means.Constant())


def _objective(model, X, y, Z, offset=None):
    """The fields of gpdsl.fitting's objective that :func:`stochastic.full_pass_check` reads."""
    from gpdsl.fitting import _Objective
    return _Objective(model, model.parameter_table(X, Z), X, model.likelihood.coded_targets(y, X.shape[0]), Z,
                      offset=offset)


def _random_q(rng, M):
    R = np.tril(0.3 * rng.standard_normal((M, M)), -1) + np.diag(rng.uniform(0.5, 1.0, M))
    return {"variational.q_mu": rng.standard_normal(M), "variational.q_sqrt": R[np.tril_indices(M)]}


@pytest.mark.parametrize("case", ["gaussian_mean", "polya_gamma_optimised_Z"])
def test_the_full_pass_gradient_is_the_gradient_of_the_full_objective(case):
    """full_pass_check's gradient, in the free hyperparameters (a constant mean's included, Z where
    optimised) and in q's entries, against central differences of its own full objective (the bound
    on all rows plus the log prior), at a random q and off-optimum values, over chunks of 37 rows
    of 120.  Five inducing points keep K_uu well conditioned at no jitter (with ten, the bound's
    rounding reached 4e-7, 0.02 in a difference quotient): steps of 1e-5 then leave a truncation
    error of ~1e-10 relative and a rounding error of ~1e-16 |f| / 1e-5 ~ 1e-8 (measured agreement
    2e-10 relative): rtol 1e-6 with atol 1e-6."""
    rng = np.random.default_rng(1)
    if case == "gaussian_mean":
        X, y = _offset_data(120)
        model = _mean_model(chunk_size=37)
        Z = X[::24]
        full_batch, expectations = dataclasses.replace(model.inference, batch_size=None), None
    else:
        X, y = _binary_data(120)
        Z = X[::24]
        model = gd.Model(SE(1.3, 0.8), gd.likelihoods.Bernoulli("logit", bias=0.2), gd.inducing.Optimized(Z),
                         gd.inference.PolyaGamma(minibatch=30, chunk_size=37))
        full_batch = dataclasses.replace(model.inference._variational(), batch_size=None)
        expectations = PolyaGammaExpectations
    objective = _objective(model, X, y, Z)
    table = objective.table
    u = table.pack(table.values()) + 0.3 * rng.standard_normal(table.size)
    q = _random_q(rng, Z.shape[0])
    check = stochastic.full_pass_check(objective, u, q, full_batch, expectations)
    h = 1e-5

    def f(u_, q_):
        return stochastic.full_pass_check(objective, u_, q_, full_batch, expectations).objective

    numeric = np.array([(f(u + h * e, q) - f(u - h * e, q)) / (2 * h) for e in np.eye(u.size)])
    # check.gradient is that of the negative objective.
    np.testing.assert_allclose(-check.gradient, numeric, rtol=1e-6, atol=1e-6)
    for key in q:
        numeric_q = []
        for i in range(q[key].size):
            up, down = {**q, key: q[key].copy()}, {**q, key: q[key].copy()}
            up[key][i] += h
            down[key][i] -= h
            numeric_q.append((f(u, up) - f(u, down)) / (2 * h))
        np.testing.assert_allclose(check.q_gradient[key], numeric_q, rtol=1e-6, atol=1e-6)
    assert check.tolerance == gradient_tolerance(X.shape[0])
    # The largest entry: the hyperparameters' in the units of largest_gradient (Z per standard
    # deviation of its column), q's as they are.
    assert check.largest == max(largest_gradient(table, check.gradient, X)[0],
                                *(np.max(np.abs(g)) for g in check.q_gradient.values()))


@pytest.mark.parametrize("q_steps", ["auto", "adam"])
def test_a_stochastic_stop_far_from_the_optimum_warns_and_is_flagged(q_steps):
    """The issue's constant mean, without the polish: the rule stops the steps (at 420 of them)
    short of the data's level 5, because Adam moves the mean by at most about learning_rate = 0.01
    a step.  The full pass finds the gradient far above the tolerance, so the fit warns and says
    converged=False, with the gradient in its record.
    Before issue 45 this fit said converged=True and warned nothing.  Before issue 46 the mean had
    moved to 0.12 only (its steps at fixed q swamped by the batches' noise); with q's mean carried
    along (stochastic._MeanCarry) it reaches 3.2 in the same 420 steps (measured).  With q moved
    by Adam (q_steps="adam": hyperparameters at half the rate) the mean is carried too: 3.5 in
    920 steps (measured; 0.54 in 900 before the carry covered Adam's steps on q)."""
    X, y = _offset_data()
    with pytest.warns(gd.ConvergenceWarning, match=r"stochastic_rule.*gradient still large"):
        post = _mean_model(polish=False, q_steps=q_steps).fit(X, y)
    d = post.diagnostics
    assert d.stop_reason == "stochastic_rule" and not post.converged
    assert d.grad_tol == gradient_tolerance(X.shape[0]) and d.grad_norm > 10.0 * d.grad_tol
    assert "full pass: largest gradient entry" in d.message
    assert 2.0 < float(post.values["mean.constant"]) < 4.5


def test_a_constant_mean_reaches_the_full_batch_optimum():
    """With the polish (the default) the same fit ends within 1 nat of the full-batch SVGP fit's
    bound, its constant within 0.05 of that fit's (~5), converged and without a warning (measured:
    mean 4.987, bound -1460.42; before issue 45 the steps ended at 0.12, 38 nats lower)."""
    X, y = _offset_data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", gd.ConvergenceWarning)
        post = _mean_model().fit(X, y)
        full = dataclasses.replace(_mean_model(), inference=gd.inference.SVGP()).fit(X, y)
    assert post.converged and post.diagnostics.grad_norm <= post.diagnostics.grad_tol
    assert abs(post.log_evidence - full.log_evidence) < 1.0
    assert float(post.values["mean.constant"]) == pytest.approx(float(full.values["mean.constant"]), abs=0.05)


def test_binary_polya_gamma_reaches_the_full_batch_optimum():
    """Minibatch Pólya-Gamma on 1,000 binary rows ends within 1 nat of the collapsed method's optimum
    (at q's optimum the two bounds are one: gpdsl.methods.stochastic_polya_gamma), converged.  Before
    issue 45 it stopped 7.2 nats below it, flagged converged."""
    X, y = _binary_data()

    def model(minibatch):
        return gd.Model(SE(), gd.likelihoods.Bernoulli("logit"), gd.inducing.KMeans(20, seed=0),
                        gd.inference.PolyaGamma(minibatch=minibatch))

    with warnings.catch_warnings():
        warnings.simplefilter("error", gd.ConvergenceWarning)
        post = model(100).fit(X, y)
        collapsed = model(None).fit(X, y)
    assert post.converged
    assert abs(post.log_evidence - collapsed.log_evidence) < 1.0


@pytest.mark.parametrize("link", ["robustmax", "softmax"])
def test_a_multiclass_stop_short_of_the_optimum_is_flagged(link):
    """Multi-class minibatch SVGP on 1,000 rows, 3 classes, without the polish: the rule stops the
    steps, the full pass finds the gradient above the tolerance, and the fit warns and says
    converged=False (measured: robust-max 110 in the length-scale with q moved by Adam, 902 under
    natural steps before issue 46; softmax 7.8 in the variance; tolerance 1).  Before issue 45
    both said converged=True.  (With the polish both stay flagged: their full-batch natural steps
    on q do not converge in q_max_iter at its first evaluation, robust-max's not in 5,000, so it
    stops there: test_a_polish_whose_q_does_not_converge_...)"""
    X, y = _classes_data()
    # Robust-max's epsilon held at the 1e-3 these were measured at: learnt, it is still moving when
    # the 1,000-step cap comes, so the rule does not fire (tests/test_robustmax_epsilon.py).
    model = gd.Model(SE(), gd.likelihoods.Categorical(3, link, epsilon=gd.Fixed(1e-3)), gd.inducing.KMeans(20, seed=0),
                     gd.inference.SVGP(batch_size=100, polish=False))
    with pytest.warns(gd.ConvergenceWarning, match="gradient still large"):
        post = model.fit(X, y)
    assert post.diagnostics.stop_reason == "stochastic_rule" and not post.converged
    assert post.diagnostics.grad_norm > post.diagnostics.grad_tol


def _uniform_binary(seed=0):
    """Finding 7's Pólya-Gamma data: 2,000 rows of X uniform on [-3, 3]^2, labels of logit 1.5 x_0."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, size=(2000, 2))
    return X, (rng.uniform(size=2000) < 1.0 / (1.0 + np.exp(-1.5 * X[:, 0]))).astype(float)


def _uniform_counts(seed=0):
    """Finding 7's NegativeBinomial data: 2,000 rows of x uniform on [-3, 3], counts of mean
    exp(1 + sin x), dispersion 1/5."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, size=(2000, 1))
    mu = np.exp(1.0 + np.sin(X[:, 0]))
    return X, rng.negative_binomial(5, 5.0 / (5.0 + mu)).astype(float)


@pytest.mark.parametrize("case", ["polya_gamma_logit", "svgp_negative_binomial"])
def test_well_scaled_data_fit_without_a_scale_error(case):
    """Finding 7: on 2,000 rows already on the unit scale these fits raised "standardise X and y"
    (a minibatch step at a long length-scale met Q_nn > K_nn at step 284 and 129, with no jitter
    ladder).  Now they fit, converged, within 1 nat of the full-batch optimum (the collapsed
    Pólya-Gamma bound; full-batch SVGP), found by the full-batch fit started from their end."""
    if case == "polya_gamma_logit":
        X, y = _uniform_binary()
        likelihood, M = gd.likelihoods.Bernoulli("logit"), 100
        minibatch, full = gd.inference.PolyaGamma(minibatch=100), gd.inference.PolyaGamma()
    else:
        X, y = _uniform_counts()
        likelihood, M = gd.likelihoods.NegativeBinomial(), 20
        minibatch, full = gd.inference.SVGP(batch_size=100), gd.inference.SVGP()
    with warnings.catch_warnings():
        warnings.simplefilter("error", gd.ConvergenceWarning)
        post = gd.Model(SE(), likelihood, gd.inducing.KMeans(M, seed=0), minibatch).fit(X, y)
        # The full-batch fit from the minibatch fit's end (its Z and hyperparameters): it gains less
        # than a nat where that end is the optimum.
        reference = gd.Model(SE(), likelihood, gd.inducing.Fixed(post.state.Z), full).fit(X, y, start=post.values)
    assert post.converged
    assert abs(post.log_evidence - reference.log_evidence) < 1.0


@pytest.mark.parametrize("cls, batch", [(gd.inference.SVGP, "batch_size"), (gd.inference.PolyaGamma, "minibatch")])
def test_polish_is_validated_and_round_trips(cls, batch):
    """``polish``: default "auto", True, False or "auto" else a TypeError / ValueError naming the
    class, each kept through a model file's dict and through TOML; a dict written before the option
    existed (no ``polish`` key) reads as the default."""
    assert cls().polish == "auto"
    with pytest.raises(TypeError, match=f"{cls.__name__}: polish must be True, False or 'auto', got 1"):
        cls(**{batch: 32}, polish=1)
    with pytest.raises(ValueError, match=f"{cls.__name__}: polish must be True, False or 'auto', got 'always'"):
        cls(**{batch: 32}, polish="always")
    for polish in (True, False, "auto"):
        declared = cls(**{batch: 64}, polish=polish)
        written = spec.component_to_dict(declared)
        assert written["polish"] == polish
        assert spec.component_from_dict("inference", written) == declared
        model = gd.Model(SE(), gd.likelihoods.Bernoulli("logit"), gd.inducing.KMeans(8), declared)
        assert gd.Model.from_toml(model.to_toml()).inference.polish == polish
    old = spec.component_to_dict(cls(**{batch: 64}))
    del old["polish"]
    assert spec.component_from_dict("inference", old) == cls(**{batch: 64})


def test_auto_polishes_by_rows():
    """``polish="auto"`` polishes a fit of at most POLISH_AUTO_MAX_ROWS rows (the measured threshold
    of the module docstring, 2,000), True and False whatever N."""
    n_max = stochastic.POLISH_AUTO_MAX_ROWS
    assert n_max == 2000
    auto, on, off = (gd.inference.SVGP(batch_size=64, polish=p) for p in ("auto", True, False))
    assert stochastic.polishes(auto, n_max) and not stochastic.polishes(auto, n_max + 1)
    assert all(stochastic.polishes(on, n) and not stochastic.polishes(off, n) for n in (10, n_max + 1, 10**7))
    # K latent functions: rows times K (a full-batch pass is O(N K M^2); issue 46 measured 150 CPU s of
    # polish after 10 s of steps on digits' 1,437 rows x 10 classes, unconverged, at a worse test NLPD).
    assert stochastic.polishes(auto, n_max // 10, 10) and not stochastic.polishes(auto, n_max // 10 + 1, 10)
    assert stochastic.polishes(on, n_max, 10) and not stochastic.polishes(off, 10, 10)


def test_above_the_rows_auto_checks_without_polishing_and_says_how_to_converge(monkeypatch):
    """Above POLISH_AUTO_MAX_ROWS (lowered here to 500 so that the issue's 1,000-row constant-mean
    fit is above it) ``polish="auto"`` still confirms the stop by the full pass but does not
    polish: the fit ends where polish=False ends (the same steps: the same hyperparameters), flagged
    converged=False, and the warning names the three ways to a converged fit (polish=True, the
    full-batch method, a longer stop_window) and why the polish did not run."""
    monkeypatch.setattr(stochastic, "POLISH_AUTO_MAX_ROWS", 500)
    X, y = _offset_data()
    with pytest.warns(gd.ConvergenceWarning, match="gradient still large") as caught:
        post = _mean_model().fit(X, y)
    text = " ".join(str(w.message) for w in caught)
    for remedy in ("polish=True continues with the full-batch fit",
                   "polish='auto' skips it above 500 rows times latent functions, here 1,000 x 1",
                   "SVGP(batch_size=None)", "a longer stop_window"):
        assert remedy in text
    d = post.diagnostics
    assert d.stop_reason == "stochastic_rule" and not post.converged and "full-batch polish" not in d.message
    assert d.grad_tol == gradient_tolerance(X.shape[0]) and d.grad_norm > d.grad_tol
    with pytest.warns(gd.ConvergenceWarning, match="polish=False"):
        unpolished = _mean_model(polish=False).fit(X, y)
    assert post.values.keys() == unpolished.values.keys()
    for key in post.values:
        np.testing.assert_array_equal(post.values[key], unpolished.values[key])


def test_the_full_pass_runs_as_dask_tasks(monkeypatch):
    """The confirming pass is svgp.evaluate's map over row chunks: on a Dask X (and y) of 37-row
    chunks it is one task per chunk with the partials reduced, and gives the in-memory pass's
    objective and gradients (1e-10 relative: only the summation order differs).  That the Dask
    path ran is seen, not assumed: the chunk function is called through gpdsl.chunks'
    Dask map with the 37, 37, 37 and 9 rows of the chunks, inside tasks that Dask's scheduler
    executed (a dask callback sees each), and never for the in-memory pass."""
    da = pytest.importorskip("dask.array")
    from dask.callbacks import Callback
    from gpdsl import chunks
    blocks, original = [], chunks._map_rows_dask

    def spied(fn, rows, *args):
        def recorded(*block):
            blocks.append(block[0].shape[0])
            return fn(*block)
        return original(recorded, rows, *args)

    started = []

    class Executing(Callback):
        def _pretask(self, key, dask, state):
            started.append(str(key))

    monkeypatch.setattr(chunks, "_map_rows_dask", spied)
    rng = np.random.default_rng(2)
    X, y = _offset_data(120)
    Z = X[::24]
    model = _mean_model()
    full_batch = dataclasses.replace(model.inference, batch_size=None)
    in_memory = _objective(model, X, y, Z)
    u = in_memory.table.pack(in_memory.table.values()) + 0.3 * rng.standard_normal(in_memory.table.size)
    q = _random_q(rng, Z.shape[0])
    lazy = _objective(model, da.from_array(X, chunks=(37, 1)), y, Z)
    lazy.y = da.from_array(in_memory.y, chunks=37)
    expected = stochastic.full_pass_check(in_memory, u, q, full_batch)
    assert blocks == []
    with Executing():
        got = stochastic.full_pass_check(lazy, u, q, full_batch)
    assert sorted(blocks) == [9, 37, 37, 37]
    # The chunk function's tasks (dask.delayed names them after it), each started by the scheduler.
    assert len({key for key in started if "recorded" in key}) == 4
    assert got.objective == pytest.approx(expected.objective, rel=1e-10)
    np.testing.assert_allclose(got.gradient, expected.gradient, rtol=1e-10, atol=1e-9)
    for key in q:
        np.testing.assert_allclose(got.q_gradient[key], expected.q_gradient[key], rtol=1e-10, atol=1e-9)


def test_a_subsampled_minibatch_fit_names_the_minibatch_remedies(monkeypatch):
    """Review of issue 45, finding 4: ``fit(subsample=n)`` of a minibatch fit kept the all-rows
    finish's minibatch=False, so its unconverged warning named the full-batch remedy ("raise
    max_iter") instead of :func:`stochastic.remedy`; and the remedy is the one of the rows the steps
    ran on (the subsample's 600, not X's 1,000).  POLISH_AUTO_MAX_ROWS is lowered to 500 so that
    "auto" skips the polish of 600 rows."""
    monkeypatch.setattr(stochastic, "POLISH_AUTO_MAX_ROWS", 500)
    X, y = _offset_data()
    for options, expected in (({"polish": False}, "(polish=False)"),
                              ({}, "polish='auto' skips it above 500 rows times latent functions, here 600 x 1")):
        with pytest.warns(gd.ConvergenceWarning, match="gradient still large") as caught:
            post = _mean_model(**options).fit(X, y, subsample=600)
        text = " ".join(str(w.message) for w in caught)
        assert post.diagnostics.subsample == 600 and not post.converged
        assert expected in text and "SVGP(batch_size=None)" in text and "raise max_iter" not in text


def _recorded_checks(monkeypatch):
    """The list that every later stochastic.full_pass_check appends its result to."""
    checks = []
    original = stochastic.full_pass_check

    def recorded(*args, **kwargs):
        checks.append(original(*args, **kwargs))
        return checks[-1]

    monkeypatch.setattr(stochastic, "full_pass_check", recorded)
    return checks


def test_a_polish_whose_q_does_not_converge_stops_at_its_first_evaluation(monkeypatch):
    """Review of issue 45, finding 2: on robust-max (1,000 rows, 3 classes, M = 20) the polish's
    first evaluation did not converge q in q_max_iter = 100 natural steps, each evaluation then
    warm-started q from the previous one, and L-BFGS-B ended 204 nats below its first evaluation
    (-1355.2 to -1559.1) in ~10 CPU s, then discarded.  Now the polish stops there, says so, keeps
    the first evaluation's (u, q) where it raised the full objective, counts no L-BFGS-B
    iteration, and its natural steps are in local_sweeps.  K-class fits now take the joint finish
    instead (test_a_multiclass_polish_moves_q_and_the_hyperparameters_together), so the case is
    made here with one latent function whose natural steps are cut to q_max_iter = 2 (binary
    logit, 1,000 rows: measured +2.9 nats over the steps' end, 4 natural steps counted)."""
    checks = _recorded_checks(monkeypatch)
    X, y = _binary_data()
    model = gd.Model(SE(), gd.likelihoods.Bernoulli("logit"), gd.inducing.KMeans(20, seed=0),
                     gd.inference.SVGP(batch_size=100, polish=True, q_max_iter=2))
    with pytest.warns(gd.ConvergenceWarning, match="gradient still large"):
        post = model.fit(X, y)
    d = post.diagnostics
    assert "stopped at its first evaluation: q's full-batch natural steps did not converge in 2 steps" in d.message
    assert d.polish_iterations == 0 and d.local_sweeps >= model.inference.q_max_iter
    assert len(checks) == 2 and checks[1].objective > checks[0].objective
    assert "the steps' end is kept" not in d.message and not post.converged


def test_a_multiclass_polish_moves_q_and_the_hyperparameters_together(monkeypatch):
    """Issue 46: a K-class fit's polish is the joint finish (:mod:`gpdsl.methods.svgp_finish`), not
    L-BFGS-B over the hyperparameters with q at its optimum by natural steps (which for 3 classes
    on 1,000 rows did not converge q in q_max_iter at the first evaluation, robust-max's not in
    5,000, so that polish stopped there).  Softmax, 1,000 rows, 3 classes, M = 20: the steps' end
    is above the tolerance (measured 7.8 in the variance, tolerance 1); the finish evaluates the
    full pass at each of its points (every check after the first is one of its evaluations), ends
    within the tolerance (measured after 148 evaluations, +10.2 nats; 518, +9.4, with whitened q
    held instead of carried in u-space) and the fit says converged
    with that point's numbers."""
    checks = _recorded_checks(monkeypatch)
    X, y = _classes_data()
    model = gd.Model(SE(), gd.likelihoods.Categorical(3, "softmax"), gd.inducing.KMeans(20, seed=0),
                     gd.inference.SVGP(batch_size=100, polish=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", gd.ConvergenceWarning)
        post = model.fit(X, y)
    d = post.diagnostics
    assert checks[0].largest > checks[0].tolerance
    assert "joint L-BFGS-B on the hyperparameters and q, within the tolerance" in d.message
    assert post.converged and d.polish_iterations == len(checks) - 1 > 0
    final = max((c for c in checks[1:] if c.largest <= c.tolerance), key=lambda c: c.objective)
    assert d.grad_norm == final.largest <= d.grad_tol and final.objective > checks[0].objective + 1.0


def test_the_polish_keeps_its_best_iterate_not_its_last_point(monkeypatch):
    """The polish returns the best (u, q) of its accepted iterates, not where L-BFGS-B ended: here
    L-BFGS-B's result is replaced by a point 2 e-folds off its end, evaluated last (as a rejected
    line-search point would be); the fit still ends at the optimum (within 1 nat of the
    full-batch fit, converged) and not at that point."""
    from gpdsl import fitting
    original = fitting._Objective.minimise

    def ends_elsewhere(self, u0, *args, **kwargs):
        result = original(self, u0, *args, **kwargs)
        result.x = result.x + 2.0
        self(result.x)
        return result

    monkeypatch.setattr(fitting._Objective, "minimise", ends_elsewhere)
    X, y = _offset_data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", gd.ConvergenceWarning)
        post = _mean_model().fit(X, y)
    monkeypatch.setattr(fitting._Objective, "minimise", original)
    full = dataclasses.replace(_mean_model(), inference=gd.inference.SVGP()).fit(X, y)
    assert post.converged and post.diagnostics.polish_iterations > 0
    assert abs(post.log_evidence - full.log_evidence) < 1.0
