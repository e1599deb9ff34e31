"""The predictive state of Exact's Kronecker path in factored form: no (N P) x (N P) array from the
fit through prediction, saving and loading.

Notation of :func:`gpdsl.methods.exact._kronecker`: rows in output-major order (row p N + i is
output p at input x_i), K = B kron K_x + D kron I_N with the noise D = diag(d) one value an output,

    B~ = D^-1/2 B D^-1/2 = U diag(lambda) U^T,    K_x = V diag(s) V^T,
    K^-1 = (U~ kron V) diag(w) (U~ kron V)^T,     U~ = D^-1/2 U,  w_ak = 1 / (lambda_a s_k + 1).

With the factor W = (U~ kron V) diag(w^1/2) of K^-1 = W W^T, the whitened basis of n new points
is b_* = W^T K_z* (N P, n), and the general path's predictive formulas hold unchanged
(:class:`gpdsl.methods.common.WhitenedPrediction`, correction I):

    mean_* = k_*^T K^-1 y = b_*^T weights,  weights = W^T y = w^1/2 * (U~^T Y V),
    cov_* = K_** - k_*^T K^-1 k_* = K_** - b_*^T b_*.

b_* costs P^2 N n + P N^2 n flops (two products along the output and the input axis of K_z*
reshaped (P, N, n)), against (N P)^2 n for the Cholesky factor's triangular solve, and the state
holds P^2 + N^2 + O(N P) numbers against the dense state's 2 (N P)^2.  The posterior covariance at X, q(u)'s
covariance, is formed only when asked for (:attr:`KroneckerState.q_cov`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import WhitenedPrediction


@dataclass
class KroneckerState(WhitenedPrediction):
    """The predictive state of an ICM on a full isotopic output-major grid (the module docstring).

    Parameters
    ----------
    Z : ndarray, shape (N P, D + 1)
        The training inputs X, long rows in output-major order.
    weights : ndarray, shape (N P,)
        Whitened weights W^T y = vec(w^1/2 * (U~^T Y V)) (row-major vec of a (P, N) matrix).
    q_mean : ndarray, shape (N P,)
        Mean of f at X: K_ff K^-1 y.
    noise : ndarray, shape (P,)
        The noise variance d_p of each output, positive.
    output_vectors : ndarray, shape (P, P)
        U, the eigenvectors of B~ = D^-1/2 B D^-1/2 (columns).
    output_values : ndarray, shape (P,)
        lambda, their eigenvalues.
    input_vectors : ndarray, shape (N, N)
        V, the eigenvectors of K_x (columns).
    input_values : ndarray, shape (N,)
        s, their eigenvalues.

    Raises
    ------
    ValueError
        Arrays of inconsistent shapes, values that are not finite, a noise variance that is not
        positive, or eigenvalues with lambda_a s_k + 1 <= 0 (no w^1/2: B~ and K_x are positive
        semi-definite, so a fit's have lambda_a s_k >= 0 up to rounding).
    """

    Z: np.ndarray
    weights: np.ndarray
    q_mean: np.ndarray
    noise: np.ndarray
    output_vectors: np.ndarray
    output_values: np.ndarray
    input_vectors: np.ndarray
    input_values: np.ndarray

    # The layout part of its file variables (gpdsl.io.layout.model_layout's ``form``).
    form = "kronecker"
    # The identity correction and no coupling of latent functions (WhitenedPrediction).
    correction = None
    coupling = None

    def __post_init__(self):
        P, N = len(self.noise), len(self.input_values)
        shapes = {"weights": (N * P,), "q_mean": (N * P,), "noise": (P,), "output_vectors": (P, P),
                  "output_values": (P,), "input_vectors": (N, N), "input_values": (N,)}
        for name, shape in shapes.items():
            if np.shape(getattr(self, name)) != shape:
                raise ValueError(f"KroneckerState: {name} must have shape {shape} (P = {P} outputs, N = {N} "
                                 f"inputs), got shape {np.shape(getattr(self, name))}")
        if np.ndim(self.Z) != 2 or len(self.Z) != N * P:
            raise ValueError(f"KroneckerState: Z must have N P = {N * P} rows, got shape {np.shape(self.Z)}")
        for name in shapes:
            bad = np.size(getattr(self, name)) - np.count_nonzero(np.isfinite(getattr(self, name)))
            if bad:
                raise ValueError(f"KroneckerState: {name} must be finite, got {bad} NaN or infinite value(s)")
        if not np.all(self.noise > 0):
            raise ValueError(f"KroneckerState: noise must be positive, got {self.noise!r}")
        denominator = np.outer(self.output_values, self.input_values) + 1.0                  # 1 / w (P, N)
        if not np.all(denominator > 0):
            a, k = np.unravel_index(np.argmin(denominator), denominator.shape)
            raise ValueError(f"KroneckerState: output_values and input_values must have lambda_a s_k + 1 > 0 (the "
                             f"eigenvalues of positive semi-definite B~ and K_x), got {float(denominator[a, k]) - 1.0!r} "
                             f"at a = {a}, k = {k} (lambda_a = {float(self.output_values[a])!r}, "
                             f"s_k = {float(self.input_values[k])!r})")
        # Derived once, deterministically, so that a loaded state predicts with the very same numbers.
        self._scaled_vectors = self.output_vectors / np.sqrt(self.noise)[:, None]            # U~ (P, P)
        self._root_w = 1.0 / np.sqrt(denominator)                                             # w^1/2 (P, N)

    @property
    def grid(self):
        """(P, N): the outputs and the inputs of the grid."""
        return self._root_w.shape

    def basis(self, Kzs):
        """The whitened basis b_* = W^T K_z* (module docstring).

        Parameters
        ----------
        Kzs : ndarray, shape (N P, n)
            Cross-covariance between the training rows Z and n new long rows.

        Returns
        -------
        ndarray, shape (N P, n)
            Row a N + k: w_ak^1/2 sum_pi U~_pa V_ik K_z*[p N + i, :].

        Raises
        ------
        ValueError
            If Kzs is not (N P, n).
        """
        P, N = self.grid
        if np.ndim(Kzs) != 2 or len(Kzs) != N * P:
            raise ValueError(f"KroneckerState.basis: Kzs must have shape ({N * P}, n), got shape {np.shape(Kzs)}")
        n = Kzs.shape[1]
        T = (self._scaled_vectors.T @ Kzs.reshape(P, N * n)).reshape(P, N, n)    # along the outputs: U~^T
        T = np.matmul(self.input_vectors.T, T)                                     # along the inputs: V^T
        T *= self._root_w[:, :, None]
        return T.reshape(P * N, n)

    @property
    def q_cov(self):
        """The posterior covariance of f at X, formed on demand: an (N P, N P) array, P N^3 + P^3 N^2
        flops (the state itself holds no such array; a file holds the factors).

        q_cov = K_ff - K_ff K^-1 K_ff = (U^- kron V) diag(lambda s w) (U^- kron V)^T, U^- = D^1/2 U,
        since K_ff = (U^- kron V) diag(lambda s) (U^- kron V)^T and U^-^T U~ = I: each eigenvalue
        lambda s / (lambda s + 1) in [0, 1), never the difference of two large numbers.

        Returns
        -------
        ndarray, shape (N P, N P)
        """
        P, N = self.grid
        U_bar = np.sqrt(self.noise)[:, None] * self.output_vectors
        V, s = self.input_vectors, self.input_values
        ls = np.outer(self.output_values, s)
        ratio = ls / (ls + 1.0)                                                    # lambda s w (P, N)
        T = np.stack([(V * ratio[a]) @ V.T for a in range(P)])                     # (P, N, N)
        pairs = (U_bar[:, None, :] * U_bar[None, :, :]).reshape(P * P, P)          # [(p, q), a]
        cov = (pairs @ T.reshape(P, N * N)).reshape(P, P, N, N).transpose(0, 2, 1, 3).reshape(P * N, P * N)
        return 0.5 * (cov + cov.T)

    def saved_arrays(self):
        """The arrays a posterior file holds of this state, by variable name
        (:data:`gpdsl.io.layout.KRONECKER_LAYOUT`): Z, q_mean, the whitened weights and the factors.

        Returns
        -------
        dict of str to ndarray
        """
        return {"Z": self.Z, "q_mean": self.q_mean, "predictive_whitened_weights": self.weights,
                "predictive_kronecker_noise": self.noise, "predictive_kronecker_output_vectors": self.output_vectors,
                "predictive_kronecker_output_values": self.output_values,
                "predictive_kronecker_input_vectors": self.input_vectors,
                "predictive_kronecker_input_values": self.input_values}

    @classmethod
    def from_targets(cls, X, y, q_mean, noise, output_vectors, output_values, input_vectors, input_values):
        """The state of a fit to targets y: its weights W^T y = vec(w^1/2 * (U~^T Y V)) taken with
        the state's own W (:meth:`basis` of y as one column), so that the mean b_*^T weights is
        k_*^T W W^T y = k_*^T K^-1 y.

        Parameters
        ----------
        X : ndarray, shape (N P, D + 1)
            The training rows (``Z``).
        y : ndarray, shape (N P,)
            Their targets.
        q_mean, noise, output_vectors, output_values, input_vectors, input_values
            As the class's parameters.

        Returns
        -------
        KroneckerState
        """
        state = cls(Z=X, weights=np.zeros_like(q_mean), q_mean=q_mean, noise=noise, output_vectors=output_vectors,
                    output_values=output_values, input_vectors=input_vectors, input_values=input_values)
        state.weights = state.basis(y[:, None])[:, 0]
        return state

    @classmethod
    def from_saved(cls, arrays):
        """The state of :meth:`saved_arrays` (a file's variables, checked by :func:`gpdsl.load`).

        Parameters
        ----------
        arrays : mapping of str to ndarray
            By variable name, as :meth:`saved_arrays` names them.

        Returns
        -------
        KroneckerState

        Raises
        ------
        ValueError
            As the constructor.
        """
        return cls(Z=arrays["Z"], weights=arrays["predictive_whitened_weights"], q_mean=arrays["q_mean"],
                   noise=arrays["predictive_kronecker_noise"],
                   output_vectors=arrays["predictive_kronecker_output_vectors"],
                   output_values=arrays["predictive_kronecker_output_values"],
                   input_vectors=arrays["predictive_kronecker_input_vectors"],
                   input_values=arrays["predictive_kronecker_input_values"])


__all__ = ["KroneckerState"]
