"""gpdsl's modules import one another without a cycle, and its Numba kernels import nothing of gpdsl.

The graph is read from the source with :mod:`ast`, not from ``sys.modules``: every ``import`` and
``from ... import`` statement counts, at module level and inside functions and methods alike (an
import deferred into a function still makes the two modules depend on each other; it only hides
the cycle from the interpreter until the function runs).  Relative imports are resolved against
the importing module's package; ``from package import name`` is an edge to the submodule
``package.name`` where there is one, else to ``package`` itself.

The rule the layout follows (from the bottom up): the helpers (``checks``, ``backends``,
``chunks``, ``linalg``, ``threads``, ``parameters``, ``priors``, ``components``), the numerical
kernels (``_jit``, importing nothing of gpdsl), the components (``kernels``, ``likelihoods``,
``inducing``, ``methods``, ``inference``), ``inputs``, the file helpers (``io.files``,
``io.layout``), ``io.arviz`` (which takes a posterior as an object) and the model-file codec
``io.spec`` (which reads and writes the parts, not the Model); then ``posterior`` (which imports
no module above it: what it needs of the model it gets as the object ``posterior.model``, e.g.
``posterior.model.to_dict()``), ``fitting`` (which reads the model as an object too), ``model``;
at the top ``io.netcdf`` (load, which builds a Model and a Posterior), ``plotting``, ``cli`` and
the package face ``gpdsl/__init__``.  ``gpdsl/io/__init__`` imports none of its modules, so that
importing one does not import the others.
"""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gpdsl"


def module_files():
    """Every module of the package by dotted name.

    Returns
    -------
    dict of str to pathlib.Path
        ``"gpdsl.kernels.base" -> .../gpdsl/kernels/base.py``; a package is named by its
        ``__init__.py``.
    """
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _known_prefix(name, modules):
    """The longest dotted prefix of ``name`` that is a module of the package, or None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _sources(name, path):
    """``(line, dotted module)`` of every gpdsl module that module ``name`` imports from."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                yield node.lineno, ".".join(base + ([node.module] if node.module else [])), \
                    tuple(alias.name for alias in node.names)
            else:
                yield node.lineno, node.module or "", tuple(alias.name for alias in node.names)


def imports_of(name, path, modules):
    """The package's modules that module ``name`` imports anywhere in its source.

    Parameters
    ----------
    name : str
        The importing module's dotted name.
    path : pathlib.Path
        Its source file.
    modules : collection of str
        Every module of the package.

    Returns
    -------
    dict of str to int
        Imported module -> the line of its first import statement.
    """
    edges = {}
    for line, source, names in _sources(name, path):
        if not (source == "gpdsl" or source.startswith("gpdsl.")):
            continue
        targets = [f"{source}.{n}" if f"{source}.{n}" in modules else _known_prefix(source, modules)
                   for n in names] or [_known_prefix(source, modules)]
        for target in targets:
            if target is not None and target != name:
                edges.setdefault(target, line)
    return edges


def import_graph():
    """The package's import graph.

    Returns
    -------
    dict of str to dict of str to int
        Module -> {imported module: line}.
    """
    modules = module_files()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycle(graph):
    """One cycle of ``graph`` as a list of modules (first repeated at the end), or None.

    Parameters
    ----------
    graph : dict of str to collection of str

    Returns
    -------
    list of str or None
    """
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for root in sorted(graph):
        if colour[root] != WHITE:
            continue
        stack = [(root, iter(sorted(graph[root])))]
        path = [root]
        colour[root] = GREY
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = BLACK
                stack.pop()
                path.pop()
            elif colour.get(child, BLACK) == GREY:
                return path[path.index(child):] + [child]
            elif colour.get(child, BLACK) == WHITE:
                colour[child] = GREY
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
    return None


