"""Tests for the ``gpdsl`` command line (gpdsl.cli) and gpdsl.plotting."""
import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpdsl as gd
from gpdsl import cli
from gpdsl.plotting import plot_fit

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
needs_matplotlib = pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib not installed")

MODEL_TOML = """\
[kernel]
type = "SquaredExponential"
lengthscale = 1.0
variance = 1.0

[likelihood]
type = "Gaussian"
variance = 0.1

[inducing]
type = "Subsample"
m = 10
seed = 0

[inference]
type = "VFE"

[data]
path = "sine.csv"
target = "y"
test_fraction = 0.25

[fit]
max_iter = 200
restarts = 1
seed = 3

[output]
posterior = "sine_posterior.nc"
plot = "sine.png"
"""


def write_sine_csv(path, n=60, extra_column=False):
    x = np.linspace(-3.0, 3.0, n)
    y = np.sin(3.0 * x) + 0.1 * np.random.default_rng(0).standard_normal(n)
    with open(path, "w") as fh:
        fh.write("x,noise,y\n" if extra_column else "x,y\n")
        for i, (xi, yi) in enumerate(zip(x, y)):
            fh.write(f"{xi:.17g},{i % 7},{yi:.17g}\n" if extra_column else f"{xi:.17g},{yi:.17g}\n")
    return x, y


