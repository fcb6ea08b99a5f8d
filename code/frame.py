"""The product's protocol frame: the lesson's Server with what real transports need.

code/main.py's `Server` is the lesson's frame: one dispatch table, one exception boundary,
`handle(message, principal)`. Serving real hosts adds, without copying any of it:

    - bytes: `decode_message` (-32700, the message-size limit) and `encode_message`;
    - transport hooks: a check run after the `_meta` checks and before the version check
      (the HTTP headers must match the body), and `notify`, which carries progress and log
      notifications ahead of a response where the transport can;
    - an extension registry (`add_method`), whose capabilities discover reports;
    - the answer to `initialize` (a 2025-11-25 client's first message), naming the versions;
    - every structured tool result also as its serialized JSON, in a text block after the
      tool's own text, so a host that gives its model the text alone loses no field;
    - a key ring: the newest key signs, every listed key verifies (rotation without downtime);
    - `notes_server`, which builds a server over any store of the family.

A transport's hooks for one request live in a context variable for the duration of that
`handle()` call, so concurrent requests on other threads never see them. Standard library only.
"""

from __future__ import annotations

import contextvars
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

import confirmations as confirming
import main
import stores

__all__ = [
    "MAX_MESSAGE_BYTES",
    "PARSE_ERROR",
    "HEADER_MISMATCH",
    "Notify",
    "Check",
    "context",
    "decode_message",
    "encode_message",
    "Server",
    "notes_server",
]

MAX_MESSAGE_BYTES = 64 * 1024  # one JSON-RPC message (stdio line, HTTP body)
PARSE_ERROR = -32700  # bytes that are not JSON
HEADER_MISMATCH = -32020  # HTTP headers that do not match the body (2026-07-28's reserved range)

Notify = Callable[[dict[str, Any]], None]  # sends one JSON-RPC notification to the client
Check = Callable[[main.Envelope, main.RequestMeta], None]  # a transport's own check, e.g. HTTP headers


class Context(NamedTuple):
    """What the transport gave one request: its check, its notification channel, its progress token."""

    check: Check | None = None
    notify: Notify | None = None
    progress_token: str | int | None = None


_CONTEXT: contextvars.ContextVar[Context] = contextvars.ContextVar("notes_mcp_request", default=Context())


def context() -> Context:
    """The current request's transport context (empty outside a handle() call)."""
    return _CONTEXT.get()


# Built once: json.loads/dumps with options build a new decoder or encoder on every call.
_DECODER = json.JSONDecoder(parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, check_circular=False)


def decode_message(raw: bytes) -> Any:
    """Bytes to a JSON value, or -32700; size is checked first so a flood is cheap to refuse."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise main.McpError(main.INVALID_REQUEST, f"Invalid Request: message larger than {MAX_MESSAGE_BYTES} bytes")
    try:
        return _DECODER.decode(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        # RecursionError: `[[[[...` nested thousands deep must be a parse error, not a crash.
        raise main.McpError(PARSE_ERROR, "Parse error: invalid JSON") from None


def encode_message(message: dict[str, Any]) -> bytes:
    """Compact JSON, ASCII-escaped: one line, no embedded newline, no lone-surrogate crash."""
    return _COMPACT.encode(message).encode("ascii")


class KeyRing(main.StateSigner):
    """The lesson's signer over several keys: the first signs, every listed key verifies."""

    def __init__(self, keys: Sequence[bytes], ttl: float = main.DEFAULT_STATE_TTL_SECONDS) -> None:
        if isinstance(keys, (bytes, bytearray)) or not keys:
            raise ValueError("keys must be a non-empty list of byte strings")
        super().__init__(keys[0], ttl)
        for key in keys[1:]:
            if not isinstance(key, (bytes, bytearray)) or len(key) < main.MIN_KEY_BYTES:
                raise ValueError(f"every signing key must be at least {main.MIN_KEY_BYTES} bytes")
            self.keys.setdefault(self.key_id(bytes(key)), bytes(key))


