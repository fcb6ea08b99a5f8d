"""Explicit scope and stateless elicitation: a reference MCP server (revision 2026-07-28).

One destructive tool, `notes_delete`, takes its scope from an explicit `workspaceUri`, asks which note to delete
with a form returned as `input_required`, binds the answer with an HMAC-signed `requestState`, and consumes that
confirmation at most once through a replay store every instance shares. A refused request changes nothing; a
confirmation ends with its first final answer (a decline, a "no", a deletion, or a note found changed).

Read it top to bottom beside the lesson: the errors, then the lesson's headings in order, each name defined above
its first use. The tool's whole two-call flow is section 10, right after the machinery it calls; the protocol frame
and the demo come last:

    1. The two problems, and explicit scope (Roots as a migration surface)
    2. The three-layer rule: authorization, containment, sandbox
    3. Elicitation delivered as input_required
    4. Capability negotiation per request
    5. Form mode
    6. Response branches
    7. Protecting destructive MRTR state: signing the state
    8. Protecting destructive MRTR state: the replay store
    9. Protecting destructive MRTR state: the live re-check
   10. The two-call flow, in one place: notes_delete
   11. The protocol frame: handle() and the JSON-RPC envelope
   12. The protocol frame: server/discover
   13. The protocol frame: tools/list
   14. The protocol frame: tools/call
   15. The demo

`python3 code/main.py` runs the demo. Standard library only, and no other module of the
project: the product (`python3 code/serve.py`) builds on this file, never the reverse.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import heapq
import hmac
import json
import math
import os
import re
import secrets
import sys
import textwrap
import threading
import time
import unicodedata
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

# Names and limits. Each limit bounds what a hostile client can make the server hold or
# compute, and each has a test on both sides.
PROTOCOL_VERSION = "2026-07-28"
SUPPORTED_VERSIONS: tuple[str, ...] = (PROTOCOL_VERSION,)
SERVER_INFO = {"name": "notes-scope-elicitation", "version": "1.0.0"}
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

MAX_TITLE_LENGTH = 200  # characters in the `title` argument
MAX_URI_LENGTH = 2048  # characters in the `workspaceUri` argument
MAX_CANDIDATES = 25  # choices in one form; more matches must be narrowed by the caller
MAX_STATE_LENGTH = 8192  # characters of `requestState` accepted before any hashing
DEFAULT_STATE_TTL_SECONDS = 300.0  # a confirmation is valid for five minutes
MAX_STATE_TTL_SECONDS = 3600.0  # a server may not be configured to trust a form longer
MAX_CLOCK_SKEW_SECONDS = 30.0  # a state issued further in the future than this is refused
MAX_REPLAY_PER_PRINCIPAL = 1000  # unexpired consumed confirmations kept per principal
MIN_KEY_BYTES = 32  # HMAC-SHA256 key length
DISCOVER_TTL_MS = TOOLS_TTL_MS = 3_600_000  # cache hints for server/discover and tools/list

TOOL_NAME = "notes_delete"
INPUT_KEY = "delete_choice"  # the key of our one elicitation in `inputRequests`
CHOICE_FIELD = "note_id"  # the form's single-select: which note
CONFIRM_FIELD = "confirm"  # the form's checkbox: delete it
PHASE_CONFIRM = "confirm_delete"
STATE_VERSION = "v1"
STATE_INVALID = "Invalid params: requestState is not valid"  # the one message for every state refusal

# Errors, first; call_tool and handle() are the one place that converts them.
#   ToolError  the tool refused what the model can correct (an argument outside the schema, a workspace
#              not granted, no match): an `isError: true` result
#   McpError   the request is wrong (malformed, an unknown method, `arguments` not an object, a NUL or
#              lone surrogate in an argument, a bad or replayed state): a JSON-RPC error

# JSON-RPC 2.0 codes, and two of the codes 2026-07-28 defines in its reserved range.
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022


class ToolError(Exception):
    """A tool execution error: answered as an `isError: true` result the model can act on."""


class McpError(Exception):
    """A protocol error the client is meant to see: a code, a short message, optional data."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


# Who calls and their workspace; what a server is built from is `Services` (section 8).
LESSON_PRINCIPAL = "alice"
LESSON_WORKSPACE = "file:///Users/alice/Documents/Notes"

# === 1. The two problems, and explicit scope (Roots as a migration surface) ============
# Scope: which folder may the tool touch? Roots were a hint from the client, never a
# sandbox, and 2026-07-28 deprecates them; the scope is an explicit argument the *server*
# authorizes (section 2). A legacy host's roots may at most suggest a value (legacy.py).
# Consent: which note, and does the person mean it? A form asks (sections 3-6); the
# protocol is stateless, so the question travels with a signed state (sections 7-9).

# What tools/list shows: each argument with the text a model reads, and hints that tell a host the tool deletes.
URI_HELP = "file:// URI of the workspace folder to search (must be authorized for you)."
TITLE_HELP = "Text the note's title contains (case-insensitive)."
DESTRUCTIVE_HINTS = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": False}
NOTES_DELETE_TOOL: dict[str, Any] = {
    "name": TOOL_NAME,
    "title": "Delete a note",
    "description": (
        "Delete one note whose title matches, inside the workspace folder you name. "
        "The user chooses the note and confirms in a form before anything is deleted."
    ),
    "inputSchema": {
        "type": "object",
        "properties": {
            "workspaceUri": {"type": "string", "format": "uri", "maxLength": MAX_URI_LENGTH, "description": URI_HELP},
            "title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE_LENGTH, "description": TITLE_HELP},
        },
        "required": ["workspaceUri", "title"],
        "additionalProperties": False,
    },
    "outputSchema": {
        "type": "object",
        "properties": {
            "deleted": {"type": "boolean"},
            "noteId": {"type": "string"},
            "reason": {"type": "string", "enum": ["declined", "cancelled", "not_confirmed"]},
        },
        "required": ["deleted"],
        "additionalProperties": False,
    },
    "annotations": {"title": "Delete a note", **DESTRUCTIVE_HINTS},
}


class ScopeArgs(NamedTuple):
    """Validated scope arguments: the workspace URI (not yet parsed) and the title query."""

    workspace_uri: str
    title: str


def read_scope_args(arguments: Any, tool: str = TOOL_NAME) -> ScopeArgs:
    """`{workspaceUri, title}` checked against the inputSchema: not an object is -32602, a schema miss a ToolError."""
    if not isinstance(arguments, dict):
        raise McpError(INVALID_PARAMS, f"Invalid params: arguments for tool {tool} must be an object")
    invalid = f"Invalid arguments for tool {tool}:"  # what every schema miss below begins with
    unknown = arguments.keys() - {"workspaceUri", "title"}
    if unknown:
        raise ToolError(f"{invalid} unexpected property {min(unknown)!r}.")
    uri, title = arguments.get("workspaceUri"), arguments.get("title")
    if not isinstance(uri, str) or not 0 < len(uri) <= MAX_URI_LENGTH:
        raise ToolError(f"{invalid} workspaceUri must be a file:// URI string of 1..{MAX_URI_LENGTH} characters.")
    if not isinstance(title, str) or not 0 < len(title) <= MAX_TITLE_LENGTH or not title.strip():
        raise ToolError(f"{invalid} title must be 1..{MAX_TITLE_LENGTH} characters, not only spaces.")
    # A NUL or a lone surrogate is text no title or path holds and no store can encode:
    # refused before any store sees it, as the malformed request it is.
    for name, text in (("workspaceUri", uri), ("title", title)):
        if "\x00" in text or any("\ud800" <= ch <= "\udfff" for ch in text):
            raise McpError(INVALID_PARAMS, f"Invalid params: {name} for tool {tool} holds a NUL or a lone surrogate")
    return ScopeArgs(uri, title)


