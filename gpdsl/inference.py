"""Inference-method specifications (``gd.inference``): small frozen declarations.

Which numerical method runs for a (likelihood, inference) pair is decided by the explicit
table in :mod:`gpdsl.model`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .checks import check_positive_int, check_positive_number, is_integer, is_number
from .linalg import check_jitter


def _check_chunk(owner, chunk_size):
    if chunk_size is not None and (not is_integer(chunk_size) or chunk_size < 1):
        raise ValueError(f"{owner}: chunk_size must be None or a positive integer, got {chunk_size!r}")


@dataclass(frozen=True)
class Exact:
    """Dense GP regression, O(N^3): the reference.  ``jitter`` as for the sparse methods
    (the noise variance usually makes it unnecessary)."""

    jitter: float | None = None
    inducing_rule = "forbidden"

    def method_options(self):
        return {"jitter": self.jitter}

    def __post_init__(self):
        check_jitter("Exact", self.jitter)


@dataclass(frozen=True)
class _CollapsedGaussian:
    """Options shared by VFE and FITC.

    ``jitter``: None for the dynamic ladder (thesis 5.1.3), or a fixed multiple of
    mean(diag K_uu) (GPML's apxSparse uses 1e-6).  ``chunk_size``: rows per O(N M^2) chunk.
    """

    jitter: float | None = None
    chunk_size: int | None = None
    inducing_rule = "required"

    def method_options(self):
        return {"jitter": self.jitter, "chunk_size": self.chunk_size}

    def __post_init__(self):
        check_jitter(type(self).__name__, self.jitter)
        _check_chunk(type(self).__name__, self.chunk_size)


@dataclass(frozen=True)
class VFE(_CollapsedGaussian):
    """Titsias' collapsed variational bound (2009, eq. 16) with the optimal q(u) (eq. 17)."""


@dataclass(frozen=True)
class FITC(_CollapsedGaussian):
    """The FITC / SPGP approximate marginal likelihood (Snelson & Ghahramani 2006)."""


SCHEDULES = ("sequential", "parallel")
QP_HYPERPARAMETERS = ("ep", "qp")


@dataclass(frozen=True)
class _SiteInference:
    """Options shared by EP and QP (they differ only in the site projection).

    ``damping``: weight kept on the old site parameters in each update (0 = undamped); it is
    raised automatically when the site changes oscillate.  ``max_sweeps``: sweeps per EP run.
    ``tol``: convergence when the largest change of a site parameter in a sweep is below it.
    ``schedule``: ``"sequential"`` (one site at a time, rank-1 updates, as Naish-Guzman &
    Holden section 3) or ``"parallel"`` (all sites from the current marginals, then one
    refresh).  Without an inducing spec the dense O(N^3) EP runs; with one, FITC-EP.
    """

    damping: float = 0.0
    max_sweeps: int = 200
    tol: float = 1e-6
    schedule: str = "sequential"
    jitter: float | None = None
    chunk_size: int | None = None
    inducing_rule = "optional"

    def method_options(self):
        return {"spec": self}

    def __post_init__(self):
        name = type(self).__name__
        if not (is_number(self.damping) and 0.0 <= self.damping < 1.0):
            raise ValueError(f"{name}: damping must be in [0, 1), got {self.damping!r}")
        check_positive_int(name, "max_sweeps", self.max_sweeps)
        check_positive_number(name, "tol", self.tol)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"{name}: schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        check_jitter(name, self.jitter)
        _check_chunk(name, self.chunk_size)


@dataclass(frozen=True)
class EP(_SiteInference):
    """Expectation propagation: sites by moment matching (KL projection)."""

    quantile = False
    lookup = False


@dataclass(frozen=True)
class QP(_SiteInference):
    """Quantile propagation (Zhang et al. 2020): the EP mean and the L2-Wasserstein standard
    deviation sigma* = int phi(Phi^-1(F(f))) df of the tilted distribution (eq. 7).

    ``hyperparameters`` says which sites EP's evidence formula (the paper's eq. 4) is maximised at:

    * ``"ep"`` (default): EP's own, i.e. the EP evidence optimum; QP's posterior at those values.
    * ``"qp"``: QP's, by the outer loop of the paper's Algorithm 1 -- QP sweeps to convergence,
      then the hyperparameters (and optimised Z) maximise eq. 4 with those sites held fixed (a
      Gaussian regression on the pseudo-data nu/tau, noise 1/tau), repeated from EP's optimum
      until the free log-space parameters move by less than ``outer_tol`` in a round, at most
      ``max_outer`` rounds (else ``converged=False`` and a ConvergenceWarning).  Eq. 4 with the
      sites fixed does not involve the likelihood's bias, so a learnable bias keeps EP's value.

    Either way ``log_evidence`` is EP's at the returned hyperparameters; the posterior and
    predictions are QP's.  ``lookup=True`` reads the probit sigma* from the Appendix J table
    (bilinear, ~1e-5 relative; outside the grid it is computed directly).
    """

    lookup: bool = False
    hyperparameters: str = "ep"
    max_outer: int = 200
    outer_tol: float = 1e-5
    quantile = True

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.lookup, bool):
            raise TypeError(f"QP: lookup must be True or False, got {self.lookup!r}")
        if self.hyperparameters not in QP_HYPERPARAMETERS:
            raise ValueError(f"QP: hyperparameters must be one of {QP_HYPERPARAMETERS}, got {self.hyperparameters!r}")
        check_positive_int("QP", "max_outer", self.max_outer)
        check_positive_number("QP", "outer_tol", self.outer_tol)


