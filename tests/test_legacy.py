"""The legacy 2025-11-25 adapter: the session driven in memory, plus the few facts only a real `serve --stdio` shows."""

from __future__ import annotations

import json
import threading
import types
import unittest
from typing import Any

from helpers import procs, support
from helpers.legacy_client import CLIENT_INFO, FORM_CLIENT, AuditedStore, LegacyClient, MemoryWire, accepted, choices
from helpers.support import call, request, tps

import conformance_fixtures as fixtures
import frame
import legacy
import main

EVIL_WORKSPACE = "file:///Users/alice/Documents/Notes-evil"
POLL_SECONDS = 0.01  # how often the slow stdout below looks whether the session has closed


def stdio_client(test: unittest.TestCase, *args: str) -> tuple[LegacyClient, procs.StdioServer]:
    """A scripted client talking to a fresh `serve.py --stdio` subprocess (only where the process is the point)."""
    server = procs.StdioServer(test, *args)
    return LegacyClient(server), server


def memory_client(
    test: unittest.TestCase, server: frame.Server | None = None, **kwargs: Any
) -> tuple[LegacyClient, MemoryWire, frame.Server]:
    """A scripted client talking to a LegacyStdioSession in this process (the store is inspectable)."""
    server = server or support.make_server()
    wire = MemoryWire(test, server, **kwargs)
    return LegacyClient(wire), wire, server


def modern_choices(client: LegacyClient, id: str) -> list[str]:
    """Ask the core statelessly (a modern tools/call in the same process) which notes it would offer."""
    client.send(call(tps(), id=id))
    return choices(client.response(id)["result"]["inputRequests"][main.INPUT_KEY])


def texts(result: dict[str, Any]) -> str:
    return " ".join(block["text"] for block in result["content"])


