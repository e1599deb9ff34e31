"""gpdsl's Numba kernels, one module per method family, and the notice printed before they compile.

Every kernel is ``njit(cache=True)``: it is compiled on its first call with new argument types
and the machine code is kept in Numba's disk cache, so that later processes load it in
milliseconds.  The first EP, QP or Pólya-Gamma fit and the first greedy inducing selection in a
fresh environment compile for seconds; so that this does not look like a hang,
:func:`announce_compilation` prints one line to stderr first.  (The kernels of Exact, VFE and
FITC compile in well under a second and print nothing.)
"""
import sys

_checked = set()        # (dispatcher, argument types) already looked up in this process
_announced = set()      # families whose notice has been printed in this process


def announce_compilation(family, seconds, dispatcher, args):
    """Print a one-line notice to stderr if calling ``dispatcher(*args)`` will compile it.

    Parameters
    ----------
    family : str
        The kernels' name in the notice ("EP", "QP", "Polya-Gamma", ...); printed once per process.
    seconds : float
        The rough compile time of the family's first fit, quoted in the notice.
    dispatcher : numba.core.registry.CPUDispatcher
        The kernel about to be called (the entry point: its callees compile with it).
    args : tuple
        The arguments it is about to be called with; only their Numba types matter.

    Notes
    -----
    The call compiles when the dispatcher has no machine code for the arguments' types, neither in
    this process nor in Numba's disk cache for the current source; the look-up mirrors Numba's own
    (``Dispatcher.compile``) and is made once per kernel and signature.  It reads private Numba
    structures, so any failure prints nothing (the notice is a courtesy, never a reason to fail a
    fit).  A plain print rather than a warning: warnings filters are the caller's, and code that
    turns warnings into errors must not fail on a cold cache.
    """
    try:
        types = tuple(dispatcher.typeof_pyval(a) for a in args)
        key = (dispatcher, types)
        if key in _checked:
            return
        _checked.add(key)
        if family in _announced or _compiled(dispatcher, types):
            return
    except Exception:
        return
    _announced.add(family)
    print(f"gpdsl: compiling the {family} kernels once (about {seconds:.0f} s); later runs load them from "
          f"the cache", file=sys.stderr, flush=True)


def _compiled(dispatcher, types):
    """True if ``dispatcher`` has machine code for ``types`` in memory or in its disk cache."""
    if types in dispatcher.overloads:
        return True
    cache = dispatcher._cache
    key = cache._index_key(types, dispatcher.targetctx.codegen())
    return key in cache._cache_file._load_index()
