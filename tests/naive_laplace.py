"""A slow, obviously-correct dense Laplace approximation on an arbitrary covariance matrix K
(N x N, formed by hand): the reference that the FITC-Laplace engine is compared with, on the
FITC covariance Kt = Q + diag(K - Q) written out in full.  Plain numpy.linalg.solve/slogdet, no
Cholesky tricks, no clipping of W after the mode."""
import numpy as np


def fitc_covariance(Kff, Kuf, Kuu, jitter):
    """Kt = Q + diag(K - Q), Q = K_fu (K_uu + jitter mean(diag K_uu) I)^-1 K_uf, dense."""
    Kj = Kuu + jitter * np.mean(np.diag(Kuu)) * np.eye(len(Kuu))
    Q = Kuf.T @ np.linalg.solve(Kj, Kuf)
    return Q + np.diag(np.diag(Kff) - np.diag(Q))


def laplace(K, derivatives, tol=1e-14, max_iter=200):
    """Mode f_hat by Newton's method in a (f = K a) with step halving, then the Laplace evidence
    log q(y) = -1/2 a^T f + sum log p(y | f) - 1/2 log|I + K W|.  ``derivatives(f)`` returns
    (log p, d1, d2, d3) elementwise.  Returns dict(log_evidence, f, a, W, var) with var the
    diagonal of (K^-1 + W)^-1 = (I + K W)^-1 K."""
    n = K.shape[0]
    a = np.zeros(n)
    f = K @ a
    lp, d1, d2, _ = derivatives(f)
    psi = np.sum(lp)
    for _ in range(max_iter):
        W = np.maximum(-d2, 0.0)
        a_new = np.linalg.solve(np.eye(n) + W[:, None] * K, W * f + d1)    # (I + W K)^-1 (W f + g)
        step = a_new - a
        for _ in range(60):
            a_try = a + step
            f_try = K @ a_try
            lp_try = derivatives(f_try)[0]
            psi_try = -0.5 * a_try @ f_try + np.sum(lp_try)
            if psi_try >= psi:
                break
            step = 0.5 * step
        else:
            break
        gain = psi_try - psi
        a, f, psi = a_try, f_try, psi_try
        lp, d1, d2, _ = derivatives(f)
        if gain < tol:
            break
    for _ in range(5):
        # Polish with exact Newton steps (W unclipped): quadratic convergence to the same
        # stationary point a = d log p(K a) where clipping W < 0 converges only linearly.
        lp, d1, d2, _ = derivatives(f)
        a = np.linalg.solve(np.eye(n) + (-d2)[:, None] * K, -d2 * f + d1)
        f = K @ a
    lp, d1, d2, d3 = derivatives(f)
    W = -d2
    sign, logdet = np.linalg.slogdet(np.eye(n) + K * W[None, :])
    assert sign > 0
    Sigma = np.linalg.solve(np.eye(n) + K * W[None, :], K)
    return {"log_evidence": -0.5 * a @ f + np.sum(lp) - 0.5 * logdet, "f": f, "a": a, "g": d1, "W": W,
            "var": np.diag(Sigma).copy()}
