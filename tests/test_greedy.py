"""Greedy inducing-point selection (GV / HGV, thesis 2.7.2 and 3.3.2; Titsias 2009 section 3.2)
against dense recomputation from scratch, the Pólya-Gamma oracle and the library's VFE bound."""
import json
import tomllib

import numpy as np
import pytest

import gpdsl as gd
from naive import bound_pair
from gpdsl.io import spec
from gpdsl._jit import greedy as jit_greedy
from gpdsl.inducing import GreedyBound, GreedyVariance, SelectionContext
from gpdsl.methods import collapsed

from conftest import shared_path
import naive

EPS = 1e-12          # the jitter the selection adds to diag(K_ff) and at each pivot (thesis code)
KINDS = {"se": gd.kernels.SquaredExponential, "m32": gd.kernels.Matern32, "m52": gd.kernels.Matern52}


def _problem(seed, n=60, dim=3):
    """Random inputs, a random stationary kernel, its jittered dense Gram (naive) and weights."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, dim))
    kind = list(KINDS)[seed % 3]
    ls, var = rng.uniform(0.8, 1.6), rng.uniform(0.5, 2.0)
    kernel = KINDS[kind](lengthscale=ls, variance=var)
    values = {"kernel.lengthscale": np.array(ls), "kernel.variance": np.array(var)}
    K = naive.kernel(X, X, ls, var, kind) + EPS * np.eye(n)
    w = rng.gamma(2.0, 1.0, n)
    return X, kernel, values, K, w, rng


def _rel(a, b):
    return np.max(np.abs(np.asarray(a) - np.asarray(b)) / np.abs(np.asarray(b)))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("weighted", [False, True])
def test_gv_and_hgv_match_the_dense_reference(seed, weighted):
    X, kernel, values, K, w, _ = _problem(seed)
    if seed == 4:
        w[::7] = 0.0          # points without information are never picked
    ctx = SelectionContext(kernel, values, weights=w)
    ref_w = w if weighted else None

    sel = GreedyVariance(m=15, weighted=weighted).select(X, None, ctx)
    idx, traces = naive.greedy_variance(K, ref_w, m=15)
    assert sel.stopped == "m"
    np.testing.assert_array_equal(sel.indices, idx)
    np.testing.assert_array_equal(sel.Z, X[idx])
    assert _rel(sel.criterion, traces) < 1e-8          # measured <= 1.5e-15

    # tol mode with the same rule: a tol halfway (geometrically) between the traces after 9 and
    # 10 picks must stop at 10 points.
    tol = np.sqrt(traces[8] * traces[9])
    sel = GreedyVariance(tol=tol, weighted=weighted).select(X, None, ctx)
    idx, traces = naive.greedy_variance(K, ref_w, tol=tol)
    assert sel.stopped == "tol" and len(sel.indices) == len(idx) == 10
    np.testing.assert_array_equal(sel.indices, idx)
    assert _rel(sel.criterion, traces) < 1e-8
    if weighted and seed == 4:
        assert np.all(w[sel.indices] > 0)


def test_unweighted_rule_ignores_weights_and_uniform_weights_give_gv():
    X, kernel, values, _, w, _ = _problem(7)
    gv = GreedyVariance(m=12).select(X, None, SelectionContext(kernel, values, weights=w))
    hgv_none = GreedyVariance(m=12, weighted=True).select(X, None, SelectionContext(kernel, values))
    hgv = GreedyVariance(m=12, weighted=True).select(X, None, SelectionContext(kernel, values, weights=w))
    np.testing.assert_array_equal(gv.indices, hgv_none.indices)
    np.testing.assert_array_equal(gv.criterion, hgv_none.criterion)
    assert not np.array_equal(gv.indices, hgv.indices)


@pytest.mark.parametrize("weighted", [False, True])
def test_tol_stops_when_the_trace_first_falls_below_tol(weighted):
    X, kernel, values, _, w, _ = _problem(11, n=80, dim=2)
    ctx = SelectionContext(kernel, values, weights=w)
    full = GreedyVariance(m=40, weighted=weighted).select(X, None, ctx).criterion
    assert np.all(np.diff(full) <= 0)
    for tol in (full[0] * 1.01, full[0], 0.5 * (full[4] + full[5]), full[20], full[20] * 0.999999):
        sel = GreedyVariance(tol=tol, weighted=weighted).select(X, None, ctx)
        M = len(sel.indices)
        assert sel.stopped == "tol"
        assert sel.criterion[-1] < tol
        assert np.all(sel.criterion[:-1] >= tol)
        assert M == int(np.argmax(full < tol)) + 1          # the first pick that takes it below tol
        np.testing.assert_array_equal(sel.criterion, full[:M])
    # m and tol together: whichever comes first.
    assert GreedyVariance(m=3, tol=full[20]).select(X, None, ctx).stopped == "m"


def test_hgv_reproduces_the_polya_gamma_oracle_selection():
    ref = json.loads(shared_path("oracles", "pgpr_synth.json").read_text())
    data = np.loadtxt(shared_path("oracles", "data", "synth_train_std.csv"), delimiter=",")
    X, theta = data[:, :2], np.array(ref["results"]["theta_star"])
    ctx = SelectionContext(gd.kernels.SquaredExponential(1.0, 1.0),
                           {"kernel.lengthscale": np.array(1.0), "kernel.variance": np.array(1.0)}, weights=theta)
    sel = GreedyVariance(m=20, weighted=True).select(X, None, ctx)
    want = ref["extras"]["hgv_selection_M20"]
    assert sel.stopped == "m"
    np.testing.assert_array_equal(sel.indices, want["indices_0based"])
    # The oracle lists the trace after picks 1..19 (its loop stops before the 20th update).
    traces = np.array(want["trace_criterion_after_each_pick"])
    assert len(traces) == 19
    assert _rel(sel.criterion[:19], traces) < 1e-8           # measured 1.6e-15
    assert _rel(sel.criterion, naive.greedy_variance(naive.kernel(X, X, 1.0, 1.0, "se") + EPS * np.eye(len(X)),
                                                     theta, m=20)[1]) < 1e-8


def test_selection_stops_when_only_duplicates_are_left_and_at_max_m():
    rng = np.random.default_rng(3)
    base = rng.standard_normal((5, 2))
    X = base[rng.permutation(np.repeat(np.arange(5), 3))]          # 15 rows, 5 distinct
    kernel = gd.kernels.SquaredExponential(0.7, 1.0)
    values = {"kernel.lengthscale": np.array(0.7), "kernel.variance": np.array(1.0)}
    ctx = SelectionContext(kernel, values, weights=rng.gamma(2.0, 1.0, 15), targets=rng.standard_normal(15))
    for spec_ in (GreedyVariance(m=10), GreedyVariance(tol=1e-30, weighted=True), GreedyBound(10, working_set=4)):
        sel = spec_.select(X, None, ctx)
        assert sel.stopped == "exhausted"
        assert len(sel.indices) == 5 and len({tuple(z) for z in sel.Z}) == 5
    # the 10 duplicates keep the residual floor of about 2e-12 each, the 5 picked points 0
    assert 0 < GreedyVariance(m=10).select(X, None, ctx).criterion[-1] < 15 * 2.1e-12

    X, kernel, values, _, _, _ = _problem(2)
    sel = GreedyVariance(tol=1e-30, max_m=7).select(X, None, SelectionContext(kernel, values))
    assert sel.stopped == "max_m" and len(sel.indices) == 7
    sel = GreedyVariance(tol=1e-30, max_m=500).select(X[:6], None, SelectionContext(kernel, values))
    assert sel.stopped == "exhausted" and sorted(sel.indices) == list(range(6))


def test_greedy_bound_never_picks_duplicates_of_spread_out_inputs():
    """Every row twice, in 10-D with spread 3 around an offset: the columns' rounding where the
    kernel centres the inputs at their mean (~1e-13 at k(x_j, x_j)) once left a duplicate's
    residual above the floor, and GreedyBound picked duplicates in 51 of these 72 problems."""
    kernel = gd.kernels.SquaredExponential(1.0, 1.0)
    for trial in range(72):
        rng = np.random.default_rng(trial)
        X0 = rng.normal(size=(20, 10)) * 3 + rng.normal(size=10) * 5
        values = {"kernel.lengthscale": np.array(0.5 + trial % 3), "kernel.variance": np.array(1.0)}
        ctx = SelectionContext(kernel, values, weights=np.full(40, 0.25), targets=0.5 * np.sign(rng.normal(size=40)))
        sel = GreedyBound(m=25).select(np.r_[X0, X0], None, ctx)
        assert len({tuple(z) for z in sel.Z}) == len(sel.indices), trial
        assert sel.stopped == ("exhausted" if len(sel.indices) < 25 else "m")


# ---------------------------------------------------------------------------------- GreedyBound

def _bound_problem(seed, n=40):
    X, kernel, values, K, w, rng = _problem(seed, n=n, dim=2)
    r = w * rng.standard_normal(n)          # r = w * ytilde
    const = -0.5 * n * np.log(2 * np.pi) + 0.5 * np.sum(np.log(w)) - 0.5 * np.sum(r * r / w)
    return X, kernel, values, K, w, r, const, rng


def _dense_state(K, S, w, r, cap):
    """Factors of GreedyBound's state for the set S, computed densely from scratch."""
    n = K.shape[0]
    C, LB, c = np.zeros((cap, n)), np.zeros((cap, cap)), np.zeros(cap)
    if S:
        L = np.linalg.cholesky(K[np.ix_(S, S)])
        C[:len(S)] = np.linalg.solve(L, K[S])
        Cs = C[:len(S)]
        LB[:len(S), :len(S)] = np.linalg.cholesky(np.eye(len(S)) + (Cs * w) @ Cs.T)
        c[:len(S)] = np.linalg.solve(LB[:len(S), :len(S)], Cs @ r)
    d = np.diag(K) - np.sum(C[:len(S)] ** 2, 0)
    return C, LB, c, d


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("size", [0, 1, 6])
def test_each_candidate_score_is_the_dense_bound_increase(seed, size):
    X, _, _, K, w, r, _, rng = _bound_problem(seed)
    S = list(rng.choice(len(X), size=size, replace=False))
    C, LB, c, d = _dense_state(K, S, w, r, size + 1)
    cand = np.array([j for j in range(len(X)) if j not in S])
    K_cand = np.ascontiguousarray((K - EPS * np.eye(len(X)))[cand])        # columns without jitter
    gains = jit_greedy.bound_scores(C, size, cand, K_cand, d, w, r, LB, c, EPS)[0]
    before = naive.vfe_bound_weighted(K, S, w, r)
    dense = np.array([naive.vfe_bound_weighted(K, S + [j], w, r) - before for j in cand])
    np.testing.assert_allclose(gains, dense, rtol=0, atol=1e-8 * abs(before))     # measured <= 1.2e-14 |F|
    assert np.all(gains >= 0)          # Titsias' Proposition 1 for every candidate


