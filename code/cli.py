"""The installed `notes-mcp` command: `notes-mcp --stdio | --http ...` (serve.py's flags) or `notes-mcp demo`.

`python -m notes_mcp` runs the same command (code/__main__.py).

`pip install .` puts the files of code/ into ONE package, `notes_mcp` (pyproject.toml maps
it with setuptools' package-dir), so no generic top-level name (main, config, serve) lands
in site-packages. The modules still import each other as flat top-level modules
(`import main`), exactly as `python3 code/serve.py` runs them from a checkout; so this
entry point puts the package's own folder first on sys.path, for this process only, and
then imports them. Converting every import to `from notes_mcp import ...` was the other
choice: it would make `python3 code/main.py` need the package installed, or a second
import spelling in every module. Standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["run"]

PROG = "notes-mcp"
DEMO = "demo"


def flat_imports() -> None:
    """Make `import main`, `import serve`, ... find this package's modules (first on the path: nothing shadows them)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)


def run(argv: Sequence[str] | None = None) -> int:
    """`notes-mcp demo` runs the scripted demo; anything else is serve.py's command line."""
    args = list(sys.argv[1:] if argv is None else argv)
    flat_imports()
    # serve.py first, for every command: its first statement refuses a Python older than
    # the package needs in one line, before any other module is imported.
    import serve

    if args[:1] == [DEMO]:
        import main

        return main.main(args[1:])
    return serve.serve(args, prog=PROG)


if __name__ == "__main__":
    sys.exit(run())