# === 2. The three-layer rule: authorization, containment, sandbox ======================
#   1. Authorization: is this authenticated principal allowed this workspace?
#   2. Containment: is the note inside it, compared by path components? (On disk, the
#      folder store opens each component O_NOFOLLOW relative to a directory descriptor.)
#   3. Sandbox: the operating system confines the process (code/sandbox.py); no code here can.
# Ambiguous spellings (`..`, `%2e%2e`, double encoding, backslashes) are refused, never
# resolved: resolving `..` lexically disagrees with the file system across a symlink.
Path = tuple[str, ...]  # a normalized absolute path, one entry per component


class ScopeError(ValueError):
    """A URI that cannot name a local folder or file (the reason is safe to show)."""


def parse_file_uri(uri: Any) -> Path:
    """A `file://` URI to its path components, refusing every ambiguous spelling.

    `file:///Users/alice/Documents/Notes-evil/secret.md` parses, and is_within keeps it
    out of `.../Notes`; `file:///Users/alice/Documents/Notes/%2e%2e/private.md` is refused.
    """
    if not isinstance(uri, str) or len(uri) > MAX_URI_LENGTH:
        raise ScopeError(f"must be a file:// URI of at most {MAX_URI_LENGTH} characters")
    if any("\ud800" <= ch <= "\udfff" for ch in uri):  # a lone surrogate names no file and no encoder takes it
        raise ScopeError("must be valid UTF-8 text")
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.lower() != "file":
        raise ScopeError("must use the file:// scheme")
    if "?" in rest or "#" in rest:  # the same folder would have many names
        raise ScopeError("must not have a query or fragment")
    host, slash, encoded_path = rest.partition("/")
    if host.lower() not in ("", "localhost") or not slash:  # another host's files are not ours
        raise ScopeError("must name a local path (file:///... or file://localhost/...)")
    try:
        path = unquote(encoded_path, errors="strict")  # percent-decode exactly once
    except UnicodeDecodeError:
        raise ScopeError("must be valid UTF-8 after percent-decoding") from None
    if "%" in path:  # double encoding (%252e -> %2e): a second decoder downstream would see `..`
        raise ScopeError("must not contain double percent-encoding or a literal %")
    # Backslash is a separator on Windows and NUL truncates C strings: both change which
    # file the system opens without changing what a string check sees.
    if "\\" in path:
        raise ScopeError("must not contain backslashes")
    if re.search("[\x00-\x1f\x7f]", path):  # NUL and every other control character
        raise ScopeError("must not contain control characters")
    parts = tuple(part for part in path.split("/") if part not in ("", "."))  # `a//./b` is `a/b` on every system
    if ".." in parts:
        raise ScopeError("must not contain .. components")
    return parts


def format_file_uri(path: Path) -> str:
    """The one canonical spelling of a path as a URI (`file:///` plus encoded components)."""
    return "file:///" + quote("/".join(path), safe="/")


def is_within(path: Path, folder: Path) -> bool:
    """Component-wise containment (inclusive): never a string prefix, so Notes-evil is out."""
    return path[: len(folder)] == folder


class AuthorizationPolicy:
    """Principal -> workspaces they may act on; a sub-folder of one of them is also allowed."""

    def __init__(self, grants: Mapping[str, Iterable[str]]) -> None:
        self._grants: dict[str, tuple[Path, ...]] = {}
        for principal, uris in grants.items():
            # A bare string would be read one character at a time, "f", "i", "l", "e", ...
            if not isinstance(principal, str) or not principal or isinstance(uris, str):
                raise ValueError(f"workspaces must be a list of URIs under a non-empty name (got {principal!r})")
            try:
                self._grants[principal] = tuple(parse_file_uri(uri) for uri in uris)
            except ScopeError as exc:
                raise ValueError(f"a workspace for {principal!r} {exc}") from None

    def allows(self, principal: str, workspace: Path) -> bool:
        """True when this principal was granted `workspace` or a folder that contains it."""
        return any(is_within(workspace, granted) for granted in self._grants.get(principal, ()))

    def workspaces(self, principal: str) -> list[str]:
        """The principal's granted workspaces, canonical URIs (for hosts and adapters)."""
        return [format_file_uri(path) for path in self._grants.get(principal, ())]


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, check_circular=False)


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no spaces, ASCII: equal values give equal bytes (for MACs and digests)."""
    return _CANONICAL.encode(value).encode("ascii")


def digest(value: Any) -> str:
    """A short SHA-256 digest of a JSON value's canonical form."""
    return hashlib.sha256(canonical_json(value)).hexdigest()[:32]


class Scope(NamedTuple):
    """An authorized workspace and the canonical arguments a signed state binds."""

    workspace: Path
    arguments: dict[str, str]  # {"workspaceUri": canonical URI, "title": query}

    @property
    def digest(self) -> str:
        """The digest of the canonical arguments: two spellings of one folder bind alike."""
        return digest(self.arguments)


def your_workspaces(policy: AuthorizationPolicy, principal: str) -> str:
    """The sentence that tells a model which workspaceUri values this principal may pass (nothing about others)."""
    granted = policy.workspaces(principal)
    return "Your workspaces: " + ", ".join(granted) + "." if granted else "You have no authorized workspaces."


def authorize(policy: AuthorizationPolicy, principal: str, args: ScopeArgs, log: Callable[[str], None]) -> Scope:
    """Layer 1: parse the workspace and check the principal's grant, or a ToolError naming their own."""
    try:
        workspace = parse_file_uri(args.workspace_uri)
    except ScopeError as exc:
        raise ToolError(f"workspaceUri {exc}. {your_workspaces(policy, principal)}") from None
    if not policy.allows(principal, workspace):  # the principal comes from the transport
        log(f"refused: principal {principal!r} is not authorized for {format_file_uri(workspace)}")
        raise ToolError(f"That workspace is not authorized for you. {your_workspaces(policy, principal)}")
    return Scope(workspace, {"workspaceUri": format_file_uri(workspace), "title": args.title})


class Note(NamedTuple):
    """A note: stable id, title, where it lives, and a revision that changes on edit."""

    id: str
    title: str
    uri: str  # canonical file URI
    revision: int = 0

    @property
    def path(self) -> Path:
        """The note's location as path components."""
        return parse_file_uri(self.uri)

    @property
    def version(self) -> str:
        """A digest of everything the user was shown or that decides where the note is."""
        return digest([self.id, self.title, self.uri, self.revision])


def inside_workspace(note: Note, workspace: Path) -> bool:
    """Layer 2: the note lies strictly inside the workspace folder, compared by components."""
    path = note.path
    return len(path) > len(workspace) and is_within(path, workspace)