@pytest.mark.parametrize("seed", range(3))
def test_greedy_bound_picks_the_best_of_each_working_set_and_reports_the_bound(seed):
    n, ws, m = (40, 10, 12) if seed < 2 else (15, 10, 12)      # n = 15: the last steps take all
    X, kernel, values, K, w, r, const, _ = _bound_problem(seed, n=n)
    sel = GreedyBound(m, working_set=ws, seed=seed).select(X, None, SelectionContext(kernel, values, w, r))
    assert sel.stopped == "m" and len(sel.indices) == m
    rng = np.random.default_rng(seed)
    S = []
    for i, j in enumerate(sel.indices):
        pool = np.array([p for p in range(n) if p not in S])
        J = pool if len(pool) <= ws else rng.choice(pool, size=ws, replace=False)
        scores = [naive.vfe_bound_weighted(K, S + [q], w, r) for q in J]
        assert j == J[int(np.argmax(scores))]
        S.append(int(j))
        assert abs(sel.criterion[i] + const - max(scores)) < 1e-8 * abs(max(scores))   # measured <= 8.5e-16
    assert sel.criterion[0] > -0.5 * np.sum(w * np.diag(K))       # better than the empty set


def test_greedy_bound_with_gaussian_weights_is_the_vfe_bound():
    X, y = gd.datasets.snelson_like(n=120, seed=1)
    noise = 0.3
    kernel = gd.kernels.SquaredExponential(0.8, 1.2)
    values = {"kernel.lengthscale": np.array(0.8), "kernel.variance": np.array(1.2),
              "likelihood.variance": np.array(noise)}
    w = np.full(len(y), 1.0 / noise)
    sel = GreedyBound(10, working_set=30).select(X, y, SelectionContext(kernel, values, w, w * y))
    const = -0.5 * len(y) * np.log(2 * np.pi) + 0.5 * np.sum(np.log(w)) - 0.5 * np.sum(w * y * y)
    vfe = [collapsed.evaluate(*bound_pair(kernel, gd.likelihoods.Gaussian(noise), values), X, y, X[sel.indices[:k]], fitc=False,
                              jitter=0.0, need_grad=False).log_evidence for k in range(1, 11)]
    assert _rel(sel.criterion + const, vfe) < 1e-8           # measured 1e-11 (the 1e-12 jitter)


