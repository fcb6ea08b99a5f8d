"""The notes store over one PostgreSQL database, shared by server instances on several hosts.

The same seam as code/sqlite_store.py, for when the instances do not share a disk: the
notes and the consumed confirmations live in one PostgreSQL database, and `consume`
claims the nonce, re-reads the chosen note, re-checks it and deletes it in ONE
transaction. The HMAC on requestState proves a confirmation was issued by us; only this
transaction proves it is used once.

    store = open_store("postgresql://notes@db.internal/notes", clock=time.time, seed_notes=main.lesson_notes())
    server = frame.notes_server(keys=[key], notes=store, policy=policy)

Schema (version SCHEMA_VERSION, recorded in the `meta` table):

    meta(key PRIMARY KEY, value)                      -- ("schema_version", "3")
    notes(id PRIMARY KEY, title, uri, revision, folded)  -- uri is the canonical file URI;
                                                      -- folded = stores.fold_title(title) (v2), NULL: scanned
    index notes_by_uri(uri COLLATE "C")               -- the workspace's rows, by URI range (v2)
    index notes_unindexed(id) WHERE folded IS NULL    -- rows written by another program (v2)
    index notes_by_title USING gin (folded gin_trgm_ops)  -- titles by substring, when pg_trgm is there
    consumed_nonces(nonce PRIMARY KEY, principal, expires_at)
    clock_high_water(only PRIMARY KEY, seen)          -- one row: the highest clock reading seen
    index consumed_by_principal(principal, expires_at)  -- the replay bound, in SQL
    index consumed_by_expiry(expires_at)                -- bounded pruning
    audit, deleted_notes                              -- as in code/sqlite_store.py (code/audit.py)
    notes.body, notes.body_folded                     -- a note's text and its folded form (v3, the note tools)
    index notes_body_unindexed(id) WHERE body_folded IS NULL AND body IS NOT NULL  -- bodies written elsewhere (v3)
    index notes_by_body USING gin (body_folded gin_trgm_ops)  -- bodies by substring, when pg_trgm is there

The nonces, the audit, the trash rows and the page's decisions are the store's ledger's
(code/ledger.py, `SqlLedger`), on this store's own transactions (`write_with`).

Every consume transaction starts by raising `clock_high_water.seen` to this host's clock
and using the result as "now". That row lock also puts every consume, on every host, in
one order, so the per-principal count and the expiry check never race each other.

Threading: a writer connection behind one lock and a reader connection behind another,
each reopened on the next call after it breaks; a read never waits behind a write (a
plain SELECT takes no row lock). Each write has one deadline, `lock_timeout_ms` from
when it is asked, covering its wait for the writer connection and PostgreSQL's wait for
a row lock. psycopg 3 is the only third-party import of the project, and only here.

Transactions follow the one rule of both SQL stores (code/stores.py): COMMIT when the
body returns, ROLLBACK when it raises; a refusal that writes nothing (USED, FULL)
raises stores.Rollback and is returned after the rollback. Errors are the classes of
code/stores.py only: StoreError at start-up, StoreBusy for what passes (a timeout, a
lock, a restart), bare StoreError for a database error it does not know.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import audit
import ledger
import main
import note_bodies
import stores
import text_index
import title_index

try:  # the optional dependency: `pip install .[postgres]`
    import psycopg
except ImportError:  # reported by open_store, so importing this module never fails
    psycopg = None  # type: ignore[assignment]

__all__ = ["open_store"]

T = TypeVar("T")

SCHEMA_VERSION = 3
PRUNE_BATCH = ledger.PRUNE_NONCES  # expired nonces deleted per claim (the ledger's bound)
STATEMENT_TIMEOUT_MS = 5000  # one statement; past it the call fails as stores.StoreBusy and rolls back
LOCK_TIMEOUT_MS = 2000  # waiting for a row another instance holds (a consume in flight)
IDLE_IN_TRANSACTION_TIMEOUT_MS = 10_000  # the server aborts a transaction whose host went silent
CONNECT_TIMEOUT_SECONDS = 5  # reaching the server at all
KEEPALIVE_IDLE_SECONDS = 10  # TCP keepalives: notice a server host that vanished
INSTALL_HINT = (
    "psycopg 3 is not installed; run: pip install 'psycopg[binary]>=3.2'"
    "  (or, in a checkout: pip install '.[postgres]')"
)
BUSY_MESSAGE = "The notes database is busy; nothing was changed. Try again."
UNREACHABLE_MESSAGE = "The notes database cannot be reached right now. Try again shortly."
UNCHECKED_ENCODING = "SQL_ASCII"  # a database encoding refused at start-up (_check_encoding)
_SCHEMA_LOCK = 0x6E6F7465  # advisory lock key taken while creating the schema ("note")

_SCHEMA = (
    "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
    # CHECKs keep a hand-edited row from reaching the server as an empty title or long id.
    "CREATE TABLE notes ("
    f" id text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND {stores.MAX_NOTE_ID_LENGTH}),"
    " title text NOT NULL CHECK (length(btrim(title)) > 0),"
    " uri text NOT NULL,"
    " revision bigint NOT NULL,"
    " folded text)",
    "CREATE TABLE consumed_nonces ("
    " nonce text PRIMARY KEY,"
    " principal text NOT NULL,"
    " expires_at double precision NOT NULL)",
    "CREATE INDEX consumed_by_principal ON consumed_nonces (principal, expires_at)",
    "CREATE INDEX consumed_by_expiry ON consumed_nonces (expires_at)",
    "CREATE TABLE clock_high_water (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),"
    " seen double precision NOT NULL)",
    "INSERT INTO clock_high_water (seen) VALUES (0)",
)
_OUR_TABLES = ("meta", "notes", "consumed_nonces", "clock_high_water")
# Version 2 added the lookup indexes. A row another program inserts has no folded title
# (NULL), and one whose title or URI another program changes loses it: such rows are read
# by every lookup (notes_unindexed) and tested exactly, so they are never missed.
_LOOKUP = (
    'CREATE INDEX notes_by_uri ON notes (uri COLLATE "C")',
    "CREATE INDEX notes_unindexed ON notes (id) WHERE folded IS NULL",
    "CREATE FUNCTION notes_edited_elsewhere() RETURNS trigger LANGUAGE plpgsql AS"
    " $$ BEGIN IF NEW.folded IS NOT DISTINCT FROM OLD.folded THEN NEW.folded := NULL; END IF; RETURN NEW; END $$",
    "CREATE TRIGGER notes_edited_elsewhere BEFORE UPDATE OF title, uri ON notes"
    " FOR EACH ROW EXECUTE FUNCTION notes_edited_elsewhere()",
)
_TITLES = "CREATE INDEX IF NOT EXISTS notes_by_title ON notes USING gin (folded gin_trgm_ops)"
# Version 3 added note bodies (the opt-in note tools, code/notes_tools.py), a step of its
# own after version 2's. A body another program writes, or changes, without its folded
# form is read by every search (notes_body_unindexed), never missed.
_BODIES = (
    "ALTER TABLE notes ADD COLUMN body text",
    "ALTER TABLE notes ADD COLUMN body_folded text",
    "CREATE INDEX notes_body_unindexed ON notes (id) WHERE body_folded IS NULL AND body IS NOT NULL",
    "CREATE FUNCTION notes_body_edited_elsewhere() RETURNS trigger LANGUAGE plpgsql AS"
    " $$ BEGIN IF NEW.body_folded IS NOT DISTINCT FROM OLD.body_folded THEN NEW.body_folded := NULL; END IF;"
    " RETURN NEW; END $$",
    "CREATE TRIGGER notes_body_edited_elsewhere BEFORE UPDATE OF body ON notes"
    " FOR EACH ROW WHEN (NEW.body IS DISTINCT FROM OLD.body) EXECUTE FUNCTION notes_body_edited_elsewhere()",
    "ALTER TABLE deleted_notes ADD COLUMN IF NOT EXISTS body text",
)
# fastupdate off: GIN's pending list (up to 4 MB of entries not yet merged) is read whole
# by every search until a vacuum merges it; a note's write is one row, a search must not
# depend on when autovacuum last ran.
_BODY_INDEX = (
    "CREATE INDEX IF NOT EXISTS notes_by_body ON notes USING gin (body_folded gin_trgm_ops) WITH (fastupdate = off)"
)
# Searches (the note tools, code/text_index.py). The candidates: rows of the workspace's URI
# range holding every piece the index is asked for (text_index.Query.indexed: the words,
# a phrase by its words) in the title or the body, each `LIKE` served by its pg_trgm index
# and exact (LIKE is the substring test), at most MAX_RANKED_ROWS + 1 of them; then the
# other terms' test (short terms, phrases), the title test and a score inside SQL over
# those rows, ordered, LIMIT. Only ids leave SQL here: the bodies of the rows returned are
# read afterwards, by id. (`uri || ''` is no indexed expression: given the range, the
# planner read the whole workspace, 15 ms at 100,000 notes.) The score is
# text_index.score_sql's, as in the other stores.
_CANDIDATES = (
    "SELECT id, folded, body_folded FROM {source}"
    " WHERE (uri || '') COLLATE \"C\" >= %s AND (uri || '') COLLATE \"C\" < %s"
    " AND folded IS NOT NULL AND (body_folded IS NOT NULL OR body IS NULL){terms} LIMIT %s"
)
# The rows examined, when the ranked page is empty.
_COUNT = f"SELECT count(*) FROM ({_CANDIDATES}) AS hits"
# One row past the bound is fetched only to learn that the bound was met: `kept` is the
# materialized rows in their order without it.
_RANKED = (
    f"WITH hits AS MATERIALIZED ({_CANDIDATES}), kept AS (SELECT * FROM hits LIMIT %s)"
    " SELECT id, ({titled}) AS titled, ({score}) AS score, (SELECT count(*) FROM hits) FROM kept WHERE TRUE{tested}"
    ' ORDER BY titled DESC, score DESC, id COLLATE "C" LIMIT %s'
)
_TERM = " AND (folded LIKE %s OR body_folded LIKE %s)"
# A word most notes hold: the GIN index's bitmap holds every row with its trigrams
# (100,000) before LIMIT can stop, 32 ms. So a search first reads the workspace's first
# rows in URI order (its B-tree; a LIMIT in a subquery, so no filter is pushed into it
# and no bitmap is built); when MAX_RANKED_ROWS + 1 of them match, those are its
# candidates, and the bound was met. Otherwise the GIN query runs as before, so a rarer
# word's result is the same as without this first read.
_FIRST_ROWS = (
    '(SELECT * FROM notes WHERE uri COLLATE "C" >= %s AND uri COLLATE "C" < %s'
    ' ORDER BY uri COLLATE "C" LIMIT %s) AS notes'
)
FIRST_ROWS_PER_BOUND = (
    4  # rows read first per row of the bound: a word in a quarter of them meets the bound without the GIN index
)
_TEXT_ROW = "SELECT id, title, uri, revision, body FROM notes"
# Rows another program wrote without their folded forms: tested in Python (they cannot be folded in SQL).
_UNINDEXED = (
    f"{_TEXT_ROW} WHERE folded IS NULL UNION {_TEXT_ROW} WHERE body_folded IS NULL AND body IS NOT NULL LIMIT %s"
)
_ROW = "SELECT id, title, uri, revision FROM notes"
# The planner picks the URI range (B-tree, byte order) or the title's trigrams (GIN) or
# both; LIKE is re-checked on every row it returns, so the index only narrows.
_LOOKUP_QUERY = (
    f'{_ROW} WHERE uri COLLATE "C" >= %s AND uri COLLATE "C" < %s AND folded LIKE %s'
    f" UNION ALL {_ROW} WHERE folded IS NULL"
)
# Long queries: `folded LIKE '%abc%'` for the query's two rarest trigrams is what the GIN
# index is asked (one trigram each to pg_trgm; the whole query would make it read the
# long lists of its common trigrams, 14 ms at 100,000 titles), and the whole query is a
# filter on the rows they return (`folded || ''` is no indexed expression).
_BY_TITLE = (
    f'{_ROW} WHERE uri COLLATE "C" >= %s AND uri COLLATE "C" < %s AND folded LIKE %s AND folded LIKE %s'
    " AND (folded || '') LIKE %s"
    f" UNION ALL {_ROW} WHERE folded IS NULL"
)
QUERY_TRIGRAMS = 2  # the rarest trigrams of a query the title index is asked for (any of them finds every match)
TRIGRAM_COUNTS_SECONDS = 600.0  # how long the counts that rank a query's trigrams are used before being sampled again
TRIGRAM_SAMPLE_TITLES = 10_000  # titles sampled (TABLESAMPLE SYSTEM) to rank trigrams, at most
TRIGRAM_COUNTS_KEPT = 10_000  # the most common trigrams of the sample whose counts are kept; the others rank as rare
STALE_STATISTICS_FACTOR = 2  # rows past this many times the planner's count: ANALYZE before the counts are sampled


_BODY = note_bodies.BodySql(ledger.POSTGRES, " FOR UPDATE")


class PostgresNotesStore(note_bodies.SqlTexts, stores.SettleSeam[ledger.SqlLedger]):
    """stores.Store over one PostgreSQL database: a writer and a reader connection, each behind its own lock,
    reopened when broken.

    The nonces, the audit and the page's decisions are its ledger's (ledger.SqlLedger), on this store's own
    transactions.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        clock: Callable[[], float],
        max_per_principal: int,
        lock_timeout_ms: int = LOCK_TIMEOUT_MS,
        titles_missing: str | None = None,
        retention: audit.Retention = audit.Retention(),
    ) -> None:
        self._connect = connect
        self._titles_missing = titles_missing
        self._counts: dict[str, int] = {}
        self._counted_at = -float("inf")
        self.retention = retention  # the ledger's too: deletion mode, trash and audit bounds
        self.ledger = ledger.SqlLedger(self, ledger.POSTGRES, max_per_principal, retention)
        self.texts: stores.Texts | None = self
        self.body = _BODY
        self._conn: Any = None
        self._clock = clock
        self._lock = threading.Lock()
        # Reads on their own connection: with one connection for both, every lookup and
        # first call waited behind a write stuck on another host's row lock (3.7 s seen).
        self._reader: Any = None
        self._read_lock = threading.Lock()
        self._budget = lock_timeout_ms / 1000  # one write's whole wait, both locks together
        # TEST-ONLY: called as hook(stage) inside the consume transaction, after the nonce
        # insert ("claimed") and after the deletion ("deleted"), before COMMIT. The crash
        # tests pause here and SIGKILL the process. None (the default) in service.
        self._inside_transaction_hook: Callable[[str], None] | None = None

    def pause_inside_transaction(self, hook: Callable[[str], None] | None) -> None:
        """Call hook(stage) inside each consume transaction before COMMIT (demonstrations; None in service)."""
        self._inside_transaction_hook = hook

    # ---------------------------------------------------------------- reads

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """Notes strictly inside `workspace` whose title contains `title` (folded), sorted."""
        needle = stores.fold_title(title)
        low, high = title_index.uri_range(workspace)
        if self._titles_missing is None and title_index.uses_title_index(needle):
            grams = title_index.rarest(needle, self._trigram_counts(), QUERY_TRIGRAMS)
            sql, params = _BY_TITLE, (low, high, *map(_contains, (grams + grams)[:2]), _contains(needle))
        else:
            sql, params = _LOOKUP_QUERY, (low, high, _contains(needle))
        # Never prepared: a generic plan cannot see the pattern, and reads the table whole.
        rows = self._read(lambda conn: conn.execute(sql, params, prepare=False).fetchall())
        # The indexes narrow; the exact test decides (never a SQL LIKE on the URI string:
        # `.../Notes%` would also match the look-alike folder `.../Notes-evil`).
        return title_index.exact(rows, workspace, needle)

    def _trigram_counts(self) -> dict[str, int]:
        """Counts of the sample's TRIGRAM_COUNTS_KEPT most common trigrams, at most TRIGRAM_COUNTS_SECONDS old (they
        only rank; stale costs time)."""
        now = time.monotonic()
        if now - self._counted_at >= TRIGRAM_COUNTS_SECONDS:
            self._counts = dict(self._read(_sample_counts))
            self._counted_at = now
        return self._counts

    def describe(self) -> str:
        """One line for the start-up report: how lookups find rows."""
        if self._titles_missing is None:
            return (
                "PostgreSQL: workspace rows by URI index, titles by pg_trgm index"
                f" (queries under {title_index.MIN_INDEXED_QUERY} characters read the workspace's rows)"
            )
        return (
            f"PostgreSQL: workspace rows by URI index; no title index ({self._titles_missing}):"
            " lookups read the workspace's rows"
        )

    def all(self) -> list[main.Note]:
        """Every note, in id order (for tests, the benchmark and admin views)."""
        rows = self._read(
            lambda conn: conn.execute("SELECT id, title, uri, revision FROM notes ORDER BY id").fetchall()
        )
        return [note for note in map(stores.stored_note, rows) if note is not None]

    # ---------------------------------------------------------------- writes

    def put(self, note: main.Note) -> None:
        """Insert or replace a note (an edit by another actor; used to show the re-check)."""
        stores.check_note(note)
        note = note._replace(uri=stores.normalize_file_uri(note.uri))
        self._run(lambda conn: _replace(conn, note), transaction=True)

    def remove(self, note_id: str) -> None:
        """Delete a note outside any confirmation (another actor; used to show the re-check)."""
        self._run(lambda conn: conn.execute("DELETE FROM notes WHERE id = %s", (note_id,)))

    # ---------------------------------------------------------------- note bodies (code/note_bodies.py)

    def note_text(self, note_id: str, workspace: main.Path) -> tuple[main.Note, str] | None:
        """The note `note_id` and its text, as stored now (the reader connection; the caller checks the workspace)."""
        return self._read(lambda conn: _BODY.live(conn, note_id))

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
        patterns = [_contains(term) for term in parsed.terms]
        asked = [_contains(piece) for piece in parsed.indexed()]
        tested = [_contains(term) for term in parsed.tested()]
        shape = {
            "terms": _TERM * len(asked),
            "titled": " AND ".join(["folded LIKE %s"] * len(patterns)),
            "score": text_index.score_sql(len(patterns), "folded", "coalesce(body_folded, '')", "%s::text"),
            "tested": _TERM * len(tested),
        }
        candidates = (low, high, *[p for p in asked for _ in (0, 1)], bound + 1)
        params = (
            *candidates,
            bound,
            *patterns,
            *[t for t in parsed.terms for _ in range(3)],
            *[p for p in tested for _ in (0, 1)],
            offset + limit,
        )
        first_rows = (low, high, FIRST_ROWS_PER_BOUND * (bound + 1))

        def ranked_from(conn: Any, source: str, before: tuple[object, ...]) -> tuple[list[Any], int]:
            """The ranked rows of the candidates `source` gives, and how many candidates it gave (at most bound + 1)."""
            ranked = conn.execute(_RANKED.format(source=source, **shape), (*before, *params), prepare=False).fetchall()
            if ranked:
                return ranked, ranked[0][3]
            count = _COUNT.format(source=source, terms=shape["terms"])
            return ranked, conn.execute(count, (*before, *candidates), prepare=False).fetchone()[0]

        def work(conn: Any) -> tuple[int, list[Any]]:
            ranked, examined = ranked_from(conn, _FIRST_ROWS, first_rows)
            if examined <= bound:  # the first rows did not meet the bound: the GIN index finds them all
                ranked, examined = ranked_from(conn, "notes", ())
            unindexed = conn.execute(_UNINDEXED, (bound + 1,)).fetchall()
            page = text_index.page_of(
                ((i, t, -float(sc)) for i, t, sc, _ in ranked), unindexed, parsed, workspace, offset, limit
            )
            rows = conn.execute(f"{_TEXT_ROW} WHERE id = ANY(%s)", (page,)).fetchall() if page else []
            by_id = {row[0]: row for row in rows}
            return examined, [by_id.get(note_id) for note_id in page]

        examined, rows = self._read(work)
        found = [note_bodies.note_with_body(row) for row in rows]
        return [hit for hit in found if hit is not None and main.inside_workspace(hit[0], workspace)], examined > bound

    def now(self) -> float:
        """This store's clock."""
        return self._clock()

    def pause(self, stage: str) -> None:
        """Run the test-only hook at `stage` (nothing in service)."""
        if self._inside_transaction_hook is not None:
            self._inside_transaction_hook(stage)

    # ---------------------------------------------------------------- connection handling

    def write_with(self, work: Callable[[Any], T], durable: bool = False) -> T:
        """`work(conn)` in one write transaction of this store's (one deadline; every COMMIT is durable); psycopg
        failures become stores.StoreBusy."""
        return self._run(work, transaction=True)

    def read_with(self, work: Callable[[Any], T]) -> T:
        """`work(conn)` on the reader connection."""
        return self._read(work)

    def _read(self, work: Callable[[Any], Any]) -> Any:
        """Run `work(conn)` on the reader connection; never waits for a write; psycopg failures become
        stores.StoreBusy."""
        with self._read_lock:
            conn = self._reader = self._fresh(self._reader)
            try:
                return work(conn)
            except psycopg.Error as exc:
                raise self._busy(conn, exc) from None

    def _run(self, work: Callable[[Any], Any], *, transaction: bool = False) -> Any:
        """Run a write `work(conn)` within one deadline (inside BEGIN/COMMIT if asked); psycopg failures become
        stores.StoreBusy."""
        # Writes queued behind one stuck on another host's row lock each waited their own
        # lock_timeout in turn (failing at 2, 4, 6, 8 s): now every wait counts against
        # one deadline taken when the write is asked.
        deadline = time.monotonic() + self._budget
        if not self._lock.acquire(timeout=self._budget):
            raise stores.StoreBusy(BUSY_MESSAGE)
        try:
            conn = self._conn = self._fresh(self._conn)
            try:
                if not transaction:
                    return work(conn)
                conn.execute("BEGIN")
                left_ms = max(1, int((deadline - time.monotonic()) * 1000))
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (str(left_ms),))  # this transaction only
                try:
                    outcome = work(conn)
                except stores.Rollback:
                    conn.execute("ROLLBACK")  # a refusal that writes nothing: its outcome is the ledger's to return
                    raise
                except BaseException:
                    # Half a deletion must never survive: the nonce goes with the note or not at all.
                    if not (conn.closed or conn.broken):
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                return outcome
            except psycopg.Error as exc:
                raise self._busy(conn, exc) from None
        finally:
            self._lock.release()

    def _fresh(self, conn: Any) -> Any:
        """`conn` if usable, else a new connection (the broken one closed); stores.StoreBusy when none can be made."""
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        _close_quietly(conn)
        try:
            return self._connect()
        except psycopg.Error:
            raise stores.StoreBusy(UNREACHABLE_MESSAGE) from None

    def _busy(self, conn: Any, exc: Exception) -> Exception:
        """The exception to raise for a psycopg failure; a broken connection is dropped and reopened next call."""
        if conn.closed or conn.broken or isinstance(exc, psycopg.OperationalError) and _connection_lost(exc):
            self._discard(conn)
            return stores.StoreBusy(UNREACHABLE_MESSAGE)
        if isinstance(exc, psycopg.OperationalError):  # statement or lock timeout, serialization, shutdown
            try:
                if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.execute("ROLLBACK")
            except psycopg.Error:
                self._discard(conn)
            return stores.StoreBusy(BUSY_MESSAGE)
        # Anything else is a bug or a hand-edited database: not retryable, so not stores.StoreBusy.
        self._discard(conn)
        return stores.StoreError(f"notes database error {getattr(exc, 'sqlstate', None) or type(exc).__name__}")

    def _discard(self, conn: Any = None) -> None:
        """Close and forget `conn` (the writer when not given); the next call on it reconnects."""
        conn = self._conn if conn is None else conn
        _close_quietly(conn)
        if conn is self._conn:
            self._conn = None
        if conn is self._reader:
            self._reader = None

    def close(self) -> None:
        """Close both connections; later calls reconnect (the store itself has nothing else to free)."""
        with self._lock, self._read_lock:
            self._discard(self._conn)
            self._discard(self._reader)


