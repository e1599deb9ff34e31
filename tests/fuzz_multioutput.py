"""Seeded random multi-output problems (issue 48), registered as variants of ``tests/fuzz_cases.py``.

Each variant fits a coregionalised kernel (:mod:`gpdsl.kernels.coregion`) to the outputs of one
accepted (likelihood, method) pair, and its cases are judged by ``fuzz_cases.check_case``'s
properties (generalised there to the long layout: evidence bound, predictions at every (point,
output) pair, model files, the ConvergenceWarning rule, the final gradient, the stochastic rule's
stops) and by two more of a multi-output posterior's own (:data:`PROPERTIES`):

* ``predict_f_full_cov`` at the held-out inputs is finite, symmetric and positive semi-definite
  up to rounding (eigenvalues >= -:data:`PSD_RTOL` times the largest prior variance), its mean
  is ``predict``'s f_mean and its diagonal ``predict``'s f_var (within :data:`DIAGONAL_RTOL` of
  the prior variance: two computations of k - b^T C b);
* the posterior saved (``save``) and read back (``gd.load``) predicts exactly as before
  (``predict`` and ``predict_f_full_cov`` at the held-out inputs, bit for bit);
* ``constant_model`` is set, with its ConvergenceWarning, exactly where a Gaussian fit's
  objective is within ``gpdsl.fit_warnings.CONSTANT_MODEL_TOL`` of the constant model's, each output at
  its best noise (f = 0, s_p^2 = mean(y_p^2)), computed here by the dense density.

A case is drawn from ``numpy.random.default_rng([seed, variant index])`` (``fuzz_cases.make_case``):
P = 2..4 outputs, D = 1..2 input columns with the duplicated and single-point inputs of
``fuzz_cases._inputs``; an ICM (rank 1..P) of one of ``fuzz_cases._kernel``'s random base kernels
or an LMC of two or three, W and kappa at their default start or random (W entries N(0, s^2) with
s log-uniform in 1e-2..1e1, kappa log-uniform in 1e-4..1e1); per output the targets of its
family from ``fuzz_cases`` (regression targets on scales 1e-2..1e3, labels of every mode, counts
from all-zero to ~1e6).  Half the cases are isotopic, X (N, D) and Y (N, P) with up to half the
entries NaN (missing; every output keeps one), half heterotopic, X (n, D+1) with the output index
last and y (n,), rows of each output at inputs of its own, in random order.  The held-out data
are in the training layout (isotopic held-out Y with NaN entries too).

The likelihoods: ``OutputGaussian`` (one noise variance an output, log-uniform in 1e-6..1e1) and
``PerOutput`` of Gaussians for the exact and collapsed methods (VFE, DTC, FITC: inducing inputs
K-means Z shared by the outputs, or greedy selection's long rows), ``PerOutput`` of mixed families
(Gaussian, Bernoulli with either link and a bias, Poisson: every family in some output where
P >= 3) for Laplace (dense and FITC; Poisson's log link: Laplace needs log-density derivatives),
VGP and SVGP (full batch and minibatch), and for EP and QP (``mo_ep``, ``mo_qp``: the site models
of rows (part, target, offset), :mod:`gpdsl._jit.mixed_sites`), where each Gaussian output is
Student-t (heavy-tailed targets) and each count output negative binomial with probability
:data:`HEAVY_FRACTION`, a Poisson output has either link; EP and QP are dense in half the cases,
else sparse (inducing inputs as above) with FITC's or DTC's prior (``approximation``), their sweep
schedule and QP's Algorithm 1 drawn as for ``fuzz_cases``' single-output EP/QP variants, and in
half the cases the model has a mean per output (``gd.means.PerOutput`` of constants N(0, 3^2) or
zero), which the site code sees as each row's latent offset.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile

import numpy as np
from scipy import stats

import fuzz_cases
import gpdsl as gd
from fuzz_cases import (Case, Outcome, _counts, _greedy, _heavy_tailed_targets, _inputs, _kernel, _kmeans, _labels,
                        _log_uniform, _nonfinite, _regression_targets, _site_inference, _student_t, _variational,
                        long_rows, OPTIMIZE_FRACTION)
from gpdsl.fit_warnings import CONSTANT_MODEL_TOL

# What each variant fits, as fuzz_cases.VARIANT_FORMS: (likelihood class, inference class, form).
# Registered after every single-output variant; appending keeps every earlier variant's seeds.
FORMS = {
    "mo_exact": ("OutputGaussian", "Exact", "dense"), "mo_vfe": ("OutputGaussian", "VFE", "sparse"),
    "mo_dtc": ("OutputGaussian", "DTC", "sparse"), "mo_fitc": ("OutputGaussian", "FITC", "sparse"),
    "mo_gaussians_exact": ("PerOutput", "Exact", "dense"), "mo_gaussians_vfe": ("PerOutput", "VFE", "sparse"),
    "mo_gaussians_dtc": ("PerOutput", "DTC", "sparse"), "mo_gaussians_fitc": ("PerOutput", "FITC", "sparse"),
    "mo_laplace_dense": ("PerOutput", "Laplace", "dense"), "mo_laplace_fitc": ("PerOutput", "Laplace", "sparse"),
    "mo_vgp": ("PerOutput", "VGP", "dense"), "mo_svgp": ("PerOutput", "SVGP", "sparse"),
    "mo_svgp_minibatch": ("PerOutput", "SVGP", "minibatch"),
    # EP and QP with a PerOutput of mixed families: dense, FITC or DTC at random (form None).
    "mo_ep": ("PerOutput", "EP", None), "mo_qp": ("PerOutput", "QP", None),
}

# The methods of site models (EP, QP), whose variants draw their sparse approximation, Student-t and
# negative binomial parts, and per-output means.
SITE_METHODS = ("EP", "QP")
# Fraction of an EP/QP case's Gaussian outputs that are Student-t, and of its count outputs that
# are negative binomial (their sweeps cost ~10 times a Gaussian's or Poisson's: few keep the
# suite's seeds quick).
HEAVY_FRACTION = 0.2

# predict_f_full_cov's diagonal against predict's f_var, relative to the prior variance k(x, x):
# both are k - b^T C b, by different products, so they differ by the rounding of b^T C b, which
# cancels against k to ~1e-16 cond(C) relative; 1e-6 leaves cond(C) ~1e10 (the jitter ladder's).
DIAGONAL_RTOL = 1e-6
# The joint covariance's smallest eigenvalue may be below 0 by this much relative to the largest
# prior variance: the same cancellation, over the n P points.
PSD_RTOL = 1e-6


def _base_kernels(rng, d):
    """One base kernel (an ICM's) or two or three (an LMC's), from fuzz_cases' random kernels."""
    return [_kernel(rng, d) for _ in range(1 if rng.random() < 0.5 else int(rng.integers(2, 4)))]


