"""Streamable HTTP for the core: `POST /mcp`, one JSON response per request.

The core (`frame.Server.handle`) decides every protocol outcome; this module decides only
what happens before a message exists and how an outcome travels over HTTP:

    the endpoint path and method, DNS rebinding (Host, Origin), the bearer token, the
    body's framing, size and media type, the bounds on connections and time;
    the MCP-Protocol-Version / Mcp-Method / Mcp-Name header rule (passed to the core as
    its per-transport check, -32020);
    the HTTP status of each JSON-RPC outcome (HTTP_STATUS_FOR_ERROR).

Other pages (the URL-mode connect pages, code/connect.py) plug in under their own path
prefix through the `Pages` protocol. Standard library only.
"""

from __future__ import annotations

import base64
import binascii
import collections
import hashlib
import hmac
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import frame
import http_server
import main
from http_server import header_values

__all__ = [
    "BearerTokens",
    "ENDPOINT",
    "HttpPolicy",
    "JSON",
    "LOOPBACK_NAMES",
    "McpEndpoint",
    "REQUEST_TIMEOUT_SECONDS",
    "RefusalLog",
    "SSE",
    "Throttled",
    "header_values",
    "is_loopback",
    "json_error_body",
    "listen",
    "may_be_legacy",
    "sse_event",
]

ENDPOINT = "/mcp"
REQUEST_TIMEOUT_SECONDS = http_server.BODY_TIMEOUT_SECONDS  # a request's body must arrive in this
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")

_INTEGER_RE = re.compile(r"-?[0-9]{1,20}")
_LOCAL_ORIGIN_RE = re.compile(r"https?://(localhost|127\.0\.0\.1|\[::1\])(:[0-9]{1,5})?")

Headers = Sequence[tuple[str, str]]

REFUSAL_LOG_WINDOW_SECONDS = 60.0  # one line per (peer address, reason) in this long
MAX_REFUSAL_LINES_PER_WINDOW = 20  # lines for every peer together in one window; the rest are counted
MAX_REFUSAL_KEYS = 1024  # (peer address, reason) pairs remembered; the oldest is forgotten first

# HTTP status for each JSON-RPC error code (the outcome table in docs/security.md).
HTTP_STATUS_FOR_ERROR: dict[int, int] = {
    frame.PARSE_ERROR: 400,
    main.INVALID_REQUEST: 400,
    main.METHOD_NOT_FOUND: 404,
    main.INVALID_PARAMS: 400,
    main.INTERNAL_ERROR: 500,
    frame.HEADER_MISMATCH: 400,
    main.MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    main.UNSUPPORTED_PROTOCOL_VERSION: 400,
}


# Token guessing. Every token presented is compared (hashed, then in constant time against
# every known one), so a right token is served whatever others sent from its address: on
# one machine, or behind a proxy, every client shares an address, and a neighbour sending
# wrong tokens must not lock the right one out. What is budgeted is wrong tokens:
#   per peer (an IPv4 address, an IPv6 /64): MAX_FREE_GUESSES are judged at once, then one
#     per wait, GUESS_BACKOFF_SECONDS doubling per further wrong token up to the cap;
#   for the whole server: SERVER_GUESS_BURST at once, then SERVER_GUESSES_PER_SECOND,
#     however many addresses they come from (127.0.0.0/8 alone holds sixteen million).
# A wrong token over either budget is refused with 429 and counts against neither.
MAX_FREE_GUESSES = 10
GUESS_BACKOFF_SECONDS = 1.0  # the first wait; it doubles per further wrong token ...
MAX_GUESS_BACKOFF_SECONDS = 60.0  # ... up to this
GUESS_MEMORY_SECONDS = 600.0  # a peer's wrong tokens are forgotten this long after its last one
MAX_GUESSING_PEERS = 4096  # peers remembered at once; the least recently wrong one is forgotten first
SERVER_GUESS_BURST = 100  # wrong tokens the server judges at once, from every peer together ...
SERVER_GUESSES_PER_SECOND = 20.0  # ... and then per second


