"""Priors on hyperparameters, on their natural (constrained) scale.

A hyperparameter that carries a prior is fitted by MAP: the optimiser maximises
``log_evidence + log p(theta)`` where ``p`` is the density of the natural value theta (no
log-Jacobian of the log transform is added, so the optimum is the mode in theta).  A prior
declared on a transform of theta (:class:`OnTransformed`, e.g. half-Normal on the amplitude
sqrt(variance)) is turned into the density of theta itself, its change-of-variables Jacobian
included, so the same rule holds: MAP finds the mode of that density in theta.  Any frozen
``scipy.stats`` distribution is accepted too; its log-density slope is then taken by a central
difference, because scipy exposes no analytic derivative.

Each family gives ``log_density`` and ``grad_log_density`` (elementwise, normalised),
``initial_value`` (where a fit starts) and ``support`` (the interval of theta where the density
is positive).  The families register themselves in :attr:`Prior.registry` by class name, which is
where a model file's ``{prior = "HalfNormal", scale = 1.0}`` is resolved (:mod:`gpdsl.io.spec`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy import special

from .checks import ValueEquality, check_positive_number, is_frozen_scipy, is_number


def _check_finite_number(owner, name, value):
    """Raise a ValueError naming ``owner`` and ``name`` unless ``value`` is a finite real number (not a bool)."""
    if not is_number(value) or not np.isfinite(value):
        raise ValueError(f"{owner}: {name} must be a finite number, got {value!r}")


def _checked_initial(owner, value, positive):
    """A prior's ``initial`` as it is kept: None, the number itself, or, for an array
    hyperparameter (ARD length-scales), a tuple of floats, one a coordinate (a tuple, not an
    array, so that the frozen prior stays hashable and compares by value); each positive, or
    finite where ``positive`` is False.  A ValueError names ``owner`` otherwise."""
    if value is None:
        return None
    if np.ndim(value) == 0:
        (check_positive_number if positive else _check_finite_number)(owner, "initial", value)
        return value
    try:
        values = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        values = None
    if values is None or values.ndim != 1 or values.size == 0 \
            or not all(is_number(v) for v in np.asarray(value, dtype=object)):
        raise ValueError(f"{owner}: initial must be a number or a non-empty 1-D sequence of numbers (one an "
                         f"element of an array hyperparameter), got {value!r}")
    for v in values:
        (check_positive_number if positive else _check_finite_number)(owner, "initial", float(v))
    return tuple(float(v) for v in values)


def _given_initial(initial):
    """``initial`` (as :func:`_checked_initial` keeps it) as :meth:`Prior.initial_value` returns it."""
    return np.array(initial) if isinstance(initial, tuple) else initial


class Prior:
    """Base class: ``log_density(x)``, ``grad_log_density(x)`` (elementwise), ``initial_value()``
    and ``support``.

    Every subclass defined in gpdsl registers itself in ``Prior.registry`` under its class name
    when its class statement runs, unless declared ``registered=False`` (``ScipyPrior``, which
    files spell as ``{prior = "scipy", ...}``) or named with a leading underscore; a model file
    names only these (a file never names code of its choosing).
    """

    registry: ClassVar[dict] = {}

    def __init_subclass__(cls, registered=True, **kwargs):
        super().__init_subclass__(**kwargs)
        if registered and not cls.__name__.startswith("_") and cls.__module__.split(".")[0] == "gpdsl":
            Prior.registry[cls.__name__] = cls

    @property
    def support(self):
        """tuple of float: ``(low, high)``, the interval of natural values where the density is
        positive (an endpoint may or may not belong to it: each family says)."""
        raise NotImplementedError(f"{type(self).__name__}: a prior must state its support (low, high)")

    @classmethod
    def variants(cls):
        """Example instances at the family's typical and extreme parameters: what the
        conformance checks (:func:`gpdsl.testing.check_prior`) run on every registered family.

        Returns
        -------
        tuple of Prior
        """
        raise NotImplementedError(f"{cls.__name__}: a registered prior gives example instances (variants)")

    def log_density(self, x):
        """Log density log p(x) of natural-scale value(s), elementwise.

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s).

        Returns
        -------
        float or ndarray
            Same shape as ``x``.
        """
        raise NotImplementedError

    def grad_log_density(self, x):
        """Slope d log p(x) / dx of natural-scale value(s), elementwise.

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s).

        Returns
        -------
        float or ndarray
            Same shape as ``x``.
        """
        raise NotImplementedError

    def initial_value(self):
        """Where the optimiser starts a hyperparameter that carries this prior.

        Returns
        -------
        float or ndarray of shape (D,)
            An array where ``initial`` is a sequence: the prior then declares an array
            hyperparameter (ARD length-scales, one per feature), each element under the same
            density.
        """
        raise NotImplementedError


class _PositiveFamily(Prior):
    """A family on x > 0 whose parameters (dataclass fields) are all positive numbers, but an
    ``initial`` left at None; validated on construction, naming the class, field and value."""

    support = (0.0, np.inf)

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "initial":
                object.__setattr__(self, "initial", _checked_initial(type(self).__name__, value, positive=True))
            else:
                check_positive_number(type(self).__name__, field.name, value)


@dataclass(frozen=True)
class Gamma(_PositiveFamily):
    """Gamma(shape, rate) on the natural scale: p(x) ∝ x^(shape-1) exp(-rate x).

    Parameters
    ----------
    shape : float
        Positive shape a.
    rate : float
        Positive rate b (inverse scale).
    initial : float or sequence of float, optional
        Positive value where optimisation starts (a sequence: an array hyperparameter, e.g.
        ARD length-scales, each element under this prior) (default: the mean, shape / rate).

    Raises
    ------
    ValueError
        If a parameter is not a positive finite number.
    """

    shape: float
    rate: float
    initial: float | None = None

    def log_density(self, x):
        """Log density log p(x) on the natural scale, elementwise.

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s), positive for a positive hyperparameter.

        Returns
        -------
        float or ndarray
            a log(b) - log Gamma(a) + (a - 1) log x - b x.
        """
        x = np.asarray(x, dtype=float)
        return (self.shape * np.log(self.rate) - special.gammaln(self.shape)
                + (self.shape - 1.0) * np.log(x) - self.rate * x)

    def grad_log_density(self, x):
        """Slope d log p(x) / dx on the natural scale, elementwise.

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s).

        Returns
        -------
        float or ndarray
            (a - 1) / x - b.
        """
        x = np.asarray(x, dtype=float)
        return (self.shape - 1.0) / x - self.rate

    def initial_value(self):
        """Where the optimiser starts the hyperparameter.

        Returns
        -------
        float
            ``initial`` if given, else the mean a / b.
        """
        return _given_initial(self.initial) if self.initial is not None else self.shape / self.rate

    @classmethod
    def variants(cls):
        """Examples for the conformance checks (:meth:`Prior.variants`)."""
        return (cls(2.0, 3.0), cls(0.7, 0.05), cls(30.0, 2.0, initial=12.0))


@dataclass(frozen=True)
class LogNormal(Prior):
    """Log-normal prior: log x ~ Normal(mu, sigma).

    Parameters
    ----------
    mu : float
        Finite mean of log x.
    sigma : float
        Positive standard deviation of log x.
    initial : float or sequence of float, optional
        Positive value where optimisation starts (a sequence: an array hyperparameter, e.g.
        ARD length-scales, each element under this prior) (default: the median exp(mu)).

    Raises
    ------
    ValueError
        If ``mu`` is not a finite number or ``sigma``/``initial`` not a positive number.
    """

    mu: float
    sigma: float
    initial: float | None = None
    support = (0.0, np.inf)

    def __post_init__(self):
        _check_finite_number("LogNormal", "mu", self.mu)
        check_positive_number("LogNormal", "sigma", self.sigma)
        object.__setattr__(self, "initial", _checked_initial("LogNormal", self.initial, positive=True))

    def log_density(self, x):
        """Log density log p(x) on the natural scale, elementwise.

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s), positive for a positive hyperparameter.

        Returns
        -------
        float or ndarray
            -z^2 / 2 - log(x sigma sqrt(2 pi)) with z = (log x - mu) / sigma.
        """
        x = np.asarray(x, dtype=float)
        z = (np.log(x) - self.mu) / self.sigma
        return -0.5 * z * z - np.log(x * self.sigma * np.sqrt(2.0 * np.pi))

    def grad_log_density(self, x):
        """Slope d log p(x) / dx on the natural scale, elementwise.

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s).

        Returns
        -------
        float or ndarray
            -((log x - mu) / sigma^2 + 1) / x.
        """
        x = np.asarray(x, dtype=float)
        return -((np.log(x) - self.mu) / self.sigma ** 2 + 1.0) / x

    def initial_value(self):
        """Where the optimiser starts the hyperparameter.

        Returns
        -------
        float
            ``initial`` if given, else the median exp(mu).
        """
        return _given_initial(self.initial) if self.initial is not None else float(np.exp(self.mu))

    @classmethod
    def variants(cls):
        """Examples for the conformance checks (:meth:`Prior.variants`)."""
        return (cls(0.2, 0.7), cls(-3.0, 2.5), cls(4.0, 0.05, initial=50.0))


@dataclass(frozen=True)
class Normal(Prior):
    """Normal(mu, sigma) on the natural scale: p(x) = exp(-(x - mu)^2 / (2 sigma^2)) / (sigma sqrt(2 pi)).

    For an unconstrained hyperparameter (a bias), or as the ``base`` of
    ``OnTransformed(Normal(mu, sigma), "log")``, which is ``LogNormal(mu, sigma)``.  On a
    positive hyperparameter it is the normal density cut at 0 (not renormalised), which MAP
    accepts.

    Parameters
    ----------
    mu : float
        Finite mean.
    sigma : float
        Positive standard deviation.
    initial : float or sequence of float, optional
        Finite value where optimisation starts (a sequence: an array hyperparameter, each
        element under this prior) (default: the mean mu).

    Raises
    ------
    ValueError
        If ``mu``/``initial`` is not a finite number or ``sigma`` not a positive one.
    """

    mu: float
    sigma: float
    initial: float | None = None
    support = (-np.inf, np.inf)

    def __post_init__(self):
        _check_finite_number("Normal", "mu", self.mu)
        check_positive_number("Normal", "sigma", self.sigma)
        object.__setattr__(self, "initial", _checked_initial("Normal", self.initial, positive=False))

    def log_density(self, x):
        """Log density log p(x), elementwise.

        Parameters
        ----------
        x : float or ndarray
            Hyperparameter value(s).

        Returns
        -------
        float or ndarray
            -z^2 / 2 - log(sigma sqrt(2 pi)) with z = (x - mu) / sigma.
        """
        z = (np.asarray(x, dtype=float) - self.mu) / self.sigma
        return -0.5 * z * z - np.log(self.sigma * np.sqrt(2.0 * np.pi))

    def grad_log_density(self, x):
        """Slope d log p(x) / dx, elementwise.

        Parameters
        ----------
        x : float or ndarray
            Hyperparameter value(s).

        Returns
        -------
        float or ndarray
            -(x - mu) / sigma^2.
        """
        return -(np.asarray(x, dtype=float) - self.mu) / self.sigma ** 2

    def initial_value(self):
        """Where the optimiser starts the hyperparameter.

        Returns
        -------
        float
            ``initial`` if given, else the mean mu.
        """
        return _given_initial(self.initial) if self.initial is not None else float(self.mu)

    @classmethod
    def variants(cls):
        """Examples for the conformance checks (:meth:`Prior.variants`)."""
        return (cls(0.0, 1.0), cls(-40.0, 7.5), cls(3.0, 1e-3, initial=3.001))


def _on_half_line(x, density, slope=False):
    """``density`` where ``x >= 0`` and, outside, -inf for a log density or nan for its slope
    (undefined there); ``density`` is evaluated with floating-point warnings off, as its
    formula may overflow or divide by zero where it is not used."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        values = density(np.maximum(x, 0.0))
    return np.where(x >= 0.0, values, np.nan if slope else -np.inf)