def write_model(tmp_path, text=MODEL_TOML, name="model.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def assert_one_line_error(capsys, *fragments):
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("gpdsl: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out


# -- the default job -----------------------------------------------------------------------------
def test_default_run(tmp_path, capsys):
    assert cli.main(["run", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for text in ("SquaredExponential", "KMeans", "VFE", "log evidence", "kernel.lengthscale",
                 "likelihood.variance", "RMSE", "MNLPD", "inducing points  15",
                 "150 training / 50 held-out", "wall time", "r_hat", "f[9]"):
        assert text in out, text
    assert "f[10]" not in out
    assert (tmp_path / "posterior.nc").is_file()
    assert (tmp_path / "fit.png").is_file() == HAS_MATPLOTLIB

    # The saved posterior predicts exactly as the same fit done in-process.
    loaded = gd.load(tmp_path / "posterior.nc")
    model, (X, y, X_test, y_test), _ = cli.default_problem()
    assert X.shape == (150, 1) and X_test.shape == (50, 1)
    pred = loaded.predict(X_test)
    for name in ("f_mean", "f_var", "y_mean", "y_var"):
        assert np.all(np.isfinite(pred[name].values))
    expected = model.fit(X, y).predict(X_test)
    np.testing.assert_allclose(pred["y_mean"].values, expected["y_mean"].values, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(pred["y_var"].values, expected["y_var"].values, rtol=1e-10, atol=1e-12)


def test_default_split_is_fixed_and_disjoint():
    _, (X1, y1, T1, t1), _ = cli.default_problem()
    _, (X2, y2, T2, t2), _ = cli.default_problem()
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(t1, t2)
    X, _ = gd.datasets.snelson_like(n=200, seed=0)
    assert sorted(np.concatenate([X1[:, 0], T1[:, 0]])) == sorted(X[:, 0])


def test_missing_matplotlib_skips_plot(tmp_path, capsys, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)    # makes `import` raise ImportError
    assert cli.main(["run", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "pip install gpdsl[plot]" in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert (tmp_path / "posterior.nc").is_file()
    assert not (tmp_path / "fit.png").exists()


def test_plot_fit_needs_matplotlib(tmp_path, monkeypatch):
    X, y = gd.datasets.sine(n=20)
    post = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Gaussian(0.1)).fit(X, y, optimize=False)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install gpdsl\[plot\]"):
        plot_fit(post, X, y, tmp_path / "x.png")


def test_python_dash_m(tmp_path):
    # Run the package that this test imported, installed or not.
    root = str(Path(gd.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "gpdsl", "run", "--out", str(out)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "log evidence" in proc.stdout
    assert (out / "posterior.nc").is_file()
    assert proc.stderr == ""


# -- model files ---------------------------------------------------------------------------------
def test_toml_run(tmp_path, capsys):
    write_sine_csv(tmp_path / "sine.csv")
    model_path = write_model(tmp_path)
    out = tmp_path / "out"
    assert cli.main(["run", str(model_path), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "45 training / 15 held-out" in stdout
    assert "Subsample" in stdout and "inducing points  10" in stdout
    assert (out / "sine_posterior.nc").is_file()
    assert (out / "sine.png").is_file() == HAS_MATPLOTLIB
    post = gd.load(out / "sine_posterior.nc")
    assert np.all(np.isfinite(post.predict(np.linspace(-3, 3, 7)[:, None])["y_mean"].values))


def test_toml_features_fixed_exact_no_test(tmp_path, capsys):
    write_sine_csv(tmp_path / "data.csv", extra_column=True)
    text = """\
[kernel]
type = "Matern52"
[likelihood]
type = "Gaussian"
variance = 0.05
[data]
path = "data.csv"
target = "y"
features = ["x"]
test_fraction = 0
[fit]
fixed = ["likelihood.variance"]
"""
    assert cli.main(["run", str(write_model(tmp_path, text)), "--out", str(tmp_path / "o")]) == 0
    stdout = capsys.readouterr().out
    assert "60 training / 0 held-out points, 1 feature(s)" in stdout
    assert "likelihood.variance  0.05  (fixed)" in stdout
    assert "none (Exact uses all 60 training points)" in stdout
    assert gd.load(tmp_path / "o" / "posterior.nc").values["likelihood.variance"] == pytest.approx(0.05)


@needs_matplotlib
def test_plot_several_features(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, 2))
    y = np.sin(X[:, 0]) + X[:, 1] + 0.1 * rng.standard_normal(40)
    model = gd.Model(gd.kernels.SquaredExponential([1.0, 1.0]), gd.likelihoods.Gaussian(0.1),
                     gd.inducing.KMeans(8), gd.inference.FITC())
    post = model.fit(X[:30], y[:30])
    for kwargs in ({}, {"X_test": X[30:], "y_test": y[30:]}):
        path = tmp_path / f"p{len(kwargs)}.png"
        assert plot_fit(post, X[:30], y[:30], path, **kwargs) == path
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- bad input -----------------------------------------------------------------------------------
def test_missing_model_file(tmp_path, capsys):
    assert cli.main(["run", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "model file not found", "nope.toml")
    assert not (tmp_path / "o").exists()


def test_unknown_kernel_type(tmp_path, capsys):
    write_sine_csv(tmp_path / "sine.csv")
    path = write_model(tmp_path, MODEL_TOML.replace('"SquaredExponential"', '"Gaussianish"'))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "kernel: unknown type 'Gaussianish'", "SquaredExponential")


def test_missing_target_column(tmp_path, capsys):
    write_sine_csv(tmp_path / "sine.csv")
    path = write_model(tmp_path, MODEL_TOML.replace('target = "y"', 'target = "z"'))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "target column 'z'", "columns: x, y")


def test_missing_feature_column(tmp_path, capsys):
    write_sine_csv(tmp_path / "sine.csv")
    path = write_model(tmp_path, MODEL_TOML.replace('target = "y"', 'target = "y"\nfeatures = ["x", "w"]'))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "feature columns ['w']")


def test_bad_toml(tmp_path, capsys):
    path = write_model(tmp_path, "[kernel\ntype = 'SquaredExponential'\n")
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "not valid TOML")


@pytest.mark.parametrize("edit, fragment", [
    (('path = "sine.csv"', 'path = "missing.csv"'), "data file not found"),
    (("[fit]", "[fit]\nbogus = 1"), "[fit]: unknown keys ['bogus']"),
    (("test_fraction = 0.25", "test_fraction = 1.5"), "test_fraction must be a number in [0, 1)"),
    (("m = 10", "m = 100"), "larger than the N = 45 training points"),
    (("[output]", "[output]\nformat = 'x'"), "[output]: unknown keys ['format']"),
])
def test_bad_config(tmp_path, capsys, edit, fragment):
    write_sine_csv(tmp_path / "sine.csv")
    path = write_model(tmp_path, MODEL_TOML.replace(*edit))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, fragment)


def test_no_data_section(tmp_path, capsys):
    path = write_model(tmp_path, MODEL_TOML.split("[data]")[0])
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "no [data] section")


def test_usage_errors(capsys):
    assert cli.main([]) == 2
    assert "usage: gpdsl" in capsys.readouterr().err
    assert cli.main(["run", "--bogus"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err
    assert cli.main(["--version"]) == 0
    assert gd.__version__ in capsys.readouterr().out


# -- classification and counts with a held-out set (issue 14, item 7) ----------------------------
CLASSIFIER_TOML = """\
[kernel]
type = "SquaredExponential"
lengthscale = 0.7

[likelihood]
{likelihood}

[inducing]
type = "KMeans"
m = 10
seed = 0

[inference]
type = "{inference}"

[data]
path = "labels.csv"
target = "label"
test_fraction = 0.3
seed = 1

[fit]
max_iter = 100
"""


def write_labels_csv(path, n=150, seed=0):
    """Banana data with 10 % of the labels flipped (so that the held-out error rate is not 0),
    labels written as 0/1."""
    X, y = gd.datasets.banana(n, seed=seed)
    flip = np.random.default_rng(seed).uniform(size=n) < 0.1
    labels = np.where((y > 0) != flip, 1, 0)
    with open(path, "w") as fh:
        fh.write("a,b,label\n")
        for (a, b), t in zip(X, labels):
            fh.write(f"{a:.17g},{b:.17g},{t}\n")


def printed_metric(stdout, name):
    """The number printed after ``name`` in the held-out block of the report."""
    block = stdout.split("\nheld-out (")[1].split("\n\n")[0]
    for line in block.splitlines():
        if line.strip().startswith(name + " "):
            return float(line.strip()[len(name):].split()[0])
    raise AssertionError(f"{name!r} not printed in {block!r}")


def probability_of_one(link, bias, f_mean, f_var):
    """p(y* = 1) = E[link(f* + bias)], f* ~ N(f_mean, f_var), computed independently of gpdsl:
    closed form for probit, a fine trapezoid rule over +-12 sd for logit."""
    from scipy import special, stats

    if link == "probit":
        return stats.norm.cdf((f_mean + bias) / np.sqrt(1.0 + f_var))
    z = np.linspace(-12.0, 12.0, 24001)
    weights = stats.norm.pdf(z) * (z[1] - z[0])
    f = f_mean[:, None] + np.sqrt(f_var)[:, None] * z[None, :]
    return (special.expit(f + bias) * weights).sum(axis=1)


@pytest.mark.parametrize("likelihood, inference, link", [
    ('type = "Bernoulli"\nlink = "probit"', "EP", "probit"),
    ('type = "Bernoulli"\nlink = "logit"', "PolyaGamma", "logit"),
    ('type = "Bernoulli"\nlink = "logit"', "SVGP", "logit"),
    ('type = "Bernoulli"\nlink = "probit"', "Laplace", "probit"),
])
def test_toml_classification_held_out(tmp_path, capsys, likelihood, inference, link):
    """Used to end in KeyError: "No variable named 'y_mean'" (exit 1, nothing written)."""
    write_labels_csv(tmp_path / "labels.csv")
    path = write_model(tmp_path, CLASSIFIER_TOML.format(likelihood=likelihood, inference=inference))
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "105 training / 45 held-out" in captured.out
    assert "RMSE" not in captured.out and "MNLPD" not in captured.out

    # Recompute the metrics with numpy / scipy from the saved posterior's latent predictions.
    _, (_, _, X_test, y_test, _, _), _, _, _, _ = cli.problem_from_toml(path)
    post = gd.load(out / "posterior.nc")
    pred = post.predict(X_test)
    p = probability_of_one(link, post.values["likelihood.bias"], pred["f_mean"].values, pred["f_var"].values)
    np.testing.assert_allclose(pred["p"].values, p, rtol=1e-7, atol=1e-12)
    positive = y_test == 1
    expected = {"error rate": np.mean((p > 0.5) != positive),
                "mean log predictive": np.mean(np.log(np.where(positive, p, 1.0 - p))),
                "Brier score": np.mean((p - positive) ** 2)}
    assert 0 < expected["error rate"] < 0.5          # the labels are noisy, the classifier is not useless
    for name, value in expected.items():
        assert printed_metric(captured.out, name) == pytest.approx(value, rel=1e-5, abs=1e-9), name
    metrics = cli.held_out_metrics(post, X_test, y_test)
    assert metrics == pytest.approx(expected, rel=1e-7)

    assert (out / "fit.png").is_file() == HAS_MATPLOTLIB
    if HAS_MATPLOTLIB:
        assert (out / "fit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_toml_counts_held_out(tmp_path, capsys):
    """Poisson counts report the RMSE of the predictive mean count and the mean log
    negative-binomial predictive (they used to end in a traceback too)."""
    from scipy import stats

    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(-3.0, 3.0, 80))
    counts = rng.poisson((1.5 + np.sin(x)) ** 2)
    with open(tmp_path / "counts.csv", "w") as fh:
        fh.write("x,count\n")
        fh.writelines(f"{xi:.17g},{c}\n" for xi, c in zip(x, counts))
    text = """\
[kernel]
type = "SquaredExponential"
[likelihood]
type = "Poisson"
[inducing]
type = "KMeans"
m = 10
[inference]
type = "EP"
[data]
path = "counts.csv"
target = "count"
test_fraction = 0.25
"""
    path = write_model(tmp_path, text)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    stdout = capsys.readouterr().out
    _, (_, _, X_test, y_test, _, _), _, _, _, _ = cli.problem_from_toml(path)
    pred = gd.load(tmp_path / "out" / "posterior.nc").predict(X_test)
    m2, v = pred["f_mean"].values ** 2, pred["f_var"].values
    # The negative binomial matched to g = f^2 (QP paper, Appendix H): mean m^2 + v.
    shape = (m2 + v) ** 2 / (2.0 * v * (2.0 * m2 + v))
    scale = 2.0 * v * (2.0 * m2 + v) / (m2 + v)
    log_pred = stats.nbinom.logpmf(y_test, shape, 1.0 / (1.0 + scale))
    assert printed_metric(stdout, "RMSE") == pytest.approx(np.sqrt(np.mean((y_test - m2 - v) ** 2)), rel=1e-5)
    assert printed_metric(stdout, "mean log predictive") == pytest.approx(np.mean(log_pred), rel=1e-5)
    assert (tmp_path / "out" / "fit.png").is_file() == HAS_MATPLOTLIB


def test_labels_the_likelihood_cannot_take(tmp_path, capsys):
    """A label outside {0, 1} is reported before fitting, wherever the split puts it."""
    write_labels_csv(tmp_path / "labels.csv")
    lines = (tmp_path / "labels.csv").read_text().splitlines()
    lines[5] = lines[5].rsplit(",", 1)[0] + ",2"
    (tmp_path / "labels.csv").write_text("\n".join(lines) + "\n")
    path = write_model(tmp_path, CLASSIFIER_TOML.format(likelihood='type = "Bernoulli"', inference="EP"))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "target column 'label'", "must be binary")
    assert not (tmp_path / "o").exists()


@needs_matplotlib
@pytest.mark.parametrize("dim", [1, 3])
def test_plot_classification(tmp_path, dim):
    """p(y* = 1) along x for 1-D inputs, p against the label for D > 2 (2-D: the CLI test)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, dim))
    y = np.where(X.sum(axis=1) + 0.5 * rng.standard_normal(40) > 0, 1.0, -1.0)
    model = gd.Model(gd.kernels.SquaredExponential(1.0), gd.likelihoods.Bernoulli(),
                     inference=gd.inference.EP())
    post = model.fit(X[:30], y[:30], optimize=False)
    for kwargs in ({}, {"X_test": X[30:], "y_test": y[30:]}):
        path = tmp_path / f"p{len(kwargs)}.png"
        assert plot_fit(post, X[:30], y[:30], path, **kwargs) == path
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- output names stay inside --out (issue 14, item 9) -------------------------------------------
@pytest.mark.parametrize("key", ["posterior", "plot"])
@pytest.mark.parametrize("name", ["../escape.nc", "ABSOLUTE", "sub/x.nc", "..", ".", "a\\b.nc", ""])
def test_output_names_stay_inside_out(tmp_path, capsys, key, name):
    write_sine_csv(tmp_path / "sine.csv")
    if name == "ABSOLUTE":
        name = str(tmp_path / "escape.nc")
    line = f'{key} = "{DEFAULT_NAMES[key]}"'
    # A TOML literal string: the backslash stays a backslash.
    path = write_model(tmp_path, MODEL_TOML.replace(line, f"{key} = '{name}'"))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, f"[output]: {key} must be a plain file name inside --out")
    assert not (tmp_path / "escape.nc").exists()
    assert not (tmp_path / "o").exists()


DEFAULT_NAMES = {"posterior": "sine_posterior.nc", "plot": "sine.png"}


def test_output_posterior_name_must_end_in_nc(tmp_path, capsys):
    """Issue 14 item 11 through the CLI: the posterior is netCDF, so its name says so."""
    write_sine_csv(tmp_path / "sine.csv")
    path = write_model(tmp_path, MODEL_TOML.replace('posterior = "sine_posterior.nc"', 'posterior = "post.pkl"'))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "[output]: posterior must end in .nc", "post.pkl")
    assert not (tmp_path / "o").exists()


# -- [data] standardize (issue 14 item 8) ------------------------------------------------------------
RAW_TOML = """\
[kernel]
type = "SquaredExponential"
lengthscale = 1.0
variance = 1.0

[likelihood]
type = "Gaussian"
variance = 1.0

[inducing]
type = "KMeans"
m = 10
seed = 0

[inference]
type = "VFE"

[data]
path = "raw.csv"
target = "y"
test_fraction = 0.25
"""


def _write_raw_csv(path):
    from test_scaling import raw_regression
    X, y = raw_regression(160)
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", header="a,b,c,y", comments="")
    return y


@pytest.mark.parametrize("standardize", [None, True, False])
def test_data_standardize(tmp_path, capsys, standardize):
    """Raw columns (targets ~25, inputs on scales 1e-2 .. 7e2) fit the constant model unless the
    CLI standardises them, which it does by default; metrics are in the targets' units."""
    y = _write_raw_csv(tmp_path / "raw.csv")
    text = RAW_TOML + ("" if standardize is None else f"standardize = {str(standardize).lower()}\n")
    out = tmp_path / "out"
    assert cli.main(["run", str(write_model(tmp_path, text)), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    rmse = float(captured.out.split("  RMSE", 1)[1].split()[0])
    post = gd.load(out / cli.DEFAULT_POSTERIOR)
    if standardize is False:
        assert "no better than the constant model" in captured.err
        assert rmse > 5 * y.std() and post.standardization is None
    else:
        assert "constant model" not in captured.err
        assert "in standardised units: inputs and targets" in captured.out
        assert rmse < 0.8 * y.std()
        table = np.loadtxt(tmp_path / "raw.csv", delimiter=",", skiprows=1)
        _, y_train, _, _ = cli.split(table[:, :3], y, 40)     # the scaling is the training rows'
        assert post.standardization.y_mean == pytest.approx(y_train.mean(), rel=1e-12)


@pytest.mark.parametrize("where,value,fragment", [
    ("[data]", '"yes"', "[data]: standardize must be true or false, got 'yes'"),
    ("[fit]", "true", "[fit]: unknown keys ['standardize']"),
])
def test_standardize_key_errors(tmp_path, capsys, where, value, fragment):
    _write_raw_csv(tmp_path / "raw.csv")
    text = RAW_TOML + (f"standardize = {value}\n" if where == "[data]" else f"\n[fit]\nstandardize = {value}\n")
    assert cli.main(["run", str(write_model(tmp_path, text)), "--out", str(tmp_path / "out")]) == 2
    assert_one_line_error(capsys, fragment)


# -- [data] offset: a per-row offset of the latent input (log exposure) ----------------------------
OFFSET_TOML = """\
[kernel]
type = "SquaredExponential"
[likelihood]
type = "Poisson"
link = "log"
[inference]
type = "Laplace"
[data]
path = "claims.csv"
target = "claims"
offset = "log_exposure"
test_fraction = 0.25
seed = 5
[fit]
max_iter = 200
"""


def write_exposure_csv(path, n=80):
    """Counts with rate exposure * exp(f(x)); columns x, log_exposure, claims."""
    rng = np.random.default_rng(1)
    x = np.sort(rng.uniform(-3.0, 3.0, n))
    exposure = rng.uniform(0.5, 20.0, n)
    counts = rng.poisson(exposure * np.exp(0.8 * np.sin(x)))
    with open(path, "w") as fh:
        fh.write("x,log_exposure,claims\n")
        fh.writelines(f"{xi:.17g},{np.log(e):.17g},{c}\n" for xi, e, c in zip(x, exposure, counts))
    return x[:, None], np.log(exposure), counts.astype(float)


def test_toml_offset_held_out(tmp_path, capsys):
    """The offset column is read, split with the rows, passed to the fit and to the held-out
    metrics: the CLI's mean log predictive is the one of the same fit done in Python."""
    X, log_exposure, counts = write_exposure_csv(tmp_path / "claims.csv")
    path = write_model(tmp_path, OFFSET_TOML)
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "offset 'log_exposure'" in captured.out
    assert "features x;" in captured.out                     # the offset is not a feature
    assert "60 training / 20 held-out points, 1 feature(s)" in captured.out
    assert (out / "fit.png").is_file() == HAS_MATPLOTLIB

    # The CLI's split (test_fraction 0.25, seed 5), written out here independently of it.
    perm = np.random.default_rng(5).permutation(80)
    test, train = np.sort(perm[:20]), np.sort(perm[20:])
    model = gd.Model(kernel=gd.kernels.SquaredExponential(), likelihood=gd.likelihoods.Poisson(link="log"),
                     inference=gd.inference.Laplace())
    post = model.fit(X[train], counts[train], offset=log_exposure[train], max_iter=200, standardize=True)
    log_pred = post.log_predictive(X[test], counts[test], offset=log_exposure[test])
    expected = float(np.mean(log_pred))
    assert printed_metric(captured.out, "mean log predictive") == pytest.approx(expected, rel=1e-5)
    mean = post.predict(X[test], offset=log_exposure[test])["y_mean"].values
    assert printed_metric(captured.out, "RMSE") == pytest.approx(np.sqrt(np.mean((counts[test] - mean) ** 2)),
                                                                 rel=1e-5)
    # The held-out offset matters: without it the score is far worse (exposures 0.5 .. 20).
    assert np.mean(post.log_predictive(X[test], counts[test])) < expected - 1.0

    # The saved posterior and problem_from_toml agree with the rows above.
    _, (_, _, X_test, y_test, o_train, o_test), _, options, _, _ = cli.problem_from_toml(path)
    np.testing.assert_array_equal(o_train, log_exposure[train])
    np.testing.assert_array_equal(o_test, log_exposure[test])
    assert "offset" not in options
    metrics = cli.held_out_metrics(gd.load(out / "posterior.nc"), X_test, y_test, o_test)
    assert metrics["mean log predictive"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("edit, fragments", [
    (('offset = "log_exposure"', 'offset = "exposure"'),
     ("[data]: offset column 'exposure' not in", "columns: x, log_exposure, claims")),
    (('offset = "log_exposure"', 'offset = "claims"'), ("the offset column 'claims' is also the target",)),
    (('offset = "log_exposure"', 'offset = "log_exposure"\nfeatures = ["x", "log_exposure"]'),
     ("the offset column 'log_exposure' is also listed in features",)),
    (('offset = "log_exposure"', "offset = 3"), ("[data]: offset must be a column name",)),
    (("max_iter = 200", "offset = 0.0"), ("[fit]: unknown keys ['offset']",)),
])
def test_offset_column_errors(tmp_path, capsys, edit, fragments):
    write_exposure_csv(tmp_path / "claims.csv")
    path = write_model(tmp_path, OFFSET_TOML.replace(*edit))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, str(path), *fragments)
    assert not (tmp_path / "o").exists()


def test_offset_with_a_method_without_offsets_is_refused_before_fitting(tmp_path, capsys, monkeypatch):
    # Every built-in method takes an offset: PolyaGamma stands for one that declares it does not.
    monkeypatch.setattr(gd.inference.PolyaGamma, "supports_offset", False)
    write_labels_csv(tmp_path / "labels.csv")
    table = np.loadtxt(tmp_path / "labels.csv", delimiter=",", skiprows=1)
    header = (tmp_path / "labels.csv").read_text().splitlines()[0]
    np.savetxt(tmp_path / "labels.csv", np.column_stack([table, np.zeros(len(table))]), delimiter=",",
               header=header + ",shift", comments="")
    text = CLASSIFIER_TOML.format(likelihood='type = "Bernoulli"\nlink = "logit"', inference="PolyaGamma")
    path = write_model(tmp_path, text.replace("[data]\n", '[data]\noffset = "shift"\n'))

    @functools.wraps(gd.Model.fit)      # keeps the signature, from which the CLI reads [fit]'s keys
    def fit(*args, **kwargs):
        raise AssertionError("the model was fitted before the offset was refused")
    monkeypatch.setattr(gd.Model, "fit", fit)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, str(path), "offset column 'shift'", "PolyaGamma does not take a per-row offset")
    assert not (tmp_path / "o").exists()


@needs_matplotlib
def test_plot_with_offset(tmp_path):
    """With an offset no grid is drawn (none is known between the rows): the rows' scatter
    plots, predicted at their own offsets, for counts and labels alike."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, 1))
    o = rng.uniform(-1, 1, 40)
    counts = rng.poisson(np.exp(np.sin(X[:, 0]) + o)).astype(float)
    labels = np.where(X[:, 0] + o + 0.5 * rng.standard_normal(40) > 0, 1.0, 0.0)
    for likelihood, y in ((gd.likelihoods.Poisson(link="log"), counts), (gd.likelihoods.Bernoulli(), labels)):
        post = gd.Model(gd.kernels.SquaredExponential(1.0), likelihood,
                        inference=gd.inference.Laplace()).fit(X[:30], y[:30], offset=o[:30], optimize=False)
        for kwargs in ({}, {"X_test": X[30:], "y_test": y[30:], "offset_test": o[30:]}):
            path = tmp_path / f"p{len(kwargs)}.png"
            assert plot_fit(post, X[:30], y[:30], path, offset=o[:30], **kwargs) == path
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        with pytest.raises(ValueError, match="offset_test is needed"):
            plot_fit(post, X[:30], y[:30], tmp_path / "x.png", X_test=X[30:], y_test=y[30:], offset=o[:30])


def write_three_class_csv(path, n=150, seed=0, names=(1, 2, 3)):
    """Three Gaussian blobs in 2-D with labels ``names`` (default 1, 2, 3: not codes, the classes
    become (1, 2, 3)); returns the inputs and the class codes 0..2."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [2.0, 0.5], [0.5, 2.0]])
    labels = rng.integers(0, 3, n)
    X = centres[labels] + 0.7 * rng.standard_normal((n, 2))
    with open(path, "w") as fh:
        fh.write("a,b,label\n")
        for (a, b), t in zip(X, labels):
            fh.write(f"{a:.17g},{b:.17g},{names[t]}\n")
    return X, labels


@pytest.mark.parametrize("likelihood, inference", [
    ('type = "Categorical"\nn_classes = 3\nlink = "robustmax"', "SVGP"),
    ('type = "Categorical"\nn_classes = 3', "SVGP"),
])
def test_toml_three_classes_held_out(tmp_path, capsys, likelihood, inference):
    """K classes from a model file: the held-out error of the most probable class, the mean log
    predictive and the multi-class Brier score, recomputed from the saved posterior; a decision map."""
    write_three_class_csv(tmp_path / "labels.csv")
    path = write_model(tmp_path, CLASSIFIER_TOML.format(likelihood=likelihood, inference=inference))
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    _, (_, _, X_test, y_test, _, _), _, _, _, _ = cli.problem_from_toml(path)
    post = gd.load(out / "posterior.nc")
    assert post.model.likelihood.classes == (1.0, 2.0, 3.0)
    p = post.predict(X_test)["p"].values
    codes = (y_test - 1).astype(int)
    expected = {"error rate": np.mean(np.argmax(p, axis=1) != codes),
                "mean log predictive": np.mean(np.log(p[np.arange(codes.size), codes])),
                "Brier score": np.mean(np.sum((p - np.eye(3)[codes]) ** 2, axis=1))}
    assert 0 < expected["error rate"] < 0.4
    for name, value in expected.items():
        assert printed_metric(captured.out, name) == pytest.approx(value, rel=1e-5, abs=1e-9), name
    assert (out / "fit.png").is_file() == HAS_MATPLOTLIB


SEPARATE_KERNEL = """[kernel]
type = "Separate"
kernels = [
    { type = "SquaredExponential", lengthscale = 0.7 },
    { type = "Matern52", lengthscale = 0.7 },
    { type = "SquaredExponential", lengthscale = 1.5 },
]
"""


def test_toml_one_kernel_per_class(tmp_path, capsys):
    """A model file whose kernel is one per class (``Separate``): the run fits each class's own
    length-scale, saves, and its printed held-out error is the saved posterior's."""
    write_three_class_csv(tmp_path / "labels.csv")
    toml = CLASSIFIER_TOML.format(likelihood='type = "Categorical"\nn_classes = 3', inference="SVGP")
    toml = SEPARATE_KERNEL + toml.split("\n\n", 1)[1]
    path = write_model(tmp_path, toml)
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    post = gd.load(out / "posterior.nc")
    assert post.model.kernel.n_outputs == 3 and post.state.chol.shape == (3, 10, 10)
    _, (_, _, X_test, y_test, _, _), _, _, _, _ = cli.problem_from_toml(path)
    p = post.predict(X_test)["p"].values
    error = np.mean(np.argmax(p, axis=1) != (y_test - 1).astype(int))
    assert printed_metric(captured.out, "error rate") == pytest.approx(error, rel=1e-5, abs=1e-9)


def test_labels_outside_the_classes_are_reported_before_fitting(tmp_path, capsys):
    write_three_class_csv(tmp_path / "labels.csv")
    lines = (tmp_path / "labels.csv").read_text().splitlines()
    lines[7] = lines[7].rsplit(",", 1)[0] + ",4"
    (tmp_path / "labels.csv").write_text("\n".join(lines) + "\n")
    path = write_model(tmp_path, CLASSIFIER_TOML.format(likelihood='type = "Categorical"\nn_classes = 3',
                                                        inference="SVGP"))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "target column 'label'", "got 4 distinct values")


SPECIES = ("setosa", "versicolor", "virginica")


@pytest.mark.filterwarnings("ignore::gpdsl.ConvergenceWarning")
def test_text_labels_in_the_target_column_are_the_classes(tmp_path, capsys):
    """Issue 45, item 7: the CLI refused text labels (``non-numeric value 'setosa'``) that
    ``Model.fit`` takes.  Now the classes are the labels, sorted, as the Python API makes them, the
    fit is the Python API's on the same rows, and the printed held-out error is the saved posterior's."""
    X, codes = write_three_class_csv(tmp_path / "labels.csv", names=SPECIES)
    path = write_model(tmp_path, CLASSIFIER_TOML.format(likelihood='type = "Categorical"\nK = 3', inference="SVGP"))
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    post = gd.load(out / "posterior.nc")
    assert post.model.likelihood.classes == SPECIES
    train, test = cli.split_rows(X.shape[0], round(0.3 * X.shape[0]), seed=1)
    labels = np.array(SPECIES)[codes]
    python = gd.Model.from_toml(path).fit(X[train], labels[train], max_iter=100, standardize=True)
    assert python.model == post.model
    np.testing.assert_allclose(post.predict(X[test])["p"].values, python.predict(X[test])["p"].values,
                               rtol=1e-6, atol=1e-9)
    error = np.mean(np.argmax(post.predict(X[test])["p"].values, axis=1) != codes[test])
    assert printed_metric(captured.out, "error rate") == pytest.approx(error, rel=1e-5, abs=1e-9)


def test_text_labels_are_refused_as_the_python_api_refuses_them(tmp_path, capsys):
    """A likelihood that takes no text labels (Bernoulli) refuses them with its own words, before
    fitting; a text cell in a feature column is still a non-numeric value; an empty label is named."""
    X, codes = write_three_class_csv(tmp_path / "labels.csv", names=("no", "yes", "yes"))
    path = write_model(tmp_path, CLASSIFIER_TOML.format(likelihood='type = "Bernoulli"', inference="SVGP"))
    with pytest.raises(TypeError, match="must be a numeric array, got text"):
        gd.Model.from_toml(path).fit(X, np.array(["no", "yes", "yes"])[codes])
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "target column 'label'", "must be a numeric array, got text")
    lines = (tmp_path / "labels.csv").read_text().splitlines()
    lines[4] = "x," + lines[4].split(",", 1)[1]
    (tmp_path / "labels.csv").write_text("\n".join(lines) + "\n")
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "non-numeric value 'x' in column 'a' at line 5")
    write_three_class_csv(tmp_path / "labels.csv", names=("no", "", "yes"))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "empty value in column 'label' at line")
    assert not (tmp_path / "o").exists()


# -- [sample]: NUTS over the hyperparameters ------------------------------------------------------
SAMPLE_TOML = """\
[kernel]
type = "SquaredExponential"
lengthscale = {prior = "Gamma", shape = 4.0, rate = 4.0}
variance = {prior = "HalfNormal", scale = 2.0}

[likelihood]
type = "Gaussian"
variance = {prior = "HalfNormal", scale = 1.0}

[data]
path = "sine.csv"
target = "y"
test_fraction = 0.25

[sample]
draws = 40
tune = 40
chains = 2
seed = 5
target_accept = 0.85
cores = 1

[output]
posterior = "run.nc"
"""


def test_sample_table_runs_model_sample_and_writes_the_run(tmp_path, capsys):
    """A [sample] table makes `gpdsl run` call Model.sample with its keys: the saved run has their
    chains and draws, equals Model.sample called in-process with the same arguments, and the
    report prints the diagnostics and ArviZ's summary of every hyperparameter."""
    write_sine_csv(tmp_path / "sine.csv", n=24)
    path = write_model(tmp_path, SAMPLE_TOML)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 0
    stdout = capsys.readouterr().out
    for text in ("sampled by NUTS", "chains x draws   2 x 40", "divergences", "max R-hat", "E-BFMI",
                 "kernel.lengthscale", "kernel.variance", "likelihood.variance", "r_hat", "run.nc"):
        assert text in stdout, text
    model, (X, y, X_test, y_test, _, _), _, options, _, _ = cli.problem_from_toml(path)
    assert options == {"sample": {"draws": 40, "tune": 40, "chains": 2, "seed": 5, "target_accept": 0.85, "cores": 1}}
    back = gd.SampledPosterior.load(tmp_path / "o" / "run.nc", model)
    # The held-out rows are scored by the predictions integrated over the draws.
    assert f"held-out ({X_test.shape[0]} points)" in stdout
    mnlpd = -np.mean(back.log_predictive(X_test, y_test))
    assert f"MNLPD  {mnlpd:.6g}" in stdout
    assert back.result.draws.shape == (2, 40, 3)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gd.SamplingWarning)
        direct = model.sample(X, y, **options["sample"])
    np.testing.assert_array_equal(back.result.draws, direct.result.draws)
    np.testing.assert_array_equal(back.sample_stats["step_size"].values, direct.sample_stats["step_size"].values)


def test_sample_table_with_fixed_and_defaults_applies_them(tmp_path):
    """An empty [sample] takes Model.sample's defaults; [fit] fixed is passed on in its options."""
    write_sine_csv(tmp_path / "sine.csv", n=24)
    text = SAMPLE_TOML.replace("draws = 40\ntune = 40\nchains = 2\nseed = 5\ntarget_accept = 0.85\ncores = 1\n", "")
    text = text.replace("[sample]", "[fit]\nfixed = [\"likelihood.variance\"]\n\n[sample]")
    _, _, _, options, _, _ = cli.problem_from_toml(write_model(tmp_path, text))
    assert options == {"sample": {"fixed": ("likelihood.variance",)}}


@pytest.mark.parametrize("edit, fragments", [
    (("draws = 40", "draw = 40"), ("[sample]: unknown keys ['draw']",)),
    (("draws = 40", "metric = \"dense\""), ("[sample]: unknown keys ['metric']",)),
    (("draws = 40", "draws = 0"), ("Model.sample: draws must be",)),
    (("tune = 40", "tune = -1"), ("Model.sample: tune must be",)),
    (("target_accept = 0.85", "target_accept = 1.5"), ("Model.sample: target_accept must be a number in (0, 1)",)),
    (("cores = 1", "cores = 0"), ("Model.sample: cores must be",)),
    (("[sample]", "[fit]\nmax_iter = 5\n\n[sample]"), ("[fit]: ['max_iter'] configure a point fit",)),
    (("test_fraction = 0.25", "test_fraction = 0.25\nstandardize = true"), ("standardize = True with [sample]",)),
    (("variance = {prior = \"HalfNormal\", scale = 1.0}", "variance = 0.1"),
     ("['likelihood.variance'] carry no prior",)),
    (("[sample]\ndraws = 40\ntune = 40\nchains = 2\nseed = 5\ntarget_accept = 0.85\ncores = 1\n", ""),
     ("[sample] must be a table",)),
    (('posterior = "run.nc"', 'posterior = "run.nc"\nplot = "trace.png"'), ("[output]: plot is not drawn with [sample]",)),
])
def test_sample_table_errors_are_one_line_before_sampling(tmp_path, capsys, monkeypatch, edit, fragments):
    """Every refusal names the key or the argument, exits 2, and comes before the MAP fit."""
    write_sine_csv(tmp_path / "sine.csv", n=24)
    text = SAMPLE_TOML.replace(*edit)
    path = write_model(tmp_path, "sample = 3\n" + text if "[sample]" not in text else text)

    def no_fit(*args, **kwargs):
        raise AssertionError("fitted before the arguments were checked")
    monkeypatch.setattr(gd.Model, "fit", no_fit)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, *fragments)


