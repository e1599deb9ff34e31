"""The conformance suite: every registered component and every supported (likelihood, inference)
pair, checked against independent computations by :mod:`gpdsl.testing` (the checks a user runs
on their own classes), with no list kept by hand.

The cases come from the registries (``Kernel.registry``, ``Likelihood.registry``,
``Inference.registry``, filled by each class's definition; :func:`gpdsl.testing.registered`) and
each class's ``variants()``, so a new component is tested by defining it; what each check asserts
is in :mod:`gpdsl.testing`.  Here besides: the README's table of supported pairs against
``gd.inference.supported_pairs()``, and every method with a composite kernel and a mean function.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import gpdsl as gd
import gpdsl.testing as gt
from gpdsl.inference import Inference
from gpdsl.kernels import Kernel
from gpdsl.likelihoods import Likelihood

# Components defined outside gpdsl join the registries by being imported, as a user's would.
import external_components  # noqa: F401

README = Path(__file__).resolve().parents[1] / "README.md"


def _cases(base, where=lambda v: True):
    return [pytest.param(v, id=f"{cls.__name__}-{i}") for cls in gt.registered(base)
            for i, v in enumerate(cls.variants()) if where(v)]


def _likelihoods(check):
    """Every registered likelihood variant that ``check`` applies to (gpdsl.testing.likelihood_checks)."""
    return _cases(Likelihood, lambda v: check in gt.likelihood_checks(v))


# Kernels of one output (a kernel of several latent functions, ``Separate``, returns stacks: its
# checks are in tests/test_separate.py).
KERNEL_CASES = _cases(Kernel, lambda v: v.n_outputs == 1)
MEAN_CASES = _cases(gd.means.Mean)


# -- kernels --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", KERNEL_CASES)
def test_kernel_gram_is_symmetric_psd_and_diag_is_its_diagonal(kernel):
    gt.check_kernel_gram(kernel)


@pytest.mark.parametrize("kernel", KERNEL_CASES)
def test_kernel_gradients_match_central_differences(kernel):
    gt.check_kernel_gradients(kernel)


@pytest.mark.parametrize("kernel", KERNEL_CASES)
def test_kernel_fitted_model_round_trips(kernel):
    gt.check_kernel_fitted_model_round_trips(kernel)


@pytest.mark.parametrize("kernel", KERNEL_CASES)
def test_kernel_on_active_dims_is_the_kernel_on_those_columns(kernel):
    gt.check_kernel_active_dims(kernel)


# -- mean functions -------------------------------------------------------------------------------
@pytest.mark.parametrize("mean", MEAN_CASES)
def test_mean_gradients_match_central_differences(mean):
    gt.check_mean_gradients(mean)


@pytest.mark.parametrize("mean", MEAN_CASES)
def test_mean_fitted_model_round_trips(mean):
    gt.check_mean_fitted_model_round_trips(mean)


# -- likelihoods ----------------------------------------------------------------------------------
@pytest.mark.parametrize("likelihood", _likelihoods(gt.check_likelihood_derivatives))
def test_log_density_derivatives_match_central_differences(likelihood):
    gt.check_likelihood_derivatives(likelihood)


@pytest.mark.parametrize("likelihood", _likelihoods(gt.check_likelihood_variational_expectations))
def test_variational_expectations_match_quadrature(likelihood):
    gt.check_likelihood_variational_expectations(likelihood)


@pytest.mark.parametrize("likelihood", _likelihoods(gt.check_likelihood_log_predictive))
def test_log_predictive_matches_quadrature(likelihood):
    gt.check_likelihood_log_predictive(likelihood)


@pytest.mark.parametrize("likelihood", _likelihoods(gt.check_likelihood_predictive))
def test_predictive_matches_draws(likelihood):
    gt.check_likelihood_predictive(likelihood)


@pytest.mark.parametrize("likelihood", _likelihoods(gt.check_likelihood_noise))
def test_noise_is_the_density_and_its_vjp_matches_central_differences(likelihood):
    gt.check_likelihood_noise(likelihood)


@pytest.mark.parametrize("likelihood", _likelihoods(gt.check_likelihood_multi_latent_expectations))
def test_multi_latent_expectations_bound_draws_and_match_differences(likelihood):
    gt.check_likelihood_multi_latent_expectations(likelihood)


@pytest.mark.parametrize("likelihood", _likelihoods(gt.check_likelihood_multi_latent_predictive))
def test_multi_latent_predictive_is_a_distribution_matching_draws(likelihood):
    gt.check_likelihood_multi_latent_predictive(likelihood)


@pytest.mark.parametrize("likelihood", _likelihoods(gt.check_likelihood_site_model))
def test_site_model_matches_quadrature(likelihood):
    gt.check_likelihood_site_model(likelihood)


# -- supported pairs ------------------------------------------------------------------------------
def _pair_cases(check):
    return [pytest.param(lik, method, id=f"{type(lik).__name__}-{type(lik).variants().index(lik)}-{type(method).__name__}")
            for lik, method in gt.pairs() if check in gt.pair_checks(lik, method)]


@pytest.mark.parametrize("likelihood,inference", _pair_cases(gt.check_pair_gradients))
def test_pair_gradients_match_central_differences(likelihood, inference):
    gt.check_pair_gradients(likelihood, inference)


@pytest.mark.parametrize("likelihood,inference", _pair_cases(gt.check_pair_fitted_model_round_trips))
def test_pair_fitted_model_round_trips(likelihood, inference):
    gt.check_pair_fitted_model_round_trips(likelihood, inference)


@pytest.mark.parametrize("likelihood,inference", _pair_cases(gt.check_pair_predictions))
def test_pair_predictions_follow_the_likelihood(likelihood, inference):
    gt.check_pair_predictions(likelihood, inference)


@pytest.mark.parametrize("likelihood,inference", _pair_cases(gt.check_pair_dask_equals_in_memory))
def test_pair_dask_equals_in_memory(likelihood, inference):
    gt.check_pair_dask_equals_in_memory(likelihood, inference)


def test_readme_pairs_table_is_supported_pairs():
    text = README.read_text()
    section = text[text.index("## Supported (likelihood, inference) pairs"):]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| likelihood"))
    header = lines[start]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    methods = [c.strip().strip("`") for c in header.strip("|").split("|")[1:]]
    listed = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        name = re.match(r"`(\w+)", cells[0]).group(1)
        assert len(cells) == len(methods) + 1, row
        for method, cell in zip(methods, cells[1:]):
            assert cell in ("yes", "no"), row
            if cell == "yes":
                listed.add(f"{name} + {method}")
        variant = re.match(r"`(\w+)\((K, )?link=\"(\w+)\"\)`", cells[0])
        if variant:   # a row per link: each cell is what the method says of that link (K = 3 classes)
            lik = getattr(gd.likelihoods, variant.group(1))(*([3] if variant.group(2) else []), link=variant.group(3))
            for method, cell in zip(methods, cells[1:]):
                assert gd.inference.INFERENCE[method]().accepts(lik) == (cell == "yes"), (row, method)
    assert set(methods) == set(gd.inference.INFERENCE)
    assert sorted(listed) == gd.inference.supported_pairs()


# -- every method with a composite of the new kernels and a mean function -----------------------
COMPOSITE = (gd.kernels.Periodic(gd.kernels.RationalQuadratic(0.9, 1.1, alpha=0.8), period=1.7)
             * gd.kernels.Linear(0.5, active_dims=[1])
             + gd.kernels.Matern12(0.8, 0.3, name="rough"))
AFFINE = gd.means.Constant(0.2) + gd.means.Linear(np.array([0.3, -0.2]))


def _method_cases():
    """Each registered method's first variant with the first of a few likelihoods it accepts."""
    likelihoods = [gd.likelihoods.Gaussian(0.3), gd.likelihoods.Bernoulli("logit"), gd.likelihoods.Bernoulli("probit"),
                   gd.likelihoods.Poisson(link="log")]
    cases = []
    for method_cls in gt.registered(Inference):
        method = gt.tight(method_cls.variants()[0])
        chosen = next((lik for lik in likelihoods if method.accepts(lik)), None)
        if chosen is not None and method.supports_offset:
            cases.append(pytest.param(chosen, method, id=f"{type(chosen).__name__}-{method_cls.__name__}"))
    return cases


