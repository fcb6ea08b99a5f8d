"""Explicit scope and stateless elicitation: a reference MCP server (revision 2026-07-28).

One destructive tool, `notes_delete`, whose scope is an explicit `workspaceUri`
argument (Roots are deprecated and were never a sandbox). It asks the user which note
and whether to delete it with a form-mode elicitation delivered as a Multi Round-Trip
Request (`resultType: "input_required"`), binds the answer to the principal, the
arguments, the candidates shown and an expiry with an HMAC-signed `requestState`, and
consumes that confirmation exactly once through a replay store shared by every server
instance.

The rules every line below keeps:

    - Scope is an argument (`workspaceUri`), authorized for the authenticated principal;
      Roots and `clientInfo` decide nothing.
    - A destructive step needs a form the user answered.
    - A confirmation is bound, signed, and consumed once, in the same atomic step as the
      deletion, on whichever server instance receives the retry.
    - A refusal changes nothing.

Read it top to bottom beside the lesson. The two kinds of error come first; then the
section banners follow the lesson's headings in the lesson's order, with the tool's whole
two-call flow in one place (section 7) before the machinery that protects it:

    1. The two problems, and explicit scope (Roots as a migration surface)
    2. The three-layer rule: authorization, containment, sandbox
    3. Elicitation delivered as input_required
    4. Capability negotiation per request
    5. Form mode
    6. Response branches
    7. The two-call flow, in one place: notes_delete
    8. Protecting destructive MRTR state: signing the state
    9. Protecting destructive MRTR state: the replay store
   10. Protecting destructive MRTR state: the live re-check
   11. The protocol frame: the JSON-RPC envelope
   12. The protocol frame: server/discover
   13. The protocol frame: tools/list
   14. The protocol frame: handle()
   15. The demo

Run `python3 code/main.py` for the scripted demo. This file imports no other module of
the project; serving it over stdio or Streamable HTTP is `python3 code/serve.py`.
Standard library only.
"""

from __future__ import annotations

import base64
import enum
import functools
import hashlib
import heapq
import hmac
import json
import math
import re
import secrets
import sys
import textwrap
import threading
import time
import unicodedata
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol
from urllib.parse import quote, unquote

# Names and limits used throughout. Each limit bounds what a hostile client can make the
# server hold or compute, and each has a test on both sides.

PROTOCOL_VERSION = "2026-07-28"
SUPPORTED_VERSIONS: tuple[str, ...] = (PROTOCOL_VERSION,)
SERVER_INFO = {"name": "notes-scope-elicitation", "version": "1.0.0"}

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

MAX_MESSAGE_BYTES = 64 * 1024  # one JSON-RPC message (stdio line, HTTP body)
MAX_TITLE_LENGTH = 200  # characters in the `title` argument
MAX_URI_LENGTH = 2048  # characters in the `workspaceUri` argument
PARSED_URI_CACHE_SIZE = 256  # parsed file URIs kept (each at most MAX_URI_LENGTH characters)
NOTE_VERSION_CACHE_SIZE = 1024  # note versions kept (a note's fields and a 32-character digest)
MAX_CANDIDATES = 25  # choices in one form; more matches must be narrowed by the caller
MAX_NOTE_ID_LENGTH = 128  # characters in a note id (keeps the signed state small)
MAX_STATE_LENGTH = 8192  # characters of `requestState` accepted before any hashing
DEFAULT_STATE_TTL_SECONDS = 300.0  # a confirmation is valid for five minutes
MAX_STATE_TTL_SECONDS = 3600.0  # a server may not be configured to trust a form longer
MAX_CLOCK_SKEW_SECONDS = 30.0  # a state issued further in the future than this is refused
MAX_REPLAY_PER_PRINCIPAL = 1000  # unexpired consumed confirmations kept per principal
MIN_KEY_BYTES = 32  # HMAC-SHA256 key length
DISCOVER_TTL_MS = 3_600_000  # cache hints for server/discover and tools/list
TOOLS_TTL_MS = 3_600_000

TOOL_NAME = "notes_delete"
INPUT_KEY = "delete_choice"  # the key of our one elicitation in `inputRequests`
CHOICE_FIELD = "note_id"  # the form's single-select: which note
CONFIRM_FIELD = "confirm"  # the form's checkbox: delete it permanently
PHASE_CONFIRM = "confirm_delete"
STATE_VERSION = "v1"
STATE_INVALID = "Invalid params: requestState is not valid"  # the one message for every state refusal

# Errors, first: every section below raises one of two kinds, and they reach the client
# differently (call_tool and handle(), section 14, are the one place that converts them).
#
#   ToolError  the tool ran and refused: a bad argument, a workspace not granted, no
#              matching note, a note changed since the form. It becomes a *result* with
#              `isError: true`, which the model reads and can correct itself from.
#   McpError   the request itself is wrong: malformed, an unknown tool or method, a
#              missing capability, a bad or replayed requestState. It becomes a JSON-RPC
#              *error* with one of the codes below.

# JSON-RPC 2.0 codes, and the three codes 2026-07-28 defines in its reserved range.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022


class ToolError(Exception):
    """A tool execution error: answered as an `isError: true` result the model can act on."""


