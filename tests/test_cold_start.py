"""Cold start (issues 13, 46): what ``import gpdsl`` loads, the one-line notice before compiling,
which of the FITC-EP sweep's helpers a fit compiles on their own, that the logistic-softmax
kernels copy arrays element by element (no slice assignments, whose broadcasting code compiles
slowly), and that a later process loads a latent offset's site code from the cache.

The subprocess tests run a fresh interpreter, with a fresh ``NUMBA_CACHE_DIR`` where the Numba
cache matters, so that neither this process's compiled kernels nor the package's cache decide
the outcome.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import njit, types

from gpdsl._jit import announce_compilation

REPO = Path(__file__).resolve().parents[1]

FITS = r"""
import warnings
warnings.simplefilter("ignore")
import gpdsl as gd
X, y = gd.datasets.banana(n=60, seed=0)
SE = gd.kernels.SquaredExponential
for likelihood, inference in ((gd.likelihoods.Bernoulli("probit"), gd.inference.EP()),
                              (gd.likelihoods.Bernoulli("logit"), gd.inference.PolyaGamma())):
    gd.Model(SE(1.0, 1.0), likelihood, gd.inducing.KMeans(5, seed=0), inference).fit(X, y, max_iter=20)
import json
from numba.core.registry import CPUDispatcher
from gpdsl._jit import ep_sweeps
print(json.dumps({name: len(obj.signatures) for name, obj in vars(ep_sweeps).items()
                  if isinstance(obj, CPUDispatcher)}))
"""


def _python(code, args=(), **env):
    environ = {**os.environ, "PYTHONPATH": str(REPO), **env}
    proc = subprocess.run([sys.executable, "-c", code, *args], env=environ, cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_import_gpdsl_leaves_out_xarray_arviz_pandas_matplotlib():
    """A fit needs none of them: xarray (with pandas) loads with the first prediction or export,
    arviz with to_inference_data, matplotlib with plotting."""
    out = _python("import json, sys, gpdsl\n"
                  "print(json.dumps([m for m in ('xarray', 'arviz', 'pandas', 'matplotlib') if m in sys.modules]))")
    assert json.loads(out.stdout) == []


@pytest.fixture(scope="module")
def cold_then_warm_fits(tmp_path_factory):
    """The FITS subprocess on a fresh Numba cache, then again on the cache it filled."""
    cache = str(tmp_path_factory.mktemp("numba_cache"))
    return _python(FITS, NUMBA_CACHE_DIR=cache), _python(FITS, NUMBA_CACHE_DIR=cache)


def test_compile_notice_printed_once_per_family_on_a_cold_cache_only(cold_then_warm_fits):
    """An EP fit and a Pólya-Gamma fit (many evaluations each) print one line per family to stderr
    when their kernels compile (a fresh cache), and nothing when they load them from the cache."""
    cold_run, warm_run = cold_then_warm_fits
    cold = cold_run.stderr.splitlines()
    notices = [line for line in cold if line.startswith("gpdsl: compiling")]
    assert [line.split(" kernels once")[0] for line in notices] == ["gpdsl: compiling the EP",
                                                                    "gpdsl: compiling the Polya-Gamma"]
    assert all(line.endswith(" s); later runs load them from the cache") for line in notices)
    assert "gpdsl: compiling" not in warm_run.stderr


def test_fitc_ep_sweep_compiles_its_single_call_helpers_inline(cold_then_warm_fits):
    """Issue 46: the FITC-EP sweep's helpers called from one place are inlined into it (Numba
    compiled each on its own, and LLVM optimised and emitted it again in every caller above it:
    a cold first EP fit compiled about 1 s longer), so after a FITC-EP fit they hold no
    specialisation of their own; the sweep holds one (EP's projection) and its dgemm call, made
    from four places, one."""
    counts = json.loads(cold_then_warm_fits[0].stdout.strip().splitlines()[-1])
    assert counts["fitc_sequential_sweep"] == 1 and counts["_gemm"] == 1
    inlined = ("_site_update", "_fitc_site", "_block_sites", "_apply_block", "_blas_workspace")
    assert {name: counts[name] for name in inlined} == dict.fromkeys(inlined, 0)


def _sliced_calls(kernel, *args):
    """The calls of ``kernel``'s typed IR (compiled afresh, without the disk cache, so that Numba
    keeps its typing) whose arguments include a slice: slice reads and assignments."""
    compiled = njit(kernel.py_func)
    compiled(*args)
    calltypes = compiled.overloads[compiled.signatures[0]].type_annotation.calltypes
    return [str(call) for call, signature in calltypes.items() if signature is not None and any(
        isinstance(arg, types.SliceType)
        or (isinstance(arg, types.BaseTuple) and any(isinstance(item, types.SliceType) for item in arg))
        for arg in signature.args)]


def test_logistic_softmax_kernels_index_elements_not_slices():
    """Issue 46: a slice assignment in a kernel (``acc[:] = residual[:, k]``, ``out[:, k] = acc``)
    brings in Numba's broadcasting code, which ls_variances compiled for about 2 s of a cold
    PolyaGamma-K fit's 4 (bench_compile.py); the kernels copy by element loops instead."""
    from gpdsl._jit import logistic_softmax as ls
    n, K = 5, 3
    codes, mean, var = np.arange(n, dtype=float) % K, np.zeros((n, K)), np.ones((n, K))
    c, gamma, alpha = ls.ls_local_update(codes, mean, var)
    calls = {"ls_variances": _sliced_calls(ls.ls_variances, np.ones((K, 4, n)), np.ones((n, 1))),
             "ls_local_update": _sliced_calls(ls.ls_local_update, codes, mean, var),
             "ls_local_terms": _sliced_calls(ls.ls_local_terms, codes, c, gamma, alpha, np.full(n, 3.0),
                                             np.ones((n, K))),
             "ls_expectations": _sliced_calls(ls.ls_expectations, codes, mean, var)}
    assert calls == dict.fromkeys(calls, [])


