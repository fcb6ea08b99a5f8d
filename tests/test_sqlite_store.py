"""SQLite store: one transaction settles a confirmation once across processes, crashes and bad files."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import tempfile
import threading
import time
import unittest
from typing import Any
from unittest import mock

from helpers import old_schemas, sql_stores, store_workers
from helpers.sql_stores import consume_command, race_notes
from helpers.support import KEY, PRINCIPAL, WORKSPACE, Clock, Log, accept, answered, call, claims_of, logged, tps

import frame
import main
import sqlite_store
import stores
import streamable_http
from sqlite_store import open_store
from stores import StoreError

GUARD_SECONDS = store_workers.GUARD_SECONDS  # failure guard for a worker that hangs; never the assertion itself
RACE_ROUNDS = 50
ALWAYS = lambda note: True  # noqa: E731 - a recheck that accepts every live note
LATER = 10_000_000.0  # an expiry far after every Clock() reading used here
SMALL_BUDGET_MS = 50  # a write's busy budget small enough to keep the busy tests fast
DECLINE = {main.INPUT_KEY: {"action": "decline"}}


class StoreCase(unittest.TestCase):
    """A temporary directory per test and helpers to open and inspect databases in it."""

    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="sqlite-store-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.path = os.path.join(self.dir, "notes.db")
        self.clock = Clock()

    def open(self, path: str | None = None, **kwargs: Any) -> sqlite_store.SqliteNotesStore:
        kwargs.setdefault("clock", self.clock)
        kwargs.setdefault("seed_notes", main.lesson_notes())
        store = open_store(path or self.path, **kwargs)
        self.addCleanup(store.close)
        return store

    def raw(self, path: str | None = None) -> sqlite3.Connection:
        """A plain connection for inspecting (or sabotaging) the file behind the store's back."""
        conn = sqlite3.connect(path or self.path, isolation_level=None, timeout=GUARD_SECONDS)
        self.addCleanup(conn.close)
        return conn

    def consumed(self, path: str | None = None) -> set[str]:
        conn = sqlite3.connect(path or self.path, timeout=GUARD_SECONDS)
        try:
            return {nonce for (nonce,) in conn.execute("SELECT nonce FROM consumed_nonces")}
        finally:
            conn.close()

    def note_ids(self, path: str | None = None) -> list[str]:
        conn = sqlite3.connect(path or self.path, timeout=GUARD_SECONDS)
        try:
            return [note_id for (note_id,) in conn.execute("SELECT id FROM notes ORDER BY id")]
        finally:
            conn.close()

    def server(self, store: stores.NotesStore, log: Log | None = None) -> frame.Server:
        return frame.notes_server(
            keys=[KEY],
            notes=store,
            policy=main.AuthorizationPolicy({PRINCIPAL: [WORKSPACE]}),
            clock=self.clock,
            log=log if log is not None else Log(),
        )

    def first_call(self, server: frame.Server, title: str = "TPS report") -> dict[str, Any]:
        response = server.handle(call(tps(title)), PRINCIPAL)
        assert response is not None
        self.assertEqual(response["result"]["resultType"], "input_required")
        return response["result"]

    def file_bytes(self, path: str | None = None) -> bytes:
        with open(path or self.path, "rb") as handle:
            return handle.read()


def nonce_of(state: str) -> str:
    """The nonce inside a requestState (claims are signed, not encrypted)."""
    return claims_of(state)["nonce"]


class SeamParity(StoreCase):
    def test_candidates_match_the_in_memory_store_for_every_query(self) -> None:
        store = self.open()
        memory = stores.MemoryStore(main.lesson_notes(), main.MemoryReplayStore(self.clock))
        queries = [
            (WORKSPACE, "TPS report"),
            (WORKSPACE, "tps"),
            (WORKSPACE, "zzz"),
            ("file:///Users/alice/Documents", "TPS"),
            ("file:///Users/alice/Documents/Notes-evil", "TPS"),
            ("file:///", "report"),
        ]
        for uri, title in queries:
            with self.subTest(uri=uri, title=title):
                workspace = main.parse_file_uri(uri)
                self.assertEqual(store.candidates(workspace, title), memory.candidates(workspace, title))

    def test_containment_is_by_component_so_the_look_alike_folder_is_never_a_candidate(self) -> None:
        store = self.open()
        found = [note.id for note in store.candidates(main.parse_file_uri(WORKSPACE), "TPS")]
        self.assertEqual(found, ["note-3", "note-7", "note-14"])
        self.assertIn("evil-1", [note.id for note in store.all()])

    def test_a_hand_edited_row_that_is_not_a_valid_note_is_never_offered(self) -> None:
        store = self.open()
        self.raw().execute(
            "INSERT INTO notes (id, title, uri, revision) VALUES ('bad-1', 'TPS report', 'http://example.com/x', 0)"
        )
        found = [note.id for note in store.candidates(main.parse_file_uri("file:///"), "TPS")]
        self.assertNotIn("bad-1", found)
        self.assertNotIn("bad-1", [note.id for note in store.all()])
        self.assertIn("bad-1", self.note_ids())  # skipped, not repaired behind the operator's back

    def test_the_lesson_flow_deletes_once_and_refuses_the_replay(self) -> None:
        server = self.server(self.open())
        state = self.first_call(server)["requestState"]
        retry = call(tps(), id=2, requestState=state, inputResponses=accept("note-14"))
        done = answered(server, retry, PRINCIPAL)
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": "note-14"})
        replay = answered(server, retry, PRINCIPAL)
        self.assertEqual(replay["error"]["code"], main.INVALID_PARAMS)
        self.assertNotIn("note-14", self.note_ids())
        self.assertEqual(len(self.note_ids()), len(main.lesson_notes()) - 1)
        self.assertEqual(self.consumed(), {nonce_of(state)})


