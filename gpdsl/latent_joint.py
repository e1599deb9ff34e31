"""The exact joint posterior of the latent f and the hyperparameters, whitened, for NUTS.

``Model.sample(X, y, latent="joint")`` draws (theta, f) from p(f, theta | y) without any
approximation of the likelihood, as Stan's latent-GP models do (posteriordb's ``gp_pois_regr``):
the reference the marginalised samplers (EP's, Laplace's evidence) are measured against.

With u the hyperparameters on the optimiser's unconstrained scale (:mod:`gpdsl.sampling`) and
v (N,) the whitened latent values,

    f = m(X) + L v,        L L^T = K(theta) + JITTER mean(diag K) I,

the target over w = (u, v) is

    log p(u, v | y) = sum_n log p(y_n | f_n) - |v|^2 / 2 + sum log p(theta) + log |d theta / d u|

(v ~ N(0, I) makes f ~ GP(m, K) a priori; the non-centred form has no funnel between the
amplitude and f a priori, but where the data pin f the precision of v in those directions grows
as the amplitude squared: an inverse funnel, which makes a few NUTS transitions diverge at
target_accept 0.8 on posteriordb's gp_pois_regr, docs/guide.md).  Its gradient:

* in v: L^T g - v, with g = d log p(y | f) / df;
* in a kernel hyperparameter: g^T (dL / d theta) v with dL = L Phi(L^-1 dK L^-T) (the Cholesky
  factor's derivative; Phi keeps the lower triangle and halves the diagonal; Murray (2016),
  "Differentiation of the Cholesky decomposition", arXiv:1602.07527, eq. 10), i.e. the adjoint of
  K is G = L^-T sym(Phi(L^T g v^T)) L^-1, handed to the kernel's vector-Jacobian product;
* in a likelihood hyperparameter: sum_n d log p(y_n | f_n) / d theta (the likelihood's
  ``log_density_param_derivatives``); in a mean hyperparameter: the mean's VJP of g;
* the priors' and the log-Jacobian's as in :class:`gpdsl.log_posterior.LogPosterior`.

Every evaluation factorises the N x N covariance and forms its adjoint: O(N^3) a gradient, and a
NUTS trajectory takes tens of them, so the option is for small N (:data:`MAX_ROWS`).

The jitter is a fixed multiple of the mean diagonal (the jitter ladder of :func:`gpdsl.linalg.cholesky`
would make the target jump between rungs): f's prior is then GP(m, K) plus white noise of variance
JITTER mean(diag K), a standard deviation 1e-4 of the amplitude, far below any posterior spread.
A point where that Cholesky still fails has log density -inf (the sampler's divergence).
"""
from __future__ import annotations

import numpy as np

from .linalg import cholesky, jitter_adjoint, solve_upper_t
from .methods.common import PredictiveState
from .posterior import Posterior
from .log_posterior import LogPosterior, check_priors

__all__ = ["JITTER", "MAX_ROWS", "JointLogPosterior", "check_joint"]

# A multiple of mean(diag K): Cholesky's rounding error is ~N eps |K|_2 <= N^2 eps mean(diag K),
# 2e-10 of the mean diagonal at N = 1,000, so 1e-8 factorises any gram matrix to N ~ 6,000.
JITTER = 1e-8
# Rows above which Model.sample(latent="joint") is refused: each gradient costs a Cholesky and two
# triangular solves of N x N (~N^3 flops; one BLAS thread, load ~4: 2.4 ms at N = 200, 23 ms at 500,
# 97 ms at 1,000), and NUTS took 26.5 gradients a draw at N = 11 (more as N grows), so 4 chains x
# 2,000 iterations at N = 1,000 would take ~6 CPU hours: beyond that the marginalised methods are the tool.
MAX_ROWS = 1000


