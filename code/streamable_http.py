"""Streamable HTTP for the core: `POST /mcp`, one JSON response per request.

The core (`main.Server.handle`) decides every protocol outcome; this module decides only
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
import hashlib
import hmac
import re
import socket
import socketserver
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any, Protocol

import main

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
ENDPOINT = "/mcp"
MAX_HEADER_BYTES = 16 * 1024  # request line plus every header line, before the body
MAX_HEADER_COUNT = 64  # header lines in one request
MAX_CONCURRENT_CONNECTIONS = 64  # connection handler threads; one more gets 503 at once
REQUEST_TIMEOUT_SECONDS = 10.0  # a whole request (or an idle keep-alive gap) must arrive in this
LISTEN_BACKLOG = 128  # pending connections the kernel queues before accept (50+ clients at once)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")

_LOCAL_ORIGIN_RE = re.compile(r"https?://(localhost|127\.0\.0\.1|\[::1\])(:[0-9]{1,5})?")
_HEADER_NAME_RE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE_BAD_RE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")

Headers = Sequence[tuple[str, str]]

# HTTP status for each JSON-RPC error code (the outcome table in docs/security.md).
HTTP_STATUS_FOR_ERROR: dict[int, int] = {
    main.PARSE_ERROR: 400,
    main.INVALID_REQUEST: 400,
    main.METHOD_NOT_FOUND: 404,
    main.INVALID_PARAMS: 400,
    main.INTERNAL_ERROR: 500,
    main.HEADER_MISMATCH: 400,
    main.MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    main.UNSUPPORTED_PROTOCOL_VERSION: 400,
}


def header_values(headers: Headers, name: str) -> list[str]:
    """Every value of header `name` (names compared case-insensitively), in order."""
    return [value for key, value in headers if key.lower() == name.lower()]


class BearerTokens:
    """Who is asking: bearer token -> principal, compared in constant time."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        # Digests, not tokens, are compared: equal lengths, so compare_digest leaks nothing.
        self._digests = [(name, hashlib.sha256(token.encode("utf-8")).digest()) for name, token in tokens.items()]

    def principal(self, token: str) -> str | None:
        """The principal holding `token`, or None; constant time over every entry."""
        given = hashlib.sha256(token.encode("utf-8", "replace")).digest()
        found = None
        for name, known in self._digests:
            # No early exit: the timing says nothing about which token came close.
            if hmac.compare_digest(given, known):
                found = name
        return found


def header_check(headers: Headers) -> main.Check:
    """The core's per-transport check for this request: its MCP headers must match the body."""

    def check(request: main.Envelope, meta: main.RequestMeta) -> None:
        # A proxy or gateway routes on headers; a body that says something else would let a
        # request be authorized as one thing and executed as another.
        def only(name: str) -> str:
            values = header_values(headers, name)
            if len(values) != 1:
                raise main.McpError(main.HEADER_MISMATCH, f"Header mismatch: exactly one {name} header is required")
            return values[0]

        if only("MCP-Protocol-Version") != meta.protocol_version:
            raise main.McpError(main.HEADER_MISMATCH, "Header mismatch: MCP-Protocol-Version does not match the body")
        if only("Mcp-Method") != request.method:
            raise main.McpError(main.HEADER_MISMATCH, "Header mismatch: Mcp-Method does not match the body")
        if request.method == "tools/call":
            if decode_header_value(only("Mcp-Name")) != request.params.get("name"):
                raise main.McpError(main.HEADER_MISMATCH, "Header mismatch: Mcp-Name does not match the body")

    return check


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
        raise main.McpError(main.HEADER_MISMATCH, "Header mismatch: invalid base64 header value") from None


def answer(server: main.Server, raw: bytes, principal: str, headers: Headers) -> tuple[int, bytes | None]:
    """One POSTed body through the core: (HTTP status, response body or None for 202)."""
    try:
        message = main.decode_message(raw)
    except main.McpError as exc:
        return HTTP_STATUS_FOR_ERROR[exc.code], main.encode_message(main.error_response(None, exc))
    response = server.handle(message, principal, header_check(headers))
    if response is None:
        method = message.get("method") if isinstance(message, dict) else None
        if isinstance(method, str) and not method.startswith("notifications/"):
            # An id-less request never runs; on HTTP the sender is told so (stdio stays silent).
            refusal = main.McpError(main.INVALID_REQUEST, "Invalid Request: a request needs an id")
            return 400, main.encode_message(main.error_response(None, refusal))
        return 202, None
    return status_of(response), main.encode_message(response)