class Throttled(Exception):
    """A wrong token over a budget; `retry_after` seconds until the next wrong one is judged."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(retry_after)
        self.retry_after = retry_after


class GuessThrottle:
    """The wrong-token budgets, per peer and for the whole server: bounded memory, an injected clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # peer -> (wrong, until)
        self._peers: collections.OrderedDict[str, tuple[int, float]] = collections.OrderedDict()
        self._bucket = float(SERVER_GUESS_BURST)  # wrong tokens the server may judge now
        self._filled = clock()

    def failed(self, peer: str) -> None:
        """Count a wrong token from `peer` against both budgets; Throttled, counting nothing, when over either."""
        now = self._clock()
        wrong, until = self._peers.get(peer, (0, now))
        if until > now:
            raise Throttled(math.ceil(until - now))
        # Rotating source addresses: each new one brings its own free guesses, so the
        # server as a whole judges no more than its bucket holds.
        self._bucket = min(
            float(SERVER_GUESS_BURST), self._bucket + max(0.0, now - self._filled) * SERVER_GUESSES_PER_SECOND
        )
        self._filled = now
        if self._bucket < 1:
            raise Throttled(math.ceil((1 - self._bucket) / SERVER_GUESSES_PER_SECOND))
        self._bucket -= 1
        if now - until > GUESS_MEMORY_SECONDS:
            wrong = 0  # quiet long enough: a fresh start
        wrong += 1
        over = wrong - MAX_FREE_GUESSES + 1
        wait = 0.0 if over <= 0 else min(MAX_GUESS_BACKOFF_SECONDS, GUESS_BACKOFF_SECONDS * 2 ** min(over - 1, 32))
        self._peers.pop(peer, None)
        self._peers[peer] = (wrong, now + wait)  # most recent last
        while len(self._peers) > MAX_GUESSING_PEERS:
            self._peers.popitem(last=False)

    def __len__(self) -> int:
        return len(self._peers)


def peer_key(address: str) -> str:
    """The throttled unit for a peer address: the IPv4 address (also when mapped, ::ffff:a.b.c.d), else its IPv6 /64."""
    if ":" not in address:
        return address
    import ipaddress

    try:
        ip = ipaddress.IPv6Address(address.split("%")[0])
    except ValueError:
        return address
    # A dual-stack listener (--host ::) sees each IPv4 client as ::ffff:a.b.c.d; as a /64
    # they would all be one peer, every IPv4 client sharing one guesser's budget.
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    # One IPv6 host usually holds a whole /64: per address, it could guess without limit.
    return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))


class BearerTokens:
    """Who is asking: bearer token -> principal, compared in constant time; wrong tokens budgeted (GuessThrottle)."""

    def __init__(self, tokens: Mapping[str, str], clock: Callable[[], float] = time.monotonic) -> None:
        # Digests, not tokens, are compared: equal lengths, so compare_digest leaks nothing.
        self._digests = [(name, hashlib.sha256(token.encode("utf-8")).digest()) for name, token in tokens.items()]
        self.throttle = GuessThrottle(clock)
        self._lock = threading.Lock()

    def principal_from(self, token: str, peer: str) -> str | None:
        """principal(token) for a request from `peer`: a right token's principal always; else None, or Throttled."""
        # A shared address (one machine, a proxy): a right token is never refused for what
        # others sent; wrong ones, once judged MAX_FREE_GUESSES times, wait their turn.
        found = self.principal(token)
        if found is None:
            with self._lock:
                self.throttle.failed(peer_key(peer))
        return found

    def principal(self, token: str) -> str | None:
        """The principal holding `token`, or None; constant time over every entry."""
        given = hashlib.sha256(token.encode("utf-8", "replace")).digest()
        found = None
        for name, known in self._digests:
            # No early exit: the timing says nothing about which token came close.
            if hmac.compare_digest(given, known):
                found = name
        return found


