"""The lesson's eleven checkpoints, one test each (the README maps them by number)."""

from __future__ import annotations

import threading
import unittest
from typing import Any

from helpers.support import (
    FORM,
    PRINCIPAL,
    WORKSPACE,
    Clock,
    accept,
    answered,
    call,
    contained,
    make_lesson_server,
    note_ids,
    request,
    tps,
)

# isort: split
# helpers.support puts code/ on the import path: the modules under test are imported after it.
import frame
import main

LESSON_IDS = ["evil-1", "note-14", "note-3", "note-7", "note-99", "tmp-1"]


class LessonCheckpoints(unittest.TestCase):
    def setUp(self) -> None:
        self.server = make_lesson_server()

    def first_call(self, arguments: dict | None = None) -> dict:
        response = answered(self.server, call(arguments or tps(), id=1), PRINCIPAL)
        assert response is not None
        return response["result"]

    def test_01_discover_reports_versions_tools_capability_cache_hints_and_identity_in_meta(self) -> None:
        result = answered(self.server, request("server/discover"), PRINCIPAL)["result"]
        self.assertEqual(result["resultType"], "complete")
        self.assertIn("2026-07-28", result["supportedVersions"])
        self.assertIn("tools", result["capabilities"])
        self.assertNotIn("roots", result["capabilities"])
        self.assertIsInstance(result["ttlMs"], int)
        self.assertIn(result["cacheScope"], ("public", "private"))
        self.assertEqual(result["_meta"][main.META_SERVER_INFO]["name"], main.SERVER_INFO["name"])
        self.assertNotIn("serverInfo", result)

    def test_02_tools_list_describes_notes_delete_deterministically_and_resists_caller_mutation(self) -> None:
        first = answered(self.server, request("tools/list"), PRINCIPAL)["result"]
        self.assertEqual(first["resultType"], "complete")
        (tool,) = first["tools"]
        schema = tool["inputSchema"]
        self.assertEqual(schema["type"], "object")
        self.assertEqual(schema["required"], ["workspaceUri", "title"])
        self.assertIs(schema["additionalProperties"], False)
        self.assertEqual(schema["properties"]["workspaceUri"]["type"], "string")
        self.assertEqual(schema["properties"]["workspaceUri"]["format"], "uri")
        self.assertEqual(schema["properties"]["title"]["minLength"], 1)
        self.assertEqual(schema["properties"]["title"]["maxLength"], main.MAX_TITLE_LENGTH)
        self.assertEqual(tool["outputSchema"]["required"], ["deleted"])
        self.assertIs(tool["outputSchema"]["additionalProperties"], False)
        self.assertEqual(
            {k: tool["annotations"][k] for k in ("destructiveHint", "readOnlyHint", "idempotentHint", "openWorldHint")},
            {"destructiveHint": True, "readOnlyHint": False, "idempotentHint": False, "openWorldHint": False},
        )
        self.assertEqual(first["cacheScope"], "public")
        self.assertIsInstance(first["ttlMs"], int)
        self.assertIn(main.META_SERVER_INFO, first["_meta"])
        tool["inputSchema"]["required"].clear()
        first["tools"].append({"name": "injected"})
        second = answered(self.server, request("tools/list", id=2), PRINCIPAL)["result"]
        self.assertEqual([t["name"] for t in second["tools"]], ["notes_delete"])
        self.assertEqual(second["tools"][0]["inputSchema"]["required"], ["workspaceUri", "title"])

    def test_03_first_call_returns_input_required_with_a_titled_single_select_and_confirm(self) -> None:
        result = self.first_call()
        self.assertEqual(result["resultType"], "input_required")
        ask = result["inputRequests"]["delete_choice"]
        self.assertEqual(ask["method"], "elicitation/create")
        params = ask["params"]
        self.assertEqual(params["mode"], "form")
        self.assertIn(WORKSPACE, params["message"])
        self.assertIn("3 notes", params["message"])
        schema = params["requestedSchema"]
        self.assertEqual(schema["type"], "object")
        self.assertEqual(sorted(schema["required"]), ["confirm", "note_id"])
        self.assertEqual(
            schema["properties"]["note_id"]["oneOf"],
            [
                {"const": "note-3", "title": "TPS report 2023"},
                {"const": "note-7", "title": "TPS report 2024"},
                {"const": "note-14", "title": "TPS report 2025"},
            ],
        )
        self.assertEqual(schema["properties"]["note_id"]["type"], "string")
        self.assertEqual(schema["properties"]["confirm"]["type"], "boolean")
        for prop in schema["properties"].values():  # flat: no nested objects or arrays
            self.assertIn(prop["type"], ("string", "boolean"))
        self.assertIsInstance(result["requestState"], str)

    def test_04_retry_with_fresh_id_and_accept_deletes_only_the_chosen_note(self) -> None:
        state = self.first_call()["requestState"]
        response = answered(
            self.server, call(tps(), id=2, requestState=state, inputResponses=accept("note-14")), PRINCIPAL
        )
        self.assertEqual(response["id"], 2)
        result = response["result"]
        self.assertEqual(result["resultType"], "complete")
        self.assertEqual(result["structuredContent"], {"deleted": True, "noteId": "note-14"})
        self.assertIn("note-14", result["content"][0]["text"])
        self.assertIs(result["isError"], False)
        self.assertEqual(note_ids(self.server), [i for i in LESSON_IDS if i != "note-14"])

    def test_05_prefix_and_encoded_traversal_fail_containment_like_every_other_variant(self) -> None:
        escapes = [
            "file:///Users/alice/Documents/Notes-evil/secret.md",
            "file:///Users/alice/Documents/Notes/%2e%2e/private.md",
            "file:///Users/alice/Documents/Notes/%252e%252e/private.md",
            "file:///Users/alice/Documents/Notes\\..\\private.md",
            "file:///Users/alice/Documents/Notes/%5C..%5Cprivate.md",
            "file:///Users/alice/Documents/Notes/%00/private.md",
            "file:///Users/alice/Documents/Notes/x.md?../../private.md",
            "file:///Users/alice/Documents/Notes/x.md#frag",
            "file://evil.example/Users/alice/Documents/Notes/x.md",
            "https://example.com/Users/alice/Documents/Notes/x.md",
        ]
        for uri in escapes:
            with self.subTest(uri=uri):
                self.assertFalse(contained(WORKSPACE, uri))
                result = answered(self.server, call(tps(workspace=uri)), PRINCIPAL)["result"]
                self.assertIs(result["isError"], True)
                self.assertNotIn("inputRequests", result)
        self.assertTrue(contained(WORKSPACE, WORKSPACE + "/sub/x.md"))
        self.assertEqual(note_ids(self.server), LESSON_IDS)

    def test_06_a_changed_title_or_workspace_cannot_reuse_the_confirmation_state(self) -> None:
        state = self.first_call()["requestState"]
        changed = [tps(title="TPS report 2025"), tps(workspace=WORKSPACE + "/sub")]
        for arguments in changed:
            with self.subTest(arguments=arguments):
                response = answered(
                    self.server, call(arguments, id=2, requestState=state, inputResponses=accept()), PRINCIPAL
                )
                self.assertEqual(response["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(note_ids(self.server), LESSON_IDS)

    def test_07_decline_leaves_notes_unchanged_and_is_terminal_for_the_state(self) -> None:
        state = self.first_call()["requestState"]
        declined = answered(
            self.server,
            call(tps(), id=2, requestState=state, inputResponses={"delete_choice": {"action": "decline"}}),
            PRINCIPAL,
        )["result"]
        self.assertEqual(declined["structuredContent"], {"deleted": False, "reason": "declined"})
        self.assertIs(declined["isError"], False)
        later = answered(self.server, call(tps(), id=3, requestState=state, inputResponses=accept()), PRINCIPAL)
        self.assertEqual(later["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(note_ids(self.server), LESSON_IDS)

    def test_08_two_servers_sharing_stores_cannot_both_execute_one_confirmation(self) -> None:
        clock = Clock()
        first = make_lesson_server(clock=clock)
        second = frame.Server(first.services)  # a second instance: the same services, so the same stores
        second.add_tool(main.NotesDelete(first.services))
        state = answered(first, call(tps(), id=1), PRINCIPAL)["result"]["requestState"]
        barrier = threading.Barrier(2)
        answers: list[dict] = []
        lock = threading.Lock()

        def racer(server: frame.Server, request_id: int) -> None:
            barrier.wait(timeout=30)
            response = answered(
                server, call(tps(), id=request_id, requestState=state, inputResponses=accept()), PRINCIPAL
            )
            with lock:
                answers.append(response)

        threads = [threading.Thread(target=racer, args=(s, i)) for i, s in enumerate((first, second), start=2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        deleted = [a for a in answers if "result" in a and a["result"].get("structuredContent", {}).get("deleted")]
        refused = [a for a in answers if a.get("error", {}).get("code") == main.INVALID_PARAMS]
        self.assertEqual((len(deleted), len(refused)), (1, 1))
        self.assertEqual(note_ids(first), [i for i in LESSON_IDS if i != "note-14"])

    def test_09_form_is_offered_only_to_clients_declaring_form_elicitation(self) -> None:
        declared: list[dict[str, Any]] = [{"elicitation": {}}, FORM, {"elicitation": {"form": {}, "url": {}}}]
        for capabilities in declared:
            with self.subTest(capabilities=capabilities):
                result = answered(self.server, call(tps(), capabilities=capabilities), PRINCIPAL)["result"]
                self.assertEqual(result["resultType"], "input_required")
        for capabilities in ({"elicitation": {"url": {}}}, {}, {"roots": {}}):
            with self.subTest(capabilities=capabilities):
                error = answered(self.server, call(tps(), capabilities=capabilities), PRINCIPAL)["error"]
                self.assertEqual(error["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)
                self.assertEqual(error["data"], {"requiredCapabilities": {"elicitation": {"form": {}}}})

    def test_10_unsupported_version_gets_32022_and_missing_or_non_string_version_gets_32602(self) -> None:
        message = request("server/discover")
        message["params"]["_meta"][main.META_PROTOCOL_VERSION] = "1900-01-01"
        error = answered(self.server, message, PRINCIPAL)["error"]
        self.assertEqual(error["code"], main.UNSUPPORTED_PROTOCOL_VERSION)
        self.assertEqual(error["data"], {"supported": list(main.SUPPORTED_VERSIONS), "requested": "1900-01-01"})
        for bad in (None, 20260728, ["2026-07-28"]):
            with self.subTest(version=bad):
                message = request("server/discover")
                if bad is None:
                    del message["params"]["_meta"][main.META_PROTOCOL_VERSION]
                else:
                    message["params"]["_meta"][main.META_PROTOCOL_VERSION] = bad
                self.assertEqual(answered(self.server, message, PRINCIPAL)["error"]["code"], main.INVALID_PARAMS)

    def test_11_id_less_messages_get_no_response_and_an_id_less_call_never_deletes(self) -> None:
        state = self.first_call()["requestState"]
        notification = call(tps(), requestState=state, inputResponses=accept())
        del notification["id"]
        self.assertIsNone(self.server.handle(notification, PRINCIPAL))
        cancelled = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        self.assertIsNone(self.server.handle(cancelled, PRINCIPAL))
        self.assertEqual(note_ids(self.server), LESSON_IDS)
        # The state was not consumed by the ignored message: a real retry still works.
        result = answered(self.server, call(tps(), id=2, requestState=state, inputResponses=accept()), PRINCIPAL)[
            "result"
        ]
        self.assertIs(result["structuredContent"]["deleted"], True)


if __name__ == "__main__":
    unittest.main()
