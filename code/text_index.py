"""What every store's text search shares: the query's terms, its cursor, its snippets, and the folder store's own index.

A query is words and "quoted phrases". Each term is folded as titles are
(stores.fold_title: NFC, then case folding) and every one is required, anywhere in the
note's title or text: `Lisbon invoice` finds a note holding both words far apart, and
`"ferry timetable"` only the two words together. A term is matched as a piece of the
folded text, so Japanese (no spaces between words) is matched as written.

The indexes are trigram indexes (SQLite FTS5's `trigram` tokenizer, PostgreSQL's
pg_trgm), not word indexes: a word tokenizer (unicode61) cannot split Japanese, and
would need a second, trigram index beside it to find `東京タワー` inside a sentence. One
trigram index serves every script, and a word of three characters or more is matched
by it exactly (the folded text is stored, the tokenizer is told case_sensitive 1, so the
match is the substring test itself). A phrase is asked of it by its words (Query.indexed)
and tested whole in SQL (instr) over the rows they give, as shorter terms are; a query
with nothing the index can match tests the workspace's rows.

Ranking: a note whose title holds every term comes first, then by relevance (each term's
occurrences per kilobyte of text, one in the title counting TITLE_WEIGHT times: score_sql,
the same in every store), then by id. A search examines at most MAX_RANKED_ROWS rows
the index offers (newest first) and ranks those passing the test; past them the result
says it stopped early. Its cost therefore follows `limit` and that bound, never the
number of notes holding a common word, nor how many of them the index must look through
to find the notes holding a phrase of common words.

The folder store's index (FolderTextIndex) is an SQLite file of its own in the state
folder, beside the ledger, never in the notes folder: one row per note file keyed by
its path and identity (device, inode, size, mtime, ctime), kept current from the title
index's change notification (code/folder_index.py) and compared with the files after
start-up, so a file changed while the server was down is read again. One search reads
at most MAX_SYNC_BYTES of changed files and none once SYNC_SECONDS have passed; what it
leaves, and the comparison after start-up of an index that already holds rows, is done
by a background thread in steps of the same bounds, and meanwhile a search answers from
what is indexed and says it stopped early. A row not yet read again can only narrow:
every hit is read again and tested (folder_hits), so it never gives a wrong hit.
Standard library only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

import folder_bodies
import folder_paths
import main
import stores

__all__ = [
    "CURSOR_REFUSED",
    "FolderTextIndex",
    "MAX_CURSOR_CHARS",
    "MAX_RANKED_ROWS",
    "MAX_SCORED_CHARS",
    "cursor_for",
    "folder_hits",
    "fts_match",
    "index_path",
    "offset_of",
    "page_of",
    "parse",
    "score_sql",
    "search_snippet",
]

# rows the index offers one search at most (newest first), each tested, those holding the query ranked; past it the
# search says it stopped early
MAX_RANKED_ROWS = 500
# characters (folded) of a word the trigram index is asked for; shorter terms, and phrases, are tested over its rows
MIN_INDEXED_TERM = 3
MAX_SCORED_CHARS = 16_384  # characters of a note's text its score reads: rows ranked x this bounds the bytes ranked
TITLE_WEIGHT = 10.0  # an occurrence of a term in the title counts this many times one in the text
MAX_CURSOR_CHARS = 200  # characters of a cursor; a longer one is refused before it is decoded
CURSOR_REFUSED = "Invalid params: cursor is not one this search gave out for this query and workspace"
FOLDER_INDEX_BUSY_MS = 5000  # one write to the folder text index waits at most this long for another instance's
FOLDER_INDEX_LOG_BYTES = 4 * 1024 * 1024  # the folder text index's write-ahead log kept after a checkpoint, at most
FOLDER_INDEX_CHECKPOINT_ROWS = 1_000  # files one sync re-read past which it checkpoints the index at once (a build)
# bytes of changed note files one search (or one background step) reads into the index, at most
MAX_SYNC_BYTES = 32 * 1024 * 1024
SYNC_SECONDS = 2.0  # one search (or one background step) reads no further changed file once this long has passed
# Pages one background merge step writes at most: after a build or a catch-up the background
# merges the index's segments into one in steps of this size (about 0.16 s each at 100,000
# notes), each under the write lock, so a search's own writes wait for one step at most.
# Unmerged, a 100,000-note build left dozens of segments and a rare word's lookup read each.
MERGE_PAGES = 2_000
SNIPPET_CHARS = 160  # characters of a note's text shown beside a hit

# Punctuation around a word is no part of it: `(Lisbon,` is the word lisbon. A `#` stays:
# `#urgent` is a tag as written in the note.
_EDGES = " \t\r\n.,;:!?()[]{}<>'`\"“”‘’«»"
_TERMS = re.compile(r'"([^"]*)"|(\S+)')


class Query(NamedTuple):
    """A parsed query: its folded terms, each required, in the order written (duplicates dropped)."""

    terms: tuple[str, ...]

    def indexed(self) -> list[str]:
        """What the index is asked for: each word of MIN_INDEXED_TERM characters or more, a phrase's own words (the
        phrase whole when none is that long); every note holding the query holds each of them."""
        # A phrase asked of a trigram index whole is evaluated there by merging the
        # positions of all its trigrams, those across its spaces (`1 w`, ` w0`) too, which
        # most notes hold: `"w0001 w0002"` made FTS5 examine 2,300 rows of 10,000 notes to
        # find the 501 holding it. Asked by its words, the index offers the rows holding
        # each word, the phrase is tested over them (tested()), and the bound counts the
        # rows offered: the rows one search examines no longer grow with the notes.
        pieces: dict[str, None] = {}
        for term in self.terms:
            words = [word for word in term.split() if len(word) >= MIN_INDEXED_TERM]
            if words:
                pieces.update(dict.fromkeys(words))
            elif len(term) >= MIN_INDEXED_TERM:
                pieces[term] = None
        return list(pieces)

    def tested(self) -> list[str]:
        """The terms tested over the rows the index offers: those under MIN_INDEXED_TERM characters, and each phrase
        the index was asked for by its words."""
        asked = set(self.indexed())
        return [t for t in self.terms if t not in asked]


def parse(query: str) -> Query:
    """The query's words and "quoted phrases", folded (stores.fold_title); empty when it holds none."""
    terms: dict[str, None] = {}
    for phrase, word in _TERMS.findall(query):
        term = stores.fold_title(" ".join(phrase.split())) if phrase else stores.fold_title(word.strip(_EDGES))
        if term.strip():
            terms[term] = None
    return Query(tuple(terms))


