"""The audit of consumed confirmations and the trash that makes a deletion undoable.

Every consumed confirmation leaves one entry, written in the same transaction as the
nonce claim (SQLite, PostgreSQL) or, for folders, in the confirmations database with the
outcome completed after the file operation:

    id, at (UTC seconds), principal, tool, outcome, note_id, title (as shown), workspace,
    uri (where the note lived), request_id, client_name (self-reported), trash, restores,
    channel (how the person confirmed: form, url or browser), approved_by and approved_at
    (the principal signed in on the confirmation page, and when it approved or kept),
    file_identity (folders: the file an update, move or restore acted on, as JSON),
    approved_with (the passkey whose assertion approved on the page, by credential id)

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
`max_entries`, so one principal's confirmations never push out another's; its refusals
are counted apart, `Retention.refusals_kept`, so its refused calls never push out its
other entries), pruned a batch at a time inside the consume transaction like the replay
store. No bound removes an entry whose kept text may still exist (ledger.KEEPS_TEXT).
The context of the request (tool, request id, the
client's self-reported name, workspace) reaches the store through a context variable
set by the wrapper `install()` puts around `tools/call`; code/main.py is unchanged.
The audit's tables and statements are the ledger's (code/ledger.py). The operator
command `python3 code/serve.py audit list|restore` is code/audit_cli.py. Standard
library only.
"""

from __future__ import annotations

import contextvars
import json
from typing import Any

import main
import stores
from stores import (
    DAY_SECONDS,
    DEFAULT_AUDIT_DAYS,
    DEFAULT_AUDIT_MAX_ENTRIES,
    DEFAULT_TRASH_DAYS,
    DELETION_TRASH,
    DELETION_UNLINK,
    SQL_TRASH,
    Facts,
    Retention,
)

__all__ = [
    "APPENDED",
    "AuditContext",
    "COLUMNS",
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
    "OPERATOR",
    "OUTCOMES",
    "PENDING",
    "PENDING_GRACE_SECONDS",
    "PRUNE_BATCH",
    "REFUSED",
    "RESTORED",
    "RESTORED_REVISION_BITS",
    "Retention",
    "SQL_TRASH",
    "UPDATED",
    "clip",
    "context_fields",
    "current",
    "install",
    "mark",
    "outcome_of",
    "written",
]

DELETION_MODES = (DELETION_TRASH, DELETION_UNLINK)
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

COLUMNS = ("id", "at", "principal", "tool", "outcome", "note_id", "title", "workspace", "uri",
           "request_id", "client_name", "trash", "restores", "channel", "approved_by", "approved_at", "file_identity",
           "approved_with")  # fmt: skip
CHANNELS = ("form", "url", "browser")  # a form in the host; this server's page by URL mode; or by the link in a result


# =====================================================================================
# The request's context, carried to the store
# =====================================================================================


class AuditContext:
    """What the store cannot know about the request it is consuming a confirmation for."""

    # A plain class, not a dataclass: `dataclasses` (and the `inspect` it loads) cost every
    # server process about 6 ms of start-up for this one record.
    __slots__ = (
        "tool",
        "request_id",
        "client_name",
        "workspace",
        "entry",
        "channel",
        "approved_by",
        "approved_at",
        "approved_with",
    )

    def __init__(
        self,
        tool: str | None,
        request_id: str | None,
        client_name: str | None,  # the client's own claim (`clientInfo` name/version), never verified
        workspace: str | None,  # canonical workspaceUri, when the arguments held a valid one
    ) -> None:
        self.tool = tool
        self.request_id = request_id
        self.client_name = client_name
        self.workspace = workspace
        self.entry: tuple[Any, int, str] | None = None  # (store, entry id, outcome) once written
        self.channel: str | None = None  # set by the tool: how the person confirmed (CHANNELS)
        self.approved_by: str | None = None  # set by the tool: who approved or kept it on the page
        self.approved_at: float | None = None
        self.approved_with: str | None = None  # set by the tool: the passkey (credential id) whose assertion approved


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
    raw = request.params
    params: dict[str, Any] = raw if isinstance(raw, dict) else {}
    found = params.get("_meta")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    info = meta.get("io.modelcontextprotocol/clientInfo")
    name = info.get("name") if isinstance(info, dict) and isinstance(info.get("name"), str) else None
    version = info.get("version") if isinstance(info, dict) else None
    if name is not None and isinstance(version, str):
        name = f"{name}/{version}"  # recorded as name/version, both self-reported
    given = params.get("arguments")
    arguments: dict[str, Any] = given if isinstance(given, dict) else {}
    try:
        workspace: str | None = stores.normalize_file_uri(arguments.get("workspaceUri"))
    except main.ScopeError:
        workspace = None
    tool = params.get("name") if isinstance(params.get("name"), str) else None
    request_id = None if request.id is None else json.dumps(request.id)  # 4 and "4" are different ids
    return AuditContext(clip(tool), clip(request_id), clip(name), workspace)


def mark(
    channel: str, approved_by: str | None = None, approved_at: float | None = None, approved_with: str | None = None
) -> None:
    """Record on this request's context how the person confirmed, and who approved on the page when, with which passkey
    (before consuming)."""
    context = current()
    if context is not None:
        context.channel, context.approved_by, context.approved_at = channel, approved_by, approved_at
        context.approved_with = approved_with


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
