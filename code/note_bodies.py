"""Note bodies in the SQL stores: what SQLite and PostgreSQL share for the opt-in note tools.

The lesson's notes are titles and places; the note tools (code/notes_tools.py) also read,
search and write what a note says. In the SQL stores a note's text is the `body` column of
its row (added by a migration of its own, see each store's `_BODIES`), with `body_folded`
(stores.fold_title of the body) beside it for the search index. A body that is NULL is
empty; a body another program writes without `body_folded` is scanned, never missed.

Every write runs inside the caller's transaction (the store's write lock held) and
writes its audit entry there: created, appended, updated or moved, or refused when the
note changed since the caller read it. The replaced version of an update goes to the
trash (`deleted_notes`, keyed by the update's audit entry), so `audit restore` puts it
back. Statements are written once with `?` and sent in the driver's style.
Standard library only.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable
from typing import Any

import audit
import ledger
import main
import stores
import title_index

__all__ = [
    "BodySql",
    "CHANGED",
    "SqlTexts",
    "Check",
    "NO_PLACE",
    "Record",
    "TAKEN",
    "TOO_LONG",
    "new_place",
    "note_with_body",
]

MAX_NOTE_BYTES = 262_144  # UTF-8 bytes one stored note body may hold; a write past it is refused
NEW_ID_BYTES = 8  # random bytes in the id of a note created in an SQL store (16 hex digits)
MAX_NAME_TRIES = 20  # places tried for a new note ("title.md", "title-2.md", ...) before the create is refused
MAX_SLUG_CHARS = 60  # characters of the title kept in a new note's file name

# The refusals a write returns (audited as refused; the tool shows them): nothing was changed.
CHANGED = "The note changed, moved or was deleted since you read it; nothing was changed. Read it again."
TOO_LONG = f"The note would hold more than {MAX_NOTE_BYTES:,} bytes; nothing was changed."
TAKEN = "A note already exists at that place; nothing was moved (a move never replaces a note)."
UNREACHABLE = (
    f"At that place the note's URI would be longer than {main.MAX_URI_LENGTH:,} characters, where no tool reaches it; "
    "nothing was moved. Choose a shorter path."
)
NO_PLACE = (
    f"{MAX_NAME_TRIES} notes in that folder already take this title's file name; nothing was created."
    " Choose another title."
)

Check = stores.Check  # the tool's live re-check: (note, body) -> still the one asked about?
Record = stores.Entry  # writes this call's audit entry (outcome, facts) -> its id

_ROW = "SELECT id, title, uri, revision, body FROM notes"


def body_key(body: str | None) -> str:
    """The folded body the search index keeps (stores.fold_title of the text; empty for none)."""
    return stores.fold_title(body or "")


def note_with_body(row: tuple[object, ...] | None) -> tuple[main.Note, str] | None:
    """A row (id, title, uri, revision, body) as (Note, body), or None when it cannot be shown safely."""
    if row is None:
        return None
    note = stores.stored_note(row[:4])
    body = row[4] if row[4] is not None else ""
    return None if note is None or not isinstance(body, str) else (note, body)


def slug(title: str) -> str:
    """A file-name stem for a new note: the title's letters and digits joined by `-`, or "note"."""
    words = re.findall(r"\w+", stores.fold_title(title))
    return "-".join(words)[:MAX_SLUG_CHARS].strip("-_") or "note"


def new_place(workspace: main.Path, title: str, tries: int = MAX_NAME_TRIES) -> Iterable[main.Path]:
    """The places a new note titled `title` may take in `workspace`, in the order they are tried."""
    stem = slug(title)
    for k in range(1, tries + 1):
        yield workspace + (f"{stem}.md" if k == 1 else f"{stem}-{k}.md",)