@pytest.mark.parametrize("likelihood,inference", _method_cases())
def test_method_with_composite_kernel_and_mean_matches_central_differences(likelihood, inference):
    """Every method runs a composite of the new kernels (periodic of an RQ base, a linear kernel on
    one column, a named Matérn 1/2) with an affine mean: its gradients in every kernel, likelihood
    and mean parameter and in Z against central differences."""
    inducing = gd.inducing.Optimized(gt.Z0) if inference.inducing_rule != "forbidden" else None
    model = gd.Model(COMPOSITE, likelihood, inducing, inference, mean=AFFINE)
    ev = gt.check_model_gradients(model, gt.XP, likelihood.prepare_targets(gt.pair_targets(likelihood)), gt.Z0)
    assert {"mean.0.constant", "mean.1.coefficients", "kernel.rough.lengthscale"} <= set(ev.grads)


# -- gpdsl.testing's entry points ------------------------------------------------------------------
def test_checks_list_what_each_component_provides():
    """checks() of a likelihood: its own checks and, per registered method that accepts it, the
    pair checks named after the method; of a method: the pair checks per likelihood it accepts;
    anything else is refused, naming what it got."""
    probit = gd.likelihoods.Bernoulli()
    names = [c.__name__ for c in gt.checks(probit)]
    assert names[:4] == ["check_likelihood_derivatives", "check_likelihood_variational_expectations",
                         "check_likelihood_log_predictive", "check_likelihood_predictive"]
    assert "check_likelihood_site_model" in names and "check_likelihood_limits" in names
    for method in ("EP", "QP", "Laplace", "SVGP", "VGP"):
        assert f"check_pair_gradients[{method}]" in names, method
    assert not any("PolyaGamma" in n for n in names)          # the probit has no Pólya-Gamma augmentation
    exact = [c.__name__ for c in gt.checks(gd.inference.Exact())]
    assert "check_pair_gradients[Gaussian]" in exact and not any("Bernoulli" in n for n in exact)
    with pytest.raises(TypeError, match="expected a Kernel, Mean, Likelihood or Inference.*got str"):
        gt.checks("Bernoulli")
    with pytest.raises(ValueError, match="'fit' is not an operation of the likelihood interface"):
        probit.defines("fit")


