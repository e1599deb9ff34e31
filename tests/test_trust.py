"""Reading a file runs no code (issue 45, finding 1).

A model file, a ``Model.from_dict`` dict, a posterior through ``gd.load`` / ``gd.from_xarray`` and
``gpdsl run`` (in process and as ``python -m gpdsl run`` from the folder that holds the module)
name a component as ``"module:QualName"``.  A reader resolves only classes registered in the
running process: a module it would have to import is refused with ``gd.UntrustedTypeError``
unless the caller trusts it (``trust=[module]``, ``--trust MODULE``).  The module used here
writes a marker file when it is imported, so a test sees whether any reader ran it.  A file nested
too deeply for Python's stack is refused by every reader with its named error, and the commands the
guide recommends (the ``gpdsl`` script, ``python -P -m gpdsl``) import nothing from the working folder.
"""
import functools
import json
import os
import subprocess
import sys
import sysconfig
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


def test_load_refuses_a_standard_library_module(tmp_path, monkeypatch):
    """The issue's case: a file edited to name ``antigravity`` (which opens a browser on import)
    with its checksum recomputed -- the checksum is no defence against an edit.  The browser's
    entry points are replaced by recorders first, so that a regression fails here without opening one."""
    import webbrowser

    from gpdsl.io.layout import checksum

    opened = []

    def recorder(entry):
        return lambda *args, **kwargs: opened.append((entry, args))
    for entry in ("open", "open_new", "open_new_tab"):
        monkeypatch.setattr(webbrowser, entry, recorder(entry))
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
    assert opened == []
    # The recorders see what importing antigravity does (so the check above can fail).
    __import__("antigravity")
    sys.modules.pop("antigravity")
    assert [entry for entry, _ in opened] == ["open"]


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


def nested_sums(levels):
    """A kernel table of ``levels`` Sums each holding the next (two levels of tables and lists per Sum)."""
    table = {"type": "Matern32"}
    for _ in range(levels):
        table = {"type": "Sum", "kernels": [table, {"type": "Matern32"}]}
    return table


def sum_depth(kernel, branch):
    """How many Sums hold one another, following each one's part ``branch``."""
    depth = 0
    while isinstance(kernel, gd.kernels.Sum):
        depth, kernel = depth + 1, kernel.kernels[branch]
    return depth


def nested_sums_toml(levels):
    """``nested_sums(levels)`` as a model file of [kernel] and [[kernel.kernels]] tables (no inline table)."""
    lines, key = [], "kernel"
    for _ in range(levels):
        lines += [f"[{key}]" if key == "kernel" else f"[[{key}]]", 'type = "Sum"', f'[[{key}.kernels]]',
                  'type = "Matern32"']
        key += ".kernels"
    lines += [f"[[{key}]]", 'type = "Matern32"', "[likelihood]", 'type = "Gaussian"']
    return "\n".join(lines) + "\n"


def nested_sums_inline_toml(levels):
    """``nested_sums(levels)`` as a model file whose kernel is one inline table."""
    inline = "{type = 'Matern32'}"
    for _ in range(levels):
        inline = f"{{type = 'Sum', kernels = [{inline}, {{type = 'Matern32'}}]}}"
    return f"kernel = {inline}\n[likelihood]\ntype = 'Gaussian'\n"


def test_a_model_nested_too_deeply_is_a_value_error():
    """Review of issue 45: 600 nested Sums raised a bare RecursionError.  The reader counts the
    levels of tables and lists without recursing, so any depth gets the same ValueError; the
    deepest model it takes (100 levels) is built."""
    likelihood = {"type": "Gaussian"}
    assert sum_depth(gd.Model.from_dict({"kernel": nested_sums(49), "likelihood": likelihood}).kernel, 0) == 49
    for levels in (50, 600, 20_000):
        with pytest.raises(ValueError, match=r"^kernel: nested too deeply: more than 100 levels"):
            gd.Model.from_dict({"kernel": nested_sums(levels), "likelihood": likelihood})
    lists = [1.0]
    for _ in range(100_000):
        lists = [lists]
    with pytest.raises(ValueError, match=r"^kernel: nested too deeply"):
        gd.Model.from_dict({"kernel": {"type": "Matern32", "lengthscale": lists}, "likelihood": likelihood})
    with pytest.raises(ValueError, match=r"^likelihood: nested too deeply"):
        gd.io.spec.component_from_dict("likelihood", {"type": "Gaussian", "variance": {"fixed": lists}})


