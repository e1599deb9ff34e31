"""The heterotopic LMC data of issue 48's sparse speed target, in NumPy alone, so that gpdsl's
benchmark (``benchmarks/bench_multioutput.py --parts sparse``) and the nearest peer's
(``benchmarks/peers/peer_multioutput_sparse.py``, GPy's environment) fit the same rows."""
import numpy as np


def lmc_data(rows, P, D, seed=0):
    """Heterotopic long rows (rows, D + 1) output-major and targets: f_p = sum_q a_qp g_q with g_q
    random-Fourier draws of an SE (lengthscale 0.2), Matern52 (0.4), Matern32 (0.8) process."""
    rng = np.random.default_rng(seed)
    counts = np.full(P, rows // P)
    counts[: rows - counts.sum()] += 1
    X = np.vstack([np.column_stack([rng.uniform(size=(n, D)), np.full(n, p)]) for p, n in enumerate(counts)])
    F = 500
    g = []
    for ls, nu in ((0.2, None), (0.4, 2.5), (0.8, 1.5)):
        # Spectral draws: Gaussian for the SE, Student t with 2 nu degrees of freedom for Matern nu.
        omega = rng.standard_normal((F, D)) / ls
        if nu is not None:
            omega /= np.sqrt(rng.chisquare(2 * nu, size=(F, 1)) / (2 * nu))
        phase, w = rng.uniform(0, 2 * np.pi, F), rng.standard_normal(F)
        g.append(np.sqrt(2.0 / F) * np.cos(X[:, :-1] @ omega.T + phase) @ w)
    A = rng.standard_normal((3, P))
    p_idx = X[:, -1].astype(int)
    f = sum(A[q, p_idx] * g[q] for q in range(3))
    return X, f + np.sqrt(0.05) * rng.standard_normal(rows)
