"""The opt-in note tools: list workspaces, search, read, create, append, update and move notes.

Served only when the operator asks (`--notes-tools`, or `"notesTools": true` in the
config): the lesson's server lists `notes_delete` alone. Every tool takes the explicit
`workspaceUri` and runs the lesson's checks on every call, the same functions
`notes_delete` runs:

    arguments    checked against the inputSchema (not an object: -32602; a miss: isError)
    layer 1      main.authorize: the principal's grant, from the transport, never arguments
    layer 2      main.inside_workspace on the live note (both ends of a move), and again
                 inside the store's atomic step, with the grant
    a person     notes_update and notes_move are destructive: a form shows the change and a
                 person confirms it (no form elicitation declared: -32021, nothing changed);
                 the signed state binds the principal, the arguments (with the sha256 of
                 the new text), the note's version, and is consumed once, atomically with
                 the write (main.consume, through confirmations.Confirmations)

A note's `version` is a digest of the note (id, title, place, revision) and of its text,
so any change to either makes every version given out before it stale: append, update
and move refuse a stale one ("changed since you read it"). The lesson's memory store keeps
no note bodies: the tools that need one say so. Every write and every refusal a store sees
is audited (code/audit.py). Standard library only.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Callable
from typing import Any

import audit
import confirmations
import main
import stores

__all__ = ["install"]

MAX_QUERY_LENGTH = 200  # characters in a search query
DEFAULT_SEARCH_LIMIT = 10  # results of a search when the caller gives no limit
MAX_SEARCH_LIMIT = 50  # results one search returns at most
SNIPPET_CHARS = 160  # characters of a note's text shown beside each search result
MAX_READ_CHARS = 20_000  # characters of a note's text one read returns; a longer text is cut, and the result says so
MAX_TEXT_CHARS = 32_000  # characters of text one create, append or update carries
MAX_PATH_LENGTH = 1024  # characters in a move's newPath
MAX_DIFF_LINES = 400  # lines of the unified diff an update's form shows; a larger change is refused, never shown in part
MAX_DIFF_CHARS = 16_000  # characters of that diff, likewise
DIFF_CONTEXT_LINES = 2  # unchanged lines shown around each change

UPDATE_KEY, MOVE_KEY = "update_confirm", "move_confirm"  # the elicitation keys in inputRequests
PHASE_UPDATE, PHASE_MOVE = "confirm_update", "confirm_move"
CONFIRM_FIELD = "confirm"
NO_BODIES = "This store keeps no note bodies (the lesson's memory store); serve with --db or --notes-dir to read and write notes."
STALE = "The note changed since you read it (its version moved); nothing was changed. Read it again with notes_read."

_URI = {"type": "string", "format": "uri", "maxLength": main.MAX_URI_LENGTH,
        "description": "file:// URI of the workspace folder (must be authorized for you; notes_workspaces lists yours)."}
_NOTE_ID = {"type": "string", "minLength": 1, "maxLength": stores.MAX_NOTE_ID_LENGTH, "description": "The note's id (from notes_search)."}
_VERSION = {"type": "string", "minLength": 1, "maxLength": 64, "description": "The version notes_read returned."}


def descriptor(name: str, title: str, description: str, properties: dict[str, Any], required: list[str], *,
               read_only: bool, destructive: bool, idempotent: bool) -> dict[str, Any]:
    """A tool descriptor whose annotations say what the tool does: reads only, destroys, repeats safely; never the open world."""
    return {
        "name": name,
        "title": title,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties, "required": required, "additionalProperties": False},
        "annotations": {"title": title, "readOnlyHint": read_only, "destructiveHint": destructive,
                        "idempotentHint": idempotent, "openWorldHint": False},
    }


# =====================================================================================
# Arguments, scope, versions, what a person is shown
# =====================================================================================

Field = tuple[str, int, int, bool]  # (kind "string"/"integer", minimum, maximum, required)


def read_args(arguments: Any, tool: str, fields: dict[str, Field]) -> dict[str, Any]:
    """The arguments checked against the inputSchema as main.read_scope_args checks notes_delete's: -32602 or a ToolError."""
    if not isinstance(arguments, dict):
        raise main.McpError(main.INVALID_PARAMS, f"Invalid params: arguments for tool {tool} must be an object")
    unknown = arguments.keys() - fields.keys()
    if unknown:
        raise main.ToolError(f"Invalid arguments for tool {tool}: unexpected property {min(unknown)!r}.")
    read: dict[str, Any] = {}
    for name, (kind, low, high, required) in fields.items():
        value = arguments.get(name)
        if value is None and not required and name not in arguments:
            continue
        if kind == "integer":
            if type(value) is not int or not low <= value <= high:
                raise main.ToolError(f"Invalid arguments for tool {tool}: {name} must be an integer in {low}..{high}.")
        else:
            if not isinstance(value, str) or not low <= len(value) <= high:
                raise main.ToolError(f"Invalid arguments for tool {tool}: {name} must be a string of {low}..{high} characters.")
            # A NUL or a lone surrogate is text no note holds and no store can encode.
            if "\x00" in value or any("\ud800" <= ch <= "\udfff" for ch in value):
                raise main.McpError(main.INVALID_PARAMS, f"Invalid params: {name} for tool {tool} holds a NUL or a lone surrogate")
        read[name] = value
    return read


