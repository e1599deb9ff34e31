"""The README's example runs as written, and its result is what its comments say."""
import re
from pathlib import Path

import numpy as np

import gpdsl as gd

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(tmp_path, monkeypatch):
    code = re.search(r"## Example\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    monkeypatch.chdir(tmp_path)                 # the example saves posterior.nc in the working directory
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    post, pred = scope["post"], scope["pred"]
    assert post.converged and post.state.Z.shape == (20, 2)
    p = pred["p"].values
    assert p.shape == (5,) and np.all((p > 0) & (p < 1))
    # the labels of the first five banana points are predicted with p(y = +1) on their side of 1/2
    assert np.mean((p > 0.5) == (scope["y"][:5] > 0)) >= 0.8
    again = gd.load(tmp_path / "posterior.nc")
    np.testing.assert_allclose(again.predict(scope["X"][:5])["p"].values, p, rtol=1e-12)
    assert scope["idata"].posterior.sizes["draw"] == 200