def test_check_method_and_check_mean_run_every_check():
    """check_method on Exact (its pairs with both Gaussian likelihoods) and check_mean on the
    constant mean pass; a wrong mean gradient fails, named."""
    gt.check_method(gd.inference.Exact)
    gt.check_mean(gd.means.Constant(0.4))

    import dataclasses as dc

    @dc.dataclass(frozen=True, eq=False)
    class DoubledGradient(gd.means.Constant):
        def vjp(self, X, g):
            return {name: 2.0 * v for name, v in super().vjp(X, g).items()}

    with pytest.raises(AssertionError, match="check_mean_gradients failed for DoubledGradient"):
        gt.check_mean(DoubledGradient(0.4))


# -- the likelihood checks catch what they are for --------------------------------------------------
def _normal_noise(sd):
    """A likelihood with only its log density's derivatives: Gaussian noise of sd ``sd``."""
    import dataclasses as dc

    @dc.dataclass(frozen=True, eq=False)
    class NormalNoise(Likelihood):
        target_kind = "real"

        def log_density_derivatives(self, y, f):
            r = y - f
            return (-0.5 * r * r / sd ** 2 - 0.5 * np.log(2 * np.pi * sd ** 2), r / sd ** 2, np.full_like(r, -sd ** -2),
                    np.zeros_like(r))

    return NormalNoise


def test_log_predictive_check_covers_a_likelihood_narrower_than_q():
    """The log predictive is checked at a wide q and a confident miss (PREDICTIVE_TAILS): the
    default passes for noise of sd 0.05 and 0.5; the old default (100-point Gauss-Hermite on q)
    fails, for sd 0.5 only at those points."""
    import dataclasses as dc
    from scipy import special

    for sd, where in ((0.05, "log_predictive at q "), (0.5, r"log_predictive at q = N\(")):
        noise = _normal_noise(sd)
        gt.check_likelihood_log_predictive(noise())

        @dc.dataclass(frozen=True, eq=False)
        class HermiteOnQ(noise):
            def log_predictive(self, f_mean, f_var, y):
                f, weights, _ = self.expectation_rule(y, f_mean, f_var)
                with np.errstate(divide="ignore"):
                    return special.logsumexp(np.log(weights) + self.log_density(y[:, None], f), axis=1)

        with pytest.raises(AssertionError, match=where):
            gt.check_likelihood_log_predictive(HermiteOnQ())


def test_predictive_check_compares_counts_with_the_summed_pmf_not_only_with_draws():
    """A count likelihood whose predictive and draws agree with each other but not with its
    density (a rate 1.05 e^f in both) fails: its y_mean is checked against the moments of
    exp(log_predictive) and the summed pmfs of log_density."""
    import dataclasses as dc

    @dc.dataclass(frozen=True, eq=False)
    class Counts(Likelihood):
        target_kind = "count"

        def log_density_derivatives(self, y, f):
            rate = np.exp(f)
            return y * f - rate - gd.likelihoods.poisson.special.gammaln(y + 1.0), y - rate, -rate, -rate

    @dc.dataclass(frozen=True, eq=False)
    class InflatedRate(Counts):
        def predictive(self, f_mean, f_var):
            rate = 1.05 * np.exp(f_mean + f_var / 2)
            return {"y_mean": rate, "y_var": rate + rate ** 2 * np.expm1(f_var)}

        def sample(self, f, rng):
            return rng.poisson(1.05 * np.exp(f)).astype(float)

    gt.check_likelihood_predictive(Counts())
    with pytest.raises(AssertionError, match="y_mean at q 0"):
        gt.check_likelihood_predictive(InflatedRate())


