"""The multi-class defaults (gpdsl.defaults): the table is what gd.Model and GPClassifier do.

Small data and few steps: these tests check which method, inducing spec, batch and seed are
chosen and that the fitted objects carry them, not how well the fits do (benchmarks/
bench_multiclass_defaults.py measures that)."""
import warnings

import numpy as np
import pytest

import gpdsl as gd
from gpdsl import defaults
from gpdsl.sklearn import GPClassifier, choose_link

SE = gd.kernels.SquaredExponential


def three_classes(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5).astype(int)


def quietly(fit, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.ConvergenceWarning)
        return fit(*args, **kwargs)


# -- the table --------------------------------------------------------------------------------------
@pytest.mark.parametrize("link", ["softmax", "robustmax", "logistic_softmax"])
def test_table_minibatch_svgp_above_the_batch(link):
    likelihood = gd.likelihoods.Categorical(4, link)
    # Every link takes SVGP's own stopping rule (a window of 200, no step decay) and its average of
    # the iterates over about the last 50 steps.
    assert defaults.ITERATE_AVERAGE == 50
    steps = {"stop_window": 200, "step_decays": 0, "iterate_average": defaults.ITERATE_AVERAGE}
    above = defaults.declaration(defaults.FULL_BATCH_ROWS + 1, 7, 4, likelihood, seed=5)
    assert above["inference"] == gd.inference.SVGP(batch_size=defaults.BATCH_SIZE, seed=5, **steps)
    mid = defaults.declaration(1437, 64, 4, likelihood)
    assert mid["inference"] == gd.inference.SVGP(batch_size=defaults.BATCH_SIZE, seed=0, **steps)
    assert mid["inducing"] == gd.inducing.Optimized(gd.inducing.KMeans(defaults.INDUCING_POINTS, seed=0))
    assert (defaults.BATCH_SIZE, defaults.INDUCING_POINTS, defaults.FULL_BATCH_ROWS) == (256, 100, 256)
    # k-means on all rows up to its sample size, on a sample above it.
    assert defaults.declaration(defaults.KMEANS_SAMPLE, 3, 4, likelihood)["inducing"].init.sample is None
    big = defaults.declaration(defaults.KMEANS_SAMPLE + 1, 3, 4, likelihood)
    assert big["inducing"] == gd.inducing.Optimized(gd.inducing.KMeans(defaults.INDUCING_POINTS, seed=0,
                                                                       sample=defaults.KMEANS_SAMPLE))


@pytest.mark.parametrize("link, full_batch", [("softmax", True), ("robustmax", False), ("logistic_softmax", False)])
def test_table_full_batch_up_to_the_batch_where_log_concave(link, full_batch):
    """Up to FULL_BATCH_ROWS rows a likelihood that states it is log-concave (softmax) is fitted on
    the full bound (converged L-BFGS-B); robust-max (not log-concave) and logistic-softmax (not
    stated) keep the minibatch steps, each then a step on all N rows."""
    likelihood = gd.likelihoods.Categorical(4, link)
    for n in (20, defaults.FULL_BATCH_ROWS):
        chosen = defaults.declaration(n, 7, 4, likelihood, seed=5)
        assert chosen["inference"] == (gd.inference.SVGP(seed=5) if full_batch else
                                       gd.inference.SVGP(batch_size=n, seed=5))
        assert chosen["inducing"] == gd.inducing.Optimized(gd.inducing.KMeans(min(n, defaults.INDUCING_POINTS),
                                                                              seed=5))
    assert gd.inference.SVGP(seed=5).batch_size is None


def test_table_keeps_a_given_inducing_spec():
    given = gd.inducing.KMeans(7, seed=2)
    chosen = defaults.declaration(50, 2, 3, gd.likelihoods.Categorical(3), inducing=given)
    assert chosen == {"inference": gd.inference.SVGP(seed=0), "inducing": given}     # softmax, 50 rows: full batch


def test_classifier_likelihood_is_robustmax():
    assert defaults.classifier_likelihood(5) == gd.likelihoods.Categorical(5, "robustmax")
    assert defaults.classifier_likelihood(5, "softmax") == gd.likelihoods.Categorical(5, "softmax")


@pytest.mark.parametrize("bad", [{"n_rows": 0}, {"n_features": 1.5}, {"n_classes": 4}, {"n_rows": True}])
def test_table_refuses_bad_sizes(bad):
    sizes = {"n_rows": 10, "n_features": 2, "n_classes": 3, **bad}
    with pytest.raises(ValueError, match="declaration"):
        defaults.declaration(likelihood=gd.likelihoods.Categorical(3), **sizes)


