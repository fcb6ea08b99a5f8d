"""Start real `serve.py` subprocesses for transport tests, and always stop them."""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import select
import signal
import socket
import subprocess
import tempfile
import threading
import unittest
from typing import Any

from helpers import support

SERVE = os.path.join(support.CODE, "serve.py")
python = support.python  # the interpreter command for a child: `[*procs.python(), procs.SERVE, ...]`
GUARD = 60.0  # seconds; only a failure guard, never what a test asserts
TOKEN = "alice-token-0123456789abcdef"
SECRET = support.KEY.hex()
_URL_RE = re.compile(r"http://(127\.0\.0\.1|\[::1\]):(\d+)/mcp")
_KEEPER_RE = re.compile(r"links kept by process (\d+)")


def keeper_ended(pid: int, timeout: float) -> bool:
    """True once process `pid` (not our child) has ended, waiting at most `timeout` seconds on its pidfd (no
    polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])  # readable exactly when the process has ended
    finally:
        os.close(fd)


def server_env(**extra: str) -> dict[str, str]:
    """The test environment: no inherited NOTES_MCP_* values, plus `extra`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("NOTES_MCP_")}
    env.update(extra)
    return env


def needs_site(args: list[str], env: dict[str, str]) -> bool:
    """True when the server needs the `site` module: an optional package (psycopg for a PostgreSQL URL, fido2 for
    `--passkeys`) or a `sitecustomize.py` on its PYTHONPATH. A config file naming them is told by `site=True`."""
    folders = [folder for folder in env.get("PYTHONPATH", "").split(os.pathsep) if folder]
    optional = "--passkeys" in args or any(arg.startswith(("postgresql:", "postgres:")) for arg in args)
    return optional or any(os.path.exists(os.path.join(folder, "sitecustomize.py")) for folder in folders)


class Process:
    """A server subprocess whose stderr is drained into `stderr_lines` by a thread.

    It starts without the `site` module (`support.python`) unless `needs_site` or `site` says it needs it.
    """

    def __init__(
        self,
        test: Any,
        args: list[str],
        env: dict[str, str],
        stdin: Any = subprocess.DEVNULL,
        serve: str = SERVE,
        cwd: str | None = None,
        site: bool = False,
    ) -> None:
        self.proc = subprocess.Popen(
            [*support.python(site or needs_site(args, env)), serve, *args],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
        )
        self.stderr_lines: list[str] = []
        self._line_added = threading.Condition()
        self._stderr_done = False
        self.url_seen = threading.Event()
        self.url: str | None = None
        self._stderr = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr.start()
        test.addCleanup(self.stop_keeper)  # runs after stop(): cleanups run last-in, first-out
        test.addCleanup(self.stop)

    def _drain_stderr(self) -> None:
        for raw in self.proc.stderr:  # type: ignore[union-attr]
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._line_added:
                self.stderr_lines.append(line)
                self._line_added.notify_all()
            match = _URL_RE.search(line)
            if match and self.url is None:
                self.url = match.group(0)
                self.url_seen.set()
        self.url_seen.set()  # EOF: the process ended (possibly before listening)
        with self._line_added:
            self._stderr_done = True
            self._line_added.notify_all()

    def wait_for_line(self, text: str) -> bool:
        """Block until a stderr line contains `text` (True) or stderr ends without one (False)."""
        with self._line_added:
            self._line_added.wait_for(
                lambda: self._stderr_done or any(text in line for line in self.stderr_lines), GUARD
            )
            return any(text in line for line in self.stderr_lines)

    def stop(self) -> None:
        """Terminate (then kill) the process, close its pipes, join the reader thread."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(GUARD)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(GUARD)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        self._stderr.join(GUARD)
        self.proc.stderr.close()  # type: ignore[union-attr]

    def keeper_pid(self) -> int | None:
        """The process keeping this stdio server's confirmation pages after it exits (code/page_keeper.py), if it forked
        one."""
        found = [_KEEPER_RE.search(line) for line in self.stderr_lines]
        return next((int(match.group(1)) for match in found if match), None)

    def stop_keeper(self) -> None:
        """End the page keeper this server forked, if any is still running (it is not our child: SIGTERM, then wait)."""
        pid = self.keeper_pid()
        if pid is not None and not keeper_ended(pid, 0):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                return
            keeper_ended(pid, GUARD)

    def wait(self) -> int:
        """Wait for exit (guarded) and for stderr to be fully drained; the exit status."""
        status = self.proc.wait(GUARD)
        self._stderr.join(GUARD)
        return status

    def stderr_text(self) -> str:
        return "\n".join(self.stderr_lines)


class ClassScope:
    """Lets a server live for a whole TestCase class: cleanups become class cleanups."""

    def __init__(self, cls: type[unittest.TestCase]) -> None:
        self.addCleanup = cls.addClassCleanup

    def fail(self, message: str) -> None:
        raise AssertionError(message)


def raw_exchange(port: int, data: bytes) -> bytes:
    """Send raw bytes on a fresh connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=GUARD) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


