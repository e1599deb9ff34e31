"""Defaults chosen by the data: how a multi-class model is fitted when its declaration leaves it open.

One rule, :func:`declaration`, used by both entry points:

* ``gd.Model(kernel, gd.likelihoods.Categorical(K))`` declared without ``inference``: the method
  is chosen when ``fit`` sees the data (:meth:`gpdsl.Model.resolved`), and the posterior carries
  the model it chose (``post.model``: its ``to_dict``, ``to_toml`` and ``save`` write the chosen
  method, so a saved or reloaded fit is the fit that ran; the unfitted model's ``to_dict`` omits
  ``inference`` and reads back as a model that chooses again);
* ``gpdsl.sklearn.GPClassifier()`` with more than two classes and ``inference=None``; its
  ``model_`` is the chosen model.

The rule, for N training rows, D input columns and K classes:

==============================  ==========================================================
part                            default
==============================  ==========================================================
likelihood (GPClassifier only)  ``Categorical(K, link)``, the link chosen by :func:`link_choice`:
                                robust-max where a 200-step softmax pilot (M = 20) errs on at
                                most 20 % of the training rows, softmax above; robust-max's
                                epsilon held at 1e-3 where the pilot errs on at most 10 %
                                (:data:`SEPARATED_ERROR`), learnt above; a Model keeps the
                                likelihood it declares
inference                       N <= 256 and a likelihood that states it is log-concave
                                (softmax): ``SVGP(seed=seed)``, the full-batch bound by L-BFGS-B
                                with q's natural steps to convergence at each evaluation, to its
                                own stopping rule (converged on 12 of the 13 small sets
                                measured); otherwise
                                ``SVGP(batch_size=min(256, N), seed=seed)``: minibatch steps,
                                Adam on the hyperparameters and, by ``q_steps="auto"``, Adam on
                                q for robust-max (not log-concave) and natural-gradient steps
                                on q for softmax; SVGP's own step sizes (``learning_rate``,
                                ``q_learning_rate``, ``natural_step``) and stopping rule
                                (``stop_tol``, ``stop_window`` 200, a stop confirmed by one full
                                pass: issue 45) and its ``iterate_average=50``: the fit returns
                                the average of its iterates over about the last 50 steps; the
                                same for every link
inducing                        ``Optimized(KMeans(min(100, N), seed=seed))``: Z starts at the
                                k-means centres and is optimised with the hyperparameters;
                                k-means on 20,000 rows drawn at random above that many
steps                           at most ``fit(max_iter=...)``; by default :data:`MAX_STEPS`
                                (2,000) minibatch steps, room for the stopping rule to fire
                                (L-BFGS-B iterations for the full batch)
kernel (GPClassifier only)      ``SquaredExponential()``, one length-scale (not ARD); under
                                robust-max (:func:`classifier_kernel`) its variance held at 1:
                                the bound does not depend on it
==============================  ==========================================================

Given parts override: an ``inducing`` spec given with no ``inference`` is kept (its M, not
100); an ``inference`` given is used as it is (the table is then not consulted).  Neither D nor
K changes the choice at the sizes measured; N sets the batch and M only below 256 and 100 rows,
and the full-batch fit of a log-concave likelihood at most :data:`FULL_BATCH_ROWS` rows.

What was measured (process CPU s of the fit, test NLPD; the issue-28 splits of
``benchmarks/multiclass_data.py``, M = 100 k-means points and B = 256 unless said; a loaded
2-core VM, load 5-10, so CPU seconds are high by up to ~1.5x; ``benchmarks/HISTORY.md``,
"Issue 46: multi-class defaults"):

* the method.  Dense Laplace (softmax, R&W Algorithm 3.3) on digits subsets: NLPD 0.924 at
  N = 300 (6.4 s), 0.781 at N = 600 (31.4 s), against the robust-max minibatch SVGP's 0.253 and
  0.176 (17 s each) and the softmax SVGP's 0.403 at 600: Laplace's predictive is far from
  calibrated here, so it is no default at any N.  Full-batch SVGP (the old default above 1,000
  rows) took 275 s on digits (NLPD 0.211);
* the link.  Robust-max against softmax minibatch SVGP: digits 0.099 (1,000 steps, 12.4 s)
  against 0.259 (1,000 steps, 14.8 s); penbased 0.021 (12.3 s) against 0.058 (14.8 s);
  ``make_classification``'s 10^4 x 10 set (bench_multiclass_defaults.py) 0.311 (16.7 s) against
  0.309 (14.4 s); letter 0.860 (25.7 s) against 0.483 (37.4 s).  Robust-max wins where the
  classes are well separated (test error 1-8 %) and loses where they are not: its fixed epsilon
  = 1e-3 gives a wrong class epsilon / (K - 1) (letter, 13 % error: GPflow's robust-max SVGP
  reaches only 0.635; a synthetic set of 66 % error: 4.877 against softmax's 1.607).  No one link
  was within 0.02 of the best known NLPD on all four acceptance sets, so GPClassifier chooses it
  by the data (:func:`link_pilot`, :func:`link_choice`).  The full fits' ELBOs order the links as the test NLPDs do
  (digits -899 against -917, penbased -1,790 against -2,198, synthetic -10,000 against -5,418,
  letter -30,235 against -16,201, 1,000 steps each), but a comparison of converged bounds costs
  two fits, and short pilots of both order them wrongly (robust-max's q, moved by Adam, is far
  from its optimum after 200-400 steps: softmax's bound was the higher on all four).  The
  softmax pilot's training error separates them instead: 6.3 % (penbased), 7.6 % (digits),
  14.4-14.9 % (synthetic, where the links are within 0.011 of each other) and 29.8-31.0 %
  (letter), for 0.5-1.3 CPU s;
* Z optimised from the k-means start against k-means fixed, at the chosen link and 2,000-step cap
  (load ~3, two other processes beside): digits 0.0956 (23.0 s) against 0.1086 (22.4 s),
  penbased 0.0115 (10.6 s) against 0.0165 (13.0 s), synthetic 0.2890 (11.0 s) against 0.3183
  (11.1 s), letter (softmax) 0.4307 (31.9 s) against 0.4661 (30.9 s): better on all four at about
  the same CPU, so Z is optimised;
* the step cap.  The stopping rule fired at 1,020-1,800 steps on the four sets; at the old cap of
  1,000 letter's softmax fit stopped at 0.4827 (against 0.4307 at its rule's stop);
* the batch (2026-11-30, ``benchmarks/exp_batch_size.py``, one thread, load ~1; HISTORY.md
  "the batch of natural steps"): softmax's natural steps gain from more rows a step (each class's
  sites estimated from the batch, K M x M precisions refactorised a step).  At B = 512 against
  256: letter 0.4004 and 0.4070 against 0.4266 and 0.4135 (seeds 0 and 1) at 29.8-37.3 CPU s
  against 20.4-25.3; softmax forced on digits, penbased and the synthetic set 0.007-0.009 better
  at 1.6-1.8x the CPU.  Robust-max lost at 384 (digits 0.1018 against 0.0952, penbased 0.0115
  against 0.0099).  The start moves letter as much: the same B = 256 softmax fit from the peer
  benchmark's k-means start reached 0.3994 in 22.4 s.  So the batch stays 256: 512 buys softmax
  0.007-0.026 for 1.2-1.8x the CPU and takes letter past 30 s on most runs (declare
  ``SVGP(batch_size=512)`` with ``fit(max_iter=2000)`` where that trade is wanted: a declared
  method gets fit's 1,000 steps);
* the steps shrunk on a plateau (2026-11-30, SVGP's ``step_decays``; HISTORY.md "the steps shrunk
  on a plateau"; one thread, two fits at a time on the 2-core machine, so CPU s high by ~10 %):
  letter's softmax fit, seeds 0 / 1 / 2, test NLPD (steps): window 200, no decay 0.4266 / 0.4135
  (1,200 / 1,420); window 100, one decay of 0.3 0.3987 / 0.4001 / 0.4028 (1,130 / 1,010 / 930),
  of 0.5 0.4052 / 0.4041 / 0.4136, two of 0.5 0.3992 / 0.4043 / 0.4059 (1,240 / 1,150 / 1,050);
  window 200, one of 0.5 0.3941 / 0.3872 but 1,540 / 1,780 steps (32-38 CPU s).  Where q moves by
  Adam (robust-max) a decay lost: window 200, one of 0.5, penbased 0.0114 / 0.0143 against 0.0099 /
  0.0113, digits 0.1031 against 0.0952; window 100 and one decay of 0.5: digits 0.0962 / 0.0886,
  penbased 0.0104 / 0.0128, the synthetic set 0.2945 / 0.2955 (against 0.2678 / 0.2636).  So only
  natural steps took them, until the average below;
* the iterates averaged (SVGP's ``iterate_average``, an exponential moving average over about the
  last 50 steps; same runs as above, seeds 0 / 1 / 2): digits 0.0952 / 0.1091 / 0.1012 -> 0.0916 /
  0.1001 / 0.0982, penbased 0.0099 / 0.0113 / 0.0137 -> 0.0087 / 0.0105 / 0.0112, letter (one decay
  of 0.3) 0.3987 / 0.4001 -> 0.3962 / 0.3973; the synthetic set 0.2678 / 0.2636 / 0.2437 -> 0.2703 /
  0.2581 / 0.2508 (the spread of its seeds is larger than either).  Better on 9 of 11 fits at no
  cost, so every link takes it (SVGP's own default since, measured on single-output fits too);
* softmax's window, again, with the average (2026-11-30 22:34-22:37, HISTORY.md "softmax's window
  with the average"; one thread, two fits at a time): SVGP's own window of 200 and no decay against
  the window of 100 and one decay of 0.3, both averaged: letter 0.3889 / 0.3797 / 0.3803 against
  0.3962 / 0.3973 / 0.4001 (seeds 0-2; 1,200-1,420 steps, 22.5-25.7 CPU s, against 930-1,130 steps,
  17-22 s), and better on every other softmax fit measured (the check sets, satimage, led7digit,
  marketing, contraceptive, vowel, vehicle, movement_libras, and the synthetic set under softmax:
  12 fits, by 0.0007 to 0.056).  The average does what the decay did (less batch noise at the stop),
  and the longer window no longer stops short, so every link takes SVGP's own rule;
* the full batch at N <= 256 (2026-12-01, softmax, seed 0, one thread, Z optimised from k-means
  in both; HISTORY.md "the link rule on 22 unseen sets, the acceptance sets' seeds, and softmax's
  full batch up to 256 rows", ``benchmarks/exp_link_unseen.py --full-batch``): where every
  minibatch step is the whole data, L-BFGS-B on the full bound (``SVGP(batch_size=None)``) took
  6-23 iterations and 0.13-1.5 CPU s against the steps' 1.5-50 s on eleven sets of 96-228 rows,
  converged on all (the steps: ten), at test NLPD within 0.0005 or better: glass (171 rows, 6
  classes) 0.8396 against 0.8415, hayes-roth 0.6556 / 0.6594, tae 1.0334 / 1.0334, leafshape
  1.4958 / 1.4953, wine 0.1128 / 0.1128, crabs 0.1263 / 0.1457 (whose steps hit the 2,000 cap),
  hepatic 1.0986 / 1.0986 in 1.5 s against 50.1.  Above 256 rows it is not the rule: its cost
  follows the separation of the classes, not N (movement_libras, 288 rows: 6.5 s against 13.3,
  0.8565 against 0.8582, not converged in 48 iterations; with Z fixed, vowel, 792 rows, 2.9 s
  against 8.9, but segment, 1,848 rows of well-separated classes, still ran after 270 s).
  Robust-max keeps the steps at every N: q's natural steps do not converge for it, and its
  full-batch fit predicted worse (Z fixed: glass 0.951 against 0.831, tae 1.094 against 1.013);
* inducing points: digits, robust-max: M = 50 gave 0.136 (17.5 s), M = 100 0.099 (12.4 s at
  1,000 steps); M = 200 costs 4x a step (O(B M^2 K));
* ARD: digits, robust-max, 64 length-scales: NLPD 0.110 in 68.2 s (1,560 steps) against the
  isotropic kernel's 0.099 in 12.4 s; no gain for 5x the CPU.

Defaults for one latent function (binary classification, regression) are not chosen here: a
``Model`` of such a likelihood declared without ``inference`` is ``Exact()`` as before, and
``GPClassifier`` keeps its binary defaults.
"""
from __future__ import annotations

