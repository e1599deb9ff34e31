"""Priors on hyperparameters, on their natural (constrained) scale.

A hyperparameter that carries a prior is fitted by MAP: the optimiser maximises
``log_evidence + log p(theta)`` where ``p`` is the density of the natural value theta (no
log-Jacobian of the log transform is added, so the optimum is the mode in theta).  Any frozen
``scipy.stats`` distribution is accepted too; its log-density slope is then taken by a central
difference, because scipy exposes no analytic derivative.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from .checks import ValueEquality, check_positive_number, is_frozen_scipy, is_number


class Prior:
    """Base class: ``log_density(x)``, ``grad_log_density(x)`` (elementwise), ``initial_value()``."""

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
        float
        """
        raise NotImplementedError


@dataclass(frozen=True)
class Gamma(Prior):
    """Gamma(shape, rate) on the natural scale: p(x) ∝ x^(shape-1) exp(-rate x).

    Parameters
    ----------
    shape : float
        Positive shape a.
    rate : float
        Positive rate b (inverse scale).
    initial : float, optional
        Positive value where optimisation starts (default: the mean, shape / rate).

    Raises
    ------
    ValueError
        If a parameter is not a positive finite number.
    """

    shape: float
    rate: float
    initial: float | None = None

    def __post_init__(self):
        check_positive_number("Gamma", "shape", self.shape)
        check_positive_number("Gamma", "rate", self.rate)
        if self.initial is not None:
            check_positive_number("Gamma", "initial", self.initial)

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
        return self.initial if self.initial is not None else self.shape / self.rate


@dataclass(frozen=True)
class LogNormal(Prior):
    """Log-normal prior: log x ~ Normal(mu, sigma).

    Parameters
    ----------
    mu : float
        Finite mean of log x.
    sigma : float
        Positive standard deviation of log x.
    initial : float, optional
        Positive value where optimisation starts (default: the median exp(mu)).

    Raises
    ------
    ValueError
        If ``mu`` is not a finite number or ``sigma``/``initial`` not a positive number.
    """

    mu: float
    sigma: float
    initial: float | None = None

    def __post_init__(self):
        if not is_number(self.mu) or not np.isfinite(self.mu):
            raise ValueError(f"LogNormal: mu must be a finite number, got {self.mu!r}")
        check_positive_number("LogNormal", "sigma", self.sigma)
        if self.initial is not None:
            check_positive_number("LogNormal", "initial", self.initial)

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
        return self.initial if self.initial is not None else float(np.exp(self.mu))


@dataclass(frozen=True, eq=False)
class ScipyPrior(ValueEquality, Prior):
    """Adapter for a frozen ``scipy.stats`` continuous distribution.

    Two priors are equal when their distributions have the same family and parameters.

    Parameters
    ----------
    distribution : scipy.stats frozen distribution
        E.g. ``scipy.stats.halfnorm(scale=2.0)``; its ``logpdf`` gives the density.
    initial : float, optional
        Finite value where optimisation starts (default: the distribution's median).

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
        if self.initial is not None and not (is_number(self.initial) and np.isfinite(self.initial)):
            raise ValueError(f"ScipyPrior: initial must be None or a finite number, got {self.initial!r}")

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
        return self.initial if self.initial is not None else float(self.distribution.median())


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


__all__ = ["Prior", "Gamma", "LogNormal", "ScipyPrior"]
