"""The HTTP/1.1 engine (code/http_server.py) over real sockets on 127.0.0.1, with a tiny app."""

from __future__ import annotations

import socket
import sys
import threading
import time
import unittest
from collections.abc import Iterator
from typing import Any

from helpers import support  # noqa: F401 - puts code/ on sys.path

import http_server as hs
from http_server import HttpServer, Limits, Request, Response, StreamResponse

GUARD = 10.0  # seconds: a failure guard on every blocking wait, never an assertion


class Log(list):
    """A log sink that keeps every line and can announce one containing `word`."""

    def __init__(self, word: str = "") -> None:
        super().__init__()
        self.word = word
        self.seen = threading.Event()

    def __call__(self, line: str) -> None:
        self.append(line)
        if self.word and self.word in line:
            self.seen.set()


class Refusals(list):
    """The `refuse` hook: records each call and renders a body the tests can recognise."""

    def __call__(self, status: int, message: str, target: str | None) -> Response:
        self.append((status, message, target))
        return Response(status, [("Content-Type", "application/x-refusal")], f"refused {status}".encode())


class Echo(list):
    """The tiny app: records each request, answers 200 with "METHOD TARGET BODY"."""

    def __call__(self, request: Request) -> Response:
        self.append(request)
        return Response(
            200, [("Content-Type", "text/plain")], f"{request.method} {request.target} ".encode() + request.body
        )


