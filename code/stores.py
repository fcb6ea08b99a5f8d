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

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, cast

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
    "LINKS_CHANGED",
    "fold_title",
    "form_order",
    "check_note",
    "blank_controls",
    "checked_notes",
    "Check",
    "Confirmations",
    "MAX_PASSKEYS_PER_PRINCIPAL",
    "Passkey",
    "Passkeys",
    "DAY_SECONDS",
    "DECISION_PENDING",
    "DEFAULT_AUDIT_DAYS",
    "DEFAULT_AUDIT_MAX_ENTRIES",
    "DEFAULT_TRASH_DAYS",
    "DELETION_TRASH",
    "DELETION_UNLINK",
    "Decision",
    "Entry",
    "Facts",
    "Ledger",
    "MAX_PENDING_PER_PRINCIPAL",
    "MemoryStore",
    "NotesStore",
    "Record",
    "Retention",
    "Rewrite",
    "SQL_TRASH",
    "SettleSeam",
    "Store",
    "Texts",
    "store_of",
]

T = TypeVar("T")

MAX_NOTE_ID_LENGTH = 128  # characters in a note id (keeps the signed state small)

BUSY = "The notes database is busy; nothing was changed. Try again in a moment."
WRITE_FAILED = "The notes database could not be written; nothing was changed. Try again in a moment."
GONE = "The notes database file was removed or replaced while serving; refusing every change."
LINKS_CHANGED = (
    "A note whose links the move would rewrite changed, moved or was deleted since you were shown it; nothing was "
    "moved or rewritten. Ask again."
)
BROKEN = "The notes database could not be written or reopened while serving; refusing every change."


class StoreError(Exception):
    """The store cannot be used: raised as itself when it cannot be opened as configured; str() is one line for the
    operator."""


class StoreUnavailable(StoreError, main.ToolError):
    """The store cannot act now: nothing changed; the message says why, and a retry may succeed (an isError result)."""


class StoreLost(StoreError, main.ToolError):
    """The store can no longer be trusted: every change is refused from now on, and the server stops (exit 1)."""


class StoreBusy(StoreUnavailable):
    """Another writer held the database past this write's budget, or the database cannot be reached: nothing changed."""

    def __init__(self, message: str = BUSY) -> None:
        super().__init__(message)


class StoreWriteFailed(StoreUnavailable):
    """A write failed in the OS (read-only, I/O error, disk full): rolled back, the writer reopened; a retry may
    succeed."""

    def __init__(self) -> None:
        super().__init__(WRITE_FAILED)


class StoreRefused(StoreUnavailable):
    """The OS or the folder refused a file operation (the message says which): nothing was deleted, moved or
    restored."""


class StoreGone(StoreLost):
    """The database file was unlinked, replaced or overwritten while serving: every later change is refused."""

    def __init__(self) -> None:
        super().__init__(GONE)


class StoreBroken(StoreLost):
    """A write failed and the database could not be reopened, or its -shm cannot be written: every later change is
    refused."""

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
    """A title or query as matching compares it: the lesson's own rule, NFC then casefolded
    (main.MemoryNotesStore.fold)."""
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
    """Notes a store may hold: each passes check_note, ids are unique, URIs canonical, titles printable; else
    ValueError."""
    checked: dict[str, main.Note] = {}
    for note in notes:
        check_note(note)
        if note.id in checked:
            raise ValueError(f"duplicate note id {note.id!r}")
        uri, title = normalize_file_uri(note.uri), blank_controls(note.title)
        checked[note.id] = note if (uri, title) == (note.uri, note.title) else note._replace(uri=uri, title=title)
    return list(checked.values())


# =====================================================================================
# What a deletion does, and what a store knows about a note it acted on
# =====================================================================================

