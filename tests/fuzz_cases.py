"""Seeded random small problems for every method variant, and the properties every fit must keep.

Shared by the CI test (``tests/test_fuzz.py``) and the long run (``benchmarks/bench_fuzz.py``),
so that both draw the same cases from the same ``(variant, seed)`` and judge them by the same rules.

A case is drawn by :func:`make_case` from ``numpy.random.default_rng([seed, variant index])``:
N in 10..60, D in 1..3, inputs with duplicated rows (sometimes a single distinct input), length-scales
log-uniform in 1e-2..1e3 (isotropic or ARD), kernel variances log-uniform in 1e-3..1e3, and per
likelihood: regression targets on scales 1e-2..1e3 with noise variances 1e-6..1e1; labels that are
random, drawn from a smooth latent, separable by a hyperplane or of one class; counts that are small, all zero, or up to ~1e6
(the negative binomial's dispersion log-uniform in 1e-3..1e2).  The log-link count variants
(:data:`OFFSET_VARIANTS`) carry, in half the cases, a per-row offset of the latent input (the log of
an exposure log-uniform in 1e-2..1e3) for the fit, ``predict`` and ``log_predictive``.
Most cases fit with ``optimize=False``; about three in ten optimise with ``max_iter`` 2..15 (issue 25's
variants: 30..200 in three in ten, so that fits converge; minibatch variants: 2..15 or 20..120 steps).
Sparse variants sometimes optimise Z (``gd.inducing.Optimized``), EP/QP sweep sequentially or in
parallel, and QP sometimes runs Algorithm 1 (``hyperparameters="qp"``, at most 5 outer rounds).

:func:`check_case` fits the case and returns an :class:`Outcome`.  The properties are

* the fit raises nothing but an *accepted* error (:func:`_accepted_fit_error` lists them);
* the log evidence and every fitted hyperparameter are finite;
* ``predict`` at held-out and training inputs returns only finite values, with
  0 <= f_var <= k(x, x) (1 + 1e-9) at the fitted hyperparameters, and 0 <= p <= 1;
* ``log_predictive`` at held-out and training inputs is finite;
* a posterior with ``converged=False`` came with a ``gd.ConvergenceWarning``;
* (issue 25) a posterior with ``converged=True`` whose stop is not in
  ``gpdsl.diagnostics.GRADIENT_FREE_STOPS`` has a final gradient, recomputed by a fresh
  ``model.evaluate`` (:func:`final_gradient`), within its ``grad_tol`` (see
  :data:`GRADIENT_RTOL` and :data:`LOCAL_ITERATION_GRADIENT_FACTOR`);
* (issue 45) the model round-trips through ``to_dict``/``Model.from_dict`` and
  ``to_toml``/``Model.from_toml`` (equal to itself);
* (issue 45) ``log_predictive`` of a likelihood of discrete targets (binary, categorical, counts:
  ``gpdsl.inputs.target_kind``) is at most 0 (a log probability), up to :data:`LOG_PMF_SLACK`;
* (issue 45) a ``converged=True`` minibatch fit stopped by the stochastic rule is at the optimum
  of its full-batch objective: the gradient of the full-batch declaration's objective (its q, or
  its c, optimised afresh in one evaluation over all N rows) at the fitted hyperparameters is
  within the full-batch fits' tolerance ``gradient_tolerance(N)``, and the bound at the fit's own q
  is within :func:`q_gap_bound` of the bound at q's optimum.

The properties are functions of the case (:data:`MODEL_PROPERTIES`, checked before the fit) or of
the case, its posterior and the fit's warnings (:data:`POSTERIOR_PROPERTIES`), each returning a
failure :class:`Outcome` or None: a new property is one more function in one of those tuples.

Other modules register variants of their own (:func:`register_variants`, :data:`CASE_BUILDERS`):
``tests/fuzz_multioutput.py``'s multi-output cases (issue 48), appended to :data:`VARIANTS` on
import, whose Case lists properties of its own (``Case.properties``).  The properties above read
a multi-output case in the long layout its methods see (:func:`long_rows`; the evidence bound and
the targets' coding are the likelihood's ``for_rows(X)``'s, the predictions are over (point,
output) pairs), and a likelihood per output (``PerOutput``) by each row's part: its summaries NaN
at the rows of the parts that do not give them, log p <= 0 at discrete parts' rows, its parts'
log concavity for f_var <= k(x, x).

Documented exceptions: a Student-t's y_mean is NaN for df <= 1 and its y_var inf for df <= 2 (at a
Student-t part's rows by its own df: :func:`_undefined_moment`), a log-link count likelihood's y_mean
and y_var are inf where their exact values exceed float64's range (:func:`_overflowing_moment`), and
f_var <= k(x, x) is checked only where the posterior guarantees it (:func:`_prior_bounds_variance`).
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass, field

import numpy as np

import gpdsl as gd
from gpdsl.components import bind
from gpdsl.diagnostics import GRADIENT_FREE_STOPS, gradient_tolerance, largest_gradient
from gpdsl.inducing import NoCandidateError
from gpdsl.inputs import target_kind
from gpdsl.multioutput import expand_inducing, long_data, output_count, query

_LOCAL_ITERATION_METHODS = (gd.inference.EP, gd.inference.QP, gd.inference.PolyaGamma, gd.inference.SVGP,
                            gd.inference.VGP)

# The method variants of issue 14: (likelihood, inference, inducing) families.  The index of a
# name in this tuple is part of the case's seed, so adding a variant at the end keeps the others.
VARIANTS = ("exact", "vfe", "fitc", "ep_dense", "ep_fitc", "qp_dense", "qp_fitc", "pg_kmeans", "pg_greedy",
            "poisson_ep_dense", "poisson_ep_fitc", "poisson_qp_dense", "poisson_qp_fitc",
            # Issue 25: the pairs and forms added since (every pair of gd.inference.supported_pairs(),
            # the dense and FITC forms of EP, QP and Laplace, the minibatch forms of SVGP and PolyaGamma).
            "dtc", "hetero_exact", "hetero_vfe", "svgp", "svgp_minibatch", "vgp",
            "logit_ep", "logit_qp", "laplace_dense", "laplace_fitc", "pg_minibatch",
            "bernoulli_svgp", "bernoulli_svgp_minibatch", "bernoulli_vgp",
            "poisson_svgp", "poisson_svgp_minibatch", "poisson_vgp",
            "studentt_ep_dense", "studentt_ep_fitc", "studentt_qp_dense", "studentt_qp_fitc",
            "studentt_laplace_dense", "studentt_laplace_fitc", "studentt_svgp", "studentt_svgp_minibatch",
            "studentt_vgp",
            # The pairs added by capability dispatch: Gaussian with EP, QP and Laplace, the heteroscedastic
            # Gaussian with DTC and FITC, Poisson's log link (Laplace, and EP and SVGP beside the square
            # link's) and the negative binomial with every method it takes; the count variants of the log
            # link draw a per-row offset (log exposure) in half the cases.
            "gaussian_ep_dense", "gaussian_ep_fitc", "gaussian_qp_dense", "gaussian_qp_fitc",
            "gaussian_laplace_dense", "gaussian_laplace_fitc", "hetero_dtc", "hetero_fitc",
            "poisson_log_laplace_dense", "poisson_log_laplace_fitc", "poisson_log_ep_dense", "poisson_log_svgp",
            "negbin_ep_dense", "negbin_ep_fitc", "negbin_qp_dense", "negbin_qp_fitc",
            "negbin_laplace_dense", "negbin_laplace_fitc", "negbin_svgp", "negbin_svgp_minibatch", "negbin_vgp",
            # Issue 28: K classes (softmax Laplace, SVGP with any link, the logistic-softmax augmentation).
            "categorical_laplace_dense", "categorical_svgp", "categorical_svgp_minibatch", "categorical_pg",
            "categorical_pg_minibatch")

# What each variant fits: (likelihood class, inference class, form), form "dense", "sparse" or
# "minibatch" (a minibatch form is sparse too).  tests/test_fuzz.py checks that make_case builds
# exactly this and that the forms cover gd.inference.supported_pairs(), the dense and sparse
# forms of every method with optional inducing inputs and the minibatch form of every method with one.
VARIANT_FORMS = {
    "exact": ("Gaussian", "Exact", "dense"), "vfe": ("Gaussian", "VFE", "sparse"),
    "fitc": ("Gaussian", "FITC", "sparse"),
    "ep_dense": ("Bernoulli", "EP", "dense"), "ep_fitc": ("Bernoulli", "EP", "sparse"),
    "qp_dense": ("Bernoulli", "QP", "dense"), "qp_fitc": ("Bernoulli", "QP", "sparse"),
    "pg_kmeans": ("Bernoulli", "PolyaGamma", "sparse"), "pg_greedy": ("Bernoulli", "PolyaGamma", "sparse"),
    "poisson_ep_dense": ("Poisson", "EP", "dense"), "poisson_ep_fitc": ("Poisson", "EP", "sparse"),
    "poisson_qp_dense": ("Poisson", "QP", "dense"), "poisson_qp_fitc": ("Poisson", "QP", "sparse"),
    "dtc": ("Gaussian", "DTC", "sparse"),
    "hetero_exact": ("HeteroscedasticGaussian", "Exact", "dense"),
    "hetero_vfe": ("HeteroscedasticGaussian", "VFE", "sparse"),
    "svgp": ("Gaussian", "SVGP", "sparse"), "svgp_minibatch": ("Gaussian", "SVGP", "minibatch"),
    "vgp": ("Gaussian", "VGP", "dense"),
    "logit_ep": ("Bernoulli", "EP", None), "logit_qp": ("Bernoulli", "QP", None),
    "laplace_dense": ("Bernoulli", "Laplace", "dense"), "laplace_fitc": ("Bernoulli", "Laplace", "sparse"),
    "pg_minibatch": ("Bernoulli", "PolyaGamma", "minibatch"),
    "bernoulli_svgp": ("Bernoulli", "SVGP", "sparse"), "bernoulli_svgp_minibatch": ("Bernoulli", "SVGP", "minibatch"),
    "bernoulli_vgp": ("Bernoulli", "VGP", "dense"),
    "poisson_svgp": ("Poisson", "SVGP", "sparse"), "poisson_svgp_minibatch": ("Poisson", "SVGP", "minibatch"),
    "poisson_vgp": ("Poisson", "VGP", "dense"),
    "studentt_ep_dense": ("StudentT", "EP", "dense"), "studentt_ep_fitc": ("StudentT", "EP", "sparse"),
    "studentt_qp_dense": ("StudentT", "QP", "dense"), "studentt_qp_fitc": ("StudentT", "QP", "sparse"),
    "studentt_laplace_dense": ("StudentT", "Laplace", "dense"),
    "studentt_laplace_fitc": ("StudentT", "Laplace", "sparse"),
    "studentt_svgp": ("StudentT", "SVGP", "sparse"), "studentt_svgp_minibatch": ("StudentT", "SVGP", "minibatch"),
    "studentt_vgp": ("StudentT", "VGP", "dense"),
    "gaussian_ep_dense": ("Gaussian", "EP", "dense"), "gaussian_ep_fitc": ("Gaussian", "EP", "sparse"),
    "gaussian_qp_dense": ("Gaussian", "QP", "dense"), "gaussian_qp_fitc": ("Gaussian", "QP", "sparse"),
    "gaussian_laplace_dense": ("Gaussian", "Laplace", "dense"),
    "gaussian_laplace_fitc": ("Gaussian", "Laplace", "sparse"),
    "hetero_dtc": ("HeteroscedasticGaussian", "DTC", "sparse"),
    "hetero_fitc": ("HeteroscedasticGaussian", "FITC", "sparse"),
    "poisson_log_laplace_dense": ("Poisson", "Laplace", "dense"),
    "poisson_log_laplace_fitc": ("Poisson", "Laplace", "sparse"),
    "poisson_log_ep_dense": ("Poisson", "EP", "dense"), "poisson_log_svgp": ("Poisson", "SVGP", "sparse"),
    "negbin_ep_dense": ("NegativeBinomial", "EP", "dense"), "negbin_ep_fitc": ("NegativeBinomial", "EP", "sparse"),
    "negbin_qp_dense": ("NegativeBinomial", "QP", "dense"), "negbin_qp_fitc": ("NegativeBinomial", "QP", "sparse"),
    "negbin_laplace_dense": ("NegativeBinomial", "Laplace", "dense"),
    "negbin_laplace_fitc": ("NegativeBinomial", "Laplace", "sparse"),
    "negbin_svgp": ("NegativeBinomial", "SVGP", "sparse"),
    "negbin_svgp_minibatch": ("NegativeBinomial", "SVGP", "minibatch"),
    "negbin_vgp": ("NegativeBinomial", "VGP", "dense"),
    "categorical_laplace_dense": ("Categorical", "Laplace", "dense"),
    "categorical_svgp": ("Categorical", "SVGP", "sparse"),
    "categorical_svgp_minibatch": ("Categorical", "SVGP", "minibatch"),
    "categorical_pg": ("Categorical", "PolyaGamma", "sparse"),
    "categorical_pg_minibatch": ("Categorical", "PolyaGamma", "minibatch"),
}

# The variants whose likelihood has the log link on counts (Poisson(link="log"), NegativeBinomial):
# their cases carry a per-row offset of the latent input (log exposure) in half the draws.
OFFSET_VARIANTS = tuple(v for v in VARIANT_FORMS if v.startswith(("poisson_log_", "negbin_")))

# Variant -> ``build(variant, seed, rng)``, the function that draws the whole Case of a variant
# another module registers (:func:`register_variants`: tests/fuzz_multioutput.py's, issue 48).
CASE_BUILDERS = {}


def register_variants(forms, build):
    """Add variants whose cases another module draws: appended to :data:`VARIANTS` (after every
    variant here, so that no earlier variant's seeds change) and to :data:`VARIANT_FORMS`; their
    :func:`make_case` is ``build(variant, seed, rng)`` with ``rng =
    numpy.random.default_rng([seed, variant index])``, returning a :class:`Case`.

    Parameters
    ----------
    forms : dict
        ``{variant: (likelihood class, inference class, form)}`` as :data:`VARIANT_FORMS`.
    build : callable

    Raises
    ------
    ValueError
        A variant name that is registered already.
    """
    global VARIANTS
    taken = sorted(set(forms) & set(VARIANTS))
    if taken:
        raise ValueError(f"register_variants: variants {taken} are registered already")
    VARIANTS = VARIANTS + tuple(forms)
    VARIANT_FORMS.update(forms)
    CASE_BUILDERS.update(dict.fromkeys(forms, build))


# Relative slack of f_var over the prior variance k(x, x): rounding of k(x, x) - b^T C b only.
PRIOR_VARIANCE_RTOL = 1e-9

# Fraction of cases that optimise the hyperparameters (the rest use fit(optimize=False)).
OPTIMIZE_FRACTION = 0.3


def _accepted_fit_error(err):
    """The name of an accepted error raised by ``fit``, or None when ``err`` is a failure.

    Accepted are gpdsl's documented refusals only, matched by type (not by a base class such as
    ``np.linalg.LinAlgError``, which NotPositiveDefiniteError extends but a stray NumPy or SciPy
    error would match too):

    * ``gd.NotPositiveDefiniteError``: a matrix stayed indefinite after the whole jitter ladder;
    * ``gd.inducing.NoCandidateError``: a greedy rule found no training point with residual prior
      variance (a declaration whose kernel variance is too small to select by);
    * the ``ValueError`` of ``Model.fit`` for a fit that left float64's range (its message starts
      "fit: " and ends by telling the user to standardise X and y).
    """
    if isinstance(err, gd.NotPositiveDefiniteError):
        return "NotPositiveDefiniteError"
    if isinstance(err, NoCandidateError):
        return "NoCandidateError"
    if type(err) is ValueError and str(err).startswith("fit: ") and "standardise X and y" in str(err):
        return "ValueError(out of range)"
    return None


@dataclass
class Case:
    """One random problem: the model, training and held-out data, and how to fit."""

    variant: str
    seed: int
    model: gd.Model
    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    optimize: bool
    max_iter: int
    notes: dict = field(default_factory=dict)
    offset: np.ndarray | None = None
    offset_test: np.ndarray | None = None
    # Properties of the posterior checked after POSTERIOR_PROPERTIES (a registered variant's own).
    properties: tuple = ()


@dataclass
class Outcome:
    """``kind``: "passed", "accepted: <error>" or "failure: <property>"; ``detail``: what was seen."""

    kind: str
    detail: str = ""

    @property
    def failed(self):
        return self.kind.startswith("failure")


def _log_uniform(rng, low, high, size=None):
    return np.exp(rng.uniform(math.log(low), math.log(high), size))


def _inputs(rng, n, d):
    """(n, d) inputs, often with duplicated rows and sometimes a single distinct row."""
    mode = rng.choice(["distinct", "duplicated", "one_point"], p=[0.55, 0.35, 0.10])
    scale = _log_uniform(rng, 0.1, 10.0)
    if mode == "distinct":
        return scale * rng.uniform(-1.0, 1.0, (n, d)), str(mode)
    distinct = 1 if mode == "one_point" else int(rng.integers(1, max(2, n // 2) + 1))
    pool = scale * rng.uniform(-1.0, 1.0, (distinct, d))
    return pool[rng.integers(0, distinct, n)], str(mode)


def _kernel(rng, d):
    """A stationary kernel with extreme-range hyperparameters (isotropic or ARD), in half the cases
    turned into one of issue 27's kernels or composites.  Those draws come from a generator spawned
    from ``rng``, which leaves ``rng``'s own stream, and so every other draw of the case, as it was
    (the known failures keep their seeds)."""
    cls = [gd.kernels.SquaredExponential, gd.kernels.Matern32, gd.kernels.Matern52][int(rng.integers(3))]
    lengthscale = _log_uniform(rng, 1e-2, 1e3, d) if rng.random() < 0.5 else float(_log_uniform(rng, 1e-2, 1e3))
    variance = float(_log_uniform(rng, 1e-3, 1e3))
    base = cls(lengthscale=lengthscale, variance=variance)
    extra = rng.spawn(1)[0]
    form = str(extra.choice(["stationary", "matern12", "rq", "periodic", "plus_linear", "times_linear", "plus_white",
                             "spectral"], p=[0.5] + [0.5 / 7] * 7))
    K = gd.kernels
    if form == "matern12":
        return K.Matern12(lengthscale=lengthscale, variance=variance)
    if form == "rq":
        return K.RationalQuadratic(lengthscale=lengthscale, variance=variance, alpha=float(_log_uniform(extra, 1e-2, 1e2)))
    if form == "periodic":
        return K.Periodic(base=base, period=float(_log_uniform(extra, 1e-2, 1e2)))
    linear = K.Linear(variance=float(_log_uniform(extra, 1e-3, 1e2)), active_dims=[int(extra.integers(d))])
    if form == "plus_linear":
        return base + linear
    if form == "times_linear":
        return base * linear
    if form == "plus_white":
        return base + K.White(float(_log_uniform(extra, 1e-4, 1e0)))
    if form == "spectral":
        return K.SpectralMixture(2)
    return base


def _latent(rng, X):
    """A smooth function of X with unit-order values."""
    w = rng.standard_normal(X.shape[1])
    return np.sin(X @ w + rng.uniform(0, 2 * np.pi))


def _labels(rng, X):
    """Binary labels, randomly coded {-1, +1} or {0, 1}: random, separable, or one class."""
    mode = str(rng.choice(["random", "separable", "one_class", "smooth"]))
    if mode == "random":
        y = rng.random(X.shape[0]) < 0.5
    elif mode == "separable":
        score = X @ rng.standard_normal(X.shape[1])
        y = score > np.median(score)
    elif mode == "one_class":
        y = np.full(X.shape[0], rng.random() < 0.5)
    else:
        y = rng.random(X.shape[0]) < 1.0 / (1.0 + np.exp(-3.0 * _latent(rng, X)))
    return (np.where(y, 1.0, -1.0) if rng.random() < 0.5 else y.astype(float)), mode


def _classes(rng, X):
    """K = 2..5 classes coded 0..K-1: random, by the largest of K smooth functions, or nearly one
    class (every class kept at least once: K is the number of distinct labels)."""
    k = int(rng.integers(2, 6))
    n = X.shape[0]
    mode = str(rng.choice(["random", "smooth", "dominant"]))
    if mode == "random":
        y = rng.integers(0, k, n)
    elif mode == "smooth":
        y = np.argmax(np.column_stack([3.0 * _latent(rng, X) for _ in range(k)]), axis=1)
    else:
        y = np.zeros(n, dtype=int)
    y[rng.choice(n, size=k, replace=False)] = np.arange(k)
    return y.astype(float), mode, k


def _counts(rng, X):
    """Non-negative integer counts: small rates, all zero, large (up to ~1e6) or mixed scales."""
    mode = str(rng.choice(["small", "zeros", "large", "mixed"]))
    if mode == "zeros":
        return np.zeros(X.shape[0]), mode
    if mode == "small":
        rate = np.exp(1.5 * _latent(rng, X))
    elif mode == "large":
        rate = _log_uniform(rng, 1e3, 1e6) * np.exp(_latent(rng, X))
    else:
        rate = _log_uniform(rng, 1e-2, 1e6, X.shape[0])
    return rng.poisson(rate).astype(float), mode


def _regression_targets(rng, X):
    scale = float(_log_uniform(rng, 1e-2, 1e3))
    return scale * (_latent(rng, X) + 0.1 * rng.standard_normal(X.shape[0])), f"scale {scale:.3g}"


def _site_inference(rng, cls):
    """EP or QP with a random sweep schedule (both schedules are supported variants); QP runs
    Algorithm 1 in a quarter of the cases, its rounds capped to bound the run time."""
    schedule = str(rng.choice(["sequential", "parallel"]))
    if cls is gd.inference.QP and rng.random() < 0.25:
        return cls(schedule=schedule, hyperparameters="qp", max_outer=5)
    return cls(schedule=schedule)


def _kmeans(rng, n):
    """K-means inducing inputs, optimised with the hyperparameters in a fifth of the cases."""
    spec = gd.inducing.KMeans(int(rng.integers(1, min(n, 15) + 1)), seed=int(rng.integers(1000)))
    return gd.inducing.Optimized(spec) if rng.random() < 0.2 else spec


def _greedy(rng, n):
    """GreedyVariance choosing M by count or by trace threshold, plain or weighted, with or without
    the reinitialisation loop."""
    if rng.random() < 0.5:
        spec = dict(m=int(rng.integers(1, min(n, 15) + 1)))
    else:
        spec = dict(tol=float(_log_uniform(rng, 1e-4, 1e1)), max_m=min(n, 20))
    return gd.inducing.GreedyVariance(weighted=bool(rng.random() < 0.5), reinit=bool(rng.random() < 0.3),
                                      max_reinit=3, **spec)


def _model(variant, rng, X):
    """The model of ``variant`` with random hyperparameters and targets for X: (model, y, notes)."""
    n, d = X.shape
    kernel = _kernel(rng, d)
    probit = gd.likelihoods.Bernoulli("probit", bias=float(rng.choice([0.0, rng.normal()])))
    logit = gd.likelihoods.Bernoulli("logit", bias=float(rng.choice([0.0, rng.normal()])))
    family, _, rest = variant.partition("_")
    if VARIANTS.index(variant) >= _FIRST_ISSUE_25_VARIANT:
        return _issue_25_model(variant, rng, X, kernel, probit, logit)
    if variant in ("exact", "vfe", "fitc"):
        y, mode = _regression_targets(rng, X)
        likelihood = gd.likelihoods.Gaussian(variance=float(_log_uniform(rng, 1e-6, 1e1)))
        inference = {"exact": gd.inference.Exact, "vfe": gd.inference.VFE, "fitc": gd.inference.FITC}[variant]()
        inducing = None if variant == "exact" else _kmeans(rng, n)
    elif family in ("ep", "qp"):
        y, mode = _labels(rng, X)
        likelihood = probit
        inference = _site_inference(rng, gd.inference.EP if family == "ep" else gd.inference.QP)
        inducing = _kmeans(rng, n) if rest == "fitc" else None
    elif family == "pg":
        y, mode = _labels(rng, X)
        likelihood, inference = logit, gd.inference.PolyaGamma()
        inducing = _kmeans(rng, n) if rest == "kmeans" else _greedy(rng, n)
    else:
        y, mode = _counts(rng, X)
        likelihood = gd.likelihoods.Poisson()
        kind, sparsity = rest.split("_")
        inference = _site_inference(rng, gd.inference.EP if kind == "ep" else gd.inference.QP)
        inducing = _kmeans(rng, n) if sparsity == "fitc" else None
    model = gd.Model(kernel=kernel, likelihood=likelihood, inducing=inducing, inference=inference)
    return model, y, {"targets": mode}


_FIRST_ISSUE_25_VARIANT = VARIANTS.index("dtc")


def _student_t(rng):
    """A Student-t likelihood with df from near-Cauchy (0.5) to near-Gaussian (1e3) and any scale."""
    return gd.likelihoods.StudentT(df=float(_log_uniform(rng, 0.5, 1e3)), scale=float(_log_uniform(rng, 1e-3, 1e2)))


def _heavy_tailed_targets(rng, X):
    """Regression targets with a few gross outliers (up to 1e3 times the scale) in half the cases."""
    y, mode = _regression_targets(rng, X)
    if rng.random() < 0.5:
        k = int(rng.integers(1, max(2, X.shape[0] // 10) + 1))
        rows = rng.choice(X.shape[0], size=k, replace=False)
        y[rows] += float(np.max(np.abs(y)) or 1.0) * _log_uniform(rng, 1.0, 1e3, k) * rng.choice([-1.0, 1.0], k)
        mode += f" with {k} outliers"
    return y, mode


def _variational(rng, cls, likelihood, minibatch, n):
    """SVGP or VGP with natural (or, where the likelihood allows, joint) q updates, or minibatch SVGP
    with a short stopping window so that its rule can fire within the case's steps."""
    if minibatch:
        return cls(batch_size=int(rng.integers(1, n + 1)), stop_window=int(rng.choice([10, 20])),
                   learning_rate=float(_log_uniform(rng, 1e-3, 1e-1)), natural_step=float(rng.uniform(0.05, 1.0)),
                   seed=int(rng.integers(1000)))
    joint = not likelihood.sign_symmetric and likelihood.n_latent == 1 and rng.random() < 0.25
    return cls(q_updates="joint" if joint else "natural")


