"""The Streamable HTTP transport, through a real `serve.py --http --port 0` subprocess."""

from __future__ import annotations

import base64
import http.client
import json
import math
import os
import shutil
import signal
import socket
import tempfile
import threading
import unittest
from typing import Any

from helpers import procs, shared_servers, support
from helpers.procs import GUARD, TOKEN, mcp_headers, post
from helpers.support import accept, call, request, tps

import assemble
import frame
import http_server
import launch
import main
import serve
import sqlite_store
import streamable_http

BOB_TOKEN = "bob-token-0123456789abcdefgh"
BOB_WORKSPACE = "file:///Users/bob/Notes"


def offered(result: dict[str, Any]) -> list[str]:
    """The note ids a form offers."""
    schema = result["inputRequests"][main.INPUT_KEY]["params"]["requestedSchema"]
    return [option["const"] for option in schema["properties"]["note_id"]["oneOf"]]


def error_code(body: bytes) -> int:
    return json.loads(body)["error"]["code"]


# One lesson server (token TOKEN) for every test of this module that changes no note, opens
# its own connections and spends fewer wrong tokens in all than an address may guess for free
# (HttpLayerRefusalTests and StartupTests spend four): its log, checked for a traceback, is then
# theirs together. A test that ended it leaves the next one a new server.
LESSON_SERVER = shared_servers.Shared(procs.HttpServer)


def lesson_server() -> procs.HttpServer:
    """The module's shared lesson server (started at the first test that asks, stopped after the last)."""
    return LESSON_SERVER.get(shared_servers.ModuleScope())


class SharedServer(unittest.TestCase):
    """The module's lesson server (token TOKEN); tests here change no notes."""

    server: procs.HttpServer  # setUp takes the module's

    def setUp(self) -> None:
        self.server = lesson_server()
        self.conn = self.server.connect(self)

    def send(
        self, body: bytes | dict[str, Any], headers: Any = None, **kwargs: Any
    ) -> tuple[int, dict[str, str], bytes]:
        return post(self.conn, body, headers, **kwargs)

    def headers(self, message: dict[str, Any], **changes: str | None) -> dict[str, str]:
        """A correct client's headers for `message`, with some replaced or (None) removed."""
        headers = mcp_headers(message)
        for name, value in changes.items():
            name = name.replace("_", "-")
            headers = {k: v for k, v in headers.items() if k.lower() != name.lower()}
            if value is not None:
                headers[name] = value
        return headers

    def assert_tps_notes_untouched(self) -> None:
        conn = self.server.connect(self)
        status, _, body = post(conn, call(tps(), id="check"))
        self.assertEqual(status, 200)
        self.assertEqual(offered(json.loads(body)["result"]), ["note-3", "note-7", "note-14"])


