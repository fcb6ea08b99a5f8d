"""stdio for the core: one JSON-RPC message per line on stdin, one response per line on stdout.

Thin by design: each line is decoded once and goes to `frame.Server.handle()`; when the
legacy adapter is on, a client's first `initialize` starts `code/legacy.py`, which from
then on takes every line (and hands modern ones to the core unchanged).
Nothing but protocol messages may reach stdout; logs go to stderr. Standard library only.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

import frame
import main

__all__ = ["serve_stdio"]

# A line may end in LF or CRLF; both are framing, not content, so the size limit counts
# neither: the content, its line ending, or one byte too many.
LINE_LIMIT = frame.MAX_MESSAGE_BYTES + 2


def serve_stdio(server: frame.Server, principal: str, legacy: bool = True) -> int:
    """Answer one JSON-RPC message per stdin line on stdout until EOF; returns the exit status."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # Only protocol messages may reach stdout: a stray print() anywhere now goes to stderr.
    sys.stdout = sys.stderr

    gone = threading.Event()  # stdout broke once: the client is gone for good

    def write(line: bytes) -> None:
        if gone.is_set():
            raise BrokenPipeError("stdout is closed")
        try:
            stdout.write(line)
            stdout.flush()
        except BrokenPipeError:
            client_gone(gone, stdout.fileno())
            raise

    session: Any = None  # the legacy adapter's session, once a client sends `initialize`

    def feed(line: bytes) -> None:
        nonlocal session
        if gone.is_set():
            raise BrokenPipeError("stdout is closed")  # nothing more is executed for a gone client
        if session is not None:
            session.feed(line)
            return
        try:
            message = frame.decode_message(line)
        except main.McpError as exc:
            write(frame.encode_message(main.error_response(None, exc)) + b"\n")
            return
        if legacy and isinstance(message, dict) and message.get("method") == "initialize":
            # Imported and started only now: until a legacy client's `initialize`, the adapter
            # hands every line to the core unchanged, so a modern client never loads it.
            import legacy as legacy_adapter

            session = legacy_adapter.LegacyStdioSession(server, principal, write, server.log)
            session.feed_message(message)
            return
        reply = server.handle(message, principal)  # decoded once: handle_bytes() without the decoding
        if reply is not None:
            write(frame.encode_message(reply) + b"\n")

    return run_lines(stdin, feed, lambda: session.close() if session is not None else None)


def client_gone(gone: threading.Event, fd: int) -> None:
    """The first broken pipe on stdout: stop serving, so the process ends with status 0."""
    # A legacy call's worker can be the first to find stdout closed. Pointing fd 1 at
    # /dev/null alone kept the process executing requests (accepts included) for a client
    # that can no longer see a single answer. The reader loop ends on BrokenPipeError in
    # its own thread; from a worker, SIGTERM to the main thread interrupts its blocked
    # read, and serve.py turns SIGTERM into a clean exit 0 that closes the store.
    if gone.is_set():
        return
    gone.set()
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)  # the exit-time flush stays quiet
    if threading.current_thread() is not threading.main_thread():
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)


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