from typing import NamedTuple

from . import inducing as _inducing
from . import inference as _inference
from . import kernels as _kernels
from . import likelihoods as _likelihoods
from .parameters import Fixed

#: The link of GPClassifier's K-class likelihood where no pilot chose one (:func:`classifier_likelihood`).
LINK = "robustmax"
#: Inducing points of the SVGP default (at most N).
INDUCING_POINTS = 100
#: k-means runs on this many rows drawn at random above it (each Lloyd iteration is O(N M D)).
KMEANS_SAMPLE = 20_000
#: Rows per minibatch step of the SVGP default (at most N).
BATCH_SIZE = 256
#: At most this many rows, a likelihood that states it is log-concave (softmax) is fitted on the
#: full batch (``SVGP()``: L-BFGS-B to its own stopping rule), where each minibatch step would be
#: the whole data anyway.
FULL_BATCH_ROWS = BATCH_SIZE
#: The fit returns the average of its iterates over about this many last steps: SVGP's own default
#: ``iterate_average`` (measured on K-class and single-output fits; :class:`gpdsl.inference.SVGP`).
ITERATE_AVERAGE = _inference.SVGP.iterate_average
#: The step cap of a chosen fit when the user gives none (the stopping rule fired at 1,020 to 1,800
#: steps on the four sets measured).
MAX_STEPS = 2000
#: :func:`link_choice`: softmax where its pilot errs on more than this share of the training rows.
OVERLAP_ERROR = 0.2
#: :func:`classifier_likelihood`: robust-max's epsilon is held at its start 1e-3 where the pilot errs
#: on at most this share of the training rows, learnt above.  Learnt against held (GPClassifier with
#: robust-max, seeds 0-2, benchmarks/HISTORY.md "robust-max's epsilon learnt"): digits (pilot
#: error 7.6 %) 0.104 against 0.093, penbased (6.3-7.4 %) 0.014 against 0.013, the 10^4 x 10
#: synthetic set (14.4-14.9 %) 0.256 against 0.280; the bound's epsilon, 1 - mean P_n, counts q's
#: own uncertainty as label noise where the classes barely overlap.
SEPARATED_ERROR = 0.1
#: The link pilot's steps and inducing points, and the training rows its error is counted on.
PILOT_STEPS = 200
PILOT_INDUCING_POINTS = 20
PILOT_ERROR_ROWS = 5000


