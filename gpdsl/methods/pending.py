"""A minibatch fit's evaluation whose pass over the data waits until its bound is read
(:class:`PendingEvaluation`)."""
from __future__ import annotations

import hashlib
from functools import partial

import numpy as np

from .. import threads


def _digest(arrays):
    """blake2b digest of the bytes of the NumPy arrays among ``arrays`` (others skipped): about
    1 GB/s, 0.2 s for a 10^6 x 20 X against the O(N M^2) pass it guards."""
    digest = hashlib.blake2b(digest_size=16)
    for array in arrays:
        if isinstance(array, np.ndarray):
            digest.update(np.ascontiguousarray(array).data)
    return digest.digest()


class PendingEvaluation:
    """An :class:`Evaluation` whose data-dependent parts, ``log_evidence`` and ``pseudo_data``, are
    computed by ``complete()`` (one O(N M^2) pass over the data) when first read; the predictive
    state, the jitter and the local state are known without that pass.

    A minibatch fit's posterior is q as its steps left it, so its predictions need no pass over
    the N rows; only its full-data bound does.  Deferring that pass until something reads the
    bound took 1.9 of the 4.4 s of a minibatch SVGP fit of twonorm at N = 10^6 (M = 128) out of
    a fit whose user only predicts.

    Parameters
    ----------
    complete : callable
        ``complete() -> Evaluation``: the evaluation with its pass over the data; called once.
    state : PredictiveState
        The predictive state.
    jitter : float
        Multiple of mean(diag K_uu) the state's factor was formed with.
    warm : object, optional
        The local state (q).
    data : tuple of arrays, optional
        The arrays ``complete`` reads (X, y, the offset; None entries allowed).  Their bytes'
        digest is taken now and again before the pass: rows the caller changed in place after
        the fit raise ValueError rather than give the bound of the changed rows.  Arrays other
        than NumPy's (Dask's, which do not change in place) are not digested.

    Raises
    ------
    ValueError
        On reading the bound: the NumPy arrays of ``data`` changed since construction.
    """

    def __init__(self, complete, *, state, jitter, warm=None, data=()):
        self._complete, self.state, self.jitter, self.warm = complete, state, jitter, warm
        self.grads, self.dZ = {}, None      # no gradients: a minibatch fit's optimiser had its own
        self._evaluation = None
        self._data = data
        self._digest = _digest(data)

    @property
    def pending(self):
        """bool: whether the pass over the data has not run yet."""
        return self._evaluation is None

    def _completed(self):
        if self._evaluation is None:
            if _digest(self._data) != self._digest:
                raise ValueError("the training rows (X, y or the offset) were changed in place after the fit; its "
                                 "bound, one pass over them taken when first read, would be of the changed rows: "
                                 "read posterior.log_evidence before changing them, or fit again")
            # Read after the fit, outside its one-BLAS-thread region (gpdsl.threads): managed here
            # too.  Letter's GPClassifier() bound (45 blocks of 400 rows, K = 26) took 6-10 CPU s
            # with OpenBLAS's default two threads on the shared 2-core machine, 0.2 s with one.
            self._evaluation = threads.managed(self._complete)()
            self._complete = self._data = None       # not kept: they hold the data
        return self._evaluation

    def then(self, check):
        """This evaluation with its completion run through ``check``.

        Parameters
        ----------
        check : callable
            ``check(complete) -> Evaluation``: calls ``complete()`` itself (so that it can catch
            what the pass raises), checks the evaluation and returns it.

        Returns
        -------
        PendingEvaluation
            Of the same state, jitter and local state.
        """
        return PendingEvaluation(partial(check, self._completed), state=self.state, jitter=self.jitter, warm=self.warm)

    @property
    def log_evidence(self):
        """float: the method's log evidence or bound (runs the pass over the data once)."""
        return self._completed().log_evidence

    @property
    def pseudo_data(self):
        """tuple of ndarray: as :class:`Evaluation`'s (runs the pass over the data once)."""
        return self._completed().pseudo_data
