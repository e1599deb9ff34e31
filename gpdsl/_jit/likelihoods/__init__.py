"""The jitted EP / QP site code of each likelihood, one module per likelihood (see
:mod:`gpdsl._jit.projections` for what a module defines); the sweeps and the quadrature they use
know none of them."""
