"""What the product's stores share: their errors, how a note is matched, checked and shown.

The lesson's memory store (code/main.py) scans a fixture it trusts. The product's stores
(memory from a config, SQLite, PostgreSQL, Markdown folders) read notes a person may have
written or edited by hand, so every note is checked before the server shows it
(check_note, blank_controls), every store matches titles alike (fold_title) and offers
them in one order (form_order). `MemoryStore` is the lesson's two memory stores joined
into one object with the product's seam (`candidates`, `is_consumed`, `consume`,
`settle`). Standard library only.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable
from typing import Protocol

import main

MAX_NOTE_ID_LENGTH = 128  # characters in a note id (keeps the signed state small)


class StoreUnavailable(main.ToolError):
    """The store cannot act now (busy, refused by the OS, too large): nothing changed; the message says why."""


class StoreLost(StoreUnavailable):
    """The store can no longer be trusted (its database was replaced): every change is refused from now on."""


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


def fold_title(text: str) -> str:
    """A title or query as matching compares it: Unicode NFC, then casefolded (as main.MemoryNotesStore does)."""
    # "café" typed (composed) must find "café" stored decomposed, as macOS names often are.
    return unicodedata.normalize("NFC", text).casefold()


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
        uri, title = main.normalize_file_uri(note.uri), blank_controls(note.title)
        checked[note.id] = note if (uri, title) == (note.uri, note.title) else note._replace(uri=uri, title=title)
    return list(checked.values())


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
