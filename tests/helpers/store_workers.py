"""Store worker processes for the cross-process tests: both sides, the test's and the worker's.

The test side: Worker(case, target) starts `python3 -m helpers.store_workers TARGET` (a
SQLite file path, or a postgresql:// URL), which opens one store, prints "ready", and
then runs one JSON command per stdin line; its lines come back through a reader thread.
Commands are armed first and released together with "go", so two processes race one
confirmation for real:
  {"op": "handle", "message": {...}, "principal": "alice"}  -> the JSON-RPC response
  {"op": "consume", "principal": ..., "nonce": ..., "expires_at": ..., "target": [id, version] | null,
   "pause": "claimed" | "deleted" | null}                   -> {"settlement": "deleted" | ...}
  {"op": "put", "note": [id, title, uri, revision]}         -> put
Closing its stdin (finish) makes the worker close its store and exit 0.
With "pause", the store's test-only hook prints "inside <stage>" at that point of the
transaction and waits there until the test kills the process.

The worker side: main_loop(target), run when this module is the program.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from collections.abc import Callable
from typing import Any

from helpers import support  # puts code/ on sys.path

import frame
import main

GUARD_SECONDS = 60.0  # failure guard for a worker that hangs; never the assertion itself
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder `helpers` is imported from


class Worker:
    """One worker process (this module's main_loop) serving a store over `target` (a database path or URL)."""

    def __init__(self, case: unittest.TestCase, target: str) -> None:
        self.case = case
        self.stderr = tempfile.TemporaryFile()
        case.addCleanup(self.stderr.close)
        self.process = subprocess.Popen(
            [*support.python(site=target.startswith("postgres")), "-m", "helpers.store_workers", target],  # psycopg
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            cwd=TESTS,
        )
        case.addCleanup(self.stop)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.expect("ready")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next_line(self) -> str:
        """The worker's next output line; the test fails (showing its stderr) if there is none."""
        try:
            line = self.lines.get(timeout=GUARD_SECONDS)
        except queue.Empty:
            line = None
        if line is None:
            self.stderr.seek(0)
            self.case.fail(
                "worker produced no line; its stderr:\n" + self.stderr.read()[-4000:].decode(errors="replace")
            )
        return line

    def expect(self, wanted: str) -> None:
        """The next line must be exactly `wanted`."""
        self.case.assertEqual(self.next_line(), wanted)

    def send(self, line: str) -> None:
        """One line to the worker's stdin."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def arm(self, command: dict[str, Any]) -> None:
        """Hand the worker a command; it runs on "go"."""
        self.send(json.dumps(command))
        self.expect("armed")

    def finish(self) -> None:
        """Close its stdin: the worker closes its store and exits; the test fails unless with status 0."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.case.assertEqual(self.process.wait(GUARD_SECONDS), 0)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(GUARD_SECONDS)

    def stop(self) -> None:
        """Kill if still running, close the pipes, join the reader."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(GUARD_SECONDS)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self.reader.join(GUARD_SECONDS)


def go(*workers: Worker) -> list[str]:
    """Release every armed worker together (they all block on one stdin line), collect one line each."""
    for worker in workers:
        worker.send("go")
    return [worker.next_line() for worker in workers]


def together(count: int, call: Callable[[int], Any]) -> list[Any]:
    """Run `call(index)` in `count` threads released at once; what each returned (or raised), in finishing order."""
    barrier = threading.Barrier(count)
    results: list[Any] = []

    def start(index: int) -> None:
        barrier.wait(GUARD_SECONDS)
        try:
            results.append(call(index))
        except BaseException as exc:  # noqa: BLE001 - the caller asserts on it
            results.append(exc)

    threads = [threading.Thread(target=start, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(GUARD_SECONDS)
    return results


def open_together(case: unittest.TestCase, open_one: Callable[[], Any], count: int = 2) -> list[Any]:
    """Call `open_one()` from `count` threads released at once; each store (or the exception) it gave, closed at
    cleanup."""
    opened = together(count, lambda _: open_one())
    for store in opened:
        if not isinstance(store, BaseException):
            case.addCleanup(store.close)
    return opened


class OptionalCluster:
    """One throwaway PostgreSQL cluster for a test module, or why there is none: only PostgreSQL classes skip."""

    def __init__(self) -> None:
        self.cluster: Any = None
        self.missing: str | None = None

    def start(self) -> None:
        """setUpModule: start the cluster, or remember why it cannot start."""
        import postgres_cluster

        try:
            self.cluster = postgres_cluster.start_or_skip()
        except unittest.SkipTest as exc:
            self.missing = str(exc)

    def stop(self) -> None:
        """tearDownModule: destroy the cluster if one was started."""
        if self.cluster is not None:
            self.cluster.destroy()

    def require(self) -> Any:
        """The cluster, or SkipTest naming why there is none (for setUpClass)."""
        if self.cluster is None:
            raise unittest.SkipTest(self.missing or "PostgreSQL cluster not started")
        return self.cluster


# =====================================================================================
# The worker side: a server process over a shared database
# =====================================================================================


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
        if command["op"] == "put":
            store.put(main.Note(*command["note"]))
            say("put")
            continue
        pause = command.get("pause")

        def hook(stage: str, pause: str | None = pause) -> None:  # this command's pause, bound now
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