class McpError(Exception):
    """A protocol error the client is meant to see: a code, a short message, optional data."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


# =====================================================================================
# 1. The two problems, and explicit scope (Roots as a migration surface)
# =====================================================================================
#
# A destructive tool has two problems to solve before it may act:
#
#   Scope: which folder may it touch? Roots (`roots/list`) were a hint from the client,
#   never a sandbox, and 2026-07-28 deprecates them. So the scope is an explicit
#   argument, `workspaceUri`, that the *server* authorizes (section 2). A legacy host's
#   roots may at most suggest a value (code/legacy.py): a migration surface, not a gate.
#
#   Consent: which note, and does the person really mean it? The server asks the user
#   with a form (sections 3-7) and must not trust the answer blindly: the protocol is
#   stateless, so the question travels with a signed state (sections 8-10).


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
            "workspaceUri": {
                "type": "string",
                "format": "uri",
                "maxLength": MAX_URI_LENGTH,
                "description": "file:// URI of the workspace folder to search (must be authorized for you).",
            },
            "title": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_TITLE_LENGTH,
                "description": "Text the note's title contains (case-insensitive).",
            },
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
    "annotations": {
        "title": "Delete a note",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": False,
    },
}


class ScopeArgs(NamedTuple):
    """Validated scope arguments: the workspace URI (not yet parsed) and the title query."""

    workspace_uri: str
    title: str


def read_scope_args(arguments: Any, tool: str = TOOL_NAME) -> ScopeArgs:
    """`{workspaceUri, title}` checked against the inputSchema exactly.

    Arguments that are not an object make a malformed request (-32602); an object that
    fails the schema is a tool execution error the model can correct (`isError: true`).
    """
    if not isinstance(arguments, dict):
        raise McpError(INVALID_PARAMS, f"Invalid params: arguments for tool {tool} must be an object")
    unknown = arguments.keys() - {"workspaceUri", "title"}
    if unknown:
        raise ToolError(f"Invalid arguments for tool {tool}: unexpected property {min(unknown)!r}.")
    uri, title = arguments.get("workspaceUri"), arguments.get("title")
    if not isinstance(uri, str) or not 0 < len(uri) <= MAX_URI_LENGTH:
        raise ToolError(f"Invalid arguments for tool {tool}: workspaceUri must be a file:// URI string of 1..{MAX_URI_LENGTH} characters.")
    if not isinstance(title, str) or not 0 < len(title) <= MAX_TITLE_LENGTH or not title.strip():
        raise ToolError(f"Invalid arguments for tool {tool}: title must be 1..{MAX_TITLE_LENGTH} characters, not only spaces.")
    return ScopeArgs(uri, title)


# =====================================================================================
# 2. The three-layer rule: authorization, containment, sandbox
# =====================================================================================
#
#   1. Authorization: is this authenticated principal allowed this workspace?
#   2. Containment: is the note inside it, compared by path components? On disk, the
#      Markdown-folder store (code/markdown_store.py) also opens every component with
#      O_NOFOLLOW relative to a directory descriptor, so a symbolic link cannot lead out.
#   3. Sandbox: the operating system confines the process itself, so that even a server
#      whose checks failed cannot reach files beyond its notes and its state. No code in
#      this file can do that; it is done where the server is started (code/sandbox.py,
#      or the operator's service manager or container).
#
# The lesson says: normalize first, then compare components. This file is stricter: it
# decodes once and refuses every ambiguous spelling (`..`, `%2e%2e`, double encoding,
# backslashes, control characters) rather than resolving it, because resolving `..`
# lexically disagrees with the file system as soon as a component is a symbolic link.
#
# Layers 1 and 2 run when the form is built and again inside the atomic step (section 10).


Path = tuple[str, ...]  # a normalized absolute path, one entry per component


class ScopeError(ValueError):
    """A URI that cannot name a local folder or file (the reason is safe to show)."""


_CONTROL_RE = re.compile("[\x00-\x1f\x7f]")


# The same workspace arrives on every call: its parse is kept, in a bounded cache of
# immutable tuples. A refusal is never cached; it is worked out again each time.
@functools.lru_cache(maxsize=PARSED_URI_CACHE_SIZE)
def _parse_file_uri(uri: str) -> Path:
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.lower() != "file":
        raise ScopeError("must use the file:// scheme")
    # `?` and `#` would make the same folder have many names, and no local path uses them.
    if "?" in rest or "#" in rest:
        raise ScopeError("must not have a query or fragment")
    host, slash, encoded_path = rest.partition("/")
    # Another host's files are not ours to scope; `file://localhost/` is `file:///`.
    # Without the slash, `file://` and `file://localhost` would parse to the root.
    if host.lower() not in ("", "localhost") or not slash:
        raise ScopeError("must name a local path (file:///... or file://localhost/...)")
    try:
        path = unquote(encoded_path, errors="strict")  # percent-decode exactly once
    except UnicodeDecodeError:
        raise ScopeError("must be valid UTF-8 after percent-decoding") from None
    # A `%` left after one decode means double encoding (%252e -> %2e): a second decoder
    # somewhere downstream would see `..`. One spelling per path, so refuse it.
    if "%" in path:
        raise ScopeError("must not contain double percent-encoding or a literal %")
    # Backslash is a separator on Windows and NUL truncates C strings: both change
    # which file the operating system opens without changing what a string check sees.
    if "\\" in path:
        raise ScopeError("must not contain backslashes")
    # NUL is below 0x20: this one check refuses it along with every other control character.
    if _CONTROL_RE.search(path):
        raise ScopeError("must not contain control characters")
    parts = tuple(part for part in path.split("/") if part not in ("", "."))
    # `..` is refused, not resolved: resolving it lexically disagrees with the file
    # system as soon as a component is a symbolic link.
    if ".." in parts:
        raise ScopeError("must not contain .. components")
    return parts


def parse_file_uri(uri: Any) -> Path:
    """A `file://` URI to its path components, refusing every ambiguous spelling."""
    if not isinstance(uri, str) or len(uri) > MAX_URI_LENGTH:
        raise ScopeError("must be a file:// URI of at most %d characters" % MAX_URI_LENGTH)
    return _parse_file_uri(uri)


def format_file_uri(path: Path) -> str:
    """The one canonical spelling of a path as a URI (`file:///` plus encoded components)."""
    # One quote over the joined path, "/" kept: no component holds a "/" (parse_file_uri
    # splits on it, and file names cannot contain one), so this encodes each component.
    return "file:///" + quote("/".join(path), safe="/")


def normalize_file_uri(uri: Any) -> str:
    """Canonical spelling of a file URI, or ScopeError; equal folders get equal strings."""
    return format_file_uri(parse_file_uri(uri))


def is_within(path: Path, folder: Path) -> bool:
    """Component-wise containment (inclusive): never a string prefix, so Notes-evil is out."""
    return path[: len(folder)] == folder


class AuthorizationPolicy:
    """Principal -> workspaces they may act on; a sub-folder of one of them is also allowed."""

    def __init__(self, grants: Mapping[str, Iterable[str]]) -> None:
        self._grants: dict[str, tuple[Path, ...]] = {}
        for principal, uris in grants.items():
            if not isinstance(principal, str) or not principal:
                raise ValueError("principal names must be non-empty strings")
            if isinstance(uris, str):
                raise ValueError(f"workspaces for {principal!r} must be a list of URIs")
            paths = []
            for uri in uris:
                try:
                    paths.append(parse_file_uri(uri))
                except ScopeError as exc:
                    raise ValueError(f"workspace {uri!r} for {principal!r} {exc}") from None
            self._grants[principal] = tuple(paths)

    def allows(self, principal: str, workspace: Path) -> bool:
        """True when this principal was granted `workspace` or a folder that contains it."""
        return any(is_within(workspace, granted) for granted in self._grants.get(principal, ()))

    def workspaces(self, principal: str) -> list[str]:
        """The principal's granted workspaces, canonical URIs (for hosts and adapters)."""
        return [format_file_uri(path) for path in self._grants.get(principal, ())]


# What a signed state binds (section 8) is a digest of canonical JSON: the arguments of a
# call, and each note shown as it was shown.

# Built once, not per call. What is encoded is decoded JSON or built from it, so it cannot
# hold a reference cycle: check_circular would only cost time.
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
        """The digest of the canonical arguments (a call signs or checks it once)."""
        return digest(self.arguments)


def your_workspaces(policy: AuthorizationPolicy, principal: str) -> str:
    """The sentence that tells a model which workspaceUri values this principal may pass."""
    # Only the caller's own grants, and the same text whatever notes exist: it tells the
    # model where it may look, and nothing about anyone else or about what is inside.
    granted = policy.workspaces(principal)
    if not granted:
        return "You have no authorized workspaces."
    return "Your workspaces: " + ", ".join(granted) + "."


def authorize(policy: AuthorizationPolicy, principal: str, args: ScopeArgs, log: Callable[[str], None]) -> Scope:
    """Layer 1: parse the workspace and check the principal's grant, or a ToolError naming their own."""
    try:
        workspace = parse_file_uri(args.workspace_uri)
    except ScopeError as exc:
        raise ToolError(f"workspaceUri {exc}. {your_workspaces(policy, principal)}") from None
    # The principal comes from the transport, never from arguments.
    if not policy.allows(principal, workspace):
        log(f"refused: principal {principal!r} is not authorized for {format_file_uri(workspace)}")
        raise ToolError(f"That workspace is not authorized for you. {your_workspaces(policy, principal)}")
    return Scope(workspace, {"workspaceUri": format_file_uri(workspace), "title": args.title})


def fold_title(text: str) -> str:
    """A title or query as matching compares it: Unicode NFC, then casefolded."""
    # "café" typed (composed) must find "café" stored decomposed, as macOS names often are.
    return unicodedata.normalize("NFC", text).casefold()


# A note is offered in a form and re-checked when the answer comes: its version is
# worked out once and kept, in a bounded cache keyed by the note's (immutable) fields.
@functools.lru_cache(maxsize=NOTE_VERSION_CACHE_SIZE)
def note_version(note: Note) -> str:
    """`Note.version`: the digest of the note's id, title, URI and revision."""
    return digest([note.id, note.title, note.uri, note.revision])


class Note(NamedTuple):
    """A note: stable id, title, where it lives, and a revision that changes on edit."""

    id: str
    title: str
    uri: str  # canonical file URI
    revision: int = 0

    @property
    def path(self) -> Path:
        """The note's location as path components (kept by parse_file_uri's cache)."""
        return parse_file_uri(self.uri)

    @property
    def folded_title(self) -> str:
        """The title as matching compares it (see fold_title)."""
        return fold_title(self.title)

    @property
    def version(self) -> str:
        """A digest of everything the user was shown or that decides where the note is."""
        return note_version(self)


def inside_workspace(note: Note, workspace: Path) -> bool:
    """Layer 2: the note lies strictly inside the workspace folder, compared by components."""
    path = note.path
    return len(path) > len(workspace) and is_within(path, workspace)


def form_order(notes: Iterable[Note]) -> list[Note]:
    """Candidates in the order every store offers them: title (casefolded), then id."""
    return sorted(notes, key=lambda note: (note.folded_title, note.id))


def check_note(note: Note) -> None:
    """Refuse a note the server could not show safely: bad id, empty title, bad URI."""
    if not isinstance(note.id, str) or not 0 < len(note.id) <= MAX_NOTE_ID_LENGTH:
        raise ValueError(f"note id must be 1..{MAX_NOTE_ID_LENGTH} characters")
    if not isinstance(note.title, str) or not note.title.strip():
        raise ValueError(f"note {note.id!r} needs a non-empty title")
    try:
        parse_file_uri(note.uri)
    except ScopeError as exc:
        raise ValueError(f"note {note.id!r} uri {exc}") from None