def classifier_likelihood(n_classes, link=LINK, pilot_error=None):
    """GPClassifier's likelihood of K > 2 classes: ``Categorical(K, link)``, with robust-max's
    epsilon held (``Fixed(1e-3)``) where the link pilot erred on at most :data:`SEPARATED_ERROR` of
    the training rows, learnt otherwise.

    Parameters
    ----------
    n_classes : int
        K.
    link : str, default :data:`LINK`
        The link (GPClassifier's fit passes :func:`link_choice`'s).
    pilot_error : float or None, default None
        The pilot's training error (:class:`LinkChoice`); None (no pilot ran): epsilon learnt.

    Returns
    -------
    gpdsl.likelihoods.Categorical
    """
    if link == "robustmax" and pilot_error is not None and pilot_error <= SEPARATED_ERROR:
        start = _likelihoods.Categorical(n_classes, link).epsilon
        return _likelihoods.Categorical(n_classes, link, epsilon=Fixed(start))
    return _likelihoods.Categorical(n_classes, link)


def classifier_kernel(likelihood):
    """GPClassifier's kernel where none is given: ``SquaredExponential()`` (one length-scale), its
    variance held at 1 (``Fixed(1.0)``) under a likelihood that ignores a common positive factor on
    every latent function (``scale_invariant``: robust-max).

    Why held: the robust-max bound sees only which f_k is the largest, and under one kernel shared
    by the classes a change of its variance by c scales every latent mean by sqrt(c) and every
    latent variance by c at fixed whitened q, so the bound and the predictive are the same at every
    variance (tests/test_svgp_multiclass.py).  Left free, it is a flat direction: the minibatch
    steps leave it near its start, and a deterministic finish on the full bound wanders along it
    (digits 1.0 -> 131.6, the 10^4-row synthetic set 1.0 -> 4.8e7, the latter unconverged after
    its cap; benchmarks/HISTORY.md, "robust-max's kernel variance").

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood

    Returns
    -------
    gpdsl.kernels.SquaredExponential
    """
    if getattr(likelihood, "scale_invariant", False):
        return _kernels.SquaredExponential(variance=Fixed(1.0))
    return _kernels.SquaredExponential()


