"""Result types shared by the inference methods."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..components import Bound
from ..likelihoods import Gaussian, HeteroscedasticGaussian
from ..linalg import whiten


class WhitenedPrediction:
    """The predictive algebra every predictive state shares, over the whitened basis its
    ``basis`` gives: with b_* = basis(K_z*) (M, n) at n new points,

        mean_* = b_*^T weights,        cov_* = k_** - b_*^T correction b_*,

    where a ``correction`` of None stands for the identity I (the dense methods' and the Kronecker
    state's, single latent function only), so that cov_* = k_** - b_*^T b_* without an (M, M) array.
    A state provides ``weights`` (M,) or (M, K), ``correction``, ``coupling`` (or None) and
    ``basis``; :class:`PredictiveState` and :class:`gpdsl.methods.kronecker_state.KroneckerState`
    differ only in the basis (a triangular solve with a Cholesky factor, or the Kronecker
    eigenbases) and in what they store.
    """

    @property
    def n_latent(self):
        """The number of latent functions: 1, or K for a (M, K) ``weights``."""
        return 1 if self.weights.ndim == 1 else self.weights.shape[1]

    def mean(self, b):
        """Latent predictive means b_*^T weights at n points of whitened basis b.

        Parameters
        ----------
        b : ndarray, shape (M, n), or (K, M, n) with one factor a latent function
            The whitened basis (:meth:`basis`).

        Returns
        -------
        ndarray, shape (n,) or (n, K)
        """
        return np.einsum("kin,ik->nk", b, self.weights) if b.ndim == 3 else b.T @ self.weights

    def moments(self, b, prior_var, full=False):
        """Latent predictive means and variances at n points of whitened basis b.

        Parameters
        ----------
        b : ndarray, shape (M, n), or (K, M, n) with one factor a latent function
            The whitened basis (:meth:`basis`).
        prior_var : ndarray, shape (n,), or (K, n) with one kernel a latent function
            The prior variances k_**.
        full : bool, default False
            K latent functions: return each point's (K, K) covariance instead of the variances.

        Returns
        -------
        mean : ndarray, shape (n,) or (n, K)
        var : ndarray, shape (n,), (n, K) or, with ``full``, (n, K, K)
            Variances clipped at 0 (the covariances' diagonals too).
        """
        mean = self.mean(b)
        if self.n_latent == 1:
            corrected = b if self.correction is None else self.correction @ b
            return mean, np.maximum(prior_var - np.einsum("ij,ij->j", b, corrected), 0.0)
        prior = prior_var.T if prior_var.ndim == 2 else prior_var[:, None]
        if b.ndim == 3:
            # Batched products: one GEMM a latent function, where a four-index einsum would loop.
            var = prior - np.einsum("kin,kin->nk", b, self.correction @ b)
        else:
            var = prior - np.einsum("in,kij,jn->nk", b, self.correction, b)
        if self.coupling is None:
            var = np.maximum(var, 0.0)
            return mean, (var[:, :, None] * np.eye(self.n_latent) if full else var)
        G = self.coupling @ b                                       # (K, M, n), per class or shared b
        cov = np.einsum("kin,lin->nkl", G, G)
        idx = np.arange(self.n_latent)
        cov[:, idx, idx] = np.maximum(cov[:, idx, idx] + var, 0.0)
        return mean, (cov if full else cov[:, idx, idx].copy())

    def covariance(self, b, prior):
        """The joint latent predictive covariance k_** - b_*^T correction b_* of one latent
        function at n points of whitened basis b, symmetrised.

        Parameters
        ----------
        b : ndarray, shape (M, n)
            The whitened basis (:meth:`basis`).
        prior : ndarray, shape (n, n)
            The prior covariance K_** of the n points.

        Returns
        -------
        ndarray, shape (n, n)
        """
        cov = prior - (b.T @ b if self.correction is None else b.T @ self.correction @ b)
        return 0.5 * (cov + cov.T)


@dataclass
class PredictiveState(WhitenedPrediction):
    """What prediction needs, in one form for every Gaussian method.

    With b_* = chol^-1 K_z*: f_* | y ~ N(b_*^T weights, k_** - b_*^T correction b_*)
    (:class:`WhitenedPrediction`).

    * Sparse methods: Z are the inducing inputs, ``chol`` the Cholesky factor L of K_uu (+ the
      jitter used) and the whitened ``weights = B^-1 L^-1 K_uf Lambda^-1 y``,
      ``correction = I - B^-1`` with B = I + L^-1 K_uf Lambda^-1 K_fu L^-T (thesis eq. C.2 for
      PGPR).  In the natural basis these are Sigma^-1 K_uf Lambda^-1 y and K_uu^-1 - Sigma^-1,
      whose entries grow as cond(K_uu) while the predictions do not: at the near-linear
      optimum of twonorm (cond K_uu ~ 1e16) that form lost every digit of the variance.
    * Exact GP (and dense EP / QP, through their pseudo-regression): Z = X, ``chol`` the Cholesky
      factor L of K + Lambda, ``weights = L^-1 y`` and ``correction`` None (the identity, not
      stored), so that var_* = k_** - |b_*|^2 never exceeds the prior variance (the natural form
      k_*^T (K + Lambda)^-1 k_* reached 1000x the kernel variance once the fitted noise fell to ~1e-29).

    ``q_mean`` (M,) and ``q_cov`` (M, M) are the Gaussian q(u) (for Exact: the posterior of f at X).

    Parameters
    ----------
    Z : ndarray, shape (M, D)
        Inducing inputs (X for the dense methods, M = N).
    weights : ndarray, shape (M,)
        Whitened predictive weights.
    correction : ndarray, shape (M, M), or None
        Whitened variance correction (I - B^-1); None for the identity (one latent function only).
    q_mean : ndarray, shape (M,)
        Mean of q(u).
    q_cov : ndarray, shape (M, M)
        Covariance of q(u).
    chol : ndarray, shape (M, M), or (K, M, M)
        Lower Cholesky factor L that whitens K_z*; K latent functions with one kernel each
        (:class:`gpdsl.kernels.Separate`): one factor L_k a latent function.
    coupling : ndarray, shape (K, M, M), or None
        K latent functions only, where the posterior couples them (multi-class Laplace).

    With K latent functions (a K-class likelihood) ``weights`` is (M, K), ``correction``,
    ``q_cov`` are (K, M, M) and ``q_mean`` (M, K), one per latent function sharing Z; the
    latent functions at a point are independent unless ``coupling`` is given, whose rows
    G_k b_* give the cross-covariances: cov_*(k, k') = delta_kk' (k_** - b_*^T correction[k] b_*)
    + (G_k b_*)^T (G_k' b_*).  A shared kernel has one ``chol`` (M, M) and one basis b_* (M, n)
    for all K; a kernel per latent function has ``chol`` (K, M, M), and latent function k's
    weights, correction, q and coupling are in its own basis b_*k = L_k^-1 K^k_z* (K, M, n).
    """

    Z: np.ndarray
    weights: np.ndarray
    correction: np.ndarray | None
    q_mean: np.ndarray
    q_cov: np.ndarray
    chol: np.ndarray
    coupling: np.ndarray | None = None

    # The layout part of its file variables (gpdsl.io.layout.model_layout's ``form``).
    form = "whitened"

    def basis(self, Kzs):
        """The whitened basis b_* = chol^-1 K_z*, one a latent function where ``chol`` is.

        Parameters
        ----------
        Kzs : ndarray, shape (M, n), or (K, M, n) for a ``chol`` (K, M, M)
            Cross-covariance K_z* between Z and n new inputs (a stack of K, one a latent
            function, as a kernel of K outputs gives it).

        Returns
        -------
        ndarray, shape of Kzs

        Raises
        ------
        ValueError
            If Kzs is not one block (M, n) for a shared ``chol``, or K blocks for K factors.
        """
        if self.chol.ndim == 2 and np.ndim(Kzs) == 2:
            return whiten(self.chol, Kzs)
        if self.chol.ndim == 3 and np.ndim(Kzs) == 3 and len(Kzs) == len(self.chol):
            return np.stack([whiten(L, K) for L, K in zip(self.chol, Kzs)])
        want = "(M, n)" if self.chol.ndim == 2 else f"({len(self.chol)}, M, n)"
        raise ValueError(f"PredictiveState.basis: Kzs must have shape {want} for chol of shape {self.chol.shape}, "
                         f"got shape {np.shape(Kzs)} (a kernel of another number of latent functions)")

    def saved_arrays(self):
        """The arrays a posterior file holds of this state, by variable name
        (:data:`gpdsl.io.layout.LAYOUT`'s "common" and "whitened" parts, and "coupling").

        A ``correction`` of None is written as the identity (M, M) it stands for, so that the file
        is the one every earlier version wrote and reads.

        Returns
        -------
        dict of str to ndarray
        """
        correction = np.eye(self.weights.shape[0]) if self.correction is None else self.correction
        arrays = {"Z": self.Z, "q_mean": self.q_mean, "q_cov": self.q_cov, "predictive_whitened_weights": self.weights,
                  "predictive_whitened_correction": correction, "predictive_chol": self.chol}
        if self.coupling is not None:
            arrays["predictive_whitened_coupling"] = self.coupling
        return arrays

    @classmethod
    def from_saved(cls, arrays):
        """The state of :meth:`saved_arrays` (a file's variables, checked by :func:`gpdsl.load`).

        A correction (M, M) that is exactly the identity becomes None again: it predicts the very
        same numbers (I b = b in floating point) without the M^2 array.

        Parameters
        ----------
        arrays : mapping of str to ndarray
            By variable name, as :meth:`saved_arrays` names them.

        Returns
        -------
        PredictiveState
        """
        correction = arrays["predictive_whitened_correction"]
        if correction.ndim == 2 and _is_identity(correction):
            correction = None
        return cls(Z=arrays["Z"], weights=arrays["predictive_whitened_weights"], correction=correction,
                   q_mean=arrays["q_mean"], q_cov=arrays["q_cov"], chol=arrays["predictive_chol"],
                   coupling=arrays.get("predictive_whitened_coupling"))


def _is_identity(A):
    """Whether the square matrix A is exactly the identity (one pass, no identity formed)."""
    return np.count_nonzero(A) == A.shape[0] and bool(np.all(np.diagonal(A) == 1.0))


@dataclass
class Evaluation:
    """One evaluation of an inference method at fixed hyperparameters.

    Parameters
    ----------
    log_evidence : float
        The method's log evidence or bound.
    grads : dict of str to ndarray
        d log_evidence / d natural hyperparameter value, by name.
    dZ : ndarray, shape (M, D), or None
        d log_evidence / d Z (None when not computed).
    jitter : float
        Multiple of mean(diag) actually added (ladder or fixed).
    state : PredictiveState or None
        The predictive state (with ``need_state``).
    warm : object, optional
        EP/QP sites, Pólya-Gamma c, variational q: the local state that warm-starts the next
        evaluation.
    pseudo_data : tuple of ndarray, optional
        (weights w (N,), weighted targets r (N,)) of the Gaussian pseudo-regression the method
        amounts to (noise 1/w, targets r/w), read by greedy inducing selection.
    rounding : float, optional
        An estimate of the rounding error of ``log_evidence`` (nats); NaN where not estimated.
    """

    log_evidence: float
    grads: dict                 # d log_evidence / d natural hyperparameter value
    dZ: np.ndarray | None       # d log_evidence / d Z (None when not computed)
    jitter: float               # multiple of mean(diag) actually added (ladder or fixed)
    state: PredictiveState | None
    warm: object = None         # EP/QP sites, Polya-Gamma c: the local state that warm-starts the next evaluation
    # (weights w (N,), weighted targets r (N,)) of the Gaussian pseudo-regression the method
    # amounts to at these hyperparameters -- noise 1/w, targets r/w.  Greedy inducing selection
    # reads them (HGV weights, GreedyBound's bound); None where the method does not provide them.
    pseudo_data: tuple | None = None
    # An estimate of the rounding error of log_evidence in nats, where the method gives one
    # (the collapsed engines' final evaluation: gpdsl.methods.collapsed.evidence_rounding); NaN
    # where it does not.  The fit records it (FitDiagnostics.evidence_rounding) and warns above 1.
    rounding: float = float("nan")
    # Whether log_evidence and pseudo_data still wait for their pass over the data (see
    # PendingEvaluation); an Evaluation has them.
    pending = False


class RowIndependentExpectations:
    """Base of the closed-form expectation wrappers of an augmentation (Pólya-Gamma's, the
    logistic-softmax's), which :mod:`gpdsl.methods.svgp` integrates by in place of the likelihood:
    one likelihood whose density does not depend on the row."""

    def for_rows(self, X):
        """These expectations, for any rows (:meth:`gpdsl.likelihoods.Likelihood.for_rows`; the
        wrapped likelihood's own ``for_rows`` would hand back the likelihood without the
        augmentation).

        Parameters
        ----------
        X : ndarray, shape (n, D)
            The rows (not read).

        Returns
        -------
        same type as self
        """
        return self


class Shifted:
    """A bound likelihood whose latent input is shifted by a per-row offset o: p(y_n | f_n + o_n),
    the GLM's offset (log exposure for counts).  The per-point operations of the methods see
    f + o; the rest passes through.  ``offset`` is aligned with the rows the operations get.

    Parameters
    ----------
    likelihood : gpdsl.components.Bound
        The bound likelihood.
    offset : ndarray, shape (n,)
        The offset of each row.
    """

    def __init__(self, likelihood, offset):
        self.likelihood = likelihood
        self.offset = offset

    def __getattr__(self, name):
        return getattr(self.likelihood, name)

    def _shift(self, f):
        return f + (self.offset if np.ndim(f) == 1 else self.offset[:, None])

    def for_rows(self, X):
        """The likelihood of X's rows (:meth:`gpdsl.likelihoods.Likelihood.for_rows`), shifted alike.

        Parameters
        ----------
        X : ndarray, shape (n, D)
            The rows ``offset`` is aligned with.
        """
        return Shifted(self.likelihood.for_rows(X), self.offset)

    def log_density(self, y, f):
        """log p(y | f + o).

        Parameters
        ----------
        y, f : ndarray, shape (n,) or (n, K)
        """
        return self.likelihood.log_density(y, self._shift(f))

    def log_density_derivatives(self, y, f):
        """log p(y | f + o) and its derivatives in f.

        Parameters
        ----------
        y, f : ndarray, shape (n,) or (n, K)
        """
        return self.likelihood.log_density_derivatives(y, self._shift(f))

    def log_density_param_derivatives(self, y, f, derivatives=None):
        """The hyperparameter derivatives of log p(y | f + o).

        Parameters
        ----------
        y, f : ndarray, shape (n,) or (n, K)
        derivatives : tuple of ndarray, optional
            :meth:`log_density_derivatives` at the same arguments.
        """
        return self.likelihood.log_density_param_derivatives(y, self._shift(f), derivatives=derivatives)

    def variational_expectations(self, y, mean, var):
        """E_q[log p(y | f + o)]: the expectation at the mean shifted by o.

        Parameters
        ----------
        y, mean, var : ndarray, shape (n,)
        """
        return self.likelihood.variational_expectations(y, mean + self.offset, var)

    def surrogate(self, X, y):
        """The likelihood's surrogate regression, its pseudo-targets r / w (in f + o) less o.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        y : ndarray, shape (n,)
        """
        weights, targets = self.likelihood.surrogate(X, y)
        return weights, targets - weights * self.offset


def shifted(likelihood, offset):
    """``likelihood`` with its latent input shifted by ``offset`` (:class:`Shifted`), or as it is
    for no offset.

    Parameters
    ----------
    likelihood : gpdsl.components.Bound
    offset : ndarray of shape (n,) or None

    Returns
    -------
    Shifted or gpdsl.components.Bound
    """
    return likelihood if offset is None else Shifted(likelihood, offset)


def known_noise(variance):
    """The bound per-point Gaussian noise of a pseudo-regression (EP's and Laplace's sites, the
    Pólya-Gamma targets), as the Gaussian engines take a likelihood.

    Parameters
    ----------
    variance : ndarray, shape (N,)
        Positive noise variances.

    Returns
    -------
    gpdsl.components.Bound
    """
    return Bound(HeteroscedasticGaussian(variance=variance).bind(), "likelihood")


def gaussian_noise(variance):
    """The bound homoscedastic Gaussian likelihood of a surrogate regression.

    Parameters
    ----------
    variance : float
        The noise variance.

    Returns
    -------
    gpdsl.components.Bound
    """
    return Bound(Gaussian(variance=variance).bind(), "likelihood")


class ConvergenceWarning(UserWarning):
    """An optimiser or an iterative inference method stopped before converging."""


@dataclass(frozen=True)
class LocalStateFormat:
    """How a method's local state (EP/QP sites, Pólya-Gamma c) is written to a posterior file.

    ``name`` is the file's ``local_state`` attribute and the name of its part of the layout;
    ``variables`` (name -> (dims, kind)) and ``attributes`` (name -> kind) are that part, in the
    kinds :mod:`gpdsl.posterior` validates; ``export(state, total) -> (variables, attributes)``
    gives xarray's (dims, values) pairs and the attributes, where ``total`` counts the passes of
    the whole fit; ``load(ds) -> (state, total)`` reads them back.

    Parameters
    ----------
    name : str
        The ``local_state`` attribute.
    variables : dict of str to (tuple of str, str)
        Variable name -> (dims, kind).
    attributes : dict of str to str
        Attribute name -> kind.
    export : callable
        ``export(state, total) -> (variables, attributes)``.
    load : callable
        ``load(ds) -> (state, total)``.
    """

    name: str
    variables: dict
    attributes: dict
    export: Callable
    load: Callable


@dataclass
class VariationalState:
    """A variational method's q, moved to its optimum at each evaluation by natural-gradient
    steps (SVGP, VGP with ``q_updates="natural"``): ``q`` maps the ``"variational.*"`` names to
    arrays; ``sweeps`` counts the steps of the last evaluation, ``converged`` says whether its last
    step gained less than the method's ``q_tol``.

    Parameters
    ----------
    q : dict of str to ndarray
        The variational parameters by name (``"variational.q_mu"``, ...).
    sweeps : int, default 0
        Natural-gradient steps of the last evaluation.
    converged : bool, default False
        Whether those steps converged.
    """

    q: dict
    sweeps: int = 0
    converged: bool = False


def variational_state_format(dims):
    """The :class:`LocalStateFormat` of a :class:`VariationalState`.

    Parameters
    ----------
    dims : dict of str to str or tuple of str
        ``{name: dimension or dimensions}`` of the arrays named ``"variational.<name>"``; in
        the file they are the variables ``variational_<name>`` along those dimensions.

    Returns
    -------
    LocalStateFormat
        Named ``"variational_q"``, with attributes ``q_steps_final``, ``q_converged`` and
        ``q_total_steps``.
    """

    dims = {name: (dim,) if isinstance(dim, str) else tuple(dim) for name, dim in dims.items()}

    def export(state, total_steps):
        variables = {f"variational_{name}": (dim, state.q[f"variational.{name}"]) for name, dim in dims.items()}
        return variables, {"q_steps_final": state.sweeps, "q_converged": int(state.converged),
                           "q_total_steps": total_steps}

    def load(ds):
        q = {f"variational.{name}": ds[f"variational_{name}"].values for name in dims}
        return (VariationalState(q, sweeps=int(ds.attrs["q_steps_final"]), converged=bool(ds.attrs["q_converged"])),
                int(ds.attrs["q_total_steps"]))

    return LocalStateFormat(
        "variational_q",
        {f"variational_{name}": (dim, "float") for name, dim in dims.items()},
        {"local_state": "str", "q_steps_final": "count", "q_converged": "flag", "q_total_steps": "count"},
        export, load)


# Below this step size the damped natural-gradient steps give up (unconverged).
NATGRAD_MIN_STEP = 2.0 ** -30
#: The error of a variational q that makes the bound infinite (no jitter would help).
SINGULAR_Q = "SVGP: non-finite q(v) or a zero on the diagonal of q_sqrt (S singular)"
# Polished natural-gradient steps are converged when a step gains less than the bound's tolerance
# tol and the fixed-point residual, relative to the largest natural parameter, is below this
# times tol (1e-9 at the methods' default tol = 1e-10).
NATGRAD_RESIDUAL_PER_TOL = 10.0
# A step of at most this size that loses less than the bound's tolerance is rounding: the steps
# stop converged there even when the residual is above its tolerance (ill-conditioned K_uu).
NATGRAD_ROUNDING_STEP = 2.0 ** -3
# Anderson's extrapolation of the natural steps (:func:`damped_natural_steps`): differences kept,
# and the most bytes their history may hold (2 vectors a difference).  Memory 10 converged all 42
# evaluations of the 3-class softmax problem in its docstring; 5 left 3 of 52 at the cap.
NATGRAD_ANDERSON_MEMORY = 10
NATGRAD_ANDERSON_BYTES = 2 ** 28


def _relative_size(residual, natural):
    """max |residual| over max(1, max |natural|): the fixed-point residual's size in units of the
    natural parameters it corrects."""
    return np.max(np.abs(residual)) / max(1.0, np.max(np.abs(natural)))


def next_step_size(rho, before, after):
    """The step size to try after a step of size ``rho`` that moved the natural parameters by
    rho * ``before`` (the residual T(theta) - theta of the fixed-point map T, here the sites' natural
    parameters less q's) and left the residual ``after``.

    Near the fixed point after ~ (I + rho (J - I)) before, J the Jacobian of T: along ``before``,
    mu = <after, before> / <before, before> = 1 + rho (lambda - 1) for the eigenvalue lambda of J
    that dominates, and the damped map's factor 1 + rho' (lambda - 1) vanishes at
    rho' = rho / (1 - mu).  So rho' = min(1, rho / (1 - mu)): 1 (the fixed-point iteration) while it
    contracts without oscillating (mu in [0, 1)), ~1/2 for an oscillating mode (mu ~ -1, which
    rho = 1 leaves at |lambda| ~ 1 step after step while the bound creeps up); where the residual
    grew along itself (mu >= 1) rho is kept.

    Parameters
    ----------
    rho : float
        The step size just taken, in (0, 1].
    before : ndarray, shape (P,)
        The flattened residual before the step.
    after : ndarray, shape (P,)
        The flattened residual after it.

    Returns
    -------
    float
        The next step size (``rho`` itself when ``before`` is 0).
    """
    bb = float(before @ before)
    if bb == 0.0:
        return rho
    mu = float(after @ before) / bb
    return rho if mu >= 1.0 else min(1.0, rho / (1.0 - mu))


class Anderson:
    """Anderson's extrapolation of a fixed-point iteration x <- g(x) (Walker & Ni 2011, eq. 1.3 in
    its "type II" form) over the last ``memory`` differences: g_k - dG gamma, gamma the
    least-squares fit of the last residual r_k = g_k - x_k by the residual differences dR.  The
    fit is solved by its normal equations (``memory`` x ``memory``: a poorly conditioned fit only
    gives a proposal that the callers' bound test rejects).

    The iterates may have 2 N K entries (10^6 and more), so the history keeps the differences
    themselves and their inner products, adding one row of them per iterate: a push reads each
    kept vector twice (the new row of the Gram matrix and the right-hand side), where stacking
    the whole window into arrays and differencing it again at every call took 160 ms of each of
    the Pólya-Gamma finish's 0.3 s passes at N = 10^6 (memory 10).

    Parameters
    ----------
    memory : int
        Most residual differences kept.
    """

    def __init__(self, memory):
        self.memory = memory
        self._last = None                  # (x_k, g_k, r_k) of the last iterate
        self._d_residuals, self._d_targets = [], []
        self._gram = np.zeros((0, 0))      # <dR_i, dR_j>
        self._rhs = np.zeros(0)            # <dR_i, r_k> of the last iterate

    def __len__(self):
        """The iterates held: the differences plus one (0 before the first)."""
        return 0 if self._last is None else len(self._d_residuals) + 1

    def push(self, point, target):
        """Add an iterate and its plain update.

        Parameters
        ----------
        point : ndarray
            The iterate x_k.
        target : ndarray
            Its plain update g(x_k), of the same shape.  Both are kept as given: neither may be
            changed in place afterwards.
        """
        residual = target - point
        if self._last is not None:
            _, last_target, last_residual = self._last
            d_residual = residual - last_residual
            cross = np.array([float(np.vdot(d, d_residual)) for d in self._d_residuals])
            self._d_residuals.append(d_residual)
            self._d_targets.append(target - last_target)
            k = len(self._d_residuals)
            gram = np.empty((k, k))
            gram[:-1, :-1], gram[-1, :-1], gram[:-1, -1] = self._gram, cross, cross
            gram[-1, -1] = float(np.vdot(d_residual, d_residual))
            # <dR_i, r_k> directly, as the stacked formula forms it: the Gram matrix is often
            # ill-conditioned, so that small differences move the proposal.  Updated as
            # <dR_i, r_k-1> + <dR_i, dR_k-1> it agreed with the direct products to 1e-3 or better,
            # yet sent crabs split 193 of tests/test_paper_rows_pgpr.py (PGPR-HGV, M = 10) to an
            # unconverged fit at -41.3 nats instead of -29.6.
            rhs = np.array([float(np.vdot(d, residual)) for d in self._d_residuals])
            if k > self.memory:
                del self._d_residuals[0], self._d_targets[0]
                gram, rhs = gram[1:, 1:], rhs[1:]
            self._gram, self._rhs = gram, rhs
        self._last = (point, target, residual)

    def restart(self):
        """Forget every difference, keeping the last iterate (after a rejected proposal)."""
        self._d_residuals, self._d_targets = [], []
        self._gram, self._rhs = np.zeros((0, 0)), np.zeros(0)

    def proposal(self):
        """The extrapolated next iterate (unconstrained: callers project it onto their domain);
        needs two iterates or more.

        Returns
        -------
        ndarray
            Of the iterates' shape.
        """
        if not self._d_residuals:
            raise ValueError("Anderson: a proposal needs two iterates or more")
        if not (np.all(np.isfinite(self._gram)) and np.all(np.isfinite(self._rhs))):
            # Residuals that overflowed: LAPACK's least squares would print its own complaint to
            # stderr (DLASCL) before failing.
            raise np.linalg.LinAlgError("Anderson: the residual differences are not finite")
        # The Gram matrix's entries round at about sqrt(P) eps of its largest (P the iterates'
        # length), so its singular values below 1e-12 of the largest (those of dR below 1e-6) are
        # rounding, not directions: the default cut-off (10 eps) let them steer the proposal, and
        # with them the iterates' path at the last digits (the synth oracle's c loop at
        # tol = 1e-10 took 38 passes where the plain updates take 36).
        coef = np.linalg.lstsq(self._gram, self._rhs, rcond=1e-12)[0]
        out = np.array(self._last[1], dtype=float)
        for c, d_target in zip(coef, self._d_targets):
            out -= c * d_target
        return out


def extrapolates(likelihood):
    """Whether :func:`damped_natural_steps` extrapolates the natural steps on q for ``likelihood``:
    unless it says it is not log-concave (``log_concave`` False: robust-max).  There the steps'
    path is erratic (sites of negative precision, step sizes falling to ~0.2) and extrapolating it
    gains nothing consistent.  Full-batch 3-class robust-max SVGP fits on banana (200 and 500 rows,
    seeds 0 and 1, M = 20, ``benchmarks/HISTORY.md``), with q's class mean centred
    (:func:`gpdsl.methods.svgp.optimise_q`): extrapolated and plain reached the same bound on all
    four (-51.0872, -51.5967, -70.0666, -75.9064; every evaluation's steps converged but one of
    the third's, in both) in 594 / 596, 455 / 429, 641 / 648 and 1,013 / 1,127 steps, 0.95 to 1.14
    times the CPU (the three timed warm); uncentred, both ran most evaluations to their step cap and ended apart, higher
    on two and lower on two (-51.12 against -52.25, -52.08 / -51.96, -74.59 / -74.97, -78.05 /
    -77.89).  So robust-max keeps the plain steps.  A 40-row problem's polished q (tol 1e-12,
    tests/test_svgp_multiclass.py) took 71 extrapolated steps against 78 (209 against 2,724
    uncentred).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
        Bound or not; its ``log_concave`` is read (None, not stated, extrapolates).

    Returns
    -------
    bool
    """
    return getattr(likelihood, "log_concave", None) is not False


def damped_natural_steps(natural, target, elbo, at, tol, max_iter, polish=False, project=None,
                         extrapolate=True):
    """Damped fixed-point steps on a variational bound in natural parameters (SVGP's and VGP's
    natural-gradient q updates), accelerated by Anderson's extrapolation: from ``natural`` (a
    tuple of arrays) with the fixed-point map's value ``target`` there and the bound ``elbo``, try
    natural <- (1 - rho) natural + rho target; ``at(candidate) -> (elbo, target, point)``
    evaluates a candidate (raising LinAlgError or FloatingPointError where it cannot).  A step is
    taken when it does not lower the bound (so the bound never decreases); otherwise rho is
    halved, and below :data:`NATGRAD_MIN_STEP` the steps stop unconverged.  They stop converged
    when a step gains less than ``tol`` nats (with ``polish``: and leaves a fixed-point residual
    below :data:`NATGRAD_RESIDUAL_PER_TOL` ``tol``, relative to the largest natural parameter; the
    gain is quadratic in the residual, so a gain test alone leaves a gradient of order sqrt(tol)
    in q, measured 1e-5 at tol = 1e-10), or loses less than ``tol`` (rounding at the optimum; that
    step is not taken); after a plain step the next rho is :func:`next_step_size`.

    The acceleration.  The plain map contracts slowly along directions the sites barely see: a
    K-class softmax's q(f_k) takes a site from the diagonal of the likelihood's Hessian
    diag(p) - p p^T, which misses its null direction (every f_k shifted alike), so along it each
    step closes only prior / (site + prior) of the gap.  On 200 banana rows, 3 classes, M = 10,
    the gain per step fell by ~2 % a step and every one of 63 evaluations' steps ran to its cap
    of 100.  So once two iterates of the damped map x <- x + rho r(x) are held, the next
    candidate is Anderson's extrapolation of them (:class:`Anderson`, type II, memory
    :data:`NATGRAD_ANDERSON_MEMORY`), taken under the same test as a plain step: a proposal
    that lowers the bound, or whose precision does not factorise, is dropped and a plain step
    follows, so every step still raises the bound.  A change of rho starts a new history (its
    differences belong to another map).  Measured there (``benchmarks/HISTORY.md``): 1,229
    steps, 4 of 64 evaluations capped, against 6,300.  Where the classes share one kernel, SVGP
    now also centres q's class mean, the exact optimum along that null direction
    (:func:`gpdsl.methods.svgp.optimise_q`): 130 steps there against 194 plain, every
    evaluation converged, the same bound (-62.5872); the extrapolation still serves the
    directions the centring does not reach (a kernel per class, logistic-softmax, one latent
    function).  The history holds 2 memory vectors of the natural parameters' length; where
    that exceeds :data:`NATGRAD_ANDERSON_BYTES` the memory shrinks, to no acceleration below two.

    Parameters
    ----------
    natural : tuple of ndarray
        The starting natural parameters.
    target : tuple of ndarray
        The fixed-point map's value at ``natural`` (same shapes).
    elbo : float
        The bound at ``natural``.
    at : callable
        ``at(candidate) -> (elbo, target, point)``; may raise LinAlgError or FloatingPointError.
    tol : float
        Gain (nats) below which the steps are converged.
    max_iter : int
        Most steps taken (accepted plain or extrapolated steps; a dropped proposal is not one).
    polish : bool, default False
        Also require the fixed-point residual below ``NATGRAD_RESIDUAL_PER_TOL * tol``.
    project : callable, optional
        ``project(natural) -> natural`` onto the domain of ``at`` (e.g. VGP's site precisions
        at their floor), applied to an extrapolated candidate: a damped step between two points
        of the domain stays in it, an extrapolation need not.
    extrapolate : bool, default True
        Take Anderson's extrapolated candidates (False: the plain damped steps alone;
        :func:`extrapolates` says which a likelihood gets).

    Returns
    -------
    point : object or None
        ``at``'s ``point`` of the last step taken (None when none was).
    n_steps : int
        Steps taken.
    converged : bool
    """
    shapes = [np.shape(a) for a in natural]
    bounds = np.cumsum([0] + [int(np.size(a)) for a in natural])

    def flat(parts):
        return np.concatenate([np.ravel(p) for p in parts])

    def parts(vector):
        return tuple(vector[a:b].reshape(shape) for a, b, shape in zip(bounds[:-1], bounds[1:], shapes))

    memory = min(NATGRAD_ANDERSON_MEMORY, NATGRAD_ANDERSON_BYTES // max(1, 16 * int(bounds[-1]))) if extrapolate else 0
    rho, n_steps, converged, point = 1.0, 0, False, None
    residual_tol = NATGRAD_RESIDUAL_PER_TOL * tol if polish else np.inf
    x, target_x = flat(natural), flat(target)
    residual = target_x - x

    def fresh_history():
        # None without extrapolation: its history would hold (and push) ~4 vectors a step.
        if memory < 2:
            return None
        history = Anderson(memory)
        history.push(x, x + rho * residual)
        return history

    history, extrapolate = fresh_history(), False
    while n_steps < max_iter:
        extrapolate = extrapolate and rho == 1.0 and history is not None and len(history) >= 2
        # The damped step as (1 - rho) x + rho T(x), which at rho = 1 is T(x) to the last bit: a
        # robust-max fit's polish stopped on iris where x + rho (T(x) - x) left its steps at the cap.
        candidate = (1.0 - rho) * x + rho * target_x
        if extrapolate:
            try:
                proposal = history.proposal()
            except np.linalg.LinAlgError:
                # Residuals of a step that overflowed (large counts: Poisson targets in the
                # thousands) or a least squares without an SVD: no extrapolation from this history.
                proposal, history = None, fresh_history()
            if proposal is None or not np.all(np.isfinite(proposal)):
                extrapolate = False
            else:
                candidate = proposal if project is None else flat(project(parts(proposal)))
        try:
            elbo_c, target_c, point_c = at(parts(candidate))
        except (np.linalg.LinAlgError, FloatingPointError):
            elbo_c = -np.inf
        gain = elbo_c - elbo if np.isfinite(elbo_c) else -np.inf
        if gain >= 0.0:
            elbo, point, n_steps = elbo_c, point_c, n_steps + 1
            before, x, target_x = residual, candidate, flat(target_c)
            residual = target_x - x
            if gain < tol and _relative_size(residual, x) < residual_tol:
                converged = True
                break
            if not extrapolate:
                new_rho = next_step_size(rho, before, residual)
                if new_rho != rho:
                    rho, history = new_rho, fresh_history()
                    continue
            if history is not None:
                history.push(x, x + rho * residual)
            extrapolate = True
        elif extrapolate:
            extrapolate = False                # a plain step from the same point next
        elif gain > -tol and (rho <= NATGRAD_ROUNDING_STEP or _relative_size(residual, x) < residual_tol):
            converged = True
            break
        else:
            rho *= 0.5
            if rho < NATGRAD_MIN_STEP:
                break
            history = fresh_history()
    return point, n_steps, converged
