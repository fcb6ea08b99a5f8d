"""The real transports for the lesson server: `main.py serve --stdio | --http`.

    python3 code/main.py serve --stdio [--config FILE] [--no-legacy]
    python3 code/main.py serve --http [--host 127.0.0.1] [--port 8765] [--config FILE] [--no-auth]
    ... [--db FILE]            notes and consumed confirmations in SQLite (code/sqlite_store.py)
    ... [--notes-dir DIR]...   real Markdown folders (code/markdown_store.py)

Both transports are thin: they turn bytes into `Server.handle_bytes()` calls, so every
protocol outcome (including the HTTP status of a JSON-RPC error) is decided by the core.
The HTTP layer decides only what happens before a message exists: the endpoint path and
method, DNS-rebinding checks (Host, Origin), the bearer token, the body's size, framing
and media type, and the bounds on connections and time.

Configuration comes from one JSON file (`--config`), checked strictly at start-up:
see CONFIG_FIELDS and PRINCIPAL_FIELDS. Signing keys come from the config's `keys` or
from NOTES_MCP_SECRET (hex, comma-separated, newest first). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import secrets
import signal
import socket
import socketserver
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Any

import connect
import legacy
import main

# =====================================================================================
# Limits and defaults (each bounds what one hostile client can make the server hold)
# =====================================================================================

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
ENDPOINT = "/mcp"
MAX_HEADER_BYTES = 16 * 1024  # request line plus every header line, before the body
MAX_HEADER_COUNT = 64  # header lines in one request
MAX_CONCURRENT_CONNECTIONS = 64  # connection handler threads; one more gets 503 at once
REQUEST_TIMEOUT_SECONDS = 10.0  # a whole request (or an idle keep-alive gap) must arrive in this
LISTEN_BACKLOG = 128  # pending connections the kernel queues before accept (50+ clients at once)
MIN_TOKEN_LENGTH = 16  # characters in a bearer token
MAX_TOKEN_LENGTH = 512
MAX_PRINCIPAL_NAME_LENGTH = 64

LOG_PREFIX = "notes-mcp"
EXIT_USAGE = 2  # bad command line, configuration or environment
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")

# RFC 6750 b64token: what a bearer token may contain (no spaces, quotes or controls).
_TOKEN_RE = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_HEX_RE = re.compile(r"(?:[0-9a-fA-F]{2})+")
# An origin is scheme://host[:port] with nothing after it.
_ORIGIN_RE = re.compile(r"(https?)://([a-z0-9.\-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?")
_LOCAL_ORIGIN_RE = re.compile(r"https?://(localhost|127\.0\.0\.1|\[::1\])(:[0-9]{1,5})?")
_HEADER_NAME_RE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE_BAD_RE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def say(line: str) -> None:
    """One line to stderr, prefixed; stdout belongs to the protocol."""
    print(f"{LOG_PREFIX}: {line}", file=sys.stderr, flush=True)


class Stop(BaseException):
    """SIGTERM or SIGINT: unwind and exit 0 (BaseException, so no `except Exception` eats it)."""


# =====================================================================================
# Configuration: one table of allowed keys, one validator per key
# =====================================================================================


class ConfigError(ValueError):
    """A configuration value that cannot be used; str() is one line naming the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {' '.join(problem.split())}")


def read_token(value: Any, field: str) -> str:
    """A bearer token: RFC 6750 characters, MIN_TOKEN_LENGTH..MAX_TOKEN_LENGTH long."""
    if not isinstance(value, str) or not _TOKEN_RE.fullmatch(value):
        raise ConfigError(field, "must be a string of letters, digits and -._~+/ (RFC 6750)")
    if not MIN_TOKEN_LENGTH <= len(value) <= MAX_TOKEN_LENGTH:
        raise ConfigError(field, f"must be {MIN_TOKEN_LENGTH}..{MAX_TOKEN_LENGTH} characters")
    return value


def read_workspaces(value: Any, field: str) -> list[str]:
    """A list of file:// workspace URIs, each one the core can parse."""
    if not isinstance(value, list):
        raise ConfigError(field, "must be a list of file:// URIs")
    for index, uri in enumerate(value):
        try:
            main.parse_file_uri(uri)
        except main.ScopeError as exc:
            raise ConfigError(f"{field}[{index}]", str(exc)) from None
    return list(value)


