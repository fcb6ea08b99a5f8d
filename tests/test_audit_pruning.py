"""Audit pruning keeps what `audit restore` needs: refusals have a bound of their own, and an entry whose kept text
exists stays.

PruningContract holds the rules once for every ledger (memory, the folder store's SQLite
file, the SQLite store's, PostgreSQL's): a loop of refused calls cannot push out an
entry, an entry whose kept text (a trash row, or a trash file not yet expired) still
exists passes every bound by, and is pruned once that text has expired; the refusals'
own bound holds, per principal. RefusedReadsThenRestore runs the scenario end to end
through the note tools and `audit restore`, on SQLite, PostgreSQL and a notes folder.
"""

from __future__ import annotations

import contextlib
import io
import os
import sqlite3
import tempfile
import time
import unittest
from typing import Any
from unittest import mock

from helpers import store_workers
from helpers.sql_stores import SCRATCH, new_database
from helpers.support import KEY, PRINCIPAL, Clock, ContractCase, Log

import audit
import audit_cli
import folder_trash
import frame
import ledger
import main
import markdown_store
import notes_tools
import postgres_store
import sqlite_store
import stores
from test_notes_tools import accept, tools_call

OTHER = "bob"
BOUND = 50  # auditMaxEntries in these tests: the refusals' bound is then 50 too (never above it)
TRASH_DAYS = 10.0
MEMORY_BOUND = 40  # stores.MEMORY_AUDIT_MAX_ENTRIES lowered for the memory store's count test
FILE = "20261201T203000Z-0123456789ab-plan.md"  # a trash file's name, as folder_trash gives it
PG = store_workers.OptionalCluster()
setUpModule, tearDownModule = PG.start, PG.stop


class PruningContract(ContractCase):
    """Mixed into a TestCase per ledger; the subclass opens one (`open`) and says how its kept text is kept (`keep`)."""

    clock: Clock
    # How long after it was written an entry's kept text may exist: a trash file's (`keep`
    # below), which the ledger cannot look at, or a trash row's (SqlRowPruning).
    kept_seconds = TRASH_DAYS * audit.DAY_SECONDS + stores.KEPT_FILE_GRACE_SECONDS

    def open(self, retention: stores.Retention) -> stores.Ledger:
        raise NotImplementedError

    def keep(self, led: stores.Ledger, principal: str) -> int:
        """An `updated` entry of `principal` whose old text is kept (a trash row or a trash file); its id."""
        return led.audited(
            principal, lambda entry: entry(audit.UPDATED, audit.Facts("n-1", "Plan", "file:///w/plan.md", FILE))
        )

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock(time.time())

    def retention(self, **bounds: Any) -> stores.Retention:
        return stores.Retention(trash_seconds=TRASH_DAYS * audit.DAY_SECONDS, **{"max_entries": BOUND, **bounds})

    @staticmethod
    def created(led: stores.Ledger, principal: str = PRINCIPAL, note: str = "n-2") -> int:
        return led.audited(principal, lambda entry: entry(audit.CREATED, audit.Facts(note)))

    @staticmethod
    def ids(led: stores.Ledger, principal: str = PRINCIPAL, outcome: str | None = None) -> list[int]:
        return [int(entry["id"]) for entry in led.audit_entries(principal=principal, outcome=outcome)]

    def test_more_refusals_than_the_bound_cannot_push_out_an_update_nor_any_other_entry(self) -> None:
        led = self.open(self.retention())
        made, updated = self.created(led), self.keep(led, PRINCIPAL)
        for k in range(BOUND):
            led.audit_refusal(PRINCIPAL, audit.Facts(f"r-{k}"))
        refusals = self.ids(led, outcome=audit.REFUSED)
        self.assertEqual(len(refusals), BOUND)  # at the bound: every refusal kept
        for k in range(BOUND, BOUND + 10):
            led.audit_refusal(PRINCIPAL, audit.Facts(f"r-{k}"))
        kept = [e["note_id"] for e in led.audit_entries(principal=PRINCIPAL, outcome=audit.REFUSED)]
        self.assertEqual(kept, [f"r-{k}" for k in range(10, BOUND + 10)])  # past it: the newest BOUND, the oldest went
        self.assertEqual(self.ids(led, outcome=audit.UPDATED), [updated])
        self.assertEqual(self.ids(led, outcome=audit.CREATED), [made])

    def test_other_writes_past_the_count_bound_pass_by_an_entry_whose_text_is_kept_until_it_expires(self) -> None:
        led = self.open(self.retention(max_entries=3))
        written = self.clock.now
        updated = self.keep(led, PRINCIPAL)
        made = [self.created(led, note=f"c-{k}") for k in range(5)]
        self.assertEqual(self.ids(led), [updated] + made[-3:])  # the newest 3, and the entry `audit restore` needs
        self.clock.now = written + self.kept_seconds - 1
        made.append(self.created(led, note="one second short"))
        self.assertEqual(self.ids(led), [updated] + made[-3:])  # its text may still exist: kept
        self.clock.now = written + self.kept_seconds
        made.append(self.created(led, note="expired"))
        self.assertEqual(self.ids(led), made[-3:])  # its text expired: pruned by the count bound like any other

    def test_the_age_bound_passes_by_an_entry_whose_text_is_kept_until_it_expires(self) -> None:
        led = self.open(self.retention(audit_seconds=audit.DAY_SECONDS))  # entries a day, kept texts TRASH_DAYS
        written = self.clock.now
        made, updated = self.created(led), self.keep(led, PRINCIPAL)
        self.clock.now = written + audit.DAY_SECONDS
        later = self.created(led, note="a day later")
        self.assertEqual(self.ids(led), [updated, later])  # the plain entry went at its age; the update stays
        self.assertNotIn(made, self.ids(led))
        self.clock.now = written + self.kept_seconds - 1
        short = self.created(led, note="one second short")
        self.assertEqual(self.ids(led), [updated, short])  # `later` reached its age; the update's text may still exist
        self.clock.now = written + self.kept_seconds
        last = self.created(led, note="expired")
        self.assertEqual(self.ids(led), [short, last])  # its text expired: pruned by its age

    def test_the_refusals_bound_is_per_principal_and_never_above_the_count_bound(self) -> None:
        led = self.open(self.retention(max_entries=4, max_refusals=1_000))
        led.audit_refusal(OTHER, audit.Facts("bob-1"))
        bob_made = self.created(led, OTHER)
        for k in range(4 + 3):
            led.audit_refusal(PRINCIPAL, audit.Facts(f"r-{k}"))
        mine = [e["note_id"] for e in led.audit_entries(principal=PRINCIPAL)]
        self.assertEqual(mine, ["r-3", "r-4", "r-5", "r-6"])  # max_entries 4 bounds the refusals too
        self.assertEqual([e["note_id"] for e in led.audit_entries(principal=OTHER)], ["bob-1", "n-2"])
        self.assertEqual(self.ids(led, OTHER, audit.CREATED), [bob_made])
        small = self.open(self.retention(max_entries=100, max_refusals=2))
        for k in range(3):
            small.audit_refusal(OTHER, audit.Facts(f"b-{k}"))
        self.assertEqual(
            [e["note_id"] for e in small.audit_entries(principal=OTHER, outcome=audit.REFUSED)], ["b-1", "b-2"]
        )


