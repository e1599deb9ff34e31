"""The Laplace approximation (Rasmussen & Williams 2006, section 3.4), dense and under the FITC
prior with inducing inputs Z (GPML's infLaplace with apxSparse, infFITC_Laplace in GPML 3).

q(f | y) = N(f_hat, (K^-1 + W)^-1) at the mode f_hat of log p(y | f) + log N(f | 0, K), with
W = -d^2 log p(y | f_hat) / df^2 (diagonal; positive for the log-concave probit and logit).

* Mode (Algorithm 3.1): Newton steps in a = K^-1 f with B = I + W^1/2 K W^1/2 = L L^T,
  b = W f + d log p, a_new = b - W^1/2 L^-T L^-1 W^1/2 K b, each step halved until
  Psi(a) = -1/2 a^T f + sum log p(y | f) rises (GPML's infLaplace searches the same line).
* Evidence (eq. 3.32): log q(y) = -1/2 a^T f_hat + sum log p(y | f_hat) - sum log diag L.
* Gradient (Algorithm 5.1, with the sign of GPML's infLaplace in the implicit term):
  d log q / d theta = 1/2 a^T C a - 1/2 tr(R C) + s2^T (C g - K R C g) for C = dK/d theta,
  g = d log p, R = W^1/2 B^-1 W^1/2 and s2 = 1/2 diag((K^-1 + W)^-1) d^3 log p; a likelihood
  hyperparameter theta (the bias, which shifts f) has sum d log p / d theta
  + 1/2 diag((K^-1 + W)^-1)^T d^3 log p / df^2 d theta + s2^T (b - K R b), b = K d^2 log p / df d theta.
* Latent offset o (the likelihood sees f + o, f ~ GP(0, K); ``offset_grad``): d log q / d o =
  a + (I - R K) s2 -- explicitly g = a and s2 (W moves with f + o), implicitly s2^T d f_hat / d o
  with d f_hat / d o = -(I + K W)^-1 K W, so (I + d f_hat / d o)^T s2 = (I + W K)^-1 s2 = (I - R K) s2
  (GPML's infLaplace dnlZ.mean, with d (f_hat + o) / d o = (I + K W)^-1).
* Prediction: the Gaussian regression with noise 1/W and targets f_hat + g / W has this
  posterior (its (K + W^-1)^-1 targets is a = g at the mode): the sites W, W f_hat + g go
  through EP's ``site_regression`` and the exact engine's whitened state (Algorithm 3.2).

FITC (inducing inputs Z): the same algorithms with K replaced by the FITC covariance
Kt = Q + diag(K - Q), Q = K_fu (K_uu + jitter)^-1 K_uf, never formed.  With L L^T = K_uu + jitter,
A = L^-1 K_uf (M, N; columns a_i) and D = diag(K - Q) = k_ii - |a_i|^2, Kt = D + A^T A, so
Kt v is O(N M).  With E = 1 + W D, r = W / E and C = I_M + A diag(r) A^T = L_C L_C^T (Woodbury
and the determinant lemma; GPML's infFITC_Laplace):

* R = W (I + Kt W)^-1 = diag(r) - diag(r) A^T C^-1 A diag(r);  log|I + Kt W| = sum log E + log|C|;
* diag((Kt^-1 + W)^-1)_i = D_i / E_i + a_i^T C^-1 a_i / E_i^2 (the posterior of f given the
  whitened inducing values v = L^-1 u, whose posterior covariance is C^-1);
* gradients: the adjoint of Kt, G = 1/2 a a^T - 1/2 R + sym(u g^T) with u = (I - R Kt) s2
  (the dense Algorithm 5.1), is carried to K_uf, K_uu (+ jitter) and diag K through
  Kt = diag(K) + Q - diag(Q): with G_off = G - diag(G),
  dF/dK_uf = 2 L^-T A G_off, dF/dK_uu = -L^-T A G_off A^T L^-1, dF/dk_ii = G_ii, where
  A R = C^-1 A diag(r) and A R A^T = I - C^-1 keep every product O(N M^2) (one chunked pass
  and one kernel VJP of K_uf per chunk; likelihood hyperparameters as dense, with Kt);
* prediction: E[v | y] = A a and Cov[v | y] = C^-1 give the whitened FITC state of
  :class:`gpdsl.methods.common.PredictiveState` (weights A a, correction I - C^-1, chol L): the
  state of ``site_regression`` on the same sites, formed without its second O(N M^2) pass and
  without its floor on W.

W < 0 (a likelihood that is not log-concave, e.g. Student-t; GPML's infLaplace and
infFITC_Laplace): each Newton iteration first tries the step with the true W, kept if it ascends
(it converges quadratically near the mode, where K^-1 + W is positive definite), else takes the
step with max(W, 0) (GPML's Wmin = 0: an ascent direction everywhere, but only linearly
convergent).  The evidence, gradients and posterior use the unclipped W at the mode: the formulas
above hold for any W with I + K W invertible (R = W (I + K W)^-1, s2 and the implicit term are
the implicit-function derivatives as before).  Dense, log|I + K W| and R come from an LU of
I + K W; FITC needs E > 0 (GPML returns NaN otherwise) and C positive definite.  A mode where
these fail, or where (K^-1 + W)^-1 is not positive, is a FloatingPointError.

The posterior (predictive state, q(f)) is N(f_hat, (K^-1 + W_+)^-1) with W_+ = max(W, 0), not
the unclipped (K^-1 + W)^-1: a negative W_i makes the Gaussian wider than the prior in some
direction, and near an outlier of a small-df Student-t (K^-1 + W nearly singular at the mode)
GPML's k_** - k_*^T (K + W^-1)^-1 k_* reached 62 times the prior variance k_** (1402 where
k_** = 22.7 in the issue's fuzz case).  With W_+ >= 0 the site precisions are non-negative, as
EP's (GPML's infEP), so 0 <= f_var <= k_** at every input; the mean k_*^T a is the mode's
whatever W (the sites (W_+, W_+ f_hat + g) have the mean f_hat, since g = K^-1 f_hat there).
Dense, the state is written with the Cholesky factor L_K of K (b_* = L_K^-1 k_*, weights
L_K^T a, correction L_K^T R_+ L_K with R_+ = W_+^1/2 B_+^-1 W_+^1/2: exact whatever jitter L_K
needed); FITC, with C_+ = I + A diag(W_+ / (1 + W_+ D)) A^T.  Probit and logit have W > 0:
their results are those of the W >= 0 code alone.
"""
from __future__ import annotations

