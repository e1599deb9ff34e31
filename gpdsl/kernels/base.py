"""The kernel interface and the composites (sums and products of kernels).

A kernel is a frozen dataclass (:class:`gpdsl.components.Component`) whose hyperparameters are
fields; the methods below run on a bound kernel (:meth:`Component.bind`), whose fields hold
natural-scale float arrays.  Inputs are float arrays of shape (n, D).  A new kernel subclasses
:class:`Kernel`, declares ``hyperparameters`` (or overrides ``parameters``) and implements:

==========================================  ==================================================
``gram(X1, X2)``                            the covariance matrix, shape (n1, n2)
``diag(X)``                                 k(x_i, x_i), shape (n,)
``vjp(X1, X2, G, K=None)``                  (grads, d_X1): grads = {name: sum_ij G_ij dK_ij /
                                            d theta} on the natural scale, d_X1 (n1, D) =
                                            sum_j G_ij dK_ij / dX1_i; ``K`` optionally passes
                                            gram(X1, X2)
``diag_vjp(X, g)``                          {name: sum_i g_i d diag_i / d theta}
==========================================  ==================================================

A kernel of several correlated outputs (:mod:`gpdsl.kernels.coregion`) reads X's last column as
each row's output index and says how many outputs there are in ``output_count`` (None for a kernel
of one output); where its Gram matrix on a full isotopic grid is a Kronecker product B kron K_x it
also gives the factors (``kronecker_factors``) and the gradients from their adjoints
(``kronecker_vjp``), which Exact's Kronecker path uses (:mod:`gpdsl.methods.exact`).

Gradients are keyed by the kernel's own parameter names; the model qualifies them
(:class:`gpdsl.components.Bound`).

Every kernel also takes two keyword-only fields, handled here for all of them:
``active_dims`` (the columns of X the kernel reads, as GPML's covMask; a kernel's methods,
including ``parameters``, see only those columns and its ``d_X1`` is scattered back into X's
width) and ``name`` (the label of the kernel's parameters inside a sum or product, in place of
its index: ``kernel.trend.variance``).  Defining the class registers it (``Kernel.registry``) and
puts it under the conformance suite (``tests/test_conformance.py``: positive semi-definite Gram
matrices, ``diag`` against ``gram``, every gradient against finite differences, save/load and
model-file round trips).
"""
from __future__ import annotations

import contextvars
import dataclasses
import functools
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..chunks import add_partial
from ..components import Component, Parameter, bind_parts, part_parameters, qualify_keys


def _qualify_vjp(output, qualify):
    grads, d_X1 = output
    return qualify_keys(grads, qualify), d_X1


# The kernel whose method is running on its already selected columns: a method that calls
# another of the same kernel's methods (``diag`` through ``gram``, ``super()``) must not select again.
_SELECTED = contextvars.ContextVar("gpdsl_kernel_selected", default=None)


def _on_active_columns(method):
    """``method`` (gram, diag, vjp, diag_vjp or parameters) run on the kernel's ``active_dims``
    columns of its input arrays, with a ``vjp``'s d_X1 scattered back to the full width."""
    @functools.wraps(method)
    def selecting(self, *args, **kwargs):
        dims = self.active_dims
        if dims is None or _SELECTED.get() is self:
            return method(self, *args, **kwargs)
        columns = list(dims)
        arrays = 2 if method.__name__ in ("gram", "vjp") else 1      # kronecker_*: X alone
        width = np.shape(args[0])[1]
        if max(columns) >= width:
            raise ValueError(f"{type(self).__name__}: active_dims {tuple(columns)} names a column beyond X's "
                             f"{width} feature(s)")
        args = tuple(np.asarray(a)[:, columns] for a in args[:arrays]) + args[arrays:]
        token = _SELECTED.set(self)
        try:
            out = method(self, *args, **kwargs)
        finally:
            _SELECTED.reset(token)
        if method.__name__ == "vjp":
            grads, d_sub = out
            d_X1 = np.zeros((d_sub.shape[0], width))
            d_X1[:, columns] = d_sub
            out = grads, d_X1
        return out
    return selecting