class ProtocolStatusTests(SharedServer):
    """Status codes the core decides: 200, 202, 400 and 404, with JSON-RPC bodies."""

    def test_a_request_gets_200_with_one_json_response(self) -> None:
        status, headers, body = self.send(request("server/discover", id=1))
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "application/json")
        self.assertEqual(json.loads(body)["result"]["supportedVersions"], [main.PROTOCOL_VERSION])

    def test_an_input_required_result_is_a_200(self) -> None:
        status, _, body = self.send(call(tps()))
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["result"]["resultType"], "input_required")

    def test_an_accepted_notification_gets_202_with_no_body(self) -> None:
        message = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        status, headers, body = self.send(message, self.headers(message, MCP_Protocol_Version=main.PROTOCOL_VERSION))
        self.assertEqual((status, body), (202, b""))
        self.assertNotIn("content-type", headers)

    def test_missing_meta_gets_400_invalid_params(self) -> None:
        message = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}
        status, _, body = self.send(message, self.headers(message, MCP_Protocol_Version=main.PROTOCOL_VERSION))
        self.assertEqual((status, error_code(body)), (400, main.INVALID_PARAMS))

    def test_a_call_without_form_elicitation_gets_400_missing_capability(self) -> None:
        # No elicitation at all (URL mode alone now gets the confirmation page: tests/test_browser_confirm.py).
        status, _, body = self.send(call(tps(), capabilities={}))
        self.assertEqual((status, error_code(body)), (400, main.MISSING_REQUIRED_CLIENT_CAPABILITY))
        self.assertEqual(json.loads(body)["error"]["data"], {"requiredCapabilities": {"elicitation": {"form": {}}}})

    def test_an_unsupported_version_gets_400_with_the_supported_list(self) -> None:
        message = request("server/discover", id=1)
        message["params"]["_meta"][main.META_PROTOCOL_VERSION] = "1999-01-01"
        status, _, body = self.send(message)
        self.assertEqual((status, error_code(body)), (400, main.UNSUPPORTED_PROTOCOL_VERSION))
        self.assertEqual(
            json.loads(body)["error"]["data"], {"supported": [main.PROTOCOL_VERSION], "requested": "1999-01-01"}
        )

    def test_an_id_less_request_gets_400_and_never_runs(self) -> None:
        message = call(tps(), requestState="x", inputResponses=accept())
        del message["id"]
        status, _, body = self.send(message)
        self.assertEqual((status, error_code(body)), (400, main.INVALID_REQUEST))
        self.assertNotIn("id", json.loads(body))
        self.assert_tps_notes_untouched()

    def test_unknown_and_removed_methods_get_404_method_not_found(self) -> None:
        for method in ("notes/unknown", "initialize", "ping"):
            with self.subTest(method=method):
                message = request(method, id=method)
                status, _, body = self.send(message)
                self.assertEqual((status, error_code(body)), (404, main.METHOD_NOT_FOUND))
                self.assertEqual(json.loads(body)["id"], method)

    def test_a_body_that_is_not_json_gets_400_parse_error(self) -> None:
        status, _, body = self.send(
            b"{not json", {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        )
        self.assertEqual((status, error_code(body)), (400, frame.PARSE_ERROR))


class HeaderRuleTests(SharedServer):
    def test_header_names_in_any_case_are_accepted(self) -> None:
        message = call(tps())
        status, _, body = self.send(message, {name.upper(): value for name, value in mcp_headers(message).items()})
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["result"]["resultType"], "input_required")

    """MCP-Protocol-Version, Mcp-Method and Mcp-Name against the body (-32020), in table order."""

    def assert_header_mismatch(self, message: dict[str, Any], headers: Any) -> None:
        status, _, body = self.send(message, headers)
        self.assertEqual((status, error_code(body)), (400, frame.HEADER_MISMATCH))

    def test_a_missing_required_header_gets_400_header_mismatch(self) -> None:
        message = call(tps())
        for name in ("MCP_Protocol_Version", "Mcp_Method", "Mcp_Name"):
            with self.subTest(missing=name):
                self.assert_header_mismatch(message, self.headers(message, **{name: None}))

    def test_a_header_that_differs_from_the_body_gets_400_header_mismatch(self) -> None:
        message = call(tps())
        for name, value in (
            ("MCP_Protocol_Version", "2025-11-25"),
            ("Mcp_Method", "tools/list"),
            ("Mcp_Name", "NOTES_DELETE"),
        ):
            with self.subTest(header=name, value=value):
                self.assert_header_mismatch(message, self.headers(message, **{name: value}))

    def test_a_duplicated_header_is_refused_even_with_equal_values(self) -> None:
        message = call(tps())
        pairs = list(mcp_headers(message).items()) + [("Mcp-Method", "tools/call")]
        self.assert_header_mismatch(message, pairs)

    def test_header_names_are_case_insensitive(self) -> None:
        message = call(tps())
        status, _, body = self.send(message, {name.lower(): value for name, value in mcp_headers(message).items()})
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["result"]["resultType"], "input_required")

    def test_a_base64_encoded_mcp_name_is_decoded_before_comparing(self) -> None:
        message = call(tps())
        encoded = "=?base64?" + base64.b64encode(main.TOOL_NAME.encode()).decode() + "?="
        status, _, body = self.send(message, self.headers(message, Mcp_Name=encoded))
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["result"]["resultType"], "input_required")

    def test_meta_errors_come_before_header_errors(self) -> None:
        message = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}
        status, _, body = self.send(message, {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
        self.assertEqual((status, error_code(body)), (400, main.INVALID_PARAMS))

    def test_header_errors_come_before_the_version_check(self) -> None:
        message = request("server/discover", id=1)
        message["params"]["_meta"][main.META_PROTOCOL_VERSION] = "1999-01-01"
        self.assert_header_mismatch(message, self.headers(message, MCP_Protocol_Version=main.PROTOCOL_VERSION))

    def test_session_and_resumption_headers_are_ignored_and_never_minted(self) -> None:
        message = request("server/discover", id=1)
        headers = self.headers(message, Mcp_Session_Id="sess-123", Last_Event_ID="42")
        status, response_headers, _ = self.send(message, headers)
        self.assertEqual(status, 200)
        self.assertNotIn("mcp-session-id", response_headers)
        status, response_headers, _ = self.send(request("server/discover", id=2))
        self.assertNotIn("mcp-session-id", response_headers)


class HttpLayerRefusalTests(SharedServer):
    """Statuses the transport decides before a message exists: 401 403 404 405 406 411 413 415 431."""

    def assert_refused(self, expected: int, response: tuple[int, dict[str, str], bytes]) -> dict[str, str]:
        status, headers, body = response
        self.assertEqual(status, expected)
        self.assertEqual(error_code(body), main.INVALID_REQUEST)  # an id-less JSON-RPC error
        self.assertNotIn(b"Traceback", body)
        self.assertEqual(headers.get("connection"), "close")
        return headers

    def test_a_missing_or_wrong_token_gets_401_with_www_authenticate(self) -> None:
        message = request("server/discover")
        base = mcp_headers(message, token=None)
        for label, extra in (
            ("missing", []),
            ("wrong", [("Authorization", "Bearer wrong-token-0123456789")]),
            ("prefix", [("Authorization", f"Bearer {TOKEN[:-1]}")]),
            ("not bearer", [("Authorization", f"Basic {TOKEN}")]),
            ("twice", [("Authorization", f"Bearer {TOKEN}"), ("Authorization", f"Bearer {TOKEN}")]),
        ):
            with self.subTest(label):
                conn = self.server.connect(self)
                headers = self.assert_refused(401, post(conn, message, list(base.items()) + extra))
                self.assertEqual(headers["www-authenticate"], "Bearer")

    def test_the_bearer_scheme_is_case_insensitive(self) -> None:
        message = request("server/discover")
        headers = mcp_headers(message, token=None) | {"Authorization": f"bearer {TOKEN}"}
        self.assertEqual(self.send(message, headers)[0], 200)

    def test_a_foreign_origin_gets_403(self) -> None:
        message = request("server/discover")
        for origin in (
            "http://evil.example",
            "null",
            "http://localhost.evil.example",
            "file://",
            "http://127.0.0.1.evil:80",
        ):
            with self.subTest(origin=origin):
                conn = self.server.connect(self)
                self.assert_refused(403, post(conn, message, mcp_headers(message) | {"Origin": origin}))

    def test_local_origins_are_allowed(self) -> None:
        message = request("server/discover")
        for origin in ("http://localhost:5173", "http://127.0.0.1", "https://[::1]:8443", "HTTP://LOCALHOST"):
            with self.subTest(origin=origin):
                self.assertEqual(self.send(message, mcp_headers(message) | {"Origin": origin})[0], 200)

    def test_a_host_other_than_the_loopback_name_gets_403(self) -> None:
        message = request("server/discover")
        for host in (
            "evil.example",
            f"evil.example:{self.server.port}",
            f"localhost:{self.server.port + 1}",
            "127.0.0.1",
        ):
            with self.subTest(host=host):
                conn = self.server.connect(self)
                self.assert_refused(403, post(conn, message, mcp_headers(message) | {"Host": host}))

    def test_every_loopback_name_with_the_bound_port_is_accepted_as_host(self) -> None:
        message = request("server/discover")
        for name in ("127.0.0.1", "localhost", "[::1]", "LocalHost"):
            with self.subTest(host=name):
                headers = mcp_headers(message) | {"Host": f"{name}:{self.server.port}"}
                self.assertEqual(self.send(message, headers)[0], 200)

    def test_get_delete_and_other_methods_get_405(self) -> None:
        for method in ("GET", "DELETE", "PUT", "OPTIONS", "PATCH"):
            with self.subTest(method=method):
                conn = self.server.connect(self)
                headers = self.assert_refused(405, post(conn, b"", {"Authorization": f"Bearer {TOKEN}"}, method=method))
                self.assertEqual(headers["allow"], "POST")

    def test_paths_other_than_the_endpoint_get_a_plain_404(self) -> None:
        for path in ("/", "/mcp/", "/MCP", "/other/mcp"):
            with self.subTest(path=path):
                conn = self.server.connect(self)
                self.assert_refused(404, post(conn, request("server/discover"), path=path))

    def test_a_body_over_the_limit_gets_413_before_it_is_read(self) -> None:
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.server.port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {frame.MAX_MESSAGE_BYTES + 1}\r\n\r\n"
        )
        reply = procs.raw_exchange(self.server.port, head.encode())  # the body is never sent
        self.assertTrue(reply.startswith(b"HTTP/1.1 413 "), reply[:80])

    def test_a_body_exactly_at_the_limit_is_read_and_answered(self) -> None:
        message = request("server/discover", id="edge")
        data = json.dumps(message).encode()
        data += b" " * (frame.MAX_MESSAGE_BYTES - len(data))
        status, _, body = self.send(data, mcp_headers(message))
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["id"], "edge")

    def test_a_non_json_content_type_gets_415(self) -> None:
        message = request("server/discover")
        for content_type in ("text/plain", "application/jsonx", None):
            with self.subTest(content_type=content_type):
                headers = {k: v for k, v in mcp_headers(message).items() if k != "Content-Type"}
                if content_type:
                    headers["Content-Type"] = content_type
                self.assert_refused(415, post(self.server.connect(self), message, headers))

    def test_json_with_a_charset_parameter_is_accepted(self) -> None:
        message = request("server/discover")
        self.assertEqual(
            self.send(message, mcp_headers(message) | {"Content-Type": "application/json; charset=utf-8"})[0], 200
        )

    def test_an_accept_header_that_rules_out_json_gets_406(self) -> None:
        message = request("server/discover")
        for accept_value in ("text/event-stream", "application/json;q=0, text/html", "text/*"):
            with self.subTest(accept=accept_value):
                headers = mcp_headers(message) | {"Accept": accept_value}
                self.assert_refused(406, post(self.server.connect(self), message, headers))

    def test_an_absent_or_wildcard_accept_is_fine(self) -> None:
        message = request("server/discover")
        for accept_value in (
            None,
            "*/*",
            "application/*;q=0.5",
            "application/json;q=1",
            "text/html, application/json; q=0.8",
        ):
            with self.subTest(accept=accept_value):
                headers = {k: v for k, v in mcp_headers(message).items() if k != "Accept"}
                if accept_value:
                    headers["Accept"] = accept_value
                self.assertEqual(self.send(message, headers)[0], 200)

    def test_a_chunked_or_unframed_body_gets_411_and_both_framings_400(self) -> None:
        base = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.server.port}\r\nAuthorization: Bearer "
            f"{TOKEN}\r\nContent-Type: application/json\r\n"
        )
        for label, extra in (("chunked", "Transfer-Encoding: chunked\r\n"), ("no length", "")):
            with self.subTest(label):
                reply = procs.raw_exchange(self.server.port, (base + extra + "\r\n").encode())
                self.assertTrue(reply.startswith(b"HTTP/1.1 411 "), reply[:80])
        # Both framings at once is the request-smuggling shape: refused outright (RFC 9112 6.3).
        reply = procs.raw_exchange(
            self.server.port, (base + "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n").encode()
        )
        self.assertTrue(reply.startswith(b"HTTP/1.1 400 "), reply[:80])

    def test_headers_up_to_the_count_limit_are_accepted_and_one_more_gets_431(self) -> None:
        message = request("server/discover")
        headers = list(mcp_headers(message).items())
        # http.client adds Host and Content-Length: count them towards the limit.
        padding = http_server.MAX_HEADER_COUNT - len(headers) - 2
        at_limit = headers + [(f"X-Pad-{i}", "1") for i in range(padding)]
        self.assertEqual(self.send(message, at_limit)[0], 200)
        over = at_limit + [("X-Pad-Extra", "1")]
        self.assertEqual(post(self.server.connect(self), message, over)[0], 431)

    def test_a_head_up_to_the_byte_limit_is_accepted_and_one_byte_more_gets_431(self) -> None:
        message = request("server/discover")
        data = json.dumps(message).encode()
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.server.port}\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in mcp_headers(message).items())
            + f"Content-Length: {len(data)}\r\nX-Pad: "
        )
        for extra, expected in ((0, b"HTTP/1.1 200 "), (1, b"HTTP/1.1 431 ")):
            with self.subTest(extra=extra):
                # The limit counts the request line and header lines, not the final blank line.
                pad = "p" * (http_server.MAX_HEADER_BYTES - len(head) + extra)
                reply = self.one_response((head + pad).encode() + b"\r\n\r\n" + data)
                self.assertTrue(reply.startswith(expected), reply[:80])

    def one_response(self, data: bytes) -> bytes:
        """Send `data` and read one response (status line through the body)."""
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=GUARD) as sock:
            sock.sendall(data)
            response = http.client.HTTPResponse(sock)
            response.begin()
            return f"HTTP/1.1 {response.status} ".encode() + response.read()

    def test_a_malformed_request_line_gets_400(self) -> None:
        for line in (b"POST /mcp\r\n\r\n", b"POST /mcp HTTP/2.0\r\n\r\n", b"PO(ST /mcp HTTP/1.1\r\n\r\n"):
            with self.subTest(line=line):
                self.assertTrue(procs.raw_exchange(self.server.port, line).startswith(b"HTTP/1.1 400 "))

    def test_refusals_change_no_notes(self) -> None:
        first = json.loads(self.send(call(tps()))[2])["result"]
        retry = call(tps(), id=2, requestState=first["requestState"], inputResponses=accept("note-14"))
        for changes in (
            {"Authorization": "Bearer wrong-token-0123456789"},
            {"Origin": "http://evil.example"},
            {"Content-Type": "text/plain"},
        ):
            with self.subTest(changes=changes):
                self.assertGreaterEqual(post(self.server.connect(self), retry, mcp_headers(retry) | changes)[0], 400)
        self.assert_tps_notes_untouched()