# -- multi-output models -----------------------------------------------------------------------------
MULTI_TOML = """\
[kernel]
type = "ICM"
output_count = 3
rank = 1
[kernel.kernel]
type = "SquaredExponential"

[likelihood]
type = "OutputGaussian"
output_count = 3
variance = 0.05

[mean]
type = "PerOutput"
means = [{type = "Constant"}, {type = "Constant"}, {type = "Zero"}]

[data]
path = "outputs.csv"
targets = ["a", "b", "c"]
test_fraction = 0.2

[fit]
max_iter = 60
"""


def write_outputs_csv(path, n=40, long=False):
    """Three correlated outputs of one input; a fifth of the entries left blank or NA (isotopic,
    one column per output), or one observed entry a row with its output index (long).  Returns
    the observed entries' (x, output, y) in output-major order."""
    rng = np.random.default_rng(4)
    x = np.linspace(-2.0, 2.0, n)
    Y = np.column_stack([np.sin(2 * x), 0.8 * np.sin(2 * x) + 1.0, -np.sin(2 * x)]) + 0.1 * rng.standard_normal((n, 3))
    observed = rng.uniform(size=(n, 3)) > 0.2
    rows = [(x[i], p, Y[i, p]) for p in range(3) for i in range(n) if observed[i, p]]
    with open(path, "w") as fh:
        if long:
            fh.write("x,task,y\n" + "".join(f"{xi:.17g},{p},{yi:.17g}\n" for xi, p, yi in rows))
        else:
            fh.write("x,a,b,c\n")
            for i in range(n):
                cells = [f"{Y[i, p]:.17g}" if observed[i, p] else ("" if (i + p) % 2 else "NA") for p in range(3)]
                fh.write(f"{x[i]:.17g},{','.join(cells)}\n")
    return np.array(rows)