def _kernel_repr(kernel):
    """The dataclass repr with ``active_dims`` and ``name`` last and only where they are set."""
    common = ("active_dims", "name")
    shown = [f"{f.name}={getattr(kernel, f.name)!r}" for f in dataclasses.fields(kernel)
             if f.repr and f.name not in common]
    shown += [f"{name}={getattr(kernel, name)!r}" for name in common if getattr(kernel, name) is not None]
    return f"{type(kernel).__name__}({', '.join(shown)})"


def _check_common_fields(kernel):
    """Validate ``active_dims`` and ``name`` (every kernel's keyword-only fields)."""
    owner = type(kernel).__name__
    dims = kernel.active_dims
    if dims is not None:
        if isinstance(dims, (int, np.integer)):
            dims = (int(dims),)
        try:
            items = tuple(dims)
        except TypeError:
            raise TypeError(f"{owner}: active_dims must be None or a sequence of column indices, got {dims!r}") from None
        if not items or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in items):
            raise TypeError(f"{owner}: active_dims must be a non-empty sequence of non-negative column indices, "
                            f"got {kernel.active_dims!r}")
        if len(set(items)) != len(items):
            raise ValueError(f"{owner}: active_dims must not repeat a column, got {items}")
        object.__setattr__(kernel, "active_dims", tuple(int(d) for d in items))
    if kernel.name is not None and (not isinstance(kernel.name, str) or not kernel.name.isidentifier()):
        raise ValueError(f"{owner}: name must be None or an identifier such as 'trend' (letters, digits, "
                         f"underscores, not starting with a digit), got {kernel.name!r}")


@dataclass(frozen=True, eq=False)
class Kernel(Component, family="kernel"):
    """Base class of the covariance functions: the interface of the module docstring.

    Parameters
    ----------
    active_dims : sequence of int, optional (keyword only)
        The columns of X the kernel reads (GPML's covMask); None reads them all.
    name : str, optional (keyword only)
        The kernel's label inside a sum or product (``"trend"``): its parameters are then
        ``kernel.trend.<field>`` and ``Posterior.predict_f(X, component="trend")`` predicts it.
    """

    active_dims: object = field(default=None, kw_only=True)
    name: object = field(default=None, kw_only=True)

    gradient_outputs = {"vjp": _qualify_vjp, "diag_vjp": qualify_keys, "kronecker_vjp": qualify_keys}
    # The latent functions the kernel is the prior of: 1 for a kernel of one output, which a
    # likelihood of K latent functions shares among them all; K for one block per latent
    # function (:class:`gpdsl.kernels.Separate`, whose operations return stacks).
    n_outputs = 1
    # The number P of correlated outputs of a multi-output kernel, which reads X's last column as
    # each row's output index (:mod:`gpdsl.kernels.coregion`); None for a kernel of one output.
    output_count = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Set before @dataclass runs, which then keeps it (it never replaces a class's own __repr__).
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = _kernel_repr
        for method in ("gram", "diag", "vjp", "diag_vjp", "parameters", "kronecker_factors", "kronecker_vjp"):
            if method in cls.__dict__:
                setattr(cls, method, _on_active_columns(cls.__dict__[method]))
        own = cls.__dict__.get("__post_init__")
        if own is not None:
            @functools.wraps(own)
            def post_init(self):
                _check_common_fields(self)
                own(self)
            cls.__post_init__ = post_init

    def __post_init__(self):
        _check_common_fields(self)

    def __add__(self, other):
        if not isinstance(other, Kernel):
            return NotImplemented
        return Sum(Sum.flat_parts(self) + Sum.flat_parts(other))

    def __mul__(self, other):
        if not isinstance(other, Kernel):
            return NotImplemented
        return Product(Product.flat_parts(self) + Product.flat_parts(other))

    def gram(self, X1, X2):
        """Cross-covariance matrix k(X1, X2).

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        raise NotImplementedError(f"{type(self).__name__} does not define gram")

    def diag(self, X):
        """Prior variances k(x_i, x_i), the diagonal of ``gram(X, X)``.

        Parameters
        ----------
        X : ndarray, shape (n, D)

        Returns
        -------
        ndarray, shape (n,)
        """
        return np.diag(self.gram(X, X)).copy()

    def vjp(self, X1, X2, G, K=None):
        """Vector-Jacobian product of ``gram``: the contraction sum_ij G_ij dK_ij/d(.).

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)
        G : ndarray, shape (n1, n2)
            The adjoint d objective / d K.
        K : ndarray, shape (n1, n2), optional
            gram(X1, X2) when the caller already has it.

        Returns
        -------
        grads : dict of str to ndarray
            d/d each hyperparameter (natural scale), by local name.
        d_X1 : ndarray, shape (n1, D)
            d/d X1 (the inducing-input gradient when X1 is Z).
        """
        raise NotImplementedError(f"{type(self).__name__} does not define vjp")

    def diag_vjp(self, X, g):
        """Vector-Jacobian product of ``diag``: the contraction sum_i g_i d diag_i/d(.).

        Parameters
        ----------
        X : ndarray, shape (n, D)
        g : ndarray, shape (n,)
            The adjoint d objective / d diag.

        Returns
        -------
        dict of str to ndarray
            By local name.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define diag_vjp")

    def kronecker_factors(self, X):
        """The factors of ``gram(X, X) = kron(B, K_x)`` where the kernel has that structure at X
        (an :class:`gpdsl.kernels.ICM` on a full isotopic output-major grid), else None: the
        capability Exact's Kronecker path asks for (None here: no such structure).

        Parameters
        ----------
        X : ndarray, shape (n, D)

        Returns
        -------
        KroneckerFactors or None
        """
        return None

    def kronecker_vjp(self, X, G_B, G_x, K_x=None):
        """The gradients from the adjoints of the factors :meth:`kronecker_factors` gives, for a
        kernel that gives them.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        G_B : ndarray, shape (P, P)
            d objective / d B.
        G_x : ndarray, shape (N, N)
            d objective / d K_x.
        K_x : ndarray, shape (N, N), optional
            The factor K_x when the caller has it.

        Returns
        -------
        dict of str to ndarray
            By local name.
        """
        raise NotImplementedError(f"{type(self).__name__} has no Kronecker factors")