@dataclass(frozen=True)
class HalfNormal(_PositiveFamily):
    """Half-normal prior: |N(0, scale^2)|, p(x) = sqrt(2 / pi) / scale exp(-x^2 / (2 scale^2)), x >= 0.

    Stan's ``normal(0, scale)`` on a parameter declared ``<lower=0>``; the usual weakly
    informative prior on a GP amplitude or a noise standard deviation (with
    :class:`OnTransformed` ``"sqrt"`` on a variance).

    Parameters
    ----------
    scale : float
        Positive scale (the standard deviation of the normal folded at 0).
    initial : float or sequence of float, optional
        Positive value where optimisation starts (a sequence: an array hyperparameter, e.g.
        ARD length-scales, each element under this prior) (default: the median,
        scale sqrt(2) erf^-1(1/2) ~ 0.674 scale; the mode 0 lies on the boundary).

    Raises
    ------
    ValueError
        If a parameter is not a positive finite number.
    """

    scale: float
    initial: float | None = None

    def log_density(self, x):
        """Log density log p(x), elementwise (-inf for x < 0; x = 0 included).

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s).

        Returns
        -------
        float or ndarray
            log(sqrt(2 / pi) / scale) - z^2 / 2 with z = x / scale.
        """
        const = 0.5 * np.log(2.0 / np.pi) - np.log(self.scale)
        return _on_half_line(x, lambda v: const - 0.5 * np.square(v / self.scale))

    def grad_log_density(self, x):
        """Slope d log p(x) / dx, elementwise (nan for x < 0, where it is undefined).

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s).

        Returns
        -------
        float or ndarray
            -x / scale^2.
        """
        return _on_half_line(x, lambda v: -v / self.scale ** 2, slope=True)

    def initial_value(self):
        """Where the optimiser starts the hyperparameter.

        Returns
        -------
        float
            ``initial`` if given, else the median scale sqrt(2) erf^-1(1/2).
        """
        return _given_initial(self.initial) if self.initial is not None else float(self.scale * np.sqrt(2.0) * special.erfinv(0.5))

    @classmethod
    def variants(cls):
        """Examples for the conformance checks (:meth:`Prior.variants`)."""
        return (cls(1.0), cls(1e-3), cls(250.0, initial=3.0))


