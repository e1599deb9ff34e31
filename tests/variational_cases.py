"""Kernels, likelihoods, the whitened prediction and a pass counter shared by the SVGP and VGP tests."""
import numpy as np

import gpdsl as gd
from gpdsl.components import bind

SE = gd.kernels.SquaredExponential
KERNELS = {
    "se-ard": (SE(np.array([0.8, 1.3]), 1.4),
               {"kernel.lengthscale": np.array([0.8, 1.3]), "kernel.variance": np.array(1.4)}),
    "m52": (gd.kernels.Matern52(1.1, 0.7), {"kernel.lengthscale": np.array(1.1), "kernel.variance": np.array(0.7)}),
}
LIKELIHOODS = {
    "gauss": (gd.likelihoods.Gaussian(0.2), {"likelihood.variance": np.array(0.2)}, False),
    "probit": (gd.likelihoods.Bernoulli("probit"), {"likelihood.bias": np.array(0.3)}, True),
    "logit": (gd.likelihoods.Bernoulli("logit"), {"likelihood.bias": np.array(-0.2)}, True),
    "student-t": (gd.likelihoods.StudentT(3.0, 0.5),
                  {"likelihood.df": np.array(3.0), "likelihood.scale": np.array(0.5)}, False),
}


def predict_f(kernel, values, state, Xs):
    """Latent mean and variance at Xs from a PredictiveState, written out independently of
    Posterior.predict_f: b = chol^-1 K_z*, mean b^T weights, variance k_** - b^T correction b."""
    b = state.basis(bind(kernel, values, "kernel").gram(state.Z, Xs))
    return b.T @ state.weights, bind(kernel, values, "kernel").diag(Xs) - np.einsum("ij,ij->j", b, b if state.correction is None else state.correction @ b)


class Counting:
    """A likelihood wrapper that counts the passes over the data (calls of
    variational_expectations)."""

    def __init__(self, likelihood):
        self.likelihood, self.calls = likelihood, 0

    def variational_expectations(self, *args):
        self.calls += 1
        return self.likelihood.variational_expectations(*args)

    def for_rows(self, X):
        # The wrapped likelihoods are of one density for every row: the wrapper counts for all.
        return self