class KroneckerFactors(NamedTuple):
    """The factors of a kernel's Gram matrix on a full isotopic output-major grid of N inputs and
    P outputs: ``gram(X, X) = kron(B, K_x)`` (:meth:`Kernel.kronecker_factors`).

    Parameters
    ----------
    B : ndarray, shape (P, P)
        The coregionalisation matrix.
    K_x : ndarray, shape (N, N)
        The base kernel's Gram matrix at the N inputs (one output block's rows).
    """

    B: np.ndarray
    K_x: np.ndarray


class ConstantDiagonal(Kernel, abstract=True):
    """A kernel whose k(x, x) is its scalar ``variance`` field at every input (the stationary
    kernels, ``Constant``, ``White``): its ``diag`` and ``diag_vjp``.

    Parameters
    ----------
    active_dims, name : keyword only, optional
        As for every kernel (:class:`Kernel`); a subclass declares ``variance``.
    """

    def diag(self, X):
        """``variance`` at every input.

        Parameters
        ----------
        X : ndarray, shape (n, D)

        Returns
        -------
        ndarray, shape (n,)
        """
        return np.full(X.shape[0], float(self.variance))

    def diag_vjp(self, X, g):
        """d/d variance of sum_i g_i diag_i, i.e. sum_i g_i; the diagonal depends on nothing else.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        g : ndarray, shape (n,)

        Returns
        -------
        dict of str to ndarray
        """
        return {"variance": np.array(np.sum(g))}


def _common_output_count(composite):
    """The parts' common number of outputs (None for parts of one output), or ValueError naming
    two parts that differ: a kernel of several outputs reads X's last column as the output index,
    which a kernel of one output would read as an input feature."""
    # Each part's count once: a part's own count is its parts' (nested Sums), so asking twice a
    # level took 2^depth calls (49 nested Sums of a model file never finished).
    counts = [k.output_count for k in composite.kernels]
    for k, n in zip(composite.kernels[1:], counts[1:]):
        if n != counts[0]:
            def what(kernel, n):
                return f"{kernel.describe()} ({'one output' if n is None else f'{n} outputs'})"
            raise ValueError(f"{type(composite).__name__}: the parts must all be kernels of the same number of "
                             f"outputs, got {what(composite.kernels[0], counts[0])} and {what(k, n)}; a kernel of "
                             f"several outputs reads X's last column as the output index, so put a kernel of the "
                             f"inputs inside it (gd.kernels.ICM(k, P)) rather than beside it")
    return counts[0]