class MemoryNotesStore:
    """Notes in a dict; a lookup scans every title (the product's stores keep indexes)."""

    deletion = "Deletion cannot be undone."  # what deleting does, said in the form

    @staticmethod
    def fold(text: str) -> str:
        """A title as matching compares it: NFC, then casefolded ("café" typed composed finds it stored decomposed)."""
        return unicodedata.normalize("NFC", text).casefold()

    def __init__(self, notes: Iterable[Note]) -> None:
        self._notes = {note.id: (note, self.fold(note.title)) for note in notes}  # id -> (note, folded title)
        self.lock = threading.RLock()  # held by the atomic step from its re-read to its delete

    def candidates(self, workspace: Path, title: str) -> list[Note]:
        """Notes strictly inside `workspace` (layer 2) whose title contains `title` (folded), by title then id."""
        needle = self.fold(title)
        with self.lock:
            found = [(folded, note) for note, folded in self._notes.values() if needle in folded]
        ranked = sorted(found, key=lambda f: (f[0], f[1].id))
        return [note for _, note in ranked if inside_workspace(note, workspace)]

    def get(self, note_id: str) -> Note | None:
        """The live note with this id, or None."""
        with self.lock:
            stored = self._notes.get(note_id)
        return stored[0] if stored else None

    def remove(self, note_id: str) -> None:
        """Delete a note (the atomic step does; tests do, as another actor would)."""
        with self.lock:
            self._notes.pop(note_id, None)

    def put(self, note: Note) -> None:
        """Insert or replace a note (an edit elsewhere; used to show the re-check)."""
        with self.lock:
            self._notes[note.id] = (note, self.fold(note.title))

    def all(self) -> list[Note]:
        """Every note, in id order."""
        with self.lock:
            return sorted((note for note, _ in self._notes.values()), key=lambda note: note.id)


def lookup(store: MemoryNotesStore, scope: Scope) -> list[Note]:
    """Candidates inside the workspace (the store's candidates); none, or more than a form can offer, is a ToolError."""
    title = scope.arguments["title"]
    found = store.candidates(scope.workspace, title)
    if not found:
        raise ToolError(f"No note titled like {title!r} in that workspace.")
    if len(found) > MAX_CANDIDATES:
        raise ToolError(
            f"{len(found)} notes match; more than {MAX_CANDIDATES} cannot be offered. Use a more specific title."
        )
    return found


# === 3. Elicitation delivered as input_required ========================================
# No server-to-client request is in flight: a tool that needs the user answers with
# `input_required`, its questions (`inputRequests`) and an opaque `requestState`; the client asks,
# then retries the same call with a fresh id, `inputResponses` and the state echoed (section 4 reads them).
def input_required(requests: dict[str, Any], state: str) -> dict[str, Any]:
    """An `input_required` result: the questions and the state the retry must echo."""
    return {"resultType": "input_required", "inputRequests": requests, "requestState": state}


# === 4. Capability negotiation per request =============================================
# No `initialize`, no session: every request declares its protocol version and what its
# client can do in `params._meta`, and nothing carries over to the next request.
class RequestMeta(NamedTuple):
    """What a modern request declares about itself; nothing carries over between requests."""

    protocol_version: str
    capabilities: dict[str, Any]


def read_meta(params: Any) -> RequestMeta:
    """Check `params._meta` has a string version and an object of capabilities, or -32602."""
    if not isinstance(params, dict):
        raise McpError(INVALID_PARAMS, "Invalid params: params must be an object carrying _meta")
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        raise McpError(INVALID_PARAMS, "Invalid params: _meta is required")
    version = meta.get(META_PROTOCOL_VERSION)
    if not isinstance(version, str):
        problem = "must be a string" if META_PROTOCOL_VERSION in meta else "is missing"
        raise McpError(INVALID_PARAMS, f"Invalid params: _meta[{META_PROTOCOL_VERSION!r}] {problem}")
    capabilities = meta.get(META_CLIENT_CAPABILITIES)
    if not isinstance(capabilities, dict):
        missing = "is missing (send {} for a client with none)"
        problem = "must be an object" if META_CLIENT_CAPABILITIES in meta else missing
        raise McpError(INVALID_PARAMS, f"Invalid params: _meta[{META_CLIENT_CAPABILITIES!r}] {problem}")
    return RequestMeta(version, capabilities)


def check_version(meta: RequestMeta) -> None:
    """Refuse a version this server does not implement with -32022 and the exact data."""
    if meta.protocol_version not in SUPPORTED_VERSIONS:
        data = {"supported": list(SUPPORTED_VERSIONS), "requested": meta.protocol_version}
        raise McpError(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", data)


def supports_form_elicitation(capabilities: Mapping[str, Any]) -> bool:
    """True when this request declares form elicitation: `{}` and `{"form": {}}` do, `{"url": {}}` alone does not."""
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, dict):
        return False
    return not elicitation or isinstance(elicitation.get("form"), dict)  # `{}` means form-only


def require_form_elicitation(meta: RequestMeta) -> None:
    """-32021 naming exactly the form capability, unless this request declares it."""
    # Before any lookup: a client that cannot show the form learns nothing and deletes nothing.
    if not supports_form_elicitation(meta.capabilities):
        message = "Server requires form elicitation for this request. Nothing was deleted: use a host that shows forms."
        required: dict[str, Any] = {"requiredCapabilities": {"elicitation": {"form": {}}}}
        raise McpError(MISSING_REQUIRED_CLIENT_CAPABILITY, message, required)


class ToolCall(NamedTuple):
    """One `tools/call` as a tool sees it: a first call (no state) or a retry with answers."""

    name: str
    arguments: Any
    meta: RequestMeta
    principal: str
    state: str | None = None  # the echoed requestState, on a retry
    responses: dict[str, Any] | None = None  # inputResponses, on a retry


def read_tool_call(params: dict[str, Any], meta: RequestMeta, principal: str) -> ToolCall:
    """The call's name, arguments and MRTR fields; a half or mistyped retry is -32602."""
    name = params.get("name")
    if not isinstance(name, str):
        raise McpError(INVALID_PARAMS, "Unknown tool")
    has_state, has_responses = "requestState" in params, "inputResponses" in params
    if has_state != has_responses:
        raise McpError(INVALID_PARAMS, "Invalid params: requestState and inputResponses go together")
    if has_state and not isinstance(params["inputResponses"], dict):
        raise McpError(INVALID_PARAMS, "Invalid params: inputResponses must be an object")
    if has_state and not isinstance(params["requestState"], str):  # null read as absent would drop the answers
        raise McpError(INVALID_PARAMS, STATE_INVALID)
    state, responses = params.get("requestState"), params.get("inputResponses")
    return ToolCall(name, params.get("arguments", {}), meta, principal, state, responses)


# === 5. Form mode ======================================================================
# A form asks for data a person may see in the client: a choice between records and a
# checkbox. Never a secret: URL mode sends the user to the server's own page (connect.py).
def choice_options(notes: list[Note]) -> list[dict[str, str]]:
    """A titled single-select's options: each note's id, shown by its title (with the id when two look alike)."""
    shown = [unicodedata.normalize("NFC", note.title) for note in notes]  # "Café" typed as é or as e + accent
    return [
        {"const": note.id, "title": note.title if shown.count(shown[k]) == 1 else f"{note.title} ({note.id})"}
        for k, note in enumerate(notes)
    ]