class ConsumeOutcomes(StoreCase):
    def target(self, store: sqlite_store.SqliteNotesStore, note_id: str = "note-14") -> tuple[str, str]:
        live = {note.id: note for note in store.all()}[note_id]
        return (note_id, live.version)

    def test_a_decline_consumes_the_nonce_and_deletes_nothing(self) -> None:
        store = self.open()
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS), main.Settlement.CONSUMED)
        self.assertTrue(store.is_consumed("n1"))
        self.assertEqual(len(self.note_ids()), len(main.lesson_notes()))

    def test_an_edited_note_is_not_deleted_and_the_confirmation_is_spent(self) -> None:
        store = self.open()
        target = self.target(store)
        edited = {note.id: note for note in store.all()}["note-14"]
        store.put(main.Note(edited.id, edited.title, edited.uri, edited.revision + 1))
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS), main.Settlement.CHANGED)
        self.assertIn("note-14", self.note_ids())
        self.assertEqual(self.consumed(), {"n1"})

    def test_a_vanished_note_is_reported_changed_and_the_confirmation_is_spent(self) -> None:
        store = self.open()
        target = self.target(store)
        store.remove("note-14")
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS), main.Settlement.CHANGED)
        self.assertEqual(self.consumed(), {"n1"})

    def test_a_failed_recheck_inside_the_transaction_deletes_nothing(self) -> None:
        store = self.open()
        seen: list[main.Note] = []

        def revoked(note: main.Note) -> bool:
            seen.append(note)
            return False

        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, self.target(store), revoked), main.Settlement.CHANGED)
        self.assertEqual([note.id for note in seen], ["note-14"])  # it saw the live row
        self.assertIn("note-14", self.note_ids())
        self.assertEqual(self.consumed(), {"n1"})

    def test_an_exception_in_the_recheck_rolls_back_the_nonce(self) -> None:
        store = self.open()

        def broken(note: main.Note) -> bool:
            raise RuntimeError("policy backend down")

        with self.assertRaises(RuntimeError):
            store.consume(PRINCIPAL, "n1", LATER, self.target(store), broken)
        self.assertEqual(self.consumed(), set())
        self.assertIn("note-14", self.note_ids())
        # The connection is not left inside a transaction: the same nonce settles afterwards.
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, self.target(store), ALWAYS), main.Settlement.DELETED)

    def test_an_exception_after_the_delete_statement_rolls_back_note_and_nonce_together(self) -> None:
        store = self.open()

        def fail_after_delete(stage: str) -> None:
            if stage == "deleted":
                raise OSError("disk vanished")

        store._inside_transaction_hook = fail_after_delete
        with self.assertRaises(OSError):
            store.consume(PRINCIPAL, "n1", LATER, self.target(store), ALWAYS)
        self.assertIn("note-14", self.note_ids())
        self.assertEqual(self.consumed(), set())

    def test_a_state_that_expired_before_the_transaction_is_refused_inside_it(self) -> None:
        store = self.open()
        self.assertIs(store.consume(PRINCIPAL, "n1", self.clock.now, self.target(store), ALWAYS), main.Settlement.USED)
        self.assertIs(
            store.consume(PRINCIPAL, "n2", self.clock.now + 0.001, self.target(store), ALWAYS), main.Settlement.DELETED
        )
        self.assertEqual(self.consumed(), {"n2"})

    def test_threads_sharing_one_store_never_interleave_transactions(self) -> None:
        store = self.open()
        threads, per_thread = 6, 10
        results = store_workers.together(
            threads, lambda i: [store.consume(f"p{i}", f"n{i}-{j}", LATER, None, ALWAYS) for j in range(per_thread)]
        )
        failures = [result for result in results if isinstance(result, BaseException)]
        outcomes = [outcome for result in results if not isinstance(result, BaseException) for outcome in result]
        self.assertEqual(failures, [])
        self.assertEqual(outcomes, [main.Settlement.CONSUMED] * threads * per_thread)
        self.assertEqual(len(self.consumed()), threads * per_thread)


class ReplayBoundInSql(StoreCase):
    def test_the_bound_admits_up_to_the_limit_and_refuses_at_it_writing_nothing(self) -> None:
        store = self.open(max_per_principal=3)
        for i in range(3):
            self.assertIs(store.consume(PRINCIPAL, f"n{i}", LATER, None, ALWAYS), main.Settlement.CONSUMED)
        self.raw().execute("INSERT INTO consumed_nonces VALUES ('stale', 'old', ?)", (self.clock.now - 1,))
        self.assertIs(store.consume(PRINCIPAL, "n3", LATER, None, ALWAYS), main.Settlement.FULL)
        self.assertFalse(store.is_consumed("n3"))
        self.assertEqual(self.consumed(), {"n0", "n1", "n2", "stale"})  # not even the pruning was kept

    def test_a_bound_below_one_is_refused_at_start_up_and_one_is_accepted(self) -> None:
        with self.assertRaisesRegex(StoreError, "max_per_principal must be at least 1"):
            open_store(self.path, clock=self.clock, max_per_principal=0)
        self.assertFalse(os.path.exists(self.path))
        store = self.open(max_per_principal=1)
        self.assertIs(store.consume(PRINCIPAL, "a1", LATER, None, ALWAYS), main.Settlement.CONSUMED)

    def test_a_full_principal_does_not_block_another_principal(self) -> None:
        store = self.open(max_per_principal=1)
        self.assertIs(store.consume(PRINCIPAL, "a1", LATER, None, ALWAYS), main.Settlement.CONSUMED)
        self.assertIs(store.consume(PRINCIPAL, "a2", LATER, None, ALWAYS), main.Settlement.FULL)
        self.assertIs(store.consume("bob", "b1", LATER, None, ALWAYS), main.Settlement.CONSUMED)

    def test_the_bound_is_shared_by_every_store_on_the_file(self) -> None:
        first, second = self.open(max_per_principal=2), self.open(max_per_principal=2)
        self.assertIs(first.consume(PRINCIPAL, "a1", LATER, None, ALWAYS), main.Settlement.CONSUMED)
        self.assertIs(second.consume(PRINCIPAL, "a2", LATER, None, ALWAYS), main.Settlement.CONSUMED)
        self.assertIs(first.consume(PRINCIPAL, "a3", LATER, None, ALWAYS), main.Settlement.FULL)

    def test_expiry_frees_the_slot_and_pruning_removes_the_expired_rows(self) -> None:
        store = self.open(max_per_principal=1)
        self.assertIs(store.consume(PRINCIPAL, "a1", self.clock.now + 10, None, ALWAYS), main.Settlement.CONSUMED)
        self.assertIs(store.consume(PRINCIPAL, "a2", self.clock.now + 10, None, ALWAYS), main.Settlement.FULL)
        self.clock.now += 10
        self.assertIs(store.consume(PRINCIPAL, "a3", self.clock.now + 10, None, ALWAYS), main.Settlement.CONSUMED)
        self.assertEqual(self.consumed(), {"a3"})

    def test_pruning_removes_at_most_one_batch_per_consume(self) -> None:
        store = self.open()
        extra = 3
        rows = [(f"old-{i}", "old", self.clock.now + 1) for i in range(sqlite_store.PRUNE_BATCH + extra)]
        self.raw().executemany("INSERT INTO consumed_nonces VALUES (?, ?, ?)", rows)
        self.clock.now += 2
        store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS)
        self.assertEqual(len([n for n in self.consumed() if n.startswith("old-")]), extra)
        store.consume(PRINCIPAL, "n2", LATER, None, ALWAYS)
        self.assertEqual(self.consumed(), {"n1", "n2"})


