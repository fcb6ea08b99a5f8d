"""The operator's commands (`serve.py audit ...`) run inside the test process, exactly as the command line runs them.

`serve.py`'s entry point is `sys.exit(serve.serve(argv))`: run() calls that same function
under the environment a child would get, with stdout and stderr captured, and returns what
`subprocess.run(..., capture_output=True, text=True)` would. A test whose point is the
process itself (its exit status as the shell sees it, the interpreter's start) runs the
real command; the others read the audit or try one more filter this way, without a new
interpreter per call.
"""

from __future__ import annotations

import io
import os
import subprocess
from collections.abc import Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from unittest import mock

from helpers import support  # puts code/ on sys.path

import serve

__all__ = ["run"]


def run(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """`serve.py ARGV` in this process with `env` as its whole environment: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), redirect_stdout(out), redirect_stderr(err):
        status = serve.serve(list(argv))
    return subprocess.CompletedProcess([support.python()[0], "serve.py", *argv], status, out.getvalue(), err.getvalue())
