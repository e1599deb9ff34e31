"""No O(N^2) array in a sparse method (issue 16): every sparse fit at N = 200,000 runs in a
subprocess whose address space is capped at 3 GB.

One (N, N) float64 array at N = 200,000 is 320 GB, so any such array (or an (N, N) boolean, 40
GB) fails the fit with a MemoryError; what the methods do need -- (N, D) inputs, (N, M) chunks of
K_uf, per-row site and local state -- is tens of MB here.  The cap is on the virtual address
space (``RLIMIT_AS``), which also bounds what Numba and the BLAS reserve, hence the generous 3 GB
against the 0.3–0.4 GB the fits reach (peak RSS).
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT_BYTES = 3 * 2 ** 30
N = 200_000

SCRIPT = r"""
import json, resource, sys, warnings
limit, N = int(sys.argv[2]), int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
warnings.simplefilter("ignore")
import numpy as np
import gpdsl as gd
X, y = gd.datasets.twonorm(N, dim=2, seed=0)
reg = np.sin(X[:, 0]) + 0.1 * np.random.default_rng(0).standard_normal(N)
SE = gd.kernels.SquaredExponential
bern = lambda link: gd.likelihoods.Bernoulli(link)
cases = {
    "VFE": (gd.likelihoods.Gaussian(0.1), gd.inducing.KMeans(16, seed=0, max_iter=5), gd.inference.VFE(), reg, 3),
    "FITC": (gd.likelihoods.Gaussian(0.1), gd.inducing.KMeans(16, seed=0, max_iter=5), gd.inference.FITC(), reg, 3),
    "VFE-GreedyVariance": (gd.likelihoods.Gaussian(0.1), gd.inducing.GreedyVariance(16), gd.inference.VFE(), reg, 2),
    "EP": (bern("probit"), gd.inducing.KMeans(16, seed=0, max_iter=5), gd.inference.EP(max_sweeps=3), y, 1),
    "PolyaGamma": (bern("logit"), gd.inducing.KMeans(16, seed=0, max_iter=5), gd.inference.PolyaGamma(max_iter=5), y, 2),
    "SVGP": (bern("logit"), gd.inducing.KMeans(16, seed=0, max_iter=5), gd.inference.SVGP(q_max_iter=2), y, 1),
    "SVGP-minibatch": (bern("logit"), gd.inducing.KMeans(16, seed=0, max_iter=5), gd.inference.SVGP(batch_size=256), y, 20),
    "Laplace-FITC": (bern("logit"), gd.inducing.KMeans(16, seed=0, max_iter=5), gd.inference.Laplace(), y, 2),
}
out = {}
for name in sys.argv[1].split(","):
    likelihood, inducing, inference, targets, max_iter = cases[name]
    try:
        post = gd.Model(SE(1.0, 1.0), likelihood, inducing, inference).fit(X, targets, max_iter=max_iter)
        mean, var = post.predict_f(X[:50_000])
        out[name] = {"ok": bool(np.isfinite(post.log_evidence) and np.all(np.isfinite(mean)) and np.all(var >= 0)),
                     "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    except MemoryError as exc:
        out[name] = {"ok": False, "error": f"MemoryError: {exc}"}
print("RESULT " + json.dumps(out))
"""

METHODS = ("VFE", "FITC", "VFE-GreedyVariance", "EP", "PolyaGamma", "SVGP", "SVGP-minibatch", "Laplace-FITC")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS caps the address space on Linux only")
def test_sparse_fits_at_n_200000_under_a_3gb_address_space():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(METHODS), str(LIMIT_BYTES), str(N)],
                          capture_output=True, text=True, env=env, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the capped subprocess failed (rc {proc.returncode}): {proc.stderr[-3000:]}"
    result = json.loads(lines[0][7:])
    assert set(result) == set(METHODS)
    for name, outcome in result.items():
        assert outcome["ok"], f"{name}: {outcome}"


def test_cache_budget_is_an_eighth_of_the_tighter_limit_within_its_bounds(monkeypatch):
    """chunks.cache_bytes: an eighth of min(MemAvailable, RLIMIT_AS), clamped to [256 MB, 2 GB]."""
    import io
    import resource

    from gpdsl import chunks
    real_open = open

    def fake_meminfo(kib):
        def fake_open(path, *args, **kwargs):
            if path == "/proc/meminfo":
                return io.StringIO(f"MemTotal: 99999999 kB\nMemAvailable: {kib} kB\n")
            return real_open(path, *args, **kwargs)
        monkeypatch.setattr("builtins.open", fake_open)

    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    fake_meminfo(8 * 2 ** 20)                                   # 8 GiB available: 1 GiB
    assert chunks.cache_bytes() == 2 ** 30
    fake_meminfo(64 * 2 ** 20)                                  # 64 GiB: capped at 2 GiB
    assert chunks.cache_bytes() == chunks.CACHE_BYTES_MAX == 2 ** 31
    fake_meminfo(1 * 2 ** 20)                                   # 1 GiB: the 256 MB floor
    assert chunks.cache_bytes() == chunks.CACHE_BYTES_MIN == 2 ** 28
    fake_meminfo(8 * 2 ** 20)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (4 * 2 ** 30, resource.RLIM_INFINITY))
    assert chunks.cache_bytes() == 2 ** 29                      # the 4 GiB address-space cap is tighter