# The body field each method's Mcp-Name header mirrors.
NAME_FIELD = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def header_check(headers: Headers, tools: Mapping[str, Any] | None = None) -> frame.Check:
    """The core's per-transport check for this request: its MCP headers must match the body.

    With `tools`, a tools/call must also carry a matching `Mcp-Param-{H}` header for each
    argument its tool annotates with `x-mcp-header: H`.
    """

    def check(request: main.Envelope, meta: main.RequestMeta) -> None:
        # A proxy or gateway routes on headers; a body that says something else would let a
        # request be authorized as one thing and executed as another.
        def only(name: str) -> str:
            values = header_values(headers, name)
            if len(values) != 1:
                raise main.McpError(frame.HEADER_MISMATCH, f"Header mismatch: exactly one {name} header is required")
            return values[0]

        if only("MCP-Protocol-Version") != meta.protocol_version:
            raise main.McpError(frame.HEADER_MISMATCH, "Header mismatch: MCP-Protocol-Version does not match the body")
        if only("Mcp-Method") != request.method:
            raise main.McpError(frame.HEADER_MISMATCH, "Header mismatch: Mcp-Method does not match the body")
        field = NAME_FIELD.get(request.method)
        if field is not None and decode_header_value(only("Mcp-Name")) != request.params.get(field):
            raise main.McpError(frame.HEADER_MISMATCH, "Header mismatch: Mcp-Name does not match the body")
        name = request.params.get("name")
        # Only a string can name a tool; a list or object here must not reach a dict lookup.
        tool = (tools or {}).get(name) if request.method == "tools/call" and isinstance(name, str) else None
        if tool is not None:
            check_param_headers(headers, tool.descriptor, request.params.get("arguments"))

    return check


def check_param_headers(headers: Headers, descriptor: Mapping[str, Any], arguments: Any) -> None:
    """Each `x-mcp-header` argument must be mirrored, exactly once and equal, in `Mcp-Param-{H}`; else -32020."""
    properties = (descriptor.get("inputSchema") or {}).get("properties") or {}
    values = arguments if isinstance(arguments, dict) else {}
    for name, schema in properties.items():
        header = schema.get("x-mcp-header") if isinstance(schema, dict) else None
        if not isinstance(header, str):
            continue
        sent = header_values(headers, "Mcp-Param-" + header)
        value = values.get(name)
        # Routed on the header, executed on the body: the two must say the same thing, and a
        # header for an absent value (or a value without its header) is a mismatch too.
        if value is None and not sent:
            continue
        if value is None or len(sent) != 1 or not header_matches(decode_header_value(sent[0]), value):
            raise main.McpError(frame.HEADER_MISMATCH, f"Header mismatch: Mcp-Param-{header} does not match the body")


def header_matches(text: str, value: Any) -> bool:
    """A decoded header value against its body value: strings exactly, booleans as true/false, integers numerically."""
    if isinstance(value, bool):
        return text == ("true" if value else "false")
    if isinstance(value, int):
        # One decimal spelling only: int() alone would also take " 5", "+5" and "5_0".
        return _INTEGER_RE.fullmatch(text) is not None and int(text) == value
    return isinstance(value, str) and text == value


def decode_header_value(value: str) -> str:
    """Decode a `=?base64?...?=` header value strictly (canonical base64, UTF-8), or -32020."""
    if not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    encoded = value[len("=?base64?") : -len("?=")]
    try:
        decoded = base64.b64decode(encoded, validate=True)
        if base64.b64encode(decoded).decode("ascii") != encoded:
            raise ValueError("non-canonical base64")
        return decoded.decode("utf-8")
    except (ValueError, binascii.Error):
        raise main.McpError(frame.HEADER_MISMATCH, "Header mismatch: invalid base64 header value") from None


