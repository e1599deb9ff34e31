"""``gpdsl run`` checks its ``[fit] subsample`` and output names before fitting (issue 25 item 8).

At 126e8de ``[fit] subsample`` larger than the data was accepted silently (the fit used all
rows), and ``[output] plot = "x.nc"`` (or ``.toml``, ``.csv``, a NUL in a name) raised a traceback
after the fit, with the posterior already written.  Each bad value must now give the one-line
error (exit status 2) before any fitting, and create nothing.
"""
import functools
import importlib.util
import os

import pytest

import gpdsl as gd
from gpdsl import cli

from test_cli import MODEL_TOML, assert_one_line_error, write_model, write_sine_csv

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None

# write_sine_csv writes 60 rows; MODEL_TOML holds 25 % out: 45 training rows.
N_ROWS, N_TRAIN, N_TEST = 60, 45, 15


@pytest.fixture
def no_fit(monkeypatch):
    """Make any fit fail the test: every check here must come before it."""
    # wraps keeps Model.fit's signature, from which the CLI reads the [fit] keys it accepts.
    @functools.wraps(gd.Model.fit)
    def fit(*args, **kwargs):
        raise AssertionError("the model was fitted before the bad input was refused")

    monkeypatch.setattr(gd.Model, "fit", fit)


def _model(tmp_path, text):
    write_sine_csv(tmp_path / "sine.csv", n=N_ROWS)
    return write_model(tmp_path, text)


def _with_fit_option(line):
    return MODEL_TOML.replace("seed = 3\n", f"seed = 3\n{line}\n")


def _with_output(key, value):
    default = {"posterior": 'posterior = "sine_posterior.nc"', "plot": 'plot = "sine.png"'}[key]
    return MODEL_TOML.replace(default, f"{key} = {value}")


# -- [fit] subsample (item 8a) ----------------------------------------------------------------------
@pytest.mark.parametrize("n", [N_TRAIN, N_TRAIN + 1, N_ROWS, 1000])
def test_subsample_not_below_the_training_rows_is_refused(tmp_path, capsys, no_fit, n):
    path = _model(tmp_path, _with_fit_option(f"subsample = {n}"))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, str(path), f"[fit] subsample = {n}", f"N = {N_TRAIN} training rows",
                          f"{N_ROWS} rows less {N_TEST} held out")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "true", '"10"'])
def test_subsample_must_be_a_positive_integer(tmp_path, capsys, no_fit, value):
    path = _model(tmp_path, _with_fit_option(f"subsample = {value}"))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "[fit] subsample must be a positive integer")
    assert not (tmp_path / "o").exists()


def test_subsample_below_the_training_rows_runs(tmp_path, capsys):
    path = _model(tmp_path, _with_fit_option("subsample = 30"))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 0
    assert gd.load(tmp_path / "o" / "sine_posterior.nc").subsample["rows"] == 30


def test_refine_in_a_model_file_refines_the_subsample_fit_on_all_rows(tmp_path, capsys):
    """``[fit] refine = true`` reaches Model.fit (its keyword): the posterior written is the
    refined fit's, stopped by the full gradient's tolerance test and converged."""
    path = _model(tmp_path, _with_fit_option("subsample = 30\nrefine = true"))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 0
    post = gd.load(tmp_path / "o" / "sine_posterior.nc")
    assert post.subsample["rows"] == 30 and post.converged
    assert post.diagnostics.stop_reason == "tolerance" and post.diagnostics.grad_tol == 0.1
    assert post.diagnostics.grad_norm <= 0.1


# -- output names (item 8b) ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ['"x.nc"', '"x.toml"', '"x.csv"', '"x"', '"x.png.txt"', '"x.pgf"'])
def test_plot_name_needs_an_image_extension(tmp_path, capsys, no_fit, name):
    path = _model(tmp_path, _with_output("plot", name))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "[output]: plot must end in an image format's extension", name.strip('"'))
    assert not (tmp_path / "o").exists()


def test_plot_x_nc_is_refused_before_the_posterior_is_written(tmp_path, capsys):
    """The reproduction as reported, with the real fit: no traceback and nothing written."""
    path = _model(tmp_path, _with_output("plot", '"x.nc"'))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "[output]: plot", "'x.nc'")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("key, value", [("plot", '"a\\u0000.png"'), ("posterior", '"a\\u0000.nc"')])