class MemoryPruning(PruningContract, unittest.TestCase):
    def open(self, retention: stores.Retention) -> stores.Ledger:
        return stores.MemoryLedger(main.MemoryReplayStore(self.clock), self.clock, retention)

    def test_the_memory_store_keeps_at_most_its_bound_of_refusals_and_of_other_entries_per_principal(self) -> None:
        with mock.patch.object(stores, "MEMORY_AUDIT_MAX_ENTRIES", MEMORY_BOUND):  # each write scans every entry
            led = stores.MemoryStore([], main.MemoryReplayStore(self.clock), self.clock).ledger
        self.assertEqual(stores.MEMORY_AUDIT_MAX_ENTRIES, 1_000)  # the bound unpatched
        bound = MEMORY_BOUND
        for k in range(bound + 1):
            led.audit_refusal(PRINCIPAL, audit.Facts(f"r-{k}"))
            self.created(led, note=f"c-{k}")
        refused = [e["note_id"] for e in led.audit_entries(principal=PRINCIPAL, outcome=audit.REFUSED)]
        made = [e["note_id"] for e in led.audit_entries(principal=PRINCIPAL, outcome=audit.CREATED)]
        self.assertEqual((len(refused), refused[0], len(made), made[0]), (bound, "r-1", bound, "c-1"))


class FolderLedgerPruning(PruningContract, unittest.TestCase):
    """The folder store's ledger: an SQLite file of its own, whose entries name trash files it cannot look at."""

    def open(self, retention: stores.Retention) -> stores.Ledger:
        folder = tempfile.TemporaryDirectory(prefix="prune-ledger-", dir=SCRATCH)
        self.addCleanup(folder.cleanup)
        path = new_database(os.path.join(folder.name, "nonces.db"))
        opened = sqlite_store.open_ledger(path, clock=self.clock, retention=retention)
        self.addCleanup(opened.close)
        return opened


