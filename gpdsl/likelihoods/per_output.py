"""One likelihood per output of a multi-output model (:class:`PerOutput`), of any families: a
Gaussian output and a Bernoulli or Poisson one sharing latent processes through a coregionalised
kernel (:mod:`gpdsl.kernels.coregion`), whose inputs carry the output index in their last column
(:mod:`gpdsl.multioutput`'s long layout).

The per-row operations of :class:`~gpdsl.likelihoods.Likelihood` see (y, f) only, so a row's
output reaches them through :meth:`Likelihood.for_rows <gpdsl.likelihoods.Likelihood.for_rows>`:
a method calls it with the rows it evaluates, and the object it returns (:class:`_Rows`) sends
each row to its output's likelihood, so that no method knows it has several families.  Row n's
density is that of its output p_n = X[n, -1]:

    log p(y_n | f_n) = log p_{p_n}(y_n | f_n),

so every sum over rows is the sum of each part's over its own rows, and each part's gradients go
to its own parameters (``likelihood.<p>.<name>``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..checks import output_indices
from ..components import bind_parts, part_parameters
from ..multioutput import output_groups
from .._jit.mixed_sites import mixed_sites
from .base import CAPABILITIES, Likelihood, SiteModel


def _labels(count):
    return [str(p) for p in range(count)]


def _named(p, grads):
    """A part's gradients keyed ``"<p>.<name>"``."""
    return {f"{p}.{name}": value for name, value in grads.items()}


def _scatter(shape, groups, compute, count):
    """``count`` arrays of ``shape`` (rows on the last axis) filled group by group:
    ``compute(p, rows)`` returns the group's ``count`` arrays (rows on their last axis)."""
    out = [np.empty(shape) for _ in range(count)]
    for p, rows in groups:
        for o, value in zip(out, compute(p, rows)):
            o[..., rows] = value
    return out


def _refused(operation):
    """A :class:`PerOutput` operation of (y, f) rows, which is its rows' (:meth:`PerOutput.for_rows`)."""
    def refuse(self, *args, **kwargs):
        raise NotImplementedError(f"PerOutput.{operation}: each row's {operation} is its output's likelihood's; "
                                  "call for_rows(X) with the rows' inputs (the output index last) and ask that")
    refuse.__name__ = refuse.__qualname__ = operation
    refuse.__doc__ = (f"Refused (NotImplementedError): each row's ``{operation}`` is its output's likelihood's, "
                      "asked of ``for_rows(X)``.")
    return refuse


