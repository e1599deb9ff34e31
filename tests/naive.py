"""Slow, obviously-correct dense NumPy references that the fast paths are compared with."""
import numpy as np
from scipy import stats


def kernel(X1, X2, lengthscale, variance, kind):
    """Dense stationary kernel by broadcasting; kind in {"se", "m32", "m52"}."""
    ls = np.broadcast_to(np.asarray(lengthscale, float), (X1.shape[1],))
    r2 = (((X1[:, None, :] - X2[None, :, :]) / ls) ** 2).sum(-1)
    r = np.sqrt(r2)
    if kind == "se":
        return variance * np.exp(-0.5 * r2)
    if kind == "m32":
        return variance * (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)
    return variance * (1 + np.sqrt(5) * r + 5 * r2 / 3) * np.exp(-np.sqrt(5) * r)


def exact_lml(K, noise, y):
    return stats.multivariate_normal(mean=np.zeros(len(y)), cov=K + np.diag(noise)).logpdf(y)


def exact_predict(Kff, Ksf, kss, noise, y):
    C = np.linalg.inv(Kff + np.diag(noise))
    return Ksf @ C @ y, kss - np.einsum("ij,jk,ik->i", Ksf, C, Ksf)


def nystrom(Kuu, Kuf, jitter=0.0):
    Kj = Kuu + jitter * np.mean(np.diag(Kuu)) * np.eye(len(Kuu))
    return Kuf.T @ np.linalg.solve(Kj, Kuf), Kj


def vfe_bound(Kff_diag, Kuu, Kuf, noise, y, jitter=0.0):
    """Titsias eq. (16)/(21), thesis eq. (3.1): dense N x N evaluation."""
    Q, _ = nystrom(Kuu, Kuf, jitter)
    dense = stats.multivariate_normal(mean=np.zeros(len(y)), cov=Q + np.diag(noise)).logpdf(y)
    return dense - 0.5 * np.sum((Kff_diag - np.diag(Q)) / noise)


def fitc_lml(Kff_diag, Kuu, Kuf, noise, y, jitter=0.0):
    Q, _ = nystrom(Kuu, Kuf, jitter)
    cov = Q + np.diag(Kff_diag - np.diag(Q) + noise)
    return stats.multivariate_normal(mean=np.zeros(len(y)), cov=cov).logpdf(y)


def titsias_qu(Kuu, Kuf, noise, y, jitter=0.0):
    """Optimal phi*(f_m) of Titsias eq. (17) with per-point noise (thesis eq. 3.3)."""
    _, Kj = nystrom(Kuu, Kuf, jitter)
    Sigma = np.linalg.inv(Kj + (Kuf / noise) @ Kuf.T)
    mu = Kj @ Sigma @ Kuf @ (y / noise)
    A = Kj @ Sigma @ Kj
    return mu, A, Kj


def sparse_predict(Ksu, kss, Kuu_jittered, mu, A):
    """Titsias eq. (8): q(f*) with q(u) = N(mu, A)."""
    Ki = np.linalg.inv(Kuu_jittered)
    mean = Ksu @ Ki @ mu
    var = kss - np.einsum("ij,jk,ik->i", Ksu, Ki - Ki @ A @ Ki, Ksu)
    return mean, var


def central_difference(f, x, step=1e-6):
    """Gradient of scalar f at array x by central differences (relative steps)."""
    x = np.array(x, dtype=float)
    g = np.zeros_like(x)
    for i in range(x.size):
        h = step * max(abs(x.flat[i]), 1.0)
        xp, xm = x.copy(), x.copy()
        xp.flat[i] += h
        xm.flat[i] -= h
        g.flat[i] = (f(xp) - f(xm)) / (2 * h)
    return g