def _issue_25_model(variant, rng, X, kernel, probit, logit):
    """The variants added for issue 25 (after the thirteen of issue 14): (model, y, notes)."""
    n, d = X.shape
    likelihood_name, inference_name, form = VARIANT_FORMS[variant]
    notes = {}
    if likelihood_name == "Gaussian":
        y, mode = _regression_targets(rng, X)
        likelihood = gd.likelihoods.Gaussian(variance=float(_log_uniform(rng, 1e-6, 1e1)))
    elif likelihood_name == "HeteroscedasticGaussian":
        y, mode = _regression_targets(rng, X)
        degree = int(rng.integers(0, 3))
        coefficients = np.zeros(1 + degree * d)
        coefficients[0] = math.log(_log_uniform(rng, 1e-6, 1e1))
        likelihood = gd.likelihoods.HeteroscedasticGaussian(degree=degree, coefficients=coefficients)
    elif likelihood_name == "Bernoulli":
        y, mode = _labels(rng, X)
        likelihood = logit if variant.startswith("logit") or inference_name == "PolyaGamma" else (
            probit if rng.random() < 0.5 else logit)
    elif likelihood_name == "Poisson":
        y, mode = _counts(rng, X)
        likelihood = gd.likelihoods.Poisson(link="log" if variant.startswith("poisson_log_") else "square")
    elif likelihood_name == "NegativeBinomial":
        y, mode = _counts(rng, X)
        likelihood = gd.likelihoods.NegativeBinomial(dispersion=float(_log_uniform(rng, 1e-3, 1e2)))
    elif likelihood_name == "Categorical":
        y, mode, k = _classes(rng, X)
        link = ("softmax" if inference_name == "Laplace" else "logistic_softmax" if inference_name == "PolyaGamma"
                else str(rng.choice(["softmax", "robustmax", "logistic_softmax"])))
        likelihood = gd.likelihoods.Categorical(k, link)
    else:
        y, mode = _heavy_tailed_targets(rng, X)
        likelihood = _student_t(rng)
    if form is None:
        form = "dense" if rng.random() < 0.5 else "sparse"
    inducing = None if form == "dense" else _kmeans(rng, n)
    if inference_name in ("EP", "QP"):
        inference = _site_inference(rng, getattr(gd.inference, inference_name))
    elif inference_name == "Laplace":
        inference = gd.inference.Laplace()
    elif inference_name == "PolyaGamma" and form != "minibatch":
        inference = gd.inference.PolyaGamma(acceleration=bool(rng.random() < 0.5))
    elif inference_name == "PolyaGamma":
        inference = gd.inference.PolyaGamma(minibatch=int(rng.integers(1, n + 1)), stop_window=int(rng.choice([10, 20])),
                                            learning_rate=float(_log_uniform(rng, 1e-3, 1e-1)),
                                            natural_step=float(rng.uniform(0.05, 1.0)), seed=int(rng.integers(1000)))
    elif inference_name in ("SVGP", "VGP"):
        inference = _variational(rng, getattr(gd.inference, inference_name), likelihood, form == "minibatch", n)
    else:
        inference = getattr(gd.inference, inference_name)()
    if form == "minibatch":
        # Enough steps for the stopping rule (two windows at least) in half of the optimised cases.
        notes["max_iter"] = int(rng.choice([int(rng.integers(2, 16)), int(rng.integers(20, 121))]))
    elif rng.random() < 0.3:
        # Room for L-BFGS-B to converge, so that the final-gradient property has converged fits to judge.
        notes["max_iter"] = int(rng.integers(30, 201))
    model = gd.Model(kernel=kernel, likelihood=likelihood, inducing=inducing, inference=inference)
    return model, y, {"targets": mode, **notes}