def holds(query: Query, title: str, text: str) -> bool:
    """True when every term of `query` is in the folded `title` or the folded `text` (the exact test)."""
    folded_title, folded_text = stores.fold_title(title), stores.fold_title(text)
    return all(term in folded_title or term in folded_text for term in query.terms)


def score_sql(count: int, title: str, body: str, mark: str) -> str:
    """SQL for the relevance of a row to `count` terms (each bound three times, by `mark`): occurrences per kilobyte of
    the text's first MAX_SCORED_CHARS, the title's weighted."""
    # Not SQLite's bm25(): its inverse document frequency counts every row holding each
    # phrase, whatever the LIMIT (100 ms for a word in every one of 100,000 notes). This
    # reads only the rows the search keeps, so its cost follows the row bound.
    # Only the text's first MAX_SCORED_CHARS are counted: a note grown by appends to any size
    # (2,000 notes of 200 kB) would otherwise make every ranked row cost its whole text, so
    # a search's reading would follow the notes' sizes, not its row bound.
    start = f"substr({body}, 1, {MAX_SCORED_CHARS})"
    one = (
        f"((length({start}) - length(replace({start}, {mark}, '')))"
        f" + {TITLE_WEIGHT} * (length({title}) - length(replace({title}, {mark}, ''))))"
        f" / (length({mark}) * (1.0 + length({start}) / 1024.0))"
    )
    return " + ".join([one] * count)


def fts_match(terms: Iterable[str]) -> str:
    """An FTS5 query requiring every one of `terms`, each quoted whole (nothing in a query is FTS5 syntax)."""
    return " AND ".join('"' + term.replace('"', '""') + '"' for term in terms)


