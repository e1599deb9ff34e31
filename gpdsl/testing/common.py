"""What the conformance checks share: central differences, Gaussian expectations by adaptive
quadrature, the registries' classes, the inputs and latent values the checks run at."""
from __future__ import annotations

import functools

import numpy as np
from scipy import integrate

# Inputs of the component checks: two features on [-1.5, 1.5].
_INPUTS = np.random.default_rng(2026)
X1 = _INPUTS.uniform(-1.5, 1.5, size=(7, 2))
X2 = _INPUTS.uniform(-1.5, 1.5, size=(5, 2))


def inputs_for(component, X):
    """The inputs a component's checks run at: X itself, or for a component of P outputs (its
    ``output_count``: a multi-output kernel, ``OutputGaussian``, ``PerOutput``) X with the output
    index appended as its last column (:mod:`gpdsl.multioutput`'s long layout), the rows cycling
    through the outputs so that each has some.

    Parameters
    ----------
    component : Component
    X : ndarray, shape (n, D)

    Returns
    -------
    ndarray, shape (n, D) or (n, D + 1)
    """
    count = getattr(component, "output_count", None)
    return X if count is None else np.column_stack([X, np.arange(X.shape[0]) % count])


def kernel_for(component, kernel):
    """The kernel a component's model checks fit with: ``kernel``, or for a component of P
    outputs (``output_count``) the intrinsic coregionalisation of it over P outputs (ICM at its
    default start), whose inputs carry the output column :func:`inputs_for` appends.

    Parameters
    ----------
    component : Component
    kernel : gpdsl.kernels.Kernel
        A kernel of one output.

    Returns
    -------
    gpdsl.kernels.Kernel
    """
    from ..kernels import ICM

    count = getattr(component, "output_count", None)
    return kernel if count is None else ICM(kernel, count)


def central_difference(f, x, step=1e-6):
    """Gradient of a scalar function at an array by central differences of relative steps.

    Parameters
    ----------
    f : callable
        ``f(x) -> float``.
    x : array_like
        The point.
    step : float, default 1e-6
        Relative step h_i = step * max(|x_i|, 1).

    Returns
    -------
    ndarray, the shape of x
        (f(x + h_i e_i) - f(x - h_i e_i)) / (2 h_i).
    """
    x = np.array(x, dtype=float)
    g = np.zeros_like(x)
    for i in range(x.size):
        h = step * max(abs(x.flat[i]), 1.0)
        xp, xm = x.copy(), x.copy()
        xp.flat[i] += h
        xm.flat[i] -= h
        g.flat[i] = (f(xp) - f(xm)) / (2 * h)
    return g


def expect(fn, mean, var):
    """E_N(f | mean, var)[fn(f)] by adaptive quadrature over mean +- 12 sd (the point 0 marked: a
    log f^2 is singular there).

    Parameters
    ----------
    fn : callable
        ``fn(f) -> float`` of a scalar f.
    mean, var : float
        The Gaussian's moments (var > 0).

    Returns
    -------
    float
    """
    sd = np.sqrt(var)
    lo, hi = mean - 12 * sd, mean + 12 * sd
    points = [0.0] if lo < 0.0 < hi else None
    val, _ = integrate.quad(lambda f: fn(f) * np.exp(-0.5 * (f - mean) ** 2 / var) / np.sqrt(2 * np.pi * var),
                            lo, hi, points=points, limit=400, epsabs=1e-13, epsrel=1e-12)
    return val


def registered(base):
    """The classes of a registry (``Kernel``, ``Likelihood``, ``Mean``, ``Inference``), each
    once, less those defined in modules named ``test_*`` (a test's oracle variants).

    Parameters
    ----------
    base : type
        A family's base class.

    Returns
    -------
    list of type
    """
    seen, out = set(), []
    for cls in base.registry.values():
        if cls.__module__.split(".")[-1].startswith("test_") or cls in seen:
            continue
        seen.add(cls)
        out.append(cls)
    return out


def label(component):
    """A component's name for messages and test ids: ``describe()`` where it has one.

    Parameters
    ----------
    component : Component
        A kernel, mean function, likelihood or inference method.

    Returns
    -------
    str
    """
    return component.describe() if hasattr(component, "describe") else type(component).__name__


def _instances(component):
    """A class's ``variants()``, or the instance alone."""
    return tuple(component.variants()) if isinstance(component, type) else (component,)


def _local_values(component, X):
    return {p.name: e.value for p, e in zip(component.parameters(X), component.entries("c", X))}


def _targets(likelihood, f, seed=0, X=None):
    """Targets drawn from the likelihood at f (or f plus noise for one that draws none), at the
    rows X where given (:meth:`~gpdsl.likelihoods.Likelihood.for_rows`), coded."""
    r = np.random.default_rng(seed)
    lik = likelihood.bind() if X is None else likelihood.bind().for_rows(X)
    try:
        y = lik.sample(f, r)
    except NotImplementedError:
        y = f + 0.3 * r.standard_normal(f.shape)
    return lik.prepare_targets(np.asarray(y, dtype=float))


def _has_density(likelihood):
    return likelihood.defines("log_density") or likelihood.defines("log_density_derivatives")


def _draws_y(likelihood):
    """Whether the likelihood draws y (its own ``sample`` or the default's for binary and count targets)."""
    return likelihood.defines("sample") or likelihood.target_kind in ("binary", "count")


class _RowView:
    """A likelihood whose density depends on the row (one that defines ``for_rows``: a likelihood
    per output) seen at one row of X, in its place in the likelihood checks: ``bind(values)`` is
    the bound likelihood of that row (whose operations take any number of (y, f) of it); its
    declaration (``parameters``, ``entries``, ``output_count``) is the likelihood's; everything
    else is the bound row's.

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood
    row : ndarray, shape (D,)
    """

    def __init__(self, likelihood, row):
        self.likelihood, self.row = likelihood, row

    def bind(self, values=None):
        return self.likelihood.bind(values).for_rows(self.row[None, :])

    def parameters(self, X):
        return self.likelihood.parameters(X)

    def entries(self, prefix, X, fixed_names=()):
        return self.likelihood.entries(prefix, X, fixed_names)

    @property
    def output_count(self):
        return getattr(self.likelihood, "output_count", None)

    def describe(self):
        return f"{self.likelihood.describe()} at row {self.row.tolist()}"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.bind(), name)


def row_views(likelihood):
    """The likelihood at each of the first rows of its check inputs (one of each output for a
    likelihood of P outputs: :func:`inputs_for`), or None for a likelihood whose density is the
    same at every row (it does not define ``for_rows``).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood

    Returns
    -------
    list of _RowView or None
    """
    if isinstance(likelihood, _RowView) or not likelihood.defines("for_rows"):
        return None
    rows = inputs_for(likelihood, X1)[: getattr(likelihood, "output_count", None) or 2]
    return [_RowView(likelihood, row) for row in rows]


def at_each_row(check):
    """A likelihood check run at each of :func:`row_views` of a likelihood whose density depends
    on the row, else on the likelihood itself (decorator).

    Parameters
    ----------
    check : callable
        ``check(likelihood)``.

    Returns
    -------
    callable
    """
    @functools.wraps(check)
    def run(likelihood):
        for view in row_views(likelihood) or (likelihood,):
            check(view)
    return run
