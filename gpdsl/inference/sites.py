"""The site methods: expectation propagation (:class:`EP`) and quantile propagation
(:class:`QP`), dense or FITC (:mod:`gpdsl.methods.expectation_propagation`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_positive_int, check_positive_number, is_number
from ..linalg import check_jitter
from ..methods import expectation_propagation, quantile_propagation
from .base import FIT_TOL, Inference, _check_chunk, _loosened_within_fit


SCHEDULES = ("sequential", "parallel")
APPROXIMATIONS = ("fitc", "dtc")
QP_HYPERPARAMETERS = ("ep", "qp")
_SITE_PARAMETERS = """
    Parameters
    ----------
    damping : float in [0, 1), default 0
        Weight kept on the old site parameters in each update (0 = undamped); raised
        automatically when the site changes oscillate.
    max_sweeps : int, default 200
        Sweeps per EP run.
    tol : float, default 1e-6
        Convergence when the largest change of a site parameter in a sweep is below it: the
        posterior's sites (a fit's final evaluation) and every evaluation outside a fit.
    fit_tol : float, default 1e-4
        The same test for the sweeps of the optimiser's evaluations within a fit, at
        max(fit_tol, tol) (``gpdsl.inference.base.FIT_TOL`` says why); ``fit_tol=tol`` sweeps
        every evaluation to ``tol``.
    schedule : {"sequential", "parallel"}, default "sequential"
        One site at a time with rank-1 updates (Naish-Guzman & Holden section 3), or all sites
        from the current marginals, then one refresh.
    jitter : float or None, default None
        As for VFE (K_uu, or K_ff for the dense method).
    chunk_size : int or None, default None
        Rows per O(N M^2) chunk (FITC-EP).
    approximation : {"fitc", "dtc"}, default "fitc"
        The sparse prior with an inducing spec (ignored without one): ``"fitc"`` is
        Q_ff + diag(K_ff - Q_ff) (Naish-Guzman & Holden 2007), ``"dtc"`` the projected-process /
        DTC prior Q_ff = K_fu K_uu^-1 K_uf (Seeger, Williams & Lawrence 2003; the prior of GPy's
        EPDTC), K_uu with the jitter above; the evidence and its gradients are then those of
        log N(nu/tau | 0, Q_ff + diag(1/tau)) at the sites (``gd.inference.DTC`` on the
        pseudo-data), and predictions at new inputs keep K_** - Q_** (the DTC predictive).
        DTC's evidence has no variance correction, and maximised over optimised inducing inputs it
        can degenerate (breast cancer, M = 128: 3 of 5 splits ran to kernel variance ~1e13,
        length-scale ~2.4, test NLPD 0.69; benchmarks/notes_fitc_vs_dtc.md); with fixed Z it
        fitted as FITC-EP did.
    """


@dataclass(frozen=True)
class _SiteInference(Inference):
    """Options shared by EP and QP (they differ only in the site projection).

    ``damping``: weight kept on the old site parameters in each update (0 = undamped); it is
    raised automatically when the site changes oscillate.  ``max_sweeps``: sweeps per EP run.
    ``tol``: convergence when the largest change of a site parameter in a sweep is below it, for
    the posterior's sites; ``fit_tol``: the same within a fit (at max(fit_tol, tol)).
    ``schedule``: ``"sequential"`` (one site at a time, rank-1 updates, as Naish-Guzman &
    Holden section 3) or ``"parallel"`` (all sites from the current marginals, then one
    refresh).  Without an inducing spec the dense O(N^3) EP runs; with one, FITC-EP, or DTC-EP
    with ``approximation="dtc"``.
    """

    damping: float = 0.0
    max_sweeps: int = 200
    tol: float = 1e-6
    fit_tol: float = FIT_TOL
    schedule: str = "sequential"
    jitter: float | None = None
    chunk_size: int | None = None
    approximation: str = "fitc"
    inducing_rule = "optional"
    local_state = expectation_propagation.SITES_FORMAT
    requires = "site_model"

    def __post_init__(self):
        name = type(self).__name__
        if not (is_number(self.damping) and 0.0 <= self.damping < 1.0):
            raise ValueError(f"{name}: damping must be in [0, 1), got {self.damping!r}")
        check_positive_int(name, "max_sweeps", self.max_sweeps)
        check_positive_number(name, "tol", self.tol)
        check_positive_number(name, "fit_tol", self.fit_tol)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"{name}: schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        check_jitter(name, self.jitter)
        _check_chunk(name, self.chunk_size)
        if self.approximation not in APPROXIMATIONS:
            raise ValueError(f"{name}: approximation must be one of {APPROXIMATIONS}, got {self.approximation!r}")

    def within_fit(self):
        """The sweeps of a fit's inner evaluations stop at max(``fit_tol``, ``tol``) (see
        :data:`FIT_TOL`); the posterior's sites are swept to ``tol``.

        Returns
        -------
        EP or QP
        """
        return _loosened_within_fit(self)

    @property
    def supports_dask_chunks(self):
        # Sequential EP is serial by nature; the parallel schedule's passes chunk.
        return self.schedule == "parallel"

    def evaluate(self, kernel, likelihood, values, X, y, Z, *, need_grad, need_state, warm, offset=None):
        return expectation_propagation.evaluate(kernel, likelihood, X, y, Z, spec=self, warm=warm, offset=offset,
                                                need_grad=need_grad, need_state=need_state)


@dataclass(frozen=True)
class EP(_SiteInference):
    """Expectation propagation: sites by moment matching (KL projection); dense without an
    inducing spec, FITC-EP (Naish-Guzman & Holden 2007, section 3) with one, or EP on the DTC
    prior Q_ff with ``approximation="dtc"`` (the same sweeps with the diagonal correction zero).
    """

    __doc__ += _SITE_PARAMETERS

    quantile = False
    lookup = False
    log_evidence_kind = "EP approximation"


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
      sites fixed does not involve the likelihood's parameters, so they keep EP's values.

    Either way ``log_evidence`` is EP's at the returned hyperparameters; the posterior and
    predictions are QP's.  ``lookup=True`` reads the probit sigma* from the Appendix J table
    (bilinear, ~1e-5 relative; outside the grid it is computed directly).
    """

    __doc__ += _SITE_PARAMETERS + """lookup : bool, default False
        Read the probit sigma* from the Appendix J table.
    hyperparameters : {"ep", "qp"}, default "ep"
        Whose sites EP's evidence formula is maximised at (see above).
    max_outer : int, default 200
        Rounds of Algorithm 1's outer loop at most (``hyperparameters="qp"``).
    outer_tol : float, default 1e-5
        The outer loop stops when the free log-space parameters move by less than this.
    """

    lookup: bool = False
    hyperparameters: str = "ep"
    max_outer: int = 200
    outer_tol: float = 1e-5
    quantile = True
    log_evidence_kind = "EP approximation at QP's hyperparameters"

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.lookup, bool):
            raise TypeError(f"QP: lookup must be True or False, got {self.lookup!r}")
        if self.hyperparameters not in QP_HYPERPARAMETERS:
            raise ValueError(f"QP: hyperparameters must be one of {QP_HYPERPARAMETERS}, got {self.hyperparameters!r}")
        check_positive_int("QP", "max_outer", self.max_outer)
        check_positive_number("QP", "outer_tol", self.outer_tol)

    def outer_loop(self, objective, u, max_iter):
        if self.hyperparameters != "qp":
            return None
        return quantile_propagation.qp_outer_loop(objective, u, max_iter, spec=self)