def answer(
    server: frame.Server, raw: bytes, principal: str, headers: Headers, notify: frame.Notify | None = None
) -> tuple[int, bytes | None]:
    """One POSTed body through the core: (HTTP status, response body or None for 202)."""
    try:
        message = frame.decode_message(raw)
    except main.McpError as exc:
        return HTTP_STATUS_FOR_ERROR[exc.code], frame.encode_message(main.error_response(None, exc))
    response = server.handle(message, principal, header_check(headers, server.tools), notify)
    if response is None:
        method = message.get("method") if isinstance(message, dict) else None
        if isinstance(method, str) and not method.startswith("notifications/"):
            # An id-less request never runs; on HTTP the sender is told so (stdio stays silent).
            refusal = main.McpError(main.INVALID_REQUEST, "Invalid Request: a request needs an id")
            return 400, frame.encode_message(main.error_response(None, refusal))
        return 202, None
    return status_of(response), frame.encode_message(response)


def status_of(response: dict[str, Any] | None) -> int:
    """The HTTP status of one core response: 202 for none, 200 for a result, else by error code."""
    if response is None:
        return 202
    error = response.get("error")
    return 200 if error is None else HTTP_STATUS_FOR_ERROR[error["code"]]


class Pages(Protocol):
    """Pages served beside the endpoint under their own prefixes (code/web_pages.py)."""

    prefix: str  # e.g. "/connect/"
    max_body: int  # the largest form body accepted

    def owns(self, path: str) -> bool:
        """True when `path` belongs to these pages."""
        ...

    def handle(
        self, method: str, path: str, headers: Headers, body: bytes, peer: str = ""
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request under `prefix` from `peer` (its address) to (status, headers, body)."""
        ...


class HttpRefusal(Exception):
    """An HTTP-layer refusal (before any JSON-RPC message exists): status, message, headers."""

    def __init__(self, status: int, message: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = list(headers)


class RefusalLog:
    """HTTP refusals on the operator's log: one line each with the status, the reason and the peer; rate-limited.

    A client sees why it was refused; the operator sees it too, and a flood cannot fill
    the log: one line per (peer address, reason) per REFUSAL_LOG_WINDOW_SECONDS, at most
    MAX_REFUSAL_LINES_PER_WINDOW lines per window for all peers together (many addresses,
    an IPv6 /64, count together), and the rest counted in one line when the next window
    starts. MAX_REFUSAL_KEYS bounds the memory. The reason is the server's own message:
    never a header, a token, a path or a body the client sent.
    """

    def __init__(self, log: Callable[[str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.clock = clock
        self.lock = threading.Lock()
        self.last: collections.OrderedDict[tuple[str, str], float] = collections.OrderedDict()
        self.window: float | None = None
        self.lines = 0
        self.quiet = 0  # refusals in this window that got no line

    def __call__(self, peer: tuple[str, int] | None, status: int, reason: str) -> None:
        """Log one refusal, or count it when its peer and reason were logged within the window or the window is full."""
        address = peer[0] if peer else "unknown"
        key = (address, reason)
        with self.lock:
            now = self.clock()
            if self.window is None or now - self.window >= REFUSAL_LOG_WINDOW_SECONDS:
                if self.quiet:
                    self.log(
                        f"refused {self.quiet} more HTTP request(s) in the last {REFUSAL_LOG_WINDOW_SECONDS:g} s "
                        "without a line each "
                        f"(one line per peer and reason, at most {MAX_REFUSAL_LINES_PER_WINDOW} "
                        f"per {REFUSAL_LOG_WINDOW_SECONDS:g} s)"
                    )
                self.window, self.lines, self.quiet = now, 0, 0
            seen = self.last.get(key)
            if (
                seen is not None and now - seen < REFUSAL_LOG_WINDOW_SECONDS
            ) or self.lines >= MAX_REFUSAL_LINES_PER_WINDOW:
                self.quiet += 1
                return
            self.last[key] = now
            self.last.move_to_end(key)
            while len(self.last) > MAX_REFUSAL_KEYS:
                self.last.popitem(last=False)
            self.lines += 1
            self.log(f"refused HTTP {status} to {address}: {reason}")


class HttpPolicy:
    """Who may call (tokens, or --no-auth) and from where (Host, Origin)."""

    def __init__(
        self,
        tokens: dict[str, str],
        no_auth_principal: str | None,
        allowed_hosts: frozenset[str] | None,
        allowed_origins: frozenset[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tokens = BearerTokens(tokens, clock)
        self.no_auth_principal = no_auth_principal
        self.allowed_hosts = allowed_hosts
        self.allowed_origins = allowed_origins

    def principal(self, headers: Headers, peer: str | None = None) -> str:
        """The authenticated principal for this request, or a 401 refusal (429: too many wrong tokens from `peer`)."""
        if self.no_auth_principal is not None:
            return self.no_auth_principal
        values = header_values(headers, "authorization")
        scheme, _, token = values[0].partition(" ") if len(values) == 1 else ("", "", "")
        if scheme.lower() != "bearer" or not token.strip():
            found = None  # no token at all is not a guess
        elif peer is None:
            found = self.tokens.principal(token.strip())
        else:
            try:
                found = self.tokens.principal_from(token.strip(), peer)
            except Throttled as wait:
                raise HttpRefusal(
                    429, "Too Many Requests: too many wrong tokens; try again later",
                    [("Retry-After", str(wait.retry_after))],
                ) from None  # fmt: skip
        if found is None:
            raise HttpRefusal(401, "Unauthorized: a valid bearer token is required", [("WWW-Authenticate", "Bearer")])
        return found

    def check_host(self, headers: Headers) -> None:
        """DNS rebinding: the Host must be one of our loopback names (when bound to loopback)."""
        # A web page on evil.example whose name now resolves to 127.0.0.1 reaches us
        # with its own name in Host: refuse it.
        if self.allowed_hosts is not None:
            hosts = header_values(headers, "host")
            if len(hosts) != 1 or hosts[0].lower() not in self.allowed_hosts:
                raise HttpRefusal(403, "Forbidden: Host is not this server's loopback address")

    def check_origin(self, headers: Headers) -> None:
        """DNS rebinding and cross-site calls: Host checked, and any Origin must be a local page."""
        self.check_host(headers)
        origins = header_values(headers, "origin")
        if not origins:
            return  # not a browser (or a same-origin GET): nothing to check
        origin = origins[0].lower()
        if len(origins) != 1 or not (_LOCAL_ORIGIN_RE.fullmatch(origin) or origin in self.allowed_origins):
            raise HttpRefusal(403, "Forbidden: Origin is not allowed")


def may_be_legacy(request: http_server.Request) -> bool:
    """Cheap, before the body is decoded: might this be a 2025-11-25 request? (a superset: legacy_http decides)"""
    # The modern hot path has a session id, another era's version header and an
    # `initialize` all absent, so it never reaches (nor loads) the legacy router.
    return (
        bool(header_values(request.headers, "mcp-session-id"))
        or any(
            version not in main.SUPPORTED_VERSIONS for version in header_values(request.headers, "mcp-protocol-version")
        )
        or b"initialize" in request.body
    )


def accepted_ranges(headers: Headers) -> frozenset[str] | None:
    """The media ranges Accept admits with a non-zero q (lower case), or None without an Accept header."""
    values = header_values(headers, "accept")
    if not values:
        return None
    admitted = set()
    for media_range in ",".join(values).split(","):
        media, *params = [part.strip().lower() for part in media_range.split(";")]
        q = next((p[2:].strip() for p in params if p.startswith("q=")), "1")
        try:
            if float(q) > 0:
                admitted.add(media)
        except ValueError:
            continue
    return frozenset(admitted)


def admits(ranges: frozenset[str] | None, media_type: str) -> bool:
    """True when `ranges` name `media_type` exactly, by its type's wildcard or by */*."""
    return ranges is not None and not ranges.isdisjoint((media_type, media_type.split("/")[0] + "/*", "*/*"))


def json_error_body(message: str) -> bytes:
    """An id-less JSON-RPC error: what every HTTP-layer refusal carries (never a traceback)."""
    return frame.encode_message(main.error_response(None, main.McpError(main.INVALID_REQUEST, message)))


JSON = [("Content-Type", "application/json")]
SSE = [("Content-Type", "text/event-stream"), ("Cache-Control", "no-store")]


def sse_event(data: bytes) -> bytes:
    """One Server-Sent Event carrying one JSON-RPC message (single-line JSON, so one data line)."""
    return b"event: message\ndata: " + data + b"\n\n"


_Legacy = Callable[
    [http_server.Request, str], http_server.Response | http_server.StreamResponse | None
]  # a legacy session router


class McpEndpoint:
    """The HTTP application: POST /mcp to the core, the pages' prefix to the pages, nothing else."""

    def __init__(
        self,
        server: frame.Server,
        policy: HttpPolicy,
        pages: Pages | None = None,
        mcp_endpoint: bool = True,
        refused: RefusalLog | None = None,
        legacy: _Legacy | None = None,
    ) -> None:
        self.server = server
        self.policy = policy
        self.pages = pages  # the connect pages under their prefix, when served here
        self.mcp_endpoint = mcp_endpoint  # False: a pages-only listener (serve --stdio --publish)
        self.refused = refused  # told of each HTTP-layer refusal (status, reason, peer)
        # 2025-11-25 sessions beside the modern path (code/legacy_http.py): given an
        # authenticated request, its legacy answer, or None for the modern path.
        self.legacy = legacy

    def is_page(self, target: str | None) -> bool:
        """True when `target` belongs to the pages."""
        if self.pages is None or target is None:
            return False
        owns = getattr(self.pages, "owns", None)  # several sets of pages (web_pages.PageSet) say which paths are theirs
        return owns(target) if owns is not None else target.startswith(self.pages.prefix)

    def answers_at_once(self, request: http_server.Request) -> bool:
        """True for a request this app answers without waiting on anything (given a store that never waits).

        A modern POST, or a legacy one without a session (initialize, or a refusal): the
        core's work and nothing else. A legacy session's request may hold a form open and
        a page may be slow to render, so those go to the engine's workers.
        """
        return (
            request.method == "POST"
            and not self.is_page(request.target)
            and not header_values(request.headers, "mcp-session-id")
        )

    def body_limit(self, method: str, target: str, headers: Headers) -> int:
        """The largest body accepted on this route (checked by the engine before reading it)."""
        if self.is_page(target):
            assert self.pages is not None
            return self.pages.max_body
        return frame.MAX_MESSAGE_BYTES

    def refuse(
        self, status: int, message: str, target: str | None, headers: Sequence[tuple[str, str]] = ()
    ) -> http_server.Response:
        """A refusal in the route's own language: an HTML page under the pages, JSON elsewhere."""
        if self.is_page(target):
            assert self.pages is not None
            refusal = getattr(self.pages, "refusal", None)
            if refusal is not None:
                page_status, page_headers, body = refusal(status, message)
                return http_server.Response(page_status, [*page_headers, *headers], body)
        return http_server.Response(status, [*JSON, *headers], json_error_body(message))

    def __call__(self, request: http_server.Request) -> http_server.Response | http_server.StreamResponse:
        """One complete request to its response; client input never raises out of here."""
        try:
            if self.is_page(request.target):
                return self.page(request)
            return self.mcp(request)
        except HttpRefusal as refusal:
            if self.refused is not None:
                self.refused(request.peer, refusal.status, refusal.message)
            # Refused at the HTTP layer: the rest of the stream is not trusted.
            return self.refuse(
                refusal.status, refusal.message, request.target, [*refusal.headers, ("Connection", "close")]
            )

    def page(self, request: http_server.Request) -> http_server.Response:
        """A connect page: Host and Origin here, the rest in the pages."""
        assert self.pages is not None
        self.policy.check_origin(request.headers)
        if header_values(request.headers, "transfer-encoding"):
            raise HttpRefusal(400, "Bad Request: send a form with one plain Content-Length")
        status, headers, body = self.pages.handle(
            request.method, request.target, request.headers, request.body, request.peer[0]
        )
        return http_server.Response(status, headers, body)

    def mcp(self, request: http_server.Request) -> http_server.Response | http_server.StreamResponse:
        """The HTTP-layer checks in order, then the body through the core."""
        headers = request.headers
        self.policy.check_origin(headers)
        if request.target.partition("?")[0] != ENDPOINT or not self.mcp_endpoint:
            raise HttpRefusal(404, f"Not Found: the MCP endpoint is {ENDPOINT}")
        if request.method == "DELETE" and self.legacy is not None and header_values(headers, "mcp-session-id"):
            ended = self.legacy(request, self.policy.principal(headers, request.peer[0]))  # a legacy session's end
            if ended is not None:
                return ended
        if request.method != "POST":
            raise HttpRefusal(405, "Method Not Allowed: use POST", [("Allow", "POST")])
        principal = self.policy.principal(headers, request.peer[0])
        # Chunked bodies have no size up front (the engine refuses them); a body without a
        # length is refused here rather than read as empty.
        if not header_values(headers, "content-length"):
            raise HttpRefusal(411, "Length Required: send the body with a Content-Length")
        types = header_values(headers, "content-type")
        if len(types) != 1 or types[0].split(";")[0].strip().lower() != "application/json":
            raise HttpRefusal(415, "Unsupported Media Type: send application/json")
        accepted = accepted_ranges(headers)  # read once: JSON is required, an event stream optional
        if accepted is not None and not admits(accepted, "application/json"):
            raise HttpRefusal(406, "Not Acceptable: this server answers with application/json")
        if (
            self.legacy is not None
            and may_be_legacy(request)
            and (routed := self.legacy(request, principal)) is not None
        ):
            return routed
        mcp_headers = [(name, value) for name, value in headers if name != "authorization"]
        # A client that accepts an event stream may get notifications about its request
        # (progress, log messages) ahead of the response; one that does not, never does.
        events: list[dict[str, Any]] = []
        notify = events.append if admits(accepted, "text/event-stream") else None
        status, body = answer(self.server, request.body, principal, mcp_headers, notify)
        if events and body is not None:
            stream = b"".join(sse_event(frame.encode_message(event)) for event in events) + sse_event(body)
            return http_server.Response(status, SSE, stream)
        return http_server.Response(status, JSON if body is not None else [], body or b"")


def listen(
    host: str,
    port: int,
    endpoint: McpEndpoint,
    log: Callable[[str], None],
    request_timeout: float = REQUEST_TIMEOUT_SECONDS,
    store_waits: bool = True,
    refused: RefusalLog | None = None,
    sock: Any = None,
) -> http_server.HttpServer:
    """An engine serving `endpoint` on host:port (OSError if it cannot bind).

    With a store that never waits (`store_waits=False`: the memory store), the core's
    requests are answered on the engine's loop (`McpEndpoint.answers_at_once`); a store
    that may wait on a disk, a lock or a network keeps every request on a worker.
    """
    limits = http_server.Limits(
        head_timeout=min(http_server.HEAD_TIMEOUT_SECONDS, request_timeout), body_timeout=request_timeout
    )
    return http_server.HttpServer(
        endpoint,
        host,
        port,
        log=log,
        refuse=endpoint.refuse,
        body_limit=endpoint.body_limit,
        limits=limits,
        inline=None if store_waits else endpoint.answers_at_once,
        refused=refused,
        sock=sock,
    )


def is_loopback(host: str) -> bool:
    """True for localhost and loopback IP literals (127.0.0.0/8, ::1)."""
    if host.lower() in ("localhost", "127.0.0.1", "::1", "[::1]"):
        return True  # the usual spellings, without loading ipaddress for them
    import ipaddress  # only the HTTP transport needs it

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