class KeepAliveTests(SharedServer):
    """HTTP/1.1 keep-alive: many requests, including core errors, on one connection."""

    def test_several_requests_share_one_connection(self) -> None:
        status, _, _ = self.send(request("server/discover", id=1))
        sock = self.conn.sock
        results = [
            self.send(request("tools/list", id=2))[0],
            self.send(request("initialize", id=3))[0],
            self.send(call(tps(), id=4))[0],
        ]
        message = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}}
        results.append(self.send(message, mcp_headers(message) | {"MCP-Protocol-Version": main.PROTOCOL_VERSION})[0])
        self.assertEqual([status, *results], [200, 200, 404, 200, 202])
        self.assertIs(self.conn.sock, sock)  # never reconnected

    def test_a_connection_close_request_is_honoured(self) -> None:
        message = request("server/discover")
        status, headers, _ = self.send(message, mcp_headers(message) | {"Connection": "close"})
        self.assertEqual((status, headers.get("connection")), (200, "close"))


def two_principal_server(scope: Any) -> procs.HttpServer:
    """alice and bob, one note each in their own workspace."""
    path = procs.write_config(
        scope,
        {
            "principals": {
                "alice": {"token": TOKEN, "workspaces": [support.WORKSPACE]},
                "bob": {"token": BOB_TOKEN, "workspaces": [BOB_WORKSPACE]},
            },
            "stdioPrincipal": "alice",
            "notes": [
                {"id": "a1", "title": "TPS report", "uri": support.WORKSPACE + "/a1.md"},
                {"id": "b1", "title": "TPS report", "uri": BOB_WORKSPACE + "/b1.md"},
            ],
            "keys": [procs.SECRET],
        },
    )
    return procs.HttpServer(scope, "--config", path, env=procs.server_env())