def delete_form(workspace_uri: str, title: str, notes: list[Note], outcome: str) -> dict[str, Any]:
    """The elicitation: a titled single-select of the candidates, a confirm box; `outcome` says what deleting does."""
    count = "1 note matches" if len(notes) == 1 else f"{len(notes)} notes match"
    tip = f"Tick to delete the chosen note. {outcome}"
    schema = {
        "type": "object",
        "properties": {
            CHOICE_FIELD: {"type": "string", "title": "Note to delete", "oneOf": choice_options(notes)},
            CONFIRM_FIELD: {"type": "boolean", "title": "Delete the chosen note", "description": tip, "default": False},
        },
        "required": [CHOICE_FIELD, CONFIRM_FIELD],
    }
    asked = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in f'"{title}" in {unquote(workspace_uri)}')
    message = f"{count} {asked}. Choose the note to delete and confirm. {outcome}"  # decoded; hidden characters spelled
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


# === 6. Response branches ==============================================================
# Every answer is read by read_answer and means the same for every tool:
#   (none)     the client did not answer our question: ask again, in the same flow
#   cancel     dismissed: nothing happens, and the same state may be answered again
#   decline    an explicit no: nothing is changed, and this confirmation is consumed
#   accept     the content goes on to the tool; a choice must be one the form showed (chosen, section 7)
#   malformed  -32602, and nothing changes
class Answer(NamedTuple):
    """The user's answer to one elicitation: the action and, for accept, the content."""

    action: str  # "accept", "decline" or "cancel"
    content: dict[str, Any]


def read_answer(responses: dict[str, Any] | None, key: str) -> Answer | None:
    """The answer under `key`, None when absent (ask again), or -32602 when malformed."""
    answer = (responses or {}).get(key)
    if answer is None:
        return None
    if not isinstance(answer, dict) or answer.get("action") not in ("accept", "decline", "cancel"):
        raise McpError(INVALID_PARAMS, f"Invalid params: inputResponses.{key} must be an elicitation result")
    content = answer.get("content")
    if answer["action"] == "accept" and content is not None and not isinstance(content, dict):
        raise McpError(INVALID_PARAMS, "Invalid params: accept needs the form's content")
    return Answer(answer["action"], content or {})


def tool_result(text: str, structured: dict[str, Any] | None = None, *, is_error: bool = False) -> dict[str, Any]:
    """A complete CallToolResult: text for people and models, structured for programs."""
    result: dict[str, Any] = {"resultType": "complete", "content": [{"type": "text", "text": text}]}
    if structured is not None:
        result["structuredContent"] = structured
    return result | {"isError": is_error}


def not_deleted(reason: str, text: str) -> dict[str, Any]:
    """The complete, non-error answer when the user said no, declined or cancelled."""
    return tool_result(text, {"deleted": False, "reason": reason})


# === 7. Protecting destructive MRTR state: signing the state ===========================
#   v1.<key id>.<base64url(canonical JSON claims)>.<base64url(HMAC-SHA256 of what precedes)>
#
# Signed, not encrypted: the client can read every claim, so none may be a secret. The MAC is
# checked in constant time before the JSON is parsed, so a forged state costs one HMAC and never
# reaches the parser or the replay store. new_state and verify_state follow that store (section 8).
class StateError(Exception):
    """requestState failed verification; the reason is logged, never sent."""


def b64url_encode(data: bytes) -> str:
    """Unpadded base64url."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _refuse_constant(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are not JSON: refused before any comparison


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)  # built once, not per call


class StateSigner:
    """Sign and verify requestState with one key; a state lives `ttl` seconds."""

    @staticmethod
    def key_id(key: bytes) -> str:
        """A public name for a key (a hash prefix), so a verifier knows which key signed."""
        return hashlib.sha256(b"notes-mcp key id\x00" + key).hexdigest()[:8]

    def __init__(self, key: bytes, ttl: float = DEFAULT_STATE_TTL_SECONDS) -> None:
        if not isinstance(key, (bytes, bytearray)) or len(key) < MIN_KEY_BYTES:
            raise ValueError(f"every signing key must be at least {MIN_KEY_BYTES} bytes")
        if not (isinstance(ttl, (int, float)) and 0 < ttl <= MAX_STATE_TTL_SECONDS):  # NaN and inf fail too
            raise ValueError(f"state_ttl must be a finite number of seconds in (0, {MAX_STATE_TTL_SECONDS:g}]")
        self.ttl = float(ttl)
        self.signing_id = self.key_id(bytes(key))
        self.keys: dict[str, bytes] = {self.signing_id: bytes(key)}  # key id -> key (a product ring holds more)

    def sign(self, claims: dict[str, Any]) -> str:
        """The claims as a state signed with the signing key."""
        head = f"{STATE_VERSION}.{self.signing_id}.{b64url_encode(canonical_json(claims))}"
        return f"{head}.{b64url_encode(hmac.digest(self.keys[self.signing_id], head.encode('ascii'), 'sha256'))}"

    def verify(self, token: Any) -> dict[str, Any]:
        """Check format, key and MAC, then parse the claims; raises StateError, never anything else."""
        if not isinstance(token, str) or len(token) > MAX_STATE_LENGTH or not token.isascii():
            raise StateError("missing, oversized or not ASCII")  # only ASCII can be a state we signed
        pieces = token.split(".")
        if len(pieces) != 4 or pieces[0] != STATE_VERSION:
            raise StateError("bad format")
        _, key_id, claims_text, mac_text = pieces
        key = self.keys.get(key_id)
        if key is None:
            raise StateError("unknown key id")
        expected = b64url_encode(hmac.digest(key, token[: -(len(mac_text) + 1)].encode("ascii"), "sha256"))
        if not hmac.compare_digest(mac_text, expected):  # as text: only the canonical spelling matches
            raise StateError("bad MAC")
        padded = claims_text + "=" * (-len(claims_text) % 4)
        try:  # past the MAC, these are the very characters this server signed
            claims = _DECODER.decode(base64.urlsafe_b64decode(padded).decode("ascii"))
        except ValueError:
            raise StateError("claims are not JSON") from None
        if not isinstance(claims, dict):
            raise StateError("claims are not an object")
        return claims


class StatePayload(NamedTuple):
    """What a signed state binds: who, which call, which step, what was shown, once, until when."""

    sub: str  # the principal the form was shown to
    tool: str
    args: str  # digest of the canonical arguments
    phase: str  # which step of the tool's flow this state answers
    cands: tuple[tuple[str, str], ...]  # (id, version shown) for every choice offered
    nonce: str  # consumed at most once, by the flow's final answer
    iat: float
    exp: float
    extra: dict[str, Any]  # a tool's own public values (never a secret)

    @classmethod
    def parse(cls, claims: dict[str, Any]) -> StatePayload:
        """Every field present and well typed, or StateError."""
        get: Callable[[str], Any] = claims.get  # any JSON value, or None when absent: each is checked below
        sub, tool, args, phase, nonce = get("sub"), get("tool"), get("args"), get("phase"), get("nonce")
        if not all(isinstance(text, str) for text in (sub, get("method"), tool, args, phase, nonce)):
            raise StateError("malformed claims")
        iat, exp = get("iat"), get("exp")
        for value in (iat, exp):  # checked positively: NaN, strings, booleans and absence fail
            if type(value) not in (int, float) or not math.isfinite(value):
                raise StateError("malformed iat or exp")
        cands, extra = get("cands"), claims.get("extra", {})
        if not isinstance(cands, list) or not all(type(c) is list and list(map(type, c)) == [str, str] for c in cands):
            raise StateError("malformed candidates")
        if not isinstance(extra, dict):
            raise StateError("malformed extra")
        return cls(sub, tool, args, phase, tuple((c[0], c[1]) for c in cands), nonce, float(iat), float(exp), extra)


def chosen(content: Mapping[str, Any], state: StatePayload, field: str = CHOICE_FIELD) -> tuple[str, str]:
    """The (id, version) picked in the form's `field`, which must be one the signed state offered, or -32602."""
    note_id, offered = content.get(field), dict(state.cands)
    # Only a note the user was shown can be chosen: a client cannot swap in another id.
    if not isinstance(note_id, str) or note_id not in offered:
        raise McpError(INVALID_PARAMS, "Invalid params: the answer does not match the form")
    return note_id, offered[note_id]