def check_joint(model, n_rows):
    """Refuse what the joint sampler cannot draw, naming the alternatives.

    Parameters
    ----------
    model : gpdsl.Model
    n_rows : int
        N, the training rows.

    Raises
    ------
    ValueError
        A sparse model, a Gaussian likelihood, a multi-latent likelihood, a likelihood without
        derivatives of its log density, or more than :data:`MAX_ROWS` rows.
    """
    likelihood = model.likelihood
    name = type(likelihood).__name__
    if model.sparse:
        raise ValueError("Model.sample: latent='joint' samples the N latent values of a dense model; this model has "
                         "an inducing spec: sample it with latent='marginalised' (FITC-EP, FITC-Laplace, VFE, ...) "
                         "or drop the inducing spec")
    if likelihood.provides("noise"):
        raise ValueError(f"Model.sample: latent='joint' is for non-Gaussian likelihoods; with {name} the evidence "
                         f"is exact: use latent='marginalised' (Exact, or VFE/FITC/DTC with inducing inputs)")
    if likelihood.n_latent != 1:
        raise ValueError(f"Model.sample: latent='joint' samples one latent function; {name} has "
                         f"{likelihood.n_latent}: use latent='marginalised' (Laplace)")
    if not likelihood.provides("log_density_derivatives"):
        raise ValueError(f"Model.sample: latent='joint' needs the derivatives of the log density in f "
                         f"(log_density_derivatives), which {name} does not provide: use latent='marginalised' "
                         f"with EP, Laplace or PolyaGamma")
    if n_rows > MAX_ROWS:
        raise ValueError(f"Model.sample: latent='joint' costs O(N^3) a gradient and samples N latent values; "
                         f"N = {n_rows} > {MAX_ROWS} (gpdsl.latent_joint.MAX_ROWS): use latent='marginalised' "
                         f"(EP, Laplace, or their FITC forms with an inducing spec)")