class AuthorizationTests(unittest.TestCase):
    """The token's principal is the caller, and only that principal's workspaces are in scope.

    One server for the class: no test deletes a note (bob's attempts are refused, alice's form is never accepted).
    """

    SERVER = shared_servers.Shared(two_principal_server)
    server: procs.HttpServer

    def setUp(self) -> None:
        self.server = self.SERVER.get(procs.ClassScope(type(self)))

    def call_as(self, token: str, message: dict[str, Any]) -> dict[str, Any]:
        status, _, body = post(self.server.connect(self), message, mcp_headers(message, token=token))
        self.assertEqual(status, 200)
        return json.loads(body)["result"]

    def test_bob_cannot_act_on_alices_workspace_and_nothing_is_deleted(self) -> None:
        refused = self.call_as(BOB_TOKEN, call(tps()))
        self.assertTrue(refused["isError"])
        self.assertNotIn("a1", json.dumps(refused))
        # Alice's form, replayed with bob's token, is refused too.
        form = self.call_as(TOKEN, call(tps()))
        retry = call(tps(), id=2, requestState=form["requestState"], inputResponses=accept("a1"))
        status, _, body = post(self.server.connect(self), retry, mcp_headers(retry, token=BOB_TOKEN))
        self.assertEqual(status, 200)
        self.assertTrue(json.loads(body)["result"]["isError"])
        self.assertEqual(offered(self.call_as(TOKEN, call(tps(), id=3))), ["a1"])

    def test_each_principal_acts_on_its_own_workspace(self) -> None:
        self.assertEqual(offered(self.call_as(BOB_TOKEN, call(tps(workspace=BOB_WORKSPACE)))), ["b1"])
        self.assertEqual(offered(self.call_as(TOKEN, call(tps()))), ["a1"])


