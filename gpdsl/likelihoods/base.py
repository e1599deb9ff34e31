"""The likelihood interface: the operations the inference methods ask of an observation model.

A likelihood is a frozen dataclass (:class:`gpdsl.components.Component`) whose hyperparameters
are fields; the operations below run on a bound likelihood (:meth:`Component.bind`), whose
fields hold natural-scale float arrays, and read them as ``float(self.bias)``.  Arrays are per
point, shape (n,):

========================================  ==========================================================
operation                                 used by
========================================  ==========================================================
``log_density(y, f)``                     ArviZ export, the constant model
``log_density_derivatives(y, f)``         Laplace (Rasmussen & Williams Alg. 3.1, 5.1): log p and
                                          d^k log p / df^k, k = 1, 2, 3
``log_density_param_derivatives``         Laplace's and the variational methods' gradients in the
                                          likelihood's own hyperparameters
``variational_expectations``              SVGP, VGP: E_N(f|m,v)[log p(y|f)] and its gradients in
                                          (m, v) and the hyperparameters (Gauss-Hermite unless a
                                          closed form is given)
``site_model()``                          EP, QP: the jitted tilted-moment code and the parameter
                                          tuple the site sweeps take (:class:`SiteModel`)
``predictive`` / ``log_predictive``       Posterior.predict and Posterior.log_predictive
``conditional_moments(f)``                E[y | f] and Var[y | f]: the default ``predictive``'s
                                          y_mean / y_var of real-valued targets
``sample(f, rng)``                        posterior-predictive draws for ArviZ
``surrogate(X, y)``                       greedy inducing selection before the first fit; the
                                          start of q where ``sign_symmetric`` (below)
``constant_model_log_likelihood(y)``      the constant-model flag of ``Model.fit``
``noise(X)`` / ``noise_vjp(X, g)``        the exact GP and the collapsed VFE / DTC / FITC engines
                                          (Gaussian-noise likelihoods, ``observation_noise``)
``for_rows(X)``                           every method and prediction, once it has the rows it
                                          evaluates: the likelihood of those rows (below)
========================================  ==========================================================

The per-row operations see (y, f) only.  A likelihood whose density differs by row in a way X
says (one likelihood per output of a multi-output model, :class:`gpdsl.likelihoods.PerOutput`)
returns from ``for_rows(X)`` an object bound to X's rows, whose operations (and target coding)
take arrays of those rows; every other likelihood returns itself.  A method calls it where it has
the rows it will evaluate (the full X of a full-batch method, each minibatch of a stochastic one)
and a prediction with its X_new rows, so that no method knows which likelihood it has.

Gradients are keyed by the likelihood's own parameter names (``{"bias": ...}``); the model
qualifies them (``"likelihood.bias"``, :class:`gpdsl.components.Bound`) for the operations in
:attr:`Likelihood.gradient_outputs`.

A likelihood even in f (``sign_symmetric = True``: Poisson's square link) makes q's mean 0 a
saddle of a variational bound, so SVGP and VGP start q from the Gaussian fit to its surrogate
targets instead of from the prior.

Which method accepts which likelihood follows from :meth:`Likelihood.provides` (the
capabilities of :data:`CAPABILITIES`): an operation is provided where the likelihood's class
overrides it for its own density.  What a likelihood needs is its density: ``log_density_derivatives``
(``log_density`` defaults to its first term) and, with hyperparameters,
``log_density_param_derivatives``; every other operation has a default on this class that works
from the density (``variational_expectations`` by Gauss-Hermite quadrature, ``log_predictive`` by
a rule centred on the tilted mode, ``predictive`` and ``sample`` where the targets' support is
known: ``target_kind`` "binary" or "count"; :mod:`gpdsl.likelihoods.density_integrals`), or
refuses naming what needs it.  The operations in :data:`DERIVED_FROM_DENSITY` hold for one
density: a subclass that redefines ``log_density`` or ``log_density_derivatives`` (or a helper of
its parent's ``density_functions``) does not inherit a parent's version of them (EP's tilted moments, closed-form expectations, the
Pólya-Gamma augmentation of the parent's density would be silently wrong for the new one).
:meth:`Likelihood.__init_subclass__` resets each such operation to this class's default (or
refusal) unless the subclass defines it again, and :meth:`Likelihood.inherited_without_density`
says which were reset.  A new likelihood is one subclass plus, for EP / QP, a module of jitted tilted-moment code
under :mod:`gpdsl._jit.likelihoods` (see :mod:`gpdsl._jit.projections`), which its ``site_model``
hands to the site sweeps: they take the functions and the parameter tuple as arguments, so no
sweep changes.
"""
from __future__ import annotations