def test_noise_check_compares_noise_with_the_density():
    """A Gaussian whose noise() disagrees with its density (twice its variance) fails the noise
    check; one whose noise_vjp is wrong fails it too; Gaussian passes."""
    import dataclasses as dc

    @dc.dataclass(frozen=True, eq=False)
    class DoubledNoise(gd.likelihoods.Gaussian):
        def noise(self, X):
            return 2.0 * super().noise(X)

    @dc.dataclass(frozen=True, eq=False)
    class WrongNoiseGradient(gd.likelihoods.Gaussian):
        def noise_vjp(self, X, g):
            return {name: 3.0 * v for name, v in super().noise_vjp(X, g).items()}

    gt.check_likelihood_noise(gd.likelihoods.Gaussian(0.3))
    assert gt.check_likelihood_noise in gt.likelihood_checks(DoubledNoise(0.3))
    with pytest.raises(AssertionError, match="normal density of variance noise"):
        gt.check_likelihood_noise(DoubledNoise(0.3))
    with pytest.raises(AssertionError, match="noise_vjp variance"):
        gt.check_likelihood_noise(WrongNoiseGradient(0.3))


def test_a_documented_predictive_approximation_must_keep_the_predictive_moments():
    """The square-link Poisson's moment-matched negative binomial passes (its mean and variance
    are predictive's); a normalised approximation with other moments (a Poisson pmf of the
    predictive mean: variance too small) fails, where only its normalisation was checked before."""
    import dataclasses as dc
    from scipy import stats

    gt.check_likelihood_log_predictive(gd.likelihoods.Poisson(link="square"))

    @dc.dataclass(frozen=True, eq=False)
    class PoissonOfTheMean(gd.likelihoods.Poisson):
        def log_predictive(self, f_mean, f_var, y):
            return stats.poisson.logpmf(y, f_mean ** 2 + f_var)

    assert PoissonOfTheMean(link="square").predictive_approximation is not None
    with pytest.raises(AssertionError, match="y_var at q 0"):
        gt.check_likelihood_log_predictive(PoissonOfTheMean(link="square"))


# -- every method with each multi-output kernel -----------------------------------------------------
def _multi_output_cases(check):
    """Each registered multi-output kernel variant (``output_count`` P) with each registered
    method's first variant and the first of a few likelihoods it accepts (per-output Gaussian
    noise first): the (multi-output kernel, method) pairs that are accepted, with ``check`` where
    it applies to the pair (gpdsl.testing.pair_checks)."""
    cases = []
    for kernel_cls in gt.registered(Kernel):
        for i, kernel in enumerate(kernel_cls.variants()):
            P = getattr(kernel, "output_count", None)
            if P is None:
                continue
            likelihoods = [gd.likelihoods.OutputGaussian(P, variance=0.2 + 0.1 * np.arange(P)),
                           gd.likelihoods.Bernoulli("logit"), gd.likelihoods.Poisson(link="log")]
            for method_cls in gt.registered(Inference):
                method = gt.tight(method_cls.variants()[0])
                lik = next((lik for lik in likelihoods if method.accepts(lik)), None)
                if lik is not None and check in gt.pair_checks(lik, method):
                    cases.append(pytest.param(kernel, lik, method,
                                              id=f"{kernel_cls.__name__}-{i}-{type(lik).__name__}-{method_cls.__name__}"))
    return cases


@pytest.mark.parametrize("kernel,likelihood,inference", _multi_output_cases(gt.check_pair_gradients))
def test_multi_output_kernel_gradients_with_every_method(kernel, likelihood, inference):
    """Every method's objective with each multi-output kernel (long rows, inducing inputs shared by
    the outputs): every gradient against central differences."""
    gt.check_pair_gradients(likelihood, inference, kernel)


@pytest.mark.parametrize("kernel,likelihood,inference", _multi_output_cases(gt.check_pair_fitted_model_round_trips))
def test_multi_output_kernel_fits_round_trip_with_every_method(kernel, likelihood, inference):
    """Each (multi-output kernel, method) fit saves and loads back with the same values and
    per-row predictions to the bit, and round-trips through to_dict and its model file."""
    gt.check_pair_fitted_model_round_trips(likelihood, inference, kernel)


@pytest.mark.parametrize("kernel,likelihood,inference", _multi_output_cases(gt.check_pair_predictions))
def test_multi_output_kernel_predictions_follow_the_likelihood(kernel, likelihood, inference):
    """Each (multi-output kernel, method) fit predicts, scores and exports its long rows through
    the likelihood's operations."""
    gt.check_pair_predictions(likelihood, inference, kernel)


@pytest.mark.parametrize("kernel,likelihood,inference", _multi_output_cases(gt.check_pair_dask_equals_in_memory))
def test_multi_output_kernel_dask_equals_in_memory(kernel, likelihood, inference):
    """A Dask X of long rows (chunks of 5) gives the in-memory objective and gradients."""
    gt.check_pair_dask_equals_in_memory(likelihood, inference, kernel)
