"""The Laplace approximation (:class:`Laplace`), dense or under the FITC prior
(:mod:`gpdsl.methods.laplace`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_positive_int, check_positive_number
from ..linalg import check_jitter
from ..methods import laplace, laplace_multiclass
from ..methods.common import shifted
from .base import Inference, _check_chunk


@dataclass(frozen=True)
class Laplace(Inference):
    """The Laplace approximation (Rasmussen & Williams section 3.4: Algorithms 3.1, 3.2 and 5.1;
    GPML's ``infLaplace``): dense without an inducing spec, under the FITC prior
    Q + diag(K - Q) with one (GPML's ``infLaplace`` with ``apxSparse``, O(N M^2), gradients in Z
    too).  Newton's method finds the mode from f = 0 at every evaluation and stops when a step
    gains less than ``tol`` nats, after ``max_iter`` steps at most.  A likelihood that is not
    log-concave (Student-t) gives negative W at outliers, handled as GPML does.  With a K-class
    ``Categorical(K, "softmax")`` likelihood it is the dense multi-class Laplace approximation of
    Rasmussen & Williams Algorithms 3.3, 3.4 and 5.2 (:mod:`gpdsl.methods.laplace_multiclass`).

    Parameters
    ----------
    tol : float, default 1e-10
        Newton stops when a step gains less than this many nats.
    max_iter : int, default 100
        Newton steps at most per evaluation.
    jitter : float or None, default None
        As for FITC (K_uu only).
    chunk_size : int or None, default None
        Rows per O(N M^2) chunk (FITC prior).
    """

    tol: float = 1e-10
    max_iter: int = 100
    jitter: float | None = None
    chunk_size: int | None = None
    inducing_rule = "optional"
    requires = "log_density_derivatives"
    log_evidence_kind = "Laplace approximation"
    supports_dask_chunks = True
    # K classes with the softmax link: Rasmussen & Williams Algorithms 3.3, 3.4 and 5.2, dense.
    multi_latent = True

    def __post_init__(self):
        check_positive_number("Laplace", "tol", self.tol)
        check_positive_int("Laplace", "max_iter", self.max_iter)
        check_jitter("Laplace", self.jitter)
        _check_chunk("Laplace", self.chunk_size)

    def check_inducing(self, likelihood, inducing):
        """The multi-class approximation is dense: no inducing spec with K latent functions.

        Parameters
        ----------
        likelihood : gpdsl.likelihoods.Likelihood
        inducing : gpdsl.inducing.InducingSpec or None
        """
        if inducing is not None and likelihood.n_latent > 1:
            raise ValueError(f"Model: Laplace fits {likelihood.describe()} by the dense multi-class approximation "
                             "(Rasmussen & Williams Algorithm 3.3), which uses no inducing points; pass inducing=None "
                             "(or use SVGP for a sparse multi-class model)")

    def local_state_for(self, likelihood):
        """The mode a = K^-1 f_hat of the multi-class approximation (none for one latent function).

        Parameters
        ----------
        likelihood : gpdsl.likelihoods.Likelihood
        """
        return laplace_multiclass.MODE_FORMAT if likelihood.n_latent > 1 else None

    def evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, warm, offset=None):
        if likelihood.n_latent > 1:
            if Z is not None or offset is not None:
                raise ValueError(f"Laplace: {likelihood.describe()} is fitted by the dense multi-class Laplace "
                                 "approximation, without inducing points or an offset")
            return laplace_multiclass.evaluate(kernel, likelihood, X, y, tol=self.tol, max_iter=self.max_iter,
                                               need_grad=need_grad, need_state=need_state, warm=warm)
        # The likelihood of X's rows (a likelihood per output reads each row's output there).
        return laplace.evaluate(kernel, shifted(likelihood.for_rows(X), offset), X, y, Z, tol=self.tol,
                                max_iter=self.max_iter, jitter=self.jitter, chunk_size=self.chunk_size, need_grad=need_grad,
                                need_state=need_state, offset_grad=offset is not None)