def chooses_inference(likelihood):
    """Whether a model of ``likelihood`` declared without an inference method has it chosen by
    :func:`declaration` at fit time: a likelihood of more than one latent function (``Categorical``).

    Parameters
    ----------
    likelihood : gpdsl.likelihoods.Likelihood

    Returns
    -------
    bool
    """
    return int(getattr(likelihood, "n_latent", 1)) > 1


def declaration(n_rows, n_features, n_classes, likelihood, inducing=None, seed=0):
    """The inference method and inducing spec of a K-class model of N rows and D columns (the table
    of the module docstring).

    Parameters
    ----------
    n_rows : int
        N, the training rows.
    n_features : int
        D, the input columns (checked; no choice depends on it at the sizes measured).
    n_classes : int
        K, the classes (the likelihood's latent functions).
    likelihood : gpdsl.likelihoods.Likelihood
        The model's likelihood (checked against K).
    inducing : gpdsl.inducing.InducingSpec or None, default None
        A spec the user gave: kept (and the method is then a sparse one).
    seed : int, default 0
        Seed of the k-means start and of the minibatches.

    Returns
    -------
    dict
        ``{"inference": gpdsl.inference.Inference, "inducing": InducingSpec or None}``, the keyword
        arguments of :class:`gpdsl.Model` that the declaration left open.

    Raises
    ------
    ValueError
        N, D or K not positive integers, or K not the likelihood's number of latent functions.
    """
    for name, value in (("n_rows", n_rows), ("n_features", n_features), ("n_classes", n_classes)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"declaration: {name} must be a positive integer, got {value!r}")
    if int(n_classes) != int(getattr(likelihood, "n_latent", 1)):
        raise ValueError(f"declaration: n_classes = {n_classes}, but {likelihood!r} has "
                         f"{getattr(likelihood, 'n_latent', 1)} latent functions")
    n_rows = int(n_rows)
    if inducing is None:
        inducing = _inducing.Optimized(_inducing.KMeans(min(INDUCING_POINTS, n_rows), seed=seed,
                                                        sample=KMEANS_SAMPLE if n_rows > KMEANS_SAMPLE else None))
    if n_rows <= FULL_BATCH_ROWS and getattr(likelihood, "log_concave", None) is True:
        return {"inference": _inference.SVGP(seed=seed), "inducing": inducing}
    return {"inference": _inference.SVGP(batch_size=min(BATCH_SIZE, n_rows), seed=seed), "inducing": inducing}


