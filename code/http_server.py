"""A standard-library HTTP/1.1 server engine: one event loop for every connection, a pool for the app.

Rules (each one stops an attack named where it is enforced):
1. One thread (`serve_forever`) owns the listening socket and every connection. It
   accepts, reads request heads and bodies, writes plain responses and enforces every
   deadline, without a thread per connection, so an idle connection costs one socket and
   a few hundred bytes, not a thread.
2. A complete request goes to a bounded pool of worker threads (started as requests need
   them) that calls the app and
   sends what of the response the socket takes at once; the loop writes any rest. While
   it is processed, the connection's further bytes wait (no concurrent pipelining).
   A request the app says it answers without waiting (`inline`) is answered on the loop
   itself: no hand-off to a worker and back, which is most of a small request's cost.
   Such a request must get a `Response` (a stream there is an app error: 500), and the
   loop serves nobody else meanwhile, so only work bounded in CPU may be declared so.
3. Holding connections is cheap and bounded: at most `max_connections`; a request head
   must arrive within `head_timeout` of the connection's start (or of the end of the
   previous response), however slowly its bytes trickle in; a body within `body_timeout`.
   When full, the longest-idle connection that is not being answered is evicted, so a
   flood of silent connections cannot lock out a client that sends requests.
4. Framing is strict and refused early: one plain Content-Length (ASCII digits, at most
   MAX_CONTENT_LENGTH_DIGITS), CRLF line endings only, bounded head (at most
   MAX_EMPTY_LINES stray CRLFs before it, counted in its size), a body size the app
   declares per route (413 before the body is read). A refusal closes the connection
   after the client could read it. No client byte can put a traceback in the log.
5. `shutdown(grace)` stops accepting, closes idle connections, lets requests in flight
   finish and send their responses within `grace` seconds, then returns.

Interface:
    Request(method, target, version, headers, body, peer, gone)   immutable; header names are
        lower-cased (they are case-insensitive; values are as sent); `target` is the
        origin-form path (`/mcp?x=1`), also for an absolute-form request
        (`POST http://127.0.0.1:8765/mcp`), whose authority must equal Host.
        `gone` is set by the loop when the peer closes or resets during processing.
    Response(status, headers, body)                 answered with a Content-Length.
    StreamResponse(status, headers, stream)        `stream` yields bytes chunks; the worker
        sends them with Transfer-Encoding: chunked and closes the iterator when the peer
        goes away. A stream that waits for events must also wake when `request.gone` is set.
    HttpServer(app, host, port, *, log, refuse, body_limit, limits, inline)
        app(request) -> Response | StreamResponse
        inline(request) -> bool   True: call the app on the loop thread (see rule 2)
        refuse(status, message, target_or_None) -> Response   renders framing refusals
        body_limit: int, or (method, target, headers) -> int  the largest body accepted
        .address  .url(path)  .serve_forever()  .shutdown(grace)

The engine adds Content-Length, Transfer-Encoding and Connection itself (the app's own
values for them are dropped); an app header ("Connection", "close") ends the connection
after the response. A request without Content-Length has an empty body: a route that
needs a length answers 411 itself.

Intended use, SIGTERM in the serving layer (shutdown blocks, so not in the handler):

    server = HttpServer(app, "127.0.0.1", 8765, refuse=render_refusal, body_limit=limit)
    signal.signal(signal.SIGTERM, lambda signum, frame: threading.Thread(target=server.shutdown).start())
    server.serve_forever()   # returns once shutdown has sent the in-flight responses

Standard library only; knows nothing about MCP.
"""

from __future__ import annotations

import collections
import queue
import re
import select
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http import HTTPStatus
from typing import NamedTuple

__all__ = [
    "BODY_TIMEOUT_SECONDS",
    "HEAD_TIMEOUT_SECONDS",
    "HttpServer",
    "Limits",
    "Request",
    "Response",
    "StreamResponse",
    "WORKER_THREADS",
    "bind",
    "content_length",
    "encode_head",
    "header_values",
    "parse_head",
    "url_of",
]

# =====================================================================================
# Limits (each bounds what one hostile client can make the server hold)
# =====================================================================================

