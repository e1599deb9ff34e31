"""A minibatch fit's full-data bound, computed when first read (common.PendingEvaluation), runs in
gpdsl's one-BLAS-thread region like the fit itself, even when read after the fit has returned."""
import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from gpdsl.methods.common import Evaluation, PendingEvaluation


def _blas_threads():
    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


def test_a_pending_bound_is_computed_with_one_blas_thread():
    """Inside the completion every BLAS library runs one thread, where the caller allowed two;
    the caller's setting is back afterwards, and the bound is the completion's."""
    seen = []

    def complete():
        seen.append(_blas_threads())
        return Evaluation(log_evidence=-3.5, grads={}, dZ=None, jitter=0.0, state=None,
                          pseudo_data=(np.zeros(1), np.zeros(1)))

    pending = PendingEvaluation(complete, state=None, jitter=0.0)
    with threadpool_limits(limits=2, user_api="blas"):
        outside = _blas_threads()
        assert outside and all(n == 2 for n in outside)
        assert pending.log_evidence == -3.5
        assert _blas_threads() == outside
    assert seen and all(n == 1 for n in seen[0])
    assert pending.log_evidence == -3.5 and len(seen) == 1
