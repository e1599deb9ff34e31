"""``python -m gpdsl``: the gpdsl command line (see :mod:`gpdsl.cli`)."""
from .cli import main

raise SystemExit(main())
