"""TEST-ONLY: a simulated compromise, loaded into `serve.py` through the test's PYTHONPATH.

Production code carries no hook: Python imports `sitecustomize` from the first folder on
sys.path that has one, and only the sandbox tests put this folder there.

NOTES_MCP_TEST_PROBE (JSON: secret, outside, link, port) arms the probe: on SIGUSR1 it runs
in the main thread, and it runs once at the start of the HTTP engine's first worker
thread (before the worker takes its first request). Each attempt prints
`name=allowed` or `name=denied(ERRNO)` on one stderr line, `probe main: ...` or
`probe worker: ...`. NOTES_MCP_TEST_NO_LANDLOCK=1 makes the Landlock syscalls fail
with ENOSYS, as on a kernel built without it.
"""

import ctypes
import errno
import json
import os
import signal
import socket
import sys
import threading

LANDLOCK_SYSCALLS = (444, 445, 446)


def probe(where: str, spec: dict) -> None:
    results = []

    def attempt(name, action) -> None:
        try:
            action()
            results.append(f"{name}=allowed")
        except OSError as exc:
            results.append(f"{name}=denied({errno.errorcode.get(exc.errno, exc.errno)})")

    def read(path: str) -> None:
        with open(path, encoding="utf-8") as handle:
            handle.read()

    def write() -> None:
        with open(os.path.join(spec["outside"], f"written-by-{where}"), "w", encoding="utf-8") as handle:
            handle.write("escaped\n")

    def bind() -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))

    def connect() -> None:
        socket.create_connection(("127.0.0.1", spec["port"]), timeout=30).close()

    attempt("read-outside", lambda: read(spec["secret"]))
    attempt("list-root", lambda: os.listdir("/"))
    attempt("write-outside", write)
    attempt("symlink-out", lambda: read(spec["link"]))
    attempt("bind-other-port", bind)
    attempt("connect-test-port", connect)
    print(f"probe {where}: " + " ".join(results), file=sys.stderr, flush=True)


def arm(spec: dict) -> None:
    signal.signal(signal.SIGUSR1, lambda signum, frame: probe("main", spec))
    original = threading.Thread.run
    done = []

    def run(self) -> None:
        if self.name.startswith("http-worker") and not done:
            done.append(True)
            probe("worker", spec)
        original(self)

    threading.Thread.run = run


class NoLandlock:
    """libc's syscall() for a kernel without Landlock: its three syscalls fail with ENOSYS."""

    def __init__(self, real) -> None:
        self.real = real
        self.restype = real.restype

    def __call__(self, number, *args):
        if int(getattr(number, "value", number)) in LANDLOCK_SYSCALLS:
            ctypes.set_errno(errno.ENOSYS)
            return -1
        return self.real(number, *args)


class CDLL(ctypes.CDLL):
    def __getattr__(self, name):
        attribute = super().__getattr__(name)  # caches the real function on the instance
        if name == "syscall":
            attribute = NoLandlock(attribute)
            setattr(self, name, attribute)
        return attribute


if os.environ.get("NOTES_MCP_TEST_PROBE"):
    arm(json.loads(os.environ["NOTES_MCP_TEST_PROBE"]))
if os.environ.get("NOTES_MCP_TEST_NO_LANDLOCK") == "1":
    ctypes.CDLL = CDLL
