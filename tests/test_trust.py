"""Reading a file runs no code (issue 45, finding 1).

A model file, a ``Model.from_dict`` dict, a posterior through ``gd.load`` / ``gd.from_xarray`` and
``gpdsl run`` (in process and as ``python -m gpdsl run`` from the folder that holds the module)
name a component as ``"module:QualName"``.  A reader resolves only classes registered in the
running process: a module it would have to import is refused with ``gd.UntrustedTypeError``
unless the caller trusts it (``trust=[module]``, ``--trust MODULE``).  The module used here
writes a marker file when it is imported, so a test sees whether any reader ran it.
"""
import functools
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

import gpdsl as gd
from gpdsl import cli

MODULE_SOURCE = """\
import pathlib
from dataclasses import dataclass

import gpdsl as gd

pathlib.Path(__file__).with_name("marker").write_text("imported")


@dataclass(frozen=True, eq=False)
class MarkedSquaredExponential(gd.kernels.SquaredExponential):
    \"\"\"The squared exponential, defined in a module that leaves a marker when imported.\"\"\"
"""

FAMILIES = (gd.kernels.Kernel, gd.likelihoods.Likelihood, gd.means.Mean, gd.inference.Inference,
            gd.inducing.InducingSpec)

rng = np.random.default_rng(0)
X = rng.uniform(-2.0, 2.0, size=(20, 1))
y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(20)


@pytest.fixture
def marked(tmp_path, monkeypatch):
    """(module name, marker path): a module on sys.path, not imported, that writes the marker on import.

    The name is new to each test, and every registry and sys.modules are put back afterwards, so
    that no test (nor the conformance suite) sees the class another one imported."""
    name = f"gpdsl_marked_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{name}.py").write_text(MODULE_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    registries = [(family.registry, dict(family.registry)) for family in FAMILIES]
    yield name, tmp_path / "marker"
    for registry, before in registries:
        registry.clear()
        registry.update(before)
    sys.modules.pop(name, None)


def forget(name, marker):
    """Undo an import of the marked module: what a fresh process that never imported it sees."""
    for family in FAMILIES:
        for key in [k for k, cls in family.registry.items() if cls.__module__ == name]:
            del family.registry[key]
    sys.modules.pop(name, None)
    marker.unlink()


def spec_naming(name):
    return {"kernel": {"type": f"{name}:MarkedSquaredExponential", "lengthscale": 1.0, "variance": 1.0},
            "likelihood": {"type": "Gaussian", "variance": 0.1}}


def assert_refused(err, name):
    """The message names the type and both ways to trust it."""
    message = str(err.value)
    assert f"{name}:MarkedSquaredExponential" in message
    assert f"import {name}" in message and "trust=" in message and "--trust" in message


def test_untrusted_type_error_is_a_value_error():
    assert issubclass(gd.UntrustedTypeError, ValueError)


def test_from_dict(marked):
    name, marker = marked
    with pytest.raises(gd.UntrustedTypeError) as err:
        gd.Model.from_dict(spec_naming(name))
    assert not marker.exists()
    assert_refused(err, name)
    model = gd.Model.from_dict(spec_naming(name), trust=[name])
    assert marker.exists()
    assert type(model.kernel).__module__ == name


def test_from_dict_nested_component(marked):
    """A type inside a composite kernel's table goes through the same check."""
    name, marker = marked
    spec = spec_naming(name)
    spec["kernel"] = {"type": "Sum", "kernels": [{"type": "Matern32"}, spec["kernel"]]}
    with pytest.raises(gd.UntrustedTypeError):
        gd.Model.from_dict(spec)
    assert not marker.exists()
    assert type(gd.Model.from_dict(spec, trust=name).kernel.kernels[1]).__module__ == name


def test_registered_class_needs_no_trust(marked):
    """Importing the module yourself is the other way to trust it."""
    name, marker = marked
    __import__(name)
    marker.unlink()
    model = gd.Model.from_dict(spec_naming(name))
    assert type(model.kernel).__module__ == name
    assert not marker.exists()


def test_other_trusted_modules_do_not_cover_it(marked):
    name, marker = marked
    with pytest.raises(gd.UntrustedTypeError):
        gd.Model.from_dict(spec_naming(name), trust=["json", name + "_other", name.rsplit("_", 1)[0]])
    assert not marker.exists()


@pytest.mark.parametrize("trust,error", [(3, TypeError), ([None], TypeError), (["not a module"], ValueError),
                                         ([""], ValueError), ([".relative"], ValueError)])
def test_trust_argument_checked(trust, error):
    with pytest.raises(error, match="trust"):
        gd.Model.from_dict({"kernel": {"type": "Matern32"}, "likelihood": {"type": "Gaussian"}}, trust=trust)


def test_from_toml(marked, tmp_path):
    name, marker = marked
    path = tmp_path / "model.toml"
    path.write_text(f'[kernel]\ntype = "{name}:MarkedSquaredExponential"\n\n[likelihood]\ntype = "Gaussian"\n')
    with pytest.raises(gd.UntrustedTypeError) as err:
        gd.Model.from_toml(path)
    assert not marker.exists()
    assert_refused(err, name)
    assert type(gd.Model.from_toml(path, trust=[name]).kernel).__module__ == name
    assert marker.exists()


def saved_posterior(name, marker, tmp_path):
    """A posterior of the marked kernel written by a process that imported its module, as
    (file, dataset), read back by one that did not."""
    module = __import__(name)
    model = gd.Model(module.MarkedSquaredExponential(1.0, 1.0), gd.likelihoods.Gaussian(0.1))
    posterior = model.fit(X, y, max_iter=50)
    path = tmp_path / "posterior.nc"
    posterior.save(path)
    dataset = posterior.to_xarray()
    forget(name, marker)
    return path, dataset, posterior


@pytest.mark.parametrize("reader", ["load", "from_xarray"])
def test_posterior_readers(marked, tmp_path, reader):
    name, marker = marked
    path, dataset, posterior = saved_posterior(name, marker, tmp_path)
    read = functools.partial(gd.load, path) if reader == "load" else functools.partial(gd.from_xarray, dataset)
    with pytest.raises(gd.UntrustedTypeError) as err:
        read()
    assert not marker.exists()
    assert_refused(err, name)
    assert f"{path if reader == 'load' else 'dataset'}: attribute 'model_spec'" in str(err.value)
    back = read(trust=[name])
    assert marker.exists()
    np.testing.assert_array_equal(back.predict(X)["f_mean"].values, posterior.predict(X)["f_mean"].values)


def test_load_refuses_a_standard_library_module(tmp_path):
    """The issue's case: a file edited to name ``antigravity`` (which opens a browser on import)
    with its checksum recomputed -- the checksum is no defence against an edit."""
    import json

    from gpdsl.io.layout import checksum

    posterior = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Gaussian(0.1)).fit(X, y, max_iter=50)
    ds = posterior.to_xarray()
    spec = json.loads(ds.attrs["model_spec"])
    spec["kernel"]["type"] = "antigravity:SquaredExponential"
    ds.attrs["model_spec"] = json.dumps(spec)
    ds.attrs["checksum"] = checksum(ds)
    ds.to_netcdf(tmp_path / "edited.nc", engine="scipy")
    assert "antigravity" not in sys.modules
    with pytest.raises(gd.UntrustedTypeError, match="antigravity"):
        gd.load(tmp_path / "edited.nc")
    with pytest.raises(gd.UntrustedTypeError, match="antigravity"):
        gd.from_xarray(ds)
    assert "antigravity" not in sys.modules


