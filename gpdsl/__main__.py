"""``python -m gpdsl``: the gpdsl command line (see :mod:`gpdsl.cli`).

Prefer the ``gpdsl`` script, or ``python -P -m gpdsl`` (Python 3.11+): ``python -m`` puts the
working folder first on the import path, where a run's data (and a file named like a module:
``scipy.py``, a model's ``"module:Class"``) may lie, and Python imports the package ``gpdsl``, with
numpy, scipy and numba, before this module runs, so a ``scipy.py`` in the working folder is imported
(its code runs) before anything here can prevent it.  The ``gpdsl`` script and ``-P`` never put the
folder on the path.  What this module can do it does: it takes the folder off before the command
runs, so that the modules the command imports later (xarray, matplotlib, a ``--trust`` module)
come from the same places as for the script.
"""
import os
import sys

if not sys.flags.safe_path and sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from .cli import main  # noqa: E402

raise SystemExit(main())