import warnings
from functools import partial

import numpy as np
from scipy import linalg

from .. import threads
from ..chunks import add_partial, default_chunk_size, is_chunked, map_rows
from ..linalg import (JITTER_LADDER, cholesky, inverse_lower, jitter_adjoint, solve_lower, solve_upper_t)
from .collapsed import check_rows_nystrom, whitened_rows
from .common import Evaluation, PredictiveState
from .expectation_propagation import site_regression


def evaluate(kernel, likelihood, X, y, Z=None, *, tol, max_iter, need_grad=True, need_state=False,
             jitter=None, chunk_size=None, offset_grad=False):
    """Laplace log evidence, its gradients (kernel hyperparameters, likelihood's, Z) and posterior.

    X (N, D), y (N,) as the likelihood prepared them.  ``Z`` None: the dense O(N^3) method (the
    O(N^3) work uses the bulk BLAS threads; ``jitter`` and ``chunk_size`` unused).  ``Z`` (M, D):
    FITC-Laplace in O(N M^2) time and O(N M) memory; ``jitter`` None for the dynamic ladder on
    K_uu (a rung is also refused when Q_nn > K_nn, as in the collapsed FITC engine) or a fixed
    multiple of mean(diag K_uu); ``chunk_size`` rows per O(N M^2) chunk.  ``tol``: Newton stops
    when a step raises Psi by less than this (nats); ``max_iter`` steps at most, else
    FloatingPointError (the optimiser's signal to step back).

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    likelihood : gpdsl.likelihoods.Likelihood
        Bernoulli or StudentT (its log-density derivatives).
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Coded targets.
    Z : ndarray, shape (M, D), optional
        Inducing inputs (FITC-Laplace); None for the dense method.
    tol : float
        Newton stops when a step raises Psi by less than this (nats).
    max_iter : int
        Most Newton steps.
    need_grad : bool, default True
        Compute the gradients.
    need_state : bool, default False
        Build the predictive state.
    jitter : float or None, optional
        K_uu's jitter (FITC only).
    chunk_size : int, optional
        Rows per O(N M^2) chunk (FITC only).
    offset_grad : bool, default False
        ``likelihood`` sees f + o for a latent offset o: with ``need_grad``, also
        ``grads["offset"]`` (N,), d log q / d o = a + (I - R K) s2 (module docstring).

    Returns
    -------
    gpdsl.methods.common.Evaluation
        log q(y) of R&W eq. 3.32, its gradients (Algorithm 5.1), the sites (W, W f_hat + g) as
        pseudo-data and, with ``need_state``, the predictive state.

    Raises
    ------
    FloatingPointError
        Newton did not converge in ``max_iter`` steps, or the mode is not a maximum.
    """
    if Z is not None:
        ev = _evaluate_fitc(kernel, likelihood, X, y, Z, tol, max_iter, need_grad, need_state,
                            jitter, chunk_size)
    else:
        with threads.bulk(float(X.shape[0]) ** 3):
            ev = _evaluate(kernel, likelihood, X, y, tol, max_iter, need_grad, need_state)
    if not offset_grad:
        ev.grads.pop("offset", None)
    return ev


