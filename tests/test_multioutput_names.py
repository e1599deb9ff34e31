"""Output names (issue 48): a DataFrame Y's columns, a dict layout's keys and named Series give a
multi-output posterior's ``output_names``, the ``output`` coordinate of every labelled result,
through save/load, sampling, GPRegressor and the CLI; unnamed data keep 0..P-1."""
import numpy as np
import pandas as pd
import pytest

import gpdsl as gd
from gpdsl import cli, multioutput
from gpdsl.sklearn import GPRegressor
from test_cli import MULTI_TOML, write_model, write_outputs_csv

NAMES = ["DAX", "SMI", "CAC"]
SE = gd.kernels.SquaredExponential


def _data(missing=True):
    rng = np.random.default_rng(3)
    X = np.linspace(0.0, 5.0, 14)[:, None]
    Y = np.column_stack([np.sin(X[:, 0]), np.cos(X[:, 0]), 0.3 * X[:, 0]]) + 0.05 * rng.standard_normal((14, 3))
    if missing:
        Y[[2, 9], [1, 0]] = np.nan
    return X, Y


def _model():
    return gd.Model(gd.kernels.ICM(SE(1.0, 1.0), 3, rank=1), gd.likelihoods.OutputGaussian(3, variance=0.05))


@pytest.mark.parametrize("missing", [True, False], ids=["general", "kronecker"])
def test_dataframe_names_label_every_result_and_change_no_number(missing, tmp_path):
    X, Y = _data(missing)
    model = _model()
    named, plain = (model.fit(X, y, optimize=False) for y in (pd.DataFrame(Y, columns=NAMES), Y))
    assert named.output_names == tuple(NAMES) and plain.output_names is None
    assert type(named.state).__name__ == ("PredictiveState" if missing else "KroneckerState")
    pred, pred0 = named.predict(X[:4]), plain.predict(X[:4])
    assert list(pred.output.values) == NAMES and list(pred0.output.values) == [0, 1, 2]
    np.testing.assert_array_equal(pred["y_mean"].values, pred0["y_mean"].values)
    assert pred["f_var"].sel(output="SMI").values.tolist() == pred0["f_var"].sel(output=1).values.tolist()
    ds = named.to_xarray()
    np.testing.assert_array_equal(ds["kernel.W"].sel(output="CAC").values, ds["kernel.W"].values[2])
    idata = named.to_inference_data(X[:3], Y[:3] if not missing else np.nan_to_num(Y[:3]), draws=4, chains=2)
    for group in ("posterior", "posterior_predictive", "log_likelihood", "observed_data"):
        assert list(idata[group]["output"].values) == NAMES, group
    assert idata.constant_data["kernel_W"].dims[0] == "output"
    np.testing.assert_array_equal(idata.constant_data["kernel_W"].sel(output="DAX").values, named.values["kernel.W"][0])
    named.save(tmp_path / "named.nc")
    plain.save(tmp_path / "plain.nc")
    back, back0 = gd.load(tmp_path / "named.nc"), gd.load(tmp_path / "plain.nc")
    assert back.output_names == tuple(NAMES) and back0.output_names is None
    assert list(back.predict(X[:2]).output.values) == NAMES
    np.testing.assert_allclose(back.predict(X[:4])["f_mean"].values, pred["f_mean"].values, rtol=1e-13, atol=0)
    # The names are in the checksum: a file whose names were edited is refused.
    edited = named.to_xarray().assign_coords(output=["DAX", "SMI", "FTSE"])
    with pytest.raises(gd.io.netcdf.PosteriorFileError, match="checksum"):
        gd.from_xarray(edited)


def test_dict_and_series_layouts_name_the_outputs_as_the_lists():
    X, Y = _data()
    Xs = [X[~np.isnan(Y[:, p])] for p in range(3)]
    ys = [Y[~np.isnan(Y[:, p]), p] for p in range(3)]
    model = _model()
    lists = model.fit(Xs, ys, optimize=False)
    fits = {"dicts": model.fit(dict(zip(NAMES, Xs)), dict(zip(NAMES, ys)), optimize=False),
            "pairs": model.fit({n: (x, y) for n, x, y in zip(NAMES, Xs, ys)}, None, optimize=False),
            "series": model.fit(Xs, [pd.Series(y, name=n) for n, y in zip(NAMES, ys)], optimize=False)}
    assert lists.output_names is None
    for kind, post in fits.items():
        assert post.output_names == tuple(NAMES), kind
        assert post.log_evidence == lists.log_evidence, kind
    # Integer names (years) are names too; 0..P-1 given as names are the default labels.
    years = model.fit(X, pd.DataFrame(Y, columns=[2001, 2002, 2003]), optimize=False)
    assert years.output_names == (2001, 2002, 2003) and list(years.predict(X[:1]).output.values) == [2001, 2002, 2003]
    assert list(model.fit(X, pd.DataFrame(Y), optimize=False).output_labels) == [0, 1, 2]