class CrossInstance(StoreCase):
    def test_a_decline_on_one_store_makes_another_store_refuse_the_accept(self) -> None:
        first, second = self.open(), self.open()
        target = ("note-14", {note.id: note for note in first.all()}["note-14"].version)
        self.assertIs(first.consume(PRINCIPAL, "n1", LATER, None, ALWAYS), main.Settlement.CONSUMED)
        self.assertTrue(second.is_consumed("n1"))
        self.assertIs(second.consume(PRINCIPAL, "n1", LATER, target, ALWAYS), main.Settlement.USED)
        self.assertIn("note-14", self.note_ids())

    def test_a_decline_through_server_b_makes_server_a_refuse_the_accept(self) -> None:
        server_a, server_b = self.server(self.open()), self.server(self.open())
        state = self.first_call(server_a)["requestState"]
        decline = {main.INPUT_KEY: {"action": "decline"}}
        declined = answered(server_b, call(tps(), id=2, requestState=state, inputResponses=decline), PRINCIPAL)
        self.assertEqual(declined["result"]["structuredContent"], {"deleted": False, "reason": "declined"})
        refused = answered(server_a, call(tps(), id=3, requestState=state, inputResponses=accept()), PRINCIPAL)
        self.assertEqual(refused["error"]["code"], main.INVALID_PARAMS)
        self.assertIn("note-14", self.note_ids())


class SchemaAndSeeding(StoreCase, sql_stores.SeedingContract):
    module = sqlite_store

    def open_plain(self) -> sqlite_store.SqliteNotesStore:
        return open_store(self.path, clock=self.clock, seed_notes=main.lesson_notes())

    def schema_version(self) -> tuple[str, ...]:
        return self.raw().execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()

    def test_a_new_database_is_in_wal_mode(self) -> None:
        self.open()
        self.assertEqual(self.raw().execute("PRAGMA journal_mode").fetchone(), ("wal",))

    def holding_the_write_lock_after_prepare(self) -> sqlite3.Connection:
        """A file left in rollback-journal mode, and another connection that takes its write lock once _prepare is
        done."""
        self.open().close()
        other = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(other.close)
        other.execute("PRAGMA journal_mode = DELETE")
        real = sqlite_store._prepare

        def then_lock(conn: sqlite3.Connection, path: str, seed: list[main.Note]) -> None:
            real(conn, path, seed)
            other.execute("BEGIN IMMEDIATE")  # the other instance, mid-start, between our two steps

        patcher = mock.patch.object(sqlite_store, "_prepare", then_lock)
        patcher.start()
        self.addCleanup(patcher.stop)
        return other

    def test_the_switch_to_wal_waits_for_another_instance_holding_the_file_instead_of_failing_at_once(self) -> None:
        other = self.holding_the_write_lock_after_prepare()
        pauses: list[float] = []

        def pause(seconds: float) -> None:
            pauses.append(seconds)
            other.execute("COMMIT")  # the other instance finishes while this one waits

        with mock.patch.object(sqlite_store.time, "sleep", pause):
            store = open_store(self.path, clock=self.clock)
        self.addCleanup(store.close)
        self.assertEqual(pauses, [sqlite_store.WAL_RETRY_SECONDS])
        self.assertEqual(self.raw().execute("PRAGMA journal_mode").fetchone(), ("wal",))

    def test_the_switch_to_wal_gives_up_when_the_budget_is_spent_and_leaves_the_journal_mode_alone(self) -> None:
        other = self.holding_the_write_lock_after_prepare()
        with self.assertRaisesRegex(StoreError, "is locked by another process \\(waited 0 ms\\)"):
            open_store(self.path, clock=self.clock, busy_timeout_ms=0)
        other.execute("COMMIT")
        self.assertEqual(self.raw().execute("PRAGMA journal_mode").fetchone(), ("delete",))

    def test_invalid_seed_notes_are_refused_before_any_file_is_created(self) -> None:
        duplicate = main.lesson_notes() + [main.lesson_notes()[0]]
        with self.assertRaisesRegex(StoreError, "duplicate note id 'note-3'"):
            open_store(self.path, clock=self.clock, seed_notes=duplicate)
        self.assertFalse(os.path.exists(self.path))

    def test_a_newer_schema_version_is_refused_without_touching_the_file(self) -> None:
        self.open().close()
        newer = str(sqlite_store.SCHEMA_VERSION + 1)
        self.raw().execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (newer,))
        before = self.file_bytes()
        with self.assertRaises(StoreError) as caught:
            open_store(self.path, clock=self.clock)
        self.assertIn(f"schema version '{newer}'", str(caught.exception))
        self.assertIn(f"version {sqlite_store.SCHEMA_VERSION} only", str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))
        self.assertEqual(self.file_bytes(), before)

    def test_an_sqlite_file_without_a_schema_version_is_refused(self) -> None:
        self.raw().execute("CREATE TABLE notes (id TEXT)")
        with self.assertRaisesRegex(StoreError, "not a notes store"):
            open_store(self.path, clock=self.clock)