def _newton_system(K, W):
    """(sqrt W, L) with L L^T = B = I + W^1/2 K W^1/2 (positive definite for W >= 0)."""
    sw = np.sqrt(W)
    B = np.eye(K.shape[0]) + sw[:, None] * K * sw[None, :]
    L, _ = cholesky(B, 0.0, what="B = I + W^1/2 K W^1/2")
    return sw, L


class _DensePrior:
    """The dense K as find_mode uses a prior: K v and v -> R v = W^1/2 B^-1 W^1/2 v."""

    def __init__(self, K):
        self.K, self.n = K, K.shape[0]

    def mv(self, v):
        return self.K @ v

    def newton_solver(self, W):
        if np.all(W >= 0.0):
            sw, L = _newton_system(self.K, W)
            return lambda v: sw * solve_upper_t(L, solve_lower(L, sw * v))
        # Some W < 0: R = W (I + K W)^-1 by LU (find_mode keeps the step only if it ascends).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", linalg.LinAlgWarning)     # singular: raised below
            lu = linalg.lu_factor(np.eye(self.n) + self.K * W[None, :], check_finite=False)
        if not np.all(np.isfinite(lu[0])) or np.any(np.diag(lu[0]) == 0.0):
            raise FloatingPointError("I + K W is singular")
        return lambda v: W * linalg.lu_solve(lu, v, check_finite=False)