# === 8. Protecting destructive MRTR state: the replay store ============================
# A signed state proves the server asked; it does not stop the client answering twice. Each
# state carries a random nonce that its final answer claims in a store every instance shares.
# An ordinary replay is refused earlier, by verify_state finding the nonce consumed; retries
# racing past verify_state with one state meet at the claim: the first wins, the rest are used.
class Settlement(enum.Enum):
    """How a claim, or the atomic step around it, ended."""

    CONSUMED = "consumed"  # nonce consumed, nothing deleted (decline, explicit "no")
    DELETED = "deleted"  # nonce consumed, note deleted
    CHANGED = "changed"  # nonce consumed, nothing deleted: the note is gone, edited or moved, or the grant revoked
    USED = "used"  # replay: consumed before, here or on another instance; nothing happened
    FULL = "full"  # the principal holds MAX_REPLAY_PER_PRINCIPAL unexpired confirmations; nothing happened


class MemoryReplayStore:
    """Consumed nonces until their state expires, bounded per principal, under one lock; settle() is the atomic step."""

    def __init__(self, clock: Callable[[], float], max_per_principal: int = MAX_REPLAY_PER_PRINCIPAL) -> None:
        if max_per_principal < 1:
            raise ValueError("max_per_principal must be at least 1")
        self._clock, self._limit = clock, max_per_principal
        self._owner: dict[str, str] = {}  # nonce -> principal
        self._per_principal: dict[str, int] = {}
        self._expiries: list[tuple[float, str]] = []  # heap of (expires at, nonce)
        self._latest = -math.inf  # the highest clock reading seen
        self.lock = threading.RLock()

    def release(self, nonce: str) -> None:
        """Forget a claim: its state expired, or the atomic step failed midway (a stale heap entry is harmless)."""
        with self.lock:
            principal = self._owner.pop(nonce, None)
            if principal is not None:
                self._per_principal[principal] -= 1
                if not self._per_principal[principal]:
                    del self._per_principal[principal]

    def _prune(self) -> float:
        # Never backwards: a clock stepped back (NTP, a restored VM) after a declined state's
        # record was pruned would make that state look unused, and its accept would delete.
        now = self._latest = max(self._latest, self._clock())
        while self._expiries and not now < self._expiries[0][0]:
            self.release(heapq.heappop(self._expiries)[1])
        return now

    def is_consumed(self, nonce: str) -> bool:
        """True when this nonce has been consumed and its state has not yet expired."""
        with self.lock:
            self._prune()
            return nonce in self._owner

    def claim(self, principal: str, nonce: str, expires_at: float) -> Settlement:
        """Consume `nonce`: CONSUMED; USED if consumed already or just expired; FULL at the principal's bound."""
        with self.lock:
            now = self._prune()
            # Verified just before its expiry, arriving just after, when the record of an earlier
            # use is pruned: refused as used, or a declined state's replayed accept would delete.
            if nonce in self._owner or not now < expires_at:
                return Settlement.USED
            if self._per_principal.get(principal, 0) >= self._limit:  # one principal in a loop blocks nobody else
                return Settlement.FULL
            self._owner[nonce] = principal
            self._per_principal[principal] = self._per_principal.get(principal, 0) + 1
            heapq.heappush(self._expiries, (expires_at, nonce))
            return Settlement.CONSUMED

    def __len__(self) -> int:
        with self.lock:
            self._prune()
            return len(self._owner)

    def settle(
        self,
        notes: MemoryNotesStore,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[Note], bool],
    ) -> Settlement:
        """The atomic step under both stores' locks: claim; for `target` (id, version) re-read, re-check, delete."""
        with self.lock, notes.lock:  # no other claim, and no edit of a note, can come between the steps
            outcome = self.claim(principal, nonce, expires_at)
            if outcome is not Settlement.CONSUMED or target is None:
                return outcome
            try:
                live = notes.get(target[0])  # re-read the live record inside the lock
                # Shown minutes ago: gone, edited or no longer allowed ends the confirmation.
                if live is None or live.version != target[1] or not recheck(live):
                    return Settlement.CHANGED
                notes.remove(live.id)
                return Settlement.DELETED
            except BaseException:
                self.release(nonce)  # a check or the store raised: the same state may be answered again
                raise


class Services(NamedTuple):
    """Everything a server is built from; it builds none of it (lesson_server, section 15, does)."""

    # Who calls is not here: the transport authenticates the principal (stdio: the
    # configured user; HTTP: the bearer token's owner), never arguments or clientInfo.
    # Every instance shares the notes and the replay store: here, instances in one process
    # (the demo's two); across processes, one SQLite or PostgreSQL database holds both.
    policy: AuthorizationPolicy  # section 2: principal -> granted workspace folders (layer 1)
    signer: StateSigner  # section 7: one secret of 32+ random bytes, held by every instance
    notes: MemoryNotesStore  # section 2: the notes
    replay: MemoryReplayStore  # above: consumed nonces, and the atomic step
    clock: Callable[[], float]  # injected, so tests move time without sleeping
    log: Callable[[str], None]  # stderr by default, never the protocol stream