class LegacyHandshakeTests(unittest.TestCase):
    """initialize selects legacy semantics for the process; version negotiation per 2025-11-25."""

    def test_initialize_echoes_the_supported_version_with_server_info_and_no_result_type(self) -> None:
        client, _, _ = memory_client(self)
        result = client.initialize(version="2025-11-25")
        self.assertEqual(result["protocolVersion"], "2025-11-25")
        self.assertEqual(result["serverInfo"], main.SERVER_INFO)
        self.assertEqual(result["capabilities"], {"tools": {}})
        self.assertIn("workspaceUri", result["instructions"])
        for key in ("resultType", "ttlMs", "cacheScope", "supportedVersions", "_meta"):
            self.assertNotIn(key, result)

    def test_an_unknown_requested_version_gets_the_latest_legacy_version(self) -> None:
        client, _, _ = memory_client(self)
        self.assertEqual(client.initialize(version="1999-01-01")["protocolVersion"], legacy.LATEST_LEGACY_VERSION)
        self.assertEqual(legacy.LATEST_LEGACY_VERSION, "2025-11-25")

    def test_ping_after_initialize_is_answered_with_an_empty_result(self) -> None:
        client, _, _ = memory_client(self)
        client.initialize()
        self.assertEqual(client.call("ping"), {"jsonrpc": "2.0", "id": 2, "result": {}})

    def test_before_initialize_legacy_shaped_requests_get_the_cores_answers(self) -> None:
        client, _, _ = memory_client(self)
        self.assertEqual(client.call("ping")["error"]["code"], main.METHOD_NOT_FOUND)
        self.assertEqual(client.call("tools/list")["error"]["code"], main.INVALID_PARAMS)

    def test_an_initialize_missing_its_fields_is_invalid_params_and_selects_nothing(self) -> None:
        client, _, _ = memory_client(self)
        refused = client.call("initialize", {"protocolVersion": "2025-11-25"})
        self.assertEqual(refused["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(client.call("ping")["error"]["code"], main.METHOD_NOT_FOUND)  # still not legacy
        self.assertEqual(client.initialize()["protocolVersion"], "2025-11-25")

    def test_a_second_initialize_is_refused_and_the_first_capabilities_stay(self) -> None:
        client, _, _ = memory_client(self)
        client.initialize(capabilities={})
        again = client.call(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": FORM_CLIENT, "clientInfo": {"name": "x", "version": "1"}},
        )
        self.assertEqual(again["error"]["code"], main.INVALID_REQUEST)
        result = client.response(client.delete())["result"]
        self.assertTrue(result["isError"])
        self.assertIn("elicitation", texts(result))

    def test_no_legacy_keeps_the_modern_method_not_found_naming_the_versions(self) -> None:
        # Without the adapter, stdio lines go straight to the core (stdio_transport.serve_stdio).
        server = support.make_server()
        params = {
            "protocolVersion": "2025-11-25",
            "capabilities": FORM_CLIENT,
            "clientInfo": {"name": "x", "version": "1"},
        }
        refused = support.answered(
            server, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}, support.PRINCIPAL
        )
        self.assertEqual(refused["error"]["code"], main.METHOD_NOT_FOUND)
        self.assertEqual(refused["error"]["data"], {"supported": list(main.SUPPORTED_VERSIONS)})
        self.assertIn(main.PROTOCOL_VERSION, refused["error"]["message"])
        self.assertEqual(
            support.answered(server, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, support.PRINCIPAL)["error"]["code"],
            main.METHOD_NOT_FOUND,
        )


class LegacyToolsTests(unittest.TestCase):
    """tools/list and tools/call in 2025-11-25 shapes, with a live server-initiated elicitation."""

    def setUp(self) -> None:
        self.client, self.wire, self.server = memory_client(self)
        self.client.initialize()

    def test_tools_list_has_the_legacy_shape_and_the_cores_tools(self) -> None:
        result = self.client.call("tools/list")["result"]
        for key in ("resultType", "ttlMs", "cacheScope", "_meta"):
            self.assertNotIn(key, result)
        self.client.send(request("tools/list", id="modern"))
        modern = self.client.response("modern")["result"]
        self.assertEqual(result["tools"], modern["tools"])
        self.assertEqual(modern["resultType"], "complete")  # the core's own answer is unchanged

    def test_accept_deletes_the_chosen_note_and_answers_the_original_call(self) -> None:
        call_id = self.client.delete()
        form = self.client.server_request("elicitation/create")
        self.assertEqual(form["id"], main.INPUT_KEY)
        self.assertEqual(form["params"]["mode"], "form")
        self.assertEqual(choices(form), ["note-3", "note-7", "note-14"])
        self.client.answer(form, accepted("note-14"))
        result = self.client.response(call_id)["result"]
        self.assertEqual(result["structuredContent"], {"deleted": True, "noteId": "note-14"})
        self.assertFalse(result["isError"])
        self.assertNotIn("resultType", result)
        self.assertNotIn("_meta", result)
        self.assertEqual(modern_choices(self.client, "after"), ["note-3", "note-7"])

    def test_decline_deletes_nothing(self) -> None:
        call_id = self.client.delete()
        self.client.answer(self.client.server_request("elicitation/create"), {"action": "decline"})
        result = self.client.response(call_id)["result"]
        self.assertEqual(result["structuredContent"], {"deleted": False, "reason": "declined"})
        self.assertEqual(modern_choices(self.client, "after"), ["note-3", "note-7", "note-14"])

    def test_cancel_deletes_nothing(self) -> None:
        call_id = self.client.delete()
        self.client.answer(self.client.server_request("elicitation/create"), {"action": "cancel"})
        result = self.client.response(call_id)["result"]
        self.assertEqual(result["structuredContent"], {"deleted": False, "reason": "cancelled"})
        self.assertEqual(modern_choices(self.client, "after"), ["note-3", "note-7", "note-14"])

    def test_other_requests_are_answered_while_a_form_is_pending(self) -> None:
        call_id = self.client.delete()
        form = self.client.server_request("elicitation/create")
        self.assertEqual(self.client.call("ping")["result"], {})
        self.assertEqual(len(self.client.call("tools/list")["result"]["tools"]), len(self.server_tools()))
        self.assertEqual(modern_choices(self.client, "meanwhile"), ["note-3", "note-7", "note-14"])
        self.assertEqual(self.client.held, [])  # the call has not been answered yet
        self.client.answer(form, accepted("note-3"))
        self.assertEqual(
            self.client.response(call_id)["result"]["structuredContent"], {"deleted": True, "noteId": "note-3"}
        )

    def server_tools(self) -> list[Any]:
        self.client.send(request("tools/list", id="count"))
        return self.client.response("count")["result"]["tools"]

    def test_invalid_arguments_get_the_cores_is_error_result(self) -> None:
        response = self.client.call(
            "tools/call", {"name": main.TOOL_NAME, "arguments": {"workspaceUri": support.WORKSPACE}}
        )
        self.assertIs(response["result"]["isError"], True)
        self.assertIn("Invalid arguments", response["result"]["content"][0]["text"])

    def test_unknown_legacy_methods_get_method_not_found(self) -> None:
        self.assertEqual(self.client.call("resources/list")["error"]["code"], main.METHOD_NOT_FOUND)


class LegacyWithoutElicitationTests(unittest.TestCase):
    """A client that did not declare elicitation gets a tool error, never a form, never a deletion."""

    def test_a_client_without_elicitation_gets_a_tool_error_and_nothing_is_deleted(self) -> None:
        client, wire, server = memory_client(self)
        client.initialize(capabilities={"roots": {}})
        client.answer(client.server_request("roots/list"), {"roots": []})
        result = client.response(client.delete())["result"]
        self.assertTrue(result["isError"])
        self.assertIn("did not declare", texts(result))
        self.assertEqual(client.held, [])
        self.assertEqual(wire.written_after_close(), [])  # no elicitation/create was ever sent
        self.assertEqual(len(support.note_ids(server)), len(main.lesson_notes()))

    def test_url_only_elicitation_does_not_count_as_form(self) -> None:
        client, wire, server = memory_client(self)
        client.initialize(capabilities={"elicitation": {"url": {}}})
        result = client.response(client.delete())["result"]
        self.assertTrue(result["isError"])
        self.assertIn("form mode", texts(result))
        self.assertEqual(wire.written_after_close(), [])
        self.assertEqual(len(support.note_ids(server)), len(main.lesson_notes()))


class LegacyClientAnswerTests(unittest.TestCase):
    """Responses from the client: only the one awaited counts; anything else changes nothing."""

    def setUp(self) -> None:
        self.client, self.wire, self.server = memory_client(self)
        self.client.initialize()

    def test_unsolicited_and_malformed_responses_are_ignored_and_logged(self) -> None:
        self.client.send({"jsonrpc": "2.0", "id": "nobody-asked", "result": {"action": "accept"}})
        self.client.send({"jsonrpc": "2.0", "id": main.INPUT_KEY, "result": accepted()})  # not asked yet
        self.client.send({"jsonrpc": "2.0", "result": {}})
        self.client.send({"jsonrpc": "2.0", "id": True, "error": {"code": 1, "message": "x"}})
        self.client.send({"jsonrpc": "2.0", "id": 5})
        self.assertEqual(self.client.call("ping")["result"], {})
        self.assertEqual(self.client.held, [])  # none of them got a reply
        self.assertTrue(any("ignored a response" in line for line in self.wire.log))
        call_id = self.client.delete()
        self.client.answer(self.client.server_request("elicitation/create"), accepted("note-7"))
        self.assertEqual(
            self.client.response(call_id)["result"]["structuredContent"], {"deleted": True, "noteId": "note-7"}
        )

    def test_an_error_answer_to_the_form_is_a_tool_error_and_deletes_nothing(self) -> None:
        call_id = self.client.delete()
        self.client.answer(
            self.client.server_request("elicitation/create"), error={"code": main.INTERNAL_ERROR, "message": "no UI"}
        )
        result = self.client.response(call_id)["result"]
        self.assertTrue(result["isError"])
        self.assertEqual(modern_choices(self.client, "after"), ["note-3", "note-7", "note-14"])

    def test_a_malformed_answer_to_the_form_is_a_tool_error_and_deletes_nothing(self) -> None:
        answers: tuple[Any, ...] = (
            {"result": {"action": "delete-everything"}},
            {"result": {"action": "accept", "content": ["note-14"]}},
            {"result": "accept"},
            {"result": accepted(), "error": {"code": 1, "message": "both"}},
            {},
        )
        for answer in answers:
            with self.subTest(answer=answer):
                call_id = self.client.delete()
                form = self.client.server_request("elicitation/create")
                self.client.send({"jsonrpc": "2.0", "id": form["id"], **answer})
                result = self.client.response(call_id)["result"]
                self.assertTrue(result["isError"])
                self.assertIn("malformed", texts(result))
        self.assertEqual(modern_choices(self.client, "after"), ["note-3", "note-7", "note-14"])

    def test_an_answer_choosing_a_note_outside_the_form_deletes_nothing(self) -> None:
        call_id = self.client.delete()
        self.client.answer(self.client.server_request("elicitation/create"), accepted("evil-1"))
        result = self.client.response(call_id)["result"]
        self.assertTrue(result["isError"])
        self.assertIn("nothing was changed", texts(result))
        self.assertEqual(modern_choices(self.client, "after"), ["note-3", "note-7", "note-14"])

    def test_a_duplicate_answer_is_ignored(self) -> None:
        call_id = self.client.delete()
        form = self.client.server_request("elicitation/create")
        self.client.answer(form, accepted("note-14"))
        self.assertTrue(self.client.response(call_id)["result"]["structuredContent"]["deleted"])
        second = self.client.delete()
        again = self.client.server_request("elicitation/create")
        self.assertNotEqual(again["id"], form["id"])  # ids are never reused in the session
        self.client.answer(form, accepted("note-7"))  # the old form's answer, once more
        self.assertEqual(self.client.call("ping")["result"], {})
        self.client.answer(again, {"action": "cancel"})
        self.assertFalse(self.client.response(second)["result"]["structuredContent"]["deleted"])
        self.assertEqual(modern_choices(self.client, "after"), ["note-3", "note-7"])


class DualEraTests(unittest.TestCase):
    """Modern requests are served by the core, statelessly, before and after a legacy initialize."""

    def test_a_modern_request_in_a_legacy_process_is_served_statelessly(self) -> None:
        client, _, _ = memory_client(self)
        client.initialize(capabilities={})  # the legacy session has no elicitation...
        client.send(request("server/discover", id="d"))
        discovered = client.response("d")["result"]
        self.assertEqual(discovered["resultType"], "complete")
        self.assertEqual(discovered["supportedVersions"], list(main.SUPPORTED_VERSIONS))
        client.send(call(tps(), id="m"))  # ...but this modern request declares its own
        first = client.response("m")["result"]
        self.assertEqual(first["resultType"], "input_required")  # MRTR, not a live elicitation
        client.send(call(tps(), id="m2", requestState=first["requestState"], inputResponses=support.accept("note-14")))
        self.assertEqual(client.response("m2")["result"]["structuredContent"], {"deleted": True, "noteId": "note-14"})
        self.assertEqual(client.held, [])

    def test_a_modern_initialize_still_gets_the_cores_method_not_found(self) -> None:
        client, _, _ = memory_client(self)
        client.send(request("initialize", id="i"))
        self.assertEqual(client.response("i")["error"]["code"], main.METHOD_NOT_FOUND)
        self.assertEqual(client.call("ping")["error"]["code"], main.METHOD_NOT_FOUND)  # legacy not selected


class LegacyRootsTests(unittest.TestCase):
    """Roots are asked for when declared, and only ever suggest an already-authorized workspace."""

    def with_roots(
        self, uris: list[str], server: frame.Server | None = None
    ) -> tuple[LegacyClient, MemoryWire, frame.Server]:
        client, wire, server = memory_client(self, server)
        client.initialize(capabilities={"elicitation": {}, "roots": {"listChanged": True}})
        client.answer(client.server_request("roots/list"), {"roots": [{"uri": uri} for uri in uris]})
        self.assertEqual(client.call("ping")["result"], {})  # the answer has been taken
        return client, wire, server

    def test_roots_are_asked_after_initialized_when_declared(self) -> None:
        client, _, _ = memory_client(self)
        client.call(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {"roots": {}},
                "clientInfo": {"name": "x", "version": "1"},
            },
        )
        self.assertEqual(client.call("ping")["result"], {})
        self.assertEqual(client.held, [])  # nothing asked before notifications/initialized
        client.notify("notifications/initialized")
        self.assertEqual(client.server_request("roots/list")["id"], "roots/list")

    def test_roots_are_not_asked_when_not_declared(self) -> None:
        client, wire, _ = memory_client(self)
        client.initialize()
        self.assertEqual(client.call("ping")["result"], {})
        self.assertEqual(client.held, [])
        self.assertEqual(wire.written_after_close(), [])

    def test_a_root_the_principal_is_not_authorized_for_touches_nothing(self) -> None:
        client, wire, server = self.with_roots([EVIL_WORKSPACE, "file:///tmp"])
        for workspace in (EVIL_WORKSPACE, "file:///tmp"):
            result = client.response(client.delete(workspace=workspace))["result"]
            self.assertTrue(result["isError"])
            self.assertEqual(
                texts(result), "That workspace is not authorized for you. Your workspaces: " + support.WORKSPACE + "."
            )
        self.assertEqual(wire.written_after_close(), [])  # no form was shown
        self.assertEqual(support.note_ids(server), sorted(note.id for note in main.lesson_notes()))

    def test_exactly_one_authorized_root_is_suggested_when_a_call_fails(self) -> None:
        client, wire, server = self.with_roots([EVIL_WORKSPACE, support.WORKSPACE + "/", "not a uri"])
        result = client.response(client.delete(workspace=EVIL_WORKSPACE))["result"]
        self.assertTrue(result["isError"])
        self.assertIn(f"roots include {support.WORKSPACE},", texts(result))
        self.assertEqual(wire.written_after_close(), [])  # the suggestion did not run the call
        self.assertIn("evil-1", support.note_ids(server))

    def test_no_suggestion_when_the_call_already_names_that_root(self) -> None:
        client, _, _ = self.with_roots([support.WORKSPACE])
        result = client.response(client.delete(title="no such note"))["result"]
        self.assertTrue(result["isError"])
        self.assertEqual(len(result["content"]), 1)

    def test_a_root_above_the_authorized_workspace_is_not_suggested(self) -> None:
        client, _, _ = self.with_roots(["file:///Users/alice"])
        result = client.response(client.delete(workspace="file:///Users/alice"))["result"]
        self.assertEqual(
            texts(result), "That workspace is not authorized for you. Your workspaces: " + support.WORKSPACE + "."
        )

    def test_two_authorized_roots_give_no_suggestion(self) -> None:
        other = "file:///Users/alice/Work"
        server = support.server_over(main.lesson_notes(), grants={support.PRINCIPAL: [support.WORKSPACE, other]})
        client, _, _ = self.with_roots([support.WORKSPACE, other], server)
        result = client.response(client.delete(workspace=EVIL_WORKSPACE))["result"]
        self.assertEqual(
            texts(result), f"That workspace is not authorized for you. Your workspaces: {support.WORKSPACE}, {other}."
        )

    def test_roots_are_asked_again_after_list_changed_and_the_new_list_is_used(self) -> None:
        client, _, _ = self.with_roots([])
        client.notify("notifications/roots/list_changed")
        client.notify("notifications/roots/list_changed")  # while one is pending: one more later
        second = client.server_request("roots/list")
        self.assertEqual(second["id"], "roots/list#2")
        client.answer(second, {"roots": []})
        third = client.server_request("roots/list")
        self.assertEqual(third["id"], "roots/list#3")
        client.answer(third, {"roots": [{"uri": support.WORKSPACE, "name": "Notes"}]})
        result = client.response(client.delete(workspace=EVIL_WORKSPACE))["result"]
        self.assertIn(support.WORKSPACE, texts(result))

    def test_a_roots_answer_at_the_limit_is_used(self) -> None:
        filler = [f"file:///Users/alice/Other/{n}" for n in range(legacy.MAX_ROOTS - 1)]
        client, _, _ = self.with_roots([*filler, support.WORKSPACE])
        result = client.response(client.delete(workspace=EVIL_WORKSPACE))["result"]
        self.assertIn(support.WORKSPACE, texts(result))

    def test_a_roots_answer_over_the_limit_is_ignored(self) -> None:
        filler = [f"file:///Users/alice/Other/{n}" for n in range(legacy.MAX_ROOTS)]
        client, wire, _ = self.with_roots([*filler, support.WORKSPACE])
        result = client.response(client.delete(workspace=EVIL_WORKSPACE))["result"]
        self.assertEqual(
            texts(result), "That workspace is not authorized for you. Your workspaces: " + support.WORKSPACE + "."
        )
        self.assertTrue(any("roots/list answer ignored" in line for line in wire.log))


