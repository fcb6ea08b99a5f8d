"""`python -m notes_mcp`: the installed `notes-mcp` command, run by module name (code/cli.py).

Only the installed package has this name; a checkout runs `python3 code/serve.py`.
"""

from __future__ import annotations

import sys

from .cli import run  # type: ignore[import-not-found]  # code/ is the package notes_mcp once installed only

__all__ = ()  # nothing to import: this module is run (python -m notes_mcp), never imported

if __name__ == "__main__":
    sys.exit(run())
