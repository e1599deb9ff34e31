"""gpdsl: sparse Gaussian-process models declared from four parts (and an optional mean function) and compiled to Numba kernels.

>>> import gpdsl as gd
>>> model = gd.Model(kernel=gd.kernels.SquaredExponential(1.0, 1.0),
...                  likelihood=gd.likelihoods.Gaussian(0.01),
...                  inducing=gd.inducing.KMeans(16, seed=0), inference=gd.inference.VFE())
"""
from . import datasets, inducing, inference, kernels, likelihoods, means, priors
from ._version import __version__
from .components import UntrustedTypeError
from .diagnostics import EvidenceRoundingWarning
from .io.layout import PosteriorFileError
from .io.netcdf import from_xarray, load
from .linalg import NotPositiveDefiniteError
from .methods.common import ConvergenceWarning
from .model import Model
from .parameters import Fixed, MissingGradientError, Shared
from .posterior import Posterior
from .sampling import SampledPosterior, SamplingWarning
from .threads import get_num_threads, set_num_threads

__all__ = ["Model", "Posterior", "SampledPosterior", "SamplingWarning", "Fixed", "Shared", "load", "from_xarray", "ConvergenceWarning", "EvidenceRoundingWarning",
           "NotPositiveDefiniteError", "PosteriorFileError", "UntrustedTypeError", "MissingGradientError", "kernels", "likelihoods", "means", "inducing", "inference",
           "priors", "datasets", "set_num_threads", "get_num_threads", "__version__"]