import inspect
import warnings
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from scipy import special

from ..chunks import row_slices
from ..components import Bound, Component, qualify_keys
from ..inputs import validate_targets
from .density_integrals import count_draws, count_moments, log_gaussian_integral

_LOG_2PI = np.log(2.0 * np.pi)

# Rows per block of the default variational expectations (their (rows, nodes) temporaries).
_EXPECTATION_BLOCK_ROWS = 8192

# What :meth:`Likelihood.provides` answers: the operations a method may need beyond the common
# ones, the Gaussian observation noise of the collapsed engines and the Pólya-Gamma augmentation.
CAPABILITIES = ("log_density_derivatives", "variational_expectations", "site_model", "noise", "polya_gamma")

# The two ways a likelihood states its density: a class that defines either one defines its density.
DENSITY = ("log_density", "log_density_derivatives")
# What a likelihood class derives from its density (operations and the attributes that describe
# it): a subclass that redefines the density inherits none of them from above its own density
# (Likelihood.__init_subclass__).  ``provides`` is among them because a parent's override of it
# (Bernoulli's Pólya-Gamma augmentation of the logit) speaks for the parent's density.
DERIVED_FROM_DENSITY = ("log_density_param_derivatives", "expectation_rule", "variational_expectations", "site_model",
                        "conditional_moments", "predictive", "log_predictive", "predictive_approximation", "sample",
                        "surrogate", "log_density_bound", "constant_model_log_likelihood", "sign_symmetric",
                        "standardizes_targets", "observation_noise", "noise", "noise_vjp", "describe", "provides",
                        "variants", "log_concave", "shift_invariant", "scale_invariant")

# The default predictive of counts: the Gauss-Hermite rule in f of a row is the smallest of these
# (nodes, largest latent sd) that holds its sd, else ``quadrature_points``: each integrates
# E[e^f] and E[e^2f] (the log link's moments, the fastest-growing of the usual links) to 1e-15
# relative within its sd (20 nodes are 6e-8 off in E[e^2f] at sd 2), with fewer nodes (latent
# values) to sum pmfs at, and nearer the mean (the 100-point rule's reach 18.9 sds).
_COUNT_RULES = ((12, 0.5), (20, 1.0), (32, 2.0))


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
        The hyperparameter names the evidence gradients go to (local names on the likelihood,
        qualified by :class:`gpdsl.components.Bound`).
    parts : ndarray, shape (n,), optional
        Each row's part where the functions take rows (part, target, offset)
        (:func:`gpdsl._jit.mixed_sites.site_rows`), else None.
    """

    functions: tuple
    params: tuple
    names: tuple
    parts: np.ndarray | None = None


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


def _owner(cls, name):
    """The class of cls's MRO whose own namespace defines ``name``, or None."""
    return next((c for c in cls.__mro__ if name in vars(c)), None)


def _density_owner(cls, names=None):
    """The most derived class of cls's MRO that defines one of ``names`` (default: its
    ``density_functions``, :data:`DENSITY` for a plain mixin), or None where none does."""
    names = DENSITY + tuple(getattr(cls, "density_functions", ())) if names is None else names
    owners = [owner for owner in (_owner(cls, name) for name in names) if owner is not None]
    return min(owners, key=cls.__mro__.index, default=None)


def _states_a_density(cls):
    """Whether a class of an MRO is a likelihood that speaks for a density of its own (not the
    base class, nor a likelihood mixin that defines none, nor a plain mixin: that is part of the
    class it is mixed into)."""
    return issubclass(cls, Likelihood) and _density_owner(cls) is not Likelihood


def _qualify_expectations(output, qualify):
    ve, d_mean, d_var, grads = output
    return ve, d_mean, d_var, qualify_keys(grads, qualify)


def _qualify_site_model(model, qualify):
    return model._replace(names=tuple(qualify(name) for name in model.names))


def _qualify_rows(rows, qualify):
    # The likelihood of the rows keeps the model's place of the one it came from (a Bound's
    # qualify is "<prefix>.<name>"), so that its gradients are qualified as the Bound's were.
    return Bound(rows, qualify("")[:-1])


