"""EP and QP with a likelihood per output of several site codes or with site parameters (issue
48): gd.likelihoods.PerOutput's site model of rows (part, target, offset), whose jitted closures
send each row to its part's site code (gpdsl/_jit/mixed_sites.py).  References: the exact
Gaussian method with the same per-output noise, each part's own site functions, a dense NumPy EP
with per-row quadrature tilted moments (tests/naive.py), central differences, dense EP for FITC-EP
with Z = X, and a fresh process on the cache a first one filled."""
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import special

import gpdsl as gd
from gpdsl._jit.likelihoods import bernoulli as probit_code
from gpdsl._jit.mixed_sites import site_rows
from naive import central_difference, dense_ep, grid_tilted_moments, icm_gram, stationary_point

L = gd.likelihoods
REPO = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(4848)
N, P = 24, 3
x = np.sort(RNG.uniform(-2.0, 2.0, N))
OUT = np.arange(N) % P                     # the outputs interleaved, so that no row block is one part's
X = np.column_stack([x, OUT])
F = np.sin(1.5 * x)
Y_RAW = np.select([OUT == 0, OUT == 1],
                  [F + 0.3 * RNG.standard_normal(N), (RNG.uniform(size=N) < special.ndtr(2.0 * F)).astype(float)],
                  RNG.poisson(np.exp(0.3 + F)).astype(float))
MIXED = L.PerOutput((L.Gaussian(0.2), L.Bernoulli("probit", bias=0.3), L.Poisson(link="log")))
ICM = gd.kernels.ICM(gd.kernels.SquaredExponential(0.8, 1.0), P, W=np.array([[0.9], [0.7], [0.5]]),
                     kappa=np.array([0.2, 0.3, 0.1]))
Y = MIXED.for_rows(X).coded_targets(Y_RAW, N)


def _model(inference, likelihood=MIXED, **kwargs):
    return gd.Model(ICM, likelihood, inference=inference, **kwargs)


def _values(model):
    return model.parameter_table(X).values()


def _dense_K(values):
    base = stationary_point(values["kernel.kernel.lengthscale"], values["kernel.kernel.variance"], "se")
    return icm_gram(X, X, values["kernel.W"], values["kernel.kappa"], base)


def _log_liks(values):
    """Row i's log p(y_i | f), vectorised in f, from the formulas (Gaussian, probit with its bias,
    log-link Poisson)."""
    s2, bias = values["likelihood.0.variance"], values["likelihood.1.bias"]
    by_part = (lambda y: lambda f: -0.5 * np.log(2 * np.pi * s2) - 0.5 * (y - f) ** 2 / s2,
               lambda y: lambda f: special.log_ndtr(y * (f + bias)),
               lambda y: lambda f: y * f - np.exp(f) - special.gammaln(y + 1.0))
    return [by_part[p](yi) for p, yi in zip(OUT, Y)]


