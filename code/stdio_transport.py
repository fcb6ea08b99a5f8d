"""stdio for the core: one JSON-RPC message per line on stdin, one response per line on stdout.

Thin by design: each line goes to `main.Server.handle_bytes()` (or, when the legacy
adapter is on, through `code/legacy.py`, which hands modern lines to the core unchanged).
Nothing but protocol messages may reach stdout; logs go to stderr. Standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import BinaryIO

import main

# A line may end in LF or CRLF; both are framing, not content, so the size limit counts
# neither: the content, its line ending, or one byte too many.
LINE_LIMIT = main.MAX_MESSAGE_BYTES + 2


def serve_stdio(server: main.Server, principal: str, legacy: bool = True) -> int:
    """Answer one JSON-RPC message per stdin line on stdout until EOF; returns the exit status."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # Only protocol messages may reach stdout: a stray print() anywhere now goes to stderr.
    sys.stdout = sys.stderr

    def write(line: bytes) -> None:
        try:
            stdout.write(line)
            stdout.flush()
        except BrokenPipeError:
            # The client is gone. Point fd 1 at /dev/null so the exit-time flush is quiet.
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
            raise

    if legacy:
        # Imported only when on: `--no-legacy` takes the adapter out of the stdio path.
        import legacy as legacy_adapter

        session = legacy_adapter.LegacyStdioSession(server, principal, write, server.log)
        return run_lines(stdin, session.feed, session.close)

    def feed(line: bytes) -> None:
        reply = server.handle_bytes(line, principal)
        if reply is not None:
            write(reply + b"\n")

    return run_lines(stdin, feed, lambda: None)


def run_lines(stdin: BinaryIO, feed: Callable[[bytes], None], close: Callable[[], None]) -> int:
    """Feed each line (without its LF or CRLF) to `feed` until EOF; overlong lines are cut short."""
    try:
        while True:
            line = stdin.readline(LINE_LIMIT)
            if not line:
                return 0
            if not line.endswith(b"\n") and len(line) == LINE_LIMIT:
                # An endless line would make us buffer without bound: keep only the first
                # LINE_LIMIT bytes (enough for the core to refuse by size) and skip the rest.
                while (rest := stdin.readline(LINE_LIMIT)) and not rest.endswith(b"\n"):
                    pass
            else:
                line = line.removesuffix(b"\n").removesuffix(b"\r")
            if not line.strip():
                continue
            try:
                feed(line)
            except BrokenPipeError:
                return 0
    finally:
        close()