def _coregion(rng, bases, P):
    """An ICM of one base kernel or an LMC of several, rank 1..P, W and kappa at the default start
    or random (the module docstring)."""
    rank = int(rng.integers(1, P + 1))
    parts = len(bases)
    W = kappa = None
    if rng.random() < 0.5:
        shape = (P, rank) if parts == 1 else (parts, P, rank)
        W = float(_log_uniform(rng, 1e-2, 1e1)) * rng.standard_normal(shape)
        kappa = _log_uniform(rng, 1e-4, 1e1, shape[:-1])
    if parts == 1:
        return gd.kernels.ICM(bases[0], P, rank, W=W, kappa=kappa)
    return gd.kernels.LMC(tuple(bases), P, rank, W=W, kappa=kappa)


def _families(rng, P, gaussian_only):
    """Each output's family: all "gaussian", or mixed, every family present where P >= 3."""
    if gaussian_only:
        return ["gaussian"] * P
    families = ["gaussian", "bernoulli", "poisson"]
    drawn = list(rng.permutation(families))[:P] + [str(f) for f in rng.choice(families, max(0, P - 3))]
    return [str(f) for f in rng.permutation(drawn)]


def _site_families(rng, families):
    """An EP/QP case's families: each Gaussian output Student-t, and each count output negative
    binomial, with probability :data:`HEAVY_FRACTION`."""
    heavier = {"gaussian": "studentt", "poisson": "negbin"}
    return [heavier[f] if f in heavier and rng.random() < HEAVY_FRACTION else f for f in families]