DELETION_TRASH = "trash"
DELETION_UNLINK = "unlink"
DAY_SECONDS = 86_400.0
DEFAULT_TRASH_DAYS = 30.0  # a trashed note is emptied this long after its deletion
DEFAULT_AUDIT_DAYS = 365.0  # an entry is pruned this long after it was written
DEFAULT_AUDIT_MAX_ENTRIES = 100_000  # at most this many entries are kept per principal (its newest)
MEMORY_AUDIT_MAX_ENTRIES = (
    1_000  # the memory ledger keeps a principal's newest this many: it lives in the process's memory
)
DEFAULT_AUDIT_MAX_REFUSALS = (
    1_000  # `refused` entries kept per principal (its newest), counted apart from its other entries
)
KEPT_FILE_GRACE_SECONDS = (
    86_400.0  # an entry naming a trash file outlives trashDays by this: the ledger cannot look in the folder
)
SQL_TRASH = (
    "deleted_notes"  # the `trash` value of a row moved to the deleted-notes table (any other value names a file)
)


class Retention(NamedTuple):
    """How deletion works and how long what it leaves is kept."""

    deletion: str = DELETION_TRASH  # "trash" (default) or "unlink" (as before: gone at once)
    trash_seconds: float = DEFAULT_TRASH_DAYS * DAY_SECONDS
    audit_seconds: float = DEFAULT_AUDIT_DAYS * DAY_SECONDS
    max_entries: int = DEFAULT_AUDIT_MAX_ENTRIES  # per principal, refusals not counted
    max_refusals: int = DEFAULT_AUDIT_MAX_REFUSALS  # per principal: refusals have a bound of their own

    @property
    def refusals_kept(self) -> int:
        """How many of a principal's `refused` entries are kept (its newest): their own bound, never above
        max_entries."""
        return min(self.max_entries, self.max_refusals)

    def files_kept_after(self, now: float) -> float:
        """An entry naming a trash file and written after this time may still have its file: pruning passes it by."""
        return now - self.trash_seconds - KEPT_FILE_GRACE_SECONDS

    @property
    def trash(self) -> bool:
        """True when a deletion moves the note to the trash."""
        return self.deletion == DELETION_TRASH

    @property
    def said(self) -> str:
        """What a deletion does, in the words the form shows the user."""
        if self.trash:
            days = self.trash_seconds / DAY_SECONDS
            return f"The note is moved to the trash; an operator can restore it for {days:g} days."
        return "Deletion cannot be undone."


class Facts(NamedTuple):
    """What a store knows about the note a consumption acted on (all optional)."""

    note_id: str | None = None
    title: str | None = None
    uri: str | None = None
    trash: str | None = None
    file_identity: str | None = None  # folders: JSON naming the file written or moved (code/markdown_store.py)


Check = Callable[[main.Note, str], bool]  # a note tool's live re-check: (note, text) -> still the one asked about?
Rewrite = tuple[
    str, str, Check
]  # a move's rewrite of another note's links: (its id, its new text, its re-check at the version shown)
Entry = Callable[[str, Facts], int]  # writes this call's audit entry (outcome, facts) -> its id
Record = Callable[
    ..., int
]  # inside consume_with: record(settlement, facts=Facts(), pending=False, outcome=None) -> entry id


# =====================================================================================
# The confirmation page's decisions (code/browser_confirm.py): one per nonce
# =====================================================================================

MAX_PENDING_PER_PRINCIPAL = 20  # undecided confirmation pages one principal may hold
DECISION_PENDING = "pending"


class Decision(NamedTuple):
    """One confirmation page: whose, for which arguments, until when, and what the person decided."""

    handle: str  # the random part of the link
    nonce: str  # the signed token's nonce
    principal: str
    workspace: str  # canonical workspaceUri
    title: str
    expires_at: float
    status: str = DECISION_PENDING
    note_id: str | None = None  # approved: the note chosen, and the version shown
    version: str | None = None
    decided_by: str | None = None  # the principal signed in on the page
    decided_at: float | None = None
    tool: str = main.TOOL_NAME  # the tool that asked (its page is rendered by that tool's kind)
    detail: str | None = None  # JSON: what a note tool's page shows (the note, its version, the new text or place)
    decided_with: str | None = None  # the passkey (credential id) whose assertion approved, when one did


