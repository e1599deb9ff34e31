"""Dense NumPy formulas and JSON writing shared by the multi-output oracle scripts (issue 48).

Imported by ``oracle_multioutput_gpy.py`` (run in /tmp/peer-gpy) and
``oracle_multioutput_gpytorch.py`` (run in /tmp/peer-gpytorch); it needs NumPy only, so that each
peer environment can import it and gpdsl is never imported.

Conventions (gpdsl's, issue 48's design): a multi-output kernel is a list of components
q = 0..Q-1, each a dict ``{"kernel": "SquaredExponential" | "Matern32", "variance": float,
"lengthscale": float or (D,), "W": (P, rank), "kappa": (P,)}``, with

    K((x, p), (x', p')) = sum_q B_q[p, p'] k_q(x, x'),   B_q = W_q W_q^T + diag(kappa_q),
    k_q(x, x') = variance_q * exp(-r^2 / 2)                        (SquaredExponential)
               = variance_q * (1 + sqrt(3) r) * exp(-sqrt(3) r)     (Matern32),
    r^2 = sum_d (x_d - x'_d)^2 / lengthscale_d^2,

and y_i = f(x_i, p_i) + eps_i, eps_i ~ N(0, noise_variance[p_i]). Data in the long layout:
X_long (n, D+1) with the output index in the last column, output-major (all rows of output 0
first, then output 1, ...).
"""
import json
import platform
import sys

import numpy as np


def stationary(X1, X2, lengthscale, variance, kernel):
    """Dense base kernel k(X1, X2), shape (n1, n2), for X1 (n1, D), X2 (n2, D)."""
    ls = np.broadcast_to(np.asarray(lengthscale, dtype=float), (X1.shape[1],))
    r2 = (((X1[:, None, :] - X2[None, :, :]) / ls) ** 2).sum(-1)
    if kernel == "SquaredExponential":
        return variance * np.exp(-0.5 * r2)
    if kernel == "Matern32":
        r = np.sqrt(3.0 * r2)
        return variance * (1.0 + r) * np.exp(-r)
    raise ValueError(f"stationary: kernel {kernel!r} is not 'SquaredExponential' or 'Matern32'")


def coregion(component):
    """B = W W^T + diag(kappa), shape (P, P)."""
    W = np.asarray(component["W"], dtype=float)
    return W @ W.T + np.diag(np.asarray(component["kappa"], dtype=float))


def multi_output_gram(XL1, XL2, components):
    """Dense K over long rows: sum_q B_q[p, p'] k_q(x, x'), shape (n1, n2)."""
    p1, p2 = XL1[:, -1].astype(int), XL2[:, -1].astype(int)
    K = np.zeros((len(XL1), len(XL2)))
    for c in components:
        Kx = stationary(XL1[:, :-1], XL2[:, :-1], c["lengthscale"], c["variance"], c["kernel"])
        K += coregion(c)[np.ix_(p1, p2)] * Kx
    return K


def dense_log_ml(XL, y, components, noise_variance):
    """log N(y | 0, K + diag(noise_variance[p_i])) by a Cholesky factor of the dense matrix."""
    C = multi_output_gram(XL, XL, components) + np.diag(np.asarray(noise_variance)[XL[:, -1].astype(int)])
    L = np.linalg.cholesky(C)
    a = np.linalg.solve(L, y)
    return float(-0.5 * a @ a - np.log(np.diag(L)).sum() - 0.5 * len(y) * np.log(2 * np.pi))


def dense_predict(XL, y, XL_new, components, noise_variance):
    """Latent predictive mean (m,) and full covariance (m, m) of f at the long rows XL_new."""
    C = multi_output_gram(XL, XL, components) + np.diag(np.asarray(noise_variance)[XL[:, -1].astype(int)])
    Ksf = multi_output_gram(XL_new, XL, components)
    mean = Ksf @ np.linalg.solve(C, y)
    cov = multi_output_gram(XL_new, XL_new, components) - Ksf @ np.linalg.solve(C, Ksf.T)
    return mean, cov


def _stationary_lengthscale_grad(X1, X2, lengthscale, variance, kernel):
    """dk/dlengthscale_d, shape (D, n1, n2): SE k * diff_d^2 / l_d^3; Matern32 3 var e^-s diff_d^2 / l_d^3."""
    ls = np.broadcast_to(np.asarray(lengthscale, dtype=float), (X1.shape[1],))
    diff2 = (X1[:, None, :] - X2[None, :, :]) ** 2
    r2 = (diff2 / ls**2).sum(-1)
    if kernel == "SquaredExponential":
        front = variance * np.exp(-0.5 * r2)
    else:
        front = 3.0 * variance * np.exp(-np.sqrt(3.0 * r2))
    return np.moveaxis(front[:, :, None] * diff2 / ls**3, -1, 0)


