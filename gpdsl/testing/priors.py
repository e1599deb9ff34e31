"""Conformance checks of a prior (every family in ``gpdsl.priors.Prior.registry``, or a user's):
its density normalised by adaptive quadrature, its slope against central differences, its starting
value inside its support, and a model holding it fitted, saved, loaded and round-tripped through
its model file."""
from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
from scipy import integrate

from .. import Model, load
from ..inference import Exact
from ..kernels import SquaredExponential
from ..likelihoods import Gaussian
from ..means import Constant
from ..methods.common import ConvergenceWarning
from .common import X1, central_difference

# Multiples of the starting value where a prior on a positive parameter is checked (three decades
# either side), and offsets, in units of max(|start|, 1), for one on the real line.
_POSITIVE_MULTIPLES = (1e-3, 0.05, 0.3, 1.0, 3.0, 20.0, 1e3)
_REAL_OFFSETS = (-30.0, -2.0, -0.5, 0.3, 1.0, 4.0, 30.0)


def prior_points(prior):
    """Where a prior is checked: spread about its starting value, inside its support.

    Parameters
    ----------
    prior : gpdsl.priors.Prior

    Returns
    -------
    ndarray of float
    """
    low, high = prior.support
    start = prior.initial_value()
    if low == 0.0 and high == np.inf:
        points = start * np.asarray(_POSITIVE_MULTIPLES)
    else:
        points = start + max(abs(start), 1.0) * np.asarray(_REAL_OFFSETS)
    return points[(points > low) & (points < high)]


def check_prior_normalised(prior, tol=1e-8):
    """The density integrates to 1 over its support (adaptive quadrature on either side of the
    starting value, where the mass is).

    Parameters
    ----------
    prior : gpdsl.priors.Prior
    tol : float, default 1e-8
        Allowed |integral - 1|: QUADPACK's requested accuracy is 1e-11.
    """
    low, high = prior.support
    start = prior.initial_value()

    def density(x):
        return float(np.exp(prior.log_density(x)))
    total = sum(integrate.quad(density, a, b, limit=500, epsabs=1e-11, epsrel=1e-11)[0]
                for a, b in ((low, start), (start, high)))
    assert abs(total - 1.0) <= tol, f"{prior!r}: the density integrates to {total!r}, not 1"


def check_prior_gradient(prior, rtol=1e-6):
    """``grad_log_density`` against central differences of ``log_density`` at
    :func:`prior_points`, elementwise and on an array.

    The difference is taken in t, x = x0 (1 + t) for x0 on the positive half-line (x0 + t
    otherwise), with step 1e-6 of t, so that it resolves the slope at every scale: x0 g is
    compared to d log p / dt.

    Parameters
    ----------
    prior : gpdsl.priors.Prior
    rtol : float, default 1e-6
        Relative tolerance; the absolute one is 1e-8 (1 + |log p|), the difference's rounding
        (1e-16 |log p| / 1e-6) with a factor 100 to spare.
    """
    points = prior_points(prior)
    grads = np.asarray(prior.grad_log_density(points), dtype=float)
    assert grads.shape == points.shape, f"{prior!r}: grad_log_density changed the shape"
    positive = prior.support[0] == 0.0
    for x0, g in zip(points, grads):
        unit = x0 if positive else 1.0
        fd = central_difference(lambda t: float(prior.log_density(x0 + unit * t[0])), np.zeros(1))[0]
        scalar = float(prior.grad_log_density(x0))
        assert scalar == g, f"{prior!r}: the slope at {x0!r} differs elementwise ({scalar!r}) and on an array ({g!r})"
        tol = rtol * abs(fd) + 1e-8 * (1.0 + abs(float(prior.log_density(x0))))
        assert abs(unit * g - fd) <= tol, (f"{prior!r}: slope {g!r} at {x0!r}, central difference "
                                           f"{fd / unit!r}")


def check_prior_initial_value(prior):
    """``initial_value`` is a finite number strictly inside the support, with a finite log density.

    Parameters
    ----------
    prior : gpdsl.priors.Prior
    """
    low, high = prior.support
    start = prior.initial_value()
    assert np.isfinite(start) and low < start < high, f"{prior!r}: initial value {start!r} outside ({low}, {high})"
    assert np.isfinite(prior.log_density(start)), f"{prior!r}: log density at the initial value is not finite"


def check_prior_fitted_model_round_trips(prior):
    """A GP with the prior on a hyperparameter (a kernel variance for a prior on the positive
    half-line, a constant mean otherwise) fits by MAP with its log prior in the objective, saves
    and loads back (same model, same priors), and round-trips through its model dict and file.

    Parameters
    ----------
    prior : gpdsl.priors.Prior
    """
    if prior.support[0] >= 0.0:
        model, name = Model(SquaredExponential(1.0, prior), Gaussian(0.1), inference=Exact()), "kernel.variance"
    else:
        model, name = Model(SquaredExponential(1.0, 1.0), Gaussian(0.1), inference=Exact(),
                            mean=Constant(prior)), "mean.constant"
    y = np.sin(X1[:, 0]) + 0.1 * X1[:, 1]
    with warnings.catch_warnings():
        # Three iterations reach no optimum (flagged): the check is of the prior's place in the
        # objective and of the round trips, not of convergence.
        warnings.simplefilter("ignore", ConvergenceWarning)
        post = model.fit(X1, y, max_iter=3)
    want = float(np.sum(prior.log_density(post.values[name])))
    assert np.isclose(post.log_prior, want, rtol=1e-12, atol=1e-12), f"{prior!r}: log prior {post.log_prior!r}, want {want!r}"
    assert Model.from_dict(model.to_dict()) == model, f"{prior!r}: to_dict/from_dict changed the model"
    with tempfile.TemporaryDirectory() as folder:
        post.save(Path(folder) / "post.nc")
        back = load(Path(folder) / "post.nc")
        assert back.model == model and back.priors == post.priors, f"{prior!r}: save/load changed the model"
        toml = Path(folder) / "model.toml"
        model.to_toml(toml)
        assert Model.from_toml(toml) == model, f"{prior!r}: to_toml/from_toml changed the model"


PRIOR_CHECKS = (check_prior_normalised, check_prior_gradient, check_prior_initial_value,
                check_prior_fitted_model_round_trips)


def check_prior(prior):
    """Every prior check on a prior, or on every variant of a prior class.

    Parameters
    ----------
    prior : gpdsl.priors.Prior or type
        An instance, or a class whose ``variants()`` are checked.
    """
    for instance in (prior.variants() if isinstance(prior, type) else (prior,)):
        for check in PRIOR_CHECKS:
            check(instance)
