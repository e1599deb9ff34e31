"""Prior covariance functions (``gd.kernels``).

Kernels are frozen dataclasses validated on construction.  Distances go through a BLAS cross
term, profile values through NumPy's vectorised exp, and the fused elementwise sweep of the
gradient through the jitted :func:`gpdsl._jit.covariance.slope_adjoint`.  Hyperparameter values
come in as a dict ``name -> ndarray`` keyed ``"<prefix>.<field>"``.

A scalar ``lengthscale`` is isotropic (one hyperparameter); an array of length D is ARD (one
per input feature).  ``variance`` is the signal variance sf^2.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ._jit import covariance as _cov
from .checks import ValueEquality
from .chunks import add_partial
from .parameters import check_hyperparameter, declared_value, entry


class Kernel:
    """Interface shared by all kernels.

    * ``entries(prefix, dim, fixed_names)`` -> list of :class:`gpdsl.parameters.Entry`
    * ``gram(values, prefix, X1, X2)`` -> (n1, n2) covariance
    * ``diag(values, prefix, X)`` -> (n,) prior variances
    * ``vjp(values, prefix, X1, X2, G, K=None)`` -> (dict of d/d natural values, d/dX1 (n1, D)),
      the contraction sum_ij G_ij dK_ij/d(.); ``K`` optionally passes gram(X1, X2)
    * ``diag_vjp(values, prefix, X, g)`` -> dict, the contraction sum_i g_i d diag_i/d(.)
    """

    def __add__(self, other):
        return Sum((self, other))

    def __mul__(self, other):
        return Product((self, other))


@dataclass(frozen=True, eq=False)
class Stationary(ValueEquality, Kernel):
    lengthscale: object = 1.0
    variance: object = 1.0
    profile: ClassVar[int] = -1

    def __post_init__(self):
        name = type(self).__name__
        check_hyperparameter(name, "lengthscale", self.lengthscale)
        check_hyperparameter(name, "variance", self.variance)
        if declared_value(self.variance).ndim != 0:
            raise ValueError(f"{name}: variance must be a scalar, got shape "
                             f"{declared_value(self.variance).shape}")

    @property
    def ard(self):
        """bool: True when ``lengthscale`` is an array (one length-scale per input feature)."""
        return declared_value(self.lengthscale).ndim == 1

    def entries(self, prefix, dim, fixed_names=()):
        """The kernel's hyperparameter declarations for a model's parameter table.

        Parameters
        ----------
        prefix : str
            Name prefix of the entries (``"kernel"``); they are ``"<prefix>.lengthscale"`` and
            ``"<prefix>.variance"``.
        dim : int
            Number of input features D; an ARD length-scale must have D entries.
        fixed_names : collection of str, optional
            Entry names held at their declared value.

        Returns
        -------
        list of gpdsl.parameters.Entry
            The length-scale (shape (D,) if ARD, else scalar) and the variance (scalar).

        Raises
        ------
        ValueError
            If an ARD length-scale has a number of entries other than ``dim``.
        """
        ls = declared_value(self.lengthscale)
        if self.ard and ls.shape[0] != dim:
            raise ValueError(f"{type(self).__name__}: lengthscale has {ls.shape[0]} entries but X has "
                             f"{dim} features (give a scalar for an isotropic kernel)")
        return [entry(f"{prefix}.lengthscale", self.lengthscale, shape=(dim,) if self.ard else None,
                      fixed_names=fixed_names),
                entry(f"{prefix}.variance", self.variance, fixed_names=fixed_names)]

    def _unpack(self, values, prefix, dim):
        ls = np.asarray(values[f"{prefix}.lengthscale"], dtype=float)
        return np.broadcast_to(ls, (dim,)).astype(float), float(values[f"{prefix}.variance"])

    def _scaled_sqdist(self, X1, X2, ls):
        """r2 (n1, n2) by the BLAS cross term |a|^2 - 2 a.b + |b|^2 on inputs centred at the
        mean of X1 (centring keeps the cancellation error at eps * spread, not eps * |x|^2)."""
        centre = X1.mean(axis=0)
        A = (X1 - centre) / ls
        B = (X2 - centre) / ls
        r2 = A @ B.T
        r2 *= -2.0
        r2 += np.einsum("ij,ij->i", A, A)[:, None]
        r2 += np.einsum("ij,ij->i", B, B)[None, :]
        return np.maximum(r2, 0.0, out=r2)

    def _profile(self, r2):
        """Unit-variance profile p(r2) with NumPy's vectorised exp (a new array)."""
        if self.profile == _cov.SQUARED_EXPONENTIAL:
            p = np.multiply(r2, -0.5)
            return np.exp(p, out=p)
        root = np.sqrt(3.0) if self.profile == _cov.MATERN32 else np.sqrt(5.0)
        r = np.sqrt(r2) * root                      # sqrt(3) r or sqrt(5) r
        p = np.exp(-r)
        poly = 1.0 + r if self.profile == _cov.MATERN32 else 1.0 + r + r * r / 3.0
        return np.multiply(poly, p, out=p)

    def gram(self, values, prefix, X1, X2):
        """Cross-covariance matrix k(X1, X2).

        Parameters
        ----------
        values : dict of str to ndarray
            Hyperparameter values on the natural scale, keyed ``"<prefix>.<field>"``.
        prefix : str
            The kernel's name prefix in ``values`` (``"kernel"`` for a model's kernel).
        X1 : ndarray, shape (n1, D)
            First inputs.
        X2 : ndarray, shape (n2, D)
            Second inputs.

        Returns
        -------
        ndarray, shape (n1, n2)
            ``variance * p(r^2)`` with ``r^2 = sum_d (x1_d - x2_d)^2 / lengthscale_d^2`` and the
            class's unit-variance profile ``p`` (Rasmussen & Williams (2006), eqs. 4.9 and 4.17).
        """
        ls, var = self._unpack(values, prefix, X1.shape[1])
        K = self._profile(self._scaled_sqdist(X1, X2, ls))
        K *= var
        return K

    def diag(self, values, prefix, X):
        """Prior variances k(x_i, x_i), the diagonal of ``gram(X, X)``.

        Parameters
        ----------
        values : dict of str to ndarray
            Hyperparameter values on the natural scale, keyed ``"<prefix>.<field>"``.
        prefix : str
            The kernel's name prefix in ``values`` (``"kernel"`` for a model's kernel).
        X : ndarray, shape (n, D)
            Inputs.

        Returns
        -------
        ndarray, shape (n,)
            The signal variance at every input (a stationary kernel's k(x, x)).
        """
        return np.full(X.shape[0], float(values[f"{prefix}.variance"]))

    def vjp(self, values, prefix, X1, X2, G, K=None):
        """Vector-Jacobian product of ``gram``: the contraction sum_ij G_ij dK_ij/d(.).

        Parameters
        ----------
        values : dict of str to ndarray
            Hyperparameter values on the natural scale, keyed ``"<prefix>.<field>"``.
        prefix : str
            The kernel's name prefix in ``values`` (``"kernel"`` for a model's kernel).
        X1 : ndarray, shape (n1, D)
            First inputs.
        X2 : ndarray, shape (n2, D)
            Second inputs.
        G : ndarray, shape (n1, n2)
            The adjoint (d objective / d K) to contract with the Jacobian of K = gram(X1, X2).
        K : ndarray, shape (n1, n2), optional
            gram(X1, X2) when the caller already has it (saves the exp).

        Returns
        -------
        grads : dict of str to ndarray
            d/d ``"<prefix>.lengthscale"`` (shape (D,) if ARD, else scalar) and d/d
            ``"<prefix>.variance"`` (scalar), on the natural scale.
        d_X1 : ndarray, shape (n1, D)
            d/d X1 (the inducing-input gradient when X1 is Z).
        """
        ls, var = self._unpack(values, prefix, X1.shape[1])
        if K is not None and self.profile == _cov.SQUARED_EXPONENTIAL:
            r2 = K      # the SE slope is -K/2: slope_adjoint never reads r2, skip the cross term
        else:
            r2 = self._scaled_sqdist(X1, X2, ls)
            if K is None:
                K = self._profile(r2)
                K *= var
        S, d_var = _cov.slope_adjoint(r2, K, np.ascontiguousarray(G), var, self.profile)
        # dr2_ij/dx1_id = 2 (x1_id - x2_jd) / ls_d^2 and dr2_ij/dls_d = -2 (x1_id - x2_jd)^2 / ls_d^3:
        # contract S with them through row/column sums and one thin product S @ X2.
        centre = X1.mean(axis=0)
        A1, A2 = X1 - centre, X2 - centre
        row, col = S.sum(axis=1), S.sum(axis=0)
        SA2 = S @ A2
        inv_ls = 1.0 / ls          # (1/ls)^2 underflows quietly where ls * ls would overflow
        inv_ls2 = inv_ls * inv_ls
        d_X1 = 2.0 * (A1 * row[:, None] - SA2) * inv_ls2
        d_ls = -2.0 * inv_ls2 * inv_ls * (row @ (A1 * A1) - 2.0 * np.einsum("ij,ij->j", A1, SA2) + col @ (A2 * A2))
        if not self.ard:
            d_ls = np.array(d_ls.sum())
        return {f"{prefix}.lengthscale": d_ls, f"{prefix}.variance": np.array(d_var)}, d_X1

    def diag_vjp(self, values, prefix, X, g):
        """Vector-Jacobian product of ``diag``: the contraction sum_i g_i d diag_i/d(.).

        Parameters
        ----------
        values : dict of str to ndarray
            Hyperparameter values on the natural scale, keyed ``"<prefix>.<field>"``.
        prefix : str
            The kernel's name prefix in ``values`` (``"kernel"`` for a model's kernel).
        X : ndarray, shape (n, D)
            Inputs.
        g : ndarray, shape (n,)
            The adjoint (d objective / d diag).

        Returns
        -------
        dict of str to ndarray
            d/d ``"<prefix>.variance"`` (scalar); the diagonal does not depend on the
            length-scales.
        """
        return {f"{prefix}.variance": np.array(np.sum(g))}

    def describe(self):
        """A short text for summaries and attrs.

        Returns
        -------
        str
            E.g. ``"SquaredExponential(ARD)"`` or ``"Matern32(isotropic)"``.
        """
        return f"{type(self).__name__}({'ARD' if self.ard else 'isotropic'})"


