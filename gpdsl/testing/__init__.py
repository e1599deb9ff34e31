"""Conformance checks for components, gpdsl's own and a user's (in the spirit of scikit-learn's
``check_estimator`` / ``parametrize_with_checks``).

Each check takes one instance and raises ``AssertionError`` when the component disagrees with an
independent computation: central differences for every gradient, adaptive quadrature
(:func:`scipy.integrate.quad`) for every expectation over a Gaussian latent, draws for a predictive,
and a fit that saves, loads and round-trips through its model file.  What is checked follows from
what a component provides (:meth:`gpdsl.likelihoods.Likelihood.provides`), so a likelihood is
checked on every operation it offers, its own and the base class's quadrature defaults alike,
against its *own* log density::

    import gpdsl.testing

    gpdsl.testing.check_likelihood(MyLikelihood)      # every variant, every check; raises on failure
    gpdsl.testing.check_kernel(MyKernel(0.5))

    @gpdsl.testing.parametrize_with_checks([MyLikelihood, MyKernel])
    def test_gpdsl_conformance(component, check):    # one pytest case per (variant, check)
        check(component)

:func:`check_likelihood` also runs, with every registered inference method that accepts the
likelihood, the method's gradients, a fit's predictions and its save/load round trip;
:func:`check_method` does the same for a method with every registered likelihood it accepts.
Partners are taken from the registries (``Likelihood.registry``, ``Inference.registry``), less the
classes defined in modules named ``test_*`` (a test's oracle variants).

Per kernel: a symmetric positive semi-definite Gram matrix, ``diag`` its diagonal, the
cross-covariance's transpose symmetry, ``vjp`` / ``diag_vjp`` against central differences, the
kernel on ``active_dims`` equal to the kernel on those columns, and a fitted model's round trips.
Per mean function: its gradients against central differences and a fitted model equal to a
zero-mean GP on y - m(X).  Per likelihood: the derivatives of its log density in f and in its
hyperparameters against central differences; its variational expectations against adaptive
quadrature of its log density, their derivatives against differences of themselves; its log
predictive density against quadrature (a documented approximation must still be normalised);
its predictive summaries against draws of ``sample``; EP's tilted moments against quadrature of
the tilted distribution, QP's variance not above EP's, d log Z / d theta against differences;
its density normalised and its derivatives equal to differences of themselves at extreme
hyperparameter values, latent values and targets (``check_likelihood_limits``).
Per (likelihood, method) pair: every gradient of the objective (hyperparameters, and Z where
optimised) against central differences; a fit whose ``predict``, ``log_predictive`` and
``to_inference_data`` agree with the likelihood's operations; its save/load and model-file round
trips; a Dask X equal to an in-memory one.
Per prior (``gpdsl.priors.Prior.registry``, :func:`check_prior`): its density integrating to 1 by
quadrature, its slope against central differences, its starting value inside its support, and a
MAP fit holding it that saves, loads and round-trips through its model file.
"""
from __future__ import annotations

import functools

from ..inference import Inference
from ..kernels import Kernel
from ..likelihoods import Likelihood
from ..means import Mean
from .common import X1, X2, _instances, central_difference, expect, label, registered
from .components import (CAVITIES, F, KERNEL_CHECKS, MEAN_CHECKS, MEANS, MEANS_K, VARS, VARS_K,
                         check_kernel_active_dims, check_kernel_fitted_model_round_trips, check_kernel_gradients,
                         check_kernel_gram, check_likelihood_derivatives, check_likelihood_log_predictive,
                         check_likelihood_multi_latent_expectations, check_likelihood_multi_latent_predictive,
                         check_likelihood_noise, check_likelihood_predictive, check_likelihood_site_model,
                         check_likelihood_variational_expectations, check_mean_fitted_model_round_trips,
                         check_mean_gradients, likelihood_checks)
from .limits import check_likelihood_limits
from .priors import (PRIOR_CHECKS, check_prior, check_prior_fitted_model_round_trips, check_prior_gradient,
                     check_prior_initial_value, check_prior_normalised)
from .pairs import (KERNEL, TIGHT, XP, Z0, check_model_gradients, check_pair_dask_equals_in_memory,
                    check_pair_fitted_model_round_trips, check_pair_gradients, check_pair_predictions, pair_checks,
                    pair_model, pair_targets, pairs, tight)


# -- whole components -----------------------------------------------------------------------------
def _named(check, **partners):
    """``check`` with its partner arguments bound, named for test ids (``check[partner]``)."""
    bound = functools.partial(check, **partners)
    bound.__name__ = f"{check.__name__}[{', '.join(label(p) for p in partners.values())}]"
    return bound