class SqlRowPruning(PruningContract):
    """An SQL store's ledger: the kept text is a row of deleted_notes, pruned after trashDays or taken back by a
    restore."""

    kept_seconds = TRASH_DAYS * audit.DAY_SECONDS
    module: Any  # the store's module (SqliteFile, PostgresDatabase)

    def location(self) -> str:
        raise NotImplementedError

    def open(self, retention: stores.Retention) -> stores.Ledger:
        store = self.module.open_store(self.location(), clock=self.clock, retention=retention)
        self.addCleanup(store.close)
        return store.ledger

    def keep(self, led: stores.Ledger, principal: str) -> int:
        assert isinstance(led, ledger.SqlLedger)
        note = main.Note("n-1", "Plan", "file:///w/plan.md", 3)

        def act(conn: Any, now: float, entry: stores.Entry) -> int:
            entry_id = entry(audit.UPDATED, audit.Facts(note.id, note.title, note.uri, audit.SQL_TRASH))
            led.sql.keep(conn, entry_id, note, "the old text", now)
            return entry_id

        return led.audited_in(principal, act)

    def test_an_entry_whose_row_was_taken_back_is_pruned_like_any_other(self) -> None:
        led = self.open(self.retention(max_entries=2))
        assert isinstance(led, ledger.SqlLedger)
        updated = self.keep(led, PRINCIPAL)
        made = [self.created(led, note=f"c-{k}") for k in range(2)]
        self.assertEqual(self.ids(led), [updated] + made)
        led.db.write_with(lambda conn: led.sql.unkeep(conn, updated))  # restored: its text is in the note again
        made.append(self.created(led, note="after the restore"))
        self.assertEqual(self.ids(led), made[-2:])


class SqliteFile:
    """A new SQLite database file for each test, removed after it."""

    module = sqlite_store

    def location(self) -> str:
        folder = tempfile.TemporaryDirectory(prefix="prune-sqlite-", dir=SCRATCH)
        self.addCleanup(folder.cleanup)  # type: ignore[attr-defined]  # the TestCase this is mixed into
        return new_database(os.path.join(folder.name, "notes.db"))


class PostgresDatabase:
    """A new database of the module's throwaway cluster for each test (skipped without one)."""

    module = postgres_store

    @classmethod
    def setUpClass(cls) -> None:
        PG.require()

    def location(self) -> str:
        return str(PG.require().new_database())


class SqlitePruning(SqliteFile, SqlRowPruning, unittest.TestCase):
    def test_refusals_from_before_their_own_number_are_numbered_with_the_other_entries_at_start_up(self) -> None:
        path = self.location()
        store = sqlite_store.open_store(path, clock=self.clock, retention=self.retention())
        store.audit_refusal(PRINCIPAL, audit.Facts("old"))
        store.close()
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("DROP INDEX audit_refusals_by_principal")
        conn.execute("ALTER TABLE audit DROP COLUMN refused_seq")  # the table as an older server left it
        conn.close()
        reopened = sqlite_store.open_store(path, clock=self.clock, retention=self.retention(max_entries=1))
        self.addCleanup(reopened.close)
        reopened.audit_refusal(PRINCIPAL, audit.Facts("new"))
        self.assertEqual(
            [e["note_id"] for e in reopened.audit_entries()], ["old", "new"]
        )  # apart: neither pushes the other out
        self.created(reopened.ledger)
        self.assertEqual(
            [e["note_id"] for e in reopened.audit_entries()], ["new", "n-2"]
        )  # the old one counted with the others


class PostgresPruning(PostgresDatabase, SqlRowPruning, unittest.TestCase):
    pass


# =====================================================================================
# End to end: an update, more refused reads than the bound, then `audit restore`
# =====================================================================================