class BadDatabaseFiles(StoreCase):
    def test_a_begin_that_fails_for_another_reason_than_busy_raises_and_nothing_runs_outside_a_transaction(
        self,
    ) -> None:
        store = self.open()
        note = next(n for n in store.all() if n.id == "note-14")
        real = store._conn

        class FailingBegin:
            """The store's connection, except that BEGIN fails as a disk error would."""

            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

            def execute(self, sql: str, *args: Any) -> Any:
                if sql.startswith("BEGIN"):
                    error = sqlite3.OperationalError("disk I/O error")
                    error.sqlite_errorcode = sqlite3.SQLITE_IOERR
                    raise error
                return real.execute(sql, *args)

        store._conn = FailingBegin()  # type: ignore[assignment]
        # Without a transaction, the claim and the delete would each commit on their own.
        # An I/O error is a retryable refusal, and the writer is reopened.
        with self.assertRaises(stores.StoreWriteFailed):
            store.consume(PRINCIPAL, "n1", LATER, (note.id, note.version), ALWAYS)
        self.assertNotIsInstance(store._conn, FailingBegin)
        real.close()
        self.assertEqual(self.consumed(), set())
        self.assertIn("note-14", self.note_ids())

    def test_a_file_that_is_not_sqlite_fails_start_up_and_stays_untouched(self) -> None:
        with open(self.path, "wb") as handle:
            handle.write(b"these are my notes, not a database\n" * 200)
        before = self.file_bytes()
        with self.assertRaisesRegex(StoreError, "is not an SQLite database"):
            open_store(self.path, clock=self.clock, seed_notes=main.lesson_notes())
        self.assertEqual(self.file_bytes(), before)
        self.assertEqual(sorted(os.listdir(self.dir)), ["notes.db"])

    def test_a_read_only_database_fails_start_up_and_stays_untouched(self) -> None:
        self.open().close()
        os.chmod(self.path, 0o444)
        before = self.file_bytes()
        with self.assertRaisesRegex(StoreError, "is read-only"):
            open_store(self.path, clock=self.clock)
        self.assertEqual(self.file_bytes(), before)

    def test_a_database_locked_past_the_busy_timeout_fails_start_up(self) -> None:
        self.open().close()
        holder = self.raw()
        holder.execute("BEGIN IMMEDIATE")
        with self.assertRaisesRegex(StoreError, "is locked by another process"):
            open_store(self.path, clock=self.clock, busy_timeout_ms=20)
        holder.execute("ROLLBACK")
        self.open(busy_timeout_ms=20)  # and starts once the lock is gone

    def test_a_lock_held_past_the_budget_during_an_accept_leaks_nothing_and_spends_nothing(self) -> None:
        # How StoreBusy reaches the wire (today -32603, an isError result once the core
        # maps it) is the core's to test; here: no leak, no mutation, the retry works.
        log = Log()
        server = self.server(self.open(busy_timeout_ms=20), log)
        state = self.first_call(server)["requestState"]
        retry = json.dumps(call(tps(), id=2, requestState=state, inputResponses=accept())).encode()
        holder = self.raw()
        holder.execute("BEGIN IMMEDIATE")  # another instance stuck inside its transaction
        body = server.handle_bytes(retry, PRINCIPAL)
        assert body is not None  # a request is answered
        holder.execute("ROLLBACK")
        result = json.loads(body)["result"]  # a busy store is a tool error the model can retry
        self.assertIs(result["isError"], True)
        self.assertIn("busy", result["content"][0]["text"])
        for secret in (self.path.encode(), self.dir.encode(), b"Traceback", b"sqlite", b"locked"):
            self.assertNotIn(secret, body)
        self.assertIn("note-14", self.note_ids())
        self.assertEqual(self.consumed(), set())
        # Nothing was spent, so the same confirmation completes once the lock is gone.
        body = server.handle_bytes(retry, PRINCIPAL)
        assert body is not None  # a request is answered
        self.assertEqual(json.loads(body)["result"]["structuredContent"], {"deleted": True, "noteId": "note-14"})

    def test_a_failure_after_the_delete_is_internal_error_on_the_wire_and_rolled_back(self) -> None:
        store = self.open()
        server = self.server(store)
        state = self.first_call(server)["requestState"]

        def fail_after_delete(stage: str) -> None:
            if stage == "deleted":
                raise sqlite3.OperationalError(f"disk I/O error at {self.path}")

        store._inside_transaction_hook = fail_after_delete
        body = server.handle_bytes(
            json.dumps(call(tps(), id=2, requestState=state, inputResponses=accept())).encode(), PRINCIPAL
        )
        assert body is not None  # a request is answered
        self.assertEqual(streamable_http.status_of(json.loads(body)), 500)
        self.assertEqual(json.loads(body)["error"], {"code": main.INTERNAL_ERROR, "message": "Internal error"})
        self.assertNotIn(self.path.encode(), body)
        self.assertIn("note-14", self.note_ids())
        self.assertEqual(self.consumed(), set())


class BusyDatabase(StoreCase):
    """Another instance stalled inside its transaction (SIGSTOP): reads go on, writes fail within one budget."""

    def hold_write_lock(self) -> sqlite3.Connection:
        holder = self.raw()
        holder.execute("BEGIN IMMEDIATE")
        self.addCleanup(lambda: holder.in_transaction and holder.execute("ROLLBACK"))
        return holder

    def test_reads_complete_while_a_writer_waits_for_another_instances_write_lock(self) -> None:
        store = self.open(busy_timeout_ms=int(GUARD_SECONDS * 1000))  # the writer waits as long as the test lets it
        holder = self.hold_write_lock()
        waiting = threading.Event()
        store._inside_transaction_hook = lambda stage: waiting.set() if stage == "waiting" else None
        written: list[main.Settlement] = []
        writer = threading.Thread(target=lambda: written.append(store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS)))
        writer.start()
        self.addCleanup(writer.join, GUARD_SECONDS)
        self.addCleanup(lambda: holder.in_transaction and holder.execute("ROLLBACK"))  # runs first: frees the writer
        self.assertTrue(waiting.wait(GUARD_SECONDS))  # the writer holds this store's write lock now
        read: list[Any] = []
        reader = threading.Thread(
            target=lambda: read.append(
                (
                    store.is_consumed("n1"),
                    [n.id for n in store.all()],
                    store.candidates(main.parse_file_uri(WORKSPACE), "TPS report"),
                )
            ),
        )
        reader.start()
        reader.join(GUARD_SECONDS)
        self.assertTrue(holder.in_transaction)  # the reads finished while the lock was still held
        self.assertEqual(len(read), 1)
        consumed, ids, found = read[0]
        self.assertFalse(consumed)
        self.assertEqual(ids, sorted(note.id for note in main.lesson_notes()))
        self.assertEqual([note.id for note in found], ["note-3", "note-7", "note-14"])
        self.assertEqual(written, [])  # the writer is still waiting
        holder.execute("ROLLBACK")
        writer.join(GUARD_SECONDS)
        self.assertEqual(written, [main.Settlement.CONSUMED])

    def test_writers_queued_behind_a_stalled_instance_each_fail_busy_and_write_nothing(self) -> None:
        store = self.open(busy_timeout_ms=SMALL_BUDGET_MS)
        target = ("note-14", {note.id: note for note in store.all()}["note-14"].version)
        self.hold_write_lock()
        writers = 4
        results = store_workers.together(writers, lambda i: store.consume(PRINCIPAL, f"n{i}", LATER, target, ALWAYS))
        self.assertEqual([type(result) for result in results], [stores.StoreBusy] * writers)
        self.assertNotIn("\n", str(results[0]))
        self.assertIn("Try again", str(results[0]))
        self.assertIn("note-14", self.note_ids())
        self.assertEqual(self.consumed(), set())
        with self.assertRaises(stores.StoreBusy):
            store.put(main.Note("note-new", "New", f"{WORKSPACE}/new.md"))
        self.assertNotIn("note-new", self.note_ids())

    def test_a_writer_queued_behind_this_processes_own_writer_fails_busy_within_its_budget(self) -> None:
        store = self.open(busy_timeout_ms=SMALL_BUDGET_MS)
        inside, release = threading.Event(), threading.Event()

        def stall(stage: str) -> None:
            if stage == "claimed":
                inside.set()
                release.wait(GUARD_SECONDS)

        store._inside_transaction_hook = stall
        first: list[main.Settlement] = []
        thread = threading.Thread(target=lambda: first.append(store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS)))
        thread.start()
        self.addCleanup(thread.join, GUARD_SECONDS)
        self.addCleanup(release.set)
        self.assertTrue(inside.wait(GUARD_SECONDS))
        store._inside_transaction_hook = None
        with self.assertRaises(stores.StoreBusy):
            store.consume(PRINCIPAL, "n2", LATER, None, ALWAYS)
        release.set()
        thread.join(GUARD_SECONDS)
        self.assertEqual(first, [main.Settlement.CONSUMED])
        self.assertEqual(self.consumed(), {"n1"})

    def test_the_same_confirmation_completes_once_the_other_instance_lets_go(self) -> None:
        store = self.open(busy_timeout_ms=SMALL_BUDGET_MS)
        target = ("note-14", {note.id: note for note in store.all()}["note-14"].version)
        holder = self.hold_write_lock()
        with self.assertRaises(stores.StoreBusy):
            store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS)
        holder.execute("ROLLBACK")
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS), main.Settlement.DELETED)
        self.assertNotIn("note-14", self.note_ids())