class JointLogPosterior(LogPosterior):
    """log p(u, v | y) over w = (u, v) (module docstring) and its gradient.

    Parameters
    ----------
    model : gpdsl.Model
        A dense model with a one-latent, non-Gaussian likelihood (:func:`check_joint`).
    table : gpdsl.parameters.ParameterTable
        The sampled entries (``table.free``: the first ``table.size`` coordinates of w) and the
        held ones.
    X : ndarray, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Training targets as the likelihood codes them.

    Notes
    -----
    Calling it with w (P + N,) returns ``(log p(u, v | y), gradient (P + N,))``, ``(-inf, zeros)``
    where the covariance does not factorise or a value overflows.  The log-Jacobian is
    :meth:`gpdsl.log_posterior.LogPosterior.log_jacobian`.
    """

    # NUTS's adapted metric: dense.  Where the data pin f (counts of 3 to 82 in gp_pois_regr), the
    # posterior of v given theta has covariance ~(I + L^T W L)^-1, rotated against the axes: at that
    # posterior's mode the diagonally preconditioned Hessian has condition 5,700 (sqrt: 76 leapfrog
    # steps across its widest direction at the step its narrowest allows).  With the dense metric
    # the defaults took 26.5 steps a draw on average (6.3 min wall, load ~5); the diagonal one's
    # run had not finished after 22 min (load ~9).  Its O((N + P)^2) a step is small beside the
    # O(N^3) gradient.
    METRIC = "dense"

    def __init__(self, model, table, X, y):
        check_joint(model, X.shape[0])
        check_priors(table)
        self.model, self.table, self.X, self.y = model, table, X, y

    @property
    def size(self):
        """int: the length of w, P hyperparameter coordinates and N whitened latent values."""
        return self.table.size + self.X.shape[0]

    def split(self, w):
        """The hyperparameter and latent parts of w.

        Parameters
        ----------
        w : array_like, shape (..., P + N)

        Returns
        -------
        u : ndarray, shape (..., P)
            The hyperparameters on the unconstrained scale.
        v : ndarray, shape (..., N)
            The whitened latent values.
        """
        w = np.asarray(w, dtype=float)
        return w[..., :self.table.size], w[..., self.table.size:]

    def start(self):
        """w at the declared hyperparameters and f = m(X) (v = 0).

        Returns
        -------
        ndarray, shape (P + N,)
        """
        return np.concatenate([self.table.pack(self.table.values()), np.zeros(self.X.shape[0])])

    def _factor(self, values):
        """(kernel, likelihood, L, m) at natural ``values``: the bound parts, the Cholesky factor of
        K + jitter and the prior mean m(X) (N,)."""
        kernel, likelihood = self.model.bind(values)
        K = kernel.gram(self.X, self.X)
        L, _ = cholesky(K, JITTER, what="K(theta) + jitter (latent='joint')")
        m = self.model.latent_offset(values, self.X)
        # The likelihood of X's rows (a likelihood per output reads each row's output there).
        return kernel, likelihood.for_rows(self.X), L, np.zeros(self.X.shape[0]) if m is None else m

    def latent(self, w):
        """f = m(X) + L(theta) v at each w.

        Parameters
        ----------
        w : ndarray, shape (..., P + N)

        Returns
        -------
        ndarray, shape (..., N)
        """
        w = np.asarray(w, dtype=float)
        flat = w.reshape(-1, w.shape[-1])
        out = np.empty((flat.shape[0], self.X.shape[0]))
        for i, point in enumerate(flat):
            u, v = self.split(point)
            _, _, L, m = self._factor(self.table.unpack(u))
            out[i] = m + L @ v
        return out.reshape(w.shape[:-1] + (self.X.shape[0],))

    def conditional_state(self, w):
        """The predictive state of f_* | f, theta at one w: mean m(x_*) + k_*^T (K + jitter)^-1 (f - m),
        variance k_** - k_*^T (K + jitter)^-1 k_* (the GP conditional on the N latent values).

        Parameters
        ----------
        w : ndarray, shape (P + N,)

        Returns
        -------
        gpdsl.methods.common.PredictiveState
            Z = X, chol L, whitened weights v = L^-1 (f - m), correction I (None, not stored); q(f)
            the point mass at f (q_cov 0).
        """
        u, v = self.split(w)
        _, _, L, m = self._factor(self.table.unpack(u))
        n = v.size
        return PredictiveState(Z=self.X, weights=v.copy(), correction=None, q_mean=m + L @ v,
                               q_cov=np.zeros((n, n)), chol=L)

    def posterior(self, w):
        """The posterior at one draw w: the GP conditional f_* | f, theta as a :class:`gpdsl.Posterior`.

        Parameters
        ----------
        w : ndarray, shape (P + N,)

        Returns
        -------
        gpdsl.Posterior
            At the draw's hyperparameters, with :meth:`conditional_state`; its log evidence is NaN
            (the joint target integrates nothing out).
        """
        values = self.table.unpack(self.split(w)[0])
        return Posterior(model=self.model, values=values, state=self.conditional_state(w), log_evidence=np.nan,
                         log_prior=self.table.log_prior(values)[0])

    def __call__(self, w):
        u, v = self.split(w)
        with np.errstate(over="ignore"):
            values = self.table.unpack(u)
        try:
            if not all(np.all(np.isfinite(x)) for x in values.values()):
                raise FloatingPointError("a hyperparameter overflowed")
            value, grad = self._evaluate(values, u, v)
        except (np.linalg.LinAlgError, FloatingPointError):
            return -np.inf, np.zeros_like(np.asarray(w, dtype=float))
        if not (np.isfinite(value) and np.all(np.isfinite(grad))):
            return -np.inf, np.zeros_like(grad)
        return value, grad

    def _evaluate(self, values, u, v):
        kernel, likelihood, L, m = self._factor(values)
        f = m + L @ v
        with np.errstate(over="ignore", invalid="ignore"):
            derivatives = likelihood.log_density_derivatives(self.y, f)
        log_lik, g = derivatives[0], derivatives[1]
        c = L.T @ g
        # d sum log p / d K through f = L v: G = L^-T sym(Phi(c v^T)) L^-1 (module docstring).
        P = np.tril(np.outer(c, v))
        P[np.diag_indices_from(P)] *= 0.5
        S = solve_upper_t(L, solve_upper_t(L, P).T).T            # L^-T P L^-1
        grads, _ = kernel.vjp(self.X, self.X, jitter_adjoint(0.5 * (S + S.T), JITTER))
        for name, (d_theta, _, _) in likelihood.log_density_param_derivatives(self.y, f, derivatives).items():
            grads[name] = np.array(np.sum(d_theta))
        grads.update(self.model.mean_gradients(values, self.X, g))
        log_prior, prior_grads = self.table.log_prior(values)
        for name, gp in prior_grads.items():
            grads[name] = grads[name] + gp
        jacobian, jacobian_gradient = self.log_jacobian(u)
        value = float(np.sum(log_lik)) - 0.5 * float(v @ v) + log_prior + jacobian
        grad_u = self.table.chain(values, grads) + jacobian_gradient
        return value, np.concatenate([grad_u, c - v])