class Confirmations(Protocol):
    """The page's decisions, shared by every instance serving the same store."""

    def open(self, record: Decision) -> bool:
        """Keep a new pending record; False when its principal holds MAX_PENDING_PER_PRINCIPAL undecided ones."""
        ...

    def by_handle(self, handle: str) -> Decision | None:
        """The unexpired record of this link, or None."""
        ...

    def by_nonce(self, nonce: str) -> Decision | None:
        """The unexpired record of this token's nonce, or None."""
        ...

    def decide(
        self,
        handle: str,
        principal: str,
        status: str,
        note_id: str | None,
        version: str | None,
        credential: str | None = None,
    ) -> bool:
        """Pending -> approved or declined, once, by its own principal (with the passkey that approved), before expiry;
        False otherwise."""
        ...


class MemoryConfirmations:
    """Confirmations in a dict under one lock (the memory store: this process only)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._records: dict[str, Decision] = {}  # handle -> record
        self._lock = threading.Lock()

    def _prune(self, now: float) -> None:
        for handle in [h for h, record in self._records.items() if not now < record.expires_at]:
            del self._records[handle]

    def open(self, record: Decision) -> bool:
        """As Confirmations.open."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            pending = sum(
                1 for r in self._records.values() if r.principal == record.principal and r.status == DECISION_PENDING
            )
            if pending >= MAX_PENDING_PER_PRINCIPAL:
                return False
            self._records[record.handle] = record
            return True

    def by_handle(self, handle: str) -> Decision | None:
        """As Confirmations.by_handle."""
        with self._lock:
            self._prune(self.clock())
            return self._records.get(handle)

    def by_nonce(self, nonce: str) -> Decision | None:
        """As Confirmations.by_nonce."""
        with self._lock:
            self._prune(self.clock())
            return next((r for r in self._records.values() if r.nonce == nonce), None)

    def decide(
        self,
        handle: str,
        principal: str,
        status: str,
        note_id: str | None,
        version: str | None,
        credential: str | None = None,
    ) -> bool:
        """As Confirmations.decide."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            record = self._records.get(handle)
            # Checked under the lock: two tabs pressing Move to trash and Keep race here.
            if record is None or record.status != DECISION_PENDING or record.principal != principal:
                return False
            self._records[handle] = record._replace(
                status=status,
                note_id=note_id,
                version=version,
                decided_by=principal,
                decided_at=now,
                decided_with=credential,
            )
            return True


# =====================================================================================
# Passkeys: the WebAuthn credentials people approve with on the page (code/passkey_pages.py)
# =====================================================================================

MAX_PASSKEYS_PER_PRINCIPAL = 10  # registered passkeys one principal may hold; a sign-in in a loop cannot grow the table


class Passkey(NamedTuple):
    """One registered WebAuthn credential: whose, its public key (COSE, base64url) and the authenticator's last sign
    count."""

    credential_id: str  # base64url, as the browser names it
    principal: str
    public_key: str  # the COSE key, base64url
    sign_count: int
    created_at: float
    last_used_at: float | None
    label: str  # what the person typed when registering it


class Passkeys(Protocol):
    """The registered passkeys, shared by every instance serving the same store."""

    def add(self, passkey: Passkey) -> bool:
        """Keep a new credential; False when its id is taken or its principal holds MAX_PASSKEYS_PER_PRINCIPAL."""
        ...

    def get(self, credential_id: str) -> Passkey | None:
        """The credential with this id, or None."""
        ...

    def of(self, principal: str | None = None) -> list[Passkey]:
        """Every credential (of one principal when given), oldest first."""
        ...

    def use(self, credential_id: str, sign_count: int, at: float) -> bool:
        """Record an assertion's sign count, once: False when the stored count is not lower (a replayed or cloned
        assertion)."""
        ...

    def remove(self, credential_id: str) -> bool:
        """Forget a credential; False when there was none."""
        ...


def _counter_advances(stored: int, given: int) -> bool:
    """WebAuthn's sign-count rule: a count that is used must grow; an authenticator that keeps none (0 and 0) passes."""
    return given > stored or (given == 0 and stored == 0)


