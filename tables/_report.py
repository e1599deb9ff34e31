"""Shared by the table scripts: where ../shared is, and what they do with their finished markdown."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def resolve_shared(arg):
    """The shared directory (data/, oracles/): ``arg``, else $GPDSL_SHARED, else ../shared beside the repository."""
    if arg:
        return Path(arg)
    if os.environ.get("GPDSL_SHARED"):
        return Path(os.environ["GPDSL_SHARED"])
    return REPO.parent / "shared"


def emit(text, out):
    """Print the markdown, and write it to ``out`` unless it is '-'."""
    print()
    print(text)
    if out != "-":
        Path(out).write_text(text)
        print(f"wrote {out}")