@dataclass(frozen=True, eq=False)
class PerOutput(Likelihood):
    """p(y_n | f_n) = p_{p_n}(y_n | f_n): row n's likelihood is its output's part
    ``likelihoods[p_n]``, p_n = X[n, -1] (GPy's ``MixedNoise`` for any families, the
    heterogeneous multi-output GP of Moreno-Muñoz et al. 2018 with one latent function a row).

    The parts are likelihoods of one latent function each, of one output each; hyperparameters
    are named ``<p>.<field>`` (``likelihood.1.bias`` in a model), as
    :class:`~gpdsl.means.PerOutput` names its mean functions.  A part that reads X's columns
    (``HeteroscedasticGaussian(degree=)``) sees the input columns X[:, :-1] of its rows.

    What it provides (:meth:`provides`) is what every part provides: Laplace and VGP (and SVGP)
    take parts with log-density derivatives or variational expectations, each row's operations
    dispatched through :meth:`for_rows`; the exact and collapsed methods take parts that are all
    Gaussian noise (``noise(X)`` per row, so that it does :class:`OutputGaussian`'s work and a
    noise model per output besides); EP and QP (dense, FITC, DTC) take parts that all provide a
    site model: rows of parts that share one jitted site code without parameters (log-link
    Poisson outputs) run that code (:meth:`site_model`), and other rows a site model of the rows
    (:meth:`for_rows` then ``site_model``) whose jitted functions send each row (p_n, y_n, o_n)
    to its part's code with its part's parameters (:mod:`gpdsl._jit.mixed_sites`), so that the
    evidence gradients go to ``<p>.<name>`` (a Bernoulli output's ``1.bias``).

    Targets are coded by each row's part (:meth:`for_rows` then ``coded_targets``): a Bernoulli
    output's labels 0/1 become -1/+1 there, a Poisson output's must be counts, a Gaussian
    output's any finite values.

    Parameters
    ----------
    likelihoods : tuple of Likelihood
        One likelihood per output, P >= 1 of them, in the order of the output index.

    Raises
    ------
    TypeError
        ``likelihoods`` not a non-empty tuple of likelihoods.
    ValueError
        A part of several latent functions (``Categorical``), of several outputs
        (``OutputGaussian``, a nested ``PerOutput``) or with a value per training row
        (``HeteroscedasticGaussian(variance=)``), named.
    """

    likelihoods: tuple
    # It reads the output column itself and gives each part the input columns only.
    reads_input_columns = False

    def __post_init__(self):
        if not isinstance(self.likelihoods, tuple) or not self.likelihoods or \
                not all(isinstance(lik, Likelihood) for lik in self.likelihoods):
            raise TypeError(f"PerOutput: likelihoods must be a non-empty tuple of gd.likelihoods likelihoods (one per "
                            f"output), got {self.likelihoods!r}")
        for p, lik in enumerate(self.likelihoods):
            if lik.n_latent != 1:
                raise ValueError(f"PerOutput: part {p}, {lik.describe()}, has {lik.n_latent} latent functions; a "
                                 "multi-output model gives each row one latent function")
            if getattr(lik, "output_count", None) is not None:
                raise ValueError(f"PerOutput: part {p}, {lik.describe()}, is a likelihood of several outputs; each "
                                 "part is the likelihood of one output")
            if lik.per_row_parameters:
                raise ValueError(f"PerOutput: part {p}, {lik.describe()}, holds a value per training row, which "
                                 "would follow the rows of its output only; give known noise variances to the "
                                 "whole model (gd.likelihoods.HeteroscedasticGaussian) instead")

    @property
    def output_count(self):
        """int: the number of outputs P (one likelihood each)."""
        return len(self.likelihoods)

    @classmethod
    def variants(cls):
        """A Gaussian and a probit Bernoulli output with its bias (Laplace, VGP, SVGP, EP and QP
        by a site model of rows); two Gaussian outputs (the exact and collapsed methods too); two
        log-link Poisson outputs (EP and QP with the parts' shared site code).

        Returns
        -------
        tuple of PerOutput
        """
        parts = Likelihood.registry
        return (cls((parts["Gaussian"](0.3), parts["Bernoulli"]("probit", bias=0.2))),
                cls((parts["Gaussian"](0.2), parts["Gaussian"](0.6))),
                cls((parts["Poisson"](link="log"), parts["Poisson"](link="log"))))

    # -- what the parts share ------------------------------------------------------------------
    def provides(self, capability):
        """What every part provides (:meth:`Likelihood.provides`), except ``"polya_gamma"``:
        never (the augmentation reads one bias).

        Parameters
        ----------
        capability : str
            One of :data:`gpdsl.likelihoods.CAPABILITIES`.

        Returns
        -------
        bool
        """
        if capability not in CAPABILITIES:
            raise ValueError(f"PerOutput: unknown capability {capability!r}; known: {list(CAPABILITIES)}")
        if capability == "polya_gamma":
            return False
        return all(lik.provides(capability) for lik in self.likelihoods)

    @staticmethod
    def _shared_site(sites):
        """The parts' one site model where their ``sites`` share jitted code and have no site
        parameters, else None."""
        if any(site.params for site in sites) or any(site.functions != sites[0].functions for site in sites):
            return None
        return sites[0]

    @property
    def observation_noise(self):
        """bool: every part is Gaussian observation noise."""
        return all(lik.observation_noise for lik in self.likelihoods)

    @property
    def standardizes_targets(self):
        """bool: every part's targets may be shifted and scaled (one shift and scale for all)."""
        return all(lik.standardizes_targets for lik in self.likelihoods)

    @property
    def supports_dask_chunks(self):
        return all(lik.supports_dask_chunks for lik in self.likelihoods)

    @property
    def sign_symmetric(self):
        """bool: some part is even in f (q then starts from the surrogate regression)."""
        return any(lik.sign_symmetric for lik in self.likelihoods)

    @property
    def log_concave(self):
        """True where every part is log-concave, False where one is not, else None."""
        stated = [lik.log_concave for lik in self.likelihoods]
        return False if False in stated else (True if all(stated) else None)

    @property
    def target_kind(self):
        """The parts' kind of targets where they share one, else None (mixed)."""
        kinds = {lik.target_kind for lik in self.likelihoods}
        return kinds.pop() if len(kinds) == 1 else None

    @property
    def predictive_approximation(self):
        """The parts' approximations of log_predictive (``"<p>: <what>"``), or None where all are exact."""
        said = [f"{p}: {lik.predictive_approximation}" for p, lik in enumerate(self.likelihoods)
                if lik.predictive_approximation is not None]
        return "; ".join(said) or None

    # -- parameters ----------------------------------------------------------------------------
    def parameters(self, X):
        """The parts' parameters, each part's sized by the input columns X[:, :-1].

        Parameters
        ----------
        X : ndarray, shape (N, D + 1)
            Inputs whose last column is the output index.

        Returns
        -------
        list of Parameter
        """
        return part_parameters(_labels(len(self.likelihoods)), self.likelihoods, X[:, :-1])

    def bind(self, values=None):
        return dataclasses.replace(self, likelihoods=bind_parts(_labels(len(self.likelihoods)), self.likelihoods,
                                                                values))

    def _index(self, X):
        return output_indices("PerOutput", np.asarray(X[:, -1:]), len(self.likelihoods))

    def for_rows(self, X):
        """The likelihood of X's rows (:class:`_Rows`): each row's operations are its output's part's.

        Parameters
        ----------
        X : ndarray or Dask array, shape (n, D + 1)
            The rows' inputs, the output index last.

        Returns
        -------
        _Rows

        Raises
        ------
        ValueError
            An output index that is not an integer in 0..P-1.
        """
        return _Rows(self, self._index(X))

    # -- operations that read X themselves -----------------------------------------------------
    def _by_rows(self, X, compute, count):
        index = self._index(X)
        return _scatter((X.shape[0],), output_groups(index, len(self.likelihoods)), compute, count)

    def noise(self, X):
        """Part p's noise at the input columns of its rows (every part Gaussian noise).

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)

        Returns
        -------
        ndarray, shape (n,)
        """
        return self._by_rows(X, lambda p, rows: (self.likelihoods[p].noise(X[rows, :-1]),), 1)[0]

    def log_noise(self, X):
        """log of :meth:`noise`, from each part's ``log_noise``.

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)

        Returns
        -------
        ndarray, shape (n,)
        """
        return self._by_rows(X, lambda p, rows: (self.likelihoods[p].log_noise(X[rows, :-1]),), 1)[0]

    def noise_vjp(self, X, g):
        """Part p's noise_vjp on its rows, keyed ``"<p>.<name>"`` (none for a part without rows).

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)
        g : ndarray, shape (n,)

        Returns
        -------
        dict of str to ndarray
        """
        grads = {}
        for p, rows in output_groups(self._index(X), len(self.likelihoods)):
            grads.update(_named(p, self.likelihoods[p].noise_vjp(X[rows, :-1], np.asarray(g)[rows])))
        return grads

    def surrogate(self, X, y):
        """Each part's surrogate regression on its rows (greedy selection, q's start).

        Parameters
        ----------
        X : ndarray, shape (N, D + 1)
        y : ndarray, shape (N,)
            Coded targets.

        Returns
        -------
        weights, targets : ndarray, shape (N,)
        """
        return self._by_rows(X, lambda p, rows: self.likelihoods[p].surrogate(X[rows, :-1], y[rows]), 2)

    def site_model(self):
        """The parts' shared site model where they share one jitted site code without site
        parameters (EP, QP at every row); otherwise each row's is its part's, of
        ``for_rows(X).site_model()``.

        Returns
        -------
        SiteModel

        Raises
        ------
        NotImplementedError
            A part without a site model (named), or parts of several site codes or with site
            parameters (then the rows' site model is ``for_rows(X).site_model()``).
        """
        site = self._shared_site(self._site_parts())
        if site is None:
            raise NotImplementedError(
                f"PerOutput.site_model: the parts of {self.describe()} have several site codes or parameters of their "
                "own, so each row's site code is its output's part's: call for_rows(X) with the rows' inputs (the "
                "output index last) and ask that")
        return site

    def _site_parts(self):
        """Each part's site model, or NotImplementedError naming a part without one."""
        for p, lik in enumerate(self.likelihoods):
            if not lik.provides("site_model"):
                raise NotImplementedError(f"{self.describe()} does not provide EP/QP tilted moments: part {p}, "
                                          f"{lik.describe()}, has no site model; use Laplace, VGP or SVGP")
        return [lik.bind().site_model() for lik in self.likelihoods]

    def _rows_site_model(self, index):
        """The site model of rows of outputs ``index`` (:meth:`_Rows.site_model`)."""
        sites = self._site_parts()
        shared = self._shared_site(sites)
        if shared is not None:
            return shared
        functions = mixed_sites(tuple(site.functions for site in sites), tuple(len(site.params) for site in sites))
        return SiteModel(functions, sum((tuple(site.params) for site in sites), ()),
                         tuple(f"{p}.{name}" for p, site in enumerate(sites) for name in site.names), parts=index)

    # -- operations that need the rows: each is its rows' (for_rows(X)), refused here ----------
    prepare_targets = _refused("prepare_targets")
    log_density = _refused("log_density")
    log_density_derivatives = _refused("log_density_derivatives")
    log_density_param_derivatives = _refused("log_density_param_derivatives")
    variational_expectations = _refused("variational_expectations")
    conditional_moments = _refused("conditional_moments")
    predictive = _refused("predictive")
    log_predictive = _refused("log_predictive")
    sample = _refused("sample")

    def describe(self):
        """``PerOutput(Gaussian, Bernoulli(probit))``.

        Returns
        -------
        str
        """
        return f"PerOutput({', '.join(lik.describe() for lik in self.likelihoods)})"


