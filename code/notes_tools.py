"""The opt-in note tools: list workspaces, search, read, create, append, update and move notes.

Served only when the operator asks (`--notes-tools`, or `"notesTools": true` in the
config): the lesson's server lists `notes_delete` alone. Every tool takes the explicit
`workspaceUri` and runs the lesson's checks on every call, the same functions
`notes_delete` runs:

    arguments    checked against the inputSchema, the one place a tool states them (not an
                 object: -32602; a miss: isError)
    layer 1      main.authorize: the principal's grant, from the transport, never arguments
    layer 2      main.inside_workspace on the live note (both ends of a move), and again
                 inside the store's atomic step, with the grant
    a person     notes_update and notes_move are destructive: a form shows the change and a
                 person confirms it; the signed state binds the principal, the arguments
                 (with the sha256 of the new text), the note's version, and is consumed
                 once, atomically with the write (main.consume). Each is one class on the
                 one confirmation cycle (code/browser_confirm.py's Confirmed), which also
                 sends a host without forms to this server's confirmation page where it
                 can (URL mode, or the operator's --confirm-in-browser), showing the
                 whole change, however large; else -32021, nothing changed. The page's
                 token binds what the form's state binds.

A note's `version` is a digest of the note (id, title, place, revision) and of its text,
so any change to either makes every version given out before it stale: append, update
and move refuse a stale one ("changed since you read it"). The lesson's memory store keeps
no note bodies: the tools that need one say so. Every write and every refusal a store sees
is audited (code/audit.py). Standard library only.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import audit
import browser_confirm
import confirmations
import main
import stores
import text_index
from browser_confirm import CONFIRM_FIELD, person_uri, visible

__all__ = ["install"]

MAX_QUERY_LENGTH = 200  # characters in a search query
DEFAULT_SEARCH_LIMIT = 10  # results of a search when the caller gives no limit
MAX_SEARCH_LIMIT = 50  # results one search returns at most
DEFAULT_LIST_LIMIT = 50  # entries of a folder one notes_list returns when the caller gives no limit
MAX_LIST_LIMIT = 200  # entries one notes_list returns at most
LIST_CURSOR = "notes_list.cursor"  # what a signed cursor says it is: never a requestState, never another tool's
MAX_READ_CHARS = 20_000  # characters of a note's text one read returns; a longer text is read on with `offset`
MAX_READ_OFFSET = (
    1_073_741_824  # the largest offset a read accepts (no note is that long: the schema's bound, not a note's)
)
# Text is bounded in UTF-8 bytes, the unit of the message bound (frame.MAX_MESSAGE_BYTES,
# 64 KiB, tested against these three; past it a request is -32600 before any tool sees it). JSON spells a byte of text
# in at most JSON_GROWTH bytes when a client sends UTF-8 as itself (a newline, a quote or a
# backslash in two) and a CJK character in six when it escapes it (\uXXXX, for three bytes
# of UTF-8); the rest of the largest request this server asks for (the workspace URI, the
# note id, the version, the requestState or confirmation token it issued, JSON-RPC's own
# keys) fits in ENVELOPE_BYTES. So a text at the bound always arrives: 32,000 CJK characters
# (96,000 bytes) once passed a 32,000-character bound and were refused as -32600.
JSON_GROWTH = 2  # bytes of JSON per byte of UTF-8 text, at most, for the text a note holds
ENVELOPE_BYTES = (
    5_536  # bytes of the largest request around its text: URI 2,048, id 768, version 64, token 1,600, the rest 1,056
)
MAX_TEXT_BYTES = (
    30_000  # UTF-8 bytes of text one create, append or update carries: (65,536 - ENVELOPE_BYTES) // JSON_GROWTH
)
MAX_EDIT_MATCHES = 1_000  # occurrences one notes_edit replaces at most (its expectedMatches)
# UTF-8 bytes of a note after an edit: the stores' own bound (note_bodies.MAX_NOTE_BYTES, folder_bodies.MAX_FILE_BYTES)
MAX_EDITED_BYTES = 262_144
MAX_PATH_LENGTH = 1024  # characters in a move's newPath
MAX_DIFF_LINES = (
    400  # lines of the unified diff an update's form shows; a larger change is refused, never shown in part
)
MAX_DIFF_CHARS = 16_000  # characters of that diff, likewise
DIFF_CONTEXT_LINES = 2  # unchanged lines shown around each change
MAX_LINK_SCAN = (
    5_000  # notes of the workspace a move reads for [[links]] to the note; in a larger workspace no rewrite is offered
)
MAX_LINK_SCAN_CHARS = 64_000_000  # characters of note text one move reads for links; past it no rewrite is offered
MAX_LINKING_NOTES = 50  # notes whose links one move rewrites, each listed in its form; more, and no rewrite is offered
REWRITE_FIELD = "rewriteLinks"  # the move form's second checkbox, and the tool's argument of the same name

UPDATE_KEY, EDIT_KEY, MOVE_KEY = (
    "update_confirm",
    "edit_confirm",
    "move_confirm",
)  # the elicitation keys in inputRequests
PHASE_UPDATE, PHASE_EDIT, PHASE_MOVE = "confirm_update", "confirm_edit", "confirm_move"
NO_BODIES = (
    "This store keeps no note bodies (the lesson's memory store); serve with --db or --notes-dir to read and write "
    "notes."
)
STALE = "The note changed since you read it (its version moved); nothing was changed. Read it again with notes_read."
TOO_LARGE = (
    f"The change is larger than one form can show ({MAX_DIFF_LINES} lines or {MAX_DIFF_CHARS:,} characters of diff); "
    "nothing was changed. Make it in smaller steps, or review it whole on this server's confirmation page, which its "
    "operator turns on with --confirm-in-browser."
)
PAGE_STALE = (
    "That note changed, moved or is no longer in a workspace granted to you since your MCP client asked; nothing can "
    "be "
    "approved here. Press Keep, and start again from your MCP client."
)

_URI = {
    "type": "string",
    "format": "uri",
    "minLength": 1,
    "maxLength": main.MAX_URI_LENGTH,
    "description": "file:// URI of the workspace folder (must be authorized for you; notes_workspaces lists yours).",
}
_NOTE_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": stores.MAX_NOTE_ID_LENGTH,
    "description": "The note's id (from notes_search).",
}
_VERSION = {"type": "string", "minLength": 1, "maxLength": 64, "description": "The version notes_read returned."}


class TextSchema(dict[str, Any]):
    """The schema of a text argument (on the wire, a plain string schema): read_args bounds it in UTF-8 bytes."""


def text_property(what: str, min_length: int = 0) -> dict[str, Any]:
    """The schema of a text argument: its bound is in UTF-8 bytes, said in words (maxLength, in characters, follows)."""
    return TextSchema(
        {
            "type": "string",
            "minLength": min_length,
            "maxLength": MAX_TEXT_BYTES,
            "description": f"{what} At most {MAX_TEXT_BYTES:,} bytes in UTF-8 (ASCII 1 byte a character, CJK 3, "
            f"emoji 4: at most {MAX_TEXT_BYTES // 3:,} CJK characters), so the request fits the 64 KiB message bound; "
            "split a longer text over notes_append calls.",
        }
    )


def descriptor(
    name: str,
    title: str,
    description: str,
    properties: dict[str, Any],
    required: list[str],
    *,
    read_only: bool,
    destructive: bool,
    idempotent: bool,
) -> dict[str, Any]:
    """A tool descriptor whose annotations say whether it reads only, destroys, repeats safely; never the open world."""
    return {
        "name": name,
        "title": title,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
        "annotations": {
            "title": title,
            "readOnlyHint": read_only,
            "destructiveHint": destructive,
            "idempotentHint": idempotent,
            "openWorldHint": False,
        },
    }


# =====================================================================================
# Arguments, scope, versions, what a person is shown
# =====================================================================================


_UNENCODABLE = re.compile("[\x00\ud800-\udfff]")  # a NUL or a lone surrogate: one pass over the text, in C


def read_args(arguments: Any, tool: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The arguments checked against `schema` as main.read_scope_args checks notes_delete's: -32602 or a ToolError."""
    if not isinstance(arguments, dict):
        raise main.McpError(main.INVALID_PARAMS, f"Invalid params: arguments for tool {tool} must be an object")
    fields: dict[str, dict[str, Any]] = schema["properties"]
    unknown = arguments.keys() - fields.keys()
    if unknown:
        raise main.ToolError(f"Invalid arguments for tool {tool}: unexpected property {min(unknown)!r}.")
    read: dict[str, Any] = {}
    for name, field in fields.items():
        value = arguments.get(name)
        if value is None and name not in schema["required"] and name not in arguments:
            continue
        kind = "text" if isinstance(field, TextSchema) else field["type"]
        low, high = field.get("minimum", field.get("minLength", 0)), field.get("maximum", field.get("maxLength", 0))
        if kind == "boolean":
            if type(value) is not bool:
                raise main.ToolError(f"Invalid arguments for tool {tool}: {name} must be true or false.")
        elif kind == "integer":
            if type(value) is not int or not low <= value <= high:
                raise main.ToolError(f"Invalid arguments for tool {tool}: {name} must be an integer in {low}..{high}.")
        elif kind == "text":
            # Measured as the message measures it: in UTF-8 bytes (a lone surrogate counts 3, then -32602 below).
            if not isinstance(value, str) or not low <= len(value.encode("utf-8", "surrogatepass")) <= high:
                raise main.ToolError(
                    f"Invalid arguments for tool {tool}: {name} must be text of {low}..{high:,} bytes in UTF-8 "
                    f"(a CJK character is 3 bytes, so at most {high // 3:,} of them); split a longer text."
                )
        else:
            if not isinstance(value, str) or not low <= len(value) <= high:
                raise main.ToolError(
                    f"Invalid arguments for tool {tool}: {name} must be a string of {low}..{high} characters."
                )
        # A NUL or a lone surrogate is text no note holds and no store can encode.
        if isinstance(value, str) and _UNENCODABLE.search(value):
            raise main.McpError(
                main.INVALID_PARAMS, f"Invalid params: {name} for tool {tool} holds a NUL or a lone surrogate"
            )
        read[name] = value
    return read