class FITCCovariance:
    """Kt = D + A^T A (module docstring), held as At = A^T (N, M) and D (N,): O(N M) memory.

    For a Dask X the rows of At stay with X's row blocks (``blocks``: Dask delayed objects,
    persisted where they were computed; ``At`` is None) and every product with A is a pass of
    Dask tasks over them; D (N,) is in memory either way.

    ``jitter`` None climbs the ladder while K_uu fails to factorise or Q_nn > K_nn (to 1e-8
    relative) somewhere, as the collapsed FITC engine does; a number fixes the rung.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The prior covariance function.
    X : ndarray or Dask array, shape (N, D)
        Training inputs.
    Z : ndarray, shape (M, D)
        Inducing inputs.
    jitter : float or None
        K_uu's jitter (None: the ladder).
    chunk_size : int or None
        Rows per block (None: automatic).

    Raises
    ------
    numpy.linalg.LinAlgError, FloatingPointError
        If the last rung still fails.
    """

    def __init__(self, kernel, X, Z, jitter, chunk_size):
        self.n, self.m = X.shape[0], Z.shape[0]
        self.chunk = chunk_size or default_chunk_size(self.n, self.m)
        self.X, self.chunked = X, is_chunked((X,))
        Kuu = kernel.gram(Z, Z)
        rungs = JITTER_LADDER if jitter is None else (float(jitter),)
        for attempt, rung in enumerate(rungs):
            try:
                self.L, self.jitter = cholesky(Kuu, rung, what="K_uu")
                _, (self.D,), blocks = map_rows(partial(_covariance_block, kernel, Z, self.L), (X,),
                                                self.chunk, width=self.m, keep=True)
                break
            except (np.linalg.LinAlgError, FloatingPointError):
                if attempt == len(rungs) - 1:
                    raise
        self.At, self.blocks = (None, blocks) if self.chunked else (np.concatenate(blocks), None)

    def products(self, *vectors):
        """A v (M,) for each v (N,) of ``vectors``, as a tuple; summed over row blocks in memory
        too, so that a Dask X with the same blocks gives the same bits."""
        return self.row_pass(_left_products, vectors, width=0)[0]       # O(n M) per block: one thread

    def combine(self, s):
        """A^T s (N,) for s (M,).

        Parameters
        ----------
        s : ndarray, shape (M,)

        Returns
        -------
        ndarray, shape (N,)
        """
        if not self.chunked:
            return self.At @ s
        _, (out,) = map_rows(partial(_right_product, s), (self.X,), self.chunk, carried=self.blocks)
        return out

    def row_pass(self, fn, rows, width=None):
        """:func:`gpdsl.chunks.map_rows` of ``fn(X_block, At_block, *row_blocks)`` over the row
        blocks of X, At and ``rows`` (a tuple of (N,) arrays); ``width`` as map_rows' (M unless
        given: O(n M^2) work per block).

        Parameters
        ----------
        fn : callable
            ``fn(X_block, At_block, *row_blocks) -> (summed, per_row)``.
        rows : tuple of ndarray
            Row-aligned (N,) arrays.
        width : int, optional
            The pass's M for the BLAS thread choice.

        Returns
        -------
        tuple
            ``(summed, per_row)`` of :func:`gpdsl.chunks.map_rows`.
        """
        if not self.chunked:
            return map_rows(fn, (self.X, self.At) + rows, self.chunk, width=self.m if width is None else width)
        return map_rows(partial(_carried_second, fn), (self.X,) + rows, self.chunk, carried=self.blocks)

    def mv(self, v):
        """Kt v, O(N M).

        Parameters
        ----------
        v : ndarray, shape (N,)

        Returns
        -------
        ndarray, shape (N,)
        """
        return self.D * v + self.combine(self.products(v)[0])

    def factor(self, W):
        """(E, r, L_C) with E = 1 + W D, r = W / E and L_C L_C^T = C = I + A diag(r) A^T.

        FloatingPointError where some E <= 0 or C is not positive definite (possible for W < 0
        only: then the mode is no maximum of the Laplace objective).

        Parameters
        ----------
        W : ndarray, shape (N,)
            Negative Hessian of log p at f.

        Returns
        -------
        E : ndarray, shape (N,)
        r : ndarray, shape (N,)
        L_C : ndarray, shape (M, M)

        Raises
        ------
        FloatingPointError
            Some E <= 0 or C not positive definite.
        """
        E = 1.0 + W * self.D
        if not np.all(E > 0.0):
            raise FloatingPointError("FITC-Laplace: 1 + W (K_nn - Q_nn) <= 0 (W too negative at the mode)")
        r = W / E
        (C,), _ = self.row_pass(partial(_gram_block, bool(np.all(r >= 0.0))), (r,))
        C = 0.5 * (C + C.T)
        C[np.diag_indices_from(C)] += 1.0
        try:
            LC, _ = cholesky(C, 0.0, what="C = I + A diag(W / (1 + W D)) A^T")
        except np.linalg.LinAlgError as err:
            raise FloatingPointError(f"FITC-Laplace: {err}") from err
        return E, r, LC

    def newton_solver(self, W):
        """The map v -> R v = W (I + Kt W)^-1 v used by the Newton step.

        Parameters
        ----------
        W : ndarray, shape (N,)
            Negative Hessian of log p at f.

        Returns
        -------
        callable
            v (N,) -> R v (N,), O(N M).

        Raises
        ------
        FloatingPointError
            As :meth:`factor`.
        """
        _, r, LC = self.factor(W)
        return partial(_apply_R, self, r, LC)