@dataclass(frozen=True, eq=False)
class _Rows(Likelihood):
    """A bound :class:`PerOutput` for given rows (:meth:`PerOutput.for_rows`): its operations
    take arrays of those rows (on their last axis) and give each row its output's part's result;
    the gradients in the parts' hyperparameters are each part's over its rows, keyed
    ``"<p>.<name>"`` (every part's, 0 for a part without rows).  The likelihood of one row takes
    any number of (y, f) of that row (its index broadcasts, as a length-1 axis does).  What it
    says of its targets and density (``target_kind``, ``observation_noise``, ...; ``provides``
    for the per-row operations) is what the parts of its rows share; ``noise`` is the owner's,
    which reads X itself, and the site model sends each row to its part's site code.  Not a component of a model
    (not registered).

    Parameters
    ----------
    owner : PerOutput
        The bound per-output likelihood.
    index : ndarray of intp, shape (n,)
        Each row's output.
    """

    owner: PerOutput
    index: np.ndarray

    def _index(self, n):
        """Each of n rows' output (one row's broadcast)."""
        if self.index.shape[0] not in (1, n):
            raise ValueError(f"PerOutput: the arrays have {n} rows but the likelihood is of {self.index.shape[0]} "
                             "(for_rows(X) with X of these rows)")
        return np.broadcast_to(self.index, (n,))

    def _groups(self, n):
        return output_groups(self._index(n), len(self.owner.likelihoods))

    def _part(self, p):
        return self.owner.likelihoods[p]

    def _rows(self, shape, compute, count):
        return _scatter(shape, self._groups(shape[-1]), compute, count)

    @property
    def _present(self):
        """The likelihood of the rows' own: PerOutput of the parts the rows have (the owner for none)."""
        present = np.unique(self.index)
        return PerOutput(tuple(self._part(p) for p in present)) if present.size else self.owner

    def provides(self, capability):
        """The per-row operations where the rows' parts all provide them; ``"noise"``,
        ``"site_model"`` and ``"polya_gamma"`` as the owner (:meth:`PerOutput.provides`).

        Parameters
        ----------
        capability : str
        """
        if capability in ("noise", "site_model", "polya_gamma"):
            return self.owner.provides(capability)
        return self._present.provides(capability)

    observation_noise = property(lambda self: self._present.observation_noise)
    standardizes_targets = property(lambda self: self._present.standardizes_targets)
    supports_dask_chunks = property(lambda self: self.owner.supports_dask_chunks)
    sign_symmetric = property(lambda self: self._present.sign_symmetric)
    log_concave = property(lambda self: self._present.log_concave)
    target_kind = property(lambda self: self._present.target_kind)
    predictive_approximation = property(lambda self: self._present.predictive_approximation)

    def describe(self):
        """The owner's description."""
        return self.owner.describe()

    def for_rows(self, X):
        """The owner's likelihood of X's rows.

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)
        """
        return self.owner.for_rows(X)

    def site_model(self):
        """The site model of these rows: the owner's where its parts share one site code without
        parameters (:meth:`PerOutput.site_model`), else one of rows (p_n, y_n, o_n)
        (:func:`~gpdsl._jit.mixed_sites.site_rows`) whose functions run each row's part's code with its parameters
        (:func:`gpdsl._jit.mixed_sites.mixed_sites`): ``params`` the parts' concatenated,
        ``names`` ``"<p>.<name>"``.

        Returns
        -------
        SiteModel

        Raises
        ------
        NotImplementedError
            A part without a site model (named).
        """
        return self.owner._rows_site_model(self.index)

    def noise(self, X):
        """The owner's noise at X.

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)
        """
        return self.owner.noise(X)

    def log_noise(self, X):
        """The owner's log noise at X.

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)
        """
        return self.owner.log_noise(X)

    def noise_vjp(self, X, g):
        """The owner's noise vjp at X.

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)
        g : ndarray, shape (n,)
        """
        return self.owner.noise_vjp(X, g)

    def surrogate(self, X, y):
        """The owner's surrogate regression at X (these rows).

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)
        y : ndarray, shape (n,)
        """
        return self.owner.surrogate(X, y)

    def _summed_over_parts(self, operation, y):
        """The sum over the outputs of part p's ``operation`` (a sum over rows) on its rows'
        targets, or None where a part with rows gives None."""
        y = np.asarray(y, dtype=float)
        total = 0.0
        for p, rows in self._groups(y.shape[-1]):
            value = getattr(self._part(p), operation)(y[rows])
            if value is None:
                return None
            total += value
        return total

    def log_density_bound(self, y):
        """sum_n max_f log p_{p_n}(y_n | f): each part's bound on its rows, summed (None where a part
        gives none); ``Model.fit``'s check of a lost evidence.

        Parameters
        ----------
        y : ndarray, shape (n,)
            The rows' targets, coded.

        Returns
        -------
        float or None
        """
        return self._summed_over_parts("log_density_bound", y)

    def constant_model_log_likelihood(self, y):
        """The constant model's objective: each part's on its rows, summed (None where a part
        gives none); ``Model.fit``'s constant-model flag.

        Parameters
        ----------
        y : ndarray, shape (n,)
            The rows' targets, coded.

        Returns
        -------
        float or None
        """
        return self._summed_over_parts("constant_model_log_likelihood", y)

    # Per-row operations.
    def prepare_targets(self, y):
        """Each row's target coded (and checked) by its output's part.

        Parameters
        ----------
        y : ndarray, shape (n,)

        Returns
        -------
        ndarray, shape (n,)

        Raises
        ------
        ValueError
            Targets invalid for a row's part (its own message), or y of other than n rows.
        """
        y = np.asarray(y, dtype=float)
        if y.ndim != 1:
            raise ValueError(f"PerOutput: y must be 1-D (a target a row), got shape {y.shape}")
        return self._rows(y.shape, lambda p, rows: (self._part(p).prepare_targets(y[rows]),), 1)[0]

    def log_density(self, y, f):
        """log p_{p_n}(y_n | f_n), rows on the last axis of f (y broadcast against it).

        Parameters
        ----------
        y, f : ndarray

        Returns
        -------
        ndarray
        """
        shape = np.broadcast_shapes(np.shape(y), np.shape(f))
        y, f = np.broadcast_to(y, shape), np.broadcast_to(f, shape)
        return self._rows(shape, lambda p, rows: (self._part(p).log_density(y[..., rows], f[..., rows]),), 1)[0]

    def log_density_derivatives(self, y, f):
        """Each row's part's (log p, d/df, d^2/df^2, d^3/df^3).

        Parameters
        ----------
        y, f : ndarray

        Returns
        -------
        tuple of 4 ndarray
        """
        shape = np.broadcast_shapes(np.shape(y), np.shape(f))
        y, f = np.broadcast_to(y, shape), np.broadcast_to(f, shape)
        return tuple(self._rows(shape, lambda p, rows: self._part(p).log_density_derivatives(y[..., rows],
                                                                                               f[..., rows]), 4))

    def log_density_param_derivatives(self, y, f, derivatives=None):
        """``{"<p>.<name>": (d log p/d theta, d^2/df d theta, d^3/df^2 d theta)}``: part p's at its
        rows, 0 at the others (their densities do not have theta).

        Parameters
        ----------
        y, f : ndarray
        derivatives : tuple of 4 ndarray, optional
            :meth:`log_density_derivatives` at the same arguments.

        Returns
        -------
        dict of str to tuple of 3 ndarray
        """
        shape = np.broadcast_shapes(np.shape(y), np.shape(f))
        y, f = np.broadcast_to(y, shape), np.broadcast_to(f, shape)
        out = {}
        index = self._index(shape[-1])
        for p in range(len(self.owner.likelihoods)):
            rows = np.flatnonzero(index == p)       # (none: the part's names, at 0)
            given = None if derivatives is None else tuple(np.broadcast_to(d, shape)[..., rows] for d in derivatives)
            for name, parts in self._part(p).log_density_param_derivatives(y[..., rows], f[..., rows],
                                                                           derivatives=given).items():
                full = tuple(np.zeros(shape) for _ in parts)
                for whole, part in zip(full, parts):
                    whole[..., rows] = part
                out[f"{p}.{name}"] = full
        return out

    def variational_expectations(self, y, mean, var):
        """Each part's E_q[log p(y | f)] and its gradients on its rows; the hyperparameter
        gradients keyed ``"<p>.<name>"``.

        Parameters
        ----------
        y, mean, var : ndarray, shape (n,)

        Returns
        -------
        ve, d_mean, d_var : ndarray, shape (n,)
        param_grads : dict of str to ndarray
        """
        y, mean, var = (np.asarray(a, dtype=float) for a in (y, mean, var))
        grads = {}

        def compute(p, rows):
            ve, d_mean, d_var, part = self._part(p).variational_expectations(y[rows], mean[rows], var[rows])
            grads.update(_named(p, part))
            return ve, d_mean, d_var

        out = self._rows(mean.shape, compute, 3)
        none = np.zeros(0)
        for p in set(range(len(self.owner.likelihoods))) - {p for p, _ in self._groups(mean.shape[-1])}:
            compute(p, none.astype(np.intp))        # a part without rows: its sums over none, 0
        return tuple(out) + (grads,)

    def conditional_moments(self, f):
        """Each row's part's E[y | f] and Var[y | f] (rows on the last axis of f).

        Parameters
        ----------
        f : ndarray

        Returns
        -------
        mean, var : ndarray
        """
        f = np.asarray(f, dtype=float)
        return tuple(self._rows(f.shape, lambda p, rows: self._part(p).conditional_moments(f[..., rows]), 2))

    def predictive(self, f_mean, f_var):
        """Each row's part's predictive summaries; a summary that only some parts give
        (``p`` of a Bernoulli output, ``y_mean``/``y_var`` of a Gaussian or Poisson one) is NaN at
        the rows of the others.

        Parameters
        ----------
        f_mean, f_var : ndarray, shape (n,)

        Returns
        -------
        dict of str to ndarray
        """
        out = {}
        for p, rows in self._groups(np.shape(f_mean)[-1]):
            for name, value in self._part(p).predictive(np.asarray(f_mean)[rows], np.asarray(f_var)[rows]).items():
                out.setdefault(name, np.full(np.shape(f_mean), np.nan))[rows] = value
        return out

    def log_predictive(self, f_mean, f_var, y):
        """Each row's part's log E[p(y | f)].

        Parameters
        ----------
        f_mean, f_var, y : ndarray, shape (n,)

        Returns
        -------
        ndarray, shape (n,)
        """
        f_mean, f_var = np.asarray(f_mean, dtype=float), np.asarray(f_var, dtype=float)
        y = np.broadcast_to(np.asarray(y, dtype=float), f_mean.shape)
        return self._rows(f_mean.shape, lambda p, rows: (self._part(p).log_predictive(f_mean[rows], f_var[rows],
                                                                                      y[rows]),), 1)[0]

    def sample(self, f, rng):
        """Draws of y, each row's by its part (rows on the last axis of f).

        Parameters
        ----------
        f : ndarray
        rng : numpy.random.Generator

        Returns
        -------
        ndarray
        """
        f = np.asarray(f, dtype=float)
        return self._rows(f.shape, lambda p, rows: (self._part(p).sample(f[..., rows], rng),), 1)[0]


__all__ = ["PerOutput"]