def new_state(
    services: Services,
    principal: str,
    tool: str,
    args_digest: str,
    phase: str,
    cands: Iterable[tuple[str, str]],
    follows: StatePayload | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The claims of a new state; one that `follows` an earlier state keeps its nonce and expiry."""
    now = services.clock()
    # A flow asked twice must not hold two live nonces: the first form's state could act again.
    nonce = follows.nonce if follows is not None else b64url_encode(secrets.token_bytes(16))
    exp = follows.exp if follows is not None else now + services.signer.ttl
    call = {"sub": principal, "method": "tools/call", "tool": tool, "args": args_digest, "phase": phase}
    claims = call | {"cands": [list(c) for c in cands], "nonce": nonce, "iat": now, "exp": exp}
    return claims | {"extra": dict(extra)} if extra else claims


def verify_state(
    services: Services, token: Any, principal: str, tool: str, args_digest: str, phases: Collection[str]
) -> StatePayload:
    """The echoed state, verified: ours, for this principal, tool, arguments and step, unexpired, unused, or -32602."""
    try:
        claims = services.signer.verify(token)
        state = StatePayload.parse(claims)
        expected = {"sub": principal, "method": "tools/call", "tool": tool, "args": args_digest}
        for name, value in expected.items():  # another principal, tool, title or workspace
            if claims[name] != value:
                raise StateError(f"{name} does not match")
        if state.phase not in phases:
            raise StateError("phase does not match")  # a state from another step of a flow
        now = services.clock()
        if not now < state.exp:
            raise StateError("expired")
        # Issued in the future (a clock running ahead) would stretch its lifetime; a lifetime
        # over the TTL (a ten-year state) would need its nonce kept that long.
        if not state.iat <= now + MAX_CLOCK_SKEW_SECONDS:
            raise StateError("issued in the future")
        if not state.exp <= state.iat + services.signer.ttl:
            raise StateError("lifetime longer than the TTL")
        if services.replay.is_consumed(state.nonce):  # only a verified nonce ever reaches the store
            raise StateError("confirmation already used")
        return state
    except StateError as exc:
        services.log(f"refused requestState: {exc}")
        raise McpError(INVALID_PARAMS, STATE_INVALID) from None


# === 9. Protecting destructive MRTR state: the live re-check ===========================
# Minutes pass between the form and the answer: the note may have been edited, moved or deleted,
# and the grant revoked. So the final step is one atomic operation: claim the nonce, re-read the
# live record, run layers 1 and 2 again (the re-check NotesDelete.delete passes), delete: in
# memory under both stores' locks (MemoryReplayStore.settle, section 8), in SQLite one transaction.
def refuse_every_note(note: Note) -> bool:
    """The re-check when none is given: no note passes, so nothing is ever deleted by default."""
    return False


def settled(services: Services, principal: str, outcome: Settlement) -> Settlement:
    """The one reading of an atomic step's outcome, for every confirmed tool: a used state is -32602."""
    if outcome is Settlement.USED:  # a retry that raced another past verify_state with one state, or just expired
        services.log("refused requestState: confirmation already used or just expired")
        raise McpError(INVALID_PARAMS, STATE_INVALID)
    if outcome is Settlement.FULL:
        services.log(f"refused: replay bound reached for principal {principal!r}")
        # The bound counts confirmations already used and kept until their states expire.
        raise ToolError("Too many confirmations used recently by you; try again once their forms expire.")
    return outcome


def consume(
    services: Services,
    principal: str,
    state: StatePayload,
    target: tuple[str, str] | None = None,
    recheck: Callable[[Note], bool] = refuse_every_note,
) -> Settlement:
    """Consume a verified state's nonce (and delete `target`) in the one atomic step; a replay is -32602."""
    outcome = services.replay.settle(services.notes, principal, state.nonce, state.exp, target, recheck)
    return settled(services, principal, outcome)


# === 10. The two-call flow, in one place: notes_delete =================================
# First call: authorize the workspace, look up the notes inside it, build the form, sign a state:
# `input_required`. Retry: verify the echoed state, read the answer, branch on it, and for a
# confirmed choice claim the nonce, re-check the live note and delete it in one atomic step.
# Everything it calls is above (sections 7-9); its steps come first, `call` last.
class NotesDelete:
    """`notes_delete`, the lesson's tool: scope, ask, then verify, read the answer, re-check and delete once."""

    descriptor = NOTES_DELETE_TOOL

    def __init__(self, services: Services) -> None:
        self.services = services
        self.policy, self.notes, self.log = services.policy, services.notes, services.log

    def ask(self, call: ToolCall, scope: Scope, follows: StatePayload | None = None) -> dict[str, Any]:
        """The form over the live candidates (layer 2), with a signed state (a new flow unless it `follows` one)."""
        found = lookup(self.notes, scope)
        form = delete_form(scope.arguments["workspaceUri"], scope.arguments["title"], found, self.notes.deletion)
        cands = [(note.id, note.version) for note in found]
        claims = new_state(self.services, call.principal, TOOL_NAME, scope.digest, PHASE_CONFIRM, cands, follows)
        return input_required({INPUT_KEY: form}, self.services.signer.sign(claims))

    def delete(self, principal: str, scope: Scope, state: StatePayload, target: tuple[str, str]) -> dict[str, Any]:
        """Claim the nonce, re-read and re-check the chosen note, and delete it: one atomic step."""

        def recheck(live: Note) -> bool:  # layers 1 and 2 again: grants and notes may have changed
            return self.policy.allows(principal, scope.workspace) and inside_workspace(live, scope.workspace)

        # One text for every failed re-check, a revoked grant included: nothing was deleted.
        if consume(self.services, principal, state, target, recheck) is Settlement.CHANGED:
            raise ToolError(
                "The chosen note changed, moved or was deleted since the form was shown; nothing was deleted."
            )
        return tool_result(f"Deleted note {target[0]}.", {"deleted": True, "noteId": target[0]})

    def call(self, call: ToolCall) -> dict[str, Any]:
        """First call: authorize, look up, form, sign. Retry: verify, read the answer, branch, claim and delete."""
        args = read_scope_args(call.arguments)
        require_form_elicitation(call.meta)  # before any lookup: no form, no knowledge of the notes
        scope = authorize(self.policy, call.principal, args, self.log)  # layer 1, on every call
        if call.state is None:
            return self.ask(call, scope)
        # The retry: ours, for this principal, tool, arguments and step, unexpired, unused; else -32602.
        state = verify_state(self.services, call.state, call.principal, TOOL_NAME, scope.digest, {PHASE_CONFIRM})
        answer = read_answer(call.responses, INPUT_KEY)
        if answer is None:
            return self.ask(call, scope, follows=state)  # the same flow: same nonce, same expiry
        if answer.action == "cancel":
            return not_deleted("cancelled", "Cancelled; nothing was deleted.")  # the state stays usable
        if answer.action == "decline":
            consume(self.services, call.principal, state)
            return not_deleted("declined", "Declined; nothing was deleted.")
        target = chosen(answer.content, state)  # one of the notes the form showed, or -32602
        confirm = answer.content.get(CONFIRM_FIELD)
        if not isinstance(confirm, bool):
            raise McpError(INVALID_PARAMS, "Invalid params: the answer does not match the form")
        if not confirm:
            consume(self.services, call.principal, state)
            return not_deleted("not_confirmed", "Not confirmed; nothing was deleted.")
        return self.delete(call.principal, scope, state, target)


# === 11. The protocol frame: handle() and the JSON-RPC envelope ========================
# The frame's helpers, then Server: handle() reads the envelope, finds the method in the
# one dispatch table (sections 12-14 enter theirs), checks `_meta`, runs it, answers errors.
class Envelope(NamedTuple):
    """A well-formed JSON-RPC message: `id` is None for a notification."""

    id: str | int | None
    method: str
    params: Any  # validated per method; absent params arrive as None


def read_id(message: Any) -> str | int | None:
    """The message's id if it is a legal MCP id (string or integer, not bool/float/null)."""
    value = message.get("id") if isinstance(message, dict) else None
    return value if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)) else None