@pytest.mark.parametrize("X_of, y_of, match", [
    (lambda X, Y: X, lambda X, Y: pd.DataFrame(Y, columns=["a", "b", "a"]), r"fit: Y's columns names output 'a' twice"),
    (lambda X, Y: X, lambda X, Y: pd.DataFrame(Y, columns=["a", 1.5, "c"]), r"Y's columns must be .*1\.5 \(float\)"),
    (lambda X, Y: X, lambda X, Y: pd.DataFrame(Y, columns=["a", 2, "c"]), r"Y's columns .* a mix"),
    (lambda X, Y: X, lambda X, Y: pd.DataFrame(Y, columns=[True, False, 2]), r"Y's columns .*True \(bool\)"),
    (lambda X, Y: {"a": X, "b": X, "c": X}, lambda X, Y: {"a": Y[:, 0], "c": Y[:, 2], "b": Y[:, 1]},
     r"fit: with X a dict of outputs \['a', 'b', 'c'\], y must be a dict of the same keys in the same order"),
    (lambda X, Y: {"a": X, "b": X, "c": X}, lambda X, Y: None, r"with y None, X must be a dict \{name: \(X_p, y_p\)\}"),
    (lambda X, Y: {"a": X, "b": X}, lambda X, Y: {"a": Y[:, 0], "b": Y[:, 1]}, r"X's keys gives 2 output names but "
     r"the kernel has P = 3"),
])
def test_bad_names_are_refused_by_argument(X_of, y_of, match):
    X, Y = _data(missing=False)
    with pytest.raises(ValueError, match=match):
        _model().fit(X_of(X, Y), y_of(X, Y), optimize=False)


def test_check_output_names_and_saved_names():
    assert multioutput.check_output_names("f", "names", np.array([3, 1]), 2) == (3, 1)
    assert multioutput.saved_output_names(np.arange(3), 3) is None
    assert multioutput.saved_output_names(np.array([2, 0, 1]), 3) == (2, 0, 1)
    assert multioutput.saved_output_names(np.array(["x", "y"], dtype=object), 2) == ("x", "y")
    with pytest.raises(ValueError, match=r"load: the 'output' coordinate names output 'x' twice"):
        multioutput.saved_output_names(np.array(["x", "x"]), 2)
    # int32's ends pass (a saved file's coordinate holds them); beyond them refused, by owner and argument.
    ends = (np.iinfo(np.int32).min, np.iinfo(np.int32).max)
    assert multioutput.check_output_names("f", "names", ends, 2) == ends
    for wide in (2**31, -2**31 - 1, np.int64(2**40)):
        with pytest.raises(ValueError, match=rf"f: names names output {int(wide)}, outside int32 "
                                             r"\(-2147483648 to 2147483647\)"):
            multioutput.check_output_names("f", "names", [0, wide], 2)


def test_names_beyond_int32_are_refused_at_fit_and_int32_ends_round_trip(tmp_path):
    """The review's "big ints": 2**40 as a column name had fitted and then failed at save
    inside xarray (could not cast int64 to int32); now fit refuses it, and int32's ends save."""
    X, Y = _data(missing=False)
    with pytest.raises(ValueError, match=r"fit: Y's columns names output 1099511627776, outside int32"):
        _model().fit(X, pd.DataFrame(Y, columns=[2**40, 1, 2]), optimize=False)
    ends = [np.iinfo(np.int32).min, 0, np.iinfo(np.int32).max]
    post = _model().fit(X, pd.DataFrame(Y, columns=ends), optimize=False)
    post.save(tmp_path / "p.nc")
    back = gd.load(tmp_path / "p.nc")
    assert back.output_names == tuple(ends) and list(back.predict(X[:1]).output.values) == ends


def test_posterior_and_name_outputs_check_the_names_they_are_given():
    """The review's reproducer: Posterior(output_names=) took two names for three outputs (an
    xarray size error at predict) and a name twice (saved, then refused at load)."""
    X, Y = _data(missing=False)
    post = _model().fit(X, Y, optimize=False)
    args = (post.model, post.values, post.state, post.log_evidence)
    with pytest.raises(ValueError, match=r"Posterior: output_names gives 2 output names but the kernel has P = 3"):
        gd.Posterior(*args, output_names=("a", "b"))
    with pytest.raises(ValueError, match=r"Posterior: output_names names output 'a' twice"):
        gd.Posterior(*args, output_names=("a", "a", "b"))
    named = gd.Posterior(*args, output_names=np.array([7, 8, 9]))
    assert named.output_names == (7, 8, 9) and all(type(v) is int for v in named.output_names)
    with pytest.raises(ValueError, match=r"name_outputs: names names output 2147483648, outside int32"):
        multioutput.name_outputs(post, [0, 1, 2**31])
    single = gd.Model(SE(1.0, 1.0), gd.likelihoods.Gaussian(0.1)).fit(X, Y[:, 0], optimize=False)
    with pytest.raises(ValueError, match=r"Posterior: output_names names outputs, but the kernel has one output"):
        gd.Posterior(single.model, single.values, single.state, single.log_evidence, output_names=("a",))