class MemoryPasskeys:
    """Passkeys in a dict under one lock (the memory store: this process only)."""

    def __init__(self) -> None:
        self._keys: dict[str, Passkey] = {}
        self._lock = threading.Lock()

    def add(self, passkey: Passkey) -> bool:
        """As Passkeys.add."""
        with self._lock:
            held = sum(1 for key in self._keys.values() if key.principal == passkey.principal)
            if passkey.credential_id in self._keys or held >= MAX_PASSKEYS_PER_PRINCIPAL:
                return False
            self._keys[passkey.credential_id] = passkey
            return True

    def get(self, credential_id: str) -> Passkey | None:
        """As Passkeys.get."""
        with self._lock:
            return self._keys.get(credential_id)

    def of(self, principal: str | None = None) -> list[Passkey]:
        """As Passkeys.of."""
        with self._lock:
            return [key for key in self._keys.values() if principal is None or key.principal == principal]

    def use(self, credential_id: str, sign_count: int, at: float) -> bool:
        """As Passkeys.use."""
        with self._lock:
            key = self._keys.get(credential_id)
            if key is None or not _counter_advances(key.sign_count, sign_count):
                return False
            self._keys[credential_id] = key._replace(sign_count=sign_count, last_used_at=at)
            return True

    def remove(self, credential_id: str) -> bool:
        """As Passkeys.remove."""
        with self._lock:
            return self._keys.pop(credential_id, None) is not None


# =====================================================================================
# The interfaces
# =====================================================================================


class Ledger(Protocol):
    """What every confirmation writes, in one atomic step with the note's re-check and change.

    The consumed nonce, the audit entry, the kept text or trash row, and the confirmation
    page's decisions. SQLite and PostgreSQL build theirs on their own transaction
    (code/ledger.py, `SqlLedger`); the folder store takes one in an SQLite file of its own;
    the memory store keeps one in memory (`MemoryLedger`).
    """

    retention: Retention  # deletion mode, trash and audit bounds

    def is_consumed(self, nonce: str) -> bool:
        """True when this nonce was consumed, on any instance, and its state has not expired."""
        ...

    def consume_with(
        self, principal: str, nonce: str, expires_at: float, act: Callable[[Record], main.Settlement]
    ) -> tuple[main.Settlement, int | None]:
        """One atomic step: claim the nonce, run `act(record)` (the re-check and change), write the audit entry.

        USED and FULL write nothing (None for the entry); `act` raising undoes the claim.
        """
        ...

    def consume_act(
        self, principal: str, nonce: str, expires_at: float, act: Callable[[Entry], T]
    ) -> tuple[main.Settlement, T | None]:
        """consume_with for a note tool's write: CONSUMED with what `act` returned (CHANGED for a refusal, a str), or
        USED/FULL with None."""
        ...

    def audited(self, principal: str, act: Callable[[Entry], T]) -> T:
        """One atomic step without a nonce: `act(entry)` writes and calls entry(outcome, facts) for its audit entry."""
        ...

    def audit_refusal(self, principal: str, facts: Facts) -> None:
        """One `refused` entry for `principal` (a call refused before any store step)."""
        ...

    def release(self, nonce: str, entry_id: int) -> None:
        """Undo a committed claim and its pending entry (the OS refused the file operation): the state stays usable."""
        ...

    def complete_audit(self, entry_id: int, outcome: str, expected: str) -> None:
        """Set an entry's outcome if it still says `expected` (pending or consumed)."""
        ...

    def audit_entries(
        self, principal: str | None = None, since: float | None = None, outcome: str | None = None
    ) -> list[dict[str, Any]]:
        """Audit entries matching every filter given, oldest first."""
        ...

    def audit_entry(self, entry_id: int) -> dict[str, Any] | None:
        """One audit entry by id, or None."""
        ...

    def record_restore(self, entry_id: int, facts: Facts) -> dict[str, Any]:
        """Write the entry saying an operator restored `entry_id` (the store put the note back); the new entry."""
        ...

    def decisions(self, clock: Callable[[], float]) -> Confirmations:
        """Where the confirmation page's decisions are kept, beside the nonces (every instance sees them)."""
        ...

    def passkeys(self) -> Passkeys:
        """The registered passkeys, beside the decisions (every instance sees them)."""
        ...

    def now(self) -> float:
        """The ledger's clock."""
        ...

    def stage(self, name: str) -> None:
        """Run the test-only hook at a stage outside the atomic step (the folder store's move)."""
        ...

    def close(self) -> None:
        """Free what the ledger holds (SQLite checkpoints its log); later calls do nothing."""
        ...


