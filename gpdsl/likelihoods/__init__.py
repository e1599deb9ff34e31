"""Observation models (``gd.likelihoods``): the interface in :mod:`gpdsl.likelihoods.base`, one
family of likelihoods a module.  Every likelihood class registers itself in ``LIKELIHOODS``
when defined."""
from .base import CAPABILITIES, DERIVED_FROM_DENSITY, Likelihood, SiteModel, gauss_hermite
# Imported in the order LIKELIHOODS has always listed them (registration order).
from .gaussian import Gaussian, HeteroscedasticGaussian  # isort: skip
from .bernoulli import Bernoulli  # isort: skip
from .poisson import Poisson, expected_log_square
from .student_t import StudentT
from .negative_binomial import NegativeBinomial
from .categorical import Categorical
from .output_gaussian import OutputGaussian
from .per_output import PerOutput

# The registry model files (TOML) and ``gpdsl.load`` read: every concrete likelihood, by class name.
LIKELIHOODS = Likelihood.registry

__all__ = ["Likelihood", "SiteModel", "Gaussian", "HeteroscedasticGaussian", "Bernoulli", "Poisson", "StudentT", "NegativeBinomial", "Categorical", "OutputGaussian",
           "PerOutput",
           "LIKELIHOODS", "CAPABILITIES", "DERIVED_FROM_DENSITY", "expected_log_square", "gauss_hermite"]
