"""Coregionalisation kernels of several correlated outputs: the intrinsic model (ICM) and the
linear model of coregionalisation (LMC).

A multi-output kernel reads the long layout (:mod:`gpdsl.multioutput`): X has the input columns
0..D-1 and, last, the output index p in {0..P-1} of each row, an integer-valued float.  Its
covariance between (x, p) and (x', p') is

    ICM:  k((x, p), (x', p')) = B[p, p'] k(x, x'),           B = W W^T + diag(kappa),
    LMC:  k((x, p), (x', p')) = sum_q B_q[p, p'] k_q(x, x'),  B_q = W_q W_q^T + diag(kappa_q),

with W (P, rank) unconstrained and kappa (P,) positive (Alvarez, Rosasco & Lawrence (2012),
eqs. 13 and 17; GPy's ``Coregionalize`` times a kernel, GPyTorch's ``IndexKernel``/
``MultitaskKernel`` with B = F F^T + diag(v)).  The base kernels see X[:, :-1] only (their own
``active_dims`` count those columns); d/d X1 of the output column is 0.  On rows that form a full
isotopic grid in output-major order (every input at every output, all rows of output 0 first)
the ICM's Gram matrix is B kron K_x, which :meth:`ICM.kronecker_factors` hands to Exact's
Kronecker path (:mod:`gpdsl.methods.exact`).

Default starts.  W = 0 is a stationary point of every objective (dW = (G_B + G_B^T) W = 0) and W
with equal columns stays so under gradient steps (each column gets the same update), so neither
starts a fit; GPy draws W at random instead.  Here the start is deterministic: column r of W is
the cosine c_pr = cos(pi (r + s) (p + 1/2) / P) (the DCT-II basis for s = 0: orthogonal columns,
the first one constant, so that the outputs start positively correlated), scaled so that the
largest row of W has squared norm 1/2, and kappa_p = 1 - |W_p|^2, so that every B[p, p] starts
at 1 (the base kernel's variance keeps its meaning) and every kappa at >= 1/2.  An LMC's part q
takes the shift s = q / Q, so that parts with equal base kernels do not start equal (a start
symmetric in q stays symmetric).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .._jit import coregion as _jit
from ..checks import check_positive_int, output_indices
from ..chunks import add_partial
from ..components import Component, Parameter, bind_parts, part_parameters
from ..parameters import Fixed, Shared, check_hyperparameter, declared_value
from ..priors import as_prior
from .base import Kernel, KroneckerFactors, _Composite

# Field names of the coregionalisation matrix's parameters (an LMC part's base kernel must not use them).
_B_NAMES = ("W", "kappa")


def output_index(owner, X, P):
    """The output index of each row: X's last column as integers (:func:`gpdsl.checks.output_indices`),
    with at least one input column before it.

    Parameters
    ----------
    owner : str
        The kernel, for the message.
    X : ndarray, shape (n, D + 1)
    P : int
        The number of outputs.

    Returns
    -------
    ndarray of intp, shape (n,)

    Raises
    ------
    ValueError
        X has fewer than two columns, or a value of its last column is not an integer in [0, P).
    """
    if np.ndim(X) == 2 and np.shape(X)[1] < 2:
        raise ValueError(f"{owner}: X must hold the inputs and, as its last column, the output index (shape "
                         f"(n, D + 1) with D >= 1), got shape {np.shape(X)}")
    return output_indices(owner, X, P)


def default_coregion(P, rank, shift=0.0):
    """The deterministic start (W, kappa) of the module docstring.

    Parameters
    ----------
    P, rank : int
        Outputs and columns of W (1 <= rank <= P).
    shift : float, default 0.0
        The frequency shift s (q / Q for an LMC's part q).

    Returns
    -------
    W : ndarray, shape (P, rank)
    kappa : ndarray, shape (P,)
        B = W W^T + diag(kappa) has unit diagonal.
    """
    C = np.cos(np.pi * np.outer(np.arange(P) + 0.5, np.arange(rank) + shift) / P)
    rows = np.einsum("pr,pr->p", C, C)
    W = C / np.sqrt(2.0 * rows.max())
    return W, 1.0 - np.einsum("pr,pr->p", W, W)


def _check_counts(owner, P, rank):
    """The output count P and the rank, checked: positive integers (gpdsl.checks.check_positive_int,
    as every part that takes P) and rank at most P.  Returns them as ints."""
    check_positive_int(owner, "output_count", P)
    check_positive_int(owner, "rank", rank)
    if rank > P:
        raise ValueError(f"{owner}: rank must be in [1, {P}] (at most output_count), got {rank!r}")
    return int(P), int(rank)


def _check_B_spec(owner, name, spec, shape):
    """Validate a declared W (shape (P, rank)) or kappa (shape (P,)): a scalar broadcasts."""
    check_hyperparameter(owner, name, spec, positive=name == "kappa", ndim_max=len(shape))
    got = declared_value(spec).shape
    if got not in ((), shape):
        raise ValueError(f"{owner}: {name} must have shape {shape} (outputs{', rank' if name == 'W' else ''}) or be "
                         f"a scalar, got shape {got}")


def _part_spec(spec, q, default):
    """Part q's declared value of an LMC's W or kappa: ``default`` for None, entry q of an array
    (of the value inside a Fixed), a scalar or a prior as it is."""
    if spec is None:
        return default
    if isinstance(spec, Fixed):
        value = declared_value(spec)
        return Fixed(value[q] if value.ndim else value)
    if as_prior(spec) is not None or np.ndim(spec) == 0:
        return spec
    return np.asarray(spec, dtype=float)[q]


def _B_grads(W, G_B):
    """d/d W and d/d kappa from the adjoint G_B (P, P) of B = W W^T + diag(kappa)."""
    return {"W": (G_B + G_B.T) @ W, "kappa": np.diag(G_B).copy()}


def _distinct_inputs(X):
    """The distinct rows of X's input columns and each row's position among them (None where the
    rows are all distinct).

    Parameters
    ----------
    X : ndarray, shape (n, D + 1)

    Returns
    -------
    inputs : ndarray, shape (u, D)
    position : ndarray of intp, shape (n,), or None
    """
    inputs = X[:, :-1]
    if inputs.shape[0] < 2:
        return inputs, None
    distinct, position = np.unique(inputs, axis=0, return_inverse=True)
    if distinct.shape[0] == inputs.shape[0]:
        return inputs, None
    return distinct, position.reshape(-1)


def input_gram(kernel, X1, X2):
    """k(X1[:, :-1], X2[:, :-1]) with the base kernel evaluated once per distinct input.

    The long layout repeats an input once per output it is observed at: inducing inputs shared by
    P outputs are P copies of M inputs, an isotopic grid P copies of N, so evaluating on the
    distinct inputs and copying the entries saves up to (P - 1)/P of each side's kernel work (a
    heterotopic 10^5-row LMC's collapsed bound: K_uf at 768 long inducing rows from 256 inputs,
    benchmarks/HISTORY.md).  The entries are those of the direct evaluation up to the rounding
    of the base kernel's pairwise distances.

    Parameters
    ----------
    kernel : gpdsl.kernels.Kernel
        The base kernel, of the input columns.
    X1 : ndarray, shape (n1, D + 1)
    X2 : ndarray, shape (n2, D + 1)

    Returns
    -------
    ndarray, shape (n1, n2)
    """
    inputs1, position1 = _distinct_inputs(X1)
    inputs2, position2 = (inputs1, position1) if X2 is X1 else _distinct_inputs(X2)
    K = kernel.gram(inputs1, inputs2)
    if position1 is not None:
        K = K[position1]
    if position2 is not None:
        K = K[:, position2]
    return K


def _long_rows(owner, X, P):
    """(distinct inputs (u, D), each row's position among them (n,), each row's output (n,)) of
    long rows X (n, D + 1) (:func:`_distinct_inputs`, the positions 0..n-1 where all are distinct)."""
    outputs = output_index(owner, X, P)
    inputs, position = _distinct_inputs(X)
    return inputs, (np.arange(X.shape[0]) if position is None else position), outputs


def coregion_gram(owner, kernels, B, X1, X2):
    """sum_q B_q[p1, p2] k_q(X1[:, :-1], X2[:, :-1]) with each base kernel evaluated once per
    distinct input (:func:`input_gram`) and each part added in one sweep
    (:func:`gpdsl._jit.coregion.coregion_add`; the same sums, in the same order, as adding each
    part's gathered values times its gathered B_q).

    Parameters
    ----------
    owner : str
        The kernel, for messages.
    kernels : sequence of Kernel
        The Q base kernels.
    B : ndarray, shape (Q, P, P)
    X1 : ndarray, shape (n1, D + 1)
    X2 : ndarray, shape (n2, D + 1)

    Returns
    -------
    ndarray, shape (n1, n2)
    """
    P = B.shape[1]
    inputs1, position1, p1 = _long_rows(owner, X1, P)
    inputs2, position2, p2 = (inputs1, position1, p1) if X2 is X1 else _long_rows(owner, X2, P)
    out = np.empty((X1.shape[0], X2.shape[0]))
    repeats = position2.shape[0] != inputs2.shape[0]
    for q, k in enumerate(kernels):
        K = k.gram(inputs1, inputs2)
        # The sweep reads each row's values along the columns contiguously.
        _jit.coregion_add(out, K[:, position2] if repeats else K, B[q], position1, p1, p2, q == 0)
    return out


def coregion_vjp(owner, kernels, W, B, X1, X2, G):
    """The VJP of :func:`coregion_gram` through the base kernels' slope fields, or None where a
    base kernel has none (:meth:`gpdsl.kernels.stationary.Stationary.slope_fields` returns None,
    or the kernel has no such method).

    Each base kernel's values and slope dk_q/dr^2 are formed once per distinct input pair; one
    sweep (:func:`gpdsl._jit.coregion.coregion_vjp_sweep`) contracts G, weighted by B_q[p1, p2],
    with them into what the distance adjoint needs per long row, so that d/d X1 stays per row
    (the copies of an input at different outputs have different adjoints) while no exp or
    (n1, n2) temporary is formed per copy.

    Parameters
    ----------
    owner : str
    kernels : sequence of Kernel
        The Q base kernels.
    W : ndarray, shape (Q, P, rank)
    B : ndarray, shape (Q, P, P)
        B_q = W_q W_q^T + diag(kappa_q).
    X1 : ndarray, shape (n1, D + 1)
    X2 : ndarray, shape (n2, D + 1)
    G : ndarray, shape (n1, n2)

    Returns
    -------
    (list of dict, ndarray) or None
        Part q's gradients under its ICM's names (``W``, ``kappa``, ``kernel.lengthscale``,
        ``kernel.variance``) and d/d X1 (n1, D + 1), its output column 0.
    """
    P = B.shape[1]
    inputs1, position1, p1 = _long_rows(owner, X1, P)
    inputs2, position2, p2 = (inputs1, position1, p1) if X2 is X1 else _long_rows(owner, X2, P)
    G = np.ascontiguousarray(G, dtype=float)
    u1, columns = inputs1.shape[0], position2.shape[0]
    # Parts per sweep: as many as keep their fields (values and slopes at every column) within
    # twice G's size, so that a VJP on X, X (Exact's, with u1 ~ n1) holds 2 n^2 numbers of fields
    # rather than 2 Q n^2 (the review's 8 n^2 at Q = 4), while a sparse block's few distinct
    # inducing inputs (u1 = M of M P rows) still take every part in one sweep over G.
    size = max(1, min(len(kernels), G.size // max(1, u1 * columns)))
    pieces = []
    for start in range(0, len(kernels), size):
        group = kernels[start:start + size]
        K, T = np.empty((2, len(group), u1, inputs2.shape[0]))
        for q, k in enumerate(group):
            centre = getattr(k, "slope_fields", lambda *_: None)(inputs1, inputs2, K[q], T[q])   # inputs1's mean
            if centre is None:
                return None
        if columns != inputs2.shape[0]:
            # The sweep reads each row's fields along the columns contiguously.
            K, T = K[:, :, position2], T[:, :, position2]
        A2 = X2[:, :-1] - centre
        pieces.append(_jit.coregion_vjp_sweep(G, K, T, B[start:start + size], position1, p1, p2,
                                              np.ascontiguousarray(A2.T)))
    row, col, SA2, GB = (np.concatenate(part) for part in zip(*pieces))
    A1 = X1[:, :-1] - centre
    parts, d_X1 = [], np.zeros(X1.shape)
    for q, k in enumerate(kernels):
        d_inputs, d_ls = k.distance_vjp(A1, A2, row[q], col[q], SA2[q])
        d_X1[:, :-1] += d_inputs
        # d/d variance: sum G B_q K_q / variance_q, K_q's block sums being GB_q.
        parts.append({**_B_grads(W[q], GB[q]),
                      "kernel.lengthscale": np.array(d_ls.sum()) if np.ndim(k.lengthscale) == 0 else d_ls,
                      "kernel.variance": np.array(np.sum(B[q] * GB[q]) / float(k.variance))})
    return parts, d_X1


@dataclass(frozen=True, eq=False)
class ICM(Kernel):
    """Intrinsic coregionalisation model k((x, p), (x', p')) = B[p, p'] k(x, x'), B = W W^T +
    diag(kappa), on X whose last column is the output index (the module docstring).

    Parameters: ``W`` (dims ``("output", "rank")``), ``kappa`` (dims ``("output",)``) and the base
    kernel's, named ``kernel.<name>`` (in a model: ``kernel.W``, ``kernel.kappa``,
    ``kernel.kernel.lengthscale``).  B's scale and a base kernel's variance multiply, so one of
    them is a flat direction of every objective: GPy leaves both free (as here by default),
    GPyTorch's ``MultitaskKernel`` has no base variance; ``kernel=SquaredExponential(variance=
    gd.Fixed(1.0))`` does the same here and spares the optimiser that direction.

    Parameters
    ----------
    kernel : Kernel
        The base kernel k(x, x') of the inputs X[:, :-1] (any kernel of one output).
    output_count : int
        P >= 1, the number of outputs.
    rank : int, default 1
        Columns of W, in [1, P].
    W : array of shape (P, rank), float, Fixed, prior or None, default None
        The start of W (unconstrained); None: the deterministic start of the module docstring.
    kappa : array of shape (P,), float, Fixed, prior or None, default None
        The start of kappa (positive); None: 1 - |W_p|^2 with the default W (B's diagonal 1).
    active_dims, name : keyword only, optional
        As for every kernel (:class:`gpdsl.kernels.Kernel`); the last selected column is the
        output index.

    Raises
    ------
    TypeError
        ``kernel`` is not a kernel, ``output_count`` or ``rank`` not an int, W or kappa not a
        number, array, Fixed or prior.
    ValueError
        ``kernel`` has several outputs or latent functions, ``output_count`` < 1, ``rank`` outside
        [1, P], W or kappa of another shape, kappa not positive, W or kappa not finite.
    """

    kernel: Kernel
    output_count: int = None
    rank: int = 1
    W: object = None
    kappa: object = None
    hyperparameters = _B_NAMES
    unconstrained = ("W",)

    def __post_init__(self):
        if not isinstance(self.kernel, Kernel):
            raise TypeError(f"ICM: kernel must be a gpdsl kernel (the base kernel of the inputs), got {self.kernel!r}")
        if self.kernel.output_count is not None or self.kernel.n_outputs != 1:
            raise ValueError(f"ICM: the base kernel must be a kernel of one output and one latent function, got "
                             f"{self.kernel.describe()}")
        P, rank = _check_counts("ICM", self.output_count, self.rank)
        object.__setattr__(self, "output_count", P)
        object.__setattr__(self, "rank", rank)
        for name, shape in (("W", (P, self.rank)), ("kappa", (P,))):
            if getattr(self, name) is not None:
                _check_B_spec("ICM", name, getattr(self, name), shape)

    def _starts(self):
        """(W, kappa) as declared, None replaced by the default start."""
        W, kappa = default_coregion(self.output_count, self.rank)
        return (W if self.W is None else self.W), (kappa if self.kappa is None else self.kappa)

    def parameters(self, X):
        """W (P, rank), kappa (P,) and the base kernel's parameters on X[:, :-1] (``kernel.<name>``).

        Parameters
        ----------
        X : ndarray, shape (N, D + 1)

        Returns
        -------
        list of Parameter
        """
        X = np.asarray(X)
        output_index("ICM", X, self.output_count)
        W, kappa = self._starts()
        return [Parameter("W", W, positive=False, shape=(self.output_count, self.rank), dims=("output", "rank")),
                Parameter("kappa", kappa, shape=(self.output_count,), dims=("output",))] + \
            part_parameters(["kernel"], [self.kernel], X[:, :-1])

    def bind(self, values=None):
        """A copy whose W, kappa and base kernel hold natural-scale float arrays.

        Parameters
        ----------
        values : mapping of str to array_like, optional
            By local name: ``W``, ``kappa``, ``kernel.<name>``.

        Returns
        -------
        ICM
        """
        values = dict(values or {})
        W, kappa = self._starts()
        bound = Component.bind(dataclasses.replace(self, W=W, kappa=kappa), values)
        object.__setattr__(bound, "W", np.broadcast_to(bound.W, (self.output_count, self.rank)).astype(float))
        object.__setattr__(bound, "kappa", np.broadcast_to(bound.kappa, (self.output_count,)).astype(float))
        object.__setattr__(bound, "kernel", bind_parts(["kernel"], [self.kernel], values)[0])
        return bound

    @classmethod
    def variants(cls):
        parts = Kernel.registry
        W = np.array([[0.8, -0.3], [0.5, 0.9], [-0.4, 0.6]])
        return (cls(parts["SquaredExponential"](0.8, 1.3), 3, rank=2, W=W, kappa=np.array([0.3, 0.7, 0.2])),
                cls(parts["Matern52"](np.array([0.7, 1.2]), 0.9), 2))

    def coregion(self):
        """B = W W^T + diag(kappa) (bound).

        Returns
        -------
        ndarray, shape (P, P)
        """
        return self.W @ self.W.T + np.diag(self.kappa)

    def gram(self, X1, X2):
        """B[p1, p2] * k(X1[:, :-1], X2[:, :-1]).

        Parameters
        ----------
        X1 : ndarray, shape (n1, D + 1)
        X2 : ndarray, shape (n2, D + 1)

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        return coregion_gram("ICM", (self.kernel,), self.coregion()[None], X1, X2)

    def diag(self, X):
        """B[p, p] * k(x, x) at each row.

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)

        Returns
        -------
        ndarray, shape (n,)
        """
        p = output_index("ICM", X, self.output_count)
        return np.diag(self.coregion())[p] * self.kernel.diag(X[:, :-1])

    def vjp(self, X1, X2, G, K=None):
        """sum_ij G_ij dK_ij / d(.): the base kernel's VJP with G * B[p1, p2]; W and kappa from
        G_B[p, p'] = sum over the rows of outputs p, p' of G * K_x (d/dW = (G_B + G_B^T) W,
        d/d kappa = diag G_B); d/d X1 of the output column 0.  Through the base kernel's slope
        fields on the distinct inputs (:func:`coregion_vjp`) where it has them.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D + 1)
        X2 : ndarray, shape (n2, D + 1)
        G : ndarray, shape (n1, n2)
        K : ndarray, shape (n1, n2), optional
            Unused (K_x is not recoverable from K where B has zeros).

        Returns
        -------
        grads : dict of str to ndarray
        d_X1 : ndarray, shape (n1, D + 1)
        """
        fused = coregion_vjp("ICM", (self.kernel,), self.W[None], self.coregion()[None], X1, X2, G)
        if fused is not None:
            return fused[0][0], fused[1]
        P = self.output_count
        p1, p2 = output_index("ICM", X1, P), output_index("ICM", X2, P)
        K_x = input_gram(self.kernel, X1, X2)
        grads, d_inputs = self.kernel.vjp(X1[:, :-1], X2[:, :-1], G * self.coregion()[np.ix_(p1, p2)], K_x)
        # Block sums of G * K_x by one-hot products: (P, n1) @ (n1, n2) @ (n2, P).
        G_B = (np.eye(P)[p1].T @ (G * K_x)) @ np.eye(P)[p2]
        grads = {**_B_grads(self.W, G_B), **{f"kernel.{k}": v for k, v in grads.items()}}
        return grads, np.column_stack([d_inputs, np.zeros(X1.shape[0])])

    def diag_vjp(self, X, g):
        """sum_i g_i d diag_i / d(.): the base kernel's with g * B[p, p]; d/d kappa_p = sum over
        output p's rows of g k(x, x), d/d W_p = 2 W_p d/d kappa_p.

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)
        g : ndarray, shape (n,)

        Returns
        -------
        dict of str to ndarray
        """
        p = output_index("ICM", X, self.output_count)
        k_xx = self.kernel.diag(X[:, :-1])
        d_kappa = np.bincount(p, weights=g * k_xx, minlength=self.output_count)
        grads = self.kernel.diag_vjp(X[:, :-1], g * np.diag(self.coregion())[p])
        return {"W": 2.0 * d_kappa[:, None] * self.W, "kappa": d_kappa, **{f"kernel.{k}": v for k, v in grads.items()}}

    def kronecker_factors(self, X):
        """(B, K_x) where X is a full isotopic grid in output-major order: n = N P rows, rows
        p N .. (p + 1) N - 1 of output p, the same inputs in the same order in every block; else None.

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)

        Returns
        -------
        KroneckerFactors or None
            gram(X, X) = kron(B, K_x).
        """
        N = self._grid_size(X)
        if N is None:
            return None
        inputs = X[:N, :-1]
        return KroneckerFactors(self.coregion(), self.kernel.gram(inputs, inputs))

    def kronecker_vjp(self, X, G_B, G_x, K_x=None):
        """The gradients from the adjoints of the factors of :meth:`kronecker_factors`.

        Parameters
        ----------
        X : ndarray, shape (N P, D + 1)
            A grid :meth:`kronecker_factors` accepts.
        G_B : ndarray, shape (P, P)
            d objective / d B.
        G_x : ndarray, shape (N, N)
            d objective / d K_x.
        K_x : ndarray, shape (N, N), optional
            The factor K_x when the caller has it (passed to the base kernel's ``vjp``).

        Returns
        -------
        dict of str to ndarray
            By local name (``W``, ``kappa``, ``kernel.<name>``).

        Raises
        ------
        ValueError
            X is not such a grid.
        """
        N = self._grid_size(X)
        if N is None:
            raise ValueError("ICM.kronecker_vjp: X is not a full isotopic output-major grid")
        inputs = X[:N, :-1]
        grads, _ = self.kernel.vjp(inputs, inputs, G_x, K_x)
        return {**_B_grads(self.W, G_B), **{f"kernel.{k}": v for k, v in grads.items()}}

    def _grid_size(self, X):
        """N where X is a full isotopic output-major grid of N inputs, else None."""
        P = self.output_count
        p = output_index("ICM", X, P)
        n = X.shape[0]
        if n == 0 or n % P:
            return None
        N = n // P
        if not np.array_equal(p, np.repeat(np.arange(P), N)):
            return None
        blocks = X[:, :-1].reshape(P, N, -1)
        return N if np.array_equal(blocks, np.broadcast_to(blocks[:1], blocks.shape)) else None

    def describe(self):
        """E.g. ``"ICM(SquaredExponential(isotropic); 3 outputs, rank 2)"``.

        Returns
        -------
        str
        """
        return f"ICM({self.kernel.describe()}; {self.output_count} outputs, rank {self.rank})"


@dataclass(frozen=True, eq=False)
class LMC(_Composite):
    """Linear model of coregionalisation k((x, p), (x', p')) = sum_q B_q[p, p'] k_q(x, x'), B_q =
    W_q W_q^T + diag(kappa_q): a sum of Q :class:`ICM` parts of one rank, on X whose last column is
    the output index (the module docstring).

    Parameters of part q (labelled by its base kernel's ``name`` or its index, as in a
    :class:`gpdsl.kernels.Sum`): ``<q>.W`` (dims ``("output", "rank")``), ``<q>.kappa`` (dims
    ``("output",)``) and the base kernel's, ``<q>.<name>`` (in a model ``kernel.0.W``,
    ``kernel.0.lengthscale``).

    Parameters
    ----------
    kernels : tuple of Kernel
        The base kernels k_q of the inputs X[:, :-1], at least two (one is an :class:`ICM`).
    output_count : int
        P >= 1, the number of outputs.
    rank : int, default 1
        Columns of every W_q, in [1, P].
    W : array of shape (Q, P, rank), float, Fixed, prior or None, default None
        The starts of the W_q, W[q] part q's (a Fixed array fixes every part's, a prior is each
        part's prior); None: the deterministic starts of the module docstring.
    kappa : array of shape (Q, P), float, Fixed, prior or None, default None
        The starts of the kappa_q, likewise; None: the defaults that go with the default W_q.
    active_dims, name : keyword only, optional
        As for every kernel (:class:`gpdsl.kernels.Kernel`); the last selected column is the
        output index.

    Raises
    ------
    TypeError
        ``kernels`` is not a tuple of at least two kernels; ``output_count`` or ``rank`` not an int.
    ValueError
        A base kernel of several outputs, or with a parameter named W or kappa; ``output_count`` < 1,
        ``rank`` outside [1, P]; W or kappa not Q values of the shapes above.
    """

    output_count: int = None
    rank: int = 1
    W: object = None
    kappa: object = None
    hyperparameters = ()

    def __post_init__(self):
        super().__post_init__()
        wide = [k.describe() for k in self.kernels if k.output_count is not None or k.n_outputs != 1]
        if wide:
            raise ValueError(f"LMC: each base kernel must be a kernel of one output, got {wide[0]}")
        P, rank = _check_counts("LMC", self.output_count, self.rank)
        object.__setattr__(self, "output_count", P)
        object.__setattr__(self, "rank", rank)
        Q = len(self.kernels)
        for name, shape in (("W", (Q, P, self.rank)), ("kappa", (Q, P))):
            spec = getattr(self, name)
            if spec is None:
                continue
            if isinstance(spec, Shared):
                raise TypeError(f"LMC: {name} cannot be gd.Shared (it holds one value per part); declare it as an "
                                f"array, Fixed or a prior")
            if isinstance(spec, (list, tuple)):      # one array per part, as a model file lists them
                try:
                    spec = np.asarray(spec, dtype=float)
                except (TypeError, ValueError):
                    raise TypeError(f"LMC: {name} must be an array of shape {shape}, Fixed(...) of one or a prior; "
                                    f"a list or tuple must hold numbers, got {spec!r}") from None
                object.__setattr__(self, name, spec)
            check_hyperparameter("LMC", name, spec, positive=name == "kappa", ndim_max=len(shape))
            got = declared_value(spec).shape
            if got not in ((), shape):
                raise ValueError(f"LMC: {name} must have shape {shape} (parts, outputs{', rank' if name == 'W' else ''}) "
                                 f"or be a scalar, got shape {got}")

    def _starts(self, q):
        """Part q's declared (W, kappa): its slice of the declared arrays (a Fixed array's slice
        is Fixed, a prior is every part's), None replaced by its default start."""
        W, kappa = default_coregion(self.output_count, self.rank, q / len(self.kernels))
        return _part_spec(self.W, q, W), _part_spec(self.kappa, q, kappa)

    def parameters(self, X):
        """Per part q: ``<q>.W`` (P, rank), ``<q>.kappa`` (P,) and the base kernel's on X[:, :-1].

        Parameters
        ----------
        X : ndarray, shape (N, D + 1)

        Returns
        -------
        list of Parameter

        Raises
        ------
        ValueError
            A base kernel has a parameter named W or kappa.
        """
        X = np.asarray(X)
        output_index("LMC", X, self.output_count)
        P, out = self.output_count, []
        for q, (label, k) in enumerate(zip(self.labels(), self.kernels)):
            own = k.parameters(X[:, :-1])
            clash = [p.name for p in own if p.name in _B_NAMES]
            if clash:
                raise ValueError(f"LMC: base kernel {label} ({k.describe()}) has a parameter named {clash[0]!r}, "
                                 f"which is the part's coregionalisation parameter's name")
            W, kappa = self._starts(q)
            out += [Parameter(f"{label}.W", W, positive=False, shape=(P, self.rank), dims=("output", "rank")),
                    Parameter(f"{label}.kappa", kappa, shape=(P,), dims=("output",))]
            out += part_parameters([label], [k], X[:, :-1])
        return out

    def bind(self, values=None):
        """A copy whose base kernels, W (Q, P, rank) and kappa (Q, P) hold natural-scale values.

        Parameters
        ----------
        values : mapping of str to array_like, optional
            By local name: ``<q>.W``, ``<q>.kappa``, ``<q>.<name>``.

        Returns
        -------
        LMC
        """
        values = values or {}
        icms = []
        for q, label in enumerate(self.labels()):
            # The part's names as its ICM's: W and kappa, the base kernel's under "kernel.".
            local = {k[len(label) + 1:]: v for k, v in values.items() if k.startswith(label + ".")}
            icms.append(self._icm(q).bind({k if k in _B_NAMES else f"kernel.{k}": v for k, v in local.items()}))
        return dataclasses.replace(self, kernels=tuple(i.kernel for i in icms), W=np.stack([i.W for i in icms]),
                                   kappa=np.stack([i.kappa for i in icms]))

    def part_kernel(self, label):
        """Part ``label``'s kernel B_q (x) k_q as an :class:`ICM` of this LMC's W_q, kappa_q and
        base kernel (bound where the LMC is): the prior covariance of the latent part f_q, the
        parts independent a priori (f = sum_q f_q), whose posterior
        ``Posterior.predict_f(component=label)`` gives through its cross-covariance B_q (x) k_q
        with the training or inducing rows.

        Parameters
        ----------
        label : str or int
            The part's base kernel's ``name``, or its index (as text or int).

        Returns
        -------
        ICM
            On the columns of X this LMC reads (its ``active_dims``, :meth:`_on_own_columns`), so
            that its Gram matrix on X is part q's term of the LMC's.

        Raises
        ------
        ValueError
            No part has that label.
        """
        labels = self.labels()
        if str(label) not in labels:
            raise ValueError(f"LMC: no part labelled {label!r}; the parts are {labels}")
        return self._on_own_columns(self._icm(labels.index(str(label))))

    def _icm(self, q):
        """Part q as an :class:`ICM` (bound where the LMC is)."""
        W, kappa = self._starts(q)
        return ICM(self.kernels[q], self.output_count, self.rank, W=W, kappa=kappa)

    def _coregions(self):
        """The parts' B_q (bound), stacked (Q, P, P)."""
        return np.stack([self._icm(q).coregion() for q in range(len(self.kernels))])

    def _local(self, q, grads):
        """Part q's ICM gradients under the LMC's names: ``<q>.W``, ``<q>.kappa``, ``<q>.<name>``."""
        label = self.labels()[q]
        return {f"{label}.{k[len('kernel.'):] if k.startswith('kernel.') else k}": v for k, v in grads.items()}

    @classmethod
    def variants(cls):
        parts = Kernel.registry
        return (cls((parts["SquaredExponential"](0.9, 1.1), parts["Matern32"](np.array([1.3, 0.6]), 0.8)), 3),
                cls((parts["Matern52"](0.6, 0.7), parts["SquaredExponential"](1.4, 0.9, name="smooth")), 2, rank=2,
                    W=np.array([[[0.5, -0.2], [0.3, 0.8]], [[1.1, 0.1], [-0.6, 0.4]]]),
                    kappa=np.array([[0.2, 0.5], [0.9, 0.3]])))

    def gram(self, X1, X2):
        """sum_q B_q[p1, p2] * k_q(X1[:, :-1], X2[:, :-1]).

        Parameters
        ----------
        X1 : ndarray, shape (n1, D + 1)
        X2 : ndarray, shape (n2, D + 1)

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        return coregion_gram("LMC", self.kernels, self._coregions(), X1, X2)

    def diag(self, X):
        """sum_q B_q[p, p] * k_q(x, x) at each row.

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)

        Returns
        -------
        ndarray, shape (n,)
        """
        return sum(self._icm(q).diag(X) for q in range(len(self.kernels)))

    def vjp(self, X1, X2, G, K=None):
        """The parts' ICM VJPs (:meth:`ICM.vjp`), summed: in one sweep over G
        (:func:`coregion_vjp`) where every base kernel has slope fields.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D + 1)
        X2 : ndarray, shape (n2, D + 1)
        G : ndarray, shape (n1, n2)
        K : ndarray, shape (n1, n2), optional
            Unused.

        Returns
        -------
        grads : dict of str to ndarray
        d_X1 : ndarray, shape (n1, D + 1)
        """
        fused = coregion_vjp("LMC", self.kernels, np.asarray(self.W, dtype=float), self._coregions(), X1, X2, G)
        if fused is not None:
            grads = {}
            for q, part in enumerate(fused[0]):
                grads.update(self._local(q, part))
            return grads, fused[1]
        grads, d_X1 = {}, np.zeros(X1.shape)
        for q in range(len(self.kernels)):
            g, dx = self._icm(q).vjp(X1, X2, G)
            grads = add_partial(grads, self._local(q, g))
            d_X1 += dx
        return grads, d_X1

    def diag_vjp(self, X, g):
        """The parts' ICM diagonal VJPs (:meth:`ICM.diag_vjp`), summed.

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)
        g : ndarray, shape (n,)

        Returns
        -------
        dict of str to ndarray
        """
        grads = {}
        for q in range(len(self.kernels)):
            grads = add_partial(grads, self._local(q, self._icm(q).diag_vjp(X, g)))
        return grads

    def describe(self):
        """E.g. ``"LMC(SquaredExponential(isotropic), Matern32(ARD); 3 outputs, rank 1)"``.

        Returns
        -------
        str
        """
        return f"LMC({', '.join(k.describe() for k in self.kernels)}; {self.output_count} outputs, rank {self.rank})"


__all__ = ["ICM", "LMC", "output_index", "default_coregion"]
