"""The operator's `audit restore` (code/audit_cli.py) undoes an append and a move the note tools made, by entry id.

A SQLite store written through the note tools in process, closed, then restored by the
command as an operator runs it (`serve.py audit --db FILE restore ENTRY`).
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import unittest
from typing import Any

from helpers.sql_stores import SCRATCH, new_database
from helpers.support import FORM, KEY, PRINCIPAL, Clock, Log, request

import audit
import audit_cli
import frame
import main
import notes_tools
import sqlite_store

WORKSPACE = "file:///Users/alice/Documents/Notes"


class OperatorRestoresAppendsAndMoves(unittest.TestCase):
    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory(prefix="restore-everyday-", dir=SCRATCH)
        self.addCleanup(folder.cleanup)
        self.db = new_database(os.path.join(folder.name, "notes.db"))
        store = sqlite_store.open_store(self.db, clock=Clock())
        server = frame.notes_server(
            keys=[KEY], notes=store, policy=main.AuthorizationPolicy({PRINCIPAL: [WORKSPACE]}), log=Log()
        )
        audit.install(server)
        notes_tools.install(server)

        def call(name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
            response = server.handle(
                request("tools/call", {"name": name, "arguments": arguments, **extra}, capabilities=FORM), PRINCIPAL
            )
            assert response is not None
            return response["result"]

        note = call("notes_create", {"workspaceUri": WORKSPACE, "title": "Plan", "body": "first\n"})[
            "structuredContent"
        ]
        call(
            "notes_append",
            {"workspaceUri": WORKSPACE, "noteId": note["noteId"], "text": "second\n", "version": note["version"]},
        )
        move = {"workspaceUri": WORKSPACE, "noteId": note["noteId"], "newPath": "archive/plan.md"}
        first = call("notes_move", move)
        done = call(
            "notes_move",
            move,
            requestState=first["requestState"],
            inputResponses={notes_tools.MOVE_KEY: {"action": "accept", "content": {"confirm": True}}},
        )
        assert done["structuredContent"]["moved"], done
        self.entries = {entry["outcome"]: entry["id"] for entry in store.audit_entries()}
        self.note_id, self.uri = note["noteId"], note["uri"]
        store.close()

    def restore(self, entry_id: int) -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = audit_cli.command(["--db", self.db, "restore", str(entry_id)])
        return status, out.getvalue()

    def note(self) -> tuple[str, str]:
        store = sqlite_store.open_store(self.db, clock=Clock())
        try:
            found = store.note_text(self.note_id, main.parse_file_uri(WORKSPACE))
            assert found is not None
            return found[0].uri, found[1]
        finally:
            store.close()

    def test_the_operator_moves_the_note_back_then_takes_the_append_back_each_once(self) -> None:
        self.assertEqual(self.note(), (f"{WORKSPACE}/archive/plan.md", "first\nsecond\n"))
        status, said = self.restore(self.entries[audit.MOVED])
        self.assertEqual(status, 0, said)
        self.assertIn(f"restored entry {self.entries[audit.MOVED]}", said)
        self.assertEqual(self.note(), (self.uri, "first\nsecond\n"))
        status, said = self.restore(self.entries[audit.APPENDED])
        self.assertEqual(status, 0, said)
        self.assertEqual(self.note(), (self.uri, "first\n"))
        for entry_id in (self.entries[audit.MOVED], self.entries[audit.APPENDED]):
            self.assertEqual(self.restore(entry_id)[0], audit_cli.EXIT_REFUSED)
        self.assertEqual(self.note(), (self.uri, "first\n"))