@pytest.mark.parametrize("long", [False, True])
def test_multi_output_data_are_read_as_long_rows(tmp_path, long):
    """targets = [a, b, c] (blank and NA cells unobserved) and target + output read the same long
    rows, output-major; the held-out split is over those (input, output) rows."""
    rows = write_outputs_csv(tmp_path / "outputs.csv", long=long)
    text = MULTI_TOML.replace('targets = ["a", "b", "c"]', 'target = "y"\noutput = "task"') if long else MULTI_TOML
    model, (X, y, X_test, y_test, offset, _), description, _, _, _ = cli.problem_from_toml(write_model(tmp_path, text))
    assert offset is None and X.shape[1] == X_test.shape[1] == 2
    n_test = int(round(0.2 * len(rows)))
    train, test = cli.split_rows(len(rows), n_test)
    np.testing.assert_array_equal(np.column_stack([X, y]), rows[train])
    np.testing.assert_array_equal(np.column_stack([X_test, y_test]), rows[test])
    assert (f"{len(rows)} of 120 entries observed" in description) != long
    assert ("output index 'task'" in description) == long


SPARSE_MULTI = MULTI_TOML.replace("[data]", """[inducing]
type = "Optimized"
init = {type = "KMeans", m = 8, seed = 0}
[inference]
type = "VFE"
[data]""")


