"""The audit of consumed confirmations and the trash, for SQLite, PostgreSQL and folders; the operator command."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import io
import json
import os
import sqlite3
import subprocess
import tempfile
import unittest
from typing import Any
from unittest import mock

from helpers import operator_command, procs, store_workers
from helpers.support import KEY, PRINCIPAL, WORKSPACE, Clock, ContractCase, Log, accept, answered, call

import assemble
import audit
import audit_cli
import connect
import folder_paths
import folder_trash
import frame
import main
import markdown_store
import postgres_cluster
import postgres_store
import sqlite_store
import stores
import test_connect

LATER = 10_000_000.0  # added to the clock: an expiry no test reaches
DECLINE = {main.INPUT_KEY: {"action": "decline"}}
CLIENT = "lesson-client/1.0.0"  # the clientInfo name/version support.call sends (main.request_meta)


def sqlite_rows(path: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows of one query on a connection of the test's own."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


class AuditContract(ContractCase):
    """Mixed into a TestCase per store; the subclass says how to open one and how to look inside it."""

    chosen = ("", "")  # (id, title) of the note the tests delete
    clock: Clock  # each store's setUp sets it
    crash_stages: tuple[str, ...] = ()  # hook stages inside the claim transaction

    def open(self, retention: audit.Retention = audit.Retention()) -> Any:
        """Another instance over the same backing store (or the same one after a restart)."""
        raise NotImplementedError

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def present(self, note_id: str) -> bool:
        raise NotImplementedError

    def trashed(self, entry: dict[str, Any]) -> bool:
        raise NotImplementedError

    def trash_size(self) -> int:
        raise NotImplementedError

    # ---------------------------------------------------------------- helpers

    workspace = WORKSPACE
    query = "TPS report"

    def server(self, store: Any) -> frame.Server:
        server = frame.notes_server(
            keys=[KEY],
            notes=store,
            policy=main.AuthorizationPolicy({PRINCIPAL: [self.workspace]}),
            clock=self.clock,
            log=Log(),
        )
        audit.install(server)
        return server

    def args(self) -> dict[str, str]:
        return {"workspaceUri": self.workspace, "title": self.query}

    def ask(self, server: frame.Server) -> dict[str, Any]:
        response = server.handle(call(self.args()), PRINCIPAL)
        assert response is not None
        return response["result"]

    def answer(
        self, server: frame.Server, first: dict[str, Any], responses: dict[str, Any], id: Any = "req-2"
    ) -> dict[str, Any]:
        message = call(self.args(), id=id, requestState=first["requestState"], inputResponses=responses)
        response = server.handle(message, PRINCIPAL)
        assert response is not None
        return response

    @staticmethod
    def offered(first: dict[str, Any]) -> list[str]:
        schema = first["inputRequests"][main.INPUT_KEY]["params"]["requestedSchema"]
        return [option["const"] for option in schema["properties"][main.CHOICE_FIELD]["oneOf"]]

    def target(self, store: Any) -> tuple[str, str]:
        (note,) = [
            n for n in store.candidates(main.parse_file_uri(self.workspace), self.query) if n.id == self.chosen[0]
        ]
        return (note.id, note.version)

    def outcomes(self, store: Any) -> list[str]:
        return [entry["outcome"] for entry in store.audit_entries()]

    def delete_chosen(self, store: Any) -> dict[str, Any]:
        server = self.server(store)
        first = self.ask(server)
        done = self.answer(server, first, accept(self.chosen[0]))
        self.assertTrue(done["result"]["structuredContent"]["deleted"], done)
        return store.audit_entries()[-1]

    # ---------------------------------------------------------------- one entry per consumed confirmation

    def test_an_accepted_deletion_leaves_one_entry_with_every_field_and_the_note_in_the_trash(self) -> None:
        store = self.open()
        server = self.server(store)
        first = self.ask(server)
        done = self.answer(server, first, accept(self.chosen[0]))
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": self.chosen[0]})
        (entry,) = store.audit_entries()
        self.assertEqual(
            {
                key: entry[key]
                for key in (
                    "principal",
                    "tool",
                    "outcome",
                    "note_id",
                    "title",
                    "workspace",
                    "request_id",
                    "client_name",
                    "restores",
                )
            },
            {
                "principal": PRINCIPAL,
                "tool": main.TOOL_NAME,
                "outcome": audit.DELETED,
                "note_id": self.chosen[0],
                "title": self.chosen[1],
                "workspace": stores.normalize_file_uri(self.workspace),
                "request_id": '"req-2"',
                "client_name": CLIENT,
                "restores": None,
            },
        )
        self.assertEqual(entry["at"], self.clock.now)
        self.assertFalse(self.present(self.chosen[0]))
        self.assertTrue(self.trashed(entry))
        self.assertEqual(self.trash_size(), 1)
        # Never the state, its nonce or its MAC: nothing a replay could use.
        nonce = main.StatePayload.parse(frame.KeyRing([KEY]).verify(first["requestState"])).nonce
        for value in entry.values():
            self.assertNotIn(nonce, str(value))
            self.assertNotIn(first["requestState"].split(".")[2][:16], str(value))

    def test_the_trash_is_never_offered_in_a_form(self) -> None:
        store = self.open()
        self.delete_chosen(store)
        self.assertNotIn(self.chosen[0], self.offered(self.ask(self.server(store))))
        self.assertNotIn(self.chosen[0], [n.id for n in store.candidates(main.parse_file_uri(self.workspace), "")])

    def test_a_decline_leaves_one_declined_entry_and_nothing_moved(self) -> None:
        store = self.open()
        server = self.server(store)
        first = self.ask(server)
        declined = self.answer(server, first, DECLINE)
        self.assertEqual(declined["result"]["structuredContent"]["reason"], "declined")
        (entry,) = store.audit_entries()
        self.assertEqual(
            (entry["outcome"], entry["note_id"], entry["trash"], entry["client_name"]),
            (audit.DECLINED, None, None, CLIENT),
        )
        self.assertTrue(self.present(self.chosen[0]))
        self.assertEqual(self.trash_size(), 0)

    def test_an_unticked_box_is_not_confirmed_and_moves_nothing(self) -> None:
        store = self.open()
        server = self.server(store)
        self.answer(server, self.ask(server), accept(self.chosen[0], confirm=False))
        self.assertEqual(self.outcomes(store), [audit.NOT_CONFIRMED])
        self.assertTrue(self.present(self.chosen[0]))

    def test_an_extra_declined_answer_cannot_relabel_the_audit_entry(self) -> None:
        store = self.open()
        server = self.server(store)
        # The tool reads only the answer it asked for; an answer under a key it never asked
        # for must not tell the audit a different story than the tool's own result.
        responses = {**accept(self.chosen[0], confirm=False), "junk": {"action": "decline"}}
        done = self.answer(server, self.ask(server), responses)
        self.assertEqual(done["result"]["structuredContent"], {"deleted": False, "reason": "not_confirmed"})
        self.assertEqual(self.outcomes(store), [audit.NOT_CONFIRMED])
        self.assertTrue(self.present(self.chosen[0]))
        self.assertEqual(self.trash_size(), 0)

    def test_an_extra_unticked_answer_cannot_relabel_a_decline(self) -> None:
        store = self.open()
        server = self.server(store)
        extra = {"junk": {"action": "accept", "content": {main.CONFIRM_FIELD: False}}}
        done = self.answer(server, self.ask(server), {**DECLINE, **extra})
        self.assertEqual(done["result"]["structuredContent"]["reason"], "declined")
        self.assertEqual(self.outcomes(store), [audit.DECLINED])
        self.assertTrue(self.present(self.chosen[0]))

    def test_a_replay_adds_no_entry(self) -> None:
        store = self.open()
        server = self.server(store)
        first = self.ask(server)
        self.answer(server, first, accept(self.chosen[0]))
        replay = self.answer(server, first, accept(self.chosen[0]), id=3)
        self.assertEqual(replay["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(self.outcomes(store), [audit.DELETED])

    def test_a_note_changed_since_the_form_is_refused_in_the_audit_and_not_moved(self) -> None:
        store = self.open()
        target = self.target(store)
        outcome = store.consume(PRINCIPAL, "n1", self.clock.now + LATER, target, lambda note: False)  # grant revoked
        self.assertIs(outcome, main.Settlement.CHANGED)
        (entry,) = store.audit_entries()
        self.assertEqual((entry["outcome"], entry["note_id"], entry["trash"]), (audit.REFUSED, self.chosen[0], None))
        self.assertTrue(self.present(self.chosen[0]))
        self.assertEqual(self.trash_size(), 0)

    def test_two_instances_sharing_a_store_write_each_confirmation_s_entry_once(self) -> None:
        a, b = self.open(), self.open()
        server_a, server_b = self.server(a), self.server(b)
        first = self.ask(server_a)
        self.assertTrue(self.answer(server_b, first, accept(self.chosen[0]))["result"]["structuredContent"]["deleted"])
        self.assertEqual(
            self.answer(server_a, first, accept(self.chosen[0]), id=3)["error"]["code"], main.INVALID_PARAMS
        )
        declined = self.ask(server_b)
        self.answer(server_a, declined, DECLINE)
        self.assertEqual(self.answer(server_b, declined, DECLINE, id=4)["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(self.outcomes(a), [audit.DELETED, audit.DECLINED])
        self.assertEqual(self.outcomes(b), [audit.DELETED, audit.DECLINED])

    def test_two_instances_racing_one_confirmation_write_one_entry_and_move_once(self) -> None:
        a, b = self.open(), self.open()
        target = self.target(a)
        results = store_workers.together(
            2, lambda k: (a, b)[k].consume(PRINCIPAL, "n1", self.clock.now + LATER, target, bool)
        )
        self.assertEqual(sorted(r.value for r in results), ["deleted", "used"])
        self.assertEqual(self.outcomes(a), [audit.DELETED])
        self.assertEqual(self.trash_size(), 1)

    # ---------------------------------------------------------------- restore

    def test_a_restore_brings_the_note_back_with_its_id_and_title_and_is_audited(self) -> None:
        store = self.open()
        deleted = self.delete_chosen(store)
        restored = self.open().restore(deleted["id"])
        self.assertEqual(
            (restored["outcome"], restored["restores"], restored["principal"], restored["note_id"], restored["title"]),
            (audit.RESTORED, deleted["id"], audit.OPERATOR, self.chosen[0], self.chosen[1]),
        )
        self.assertEqual(restored["workspace"], deleted["workspace"])
        self.assertTrue(self.present(self.chosen[0]))
        self.assertFalse(self.trashed(deleted))
        (note,) = [
            n for n in store.candidates(main.parse_file_uri(self.workspace), self.query) if n.id == self.chosen[0]
        ]
        self.assertEqual(note.title, self.chosen[1])
        self.assertEqual(self.outcomes(store), [audit.DELETED, audit.RESTORED])
        # Once back, it is gone from the trash: a second restore is refused and records nothing.
        with self.assertRaises(stores.StoreRefused):
            store.restore(deleted["id"])
        self.assertEqual(self.outcomes(store), [audit.DELETED, audit.RESTORED])

    def test_a_restore_is_refused_when_a_note_now_exists_at_that_place(self) -> None:
        store = self.open()
        deleted = self.delete_chosen(store)
        self.recreate(store)
        with self.assertRaisesRegex(stores.StoreRefused, "now exists"):
            store.restore(deleted["id"])
        self.assertTrue(self.trashed(deleted))
        self.assertEqual(self.outcomes(store), [audit.DELETED])

    def test_a_restore_of_an_entry_that_trashed_nothing_is_refused(self) -> None:
        store = self.open()
        server = self.server(store)
        self.answer(server, self.ask(server), DECLINE)
        (entry,) = store.audit_entries()
        for entry_id in (entry["id"], entry["id"] + 100):
            with self.assertRaises(stores.StoreRefused):
                store.restore(entry_id)
        self.assertEqual(self.outcomes(store), [audit.DECLINED])

    def test_a_form_shown_before_a_deletion_cannot_delete_the_restored_note(self) -> None:
        store = self.open()
        server = self.server(store)
        stale = self.ask(server)  # state S: a form showing the chosen note, never answered
        deleted = self.delete_chosen(store)  # another confirmation deletes it
        self.operator_restore(store, deleted["id"])
        self.assertTrue(self.present(self.chosen[0]))
        refused = self.answer(server, stale, accept(self.chosen[0]), id="req-stale")
        self.assertIs(refused["result"]["isError"], True, refused)
        self.assertTrue(self.present(self.chosen[0]))  # not deleted a second time
        self.assertEqual(self.outcomes(store), [audit.DELETED, audit.RESTORED, audit.REFUSED])
        self.assertEqual(self.trash_size(), 0)

    def operator_restore(self, store: Any, entry_id: int) -> None:
        """Restore as the operator does (the folder store: its own restore; the SQL stores: `audit restore`)."""
        store.restore(entry_id)

    def recreate(self, store: Any) -> None:
        """Put a new note where the chosen one was."""
        raise NotImplementedError

    # ---------------------------------------------------------------- unlink mode

    def test_unlink_mode_deletes_as_before_and_has_nothing_to_restore(self) -> None:
        store = self.open(audit.Retention(deletion=audit.DELETION_UNLINK))
        entry = self.delete_chosen(store)
        self.assertEqual((entry["outcome"], entry["trash"]), (audit.DELETED, None))
        self.assertFalse(self.present(self.chosen[0]))
        self.assertEqual(self.trash_size(), 0)
        with self.assertRaises(stores.StoreRefused):
            store.restore(entry["id"])
        self.assertFalse(self.present(self.chosen[0]))

    # ---------------------------------------------------------------- bounds

    def test_entries_are_pruned_by_count_keeping_the_newest(self) -> None:
        store = self.open(audit.Retention(max_entries=3))
        for k in range(3):
            store.consume(PRINCIPAL, f"n{k}", self.clock.now + LATER, None, bool)
        first_ids = [entry["id"] for entry in store.audit_entries()]
        self.assertEqual(len(first_ids), 3)  # at the bound: all kept
        store.consume(PRINCIPAL, "n3", self.clock.now + LATER, None, bool)
        self.assertEqual([entry["id"] for entry in store.audit_entries()], first_ids[1:] + [first_ids[2] + 1])

    def test_the_count_bound_is_per_principal_so_one_principal_cannot_push_out_another_s_entries(self) -> None:
        bound = 3
        store = self.open(audit.Retention(max_entries=bound))
        store.consume("bob", "b0", self.clock.now + LATER, None, bool)
        (bob,) = store.audit_entries(principal="bob")
        written = []
        for k in range(bound + 5):
            store.consume(PRINCIPAL, f"a{k}", self.clock.now + LATER, None, bool)
            written.append(store.audit_entries(principal=PRINCIPAL)[-1]["id"])
        self.assertEqual(store.audit_entries(principal="bob"), [bob])  # one entry, far older than alice's, kept
        self.assertEqual([entry["id"] for entry in store.audit_entries(principal=PRINCIPAL)], written[-bound:])

    def test_entries_are_pruned_by_age_on_the_injected_clock(self) -> None:
        day = audit.DAY_SECONDS
        store = self.open(audit.Retention(audit_seconds=10 * day))
        store.consume(PRINCIPAL, "old", self.clock.now + LATER, None, bool)
        self.clock.now += 10 * day - 1
        store.consume(PRINCIPAL, "mid", self.clock.now + LATER, None, bool)
        self.assertEqual(len(store.audit_entries()), 2)  # one second short of the age: kept
        self.clock.now += 1
        store.consume(PRINCIPAL, "new", self.clock.now + LATER, None, bool)
        self.assertEqual([entry["at"] for entry in store.audit_entries()], [self.clock.now - 1, self.clock.now])

    def test_the_trash_is_emptied_by_age_on_the_injected_clock(self) -> None:
        store = self.open(audit.Retention(trash_seconds=30 * audit.DAY_SECONDS))
        deleted = self.delete_chosen(store)
        self.clock.now += 30 * audit.DAY_SECONDS - 1
        store.consume(PRINCIPAL, "later", self.clock.now + LATER, None, bool)
        self.assertTrue(self.trashed(deleted))  # one second short: kept
        self.clock.now += 1
        store = self.open(
            audit.Retention(trash_seconds=30 * audit.DAY_SECONDS)
        )  # a folder store empties once an interval
        store.consume(PRINCIPAL, "latest", self.clock.now + LATER, None, bool)
        self.assertFalse(self.trashed(deleted))
        self.assertEqual(self.trash_size(), 0)
        with self.assertRaises(stores.StoreRefused):
            store.restore(deleted["id"])
        self.assertFalse(self.present(self.chosen[0]))


class SqlAuditContract(AuditContract):
    """The SQL stores: the row moves to deleted_notes in the claim's transaction."""

    chosen = ("note-14", "TPS report 2025")

    def present(self, note_id: str) -> bool:
        return bool(self.rows(f"SELECT 1 FROM notes WHERE id = '{note_id}'"))

    def trashed(self, entry: dict[str, Any]) -> bool:
        return entry["trash"] == audit.SQL_TRASH and bool(
            self.rows(f"SELECT 1 FROM deleted_notes WHERE audit_id = {int(entry['id'])}")
        )

    def trash_size(self) -> int:
        return len(self.rows("SELECT audit_id FROM deleted_notes"))

    def recreate(self, store: Any) -> None:
        store.put(main.Note(self.chosen[0], "A new note", f"{WORKSPACE}/new.md"))

    def location(self) -> str:
        """What `audit --db` names this store by (a file path or a postgresql:// URL)."""
        raise NotImplementedError

    def execute(self, *statements: str) -> None:
        """Run statements behind the store's back, committed."""
        raise NotImplementedError

    def operator_restore(self, store: Any, entry_id: int) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = audit_cli.command(["--db", self.location(), "restore", str(entry_id)])
        self.assertEqual(status, 0, out.getvalue())
        self.assertIn(f"restored entry {entry_id}", out.getvalue())

    def test_a_restored_note_gets_a_new_revision_and_keeps_its_id_title_and_place(self) -> None:
        store = self.open()
        before = {note.id: note for note in store.all()}[self.chosen[0]]
        deleted = self.delete_chosen(store)
        store.restore(deleted["id"])
        after = {note.id: note for note in store.all()}[self.chosen[0]]
        self.assertEqual((after.id, after.title, after.uri), (before.id, before.title, before.uri))
        self.assertNotEqual(after.revision, before.revision)
        self.assertNotEqual(after.version, before.version)
        self.assertLess(after.revision, 2**audit.RESTORED_REVISION_BITS)

    def test_an_audit_from_before_the_per_principal_bound_is_numbered_at_start_up_and_pruned_by_it(self) -> None:
        store = self.open()
        for principal, nonce in (("bob", "b0"), (PRINCIPAL, "a0"), ("bob", "b1"), (PRINCIPAL, "a1"), (PRINCIPAL, "a2")):
            store.consume(principal, nonce, self.clock.now + LATER, None, bool)
        store.close()
        self.execute(
            "DROP INDEX audit_by_principal", "ALTER TABLE audit DROP COLUMN principal_seq"
        )  # the table as it was
        old = self.open(audit.Retention(max_entries=2))
        numbered = self.rows("SELECT principal, principal_seq FROM audit ORDER BY id")
        self.assertEqual(numbered, [("bob", 1), (PRINCIPAL, 1), ("bob", 2), (PRINCIPAL, 2), (PRINCIPAL, 3)])
        old.consume(PRINCIPAL, "a3", self.clock.now + LATER, None, bool)
        self.assertEqual(
            self.rows("SELECT principal, principal_seq FROM audit ORDER BY id"),
            [("bob", 1), ("bob", 2), (PRINCIPAL, 3), (PRINCIPAL, 4)],
        )

    def test_a_restore_is_refused_when_another_note_now_has_the_same_place(self) -> None:
        store = self.open()
        deleted = self.delete_chosen(store)
        store.put(main.Note("note-new", "Another", f"{WORKSPACE}/tps-2025.md"))
        with self.assertRaisesRegex(stores.StoreRefused, "now exists"):
            store.restore(deleted["id"])
        self.assertFalse(self.present(self.chosen[0]))

    def test_a_crash_inside_the_claim_transaction_rolls_back_the_entry_with_the_move(self) -> None:
        for stage in ("claimed", "deleted"):
            with self.subTest(stage=stage):
                store = self.open()

                def crash(at: str, stage: str = stage) -> None:  # this subtest's stage, bound now
                    if at == stage:
                        raise KeyboardInterrupt("simulated death before COMMIT")

                store._inside_transaction_hook = crash
                with self.assertRaises(KeyboardInterrupt):
                    store.consume(PRINCIPAL, "n1", self.clock.now + LATER, self.target(store), bool)
                restarted = self.open()
                self.assertEqual(restarted.audit_entries(), [])
                self.assertTrue(self.present(self.chosen[0]))
                self.assertEqual(self.trash_size(), 0)
                self.assertFalse(restarted.is_consumed("n1"))