@pytest.mark.parametrize("seed", range(6))
def test_the_bound_never_decreases_as_points_are_added(seed):
    """Titsias (2009) Proposition 1 / thesis B.4 on random data and random point orders: the
    weighted dense bound, the library's plain VFE bound and GreedyBound's criterion."""
    X, kernel, values, K, w, r, _, rng = _bound_problem(seed, n=30)
    order = list(rng.permutation(len(X))[:15])
    dense = [naive.vfe_bound_weighted(K, order[:k], w, r) for k in range(16)]
    assert np.all(np.diff(dense) >= -1e-10 * np.abs(dense[1:]))

    y = r / w
    noise = float(rng.uniform(0.05, 1.0))
    values = {**values, "likelihood.variance": np.array(noise)}
    vfe = [collapsed.evaluate(*bound_pair(kernel, gd.likelihoods.Gaussian(noise), values), X, y, X[order[:k]], fitc=False,
                              jitter=0.0, need_grad=False).log_evidence for k in range(1, 16)]
    assert np.all(np.diff(vfe) >= -1e-10 * np.abs(vfe[1:]))

    crit = GreedyBound(20, working_set=5, seed=seed).select(X, None, SelectionContext(kernel, values, w, r)).criterion
    assert np.all(np.diff(crit) >= -1e-10 * np.abs(crit[1:]))


