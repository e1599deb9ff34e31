"""Prior covariance functions (``gd.kernels``): the interface in :mod:`gpdsl.kernels.base`, one
family of kernels a module.  Every kernel class registers itself in ``KERNELS`` when defined."""
from .base import Kernel, Product, Sum
from .change_point import ChangePoint
from .constant import Constant, White
from .coregion import ICM, LMC
from .dot_product import Linear, Polynomial
from .periodic import Periodic
from .separate import Separate
from .spectral_mixture import SpectralMixture
from .stationary import Matern12, Matern32, Matern52, RationalQuadratic, SquaredExponential, Stationary

# The registry model files (TOML) and ``gpdsl.load`` read: every concrete kernel, by class name.
KERNELS = Kernel.registry

__all__ = ["Kernel", "Stationary", "SquaredExponential", "Matern12", "Matern32", "Matern52", "RationalQuadratic",
           "Periodic", "Linear", "Polynomial", "Constant", "White", "SpectralMixture", "ChangePoint", "Sum", "Product", "Separate",
           "ICM", "LMC", "KERNELS"]