def text_sha256(text: str) -> str:
    """The sha256 of a text's UTF-8 bytes, in hex: what a confirmation of new text binds."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_version(note: main.Note, text: str) -> str:
    """A note's version for the note tools: its place, title and revision (main.Note.version) and its text."""
    return main.digest([note.version, text_sha256(text)])


NO_NEWLINE = "\\ No newline at end of file"  # the unified diff's marker for a last line without one


def text_lines(text: str) -> list[str]:
    """A text's lines, split at "\\n" only, each keeping it (the last may have none): a 4-line note is 4 lines."""
    pieces = text.split("\n")
    return [piece + "\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


def whole_diff(old: str, new: str) -> tuple[str, int]:
    """The unified diff from `old` to `new`, split at "\\n" only, invisible characters made visible; its line count."""
    import difflib  # only where a change is shown: start-up does without it

    shown: list[str] = []
    for k, line in enumerate(
        difflib.unified_diff(text_lines(old), text_lines(new), "current", "proposed", lineterm="", n=DIFF_CONTEXT_LINES)
    ):
        if line.endswith("\n"):
            shown.append(visible(line[:-1]))
        else:
            shown.append(visible(line))
            if k >= 2 and not line.startswith("@@"):  # a text's last line without its newline, as diff(1) marks it
                shown.append(NO_NEWLINE)
    return "\n".join(shown), len(shown)


def unified_diff(old: str, new: str) -> str | None:
    """whole_diff's text, or None when it is too large for a form to show whole (the page shows it: whole_diff)."""
    shown, count = whole_diff(old, new)
    if count > MAX_DIFF_LINES or len(shown) > MAX_DIFF_CHARS:
        return None
    return shown


def snippet(text: str, query: str, title: str = "") -> str:
    """The search's snippet of `text` for `query` (text_index.search_snippet), visible, no heading repeating it."""
    return text_index.search_snippet(text, text_index.parse(query), visible, title)


def confirm_form(message: str, label: str) -> dict[str, Any]:
    """A form with one checkbox, `label`, unticked by default."""
    schema = {
        "type": "object",
        "properties": {CONFIRM_FIELD: {"type": "boolean", "title": label, "default": False}},
        "required": [CONFIRM_FIELD],
    }
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


MOVE_PATH_RULE = (
    "newPath must be a relative path inside the workspace ending in .md: no .., no leading /, "
    "no backslash, %, hidden names or control characters (e.g. archive/old.md)."
)
FOLDER_RULE = (
    'folder must be a relative path of a folder inside the workspace ("" for the workspace itself): no .., no leading '
    "or trailing /, no backslash, %, hidden names or control characters (e.g. projects/2026)."
)


def relative_parts(path: str, rule: str) -> list[str]:
    """The names of a relative path inside a workspace, or a ToolError saying `rule`; never repaired."""
    # `../x.md`, `/etc/x.md`, `a\\b.md`, `%2e%2e/x.md` and control characters name another
    # place than they seem to, on some system or after some decoder: refused, not resolved.
    parts = path.split("/")
    if (
        path.startswith("/")
        or "\\" in path
        or "%" in path
        or re.search("[\x00-\x1f\x7f]", path)
        or any(part in ("", ".", "..") or part.startswith(".") for part in parts)
        or not all(part.isprintable() for part in parts)
    ):
        raise main.ToolError(rule)
    return parts


def below(workspace: main.Path, parts: list[str], what: str) -> main.Path:
    """`workspace` joined with `parts`, strictly inside it (layer 2 for a place, not a note); else `what` is refused."""
    place = workspace + tuple(parts)
    if not (main.is_within(place, workspace) and len(place) > len(workspace)):
        raise main.ToolError(f"{what} must lie inside the workspace.")
    return place


# An Obsidian-style link: [[target]], [[target#heading]], [[target|alias]], [[target#heading|alias]].
WIKI_LINK = re.compile(r"\[\[([^\[\]|#\n]+)(#[^\[\]|\n]*)?(\|[^\[\]\n]*)?\]\]")


class Linking(NamedTuple):
    """A note whose links a move rewrites: the note, its version, its new text, and each link before and after."""

    note: main.Note
    version: str
    text: str
    changes: tuple[tuple[str, str], ...]


def relinked(text: str, old: tuple[str, ...], new: tuple[str, ...], bare: bool) -> tuple[str, list[tuple[str, str]]]:
    """`text` with each [[link]] to `old` (below the workspace) pointed at `new`, heading, alias kept; the changes."""

    def stem(parts: tuple[str, ...]) -> str:
        joined = "/".join(parts)
        return (
            joined[: -len(".md")] if joined.lower().endswith(".md") else joined
        )  # an SQL note's place may have no .md

    changes: list[tuple[str, str]] = []

    def swap(match: re.Match[str]) -> str:
        target = match.group(1).strip()
        suffix = ".md" if target.lower().endswith(".md") else ""
        name = stores.fold_title(target[: len(target) - len(suffix)])
        if "/" in name:  # a path from the workspace names one note
            hit, to = name == stores.fold_title(stem(old)), stem(new)
        else:  # a bare name names the one note of that name: only a name no other note has is followed
            hit, to = bare and name == stores.fold_title(stem(old[-1:])), stem(new[-1:])
        if not hit or stores.fold_title(to) == name:
            return match.group(0)
        link = f"[[{to}{suffix}{match.group(2) or ''}{match.group(3) or ''}]]"
        changes.append((match.group(0), link))
        return link

    return WIKI_LINK.sub(swap, text), changes


class TooLarge(browser_confirm.NeedsPage):
    """An update whose diff a form cannot show whole: refused, or sent to the confirmation page where it is on."""


def with_confirmation(tool: dict[str, Any]) -> dict[str, Any]:
    """A copy of a confirmed tool's descriptor with the optional `confirmation` argument of the confirmation page."""
    tool = copy.deepcopy(tool)
    tool["description"] += (
        " A host that shows no forms gets a link instead: the user reviews the change on this server's page, "
        "then call again with the same arguments and the confirmation token."
    )
    tool["inputSchema"]["properties"][browser_confirm.CONFIRMATION] = copy.deepcopy(
        browser_confirm.CONFIRMATION_PROPERTY
    )
    return tool


# =====================================================================================
# The tools
# =====================================================================================


class NoteTool:
    """What every note tool shares: the services, layer 1 on every call, the live note with layer 2."""

    descriptor: dict[str, Any]
    needs_bodies = True

    def __init__(self, services: main.Services, confirming: confirmations.Confirmations) -> None:
        self.services, self.confirmations = services, confirming
        self.policy, self.log = services.policy, services.log
        self.store = stores.store_of(services)
        self.texts = self.store.texts  # declared by the store: its text side, or None (the memory store)
        self.name = self.descriptor["name"]

    def begin(self, call: main.ToolCall, arguments: Any = None) -> tuple[dict[str, Any], main.Scope]:
        """Checked arguments (the call's, or `arguments`), the scope authorized (layer 1); else a refusal."""
        args = self.read(call.arguments if arguments is None else arguments)
        try:
            scope = main.authorize(
                self.policy, call.principal, main.ScopeArgs(args["workspaceUri"], self.name), self.log
            )
        except main.ToolError:
            # A workspace not granted, or a URI that names none: refused, and the refusal is
            # audited with what was asked, so probing another principal's folders leaves a trace.
            self.refused(call.principal, audit.Facts())
            raise
        if self.needs_bodies:
            self.bodies()
        return args, scope

    def read(self, arguments: Any) -> dict[str, Any]:
        """The arguments checked against the tool's own inputSchema, the one statement of them."""
        return read_args(arguments, self.name, type(self).descriptor["inputSchema"])

    def bodies(self) -> stores.Texts:
        """The store's text side; the NO_BODIES refusal where the store declares none."""
        if self.texts is None:
            raise main.ToolError(NO_BODIES)
        return self.texts

    def refused(self, principal: str, facts: audit.Facts) -> None:
        """Record a refused call in the store's audit (outcome `refused`), where the store keeps one."""
        self.store.audit_refusal(principal, facts)

    def live(self, scope: main.Scope, note_id: str, principal: str) -> tuple[main.Note, str]:
        """The note and its text as stored now, strictly inside the workspace (layer 2); else a ToolError (audited)."""
        found = self.bodies().note_text(note_id, scope.workspace)
        if found is None or not main.inside_workspace(found[0], scope.workspace):
            self.refused(principal, audit.Facts(note_id))
            raise main.ToolError(f"No note {note_id!r} in that workspace (or it cannot be read as text).")
        return found

    def check(self, principal: str, scope: main.Scope, version: str) -> Callable[[main.Note, str], bool]:
        """The re-check inside the store's atomic step: layers 1 and 2 again, and the very version the caller had."""
        return lambda note, text: (
            self.policy.allows(principal, scope.workspace)
            and main.inside_workspace(note, scope.workspace)
            and content_version(note, text) == version
        )

    def digest(self, scope: main.Scope, args: dict[str, Any], **more: str) -> str:
        """The digest a signed state binds: the canonical workspace and every argument (text by its sha256)."""
        bound = {key: value for key, value in args.items() if key not in ("workspaceUri", "body")}
        return main.digest({"workspaceUri": scope.arguments["workspaceUri"], **bound, **more})


class NotesWorkspaces(NoteTool):
    """`notes_workspaces`: the workspaces this principal may pass as workspaceUri."""

    descriptor = descriptor(
        "notes_workspaces",
        "List your workspaces",
        "The workspace folders you may pass as workspaceUri to the notes tools.",
        {},
        [],
        read_only=True,
        destructive=False,
        idempotent=True,
    )
    needs_bodies = False

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """The principal's grants (main.AuthorizationPolicy.workspaces), nothing about anyone else's."""
        self.read(call.arguments)
        granted = self.policy.workspaces(call.principal)
        return main.tool_result(main.your_workspaces(self.policy, call.principal), {"workspaces": granted})


class NotesList(NoteTool):
    """`notes_list`: the notes and sub-folders directly in one folder of the workspace, a page at a time."""

    descriptor = descriptor(
        "notes_list",
        "List a folder",
        "The notes (id, title, file name) and sub-folders (name, how many notes lie below) directly in `folder` of "
        "the workspace "
        f'you name ("" or absent: the workspace itself), sub-folders first, then by name; at most `limit` (default '
        f"{DEFAULT_LIST_LIMIT}, at most {MAX_LIST_LIMIT}) a page. When more follow, the result has `nextCursor`: pass "
        "it as "
        "`cursor` with the same workspaceUri and folder for the next page.",
        {
            "workspaceUri": _URI,
            "folder": {
                "type": "string",
                "maxLength": MAX_PATH_LENGTH,
                "default": "",
                "description": "A folder inside the workspace, relative to it (e.g. projects/2026).",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST_LIMIT, "default": DEFAULT_LIST_LIMIT},
            "cursor": {
                "type": "string",
                "minLength": 1,
                "maxLength": main.MAX_STATE_LENGTH,
                "description": "The nextCursor of the previous page, as it was given.",
            },
        },
        ["workspaceUri"],
        read_only=True,
        destructive=False,
        idempotent=True,
    )

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """One page of the folder's entries after the cursor's; nextCursor if more follow (not ours: -32602)."""
        args, scope = self.begin(call)
        folder_text = args.get("folder", "")
        folder = (
            below(scope.workspace, relative_parts(folder_text, FOLDER_RULE), "folder")
            if folder_text
            else scope.workspace
        )
        bound = {
            "typ": LIST_CURSOR,
            "sub": call.principal,
            "ws": scope.arguments["workspaceUri"],
            "folder": folder_text,
        }
        after = self.after(args.get("cursor"), bound)
        limit = args.get("limit", DEFAULT_LIST_LIMIT)
        entries = [entry for entry in self.entries(scope.workspace, folder) if after is None or list(entry[0]) > after]
        page = [shown for _, shown in entries[:limit]]
        structured: dict[str, Any] = {"folder": folder_text, "entries": page}
        lines = [
            f"{e['name']}/ ({e['notes']} note{'' if e['notes'] == 1 else 's'} below)"
            if e["kind"] == "folder"
            else f"{e['name']}: {e['title']} (id {e['noteId']})"
            for e in page
        ]
        if len(entries) > limit:
            structured["nextCursor"] = self.services.signer.sign({**bound, "after": list(entries[limit - 1][0])})
            lines.append(f"(more follow: call notes_list again with cursor {structured['nextCursor']})")
        return main.tool_result("\n".join(lines) if lines else "No note or sub-folder there.", structured)

    def after(self, cursor: str | None, bound: dict[str, str]) -> list[Any] | None:
        """The sort key a cursor continues after; -32602 for one not signed here for this principal and folder."""
        if cursor is None:
            return None
        # A cursor is the server's own signed claims: a forged, edited or borrowed one (another
        # principal's, another workspace's or folder's) is refused before any store is read.
        try:
            claims = self.services.signer.verify(cursor)
        except main.StateError:
            claims = {}
        key = claims.get("after")
        if any(claims.get(name) != value for name, value in bound.items()) or not (
            isinstance(key, list) and len(key) == 3 and type(key[0]) is int and all(isinstance(k, str) for k in key[1:])
        ):
            raise main.McpError(main.INVALID_PARAMS, "Invalid params: cursor is not valid")
        return key

    def entries(self, workspace: main.Path, folder: main.Path) -> list[tuple[tuple[int, str, str], dict[str, Any]]]:
        """Every entry directly in `folder`, with its sort key: folders (0), notes (1), by folded name, then id."""
        folders: dict[str, int] = {}
        notes: list[tuple[tuple[int, str, str], dict[str, Any]]] = []
        for note in self.bodies().candidates(folder, ""):
            path = note.path  # parsed once: layer 2 (main.inside_workspace's test) and the names below the folder
            if not (len(path) > len(workspace) and main.is_within(path, workspace) and main.is_within(path, folder)):
                continue  # layer 2, again for each note: never one outside the workspace
            rest = path[len(folder) :]
            if len(rest) > 1:
                folders[rest[0]] = folders.get(rest[0], 0) + 1
            elif rest:
                notes.append(
                    (
                        (1, stores.fold_title(rest[0]), note.id),
                        {"kind": "note", "name": rest[0], "noteId": note.id, "title": note.title},
                    )
                )
        listed = [
            ((0, stores.fold_title(name), name), {"kind": "folder", "name": name, "notes": count})
            for name, count in folders.items()
        ]
        return sorted(listed + notes, key=lambda entry: entry[0])


class NotesSearch(NoteTool):
    """`notes_search`: the notes holding every word of the query, ranked: ids, titles, snippets, a page at a time."""

    descriptor = descriptor(
        "notes_search",
        "Search notes",
        "Find notes in the workspace folder you name that hold every word of the query, in the title or the text "
        "(case, accents' "
        'composition and width folded; "a quoted phrase" must appear as written; Japanese and Chinese match as '
        "written). Ranked: "
        "notes whose title holds every word first, then by relevance. Returns ids, titles and a short snippet, at "
        "most "
        f"{MAX_SEARCH_LIMIT} a page; pass nextCursor back as cursor (with the same query) for the next page. Each "
        "search ranks "
        f"at most {text_index.MAX_RANKED_ROWS:,} matching notes, newest first; past that it says stoppedEarly: add a "
        "word (a notes folder's index still taking in changed files says it too: search again shortly). "
        "Read one with notes_read.",
        {
            "workspaceUri": _URI,
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_QUERY_LENGTH,
                "description": 'Words, all required, anywhere in a note; "quoted words" as one phrase.',
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT, "default": DEFAULT_SEARCH_LIMIT},
            "cursor": {
                "type": "string",
                "minLength": 1,
                "maxLength": text_index.MAX_CURSOR_CHARS,
                "description": "nextCursor from the previous page of this same query and workspace.",
            },
        },
        ["workspaceUri", "query"],
        read_only=True,
        destructive=False,
        idempotent=True,
    )
    descriptor["outputSchema"] = {
        "type": "object",
        "properties": {
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "noteId": {"type": "string"},
                        "title": {"type": "string"},
                        "version": {"type": "string"},
                        "snippet": {"type": "string"},
                    },
                    "required": ["noteId", "title", "version", "snippet"],
                },
            },
            "more": {"type": "boolean"},
            "nextCursor": {"type": "string"},
            "stoppedEarly": {"type": "boolean"},
        },
        "required": ["results", "more", "stoppedEarly"],
    }

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """At most `limit` ranked results from the cursor on: id, title, version, snippet (never a note); a cursor."""
        args, scope = self.begin(call)
        limit = args.get("limit", DEFAULT_SEARCH_LIMIT)
        offset = 0
        if "cursor" in args:
            # A cursor is client input: only one this tool gave out for this very query and
            # workspace is taken, and it names an offset below the row bound (text_index.offset_of).
            found_offset = text_index.offset_of(args["cursor"], args["workspaceUri"], args["query"])
            if found_offset is None:
                raise main.McpError(main.INVALID_PARAMS, text_index.CURSOR_REFUSED)
            offset = found_offset
        query = text_index.parse(args["query"])
        found, stopped = self.bodies().search_text(scope.workspace, args["query"], limit + 1, offset)
        found = [(note, text) for note, text in found if main.inside_workspace(note, scope.workspace)]
        results = [
            {
                "noteId": note.id,
                "title": note.title,
                "version": content_version(note, text),
                "snippet": text_index.search_snippet(text, query, visible, note.title),
            }
            for note, text in found[:limit]
        ]
        more = len(found) > limit
        structured: dict[str, Any] = {"results": results, "more": more, "stoppedEarly": stopped}
        lines = [f"{r['noteId']}: {r['title']} — {r['snippet']}" for r in results]
        if more and offset + limit < text_index.MAX_RANKED_ROWS:
            structured["nextCursor"] = text_index.cursor_for(args["workspaceUri"], args["query"], offset + limit)
            lines.append("(more match: pass nextCursor as cursor for the next page)")
        elif more:
            lines.append(f"(more match past the first {text_index.MAX_RANKED_ROWS:,}; narrow the query)")
        if stopped:
            lines.append(
                f"(the search stopped early: it ranked its bound of {text_index.MAX_RANKED_ROWS:,} matching notes, "
                "newest first, or the folder's index is still taking in changed files; "
                "some notes were not ranked: add a word, or search again shortly)"
            )
        text = "\n".join(lines) if lines else "No note matches in that workspace."
        return main.tool_result(text, structured)


