"""Text the note tools take is bounded in UTF-8 bytes, with room for the rest of the request in one 64 KiB message.

notes_tools.MAX_TEXT_BYTES (the body of notes_create and notes_update, the text of
notes_append) is what the schema's description states and what read_args enforces; twice it
(JSON's escaping: a newline as two bytes, a CJK character as \\uXXXX) plus ENVELOPE_BYTES (the
largest request this server asks for, around its text) is at most frame.MAX_MESSAGE_BYTES.
Both sides of the bound in process, the envelope measured on a real state, and the maximal
CJK text end to end over stdio.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import unittest
from typing import Any

from helpers import (
    procs,  # noqa: E402
    support,  # noqa: F401  (first: it puts code/ on the import path)
)
from helpers.support import FORM, KEY, PRINCIPAL, Clock, Log, request  # noqa: E402

import audit  # noqa: E402
import frame  # noqa: E402
import main  # noqa: E402
import markdown_store  # noqa: E402
import notes_tools  # noqa: E402
import sqlite_store  # noqa: E402
import stores  # noqa: E402

CJK = "\u6f22"  # 3 bytes in UTF-8
AT_BOUND = CJK * (notes_tools.MAX_TEXT_BYTES // 3)  # exactly MAX_TEXT_BYTES bytes
OVER_BOUND = AT_BOUND + "a"


def tools_call(name: str, arguments: dict[str, Any], id: int = 1, **extra: Any) -> dict[str, Any]:
    return request("tools/call", {"name": name, "arguments": arguments, **extra}, id=id, capabilities=FORM)


def accept(key: str) -> dict[str, Any]:
    return {key: {"action": "accept", "content": {notes_tools.CONFIRM_FIELD: True}}}


class BothSides(unittest.TestCase):
    """Each text argument at MAX_TEXT_BYTES is taken; one byte more is an error result naming the bound in bytes."""

    def setUp(self) -> None:
        folder = tempfile.mkdtemp(prefix="text-bounds-")
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        self.clock = Clock()
        self.store = sqlite_store.open_store(os.path.join(folder, "notes.db"), clock=self.clock)
        self.addCleanup(self.store.close)
        policy = main.AuthorizationPolicy({PRINCIPAL: [main.LESSON_WORKSPACE]})
        self.server = frame.notes_server(keys=[KEY], notes=self.store, policy=policy, clock=self.clock, log=Log())
        audit.install(self.server)
        notes_tools.install(self.server)

    def call(self, name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
        response = self.server.handle(tools_call(name, arguments, **extra), PRINCIPAL)
        assert response is not None
        self.assertNotIn("error", response)
        return response["result"]

    def create(self, body: str) -> dict[str, Any]:
        return self.call("notes_create", {"workspaceUri": main.LESSON_WORKSPACE, "title": "Bounds", "body": body})

    def assert_refused_in_bytes(self, result: dict[str, Any]) -> None:
        self.assertTrue(result["isError"], result)
        self.assertIn("bytes in UTF-8", result["content"][0]["text"])
        self.assertIn(f"{notes_tools.MAX_TEXT_BYTES:,}", result["content"][0]["text"])

    def test_the_bound_is_in_bytes_and_at_most_the_message_minus_the_envelope_twice_over(self) -> None:
        self.assertEqual(len(AT_BOUND.encode("utf-8")), notes_tools.MAX_TEXT_BYTES)
        self.assertEqual(
            notes_tools.MAX_TEXT_BYTES,
            (frame.MAX_MESSAGE_BYTES - notes_tools.ENVELOPE_BYTES) // notes_tools.JSON_GROWTH,
        )

    def test_a_create_at_the_bound_in_cjk_is_made_and_one_byte_more_is_refused_making_nothing(self) -> None:
        made = self.create(AT_BOUND)
        self.assertFalse(made["isError"], made)
        before = len(self.store.all())
        self.assert_refused_in_bytes(self.create(OVER_BOUND))
        self.assertEqual(len(self.store.all()), before)

    def test_ascii_text_is_bounded_by_the_same_bytes(self) -> None:
        self.assertFalse(self.create("a" * notes_tools.MAX_TEXT_BYTES)["isError"])
        self.assert_refused_in_bytes(self.create("a" * (notes_tools.MAX_TEXT_BYTES + 1)))

    def test_an_append_at_the_bound_is_added_and_one_byte_more_is_refused_adding_nothing(self) -> None:
        made = self.create("start\n")["structuredContent"]
        args = {"workspaceUri": main.LESSON_WORKSPACE, "noteId": made["noteId"], "version": made["version"]}
        self.assert_refused_in_bytes(self.call("notes_append", {**args, "text": OVER_BOUND}))
        self.assertEqual(
            (self.store.note_text(made["noteId"], main.parse_file_uri(main.LESSON_WORKSPACE)) or (None, None))[1],
            "start\n",
        )
        done = self.call("notes_append", {**args, "text": AT_BOUND})
        self.assertFalse(done["isError"], done)

    def test_an_update_at_the_bound_is_asked_and_written_and_one_byte_more_is_refused_before_any_form(self) -> None:
        made = self.create("start\n")["structuredContent"]
        args = {"workspaceUri": main.LESSON_WORKSPACE, "noteId": made["noteId"], "version": made["version"]}
        refused = self.call("notes_update", {**args, "body": OVER_BOUND})
        self.assert_refused_in_bytes(refused)
        self.assertNotIn("inputRequests", refused)
        first = self.call("notes_update", {**args, "body": AT_BOUND})
        self.assertEqual(first["resultType"], "input_required", first)
        done = self.call(
            "notes_update",
            {**args, "body": AT_BOUND},
            requestState=first["requestState"],
            inputResponses=accept(notes_tools.UPDATE_KEY),
        )
        self.assertTrue(done["structuredContent"]["updated"], done)
        self.assertEqual(
            (self.store.note_text(made["noteId"], main.parse_file_uri(main.LESSON_WORKSPACE)) or (None, None))[1],
            AT_BOUND,
        )

    def test_the_schema_states_the_bound_in_bytes_for_every_text_argument(self) -> None:
        listed = self.server.handle(request("tools/list"), PRINCIPAL)["result"]["tools"]  # type: ignore[index]
        schemas = {tool["name"]: tool["inputSchema"]["properties"] for tool in listed}
        for name, field in (("notes_create", "body"), ("notes_append", "text"), ("notes_update", "body")):
            with self.subTest(name=name):
                prop = schemas[name][field]
                self.assertEqual(prop["maxLength"], notes_tools.MAX_TEXT_BYTES)  # characters: never more than the bytes
                self.assertIn(f"At most {notes_tools.MAX_TEXT_BYTES:,} bytes in UTF-8", prop["description"])
                self.assertIn(f"{notes_tools.MAX_TEXT_BYTES // 3:,} CJK characters", prop["description"])
                self.assertIn(f"fits the {frame.MAX_MESSAGE_BYTES // 1024} KiB message bound", prop["description"])


class TheEnvelope(unittest.TestCase):
    """The largest request this server asks for, around its text, fits ENVELOPE_BYTES: measured on a state it issued."""

    def test_the_second_call_of_an_update_of_a_note_with_the_longest_id_fits_the_envelope_and_the_message(self) -> None:
        base = os.path.realpath(tempfile.mkdtemp(prefix="envelope-"))
        state = tempfile.mkdtemp(prefix="envelope-nonces-")
        for folder in (base, state):
            self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        # The longest id a note can have, in characters JSON escapes: Notes/<60 CJK>/<58 CJK>.md is 128 characters.
        first_part, second_part = CJK * 60, CJK * 58 + ".md"
        os.makedirs(os.path.join(base, "Notes", first_part))
        with open(os.path.join(base, "Notes", first_part, second_part), "w", encoding="utf-8") as handle:
            handle.write("# Long\nold\n")
        note_id = f"Notes/{first_part}/{second_part}"
        self.assertEqual(len(note_id), stores.MAX_NOTE_ID_LENGTH)
        clock = Clock()
        nonces = sqlite_store.open_ledger(os.path.join(state, "nonces.db"), clock=clock)
        store = markdown_store.MarkdownNotesStore([base], nonces)
        self.addCleanup(store.close)
        workspace = main.format_file_uri(tuple(p for p in base.split("/") if p) + ("Notes",))
        server = frame.notes_server(
            keys=[KEY], notes=store, policy=main.AuthorizationPolicy({PRINCIPAL: [workspace]}), clock=clock, log=Log()
        )
        audit.install(server)
        notes_tools.install(server)
        read = server.handle(tools_call("notes_read", {"workspaceUri": workspace, "noteId": note_id}), PRINCIPAL)[
            "result"
        ]  # type: ignore[index]
        args = {
            "workspaceUri": workspace,
            "noteId": note_id,
            "body": "new",
            "version": read["structuredContent"]["version"],
        }
        first = server.handle(tools_call("notes_update", args), PRINCIPAL)["result"]  # type: ignore[index]
        self.assertEqual(first["resultType"], "input_required", first)
        # The longest workspace URI any call may carry, and the state this server issued for the longest id.
        longest = {**args, "workspaceUri": "file:///" + "w" * (main.MAX_URI_LENGTH - len("file:///"))}
        second = tools_call(
            "notes_update",
            {**longest, "body": ""},
            id=2**53,
            requestState=first["requestState"],
            inputResponses=accept(notes_tools.UPDATE_KEY),
        )
        envelope = len(
            json.dumps(second).encode("utf-8")
        )  # json's default escapes every non-ASCII character: the largest spelling
        self.assertLessEqual(envelope, notes_tools.ENVELOPE_BYTES)
        for body in ("\n" * notes_tools.MAX_TEXT_BYTES, AT_BOUND, '"' * notes_tools.MAX_TEXT_BYTES):
            whole = tools_call(
                "notes_update",
                {**longest, "body": body},
                id=2**53,
                requestState=first["requestState"],
                inputResponses=accept(notes_tools.UPDATE_KEY),
            )
            with self.subTest(body=body[:1]):
                self.assertLessEqual(len(json.dumps(whole).encode("utf-8")), frame.MAX_MESSAGE_BYTES)


class OverTheRealTransport(unittest.TestCase):
    """The maximal CJK text, sent over stdio to a real server process, is created, appended and updated."""

    def test_a_maximal_cjk_text_succeeds_end_to_end_over_stdio_escaped_or_not(self) -> None:
        folder = tempfile.mkdtemp(prefix="text-bounds-stdio-")
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        env = procs.server_env(
            NOTES_MCP_SECRET=procs.SECRET, NOTES_MCP_TOKEN=procs.TOKEN, XDG_STATE_HOME=os.path.join(folder, "state")
        )
        server = procs.StdioServer(self, "--db", os.path.join(folder, "notes.db"), "--notes-tools", env=env)
        workspace = main.LESSON_WORKSPACE

        def raw(message: dict[str, Any]) -> dict[str, Any]:  # UTF-8 as itself, as the MCP SDKs send it
            server.send(json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n")
            return server.receive()

        made = server.exchange(
            tools_call("notes_create", {"workspaceUri": workspace, "title": "CJK", "body": AT_BOUND})
        )["result"]
        self.assertFalse(made["isError"], made)
        note = made["structuredContent"]
        raw_made = raw(
            tools_call("notes_create", {"workspaceUri": workspace, "title": "CJK raw", "body": AT_BOUND}, id=2)
        )["result"]
        self.assertFalse(raw_made["isError"], raw_made)
        over = server.exchange(
            tools_call("notes_create", {"workspaceUri": workspace, "title": "Over", "body": OVER_BOUND}, id=3)
        )
        self.assertTrue(over["result"]["isError"])  # an error result the model can act on, not -32600
        small = server.exchange(
            tools_call("notes_create", {"workspaceUri": workspace, "title": "Small", "body": "start\n"}, id=4)
        )
        small_note = small["result"]["structuredContent"]
        args = {
            "workspaceUri": workspace,
            "noteId": small_note["noteId"],
            "body": AT_BOUND,
            "version": small_note["version"],
        }
        first = server.exchange(tools_call("notes_update", args, id=5))["result"]
        self.assertEqual(first["resultType"], "input_required", first)
        done = raw(
            tools_call(
                "notes_update",
                args,
                id=6,
                requestState=first["requestState"],
                inputResponses=accept(notes_tools.UPDATE_KEY),
            )
        )
        self.assertTrue(done["result"]["structuredContent"]["updated"], done)
        appended = server.exchange(
            tools_call(
                "notes_append",
                {"workspaceUri": workspace, "noteId": note["noteId"], "text": AT_BOUND, "version": note["version"]},
                id=7,
            )
        )["result"]
        self.assertFalse(appended["isError"], appended)
        for note_id, length in ((small_note["noteId"], len(AT_BOUND)), (note["noteId"], 2 * len(AT_BOUND))):
            read = server.exchange(tools_call("notes_read", {"workspaceUri": workspace, "noteId": note_id}, id=8))[
                "result"
            ]
            self.assertEqual(read["structuredContent"]["length"], length)
        server.close_stdin()
        self.assertEqual(server.wait(), 0)


if __name__ == "__main__":
    unittest.main()
