"""Malformed model specs end in one line ``gpdsl: error: ...`` and exit status 2 (issue 14, item 10).

Each case names the table at fault and what it expected; unknown keys are errors everywhere,
as the user guide's "Model files" section (docs/guide.md) says, including the ``Sum`` / ``Product``, ``Optimized``,
``{fixed = ..}`` and ``{prior = ..}`` tables that used to drop them silently.
"""
import pytest

import gpdsl as gd
from gpdsl import cli
from test_cli import MODEL_TOML, assert_one_line_error, write_model, write_sine_csv

SE_TABLE = '[kernel]\ntype = "SquaredExponential"\nlengthscale = 1.0\nvariance = 1.0\n'
SUBSAMPLE_TABLE = '[inducing]\ntype = "Subsample"\nm = 10\nseed = 0\n'


def edited(old, new):
    assert old in MODEL_TOML
    return MODEL_TOML.replace(old, new)


@pytest.mark.parametrize("text, fragments", [
    # Used to raise KeyError: 'kernels'.
    pytest.param(edited(SE_TABLE, '[kernel]\ntype = "Sum"\n'),
                 ["kernel (Sum): missing 'kernels'"], id="sum-without-kernels"),
    pytest.param(edited(SE_TABLE, '[kernel]\ntype = "Product"\nkernels = "SquaredExponential"\n'),
                 ["kernel (Product): 'kernels' must be a list of at least two kernel tables"],
                 id="kernels-not-a-list"),
    # Used to drop the unknown key silently.
    pytest.param(edited(SE_TABLE, '[kernel]\ntype = "Sum"\n'
                                  'kernels = [{type = "Matern32"}, {type = "Matern52"}]\nvariance = 2.0\n'),
                 ["kernel (Sum): unknown keys ['variance']", "known: ['active_dims', 'kernels', 'name']"], id="sum-unknown-key"),
    pytest.param(edited(SE_TABLE, '[kernel]\ntype = "Product"\n'
                                  'kernels = [{type = "Matern32"}, {type = "Matern52", lenghtscale = 2.0}]\n'),
                 ["kernel.kernels[1] (Matern52): unknown keys ['lenghtscale']", "'lengthscale'"],
                 id="nested-unknown-key"),
    pytest.param(edited(SUBSAMPLE_TABLE, '[inducing]\ntype = "Optimized"\n'
                                         'init = {type = "Subsample", m = 10}\nseed = 3\n'),
                 ["inducing (Optimized): unknown keys ['seed']", "known: ['init']"],
                 id="optimized-unknown-key"),
    pytest.param(edited(SUBSAMPLE_TABLE, '[inducing]\ntype = "Optimized"\n'),
                 ["inducing (Optimized): missing 'init'"], id="optimized-without-init"),
    pytest.param(edited(SUBSAMPLE_TABLE, '[inducing]\ntype = "Optimized"\ninit = {type = "Subsampel", m = 10}\n'),
                 ["inducing.init: unknown type 'Subsampel'"], id="optimized-bad-init-type"),
    pytest.param(edited(SUBSAMPLE_TABLE, '[inducing]\ntype = "Optimized"\ninit = "KMeans"\n'),
                 ["inducing.init: expected an inducing table", "or an (M, D) array"],
                 id="optimized-init-string"),
    pytest.param(edited("variance = 1.0\n", 'variance = {fixed = 1.0, prior = "Gamma"}\n'),
                 ["kernel.variance: {fixed = ...}: unknown keys ['prior']"], id="fixed-unknown-key"),
    # Used to raise KeyError: 'initial'.
    pytest.param(edited("variance = 1.0\n", 'variance = {prior = "scipy", description = "scipy.stats.gamma"}\n'),
                 ["kernel.variance: {prior = 'scipy'}: missing 'initial'"], id="scipy-without-initial"),
    pytest.param(edited("variance = 1.0\n", 'variance = {prior = "Gamma", shape = 2.0}\n'),
                 ["kernel.variance: {prior = 'Gamma'}: missing 'rate'"], id="gamma-missing-rate"),
    pytest.param(edited("variance = 1.0\n", 'variance = {prior = "LogNormal", mu = 0.0, sigma = 1.0, shape = 2.0}\n'),
                 ["kernel.variance: {prior = 'LogNormal'}: unknown keys ['shape']"], id="lognormal-unknown-key"),
    pytest.param(edited("variance = 1.0\n", 'variance = {prior = "Gamma", shape = -2.0, rate = 1.0}\n'),
                 ["kernel.variance: Gamma: shape must be"], id="gamma-bad-shape"),
    pytest.param(edited("variance = 1.0\n", 'variance = {prior = "Cauchy"}\n'),
                 ["kernel.variance: unknown prior 'Cauchy'"], id="unknown-prior"),
    pytest.param(edited('[kernel]\ntype = "SquaredExponential"', '[kernel]\ntype = ["SquaredExponential"]'),
                 ["kernel: unknown type ['SquaredExponential']"], id="type-not-a-string"),
    pytest.param(edited('[likelihood]\ntype = "Gaussian"\n', '[likelihood]\ntype = "Gaussian"\nnoise = 0.1\n'),
                 ["likelihood (Gaussian): unknown keys ['noise']"], id="likelihood-unknown-key"),
    pytest.param(edited("m = 10\n", ""), ["inducing (Subsample): missing 'm'"], id="subsample-without-m"),
    # Used to raise AttributeError: 'str' object has no attribute 'get'.
    pytest.param('data = "sine.csv"\n' + MODEL_TOML.split("[data]")[0],
                 ["[data] must be a table", "data = 'sine.csv'"], id="data-a-string"),
    pytest.param("fit = 3\n" + MODEL_TOML.split("[fit]")[0], ["[fit] must be a table"], id="fit-a-number"),
])
def test_malformed_spec(tmp_path, capsys, text, fragments):
    write_sine_csv(tmp_path / "sine.csv")
    path = write_model(tmp_path, text)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys, str(path), *fragments)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("spec, message", [
    ({"type": "Sum", "kernels": [{"type": "Matern32"}, {"type": "Matern52"}], "bias": 1.0},
     r"kernel \(Sum\): unknown keys \['bias'\]"),
    ({"type": "Product", "kernels": [{"type": "Matern32"}]}, "at least two kernel tables"),
    ({"type": "SquaredExponential", "variance": {"fixed": 1.0, "initial": 2.0}},
     r"kernel.variance: \{fixed = ...\}: unknown keys \['initial'\]"),
    ({"type": "SquaredExponential", "variance": {"fixed": {"prior": "Gamma", "shape": 1.0, "rate": 1.0}}},
     "kernel.variance: Fixed: value must be a number or an array"),
], ids=["sum-unknown-key", "product-of-one", "fixed-unknown-key", "fixed-prior"])
def test_malformed_kernel_dict(spec, message):
    """The same checks apply to Model.from_dict, as ValueError."""
    with pytest.raises(ValueError, match=message):
        gd.Model.from_dict({"kernel": spec, "likelihood": {"type": "Gaussian"}})


def test_well_formed_forms_still_read():
    """The forms to_dict writes, the scipy one included, read back unchanged."""
    from scipy import stats

    kernel = (gd.kernels.SquaredExponential(variance=gd.Fixed(2.0))
              + gd.kernels.Matern32(lengthscale=stats.gamma(2.0, scale=0.5)))
    model = gd.Model(kernel, gd.likelihoods.Gaussian(gd.priors.LogNormal(0.0, 1.0, initial=0.2)),
                     gd.inducing.Optimized(gd.inducing.KMeans(5, seed=1)), gd.inference.VFE())
    spec = model.to_dict()
    assert spec["kernel"]["kernels"][1]["lengthscale"]["prior"] == "scipy"
    again = gd.Model.from_dict(spec)
    assert again.kernel.kernels[0] == model.kernel.kernels[0]
    assert again.kernel.kernels[1] == model.kernel.kernels[1]      # the scipy prior itself, no longer its median
    assert (again.likelihood, again.inducing, again.inference) == (model.likelihood, model.inducing,
                                                                   model.inference)
