"""A scripted 2025-11-25 client for the legacy adapter tests, over a subprocess or in memory."""

from __future__ import annotations

import itertools
import json
import os
import queue
import tempfile
import unittest
from collections.abc import Callable
from typing import Any, Protocol

from helpers import operator_command, procs, support

import frame
import legacy
import main

CLIENT_INFO = {"name": "scripted-legacy-client", "version": "1.0.0"}
FORM_CLIENT: dict[str, Any] = {"elicitation": {}}  # `{}` means form mode in 2025-11-25


class Wire(Protocol):
    def send(self, message: bytes | dict[str, Any]) -> None: ...

    def receive(self) -> dict[str, Any]: ...


class MemoryWire:
    """A LegacyStdioSession fed in this process; every line it writes is read back in order.

    `log` stands for the real process's stderr: as in `serve --stdio`, the session logs to
    the server's own sink when that is a support.Log (the test servers' default).
    """

    def __init__(self, test: unittest.TestCase, server: frame.Server, **kwargs: Any) -> None:
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.log = server.log if isinstance(server.log, support.Log) else support.Log()
        self.session = legacy.LegacyStdioSession(server, support.PRINCIPAL, self._write, self.log, **kwargs)
        test.addCleanup(self.session.close)

    def _write(self, line: bytes) -> None:
        assert line.endswith(b"\n") and b"\n" not in line[:-1], line
        self.lines.put(line)

    def send(self, message: bytes | dict[str, Any]) -> None:
        self.session.feed(json.dumps(message).encode() if isinstance(message, dict) else message)

    def receive(self) -> dict[str, Any]:
        return json.loads(self.lines.get(timeout=procs.GUARD))

    def written_after_close(self) -> list[bytes]:
        """Close the session (which waits for its workers), then every line not yet read."""
        self.session.close()
        rest = []
        while not self.lines.empty():
            rest.append(self.lines.get_nowait())
        return rest


class LegacyClient:
    """Sends requests and answers server-initiated ones by hand; keeps what arrives out of turn."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.held: list[dict[str, Any]] = []  # read while waiting for something else
        self._ids = itertools.count(1)

    def send(self, message: bytes | dict[str, Any]) -> None:
        self.wire.send(message)

    def request(self, method: str, params: Any = None, id: Any = None) -> Any:
        """Send a request; its id."""
        id = next(self._ids) if id is None else id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return id

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def next(self, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first message (held or new) that matches; others are held in arrival order."""
        for index, message in enumerate(self.held):
            if match(message):
                return self.held.pop(index)
        while not match(message := self.wire.receive()):
            self.held.append(message)
        return message

    def response(self, id: Any) -> dict[str, Any]:
        return self.next(lambda m: "method" not in m and m.get("id") == id and type(m.get("id")) is type(id))

    def server_request(self, method: str) -> dict[str, Any]:
        return self.next(lambda m: m.get("method") == method)

    def call(self, method: str, params: Any = None) -> dict[str, Any]:
        """Send a request and return its whole response."""
        return self.response(self.request(method, params))

    def initialize(
        self, capabilities: dict[str, Any] | None = None, version: str = legacy.LATEST_LEGACY_VERSION
    ) -> dict[str, Any]:
        """initialize (form elicitation by default), then notifications/initialized; the result."""
        params = {
            "protocolVersion": version,
            "capabilities": FORM_CLIENT if capabilities is None else capabilities,
            "clientInfo": CLIENT_INFO,
        }
        response = self.call("initialize", params)
        self.notify("notifications/initialized")
        return response["result"]

    def delete(self, title: str = "TPS report", workspace: str = support.WORKSPACE) -> Any:
        """Send a legacy tools/call notes_delete; its id."""
        return self.request(
            "tools/call", {"name": main.TOOL_NAME, "arguments": {"workspaceUri": workspace, "title": title}}
        )

    def answer(self, request: dict[str, Any], result: Any = None, error: Any = None) -> None:
        """Respond to a server-initiated request with a result or an error."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        if error is not None:
            message["error"] = error
        else:
            message["result"] = result
        self.send(message)


def choices(form: dict[str, Any]) -> list[str]:
    """The note ids a delete form (elicitation/create request or inputRequests entry) offers."""
    return [option["const"] for option in form["params"]["requestedSchema"]["properties"]["note_id"]["oneOf"]]


def accepted(note_id: str = "note-14", confirm: bool = True) -> dict[str, Any]:
    """The ElicitResult of a user who chose `note_id` and ticked (or not) the confirm box."""
    return {"action": "accept", "content": {"note_id": note_id, "confirm": confirm}}


class AuditedStore:
    """A scratch SQLite database for a real server process, and `serve.py audit list` over it."""

    def __init__(self, test: unittest.TestCase, **env: str) -> None:
        folder = tempfile.TemporaryDirectory(prefix="legacy-audit-")
        test.addCleanup(folder.cleanup)
        self.db = os.path.join(folder.name, "notes.db")
        self.env = procs.server_env(
            NOTES_MCP_SECRET=procs.SECRET, XDG_STATE_HOME=os.path.join(folder.name, "state"), **env
        )
        self.test = test

    def listing(self, *args: str) -> list[str]:
        """The stdout lines of `serve.py audit --db DB list ARGS` (which must succeed), run in this process: the
        server under test is the process here, and test_audit.OperatorCommand runs the command as one."""
        done = operator_command.run(["audit", "--db", self.db, "list", *args], self.env)
        self.test.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout.splitlines()

    def entries(self) -> list[dict[str, Any]]:
        """Every entry, oldest first, as `audit list --json` prints them."""
        return [json.loads(line) for line in self.listing("--json")]


# ------------------------------------------------------------------ 2025-11-25 over HTTP

LEGACY_VERSION_HEADER = "MCP-Protocol-Version"


class SseReader:
    """The events of one open text/event-stream response, read one at a time."""

    def __init__(self, response: Any) -> None:
        self.response = response

    def event(self) -> dict[str, Any] | None:
        """The next event's JSON message, or None at the end of the stream."""
        data: list[bytes] = []
        while True:
            line = self.response.readline()
            if not line:
                return None
            line = line.rstrip(b"\r\n")
            if not line:
                if data:
                    return json.loads(b"\n".join(data))
                continue
            field, _, value = line.partition(b":")
            if field == b"data":
                data.append(value.removeprefix(b" "))

    def message(self) -> dict[str, Any]:
        """The next event's JSON message, which must come: the stream ending first is an AssertionError."""
        event = self.event()
        if event is None:
            raise AssertionError("the stream ended before the message expected")
        return event

    def rest(self) -> list[dict[str, Any]]:
        """Every further event until the server ends the stream."""
        events = []
        while (event := self.event()) is not None:
            events.append(event)
        return events