def _covariance_block(kernel, Z, L, X_block):
    """((), (D block,), At block (n, M)) of a row block X_block (n, D) (a map_rows pass that keeps At)."""
    _, A, kff, residual = whitened_rows(kernel, X_block, Z, L)
    check_rows_nystrom(residual, kff)
    return (), (residual,), np.ascontiguousarray(A.T)


def _left_products(X_block, At, *vectors):
    """(At^T v for each row block v of ``vectors``,) for a row block At (n, M)."""
    return tuple(At.T @ v for v in vectors), ()


def _right_product(s, X_block, At):
    return (), (At @ s,)


def _carried_second(fn, X_block, *rest):
    """fn(X_block, At_block, *row_blocks) from map_rows' (X_block, *row_blocks, At_block)."""
    return fn(X_block, rest[-1], *rest[:-1])


def _gram_block(nonneg, X_block, At, r):
    """(At^T diag(r) At,) of a row block At (n, M), r (n,)."""
    if nonneg:
        As = At * np.sqrt(r)[:, None]
        return (As.T @ As,), ()          # syrk: half the flops of a general product
    return ((At * r[:, None]).T @ At,), ()


def _apply_R(prior, r, LC, v):
    """R v = r v - r A^T C^-1 A (r v), O(N M); ``prior`` a :class:`FITCCovariance`."""
    rv = r * v
    return rv - r * prior.combine(solve_upper_t(LC, solve_lower(LC, prior.products(rv)[0])))


def _newton_weights(W):
    """The W of the Newton steps to try, in order: with some W < 0 (a likelihood that is not
    log-concave) first the true Hessian's, which converges quadratically near the mode (where
    the Hessian is negative definite) and is kept only where it ascends, then GPML's max(W, 0)
    (infLaplace's Wmin = 0), an ascent direction everywhere but linearly convergent there."""
    clipped = np.maximum(W, 0.0)
    return (W, clipped) if np.any(W < 0.0) else (clipped,)


def find_mode(likelihood, K, y, tol, max_iter):
    """Algorithm 3.1 from f = 0: returns (a, f_hat, Psi, derivatives at f_hat).  ``K``: the dense
    prior covariance (N, N) or a :class:`FITCCovariance`.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        Its ``log_density_derivatives`` give g and W.
    K : ndarray of shape (N, N), or FITCCovariance
        The prior covariance.
    y : ndarray, shape (N,)
        Coded targets.
    tol : float
        Stop when a step raises Psi by less than this.
    max_iter : int
        Most Newton steps.

    Returns
    -------
    a : ndarray, shape (N,)
        K^-1 f_hat.
    f_hat : ndarray, shape (N,)
        The mode.
    psi : float
        Psi(a) = -1/2 a^T f_hat + sum log p(y | f_hat).
    derivatives : tuple of 4 ndarray
        :meth:`~gpdsl.likelihoods.Likelihood.log_density_derivatives` at f_hat.

    Raises
    ------
    FloatingPointError
        If the mode is not reached in ``max_iter`` steps.
    """
    prior = K if isinstance(K, FITCCovariance) else _DensePrior(K)
    n = prior.n
    a, f = np.zeros(n), np.zeros(n)
    derivs = likelihood.log_density_derivatives(y, f)
    psi = float(np.sum(derivs[0]))
    for _ in range(max_iter):
        _, d1, d2, _ = derivs
        for W in _newton_weights(-d2):
            try:
                solve = prior.newton_solver(W)
            except (np.linalg.LinAlgError, FloatingPointError):
                continue                       # the Hessian with W < 0 is not negative definite here
            b = W * f + d1
            step = b - solve(prior.mv(b)) - a
            if np.any(W < 0.0) and not (d1 - a) @ prior.mv(step) > 0.0:
                continue                       # not an ascent direction (Psi's gradient in a is K (g - a))
            residual = np.max(np.abs(d1 - a), initial=0.0)
            for _ in range(60):            # halve until Psi rises (it is concave in a for W >= 0)
                a_try = a + step
                f_try = prior.mv(a_try)
                d_try = likelihood.log_density_derivatives(y, f_try)
                psi_try = float(-0.5 * a_try @ f_try + np.sum(d_try[0]))
                if psi_try >= psi or _rounding_step(psi, psi_try, residual, d_try[1] - a_try):
                    break
                step = 0.5 * step
            else:
                continue
            break
        else:
            return a, f, psi, derivs          # no rise left even for a tiny step: at the mode
        gain = psi_try - psi
        a, f, psi, derivs = a_try, f_try, psi_try, d_try
        if gain < tol:
            return a, f, psi, derivs
    raise FloatingPointError(f"Laplace: Newton's method did not reach the mode in {max_iter} steps")


