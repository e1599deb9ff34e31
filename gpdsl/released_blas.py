"""Level-3 BLAS products that release the GIL, for row blocks run on threads.

SciPy's ``scipy.linalg.blas`` wrappers (f2py) hold the GIL for the whole call, so two threads
each running DTRMM or DSYRK on their own row block took turns: at 10^5 rows of a collapsed LMC
(M P = 768, 74 blocks) those two calls were 2,119 of the 3,166 GIL-holding samples of an
evaluation on two block threads (py-spy ``--gil``), and the evaluation's wall time fell only from
6.1 to 4.7 s (benchmarks/HISTORY.md, "row blocks on threads").  The same Fortran routines are
called here through the function pointers SciPy exports for Cython (``scipy.linalg.cython_blas``)
with :mod:`ctypes`, which releases the GIL around every foreign call; NumPy's own ``matmul``
releases it too but has no triangular or symmetric product, and a general one costs twice the
flops.

Both functions work on C-ordered arrays as the Fortran routines see them, transposed: a C-ordered
(r, c) array is a column-major (c, r) matrix with leading dimension c, so no operand is copied to
Fortran order (f2py copied the triangular factor of every DTRMM call: an (M, M) copy per block).
A call costs about 10 us of ctypes argument handling (1.5 us through f2py, at 10 x 20): these
are for the row blocks' products, not for tiny matrices in tight loops.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

_INT = ctypes.POINTER(ctypes.c_int)
_DOUBLE = ctypes.POINTER(ctypes.c_double)
_CHAR = ctypes.c_char_p
# The Fortran interfaces (every argument by reference) of the routines used here.
_SIGNATURES = {
    "dtrmm": (_CHAR, _CHAR, _CHAR, _CHAR, _INT, _INT, _DOUBLE, _DOUBLE, _INT, _DOUBLE, _INT),
    "dsyrk": (_CHAR, _CHAR, _INT, _INT, _DOUBLE, _DOUBLE, _INT, _DOUBLE, _DOUBLE, _INT),
}
# SciPy's Cython BLAS takes C ints (LP64).
_INT_MAX = 2 ** 31 - 1


@functools.lru_cache(maxsize=None)
def _routine(name):
    """The Fortran BLAS routine ``name`` of SciPy's Cython BLAS, as a ctypes function (releases
    the GIL while it runs)."""
    from numba.extending import get_cython_function_address
    return ctypes.CFUNCTYPE(None, *_SIGNATURES[name])(get_cython_function_address("scipy.linalg.cython_blas", name))


def _int(v):
    if v > _INT_MAX:
        raise ValueError(f"released_blas: dimension {v} exceeds the 32-bit BLAS interface's {_INT_MAX}")
    return ctypes.byref(ctypes.c_int(v))


def _double(v):
    return ctypes.byref(ctypes.c_double(float(v)))


def _pointer(a):
    return a.ctypes.data_as(_DOUBLE)


def lower_product(R, X, transpose=False):
    """R X (or, with ``transpose``, R^T X) for lower-triangular R (M, M) and X (M, n): one DTRMM
    (M^2 n flops, half a general product's: at M = 128, n = 1,024 0.38 ms against 0.67), with the
    GIL released (at M = 768, n = 1,365, one thread: 13.5 ms against 17.3 through f2py, which
    copied R to Fortran order).

    Parameters
    ----------
    R : ndarray, shape (M, M)
        Lower-triangular; its strict upper triangle is not read.
    X : ndarray, shape (M, n)
    transpose : bool, default False
        Multiply by R^T.

    Returns
    -------
    ndarray, shape (M, n), C-ordered
        A new array.
    """
    R = np.ascontiguousarray(R, dtype=float)
    out = np.array(X, dtype=float, order="C")           # overwritten by the product
    m, n = out.shape
    if R.shape != (m, m):
        raise ValueError(f"lower_product: R must be ({m}, {m}) for X of shape {out.shape}, got {R.shape}")
    if out.size == 0:
        return out
    # Column-major, out is B = X^T (n x M, ld n) and R's buffer is R^T (upper).  R X = (X^T R^T)^T:
    # B := B op(R^T), op the identity; R^T X = (X^T R)^T: op the transpose.
    _routine("dtrmm")(b"R", b"U", b"T" if transpose else b"N", b"N", _int(n), _int(m), _double(1.0), _pointer(R),
                      _int(m), _pointer(out), _int(n))
    return out


def lower_gram(A, alpha=1.0):
    """The lower triangle of alpha A A^T (M, M) for A (M, n), its strict upper triangle zero:
    one DSYRK (M^2 n flops), with the GIL released.

    Parameters
    ----------
    A : ndarray, shape (M, n)
    alpha : float, default 1.0

    Returns
    -------
    ndarray, shape (M, M), Fortran-ordered
    """
    A = np.ascontiguousarray(A, dtype=float)
    m, n = A.shape
    out = np.zeros((m, m), order="F")
    if m == 0 or n == 0:
        return out
    # Column-major, A's buffer is A^T (n x M, ld n): C := alpha (A^T)^T A^T into the lower
    # triangle of a column-major C, as SciPy's ``dsyrk(alpha, A.T, trans=1, lower=1)`` (the same
    # bits; the upper-triangle variant sums in another order).
    _routine("dsyrk")(b"L", b"T", _int(m), _int(n), _double(alpha), _pointer(A), _int(n), _double(0.0),
                      _pointer(out), _int(m))
    return out