def read_path(value: Any, field: str) -> str:
    """A non-empty file system path (absolute is best: relative means the working directory)."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigError(field, "must be a non-empty path")
    return value


def read_paths(value: Any, field: str) -> list[str]:
    """A list of paths (see read_path)."""
    if not isinstance(value, list):
        raise ConfigError(field, "must be a list of folder paths")
    return [read_path(item, f"{field}[{index}]") for index, item in enumerate(value)]


# The keys one principal entry may have; a later extension adds its own (e.g. "notesDirs").
PRINCIPAL_FIELDS: dict[str, Callable[[Any, str], Any]] = {
    "token": read_token,
    "workspaces": read_workspaces,
    "notesDirs": read_paths,  # Markdown folders this principal may delete notes in (code/markdown_store.py)
}
REQUIRED_PRINCIPAL_FIELDS = ("token", "workspaces")


def read_principals(value: Any, field: str) -> dict[str, dict[str, Any]]:
    """{name: {"token": ..., "workspaces": [...]}}, at least one principal."""
    if not isinstance(value, dict) or not value:
        raise ConfigError(field, "must be an object with at least one principal")
    principals: dict[str, dict[str, Any]] = {}
    for name, entry in value.items():
        where = f"{field}.{name}"
        if not name or len(name) > MAX_PRINCIPAL_NAME_LENGTH or not name.isprintable():
            raise ConfigError(where, f"a principal name must be 1..{MAX_PRINCIPAL_NAME_LENGTH} printable characters")
        principals[name] = read_object(entry, where, PRINCIPAL_FIELDS, REQUIRED_PRINCIPAL_FIELDS)
    return principals


def read_principal_name(value: Any, field: str) -> str:
    """A principal's name (checked against `principals` once everything is read)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(field, "must be the name of a principal")
    return value


def read_notes(value: Any, field: str) -> list[main.Note]:
    """[{"id", "title", "uri", "revision"?}, ...] with unique ids."""
    if not isinstance(value, list):
        raise ConfigError(field, "must be a list of notes")
    notes: list[main.Note] = []
    seen: set[str] = set()
    for index, entry in enumerate(value):
        where = f"{field}[{index}]"
        raw = read_object(entry, where, NOTE_FIELDS, ("id", "title", "uri"))
        note = main.Note(raw["id"], raw["title"], raw["uri"], raw.get("revision", 0))
        try:
            main.check_note(note)
        except ValueError as exc:
            raise ConfigError(where, str(exc)) from None
        if note.id in seen:
            raise ConfigError(f"{where}.id", f"duplicate note id {note.id!r}")
        seen.add(note.id)
        notes.append(note)
    return notes


def read_string(value: Any, field: str) -> str:
    """Any string (checked in depth by whoever uses it)."""
    if not isinstance(value, str):
        raise ConfigError(field, "must be a string")
    return value


def read_revision(value: Any, field: str) -> int:
    """A non-negative integer."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(field, "must be a non-negative integer")
    return value


NOTE_FIELDS: dict[str, Callable[[Any, str], Any]] = {
    "id": read_string,
    "title": read_string,
    "uri": read_string,
    "revision": read_revision,
}


def read_port(value: Any, field: str) -> int:
    """A TCP port, 0..65535 (0 picks a free one)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 65535:
        raise ConfigError(field, "must be a port number 0..65535 (0 picks a free port)")
    return value


def read_ttl(value: Any, field: str) -> float:
    """Seconds a confirmation stays valid: finite, > 0, at most main.MAX_STATE_TTL_SECONDS."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(field, "must be a number of seconds")
    if not 0 < value <= main.MAX_STATE_TTL_SECONDS:
        raise ConfigError(field, f"must be in (0, {main.MAX_STATE_TTL_SECONDS:g}]")
    return float(value)


def read_keys(value: Any, field: str) -> list[bytes]:
    """Hex signing keys, newest first, each at least main.MIN_KEY_BYTES bytes."""
    if not isinstance(value, list) or not value:
        raise ConfigError(field, "must be a non-empty list of hex keys, newest first")
    keys = []
    for index, text in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(text, str) or not _HEX_RE.fullmatch(text):
            raise ConfigError(where, "must be an even number of hex digits")
        key = bytes.fromhex(text)
        if len(key) < main.MIN_KEY_BYTES:
            raise ConfigError(where, f"is {len(key)} bytes; a signing key needs at least {main.MIN_KEY_BYTES}")
        keys.append(key)
    return keys


def read_origins(value: Any, field: str) -> frozenset[str]:
    """Extra browser origins allowed to call the endpoint, as scheme://host[:port]."""
    if not isinstance(value, list):
        raise ConfigError(field, "must be a list of origins like https://app.example")
    for index, origin in enumerate(value):
        if not isinstance(origin, str) or not _ORIGIN_RE.fullmatch(origin.lower()):
            raise ConfigError(f"{field}[{index}]", "must be scheme://host[:port] with scheme http or https")
    return frozenset(origin.lower() for origin in value)


