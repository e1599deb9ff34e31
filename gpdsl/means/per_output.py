"""One mean function per output of a multi-output model (:class:`PerOutput`), whose inputs carry
the output index in their last column (:mod:`gpdsl.multioutput`'s long layout)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..checks import output_indices
from ..components import bind_parts, part_parameters
from ..multioutput import output_groups
from .base import Mean


@dataclass(frozen=True, eq=False)
class PerOutput(Mean):
    """m(x, p) = m_p(x): row n's mean is its output's mean function ``means[p_n]`` at the row's
    inputs, p_n = X[n, -1] the output index and x_n = X[n, :-1] the inputs it sees (so a
    :class:`~gpdsl.means.Linear` part has one coefficient per input feature, not per column of X).
    Hyperparameters are named ``<p>.<field>`` (``mean.1.constant`` in a model), as
    :class:`~gpdsl.means.SumMean` names its parts.

    Parameters
    ----------
    means : tuple of Mean
        One mean function per output, P >= 1 of them, in the order of the output index.

    Raises
    ------
    TypeError
        If ``means`` is not a non-empty tuple of mean functions.
    """

    means: tuple
    # It reads the output column itself and gives each part the feature columns only.
    reads_input_columns = False

    def __post_init__(self):
        if not isinstance(self.means, tuple) or not self.means or not all(isinstance(m, Mean) for m in self.means):
            raise TypeError(f"PerOutput: means must be a non-empty tuple of gd.means mean functions (one per output), "
                            f"got {self.means!r}")

    @property
    def output_count(self):
        """int: the number of outputs P (one mean each)."""
        return len(self.means)

    @property
    def _labels(self):
        return [str(p) for p in range(len(self.means))]

    @classmethod
    def variants(cls):
        parts = Mean.registry
        return (cls((parts["Constant"](0.3), parts["Linear"](np.array([0.5, -0.2])), parts["Zero"]())),)

    def parameters(self, X):
        """The parts' parameters, each part's sized by the feature columns X[:, :-1].

        Parameters
        ----------
        X : ndarray, shape (N, D + 1)
            Inputs whose last column is the output index.

        Returns
        -------
        list of Parameter
        """
        return part_parameters(self._labels, self.means, X[:, :-1])

    def bind(self, values=None):
        return dataclasses.replace(self, means=bind_parts(self._labels, self.means, values))

    def _rows(self, X):
        """(p, rows of output p) for each output, with or without rows in X (a part's gradient is
        0 then)."""
        return output_groups(output_indices("PerOutput", X, len(self.means)), len(self.means), empty=True)

    def value(self, X):
        """m_{p_n}(X[n, :-1]) for each row n.

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)

        Returns
        -------
        ndarray, shape (n,)

        Raises
        ------
        ValueError
            An output index that is not an integer in 0..P-1.
        """
        out = np.zeros(X.shape[0])
        for p, rows in self._rows(X):
            if rows.size:
                out[rows] = self.means[p].value(X[rows, :-1])
        return out

    def vjp(self, X, g):
        """Part p's vjp on its own rows: ``{"<p>.<name>": sum over rows n of output p of
        g_n dm_p(x_n) / d theta}`` (zero for a part without rows).

        Parameters
        ----------
        X : ndarray, shape (n, D + 1)
        g : ndarray, shape (n,)

        Returns
        -------
        dict of str to ndarray
        """
        grads = {}
        for p, rows in self._rows(X):
            part = self.means[p].vjp(X[rows, :-1], g[rows])
            grads.update({f"{p}.{name}": value for name, value in part.items()})
        return grads

    def describe(self):
        return f"PerOutput({', '.join(m.describe() for m in self.means)})"


__all__ = ["PerOutput"]