@dataclass(frozen=True, eq=False)
class SquaredExponential(Stationary):
    """Squared-exponential kernel k(x, z) = variance * exp(-r^2 / 2).

    r^2 = sum_d (x_d - z_d)^2 / lengthscale_d^2 (Rasmussen & Williams (2006), eq. 4.9, with ARD
    length-scales as in their eq. 5.2).

    Parameters
    ----------
    lengthscale : float, array of shape (D,), Fixed or prior, default 1.0
        Positive length-scale: a scalar is isotropic, an array of length D is ARD (one per
        input feature).
    variance : float, Fixed or prior, default 1.0
        Positive signal variance sf^2 (a scalar).

    Raises
    ------
    TypeError
        If a field is not a number, an array, ``Fixed(...)`` or a prior.
    ValueError
        If a field is not finite and positive, ``lengthscale`` has more than one dimension or
        ``variance`` is not a scalar.
    """

    profile: ClassVar[int] = _cov.SQUARED_EXPONENTIAL


@dataclass(frozen=True, eq=False)
class Matern32(Stationary):
    """Matérn 3/2 kernel k = variance * (1 + sqrt(3) r) exp(-sqrt(3) r).

    r is the length-scaled distance of :class:`SquaredExponential` (Rasmussen & Williams (2006),
    eq. 4.17 with nu = 3/2).

    Parameters
    ----------
    lengthscale : float, array of shape (D,), Fixed or prior, default 1.0
        Positive length-scale: a scalar is isotropic, an array of length D is ARD (one per
        input feature).
    variance : float, Fixed or prior, default 1.0
        Positive signal variance sf^2 (a scalar).

    Raises
    ------
    TypeError
        If a field is not a number, an array, ``Fixed(...)`` or a prior.
    ValueError
        If a field is not finite and positive, ``lengthscale`` has more than one dimension or
        ``variance`` is not a scalar.
    """

    profile: ClassVar[int] = _cov.MATERN32