def page_of(
    ranked: Iterable[tuple[str, object, float]],
    unindexed: Iterable[tuple[object, ...]],
    query: Query,
    workspace: main.Path,
    offset: int,
    limit: int,
) -> list[str]:
    """The ids of one page: SQL's ranked rows (id, title hit, score: lower first) and the rows another program wrote,
    merged."""
    order = [((0 if titled else 1, score, note_id), note_id) for note_id, titled, score in ranked]
    # Rows another program wrote without their folded forms cannot be folded in SQL: the
    # exact test here, ranked with the indexed rows by their title hit (a score of 0).
    for row in unindexed:
        note = stores.stored_note(row[:4])
        body = row[4] if isinstance(row[4], str) else ""
        if note is not None and main.inside_workspace(note, workspace) and holds(query, note.title, body):
            titled = all(term in stores.fold_title(note.title) for term in query.terms)
            order.append(((0 if titled else 1, 0.0, note.id), note.id))
    order.sort(key=lambda item: item[0])
    return [note_id for _, note_id in order[offset : offset + limit]]


# -------------------------------------------------------------------------- cursors


def _key(workspace_uri: str, query: str) -> str:
    return hashlib.sha256(f"{workspace_uri}\n{query}".encode("utf-8", "surrogatepass")).hexdigest()[:24]