class ClockStepBack(StoreCase):
    def decline_then_prune(self, store: sqlite_store.SqliteNotesStore, expires: float) -> None:
        self.assertIs(store.consume(PRINCIPAL, "n1", expires, None, ALWAYS), main.Settlement.CONSUMED)
        self.clock.now = expires + 1
        self.assertIs(store.consume("bob", "later", LATER, None, ALWAYS), main.Settlement.CONSUMED)  # prunes n1
        self.assertFalse(store.is_consumed("n1"))

    def test_an_accept_replayed_after_the_clock_steps_back_is_refused(self) -> None:
        store = self.open()
        target = ("note-14", {note.id: note for note in store.all()}["note-14"].version)
        expires = self.clock.now + 60
        self.decline_then_prune(store, expires)
        self.clock.now = expires - 30  # NTP steps the clock back before the state's expiry
        self.assertIs(store.consume(PRINCIPAL, "n1", expires, target, ALWAYS), main.Settlement.USED)
        self.assertIn("note-14", self.note_ids())
        self.assertEqual(self.consumed(), {"later"})

    def test_another_instance_with_a_slower_clock_refuses_the_replay_too(self) -> None:
        first = self.open()
        expires = self.clock.now + 60
        self.decline_then_prune(first, expires)
        second = self.open(clock=Clock(expires - 30))
        target = ("note-14", {note.id: note for note in second.all()}["note-14"].version)
        self.assertIs(second.consume(PRINCIPAL, "n1", expires, target, ALWAYS), main.Settlement.USED)
        self.assertIn("note-14", self.note_ids())

    def test_the_highest_reading_is_kept_in_the_database(self) -> None:
        store = self.open()
        store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS)
        self.clock.now -= 100
        store.consume(PRINCIPAL, "n2", LATER, None, ALWAYS)
        self.assertEqual(self.raw().execute("SELECT seen FROM high_water").fetchall(), [(self.clock.now + 100,)])

    def test_a_version_1_database_gains_the_high_water_table_and_keeps_its_data(self) -> None:
        old_schemas.old_sqlite(self.path, main.lesson_notes(), version=1)
        raw = self.raw()
        raw.execute("INSERT INTO consumed_nonces VALUES ('old', 'alice', ?)", (LATER,))
        store = self.open()
        self.assertTrue(store.is_consumed("old"))
        self.assertEqual(
            raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone(),
            (str(sqlite_store.SCHEMA_VERSION),),
        )
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS), main.Settlement.CONSUMED)
        self.assertEqual(raw.execute("SELECT seen FROM high_water").fetchall(), [(self.clock.now,)])
        self.assertEqual(len(self.note_ids()), len(main.lesson_notes()))


class Shutdown(StoreCase):
    def test_close_checkpoints_so_a_copy_of_the_db_file_alone_lacks_a_deleted_note(self) -> None:
        store = self.open()
        other = self.raw()  # another instance still has the database open
        self.assertEqual(other.execute("SELECT COUNT(*) FROM notes").fetchone(), (len(main.lesson_notes()),))
        target = ("note-14", {note.id: note for note in store.all()}["note-14"].version)
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS), main.Settlement.DELETED)
        store.close()
        copy = os.path.join(self.dir, "copy.db")
        shutil.copyfile(self.path, copy)  # the naive backup: the .db file without its -wal
        self.assertNotIn("note-14", self.note_ids(copy))
        self.assertIn("note-3", self.note_ids(copy))
        self.assertEqual(self.consumed(copy), {"n1"})

    def test_close_empties_the_wal_another_instance_keeps_open_but_not_one_it_is_reading(self) -> None:
        store = self.open()
        other = self.raw()  # keeps the -wal from being removed at close, as the sandbox does
        self.assertEqual(other.execute("SELECT COUNT(*) FROM notes").fetchone(), (len(main.lesson_notes()),))
        target = ("note-14", {note.id: note for note in store.all()}["note-14"].version)
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS), main.Settlement.DELETED)
        self.assertGreater(os.path.getsize(self.path + "-wal"), 0)
        store.close()
        self.assertEqual(os.path.getsize(self.path + "-wal"), 0)  # no old page of the deleted note left in it
        self.assertNotIn("note-14", self.note_ids())
        # A reader in a transaction still needs the log: close leaves it, and the reader's view.
        store = self.open()
        target = ("note-3", {note.id: note for note in store.all()}["note-3"].version)
        other.execute("BEGIN")
        self.assertIn(("note-3",), other.execute("SELECT id FROM notes").fetchall())
        self.assertIs(store.consume(PRINCIPAL, "n2", LATER, target, ALWAYS), main.Settlement.DELETED)
        store.close()
        self.assertGreater(os.path.getsize(self.path + "-wal"), 0)
        self.assertIn(("note-3",), other.execute("SELECT id FROM notes").fetchall())
        other.execute("COMMIT")
        self.assertNotIn("note-3", self.note_ids())

    def test_close_is_idempotent_and_a_closed_store_writes_nothing(self) -> None:
        store = self.open()
        store.close()
        store.close()
        with self.assertRaises(sqlite3.ProgrammingError):
            store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS)
        self.assertEqual(self.consumed(), set())


