"""gpdsl.methods.common.anderson, the extrapolation that Pólya-Gamma's and logistic-softmax's
accelerated updates share, against the fixed point of a linear map solved directly."""
import numpy as np

from gpdsl.methods.common import anderson


def test_anderson_on_a_linear_map_with_full_memory_lands_on_its_fixed_point():
    # x <- G x + b in P = 4 dimensions (spectral radius < 1): type-II Anderson over P + 1 plain
    # iterates spans the residual space, so its proposal is (I - G)^-1 b up to rounding.
    rng = np.random.default_rng(0)
    P = 4
    G = 0.4 * rng.standard_normal((P, P)) / np.sqrt(P)
    b = rng.standard_normal(P)
    points = [rng.standard_normal(P)]
    for _ in range(P):
        points.append(G @ points[-1] + b)
    targets = [G @ x + b for x in points]
    exact = np.linalg.solve(np.eye(P) - G, b)
    assert np.allclose(anderson(points, targets), exact, rtol=0, atol=1e-9)
    # Two iterates (one difference) are exact only along that direction; the proposal still
    # moves closer than the last plain update does.
    assert np.linalg.norm(anderson(points[-2:], targets[-2:]) - exact) < np.linalg.norm(targets[-1] - exact)