class BodySql:
    """The notes-table statements of both SQL stores' writes, each inside the caller's transaction."""

    def __init__(self, dialect: ledger.Dialect, lock: str = "") -> None:
        self.dialect = dialect
        self.sql = ledger.AuditSql(dialect)
        self.lock = lock  # " FOR UPDATE" in PostgreSQL: the row stays as read until COMMIT

    def run(self, conn: Any, sql: str, params: Iterable[Any] = ()) -> Any:
        """Execute `sql` with its `?` markers in this driver's style."""
        return self.dialect.run(conn, sql, tuple(params))

    def live(self, conn: Any, note_id: str, lock: bool = False) -> tuple[main.Note, str] | None:
        """The note `note_id` and its body as stored now (locked for the transaction when asked)."""
        row = self.run(conn, f"{_ROW} WHERE id = ?" + (self.lock if lock else ""), (note_id,)).fetchone()
        return note_with_body(row)

    def create(self, conn: Any, record: Record, workspace: main.Path, title: str, body: str) -> main.Note | str:
        """Insert a new note at the first free place for its title in `workspace`; the refusal (audited) when none is
        free."""
        for place in new_place(workspace, title):
            uri = main.format_file_uri(place)
            if self.run(conn, "SELECT 1 FROM notes WHERE uri = ?", (uri,)).fetchone() is None:
                break
        else:
            record(audit.REFUSED, audit.Facts(None, title, None))
            return NO_PLACE
        note = main.Note("n-" + secrets.token_hex(NEW_ID_BYTES), title, uri, 1)
        self.run(
            conn,
            "INSERT INTO notes (id, title, uri, revision, folded, body, body_folded) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*note, title_index.index_key(note), body, body_key(body)),
        )
        record(audit.CREATED, audit.Facts(note.id, note.title, note.uri))
        return note

    def append(
        self, conn: Any, record: Record, note_id: str, text: str, check: Check, now: float = 0.0, trash: bool = False
    ) -> tuple[main.Note, str] | str:
        """Add `text` at the end of the note if `check` passes on it as it is now, the old version to the trash; else
        the refusal, audited."""
        found = self.live(conn, note_id, lock=True)
        if found is None or not check(*found):
            record(audit.REFUSED, audit.Facts(note_id))
            return CHANGED
        note, body = found
        if len((body + text).encode("utf-8")) > MAX_NOTE_BYTES:
            record(audit.REFUSED, audit.Facts(note.id, note.title, note.uri))
            return TOO_LONG
        entry = record(audit.APPENDED, audit.Facts(note.id, note.title, note.uri, audit.SQL_TRASH if trash else None))
        if trash:  # the version before the append, restorable like an update's
            self.keep(conn, entry, note, body, now)
        written = self._write(conn, note, body + text)
        return written, body + text

    def update(
        self, conn: Any, record: Record, note_id: str, body: str, check: Check, now: float, trash: bool
    ) -> main.Note | str:
        """Replace the body if `check` passes on the note as it is now, the old version to the trash; else the refusal,
        audited."""
        found = self.live(conn, note_id, lock=True)
        if found is None or not check(*found):
            record(audit.REFUSED, audit.Facts(note_id))
            return CHANGED
        note, old = found
        entry = record(audit.UPDATED, audit.Facts(note.id, note.title, note.uri, audit.SQL_TRASH if trash else None))
        if trash:
            self.keep(conn, entry, note, old, now)
        return self._write(conn, note, body)

    def move(
        self,
        conn: Any,
        record: Record,
        note_id: str,
        place: main.Path,
        check: Check,
        rewrites: tuple[stores.Rewrite, ...] = (),
        now: float = 0.0,
        trash: bool = False,
    ) -> main.Note | str:
        """Give the note the URI of `place` if `check` passes and no note is there, and write each rewrite as an update;
        else the refusal, audited."""
        found = self.live(conn, note_id, lock=True)
        if found is None or not check(*found):
            record(audit.REFUSED, audit.Facts(note_id))
            return CHANGED
        note, body = found
        uri = main.format_file_uri(place)
        refusal = self.place_refusal(conn, note, place)
        # Every note whose links the person saw rewritten is locked and re-checked before
        # anything is written: one changed since the form refuses the whole step.
        if refusal is None and not all(self.holds(conn, rid, rcheck) for rid, _, rcheck in rewrites):
            refusal = stores.LINKS_CHANGED
        if refusal is not None:
            record(audit.REFUSED, audit.Facts(note.id, note.title, note.uri))
            return refusal
        moved = note._replace(uri=uri, revision=note.revision + 1)
        self.run(
            conn,
            "UPDATE notes SET uri = ?, revision = ?, folded = ? WHERE id = ?",
            (uri, moved.revision, title_index.index_key(moved), note.id),
        )
        entry = record(audit.MOVED, audit.Facts(note.id, note.title, note.uri, audit.SQL_TRASH if trash else None))
        if trash:  # the note as it was, its old place with it: `audit restore` moves it back
            self.keep(conn, entry, note, body, now)
        for rid, body, rcheck in rewrites:  # each an update of its own: its old text to the trash, restorable alone
            self.update(conn, record, rid, body, rcheck, now, trash)
        return moved

    def holds(self, conn: Any, note_id: str, check: Check) -> bool:
        """True when the note `note_id`, locked for the transaction, passes `check` as it is now."""
        found = self.live(conn, note_id, lock=True)
        return found is not None and check(*found)

    def place_refusal(self, conn: Any, note: main.Note, place: main.Path) -> str | None:
        """Why `note` cannot take `place` in this database now: a URI no row may hold (stores.check_note), or a note
        there; else None."""
        # A row whose URI check_note refuses is skipped by every read (stores.stored_note):
        # moved there, the note would be in the database and out of every tool's reach.
        uri = main.format_file_uri(place)
        try:
            stores.check_note(note._replace(uri=uri))
        except ValueError:
            return UNREACHABLE
        if self.run(conn, "SELECT 1 FROM notes WHERE uri = ?", (uri,)).fetchone() is not None:
            return TAKEN
        return None

    def keep(self, conn: Any, entry: int, note: main.Note, body: str, now: float) -> None:
        """Put one version of a note in the trash under the audit entry that replaced it."""
        self.sql.keep(conn, entry, note, body, now)

    def delete(
        self,
        conn: Any,
        record: stores.Record,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
        now: float,
        trash: bool,
    ) -> main.Settlement:
        """notes_delete's change inside the claim's transaction: re-read `target` (id, version), re-check, trash or
        delete."""
        if target is None:
            return main.Settlement.CONSUMED
        note_id, version = target
        row = self.run(
            conn, "SELECT id, title, uri, revision FROM notes WHERE id = ?" + self.lock, (note_id,)
        ).fetchone()
        live = stores.stored_note(row) if row is not None else None
        # Time of check to time of use: the form was shown minutes ago; the note may have
        # been edited, moved out of the workspace, or the grant revoked since then.
        if live is None or live.version != version or not recheck(live):
            record(main.Settlement.CHANGED, audit.Facts(note_id))
            return main.Settlement.CHANGED
        entry = record(
            main.Settlement.DELETED, audit.Facts(live.id, live.title, live.uri, audit.SQL_TRASH if trash else None)
        )
        if trash:  # the row, with its body as stored (NULL stays NULL), to the trash under the entry
            self.run(
                conn,
                "INSERT INTO deleted_notes (audit_id, id, title, uri, revision, deleted_at, body)"
                " SELECT ?, ?, ?, ?, ?, ?, body FROM notes WHERE id = ?",
                (entry, *live, now, live.id),
            )
        self.run(conn, "DELETE FROM notes WHERE id = ?", (note_id,))
        return main.Settlement.DELETED

    def restore(self, conn: Any, entry_id: int, now: float) -> int:
        """Put a trashed row back, or undo an edit, and audit it (the restore entry's id); stores.StoreRefused if it
        cannot."""
        kept = self.sql.kept(conn, entry_id)
        if kept is None:
            raise stores.StoreRefused(
                f"entry {entry_id} has no note in the trash (not a trashed deletion, restored, or emptied)"
            )
        note, body = kept
        found = self.run(conn, f"{_ROW} WHERE id = ?", (note.id,)).fetchone()
        if self.sql.outcome(conn, entry_id) == audit.MOVED:
            return self.undo_move(conn, entry_id, now, note, note_with_body(found))
        if self.sql.outcome(conn, entry_id) in (audit.UPDATED, audit.APPENDED) and found is not None:
            return self.undo_update(conn, entry_id, now, main.Note(*found[:4]), found[4], body)
        if found is not None or self.run(conn, "SELECT 1 FROM notes WHERE uri = ?", (note.uri,)).fetchone() is not None:
            raise stores.StoreRefused(
                f"entry {entry_id}: a note now exists with id {note.id!r} or at its place; nothing restored"
            )
        # A new revision, as a file moved back out of a folder's trash gets one: with its old
        # revision, a form shown before the deletion (still unexpired, never answered) would
        # match the restored note again, and its accept would delete it a second time.
        note = note._replace(revision=secrets.randbits(audit.RESTORED_REVISION_BITS))
        # With the folded title and body the lookup indexes keep, as every store writes a note.
        self.run(
            conn,
            "INSERT INTO notes (id, title, uri, revision, folded, body, body_folded) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*note, title_index.index_key(note), body, body_key(body)),
        )
        self.sql.unkeep(conn, entry_id)
        return self.sql.insert_restore(conn, entry_id, now, audit.Facts(note.id, note.title, note.uri))

    def undo_move(
        self, conn: Any, entry_id: int, now: float, was: main.Note, found: tuple[main.Note, str] | None
    ) -> int:
        """Undo a move: the note, as it is now, back at the place it had, never over another note; its text stays as it
        is now."""
        if found is None:
            raise stores.StoreRefused(f"entry {entry_id}: the moved note is gone; nothing restored")
        live = found[0]
        if (
            live.uri != was.uri
            and self.run(conn, "SELECT 1 FROM notes WHERE uri = ?", (was.uri,)).fetchone() is not None
        ):
            raise stores.StoreRefused(
                f"entry {entry_id}: a note now takes the moved note's old place; nothing restored"
            )
        back = live._replace(
            uri=was.uri, revision=live.revision + 1
        )  # every version given out before is stale after it
        self.run(
            conn,
            "UPDATE notes SET uri = ?, revision = ?, folded = ? WHERE id = ?",
            (back.uri, back.revision, title_index.index_key(back), back.id),
        )
        self.sql.unkeep(conn, entry_id)
        return self.sql.insert_restore(conn, entry_id, now, audit.Facts(back.id, back.title, back.uri))

    def undo_update(
        self, conn: Any, entry_id: int, now: float, live: main.Note, current: str | None, kept: str | None
    ) -> int:
        """Undo an edit: the text the update replaced comes back, the text now in place goes to the trash under the
        restore's entry."""
        new_id = self.sql.insert_restore(
            conn, entry_id, now, audit.Facts(live.id, live.title, live.uri, audit.SQL_TRASH)
        )
        self.sql.keep(conn, new_id, live, current, now)
        # The next revision: every version a tool gave out before the restore is stale after it.
        self.run(
            conn,
            "UPDATE notes SET body = ?, body_folded = ?, revision = ? WHERE id = ?",
            (kept, body_key(kept), live.revision + 1, live.id),
        )
        self.sql.unkeep(conn, entry_id)
        return new_id

    def _write(self, conn: Any, note: main.Note, body: str) -> main.Note:
        """Store `body` as the note's text, with the next revision (so every version the tools gave out is stale)."""
        written = note._replace(revision=note.revision + 1)
        # The title of an SQL note is its own column: a body never renames it.
        self.run(
            conn,
            "UPDATE notes SET body = ?, body_folded = ?, revision = ? WHERE id = ?",
            (body, body_key(body), written.revision, note.id),
        )
        return written