class Reply:
    """One parsed response: status, headers (lower-case names), body."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


class Client:
    """A raw socket client that writes exact bytes and parses responses itself."""

    def __init__(self, test: unittest.TestCase, server: HttpServer) -> None:
        self.sock = socket.create_connection(server.address, timeout=GUARD)
        self.file = self.sock.makefile("rb")
        test.addCleanup(self.close)
        self.host = f"{server.address[0]}:{server.address[1]}"

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def send(self, data: bytes) -> Client:
        self.sock.sendall(data)
        return self

    def request(self, method: str = "GET", target: str = "/", body: bytes = b"", extra: str = "") -> Client:
        length = f"Content-Length: {len(body)}\r\n" if body else ""
        return self.send(f"{method} {target} HTTP/1.1\r\nHost: {self.host}\r\n{length}{extra}\r\n".encode() + body)

    def reply(self, method: str = "GET") -> Reply:
        status_line = self.file.readline()
        if not status_line:
            raise ConnectionError("closed without a response")
        headers: dict[str, str] = {}
        while (line := self.file.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.lower()] = value.strip()
        if method == "HEAD":
            body = b""
        elif headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int(self.file.readline(), 16):
                body += self.file.read(size)
                self.file.readline()
            self.file.readline()
        else:
            body = self.file.read(int(headers.get("content-length", "0")))
        return Reply(int(status_line.split()[1]), headers, body)

    def at_eof(self) -> bool:
        """True when the server has closed the connection (reads until then, guarded)."""
        return self.file.read() == b""


def started_stream(closed: threading.Event) -> Iterator[bytes]:
    """A stream already started, so that closing it runs its `finally`, which sets `closed`."""

    def events() -> Iterator[bytes]:
        try:
            yield b"never sent"
        finally:
            closed.set()

    stream = events()
    next(stream)
    return stream


def start(test: unittest.TestCase, app: Any = None, **options: Any) -> tuple[HttpServer, Echo, Refusals, Log]:
    """A running engine on 127.0.0.1:0, stopped (grace 0) when the test ends."""
    echo, refusals = Echo(), Refusals()
    log = options.pop("log", None)
    log = Log() if log is None else log
    server = HttpServer(app or echo, "127.0.0.1", 0, log=log, refuse=refusals, **options)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    test.addCleanup(thread.join, GUARD)
    test.addCleanup(server.shutdown, 0)
    return server, echo, refusals, log


def refused(test: unittest.TestCase, server: HttpServer, raw: bytes) -> Reply:
    """Send raw bytes on a new connection; the answer, then the connection must close."""
    client = Client(test, server).send(raw)
    reply = client.reply()
    test.assertEqual(reply.headers.get("connection"), "close")
    test.assertTrue(client.at_eof())
    return reply


class IdleConnectionsTest(unittest.TestCase):
    def test_two_hundred_idle_and_trickling_connections_do_not_stop_a_working_client(self) -> None:
        server, echo, _, log = start(self)
        silent = [socket.create_connection(server.address, timeout=GUARD) for _ in range(150)]
        tricklers = [socket.create_connection(server.address, timeout=GUARD) for _ in range(50)]
        for sock in silent + tricklers:
            self.addCleanup(sock.close)
        head = b"POST /mcp HTTP/1.1\r\nHost: x\r\n"
        statuses = []
        keep_alive = Client(self, server)
        for i in range(40):
            for sock in tricklers:
                sock.send(head[i % len(head) : i % len(head) + 1])  # one header byte each turn
            client = Client(self, server) if i % 2 else keep_alive  # half on new connections
            statuses.append(client.request("POST", "/mcp", b"{}", "Authorization: Bearer t\r\n").reply().status)
        self.assertEqual(statuses, [200] * 40)
        self.assertEqual(len(echo), 40)
        # The silent connections were held, not evicted: the first one can still be used.
        first = silent[0]
        first.sendall(b"GET /still-here HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertTrue(first.recv(100).startswith(b"HTTP/1.1 200 OK"))
        self.assertEqual(log, [])

    def test_at_the_bound_the_longest_idle_connection_is_evicted_for_a_newcomer(self) -> None:
        server, echo, _, _ = start(self, limits=Limits(max_connections=3))
        a, b, c = (Client(self, server) for _ in range(3))
        for client in (a, b, c):  # used in this order: a has been idle longest
            self.assertEqual(client.request().reply().status, 200)
        newcomer = Client(self, server)
        self.assertEqual(newcomer.request("GET", "/new").reply().status, 200)
        self.assertTrue(a.at_eof())
        self.assertEqual(b.request("GET", "/b").reply().status, 200)
        self.assertEqual(echo[-1].target, "/b")

    def test_below_the_bound_no_connection_is_evicted(self) -> None:
        server, _, _, _ = start(self, limits=Limits(max_connections=3))
        a, b, c = (Client(self, server) for _ in range(3))
        for client in (a, b, c):
            self.assertEqual(client.request().reply().status, 200)
        self.assertEqual(a.request("GET", "/a-again").reply().status, 200)

    def test_when_every_connection_is_being_answered_a_newcomer_gets_503(self) -> None:
        entered, release = threading.Event(), threading.Event()

        def app(request: Request) -> Response:
            entered.set()
            release.wait(GUARD)
            return Response(200, [], b"done")

        server, _, refusals, _ = start(self, app, limits=Limits(max_connections=1))
        self.addCleanup(release.set)
        busy = Client(self, server).request()
        self.assertTrue(entered.wait(GUARD))
        newcomer = Client(self, server)
        reply = newcomer.reply()
        self.assertEqual((reply.status, reply.body), (503, b"refused 503"))
        self.assertEqual([r[0] for r in refusals], [503])
        release.set()
        self.assertEqual(busy.reply().body, b"done")


class DeadlineTest(unittest.TestCase):
    def test_a_silent_connection_is_closed_at_the_head_deadline(self) -> None:
        server, echo, _, _ = start(self, limits=Limits(head_timeout=0.2))
        client = Client(self, server)
        self.assertTrue(client.at_eof())
        self.assertEqual(echo, [])

    def test_trickled_bytes_do_not_move_the_head_deadline(self) -> None:
        server, echo, refusals, _ = start(self, limits=Limits(head_timeout=0.3))
        client = Client(self, server).send(b"GET / HTTP/1.1\r\nX-Slow: ")
        client.sock.settimeout(0.02)  # pacing between trickled bytes
        sent = 0
        while sent < hs.MAX_HEADER_BYTES // 2:
            client.sock.send(b"a")
            sent += 1
            try:
                if client.sock.recv(1, socket.MSG_PEEK):
                    break
            except TimeoutError:
                continue
        client.sock.settimeout(GUARD)
        self.assertLess(sent, hs.MAX_HEADER_BYTES // 2)  # it ended by the deadline, not by size
        self.assertEqual(client.reply().status, 408)
        self.assertEqual([r[0] for r in refusals], [408])
        self.assertEqual(echo, [])

    def test_a_head_sent_at_once_is_answered_before_the_deadline(self) -> None:
        server, echo, _, _ = start(self, limits=Limits(head_timeout=2.0))
        self.assertEqual(Client(self, server).request().reply().status, 200)
        self.assertEqual(len(echo), 1)

    def test_a_body_not_complete_by_its_deadline_gets_408(self) -> None:
        server, echo, _, _ = start(self, limits=Limits(body_timeout=0.2))
        client = Client(self, server).send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhalf")
        self.assertEqual(client.reply().status, 408)
        self.assertEqual(echo, [])

    def test_a_complete_body_is_answered_before_its_deadline(self) -> None:
        server, echo, _, _ = start(self, limits=Limits(body_timeout=2.0))
        reply = Client(self, server).request("POST", "/", b"0123456789").reply()
        self.assertEqual((reply.status, echo[0].body), (200, b"0123456789"))


class ContentLengthTest(unittest.TestCase):
    def test_a_huge_content_length_is_400_and_nothing_reaches_the_log(self) -> None:
        server, echo, refusals, log = start(self)
        reply = refused(self, server, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"9" * 4400 + b"\r\n\r\n")
        self.assertEqual((reply.status, reply.body), (400, b"refused 400"))
        self.assertEqual(refusals, [(400, "Bad Request: invalid Content-Length", "/")])
        self.assertEqual((log, echo), ([], []))

    def test_non_digit_signed_spaced_and_listed_content_lengths_are_400(self) -> None:
        server, echo, _, log = start(self)
        for value in (b"+5", b"-5", b"5 5", b"0x5", b"5,5", b"\xef\xbc\x95", b""):
            with self.subTest(value=value):
                raw = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + value + b"\r\n\r\nhello"
                self.assertEqual(refused(self, server, raw).status, 400)
        self.assertEqual((log, echo), ([], []))

    def test_a_duplicate_content_length_is_400_even_when_equal(self) -> None:
        server, echo, _, _ = start(self)
        raw = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"
        self.assertEqual(refused(self, server, raw).status, 400)
        self.assertEqual(echo, [])

    def test_content_length_digits_are_allowed_up_to_the_limit_and_refused_beyond(self) -> None:
        server, echo, _, _ = start(self)
        at_limit = "5".zfill(hs.MAX_CONTENT_LENGTH_DIGITS)
        client = Client(self, server).send(
            f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {at_limit}\r\n\r\nhello".encode()
        )
        self.assertEqual(client.reply().status, 200)
        self.assertEqual(echo[0].body, b"hello")
        beyond = "5".zfill(hs.MAX_CONTENT_LENGTH_DIGITS + 1)
        raw = f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {beyond}\r\n\r\nhello".encode()
        self.assertEqual(refused(self, server, raw).status, 400)
        self.assertEqual(len(echo), 1)

    def test_a_body_at_the_route_limit_is_served_and_one_byte_more_is_413_before_the_body(self) -> None:
        asked = []

        def body_limit(method: str, target: str, headers: list[tuple[str, str]]) -> int:
            asked.append((method, target))
            return 10

        server, echo, refusals, _ = start(self, body_limit=body_limit)
        self.assertEqual(Client(self, server).request("POST", "/r", b"x" * 10).reply().status, 200)
        # Only the head is sent: the 413 must come without waiting for a body.
        client = Client(self, server).send(b"POST /r HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n")
        self.assertEqual(client.reply().status, 413)
        self.assertEqual(refusals, [(413, "Content Too Large: the limit is 10 bytes", "/r")])
        self.assertEqual(asked, [("POST", "/r"), ("POST", "/r")])
        self.assertEqual(len(echo), 1)

    def test_a_refused_body_sent_anyway_is_drained_so_the_refusal_is_read(self) -> None:
        server, echo, _, _ = start(self, body_limit=10)
        raw = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
        self.assertEqual(refused(self, server, raw).status, 413)
        self.assertEqual(echo, [])

    def test_chunked_bodies_are_411_and_chunked_with_a_length_is_400(self) -> None:
        server, echo, _, _ = start(self)
        chunked = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        self.assertEqual(refused(self, server, chunked).status, 411)
        both = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello"
        self.assertEqual(refused(self, server, both).status, 400)
        self.assertEqual(echo, [])

    def test_expect_100_continue_gets_an_interim_answer_before_the_body_is_sent(self) -> None:
        server, echo, _, _ = start(self)
        client = Client(self, server).send(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
        )
        self.assertEqual(client.reply().status, 100)
        self.assertEqual(client.send(b"hello").reply().status, 200)
        self.assertEqual(echo[0].body, b"hello")

    def test_a_request_without_content_length_has_an_empty_body(self) -> None:
        server, echo, _, _ = start(self)
        self.assertEqual(Client(self, server).request("POST").reply().status, 200)
        self.assertEqual(echo[0].body, b"")


class FramingTest(unittest.TestCase):
    def test_bare_lf_line_endings_are_400_at_once(self) -> None:
        # A head deadline far beyond the guard: only the line-ending check can answer.
        server, echo, refusals, log = start(self, limits=Limits(head_timeout=600))
        self.assertEqual(refused(self, server, b"GET / HTTP/1.1\nHost: x\n").status, 400)
        self.assertEqual(refusals, [(400, "Bad Request: lines must end with CRLF", None)])
        self.assertEqual((log, echo), ([], []))

    def test_a_line_ending_is_bare_exactly_when_an_lf_or_cr_stands_outside_a_crlf(self) -> None:
        for data in (b"", b"a\r\nb\r\n", b"a\r\nb\r", b"\r\n\r\n", b"a\r"):
            with self.subTest(data=data):
                self.assertFalse(hs.has_bare_line_ending(data))
        for data in (b"a\nb", b"a\rb", b"a\r\r\n", b"a\r\n\n", b"\n\r", b"a\r\r", b"\n"):
            with self.subTest(data=data):
                self.assertTrue(hs.has_bare_line_ending(data))

    def test_a_bare_cr_is_400_at_once(self) -> None:
        server, echo, _, _ = start(self, limits=Limits(head_timeout=600))
        self.assertEqual(refused(self, server, b"GET / HTTP/1.1\rHost: x").status, 400)
        self.assertEqual(echo, [])

    def test_an_absolute_form_target_reaches_the_app_as_its_path(self) -> None:
        server, echo, _, _ = start(self)
        client = Client(self, server)
        reply = client.request("POST", f"http://{client.host}/mcp?a=1", b"{}").reply()
        self.assertEqual((reply.status, echo[0].target), (200, "/mcp?a=1"))
        self.assertEqual(client.request("GET", f"http://{client.host}").reply().status, 200)
        self.assertEqual(echo[1].target, "/")

    def test_an_absolute_form_target_for_another_authority_is_400(self) -> None:
        server, echo, _, _ = start(self)
        host = f"{server.address[0]}:{server.address[1]}"
        for target in ("http://evil.example/mcp", f"https://{host}/mcp", f"http://user@{host}/mcp", "*"):
            with self.subTest(target=target):
                raw = f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
                self.assertEqual(refused(self, server, raw).status, 400)
        self.assertEqual(echo, [])

    def test_a_head_of_exactly_the_byte_limit_is_served_and_one_byte_more_is_431(self) -> None:
        server, echo, _, _ = start(self)

        def head(size: int) -> bytes:
            start_ = b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: "
            return start_ + b"p" * (size - len(start_)) + b"\r\n\r\n"

        self.assertEqual(Client(self, server).send(head(hs.MAX_HEADER_BYTES)).reply().status, 200)
        self.assertEqual(refused(self, server, head(hs.MAX_HEADER_BYTES + 1)).status, 431)
        self.assertEqual(len(echo), 1)

    def test_the_header_count_limit_is_served_and_one_more_is_431(self) -> None:
        server, echo, _, _ = start(self)

        def head(count: int) -> bytes:
            lines = "".join(f"X-H{i}: v\r\n" for i in range(count - 1))
            return f"GET / HTTP/1.1\r\nHost: x\r\n{lines}\r\n".encode()

        self.assertEqual(Client(self, server).send(head(hs.MAX_HEADER_COUNT)).reply().status, 200)
        self.assertEqual(refused(self, server, head(hs.MAX_HEADER_COUNT + 1)).status, 431)
        self.assertEqual(len(echo), 1)

    def test_malformed_heads_are_400_and_reach_no_app(self) -> None:
        server, echo, _, log = start(self)
        for raw in (
            b"GET / HTTP/1.1\r\n\r\n",  # no Host
            b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nX-A : b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nX-A: b\r\n folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nX-A: b\x00c\r\n\r\n",
            b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n",  # four parts
            b"GET /\r\nHost: x\r\n\r\n",  # two parts
            b"GET /a\x7fb HTTP/1.1\r\nHost: x\r\n\r\n",  # a control character in the target
            b"GET /caf\xe9 HTTP/1.1\r\nHost: x\r\n\r\n",  # a byte outside ASCII in the target
            b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
            b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n",
        ):
            with self.subTest(raw=raw):
                self.assertEqual(refused(self, server, raw).status, 400)
        self.assertEqual((log, echo), ([], []))

    def test_a_header_line_is_a_token_a_colon_and_a_value_without_controls_but_tab(self) -> None:
        start_line = b"GET / HTTP/1.1\r\nHost: x\r\n"
        self.assertEqual(hs.parse_head(start_line + b"X-A: a\tb")[3][1], ("x-a", "a\tb"))
        self.assertEqual(hs.parse_head(start_line + b"X-A: caf\xe9")[3][1], ("x-a", "caf\xe9"))  # obs-text, as latin-1
        self.assertEqual(hs.parse_head(start_line + b"X-A:")[3][1], ("x-a", ""))
        for line in (b":b", b"X-A", b"X A: b", b"X-A: b\x7f", b"X-A: b\x1f", b"X-A: b\rc", b"X-\xe9: b"):
            with self.subTest(line=line):
                with self.assertRaises(hs.Refusal) as caught:
                    hs.parse_head(start_line + line)
                self.assertEqual(caught.exception.status, 400)

    def test_http_1_0_without_host_is_served_and_closed(self) -> None:
        server, echo, _, _ = start(self)
        client = Client(self, server).send(b"GET /old HTTP/1.0\r\n\r\n")
        reply = client.reply()
        self.assertEqual((reply.status, reply.headers.get("connection")), (200, "close"))
        self.assertTrue(client.at_eof())
        self.assertEqual(echo[0].version, "HTTP/1.0")

    def test_stray_crlf_before_a_request_is_ignored(self) -> None:
        server, echo, _, _ = start(self)
        self.assertEqual(Client(self, server).send(b"\r\n\r\nGET /s HTTP/1.1\r\nHost: x\r\n\r\n").reply().status, 200)
        self.assertEqual(echo[0].target, "/s")

    def test_up_to_the_empty_line_limit_is_ignored_even_split_across_reads_and_one_more_is_400(self) -> None:
        server, echo, refusals, _ = start(self)
        request = b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n"
        client = Client(self, server)
        for _ in range(hs.MAX_EMPTY_LINES):
            client.send(b"\r\n")  # one read each, most likely: the count carries over
        self.assertEqual(client.send(request).reply().status, 200)
        # The count starts again for the next request on the same connection.
        self.assertEqual(client.send(b"\r\n" * hs.MAX_EMPTY_LINES + request).reply().status, 200)
        reply = refused(self, server, b"\r\n" * (hs.MAX_EMPTY_LINES + 1) + request)
        self.assertEqual(reply.status, 400)
        self.assertEqual(len(echo), 2)
        self.assertEqual(
            refusals, [(400, f"Bad Request: more than {hs.MAX_EMPTY_LINES} empty lines before the request line", None)]
        )

    def test_a_stray_crlf_flood_is_refused_at_once_and_not_read_through(self) -> None:
        server, echo, refusals, _ = start(self)
        client = Client(self, server)
        client.sock.sendall(b"\r\n" * 32768)  # 64 KiB of empty lines and nothing else
        self.assertEqual(client.reply().status, 400)  # answered without waiting for the head deadline
        self.assertEqual(echo, [])
        self.assertEqual([status for status, _, _ in refusals], [400])

    def test_skipped_empty_lines_count_toward_the_head_size_limit(self) -> None:
        server, echo, _, _ = start(self)
        lines = b"\r\n" * hs.MAX_EMPTY_LINES

        def head(size: int) -> bytes:
            start_ = b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: "
            return start_ + b"p" * (size - len(start_)) + b"\r\n\r\n"

        self.assertEqual(Client(self, server).send(lines + head(hs.MAX_HEADER_BYTES - len(lines))).reply().status, 200)
        self.assertEqual(refused(self, server, lines + head(hs.MAX_HEADER_BYTES - len(lines) + 1)).status, 431)
        self.assertEqual(len(echo), 1)

    def test_pipelined_requests_are_answered_in_order_one_at_a_time(self) -> None:
        active, most = [0], [0]
        lock = threading.Lock()

        def app(request: Request) -> Response:
            with lock:
                active[0] += 1
                most[0] = max(most[0], active[0])
            with lock:
                active[0] -= 1
            return Response(200, [], request.target.encode())

        server, _, _, _ = start(self, app)
        client = Client(self, server).send(b"".join(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(5)))
        self.assertEqual([client.reply().body for _ in range(5)], [b"/%d" % i for i in range(5)])
        self.assertEqual(most[0], 1)

    def test_keep_alive_serves_many_requests_and_connection_close_ends_it(self) -> None:
        server, echo, _, _ = start(self)
        client = Client(self, server)
        for i in range(3):
            self.assertEqual(client.request("GET", f"/{i}").reply().headers.get("connection"), None)
        reply = client.request("GET", "/last", extra="Connection: close\r\n").reply()
        self.assertEqual((reply.status, reply.headers.get("connection")), (200, "close"))
        self.assertTrue(client.at_eof())
        self.assertEqual(len(echo), 4)

    def test_a_head_request_gets_the_length_but_no_body(self) -> None:
        server, _, _, _ = start(self)
        client = Client(self, server)
        reply = client.request("HEAD", "/h").reply("HEAD")
        self.assertEqual((reply.status, reply.headers["content-length"]), (200, str(len(b"HEAD /h "))))
        self.assertEqual(client.request("GET", "/g").reply().body, b"GET /g ")  # no stray body bytes


class AppErrorTest(unittest.TestCase):
    def test_an_app_error_is_500_from_the_refuse_hook_and_one_logged_error(self) -> None:
        def app(request: Request) -> Response:
            raise RuntimeError("boom")

        # A head deadline far beyond the guard: only the engine's own close ends the connection.
        server, _, refusals, log = start(self, app, limits=Limits(head_timeout=600))
        reply = refused(self, server, b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual((reply.status, reply.body), (500, b"refused 500"))
        self.assertEqual(refusals, [(500, "Internal Server Error", "/x")])
        self.assertEqual(log[0], "internal error in app (GET): RuntimeError")
        self.assertEqual(len(log), 2)
        self.assertIn("RuntimeError: boom", log[1])

    def test_app_headers_cannot_split_the_response(self) -> None:
        server, _, _, _ = start(self, lambda request: Response(200, [("X-A", "b\r\nSet-Cookie: x=1")], b""))
        reply = refused(self, server, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(reply.status, 500)
        self.assertNotIn("set-cookie", reply.headers)

    def test_a_stream_whose_headers_would_split_the_response_is_a_500_that_closes_the_connection(self) -> None:
        closed = threading.Event()

        def app(request: Request) -> StreamResponse:
            return StreamResponse(200, [("X-A", "b\r\nSet-Cookie: x=1")], started_stream(closed))

        # A head deadline far beyond the guard: only the engine's own close ends the connection.
        server, _, refusals, log = start(self, app, limits=Limits(head_timeout=600))
        reply = refused(self, server, b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual((reply.status, reply.body), (500, b"refused 500"))
        self.assertNotIn("set-cookie", reply.headers)
        self.assertEqual(refusals, [(500, "Internal Server Error", "/s")])
        self.assertTrue(closed.is_set())
        self.assertEqual(log[0], "internal error in app (GET): ValueError")


class StreamTest(unittest.TestCase):
    def test_a_stream_delivers_its_chunks_in_order_and_the_connection_stays_usable(self) -> None:
        def app(request: Request) -> Response | StreamResponse:
            if request.target == "/stream":
                return StreamResponse(
                    200, [("Content-Type", "text/event-stream")], iter([b"one ", b"", b"two ", b"three"])
                )
            return Response(200, [], b"after")

        server, _, _, _ = start(self, app)
        client = Client(self, server)
        reply = client.request("GET", "/stream").reply()
        self.assertEqual((reply.headers["transfer-encoding"], reply.body), ("chunked", b"one two three"))
        self.assertNotIn("content-length", reply.headers)
        self.assertEqual(client.request("GET", "/next").reply().body, b"after")

    def test_a_client_that_disconnects_sets_gone_and_the_stream_is_closed(self) -> None:
        closed, saw_gone = threading.Event(), []

        def events(request: Request):
            try:
                yield b"first"
                saw_gone.append(request.gone.wait(GUARD))
                yield b"never delivered"
            finally:
                closed.set()

        server, _, _, _ = start(self, lambda request: StreamResponse(200, [], events(request)))
        client = Client(self, server).request("GET", "/events")
        self.assertTrue(client.file.readline().startswith(b"HTTP/1.1 200"))
        while client.file.readline() != b"\r\n":
            pass
        self.assertEqual(client.file.readline(), b"5\r\n")
        self.assertEqual(client.file.read(5), b"first")
        client.close()
        self.assertTrue(closed.wait(GUARD))
        self.assertEqual(saw_gone, [True])

    def test_a_stream_that_fails_midway_is_cut_short_and_logged(self) -> None:
        def broken():
            yield b"part"
            raise ValueError("stream bug")

        server, _, _, log = start(self, lambda request: StreamResponse(200, [], broken()))
        client = Client(self, server).request()
        with self.assertRaises(ValueError):
            client.reply()  # the terminating chunk never comes: an empty line is not a size
        self.assertEqual(log[0], "internal error in stream (GET): ValueError")


class HeaderNamesTest(unittest.TestCase):
    def test_the_app_gets_header_names_lower_cased_and_values_as_sent(self) -> None:
        server, echo, _, _ = start(self)
        Client(self, server).send(b"GET / HTTP/1.1\r\nHOST: x\r\nX-Mixed-Case: Some Value\r\n\r\n").reply()
        self.assertEqual(echo[0].headers, [("host", "x"), ("x-mixed-case", "Some Value")])


class InlineTest(unittest.TestCase):
    """Requests the app declares `inline` are answered on the loop thread, the rest on workers."""

    def threads_app(self) -> tuple[list[str], Any]:
        seen: list[str] = []

        def app(request: Request) -> Response:
            seen.append(threading.current_thread().name)
            return Response(200, [], request.target.encode())

        return seen, app

    def test_an_inline_request_is_answered_on_the_loop_and_any_other_on_a_worker(self) -> None:
        seen, app = self.threads_app()
        server, _, _, _ = start(self, app, inline=lambda request: request.target == "/quick")
        client = Client(self, server)
        self.assertEqual(client.request("GET", "/quick").reply().body, b"/quick")
        self.assertEqual(client.request("GET", "/slow").reply().body, b"/slow")
        self.assertEqual(client.request("GET", "/quick").reply().body, b"/quick")
        self.assertTrue(seen[0].endswith("(serve_forever)"), seen[0])  # the thread running the loop
        self.assertTrue(seen[1].startswith("http-worker-"))
        self.assertEqual(seen[2], seen[0])

    def test_without_the_hook_every_request_goes_to_a_worker(self) -> None:
        seen, app = self.threads_app()
        server, _, _, _ = start(self, app)
        Client(self, server).request("GET", "/quick").reply()
        self.assertTrue(seen[0].startswith("http-worker-"))

    def test_a_thousand_pipelined_inline_requests_are_answered_in_order_without_recursion(self) -> None:
        # Answered on the loop, each response's end would start the next request: with a
        # thousand of them buffered, a recursive loop would hit Python's recursion limit.
        server, echo, _, log = start(self, inline=lambda request: True)
        client = Client(self, server)
        count = 1000
        client.send(b"".join(f"GET /{k} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for k in range(count)))
        bodies = [client.reply().body for _ in range(count)]
        self.assertEqual(bodies, [f"GET /{k} ".encode() for k in range(count)])
        self.assertEqual(log, [])

    def test_a_slow_pipelining_client_does_not_delay_another_client_behind_its_whole_batch(self) -> None:
        # One request per connection per turn of the loop: the second client is answered
        # while the first one's batch is still being worked through.
        order: list[str] = []
        first_started = threading.Event()
        release = threading.Event()

        def app(request: Request) -> Response:
            order.append(request.target)
            if request.target == "/a0":
                first_started.set()
                release.wait(GUARD)  # holds the loop: the batch and the other client queue up
            return Response(200, [], b"")

        server, _, _, _ = start(self, app, inline=lambda request: True)
        a, b = Client(self, server), Client(self, server)
        a.send(b"".join(f"GET /a{k} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for k in range(50)))
        self.assertTrue(first_started.wait(GUARD))
        b.request("GET", "/b")
        release.set()
        self.assertEqual(b.reply().status, 200)
        for _ in range(50):
            a.reply()
        self.assertLess(order.index("/b"), order.index("/a49"))

    def test_a_stream_given_to_an_inline_request_is_a_500_and_the_stream_is_closed(self) -> None:
        closed = threading.Event()
        server, _, refusals, log = start(
            self,
            lambda request: StreamResponse(200, [], started_stream(closed)),
            inline=lambda request: True,
            limits=Limits(head_timeout=600),
        )
        reply = refused(self, server, b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(reply.status, 500)
        self.assertTrue(closed.is_set())
        self.assertEqual(log[0], "internal error in app (GET): TypeError")

    def test_an_inline_hook_that_fails_is_logged_and_the_request_still_answered_by_a_worker(self) -> None:
        seen, app = self.threads_app()

        def hook(request: Request) -> bool:
            raise KeyError("hook bug")

        server, _, _, log = start(self, app, inline=hook)
        self.assertEqual(Client(self, server).request("GET", "/x").reply().status, 200)
        self.assertTrue(seen[0].startswith("http-worker-"))
        self.assertEqual(log[0], "internal error in inline (GET): KeyError")


def wait_until(condition: Any) -> bool:
    """Poll `condition` (state only the loop thread changes) until true or GUARD passes."""
    deadline = time.monotonic() + GUARD
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class ReadAheadTest(unittest.TestCase):
    """What the engine holds per connection: bounded by the connection's state, not by a recv size."""

    def test_bytes_sent_ahead_during_a_request_are_held_only_up_to_the_pending_limit(self) -> None:
        inside, release = threading.Event(), threading.Event()

        def app(request: Request) -> Response:
            inside.set()
            release.wait(GUARD)
            return Response(200, [], request.target.encode())

        server, _, _, _ = start(self, app)
        self.addCleanup(release.set)
        client = Client(self, server)
        pipelined = b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n"
        client.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n" + pipelined * 3000)  # ~100 kB sent ahead
        self.assertTrue(inside.wait(GUARD))
        (conn,) = server._conns.values()
        # The loop stops reading once the pending bytes reach the limit; the rest stays in the kernel.
        self.assertTrue(wait_until(lambda: conn.events == 0))
        self.assertLessEqual(len(conn.buffer), hs.MAX_PENDING_BYTES)
        self.assertGreater(len(conn.buffer), 0)  # it did read ahead (EOF would be seen)
        release.set()
        self.assertEqual(client.reply().body, b"/slow")
        self.assertEqual(client.reply().body, b"/next")  # nothing sent ahead was lost

    def test_after_a_large_body_the_connection_keeps_a_small_buffer(self) -> None:
        server, echo, _, _ = start(self, body_limit=70000)
        client = Client(self, server)
        self.assertEqual(client.request("POST", "/big", body=b"b" * 65536).reply().status, 200)
        self.assertEqual(len(echo[0].body), 65536)
        (conn,) = server._conns.values()
        self.assertTrue(wait_until(lambda: conn.state == hs.READ_HEAD))
        self.assertLess(sys.getsizeof(conn.buffer), 1024)