def _part(rng, family, inference_name):
    """The likelihood of one output of ``family``."""
    if family == "gaussian":
        return gd.likelihoods.Gaussian(variance=float(_log_uniform(rng, 1e-6, 1e1)))
    if family == "studentt":
        return _student_t(rng)
    if family == "negbin":
        return gd.likelihoods.NegativeBinomial(dispersion=float(_log_uniform(rng, 1e-3, 1e2)))
    if family == "bernoulli":
        link = str(rng.choice(["probit", "logit"]))
        return gd.likelihoods.Bernoulli(link, bias=float(rng.choice([0.0, rng.normal()])))
    link = "log" if inference_name == "Laplace" else str(rng.choice(["log", "square"]))
    return gd.likelihoods.Poisson(link=link)


def _targets(rng, family, X):
    """Targets of one output at X (n, D): (y, mode) from fuzz_cases' generator of its family."""
    if family == "gaussian":
        return _regression_targets(rng, X)
    if family == "studentt":
        return _heavy_tailed_targets(rng, X)
    if family == "bernoulli":
        return _labels(rng, X)
    return _counts(rng, X)


def _isotopic(rng, families, X):
    """Y (N, P) with NaN entries (a fraction in 0..1/2 of them; every output keeps one)."""
    Y = np.column_stack([_targets(rng, family, X)[0] for family in families])
    missing = rng.random(Y.shape) < rng.choice([0.0, rng.uniform(0.0, 0.5)])
    missing[rng.integers(0, Y.shape[0], Y.shape[1]), np.arange(Y.shape[1])] = False
    return np.where(missing, np.nan, Y)


def _heterotopic(rng, families, d):
    """Long rows X (n, D+1) and y (n,): each output's rows at inputs of its own, in random order."""
    parts, targets = [], []
    for p, family in enumerate(families):
        X_p, _ = _inputs(rng, int(rng.integers(3, 21)), d)
        parts.append(np.column_stack([X_p, np.full(X_p.shape[0], float(p))]))
        targets.append(_targets(rng, family, X_p)[0])
    order = rng.permutation(sum(part.shape[0] for part in parts))
    return np.concatenate(parts)[order], np.concatenate(targets)[order]


def _held_out(rng, X, y, P, isotopic):
    """Held-out data in the training layout: the first three training inputs and five far ones
    (up to three times the inputs' span), each output's targets drawn from its training targets."""
    d = X.shape[1] - (not isotopic)
    inputs = X[:, :d]
    span = float(np.max(np.abs(inputs))) or 1.0
    X_new = np.vstack([inputs[:3], span * rng.uniform(-3.0, 3.0, (5, d))])
    if isotopic:
        Y_new = np.column_stack([rng.choice(y[~np.isnan(y[:, p]), p], X_new.shape[0]) for p in range(P)])
        return X_new, np.where(rng.random(Y_new.shape) < 0.2, np.nan, Y_new)
    outputs = rng.integers(0, P, X_new.shape[0])
    y_new = np.array([rng.choice(y[X[:, -1] == p]) for p in outputs])
    return np.column_stack([X_new, outputs.astype(float)]), y_new


def _inference(rng, name, form, likelihood, n):
    """The method of the variant: plain, SVGP/VGP as fuzz_cases draws them (natural or joint q
    updates, minibatch steps), or EP/QP as fuzz_cases draws them (sweep schedule, QP's Algorithm
    1), sparse with FITC's or DTC's prior at random."""
    if name in ("SVGP", "VGP"):
        return _variational(rng, getattr(gd.inference, name), likelihood, form == "minibatch", n)
    if name in SITE_METHODS:
        inference = _site_inference(rng, getattr(gd.inference, name))
        if form == "dense":
            return inference
        return dataclasses.replace(inference, approximation=str(rng.choice(["fitc", "dtc"])))
    return getattr(gd.inference, name)()


def _means(rng, P):
    """A mean per output (``gd.means.PerOutput``): a constant N(0, 3^2) or zero (one in four),
    which EP's and QP's site code sees as each row's latent offset."""
    return gd.means.PerOutput(tuple(gd.means.Constant(float(rng.normal(0.0, 3.0))) if rng.random() < 0.75
                                    else gd.means.Zero() for _ in range(P)))


