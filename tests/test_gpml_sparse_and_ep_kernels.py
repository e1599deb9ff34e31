"""GPML 4.2's sparse and EP oracles for the new kernels and the mean functions (rtol 1e-6, as the
other sparse and EP files): FITC with a periodic kernel and a linear mean (d/dZ too), VFE with
the Mauna-Loa-like composite and a constant mean, FITC with RQ-ARD + linear-ARD, dense probit EP
with SE + linear and a constant mean, and FITC-EP with an isotropic RQ.  GPML's inducing jitter
1e-6 trace(Kuu) / M is gpdsl's ``jitter=1e-6`` (a multiple of the mean diagonal)."""
from __future__ import annotations

import numpy as np

import gpdsl as gd
from gpml_kernel_cases import check_case, load_case

K = gd.kernels


def _noise(lik):
    return {"likelihood.variance": np.exp(2 * lik[0])}


def _inducing(name):
    return gd.inducing.Optimized(load_case(name)["Z"])


def test_fitc_periodic_with_a_linear_mean():
    name = "periodic_mean_linear_fitc"
    model = gd.Model(K.Periodic(), gd.likelihoods.Gaussian(), _inducing(name), gd.inference.FITC(jitter=1e-6),
                     mean=gd.means.Linear())

    def natural(cov, mean, lik):
        return {"kernel.lengthscale": np.exp(cov[0]), "kernel.period": np.exp(cov[1]),
                "kernel.variance": np.exp(2 * cov[2]), "mean.coefficients": mean[:1], **_noise(lik)}
    check_case(name, model, natural, rtol=1e-6)


def test_vfe_mauna_loa_like_with_a_constant_mean():
    name = "mauna_loa_like_vfe"
    kernel = K.SquaredExponential() + K.SquaredExponential() * K.Periodic() + K.RationalQuadratic()
    model = gd.Model(kernel, gd.likelihoods.Gaussian(), _inducing(name), gd.inference.VFE(jitter=1e-6),
                     mean=gd.means.Constant())

    def natural(cov, mean, lik):
        return {"kernel.0.lengthscale": np.exp(cov[0]), "kernel.0.variance": np.exp(2 * cov[1]),
                "kernel.1.0.lengthscale": np.exp(cov[2]), "kernel.1.0.variance": np.exp(2 * cov[3]),
                "kernel.1.1.lengthscale": np.exp(cov[4]), "kernel.1.1.period": np.exp(cov[5]),
                "kernel.1.1.variance": np.exp(2 * cov[6]),
                "kernel.2.lengthscale": np.exp(cov[7]), "kernel.2.variance": np.exp(2 * cov[8]),
                "kernel.2.alpha": np.exp(cov[9]), "mean.constant": mean[0], **_noise(lik)}
    check_case(name, model, natural, rtol=1e-6)


def test_fitc_rq_ard_plus_linear_ard():
    name = "rq_ard_plus_linear_fitc"
    kernel = K.RationalQuadratic(np.ones(2)) + K.Linear(np.ones(2))
    model = gd.Model(kernel, gd.likelihoods.Gaussian(), _inducing(name), gd.inference.FITC(jitter=1e-6))

    def natural(cov, mean, lik):
        # covLINard is sum_d x_d z_d / ell_d^2: Linear's variance_d = ell_d^-2.
        return {"kernel.0.lengthscale": np.exp(cov[0:2]), "kernel.0.variance": np.exp(2 * cov[2]),
                "kernel.0.alpha": np.exp(cov[3]), "kernel.1.variance": np.exp(-2 * cov[4:6]), **_noise(lik)}
    check_case(name, model, natural, rtol=1e-6)


def _probit():
    return gd.likelihoods.Bernoulli("probit", bias=gd.Fixed(0.0))


def test_dense_ep_se_plus_linear_with_a_constant_mean():
    model = gd.Model(K.SquaredExponential() + K.Linear(), _probit(), None, gd.inference.EP(tol=1e-12),
                     mean=gd.means.Constant())

    def natural(cov, mean, lik):
        return {"kernel.0.lengthscale": np.exp(cov[0]), "kernel.0.variance": np.exp(2 * cov[1]),
                "kernel.1.variance": np.exp(-2 * cov[2]), "mean.constant": mean[0]}
    check_case("ep_probit_se_plus_linear_mean_const", model, natural, rtol=1e-6)


def test_fitc_ep_rational_quadratic():
    name = "ep_probit_rq_fitc"
    model = gd.Model(K.RationalQuadratic(), _probit(), _inducing(name), gd.inference.EP(tol=1e-12, jitter=1e-6))

    def natural(cov, mean, lik):
        return {"kernel.lengthscale": np.exp(cov[0]), "kernel.variance": np.exp(2 * cov[1]),
                "kernel.alpha": np.exp(cov[2])}
    check_case(name, model, natural, rtol=1e-6)
