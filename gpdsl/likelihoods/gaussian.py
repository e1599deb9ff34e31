"""Gaussian observation noise: homoscedastic (:class:`Gaussian`) and per-point
(:class:`HeteroscedasticGaussian`).  Both give their noise variances ``noise(X)``, which is all
the exact GP and the collapsed VFE / DTC / FITC engines need.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._jit.likelihoods import gaussian as sites
from ..checks import check_nonnegative_int
from ..components import Parameter
from ..parameters import check_hyperparameter, declared_value
from .base import _LOG_2PI, Likelihood, SiteModel


def gaussian_log_density(y, mean, log_variance):
    """log N(y | mean, exp(log_variance)) from the log of the variance, finite where the variance
    itself overflows float64 (a learned log-polynomial noise above ~709 nats):
    -(log 2 pi + log_variance + (y - mean)^2 exp(-log_variance)) / 2.

    Parameters
    ----------
    y, mean, log_variance : ndarray
        Broadcast together.

    Returns
    -------
    ndarray
    """
    return -0.5 * (_LOG_2PI + log_variance + (y - mean) ** 2 * np.exp(-log_variance))


class _GaussianNoise(Likelihood):
    """Shared by the Gaussian-noise likelihoods: the collapsed engines read ``noise``."""

    observation_noise = True
    target_kind = "real"

    def surrogate(self, X, y):
        """Weights 1/lambda_n and weighted targets y_n/lambda_n: the regression itself, which is
        what greedy inducing selection scores before the first fit.

        Parameters
        ----------
        X : ndarray, shape (N, D)
        y : ndarray, shape (N,)
        """
        w = 1.0 / self.noise(X)
        return w, w * y

    def log_noise(self, X):
        """log lambda_n at X: what the log predictive density needs where lambda_n itself
        overflows float64 (a learned log variance above ~709 at a far input).

        Parameters
        ----------
        X : ndarray, shape (n, D)
        """
        return np.log(self.noise(X))


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
    hyperparameters = ("variance",)
    # The density reads its variance through _variance (Likelihood.__init_subclass__).
    density_functions = ("log_density", "log_density_derivatives", "_variance")
    # fit(standardize=True) may shift and scale the targets: y -> a + b y maps this model to
    # itself with a constant mean and variances times b^2 (gpdsl.scaling).
    standardizes_targets = True

    def __post_init__(self):
        check_hyperparameter("Gaussian", "variance", self.variance, ndim_max=0)

    def _variance(self):
        """The noise variance as a float; FloatingPointError where it is not positive, which the
        declaration rules out and only an optimiser's exp(log variance) underflowing to 0 (a
        constant or noiseless target drives it there) produces: the optimiser's signal to step
        back, where the divisions by it would raise a bare ZeroDivisionError."""
        s2 = float(self.variance)
        if not s2 > 0.0:
            raise FloatingPointError(f"Gaussian: the noise variance {s2!r} is not positive (it underflowed to 0: "
                                     "the target looks noiseless to the model; fix a small variance or add a "
                                     "prior on it)")
        return s2

    def log_density_bound(self, y):
        # The density at f = y.
        return float(-0.5 * y.size * np.log(2.0 * np.pi * self._variance()))

    def noise(self, X):
        """The homoscedastic variance at every input.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        """
        return np.full(X.shape[0], float(self.variance))

    def noise_vjp(self, X, g):
        """``{"variance": sum_n g_n}``.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        g : ndarray, shape (n,)
        """
        return {"variance": np.array(np.sum(g))}

    def log_density_derivatives(self, y, f):
        """log N(y | f, s2), (y - f)/s2, -1/s2, 0.

        Parameters
        ----------
        y, f : ndarray
        """
        s2 = self._variance()
        r = y - f
        return -0.5 * (_LOG_2PI + np.log(s2) + r * r / s2), r / s2, np.full_like(r, -1.0 / s2), np.zeros_like(r)

    def log_density_param_derivatives(self, y, f, derivatives=None):
        """Derivatives of log N(y | f, s2) in s2, (r^2/s2 - 1) / (2 s2) with r = y - f, and their
        f-derivatives; ``derivatives`` is not used.

        Parameters
        ----------
        y, f : ndarray
        derivatives : tuple of 4 ndarray, optional
        """
        s2 = self._variance()
        r = y - f
        return {"variance": (0.5 * (r * r / s2 - 1.0) / s2, -r / (s2 * s2), np.full_like(r, 1.0 / (s2 * s2)))}

    def variational_expectations(self, y, mean, var):
        """Closed form: -1/2 log 2 pi s2 - ((y - m)^2 + v) / (2 s2).

        Parameters
        ----------
        y, mean, var : ndarray, shape (n,)
        """
        s2 = self._variance()
        r2v = (y - mean) ** 2 + var
        ve = -0.5 * (_LOG_2PI + np.log(s2) + r2v / s2)
        grads = {"variance": np.array(0.5 * np.sum(r2v / s2 - 1.0) / s2)}
        return ve, (y - mean) / s2, np.full_like(mean, -0.5 / s2), grads

    def site_model(self):
        """The Gaussian site model, parameter (variance,)."""
        return SiteModel(sites.SITE, (float(self.variance),), ("variance",))

    def predictive(self, f_mean, f_var):
        """``y_mean`` = f_mean, ``y_var`` = f_var + variance.

        Parameters
        ----------
        f_mean, f_var : ndarray, shape (n,)
        """
        return {"y_mean": f_mean, "y_var": f_var + float(self.variance)}

    def log_predictive(self, f_mean, f_var, y):
        """log N(y | f_mean, f_var + variance).

        Parameters
        ----------
        f_mean, f_var, y : ndarray, shape (n,)
        """
        total = f_var + float(self.variance)
        return -0.5 * (np.log(2.0 * np.pi * total) + (y - f_mean) ** 2 / total)

    def sample(self, f, rng):
        """y = f + sqrt(variance) eps, eps ~ N(0, 1).

        Parameters
        ----------
        f : ndarray
        rng : numpy.random.Generator
        """
        return f + np.sqrt(float(self.variance)) * rng.standard_normal(np.shape(f))

    def constant_model_log_likelihood(self, y):
        """log N(y | 0, s^2 I) at its best s^2 = mean(y^2): white noise (f = 0), where VFE and
        the exact GP go as the kernel variance goes to 0 and FITC as the inducing points stop
        explaining anything (``Model.fit`` flags fits no better than it; raw Boston housing:
        VFE noise 582, FITC kernel variance = noise = 292, mean(y^2) = 584).

        Parameters
        ----------
        y : ndarray, shape (N,)
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
    # The known variance is data, not a hyperparameter.
    hyperparameters = ("coefficients",)
    unconstrained = ("coefficients",)

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

    @classmethod
    def variants(cls):
        """The learnable noise model of degree 1 (known variances need the data's length).

        Returns
        -------
        tuple of HeteroscedasticGaussian
        """
        return (cls(degree=1),)

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

    @property
    def reads_input_columns(self):
        # The noise model is a polynomial of every column of X.
        return not self.known

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

    def _default_coefficients(self, dim):
        start = np.zeros(1 + self.degree * dim)
        start[0] = np.log(0.1)
        return start

    def parameters(self, X):
        """None for known variances (checked to have shape (N,)); else the coefficients, shape
        (1 + degree * D,), dims ``("coefficient",)``, unconstrained, by default c_0 = log 0.1
        and the rest 0.

        Parameters
        ----------
        X : ndarray, shape (N, D)

        Returns
        -------
        list of Parameter

        Raises
        ------
        ValueError
            Known variances of a shape other than (N,), or coefficients of a shape other than
            (1 + degree * D,).
        """
        n, dim = X.shape
        if self.known:
            var = declared_value(self.variance)
            if var.shape != (n,):
                raise ValueError(f"HeteroscedasticGaussian: variance must have shape ({n},) to match y, "
                                 f"got {var.shape}")
            return []
        size = 1 + self.degree * dim
        if self.coefficients is None:
            return [Parameter("coefficients", self._default_coefficients(dim), positive=False, dims=("coefficient",))]
        coef = declared_value(self.coefficients)
        if coef.shape != (size,):
            raise ValueError(f"HeteroscedasticGaussian: coefficients must have shape ({size},) "
                             f"for degree {self.degree} and {dim} features, got {coef.shape}")
        return [Parameter("coefficients", self.coefficients, positive=False, dims=("coefficient",))]

    def noise(self, X):
        """The known variances (training inputs only), or exp(features(X) @ coefficients) (the
        default start where the coefficients are not bound).

        Parameters
        ----------
        X : ndarray, shape (n, D)
        """
        if self.known:
            return declared_value(self.variance)
        return np.exp(self.log_noise(X))

    def log_noise(self, X):
        """log of :meth:`noise`: features(X) @ coefficients for the noise model, exact where
        :meth:`noise` overflows (a polynomial above ~709 at inputs far from the data).

        Parameters
        ----------
        X : ndarray, shape (n, D)
        """
        if self.known:
            return np.log(declared_value(self.variance))
        coef = self.coefficients if self.coefficients is not None else self._default_coefficients(X.shape[1])
        return self.features(X) @ coef

    def noise_vjp(self, X, g):
        """``{"coefficients": features(X)^T (g * lambda)}``; empty for known variances.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        g : ndarray, shape (n,)
        """
        if self.known:
            return {}
        lam = self.noise(X)
        return {"coefficients": self.features(X).T @ (g * lam)}

    def describe(self):
        """``HeteroscedasticGaussian(known)`` or ``HeteroscedasticGaussian(degree=k)``.

        Returns
        -------
        str
        """
        return "HeteroscedasticGaussian(known)" if self.known else f"HeteroscedasticGaussian(degree={self.degree})"


__all__ = ["Gaussian", "HeteroscedasticGaussian"]