def make_case(variant, seed, rng):
    """The random problem of a multi-output variant (``fuzz_cases.make_case`` calls it with its rng).

    Parameters
    ----------
    variant : str
        A name in :data:`FORMS`.
    seed : int
    rng : numpy.random.Generator
        ``numpy.random.default_rng([seed, variant index])``.

    Returns
    -------
    fuzz_cases.Case
    """
    likelihood_name, inference_name, form = FORMS[variant]
    sites = inference_name in SITE_METHODS
    P, d = int(rng.integers(2, 5)), int(rng.integers(1, 3))
    families = _families(rng, P, gaussian_only=inference_name not in ("Laplace", "VGP", "SVGP") + SITE_METHODS)
    if sites:
        families = _site_families(rng, families)
    kernel = _coregion(rng, _base_kernels(rng, d), P)
    if likelihood_name == "OutputGaussian":
        likelihood = gd.likelihoods.OutputGaussian(P, variance=_log_uniform(rng, 1e-6, 1e1, P))
    else:
        likelihood = gd.likelihoods.PerOutput(tuple(_part(rng, family, inference_name) for family in families))
    isotopic = bool(rng.random() < 0.5)
    if isotopic:
        X, input_mode = _inputs(rng, int(rng.integers(5, 31)), d)
        y = _isotopic(rng, families, X)
        n = int(np.sum(~np.isnan(y)))
    else:
        X, y = _heterotopic(rng, families, d)
        input_mode, n = "per output", X.shape[0]
    if form is None:
        # EP and QP: dense or sparse (FITC or DTC, drawn with the method), as fuzz_cases' logit_ep.
        form = "dense" if rng.random() < 0.5 else "sparse"
    inducing = None
    if form != "dense":
        # K-means picks its M among the distinct inputs of the observed rows (shared Z), greedy
        # selection among the rows.
        distinct = gd.multioutput.unique_inputs(gd.multioutput.long_data(X, y, P)[0]).shape[0]
        inducing = _greedy(rng, n) if rng.random() < 0.25 else _kmeans(rng, distinct)
    inference = _inference(rng, inference_name, form, likelihood, n)
    X_test, y_test = _held_out(rng, X, y, P, isotopic)
    optimize = bool(rng.random() < OPTIMIZE_FRACTION)
    if form == "minibatch":
        max_iter = int(rng.choice([int(rng.integers(2, 16)), int(rng.integers(20, 121))]))
    else:
        max_iter = int(rng.integers(30, 201)) if rng.random() < 0.3 else int(rng.integers(2, 16))
    # EP/QP: a mean per output in half the cases (drawn last: the other variants' draws are as they were).
    mean = _means(rng, P) if sites and rng.random() < 0.5 else None
    model = gd.Model(kernel=kernel, likelihood=likelihood, inducing=inducing, inference=inference, mean=mean)
    notes = {"P": P, "D": d, "rows": n, "layout": "isotopic" if isotopic else "heterotopic", "inputs": input_mode,
             "families": "+".join(families), **({"mean": "per output"} if mean is not None else {})}
    return Case(variant=variant, seed=seed, model=model, X=X, y=y, X_test=X_test, y_test=y_test, optimize=optimize,
                max_iter=max_iter, notes=notes, properties=PROPERTIES)


def _check_full_covariance(case, post, caught):
    """``predict_f_full_cov`` at the held-out inputs over (point, output) pairs: finite, symmetric,
    positive semi-definite up to :data:`PSD_RTOL`, with ``predict``'s f_mean and f_var."""
    try:
        mean, cov = post.predict_f_full_cov(case.X_test)
        pred = post.predict(case.X_test)
    except Exception as err:  # noqa: BLE001 -- a fitted posterior must predict
        return Outcome(f"failure: predict_f_full_cov raised {type(err).__name__}", str(err)[:300])
    bad = _nonfinite("predict_f_full_cov mean", mean) or _nonfinite("predict_f_full_cov cov", cov)
    if bad:
        return bad
    n = mean.size
    C = cov.reshape(n, n)
    rows = gd.multioutput.query(case.X_test, post.input_dims, post.output_count).X
    prior = gd.components.bind(post.model.kernel, post.values, "kernel").diag(rows)
    if not np.array_equal(C, C.T):
        return Outcome("failure: predict_f_full_cov not symmetric", f"max |C - C^T| = {np.max(np.abs(C - C.T)):.3g}")
    smallest = float(np.linalg.eigvalsh(C)[0])
    if smallest < -PSD_RTOL * float(np.max(prior)):
        return Outcome("failure: predict_f_full_cov not positive semi-definite",
                       f"smallest eigenvalue {smallest:.6g}, largest prior variance {np.max(prior):.6g}")
    f_mean, f_var = pred["f_mean"].values.ravel(), pred["f_var"].values.ravel()
    if not np.allclose(mean.ravel(), f_mean, rtol=1e-9, atol=1e-12 * (1.0 + np.max(np.abs(f_mean)))):
        return Outcome("failure: predict_f_full_cov mean is not predict's f_mean",
                       f"max difference {np.max(np.abs(mean.ravel() - f_mean)):.6g}")
    gap = np.abs(np.diag(C) - f_var) - DIAGONAL_RTOL * prior
    if np.any(gap > 0):
        i = int(np.argmax(gap))
        return Outcome("failure: predict_f_full_cov diagonal is not predict's f_var",
                       f"row {i}: {np.diag(C)[i]:.17g} against {f_var[i]:.17g} (prior variance {prior[i]:.6g})")
    return None


