"""Tests for gpdsl.datasets: generators, data-directory resolution and loaders."""

from pathlib import Path

import numpy as np
import pytest

from gpdsl import datasets
from conftest import data_root, shared_path

# The data sets: GPDSL_DATA, else shared/data beside the repository.
DATA = data_root()

needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="needs gpdsl's data sets: set GPDSL_DATA to the "
                                "directory that holds them (shared/data; docs/guide.md, 'Datasets')")

# (generator, kwargs, expected number of input dimensions, is classification)
GENERATORS = [
    (datasets.twonorm, {"n": 37}, 20, True),
    (datasets.twonorm, {"n": 37, "dim": 3}, 3, True),
    (datasets.ringnorm, {"n": 37}, 20, True),
    (datasets.xor, {"n": 37}, 2, True),
    (datasets.banana, {"n": 37}, 2, True),
    (datasets.platform, {"n": 37}, 1, True),
    (datasets.snelson_like, {"n": 37}, 1, False),
    (datasets.sine, {"n": 37}, 1, False),
]
GEN_IDS = [f"{g.__name__}-{kw}" for g, kw, _, _ in GENERATORS]


@pytest.mark.parametrize("gen, kwargs, dim, classification", GENERATORS, ids=GEN_IDS)
def test_generator_shapes_dtypes_labels(gen, kwargs, dim, classification):
    X, y = gen(**kwargs)
    assert X.shape == (kwargs["n"], dim) and y.shape == (kwargs["n"],)
    assert X.dtype == np.float64 and y.dtype == np.float64
    assert np.all(np.isfinite(X)) and np.all(np.isfinite(y))
    if classification:
        assert set(np.unique(y)) <= {-1.0, 1.0}


@pytest.mark.parametrize(
    "gen", [datasets.twonorm, datasets.ringnorm, datasets.xor, datasets.banana, datasets.platform]
)
def test_classification_defaults_have_both_classes(gen):
    _, y = gen()
    assert set(np.unique(y)) == {-1.0, 1.0}


@pytest.mark.parametrize("gen, kwargs, dim, classification", GENERATORS, ids=GEN_IDS)
def test_generator_determinism_by_seed(gen, kwargs, dim, classification):
    X1, y1 = gen(**kwargs, seed=3)
    X2, y2 = gen(**kwargs, seed=3)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    X3, y3 = gen(**kwargs, seed=4)
    if gen is datasets.sine:
        # sine's inputs are a fixed grid; only the noise depends on the seed.
        np.testing.assert_array_equal(X1, X3)
        assert not np.array_equal(y1, y3)
    else:
        assert not np.array_equal(X1, X3)


def test_twonorm_class_means():
    dim = 20
    X, y = datasets.twonorm(n=20000, dim=dim, seed=1)
    a = 2.0 / np.sqrt(dim)
    # About 10^4 points per class x 20 coordinates: the mean over all coordinates
    # of a class has sd ~ 1/sqrt(2e5) ~ 0.002; per-coordinate means ~ 0.01.
    for label, sign in ((1.0, 1.0), (-1.0, -1.0)):
        m = X[y == label].mean(axis=0)
        assert abs(m.mean() - sign * a) < 0.01
        np.testing.assert_allclose(m, sign * a, atol=0.05)
    assert abs(np.mean(y == 1.0) - 0.5) < 0.02


def test_ringnorm_class_variances_and_means():
    dim = 20
    X, y = datasets.ringnorm(n=20000, dim=dim, seed=1)
    a = 1.0 / np.sqrt(dim)
    wide, narrow = X[y == 1.0], X[y == -1.0]
    # Sample variance from ~1e4 points has relative sd ~ sqrt(2/1e4) ~ 1.4%;
    # averaged over 20 coordinates, 5% is a very loose bound.
    assert abs(wide.var(axis=0).mean() - 4.0) < 0.2
    assert abs(narrow.var(axis=0).mean() - 1.0) < 0.05
    assert abs(wide.mean()) < 0.02
    assert abs(narrow.mean() - a) < 0.02


def test_xor_cluster_structure_and_bayes_error():
    X, y = datasets.xor(n=40000, seed=2)
    # Nearly optimal rule -sign(x1 x2) errs with prob. 2*Phi(1.5)*(1-Phi(1.5)) ~ 0.1248,
    # the paper's "optimal error rate of around 13%".
    err = np.mean(-np.sign(X[:, 0] * X[:, 1]) != y)
    assert abs(err - 0.1248) < 0.01
    # Four clusters at (+-1.5, +-1.5) with unit variance.
    for s1 in (-1, 1):
        for s2 in (-1, 1):
            q = X[(np.sign(X[:, 0]) == s1) & (np.sign(X[:, 1]) == s2)]
            assert len(q) > 8000
    # Mixture of N(+-1.5, 1) per coordinate: mean 0, second moment 1.5**2 + 1.
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=0.05)
    np.testing.assert_allclose((X**2).mean(axis=0), 3.25, atol=0.1)
    X0, _ = datasets.xor(n=1000, noise=0.0)
    np.testing.assert_array_equal(np.abs(X0), 1.5)