class LegacyCancellationTests(unittest.TestCase):
    """A cancelled, timed-out or abandoned call stops waiting, answers nothing and deletes nothing."""

    def test_a_cancelled_call_gets_no_response_and_its_form_is_withdrawn(self) -> None:
        client, wire, server = memory_client(self)
        client.initialize()
        call_id = client.delete()
        form = client.server_request("elicitation/create")
        client.notify("notifications/cancelled", {"requestId": call_id, "reason": "user stopped"})
        withdrawn = client.server_request("notifications/cancelled")
        self.assertEqual(withdrawn["params"]["requestId"], form["id"])
        client.answer(form, accepted())  # too late: nobody waits for it any more
        self.assertEqual(wire.written_after_close(), [])
        self.assertEqual(client.held, [])
        self.assertEqual(len(support.note_ids(server)), len(main.lesson_notes()))

    def test_cancelling_an_unknown_request_changes_nothing(self) -> None:
        client, _, _ = memory_client(self)
        client.initialize()
        call_id = client.delete()
        form = client.server_request("elicitation/create")
        client.notify("notifications/cancelled", {"requestId": "not-in-flight"})
        client.notify("notifications/cancelled", {"requestId": True})
        client.notify("notifications/cancelled", "garbage")
        client.answer(form, accepted())
        self.assertTrue(client.response(call_id)["result"]["structuredContent"]["deleted"])

    def test_an_unanswered_form_times_out_as_a_tool_error_and_a_late_answer_is_ignored(self) -> None:
        client, wire, server = memory_client(self, elicitation_timeout=0)
        client.initialize()
        call_id = client.delete()
        form = client.server_request("elicitation/create")
        self.assertEqual(client.server_request("notifications/cancelled")["params"]["requestId"], form["id"])
        result = client.response(call_id)["result"]
        self.assertTrue(result["isError"])
        self.assertIn("not answered in time", texts(result))
        client.answer(form, accepted())
        self.assertEqual(wire.written_after_close(), [])
        self.assertEqual(len(support.note_ids(server)), len(main.lesson_notes()))