class RefusedReadsThenRestore(ContractCase):
    """Mixed into a TestCase per store: `open_store(retention)` and `cli_store()` (the options `audit` takes) differ."""

    workspace = ""

    def open_store(self, retention: stores.Retention) -> Any:
        raise NotImplementedError

    def cli_store(self) -> list[str]:
        raise NotImplementedError

    def setUp(self) -> None:
        self.clock = Clock(time.time())  # `audit restore` runs on the real clock, as an operator's would
        self.store = self.open_store(stores.Retention(max_entries=BOUND))
        self.server = frame.notes_server(
            keys=[KEY],
            notes=self.store,
            policy=main.AuthorizationPolicy({PRINCIPAL: [self.workspace]}),
            clock=self.clock,
            log=Log(),
        )
        audit.install(self.server)
        notes_tools.install(self.server)

    def call(self, name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
        response = self.server.handle(
            tools_call(name, {"workspaceUri": self.workspace, **arguments}, **extra), PRINCIPAL
        )
        assert response is not None and "result" in response, response
        return response["result"]

    def text(self, note_id: str) -> str:
        return str(self.call("notes_read", {"noteId": note_id})["structuredContent"]["text"])

    def test_an_update_survives_more_refused_reads_than_the_bound_and_audit_restore_brings_its_text_back(self) -> None:
        made = self.call("notes_create", {"title": "Plan", "body": "pay 100 to account 12345\n"})["structuredContent"]
        note_id, before = made["noteId"], self.text(made["noteId"])
        args = {"noteId": note_id, "body": "pay 900 to account 99999\n", "version": made["version"]}
        form = self.call("notes_update", args)
        done = self.call(
            "notes_update", args, requestState=form["requestState"], inputResponses=accept(notes_tools.UPDATE_KEY)
        )
        self.assertFalse(done["isError"], done)
        (updated,) = self.store.audit_entries(outcome=audit.UPDATED)
        for k in range(BOUND + 10):
            self.assertTrue(self.call("notes_read", {"noteId": f"nothing-{k}.md"})["isError"])  # refused, and audited
        refused = self.store.audit_entries(outcome=audit.REFUSED)
        self.assertEqual(
            (len(refused), refused[0]["note_id"]), (BOUND, "nothing-10.md")
        )  # the refusals' own bound held
        self.assertEqual([e["id"] for e in self.store.audit_entries(outcome=audit.UPDATED)], [updated["id"]])
        self.assertEqual(len(self.store.audit_entries(outcome=audit.CREATED)), 1)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = audit_cli.command([*self.cli_store(), "restore", str(updated["id"])])
        self.assertEqual(status, 0, out.getvalue())
        self.assertIn(f"restored entry {updated['id']}", out.getvalue())
        self.assertEqual(self.text(note_id), before)


class SqlRestore(RefusedReadsThenRestore):
    """An SQL store, named to `audit` by its file or URL."""

    workspace = main.LESSON_WORKSPACE
    module: Any

    def location(self) -> str:
        raise NotImplementedError

    def open_store(self, retention: stores.Retention) -> Any:
        self.where = self.location()
        store = self.module.open_store(self.where, clock=self.clock, retention=retention)
        self.addCleanup(store.close)
        return store

    def cli_store(self) -> list[str]:
        return ["--db", self.where]


class SqliteRestore(SqliteFile, SqlRestore, unittest.TestCase):
    pass


class PostgresRestore(PostgresDatabase, SqlRestore, unittest.TestCase):
    pass


class FolderRestore(RefusedReadsThenRestore, unittest.TestCase):
    def open_store(self, retention: stores.Retention) -> Any:
        base = tempfile.TemporaryDirectory(prefix="prune-e2e-folder-", dir=SCRATCH)
        self.addCleanup(base.cleanup)
        self.folder = os.path.join(os.path.realpath(base.name), "Notes")
        os.makedirs(self.folder)
        self.nonces = new_database(os.path.join(base.name, "nonces.db"))
        led = sqlite_store.open_ledger(self.nonces, clock=self.clock)
        store = markdown_store.MarkdownNotesStore([self.folder], led, retention=retention)
        self.addCleanup(store.close)
        self.workspace = store.workspace_uris()[0]
        return store

    def cli_store(self) -> list[str]:
        return ["--db", self.nonces, "--notes-dir", self.folder]

    def test_more_refusals_than_the_bound_cannot_push_out_a_deletion_while_its_trash_file_exists(self) -> None:
        made = self.call("notes_create", {"title": "Plan", "body": "keep me\n"})["structuredContent"]
        before = self.text(made["noteId"])
        (note,) = self.store.candidates(main.parse_file_uri(self.workspace), "Plan")
        settled = self.store.consume(
            PRINCIPAL, "n-delete", self.clock.now + 600, (note.id, note.version), lambda live: True
        )
        self.assertIs(settled, main.Settlement.DELETED)
        (deleted,) = self.store.audit_entries(outcome=audit.DELETED)
        self.assertTrue(os.path.isfile(os.path.join(self.folder, folder_trash.TRASH_DIR, str(deleted["trash"]))))
        for k in range(BOUND + 10):
            self.call("notes_read", {"noteId": f"nothing-{k}.md"})
        self.assertEqual([e["id"] for e in self.store.audit_entries(outcome=audit.DELETED)], [deleted["id"]])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(audit_cli.command([*self.cli_store(), "restore", str(deleted["id"])]), 0, out.getvalue())
        self.assertEqual(self.text(made["noteId"]), before)


if __name__ == "__main__":
    unittest.main()