def make_case(variant, seed):
    """The random problem of one variant and seed.

    Parameters
    ----------
    variant : str
        A name in :data:`VARIANTS`.
    seed : int
        A non-negative seed; with the variant's index it seeds the case's generator.

    Returns
    -------
    Case
        The model, the data and the fit's options.
    """
    rng = np.random.default_rng([seed, VARIANTS.index(variant)])
    if variant in CASE_BUILDERS:
        return CASE_BUILDERS[variant](variant, seed, rng)
    n, d = int(rng.integers(10, 61)), int(rng.integers(1, 4))
    X, input_mode = _inputs(rng, n, d)
    model, y, notes = _model(variant, rng, X)
    # Held-out inputs inside and well beyond the training range, with targets of the same kind.
    span = float(np.max(np.abs(X))) or 1.0
    X_test = np.vstack([X[:3], span * rng.uniform(-3.0, 3.0, (7, d))])
    y_test = y[rng.integers(0, n, X_test.shape[0])]
    optimize = bool(rng.random() < OPTIMIZE_FRACTION)
    max_iter = int(rng.integers(2, 16))
    max_iter = notes.pop("max_iter", max_iter)
    offset = offset_test = None
    if variant in OFFSET_VARIANTS and rng.random() < 0.5:
        # Drawn after everything else, so that the other variants' cases are unchanged.
        offset, offset_test = _offsets(rng, n, X_test.shape[0])
        notes["offset"] = f"log exposure in [{offset.min():.3g}, {offset.max():.3g}]"
    return Case(variant=variant, seed=seed, model=model, X=X, y=y, X_test=X_test, y_test=y_test,
                optimize=optimize, max_iter=max_iter,
                notes={"N": n, "D": d, "inputs": input_mode, **notes}, offset=offset, offset_test=offset_test)


