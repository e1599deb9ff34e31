import json
from pathlib import Path

import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def shared_path(*parts):
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available (../shared is beside the checkout in our workplace)")
    return path


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