def test_a_model_file_nested_too_deeply_is_a_value_error(tmp_path):
    """As tables ([[kernel.kernels]], read by tomllib without recursion: the reader's bound) and as
    inline tables (which tomllib reads recursively: its RecursionError becomes the ValueError)."""
    assert sum_depth(gd.Model.from_toml(nested_sums_toml(49)).kernel, 1) == 49
    with pytest.raises(ValueError, match=r"^kernel: nested too deeply"):
        gd.Model.from_toml(nested_sums_toml(400))
    path = tmp_path / "inline.toml"
    path.write_text(nested_sums_inline_toml(400))
    with pytest.raises(ValueError, match=r"inline.toml: not read: .* nested too deeply"):
        gd.Model.from_toml(path)


def deep_model_spec_posterior(model_spec):
    """A saved posterior's dataset with ``model_spec`` replaced and its checksum recomputed (anyone can)."""
    from gpdsl.io.layout import checksum

    ds = gd.Model(gd.kernels.SquaredExponential(1.0, 1.0), gd.likelihoods.Gaussian(0.1)).fit(X, y, max_iter=50).to_xarray()
    ds.attrs["model_spec"] = model_spec
    ds.attrs["checksum"] = checksum(ds)
    return ds


def nested_sums_json(levels):
    """The JSON text of a model whose kernel is ``nested_sums(levels)``, written out directly (the
    json module's writer recurses too, and stops before 600 levels)."""
    return ('{"kernel": ' + '{"type": "Sum", "kernels": [' * levels + '{"type": "Matern32"}'
            + ', {"type": "Matern32"}]}' * levels + ', "likelihood": {"type": "Gaussian"}}')


@pytest.mark.parametrize("model_spec, problem", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply to be read as JSON"),
    (nested_sums_json(600), "nested too deeply to be read as JSON"),
    (nested_sums_json(200), "does not describe a model: kernel: nested too deeply: more than 100 levels"),
], ids=["brackets-100000", "sums-600", "sums-200"])
def test_a_posterior_nested_too_deeply_is_a_posterior_file_error(tmp_path, model_spec, problem):
    """Review of issue 45: a model_spec of 100,000 nested '[' or 600 nested Sums (checksum
    recomputed) raised a bare RecursionError from the JSON reader or the model's."""
    assert json.loads(nested_sums_json(3)) == {"kernel": nested_sums(3), "likelihood": {"type": "Gaussian"}}
    ds = deep_model_spec_posterior(model_spec)
    ds.to_netcdf(tmp_path / "deep.nc", engine="scipy")
    for read, source in ((lambda: gd.load(tmp_path / "deep.nc"), "deep.nc"), (lambda: gd.from_xarray(ds), "dataset")):
        with pytest.raises(gd.PosteriorFileError, match=f"{source}: attribute 'model_spec': .*{problem}"):
            read()


