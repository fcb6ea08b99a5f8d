"""Legacy 2025-11-25 adapter: `initialize`-era hosts on the modern, stateless core.

`LegacySession` is the transport-neutral session (initialize, tools/list shaping, the
call loop translating input_required <-> elicitation/create, roots hints); its carriers
are `LegacyStdioSession` below and the HTTP sessions of code/legacy_http.py.

A dual-era stdio process (2026-07-28 versioning: "An `initialize` request selects legacy
semantics, scoped to the stdio process"). Until a legacy `initialize` arrives, the core
answers every line exactly as it would without this module. After it, a request carrying
modern `_meta` still goes to the core unchanged; everything else is legacy and is
translated here (a message without `method` is then a response from the client):

    initialize        the negotiated version, the core's capabilities and instructions
    ping              {}
    logging/setLevel  {}; the level is kept by the session and filters relayed log messages
    resources/(un)subscribe  {} for a resource the core can read; nothing is tracked, since
                      no resource of the core ever changes (no update is ever due)
    tools/list        the core's tools/list without resultType, cache hints or modern _meta
    tools/call        the core's tools/call on a worker thread; each `input_required` form
                      or sampling request becomes a live `elicitation/create` or
                      `sampling/createMessage` request to the client (its id is the
                      inputRequests key, `delete_choice`, then `delete_choice#2`, ...), and
                      the client's answer goes back to the core as `inputResponses` with
                      the echoed `requestState`, until the core's result is complete; the
                      tool's progress and log notifications go to the client before it
    any other method  of the core's dispatch table (prompts/*, resources/*, completion/...):
                      forwarded as a modern request, its result shaped like tools/list's

The legacy session (negotiated version, the client's capabilities and clientInfo, its
roots, calls in flight, requests this adapter sent) lives in one LegacySession; the core
keeps none of it and cannot tell a translated call from a modern client's. Like a modern
client's, each request it gets names the client in `_meta` (initialize's clientInfo name
and version), and a tools/call keeps the client's own id: the audit records both.

Roots are hints only. If the client declares `roots`, its roots are asked for after
`notifications/initialized` (and again after `notifications/roots/list_changed`) and used
for one thing: when a first call of a tool taking `workspaceUri` fails and exactly one
root is also a workspace this principal is authorized for, the error text suggests it.
A root never authorizes, widens or selects a workspace. Standard library only.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import secrets
import threading
import time
import traceback
from collections.abc import Callable, Generator
from typing import Any

import frame
import main

__all__ = [
    "CallSteps",
    "LEGACY_VERSIONS",
    "LegacyCall",
    "LegacySession",
    "LegacyStdioSession",
    "MAX_PENDING_ELICITATIONS",
    "is_modern",
    "tool_error",
]

# Newest first. Only versions whose wire shapes this adapter serves: 2025-06-18 has no
# `mode` in elicitation/create and no titled single-select, which the form relies on.
LEGACY_VERSIONS: tuple[str, ...] = ("2025-11-25",)
LATEST_LEGACY_VERSION = LEGACY_VERSIONS[0]

# Limits. Each bounds what one legacy client can make this process hold.
MAX_CONCURRENT_LEGACY_CALLS = 4  # tools/call worker threads; each holds at most one outgoing request
ELICITATION_TIMEOUT_SECONDS = main.DEFAULT_STATE_TTL_SECONDS  # a form unanswered this long is given up
MAX_ELICITATION_ROUNDS = 3  # input_required rounds relayed for one tools/call
MAX_ROOTS = 64  # roots accepted from one roots/list answer (a longer list is ignored)
MAX_PENDING_ELICITATIONS = MAX_CONCURRENT_LEGACY_CALLS  # forms awaiting an answer in one session
GONE_POLL_SECONDS = 0.25  # how often a wait checks whether the carrier's peer went away
CLOSE_GRACE_SECONDS = 5.0  # close() waits this long for each worker to finish

INTERNAL_ID_PREFIX = (
    "legacy-internal-"  # ids of the requests the adapter hands the core (a tools/call keeps the client's)
)
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"  # where a modern request names its client
CLIENT_INFO_KEYS = ("name", "version")  # what of initialize's clientInfo each modern request carries
MAX_CLIENT_INFO_CHARS = 200  # characters kept of each (a session holds them for its lifetime)
# Never forwarded: 2025-11-25 has initialize instead of discover, and no listen stream.
MODERN_ONLY_METHODS = ("server/discover", "subscriptions/listen")
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")  # least severe first
RELAYED_NOTIFICATIONS = ("notifications/progress", "notifications/message")  # what a tool may send ahead of its result
SAMPLING_KEYS = (
    "messages",
    "modelPreferences",
    "systemPrompt",
    "includeContext",
    "temperature",
    "maxTokens",
    "stopSequences",
    "metadata",
)
SAMPLING_RESULT_KEYS = ("role", "content", "model", "stopReason")
ASKED_WHAT = {"elicitation/create": "form", "sampling/createMessage": "sampling request"}
MODERN_ONLY_RESULT_KEYS = ("resultType", "ttlMs", "cacheScope")
LEGACY_TOOL_KEYS = (
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "icons",
    "execution",
    "_meta",
)
RESERVED_META_PREFIX = "io.modelcontextprotocol/"
ELICIT_ACTIONS = ("accept", "decline", "cancel")

NEEDS_ELICITATION = (
    "This tool asks the user through elicitation ({modes} mode), which this client did not declare in "
    "initialize; nothing was changed. Use a client that supports it."
)
NEEDS_ELICITATION_TO_DELETE = (
    "This tool asks the user through elicitation ({modes} mode), which this client did not declare in initialize. {why}"
)
NOTHING_DELETED = "Nothing was deleted"  # how the core's -32021 for notes_delete goes on
NEEDS_CAPABILITY = (
    "This tool needs the client's {names} capability, which this client did not declare in initialize; "
    "nothing was changed. Use a client that supports it."
)
CANNOT_ASK = "The tool needs input this adapter cannot ask this client for; nothing was changed."
BUSY_FORMS = (
    f"Too many forms are waiting for an answer in this session (at most {MAX_PENDING_ELICITATIONS}); "
    "nothing was changed."
)
BUSY = f"Too many tool calls are in progress (at most {MAX_CONCURRENT_LEGACY_CALLS}); nothing was changed. Try again."


def is_modern(message: dict[str, Any]) -> bool:
    """True when the message carries the modern per-request protocol version in params._meta."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and main.META_PROTOCOL_VERSION in meta


