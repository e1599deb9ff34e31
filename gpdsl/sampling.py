"""Hyperparameter posteriors by NUTS: what :meth:`gpdsl.Model.sample` runs.

The target is the posterior of the hyperparameters on the optimiser's unconstrained scale u
(:class:`gpdsl.parameters.ParameterTable`: u = log theta for a positive hyperparameter, the logit
of its place in (low, high) for a bounded one, theta itself for a real one):

    log p(u | y) = log p(y | theta(u)) + sum log p(theta(u)) + log |d theta / d u|,

with log p(y | theta) the method's log evidence (Exact's marginal likelihood; FITC's, DTC's, EP's,
QP's and Laplace's approximations; VFE's and Pólya-Gamma's collapsed bounds, which make the result a
pseudo-posterior, the bound's exponential normalised),
p(theta) the declared priors on the natural scale and the log-Jacobian

    log |d theta / d u| = u                                        (positive: theta = e^u),
                        = log((theta - low) (high - theta) / (high - low))     (bounded),
                        = 0                                        (real).

Its gradient is the fit's (:class:`gpdsl.fitting._Objective`: the analytic gradient of the evidence
and of the priors, chained to u) plus the Jacobian's: 1 per positive entry, 1 - 2 expit(u) per
bounded one.  :func:`gpdsl.nuts.sample` draws from it.

The model is fitted first (``Model.fit``: the MAP in theta, kept as ``map_posterior``; it selects a
sparse method's inducing inputs Z, which are held there while sampling).  The chains start dispersed
around the mode of the sampled density, log p(u | y), found by L-BFGS-B from the declared values
(the priors' initial values), not around the MAP in theta: without the Jacobian a prior such as a
half-normal on sqrt(variance) has p(theta) ~ theta^(-1/2) at 0, and the MAP can collapse a variance
there (EP on 14 binary labels: kernel variance 5.5e-307, u = -705), while log p(u | y) ~ u / 2 as
u -> -inf keeps its mode inside.  Each chain starts at that mode plus an independent
N(0, START_SCALE^2) perturbation of every coordinate (halved until the log posterior is finite
there).
"""
from __future__ import annotations

import dataclasses
import json
import os
import warnings

import numpy as np
from scipy import special

from . import fitting, nuts
from ._version import __version__
from .checks import check_nonnegative_int, check_positive_int, check_seed, is_number
from .inducing import Selection
from .inputs import check_fit_arguments, validate_inputs
from .io.files import check_path, sigint_deferred, write_replacing
from .io.layout import variable_dims
from .log_posterior import LogPosterior, check_priors
from .multioutput import output_count, output_labels, query, saved_output_names
from .io.xarray_import import xarray
from .methods.common import ConvergenceWarning
from .posterior import Posterior

__all__ = ["SampledPosterior", "SamplingDiagnostics", "SamplingWarning", "LogPosterior", "sample"]

# Thresholds of the diagnostics record (Vehtari et al. (2021), "Rank-normalization, folding and
# localization: an improved R-hat", Bayesian Analysis 16(2); Stan's E-BFMI rule, Betancourt (2016),
# arXiv:1604.00695): R-hat above RHAT_MAX, a bulk or tail ESS below ESS_PER_CHAIN per chain, any
# divergence, a chain's E-BFMI below BFMI_MIN, or transitions that hit the tree-depth cap warn.
RHAT_MAX = 1.01
ESS_PER_CHAIN = 100
BFMI_MIN = 0.3
# Standard deviation, on the unconstrained scale, of each chain's start around the mode: a factor
# of e^0.5 ~ 1.6 either way in a positive hyperparameter, enough for R-hat to see chains that
# settle in different modes, small enough to start where the posterior has its mass.
START_SCALE = 0.5
START_TRIES = 10
# Draws (spread evenly over all chains) at which predict and predict_f evaluate the method's
# posterior by default: each costs one evaluation of the evidence.
PREDICT_DRAWS = 200
# posterior_at keeps at most this many draws' posteriors (oldest dropped first): each holds the
# method's state at its draw: 2 N^2 doubles for Exact or VGP, 3 N^2 for Laplace.
POSTERIOR_CACHE = 8
# The ``format`` attribute of a saved run (SampledPosterior.save).
SAVE_FORMAT = "gpdsl.SampledPosterior/1"


class SamplingWarning(ConvergenceWarning):
    """A diagnostic of a NUTS run is out of range (divergences, R-hat, ESS, E-BFMI, tree depth)."""


def _refuse_unmarginalised(model):
    """Refuse a method whose objective depends on a q it holds rather than on the hyperparameters
    alone (``Inference.marginalises_latent`` False: SVGP, VGP, minibatch PolyaGamma): its bound is
    a function of (theta, q), so a posterior over theta would need q sampled or integrated too."""
    if not model.inference.marginalises_latent:
        name = type(model.inference).__name__
        raise ValueError(f"Model.sample: {name} keeps a variational q that is not marginalised, so its bound is "
                         f"not a function of the hyperparameters alone; sample with a method whose evidence "
                         f"integrates f out: Exact (Gaussian likelihood), VFE, FITC or DTC (sparse Gaussian), "
                         f"EP, QP, Laplace or PolyaGamma without minibatch (other likelihoods, dense or with an "
                         f"inducing spec); latent='joint' (f sampled too) starts from such a method's fit as well")