def test_compile_notice_is_silent_when_it_cannot_tell(capsys):
    """Without a Numba disk cache (or with anything but a dispatcher) the notice cannot say that
    later runs load the kernels, and prints nothing rather than fail."""
    uncached = njit(lambda x: x + 1.0)
    announce_compilation("test-uncached", 1, uncached, (1.0,))
    announce_compilation("test-not-a-dispatcher", 1, object(), (1.0,))
    assert capsys.readouterr().err == ""


def test_compile_notice_is_silent_for_a_compiled_kernel(capsys):
    from gpdsl._jit.special import norm_pdf
    norm_pdf(0.5)                          # compiled (or loaded) in this process now
    announce_compilation("test-compiled", 1, norm_pdf, (0.5,))
    assert capsys.readouterr().err == ""


def _numpy_functions(kernel, *args):
    """The NumPy functions that ``kernel``'s typed IR calls (compiled afresh, without the disk cache)."""
    compiled = njit(kernel.py_func)
    compiled(*args)
    typemap = compiled.overloads[compiled.signatures[0]].type_annotation.typemap
    return {t.typing_key for t in typemap.values() if isinstance(t, types.Function)}


def test_kernels_on_every_fits_path_allocate_without_np_zeros():
    """Issue 46: np.zeros in a kernel brings in three more of Numba's own overloads (np.zeros, np.empty
    with a dtype, the zero fill), compiled in every fresh process (about 0.1 s); the kernels of the
    kernel gradient (every fit), VFE, Pólya-Gamma and EP's likelihood gradient use np.empty and a loop."""
    from gpdsl._jit import collapsed, covariance, ep_sweeps, polya_gamma
    from gpdsl._jit.likelihoods.bernoulli import probit_site_gradient
    n, m = 4, 3
    square, rows, cols = np.ones((m, n)), np.ones(n), np.ones(m)
    used = {"slope_adjoint": _numpy_functions(covariance.slope_adjoint, square, square, square, 1.0,
                                              covariance.SQUARED_EXPONENTIAL, 1.0),
            "contract_then_complete": _numpy_functions(collapsed.contract_then_complete, square.copy(), square, cols,
                                                       rows, rows),
            "pg_marginals_update": _numpy_functions(polya_gamma.pg_marginals_update, square, cols, rows, rows),
            "summed_log_z_gradient": _numpy_functions(ep_sweeps.summed_log_z_gradient, np.sign(rows - 0.5), rows,
                                                      rows, (0.0,), probit_site_gradient)}
    assert {name: np.zeros in found for name, found in used.items()} == dict.fromkeys(used, False)