@pytest.mark.parametrize("long", [False, True], ids=["named", "indices"])
def test_problem_options_fit_a_named_multi_output_model(tmp_path, capsys, long):
    """problem_from_toml's options are Model.fit keywords for a named multi-output file too (its
    output names come back on their own, the review's TypeError: fit(output_names=...)), and
    fit(**options) named by them is the posterior gpdsl run saves, whose report lists each
    output by name (index where the file gives none)."""
    write_outputs_csv(tmp_path / "outputs.csv", long=long)
    text = MULTI_TOML.replace("max_iter = 60", "max_iter = 3")
    if long:
        text = text.replace('targets = ["a", "b", "c"]', 'target = "y"\noutput = "task"')
    path = write_model(tmp_path, text)
    model, (X, y, X_test, _, offset, _), _, options, _, outputs = cli.problem_from_toml(path)
    assert "output_names" not in options and outputs == (None if long else ("a", "b", "c"))
    with pytest.warns(gd.ConvergenceWarning):                 # max_iter = 3, as the run's
        post = gd.multioutput.name_outputs(model.fit(X, y, offset=offset, **options), outputs)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    saved = gd.load(tmp_path / "out" / "posterior.nc")
    assert saved.output_names == post.output_names == outputs
    np.testing.assert_allclose(saved.predict(X_test)["y_mean"].values, post.predict(X_test)["y_mean"].values,
                               rtol=1e-12)
    block = capsys.readouterr().out.split("by output (RMSE, MNLPD)\n")[1].split("\n\n")[0]
    labels = ["0", "1", "2"] if long else ["a", "b", "c"]
    assert [line.split()[1] for line in block.splitlines()] == labels


