"""How EP's and QP's site sweeps reach a likelihood's jitted tilted-moment code: functions passed
as arguments, bundled per likelihood in a :class:`SiteFunctions`.

The tilted distribution of a site is ``q(f) = p(y | f) N(f | mu, var) / Z`` with the cavity
N(mu, var).  EP keeps its mean and variance; QP (Zhang et al. 2020, eq. 7) keeps the mean and
takes the L2-Wasserstein variance sigma*^2 (:mod:`gpdsl._jit.quadrature`).  Each likelihood's
module under :mod:`gpdsl._jit.likelihoods` defines, as ``njit(cache=True)`` functions marked with
:func:`site_function`,

* ``project(y, mu, var, params, quantile, table, grid)`` -> (log Z, mean, variance): EP's
  moments when ``quantile`` is None or False, QP's variance when True.  ``params`` is the
  likelihood's parameter tuple (``SiteModel.params``: () for Poisson, (bias,) for a Bernoulli,
  (noise variance,) for the Gaussian, (df, scale) for the Student-t); ``table``, ``grid`` a QP
  lookup table and its grid, or None (only the probit reads them: ``lookup_table``);
* ``log_z_gradient(y, mu, var, params)`` -> d log Z / d theta at a fixed cavity, a tuple as long
  as ``params`` (each E_tilted[d log p(y | f) / d theta]; at an EP fixed point the evidence's
  gradient in the likelihood's parameters is their sum over the sites at the final cavities);

and ``SITE = SiteFunctions(project, log_z_gradient)`` for the likelihood class's ``site_model``.
The sweeps (:mod:`gpdsl._jit.ep_sweeps`) take ``project`` as an argument and call it: Numba
compiles a sweep once per function passed (a dispatcher's type is part of the signature), so a
fit compiles its own likelihood's code alone, and a new likelihood needs a new module and its
class's ``site_model``, nothing here or in the sweeps.  ``quantile`` None (EP fits) is a
compile-time fact: ``if quantile is None`` drops QP's quadrature from an EP fit's kernels, while
QP fits pass a bool, so that their EP and QP sweeps share one kernel.
"""
import hashlib
import math
from typing import Callable, NamedTuple, Optional

from numba import njit

try:
    from numba.core.caching import FunctionCache
except ImportError:         # a Numba without it: the closures compile once per process
    FunctionCache = None


class SiteFunctions(NamedTuple):
    """A likelihood's jitted site code (see the module docstring).

    Parameters
    ----------
    project : numba dispatcher
        ``project(y, mu, var, params, quantile, table, grid)`` -> (log Z, mean, variance).
    log_z_gradient : numba dispatcher
        ``log_z_gradient(y, mu, var, params)`` -> tuple of d log Z / d theta.
    lookup_table : callable or None
        ``lookup_table()`` -> (table, grid), the QP lookup table that ``project`` reads with
        ``QP(lookup=True)`` (built once per process), or None where the likelihood has none.
    """

    project: Callable
    log_z_gradient: Callable
    lookup_table: Optional[Callable] = None


def site_function(dispatcher):
    """Mark a jitted function that is passed as an argument to other cached kernels, or given to
    the rule factories of :mod:`gpdsl._jit.quadrature` (decorator, above ``@njit(cache=True, nogil=True)``);
    returns it.

    A cached kernel that takes a function is cached under its argument types, the function's
    among them (a factory's rule under the pickled function it closes over), and Numba tells two
    function types apart by their dispatcher object.  When a
    later process reads the cache index, it rebuilds each dispatcher there by its identifier, a
    random one per process unless set: the function's type then differs from the one being
    called, and every process would compile again (and add to the cache).  The identifier set
    here, from the function's module and name, makes the rebuilt dispatcher the imported one,
    so the cached machine code is found.  (A private Numba method: if it is missing, caching of
    these kernels falls back to compiling once per process, which is slower but correct.)
    """
    _named(dispatcher, identifier(dispatcher))
    return dispatcher


def identifier(dispatcher):
    """``module.qualname`` of a jitted function (of the plain function under NUMBA_DISABLE_JIT=1):
    the stable part of the names :func:`site_function`, :func:`with_offset` and
    :mod:`gpdsl._jit.mixed_sites` give their dispatchers.

    Parameters
    ----------
    dispatcher : numba dispatcher or function

    Returns
    -------
    str
    """
    function = getattr(dispatcher, "py_func", dispatcher)
    return f"{function.__module__}.{function.__qualname__}"


