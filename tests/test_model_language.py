"""The modelling language around the kernels: names, flattened sums and products, tied
parameters (``gd.Shared``), active dimensions and the posterior of one additive component."""
from __future__ import annotations

import numpy as np
import pytest

import gpdsl as gd
from naive import central_difference

rng = np.random.default_rng(7)
X = rng.uniform(0, 5, size=(40, 2))
y = np.sin(2 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.standard_normal(40)
SE, M32 = gd.kernels.SquaredExponential, gd.kernels.Matern32


def test_sums_and_products_flatten_and_parts_are_named():
    k = SE() + M32() + SE(2.0) + M32(name="rough")
    assert isinstance(k, gd.kernels.Sum) and len(k.kernels) == 4
    names = gd.Model(k, gd.likelihoods.Gaussian()).parameter_table(X).names()
    assert names[:2] == ["kernel.0.lengthscale", "kernel.0.variance"]
    assert "kernel.rough.lengthscale" in names and "kernel.3.lengthscale" not in names
    p = SE() * M32() * SE(name="third")
    assert isinstance(p, gd.kernels.Product) and len(p.kernels) == 3
    # A named or masked sum is a part of its own, not flattened into the next.
    nested = gd.kernels.Sum((SE(), M32()), name="smooth") + SE()
    assert len(nested.kernels) == 2
    assert "kernel.smooth.0.lengthscale" in gd.Model(nested, gd.likelihoods.Gaussian()).parameter_table(X).names()


@pytest.mark.parametrize("bad, error, words", [
    (dict(name="1st"), ValueError, "name must be None or an identifier"),
    (dict(name=3), ValueError, "name must be None or an identifier"),
    (dict(active_dims=[0, 0]), ValueError, "must not repeat"),
    (dict(active_dims="ab"), TypeError, "active_dims"),
    (dict(active_dims=[-1]), TypeError, "non-negative column"),
])
def test_bad_names_and_active_dims_are_refused(bad, error, words):
    with pytest.raises(error, match=words):
        SE(**bad)


def test_duplicate_part_names_and_out_of_range_columns_are_refused():
    with pytest.raises(ValueError, match="parts' names must differ"):
        SE(name="a") + M32(name="a")
    model = gd.Model(SE(active_dims=[3]), gd.likelihoods.Gaussian())
    with pytest.raises(ValueError, match="beyond X's 2 feature"):
        model.fit(X, y, optimize=False)


def test_shared_parameter_is_one_free_parameter_with_the_summed_gradient():
    ls = gd.Shared("ls", 0.8)
    model = gd.Model(SE(ls, 1.0) + M32(ls, 0.5), gd.likelihoods.Gaussian(0.1))
    table = model.parameter_table(X)
    assert table.size == 4                              # two variances, one length-scale, the noise
    u = table.pack(table.values()) + 0.1
    values = table.unpack(u)
    assert values["kernel.0.lengthscale"] == values["kernel.1.lengthscale"]
    grad = table.chain(values, model.evaluate(values, X, y, None).grads)
    fd = central_difference(lambda v: model.evaluate(table.unpack(v), X, y, None).log_evidence, u)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)
    post = model.fit(X, y)
    assert post.values["kernel.0.lengthscale"] == post.values["kernel.1.lengthscale"]
    assert gd.Model.from_dict(model.to_dict()) == model


def test_shared_members_must_agree():
    model = gd.Model(SE(gd.Shared("ls", 0.8)) + M32(gd.Shared("ls", 0.9)), gd.likelihoods.Gaussian())
    with pytest.raises(ValueError, match=r"Shared\('ls'\).*declared differently"):
        model.parameter_table(X)


@pytest.mark.parametrize("inference, inducing", [(gd.inference.Exact(), None),
                                                 (gd.inference.VFE(), gd.inducing.Subsample(15, seed=1))])
