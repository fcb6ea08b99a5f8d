"""The notes store over one SQLite database, shared by any number of server processes.

Exercises one and three of the lesson, built for real: the notes and the consumed
confirmations live in one database file, and `consume` claims the nonce, re-reads the
chosen note, re-checks it and deletes it in ONE `BEGIN IMMEDIATE` transaction. The HMAC
on requestState proves a confirmation was issued by us; only this transaction proves it
is used once, because it is the one place every instance must pass through in turn.

    store = open_store("notes.db", clock=time.time, seed_notes=main.lesson_notes())
    server = main.notes_server(keys=[key], notes=store, policy=policy)

Schema (version SCHEMA_VERSION, recorded in the `meta` table):

    meta(key PRIMARY KEY, value)                     -- ("schema_version", "2"), ("store_id", random hex)
    notes(id PRIMARY KEY, title, uri, revision)      -- uri is the canonical file URI
    consumed_nonces(nonce PRIMARY KEY, principal, expires_at)
    index consumed_by_principal(principal, expires_at)  -- the replay bound, in SQL
    index consumed_by_expiry(expires_at)                -- bounded pruning
    high_water(one = 1, seen)                        -- highest clock reading committed (v2)

Threading: a writer connection behind one lock, a reader connection behind another
(see SqliteNotesStore). Call close() at shutdown: it checkpoints the WAL into the file.
Standard library only.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import main
import stores

SCHEMA_VERSION = 2
BUSY_TIMEOUT_MS = 5000  # one write's whole wait: for this process's other writers and for other instances
PRUNE_BATCH = 64  # expired nonces deleted per consume(): bounded work, still drains faster than one insert a call

# Version 2 added this table; a version 1 database gains it when first opened.
_HIGH_WATER = (
    "CREATE TABLE high_water (one INTEGER PRIMARY KEY CHECK (one = 1), seen REAL NOT NULL)",
    "INSERT INTO high_water (one, seen) VALUES (1, 0)",
)

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # CHECKs keep a hand-edited row from reaching the server as a non-string title or id.
    "CREATE TABLE notes ("
    " id TEXT PRIMARY KEY CHECK (typeof(id) = 'text' AND length(id) BETWEEN 1 AND %d),"
    " title TEXT NOT NULL CHECK (typeof(title) = 'text' AND length(trim(title)) > 0),"
    " uri TEXT NOT NULL CHECK (typeof(uri) = 'text'),"
    " revision INTEGER NOT NULL CHECK (typeof(revision) = 'integer'))" % main.MAX_NOTE_ID_LENGTH,
    "CREATE TABLE consumed_nonces ("
    " nonce TEXT PRIMARY KEY CHECK (typeof(nonce) = 'text'),"
    " principal TEXT NOT NULL,"
    " expires_at REAL NOT NULL)",
    "CREATE INDEX consumed_by_principal ON consumed_nonces (principal, expires_at)",
    "CREATE INDEX consumed_by_expiry ON consumed_nonces (expires_at)",
    *_HIGH_WATER,
)


class StoreError(Exception):
    """The database cannot be used (start-up failure); the message is one line for the operator."""


class StoreBusy(stores.StoreUnavailable):
    """Another writer held the database past this write's budget: nothing changed, a retry may succeed."""

    def __init__(self) -> None:
        super().__init__("The notes database is busy; nothing was changed. Try again in a moment.")


class StoreGone(stores.StoreLost):
    """The database file was unlinked or replaced while serving: every later mutation is refused."""

    def __init__(self) -> None:
        super().__init__("The notes database file was removed or replaced while serving; refusing every change.")


class StoreWriteFailed(stores.StoreUnavailable):
    """A write failed in the OS (read-only, I/O error, disk full): rolled back, the writer reopened; a retry may succeed."""

    def __init__(self) -> None:
        super().__init__("The notes database could not be written; nothing was changed. Try again in a moment.")


class StoreBroken(stores.StoreLost):
    """A write failed and the database could not be reopened: every later mutation is refused."""

    def __init__(self) -> None:
        super().__init__("The notes database could not be written or reopened while serving; refusing every change.")