# Every key the config file may have. An extension adds one line here and reads its
# value in build_store() (e.g. "db": read_string for an SQLite file).
CONFIG_FIELDS: dict[str, Callable[[Any, str], Any]] = {
    "principals": read_principals,
    "stdioPrincipal": read_principal_name,
    "notes": read_notes,
    "stateTtlSeconds": read_ttl,
    "keys": read_keys,
    "allowedOrigins": read_origins,
    "connectPort": read_port,  # stdio only: the loopback port of the connect pages (code/connect.py)
    "db": read_path,  # SQLite file: the notes store, or with notesDirs only the consumed confirmations
}
REQUIRED_CONFIG_FIELDS = ("principals",)


def read_object(
    value: Any, field: str, fields: dict[str, Callable[[Any, str], Any]], required: Sequence[str]
) -> dict[str, Any]:
    """Validate an object against a field table: unknown keys and missing required keys fail."""
    prefix = f"{field}." if field else ""
    if not isinstance(value, dict):
        raise ConfigError(field or "config", "must be a JSON object")
    for key in value:
        if key not in fields:
            raise ConfigError(prefix + key, f"unknown key (allowed: {', '.join(fields)})")
    for key in required:
        if key not in value:
            raise ConfigError(prefix + key, "is required")
    return {key: fields[key](item, prefix + key) for key, item in value.items()}