def test_components_add_up_to_the_whole_posterior_mean(inference, inducing):
    """predict_f(component=...) of each part of a sum: their means add up to the whole latent
    mean (without a mean function), and a part's variance is at most its prior variance."""
    kernel = SE(1.0, name="smooth", active_dims=[0]) + M32(3.0, 0.5, name="slow", active_dims=[1])
    post = gd.Model(kernel, gd.likelihoods.Gaussian(0.05), inducing, inference).fit(X, y, optimize=False)
    Xs = rng.uniform(0, 5, size=(9, 2))
    whole, _ = post.predict_f(Xs)
    smooth, v_smooth = post.predict_f(Xs, component="smooth")
    slow, v_slow = post.predict_f(Xs, component=1)
    np.testing.assert_allclose(smooth + slow, whole, rtol=1e-9, atol=1e-10)
    assert np.all(v_smooth <= 1.0 + 1e-12) and np.all(v_slow <= 0.5 + 1e-12)
    # The exact component posterior by the dense formula: K_c* (K + s I)^-1 y and its variance.
    if isinstance(inference, gd.inference.Exact):
        part = kernel.kernels[0].bind()
        Ky = kernel.bind().gram(X, X) + 0.05 * np.eye(40)
        Kc = part.gram(Xs, X)
        np.testing.assert_allclose(smooth, Kc @ np.linalg.solve(Ky, y), rtol=1e-9)
        np.testing.assert_allclose(v_smooth, part.diag(Xs) - np.einsum("ij,ji->i", Kc, np.linalg.solve(Ky, Kc.T)),
                                   rtol=1e-8, atol=1e-12)
    with pytest.raises(ValueError, match="no part labelled 'trend'"):
        post.predict_f(Xs, component="trend")


def test_component_needs_a_sum_kernel():
    post = gd.Model(SE(), gd.likelihoods.Gaussian(0.05)).fit(X, y, optimize=False)
    with pytest.raises(ValueError, match="needs a Sum kernel"):
        post.predict_f(X[:3], component="smooth")


def test_a_bounded_parameter_stays_inside_its_interval_and_chains_its_gradient():
    """An entry with bounds (low, high) is optimised as the logit of its place in the interval:
    pack/unpack invert each other and chain is the derivative of unpack."""
    from gpdsl.parameters import ParameterTable, entry
    table = ParameterTable([entry("a", 0.3, positive=False, bounds=(-1.0, 2.0)), entry("b", 1.5)])
    u = table.pack(table.values())
    np.testing.assert_allclose(table.unpack(u)["a"], 0.3, rtol=1e-14)
    for step in (-40.0, 40.0):
        assert -1.0 < table.unpack(u + step)["a"] < 2.0 or table.unpack(u + step)["a"] in (-1.0, 2.0)
    grad = table.chain(table.unpack(u), {"a": np.array(2.0), "b": np.array(0.0)})
    fd = central_difference(lambda v: 2.0 * table.unpack(v)["a"], u)
    np.testing.assert_allclose(grad, fd, rtol=1e-7)
    with pytest.raises(ValueError, match=r"a must lie inside \(-1, 2\)"):
        entry("a", 2.5, positive=False, bounds=(-1.0, 2.0))


def test_a_mean_function_with_a_dask_x_evaluates_as_in_memory():
    """The chunked VFE passes with a mean function: the Dask X's evaluation equals the in-memory
    one (the bound and every gradient but the Linear mean's X^T g to the bit; that one to 1e-12,
    Dask's summation order)."""
    da = pytest.importorskip("dask.array")
    Xb = rng.uniform(0, 4, size=(300, 2))
    yb = 1.5 + 0.5 * Xb[:, 0] + np.sin(2 * Xb[:, 1]) + 0.1 * rng.standard_normal(300)
    model = gd.Model(SE() + gd.kernels.Linear(active_dims=[0]), gd.likelihoods.Gaussian(0.1),
                     gd.inducing.Fixed(Xb[:15]), gd.inference.VFE(chunk_size=100),
                     mean=gd.means.Constant(0.5) + gd.means.Linear(0.2))
    values = model.parameter_table(Xb, Xb[:15]).values()
    here = model.evaluate(values, Xb, yb, Xb[:15])
    there = model.evaluate(values, da.from_array(Xb, chunks=(100, 2)), yb, Xb[:15])
    assert there.log_evidence == here.log_evidence
    for name, g in here.grads.items():
        np.testing.assert_allclose(np.asarray(there.grads[name]), g, rtol=1e-12, atol=1e-12, err_msg=name)
    np.testing.assert_array_equal(there.dZ, here.dZ)


