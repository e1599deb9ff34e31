"""The README's example runs as written, and its result is what its comments say."""
import re
from pathlib import Path

import numpy as np
import pytest

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


ROOT = README.parent
# The Markdown documents whose links are checked (each relative link's file, and its #anchor).
DOCUMENTS = ["README.md", "tutorials/README.md", "docs/guide.md", "benchmarks/README.md", "tables/README.md"]
NUMBER_WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()


def _outside_code(text):
    """The lines of a Markdown text outside its fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _anchors(path):
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for line in _outside_code(path.read_text()):
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            title = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading.group(1)).strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def _links(path):
    """The relative link targets ``(file, anchor)`` of a Markdown file (web addresses left out)."""
    found = []
    for line in _outside_code(path.read_text()):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if not re.match(r"[a-z]+:", target):
                file, _, anchor = target.partition("#")
                found.append((file, anchor))
    return found


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_link_target_exists(document):
    """Every relative link of the README, the tutorials' list, the guide and the benchmark and table
    READMEs names a file that exists, and its #anchor a heading of that file."""
    path = ROOT / document
    broken = []
    for file, anchor in _links(path):
        target = (path.parent / file).resolve() if file else path
        if not target.exists():
            broken.append(f"{file}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{file}#{anchor}: no such heading")
    assert not broken, f"{document}: {broken}"


def test_readme_refers_to_its_own_sections():
    """A section the README names as "..." above or below is one of its headings (the "Threads"
    it named was the guide's)."""
    text = README.read_text()
    titles = {re.sub(r"^#+\s*", "", line).strip() for line in _outside_code(text) if line.startswith("#")}
    named = re.findall(r'"([^"]+)"\s+(?:above|below)', text)
    assert [name for name in named if name not in titles] == []


def test_every_tutorial_is_listed():
    """The tutorials' README lists every tutorial script, in order, in its list (before its first
    section), each with its notebook; the README counts them."""
    scripts = sorted(p.name for p in (ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
    listing = (ROOT / "tutorials" / "README.md").read_text().split("\n## ")[0]
    listed = re.findall(r"^\* \[`([^`]+\.py)`\]\(\1\) \(\[notebook\]\(([^)]+)\)\)", listing, re.M)
    assert [script for script, _ in listed] == scripts
    assert all(notebook == script[:-3] + ".ipynb" for script, notebook in listed)
    count = re.search(r"\[`tutorials/`\]\(tutorials/README.md\) holds (\w+) worked examples", README.read_text())
    assert count and count.group(1) == NUMBER_WORDS[len(scripts)]