def _offsets(rng, n, n_test):
    """Per-row offsets of the latent input for n training and n_test held-out rows: the log of an
    exposure log-uniform in 1e-2..1e3; the held-out rows that repeat training rows (the first three)
    repeat their offsets."""
    offset = np.log(_log_uniform(rng, 1e-2, 1e3, n))
    offset_test = np.concatenate([offset[:3], np.log(_log_uniform(rng, 1e-2, 1e3, n_test - 3))])
    return offset, offset_test


def _nonfinite(name, value):
    """A failure Outcome when ``value`` holds NaN or inf, else None."""
    a = np.asarray(value, dtype=float)
    if np.all(np.isfinite(a)):
        return None
    return Outcome(f"failure: non-finite {name}", f"{name} = {a.ravel()[~np.isfinite(a.ravel())][:3]}")


def _prior_bounds_variance(model):
    """Whether f_var <= k(x, x) is a property of the model's posterior.

    It is where every site's precision is non-negative: always for Gaussian, Bernoulli, Poisson with
    the log link and the negative binomial (log-concave in f)
    and the Pólya-Gamma bound's conjugate sites, for EP and QP (which keep site precisions
    non-negative, as GPML's infEP) and for VGP (q's precision K^-1 + diag(lambda^2)).  It is not
    for a likelihood that is not log-concave on the whole real line (Student-t; Poisson with the
    square link, whose 2 y log|f| is -inf at f = 0: its expected log density is convex in q's mean
    near 0; the robust max, a step in f) under Laplace (negative W at outliers, R&W section 3.4) or SVGP (the optimal q's
    precision is K_uu^-1 plus the expected negative Hessian, which can then be negative), nor for
    SVGP with ``q_updates="joint"``, whose q_sqrt is free and is stopped by L-BFGS-B anywhere.
    A likelihood per output (``PerOutput``) is judged by its parts: one part that is not
    log-concave is enough.
    """
    inference = model.inference
    if isinstance(inference, gd.inference.SVGP) and inference.q_updates == "joint":
        return False
    parts = getattr(model.likelihood, "likelihoods", (model.likelihood,))
    not_log_concave = any(isinstance(lik, gd.likelihoods.StudentT)
                          or isinstance(lik, gd.likelihoods.Poisson) and lik.link == "square"
                          or isinstance(lik, gd.likelihoods.Categorical) and lik.link == "robustmax" for lik in parts)
    # SVGP's logistic-softmax rule: its Jensen term -log sum_j E[sigma(f_j)] can rise with a
    # variance, so a site's precision can be negative (PolyaGamma's augmented sites are not).
    jensen_rises = any(isinstance(lik, gd.likelihoods.Categorical) and lik.link == "logistic_softmax" for lik in parts)
    return not ((not_log_concave or jensen_rises) and isinstance(inference, (gd.inference.Laplace, gd.inference.SVGP)))