@dataclass(frozen=True)
class HalfCauchy(_PositiveFamily):
    """Half-Cauchy prior: p(x) = 2 / (pi scale (1 + (x / scale)^2)), x >= 0.

    Stan's ``cauchy(0, scale)`` on a ``<lower=0>`` parameter; heavy-tailed, the shrinkage prior
    of the horseshoe and of SAAS (on inverse length-scales, with :class:`OnTransformed`
    ``"reciprocal"``).

    Parameters
    ----------
    scale : float
        Positive scale (also the median).
    initial : float or sequence of float, optional
        Positive value where optimisation starts (a sequence: an array hyperparameter, e.g.
        ARD length-scales, each element under this prior) (default: the median, ``scale``).

    Raises
    ------
    ValueError
        If a parameter is not a positive finite number.
    """

    scale: float
    initial: float | None = None

    def log_density(self, x):
        """Log density log p(x), elementwise (-inf for x < 0; x = 0 included).

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s).

        Returns
        -------
        float or ndarray
            log(2 / (pi scale)) - log(1 + z^2) with z = x / scale, computed as
            2 log max(z, 1) + log1p(r^2), r = min(z, 1/z), so that z^2 never overflows.
        """
        const = np.log(2.0 / np.pi) - np.log(self.scale)

        def density(v):
            z = v / self.scale
            r = np.minimum(z, 1.0 / z)
            return const - 2.0 * np.log(np.maximum(z, 1.0)) - np.log1p(r * r)
        return _on_half_line(x, density)

    def grad_log_density(self, x):
        """Slope d log p(x) / dx, elementwise (nan for x < 0, where it is undefined).

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s).

        Returns
        -------
        float or ndarray
            -2 z / (scale (1 + z^2)), computed as -2 r / (scale (1 + r^2)) with
            r = min(z, 1/z) (the same value: z / (1 + z^2) is unchanged by z -> 1/z), so
            that z^2 never overflows.
        """
        def slope(v):
            z = v / self.scale
            r = np.minimum(z, 1.0 / z)
            return -2.0 * r / (self.scale * (1.0 + r * r))
        return _on_half_line(x, slope, slope=True)

    def initial_value(self):
        """Where the optimiser starts the hyperparameter.

        Returns
        -------
        float
            ``initial`` if given, else the median ``scale``.
        """
        return _given_initial(self.initial) if self.initial is not None else float(self.scale)

    @classmethod
    def variants(cls):
        """Examples for the conformance checks (:meth:`Prior.variants`)."""
        return (cls(1.0), cls(0.01), cls(40.0, initial=0.5))


