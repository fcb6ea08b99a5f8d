"""The audit of consumed confirmations and the trash that makes a deletion undoable.

Every consumed confirmation leaves one entry, written in the same transaction as the
nonce claim (SQLite, PostgreSQL) or, for folders, in the confirmations database with the
outcome completed after the file operation:

    id, at (UTC seconds), principal, tool, outcome, note_id, title (as shown), workspace,
    uri (where the note lived), request_id, client_name (self-reported), trash, restores,
    channel (how the person confirmed: form, url or browser), approved_by and approved_at
    (the principal signed in on the confirmation page, and when it approved or kept),
    file_identity (folders: the file an update, move or restore acted on, as JSON)

Never the requestState, its nonce, a token or a note's content. Outcomes:

    deleted        the note went to the trash (`trash` says where) or, in unlink mode, away
    declined       the user declined the form (completed from the tool's result)
    not_confirmed  the user accepted but left "delete it" unticked (likewise)
    published      notes_publish sent the note (likewise)
    denied         notes_publish: the user denied the connection
    refused        the live re-check found the note changed, moved, gone or the grant revoked
    consumed       used up, and the server stopped before it could say how
    pending        folders: claimed, the file operation not yet completed
    interrupted    folders: the server stopped between the claim and the move; nothing moved
    restored       an operator brought a trashed note back, or undid an edit (`restores` names the entry)
    created        a note tool wrote a new note (code/notes_tools.py)
    appended       a note tool added text at the end of a note
    updated        a confirmed edit replaced a note's text; the old version went to the trash
    moved          a confirmed move gave a note another place (`uri` says where it was)

The note tools also write `refused` when a write found the note changed since it was
read (or its new place taken): every write and every refusal a store saw is recorded.

Entries are bounded by age and, per principal, by count (each principal keeps its newest
`max_entries`, so one principal's confirmations never push out another's), pruned a
batch at a time inside the consume transaction like the replay store. The context of the request (tool, request id, the
client's self-reported name, workspace) reaches the store through a context variable
set by the wrapper `install()` puts around `tools/call`; code/main.py is unchanged.
The SQL the SQLite and PostgreSQL stores share is here too (`AuditSql`). The operator
command `python3 code/serve.py audit list|restore` is code/audit_cli.py. Standard
library only.
"""

from __future__ import annotations

import contextvars
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import main
import stores
import title_index

__all__ = [
    "DECISIONS_ADDED_COLUMNS",
    "DECISIONS_POSTGRES_TABLES",
    "DECISIONS_SQLITE_TABLES",
    "APPENDED",
    "AuditSql",
    "CREATED",
    "DAY_SECONDS",
    "DEFAULT_AUDIT_DAYS",
    "DEFAULT_AUDIT_MAX_ENTRIES",
    "DEFAULT_TRASH_DAYS",
    "DELETED",
    "DELETION_MODES",
    "DELETION_TRASH",
    "Facts",
    "INTERRUPTED",
    "MAX_AUDIT_ENTRIES",
    "MAX_RETENTION_DAYS",
    "MOVED",
    "PENDING",
    "PENDING_GRACE_SECONDS",
    "POSTGRES_TABLES",
    "PRUNE_BATCH",
    "REFUSED",
    "RESTORED",
    "Retention",
    "SQLITE_TABLES",
    "SQL_TRASH",
    "add_columns",
    "UPDATED",
    "install",
    "mark",
    "outcome_of",
    "OUTCOMES",
]

DELETION_TRASH = "trash"
DELETION_UNLINK = "unlink"
DELETION_MODES = (DELETION_TRASH, DELETION_UNLINK)
DAY_SECONDS = 86_400.0
DEFAULT_TRASH_DAYS = 30.0  # a trashed note is emptied this long after its deletion
DEFAULT_AUDIT_DAYS = 365.0  # an entry is pruned this long after it was written
DEFAULT_AUDIT_MAX_ENTRIES = 100_000  # at most this many entries are kept per principal (its newest)
MAX_RETENTION_DAYS = 3650.0  # a configured age above ten years is a typo, not a policy
MAX_AUDIT_ENTRIES = 10_000_000  # the largest configurable count bound (per principal)
RESTORED_REVISION_BITS = 62  # a restored note's new revision: random, and within a signed 64-bit column
PRUNE_BATCH = 64  # entries and trashed notes removed per consume: bounded work per call
MAX_FIELD_CHARS = 200  # characters kept of a client-supplied field (client name, request id)
PENDING_GRACE_SECONDS = 60.0  # a pending folder entry this old, with nothing in the trash, was interrupted
OPERATOR = "(operator)"  # the principal recorded for a restore run from the command line