def test_the_graph_is_read():
    """The reader finds the imports it must (a sanity check of the test itself)."""
    graph = import_graph()
    assert "gpdsl.model" in graph["gpdsl"]
    assert "gpdsl.components" in graph["gpdsl.kernels.base"]
    assert "gpdsl._jit.covariance" in graph["gpdsl.kernels.stationary"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def top_level_names(path):
    """The names a module binds at its top level (definitions, assignments, imports), also inside
    top-level ``if``/``try`` blocks.

    Parameters
    ----------
    path : pathlib.Path

    Returns
    -------
    set of str
    """
    names = set()
    statements = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while statements:
        node = statements.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            statements.extend(node.body + getattr(node, "orelse", []) + getattr(node, "finalbody", [])
                              + [s for h in getattr(node, "handlers", []) for s in h.body])
    return names


def test_every_import_names_a_module_or_a_name_in_one():
    """Every import of gpdsl names a module that exists, or a name that module binds (a moved
    function or module leaves no stale import, even in a function that no test runs)."""
    modules = module_files()
    stale = []
    for name, path in modules.items():
        for line, source, imported in _sources(name, path):
            if not (source == "gpdsl" or source.startswith("gpdsl.")):
                continue
            if source not in modules:
                stale.append(f"{name} line {line}: no module {source}")
                continue
            bound = top_level_names(modules[source])
            stale += [f"{name} line {line}: {source} has no {n!r}" for n in imported
                      if n != "*" and f"{source}.{n}" not in modules and n not in bound]
    assert not stale, stale


def test_no_import_cycle():
    """No module reaches itself through imports, function-level ones included."""
    graph = import_graph()
    cycle = find_cycle(graph)
    if cycle is not None:
        steps = " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:]))
        raise AssertionError(f"import cycle: {steps} -> {cycle[-1]}")


def test_jit_kernels_import_nothing_of_gpdsl_outside_jit():
    """``gpdsl._jit`` is the bottom layer: its modules import each other and nothing else of gpdsl."""
    graph = import_graph()
    outside = {f"{name} -> {target} (line {line})" for name, edges in graph.items() if name.startswith("gpdsl._jit")
               for target, line in edges.items() if not (target == "gpdsl._jit" or target.startswith("gpdsl._jit."))}
    assert not outside, sorted(outside)


def test_posterior_imports_nothing_above_it():
    """``posterior`` is below the model, the fit loop and file IO: it gets the model as an object."""
    graph = import_graph()
    above = {"gpdsl", "gpdsl.model", "gpdsl.fitting", "gpdsl.io", "gpdsl.io.netcdf", "gpdsl.cli", "gpdsl.plotting"}
    assert not above & set(graph["gpdsl.posterior"]), sorted(above & set(graph["gpdsl.posterior"]))
    assert not set(graph["gpdsl.io"]), "gpdsl/io/__init__.py must import none of its modules"
    for low in ("gpdsl.io.spec", "gpdsl.io.arviz", "gpdsl.io.layout", "gpdsl.fitting"):
        assert "gpdsl.model" not in graph[low], f"{low} imports gpdsl.model"


# Modules that `import gpdsl` must leave unloaded (issue 46: the import within 0.7 CPU s): a fit,
# a plot, an export or a saved model file loads them when it needs them.  SciPy's integrate,
# interpolate and stats and scikit-learn are 0.1-0.3 s each; xarray (with pandas), arviz, dask and
# matplotlib more; scipy.optimize 0.05-0.1 s (imported where a fit runs its optimiser).
DEFERRED = ("scipy.integrate", "scipy.interpolate", "scipy.stats", "scipy.optimize", "sklearn", "xarray", "pandas",
            "arviz", "dask", "matplotlib")


def test_import_gpdsl_leaves_the_deferred_modules_unloaded():
    """A fresh interpreter's ``import gpdsl`` imports none of :data:`DEFERRED` (read from its
    ``sys.modules``), while the package's face still answers (``gd.Model``, ``gd.load``)."""
    import json
    import os
    import subprocess
    import sys

    code = ("import json, sys\n"
            "import gpdsl as gd\n"
            f"loaded = [m for m in {DEFERRED!r} if m in sys.modules]\n"
            "print(json.dumps([loaded, callable(gd.Model), callable(gd.load), 'numpy' in sys.modules]))")
    path = [str(PACKAGE.parent)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=PACKAGE.parent, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    loaded, *face = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded == [], f"import gpdsl loaded {loaded}"
    assert face == [True, True, True]