CLI_MODEL = """\
[kernel]
type = "{name}:MarkedSquaredExponential"
lengthscale = 1.0
variance = 1.0

[likelihood]
type = "Gaussian"
variance = 0.1

[data]
path = "data.csv"
target = "y"

[fit]
max_iter = 50
"""


def write_cli_problem(folder, name):
    with open(folder / "data.csv", "w") as fh:
        fh.write("x,y\n" + "".join(f"{a:.17g},{b:.17g}\n" for a, b in zip(X[:, 0], y)))
    (folder / "model.toml").write_text(CLI_MODEL.format(name=name))
    return folder / "model.toml"


def test_cli_run(marked, tmp_path, capsys):
    name, marker = marked
    model = write_cli_problem(tmp_path, name)
    assert cli.main(["run", str(model), "--out", str(tmp_path / "out")]) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert err.startswith("gpdsl: error: ") and f"{name}:MarkedSquaredExponential" in err and "--trust" in err
    assert not (tmp_path / "out").exists()
    assert cli.main(["run", str(model), "--out", str(tmp_path / "out"), "--trust", name, "--trust", "json"]) == 0
    assert marker.exists()
    assert (tmp_path / "out" / "posterior.nc").is_file()


def test_python_m_gpdsl_does_not_import_from_the_working_folder(marked, tmp_path):
    """``python -m gpdsl`` puts the working folder first on sys.path; the CLI takes it off, so a
    module beside the data is neither imported by the reader nor found when trusted: it is
    trusted from PYTHONPATH, as with the ``gpdsl`` script."""
    name, marker = marked
    write_cli_problem(tmp_path, name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    command = [sys.executable, "-m", "gpdsl", "run", "model.toml", "--out", "out"]
    refused = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2, refused.stderr
    assert not marker.exists()
    assert "UntrustedTypeError" not in refused.stderr and f"{name}:MarkedSquaredExponential" in refused.stderr
    not_on_path = subprocess.run(command + ["--trust", name], cwd=tmp_path, env=env, capture_output=True, text=True,
                                 timeout=300)
    assert not_on_path.returncode == 2, not_on_path.stderr
    assert "cannot be imported" in not_on_path.stderr
    assert not marker.exists()
    trusted = subprocess.run(command + ["--trust", name], cwd=tmp_path, env={**env, "PYTHONPATH": str(tmp_path)},
                             capture_output=True, text=True, timeout=300)
    assert trusted.returncode == 0, trusted.stderr
    assert marker.exists()
