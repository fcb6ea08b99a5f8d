"""What the stores beside the lesson share: their one exception tree, their one transaction rule, the check of a stored row.

The lesson's memory store (code/main.py) needs none of it: it cannot be busy, cannot be
replaced under the server, and holds only notes it checked itself. The SQLite,
PostgreSQL and Markdown-folder stores raise only the classes below, and read rows a
person may have edited by hand, so every row is checked before the server shows it.

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
        +-- StoreBroken       a write failed and the database could not be reopened

The transaction rule, one for both SQL stores: a write transaction COMMITs when its body
returns and rolls back when the body raises anything. A refusal that must write nothing
(a replay, a full replay bound) raises Rollback(outcome): rolled back, then returned.
Standard library only.
"""

from __future__ import annotations

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
]

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
    """A write failed and the database could not be reopened: every later change is refused."""

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
    note = main.Note(note_id, main.blank_controls(title), uri, revision)
    try:
        main.check_note(note)
    except ValueError:
        return None
    return note