DELETED, DECLINED, NOT_CONFIRMED, PUBLISHED, DENIED = "deleted", "declined", "not_confirmed", "published", "denied"
REFUSED, CONSUMED, PENDING, INTERRUPTED, RESTORED = "refused", "consumed", "pending", "interrupted", "restored"
CREATED, APPENDED, UPDATED, MOVED = "created", "appended", "updated", "moved"  # the note tools' writes
OUTCOMES = (DELETED, DECLINED, NOT_CONFIRMED, PUBLISHED, DENIED, REFUSED, CONSUMED, PENDING, INTERRUPTED, RESTORED,
            CREATED, APPENDED, UPDATED, MOVED)  # fmt: skip
SQL_TRASH = "deleted_notes"  # the `trash` value of a row moved to the deleted-notes table

COLUMNS = ("id", "at", "principal", "tool", "outcome", "note_id", "title", "workspace", "uri",
           "request_id", "client_name", "trash", "restores", "channel", "approved_by", "approved_at", "file_identity")  # fmt: skip
CHANNELS = ("form", "url", "browser")  # a form in the host; this server's page by URL mode; or by the link in a result
# Added after the first audit schema, by migration, to a table that lacks them (older servers ignore them).
ADDED_COLUMNS = (("channel", "TEXT", "text"), ("approved_by", "TEXT", "text"), ("approved_at", "REAL", "double precision"),
                 ("file_identity", "TEXT", "text"))
# Columns the confirmation pages' table gained after its first release: which tool asked, and
# what its page shows (notes_update's new text, notes_move's destination); added where missing.
DECISIONS_ADDED_COLUMNS = (("tool", "TEXT NOT NULL DEFAULT 'notes_delete'", "text NOT NULL DEFAULT 'notes_delete'"),
                           ("detail", "TEXT", "text"))


class Retention(NamedTuple):
    """How deletion works and how long what it leaves is kept."""

    deletion: str = DELETION_TRASH  # "trash" (default) or "unlink" (as before: gone at once)
    trash_seconds: float = DEFAULT_TRASH_DAYS * DAY_SECONDS
    audit_seconds: float = DEFAULT_AUDIT_DAYS * DAY_SECONDS
    max_entries: int = DEFAULT_AUDIT_MAX_ENTRIES  # per principal

    @property
    def trash(self) -> bool:
        """True when a deletion moves the note to the trash."""
        return self.deletion == DELETION_TRASH

    @property
    def said(self) -> str:
        """What a deletion does, in the words the form shows the user."""
        if self.trash:
            return f"The note is moved to the trash; an operator can restore it for {self.trash_seconds / DAY_SECONDS:g} days."
        return "Deletion cannot be undone."


class Facts(NamedTuple):
    """What a store knows about the note a consumption acted on (all optional)."""

    note_id: str | None = None
    title: str | None = None
    uri: str | None = None
    trash: str | None = None
    file_identity: str | None = None  # folders: JSON naming the file written or moved (code/markdown_store.py)


# The confirmation page's decisions (code/browser_confirm.py), one row per nonce, kept beside the
# consumed nonces and the audit in the store's own database, so every instance sees them.
DECISIONS_SQLITE_TABLES = (
    "CREATE TABLE IF NOT EXISTS browser_confirmations ("
    " nonce TEXT PRIMARY KEY, handle TEXT NOT NULL UNIQUE, principal TEXT NOT NULL, workspace TEXT NOT NULL,"
    " title TEXT NOT NULL, expires_at REAL NOT NULL, status TEXT NOT NULL, note_id TEXT, version TEXT,"
    " decided_by TEXT, decided_at REAL, tool TEXT NOT NULL DEFAULT 'notes_delete', detail TEXT)",
    "CREATE INDEX IF NOT EXISTS browser_confirmations_by_principal ON browser_confirmations (principal, status, expires_at)",
    "CREATE INDEX IF NOT EXISTS browser_confirmations_by_expiry ON browser_confirmations (expires_at)",
)
DECISIONS_POSTGRES_TABLES = (
    "CREATE TABLE IF NOT EXISTS browser_confirmations ("
    " nonce text PRIMARY KEY, handle text NOT NULL UNIQUE, principal text NOT NULL, workspace text NOT NULL,"
    " title text NOT NULL, expires_at double precision NOT NULL, status text NOT NULL, note_id text, version text,"
    " decided_by text, decided_at double precision, tool text NOT NULL DEFAULT 'notes_delete', detail text)",
    "CREATE INDEX IF NOT EXISTS browser_confirmations_by_principal ON browser_confirmations (principal, status, expires_at)",
    "CREATE INDEX IF NOT EXISTS browser_confirmations_by_expiry ON browser_confirmations (expires_at)",
)