def core_capabilities(declared: dict[str, Any]) -> dict[str, Any]:
    """The modern clientCapabilities for a legacy client's declared ones: elicitation modes and sampling."""
    elicitation = declared.get("elicitation")
    modes: dict[str, Any] = {}
    if main.supports_form_elicitation(declared):
        modes["form"] = {}  # `{}` means form, in 2025-11-25 as in 2026-07-28
    if isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict):
        modes["url"] = {}
    capabilities: dict[str, Any] = {"elicitation": modes} if modes else {}
    if isinstance(declared.get("sampling"), dict):
        capabilities["sampling"] = {}  # this adapter relays the request's basic fields only
    # Roots are not passed on: the core never sees them, so they cannot steer it.
    return capabilities


def client_info(declared: dict[str, Any]) -> dict[str, str]:
    """The name and version of initialize's clientInfo that are strings, each clipped to MAX_CLIENT_INFO_CHARS."""
    # Self-reported labels for the audit, never a credential: a 60 KB name is clipped
    # rather than held for the session's lifetime, and anything but a string is left out.
    return {
        key: declared[key][:MAX_CLIENT_INFO_CHARS] for key in CLIENT_INFO_KEYS if isinstance(declared.get(key), str)
    }


def legacy_result(result: dict[str, Any]) -> dict[str, Any]:
    """A modern result in 2025-11-25 shape: no resultType, ttlMs, cacheScope or reserved _meta keys."""
    shaped = {key: value for key, value in result.items() if key not in MODERN_ONLY_RESULT_KEYS and key != "_meta"}
    meta = result.get("_meta")
    if isinstance(meta, dict):
        kept = {key: value for key, value in meta.items() if not key.startswith(RESERVED_META_PREFIX)}
        if kept:
            shaped["_meta"] = kept
    return shaped


def required_modes(data: Any) -> str:
    """The elicitation modes named in a -32021 error's data, for the tool error text."""
    required = data.get("requiredCapabilities") if isinstance(data, dict) else None
    elicitation = required.get("elicitation") if isinstance(required, dict) else None
    return " or ".join(sorted(elicitation)) if isinstance(elicitation, dict) and elicitation else "form"


def needs_text(data: Any, message: Any = "") -> str:
    """The tool error text for a -32021: the elicitation modes, or the other capabilities it names.

    When the core's message goes on to say that nothing was deleted and what would make
    deleting possible (notes_delete's), the user reads that sentence instead of the generic advice.
    """
    required = data.get("requiredCapabilities") if isinstance(data, dict) else None
    if isinstance(required, dict) and required and "elicitation" not in required:
        return NEEDS_CAPABILITY.format(names=" and ".join(sorted(map(str, required))))
    why = message.partition(". ")[2] if isinstance(message, str) else ""
    if why.startswith(NOTHING_DELETED):
        return NEEDS_ELICITATION_TO_DELETE.format(modes=required_modes(data), why=why)
    return NEEDS_ELICITATION.format(modes=required_modes(data))


def tool_error(text: str) -> dict[str, Any]:
    """A 2025-11-25 CallToolResult reporting a tool error."""
    return legacy_result(main.tool_result(text, is_error=True))


class _Abandoned(Exception):
    """The call was cancelled by the client, its carrier is gone or the session closed: send nothing for it."""


@dataclasses.dataclass
class Outgoing:
    """A request this adapter sent to the client, until the client's response arrives."""

    method: str
    answered: threading.Event = dataclasses.field(default_factory=threading.Event)
    response: dict[str, Any] | None = None  # None: malformed (or woken by cancel/close)


@dataclasses.dataclass
class LegacyCall:
    """A legacy tools/call in flight (on a stdio worker thread or an HTTP event stream)."""

    id: str | int
    thread: threading.Thread | None = None
    cancelled: bool = False
    waiting_on: str | None = None  # the id of the elicitation/create it waits for