def test_priors_on_the_new_hyperparameters_enter_the_map_objective_and_round_trip():
    """A prior on a periodic kernel's period and an RQ's alpha (and one shared by two fields,
    counted once) adds its log density to the objective, and the model file keeps it."""
    t = np.linspace(0.0, 6.0, 50)[:, None]
    yt = np.sin(2 * np.pi * t[:, 0]) + 0.1 * rng.standard_normal(50)
    period_prior, alpha_prior = gd.priors.LogNormal(0.0, 0.1), gd.priors.Gamma(2.0, 2.0)
    shared = gd.Shared("ls", gd.priors.LogNormal(0.0, 1.0))
    kernel = (gd.kernels.Periodic(gd.kernels.SquaredExponential(shared), period=period_prior)
              + gd.kernels.RationalQuadratic(shared, 0.5, alpha=alpha_prior))
    model = gd.Model(kernel, gd.likelihoods.Gaussian(0.1))
    table = model.parameter_table(t)
    values = table.values()
    log_prior, grads = table.log_prior(values)
    want = (period_prior.log_density(values["kernel.0.period"]) + alpha_prior.log_density(values["kernel.1.alpha"])
            + gd.priors.LogNormal(0.0, 1.0).log_density(values["kernel.0.lengthscale"]))
    assert log_prior == pytest.approx(float(want), rel=1e-12)
    assert "kernel.1.lengthscale" not in grads                  # the tie's prior counts once
    post = model.fit(t, yt)
    assert abs(float(post.values["kernel.0.period"]) - 1.0) < 0.02
    assert set(post.priors) >= {"kernel.0.period", "kernel.1.alpha", "kernel.0.lengthscale"}
    assert gd.Model.from_dict(model.to_dict()) == model


def test_the_xarray_view_gives_each_new_hyperparameter_its_dims(tmp_path):
    """The spectral mixture's per-component arrays and a linear mean's per-feature coefficients
    keep their own dims in ``to_xarray`` and through save/load."""
    model = gd.Model(gd.kernels.SpectralMixture(2) + gd.kernels.Linear(np.ones(2)), gd.likelihoods.Gaussian(0.1),
                     mean=gd.means.Linear())
    post = model.fit(X, y, optimize=False)
    ds = post.to_xarray()
    assert ds["kernel.0.weights"].dims == ("component",)
    assert ds["kernel.0.means"].dims == ("component", "feature")
    assert ds["kernel.1.variance"].dims == ("feature",)
    assert ds["mean.coefficients"].dims == ("feature",)
    post.save(tmp_path / "post.nc")
    back = gd.load(tmp_path / "post.nc").to_xarray()
    assert back["kernel.0.scales"].dims == ("component", "feature")
    np.testing.assert_array_equal(back["kernel.0.scales"].values, ds["kernel.0.scales"].values)


def test_fit_continues_from_start():
    """``fit(start=post.values)`` starts where an earlier fit ended (the warning's advice after a
    plateau stop): at least as good an objective, and bad starts are refused by name."""
    model = gd.Model(SE(1.0, 1.0) + gd.kernels.Periodic(SE(1.0, 0.5), period=1.3), gd.likelihoods.Gaussian(0.1))
    first = model.fit(X, y, max_iter=5)
    again = model.fit(X, y, start=first.values, max_iter=5)
    assert again.log_evidence >= first.log_evidence - 1e-9
    unchanged = model.fit(X, y, start=first.values, optimize=False)
    assert unchanged.log_evidence == pytest.approx(first.log_evidence, rel=1e-12)
    with pytest.raises(ValueError, match="start names 'kernel.bogus'"):
        model.fit(X, y, start={"kernel.bogus": 1.0})
    with pytest.raises(ValueError, match=r"start\['kernel.1.period'\] .* must be finite and inside \(0, inf\)"):
        model.fit(X, y, start={"kernel.1.period": -1.0})
    with pytest.raises(TypeError, match="start must be None or a mapping"):
        model.fit(X, y, start=[1.0])
    fixed = gd.Model(SE(1.0, gd.Fixed(2.0)), gd.likelihoods.Gaussian(0.1))
    post = fixed.fit(X, y, start={"kernel.variance": 5.0}, optimize=False)
    assert float(post.values["kernel.variance"]) == 2.0          # a fixed entry keeps its value