def test_gaussian_parts_under_ep_equal_exact():
    """EP's sites of Gaussian parts are the likelihood itself: its evidence, every gradient and
    the predictions equal the exact method's with the same per-output noise (1e-12; 2e-15
    reached)."""
    likelihood = L.PerOutput((L.Gaussian(0.15), L.Gaussian(0.4)))
    X2 = X[OUT < 2]
    y2 = F[OUT < 2] + 0.3 * np.random.default_rng(1).standard_normal(len(X2))
    kernel = gd.kernels.ICM(gd.kernels.SquaredExponential(0.8, 1.0), 2, W=np.array([[0.9], [0.7]]),
                            kappa=np.array([0.2, 0.3]))
    ep = gd.Model(kernel, likelihood, inference=gd.inference.EP(tol=1e-12))
    exact = gd.Model(kernel, likelihood)
    assert ep.likelihood.for_rows(X2).site_model().parts is not None       # two variances: the site model of rows
    values = ep.parameter_table(X2).values()
    a, b = ep.evaluate(values, X2, y2, None), exact.evaluate(values, X2, y2, None)
    np.testing.assert_allclose(a.log_evidence, b.log_evidence, rtol=1e-12)
    assert set(a.grads) == set(b.grads) >= {"likelihood.0.variance", "likelihood.1.variance"}
    for name, g in b.grads.items():
        np.testing.assert_allclose(a.grads[name], g, rtol=1e-12, atol=1e-14, err_msg=name)
    X_new = np.column_stack([np.linspace(-1.5, 1.5, 6), [0, 1, 1, 0, 1, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # (the constant-model flag of a fit that is not optimised)
        pa = ep.fit(X2, y2, optimize=False).predict(X_new)
        pb = exact.fit(X2, y2, optimize=False).predict(X_new)
    for name in ("f_mean", "f_var", "y_mean", "y_var"):
        np.testing.assert_allclose(pa[name].values, pb[name].values, rtol=1e-12, atol=1e-14, err_msg=name)


@pytest.mark.parametrize("quantile", [None, False, True])
def test_each_row_runs_its_parts_site_code(quantile):
    """The jitted dispatch of every row (and of a row of each part with a latent offset) equals
    the part's own site functions to 1e-14; its gradient is the part's in the part's slots, 0
    elsewhere, named ``<p>.<name>``; QP's probit table reaches the probit rows and the other
    parts ignore it."""
    site = MIXED.for_rows(X).site_model()
    assert site.names == ("0.variance", "1.bias") and site.params == (0.2, 0.3)
    parts = [part.site_model() for part in MIXED.likelihoods]
    table = probit_code.probit_lookup_table() if quantile else (None, None)
    rng = np.random.default_rng(7)
    assert site.functions.lookup_table is probit_code.PROBIT_SITE.lookup_table
    cavities = np.column_stack([rng.normal(0.0, 1.0, N), rng.uniform(0.2, 2.0, N)])
    slots = {0: slice(0, 1), 1: slice(1, 2), 2: slice(2, 2)}
    for offset in (None, rng.normal(0.0, 0.5, N)):
        rows = site_rows(site.parts, Y, offset)
        o = np.zeros(N) if offset is None else offset
        for i, (p, (mu, var)) in enumerate(zip(OUT, cavities)):
            own = parts[p].functions
            want = own.project(Y[i], mu + o[i], var, parts[p].params, quantile, *table)
            got = site.functions.project(rows[i], mu, var, site.params, quantile, *table)
            np.testing.assert_allclose(got, (want[0], want[1] - o[i], want[2]), rtol=1e-14, atol=1e-15)
            if p != 1 and quantile:             # the table is the probit's: the others' results without it
                np.testing.assert_array_equal(own.project(Y[i], mu, var, parts[p].params, quantile, *table),
                                              own.project(Y[i], mu, var, parts[p].params, quantile, None, None))
            grad = np.zeros(2)
            grad[slots[p]] = own.log_z_gradient(Y[i], mu + o[i], var, parts[p].params)
            np.testing.assert_allclose(site.functions.log_z_gradient(rows[i], mu, var, site.params), grad,
                                       rtol=1e-14, atol=1e-15)


def test_parts_of_several_parameters_read_their_own_slices():
    """Parts of two site parameters each (Student-t: df, scale; negative binomial) around a
    probit of one: each row's dispatch and gradient equal its part's own code with its own
    parameters (1e-14), the gradient in the part's slots of the concatenated tuple, 0 elsewhere."""
    likelihood = L.PerOutput((L.StudentT(df=4.0, scale=0.5), L.Bernoulli("probit", bias=-0.2),
                              L.NegativeBinomial(dispersion=2.5)))
    y_raw = np.select([OUT == 0, OUT == 1], [F, (F > 0).astype(float)], np.round(np.exp(F)))
    rows_likelihood = likelihood.for_rows(X)
    site = rows_likelihood.site_model()
    parts = [part.site_model() for part in likelihood.likelihoods]
    counts = [len(part.params) for part in parts]
    assert site.params == sum((part.params for part in parts), ())
    starts = np.concatenate([[0], np.cumsum(counts)])
    y = rows_likelihood.coded_targets(y_raw, N)
    rows = site_rows(site.parts, y)
    rng = np.random.default_rng(8)
    for i, p in enumerate(OUT):
        mu, var = rng.normal(), rng.uniform(0.2, 2.0)
        own = parts[p].functions
        np.testing.assert_allclose(site.functions.project(rows[i], mu, var, site.params, None, None, None),
                                   own.project(y[i], mu, var, parts[p].params, None, None, None), rtol=1e-14)
        grad = np.zeros(len(site.params))
        grad[starts[p]:starts[p + 1]] = own.log_z_gradient(y[i], mu, var, parts[p].params)
        np.testing.assert_allclose(site.functions.log_z_gradient(rows[i], mu, var, site.params), grad,
                                   rtol=1e-14, atol=1e-15)


def test_ep_fixed_point_evidence_and_gradients_match_dense_numpy_ep():
    """EP's sites and evidence equal a dense NumPy EP whose tilted moments are each row's
    quadrature of its own density (1e-11; 1e-14 reached), and every gradient (the ICM's,
    0.variance, 1.bias) equals central differences of the evidence (1e-6 relative; 6e-8 reached)."""
    model = _model(gd.inference.EP(tol=1e-12))
    values = _values(model)
    liks = _log_liks(values)
    tau, nu, evidence = dense_ep(_dense_K(values), lambda i, m, v: grid_tilted_moments(liks[i], m, v))
    ev = model.evaluate(values, X, Y, None)
    np.testing.assert_allclose(ev.warm.tau, tau, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(ev.warm.nu, nu, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(ev.log_evidence, evidence, rtol=1e-11)
    assert {"likelihood.0.variance", "likelihood.1.bias"} <= set(ev.grads)
    for name, value in values.items():
        fd = central_difference(lambda v: model.evaluate({**values, name: v}, X, Y, None, need_grad=False,
                                                         warm=ev.warm).log_evidence, value)
        np.testing.assert_allclose(ev.grads[name], fd, rtol=1e-6, atol=1e-7, err_msg=name)


def test_per_output_means_are_the_rows_offsets():
    """A mean per output reaches each row's part as its latent offset (rows (p, y, o)): the
    evidence equals dense NumPy EP with row i's density at f + m_{p_i} (1e-11), and the gradients
    in the means' constants (and the rest) equal central differences (1e-6 relative)."""
    constants = np.array([0.5, -0.2, 0.3])
    mean = gd.means.PerOutput(tuple(gd.means.Constant(c) for c in constants))
    model = _model(gd.inference.EP(tol=1e-12), mean=mean)
    values = _values(model)
    liks = _log_liks(values)
    _, _, evidence = dense_ep(_dense_K(values), lambda i, m, v: grid_tilted_moments(
        lambda f: liks[i](f + constants[OUT[i]]), m, v))
    ev = model.evaluate(values, X, Y, None)
    np.testing.assert_allclose(ev.log_evidence, evidence, rtol=1e-11)
    assert {f"mean.{p}.constant" for p in range(P)} <= set(ev.grads)
    for name, value in values.items():
        fd = central_difference(lambda v: model.evaluate({**values, name: v}, X, Y, None, need_grad=False,
                                                         warm=ev.warm).log_evidence, value)
        np.testing.assert_allclose(ev.grads[name], fd, rtol=1e-6, atol=1e-7, err_msg=name)


def test_qp_sites_match_dense_numpy_qp_with_each_parts_projection():
    """QP's posterior sites equal the dense NumPy sweeps with row i's QP projection that of its
    own part (1e-11; 8e-14 reached): the dispatch and the sweeps, not the projections (tested
    against quadrature in the conformance suite); its evidence is EP's formula at EP's sites.
    With ``lookup=True`` the probit rows read the table (their sites move by ~5e-6)."""
    model = _model(gd.inference.QP(tol=1e-12))
    values = _values(model)
    parts = [part.site_model() for part in MIXED.likelihoods]
    tau, nu, _ = dense_ep(_dense_K(values), lambda i, m, v: parts[OUT[i]].functions.project(
        Y[i], m, v, parts[OUT[i]].params, True, None, None))
    ev = model.evaluate(values, X, Y, None, need_state=True)
    np.testing.assert_allclose(ev.warm.tau, tau, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(ev.warm.nu, nu, rtol=1e-11, atol=1e-12)
    ep = _model(gd.inference.EP(tol=1e-12)).evaluate(values, X, Y, None, need_grad=False)
    np.testing.assert_allclose(ev.log_evidence, ep.log_evidence, rtol=1e-12)
    with_table = _model(gd.inference.QP(tol=1e-12, lookup=True)).evaluate(values, X, Y, None, need_state=True)
    moved = np.abs(with_table.warm.tau / tau - 1.0)
    assert 1e-8 < np.max(moved[OUT == 1]) < 1e-4 and np.max(moved[OUT == 0]) < 1e-12, moved


@pytest.mark.parametrize("inference", [gd.inference.EP, gd.inference.QP])
def test_fitc_with_inducing_inputs_at_x_equals_dense(inference):
    """FITC-EP (and QP) with Z = X (K_uu jitter 1e-10) is dense EP: sites, evidence and its
    gradients in the ICM's and the parts' hyperparameters (1e-10; 1e-13 reached)."""
    spec = inference(tol=1e-12, jitter=1e-10)
    dense, fitc = _model(spec), _model(spec, inducing=gd.inducing.Fixed(x[:, None]))
    values = _values(dense)
    a = dense.evaluate(values, X, Y, None)
    b = fitc.evaluate(values, X, Y, X)
    np.testing.assert_allclose(b.warm.tau, a.warm.tau, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b.warm.nu, a.warm.nu, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b.log_evidence, a.log_evidence, rtol=1e-12)
    for name, g in a.grads.items():
        np.testing.assert_allclose(b.grads[name], g, rtol=1e-10, atol=1e-12, err_msg=name)


def test_save_load_and_model_file_round_trip():
    post = _model(gd.inference.EP()).fit(X, Y_RAW, max_iter=5)
    X_new = np.column_stack([np.linspace(-1, 1, 6), [0, 1, 2, 2, 1, 0]])
    with tempfile.TemporaryDirectory() as folder:
        post.save(Path(folder) / "post.nc")
        back = gd.load(Path(folder) / "post.nc")
        assert back.model == post.model
        np.testing.assert_array_equal(back.sites.tau, post.sites.tau)
        for name in ("f_mean", "f_var", "y_mean", "p"):
            np.testing.assert_array_equal(back.predict(X_new)[name].values, post.predict(X_new)[name].values)
        toml = Path(folder) / "model.toml"
        toml.write_text(post.model.to_toml())
        assert gd.Model.from_toml(toml) == post.model


COLD_FIT = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np
import gpdsl as gd
from numba.core.registry import CPUDispatcher
from gpdsl._jit import ep_sweeps, mixed_sites
L = gd.likelihoods
x = np.linspace(-2, 2, 30)
X = np.column_stack([x, np.arange(30) % 3])
y = np.where(X[:, 1] == 0, np.sin(x), np.where(X[:, 1] == 1, x > 0, np.arange(30) % 4)).astype(float)
parts = {"gbp": (L.Gaussian(0.2), L.Bernoulli("probit", bias=0.3), L.Poisson(link="log")),
         "gb": (L.Gaussian(0.2), L.Bernoulli("probit", bias=0.3)), "gg": (L.Gaussian(0.2), L.Gaussian(0.3))}
lik = L.PerOutput(parts[sys.argv[1]])
P = lik.output_count
X[:, 1] %= P
kernel = gd.kernels.ICM(gd.kernels.SquaredExponential(1.0, 1.0), P, W=np.ones((P, 1)), kappa=np.ones(P))
start = time.process_time()
for inducing in sys.argv[2:]:
    gd.Model(kernel, lik, gd.inducing.KMeans(5, seed=0) if inducing == "fitc" else None,
             gd.inference.EP()).fit(X, y, max_iter=3)
seconds = time.process_time() - start
misses = lambda kernels: sum(sum(k.stats.cache_misses.values()) for k in kernels)
print(json.dumps({"sweeps": misses([d for d in vars(ep_sweeps).values() if isinstance(d, CPUDispatcher)]),
                  "dispatch": misses([f for site in mixed_sites._MIXED_SITES.values() for f in site[:2]]),
                  "seconds": seconds}))
"""


def _python(code, *args, **env):
    proc = subprocess.run([sys.executable, "-c", code, *args], env={**os.environ, "PYTHONPATH": str(REPO), **env},
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_later_process_loads_the_mixed_site_code_from_the_cache(tmp_path):
    """A dense mixed EP fit on a fresh Numba cache compiles the dispatch closures and the sweeps;
    a later process's first FITC-EP fit compiles the FITC sweeps only, loading the closures from
    the cache (each keyed by its name, not by its cells, whose pickles differ in every process:
    keyed so, they would compile in every process and add to the cache); a third process's
    dense and FITC fits compile nothing."""
    cache = {"NUMBA_CACHE_DIR": str(tmp_path)}
    cold = _python(COLD_FIT, "gbp", "dense", **cache)
    fitc = _python(COLD_FIT, "gbp", "fitc", **cache)
    warm = _python(COLD_FIT, "gbp", "dense", "fitc", **cache)
    assert cold["sweeps"] > 0 and cold["dispatch"] == 2, cold
    assert fitc["sweeps"] > 0 and fitc["dispatch"] == 0, fitc
    assert warm["sweeps"] == 0 and warm["dispatch"] == 0, warm


def test_a_sweeps_index_with_entries_of_other_processes_closures_is_saved(tmp_path):
    """A process that compiles a sweep whose cache index has entries for closures it has not made
    (other part combinations' dispatch) rebuilds their dispatchers, which Numba keeps only among
    its last NUMBA_FUNCTION_CACHE_SIZE; 2 here, so that without gpdsl/_jit/mixed_sites.py's
    unbounded deque the save of the index failed (ReferenceError: underlying object has vanished)."""
    cache = {"NUMBA_CACHE_DIR": str(tmp_path)}
    for parts in ("gbp", "gg"):
        _python(COLD_FIT, parts, "dense", **cache)
    assert _python(COLD_FIT, "gb", "dense", NUMBA_FUNCTION_CACHE_SIZE="2", **cache)["sweeps"] > 0



def test_qp_algorithm_1_takes_shared_inducing_inputs_of_a_multi_output_model():
    """QP(hyperparameters="qp")'s eq. 4 at fixed sites with Z (M, D) shared by the outputs: its
    value is the one at Z's long copies (gpdsl.multioutput.expand_inducing), and its dZ (M, D) is
    the sum over the copies, equal to central differences of the value in Z (rtol 1e-6)."""
    from gpdsl.methods.quantile_propagation import evaluate_at_sites, qp_sites
    from gpdsl.multioutput import expand_inducing

    spec = gd.inference.QP(hyperparameters="qp")
    model = _model(spec, inducing=gd.inducing.Fixed(np.array([[-1.5], [-0.3], [0.6], [1.7]])))
    values = _values(model)
    Z = np.array([[-1.5], [-0.3], [0.6], [1.7]])
    kernel, likelihood = model.bind(values)
    sites = qp_sites(kernel, likelihood.for_rows(X), X, Y, expand_inducing(Z, P), spec=spec)
    ev = evaluate_at_sites(model, values, X, Y, Z, spec=spec, sites=sites)
    long = evaluate_at_sites(model, values, X, Y, expand_inducing(Z, P), spec=spec, sites=sites, need_grad=False)
    assert ev.log_evidence == long.log_evidence
    assert ev.dZ.shape == Z.shape
    fd = central_difference(lambda z: evaluate_at_sites(model, values, X, Y, z, spec=spec, sites=sites,
                                                        need_grad=False).log_evidence, Z)
    np.testing.assert_allclose(ev.dZ, fd, rtol=1e-6, atol=1e-8)
