"""Outcome table, framing rows: JSON, envelope, methods, _meta, version, HTTP header checks."""

from __future__ import annotations

import base64
import json
import unittest
from typing import Any

from helpers.support import PRINCIPAL, accept, answered, call, logged, make_server, note_ids, request, tps

import frame
import main
import streamable_http


def wire(server: frame.Server, raw: bytes, headers: list[tuple[str, str]] | None = None) -> tuple[int, Any]:
    """Bytes as HTTP carries them (with `headers`) or as stdio does; the HTTP status and the decoded JSON response
    (None when there is no body)."""
    if headers is not None:
        status, body = streamable_http.answer(server, raw, PRINCIPAL, headers)
        return status, None if body is None else json.loads(body)
    body = server.handle_bytes(raw, PRINCIPAL)
    response = None if body is None else json.loads(body)
    return streamable_http.status_of(response), response


def dispatch(server: frame.Server, message: dict, headers: list[tuple[str, str]] | None = None) -> tuple[int, Any]:
    """One decoded message through the core, as `wire` carries it."""
    return wire(server, frame.encode_message(message), headers)


def http_headers(message: dict, **override: str | None) -> list[tuple[str, str]]:
    """The Streamable HTTP headers a correct client derives from the body."""
    headers = {
        "MCP-Protocol-Version": message["params"]["_meta"][main.META_PROTOCOL_VERSION],
        "Mcp-Method": message["method"],
    }
    if message["method"] == "tools/call":
        headers["Mcp-Name"] = message["params"]["name"]
    headers.update(override)
    return [(k.lower(), v) for k, v in headers.items() if v is not None]  # as the engine hands them on


class JsonAndEnvelope(unittest.TestCase):
    def setUp(self) -> None:
        self.server = make_server()

    def test_a_body_that_is_not_json_gets_32700_without_an_id(self) -> None:
        for raw in (b"{not json", b"\xff\xfe", b"", b'{"jsonrpc":"2.0","id":1,"method":"x","params":NaN}'):
            with self.subTest(raw=raw):
                status, response = wire(self.server, raw)
                self.assertEqual(response["error"]["code"], frame.PARSE_ERROR)
                self.assertNotIn("id", response)
                self.assertEqual(status, 400)

    def test_deeply_nested_json_is_a_parse_error_not_a_crash(self) -> None:
        raw = b"[" * 50_000 + b"]" * 50_000
        raw = raw[: frame.MAX_MESSAGE_BYTES]
        _, response = wire(self.server, raw)
        self.assertEqual(response["error"]["code"], frame.PARSE_ERROR)

    def test_message_size_limit_is_enforced_on_both_sides(self) -> None:
        message = request("server/discover")
        padding = frame.MAX_MESSAGE_BYTES - len(json.dumps({**message, "pad": ""}).encode())
        at_limit = json.dumps({**message, "pad": "x" * padding}).encode()
        self.assertEqual(len(at_limit), frame.MAX_MESSAGE_BYTES)
        self.assertEqual(wire(self.server, at_limit)[1]["result"]["resultType"], "complete")
        over = json.dumps({**message, "pad": "x" * (padding + 1)}).encode()
        _, response = wire(self.server, over)
        self.assertEqual(response["error"]["code"], main.INVALID_REQUEST)
        self.assertNotIn("id", response)

    def test_non_objects_and_batches_are_invalid_requests_without_an_id(self) -> None:
        for message in ([request("server/discover")], [], "x", 1, None):
            with self.subTest(message=message):
                response = answered(self.server, message, PRINCIPAL)
                self.assertEqual(response["error"]["code"], main.INVALID_REQUEST)
                self.assertNotIn("id", response)

    def test_wrong_jsonrpc_version_or_method_type_is_invalid_request_keeping_a_readable_id(self) -> None:
        for mutate in ({"jsonrpc": "1.0"}, {"jsonrpc": None}, {"method": 7}, {"method": None}):
            with self.subTest(mutate=mutate):
                message = {**request("server/discover", id="r1"), **mutate}
                response = answered(self.server, message, PRINCIPAL)
                self.assertEqual(response["error"]["code"], main.INVALID_REQUEST)
                self.assertEqual(response["id"], "r1")

    def test_bool_float_null_and_object_ids_are_refused_and_never_echoed(self) -> None:
        for bad_id in (True, False, 1.0, 1.5, None, {"a": 1}, [1]):
            with self.subTest(id=bad_id):
                response = answered(self.server, request("server/discover", id=bad_id), PRINCIPAL)
                self.assertEqual(response["error"]["code"], main.INVALID_REQUEST)
                self.assertNotIn("id", response)

    def test_string_and_integer_ids_are_echoed_exactly(self) -> None:
        for good_id in ("abc", "", 0, -5, 2**53 + 1):
            with self.subTest(id=good_id):
                response = answered(self.server, request("server/discover", id=good_id), PRINCIPAL)
                self.assertEqual(response["id"], good_id)
                self.assertIn("result", response)


