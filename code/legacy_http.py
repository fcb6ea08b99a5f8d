"""Legacy 2025-11-25 Streamable HTTP beside the modern endpoint: sessions for `initialize`-era clients.

A dual-era endpoint (2026-07-28 versioning: "An `initialize` request selects legacy
semantics, scoped to ... the session (HTTP)"). `McpEndpoint` asks `LegacyHttp.route()`
about each POST (and each DELETE carrying a session id) once the HTTP layer has checked
Host, Origin, the bearer token and the body's framing; `route()` returns None for
everything that is not legacy, and the core answers it exactly as without this module:

    modern `_meta` in params          modern, statelessly; Mcp-Session-Id is ignored
    initialize (a request)            legacy: a new session, its id in Mcp-Session-Id
    Mcp-Session-Id present            legacy, on that session (400 if repeated, 404 if
                                      unknown, ended, expired or another principal's)
    MCP-Protocol-Version 2025-11-25,  legacy without a session: 400
    or a JSON-RPC response, no id
    anything else                     the core's (unchanged) answer

On a session, requests are served by one `legacy.LegacySession` (the same core as stdio):
ping, tools/list and the rest as JSON; tools/call as JSON when it needs no form, else as
an event stream on the POST carrying each `elicitation/create`, then the result. The
client POSTs its answers (JSON-RPC responses) with the session id: 202. A session is
bound to the principal whose token created it. GET (a standalone stream) stays 405.
Standard library only.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import http_server
import legacy
import main
import frame
import streamable_http
from streamable_http import JSON, SSE, header_values, json_error_body, sse_event

__all__ = ["LegacyHttp"]

# Limits. Each bounds what legacy clients can make the server hold.
# Beyond this, one session of that principal ends (see eviction_order). Command-line
# clients that exit without DELETE leave their sessions until SESSION_IDLE_SECONDS, so the
# bound is what lets a host's idle session outlive them: 255 such runs in 30 minutes
# (one every 7 s). A session holds about 2 KB, so a principal's sessions hold at most
# about 0.5 MB (docs/measure_legacy_sessions.py).
MAX_SESSIONS_PER_PRINCIPAL = 256
SESSION_IDLE_SECONDS = 30 * 60.0  # a session unused this long (and with no call in flight) ends
MAX_PENDING_PER_SESSION = legacy.MAX_PENDING_ELICITATIONS  # forms awaiting an answer in one session
# An open stream holds one engine worker; legacy streams may take at most half of them,
# so modern requests (and the POSTs that answer the forms) always find a free worker.
MAX_LEGACY_STREAMS = http_server.WORKER_THREADS // 2
# One principal's share of them: a principal holding unanswered forms cannot lock every
# other principal out of legacy notes_delete (the server-wide slots would be all theirs).
MAX_LEGACY_STREAMS_PER_PRINCIPAL = MAX_LEGACY_STREAMS - MAX_LEGACY_STREAMS // 4
STREAM_ANSWER_TIMEOUT_SECONDS = 120.0  # a POST's stream waits this long for the client's answer
SESSION_ID_BYTES = 32  # randomness in a session id (token_urlsafe: 43 visible ASCII characters)

SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"

STREAMS_BUSY = (
    f"Too many forms are open on this server (at most {MAX_LEGACY_STREAMS}); nothing was changed. Try again."
)
PRINCIPAL_STREAMS_BUSY = (
    f"Too many of your forms are open (at most {MAX_LEGACY_STREAMS_PER_PRINCIPAL}); "
    "nothing was changed. Answer or cancel one, then try again."
)


class _Session:
    """One HTTP legacy session: the shared core, its owner and its idle clock."""

    def __init__(self, session_id: str, core: legacy.LegacySession, now: float) -> None:
        self.id = session_id
        self.core = core
        self.last_used = now
        self.active = 0  # requests and streams in flight (the session does not expire under them)
        self.used = False  # served more than the handshake (initialize, notifications/initialized)


def eviction_order(session: _Session) -> tuple[bool, bool, float]:
    """Sort key of a principal's sessions, the first to end first: idle ones that never did more than initialize, oldest first."""
    # Short command-line runs that exit without DELETE must not push out a host's
    # long-lived session: handshake-only sessions go first, then those that served a
    # request, least recently used first (an idle host is among these: the bound is what
    # keeps it, see MAX_SESSIONS_PER_PRINCIPAL), and a session with a call in flight last.
    return (session.active > 0, session.used, session.last_used)