def blank_controls(title: str) -> str:
    """`title` with every non-printable character (controls, format characters such as bidi overrides) as a space."""
    # "\u202egnp.exe plan" shows as "plan exe.png": a user would confirm one name and delete another.
    return title if title.isprintable() else "".join(ch if ch.isprintable() else " " for ch in title)


def checked_notes(notes: Iterable[Note]) -> list[Note]:
    """Notes a store may hold: each passes check_note, ids are unique, URIs canonical; else ValueError."""
    checked: dict[str, Note] = {}
    for note in notes:
        check_note(note)
        if note.id in checked:
            raise ValueError(f"duplicate note id {note.id!r}")
        uri, title = normalize_file_uri(note.uri), blank_controls(note.title)
        checked[note.id] = note if (uri, title) == (note.uri, note.title) else note._replace(uri=uri, title=title)
    return list(checked.values())


def lookup(store: NotesStore, scope: Scope) -> list[Note]:
    """Candidates inside the workspace (layer 2); none, or more than a form can offer, is a ToolError."""
    title = scope.arguments["title"]
    found = store.candidates(scope.workspace, title)
    if not found:
        raise ToolError(f"No note titled like {title!r} in that workspace.")
    if len(found) > MAX_CANDIDATES:
        raise ToolError(f"{len(found)} notes match; more than {MAX_CANDIDATES} cannot be offered. Use a more specific title.")
    return found


# =====================================================================================
# 3. Elicitation delivered as input_required
# =====================================================================================
#
# 2026-07-28 has no server-to-client request in flight. A tool that needs the user
# answers its `tools/call` with `resultType: "input_required"`: the questions
# (`inputRequests`, each an `elicitation/create`) and an opaque `requestState`. The
# client asks the user, then sends the same `tools/call` again, with a fresh id, the
# answers in `inputResponses` and the state echoed back. Any server instance may get
# that retry, so everything the server needs must be in the state (sections 8-10).


Notify = Callable[[dict[str, Any]], None]  # sends one JSON-RPC notification to the client


class ToolCall(NamedTuple):
    """One `tools/call` as a tool sees it: a first call (no state) or a retry with answers."""

    name: str
    arguments: Any
    meta: RequestMeta
    principal: str
    state: str | None = None  # the echoed requestState, on a retry
    responses: dict[str, Any] | None = None  # inputResponses, on a retry
    notify: Notify | None = None  # notifications ahead of the response, where the transport carries them
    progress_token: str | int | None = None  # `_meta.progressToken`, echoed by progress notifications


def read_tool_call(
    params: dict[str, Any], meta: RequestMeta, principal: str, notify: Notify | None = None, progress: str | int | None = None
) -> ToolCall:
    """The call's name, arguments and MRTR fields; a half or mistyped retry is -32602."""
    name = params.get("name")
    if not isinstance(name, str):
        raise McpError(INVALID_PARAMS, "Unknown tool")
    has_state, has_responses = "requestState" in params, "inputResponses" in params
    if has_state != has_responses:
        raise McpError(INVALID_PARAMS, "Invalid params: requestState and inputResponses go together")
    if has_state and not isinstance(params["inputResponses"], dict):
        raise McpError(INVALID_PARAMS, "Invalid params: inputResponses must be an object")
    # `requestState: null` is not "no state": read as absent, it would turn a retry into
    # a first call that ignores the answers.
    if has_state and not isinstance(params["requestState"], str):
        raise McpError(INVALID_PARAMS, STATE_INVALID)
    state, responses = params.get("requestState"), params.get("inputResponses")
    return ToolCall(name, params.get("arguments", {}), meta, principal, state, responses, notify, progress)


def input_required(requests: dict[str, Any], state: str) -> dict[str, Any]:
    """An `input_required` result: the questions and the state the retry must echo."""
    return {"resultType": "input_required", "inputRequests": requests, "requestState": state}


# =====================================================================================
# 4. Capability negotiation per request
# =====================================================================================
#
# No `initialize`, no session: every request declares its protocol version and what
# its client can do in `params._meta`, and nothing carries over to the next request.


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
        problem = "must be an object" if META_CLIENT_CAPABILITIES in meta else "is missing (send {} for a client with none)"
        raise McpError(INVALID_PARAMS, f"Invalid params: _meta[{META_CLIENT_CAPABILITIES!r}] {problem}")
    return RequestMeta(version, capabilities)


def check_version(meta: RequestMeta) -> None:
    """Refuse a version this server does not implement with -32022 and the exact data."""
    if meta.protocol_version not in SUPPORTED_VERSIONS:
        raise McpError(
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            {"supported": list(SUPPORTED_VERSIONS), "requested": meta.protocol_version},
        )


def supports_form_elicitation(capabilities: Mapping[str, Any]) -> bool:
    """True when this request declares form elicitation: `{}` and `{"form": {}}` do."""
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, dict):
        return False
    # An empty object means form-only (backwards compatibility); `{"url": {}}` alone does not.
    return not elicitation or isinstance(elicitation.get("form"), dict)


def require_form_elicitation(meta: RequestMeta) -> None:
    """-32021 naming exactly the form capability, unless this request declares it."""
    # Checked before any lookup: a client that cannot show the form must not learn
    # which notes exist, and must never get a deletion without a form.
    if not supports_form_elicitation(meta.capabilities):
        raise McpError(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Server requires form elicitation for this request",
            {"requiredCapabilities": {"elicitation": {"form": {}}}},
        )


# =====================================================================================
# 5. Form mode
# =====================================================================================
#
# A form asks for data a person may see in the client: a choice between records and a
# checkbox. Never a secret: for that, URL mode sends the user to the server's own page
# (code/connect.py).


def choice_options(notes: list[Note]) -> list[dict[str, str]]:
    """A titled single-select's options: each note's id, shown by the title a person knows."""
    # Two notes whose titles render the same (equal, or equal once Unicode-normalized:
    # "Café" typed as é or as e + combining accent) must still be told apart by the person.
    shown = [unicodedata.normalize("NFC", note.title) for note in notes]
    return [
        {"const": note.id, "title": note.title if shown.count(looks) == 1 else f"{note.title} ({note.id})"}
        for note, looks in zip(notes, shown)
    ]


def delete_form(workspace_uri: str, title: str, notes: list[Note]) -> dict[str, Any]:
    """The elicitation: a titled single-select of the candidates and a confirm box."""
    count = "1 note matches" if len(notes) == 1 else f"{len(notes)} notes match"
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": (
                f"{count} \"{title}\" in {workspace_uri}. "
                "Choose the note to delete and confirm. Deletion cannot be undone."
            ),
            "requestedSchema": {
                "type": "object",
                "properties": {
                    CHOICE_FIELD: {"type": "string", "title": "Note to delete", "oneOf": choice_options(notes)},
                    CONFIRM_FIELD: {
                        "type": "boolean",
                        "title": "Delete it permanently",
                        "description": "Tick to delete the chosen note. It cannot be undone.",
                        "default": False,
                    },
                },
                "required": [CHOICE_FIELD, CONFIRM_FIELD],
            },
        },
    }


# =====================================================================================
# 6. Response branches
# =====================================================================================
#
# Every answer to a form is read in one place, Confirmations.answer (section 10), and
# means the same for every tool:
#
#   (none)     the client did not answer our question: ask again, in the same flow
#   cancel     dismissed: nothing happens, and the same state may be answered again
#   decline    an explicit no: nothing happens, and this confirmation is consumed
#   accept     the content goes on to the tool; a choice must be one the form showed
#   malformed  -32602, and nothing changes


class Reply(enum.Enum):
    """What one answer means for the flow (the table above, as the tools receive it)."""

    ASK_AGAIN = "ask again"  # no answer to our question
    CANCELLED = "cancelled"  # the state stays usable until it expires
    DECLINED = "declined"  # the confirmation is consumed
    ACCEPTED = "accepted"  # the content (and the choice) go to the tool


class Answer(NamedTuple):
    """The user's answer to one elicitation: the action and, for accept, the content."""

    action: str  # "accept", "decline" or "cancel"
    content: dict[str, Any]


class Answered(NamedTuple):
    """The one reading of a retry's answers: the Reply, and what an accept carried."""

    reply: Reply
    content: dict[str, Any]  # accepted: each question's answer by key (a form's content)
    chosen: tuple[str, str] | None  # accepted with a choice: (note id, version shown)


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