@pytest.mark.parametrize("form", ["tables", "inline"])
def test_cli_run_a_model_file_nested_too_deeply(tmp_path, capsys, form):
    """Review of issue 45: ``gpdsl run`` on 400 nested Sums printed a RecursionError's traceback."""
    write_cli_problem(tmp_path, "unused")
    text = nested_sums_toml(400) if form == "tables" else nested_sums_inline_toml(400)
    (tmp_path / "model.toml").write_text(text + '[data]\npath = "data.csv"\ntarget = "y"\n')
    assert cli.main(["run", str(tmp_path / "model.toml"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpdsl: error: {tmp_path / 'model.toml'}: ") and "nested too deeply" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_cli_run_checks_trust_without_a_model_file(tmp_path, capsys):
    """Review of issue 45: ``--trust "bad name"`` was accepted silently where no model file is given."""
    model = write_cli_problem(tmp_path, "unused")
    errors = []
    for arguments in (["run"], ["run", str(model)]):
        assert cli.main(arguments + ["--out", str(tmp_path / "out"), "--trust", "json", "--trust", "bad name"]) == 2
        errors.append(capsys.readouterr().err)
    assert errors[0] == errors[1] == ("gpdsl: error: --trust: 'bad name' is not a module name (dotted identifiers, "
                                      "e.g. 'mypackage.kernels')\n")
    assert not (tmp_path / "out").exists()


def test_trust_given_as_an_iterator_covers_every_type(marked, tmp_path):
    """Review of issue 45: an iterator was consumed by the first type looked up, so a second one
    (in a Sum) was refused.  Each public reader reads ``trust`` once."""
    name, marker = marked
    spec = spec_naming(name)
    spec["kernel"] = {"type": "Sum", "kernels": [{"type": "Matern32"}, spec["kernel"]]}
    model = gd.Model.from_dict(spec, trust=iter([name]))
    assert type(model.kernel.kernels[1]).__module__ == name
    forget(name, marker)
    assert type(gd.io.spec.model_parts(spec, trust=iter([name]))["kernel"].kernels[1]).__module__ == name
    forget(name, marker)
    assert type(gd.io.spec.component_from_dict("kernel", spec["kernel"], trust=iter([name])).kernels[1]).__module__ == name
    forget(name, marker)
    text = (f'[kernel]\ntype = "Sum"\n[[kernel.kernels]]\ntype = "Matern32"\n[[kernel.kernels]]\n'
            f'type = "{name}:MarkedSquaredExponential"\n[likelihood]\ntype = "Gaussian"\n')
    assert type(gd.Model.from_toml(text, trust=(n for n in [name])).kernel.kernels[1]).__module__ == name
    assert marker.exists()


PACKAGE_INIT = MODULE_SOURCE.replace('"marker"', '"package_marker"').replace("MarkedSquaredExponential",
                                                                             "PackageSquaredExponential")


@pytest.fixture
def marked_package(marked, tmp_path):
    """(package name, package marker, module marker): a package on sys.path, not imported, whose
    ``__init__`` and whose submodules ``sub`` and ``other`` each define a kernel and leave a marker on import."""
    name, marker = marked
    package = tmp_path / f"{name}_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(PACKAGE_INIT)
    (package / "sub.py").write_text(MODULE_SOURCE)
    (package / "other.py").write_text(MODULE_SOURCE.replace('"marker"', '"other_marker"'))
    yield package.name, package / "package_marker", package / "marker"
    for module in (package.name, f"{package.name}.sub", f"{package.name}.other"):
        sys.modules.pop(module, None)


def test_trusting_a_submodule_runs_its_parent_package_and_trusts_no_other(marked_package):
    """What the guide says a trusted name covers: Python imports ``pkg`` (runs its ``__init__``)
    before ``pkg.sub``, and a class that defines is then registered; ``pkg`` is not trusted by
    name (a ``pkg:Class`` met before it was imported is refused), nor a sibling module."""
    package, package_marker, sub_marker = marked_package
    top, sub, other = (f"{package}:PackageSquaredExponential", f"{package}.sub:MarkedSquaredExponential",
                       f"{package}.other:MarkedSquaredExponential")

    def spec(*types):
        return {"kernel": {"type": "Sum", "kernels": [{"type": t} for t in types]}, "likelihood": {"type": "Gaussian"}}
    with pytest.raises(gd.UntrustedTypeError, match=f"module '{package}'"):
        gd.Model.from_dict(spec(top, sub), trust=f"{package}.sub")
    assert not package_marker.exists() and not sub_marker.exists()
    model = gd.Model.from_dict(spec(sub, top), trust=f"{package}.sub")
    assert package_marker.exists() and sub_marker.exists()
    assert [type(k).__module__ for k in model.kernel.kernels] == [f"{package}.sub", package]
    with pytest.raises(gd.UntrustedTypeError, match=f"module '{package}.other'"):
        gd.Model.from_dict(spec(other, sub), trust=f"{package}.sub")
    assert not (package_marker.parent / "other_marker").exists()


def console_commands():
    """The commands that start the command line without the working folder on the import path."""
    script = os.path.join(sysconfig.get_path("scripts"), "gpdsl")
    yield pytest.param([script], id="gpdsl-script",
                       marks=pytest.mark.skipif(not os.path.isfile(script), reason="the gpdsl script is not installed"))
    yield pytest.param([sys.executable, "-P", "-m", "gpdsl"], id="python-P-m",
                       marks=pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P is new in 3.11"))


@pytest.mark.parametrize("command", console_commands())
def test_the_recommended_commands_import_nothing_from_the_working_folder(tmp_path, command):
    """Review of issue 45: ``python -m gpdsl`` imports gpdsl's dependencies (numpy, scipy, numba)
    with the working folder first on the path, before gpdsl's code can take it off -- a ``scipy.py``
    there ran on ``--help``.  No code can prevent it, so the guide recommends the ``gpdsl`` script
    or ``python -P -m gpdsl``: neither imports it.  ``python -m gpdsl`` does (the marker works)."""
    (tmp_path / "scipy.py").write_text('import pathlib\npathlib.Path(__file__).with_name("marker").write_text("x")\n'
                                       'raise ImportError("not scipy")\n')
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    ran = subprocess.run(command + ["--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("usage: gpdsl")
    assert not (tmp_path / "marker").exists()
    subprocess.run([sys.executable, "-m", "gpdsl", "--help"], cwd=tmp_path, env=env, capture_output=True, timeout=300)
    assert (tmp_path / "marker").exists()