def _rounding_step(psi, psi_try, residual, residual_try):
    """Whether a step that did not raise Psi is still taken: near the mode Psi changes by the
    square of the residual d log p - a (Psi's gradient is K (g - a)), below Psi's rounding, so its
    test cannot see the last Newton steps; they are taken while Psi stays within rounding and the
    residual falls.  Without them the mode stopped at residuals of ~3e-9, and the evidence, whose
    log|B| moves at first order in f, carried a ~1e-9 jitter that differences of it magnified."""
    return (psi - psi_try <= 1e-13 * (1.0 + abs(psi))
            and np.max(np.abs(residual_try), initial=0.0) < 0.5 * residual)


def _evaluate(kernel, likelihood, X, y, tol, max_iter, need_grad, need_state):
    K = kernel.gram(X, X)
    a, f, psi, (_, g, d2, d3) = find_mode(likelihood, K, y, tol, max_iter)
    if np.any(-d2 < 0.0):
        return _evaluate_negative_w(kernel, likelihood, X, y, K, a, f, psi, g, -d2, d3, need_grad,
                                    need_state)
    W = np.maximum(-d2, 0.0)
    sw, L = _newton_system(K, W)
    F = psi - float(np.sum(np.log(np.diag(L))))
    if not np.isfinite(F):
        raise FloatingPointError("Laplace: non-finite evidence")
    grads = {}
    if need_grad:
        Li = solve_lower(L, np.diag(sw))                      # L^-1 W^1/2
        R = Li.T @ Li                                         # W^1/2 B^-1 W^1/2
        C = solve_lower(L, sw[:, None] * K)                   # L^-1 W^1/2 K
        posterior_var = np.diag(K) - np.einsum("ij,ij->j", C, C)   # diag (K^-1 + W)^-1
        grads = _dense_gradients(kernel, likelihood, X, y, K, a, f, g, d3, R, posterior_var)
    state = None
    if need_state:
        state = site_regression(kernel, X, None, W, W * f + g, jitter=None, chunk_size=None,
                                need_grad=False, need_state=True).state
    return Evaluation(log_evidence=F, grads=grads, dZ=None, jitter=0.0, state=state, pseudo_data=(W, W * f + g))