def dense_log_ml_gradient(XL, y, components, noise_variance):
    """Analytic d log ML / d natural parameter by the dense trace formula
    0.5 tr((alpha alpha^T - C^-1) dC/dtheta), alpha = C^-1 y, in the structure of the parameters:
    ({"variance", "lengthscale" (scalar, or (D,) if ARD), "W" (P, rank), "kappa" (P,)} per
    component, noise_variance (P,))."""
    p = XL[:, -1].astype(int)
    P = len(noise_variance)
    C = multi_output_gram(XL, XL, components) + np.diag(np.asarray(noise_variance)[p])
    Ci = np.linalg.inv(C)
    alpha = Ci @ y
    A = 0.5 * (np.outer(alpha, alpha) - Ci)  # d log ML = sum(A * dC)
    onehot = (p[:, None] == np.arange(P)[None, :]).astype(float)  # (n, P)
    grads = []
    for c in components:
        X = XL[:, :-1]
        Kx = stationary(X, X, c["lengthscale"], c["variance"], c["kernel"])
        B = coregion(c)
        W = np.asarray(c["W"], dtype=float)
        # dL/dB[a, b] = sum over rows i with p_i = a and cols j with p_j = b of A_ij Kx_ij.
        dB = onehot.T @ (A * Kx) @ onehot
        dls = (A[None] * B[np.ix_(p, p)][None] * _stationary_lengthscale_grad(X, X, c["lengthscale"], c["variance"],
                                                                              c["kernel"])).sum((1, 2))
        grads.append({"variance": float((A * B[np.ix_(p, p)] * Kx).sum() / c["variance"]),
                      "lengthscale": dls if np.ndim(c["lengthscale"]) == 1 else float(dls.sum()),
                      "W": (dB + dB.T) @ W, "kappa": np.diag(dB).copy()})
    return grads, onehot.T @ np.diag(A)


def flatten_gradient(components, noise):
    """The structured gradient as one flat array (components in order, keys variance, lengthscale, W,
    kappa; then noise), for comparing two of them."""
    parts = [np.ravel(np.asarray(g[k], dtype=float)) for g in components for k in ("variance", "lengthscale", "W",
                                                                                     "kappa")]
    return np.concatenate(parts + [np.ravel(noise)])


def long_from_lists(X_list, y_list):
    """Heterotopic lists -> (X_long (n, D+1), y_long (n,)), output-major."""
    XL = np.vstack([np.column_stack([X, np.full(len(X), p, dtype=float)]) for p, X in enumerate(X_list)])
    return XL, np.concatenate([np.ravel(y) for y in y_list])


def long_from_isotopic(X, Y):
    """Isotopic X (N, D), Y (N, P) with no missing entry -> long layout, output-major."""
    P = Y.shape[1]
    return long_from_lists([X] * P, [Y[:, p] for p in range(P)])


def test_grid_long(X_test, P):
    """Test inputs (T, D) for every output -> long rows (P*T, D+1), output-major."""
    return long_from_lists([X_test] * P, [np.zeros(len(X_test))] * P)[0]


def to_point_output(long_values, T, P):
    """Output-major long predictions -> (T, P) for a vector, (T, P, T, P) for a covariance."""
    v = np.asarray(long_values)
    if v.ndim == 1:
        return v.reshape(P, T).T
    return v.reshape(P, T, P, T).transpose(1, 0, 3, 2)


def central_difference(f, x, rel_step=1e-6):
    """Central differences of the scalar f at every entry of the flat array x (steps rel_step*max(1, |x|))."""
    x = np.asarray(x, dtype=float)
    g = np.empty_like(x)
    for i in range(len(x)):
        h = rel_step * max(1.0, abs(x[i]))
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        g[i] = (f(up) - f(down)) / (2 * h)
    return g


def jsonable(obj):
    """NumPy arrays and scalars -> lists and floats (json writes floats with repr: round-trip exact)."""
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def write_json(path, record):
    with open(path, "w") as fh:
        json.dump(jsonable(record), fh, indent=1)
        fh.write("\n")


def base_environment():
    return {"python": sys.version.split()[0], "numpy": np.__version__, "platform": platform.platform()}
