"""What every table script does with its finished markdown: print it, and write it unless ``out`` is '-'."""
from pathlib import Path


def emit(text, out):
    print()
    print(text)
    if out != "-":
        Path(out).write_text(text)
        print(f"wrote {out}")