class MethodsAndNotifications(unittest.TestCase):
    def setUp(self) -> None:
        self.server = make_server()

    def test_unknown_and_removed_methods_get_32601_and_http_404(self) -> None:
        for method in ("ping", "logging/setLevel", "resources/list", "nope", "tools/call/extra"):
            with self.subTest(method=method):
                status, response = dispatch(self.server, request(method))
                self.assertEqual(response["error"]["code"], main.METHOD_NOT_FOUND)
                self.assertEqual(status, 404)

    def test_initialize_gets_32601_naming_the_supported_versions(self) -> None:
        legacy = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
        }
        error = answered(self.server, legacy, PRINCIPAL)["error"]
        self.assertEqual(error["code"], main.METHOD_NOT_FOUND)
        self.assertIn("2026-07-28", error["message"])

    def test_notifications_get_no_response_known_or_unknown(self) -> None:
        for method in ("notifications/cancelled", "notifications/initialized", "notifications/whatever"):
            with self.subTest(method=method):
                status, response = dispatch(self.server, {"jsonrpc": "2.0", "method": method})
                self.assertIsNone(response)
                self.assertEqual(status, 202)

    def test_id_less_request_is_never_executed_silent_on_stdio_and_400_on_http(self) -> None:
        state = answered(self.server, call(tps()), PRINCIPAL)["result"]["requestState"]
        message = call(tps(), requestState=state, inputResponses=accept())
        del message["id"]
        self.assertEqual(dispatch(self.server, message), (202, None))
        status, response = dispatch(self.server, message, http_headers({**message, "id": 0}))
        self.assertEqual(status, 400)
        self.assertEqual(response["error"]["code"], main.INVALID_REQUEST)
        self.assertNotIn("id", response)
        self.assertIn("note-14", note_ids(self.server))
        self.assertTrue(any("id-less" in line for line in logged(self.server)))