class WorkerPoolTest(unittest.TestCase):
    def test_a_server_that_answers_everything_on_the_loop_starts_no_worker(self) -> None:
        server, echo, _, _ = start(self, inline=lambda request: True)
        client = Client(self, server)
        for k in range(5):
            self.assertEqual(client.request("GET", f"/{k}").reply().status, 200)
        self.assertEqual((server.workers, len(echo)), (0, 5))

    def test_requests_one_after_another_are_answered_by_one_worker(self) -> None:
        seen: list[str] = []

        def app(request: Request) -> Response:
            seen.append(threading.current_thread().name)
            return Response(200, [], b"")

        server, _, _, _ = start(self, app)
        client = Client(self, server)
        for k in range(10):
            self.assertEqual(client.request("GET", f"/{k}").reply().status, 200)
        self.assertEqual((server.workers, len(set(seen))), (1, 1))

    def test_workers_start_as_requests_wait_and_never_beyond_the_limit(self) -> None:
        inside = threading.Semaphore(0)
        release = threading.Event()

        def app(request: Request) -> Response:
            inside.release()
            release.wait(GUARD)
            return Response(200, [], request.target.encode())

        dispatched = threading.Semaphore(0)

        def to_a_worker(request: Request) -> bool:
            dispatched.release()  # called by the loop just before it hands the request over
            return False

        server, _, _, _ = start(self, app, limits=Limits(workers=2), inline=to_a_worker)
        self.assertEqual(server.workers, 0)
        clients = [Client(self, server) for _ in range(3)]
        for k, client in enumerate(clients):
            client.request("GET", f"/{k}")
        self.assertTrue(all(dispatched.acquire(timeout=GUARD) for _ in range(3)))
        self.assertTrue(inside.acquire(timeout=GUARD) and inside.acquire(timeout=GUARD))  # two requests in the app
        self.assertEqual(server.workers, 2)  # the third, handed over while both were busy, waits: no third thread
        release.set()
        self.assertEqual(sorted(client.reply().body for client in clients), [b"/0", b"/1", b"/2"])
        self.assertEqual(server.workers, 2)