class Likelihood(Component, family="likelihood"):
    """Base class of the observation models: the operations of the module docstring.

    A subclass defines its density and overrides what it has in closed form; the other
    operations run this class's defaults, which work from the density by quadrature or raise
    NotImplementedError naming the operation and what needs it (no registered method calls one
    for a likelihood that does not :meth:`provide <provides>` it).  A subclass that redefines its
    parent's density runs these defaults for every operation of :data:`DERIVED_FROM_DENSITY` it
    does not define again (``__init_subclass__``).  Subclasses are frozen dataclasses
    (``@dataclass(frozen=True, eq=False)``, equality by value) that declare their
    hyperparameters in ``hyperparameters`` / ``unconstrained`` (or override ``parameters``).
    """

    gradient_outputs = {"log_density_param_derivatives": qualify_keys,
                        "variational_expectations": _qualify_expectations,
                        "noise_vjp": qualify_keys,
                        "site_model": _qualify_site_model,
                        "for_rows": _qualify_rows}

    # fit(standardize=True) may shift and scale the targets (gpdsl.scaling) when this is True.
    standardizes_targets = False
    # Per-point Gaussian noise (noise / noise_vjp; predictions add it).
    observation_noise = False
    # Whether a method's Dask-chunked passes can run with this likelihood: its per-point terms
    # need no more of X than the row block they are computed on.
    supports_dask_chunks = True
    # Whether it holds values per training row (fit(subsample=) cannot subsample them).
    per_row_parameters = False
    # Whether it reads the columns of X as input features (a noise model of x): in a multi-output model
    # X's last column is the output index (gpdsl.multioutput), which it would read as one, so it is refused there.
    reads_input_columns = False
    # The usual cause of an evidence ridge (a kernel variance that grows, the objective flat), for the fit's warning.
    ridge_cause = ("the kernel explains the targets ever better by growing (a trend or a scale it can only follow "
                   "that way: try standardize=True or a kernel with that structure)")
    # Whether p(y | f) = p(y | -f): q(f) centred at 0 is then a stationary point (a saddle) of a
    # variational bound, and the variational methods start q from the surrogate regression.
    sign_symmetric = False
    # Whether log p(y | f) is concave in f (True), is not (False), or is not stated (None): the minibatch
    # SVGP steps q by Adam rather than by natural steps where it is False (gpdsl.methods.stochastic.q_steps).
    log_concave = None
    # Whether a K-latent p(y | f) ignores one value added to every f_k (svgp.optimise_q then centres q's means).
    shift_invariant = False
    # Whether a K-latent p(y | f) ignores one positive factor on every f_k (robust-max; gpdsl.defaults).
    scale_invariant = False
    # What log_predictive approximates the exact log E[p(y | f)] by, or None where it is exact.
    predictive_approximation = None
    # The kind of targets ("real", "binary", "count", "categorical") for the CLI (None: inputs.target_kind's).
    target_kind = None
    # Nodes of the Gauss-Hermite rule of the default variational expectations: 100 points
    # integrate log Phi and log sigma under latent sds up to ~3 to ~1e-12 (tests/test_likelihoods.py).
    quadrature_points = 100
    # How many latent functions a row's likelihood reads: 1, or K for a K-class likelihood
    # (gpdsl.likelihoods.categorical), whose operations take latent arrays (n, K).
    n_latent = 1
    # The functions that define the density: DENSITY and the helpers they are written through
    # (NegativeBinomial's _terms): a subclass that redefines any of them redefines the density.
    density_functions = DENSITY
    # Operation name -> the parent whose version __init_subclass__ reset (see inherited_without_density).
    _reset_operations = {}

    def __init_subclass__(cls, **kwargs):
        """Register the class (:class:`gpdsl.components.Component`) and reset every operation of
        :data:`DERIVED_FROM_DENSITY` that it inherits from a parent whose density it redefines to
        this class's default: an operation is kept where it is defined at or below the class that
        defines the density in use (the most derived definer of a name in ``density_functions``),
        or above it on a class with no density of its own (a mixin such as the Gaussian-noise
        base) or on a plain (non-Likelihood) mixin; ``inherited_without_density()`` lists what was reset.  The two
        functions of :data:`DENSITY` are reset the same way against the most derived definer of
        either: a subclass that redefines only a helper of ``density_functions`` keeps its
        parent's ``log_density`` and derivatives, which are written through the helper.

        Only the class statement is seen: an operation assigned to a class after it is created
        (``Sub.log_density = ...``) resets nothing."""
        super().__init_subclass__(**kwargs)
        density, stated = _density_owner(cls), _density_owner(cls, DENSITY)
        reset = {}
        for names, below in ((DENSITY, stated), (DERIVED_FROM_DENSITY, density)):
            for name in names:
                owner = _owner(cls, name)
                if cls.__mro__.index(owner) > cls.__mro__.index(below) and _states_a_density(owner):
                    reset[name] = owner.__name__
                    setattr(cls, name, vars(Likelihood)[name])
        cls._reset_operations = {**getattr(cls, "_reset_operations", {}), **reset}

    @classmethod
    def inherited_without_density(cls):
        """The operations this class would inherit from a parent whose density it redefines, which
        it runs with this base class's default instead (:data:`DERIVED_FROM_DENSITY`).

        Returns
        -------
        dict of str to str
            Operation name -> the parent class that defines it for its own density.
        """
        return {name: parent for name, parent in cls._reset_operations.items()
                if vars(Likelihood)[name] is inspect.getattr_static(cls, name)}

    def defines(self, operation):
        """Whether this likelihood's class defines ``operation`` for its own density, rather than
        running this base class's default (generic quadrature, or a refusal).

        Parameters
        ----------
        operation : str
            A method name of the interface, e.g. ``"site_model"`` or ``"sample"``.

        Returns
        -------
        bool

        Raises
        ------
        ValueError
            A name that is not an operation of this interface.
        """
        default = vars(Likelihood).get(operation)
        if not callable(getattr(default, "__func__", default)):
            raise ValueError(f"{type(self).__name__}.defines: {operation!r} is not an operation of the likelihood "
                             f"interface (e.g. one of {list(DERIVED_FROM_DENSITY[:4])})")
        return inspect.getattr_static(type(self), operation) is not default

    def _unsupported(self, operation, name=None):
        """The NotImplementedError of an operation ``name`` (described as ``operation``) that the
        class does not provide, saying where a parent's version was left behind."""
        message = f"{type(self).__name__} does not provide {operation}"
        parent = type(self)._reset_operations.get(name) if name else None
        if parent is not None:
            message += (f" ({parent}.{name} is for {parent}'s density, which {type(self).__name__} redefines: "
                        f"define {name} for the new density, or assign {parent}'s where it still holds)")
        elif name:
            message += f" (define {name})"
        return NotImplementedError(message)

    def provides(self, capability):
        """Whether this likelihood provides ``capability``, one of :data:`CAPABILITIES`.

        An operation (``"log_density_derivatives"``, ``"variational_expectations"``,
        ``"site_model"``) is provided where the instance's class :meth:`defines` it for its own
        density (a subclass inherits what its parent provides unless it redefines the density:
        ``__init_subclass__``); ``"variational_expectations"`` also where
        ``"log_density_derivatives"`` is (the default quadrature runs on it).  ``"noise"`` is
        ``observation_noise`` where the class defines ``noise``; ``"polya_gamma"`` (the
        Pólya-Gamma augmentation) is False unless a subclass says otherwise for its own density.

        Parameters
        ----------
        capability : str
            One of ``"log_density_derivatives"`` (Laplace), ``"variational_expectations"`` (VGP,
            SVGP), ``"site_model"`` (EP, QP), ``"noise"`` (Exact, VFE, DTC, FITC) and
            ``"polya_gamma"``.

        Returns
        -------
        bool

        Raises
        ------
        ValueError
            An unknown capability.
        """
        if capability == "noise":
            return bool(self.observation_noise) and self.defines("noise")
        if capability == "polya_gamma":
            return False
        if capability not in CAPABILITIES:
            raise ValueError(f"{type(self).__name__}: unknown capability {capability!r}; known: {list(CAPABILITIES)}")
        if self.defines(capability):
            return True
        return capability == "variational_expectations" and self.provides("log_density_derivatives")

    @classmethod
    def variants(cls):
        """Example instances covering the class's branches (its links, its noise models): what
        the list of supported pairs and the conformance suite run.

        Returns
        -------
        tuple of Likelihood
            ``(cls(),)`` unless the class says otherwise.
        """
        return (cls(),)

    def for_rows(self, X):
        """This likelihood for the rows of X: what the per-row operations (and
        :meth:`coded_targets`) of those rows run on.  ``self`` unless the density of a row depends
        on what X says of it (:class:`gpdsl.likelihoods.PerOutput`: the output index); the
        methods call it with the rows they evaluate, the posterior with X_new's.

        Parameters
        ----------
        X : ndarray or Dask array, shape (n, D)
            The rows' inputs (as the kernel sees them).

        Returns
        -------
        Likelihood
            A likelihood whose operations take arrays of n rows in X's order.
        """
        return self

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

    def with_labels_of(self, y):
        """This likelihood with whatever it learns from the training labels y before a fit (a
        K-class likelihood: the class labels); ``self`` unless it has something to learn.

        Parameters
        ----------
        y : array_like, shape (N,)
            The training targets as the user gave them.

        Returns
        -------
        Likelihood
        """
        return self

    def coded_targets(self, y, n, name="y"):
        """Targets as the user gives them (to ``fit``, ``log_predictive``) checked against n rows
        and coded as the other operations take them: :func:`gpdsl.inputs.validate_targets`, then
        :meth:`prepare_targets`.

        Parameters
        ----------
        y : array_like, shape (n,)
            The targets.
        n : int
            The number of rows of X.
        name : str, default "y"
            The argument's name, for messages.

        Returns
        -------
        ndarray, shape (n,)
        """
        return self.prepare_targets(validate_targets(y, n, name))

    def log_density(self, y, f):
        """log p(y | f), elementwise (any shape broadcasting y against f).

        Parameters
        ----------
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.

        Returns
        -------
        ndarray
            The broadcast shape of y and f.
        """
        return self.log_density_derivatives(y, f)[0]

    def log_density_derivatives(self, y, f):
        """(log p, d/df, d^2/df^2, d^3/df^3 of log p(y | f)), elementwise.

        Parameters
        ----------
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
        raise self._unsupported("derivatives of its log density", "log_density_derivatives")

    def log_density_param_derivatives(self, y, f, derivatives=None):
        """(d log p / d theta, d^2 log p / df d theta, d^3 log p / df^2 d theta) for each scalar
        hyperparameter theta, elementwise; empty without hyperparameters.

        Parameters
        ----------
        y : ndarray, shape (n,) (or broadcasting against f)
            Targets as :meth:`prepare_targets` codes them.
        f : ndarray, shape (n,) (or any shape broadcasting against y)
            Latent function values.
        derivatives : tuple of 4 ndarray, optional
            :meth:`log_density_derivatives` at the same arguments when the caller has them (a
            parameter that shifts f, the Bernoulli bias, reuses them).

        Returns
        -------
        dict of str to tuple of 3 ndarray
            ``{name: (d log p/d theta, d^2 log p/df d theta, d^3 log p/df^2 d theta)}`` by local
            parameter name, each of the broadcast shape of y and f; empty (the default) for a
            likelihood without hyperparameters.
        """
        if not self.parameters(np.zeros((1, 1))):
            return {}
        raise self._unsupported("derivatives of its log density in its hyperparameters", "log_density_param_derivatives")

    def expectation_rule(self, y, mean, var):
        """A quadrature rule for E_N(f | mean_n, var_n)[g(f, y_n)]: sum_k w_nk g(f_nk).  The
        default is the ``quadrature_points`` Gauss-Hermite rule, exact for polynomials and
        accurate for log densities that are smooth on the scale of the latent sd (probit,
        logit); likelihoods narrower than that override it.

        Parameters
        ----------
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
            Standard nodes x with f = mean + sd x, or None for a rule placed otherwise.
        """
        nodes, weights = gauss_hermite(self.quadrature_points)
        return mean[:, None] + np.sqrt(np.maximum(var, 0.0))[:, None] * nodes[None, :], weights, nodes

    def variational_expectations(self, y, mean, var):
        """E_q[log p(y_n | f_n)] under q(f_n) = N(mean_n, var_n) and its gradients.

        The default runs :meth:`expectation_rule` over :meth:`log_density_derivatives`:
        d/d mean = E_q[d log p / df] (exact for the rule's sum too).  For a rule of standard
        nodes, ve = sum_k w_k log p(y | m + s x_k) is differentiated as it stands,
        d/d var = sum_k w_k x_k d log p / df / (2 s), so that an optimiser sees one consistent
        function (1/2 E_q[d^2 log p / df^2], Opper & Archambeau 2009 eq. 8, differs from it by the
        rule's error: 1e-3 for the probit at var 80 with 100 nodes); otherwise, and at var = 0,
        1/2 E_q[d^2 log p / df^2].

        Parameters
        ----------
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
            d sum_n ve_n / d theta for each hyperparameter theta, by local name.
        """
        n = mean.shape[0]
        if n > _EXPECTATION_BLOCK_ROWS:
            # The rule's (rows, nodes) temporaries are kept to blocks of rows: a chunk of 10^5
            # rows with 100 nodes would otherwise hold ~1 GB of them.
            blocks = [self.variational_expectations(y[s], mean[s], var[s])
                      for s in row_slices(n, _EXPECTATION_BLOCK_ROWS)]
            grads = {name: sum(b[3][name] for b in blocks) for name in blocks[0][3]}
            return tuple(np.concatenate([b[i] for b in blocks]) for i in range(3)) + (grads,)
        f, weights, nodes = self.expectation_rule(y, mean, var)
        yy = np.broadcast_to(y[:, None], f.shape)
        derivatives = self.log_density_derivatives(yy, f)
        logp, d1, d2, _ = derivatives
        params = self.log_density_param_derivatives(yy, f, derivatives=derivatives)
        grads = {name: np.array(np.sum(parts[0] * weights)) for name, parts in params.items()}
        d_var = 0.5 * np.sum(d2 * weights, axis=1)
        if nodes is not None:
            sd = np.sqrt(np.maximum(var, 0.0))
            with np.errstate(divide="ignore", invalid="ignore"):
                d_var = np.where(sd > 0.0, np.sum(d1 * (weights * nodes), axis=1) / (2.0 * sd), d_var)
        return np.sum(logp * weights, axis=1), np.sum(d1 * weights, axis=1), d_var, grads

    def site_model(self):
        """The :class:`SiteModel` of EP's and QP's jitted site updates (Minka 2001; the QP
        paper's tilted moments).

        Returns
        -------
        SiteModel
            Its ``names`` are local parameter names.
        """
        raise self._unsupported("EP/QP tilted moments", "site_model")

    def _one_latent(self, operation, name):
        """Raise the refusal of a default that integrates one latent function (``n_latent`` 1)."""
        if self.n_latent != 1:
            raise self._unsupported(f"{operation} (the default integrates one latent function)", name)

    def _binary_codes(self):
        """(negative, positive): the codes :meth:`prepare_targets` gives the labels 0 and 1."""
        negative, positive = self.prepare_targets(np.array([0.0, 1.0]))
        return negative, positive

    def conditional_moments(self, f):
        """E[y | f] and Var[y | f], elementwise: what the default :meth:`predictive` integrates
        over f for ``y_mean`` / ``y_var``.  The default derives them from the density where the
        targets' support is known (``target_kind`` "binary": the two codes of
        :meth:`prepare_targets`; "count": sums of the pmf over the counts that hold its mass,
        :func:`gpdsl.likelihoods.density_integrals.count_moments`); real-valued targets need a
        subclass to define it.

        Parameters
        ----------
        f : ndarray, shape (n,)
            Latent function values.

        Returns
        -------
        mean, var : ndarray, shape (n,)

        Raises
        ------
        NotImplementedError
            For targets of another kind, or a count pmf whose mass lies beyond 2^40 counts or
            that does not sum to 1 (to 1e-6) there.
        """
        self._one_latent("E[y | f] and Var[y | f]", "conditional_moments")
        f = np.asarray(f, dtype=float)
        if self.target_kind == "binary":
            negative, positive = self._binary_codes()
            p = np.exp(self.log_density(np.full(f.shape, positive), f))
            return negative + p * (positive - negative), p * (1.0 - p) * (positive - negative) ** 2
        if self.target_kind == "count":
            mean, var, failure = count_moments(self, f.ravel())
            if failure is not None:
                raise self._unsupported(f"count moments by summation ({failure})", "conditional_moments")
            return mean.reshape(f.shape), var.reshape(f.shape)
        raise self._unsupported("E[y | f] and Var[y | f] for real-valued targets (the y_mean and y_var of "
                                "Posterior.predict need them)", "conditional_moments")

    def predictive(self, f_mean, f_var):
        """Predictive summaries of y* under f* ~ N(f_mean, f_var).

        The default: ``p`` = p(y* = 1) = exp(:meth:`log_predictive`) for binary targets
        (``target_kind`` "binary"); otherwise ``y_mean`` = E[E[y | f]] and
        ``y_var`` = E[Var[y | f]] + Var[E[y | f]] over the ``quadrature_points`` Gauss-Hermite
        rule in f, from :meth:`conditional_moments`; for counts without them, from pmfs summed at
        the nodes of a rule sized to the row's latent sd (:data:`_COUNT_RULES`), NaN with a
        warning for rows where that fails (a log-link pmf under latent sds above ~2 needs counts
        beyond 2^40).  Where those are not given (real-valued targets and no
        ``conditional_moments``) it warns and returns no summary of y, so that
        ``Posterior.predict`` reports f alone.

        Parameters
        ----------
        f_mean : ndarray, shape (n,)
            Latent predictive means.
        f_var : ndarray, shape (n,)
            Latent predictive variances.

        Returns
        -------
        dict of str to ndarray
            Arrays (n,): ``y_mean``/``y_var`` or ``p``.
        """
        self._one_latent("a predictive distribution", "predictive")
        f_mean, f_var = np.asarray(f_mean, dtype=float), np.asarray(f_var, dtype=float)
        if self.target_kind == "binary":
            positive = self._binary_codes()[1]
            return {"p": np.exp(self.log_predictive(f_mean, f_var, np.full(f_mean.shape, positive)))}
        if self.target_kind != "count" and not self.defines("conditional_moments"):
            warnings.warn(f"{type(self).__name__} defines no conditional_moments(f) (E[y | f], Var[y | f]) for its "
                          "real-valued targets, nor predictive: the prediction reports f only (no y_mean, y_var)",
                          UserWarning, stacklevel=3)
            return {}
        if self.defines("conditional_moments"):
            return self._predictive_moments(f_mean, f_var, self.conditional_moments, self.quadrature_points)
        return self._count_predictive(f_mean, f_var)

    def _predictive_moments(self, f_mean, f_var, moments, points):
        """y_mean = E[E[y | f]] and y_var = E[Var[y | f]] + Var[E[y | f]] over the ``points``-node
        Gauss-Hermite rule in f, from ``moments(f) -> (mean, var)``."""
        nodes, weights = gauss_hermite(points)
        f = f_mean[:, None] + np.sqrt(np.maximum(f_var, 0.0))[:, None] * nodes[None, :]
        mean, var = moments(f)
        y_mean = mean @ weights
        return {"y_mean": y_mean, "y_var": var @ weights + (mean - y_mean[:, None]) ** 2 @ weights}

    def _count_predictive(self, f_mean, f_var):
        """The predictive of counts by summed pmfs (:meth:`_predictive_moments` over
        :func:`gpdsl.likelihoods.density_integrals.count_moments`, rows grouped by the rule
        their latent sd needs, :data:`_COUNT_RULES`); a row whose rule reaches a latent value
        where the summation fails gets NaN, and a warning says where and why."""
        sd = np.sqrt(np.maximum(f_var, 0.0))
        rule = np.searchsorted(np.array([limit for _, limit in _COUNT_RULES]), sd)
        out = {"y_mean": np.empty(f_mean.shape), "y_var": np.empty(f_mean.shape)}
        failures = []

        def moments(f):
            mean, var, failure = count_moments(self, f.ravel())
            failures.append(failure)
            return mean.reshape(f.shape), var.reshape(f.shape)

        for k, points in enumerate([q for q, _ in _COUNT_RULES] + [self.quadrature_points]):
            rows = np.flatnonzero(rule == k)
            for block in row_slices(rows.size, _EXPECTATION_BLOCK_ROWS):
                part = self._predictive_moments(f_mean[rows[block]], f_var[rows[block]], moments, points)
                for key in out:
                    out[key][rows[block]] = part[key]
        failed = [failure for failure in failures if failure is not None]
        if failed:
            warnings.warn(f"{type(self).__name__}: the predictive y_mean and y_var of "
                          f"{int(np.sum(np.isnan(out['y_mean'])))} of {f_mean.size} rows are NaN: they sum the pmf over "
                          f"counts and {failed[0]} (define conditional_moments(f), E[y | f] and Var[y | f], or "
                          "predictive)", UserWarning, stacklevel=3)
        return out

    def log_predictive(self, f_mean, f_var, y):
        """log p(y* | x*) = log E_N(f*|f_mean,f_var)[p(y* | f*)].

        The default integrates the density by a rule centred on the tilted mode of
        p(y | f) N(f | f_mean, f_var) and spread out to the prior's scale, summed in log space
        (:func:`gpdsl.likelihoods.density_integrals.log_gaussian_integral`: within 1e-11
        relative of 30-digit quadrature for likelihoods far narrower or wider than the latent sd,
        latent variances 1e-4 to 1e4), so that a confident miss stays finite.

        Parameters
        ----------
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
        self._one_latent("a log predictive density", "log_predictive")
        f_mean, f_var = np.asarray(f_mean, dtype=float), np.asarray(f_var, dtype=float)
        y = np.broadcast_to(np.asarray(y, dtype=float), f_mean.shape)
        out = np.empty(f_mean.shape)
        for rows in row_slices(f_mean.size, _EXPECTATION_BLOCK_ROWS):
            out[rows] = log_gaussian_integral(self, y[rows], f_mean[rows], f_var[rows])
        return out

    def sample(self, f, rng):
        """Draws of y given draws of f (any shape), for posterior-predictive checks.

        The default draws from the density where the targets' support is known: binary targets
        (``target_kind`` "binary") by p(y = 1 | f), counts ("count") by inverting the cumulative
        sum of the pmf; real-valued targets need a subclass to define it.

        Parameters
        ----------
        f : ndarray
            Draws of the latent function (any shape, e.g. (chains, draws, n)).
        rng : numpy.random.Generator
            The random generator.

        Returns
        -------
        ndarray
            Draws of y, the shape of ``f``.

        Raises
        ------
        NotImplementedError
            For targets of another kind (``to_inference_data`` then leaves out its
            posterior-predictive group).
        """
        self._one_latent("sampling", "sample")
        f = np.asarray(f, dtype=float)
        if self.target_kind == "binary":
            negative, positive = self._binary_codes()
            p = np.exp(self.log_density(np.full(f.shape, positive), f))
            return np.where(rng.uniform(size=f.shape) < p, positive, negative)
        if self.target_kind == "count":
            draws, failure = count_draws(self, f.ravel(), rng.uniform(size=f.size))
            if failure is not None:
                raise self._unsupported(f"count draws by summation ({failure})", "sample")
            return draws.reshape(f.shape)
        raise self._unsupported("sampling of real-valued targets (draws of y given f: the posterior_predictive "
                                "group of to_inference_data needs it)", "sample")

    def surrogate(self, X, y):
        """A Gaussian pseudo-regression (noise 1/w, targets r/w) that greedy inducing selection
        scores before the first fit.  By default, where the likelihood gives
        ``log_density_derivatives``, Newton's at f = 0: w = -d2 log p (floored at 1e-6), r = d log p.

        Parameters
        ----------
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
        if not self.provides("log_density_derivatives"):
            raise self._unsupported("a surrogate regression for greedy selection", "surrogate")
        # The default: Newton's pseudo-regression at f = 0, weights -d2 (floored: a likelihood
        # that is not log-concave can curve upwards there) and weighted targets d1.
        _, d1, d2, _ = self.log_density_derivatives(y, np.zeros_like(y))
        return np.maximum(-d2, 1e-6), d1

    def log_density_bound(self, y):
        """sum_n max_f log p(y_n | f), an upper bound on the log marginal likelihood of any prior
        (p(y) = E_prior[prod_n p(y_n | f_n)] <= prod_n max_f p(y_n | f)), or None where the
        likelihood does not give one.  ``Model.fit`` treats an evidence far above it as a
        numerical failure (EP's, from sites that lost all precision, reached 3e8 on 31 points).

        Parameters
        ----------
        y : ndarray, shape (N,)
            Training targets, coded.

        Returns
        -------
        float or None
        """
        return None

    def constant_model_log_likelihood(self, y):
        """The objective of the constant model f = 0 that ``Model.fit`` flags fits against, or None.

        Parameters
        ----------
        y : ndarray, shape (N,)
            Training targets, coded.

        Returns
        -------
        float or None
        """
        return None

    def noise(self, X):
        """Per-point Gaussian noise variances lambda_n at X (``observation_noise`` likelihoods).

        Parameters
        ----------
        X : ndarray, shape (n, D)
            Inputs.

        Returns
        -------
        ndarray, shape (n,)
        """
        raise self._unsupported("Gaussian observation noise", "noise")

    def noise_vjp(self, X, g):
        """Vector-Jacobian product of :meth:`noise`: sum_n g_n d lambda_n / d theta.

        Parameters
        ----------
        X : ndarray, shape (n, D)
            Inputs.
        g : ndarray, shape (n,)
            The adjoint d objective / d lambda.

        Returns
        -------
        dict of str to ndarray
            By local parameter name.
        """
        raise self._unsupported("Gaussian observation noise", "noise_vjp")

    def describe(self):
        """A short text for summaries and attrs.

        Returns
        -------
        str
            The class name (with its link or noise model where it has one).
        """
        return type(self).__name__


__all__ = ["Likelihood", "SiteModel", "gauss_hermite", "CAPABILITIES", "DENSITY", "DERIVED_FROM_DENSITY"]
