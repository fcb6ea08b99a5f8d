"""`audit restore` of a folder note's update restores the note it wrote, wherever it moved, never whatever file is at
its old place."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import unittest
from typing import Any

from helpers.sql_stores import SCRATCH, new_database
from helpers.support import KEY, Clock, Log

import audit
import frame
import main
import markdown_store
import notes_tools
import sqlite_store
import stores
from test_notes_tools import accept, tools_call


class RestoreByNote(unittest.TestCase):
    """A notes folder with a.md, b.md and archive/, the note tools over it, in process."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="md-restore-", dir=SCRATCH)
        self.addCleanup(tmp.cleanup)
        self.folder = os.path.join(tmp.name, "Notes")
        os.makedirs(os.path.join(self.folder, "archive"))
        for name, text in (("a.md", "# A\nalpha\n"), ("b.md", "# B\nbravo\n")):
            self.write(name, text)
        clock = Clock()
        nonces = sqlite_store.open_ledger(new_database(os.path.join(tmp.name, "nonces.db")), clock=clock)
        self.store = markdown_store.MarkdownNotesStore([self.folder], nonces)
        self.addCleanup(self.store.close)
        self.uri = self.store.workspace_uris()[0]
        self.server = frame.notes_server(
            keys=[KEY], notes=self.store, policy=main.AuthorizationPolicy({"alice": [self.uri]}), clock=clock, log=Log()
        )
        audit.install(self.server)
        notes_tools.install(self.server)

    def write(self, name: str, text: str) -> None:
        with open(os.path.join(self.folder, name), "w", encoding="utf-8") as handle:
            handle.write(text)

    def read_file(self, name: str) -> str:
        with open(os.path.join(self.folder, name), encoding="utf-8") as handle:
            return handle.read()

    def result(self, message: dict[str, Any]) -> dict[str, Any]:
        response = self.server.handle(message, "alice")
        assert response is not None
        self.assertNotIn("error", response, response)
        self.assertFalse(response["result"].get("isError"), response)
        return response["result"]

    def update(self, note_id: str, body: str) -> int:
        version = self.result(tools_call("notes_read", {"workspaceUri": self.uri, "noteId": note_id}))[
            "structuredContent"
        ]["version"]
        args = {"workspaceUri": self.uri, "noteId": note_id, "body": body, "version": version}
        form = self.result(tools_call("notes_update", args))
        self.result(
            tools_call(
                "notes_update", args, requestState=form["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY)
            )
        )
        return int(self.store.audit_entries(outcome=audit.UPDATED)[-1]["id"])

    def move(self, note_id: str, place: str) -> None:
        args = {"workspaceUri": self.uri, "noteId": note_id, "newPath": place}
        form = self.result(tools_call("notes_move", args))
        self.result(
            tools_call(
                "notes_move", args, requestState=form["requestState"], inputResponses=accept(notes_tools.MOVE_KEY)
            )
        )

    def test_an_update_s_entry_records_the_device_inode_size_and_digest_of_the_file_it_wrote(self) -> None:
        entry_id = self.update("a.md", "# A\nedited\n")
        (entry,) = [e for e in self.store.audit_entries() if e["id"] == entry_id]
        recorded = json.loads(str(entry["file_identity"]))
        info = os.stat(os.path.join(self.folder, "a.md"))
        data = b"# A\nedited\n"
        self.assertEqual(
            (recorded["dev"], recorded["ino"], recorded["size"], recorded["sha256"]),
            (info.st_dev, info.st_ino, info.st_size, hashlib.sha256(data).hexdigest()),
        )
        self.assertEqual(len(recorded["was"]), 2)  # the file it replaced: device and inode

    def test_restoring_an_update_after_its_note_moved_and_another_took_its_place_restores_the_note_and_leaves_the_other(
        self,
    ) -> None:
        entry_id = self.update("a.md", "# A\nedited\n")
        self.move("a.md", "archive/a.md")
        self.move("b.md", "a.md")
        restored = self.store.restore(entry_id)
        self.assertEqual(self.read_file("a.md"), "# B\nbravo\n")  # note b: untouched
        self.assertEqual(self.read_file("archive/a.md"), "# A\nalpha\n")  # note a: restored at its new place
        self.assertEqual(
            (restored["outcome"], restored["note_id"], restored["restores"]), (audit.RESTORED, "archive/a.md", entry_id)
        )

    def test_restoring_an_update_after_a_plain_move_works(self) -> None:
        entry_id = self.update("a.md", "# A\nedited\n")
        self.move("a.md", "archive/a-old.md")
        self.store.restore(entry_id)
        self.assertEqual(self.read_file("archive/a-old.md"), "# A\nalpha\n")
        self.assertEqual(sorted(os.listdir(self.folder)), [".trash", "archive", "b.md"])

    def test_restoring_an_update_after_a_later_update_follows_the_rewritten_file(self) -> None:
        first = self.update("a.md", "# A\nedited\n")
        self.update("a.md", "# A\nedited twice\n")
        self.store.restore(first)
        self.assertEqual(self.read_file("a.md"), "# A\nalpha\n")

    def test_another_file_at_the_note_s_place_is_refused_and_nothing_changes(self) -> None:
        entry_id = self.update("a.md", "# A\nedited\n")
        # Moved away without the tools (no audit entry), and another file put at its place.
        os.rename(os.path.join(self.folder, "a.md"), os.path.join(self.folder, "archive", "elsewhere.md"))
        self.write("a.md", "# Stranger\nnot note a\n")
        trash = sorted(os.listdir(os.path.join(self.folder, ".trash")))
        entries = self.store.audit_entries()
        with self.assertRaises(stores.StoreRefused) as caught:
            self.store.restore(entry_id)
        self.assertEqual(
            str(caught.exception),
            f"entry {entry_id}: the file at a.md is another note than the one the update wrote; nothing restored",
        )
        self.assertEqual(self.read_file("a.md"), "# Stranger\nnot note a\n")
        self.assertEqual(self.read_file("archive/elsewhere.md"), "# A\nedited\n")
        self.assertEqual(sorted(os.listdir(os.path.join(self.folder, ".trash"))), trash)  # the kept version stays
        self.assertEqual(self.store.audit_entries(), entries)

    def test_an_entry_without_a_recorded_file_restores_by_place_as_before(self) -> None:
        entry_id = self.update("a.md", "# A\nedited\n")
        (entry,) = [e for e in self.store.audit_entries() if e["id"] == entry_id]
        self.store.undo_update({**entry, "file_identity": None})
        self.assertEqual(self.read_file("a.md"), "# A\nalpha\n")


if __name__ == "__main__":
    unittest.main()
