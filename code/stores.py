"""The store family: one exception tree, one transaction rule, how a note is matched, checked and shown.

The lesson's memory store (code/main.py) needs none of it: it cannot be busy, cannot be
replaced under the server, and scans a fixture it trusts. The product's stores (memory
from a config, SQLite, PostgreSQL, Markdown folders) raise only the classes below, and read
notes a person may have written or edited by hand, so every note is checked before the
server shows it (check_note, blank_controls); every store matches titles alike
(fold_title) and offers them in one order (form_order). `MemoryStore` joins the lesson's
two memory stores into one object with the product's seam (`NotesStore`).

The exception tree, and the one outcome of each class (docs/stores.md, "Errors"):

    StoreError            the store cannot be opened as configured   start-up: one line, exit 2
    |                     (or, while serving, a database error it     serving: -32603 Internal error,
    |                     does not know: a bug, a hand-edited table)  nothing committed
    +-- StoreUnavailable  nothing changed; a retry may succeed        an isError result; serving goes on
    |   +-- StoreBusy         another writer held it past the budget; PostgreSQL unreachable or timed out
    |   +-- StoreWriteFailed  the OS refused a database write (the writer is reopened)
    |   +-- StoreRefused      the OS or the folder refused a file operation; a folder too large; a restore refused
    +-- StoreLost         the store can no longer be trusted          an isError result, then exit 1
        +-- StoreGone         its database file was removed, replaced or overwritten
        +-- StoreBroken       a write failed and the database could not be reopened, or its -shm cannot be written

The transaction rule, one for both SQL stores: a write transaction COMMITs when its body
returns and rolls back when the body raises anything. A refusal that must write nothing
(a replay, a full replay bound) raises Rollback(outcome): rolled back, then returned.
Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import main

__all__ = [
    "Rollback",
    "StoreBroken",
    "StoreBusy",
    "StoreError",
    "StoreGone",
    "StoreLost",
    "StoreRefused",
    "StoreUnavailable",
    "StoreWriteFailed",
    "stored_note",
    "normalize_file_uri",
    "MAX_NOTE_ID_LENGTH",
    "fold_title",
    "form_order",
    "check_note",
    "blank_controls",
    "checked_notes",
    "NotesStore",
    "SettleSeam",
    "MemoryStore",
]

MAX_NOTE_ID_LENGTH = 128  # characters in a note id (keeps the signed state small)

BUSY = "The notes database is busy; nothing was changed. Try again in a moment."
WRITE_FAILED = "The notes database could not be written; nothing was changed. Try again in a moment."
GONE = "The notes database file was removed or replaced while serving; refusing every change."
BROKEN = "The notes database could not be written or reopened while serving; refusing every change."


class StoreError(Exception):
    """The store cannot be used: raised as itself when it cannot be opened as configured; str() is one line for the operator."""


class StoreUnavailable(StoreError, main.ToolError):
    """The store cannot act now: nothing changed; the message says why, and a retry may succeed (an isError result)."""


class StoreLost(StoreError, main.ToolError):
    """The store can no longer be trusted: every change is refused from now on, and the server stops (exit 1)."""


class StoreBusy(StoreUnavailable):
    """Another writer held the database past this write's budget, or the database cannot be reached: nothing changed."""

    def __init__(self, message: str = BUSY) -> None:
        super().__init__(message)


class StoreWriteFailed(StoreUnavailable):
    """A write failed in the OS (read-only, I/O error, disk full): rolled back, the writer reopened; a retry may succeed."""

    def __init__(self) -> None:
        super().__init__(WRITE_FAILED)


class StoreRefused(StoreUnavailable):
    """The OS or the folder refused a file operation (the message says which): nothing was deleted, moved or restored."""


class StoreGone(StoreLost):
    """The database file was unlinked, replaced or overwritten while serving: every later change is refused."""

    def __init__(self) -> None:
        super().__init__(GONE)


class StoreBroken(StoreLost):
    """A write failed and the database could not be reopened, or its -shm cannot be written: every later change is refused."""

    def __init__(self) -> None:
        super().__init__(BROKEN)


class Rollback(Exception):
    """Raised inside a write transaction for a refusal that writes nothing: rolled back, then `outcome` is returned."""

    def __init__(self, outcome: main.Settlement) -> None:
        super().__init__(outcome.value)
        self.outcome = outcome


def stored_note(row: tuple[object, ...]) -> main.Note | None:
    """A database row (id, title, uri, revision) as a Note, or None when it could not be shown safely."""
    # A row edited by hand outside the server may hold anything: skip it, never repair it.
    note_id, title, uri, revision = row
    if not (isinstance(note_id, str) and isinstance(title, str) and isinstance(uri, str) and isinstance(revision, int)):
        return None
    note = main.Note(note_id, blank_controls(title), uri, revision)
    try:
        check_note(note)
    except ValueError:
        return None
    return note


def normalize_file_uri(uri: Any) -> str:
    """The one canonical spelling of a file URI (main.format_file_uri of main.parse_file_uri), or main.ScopeError."""
    return main.format_file_uri(main.parse_file_uri(uri))