class NotesRead(NoteTool):
    """`notes_read`: a window of one note's text (offset, length in characters, bounded), its size and version."""

    descriptor = descriptor(
        "notes_read",
        "Read a note",
        "The text of one note in the workspace folder you name, from `offset` (characters, default 0) for at most "
        "`length` "
        f"characters (default and at most {MAX_READ_CHARS:,}); the result gives the note's total size in characters "
        "and bytes, "
        "and `nextOffset` when more follows. Its version, which notes_append, notes_edit, notes_update and notes_move "
        "need, is "
        "the whole note's.",
        {
            "workspaceUri": _URI,
            "noteId": _NOTE_ID,
            "offset": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_READ_OFFSET,
                "default": 0,
                "description": "The first character to return (Unicode code points from the start of the note).",
            },
            "length": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_READ_CHARS,
                "default": MAX_READ_CHARS,
                "description": "How many characters to return at most.",
            },
        },
        ["workspaceUri", "noteId"],
        read_only=True,
        destructive=False,
        idempotent=True,
    )

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """Characters [offset, offset + length) of the note's text, its size, where more follows, title, version."""
        args, scope = self.begin(call)
        note, text = self.live(scope, args["noteId"], call.principal)
        offset, length = args.get("offset", 0), args.get("length", MAX_READ_CHARS)
        if offset > len(text):
            raise main.ToolError(
                f"offset {offset:,} is past the end of the note ({len(text):,} characters); nothing to read there."
            )
        piece = text[offset : offset + length]
        end = offset + len(piece)
        truncated = end < len(text)
        structured: dict[str, Any] = {
            "noteId": note.id,
            "title": note.title,
            "version": content_version(note, text),
            "text": piece,
            "offset": offset,
            "truncated": truncated,
            "length": len(text),
            "bytes": len(text.encode("utf-8")),
        }
        if truncated:
            structured["nextOffset"] = end
        said = piece + (
            f"\n(characters {offset:,}..{end:,} of {len(text):,}; read on with offset {end})" if truncated else ""
        )
        return main.tool_result(said, structured)


