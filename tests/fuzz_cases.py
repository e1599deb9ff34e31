"""Seeded random small problems for every method variant, and the properties every fit must keep.

Shared by the CI test (``tests/test_fuzz.py``) and the long run (``benchmarks/bench_fuzz.py``),
so that both draw the same cases from the same ``(variant, seed)`` and judge them by the same rules.

A case is drawn by :func:`make_case` from ``numpy.random.default_rng([seed, variant index])``:
N in 10..60, D in 1..3, inputs with duplicated rows (sometimes a single distinct input), length-scales
log-uniform in 1e-2..1e3 (isotropic or ARD), kernel variances log-uniform in 1e-3..1e3, and per
likelihood: regression targets on scales 1e-2..1e3 with noise variances 1e-6..1e1; labels that are
random, drawn from a smooth latent, separable by a hyperplane or of one class; counts that are small, all zero, or up to ~1e6.
Most cases fit with ``optimize=False``; about three in ten optimise with ``max_iter`` 2..15.
Sparse variants sometimes optimise Z (``gd.inducing.Optimized``), EP/QP sweep sequentially or in
parallel, and QP sometimes runs Algorithm 1 (``hyperparameters="qp"``, at most 5 outer rounds).

:func:`check_case` fits the case and returns an :class:`Outcome`.  The properties are

* the fit raises nothing but an *accepted* error (:func:`_accepted_fit_error` lists them);
* the log evidence and every fitted hyperparameter are finite;
* ``predict`` at held-out and training inputs returns only finite values, with
  0 <= f_var <= k(x, x) (1 + 1e-9) at the fitted hyperparameters, and 0 <= p <= 1;
* ``log_predictive`` at held-out and training inputs is finite;
* a posterior with ``converged=False`` came with a ``gd.ConvergenceWarning``.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

import gpdsl as gd
from gpdsl.inducing import NoCandidateError

# The method variants of issue 14: (likelihood, inference, inducing) families.  The index of a
# name in this tuple is part of the case's seed, so adding a variant at the end keeps the others.
VARIANTS = ("exact", "vfe", "fitc", "ep_dense", "ep_fitc", "qp_dense", "qp_fitc", "pg_kmeans", "pg_greedy",
            "poisson_ep_dense", "poisson_ep_fitc", "poisson_qp_dense", "poisson_qp_fitc")

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
    """A stationary kernel with extreme-range hyperparameters (isotropic or ARD)."""
    cls = [gd.kernels.SquaredExponential, gd.kernels.Matern32, gd.kernels.Matern52][int(rng.integers(3))]
    lengthscale = _log_uniform(rng, 1e-2, 1e3, d) if rng.random() < 0.5 else float(_log_uniform(rng, 1e-2, 1e3))
    return cls(lengthscale=lengthscale, variance=float(_log_uniform(rng, 1e-3, 1e3)))


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
    n, d = int(rng.integers(10, 61)), int(rng.integers(1, 4))
    X, input_mode = _inputs(rng, n, d)
    model, y, notes = _model(variant, rng, X)
    # Held-out inputs inside and well beyond the training range, with targets of the same kind.
    span = float(np.max(np.abs(X))) or 1.0
    X_test = np.vstack([X[:3], span * rng.uniform(-3.0, 3.0, (7, d))])
    y_test = y[rng.integers(0, n, X_test.shape[0])]
    optimize = bool(rng.random() < OPTIMIZE_FRACTION)
    return Case(variant=variant, seed=seed, model=model, X=X, y=y, X_test=X_test, y_test=y_test,
                optimize=optimize, max_iter=int(rng.integers(2, 16)),
                notes={"N": n, "D": d, "inputs": input_mode, **notes})


def _nonfinite(name, value):
    """A failure Outcome when ``value`` holds NaN or inf, else None."""
    a = np.asarray(value, dtype=float)
    if np.all(np.isfinite(a)):
        return None
    return Outcome(f"failure: non-finite {name}", f"{name} = {a.ravel()[~np.isfinite(a.ravel())][:3]}")


def _check_predictions(post, X, y, where):
    """The properties of predict() and log_predictive() at inputs X (targets y); None if they hold."""
    pred = post.predict(X)
    for name in pred.data_vars:
        bad = _nonfinite(f"{name} ({where})", pred[name].values)
        if bad:
            return bad
    f_var = pred["f_var"].values
    prior = post.model.kernel.diag(post.values, "kernel", X)
    if np.any(f_var < 0):
        return Outcome("failure: f_var < 0", f"{where}: min f_var {f_var.min():.3g}")
    excess = f_var - prior * (1.0 + PRIOR_VARIANCE_RTOL)
    if np.any(excess > 0):
        i = int(np.argmax(excess / prior))
        return Outcome("failure: f_var > prior variance",
                       f"{where}: f_var {f_var[i]:.17g} > k(x, x) {prior[i]:.17g} (ratio {f_var[i] / prior[i]:.6g})")
    if "p" in pred:
        p = pred["p"].values
        if np.any((p < 0) | (p > 1)):
            return Outcome("failure: p outside [0, 1]", f"{where}: p in [{p.min():.17g}, {p.max():.17g}]")
    return _nonfinite(f"log_predictive ({where})", post.log_predictive(X, y))


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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            post = case.model.fit(case.X, case.y, optimize=case.optimize, max_iter=case.max_iter)
        except Exception as err:  # noqa: BLE001 -- every exception is classified below
            name = _accepted_fit_error(err)
            if name is not None:
                return Outcome(f"accepted: {name}", str(err)[:200])
            return Outcome(f"failure: fit raised {type(err).__name__}", str(err)[:300])
    bad = _nonfinite("log_evidence", post.log_evidence)
    for name, value in post.values.items():
        bad = bad or _nonfinite(f"hyperparameter {name}", value)
    if bad:
        return bad
    try:
        bad = (_check_predictions(post, case.X_test, case.y_test, "held-out")
               or _check_predictions(post, case.X, case.y, "training"))
    except Exception as err:  # noqa: BLE001 -- any exception from a fitted posterior is a failure
        return Outcome(f"failure: predict raised {type(err).__name__}", str(err)[:300])
    if bad:
        return bad
    if not post.converged and not any(issubclass(w.category, gd.ConvergenceWarning) for w in caught):
        return Outcome("failure: converged=False without ConvergenceWarning",
                       f"warnings: {[str(w.message)[:80] for w in caught]}")
    return Outcome("passed")


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
            f"{type(m.inference).__name__} {inducing} optimize={case.optimize} max_iter={case.max_iter} {case.notes}")


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
            "post = case.model.fit(case.X, case.y, optimize=case.optimize, max_iter=case.max_iter)")