def test_gpregressor_fitted_on_a_dataframe_carries_the_names():
    X, Y = _data()
    reg = GPRegressor(kernel=gd.kernels.ICM(SE(), 3), optimize=False).fit(X, pd.DataFrame(Y, columns=NAMES))
    plain = GPRegressor(kernel=gd.kernels.ICM(SE(), 3), optimize=False).fit(X, Y)
    assert reg.posterior_.output_names == tuple(NAMES) and plain.posterior_.output_names is None
    np.testing.assert_array_equal(reg.predict(X[:3]), plain.predict(X[:3]))
    assert list(reg.posterior_.predict(X[:3]).output.values) == NAMES


def test_sampled_run_labels_its_draws_and_keeps_them_in_its_file(tmp_path):
    pr = gd.priors
    X = np.linspace(-2, 2, 6)[:, None]
    Y = pd.DataFrame(np.column_stack([np.sin(X[:, 0]), np.cos(X[:, 0])]), columns=["up", "down"])
    model = gd.Model(gd.kernels.ICM(SE(pr.LogNormal(0.0, 1.0), pr.LogNormal(0.0, 1.0)), 2, W=pr.Normal(0.0, 1.0),
                                    kappa=pr.LogNormal(-1.0, 1.0)), gd.likelihoods.Gaussian(pr.LogNormal(-3.0, 1.0)))
    with pytest.warns(gd.SamplingWarning):
        run = model.sample(X, Y, draws=6, tune=6, chains=1, cores=1)
    assert run.output_names == ("up", "down") and run.map_posterior.output_names == ("up", "down")
    idata = run.to_inference_data(X[:2], max_draws=3)
    np.testing.assert_array_equal(idata.posterior["kernel.W"].sel(output="down").values,
                                  run.draws["kernel.W"].values[:, run.kept_draws(3), 1])
    assert list(idata.posterior["f_new"]["output"].values) == ["up", "down"]
    assert list(idata.posterior_predictive["y_new"]["output"].values) == ["up", "down"]
    assert list(run.predict(X[:2]).output.values) == ["up", "down"]
    run.save(tmp_path / "run.nc")
    back = gd.SampledPosterior.load(tmp_path / "run.nc", model)
    assert back.output_names == ("up", "down") and list(back.draws["output"].values) == ["up", "down"]


@pytest.mark.parametrize("columns", [["up", "down"], None], ids=["named", "unnamed"])
def test_sampled_run_without_an_output_axis_keeps_its_names_in_its_file(tmp_path, columns):
    """W and kappa held: no draw has an output axis, and the file still carries the output
    coordinate (the review's reproducer: the names came back None, predictions labelled 0, 1)."""
    pr = gd.priors
    X = np.linspace(-2, 2, 6)[:, None]
    Y = pd.DataFrame(np.column_stack([np.sin(X[:, 0]), np.cos(X[:, 0])]), columns=columns)
    model = gd.Model(gd.kernels.ICM(SE(pr.LogNormal(0.0, 1.0), pr.LogNormal(0.0, 1.0)), 2,
                                    W=gd.Fixed(np.array([[0.9], [0.4]])), kappa=gd.Fixed(np.array([0.2, 0.3]))),
                     gd.likelihoods.Gaussian(pr.LogNormal(-3.0, 1.0)))
    with pytest.warns(gd.SamplingWarning):
        run = model.sample(X, Y, draws=6, tune=6, chains=1, cores=1)
    assert "output" not in run.draws.dims
    run.save(tmp_path / "run.nc")
    back = gd.SampledPosterior.load(tmp_path / "run.nc", model)
    labels = ["up", "down"] if columns else [0, 1]
    assert back.output_names == (tuple(columns) if columns else None)
    before, after = run.predict(X[:2]), back.predict(X[:2])
    assert list(after.output.values) == list(before.output.values) == labels
    np.testing.assert_array_equal(after["f_mean"].values, before["f_mean"].values)


@pytest.mark.parametrize("heterotopic", [False, True])
def test_cli_names_reach_the_saved_posterior(tmp_path, heterotopic):
    rows = write_outputs_csv(tmp_path / "outputs.csv", long=heterotopic)
    text = MULTI_TOML.replace("max_iter = 60", "max_iter = 3")
    if heterotopic:
        names = ["DAX", "SMI", "CAC"]
        with open(tmp_path / "outputs.csv", "w") as fh:
            fh.write("x,index,y\n" + "".join(f"{x:.17g},{names[int(p)]},{y:.17g}\n" for x, p, y in rows))
        text = text.replace('targets = ["a", "b", "c"]', 'target = "y"\noutput = "index"\noutputs = ["DAX", "SMI", "CAC"]')
    else:
        names = ["a", "b", "c"]
    out = tmp_path / "out"
    assert cli.main(["run", str(write_model(tmp_path, text)), "--out", str(out)]) == 0
    post = gd.load(out / "posterior.nc")
    assert post.output_names == tuple(names)
    assert list(post.to_xarray()["kernel.kappa"]["output"].values) == names