def _check_save_load(case, post, caught):
    """The posterior saved and loaded back predicts bit for bit as before (``predict``'s summaries
    and ``predict_f_full_cov`` at the held-out inputs)."""
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "posterior.nc")
            post.save(path)
            loaded = gd.load(path)
        before, after = post.predict(case.X_test), loaded.predict(case.X_test)
        joint = zip(post.predict_f_full_cov(case.X_test), loaded.predict_f_full_cov(case.X_test))
    except Exception as err:  # noqa: BLE001 -- a fitted posterior must save and load
        return Outcome(f"failure: save/load raised {type(err).__name__}", str(err)[:300])
    for name in before.data_vars:
        if not np.array_equal(before[name].values, after[name].values, equal_nan=True):
            return Outcome("failure: loaded posterior predicts otherwise", f"{name} differs after save and load")
    if not all(np.array_equal(a, b) for a, b in joint):
        return Outcome("failure: loaded posterior predicts otherwise", "predict_f_full_cov differs after save and load")
    return None


def _gaussian_constant(case):
    """The constant model's objective of an all-Gaussian multi-output likelihood (OutputGaussian, or
    PerOutput of Gaussians), by the dense density: f = 0 and each output's best noise mean(y_p^2),
    sum_p log N(y_p | 0, mean(y_p^2) I); None for another likelihood."""
    likelihood = case.model.likelihood
    parts = getattr(likelihood, "likelihoods", None)
    if not isinstance(likelihood, gd.likelihoods.OutputGaussian) and not (
            parts and all(type(part) is gd.likelihoods.Gaussian for part in parts)):
        return None
    X, y = long_rows(case.model, case.X, case.y)
    index = X[:, -1].astype(int)
    return sum(float(np.sum(stats.norm(0.0, np.sqrt(np.mean(y[index == p] ** 2))).logpdf(y[index == p])))
               for p in np.unique(index))


def _check_constant_model_flag(case, post, caught):
    """A multi-output Gaussian fit is flagged ``constant_model`` exactly where its objective is within
    ``gpdsl.fit_warnings.CONSTANT_MODEL_TOL`` of the constant model's (:func:`_gaussian_constant`; a
    gap within 1e-9 of its size of the tolerance is left undecided: rounding), and a flagged fit of
    any likelihood warned so."""
    flagged_warning = any(issubclass(w.category, gd.ConvergenceWarning) and "constant model" in str(w.message)
                          for w in caught)
    if post.constant_model and not flagged_warning:
        return Outcome("failure: constant_model=True without its ConvergenceWarning",
                       f"warnings: {[str(w.message)[:80] for w in caught]}")
    constant = _gaussian_constant(case)
    if constant is None:
        return None
    gap = post.log_evidence - constant - CONSTANT_MODEL_TOL
    if abs(gap) > 1e-9 * abs(constant) and post.constant_model != (gap < 0):
        return Outcome("failure: constant_model flag disagrees with the constant model",
                       f"log evidence {post.log_evidence:.12g}, constant model {constant:.12g}, "
                       f"flagged {post.constant_model}")
    return None


# The multi-output posterior's properties, checked after fuzz_cases.POSTERIOR_PROPERTIES.
PROPERTIES = (_check_full_covariance, _check_save_load, _check_constant_model_flag)

fuzz_cases.register_variants(FORMS, make_case)
