"""A minibatch fit's full-data bound, computed when first read (pending.PendingEvaluation), runs in
gpdsl's one-BLAS-thread region like the fit itself, even when read after the fit has returned."""
import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from gpdsl.methods.common import Evaluation
from gpdsl.methods.pending import PendingEvaluation


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


def test_rows_changed_in_place_after_the_fit_refuse_the_bound():
    """A minibatch SVGP fit's bound read after X was changed in place raises ValueError instead
    of giving the changed rows' bound; rows left as they were give the same bound as a fit whose
    rows were never shared with the caller; GPClassifier records its bound at the fit (a later
    change of X leaves log_marginal_likelihood_value_ as it was)."""
    import pytest

    import gpdsl as gd
    from gpdsl.sklearn import GPClassifier

    rng = np.random.default_rng(5)
    X = rng.uniform(-2.0, 2.0, (300, 2))
    y = (np.sin(X[:, 0]) + 0.3 * rng.standard_normal(300) > 0).astype(float)
    model = gd.Model(gd.kernels.SquaredExponential(), gd.likelihoods.Bernoulli(),
                     inducing=gd.inducing.KMeans(10, seed=0), inference=gd.inference.SVGP(batch_size=64))
    shared = X.copy()
    post = model.fit(shared, y, seed=0, max_iter=40)
    assert post.log_evidence_pending
    reference = model.fit(X.copy(), y, seed=0, max_iter=40).log_evidence
    assert np.isfinite(reference)
    shared[7, 1] += 1.0
    with pytest.raises(ValueError, match="changed in place after the fit"):
        post.log_evidence
    shared[7, 1] = X[7, 1]          # the fit's rows again
    assert post.log_evidence == reference
    Xs = X.copy()
    clf = GPClassifier(max_iter=30, random_state=0).fit(Xs, y)
    recorded = clf.log_marginal_likelihood_value_
    Xs *= 3.0
    assert clf.log_marginal_likelihood_value_ == recorded