# Primary result codes (sqlite3.Error.sqlite_errorcode & 0xFF) for a write the OS refused,
# which a reopened connection may well complete once the cause is gone ...
_WRITE_FAILURES = frozenset({sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN})
# ... and for a file that is no longer the database this store opened (overwritten in place).
_NOT_OURS = frozenset({sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT})
SIDE_FILES = ("-wal", "-shm")  # checked like the database file itself while serving
_KEPT_OPEN: list[sqlite3.Connection] = []  # connections over a -shm that could not be restored


class SqliteNotesStore:
    """main.NotesStore over one SQLite file in WAL mode: a writer connection and a reader connection.

    Writes share one connection behind one lock: SQLite admits one writer at a time
    anyway, and the lock stops two threads from interleaving statements in one
    transaction. Each write has ONE budget (busy_timeout_ms) covering both its wait for
    that lock and SQLite's wait for another instance's transaction, so writers queued
    behind a stalled instance all fail with StoreBusy after about one budget, not one
    budget each in turn. Reads use their own connection and lock: in WAL mode a reader
    never needs the write lock, so a stalled writer elsewhere delays no lookup.
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
    ) -> None:
        self._path = path
        self._conn = writer
        self._reader = reader
        self._clock = clock
        self._limit = max_per_principal
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
        self._broken = False  # lost because the writer could not be reopened
        self._shm_shrunk = False  # lost because the -shm file shrank under us: no read or write touches it again
        self._shm_cut = False  # ... and it could not be grown back: its map must never be touched again
        self._closed = False
        # TEST-ONLY: called as hook(stage) with the write lock held: "waiting" just before
        # BEGIN IMMEDIATE, "claimed" after the nonce insert and "deleted" after the
        # deletion (the row, or the Markdown store's unlink), both before COMMIT.
        # The crash tests pause here and SIGKILL the process. None (the default) in service.
        self._inside_transaction_hook: Callable[[str], None] | None = None

    # ---------------------------------------------------------------- reads

    def _read(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        """Rows from the reader connection; never waits for the write lock."""
        with self._read_lock:
            self._check_shm()
            try:
                return self._reader.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                if getattr(exc, "sqlite_errorcode", -1) & 0xFF in _NOT_OURS:
                    self._gone = True  # overwritten in place: the bytes are not the database we opened
                    raise StoreGone() from None
                raise

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """Notes strictly inside `workspace` whose title contains `title` (casefolded), sorted."""
        rows = self._read("SELECT id, title, uri, revision FROM notes")
        # The memory store's match, split in two: the title test first (cheap, and in Python so it
        # casefolds like the memory store), so only matching rows are parsed and validated;
        # then main's component-wise containment, never a SQL LIKE prefix (`.../Notes%`
        # would also match the look-alike folder `.../Notes-evil`).
        needle = main.fold_title(title)
        shown = (stores.stored_note(row) for row in rows if isinstance(row[1], str) and needle in main.fold_title(row[1]))
        found = [note for note in shown if note is not None and main.inside_workspace(note, workspace)]
        return main.form_order(found)

    def is_consumed(self, nonce: str) -> bool:
        """True when this confirmation was consumed by any instance and not yet pruned."""
        return bool(self._read("SELECT 1 FROM consumed_nonces WHERE nonce = ?", (nonce,)))

    def all(self) -> list[main.Note]:
        """Every note, in id order (for tests, the benchmark and admin views)."""
        rows = self._read("SELECT id, title, uri, revision FROM notes ORDER BY id")
        return [note for note in map(stores.stored_note, rows) if note is not None]

    # ---------------------------------------------------------------- writes

    def put(self, note: main.Note) -> None:
        """Insert or replace a note (an edit by another actor; used to show the re-check)."""
        main.check_note(note)
        note = note._replace(uri=main.normalize_file_uri(note.uri))
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO notes (id, title, uri, revision) VALUES (?, ?, ?, ?)",
                (note.id, note.title, note.uri, note.revision),
            )
            conn.execute("COMMIT")

    def remove(self, note_id: str) -> None:
        """Delete a note outside any confirmation (another actor; used to show the re-check)."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM notes WHERE id = ?", (note_id,))
            conn.execute("COMMIT")

    def consume(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """One transaction: claim the nonce; for `target` (id, version) re-read, re-check, delete."""
        return self.consume_with(principal, nonce, expires_at, lambda: self._delete_row(target, recheck))


    def consume_with(
        self, principal: str, nonce: str, expires_at: float, act: Callable[[], main.Settlement]
    ) -> main.Settlement:
        """One BEGIN IMMEDIATE transaction: claim the nonce, run `act` (re-check, delete), COMMIT.

        `act` runs only after a successful claim, inside the transaction and under the
        lock; it returns CONSUMED, CHANGED or DELETED, or raises to roll everything back.
        The Markdown folder store passes an `act` that unlinks a file, so its nonce
        shares this table and this transaction. Raises StoreBusy or StoreGone, nothing written.
        """
        with self._transaction() as conn:
            claim = self._claim(principal, nonce, expires_at)
            if claim is not main.ClaimOutcome.OK:
                # USED and FULL write nothing, not even the pruning: a refusal mutates nothing.
                return main.Settlement.USED if claim is main.ClaimOutcome.USED else main.Settlement.FULL
            self._pause("claimed")
            outcome = act()
            if outcome is main.Settlement.DELETED:
                self._pause("deleted")
            conn.execute("COMMIT")
            return outcome

    def _claim(self, principal: str, nonce: str, expires_at: float) -> main.ClaimOutcome:
        conn = self._conn
        # A clock stepped back (NTP, a VM restored, another instance's skewed clock) would
        # make a pruned nonce look unexpired again, and its replay would be accepted. So
        # time never runs backwards here: the highest reading any instance committed is
        # kept in the database, and it is committed with every prune that relied on it.
        (seen,) = conn.execute("SELECT seen FROM high_water").fetchone()
        now = max(float(seen), self._clock())
        conn.execute("UPDATE high_water SET seen = ?", (now,))
        conn.execute(
            "DELETE FROM consumed_nonces WHERE nonce IN"
            " (SELECT nonce FROM consumed_nonces WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
            (now, PRUNE_BATCH),
        )
        # A state verified just before its expiry may reach us just after it. Its record of
        # an earlier use may already be pruned, so an expired nonce is refused here, with
        # the clock reading that pruning used; otherwise a replay could slip in at the edge.
        if not now < expires_at:
            return main.ClaimOutcome.USED
        inserted = conn.execute(
            "INSERT INTO consumed_nonces (nonce, principal, expires_at) VALUES (?, ?, ?) ON CONFLICT (nonce) DO NOTHING",
            (nonce, principal, expires_at),
        ).rowcount
        if inserted != 1:
            return main.ClaimOutcome.USED  # replay: another call, on any instance, committed it first
        # Without a bound one principal confirming in a loop grows the table without limit.
        # Counted in SQL over unexpired rows (this one included), so rows not yet pruned
        # never count and every instance enforces the same bound.
        (held,) = conn.execute(
            "SELECT COUNT(*) FROM consumed_nonces WHERE principal = ? AND expires_at > ?", (principal, now)
        ).fetchone()
        return main.ClaimOutcome.FULL if held > self._limit else main.ClaimOutcome.OK

    def _delete_row(self, target: tuple[str, str] | None, recheck: Callable[[main.Note], bool]) -> main.Settlement:
        if target is None:
            return main.Settlement.CONSUMED
        note_id, version = target
        row = self._conn.execute("SELECT id, title, uri, revision FROM notes WHERE id = ?", (note_id,)).fetchone()
        live = stores.stored_note(row) if row is not None else None
        # Time of check to time of use: the form was shown minutes ago; the note may have
        # been edited, moved out of the workspace, or the grant revoked since then.
        if live is None or live.version != version or not recheck(live):
            return main.Settlement.CHANGED
        self._conn.execute("DELETE FROM notes WHERE id = ?", (note_id,))
        return main.Settlement.DELETED

    def _pause(self, stage: str) -> None:
        if self._inside_transaction_hook is not None:
            self._inside_transaction_hook(stage)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """The write lock and BEGIN IMMEDIATE within one budget; rolled back unless the body COMMITs.

        Raises StoreBusy when the budget runs out first, StoreGone when the path no
        longer names the file this store opened; in both cases nothing was written.
        """
        deadline = time.monotonic() + self._budget
        if not self._lock.acquire(timeout=self._budget):
            raise StoreBusy()
        try:
            with self._write_errors():
                yield from self._locked_transaction(deadline)
        finally:
            self._lock.release()

    def _locked_transaction(self, deadline: float) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE within what is left of the budget, the checks, the body; the write lock held."""
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")  # its side files are gone too
        self._check_file()  # before BEGIN too: SQLite reports an unlinked file as a disk I/O error
        conn = self._conn
        # What is left of this write's budget is all SQLite may wait for another instance.
        conn.execute(f"PRAGMA busy_timeout = {max(0, int((deadline - time.monotonic()) * 1000))}")
        self._pause("waiting")
        try:
            conn.execute("BEGIN IMMEDIATE")  # the write lock first: every check below sees a frozen database
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                raise StoreBusy() from None
            raise
        try:
            self._check_file()  # again under the write lock: the file may have been swapped while we waited
            self._check_content()
            yield conn
        finally:
            # Half a deletion must never survive: the nonce goes with the note or not at all.
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    @contextmanager
    def _write_errors(self) -> Iterator[None]:
        """Map SQLite failures of a write: not our file -> StoreGone; refused by the OS -> reopen, StoreWriteFailed."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            code = getattr(exc, "sqlite_errorcode", -1) & 0xFF  # none on a closed connection's ProgrammingError
            if code in _NOT_OURS:
                self._gone = True
                raise StoreGone() from None
            if code not in _WRITE_FAILURES:
                raise
            # After a failed write (a full disk, an I/O error, a log made read-only) the
            # connection may stay unusable even once the cause is gone: every later accept
            # was -32603 with a traceback. A fresh writer, and a retryable answer.
            self._reopen()
            raise StoreWriteFailed() from None

    def _reopen(self) -> None:
        """Replace the writer connection (lock held); StoreBroken, for good, if that fails."""
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
            raise StoreBroken() from None

    def _check_file(self) -> None:
        """Raise StoreGone unless the path and its -wal and -shm still name the files opened (device and inode)."""
        # A database unlinked or replaced under a running server (a restore, a cleanup job,
        # `mv other.db notes.db`) would take this instance's commits where no other
        # instance sees them: confirmations consumed here could be replayed there. So
        # would a removed -wal or -shm: this instance keeps writing to the unlinked one
        # while another instance starts a new one, and each accepts what the other declined.
        if not self._gone and (_identity(self._path) != self._identity or side_identities(self._path) != self._side):
            self._gone = True
        self._check_shm()
        if self._gone:
            raise StoreBroken() if self._broken else StoreGone()

    def _check_shm(self) -> None:
        """Raise StoreGone if the -shm file shrank (truncated by someone else) before SQLite touches its map."""
        # SQLite memory-maps the -shm file: pages cut off by a truncation fault on the next
        # access (SIGBUS) and kill the process. Checked before every read and write; a
        # truncation between this check and the access is still a crash.
        if not self._shm_shrunk and _shrunk(self._path + "-shm", self._side[1], self._shm_size):
            self._shm_shrunk = self._gone = True
            # Zeros back up to the size SQLite mapped, so that closing the connections (at
            # exit, too) cannot fault: SQLite rebuilds that index from the -wal itself.
            try:
                os.truncate(self._path + "-shm", self._shm_size)
            except OSError:
                self._shm_cut = True  # then the connections are never closed (see close)
        if self._shm_shrunk:
            raise StoreGone()

    def _check_content(self) -> None:
        """Raise StoreGone unless the file still holds the store id read at open (write lock held)."""
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
            raise StoreGone()

    def close(self) -> None:
        """Checkpoint the WAL into the database file, then close; later calls do nothing."""
        with self._lock, self._read_lock:
            if self._closed:
                return
            self._closed = True
            if self._shm_cut:
                # Closing would touch the cut map (SIGBUS): kept open for the process's life.
                _KEPT_OPEN.extend((self._reader, self._conn))
                return
            try:
                # Until checkpointed, deletions live only in the -wal file: a copy of the
                # .db file alone (a naive backup) would still hold the deleted notes.
                # Not into a file that is no longer at the path: that -wal is another's now.
                # PASSIVE copies every frame no reader still needs and never waits, so an
                # instance shutting down beside others is not held for a busy timeout.
                if not self._gone and _identity(self._path) == self._identity:
                    self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            finally:
                self._reader.close()
                self._conn.close()


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


def _shrunk(path: str, identity: tuple[int, int] | None, size: int) -> bool:
    """True when `path` is still the file `identity` names and is now smaller than `size` (truncated)."""
    # Removed or replaced is another check's business (and harmless to the map of the old file).
    try:
        info = os.stat(path)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == identity and info.st_size < size


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
) -> SqliteNotesStore:
    """Open (or create and seed) the database at `path`, or raise StoreError with one line.

    `seed_notes` are inserted only when this call creates the schema. An existing
    database is never re-seeded, not even when its notes table is empty: that would
    bring back notes users deleted, on every restart.
    """
    if max_per_principal < 1:
        raise StoreError("max_per_principal must be at least 1")
    if not isinstance(busy_timeout_ms, int) or busy_timeout_ms < 0:
        raise StoreError("busy_timeout_ms must be a non-negative integer")
    seed = _checked_seed(seed_notes or [])
    # Every confirmation writes, so a read-only file would fail on the first accept;
    # refuse at start-up instead. Write bits are checked too because root ignores them:
    # an operator who made the file read-only did not mean "unless I am root".
    write_bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    if os.path.exists(path) and (not os.access(path, os.W_OK) or not os.stat(path).st_mode & write_bits):
        raise StoreError(f"database {path} is read-only; the store must write to consume confirmations")
    path = os.path.abspath(path)  # compared by stat on every write: a later chdir must not matter
    try:
        conn = _connect(path, busy_timeout_ms)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open database {path}: {exc}") from None
    reader = None
    try:
        _prepare(conn, path, seed)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal":
            raise StoreError(f"database {path} cannot use WAL mode (journal mode stays {mode!r})")
        # FULL: a commit is on disk before "deleted: true" is sent, so a power cut cannot
        # bring back a note the user was told is gone (or a confirmation already used).
        conn.execute("PRAGMA synchronous = FULL")
        reader = _connect(path, busy_timeout_ms)
        reader.execute("PRAGMA query_only = ON")
        reader.execute("SELECT 1 FROM meta LIMIT 1").fetchall()  # a first read creates the -wal and -shm files
        return SqliteNotesStore(
            path, conn, reader, clock=clock, max_per_principal=max_per_principal, busy_timeout_ms=busy_timeout_ms
        )
    except (StoreError, sqlite3.Error) as exc:
        for opened in (reader, conn):
            if opened is not None:
                opened.close()
        if isinstance(exc, StoreError):
            raise
        raise StoreError(_describe(path, exc, busy_timeout_ms)) from None