def asking_tool(server: frame.Server, name: str, mode: str = "form") -> None:
    """Register a test tool that asks `arguments.times` forms in turn (state is a plain counter)."""

    def run(call: main.ToolCall) -> dict[str, Any]:
        asked = int(call.state or 0)
        if asked >= call.arguments["times"]:
            return main.tool_result(f"done after {asked}", {"answers": call.responses})
        params: dict[str, Any] = {"mode": mode, "message": f"question {asked + 1}"}
        params.update(
            {"requestedSchema": {"type": "object", "properties": {}}}
            if mode == "form"
            else {"url": "https://example.invalid/x"}
        )
        return {
            "resultType": "input_required",
            "inputRequests": {"q": {"method": "elicitation/create", "params": params}},
            "requestState": str(asked + 1),
        }

    tool = types.SimpleNamespace(
        descriptor={"name": name, "inputSchema": {"type": "object", "properties": {"times": {"type": "integer"}}}},
        call=run,
    )
    server.add_tool(tool)


class LegacyLimitsTests(unittest.TestCase):
    """Concurrent calls, relay rounds and in-flight ids are bounded; each bound on both sides."""

    def setUp(self) -> None:
        self.client, self.wire, self.server = memory_client(self)
        self.client.initialize()

    def test_calls_up_to_the_concurrency_limit_each_get_a_form(self) -> None:
        ids = [self.client.delete() for _ in range(legacy.MAX_CONCURRENT_LEGACY_CALLS)]
        forms = [self.client.server_request("elicitation/create") for _ in ids]
        self.assertEqual(len({form["id"] for form in forms}), len(ids))
        for form in forms:
            self.client.answer(form, {"action": "cancel"})
        for call_id in ids:
            self.assertFalse(self.client.response(call_id)["result"]["isError"])

    def test_one_call_over_the_concurrency_limit_is_refused_as_busy(self) -> None:
        ids = [self.client.delete() for _ in range(legacy.MAX_CONCURRENT_LEGACY_CALLS)]
        forms = [self.client.server_request("elicitation/create") for _ in ids]
        busy = self.client.response(self.client.delete())["result"]
        self.assertTrue(busy["isError"])
        self.assertIn("Too many tool calls", texts(busy))
        self.client.answer(forms[0], {"action": "cancel"})
        # Calls run on worker threads, so the first form may belong to any of them.
        done = self.client.next(lambda m: "method" not in m and m.get("id") in ids)
        self.assertEqual(done["result"]["structuredContent"]["reason"], "cancelled")
        retry = self.client.delete()  # a slot is free again
        self.client.answer(self.client.server_request("elicitation/create"), accepted("note-3"))
        self.assertTrue(self.client.response(retry)["result"]["structuredContent"]["deleted"])
        self.assertEqual(len(support.note_ids(self.server)), len(main.lesson_notes()) - 1)

    def test_a_call_reusing_the_id_of_a_call_in_flight_is_refused(self) -> None:
        call_id = self.client.delete()
        form = self.client.server_request("elicitation/create")
        self.client.send(
            {
                "jsonrpc": "2.0",
                "id": call_id,
                "method": "tools/call",
                "params": {"name": main.TOOL_NAME, "arguments": tps()},
            }
        )
        self.assertEqual(self.client.response(call_id)["error"]["code"], main.INVALID_REQUEST)
        self.client.answer(form, accepted())
        self.assertTrue(self.client.response(call_id)["result"]["structuredContent"]["deleted"])

    def test_a_tool_asking_exactly_the_round_limit_completes(self) -> None:
        asking_tool(self.server, "ask")
        call_id = self.client.request(
            "tools/call", {"name": "ask", "arguments": {"times": legacy.MAX_ELICITATION_ROUNDS}}
        )
        for _ in range(legacy.MAX_ELICITATION_ROUNDS):
            self.client.answer(self.client.server_request("elicitation/create"), {"action": "accept", "content": {}})
        result = self.client.response(call_id)["result"]
        self.assertEqual(result["content"][0]["text"], f"done after {legacy.MAX_ELICITATION_ROUNDS}")
        self.assertEqual(result["structuredContent"], {"answers": {"q": {"action": "accept", "content": {}}}})

    def test_a_tool_asking_more_than_the_round_limit_gets_a_tool_error(self) -> None:
        asking_tool(self.server, "ask")
        call_id = self.client.request(
            "tools/call", {"name": "ask", "arguments": {"times": legacy.MAX_ELICITATION_ROUNDS + 1}}
        )
        for _ in range(legacy.MAX_ELICITATION_ROUNDS):
            self.client.answer(self.client.server_request("elicitation/create"), {"action": "accept", "content": {}})
        result = self.client.response(call_id)["result"]
        self.assertTrue(result["isError"])
        self.assertIn("still needed input", texts(result))
        self.assertEqual(self.wire.written_after_close(), [])  # no fourth form