class ConcurrencyTests(unittest.TestCase):
    """Many clients at once: every flow completes, every note is deleted at most once."""

    CLIENTS = 50
    NOTES = 25  # two clients race for each note

    def test_fifty_concurrent_confirmation_flows_delete_each_note_at_most_once(self) -> None:
        notes = [
            {"id": f"n{i:02d}", "title": f"report {i:02d}", "uri": f"{support.WORKSPACE}/r{i:02d}.md"}
            for i in range(self.NOTES)
        ]
        path = procs.write_config(
            self, {"principals": {"alice": {"token": TOKEN, "workspaces": [support.WORKSPACE]}}, "notes": notes}
        )
        server = procs.HttpServer(self, "--config", path)
        barrier = threading.Barrier(self.CLIENTS, timeout=GUARD)
        results: list[dict[str, Any] | None] = [None] * self.CLIENTS
        errors: list[BaseException] = []

        def client(index: int) -> None:
            try:
                conn = server.connect(self)
                arguments = tps(f"report {index % self.NOTES:02d}")
                barrier.wait()
                status, _, body = post(conn, call(arguments, id=1))
                form = json.loads(body)["result"]
                assert status == 200 and offered(form) == [f"n{index % self.NOTES:02d}"], body
                barrier.wait()  # both racers hold a form before either answers
                retry = call(
                    arguments,
                    id=2,
                    requestState=form["requestState"],
                    inputResponses=accept(f"n{index % self.NOTES:02d}"),
                )
                status, _, body = post(conn, retry)
                assert status == 200, body
                results[index] = json.loads(body)["result"]
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=client, args=(i,)) for i in range(self.CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(GUARD)
        self.assertEqual(errors, [])
        deleted = [r["structuredContent"]["noteId"] for r in results if r and not r["isError"]]
        self.assertEqual(sorted(deleted), sorted(note["id"] for note in notes))  # each exactly once
        self.assertEqual(sum(1 for r in results if r and r["isError"]), self.CLIENTS - self.NOTES)
        status, _, body = post(server.connect(self), call(tps("report"), id=3))
        self.assertTrue(json.loads(body)["result"]["isError"])  # nothing is left to offer

    IDLE = 200

    def test_two_hundred_idle_and_trickling_connections_never_crowd_out_a_client_that_sends_requests(self) -> None:
        server = lesson_server()  # every connection is this test's own, closed at its end
        held = []
        for index in range(self.IDLE):
            idle = socket.create_connection(("127.0.0.1", server.port), timeout=GUARD)
            self.addCleanup(idle.close)
            if index % 4 == 0:
                idle.sendall(b"P")  # one header byte, then nothing: a trickler
            held.append(idle)
        for index in range(20):
            conn = server.connect(self)  # a fresh connection each time, while all of them are held
            message = request("server/discover", id=index)
            status, _, _ = post(conn, message, mcp_headers(message))
            self.assertEqual(status, 200)
        self.assertNotIn("Traceback", server.stderr_text())


class ClientBytesNeverCrashTheServer(unittest.TestCase):
    """Hostile framing over the real process: a fixed status at once, and nothing in the log.

    The module's lesson server: each test opens its own connections and changes no note, and
    the log checked for a traceback is then that of every test sharing it.
    """

    server: procs.HttpServer  # setUp takes the module's

    def setUp(self) -> None:
        self.server = lesson_server()

    def exchange(self, raw: bytes) -> bytes:
        return procs.raw_exchange(self.server.port, raw)

    def test_a_content_length_of_thousands_of_digits_gets_400_and_no_traceback(self) -> None:
        for target in ("/mcp", "/connect/x"):
            with self.subTest(target=target):
                head = (
                    f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1:{self.server.port}\r\nContent-Length: "
                    f"{'9' * 4400}\r\n\r\n"
                )
                self.assertTrue(self.exchange(head.encode()).startswith(b"HTTP/1.1 400 "))
        message = request("server/discover")
        self.assertEqual(post(self.server.connect(self), message, mcp_headers(message))[0], 200)
        self.assertNotIn("Traceback", self.server.stderr_text())

    def test_bare_lf_line_endings_get_400_at_once(self) -> None:
        raw = f"POST /mcp HTTP/1.1\nHost: 127.0.0.1:{self.server.port}\nContent-Length: 2\n\n{{}}".encode()
        self.assertTrue(self.exchange(raw).startswith(b"HTTP/1.1 400 "))

    def test_an_absolute_form_target_is_served_like_its_path(self) -> None:
        message = request("server/discover")
        body = json.dumps(message).encode()
        headers = "".join(f"{k}: {v}\r\n" for k, v in mcp_headers(message).items())
        authority = f"127.0.0.1:{self.server.port}"
        raw = (
            f"POST http://{authority}/mcp HTTP/1.1\r\nHost: {authority}\r\n{headers}Content-Length: "
            f"{len(body)}\r\nConnection: close\r\n\r\n"
        )
        reply = self.exchange(raw.encode() + body)
        self.assertTrue(reply.startswith(b"HTTP/1.1 200 "), reply[:80])
        self.assertIn(b'"supportedVersions"', reply)


def short_timeout_server(scope: Any) -> procs.HttpServer:
    return procs.HttpServer(scope, "--request-timeout", "1")


class SlowClientTests(unittest.TestCase):
    """A client that stalls mid-request blocks nobody and is dropped after the timeout.

    The two stalling clients share a server with a short request timeout: each is its own connection.
    """

    SHORT_TIMEOUT = shared_servers.Shared(short_timeout_server)

    def test_a_slow_loris_client_does_not_block_others_and_is_dropped(self) -> None:
        server = self.SHORT_TIMEOUT.get(procs.ClassScope(type(self)))
        loris = socket.create_connection(("127.0.0.1", server.port), timeout=GUARD)
        self.addCleanup(loris.close)
        loris.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Len".encode())
        status, _, _ = post(server.connect(self), request("server/discover"))
        self.assertEqual(status, 200)  # served while the slow client is stalled
        self.assertTrue(read_to_end(loris).startswith(b"HTTP/1.1 408 "))  # then told so and hung up on

    def test_a_client_that_stalls_inside_the_body_is_dropped(self) -> None:
        server = self.SHORT_TIMEOUT.get(procs.ClassScope(type(self)))
        message = request("server/discover")
        data = json.dumps(message).encode()
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in mcp_headers(message).items())
            + f"Content-Length: {len(data)}\r\n\r\n"
        )
        loris = socket.create_connection(("127.0.0.1", server.port), timeout=GUARD)
        self.addCleanup(loris.close)
        loris.sendall(head.encode() + data[:10])
        self.assertTrue(read_to_end(loris).startswith(b"HTTP/1.1 408 "))

    def test_a_stray_crlf_flood_without_a_token_is_refused_and_others_are_served(self) -> None:
        server = lesson_server()  # no token at all is no guess
        flood = []
        for _ in range(16):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=GUARD)
            self.addCleanup(sock.close)
            sock.sendall(b"\r\n" * 32768)  # 64 KiB of empty lines each, no request line
            flood.append(sock)
        status, _, _ = post(server.connect(self), request("server/discover"))
        self.assertEqual(status, 200)
        for sock in flood:
            # Refused after a few lines (not dropped silently at the head deadline).
            self.assertTrue(read_to_end(sock).startswith(b"HTTP/1.1 400 "))
        self.assertNotIn("Traceback", server.stderr_text())