def _close_quietly(conn: Any) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - a dead connection may fail to close; it is gone either way
            pass


def _contains(text: str) -> str:
    """A LIKE pattern true exactly when the value contains `text` (`%`, `_` and the escape are literal)."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _replace(conn: Any, note: main.Note) -> None:
    """DELETE then INSERT (inside the caller's transaction): the row and its folded title change together."""
    conn.execute("DELETE FROM notes WHERE id = %s", (note.id,))
    conn.execute("INSERT INTO notes (id, title, uri, revision, folded) VALUES (%s, %s, %s, %s, %s)", _row(note))


def _row(note: main.Note) -> tuple[object, ...]:
    """The notes row for `note`: its four fields and the folded title the indexes keep."""
    return (note.id, note.title, note.uri, note.revision, title_index.index_key(note))


def _connection_lost(exc: Exception) -> bool:
    """True for the SQLSTATEs that mean the session is gone (admin shutdown, crash, cannot connect)."""
    state = getattr(exc, "sqlstate", None)
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def redact(url: str) -> str:
    """The URL with any password replaced by ***, for messages an operator reads."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rsplit("@", 1)
        user = (parts.username or "") + ":***"
        return urlunsplit(parts._replace(netloc=f"{user}@{netloc[1]}"))
    except ValueError:
        return "the configured PostgreSQL URL"


def open_store(
    url: str,
    *,
    clock: Callable[[], float],
    seed_notes: Iterable[main.Note] = (),
    max_per_principal: int = main.MAX_REPLAY_PER_PRINCIPAL,
    statement_timeout_ms: int = STATEMENT_TIMEOUT_MS,
    lock_timeout_ms: int = LOCK_TIMEOUT_MS,
    idle_in_transaction_timeout_ms: int = IDLE_IN_TRANSACTION_TIMEOUT_MS,
    retention: audit.Retention = audit.Retention(),
) -> PostgresNotesStore:
    """Connect, create (and seed) or check the schema, and return the store; stores.StoreError with one line if not.

    `seed_notes` are inserted only when this call creates the schema; an existing
    database is never re-seeded (that would bring back notes users deleted).
    """
    if psycopg is None:
        raise stores.StoreError(INSTALL_HINT)
    if max_per_principal < 1:
        raise stores.StoreError("max_per_principal must be at least 1")
    for name, value in (
        ("statement_timeout_ms", statement_timeout_ms),
        ("lock_timeout_ms", lock_timeout_ms),
        ("idle_in_transaction_timeout_ms", idle_in_transaction_timeout_ms),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise stores.StoreError(f"{name} must be a positive integer")
    seed = _checked_seed(seed_notes)
    where = redact(url)
    settings = {
        "statement_timeout": str(statement_timeout_ms),
        "lock_timeout": str(lock_timeout_ms),
        "idle_in_transaction_session_timeout": str(idle_in_transaction_timeout_ms),
    }

    def connect() -> Any:
        conn = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            keepalives=1,
            keepalives_idle=KEEPALIVE_IDLE_SECONDS,
            keepalives_interval=KEEPALIVE_IDLE_SECONDS,
            keepalives_count=3,
        )
        try:
            for setting, value in settings.items():
                conn.execute("SELECT set_config(%s, %s, false)", (setting, value))
        except BaseException:
            conn.close()
            raise
        return conn

    try:
        conn = connect()
    except psycopg.Error as exc:
        raise stores.StoreError(f"cannot connect to {where}: {_first_line(exc)}") from None
    try:
        titles_missing = _prepare(conn, where, seed)
    except psycopg.Error as exc:
        raise stores.StoreError(f"cannot use {where}: {_first_line(exc)}") from None
    finally:
        conn.close()
    return PostgresNotesStore(
        connect,
        clock=clock,
        max_per_principal=max_per_principal,
        lock_timeout_ms=lock_timeout_ms,
        titles_missing=titles_missing,
        retention=retention,
    )


def _sample_counts(conn: Any) -> list[tuple[str, int]]:
    """(trigram, titles holding it) for the most common trigrams of a sample of folded titles, counted by the server."""
    (planned, live) = conn.execute(
        "SELECT reltuples, pg_stat_get_live_tuples(oid) FROM pg_class WHERE oid = 'notes'::regclass"
    ).fetchone()
    if live > STALE_STATISTICS_FACTOR * max(planned, 0) + 1000:
        # Rows added by another program since the last ANALYZE (autovacuum has not run
        # yet): with the planner's old count, the sample share below took every row, and
        # plans read the table whole. Without the right to ANALYZE, the statistics stay.
        try:
            conn.execute("ANALYZE notes")
            (planned,) = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'notes'::regclass").fetchone()
        except psycopg.Error:
            pass
    share = min(100.0, 100.0 * TRIGRAM_SAMPLE_TITLES / max(planned, 1))
    # Counted in SQL, and only the most common kept: counted in Python, every trigram of
    # the sample was held, 685 MB for titles of random CJK characters. The LIMIT on the
    # sample holds even when the planner's count is wrong.
    return conn.execute(
        "SELECT gram, count(*) FROM ("
        " SELECT DISTINCT s.id, substr(s.folded, k, 3) AS gram"
        " FROM (SELECT id, folded FROM notes TABLESAMPLE SYSTEM (%s) WHERE folded IS NOT NULL LIMIT %s) AS s,"
        " generate_series(1, length(s.folded) - 2) AS k"
        ") AS grams GROUP BY gram ORDER BY count(*) DESC, gram LIMIT %s",
        (share, TRIGRAM_SAMPLE_TITLES, TRIGRAM_COUNTS_KEPT),
    ).fetchall()


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _checked_seed(notes: Iterable[main.Note]) -> list[main.Note]:
    """Seed notes validated as every store validates them (stores.checked_notes); stores.StoreError if not."""
    try:
        return stores.checked_notes(notes)
    except ValueError as exc:
        raise stores.StoreError(f"seed notes: {exc}") from None


def _prepare(conn: Any, where: str, seed: list[main.Note]) -> str | None:
    """Create and seed, or check (and migrate) an existing schema; one transaction. Why there is no title index, or
    None."""
    with conn.transaction():
        _check_encoding(conn, where)
        # Two instances starting together on an empty database: the second waits here,
        # then finds the schema the first one committed.
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        present = {
            name for name in _OUR_TABLES if conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None
        }
        if not present:
            for statement in _SCHEMA + _LOOKUP:
                conn.execute(statement)
            conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', %s)", (str(SCHEMA_VERSION),))
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO notes (id, title, uri, revision, folded) VALUES (%s, %s, %s, %s, %s)",
                    [_row(n) for n in seed],
                )
            _audit_tables(conn)
            _add_bodies(conn)
            missing = _title_index(conn)
            conn.execute("ANALYZE notes")  # the planner's row counts, so it picks the indexes from the first lookup
            return missing
        # Never guess at a layout we did not write: a newer schema may mean something else.
        row = None
        if "meta" in present:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            raise stores.StoreError(
                f"database {where} has tables named like ours but is not a notes store (no schema version)"
            )
        if row[0] not in ("1", "2", str(SCHEMA_VERSION)):
            raise stores.StoreError(
                f"database {where} has schema version {str(row[0])[:20]!r};"
                f" this server reads version {SCHEMA_VERSION} only"
            )
        absent = set(_OUR_TABLES) - present
        if absent:
            raise stores.StoreError(f"database {where} is a notes store missing table(s) {', '.join(sorted(absent))}")
        if row[0] != str(SCHEMA_VERSION):
            try:
                with conn.transaction():  # a savepoint: a failure leaves the message, then all rolls back
                    if row[0] == "1":
                        _migrate(conn)
                    _audit_tables(conn)  # the trash gains its body column in version 3's step
                    _add_bodies(conn)
            except psycopg.Error as exc:
                raise stores.StoreError(
                    f"database {where} (schema version {row[0]}) cannot be migrated to version {SCHEMA_VERSION}"
                    f" ({_first_line(exc)}); it was left unchanged"
                ) from None
        _audit_tables(conn)
        return _title_index(conn)


def _check_encoding(conn: Any, where: str) -> None:
    """Refuse, with one line naming the fix, a database whose encoding is SQL_ASCII (stores.StoreError)."""
    # SQL_ASCII stores bytes unchecked and unconverted: psycopg then reads every text
    # column as bytes, so every row failed the note check and the server offered no note
    # at all, without a word. Another encoding is converted by the server and reads right.
    if conn.info.parameter_status("server_encoding") == UNCHECKED_ENCODING:  # text, whatever the encoding
        raise stores.StoreError(
            f"database {where} has encoding {UNCHECKED_ENCODING}, whose text is read as bytes and never served;"
            " create the database with ENCODING 'UTF8' (CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0)"
            " and use that"
        )


def _migrate(conn: Any) -> None:
    """Bring a version 1 schema to version 2, inside the caller's transaction (version 3's step is _add_bodies)."""
    conn.execute("ALTER TABLE notes ADD COLUMN folded text")
    rows = conn.execute("SELECT id, title, uri, revision FROM notes").fetchall()
    with conn.cursor() as cur:
        cur.executemany(
            "UPDATE notes SET folded = %s WHERE id = %s", [(title_index.index_key(main.Note(*r)), r[0]) for r in rows]
        )
    for statement in _LOOKUP:
        conn.execute(statement)
    conn.execute("ANALYZE notes")


def _add_bodies(conn: Any) -> None:
    """Version 3: note bodies, and a body column in the trash (the caller's transaction); records the version."""
    for statement in _BODIES:
        conn.execute(statement)
    conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def _title_index(conn: Any) -> str | None:
    """Create the pg_trgm title index if it is missing and can be; None when it is there, else why not."""
    try:
        # A savepoint: without pg_trgm (not installed, or no right to create it) the
        # store still serves, reading the workspace's rows, and says so at start-up.
        with conn.transaction():
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            conn.execute(_TITLES)
            conn.execute(_BODY_INDEX)
    except psycopg.Error as exc:
        return f"pg_trgm unavailable: {_first_line(exc)}"
    return None


def _audit_tables(conn: Any) -> None:
    """The ledger's tables (code/ledger.py), added to a database that lacks them (older servers ignore them)."""

    def columns_of(table: str) -> list[str]:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
            " AND table_schema = current_schema()",
            (table,),
        ).fetchall()
        return [row[0] for row in rows]

    ledger.add_tables(conn, ledger.POSTGRES, columns_of)