def fold_title(text: str) -> str:
    """A title or query as matching compares it: the lesson's own rule, NFC then casefolded (main.MemoryNotesStore.fold)."""
    return main.MemoryNotesStore.fold(text)


def form_order(notes: Iterable[main.Note]) -> list[main.Note]:
    """Candidates in the order every store offers them: title (folded), then id."""
    return sorted(notes, key=lambda note: (fold_title(note.title), note.id))


def check_note(note: main.Note) -> None:
    """Refuse a note the server could not show safely: bad id, empty title, bad URI (ValueError)."""
    if not isinstance(note.id, str) or not 0 < len(note.id) <= MAX_NOTE_ID_LENGTH:
        raise ValueError(f"note id must be 1..{MAX_NOTE_ID_LENGTH} characters")
    if not isinstance(note.title, str) or not note.title.strip():
        raise ValueError(f"note {note.id!r} needs a non-empty title")
    try:
        main.parse_file_uri(note.uri)
    except main.ScopeError as exc:
        raise ValueError(f"note {note.id!r} uri {exc}") from None


def blank_controls(title: str) -> str:
    """`title` with every non-printable character (controls, bidi overrides) as a space."""
    # "\u202egnp.exe plan" shows as "plan exe.png": a user would confirm one name and delete another.
    return title if title.isprintable() else "".join(ch if ch.isprintable() else " " for ch in title)


def checked_notes(notes: Iterable[main.Note]) -> list[main.Note]:
    """Notes a store may hold: each passes check_note, ids are unique, URIs canonical, titles printable; else ValueError."""
    checked: dict[str, main.Note] = {}
    for note in notes:
        check_note(note)
        if note.id in checked:
            raise ValueError(f"duplicate note id {note.id!r}")
        uri, title = normalize_file_uri(note.uri), blank_controls(note.title)
        checked[note.id] = note if (uri, title) == (note.uri, note.title) else note._replace(uri=uri, title=title)
    return list(checked.values())


class SettleSeam:
    """What a store that keeps its notes and nonces together adds to the seam: `settle` and `deletion`."""

    retention: Any  # audit.Retention: deletion mode, trash and audit bounds

    @property
    def deletion(self) -> str:
        """What a deletion does here, as the form says it (trash and its days, or gone for good)."""
        return self.retention.said

    def settle(self, notes: object, principal: str, nonce: str, expires_at: float,
               target: tuple[str, str] | None, recheck: Callable[[main.Note], bool]) -> main.Settlement:
        """The lesson's atomic step (main.MemoryReplayStore.settle): this store holds the notes and the nonces, so `notes` is itself."""
        return self.consume(principal, nonce, expires_at, target, recheck)  # type: ignore[attr-defined]


class NotesStore(Protocol):
    """The product's store seam: what every store of the family offers the server."""

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """Notes strictly inside `workspace` whose title contains `title` (folded), in form_order."""
        ...

    def is_consumed(self, nonce: str) -> bool:
        """True when this nonce was consumed, on any instance, and its state has not expired."""
        ...

    def settle(self, notes: object, principal: str, nonce: str, expires_at: float,
               target: tuple[str, str] | None, recheck: Callable[[main.Note], bool]) -> main.Settlement:
        """The lesson's atomic step (main.MemoryReplayStore.settle): claim, re-read, re-check, delete; `notes` is the store itself."""
        ...


class MemoryStore:
    """The lesson's memory notes and replay stores as one product store: checked notes, the product's seam."""

    deletion = main.MemoryNotesStore.deletion  # a memory store keeps no trash

    def __init__(self, notes: Iterable[main.Note], replay: main.MemoryReplayStore) -> None:
        self.notes = main.MemoryNotesStore(checked_notes(notes))
        self.replay = replay
        self.lock = self.notes.lock  # what the atomic step holds from its re-read to its delete

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """As main.MemoryNotesStore.candidates."""
        return self.notes.candidates(workspace, title)

    def get(self, note_id: str) -> main.Note | None:
        """As main.MemoryNotesStore.get."""
        return self.notes.get(note_id)

    def is_consumed(self, nonce: str) -> bool:
        """As main.MemoryReplayStore.is_consumed."""
        return self.replay.is_consumed(nonce)

    def settle(self, notes: object, principal: str, nonce: str, expires_at: float,
               target: tuple[str, str] | None, recheck: Callable[[main.Note], bool]) -> main.Settlement:
        """The atomic step: main.MemoryReplayStore.settle over this store's notes (`notes` is this store)."""
        return self.replay.settle(self.notes, principal, nonce, expires_at, target, recheck)

    def consume(self, principal: str, nonce: str, expires_at: float,
                target: tuple[str, str] | None, recheck: Callable[[main.Note], bool]) -> main.Settlement:
        """The atomic step, as every product store names it."""
        return self.settle(self, principal, nonce, expires_at, target, recheck)

    def all(self) -> list[main.Note]:
        """Every note, in id order."""
        return self.notes.all()

    def put(self, note: main.Note) -> None:
        """Insert or replace a checked note."""
        (checked,) = checked_notes([note])
        self.notes.put(checked)

    def remove(self, note_id: str) -> None:
        """Delete a note outside any confirmation."""
        self.notes.remove(note_id)