def _refusal(status: int, message: str) -> http_server.Response:
    """A legacy transport refusal: an id-less JSON-RPC error with the HTTP status."""
    return http_server.Response(status, list(JSON), json_error_body(message))


def _json(message: dict[str, Any], headers: Sequence[tuple[str, str]] = ()) -> http_server.Response:
    # On a legacy session every JSON-RPC outcome is 200: a 404 would tell the client its
    # session is gone, a 400 that its request never arrived.
    return http_server.Response(200, [*JSON, *headers], frame.encode_message(message))


ACCEPTED = http_server.Response(202, [], b"")
MISSING_SESSION = "Bad Request: Mcp-Session-Id is required (send initialize first)"
NO_SESSION = "Not Found: no such session (it ended or expired); send initialize again"


class LegacyHttp:
    """Every legacy HTTP session of one server, and the router that tells them from modern requests."""

    def __init__(
        self,
        server: frame.Server,
        *,
        clock: Callable[[], float] = time.monotonic,
        answer_timeout: float = STREAM_ANSWER_TIMEOUT_SECONDS,
        log: Callable[[str], None] = main.stderr_log,
    ) -> None:
        self.server = server
        self._clock = clock
        self._answer_timeout = answer_timeout
        self._log = log
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._streams = threading.BoundedSemaphore(MAX_LEGACY_STREAMS)
        self._streams_of: dict[str, int] = {}  # open stream slots per principal (none: absent)

    # ------------------------------------------------------------------ routing

    def route(self, request: http_server.Request, principal: str) -> http_server.Response | http_server.StreamResponse | None:
        """The legacy answer to an authenticated POST or DELETE, or None: the modern path serves it."""
        session_ids = header_values(request.headers, SESSION_HEADER)
        if request.method == "DELETE":
            return self._delete(session_ids, principal) if session_ids else None
        if not streamable_http.may_be_legacy(request):
            return None  # decided before decoding anything: the modern hot path
        versions = header_values(request.headers, VERSION_HEADER)
        legacy_version = any(value in legacy.LEGACY_VERSIONS for value in versions)
        try:
            message = frame.decode_message(request.body)
        except main.McpError:
            return None  # parse and size errors are the same in both eras: the core answers
        if not isinstance(message, dict) or legacy.is_modern(message):
            return None  # modern: served statelessly, whatever Mcp-Session-Id says
        if message.get("method") == "initialize" and "id" in message:
            return self._initialize(message, principal)
        if not session_ids:
            if legacy_version or "method" not in message:
                return _refusal(400, MISSING_SESSION)
            return None
        if len(session_ids) != 1:
            return _refusal(400, "Bad Request: exactly one Mcp-Session-Id header is allowed")
        session = self._acquire(session_ids[0], principal)
        if session is None:
            return _refusal(404, NO_SESSION)
        try:
            if any(value != session.core.version for value in versions):
                return _refusal(400, f"Bad Request: this session speaks MCP-Protocol-Version {session.core.version}")
            return self._serve(session, message, request.gone)
        finally:
            self._release(session)

    def _serve(self, session: _Session, message: dict[str, Any], gone: threading.Event) -> http_server.Response | http_server.StreamResponse:
        """One legacy message on its session."""
        core = session.core
        if message.get("method") != "notifications/initialized":
            session.used = True
        if "method" not in message:
            core.on_response(message)
            return ACCEPTED
        try:
            envelope = main.parse_envelope(message)
        except main.McpError as exc:
            return _json(main.error_response(main.read_id(message), exc))
        if envelope.id is None:
            core.on_notification(envelope)
            return ACCEPTED
        if envelope.method == "tools/call":
            return self._call(session, envelope, gone)
        return _json(core.answer(envelope))

    # ------------------------------------------------------------------ sessions

    def _initialize(self, message: dict[str, Any], principal: str) -> http_server.Response:
        """initialize: a new session bound to `principal` (registered only if the handshake succeeds)."""
        core = legacy.LegacySession(self.server, principal, self._log, self._answer_timeout)
        try:
            envelope = main.parse_envelope(message)
        except main.McpError as exc:
            return _json(main.error_response(main.read_id(message), exc))
        response = core.answer(envelope)
        if "error" in response:
            return _json(response)
        # Unguessable: the id is the session's only name, and a guessed one would be
        # refused anyway unless the guesser also holds the owner's token.
        session = _Session(secrets.token_urlsafe(SESSION_ID_BYTES), core, self._clock())
        evicted: list[_Session] = []
        with self._lock:
            evicted += self._expired_locked()
            mine = sorted((s for s in self._sessions.values() if s.core.principal == principal), key=eviction_order)
            # A client that crashes never sends DELETE: refusing new sessions would lock its
            # principal out until expiry, so one gives way instead (see eviction_order).
            while len(mine) >= MAX_SESSIONS_PER_PRINCIPAL:
                evicted.append(self._sessions.pop(mine.pop(0).id))
            self._sessions[session.id] = session
        for old in evicted:
            old.core.close()
        return _json(response, [(SESSION_HEADER, session.id)])

    def _expired_locked(self) -> list[_Session]:
        """Remove and return every idle session past SESSION_IDLE_SECONDS (lock held)."""
        now = self._clock()
        expired = [s for s in self._sessions.values() if s.active == 0 and now - s.last_used > SESSION_IDLE_SECONDS]
        for session in expired:
            del self._sessions[session.id]
        return expired

    def _acquire(self, session_id: str, principal: str) -> _Session | None:
        """The live session `session_id` if `principal` owns it, marked in use; else None (404)."""
        with self._lock:
            session = self._sessions.get(session_id)
            # Another principal's session is answered exactly like an unknown one: a token
            # holder learns nothing about the sessions of others.
            if session is None or session.core.principal != principal:
                return None
            if session.active == 0 and self._clock() - session.last_used > SESSION_IDLE_SECONDS:
                del self._sessions[session_id]
                expired = session
            else:
                session.active += 1
                session.last_used = self._clock()
                return session
        expired.core.close()
        return None

    def _release(self, session: _Session) -> None:
        with self._lock:
            session.active -= 1
            session.last_used = self._clock()

    def stream_opened(self, session: _Session) -> None:
        """A call stream holds `session`: it does not expire until stream_closed."""
        with self._lock:
            session.active += 1

    def stream_closed(self, session: _Session) -> None:
        """A call stream ended: give back its stream slot and its hold on `session`."""
        self._give_stream(session.core.principal)
        self._release(session)

    def _delete(self, session_ids: list[str], principal: str) -> http_server.Response:
        """DELETE with Mcp-Session-Id: end that session (200), or 404 as for any unknown one."""
        if len(session_ids) != 1:
            return _refusal(400, "Bad Request: exactly one Mcp-Session-Id header is allowed")
        with self._lock:
            session = self._sessions.get(session_ids[0])
            if session is None or session.core.principal != principal:
                return _refusal(404, NO_SESSION)
            del self._sessions[session.id]
        session.core.close()  # a form still waiting wakes, and its stream ends unanswered
        return http_server.Response(200, [], b"")

    def session_count(self, principal: str | None = None) -> int:
        """How many sessions are live (for one principal, or for all)."""
        with self._lock:
            return sum(1 for s in self._sessions.values() if principal is None or s.core.principal == principal)

    def session(self, session_id: str) -> legacy.LegacySession | None:
        """The core of a live session (for tests and diagnostics)."""
        with self._lock:
            found = self._sessions.get(session_id)
            return found.core if found else None

    def close(self) -> None:
        """End every session (shutdown): waiting forms wake and their streams end."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            session.core.close()

    # ------------------------------------------------------------------ tools/call

    def _call(self, session: _Session, envelope: main.Envelope, gone: threading.Event) -> http_server.Response | http_server.StreamResponse:
        """tools/call: JSON when no message must reach the client first, else an event stream."""
        assert envelope.id is not None
        core = session.core
        # Each call may become a stream holding a worker: bounded before any work is done.
        refusal = self._take_stream(core.principal)
        if refusal is not None:
            return _json({"jsonrpc": "2.0", "id": envelope.id, "result": legacy.tool_error(refusal)})
        call = core.begin_call(envelope.id)
        if call is None:
            self._give_stream(core.principal)
            refusal = main.McpError(main.INVALID_REQUEST, "Invalid Request: id is in use by a call in progress")
            return _json(main.error_response(envelope.id, refusal))
        stream = CallStream(self, session, call, core.run_call(call, envelope.params, gone))
        try:
            first = stream.prime()
        except BaseException:
            stream.close()
            raise
        if first is None:  # complete at once: no stream needed
            response = stream.response
            stream.close()
            return _json(response) if response is not None else _refusal(404, NO_SESSION)  # ended meanwhile
        return http_server.StreamResponse(200, list(SSE), stream)


    def _take_stream(self, principal: str) -> str | None:
        """Take a stream slot for `principal`: None, or why not (its share, or the server's slots, are taken)."""
        with self._lock:
            mine = self._streams_of.get(principal, 0)
            if mine >= MAX_LEGACY_STREAMS_PER_PRINCIPAL:
                return PRINCIPAL_STREAMS_BUSY
            if not self._streams.acquire(blocking=False):
                return STREAMS_BUSY
            self._streams_of[principal] = mine + 1
        return None

    def _give_stream(self, principal: str) -> None:
        """Give back a slot taken by _take_stream."""
        with self._lock:
            left = self._streams_of[principal] - 1
            if left:
                self._streams_of[principal] = left
            else:
                del self._streams_of[principal]  # the table holds principals with a stream open only
            self._streams.release()


class CallStream:
    """The event stream of one legacy tools/call: its messages for the client, then its response.

    Holds a stream slot and keeps its session from expiring until closed; the engine
    closes it when the stream ends or the client goes away, and closing abandons the
    call: its pending form leaves the session's table and nothing is consumed.
    """

    def __init__(self, owner: LegacyHttp, session: _Session, call: legacy.LegacyCall, steps: legacy.CallSteps) -> None:
        self._owner = owner
        self._session = session
        self._call = call
        self._steps = steps
        self._first: dict[str, Any] | None = None
        self.response: dict[str, Any] | None = None
        self._done = False
        self._closed = False
        owner.stream_opened(session)

    def prime(self) -> dict[str, Any] | None:
        """Run the call to its first message for the client (kept for the stream), or to its end (None)."""
        self._first = self._step()
        return self._first

    def _step(self) -> dict[str, Any] | None:
        try:
            return next(self._steps)
        except StopIteration as stop:
            self._done = True
            self.response = stop.value if self._owner_may_answer() else None
            return None

    def _owner_may_answer(self) -> bool:
        return self._session.core.end_call(self._call)

    def __iter__(self) -> CallStream:
        return self

    def __next__(self) -> bytes:
        if self._first is not None:
            message, self._first = self._first, None
            return sse_event(frame.encode_message(message))
        if self._done:
            if self.response is None:
                raise StopIteration
            message, self.response = self.response, None
            return sse_event(frame.encode_message(message))
        message = self._step()
        if message is None:
            return self.__next__()
        return sse_event(frame.encode_message(message))

    def close(self) -> None:
        """Abandon what is left of the call and give back its stream slot (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._steps.close()  # a pending form leaves the session's table here
        if not self._done:
            self._session.core.end_call(self._call)
        self._owner.stream_closed(self._session)