def test_banana_arcs():
    X, y = datasets.banana(n=2000, noise=0.0, seed=5)
    up, low = X[y == 1.0], X[y == -1.0]
    np.testing.assert_allclose(np.hypot(up[:, 0], up[:, 1]), 1.0)
    np.testing.assert_allclose(np.hypot(low[:, 0] - 1.0, low[:, 1] - 0.5), 1.0)
    assert np.all(up[:, 1] >= 0) and np.all(low[:, 1] <= 0.5)


def test_platform_probability_profile():
    X, y = datasets.platform(n=20000, seed=6)
    x = X[:, 0]
    assert x.min() >= 0.0 and x.max() <= 6.0
    centre = (x > 1.0) & (x < 3.3)
    ends = (x < 0.1) | (x > 4.5)
    assert np.mean(y[centre] == 1.0) > 0.9
    assert np.mean(y[ends] == 1.0) < 0.1


def test_snelson_like_noise_level():
    X, y = datasets.snelson_like(n=5000, noise=0.0, seed=7)
    _, y_noisy = datasets.snelson_like(n=5000, seed=7)
    assert X.min() >= 0.0 and X.max() <= 6.0
    assert abs(np.std(y_noisy - y) - 0.3) < 0.02


def test_sine_reproduces_oracle():
    oracle = np.loadtxt(shared_path("oracles", "data", "sine_train.csv"), delimiter=",")
    X, y = datasets.sine(n=50, noise=0.1, seed=0)
    np.testing.assert_allclose(X[:, 0], oracle[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(y, oracle[:, 1], rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "call, exc, pattern",
    [
        (lambda: datasets.twonorm(n=-3), ValueError, r"twonorm: n must be a positive integer, got -3"),
        (lambda: datasets.twonorm(n=0), ValueError, r"twonorm: n must be .*got 0"),
        (lambda: datasets.ringnorm(n=2.5), TypeError, r"ringnorm: n must be .*got 2\.5"),
        (lambda: datasets.ringnorm(n=True), TypeError, r"ringnorm: n .*got True"),
        (lambda: datasets.twonorm(dim=0), ValueError, r"twonorm: dim .*got 0"),
        (lambda: datasets.xor(noise=-1.0), ValueError, r"xor: noise .*got -1\.0"),
        (lambda: datasets.banana(noise="big"), TypeError, r"banana: noise .*got 'big'"),
        (lambda: datasets.sine(noise=float("nan")), ValueError, r"sine: noise .*got nan"),
        (lambda: datasets.platform(n="5"), TypeError, r"platform: n .*got '5'"),
        (lambda: datasets.snelson_like(n=-1), ValueError, r"snelson_like: n .*got -1"),
    ],
)
def test_generator_argument_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_numpy_integer_n_accepted():
    X, _ = datasets.twonorm(n=np.int64(5))
    assert X.shape == (5, 20)


# --- data directory ---------------------------------------------------------

@pytest.fixture
def tiny_home(tmp_path):
    """A data directory with one dataset 'tiny' (3 rows, 2 features) and a split file pair."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "tiny.csv").write_text("a,b,y\n1,2,-1\n3,4,1\n5,6,1\n")
    (folder / "tiny_train_idx.csv").write_text("0,2\n1\n")
    (folder / "tiny_test_idx.csv").write_text("1\n0,2\n")
    return tmp_path


def test_data_home_explicit_argument_wins(tiny_home, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("GPDSL_DATA", str(tmp_path_factory.mktemp("other")))
    assert datasets.data_home(tiny_home) == tiny_home


def test_gpdsl_data_env_var_honoured(tiny_home, monkeypatch):
    monkeypatch.setenv("GPDSL_DATA", str(tiny_home))
    assert datasets.data_home() == tiny_home
    X, y = datasets.load_csv("tiny")
    np.testing.assert_array_equal(X, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    np.testing.assert_array_equal(y, [-1.0, 1.0, 1.0])
    assert X.dtype == np.float64 and y.dtype == np.float64


def test_data_home_missing_explicit_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="data_home"):
        datasets.data_home(tmp_path / "nope")


def test_data_home_not_found(monkeypatch, tmp_path):
    monkeypatch.delenv("GPDSL_DATA", raising=False)
    monkeypatch.chdir(tmp_path)  # no ../shared/data from here
    # Hide the repository-relative fallback too.
    real_is_dir = Path.is_dir
    monkeypatch.setattr(
        Path, "is_dir", lambda p: False if p.parts[-2:] == ("shared", "data") else real_is_dir(p)
    )
    with pytest.raises(FileNotFoundError, match="GPDSL_DATA"):
        datasets.data_home()


# --- load_csv ---------------------------------------------------------------

def test_load_csv_other_target_and_direct_path(tiny_home):
    X, y = datasets.load_csv("tiny", data_home=tiny_home, target="a")
    np.testing.assert_array_equal(y, [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(X, [[2.0, -1.0], [4.0, 1.0], [6.0, 1.0]])
    X2, y2 = datasets.load_csv(tiny_home / "tiny" / "tiny.csv")
    np.testing.assert_array_equal(y2, [-1.0, 1.0, 1.0])
    assert X2.shape == (3, 2)


def test_load_csv_unknown_dataset_lists_available(tiny_home):
    with pytest.raises(ValueError, match=r"unknown dataset 'nosuch'.*available: tiny"):
        datasets.load_csv("nosuch", data_home=tiny_home)


def test_load_csv_missing_target_lists_columns(tiny_home):
    with pytest.raises(ValueError, match=r"target column 'label'.*columns: a, b, y"):
        datasets.load_csv("tiny", data_home=tiny_home, target="label")


def test_load_csv_non_numeric_value(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("a,y\n1,1\nfoo,-1\n")
    with pytest.raises(ValueError, match=r"non-numeric value 'foo' in column 'a' at line 3"):
        datasets.load_csv(path)


def test_load_csv_ragged_row(tmp_path):
    path = tmp_path / "ragged.csv"
    path.write_text("a,b,y\n1,2,1\n3,4\n")
    with pytest.raises(ValueError, match=r"line 3 has 2 fields"):
        datasets.load_csv(path)


def test_load_csv_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        datasets.load_csv(tmp_path / "absent.csv")


# --- load_split -------------------------------------------------------------

def test_load_split_tiny(tiny_home):
    Xtr, ytr, Xte, yte = datasets.load_split("tiny", 2, data_home=tiny_home)
    np.testing.assert_array_equal(Xtr, [[3.0, 4.0]])
    np.testing.assert_array_equal(yte, [-1.0, 1.0])
    assert Xte.shape == (2, 2) and ytr.shape == (1,)


@pytest.mark.parametrize("realisation", [0, 3])
def test_load_split_bad_realisation(tiny_home, realisation):
    pattern = r"has 2 realisation\(s\)" if realisation == 3 else r"realisation must be a positive integer, got 0"
    with pytest.raises(ValueError, match=pattern):
        datasets.load_split("tiny", realisation, data_home=tiny_home)


def test_load_split_without_split_files(tiny_home):
    (tiny_home / "tiny" / "tiny_test_idx.csv").unlink()
    with pytest.raises(ValueError, match="no tiny_train_idx.csv / tiny_test_idx.csv split files"):
        datasets.load_split("tiny", data_home=tiny_home)


@needs_data
def test_shared_files_match_the_manifest():
    """The loaders on the real files, against the facts shared/data/MANIFEST.md states: shapes and
    labels of a classification and a regression CSV; a Rätsch CSV is realisation 1's training rows
    followed by its test rows; every realisation partitions the rows; twonorm has one realisation.
    One test, so that a checkout without the data sets skips it once."""
    for name, shape, binary in [("raetsch_banana", (5300, 2), True), ("boston-housing", (506, 13), False)]:
        X, y = datasets.load_csv(name, data_home=DATA)
        assert X.shape == shape and y.shape == (shape[0],), name
        assert X.dtype == np.float64 and y.dtype == np.float64
        if binary:
            assert set(np.unique(y)) == {-1.0, 1.0}

    Xtr, ytr, Xte, yte = datasets.load_split("raetsch_banana", 1, data_home=DATA)
    assert Xtr.shape == (400, 2) and ytr.shape == (400,)
    assert Xte.shape == (4900, 2) and yte.shape == (4900,)
    X, y = datasets.load_csv("raetsch_banana", data_home=DATA)
    np.testing.assert_array_equal(np.vstack([Xtr, Xte]), X)
    np.testing.assert_array_equal(np.concatenate([ytr, yte]), y)

    folder = DATA / "raetsch_banana"
    train = np.loadtxt(folder / "raetsch_banana_train_idx.csv", delimiter=",", dtype=int)
    test = np.loadtxt(folder / "raetsch_banana_test_idx.csv", delimiter=",", dtype=int)
    for tr, te in zip(train, test):
        assert len(np.intersect1d(tr, te)) == 0
        assert len(np.union1d(tr, te)) == 5300
    assert train.shape == (10, 400) and test.shape == (10, 4900)
    assert not np.array_equal(train[0], train[1])

    with pytest.raises(ValueError, match=r"has 1 realisation\(s\) \(1-1\), got realisation=2"):
        datasets.load_split("raetsch_twonorm", 2, data_home=DATA)


def test_all_lists_public_names():
    for name in datasets.__all__:
        assert callable(getattr(datasets, name))
    assert set(datasets.__all__) == {
        "twonorm", "ringnorm", "xor", "banana", "snelson_like",
        "platform", "sine", "data_home", "read_table", "read_labelled_table", "load_csv", "load_split",
    }
