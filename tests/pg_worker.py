"""A server process over a shared PostgreSQL database, driven by tests/test_postgres_store.py.

Usage: python3 tests/pg_worker.py URL   (prints "ready" once the store is open)

The protocol of tests/sqlite_worker.py: a JSON command line is acknowledged with "armed",
then the worker waits for "go" (the race barrier), runs it and prints one line:
  {"op": "consume", "principal": ..., "nonce": ..., "expires_at": ..., "target": [id, version] | null,
   "pause": "claimed" | "deleted" | null}                   -> {"settlement": "deleted" | ...}
With "pause", the store's test-only hook prints "inside <stage>" and waits there until
the test kills the process.
"""

from __future__ import annotations

import json
import os
import sys
import time

import support  # puts code/ on sys.path

import main
import postgres_store


def main_loop(url: str) -> None:
    """Serve commands until stdin closes."""
    store = postgres_store.open_store(url, clock=time.time)
    workspace = main.parse_file_uri(support.WORKSPACE)
    say("ready")
    while line := sys.stdin.readline():
        command = json.loads(line)
        say("armed")
        if sys.stdin.readline().strip() != "go":
            return
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
