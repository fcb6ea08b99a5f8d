"""The notes store over one SQLite database, shared by any number of server processes.

Exercises one and three of the lesson, built for real: the notes and the consumed
confirmations live in one database file, and `consume` claims the nonce, re-reads the
chosen note, re-checks it and deletes it in ONE `BEGIN IMMEDIATE` transaction. The HMAC
on requestState proves a confirmation was issued by us; only this transaction proves it
is used once, because it is the one place every instance must pass through in turn.

    store = open_store("notes.db", clock=time.time, seed_notes=main.lesson_notes())
    server = frame.notes_server(keys=[key], notes=store, policy=policy)

Schema (version SCHEMA_VERSION, recorded in the `meta` table):

    meta(key PRIMARY KEY, value)                     -- ("schema_version", "4"), ("store_id", random hex)
    notes(id PRIMARY KEY, title, uri, revision, folded)  -- uri is the canonical file URI;
                                                     -- folded = stores.fold_title(title) (v3), NULL: scanned
    index notes_by_uri(uri)                          -- the workspace's rows, by URI range (v3)
    index notes_unindexed(id) WHERE folded IS NULL   -- rows written by another program (v3)
    note_titles: FTS5(folded, tokenize trigram)      -- titles by substring, rowid = notes.rowid (v3)
    consumed_nonces(nonce PRIMARY KEY, principal, expires_at)
    index consumed_by_principal(principal, expires_at)  -- the replay bound, in SQL
    index consumed_by_expiry(expires_at)                -- bounded pruning
    high_water(one = 1, seen)                        -- highest clock reading committed (v2)
    audit(id, at, principal, tool, outcome, ..., principal_seq)  -- one entry per consumed confirmation (code/audit.py)
    deleted_notes(audit_id PRIMARY KEY, id, title, uri, revision, deleted_at, body)  -- the trash
    notes.body, notes.body_folded                    -- a note's text and its folded form (v4, the note tools)
    index notes_body_unindexed(id) WHERE body_folded IS NULL AND body IS NOT NULL  -- bodies written elsewhere (v4)
    note_search: FTS5(title, body; trigram, case_sensitive 1)  -- folded titles and bodies, ranked search,
                                                               rowid = notes.rowid (v5)

The last two are added to any database that lacks them, whatever its version: a server
from before them ignores them. `consume` writes the entry, and moves a deleted note's row
to deleted_notes (unless the deletion mode is "unlink"), in its one transaction.

Two classes: `SqliteDatabase` is the file, guarded while serving (its connections, its
transaction, the checks that it is still the file opened) with its ledger (code/ledger.py:
the nonces, the audit, the trash rows, the page's decisions, on this transaction);
`SqliteNotesStore` adds the notes. The folder store's confirmation database is a
`SqliteDatabase` alone: `open_ledger` gives its ledger.

Threading: a writer connection behind one lock, a reader connection behind another
(see SqliteDatabase). Call close() at shutdown: it checkpoints the WAL into the file.

Transactions follow the one rule of both SQL stores (code/stores.py): COMMIT when the
body returns, ROLLBACK when it raises; a refusal that writes nothing (USED, FULL)
raises stores.Rollback and is returned after the rollback. Errors are the classes of
code/stores.py only: StoreError at start-up; StoreBusy, StoreWriteFailed (a retry may
succeed); StoreGone, StoreBroken (the store is lost: its connections are then never
closed, see close). Every consuming commit is checkpointed into the database file
before its answer (_checkpoint).
Standard library only.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import audit
import ledger
import main
import note_bodies
import stores
import text_index
import title_index

__all__ = ["open_ledger", "open_store"]

T = TypeVar("T")

SCHEMA_VERSION = 5
BUSY_TIMEOUT_MS = 5000  # one write's whole wait: for this process's other writers and for other instances
WAL_RETRY_SECONDS = 0.01  # pause between tries of the switch to WAL while another instance holds the file
PRUNE_BATCH = ledger.PRUNE_NONCES  # expired nonces deleted per claim (the ledger's bound)
QUERY_TRIGRAMS = 2  # the rarest trigrams of a query the title index is asked for (any of them finds every match)

# Version 2 added this table; a version 1 database gains it when first opened.
_HIGH_WATER = (
    "CREATE TABLE high_water (one INTEGER PRIMARY KEY CHECK (one = 1), seen REAL NOT NULL)",
    "INSERT INTO high_water (one, seen) VALUES (1, 0)",
)

# Version 3 added the lookup indexes. A row that another program inserts has no folded
# title (NULL), and one whose title or URI another program changes loses it: such rows
# are read by every lookup (notes_unindexed) and tested exactly, so they are never missed.
_LOOKUP = (
    "CREATE INDEX notes_by_uri ON notes (uri)",
    "CREATE INDEX notes_unindexed ON notes (id) WHERE folded IS NULL",
    "CREATE TRIGGER notes_edited_elsewhere AFTER UPDATE OF title, uri ON notes WHEN new.folded IS old.folded"
    " BEGIN UPDATE notes SET folded = NULL WHERE rowid = new.rowid; END",
)
# The title index: an FTS5 table of folded titles, kept in step with `notes` by triggers
# (so a deletion inside consume's transaction drops its entry in the same commit). The
# triggers read the row as it is now, whatever order SQLite fires them in.
_TITLES = (
    "CREATE VIRTUAL TABLE note_titles USING fts5(folded, tokenize = 'trigram')",
    "CREATE VIRTUAL TABLE note_title_grams USING fts5vocab(note_titles, row)",  # trigram -> titles holding it
    "INSERT INTO note_titles (rowid, folded) SELECT rowid, folded FROM notes WHERE folded IS NOT NULL",
    "CREATE TRIGGER note_titles_add AFTER INSERT ON notes BEGIN"
    " INSERT INTO note_titles (rowid, folded) SELECT rowid, folded FROM notes"
    " WHERE rowid = new.rowid AND folded IS NOT NULL; END",
    "CREATE TRIGGER note_titles_drop AFTER DELETE ON notes BEGIN DELETE FROM note_titles WHERE rowid = old.rowid; END",
    "CREATE TRIGGER note_titles_change AFTER UPDATE ON notes BEGIN DELETE FROM note_titles WHERE rowid = old.rowid;"
    " INSERT INTO note_titles (rowid, folded) SELECT rowid, folded FROM notes"
    " WHERE rowid = new.rowid AND folded IS NOT NULL; END",
)
# Version 4 added note bodies (the opt-in note tools, code/notes_tools.py): a step of its
# own, run on every database below version 4 after the earlier steps. A body another
# program writes without its folded form is read by every search (notes_body_unindexed).
_BODIES = (
    "ALTER TABLE notes ADD COLUMN body TEXT",
    "ALTER TABLE notes ADD COLUMN body_folded TEXT",
    "CREATE INDEX notes_body_unindexed ON notes (id) WHERE body_folded IS NULL AND body IS NOT NULL",
    "CREATE TRIGGER notes_body_edited_elsewhere AFTER UPDATE OF body ON notes"
    " WHEN new.body_folded IS old.body_folded AND new.body IS NOT old.body"
    " BEGIN UPDATE notes SET body_folded = NULL WHERE rowid = new.rowid; END",
)
# Version 5: the search index, FTS5 over each note's folded title and folded body in two
# columns (BM25 weighs them apart), trigram tokens, case-sensitive since the text is folded
# already: a quoted term's match is then exactly the substring test (code/text_index.py).
# Kept in step by triggers as the title index is. It replaces version 4's body-only index.
_SEARCH_INDEX = (
    "DROP TRIGGER IF EXISTS note_body_add",
    "DROP TRIGGER IF EXISTS note_body_drop",
    "DROP TRIGGER IF EXISTS note_body_change",
    "DROP TABLE IF EXISTS note_body_grams",
    "DROP TABLE IF EXISTS note_body_index",
    "CREATE VIRTUAL TABLE note_search USING fts5(title, body, tokenize = 'trigram case_sensitive 1')",
    "INSERT INTO note_search (rowid, title, body)"
    " SELECT rowid, coalesce(folded, ''), coalesce(body_folded, '') FROM notes",
    "CREATE TRIGGER note_search_add AFTER INSERT ON notes BEGIN INSERT INTO note_search (rowid, title, body)"
    " SELECT rowid, coalesce(folded, ''), coalesce(body_folded, '') FROM notes WHERE rowid = new.rowid; END",
    "CREATE TRIGGER note_search_drop AFTER DELETE ON notes BEGIN DELETE FROM note_search WHERE rowid = old.rowid; END",
    "CREATE TRIGGER note_search_change AFTER UPDATE ON notes BEGIN DELETE FROM note_search WHERE rowid = old.rowid;"
    " INSERT INTO note_search (rowid, title, body)"
    " SELECT rowid, coalesce(folded, ''), coalesce(body_folded, '') FROM notes"
    " WHERE rowid = new.rowid; END",
)
_ROW = "SELECT id, title, uri, revision FROM notes"
_TEXT_ROW = "SELECT id, title, uri, revision, body FROM notes"
# Searches (the note tools, code/text_index.py). The index's matches of the words it is
# asked for (text_index.Query.indexed), newest first, at most MAX_RANKED_ROWS + 1 of them
# (the one past the bound only says that the bound was met: `kept` is the materialized
# rows in their order without it); the workspace's URI range, the other terms' test
# (short terms, phrases), the title test and the score (text_index.score_sql) inside SQL
# over those rows; ordered, LIMIT. Only ids leave SQL here: the bodies of the rows
# returned are read afterwards, by id.
_RANKED = (
    "WITH hits AS MATERIALIZED ({hits}), kept AS (SELECT * FROM hits LIMIT ?)"
    " SELECT n.id, ({titled}) AS titled, ({score}) AS score, (SELECT count(*) FROM hits)"
    " FROM kept JOIN notes n ON n.rowid = kept.r"
    " WHERE n.uri >= ? AND n.uri < ? AND n.folded IS NOT NULL AND (n.body_folded IS NOT NULL OR n.body IS NULL){short}"
    " ORDER BY titled DESC, score DESC, n.id LIMIT ?"
)
_HITS_INDEXED = "SELECT rowid AS r FROM note_search WHERE note_search MATCH ? ORDER BY rowid DESC LIMIT ?"
_HITS_SCANNED = "SELECT rowid AS r FROM notes WHERE uri >= ? AND uri < ? ORDER BY uri LIMIT ?"
# Rows another program wrote without their folded forms: tested in Python (they cannot be folded in SQL).
_UNINDEXED = (
    f"{_TEXT_ROW} WHERE folded IS NULL UNION {_TEXT_ROW} WHERE body_folded IS NULL AND body IS NOT NULL LIMIT ?"
)
# Long queries: the title index, then the workspace's URI range, plus the unindexed rows.
_BY_TITLE = (
    f"{_ROW} WHERE rowid IN (SELECT rowid FROM note_titles WHERE note_titles MATCH ?) AND uri >= ? AND uri < ?"
    f" UNION ALL {_ROW} WHERE folded IS NULL"
)
# Short queries (or no title index): the workspace's URI range alone, plus the unindexed rows.
_BY_FOLDER = f"{_ROW} WHERE uri >= ? AND uri < ? AND instr(folded, ?) > 0 UNION ALL {_ROW} WHERE folded IS NULL"

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # CHECKs keep a hand-edited row from reaching the server as a non-string title or id.
    "CREATE TABLE notes ("
    f" id TEXT PRIMARY KEY CHECK (typeof(id) = 'text' AND length(id) BETWEEN 1 AND {stores.MAX_NOTE_ID_LENGTH}),"
    " title TEXT NOT NULL CHECK (typeof(title) = 'text' AND length(trim(title)) > 0),"
    " uri TEXT NOT NULL CHECK (typeof(uri) = 'text'),"
    " revision INTEGER NOT NULL CHECK (typeof(revision) = 'integer'),"
    " folded TEXT)",
    "CREATE TABLE consumed_nonces ("
    " nonce TEXT PRIMARY KEY CHECK (typeof(nonce) = 'text'),"
    " principal TEXT NOT NULL,"
    " expires_at REAL NOT NULL)",
    "CREATE INDEX consumed_by_principal ON consumed_nonces (principal, expires_at)",
    "CREATE INDEX consumed_by_expiry ON consumed_nonces (expires_at)",
    *_HIGH_WATER,
    *_LOOKUP,
)


@functools.cache  # the linked SQLite library cannot change while the process runs: probed once, not at every open
def trigram_support() -> str | None:
    """None when this SQLite has FTS5 with the trigram tokenizer (3.34 and later); else why not, in words."""
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("CREATE VIRTUAL TABLE probe USING fts5(x, tokenize = 'trigram')")
    except sqlite3.Error:
        return f"SQLite {sqlite3.sqlite_version} has no FTS5 trigram tokenizer (needs 3.34 or later, built with FTS5)"
    finally:
        probe.close()
    return None


_BODY = note_bodies.BodySql(ledger.SQLITE)

# Primary result codes (sqlite3.Error.sqlite_errorcode & 0xFF) for a write the OS refused,
# which a reopened connection may well complete once the cause is gone ...
_WRITE_FAILURES = frozenset(
    {sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN}
)
# ... and for a file that is no longer the database this store opened (overwritten in place).
_NOT_OURS = frozenset({sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT})
SIDE_FILES = ("-wal", "-shm")  # checked like the database file itself while serving


class SqliteDatabase:
    """One SQLite file in WAL mode, guarded while serving: a writer connection and a reader connection, and its ledger.

    Writes share one connection behind one lock: SQLite admits one writer at a time
    anyway, and the lock stops two threads from interleaving statements in one
    transaction. Each write has ONE budget (busy_timeout_ms) covering both its wait for
    that lock and SQLite's wait for another instance's transaction, so writers queued
    behind a stalled instance all fail with stores.StoreBusy after about one budget, not one
    budget each in turn. Reads use their own connection and lock: in WAL mode a reader
    never needs the write lock, so a stalled writer elsewhere delays no lookup. The folder
    store's confirmation database is one of these alone (open_ledger).
    """

    def __init__(
        self,
        path: str,
        writer: sqlite3.Connection,
        reader: sqlite3.Connection,
        *,
        clock: Callable[[], float],
        max_per_principal: int,
        busy_timeout_ms: int,
        retention: audit.Retention = audit.Retention(),
    ) -> None:
        self._path = path
        self._conn = writer
        self._reader = reader
        self._clock = clock
        self._budget = busy_timeout_ms / 1000
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._identity = _identity(path)
        # The write-ahead log and its shared-memory index exist while any connection is
        # open (the reader keeps them so): remembered like the file, checked like it.
        self._side = side_identities(path)
        self._shm_size = _size(path + "-shm")  # SQLite maps it: it may grow, never shrink under us
        self._store_id = store_id(writer)
        self._gone = False
        self._broken = False  # lost because the writer could not be reopened, or the -shm cannot be written
        self._shm_lost = False  # the -shm shrank or cannot be written: no read or write touches its map again
        self._closed = False
        # TEST-ONLY: called as hook(stage) with the write lock held: "waiting" just before
        # BEGIN IMMEDIATE, "claimed" after the nonce insert and "deleted" after the
        # deletion (the row, or the Markdown store's unlink), both before COMMIT.
        # The crash tests pause here and SIGKILL the process. None (the default) in service.
        self._inside_transaction_hook: Callable[[str], None] | None = None
        # BENCH-ONLY: `bench.py --mode checkpoint` turns this off to measure what the
        # checkpoint after each consume costs. True (the default) in service: off, a
        # removed -wal takes the consumed confirmations with it (_checkpoint).
        self.checkpoint_each_consume = True
        # What every confirmation writes (nonce, audit entry, trash row, page decisions), in
        # this database's own transactions.
        self.ledger = ledger.SqlLedger(self, ledger.SQLITE, max_per_principal, retention)

    def _read(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows from the reader connection, each value of the type its column holds; never waits for the write lock."""
        return self.read_with(lambda conn: conn.execute(sql, params).fetchall())

    def write_with(self, work: Callable[[sqlite3.Connection], T], durable: bool = False) -> T:
        """`work(conn)` in one write transaction (the write lock, BEGIN IMMEDIATE, one budget); `durable`: checkpointed
        before return."""
        with self._transaction(durable) as conn:
            return work(conn)

    def read_with(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work(conn)` on the reader connection (never waits for the write lock); a file no longer ours is
        StoreGone."""
        with self._read_lock:
            self._check_shm()
            try:
                return work(self._reader)
            except sqlite3.DatabaseError as exc:
                if getattr(exc, "sqlite_errorcode", -1) & 0xFF in _NOT_OURS:
                    self._gone = True  # overwritten in place: the bytes are not the database we opened
                    raise stores.StoreGone() from None
                raise

    def now(self) -> float:
        """This database's clock."""
        return self._clock()

    def pause(self, stage: str) -> None:
        """Run the test-only hook at `stage` (nothing in service)."""
        if self._inside_transaction_hook is not None:
            self._inside_transaction_hook(stage)

    @contextmanager
    def _transaction(self, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """The write lock and BEGIN IMMEDIATE within one budget; COMMIT when the body returns, ROLLBACK when it raises.

        Raises stores.StoreBusy when the budget runs out first, stores.StoreGone when the path no
        longer names the file this store opened; in both cases nothing was written. `durable`:
        after the COMMIT, copy the -wal into the database file (_checkpoint) before returning.
        """
        deadline = time.monotonic() + self._budget
        if not self._lock.acquire(timeout=self._budget):
            raise stores.StoreBusy()
        try:
            with self._write_errors():
                yield from self._locked_transaction(deadline)
            if durable:
                self._checkpoint()
        finally:
            self._lock.release()

    def _checkpoint(self) -> None:
        """Copy the committed -wal into the database file, waiting for no one (write lock held); failures are left to
        the next one."""
        # A consumed confirmation that lives only in the -wal is lost with it: a -wal and
        # -shm removed under a running instance (a cleanup job, a careless operator) let
        # a fresh instance on the same file accept a state this one declined. So every
        # consuming commit is copied into the database file before its answer leaves.
        # PASSIVE waits for no lock; it copies every frame no reader still needs. A read of
        # this process in flight may hold an older snapshot: tried once more between reads.
        if not self.checkpoint_each_consume:
            return
        try:
            _, frames, copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if copied < frames:
                with self._read_lock:
                    self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error:
            # The commit stands (in the -wal, synced before COMMIT returned), so the answer
            # is true; the next write's checks find a file that is no longer ours.
            pass

    def _locked_transaction(self, deadline: float) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE within what is left of the budget, the checks, the body; the write lock held."""
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")  # its side files are gone too
        self._check_file()  # before BEGIN too: SQLite reports an unlinked file as a disk I/O error
        conn = self._conn
        # What is left of this write's budget is all SQLite may wait for another instance.
        conn.execute(f"PRAGMA busy_timeout = {max(0, int((deadline - time.monotonic()) * 1000))}")
        self.pause("waiting")
        try:
            conn.execute("BEGIN IMMEDIATE")  # the write lock first: every check below sees a frozen database
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                raise stores.StoreBusy() from None
            raise
        try:
            self._check_file()  # again under the write lock: the file may have been swapped while we waited
            self._check_content()
            yield conn
            conn.execute("COMMIT")  # the body returned: the one rule of both SQL stores (code/stores.py)
        finally:
            # Half a deletion must never survive: the nonce goes with the note or not at all.
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    @contextmanager
    def _write_errors(self) -> Iterator[None]:
        """Map SQLite failures of a write: not our file -> stores.StoreGone; refused by the OS -> reopen,
        stores.StoreWriteFailed."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            code = getattr(exc, "sqlite_errorcode", -1) & 0xFF  # none on a closed connection's ProgrammingError
            if code in _NOT_OURS:
                self._gone = True
                raise stores.StoreGone() from None
            if code not in _WRITE_FAILURES:
                raise
            # After a failed write (a full disk, an I/O error, a log made read-only) the
            # connection may stay unusable even once the cause is gone: every later accept
            # was -32603 with a traceback. A fresh writer, and a retryable answer.
            self._reopen()
            raise stores.StoreWriteFailed() from None

    def _reopen(self) -> None:
        """Replace the writer connection (lock held); stores.StoreBroken, for good, if that fails."""
        try:
            self._conn.close()
        except sqlite3.Error:
            pass
        try:
            self._conn = _connect(self._path, int(self._budget * 1000))
            self._conn.execute("PRAGMA synchronous = FULL")
            if self._conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                raise sqlite3.OperationalError("not in WAL mode")
        except sqlite3.Error:
            self._gone = self._broken = True  # the process exits 1 (serve.StopOnLoss): a supervisor starts it afresh
            raise stores.StoreBroken() from None

    def _check_file(self) -> None:
        """Raise stores.StoreGone unless the path and its -wal and -shm still name the files opened (device and
        inode)."""
        # A database unlinked or replaced under a running server (a restore, a cleanup job,
        # `mv other.db notes.db`) would take this instance's commits where no other
        # instance sees them: confirmations consumed here could be replayed there. So
        # would a removed -wal or -shm: this instance keeps writing to the unlinked one
        # while another instance starts a new one, and each accepts what the other declined.
        if not self._gone and (_identity(self._path) != self._identity or side_identities(self._path) != self._side):
            self._gone = True
        self._check_shm()
        if self._gone:
            raise stores.StoreBroken() if self._broken else stores.StoreGone()

    def _check_shm(self) -> None:
        """Raise stores.StoreLost, before SQLite touches its map, if the -shm file shrank or can no longer be
        written."""
        # SQLite memory-maps the -shm file and writes to it on reads and writes alike. A
        # page cut off by a truncation faults on the next access (SIGBUS), and so does a
        # write to a file made immutable (`chattr +i`): either killed the process. Checked
        # before every read and write; a change between this check and the access is
        # still a crash.
        if not self._shm_lost:
            trouble = _shm_trouble(self._path + "-shm", self._side[1], self._shm_size)
            if trouble is not None:
                self._shm_lost = self._gone = True
                if trouble == UNWRITABLE:
                    self._broken = True  # its message: "could not be written", not "removed or replaced"
                if trouble == SHRUNK:
                    # Zeros back up to the size SQLite mapped, for the other instances that
                    # map it too: SQLite rebuilds that index from the -wal itself.
                    try:
                        os.truncate(self._path + "-shm", self._shm_size)
                    except OSError:
                        pass
        if self._shm_lost:
            raise stores.StoreBroken() if self._broken else stores.StoreGone()

    def _check_content(self) -> None:
        """Raise stores.StoreGone unless the file still holds the store id read at open (write lock held)."""
        # A file overwritten in place (`cp other.db notes.db` keeps the inode) passes the
        # identity check; its store id does not. Read on a fresh connection: the writer's
        # page cache would still show the page it read before the overwrite.
        fresh = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
        try:
            found = store_id(fresh)
        finally:
            fresh.close()
        if found != self._store_id:
            self._gone = True
            raise stores.StoreGone()

    def close(self) -> None:
        """Checkpoint the WAL into the database file, then close; later calls do nothing."""
        with self._lock, self._read_lock:
            if self._closed:
                return
            self._closed = True
            if self._gone or _identity(self._path) != self._identity or side_identities(self._path) != self._side:
                # The last connection to close checkpoints its -wal into the database and
                # removes the -wal by name: into a file that is another's now, over what the
                # instances on the new side files committed (a deleted note came back), or
                # through a -shm map that faults. So a lost store's connections stay open.
                _abandon(self._reader, self._conn)
                return
            try:
                # Until checkpointed, deletions live only in the -wal file: a copy of the
                # .db file alone (a naive backup) would still hold the deleted notes.
                # TRUNCATE without a busy wait copies every frame no reader still needs and
                # never waits, so an instance shutting down beside others is not held for a
                # busy timeout; when no reader needs any, it also empties the -wal. Inside
                # the sandbox the last close cannot remove the -wal (its folder is not
                # writable), and a full one would keep old pages, a deleted note's text.
                self._conn.execute("PRAGMA busy_timeout = 0")
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                self._reader.close()
                self._conn.close()


class SqliteNotesStore(SqliteDatabase, note_bodies.SqlTexts, stores.SettleSeam[ledger.SqlLedger]):
    """stores.Store over one SQLite database: the notes' reads and writes; the nonces and the audit in its ledger."""

    def __init__(
        self,
        path: str,
        writer: sqlite3.Connection,
        reader: sqlite3.Connection,
        *,
        clock: Callable[[], float],
        max_per_principal: int,
        busy_timeout_ms: int,
        retention: audit.Retention = audit.Retention(),
    ) -> None:
        super().__init__(
            path,
            writer,
            reader,
            clock=clock,
            max_per_principal=max_per_principal,
            busy_timeout_ms=busy_timeout_ms,
            retention=retention,
        )
        self.retention = retention  # the ledger's too: deletion mode, trash and audit bounds
        self.texts: stores.Texts | None = self
        self.body = _BODY
        self._titles_missing = trigram_support()
        self._titles = self._titles_missing is None

    # ---------------------------------------------------------------- reads

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """Notes strictly inside `workspace` whose title contains `title` (folded), sorted."""
        needle = stores.fold_title(title)
        low, high = title_index.uri_range(workspace)
        if self._titles and title_index.uses_title_index(needle):
            # A title holding the query holds every one of its trigrams, so asking FTS5 for
            # the rarest few finds every match. (The whole query as one phrase makes FTS5
            # read the long lists of its common trigrams: 10 ms at 100,000 titles.) Each
            # trigram is quoted whole: nothing in a title is query syntax.
            match = " AND ".join('"' + gram.replace('"', '""') + '"' for gram in self._rarest(needle))
            rows = self._read(_BY_TITLE, (match, low, high))
        else:
            rows = self._read(_BY_FOLDER, (low, high, needle))
        # The indexes narrow; the exact test decides (never a SQL LIKE on the URI string:
        # `.../Notes%` would also match the look-alike folder `.../Notes-evil`).
        return title_index.exact(rows, workspace, needle)

    def _rarest(self, needle: str) -> list[str]:
        """The QUERY_TRIGRAMS trigrams of `needle` held by the fewest titles."""
        return title_index.rarest(needle, self._counts_of(title_index.trigrams(needle)), QUERY_TRIGRAMS)

    def _counts_of(self, grams: set[str]) -> dict[str, int]:
        """How many titles hold each of `grams`, read from the title index's vocabulary."""
        # Only the query's own trigrams: a copy of the whole vocabulary held 341 MB at
        # 10,000 titles of random CJK characters. (fts5vocab answers `term IN` by lookups.)
        marks = ", ".join("?" * len(grams))
        return dict(self._read(f"SELECT term, doc FROM note_title_grams WHERE term IN ({marks})", tuple(grams)))

    def describe(self) -> str:
        """One line for the start-up report: how lookups find rows."""
        if self._titles:
            return (
                f"SQLite {sqlite3.sqlite_version}: workspace rows by URI index, titles by FTS5 trigram index"
                f" (queries under {title_index.MIN_INDEXED_QUERY} characters read the workspace's rows)"
            )
        return (
            f"SQLite: workspace rows by URI index; no title index ({self._titles_missing}):"
            " lookups read the workspace's rows"
        )

    def all(self) -> list[main.Note]:
        """Every note, in id order (for tests, the benchmark and admin views)."""
        rows = self._read("SELECT id, title, uri, revision FROM notes ORDER BY id")
        return [note for note in map(stores.stored_note, rows) if note is not None]

    # ---------------------------------------------------------------- writes

    def put(self, note: main.Note) -> None:
        """Insert or replace a note (an edit by another actor; used to show the re-check)."""
        stores.check_note(note)
        note = note._replace(uri=stores.normalize_file_uri(note.uri))
        with self._transaction() as conn:
            # DELETE then INSERT, not INSERT OR REPLACE: a REPLACE deletes without firing
            # the trigger that drops the old title from the index.
            conn.execute("DELETE FROM notes WHERE id = ?", (note.id,))
            conn.execute("INSERT INTO notes (id, title, uri, revision, folded) VALUES (?, ?, ?, ?, ?)", _row(note))

    def remove(self, note_id: str) -> None:
        """Delete a note outside any confirmation (another actor; used to show the re-check)."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM notes WHERE id = ?", (note_id,))

    # ---------------------------------------------------------------- note texts (code/note_bodies.py)

    def note_text(self, note_id: str, workspace: main.Path) -> tuple[main.Note, str] | None:
        """The note `note_id` and its text, as stored now (the reader connection; the caller checks the workspace)."""
        rows = self._read(f"{_TEXT_ROW} WHERE id = ?", (note_id,))
        return note_bodies.note_with_body(rows[0]) if rows else None

    def search_text(
        self, workspace: main.Path, query: str, limit: int, offset: int = 0
    ) -> tuple[list[tuple[main.Note, str]], bool]:
        """Notes strictly inside `workspace` holding every term of `query`, ranked, `limit` from `offset`; True when
        MAX_RANKED_ROWS was met."""
        parsed = text_index.parse(query)
        if not parsed.terms:
            return [], False
        low, high = title_index.uri_range(workspace)
        bound = text_index.MAX_RANKED_ROWS
        matched = parsed.indexed() if self._titles else []
        if matched:
            hits, first = _HITS_INDEXED, [text_index.fts_match(matched), bound + 1]
        else:
            # Only short terms (or no FTS5): the workspace's rows themselves, as many as the bound.
            hits, first = _HITS_SCANNED, [low, high, bound + 1]
        tested = [t for t in parsed.terms if t not in matched]
        sql = _RANKED.format(
            hits=hits,
            titled=" AND ".join(["instr(n.folded, ?) > 0"] * len(parsed.terms)),
            score=text_index.score_sql(len(parsed.terms), "n.folded", "coalesce(n.body_folded, '')", "?"),
            short="".join(" AND (instr(n.folded, ?) > 0 OR instr(n.body_folded, ?) > 0)" for _ in tested),
        )
        ranked = self._read(
            sql,
            (
                *first,
                bound,
                *parsed.terms,
                *[t for t in parsed.terms for _ in range(3)],
                low,
                high,
                *[v for t in tested for v in (t, t)],
                offset + limit,
            ),
        )
        examined = ranked[0][3] if ranked else self._read(f"SELECT count(*) FROM ({hits})", tuple(first))[0][0]
        unindexed = self._read(_UNINDEXED, (bound + 1,))
        page = text_index.page_of(
            ((str(i), t, -float(sc)) for i, t, sc, _ in ranked), unindexed, parsed, workspace, offset, limit
        )
        rows: dict[object, tuple[object, ...]] = {}
        if page:
            marks = ", ".join("?" * len(page))
            rows = {row[0]: row for row in self._read(f"{_TEXT_ROW} WHERE id IN ({marks})", tuple(page))}
        found = [note_bodies.note_with_body(rows.get(note_id)) for note_id in page]
        return [hit for hit in found if hit is not None and main.inside_workspace(hit[0], workspace)], bool(
            examined > bound
        )


def side_identities(path: str) -> tuple[tuple[int, int] | None, ...]:
    """(device, inode) of the database's -wal and -shm files now (None where absent)."""
    return tuple(_identity(path + suffix) for suffix in SIDE_FILES)


def store_id(conn: sqlite3.Connection) -> str | None:
    """The random id this database was given when first opened by this version (meta 'store_id')."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
    return row[0] if row is not None else None


def _size(path: str) -> int:
    """The size of the file at `path` now (0 when nothing is there)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


SHRUNK, UNWRITABLE = "shrunk", "unwritable"  # what _shm_trouble finds


def _shm_trouble(path: str, identity: tuple[int, int] | None, size: int) -> str | None:
    """SHRUNK or UNWRITABLE when `path` is still the file `identity` names and is smaller than `size` or not writable;
    else None."""
    # Removed or replaced is another check's business (and harmless to the map of the old file).
    try:
        info = os.stat(path)
    except OSError:
        return None
    if (info.st_dev, info.st_ino) != identity:
        return None
    if info.st_size < size:
        return SHRUNK
    # access() refuses writing an immutable file even to root (who may write any mode).
    return None if os.access(path, os.W_OK) else UNWRITABLE


def _abandon(*conns: sqlite3.Connection) -> None:
    """Keep `conns` open for the rest of the process: never closed, not even as the interpreter exits."""
    # At exit the interpreter frees what it still holds, and freeing a connection closes
    # it. One reference that is never given back keeps these out of that.
    for conn in conns:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(conn))


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file at `path` now, or None when nothing is there."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def open_store(
    path: str,
    *,
    clock: Callable[[], float],
    seed_notes: Iterable[main.Note] | None = None,
    max_per_principal: int = main.MAX_REPLAY_PER_PRINCIPAL,
    busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    retention: audit.Retention = audit.Retention(),
) -> SqliteNotesStore:
    """Open (or create and seed) the database at `path`, or raise stores.StoreError with one line.

    `seed_notes` are inserted only when this call creates the schema. An existing
    database is never re-seeded, not even when its notes table is empty: that would
    bring back notes users deleted, on every restart.
    """
    return _open(
        path,
        SqliteNotesStore,
        clock=clock,
        seed_notes=seed_notes,
        max_per_principal=max_per_principal,
        busy_timeout_ms=busy_timeout_ms,
        retention=retention,
    )


D = TypeVar("D", bound=SqliteDatabase)


def _open(
    path: str,
    kind: type[D],
    *,
    clock: Callable[[], float],
    seed_notes: Iterable[main.Note] | None,
    max_per_principal: int,
    busy_timeout_ms: int,
    retention: audit.Retention,
) -> D:
    """open_store's work, for a database of `kind`."""
    if max_per_principal < 1:
        raise stores.StoreError("max_per_principal must be at least 1")
    if not isinstance(busy_timeout_ms, int) or busy_timeout_ms < 0:
        raise stores.StoreError("busy_timeout_ms must be a non-negative integer")
    seed = _checked_seed(seed_notes or [])
    # Every confirmation writes, so a read-only file would fail on the first accept;
    # refuse at start-up instead. Write bits are checked too because root ignores them:
    # an operator who made the file read-only did not mean "unless I am root".
    write_bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    if os.path.exists(path) and (not os.access(path, os.W_OK) or not os.stat(path).st_mode & write_bits):
        raise stores.StoreError(f"database {path} is read-only; the store must write to consume confirmations")
    path = os.path.abspath(path)  # compared by stat on every write: a later chdir must not matter
    try:
        conn = _connect(path, busy_timeout_ms)
    except sqlite3.Error as exc:
        raise stores.StoreError(f"cannot open database {path}: {exc}") from None
    reader = None
    try:
        deadline = time.monotonic() + busy_timeout_ms / 1000
        _prepare(conn, path, seed)
        mode = _switch_to_wal(conn, deadline)
        if mode != "wal":
            raise stores.StoreError(f"database {path} cannot use WAL mode (journal mode stays {mode!r})")
        # FULL: a commit is on disk before "deleted: true" is sent, so a power cut cannot
        # bring back a note the user was told is gone (or a confirmation already used).
        conn.execute("PRAGMA synchronous = FULL")
        reader = _connect(path, busy_timeout_ms)
        reader.execute("PRAGMA query_only = ON")
        reader.execute("SELECT 1 FROM meta LIMIT 1").fetchall()  # a first read creates the -wal and -shm files
        return kind(
            path,
            conn,
            reader,
            clock=clock,
            max_per_principal=max_per_principal,
            busy_timeout_ms=busy_timeout_ms,
            retention=retention,
        )
    except (stores.StoreError, sqlite3.Error) as exc:
        for opened in (reader, conn):
            if opened is not None:
                opened.close()
        if isinstance(exc, stores.StoreError):
            raise
        raise stores.StoreError(_describe(path, exc, busy_timeout_ms)) from None


def open_ledger(
    path: str,
    *,
    clock: Callable[[], float],
    max_per_principal: int = main.MAX_REPLAY_PER_PRINCIPAL,
    busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    retention: audit.Retention = audit.Retention(),
) -> ledger.SqlLedger:
    """The ledger in an SQLite file of its own (the folder store's confirmation database), or stores.StoreError with
    one line.

    The file has the notes store's schema (its notes table stays empty), so one file may be
    opened as either, by any version of the server.
    """
    return _open(
        path,
        SqliteDatabase,
        clock=clock,
        seed_notes=None,
        max_per_principal=max_per_principal,
        busy_timeout_ms=busy_timeout_ms,
        retention=retention,
    ).ledger


def _switch_to_wal(conn: sqlite3.Connection, deadline: float) -> str:
    """`PRAGMA journal_mode = WAL`, tried again until `deadline` while another connection holds the file; the mode it
    reports."""
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            # Two instances starting on one new file: while the other holds its write
            # lock, SQLite answers "locked" at once instead of calling the busy handler
            # (waiting could deadlock), so the wait the budget promises happens here.
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(WAL_RETRY_SECONDS)


def _connect(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """An autocommit connection usable from any thread (each store guards its own with a lock)."""
    conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    # Sorts and temporary tables that outgrow the cache spill to memory, not to a file in
    # /var/tmp or /tmp: the sandbox (code/sandbox.py) lets the process write nowhere else.
    conn.execute("PRAGMA temp_store = MEMORY")
    return conn


def _checked_seed(notes: Iterable[main.Note]) -> list[main.Note]:
    """Seed notes validated as every store validates them (stores.checked_notes); stores.StoreError if not."""
    try:
        return stores.checked_notes(notes)
    except ValueError as exc:
        raise stores.StoreError(f"seed notes: {exc}") from None


def _prepare(conn: sqlite3.Connection, path: str, seed: list[main.Note]) -> None:
    """Create and seed a new database, or check an existing one's schema version; one transaction."""
    # IMMEDIATE, so two instances starting together on a new file cannot both create it.
    conn.execute("BEGIN IMMEDIATE")
    try:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            _add_store_id(conn)
            if trigram_support() is None:
                for statement in _TITLES:
                    conn.execute(statement)
            conn.executemany(
                "INSERT INTO notes (id, title, uri, revision, folded) VALUES (?, ?, ?, ?, ?)", map(_row, seed)
            )
            _audit_tables(conn)
            _add_bodies(conn)
            _check_search_index(conn, path)
            conn.execute("COMMIT")
            return
        # Never guess at a layout we did not write: a newer schema may mean something else.
        row = None
        if "meta" in tables:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            raise stores.StoreError(f"database {path} is an SQLite file but not a notes store (no schema version)")
        if row[0] not in ("1", "2", "3", "4", str(SCHEMA_VERSION)):
            raise stores.StoreError(
                f"database {path} has schema version {str(row[0])[:20]!r};"
                f" this server reads version {SCHEMA_VERSION} only"
            )
        if row[0] != str(SCHEMA_VERSION):
            try:
                _migrate(conn, row[0])
                _audit_tables(conn)  # the trash gains its body column in version 4's step
                if row[0] != "4":
                    _add_bodies(conn)
                conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
            except sqlite3.Error as exc:
                # Rolled back below: the file is as it was, and says why in one line.
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise stores.StoreError(
                    f"database {path} (schema version {row[0]}) cannot be migrated to version {SCHEMA_VERSION}"
                    f" ({reason}); it was left unchanged"
                ) from None
        _check_titles(conn, path)
        _audit_tables(conn)
        _check_search_index(conn, path)
        _add_store_id(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _row(note: main.Note) -> tuple[object, ...]:
    """The notes row for `note`: its four fields and the folded title the indexes keep."""
    return (note.id, note.title, note.uri, note.revision, title_index.index_key(note))


def _migrate(conn: sqlite3.Connection, version: str) -> None:
    """Bring a version 1, 2 or 3 database to version 3, inside the caller's transaction (version 4's step is
    _add_bodies, 5's _check_search_index)."""
    if version in ("3", "4"):
        return
    if version == "1":
        for statement in _HIGH_WATER:
            conn.execute(statement)
    conn.execute("ALTER TABLE notes ADD COLUMN folded TEXT")
    rows = conn.execute("SELECT rowid, id, title, uri, revision FROM notes").fetchall()
    conn.executemany(
        "UPDATE notes SET folded = ? WHERE rowid = ?",
        [(title_index.index_key(main.Note(*row[1:])), row[0]) for row in rows],
    )
    for statement in _LOOKUP:
        conn.execute(statement)


def _add_bodies(conn: sqlite3.Connection) -> None:
    """Version 4: note bodies, and a body column in the trash (the caller's transaction); records the version."""
    for statement in _BODIES:
        conn.execute(statement)
    columns = {name for (_, name, *_rest) in conn.execute("PRAGMA table_info(deleted_notes)")}
    if "body" not in columns:  # the trash of a database from before version 4
        conn.execute("ALTER TABLE deleted_notes ADD COLUMN body TEXT")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def _check_search_index(conn: sqlite3.Connection, path: str) -> None:
    """Build the search index when this SQLite can and the file lacks it (dropping version 4's body index)."""
    _check_index(conn, path, "note_search", "search", _SEARCH_INDEX)


def _check_titles(conn: sqlite3.Connection, path: str) -> None:
    """Build the title index when this SQLite can and the file lacks it; refuse one this SQLite cannot keep."""
    _check_index(conn, path, "note_titles", "title", _TITLES)


def _check_index(conn: sqlite3.Connection, path: str, table: str, what: str, statements: tuple[str, ...]) -> None:
    """Build the FTS5 trigram index `table` when this SQLite can and the file lacks it; refuse one this SQLite cannot
    keep."""
    present = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone() is not None
    missing = trigram_support()
    if present and missing is not None:
        # Its triggers would fail every write to the notes table.
        raise stores.StoreError(f"database {path} has an FTS5 trigram {what} index, but {missing}")
    if not present and missing is None:
        for statement in statements:
            conn.execute(statement)


def _audit_tables(conn: sqlite3.Connection) -> None:
    """The ledger's tables (code/ledger.py), added to a database that lacks them (older servers ignore them)."""
    ledger.add_tables(
        conn, ledger.SQLITE, lambda table: [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    )


def _add_store_id(conn: sqlite3.Connection) -> None:
    """Give the database a random id once (kept ever after; a copy of the file shares it)."""
    import secrets

    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', ?)", (secrets.token_hex(16),))


def _describe(path: str, exc: sqlite3.Error, busy_timeout_ms: int) -> str:
    """One line for an SQLite failure at start-up."""
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "not a database" in reason:
        return f"database {path} is not an SQLite database ({reason})"
    if "locked" in reason or "busy" in reason:
        return f"database {path} is locked by another process (waited {busy_timeout_ms} ms)"
    if "readonly" in reason or "read-only" in reason:
        return f"database {path} is read-only; the store must write to consume confirmations"
    return f"cannot use database {path}: {reason}"
