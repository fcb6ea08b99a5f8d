"""PostgreSQL store: schema, timeouts, restarts, crashes and races on a throwaway cluster."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import threading
import time
import unittest
from typing import Any

from helpers import procs, sql_stores, store_workers
from helpers.sql_stores import consume_command, race_notes
from helpers.support import PRINCIPAL, WORKSPACE, Clock, accept, call, tps

import main
import postgres_cluster
import postgres_store
import test_ledger
from stores import StoreBusy, StoreError

GUARD_SECONDS = store_workers.GUARD_SECONDS  # failure guard for a worker that hangs; never the assertion itself
RACE_ROUNDS = 50
LOAD_NOTES = 12  # confirmations the load thread settles across a server restart
ALWAYS = lambda note: True  # noqa: E731 - a recheck that accepts every live note
LATER = 10_000_000.0  # an expiry far after every Clock() reading used here
NEWER = str(postgres_store.SCHEMA_VERSION + 1)  # a schema version this server does not read

cluster: postgres_cluster.Cluster | None = None


def setUpModule() -> None:
    global cluster
    cluster = postgres_cluster.start_or_skip()  # SkipTest with one line when psycopg or the binaries are missing


def tearDownModule() -> None:
    if cluster is not None:
        cluster.destroy()


class PgCase(unittest.TestCase):
    """A fresh database per test, a raw connection to inspect it, and helpers."""

    def setUp(self) -> None:
        assert cluster is not None
        self.url = cluster.new_database()
        self.clock = Clock()

    def open(self, **kwargs: Any) -> postgres_store.PostgresNotesStore:
        kwargs.setdefault("clock", self.clock)
        kwargs.setdefault("seed_notes", main.lesson_notes())
        store = postgres_store.open_store(self.url, **kwargs)
        self.addCleanup(store.close)
        return store

    def raw(self) -> Any:
        conn = postgres_cluster.psycopg.connect(self.url, autocommit=True)
        self.addCleanup(conn.close)
        return conn

    def note_ids(self) -> list[str]:
        with postgres_cluster.psycopg.connect(self.url) as conn:
            return [row[0] for row in conn.execute("SELECT id FROM notes ORDER BY id")]

    def consumed(self) -> set[str]:
        with postgres_cluster.psycopg.connect(self.url) as conn:
            return {row[0] for row in conn.execute("SELECT nonce FROM consumed_nonces")}

    def target(self, store: postgres_store.PostgresNotesStore, note_id: str) -> tuple[str, str]:
        return (note_id, {note.id: note for note in store.all()}[note_id].version)


class SchemaAndSeeding(PgCase, sql_stores.SeedingContract):
    module = postgres_store

    def open_plain(self) -> postgres_store.PostgresNotesStore:
        return postgres_store.open_store(self.url, clock=self.clock, seed_notes=main.lesson_notes())

    def schema_version(self) -> tuple[str, ...]:
        return self.raw().execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()

    def test_another_schema_version_is_refused_in_one_line_and_nothing_is_changed(self) -> None:
        self.open().close()
        self.raw().execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (NEWER,))
        before = self.note_ids()
        with self.assertRaises(StoreError) as caught:
            postgres_store.open_store(self.url, clock=self.clock, seed_notes=race_notes(1))
        message = str(caught.exception)
        self.assertIn(f"schema version '{NEWER}'", message)
        self.assertIn(f"version {postgres_store.SCHEMA_VERSION} only", message)
        self.assertNotIn("\n", message)
        self.assertEqual(self.note_ids(), before)
        self.assertEqual(self.raw().execute("SELECT value FROM meta").fetchall(), [(NEWER,)])

    def test_a_database_with_our_table_names_but_no_schema_version_is_refused(self) -> None:
        self.raw().execute("CREATE TABLE notes (id text)")
        with self.assertRaisesRegex(StoreError, "not a notes store"):
            postgres_store.open_store(self.url, clock=self.clock)
        self.assertIsNone(self.raw().execute("SELECT to_regclass('meta')").fetchone()[0])

    def test_a_sql_ascii_database_is_refused_at_start_up_in_one_line_naming_the_fix_and_left_empty(self) -> None:
        assert cluster is not None
        name = f"ascii_{os.getpid()}"
        with cluster.admin() as admin:
            admin.execute(f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' TEMPLATE template0")
        self.url = cluster.url(name)
        with self.assertRaises(StoreError) as caught:
            postgres_store.open_store(self.url, clock=self.clock, seed_notes=main.lesson_notes())
        message = str(caught.exception)
        self.assertIn(f"encoding {postgres_store.UNCHECKED_ENCODING}", message)
        self.assertIn("ENCODING 'UTF8'", message)
        self.assertNotIn("\n", message)
        self.assertEqual(
            self.raw().execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone(), (0,)
        )

    def test_a_utf8_database_serves_its_notes(self) -> None:
        notes = self.open().candidates(main.parse_file_uri(WORKSPACE), "TPS report")
        self.assertEqual(self.raw().execute("SELECT current_setting('server_encoding')").fetchone(), ("UTF8",))
        self.assertEqual(
            notes, main.MemoryNotesStore(main.lesson_notes()).candidates(main.parse_file_uri(WORKSPACE), "TPS report")
        )
        self.assertNotEqual(notes, [])

    def test_an_unreachable_server_fails_start_up_in_one_line_without_the_password(self) -> None:
        folder = tempfile.mkdtemp(prefix="no-pg-")
        self.addCleanup(os.rmdir, folder)
        url = f"postgresql://notes:s3cret-pw@/notes?host={folder}"
        with self.assertRaises(StoreError) as caught:
            postgres_store.open_store(url, clock=self.clock)
        self.assertIn("cannot connect to postgresql://notes:***@", str(caught.exception))
        self.assertNotIn("s3cret-pw", str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))


class OlderTables(PgCase):
    def test_a_decisions_table_from_before_the_note_tools_gains_their_columns_and_old_rows_read_as_notes_delete(
        self,
    ) -> None:
        import browser_confirm

        self.open().close()
        raw = self.raw()
        raw.execute("DROP TABLE browser_confirmations")
        raw.execute(
            "CREATE TABLE browser_confirmations (nonce text PRIMARY KEY, handle text NOT NULL UNIQUE, principal "
            "text NOT NULL,"
            " workspace text NOT NULL, title text NOT NULL, expires_at double precision NOT NULL, status text NOT NULL,"
            " note_id text, version text, decided_by text, decided_at double precision)"
        )
        raw.execute(
            "INSERT INTO browser_confirmations VALUES ('n', %s, 'alice', %s, 'TPS', %s, 'pending', NULL, NULL, "
            "NULL, NULL)",
            ("h" * 43, WORKSPACE, self.clock.now + 60),
        )
        store = self.open()
        record = browser_confirm.records_for(store, self.clock).by_handle("h" * 43)
        assert record is not None
        self.assertEqual((record.tool, record.detail, record.title), (main.TOOL_NAME, None, "TPS"))
        columns = {
            row[0]
            for row in raw.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'browser_confirmations'"
            )
        }
        self.assertTrue({"tool", "detail"} <= columns)


class TimeoutsAreRetryable(PgCase):
    def hold_the_consume_lock(self) -> Any:
        """Another instance stuck inside its consume transaction, holding the high-water row."""
        holder = self.raw()
        holder.execute("BEGIN")
        holder.execute("SELECT seen FROM clock_high_water FOR UPDATE")
        return holder

    def test_a_lock_held_past_the_lock_timeout_is_store_busy_and_mutates_nothing(self) -> None:
        store = self.open(lock_timeout_ms=50)
        target = self.target(store, "note-14")
        holder = self.hold_the_consume_lock()
        with self.assertRaises(StoreBusy) as caught:
            store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS)
        holder.execute("ROLLBACK")
        self.assertEqual(str(caught.exception), postgres_store.BUSY_MESSAGE)
        self.assertEqual(self.consumed(), set())
        self.assertIn("note-14", self.note_ids())
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS), main.Settlement.DELETED)

    def test_a_statement_past_the_statement_timeout_is_store_busy_and_mutates_nothing(self) -> None:
        store = self.open(statement_timeout_ms=50, lock_timeout_ms=60_000)
        target = self.target(store, "note-14")
        holder = self.hold_the_consume_lock()
        with self.assertRaises(StoreBusy) as caught:
            store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS)
        holder.execute("ROLLBACK")
        self.assertEqual(str(caught.exception), postgres_store.BUSY_MESSAGE)
        self.assertEqual(self.consumed(), set())
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS), main.Settlement.DELETED)

    def test_reads_are_answered_while_a_write_waits_on_another_hosts_row_lock(self) -> None:
        store = self.open(
            lock_timeout_ms=60_000, statement_timeout_ms=60_000
        )  # the write would wait a minute: the reads must not
        target = self.target(store, "note-14")
        holder = self.hold_the_consume_lock()
        outcome: list[Any] = []
        writer = threading.Thread(target=lambda: outcome.append(store.consume(PRINCIPAL, "n1", LATER, target, ALWAYS)))
        writer.start()
        self.addCleanup(writer.join, GUARD_SECONDS)
        self.addCleanup(holder.execute, "ROLLBACK")
        watcher = self.raw()  # outside the holder's transaction: pg_stat_activity is read afresh each time
        self.assertTrue(self.wait_for_a_lock_wait(watcher))  # the write is now blocked inside PostgreSQL
        self.assertEqual(
            [note.id for note in store.candidates(main.parse_file_uri(WORKSPACE), "TPS report 2025")], ["note-14"]
        )
        self.assertFalse(store.is_consumed("n1"))
        self.assertIn("note-14", [note.id for note in store.all()])
        self.assertTrue(writer.is_alive() and self.lock_waiters(watcher) == 1)  # answered while the write still waits
        holder.execute("ROLLBACK")
        writer.join(GUARD_SECONDS)
        self.assertEqual(outcome, [main.Settlement.DELETED])

    def test_a_write_queued_behind_a_stuck_write_gives_up_within_its_own_deadline(self) -> None:
        store = self.open(lock_timeout_ms=200)
        store._lock.acquire()  # a write of this process stuck (on another host's lock, say) holds the writer
        self.addCleanup(lambda: store._lock.release() if store._lock.locked() else None)
        failed: list[BaseException] = []

        def queued() -> None:
            try:
                store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS)
            except StoreBusy as exc:
                failed.append(exc)

        thread = threading.Thread(target=queued)
        thread.start()
        thread.join(GUARD_SECONDS)
        self.assertFalse(thread.is_alive())  # gave up while the writer was still held
        self.assertTrue(store._lock.locked())
        self.assertEqual([str(exc) for exc in failed], [postgres_store.BUSY_MESSAGE])
        store._lock.release()
        self.assertEqual(self.consumed(), set())
        self.assertIs(store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS), main.Settlement.CONSUMED)

    def lock_waiters(self, conn: Any) -> int:
        """How many sessions of this database wait on a lock right now."""
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()[0]

    def wait_for_a_lock_wait(self, conn: Any) -> bool:
        """Poll until a session waits on a lock (the barrier for a write blocked inside PostgreSQL), or the guard."""
        deadline = time.monotonic() + GUARD_SECONDS
        while self.lock_waiters(conn) == 0:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def test_timeouts_below_one_millisecond_are_refused_at_start_up(self) -> None:
        for name in ("statement_timeout_ms", "lock_timeout_ms", "idle_in_transaction_timeout_ms"):
            with self.subTest(name=name), self.assertRaisesRegex(StoreError, name):
                postgres_store.open_store(self.url, clock=self.clock, **dict[str, Any]({name: 0}))
        self.assertIsNone(self.raw().execute("SELECT to_regclass('meta')").fetchone()[0])


class ClockAndPruning(PgCase):
    def test_one_instance_with_a_slow_clock_obeys_the_highest_clock_another_committed(self) -> None:
        ahead, behind = Clock(2_000.0), Clock(1_000.0)
        fast = self.open(clock=ahead)
        slow = self.open(clock=behind)
        self.assertIs(fast.consume(PRINCIPAL, "n0", LATER, None, ALWAYS), main.Settlement.CONSUMED)
        # Valid by the slow host's clock, expired by the highest reading seen: refused.
        self.assertIs(
            slow.consume(PRINCIPAL, "n1", 1_500.0, self.target(slow, "note-14"), ALWAYS), main.Settlement.USED
        )
        self.assertIn("note-14", self.note_ids())
        self.assertIs(
            slow.consume(PRINCIPAL, "n2", 2_000.5, self.target(slow, "note-14"), ALWAYS), main.Settlement.DELETED
        )

    def test_one_consume_prunes_at_most_one_batch_of_expired_nonces(self) -> None:
        store = self.open()
        with self.raw().cursor() as cur:
            cur.executemany(
                "INSERT INTO consumed_nonces VALUES (%s, 'someone', %s)",
                [(f"old-{i}", self.clock.now - 1) for i in range(postgres_store.PRUNE_BATCH + 1)],
            )
        store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS)
        left = self.consumed() - {"n1"}
        self.assertEqual(len(left), 1)  # PRUNE_BATCH pruned, exactly one left for the next call
        self.assertTrue(left <= {f"old-{i}" for i in range(postgres_store.PRUNE_BATCH + 1)})
        store.consume(PRINCIPAL, "n2", LATER, None, ALWAYS)
        self.assertEqual(self.consumed(), {"n1", "n2"})


class InsideTheTransaction(PgCase):
    def test_a_paused_consume_has_claimed_and_deleted_but_committed_nothing_until_it_returns(self) -> None:
        store = self.open()
        seen: list[tuple[str, set[str], list[str]]] = []
        # What another connection sees at each stage: nothing, until COMMIT.
        store.pause_inside_transaction(lambda stage: seen.append((stage, self.consumed(), self.note_ids())))
        outcome = store.consume(PRINCIPAL, "n1", LATER, self.target(store, "note-14"), ALWAYS)
        self.assertIs(outcome, main.Settlement.DELETED)
        everything = sorted(note.id for note in main.lesson_notes())
        self.assertEqual(seen, [("claimed", set(), everything), ("deleted", set(), everything)])
        self.assertEqual(self.consumed(), {"n1"})
        self.assertNotIn("note-14", self.note_ids())
        store.pause_inside_transaction(None)
        self.assertIs(store.consume(PRINCIPAL, "n2", LATER, None, ALWAYS), main.Settlement.CONSUMED)
        self.assertEqual(len(seen), 2)  # no hook once it is cleared


class ServerRestart(PgCase):
    def test_while_the_server_is_down_calls_are_store_busy_and_the_next_call_after_restart_works(self) -> None:
        assert cluster is not None
        store = self.open()
        self.assertTrue(store.all())  # connected
        cluster.stop()
        self.addCleanup(self.ensure_running)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            for call_ in (
                lambda: store.all(),
                lambda: store.is_consumed("n1"),
                lambda: store.consume(PRINCIPAL, "n1", LATER, None, ALWAYS),
            ):
                with self.assertRaises(StoreBusy) as caught:
                    call_()
                self.assertEqual(str(caught.exception), postgres_store.UNREACHABLE_MESSAGE)
        self.assertEqual(stderr.getvalue(), "")  # no traceback, no driver warning
        cluster.start()
        self.assertIs(
            store.consume(PRINCIPAL, "n1", LATER, self.target(store, "note-14"), ALWAYS), main.Settlement.DELETED
        )

    def ensure_running(self) -> None:
        assert cluster is not None
        try:
            cluster.start()
        except RuntimeError:
            pass  # already running

    def test_a_restart_under_load_leaves_every_confirmation_whole_deleted_exactly_when_consumed(self) -> None:
        assert cluster is not None
        store = self.open(seed_notes=race_notes(LOAD_NOTES), clock=time.time)
        targets = [self.target(store, f"race-{i:03d}") for i in range(LOAD_NOTES)]
        halfway, stopped, saw_busy, restarted = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )
        outcomes: list[tuple[int, str]] = []
        failures: list[BaseException] = []

        def load() -> None:
            try:
                for index, target in enumerate(targets):
                    if index == LOAD_NOTES // 2:
                        halfway.set()
                        stopped.wait(GUARD_SECONDS)  # the rest of the load meets a server that is down
                    while True:
                        try:
                            outcome = store.consume(PRINCIPAL, f"load-{index}", time.time() + 600, target, ALWAYS)
                        except StoreBusy:
                            outcomes.append((index, "busy"))
                            saw_busy.set()
                            restarted.wait(GUARD_SECONDS)
                            continue
                        outcomes.append((index, outcome.value))
                        break
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)
                saw_busy.set()

        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            thread = threading.Thread(target=load)
            thread.start()
            self.assertTrue(halfway.wait(GUARD_SECONDS))
            cluster.stop("immediate")  # a crash, mid-load: recovery on start
            self.addCleanup(self.ensure_running)
            stopped.set()
            self.assertTrue(saw_busy.wait(GUARD_SECONDS))
            cluster.start()
            restarted.set()
            thread.join(GUARD_SECONDS)
        self.assertEqual(failures, [])
        self.assertEqual(stderr.getvalue(), "")
        self.assertIn("busy", [outcome for _, outcome in outcomes])
        finals = {index: outcome for index, outcome in outcomes if outcome != "busy"}
        self.assertEqual(sorted(finals), list(range(LOAD_NOTES)))
        # A commit cut by the crash may have landed (the retry then finds it used) or not
        # (the retry deletes): either way each note is gone exactly when its nonce is spent.
        self.assertTrue(set(finals.values()) <= {"deleted", "used"}, finals)
        self.assertEqual(self.note_ids(), [])
        self.assertEqual(self.consumed(), {f"load-{i}" for i in range(LOAD_NOTES)})


class TwoProcessRace(PgCase):
    def test_two_processes_racing_one_consume_give_one_deleted_and_one_used_every_round(self) -> None:
        store = self.open(seed_notes=race_notes(RACE_ROUNDS))
        notes = {note.id: note for note in store.all()}
        workers = [store_workers.Worker(self, self.url), store_workers.Worker(self, self.url)]
        for round_ in range(RACE_ROUNDS):
            with self.subTest(round=round_):
                command = consume_command(notes[f"race-{round_:03d}"], f"race-nonce-{round_}")
                before = self.note_ids()
                for worker in workers:
                    worker.arm(command)
                outcomes = sorted(json.loads(line)["settlement"] for line in store_workers.go(*workers))
                self.assertEqual(outcomes, ["deleted", "used"])
                self.assertEqual(self.note_ids(), [i for i in before if i != f"race-{round_:03d}"])
                self.assertIn(f"race-nonce-{round_}", self.consumed())


class CrashSafety(PgCase):
    ROUNDS = 2

    def test_a_process_killed_inside_the_transaction_leaves_neither_the_nonce_nor_the_deletion(self) -> None:
        store = self.open(seed_notes=race_notes(2 * self.ROUNDS))
        notes = {note.id: note for note in store.all()}
        index = 0
        for stage in ("claimed", "deleted"):
            for _ in range(self.ROUNDS):
                with self.subTest(stage=stage, round=index):
                    worker = store_workers.Worker(self, self.url)
                    worker.arm(consume_command(notes[f"race-{index:03d}"], f"crash-{index}", stage))
                    self.assertEqual(store_workers.go(worker), [f"inside {stage}"])
                    worker.kill()
                    self.assertFalse(store.is_consumed(f"crash-{index}"))
                    self.assertIn(f"race-{index:03d}", self.note_ids())
                    # The dead session's locks go with it: the same confirmation completes now.
                    target = (f"race-{index:03d}", notes[f"race-{index:03d}"].version)
                    self.assertIs(
                        store.consume(PRINCIPAL, f"crash-{index}", time.time() + 60, target, ALWAYS),
                        main.Settlement.DELETED,
                    )
                index += 1


class TwoHttpServers(PgCase):
    def test_two_server_processes_on_one_database_complete_each_others_forms_once(self) -> None:
        env = procs.server_env(NOTES_MCP_TOKEN=procs.TOKEN, NOTES_MCP_SECRET=procs.SECRET)
        servers = [procs.HttpServer(self, "--db", self.url, env=env) for _ in range(2)]
        conns = [server.connect(self) for server in servers]
        for asker, answerer, title, note_id in ((0, 1, "TPS report", "note-14"), (1, 0, "TPS report", "note-7")):
            with self.subTest(asked_on=asker):
                status, _, body = procs.post(conns[asker], call(tps(title)))
                state = json.loads(body)["result"]["requestState"]
                retry = call(tps(title), id=2, requestState=state, inputResponses=accept(note_id))
                status, _, body = procs.post(conns[answerer], retry)
                self.assertEqual(json.loads(body)["result"]["structuredContent"], {"deleted": True, "noteId": note_id})
                status, _, body = procs.post(conns[asker], retry)  # the replay, on the other host
                self.assertEqual(json.loads(body)["error"]["code"], main.INVALID_PARAMS)
                self.assertNotIn(note_id, self.note_ids())
        self.assertEqual(len(self.note_ids()), len(main.lesson_notes()) - 2)
        for server in servers:
            self.assertNotIn("Traceback", server.stderr_text())


if __name__ == "__main__":
    unittest.main()


class PostgresLedger(test_ledger.LedgerContract, PgCase):
    """The ledger contract (tests/test_ledger.py) on the PostgreSQL store's ledger."""

    def open(self, **kwargs: Any) -> Any:  # PgCase's signature; the contract passes nothing
        store = postgres_store.open_store(self.url, clock=self.clock, max_per_principal=test_ledger.BOUND)
        self.addCleanup(store.close)
        return store.ledger