class FileReplaced(StoreCase):
    def test_an_unlinked_database_refuses_every_mutation_and_writes_nothing(self) -> None:
        store = self.open()
        target = ("note-14", {note.id: note for note in store.all()}["note-14"].version)
        os.unlink(self.path)
        with self.assertRaises(stores.StoreGone) as caught:
            store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS)
        self.assertNotIn("\n", str(caught.exception))
        self.assertNotIn(self.dir, str(caught.exception))
        self.assertFalse(store.is_consumed("n1"))
        self.assertIn("note-14", [note.id for note in store.all()])
        self.assertFalse(os.path.exists(self.path))
        for mutation in (lambda: store.remove("note-3"), lambda: store.consume(PRINCIPAL, "n2", LATER, None, ALWAYS)):
            with self.assertRaises(stores.StoreGone):
                mutation()
        self.assertIn("note-3", [note.id for note in store.all()])

    def test_another_database_moved_over_the_path_is_refused_and_left_untouched(self) -> None:
        store = self.open()
        target = ("note-14", {note.id: note for note in store.all()}["note-14"].version)
        other = os.path.join(self.dir, "other.db")
        self.open(other).close()
        os.replace(other, self.path)
        before = self.note_ids()
        with self.assertRaises(stores.StoreGone):
            store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS)
        # Refused for good, even if the original file came back: this instance cannot know what it missed.
        self.assertEqual(self.note_ids(), before)
        self.assertIn("note-14", before)
        self.assertEqual(self.consumed(), set())
        with self.assertRaises(stores.StoreGone):
            store.put(main.Note("note-new", "New", f"{WORKSPACE}/new.md"))
        self.assertNotIn("note-new", self.note_ids())