# ------------------------------------------------------------------------------ API and validation

def test_other_specs_select_through_initial_z_and_optimized_passes_the_context():
    X, kernel, values, _, w, _ = _problem(5)
    ctx = SelectionContext(kernel, values, weights=w)
    sel = gd.inducing.KMeans(4, seed=0).select(X, None, ctx)
    assert sel.indices is None and sel.criterion is None and sel.stopped is None
    np.testing.assert_array_equal(sel.Z, gd.inducing.KMeans(4, seed=0).initial_Z(X, None))
    inner = GreedyVariance(m=6, weighted=True)
    direct = inner.select(X, None, ctx)
    wrapped = gd.inducing.Optimized(inner)
    np.testing.assert_array_equal(wrapped.initial_Z(X, None, ctx), direct.Z)
    np.testing.assert_array_equal(wrapped.select(X, None, ctx).indices, direct.indices)
    assert wrapped.optimize and not wrapped.reinit and GreedyVariance(m=2, reinit=True).reinit
    assert gd.inducing.INDUCING["GreedyVariance"] is GreedyVariance
    assert gd.inducing.INDUCING["GreedyBound"] is GreedyBound


def test_greedy_specs_round_trip_through_dicts_and_toml():
    for obj in (GreedyVariance(m=20), GreedyVariance(tol=1e-3, max_m=40, weighted=True, reinit=True, reinit_tol=1e-4,
                                                    max_reinit=3),
                GreedyBound(7, working_set=50, seed=2, reinit=True), gd.inducing.Optimized(GreedyVariance(m=3)),
                GreedyVariance(tol=1e-3, reinit=True, first_round_max_m=None)):   # None against default 20
        assert spec.component_from_dict("inducing", spec.component_to_dict(obj)) == obj
    text = '[inducing]\ntype = "GreedyVariance"\ntol = 1\nweighted = true\nmax_m = 30\n'
    assert spec.component_from_dict("inducing", tomllib.loads(text)["inducing"]) == \
        GreedyVariance(tol=1, weighted=True, max_m=30)
    text = '[inducing]\ntype = "GreedyVariance"\ntol = 1\nreinit = true\nfirst_round_max_m = "none"\n'
    assert spec.component_from_dict("inducing", tomllib.loads(text)["inducing"]).first_round_max_m is None


@pytest.mark.parametrize("kwargs, match", [
    ({}, "GreedyVariance: give m"),
    ({"m": 0}, "GreedyVariance: m must be a positive integer, got 0"),
    ({"m": 2.5}, "m must be a positive integer, got 2.5"),
    ({"m": True}, "m must be a positive integer, got True"),
    ({"tol": 0.0}, "GreedyVariance: tol must be a positive finite number, got 0.0"),
    ({"tol": -1.0}, "tol must be a positive finite number, got -1.0"),
    ({"tol": float("inf")}, "tol must be a positive finite number, got inf"),
    ({"tol": float("nan")}, "tol must be a positive finite number, got nan"),
    ({"m": 10, "max_m": 5}, "GreedyVariance: m = 10 is larger than max_m = 5"),
    ({"m": 3, "max_m": 0}, "max_m must be a positive integer, got 0"),
    ({"m": 3, "weighted": 1}, "GreedyVariance: weighted must be True or False, got 1"),
    ({"m": 3, "reinit": "yes"}, "reinit must be True or False, got 'yes'"),
    ({"m": 3, "reinit_tol": 0}, "reinit_tol must be a positive finite number, got 0"),
    ({"m": 3, "max_reinit": 0}, "max_reinit must be a positive integer, got 0"),
    ({"tol": 1.0, "first_round_max_m": 0}, "GreedyVariance: first_round_max_m must be a positive integer, got 0"),
])
def test_greedy_variance_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GreedyVariance(**kwargs)


