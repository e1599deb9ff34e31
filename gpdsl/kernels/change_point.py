"""A change-point kernel: one kernel before a location along one input feature, another after it,
joined by a sigmoid switch (GPflow's ``ChangePoints`` with one change point; Saatci et al. 2010,
Lloyd et al. 2014).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from ..chunks import add_partial
from ..components import Component
from ..parameters import Fixed, check_hyperparameter, declared_value, unshared
from .base import Kernel, Parameter, _Composite


@dataclass(frozen=True, eq=False)
class ChangePoint(_Composite):
    """Change-point kernel

    k(x, z) = (1 - s(x)) k_0(x, z) (1 - s(z)) + s(x) k_1(x, z) s(z),
    s(x) = sigmoid(steepness * (x_dimension - location)),

    so that k_0 holds before the location (where s is near 0, for a positive steepness) and
    k_1 after it; each term is a positive semi-definite kernel, so their sum is
    (GPflow's ``ChangePoints`` with one location; Lloyd et al. (2014), section 2).  The parts'
    parameters are labelled as in a :class:`gpdsl.kernels.Sum` (``0.lengthscale``, ``1.variance``,
    or a part's ``name``), next to ``location`` and ``steepness``.

    Parameters
    ----------
    kernels : tuple of two Kernel
        (k_0, k_1): the kernel before the change point and the kernel after it.
    location : float, Fixed or prior, optional
        The change point along column ``dimension``.  None starts it at the midpoint of that
        column's range in the training inputs; a start inside that range is kept inside it (it
        is optimised as the logit of its place in the range).  A start outside the range is
        refused when the model is fitted (the switch is flat there: the location would have no
        gradient and stay where it starts), unless declared ``gd.Fixed(value)``.
    steepness : float, Fixed or prior, default 1.0
        Positive slope of the sigmoid switch (1 / its width in input units).
    dimension : int, default 0
        The column of X (of the kernel's ``active_dims`` columns, when given) the switch reads.
    active_dims, name : keyword only, optional
        The columns the kernel reads and its label inside a sum or product, as for every
        kernel (:class:`gpdsl.kernels.Kernel`).

    Raises
    ------
    TypeError
        If ``kernels`` is not a tuple of two kernels, ``dimension`` is not an int, or a
        hyperparameter is not a number, ``Fixed(...)`` or a prior.
    ValueError
        If ``dimension`` is negative, ``steepness`` is not finite and positive, ``location`` is
        not finite, or either is not a scalar.
    """

    location: object = None
    steepness: object = 1.0
    dimension: object = 0
    hyperparameters = ("location", "steepness")
    unconstrained = ("location",)

    def __post_init__(self):
        super().__post_init__()
        if len(self.kernels) != 2:
            raise TypeError(f"ChangePoint: kernels must be a tuple of two kernels (before, after), got "
                            f"{len(self.kernels)}")
        dim = self.dimension
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
            raise TypeError(f"ChangePoint: dimension must be a non-negative int, got {dim!r}")
        if dim < 0:
            raise ValueError(f"ChangePoint: dimension must be a non-negative int, got {dim!r}")
        object.__setattr__(self, "dimension", int(dim))
        for name, positive in (("location", False), ("steepness", True)):
            spec = getattr(self, name)
            if spec is None and name == "location":
                continue
            check_hyperparameter("ChangePoint", name, spec, positive=positive)
            if declared_value(spec).ndim != 0:
                raise ValueError(f"ChangePoint: {name} must be a scalar, got shape {declared_value(spec).shape}")

    def _check_width(self, X):
        if self.dimension >= X.shape[1]:
            raise ValueError(f"ChangePoint: dimension {self.dimension} is beyond X's {X.shape[1]} feature(s)")

    def parameters(self, X):
        """The parts' parameters (``"<label>.<name>"``), then ``location`` (None starts it at the
        midpoint of X[:, dimension]'s range; bounded by that range when it starts inside it) and
        ``steepness``.

        Parameters
        ----------
        X : ndarray, shape (N, D)

        Returns
        -------
        list of Parameter

        Raises
        ------
        ValueError
            If ``dimension`` is not a column of X, or a ``location`` that is not ``Fixed`` lies
            outside the range of X[:, dimension].
        """
        self._check_width(X)
        column = X[:, self.dimension]
        low, high = float(np.asarray(column.min())), float(np.asarray(column.max()))
        location = self.location
        if location is None:
            mid = 0.5 * (low + high)
            location = mid if np.isfinite(mid) else 0.0
        # Kept inside the data's range when it starts there (the logit of its place in it): outside
        # it the kernel is one of its parts and the location has no gradient to come back by, so a
        # fitted start there would stay put and the fit report convergence: refused.  A column
        # without a range (constant, or the zeros a saved model's layout is read with) has none to
        # check against.
        start = float(declared_value(location))
        ranged = np.isfinite(low) and np.isfinite(high) and low < high
        if ranged and not low <= start <= high and not isinstance(unshared(location), Fixed):
            raise ValueError(f"ChangePoint: location = {start:.6g} lies outside the training inputs' range "
                             f"[{low:.6g}, {high:.6g}] along dimension {self.dimension}: there the switch is "
                             f"flat, the location has no gradient and a fit would leave it where it starts. "
                             f"Start it inside the range (None: its midpoint), or declare "
                             f"location=gd.Fixed({start:.6g}) to hold it there on purpose")
        bounds = (low, high) if ranged and low < start < high else None
        return super().parameters(X) + [Parameter("location", location, positive=False, bounds=bounds),
                                        Parameter("steepness", self.steepness)]

    def bind(self, values=None):
        # The parts as a composite binds them, then location and steepness as any component's fields.
        return Component.bind(super().bind(values), values)

    @classmethod
    def variants(cls):
        parts = Kernel.registry
        return (cls((parts["SquaredExponential"](0.7, 1.2), parts["Matern52"](np.array([1.0, 0.5]), 0.6)),
                    location=0.3, steepness=2.5, dimension=1),
                cls((parts["Linear"](0.8), parts["SquaredExponential"](np.array([0.9, 1.3]), 0.7)),
                    location=-0.2, steepness=0.7))

    def switch(self, X):
        """The switch s(x) = sigmoid(steepness * (x_dimension - location)) at each row of X.

        Parameters
        ----------
        X : ndarray, shape (n, D)

        Returns
        -------
        ndarray, shape (n,)
        """
        self._check_width(X)
        if self.location is None:
            raise ValueError("ChangePoint: location must be set to evaluate the kernel (a model starts it "
                             "from the data: bind it with its table's values)")
        return expit(float(self.steepness) * (X[:, self.dimension] - float(self.location)))

    def gram(self, X1, X2):
        """``(1 - s1)(1 - s2)^T * k_0(X1, X2) + s1 s2^T * k_1(X1, X2)``, s the switch.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        s1, s2 = self.switch(X1), self.switch(X2)
        before, after = self.kernels
        return np.outer(1.0 - s1, 1.0 - s2) * before.gram(X1, X2) + np.outer(s1, s2) * after.gram(X1, X2)

    def diag(self, X):
        """``(1 - s)^2 diag k_0 + s^2 diag k_1``.

        Parameters
        ----------
        X : ndarray, shape (n, D)

        Returns
        -------
        ndarray, shape (n,)
        """
        s = self.switch(X)
        before, after = self.kernels
        return (1.0 - s) ** 2 * before.diag(X) + s * s * after.diag(X)

    def _switch_grads(self, X, adjoint, s):
        """d/d location, d/d steepness and d/d X[:, dimension] of sum_i adjoint_i s_i."""
        slope = adjoint * s * (1.0 - s)                    # d/d(steepness (x - location))
        steep, loc = float(self.steepness), float(self.location)
        return -steep * slope.sum(), slope @ (X[:, self.dimension] - loc), steep * slope

    def vjp(self, X1, X2, G, K=None):
        """The parts' VJPs with G times the switch products, and d/d location, d/d steepness and
        d/d X1 through the switch of each side.

        Parameters
        ----------
        X1 : ndarray, shape (n1, D)
        X2 : ndarray, shape (n2, D)
        G : ndarray, shape (n1, n2)
        K : ndarray, shape (n1, n2), optional

        Returns
        -------
        grads : dict of str to ndarray
        d_X1 : ndarray, shape (n1, D)
        """
        s1, s2 = self.switch(X1), self.switch(X2)
        before, after = self.kernels
        K_before, K_after = before.gram(X1, X2), after.gram(X1, X2)
        g0, dx0 = before.vjp(X1, X2, G * np.outer(1.0 - s1, 1.0 - s2), K_before)
        g1, dx1 = after.vjp(X1, X2, G * np.outer(s1, s2), K_after)
        grads = add_partial(self._named(0, g0), self._named(1, g1))
        GK0, GK1 = G * K_before, G * K_after
        a1 = GK1 @ s2 - GK0 @ (1.0 - s2)                  # d/d s1_i
        a2 = s1 @ GK1 - (1.0 - s1) @ GK0                  # d/d s2_j
        loc1, steep1, dx_switch = self._switch_grads(X1, a1, s1)
        loc2, steep2, _ = self._switch_grads(X2, a2, s2)
        grads["location"] = np.array(loc1 + loc2)
        grads["steepness"] = np.array(steep1 + steep2)
        d_X1 = dx0 + dx1
        d_X1[:, self.dimension] += dx_switch
        return grads, d_X1

    def diag_vjp(self, X, g):
        """The parts' diagonal VJPs with g (1 - s)^2 and g s^2, and d/d location and d/d
        steepness through the switch.

        Parameters
        ----------
        X : ndarray, shape (n, D)
        g : ndarray, shape (n,)

        Returns
        -------
        dict of str to ndarray
        """
        s = self.switch(X)
        before, after = self.kernels
        grads = add_partial(self._named(0, before.diag_vjp(X, g * (1.0 - s) ** 2)),
                            self._named(1, after.diag_vjp(X, g * s * s)))
        a = 2.0 * g * (s * after.diag(X) - (1.0 - s) * before.diag(X))
        loc, steep, _ = self._switch_grads(X, a, s)
        grads["location"] = np.array(loc)
        grads["steepness"] = np.array(steep)
        return grads

    def describe(self):
        """E.g. ``"ChangePoint(SquaredExponential(isotropic), Matern52(ARD); dimension 0)"``.

        Returns
        -------
        str
        """
        return f"ChangePoint({', '.join(k.describe() for k in self.kernels)}; dimension {self.dimension})"


__all__ = ["ChangePoint"]
