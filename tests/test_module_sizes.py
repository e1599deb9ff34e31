"""No module of gpdsl is longer than MAX_LINES: a file past that holds more than one idea (the
fit loop inside the model declaration, file IO inside the posterior) and is split by idea."""
from pathlib import Path

MAX_LINES = 900
PACKAGE = Path(__file__).resolve().parent.parent / "gpdsl"


def test_no_module_is_over_the_limit():
    """Every ``gpdsl/**/*.py`` has at most MAX_LINES lines."""
    sizes = {str(path.relative_to(PACKAGE.parent)): len(path.read_text(encoding="utf-8").splitlines())
             for path in sorted(PACKAGE.rglob("*.py"))}
    over = {path: n for path, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split them by idea): {over}"