def chosen(content: Mapping[str, Any], payload: StatePayload, field: str = CHOICE_FIELD) -> tuple[str, str]:
    """The (id, version) picked in the form's `field`, which must be one the signed state offered, or -32602."""
    note_id = content.get(field)
    # Only a note the user was shown can be chosen: a client cannot swap in another id.
    version = payload.offered().get(note_id) if isinstance(note_id, str) else None
    if version is None:
        raise McpError(INVALID_PARAMS, "Invalid params: the answer does not match the form")
    return note_id, version


def tool_result(text: str, structured: dict[str, Any] | None = None, *, is_error: bool = False) -> dict[str, Any]:
    """A complete CallToolResult: text for people and models, structured for programs."""
    result: dict[str, Any] = {"resultType": "complete", "content": [{"type": "text", "text": text}]}
    if structured is not None:
        result["structuredContent"] = structured
    result["isError"] = is_error
    return result


def not_deleted(reason: str, text: str) -> dict[str, Any]:
    """The complete, non-error answer when the user said no, declined or cancelled."""
    return tool_result(text, {"deleted": False, "reason": reason})


# =====================================================================================
# 7. The two-call flow, in one place: notes_delete
# =====================================================================================
#
# The lesson's flow, as one class. The first call authorizes the workspace, looks up the
# notes inside it, builds the form and signs a state: `input_required`. The retry
# verifies the echoed state, reads the answer, branches on it, and for a confirmed choice
# claims the nonce, re-checks the live note and deletes it, in one atomic store step.
# The tool is given what it uses (a policy, a notes store, the confirmation cycle of
# sections 8-10, a log), never the server.


class Settlement(enum.Enum):
    """How the atomic step ended."""

    DELETED = "deleted"  # nonce consumed, note deleted
    CONSUMED = "consumed"  # nonce consumed, nothing deleted (decline, explicit "no")
    CHANGED = "changed"  # nonce consumed, note vanished/changed/moved: nothing deleted
    USED = "used"  # nonce was already consumed: nothing happened
    FULL = "full"  # replay bound for this principal: nothing happened


class NotesStore(Protocol):
    """The seam every store implements (memory here; SQLite and Markdown folders beside it)."""

    def candidates(self, workspace: Path, title: str) -> list[Note]:
        """Notes strictly inside `workspace` whose title contains `title` (casefolded)."""
        ...

    def is_consumed(self, nonce: str) -> bool:
        """True when this nonce was already consumed (on any instance)."""
        ...

    def consume(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[Note], bool],
    ) -> Settlement:
        """Atomically: claim the nonce; if `target` (id, version) re-read it, re-check, delete."""
        ...


class NotesDelete:
    """`notes_delete`, the lesson's tool: scope, ask, then verify, read the answer, re-check and delete once."""

    descriptor = NOTES_DELETE_TOOL

    def __init__(
        self, *, policy: AuthorizationPolicy, notes: NotesStore, confirmations: Confirmations, log: Callable[[str], None]
    ) -> None:
        self.policy = policy
        self.notes = notes
        self.confirmations = confirmations
        self.log = log

    def call(self, call: ToolCall) -> dict[str, Any]:
        """First call: authorize, look up, form, sign. Retry: verify, read the answer, branch, claim and delete."""
        args = read_scope_args(call.arguments)
        # Before any lookup: a client that cannot show the form learns nothing of the notes.
        require_form_elicitation(call.meta)
        scope = authorize(self.policy, call.principal, args, self.log)  # layer 1, on every call
        if call.state is None:
            return self.ask(call, scope)
        # The retry. The echoed state must be ours, for this principal, tool and arguments,
        # unexpired and unused: otherwise the one -32602 every state refusal gets.
        state = self.confirmations.verify(call, scope.digest, {PHASE_CONFIRM})
        answered = self.confirmations.answer(call, state, [INPUT_KEY], choice=CHOICE_FIELD)
        if answered.reply is Reply.ASK_AGAIN:
            return self.ask(call, scope, follows=state)  # the same flow: same nonce, same expiry
        if answered.reply is Reply.CANCELLED:
            return not_deleted("cancelled", "Cancelled; nothing was deleted.")
        if answered.reply is Reply.DECLINED:
            return not_deleted("declined", "Declined; nothing was deleted.")  # answer() consumed it
        confirm = answered.content[INPUT_KEY].get(CONFIRM_FIELD)
        if not isinstance(confirm, bool):
            raise McpError(INVALID_PARAMS, "Invalid params: the answer does not match the form")
        if not confirm:
            self.confirmations.consume(call.principal, state)
            return not_deleted("not_confirmed", "Not confirmed; nothing was deleted.")
        assert answered.chosen is not None  # answer() checked the choice against the state
        return self.delete(call.principal, scope, state, answered.chosen)

    def ask(self, call: ToolCall, scope: Scope, follows: StatePayload | None = None) -> dict[str, Any]:
        """The form over the live candidates (layer 2), with a signed state (a new flow unless it `follows` one)."""
        found = lookup(self.notes, scope)
        form = delete_form(scope.arguments["workspaceUri"], scope.arguments["title"], found)
        cands = [(n.id, n.version) for n in found]
        return self.confirmations.ask(call, scope.digest, PHASE_CONFIRM, {INPUT_KEY: form}, cands, follows=follows)

    def delete(self, principal: str, scope: Scope, state: StatePayload, target: tuple[str, str]) -> dict[str, Any]:
        """Claim the nonce, re-read and re-check the chosen note, and delete it: one atomic store step."""

        def recheck(live: Note) -> bool:
            # Layers 1 and 2 again, inside the atomic step: grants and notes may have changed.
            # (Containment stays as defence in depth: the version also covers the URI.)
            return self.policy.allows(principal, scope.workspace) and inside_workspace(live, scope.workspace)

        if self.confirmations.consume(principal, state, target, recheck) is Settlement.CHANGED:
            raise ToolError("The chosen note changed, moved or was deleted since the form was shown; nothing was deleted.")
        return tool_result(f"Deleted note {target[0]}.", {"deleted": True, "noteId": target[0]})


# =====================================================================================
# 8. Protecting destructive MRTR state: signing the state
# =====================================================================================
#
#   v1.<key id>.<base64url(canonical JSON payload)>.<base64url(HMAC-SHA256 of what precedes)>
#
# Signed, not encrypted: the client can read the whole payload, so it must never hold a
# secret. The MAC is verified (in constant time) before the JSON is parsed, so a forged
# state costs one HMAC and never reaches the parser or the replay store.


class StateError(Exception):
    """requestState failed verification; the reason is logged, never sent."""


def b64url_encode(data: bytes) -> str:
    """Unpadded base64url."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _refuse_constant(name: str) -> Any:
    """NaN and Infinity are not JSON; refuse them rather than let them reach a comparison."""
    raise ValueError(name)


# Built once: json.loads/dumps with options build a new decoder or encoder on every call.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


class StateSigner:
    """Sign and verify requestState with a key ring: the first key signs, every key verifies."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if isinstance(keys, (bytes, bytearray)) or not keys:
            raise ValueError("keys must be a non-empty list of byte strings")
        self._ring: dict[str, bytes] = {}
        for key in keys:
            if not isinstance(key, (bytes, bytearray)) or len(key) < MIN_KEY_BYTES:
                raise ValueError(f"every signing key must be at least {MIN_KEY_BYTES} bytes")
            self._ring.setdefault(self.key_id(bytes(key)), bytes(key))
        self._signing_id = self.key_id(bytes(keys[0]))

    @staticmethod
    def key_id(key: bytes) -> str:
        """A public name for a key (a hash prefix), so rotation needs no extra configuration."""
        return hashlib.sha256(b"notes-mcp key id\x00" + key).hexdigest()[:8]

    def sign(self, payload: dict[str, Any]) -> str:
        """The payload as a state signed with the newest key."""
        head = f"{STATE_VERSION}.{self._signing_id}.{b64url_encode(canonical_json(payload))}"
        mac = hmac.digest(self._ring[self._signing_id], head.encode("ascii"), "sha256")
        return f"{head}.{b64url_encode(mac)}"

    def verify(self, token: Any) -> dict[str, Any]:
        """Check format, key and MAC, then parse the payload; raises StateError, never anything else."""
        # Only ASCII can be a state we signed; checked first, so a payload segment holding
        # any other character is refused here rather than crashing the encoder below.
        if not isinstance(token, str) or len(token) > MAX_STATE_LENGTH or not token.isascii():
            raise StateError("missing, oversized or not ASCII")
        pieces = token.split(".")
        if len(pieces) != 4 or pieces[0] != STATE_VERSION:
            raise StateError("bad format")
        _, key_id, payload_text, mac_text = pieces
        key = self._ring.get(key_id)
        if key is None:
            raise StateError("unknown key id")
        head = token[: -(len(mac_text) + 1)]
        expected = b64url_encode(hmac.digest(key, head.encode("ascii"), "sha256"))
        # Compared as text: only the one canonical spelling of the right MAC matches (no
        # padding, no spare bits), so no second token carries the same signature.
        if not hmac.compare_digest(mac_text, expected):
            raise StateError("bad MAC")
        # Past the MAC, these are the very characters this server signed: canonical base64url
        # of canonical JSON, so they are decoded without a second check of their spelling.
        try:
            payload = _DECODER.decode(base64.urlsafe_b64decode(payload_text + "=" * (-len(payload_text) % 4)).decode("ascii"))
        except ValueError:  # NaN or Infinity, which only a signing bug could have put there
            raise StateError("payload is not JSON") from None
        if not isinstance(payload, dict):
            raise StateError("payload is not an object")
        return payload