# =====================================================================================
# The request's context, carried to the store
# =====================================================================================


@dataclass
class AuditContext:
    """What the store cannot know about the request it is consuming a confirmation for."""

    tool: str | None
    request_id: str | None
    client_name: str | None  # the client's own claim (`clientInfo` name/version), never verified
    workspace: str | None  # canonical workspaceUri, when the arguments held a valid one
    entry: tuple[Any, int, str] | None = None  # (store, entry id, outcome) once written
    channel: str | None = None  # set by the tool: how the person confirmed (CHANNELS)
    approved_by: str | None = None  # set by the tool: who approved or kept it on the page
    approved_at: float | None = None


_CURRENT: contextvars.ContextVar[AuditContext | None] = contextvars.ContextVar("notes_audit", default=None)


def current() -> AuditContext | None:
    """The context of the tools/call being handled on this thread, or None (a direct store call)."""
    return _CURRENT.get()


def clip(value: Any) -> str | None:
    """A client-supplied value as at most MAX_FIELD_CHARS characters of text, or None."""
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:MAX_FIELD_CHARS]


def context_of(request: main.Envelope) -> AuditContext:
    """The audit context of one tools/call: read defensively, every field may be hostile."""
    params = request.params if isinstance(request.params, dict) else {}
    meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
    info = meta.get("io.modelcontextprotocol/clientInfo")
    name = info.get("name") if isinstance(info, dict) and isinstance(info.get("name"), str) else None
    version = info.get("version") if isinstance(info, dict) else None
    if name is not None and isinstance(version, str):
        name = f"{name}/{version}"  # recorded as name/version, both self-reported
    arguments = params.get("arguments") if isinstance(params.get("arguments"), dict) else {}
    try:
        workspace: str | None = stores.normalize_file_uri(arguments.get("workspaceUri"))
    except main.ScopeError:
        workspace = None
    tool = params.get("name") if isinstance(params.get("name"), str) else None
    request_id = None if request.id is None else json.dumps(request.id)  # 4 and "4" are different ids
    return AuditContext(clip(tool), clip(request_id), clip(name), workspace)


def mark(channel: str, approved_by: str | None = None, approved_at: float | None = None) -> None:
    """Record on this request's context how the person confirmed, and who approved on the page when (before consuming)."""
    context = current()
    if context is not None:
        context.channel, context.approved_by, context.approved_at = channel, approved_by, approved_at


def written(store: Any, entry_id: int, outcome: str) -> None:
    """Called by a store after it wrote this request's entry (so install() can complete it)."""
    context = current()
    if context is not None:
        context.entry = (store, entry_id, outcome)


def context_fields(context: AuditContext | None) -> tuple[str | None, str | None, str | None, str | None]:
    """(tool, workspace, request id, client name) of a context, all None without one."""
    if context is None:
        return (None, None, None, None)
    return (context.tool, context.workspace, context.request_id, context.client_name)


def outcome_of(settlement: main.Settlement, pending: bool = False) -> str:
    """The outcome an entry is written with, inside the consume transaction."""
    if pending:
        return PENDING
    if settlement is main.Settlement.DELETED:
        return DELETED
    if settlement is main.Settlement.CHANGED:
        return REFUSED
    # Nothing acted on a note: why (a decline, an unticked box, a publication) is the
    # tool's to say, in its result; install() completes the entry from it.
    return CONSUMED


# The outcomes a tool's result may complete a `consumed` entry with. Never read from the
# client's answer: the client could send, beside the answer the tool asked for, another
# one (`{"junk": {"action": "decline"}}`) that the tool ignores and the audit would not.
COMPLETIONS = (DECLINED, NOT_CONFIRMED, DENIED)