class SqliteAudit(SqlAuditContract, unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="audit-sqlite-")
        self.addCleanup(tmp.cleanup)
        self.path = os.path.join(tmp.name, "notes.db")
        self.clock = Clock()

    def open(self, retention: audit.Retention = audit.Retention()) -> Any:
        store = sqlite_store.open_store(
            self.path, clock=self.clock, seed_notes=main.lesson_notes(), retention=retention
        )
        self.addCleanup(store.close)
        return store

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return sqlite_rows(self.path, sql)

    def location(self) -> str:
        return self.path

    def execute(self, *statements: str) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            for statement in statements:
                conn.execute(statement)
        finally:
            conn.close()

    def test_one_consume_prunes_at_most_one_batch_of_expired_entries(self) -> None:
        store = self.open(audit.Retention(audit_seconds=100))
        for k in range(audit.PRUNE_BATCH + 2):
            store.consume(PRINCIPAL, f"n{k}", self.clock.now + LATER, None, bool)
        self.clock.now += 100
        store.consume(PRINCIPAL, "late", self.clock.now + LATER, None, bool)
        self.assertEqual(len(store.audit_entries()), 2 + 1)  # a batch went; two old entries wait for the next call
        store.consume(PRINCIPAL, "later", self.clock.now + LATER, None, bool)
        self.assertEqual([entry["at"] for entry in store.audit_entries()], [self.clock.now] * 2)

    def test_a_database_from_before_the_audit_gains_its_tables_when_opened(self) -> None:
        self.open().close()
        conn = sqlite3.connect(self.path)
        conn.execute("DROP TABLE audit")
        conn.execute("DROP TABLE deleted_notes")
        conn.commit()
        conn.close()
        self.assertEqual(self.delete_chosen(self.open())["outcome"], audit.DELETED)


