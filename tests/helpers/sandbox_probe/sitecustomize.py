"""TEST-ONLY: a simulated compromise, loaded into `serve.py` through the test's PYTHONPATH.

Production code carries no hook: Python imports `sitecustomize` from the first folder on
sys.path that has one, and only the sandbox tests put this folder there.

NOTES_MCP_TEST_PROBE (JSON: secret, outside, link, port, code, state) arms the probe: on
SIGUSR1 it runs in the main thread, and it runs once at the start of the HTTP engine's
first worker thread (before the worker takes its first request). Each attempt prints
`name=allowed` or `name=denied(ERRNO)` on one stderr line, `probe main: ...` or
`probe worker: ...`. `code` is the server's code folder and `state` its database's
folder: the probe appends to code/serve.py and creates a sitecustomize.py in each,
so tests run the server from a copy of code/. NOTES_MCP_TEST_NO_LANDLOCK=1 makes the
Landlock syscalls fail with ENOSYS, as on a kernel built without it;
NOTES_MCP_TEST_NO_SECCOMP=1 makes prctl(PR_SET_SECCOMP) fail with EINVAL.
"""

import ctypes
import errno
import json
import os
import signal
import socket
import threading
from typing import Any

LANDLOCK_SYSCALLS = (444, 445, 446)
PR_SET_SECCOMP = 22


def probe(where: str, spec: dict) -> None:
    results = []

    def attempt(name, action) -> None:
        try:
            action()
            results.append(f"{name}=allowed")
        except OSError as exc:
            results.append(f"{name}=denied({errno.errorcode.get(exc.errno or 0, exc.errno)})")

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

    def append(path: str) -> None:
        # Code the next start would run: an appended line, a new sitecustomize.
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"# appended by the probe in {where}\n")

    attempt("read-outside", lambda: read(spec["secret"]))
    attempt("list-root", lambda: os.listdir("/"))
    attempt("write-outside", write)
    attempt("symlink-out", lambda: read(spec["link"]))
    attempt("bind-other-port", bind)
    attempt("connect-test-port", connect)
    attempt("append-code", lambda: append(os.path.join(spec["code"], "serve.py")))
    attempt("create-code-sitecustomize", lambda: append(os.path.join(spec["code"], "sitecustomize.py")))
    attempt("create-state-sitecustomize", lambda: append(os.path.join(spec["state"], "sitecustomize.py")))
    attempt("chmod-outside", lambda: os.chmod(spec["secret"], 0o666))
    attempt("chown-outside", lambda: os.chown(spec["secret"], os.getuid(), os.getgid()))
    attempt("utime-outside", lambda: os.utime(spec["secret"], (0, 0)))
    attempt("setxattr-outside", lambda: os.setxattr(spec["secret"], "user.probe", where.encode()))
    # One write(2), not print(): the signal may land while the main thread is inside
    # sys.stderr's own write, and re-entering that buffered writer raises RuntimeError.
    os.write(2, (f"probe {where}: " + " ".join(results) + "\n").encode())


def arm(spec: dict) -> None:
    signal.signal(signal.SIGUSR1, lambda signum, frame: probe("main", spec))
    original = threading.Thread.run
    done: list[bool] = []

    def run(self) -> None:
        if self.name.startswith("http-worker") and not done:
            done.append(True)
            probe("worker", spec)
        original(self)

    threading.Thread.run = run  # type: ignore[method-assign]  # the simulated compromise replaces it on purpose


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


class NoSeccomp(NoLandlock):
    """libc's prctl() for a kernel that refuses seccomp filters: PR_SET_SECCOMP fails with EINVAL."""

    def __call__(self, option, *args):
        if int(getattr(option, "value", option)) == PR_SET_SECCOMP:
            ctypes.set_errno(errno.EINVAL)
            return -1
        return self.real(option, *args)


WRAPPERS = {
    name: wrapper
    for name, wrapper, variable in (
        ("syscall", NoLandlock, "NOTES_MCP_TEST_NO_LANDLOCK"),
        ("prctl", NoSeccomp, "NOTES_MCP_TEST_NO_SECCOMP"),
    )
    if os.environ.get(variable) == "1"
}


class CDLL(ctypes.CDLL):
    def __getattr__(self, name: str) -> Any:
        attribute = super().__getattr__(name)  # caches the real function on the instance
        if name in WRAPPERS:
            wrapped = WRAPPERS[name](attribute)
            setattr(self, name, wrapped)
            return wrapped
        return attribute


if os.environ.get("NOTES_MCP_TEST_PROBE"):
    arm(json.loads(os.environ["NOTES_MCP_TEST_PROBE"]))
if WRAPPERS:
    ctypes.CDLL = CDLL  # type: ignore[misc]  # every later CDLL(...) gets the wrapping loader, on purpose