def test_first_round_cap_applies_to_the_first_round_of_an_automatic_m_loop_only():
    """first_round_max_m stops the first selection of a reinit loop with M chosen by tol (the
    context says first_round) after that many points -- the first picks of the uncapped rule --
    and changes nothing else: later rounds, m given, no reinit, the cap off, or tol reached first."""
    X, kernel, values, _, w, _ = _problem(3, n=80)
    first = SelectionContext(kernel, values, weights=w, first_round=True)
    later = SelectionContext(kernel, values, weights=w)
    spec = GreedyVariance(tol=1e-12, max_m=40, weighted=True, reinit=True, first_round_max_m=7)
    capped, full = spec.select(X, None, first), spec.select(X, None, later)
    assert capped.stopped == "first_round_max_m" and len(capped.indices) == 7
    assert full.stopped == "max_m" and len(full.indices) == 40
    np.testing.assert_array_equal(capped.indices, full.indices[:7])
    np.testing.assert_allclose(capped.criterion, full.criterion[:7], rtol=1e-12)
    for other in (GreedyVariance(m=12, weighted=True, reinit=True, first_round_max_m=7),
                  GreedyVariance(tol=1e-12, max_m=40, weighted=True, first_round_max_m=7),
                  GreedyVariance(tol=1e-12, max_m=40, weighted=True, reinit=True, first_round_max_m=None)):
        chosen = other.select(X, None, first)
        assert chosen.stopped in ("m", "max_m") and len(chosen.indices) == (other.m or other.max_m)
    loose = GreedyVariance(tol=full.criterion[3], max_m=40, weighted=True, reinit=True, first_round_max_m=7)
    reached = loose.select(X, None, first)
    assert reached.stopped == "tol" and len(reached.indices) == 5


@pytest.mark.parametrize("kwargs, match", [
    ({"m": 0}, "GreedyBound: m must be a positive integer, got 0"),
    ({"m": 3, "working_set": 0}, "GreedyBound: working_set must be a positive integer, got 0"),
    ({"m": 3, "seed": -1}, "GreedyBound: seed must be a non-negative integer or None, got -1"),
    ({"m": 3, "max_reinit": 1.5}, "GreedyBound: max_reinit must be a positive integer, got 1.5"),
])
def test_greedy_bound_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GreedyBound(**kwargs)


def test_selection_rejects_missing_context_and_bad_inputs():
    X, kernel, values, _, w, _ = _problem(1, n=10)
    ctx = SelectionContext(kernel, values, weights=w, targets=w)
    with pytest.raises(ValueError, match="GreedyVariance: m = 11 inducing points is larger than the N = 10"):
        GreedyVariance(m=11).select(X, None, ctx)
    with pytest.raises(ValueError, match="GreedyBound: m = 11 inducing points is larger than the N = 10"):
        GreedyBound(11).select(X, None, ctx)
    with pytest.raises(TypeError, match="GreedyVariance: selection needs a SelectionContext.*context=None"):
        GreedyVariance(m=3).initial_Z(X, None)
    with pytest.raises(TypeError, match="GreedyBound: selection needs a SelectionContext"):
        GreedyBound(3).select(X, None)
    with pytest.raises(TypeError, match="GreedyBound: context.weights is None"):
        GreedyBound(3).select(X, None, SelectionContext(kernel, values, targets=w))
    with pytest.raises(TypeError, match="GreedyBound: context.targets is None"):
        GreedyBound(3).select(X, None, SelectionContext(kernel, values, weights=w))
    with pytest.raises(ValueError, match=r"GreedyVariance: context.weights must be an \(10,\) array.*shape \(9,\)"):
        GreedyVariance(m=3, weighted=True).select(X, None, SelectionContext(kernel, values, weights=w[:9]))
    with pytest.raises(ValueError, match=r"GreedyBound: context.weights must be .*>= 0.*min -1.0"):
        GreedyBound(3).select(X, None, SelectionContext(kernel, values, weights=-np.ones(10), targets=w))
    with pytest.raises(ValueError, match=r"GreedyBound: context.targets must be an \(10,\) array, finite"):
        GreedyBound(3).select(X, None, SelectionContext(kernel, values, weights=w, targets=np.full(10, np.nan)))
    with pytest.raises(ValueError, match="GreedyVariance: no training point has a positive"):
        GreedyVariance(m=3, weighted=True).select(X, None, SelectionContext(kernel, values, weights=np.zeros(10)))
