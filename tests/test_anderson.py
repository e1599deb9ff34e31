"""gpdsl.methods.common.Anderson, the extrapolation that Pólya-Gamma's and logistic-softmax's
accelerated updates share, against the fixed point of a linear map solved directly and against
the type-II formula on the whole window stacked (Walker & Ni 2011, eq. 1.3)."""
import numpy as np
import pytest

from gpdsl.methods.common import Anderson


def _stacked_formula(points, targets):
    """g_k - dG gamma with gamma = argmin |r_k - dR gamma|, from the stacked window (the
    history's independent computation)."""
    G = np.array(targets)
    R = G - np.array(points)
    dR, dG = np.diff(R, axis=0), np.diff(G, axis=0)
    gamma = np.linalg.lstsq(dR.T, R[-1], rcond=None)[0]
    return G[-1] - dG.T @ gamma


def _linear_map(P, seed=0):
    rng = np.random.default_rng(seed)
    G = 0.4 * rng.standard_normal((P, P)) / np.sqrt(P)
    b = rng.standard_normal(P)
    return (lambda x: G @ x + b), np.linalg.solve(np.eye(P) - G, b), rng


def test_anderson_on_a_linear_map_with_full_memory_lands_on_its_fixed_point():
    # x <- G x + b in P = 4 dimensions (spectral radius < 1): type-II Anderson over P + 1 plain
    # iterates spans the residual space, so its proposal is (I - G)^-1 b up to rounding.
    P = 4
    g, exact, rng = _linear_map(P)
    points = [rng.standard_normal(P)]
    for _ in range(P):
        points.append(g(points[-1]))
    history = Anderson(memory=10)
    for x in points:
        history.push(x, g(x))
    assert len(history) == P + 1
    assert np.allclose(history.proposal(), exact, rtol=0, atol=1e-9)
    # Two iterates (one difference) are exact only along that direction; the proposal still
    # moves closer than the last plain update does.
    short = Anderson(memory=10)
    for x in points[-2:]:
        short.push(x, g(x))
    assert np.linalg.norm(short.proposal() - exact) < np.linalg.norm(g(points[-1]) - exact)


@pytest.mark.parametrize("memory", [1, 3, 10])
def test_anderson_history_matches_the_stacked_window_as_it_slides_and_restarts(memory):
    # Iterates of a nonlinear map, some of them Anderson's own proposals (as the callers take
    # them), with a restart half-way: after every push the proposal equals the formula applied
    # to the window of the last memory + 1 iterates since the restart, to 1e-10 relative.
    P = 30
    g_lin, _, rng = _linear_map(P, seed=1)

    def g(x):
        return g_lin(x) + 0.1 * np.tanh(x)

    history, window = Anderson(memory), []
    x = rng.standard_normal(P)
    for step in range(25):
        target = g(x)
        history.push(x, target)
        window = (window + [(x, target)])[-(memory + 1):]
        if step == 12:
            history.restart()
            window = window[-1:]
            x = target
            continue
        if len(window) > 1:
            expected = _stacked_formula(*zip(*window))
            got = history.proposal()
            assert np.allclose(got, expected, rtol=1e-10, atol=1e-12 * np.max(np.abs(expected)))
            x = got if step % 3 else target
        else:
            x = target


def test_anderson_proposal_needs_two_iterates():
    history = Anderson(memory=5)
    history.push(np.zeros(3), np.ones(3))
    with pytest.raises(ValueError, match="two iterates"):
        history.proposal()



def test_anderson_refuses_residual_differences_that_overflowed(capfd):
    """Residuals whose differences overflow give no least squares: a LinAlgError of its own
    (damped_natural_steps then takes the plain step), before LAPACK prints to stderr."""
    history = Anderson(5)
    history.push(np.zeros(3), np.ones(3))
    history.push(np.ones(3), np.full(3, np.inf))
    with pytest.raises(np.linalg.LinAlgError, match="not finite"):
        history.proposal()
    assert "DLASCL" not in capfd.readouterr().err


def test_natural_steps_without_extrapolation_keep_no_history(monkeypatch):
    """extrapolate=False (robust-max) or a history over NATGRAD_ANDERSON_BYTES builds no Anderson
    history (it would hold ~4 vectors of the natural parameters' length a step), and still
    reaches the fixed point of x <- (x + 1) / 2 by plain steps on a concave bound."""
    from gpdsl.methods import common

    def forbidden(memory):
        raise AssertionError("an Anderson history was built")

    def at(candidate):
        x = candidate[0]
        return -float(np.sum((x - 1.0) ** 2)), ((x + 1.0) / 2.0,), x

    x0 = np.zeros(4)
    monkeypatch.setattr(common, "Anderson", forbidden)
    for options in ({"extrapolate": False}, {}):
        if not options:
            monkeypatch.setattr(common, "NATGRAD_ANDERSON_BYTES", 16 * 4 - 1)   # memory 0 for 4 entries
        point, steps, converged = common.damped_natural_steps((x0,), (np.full(4, 0.5),), -4.0, at, 1e-12, 200,
                                                              **options)
        assert converged and np.allclose(point, 1.0, atol=1e-5) and steps > 1