def parse_envelope(message: Any) -> Envelope:
    """Validate the JSON-RPC 2.0 frame or raise -32600; batches (arrays) are refused."""
    if not isinstance(message, dict):  # MCP removed batching: an array would multiply one message's work
        raise McpError(INVALID_REQUEST, "Invalid Request: expected one JSON-RPC object")
    if message.get("jsonrpc") != "2.0":
        raise McpError(INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"')
    # bool is an int in Python and `true == 1`: refused, with floats and null, so two
    # different wire ids never collide in a client's table.
    if read_id(message) is None and "id" in message:
        raise McpError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    if not isinstance(message.get("method"), str):
        raise McpError(INVALID_REQUEST, "Invalid Request: method must be a string")
    return Envelope(read_id(message), message["method"], message.get("params"))


def error_response(request_id: Any, error: McpError) -> dict[str, Any]:
    """A JSON-RPC error response; `id` is omitted when it could not be read (never null)."""
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data is not None:
        body["data"] = error.data
    return {"jsonrpc": "2.0", **({"id": request_id} if request_id is not None else {}), "error": body}


def cacheable(ttl_ms: int) -> dict[str, Any]:
    """What closes a result any client may cache and share for `ttl_ms`: its lifetime, its scope, our identity."""
    return {"ttlMs": ttl_ms, "cacheScope": "public", "_meta": {META_SERVER_INFO: dict(SERVER_INFO)}}


def stderr_log(line: str) -> None:
    """The default log sink: one line to stderr, never to the protocol stream."""
    print(line, file=sys.stderr, flush=True)


class Server:
    """The protocol server: one dispatch table, one exception boundary, tools added through add_tool."""

    # The one dispatch table: method -> handler(server, request, meta, principal), from sections 12-14.
    METHODS: dict[str, Callable[[Server, Envelope, RequestMeta, str], dict[str, Any]]] = {}

    def __init__(self, services: Services) -> None:
        self.services = services
        self.tools: dict[str, Any] = {}  # name -> a tool: `.descriptor` and `.call(ToolCall)`
        self.methods = dict(self.METHODS)  # this server's own copy: the product adds methods to it

    def add_tool(self, tool: Any) -> None:
        """Register a tool under its descriptor's name (once); tools/list shows it from now on."""
        name = tool.descriptor.get("name")
        if not isinstance(name, str) or not name or name in self.tools:
            raise ValueError(f"a tool needs a new, non-empty name (got {name!r})")
        self.tools[name] = tool

    def capabilities(self) -> dict[str, Any]:
        """The server capabilities discover reports, derived from what is registered."""
        return {"tools": {}} if self.tools else {}

    def read_meta(self, request: Envelope) -> RequestMeta:
        """The request's `_meta` (-32602 when malformed), at a version this server speaks (else -32022)."""
        meta = read_meta(request.params)
        check_version(meta)
        return meta

    def unknown_method(self, method: str) -> McpError:
        """-32601 for a method this server does not handle."""
        return McpError(METHOD_NOT_FOUND, "Method not found")

    def notification(self, request: Envelope) -> None:
        """A well-formed id-less message gets no response; an id-less request is logged and never runs."""
        # A *request* without an id (tools/call, say) could be run silently; here it never
        # runs: a deletion nobody can be told about is worse than a refusal nobody hears.
        # Every request completes synchronously, so notifications/cancelled has nothing to stop.
        if not request.method.startswith("notifications/"):
            self.services.log(f"ignored id-less request {request.method[:64]!r}: a request needs an id")

    def handle(self, message: Any, principal: str) -> dict[str, Any] | None:
        """One decoded message in, its response out (None: no response); the one exception boundary."""
        request_id = read_id(message)
        try:
            request = parse_envelope(message)
            if request.id is None:
                self.notification(request)
                return None
            handler = self.methods.get(request.method)
            if handler is None:
                raise self.unknown_method(request.method)
            meta = self.read_meta(request)
            return {"jsonrpc": "2.0", "id": request.id, "result": handler(self, request, meta, principal)}
        except McpError as exc:
            return error_response(request_id, exc)
        except Exception:  # noqa: BLE001 - this is the boundary
            import traceback  # loaded at the first internal error: most processes never have one

            self.services.log("internal error:\n" + traceback.format_exc())
            return error_response(request_id, McpError(INTERNAL_ERROR, "Internal error"))


# === 12. The protocol frame: server/discover ===========================================
def discover(server: Server, request: Envelope, meta: RequestMeta, principal: str) -> dict[str, Any]:
    """Versions, capabilities and identity: what a client needs before anything else."""
    instructions = (
        "Pass the workspace folder explicitly as workspaceUri; deletions are confirmed by the user "
        "in a form and each confirmation can be used once."
    )
    return {
        "resultType": "complete",
        "supportedVersions": list(SUPPORTED_VERSIONS),
        "capabilities": server.capabilities(),
        "instructions": instructions,
        **cacheable(DISCOVER_TTL_MS),
    }


Server.METHODS["server/discover"] = discover


# === 13. The protocol frame: tools/list ================================================
def list_tools(server: Server, request: Envelope, meta: RequestMeta, principal: str) -> dict[str, Any]:
    """Every tool, in registration order, as fresh copies (callers may mutate what they get)."""
    if request.params.get("cursor") is not None:  # we never hand out a nextCursor
        raise McpError(INVALID_PARAMS, "Invalid params: unknown cursor")
    tools = [json.loads(json.dumps(tool.descriptor)) for tool in server.tools.values()]
    return {"resultType": "complete", "tools": tools, **cacheable(TOOLS_TTL_MS)}


Server.METHODS["tools/list"] = list_tools


# === 14. The protocol frame: tools/call ================================================
def call_tool(server: Server, request: Envelope, meta: RequestMeta, principal: str) -> dict[str, Any]:
    """Find the tool and run it; unknown tools and malformed MRTR fields are -32602, a ToolError an isError result."""
    call = read_tool_call(request.params, meta, principal)
    tool = server.tools.get(call.name)
    if tool is None:
        raise McpError(INVALID_PARAMS, "Unknown tool")
    try:
        result = tool.call(call)
    except ToolError as exc:  # a result the model reads and can correct itself from
        result = tool_result(str(exc), is_error=True)
    result.setdefault("_meta", {META_SERVER_INFO: dict(SERVER_INFO)})
    return result


Server.METHODS["tools/call"] = call_tool


# === 15. The demo ======================================================================
def lesson_notes() -> list[Note]:
    """The lesson fixture: four notes in the workspace, two look-alikes outside it."""
    return [
        Note("note-3", "TPS report 2023", f"{LESSON_WORKSPACE}/tps-2023.md"),
        Note("note-7", "TPS report 2024", f"{LESSON_WORKSPACE}/tps-2024.md"),
        Note("note-14", "TPS report 2025", f"{LESSON_WORKSPACE}/tps-2025.md"),
        Note("note-99", "shopping list", f"{LESSON_WORKSPACE}/shopping.md"),
        Note("evil-1", "TPS report", "file:///Users/alice/Documents/Notes-evil/secret.md"),
        Note("tmp-1", "TPS report", "file:///tmp/tps-report.md"),
    ]


def lesson_server(
    key: bytes, clock: Callable[[], float] = time.time, log: Callable[[str], None] = stderr_log
) -> Server:
    """The configuration above, built: alice granted the lesson workspace, one key, the memory stores."""
    policy = AuthorizationPolicy({LESSON_PRINCIPAL: [LESSON_WORKSPACE]})
    notes, replay = MemoryNotesStore(lesson_notes()), MemoryReplayStore(clock)
    services = Services(policy=policy, signer=StateSigner(key), notes=notes, replay=replay, clock=clock, log=log)
    server = Server(services)
    server.add_tool(NotesDelete(services))
    return server


def request_meta(capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `_meta` a modern client sends on every request."""
    return {
        META_PROTOCOL_VERSION: PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "lesson-client", "version": "1.0.0"},
        META_CLIENT_CAPABILITIES: {"elicitation": {"form": {}}} if capabilities is None else capabilities,
    }


DEMO_WIDTH = 100  # characters in one line of the demo's output


def wire_lines(message: dict[str, Any], width: int) -> list[str]:
    """A wire message as JSON in lines of at most `width`: members that fit share a line, long strings end in "…"."""

    def fit(value: Any, prefix: str, indent: str, tail: str) -> list[str]:
        room = width - len(indent) - len(prefix) - len(tail)
        if isinstance(value, str) and len(json.dumps(value, ensure_ascii=False)) > room:
            if value.startswith(STATE_VERSION + "."):
                value = f"{value[:12]}…({len(value)} chars, signed)"  # the requestState
            while len(json.dumps(value, ensure_ascii=False)) > room and len(value) > 1:
                value = value[: len(value) - 2] + "…"
        flat = json.dumps(value, ensure_ascii=False)
        if len(flat) <= room or not isinstance(value, (dict, list)) or not value:
            return [indent + prefix + flat + tail]
        items = list(value.items()) if isinstance(value, dict) else [(None, item) for item in value]
        lines = [indent + prefix + ("{" if isinstance(value, dict) else "[")]
        for k, (key, item) in enumerate(items):
            label = "" if key is None else json.dumps(key, ensure_ascii=False) + ": "
            last = ("}" if isinstance(value, dict) else "]") + tail
            more = fit(item, label, indent + "  ", last if k == len(items) - 1 else ",")
            joined = lines[-1] + (" " if k else "") + more[0].lstrip()
            if len(more) == 1 and (lines[-1].endswith(",") or not k and not indent) and len(joined) <= width:
                lines[-1] = joined  # a member that fits joins the line before it (the envelope's first, its brace's)
            else:
                lines += more
        return lines

    return fit(message, "", "", "")


def demo(out: Callable[[str], None] = print) -> None:
    """The two-call flow as it crosses the wire, a replay on a second instance, and a declined flow."""
    key = secrets.token_bytes(32)  # random per run, which is why the requestState differs each time
    server = lesson_server(key, log=lambda line: out(f"   (server log: {line})"))
    # A second instance with the same services, as two processes share one database: either may get any retry.
    other = Server(server.services)
    other.add_tool(NotesDelete(server.services))
    seen: list[Any] = []  # an object (`_meta`, `arguments`, a call's `params`) is shown in full once

    def show(arrow: str, message: dict[str, Any]) -> None:
        shown = json.loads(json.dumps(message))
        for part in (shown, shown.get("params"), shown.get("result")):
            for name, value in part.items() if isinstance(part, dict) else ():
                if isinstance(value, dict) and name in ("_meta", "arguments", "params") and value in seen:
                    part[name] = "…(as above)"
                elif isinstance(value, dict):
                    seen.append(json.loads(json.dumps(value)))
        for k, line in enumerate(wire_lines(shown, DEMO_WIDTH - 4)):
            out(f"{arrow if k == 0 else '   '} {line}")

    def exchange(
        title: str, message: dict[str, Any], to: Server = server, view: Callable[[Any], Any] = dict
    ) -> dict[str, Any]:
        out(f"\n## {title}")
        show("-->", message)
        response = to.handle(message, LESSON_PRINCIPAL)
        assert response is not None
        show("<--", view(response))
        return response

    def compact(listed: dict[str, Any]) -> dict[str, Any]:  # each tool's name and inputSchema, no descriptions
        tools: list[dict[str, Any]] = []
        for tool in listed["result"]["tools"]:
            properties = tool["inputSchema"]["properties"]
            bare = {name: {k: v for k, v in prop.items() if k != "description"} for name, prop in properties.items()}
            tools.append({"name": tool["name"], "inputSchema": tool["inputSchema"] | {"properties": bare}})
        return listed | {"result": listed["result"] | {"tools": tools}}

    def rpc(request_id: int | str, method: str) -> dict[str, Any]:  # from a client that declares no capabilities
        return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"_meta": request_meta({})}}

    def tools_call(request_id: int, **mrtr: Any) -> dict[str, Any]:
        arguments = {"workspaceUri": LESSON_WORKSPACE, "title": "TPS report"}
        params = {"_meta": request_meta(), "name": TOOL_NAME, "arguments": arguments, **mrtr}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    who = f"protocol {PROTOCOL_VERSION}, principal {LESSON_PRINCIPAL!r}"
    out(f"Notes server demo (section 15), {who}; long strings cut (…)")
    out(f"Workspace {LESSON_WORKSPACE} (notes outside it exist but must never be offered)")
    exchange("1. server/discover (sections 4, 11, 12)", rpc(0, "server/discover"))
    exchange("2. tools/list (sections 1, 13)", rpc("list", "tools/list"), view=compact)
    out("    (left out here: the tool's title, description, outputSchema, annotations, property descriptions)")

    first = exchange("3. tools/call, id 1: the server asks instead of guessing (sections 2, 3, 7, 14)", tools_call(1))
    form = first["result"]["inputRequests"][INPUT_KEY]["params"]
    out("\n## The user sees the form (section 5)")
    for line in textwrap.wrap(form["message"], DEMO_WIDTH - 3):
        out("   " + line)
    for option in form["requestedSchema"]["properties"][CHOICE_FIELD]["oneOf"]:
        picked = option["const"] == "note-14"
        tail = "  <- picked, and 'Delete the chosen note' ticked" if picked else ""
        out(f"   {'(x)' if picked else '( )'} {option['title']}  [{option['const']}]{tail}")
    answer = {INPUT_KEY: {"action": "accept", "content": {CHOICE_FIELD: "note-14", CONFIRM_FIELD: True}}}
    retry = {"requestState": first["result"]["requestState"], "inputResponses": answer}
    exchange("4. tools/call, id 2: the answer, with the state echoed (sections 6, 9, 10)", tools_call(2, **retry))
    exchange(
        "5. tools/call, id 3: id 2 replayed to a second instance sharing the stores (section 8)",
        tools_call(3, **retry),
        other,
    )
    again = server.handle(tools_call(4), LESSON_PRINCIPAL) or {}
    declined = {"requestState": again["result"]["requestState"], "inputResponses": {INPUT_KEY: {"action": "decline"}}}
    exchange(
        "6. tools/call, id 4 (not shown) got a new form and state; id 5 declines it (section 6)",
        tools_call(5, **declined),
    )
    out("\n## Notes left (section 2: the look-alikes outside the workspace were never offered)")
    for note in server.services.notes.all():
        out(f"   {note.id:8} {note.title:16} {note.uri}")


def main(argv: list[str] | None = None) -> int:
    """`main.py` runs the demo; serving is `code/serve.py`."""
    if not list(sys.argv[1:] if argv is None else argv):
        try:
            demo()
            sys.stdout.flush()  # buffered output reaches the pipe here, inside the try
        except BrokenPipeError:  # `python3 code/main.py | head`: the reader has all it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit flush has nowhere to fail
        return 0
    print("usage: python3 code/main.py        run the scripted demo", file=sys.stderr)
    print("       python3 code/serve.py ...   run the server (--stdio or --http; --help)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