@pytest.mark.parametrize("text", [MULTI_TOML, SPARSE_MULTI], ids=["Exact", "VFE"])
def test_multi_output_run_fits_reports_and_saves(tmp_path, capsys, text):
    """The run fits, reports rows, features and outputs, writes a posterior whose held-out
    scores are the printed ones; VFE's inducing inputs are shared by the outputs (8 inputs)."""
    rows = write_outputs_csv(tmp_path / "outputs.csv")
    out = tmp_path / "out"
    assert cli.main(["run", str(write_model(tmp_path, text)), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert ("inducing points  24 (input, output) pairs at 8 inputs" in stdout) == (text is SPARSE_MULTI)
    n_test = int(round(0.2 * len(rows)))
    assert f"{len(rows) - n_test} training / {n_test} held-out (input, output) rows, 1 feature(s), 3 outputs" in stdout
    assert "likelihood.variance" in stdout and "kernel.W" in stdout and "mean.1.constant" in stdout
    post = gd.load(out / "posterior.nc")
    _, (_, _, X_test, y_test, _, _), _, _, _, _ = cli.problem_from_toml(tmp_path / "model.toml")
    assert printed_metric(stdout, "MNLPD") == pytest.approx(-np.mean(post.log_predictive(X_test, y_test)), rel=1e-6)
    assert printed_metric(stdout, "RMSE") == pytest.approx(
        np.sqrt(np.mean((post.predict(X_test)["y_mean"].values - y_test) ** 2)), rel=1e-6)
    assert f"held-out ({n_test} (input, output) rows)" in stdout and "by output (RMSE, MNLPD)" in stdout
    for p, name in enumerate(["a", "b", "c"]):          # each output by its name, the targets' column
        rows_p = X_test[:, -1] == p
        line = next(line for line in stdout.splitlines() if line.strip().startswith(f"output {name}  "))
        rmse, mnlpd = (float(v) for v in line.split()[2:4])
        assert rmse == pytest.approx(np.sqrt(np.mean((post.predict(X_test[rows_p])["y_mean"].values
                                                      - y_test[rows_p]) ** 2)), rel=1e-5)
        assert mnlpd == pytest.approx(-np.mean(post.log_predictive(X_test[rows_p], y_test[rows_p])), rel=1e-5)
        assert line.endswith(f"({int(rows_p.sum())} rows)")


@pytest.mark.parametrize("edit, fragments", [
    (('targets = ["a", "b", "c"]', 'targets = ["a", "b"]'),
     ("[data]: targets names 2 columns but the kernel has 3 outputs",)),
    (('targets = ["a", "b", "c"]', 'targets = ["a", "b", "d"]'), ("column 'd' not in", "columns: x, a, b, c")),
    (('targets = ["a", "b", "c"]', 'targets = ["a", "b", "c"]\ntarget = "a"'), ("give target (one column) or targets",)),
    (('targets = ["a", "b", "c"]', 'target = "a"'), ("the kernel has 3 outputs: give targets = [3 columns",)),
    (('targets = ["a", "b", "c"]', 'targets = ["a", "b", "c"]\noutput = "x"'),
     ("output (a column of output indices, one observation a row) goes with target",)),
    (('targets = ["a", "b", "c"]', 'targets = ["a", "b", "c"]\noffset = "x"'), ("[data]: offset is one value a row",)),
    (('targets = ["a", "b", "c"]', 'targets = ["a", "b", "c"]\nfeatures = ["x", "a"]'),
     ("the target column 'a' is also listed in features",)),
    (('targets = ["a", "b", "c"]', 'targets = "a"'), ("[data]: targets must be a list of column names",)),
])
def test_multi_output_data_errors(tmp_path, capsys, edit, fragments):
    write_outputs_csv(tmp_path / "outputs.csv")
    path = write_model(tmp_path, MULTI_TOML.replace(*edit))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, str(path), *fragments)
    assert not (tmp_path / "o").exists()


def test_multi_output_keys_are_refused_for_a_model_of_one_output(tmp_path, capsys):
    write_outputs_csv(tmp_path / "outputs.csv")
    single = MULTI_TOML.replace('type = "ICM"\noutput_count = 3\nrank = 1\n[kernel.kernel]\n', "")
    single = single.split("[likelihood]")[0] + '[likelihood]\ntype = "Gaussian"\n[data]' + single.split("[data]")[1]
    for keys, fragment in (('targets = ["a", "b", "c"]', "[data]: targets is for a multi-output model"),
                           ('target = "a"\noutput = "b"', "[data]: output is for a multi-output model")):
        path = write_model(tmp_path, single.replace('targets = ["a", "b", "c"]', keys))
        assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
        assert_one_line_error(capsys, str(path), fragment, "this kernel has one output: give target alone")


def test_multi_output_long_rows_are_checked(tmp_path, capsys):
    """An output index out of range or not an integer, or an output without an observed entry."""
    write_outputs_csv(tmp_path / "outputs.csv")
    text = MULTI_TOML.replace('targets = ["a", "b", "c"]', 'target = "y"\noutput = "task"')
    for body, fragment in (("x,task,y\n0.1,0,1.0\n0.2,3,1.0\n0.3,1,0.5\n0.4,2,0.1\n", "got 3.0 at row 1"),
                           ("x,task,y\n0.1,0,1.0\n0.2,1.5,1.0\n0.3,1,0.5\n0.4,2,0.1\n", "got 1.5 at row 1")):
        (tmp_path / "outputs.csv").write_text(body)
        path = write_model(tmp_path, text)
        assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
        assert_one_line_error(capsys, str(path), "[data]", "output index", fragment)
    (tmp_path / "outputs.csv").write_text("x,a,b,c\n0.1,1,,NA\n0.2,2,3,\n")
    path = write_model(tmp_path, MULTI_TOML)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, str(path), "[data]", "[2] are all NaN")


def test_multi_output_long_rows_take_an_offset_column(tmp_path):
    """target + output + offset: the offset is split with the (input, output) rows."""
    rows = write_outputs_csv(tmp_path / "outputs.csv", long=True)
    with open(tmp_path / "outputs.csv", "w") as fh:
        fh.write("x,task,shift,y\n" + "".join(f"{x:.17g},{int(p)},{0.1 * i:.17g},{y:.17g}\n"
                                               for i, (x, p, y) in enumerate(rows)))
    text = MULTI_TOML.replace('targets = ["a", "b", "c"]', 'target = "y"\noutput = "task"\noffset = "shift"')
    _, (X, y, X_test, y_test, o_train, o_test), description, _, _, _ = cli.problem_from_toml(write_model(tmp_path, text))
    train, test = cli.split_rows(len(rows), int(round(0.2 * len(rows))))
    np.testing.assert_array_equal(o_train, 0.1 * train)
    np.testing.assert_array_equal(o_test, 0.1 * test)
    np.testing.assert_array_equal(X, rows[train, :2])
    assert "offset 'shift'" in description and "features x;" in description


