"""What the indexed lookups of the SQL stores share: the workspace key range and the exact test.

An index only narrows the rows a lookup reads; it never decides. Every row it returns
passes the same test a plain scan applies (stores.fold_title containment, then main's
component-wise workspace containment), so an index that is stale or too generous can
cost time, never a wrong candidate.

The workspace key is the note's canonical file URI (main.format_file_uri). Components
are percent-encoded one by one and never hold a "/", so "strictly inside the folder
W" is exactly "the URI starts with W's URI plus '/'": `file:///A/Notes-evil/x.md` does
not start with `file:///A/Notes/`. That prefix is one range of an ordinary B-tree on
the URI (byte order: SQLite's BINARY, PostgreSQL's COLLATE "C"), from the prefix up to
the same prefix with its final "/" replaced by "0", the next byte.
Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable

import main
import stores

__all__ = [
    "MIN_INDEXED_QUERY",
    "exact",
    "exact_text",
    "index_key",
    "indexable",
    "rarest",
    "trigrams",
    "uri_range",
    "uses_title_index",
]

MIN_INDEXED_QUERY = 3  # characters (after folding) a trigram index can serve; shorter queries scan the workspace's rows
# folded characters of a title the trigram indexes hold; a longer one is tested by every lookup
MAX_INDEXED_TITLE_CHARS = 256


def uri_range(workspace: main.Path) -> tuple[str, str]:
    """[low, high) of the canonical URIs strictly inside `workspace` (byte order)."""
    low = main.format_file_uri(workspace)
    if not low.endswith("/"):
        low += "/"  # the separator: without it `.../Notes` would take in `.../Notes-evil`
    return low, low[:-1] + "0"  # "0" is the byte after "/"


def uses_title_index(needle: str) -> bool:
    """True when the folded query is long enough for a trigram index to narrow the rows."""
    return len(needle) >= MIN_INDEXED_QUERY


def exact(rows: Iterable[tuple[object, ...]], workspace: main.Path, needle: str) -> list[main.Note]:
    """The rows (id, title, uri, revision) a plain scan would offer for the folded `needle`, in form order."""
    found: dict[str, main.Note] = {}
    for row in rows:
        # The title test first (cheap, and in Python so it folds exactly like the memory
        # store), then main's component-wise containment: the index's range is only a hint.
        if isinstance(row[1], str) and needle in stores.fold_title(row[1]):
            note = stores.stored_note(row)
            if note is not None and main.inside_workspace(note, workspace):
                found[note.id] = note
    return stores.form_order(found.values())


def indexable(folded: str) -> bool:
    """True when a trigram index may hold the folded title `folded`: at most MAX_INDEXED_TITLE_CHARS characters."""
    # Each title costs an index one entry per distinct trigram, and a folded title has no
    # length bound of its own (SQL rows are any length; casefolding can triple one): 190
    # random CJK characters cost the folder index 44 kB. Past the bound a title is kept
    # off the index and tested by every lookup instead, so any part of it is still found.
    return len(folded) <= MAX_INDEXED_TITLE_CHARS


def exact_text(
    rows: Iterable[tuple[object, ...]], workspace: main.Path, needle: str, limit: int
) -> list[tuple[main.Note, str]]:
    """The rows (id, title, uri, revision, body) whose title or body holds the folded `needle`, inside `workspace`: at
    most `limit`, in form order."""
    found: dict[str, tuple[main.Note, str]] = {}
    for row in rows:
        body = row[4] if isinstance(row[4], str) else ""
        if isinstance(row[1], str) and (needle in stores.fold_title(row[1]) or needle in stores.fold_title(body)):
            note = stores.stored_note(row[:4])
            if note is not None and main.inside_workspace(note, workspace):
                found[note.id] = (note, body)
    ordered = stores.form_order(note for note, _ in found.values())
    return [found[note.id] for note in ordered[:limit]]


def index_key(note: main.Note) -> str | None:
    """The folded title an index keeps for `note`, or None (then every lookup tests it): a URI not canonical, a title
    too long."""
    # A row whose URI is spelled otherwise than main.format_file_uri would fall outside
    # the workspace's key range: None keeps it on the always-scanned list instead.
    try:
        canonical = stores.normalize_file_uri(note.uri) == note.uri
    except main.ScopeError:
        canonical = False
    if not canonical or not isinstance(note.title, str):
        return None
    folded = stores.fold_title(note.title)
    return folded if indexable(folded) else None


def trigrams(text: str) -> set[str]:
    """Every three-character piece of `text` (none when it is shorter)."""
    return {text[k : k + 3] for k in range(len(text) - 2)}


def rarest(needle: str, counts: dict[str, int], k: int) -> list[str]:
    """The `k` trigrams of `needle` the fewest titles hold by `counts` (unknown ones first); any of them finds every
    match."""
    return sorted(trigrams(needle), key=lambda gram: (counts.get(gram, 0), gram))[:k]