class HttpLegacyClient:
    """A 2025-11-25 Streamable HTTP client written by hand: a session id, JSON or SSE answers."""

    def __init__(self, test: unittest.TestCase, port: int, token: str | None = procs.TOKEN) -> None:
        self.test = test
        self.port = port
        self.token = token
        self.session_id: str | None = None
        self._ids = itertools.count(1)

    def headers(self, session: bool = True) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        if session and self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
            headers[LEGACY_VERSION_HEADER] = legacy.LATEST_LEGACY_VERSION
        return headers

    def connection(self) -> Any:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=procs.GUARD)
        self.test.addCleanup(conn.close)
        return conn

    def post(
        self, message: dict[str, Any] | bytes, headers: dict[str, str] | None = None, method: str = "POST"
    ) -> tuple[int, dict[str, str], bytes]:
        """One request on a fresh connection: (status, lower-cased headers, whole body)."""
        return procs.post(self.connection(), message, self.headers() if headers is None else headers, method=method)

    def open(self, message: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        """Send a request and return as soon as the response head is in: (status, headers, response)."""
        conn = self.connection()
        conn.request("POST", "/mcp", json.dumps(message).encode(), self.headers())
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response

    def request(self, method: str, params: Any = None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            message["params"] = params
        return message

    def call(self, method: str, params: Any = None) -> dict[str, Any]:
        """A request answered with JSON (200): the response."""
        status, headers, body = self.post(self.request(method, params))
        self.test.assertEqual((status, headers.get("content-type")), (200, "application/json"), body)
        return json.loads(body)

    def initialize(
        self, capabilities: dict[str, Any] | None = None, client_info: dict[str, Any] = CLIENT_INFO
    ) -> dict[str, Any]:
        """initialize (a new session; its id kept), then notifications/initialized (202): the result."""
        params = {
            "protocolVersion": legacy.LATEST_LEGACY_VERSION,
            "capabilities": FORM_CLIENT if capabilities is None else capabilities,
            "clientInfo": client_info,
        }
        status, headers, body = self.post(self.request("initialize", params), self.headers(session=False))
        self.test.assertEqual(status, 200, body)
        self.session_id = headers["mcp-session-id"]
        status, _, _ = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.test.assertEqual(status, 202)
        return json.loads(body)["result"]

    def delete(self, title: str = "TPS report", workspace: str = support.WORKSPACE) -> tuple[dict[str, Any], SseReader]:
        """A tools/call notes_delete expected to open a stream: (the request, its event reader)."""
        message = self.request(
            "tools/call", {"name": main.TOOL_NAME, "arguments": {"workspaceUri": workspace, "title": title}}
        )
        status, headers, response = self.open(message)
        self.test.assertEqual((status, headers.get("content-type")), (200, "text/event-stream"))
        return message, SseReader(response)

    def answer(self, asked: dict[str, Any], result: Any) -> int:
        """POST the client's response to a server-initiated request: the HTTP status."""
        return self.post({"jsonrpc": "2.0", "id": asked["id"], "result": result})[0]