class StatePayload(NamedTuple):
    """What a signed state binds: who, which call, which step, what was shown, once, until when."""

    sub: str  # the principal the form was shown to
    tool: str
    args: str  # digest of the canonical arguments
    phase: str  # which step of the tool's flow this state answers
    cands: tuple[tuple[str, str], ...]  # (id, version of the record shown) for every choice offered
    nonce: str  # consumed exactly once, by the flow's terminal outcome
    iat: float
    exp: float
    extra: dict[str, Any]  # a tool's own public values (never a secret)

    def offered(self) -> dict[str, str]:
        """Candidate id -> the version shown."""
        return dict(self.cands)

    @classmethod
    def parse(cls, payload: dict[str, Any]) -> StatePayload:
        """Every field present and well typed, or StateError."""
        get = payload.get
        sub, tool, args, phase, nonce = get("sub"), get("tool"), get("args"), get("phase"), get("nonce")
        if not all(isinstance(text, str) for text in (sub, get("method"), tool, args, phase, nonce)):
            raise StateError("malformed payload")
        # Numbers checked positively: NaN, strings, booleans (type() is not int for them)
        # or a missing time all fail.
        iat, exp = get("iat"), get("exp")
        for value in (iat, exp):
            if type(value) not in (int, float) or not math.isfinite(value):
                raise StateError("malformed iat or exp")
        cands = get("cands")
        if not isinstance(cands, list) or not all(
            type(c) is list and len(c) == 2 and type(c[0]) is str and type(c[1]) is str for c in cands
        ):
            raise StateError("malformed candidates")
        extra = get("extra", {})
        if not isinstance(extra, dict):
            raise StateError("malformed extra")
        return cls(sub, tool, args, phase, tuple((c[0], c[1]) for c in cands), nonce, float(iat), float(exp), extra)


# =====================================================================================
# 9. Protecting destructive MRTR state: the replay store
# =====================================================================================
#
# A signed state proves the server asked; it does not stop the client from answering
# twice. Each state carries a random nonce, and its terminal answer claims that nonce in
# a store every server instance shares: the second claim finds it and is refused.


class ClaimOutcome(enum.Enum):
    """The answer to "may this nonce be claimed now?"."""

    OK = "ok"
    USED = "used"  # replay: this nonce was consumed before, here or on another instance
    FULL = "full"  # this principal holds MAX_REPLAY_PER_PRINCIPAL unexpired confirmations


class MemoryReplayStore:
    """Consumed nonces until their state expires; bounded per principal; one lock."""

    def __init__(self, clock: Callable[[], float], max_per_principal: int = MAX_REPLAY_PER_PRINCIPAL) -> None:
        if max_per_principal < 1:
            raise ValueError("max_per_principal must be at least 1")
        self._clock = clock
        self._limit = max_per_principal
        self._owner: dict[str, str] = {}  # nonce -> principal
        self._per_principal: dict[str, int] = {}
        self._expiries: list[tuple[float, str]] = []  # heap of (expires at, nonce)
        self._latest = -math.inf  # the highest clock reading seen
        self.lock = threading.RLock()

    def _now(self) -> float:
        """The clock, never earlier than any reading before it."""
        # A clock stepped back (NTP, a VM restored) after a declined state's record was
        # pruned would make that state look unexpired and unused: its accept would delete.
        self._latest = max(self._latest, self._clock())
        return self._latest

    def _prune(self) -> None:
        """Forget nonces whose state has expired (verification refuses those states anyway)."""
        now = self._now()
        while self._expiries and not now < self._expiries[0][0]:
            _, nonce = heapq.heappop(self._expiries)
            self._forget(nonce)

    def _forget(self, nonce: str) -> None:
        principal = self._owner.pop(nonce, None)
        if principal is not None:
            self._per_principal[principal] -= 1
            if not self._per_principal[principal]:
                del self._per_principal[principal]

    def is_consumed(self, nonce: str) -> bool:
        """True when this nonce has been consumed and its state has not yet expired."""
        with self.lock:
            self._prune()
            return nonce in self._owner

    def claim(self, principal: str, nonce: str, expires_at: float) -> ClaimOutcome:
        """Record `nonce` as consumed unless it already is or the principal is at the bound."""
        with self.lock:
            self._prune()
            # A state verified just before its expiry can arrive here just after it, when
            # the record of its earlier use has been pruned: refuse it as used, or a
            # decline followed by a replayed accept at the edge would delete the note.
            if nonce in self._owner or not self._now() < expires_at:
                return ClaimOutcome.USED
            # Without a bound, one principal confirming in a loop grows memory without
            # limit; with a per-principal bound, they cannot block anybody else.
            if self._per_principal.get(principal, 0) >= self._limit:
                return ClaimOutcome.FULL
            self._owner[nonce] = principal
            self._per_principal[principal] = self._per_principal.get(principal, 0) + 1
            heapq.heappush(self._expiries, (expires_at, nonce))
            return ClaimOutcome.OK

    def release(self, nonce: str) -> None:
        """Undo a claim (rollback of a transaction that failed before it committed)."""
        with self.lock:
            self._forget(nonce)  # its heap entry is dropped harmlessly when it expires

    def __len__(self) -> int:
        with self.lock:
            self._prune()
            return len(self._owner)


# =====================================================================================
# 10. Protecting destructive MRTR state: the live re-check
# =====================================================================================
#
# Minutes pass between the form and the answer. The note may have been edited, moved
# or deleted, and the grant revoked. So the terminal step is one atomic operation in the
# store: claim the nonce, re-read the live record, run layers 1 and 2 again, delete. In
# memory that is one lock; in SQLite one transaction (code/sqlite_store.py).
#
# Its outcomes: a note that is gone, edited or no longer allowed ends the confirmation
# (the nonce stays consumed, nothing is deleted: CHANGED). Only a failure inside the step
# (the store or a check raised) rolls the claim back, so the same state may be answered
# again once the store works.


class MemoryNotesStore:
    """Notes in a dict and nonces in a MemoryReplayStore, consumed under one lock; a lookup scans."""

    def __init__(self, notes: Iterable[Note], replay: MemoryReplayStore) -> None:
        self.replay = replay
        self._notes: dict[str, Note] = {}
        self._titles: dict[str, str] = {}  # id -> folded title, folded once per note, not per lookup
        for note in checked_notes(notes):
            self._notes[note.id], self._titles[note.id] = note, note.folded_title

    def candidates(self, workspace: Path, title: str) -> list[Note]:
        """Notes strictly inside `workspace` whose title contains `title`, sorted by title then id."""
        needle = fold_title(title)
        with self.replay.lock:
            titled = [self._notes[note_id] for note_id, folded in self._titles.items() if needle in folded]
        return form_order(n for n in titled if inside_workspace(n, workspace))

    def is_consumed(self, nonce: str) -> bool:
        """True when the replay store holds this nonce."""
        return self.replay.is_consumed(nonce)

    def consume(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[Note], bool],
    ) -> Settlement:
        """Under the one lock: claim the nonce; for `target` re-read the note, re-check, delete."""
        with self.replay.lock:
            outcome = self.replay.claim(principal, nonce, expires_at)
            if outcome is not ClaimOutcome.OK:
                return Settlement.USED if outcome is ClaimOutcome.USED else Settlement.FULL
            if target is None:
                return Settlement.CONSUMED
            try:
                note_id, version = target
                live = self._notes.get(note_id)  # re-read the live record inside the lock
                # Time of check to time of use: the form was shown minutes ago. Gone, edited
                # or no longer allowed ends the confirmation: the nonce stays consumed.
                if live is None or live.version != version or not recheck(live):
                    return Settlement.CHANGED
                del self._notes[note_id], self._titles[note_id]
                return Settlement.DELETED
            except BaseException:
                # The step itself failed (a check or the store raised): roll the claim back,
                # so the same state may be answered again.
                self.replay.release(nonce)
                raise

    def all(self) -> list[Note]:
        """Every note, in id order (for the demo, tests and admin views)."""
        with self.replay.lock:
            return sorted(self._notes.values(), key=lambda note: note.id)

    def put(self, note: Note) -> None:
        """Insert or replace a note (an edit elsewhere; used to show the re-check)."""
        (checked,) = checked_notes([note])
        with self.replay.lock:
            self._notes[checked.id], self._titles[checked.id] = checked, checked.folded_title

    def remove(self, note_id: str) -> None:
        """Delete a note outside any confirmation (another actor; used to show the re-check)."""
        with self.replay.lock:
            self._notes.pop(note_id, None)
            self._titles.pop(note_id, None)