def _undefined_moment(post, name, rows):
    """Where a non-finite predictive moment is the documented answer: the Student-t's y_mean is NaN
    for df <= 1 (no mean) and its y_var inf for df <= 2 (StudentT.predictive).  A mask of the
    (long) ``rows``, or None: a likelihood per output's rows are judged by their parts (a Student-t
    part's rows, at its own df)."""
    lik = post.model.likelihood
    limit = {"y_mean": 1.0, "y_var": 2.0}.get(name)
    if limit is None:
        return None
    if isinstance(lik, gd.likelihoods.StudentT):
        return np.full(rows.shape[0], float(post.values["likelihood.df"]) <= limit)
    parts = getattr(lik, "likelihoods", None)
    if parts is None:
        return None
    each = np.array([isinstance(part, gd.likelihoods.StudentT) and float(post.values[f"likelihood.{p}.df"]) <= limit
                     for p, part in enumerate(parts)])
    return each[np.asarray(rows)[:, -1].astype(np.intp)]


# log of the largest float64: a log-normal moment whose log exceeds this less a nat of slack (the
# rounding of the terms that make it up) is inf in float64.
_LOG_FLOAT_MAX = math.log(np.finfo(float).max)


def _log_link_counts(lik):
    """Whether a likelihood of one output is a log-link count likelihood."""
    return isinstance(lik, gd.likelihoods.NegativeBinomial) or (
        isinstance(lik, gd.likelihoods.Poisson) and lik.link == "log")