def test_a_kernels_repr_shows_active_dims_and_name_only_where_set():
    assert repr(SE(0.5, 2.0)) == "SquaredExponential(lengthscale=0.5, variance=2.0)"
    assert repr(M32(name="rough", active_dims=[1])) == \
        "Matern32(lengthscale=1.0, variance=1.0, active_dims=(1,), name='rough')"


def test_a_model_file_spells_the_class_count_K_and_still_reads_n_classes():
    """Issue 45, item 7: files spell Categorical's class count ``K``, as the guide's
    ``Categorical(K, link)`` does; a file written with ``n_classes`` is still read."""
    model = gd.Model(SE(), gd.likelihoods.Categorical(3, "robustmax"), gd.inducing.KMeans(5, seed=0),
                     gd.inference.SVGP())
    spec = model.to_dict()
    assert spec["likelihood"] == {"type": "Categorical", "K": 3, "link": "robustmax", "epsilon": 1e-3}
    text = model.to_toml()
    assert "K = 3" in text and "n_classes" not in text
    assert gd.Model.from_toml(text) == model and gd.Model.from_dict(spec) == model
    assert gd.Model.from_toml(text.replace("K = 3", "n_classes = 3")) == model
    with pytest.raises(ValueError, match="'K' and 'n_classes' are the same field; give 'K' only"):
        gd.Model.from_dict({**spec, "likelihood": {**spec["likelihood"], "n_classes": 3}})
    with pytest.raises(ValueError, match=r"likelihood \(Categorical\): missing 'K'"):
        gd.Model.from_dict({**spec, "likelihood": {"type": "Categorical"}})
    with pytest.raises(ValueError, match=r"unknown keys \['k'\]; known: \['K', 'classes', 'epsilon', 'link'\]"):
        gd.Model.from_dict({**spec, "likelihood": {"type": "Categorical", "k": 3}})


def test_from_toml_takes_the_text_to_toml_writes_as_well_as_a_path(tmp_path):
    """Issue 45, item 7: ``Model.from_toml(model.to_toml())`` read the text as a path (OSError: File
    name too long for a long text, FileNotFoundError for a short one)."""
    model = gd.Model(SE(1.5, 0.5), gd.likelihoods.Gaussian(0.2), mean=gd.means.Constant(1.0))
    assert gd.Model.from_toml(model.to_toml()) == model
    path = tmp_path / "model.toml"
    model.to_toml(path)
    assert gd.Model.from_toml(path) == gd.Model.from_toml(str(path)) == model
    with pytest.raises(FileNotFoundError, match="and not a model's TOML text"):
        gd.Model.from_toml("x" * 5000)
    with pytest.raises(FileNotFoundError, match="model file not found"):
        gd.Model.from_toml(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="model text: not valid TOML"):
        gd.Model.from_toml("[kernel\ntype = 'Matern32'\n")
    with pytest.raises(TypeError, match="from_toml: expected a model file's path or a model's TOML text"):
        gd.Model.from_toml(3)


def test_from_toml_keeps_its_keyword_path(tmp_path):
    """The parameter is still called ``path`` (public names are a contract), and takes text too."""
    model = gd.Model(SE(1.5, 0.5), gd.likelihoods.Gaussian(0.2))
    file = tmp_path / "model.toml"
    model.to_toml(file)
    assert gd.Model.from_toml(path=file) == gd.Model.from_toml(path=str(file)) == model
    assert gd.Model.from_toml(path=model.to_toml()) == model
    with pytest.raises(FileNotFoundError, match="model file not found"):
        gd.Model.from_toml(path="x.toml")