@dataclass(frozen=True, eq=False)
class _Composite(Kernel):
    kernels: tuple
    # Whether the parts may be kernels of several outputs (of one number P, which the composite then has).
    combines_outputs = False

    def __post_init__(self):
        if not isinstance(self.kernels, tuple) or len(self.kernels) < 2 or not all(isinstance(k, Kernel)
                                                                                  for k in self.kernels):
            raise TypeError(f"{type(self).__name__}: kernels must be a tuple of at least two kernels, "
                            f"got {self.kernels!r}")
        wide = [k for k in self.kernels if k.n_outputs > 1]
        if wide and self.n_outputs == 1:
            raise ValueError(f"{type(self).__name__}: a kernel of several latent functions "
                             f"({wide[0].describe()}) can only be a model's whole kernel, not part of a "
                             f"{type(self).__name__.lower()}")
        several = [k for k in self.kernels if k.output_count is not None]
        if several and not self.combines_outputs:
            raise ValueError(f"{type(self).__name__}: a kernel of several outputs ({several[0].describe()}) can be "
                             f"a part of a Sum or Product only")
        labels = self.labels()
        if len(set(labels)) != len(labels):
            raise ValueError(f"{type(self).__name__}: the parts' names must differ, got {labels}")

    @classmethod
    def flat_parts(cls, kernel):
        """``kernel``'s parts if it is an unnamed ``cls`` on all columns (so that ``k1 + k2 + k3``
        is one Sum of three), else ``(kernel,)``.

        Parameters
        ----------
        kernel : Kernel

        Returns
        -------
        tuple of Kernel
        """
        if type(kernel) is cls and kernel.name is None and kernel.active_dims is None:
            return kernel.kernels
        return (kernel,)

    def labels(self):
        """Each part's label in parameter names: its ``name``, or its index.

        Returns
        -------
        list of str
        """
        return [str(i) if k.name is None else k.name for i, k in enumerate(self.kernels)]

    def part(self, label):
        """The part labelled ``label`` (a name, or an index as text or int).

        Parameters
        ----------
        label : str or int

        Returns
        -------
        Kernel
            The part on the columns of X it reads inside this kernel (:meth:`_on_own_columns`:
            this kernel's ``active_dims`` carried into the part's), so that its Gram matrix on X is
            the part's term of this kernel's.

        Raises
        ------
        ValueError
            If no part has that label.
        """
        labels = self.labels()
        if str(label) not in labels:
            raise ValueError(f"{type(self).__name__}: no part labelled {label!r}; the parts are {labels}")
        return self._on_own_columns(self.kernels[labels.index(str(label))])

    def _on_own_columns(self, part):
        """``part`` on the columns of X it reads inside this composite, as a kernel of its own.

        The composite's methods select its ``active_dims`` columns of X and hand them to the part,
        which selects its own ``active_dims`` among those: the part alone reads columns
        ``self.active_dims[part.active_dims]`` of X (``self.active_dims`` where the part has none).

        Parameters
        ----------
        part : Kernel
            One of :attr:`kernels` (or a kernel built from one, such as an LMC part's ICM).

        Returns
        -------
        Kernel
            ``part`` itself where this composite reads every column.

        Raises
        ------
        ValueError
            If the part's ``active_dims`` name a column beyond the composite's.
        """
        outer = self.active_dims
        if outer is None:
            return part
        if part.active_dims is None:
            return dataclasses.replace(part, active_dims=outer)
        if max(part.active_dims) >= len(outer):
            raise ValueError(f"{type(self).__name__}: part {part.describe()}'s active_dims {part.active_dims} name a "
                             f"column beyond the {len(outer)} the {type(self).__name__.lower()} reads "
                             f"(active_dims {outer})")
        return dataclasses.replace(part, active_dims=tuple(outer[d] for d in part.active_dims))

    def parameters(self, X):
        """Every part's parameters, named ``"<label>.<name>"`` (part 0 first; the label is the
        part's ``name`` or its index).

        Parameters
        ----------
        X : ndarray, shape (N, D)

        Returns
        -------
        list of Parameter
        """
        return part_parameters(self.labels(), self.kernels, X)

    def bind(self, values=None):
        return dataclasses.replace(self, kernels=bind_parts(self.labels(), self.kernels, values))

    @classmethod
    def variants(cls):
        parts = Kernel.registry
        return (cls((parts["SquaredExponential"](0.7, 1.2), parts["Matern52"](np.array([1.0, 0.5]), 0.6))),)

    def _named(self, i, grads):
        label = self.labels()[i]
        return {f"{label}.{name}": g for name, g in grads.items()}

    def describe(self):
        """A short text for summaries and attrs, e.g. ``"Sum(SquaredExponential(ARD), Matern32(isotropic))"``.

        Returns
        -------
        str
        """
        return f"{type(self).__name__}({', '.join(k.describe() for k in self.kernels)})"


