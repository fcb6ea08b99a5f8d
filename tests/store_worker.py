"""A server process over a shared database, driven by the cross-process store tests.

Usage: python3 tests/store_worker.py TARGET   (a SQLite file path, or a postgresql:// URL;
prints "ready" once the store is open)

Commands arrive on stdin as JSON lines; each is acknowledged with "armed", then the
worker blocks until a line "go" arrives (the race barrier), runs it and prints one line:
  {"op": "handle", "message": {...}, "principal": "alice"}  -> the JSON-RPC response
  {"op": "consume", "principal": ..., "nonce": ..., "expires_at": ..., "target": [id, version] | null,
   "pause": "claimed" | "deleted" | null}                   -> {"settlement": "deleted" | ...}
With "pause", the store's test-only hook prints "inside <stage>" at that point of the
transaction and waits there until the test kills the process.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import support  # puts code/ on sys.path

import main
import frame


def open_store(target: str) -> Any:
    """The store the target names (PostgreSQL only when asked for: psycopg is optional)."""
    if target.startswith("postgresql://"):
        import postgres_store

        return postgres_store.open_store(target, clock=time.time)
    import sqlite_store

    return sqlite_store.open_store(target, clock=time.time)


def main_loop(target: str) -> None:
    """Serve commands until stdin closes."""
    store = open_store(target)
    server = frame.notes_server(
        keys=[support.KEY],
        notes=store,
        policy=main.AuthorizationPolicy({support.PRINCIPAL: [support.WORKSPACE]}),
        clock=time.time,
    )
    workspace = main.parse_file_uri(support.WORKSPACE)
    say("ready")
    try:
        serve(store, server, workspace)
    finally:
        store.close()


def serve(store: Any, server: frame.Server, workspace: main.Path) -> None:
    """Run commands from stdin until it closes."""
    while line := sys.stdin.readline():
        command = json.loads(line)
        say("armed")
        if sys.stdin.readline().strip() != "go":
            return
        if command["op"] == "handle":
            say(json.dumps(server.handle(command["message"], command["principal"])))
            continue
        pause = command.get("pause")

        def hook(stage: str) -> None:
            if stage == pause:
                say(f"inside {stage}")
                sys.stdin.readline()  # the test SIGKILLs us here
                os._exit(3)  # stdin closed instead: leave without ever reaching COMMIT

        store._inside_transaction_hook = hook
        target = tuple(command["target"]) if command["target"] is not None else None
        outcome = store.consume(
            command["principal"],
            command["nonce"],
            command["expires_at"],
            target,
            lambda note: main.inside_workspace(note, workspace),
        )
        say(json.dumps({"settlement": outcome.value}))


def say(line: str) -> None:
    """One line to the test, flushed at once."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main_loop(sys.argv[1])
