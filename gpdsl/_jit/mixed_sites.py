"""The site functions of a likelihood per output (:class:`gpdsl.likelihoods.PerOutput`) whose
parts have several site codes or parameters of their own: one :class:`SiteFunctions` that sends
each row to its part's jitted code, so that EP's and QP's sweeps (:mod:`gpdsl._jit.ep_sweeps`),
which call one ``project(y[i], mu, var, params, quantile, table, grid)`` over every row, need no
change.

With P parts, part p of parameter tuple theta_p (length c_p) and site functions
(project_p, log_z_gradient_p):

* the targets are rows (p_i, y_i, o_i) (:func:`site_rows`), so that ``y[i]`` carries the
  row's part and its latent offset o_i (0 without one: the part sees f + o_i, as
  :func:`gpdsl._jit.projections.with_offset`'s rows say);
* ``params`` is the parts' tuples concatenated, theta = theta_0 + ... + theta_{P-1} (length
  C = sum_p c_p, as the sweeps' ``summed_log_z_gradient`` sums ``len(params)`` gradients), and
  part p reads its slice theta[s_p : s_p + c_p], s_p = c_0 + ... + c_{p-1};
* ``project((p, y, o), mu, var, theta, ...)`` = project_p(y, mu + o, var, theta_p, ...) with o
  taken off the tilted mean (the cavity N(mu, var) in f is N(mu + o, var) in f + o);
* ``log_z_gradient((p, y, o), mu, var, theta)`` = (0,) * s_p + log_z_gradient_p(y, mu + o, var,
  theta_p) + (0,) * (C - s_p - c_p): row i's log Z_i depends on its part's parameters only, so
  the sum over rows gives each part's gradient over its own rows.

The dispatch is a chain of jitted closures, one a part: the closure of part p returns part p's
value where the row's part is p and calls the closure of part p + 1 otherwise (the last calls its
part unconditionally).  Each closure is named from its position and the parts' function names
(:func:`gpdsl._jit.projections._cached_by_name`), so that a later process rebuilds the same
function types, finds the closures in Numba's disk cache and the sweeps compiled for them.
"""
import collections

import numpy as np
from numba import njit

from .projections import SiteFunctions, _cached_by_name, identifier

try:
    from numba.core.dispatcher import _MemoMixin
except ImportError:
    _MemoMixin = None

# A sweep's cache index holds an entry per function type it was compiled for, these closures (and
# projections.with_offset's) among them.  Reading the index (before every compile, and the
# compile notice's look-up) rebuilds the dispatchers of closures this process has not made, each
# with the helpers its pickled Python function calls, and Numba keeps them alive only in
# _MemoMixin._recent, its last 128; the index's types hold weak references.  A process that
# rebuilt more (five sweeps' indexes of a few dozen entries each rebuilt 150) lost the oldest,
# and its next compile of that sweep failed saving the index (ReferenceError: underlying object
# has vanished).  The deque is lengthened to _RECENT_DISPATCHERS (a few thousand small objects at
# most, kept for the process's life): every index entry of every part combination cached so far is
# rebuilt, so an unbounded deque would grow with the cache's age, and the user's own functions that
# Numba gives an identifier would stay alive too.  A process-wide change to Numba, documented in
# the guide's Development section.
_RECENT_DISPATCHERS = 4096
if _MemoMixin is not None and isinstance(getattr(_MemoMixin, "_recent", None), collections.deque) \
        and _MemoMixin._recent.maxlen is not None and _MemoMixin._recent.maxlen < _RECENT_DISPATCHERS:
    _MemoMixin._recent = collections.deque(_MemoMixin._recent, maxlen=_RECENT_DISPATCHERS)

_MIXED_SITES = {}


def site_rows(parts, y, offset=None):
    """The sweeps' targets of a site model of ``parts`` (``SiteModel.parts``): rows (p_n, y_n, o_n).

    Parameters
    ----------
    parts : ndarray, shape (n,) or (1,)
        Each row's part (one row's broadcast).
    y : array_like, shape (n,)
        Coded targets.
    offset : array_like, shape (n,), optional
        Per-row offset of the latent input (the part's likelihood sees f + o_n); 0 without one.

    Returns
    -------
    ndarray, shape (n, 3)
    """
    y = np.asarray(y, dtype=float)
    o = np.zeros(y.shape) if offset is None else np.asarray(offset, dtype=float)
    return np.column_stack([np.broadcast_to(parts, y.shape).astype(float), y, o])


def mixed_sites(parts, counts):
    """The site functions of rows (part, target, offset) over ``parts`` (module docstring).  Built once
    per tuple of part functions and parameter counts.

    Parameters
    ----------
    parts : tuple of SiteFunctions
        Part p's site functions, P >= 1 of them.
    counts : tuple of int
        Part p's parameter count c_p (the length of its ``SiteModel.params``).

    Returns
    -------
    SiteFunctions
        Its ``lookup_table`` is the parts' one table where exactly one table function is among
        them (the probit's; the other parts ignore ``table``), else None (QP then computes
        sigma* directly).
    """
    key = tuple((f.project, f.log_z_gradient, c) for f, c in zip(parts, counts))
    if key not in _MIXED_SITES:
        name = ",".join(f"{identifier(f.project)}/{c}" for f, c in zip(parts, counts))
        project, gradient = _chain(parts, counts, 0, 0, name)
        tables = {f.lookup_table for f in parts if f.lookup_table is not None}
        _MIXED_SITES[key] = SiteFunctions(project, gradient, tables.pop() if len(tables) == 1 else None)
    return _MIXED_SITES[key]


def _chain(parts, counts, p, start, name):
    """(project, log_z_gradient) of rows of parts p, p + 1, ... (module docstring); part p's
    parameters start at ``start``."""
    project_p, gradient_p = _part(parts[p], start, start + counts[p], sum(counts), f"{p}:{name}")
    if p == len(parts) - 1:
        return project_p, gradient_p
    project_rest, gradient_rest = _chain(parts, counts, p + 1, start + counts[p], name)

    @njit(cache=True, nogil=True)
    def project(y, mu, var, params, quantile, table, grid):
        if y[0] == p:
            return project_p(y, mu, var, params, quantile, table, grid)
        return project_rest(y, mu, var, params, quantile, table, grid)

    @njit(cache=True, nogil=True)
    def log_z_gradient(y, mu, var, params):
        if y[0] == p:
            return gradient_p(y, mu, var, params)
        return gradient_rest(y, mu, var, params)

    _cached_by_name(project, f"mixed-project[{p}]:{name}")
    _cached_by_name(log_z_gradient, f"mixed-log-z-gradient[{p}]:{name}")
    return project, log_z_gradient


def _part(functions, start, stop, total, name):
    """(project, log_z_gradient) of rows (p, y, o) of one part, whose parameters are
    params[start:stop] of ``total``."""
    part_project, part_gradient = functions.project, functions.log_z_gradient
    before, after = (0.0,) * start, (0.0,) * (total - stop)

    @njit(cache=True, nogil=True)
    def project(y, mu, var, params, quantile, table, grid):
        log_z, mean, variance = part_project(y[1], mu + y[2], var, params[start:stop], quantile, table, grid)
        return log_z, mean - y[2], variance

    @njit(cache=True, nogil=True)
    def log_z_gradient(y, mu, var, params):
        return before + part_gradient(y[1], mu + y[2], var, params[start:stop]) + after

    _cached_by_name(project, f"mixed-part-project[{name}]")
    _cached_by_name(log_z_gradient, f"mixed-part-log-z-gradient[{name}]")
    return project, log_z_gradient
