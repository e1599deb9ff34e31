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
``io.layout``) and the model-file codec ``io.spec``; then ``posterior`` (which imports no module
above it: what it needs of the model it gets as objects, ``posterior.model``), ``fitting``,
``model``; at the top ``io.netcdf`` (load, which builds a Model and a Posterior), ``io.arviz``,
``plotting``, ``cli`` and the package face ``gpdsl/__init__``.
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
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    edges = {}

    def add(target, line):
        if target is not None and target != name:
            edges.setdefault(target, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_known_prefix(alias.name, modules), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not (source == "gpdsl" or source.startswith("gpdsl.")):
                continue
            for alias in node.names:
                target = f"{source}.{alias.name}"
                add(target if target in modules else _known_prefix(source, modules), node.lineno)
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
    above = {"gpdsl", "gpdsl.model", "gpdsl.fitting", "gpdsl.io.netcdf", "gpdsl.io.arviz",
             "gpdsl.cli", "gpdsl.plotting"}
    assert not above & set(graph["gpdsl.posterior"]), sorted(above & set(graph["gpdsl.posterior"]))