def _overflowing_moment(post, name, pred, offset, X):
    """Where an inf predictive moment is the float64 rounding of its exact value: a log-link count
    likelihood's (Poisson(link="log"), NegativeBinomial) y_mean = E[exp g] = exp(m + v/2) and
    y_var = E[exp g] + (1 + dispersion) E[exp 2g] - E[exp g]^2, g = f + offset ~ N(m, v), exceed
    float64's range when v is large (a held-out point far from the data under a kernel variance of
    ~1e3); so does the heteroscedastic Gaussian's y_var = f_var + exp(features(x) @ coefficients)
    where the fitted log variance, a polynomial, reaches ~709 at a far held-out point.  A mask of
    the rows where the exact moment is above ~1.8e308 / e, or None; NaN is never allowed.  A
    likelihood per output's rows are judged by their parts (a log-link count part's rows only)."""
    lik = post.model.likelihood
    if isinstance(lik, gd.likelihoods.HeteroscedasticGaussian) and name == "y_var" and not lik.known:
        coefficients = np.asarray(post.values["likelihood.coefficients"], dtype=float)
        return lik.features(X) @ coefficients > _LOG_FLOAT_MAX - 1.0
    if name not in ("y_mean", "y_var"):
        return None
    m = pred["f_mean"].values + (0.0 if offset is None else offset)
    rows = query(X, post.input_dims, post.output_count).X
    log_link = _per_output(lik, rows, _log_link_counts)
    if log_link is None:
        if not _log_link_counts(lik):
            return None
        log_link = True
        dispersion = float(post.values.get("likelihood.dispersion", 0.0))
    else:
        log_link = log_link.reshape(m.shape)
        each = np.array([float(post.values.get(f"likelihood.{p}.dispersion", 0.0))
                         for p in range(len(lik.likelihoods))])
        dispersion = each[rows[:, -1].astype(np.intp)].reshape(m.shape)
    v = pred["f_var"].values
    log_mean = m + 0.5 * v
    if name == "y_mean":
        return log_link & (log_mean > _LOG_FLOAT_MAX - 1.0)
    # (1 + a) E[exp 2g] - E[exp g]^2 = exp(2m + v) ((1 + a) e^v - 1) = exp(2m + 2v) (1 + a - e^-v)
    with np.errstate(divide="ignore"):
        log_spread = 2.0 * m + 2.0 * v + np.log(1.0 + dispersion - np.exp(-v))
    return log_link & (np.logaddexp(log_mean, log_spread) > _LOG_FLOAT_MAX - 1.0)


def long_rows(model, X, y):
    """The training rows (X, y) as a model's methods see them: a multi-output model's in the long
    layout (``gpdsl.multioutput.long_data``: X (n, D+1) with the output index last, y (n,), an
    isotopic Y's NaN entries left out), a single-output model's as given.

    Parameters
    ----------
    model : gd.Model
    X, y : ndarray
        In any layout the model's fit takes.

    Returns
    -------
    X, y : ndarray
    """
    P = output_count(model.kernel)
    if P is None:
        return X, y
    X_long, y_long, _ = long_data(X, y, P, kernel=model.kernel)
    return X_long, y_long


def _per_output(likelihood, rows, test):
    """A mask of the long ``rows`` (n, D+1) of a likelihood per output (``PerOutput``): whether
    ``test(part)`` holds for each row's output's part; None for a likelihood whose every row is alike."""
    parts = getattr(likelihood, "likelihoods", None)
    if parts is None:
        return None
    return np.array([bool(test(part)) for part in parts])[np.asarray(rows)[:, -1].astype(np.intp)]


def _summary_absent(post, rows, name):
    """Where a likelihood per output documents NaN for the predictive summary ``name``
    (``PerOutput.predictive``: a summary only some parts give is NaN at the others' rows): the
    rows whose part gives no ``name``; None for another likelihood."""
    if name in ("f_mean", "f_var"):
        return None
    return _per_output(post.model.likelihood, rows,
                       lambda part: name not in part.bind().predictive(np.zeros(1), np.ones(1)))


def _check_predictions(post, X, y, where, offset=None):
    """The properties of predict() and log_predictive() at inputs X (targets y, per-row offset of the
    latent input ``offset``); None if they hold.  A multi-output posterior's results at X (n, D)
    are (n, P), over the long rows of its query (point-major), at X (n, D+1) one a row; an isotopic
    y's NaN entries (missing) have a NaN log_predictive, and a likelihood per output's summaries
    are NaN at the rows of the parts that do not give them (:func:`_summary_absent`)."""
    rows = query(X, post.input_dims, post.output_count).X       # X itself for a single-output posterior
    pred = post.predict(X, offset=offset)
    for name in pred.data_vars:
        values = pred[name].values
        undefined = _undefined_moment(post, name, rows)
        if undefined is not None:
            values = np.where(undefined.reshape(values.shape) & ~np.isfinite(values), 0.0, values)
        overflow = _overflowing_moment(post, name, pred, offset, X)
        if overflow is not None:
            values = np.where(overflow & np.isposinf(values), 0.0, values)
        absent = _summary_absent(post, rows, name)
        if absent is not None:
            values = np.where(absent.reshape(values.shape) & np.isnan(values), 0.0, values)
        bad = _nonfinite(f"{name} ({where})", values)
        if bad:
            return bad
    # K latent functions: one column a class, each under the same prior variance; P outputs: one
    # long row a (point, output) pair.
    f_var = pred["f_var"].values.reshape(rows.shape[0], -1)
    prior = np.broadcast_to(bind(post.model.kernel, post.values, "kernel").diag(rows)[:, None], f_var.shape)
    if np.any(f_var < 0):
        return Outcome("failure: f_var < 0", f"{where}: min f_var {f_var.min():.3g}")
    excess = f_var - prior * (1.0 + PRIOR_VARIANCE_RTOL)
    if _prior_bounds_variance(post.model) and np.any(excess > 0):
        i = np.unravel_index(int(np.argmax(excess / prior)), f_var.shape)
        return Outcome("failure: f_var > prior variance",
                       f"{where}: f_var {f_var[i]:.17g} > k(x, x) {prior[i]:.17g} (ratio {f_var[i] / prior[i]:.6g})")
    if "p" in pred:
        p = pred["p"].values
        if np.any((p < 0) | (p > 1)):
            return Outcome("failure: p outside [0, 1]", f"{where}: p in [{p.min():.17g}, {p.max():.17g}]")
        # Class probabilities sum to 1 (robust-max's 100-node quadrature to within 5e-3: 1.3e-3 seen).
        if post.n_latent > 1 and np.any(np.abs(p.sum(axis=1) - 1.0) > 5e-3):
            return Outcome("failure: class probabilities do not sum to 1",
                           f"{where}: sums in [{p.sum(axis=1).min():.17g}, {p.sum(axis=1).max():.17g}]")
    log_predictive = post.log_predictive(X, y, offset=offset)
    missing = np.isnan(np.asarray(y, dtype=float))
    bad = _nonfinite(f"log_predictive ({where})", np.where(missing, 0.0, log_predictive))
    discrete = _per_output(post.model.likelihood, rows, lambda part: target_kind(part) in DISCRETE_TARGETS)
    discrete = (target_kind(post.model.likelihood) in DISCRETE_TARGETS if discrete is None
                else discrete.reshape(log_predictive.shape))
    above = discrete & ~missing & (log_predictive > LOG_PMF_SLACK)
    if bad is None and np.any(above):
        i = np.unravel_index(int(np.argmax(np.where(above, log_predictive, -np.inf))), log_predictive.shape)
        bad = Outcome("failure: log_predictive > 0 for discrete targets",
                      f"{where}: log p(y_{i} = {np.asarray(y)[i]:.6g}) = {log_predictive[i]:.17g}")
    return bad