def test_only_multi_latent_likelihoods_choose():
    assert defaults.chooses_inference(gd.likelihoods.Categorical(3))
    assert not defaults.chooses_inference(gd.likelihoods.Bernoulli())
    assert not defaults.chooses_inference(gd.likelihoods.Gaussian())


# -- gd.Model ---------------------------------------------------------------------------------------
def test_model_single_latent_default_is_still_exact():
    model = gd.Model(SE(), gd.likelihoods.Gaussian())
    assert model.inference == gd.inference.Exact()
    assert gd.Model.from_dict(model.to_dict()) == model
    with pytest.raises(ValueError, match="Exact"):      # a binary likelihood still needs a method given
        gd.Model(SE(), gd.likelihoods.Bernoulli())


def test_model_multiclass_method_left_to_fit():
    model = gd.Model(SE(), gd.likelihoods.Categorical(3))
    assert model.inference is None
    assert "inference" not in model.to_dict()
    assert gd.Model.from_dict(model.to_dict()) == model
    assert gd.Model.from_toml(model.to_toml()) == model
    X, _ = three_classes(30)
    with pytest.raises(ValueError, match="resolved"):
        model.parameter_table(X)
    chosen = defaults.declaration(30, 2, 3, model.likelihood)
    assert model.resolved(X) == gd.Model(SE(), gd.likelihoods.Categorical(3), **chosen)


def test_model_fit_resolves_and_the_posterior_carries_it(tmp_path):
    X, y = three_classes(40)
    model = gd.Model(SE(), gd.likelihoods.Categorical(3))
    post = quietly(model.fit, X, y, max_iter=5, seed=4)
    assert post.model.inference == gd.inference.SVGP(seed=4)     # softmax, 40 rows: full batch; the fit's seed
    assert post.model.inducing == gd.inducing.Optimized(gd.inducing.KMeans(40, seed=4))
    written = post.model.to_dict()["inference"]
    assert (written["type"], written.get("batch_size"), written["seed"]) == ("SVGP", None, 4)
    assert gd.Model.from_dict(post.model.to_dict()) == post.model
    path = tmp_path / "fit.nc"
    post.save(path)
    again = gd.load(path)
    assert again.model == post.model
    np.testing.assert_allclose(again.predict(X[:5])["p"].values, post.predict(X[:5])["p"].values, rtol=1e-12)


@pytest.mark.parametrize("X, message", [
    (np.zeros((0, 2)), "X must contain at least one row"),
    (np.zeros((5, 0)), "X must have at least one feature"),
    (np.zeros((4, 2, 2)), "X must be 2-D"),
    (np.zeros(4), "X must be 2-D"),
    ([[1.0, 2.0], [1.0], [0.0, 0.0], [1.0, 1.0]], "X must be a rectangular array")])
def test_model_fit_reports_a_bad_X_as_fit_does(X, message):
    """The choice reads X's shape before fit checks X: a bad X is still reported as fit reports it
    for any model (it was 'declaration: n_rows must be a positive integer, got 0', or numpy's own
    message for a ragged X)."""
    for likelihood in (gd.likelihoods.Gaussian(), gd.likelihoods.Categorical(3)):
        with pytest.raises(ValueError, match=message):
            gd.Model(SE(), likelihood).fit(X, np.zeros(len(X)))


def test_model_fit_reports_a_dask_X_of_unknown_rows_as_fit_does():
    """A Dask X whose row count is unknown (nan) gets fit's message (it was int(nan)'s)."""
    da = pytest.importorskip("dask.array")
    X, y = three_classes(40)
    lazy = da.from_array(X, chunks=10)
    lazy = lazy[lazy[:, 0] > -10.0]
    for likelihood in (gd.likelihoods.Gaussian(), gd.likelihoods.Categorical(3)):
        inference = None if likelihood.n_latent > 1 else gd.inference.VFE()
        model = gd.Model(SE(), likelihood, gd.inducing.KMeans(5), inference)
        with pytest.raises(ValueError, match="X has unknown chunk sizes"):
            model.fit(lazy, y.astype(float))


@pytest.mark.parametrize("seed", [-1, 1.5, "a", True])
def test_model_fit_reports_a_bad_seed_as_fit_does(seed):
    """fit's seed also seeds the chosen k-means and batches; a bad one is fit's error, not KMeans'."""
    X, y = three_classes(20)
    for likelihood in (gd.likelihoods.Gaussian(), gd.likelihoods.Categorical(3)):
        with pytest.raises(ValueError, match="fit: seed must be"):
            gd.Model(SE(), likelihood).fit(X, y.astype(float), seed=seed)