def max_steps(max_iter):
    """The step cap of a fit whose method :func:`declaration` chose: ``max_iter`` where given, else
    :data:`MAX_STEPS` (room for the stopping rule to fire: the module docstring's measurements).

    Parameters
    ----------
    max_iter : int or None
        The cap the user gave to ``fit`` (``Model.fit`` or ``GPClassifier(max_iter=...)``), None for
        the default.

    Returns
    -------
    int
    """
    return MAX_STEPS if max_iter is None else max_iter


class LinkChoice(NamedTuple):
    """How GPClassifier's link was chosen (``GPClassifier.link_choice_``; :func:`link_choice`).

    Parameters
    ----------
    link : str
        ``"robustmax"`` or ``"softmax"``.
    pilot_error : float
        The softmax pilot's error on (at most :data:`PILOT_ERROR_ROWS` of) the training rows.
    threshold : float
        :data:`OVERLAP_ERROR`: softmax above it.
    pilot_cpu : float
        Process CPU seconds of the pilot.
    """

    link: str
    pilot_error: float
    threshold: float
    pilot_cpu: float


def link_pilot(n_rows, n_classes, seed=0):
    """The parts of the softmax pilot whose training error chooses GPClassifier's K-class link
    (:func:`gpdsl.sklearn.choose_link` fits it; :func:`link_choice` reads its error).

    Why a pilot, and why its error (the module docstring's measurements): robust-max gives a
    wrongly placed row the fixed probability epsilon / (K - 1) (about 9 to 10 nats lost at
    epsilon = 1e-3), so it wins where the classes barely overlap (digits, penbased: test NLPD 0.09
    and 0.016 against softmax's 0.26 and 0.058) and loses where they do (letter: 0.64 to 0.86
    against 0.42).  ``SVGP(batch_size=min(256, N))`` with the softmax link and ``KMeans(min(20,
    N))`` fixed, run for :data:`PILOT_STEPS` steps, costs 0.5 to 1.3 CPU s at the sizes measured;
    its training error (arg-max of the latent mean) was 6.3-7.4 % (penbased), 7.6 % (digits),
    14.4-14.9 % (the 10^4 x 10 synthetic set, where both links are within 0.011 of each other)
    and 29.8-31.0 % (letter).

    Parameters
    ----------
    n_rows : int
        N, the training rows.
    n_classes : int
        K > 2.
    seed : int, default 0
        Seed of the pilot's k-means start and batches.

    Returns
    -------
    dict
        ``{"likelihood", "inducing", "inference"}``: keyword arguments of :class:`gpdsl.Model`
        (with the classifier's kernel); fit it with ``max_iter=PILOT_STEPS``.
    """
    n_rows = int(n_rows)
    return {"likelihood": _likelihoods.Categorical(n_classes, "softmax"),
            "inducing": _inducing.KMeans(min(PILOT_INDUCING_POINTS, n_rows), seed=seed,
                                         sample=KMEANS_SAMPLE if n_rows > KMEANS_SAMPLE else None),
            # The last iterate: the thresholds were measured on it (an average over the last 50 of
            # 200 steps lags a run still moving: digits' error 0.076 -> 0.081, penbased's 0.074 -> 0.084).
            "inference": _inference.SVGP(batch_size=min(BATCH_SIZE, n_rows), seed=seed, iterate_average=0)}


def link_choice(pilot_error, pilot_cpu=0.0):
    """The link for a pilot training error: softmax above :data:`OVERLAP_ERROR`, else robust-max.

    Parameters
    ----------
    pilot_error : float
        The share of (at most :data:`PILOT_ERROR_ROWS`) training rows the pilot of
        :func:`link_pilot` gets wrong.
    pilot_cpu : float, default 0.0
        The pilot's process CPU seconds, recorded.

    Returns
    -------
    LinkChoice
    """
    error = float(pilot_error)
    return LinkChoice("softmax" if error > OVERLAP_ERROR else "robustmax", error, OVERLAP_ERROR, float(pilot_cpu))


__all__ = ["declaration", "chooses_inference", "classifier_likelihood", "link_pilot", "link_choice", "LinkChoice",
           "max_steps",
           "LINK", "INDUCING_POINTS", "KMEANS_SAMPLE", "BATCH_SIZE", "FULL_BATCH_ROWS",
           "ITERATE_AVERAGE", "MAX_STEPS", "OVERLAP_ERROR", "SEPARATED_ERROR",
           "PILOT_STEPS",
           "PILOT_INDUCING_POINTS", "PILOT_ERROR_ROWS"]
