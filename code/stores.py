"""What the stores beside the lesson share: the errors they raise and how a stored row becomes a note.

The lesson's memory store (code/main.py) needs neither: it cannot be busy, cannot be
replaced under the server, and holds only notes it checked itself. The SQLite, PostgreSQL
and Markdown-folder stores raise these errors, and read rows a person may have edited by
hand, so every row is checked before the server shows it. Standard library only.
"""

from __future__ import annotations

import main


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
    note = main.Note(note_id, main.blank_controls(title), uri, revision)
    try:
        main.check_note(note)
    except ValueError:
        return None
    return note