MAX_CONNECTIONS = 4096  # open client connections; the longest-idle one is evicted beyond
FD_RESERVE = 64  # file descriptors kept free for the app (files, databases) and the engine
HEAD_TIMEOUT_SECONDS = 5.0  # a request head must arrive this soon after connect / last response
BODY_TIMEOUT_SECONDS = 10.0  # the body must arrive this soon after its head
WRITE_TIMEOUT_SECONDS = 10.0  # a response (or one stream chunk) must be taken this soon
DRAIN_TIMEOUT_SECONDS = 2.0  # after a refusal, how long we read and drop what still comes
MAX_DRAIN_BYTES = 256 * 1024  # ... and how much of it
SHUTDOWN_GRACE_SECONDS = 10.0  # requests in flight get this long to finish on shutdown
WORKER_THREADS = 16  # app calls at once (an open stream holds one)
MAX_HEADER_BYTES = 16 * 1024  # request line plus every header line
MAX_HEADER_COUNT = 64  # header lines in one request
MAX_EMPTY_LINES = 4  # empty lines (CRLF) ignored before a request line; they count toward MAX_HEADER_BYTES
MAX_CONTENT_LENGTH_DIGITS = 10  # Content-Length characters: up to 9,999,999,999
MAX_PENDING_BYTES = MAX_HEADER_BYTES + 4  # bytes held per connection beyond a body: one head and its blank line
DEFAULT_BODY_LIMIT = 64 * 1024  # when the app declares no body limit
LISTEN_BACKLOG = 1024  # connections the kernel queues before accept
TICK_SECONDS = 0.25  # how often deadlines are checked (at most; less with small deadlines)
RECV_BYTES = 65536  # the most one recv takes; less where less is allowed (see _allowance)

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # RFC 9110 token: method, header name
_TOKEN_RE = re.compile(_TOKEN)
_HEADER_LINE = _TOKEN + rb":[^\x00-\x08\x0a-\x1f\x7f]*"  # a name, a colon, a value without controls but tab
_HEADER_BLOCK_RE = re.compile(_HEADER_LINE + rb"(?:\r\n" + _HEADER_LINE + rb")*")
_EMPTY_LINES_RE = re.compile(rb"(?:\r\n)*")
_TARGET_RE = re.compile(rb"[\x21-\x7e]+")  # visible ASCII, no spaces or controls
_ABSOLUTE_RE = re.compile(r"http://([^/?#@]+)([/?].*)?", re.IGNORECASE)
_ENGINE_HEADERS = frozenset({"content-length", "transfer-encoding", "connection"})


class Limits(NamedTuple):
    """The deadlines and bounds one server applies (defaults: the named constants)."""

    max_connections: int = MAX_CONNECTIONS
    head_timeout: float = HEAD_TIMEOUT_SECONDS
    body_timeout: float = BODY_TIMEOUT_SECONDS
    write_timeout: float = WRITE_TIMEOUT_SECONDS
    drain_timeout: float = DRAIN_TIMEOUT_SECONDS
    workers: int = WORKER_THREADS


DEFAULT_LIMITS = Limits()  # every bound at its named constant


class Request(NamedTuple):
    """One complete request, as the app sees it."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]  # names lower-cased, values as sent
    body: bytes
    peer: tuple[str, int]
    gone: threading.Event  # set by the loop when the peer closes or resets while this is answered


class Response(NamedTuple):
    """A complete response; the engine adds Content-Length and Connection."""

    status: int
    headers: Sequence[tuple[str, str]] = ()
    body: bytes = b""


class StreamResponse(NamedTuple):
    """A response whose body is `stream`'s chunks, sent chunked by the worker."""

    status: int
    headers: list[tuple[str, str]]
    stream: Iterator[bytes]