def test_model_explicit_inference_overrides():
    X, y = three_classes(30)
    given = gd.inference.SVGP(q_max_iter=7)
    model = gd.Model(SE(), gd.likelihoods.Categorical(3), gd.inducing.KMeans(6), given)
    assert model.resolved(X) is model
    post = quietly(model.fit, X, y, max_iter=2)
    assert post.model.inference == given and post.model.inducing == gd.inducing.KMeans(6)
    # An inducing spec given without a method is kept by the chosen one.
    only_z = gd.Model(SE(), gd.likelihoods.Categorical(3), gd.inducing.KMeans(5, seed=1))
    assert only_z.resolved(X).inducing == gd.inducing.KMeans(5, seed=1)
    assert isinstance(only_z.resolved(X).inference, gd.inference.SVGP)


# -- GPClassifier ---------------------------------------------------------------------------------
def test_classifier_model_is_the_table():
    X, y = three_classes(30)
    clf = quietly(GPClassifier(max_iter=5, random_state=3).fit, X, y)
    likelihood = defaults.classifier_likelihood(3, "robustmax", clf.link_choice_.pilot_error)
    assert clf.model_ == gd.Model(SE(variance=gd.Fixed(1.0)), likelihood,
                                  **defaults.declaration(30, 2, 3, likelihood, seed=3))
    assert float(clf.hyperparameters_["kernel.variance"]) == 1.0       # held: robust-max cannot see it
    assert clf.model_.inference == gd.inference.SVGP(batch_size=30, seed=3)
    assert clf.model_.inducing == gd.inducing.Optimized(gd.inducing.KMeans(30, seed=3))
    assert clf.posterior_.model.inference == clf.model_.inference
    assert clf.predict_proba(X[:4]).shape == (4, 3)


def test_classifier_explicit_settings_override():
    X, y = three_classes(30)
    clf = quietly(GPClassifier(inducing=gd.inducing.KMeans(6), max_iter=3).fit, X, y)
    assert clf.model_.inducing == gd.inducing.KMeans(6) and clf.model_.inference.batch_size == 30
    laplace = quietly(GPClassifier(likelihood=gd.likelihoods.Categorical(3), inference=gd.inference.Laplace(),
                                   max_iter=3).fit, X, y)
    assert laplace.model_.inference == gd.inference.Laplace() and laplace.model_.inducing is None
    softmax = quietly(GPClassifier(likelihood=gd.likelihoods.Categorical(3), max_iter=3).fit, X, y)
    assert softmax.model_.likelihood.link == "softmax" and softmax.model_.inference == gd.inference.SVGP(seed=0)
    assert softmax.model_.kernel == SE()                           # softmax sees the variance: learnt
    given = quietly(GPClassifier(kernel=SE(2.0), likelihood=gd.likelihoods.Categorical(3, "robustmax"),
                                 max_iter=2).fit, X, y)
    assert given.model_.kernel == SE(2.0)                          # a kernel given is kept
    robust = GPClassifier(likelihood=gd.likelihoods.Categorical(3, "robustmax")).set_params(kernel__lengthscale=0.5)
    assert robust.kernel == SE(0.5, gd.Fixed(1.0))                 # set_params starts from the held variance
    assert GPClassifier().set_params(kernel__lengthscale=0.5).kernel == SE(0.5)
    full = quietly(GPClassifier(inference=gd.inference.SVGP(), max_iter=2).fit, X, y)
    assert full.model_.inference == gd.inference.SVGP()          # full batch, as given
    assert full.model_.inducing == gd.inducing.KMeans(30, seed=0)


def test_classifier_kernel_holds_the_variance_a_scale_invariant_likelihood_cannot_see():
    assert defaults.classifier_kernel(gd.likelihoods.Categorical(4, "robustmax")) == SE(variance=gd.Fixed(1.0))
    for likelihood in (gd.likelihoods.Categorical(4, "softmax"), gd.likelihoods.Categorical(4, "logistic_softmax"),
                       gd.likelihoods.Bernoulli("logit")):
        assert defaults.classifier_kernel(likelihood) == SE()


