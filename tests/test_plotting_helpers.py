"""The figure helpers of gpdsl.plotting that the tutorials use: new_figure and show_figure.

new_figure gives a Figure on the Agg canvas, or None after the one-line note when matplotlib is
missing; show_figure writes a PNG of the requested size, prints "wrote <path>", and displays
the image only under an IPython kernel.  The PNG's size is read from its IHDR chunk (PNG
specification, section 11.2.2), independently of matplotlib.
"""
import importlib.util
import os
import struct
import subprocess
import sys
import types
from pathlib import Path

import pytest

from gpdsl.plotting import FIGURE_SKIPPED, new_figure, show_figure

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
needs_matplotlib = pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib not installed")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path):
    """(width, height) in pixels from a PNG file's IHDR chunk, which follows the signature."""
    head = Path(path).read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE, "not a PNG file"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def hide_module(monkeypatch, name):
    """Make ``import name`` (and of its submodules already imported) raise ImportError."""
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setitem(sys.modules, name, None)


@needs_matplotlib
def test_new_figure_is_on_the_agg_canvas():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = new_figure(5, 2.5)
    assert isinstance(fig.canvas, FigureCanvasAgg)
    assert tuple(fig.get_size_inches()) == (5.0, 2.5)


@needs_matplotlib
def test_show_figure_writes_a_png_and_says_so_without_ipykernel(tmp_path, monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)   # a plain script, whatever ran before
    fig = new_figure(5, 2.5)
    fig.subplots().plot([0, 1], [1, 0])
    path = tmp_path / "line.png"
    assert show_figure(fig, path) is path
    assert png_size(path) == (5 * 72, round(2.5 * 72))  # inches times the default 72 dpi
    assert capsys.readouterr().out == f"wrote {path}\n"
    show_figure(fig, tmp_path / "fine.png", dpi=100)
    assert png_size(tmp_path / "fine.png") == (500, 250)


@needs_matplotlib
def test_show_figure_displays_the_png_under_ipykernel(tmp_path, monkeypatch, capsys):
    # Stand-ins for a running kernel and IPython.display, which record what is displayed.
    shown = []
    display_module = types.ModuleType("IPython.display")
    display_module.Image = lambda filename: ("image", filename)
    display_module.display = shown.append
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setitem(sys.modules, "IPython.display", display_module)
    path = tmp_path / "inline.png"
    show_figure(new_figure(2, 2), str(path))
    assert shown == [("image", str(path))]
    assert png_size(path) == (144, 144)
    assert capsys.readouterr().out == f"wrote {path}\n"


def test_new_figure_without_matplotlib_prints_the_note_and_returns_none(monkeypatch, capsys):
    hide_module(monkeypatch, "matplotlib")
    assert new_figure(4, 3) is None
    assert capsys.readouterr().out == "matplotlib is not installed: figure skipped\n"
    assert FIGURE_SKIPPED == "matplotlib is not installed: figure skipped"


def test_importing_the_helpers_leaves_matplotlib_unloaded():
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root}
    code = ("import sys\nfrom gpdsl.plotting import new_figure, show_figure\n"
            "assert 'matplotlib' not in sys.modules, 'gpdsl.plotting imported matplotlib'")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