def refuse_every_note(note: Note) -> bool:
    """The re-check when none is given: no note passes, so nothing is ever deleted by default."""
    return False


class Confirmations:
    """The one confirmation cycle every tool uses: sign a state, verify it, read its answer, consume it once.

    It binds a digest of the call's canonical arguments, which each tool computes from
    its own arguments; it knows nothing else about any tool.
    """

    def __init__(
        self,
        *,
        keys: Sequence[bytes],
        store: NotesStore,
        clock: Callable[[], float],
        ttl: float,
        log: Callable[[str], None],
    ) -> None:
        # NaN and infinity fail the chained comparison, so it alone keeps the lifetime finite.
        if not (isinstance(ttl, (int, float)) and 0 < ttl <= MAX_STATE_TTL_SECONDS):
            raise ValueError(f"state_ttl must be a finite number of seconds in (0, {MAX_STATE_TTL_SECONDS:g}]")
        self.signer = StateSigner(keys)
        self.store = store
        self.clock = clock
        self.ttl = float(ttl)
        self.log = log

    def ask(
        self,
        call: ToolCall,
        args_digest: str,
        phase: str,
        requests: dict[str, Any],
        cands: Iterable[tuple[str, str]],
        extra: Mapping[str, Any] | None = None,
        *,
        follows: StatePayload | None = None,
    ) -> dict[str, Any]:
        """`input_required` with the questions and a freshly signed state binding this call.

        A state that `follows` an earlier one (the same flow, asked again or one step on)
        keeps its nonce and expiry: answering any of them consumes all of them.
        """
        now = self.clock()
        # Without this, a flow asked twice would hold two live nonces, and the state the
        # client kept from the first form could act again after the second one did.
        nonce = follows.nonce if follows is not None else b64url_encode(secrets.token_bytes(16))
        payload = {
            "sub": call.principal,
            "method": "tools/call",
            "tool": call.name,
            "args": args_digest,
            "phase": phase,
            "cands": [list(c) for c in cands],
            "nonce": nonce,
            "iat": now,
            "exp": follows.exp if follows is not None else now + self.ttl,
        }
        if extra:
            payload["extra"] = dict(extra)
        return input_required(requests, self.signer.sign(payload))

    def verify(self, call: ToolCall, args_digest: str, phases: Collection[str]) -> StatePayload:
        """Verify the echoed state binds this call and is unused and unexpired; else the one -32602."""
        try:
            payload = self.signer.verify(call.state)
            state = StatePayload.parse(payload)
            expected = {
                "sub": call.principal,  # a state shown to another principal
                "method": "tools/call",
                "tool": call.name,  # a state signed for another tool
                "args": args_digest,  # the same state with another title or workspace
            }
            for name, value in expected.items():
                if payload[name] != value:
                    raise StateError(f"{name} does not match")
            if state.phase not in phases:
                raise StateError("phase does not match")  # a state from another step of a flow
            now = self.clock()
            if not now < state.exp:
                raise StateError("expired")
            # A state "issued" in the future comes from a server whose clock runs ahead:
            # trusting it would stretch its lifetime past what the TTL promises.
            if not state.iat <= now + MAX_CLOCK_SKEW_SECONDS:
                raise StateError("issued in the future")
            # Signed with our key yet living longer than the TTL (a ten-year state): its
            # nonce would have to be kept that long. We only ever sign exp = iat + ttl.
            if not state.exp <= state.iat + self.ttl:
                raise StateError("lifetime longer than the TTL")
            # Only a verified nonce reaches the store, so forged states cannot probe or fill it.
            if self.store.is_consumed(state.nonce):
                raise StateError("confirmation already used")
            return state
        except StateError as exc:
            self.log(f"refused requestState: {exc}")
            raise McpError(INVALID_PARAMS, STATE_INVALID) from None

    def answer(
        self,
        call: ToolCall,
        state: StatePayload,
        keys: Sequence[str],
        *,
        forms: Collection[str] | None = None,
        choice: str | None = None,
    ) -> Answered:
        """The answers to a verified state's questions, read once for every tool (section 6's table).

        `keys` are the questions the state asked, in order; those in `forms` (by default
        all of them) are elicitation results, any other (a sampling or roots answer) is
        taken as sent. A decline consumes the state here. With `choice`, the accepted
        form's value of that field must be one of the state's candidates (else -32602).
        """
        content: dict[str, Any] = {}
        for key in keys:
            if forms is not None and key not in forms:
                sent = (call.responses or {}).get(key)
                if sent is None:
                    return Answered(Reply.ASK_AGAIN, {}, None)
                content[key] = sent
                continue
            answer = read_answer(call.responses, key)
            if answer is None:
                return Answered(Reply.ASK_AGAIN, {}, None)
            if answer.action == "cancel":
                # Dismissed, not refused: the same state may be answered again until it expires.
                return Answered(Reply.CANCELLED, {}, None)
            if answer.action == "decline":
                self.consume(call.principal, state)
                return Answered(Reply.DECLINED, {}, None)
            content[key] = answer.content
        picked = chosen(content[keys[0]], state, choice) if choice is not None else None
        return Answered(Reply.ACCEPTED, content, picked)

    def consume(
        self,
        principal: str,
        state: StatePayload,
        target: tuple[str, str] | None = None,
        recheck: Callable[[Note], bool] = refuse_every_note,
    ) -> Settlement:
        """Consume a verified state's nonce (and delete `target`) in one atomic store step."""
        outcome = self.store.consume(principal, state.nonce, state.exp, target, recheck)
        if outcome is Settlement.USED:
            # Two retries racing with one state, here or on another instance: one wins.
            self.log("refused requestState: confirmation already used or just expired")
            raise McpError(INVALID_PARAMS, STATE_INVALID)
        if outcome is Settlement.FULL:
            self.log(f"refused: replay bound reached for principal {principal!r}")
            raise ToolError("Too many confirmations are pending for you; try again later.")
        return outcome


# =====================================================================================
# 11. The protocol frame: the JSON-RPC envelope
# =====================================================================================


def error_response(request_id: Any, error: McpError) -> dict[str, Any]:
    """A JSON-RPC error response; `id` is omitted when it could not be read (never null)."""
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data is not None:
        body["data"] = error.data
    response: dict[str, Any] = {"jsonrpc": "2.0"}
    if request_id is not None:
        response["id"] = request_id
    response["error"] = body
    return response


def stderr_log(line: str) -> None:
    """The default log sink: one line to stderr, never to the protocol stream."""
    print(line, file=sys.stderr, flush=True)


class Envelope(NamedTuple):
    """A well-formed JSON-RPC message: `id` is None for a notification."""

    id: str | int | None
    method: str
    params: Any  # validated per method; absent params arrive as None


def read_id(message: Any) -> str | int | None:
    """The message's id if it is a legal MCP id (string or integer, not bool/float/null)."""
    if isinstance(message, dict):
        value = message.get("id")
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return value
    return None