class _OutputsOfParts:
    """A composite whose parts may be kernels of several outputs, all of one number P, which it
    then has (a Sum or Product of ICMs)."""

    combines_outputs = True

    def __post_init__(self):
        super().__post_init__()
        _common_output_count(self)

    @property
    def output_count(self):
        """The parts' common number of outputs (None: one output)."""
        return _common_output_count(self)


@dataclass(frozen=True, eq=False)
class Sum(_OutputsOfParts, _Composite):
    """Sum kernel k = k_0 + k_1 + ...; hyperparameters are named ``<i>.<field>`` under the kernel.

    Parameters
    ----------
    kernels : tuple of Kernel
        At least two kernels; ``k1 + k2`` builds one.
    active_dims, name : keyword only, optional
        The columns the kernel reads and its label inside a sum or product, as for every
        kernel (:class:`gpdsl.kernels.Kernel`).

    Raises
    ------
    TypeError
        If ``kernels`` is not a tuple of at least two kernels.
    ValueError
        If the parts are kernels of different numbers of outputs (:attr:`output_count`).
    """

    def gram(self, X1, X2):
        return sum(k.gram(X1, X2) for k in self.kernels)

    def diag(self, X):
        return sum(k.diag(X) for k in self.kernels)

    def vjp(self, X1, X2, G, K=None):
        grads, d_X1 = {}, np.zeros(X1.shape)
        for i, k in enumerate(self.kernels):
            g, dx = k.vjp(X1, X2, G)
            grads = add_partial(grads, self._named(i, g))
            d_X1 += dx
        return grads, d_X1

    def diag_vjp(self, X, g):
        grads = {}
        for i, k in enumerate(self.kernels):
            grads = add_partial(grads, self._named(i, k.diag_vjp(X, g)))
        return grads


@dataclass(frozen=True, eq=False)
class Product(_OutputsOfParts, _Composite):
    """Product kernel k = k_0 * k_1 * ... (elementwise); the VJP of each factor sees G times the
    others.  Hyperparameters are named ``<i>.<field>`` under the kernel.

    Parameters
    ----------
    kernels : tuple of Kernel
        At least two kernels; ``k1 * k2`` builds one.
    active_dims, name : keyword only, optional
        The columns the kernel reads and its label inside a sum or product, as for every
        kernel (:class:`gpdsl.kernels.Kernel`).

    Raises
    ------
    TypeError
        If ``kernels`` is not a tuple of at least two kernels.
    ValueError
        If the parts are kernels of different numbers of outputs (:attr:`output_count`).
    """

    def gram(self, X1, X2):
        return np.prod([k.gram(X1, X2) for k in self.kernels], axis=0)

    def diag(self, X):
        return np.prod([k.diag(X) for k in self.kernels], axis=0)

    def vjp(self, X1, X2, G, K=None):
        mats = [k.gram(X1, X2) for k in self.kernels]
        grads, d_X1 = {}, np.zeros(X1.shape)
        for i, k in enumerate(self.kernels):
            others = np.prod([m for j, m in enumerate(mats) if j != i], axis=0)
            g, dx = k.vjp(X1, X2, G * others, mats[i])      # the factor's own Gram, not formed again
            grads = add_partial(grads, self._named(i, g))
            d_X1 += dx
        return grads, d_X1

    def diag_vjp(self, X, g):
        diags = [k.diag(X) for k in self.kernels]
        grads = {}
        for i, k in enumerate(self.kernels):
            others = np.prod([d for j, d in enumerate(diags) if j != i], axis=0)
            grads = add_partial(grads, self._named(i, k.diag_vjp(X, g * others)))
        return grads


__all__ = ["Kernel", "ConstantDiagonal", "KroneckerFactors", "Sum", "Product", "Parameter"]