def progress_token(params: Any) -> str | int | None:
    """The request's `_meta.progressToken` when it is a legal token (string or integer), else None."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str) or (isinstance(token, int) and not isinstance(token, bool)) else None


ProductHandler = Callable[["Server", main.Envelope, main.RequestMeta, str, "Notify | None"], dict[str, Any]]


class Server(main.Server):
    """The lesson's Server plus bytes, transport hooks, extensions, initialize's answer and the confirmation cycle."""

    def __init__(self, services: main.Services) -> None:
        # The log is looked up on each line, so replacing server.log reaches every tool built
        # from server.services.
        self.log = services.log
        super().__init__(services._replace(log=self.say))
        self.confirmations = confirming.Confirmations(self.services)
        self.methods["tools/call"] = call_tool
        self._capabilities: dict[str, dict[str, Any]] = {}  # what added methods declare (prompts, ...)

    # The services, by name, for the modules that wire tools and transports.
    notes = property(lambda self: self.services.notes)
    policy = property(lambda self: self.services.policy)
    clock = property(lambda self: self.services.clock)

    def say(self, line: str) -> None:
        """Write one line to the server's log as it is now."""
        self.log(line)

    def add_method(self, method: str, handler: ProductHandler, capability: str | None = None) -> None:
        """Add one method to the dispatch table; `capability` (e.g. "prompts") is reported by discover from then on."""
        if method in self.methods:
            raise ValueError(f"method {method!r} is already handled")
        self.methods[method] = lambda server, request, meta, principal: handler(
            self, request, meta, principal, context().notify
        )
        if capability is not None:
            self._capabilities.setdefault(capability, {})

    def capabilities(self) -> dict[str, Any]:
        """The lesson's capabilities and those of every added method."""
        return super().capabilities() | {name: dict(value) for name, value in self._capabilities.items()}

    def handle(
        self, message: Any, principal: str, check: Check | None = None, notify: Notify | None = None
    ) -> dict[str, Any] | None:
        """main.Server.handle, with this request's transport check and notification channel in force."""
        params = message.get("params") if isinstance(message, dict) else None
        token = _CONTEXT.set(Context(check, notify, progress_token(params)))
        try:
            return super().handle(message, principal)
        finally:
            _CONTEXT.reset(token)

    def read_meta(self, request: main.Envelope) -> main.RequestMeta:
        """`_meta` checked (-32602), then the transport's check (-32020), then the version (-32022)."""
        meta = main.read_meta(request.params)
        check = context().check
        if check is not None:
            check(request, meta)
        main.check_version(meta)
        return meta

    def unknown_method(self, method: str) -> main.McpError:
        """-32601; for `initialize` the message names the versions a 2025-11-25 client could use."""
        if method == "initialize":
            return main.McpError(
                main.METHOD_NOT_FOUND,
                "Method not found: initialize was removed in 2026-07-28; this server supports "
                + ", ".join(main.SUPPORTED_VERSIONS),
                {"supported": list(main.SUPPORTED_VERSIONS)},
            )
        return super().unknown_method(method)

    def handle_bytes(self, raw: bytes, principal: str, check: Check | None = None) -> bytes | None:
        """Bytes in, bytes out (None: no response): handle() with the JSON decoding and encoding."""
        try:
            message = decode_message(raw)
        except main.McpError as exc:
            return encode_message(main.error_response(None, exc))
        response = self.handle(message, principal, check)
        return None if response is None else encode_message(response)


def call_tool(server: main.Server, request: main.Envelope, meta: main.RequestMeta, principal: str) -> dict[str, Any]:
    """main.call_tool, with a complete result's structuredContent repeated as JSON in a last text block."""
    # The spec: a tool returning structured content SHOULD also return it serialized in a
    # TextContent block. Hosts that hand their model only the text (openai-agents, agno)
    # otherwise hide the fields the next call needs: a note's version, a confirmation token.
    result = main.call_tool(server, request, meta, principal)
    structured = result.get("structuredContent")
    if result.get("resultType") == "complete" and isinstance(structured, dict):
        serialized = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
        result["content"] = [*result.get("content", []), {"type": "text", "text": serialized}]
    return result


def notes_server(
    *,
    keys: Sequence[bytes],
    notes: stores.NotesStore,
    policy: main.AuthorizationPolicy,
    clock: Callable[[], float] = time.time,
    state_ttl: float = main.DEFAULT_STATE_TTL_SECONDS,
    log: Callable[[str], None] = main.stderr_log,
    replay: stores.NotesStore | main.MemoryReplayStore | None = None,
    tool: Callable[[main.Services], Any] = main.NotesDelete,
) -> Server:
    """A server serving notes_delete (`tool`: the lesson's, or the product's) over `notes`; `replay` defaults to the
    store itself."""
    # main.Services types its slots as the lesson's memory classes; the product puts any
    # store of the family there (stores.store_of reads it back as the product's Store).
    services = main.Services(
        policy=policy,
        signer=KeyRing(keys, state_ttl),
        notes=cast(main.MemoryNotesStore, notes),
        replay=cast(main.MemoryReplayStore, notes if replay is None else replay),
        clock=clock,
        log=log,
    )
    server = Server(services)
    server.add_tool(tool(server.services))
    return server