def _dense_gradients(kernel, likelihood, X, y, K, a, f, g, d3, R, posterior_var):
    """Algorithm 5.1's gradients, given R = W^1/2 B^-1 W^1/2 = (K + W^-1)^-1 (any sign of W) and
    diag((K^-1 + W)^-1): the kernel hyperparameters and each likelihood hyperparameter."""
    s2 = 0.5 * posterior_var * d3
    # Adjoint of K: 1/2 a a^T - 1/2 R from the explicit terms, (I - R K) s2 g^T from the
    # implicit change of f_hat (symmetrised: dK is symmetric).
    u = s2 - R @ (K @ s2)                                     # (I - R K) s2
    G = 0.5 * np.outer(a, a) - 0.5 * R + np.outer(u, g)
    grads, _ = kernel.vjp(X, X, 0.5 * (G + G.T))
    grads["offset"] = a + u                                   # d/d o of a latent offset (module docstring)
    # GPML's infLaplace for each likelihood hyperparameter theta: the explicit terms
    # sum d log p / d theta + 1/2 diag((K^-1 + W)^-1)^T d^3 log p / df^2 d theta and the
    # implicit change of f_hat through b = K d^2 log p / df d theta.
    for name, (dlp, d1p, d2p) in likelihood.log_density_param_derivatives(y, f).items():
        b = K @ d1p
        grads[name] = np.array(np.sum(dlp) + 0.5 * posterior_var @ d2p + s2 @ (b - K @ (R @ b)))
    return grads


def _evaluate_negative_w(kernel, likelihood, X, y, K, a, f, psi, g, W, d3, need_grad, need_state):
    """The dense method at a mode where some W_i < 0 (GPML's infLaplace with an LU of I + K W):
    log|I + K W| by LU, R = W (I + K W)^-1 and (K^-1 + W)^-1 = (I + K W)^-1 K for the evidence
    and its gradients.  The predictive state is that of W_+ = max(W, 0) (module docstring),
    written with the Cholesky factor L_K of K (+ jitter, which cancels): b_* = L_K^-1 k_*,
    weights L_K^T a (mean k_*^T a) and correction L_K^T R_+ L_K (variance k_** - k_*^T R_+ k_*,
    in [0, k_**] since 0 <= R_+ <= K^-1)."""
    n = K.shape[0]
    IKW = np.eye(n) + K * W[None, :]
    sign, log_det = np.linalg.slogdet(IKW)
    Sigma = np.linalg.solve(IKW, K)                           # (K^-1 + W)^-1
    posterior_var = np.diag(Sigma).copy()
    if sign <= 0 or not np.all(posterior_var > 0.0):
        raise FloatingPointError("Laplace: K^-1 + W is not positive definite at the mode (W too negative)")
    F = psi - 0.5 * float(log_det)
    if not np.isfinite(F):
        raise FloatingPointError("Laplace: non-finite evidence")
    R = np.linalg.solve(IKW.T, np.diag(W)).T                  # W (I + K W)^-1
    R = 0.5 * (R + R.T)
    grads = {}
    if need_grad:
        grads = _dense_gradients(kernel, likelihood, X, y, K, a, f, g, d3, R, posterior_var)
    state = None
    Wp = np.maximum(W, 0.0)
    if need_state:
        LK, _ = cholesky(K, None, what="K")
        sw, L = _newton_system(K, Wp)
        V = solve_lower(L, sw[:, None] * LK)                  # L^-1 W_+^1/2 L_K: L_K^T R_+ L_K = V^T V
        C = solve_lower(L, sw[:, None] * K)                   # K - C^T C = (K^-1 + W_+)^-1
        q_cov = K - C.T @ C
        state = PredictiveState(Z=X, weights=LK.T @ a, correction=V.T @ V, chol=LK, q_mean=f.copy(),
                                q_cov=0.5 * (q_cov + q_cov.T))
    return Evaluation(log_evidence=F, grads=grads, dZ=None, jitter=0.0, state=state, pseudo_data=(Wp, Wp * f + g))