class LegacyUrlModeTests(unittest.TestCase):
    """URL-mode input is relayed only to a client that declared it, with the id 2025-11-25 requires."""

    def test_a_url_elicitation_is_relayed_with_an_elicitation_id(self) -> None:
        client, _, server = memory_client(self)
        client.initialize(capabilities={"elicitation": {"form": {}, "url": {}}})
        asking_tool(server, "connect", mode="url")
        call_id = client.request("tools/call", {"name": "connect", "arguments": {"times": 1}})
        asked = client.server_request("elicitation/create")
        self.assertEqual(asked["params"]["mode"], "url")
        self.assertEqual(asked["params"]["url"], "https://example.invalid/x")
        self.assertIsInstance(asked["params"]["elicitationId"], str)
        client.answer(asked, {"action": "accept"})
        self.assertEqual(client.response(call_id)["result"]["content"][0]["text"], "done after 1")

    def test_url_input_for_a_form_only_client_is_a_tool_error_without_asking(self) -> None:
        client, wire, server = memory_client(self)
        client.initialize()
        asking_tool(server, "connect", mode="url")
        result = client.call("tools/call", {"name": "connect", "arguments": {"times": 1}})["result"]
        self.assertTrue(result["isError"])
        self.assertEqual(wire.written_after_close(), [])


class LegacyShapeTests(unittest.TestCase):
    """The pure helpers: results lose modern-only keys, capabilities keep only elicitation modes."""

    def test_legacy_result_drops_modern_keys_and_keeps_the_rest(self) -> None:
        modern: dict[str, Any] = {
            "resultType": "complete",
            "ttlMs": 1,
            "cacheScope": "public",
            "content": [],
            "_meta": {main.META_SERVER_INFO: {}, "x/y": 1},
        }
        self.assertEqual(legacy.legacy_result(modern), {"content": [], "_meta": {"x/y": 1}})
        self.assertEqual(json.dumps(modern["_meta"][main.META_SERVER_INFO]), "{}")  # the input is not mutated

    def test_core_capabilities_carry_elicitation_modes_and_sampling_and_never_roots(self) -> None:
        self.assertEqual(
            legacy.core_capabilities({"elicitation": {}, "roots": {"listChanged": True}}), {"elicitation": {"form": {}}}
        )
        self.assertEqual(legacy.core_capabilities({"elicitation": {"url": {}}}), {"elicitation": {"url": {}}})
        self.assertEqual(legacy.core_capabilities({"roots": {}, "sampling": {"tools": {}}}), {"sampling": {}})
        self.assertEqual(legacy.core_capabilities({"roots": {}, "sampling": True}), {})


# ------------------------------------------------------------------ the core's other methods, logging, notifications,
# sampling

SUITE_CLIENT: dict[str, Any] = {"sampling": {}, "elicitation": {}}  # what the 2025-11-25 suite's client declares
MODERN_ONLY_KEYS = ("resultType", "ttlMs", "cacheScope", "_meta")


def fixtures_client(
    test: unittest.TestCase, capabilities: dict[str, Any] | None = None
) -> tuple[LegacyClient, MemoryWire, frame.Server]:
    """An initialized legacy client of a server with the conformance fixtures installed."""
    server = support.make_server()
    fixtures.install(server)
    client, wire, _ = memory_client(test, server)
    client.initialize(capabilities=SUITE_CLIENT if capabilities is None else capabilities)
    return client, wire, server


def sampled(text: str) -> dict[str, Any]:
    """A 2025-11-25 CreateMessageResult."""
    return {
        "role": "assistant",
        "content": {"type": "text", "text": text},
        "model": "test-model",
        "stopReason": "endTurn",
    }