class SqlTexts:
    """What both SQL stores' writes share: each is one transaction of the store's ledger around a BodySql statement."""

    ledger: ledger.SqlLedger
    retention: stores.Retention
    body: BodySql  # the store's driver's statements

    def consume(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """One transaction: claim the nonce; for `target` (id, version) re-read, re-check, trash (or delete); audit."""
        trash = self.retention.trash
        return self.ledger.consume_in(
            principal,
            nonce,
            expires_at,
            lambda conn, now, record: self.body.delete(conn, record, target, recheck, now, trash),
        )[0]

    def create_note(self, principal: str, workspace: main.Path, title: str, body: str) -> main.Note | str:
        """A new note in `workspace` (audited `created`), or why not (audited `refused`)."""
        return self.ledger.audited_in(
            principal, lambda conn, now, entry: self.body.create(conn, entry, workspace, title, body)
        )

    def append_note(
        self, principal: str, workspace: main.Path, note_id: str, text: str, check: Check
    ) -> tuple[main.Note, str] | str:
        """`text` added at the end if `check` passes on the live note (audited `appended`), or why not (audited
        `refused`)."""
        trash = self.retention.trash
        return self.ledger.audited_in(
            principal, lambda conn, now, entry: self.body.append(conn, entry, note_id, text, check, now, trash)
        )

    def update_note(
        self, principal: str, nonce: str, expires_at: float, workspace: main.Path, note_id: str, body: str, check: Check
    ) -> tuple[main.Settlement, main.Note | str | None]:
        """One transaction: claim the nonce, re-check the live note, keep its old text in the trash, write `body`;
        audited."""
        trash = self.retention.trash
        return self.ledger.act_in(
            principal,
            nonce,
            expires_at,
            lambda conn, now, entry: self.body.update(conn, entry, note_id, body, check, now, trash),
        )

    def move_note(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        workspace: main.Path,
        note_id: str,
        place: main.Path,
        check: Check,
        rewrites: tuple[stores.Rewrite, ...] = (),
    ) -> tuple[main.Settlement, main.Note | str | None]:
        """One transaction: claim the nonce, re-check the live note and every note to rewrite, move, rewrite their
        links; audited."""
        trash = self.retention.trash
        return self.ledger.act_in(
            principal,
            nonce,
            expires_at,
            lambda conn, now, entry: self.body.move(conn, entry, note_id, place, check, rewrites, now, trash),
        )

    def move_refusal(self, workspace: main.Path, note: main.Note, place: main.Path) -> str | None:
        """Why `note` cannot be moved to `place` here, read now (a URI over MAX_URI_LENGTH, a note there), or None;
        asked before any form."""
        return self.ledger.db.read_with(lambda conn: self.body.place_refusal(conn, note, place))

    def restore(self, entry_id: int) -> dict[str, Any]:
        """Put back what a `deleted` or `updated` entry trashed, and audit it; or StoreRefused."""
        return self.ledger.restore_in(lambda conn, now: self.body.restore(conn, entry_id, now))
