"""Observation models (``gd.likelihoods``) behind one interface, :class:`Likelihood`.

Every likelihood is a small frozen dataclass that declares its hyperparameters (``entries``) and
answers the questions the inference methods ask of it, each with one signature.  ``values`` is
the dict of natural hyperparameter values and ``prefix`` the name its entries are stored under
(``"likelihood"``); arrays are per point, shape (n,):

========================================  ==========================================================
operation                                 used by
========================================  ==========================================================
``log_density(values, prefix, y, f)``     ArviZ export, the constant model
``log_density_derivatives``               Laplace (Rasmussen & Williams Alg. 3.1, 5.1): log p and
                                          d^k log p / df^k, k = 1, 2, 3
``log_density_param_derivatives``         Laplace's and the variational methods' gradients in the
                                          likelihood's own hyperparameters
``variational_expectations``              SVGP, VGP: E_N(f|m,v)[log p(y|f)] and its gradients in
                                          (m, v) and the hyperparameters (Gauss-Hermite unless a
                                          closed form is given)
``site_model(values, prefix)``            EP, QP: the jitted tilted-moment code and the parameter
                                          tuple the site sweeps take (:class:`SiteModel`)
``predictive`` / ``log_predictive``       Posterior.predict and Posterior.log_predictive
``sample(values, prefix, f, rng)``        posterior-predictive draws for ArviZ
``surrogate``                             greedy inducing selection before the first fit; the
                                          start of q where ``sign_symmetric`` (below)
``constant_model_log_likelihood``         the constant-model flag of ``Model.fit``
========================================  ==========================================================

A likelihood even in f (``sign_symmetric = True``: Poisson's square link) makes q's mean 0 a
saddle of a variational bound, so SVGP and VGP start q from the Gaussian fit to its surrogate
targets instead of from the prior.

Gaussian-noise likelihoods (``observation_noise = True``) also give their per-point noise
variances ``noise`` and its vector-Jacobian product ``noise_vjp``: the exact GP and the collapsed
VFE / FITC engines need nothing else.  Which method accepts which likelihood (and link) is
declared by the methods (:mod:`gpdsl.inference`), not here.

A new likelihood is one subclass here plus, for EP / QP, a module of jitted tilted-moment code
under :mod:`gpdsl._jit.likelihoods` (see :mod:`gpdsl._jit.projections`), which its ``site_model``
hands to the site sweeps: they take the functions and the parameter tuple as arguments, so no
sweep changes (``StudentT`` was added that way).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from scipy import special

from ._jit.likelihoods import bernoulli, gaussian, poisson, student_t
from ._jit.special import (digamma_half_excess, log1p_excess_array, logit_normal_logp_many,
                           student_t_log_norm_excess)
from .checks import ValueEquality, check_nonnegative_int
from .chunks import row_slices
from .parameters import check_hyperparameter, declared_value, entry

_LOG_2PI = np.log(2.0 * np.pi)


# The Student-t expectation rule: f within mean +- _WINDOW_SDS latent sds, on _PANELS panels of
# _PANEL_NODES Gauss-Legendre nodes each.
# Rows per block of the default variational expectations (their (rows, nodes) temporaries).
_EXPECTATION_BLOCK_ROWS = 8192
# Latent sds at or below this fraction of the Student-t width are treated as a point mass by its
# expectation rule.
_POINT_SD = 1e-8
_WINDOW_SDS = 12.0
_PANELS = 32
_PANEL_NODES = 8


@lru_cache(maxsize=1)
def _composite_legendre():
    """Nodes u (K,) on [0, 1] and weights (K,) of the composite Gauss-Legendre rule."""
    x, w = np.polynomial.legendre.leggauss(_PANEL_NODES)
    starts = np.arange(_PANELS) / _PANELS
    u = (starts[:, None] + (x[None, :] + 1.0) / (2.0 * _PANELS)).ravel()
    return u, np.tile(w / (2.0 * _PANELS), _PANELS)


# E[log f^2] under N(m, v): Gauss-Legendre nodes of Dawson's integral (a = m^2 / 2v below
# 1 / _LOG_SQUARE_ASYMPTOTIC_S) and the terms of the asymptotic series in s = 2v / m^2 above it.
# At the switch (s = 0.01) both are accurate to ~1e-14 relative in the value and both
# derivatives (at s = 0.02 the series' d/dv was off by 1e-11: its 13th term).
_LOG_SQUARE_NODES = 40
_LOG_SQUARE_ASYMPTOTIC_S = 0.01
_LOG_SQUARE_SERIES_TERMS = 12


@lru_cache(maxsize=1)
def _log_square_rule():
    """Gauss-Legendre nodes and weights on [-1, 1], and the series coefficients
    c_k = (2k - 1)!! / (2^k k), k = 1 .. _LOG_SQUARE_SERIES_TERMS."""
    x, w = np.polynomial.legendre.leggauss(_LOG_SQUARE_NODES)
    k = np.arange(1, _LOG_SQUARE_SERIES_TERMS + 1)
    return x, w, special.factorial2(2 * k - 1) / (2.0 ** k * k)


def expected_log_square(mean, var):
    """E[log f^2] under f ~ N(mean, var), and its derivatives in mean and var, in closed form.

    f^2 / v is noncentral chi-square with one degree of freedom and noncentrality 2a,
    a = m^2 / (2v): a Poisson(a) mixture of chi-square laws with 1 + 2j degrees of freedom, whose
    E[log] is log 2 + psi(1/2 + j).  Summing the mixture (d/da of the Poisson weights telescopes
    the digammas) gives ::

        E[log f^2] = log(2v) + h(a),   h(a) = psi(1/2) + 4 int_0^sqrt(a) D(x) dx,
        h'(a) = g(a) = 2 D(sqrt a) / sqrt a

    with D Dawson's integral (the quantity Lloyd et al. 2015 write through their G~ function, here
    through scipy's ``dawsn``): d/dm = g m / v, d/dv = (1 - a g) / v.  For large a (s = 1/a
    small, v -> 0 included) the asymptotic series of D gives
    E = log m^2 - sum_k c_k s^k, c_k = (2k - 1)!! / (2^k k), d/dm = (2/m)(1 + sum_k k c_k s^k),
    d/dv = -(2/m^2) sum_k k c_k s^(k-1); it is used below s = 0.01, where its truncation error
    is ~1e-14.  At m = v = 0 the expectation is -inf; a NaN mean or variance gives NaNs; a
    variance below 0 (rounding in a marginal variance) is taken as 0.

    Parameters
    ----------
    mean : ndarray, shape (n,)
        Means m of f.
    var : ndarray, shape (n,)
        Variances v of f, >= 0.

    Returns
    -------
    value : ndarray, shape (n,)
        E[log f^2].
    d_mean : ndarray, shape (n,)
        d value / d mean.
    d_var : ndarray, shape (n,)
        d value / d var.
    """
    x, w, c = _log_square_rule()
    mean, var = np.broadcast_arrays(np.asarray(mean, dtype=float), np.maximum(np.asarray(var, dtype=float), 0.0))
    m2 = mean * mean
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(m2 > 0.0, 2.0 * var / np.where(m2 > 0.0, m2, 1.0), np.inf)
    value, d_mean, d_var = (np.empty_like(m2) for _ in range(3))
    far = s < _LOG_SQUARE_ASYMPTOTIC_S
    if np.any(far):
        powers = s[far][:, None] ** np.arange(_LOG_SQUARE_SERIES_TERMS)      # s^(k-1)
        k_series = powers @ (np.arange(1, _LOG_SQUARE_SERIES_TERMS + 1) * c)  # sum k c_k s^(k-1)
        value[far] = np.log(m2[far]) - s[far] * (powers @ c)
        d_mean[far] = 2.0 / mean[far] * (1.0 + s[far] * k_series)
        d_var[far] = -2.0 / m2[far] * k_series
    near = ~far
    if np.any(near):
        v, m = var[near], mean[near]
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.where(m2[near] > 0.0, m2[near] / (2.0 * v), 0.0)
            root = np.sqrt(a)
            dawson_integral = 0.5 * root * (special.dawsn(root[:, None] * (x[None, :] + 1.0) * 0.5) @ w)
            g = np.where(root > 0.0, 2.0 * special.dawsn(root) / np.where(root > 0.0, root, 1.0), 2.0)
            value[near] = np.log(2.0 * v) + special.digamma(0.5) + 4.0 * dawson_integral
            d_mean[near] = g * m / v
            d_var[near] = (1.0 - a * g) / v
    unknown = np.isnan(mean) | np.isnan(var)   # m2 > 0 is False for NaN: it took the m = 0 branch
    for out in (value, d_mean, d_var):
        out[unknown] = np.nan
    return value, d_mean, d_var


class SiteModel(NamedTuple):
    """What EP's and QP's jitted site sweeps need of a likelihood: its jitted tilted-moment
    functions (:mod:`gpdsl._jit.projections`) and its parameters, a tuple of floats whose order
    is ``names`` (the hyperparameter names the evidence gradients go to).

    Parameters
    ----------
    functions : gpdsl._jit.projections.SiteFunctions
        The likelihood's jitted projection and log Z gradient (``SITE`` of its module under
        :mod:`gpdsl._jit.likelihoods`).
    params : tuple of float
        The likelihood's parameters, in the order of ``names``.
    names : tuple of str
        The hyperparameter names the evidence gradients go to.
    """

    functions: tuple
    params: tuple
    names: tuple


def _check_real_targets(owner, y):
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{owner}: y must be finite (no NaN or inf)")
    return y


@lru_cache(maxsize=4)
def gauss_hermite(points):
    """The probabilists' Gauss-Hermite rule of ``points`` nodes, weights normalised to sum to 1
    (E_N(0,1)[g] ~ sum w_k g(x_k)), computed once per size.

    Parameters
    ----------
    points : int
        Number of nodes K.

    Returns
    -------
    nodes : ndarray, shape (K,)
        Nodes x_k of the probabilists' (weight exp(-x^2/2)) rule.
    weights : ndarray, shape (K,)
        Weights summing to 1.
    """
    nodes, weights = np.polynomial.hermite_e.hermegauss(points)
    return nodes, weights / np.sqrt(2.0 * np.pi)


class Likelihood(ValueEquality):
    """Base class of the observation models: the operations of the module docstring.

    A subclass overrides what it supports; the defaults raise NotImplementedError naming the
    operation, which no registered method calls for a likelihood it does not accept.  Subclasses
    are frozen dataclasses (``@dataclass(frozen=True, eq=False)``, equality by value).
    """

    # fit(standardize=True) may shift and scale the targets (gpdsl.scaling) when this is True.
    standardizes_targets = False
    # Per-point Gaussian noise (noise / noise_vjp; predictions add it).
    observation_noise = False
    # Whether a method's Dask-chunked passes can run with this likelihood: its per-point terms
    # need no more of X than the row block they are computed on.
    supports_dask_chunks = True
    # Whether it holds values per training row (fit(subsample=) cannot subsample them).
    per_row_parameters = False
    # The usual cause of an evidence ridge (a kernel variance that grows without bound while the
    # objective barely changes) with this likelihood, for the fit's warning.
    ridge_cause = ("the kernel explains the targets ever better by growing (a trend or a scale it can only follow "
                   "that way: try standardize=True or a kernel with that structure)")
    # Whether p(y | f) = p(y | -f): q(f) centred at 0 is then a stationary point (a saddle) of a
    # variational bound, and the variational methods start q from the surrogate regression.
    sign_symmetric = False
    # Nodes of the Gauss-Hermite rule of the default variational expectations: 100 points
    # integrate log Phi and log sigma under latent sds up to ~3 to ~1e-12 (tests/test_likelihoods.py).
    quadrature_points = 100

    def _unsupported(self, operation):
        return NotImplementedError(f"{type(self).__name__} does not provide {operation}")

    def entries(self, prefix, X, fixed_names=()):
        """The hyperparameter entries (:class:`gpdsl.parameters.Entry`), named ``prefix.<name>``.

        Parameters
        ----------
        prefix : str
            Name prefix of the entries (``"likelihood"``).
        X : ndarray, shape (N, D)
            Training inputs (their number and width size per-point or per-feature parameters).
        fixed_names : collection of str, optional
            Entry names held at their declared value.

        Returns
        -------
        list of gpdsl.parameters.Entry
        """
        return []

    def prepare_targets(self, y):
        """Validated targets in the coding the other operations use.

        Parameters
        ----------
        y : ndarray, shape (N,)
            Checked float targets.

        Returns
        -------
        ndarray, shape (N,)

        Raises
        ------
        ValueError
            If the targets are not valid for the likelihood.
        """
        return _check_real_targets(type(self).__name__, y)

    def log_density(self, values, prefix, y, f):
        """log p(y | f), elementwise (any shape broadcasting y against f).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.

        Returns
        -------
        ndarray
            The broadcast shape of y and f.
        """
        return self.log_density_derivatives(values, prefix, y, f)[0]

    def log_density_derivatives(self, values, prefix, y, f):
        """(log p, d/df, d^2/df^2, d^3/df^3 of log p(y | f)), elementwise, arrays (n,).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.

        Returns
        -------
        tuple of 4 ndarray
            log p, d log p/df, d^2 log p/df^2, d^3 log p/df^3, each of the broadcast shape of y and f.

        References
        ----------
        Rasmussen & Williams (2006), Algorithms 3.1 and 5.1 (Laplace's Newton steps and gradients).
        """
        raise self._unsupported("derivatives of its log density")

    def log_density_param_derivatives(self, values, prefix, y, f, derivatives=None):
        """{``prefix.<name>``: (d log p / d theta, d^2 log p / df d theta, d^3 log p / df^2 d theta)}
        for each scalar hyperparameter theta, arrays (n,); empty without hyperparameters.
        ``derivatives``: :meth:`log_density_derivatives` at the same arguments when the caller
        has them (a parameter that shifts f, the Bernoulli bias, reuses them).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.
        derivatives : tuple of 4 ndarray, optional
            :meth:`log_density_derivatives` at the same arguments.

        Returns
        -------
        dict of str to tuple of 3 ndarray
            ``{"<prefix>.<name>": (d log p/d theta, d^2 log p/df d theta, d^3 log p/df^2 d theta)}``.
        """
        raise self._unsupported("derivatives of its log density in its hyperparameters")

    def expectation_rule(self, values, prefix, y, mean, var):
        """A quadrature rule for E_N(f | mean_n, var_n)[g(f, y_n)]: nodes f (n, K), weights
        (n, K) or (K,) (sum_k w_nk g(f_nk)), and the standard nodes x (K,) where f = mean + sd x
        (None for a rule placed otherwise).  The default is the ``quadrature_points``
        Gauss-Hermite rule, exact for polynomials and accurate for log densities that are smooth
        on the scale of the latent sd (probit, logit); likelihoods narrower than that override it.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,)
            Targets as :meth:`prepare_targets` codes them.
        mean : ndarray, shape (n,)
            Means of q(f_n).
        var : ndarray, shape (n,)
            Variances of q(f_n), >= 0.

        Returns
        -------
        f : ndarray, shape (n, K)
            Nodes in f.
        weights : ndarray, shape (n, K) or (K,)
            Weights.
        nodes : ndarray, shape (K,), or None
            Standard nodes x with f = mean + sd x, or None.
        """
        nodes, weights = gauss_hermite(self.quadrature_points)
        return mean[:, None] + np.sqrt(np.maximum(var, 0.0))[:, None] * nodes[None, :], weights, nodes

    def variational_expectations(self, values, prefix, y, mean, var):
        """E_q[log p(y_n | f_n)] under q(f_n) = N(mean_n, var_n) and its gradients.

        Returns (ve, d_mean, d_var, param_grads): arrays (n,), and param_grads =
        {``prefix.<name>``: d sum_n ve_n / d theta}, by :meth:`expectation_rule` over
        :meth:`log_density_derivatives`: d/d mean = E_q[d log p / df] (exact for the rule's sum
        too).  For a rule of standard nodes, ve = sum_k w_k log p(y | m + s x_k) is differentiated
        as it stands, d/d var = sum_k w_k x_k d log p / df / (2 s), so that an optimiser sees one
        consistent function (1/2 E_q[d^2 log p / df^2], Opper & Archambeau 2009 eq. 8, differs
        from it by the rule's error: 1e-3 for the probit at var 80 with 100 nodes); otherwise, and
        at var = 0, 1/2 E_q[d^2 log p / df^2].

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,)
            Targets as :meth:`prepare_targets` codes them.
        mean : ndarray, shape (n,)
            Means of q(f_n).
        var : ndarray, shape (n,)
            Variances of q(f_n), >= 0.

        Returns
        -------
        ve : ndarray, shape (n,)
            E_q[log p(y_n | f_n)].
        d_mean : ndarray, shape (n,)
            d ve_n / d mean_n.
        d_var : ndarray, shape (n,)
            d ve_n / d var_n.
        param_grads : dict of str to ndarray
            d sum_n ve_n / d theta for each hyperparameter theta.
        """
        n = mean.shape[0]
        if n > _EXPECTATION_BLOCK_ROWS:
            # The rule's (rows, nodes) temporaries are kept to blocks of rows: a chunk of 10^5
            # rows with 100 nodes would otherwise hold ~1 GB of them.
            blocks = [self.variational_expectations(values, prefix, y[s], mean[s], var[s])
                      for s in row_slices(n, _EXPECTATION_BLOCK_ROWS)]
            grads = {name: sum(b[3][name] for b in blocks) for name in blocks[0][3]}
            return tuple(np.concatenate([b[i] for b in blocks]) for i in range(3)) + (grads,)
        f, weights, nodes = self.expectation_rule(values, prefix, y, mean, var)
        yy = np.broadcast_to(y[:, None], f.shape)
        derivatives = self.log_density_derivatives(values, prefix, yy, f)
        logp, d1, d2, _ = derivatives
        params = self.log_density_param_derivatives(values, prefix, yy, f, derivatives=derivatives)
        grads = {name: np.array(np.sum(parts[0] * weights)) for name, parts in params.items()}
        d_var = 0.5 * np.sum(d2 * weights, axis=1)
        if nodes is not None:
            sd = np.sqrt(np.maximum(var, 0.0))
            with np.errstate(divide="ignore", invalid="ignore"):
                d_var = np.where(sd > 0.0, np.sum(d1 * (weights * nodes), axis=1) / (2.0 * sd), d_var)
        return np.sum(logp * weights, axis=1), np.sum(d1 * weights, axis=1), d_var, grads

    def site_model(self, values, prefix):
        """The :class:`SiteModel` of EP's and QP's jitted site updates.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).

        Returns
        -------
        SiteModel
        """
        raise self._unsupported("EP/QP tilted moments")

    def predictive(self, values, prefix, f_mean, f_var):
        """Predictive summaries of y* under f* ~ N(f_mean, f_var): a dict of arrays (n,).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.

        Returns
        -------
        dict of str to ndarray
            Arrays (n,): ``y_mean``/``y_var`` or ``p``.
        """
        raise self._unsupported("a predictive distribution")

    def log_predictive(self, values, prefix, f_mean, f_var, y):
        """log p(y* | x*) = log E_N(f*|f_mean,f_var)[p(y* | f*)], arrays (n,).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.
        y : ndarray, shape (n,)
            Targets at the new inputs, coded as :meth:`prepare_targets` returns them.

        Returns
        -------
        ndarray, shape (n,)
            log p(y_n | x_n) under f ~ N(f_mean, f_var).
        """
        raise self._unsupported("a log predictive density")

    def sample(self, values, prefix, f, rng):
        """Draws of y given draws of f (any shape), for posterior-predictive checks.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f : ndarray
            Draws of the latent function (any shape, e.g. (chains, draws, n)).
        rng : numpy.random.Generator
            The random generator.

        Returns
        -------
        ndarray
            Draws of y, the shape of ``f``.
        """
        raise self._unsupported("sampling")

    def surrogate(self, values, prefix, X, y):
        """(weights w (N,), weighted targets r (N,)) of a Gaussian pseudo-regression (noise 1/w,
        targets r/w) that greedy inducing selection scores before the first fit.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        X : ndarray, shape (N, D)
            Training inputs.
        y : ndarray, shape (N,)
            Training targets, coded.

        Returns
        -------
        weights : ndarray, shape (N,)
            Pseudo-noise precisions w_n (noise 1/w_n).
        targets : ndarray, shape (N,)
            Weighted pseudo-targets r_n (targets r_n / w_n).
        """
        raise self._unsupported("a surrogate regression for greedy selection")

    def log_density_bound(self, values, prefix, y):
        """sum_n max_f log p(y_n | f), an upper bound on the log marginal likelihood of any prior
        (p(y) = E_prior[prod_n p(y_n | f_n)] <= prod_n max_f p(y_n | f)), or None where the
        likelihood does not give one.  ``Model.fit`` treats an evidence far above it as a
        numerical failure (EP's, from sites that lost all precision, reached 3e8 on 31 points).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (N,)
            Training targets, coded.

        Returns
        -------
        float or None
        """
        return None

    def constant_model_log_likelihood(self, values, prefix, y):
        """The objective of the constant model f = 0 that ``Model.fit`` flags fits against, or None.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (N,)
            Training targets, coded.

        Returns
        -------
        float or None
        """
        return None

    def describe(self):
        """A short text for summaries and attrs.

        Returns
        -------
        str
            The class name (with its link or noise model where it has one).
        """
        return type(self).__name__


class _GaussianNoise(Likelihood):
    """Shared by the Gaussian-noise likelihoods: the collapsed engines read ``noise``."""

    observation_noise = True

    def surrogate(self, values, prefix, X, y):
        """Weights 1/lambda_n and weighted targets y_n/lambda_n: the regression itself, which is
        what greedy inducing selection scores before the first fit.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        X : ndarray, shape (N, D)
            Training inputs.
        y : ndarray, shape (N,)
            Training targets, coded.

        Returns
        -------
        weights : ndarray, shape (N,)
            Pseudo-noise precisions w_n (noise 1/w_n).
        targets : ndarray, shape (N,)
            Weighted pseudo-targets r_n (targets r_n / w_n).
        """
        w = 1.0 / self.noise(values, prefix, X)
        return w, w * y


@dataclass(frozen=True, eq=False)
class Gaussian(_GaussianNoise):
    """Homoscedastic noise: y_n = f(x_n) + eps_n, eps_n ~ N(0, variance).

    Parameters
    ----------
    variance : float, Fixed or prior, default 1.0
        Positive noise variance (a scalar).

    Raises
    ------
    TypeError, ValueError
        If ``variance`` is not a positive finite scalar, ``Fixed`` or prior.
    """

    variance: object = 1.0
    # fit(standardize=True) may shift and scale the targets: y -> a + b y maps this model to
    # itself with a constant mean and variances times b^2 (gpdsl.scaling).
    standardizes_targets = True

    def __post_init__(self):
        check_hyperparameter("Gaussian", "variance", self.variance, ndim_max=0)

    def entries(self, prefix, X, fixed_names=()):
        return [entry(f"{prefix}.variance", self.variance, fixed_names=fixed_names)]

    @staticmethod
    def _variance(values, prefix):
        """The noise variance as a float; FloatingPointError where it is not positive, which the
        declaration rules out and only an optimiser's exp(log variance) underflowing to 0 (a
        constant or noiseless target drives it there) produces: the optimiser's signal to step
        back, where the divisions by it would raise a bare ZeroDivisionError."""
        s2 = float(values[f"{prefix}.variance"])
        if not s2 > 0.0:
            raise FloatingPointError(f"Gaussian: the noise variance {s2!r} is not positive (it underflowed to 0: "
                                     "the target looks noiseless to the model; fix a small variance or add a "
                                     "prior on it)")
        return s2

    def log_density_bound(self, values, prefix, y):
        # The density at f = y.
        return float(-0.5 * y.size * np.log(2.0 * np.pi * self._variance(values, prefix)))

    def noise(self, values, prefix, X):
        """Per-point noise variances lambda_n at X (the homoscedastic variance).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        X : ndarray, shape (n, D)
            Inputs.

        Returns
        -------
        ndarray, shape (n,)
            The variance at every input.
        """
        return np.full(X.shape[0], float(values[f"{prefix}.variance"]))

    def noise_vjp(self, values, prefix, X, g):
        """Vector-Jacobian product of :meth:`noise`: sum_n g_n d lambda_n / d theta.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        X : ndarray, shape (n, D)
            Inputs.
        g : ndarray, shape (n,)
            The adjoint d objective / d lambda.

        Returns
        -------
        dict of str to ndarray
            ``{"<prefix>.variance": sum_n g_n}``.
        """
        return {f"{prefix}.variance": np.array(np.sum(g))}

    def log_density_derivatives(self, values, prefix, y, f):
        """log N(y | f, s2), (y - f)/s2, -1/s2, 0.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.

        Returns
        -------
        tuple of 4 ndarray
            log p, d log p/df, d^2 log p/df^2, d^3 log p/df^3, each of the broadcast shape of y and f.
        """
        s2 = self._variance(values, prefix)
        r = y - f
        return -0.5 * (_LOG_2PI + np.log(s2) + r * r / s2), r / s2, np.full_like(r, -1.0 / s2), np.zeros_like(r)

    def log_density_param_derivatives(self, values, prefix, y, f, derivatives=None):
        """Derivatives of log N(y | f, s2) in s2 and their f-derivatives.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.
        derivatives : tuple of 4 ndarray, optional
            Not used.

        Returns
        -------
        dict of str to tuple of 3 ndarray
            ``{"<prefix>.<name>": (d log p/d theta, d^2 log p/df d theta, d^3 log p/df^2 d theta)}``.
        """
        s2 = self._variance(values, prefix)
        r = y - f
        return {f"{prefix}.variance": (0.5 * (r * r / s2 - 1.0) / s2, -r / (s2 * s2), np.full_like(r, 1.0 / (s2 * s2)))}

    def variational_expectations(self, values, prefix, y, mean, var):
        """Closed form: -1/2 log 2 pi s2 - ((y - m)^2 + v) / (2 s2).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,)
            Targets as :meth:`prepare_targets` codes them.
        mean : ndarray, shape (n,)
            Means of q(f_n).
        var : ndarray, shape (n,)
            Variances of q(f_n), >= 0.

        Returns
        -------
        ve : ndarray, shape (n,)
            E_q[log p(y_n | f_n)].
        d_mean : ndarray, shape (n,)
            d ve_n / d mean_n.
        d_var : ndarray, shape (n,)
            d ve_n / d var_n.
        param_grads : dict of str to ndarray
            d sum_n ve_n / d theta for each hyperparameter theta.
        """
        s2 = self._variance(values, prefix)
        r2v = (y - mean) ** 2 + var
        ve = -0.5 * (_LOG_2PI + np.log(s2) + r2v / s2)
        grads = {f"{prefix}.variance": np.array(0.5 * np.sum(r2v / s2 - 1.0) / s2)}
        return ve, (y - mean) / s2, np.full_like(mean, -0.5 / s2), grads

    def site_model(self, values, prefix):
        """The Gaussian site model, parameter (variance,).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).

        Returns
        -------
        SiteModel
        """
        return SiteModel(gaussian.SITE, (float(values[f"{prefix}.variance"]),), (f"{prefix}.variance",))

    def predictive(self, values, prefix, f_mean, f_var):
        """Predictive mean and variance of y* under f* ~ N(f_mean, f_var).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.

        Returns
        -------
        dict of str to ndarray
            Arrays (n,): ``y_mean`` = f_mean, ``y_var`` = f_var + variance.
        """
        return {"y_mean": f_mean, "y_var": f_var + float(values[f"{prefix}.variance"])}

    def log_predictive(self, values, prefix, f_mean, f_var, y):
        """log N(y | f_mean, f_var + variance).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.
        y : ndarray, shape (n,)
            Targets at the new inputs, coded as :meth:`prepare_targets` returns them.

        Returns
        -------
        ndarray, shape (n,)
            log p(y_n | x_n) under f ~ N(f_mean, f_var).
        """
        total = f_var + float(values[f"{prefix}.variance"])
        return -0.5 * (np.log(2.0 * np.pi * total) + (y - f_mean) ** 2 / total)

    def sample(self, values, prefix, f, rng):
        """y = f + sqrt(variance) eps, eps ~ N(0, 1).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f : ndarray
            Draws of the latent function (any shape, e.g. (chains, draws, n)).
        rng : numpy.random.Generator
            The random generator.

        Returns
        -------
        ndarray
            Draws of y, the shape of ``f``.
        """
        return f + np.sqrt(float(values[f"{prefix}.variance"])) * rng.standard_normal(np.shape(f))

    def constant_model_log_likelihood(self, values, prefix, y):
        """log N(y | 0, s^2 I) at its best s^2 = mean(y^2): white noise (f = 0), where VFE and
        the exact GP go as the kernel variance goes to 0 and FITC as the inducing points stop
        explaining anything (``Model.fit`` flags fits no better than it; raw Boston housing:
        VFE noise 582, FITC kernel variance = noise = 292, mean(y^2) = 584).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (N,)
            Training targets.

        Returns
        -------
        float
        """
        return -0.5 * y.size * (np.log(2.0 * np.pi * np.mean(y * y)) + 1.0)


@dataclass(frozen=True, eq=False)
class HeteroscedasticGaussian(_GaussianNoise):
    """Per-point noise: y_n = f(x_n) + eps_n, eps_n ~ N(0, lambda_n)  (thesis ch. 3, eq. 3.1).

    Give exactly one of

    * ``variance``: the known variances lambda, an array of shape (N,) matching the training
      data (not learned); predictions of y at new inputs then need ``noise_variance=``;
    * ``degree``: a learnable log-polynomial noise model (thesis 3.1.3 fits "a polynomial
      likelihood with learnable parameters"; the log keeps lambda positive):
      ``log lambda(x) = c_0 + sum_{k=1..degree} sum_d c_{k,d} x_d^k``, coefficients ordered
      ``[c_0, c_{1,1..D}, c_{2,1..D}, ...]``; default start c_0 = log(0.1), the rest 0.

    The noise depends on x, so the per-point operations of :class:`Likelihood` (which see only
    y and f) are not provided: it is a model for the exact GP and the collapsed engines.

    Parameters
    ----------
    variance : array_like of shape (N,), optional
        Known positive per-point variances of the training targets.
    degree : int, optional
        Degree (>= 0) of the learnable log-polynomial noise model.
    coefficients : array_like of shape (1 + degree * D,), Fixed or prior, optional
        Starting coefficients of the noise model (with ``degree``).

    Raises
    ------
    TypeError
        Unless exactly one of ``variance`` and ``degree`` is given.
    ValueError
        A ``variance``, ``degree`` or ``coefficients`` out of range; a ``variance`` or
        ``coefficients`` of the wrong shape is reported when the model is fitted.
    """

    # The known variances and the noise model are in the targets' units: fit(standardize=True)
    # scales X only.
    standardizes_targets = False

    variance: object = None
    degree: int | None = None
    coefficients: object = None

    def __post_init__(self):
        if (self.variance is None) == (self.degree is None):
            raise TypeError("HeteroscedasticGaussian: give exactly one of variance= (known per-point "
                            "variances) or degree= (learnable polynomial noise model)")
        if self.variance is not None:
            check_hyperparameter("HeteroscedasticGaussian", "variance", self.variance)
        else:
            check_nonnegative_int("HeteroscedasticGaussian", "degree", self.degree)
            if self.coefficients is not None:
                check_hyperparameter("HeteroscedasticGaussian", "coefficients", self.coefficients,
                                     positive=False)

    @property
    def known(self):
        """bool: True when the variances are given (``variance=``), not learned."""
        return self.variance is not None

    @property
    def supports_dask_chunks(self):
        # The noise model's polynomial features of X are formed in memory.
        return self.known

    @property
    def per_row_parameters(self):
        return self.known

    def features(self, X):
        """Polynomial design matrix (n, 1 + degree * D).

        Parameters
        ----------
        X : ndarray, shape (n, D)
            Inputs.

        Returns
        -------
        ndarray, shape (n, 1 + degree * D)
            Columns [1, X, X^2, ..., X^degree] (elementwise powers).
        """
        cols = [np.ones((X.shape[0], 1))] + [X ** k for k in range(1, self.degree + 1)]
        return np.hstack(cols)

    def entries(self, prefix, X, fixed_names=()):
        n, dim = X.shape
        if self.known:
            var = declared_value(self.variance)
            if var.shape != (n,):
                raise ValueError(f"HeteroscedasticGaussian: variance must have shape ({n},) to match y, "
                                 f"got {var.shape}")
            return []
        size = 1 + self.degree * dim
        if self.coefficients is None:
            start = np.zeros(size)
            start[0] = np.log(0.1)
            return [entry(f"{prefix}.coefficients", start, positive=False, fixed_names=fixed_names)]
        coef = declared_value(self.coefficients)
        if coef.shape != (size,):
            raise ValueError(f"HeteroscedasticGaussian: coefficients must have shape ({size},) "
                             f"for degree {self.degree} and {dim} features, got {coef.shape}")
        return [entry(f"{prefix}.coefficients", self.coefficients, positive=False, fixed_names=fixed_names)]

    def noise(self, values, prefix, X):
        """Per-point noise variances lambda_n at X.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        X : ndarray, shape (n, D)
            Inputs.

        Returns
        -------
        ndarray, shape (n,)
            The known variances (training inputs only), or exp(features(X) @ coefficients).
        """
        if self.known:
            return declared_value(self.variance)
        return np.exp(self.features(X) @ values[f"{prefix}.coefficients"])

    def noise_vjp(self, values, prefix, X, g):
        """Vector-Jacobian product of :meth:`noise` in the coefficients.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        X : ndarray, shape (n, D)
            Inputs.
        g : ndarray, shape (n,)
            The adjoint d objective / d lambda.

        Returns
        -------
        dict of str to ndarray
            ``{"<prefix>.coefficients": features(X)^T (g * lambda)}``; empty for known variances.
        """
        if self.known:
            return {}
        lam = self.noise(values, prefix, X)
        return {f"{prefix}.coefficients": self.features(X).T @ (g * lam)}

    def describe(self):
        """``HeteroscedasticGaussian(known)`` or ``HeteroscedasticGaussian(degree=k)``.

        Returns
        -------
        str
        """
        return "HeteroscedasticGaussian(known)" if self.known else f"HeteroscedasticGaussian(degree={self.degree})"


@dataclass(frozen=True, eq=False)
class Bernoulli(Likelihood):
    """Binary labels through a link: p(y | f) = Phi(y (f + bias)) for ``link="probit"``
    (Naish-Guzman & Holden eq. 4; the bias beta is a learnable, unconstrained hyperparameter)
    or sigma(y (f + bias)) for ``link="logit"``.  Labels may be {0, 1}, {-1, +1} or bool.

    Parameters
    ----------
    link : {"probit", "logit"}, default "probit"
        The link from f to p(y = +1 | f).
    bias : float, Fixed or prior, default 0.0
        The learnable bias beta added to f (unconstrained scalar).

    Raises
    ------
    ValueError
        An unknown link.
    TypeError, ValueError
        A bias that is not a finite scalar, ``Fixed`` or prior.
    """

    link: str = "probit"
    ridge_cause = "the latent scale (with the bias) grows without bound when the classes are nearly separable"
    bias: object = 0.0

    def __post_init__(self):
        if self.link not in ("probit", "logit"):
            raise ValueError(f"Bernoulli: link must be 'probit' or 'logit', got {self.link!r}")
        check_hyperparameter("Bernoulli", "bias", self.bias, positive=False, ndim_max=0)

    def entries(self, prefix, X, fixed_names=()):
        return [entry(f"{prefix}.bias", self.bias, positive=False, fixed_names=fixed_names)]

    def prepare_targets(self, y):
        """Labels as float +-1; raises unless y is coded 0/1, -1/+1 or bool.  Labels of one class
        only are accepted (as GPML and GPflow do): the fit then drives p towards that class, and a
        classifier fit no better than the constant model warns (``Model.fit``).

        Parameters
        ----------
        y : ndarray, shape (N,)
            Checked float targets.

        Returns
        -------
        ndarray, shape (N,)
            Labels -1.0 / +1.0.

        Raises
        ------
        ValueError
            If the targets are not valid for the likelihood.
        """
        values = set(np.unique(y).tolist())
        if not values <= {-1.0, 1.0} and not values <= {0.0, 1.0}:
            raise ValueError(f"Bernoulli: y must be binary, coded {{0, 1}}, {{-1, +1}} or bool; "
                             f"got values {sorted(values)[:6]}")
        return np.where(y > 0, 1.0, -1.0)

    def _bias(self, values, prefix):
        return float(values[f"{prefix}.bias"])

    def site_model(self, values, prefix):
        """The probit or logit site model, parameter (bias,).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).

        Returns
        -------
        SiteModel
        """
        functions = bernoulli.PROBIT_SITE if self.link == "probit" else bernoulli.LOGIT_SITE
        return SiteModel(functions, (self._bias(values, prefix),), (f"{prefix}.bias",))

    def predictive(self, values, prefix, f_mean, f_var):
        """p(y* = +1) = E[p(+1 | f*)] under N(f_mean, f_var), arrays (n,) -> {"p": (n,)}; see
        :meth:`log_predictive` for how it is computed.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.

        Returns
        -------
        dict of str to ndarray
            Arrays (n,): ``p`` = p(y* = +1).
        """
        return {"p": np.exp(self.log_predictive(values, prefix, f_mean, f_var, np.ones_like(f_mean)))}

    def log_predictive(self, values, prefix, f_mean, f_var, y):
        """log p(y* | x*) = log E[p(y* | f*)] under N(f_mean, f_var) for labels y in {-1, +1},
        arrays (n,), computed in log space (finite for confident predictions either way).

        Probit: log Phi(y (f_mean + bias) / sqrt(1 + f_var)) (Naish-Guzman & Holden 3.1).  Logit:
        log E[sigma(y (f* + bias))], Passerello eq. (C.2) with 100-point Gauss-Hermite quadrature
        up to latent sd 1 and, beyond, a composite Gauss-Legendre rule that resolves sigma's
        transition (:func:`gpdsl._jit.special.logit_normal_logp`; relative error < 1e-15 against
        50-digit quadrature for any mean and sd, where 100-point Gauss-Hermite alone is 1e-2 off at
        sd 20).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.
        y : ndarray, shape (n,)
            Targets at the new inputs, in {-1, +1}.

        Returns
        -------
        ndarray, shape (n,)
            log p(y_n | x_n) under f ~ N(f_mean, f_var).
        """
        shifted = y * (f_mean + self._bias(values, prefix))
        if self.link == "probit":
            return special.log_ndtr(shifted / np.sqrt(1.0 + f_var))
        nodes, weights = gauss_hermite(100)
        return logit_normal_logp_many(np.ascontiguousarray(shifted, dtype=float),
                                      np.sqrt(np.maximum(np.asarray(f_var, dtype=float), 0.0)),
                                      nodes, np.log(weights))

    def log_density_bound(self, values, prefix, y):
        # p(y | f) -> 1 as y (f + bias) -> infinity.
        return 0.0

    def log_density(self, values, prefix, y, f):
        """log p(y | f) for labels y in {-1, +1}, elementwise.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.

        Returns
        -------
        ndarray
            The broadcast shape of y and f.
        """
        z = y * (f + self._bias(values, prefix))
        return special.log_ndtr(z) if self.link == "probit" else -np.logaddexp(0.0, -z)

    def log_density_derivatives(self, values, prefix, y, f):
        """log p(y | f) and its first three derivatives in f, elementwise.  With
        z = y (f + bias): probit, r = phi(z) / Phi(z) from log space, d1 = y r, d2 = -r (z + r),
        d3 = y r ((z + r)(z + 2 r) - 1); logit, p = sigma(z), d1 = y (1 - p), d2 = -p (1 - p),
        d3 = -y p (1 - p)(1 - 2 p).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.

        Returns
        -------
        tuple of 4 ndarray
            log p, d log p/df, d^2 log p/df^2, d^3 log p/df^3, each of the broadcast shape of y and f.
        """
        z = y * (f + self._bias(values, prefix))
        if self.link == "probit":
            log_cdf = special.log_ndtr(z)
            r = np.exp(-0.5 * z * z - 0.5 * _LOG_2PI - log_cdf)
            return log_cdf, y * r, -r * (z + r), y * r * ((z + r) * (z + 2.0 * r) - 1.0)
        p, q = special.expit(z), special.expit(-z)
        return -np.logaddexp(0.0, -z), y * q, -p * q, -y * p * q * (q - p)

    def log_density_param_derivatives(self, values, prefix, y, f, derivatives=None):
        """The bias shifts f: its derivatives are d1, d2, d3.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.
        derivatives : tuple of 4 ndarray, optional
            :meth:`log_density_derivatives` at the same arguments.

        Returns
        -------
        dict of str to tuple of 3 ndarray
            ``{"<prefix>.<name>": (d log p/d theta, d^2 log p/df d theta, d^3 log p/df^2 d theta)}``.
        """
        if derivatives is None:
            derivatives = self.log_density_derivatives(values, prefix, y, f)
        return {f"{prefix}.bias": derivatives[1:]}

    def sample(self, values, prefix, f, rng):
        """Labels drawn with p(y = +1 | f).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f : ndarray
            Draws of the latent function (any shape, e.g. (chains, draws, n)).
        rng : numpy.random.Generator
            The random generator.

        Returns
        -------
        ndarray
            Labels -1.0 / +1.0, the shape of ``f``.
        """
        p = np.exp(self.log_density(values, prefix, np.ones_like(f), f))
        return np.where(rng.uniform(size=np.shape(f)) < p, 1.0, -1.0)

    def surrogate(self, values, prefix, X, y):
        """The Pólya-Gamma pseudo-regression at c = 0 (theta = 1/4, weighted targets
        y/2 - bias/4): what greedy inducing selection scores before the first fit.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        X : ndarray, shape (N, D)
            Training inputs.
        y : ndarray, shape (N,)
            Training targets, coded.

        Returns
        -------
        weights : ndarray, shape (N,)
            Pseudo-noise precisions w_n (noise 1/w_n).
        targets : ndarray, shape (N,)
            Weighted pseudo-targets r_n (targets r_n / w_n).
        """
        w = np.full(X.shape[0], 0.25)
        return w, 0.5 * y - w * self._bias(values, prefix)

    def constant_model_log_likelihood(self, values, prefix, y):
        """sum_n log p(y_n | f_n = 0): the classifier's limit as the kernel variance goes to 0
        (``Model.fit`` flags fits no better than it).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (N,)
            Labels -1 / +1.

        Returns
        -------
        float
        """
        return float(np.sum(self.log_density(values, prefix, y, np.zeros_like(y))))

    def describe(self):
        """``Bernoulli(probit)`` or ``Bernoulli(logit)``.

        Returns
        -------
        str
        """
        return f"Bernoulli({self.link})"


@dataclass(frozen=True, eq=False)
class Poisson(Likelihood):
    """Counts with rate f^2 (``link="square"``, QP paper Appendix C.2): p(y | f) = f^(2y) e^(-f^2) / y!.

    Parameters
    ----------
    link : {"square"}, default "square"
        The link: rate f^2.

    Raises
    ------
    ValueError
        Any other link.
    """

    link: str = "square"
    sign_symmetric = True

    def __post_init__(self):
        if self.link != "square":
            raise ValueError(f"Poisson: link must be 'square', got {self.link!r}")

    def prepare_targets(self, y):
        """The counts as they are; raises unless they are non-negative integers.

        Parameters
        ----------
        y : ndarray, shape (N,)
            Checked float targets.

        Returns
        -------
        ndarray, shape (N,)

        Raises
        ------
        ValueError
            If the targets are not valid for the likelihood.
        """
        if np.any(y < 0) or np.any(y != np.round(y)):
            raise ValueError("Poisson: y must hold non-negative integer counts")
        return y

    def site_model(self, values, prefix):
        """The square-link Poisson site model (QP paper Appendix C.2), no parameters.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).

        Returns
        -------
        SiteModel
        """
        return SiteModel(poisson.SITE, (), ())

    def surrogate(self, values, prefix, X, y):
        """Unit weights and targets sqrt(y + 1/2), the positive branch f ~ sqrt(y) that EP's
        sites start from: what greedy inducing selection scores before the first fit.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        X : ndarray, shape (N, D)
            Training inputs.
        y : ndarray, shape (N,)
            Training targets, coded.

        Returns
        -------
        weights : ndarray, shape (N,)
            Pseudo-noise precisions w_n (noise 1/w_n).
        targets : ndarray, shape (N,)
            Weighted pseudo-targets r_n (targets r_n / w_n).
        """
        return np.ones(X.shape[0]), np.sqrt(y + 0.5)

    @staticmethod
    def negative_binomial(f_mean, f_var):
        """Shape k and scale c of the Gamma law matched to g = f^2 (QP paper Appendix H, eq. 119).

        Parameters
        ----------
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.

        Returns
        -------
        k : ndarray, shape (n,)
            Shape (m^2 + v)^2 / (2 v (2 m^2 + v)).
        c : ndarray, shape (n,)
            Scale 2 v (2 m^2 + v) / (m^2 + v).
        """
        m2 = f_mean * f_mean
        spread = 2.0 * f_var * (2.0 * m2 + f_var)
        return (m2 + f_var) ** 2 / spread, spread / (m2 + f_var)

    def predictive(self, values, prefix, f_mean, f_var):
        """Mean and variance of the count under the negative-binomial predictive NB(k, c/(1+c)) (eq. 122).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.

        Returns
        -------
        dict of str to ndarray
            Arrays (n,): ``y_mean`` = k c, ``y_var`` = k c (1 + c).
        """
        # k c = m^2 + v and k c^2 = the spread, written out: at f_var = 0 (k infinite, c = 0) the
        # products would be NaN where the limit is the Poisson law of rate m^2.
        rate = f_mean * f_mean + f_var
        return {"y_mean": rate, "y_var": rate + 2.0 * f_var * (2.0 * f_mean * f_mean + f_var)}

    def log_predictive(self, values, prefix, f_mean, f_var, y):
        """log NB(y | k, c / (1 + c)) of eq. (122), elementwise.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.
        y : ndarray, shape (n,)
            Targets at the new inputs, coded as :meth:`prepare_targets` returns them.

        Returns
        -------
        ndarray, shape (n,)
            log p(y_n | x_n) under f ~ N(f_mean, f_var).
        """
        rate = f_mean * f_mean + f_var
        poisson = special.xlogy(y, rate) - rate - special.gammaln(y + 1.0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            k, c = self.negative_binomial(f_mean, f_var)
            # log Gamma(k + y) - log Gamma(k) = log Gamma(y) - log B(k, y): no cancellation of two
            # numbers of size k log k when the variance is small and k huge (0 for y = 0).
            y_pos = np.maximum(y, 1.0)
            log_rising = np.where(y > 0, special.gammaln(y_pos) - special.betaln(k, y_pos), 0.0)
            nb = log_rising - special.gammaln(y + 1.0) + special.xlogy(y, c) - (k + y) * np.log1p(c)
        # At f_var = 0 (c = 0, k infinite) the NB is its limit, the Poisson law of rate m^2.
        return np.where((c > 0.0) & np.isfinite(k), nb, poisson)

    def variational_expectations(self, values, prefix, y, mean, var):
        """Closed form: y E[log f^2] - (m^2 + v) - log y! (:func:`expected_log_square`); no
        hyperparameters.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,)
            Counts.
        mean : ndarray, shape (n,)
            Means of q(f_n).
        var : ndarray, shape (n,)
            Variances of q(f_n), >= 0.

        Returns
        -------
        ve : ndarray, shape (n,)
            E_q[log p(y_n | f_n)] (-inf where y_n > 0 and q(f_n) is a point mass at 0).
        d_mean : ndarray, shape (n,)
            d ve_n / d mean_n.
        d_var : ndarray, shape (n,)
            d ve_n / d var_n.
        param_grads : dict
            Empty.
        """
        log_square, d_mean, d_var = expected_log_square(mean, var)
        counted = y > 0.0   # 0 * E[log f^2] is 0 even where E[log f^2] is -inf
        with np.errstate(invalid="ignore"):
            terms = [np.where(counted, y * t, 0.0) for t in (log_square, d_mean, d_var)]
        ve = terms[0] - (mean * mean + var) - special.gammaln(y + 1.0)
        return ve, terms[1] - 2.0 * mean, terms[2] - 1.0, {}

    def log_density_bound(self, values, prefix, y):
        # The count's own rate, f^2 = y.
        return float(np.sum(special.xlogy(y, y) - y - special.gammaln(y + 1.0)))

    def log_density(self, values, prefix, y, f):
        """log Poisson(y | f^2), elementwise.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.

        Returns
        -------
        ndarray
            The broadcast shape of y and f.
        """
        return special.xlogy(2.0 * y, np.abs(f)) - f * f - special.gammaln(y + 1.0)

    def sample(self, values, prefix, f, rng):
        """Counts drawn from Poisson(f^2).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f : ndarray
            Draws of the latent function (any shape, e.g. (chains, draws, n)).
        rng : numpy.random.Generator
            The random generator.

        Returns
        -------
        ndarray
            Draws of y, the shape of ``f``.
        """
        return rng.poisson(f * f).astype(float)

    def describe(self):
        """``Poisson(square)``.

        Returns
        -------
        str
        """
        return f"Poisson({self.link})"


@dataclass(frozen=True, eq=False)
class StudentT(Likelihood):
    """Heavy-tailed regression noise: p(y | f) = Student-t(y | f, df, scale)
    = Gamma((df+1)/2) / (Gamma(df/2) sqrt(df pi) scale) (1 + (y - f)^2 / (df scale^2))^(-(df+1)/2)
    (GPML's ``likT``; GPflow's ``StudentT``).  ``df`` and ``scale`` are learnable positive
    hyperparameters (fix df with ``fit(fixed="likelihood.df")`` as GPflow does).

    Not log-concave: EP keeps its site precisions non-negative (as GPML's infEP), and the
    variational methods integrate it by Gauss-Hermite quadrature.

    The density and its derivatives are computed stably for any df, the Gaussian limit
    N(y | f, scale^2) included: the Gamma-function ratio by an asymptotic series in 1/df
    (:func:`gpdsl._jit.special.student_t_log_norm_excess`) and every df scale^2 + r^2 divided by df.
    A df above ``DF_MAX`` = 1e100 is used as 1e100: the density is then the Gaussian limit to a
    relative 1e-100 (r / scale)^4, and the bound keeps scale sqrt(df) and the tilted rule's
    coordinates of EP / QP (:mod:`gpdsl._jit.projections`) inside float64's range.

    Parameters
    ----------
    df : float, Fixed or prior, default 4.0
        Positive degrees of freedom (used as min(df, 1e100)).
    scale : float, Fixed or prior, default 1.0
        Positive scale.

    Raises
    ------
    TypeError, ValueError
        If ``df`` or ``scale`` is not a positive finite scalar, ``Fixed`` or prior.
    """

    df: object = 4.0
    scale: object = 1.0

    def __post_init__(self):
        check_hyperparameter("StudentT", "df", self.df, ndim_max=0)
        check_hyperparameter("StudentT", "scale", self.scale, ndim_max=0)

    def entries(self, prefix, X, fixed_names=()):
        """The entries ``<prefix>.df`` and ``<prefix>.scale`` (positive scalars).

        Parameters
        ----------
        prefix : str
            Name prefix of the entries (``"likelihood"``).
        X : ndarray, shape (N, D)
            Training inputs (their number and width size per-point or per-feature parameters).
        fixed_names : collection of str, optional
            Entry names held at their declared value.

        Returns
        -------
        list of gpdsl.parameters.Entry
        """
        return [entry(f"{prefix}.df", self.df, fixed_names=fixed_names),
                entry(f"{prefix}.scale", self.scale, fixed_names=fixed_names)]

    DF_MAX = 1e100

    def _params(self, values, prefix):
        """(min(df, DF_MAX), scale) as floats; FloatingPointError where one is not positive, which
        the declaration rules out and only an optimiser's exp(log value) underflowing to 0
        produces (a scale driven to 0 by a constant or noiseless target): the optimiser's signal
        to step back, where the divisions by them would raise a bare ZeroDivisionError."""
        nu, s = float(values[f"{prefix}.df"]), float(values[f"{prefix}.scale"])
        if not (nu > 0.0 and s > 0.0):
            raise FloatingPointError(f"StudentT: df = {nu!r} and scale = {s!r} must be positive (one underflowed to "
                                     "0: a scale there means the target looks noiseless to the model; fix the "
                                     "scale or add a prior on it)")
        return min(nu, self.DF_MAX), s

    def site_model(self, values, prefix):
        """The Student-t site model, parameters (df, scale).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).

        Returns
        -------
        SiteModel
        """
        return SiteModel(student_t.SITE, self._params(values, prefix), (f"{prefix}.df", f"{prefix}.scale"))

    def log_density_bound(self, values, prefix, y):
        # The density at f = y.
        return float(np.sum(self.log_density(values, prefix, y, y)))

    def log_density_derivatives(self, values, prefix, y, f):
        """With r = y - f and D = df scale^2 + r^2: d1 = (df + 1) r / D,
        d2 = (df + 1)(r^2 - df scale^2) / D^2, d3 = 2 (df + 1) r (r^2 - 3 df scale^2) / D^3, each
        evaluated with numerator and denominator divided by df (finite for any df), and
        log p = c(df) - log(2 pi) / 2 - log(scale) - (df + 1) / 2 log1p(r^2 / (df scale^2)) with
        c(df) = lgamma((df+1)/2) - lgamma(df/2) - log(df/2) / 2 from its series at large df
        (:func:`gpdsl._jit.special.student_t_log_norm_excess`): the Gaussian's log density to
        rounding as df grows.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.

        Returns
        -------
        tuple of 4 ndarray
            log p, d log p/df, d^2 log p/df^2, d^3 log p/df^3, each of the broadcast shape of y and f.
        """
        nu, s = self._params(values, prefix)
        r = y - f
        rn = r * r / nu                        # r^2 / df: D / df = s^2 + rn never overflows
        Dn = s * s + rn
        rho = 1.0 + 1.0 / nu                   # (df + 1) / df
        logp = (student_t_log_norm_excess(nu) - 0.5 * _LOG_2PI - np.log(s)
                - 0.5 * (nu + 1.0) * np.log1p((r / s) ** 2 / nu))
        return (logp, rho * r / Dn, rho * (rn - s * s) / Dn ** 2, 2.0 * rho * r * (rn - 3.0 * s * s) / (nu * Dn ** 3))

    def log_density_param_derivatives(self, values, prefix, y, f, derivatives=None):
        """Derivatives of log p in df and scale and their f-derivatives.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.
        derivatives : tuple of 4 ndarray, optional
            Not used.

        Returns
        -------
        dict of str to tuple of 3 ndarray
            ``{"<prefix>.<name>": (d log p/d theta, d^2 log p/df d theta, d^3 log p/df^2 d theta)}``.
        """
        nu, s = self._params(values, prefix)
        r = y - f
        r2 = r * r
        rn = r2 / nu
        Dn = s * s + rn                        # (df scale^2 + r^2) / df, as log_density_derivatives
        rho = 1.0 + 1.0 / nu
        x = (r / s) ** 2 / nu                  # r^2 / (df scale^2)
        # d/d df = (psi((df+1)/2) - psi(df/2) - 1/df - [log1p(x) - x/(1+x)] + x / (df (1 + x))) / 2:
        # two differences of terms ~1/df and ~x that tend to 0 like 1/df^2, each formed without
        # the cancellation (digamma_half_excess, log1p_excess).
        excess = log1p_excess_array(np.ravel(x).astype(float)).reshape(np.shape(x))
        d_nu = 0.5 * (digamma_half_excess(nu) - excess + x / (nu * (1.0 + x)))
        d1_nu = r * (r2 - s * s) / (nu * nu * Dn ** 2)
        d2_nu = ((rn - (2.0 + 1.0 / nu) * s * s) * Dn - 2.0 * s * s * rho * (rn - s * s)) / (nu * Dn ** 3)
        d_s = (-1.0 + rho * r2 / Dn) / s
        d1_s = -2.0 * s * rho * r / Dn ** 2
        d2_s = -2.0 * s * rho * (3.0 * rn - s * s) / Dn ** 3
        return {f"{prefix}.df": (d_nu, d1_nu, d2_nu), f"{prefix}.scale": (d_s, d1_s, d2_s)}

    def predictive(self, values, prefix, f_mean, f_var):
        """Mean f_mean and variance f_var + scale^2 df / (df - 2) of y*: the mean is NaN for
        df <= 1 (the Student-t has no mean there: E|y*| is infinite), the variance infinite for
        df <= 2.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.

        Returns
        -------
        dict of str to ndarray
            Arrays (n,): ``y_mean`` (NaN for df <= 1), ``y_var`` (inf for df <= 2).
        """
        nu, s = self._params(values, prefix)
        noise = s * s * nu / (nu - 2.0) if nu > 2.0 else np.inf
        mean = f_mean if nu > 1.0 else np.full(np.shape(f_mean), np.nan)
        return {"y_mean": mean, "y_var": f_var + noise}

    def expectation_rule(self, values, prefix, y, mean, var):
        """Composite Gauss-Legendre in s, where f = y + w sinh(s) and w = sqrt(df) scale is the
        likelihood's width, over f in mean +- 12 sd (the Gaussian's mass beyond is 1e-33): nodes
        are dense within w of y, where log p turns, and spread geometrically towards the
        Gaussian's scale.  Gauss-Hermite cannot resolve a likelihood much narrower than the
        latent sd (100 points: 4% off in log_predictive at sd 5, scale 0.7); this rule (256 nodes)
        is within 3e-10 relative of 30-digit quadrature over means -1..2, sds 0.001..50, y in
        {-4, 0, 10} and (df, scale) in {(1.5, 0.05), (3, 0.7), (30, 2)}, the worst with y 8 sds
        out (tests/test_likelihoods.py checks it).  A point with var = 0 gets the one node f = mean.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        y : ndarray, shape (n,)
            Targets as :meth:`prepare_targets` codes them.
        mean : ndarray, shape (n,)
            Means of q(f_n).
        var : ndarray, shape (n,)
            Variances of q(f_n), >= 0.

        Returns
        -------
        f : ndarray, shape (n, 256)
            Nodes in f.
        weights : ndarray, shape (n, 256)
            Weights (including the Gaussian density and the change of variables).
        nodes : None
            The rule is not placed at standard nodes.
        """
        nu, s = self._params(values, prefix)
        width = np.sqrt(nu) * s
        sd = np.sqrt(np.maximum(var, 0.0))
        lo = np.arcsinh((mean - _WINDOW_SDS * sd - y) / width)[:, None]
        hi = np.arcsinh((mean + _WINDOW_SDS * sd - y) / width)[:, None]
        u, omega = _composite_legendre()
        s_nodes = lo + (hi - lo) * u[None, :]
        f = y[:, None] + width * np.sinh(s_nodes)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = (f - mean[:, None]) / sd[:, None]
            weights = np.exp(-0.5 * z * z) / (np.sqrt(2.0 * np.pi) * sd[:, None]) * width * np.cosh(s_nodes) * (hi - lo) * omega
        # A latent sd far below the scale on which log p turns, s sqrt(df / (df + 1)) at its mode
        # (the width above only spreads the nodes), is a point mass for it (the error is of order
        # (sd / that)^2); below ~1e-16 of |mean - y| the window also rounds to one value of s
        # (hi = lo), where the weights above vanish (fuzz: StudentT EP at kernel variance 5e-42).
        point = (sd <= _POINT_SD * s * np.sqrt(nu / (nu + 1.0))) | ~(hi[:, 0] > lo[:, 0])
        f[point], weights[point] = mean[point, None], np.where(np.arange(u.size) == 0, 1.0, 0.0)
        return f, weights, None

    def log_predictive(self, values, prefix, f_mean, f_var, y):
        """log E[p(y* | f*)] by :meth:`expectation_rule`, summed in log space.

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.
        y : ndarray, shape (n,)
            Targets at the new inputs, coded as :meth:`prepare_targets` returns them.

        Returns
        -------
        ndarray, shape (n,)
            log p(y_n | x_n) under f ~ N(f_mean, f_var).
        """
        f, weights, _ = self.expectation_rule(values, prefix, y, f_mean, f_var)
        logp = self.log_density(values, prefix, np.broadcast_to(y[:, None], f.shape), f)
        with np.errstate(divide="ignore"):
            return special.logsumexp(logp + np.log(weights), axis=1)

    def sample(self, values, prefix, f, rng):
        """y = f + scale t, t ~ Student-t(df).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        f : ndarray
            Draws of the latent function (any shape, e.g. (chains, draws, n)).
        rng : numpy.random.Generator
            The random generator.

        Returns
        -------
        ndarray
            Draws of y, the shape of ``f``.
        """
        nu, s = self._params(values, prefix)
        return f + s * rng.standard_t(nu, size=np.shape(f))

    def surrogate(self, values, prefix, X, y):
        """Gaussian regression at the Student-t's variance (scale^2 for df <= 2).

        Parameters
        ----------
        values : dict of str to ndarray
            Natural hyperparameter values.
        prefix : str
            The name the likelihood's entries are stored under (``"likelihood"``).
        X : ndarray, shape (N, D)
            Training inputs.
        y : ndarray, shape (N,)
            Training targets, coded.

        Returns
        -------
        weights : ndarray, shape (N,)
            Pseudo-noise precisions w_n (noise 1/w_n).
        targets : ndarray, shape (N,)
            Weighted pseudo-targets r_n (targets r_n / w_n).
        """
        nu, s = self._params(values, prefix)
        w = np.full(X.shape[0], 1.0 / (s * s * (nu / (nu - 2.0) if nu > 2.0 else 1.0)))
        return w, w * y


LIKELIHOODS = {cls.__name__: cls for cls in (Gaussian, HeteroscedasticGaussian, Bernoulli, Poisson, StudentT)}

__all__ = ["Likelihood", "SiteModel", "Gaussian", "HeteroscedasticGaussian", "Bernoulli", "Poisson", "StudentT",
           "LIKELIHOODS"]