def _evaluate_fitc(kernel, likelihood, X, y, Z, tol, max_iter, need_grad, need_state, jitter, chunk_size):
    prior = FITCCovariance(kernel, X, Z, jitter, chunk_size)
    a, f, psi, (_, g, d2, d3) = find_mode(likelihood, prior, y, tol, max_iter)
    W = -d2                       # unclipped at the mode (module docstring)
    E, r, LC = prior.factor(W)
    F = psi - 0.5 * float(np.sum(np.log(E))) - float(np.sum(np.log(np.diag(LC))))
    if not np.isfinite(F):
        raise FloatingPointError("Laplace: non-finite evidence")
    D, L, m = prior.D, prior.L, prior.m
    grads, dZ = {}, None
    if need_grad:
        def quadratic_pass(X_block, At):
            V = solve_lower(LC, At.T)
            return (), (np.einsum("ij,ij->j", V, V),)

        _, (h,) = prior.row_pass(quadratic_pass, ())                # h_i = a_i^T C^-1 a_i
        posterior_var = D / E + h / (E * E)                        # diag (Kt^-1 + W)^-1
        s2 = 0.5 * posterior_var * d3
        u = s2 - _apply_R(prior, r, LC, prior.mv(s2))               # (I - R Kt) s2
        # diag of G = 1/2 a a^T - 1/2 R + 1/2 (u g^T + g u^T), with R_ii = r_i - r_i^2 h_i.
        G_diag = 0.5 * a * a - 0.5 * (r - r * r * h) + u * g
        Aa, Ag, Au = prior.products(a, g, u)

        def gradient_pass(X_block, At, a_b, g_b, u_b, r_b, G_diag_b):
            # 2 A G_off for these columns: A G = 1/2 (A a) a^T - 1/2 C^-1 A diag(r)
            # + 1/2 (A u) g^T + 1/2 (A g) u^T, less A diag(G_diag); then L^-T (dF/dK_uf).
            As = At.T
            H = np.outer(Aa, a_b)
            H += np.outer(Au, g_b)
            H += np.outer(Ag, u_b)
            H -= solve_upper_t(LC, solve_lower(LC, As)) * r_b
            ADs = As * G_diag_b
            H -= 2.0 * ADs
            kg, dZ_part = kernel.vjp(Z, X_block, solve_upper_t(L, H))
            kg = add_partial(kg, kernel.diag_vjp(X_block, G_diag_b))
            return (kg, dZ_part, ADs @ As.T), ()

        (grads, dZ, ADA), _ = prior.row_pass(gradient_pass, (a, g, u, r, G_diag))
        # dF/dK_uu = -L^-T (A G A^T - A diag(G_diag) A^T) L^-1 with A R A^T = I - C^-1.
        LCi = inverse_lower(LC)
        AGA = 0.5 * (np.outer(Aa, Aa) - np.eye(m) + LCi.T @ LCi + np.outer(Au, Ag) + np.outer(Ag, Au))
        Li = inverse_lower(L)
        G_uu = -(Li.T @ (AGA - ADA) @ Li)
        G_uu = jitter_adjoint(0.5 * (G_uu + G_uu.T), prior.jitter)
        uu_grads, dZ_uu = kernel.vjp(Z, Z, G_uu)
        grads = add_partial(grads, uu_grads)
        dZ = dZ + 2.0 * dZ_uu
        for name, (dlp, d1p, d2p) in likelihood.log_density_param_derivatives(y, f).items():
            grads[name] = np.array(np.sum(dlp) + 0.5 * posterior_var @ d2p + u @ prior.mv(d1p))
        grads["offset"] = a + u                                   # d/d o of a latent offset
    state = None
    if need_state:
        # The posterior of W_+ = max(W, 0) (module docstring): C_+ >= I, so 0 <= f_var <= k_**.
        LCi = inverse_lower(prior.factor(np.maximum(W, 0.0))[2] if np.any(W < 0.0) else LC)
        weights = prior.products(a)[0]                              # E[L^-1 u | y]
        L_LCi = L @ LCi.T
        state = PredictiveState(Z=Z, weights=weights, correction=np.eye(m) - LCi.T @ LCi, chol=L,
                                q_mean=L @ weights, q_cov=L_LCi @ L_LCi.T)
    Wp = np.maximum(W, 0.0)       # the pseudo-regression's weights (greedy selection) stay >= 0
    return Evaluation(log_evidence=F, grads=grads, dZ=dZ, jitter=prior.jitter, state=state,
                      pseudo_data=(Wp, Wp * f + g))