class ShutdownTest(unittest.TestCase):
    def test_a_request_in_flight_gets_its_full_response_and_new_connections_are_refused(self) -> None:
        entered, release = threading.Event(), threading.Event()

        def app(request: Request) -> Response:
            entered.set()
            release.wait(GUARD)
            return Response(200, [], b"committed")

        log = Log("shutting down")
        server, _, _, _ = start(self, app, log=log)
        self.addCleanup(release.set)
        idle = Client(self, server)
        busy = Client(self, server).request("POST", "/delete", b"{}")
        self.assertTrue(entered.wait(GUARD))
        stopper = threading.Thread(target=server.shutdown, args=(hs.SHUTDOWN_GRACE_SECONDS,))
        stopper.start()
        self.addCleanup(stopper.join, GUARD)
        self.assertTrue(log.seen.wait(GUARD))
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection(server.address, timeout=GUARD).close()
        self.assertTrue(idle.at_eof())
        release.set()
        reply = busy.reply()
        self.assertEqual((reply.status, reply.body, reply.headers.get("connection")), (200, b"committed", "close"))
        stopper.join(GUARD)
        self.assertFalse(stopper.is_alive())
        self.assertEqual(log, ["shutting down: stopped accepting; 1 request(s) in flight"])

    def test_a_request_still_running_after_the_grace_period_is_cut(self) -> None:
        entered, release = threading.Event(), threading.Event()

        def app(request: Request) -> Response:
            entered.set()
            release.wait(GUARD)
            return Response(200, [], b"late")

        server, _, _, _ = start(self, app)
        self.addCleanup(release.set)
        busy = Client(self, server).request()
        self.assertTrue(entered.wait(GUARD))
        server.shutdown(0.05)
        self.assertTrue(busy.at_eof())


if __name__ == "__main__":
    unittest.main()
