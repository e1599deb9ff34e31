"""Prior mean functions (``gd.means``): f ~ GP(m, k).  The interface is in
:mod:`gpdsl.means.base`; every mean class registers itself in ``MEANS`` when defined."""
from .base import Mean, SumMean
from .simple import Constant, Linear, Zero
from .per_output import PerOutput

# The registry model files (TOML) and ``gpdsl.load`` read: every concrete mean, by class name.
MEANS = Mean.registry

__all__ = ["Mean", "Zero", "Constant", "Linear", "SumMean", "PerOutput", "MEANS"]