class SideFilesAndContent(StoreCase):
    """The -wal and -shm files are checked like the database file, and so is its content."""

    def test_a_removed_wal_or_shm_file_refuses_every_mutation_and_writes_nothing(self) -> None:
        for suffix in sqlite_store.SIDE_FILES:
            with self.subTest(suffix=suffix):
                path = os.path.join(self.dir, f"side{suffix}.db")
                store = self.open(path)
                self.assertIs(store.consume(PRINCIPAL, "before", LATER, None, ALWAYS), main.Settlement.CONSUMED)
                os.unlink(path + suffix)
                with self.assertRaises(stores.StoreGone):
                    store.consume(PRINCIPAL, "after", LATER, None, ALWAYS)
                with self.assertRaises(stores.StoreGone):
                    store.remove("note-3")  # refused for good
                self.assertTrue(store.is_consumed("before"))
                self.assertFalse(store.is_consumed("after"))
                self.assertIn("note-3", [note.id for note in store.all()])

    def test_a_decline_in_a_running_instance_survives_its_wal_and_shm_removed_so_a_fresh_instance_refuses_the_accept(
        self,
    ) -> None:
        self.open().close()  # created and seeded; no connection of this test stays open
        a = store_workers.Worker(self, self.path)
        first = self.handled(a, call(tps()))["result"]
        declined = self.handled(a, call(tps(), id=2, requestState=first["requestState"], inputResponses=DECLINE))
        self.assertEqual(declined["result"]["structuredContent"], {"deleted": False, "reason": "declined"})
        for suffix in sqlite_store.SIDE_FILES:
            os.unlink(self.path + suffix)  # a cleanup job or an operator, while A still runs
        b = store_workers.Worker(self, self.path)  # a fresh process on the same file
        replayed = self.handled(
            b, call(tps(), id=3, requestState=first["requestState"], inputResponses=accept("note-14"))
        )
        self.assertEqual(replayed["error"]["code"], main.INVALID_PARAMS, replayed)
        self.assertIn("note-14", self.note_ids())
        self.assertEqual(self.consumed(), {nonce_of(first["requestState"])})

    def test_a_consumed_confirmation_is_in_the_database_file_alone_before_consume_returns(self) -> None:
        store = self.open()
        target = ("note-14", {note.id: note for note in store.all()}["note-14"].version)
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS), main.Settlement.DELETED)
        self.assertIs(store.consume(PRINCIPAL, "n2", LATER, None, ALWAYS), main.Settlement.CONSUMED)
        copy = os.path.join(self.dir, "copy.db")
        shutil.copyfile(self.path, copy)  # the database file without its -wal, while serving
        self.assertEqual(self.consumed(copy), {"n1", "n2"})
        self.assertNotIn("note-14", self.note_ids(copy))
        self.assertIn("note-3", self.note_ids(copy))

    def test_a_read_of_this_process_holding_an_older_snapshot_delays_the_checkpoint_not_skips_it(self) -> None:
        store = self.open()
        real_lock = store._read_lock
        asked = threading.Event()

        class Signalling:
            """The reader's lock, saying when the checkpoint waits for it."""

            def __enter__(self) -> None:
                asked.set()
                real_lock.acquire()

            def __exit__(self, *exc: object) -> None:
                real_lock.release()

        real_lock.acquire()  # a read in flight: its snapshot is from before the consume below
        store._reader.execute("BEGIN")
        store._reader.execute("SELECT COUNT(*) FROM consumed_nonces").fetchall()
        store._read_lock = Signalling()  # type: ignore[assignment]
        results: list[main.Settlement] = []
        worker = threading.Thread(target=lambda: results.append(store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS)))
        worker.start()
        waited = asked.wait(GUARD_SECONDS)  # the first checkpoint could not copy the commit: it waits for the read
        store._reader.execute("COMMIT")
        real_lock.release()
        worker.join(GUARD_SECONDS)
        self.assertTrue(waited)
        self.assertEqual(results, [main.Settlement.CONSUMED])
        copy = os.path.join(self.dir, "copy.db")
        shutil.copyfile(self.path, copy)
        self.assertEqual(self.consumed(copy), {"n1"})

    def test_an_instance_whose_wal_and_shm_were_removed_does_not_copy_its_old_log_over_the_database_at_close(
        self,
    ) -> None:
        self.open().close()
        a = store_workers.Worker(self, self.path)
        a.arm({"op": "put", "note": list(main.Note("note-new", "New", f"{WORKSPACE}/new.md"))})
        self.assertEqual(store_workers.go(a), ["put"])  # in A's -wal only: a put is no consumption
        for suffix in sqlite_store.SIDE_FILES:
            os.unlink(self.path + suffix)
        b = store_workers.Worker(self, self.path)  # another instance, on new side files
        b.arm(consume_command({note.id: note for note in main.lesson_notes()}["note-14"], "by-b"))
        self.assertEqual(store_workers.go(b), [json.dumps({"settlement": "deleted"})])
        for worker in (b, a):  # B stops first, so A's connections are the file's last ones
            worker.finish()
        self.assertNotIn("note-14", self.note_ids())  # not brought back by this instance's stale pages
        self.assertNotIn("note-new", self.note_ids())
        self.assertEqual(self.consumed(), {"by-b"})
        self.assertEqual(self.raw().execute("PRAGMA integrity_check").fetchone(), ("ok",))

    def test_a_shm_file_that_can_no_longer_be_written_is_store_broken_before_sqlite_touches_its_map(self) -> None:
        # Injected: access() says what it says of an immutable file (`chattr +i`; the real
        # one is tests/test_store_cli.py, as root). The real file stays writable here, so a
        # missing check would not crash this process: the refusals below would not come.
        store = self.open()
        target = ("note-14", {note.id: note for note in store.all()}["note-14"].version)
        real_access, shm = os.access, self.path + "-shm"
        with mock.patch.object(sqlite_store.os, "access", lambda path, mode: path != shm and real_access(path, mode)):
            with self.assertRaises(stores.StoreBroken) as caught:
                store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS)
            self.assertIsInstance(caught.exception, stores.StoreLost)
            self.assertEqual(str(caught.exception), stores.BROKEN)
            with self.assertRaises(stores.StoreBroken):
                store.candidates(main.parse_file_uri(WORKSPACE), "TPS report")  # reads touch the map too
        with self.assertRaises(stores.StoreBroken):
            store.remove("note-3")  # for good, even once the file is writable again
        store.close()  # its connections are left open: closing would write to the map
        self.assertEqual(self.consumed(), set())
        self.assertIn("note-14", self.note_ids())
        self.assertIn("note-3", self.note_ids())

    def handled(self, worker: store_workers.Worker, message: dict[str, Any]) -> dict[str, Any]:
        """The JSON-RPC response of a worker's server to `message`."""
        worker.arm({"op": "handle", "message": message, "principal": PRINCIPAL})
        (line,) = store_workers.go(worker)
        return json.loads(line)

    def test_a_database_overwritten_in_place_by_another_store_is_noticed_at_the_next_write(self) -> None:
        store = self.open()
        other = os.path.join(self.dir, "other.db")
        self.open(other).close()
        inode = os.stat(self.path).st_ino
        with open(other, "rb") as source, open(self.path, "r+b") as target:
            target.write(source.read())  # `cp other.db notes.db`: same inode, other bytes
            target.truncate()
        self.assertEqual(os.stat(self.path).st_ino, inode)
        with self.assertRaises(stores.StoreGone):
            store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS)
        with self.assertRaises(stores.StoreGone):
            store.consume(PRINCIPAL, "n2", LATER, None, ALWAYS)

    def test_a_database_overwritten_in_place_with_garbage_is_store_lost_not_an_internal_error(self) -> None:
        store = self.open()
        size = os.path.getsize(self.path)
        with open(self.path, "r+b") as target:
            target.write(b"\xa5" * size)
        with self.assertRaises(stores.StoreGone):
            store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS)

    def test_each_database_gets_its_own_store_id_kept_across_reopening(self) -> None:
        first = self.open()
        kept = first._store_id
        first.close()
        self.assertEqual(self.open()._store_id, kept)
        self.assertNotEqual(self.open(os.path.join(self.dir, "other.db"))._store_id, kept)
        self.assertEqual(len(kept or ""), 32)


class WriteFailures(StoreCase):
    """A write the OS refuses is a retryable refusal; the writer is reopened, or the store is lost."""

    def limited_writes(self) -> Any:
        """While in effect, no file of this process may grow past the -wal's current size (EFBIG)."""
        limits = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(self.path + "-wal"), limits[1]))
        self.addCleanup(resource.setrlimit, resource.RLIMIT_FSIZE, limits)
        return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, limits)

    def test_a_failed_write_refuses_retryably_writes_nothing_and_the_same_call_succeeds_later(self) -> None:
        store = self.open()
        self.assertIs(store.consume(PRINCIPAL, "warm", LATER, None, ALWAYS), main.Settlement.CONSUMED)
        note = {n.id: n for n in store.all()}["note-14"]
        writer = store._conn
        lift = self.limited_writes()
        try:
            with self.assertRaises(stores.StoreWriteFailed) as caught:
                store.consume(PRINCIPAL, "n1", LATER, (note.id, note.version), ALWAYS)
        finally:
            lift()
        self.assertIsInstance(caught.exception, stores.StoreUnavailable)
        self.assertNotIsInstance(caught.exception, stores.StoreLost)
        self.assertIsNot(store._conn, writer)  # reopened
        self.assertFalse(store.is_consumed("n1"))
        self.assertIn("note-14", self.note_ids())
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, (note.id, note.version), ALWAYS), main.Settlement.DELETED)

    def test_a_writer_that_cannot_be_reopened_makes_the_store_lost(self) -> None:
        store = self.open()
        store.consume(PRINCIPAL, "warm", LATER, None, ALWAYS)
        broken = os.path.join(self.dir, "no-such-folder", "n.db")
        store._path = broken  # where the reopen looks: nothing can be opened there
        store._identity, store._side = sqlite_store._identity(broken), sqlite_store.side_identities(broken)
        lift = self.limited_writes()
        try:
            with self.assertRaises(stores.StoreBroken):
                store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS)
        finally:
            lift()
        with self.assertRaises(stores.StoreLost):
            store.consume(PRINCIPAL, "n2", LATER, None, ALWAYS)

    def test_through_the_server_a_failed_write_is_an_is_error_result_with_no_traceback(self) -> None:
        store = self.open()
        server = self.server(store)
        state = self.first_call(server, "TPS report")["requestState"]
        retry = call(tps(), id=2, requestState=state, inputResponses=accept("note-14"))
        lift = self.limited_writes()
        try:
            result = answered(server, retry, PRINCIPAL)["result"]
        finally:
            lift()
        self.assertIs(result["isError"], True)
        self.assertNotIn("Traceback", "\n".join(logged(server)))
        self.assertEqual(
            answered(server, retry, PRINCIPAL)["result"]["structuredContent"], {"deleted": True, "noteId": "note-14"}
        )