class NotesCreate(NoteTool):
    """`notes_create`: a new note in the workspace or one of its folders; never over an existing note or file."""

    descriptor = descriptor(
        "notes_create",
        "Create a note",
        "Create a new note with a title and text in the workspace folder you name, or in `folder`, a folder inside it "
        "given "
        "relative to it (e.g. projects/2026); it never replaces an existing note. In a Markdown folder the folder "
        "must exist "
        "already: none is created.",
        {
            "workspaceUri": _URI,
            "title": {"type": "string", "minLength": 1, "maxLength": main.MAX_TITLE_LENGTH},
            "body": text_property("The note's text."),
            "folder": {
                "type": "string",
                "maxLength": MAX_PATH_LENGTH,
                "default": "",
                "description": 'A folder inside the workspace, relative to it; "" or absent: the workspace itself.',
            },
        },
        ["workspaceUri", "title", "body"],
        read_only=False,
        destructive=False,
        idempotent=False,
    )

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """Create the note at the first free place for its title in the folder (audited), or say why not."""
        args, scope = self.begin(call)
        title = args["title"]
        # A title is one visible line: a newline would end the heading, a bidi control disguise it.
        if not title.isprintable() or not title.strip():
            raise main.ToolError(
                f"Invalid arguments for tool {self.name}: title must be one line of visible characters."
            )
        folder = args.get("folder", "")
        # The folder is checked as a move's destination is (layer 2 before the store sees it);
        # the store then opens it as it opens every folder, and refuses what is not one.
        where = below(scope.workspace, relative_parts(folder, FOLDER_RULE), "folder") if folder else scope.workspace
        done = self.bodies().create_note(call.principal, where, title, args["body"])
        if isinstance(done, str):
            raise main.ToolError(done)
        note, text = self.live(scope, done.id, call.principal)
        return main.tool_result(
            f"Created note {note.id} ({note.title}) at {note.uri}.",
            {
                "created": True,
                "noteId": note.id,
                "title": note.title,
                "uri": note.uri,
                "version": content_version(note, text),
            },
        )