def check_case(case):
    """Fit a case and check the properties listed in the module docstring.

    The fit's warnings are recorded, not raised, so that the ConvergenceWarning rule can be checked
    and an unrelated warning (under ``-W error``) cannot turn into an error.  Exceptions from
    predict or log_predictive are failures whatever their type: the accepted errors are refusals
    to fit, and a posterior that exists must predict.

    Parameters
    ----------
    case : Case
        From :func:`make_case`.

    Returns
    -------
    Outcome
        "passed", "accepted: <error>" or "failure: <property>" with what was seen.
    """
    for check in MODEL_PROPERTIES:
        bad = check(case)
        if bad:
            return bad
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            post = case.model.fit(case.X, case.y, optimize=case.optimize, max_iter=case.max_iter, offset=case.offset)
        except Exception as err:  # noqa: BLE001 -- every exception is classified below
            name = _accepted_fit_error(err)
            if name is not None:
                return Outcome(f"accepted: {name}", str(err)[:200])
            return Outcome(f"failure: fit raised {type(err).__name__}", str(err)[:300])
    for check in POSTERIOR_PROPERTIES + case.properties:
        bad = check(case, post, caught)
        if bad:
            return bad
    return Outcome("passed")


def _check_model_round_trips(case):
    """The case's model equals itself read back from ``to_dict`` and from ``to_toml``'s text."""
    model = case.model
    for writer, read in (("to_dict", lambda: gd.Model.from_dict(model.to_dict())),
                         ("to_toml", lambda: gd.Model.from_toml(model.to_toml()))):
        try:
            back = read()
        except Exception as err:  # noqa: BLE001 -- a model gpdsl built must read back
            return Outcome(f"failure: {writer} round trip raised {type(err).__name__}", str(err)[:300])
        if back != model:
            return Outcome(f"failure: model does not round-trip through {writer}", f"{back!r} != {model!r}"[:600])
    return None


def _check_finite_fit(case, post, caught):
    """The log evidence and every fitted hyperparameter are finite."""
    bad = _nonfinite("log_evidence", post.log_evidence)
    for name, value in post.values.items():
        bad = bad or _nonfinite(f"hyperparameter {name}", value)
    return bad


def _check_evidence_bound(case, post, caught):
    """No marginal likelihood exceeds sum_n max_f log p(y_n | f); the fit refuses an evidence 0.1
    nats per row above it (gpdsl.fitting.EVIDENCE_BOUND_SLACK_PER_POINT), which only lost
    precision gives."""
    X, y = long_rows(post.model, case.X, case.y)
    rows = bind(post.model.likelihood, post.values, "likelihood").for_rows(X)
    bound = rows.log_density_bound(rows.prepare_targets(y))
    if bound is not None and post.log_evidence > bound + 0.1 * y.size + 1.0:
        return Outcome("failure: log evidence above the likelihood's bound",
                       f"log evidence {post.log_evidence:.6g} > sum_n max_f log p(y_n | f) = {bound:.6g}")
    return None


def _check_predictions_everywhere(case, post, caught):
    """:func:`_check_predictions` at the held-out and the training inputs."""
    try:
        return (_check_predictions(post, case.X_test, case.y_test, "held-out", case.offset_test)
                or _check_predictions(post, case.X, case.y, "training", case.offset))
    except Exception as err:  # noqa: BLE001 -- any exception from a fitted posterior is a failure
        return Outcome(f"failure: predict raised {type(err).__name__}", str(err)[:300])


def _check_convergence_warning(case, post, caught):
    """A posterior with converged=False came with a gd.ConvergenceWarning."""
    if not post.converged and not any(issubclass(w.category, gd.ConvergenceWarning) for w in caught):
        return Outcome("failure: converged=False without ConvergenceWarning",
                       f"warnings: {[str(w.message)[:80] for w in caught]}")
    return None


# A converged fit's final gradient, recomputed by a fresh evaluation, may exceed the fit's
# tolerance by this much relative and absolute: the rounding of two evaluations of one objective
# (the optimiser's and this one) at the same point.
GRADIENT_RTOL, GRADIENT_ATOL = 1.01, 1e-8
# ... and by this factor for methods whose evaluation here is not the optimiser's: EP/QP sites and
# Pólya-Gamma c are warm-started from the previous evaluation during the fit and converge only to
# their tolerance (1e-6 on a site, a c_n), SVGP/VGP's natural-gradient q is warm-started and stopped
# by a gain test (q_tol) within the fit, polished only for the posterior; here each starts from the
# posterior's local state (``post.sites``) and stops by its own test, so the gradients differ by what
# those tolerances allow (through the sites' effect on the gradient), not by rounding.  A factor of 2 still fails a fit whose
# recorded gradient was wrong or that claimed convergence far from a stationary point.
LOCAL_ITERATION_GRADIENT_FACTOR = 2.0


def final_gradient(model, values, Z, X, y, warm=None, offset=None):
    """max |d (objective + log prior) / d u| at ``values`` by a fresh evaluation (from the local state
    ``warm``, with the fit's per-row ``offset``), u the optimiser's free vector (log of positive
    entries, Z per input column sd); tests/test_diagnostics.py uses it too.  X and y in any layout
    the model's fit takes (:func:`long_rows`)."""
    X, y = long_rows(model, X, y)
    table = model.parameter_table(X, Z)
    full = {**values, **({"inducing.Z": Z} if "inducing.Z" in table.names() else {})}
    ev = model.evaluate(values, X, model.likelihood.for_rows(X).prepare_targets(y), Z, warm=warm, offset=offset)
    grads = dict(ev.grads)
    if ev.dZ is not None:
        grads["inducing.Z"] = ev.dZ
    _, prior_grads = table.log_prior(full)
    for name, g in prior_grads.items():
        grads[name] = grads[name] + g
    return largest_gradient(table, -table.chain(full, grads), X)


def full_batch_model(model):
    """The model with its minibatch method's full-batch declaration (``SVGP(batch_size=None)``,
    ``PolyaGamma(minibatch=None)``: the objective the minibatch steps estimate, evaluated on all
    N rows), or None for a model that is not fitted by minibatch steps."""
    inference = model.inference
    fields = {f.name for f in dataclasses.fields(inference)}
    for name in MINIBATCH_FIELDS:
        if name in fields and getattr(inference, name) is not None:
            return dataclasses.replace(model, inference=dataclasses.replace(inference, **{name: None}))
    return None


def _evaluated_model(case, post):
    """(model, warm, Z, grad_tol) of a fresh evaluation at the posterior: its own model from its
    local state, or for a minibatch fit the full-batch declaration under the full-batch fits'
    tolerance, from the fit's q where that method optimises a q (SVGP), afresh otherwise (the
    Pólya-Gamma c is not a minibatch run's state).  A dense method's state may hold X as its Z (for
    prediction): evaluate passes Z only to a sparse model, else a dense method would be evaluated
    as its FITC form with Z = X."""
    Z = fitted_inducing(post) if post.model.inducing is not None else None
    full = full_batch_model(post.model)
    if full is None:
        local = isinstance(post.model.inference, _LOCAL_ITERATION_METHODS)
        return post.model, post.sites if local else None, Z, post.diagnostics.grad_tol
    takes_q = "q_updates" in {f.name for f in dataclasses.fields(full.inference)}
    return full, post.sites if takes_q else None, Z, gradient_tolerance(case.X.shape[0])


