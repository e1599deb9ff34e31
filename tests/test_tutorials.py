"""The tutorials in tutorials/ run top to bottom, and write only to their own temporary directory.

Each tutorial is run with ``runpy.run_path`` from an empty working directory, with Python's
temporary directory pointed at a pytest tmp_path, so a file written anywhere else, or a temporary
directory left behind, is caught. The plotting cells need matplotlib. The tutorials skip them
themselves when it is missing, and the second test checks that path by hiding matplotlib.
"""
import importlib.util
import runpy
import sys
import tempfile
from pathlib import Path

import pytest

TUTORIALS = Path(__file__).resolve().parents[1] / "tutorials"
SCRIPTS = ["01_sparse_regression.py", "02_heteroscedastic_and_model_files.py",
           "03_classification_pgpr_and_greedy.py"]
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def run_tutorial(name, tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    scratch = tmp_path / "tmp"
    cwd.mkdir()
    scratch.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.delenv("GPDSL_TUTORIAL_KEEP", raising=False)
    namespace = runpy.run_path(str(TUTORIALS / name), run_name="__main__")   # one BLAS thread: conftest.py
    assert list(cwd.iterdir()) == [], "a tutorial wrote into the working directory"
    assert list(scratch.iterdir()) == [], "a tutorial left its temporary directory behind"
    return namespace


def check_results(name, ns):
    if name.startswith("01"):
        assert ns["vfe"].log_evidence <= ns["exact"].log_evidence
        assert ns["gap"] >= 0.0
        assert set(ns["preds"]["model"].values) == {"Exact", "VFE", "FITC"}
        assert ns["vfe_opt"].model.inducing.optimize
        assert "kernel.lengthscale" in ns["map_post"].priors
        assert ns["map_post"].fixed == ["likelihood.variance"]
        assert list(ns["comparison"].index) and set(ns["comparison"].index) == {"Exact", "VFE"}
    elif name.startswith("02"):
        scores = ns["scores"]
        assert scores["log-quadratic"]["MNLPD"] < scores["homoscedastic"]["MNLPD"]
        assert ns["post"].values["likelihood.coefficients"].shape == (3,)


@pytest.mark.parametrize("name", SCRIPTS)
def test_tutorial_runs(name, tmp_path, monkeypatch, capsys):
    ns = run_tutorial(name, tmp_path, monkeypatch)
    check_results(name, ns)
    out = capsys.readouterr().out
    assert "finished in" in out
    if HAS_MATPLOTLIB:
        assert any(line.startswith("wrote ") and line.endswith(".png") for line in out.splitlines())


@pytest.mark.parametrize("name", SCRIPTS)
def test_tutorial_runs_without_matplotlib(name, tmp_path, monkeypatch, capsys):
    # Hide matplotlib (and any submodule already imported) so that importing it fails.
    for module in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    ns = run_tutorial(name, tmp_path, monkeypatch)
    check_results(name, ns)
    out = capsys.readouterr().out
    assert "matplotlib is not installed: figure skipped" in out
    assert not any(line.startswith("wrote ") and line.endswith(".png") for line in out.splitlines())