WORKSPACE_FIELD: Field = ("string", 1, main.MAX_URI_LENGTH, True)
NOTE_FIELD: Field = ("string", 1, stores.MAX_NOTE_ID_LENGTH, True)
VERSION_FIELD: Field = ("string", 1, 64, True)


def text_sha256(text: str) -> str:
    """The sha256 of a text's UTF-8 bytes, in hex: what a confirmation of new text binds."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_version(note: main.Note, text: str) -> str:
    """A note's version for the note tools: its place, title and revision (main.Note.version) and its text."""
    return main.digest([note.version, text_sha256(text)])


# Characters a person could not see or tell apart in a form: every non-printable character
# (tabs, carriage returns, zero-width and bidi controls, escapes), and the backslash that
# starts our spelling of them, so that "\u200b" typed in a note cannot pass for one.
def visible(text: str) -> str:
    """`text` with the backslash doubled and every non-printable character as a \\u (or \\U) escape."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join("\\\\" if ch == "\\" else ch if ch.isprintable() else (f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}") for ch in text)


def unified_diff(old: str, new: str) -> str | None:
    """The unified diff from `old` to `new`, lines split at "\\n" only, invisible characters made visible; None when too large to show whole."""
    lines = list(difflib.unified_diff(old.split("\n"), new.split("\n"), "current", "proposed", lineterm="", n=DIFF_CONTEXT_LINES))
    shown = "\n".join(visible(line) for line in lines)
    if len(lines) > MAX_DIFF_LINES or len(shown) > MAX_DIFF_CHARS:
        return None
    return shown


def snippet(text: str, query: str) -> str:
    """At most SNIPPET_CHARS of `text` around the first match of `query` (else its start), on one line, made visible."""
    folded = stores.fold_title(text)
    at = folded.find(stores.fold_title(query)) if len(folded) == len(text) else text.lower().find(query.lower())
    start = max(0, at - SNIPPET_CHARS // 3) if at > 0 else 0
    piece = re.sub(r"\s+", " ", text[start : start + SNIPPET_CHARS]).strip()
    return visible(piece)[:SNIPPET_CHARS]


def confirm_form(message: str, label: str) -> dict[str, Any]:
    """A form with one checkbox, `label`, unticked by default."""
    schema = {"type": "object", "properties": {CONFIRM_FIELD: {"type": "boolean", "title": label, "default": False}}, "required": [CONFIRM_FIELD]}
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


def require_form(meta: main.RequestMeta, tool: str) -> None:
    """-32021 naming the form capability unless this request declares it: a destructive change needs a person's answer."""
    if not main.supports_form_elicitation(meta.capabilities):
        message = (f"Server requires form elicitation for {tool}. Nothing was changed: a person must confirm this change in a form; "
                   "use a host that shows forms (one that declares elicitation.form).")
        raise main.McpError(main.MISSING_REQUIRED_CLIENT_CAPABILITY, message, {"requiredCapabilities": {"elicitation": {"form": {}}}})