@dataclass(frozen=True)
class PolyaGamma:
    """Pólya-Gamma collapsed classification, PGPR (Passerello thesis ch. 4) for the logit link.

    q(u) is optimal in closed form (eq. 4.5), the bound is eq. 4.7 in the stable form C.1, and
    the local parameters c are updated in closed form (eq. 4.11) until the largest change of a
    c_n is below ``tol`` (the loop stops once ``max_iter`` passes over the data have been made
    in one evaluation, counting the first pass at the starting c and the pass that tests each
    update, so at least 2 and, with acceleration, at most ``max_iter`` + 2; not converging warns
    ``gd.ConvergenceWarning`` and flags the result).  ``acceleration=True``
    adds safeguarded Anderson acceleration to the updates (the bound still never decreases);
    ``False`` runs the thesis' plain updates.  The kernel hyperparameters, the bias and
    optimised inducing inputs follow L-BFGS-B on the gradient at fixed c.  ``jitter`` and
    ``chunk_size`` as for VFE.
    """

    tol: float = 1e-6
    max_iter: int = 1000
    acceleration: bool = True
    jitter: float | None = None
    chunk_size: int | None = None
    inducing_rule = "required"

    def method_options(self):
        return {"spec": self}

    def __post_init__(self):
        check_positive_number("PolyaGamma", "tol", self.tol)
        check_positive_int("PolyaGamma", "max_iter", self.max_iter)
        if not isinstance(self.acceleration, bool):
            raise TypeError(f"PolyaGamma: acceleration must be True or False, got {self.acceleration!r}")
        check_jitter("PolyaGamma", self.jitter)
        _check_chunk("PolyaGamma", self.chunk_size)


@dataclass(frozen=True)
class Laplace:
    """The Laplace approximation (Rasmussen & Williams section 3.4: Algorithms 3.1, 3.2 and 5.1;
    GPML's ``infLaplace``), dense, for ``Bernoulli`` with either link.  Newton's method finds the
    mode from f = 0 at every evaluation and stops when a step gains less than ``tol`` nats, after
    ``max_iter`` steps at most."""

    tol: float = 1e-10
    max_iter: int = 100
    inducing_rule = "forbidden"

    def method_options(self):
        return {"tol": self.tol, "max_iter": self.max_iter}

    def __post_init__(self):
        check_positive_number("Laplace", "tol", self.tol)
        check_positive_int("Laplace", "max_iter", self.max_iter)


INFERENCE = {cls.__name__: cls for cls in (Exact, VFE, FITC, EP, QP, PolyaGamma, Laplace)}

__all__ = ["Exact", "VFE", "FITC", "EP", "QP", "PolyaGamma", "Laplace", "INFERENCE"]