def test_multi_output_sample_table_samples_the_long_rows(tmp_path, capsys):
    """[sample] with targets: NUTS over the per-output noise (3 values) and the base kernel, the
    (input, output) rows held out are scored by the saved run's log_predictive."""
    write_outputs_csv(tmp_path / "outputs.csv", n=12)
    text = MULTI_TOML.replace('rank = 1\n', 'rank = 1\nW = {fixed = [[0.5], [0.5], [-0.5]]}\nkappa = {fixed = [0.5, 0.5, 0.5]}\n')
    text = text.replace('type = "SquaredExponential"\n', 'type = "SquaredExponential"\n'
                        'lengthscale = {prior = "LogNormal", mu = 0.0, sigma = 1.0}\n'
                        'variance = {prior = "LogNormal", mu = 0.0, sigma = 1.0}\n')
    text = text.replace("variance = 0.05", 'variance = {prior = "LogNormal", mu = -2.0, sigma = 1.0}')
    text = text.split("[mean]")[0] + "[data]" + text.split("[data]")[1].split("[fit]")[0]
    text += "standardize = false\n[sample]\ndraws = 20\ntune = 20\nchains = 1\nseed = 2\n"
    path = write_model(tmp_path, text)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 0
    stdout = capsys.readouterr().out
    # The outputs are named by the targets' columns: the summary labels per-output entries by them.
    assert "likelihood.variance[c]" in stdout and "held             kernel.W, kernel.kappa" in stdout
    model, (X, y, X_test, y_test, _, _), _, _, _, _ = cli.problem_from_toml(path)
    back = gd.SampledPosterior.load(tmp_path / "o" / "posterior.nc", model)
    assert back.result.draws.shape == (1, 20, 5)
    assert f"MNLPD  {-np.mean(back.log_predictive(X_test, y_test)):.6g}" in stdout


def _png_size(path):
    """(width, height) in pixels from a PNG's IHDR chunk."""
    head = Path(path).read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


@needs_matplotlib
@pytest.mark.parametrize("binary", [False, True])
def test_plot_multi_output_of_one_feature_draws_a_panel_per_output(tmp_path, binary):
    """A multi-output model of one input feature gets one panel per output (the figure 2.2 in
    per output high at 100 dpi: 660 px for 3); with two features, the one scatter plot (450 px)."""
    rows = write_outputs_csv(tmp_path / "outputs.csv")
    X, y = rows[:, :2], rows[:, 2]
    if binary:
        y = (y > 0.2).astype(float)
        likelihood, inference = gd.likelihoods.Bernoulli(), gd.inference.EP()
    else:
        likelihood, inference = gd.likelihoods.OutputGaussian(3, variance=0.05), gd.inference.Exact()
    post = gd.Model(gd.kernels.ICM(gd.kernels.SquaredExponential(), 3), likelihood, inference=inference).fit(
        X, y, optimize=False)
    plot_fit(post, X[::2], y[::2], tmp_path / "panels.png", X_test=X[1::2], y_test=y[1::2])
    assert _png_size(tmp_path / "panels.png") == (900, 660)
    wide = np.column_stack([X[:, :1], np.cos(X[:, :1]), X[:, 1:]])
    post = gd.Model(gd.kernels.ICM(gd.kernels.SquaredExponential(), 3), likelihood, inference=inference).fit(
        wide, y, optimize=False)
    plot_fit(post, wide, y, tmp_path / "scatter.png")
    assert _png_size(tmp_path / "scatter.png") == (900, 450)


def _named_outputs_csv(path, rows, names=("DAX", "SMI", "CAC")):
    with open(path, "w") as fh:
        fh.write("x,index,y\n" + "".join(f"{x:.17g},{names[int(p)]},{y:.17g}\n" for x, p, y in rows))


def test_multi_output_output_column_of_names_in_the_order_outputs_gives(tmp_path):
    """output = a column of names with outputs = [their order]: the same long rows as the indices."""
    rows = write_outputs_csv(tmp_path / "outputs.csv", long=True)
    _named_outputs_csv(tmp_path / "outputs.csv", rows)
    text = MULTI_TOML.replace('targets = ["a", "b", "c"]', 'target = "y"\noutput = "index"\noutputs = ["DAX", "SMI", "CAC"]')
    _, (X, y, X_test, y_test, _, _), description, _, _, _ = cli.problem_from_toml(write_model(tmp_path, text))
    train, test = cli.split_rows(len(rows), int(round(0.2 * len(rows))))
    np.testing.assert_array_equal(np.column_stack([X, y]), rows[train])
    np.testing.assert_array_equal(np.column_stack([X_test, y_test]), rows[test])
    assert "outputs DAX = 0, SMI = 1, CAC = 2 from 'index'" in description


@pytest.mark.parametrize("keys, fragments", [
    ('target = "y"\noutput = "index"\noutputs = ["DAX", "SMI"]', ("outputs names 2 outputs but the kernel has 3",)),
    ('target = "y"\noutput = "index"\noutputs = ["DAX", "SMI", "FTSE"]',
     ("the output column 'index' holds 'CAC', which outputs does not name ('DAX', 'SMI', 'FTSE')",)),
    ('target = "y"\noutput = "index"\noutputs = ["DAX", "DAX", "CAC"]', ("outputs must be a list of distinct names",)),
    ('targets = ["a", "b", "c"]\noutputs = ["DAX", "SMI", "CAC"]', ("outputs names the labels of the output column",)),
    ('target = "y"\noutput = "task"\noutputs = ["DAX", "SMI", "CAC"]', ("output column 'task' not in",)),
    ('target = "y"\noutput = "task"\noutputs = ["DAX", "SMI", "CAC"]',
     ("outputs names text labels, but the output column 'task' holds numbers",)),
])
def test_multi_output_output_names_errors(tmp_path, capsys, keys, fragments):
    rows = write_outputs_csv(tmp_path / "outputs.csv", long=True)
    if "holds numbers" not in fragments[0]:          # the file of indices, else of names
        _named_outputs_csv(tmp_path / "outputs.csv", rows)
    path = write_model(tmp_path, MULTI_TOML.replace('targets = ["a", "b", "c"]', keys))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, str(path), *fragments)


# -- a likelihood per output (PerOutput) ---------------------------------------------------------
MIXED_TOML = """\
[kernel]
type = "ICM"
output_count = 2
rank = 1
[kernel.kernel]
type = "SquaredExponential"

[likelihood]
type = "PerOutput"
likelihoods = [{type = "Gaussian", variance = 0.05}, {type = "Bernoulli"}]

[inference]
type = "Laplace"

[data]
path = "mixed.csv"
targets = ["level", "label"]
test_fraction = 0.25

[fit]
max_iter = 60
"""


def write_mixed_csv(path, n=40):
    """A real output (``level``) and a binary one (``label``, 0/1) of one latent sine; every fifth
    ``level`` blank, every fifth ``label`` NA.  Returns the table (NaN where unobserved)."""
    rng = np.random.default_rng(1)
    x = np.linspace(-2.0, 2.0, n)
    f = np.sin(2.0 * x)
    level = np.where(np.arange(n) % 5 == 1, np.nan, f + 0.1 * rng.standard_normal(n))
    label = np.where(np.arange(n) % 5 == 3, np.nan, (f + 0.8 * rng.standard_normal(n) > 0).astype(float))
    with open(path, "w") as fh:
        fh.write("x,level,label\n")
        for xi, a, b in zip(x, level, label):
            fh.write(f"{xi:.17g},{'' if np.isnan(a) else f'{a:.17g}'},{'NA' if np.isnan(b) else f'{b:g}'}\n")
    return np.column_stack([x, level, label])


def test_per_output_targets_are_each_checked_by_their_output(tmp_path, capsys, monkeypatch):
    """Each row of a PerOutput model is checked by its output's part before any fit: real levels
    (not 0/1) pass on the Gaussian output; a label 2 on the Bernoulli output is refused, naming it."""
    table = write_mixed_csv(tmp_path / "mixed.csv")
    path = write_model(tmp_path, MIXED_TOML)
    model, (X, y, X_test, y_test, _, _), _, _, _, _ = cli.problem_from_toml(path)
    rows = np.vstack([X, X_test])
    assert rows.shape[0] == np.sum(~np.isnan(table[:, 1:]))
    assert np.all(np.isin(np.concatenate([y, y_test])[np.concatenate([X, X_test])[:, -1] == 1], [0.0, 1.0]))
    lines = (tmp_path / "mixed.csv").read_text().splitlines()
    lines[6] = lines[6].rsplit(",", 1)[0] + ",2"          # row 5's label (observed: 5 % 5 != 3)
    (tmp_path / "mixed.csv").write_text("\n".join(lines) + "\n")

    @functools.wraps(gd.Model.fit)
    def fit(*args, **kwargs):
        raise AssertionError("the model was fitted before the label was refused")
    monkeypatch.setattr(gd.Model, "fit", fit)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, str(path), "target column 'targets'", "Bernoulli: y must be binary",
                          "[0.0, 1.0, 2.0]")
    assert not (tmp_path / "o").exists()