class Refusal(Exception):
    """A framing refusal decided by the engine: status and a fixed message (no client bytes)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def plain_refusal(status: int, message: str, target: str | None) -> Response:
    """The default `refuse` hook: the message as text/plain."""
    return Response(status, [("Content-Type", "text/plain; charset=utf-8")], message.encode("utf-8") + b"\n")


def stderr_log(line: str) -> None:
    """The default log: one line to stderr."""
    print(line, file=sys.stderr, flush=True)


def header_values(headers: Sequence[tuple[str, str]], name: str) -> list[str]:
    """Every value of header `name`, in order (names as the engine gives them: lower case)."""
    name = name.lower()
    return [value for key, value in headers if key == name]


def has_token(headers: Sequence[tuple[str, str]], name: str, token: str) -> bool:
    """True when the comma-separated header `name` lists `token` (both case-insensitive; an app's names too)."""
    name = name.lower()
    return any(
        part.strip().lower() == token for key, value in headers if key.lower() == name for part in value.split(",")
    )


# =====================================================================================
# Parsing: pure functions, bytes in, a request head or a Refusal out
# =====================================================================================


def parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    """Request line and header lines (without the blank line): (method, target, version, headers)."""
    request_line, _, block = head.partition(b"\r\n")
    lines = block.decode("latin-1").split("\r\n") if block else []
    if len(lines) > MAX_HEADER_COUNT:
        raise Refusal(431, f"Request Header Fields Too Large: at most {MAX_HEADER_COUNT} headers")
    parts = request_line.split(b" ")
    if (
        len(parts) != 3
        or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0")
        or not _TOKEN_RE.fullmatch(parts[0])
        or not _TARGET_RE.fullmatch(parts[1])
    ):
        raise Refusal(400, "Bad Request: malformed request line")
    # Every line `token:value`: no obsolete line folding, no space before the colon, no
    # control characters. Each is a way for two parsers (a proxy and us) to disagree
    # where a header ends. One expression checks the whole block at once.
    if block and not _HEADER_BLOCK_RE.fullmatch(block):
        raise Refusal(400, "Bad Request: malformed header line")
    headers = []
    for line in lines:
        name, _, value = line.partition(":")
        # Names are case-insensitive: lower-cased once here, so every lookup is a plain compare.
        headers.append((name.lower(), value.strip(" \t")))
    method, target, version = (part.decode("ascii") for part in parts)
    hosts = header_values(headers, "host")
    # RFC 9112 section 3.2: an HTTP/1.1 request has exactly one Host; two let a proxy
    # and us route the same request to different sites.
    if len(hosts) > 1 or (version == "HTTP/1.1" and not hosts):
        raise Refusal(400, "Bad Request: exactly one Host header is required")
    return method, origin_form(target, hosts[0] if hosts else None), version, headers


def has_bare_line_ending(data: bytes | bytearray) -> bool:
    """True when `data` holds an LF or CR outside a CRLF (a CR at the very end may be half of one)."""
    # Every CRLF holds one CR and one LF, so any more of either is a bare one.
    crlf = data.count(b"\r\n")
    return data.count(b"\n") != crlf or data.count(b"\r") - data.endswith(b"\r") != crlf


def origin_form(target: str, host: str | None) -> str:
    """The target as a path: absolute-form `http://host:port/p?q` becomes `/p?q` (authority must equal Host)."""
    if target.startswith("/"):
        return target
    found = _ABSOLUTE_RE.fullmatch(target)
    # A target naming another authority than Host is how a request meant for one site
    # is passed off as another's: refuse instead of choosing one of the two.
    if not found or host is None or found.group(1).lower() != host.lower():
        raise Refusal(400, "Bad Request: the request target must be a path or http:// URL for this Host")
    path = found.group(2) or "/"
    return path if path.startswith("/") else "/" + path


def content_length(headers: list[tuple[str, str]]) -> int:
    """The body length the head declares (0 without one); Refusal for any other framing."""
    lengths = header_values(headers, "content-length")
    # Chunked bodies have no size up front, and a request with both framings is the
    # classic smuggling vector (a proxy reads one framing, we the other).
    if header_values(headers, "transfer-encoding"):
        if lengths:
            raise Refusal(400, "Bad Request: Transfer-Encoding and Content-Length together")
        raise Refusal(411, "Length Required: send the body with a Content-Length")
    if not lengths:
        return 0
    # Only ASCII digits, few of them: "+5", " 5", "5, 5", Unicode digits and a
    # 5,000-digit number (int() refuses those with an exception) are all one answer.
    value = lengths[0]
    if len(lengths) != 1 or not (0 < len(value) <= MAX_CONTENT_LENGTH_DIGITS and value.isascii() and value.isdigit()):
        raise Refusal(400, "Bad Request: invalid Content-Length")
    return int(value)


def encode_head(status: int, headers: Sequence[tuple[str, str]], framing: Sequence[tuple[str, str]]) -> bytes:
    """Status line and headers; the app's framing headers are replaced by the engine's."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    for name, value in [*((n, v) for n, v in headers if n.lower() not in _ENGINE_HEADERS), *framing]:
        # Response splitting: a CR or LF from the app would start a header of its own.
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise ValueError("a response header contains CR or LF")
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# =====================================================================================
# The engine
# =====================================================================================

READ_HEAD, READ_BODY, BUSY, WRITING, DRAINING = "head", "body", "busy", "writing", "draining"


class _Conn:
    """One client connection's state, owned by the loop thread."""

    __slots__ = (
        "sock",
        "peer",
        "buffer",
        "state",
        "since",
        "deadline",
        "events",
        "out",
        "after",
        "length",
        "head",
        "request",
        "eof",
        "drained",
        "empty_lines",
    )

    def __init__(self, sock: socket.socket, peer: tuple[str, int], now: float) -> None:
        self.sock = sock
        self.peer = peer
        self.buffer = bytearray()
        self.state = READ_HEAD
        self.since = now  # when the wait for the current request head began
        self.deadline = now
        self.events = 0
        self.out = b""  # response bytes still to write
        self.after = "keep"  # once `out` is written: "keep", "close" or "drain"
        self.length = 0
        self.head: tuple[str, str, str, list[tuple[str, str]]] | None = None
        self.request: Request | None = None
        self.eof = False
        self.drained = 0
        self.empty_lines = 0  # CRLFs skipped before the current request line


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: any free one), SO_REUSEADDR; OSError if it cannot bind."""
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(LISTEN_BACKLOG)
    except OSError:
        listener.close()
        raise
    return listener


def url_of(address: tuple[str, int], path: str = "/") -> str:
    """The http:// URL of `path` at a bound `address` (an IPv6 host in brackets)."""
    host, port = address[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{path}"


class HttpServer:
    """An HTTP/1.1 server: event loop for connections, worker pool for the app (see the module docstring)."""

    def __init__(
        self,
        app: Callable[[Request], Response | StreamResponse],
        host: str,
        port: int,
        *,
        log: Callable[[str], None] = stderr_log,
        refuse: Callable[[int, str, str | None], Response] = plain_refusal,
        body_limit: int | Callable[[str, str, list[tuple[str, str]]], int] = DEFAULT_BODY_LIMIT,
        limits: Limits = DEFAULT_LIMITS,
        inline: Callable[[Request], bool] | None = None,
        refused: Callable[[tuple[str, int], int, str], None] | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        self.app = app
        self.inline = inline
        self.refused = refused  # told (peer, status, message) of each refusal the engine answers itself
        self.log = log
        self.refuse = refuse
        self.body_limit = body_limit
        self.limits = limits
        self.max_connections = max(1, min(limits.max_connections, _fd_limit() - FD_RESERVE))
        # `sock`: bound and listening already (by bind() before the server was built, or a page
        # keeper's, inherited): host and port are its own.
        self._listener = bind(host, port) if sock is None else sock
        self._listener.setblocking(False)
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._conns: dict[int, _Conn] = {}
        # Connections not being answered, in the order their current wait began: the
        # first one is the longest idle, the one evicted when the table is full.
        self._idle: collections.OrderedDict[_Conn, None] = collections.OrderedDict()
        self._jobs: queue.SimpleQueue[_Conn | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []  # started on demand, at most limits.workers
        self._idle_workers = threading.Semaphore(0)  # released by a worker as it finishes each job
        self._done: collections.deque[tuple[_Conn, bytes | None, str]] = collections.deque()
        # Connections whose next request is already buffered (pipelined) once their response
        # is written: parsed by the loop on its next turn, one request each per turn, so an
        # answer given on the loop never recurses into the next one.
        self._ready: collections.deque[_Conn] = collections.deque()
        self._answering = threading.Lock()  # a worker's send and its report to the loop, as one step
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        # serve_forever and shutdown decide under it who closes the sockets: a shutdown that
        # lands before the loop starts (a SIGTERM right after the URL line) closes them, and
        # serve_forever then returns at once instead of registering a closed socket.
        self._life = threading.Lock()
        self._grace_deadline = 0.0
        self._running = False
        tick = min(TICK_SECONDS, limits.head_timeout / 4, limits.body_timeout / 4, limits.drain_timeout / 4)
        self._tick = max(tick, 0.005)

    def url(self, path: str = "/") -> str:
        """The http:// URL of `path` on this server."""
        return url_of(self.address, path)

    # ----------------------------------------------------------------- life cycle

    def serve_forever(self) -> None:
        """Run the event loop until `shutdown` has finished (call once, from one thread); at once if it already has."""
        with self._life:
            if self._stopping.is_set():
                return
            self._running = True
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        try:
            self._loop()
        finally:
            for conn in list(self._conns.values()):
                if conn.request is not None:
                    conn.request.gone.set()  # a stream past the grace period stops here
                self._close(conn)
            for _ in self._workers:
                self._jobs.put(None)
            self._selector.close()
            self._listener.close()
            self._wake_r.close()
            self._wake_w.close()
            self._stopped.set()

    def shutdown(self, grace: float = SHUTDOWN_GRACE_SECONDS) -> None:
        """Stop accepting, close idle connections, let requests in flight finish within `grace`, return."""
        self._grace_deadline = time.monotonic() + max(grace, 0.0)
        with self._life:
            self._stopping.set()
            running = self._running
        if not running:
            for resource in (self._listener, self._wake_r, self._wake_w, self._selector):
                resource.close()
            self._stopped.set()
            return
        self._wake()
        self._stopped.wait()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # buffer full (the loop is already awake) or closed (it has ended)

    def _loop(self) -> None:
        next_sweep = time.monotonic() + self._tick
        accepting = True
        while True:
            if self._stopping.is_set():
                if accepting:
                    accepting = False
                    self._stop_accepting()
                if not self._conns or time.monotonic() >= self._grace_deadline:
                    return
            for key, events in self._selector.select(0 if self._ready else self._tick):
                if key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj is self._wake_r:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except OSError:
                        pass
                else:
                    conn = key.data
                    if conn.sock.fileno() < 0:
                        continue  # closed earlier in this batch
                    if events & selectors.EVENT_WRITE:
                        self._on_writable(conn)
                    if events & selectors.EVENT_READ and conn.sock.fileno() >= 0:
                        self._on_readable(conn)
            while self._done:
                self._finish(*self._done.popleft())
            for _ in range(len(self._ready)):
                conn = self._ready.popleft()
                if conn.sock.fileno() >= 0 and conn.state == READ_HEAD:
                    self._advance(conn)
            now = time.monotonic()
            if now >= next_sweep:
                next_sweep = now + self._tick
                self._sweep(now)

    def _stop_accepting(self) -> None:
        self._selector.unregister(self._listener)
        self._listener.close()
        busy = 0
        for conn in list(self._conns.values()):
            if conn.state in (READ_HEAD, READ_BODY, DRAINING):
                self._close(conn)
            else:
                busy += 1
        self.log(f"shutting down: stopped accepting; {busy} request(s) in flight")

    # ----------------------------------------------------------------- connections

    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, peer = self._listener.accept()
            except BlockingIOError:
                return
            except OSError:
                # Out of descriptors (EMFILE): free one by evicting, try again next turn.
                self._evict()
                return
            sock.setblocking(False)
            # Without TCP_NODELAY a small response can wait ~40 ms for the peer's delayed ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if len(self._conns) >= self.max_connections and not self._evict():
                if self.refused is not None:
                    self.refused(peer[:2], 503, "Service Unavailable: too many requests in progress")
                self._send_and_close(sock, 503, "Service Unavailable: too many requests in progress")
                continue
            conn = _Conn(sock, peer[:2], time.monotonic())
            conn.deadline = conn.since + self.limits.head_timeout
            self._conns[sock.fileno()] = conn
            self._idle[conn] = None
            self._want(conn, selectors.EVENT_READ)

    def _evict(self) -> bool:
        """Close the longest-idle connection not being answered; False if every one is busy."""
        # A worker sends its response before the loop learns it is done: take in the
        # finished answers first (a worker between its send and its report holds the
        # lock), or a connection whose client already has its reply would still count as
        # busy and a newcomer would be refused for nothing.
        with self._answering:
            finished = list(self._done)
            self._done.clear()
        for done in finished:
            self._finish(*done)
        # Silent connections opened by another process to fill the table: the oldest
        # goes, so a client that actually sends requests always gets a slot.
        if not self._idle:
            return False
        self._close(next(iter(self._idle)))
        return True

    def _send_and_close(self, sock: socket.socket, status: int, message: str) -> None:
        try:
            sock.send(self._refusal_bytes(status, message, None))
        except OSError:
            pass
        sock.close()

    def _want(self, conn: _Conn, events: int) -> None:
        if events == conn.events:
            return
        if not conn.events:
            self._selector.register(conn.sock, events, conn)
        elif not events:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    def _close(self, conn: _Conn) -> None:
        if conn.sock.fileno() < 0:
            return
        self._want(conn, 0)
        del self._conns[conn.sock.fileno()]
        self._idle.pop(conn, None)
        conn.sock.close()

    def _allowance(self, conn: _Conn) -> int:
        """How many bytes the next recv may take: what the connection's state may still hold (at least 1: EOF)."""
        # Memory per connection: a recv of RECV_BYTES into a buffer that already held what
        # the state allows let connections that send ahead and never read hold ~51 kB each.
        # Bytes beyond the allowance wait in the kernel, not in this process.
        if conn.state == READ_BODY:
            room = conn.length
        elif conn.state == DRAINING:
            return RECV_BYTES  # dropped as it comes
        else:
            room = MAX_PENDING_BYTES  # a head being read, or bytes sent ahead during a request
        return min(RECV_BYTES, max(1, room - len(conn.buffer)))

    def _on_readable(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(self._allowance(conn))
        except BlockingIOError:
            return
        except OSError:
            chunk = b""  # reset by the peer
        if conn.state == WRITING:
            self._want(conn, selectors.EVENT_WRITE)  # nothing is read while we write
            if chunk:
                conn.buffer += chunk
            return
        if conn.state == BUSY:
            if chunk:
                conn.buffer += chunk
            if not chunk:
                conn.eof = True
                if conn.request is not None:
                    conn.request.gone.set()
            if not chunk or len(conn.buffer) >= MAX_PENDING_BYTES:
                self._want(conn, 0)  # the rest waits in the kernel until this request is answered
            return
        if not chunk:
            self._close(conn)
            return
        if conn.state == DRAINING:
            conn.drained += len(chunk)
            if conn.drained > MAX_DRAIN_BYTES:
                self._close(conn)
            return
        conn.buffer += chunk
        self._advance(conn)

    def _advance(self, conn: _Conn) -> None:
        """Parse what the buffer holds; hand a complete request to the pool or refuse."""
        try:
            if conn.state == READ_HEAD and not self._read_head(conn):
                return
            if conn.state == READ_BODY and len(conn.buffer) >= conn.length:
                self._dispatch(conn)
        except Refusal as refusal:
            self._refuse(conn, refusal.status, refusal.message, conn.head[1] if conn.head else None)

    def _read_head(self, conn: _Conn) -> bool:
        """True once a head is parsed and the connection moved to READ_BODY."""
        self._skip_empty_lines(conn)
        room = MAX_HEADER_BYTES - 2 * conn.empty_lines  # skipped lines count toward the head's size
        end = conn.buffer.find(b"\r\n\r\n", 0, room + 4)
        scan = conn.buffer[: end + 2] if end >= 0 else conn.buffer[: room + 4]
        # A bare LF (or CR) ends a line for some parsers and not others: answer at once
        # rather than wait for a CRLF CRLF that a bare-LF client will never send.
        if has_bare_line_ending(scan):
            raise Refusal(400, "Bad Request: lines must end with CRLF")
        if end < 0:
            # Room for a head of MAX_HEADER_BYTES and its blank line, and no blank line in it.
            if len(conn.buffer) >= room + 4:
                raise Refusal(431, f"Request Header Fields Too Large: the limit is {MAX_HEADER_BYTES} bytes")
            return False
        head = bytes(conn.buffer[:end])
        del conn.buffer[: end + 4]
        conn.empty_lines = 0
        conn.head = method, target, version, headers = parse_head(head)
        length = content_length(headers)
        try:
            limit = self.body_limit(method, target, headers) if callable(self.body_limit) else self.body_limit
        except Exception:  # noqa: BLE001 - the app's hook failed: one line, then 500
            self._app_error("body_limit", method)
            raise Refusal(500, "Internal Server Error") from None
        if length > limit:
            raise Refusal(413, f"Content Too Large: the limit is {limit} bytes")
        conn.length = length
        conn.state = READ_BODY
        conn.deadline = time.monotonic() + self.limits.body_timeout
        if length > len(conn.buffer) and has_token(headers, "expect", "100-continue"):
            self._send_now(conn, b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def _skip_empty_lines(self, conn: _Conn) -> None:
        """Drop the stray CRLFs before a request line (RFC 9112 section 2.2), a few at most, in one slice."""
        # A stray-CRLF flood: removing them two bytes per step on the loop thread let a
        # client without a token stall every other client. One C-speed match over a
        # bounded prefix, one deletion, and past MAX_EMPTY_LINES the connection is refused.
        matched = _EMPTY_LINES_RE.match(conn.buffer, 0, 2 * (MAX_EMPTY_LINES - conn.empty_lines) + 2)
        skipped = matched.end() // 2 if matched is not None else 0  # (?:\r\n)* matches every buffer, if emptily
        if skipped:
            del conn.buffer[: 2 * skipped]
            conn.empty_lines += skipped
        if conn.empty_lines > MAX_EMPTY_LINES:
            raise Refusal(400, f"Bad Request: more than {MAX_EMPTY_LINES} empty lines before the request line")

    def _send_now(self, conn: _Conn, data: bytes) -> None:
        try:
            conn.sock.send(data)  # tiny interim response: fits the empty send buffer
        except OSError:
            pass

    def _dispatch(self, conn: _Conn) -> None:
        assert conn.head is not None
        method, target, version, headers = conn.head
        body = bytes(conn.buffer[: conn.length])
        # A fresh buffer holding only what followed the body (at most MAX_PENDING_BYTES):
        # whatever the body's allocation was, the connection's next wait does not carry it.
        conn.buffer = conn.buffer[conn.length :]
        conn.request = Request(method, target, version, headers, body, conn.peer, threading.Event())
        conn.state = BUSY
        self._idle.pop(conn, None)
        if self.inline is not None and self._inline(conn.request):
            data, keep = self._call_app(conn.request, on_loop=True)
            assert not isinstance(data, StreamResponse)  # on the loop, _call_app answers a stream with a 500
            self._finish(conn, data, "keep" if keep else "close")
            return
        if len(conn.buffer) >= MAX_PENDING_BYTES:
            self._want(conn, 0)
        self._hand_off(conn)

    def _refuse(self, conn: _Conn, status: int, message: str, target: str | None) -> None:
        """Answer a framing refusal, then drain: the client reads it before we close."""
        if self.refused is not None:
            self.refused(conn.peer, status, message)
        # Refused before its body was read: the rest of the stream cannot be trusted.
        conn.state = WRITING
        conn.after = "drain"
        conn.out = self._refusal_bytes(status, message, target)
        self._idle.pop(conn, None)
        conn.deadline = time.monotonic() + self.limits.write_timeout
        self._on_writable(conn)

    def _refusal_bytes(self, status: int, message: str, target: str | None) -> bytes:
        try:
            response = self.refuse(status, message, target)
            return (
                encode_head(
                    response.status,
                    response.headers,
                    [("Content-Length", str(len(response.body))), ("Connection", "close")],
                )
                + response.body
            )
        except Exception:  # noqa: BLE001 - the refuse hook failed: answer plainly, say so once
            self._app_error("refuse", str(status))
            body = message.encode("utf-8")
            return encode_head(status, [], [("Content-Length", str(len(body))), ("Connection", "close")]) + body

    def _on_writable(self, conn: _Conn) -> None:
        if conn.state == DRAINING:
            return
        try:
            sent = conn.sock.send(conn.out)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        if conn.out:
            self._want(conn, selectors.EVENT_WRITE)
            return
        self._after_response(conn)

    def _after_response(self, conn: _Conn) -> None:
        conn.request = None
        conn.head = None
        if conn.after == "close" and conn.eof:
            self._close(conn)
        elif conn.after in ("close", "drain"):
            self._drain(conn)
        else:
            conn.state = READ_HEAD
            conn.since = time.monotonic()
            conn.deadline = conn.since + self.limits.head_timeout
            self._idle[conn] = None
            self._want(conn, selectors.EVENT_READ)
            if conn.buffer:
                self._ready.append(conn)  # a request the client sent ahead (pipelining)

    def _drain(self, conn: _Conn) -> None:
        """Half-close and drop what the client still sends (bounded), then close."""
        # Closing with unread bytes makes the kernel send RST, and the client may lose
        # the response it was about to read.
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.state = DRAINING
        conn.buffer.clear()
        conn.deadline = time.monotonic() + self.limits.drain_timeout
        self._idle[conn] = None
        self._idle.move_to_end(conn, last=False)  # the first to go when the table is full
        self._want(conn, selectors.EVENT_READ)

    def _sweep(self, now: float) -> None:
        """Deadlines: a head, body, write or drain that is late ends its connection."""
        for conn in list(self._conns.values()):
            if conn.state == BUSY or now < conn.deadline:
                continue
            if conn.state == READ_BODY or (conn.state == READ_HEAD and conn.buffer):
                # Slow loris: however slowly the bytes come, the deadline does not move.
                self._refuse(conn, 408, "Request Timeout", conn.head[1] if conn.head else None)
            else:
                self._close(conn)

    # ----------------------------------------------------------------- workers

    @property
    def workers(self) -> int:
        """How many worker threads have been started (they are started as requests need them)."""
        return len(self._workers)

    def _hand_off(self, conn: _Conn) -> None:
        """Queue the request for a worker; start one if none is idle and the pool is not full."""
        self._jobs.put(conn)
        # A worker that finished its last job takes this one. Only the loop starts workers,
        # so a server whose requests are all answered on the loop starts none.
        if not self._idle_workers.acquire(blocking=False) and len(self._workers) < self.limits.workers:
            worker = threading.Thread(target=self._work, name=f"http-worker-{len(self._workers)}", daemon=True)
            self._workers.append(worker)
            worker.start()

    def _work(self) -> None:
        while (conn := self._jobs.get()) is not None:
            self._serve(conn)

    def _inline(self, request: Request) -> bool:
        assert self.inline is not None
        try:
            return self.inline(request)
        except Exception:  # noqa: BLE001 - the app's hook failed: say so, and use a worker
            self._app_error("inline", request.method)
            return False

    def _call_app(self, request: Request, on_loop: bool = False) -> tuple[bytes | StreamResponse, bool]:
        """The app's answer as bytes (or a stream, on a worker) and whether the connection stays open."""
        keep = request.version == "HTTP/1.1" and not has_token(request.headers, "connection", "close")
        try:
            response = self.app(request)
            if isinstance(response, StreamResponse):
                if not on_loop:
                    return response, keep
                getattr(response.stream, "close", lambda: None)()
                raise TypeError("a request declared inline was answered with a stream")
            keep = keep and not has_token(response.headers, "connection", "close")
            return self._encode(request, response, keep), keep
        except Exception:  # noqa: BLE001 - the one boundary for app errors
            self._app_error("app", request.method)
            return self._refusal_bytes(500, "Internal Server Error", request.target), False

    def _serve(self, conn: _Conn) -> None:
        """Answer the connection's request (or stream its response) from a worker."""
        request = conn.request
        assert request is not None
        data, keep = self._call_app(request)
        if isinstance(data, StreamResponse):
            try:
                after = self._stream(conn, request, data, keep)
            except Exception:  # noqa: BLE001 - the app's stream head was unusable
                self._app_error("app", request.method)
                keep, data = False, self._refusal_bytes(500, "Internal Server Error", request.target)
            else:
                self._idle_workers.release()
                self._complete(conn, None, after)
                return
        # Counted idle before the client can see its answer: a next request it sends at
        # once then finds this worker instead of starting another.
        self._idle_workers.release()
        # Most responses fit the socket's send buffer: send them from here, so the client
        # has its answer without waiting for the loop to wake; the loop writes the rest.
        # Sending and reporting done happen under one lock (see _evict).
        with self._answering:
            try:
                data = data[conn.sock.send(data) :]
            except OSError:
                pass  # would block, or the peer is gone: the loop writes or closes, as before
            self._done.append((conn, data, "keep" if keep else "close"))
        self._wake()

    def _complete(self, conn: _Conn, data: bytes | None, after: str) -> None:
        self._done.append((conn, data, after))
        self._wake()

    def _encode(self, request: Request, response: Response, keep: bool) -> bytes:
        keep = keep and not self._stopping.is_set()
        framing = [("Content-Length", str(len(response.body)))] + ([] if keep else [("Connection", "close")])
        head = encode_head(response.status, response.headers, framing)
        return head if request.method == "HEAD" else head + response.body

    def _finish(self, conn: _Conn, data: bytes | None, after: str) -> None:
        """Loop side of a worker's answer: write it, or (after a stream) continue or close."""
        if conn.sock.fileno() < 0:
            return
        if self._stopping.is_set() and after == "keep":
            after = "close"
        if data is None:  # the worker wrote a stream
            conn.request = None
            if after == "gone":
                self._close(conn)
                return
            conn.after = after
            conn.out = b""
            self._after_response(conn)
            return
        conn.state = WRITING
        conn.after = after
        conn.out = data
        conn.deadline = time.monotonic() + self.limits.write_timeout
        self._on_writable(conn)

    def _stream(self, conn: _Conn, request: Request, response: StreamResponse, keep: bool) -> str:
        """Send a chunked stream from this worker; returns "keep", "close" or "gone"."""
        chunked = request.version == "HTTP/1.1"
        keep = (
            keep and chunked and not self._stopping.is_set() and not has_token(response.headers, "connection", "close")
        )
        framing = [("Transfer-Encoding", "chunked")] if chunked else []
        framing += [] if keep else [("Connection", "close")]
        iterator = iter(response.stream)
        try:
            head = encode_head(response.status, response.headers, framing)  # an app error: 500 below
        except Exception:
            getattr(iterator, "close", lambda: None)()
            raise
        try:
            self._write(conn, request, head)
            while request.method != "HEAD":
                try:
                    chunk = next(iterator)
                except StopIteration:
                    self._write(conn, request, b"0\r\n\r\n" if chunked else b"")
                    break
                except Exception:  # noqa: BLE001 - the app's stream failed mid-body: cut it short
                    self._app_error("stream", request.method)
                    return "gone"
                if chunk:
                    self._write(conn, request, b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
            return "keep" if keep else "close"
        except (OSError, ValueError, _Gone):
            request.gone.set()
            return "gone"
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()  # the app's generator runs its `finally` (unsubscribe, release)

    def _write(self, conn: _Conn, request: Request, data: bytes) -> None:
        """Blocking write of `data` from a worker, within the write deadline, or raise."""
        view = memoryview(data)
        deadline = time.monotonic() + self.limits.write_timeout
        poller = select.poll()
        poller.register(conn.sock.fileno(), select.POLLOUT)
        while view:
            if request.gone.is_set():
                raise _Gone()
            remaining = deadline - time.monotonic()
            # A client that stops reading a stream holds a worker: not past this deadline.
            if remaining <= 0 or not poller.poll(min(remaining, 0.5) * 1000):
                if remaining <= 0:
                    raise _Gone()
                continue
            try:
                view = view[conn.sock.send(view) :]
            except BlockingIOError:
                continue

    def _app_error(self, where: str, what: str) -> None:
        """The one exception boundary's log: a line, then the app's traceback (never a client's)."""
        kind = sys.exc_info()[0]
        self.log(f"internal error in {where} ({what}): {kind.__name__ if kind else 'unknown'}")
        import traceback  # loaded at the first app error: most processes never have one

        self.log(traceback.format_exc().rstrip())


class _Gone(Exception):
    """The peer went away, or stopped reading, while a worker was writing to it."""


def _fd_limit() -> int:
    """The soft limit on open file descriptors (a large number where it cannot be read)."""
    try:
        import resource  # POSIX only

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return soft if soft != resource.RLIM_INFINITY else 1 << 20
    except (ImportError, OSError, ValueError):
        return 1 << 20