def _connect(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """An autocommit connection usable from any thread (each store guards its own with a lock)."""
    conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    # Sorts and temporary tables that outgrow the cache spill to memory, not to a file in
    # /var/tmp or /tmp: the sandbox (code/sandbox.py) lets the process write nowhere else.
    conn.execute("PRAGMA temp_store = MEMORY")
    return conn


def _checked_seed(notes: Iterable[main.Note]) -> list[main.Note]:
    """Seed notes validated as every store validates them (main.checked_notes); StoreError if not."""
    try:
        return main.checked_notes(notes)
    except ValueError as exc:
        raise StoreError(f"seed notes: {exc}") from None


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
            conn.executemany(
                "INSERT INTO notes (id, title, uri, revision) VALUES (?, ?, ?, ?)",
                [(note.id, note.title, note.uri, note.revision) for note in seed],
            )
            conn.execute("COMMIT")
            return
        # Never guess at a layout we did not write: a newer schema may mean something else.
        row = None
        if "meta" in tables:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            raise StoreError(f"database {path} is an SQLite file but not a notes store (no schema version)")
        if row[0] == "1":
            for statement in _HIGH_WATER:
                conn.execute(statement)
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        elif row[0] != str(SCHEMA_VERSION):
            raise StoreError(
                f"database {path} has schema version {str(row[0])[:20]!r}; this server reads version {SCHEMA_VERSION} only"
            )
        _add_store_id(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


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