def test_per_output_run_reports_each_output_in_its_own_kind(tmp_path, capsys):
    """A run of PerOutput(Gaussian, Bernoulli) under Laplace: the pooled line is the mean of
    -log p(y* | x*) over every held-out row; output 0's RMSE and MNLPD, output 1's error rate,
    mean log predictive and Brier score, each recomputed from the saved posterior's predict and
    log_predictive on that output's rows."""
    write_mixed_csv(tmp_path / "mixed.csv")
    path = write_model(tmp_path, MIXED_TOML)
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    _, (_, _, X_test, y_test, _, _), _, _, _, _ = cli.problem_from_toml(path)
    post = gd.load(out / "posterior.nc")
    log_pred = post.log_predictive(X_test, y_test)
    assert printed_metric(stdout, "MNLPD") == pytest.approx(-np.mean(log_pred), rel=1e-5)     # 6 digits printed
    assert "over every row, each by its output's likelihood" in stdout
    assert "by output (each in its own kind's scores)" in stdout
    block = stdout.split("by output (each in its own kind's scores)\n")[1].split("\n\n")[0]
    parts = block.split("    output ")[1:]
    assert [part.splitlines()[0] for part in parts] == [
        f"{name}  ({kind}, {int(np.sum(X_test[:, -1] == p))} rows)"
        for p, name, kind in ((0, "level", "gaussian"), (1, "label", "binary"))]

    def printed(part, name):
        line = next(line.strip() for line in part.splitlines()[1:] if line.strip().startswith(name + " "))
        return float(line[len(name):].split()[0])

    level, label = X_test[:, -1] == 0, X_test[:, -1] == 1
    assert level.any() and label.any()
    pred = post.predict(X_test)
    assert printed(parts[0], "RMSE") == pytest.approx(
        np.sqrt(np.mean((pred["y_mean"].values[level] - y_test[level]) ** 2)), rel=1e-5)
    assert printed(parts[0], "MNLPD") == pytest.approx(-np.mean(log_pred[level]), rel=1e-5)
    p = pred["p"].values[label]
    assert printed(parts[1], "error rate") == pytest.approx(np.mean((p > 0.5) != (y_test[label] == 1)), abs=1e-12)
    assert printed(parts[1], "mean log predictive") == pytest.approx(np.mean(log_pred[label]), rel=1e-5)
    assert printed(parts[1], "Brier score") == pytest.approx(np.mean((p - y_test[label]) ** 2), rel=1e-5)
    # The label rows' log predictive is log p(y* | x*) = log p or log(1 - p).
    np.testing.assert_allclose(np.exp(log_pred[label]), np.where(y_test[label] == 1, p, 1 - p), rtol=1e-10)
    assert (out / "fit.png").is_file() == HAS_MATPLOTLIB


def test_target_kind_of_a_likelihood_per_output_is_its_rows():
    """Parts of several kinds have no one kind (None, "mixed" scores); one output's rows have its part's."""
    from gpdsl.inputs import target_kind
    from gpdsl.run_report import metrics_kind

    lik = gd.likelihoods.PerOutput((gd.likelihoods.Gaussian(), gd.likelihoods.Bernoulli(), gd.likelihoods.Poisson()))
    X = np.array([[0.1, 0.0], [0.2, 1.0], [0.3, 2.0], [0.4, 1.0]])
    assert target_kind(lik) is None and metrics_kind(lik) == "mixed" and metrics_kind(lik.for_rows(X)) == "mixed"
    assert [metrics_kind(lik.for_rows(X[X[:, -1] == p])) for p in range(3)] == ["gaussian", "binary", "count"]
    assert target_kind(gd.likelihoods.PerOutput((gd.likelihoods.Gaussian(), gd.likelihoods.Gaussian(0.3)))) == "real"


@pytest.mark.parametrize("inference", ["EP", "QP"])
def test_per_output_of_several_families_runs_under_ep_and_refuses_a_part_without_sites(tmp_path, capsys, inference):
    """EP and QP run PerOutput(Gaussian, Bernoulli) from a model file (each row's site code its
    part's, gpdsl/_jit/mixed_sites.py) and report its held-out metrics; a part without EP/QP
    tilted moments (a heteroscedastic Gaussian) is refused in one line naming the part, before
    reading the data."""
    write_mixed_csv(tmp_path / "mixed.csv")
    path = write_model(tmp_path, MIXED_TOML.replace('type = "Laplace"', f'type = "{inference}"'))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 0
    report = capsys.readouterr().out
    assert "mean log predictive" in report and "error rate" in report
    refused_toml = MIXED_TOML.replace('type = "Laplace"', f'type = "{inference}"').replace(
        '{type = "Gaussian", variance = 0.05}', '{type = "HeteroscedasticGaussian", degree = 1}')
    path = write_model(tmp_path, refused_toml)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o2")]) == 2
    assert_one_line_error(capsys, str(path), f"Model: {inference} (which needs 'site_model'): ",
                          "part 0, HeteroscedasticGaussian(degree=1), has no site model", "use Laplace, VGP or SVGP")


@needs_matplotlib
def test_plot_per_output_draws_each_output_in_its_own_kind(tmp_path, monkeypatch):
    """PerOutput(Gaussian, Bernoulli, Poisson) of one feature: output 0's panel draws y's
    predictive mean, output 1's p(y* = 1 | x), output 2's the mean count, each equal to
    predict's column at the grid, with that output's training rows (labels at 0/1); with two
    features, a scatter panel per output (predicted against observed, p against the label)."""
    import matplotlib.figure

    drawn, save = [], matplotlib.figure.Figure.savefig

    def savefig(fig, *args, **kwargs):
        drawn.append(fig)
        return save(fig, *args, **kwargs)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    rng = np.random.default_rng(2)
    x = np.tile(np.linspace(-2.0, 2.0, 15), 3)
    index = np.repeat([0.0, 1.0, 2.0], 15)
    f = np.sin(2.0 * x)
    y = np.where(index == 0, f + 0.1 * rng.standard_normal(45), np.where(
        index == 1, (f + 0.5 * rng.standard_normal(45) > 0).astype(float), rng.poisson(np.exp(f))))
    L = gd.likelihoods
    likelihood = L.PerOutput((L.Gaussian(0.05), L.Bernoulli(), L.Poisson(link="log")))
    model = gd.Model(gd.kernels.ICM(gd.kernels.SquaredExponential(), 3), likelihood, inference=gd.inference.Laplace())
    X = np.column_stack([x, index])
    post = model.fit(X, y, optimize=False)
    plot_fit(post, X, y, tmp_path / "panels.png")
    assert _png_size(tmp_path / "panels.png") == (900, 660)
    axes = [ax for ax in drawn[-1].axes]
    grid = axes[0].lines[0].get_xdata()
    pred = post.predict(grid[:, None])
    for p, name in ((0, "y_mean"), (1, "p"), (2, "y_mean")):
        np.testing.assert_allclose(axes[p].lines[0].get_ydata(), pred[name].values[:, p], rtol=1e-12)
        points = next(line for line in axes[p].lines if line.get_label() == "training rows")
        np.testing.assert_array_equal(points.get_xdata(), x[index == p])
        np.testing.assert_array_equal(points.get_ydata(), y[index == p])
    assert axes[1].get_ylim() == (-0.08, 1.08) and np.all(np.isfinite(pred["p"].values[:, 1]))

    wide = np.column_stack([x, np.cos(x), index])
    post = model.fit(wide, y, optimize=False)
    plot_fit(post, wide, y, tmp_path / "scatter.png")
    assert _png_size(tmp_path / "scatter.png") == (900, 960)
    axes = drawn[-1].axes
    assert [ax.get_title() for ax in axes] == ["output 0", "output 1", "output 2"]
    assert axes[1].get_xlabel() == "observed label y" and axes[2].get_xlabel() == "observed y"
    p = post.predict(wide[index == 1])["p"].values
    np.testing.assert_allclose(np.sort(np.concatenate([c.get_offsets()[:, 1] for c in axes[1].collections])),
                               np.sort(p), rtol=1e-12)