# What a carrier drives: each yielded message goes to the client before the generator is
# resumed; the return value is the call's JSON-RPC response, or None to send nothing.
CallSteps = Generator[dict[str, Any], None, "dict[str, Any] | None"]


class LegacySession:
    """The transport-neutral legacy session: initialize, tools/list, the call loop, roots hints.

    A carrier (stdio lines, HTTP event streams) decodes messages and routes them here:
    `answer()` for requests other than tools/call, `on_notification()`, `on_response()`,
    and `begin_call()` + `run_call()` + `end_call()` for tools/call. A carrier that can
    push a message to the client at any time (stdio) sets PUSH and implements `_push()`;
    one that cannot (HTTP without a standalone stream) gets roots/list asked inside the
    call that needs them.
    """

    PUSH = False  # True: _push() can send a server-initiated request at any moment

    def __init__(
        self,
        server: frame.Server,
        principal: str,
        log: Callable[[str], None] = main.stderr_log,
        elicitation_timeout: float = ELICITATION_TIMEOUT_SECONDS,
    ) -> None:
        self.server = server
        self.principal = principal
        self.version: str | None = None  # the negotiated legacy version; None until initialize
        self.initialized = False  # notifications/initialized seen
        self._log = log
        self._timeout = elicitation_timeout
        self._lock = threading.Lock()  # everything below
        self._capabilities: dict[str, Any] = {}  # what the core is told, derived from initialize
        self.client_info: dict[str, str] = {}  # initialize's clientInfo name and version (self-reported)
        self.log_level: str | None = None  # set by logging/setLevel; None: every log message is relayed
        self._wants_roots = False
        self._roots: tuple[main.Path, ...] = ()
        self._roots_request: str | None = None
        self._roots_stale = False
        self._roots_due = False  # no PUSH: roots/list is to be asked by the next call that can use them
        self._outgoing: dict[str, Outgoing] = {}
        self._calls: dict[str | int, LegacyCall] = {}
        self._ids = itertools.count(1)
        self._sent: dict[str, int] = {}  # outgoing id base -> times used (bases are ours, so few)
        self._closed = False

    # ------------------------------------------------------------------ requests, notifications, responses

    def answer(self, request: main.Envelope) -> dict[str, Any]:
        """The response to a legacy request other than tools/call."""
        handlers: dict[str, Callable[[Any], dict[str, Any]]] = {
            "initialize": self._initialize,
            "ping": lambda params: {},
            "tools/list": self._list_tools,
            "logging/setLevel": self._set_level,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
        }
        try:
            handler = handlers.get(request.method)
            if handler is None and self._forwards(request.method):
                handler = lambda params: self._forward(request.method, params)  # noqa: E731
            if handler is None:
                raise main.McpError(main.METHOD_NOT_FOUND, "Method not found")
            return {"jsonrpc": "2.0", "id": request.id, "result": handler(request.params)}
        except main.McpError as exc:
            return main.error_response(request.id, exc)
        except Exception:  # noqa: BLE001 - the adapter's own boundary, like the core's
            self._log("legacy: internal error:\n" + traceback.format_exc())
            return main.error_response(request.id, main.McpError(main.INTERNAL_ERROR, "Internal error"))

    def on_notification(self, request: main.Envelope) -> None:
        """A legacy notification: initialized and roots/list_changed (roots), cancelled; anything else is ignored."""
        if request.method == "notifications/initialized" and not self.initialized:
            self.initialized = True
            self._ask_roots()
        elif request.method == "notifications/roots/list_changed":
            self._ask_roots()
        elif request.method == "notifications/cancelled":
            self._cancel(request.params)
        elif not request.method.startswith("notifications/"):
            self._log(f"legacy: ignored id-less request {request.method[:64]!r}: a request needs an id")

    def on_response(self, message: dict[str, Any]) -> None:
        """A response from the client: it completes the request it answers, or it is ignored."""
        request_id = main.read_id(message)
        with self._lock:
            outgoing = self._outgoing.pop(request_id, None) if isinstance(request_id, str) else None
        if outgoing is None:
            # Unknown, duplicate, late or id-less: nobody waits for it, and answering a
            # response is not allowed, so it is dropped without touching any state.
            self._log(f"legacy: ignored a response to no pending request (id {str(request_id)[:64]!r})")
            return
        body = message.get("result", message.get("error"))
        if (
            message.get("jsonrpc") != "2.0"
            or ("result" in message) == ("error" in message)
            or not isinstance(body, dict)
        ):
            self._log(f"legacy: malformed response to {outgoing.method} {request_id!r}; treated as a refusal")
        else:
            outgoing.response = message
        if outgoing.method == "roots/list":
            self._take_roots(outgoing.response)
        outgoing.answered.set()

    def _cancel(self, params: Any) -> None:
        """notifications/cancelled: a legacy call in flight stops waiting and will not be answered."""
        request_id = main.read_id({"id": params.get("requestId")}) if isinstance(params, dict) else None
        with self._lock:
            call = self._calls.get(request_id) if request_id is not None else None
            if call is None:
                return  # unknown or finished: ignored, as the spec says
            call.cancelled = True
            outgoing = self._outgoing.get(call.waiting_on) if call.waiting_on else None
        if outgoing is not None:
            outgoing.answered.set()

    def pending(self) -> int:
        """How many requests to the client await an answer (forms and roots/list)."""
        with self._lock:
            return len(self._outgoing)

    def _modern(
        self,
        method: str,
        params: dict[str, Any],
        progress: Any = None,
        notify: frame.Notify | None = None,
        request_id: str | int | None = None,
    ) -> dict[str, Any]:
        """Run one request through the core as a modern client with this session's capabilities and clientInfo.

        `progress` is the client's progressToken (the same `_meta` key in both eras);
        `notify` receives the notifications the core sends about this request;
        `request_id` is the client's own id (a tools/call, so the audit names the call
        the client made), else the request gets an internal one.
        """
        meta: dict[str, Any] = {
            main.META_PROTOCOL_VERSION: main.PROTOCOL_VERSION,
            main.META_CLIENT_CAPABILITIES: copy.deepcopy(self._capabilities),
        }
        if self.client_info:
            meta[CLIENT_INFO_META] = dict(self.client_info)
        if isinstance(progress, str) or (isinstance(progress, int) and not isinstance(progress, bool)):
            meta["progressToken"] = progress
        if request_id is None:
            with self._lock:
                request_id = f"{INTERNAL_ID_PREFIX}{next(self._ids)}"
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta}}
        response = self.server.handle(message, self.principal, notify=notify)
        assert response is not None  # a request with an id always gets a response
        return response

    def _outgoing_id(self, base: str) -> str:
        """A new id for a request to the client (call with the lock held): `base`, then `base#2`, ...

        The base is the inputRequests key (delete_choice) or "roots/list", so the client's
        log says what is being asked; the suffix keeps ids unique within the session.
        """
        count = self._sent[base] = self._sent.get(base, 0) + 1
        return base if count == 1 else f"{base}#{count}"

    def _push(self, message: dict[str, Any]) -> bool:
        """Send a server-initiated message now (carriers with PUSH only); False if it could not be sent."""
        raise NotImplementedError

    # ------------------------------------------------------------------ initialize, tools/list

    def _initialize(self, params: Any) -> dict[str, Any]:
        """Negotiate the version, fix the client's capabilities for the session, describe the server."""
        if self.version is not None:
            raise main.McpError(main.INVALID_REQUEST, "Invalid Request: this session is already initialized")
        if not (
            isinstance(params, dict)
            and isinstance(params.get("protocolVersion"), str)
            and isinstance(params.get("capabilities"), dict)
            and isinstance(params.get("clientInfo"), dict)
        ):
            raise main.McpError(
                main.INVALID_PARAMS, "Invalid params: initialize needs protocolVersion, capabilities and clientInfo"
            )
        discovered = self._modern("server/discover", {})
        if "result" not in discovered:
            raise main.McpError(main.INTERNAL_ERROR, "Internal error")
        requested, declared = params["protocolVersion"], params["capabilities"]
        self._capabilities = core_capabilities(declared)
        self.client_info = client_info(params["clientInfo"])
        self._wants_roots = isinstance(declared.get("roots"), dict)
        self.version = requested if requested in LEGACY_VERSIONS else LATEST_LEGACY_VERSION
        result = {
            "protocolVersion": self.version,
            "capabilities": discovered["result"]["capabilities"],
            "serverInfo": dict(main.SERVER_INFO),
        }
        if isinstance(discovered["result"].get("instructions"), str):
            result["instructions"] = discovered["result"]["instructions"]
        return result

    def _list_tools(self, params: Any) -> dict[str, Any]:
        """The core's tools in 2025-11-25 shape (each descriptor keeps only legacy Tool keys)."""
        if params is not None and not isinstance(params, dict):
            raise main.McpError(main.INVALID_PARAMS, "Invalid params: params must be an object")
        response = self._modern("tools/list", {key: value for key, value in (params or {}).items() if key == "cursor"})
        if "error" in response:
            error = response["error"]
            raise main.McpError(error["code"], error["message"], error.get("data"))
        result = legacy_result(response["result"])
        result["tools"] = [
            {key: value for key, value in tool.items() if key in LEGACY_TOOL_KEYS} for tool in result["tools"]
        ]
        return result

    # ------------------------------------------------------------------ logging, subscriptions, forwarding

    def _set_level(self, params: Any) -> dict[str, Any]:
        """logging/setLevel: keep the session's minimum level for relayed log messages."""
        level = params.get("level") if isinstance(params, dict) else None
        if level not in LOG_LEVELS:
            raise main.McpError(main.INVALID_PARAMS, "Invalid params: level must be one of " + ", ".join(LOG_LEVELS))
        with self._lock:
            self.log_level = level
        return {}

    def _loud_enough(self, level: Any) -> bool:
        """True when a log message at `level` passes the session's level (an unknown level never does)."""
        with self._lock:
            minimum = self.log_level
        return level in LOG_LEVELS and (minimum is None or LOG_LEVELS.index(level) >= LOG_LEVELS.index(minimum))

    def _subscribe(self, params: Any) -> dict[str, Any]:
        """resources/subscribe: {} for a resource the core can read (its own error otherwise)."""
        self._forward("resources/read", {"uri": self._subscription_uri(params)})
        # Nothing is kept: no resource of the core changes, so no update is ever due, and a
        # client subscribing in a loop makes this session hold nothing.
        return {}

    def _unsubscribe(self, params: Any) -> dict[str, Any]:
        """resources/unsubscribe: {} (nothing is tracked, so there is nothing to remove)."""
        self._subscription_uri(params)
        return {}

    def _subscription_uri(self, params: Any) -> str:
        """The uri of a (un)subscribe; -32601 without core resources, -32602 without a uri."""
        if "resources/read" not in self.server.methods:
            raise main.McpError(main.METHOD_NOT_FOUND, "Method not found")
        uri = params.get("uri") if isinstance(params, dict) else None
        if not isinstance(uri, str) or not 0 < len(uri) <= main.MAX_URI_LENGTH:
            raise main.McpError(
                main.INVALID_PARAMS, f"Invalid params: uri must be a string of 1..{main.MAX_URI_LENGTH} characters"
            )
        return uri

    def _forwards(self, method: str) -> bool:
        """True for a core method this session serves by forwarding (not tools/*, not modern-only)."""
        return method in self.server.methods and method not in MODERN_ONLY_METHODS and not method.startswith("tools/")

    def _forward(self, method: str, params: Any) -> dict[str, Any]:
        """A core method run as a modern request, its result in 2025-11-25 shape; core errors pass."""
        if params is not None and not isinstance(params, dict):
            raise main.McpError(main.INVALID_PARAMS, "Invalid params: params must be an object")
        params = params or {}
        meta = params.get("_meta")
        # The client's own _meta never reaches the core: reserved keys in it could claim
        # capabilities or a version this session did not negotiate. Only progressToken,
        # the same key in both eras, is carried over (by _modern, after checking it).
        body = {key: value for key, value in params.items() if key != "_meta"}
        response = self._modern(method, body, meta.get("progressToken") if isinstance(meta, dict) else None)
        if "error" in response:
            error = response["error"]
            raise main.McpError(error["code"], error["message"], error.get("data"))
        result = response["result"]
        if result.get("resultType") == "input_required":
            # Only tools/call has a loop that asks the client: a prompt that needs input
            # cannot be answered on this era's one request/response.
            raise main.McpError(
                main.INVALID_REQUEST,
                f"Invalid Request: {method} needs input, which this server asks for in tools/call only",
            )
        return legacy_result(result)

    def _relayed(self, notes: list[dict[str, Any]]) -> Generator[dict[str, Any], None, None]:
        """The core's notifications about a call, in 2025-11-25 shape; log messages below the session's level are
        dropped."""
        for note in notes:
            params = note.get("params")
            if note.get("method") not in RELAYED_NOTIFICATIONS or not isinstance(params, dict):
                continue
            if note["method"] == "notifications/message" and not self._loud_enough(params.get("level")):
                continue
            yield {"jsonrpc": "2.0", "method": note["method"], "params": legacy_result(params)}

    # ------------------------------------------------------------------ roots (hints only)

    def _ask_roots(self) -> None:
        """Ask roots/list if the client declared roots: now (PUSH), else in the next call that can use them."""
        if not (self._wants_roots and self.initialized):
            return
        with self._lock:
            if self._roots_request is not None:
                self._roots_stale = True  # ask again once the pending answer is in
                return
            if not self.PUSH:
                self._roots_due = True
                return
            request_id = self._outgoing_id("roots/list")
            self._outgoing[request_id] = Outgoing("roots/list")
            self._roots_request = request_id
        self._push({"jsonrpc": "2.0", "id": request_id, "method": "roots/list"})

    def _take_roots(self, response: dict[str, Any] | None) -> None:
        """Keep the parseable file:// roots of an answer; an error or oversized list leaves none."""
        result = response.get("result") if response else None
        entries = result.get("roots") if isinstance(result, dict) else None
        roots: list[main.Path] = []
        if not isinstance(entries, list) or len(entries) > MAX_ROOTS:
            self._log(f"legacy: roots/list answer ignored (an error, or not a list of at most {MAX_ROOTS} roots)")
        else:
            for entry in entries:
                try:
                    roots.append(main.parse_file_uri(entry.get("uri") if isinstance(entry, dict) else None))
                except main.ScopeError as exc:
                    self._log(f"legacy: ignored a root that {exc}")
        with self._lock:
            self._roots = tuple(roots)
            self._roots_request = None
            stale, self._roots_stale = self._roots_stale, False
        if stale:
            self._ask_roots()

    def _fetch_roots(self, gone: threading.Event | None) -> CallSteps:
        """Without PUSH: ask a due roots/list on this call's carrier and wait (bounded) for the answer."""
        with self._lock:
            if not self._roots_due or self._roots_request is not None or self._closed:
                return None
            self._roots_due = False
            request_id = self._outgoing_id("roots/list")
            outgoing = self._outgoing[request_id] = Outgoing("roots/list")
            self._roots_request = request_id
        try:
            yield {"jsonrpc": "2.0", "id": request_id, "method": "roots/list"}
            self._wait(outgoing, gone)
        finally:
            with self._lock:
                if self._outgoing.pop(request_id, None) is not None:
                    self._roots_request = None  # unanswered: the next list_changed may ask again
        return None

    def suggested_workspace(self) -> str | None:
        """The client's one root that this principal is authorized for, if exactly one is."""
        with self._lock:
            roots = self._roots
        # allows() is the same check the core makes: a root above a granted workspace
        # (file:///Users/alice) is not allowed, so a hint never widens what may be touched.
        usable = {main.format_file_uri(path) for path in roots if self.server.policy.allows(self.principal, path)}
        return usable.pop() if len(usable) == 1 else None

    def _hint_applies(self, result: dict[str, Any], params: dict[str, Any]) -> bool:
        """True for a failed call of a tool taking workspaceUri: the one place a root may be suggested."""
        name = params.get("name")
        tool = self.server.tools.get(name) if isinstance(name, str) else None
        return (
            bool(result.get("isError"))
            and tool is not None
            and "workspaceUri" in tool.descriptor["inputSchema"].get("properties", {})
        )

    def _with_hint(self, result: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        """A failed first call of a workspaceUri tool, plus the suggested root if there is one."""
        if not self._hint_applies(result, params):
            return result
        suggestion = self.suggested_workspace()
        arguments = params.get("arguments")
        try:
            given = main.format_file_uri(
                main.parse_file_uri(arguments.get("workspaceUri") if isinstance(arguments, dict) else None)
            )
        except main.ScopeError:
            given = None
        if suggestion is None or suggestion == given:
            return result
        hint = f"The client's roots include {suggestion}, a workspace you may use: pass it as workspaceUri."
        return {**result, "content": [*result.get("content", []), {"type": "text", "text": hint}]}

    # ------------------------------------------------------------------ tools/call

    def begin_call(self, request_id: str | int) -> LegacyCall | None:
        """Register a call in flight, or None when a call with this id is already in flight."""
        with self._lock:
            # Cancellation is by id: two calls in flight with one id could not be told apart.
            if request_id in self._calls or self._closed:
                return None
            call = self._calls[request_id] = LegacyCall(request_id)
            return call

    def end_call(self, call: LegacyCall) -> bool:
        """Forget a finished call; True when its response may still be sent (not cancelled, session open)."""
        with self._lock:
            if self._calls.get(call.id) is call:
                del self._calls[call.id]
            return not call.cancelled and not self._closed

    def run_call(self, call: LegacyCall, params: Any, gone: threading.Event | None = None) -> CallSteps:
        """The whole call as steps: yields each message for the client, returns the response (None: send nothing).

        `gone` (the carrier's peer went away) is checked while waiting for an answer.
        Closing the generator at a yield abandons the call: nothing pending stays behind.
        """
        try:
            result = yield from self._call_tool(call, params, gone)
            return {"jsonrpc": "2.0", "id": call.id, "result": result}
        except main.McpError as exc:
            return main.error_response(call.id, exc)
        except _Abandoned:
            return None
        except Exception:  # noqa: BLE001 - the call's boundary
            self._log("legacy: internal error in tools/call:\n" + traceback.format_exc())
            return main.error_response(call.id, main.McpError(main.INTERNAL_ERROR, "Internal error"))

    def _call_tool(
        self, call: LegacyCall, params: Any, gone: threading.Event | None
    ) -> Generator[dict[str, Any], None, dict[str, Any]]:
        """The core's tools/call, relaying each input_required form to the client; McpError passes."""
        if not isinstance(params, dict):
            raise main.McpError(main.INVALID_PARAMS, "Invalid params: params must be an object")
        # Only name and arguments: a legacy client does not drive the MRTR fields itself.
        base = {key: params[key] for key in ("name", "arguments") if key in params}
        meta = params.get("_meta")
        progress = meta.get("progressToken") if isinstance(meta, dict) else None
        notes: list[dict[str, Any]] = []
        # The core (and the audit it writes) sees the client's own id, every round: ids are
        # opaque to it, and 2025-11-25 forbids a client to reuse one within its session.
        response = self._modern("tools/call", base, progress, notes.append, call.id)
        for round_number in itertools.count():
            yield from self._relayed(notes)
            notes.clear()
            if "error" in response:
                error = response["error"]
                if error["code"] == main.MISSING_REQUIRED_CLIENT_CAPABILITY:
                    return tool_error(needs_text(error.get("data"), error.get("message")))
                if round_number:
                    # The arguments were fine; the confirmation was not (expired, or an
                    # answer outside the form). A refusal changes nothing.
                    return tool_error(f"The confirmation was not accepted ({error['message']}); nothing was changed.")
                raise main.McpError(error["code"], error["message"], error.get("data"))
            result = response["result"]
            if result.get("resultType") != "input_required":
                shaped = legacy_result(result)
                if round_number:
                    return shaped
                if self._hint_applies(shaped, base):
                    yield from self._fetch_roots(gone)
                return self._with_hint(shaped, base)
            if round_number == MAX_ELICITATION_ROUNDS:
                return tool_error(
                    f"The tool still needed input after {MAX_ELICITATION_ROUNDS} forms; nothing was changed."
                )
            answers = yield from self._ask_client(call, result.get("inputRequests"), gone)
            if isinstance(answers, str):
                return tool_error(answers)
            retry = {**base, "requestState": result.get("requestState"), "inputResponses": answers}
            response = self._modern("tools/call", retry, progress, notes.append, call.id)
        raise AssertionError("unreachable")

    def _ask_client(
        self, call: LegacyCall, requests: Any, gone: threading.Event | None
    ) -> Generator[dict[str, Any], None, dict[str, Any] | str]:
        """Each form or sampling request in inputRequests asked live: the answers, or why not."""
        if not isinstance(requests, dict) or not requests:
            return "The tool asked for input it did not describe; nothing was changed."
        answers: dict[str, Any] = {}
        declared = self._capabilities.get("elicitation", {})
        for key, asked in requests.items():
            method = asked.get("method") if isinstance(asked, dict) else None
            params = asked.get("params") if isinstance(asked, dict) else None
            mode = params.get("mode", "form") if isinstance(params, dict) and method == "elicitation/create" else None
            if not isinstance(method, str) or not isinstance(params, dict):
                return CANNOT_ASK
            if method == "sampling/createMessage" and "sampling" in self._capabilities:
                legacy_params = {name: params[name] for name in SAMPLING_KEYS if name in params}
            elif mode not in declared:
                return CANNOT_ASK
            elif mode == "form":
                legacy_params = {
                    "mode": "form",
                    "message": params.get("message"),
                    "requestedSchema": params.get("requestedSchema"),
                }
            else:
                # 2025-11-25 requires an elicitationId on URL mode; 2026-07-28 makes it optional.
                elicitation_id = params.get("elicitationId")
                legacy_params = {
                    "mode": "url",
                    "message": params.get("message"),
                    "url": params.get("url"),
                    "elicitationId": elicitation_id if isinstance(elicitation_id, str) else secrets.token_urlsafe(16),
                }
            answer = yield from self._ask(call, key, method, legacy_params, gone)
            if isinstance(answer, str):
                return answer
            answers[key] = answer
        return answers

    def _ask(
        self, call: LegacyCall, key: str, method: str, params: dict[str, Any], gone: threading.Event | None
    ) -> Generator[dict[str, Any], None, dict[str, Any] | str]:
        """Send one elicitation/create or sampling/createMessage and wait (bounded): its result, or why not."""
        what = ASKED_WHAT[method]
        with self._lock:
            if call.cancelled or self._closed:
                raise _Abandoned()
            waiting = sum(1 for outgoing in self._outgoing.values() if outgoing.method in ASKED_WHAT)
            if waiting >= MAX_PENDING_ELICITATIONS:
                # Each waiting form holds a table entry and (on HTTP) a stream: a client that
                # never answers cannot make the session hold more than this.
                return BUSY_FORMS
            request_id = self._outgoing_id(key)
            outgoing = self._outgoing[request_id] = Outgoing(method)
            call.waiting_on = request_id
        try:
            yield {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            answered = self._wait(outgoing, gone)
        finally:
            with self._lock:
                call.waiting_on = None
                self._outgoing.pop(request_id, None)  # from now on a late answer is unknown and ignored
        with self._lock:
            abandoned, closed = call.cancelled, self._closed
        if closed:
            raise _Abandoned()
        if abandoned or not answered:
            # Tell the client to take the form down: nobody will read its answer.
            reason = "the tool call was cancelled" if abandoned else f"the {what} timed out"
            yield {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": request_id, "reason": reason},
            }
            if abandoned:
                raise _Abandoned()
            return f"The {what} was not answered in time; nothing was changed."
        response = outgoing.response
        malformed = f"The client's answer to the {what} was malformed; nothing was changed."
        if response is None:
            return malformed
        if "error" in response:
            self._log(f"legacy: the client refused {method} {request_id}: {repr(response['error'])[:200]}")
            return f"The client could not answer the {what}; nothing was changed."
        result = response["result"]
        if method == "sampling/createMessage":
            # The core checks the content it needs; here only the shape, and only the
            # result's own fields go on (no _meta from the client reaches the core).
            if not isinstance(result.get("content"), (dict, list)):
                return malformed
            return {name: result[name] for name in SAMPLING_RESULT_KEYS if name in result}
        if result.get("action") not in ELICIT_ACTIONS or (
            "content" in result and not isinstance(result["content"], dict)
        ):
            return malformed
        answer = {"action": result["action"]}
        if "content" in result:
            answer["content"] = result["content"]
        return answer

    def _wait(self, outgoing: Outgoing, gone: threading.Event | None) -> bool:
        """Wait for the client's answer at most the session's timeout: True if answered (or woken).

        With `gone`, the wait also ends when the carrier's peer goes away (_Abandoned):
        a client that disconnects mid-form leaves no waiter behind.
        """
        deadline = time.monotonic() + self._timeout
        while True:
            remaining = deadline - time.monotonic()
            step = remaining if gone is None else min(remaining, GONE_POLL_SECONDS)
            if outgoing.answered.wait(max(step, 0.0)):
                return True
            if gone is not None and gone.is_set():
                raise _Abandoned()
            if remaining <= 0:
                return False

    def close(self) -> None:
        """End the session: no new call starts, and every waiting call wakes (none is answered)."""
        with self._lock:
            self._closed = True
            for outgoing in self._outgoing.values():
                outgoing.answered.set()

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._closed


class LegacyStdioSession(LegacySession):
    """The stdio carrier: one process's legacy session; feed() every stdin line, close() at the end."""

    PUSH = True

    def __init__(
        self,
        server: frame.Server,
        principal: str,
        write: Callable[[bytes], None],
        log: Callable[[str], None] = main.stderr_log,
        elicitation_timeout: float = ELICITATION_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(server, principal, log, elicitation_timeout)
        self._write = write
        self._write_lock = threading.Lock()  # one whole line at a time, from any thread
        self._slots = threading.BoundedSemaphore(MAX_CONCURRENT_LEGACY_CALLS)
        self._workers: list[threading.Thread] = []  # every call's worker not yet seen finished (the reader's own list)

    def feed(self, line: bytes) -> None:
        """Serve one stdin line: core traffic exactly as the core answers it, legacy traffic here."""
        try:
            message = frame.decode_message(line)
        except main.McpError as exc:
            # The core's answer to a line it cannot decode (handle_bytes), without decoding it twice.
            self._send(main.error_response(None, exc))
            return
        self.feed_message(message)

    def feed_message(self, message: Any) -> None:
        """Serve one stdin message a transport has already decoded (feed() without the decoding)."""
        if isinstance(message, dict) and self.version is not None and "method" not in message:
            self.on_response(message)
            return
        request = self._legacy_request(message)
        if request is None:
            # Decoded once: handle() is handle_bytes() without the decoding.
            response = self.server.handle(message, self.principal)
            if response is not None:
                self._send(response)
        elif request.id is None:
            self.on_notification(request)
        elif request.method == "tools/call":
            self._start_call(request)
        else:
            self._send(self.answer(request))

    def _legacy_request(self, message: Any) -> main.Envelope | None:
        """A valid legacy request or notification for this adapter, or None for the core."""
        if not isinstance(message, dict) or is_modern(message):
            return None
        try:
            request = main.parse_envelope(message)
        except main.McpError:
            return None  # the core reports envelope errors, in either era
        if self.version is None and not (request.method == "initialize" and request.id is not None):
            return None  # before initialize, legacy-shaped traffic gets the core's answers
        return request

    def _start_call(self, request: main.Envelope) -> None:
        """Run a legacy tools/call on a worker thread, or refuse it at once (duplicate id, busy)."""
        assert request.id is not None
        with self._lock:
            duplicate = request.id in self._calls
        if duplicate:
            self._send(
                main.error_response(
                    request.id,
                    main.McpError(main.INVALID_REQUEST, "Invalid Request: id is in use by a call in progress"),
                )
            )
            return
        if not self._slots.acquire(blocking=False):
            self._send({"jsonrpc": "2.0", "id": request.id, "result": tool_error(BUSY)})
            return
        call = self.begin_call(request.id)
        if call is None:  # closed meanwhile
            self._slots.release()
            return
        call.thread = threading.Thread(
            target=self._run_call, args=(call, request.params), name="legacy-tools-call", daemon=True
        )
        self._workers = [worker for worker in self._workers if worker.is_alive()]
        self._workers.append(call.thread)
        call.thread.start()

    def _run_call(self, call: LegacyCall, params: Any) -> None:
        """Worker: drive the call's steps on stdout; its one response unless it was cancelled or the session closed."""
        steps = self.run_call(call, params)
        response: dict[str, Any] | None = None
        try:
            message = next(steps)
            while True:
                if not self._send_from_worker(message):
                    steps.close()  # the client is gone: abandon the call, nothing pending stays
                    break
                message = next(steps)
        except StopIteration as stop:
            response = stop.value
        send = self.end_call(call) and response is not None
        self._slots.release()
        if send:
            assert response is not None
            self._send_from_worker(response)

    def _push(self, message: dict[str, Any]) -> bool:
        return self._send_from_worker(message)

    def _send(self, message: dict[str, Any]) -> None:
        self._send_bytes(frame.encode_message(message))

    def _send_bytes(self, body: bytes) -> None:
        with self._write_lock:
            self._write(body + b"\n")

    def _send_from_worker(self, message: dict[str, Any]) -> bool:
        """Send from a worker thread; a gone client is logged (the reader sees it too), not raised."""
        try:
            self._send(message)
            return True
        except (OSError, ValueError):
            self._log("legacy: could not write to the client; it is gone")
            return False

    def close(self) -> None:
        """End the session: wake every waiting call (none is answered) and let the workers finish."""
        super().close()
        # Every worker, not only the calls still in flight: one whose call has ended may still be
        # writing its response. Left running, it can hold stdout's lock when the interpreter
        # finalizes at EOF, which Python ends with a fatal error (SIGABRT) instead of status 0.
        for worker in self._workers:
            worker.join(CLOSE_GRACE_SECONDS)