class TwoProcessRace(StoreCase):
    """Two worker processes race each round over one file.

    The class shares the file and the two workers: the tests race disjoint notes (rounds
    0-49, then 50-99) under their own nonces and count deletions round by round. Workers
    that a failed test left dead or with a line unread are replaced, with a new file.
    """

    workers: list[store_workers.Worker]
    shared: tuple[str, str, Clock, sqlite_store.SqliteNotesStore, list[store_workers.Worker]] | None = None

    @classmethod
    def start(cls) -> tuple[str, str, Clock, sqlite_store.SqliteNotesStore, list[store_workers.Worker]]:
        """A file seeded with the race notes, a store on it and two workers, all cleaned up with the class."""
        scope = unittest.TestCase()  # what a Worker reports to: its failures fail the test, its clean-ups the class's
        scope.addCleanup = cls.addClassCleanup  # type: ignore[method-assign]
        folder = tempfile.mkdtemp(prefix="sqlite-race-")
        cls.addClassCleanup(shutil.rmtree, folder, ignore_errors=True)
        path = os.path.join(folder, "notes.db")
        clock = Clock()
        store = open_store(path, clock=clock, seed_notes=race_notes(2 * RACE_ROUNDS))
        cls.addClassCleanup(store.close)
        workers = [store_workers.Worker(scope, path), store_workers.Worker(scope, path)]
        cls.addClassCleanup(setattr, cls, "shared", None)
        return folder, path, clock, store, workers

    def setUp(self) -> None:
        shared = type(self).shared
        if shared is None or not all(w.process.poll() is None and w.lines.empty() for w in shared[4]):
            shared = type(self).shared = self.start()
        self.dir, self.path, self.clock, self.store, self.workers = shared

    def test_two_servers_racing_one_accepted_confirmation_delete_exactly_once_every_round(self) -> None:
        # The first call happens here; both worker servers share the signing key and the file.
        self.clock.now = time.time()
        server = self.server(self.store)
        for round_ in range(RACE_ROUNDS):
            with self.subTest(round=round_):
                title = f"Race {round_:03d}"
                state = self.first_call(server, title)["requestState"]
                retry = call(tps(title), id=round_, requestState=state, inputResponses=accept(f"race-{round_:03d}"))
                before = len(self.note_ids())
                for worker in self.workers:
                    worker.arm({"op": "handle", "message": retry, "principal": PRINCIPAL})
                responses = [json.loads(line) for line in store_workers.go(*self.workers)]
                done = {"deleted": True, "noteId": f"race-{round_:03d}"}
                deleted = [r for r in responses if r.get("result", {}).get("structuredContent") == done]
                refused = [r for r in responses if r.get("error", {}).get("code") == main.INVALID_PARAMS]
                self.assertEqual((len(deleted), len(refused)), (1, 1), responses)
                self.assertEqual(len(self.note_ids()), before - 1)
                self.assertNotIn(f"race-{round_:03d}", self.note_ids())
                self.assertIn(nonce_of(state), self.consumed())

    def test_two_processes_racing_one_consume_give_one_deleted_and_one_used_every_round(self) -> None:
        # Straight into consume, with no is_consumed pre-check: only the transaction decides.
        notes = {note.id: note for note in self.store.all()}
        for round_ in range(RACE_ROUNDS, 2 * RACE_ROUNDS):
            with self.subTest(round=round_):
                command = consume_command(notes[f"race-{round_:03d}"], f"race-nonce-{round_}")
                before = len(self.note_ids())
                for worker in self.workers:
                    worker.arm(command)
                outcomes = sorted(json.loads(line)["settlement"] for line in store_workers.go(*self.workers))
                self.assertEqual(outcomes, ["deleted", "used"])
                self.assertEqual(len(self.note_ids()), before - 1)
                self.assertIn(f"race-nonce-{round_}", self.consumed())


class CrashSafety(StoreCase):
    ROUNDS = 3

    def setUp(self) -> None:
        super().setUp()
        self.open(seed_notes=race_notes(self.ROUNDS * 3)).close()
        self.notes = {note.id: note for note in race_notes(self.ROUNDS * 3)}

    def consume_command(self, index: int, pause: str | None) -> dict[str, Any]:
        return consume_command(self.notes[f"race-{index:03d}"], f"crash-{index}", pause)

    def reopened(self) -> sqlite_store.SqliteNotesStore:
        store = open_store(self.path, clock=time.time)
        self.addCleanup(store.close)
        self.assertEqual(self.raw().execute("PRAGMA integrity_check").fetchone(), ("ok",))
        return store

    def test_a_process_killed_inside_the_transaction_leaves_neither_the_nonce_nor_the_deletion(self) -> None:
        index = 0
        for stage in ("claimed", "deleted"):
            for _ in range(self.ROUNDS):
                with self.subTest(stage=stage, round=index):
                    worker = store_workers.Worker(self, self.path)
                    worker.arm(self.consume_command(index, stage))
                    self.assertEqual(store_workers.go(worker), [f"inside {stage}"])
                    worker.kill()
                    store = self.reopened()
                    self.assertFalse(store.is_consumed(f"crash-{index}"))
                    self.assertIn(f"race-{index:03d}", self.note_ids())
                index += 1

    def test_a_process_killed_just_after_commit_leaves_both_the_nonce_and_the_deletion(self) -> None:
        for index in range(2 * self.ROUNDS, 3 * self.ROUNDS):
            with self.subTest(round=index):
                worker = store_workers.Worker(self, self.path)
                worker.arm(self.consume_command(index, None))
                self.assertEqual(store_workers.go(worker), [json.dumps({"settlement": "deleted"})])
                worker.kill()
                store = self.reopened()
                self.assertTrue(store.is_consumed(f"crash-{index}"))
                self.assertNotIn(f"race-{index:03d}", self.note_ids())


if __name__ == "__main__":
    unittest.main()