@dataclass(frozen=True)
class InverseGamma(_PositiveFamily):
    """Inverse-gamma prior (Stan's ``inv_gamma(shape, scale)``): 1/x ~ Gamma(shape, rate=scale),
    p(x) = scale^shape / Gamma(shape) x^(-shape-1) exp(-scale / x), x > 0.

    Its density vanishes faster than any power at 0, which keeps a length-scale away from the
    degenerate limit (Stan's and Betancourt's recommendation for length-scales).

    Parameters
    ----------
    shape : float
        Positive shape a.
    scale : float
        Positive scale b (scipy's ``invgamma(a, scale=b)``).
    initial : float or sequence of float, optional
        Positive value where optimisation starts (a sequence: an array hyperparameter, e.g.
        ARD length-scales, each element under this prior) (default: the median b / Q(a, 1/2), Q the
        inverse of the regularised lower incomplete gamma function; the mean exists only for a > 1).

    Raises
    ------
    ValueError
        If a parameter is not a positive finite number.
    """

    shape: float
    scale: float
    initial: float | None = None

    def log_density(self, x):
        """Log density log p(x), elementwise (-inf for x <= 0, its limit at 0).

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s).

        Returns
        -------
        float or ndarray
            a log b - log Gamma(a) - (a + 1) log x - b / x.
        """
        x = np.asarray(x, dtype=float)
        const = self.shape * np.log(self.scale) - special.gammaln(self.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            values = const - (self.shape + 1.0) * np.log(x) - self.scale / x
        return np.where(x > 0.0, values, -np.inf)

    def grad_log_density(self, x):
        """Slope d log p(x) / dx, elementwise (nan for x <= 0).

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s).

        Returns
        -------
        float or ndarray
            (b / x - (a + 1)) / x.
        """
        x = np.asarray(x, dtype=float)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            values = (self.scale / x - (self.shape + 1.0)) / x
        return np.where(x > 0.0, values, np.nan)

    def initial_value(self):
        """Where the optimiser starts the hyperparameter.

        Returns
        -------
        float
            ``initial`` if given, else the median b / Q(a, 1/2).
        """
        return _given_initial(self.initial) if self.initial is not None else float(self.scale / special.gammaincinv(self.shape, 0.5))

    @classmethod
    def variants(cls):
        """Examples for the conformance checks (:meth:`Prior.variants`)."""
        return (cls(2.0, 3.0), cls(0.5, 0.2), cls(11.3, 40.0, initial=1.0))


@dataclass(frozen=True)
class _Transform:
    """A monotone map g of a positive hyperparameter theta, for :class:`OnTransformed`: g, its
    inverse, g', log|g'(theta)| and the slope of that, and the interval g maps (0, inf) onto."""

    forward: object
    inverse: object
    derivative: object
    log_jacobian: object
    log_jacobian_slope: object
    image: tuple


# The maps a prior may be declared on, by the name OnTransformed's ``transform`` takes.
TRANSFORMS = {
    "sqrt": _Transform(np.sqrt, np.square, lambda x: 0.5 / np.sqrt(x), lambda x: -np.log(2.0) - 0.5 * np.log(x),
                       lambda x: -0.5 / x, (0.0, np.inf)),
    "log": _Transform(np.log, np.exp, np.reciprocal, lambda x: -np.log(x), lambda x: -1.0 / x, (-np.inf, np.inf)),
    "reciprocal": _Transform(np.reciprocal, np.reciprocal, lambda x: -1.0 / (x * x), lambda x: -2.0 * np.log(x),
                             lambda x: -2.0 / x, (0.0, np.inf)),
}


@dataclass(frozen=True)
class OnTransformed(Prior):
    """A prior declared on g(theta), a transform of a positive hyperparameter theta, turned into
    the density of theta by the change of variables

        p(theta) = p_base(g(theta)) |g'(theta)|.

    ``OnTransformed(HalfNormal(1.0), "sqrt")`` on a kernel variance is a half-normal prior on the
    amplitude sqrt(variance) (Stan's ``alpha ~ normal(0, 1)`` for ``alpha^2`` the variance);
    ``OnTransformed(HalfCauchy(0.1), "reciprocal")`` on a length-scale is SAAS's half-Cauchy on
    the inverse length-scale; ``OnTransformed(Normal(mu, sigma), "log")`` is
    ``LogNormal(mu, sigma)``.  Because the Jacobian is included, the density is proper in theta
    (it integrates to 1 when the base does), and MAP, which maximises the density of theta (see
    the module docstring), finds the mode in theta, not the image of the mode in g(theta).

    That mode may not exist: with ``"sqrt"`` and a base of positive density at 0 (half-normal,
    half-Cauchy) p(theta) ~ theta^(-1/2) as theta -> 0, so MAP runs a variance the evidence does
    not need (a redundant kernel's) to 0, as a Gamma of shape < 1 does.  A sampler, which works
    on log theta with the log-Jacobian, sees p(log theta) ~ theta^(1/2) there and is unaffected.

    Parameters
    ----------
    base : Prior or frozen scipy.stats distribution
        The prior on g(theta).  Its support must lie within g's image (so that the density of
        theta integrates to 1): (0, inf) for ``"sqrt"`` and ``"reciprocal"``, the real line for ``"log"``.
    transform : {"sqrt", "log", "reciprocal"}
        g: the square root (amplitude from variance), the logarithm, or 1 / theta (an inverse
        length-scale, a precision).

    Attributes
    ----------
    support : tuple of float
        g^-1 of the base's support, sorted (theta's interval).

    Raises
    ------
    TypeError
        If ``base`` is not a prior.
    ValueError
        If ``transform`` is not one of the names above, or the base's support reaches outside
        g's image.
    """

    base: Prior
    transform: str

    def __post_init__(self):
        base = as_prior(self.base)
        if base is None:
            raise TypeError(f"OnTransformed: base must be a gpdsl.priors.Prior or a frozen scipy.stats "
                            f"distribution, got {self.base!r}")
        object.__setattr__(self, "base", base)
        if not isinstance(self.transform, str) or self.transform not in TRANSFORMS:
            raise ValueError(f"OnTransformed: transform must be one of {sorted(TRANSFORMS)}, got {self.transform!r}")
        low, high = base.support
        image = TRANSFORMS[self.transform].image
        if low < image[0] or high > image[1]:
            raise ValueError(f"OnTransformed: base {describe(base)} has support ({low:g}, {high:g}), outside "
                             f"({image[0]:g}, {image[1]:g}) where {self.transform} maps a positive "
                             "hyperparameter, so the density of theta would not integrate to 1; "
                             f"use a prior on ({image[0]:g}, {image[1]:g})")

    def __repr__(self):
        # describe(): a scipy base's repr holds a memory address, and descriptions are compared
        # after a saved posterior is read back.
        return f"OnTransformed(base={describe(self.base)}, transform={self.transform!r})"

    @property
    def support(self):
        """tuple of float: g^-1 of the base's support, in increasing order."""
        inverse = TRANSFORMS[self.transform].inverse
        with np.errstate(divide="ignore"):
            ends = sorted(float(inverse(np.float64(end))) for end in self.base.support)
        return ends[0], ends[1]

    def log_density(self, x):
        """Log density of theta, elementwise (-inf for theta <= 0).

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s) theta.

        Returns
        -------
        float or ndarray
            log p_base(g(theta)) + log|g'(theta)|.
        """
        g = TRANSFORMS[self.transform]
        x = np.asarray(x, dtype=float)
        inside = x > 0.0
        theta = np.where(inside, x, 1.0)
        values = self.base.log_density(g.forward(theta)) + g.log_jacobian(theta)
        return np.where(inside, values, -np.inf)

    def grad_log_density(self, x):
        """Slope d log p(theta) / d theta, elementwise (nan for theta <= 0).

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s) theta.

        Returns
        -------
        float or ndarray
            (d log p_base / dg)(g(theta)) g'(theta) + d log|g'(theta)| / d theta.  Where the
            two terms nearly cancel (far in a tail, e.g. ``HalfCauchy`` on ``"reciprocal"`` at
            small theta) the sum is exact to the rounding of the terms, a few ulps of 1/theta.
        """
        g = TRANSFORMS[self.transform]
        x = np.asarray(x, dtype=float)
        inside = x > 0.0
        theta = np.where(inside, x, 1.0)
        values = self.base.grad_log_density(g.forward(theta)) * g.derivative(theta) + g.log_jacobian_slope(theta)
        return np.where(inside, values, np.nan)

    def initial_value(self):
        """Where the optimiser starts the hyperparameter.

        Returns
        -------
        float
            g^-1 of the base's initial value (the base's median maps to theta's median, g
            being monotone).
        """
        theta = TRANSFORMS[self.transform].inverse(np.asarray(self.base.initial_value(), dtype=float))
        return float(theta) if np.ndim(theta) == 0 else theta

    @classmethod
    def variants(cls):
        """Examples for the conformance checks (:meth:`Prior.variants`)."""
        return (cls(HalfNormal(1.0), "sqrt"), cls(HalfCauchy(0.1), "reciprocal"), cls(Normal(0.3, 0.8), "log"),
                cls(InverseGamma(3.0, 2.0), "sqrt"), cls(cls(Gamma(2.0, 1.0), "reciprocal"), "sqrt"))


@dataclass(frozen=True, eq=False)
class ScipyPrior(ValueEquality, Prior, registered=False):
    """Adapter for a frozen ``scipy.stats`` continuous distribution.

    Two priors are equal when their distributions have the same family and parameters.

    Parameters
    ----------
    distribution : scipy.stats frozen distribution
        E.g. ``scipy.stats.halfnorm(scale=2.0)``; its ``logpdf`` gives the density.
    initial : float or sequence of float, optional
        Finite value where optimisation starts (a sequence: an array hyperparameter, each
        element under this prior) (default: the distribution's median).

    Raises
    ------
    TypeError
        If ``distribution`` is not a frozen ``scipy.stats`` distribution.
    ValueError
        If ``initial`` is given and is not a finite number.
    """

    distribution: object
    initial: float | None = None

    def __post_init__(self):
        if not is_frozen_scipy(self.distribution):
            raise TypeError(f"ScipyPrior: distribution must be a frozen scipy.stats distribution, "
                            f"got {self.distribution!r}")
        object.__setattr__(self, "initial", _checked_initial("ScipyPrior", self.initial, positive=False))

    def log_density(self, x):
        """Log density log p(x) on the natural scale, elementwise.

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s), positive for a positive hyperparameter.

        Returns
        -------
        float or ndarray
            The distribution's ``logpdf``.
        """
        return self.distribution.logpdf(np.asarray(x, dtype=float))

    def grad_log_density(self, x):
        """Slope d log p(x) / dx on the natural scale, elementwise.

        Parameters
        ----------
        x : float or ndarray
            Natural-scale hyperparameter value(s).

        Returns
        -------
        float or ndarray
            A central difference of ``logpdf`` with step 1e-6 max(|x|, 1e-3) (scipy gives no analytic slope).
        """
        # Central difference with a step relative to x: scipy gives no analytic slope.
        x = np.asarray(x, dtype=float)
        h = 1e-6 * np.maximum(np.abs(x), 1e-3)
        return (self.distribution.logpdf(x + h) - self.distribution.logpdf(x - h)) / (2.0 * h)

    def initial_value(self):
        """Where the optimiser starts the hyperparameter.

        Returns
        -------
        float
            ``initial`` if given, else the distribution's median.
        """
        return _given_initial(self.initial) if self.initial is not None else float(self.distribution.median())

    @property
    def support(self):
        """tuple of float: the distribution's ``support()``."""
        low, high = self.distribution.support()
        return float(low), float(high)


def as_prior(obj):
    """Return ``obj`` as a :class:`Prior` if it is one (or a frozen scipy distribution), else None."""
    if isinstance(obj, Prior):
        return obj
    if is_frozen_scipy(obj):
        return ScipyPrior(obj)
    return None


def describe(prior) -> str:
    """A short text for attrs (netCDF attributes must be strings or numbers)."""
    if isinstance(prior, ScipyPrior):
        d = prior.distribution
        return f"scipy.stats.{d.dist.name}(args={d.args}, kwds={d.kwds})"
    return repr(prior)


__all__ = ["Prior", "Gamma", "LogNormal", "Normal", "HalfNormal", "HalfCauchy", "InverseGamma", "OnTransformed",
           "ScipyPrior", "TRANSFORMS"]