PG = store_workers.OptionalCluster()
setUpModule, tearDownModule = PG.start, PG.stop


class PostgresAudit(SqlAuditContract, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        PG.require()

    def setUp(self) -> None:
        self.url = PG.require().new_database()
        self.clock = Clock()

    def open(self, retention: audit.Retention = audit.Retention()) -> Any:
        store = postgres_store.open_store(
            self.url, clock=self.clock, seed_notes=main.lesson_notes(), retention=retention
        )
        self.addCleanup(store.close)
        return store

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with postgres_cluster.psycopg.connect(self.url) as conn:
            return conn.execute(sql).fetchall()

    def location(self) -> str:
        return self.url

    def execute(self, *statements: str) -> None:
        with postgres_cluster.psycopg.connect(self.url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)


class FolderAudit(AuditContract, unittest.TestCase):
    chosen = ("tps-2025.md", "TPS report 2025")

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="audit-folder-")
        self.addCleanup(tmp.cleanup)
        self.base = tmp.name
        self.ws = os.path.join(self.base, "Notes")
        self.outside = os.path.join(self.base, "outside")
        os.makedirs(self.outside)
        self.write("tps-2025.md", "# TPS report 2025\nbody\n")
        self.write("tps-2024.md", "# TPS report 2024\n")
        self.workspace = main.format_file_uri(tuple(p for p in self.ws.split("/") if p))
        self.clock = Clock()

    def write(self, rel: str, text: str) -> None:
        path = os.path.join(self.ws, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)

    def open(self, retention: audit.Retention = audit.Retention(), mkdir: Any = os.mkdir) -> Any:
        nonces = sqlite_store.open_ledger(os.path.join(self.base, "nonces.db"), clock=self.clock)
        self.addCleanup(nonces.close)
        return markdown_store.MarkdownNotesStore(
            [self.ws], nonces, retention=retention, ops=folder_paths.OS_OPS._replace(mkdir=mkdir)
        )

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return sqlite_rows(os.path.join(self.base, "nonces.db"), sql)

    @property
    def trash(self) -> str:
        return os.path.join(self.ws, folder_trash.TRASH_DIR)

    def present(self, note_id: str) -> bool:
        return os.path.isfile(os.path.join(self.ws, note_id))

    def trashed(self, entry: dict[str, Any]) -> bool:
        return bool(entry["trash"]) and os.path.isfile(os.path.join(self.trash, entry["trash"]))

    def trash_size(self) -> int:
        return len(os.listdir(self.trash)) if os.path.isdir(self.trash) else 0

    def recreate(self, store: Any) -> None:
        self.write(self.chosen[0], "# A new note\n")

    def test_the_trashed_file_keeps_its_content_and_its_name_says_when_and_what(self) -> None:
        entry = self.delete_chosen(self.open())
        self.assertRegex(
            entry["trash"], r"^19700112T134640Z-[0-9a-f]{12}-tps-2025\.md$"
        )  # Clock() starts at 1,000,000 s
        with open(os.path.join(self.trash, entry["trash"]), encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "# TPS report 2025\nbody\n")
        self.assertEqual(os.stat(self.trash).st_mode & 0o777, 0o700)  # the owner's alone
        self.assertEqual(entry["uri"], self.workspace + "/tps-2025.md")

    def test_a_trash_name_keeps_the_original_name_while_it_fits_name_max(self) -> None:
        prefix = len("19700112T134640Z-0123456789ab-")
        fits = "n" * (folder_paths.NAME_MAX - prefix - 3) + ".md"
        kept = folder_trash.trash_name_for(fits, self.clock.now)
        self.assertEqual((len(os.fsencode(kept)), kept.endswith("-" + fits)), (folder_paths.NAME_MAX, True))
        dropped = folder_trash.trash_name_for("n" + fits, self.clock.now)
        self.assertRegex(dropped, r"^19700112T134640Z-[0-9a-f]{12}\.md$")

    def test_a_note_whose_trash_name_would_be_too_long_is_trashed_and_restored_by_its_entry(self) -> None:
        name = "議" * 80 + ".md"  # 243 bytes: a legal name, an 83-character id, too long with the prefix
        self.write(name, "# TPS long\n")
        self.chosen, self.query = (name, "TPS long"), "TPS long"
        store = self.open()
        deleted = self.delete_chosen(store)
        self.assertRegex(deleted["trash"], r"^\d{8}T\d{6}Z-[0-9a-f]{12}\.md$")
        self.assertTrue(self.trashed(deleted))
        self.assertEqual(store.restore(deleted["id"])["note_id"], name)
        self.assertTrue(self.present(name))

    def test_a_trash_note_matching_the_title_is_never_offered_nor_deletable_by_id(self) -> None:
        self.write(".trash/TPS report 2026.md", "# TPS report 2026\n")
        store = self.open()
        self.assertEqual(self.offered(self.ask(self.server(store))), ["tps-2024.md", "tps-2025.md"])
        outcome = store.consume(
            PRINCIPAL, "n1", self.clock.now + LATER, (".trash/TPS report 2026.md", "v"), lambda n: True
        )
        self.assertIs(outcome, main.Settlement.CHANGED)
        self.assertTrue(os.path.isfile(os.path.join(self.trash, "TPS report 2026.md")))

    def assert_refused_and_nothing_moved(self, store: Any) -> None:
        with self.assertRaises(stores.StoreRefused) as caught:
            store.consume(PRINCIPAL, "n1", self.clock.now + LATER, self.target(store), lambda n: True)
        self.assertEqual(str(caught.exception), folder_trash.TRASH_REFUSED)
        self.assertNotIn(self.base, str(caught.exception))
        self.assertTrue(self.present(self.chosen[0]))
        self.assertFalse(store.is_consumed("n1"))  # released: the user may answer again once it is fixed
        self.assertEqual(store.audit_entries(), [])
        self.assertEqual(os.listdir(self.outside), [])

    def test_a_trash_that_is_a_symlink_is_refused_and_nothing_moved(self) -> None:
        os.symlink(self.outside, self.trash)
        self.assert_refused_and_nothing_moved(self.open())

    def test_a_trash_that_is_a_file_is_refused_and_nothing_moved(self) -> None:
        self.write(folder_trash.TRASH_DIR, "not a folder")
        self.assert_refused_and_nothing_moved(self.open())

    def test_a_trash_removed_between_its_creation_and_its_opening_is_refused_and_nothing_moved(self) -> None:
        made: list[str] = []

        def made_then_removed(name: str, mode: int, *, dir_fd: int) -> None:
            made.append(name)  # made, then removed at once by another actor: nothing there to open

        self.assert_refused_and_nothing_moved(self.open(mkdir=made_then_removed))
        self.assertEqual(made, [folder_trash.TRASH_DIR])

    def test_a_trash_the_os_will_not_create_refuses_the_deletion_and_releases_the_claim(self) -> None:
        def refused(name: str, mode: int, *, dir_fd: int) -> None:
            raise PermissionError(13, "Permission denied")

        store = self.open(mkdir=refused)
        with self.assertRaises(stores.StoreRefused) as caught:
            store.consume(PRINCIPAL, "n1", self.clock.now + LATER, self.target(store), lambda n: True)
        self.assertEqual(str(caught.exception), folder_trash.DELETE_REFUSED)
        self.assertTrue(self.present(self.chosen[0]))
        self.assertFalse(store.is_consumed("n1"))
        self.assertEqual((store.audit_entries(), self.trash_size()), ([], 0))

    def test_with_the_notes_folder_gone_the_trash_is_looked_for_nowhere_else(self) -> None:
        store = self.open(audit.Retention(trash_seconds=1))
        deleted = self.delete_chosen(store)
        elsewhere = os.path.join(self.base, "cwd")
        decoy = os.path.join(elsewhere, folder_trash.TRASH_DIR, "19700101T000000Z-0123456789ab-decoy.md")
        os.makedirs(os.path.dirname(decoy))
        with open(decoy, "w", encoding="utf-8") as handle:
            handle.write("not the server's")
        os.rename(self.ws, os.path.join(self.base, "gone"))
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(elsewhere)  # a relative lookup would land here
        self.clock.now += markdown_store.EMPTY_INTERVAL_SECONDS
        store.empty_trash()
        with self.assertRaises(stores.StoreRefused):
            store.restore(deleted["id"])
        self.assertTrue(os.path.isfile(decoy))

    def test_a_trash_replaced_by_a_symlink_during_the_move_puts_the_file_back_and_is_refused(self) -> None:
        store = self.open()
        os.makedirs(self.trash)
        real = folder_trash.rename_noreplace
        moves: list[str] = []

        def swap_then_move(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
            real(src_fd, src, dst_fd, dst)
            moves.append(dst)
            if len(moves) == 1:  # the move into the trash: another actor swaps the trash for a link
                os.rename(self.trash, os.path.join(self.base, "old-trash"))
                os.symlink(self.outside, self.trash)

        with mock.patch.object(folder_trash, "rename_noreplace", swap_then_move):
            self.assert_refused_and_nothing_moved(store)
        self.assertEqual(moves[1], self.chosen[0])  # moved back
        self.assertEqual(os.listdir(os.path.join(self.base, "old-trash")), [])

    def test_the_trash_is_the_same_only_while_dot_trash_names_the_very_folder_opened(self) -> None:
        self.delete_chosen(self.open())
        root = folder_paths.Root(folder_paths.root_path(self.ws), os.path.realpath(self.ws))
        self.addCleanup(root.close)
        fd = folder_trash.open_trash(root, create=False)
        assert fd is not None
        self.addCleanup(os.close, fd)
        self.assertTrue(folder_trash.same_trash(root, fd))
        old = os.path.join(self.base, "old-trash")
        os.rename(self.trash, old)
        self.assertFalse(folder_trash.same_trash(root, fd))  # nothing named .trash
        os.symlink(old, self.trash)
        self.assertFalse(folder_trash.same_trash(root, fd))  # a link to that very folder is still a link
        os.unlink(self.trash)
        os.makedirs(self.trash)
        self.assertFalse(folder_trash.same_trash(root, fd))  # another real folder
        os.rmdir(self.trash)
        os.rename(old, self.trash)
        self.assertTrue(folder_trash.same_trash(root, fd))
        os.rename(self.ws, os.path.join(self.base, "gone"))
        self.assertFalse(folder_trash.same_trash(root, fd))  # no notes folder at all

    def test_a_trash_swapped_before_the_move_moves_nothing_at_all(self) -> None:
        store = self.open()
        real_open, real_rename = folder_trash.open_trash, folder_trash.rename_noreplace
        renames: list[str] = []

        def open_then_swap(root: Any, create: bool, mkdir: Any = os.mkdir) -> int | None:
            fd = real_open(root, create, mkdir)
            os.rename(self.trash, os.path.join(self.base, "old-trash"))
            os.makedirs(self.trash)  # another real folder now answers to .trash
            return fd

        def counted(*args: Any) -> None:
            renames.append(args[1])
            real_rename(*args)

        with (
            mock.patch.object(folder_trash, "open_trash", open_then_swap),
            mock.patch.object(folder_trash, "rename_noreplace", counted),
        ):
            self.assert_refused_and_nothing_moved(store)
        self.assertEqual(renames, [])

    def test_one_emptying_removes_at_most_a_batch_and_lists_at_most_the_walk_bound(self) -> None:
        old = "19700101T000000Z-0123456789ab-"
        for k in range(audit.PRUNE_BATCH + 2):
            self.write(f".trash/{old}{k:03d}.md", "old")
        store = self.open(audit.Retention(trash_seconds=1))
        store.empty_trash()
        self.assertEqual(self.trash_size(), 2)
        nonces = sqlite_store.open_ledger(os.path.join(self.base, "nonces.db"), clock=self.clock)
        self.addCleanup(nonces.close)
        narrow = markdown_store.MarkdownNotesStore(
            [self.ws], nonces, max_walk_entries=1, retention=audit.Retention(trash_seconds=1)
        )
        narrow.empty_trash()
        self.assertEqual(self.trash_size(), 1)  # one name listed, one removed

    def test_one_emptying_goes_through_every_notes_folder_s_trash(self) -> None:
        other = os.path.join(self.base, "Other")
        old = "19700101T000000Z-0123456789ab-"
        for folder in (self.ws, other):
            os.makedirs(os.path.join(folder, folder_trash.TRASH_DIR), exist_ok=True)
            with open(os.path.join(folder, folder_trash.TRASH_DIR, old + "a.md"), "w", encoding="utf-8") as handle:
                handle.write("old")
        nonces = sqlite_store.open_ledger(os.path.join(self.base, "nonces.db"), clock=self.clock)
        self.addCleanup(nonces.close)
        markdown_store.MarkdownNotesStore(
            [self.ws, other], nonces, retention=audit.Retention(trash_seconds=1)
        ).empty_trash()
        self.assertEqual((self.trash_size(), os.listdir(os.path.join(other, folder_trash.TRASH_DIR))), (0, []))

    def fake_renameat2(self, error: int) -> Any:
        """A renameat2 that fails with `error`, as on a file system or kernel without RENAME_NOREPLACE."""

        def fail(*args: Any) -> int:
            ctypes.set_errno(error)
            return -1

        return mock.patch.object(folder_trash, "_RENAMEAT2", fail)

    def test_without_rename_noreplace_the_move_and_the_restore_still_never_replace(self) -> None:
        for error in (errno.EINVAL, errno.ENOSYS):
            with self.subTest(error=error):
                store = self.open()
                with self.fake_renameat2(error):
                    deleted = self.delete_chosen(store)
                    self.assertTrue(self.trashed(deleted) and not self.present(self.chosen[0]))
                    self.recreate(store)
                    with self.assertRaisesRegex(stores.StoreRefused, "now exists"):
                        store.restore(deleted["id"])
                    self.assertTrue(self.trashed(deleted))
                os.unlink(os.path.join(self.ws, self.chosen[0]))
                store.restore(deleted["id"])
                self.assertTrue(self.present(self.chosen[0]))

    def test_a_move_renameat2_refuses_for_another_reason_is_refused_and_nothing_moved(self) -> None:
        store = self.open()
        with self.fake_renameat2(errno.EXDEV), self.assertRaises(stores.StoreRefused):
            store.consume(PRINCIPAL, "n1", self.clock.now + LATER, self.target(store), lambda n: True)
        self.assertTrue(self.present(self.chosen[0]))
        self.assertEqual((self.trash_size(), store.audit_entries()), (0, []))

    def test_emptying_the_trash_touches_only_expired_regular_files_inside_it(self) -> None:
        store = self.open(audit.Retention(trash_seconds=audit.DAY_SECONDS))
        os.makedirs(self.trash)
        with open(os.path.join(self.outside, "keep.md"), "w", encoding="utf-8") as handle:
            handle.write("outside")
        old = "19700101T000000Z-0123456789ab-"
        os.symlink(os.path.join(self.outside, "keep.md"), os.path.join(self.trash, old + "link.md"))
        os.makedirs(os.path.join(self.trash, old + "folder"))
        self.write(f".trash/{old}folder/inner.md", "inner")
        self.write(".trash/a name the server did not give.md", "mine")
        self.write(f".trash/{old}expired.md", "old")
        store.consume(PRINCIPAL, "n1", self.clock.now + LATER, None, bool)
        self.assertEqual(
            sorted(os.listdir(self.trash)),
            sorted([old + "link.md", old + "folder", "a name the server did not give.md"]),
        )
        self.assertTrue(os.path.isfile(os.path.join(self.trash, old + "folder", "inner.md")))
        self.assertEqual(os.listdir(self.outside), ["keep.md"])

    def test_an_instance_empties_its_trash_folders_at_most_once_an_interval(self) -> None:
        store = self.open(audit.Retention(trash_seconds=60))
        store.consume(PRINCIPAL, "first", self.clock.now + LATER, None, bool)  # empties (nothing yet)
        deleted = self.delete_chosen(store)
        self.clock.now += markdown_store.EMPTY_INTERVAL_SECONDS - 1
        store.consume(PRINCIPAL, "n1", self.clock.now + LATER, None, bool)
        self.assertTrue(self.trashed(deleted))  # expired, but this instance emptied less than an interval ago
        self.clock.now += 1
        store.consume(PRINCIPAL, "n2", self.clock.now + LATER, None, bool)
        self.assertFalse(self.trashed(deleted))

    def test_a_restore_refuses_a_link_left_in_the_note_s_place_in_the_trash(self) -> None:
        store = self.open()
        deleted = self.delete_chosen(store)
        trashed = os.path.join(self.trash, deleted["trash"])
        os.unlink(trashed)
        os.symlink(os.path.join(self.outside, "secret.md"), trashed)
        with self.assertRaisesRegex(stores.StoreRefused, "something else"):
            store.restore(deleted["id"])
        self.assertFalse(os.path.lexists(os.path.join(self.ws, self.chosen[0])))
        self.assertTrue(os.path.islink(trashed))

    def test_a_restore_refuses_when_the_note_s_folder_is_gone(self) -> None:
        self.write("sub/TPS sub.md", "# TPS sub\n")
        self.chosen, self.query = ("sub/TPS sub.md", "TPS sub"), "TPS sub"
        store = self.open()
        deleted = self.delete_chosen(store)
        os.rmdir(os.path.join(self.ws, "sub"))
        with self.assertRaisesRegex(stores.StoreRefused, "folder no longer exists"):
            store.restore(deleted["id"])
        self.assertTrue(self.trashed(deleted))


class ContextTests(unittest.TestCase):
    def test_hostile_context_fields_are_clipped_and_a_bad_workspace_is_left_out(self) -> None:
        message = call({"workspaceUri": "file:///a/../b", "title": "x"}, id="r" * 1000)
        message["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = {"name": "n" * 1000 + "\n"}
        context = audit.context_of(main.parse_envelope(message))
        self.assertEqual(len(context.request_id or ""), audit.MAX_FIELD_CHARS)
        self.assertEqual(context.client_name, "n" * audit.MAX_FIELD_CHARS)
        self.assertIsNone(context.workspace)
        self.assertEqual(context.tool, main.TOOL_NAME)

    def test_a_field_of_exactly_the_limit_is_kept_whole(self) -> None:
        self.assertEqual(audit.clip("n" * audit.MAX_FIELD_CHARS), "n" * audit.MAX_FIELD_CHARS)
        self.assertEqual(audit.clip("n" * (audit.MAX_FIELD_CHARS + 1)), "n" * audit.MAX_FIELD_CHARS)
        self.assertEqual((audit.clip(None), audit.clip(7)), (None, "7"))

    def test_a_client_name_that_is_not_a_string_is_not_recorded(self) -> None:
        message = call({"workspaceUri": WORKSPACE, "title": "x"})
        message["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = {"name": ["x"]}
        self.assertIsNone(audit.context_of(main.parse_envelope(message)).client_name)

    def test_a_client_version_follows_the_name_and_one_that_is_not_a_string_is_left_out(self) -> None:
        message = call({"workspaceUri": WORKSPACE, "title": "x"})
        info: dict[str, Any] = {"name": "host", "version": "2.1"}
        message["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = info
        self.assertEqual(audit.context_of(main.parse_envelope(message)).client_name, "host/2.1")
        info["version"] = 2.1
        self.assertEqual(audit.context_of(main.parse_envelope(message)).client_name, "host")
        info.update(name=None, version="2.1")  # a version alone names no client
        self.assertIsNone(audit.context_of(main.parse_envelope(message)).client_name)

    def test_the_table_escapes_control_characters_so_one_entry_is_one_line(self) -> None:
        entry = dict.fromkeys(audit.COLUMNS)
        entry.update(id=1, at=0.0, principal="p", outcome=audit.DELETED, title="evil\nID  TIME", client_name="\x1b[31m")
        lines = audit_cli.table([entry])
        self.assertEqual(len(lines), 2)
        self.assertIn("evil\\nID", lines[1])
        self.assertIn("\\x1b[31m", lines[1])

    def test_since_reads_relative_and_absolute_times_and_refuses_others(self) -> None:
        self.assertEqual(audit_cli.when("2h", 10_000.0), 10_000.0 - 7200)
        self.assertEqual(audit_cli.when("1970-01-02", 0.0), 86_400.0)
        self.assertEqual(audit_cli.when("1970-01-01T00:01:00Z", 0.0), 60.0)
        for text in ("yesterday", "2h ago", "-1d", ""):
            with self.assertRaises(argparse.ArgumentTypeError):
                audit_cli.when(text, 0.0)


class PublishAudit(test_connect.InProcess):
    """notes_publish over an SQLite store: the outcome only the tool knows is completed from its result."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="audit-publish-")
        self.addCleanup(tmp.cleanup)
        self.clock, self.log = Clock(), Log()
        self.notes = sqlite_store.open_store(
            os.path.join(tmp.name, "n.db"), clock=self.clock, seed_notes=test_connect.notes()
        )
        self.addCleanup(self.notes.close)
        policy = main.AuthorizationPolicy(test_connect.grants())
        self.server = frame.notes_server(keys=[KEY], notes=self.notes, policy=policy, clock=self.clock, log=self.log)
        audit.install(self.server)
        tokens = {"alice": test_connect.ALICE_TOKEN, "bob": test_connect.BOB_TOKEN}
        self.pages = connect.install(self.server, tokens, base_url=test_connect.BASE)
        self.store = self.pages.store
        self.service = self.store.service
        self.alice = test_connect.Client(lambda message: answered(self.server, message, "alice"))
        self.bob = test_connect.Client(lambda message: answered(self.server, message, "bob"))

    def decide(self, decision: str) -> dict[str, Any]:
        first = self.first()
        path = self.connect_path(first)
        self.assertEqual(self.signed_in(path).decide(path, decision), 200)
        return self.retry(first, test_connect.answer("accept"))["result"]

    def test_a_publication_is_recorded_as_published(self) -> None:
        self.assertTrue(self.decide("allow")["structuredContent"]["published"])
        (entry,) = self.notes.audit_entries()
        self.assertEqual(
            (entry["tool"], entry["outcome"], entry["principal"]), (connect.TOOL_NAME, audit.PUBLISHED, "alice")
        )
        self.assertIn("note-14", [note.id for note in self.notes.all()])  # publishing moves nothing

    def test_a_denial_on_the_page_is_recorded_as_denied(self) -> None:
        self.assertEqual(self.decide("deny")["structuredContent"]["reason"], "denied")
        self.assertEqual([e["outcome"] for e in self.notes.audit_entries()], [audit.DENIED])

    def test_a_declined_publication_is_recorded_as_declined_from_the_tool_s_result(self) -> None:
        self.assertEqual(
            self.retry(self.first(), test_connect.answer("decline"))["result"]["structuredContent"]["reason"],
            "declined",
        )
        self.assertEqual([e["outcome"] for e in self.notes.audit_entries()], [audit.DECLINED])

    def test_an_entry_is_completed_only_with_an_outcome_a_tool_reports_after_consuming(self) -> None:
        for reason in (audit.DECLINED, audit.NOT_CONFIRMED, audit.DENIED):
            self.assertEqual(audit.result_outcome(main.tool_result("t", {"reason": reason})), reason)
        for other in (audit.DELETED, audit.RESTORED, audit.PENDING, "cancelled", ["declined"]):
            self.assertIsNone(audit.result_outcome(main.tool_result("t", {"reason": other})))
        self.assertEqual(audit.result_outcome(main.tool_result("t", {"published": True})), audit.PUBLISHED)
        self.assertEqual(audit.result_outcome(main.tool_result("t", is_error=True)), audit.REFUSED)


class ServeWiring(unittest.TestCase):
    def test_the_config_s_deletion_and_bounds_reach_each_store_and_the_audit_wraps_tools_call(self) -> None:
        with tempfile.TemporaryDirectory(prefix="audit-wiring-") as folder:
            grants = {"alice": {"token": None, "workspaces": [WORKSPACE]}}
            config = {"principals": grants, "stdioPrincipal": "alice", "db": os.path.join(folder, "n.db"),
                      "deletion": "unlink", "trashDays": 2.0, "auditMaxEntries": 7}  # fmt: skip
            server = assemble.build_server(config, [KEY])
            self.addCleanup(assemble.close_store, server.notes)
            sql: Any = server.services.notes  # the database store, in whichever wrapper serves it
            self.assertEqual(sql.retention, audit.Retention("unlink", 2 * audit.DAY_SECONDS, max_entries=7))
            self.assertIsNot(server.methods["tools/call"], main.call_tool)
            grants["alice"]["notesDirs"] = [folder]
            folders = assemble.build_store(config)
            self.addCleanup(folders.close)
            assert isinstance(folders, markdown_store.MarkdownNotesStore)  # now it names notes folders
            self.assertEqual((folders.retention, folders.nonces.retention), (sql.retention,) * 2)
            memory = assemble.build_server(
                {"principals": {"alice": {"token": None, "workspaces": []}}, "stdioPrincipal": "alice"}, [KEY]
            )
            self.assertIs(
                memory.methods["tools/call"], frame.call_tool
            )  # the frame's (JSON text too), unwrapped: no audit


class OperatorCommand(unittest.TestCase):
    """`serve.py audit` against a real database that a real `serve.py --stdio` wrote.

    Each exit status the shell sees (0 listed, 1 refused, 2 a usage error) comes from a real
    `serve.py audit` process; the further filters and restores run its entry point in this process.
    """

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="audit-cli-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.db = os.path.join(self.dir, "notes.db")
        self.env = procs.server_env(NOTES_MCP_SECRET=procs.SECRET, XDG_STATE_HOME=os.path.join(self.dir, "state"))

    def command(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`serve.py audit ARGS` as a process: its exit status is what the shell sees."""
        return subprocess.run(
            [*procs.python(), procs.SERVE, "audit", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=procs.GUARD,
        )

    def again(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`serve.py audit ARGS` run in this process: one more filter or look, once the process was tried."""
        return operator_command.run(["audit", *args], self.env)

    def session(self) -> None:
        """Delete note-14, decline a form, delete note-3, over stdio."""
        server = procs.StdioServer(self, "--stdio", "--db", self.db, env=self.env)
        args = {"workspaceUri": WORKSPACE, "title": "TPS report"}
        for request_id, responses in ((2, accept("note-14")), (4, DECLINE), (6, accept("note-3"))):
            first = server.exchange(call(args, id=request_id - 1))["result"]
            server.exchange(call(args, id=request_id, requestState=first["requestState"], inputResponses=responses))
        server.close_stdin()
        self.assertEqual(server.wait(), 0)

    def test_list_filters_and_restore_over_a_real_session(self) -> None:
        self.session()
        listed = self.command("--db", self.db, "list")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        header, *lines = listed.stdout.splitlines()
        self.assertIn("CLIENT (self-reported)", header)
        self.assertEqual([line.split()[4] for line in lines], ["deleted", "declined", "deleted"])
        self.assertIn("TPS report 2025", lines[0])
        declined = self.again(
            "list", "--outcome", "declined", "--json", "--db", self.db
        )  # store options after the command too
        (entry,) = [json.loads(line) for line in declined.stdout.splitlines()]
        self.assertEqual((entry["principal"], entry["request_id"], entry["client_name"]), (PRINCIPAL, "4", CLIENT))
        self.assertEqual(self.again("--db", self.db, "list", "--principal", "bob").stdout.splitlines()[1:], [])
        self.assertEqual(len(self.again("--db", self.db, "list", "--since", "1d").stdout.splitlines()), 4)
        self.assertEqual(len(self.again("--db", self.db, "list", "--since", "2999-01-01").stdout.splitlines()), 1)
        restored = self.again("--db", self.db, "restore", lines[0].split()[0])
        self.assertEqual(restored.returncode, 0, restored.stderr)
        self.assertIn("note note-14 (TPS report 2025), recorded as entry 4", restored.stdout)
        again = self.again("--db", self.db, "restore", lines[0].split()[0])
        self.assertEqual((again.returncode, again.stdout.startswith("refused: ")), (1, True))
        conn = sqlite3.connect(self.db)
        self.addCleanup(conn.close)
        self.assertEqual(
            conn.execute("SELECT title FROM notes WHERE id = 'note-14'").fetchall(), [("TPS report 2025",)]
        )
        last = self.again("--db", self.db, "list").stdout.splitlines()[-1].split()
        self.assertEqual((last[0], last[2], last[4], last[5]), ("4", audit.OPERATOR, "restored", "#1"))

    def test_a_restore_whose_trashed_file_is_gone_is_one_line_and_changes_nothing(self) -> None:
        notes = os.path.join(self.dir, "notes")
        os.makedirs(notes)
        with open(os.path.join(notes, "tps.md"), "w", encoding="utf-8") as handle:
            handle.write("# TPS report\n")
        server = procs.StdioServer(self, "--notes-dir", notes, env=self.env)
        args = {"workspaceUri": main.format_file_uri(tuple(p for p in notes.split("/") if p)), "title": "TPS"}
        first = server.exchange(call(args, id=1))["result"]
        done = server.exchange(call(args, id=2, requestState=first["requestState"], inputResponses=accept("tps.md")))
        self.assertTrue(done["result"]["structuredContent"]["deleted"], done)
        server.close_stdin()
        self.assertEqual(server.wait(), 0)
        (trashed,) = os.listdir(os.path.join(notes, ".trash"))
        os.unlink(os.path.join(notes, ".trash", trashed))  # emptied by hand, or by another instance
        before = self.again("--notes-dir", notes, "list", "--json").stdout
        refused = self.command("--notes-dir", notes, "restore", "1")
        self.assertEqual(refused.returncode, audit_cli.EXIT_REFUSED)
        self.assertEqual(refused.stdout, "refused: entry 1: the note is no longer in the trash (restored or emptied)\n")
        self.assertEqual(refused.stderr, "")
        self.assertEqual(os.listdir(notes), [".trash"])
        self.assertEqual(self.again("--notes-dir", notes, "list", "--json").stdout, before)

    def test_a_missing_database_or_the_memory_store_is_refused_and_nothing_is_created(self) -> None:
        missing = self.command("--db", self.db, "list")
        self.assertEqual((missing.returncode, missing.stderr.count("\n")), (2, 1))
        self.assertFalse(os.path.exists(self.db))
        memory = self.again("list")
        self.assertEqual(memory.returncode, 2)
        self.assertIn("memory store keeps no audit", memory.stderr)
        self.assertNotIn("Traceback", memory.stderr + missing.stderr)


if __name__ == "__main__":
    unittest.main()