def parse_envelope(message: Any) -> Envelope:
    """Validate the JSON-RPC 2.0 frame or raise -32600; batches (arrays) are refused."""
    # MCP removed batching; an array would multiply the work one message can cause.
    if not isinstance(message, dict):
        raise McpError(INVALID_REQUEST, "Invalid Request: expected one JSON-RPC object")
    if message.get("jsonrpc") != "2.0":
        raise McpError(INVALID_REQUEST, "Invalid Request: jsonrpc must be \"2.0\"")
    request_id = read_id(message)
    if request_id is None and "id" in message:
        # bool is an int subclass in Python and `true == 1`: refuse it, with floats and
        # null, so two different wire ids can never collide in a client's table.
        raise McpError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    if not isinstance(message.get("method"), str):
        raise McpError(INVALID_REQUEST, "Invalid Request: method must be a string")
    return Envelope(request_id, message["method"], message.get("params"))


def decode_message(raw: bytes) -> Any:
    """Bytes to a JSON value, or -32700; size is checked first so a flood is cheap to refuse."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise McpError(INVALID_REQUEST, f"Invalid Request: message larger than {MAX_MESSAGE_BYTES} bytes")
    try:
        return _DECODER.decode(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        # RecursionError: `[[[[...` nested thousands deep must be a parse error, not a crash.
        raise McpError(PARSE_ERROR, "Parse error: invalid JSON") from None


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, check_circular=False)


def encode_message(message: dict[str, Any]) -> bytes:
    """Compact JSON, ASCII-escaped: one line, no embedded newline, no lone-surrogate crash."""
    return _COMPACT.encode(message).encode("ascii")


# =====================================================================================
# 12. The protocol frame: server/discover
# =====================================================================================


def discover(server: Server, request: Envelope, meta: RequestMeta, principal: str, notify: Notify | None) -> dict[str, Any]:
    """Versions, capabilities and identity: what a client needs before anything else."""
    return {
        "resultType": "complete",
        "supportedVersions": list(SUPPORTED_VERSIONS),
        "capabilities": server.capabilities(),
        "instructions": (
            "Pass the workspace folder explicitly as workspaceUri; deletions are confirmed by the user "
            "in a form and each confirmation can be used once."
        ),
        "ttlMs": DISCOVER_TTL_MS,
        "cacheScope": "public",
        "_meta": {META_SERVER_INFO: dict(SERVER_INFO)},
    }


# =====================================================================================
# 13. The protocol frame: tools/list
# =====================================================================================


def list_tools(server: Server, request: Envelope, meta: RequestMeta, principal: str, notify: Notify | None) -> dict[str, Any]:
    """Every tool, in registration order, as fresh objects (callers may mutate what they get)."""
    if request.params.get("cursor") is not None:
        # We never hand out a nextCursor, so any cursor is one we did not issue.
        raise McpError(INVALID_PARAMS, "Invalid params: unknown cursor")
    return {
        "resultType": "complete",
        "tools": [json.loads(descriptor) for descriptor in server.tool_descriptors()],
        "ttlMs": TOOLS_TTL_MS,
        "cacheScope": "public",
        "_meta": {META_SERVER_INFO: dict(SERVER_INFO)},
    }


# =====================================================================================
# 14. The protocol frame: handle()
# =====================================================================================


class Tool(Protocol):
    """What `Server.add_tool` accepts: a descriptor for tools/list and a call for tools/call."""

    descriptor: dict[str, Any]

    def call(self, call: ToolCall) -> dict[str, Any]:
        """A complete or input_required result; ToolError for isError, McpError for protocol errors."""
        ...


Handler = Callable[["Server", Envelope, RequestMeta, str, "Notify | None"], dict[str, Any]]
Check = Callable[[Envelope, RequestMeta], None]  # a transport's own check, e.g. HTTP headers


def progress_token(params: dict[str, Any]) -> str | int | None:
    """The request's `_meta.progressToken` when it is a legal token (string or integer), else None."""
    token = params["_meta"].get("progressToken")  # read_meta has checked `_meta` is an object
    return token if isinstance(token, str) or (isinstance(token, int) and not isinstance(token, bool)) else None


def call_tool(server: Server, request: Envelope, meta: RequestMeta, principal: str, notify: Notify | None) -> dict[str, Any]:
    """Find the tool and run it; unknown tools and malformed MRTR fields are -32602."""
    call = read_tool_call(request.params, meta, principal, notify, progress_token(request.params))
    tool = server.tools.get(call.name)
    if tool is None:
        raise McpError(INVALID_PARAMS, "Unknown tool")
    try:
        result = tool.call(call)
    except ToolError as exc:
        # Scope, lookup and store refusals are results, not protocol errors: the model
        # reads them and can correct itself (a narrower title, another workspace).
        result = tool_result(str(exc), is_error=True)
    result.setdefault("_meta", {META_SERVER_INFO: dict(SERVER_INFO)})
    return result


def unknown_method(method: str) -> McpError:
    """-32601; for `initialize` the message names the versions a legacy client could use."""
    if method == "initialize":
        return McpError(
            METHOD_NOT_FOUND,
            "Method not found: initialize was removed in 2026-07-28; this server supports " + ", ".join(SUPPORTED_VERSIONS),
            {"supported": list(SUPPORTED_VERSIONS)},
        )
    return McpError(METHOD_NOT_FOUND, "Method not found")


class Server:
    """The protocol server: one dispatch table, one exception boundary, tools added through add_tool.

    It holds the services its tools may be given (the notes store, the policy, the clock
    and the confirmation cycle built from the keys) and builds no tool: whoever wires a
    server (notes_server, lesson_server, code/serve.py) adds each tool it serves.
    """

    def __init__(
        self,
        *,
        keys: Sequence[bytes],
        notes: NotesStore,
        policy: AuthorizationPolicy,
        clock: Callable[[], float] = time.time,
        state_ttl: float = DEFAULT_STATE_TTL_SECONDS,
        log: Callable[[str], None] = stderr_log,
    ) -> None:
        self.notes = notes
        self.policy = policy
        self.clock = clock
        self.log = log
        # The log is looked up on each line, so replacing server.log reaches the cycle too.
        self.confirmations = Confirmations(keys=keys, store=notes, clock=clock, ttl=state_ttl, log=self.say)
        # One dispatch table; discover's capabilities derive from it, so they cannot drift.
        self.methods: dict[str, Handler] = {"server/discover": discover, "tools/list": list_tools, "tools/call": call_tool}
        self.tools: dict[str, Tool] = {}
        self._capabilities: dict[str, dict[str, Any]] = {}  # what added methods declare (prompts, ...)
        self._descriptors: dict[str, str] = {}  # name -> the descriptor as JSON, frozen when added

    def say(self, line: str) -> None:
        """Write one line to the server's log as it is now (replacing server.log reaches every tool)."""
        self.log(line)

    def add_tool(self, tool: Tool) -> None:
        """Register a tool under its descriptor's name (once); tools/list shows it from now on."""
        name = tool.descriptor.get("name")
        if not isinstance(name, str) or not name or name in self.tools:
            raise ValueError(f"a tool needs a new, non-empty name (got {name!r})")
        self.tools[name] = tool
        self._descriptors[name] = json.dumps(tool.descriptor)

    def add_method(self, method: str, handler: Handler, capability: str | None = None) -> None:
        """Add one method to the dispatch table (an extension's own protocol feature).

        `capability` names the server capability the method belongs to (e.g. "prompts");
        discover reports it from then on.
        """
        if method in self.methods:
            raise ValueError(f"method {method!r} is already handled")
        self.methods[method] = handler
        if capability is not None:
            self._capabilities.setdefault(capability, {})

    def tool_descriptors(self) -> list[str]:
        """Every tool's descriptor as JSON text, in registration order."""
        return list(self._descriptors.values())

    def capabilities(self) -> dict[str, Any]:
        """The server capabilities discover reports, derived from what is registered."""
        declared = {"tools": {}} if self.tools else {}
        return declared | {name: dict(value) for name, value in self._capabilities.items()}

    def handle(
        self, message: Any, principal: str, check: Check | None = None, notify: Notify | None = None
    ) -> dict[str, Any] | None:
        """One decoded message in, its response out (None: no response); the one exception boundary.

        `notify`, when the transport can carry them, sends notifications about this request
        (progress, log messages) ahead of its response.
        """
        request_id = read_id(message)
        try:
            request = parse_envelope(message)
            if request.id is None:
                return self.notify(request)
            handler = self.methods.get(request.method)
            if handler is None:
                raise unknown_method(request.method)
            meta = read_meta(request.params)
            if check is not None:
                check(request, meta)  # after the -32602 meta checks, before the version check
            check_version(meta)
            return {"jsonrpc": "2.0", "id": request.id, "result": handler(self, request, meta, principal, notify)}
        except McpError as exc:
            return error_response(request_id, exc)
        except Exception:  # noqa: BLE001 - this is the boundary
            import traceback  # loaded at the first internal error: most processes never have one

            self.log("internal error:\n" + traceback.format_exc())
            return error_response(request_id, McpError(INTERNAL_ERROR, "Internal error"))

    def notify(self, request: Envelope) -> None:
        """Id-less messages get no response; an id-less request is logged and never runs."""
        # The lesson's rule: a message without an id gets no response. For a notification
        # that is all. A *request* without an id (tools/call, say) could still be run
        # silently, as the rule allows; here it never runs, because a deletion nobody can
        # be told about is worse than a refusal nobody hears. That is the safer choice.
        # notifications/cancelled: every request here completes synchronously, so there is
        # never anything in flight to stop; unknown notifications are ignored.
        if not request.method.startswith("notifications/"):
            self.log(f"ignored id-less request {request.method[:64]!r}: a request needs an id")
        return None

    def handle_bytes(self, raw: bytes, principal: str, check: Check | None = None) -> bytes | None:
        """Bytes in, bytes out (None: no response): handle() with the JSON decoding and encoding.

        The transports decode once themselves (they look at the message first) and call
        handle(); this is for callers that hold raw bytes, such as the benchmarks.
        """
        try:
            message = decode_message(raw)
        except McpError as exc:
            return encode_message(error_response(None, exc))
        response = self.handle(message, principal, check)
        return None if response is None else encode_message(response)