class Write:
    """A store's confirmed write shaped as the atomic step main.consume runs (`settle`), so the claim and its refusals are the lesson's."""

    def __init__(self, act: Callable[[str, str, float], tuple[main.Settlement, Any]]) -> None:
        self.act = act
        self.done: Any = None

    def settle(self, notes: object, principal: str, nonce: str, expires_at: float,
               target: tuple[str, str] | None, recheck: Callable[[main.Note], bool]) -> main.Settlement:
        """Run the write in the store's one transaction: the nonce claimed with it, or nothing."""
        settlement, self.done = self.act(principal, nonce, expires_at)
        return settlement


# =====================================================================================
# The tools
# =====================================================================================


class NoteTool:
    """What every note tool shares: the services, layer 1 on every call, the live note with layer 2."""

    descriptor: dict[str, Any]
    fields: dict[str, Field] = {"workspaceUri": WORKSPACE_FIELD}
    needs_bodies = True

    def __init__(self, services: main.Services, confirming: confirmations.Confirmations) -> None:
        self.services, self.confirmations = services, confirming
        self.policy, self.store, self.log = services.policy, services.notes, services.log
        self.name = self.descriptor["name"]

    def begin(self, call: main.ToolCall) -> tuple[dict[str, Any], main.Scope]:
        """Checked arguments and the authorized scope (layer 1), or the refusal; a store without bodies says so."""
        args = read_args(call.arguments, self.name, self.fields)
        scope = main.authorize(self.policy, call.principal, main.ScopeArgs(args["workspaceUri"], self.name), self.log)
        if self.needs_bodies and not hasattr(self.store, "note_text"):
            raise main.ToolError(NO_BODIES)
        return args, scope

    def live(self, scope: main.Scope, note_id: str) -> tuple[main.Note, str]:
        """The note and its text as stored now, strictly inside the workspace (layer 2); else a ToolError revealing nothing."""
        found = self.store.note_text(note_id, scope.workspace)
        if found is None or not main.inside_workspace(found[0], scope.workspace):
            raise main.ToolError(f"No note {note_id!r} in that workspace (or it cannot be read as text).")
        return found

    def check(self, principal: str, scope: main.Scope, version: str) -> Callable[[main.Note, str], bool]:
        """The re-check inside the store's atomic step: layers 1 and 2 again, and the very version the caller had."""
        return lambda note, text: (self.policy.allows(principal, scope.workspace) and main.inside_workspace(note, scope.workspace)
                                   and content_version(note, text) == version)

    def digest(self, scope: main.Scope, args: dict[str, Any], **more: str) -> str:
        """The digest a signed state binds: the canonical workspace and every argument (text by its sha256)."""
        bound = {key: value for key, value in args.items() if key not in ("workspaceUri", "body")}
        return main.digest({"workspaceUri": scope.arguments["workspaceUri"], **bound, **more})


class NotesWorkspaces(NoteTool):
    """`notes_workspaces`: the workspaces this principal may pass as workspaceUri."""

    descriptor = descriptor("notes_workspaces", "List your workspaces",
                            "The workspace folders you may pass as workspaceUri to the notes tools.", {}, [],
                            read_only=True, destructive=False, idempotent=True)
    fields: dict[str, Field] = {}
    needs_bodies = False

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """The principal's grants (main.AuthorizationPolicy.workspaces), nothing about anyone else's."""
        read_args(call.arguments, self.name, self.fields)
        granted = self.policy.workspaces(call.principal)
        return main.tool_result(main.your_workspaces(self.policy, call.principal), {"workspaces": granted})