class HttpServer(Process):
    """`serve --http --port 0` on 127.0.0.1; `port` is known once the URL line appeared."""

    def __init__(
        self, test: Any, *args: str, env: dict[str, str] | None = None, serve: str = SERVE, site: bool = False
    ) -> None:
        env = env if env is not None else server_env(NOTES_MCP_TOKEN=TOKEN, NOTES_MCP_SECRET=SECRET)
        super().__init__(test, ["--http", "--port", "0", *args], env, serve=serve, site=site)
        if not self.url_seen.wait(GUARD) or self.url is None:
            self.stop()
            test.fail("server did not print its URL:\n" + self.stderr_text())
        found = _URL_RE.search(self.url or "")
        assert found is not None  # url_seen is set only by a line this pattern matched
        self.port = int(found.group(2))
        self.host = f"127.0.0.1:{self.port}"

    def connect(self, test: unittest.TestCase) -> http.client.HTTPConnection:
        """A keep-alive connection to the server, closed at cleanup."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=GUARD)
        test.addCleanup(conn.close)
        return conn


def mcp_headers(message: dict[str, Any], token: str | None = TOKEN) -> dict[str, str]:
    """The headers a correct 2026-07-28 client sends for `message`."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    params = given if isinstance(given := message.get("params"), dict) else {}
    version = (params.get("_meta") or {}).get(support.main.META_PROTOCOL_VERSION)
    if isinstance(version, str):
        headers["MCP-Protocol-Version"] = version
    if isinstance(message.get("method"), str):
        headers["Mcp-Method"] = message["method"]
    if message.get("method") == "tools/call" and isinstance(params.get("name"), str):
        headers["Mcp-Name"] = params["name"]
    return headers


def post(
    conn: http.client.HTTPConnection,
    body: bytes | dict[str, Any],
    headers: dict[str, str] | list[tuple[str, str]] | None = None,
    path: str = "/mcp",
    method: str = "POST",
) -> tuple[int, dict[str, str], bytes]:
    """Send one request on `conn`; (status, lower-cased headers, body). Headers may repeat."""
    if isinstance(body, dict):
        headers = mcp_headers(body) if headers is None else headers
        body = json.dumps(body).encode()
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    skip_host = any(name.lower() == "host" for name, _ in pairs)
    conn.putrequest(method, path, skip_host=skip_host, skip_accept_encoding=True)
    for name, value in pairs:
        conn.putheader(name, value)
    if body is not None and not any(name.lower() in ("content-length", "transfer-encoding") for name, _ in pairs):
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    response = conn.getresponse()
    data = response.read()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


class StdioServer(Process):
    """`serve --stdio`: write lines to stdin, read lines from stdout (through a queue)."""

    def __init__(
        self,
        test: unittest.TestCase,
        *args: str,
        env: dict[str, str] | None = None,
        read_stdout: bool = True,
        serve: str = SERVE,
        cwd: str | None = None,
        site: bool = False,
    ) -> None:
        env = env if env is not None else server_env(NOTES_MCP_SECRET=SECRET)
        super().__init__(test, ["--stdio", *args], env, stdin=subprocess.PIPE, serve=serve, cwd=cwd, site=site)
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self._stdout = threading.Thread(target=self._drain_stdout, daemon=True)
        if read_stdout:
            self._stdout.start()
        else:
            self.proc.stdout.close()  # type: ignore[union-attr]  # the client is gone: a broken pipe

    def stop(self) -> None:
        super().stop()
        if self._stdout.is_alive():
            self._stdout.join(GUARD)

    def _drain_stdout(self) -> None:
        try:
            for line in self.proc.stdout:  # type: ignore[union-attr]
                self.lines.put(line)
        except (OSError, ValueError):
            pass
        self.lines.put(None)

    def send(self, message: bytes | dict[str, Any]) -> None:
        """One line to the server's stdin (a dict is JSON-encoded; bytes are sent as given)."""
        data = json.dumps(message).encode() + b"\n" if isinstance(message, dict) else message
        self.proc.stdin.write(data)  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def receive(self) -> dict[str, Any]:
        """The next stdout line, which must be exactly one compact JSON object and a newline."""
        line = self.lines.get(timeout=GUARD)
        assert line is not None, "server closed stdout; stderr:\n" + self.stderr_text()
        assert line.endswith(b"\n") and b"\n" not in line[:-1], line
        return json.loads(line)

    def exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send a request and return its response."""
        self.send(message)
        return self.receive()

    def close_stdin(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]

    def remaining_stdout(self) -> list[bytes]:
        """Every further stdout line until EOF (call after the server exits)."""
        rest = []
        while (line := self.lines.get(timeout=GUARD)) is not None:
            rest.append(line)
        return rest


def write_config(test: unittest.TestCase, config: dict[str, Any] | str) -> str:
    """A config file (a dict as JSON, a str as is) in a temporary directory removed at cleanup."""
    folder = tempfile.TemporaryDirectory()
    test.addCleanup(folder.cleanup)
    path = os.path.join(folder.name, "config.json")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
        handle.write(config if isinstance(config, str) else json.dumps(config))  # mode 600: it holds tokens
    return path