def test_classifier_binary_defaults_unchanged():
    clf = GPClassifier()
    binary = clf._build_model(50, clf._likelihood_for(2))
    assert binary == gd.Model(SE(), gd.likelihoods.Bernoulli("logit"), None, gd.inference.Laplace())
    sparse = clf._build_model(clf.exact_max_n + 1, clf._likelihood_for(2))
    assert sparse.inference == gd.inference.Laplace() and sparse.inducing == gd.inducing.KMeans(100, seed=0)
    assert clf.exact_max_n == 1000 and clf.default_inducing == 100


def test_model_resolves_by_the_rows_a_subsample_fit_runs_on():
    X, y = three_classes(300)
    model = gd.Model(SE(), gd.likelihoods.Categorical(3))
    assert model.resolved(X, n_rows=60).inducing == gd.inducing.Optimized(gd.inducing.KMeans(60, seed=0))
    post = quietly(model.fit, X, y, subsample=60, max_iter=3)
    assert post.model.inference == gd.inference.SVGP(seed=0)               # softmax on 60 rows: full batch
    robust = gd.Model(SE(), gd.likelihoods.Categorical(3, "robustmax"))
    assert quietly(robust.fit, X, y, subsample=60, max_iter=3).model.inference == gd.inference.SVGP(batch_size=60, seed=0)
    assert post.model.inducing == gd.inducing.Optimized(gd.inducing.KMeans(60, seed=0))


def test_model_file_without_inference_fits_the_chosen_method(tmp_path):
    """A model file of a Categorical likelihood and no [inference] table (``gpdsl run``'s reader)
    declares a model that chooses its method at fit, for the training rows the file's split gives."""
    from gpdsl import cli
    X, y = three_classes(80)
    np.savetxt(tmp_path / "d.csv", np.column_stack([X, y]), delimiter=",", header="a,b,y", comments="")
    (tmp_path / "m.toml").write_text('[kernel]\ntype = "SquaredExponential"\n\n[likelihood]\ntype = "Categorical"\n'
                                     'K = 3\n\n[data]\npath = "d.csv"\ntarget = "y"\n\n[fit]\nmax_iter = 5\n')
    model, (X_train, y_train, *_), _, options, _, _ = cli.problem_from_toml(tmp_path / "m.toml")
    assert model.inference is None and options["max_iter"] == 5
    post = quietly(model.fit, X_train, y_train, **options)
    n = X_train.shape[0]
    assert n <= defaults.FULL_BATCH_ROWS
    assert post.model.inference == gd.inference.SVGP(seed=0)             # softmax (Categorical's link): full batch
    assert post.model.inducing == gd.inducing.Optimized(gd.inducing.KMeans(min(defaults.INDUCING_POINTS, n), seed=0))


def test_chosen_fit_step_cap(monkeypatch):
    """A model whose method is chosen at fit runs at most defaults.MAX_STEPS steps unless the user
    gives max_iter; a model with its method declared keeps fit's 1,000 (fitting.DEFAULT_MAX_ITER)."""
    from gpdsl import fitting

    seen = []
    monkeypatch.setattr(fitting, "fit", lambda model, X, y, **options: seen.append(options["max_iter"]))
    X, y = np.arange(12.0)[:, None], np.array([0.0, 1.0, 2.0] * 4)
    open_model = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Categorical(3))
    open_model.fit(X, y)
    open_model.fit(X, y, max_iter=30)
    declared = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Gaussian())
    declared.fit(X, y)
    declared.fit(X, y, max_iter=30)
    assert seen == [defaults.MAX_STEPS, 30, 1000, 30]
    assert defaults.MAX_STEPS == 2000
    with pytest.raises(ValueError, match="max_iter"):
        open_model.fit(X, y, max_iter=0)


def test_choose_link_by_the_pilot_error():
    """The softmax pilot's training error decides: separated classes (three_classes: boundaries a
    GP finds in 200 steps) give robust-max, labels independent of X (error about 2/3) softmax; the
    error is counted on the rows as the arg-max of the pilot's latent mean."""
    X, y = three_classes(300)
    separated = choose_link(X, y, 3, SE(), seed=0)
    assert separated.link == "robustmax" and separated.pilot_error < 0.1
    assert separated.threshold == defaults.OVERLAP_ERROR and separated.pilot_cpu > 0.0
    noise = np.random.default_rng(1).integers(0, 3, size=300)
    overlapping = choose_link(X, noise, 3, SE(), seed=0)
    assert overlapping.link == "softmax" and overlapping.pilot_error > 0.4
    # The same pilot by hand: its error is the arg-max's.
    assert defaults.link_pilot(300, 3) == {"likelihood": gd.likelihoods.Categorical(3, "softmax"),
                                           "inducing": gd.inducing.KMeans(20, seed=0),
                                           "inference": gd.inference.SVGP(batch_size=256, seed=0, iterate_average=0)}
    pilot = gd.Model(SE(), **defaults.link_pilot(300, 3))
    post = quietly(pilot.fit, X, y, seed=0, max_iter=defaults.PILOT_STEPS)
    mean, _ = post.predict_f(X)
    assert separated.pilot_error == pytest.approx(np.mean(np.argmax(np.asarray(mean), 1) != y), abs=0)