_OFFSET_SITES = {}


def with_offset(functions):
    """The site functions of ``functions`` for targets that carry a per-row offset o of the latent
    input, p(y | f + o): ``y`` rows of (target, o), so that the sweeps, which call
    ``project(y[i], ...)``, pass both.  The cavity N(mu, var) in f is N(mu + o, var) in f + o,
    whose tilted mean less o is the tilted mean in f; log Z, the variance and the parameter
    gradients are the same.  Built once per likelihood (the wrappers are jitted closures over
    its functions, named and disk-cached by the inner functions' identifiers,
    :func:`_cached_by_name`, so that a later process loads them rather than compiling them again).

    Parameters
    ----------
    functions : SiteFunctions

    Returns
    -------
    SiteFunctions
    """
    key = (functions.project, functions.log_z_gradient)
    if key in _OFFSET_SITES:
        return _OFFSET_SITES[key]
    project, gradient = functions.project, functions.log_z_gradient

    @njit(cache=True, nogil=True)
    def project_offset(y, mu, var, params, quantile, table, grid):
        log_z, mean, variance = project(y[0], mu + y[1], var, params, quantile, table, grid)
        return log_z, mean - y[1], variance

    @njit(cache=True, nogil=True)
    def log_z_gradient_offset(y, mu, var, params):
        return gradient(y[0], mu + y[1], var, params)

    for wrapper, inner in ((project_offset, project), (log_z_gradient_offset, gradient)):
        _cached_by_name(wrapper, f"offset:{identifier(inner)}")
    made = SiteFunctions(project_offset, log_z_gradient_offset, functions.lookup_table)
    _OFFSET_SITES[key] = made
    return made


def _named(dispatcher, name):
    try:
        dispatcher._set_uuid(f"gpdsl-site-function:{name}")
    except (AttributeError, AssertionError):
        pass


def _cached_by_name(dispatcher, name):
    """Give a jitted closure the identifier ``name`` (:func:`_named`) and a disk cache keyed by
    that name instead of by its cells (:func:`with_offset`'s wrappers, the dispatch closures of
    :mod:`gpdsl._jit.mixed_sites`).

    Numba keys a closure's cache entries by a hash of its pickled cells, and a cell that holds a
    dispatcher pickles its Python function by value with the functions it calls, each with the
    random identifier of its process: the key differs in every process, so the closure would
    compile again in each (and add an entry to the cache).  ``name`` must name everything the
    cells hold (the wrapped functions' identifiers; for the mixed sites the parts' functions and
    their parameter counts), so that it keys them as well; like Numba's own keys it does not see
    an edit of a wrapped function's code (the guide's Development section: delete the
    ``__pycache__`` directories after editing a jitted module that another imports).  (Private
    Numba structures: where they are missing the closure compiles once per process, correct but
    slower.)
    """
    _named(dispatcher, name)
    if FunctionCache is None or getattr(dispatcher, "_cache", None) is None:
        return
    try:
        dispatcher._cache = _NamedCache(dispatcher.py_func, name)
    except Exception:       # noqa: BLE001 -- a cache Numba cannot set up here: its own (per process)
        pass


if FunctionCache is not None:
    class _NamedCache(FunctionCache):
        """Numba's function cache with the cells' hash replaced by a hash of ``name``."""

        def __init__(self, py_func, name):
            self._cells = hashlib.sha256(name.encode()).hexdigest()
            super().__init__(py_func)

        def _index_key(self, sig, codegen):
            code = hashlib.sha256(self._py_func.__code__.co_code).hexdigest()
            return sig, codegen.magic_tuple(), (code, self._cells)


@njit(cache=True, nogil=True)
def bilinear(table, u, w):
    """``table`` (n_u, n_w) at the fractional indices (u, w) by bilinear interpolation, or nan
    outside [0, n_u - 1] x [0, n_w - 1] (the caller then computes the value directly)."""
    n_u, n_w = table.shape
    if not (0.0 <= u <= n_u - 1.0 and 0.0 <= w <= n_w - 1.0):
        return math.nan
    i = min(int(u), n_u - 2)
    j = min(int(w), n_w - 2)
    du = u - i
    dw = w - j
    return ((1.0 - du) * ((1.0 - dw) * table[i, j] + dw * table[i, j + 1])
            + du * ((1.0 - dw) * table[i + 1, j] + dw * table[i + 1, j + 1]))
