import json
import os
from pathlib import Path

# One BLAS thread for the whole suite, set before NumPy loads OpenBLAS: the tests run many small
# products, where BLAS threads only contend; on a 2-core machine with other load the Pólya-Gamma
# fits ran 50x slower with the default thread count.  An explicit setting in the environment wins.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TESTS_DATA = Path(__file__).resolve().parent / "data"


def shared_path(*parts):
    """A file or folder of ../shared, looked up first in tests/data (which holds a copy of
    ../shared/oracles: reference numbers and Ripley's synth, 1.5 MB), so that the oracle tests
    run on a fresh clone; anything else of ../shared skips the test where it is absent."""
    for root in (TESTS_DATA, SHARED):
        path = root.joinpath(*parts)
        if path.exists():
            return path
    pytest.skip(f"{SHARED.joinpath(*parts)} not available (../shared is beside the checkout in our workplace)")


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