def guarded_endpoint(
    test: unittest.TestCase, host: str = "127.0.0.1"
) -> tuple[int, support.Clock, streamable_http.HttpPolicy]:
    """An in-process server for TOKEN on host:0 whose token budgets run on a clock the test moves; (port, clock,
    policy)."""
    clock = support.Clock()
    policy = streamable_http.HttpPolicy({"alice": TOKEN}, None, None, frozenset(), clock)
    httpd = streamable_http.listen(
        host, 0, streamable_http.McpEndpoint(support.make_server(), policy), lambda line: None
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    test.addCleanup(thread.join, GUARD)
    test.addCleanup(httpd.shutdown, 0)
    return httpd.address[1], clock, policy


def discover_from(
    test: unittest.TestCase, port: int, source: str, token: str | None
) -> tuple[int, dict[str, str], bytes]:
    """One server/discover on a new connection from `source` (a 127.x address) to 127.0.0.1:`port`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD, source_address=(source, 0))
    test.addCleanup(conn.close)
    message = request("server/discover")
    return post(conn, message, mcp_headers(message, token=token))


class TokenGuessTests(unittest.TestCase):
    """Wrong bearer tokens are budgeted per peer and for the whole server; a right token is always served."""

    def test_a_right_token_is_served_every_time_beside_a_flood_of_wrong_and_missing_tokens_from_its_address(
        self,
    ) -> None:
        server = procs.HttpServer(self)
        message = request("server/discover")
        statuses = []
        for burst in range(5):
            for k in range(streamable_http.MAX_FREE_GUESSES + 2):
                statuses.append(
                    post(server.connect(self), message, mcp_headers(message, token=f"wrong-{burst}-{k}"))[0]
                )
                self.assertEqual(
                    post(server.connect(self), message, mcp_headers(message, token=None))[0], 401
                )  # no token: no guess
            status, _, body = post(server.connect(self), message, mcp_headers(message))
            self.assertEqual(status, 200, f"the right token after {len(statuses)} wrong ones")
            self.assertEqual(json.loads(body)["result"]["supportedVersions"], [main.PROTOCOL_VERSION])
        # The free ones judged (401), then the back-off: later wrong tokens wait (429).
        self.assertEqual(statuses[: streamable_http.MAX_FREE_GUESSES], [401] * streamable_http.MAX_FREE_GUESSES)
        self.assertIn(429, statuses)
        self.assertEqual(set(statuses), {401, 429})
        self.assertNotIn("Traceback", server.stderr_text())
        self.assertFalse(any(TOKEN in line or "wrong-" in line for line in server.stderr_lines))

    def test_wrong_tokens_from_rotating_loopback_addresses_meet_the_server_budget_while_a_right_token_is_served(
        self,
    ) -> None:
        port, clock, policy = guarded_endpoint(self)
        sources = [f"127.0.{1 + k // 250}.{2 + k % 250}" for k in range(streamable_http.SERVER_GUESS_BURST + 20)]
        statuses = []
        for k, source in enumerate(sources):  # one wrong token from each address: no peer's own budget is touched
            status, headers, _ = discover_from(self, port, source, f"wrong-{k}")
            statuses.append((status, headers.get("retry-after")))
            if k % 10 == 0:
                self.assertEqual(discover_from(self, port, "127.0.0.1", TOKEN)[0], 200)
        burst = streamable_http.SERVER_GUESS_BURST
        self.assertEqual(statuses[:burst], [(401, None)] * burst)  # the burst's last one still judged
        self.assertEqual(statuses[burst:], [(429, str(math.ceil(1 / streamable_http.SERVER_GUESSES_PER_SECOND)))] * 20)
        self.assertEqual(len(policy.tokens.throttle), burst)  # the refused ones counted against no peer
        self.assertEqual(discover_from(self, port, "127.0.0.1", TOKEN)[0], 200)  # served while the budget is spent
        clock.now += 1.0  # refills SERVER_GUESSES_PER_SECOND
        refill = [
            discover_from(self, port, f"127.0.9.{2 + k}", "wrong")[0]
            for k in range(int(streamable_http.SERVER_GUESSES_PER_SECOND) + 1)
        ]
        self.assertEqual(refill, [401] * int(streamable_http.SERVER_GUESSES_PER_SECOND) + [429])

    def test_over_a_dual_stack_listener_each_ipv4_client_is_its_own_peer(self) -> None:
        # An IPv6 listener reached over IPv4 (here only from loopback) sees ::ffff:a.b.c.d.
        probe = socket.socket(socket.AF_INET6)
        try:
            probe.bind(("::ffff:127.0.0.1", 0))
        except OSError:
            self.skipTest("no IPv6 listener that takes IPv4-mapped clients on this machine")
        finally:
            probe.close()
        port, _, policy = guarded_endpoint(self, "::ffff:127.0.0.1")
        for k in range(streamable_http.MAX_FREE_GUESSES):
            self.assertEqual(discover_from(self, port, "127.0.0.2", f"wrong-{k}")[0], 401)
        self.assertEqual(discover_from(self, port, "127.0.0.2", "wrong-again")[0], 429)  # 127.0.0.2 waits ...
        self.assertEqual(discover_from(self, port, "127.0.0.3", "wrong")[0], 401)  # ... and 127.0.0.3 does not
        self.assertEqual(discover_from(self, port, "127.0.0.2", TOKEN)[0], 200)
        self.assertEqual(len(policy.tokens.throttle), 2)

    def test_an_ipv4_mapped_address_is_throttled_as_its_ipv4_address(self) -> None:
        self.assertEqual(streamable_http.peer_key("::ffff:192.0.2.1"), "192.0.2.1")
        self.assertEqual(streamable_http.peer_key("::FFFF:c000:201"), "192.0.2.1")
        self.assertNotEqual(streamable_http.peer_key("::ffff:192.0.2.1"), streamable_http.peer_key("::ffff:192.0.2.2"))
        tokens = streamable_http.BearerTokens({"alice": TOKEN}, support.Clock())
        for k in range(streamable_http.MAX_FREE_GUESSES):
            self.assertIsNone(tokens.principal_from("wrong", "::ffff:192.0.2.1" if k % 2 else "192.0.2.1"))
        with self.assertRaises(streamable_http.Throttled):
            tokens.principal_from("wrong", "192.0.2.1")  # both spellings spent one budget
        self.assertIsNone(tokens.principal_from("wrong", "::ffff:192.0.2.2"))

    def test_the_back_off_doubles_up_to_its_cap_and_neither_a_right_token_nor_a_refused_wrong_one_changes_it(
        self,
    ) -> None:
        clock = support.Clock()
        tokens = streamable_http.BearerTokens({"alice": TOKEN}, clock)
        for _ in range(streamable_http.MAX_FREE_GUESSES - 1):
            self.assertIsNone(tokens.principal_from("wrong", "192.0.2.1"))
        self.assertIsNone(tokens.principal_from("wrong", "192.0.2.1"))  # the last free one starts the wait
        waits = []
        for _ in range(8):
            with self.assertRaises(streamable_http.Throttled) as caught:
                tokens.principal_from("wrong", "192.0.2.1")
            self.assertEqual(tokens.principal_from(TOKEN, "192.0.2.1"), "alice")  # served during the wait
            with self.assertRaises(streamable_http.Throttled) as again:
                tokens.principal_from("wrong", "192.0.2.1")
            self.assertEqual(
                again.exception.retry_after, caught.exception.retry_after
            )  # neither lengthened nor reset it
            waits.append(caught.exception.retry_after)
            clock.now += caught.exception.retry_after
            self.assertIsNone(tokens.principal_from("wrong", "192.0.2.1"))
        self.assertEqual(waits, [1, 2, 4, 8, 16, 32, 60, 60])
        self.assertIsNone(tokens.principal_from("wrong", "192.0.2.2"))  # another peer is not affected

    def test_wrong_tokens_are_forgotten_after_a_quiet_period_and_not_before(self) -> None:
        clock = support.Clock()
        tokens = streamable_http.BearerTokens({"alice": TOKEN}, clock)
        for peer in ("192.0.2.1", "192.0.2.2"):
            for _ in range(streamable_http.MAX_FREE_GUESSES - 1):
                tokens.principal_from("wrong", peer)
        clock.now += streamable_http.GUESS_MEMORY_SECONDS
        tokens.principal_from("wrong", "192.0.2.2")  # exactly the memory: still counted, the wait starts
        with self.assertRaises(streamable_http.Throttled):
            tokens.principal_from("wrong", "192.0.2.2")
        clock.now += 1
        self.assertIsNone(tokens.principal_from("wrong", "192.0.2.1"))  # past it: counted from zero again ...
        self.assertIsNone(tokens.principal_from("wrong", "192.0.2.1"))  # ... so no wait after it

    def test_memory_is_bounded_by_forgetting_the_least_recently_wrong_peer(self) -> None:
        clock = support.Clock()
        tokens = streamable_http.BearerTokens({"alice": TOKEN}, clock)

        def wrong(peer: str) -> None:
            clock.now += 1 / streamable_http.SERVER_GUESSES_PER_SECOND  # within the server's budget
            self.assertIsNone(tokens.principal_from("wrong", peer))

        for _ in range(streamable_http.MAX_FREE_GUESSES):
            wrong("first")
        for k in range(streamable_http.MAX_GUESSING_PEERS):
            wrong(f"peer-{k}")
        self.assertEqual(len(tokens.throttle), streamable_http.MAX_GUESSING_PEERS)
        for _ in range(streamable_http.MAX_FREE_GUESSES):
            wrong("first")  # forgotten: its free guesses again, no wait in between
        with self.assertRaises(streamable_http.Throttled):
            for _ in range(streamable_http.MAX_FREE_GUESSES):
                wrong("peer-1")  # still remembered: its tenth wrong token here is one too many

    def test_the_server_judges_its_burst_then_its_rate_of_wrong_tokens_and_serves_a_right_one_meanwhile(self) -> None:
        clock = support.Clock()
        tokens = streamable_http.BearerTokens({"alice": TOKEN}, clock)
        peers = iter(f"198.51.{k // 256}.{k % 256}" for k in range(1000))
        for _ in range(streamable_http.SERVER_GUESS_BURST):
            self.assertIsNone(tokens.principal_from("wrong", next(peers)))
        peer = next(peers)
        with self.assertRaises(streamable_http.Throttled) as caught:
            tokens.principal_from("wrong", peer)
        self.assertEqual(caught.exception.retry_after, math.ceil(1 / streamable_http.SERVER_GUESSES_PER_SECOND))
        self.assertEqual(tokens.principal_from(TOKEN, peer), "alice")
        self.assertEqual(len(tokens.throttle), streamable_http.SERVER_GUESS_BURST)  # the refused one counted nowhere
        clock.now += 1.0
        for _ in range(int(streamable_http.SERVER_GUESSES_PER_SECOND)):
            self.assertIsNone(tokens.principal_from("wrong", next(peers)))
        with self.assertRaises(streamable_http.Throttled):
            tokens.principal_from("wrong", next(peers))
        clock.now += 3600.0  # a long quiet spell refills no more than the burst
        for _ in range(streamable_http.SERVER_GUESS_BURST):
            self.assertIsNone(tokens.principal_from("wrong", next(peers)))
        with self.assertRaises(streamable_http.Throttled):
            tokens.principal_from("wrong", next(peers))

    def test_one_ipv6_host_is_throttled_as_its_slash_64(self) -> None:
        self.assertEqual(streamable_http.peer_key("2001:db8:1:2::5"), streamable_http.peer_key("2001:db8:1:2:ffff::9"))
        self.assertNotEqual(streamable_http.peer_key("2001:db8:1:2::5"), streamable_http.peer_key("2001:db8:1:3::5"))
        self.assertEqual(streamable_http.peer_key("fe80::1%eth0"), streamable_http.peer_key("fe80::2"))
        self.assertEqual(streamable_http.peer_key("192.0.2.1"), "192.0.2.1")


class SignalTests(unittest.TestCase):
    """The signals that stop an HTTP server all stop it gracefully."""

    def test_sighup_shuts_down_like_sigterm_closing_the_store_and_exiting_zero(self) -> None:
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        db = os.path.join(folder, "notes.db")
        server = procs.HttpServer(self, "--db", db)
        conn = server.connect(self)
        status, _, body = post(conn, call(tps()))
        self.assertEqual(status, 200)
        retry = call(
            tps(), id=2, requestState=json.loads(body)["result"]["requestState"], inputResponses=accept("note-14")
        )
        status, _, _ = post(conn, retry)
        self.assertEqual(status, 200)
        self.assertGreater(os.path.getsize(db + "-wal"), 0)  # open and serving: the deletion is in the log
        server.proc.send_signal(signal.SIGHUP)
        self.assertEqual(server.wait(), 0)
        self.assertIn("shutting down", server.stderr_text())  # the graceful path, not a kill
        # The store was closed: checkpointed and emptied (the sandbox keeps it from being removed).
        self.assertEqual(os.path.getsize(db + "-wal"), 0)
        self.assertNotIn("Traceback", server.stderr_text())


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


class AnsweredOnTheLoopTests(unittest.TestCase):
    """Which requests the engine answers on its loop (no worker hand-off), and with which stores."""

    class Pages:
        prefix = "/connect/"
        max_body = 1024

        def owns(self, path: str) -> bool:
            return path.startswith(self.prefix)

        def handle(
            self, method: str, path: str, headers: Any, body: bytes, peer: str = ""
        ) -> tuple[int, list[tuple[str, str]], bytes]:
            raise AssertionError("no request here is for the pages")

    def endpoint(self) -> streamable_http.McpEndpoint:
        policy = streamable_http.HttpPolicy({}, "alice", None, frozenset())
        return streamable_http.McpEndpoint(support.make_server(), policy, self.Pages())

    def request(self, method: str = "POST", target: str = "/mcp", *headers: tuple[str, str]) -> http_server.Request:
        return http_server.Request(
            method,
            target,
            "HTTP/1.1",
            support.engine_headers([("Host", "x"), *headers]),
            b"",
            ("127.0.0.1", 1),
            threading.Event(),
        )

    def test_a_post_without_a_session_is_answered_at_once_and_a_session_page_or_other_method_is_not(self) -> None:
        endpoint = self.endpoint()
        self.assertTrue(endpoint.answers_at_once(self.request()))
        self.assertTrue(endpoint.answers_at_once(self.request("POST", "/elsewhere")))  # a 404, also at once
        self.assertFalse(endpoint.answers_at_once(self.request("POST", "/mcp", ("Mcp-Session-Id", "abc"))))
        self.assertFalse(endpoint.answers_at_once(self.request("POST", "/mcp", ("mcp-session-id", ""))))
        self.assertFalse(endpoint.answers_at_once(self.request("GET")))
        self.assertFalse(endpoint.answers_at_once(self.request("DELETE")))
        self.assertFalse(endpoint.answers_at_once(self.request("POST", "/connect/x")))

    def test_only_a_store_that_never_waits_gets_answers_on_the_loop(self) -> None:
        endpoint = self.endpoint()
        on_loop = streamable_http.listen("127.0.0.1", 0, endpoint, lambda line: None, store_waits=False)
        self.addCleanup(on_loop.shutdown, 0)
        workers = streamable_http.listen("127.0.0.1", 0, endpoint, lambda line: None)
        self.addCleanup(workers.shutdown, 0)
        self.assertEqual(on_loop.inline, endpoint.answers_at_once)
        self.assertIsNone(workers.inline)

    def test_the_memory_store_never_waits_and_a_database_store_may(self) -> None:
        self.assertFalse(launch.store_waits(support.make_server().notes))
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        store = sqlite_store.open_store(os.path.join(folder, "notes.db"), clock=support.Clock())
        self.addCleanup(store.close)
        self.assertTrue(launch.store_waits(store))
        self.assertTrue(launch.store_waits(assemble.StopOnLoss(store)))


class StartupTests(unittest.TestCase):
    """What the server prints, the tokens it accepts, and --no-auth."""

    def test_without_a_token_or_config_http_refuses_to_start_and_prints_no_credential(self) -> None:
        process = procs.Process(self, ["--http", "--port", "0"], procs.server_env(NOTES_MCP_SECRET=procs.SECRET))
        self.assertEqual(process.wait(), serve.EXIT_USAGE)
        self.assertEqual(len(process.stderr_lines), 1, process.stderr_lines)
        self.assertIn("NOTES_MCP_TOKEN", process.stderr_lines[0])
        self.assertNotIn("bearer token for", process.stderr_lines[0])

    def test_the_token_from_the_environment_is_the_one_accepted_and_never_printed(self) -> None:
        server = lesson_server()  # `--http --port 0`, NOTES_MCP_TOKEN=TOKEN in its environment: no config, no --no-auth
        message = request("server/discover")
        self.assertEqual(post(server.connect(self), message, mcp_headers(message, token=TOKEN))[0], 200)
        self.assertEqual(post(server.connect(self), message, mcp_headers(message, token=TOKEN + "x"))[0], 401)
        self.assertFalse(any(TOKEN in line for line in server.stderr_lines))

    def test_no_auth_serves_without_a_token_as_the_stdio_principal_and_warns(self) -> None:
        server = procs.HttpServer(self, "--no-auth", env=procs.server_env(NOTES_MCP_SECRET=procs.SECRET))
        self.assertTrue(any("--no-auth" in line for line in server.stderr_lines))
        message = call(tps())
        status, headers, body = post(server.connect(self), message, mcp_headers(message, token=None))
        self.assertEqual(status, 200)
        self.assertEqual(offered(json.loads(body)["result"]), ["note-3", "note-7", "note-14"])

    def test_without_a_signing_key_the_server_warns_that_state_is_per_process(self) -> None:
        server = procs.HttpServer(self, env=procs.server_env(NOTES_MCP_TOKEN=TOKEN))
        self.assertTrue(any("random key" in line and "restart" in line for line in server.stderr_lines))


if __name__ == "__main__":
    unittest.main()