@dataclass(frozen=True, eq=False)
class Matern52(Stationary):
    """Matérn 5/2 kernel k = variance * (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r).

    r is the length-scaled distance of :class:`SquaredExponential` (Rasmussen & Williams (2006),
    eq. 4.17 with nu = 5/2).

    Parameters
    ----------
    lengthscale : float, array of shape (D,), Fixed or prior, default 1.0
        Positive length-scale: a scalar is isotropic, an array of length D is ARD (one per
        input feature).
    variance : float, Fixed or prior, default 1.0
        Positive signal variance sf^2 (a scalar).

    Raises
    ------
    TypeError
        If a field is not a number, an array, ``Fixed(...)`` or a prior.
    ValueError
        If a field is not finite and positive, ``lengthscale`` has more than one dimension or
        ``variance`` is not a scalar.
    """

    profile: ClassVar[int] = _cov.MATERN52


@dataclass(frozen=True)
class _Composite(Kernel):
    kernels: tuple

    def __post_init__(self):
        if len(self.kernels) < 2 or not all(isinstance(k, Kernel) for k in self.kernels):
            raise TypeError(f"{type(self).__name__}: kernels must be a tuple of at least two kernels, "
                            f"got {self.kernels!r}")

    def _parts(self, prefix):
        return [(k, f"{prefix}.{i}") for i, k in enumerate(self.kernels)]

    def entries(self, prefix, dim, fixed_names=()):
        """The hyperparameter declarations of every part, named ``"<prefix>.<i>.<field>"``.

        Parameters
        ----------
        prefix : str
            Name prefix of the entries (``"kernel"``).
        dim : int
            Number of input features D.
        fixed_names : collection of str, optional
            Entry names held at their declared value.

        Returns
        -------
        list of gpdsl.parameters.Entry
            The parts' entries, part 0 first.
        """
        return [e for k, p in self._parts(prefix) for e in k.entries(p, dim, fixed_names)]

    def describe(self):
        """A short text for summaries and attrs, e.g. ``"Sum(SquaredExponential(ARD), Matern32(isotropic))"``.

        Returns
        -------
        str
        """
        return f"{type(self).__name__}({', '.join(k.describe() for k in self.kernels)})"