class NotesAppend(NoteTool):
    """`notes_append`: text added at the end of a note read at `version`; never overwrites."""

    descriptor = descriptor(
        "notes_append",
        "Append to a note",
        "Add text at the end of a note (nothing is overwritten). Pass the version notes_read returned: if the note "
        "changed "
        "since, nothing is added.",
        {
            "workspaceUri": _URI,
            "noteId": _NOTE_ID,
            "text": text_property("The text to add at the end.", 1),
            "version": _VERSION,
        },
        ["workspaceUri", "noteId", "text", "version"],
        read_only=False,
        destructive=False,
        idempotent=True,
    )

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """Append in one store transaction that re-checks layers 1 and 2 and the version (audited), or refuse."""
        args, scope = self.begin(call)
        note, text = self.live(scope, args["noteId"], call.principal)
        if content_version(note, text) != args["version"]:
            raise main.ToolError(STALE)
        done = self.bodies().append_note(
            call.principal, scope.workspace, note.id, args["text"], self.check(call.principal, scope, args["version"])
        )
        if isinstance(done, str):
            raise main.ToolError(done)
        written, now = done
        return main.tool_result(
            f"Appended to note {written.id}.",
            {"appended": True, "noteId": written.id, "version": content_version(written, now)},
        )


class ConfirmedTool(NoteTool, browser_confirm.Confirmed):
    """A destructive note tool on the one confirmation cycle (browser_confirm.Confirmed): its form, review and write."""

    noun, effect, asks, same = "changed", "the change is made", "review the change", "the same arguments"
    url_message = "Review the change and confirm it on this server's page."

    def __init__(
        self,
        services: main.Services,
        confirming: confirmations.Confirmations,
        flow: browser_confirm.PageFlow | None = None,
    ) -> None:
        NoteTool.__init__(self, services, confirming)
        browser_confirm.Confirmed.__init__(self, services, flow)
        self.refusal = (
            f"Server requires form elicitation for {self.name}. Nothing was changed: a person must confirm this "
            "change, in a host that shows forms (one that declares elicitation.form) or on this server's "
            "confirmation page, which its operator turns on with --confirm-in-browser."
        )
        if self.page_on():
            self.descriptor = with_confirmation(self.descriptor)

    def digest_of(self, scope: main.Scope, args: dict[str, Any]) -> str:
        """The arguments' digest with what they bind beyond themselves (the new text's sha256)."""
        return self.digest(scope, args, **self.bound(args))

    def apply(
        self,
        principal: str,
        scope: main.Scope,
        args: dict[str, Any],
        state: main.StatePayload,
        target: tuple[str, str],
        answer: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The confirmed write: the store's one transaction claims the nonce, re-checks layers 1, 2, version, writes."""
        # The digest of the arguments already binds the new text's sha256; the claim says it again, readably.
        if len(state.cands) != 1 or any(state.extra.get(name) != value for name, value in self.bound(args).items()):
            raise main.McpError(main.INVALID_PARAMS, main.STATE_INVALID)
        (note_id, version) = state.cands[0]
        prepared = self.prepare(principal, scope, args, state, answer)
        done = self.consume_writing(
            principal,
            state,
            lambda who, nonce, expires: self.write(who, nonce, expires, scope, args, note_id, version, prepared),
        )  # a replay: -32602; the bound: isError
        if isinstance(done, str):
            raise main.ToolError(done)  # changed, moved or taken since it was shown: consumed, nothing written
        return self.done(done, scope)

    def opening(self, call: main.ToolCall, scope: main.Scope, args: dict[str, Any]) -> browser_confirm.Opening:
        """The form's checks (the live note inside the workspace, its version, a real change), then what the page binds.

        Its signed state binds what the form's does: principal, tool, the arguments' digest
        (the new text by its sha256), the note and its version, the nonce, the expiry.
        """
        note, text = self.live(scope, args["noteId"], call.principal)
        version = content_version(note, text)
        if "version" in args and version != args["version"]:
            raise main.ToolError(STALE)
        self.refuse_no_change(scope, args, note, text)
        detail = json.dumps({"noteId": note.id, "version": version, **self.shown(args)})
        return browser_confirm.Opening([(note.id, version)], self.binds(scope, args, note, text), note.title, detail)

    def review(self, record: browser_confirm.Record) -> browser_confirm.Review | str:
        """The change a pending record asks for, read live: layer 1, the note in the workspace (layer 2), version."""
        workspace = main.parse_file_uri(record.workspace)
        if not self.policy.allows(record.principal, workspace):  # a grant may have been revoked since
            return "That workspace is no longer authorized for you; nothing can be changed here."
        detail = json.loads(record.detail or "{}")
        try:
            found = self.texts.note_text(str(detail.get("noteId", "")), workspace) if self.texts is not None else None
        except stores.StoreRefused as exc:
            return str(exc)  # the folder was replaced since start-up: nothing to approve, said as the tools say it
        if (
            found is None
            or not main.inside_workspace(found[0], workspace)
            or content_version(*found) != detail.get("version")
        ):
            return PAGE_STALE
        note, text = found
        shown = self.shows(workspace, note, text, detail)
        if shown is None:
            return PAGE_STALE
        asked = f"\u201c{visible(note.title)}\u201d ({note.id}) in {person_uri(record.workspace)}"
        request = f"Your MCP client called {self.name} for {asked}."
        return browser_confirm.Review(
            self.heading,
            request,
            shown,
            self.page_hint(),
            (browser_confirm.Choice(note.id, content_version(note, text)),),
        )

    def shows(self, workspace: main.Path, note: main.Note, text: str, detail: dict[str, Any]) -> str | None:
        """The change as the page shows it, whole; None if it no longer makes sense."""
        raise NotImplementedError

    def page_hint(self) -> str:
        """What happens to what the change replaces."""
        raise NotImplementedError

    def refuse_no_change(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> None:
        """A ToolError when the arguments ask for no valid change (checked before any page is opened)."""
        raise NotImplementedError

    def ask_form(
        self, call: main.ToolCall, scope: main.Scope, args: dict[str, Any], follows: main.StatePayload | None
    ) -> dict[str, Any]:
        """The form over the live note (layer 2), the state binding its version (and the new text's sha256)."""
        note, text = self.live(scope, args["noteId"], call.principal)
        version = content_version(note, text)
        if "version" in args and version != args["version"]:
            raise main.ToolError(STALE)
        form, extra = self.asked(scope, args, note, text)
        return self.confirmations.ask(
            call,
            self.digest_of(scope, args),
            self.phase,
            {self.key: form},
            [(note.id, version)],
            extra,
            follows=follows,
        )

    def asked(
        self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The form and what its state binds beyond the arguments (a move reads its links once for both)."""
        return self.form(scope, args, note, text), self.binds(scope, args, note, text)

    def bound(self, args: dict[str, Any]) -> dict[str, str]:
        """What the state binds beyond the arguments' own values (the sha256 of new text)."""
        return {}

    def binds(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> dict[str, str]:
        """What the state binds beyond the arguments, read from the store when asked (a move: the links it rewrites)."""
        return self.bound(args)

    def prepare(
        self,
        principal: str,
        scope: main.Scope,
        args: dict[str, Any],
        state: main.StatePayload,
        answer: dict[str, Any] | None,
    ) -> Any:
        """What the write needs beyond the arguments, checked against the state before the claim (a move's rewrites)."""
        return None

    def form(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def write(
        self,
        principal: str,
        nonce: str,
        expires: float,
        scope: main.Scope,
        args: dict[str, Any],
        note_id: str,
        version: str,
        prepared: Any = None,
    ) -> tuple[main.Settlement, Any]:
        raise NotImplementedError

    def done(self, note: main.Note, scope: main.Scope) -> dict[str, Any]:
        raise NotImplementedError


class NotesUpdate(ConfirmedTool):
    """`notes_update`: a note's whole text replaced, after a person confirmed the diff; the old text to the trash."""

    descriptor = descriptor(
        "notes_update",
        "Replace a note's text",
        "Replace the text of a note read at `version` with `body`. The user sees the change as a diff and confirms it "
        "in a form "
        "before anything is written; the old text goes to the trash, where an operator can restore it.",
        {
            "workspaceUri": _URI,
            "noteId": _NOTE_ID,
            "body": text_property("The note's whole new text."),
            "version": _VERSION,
        },
        ["workspaceUri", "noteId", "body", "version"],
        read_only=False,
        destructive=True,
        idempotent=True,
    )
    key, phase, done_field = UPDATE_KEY, PHASE_UPDATE, "updated"
    heading, apply_label = "Replace a note's text?", "Apply"

    def bound(self, args: dict[str, Any]) -> dict[str, str]:
        """The sha256 of the exact new text: the state cannot confirm other bytes."""
        return {"sha256": text_sha256(args["body"])}

    def form(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> dict[str, Any]:
        """The diff, whole, invisible characters shown, what becomes of the old text; a diff too large is refused."""
        diff = unified_diff(text, args["body"])
        if diff is None:
            raise TooLarge(TOO_LARGE)
        self.refuse_no_change(scope, args, note, text)
        message = (
            f'Replace the text of "{visible(note.title)}" ({note.id}) in '
            f"{person_uri(scope.arguments['workspaceUri'])}? {self.kept()} "
            f"The change (invisible characters shown as \\u escapes):\n{diff}"
        )
        return confirm_form(message, "Apply this change")

    def kept(self) -> str:
        """What happens to the old text."""
        return (
            "The old text is moved to the trash; an operator can restore it."
            if self.texts is not None and self.store.ledger.retention.trash
            else "The old text is not kept."
        )

    def refuse_no_change(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> None:
        """The same text again is no change."""
        if text == args["body"]:
            raise main.ToolError("The new text is the note's text already; nothing to change.")

    def shown(self, args: dict[str, Any]) -> dict[str, str]:
        """The page keeps the new text itself, to show the whole diff."""
        return {"body": args["body"]}

    def shows(self, workspace: main.Path, note: main.Note, text: str, detail: dict[str, Any]) -> str | None:
        """The whole diff, made visible as the form makes it, with no bound but the request's own (MAX_TEXT_BYTES)."""
        body = detail.get("body")
        return whole_diff(text, body)[0] if isinstance(body, str) else None

    def page_hint(self) -> str:
        """The old text's fate, and how invisible characters read."""
        return f"{self.kept()} Invisible characters are shown as \\u escapes."

    def write(
        self,
        principal: str,
        nonce: str,
        expires: float,
        scope: main.Scope,
        args: dict[str, Any],
        note_id: str,
        version: str,
        prepared: Any = None,
    ) -> tuple[main.Settlement, Any]:
        """The store's one transaction: claim, re-check (layers 1, 2, version), old text to the trash, new text in."""
        return self.bodies().update_note(
            principal, nonce, expires, scope.workspace, note_id, args["body"], self.check(principal, scope, version)
        )

    def done(self, note: main.Note, scope: main.Scope) -> dict[str, Any]:
        """The confirmed text is written; its version, read again (a folder note's version is its file's)."""
        found = self.bodies().note_text(note.id, scope.workspace)
        return main.tool_result(
            f"Updated note {note.id}.",
            {"updated": True, "noteId": note.id, "version": content_version(*found) if found else ""},
        )


class NotesEdit(NotesUpdate):
    """`notes_edit`: exact find-and-replace in a note read at `version`, as many matches as expected; an update."""

    descriptor = descriptor(
        "notes_edit",
        "Edit a note",
        "Replace every occurrence of `oldText` with `newText` in a note read at `version` (exact text, case and "
        "spaces as they are; "
        "`expectedMatches`, default 1, must be how many times oldText occurs, or nothing is changed and the result "
        "says how many "
        "did). The user sees the change as a diff and confirms it in a form before anything is written; the old text "
        "goes to the "
        "trash, where an operator can restore it. To replace the whole text, use notes_update.",
        {
            "workspaceUri": _URI,
            "noteId": _NOTE_ID,
            "oldText": text_property("The exact text to find.", 1),
            "newText": text_property("The text to put in its place (empty: remove it)."),
            "expectedMatches": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_EDIT_MATCHES,
                "default": 1,
                "description": "How many times oldText occurs in the note (non-overlapping); every one is replaced.",
            },
            "version": _VERSION,
        },
        ["workspaceUri", "noteId", "oldText", "newText", "version"],
        read_only=False,
        destructive=True,
        idempotent=False,
    )
    key, phase, done_field = EDIT_KEY, PHASE_EDIT, "updated"
    heading, apply_label = "Edit a note?", "Apply"

    @staticmethod
    def edited(text: str, args: dict[str, Any]) -> str:
        """`text` with every oldText replaced by newText (what the person is shown and what is written)."""
        return text.replace(args["oldText"], args["newText"])

    def bound(self, args: dict[str, Any]) -> dict[str, str]:
        """Nothing beyond the arguments' digest: the new text follows from them and the bound version."""
        return {}

    def form(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> dict[str, Any]:
        """The count checked first, then the diff, whole, as notes_update shows it; one too large is refused."""
        self.refuse_no_change(scope, args, note, text)
        diff = unified_diff(text, self.edited(text, args))
        if diff is None:
            raise TooLarge(TOO_LARGE)
        count = text.count(args["oldText"])
        message = (
            f'Edit "{visible(note.title)}" ({note.id}) in {person_uri(scope.arguments["workspaceUri"])}: replace '
            f"{count} occurrence"
            f"{'' if count == 1 else 's'} of the text below? {self.kept()} "
            f"The change (invisible characters shown as \\u escapes):\n{diff}"
        )
        return confirm_form(message, "Apply this change")

    def refuse_no_change(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> None:
        """A match count other than expected, or a replacement by the same text: refused before any form or page."""
        # The model may have read an older window or guessed: replacing a count it did not
        # expect would change places nobody looked at.
        count, expected = text.count(args["oldText"]), args.get("expectedMatches", 1)
        if count != expected:
            raise main.ToolError(
                f"oldText occurs {count} time{'' if count == 1 else 's'} in the note, not {expected} as "
                "expectedMatches says; nothing was changed. Read the note again, and give a longer oldText "
                "or the count it has."
            )
        if args["oldText"] == args["newText"]:
            raise main.ToolError("newText is oldText; nothing to change.")
        # 1,000 matches of a 30,000-byte newText would build a 30 MB text and diff it: the
        # size is counted first, from the lengths alone, and a note past the stores' bound refused.
        grown = len(text.encode("utf-8")) + count * (
            len(args["newText"].encode("utf-8")) - len(args["oldText"].encode("utf-8"))
        )
        if grown > MAX_EDITED_BYTES:
            raise main.ToolError(
                f"After this edit the note would hold {grown:,} bytes, more than the {MAX_EDITED_BYTES:,} a note "
                "may hold; nothing was changed."
            )

    def shown(self, args: dict[str, Any]) -> dict[str, Any]:
        """The page keeps the find-and-replace itself, to show the whole diff."""
        return {
            "oldText": args["oldText"],
            "newText": args["newText"],
            "expectedMatches": args.get("expectedMatches", 1),
        }

    def shows(self, workspace: main.Path, note: main.Note, text: str, detail: dict[str, Any]) -> str | None:
        """The whole diff of the edit over the live text, made visible; None if the count no longer holds."""
        old, new, expected = detail.get("oldText"), detail.get("newText"), detail.get("expectedMatches")
        if not (isinstance(old, str) and old and isinstance(new, str)) or text.count(old) != expected:
            return None
        return whole_diff(text, text.replace(old, new))[0]

    def write(
        self,
        principal: str,
        nonce: str,
        expires: float,
        scope: main.Scope,
        args: dict[str, Any],
        note_id: str,
        version: str,
        prepared: Any = None,
    ) -> tuple[main.Settlement, Any]:
        """notes_update's transaction with the note's edited text at its bound version; other text fails re-check."""
        # The text is read outside the transaction; the re-check inside it compares the live
        # note to the bound version, so a text changed in between is refused, never edited.
        found = self.bodies().note_text(note_id, scope.workspace)
        body = self.edited(found[1], args) if found is not None else ""
        return self.bodies().update_note(
            principal, nonce, expires, scope.workspace, note_id, body, self.check(principal, scope, version)
        )

    def done(self, note: main.Note, scope: main.Scope) -> dict[str, Any]:
        """notes_update's answer, naming the edit."""
        result = super().done(note, scope)
        result["content"][0]["text"] = f"Edited note {note.id}."
        return result


class NotesMove(ConfirmedTool):
    """`notes_move`: a note given another place in the workspace, after a person confirmed; never over another note."""

    descriptor = descriptor(
        "notes_move",
        "Move a note",
        "Move a note to another place inside the same workspace folder (newPath: a relative path ending in .md, e.g. "
        "archive/old.md). "
        "The user confirms in a form first; a note already at that place is never replaced. Notes whose [[links]] "
        "name the note by "
        "its place are listed in the same form, and their links rewritten to the new place unless the user unticks it "
        "(rewriteLinks: false asks for no rewrite).",
        {
            "workspaceUri": _URI,
            "noteId": _NOTE_ID,
            "newPath": {"type": "string", "minLength": 1, "maxLength": MAX_PATH_LENGTH},
            REWRITE_FIELD: {
                "type": "boolean",
                "default": True,
                "description": "Offer to rewrite [[links]] to the note in other notes of the workspace (default true).",
            },
        },
        ["workspaceUri", "noteId", "newPath"],
        read_only=False,
        destructive=True,
        idempotent=True,
    )
    key, phase, done_field = MOVE_KEY, PHASE_MOVE, "moved"
    heading, apply_label = "Move a note?", "Apply"

    def place(self, workspace: main.Path, new_path: str) -> main.Path:
        """The new place, strictly inside the workspace (layer 2 for where it goes), or a ToolError; never repaired."""
        parts = relative_parts(new_path, MOVE_PATH_RULE)
        if not parts[-1].endswith(".md") or len(parts[-1]) == len(".md"):
            raise main.ToolError(MOVE_PATH_RULE)
        return below(workspace, parts, "newPath")

    def form(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> dict[str, Any]:
        """The form of `asked`."""
        return self.asked(scope, args, note, text)[0]

    def asked(
        self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """Where from, where to, that nothing is replaced, the notes whose links change (a second box); their digest."""
        # A place the store refuses is refused before the links are looked for, and before any form.
        self.refuse_no_change(scope, args, note, text)
        place = self.place(scope.workspace, args["newPath"])
        message = (
            f'Move "{visible(note.title)}" ({note.id}) from {person_uri(note.uri)} to '
            f"{person_uri(main.format_file_uri(place))}? "
            "A note already there is never replaced: the move is refused instead."
        )
        links, why = self.linking(scope.workspace, note, place, args)
        message += (f" {why}" if why else "") + self.listed(links)
        form = confirm_form(message, "Move the note")
        if links:
            form["params"]["requestedSchema"]["properties"][REWRITE_FIELD] = {
                "type": "boolean",
                "default": True,
                "title": f"Also rewrite the links in the {len(links)} note{'' if len(links) == 1 else 's'} listed "
                "(each keeps its old text in the trash)",
            }
        return form, {"links": self.links_digest(links)}

    @staticmethod
    def listed(links: list[Linking]) -> str:
        """The notes whose links change, one line each with every link before and after, made visible."""
        if not links:
            return ""
        lines = [
            f'- "{visible(link.note.title)}" ({visible(link.note.id)}): '
            + ", ".join(f"{visible(was)} \u2192 {visible(now)}" for was, now in link.changes)
            for link in links
        ]
        return "\nLinks to it that the move rewrites (untick the second box to keep them as they are):\n" + "\n".join(
            lines
        )

    def linking(
        self, workspace: main.Path, note: main.Note, place: main.Path, args: dict[str, Any]
    ) -> tuple[list[Linking], str]:
        """The notes of the workspace whose [[links]] to `note` would change at `place`, read now; or none and why."""
        if not args.get(REWRITE_FIELD, True):
            return [], ""
        notes = [other for other in self.bodies().candidates(workspace, "") if main.inside_workspace(other, workspace)]
        if len(notes) > MAX_LINK_SCAN:
            return (
                [],
                f"(The workspace holds more than {MAX_LINK_SCAN:,} notes: links to this note are not looked for or "
                "rewritten.)",
            )
        old, new = main.parse_file_uri(note.uri)[len(workspace) :], place[len(workspace) :]
        # A bare [[name]] is followed only when no other note of the workspace has that file name.
        stem = stores.fold_title(old[-1])
        bare = sum(1 for other in notes if stores.fold_title(main.parse_file_uri(other.uri)[-1]) == stem) == 1
        found: list[Linking] = []
        read_chars = 0
        for other in notes:
            if other.id == note.id:
                continue
            read = self.bodies().note_text(other.id, workspace)
            read_chars += len(read[1]) if read is not None else 0
            if (
                read_chars > MAX_LINK_SCAN_CHARS
            ):  # 5,000 notes of 256 KiB each would be over a gigabyte read for one form
                return [], (
                    f"(The workspace's notes hold more than {MAX_LINK_SCAN_CHARS:,} characters: links to this note "
                    "are not "
                    "looked for or rewritten.)"
                )
            if read is None or "[[" not in read[1] or not main.inside_workspace(read[0], workspace):
                continue
            text, changes = relinked(read[1], old, new, bare)
            if changes:
                found.append(Linking(read[0], content_version(*read), text, tuple(changes)))
        if len(found) > MAX_LINKING_NOTES:
            return [], (
                f"({len(found)} notes link to it, more than the {MAX_LINKING_NOTES} one form lists: their links are "
                "not "
                "rewritten.)"
            )
        return found, ""

    @staticmethod
    def links_digest(links: list[Linking]) -> str:
        """What a state binds of a move's rewrites: each note's id, version and new text's sha256 ("" for none)."""
        return main.digest([[link.note.id, link.version, text_sha256(link.text)] for link in links]) if links else ""

    def binds(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> dict[str, str]:
        """The rewrites the person is shown, by digest: a note changed, added or gone since is not rewritten unseen."""
        links, _ = self.linking(scope.workspace, note, self.place(scope.workspace, args["newPath"]), args)
        return {"links": self.links_digest(links)}

    def prepare(
        self,
        principal: str,
        scope: main.Scope,
        args: dict[str, Any],
        state: main.StatePayload,
        answer: dict[str, Any] | None,
    ) -> Any:
        """The rewrites as shown, read again (none if unticked); a set changed since: refused, no move."""
        chosen = True if answer is None else answer.get(REWRITE_FIELD, True)
        if not isinstance(chosen, bool):
            raise main.McpError(main.INVALID_PARAMS, "Invalid params: the answer does not match the form")
        if not chosen:
            return ()
        found = self.bodies().note_text(state.cands[0][0], scope.workspace)
        if found is None:
            return ()  # the store's re-check refuses the move itself
        links, _ = self.linking(scope.workspace, found[0], self.place(scope.workspace, args["newPath"]), args)
        if self.links_digest(links) != state.extra.get("links"):
            self.refused(principal, audit.Facts(found[0].id, found[0].title, found[0].uri))
            raise main.ToolError(stores.LINKS_CHANGED)
        check = self.check
        return tuple((link.note.id, link.text, check(principal, scope, link.version)) for link in links)

    def refuse_no_change(self, scope: main.Scope, args: dict[str, Any], note: main.Note, text: str) -> None:
        """A destination not inside the workspace, or one the store refuses: refused before any form or page."""
        # The person must never approve a move the store then refuses: a place taken, a
        # folder that does not exist, or one where no tool would reach the note again.
        refusal = self.bodies().move_refusal(scope.workspace, note, self.place(scope.workspace, args["newPath"]))
        if refusal is not None:
            raise main.ToolError(refusal)

    def shown(self, args: dict[str, Any]) -> dict[str, str]:
        """The page keeps the destination as asked, and whether links are rewritten."""
        return {"newPath": args["newPath"], REWRITE_FIELD: args.get(REWRITE_FIELD, True)}

    def shows(self, workspace: main.Path, note: main.Note, text: str, detail: dict[str, Any]) -> str | None:
        """Where from and where to, made visible, and the notes whose links the approval rewrites."""
        try:
            place = self.place(workspace, str(detail.get("newPath", "")))
        except main.ToolError:
            return None
        links, why = self.linking(workspace, note, place, detail)
        return (
            f"from: {person_uri(note.uri)}\nto:   {person_uri(main.format_file_uri(place))}"
            + (f"\n{why}" if why else "")
            + self.listed(links).replace(
                "(untick the second box to keep them as they are)",
                "(Keep, then ask for the move with rewriteLinks false, to keep them)",
            )
        )

    def page_hint(self) -> str:
        """That nothing is replaced."""
        return "A note already at that place is never replaced: the move is refused instead."

    def write(
        self,
        principal: str,
        nonce: str,
        expires: float,
        scope: main.Scope,
        args: dict[str, Any],
        note_id: str,
        version: str,
        prepared: Any = None,
    ) -> tuple[main.Settlement, Any]:
        """The store's one transaction: claim, re-check (layers 1, 2, version), move if the place is free."""
        place = self.place(scope.workspace, args["newPath"])
        return self.bodies().move_note(
            principal,
            nonce,
            expires,
            scope.workspace,
            note_id,
            place,
            self.check(principal, scope, version),
            prepared or (),
        )

    def done(self, note: main.Note, scope: main.Scope) -> dict[str, Any]:
        """The note's new place and id, as the store wrote them (its id may change with it, in a folder)."""
        return main.tool_result(
            f"Moved note to {note.uri} (id {note.id}).", {"moved": True, "noteId": note.id, "uri": note.uri}
        )


TOOLS: tuple[type[NoteTool], ...] = (
    NotesWorkspaces,
    NotesList,
    NotesSearch,
    NotesRead,
    NotesCreate,
    NotesAppend,
    NotesUpdate,
    NotesEdit,
    NotesMove,
)


def install(server: Any) -> None:
    """Register the note tools on a frame.Server (after notes_delete, so the lesson's tool stays first).

    Where notes_delete is the product's (browser_confirm.ConfirmedNotesDelete), notes_update and
    notes_move share its confirmation page: its option, its decisions table, the links its pages serve.
    """
    flow = getattr(server.tools.get(main.TOOL_NAME), "flow", None)
    for tool in TOOLS:
        if issubclass(tool, ConfirmedTool):
            server.add_tool(tool(server.services, server.confirmations, flow))
        else:
            server.add_tool(tool(server.services, server.confirmations))
