"""``python -m gpdsl``: the gpdsl command line (see :mod:`gpdsl.cli`).

``python -m`` puts the working folder first on the import path, where a run's data (and a file
named like a module: ``pandas.py``, a model's ``"module:Class"``) may lie; the ``gpdsl`` script
does not.  It is taken off before the command runs, so that the modules the command imports later
(xarray, matplotlib, a ``--trust`` module) come from the same places for both.
"""
import os
import sys

if not sys.flags.safe_path and sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from .cli import main  # noqa: E402

raise SystemExit(main())