def result_outcome(result: dict[str, Any]) -> str | None:
    """What a tool's own result says happened, for an entry written as `consumed`; None: nothing to add."""
    if result.get("isError"):
        return REFUSED  # the tool's own re-check after consuming (notes_publish)
    structured = result.get("structuredContent")
    if not isinstance(structured, dict):
        return None
    if structured.get("published") is True:
        return PUBLISHED
    reason = structured.get("reason")
    return reason if reason in COMPLETIONS else None


def install(server: main.Server) -> None:
    """Wrap the server's tools/call so each call's context reaches the store's consume."""
    inner = server.methods["tools/call"]

    def tools_call(srv: main.Server, request: main.Envelope, meta: Any, principal: str) -> dict[str, Any]:
        context = context_of(request)
        token = _CURRENT.set(context)
        try:
            result = inner(srv, request, meta, principal)
        finally:
            _CURRENT.reset(token)
        if context.entry is not None and context.entry[2] == CONSUMED:
            store, entry_id, _ = context.entry
            outcome = result_outcome(result)
            if outcome is not None:
                try:
                    store.complete_audit(entry_id, outcome, CONSUMED)
                except stores.StoreError:
                    pass  # the tool's result stands; the entry keeps saying "consumed"
        return result

    server.methods["tools/call"] = tools_call


# =====================================================================================
# SQL shared by the SQLite and PostgreSQL stores
# =====================================================================================

SQLITE_TABLES = (
    "CREATE TABLE IF NOT EXISTS audit ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, principal TEXT NOT NULL, tool TEXT,"
    " outcome TEXT NOT NULL, note_id TEXT, title TEXT, workspace TEXT, uri TEXT, request_id TEXT,"
    " client_name TEXT, trash TEXT, restores INTEGER, principal_seq INTEGER)",
    "CREATE INDEX IF NOT EXISTS audit_by_time ON audit (at)",
    "CREATE INDEX IF NOT EXISTS audit_by_outcome ON audit (outcome, id)",
    "CREATE TABLE IF NOT EXISTS deleted_notes ("
    " audit_id INTEGER PRIMARY KEY, id TEXT NOT NULL, title TEXT NOT NULL, uri TEXT NOT NULL,"
    " revision INTEGER NOT NULL, deleted_at REAL NOT NULL, body TEXT)",
    "CREATE INDEX IF NOT EXISTS deleted_by_time ON deleted_notes (deleted_at)",
)
def add_columns(conn: Any, present: Sequence[str], sqlite: bool, table: str = "audit",
                columns: Sequence[tuple[str, str, str]] = ADDED_COLUMNS) -> None:
    """Add each of `columns` the table lacks (`present`: its columns now), in the caller's transaction."""
    for name, sqlite_type, postgres_type in columns:
        if name not in present:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sqlite_type if sqlite else postgres_type}")


POSTGRES_TABLES = (
    "CREATE TABLE IF NOT EXISTS audit ("
    " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at double precision NOT NULL, principal text NOT NULL,"
    " tool text, outcome text NOT NULL, note_id text, title text, workspace text, uri text, request_id text,"
    " client_name text, trash text, restores bigint, principal_seq bigint)",
    "CREATE INDEX IF NOT EXISTS audit_by_time ON audit (at)",
    "CREATE INDEX IF NOT EXISTS audit_by_outcome ON audit (outcome, id)",
    "CREATE TABLE IF NOT EXISTS deleted_notes ("
    " audit_id bigint PRIMARY KEY, id text NOT NULL, title text NOT NULL, uri text NOT NULL,"
    " revision bigint NOT NULL, deleted_at double precision NOT NULL, body text)",
    "CREATE INDEX IF NOT EXISTS deleted_by_time ON deleted_notes (deleted_at)",
)
# `principal_seq` numbers each principal's entries 1, 2, 3, ... (the count bound keeps
# the newest `max_entries` of each). An audit table from before it gains the column at
# start-up (the stores add it), and `number_entries` numbers what is there.
AUDIT_BY_PRINCIPAL = "CREATE INDEX IF NOT EXISTS audit_by_principal ON audit (principal, principal_seq)"


