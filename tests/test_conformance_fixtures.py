"""The conformance fixtures: every tool, prompt, resource and completion, in process, through Server.handle."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import unittest
from typing import Any
from unittest import mock

from helpers import support

import conformance_fixtures as fixtures
import frame
import main
import serve
import streamable_http

ALL = {"sampling": {}, "elicitation": {}, "roots": {"listChanged": True}}  # what the suite's client declares
LESSON_CAPABILITIES: dict[str, Any] = {"tools": {}}


def lesson() -> frame.Server:
    """The lesson server exactly as serve builds it without the flag."""
    return support.server_over(main.lesson_notes())


def with_fixtures() -> frame.Server:
    """The lesson server with the fixtures installed."""
    server = lesson()
    fixtures.install(server)
    return server


class FixtureCase(unittest.TestCase):
    def setUp(self) -> None:
        self.server = with_fixtures()
        self.events: list[dict[str, Any]] = []

    def send(
        self, method: str, params: dict[str, Any] | None = None, capabilities: Any = ALL, **meta: Any
    ) -> dict[str, Any]:
        """One request through the core; returns the whole response."""
        message = support.request(method, params, capabilities=capabilities)
        message["params"]["_meta"].update(meta)
        response = self.server.handle(message, support.PRINCIPAL, notify=self.events.append)
        assert response is not None
        return response

    def result(self, method: str, params: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        """The result of a request that must succeed."""
        response = self.send(method, params, **kwargs)
        self.assertNotIn("error", response)
        return response["result"]

    def error(self, method: str, params: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        """The error of a request that must fail."""
        response = self.send(method, params, **kwargs)
        self.assertNotIn("result", response)
        return response["error"]

    def call(self, name: str, arguments: Any = None, **kwargs: Any) -> dict[str, Any]:
        """tools/call's result."""
        params: dict[str, Any] = {"name": name, **kwargs.pop("extra", {})}
        if arguments is not None:
            params["arguments"] = arguments
        return self.result("tools/call", params, **kwargs)

    def call_error(self, name: str, arguments: Any = None, **extra: Any) -> dict[str, Any]:
        """tools/call's error."""
        params: dict[str, Any] = {"name": name, **extra}
        if arguments is not None:
            params["arguments"] = arguments
        return self.error("tools/call", params)


# =====================================================================================
# The lesson server without the flag
# =====================================================================================


class LessonServerUnchangedTests(FixtureCase):
    def test_without_the_fixtures_discover_reports_only_tools_and_lists_only_the_lesson_tool(self) -> None:
        self.server = lesson()
        self.assertEqual(self.result("server/discover")["capabilities"], LESSON_CAPABILITIES)
        self.assertEqual([t["name"] for t in self.result("tools/list")["tools"]], [main.TOOL_NAME])

    def test_without_the_fixtures_their_methods_and_tools_do_not_exist(self) -> None:
        self.server = lesson()
        for method in (
            "prompts/list",
            "prompts/get",
            "resources/list",
            "resources/read",
            "resources/templates/list",
            "completion/complete",
        ):
            self.assertEqual(
                self.error(method, {"name": "test_simple_prompt", "uri": "test://static-text"})["code"],
                main.METHOD_NOT_FOUND,
            )
        self.assertEqual(self.call_error("test_simple_text", {})["code"], main.INVALID_PARAMS)

    def test_with_the_fixtures_discover_reports_what_they_registered(self) -> None:
        self.assertEqual(
            self.result("server/discover")["capabilities"],
            {"tools": {}, "prompts": {}, "resources": {}, "completions": {}},
        )

    def test_with_the_fixtures_the_lesson_tool_stays_first_and_unchanged(self) -> None:
        tools = self.result("tools/list")["tools"]
        self.assertEqual(tools[0], main.NOTES_DELETE_TOOL)
        self.assertEqual(len({t["name"] for t in tools}), len(tools))
        self.assertTrue(all(t["description"] and t["inputSchema"]["type"] == "object" for t in tools))

    def test_serving_without_the_flag_never_imports_the_fixtures(self) -> None:
        probe = "import sys, serve; serve.parser(); print('conformance_fixtures' in sys.modules)"
        done = subprocess.run(
            [sys.executable, "-c", probe], cwd=support.CODE, capture_output=True, text=True, timeout=60
        )
        self.assertEqual((done.returncode, done.stdout.strip()), (0, "False"))

    def test_the_flag_is_refused_with_stdio(self) -> None:
        with mock.patch("sys.stderr"):
            self.assertEqual(serve.serve(["--stdio", "--conformance-fixtures"]), serve.EXIT_USAGE)

    def test_a_method_is_added_once_and_its_capability_only_with_it(self) -> None:
        self.server = lesson()
        self.server.add_method("x/ping", lambda *args: {"resultType": "complete"})
        self.assertEqual(self.server.capabilities(), LESSON_CAPABILITIES)
        with self.assertRaises(ValueError):
            self.server.add_method("x/ping", lambda *args: {}, capability="x")
        self.assertEqual(self.server.capabilities(), LESSON_CAPABILITIES)


