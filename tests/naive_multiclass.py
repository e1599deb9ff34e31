"""A slow, obviously-correct dense multi-class (softmax) Laplace approximation: the reference for
gpdsl.methods.laplace_multiclass.  Everything on the full NK-vector f (class-major: f[c N + i] is
class c at row i) with the full NK x NK block-diagonal prior and the full NK x NK negative Hessian
W = diag(pi) - Pi Pi^T (Rasmussen & Williams eq. 3.38); plain numpy.linalg.solve / slogdet, no
Cholesky factors, no block tricks."""
import numpy as np
from scipy.linalg import block_diag


def softmax(F):
    """Row-wise softmax of F (N, K)."""
    Z = F - F.max(axis=1, keepdims=True)
    E = np.exp(Z)
    return E / E.sum(axis=1, keepdims=True)


def log_likelihood(Y, F):
    """sum_i log p(y_i | f_i) for one-hot Y (N, K)."""
    Z = F.max(axis=1, keepdims=True)
    lse = (Z[:, 0] + np.log(np.exp(F - Z).sum(axis=1)))
    return float(np.sum(Y * F) - np.sum(lse))


def hessian(P):
    """W = diag(pi) - Pi Pi^T (NK x NK, class-major) for class probabilities P (N, K)."""
    n, k = P.shape
    pi = P.T.ravel()                                   # class-major
    Pi = np.vstack([np.diag(P[:, c]) for c in range(k)])   # (NK, N)
    return np.diag(pi) - Pi @ Pi.T


def prior(Kx, k):
    """The NK x NK prior: blockdiag(Kx, ..., Kx) for a shared Kx (N, N), blockdiag(Kx[0], ...,
    Kx[k-1]) for one covariance per class (k, N, N)."""
    return np.kron(np.eye(k), Kx) if np.ndim(Kx) == 2 else block_diag(*Kx)


def laplace(Kx, y, k, tol=1e-15, max_iter=200):
    """Mode, evidence and the pieces of the predictions for the prior K = :func:`prior` (Kx, k).

    Newton on the full vector: f_new = (K^-1 + W)^-1 (W f + g), taken as a_new = (I + W K)^-1 b,
    b = W f + g, each step halved until Psi = -1/2 a^T f + log p(y | f) rises.  Evidence
    log q = Psi - 1/2 log|I + K W| (a determinant of the full NK x NK matrix).  Returns a dict:
    f, a (N, K), P (N, K), W, K (NK x NK), log_evidence."""
    n = Kx.shape[-1]
    K = prior(Kx, k)
    Y = np.zeros((n, k))
    Y[np.arange(n), np.asarray(y).astype(int)] = 1.0
    yv = Y.T.ravel()
    a = np.zeros(n * k)
    f = K @ a

    def psi_of(a, f):
        return -0.5 * a @ f + log_likelihood(Y, f.reshape(k, n).T)

    def newton(f):
        """The full Newton step's a from f."""
        P = softmax(f.reshape(k, n).T)
        W = hessian(P)
        return np.linalg.solve(np.eye(n * k) + W @ K, W @ f + yv - P.T.ravel())

    def residual(a, f):
        """The mode equation's residual max |y - pi - a| (R&W eq. 3.37)."""
        return np.max(np.abs(yv - softmax(f.reshape(k, n).T).T.ravel() - a))

    psi = psi_of(a, f)
    for _ in range(max_iter):
        step = newton(f) - a
        for _ in range(60):
            a_try = a + step
            f_try = K @ a_try
            psi_try = psi_of(a_try, f_try)
            if psi_try >= psi:
                break
            step = 0.5 * step
        else:
            break
        gain = psi_try - psi
        a, f, psi = a_try, f_try, psi_try
        if gain < tol:
            break
    # Psi resolves a change only down to its rounding (~1e-14 |Psi|), which places the mode only to
    # sqrt(rounding / curvature), ~1e-7 here: finish with full Newton steps while they reduce the
    # mode equation's residual (quadratic convergence takes it to rounding in a step or two).
    for _ in range(max_iter):
        a_new = newton(f)
        f_new = K @ a_new
        if not residual(a_new, f_new) < residual(a, f):
            break
        a, f = a_new, f_new
    psi = psi_of(a, f)
    P = softmax(f.reshape(k, n).T)
    W = hessian(P)
    _, logdet = np.linalg.slogdet(np.eye(n * k) + K @ W)
    return dict(f=f.reshape(k, n).T, a=a.reshape(k, n).T, P=P, W=W, K=K, Y=Y,
                log_evidence=psi - 0.5 * logdet)


def predict(fit, Ks, kss):
    """R&W eqs. 3.40-3.43 at n* test points: Ks = k(X, X*) (N, n*), kss = k(x*, x*) (n*,), or
    one per class, (K, N, n*) and (K, n*).  Mean mu_*c = k^c_*^T (y_c - pi_c) (n*, K); covariance
    Sigma_* = diag(k^c_**) - Q_*^T (K + W^-1)^-1 Q_* with (K + W^-1)^-1 = W (I + K W)^-1 (W is
    singular) and Q_* = blockdiag(k^1_*, ..., k^K_*) (NK x K) -> (n*, K, K)."""
    n, k = fit["f"].shape
    Ks = np.broadcast_to(Ks, (k,) + np.shape(Ks)[-2:])
    kss = np.broadcast_to(kss, (k, np.shape(kss)[-1]))
    G = fit["Y"] - fit["P"]
    mean = np.stack([Ks[c].T @ G[:, c] for c in range(k)], axis=1)
    W, K = fit["W"], fit["K"]
    Rm = W @ np.linalg.inv(np.eye(n * k) + K @ W)
    cov = np.empty((Ks.shape[2], k, k))
    for s in range(Ks.shape[2]):
        Q = block_diag(*[Ks[c, :, s:s + 1] for c in range(k)])     # (NK, K)
        cov[s] = np.diag(kss[:, s]) - Q.T @ Rm @ Q
    return mean, cov