class NotesStore(Protocol):
    """The lesson's seam (main.Services.notes and .replay): what notes_delete uses."""

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """Notes strictly inside `workspace` whose title contains `title` (folded), in form_order."""
        ...

    def is_consumed(self, nonce: str) -> bool:
        """True when this nonce was consumed, on any instance, and its state has not expired."""
        ...

    def settle(
        self,
        notes: object,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """The lesson's atomic step (main.MemoryReplayStore.settle): claim, re-read, re-check, delete; `notes` is the
        store itself."""
        ...


class NotesReader(Protocol):
    """The read side of notes: candidates by title, one note with its text, a search of titles and texts."""

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """Notes strictly inside `workspace` whose title contains `title` (folded), in form_order."""
        ...

    def search_text(
        self, workspace: main.Path, query: str, limit: int, offset: int = 0
    ) -> tuple[list[tuple[main.Note, str]], bool]:
        """Notes strictly inside `workspace` holding every term of `query` (code/text_index.py), ranked, `limit` from
        `offset`; and whether its row bound was met."""
        ...

    def note_text(self, note_id: str, workspace: main.Path) -> tuple[main.Note, str] | None:
        """The note `note_id` and its text, as stored now (the caller checks the workspace)."""
        ...


class NotesWriter(Protocol):
    """The write side of notes, each write audited in the store's ledger."""

    def create_note(self, principal: str, workspace: main.Path, title: str, body: str) -> main.Note | str:
        """A new note in `workspace` (audited `created`), or why not (audited `refused`)."""
        ...

    def append_note(
        self, principal: str, workspace: main.Path, note_id: str, text: str, check: Check
    ) -> tuple[main.Note, str] | str:
        """`text` added at the end if `check` passes on the live note (audited `appended`), or why not."""
        ...

    def update_note(
        self, principal: str, nonce: str, expires_at: float, workspace: main.Path, note_id: str, body: str, check: Check
    ) -> tuple[main.Settlement, main.Note | str | None]:
        """Replace the text, in one atomic step with the claim; the old text kept in the trash (audited `updated`)."""
        ...

    def move_note(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        workspace: main.Path,
        note_id: str,
        place: main.Path,
        check: Check,
        rewrites: tuple[Rewrite, ...] = (),
    ) -> tuple[main.Settlement, main.Note | str | None]:
        """Give the note the place `place` if free, with the claim (audited `moved`); each rewrite's note re-checked
        first, then written as an update."""
        ...

    def consume(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """The atomic step of notes_delete: claim; for `target` (id, version) re-read, re-check, trash (or delete)."""
        ...

    def move_refusal(self, workspace: main.Path, note: main.Note, place: main.Path) -> str | None:
        """Why `note` cannot be moved to `place` now (asked before any form or page), or None."""
        ...

    def restore(self, entry_id: int) -> dict[str, Any]:
        """Put back what the entry `entry_id` trashed (a note, or an edit's old text), audited; StoreRefused if it
        cannot."""
        ...


class Texts(NotesReader, NotesWriter, Protocol):
    """A store that keeps note texts: both sides (the note tools need it)."""


class Store(NotesStore, Protocol):
    """What the product's server holds: the lesson's seam, a ledger, and its declared capabilities."""

    @property
    def deletion(self) -> str:
        """What a deletion does here, as the form says it."""
        ...

    @property
    def ledger(self) -> Ledger:
        """The store's ledger: nonces, audit, trash rows, the page's decisions."""
        ...

    @property
    def texts(self) -> Texts | None:
        """Declared: the store's text side, or None (the memory store keeps no text)."""
        ...

    def consume(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """The atomic step, as every product store names it."""
        ...

    def audit_refusal(self, principal: str, facts: Facts) -> None:
        """One `refused` entry in the store's ledger for a call refused before any store step."""
        ...

    def restore(self, entry_id: int) -> dict[str, Any]:
        """Put back what the entry `entry_id` trashed, audited; StoreRefused if it cannot (the memory store never
        trashes)."""
        ...

    def audit_entries(
        self, principal: str | None = None, since: float | None = None, outcome: str | None = None
    ) -> list[dict[str, Any]]:
        """The audit entries matching every filter given, oldest first (the folder store completes pending ones
        first)."""
        ...

    def count(self, workspace: main.Path) -> int:
        """How many notes the store offers in `workspace`."""
        ...

    def preview(self, note: main.Note) -> tuple[float, list[str]] | None:
        """When the note last changed and its first lines, where the store has them; else None."""
        ...

    def describe(self) -> str | list[str]:
        """For the start-up report: one line (the SQL stores: which lookup indexes serve), or lines (a folder
        walk's)."""
        ...

    def close(self) -> None:
        """Free the store at shutdown (SQLite checkpoints its log into the database file)."""
        ...


# main.Services types its `notes` and `replay` slots as the lesson's memory classes; the
# product puts any store of the family there. These two read and write those slots typed
# as the product's interfaces (frame.notes_server fills them when it builds a server).
def store_of(services: main.Services) -> Store:
    """The product's store in the lesson's Services."""
    return cast(Store, services.notes)


L = TypeVar("L", bound="Ledger")


class SettleSeam(Generic[L]):
    """What every product store shares around its own `candidates` and `consume`: the lesson's `settle`, the ledger's
    reads."""

    retention: Retention  # deletion mode, trash and audit bounds (the store's ledger prunes by them too)
    ledger: L

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """Each store's own lookup."""
        raise NotImplementedError

    @property
    def deletion(self) -> str:
        """What a deletion does here, as the form says it (trash and its days, or gone for good)."""
        return self.retention.said

    def consume(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """The atomic step (each store's own)."""
        raise NotImplementedError

    def settle(
        self,
        notes: object,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """The lesson's atomic step (main.MemoryReplayStore.settle): this store holds the notes and the nonces, so
        `notes` is itself."""
        return self.consume(principal, nonce, expires_at, target, recheck)

    def is_consumed(self, nonce: str) -> bool:
        """True when this confirmation was consumed by any instance sharing the ledger, and not yet pruned."""
        return self.ledger.is_consumed(nonce)

    def audit_refusal(self, principal: str, facts: Facts) -> None:
        """One `refused` entry for `principal` (a call refused before any store step)."""
        self.ledger.audit_refusal(principal, facts)

    def audit_entries(
        self, principal: str | None = None, since: float | None = None, outcome: str | None = None
    ) -> list[dict[str, Any]]:
        """The ledger's audit entries matching every filter given, oldest first."""
        return self.ledger.audit_entries(principal, since, outcome)

    def count(self, workspace: main.Path) -> int:
        """How many notes `workspace` holds (every title contains "")."""
        return len(self.candidates(workspace, ""))

    def preview(self, note: main.Note) -> tuple[float, list[str]] | None:
        """None: the store keeps no file whose time and first lines it could show."""
        return None


# =====================================================================================
# The memory store and its ledger
# =====================================================================================


class MemoryLedger:
    """The Ledger in memory: the lesson's replay store for the nonces, an audit list, the page's decisions in a dict."""

    def __init__(
        self, replay: main.MemoryReplayStore, clock: Callable[[], float], retention: Retention = Retention()
    ) -> None:
        self.replay = replay
        self.retention = retention
        self._clock = clock
        self._entries: dict[int, dict[str, Any]] = {}  # id -> entry, in id order
        self._refusals: set[int] = set()  # the ids of entries written as `refused`: counted apart
        self._next = 1
        self._decisions: MemoryConfirmations | None = None
        self._passkeys = MemoryPasskeys()

    def is_consumed(self, nonce: str) -> bool:
        """As main.MemoryReplayStore.is_consumed."""
        return self.replay.is_consumed(nonce)

    def _write(self, principal: str, outcome: str, facts: Facts, restores: int | None = None) -> int:
        """One entry (the replay lock held), then the age and per-principal bounds, as the SQL ledgers apply them."""
        now = self.now()
        entry_id, self._next = self._next, self._next + 1
        self._entries[entry_id] = {
            "id": entry_id,
            "at": now,
            "principal": principal,
            "outcome": outcome,
            "note_id": facts.note_id,
            "title": facts.title,
            "uri": facts.uri,
            "trash": facts.trash,
            "restores": restores,
            "file_identity": facts.file_identity,
        }
        if outcome == "refused":
            self._refusals.add(entry_id)
        self._prune(now, principal)
        return entry_id

    def _prune(self, now: float, principal: str) -> None:
        """Entries past the age bound, and `principal`'s past its two count bounds, except those whose kept text may
        still exist."""
        # The rules of ledger.AuditSql.prune: refusals are counted apart from other entries,
        # so a loop of refused calls cannot push out an entry `audit restore` needs.
        files_after = self.retention.files_kept_after(now)
        gone = [key for key, entry in self._entries.items() if entry["at"] <= now - self.retention.audit_seconds]
        for refusals, bound in ((False, self.retention.max_entries), (True, self.retention.refusals_kept)):
            mine = [
                key
                for key, entry in self._entries.items()
                if entry["principal"] == principal and (key in self._refusals) == refusals
            ]
            gone += mine[: max(0, len(mine) - bound)]
        for key in dict.fromkeys(gone):  # once each: an entry may be past both bounds
            trash = self._entries[key]["trash"]
            if (
                trash in (None, SQL_TRASH) or self._entries[key]["at"] <= files_after
            ):  # no trash row here: a file, or nothing
                self._drop(key)

    def _drop(self, entry_id: int) -> None:
        """Forget one entry (absent: nothing)."""
        self._entries.pop(entry_id, None)
        self._refusals.discard(entry_id)

    def consume_with(
        self, principal: str, nonce: str, expires_at: float, act: Callable[[Record], main.Settlement]
    ) -> tuple[main.Settlement, int | None]:
        """As Ledger.consume_with, under the replay store's lock: a raise releases the claim and drops the entries."""
        with self.replay.lock:
            claim = self.replay.claim(principal, nonce, expires_at)
            if claim is not main.Settlement.CONSUMED:
                return claim, None
            entries: list[int] = []

            def record(
                settlement: main.Settlement, facts: Facts = Facts(), pending: bool = False, outcome: str | None = None
            ) -> int:
                entries.append(self._write(principal, outcome or _outcome(settlement, pending), facts))
                return entries[-1]

            try:
                settled = act(record)
                if not entries:
                    record(settled)
            except BaseException:
                self.replay.release(nonce)
                for entry_id in entries:
                    self._drop(entry_id)
                raise
            return settled, entries[0]

    def consume_act(
        self, principal: str, nonce: str, expires_at: float, act: Callable[[Entry], T]
    ) -> tuple[main.Settlement, T | None]:
        """As Ledger.consume_act."""
        done: list[T] = []

        def run(record: Record) -> main.Settlement:
            done.append(act(lambda outcome, facts: record(main.Settlement.CONSUMED, facts, outcome=outcome)))
            return main.Settlement.CHANGED if isinstance(done[0], str) else main.Settlement.CONSUMED

        settlement, _ = self.consume_with(principal, nonce, expires_at, run)
        return settlement, (done[0] if done else None)

    def audited(self, principal: str, act: Callable[[Entry], T]) -> T:
        """As Ledger.audited, under the replay store's lock."""
        with self.replay.lock:
            return act(lambda outcome, facts: self._write(principal, outcome, facts))

    def audit_refusal(self, principal: str, facts: Facts) -> None:
        """As Ledger.audit_refusal."""
        self.audited(principal, lambda entry: entry("refused", facts))

    def release(self, nonce: str, entry_id: int) -> None:
        """As Ledger.release."""
        with self.replay.lock:
            self.replay.release(nonce)
            if self._entries.get(entry_id, {}).get("outcome") == "pending":
                self._drop(entry_id)

    def complete_audit(self, entry_id: int, outcome: str, expected: str) -> None:
        """As Ledger.complete_audit."""
        with self.replay.lock:
            entry = self._entries.get(entry_id)
            if entry is not None and entry["outcome"] == expected:
                entry["outcome"] = outcome

    def audit_entries(
        self, principal: str | None = None, since: float | None = None, outcome: str | None = None
    ) -> list[dict[str, Any]]:
        """As Ledger.audit_entries."""
        with self.replay.lock:
            return [
                dict(entry)
                for entry in self._entries.values()
                if (principal is None or entry["principal"] == principal)
                and (since is None or entry["at"] >= since)
                and (outcome is None or entry["outcome"] == outcome)
            ]

    def audit_entry(self, entry_id: int) -> dict[str, Any] | None:
        """As Ledger.audit_entry."""
        with self.replay.lock:
            entry = self._entries.get(entry_id)
            return dict(entry) if entry is not None else None

    def record_restore(self, entry_id: int, facts: Facts) -> dict[str, Any]:
        """As Ledger.record_restore."""
        with self.replay.lock:
            new_id = self._write("(operator)", "restored", facts, restores=entry_id)
            return dict(self._entries[new_id])

    def decisions(self, clock: Callable[[], float]) -> Confirmations:
        """The page's decisions in memory (this process only): one set per ledger, on the clock first given."""
        with self.replay.lock:
            if self._decisions is None:
                self._decisions = MemoryConfirmations(clock)
            return self._decisions

    def passkeys(self) -> Passkeys:
        """The passkeys in memory (this process only)."""
        return self._passkeys

    def now(self) -> float:
        """The ledger's clock."""
        return self._clock()

    def stage(self, name: str) -> None:
        """Nothing to pause here (no process to crash between steps)."""

    def close(self) -> None:
        """Nothing to free."""


def _outcome(settlement: main.Settlement, pending: bool) -> str:
    """The outcome an entry is written with (as audit.outcome_of, which builds on this module)."""
    if pending:
        return "pending"
    return {main.Settlement.DELETED: "deleted", main.Settlement.CHANGED: "refused"}.get(settlement, "consumed")


class MemoryStore(SettleSeam[Ledger]):
    """The lesson's memory notes and replay stores as one product store: checked notes, the product's seam, a memory
    ledger."""

    deletion = main.MemoryNotesStore.deletion  # a memory store keeps no trash
    texts: Texts | None = None  # the memory store keeps titles and places, no text

    def __init__(
        self, notes: Iterable[main.Note], replay: main.MemoryReplayStore, clock: Callable[[], float] = time.time
    ) -> None:
        self.notes = main.MemoryNotesStore(checked_notes(notes))
        self.replay = replay
        # `clock` dates its audit entries; a principal calling in a loop holds at most
        # MEMORY_AUDIT_MAX_ENTRIES of them in this process's memory.
        self.ledger: Ledger = MemoryLedger(replay, clock, Retention(max_entries=MEMORY_AUDIT_MAX_ENTRIES))
        self.lock = self.notes.lock  # what the atomic step holds from its re-read to its delete

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """As main.MemoryNotesStore.candidates."""
        return self.notes.candidates(workspace, title)

    def get(self, note_id: str) -> main.Note | None:
        """As main.MemoryNotesStore.get."""
        return self.notes.get(note_id)

    def settle(
        self,
        notes: object,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """The atomic step: main.MemoryReplayStore.settle over this store's notes (`notes` is this store)."""
        return self.replay.settle(self.notes, principal, nonce, expires_at, target, recheck)

    def consume(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """The atomic step, as every product store names it."""
        return self.settle(self, principal, nonce, expires_at, target, recheck)

    def restore(self, entry_id: int) -> dict[str, Any]:
        """Always StoreRefused: a memory store deletes at once and keeps no trash."""
        raise StoreRefused(f"entry {entry_id}: the memory store keeps no trash; nothing restored")

    def describe(self) -> list[str]:
        """Nothing to report: every lookup scans the notes."""
        return []

    def close(self) -> None:
        """Nothing to free."""

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
