"""What a cold process pays before its first result: ``import gpdsl`` leaves scipy.stats unloaded
(half a second, needed only by a K-class prediction's quasi-Monte Carlo points), and a fit and
its first ``predict`` import no dask (xarray would import it for every array it wraps,
0.3–2 s: :mod:`gpdsl.io.xarray_import`), while Dask input still gives Dask-backed results.
Module presence is asserted, not times (speed is measured in benchmarks/)."""
import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    import gpdsl as gd
    after_import = {"scipy.stats": "scipy.stats" in sys.modules, "dask": "dask" in sys.modules}
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(40, 2))
    y = np.sin(X[:, 0])
    gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Gaussian(0.1)).fit(X, y, max_iter=5).predict(X)
    labels = (X[:, 0] > 0).astype(int) + (X[:, 1] > 1)
    gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Categorical(3),
             inference=gd.inference.Laplace()).fit(X, labels, max_iter=5).predict(X)
    print(json.dumps({"after_import": after_import, "dask_after_predict": "dask" in sys.modules}))
""")


def _run(script):
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_and_first_predict_load_no_dask_and_no_scipy_stats():
    result = _run(SCRIPT)
    assert result["after_import"] == {"scipy.stats": False, "dask": False}
    assert result["dask_after_predict"] is False


HANDOVER = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    import gpdsl as gd
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, size=(30, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(30)
    post = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Gaussian(0.1)).fit(X, y, max_iter=5)
    eager = post.predict(X)
    before = "dask" in sys.modules
    import dask.array as da
    lazy = post.predict(da.from_array(X, chunks=10))
    print(json.dumps({"dask_before": before, "lazy": isinstance(lazy["f_mean"].data, da.Array),
                      "gap": float(np.max(np.abs(lazy["f_mean"].values - eager["f_mean"].values)))}))
""")


@pytest.mark.skipif(importlib.util.find_spec("dask") is None, reason="needs dask (the dask extra)")
def test_dask_input_still_gives_dask_backed_results_after_a_numpy_predict():
    """The deferred record hands over to xarray's own once dask.array is imported: in a fresh
    process a NumPy predict first (no dask yet), then a Dask one, whose result stays lazy (a
    Dask array) and equals the NumPy one (to 1e-12). The targets carry noise: on noise-free ones
    the fitted noise variance falls to ~1e-22, K is near-singular, and a chunk narrower than M
    (whitened by a triangular solve, not the inverse's product: linalg.whiten) differs by 1e-11."""
    result = _run(HANDOVER)
    assert result["dask_before"] is False and result["lazy"] is True
    assert result["gap"] < 1e-12