def cursor_for(workspace_uri: str, query: str, offset: int) -> str:
    """The opaque cursor of the page starting at `offset` of this query in this workspace."""
    raw = json.dumps({"o": offset, "k": _key(workspace_uri, query)}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def offset_of(cursor: object, workspace_uri: str, query: str) -> int | None:
    """The offset a cursor this module gave out for this query and workspace names; None for anything else."""
    # A cursor comes from the client: it may be any JSON value, huge, or forged. It is
    # only ever an offset into one query's ranking, bound to that query and workspace
    # (so one query's cursor cannot page another's) and below the row bound (so it
    # cannot make a search rank more rows than a first page may).
    if (
        not isinstance(cursor, str)
        or not 0 < len(cursor) <= MAX_CURSOR_CHARS
        or not re.fullmatch(r"[A-Za-z0-9_-]+", cursor)
    ):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except ValueError:
        return None
    if not isinstance(data, dict) or set(data) != {"o", "k"} or data["k"] != _key(workspace_uri, query):
        return None
    offset = data["o"]
    if type(offset) is not int or not 0 < offset < MAX_RANKED_ROWS:
        return None
    return offset


# -------------------------------------------------------------------------- snippets


def search_snippet(text: str, query: Query, visible: Callable[[str], str], title: str = "") -> str:
    """At most SNIPPET_CHARS of `text` around its first term, on one line, made `visible`; a leading `# heading` that
    repeats `title` left out."""
    # The hit shows its title already: a first line that only repeats it as a heading
    # would fill the snippet with it. Another heading is the note's text, and kept.
    lines = text.split("\n")
    first = next((k for k, line in enumerate(lines) if line.strip()), len(lines))
    if (
        title
        and first < len(lines)
        and lines[first].startswith("#")
        and stores.fold_title(lines[first].lstrip("#").strip()) == stores.fold_title(title.strip())
    ):
        text = "\n".join(lines[first + 1 :])
    folded = stores.fold_title(text)
    at = -1
    if len(folded) == len(text):  # positions agree only when folding kept the length
        found = [folded.find(term) for term in query.terms if term in folded]
        at = min(found) if found else -1
    start = max(0, at - SNIPPET_CHARS // 3) if at > 0 else 0
    piece = re.sub(r"\s+", " ", text[start : start + SNIPPET_CHARS * 2]).strip()
    return visible(piece)[:SNIPPET_CHARS]


# -------------------------------------------------------------------------- the folder store's index

_FOLDER_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS files (id INTEGER PRIMARY KEY, root TEXT NOT NULL, path BLOB NOT NULL,"
    " dev INTEGER, ino INTEGER, size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER, title TEXT, UNIQUE (root, path))",
    "CREATE VIRTUAL TABLE IF NOT EXISTS texts USING fts5(title, body, tokenize = 'trigram case_sensitive 1')",
)
Facts = tuple[int, int, int, int, int]


def _path_key(rel: main.Path) -> bytes:
    """The index's key of the file at `rel` (bytes: a name the file system gave may hold any byte)."""
    return "/".join(rel).encode("utf-8", "surrogateescape")


def _path_of(key: bytes) -> main.Path:
    return tuple(key.decode("utf-8", "surrogateescape").split("/"))


def _indexed_text(loaded: folder_bodies.Loaded) -> str:
    """What the index keeps of a file's text: its frontmatter (tags, aliases) and its text, folded."""
    front = loaded.front.decode("utf-8", "replace")
    return stores.fold_title(front + "\n" + loaded.text if front else loaded.text)


def index_path(database: str) -> str | None:
    """The folder store's text index file beside its confirmation database `database` (None: in memory, as that database
    is)."""
    # The sandbox grants writes to exactly these files (sandbox.state_files, SEARCH_INDEX_SUFFIX).
    return None if database == ":memory:" else os.path.abspath(database) + "-search"


Titles = Callable[[main.Path], tuple[Facts, str] | None]  # a file's title as indexed, with the facts it was read with
Changes = Callable[[Callable[[dict[main.Path, tuple[Facts, int]], set[main.Path]], None], Titles | None], None]


def _in_thread(work: Callable[[], None]) -> None:
    """Run `work` in a thread of its own (a daemon: a server stopping does not wait for an index step)."""
    threading.Thread(target=work, name="notes-search-index", daemon=True).start()


class FolderTextIndex:
    """A persistent FTS5 index of the note files of the folder store's roots, in its own SQLite file (or in memory)."""

    def __init__(self, path: str | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path or ":memory:"
        self.conn = self._connect()
        for statement in _FOLDER_SCHEMA:
            self.conn.execute(statement)
        if "title" not in {row[1] for row in self.conn.execute("PRAGMA table_info(files)")}:
            # An index written before titles were kept: its rows give no title, each file's is read.
            self.conn.execute("ALTER TABLE files ADD COLUMN title TEXT")
        self.clock = clock  # the deadline's clock: a test injects its own
        # How background work starts: a thread, unless a test collects it instead.
        self.spawn: Callable[[Callable[[], None]], None] = _in_thread
        self.verified: set[str] = set()  # roots compared whole with their files since start-up
        # root -> paths whose row may not match the file, left by a step for a later one.
        self.pending: dict[str, set[main.Path]] = {}
        # One write at a time in this process: in memory, searches and background steps
        # share one connection, where a second transaction could not begin.
        self.writing = threading.Lock()
        self.state = threading.Lock()  # guards `working`, `running` and `closing`
        self.working: set[str] = set()  # roots handed to background work (started, or about to be)
        self.running = 0  # background works between their first and last step
        self.closing = False
        self.failed: dict[str, Exception] = {}  # root -> why its background work stopped, for the next search to say
        self.idle = threading.Condition(self.state)  # notified when a root's background work ends

    def _connect(self) -> sqlite3.Connection:
        """A connection to the index with its settings (the background steps have their own, on a file)."""
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {FOLDER_INDEX_BUSY_MS}")
        if self.path != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
            # A build writes many rows per transaction; the log it leaves is cut back to this
            # size at the next checkpoint rather than kept at the build's.
            conn.execute(f"PRAGMA journal_size_limit = {FOLDER_INDEX_LOG_BYTES}")
        return conn

    def close(self) -> None:
        """Let the background work end at its current step, then close the database (the file stays: the next start
        verifies it)."""
        with self.state:
            self.closing = True
            while self.running:
                self.idle.wait()
        self.conn.close()

    def wait_idle(self) -> None:
        """Return once no background work runs (a benchmark's barrier; a search never waits for it)."""
        with self.state:
            while self.working:
                self.idle.wait()

    def size_bytes(self) -> int:
        """The index's size on disk (0 in memory)."""
        if self.path == ":memory:":
            return 0
        return sum(os.path.getsize(self.path + s) for s in ("", "-wal") if os.path.exists(self.path + s))

    def catch_up(self, root: main.Path, opened: folder_paths.Root, changes: Changes) -> bool:
        """Bring the root's rows towards its files within one search's bounds (`changes`: FolderIndex.with_changes);
        False when some are left to a background step."""
        name = "/".join(root)
        with self.state:
            failed = self.failed.pop(name, None)
            if failed is not None:
                raise failed  # the background work's refusal (busy, too many entries); the next starts again
            if name in self.working:
                return False  # a background step holds the root: answer from what is indexed
            if name not in self.verified and self.path != ":memory:" and self._holds(name):
                # An index that already holds this root after start-up: the comparison with
                # every file (a walk of the whole folder) is the background's, so the first
                # search answers at once, from rows that only narrow, saying it stopped early.
                self._start(root, opened, changes)
                return False
        complete = False

        def use(files: dict[main.Path, tuple[Facts, int]], touched: set[main.Path]) -> None:
            nonlocal complete
            complete = self.sync(root, opened, files, touched)

        changes(use, None)
        if not complete:
            with self.state:
                if name not in self.working:
                    self._start(root, opened, changes)
        return complete

    def _holds(self, name: str) -> bool:
        return self.conn.execute("SELECT 1 FROM files WHERE root = ? LIMIT 1", (name,)).fetchone() is not None

    def _start(self, root: main.Path, opened: folder_paths.Root, changes: Changes) -> None:
        """Hand the root to a background step (called with `state` held)."""
        if self.closing:
            return
        self.working.add("/".join(root))
        try:
            self.spawn(lambda: self._work(root, opened, changes))
        except RuntimeError:  # no thread can be started now: this search says it stopped early, the next tries again
            self.working.discard("/".join(root))

    def _work(self, root: main.Path, opened: folder_paths.Root, changes: Changes) -> None:
        """Background: bounded steps, each under the title index's lock, until the root's rows match its files (or the
        index closes)."""
        name = "/".join(root)
        with self.state:
            if self.closing:
                self.working.discard(name)
                self.idle.notify_all()
                return
            self.running += 1
        conn = self.conn
        try:
            # A file index has a connection of its own here, so searches keep reading the last
            # committed rows; one in memory is one database only through its one connection.
            if self.path != ":memory:":
                conn = self._connect()
            complete = False
            # The comparison after start-up: the title index's first walk takes each title
            # the index kept for a file whose facts did not change, instead of reading it.
            titles: Titles | None = (lambda rel: self._title(conn, name, rel)) if name not in self.verified else None
            while not complete and not self.closing:

                def use(files: dict[main.Path, tuple[Facts, int]], touched: set[main.Path]) -> None:
                    nonlocal complete
                    complete = self.sync(root, opened, files, touched, conn)

                changes(use, titles)
                titles = None
            if complete and self.path != ":memory:":
                self._merge(conn)
        except Exception as exc:  # a thread's boundary: handed to the search's own, where it is answered
            # Busy, full, too many entries, or a fault: the rows are as the last committed step
            # left them; the next search raises it through the server's one exception boundary
            # (no path, no traceback on the wire or in the log), the one after starts again.
            with self.state:
                self.failed["/".join(root)] = exc
        finally:
            if conn is not self.conn:
                conn.close()
            with self.state:
                self.working.discard(name)
                self.running -= 1
                self.idle.notify_all()

    def _merge(self, conn: sqlite3.Connection) -> None:
        """Background: merge the index's segments in steps of MERGE_PAGES until one is left (or the index closes)."""
        while not self.closing:
            with self.writing:
                before = conn.total_changes
                # A negative page count merges every level, as 'optimize' does, but one step at a time.
                conn.execute("INSERT INTO texts (texts, rank) VALUES ('merge', ?)", (-MERGE_PAGES,))
                if conn.total_changes - before < 2:  # FTS5's own sign that nothing was left to merge
                    return

    def sync(
        self,
        root: main.Path,
        opened: folder_paths.Root,
        files: dict[main.Path, tuple[Facts, int]],
        touched: set[main.Path],
        conn: sqlite3.Connection | None = None,
    ) -> bool:
        """Bring the root's rows to `files` (path -> (facts, slot), the title index's view) for the paths `touched` and
        those left before (all on the first call), within MAX_SYNC_BYTES and SYNC_SECONDS; True when none is left."""
        name = "/".join(root)
        conn = conn or self.conn
        with self.writing:
            return self._sync(name, root, opened, files, touched, conn)

    def _sync(
        self,
        name: str,
        root: main.Path,
        opened: folder_paths.Root,
        files: dict[main.Path, tuple[Facts, int]],
        touched: set[main.Path],
        conn: sqlite3.Connection,
    ) -> bool:
        deadline = self.clock() + SYNC_SECONDS
        conn.execute("BEGIN IMMEDIATE")
        try:
            if name not in self.verified:
                # After start-up: a row whose file is gone or whose identity changed while the
                # server was down is dropped or read again; unchanged files are not read.
                # A row without a title (written before titles were kept) is read again too.
                stale = []
                rows = conn.execute(
                    "SELECT path, dev, ino, size, mtime_ns, ctime_ns, title IS NULL FROM files WHERE root = ?", (name,)
                )
                for key, *held, untitled in rows:
                    rel = _path_of(key)
                    now = files.get(rel)
                    if now is None or tuple(held) != now[0] or untitled:
                        stale.append(rel)
                indexed = {_path_of(k) for (k,) in conn.execute("SELECT path FROM files WHERE root = ?", (name,))}
                todo = set(stale) | {rel for rel in files if rel not in indexed}
            else:
                # What an earlier step left is read without asking its row again (a build leaves
                # most of the folder there); a changed path is read unless its row matches already.
                todo = {
                    rel for rel in touched if not self._current(conn, name, rel, files.get(rel))
                } | self.pending.get(name, set())
            left: set[main.Path] = set()
            spent = read = 0
            for rel in sorted(todo):
                held = files.get(rel)
                if held is None:
                    self._drop(conn, name, rel)  # gone: no read needed
                    continue
                # A model can write thousands of large notes and then search: past the byte
                # budget or the deadline, checked before every read, this search stops reading
                # and its old row stays (a hit is read again before it is offered).
                cost = min(held[0][2], folder_bodies.MAX_FILE_BYTES + 1)
                if left or spent + cost > MAX_SYNC_BYTES or self.clock() >= deadline:
                    left.add(rel)
                    continue
                spent += cost
                read += 1
                self._drop(conn, name, rel)
                self._read(conn, name, root, opened, rel, held[0])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self.verified.add(name)
        self.pending[name] = left
        if read > FOLDER_INDEX_CHECKPOINT_ROWS:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # a build: its pages into the file, the log emptied
        return not left

    def _title(self, conn: sqlite3.Connection, name: str, rel: main.Path) -> tuple[Facts, str] | None:
        row = conn.execute(
            "SELECT dev, ino, size, mtime_ns, ctime_ns, title FROM files WHERE root = ? AND path = ?",
            (name, _path_key(rel)),
        ).fetchone()
        return None if row is None or row[5] is None else (tuple(row[:5]), row[5])

    def _current(self, conn: sqlite3.Connection, name: str, rel: main.Path, held: tuple[Facts, int] | None) -> bool:
        row = conn.execute(
            "SELECT dev, ino, size, mtime_ns, ctime_ns FROM files WHERE root = ? AND path = ?", (name, _path_key(rel))
        ).fetchone()
        return (row is None and held is None) or (row is not None and held is not None and tuple(row) == held[0])

    def _drop(self, conn: sqlite3.Connection, name: str, rel: main.Path) -> None:
        row = conn.execute("SELECT id FROM files WHERE root = ? AND path = ?", (name, _path_key(rel))).fetchone()
        if row is not None:
            conn.execute("DELETE FROM files WHERE id = ?", row)
            conn.execute("DELETE FROM texts WHERE rowid = ?", row)

    def _read(
        self,
        conn: sqlite3.Connection,
        name: str,
        root: main.Path,
        opened: folder_paths.Root,
        rel: main.Path,
        facts: Facts,
    ) -> None:
        """Index the file at `rel` as it is now (through the root's descriptor); a file that cannot be read is left
        out."""
        fd = folder_paths.open_below(opened, rel[:-1])
        if fd is None:
            return
        try:
            loaded = folder_bodies.load(fd, rel[-1])
        finally:
            os.close(fd)
        if loaded is None:
            return
        # Keyed by the identity the title index holds: if the file changed between its
        # listing and this read, the next event or rescan names it again.
        cur = conn.execute(
            "INSERT INTO files (root, path, dev, ino, size, mtime_ns, ctime_ns, title) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (name, _path_key(rel), *facts, loaded.title),
        )
        conn.execute(
            "INSERT INTO texts (rowid, title, body) VALUES (?, ?, ?)",
            (cur.lastrowid, stores.fold_title(loaded.title), _indexed_text(loaded)),
        )

    def search(
        self, root: main.Path, below: main.Path, query: Query, limit: int, offset: int
    ) -> tuple[list[main.Path], bool]:
        """The paths strictly inside `below` holding every term, ranked, `limit` from `offset`; and whether the row
        bound was met."""
        name = "/".join(root)
        # Strictly inside `below`: the keys from "below/" up to "below0" ("0" is the byte
        # after "/"), so a look-alike folder `below-evil` is outside; the root: every key.
        prefix = _path_key(below) + b"/" if below else b""
        inside, bounds = ("f.path >= ? AND f.path < ?", [prefix, prefix[:-1] + b"0"]) if prefix else ("1", [])
        titled = " AND ".join(["instr(t.title, ?) > 0"] * len(query.terms)) or "1"
        tested = query.tested()
        test = "".join(" AND (instr(t.title, ?) > 0 OR instr(t.body, ?) > 0)" for _ in tested)
        tests = [v for term in tested for v in (term, term)]
        indexed = query.indexed()
        if indexed:
            hits = "SELECT rowid AS r FROM texts WHERE texts MATCH ? ORDER BY rowid DESC LIMIT ?"
            first: list[object] = [fts_match(indexed), MAX_RANKED_ROWS + 1]
        else:
            hits = f"SELECT id AS r FROM files f WHERE root = ? AND {inside} ORDER BY id DESC LIMIT ?"
            first = [name, *bounds, MAX_RANKED_ROWS + 1]
        sql = (
            # One row past the bound only says the bound was met: `kept` is the rows without it.
            f"WITH hits AS MATERIALIZED ({hits}), kept AS (SELECT * FROM hits LIMIT ?)"
            f" SELECT f.path, ({titled}) AS titled, ({score_sql(len(query.terms), 't.title', 't.body', '?')}) AS score,"
            " (SELECT count(*) FROM hits)"
            " FROM kept JOIN files f ON f.id = kept.r"
            f" JOIN texts t ON t.rowid = kept.r WHERE f.root = ? AND {inside}{test}"
            " ORDER BY titled DESC, score DESC, f.path LIMIT ? OFFSET ?"
        )
        rows = self.conn.execute(
            sql,
            (
                *first,
                MAX_RANKED_ROWS,
                *query.terms,
                *[t for t in query.terms for _ in range(3)],
                name,
                *bounds,
                *tests,
                limit,
                offset,
            ),
        ).fetchall()
        if rows:
            examined = rows[0][3]
        else:
            examined = self.conn.execute(f"SELECT count(*) FROM ({hits})", first).fetchone()[0]
        return [_path_of(row[0]) for row in rows], examined > MAX_RANKED_ROWS


def folder_hits(
    paths: Iterable[main.Path], load: Callable[[main.Path], tuple[main.Note, folder_bodies.Loaded] | None], query: Query
) -> list[tuple[main.Note, str]]:
    """The notes at `paths`, read now, that still hold every term (the index only narrows)."""
    found = []
    for rel in paths:
        got = load(rel)
        if got is not None:
            note, loaded = got
            front = loaded.front.decode("utf-8", "replace")
            if holds(query, note.title, front + "\n" + loaded.text):
                found.append((note, loaded.text))
    return found
