"""Build the executed notebooks ``tutorials/<name>.ipynb`` from the jupytext scripts.

For each tutorial script (``tutorials/NN_*.py``, or the names given) this runs the two commands
of tutorials/README.md::

    jupytext --to ipynb tutorials/<name>.py
    jupyter nbconvert --to notebook --execute --inplace tutorials/<name>.ipynb

with the checkout first on ``PYTHONPATH`` (so the kernel imports this gpdsl, not an installed
one) and the size switches ``GPDSL_TUTORIAL_SMALL`` / ``GPDSL_TUTORIAL_N`` removed from the
environment, so the notebooks show the full-size run.  Usage, from the repository root::

    python tutorials/build_notebooks.py                      # every tutorial
    python tutorials/build_notebooks.py 05_counts_coal_mining  # one (with or without .py)
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

TUTORIALS = Path(__file__).resolve().parent
SIZE_SWITCHES = ("GPDSL_TUTORIAL_SMALL", "GPDSL_TUTORIAL_N", "GPDSL_TUTORIAL_BANANA", "GPDSL_TUTORIAL_KEEP")


def tutorial_scripts(names=()):
    """The tutorial scripts to build: all ``NN_*.py`` in tutorials/, or those named (stem or file name)."""
    scripts = sorted(TUTORIALS.glob("[0-9][0-9]_*.py"))
    if not names:
        return scripts
    by_stem = {path.stem: path for path in scripts}
    unknown = [name for name in names if Path(name).stem not in by_stem]
    if unknown:
        raise ValueError(f"build_notebooks: no tutorial named {unknown}; have {sorted(by_stem)}")
    return [by_stem[Path(name).stem] for name in names]


def build(script, timeout):
    """Convert ``script`` to a notebook beside it and execute that notebook in place."""
    env = {key: value for key, value in os.environ.items() if key not in SIZE_SWITCHES}
    paths = [str(TUTORIALS.parent)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    notebook = script.with_suffix(".ipynb")
    subprocess.run([sys.executable, "-m", "jupytext", "--to", "ipynb", str(script)], check=True, env=env)
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace",
                    f"--ExecutePreprocessor.timeout={timeout}", str(notebook)], check=True, env=env)
    return notebook


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="tutorials to build (default: all)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a cell may run (default 600)")
    args = parser.parse_args(argv)
    for script in tutorial_scripts(args.names):
        t0 = time.perf_counter()
        notebook = build(script, args.timeout)
        print(f"built {notebook.relative_to(TUTORIALS.parent)} in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