def notes_server(
    *,
    keys: Sequence[bytes],
    notes: NotesStore,
    policy: AuthorizationPolicy,
    clock: Callable[[], float] = time.time,
    state_ttl: float = DEFAULT_STATE_TTL_SECONDS,
    log: Callable[[str], None] = stderr_log,
) -> Server:
    """A server serving the lesson's tool, notes_delete, given its dependencies through add_tool."""
    server = Server(keys=keys, notes=notes, policy=policy, clock=clock, state_ttl=state_ttl, log=log)
    server.add_tool(NotesDelete(policy=policy, notes=notes, confirmations=server.confirmations, log=server.say))
    return server


# =====================================================================================
# 15. The demo
# =====================================================================================

LESSON_PRINCIPAL = "alice"
LESSON_WORKSPACE = "file:///Users/alice/Documents/Notes"


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
    keys: Sequence[bytes],
    clock: Callable[[], float] = time.time,
    log: Callable[[str], None] = stderr_log,
    max_replay: int = MAX_REPLAY_PER_PRINCIPAL,
) -> Server:
    """A server over the lesson fixture with one principal (`alice`) and the given keys."""
    return notes_server(
        keys=keys,
        notes=MemoryNotesStore(lesson_notes(), MemoryReplayStore(clock, max_replay)),
        policy=AuthorizationPolicy({LESSON_PRINCIPAL: [LESSON_WORKSPACE]}),
        clock=clock,
        log=log,
    )


def request_meta(capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `_meta` a modern client sends on every request."""
    return {
        META_PROTOCOL_VERSION: PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "lesson-client", "version": "1.0.0"},
        META_CLIENT_CAPABILITIES: {"elicitation": {"form": {}}} if capabilities is None else capabilities,
    }


DEMO_WIDTH = 100  # characters in one line of the demo's output


def wire_lines(message: dict[str, Any], width: int) -> list[str]:
    """A wire message as indented JSON in lines of at most `width`; long strings end in "…"."""

    def fit(value: Any, prefix: str, indent: str, last: bool) -> list[str]:
        comma = "" if last else ","
        room = width - len(indent) - len(prefix) - len(comma)
        if isinstance(value, str) and len(json.dumps(value, ensure_ascii=False)) > room:
            if value.startswith(STATE_VERSION + "."):
                value = f"{value[:12]}…({len(value)} chars, signed)"  # the requestState
            while len(json.dumps(value, ensure_ascii=False)) > room and len(value) > 1:
                value = value[: len(value) - 2] + "…"
        flat = json.dumps(value, ensure_ascii=False)
        if len(flat) <= room or not isinstance(value, (dict, list)) or not value:
            return [indent + prefix + flat + comma]
        items = list(value.items()) if isinstance(value, dict) else [(None, item) for item in value]
        lines = [indent + prefix + ("{" if isinstance(value, dict) else "[")]
        for k, (key, item) in enumerate(items):
            label = "" if key is None else json.dumps(key, ensure_ascii=False) + ": "
            lines += fit(item, label, indent + "  ", k == len(items) - 1)
        return lines + [indent + ("}" if isinstance(value, dict) else "]") + comma]

    return fit(message, "", "", True)


def demo(out: Callable[[str], None] = print) -> None:
    """The scripted two-call flow, each message as it crosses the wire, then a replay on a second instance."""
    # The demo's own key: random per run, which is why the requestState differs each time.
    key = secrets.token_bytes(32)
    server = lesson_server([key], log=lambda line: out(f"   (server log: {line})"))
    # A second instance sharing the first one's notes and replay store, as two processes
    # behind a load balancer share one database: either may receive any retry.
    other = notes_server(keys=[key], notes=server.notes, policy=server.policy, log=server.say)

    seen: set[str] = set()  # each `_meta` is shown in full the first time only

    def show(arrow: str, message: dict[str, Any]) -> None:
        shown = json.loads(json.dumps(message))
        for part in (shown.get("params"), shown.get("result")):
            if isinstance(part, dict) and "_meta" in part:
                meta = json.dumps(part["_meta"], sort_keys=True)
                part["_meta"] = "…(the same _meta as above)" if meta in seen else part["_meta"]
                seen.add(meta)
        lines = wire_lines(shown, DEMO_WIDTH - 4)
        out(f"{arrow} {lines[0]}")
        for line in lines[1:]:
            out(f"    {line}")

    def exchange(title: str, message: dict[str, Any], to: Server = server) -> dict[str, Any]:
        out(f"\n## {title}")
        show("-->", message)
        response = to.handle(message, LESSON_PRINCIPAL)
        assert response is not None
        show("<--", response)
        return response

    def tools_call(request_id: int, **mrtr: Any) -> dict[str, Any]:
        arguments = {"workspaceUri": LESSON_WORKSPACE, "title": "TPS report"}
        params = {"_meta": request_meta(), "name": TOOL_NAME, "arguments": arguments, **mrtr}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    out(f"Notes server demo, protocol {PROTOCOL_VERSION}, principal {LESSON_PRINCIPAL!r}")
    out(f"Workspace {LESSON_WORKSPACE} (notes outside it exist but must never be offered)")
    out("Long strings are shortened here (…); on the wire they are whole.")
    exchange("1. server/discover", {"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {"_meta": request_meta({})}})
    exchange("2. tools/list", {"jsonrpc": "2.0", "id": "list", "method": "tools/list", "params": {"_meta": request_meta({})}})
    first = exchange("3. tools/call, id 1: the server asks instead of guessing", tools_call(1))["result"]
    form = first["inputRequests"][INPUT_KEY]["params"]
    out("\n## The user sees the form")
    for line in textwrap.wrap(form["message"], DEMO_WIDTH - 3):
        out("   " + line)
    for option in form["requestedSchema"]["properties"][CHOICE_FIELD]["oneOf"]:
        out(f"   ( ) {option['title']}  [{option['const']}]")
    out("   User picks note-14 and ticks 'Delete it permanently'.")
    answer = {INPUT_KEY: {"action": "accept", "content": {CHOICE_FIELD: "note-14", CONFIRM_FIELD: True}}}
    retry = {"requestState": first["requestState"], "inputResponses": answer}
    exchange("4. tools/call, id 2: retry with the answer and the echoed state", tools_call(2, **retry))
    exchange("5. tools/call, id 3: the same answer replayed, to a second instance sharing the stores",
             tools_call(3, **retry), other)
    out("\n## Notes left")
    assert isinstance(server.notes, MemoryNotesStore)
    for note in server.notes.all():
        out(f"   {note.id:8} {note.title:16} {note.uri}")


def main(argv: Sequence[str] | None = None) -> int:
    """`main.py` runs the demo; serving is `code/serve.py`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        try:
            demo()
        except BrokenPipeError:  # `python3 code/main.py | head`: the reader has all it wanted
            sys.stdout = None  # type: ignore[assignment]  # nothing left to flush at exit
        return 0
    print("usage: python3 code/main.py        run the scripted demo", file=sys.stderr)
    print("       python3 code/serve.py ...   run the server (--stdio or --http; --help)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
