"""The Gaussian-noise methods: dense :class:`Exact` and the collapsed sparse :class:`VFE`,
:class:`DTC` and :class:`FITC` (:mod:`gpdsl.methods.exact`, :mod:`gpdsl.methods.collapsed`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..linalg import check_jitter
from ..methods import collapsed, exact
from .base import Inference, _check_chunk, _less


@dataclass(frozen=True)
class Exact(Inference):
    """Dense GP regression, O(N^3): the reference, log N(y | 0, K_ff + sigma^2 I) (Rasmussen &
    Williams eq. 2.30; Titsias 2009 eq. 4), with gradients and the exact predictive (eq. 3).

    An :class:`gpdsl.kernels.ICM` on isotopic data (every input at every output, no missing
    entry) with a noise of one value an output (``Gaussian``, ``OutputGaussian``) is evaluated
    through its Kronecker factors automatically, O(N^3 + P^3) rather than O((N P)^3), to the
    same result (:mod:`gpdsl.methods.exact`).

    Parameters
    ----------
    jitter : float or None, default None
        As for the sparse methods, on K_ff + noise: None for the dynamic ladder, or a fixed
        multiple of its mean diagonal (the noise variance usually makes it unnecessary).
    """

    jitter: float | None = None
    requires = "noise"
    log_evidence_kind = "exact log marginal likelihood"

    def __post_init__(self):
        check_jitter("Exact", self.jitter)

    def evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, warm, offset=None):
        return exact.evaluate(kernel, likelihood, X, _less(y, offset), jitter=self.jitter, need_grad=need_grad,
                              need_state=need_state, offset_grad=offset is not None)


_COLLAPSED_PARAMETERS = """
    Parameters
    ----------
    jitter : float or None, default None
        None for the dynamic ladder (thesis 5.1.3), or a fixed multiple of mean(diag K_uu)
        added to K_uu (GPML's apxSparse uses 1e-6).
    chunk_size : int or None, default None
        Rows per O(N M^2) chunk (None: chosen from N and M).
    """


@dataclass(frozen=True)
class _CollapsedGaussian(Inference):
    """Options shared by VFE, DTC and FITC (:mod:`gpdsl.methods.collapsed`).
    """

    __doc__ += _COLLAPSED_PARAMETERS

    jitter: float | None = None
    chunk_size: int | None = None
    requires = "noise"
    inducing_rule = "required"
    supports_dask_chunks = True
    fitc = False
    dtc = False

    def __post_init__(self):
        check_jitter(type(self).__name__, self.jitter)
        _check_chunk(type(self).__name__, self.chunk_size)

    def evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, warm, offset=None):
        return collapsed.evaluate(kernel, likelihood, X, _less(y, offset), Z, fitc=self.fitc, dtc=self.dtc,
                                  jitter=self.jitter, chunk_size=self.chunk_size, need_grad=need_grad,
                                  need_state=need_state, offset_grad=offset is not None)


@dataclass(frozen=True)
class VFE(_CollapsedGaussian):
    """Titsias' collapsed variational bound (2009, eq. 16) with the optimal q(u) (eq. 17).

    ``F_V = log N(y | 0, Q_ff + sigma^2 I) - tr(K_ff - Q_ff) / (2 sigma^2)`` with
    ``Q_ff = K_fu K_uu^-1 K_uf``: a lower bound on the exact log marginal likelihood for every Z.
    Gaussian and heteroscedastic Gaussian likelihoods (sigma^2 then per point).
    """

    __doc__ += _COLLAPSED_PARAMETERS
    log_evidence_kind = "collapsed variational bound"
    evidence_is_bound = True


@dataclass(frozen=True)
class DTC(_CollapsedGaussian):
    """The projected-process (PP) / deterministic training conditional approximate log marginal
    likelihood (Seeger, Williams & Lawrence 2003; Titsias 2009 eq. 5 with the Nyström Q_ff).

    ``F_PP = log N(y | 0, Q_ff + sigma^2 I)``, ``Q_ff = K_fu K_uu^-1 K_uf``: the VFE bound
    (eq. 16) without its trace term, so ``F_PP = F_V + tr(K_ff - Q_ff) / (2 sigma^2) >= F_V``; it is
    not a bound on the exact log marginal likelihood and can exceed it (Titsias' Figure 2(c)).  Its
    predictive is VFE's (Titsias section 3.1: the optimal q(u) of eq. 17 gives the PP predictive).
    The inducing inputs act as extra kernel hyperparameters; fitting them with the
    hyperparameters overfits (Titsias sections 4 and 5).  Gaussian noise, homoscedastic or per point.
    """

    __doc__ += _COLLAPSED_PARAMETERS
    log_evidence_kind = "DTC (projected process) approximate log marginal likelihood"
    dtc = True


@dataclass(frozen=True)
class FITC(_CollapsedGaussian):
    """The FITC / SPGP approximate marginal likelihood (Snelson & Ghahramani 2006; Titsias 2009
    eq. 5): ``log N(y | 0, Q_ff + diag(K_ff - Q_ff) + sigma^2 I)``.  Gaussian noise, homoscedastic or per
    point (sigma^2 then diagonal).
    """

    __doc__ += _COLLAPSED_PARAMETERS

    log_evidence_kind = "FITC approximate log marginal likelihood"
    fitc = True