def checks(component):
    """Every check that applies to a component instance, each a callable taking it.

    Parameters
    ----------
    component : Kernel, Mean, Likelihood or Inference instance

    Returns
    -------
    list of callable

    Raises
    ------
    TypeError
        For anything else, or a kernel of several outputs (checked by its own tests).
    """
    if isinstance(component, Kernel):
        if component.n_outputs != 1:
            raise TypeError(f"gpdsl.testing: {label(component)} has {component.n_outputs} outputs; the kernel "
                            "checks take kernels of one output")
        return list(KERNEL_CHECKS)
    if isinstance(component, Mean):
        return list(MEAN_CHECKS)
    if isinstance(component, Likelihood):
        return likelihood_checks(component) + [
            _named(check, inference=method) for lik, method in pairs([component])
            for check in pair_checks(lik, method)]
    if isinstance(component, Inference):
        out = []
        for lik, method in pairs(methods=[component]):
            out += [_named(_against_likelihood(check), likelihood=lik) for check in pair_checks(lik, method)]
        return out
    raise TypeError(f"gpdsl.testing: expected a Kernel, Mean, Likelihood or Inference (class or instance), "
                    f"got {type(component).__name__}")


def _against_likelihood(check):
    """A pair check that takes the method first (``check(inference, likelihood=...)``)."""
    def run(inference, likelihood):
        return check(likelihood, tight(inference))
    run.__name__ = check.__name__
    return run


def _run(component):
    """Run every check on every variant of a component (class or instance); the first failure is
    raised as an AssertionError naming the variant and the check."""
    for instance in _instances(component):
        for check in checks(instance):
            try:
                check(instance)
            except AssertionError as failure:
                raise AssertionError(f"{check.__name__} failed for {label(instance)}: {failure}") from failure


def check_likelihood(likelihood):
    """Every likelihood check, and the pair checks with every registered method that accepts
    it, on each variant of a likelihood class (or on one instance).

    Parameters
    ----------
    likelihood : Likelihood subclass or instance

    Raises
    ------
    AssertionError
        The first failed check, named with the variant.
    """
    _run(likelihood)


def check_kernel(kernel):
    """Every kernel check on each variant of a kernel class (or on one instance).

    Parameters
    ----------
    kernel : Kernel subclass or instance

    Raises
    ------
    AssertionError
        The first failed check, named with the variant.
    """
    _run(kernel)


def check_mean(mean):
    """Every mean-function check on each variant of a mean class (or on one instance).

    Parameters
    ----------
    mean : Mean subclass or instance

    Raises
    ------
    AssertionError
        The first failed check, named with the variant.
    """
    _run(mean)


def check_method(method):
    """The pair checks of an inference method with every registered likelihood it accepts, on
    each variant of the method class (or on one instance).

    Parameters
    ----------
    method : Inference subclass or instance

    Raises
    ------
    AssertionError
        The first failed check, named with the variant.
    """
    _run(method)


def parametrize_with_checks(components):
    """A ``pytest.mark.parametrize`` over (component, check) for every variant of each
    component and every check that applies to it, ids ``<variant>-<check>``::

        @parametrize_with_checks([MyLikelihood, MyKernel(0.5)])
        def test_gpdsl_conformance(component, check):
            check(component)

    Parameters
    ----------
    components : iterable of classes or instances
        Kernels, mean functions, likelihoods and inference methods.

    Returns
    -------
    pytest.MarkDecorator
    """
    import pytest
    params = [pytest.param(instance, check, id=f"{label(instance)}-{check.__name__}")
              for component in components for instance in _instances(component) for check in checks(instance)]
    return pytest.mark.parametrize("component,check", params)


__all__ = ["check_likelihood", "check_kernel", "check_mean", "check_method", "parametrize_with_checks", "checks",
           "likelihood_checks", "pair_checks", "pairs", "registered", "label", "central_difference", "expect",
           "check_model_gradients", "tight", "pair_model", "pair_targets",
           "check_kernel_gram", "check_kernel_gradients", "check_kernel_fitted_model_round_trips",
           "check_kernel_active_dims", "check_mean_gradients", "check_mean_fitted_model_round_trips",
           "check_likelihood_derivatives", "check_likelihood_variational_expectations", "check_likelihood_log_predictive",
           "check_likelihood_predictive", "check_likelihood_site_model", "check_likelihood_noise", "check_likelihood_multi_latent_expectations",
           "check_likelihood_multi_latent_predictive", "check_likelihood_limits", "check_pair_gradients", "check_pair_fitted_model_round_trips",
           "check_pair_predictions", "check_pair_dask_equals_in_memory", "KERNEL_CHECKS", "MEAN_CHECKS",
           "check_prior", "check_prior_normalised", "check_prior_gradient", "check_prior_initial_value",
           "check_prior_fitted_model_round_trips", "PRIOR_CHECKS",
           "X1", "X2", "F", "MEANS", "VARS", "CAVITIES", "MEANS_K", "VARS_K", "XP", "Z0", "KERNEL", "TIGHT"]