def test_nul_in_an_output_name_is_refused(tmp_path, capsys, no_fit, key, value):
    path = _model(tmp_path, _with_output(key, value))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, f"[output]: {key} must not contain a NUL character", "\\x00")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("key, ext, longest", [("plot", ".png", 255), ("posterior", ".nc", 237)])
def test_an_output_name_too_long_for_the_file_system_is_refused(tmp_path, capsys, no_fit, key, ext, longest):
    """posterior's limit leaves room for save's temporary name, ``.<name>.<12 hex>.tmp``."""
    name = "p" * (longest + 1 - len(ext)) + ext
    path = _model(tmp_path, _with_output(key, f'"{name}"'))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, f"[output]: {key} must be at most {longest} bytes long", str(longest + 1))


def test_out_that_is_a_file_is_refused_before_fitting(tmp_path, capsys, no_fit):
    path = _model(tmp_path, MODEL_TOML)
    (tmp_path / "afile").write_text("keep me")
    for out, fragment in ((tmp_path / "afile", "exists and is not a directory"),
                          (tmp_path / "afile" / "sub", "is not a directory")):
        assert cli.main(["run", str(path), "--out", str(out)]) == 2
        assert_one_line_error(capsys, f"--out {out}", fragment)
    assert (tmp_path / "afile").read_text() == "keep me"
    # The default model (no model file) is checked the same way.
    assert cli.main(["run", "--out", str(tmp_path / "afile")]) == 2
    assert_one_line_error(capsys, "exists and is not a directory")


def test_an_output_path_that_is_a_directory_is_refused_before_fitting(tmp_path, capsys, no_fit):
    path = _model(tmp_path, MODEL_TOML)
    (tmp_path / "o" / "sine.png").mkdir(parents=True)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, "[output]: plot", "is a directory")
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["sine.png"]


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib not installed")
def test_another_image_format_is_written_in_that_format(tmp_path, capsys):
    path = _model(tmp_path, _with_output("plot", '"fit.PDF"'))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "fit.PDF").read_bytes()[:5] == b"%PDF-"


# -- links inside --out (issue 45, item 7) ------------------------------------------------------------
@pytest.mark.parametrize("key, name", [("posterior", "sine_posterior.nc"), ("plot", "sine.png")])
@pytest.mark.parametrize("existing", [True, False])
def test_a_symbolic_link_at_an_output_name_is_refused_before_fitting(tmp_path, capsys, no_fit, key, name, existing):
    """A link planted in --out at an output's name was followed: the file it named outside the
    folder was overwritten (or created)."""
    path = _model(tmp_path, MODEL_TOML)
    outside = tmp_path / "elsewhere" / "target"
    outside.parent.mkdir()
    if existing:
        outside.write_text("keep me")
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / name).symlink_to(outside)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, f"[output]: {key} {tmp_path / 'o' / name} is a symbolic link",
                          "writes no file through a link")
    assert sorted(p.name for p in outside.parent.iterdir()) == (["target"] if existing else [])
    if existing:
        assert outside.read_text() == "keep me"


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib not installed")
def test_a_link_made_during_the_fit_is_replaced_not_written_through(tmp_path, capsys, monkeypatch):
    """A symbolic or hard link that appears at an output's name after the checks (during the
    fit) is replaced by the new file: nothing outside --out is written."""
    path = _model(tmp_path, MODEL_TOML)
    out = tmp_path / "o"
    outside = {"sine_posterior.nc": tmp_path / "outside.nc", "sine.png": tmp_path / "outside.png"}
    for file in outside.values():
        file.write_text("keep me")
    fit = gd.Model.fit

    @functools.wraps(fit)
    def fit_then_link(*args, **kwargs):
        posterior = fit(*args, **kwargs)
        out.mkdir()
        (out / "sine_posterior.nc").symlink_to(outside["sine_posterior.nc"])
        os.link(outside["sine.png"], out / "sine.png")
        return posterior

    monkeypatch.setattr(gd.Model, "fit", fit_then_link)
    assert cli.main(["run", str(path), "--out", str(out)]) == 0
    for name, file in outside.items():
        assert file.read_text() == "keep me"
        assert not (out / name).is_symlink() and os.stat(out / name).st_nlink == 1
    assert isinstance(gd.load(out / "sine_posterior.nc"), gd.Posterior)
    assert (out / "sine.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
