"""Notifications about a request travel ahead of its response, only where the client accepts a stream."""

from __future__ import annotations

import json
import threading
import types
import unittest

from helpers import support
from helpers.support import PRINCIPAL, make_server, request

import frame
import http_server
import main
import streamable_http


def chatty_tool(server: frame.Server) -> None:
    """A tool that sends two progress notifications, then completes."""

    def call(tool_call: main.ToolCall) -> dict:
        for step in (1, 2):
            notify = frame.context().notify
            if notify is not None:
                notify(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/progress",
                        "params": {"progressToken": "t", "progress": step, "total": 2},
                    }
                )
        return main.tool_result("done")

    server.add_tool(types.SimpleNamespace(descriptor={"name": "chatty", "inputSchema": {"type": "object"}}, call=call))


class StreamedNotifications(unittest.TestCase):
    def setUp(self) -> None:
        self.server = make_server()
        chatty_tool(self.server)
        policy = streamable_http.HttpPolicy({}, PRINCIPAL, None, frozenset())
        self.endpoint = streamable_http.McpEndpoint(self.server, policy)

    def post(self, accept: str) -> http_server.Response:
        message = request("tools/call", {"name": "chatty", "arguments": {}})
        body = json.dumps(message).encode()
        headers = [
            ("Content-Type", "application/json"), ("Accept", accept), ("Content-Length", str(len(body))),
            ("MCP-Protocol-Version", main.PROTOCOL_VERSION), ("Mcp-Method", "tools/call"), ("Mcp-Name", "chatty"),
        ]  # fmt: skip
        response = self.endpoint(
            http_server.Request(
                "POST", "/mcp", "HTTP/1.1", support.engine_headers(headers), body, ("127.0.0.1", 1), threading.Event()
            )
        )
        assert isinstance(response, http_server.Response)  # read whole: these answers are never left streaming
        return response

    def test_a_client_accepting_an_event_stream_gets_the_notifications_then_the_response(self) -> None:
        response = self.post("application/json, text/event-stream")
        self.assertEqual(response.status, 200)
        self.assertIn(("Content-Type", "text/event-stream"), response.headers)
        events = [
            json.loads(line.removeprefix(b"data: "))
            for line in response.body.split(b"\n")
            if line.startswith(b"data: ")
        ]
        self.assertEqual([e.get("method") for e in events], ["notifications/progress", "notifications/progress", None])
        self.assertEqual([e["params"]["progress"] for e in events[:2]], [1, 2])
        self.assertEqual(events[2]["result"]["content"][0]["text"], "done")

    def test_a_json_only_client_gets_the_response_alone(self) -> None:
        response = self.post("application/json")
        self.assertIn(("Content-Type", "application/json"), response.headers)
        self.assertEqual(json.loads(response.body)["result"]["content"][0]["text"], "done")

    def test_a_request_without_notifications_is_plain_json_even_when_a_stream_is_accepted(self) -> None:
        message = request("server/discover")
        body = json.dumps(message).encode()
        headers = [
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", main.PROTOCOL_VERSION),
            ("Mcp-Method", "server/discover"),
            ("Content-Length", str(len(body))),
        ]
        response = self.endpoint(
            http_server.Request(
                "POST", "/mcp", "HTTP/1.1", support.engine_headers(headers), body, ("127.0.0.1", 1), threading.Event()
            )
        )
        self.assertIn(("Content-Type", "application/json"), response.headers)


if __name__ == "__main__":
    unittest.main()