class LegacyForwardingTests(unittest.TestCase):
    """Methods of the core's dispatch table are forwarded as modern requests and shaped to 2025-11-25."""

    def setUp(self) -> None:
        self.client, self.wire, self.server = fixtures_client(self)

    def modern(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.client.send(request(method, params, id="modern", capabilities=SUITE_CLIENT))
        return self.client.response("modern")["result"]

    def test_each_forwarded_result_is_the_cores_without_modern_keys(self) -> None:
        completion = {
            "ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
            "argument": {"name": "arg1", "value": "test"},
        }
        for method, params in (
            ("prompts/list", {}),
            ("prompts/get", {"name": "test_prompt_with_arguments", "arguments": {"arg1": "a", "arg2": "b"}}),
            ("resources/list", {}),
            ("resources/read", {"uri": "test://static-binary"}),
            ("resources/templates/list", {}),
            ("completion/complete", completion),
        ):
            with self.subTest(method=method):
                shaped = self.client.call(method, params)["result"]
                modern = self.modern(method, params)
                self.assertEqual(modern["resultType"], "complete")  # the core's own answer is unchanged
                self.assertEqual(shaped, {key: value for key, value in modern.items() if key not in MODERN_ONLY_KEYS})

    def test_a_core_error_reaches_the_client_unchanged(self) -> None:
        error = self.client.call("resources/read", {"uri": "test://nope"})["error"]
        self.assertEqual((error["code"], error["data"]), (main.INVALID_PARAMS, {"uri": "test://nope"}))

    def test_the_clients_own_meta_never_claims_capabilities_for_it(self) -> None:
        client, _, _ = fixtures_client(self, capabilities={})
        # (With the protocol version too, the request would be modern and answered statelessly.)
        claimed: dict[str, Any] = {main.META_CLIENT_CAPABILITIES: {"elicitation": {}}}
        error = client.call("prompts/get", {"name": "test_input_required_result_prompt", "_meta": claimed})["error"]
        self.assertEqual(error["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)

    def test_a_forwarded_request_that_needs_input_is_refused_and_asks_nothing(self) -> None:
        error = self.client.call("prompts/get", {"name": "test_input_required_result_prompt"})["error"]
        self.assertEqual(error["code"], main.INVALID_REQUEST)
        self.assertEqual((self.client.held, self.wire.session.pending()), ([], 0))

    def test_modern_only_methods_are_not_forwarded(self) -> None:
        for method in ("server/discover", "subscriptions/listen"):
            with self.subTest(method=method):
                self.assertEqual(self.client.call(method, {})["error"]["code"], main.METHOD_NOT_FOUND)

    def test_params_that_are_not_an_object_are_invalid_params(self) -> None:
        self.assertEqual(self.client.call("prompts/list", ["x"])["error"]["code"], main.INVALID_PARAMS)


class LegacySubscriptionTests(unittest.TestCase):
    """resources/subscribe and unsubscribe: {} for a resource the core can read, nothing kept."""

    def test_subscribe_and_unsubscribe_to_a_readable_resource_answer_empty(self) -> None:
        client, _, _ = fixtures_client(self)
        self.assertEqual(client.call("resources/subscribe", {"uri": "test://watched-resource"})["result"], {})
        self.assertEqual(client.call("resources/unsubscribe", {"uri": "test://watched-resource"})["result"], {})

    def test_subscribing_to_an_unknown_resource_is_the_cores_invalid_params(self) -> None:
        client, _, _ = fixtures_client(self)
        error = client.call("resources/subscribe", {"uri": "test://nope"})["error"]
        self.assertEqual((error["code"], error["data"]), (main.INVALID_PARAMS, {"uri": "test://nope"}))

    def test_a_uri_up_to_the_limit_is_looked_up_and_a_longer_one_is_refused_unread(self) -> None:
        client, _, _ = fixtures_client(self)
        at_limit = "test://" + "a" * (main.MAX_URI_LENGTH - len("test://"))
        self.assertEqual(client.call("resources/subscribe", {"uri": at_limit})["error"]["data"], {"uri": at_limit})
        for method in ("resources/subscribe", "resources/unsubscribe"):
            for params in ({"uri": at_limit + "a"}, {}, {"uri": 5}):
                with self.subTest(method=method, params=params):
                    error = client.call(method, params)["error"]
                    self.assertEqual(error["code"], main.INVALID_PARAMS)
                    self.assertNotIn("data", error)  # refused before the core was asked

    def test_without_core_resources_subscribe_is_method_not_found(self) -> None:
        client, _, _ = memory_client(self)
        client.initialize()
        for method in ("resources/subscribe", "resources/unsubscribe"):
            with self.subTest(method=method):
                self.assertEqual(
                    client.call(method, {"uri": "test://watched-resource"})["error"]["code"], main.METHOD_NOT_FOUND
                )


class LegacyLoggingTests(unittest.TestCase):
    """logging/setLevel is the session's: it answers {} and filters the log messages a tool sends."""

    def test_set_level_answers_empty_and_keeps_the_level_for_the_session(self) -> None:
        client, wire, _ = fixtures_client(self)
        self.assertIsNone(wire.session.log_level)
        self.assertEqual(client.call("logging/setLevel", {"level": "debug"})["result"], {})
        self.assertEqual(wire.session.log_level, "debug")

    def test_an_unknown_level_is_invalid_params_and_the_level_stays(self) -> None:
        client, wire, _ = fixtures_client(self)
        client.call("logging/setLevel", {"level": "warning"})
        for params in ({"level": "loud"}, {"level": "WARNING"}, {}, None):
            with self.subTest(params=params):
                self.assertEqual(client.call("logging/setLevel", params)["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(wire.session.log_level, "warning")

    def test_a_tools_log_messages_reach_the_client_in_order_before_its_result(self) -> None:
        client, wire, _ = fixtures_client(self)
        client.call("logging/setLevel", {"level": "debug"})
        call_id = client.request("tools/call", {"name": "test_tool_with_logging", "arguments": {}})
        arrived = [wire.receive() for _ in range(4)]
        self.assertEqual([m.get("method") for m in arrived], ["notifications/message"] * 3 + [None])
        self.assertEqual([m["params"]["data"] for m in arrived[:3]], list(fixtures.LOG_STEPS))
        self.assertEqual(arrived[3]["id"], call_id)
        self.assertNotIn("resultType", arrived[3]["result"])

    def test_messages_at_the_level_are_relayed_and_below_it_are_dropped(self) -> None:
        for level, relayed in (("info", 3), ("notice", 0)):
            with self.subTest(level=level):
                client, _, _ = fixtures_client(self)
                client.call("logging/setLevel", {"level": level})
                result = client.call("tools/call", {"name": "test_tool_with_logging", "arguments": {}})["result"]
                self.assertFalse(result["isError"])
                self.assertEqual(len(client.held), relayed)


class LegacyProgressTests(unittest.TestCase):
    """Progress a tool sends with the client's progressToken is relayed before the result."""

    def test_progress_carries_the_clients_token_before_the_result(self) -> None:
        client, _, _ = fixtures_client(self)
        response = client.call(
            "tools/call",
            {"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "progress-test-1"}},
        )
        self.assertFalse(response["result"]["isError"])
        self.assertEqual([m["method"] for m in client.held], ["notifications/progress"] * 3)
        self.assertEqual(
            [(m["params"]["progressToken"], m["params"]["progress"]) for m in client.held],
            [("progress-test-1", p) for p in (0, 50, 100)],
        )

    def test_no_progress_without_a_token_or_with_an_illegal_one(self) -> None:
        client, _, _ = fixtures_client(self)
        for meta in ({}, {"progressToken": True}, {"progressToken": 1.5}):
            with self.subTest(meta=meta):
                client.call("tools/call", {"name": "test_tool_with_progress", "arguments": {}, "_meta": meta})
                self.assertEqual(client.held, [])


class LegacyLiveRequestTests(unittest.TestCase):
    """A fixture's input_required sampling or form becomes a live request; its answer completes the call."""

    def test_sampling_is_asked_live_and_the_answer_completes_the_call(self) -> None:
        client, wire, _ = fixtures_client(self)
        call_id = client.request(
            "tools/call", {"name": "test_sampling", "arguments": {"prompt": "Test prompt for sampling"}}
        )
        asked = client.server_request("sampling/createMessage")
        self.assertEqual(
            asked["params"],
            {
                "messages": [{"role": "user", "content": {"type": "text", "text": "Test prompt for sampling"}}],
                "maxTokens": 100,
            },
        )
        client.answer(asked, sampled("This is a test response from the client"))
        result = client.response(call_id)["result"]
        self.assertEqual(texts(result), "LLM response: This is a test response from the client")
        self.assertEqual(wire.session.pending(), 0)

    def test_a_client_without_sampling_gets_a_tool_error_and_is_asked_nothing(self) -> None:
        client, _, _ = fixtures_client(self, capabilities={"elicitation": {}})
        result = client.call("tools/call", {"name": "test_sampling", "arguments": {"prompt": "p"}})["result"]
        self.assertIs(result["isError"], True)
        self.assertIn("sampling", texts(result))
        self.assertIn("did not declare", texts(result))
        self.assertEqual(client.held, [])

    def test_a_refused_or_malformed_sampling_answer_is_a_tool_error(self) -> None:
        client, wire, _ = fixtures_client(self)
        for answer in ({"error": {"code": -1, "message": "no"}}, {"result": {"content": "text"}}):
            with self.subTest(answer=answer):
                call_id = client.request("tools/call", {"name": "test_sampling", "arguments": {"prompt": "p"}})
                client.answer(client.server_request("sampling/createMessage"), **answer)
                result = client.response(call_id)["result"]
                self.assertIs(result["isError"], True)
                self.assertIn("nothing was changed", texts(result))
        self.assertEqual(wire.session.pending(), 0)

    def test_a_form_with_defaults_is_asked_live_and_the_accepted_content_comes_back(self) -> None:
        client, _, _ = fixtures_client(self)
        call_id = client.request("tools/call", {"name": "test_elicitation_sep1034_defaults", "arguments": {}})
        form = client.server_request("elicitation/create")
        self.assertEqual(
            (form["params"]["mode"], form["params"]["requestedSchema"]["properties"]), ("form", fixtures.DEFAULTS_FORM)
        )
        content = {"name": "Jane Smith", "age": 25, "score": 88, "status": "inactive", "verified": False}
        client.answer(form, {"action": "accept", "content": content})
        self.assertEqual(
            texts(client.response(call_id)["result"]),
            "Elicitation completed: action=accept, content=" + json.dumps(content, sort_keys=True),
        )

    def test_the_elicitation_fixture_shows_the_callers_message(self) -> None:
        client, _, _ = fixtures_client(self)
        call_id = client.request(
            "tools/call", {"name": "test_elicitation", "arguments": {"message": "Please provide your information"}}
        )
        form = client.server_request("elicitation/create")
        self.assertEqual(form["params"]["message"], "Please provide your information")
        self.assertEqual(form["params"]["requestedSchema"]["required"], ["username", "email"])
        client.answer(form, {"action": "decline"})
        result = client.response(call_id)["result"]
        self.assertFalse(result["isError"])
        self.assertIn("decline", texts(result))


class LegacyClientIdentityTests(unittest.TestCase):
    """The core sees a legacy client as a modern one naming itself: initialize's clientInfo, each call under its own
    id."""

    def client_seen_by_core(self, client_info: Any = CLIENT_INFO) -> tuple[LegacyClient, list[tuple[Any, Any]]]:
        """A legacy client after initialize, and the (id, clientInfo) of each tools/call the core gets."""
        server = support.make_server()
        seen: list[tuple[Any, Any]] = []
        inner = server.methods["tools/call"]

        def tools_call(srv: main.Server, request: main.Envelope, meta: Any, principal: str) -> dict[str, Any]:
            seen.append((request.id, request.params["_meta"].get(legacy.CLIENT_INFO_META)))
            return inner(srv, request, meta, principal)

        server.methods["tools/call"] = tools_call  # the seam audit.install wraps
        client, _, _ = memory_client(self, server)
        params = {
            "protocolVersion": legacy.LATEST_LEGACY_VERSION,
            "capabilities": FORM_CLIENT,
            "clientInfo": client_info,
        }
        self.assertIn("result", client.call("initialize", params))
        client.notify("notifications/initialized")
        return client, seen

    def test_every_round_of_a_call_reaches_the_core_under_the_clients_own_id_and_client_info(self) -> None:
        client, seen = self.client_seen_by_core()
        forged = {
            legacy.CLIENT_INFO_META: {"name": "forged", "version": "9"}
        }  # the call's own _meta is never passed on
        call_id = client.request(
            "tools/call", {"name": main.TOOL_NAME, "arguments": tps(), "_meta": forged}, id="host-call-7"
        )
        client.answer(client.server_request("elicitation/create"), accepted("note-14"))
        self.assertEqual(
            client.response(call_id)["result"]["structuredContent"], {"deleted": True, "noteId": "note-14"}
        )
        self.assertEqual(seen, [("host-call-7", CLIENT_INFO)] * 2)  # the form's round and the answer's
        seen.clear()
        declined = client.delete()  # an integer id stays an integer
        client.answer(client.server_request("elicitation/create"), {"action": "decline"})
        client.response(declined)
        self.assertEqual([call_id for call_id, _ in seen], [declined, declined])

    def test_client_info_is_kept_up_to_the_limit_and_clipped_beyond_it(self) -> None:
        limit = legacy.MAX_CLIENT_INFO_CHARS
        client, seen = self.client_seen_by_core(
            {"name": "n" * (limit + 1), "version": "v" * limit, "title": "not carried"}
        )
        client.call("tools/call", {"name": "no_such_tool"})
        self.assertEqual(seen[0][1], {"name": "n" * limit, "version": "v" * limit})

    def test_a_client_info_field_that_is_not_a_string_is_left_out(self) -> None:
        for client_info, carried in (
            ({"name": 7, "version": "1"}, {"version": "1"}),
            ({"name": ["x"], "version": None}, None),
        ):
            with self.subTest(client_info=client_info):
                client, seen = self.client_seen_by_core(client_info)
                client.call("tools/call", {"name": "no_such_tool"})
                self.assertEqual(seen[0][1], carried)  # None: no clientInfo in _meta at all

    def test_a_legacy_clients_audit_entries_name_it_and_its_own_calls(self) -> None:
        store = AuditedStore(self)
        server = procs.StdioServer(self, "--db", store.db, env=store.env)
        client = LegacyClient(server)
        client.initialize()
        deleted = client.request("tools/call", {"name": main.TOOL_NAME, "arguments": tps()}, id="host-call-7")
        client.answer(client.server_request("elicitation/create"), accepted("note-14"))
        self.assertTrue(client.response(deleted)["result"]["structuredContent"]["deleted"])
        declined = client.delete()
        client.answer(client.server_request("elicitation/create"), {"action": "decline"})
        self.assertFalse(client.response(declined)["result"]["structuredContent"]["deleted"])
        server.close_stdin()
        self.assertEqual(server.wait(), 0)
        name = f"{CLIENT_INFO['name']}/{CLIENT_INFO['version']}"
        entries = [
            (e["principal"], e["outcome"], e["note_id"], e["request_id"], e["client_name"]) for e in store.entries()
        ]
        self.assertEqual(entries, [
            (support.PRINCIPAL, "deleted", "note-14", '"host-call-7"', name),
            (support.PRINCIPAL, "declined", None, str(declined), name),
        ])  # fmt: skip
        header, *lines = store.listing()
        self.assertIn("CLIENT (self-reported)", header)
        columns = [line.split()[-3:-1] for line in lines]  # REQUEST and CLIENT (TRASH is last)
        self.assertEqual(columns, [['"host-call-7"', name], [str(declined), name]])
        self.assertNotIn(legacy.INTERNAL_ID_PREFIX, "\n".join(lines))


class LegacyStdioCloseTests(unittest.TestCase):
    """At EOF the stdio session waits for every call's worker, also one still writing the response of a call that
    has ended (left running, it could hold stdout's lock while the interpreter finalizes: a fatal error, SIGABRT)."""

    def test_close_returns_only_after_a_worker_still_writing_its_response_has_written_it(self) -> None:
        written: list[Any] = []
        writing = threading.Event()

        def slow_stdout(line: bytes) -> None:
            message = json.loads(line)
            if message.get("id") == "slow-call":
                writing.set()
                while not session.closed:  # the response is still going out when stdin reaches its end
                    threading.Event().wait(POLL_SECONDS)
            written.append(message.get("id"))

        session = legacy.LegacyStdioSession(support.make_server(), support.PRINCIPAL, slow_stdout, support.Log())
        self.addCleanup(session.close)
        params = {
            "protocolVersion": legacy.LATEST_LEGACY_VERSION,
            "capabilities": FORM_CLIENT,
            "clientInfo": CLIENT_INFO,
        }
        for message in (
            {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": params},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": "slow-call", "method": "tools/call", "params": {"name": "no_such_tool"}},
        ):
            session.feed(json.dumps(message).encode())
        self.assertTrue(writing.wait(procs.GUARD))
        self.assertEqual(written, ["init"])  # the call's response is not out yet
        session.close()
        self.assertEqual(written, ["init", "slow-call"])


class LegacyOverRealStdioTests(unittest.TestCase):
    """What only the real `serve --stdio` process shows: the CLI wiring, pipes, EOF, exit status, stderr."""

    def test_the_no_legacy_flag_turns_the_adapter_off_in_the_process(self) -> None:
        client, _ = stdio_client(self, "--no-legacy")
        refused = client.call(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": FORM_CLIENT, "clientInfo": {"name": "x", "version": "1"}},
        )
        self.assertEqual(refused["error"]["code"], main.METHOD_NOT_FOUND)
        self.assertEqual(refused["error"]["data"], {"supported": list(main.SUPPORTED_VERSIONS)})
        self.assertEqual(client.call("ping")["error"]["code"], main.METHOD_NOT_FOUND)

    def test_eof_while_a_form_is_pending_exits_zero_without_answering(self) -> None:
        client, server = stdio_client(self)
        client.initialize()
        # The adapter's log goes to the process's stderr (read below, once it is fully drained).
        client.send({"jsonrpc": "2.0", "id": "nobody-asked", "result": {"action": "accept"}})
        client.delete()
        client.server_request("elicitation/create")
        server.close_stdin()
        self.assertEqual(server.wait(), 0)
        self.assertEqual(server.remaining_stdout(), [])
        self.assertNotIn("Traceback", server.stderr_text())
        self.assertIn("ignored a response", server.stderr_text())


if __name__ == "__main__":
    unittest.main()