class RequestMeta(unittest.TestCase):
    def setUp(self) -> None:
        self.server = make_server()

    def test_params_and_meta_must_be_objects_with_version_and_capabilities(self) -> None:
        def without(path: str) -> dict:
            message = request("tools/list")
            if path == "params":
                del message["params"]
            elif path == "params-list":
                message["params"] = []
            elif path == "_meta":
                del message["params"]["_meta"]
            elif path == "_meta-string":
                message["params"]["_meta"] = "x"
            elif path == "capabilities":
                del message["params"]["_meta"][main.META_CLIENT_CAPABILITIES]
            elif path == "capabilities-list":
                message["params"]["_meta"][main.META_CLIENT_CAPABILITIES] = []
            return message

        for path in ("params", "params-list", "_meta", "_meta-string", "capabilities", "capabilities-list"):
            with self.subTest(missing=path):
                status, response = dispatch(self.server, without(path))
                self.assertEqual(response["error"]["code"], main.INVALID_PARAMS)
                self.assertEqual(status, 400)

    def test_meta_errors_come_before_the_version_check(self) -> None:
        message = request("server/discover")
        message["params"]["_meta"][main.META_PROTOCOL_VERSION] = "1900-01-01"
        del message["params"]["_meta"][main.META_CLIENT_CAPABILITIES]
        self.assertEqual(answered(self.server, message, PRINCIPAL)["error"]["code"], main.INVALID_PARAMS)

    def test_capabilities_are_read_from_each_request_never_remembered(self) -> None:
        self.assertIn("result", answered(self.server, call(tps(), id=1), PRINCIPAL))
        error = answered(self.server, call(tps(), id=2, capabilities={}), PRINCIPAL)["error"]
        self.assertEqual(error["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)

    def test_missing_capability_is_reported_before_any_lookup(self) -> None:
        for arguments in (tps(workspace="file:///not/authorized"), tps(title="no such note")):
            with self.subTest(arguments=arguments):
                error = answered(self.server, call(arguments, capabilities={}), PRINCIPAL)["error"]
                self.assertEqual(error["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)

    def test_form_elicitation_is_declared_by_an_empty_elicitation_or_a_form_object_only(self) -> None:
        declared: dict[str, tuple[Any, bool]] = {
            "empty elicitation": ({"elicitation": {}}, True),
            "form": ({"elicitation": {"form": {}}}, True),
            "form and url": ({"elicitation": {"form": {}, "url": {}}}, True),
            "url only": ({"elicitation": {"url": {}}}, False),
            "form not an object": ({"elicitation": {"form": True}}, False),
            "elicitation not an object": ({"elicitation": True}, False),
            "nothing": ({}, False),
        }
        for label, (capabilities, expected) in declared.items():
            with self.subTest(label):
                self.assertIs(main.supports_form_elicitation(capabilities), expected)

    def test_tools_list_refuses_a_cursor_it_never_issued(self) -> None:
        for cursor in ("", "abc", 5):
            with self.subTest(cursor=cursor):
                error = answered(self.server, request("tools/list", {"cursor": cursor}), PRINCIPAL)["error"]
                self.assertEqual(error["code"], main.INVALID_PARAMS)


class HttpHeaderChecks(unittest.TestCase):
    def setUp(self) -> None:
        self.server = make_server()
        self.message = call(tps())

    def status_and_code(self, message: dict, headers: list[tuple[str, str]]) -> tuple[int, int | None]:
        status, response = dispatch(self.server, message, headers)
        return status, response.get("error", {}).get("code")

    def test_missing_or_different_headers_get_32020_and_400(self) -> None:
        cases: dict[str, dict[str, Any]] = {
            "no version": {"MCP-Protocol-Version": None},
            "other version": {"MCP-Protocol-Version": "2025-11-25"},
            "no method": {"Mcp-Method": None},
            "other method": {"Mcp-Method": "tools/list"},
            "method case": {"Mcp-Method": "TOOLS/CALL"},
            "no name": {"Mcp-Name": None},
            "other name": {"Mcp-Name": "notes_publish"},
            "bad base64": {
                "Mcp-Name": "=?base64?!!!?=",
            },
            "space in base64": {"Mcp-Name": "=?base64?bm90ZXNf ZGVsZXRl?="},
        }
        for label, override in cases.items():
            with self.subTest(label):
                self.assertEqual(
                    self.status_and_code(self.message, http_headers(self.message, **override)),
                    (400, frame.HEADER_MISMATCH),
                )

    def test_duplicate_headers_are_refused(self) -> None:
        headers = http_headers(self.message) + [("mcp-name", "notes_delete")]
        self.assertEqual(self.status_and_code(self.message, headers), (400, frame.HEADER_MISMATCH))

    def test_base64_encoded_name_is_decoded_before_comparison(self) -> None:
        encoded = "=?base64?" + base64.b64encode(b"notes_delete").decode() + "?="
        status, code = self.status_and_code(self.message, http_headers(self.message, **{"Mcp-Name": encoded}))
        self.assertEqual((status, code), (200, None))

    def test_a_half_wrapped_or_non_canonical_base64_name_is_a_mismatch(self) -> None:
        encoded = base64.b64encode(b"notes_delete").decode()
        cases = {
            "no closing": "=?base64?" + encoded,
            "no opening": encoded + "?=",
            "upper-case marker": "=?BASE64?" + encoded + "?=",
            "extra padding": "=?base64?" + encoded + "==?=",
            "one padding character": "=?base64?" + encoded + "=?=",
            "empty": "=?base64??=",
            "not utf-8": "=?base64?" + base64.b64encode(b"\xff").decode() + "?=",
        }
        for label, value in cases.items():
            with self.subTest(label):
                self.assertEqual(
                    self.status_and_code(self.message, http_headers(self.message, **{"Mcp-Name": value})),
                    (400, frame.HEADER_MISMATCH),
                )
        self.assertEqual(len(note_ids(self.server)), 6)

    def test_header_check_runs_after_meta_checks_and_before_the_version_check(self) -> None:
        broken_meta = call(tps())
        del broken_meta["params"]["_meta"][main.META_CLIENT_CAPABILITIES]
        self.assertEqual(
            self.status_and_code(broken_meta, http_headers(self.message, **{"Mcp-Method": None})),
            (400, main.INVALID_PARAMS),
        )
        old = call(tps())
        old["params"]["_meta"][main.META_PROTOCOL_VERSION] = "1900-01-01"
        self.assertEqual(
            self.status_and_code(old, http_headers(old, **{"Mcp-Name": "other"})), (400, frame.HEADER_MISMATCH)
        )
        self.assertEqual(self.status_and_code(old, http_headers(old)), (400, main.UNSUPPORTED_PROTOCOL_VERSION))

    def test_stdio_has_no_header_layer(self) -> None:
        status, response = dispatch(self.server, self.message, None)
        self.assertEqual(status, 200)
        self.assertEqual(response["result"]["resultType"], "input_required")


class ToolRegistration(unittest.TestCase):
    def test_a_tool_needs_a_new_non_empty_string_name(self) -> None:
        server = make_server()

        class Named:
            def __init__(self, name: object) -> None:
                self.descriptor = {"name": name, "inputSchema": {"type": "object"}}

            def call(self, call: main.ToolCall) -> dict:
                return main.tool_result("called")

        for name in ("", None, 7, main.TOOL_NAME):
            with self.subTest(name=name):
                with self.assertRaises(ValueError):
                    server.add_tool(Named(name))
        self.assertIsInstance(server.tools[main.TOOL_NAME], main.NotesDelete)  # not replaced
        self.assertEqual(len(server.tools), 1)
        server.add_tool(Named("notes_echo"))
        self.assertEqual(list(server.tools), [main.TOOL_NAME, "notes_echo"])


class ToolArguments(unittest.TestCase):
    def setUp(self) -> None:
        self.server = make_server()

    def code(self, message: dict) -> int | None:
        return answered(self.server, message, PRINCIPAL).get("error", {}).get("code")

    def test_unknown_tool_is_invalid_params(self) -> None:
        name: Any  # values of several types, on purpose
        for name in ("notes_remove", None, 5, "", [], ["notes_delete"], {}):
            with self.subTest(name=name):
                message = call(tps())
                message["params"]["name"] = name
                self.assertEqual(self.code(message), main.INVALID_PARAMS)

    def test_arguments_that_are_not_an_object_are_invalid_params(self) -> None:
        arguments: Any  # values of several types, on purpose
        for arguments in ([], "x", 5, None):
            with self.subTest(arguments=arguments):
                self.assertEqual(self.code(call(arguments)), main.INVALID_PARAMS)
        self.assertEqual(len(note_ids(self.server)), 6)

    def test_an_object_that_fails_the_input_schema_is_an_is_error_result_saying_what_is_wrong(self) -> None:
        bad = {
            "title": {"workspaceUri": main.LESSON_WORKSPACE},
            "workspaceUri": {"title": "TPS report"},
            "'extra'": {**tps(), "extra": 1},
            "title must be": tps(title=""),
            "not only spaces": tps(title="   "),
            "title must be 1": {**tps(), "title": 7},
            "title must be 1..": tps(title="x" * (main.MAX_TITLE_LENGTH + 1)),
            "workspaceUri must": {**tps(), "workspaceUri": None},
            "workspaceUri must be": tps(workspace="f" * (main.MAX_URI_LENGTH + 1)),
            "workspaceUri ": tps(workspace=""),
        }
        for said, arguments in bad.items():
            with self.subTest(arguments=str(arguments)[:60]):
                response = answered(self.server, call(arguments), PRINCIPAL)
                self.assertNotIn("error", response)
                result = response["result"]
                self.assertIs(result["isError"], True)
                self.assertIn("Invalid arguments for tool notes_delete", result["content"][0]["text"])
                self.assertIn(said.strip("'"), result["content"][0]["text"])
        # An absent `arguments` is an empty object: it fails the schema the same way.
        message = call(tps())
        del message["params"]["arguments"]
        self.assertIs(answered(self.server, message, PRINCIPAL)["result"]["isError"], True)
        self.assertEqual(len(note_ids(self.server)), 6)

    def test_input_validation_comes_before_the_capability_check(self) -> None:
        result = answered(self.server, call({}, capabilities={}), PRINCIPAL)["result"]
        self.assertIs(result["isError"], True)

    def test_title_length_limit_is_inclusive(self) -> None:
        result = answered(self.server, call(tps(title="x" * main.MAX_TITLE_LENGTH)), PRINCIPAL)["result"]
        self.assertIs(result["isError"], True)
        self.assertIn("No note titled like", result["content"][0]["text"])  # valid arguments, just no such note

    def test_request_state_and_input_responses_must_come_together(self) -> None:
        state = answered(self.server, call(tps()), PRINCIPAL)["result"]["requestState"]
        self.assertEqual(self.code(call(tps(), requestState=state)), main.INVALID_PARAMS)
        self.assertEqual(self.code(call(tps(), inputResponses=accept())), main.INVALID_PARAMS)
        self.assertEqual(self.code(call(tps(), requestState=state, inputResponses=[])), main.INVALID_PARAMS)
        self.assertEqual(len(note_ids(self.server)), 6)


if __name__ == "__main__":
    unittest.main()