OFFSET_FIT = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
import numpy as np
import gpdsl as gd
from numba.core.registry import CPUDispatcher
from gpdsl._jit import ep_sweeps, projections
from gpdsl._jit.likelihoods import negative_binomial
rng = np.random.default_rng(17)
X = rng.uniform(-2, 2, size=(40, 1))
exposure = rng.uniform(1.0, 20.0, size=40)
y = rng.poisson(exposure * np.exp(np.sin(2 * X[:, 0]))).astype(float)
gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.NegativeBinomial(dispersion=0.3),
         gd.inducing.KMeans(5, seed=0) if sys.argv[1] == "fitc" else None,
         gd.inference.EP()).fit(X, y, offset=np.log(exposure), max_iter=3)
project, gradient = projections.with_offset(negative_binomial.SITE)[:2]
row, mu, var, params = np.array([4.0, 1.5]), 0.2, 0.7, (0.3,)
misses = lambda kernels: sum(sum(k.stats.cache_misses.values()) for k in kernels)
print(json.dumps({"sweeps": misses([d for d in vars(ep_sweeps).values() if isinstance(d, CPUDispatcher)]),
                  "offset": misses([project, gradient]),
                  "project": [project(row, mu, var, params, None, None, None),
                              negative_binomial.site(4.0, mu + 1.5, var, params, None, None, None)],
                  "gradient": [gradient(row, mu, var, params),
                               negative_binomial.site_gradient(4.0, mu + 1.5, var, params)]}))
"""


def test_a_later_process_loads_the_offset_site_code_from_the_cache(tmp_path):
    """Issue 46: ``projections.with_offset``'s wrappers (a fit with a latent offset) are closures
    keyed in Numba's cache by their name, not by their cells, whose pickles differ in every
    process.  A negative-binomial EP fit with an offset on a fresh cache compiles them; a later
    process's FITC fit compiles the FITC sweep, whose typing reads the wrappers, and calls them
    directly: it loads them from the cache (keyed by their cells, each process compiled them again
    and added an entry to the cache).  The wrappers' values are the inner functions' at mu + o, with
    o taken off the tilted mean (to rounding: the inner code inlined or not)."""
    cache = {"NUMBA_CACHE_DIR": str(tmp_path)}
    dense = json.loads(_python(OFFSET_FIT, **cache, args=("dense",)).stdout.splitlines()[-1])
    entries = sorted(path.name for path in tmp_path.rglob("*offset*.nbc"))
    fitc = json.loads(_python(OFFSET_FIT, **cache, args=("fitc",)).stdout.splitlines()[-1])
    assert dense["sweeps"] > 0 and dense["offset"] == 2, dense
    assert fitc["sweeps"] > 0 and fitc["offset"] == 0, fitc
    assert len(entries) == 2 and sorted(path.name for path in tmp_path.rglob("*offset*.nbc")) == entries
    for run in (dense, fitc):
        (log_z, mean, variance), (log_z_in, mean_in, variance_in) = run["project"]
        np.testing.assert_allclose([log_z, mean + 1.5, variance], [log_z_in, mean_in, variance_in], rtol=1e-12)
        np.testing.assert_allclose(*run["gradient"], rtol=1e-12)