def parse_config(text: str) -> dict[str, Any]:
    """Parse and validate a config document; ConfigError names the first bad field."""
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        # Two spellings of one key: which one wins differs between JSON parsers.
        seen: dict[str, Any] = {}
        for key, item in pairs:
            if key in seen:
                raise ConfigError(key, "appears twice in one object")
            seen[key] = item
        return seen

    def no_constant(name: str) -> Any:
        raise ConfigError("config", f"{name} is not JSON")

    try:
        document = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError("config", f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    config = read_object(document, "", CONFIG_FIELDS, REQUIRED_CONFIG_FIELDS)
    principals = config["principals"]
    if "stdioPrincipal" not in config:
        if len(principals) != 1:
            raise ConfigError("stdioPrincipal", "is required when there is more than one principal")
        config["stdioPrincipal"] = next(iter(principals))
    if config["stdioPrincipal"] not in principals:
        raise ConfigError("stdioPrincipal", f"{config['stdioPrincipal']!r} is not one of the principals")
    owners: dict[str, str] = {}
    for name, entry in principals.items():
        # One token for two principals would make "who is calling" ambiguous.
        if entry["token"] in owners:
            raise ConfigError(f"principals.{name}.token", f"is the same as the token of {owners[entry['token']]!r}")
        owners[entry["token"]] = name
    return config


def load_config(path: str) -> dict[str, Any]:
    """Read and validate the config file at `path` (see parse_config)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.__class__.__name__}") from None
    return parse_config(text)


def lesson_config() -> dict[str, Any]:
    """The no-config setup: the lesson fixture, one principal (`alice`), no token yet."""
    return {
        "principals": {main.LESSON_PRINCIPAL: {"token": None, "workspaces": [main.LESSON_WORKSPACE]}},
        "stdioPrincipal": main.LESSON_PRINCIPAL,
        "notes": main.lesson_notes(),
    }


def build_store(config: dict[str, Any], args: argparse.Namespace) -> main.NotesStore:
    """Markdown folders (any notesDirs), else SQLite ("db"), else memory; StartupError if unusable."""
    folders = [path for entry in config["principals"].values() for path in entry.get("notesDirs", [])]
    if not folders and "db" not in config:
        return main.MemoryNotesStore(config.get("notes", []), main.MemoryReplayStore(time.time))
    if folders and "notes" in config:
        raise ConfigError("notes", "cannot be combined with notesDirs or --notes-dir (the files are the notes)")
    # Imported only when configured: serving from memory starts faster without them, and
    # the folder store needs POSIX-only O_NOFOLLOW.
    import sqlite_store

    try:
        if folders:
            import markdown_store

            nonces = sqlite_store.open_store(config.get("db") or default_nonce_db(), clock=time.time)
            return markdown_store.MarkdownNotesStore(folders, nonces)
        # Seeded only when this creates the database: from "notes", or the lesson fixture without --config.
        return sqlite_store.open_store(config["db"], clock=time.time, seed_notes=config.get("notes", []))
    except sqlite_store.StoreError as exc:
        raise StartupError(str(exc)) from None


class StartupError(Exception):
    """A store that cannot be opened at start-up; str() is one line for the operator."""


def default_nonce_db() -> str:
    """The Markdown store's confirmation database: $XDG_STATE_HOME/notes-mcp/nonces.db."""
    state = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    folder = os.path.join(state, "notes-mcp")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create {folder} for the confirmation database: {exc.strerror}") from None
    return os.path.join(folder, "nonces.db")


def folder_grants(folders: Sequence[str]) -> list[str]:
    """A principal's notes folders as the workspace URIs the folder store spells them with."""
    if not folders:
        return []
    import markdown_store
    import sqlite_store

    try:
        return [main.format_file_uri(markdown_store.root_path(path)) for path in folders]
    except sqlite_store.StoreError as exc:
        raise StartupError(str(exc)) from None


def build_server(config: dict[str, Any], args: argparse.Namespace, keys: Sequence[bytes]) -> main.Server:
    """The core server for a validated config."""
    # A principal's notes folders are workspaces it may act on, spelled as the store spells them.
    grants = {
        name: entry["workspaces"] + folder_grants(entry.get("notesDirs", [])) for name, entry in config["principals"].items()
    }
    return main.Server(
        keys=keys,
        notes=build_store(config, args),
        policy=main.AuthorizationPolicy(grants),
        clock=time.time,
        state_ttl=config.get("stateTtlSeconds", main.DEFAULT_STATE_TTL_SECONDS),
        log=main.stderr_log,
    )


def signing_keys(config: dict[str, Any], environ: dict[str, str]) -> list[bytes]:
    """Keys from the config or NOTES_MCP_SECRET (not both); none: a random per-process key."""
    secret = environ.get("NOTES_MCP_SECRET", "")
    if "keys" in config and secret:
        raise ConfigError("keys", "set either the config's keys or NOTES_MCP_SECRET, not both")
    if secret:
        return read_keys([part.strip() for part in secret.split(",")], "NOTES_MCP_SECRET")
    if "keys" in config:
        return config["keys"]
    say(
        "warning: no signing key (NOTES_MCP_SECRET or the config's keys): using a random key for this "
        "process; requestState from it will not survive a restart or work on another instance"
    )
    return [secrets.token_bytes(main.MIN_KEY_BYTES)]


# =====================================================================================
# stdio: newline-delimited JSON on stdin/stdout
# =====================================================================================


def serve_stdio(server: main.Server, principal: str, legacy_enabled: bool = True) -> int:
    """Answer one JSON-RPC message per stdin line on stdout until EOF; returns the exit status."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # Only protocol messages may reach stdout: a stray print() anywhere now goes to stderr.
    sys.stdout = sys.stderr

    def write(line: bytes) -> None:
        try:
            stdout.write(line)
            stdout.flush()
        except BrokenPipeError:
            # The client is gone. Point fd 1 at /dev/null so the exit-time flush is quiet.
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
            raise

    # Every line goes through the legacy 2025-11-25 adapter (code/legacy.py): until a legacy
    # `initialize` it hands each line to server.handle_bytes(), and modern requests always.
    session = legacy.LegacyStdioSession(server, principal, write, server.log, enabled=legacy_enabled)
    limit = main.MAX_MESSAGE_BYTES + 1  # the content, or its newline, or one byte too many
    try:
        while True:
            line = stdin.readline(limit)
            if not line:
                return 0
            if not line.endswith(b"\n") and len(line) == limit:
                # An endless line would make us buffer without bound: keep only the first
                # `limit` bytes (enough for the core to refuse by size) and skip the rest.
                while (rest := stdin.readline(limit)) and not rest.endswith(b"\n"):
                    pass
            elif line.endswith(b"\n"):
                line = line[:-1]
            if not line.strip():
                continue
            try:
                session.feed(line)
            except BrokenPipeError:
                return 0
    finally:
        session.close()


# =====================================================================================
# Streamable HTTP: POST /mcp, one JSON response per request, no sessions, no SSE
# =====================================================================================


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
        self.tokens = main.BearerTokens(tokens)
        self.no_auth_principal = no_auth_principal
        self.allowed_hosts = allowed_hosts
        self.allowed_origins = allowed_origins
        self.request_timeout = request_timeout

    def principal(self, headers: Sequence[tuple[str, str]]) -> str:
        """The authenticated principal for this request, or a 401 refusal."""
        if self.no_auth_principal is not None:
            return self.no_auth_principal
        values = main.header_values(headers, "authorization")
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
            hosts = main.header_values(headers, "host")
            if len(hosts) != 1 or hosts[0].lower() not in self.allowed_hosts:
                raise HttpRefusal(403, "Forbidden: Host is not this server's loopback address")
        origins = main.header_values(headers, "origin")
        if not origins:
            return  # not a browser (or a same-origin GET): nothing to check
        origin = origins[0].lower()
        if len(origins) != 1 or not (_LOCAL_ORIGIN_RE.fullmatch(origin) or origin in self.allowed_origins):
            raise HttpRefusal(403, "Forbidden: Origin is not allowed")


def accepts_json(headers: Sequence[tuple[str, str]]) -> bool:
    """True when Accept is absent or admits application/json with a non-zero q."""
    values = main.header_values(headers, "accept")
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
            keep_alive = version == "HTTP/1.1" and "close" not in ",".join(main.header_values(headers, "connection")).lower()
            if self.server.pages is not None and target.startswith(connect.PATH_PREFIX):
                return self.serve_page(method, target, headers, deadline, keep_alive)
            raw, principal = self.admit(method, target, headers, deadline)
        except HttpRefusal as refusal:
            # Refused before its body was read: the rest of the stream cannot be trusted.
            self.request.sendall(http_response(refusal.status, json_error_body(refusal.message), refusal.headers, close=True))
            self.drain(deadline)
            return False
        mcp_headers = [(name, value) for name, value in headers if name.lower() != "authorization"]
        try:
            status, reply = self.server.mcp.handle_bytes(raw, principal, mcp_headers)
        except Exception:  # noqa: BLE001 - handle_bytes has its own boundary; this is a last resort
            self.server.mcp.log("internal error in the HTTP transport:\n" + traceback.format_exc())
            status, reply, keep_alive = 500, json_error_body("Internal error"), False
        self.request.sendall(http_response(status, reply, close=not keep_alive))
        return keep_alive

    def serve_page(self, method: str, target: str, headers: list[tuple[str, str]], deadline: float, keep_alive: bool) -> bool:
        """A connect page (code/connect.py): Host, Origin and body framing here, the rest in the pages."""
        pages: connect.ConnectPages = self.server.pages  # type: ignore[assignment]
        try:
            self.server.policy.check_origin(headers)
            lengths = main.header_values(headers, "content-length")
            if main.header_values(headers, "transfer-encoding") or len(lengths) > 1 or not all(v.isdigit() and v.isascii() for v in lengths):
                raise HttpRefusal(400, "Bad Request: send a form with one plain Content-Length")
            length = int(lengths[0]) if lengths else 0
            if length > connect.MAX_FORM_BYTES:
                raise HttpRefusal(413, f"Content Too Large: a form is at most {connect.MAX_FORM_BYTES} bytes")
        except HttpRefusal as refusal:
            # A person's browser reads this: an HTML page with the pages' headers, never JSON.
            # Refused before the body was read, so the connection ends as for /mcp.
            status, page_headers, page = pages.refusal(refusal.status, refusal.message)
            self.request.sendall(http_response(status, page, [*page_headers, *refusal.headers], close=True, json_body=False))
            self.drain(deadline)
            return False
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
        lengths = main.header_values(headers, "content-length")
        # Chunked bodies have no size up front, and a request with both framings is the
        # classic smuggling vector: only one plain Content-Length is accepted.
        if main.header_values(headers, "transfer-encoding") or not lengths:
            raise HttpRefusal(411, "Length Required: send the body with a Content-Length")
        if len(lengths) != 1 or not lengths[0].isdigit() or not lengths[0].isascii():
            raise HttpRefusal(400, "Bad Request: invalid Content-Length")
        length = int(lengths[0])
        if length > main.MAX_MESSAGE_BYTES:
            raise HttpRefusal(413, f"Content Too Large: the limit is {main.MAX_MESSAGE_BYTES} bytes")
        types = main.header_values(headers, "content-type")
        if len(types) != 1 or types[0].split(";")[0].strip().lower() != "application/json":
            raise HttpRefusal(415, "Unsupported Media Type: send application/json")
        if not accepts_json(headers):
            raise HttpRefusal(406, "Not Acceptable: this server answers with application/json")
        if "100-continue" in ",".join(main.header_values(headers, "expect")).lower():
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
        pages: connect.ConnectPages | None = None,
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


def serve_http(server: main.Server, config: dict[str, Any], args: argparse.Namespace, pages: connect.ConnectPages) -> int:
    """Listen, print the URL line, serve until a signal; returns the exit status."""
    loopback = is_loopback(args.host)
    tokens: dict[str, str] = {}
    if args.no_auth:
        say(
            f"warning: --no-auth: HTTP requests without a token act as principal {config['stdioPrincipal']!r}; "
            "for local development and conformance tests only (loopback addresses only)"
        )
    else:
        tokens = {name: entry["token"] for name, entry in config["principals"].items() if entry["token"]}
    policy = HttpPolicy(
        tokens,
        config["stdioPrincipal"] if args.no_auth else None,
        None,
        config.get("allowedOrigins", frozenset()),
        args.request_timeout,
    )
    try:
        httpd = HttpServer((args.host.strip("[]"), args.port), server, policy, pages)
    except OSError as exc:
        say(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
        return 1
    pages.base_url = httpd.url("")
    if loopback:
        # Known only once bound (--port 0): the names a loopback client may put in Host.
        port = httpd.server_address[1]
        policy.allowed_hosts = frozenset(f"{name}:{port}" for name in LOOPBACK_NAMES)
        if port == 80:
            policy.allowed_hosts |= frozenset(LOOPBACK_NAMES)
    say(f"listening on {httpd.url()}")
    try:
        httpd.serve_forever()
    finally:
        httpd.server_close()
    return 0


# =====================================================================================
# The command line
# =====================================================================================


def timeout_seconds(text: str) -> float:
    """argparse type: a finite positive number of seconds, at most an hour."""
    value = float(text)
    if not (math.isfinite(value) and 0 < value <= 3600):
        raise argparse.ArgumentTypeError("must be in (0, 3600]")
    return value


def port_number(text: str) -> int:
    """argparse type: 0..65535 (0 picks a free port)."""
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be 0..65535")
    return value


def parser() -> argparse.ArgumentParser:
    """The `serve` command line."""
    p = argparse.ArgumentParser(prog="main.py serve", description="Serve the notes MCP server (protocol 2026-07-28).")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="newline-delimited JSON-RPC on stdin/stdout")
    mode.add_argument("--http", action="store_true", help=f"Streamable HTTP, POST http://HOST:PORT{ENDPOINT}")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"HTTP listen address (default {DEFAULT_HOST})")
    p.add_argument("--port", type=port_number, default=DEFAULT_PORT, help=f"HTTP port, 0 = any free port (default {DEFAULT_PORT})")
    p.add_argument("--config", metavar="FILE", help="JSON config: principals, tokens, workspaces, notes, keys")
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="HTTP without bearer tokens, acting as the stdio principal (loopback hosts only; development and conformance tests)",
    )
    p.add_argument(
        "--no-legacy",
        action="store_true",
        help="stdio: serve 2026-07-28 only (initialize gets -32601 naming the supported versions)",
    )
    p.add_argument("--db", metavar="FILE", help="SQLite database shared by instances (overrides the config's db)")
    p.add_argument(
        "--notes-dir",
        metavar="DIR",
        action="append",
        default=[],
        help="a folder of Markdown notes for the stdio principal (repeatable)",
    )
    # Testing only (README, "Limits"): shortens the slow-client deadline so tests run fast.
    p.add_argument("--request-timeout", type=timeout_seconds, default=REQUEST_TIMEOUT_SECONDS, help=argparse.SUPPRESS)
    return p


def serve(argv: Sequence[str]) -> int:
    """`main.py serve ...`: parse, load the config, build the server, run one transport."""
    try:
        args = parser().parse_args(list(argv))
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return int(exc.code or 0)
    if args.stdio and args.no_auth:
        say("--no-auth applies to --http only (stdio has no tokens)")
        return EXIT_USAGE
    if args.http and args.no_legacy:
        say("--no-legacy applies to --stdio only (HTTP serves 2026-07-28 only)")
        return EXIT_USAGE
    if args.http and args.no_auth and not is_loopback(args.host):
        say(f"--no-auth refused: host {args.host!r} is not a loopback address")
        return EXIT_USAGE
    environ = dict(os.environ)
    try:
        config = load_config(args.config) if args.config else lesson_config()
    except ConfigError as exc:
        say(f"config {args.config}: {exc}")
        return EXIT_USAGE
    try:
        if args.config and environ.get("NOTES_MCP_TOKEN"):
            say("warning: NOTES_MCP_TOKEN is ignored when --config is given (tokens come from the config)")
        if not args.config and args.http and not args.no_auth:
            config["principals"][main.LESSON_PRINCIPAL]["token"] = lesson_token(environ)
        keys = signing_keys(config, environ)
        if not args.config and not config["principals"][main.LESSON_PRINCIPAL]["token"]:
            # stdio and --no-auth: still needed to sign in on the connect pages (code/connect.py).
            config["principals"][main.LESSON_PRINCIPAL]["token"] = lesson_token(environ)
    except ConfigError as exc:
        say(str(exc))
        return EXIT_USAGE
    if args.db:
        config["db"] = args.db
    if args.notes_dir:
        if not args.config:
            del config["notes"]  # the lesson fixture: with folders, the files are the notes
        entry = config["principals"][config["stdioPrincipal"]]
        entry["notesDirs"] = entry.get("notesDirs", []) + args.notes_dir
    try:
        server = build_server(config, args, keys)
    except (ConfigError, StartupError) as exc:
        say(str(exc))
        return EXIT_USAGE
    pages = connect.install(server, {name: entry["token"] for name, entry in config["principals"].items()})

    def stop(signum: int, frame: Any) -> None:
        raise Stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        if args.stdio:
            return serve_stdio_with_pages(server, config, pages, args.request_timeout, not args.no_legacy)
        return serve_http(server, config, args, pages)
    except Stop:
        return 0


def serve_stdio_with_pages(
    server: main.Server, config: dict[str, Any], pages: connect.ConnectPages, timeout: float, legacy_enabled: bool = True
) -> int:
    """stdio, plus a loopback-only listener that serves nothing but the connect pages."""
    policy = HttpPolicy({}, None, None, frozenset(), timeout)
    try:
        listener = HttpServer(("127.0.0.1", config.get("connectPort", 0)), server, policy, pages, mcp_endpoint=False)
    except OSError as exc:
        say(f"cannot listen on 127.0.0.1:{config.get('connectPort', 0)} for the connect pages: {exc.strerror or exc}")
        return 1
    port = listener.server_address[1]
    policy.allowed_hosts = frozenset(f"{name}:{port}" for name in LOOPBACK_NAMES)
    pages.base_url = listener.url("")
    say(f"connect pages on {listener.url(connect.PATH_PREFIX)}")
    thread = threading.Thread(target=listener.serve_forever, name="connect-pages", daemon=True)
    thread.start()
    try:
        return serve_stdio(server, config["stdioPrincipal"], legacy_enabled)
    finally:
        listener.shutdown()
        listener.server_close()
        thread.join()


def lesson_token(environ: dict[str, str]) -> str:
    """NOTES_MCP_TOKEN, or a random token printed once on stderr."""
    token = environ.get("NOTES_MCP_TOKEN", "")
    if token:
        return read_token(token, "NOTES_MCP_TOKEN")
    token = secrets.token_urlsafe(32)
    say(f"bearer token for principal {main.LESSON_PRINCIPAL!r} (random; set NOTES_MCP_TOKEN to choose one): {token}")
    return token