class AuditSql:
    """The audit and deleted-notes statements, written once with `?` and sent in the driver's style."""

    def __init__(self, placeholder: str) -> None:
        self.placeholder = placeholder

    def run(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        """Execute `sql` with its `?` markers in this driver's style."""
        return conn.execute(sql.replace("?", self.placeholder), tuple(params))

    def insert(
        self, conn: Any, now: float, principal: str, outcome: str, facts: Facts,
        context: AuditContext | None = None, restores: int | None = None,
    ) -> int:  # fmt: skip
        """Write one entry (the caller's transaction); its id."""
        tool, workspace, request_id, client = context_fields(context)
        channel = (context.channel, context.approved_by, context.approved_at) if context is not None else (None, None, None)
        (entry_id,) = self.run(
            conn,
            "INSERT INTO audit (at, principal, tool, outcome, note_id, title, workspace, uri, request_id,"
            " client_name, trash, restores, channel, approved_by, approved_at, file_identity, principal_seq)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            " (SELECT COALESCE(MAX(principal_seq), 0) + 1 FROM audit WHERE principal = ?)) RETURNING id",
            (now, principal, tool, outcome, facts.note_id, clip(facts.title), workspace, facts.uri, request_id,
             client, facts.trash, restores, *channel, facts.file_identity, principal),
        ).fetchone()  # fmt: skip
        return int(entry_id)

    def record(
        self, conn: Any, store: Any, now: float, principal: str, outcome: str, facts: Facts, retention: Retention
    ) -> int:
        """Write this request's entry, then prune a batch of old entries and trashed notes; the id."""
        entry_id = self.insert(conn, now, principal, outcome, facts, current())
        self.prune(conn, now, principal, retention)
        written(store, entry_id, outcome)
        return entry_id

    def prune(self, conn: Any, now: float, principal: str, retention: Retention) -> None:
        """Remove at most PRUNE_BATCH entries past the age bound and as many of `principal`'s past its count, and trashed notes past theirs."""
        self.run(
            conn,
            "DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE at <= ? ORDER BY at LIMIT ?)",
            (now - retention.audit_seconds, PRUNE_BATCH),
        )
        # The count bound is per principal: with one bound for all, a principal confirming
        # in a loop would push every other principal's entries out of the audit. A
        # principal's numbers only grow, so its newest `max_entries` are those within that
        # many of its newest number.
        self.run(
            conn,
            "DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE principal = ? AND principal_seq <="
            " (SELECT MAX(principal_seq) FROM audit WHERE principal = ?) - ? ORDER BY principal_seq LIMIT ?)",
            (principal, principal, retention.max_entries, PRUNE_BATCH),
        )
        self.run(
            conn,
            "DELETE FROM deleted_notes WHERE audit_id IN"
            " (SELECT audit_id FROM deleted_notes WHERE deleted_at <= ? ORDER BY deleted_at LIMIT ?)",
            (now - retention.trash_seconds, PRUNE_BATCH),
        )

    def number_entries(self, conn: Any) -> None:
        """Number each principal's entries by id where any lacks its number (a table from before it), and index them."""
        # Entries a server from before the numbering wrote are numbered here, at start-up.
        if self.run(conn, "SELECT 1 FROM audit WHERE principal_seq IS NULL LIMIT 1").fetchone() is not None:
            counts: dict[str, int] = {}
            numbered = []
            for entry_id, principal in self.run(conn, "SELECT id, principal FROM audit ORDER BY id").fetchall():
                counts[principal] = counts.get(principal, 0) + 1
                numbered.append((counts[principal], entry_id))
            conn.cursor().executemany("UPDATE audit SET principal_seq = ? WHERE id = ?".replace("?", self.placeholder), numbered)
        self.run(conn, AUDIT_BY_PRINCIPAL)

    def trash_row(self, conn: Any, entry_id: int, note: main.Note, now: float) -> None:
        """Move a note's row, with its body, to deleted_notes (the caller's transaction, after its entry was written)."""
        self.run(
            conn,
            "INSERT INTO deleted_notes (audit_id, id, title, uri, revision, deleted_at, body)"
            " SELECT ?, ?, ?, ?, ?, ?, body FROM notes WHERE id = ?",
            (entry_id, note.id, note.title, note.uri, note.revision, now, note.id),
        )
        self.run(conn, "DELETE FROM notes WHERE id = ?", (note.id,))

    def complete(self, conn: Any, entry_id: int, outcome: str, expected: str) -> None:
        """Set the outcome of an entry still holding `expected` (pending or consumed)."""
        self.run(conn, "UPDATE audit SET outcome = ? WHERE id = ? AND outcome = ?", (outcome, entry_id, expected))

    def restore_row(self, conn: Any, entry_id: int, now: float) -> int:
        """Put a trashed row back, or undo an edit (the caller's transaction), and audit it; stores.StoreRefused if it cannot."""
        row = self.run(conn, "SELECT id, title, uri, revision, body FROM deleted_notes WHERE audit_id = ?", (entry_id,)).fetchone()
        if row is None:
            raise stores.StoreRefused(f"entry {entry_id} has no note in the trash (not a trashed deletion, restored, or emptied)")
        note, body = main.Note(*row[:4]), row[4]
        live = self.run(conn, "SELECT id, title, uri, revision, body FROM notes WHERE id = ?", (note.id,)).fetchone()
        (kind,) = self.run(conn, "SELECT outcome FROM audit WHERE id = ?", (entry_id,)).fetchone() or (None,)
        if kind == UPDATED and live is not None:
            return self.undo_update(conn, entry_id, now, main.Note(*live[:4]), live[4], body)
        if live is not None or self.run(conn, "SELECT 1 FROM notes WHERE uri = ?", (note.uri,)).fetchone() is not None:
            raise stores.StoreRefused(f"entry {entry_id}: a note now exists with id {note.id!r} or at its place; nothing restored")
        # A new revision, as a file moved back out of a folder's trash gets one: with its old
        # revision, a form shown before the deletion (still unexpired, never answered) would
        # match the restored note again, and its accept would delete it a second time.
        note = note._replace(revision=secrets.randbits(RESTORED_REVISION_BITS))
        # With the folded title and body the lookup indexes keep, as every store writes a note.
        self.run(
            conn,
            "INSERT INTO notes (id, title, uri, revision, folded, body, body_folded) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*note, title_index.index_key(note), body, stores.fold_title(body or "")),
        )
        self.run(conn, "DELETE FROM deleted_notes WHERE audit_id = ?", (entry_id,))
        return self.insert_restore(conn, entry_id, now, Facts(note.id, note.title, note.uri))

    def undo_update(self, conn: Any, entry_id: int, now: float, live: main.Note, current: str | None, kept: str | None) -> int:
        """Undo an edit: the text the update replaced comes back, the text now in place goes to the trash under the restore's entry."""
        new_id = self.insert_restore(conn, entry_id, now, Facts(live.id, live.title, live.uri, SQL_TRASH))
        self.run(
            conn,
            "INSERT INTO deleted_notes (audit_id, id, title, uri, revision, deleted_at, body) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (new_id, live.id, live.title, live.uri, live.revision, now, current),
        )
        # The next revision: every version a tool gave out before the restore is stale after it.
        self.run(
            conn,
            "UPDATE notes SET body = ?, body_folded = ?, revision = ? WHERE id = ?",
            (kept, stores.fold_title(kept or ""), live.revision + 1, live.id),
        )
        self.run(conn, "DELETE FROM deleted_notes WHERE audit_id = ?", (entry_id,))
        return new_id

    def insert_restore(self, conn: Any, entry_id: int, now: float, facts: Facts) -> int:
        """The entry recording that an operator restored `entry_id` (its workspace copied)."""
        row = self.run(conn, "SELECT workspace FROM audit WHERE id = ?", (entry_id,)).fetchone()
        context = AuditContext(None, None, None, row[0] if row else None)
        return self.insert(conn, now, OPERATOR, RESTORED, facts, context, restores=entry_id)

    def entry(self, conn: Any, entry_id: int) -> dict[str, Any] | None:
        """One entry by id, or None."""
        row = self.run(conn, f"SELECT {', '.join(COLUMNS)} FROM audit WHERE id = ?", (entry_id,)).fetchone()
        return dict(zip(COLUMNS, row)) if row is not None else None

    def entries(self, conn: Any, principal: str | None = None, since: float | None = None, outcome: str | None = None) -> list[dict[str, Any]]:
        """Entries matching every filter given, oldest first."""
        where, params = [], []
        for column, op, value in (("principal", "=", principal), ("at", ">=", since), ("outcome", "=", outcome)):
            if value is not None:
                where.append(f"{column} {op} ?")
                params.append(value)
        sql = f"SELECT {', '.join(COLUMNS)} FROM audit" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        return [dict(zip(COLUMNS, row)) for row in self.run(conn, sql, params).fetchall()]