def fitted_inducing(post):
    """The inducing inputs as the fit declared and moved them: ``post.state.Z``, except a
    multi-output model's Z shared by its P outputs, whose state holds the long expansion (M P rows,
    output-major: ``gpdsl.multioutput.expand_inducing``) and whose parameter and gradient are
    those of the (M, D) shared rows (the sum over the P copies).  A long Z that happens to equal
    an expansion evaluates alike either way."""
    Z, P = post.state.Z, post.output_count
    if P is None or Z.shape[0] % P:
        return Z
    shared = Z[: Z.shape[0] // P, :-1]
    return shared if np.array_equal(expand_inducing(shared, P), Z) else Z


def _check_final_gradient(case, post, caught):
    """A fit with converged=True, stopped by a gradient-based rule (the stochastic rule included:
    issue 45), has a small final gradient (gpdsl.diagnostics.converged_rule), recomputed here
    independently of the fit's record (of a minibatch fit: the full-batch objective's)."""
    d = post.diagnostics
    # The stochastic rule's stop is judged whether or not gpdsl counts it among the gradient-free
    # stops: issue 45 asks that it be confirmed by the full objective's gradient.
    if not post.converged or (d.stop_reason in GRADIENT_FREE_STOPS and d.stop_reason != "stochastic_rule"):
        return None
    local = isinstance(post.model.inference, _LOCAL_ITERATION_METHODS)
    slack = GRADIENT_RTOL * (LOCAL_ITERATION_GRADIENT_FACTOR if local else 1.0)
    try:
        # Methods with a local iteration start it from the posterior's local state, as the fit's
        # evaluations start from the previous one's: a non-log-concave likelihood (Student-t) can
        # give q or the sites several fixed points, and a start from the prior may reach another.
        model, warm, Z, tolerance = _evaluated_model(case, post)
        grad, name = final_gradient(model, post.values, Z, case.X, case.y, warm=warm, offset=case.offset)
    except Exception as err:  # noqa: BLE001 -- a converged posterior's objective must evaluate
        return Outcome(f"failure: gradient recomputation raised {type(err).__name__}", str(err)[:300])
    if not grad <= slack * tolerance + GRADIENT_ATOL:
        return Outcome("failure: converged=True with a large final gradient",
                       f"max|grad| recomputed {grad:.6g} ({name}) > {slack:g} x tol {tolerance:.6g}; "
                       f"recorded {d.grad_norm:.6g} ({d.grad_name}), stop {d.stop_reason}")
    return None


def q_gap_bound(n_q, tolerance):
    """How far below the bound at q's optimum a bound whose q-gradient entries are all at most
    ``tolerance`` can lie: in q's whitened coordinates (q_mu, and the Cholesky factor q_sqrt) the
    negative KL term's Hessian is at most minus the identity (from m^T m / 2 and tr(R R^T) / 2),
    and for a log-concave likelihood the expected log density is concave in them too (Challis &
    Barber 2013), so the bound is 1-strongly concave and lies at most |grad|^2 / 2 <=
    n_q tolerance^2 / 2 below its maximum (n_q: q's entries).  For another likelihood the check is
    local: q is optimised from the fit's own q.

    Parameters
    ----------
    n_q : int
    tolerance : float

    Returns
    -------
    float
    """
    return 0.5 * n_q * tolerance ** 2


def _check_stochastic_q(case, post, caught):
    """(issue 45) A converged=True stop of the stochastic rule leaves q at its optimum for the
    fitted hyperparameters: the full-batch bound with q optimised from the fit's q (afresh for the
    Pólya-Gamma collapsed bound) exceeds the posterior's by at most :func:`q_gap_bound` at the
    full-batch fits' gradient tolerance (times the local-iteration slack), plus its rounding."""
    d = post.diagnostics
    if not post.converged or d.stop_reason != "stochastic_rule":
        return None
    model, warm, Z, tolerance = _evaluated_model(case, post)
    X, y = long_rows(model, case.X, case.y)
    try:
        best = model.evaluate(post.values, X, model.likelihood.for_rows(X).prepare_targets(y), Z, need_grad=False,
                              warm=warm, offset=case.offset).log_evidence
    except Exception as err:  # noqa: BLE001 -- a converged posterior's objective must evaluate
        return Outcome(f"failure: full-batch evaluation raised {type(err).__name__}", str(err)[:300])
    n_q = sum(np.size(v) for v in post.sites.q.values())
    allowed = q_gap_bound(n_q, GRADIENT_RTOL * LOCAL_ITERATION_GRADIENT_FACTOR * tolerance) + 1e-9 * abs(best)
    if not best - post.log_evidence <= allowed:
        return Outcome("failure: converged=True with q short of its optimum",
                       f"full-batch bound {best:.10g} at q's optimum > the posterior's {post.log_evidence:.10g} "
                       f"by {best - post.log_evidence:.6g} nats (allowed {allowed:.3g}); stop {d.stop_reason}")
    return None


# The fields that make a method take minibatch steps (None: full batch).
MINIBATCH_FIELDS = ("batch_size", "minibatch")
# Target kinds whose likelihood is a probability mass function: their log_predictive is at most 0.
DISCRETE_TARGETS = ("binary", "categorical", "count")
# ... up to its rounding, which matters only where log p is near 0 (y = 0 at a tiny rate, p near 1),
# where its terms are small: a quadrature of at most a few hundred nodes of p <= 1 with weights
# summing to 1 rounds by at most ~500 eps ~ 1e-13.
LOG_PMF_SLACK = 1e-12

# The properties of the module docstring, in the order they are checked.
MODEL_PROPERTIES = (_check_model_round_trips,)
POSTERIOR_PROPERTIES = (_check_finite_fit, _check_evidence_bound, _check_predictions_everywhere,
                        _check_convergence_warning, _check_final_gradient, _check_stochastic_q)


def schedule(variants, cases, first_seed=0):
    """The ``(variant, seed)`` pairs of a run of ``cases`` cases, round-robin over ``variants``:
    round r checks seed ``first_seed + r`` of every variant in turn, so that every prefix of whole
    rounds (a run stopped by a time budget, or killed) has reached every variant as often.

    Parameters
    ----------
    variants : sequence of str
        Names from :data:`VARIANTS`.
    cases : int
        The number of cases, at least ``len(variants)``.
    first_seed : int, default 0

    Returns
    -------
    list of (str, int)

    Raises
    ------
    ValueError
        If ``cases`` is smaller than the number of variants (a run that cannot reach them all).
    """
    k = len(variants)
    if cases < k:
        raise ValueError(f"schedule: cases = {cases} cannot reach each of the {k} variants; give at least {k}")
    return [(variants[i % k], first_seed + i // k) for i in range(cases)]


def unreached(variants, checked):
    """The variants of ``variants`` that no checked case was of, in order.

    Parameters
    ----------
    variants : sequence of str
    checked : iterable of str
        The variant of each case checked.

    Returns
    -------
    list of str
    """
    seen = set(checked)
    return [v for v in variants if v not in seen]


def describe(case):
    """One line naming a case.

    Parameters
    ----------
    case : Case

    Returns
    -------
    str
        The variant, seed, model parts, fit options and data notes.
    """
    m = case.model
    inducing = "dense" if m.inducing is None else repr(m.inducing)
    return (f"{case.variant} seed={case.seed}: {m.kernel.describe()} {m.likelihood.describe()} "
            f"{type(m.inference).__name__} {inducing} optimize={case.optimize} max_iter={case.max_iter} {case.notes}"
            + ("" if case.offset is None else " with offset"))


def reproduction(case):
    """A short script that rebuilds and fits a case.

    Parameters
    ----------
    case : Case

    Returns
    -------
    str
        Python source to run from the repository root.
    """
    return ("import sys; sys.path.insert(0, 'tests')\n"
            "from fuzz_cases import make_case, check_case\n"
            f"case = make_case({case.variant!r}, {case.seed})\n"
            "print(check_case(case))\n"
            "post = case.model.fit(case.X, case.y, optimize=case.optimize, max_iter=case.max_iter, offset=case.offset)")


# The variants drawn by other modules register themselves here on import (register_variants).
import fuzz_multioutput  # noqa: E402,F401 -- issue 48's multi-output variants