# =====================================================================================
# Tools that answer at once
# =====================================================================================


class PlainToolTests(FixtureCase):
    def test_simple_text_answers_without_an_arguments_key(self) -> None:
        result = self.call("test_simple_text")
        self.assertEqual(result["content"], [{"type": "text", "text": "This is a simple text response for testing."}])
        self.assertFalse(result["isError"])

    def test_each_content_fixture_returns_its_kind_of_block(self) -> None:
        kinds = {
            "test_image_content": ["image"],
            "test_audio_content": ["audio"],
            "test_embedded_resource": ["resource"],
            "test_multiple_content_types": ["text", "image", "resource"],
        }
        for name, expected in kinds.items():
            with self.subTest(name):
                content = self.call(name, {})["content"]
                self.assertEqual([block["type"] for block in content], expected)
        self.assertEqual(self.call("test_audio_content", {})["content"][0]["mimeType"], "audio/wav")
        image = self.call("test_image_content", {})["content"][0]
        self.assertTrue(base64.b64decode(image["data"], validate=True).startswith(b"\x89PNG"))

    def test_the_error_fixture_is_an_is_error_result_not_a_protocol_error(self) -> None:
        result = self.call("test_error_handling", {})
        self.assertTrue(result["isError"])
        self.assertEqual(result["content"][0]["text"], "This tool intentionally returns an error for testing")

    def test_progress_echoes_the_request_token_in_three_non_decreasing_notifications(self) -> None:
        self.call("test_tool_with_progress", {}, progressToken="progress-test-1")
        self.assertEqual([e["method"] for e in self.events], ["notifications/progress"] * 3)
        self.assertEqual({e["params"]["progressToken"] for e in self.events}, {"progress-test-1"})
        self.assertEqual([e["params"]["progress"] for e in self.events], [0, 50, 100])

    def test_progress_keeps_an_integer_token_an_integer(self) -> None:
        self.call("test_tool_with_progress", {}, progressToken=7)
        self.assertEqual([e["params"]["progressToken"] for e in self.events], [7, 7, 7])

    def test_no_progress_is_sent_without_a_token_or_with_an_illegal_one(self) -> None:
        for token in (None, True, 1.5, {"t": 1}):
            with self.subTest(token=token):
                extra = {} if token is None else {"progressToken": token}
                self.assertEqual(
                    self.call("test_tool_with_progress", {}, **extra)["content"][0]["text"], "Progress complete."
                )
        self.assertEqual(self.events, [])

    def test_a_tool_needing_sampling_is_refused_with_missing_capability_when_undeclared(self) -> None:
        error = self.error("tools/call", {"name": "test_missing_capability", "arguments": {}}, capabilities={})
        self.assertEqual(error["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)
        self.assertEqual(error["data"], {"requiredCapabilities": {"sampling": {}}})
        self.assertFalse(self.call("test_missing_capability", {}, capabilities={"sampling": {}})["isError"])

    def test_the_logging_tool_sends_no_log_message(self) -> None:
        self.assertFalse(self.call("test_logging_tool", {}, capabilities={})["isError"])
        self.assertEqual(self.events, [])

    def test_an_unexpected_argument_is_an_is_error_result_the_model_can_correct(self) -> None:
        for name in ("test_simple_text", "test_input_required_result_elicitation"):
            with self.subTest(name):
                result = self.call(name, {"surprise": 1})
                self.assertTrue(result["isError"])
                self.assertIn("unexpected property 'surprise'", result["content"][0]["text"])

    def test_arguments_that_are_not_an_object_are_invalid_params(self) -> None:
        for name in ("test_simple_text", "test_input_required_result_elicitation", "json_schema_2020_12_tool"):
            with self.subTest(name):
                self.assertEqual(self.call_error(name, ["a"])["code"], main.INVALID_PARAMS)

    def test_the_json_schema_2020_12_tool_publishes_its_schema_keywords_intact(self) -> None:
        tools = {t["name"]: t for t in self.result("tools/list")["tools"]}
        schema = tools["json_schema_2020_12_tool"]["inputSchema"]
        self.assertEqual(schema["$schema"], "https://json-schema.org/draft/2020-12/schema")
        self.assertEqual(schema["$defs"]["address"]["$anchor"], "addressDef")
        self.assertEqual(schema["allOf"], [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}])
        self.assertEqual([schema[k] for k in ("then", "else")], [{"required": ["phone"]}, {"required": ["email"]}])
        self.assertIs(schema["additionalProperties"], False)

    def test_the_json_schema_2020_12_tool_validates_its_arguments(self) -> None:
        valid = [
            {"email": "a@b"},
            {"contactMethod": "phone", "phone": "1"},
            {"email": "e", "address": {"city": "Paris"}},
        ]
        invalid = [
            {},  # neither phone nor email
            {"contactMethod": "phone", "email": "e"},  # if/then: phone is required
            {"contactMethod": "fax", "email": "e"},  # enum
            {"email": "e", "address": {"city": 5}},  # $ref'd property type
            {"email": "e", "extra": True},  # additionalProperties
            {"email": 5},  # type
        ]
        for arguments in valid:
            with self.subTest(valid=arguments):
                self.assertFalse(self.call("json_schema_2020_12_tool", arguments)["isError"])
        for arguments in invalid:
            with self.subTest(invalid=arguments):
                self.assertTrue(self.call("json_schema_2020_12_tool", arguments)["isError"])

    def test_the_header_parameter_tool_requires_its_string_argument(self) -> None:
        self.assertEqual(self.call("test_header_param", {"region": "eu"})["content"][0]["text"], "Region: eu")
        self.assertTrue(self.call("test_header_param", {})["isError"])
        self.assertTrue(self.call("test_header_param", {"region": 5})["isError"])


# =====================================================================================
# input_required flows through the core's confirmation cycle
# =====================================================================================


def accept(content: dict[str, Any]) -> dict[str, Any]:
    """An accepted elicitation answer."""
    return {"action": "accept", "content": content}


def sampled(text: str) -> dict[str, Any]:
    """A sampling answer."""
    return {
        "role": "assistant",
        "content": {"type": "text", "text": text},
        "model": "test-model",
        "stopReason": "endTurn",
    }


ROOTS = {"roots": [{"uri": "file:///test/root", "name": "Test Root"}]}


class InputRequiredTests(FixtureCase):
    def retry(self, name: str, first: dict[str, Any], responses: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The retry of `first` with these answers and its state echoed; the whole response."""
        extra = {"inputResponses": responses, "requestState": first["requestState"]}
        return self.send("tools/call", {"name": name, "arguments": {}, **extra}, **kwargs)

    def test_elicitation_asks_under_user_name_then_greets_from_the_answer(self) -> None:
        name = "test_input_required_result_elicitation"
        first = self.call(name, {})
        self.assertEqual(first["resultType"], "input_required")
        self.assertEqual(list(first["inputRequests"]), ["user_name"])
        self.assertEqual(first["inputRequests"]["user_name"]["method"], "elicitation/create")
        final = self.retry(name, first, {"user_name": accept({"name": "Alice"}), "extra_key": accept({"x": 1})})[
            "result"
        ]
        self.assertEqual(final["content"][0]["text"], "Hello, Alice!")

    def test_a_replayed_answer_is_refused_by_the_core(self) -> None:
        name = "test_input_required_result_elicitation"
        first = self.call(name, {})
        answers = {"user_name": accept({"name": "Alice"})}
        self.assertIn("result", self.retry(name, first, answers))
        self.assertEqual(
            self.retry(name, first, answers)["error"], {"code": main.INVALID_PARAMS, "message": main.STATE_INVALID}
        )

    def test_a_tampered_state_gets_the_cores_invalid_params_and_leaves_the_flow_usable(self) -> None:
        name = "test_input_required_result_tampered_state"
        first = self.call(name, {})
        tampered = dict(first, requestState=first["requestState"] + "-TAMPERED")
        answers = {"confirm": accept({"ok": True})}
        self.assertEqual(
            self.retry(name, tampered, answers)["error"], {"code": main.INVALID_PARAMS, "message": main.STATE_INVALID}
        )
        self.assertIn("refused requestState: bad MAC", support.logged(self.server))
        self.assertEqual(self.retry(name, first, answers)["result"]["content"][0]["text"], "confirmed=True")

    def test_a_state_signed_for_one_fixture_is_refused_by_another(self) -> None:
        first = self.call("test_input_required_result_request_state", {})
        response = self.retry("test_input_required_result_tampered_state", first, {"confirm": accept({"ok": True})})
        self.assertEqual(response["error"]["code"], main.INVALID_PARAMS)

    def test_a_missing_answer_is_asked_again_in_the_same_flow(self) -> None:
        name = "test_input_required_result_elicitation"
        first = self.call(name, {})
        again = self.retry(name, first, {"wrong_key": accept({"data": "wrong"})})["result"]
        self.assertEqual(again["resultType"], "input_required")
        self.assertEqual(list(again["inputRequests"]), ["user_name"])
        self.assertIn("result", self.retry(name, again, {"user_name": accept({"name": "Bo"})}))
        # The earlier state belonged to the same flow, which is now consumed.
        self.assertEqual(
            self.retry(name, first, {"user_name": accept({"name": "Bo"})})["error"]["code"], main.INVALID_PARAMS
        )

    def test_malformed_answers_are_invalid_params_and_consume_nothing(self) -> None:
        name = "test_input_required_result_elicitation"
        first = self.call(name, {})
        for answer in (12345, accept({"name": 5}), {"action": "maybe"}):
            with self.subTest(answer=answer):
                self.assertEqual(self.retry(name, first, {"user_name": answer})["error"]["code"], main.INVALID_PARAMS)
        self.assertIn("result", self.retry(name, first, {"user_name": accept({"name": "Alice"})}))

    def test_answers_without_the_state_are_refused(self) -> None:
        for responses in ({"user_name": accept({"name": "Alice"})}, None):
            with self.subTest(responses=responses):
                error = self.call_error("test_input_required_result_elicitation", {}, inputResponses=responses)
                self.assertEqual(error["code"], main.INVALID_PARAMS)

    def test_a_declined_form_ends_the_flow_without_an_error(self) -> None:
        name = "test_input_required_result_elicitation"
        first = self.call(name, {})
        final = self.retry(name, first, {"user_name": {"action": "decline"}})["result"]
        self.assertFalse(final["isError"])
        self.assertIn("decline", final["content"][0]["text"])
        self.assertEqual(
            self.retry(name, first, {"user_name": accept({"name": "A"})})["error"]["code"], main.INVALID_PARAMS
        )

    def test_sampling_asks_the_model_and_uses_its_text(self) -> None:
        name = "test_input_required_result_sampling"
        first = self.call(name, {})
        request = first["inputRequests"]["capital_question"]
        self.assertEqual((request["method"], request["params"]["maxTokens"]), ("sampling/createMessage", 100))
        final = self.retry(name, first, {"capital_question": sampled("Paris.")})["result"]
        self.assertEqual(final["content"][0]["text"], "LLM said: Paris.")
        first = self.call(name, {})
        self.assertEqual(
            self.retry(name, first, {"capital_question": {"content": "Paris"}})["error"]["code"], main.INVALID_PARAMS
        )

    def test_list_roots_asks_for_the_roots_and_names_them(self) -> None:
        name = "test_input_required_result_list_roots"
        first = self.call(name, {})
        self.assertEqual(first["inputRequests"], {"client_roots": {"method": "roots/list", "params": {}}})
        self.assertIn(
            "file:///test/root", self.retry(name, first, {"client_roots": ROOTS})["result"]["content"][0]["text"]
        )
        first = self.call(name, {})
        self.assertEqual(
            self.retry(name, first, {"client_roots": {"roots": [{"name": "no uri"}]}})["error"]["code"],
            main.INVALID_PARAMS,
        )

    def test_request_state_is_a_signed_string_and_completes_with_state_ok(self) -> None:
        name = "test_input_required_result_request_state"
        first = self.call(name, {})
        self.assertTrue(first["requestState"].startswith(main.STATE_VERSION + "."))
        self.assertIn(
            "state-ok", self.retry(name, first, {"confirm": accept({"ok": True})})["result"]["content"][0]["text"]
        )

    def test_multiple_inputs_asks_all_three_kinds_at_once_and_needs_every_answer(self) -> None:
        name = "test_input_required_result_multiple_inputs"
        first = self.call(name, {})
        methods = {key: r["method"] for key, r in first["inputRequests"].items()}
        self.assertEqual(
            methods,
            {"user_name": "elicitation/create", "greeting": "sampling/createMessage", "client_roots": "roots/list"},
        )
        partial = self.retry(name, first, {"user_name": accept({"name": "Alice"}), "client_roots": ROOTS})["result"]
        self.assertEqual(partial["resultType"], "input_required")
        answers = {"user_name": accept({"name": "Alice"}), "greeting": sampled("Hello there!"), "client_roots": ROOTS}
        self.assertEqual(
            self.retry(name, partial, answers)["result"]["content"][0]["text"], "Hello there! Alice (1 roots)"
        )

    def test_multiple_inputs_names_every_missing_capability(self) -> None:
        error = self.error(
            "tools/call",
            {"name": "test_input_required_result_multiple_inputs", "arguments": {}},
            capabilities={"sampling": {}},
        )
        self.assertEqual(error["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)
        self.assertEqual(error["data"]["requiredCapabilities"], {"elicitation": {"form": {}}, "roots": {}})

    def test_multi_round_carries_the_first_answer_in_the_signed_state(self) -> None:
        name = "test_input_required_result_multi_round"
        first = self.call(name, {})
        self.assertEqual(list(first["inputRequests"]), ["step1"])
        second = self.retry(name, first, {"step1": accept({"name": "Alice"})})["result"]
        self.assertEqual(list(second["inputRequests"]), ["step2"])
        self.assertNotEqual(second["requestState"], first["requestState"])
        final = self.retry(name, second, {"step2": accept({"color": "blue"})})["result"]
        self.assertEqual(final["content"][0]["text"], "Alice likes blue.")
        # Both rounds' states share one nonce: once finished, neither can act again.
        for state in (first, second):
            self.assertEqual(
                self.retry(name, state, {"step1": accept({"name": "Eve"}), "step2": accept({"color": "red"})})["error"][
                    "code"
                ],
                main.INVALID_PARAMS,
            )

    def test_multi_round_does_not_take_the_second_answer_in_the_first_round(self) -> None:
        name = "test_input_required_result_multi_round"
        first = self.call(name, {})
        again = self.retry(name, first, {"step2": accept({"color": "blue"})})["result"]
        self.assertEqual(list(again["inputRequests"]), ["step1"])

    def test_the_capability_fixture_asks_only_what_the_client_declares(self) -> None:
        name = "test_input_required_result_capabilities"
        only_sampling = self.call(name, {}, capabilities={"sampling": {}})
        self.assertEqual([r["method"] for r in only_sampling["inputRequests"].values()], ["sampling/createMessage"])
        both = self.call(name, {})
        self.assertEqual(
            sorted(r["method"] for r in both["inputRequests"].values()),
            ["elicitation/create", "sampling/createMessage"],
        )
        error = self.error("tools/call", {"name": name, "arguments": {}}, capabilities={})
        self.assertEqual(error["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)

    def test_streaming_elicitation_answers_with_input_required_and_no_request_on_the_stream(self) -> None:
        result = self.call("test_streaming_elicitation", {}, capabilities={"elicitation": {}})
        self.assertEqual(result["resultType"], "input_required")
        self.assertEqual(self.events, [])

    def test_an_answer_longer_than_the_limit_is_cut_to_the_limit(self) -> None:
        name = "test_input_required_result_elicitation"
        for length, kept in (
            (fixtures.MAX_ANSWER_TEXT, fixtures.MAX_ANSWER_TEXT),
            (fixtures.MAX_ANSWER_TEXT + 1, fixtures.MAX_ANSWER_TEXT),
        ):
            with self.subTest(length=length):
                first = self.call(name, {})
                text = self.retry(name, first, {"user_name": accept({"name": "x" * length})})["result"]["content"][0][
                    "text"
                ]
                self.assertEqual(text, "Hello, " + "x" * kept + "!")


# =====================================================================================
# Tools the 2025-11-25 suite calls (asked as input_required here, live by the legacy adapter)
# =====================================================================================


class LegacyEraToolTests(FixtureCase):
    def retry_with(self, name: str, arguments: dict[str, Any], responses: dict[str, Any]) -> dict[str, Any]:
        """First call, then its retry with these answers: the retry's whole response."""
        first = self.call(name, arguments)
        extra = {"inputResponses": responses, "requestState": first["requestState"]}
        return self.send("tools/call", {"name": name, "arguments": arguments, **extra})

    def test_the_logging_tool_sends_three_info_messages_through_notify(self) -> None:
        self.assertFalse(self.call("test_tool_with_logging", {})["isError"])
        self.assertEqual([(e["method"], e["params"]["level"], e["params"]["data"]) for e in self.events],
                         [("notifications/message", "info", step) for step in fixtures.LOG_STEPS])  # fmt: skip

    def test_sampling_asks_the_callers_prompt_cut_to_the_limit(self) -> None:
        for length, kept in (
            (fixtures.MAX_ANSWER_TEXT, fixtures.MAX_ANSWER_TEXT),
            (fixtures.MAX_ANSWER_TEXT + 1, fixtures.MAX_ANSWER_TEXT),
        ):
            with self.subTest(length=length):
                first = self.call("test_sampling", {"prompt": "p" * length})
                asked = first["inputRequests"]["llm_answer"]["params"]
                self.assertEqual((asked["messages"][0]["content"]["text"], asked["maxTokens"]), ("p" * kept, 100))
        final = self.retry_with("test_sampling", {"prompt": "Q"}, {"llm_answer": sampled("A")})["result"]
        self.assertEqual(final["content"][0]["text"], "LLM response: A")

    def test_a_state_for_one_prompt_is_refused_for_another(self) -> None:
        first = self.call("test_sampling", {"prompt": "one"})
        extra = {"inputResponses": {"llm_answer": sampled("A")}, "requestState": first["requestState"]}
        error = self.error("tools/call", {"name": "test_sampling", "arguments": {"prompt": "two"}, **extra})
        self.assertEqual(error["code"], main.INVALID_PARAMS)

    def test_the_tools_with_arguments_need_them(self) -> None:
        for name in ("test_sampling", "test_elicitation"):
            with self.subTest(name=name):
                self.assertIs(self.call(name, {})["isError"], True)

    def test_the_defaults_form_keeps_every_typed_field_and_drops_others(self) -> None:
        content = {"name": "Jane", "age": 25, "score": 88.5, "status": "inactive", "verified": False}
        final = self.retry_with(
            "test_elicitation_sep1034_defaults", {}, {"defaults": accept({**content, "extra": "x" * 50})}
        )
        self.assertEqual(
            final["result"]["content"][0]["text"],
            "Elicitation completed: action=accept, content=" + json.dumps(content, sort_keys=True),
        )

    def test_a_defaults_answer_of_the_wrong_type_is_invalid_params(self) -> None:
        for bad in ({"age": 2.5}, {"age": True}, {"score": "high"}, {"status": "gone"}, {"verified": "yes"}):
            with self.subTest(bad=bad):
                self.assertEqual(
                    self.retry_with("test_elicitation_sep1034_defaults", {}, {"defaults": accept(bad)})["error"][
                        "code"
                    ],
                    main.INVALID_PARAMS,
                )

    def test_the_enums_form_accepts_each_enum_kind_and_refuses_values_outside_them(self) -> None:
        good = {
            "untitledSingle": "option1",
            "titledSingle": "value1",
            "legacyEnum": "opt1",
            "untitledMulti": ["option1", "option2"],
            "titledMulti": ["value1", "value2"],
        }
        self.assertIn("result", self.retry_with("test_elicitation_sep1330_enums", {}, {"enums": accept(good)}))
        for bad in (
            {"titledSingle": "value9"},
            {"untitledMulti": ["option9"]},
            {"titledMulti": "value1"},
            {"legacyEnum": "Option One"},
        ):
            with self.subTest(bad=bad):
                self.assertEqual(
                    self.retry_with("test_elicitation_sep1330_enums", {}, {"enums": accept(bad)})["error"]["code"],
                    main.INVALID_PARAMS,
                )

    def test_a_multi_select_answer_longer_than_the_limit_is_cut_to_the_limit(self) -> None:
        for length, kept in (
            (fixtures.MAX_ANSWER_ITEMS, fixtures.MAX_ANSWER_ITEMS),
            (fixtures.MAX_ANSWER_ITEMS + 1, fixtures.MAX_ANSWER_ITEMS),
        ):
            with self.subTest(length=length):
                final = self.retry_with(
                    "test_elicitation_sep1330_enums", {}, {"enums": accept({"untitledMulti": ["option1"] * length})}
                )
                text = final["result"]["content"][0]["text"]
                self.assertEqual(json.loads(text.split("content=", 1)[1]), {"untitledMulti": ["option1"] * kept})


# =====================================================================================
# Prompts, resources and completions
# =====================================================================================


class PromptTests(FixtureCase):
    def test_prompts_list_names_and_describes_every_prompt_with_cache_hints(self) -> None:
        result = self.result("prompts/list", {})
        self.assertEqual([p["name"] for p in result["prompts"]], list(fixtures.PROMPTS))
        self.assertTrue(all(p["description"] for p in result["prompts"]))
        self.assertEqual(
            (result["ttlMs"], result["cacheScope"], result["resultType"]), (fixtures.LIST_TTL_MS, "public", "complete")
        )

    def test_each_prompt_renders_its_messages(self) -> None:
        simple = self.result("prompts/get", {"name": "test_simple_prompt"})["messages"]
        self.assertEqual(
            simple, [{"role": "user", "content": {"type": "text", "text": "This is a simple prompt for testing."}}]
        )
        args = self.result(
            "prompts/get", {"name": "test_prompt_with_arguments", "arguments": {"arg1": "v1", "arg2": "v2"}}
        )
        self.assertEqual(args["messages"][0]["content"]["text"], "Prompt with arguments: arg1='v1', arg2='v2'")
        embedded = self.result(
            "prompts/get", {"name": "test_prompt_with_embedded_resource", "arguments": {"resourceUri": "test://x"}}
        )
        self.assertEqual(embedded["messages"][0]["content"]["resource"]["uri"], "test://x")
        image = self.result("prompts/get", {"name": "test_prompt_with_image"})["messages"]
        self.assertEqual([m["content"]["type"] for m in image], ["image", "text"])

    def test_unknown_prompts_and_bad_arguments_are_invalid_params(self) -> None:
        bad: list[dict[str, Any]] = [
            {"name": "no_such_prompt"},
            {"name": 5},
            {"name": "test_prompt_with_arguments", "arguments": {"arg1": "only one"}},
            {"name": "test_prompt_with_arguments", "arguments": {"arg1": "a", "arg2": 2}},
            {"name": "test_prompt_with_arguments", "arguments": ["a", "b"]},
        ]
        for params in bad:
            with self.subTest(params=params):
                self.assertEqual(self.error("prompts/get", params)["code"], main.INVALID_PARAMS)

    def test_the_input_required_prompt_asks_for_context_then_uses_it(self) -> None:
        first = self.result("prompts/get", {"name": "test_input_required_result_prompt"})
        self.assertEqual(first["resultType"], "input_required")
        self.assertNotIn("requestState", first)
        answer = {"user_context": accept({"context": "test context"})}
        final = self.result("prompts/get", {"name": "test_input_required_result_prompt", "inputResponses": answer})
        self.assertEqual(final["messages"][0]["content"]["text"], "Use this context: test context")

    def test_the_input_required_prompt_refuses_a_state_it_never_issued_and_malformed_answers(self) -> None:
        name = "test_input_required_result_prompt"
        answer = {"user_context": accept({"context": "c"})}
        self.assertEqual(
            self.error("prompts/get", {"name": name, "inputResponses": answer, "requestState": "forged"})["code"],
            main.INVALID_PARAMS,
        )
        self.assertEqual(self.error("prompts/get", {"name": name, "inputResponses": [1]})["code"], main.INVALID_PARAMS)
        self.assertEqual(
            self.error("prompts/get", {"name": name, "inputResponses": {"user_context": 1}})["code"],
            main.INVALID_PARAMS,
        )
        self.assertEqual(
            self.error("prompts/get", {"name": name}, capabilities={})["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY
        )

    def test_lists_refuse_any_cursor(self) -> None:
        for method in ("prompts/list", "resources/list", "resources/templates/list"):
            with self.subTest(method):
                self.assertEqual(self.error(method, {"cursor": "x"})["code"], main.INVALID_PARAMS)


class ResourceTests(FixtureCase):
    def read(self, uri: Any) -> dict[str, Any]:
        return self.send("resources/read", {"uri": uri})

    def test_resources_list_puts_a_readable_text_resource_first_with_cache_hints(self) -> None:
        result = self.result("resources/list", {})
        self.assertEqual(
            [r["uri"] for r in result["resources"]],
            ["test://static-text", "test://static-binary", "test://watched-resource"],
        )
        self.assertEqual((result["ttlMs"], result["cacheScope"]), (fixtures.LIST_TTL_MS, "public"))
        self.assertIn("text", self.read(result["resources"][0]["uri"])["result"]["contents"][0])

    def test_text_and_binary_resources_read_with_cache_hints(self) -> None:
        text = self.read("test://static-text")["result"]
        self.assertEqual(text["contents"], [fixtures.RESOURCES["test://static-text"]["contents"]])
        self.assertEqual((text["ttlMs"], text["cacheScope"]), (fixtures.LIST_TTL_MS, "public"))
        self.assertEqual(self.read("test://static-binary")["result"]["contents"][0]["blob"], fixtures.PNG_BASE64)

    def test_the_template_lists_and_reads_with_the_id_in_the_data(self) -> None:
        self.assertEqual(
            self.result("resources/templates/list", {})["resourceTemplates"][0]["uriTemplate"],
            "test://template/{id}/data",
        )
        contents = self.read("test://template/123/data")["result"]["contents"][0]
        self.assertEqual(json.loads(contents["text"]), {"id": "123", "templateTest": True, "data": "Data for ID: 123"})

    def test_a_template_id_up_to_the_limit_reads_and_a_longer_one_is_not_found(self) -> None:
        ok = "i" * fixtures.MAX_TEMPLATE_ID_LENGTH
        self.assertIn("result", self.read(f"test://template/{ok}/data"))
        too_long = f"test://template/{ok}i/data"
        self.assertEqual(
            self.read(too_long)["error"],
            {"code": main.INVALID_PARAMS, "message": "Resource not found", "data": {"uri": too_long}},
        )

    def test_an_unknown_resource_is_invalid_params_naming_the_uri(self) -> None:
        for uri in (
            "test://nonexistent-resource-for-conformance-testing",
            "test://template/a/b/data",
            "test://template/../data",
        ):
            with self.subTest(uri):
                self.assertEqual(self.read(uri)["error"]["data"], {"uri": uri})

    def test_a_uri_longer_than_the_limit_is_refused_without_being_echoed(self) -> None:
        at_limit = "test://" + "u" * (main.MAX_URI_LENGTH - len("test://"))
        self.assertEqual(self.read(at_limit)["error"]["data"], {"uri": at_limit})
        error = self.read(at_limit + "u")["error"]
        self.assertEqual(error["code"], main.INVALID_PARAMS)
        self.assertNotIn("data", error)
        for uri in (None, 5, ""):
            self.assertEqual(self.read(uri)["error"]["code"], main.INVALID_PARAMS)


class CompletionTests(FixtureCase):
    def complete(self, ref: Any, argument: Any) -> dict[str, Any]:
        return self.send("completion/complete", {"ref": ref, "argument": argument})

    def test_completion_offers_the_known_values_starting_with_what_was_typed(self) -> None:
        ref = {"type": "ref/prompt", "name": "test_prompt_with_arguments"}
        completion = self.complete(ref, {"name": "arg1", "value": "test"})["result"]["completion"]
        self.assertEqual(completion, {"values": ["test", "testing", "test-value"], "total": 3, "hasMore": False})
        self.assertEqual(self.complete(ref, {"name": "arg1", "value": "zzz"})["result"]["completion"]["values"], [])

    def test_unknown_references_are_invalid_params(self) -> None:
        bad = [
            ({"type": "ref/prompt", "name": "test_simple_prompt"}, {"name": "arg1", "value": ""}),
            ({"type": "ref/resource", "uri": "test://static-text"}, {"name": "arg1", "value": ""}),
            ({"type": "ref/prompt", "name": "test_prompt_with_arguments"}, {"name": "arg1", "value": 5}),
            ("ref", {"name": "arg1", "value": ""}),
            ({"type": "ref/prompt", "name": ["test_prompt_with_arguments"]}, {"name": "arg1", "value": ""}),
            ({"type": "ref/prompt", "name": "test_prompt_with_arguments"}, {"name": {"arg": 1}, "value": ""}),
        ]
        for ref, argument in bad:
            with self.subTest(ref=ref, argument=argument):
                self.assertEqual(self.complete(ref, argument)["error"]["code"], main.INVALID_PARAMS)

    def test_at_most_the_limit_of_values_is_sent_and_more_is_flagged(self) -> None:
        ref = {"type": "ref/prompt", "name": "test_prompt_with_arguments"}
        for count, has_more in ((fixtures.MAX_COMPLETIONS, False), (fixtures.MAX_COMPLETIONS + 1, True)):
            with (
                self.subTest(count=count),
                mock.patch.dict(
                    fixtures.COMPLETIONS, {("test_prompt_with_arguments", "arg1"): [f"v{i}" for i in range(count)]}
                ),
            ):
                completion = self.complete(ref, {"name": "arg1", "value": "v"})["result"]["completion"]
                self.assertEqual(
                    (len(completion["values"]), completion["total"], completion["hasMore"]),
                    (fixtures.MAX_COMPLETIONS, count, has_more),
                )


# =====================================================================================
# HTTP headers the fixtures exercise: Mcp-Name on prompts/resources, Mcp-Param-{H}
# =====================================================================================


class HeaderTests(FixtureCase):
    def post(self, method: str, params: dict[str, Any], **headers: str) -> dict[str, Any]:
        """One body through streamable_http.answer with the standard headers plus `headers`."""
        message = support.request(method, params, capabilities=ALL)
        base = {"MCP-Protocol-Version": main.PROTOCOL_VERSION, "Mcp-Method": method}
        pairs = [(k.replace("_", "-").lower(), v) for k, v in {**base, **headers}.items()]
        status, body = streamable_http.answer(self.server, json.dumps(message).encode(), support.PRINCIPAL, pairs)
        response = json.loads(body or b"{}")
        response["status"] = status
        return response

    def region(self, body: Any, **headers: str) -> dict[str, Any]:
        arguments = {} if body is None else {"region": body}
        return self.post(
            "tools/call", {"name": "test_header_param", "arguments": arguments}, Mcp_Name="test_header_param", **headers
        )

    def test_a_parameter_header_matching_the_body_is_accepted_plain_or_base64(self) -> None:
        self.assertEqual(self.region("Hello", Mcp_Param_Region="Hello")["status"], 200)
        self.assertEqual(self.region("Hello", Mcp_Param_Region="=?base64?SGVsbG8=?=")["status"], 200)

    def test_a_missing_mismatched_or_badly_encoded_parameter_header_is_a_header_mismatch(self) -> None:
        cases = [
            ("Hello", {}),
            ("Hello", {"Mcp_Param_Region": "Bye"}),
            ("Hello", {"Mcp_Param_Region": "=?base64?SGVsbG8?="}),
            ("Hello", {"Mcp_Param_Region": "=?base64?SGVs!!!bG8=?="}),
            (None, {"Mcp_Param_Region": "Hello"}),  # a header for an argument the body does not have
        ]
        for body, headers in cases:
            with self.subTest(body=body, headers=headers):
                response = self.region(body, **headers)
                self.assertEqual((response["status"], response["error"]["code"]), (400, frame.HEADER_MISMATCH))
        self.assertEqual(self.events, [])

    def test_no_header_is_expected_when_the_argument_is_absent(self) -> None:
        response = self.region(None)
        self.assertEqual(response["status"], 200)
        self.assertTrue(response["result"]["isError"])  # the schema requires region: a tool error, not a header one

    def test_a_tool_name_that_is_not_a_string_is_refused_never_an_internal_error(self) -> None:
        for name in (["test_header_param"], {"n": 1}):
            with self.subTest(name=name):
                response = self.post("tools/call", {"name": name, "arguments": {}}, Mcp_Name="test_header_param")
                self.assertEqual(response["error"]["code"], frame.HEADER_MISMATCH)
                response = self.post("tools/call", {"name": name, "arguments": {}}, Mcp_Name=json.dumps(name))
                self.assertIn(response["error"]["code"], (frame.HEADER_MISMATCH, main.INVALID_PARAMS))
        self.assertEqual([line for line in support.logged(self.server) if "internal error" in line], [])

    def test_header_values_compare_by_the_body_values_type(self) -> None:
        self.assertTrue(streamable_http.header_matches("true", True))
        self.assertFalse(streamable_http.header_matches("True", True))
        self.assertTrue(streamable_http.header_matches("-12", -12))
        for spelling in ("+12", " 12", "1_2", "12.0"):
            self.assertFalse(streamable_http.header_matches(spelling, 12))
        self.assertFalse(streamable_http.header_matches("5", "6"))
        self.assertFalse(streamable_http.header_matches("{}", {}))

    def test_mcp_name_must_match_on_prompts_get_and_resources_read(self) -> None:
        ok = self.post("prompts/get", {"name": "test_simple_prompt"}, Mcp_Name="test_simple_prompt")
        self.assertEqual(ok["status"], 200)
        for method, params, name in (
            ("prompts/get", {"name": "test_simple_prompt"}, "test_prompt_with_image"),
            ("resources/read", {"uri": "test://static-text"}, "test://static-binary"),
        ):
            with self.subTest(method):
                self.assertEqual(self.post(method, params, Mcp_Name=name)["error"]["code"], frame.HEADER_MISMATCH)
                self.assertEqual(self.post(method, params)["error"]["code"], frame.HEADER_MISMATCH)
        self.assertEqual(
            self.post("resources/read", {"uri": "test://static-text"}, Mcp_Name="test://static-text")["status"], 200
        )


if __name__ == "__main__":
    unittest.main()