def status_of(response: dict[str, Any] | None) -> int:
    """The HTTP status of one core response: 202 for none, 200 for a result, else by error code."""
    if response is None:
        return 202
    error = response.get("error")
    return 200 if error is None else HTTP_STATUS_FOR_ERROR[error["code"]]


class Pages(Protocol):
    """Pages served beside the endpoint under their own prefix (the connect pages)."""

    prefix: str  # e.g. "/connect/"
    max_body: int  # the largest form body accepted

    def handle(self, method: str, path: str, headers: Headers, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request under `prefix` to (status, headers, body)."""
        ...


class HttpRefusal(Exception):
    """An HTTP-layer refusal (before any JSON-RPC message exists): status, message, headers."""

    def __init__(self, status: int, message: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = list(headers)


class ClientGone(Exception):
    """The peer closed the connection or let it idle past the deadline."""


class HttpPolicy:
    """Who may call (tokens, or --no-auth), from where (Host, Origin), and the time bound."""

    def __init__(
        self,
        tokens: dict[str, str],
        no_auth_principal: str | None,
        allowed_hosts: frozenset[str] | None,
        allowed_origins: frozenset[str],
        request_timeout: float,
    ) -> None:
        self.tokens = BearerTokens(tokens)
        self.no_auth_principal = no_auth_principal
        self.allowed_hosts = allowed_hosts
        self.allowed_origins = allowed_origins
        self.request_timeout = request_timeout

    def principal(self, headers: Sequence[tuple[str, str]]) -> str:
        """The authenticated principal for this request, or a 401 refusal."""
        if self.no_auth_principal is not None:
            return self.no_auth_principal
        values = header_values(headers, "authorization")
        scheme, _, token = values[0].partition(" ") if len(values) == 1 else ("", "", "")
        found = self.tokens.principal(token.strip())
        if scheme.lower() != "bearer" or found is None:
            raise HttpRefusal(401, "Unauthorized: a valid bearer token is required", [("WWW-Authenticate", "Bearer")])
        return found

    def check_origin(self, headers: Sequence[tuple[str, str]]) -> None:
        """DNS rebinding: the Host must be our loopback name and any Origin a local page."""
        # A web page on evil.example whose name now resolves to 127.0.0.1 reaches us
        # with its own name in Host and its own origin in Origin: refuse both.
        if self.allowed_hosts is not None:
            hosts = header_values(headers, "host")
            if len(hosts) != 1 or hosts[0].lower() not in self.allowed_hosts:
                raise HttpRefusal(403, "Forbidden: Host is not this server's loopback address")
        origins = header_values(headers, "origin")
        if not origins:
            return  # not a browser (or a same-origin GET): nothing to check
        origin = origins[0].lower()
        if len(origins) != 1 or not (_LOCAL_ORIGIN_RE.fullmatch(origin) or origin in self.allowed_origins):
            raise HttpRefusal(403, "Forbidden: Origin is not allowed")


def accepts_json(headers: Sequence[tuple[str, str]]) -> bool:
    """True when Accept is absent or admits application/json with a non-zero q."""
    values = header_values(headers, "accept")
    if not values:
        return True
    for media_range in ",".join(values).split(","):
        media, *params = [part.strip().lower() for part in media_range.split(";")]
        if media not in ("application/json", "application/*", "*/*"):
            continue
        q = next((p[2:].strip() for p in params if p.startswith("q=")), "1")
        try:
            if float(q) > 0:
                return True
        except ValueError:
            continue
    return False


def json_error_body(message: str) -> bytes:
    """An id-less JSON-RPC error: what every HTTP-layer refusal carries (never a traceback)."""
    return main.encode_message(main.error_response(None, main.McpError(main.INVALID_REQUEST, message)))


def http_response(
    status: int, body: bytes | None, headers: Sequence[tuple[str, str]] = (), close: bool = False, json_body: bool = True
) -> bytes:
    """A complete HTTP/1.1 response as one byte string (headers and body in one write)."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    if body is not None and json_body:
        lines.append("Content-Type: application/json")
    lines.append(f"Content-Length: {len(body) if body is not None else 0}")
    lines.extend(f"{name}: {value}" for name, value in headers)
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


BUSY_RESPONSE = http_response(503, json_error_body("Server busy: too many connections"), [("Retry-After", "1")], close=True)


class Connection(socketserver.BaseRequestHandler):
    """One client connection: requests in sequence (HTTP/1.1 keep-alive) until close or timeout."""

    server: HttpServer

    def setup(self) -> None:
        # Without TCP_NODELAY a small response can wait ~40 ms for the peer's delayed ACK.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()

    def handle(self) -> None:
        try:
            while self.serve_one():
                pass
        except (ClientGone, OSError):
            pass  # timeouts, resets and closes end the connection quietly

    def serve_one(self) -> bool:
        """Read one request and answer it; False when the connection must end."""
        deadline = time.monotonic() + self.server.policy.request_timeout
        try:
            method, target, version, headers = self.read_head(deadline)
            keep_alive = version == "HTTP/1.1" and "close" not in ",".join(header_values(headers, "connection")).lower()
            if self.server.pages is not None and target.startswith(self.server.pages.prefix):
                return self.serve_page(method, target, headers, deadline, keep_alive)
            raw, principal = self.admit(method, target, headers, deadline)
        except HttpRefusal as refusal:
            # Refused before its body was read: the rest of the stream cannot be trusted.
            self.request.sendall(http_response(refusal.status, json_error_body(refusal.message), refusal.headers, close=True))
            self.drain(deadline)
            return False
        mcp_headers = [(name, value) for name, value in headers if name.lower() != "authorization"]
        try:
            status, reply = answer(self.server.mcp, raw, principal, mcp_headers)
        except Exception:  # noqa: BLE001 - the core has its own boundary; this is a last resort
            self.server.mcp.log("internal error in the HTTP transport:\n" + traceback.format_exc())
            status, reply, keep_alive = 500, json_error_body("Internal error"), False
        self.request.sendall(http_response(status, reply, close=not keep_alive))
        return keep_alive

    def serve_page(self, method: str, target: str, headers: list[tuple[str, str]], deadline: float, keep_alive: bool) -> bool:
        """A connect page (code/connect.py): Host, Origin and body framing here, the rest in the pages."""
        self.server.policy.check_origin(headers)
        lengths = header_values(headers, "content-length")
        if header_values(headers, "transfer-encoding") or len(lengths) > 1 or not all(v.isdigit() and v.isascii() for v in lengths):
            raise HttpRefusal(400, "Bad Request: send a form with one plain Content-Length")
        length = int(lengths[0]) if lengths else 0
        if length > self.server.pages.max_body:
            raise HttpRefusal(413, f"Content Too Large: a form is at most {self.server.pages.max_body} bytes")
        pages = self.server.pages
        assert pages is not None
        status, page_headers, page = pages.handle(method, target, headers, self.read_exact(length, deadline))
        keep_alive = keep_alive and method in ("GET", "POST")  # a HEAD answer carries a body here: end after it
        self.request.sendall(http_response(status, page, page_headers, close=not keep_alive, json_body=False))
        return keep_alive

    def admit(
        self, method: str, target: str, headers: list[tuple[str, str]], deadline: float
    ) -> tuple[bytes, str]:
        """The HTTP-layer checks, in order; returns (body, principal) or raises HttpRefusal."""
        policy = self.server.policy
        policy.check_origin(headers)
        if target.partition("?")[0] != ENDPOINT or not self.server.mcp_endpoint:
            raise HttpRefusal(404, f"Not Found: the MCP endpoint is {ENDPOINT}")
        if method != "POST":
            raise HttpRefusal(405, "Method Not Allowed: use POST", [("Allow", "POST")])
        principal = policy.principal(headers)
        lengths = header_values(headers, "content-length")
        # Chunked bodies have no size up front, and a request with both framings is the
        # classic smuggling vector: only one plain Content-Length is accepted.
        if header_values(headers, "transfer-encoding") or not lengths:
            raise HttpRefusal(411, "Length Required: send the body with a Content-Length")
        if len(lengths) != 1 or not lengths[0].isdigit() or not lengths[0].isascii():
            raise HttpRefusal(400, "Bad Request: invalid Content-Length")
        length = int(lengths[0])
        if length > main.MAX_MESSAGE_BYTES:
            raise HttpRefusal(413, f"Content Too Large: the limit is {main.MAX_MESSAGE_BYTES} bytes")
        types = header_values(headers, "content-type")
        if len(types) != 1 or types[0].split(";")[0].strip().lower() != "application/json":
            raise HttpRefusal(415, "Unsupported Media Type: send application/json")
        if not accepts_json(headers):
            raise HttpRefusal(406, "Not Acceptable: this server answers with application/json")
        if "100-continue" in ",".join(header_values(headers, "expect")).lower():
            self.request.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        return self.read_exact(length, deadline), principal

    def drain(self, deadline: float) -> None:
        """After a refusal: half-close, then drop what the client still sends (bounded)."""
        # Closing with unread bytes makes the kernel send RST, and the client may lose
        # the refusal it was about to read. Read at most one body's worth, before the deadline.
        try:
            self.request.shutdown(socket.SHUT_WR)
            dropped = 0
            while dropped <= main.MAX_MESSAGE_BYTES + MAX_HEADER_BYTES:
                self.fill(deadline)
                dropped += len(self.buffer)
                self.buffer.clear()
        except (ClientGone, OSError):
            pass

    def fill(self, deadline: float) -> None:
        """Receive more bytes before the deadline, or raise ClientGone."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ClientGone()
        # The deadline covers the whole request: a client trickling one byte at a time
        # (slow loris) is dropped as surely as one that stops sending.
        self.request.settimeout(remaining)
        chunk = self.request.recv(65536)
        if not chunk:
            raise ClientGone()
        self.buffer += chunk

    def read_head(self, deadline: float) -> tuple[str, str, str, list[tuple[str, str]]]:
        """Request line and headers, bounded by MAX_HEADER_BYTES and MAX_HEADER_COUNT."""
        while True:
            while self.buffer.startswith(b"\r\n"):
                del self.buffer[:2]  # stray CRLF between requests (RFC 9112 section 2.2)
            end = self.buffer.find(b"\r\n\r\n")
            if 0 <= end <= MAX_HEADER_BYTES:
                break
            if end > MAX_HEADER_BYTES or len(self.buffer) > MAX_HEADER_BYTES:
                raise HttpRefusal(431, f"Request Header Fields Too Large: the limit is {MAX_HEADER_BYTES} bytes")
            self.fill(deadline)
        head = bytes(self.buffer[:end])
        del self.buffer[: end + 4]
        request_line, *lines = head.split(b"\r\n")
        if len(lines) > MAX_HEADER_COUNT:
            raise HttpRefusal(431, f"Request Header Fields Too Large: at most {MAX_HEADER_COUNT} headers")
        parts = request_line.split(b" ")
        if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0") or not _HEADER_NAME_RE.fullmatch(parts[0]):
            raise HttpRefusal(400, "Bad Request: malformed request line")
        headers = []
        for line in lines:
            name, colon, value = line.partition(b":")
            # No obsolete line folding, no space before the colon, no control characters:
            # each is a way for two parsers to disagree about where a header ends.
            if not colon or not _HEADER_NAME_RE.fullmatch(name) or _HEADER_VALUE_BAD_RE.search(value):
                raise HttpRefusal(400, "Bad Request: malformed header line")
            headers.append((name.decode("ascii"), value.strip(b" \t").decode("latin-1")))
        method, target, version = (part.decode("latin-1") for part in parts)
        return method, target, version, headers

    def read_exact(self, length: int, deadline: float) -> bytes:
        """Exactly `length` body bytes before the deadline."""
        while len(self.buffer) < length:
            self.fill(deadline)
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        return body


class HttpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """A thread per connection, at most MAX_CONCURRENT_CONNECTIONS at once (503 beyond)."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        mcp: main.Server,
        policy: HttpPolicy,
        pages: Pages | None = None,
        mcp_endpoint: bool = True,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.mcp = mcp
        self.policy = policy
        self.pages = pages  # the connect pages under /connect/, when served here
        self.mcp_endpoint = mcp_endpoint  # False: a pages-only listener (serve --stdio)
        self.slots = threading.BoundedSemaphore(MAX_CONCURRENT_CONNECTIONS)
        super().__init__(address, Connection)

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        # Decided in the accept loop without blocking: a flood of connections gets an
        # immediate 503 instead of one thread each.
        if not self.slots.acquire(blocking=False):
            refuse_busy(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: socket.socket, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.mcp.log("error in the HTTP transport:\n" + traceback.format_exc())

    def url(self, path: str = ENDPOINT) -> str:
        """The URL of `path` on this server (by default the endpoint clients use)."""
        host, port = self.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}{path}"


def refuse_busy(request: socket.socket) -> None:
    """Send the canned 503 without blocking, drop whatever the client already sent, close."""
    try:
        request.setblocking(False)
        request.send(BUSY_RESPONSE)
        while request.recv(65536):
            pass  # unread bytes at close() would turn our FIN into a RST and lose the 503
    except OSError:
        pass
    finally:
        request.close()


def is_loopback(host: str) -> bool:
    """True for localhost and loopback IP literals (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    import ipaddress  # only the HTTP transport needs it

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False