@dataclasses.dataclass(frozen=True)
class SamplingDiagnostics:
    """How a NUTS run went, with the checks :func:`sample` warns on.

    Parameters
    ----------
    chains, draws : int
        Chains and kept draws per chain.
    divergences : int
        Divergent transitions over all chains (after warmup).
    max_rhat : float
        The largest rank-normalised split R-hat over every scalar hyperparameter (``az.rhat``).
    min_ess_bulk, min_ess_tail : float
        The smallest bulk and tail effective sample sizes (``az.ess``).
    bfmi : tuple of float
        Each chain's E-BFMI, sum (E_n - E_{n-1})^2 / sum (E_n - mean E)^2 over its energies.
    tree_depth_hits : int
        Transitions whose trajectory reached the cap ``max_tree_depth``.
    max_tree_depth : int
        The cap.
    worst : dict of str to str
        The hyperparameter (``name[index]`` for an array) behind ``max_rhat``, ``min_ess_bulk`` and
        ``min_ess_tail``.
    """

    chains: int
    draws: int
    divergences: int
    max_rhat: float
    min_ess_bulk: float
    min_ess_tail: float
    bfmi: tuple
    tree_depth_hits: int
    max_tree_depth: int
    worst: dict

    @property
    def ess_min(self):
        """float: the ESS below which a run warns, ESS_PER_CHAIN per chain."""
        return float(ESS_PER_CHAIN * self.chains)

    def problems(self):
        """The checks that failed, in words (empty when every one passed).

        Returns
        -------
        list of str
        """
        found = []
        if self.divergences:
            found.append(f"{self.divergences} divergent transition(s) after warmup: the posterior has regions the "
                         "step size cannot follow (raise target_accept, or reparameterise / tighten the priors)")
        if not self.max_rhat <= RHAT_MAX:
            found.append(f"R-hat {self.max_rhat:.4g} > {RHAT_MAX} ({self.worst['max_rhat']}): the chains disagree "
                         "(run longer, or look for several modes)")
        for kind in ("bulk", "tail"):
            ess = getattr(self, f"min_ess_{kind}")
            if not ess >= self.ess_min:
                found.append(f"{kind} ESS {ess:.4g} < {self.ess_min:g} ({ESS_PER_CHAIN} per chain; "
                             f"{self.worst[f'min_ess_{kind}']}): too few effective draws for reliable "
                             "summaries (raise draws)")
        low = [f"chain {c}: {b:.3g}" for c, b in enumerate(self.bfmi) if not b >= BFMI_MIN]
        if low:
            found.append(f"E-BFMI below {BFMI_MIN} ({', '.join(low)}): the momentum resampling explores the "
                         "energy poorly (heavy tails; reparameterise or tighten the priors)")
        if self.tree_depth_hits:
            found.append(f"{self.tree_depth_hits} transition(s) hit max_tree_depth = {self.max_tree_depth}: "
                         "the trajectories were cut short (efficiency, not validity)")
        return found

    @property
    def ok(self):
        """bool: every check passed."""
        return not self.problems()


def energy_bfmi(energy):
    """E-BFMI of each chain: sum_n (E_n - E_{n-1})^2 / sum_n (E_n - mean E)^2.

    Parameters
    ----------
    energy : ndarray, shape (chains, draws)

    Returns
    -------
    ndarray, shape (chains,)
    """
    energy = np.asarray(energy, dtype=float)
    return np.sum(np.diff(energy, axis=1) ** 2, axis=1) / np.sum((energy - energy.mean(axis=1, keepdims=True)) ** 2,
                                                                 axis=1)


def _extreme(dataset, pick):
    """(value, "name[index]") of the smallest or largest (``pick`` np.nanargmin / np.nanargmax)
    element over the variables of ``dataset`` (an az.rhat / az.ess result)."""
    best = None
    for name, variable in dataset.data_vars.items():
        values = np.atleast_1d(np.asarray(variable.values, dtype=float))
        if np.all(np.isnan(values)):
            i, value = 0, np.nan
        else:
            i = int(pick(values))
            value = float(values.ravel()[i])
        label = name if values.size == 1 and variable.ndim == 0 else f"{name}[{i}]"
        if best is None or np.isnan(best[0]) or (not np.isnan(value) and pick([best[0], value]) == 1):
            best = (value, label)
    return best