class NotesSearch(NoteTool):
    """`notes_search`: notes whose title or text holds the query, a bounded list of ids, titles and snippets."""

    descriptor = descriptor(
        "notes_search", "Search notes",
        f"Find notes whose title or text contains the query (case-insensitive) in the workspace folder you name: "
        f"ids, titles and a short snippet, at most {MAX_SEARCH_LIMIT}; read one with notes_read.",
        {"workspaceUri": _URI, "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_LENGTH},
         "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT, "default": DEFAULT_SEARCH_LIMIT}},
        ["workspaceUri", "query"], read_only=True, destructive=False, idempotent=True)
    fields = {"workspaceUri": WORKSPACE_FIELD, "query": ("string", 1, MAX_QUERY_LENGTH, True), "limit": ("integer", 1, MAX_SEARCH_LIMIT, False)}

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """At most `limit` results, each id, title, version and snippet (never a whole note); says when there are more or the search stopped early."""
        args, scope = self.begin(call)
        limit = args.get("limit", DEFAULT_SEARCH_LIMIT)
        found, stopped = self.store.search_text(scope.workspace, args["query"], limit + 1)
        found = [(note, text) for note, text in found if main.inside_workspace(note, scope.workspace)]
        results = [{"noteId": note.id, "title": note.title, "version": content_version(note, text), "snippet": snippet(text, args["query"])}
                   for note, text in found[:limit]]
        more = len(found) > limit
        lines = [f"{r['noteId']}: {r['title']} — {r['snippet']}" for r in results]
        if more:
            lines.append(f"(more than {limit} match; narrow the query)")
        if stopped:
            lines.append("(the search stopped early at its bound on files read, entries listed or time; some notes were not searched)")
        text = "\n".join(lines) if lines else "No note matches in that workspace."
        return main.tool_result(text, {"results": results, "more": more, "stoppedEarly": stopped})


class NotesRead(NoteTool):
    """`notes_read`: one note's text (bounded) and its version."""

    descriptor = descriptor(
        "notes_read", "Read a note",
        f"The text of one note in the workspace folder you name (at most {MAX_READ_CHARS:,} characters; the result says when it is cut) "
        "and its version, which notes_append, notes_update and notes_move need.",
        {"workspaceUri": _URI, "noteId": _NOTE_ID}, ["workspaceUri", "noteId"], read_only=True, destructive=False, idempotent=True)
    fields = {"workspaceUri": WORKSPACE_FIELD, "noteId": NOTE_FIELD}

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """The note's text (cut at MAX_READ_CHARS, saying so), title and version."""
        args, scope = self.begin(call)
        note, text = self.live(scope, args["noteId"])
        truncated = len(text) > MAX_READ_CHARS
        structured = {"noteId": note.id, "title": note.title, "version": content_version(note, text),
                      "text": text[:MAX_READ_CHARS], "truncated": truncated, "length": len(text)}
        said = text[:MAX_READ_CHARS] + (f"\n(cut at {MAX_READ_CHARS:,} of {len(text):,} characters)" if truncated else "")
        return main.tool_result(said, structured)


class NotesCreate(NoteTool):
    """`notes_create`: a new note; never over an existing one."""

    descriptor = descriptor(
        "notes_create", "Create a note",
        "Create a new note with a title and text in the workspace folder you name; it never replaces an existing note.",
        {"workspaceUri": _URI, "title": {"type": "string", "minLength": 1, "maxLength": main.MAX_TITLE_LENGTH},
         "body": {"type": "string", "maxLength": MAX_TEXT_CHARS}},
        ["workspaceUri", "title", "body"], read_only=False, destructive=False, idempotent=False)
    fields = {"workspaceUri": WORKSPACE_FIELD, "title": ("string", 1, main.MAX_TITLE_LENGTH, True), "body": ("string", 0, MAX_TEXT_CHARS, True)}

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """Create the note at the first free place for its title (audited), or say why not."""
        args, scope = self.begin(call)
        title = args["title"]
        # A title is one visible line: a newline would end the heading, a bidi control disguise it.
        if not title.isprintable() or not title.strip():
            raise main.ToolError(f"Invalid arguments for tool {self.name}: title must be one line of visible characters.")
        done = self.store.create_note(call.principal, scope.workspace, title, args["body"])
        if isinstance(done, str):
            raise main.ToolError(done)
        note, text = self.live(scope, done.id)
        return main.tool_result(f"Created note {note.id} ({note.title}).",
                                {"created": True, "noteId": note.id, "title": note.title, "version": content_version(note, text)})


class NotesAppend(NoteTool):
    """`notes_append`: text added at the end of a note read at `version`; never overwrites."""

    descriptor = descriptor(
        "notes_append", "Append to a note",
        "Add text at the end of a note (nothing is overwritten). Pass the version notes_read returned: if the note changed "
        "since, nothing is added.",
        {"workspaceUri": _URI, "noteId": _NOTE_ID, "text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS}, "version": _VERSION},
        ["workspaceUri", "noteId", "text", "version"], read_only=False, destructive=False, idempotent=True)
    fields = {"workspaceUri": WORKSPACE_FIELD, "noteId": NOTE_FIELD, "text": ("string", 1, MAX_TEXT_CHARS, True), "version": VERSION_FIELD}

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """Append in one store transaction that re-checks layers 1 and 2 and the version (audited), or refuse."""
        args, scope = self.begin(call)
        note, text = self.live(scope, args["noteId"])
        if content_version(note, text) != args["version"]:
            raise main.ToolError(STALE)
        done = self.store.append_note(call.principal, scope.workspace, note.id, args["text"], self.check(call.principal, scope, args["version"]))
        if isinstance(done, str):
            raise main.ToolError(done)
        written, now = done
        return main.tool_result(f"Appended to note {written.id}.", {"appended": True, "noteId": written.id, "version": content_version(written, now)})


class ConfirmedTool(NoteTool):
    """A destructive note tool: the form, the signed state, the answer, the consumed write (the lesson's cycle)."""

    key: str
    phase: str
    done_field: str

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """First call: form (or -32021 before any lookup), scope, live note, ask. Retry: verify, read the answer, write once."""
        args = read_args(call.arguments, self.name, self.fields)
        require_form(call.meta, self.name)  # before any lookup: no form, no knowledge of the notes, no change
        args, scope = self.begin(call)
        bound = self.digest(scope, args, **self.bound(args))
        if call.state is None:
            return self.ask(call, scope, args, bound, None)
        state = self.confirmations.verify(call, bound, {self.phase})
        answered = self.confirmations.answer(call, state, [self.key])
        if answered.reply is confirmations.Reply.ASK_AGAIN:
            return self.ask(call, scope, args, bound, state)
        if answered.reply is confirmations.Reply.CANCELLED:
            return self.not_done("cancelled", "Cancelled; nothing was changed.")
        if answered.reply is confirmations.Reply.DECLINED:
            return self.not_done("declined", "Declined; nothing was changed.")  # answer() consumed the state
        confirm = answered.content[self.key].get(CONFIRM_FIELD)
        if not isinstance(confirm, bool) or len(state.cands) != 1:
            raise main.McpError(main.INVALID_PARAMS, "Invalid params: the answer does not match the form")
        if not confirm:
            self.confirmations.consume(call.principal, state)
            return self.not_done("not_confirmed", "Not confirmed; nothing was changed.")
        # The digest of the arguments already binds the new text's sha256; the claim says it again, readably.
        if any(state.extra.get(name) != value for name, value in self.bound(args).items()):
            raise main.McpError(main.INVALID_PARAMS, main.STATE_INVALID)
        (note_id, version) = state.cands[0]
        audit.mark("form")  # the person confirmed in the host's form: the entry says so
        write = Write(lambda principal, nonce, expires: self.write(principal, nonce, expires, scope, args, note_id, version))
        main.consume(self.services._replace(replay=write), call.principal, state)  # a replay: -32602; the bound: isError
        if isinstance(write.done, str):
            raise main.ToolError(write.done)  # changed, moved or taken since the form: consumed, nothing written
        return self.done(write.done, scope)

    def ask(self, call: main.ToolCall, scope: main.Scope, args: dict[str, Any], bound: str, follows: main.StatePayload | None) -> dict[str, Any]:
        """The form over the live note (layer 2), the state binding its version (and the new text's sha256)."""
        note, text = self.live(scope, args["noteId"])
        version = content_version(note, text)
        if "version" in args and version != args["version"]:
            raise main.ToolError(STALE)
        form = self.form(scope, args, note, text)
        return self.confirmations.ask(call, bound, self.phase, {self.key: form}, [(note.id, version)], self.bound(args), follows=follows)

    def bound(self, args: dict[str, Any]) -> dict[str, str]:
        """What the state binds beyond the arguments' own values (the sha256 of new text)."""
        return {}

    def not_done(self, reason: str, text: str) -> dict[str, Any]:
        """The complete, non-error answer when the person said no, declined or cancelled (the audit completes from `reason`)."""
        return main.tool_result(text, {self.done_field: False, "reason": reason})

    def form(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def write(self, principal: str, nonce: str, expires: float, scope: main.Scope, args: dict[str, Any],
              note_id: str, version: str) -> tuple[main.Settlement, Any]:
        raise NotImplementedError

    def done(self, note: main.Note, scope: main.Scope) -> dict[str, Any]:
        raise NotImplementedError


class NotesUpdate(ConfirmedTool):
    """`notes_update`: a note's whole text replaced, after a person confirmed the diff; the old text to the trash."""

    descriptor = descriptor(
        "notes_update", "Replace a note's text",
        "Replace the text of a note read at `version` with `body`. The user sees the change as a diff and confirms it in a form "
        "before anything is written; the old text goes to the trash, where an operator can restore it.",
        {"workspaceUri": _URI, "noteId": _NOTE_ID, "body": {"type": "string", "maxLength": MAX_TEXT_CHARS}, "version": _VERSION},
        ["workspaceUri", "noteId", "body", "version"], read_only=False, destructive=True, idempotent=True)
    fields = {"workspaceUri": WORKSPACE_FIELD, "noteId": NOTE_FIELD, "body": ("string", 0, MAX_TEXT_CHARS, True), "version": VERSION_FIELD}
    key, phase, done_field = UPDATE_KEY, PHASE_UPDATE, "updated"

    def bound(self, args: dict[str, Any]) -> dict[str, str]:
        """The sha256 of the exact new text: the state cannot confirm other bytes."""
        return {"sha256": text_sha256(args["body"])}

    def form(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> dict[str, Any]:
        """The diff, whole and with invisible characters shown, and what happens to the old text; a diff too large is refused."""
        diff = unified_diff(text, args["body"])
        if diff is None:
            raise main.ToolError(f"The change is larger than one form can show ({MAX_DIFF_LINES} lines or {MAX_DIFF_CHARS:,} characters of diff); "
                                 "nothing was changed. Make it in smaller steps.")
        if not diff:
            raise main.ToolError("The new text is the note's text already; nothing to change.")
        kept = ("The old text is moved to the trash; an operator can restore it." if getattr(self.store, "retention", None) is not None
                and self.store.retention.trash else "The old text is not kept.")
        message = (f"Replace the text of \"{note.title}\" ({note.id}) in {scope.arguments['workspaceUri']}? {kept} "
                   f"The change (invisible characters shown as \\u escapes):\n{diff}")
        return confirm_form(message, "Apply this change")

    def write(self, principal: str, nonce: str, expires: float, scope: main.Scope, args: dict[str, Any],
              note_id: str, version: str) -> tuple[main.Settlement, Any]:
        """The store's one transaction: claim, re-check (layers 1, 2, version), old text to the trash, new text in."""
        return self.store.update_note(principal, nonce, expires, scope.workspace, note_id, args["body"], self.check(principal, scope, version))

    def done(self, note: main.Note, scope: main.Scope) -> dict[str, Any]:
        """The confirmed text is written; its version, read again (a folder note's version is its file's)."""
        found = self.store.note_text(note.id, scope.workspace)
        return main.tool_result(f"Updated note {note.id}.", {"updated": True, "noteId": note.id, "version": content_version(*found) if found else ""})


class NotesMove(ConfirmedTool):
    """`notes_move`: a note given another place in the workspace, after a person confirmed; never over another note."""

    descriptor = descriptor(
        "notes_move", "Move a note",
        "Move a note to another place inside the same workspace folder (newPath: a relative path ending in .md, e.g. archive/old.md). "
        "The user confirms in a form first; a note already at that place is never replaced.",
        {"workspaceUri": _URI, "noteId": _NOTE_ID, "newPath": {"type": "string", "minLength": 1, "maxLength": MAX_PATH_LENGTH}},
        ["workspaceUri", "noteId", "newPath"], read_only=False, destructive=True, idempotent=True)
    fields = {"workspaceUri": WORKSPACE_FIELD, "noteId": NOTE_FIELD, "newPath": ("string", 1, MAX_PATH_LENGTH, True)}
    key, phase, done_field = MOVE_KEY, PHASE_MOVE, "moved"

    def place(self, scope: main.Scope, new_path: str) -> main.Path:
        """The new place, strictly inside the workspace (layer 2 for the destination), or a ToolError; never repaired."""
        # `../x.md`, `/etc/x.md`, `a\\b.md`, `%2e%2e/x.md` and control characters name another
        # place than they seem to, on some system or after some decoder: refused, not resolved.
        parts = new_path.split("/")
        if (new_path.startswith("/") or "\\" in new_path or "%" in new_path or re.search("[\x00-\x1f\x7f]", new_path)
                or any(part in ("", ".", "..") or part.startswith(".") for part in parts) or not parts[-1].endswith(".md")
                or len(parts[-1]) == len(".md") or not all(part.isprintable() for part in parts)):
            raise main.ToolError("newPath must be a relative path inside the workspace ending in .md: no .., no leading /, "
                                 "no backslash, %, hidden names or control characters (e.g. archive/old.md).")
        place = scope.workspace + tuple(parts)
        if not (main.is_within(place, scope.workspace) and len(place) > len(scope.workspace)):
            raise main.ToolError("newPath must lie inside the workspace.")
        return place

    def form(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> dict[str, Any]:
        """Where from, where to, and that nothing is replaced."""
        place = self.place(scope, args["newPath"])
        message = (f"Move \"{note.title}\" ({note.id}) from {visible(note.uri)} to {visible(main.format_file_uri(place))}? "
                   "A note already there is never replaced: the move is refused instead.")
        return confirm_form(message, "Move the note")

    def write(self, principal: str, nonce: str, expires: float, scope: main.Scope, args: dict[str, Any],
              note_id: str, version: str) -> tuple[main.Settlement, Any]:
        """The store's one transaction: claim, re-check (layers 1, 2, version), move if the place is free."""
        place = self.place(scope, args["newPath"])
        return self.store.move_note(principal, nonce, expires, scope.workspace, note_id, place, self.check(principal, scope, version))

    def done(self, note: main.Note, scope: main.Scope) -> dict[str, Any]:
        """The note is at its new place (its id may change with it, in a folder)."""
        return main.tool_result(f"Moved note to {note.uri} (id {note.id}).", {"moved": True, "noteId": note.id})


TOOLS = (NotesWorkspaces, NotesSearch, NotesRead, NotesCreate, NotesAppend, NotesUpdate, NotesMove)


def install(server: Any) -> None:
    """Register the note tools on a frame.Server (after notes_delete, so the lesson's tool stays first)."""
    for tool in TOOLS:
        server.add_tool(tool(server.services, server.confirmations))