@dataclass(frozen=True)
class Sum(_Composite):
    """Sum kernel k = k_0 + k_1 + ...; hyperparameters are named ``<prefix>.<i>.<field>``.

    Parameters
    ----------
    kernels : tuple of Kernel
        At least two kernels; ``k1 + k2`` builds one.

    Raises
    ------
    TypeError
        If ``kernels`` is not a tuple of at least two kernels.
    """

    def gram(self, values, prefix, X1, X2):
        """Cross-covariance matrix: the sum of the parts' ``gram``.

        Parameters
        ----------
        values : dict of str to ndarray
            Hyperparameter values on the natural scale, keyed ``"<prefix>.<field>"``.
        prefix : str
            The kernel's name prefix in ``values`` (``"kernel"`` for a model's kernel).
        X1 : ndarray, shape (n1, D)
            First inputs.
        X2 : ndarray, shape (n2, D)
            Second inputs.

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        return sum(k.gram(values, p, X1, X2) for k, p in self._parts(prefix))

    def diag(self, values, prefix, X):
        """Prior variances: the sum of the parts' ``diag``.

        Parameters
        ----------
        values : dict of str to ndarray
            Hyperparameter values on the natural scale, keyed ``"<prefix>.<field>"``.
        prefix : str
            The kernel's name prefix in ``values`` (``"kernel"`` for a model's kernel).
        X : ndarray, shape (n, D)
            Inputs.

        Returns
        -------
        ndarray, shape (n,)
        """
        return sum(k.diag(values, p, X) for k, p in self._parts(prefix))

    def vjp(self, values, prefix, X1, X2, G, K=None):
        """Vector-Jacobian product of ``gram``, sum_ij G_ij dK_ij/d(.), summed over the parts.

        Parameters
        ----------
        values : dict of str to ndarray
            Hyperparameter values on the natural scale, keyed ``"<prefix>.<field>"``.
        prefix : str
            The kernel's name prefix in ``values`` (``"kernel"`` for a model's kernel).
        X1 : ndarray, shape (n1, D)
            First inputs.
        X2 : ndarray, shape (n2, D)
            Second inputs.
        G : ndarray, shape (n1, n2)
            The adjoint d objective / d K.
        K : ndarray, shape (n1, n2), optional
            Accepted for the kernel interface; not used (each part recomputes its own Gram matrix).

        Returns
        -------
        grads : dict of str to ndarray
            d/d each part's hyperparameters, keyed ``"<prefix>.<i>.<field>"``.
        d_X1 : ndarray, shape (n1, D)
            d/d X1.
        """
        grads, d_X1 = {}, np.zeros(X1.shape)
        for k, p in self._parts(prefix):
            g, dx = k.vjp(values, p, X1, X2, G)
            grads = add_partial(grads, g)
            d_X1 += dx
        return grads, d_X1

    def diag_vjp(self, values, prefix, X, g):
        """Vector-Jacobian product of ``diag``, sum_i g_i d diag_i/d(.), over the parts.

        Parameters
        ----------
        values : dict of str to ndarray
            Hyperparameter values on the natural scale, keyed ``"<prefix>.<field>"``.
        prefix : str
            The kernel's name prefix in ``values`` (``"kernel"`` for a model's kernel).
        X : ndarray, shape (n, D)
            Inputs.
        g : ndarray, shape (n,)
            The adjoint d objective / d diag.

        Returns
        -------
        dict of str to ndarray
            Keyed ``"<prefix>.<i>.<field>"``.
        """
        grads = {}
        for k, p in self._parts(prefix):
            grads = add_partial(grads, k.diag_vjp(values, p, X, g))
        return grads


@dataclass(frozen=True)
class Product(_Composite):
    """Product kernel k = k_0 * k_1 * ... (elementwise); the VJP of each factor sees G times the others.

    Hyperparameters are named ``<prefix>.<i>.<field>``.

    Parameters
    ----------
    kernels : tuple of Kernel
        At least two kernels; ``k1 * k2`` builds one.

    Raises
    ------
    TypeError
        If ``kernels`` is not a tuple of at least two kernels.
    """

    def gram(self, values, prefix, X1, X2):
        """Cross-covariance matrix: the product of the parts' ``gram``.

        Parameters
        ----------
        values : dict of str to ndarray
            Hyperparameter values on the natural scale, keyed ``"<prefix>.<field>"``.
        prefix : str
            The kernel's name prefix in ``values`` (``"kernel"`` for a model's kernel).
        X1 : ndarray, shape (n1, D)
            First inputs.
        X2 : ndarray, shape (n2, D)
            Second inputs.

        Returns
        -------
        ndarray, shape (n1, n2)
        """
        return np.prod([k.gram(values, p, X1, X2) for k, p in self._parts(prefix)], axis=0)

    def diag(self, values, prefix, X):
        """Prior variances: the product of the parts' ``diag``.

        Parameters
        ----------
        values : dict of str to ndarray
            Hyperparameter values on the natural scale, keyed ``"<prefix>.<field>"``.
        prefix : str
            The kernel's name prefix in ``values`` (``"kernel"`` for a model's kernel).
        X : ndarray, shape (n, D)
            Inputs.

        Returns
        -------
        ndarray, shape (n,)
        """
        return np.prod([k.diag(values, p, X) for k, p in self._parts(prefix)], axis=0)

    def vjp(self, values, prefix, X1, X2, G, K=None):
        """Vector-Jacobian product of ``gram``, sum_ij G_ij dK_ij/d(.), summed over the parts.

        Each part's adjoint is G times the other parts' Gram matrices.

        Parameters
        ----------
        values : dict of str to ndarray
            Hyperparameter values on the natural scale, keyed ``"<prefix>.<field>"``.
        prefix : str
            The kernel's name prefix in ``values`` (``"kernel"`` for a model's kernel).
        X1 : ndarray, shape (n1, D)
            First inputs.
        X2 : ndarray, shape (n2, D)
            Second inputs.
        G : ndarray, shape (n1, n2)
            The adjoint d objective / d K.
        K : ndarray, shape (n1, n2), optional
            Accepted for the kernel interface; not used (each part recomputes its own Gram matrix).

        Returns
        -------
        grads : dict of str to ndarray
            d/d each part's hyperparameters, keyed ``"<prefix>.<i>.<field>"``.
        d_X1 : ndarray, shape (n1, D)
            d/d X1.
        """
        parts = self._parts(prefix)
        mats = [k.gram(values, p, X1, X2) for k, p in parts]
        grads, d_X1 = {}, np.zeros(X1.shape)
        for i, (k, p) in enumerate(parts):
            others = np.prod([m for j, m in enumerate(mats) if j != i], axis=0)
            g, dx = k.vjp(values, p, X1, X2, G * others)
            grads = add_partial(grads, g)
            d_X1 += dx
        return grads, d_X1

    def diag_vjp(self, values, prefix, X, g):
        """Vector-Jacobian product of ``diag``, sum_i g_i d diag_i/d(.), over the parts.

        Each part's adjoint is g times the other parts' diagonals.

        Parameters
        ----------
        values : dict of str to ndarray
            Hyperparameter values on the natural scale, keyed ``"<prefix>.<field>"``.
        prefix : str
            The kernel's name prefix in ``values`` (``"kernel"`` for a model's kernel).
        X : ndarray, shape (n, D)
            Inputs.
        g : ndarray, shape (n,)
            The adjoint d objective / d diag.

        Returns
        -------
        dict of str to ndarray
            Keyed ``"<prefix>.<i>.<field>"``.
        """
        parts = self._parts(prefix)
        diags = [k.diag(values, p, X) for k, p in parts]
        grads = {}
        for i, (k, p) in enumerate(parts):
            others = np.prod([d for j, d in enumerate(diags) if j != i], axis=0)
            grads = add_partial(grads, k.diag_vjp(values, p, X, g * others))
        return grads


# Explicit registry used by model files (TOML) and by `gpdsl.load`.
KERNELS = {cls.__name__: cls for cls in (SquaredExponential, Matern32, Matern52)}

__all__ = ["Kernel", "SquaredExponential", "Matern32", "Matern52", "Sum", "Product", "KERNELS"]