def diagnose(draws, result):
    """The :class:`SamplingDiagnostics` of the draws Dataset and the :class:`gpdsl.nuts.NUTSResult`.

    Parameters
    ----------
    draws : xarray.Dataset
        Dims (chain, draw, ...).
    result : gpdsl.nuts.NUTSResult

    Returns
    -------
    SamplingDiagnostics
    """
    import arviz as az

    rhat = _extreme(az.rhat(draws), np.nanargmax)
    bulk = _extreme(az.ess(draws, method="bulk"), np.nanargmin)
    tail = _extreme(az.ess(draws, method="tail"), np.nanargmin)
    chains, n_draws = result.lp.shape
    return SamplingDiagnostics(chains=chains, draws=n_draws, divergences=int(np.sum(result.diverging)),
                               max_rhat=rhat[0], min_ess_bulk=bulk[0], min_ess_tail=tail[0],
                               bfmi=tuple(float(b) for b in energy_bfmi(result.energy)),
                               tree_depth_hits=int(np.sum(result.tree_depth >= result.max_tree_depth)),
                               max_tree_depth=result.max_tree_depth,
                               worst={"max_rhat": rhat[1], "min_ess_bulk": bulk[1], "min_ess_tail": tail[1]})


class SampledPosterior:
    """The posterior of a model's hyperparameters by NUTS, as :meth:`gpdsl.Model.sample` returns it.

    Parameters
    ----------
    model : gpdsl.Model
        The sampled model (with the likelihood's labels).
    table : gpdsl.parameters.ParameterTable
        Its parameters: the sampled ones (``free``) and the held ones.
    result : gpdsl.nuts.NUTSResult
        The sampler's draws on the unconstrained scale and its per-draw statistics.
    X : ndarray, shape (N, D)
        Training inputs.
    y : ndarray, shape (N,)
        Training targets as the likelihood codes them.
    Z : ndarray, shape (M, D), or None
        The inducing inputs sampled at (the MAP fit's; None for a dense method).
    map_posterior : gpdsl.Posterior or None
        The MAP fit (None for a run read back by :meth:`load`).
    latent : {"marginalised", "joint"}, default "marginalised"
        "joint": each of ``result``'s draws is (u, v), v the whitened f (:mod:`gpdsl.latent_joint`).

    Attributes
    ----------
    draws : xarray.Dataset
        One variable per sampled hyperparameter, under its ``post.values`` name, natural scale,
        dims (chain, draw, ...) (an ARD length-scale's ``feature``); with latent="joint" also
        ``f`` (chain, draw, obs), the latent values at the training inputs.
    sample_stats : xarray.Dataset
        ``lp``, ``diverging``, ``tree_depth``, ``step_size``, ``energy``, ``acceptance_rate``,
        ``n_steps``, dims (chain, draw).
    diagnostics : SamplingDiagnostics
    fixed : dict of str to ndarray
        The held hyperparameters' values (``fixed=``, and a sparse method's Z).
    """

    def __init__(self, model, table, result, X, y, Z, map_posterior=None, latent="marginalised"):
        self.model = model
        self.table = table
        self.result = result
        self.X, self.y, self.Z = X, y, Z
        self.map_posterior = map_posterior
        self.latent = latent
        self._output_names = None
        # latent="joint": each draw is w = (u, v), v the whitened f (gpdsl.latent_joint, which imports this module).
        from .latent_joint import JointLogPosterior
        self._joint = JointLogPosterior(model, table, X, y) if latent == "joint" else None
        self.draws = self._draws_dataset()
        self.sample_stats = self._stats_dataset()
        self.diagnostics = diagnose(self.draws, result)
        self.fixed = {e.name: e.value.copy() for e in table.entries if e.fixed}
        self._posteriors = {}

    @property
    def output_names(self):
        """tuple or None: a multi-output run's output names (:attr:`gpdsl.Posterior.output_names`),
        the ``output`` coordinate of its draws and predictions; None: 0..P-1."""
        return self._output_names

    @output_names.setter
    def output_names(self, names):
        self._output_names = names
        for posterior in self._posteriors.values():
            posterior.output_names = names
        if "output" in self.draws.dims:
            self.draws = self.draws.assign_coords(output=self.output_labels)

    @property
    def output_labels(self):
        """ndarray (P,): the ``output`` coordinate, ``output_names`` or 0..P-1."""
        return output_labels(self._output_names, output_count(self.model.kernel))

    @property
    def target(self):
        """str: what the draws are of: ``"posterior"``, ``"joint posterior of f and the
        hyperparameters"`` (latent="joint"), or, where the method's evidence is a lower bound
        (``Inference.evidence_is_bound``: VFE, PolyaGamma), ``"pseudo-posterior"`` (the bound's
        exponential, normalised, in place of the marginal likelihood)."""
        if self._joint is not None:
            return "joint posterior of f and the hyperparameters"
        return "pseudo-posterior" if self.model.inference.evidence_is_bound else "posterior"

    def __repr__(self):
        d = self.diagnostics
        return (f"SampledPosterior({type(self.model.inference).__name__} {self.target}, {d.chains} chains x "
                f"{d.draws} draws of "
                f"{list(self.draws.data_vars)}; divergences {d.divergences}, max R-hat {d.max_rhat:.4g}, "
                f"min bulk ESS {d.min_ess_bulk:.4g})")

    def _sampled_entries(self):
        """The entries with draws: the free ones and the members of their ties."""
        return [e for e in self.table.entries if not e.fixed]

    def _draws_dataset(self):
        xr = xarray()
        chains, n_draws, _ = self.result.draws.shape
        natural = [self.table.unpack(u) for u in self.result.draws[..., :self.table.size].reshape(chains * n_draws, -1)]
        data, coords = {}, {"chain": np.arange(chains), "draw": np.arange(n_draws)}
        for e in self._sampled_entries():
            values = np.stack([v[e.name] for v in natural]).reshape((chains, n_draws) + e.value.shape)
            dims = variable_dims(e.name, e.value, e.dims)
            for dim, size in zip(dims, e.value.shape):
                coords.setdefault(dim, np.arange(size))
            data[e.name] = (("chain", "draw") + tuple(dims), values)
        if self._joint is not None:
            data["f"] = (("chain", "draw", "obs"), self._joint.latent(self.result.draws))
            coords["obs"] = np.arange(self.X.shape[0])
        return xr.Dataset(data, coords=coords, attrs={"inference": type(self.model.inference).__name__,
                                                      "target": self.target})

    def _stats_dataset(self):
        xr = xarray()
        r = self.result
        stats = {"lp": r.lp, "diverging": r.diverging, "tree_depth": r.tree_depth, "step_size": r.step_size,
                 "energy": r.energy, "acceptance_rate": r.acceptance_rate, "n_steps": r.n_steps}
        return xr.Dataset({k: (("chain", "draw"), v) for k, v in stats.items()},
                          coords={"chain": np.arange(r.lp.shape[0]), "draw": np.arange(r.lp.shape[1])})

    def values_at(self, chain, draw):
        """Every hyperparameter's natural value at one draw (held ones included).

        Parameters
        ----------
        chain, draw : int

        Returns
        -------
        dict of str to ndarray
        """
        values = self.table.unpack(self.result.draws[chain, draw, :self.table.size])
        values.pop("inducing.Z", None)
        return values

    def posterior_at(self, chain, draw):
        """The method's posterior (a :class:`gpdsl.Posterior`) at one draw's hyperparameters.

        Parameters
        ----------
        chain, draw : int

        Returns
        -------
        gpdsl.Posterior
        """
        key = (int(chain), int(draw))
        if key not in self._posteriors:
            if self._joint is not None:
                # f drawn with theta: the GP conditional on the draw's f (gpdsl.latent_joint).
                posterior = self._joint.posterior(self.result.draws[key])
            else:
                selection = None if self.Z is None else Selection(self.Z, indices=None, criterion=None, stopped=None)
                fixed = tuple(e.name for e in self.table.entries if e.fixed and e.name != "inducing.Z")
                at = fitting.fit_at(self.model, self.X, self.y, selection, fixed=fixed, optimize=False, restarts=0,
                                    seed=0, max_iter=1, progress=False, callback=None, start=self.values_at(*key),
                                    warm=None)
                posterior = Posterior(model=self.model, values=at.values, state=at.evaluation.state,
                                      log_evidence=at.evaluation.log_evidence, log_prior=at.log_prior)
            posterior.output_names = self._output_names
            if len(self._posteriors) >= POSTERIOR_CACHE:
                # Bounded: a dense method's state is 2 N^2 doubles (Exact, VGP: chol and q_cov; the
                # correction is the identity, None) or 3 N^2 (Laplace's): N = 2,000 at 200 draws, 13-19 GB.
                self._posteriors.pop(next(iter(self._posteriors)))
            self._posteriors[key] = posterior
        return self._posteriors[key]

    def thinned(self, max_draws=PREDICT_DRAWS):
        """The (chain, draw) pairs predict uses: at most ``max_draws``, spread evenly over the
        chains' draws taken in order.

        Parameters
        ----------
        max_draws : int, default PREDICT_DRAWS

        Returns
        -------
        list of tuple of int
        """
        check_positive_int("SampledPosterior", "max_draws", max_draws)
        chains, n_draws = self.result.lp.shape
        flat = np.unique(np.linspace(0, chains * n_draws - 1, min(max_draws, chains * n_draws)).round().astype(int))
        return [divmod(int(i), n_draws) for i in flat]

    def predict_f(self, X_new, max_draws=PREDICT_DRAWS):
        """Latent predictive mean and variance at X_new, integrated over the hyperparameters.

        With m_s, v_s the method's predictive mean and variance at draw s of the S draws of
        :meth:`thinned`: mean = (1/S) sum_s m_s, variance = (1/S) sum_s v_s + (1/S) sum_s (m_s -
        mean)^2 (the law of total variance for the equally weighted mixture).

        Parameters
        ----------
        X_new : array_like, shape (n, D)
        max_draws : int, default PREDICT_DRAWS

        Returns
        -------
        mean, var : ndarray, shape (n,)
        """
        moments = [self.posterior_at(c, d).predict_f(X_new) for c, d in self.thinned(max_draws)]
        means = np.stack([m for m, _ in moments])
        variances = np.stack([v for _, v in moments])
        return _mixture(means, variances)

    def predict(self, X_new, max_draws=PREDICT_DRAWS, *, noise_variance=None, offset=None):
        """:meth:`gpdsl.Posterior.predict` integrated over the hyperparameters.

        Each ``<name>_mean`` / ``<name>_var`` pair (f, y) is the mixture's mean and variance
        (:meth:`predict_f`'s rule: y's variance holds each draw's noise variance); any other
        numeric variable (a class probability ``p``) is the mixture's, the average over the
        draws; a K-class ``label`` is the most probable class of the averaged ``p``.

        Parameters
        ----------
        X_new : array_like, shape (n, D)
        max_draws : int, default PREDICT_DRAWS
        noise_variance, offset : optional
            As :meth:`gpdsl.Posterior.predict` takes them (the observation-noise variances at
            X_new of a Gaussian likelihood; the new rows' offset of the latent input).

        Returns
        -------
        xarray.Dataset
            As :meth:`gpdsl.Posterior.predict`, with ``attrs["draws_used"]``.
        """
        pairs = self.thinned(max_draws)
        each = [self.posterior_at(c, d).predict(X_new, noise_variance=noise_variance, offset=offset) for c, d in pairs]
        out = each[0].copy()
        for name in each[0].data_vars:
            if each[0][name].dtype.kind not in "fc":
                continue                        # a label: from the mixture's p below
            stacked = np.stack([ds[name].values for ds in each])
            if name.endswith("_var") and name[:-4] + "_mean" in each[0].data_vars:
                means = np.stack([ds[name[:-4] + "_mean"].values for ds in each])
                out[name] = (each[0][name].dims, _mixture(means, stacked)[1])
            else:
                out[name] = (each[0][name].dims, stacked.mean(axis=0))
        if "label" in out.data_vars:
            out["label"] = ("obs", out["class"].values[np.argmax(out["p"].values, axis=1)])
        out.attrs["draws_used"] = len(pairs)
        return out

    def log_predictive(self, X_new, y_new, max_draws=PREDICT_DRAWS, *, offset=None):
        """Pointwise log predictive probability of y_new at X_new, integrated over the hyperparameters.

        The log of the mixture's density, log (1/S) sum_s p_s(y_i | x_i) with p_s the method's
        predictive (:meth:`gpdsl.Posterior.log_predictive`) at draw s of the S draws of
        :meth:`thinned`, by log-sum-exp (not the Gaussian of :meth:`predict`'s mixture moments).

        Parameters
        ----------
        X_new : array_like, shape (n, D)
        y_new : array_like, shape (n,)
            Targets at X_new, coded as for ``fit``.
        max_draws : int, default PREDICT_DRAWS
        offset : array_like, shape (n,), optional
            As :meth:`gpdsl.Posterior.log_predictive` takes it.

        Returns
        -------
        ndarray, shape (n,)
        """
        pairs = self.thinned(max_draws)
        each = np.stack([self.posterior_at(c, d).log_predictive(X_new, y_new, offset=offset) for c, d in pairs])
        return special.logsumexp(each, axis=0) - np.log(len(pairs))

    def kept_draws(self, max_draws=PREDICT_DRAWS):
        """The draw indices :meth:`to_inference_data` keeps in every chain at new inputs: every
        k-th, k = ceil(draws / floor(max_draws / chains)), so that at most ``max_draws`` are kept
        in all, the same in each chain (ArviZ's groups are (chain, draw) rectangles).

        Parameters
        ----------
        max_draws : int, default PREDICT_DRAWS
            At least the number of chains (one draw in each).

        Returns
        -------
        ndarray of int

        Raises
        ------
        ValueError
            ``max_draws`` not a positive integer, or fewer than the chains.
        """
        check_positive_int("SampledPosterior", "max_draws", max_draws)
        chains, n_draws = self.result.lp.shape
        if max_draws < chains:
            raise ValueError(f"SampledPosterior: max_draws = {max_draws} is fewer than the {chains} chains; the draws "
                             f"at X_new are the same in every chain, at least one in each: give max_draws >= {chains}")
        return np.arange(0, n_draws, -(-n_draws // (max_draws // chains)))

    def to_inference_data(self, X_new=None, max_draws=PREDICT_DRAWS, seed=0):
        """The run for ArviZ, with draws of f and y at new inputs when ``X_new`` is given.

        At X_new, each kept draw theta_s of the hyperparameters (:meth:`kept_draws`: every k-th
        draw, the same in every chain, at most ``max_draws`` in all; not :meth:`thinned`'s draws,
        which :meth:`predict` uses, spread over the chains' draws taken in order) gives
        one joint draw f_s ~ p(f(X_new) | y, theta_s), the method's posterior at theta_s
        (:meth:`posterior_at`, ``predict_f_full_cov``), and one y_s ~ p(y | f_s, theta_s), the
        likelihood's: together draws of the predictive integrated over the hyperparameters, whose
        moments are :meth:`predict_f`'s mixture's.

        Parameters
        ----------
        X_new : array_like, shape (n, D), optional
            Inputs where f and y are drawn.
        max_draws : int, default PREDICT_DRAWS
            At most this many hyperparameter draws (all chains together) at X_new; each costs an
            evaluation of the method's posterior.
        seed : int or None, default 0
            Seed of the draws of f and y.

        Returns
        -------
        arviz.InferenceData (ArviZ 0.x) or xarray.DataTree (ArviZ 1.x)
            Groups ``posterior``: the hyperparameters (:attr:`draws`: every draw without X_new,
            the kept draws, with their original ``draw`` coordinate, with it) and, given X_new,
            ``f_new`` (chain, draw, x_new) (and ``class`` for K latent functions);
            ``posterior_predictive`` (given X_new) ``y_new`` (chain, draw, x_new) (left out, with
            ``attrs["posterior_predictive_omitted"]``, for a likelihood that cannot draw y);
            ``sample_stats`` (:attr:`sample_stats`, at the same draws); ``observed_data`` ``y``
            (obs); ``constant_data`` (given X_new) ``X_new`` (x_new, feature).  The names differ
            from the training data's ``y`` (and a joint run's ``f``) because the draws are at
            other inputs: ArviZ pairs ``posterior_predictive`` with ``observed_data`` by name.
            Given X_new, ``attrs["sampling_jitter"]``: the largest jitter the Cholesky
            factorisations of the draws' predictive covariances added (as
            :meth:`gpdsl.Posterior.to_inference_data` records its one).

        Raises
        ------
        ValueError
            Invalid X_new, max_draws or seed; the noise variance at X_new unknown (a
            heteroscedastic likelihood with known variances).
        """
        from .io.arviz import inference_data, predictive_draws

        xr = xarray()
        observed = xr.Dataset({"y": ("obs", np.asarray(self.y))}, coords={"obs": np.arange(np.size(self.y))})
        if X_new is None:
            return inference_data(posterior=self.draws, sample_stats=self.sample_stats, observed_data=observed)
        P = output_count(self.model.kernel)
        if P is None:
            X_new = validate_inputs(X_new, "X_new", self.X.shape[1])
            points, asked = X_new, None
        else:
            # A multi-output run's (n, D) asks for every output: drawn at its long rows, labelled (x_new, output).
            asked = query(X_new, self.X.shape[1] - 1, P, "SampledPosterior.to_inference_data")
            points = validate_inputs(X_new, "X_new") if asked.every_output else asked.X
            X_new = asked.X
        check_seed("SampledPosterior.to_inference_data", seed)
        kept = self.kept_draws(max_draws)
        rng = np.random.default_rng(seed)
        f, y, omitted, jitter = [], [], None, 0.0
        for chain in range(self.result.lp.shape[0]):
            for draw in kept:
                f_s, y_s, omitted, jitter_s = predictive_draws(self.posterior_at(chain, draw), X_new, rng, ())
                f.append(f_s)
                y.append(y_s)
                jitter = max(jitter, jitter_s)
        shape = (self.result.lp.shape[0], kept.size)
        f = np.reshape(f, shape + f[0].shape)
        x_new = {"x_new": np.arange(points.shape[0])}
        f_dims, f_coords = ("chain", "draw", "x_new"), dict(x_new)
        rows, y_shape, y_coords = ("x_new",), shape + (X_new.shape[0],), dict(x_new)
        if asked is not None and asked.every_output:
            rows, y_shape = ("x_new", "output"), shape + (points.shape[0], P)
            f = f.reshape(y_shape)
            y_coords["output"] = self.output_labels
            f_dims, f_coords = f_dims + ("output",), {**f_coords, "output": self.output_labels}
        if f.ndim > len(f_dims):                 # K latent functions: a class axis last
            f_coords["class"] = self.model.likelihood.class_labels()
            f_dims += ("class",)
        posterior = self.draws.isel(draw=kept).assign(f_new=(f_dims, f)).assign_coords(f_coords)
        groups = {"posterior": posterior, "sample_stats": self.sample_stats.isel(draw=kept),
                  "observed_data": observed,
                  "constant_data": xr.Dataset({"X_new": (("x_new", "feature"), points)}, coords=x_new)}
        if omitted is None:
            groups["posterior_predictive"] = xr.Dataset(
                {"y_new": (("chain", "draw") + rows, np.reshape(y, y_shape))},
                coords={"chain": posterior["chain"].values, "draw": kept, **y_coords})
        else:
            warnings.warn(f"SampledPosterior.to_inference_data: no posterior_predictive group: {omitted}",
                          UserWarning, stacklevel=2)
        attrs = {"sampling_jitter": jitter}
        if omitted is not None:
            attrs["posterior_predictive_omitted"] = omitted
        return inference_data(attrs=attrs, **groups)

    # -- files -------------------------------------------------------------------------------------
    def to_xarray(self):
        """The run as one xarray.Dataset: ``posterior.<name>`` (the draws), ``sample_stats.<name>``,
        the unconstrained draws u, X, y, Z, each chain's adapted step size and inverse metric, the
        model in the attrs, and a multi-output run's ``output`` coordinate (its names, or 0..P-1).

        Returns
        -------
        xarray.Dataset
        """
        xr = xarray()
        data = {f"posterior.{name}": variable for name, variable in self.draws.data_vars.items()}
        data.update({f"sample_stats.{name}": variable for name, variable in self.sample_stats.data_vars.items()})
        data["X"] = (("obs", "feature"), self.X)
        data["y"] = ("obs", np.asarray(self.y, dtype=float))
        if self.Z is not None:
            data["Z"] = (("inducing", "feature"), self.Z)
        data["unconstrained_draws"] = (("chain", "draw", "parameter"), self.result.draws)
        data["adapted_step_size"] = ("chain", self.result.adapted_step_size)
        metric = self.result.inverse_metric
        data["inverse_metric"] = (("chain", "parameter") + (("parameter_bis",) if metric.ndim == 3 else ()), metric)
        held = [e.name for e in self.table.entries if e.fixed]
        # A multi-output run's names always go in the output coordinate, which the draws have
        # only where a drawn parameter has an output axis (not with W and kappa held).
        coords = {} if output_count(self.model.kernel) is None else {"output": self.output_labels}
        attrs = {"format": SAVE_FORMAT, "gpdsl_version": __version__, "model_spec": json.dumps(self.model.to_dict()),
                 "held": json.dumps(held), "max_tree_depth": self.result.max_tree_depth, "latent": self.latent}
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def save(self, path, *, follow_symlinks=True):
        """Write the run to netCDF (scipy backend), replacing ``path`` whole (as :meth:`gpdsl.Posterior.save`).

        The MAP posterior is not written (:attr:`map_posterior` of the loaded run is None).

        Parameters
        ----------
        path : str or os.PathLike
            Ending in ``.nc``.
        follow_symlinks : bool, default True
            A symbolic link at ``path`` is followed (its target is replaced); with False the link
            itself is replaced by the file (what ``gpdsl run`` does inside its ``--out`` folder).

        Raises
        ------
        TypeError
            ``path`` not a str or os.PathLike.
        ValueError
            ``path`` not ending in ``.nc``.
        """
        path = check_path("SampledPosterior.save", path)
        if os.path.splitext(path)[1].lower() != ".nc":
            raise ValueError(f"SampledPosterior.save: path must end in .nc (the run is written as netCDF), got {path!r}")
        with sigint_deferred():
            write_replacing(os.path.realpath(path) if follow_symlinks else path,
                            self.to_xarray().to_netcdf(engine="scipy"))

    @classmethod
    def load(cls, path, model):
        """A run written by :meth:`save`.

        Parameters
        ----------
        path : str or os.PathLike
        model : gpdsl.Model
            The declaration that was sampled.  The file's own copy of the model (its spec, with
            the labels the run coded y by) is read with ``type(model).from_dict`` and must declare
            the same kernel, inducing spec, inference and mean, and a likelihood of the same class.
            (This module sits below :mod:`gpdsl.model`, which imports it, so it takes the class
            from the caller rather than importing it.)

        Returns
        -------
        SampledPosterior
            With the draws, statistics and diagnostics of the saved run; ``map_posterior`` None.

        Raises
        ------
        ValueError
            A file that is not a saved run, or a run of another model.
        """
        xr = xarray()
        path = check_path("SampledPosterior.load", path)
        with xr.open_dataset(path, engine="scipy") as opened:
            ds = opened.load()
        if ds.attrs.get("format") != SAVE_FORMAT:
            raise ValueError(f"SampledPosterior.load: {path!r} is not a saved run (format "
                             f"{ds.attrs.get('format')!r}, expected {SAVE_FORMAT!r})")
        saved, given = json.loads(ds.attrs["model_spec"]), model.to_dict()
        differ = [part for part in ("kernel", "inducing", "inference", "mean") if saved.get(part) != given.get(part)]
        if saved["likelihood"]["type"] != given["likelihood"]["type"]:
            differ.append("likelihood")
        if differ:
            raise ValueError(f"SampledPosterior.load: {path!r} is a run of another model: its {differ} differ from "
                             f"the model given; the file's is {saved}")
        model = type(model).from_dict(saved)
        X, y = np.ascontiguousarray(ds["X"].values), ds["y"].values
        Z = np.ascontiguousarray(ds["Z"].values) if "Z" in ds else None
        table = model.parameter_table(X, Z, tuple(json.loads(ds.attrs["held"])))
        stats = {name: ds[f"sample_stats.{name}"].values for name in
                 ("lp", "diverging", "tree_depth", "n_steps", "step_size", "energy", "acceptance_rate")}
        # netCDF-3 holds 32-bit integers; the sampler's counts are int64.
        stats = {name: v.astype(np.int64) if v.dtype.kind == "i" else v for name, v in stats.items()}
        result = nuts.NUTSResult(draws=ds["unconstrained_draws"].values, **stats, adapted_step_size=ds["adapted_step_size"].values,
                                 inverse_metric=ds["inverse_metric"].values,
                                 max_tree_depth=int(ds.attrs["max_tree_depth"]))
        run = cls(model, table, result, X, y, Z, latent=ds.attrs.get("latent", "marginalised"))
        if "output" in ds.variables:      # the output coordinate: the run's names (none before they existed)
            run.output_names = saved_output_names(ds["output"].values, ds.sizes["output"])
        return run


def _mixture(means, variances):
    """Mean and variance of the equally weighted mixture of components with ``means`` and
    ``variances`` (S, ...): E[m], E[v] + E[(m - E[m])^2]."""
    mean = means.mean(axis=0)
    return mean, variances.mean(axis=0) + ((means - mean) ** 2).mean(axis=0)


def _mode(logp, u0):
    """The mode of ``logp`` by L-BFGS-B from ``u0``; where that fails (no finite value or point
    found), ``u0`` itself, with a :class:`SamplingWarning` naming the optimiser's message (the
    chains then start around the declared values, and warmup has further to go)."""
    # Imported here: `import gpdsl` does not pay scipy.optimize's import (issue 46).
    from scipy import optimize as sp_optimize

    def negated(u):
        value, gradient = logp(u)
        return (np.inf, np.zeros_like(u)) if not np.isfinite(value) else (-value, -gradient)

    result = sp_optimize.minimize(negated, u0, jac=True, method="L-BFGS-B")
    if np.isfinite(result.fun) and np.all(np.isfinite(result.x)):
        return result.x
    warnings.warn(f"Model.sample: the search for the mode of log p(u | y) failed (L-BFGS-B: {result.message}; "
                  f"log posterior {-result.fun:g} at its last point); the chains start around the declared "
                  f"values instead", SamplingWarning, stacklevel=4)
    return u0


def _starts(logp, centre, chains, rng):
    """Each chain's start: ``centre`` plus N(0, START_SCALE^2) noise, halved until logp is finite there."""
    starts = []
    for _ in range(chains):
        noise = START_SCALE * rng.standard_normal(centre.shape)
        for _ in range(START_TRIES):
            if np.isfinite(logp(centre + noise)[0]):
                break
            noise = noise / 2.0
        else:
            noise = np.zeros_like(centre)
        starts.append(centre + noise)
    return np.array(starts)


def sample(model, X, y, *, draws=1000, tune=1000, chains=4, seed=0, target_accept=0.8, fixed=(), cores=None,
           progress=False, latent="marginalised"):
    """Draw the hyperparameters' posterior by NUTS: what :meth:`gpdsl.Model.sample` runs.

    Parameters
    ----------
    model : gpdsl.Model
    X, y, draws, tune, chains, seed, target_accept, fixed, cores, progress, latent : object
        As :meth:`gpdsl.Model.sample` takes them.

    Returns
    -------
    SampledPosterior
    """
    fixed = check_fit_arguments(True, fixed, 0, seed, 1, progress, None)
    # The sampler's arguments are checked here, before the MAP fit, which would otherwise run in vain.
    check_positive_int("Model.sample", "chains", chains)
    check_positive_int("Model.sample", "draws", draws)
    check_nonnegative_int("Model.sample", "tune", tune)
    if not is_number(target_accept) or not 0.0 < float(target_accept) < 1.0:
        raise ValueError(f"Model.sample: target_accept must be a number in (0, 1), got {target_accept!r}")
    if cores is not None:
        check_positive_int("Model.sample", "cores", cores)
    X = validate_inputs(X)
    model = model.resolved(X, seed)
    _refuse_unmarginalised(model)
    from .latent_joint import JointLogPosterior, check_joint
    if latent not in ("marginalised", "joint"):
        raise ValueError(f"Model.sample: latent must be 'marginalised' (the method's evidence integrates f out) or "
                         f"'joint' (f drawn with the hyperparameters), got {latent!r}")
    if latent == "joint":
        check_joint(model, X.shape[0])
    # The priors are checked before the MAP fit, which would otherwise run in vain.
    check_priors(model.parameter_table(X, None, fixed))
    map_posterior = model.fit(X, y, fixed=fixed, seed=seed)
    model = map_posterior.model
    y_coded = model.likelihood.for_rows(X).coded_targets(y, X.shape[0])
    Z = map_posterior.state.Z if model.sparse else None
    held = fixed + (("inducing.Z",) if model.sparse and model.inducing.optimize and "inducing.Z" not in fixed else ())
    table = model.parameter_table(X, Z, held)
    if latent == "joint":
        logp = JointLogPosterior(model, table, X, y_coded)
        centre = logp.start()
    else:
        logp = LogPosterior(model, table, X, y_coded, Z)
        centre = table.pack(table.values())
    starts = _starts(logp, _mode(logp, centre), chains, np.random.default_rng(seed))
    # The joint target's v directions that the data pin are correlated (gpdsl.latent_joint.METRIC).
    result = nuts.sample(logp, starts, draws=draws, tune=tune, chains=chains, seed=seed, target_accept=target_accept,
                         cores=cores, progress=progress, metric=logp.METRIC if latent == "joint" else "diag")
    sampled = SampledPosterior(model, table, result, X, y_coded, Z, map_posterior, latent=latent)
    for problem in sampled.diagnostics.problems():
        warnings.warn(f"Model.sample: {problem}", SamplingWarning, stacklevel=4)
    return sampled