def test_link_choice_threshold():
    assert defaults.link_choice(defaults.OVERLAP_ERROR).link == "robustmax"
    assert defaults.link_choice(np.nextafter(defaults.OVERLAP_ERROR, 1.0)).link == "softmax"
    assert defaults.link_choice(0.0, 1.5) == defaults.LinkChoice("robustmax", 0.0, defaults.OVERLAP_ERROR, 1.5)
    assert defaults.link_pilot(12, 4)["inducing"] == gd.inducing.KMeans(12, seed=0)
    # The pilot's last iterate, on which the thresholds were measured (not SVGP's default average).
    assert defaults.link_pilot(12, 4, seed=3)["inference"] == gd.inference.SVGP(batch_size=12, seed=3, iterate_average=0)


@pytest.mark.parametrize("inference, link", [(gd.inference.Laplace(), "softmax"),
                                             (gd.inference.SVGP(batch_size=30), "softmax"),
                                             (gd.inference.PolyaGamma(), "logistic_softmax")])
def test_classifier_with_an_inference_takes_its_first_link_without_a_pilot(monkeypatch, inference, link):
    """GPClassifier(inference=...) with no likelihood: the first of softmax, robust-max and
    logistic-softmax the method takes, whatever the data (a pilot's robust-max made Laplace fail on
    separated classes), and no pilot (link_choice_ None)."""
    import gpdsl.sklearn as gsk

    monkeypatch.setattr(gsk, "choose_link", lambda *a, **k: pytest.fail("no pilot when an inference is given"))
    X, y = three_classes(60)
    inducing = None if isinstance(inference, gd.inference.Laplace) else gd.inducing.KMeans(5)
    clf = quietly(GPClassifier(inference=inference, inducing=inducing, max_iter=2).fit, X, y)
    assert clf.model_.likelihood == gd.likelihoods.Categorical(3, link) and clf.link_choice_ is None
    with pytest.raises(ValueError, match="takes no Categorical"):
        GPClassifier(inference=gd.inference.EP()).fit(X, y)


def test_classifier_draws_its_seed_once(monkeypatch):
    """A RandomState is drawn from once a fit: the link's pilot and the fit get the same seed."""
    import gpdsl.sklearn as gsk

    seen = []
    real = gsk.choose_link
    monkeypatch.setattr(gsk, "choose_link", lambda *a, **k: seen.append(k["seed"]) or real(*a, **k))
    X, y = three_classes(60)
    clf = quietly(GPClassifier(max_iter=3, random_state=np.random.RandomState(0)).fit, X, y)
    expected = int(np.random.RandomState(0).randint(np.iinfo(np.int32).max))
    assert seen == [expected] and clf.model_.inference.seed == expected


@pytest.mark.parametrize("bad, match", [({"codes": [0, 1, 5] * 20}, "codes must be"),
                                        ({"codes": [0.5, 1, 2] * 20}, "codes must be"),
                                        ({"codes": [0, 1, 2] * 10}, "codes must be"),
                                        ({"n_classes": 1}, "n_classes"), ({"seed": -1}, "seed")])
def test_choose_link_refuses_bad_input(bad, match):
    X, _ = three_classes(60)
    args = {"codes": [0, 1, 2] * 20, "n_classes": 3, "seed": 0, **bad}
    with pytest.raises(ValueError, match=f"choose_link.*{match}|{match}"):
        choose_link(X, np.array(args["codes"]), args["n_classes"], SE(), seed=args["seed"])


def test_link_pilot_samples_kmeans_above_its_size():
    assert defaults.link_pilot(defaults.KMEANS_SAMPLE, 3)["inducing"].sample is None
    big = defaults.link_pilot(defaults.KMEANS_SAMPLE + 1, 3)["inducing"]
    assert big == gd.inducing.KMeans(defaults.PILOT_INDUCING_POINTS, seed=0, sample=defaults.KMEANS_SAMPLE)
