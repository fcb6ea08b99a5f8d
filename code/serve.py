"""Serve the lesson server for real: `python3 code/serve.py --stdio | --http`.

    python3 code/serve.py --stdio [--config FILE] [--no-legacy]
    python3 code/serve.py --http [--host 127.0.0.1] [--port 8765] [--config FILE] [--no-auth] [--no-legacy]
    ... [--db FILE]            notes and consumed confirmations in SQLite (code/sqlite_store.py)
    ... [--notes-dir DIR]...   real Markdown folders (code/markdown_store.py)
    ... [--publish]            also serve notes_publish and its connect pages (code/connect.py)
    ... [--confirm-in-browser] notes_delete (and notes_update, notes_move) without a form: a link to this server's confirmation page
    ... [--notes-tools]        also serve the note tools: search, read, create, append, update, move (code/notes_tools.py)
    python3 code/serve.py audit [--config FILE | --db FILE|URL | --notes-dir DIR] list|restore ...
                               the audit of consumed confirmations; restore a trashed note (code/audit_cli.py)
    python3 code/serve.py --version

The command line: it parses the flags, has code/assemble.py build the server from the
configuration (code/config.py) and the environment, adds what was asked for, says what
it serves in one start-up block, and runs one transport (code/stdio_transport.py or
code/streamable_http.py) until a signal stops it. Extension modules are imported only
when asked for. Standard library only.
"""

# ruff: noqa: E402
# The imports come after the version check below, on purpose. No `from __future__` import
# here: this file must compile on an older Python 3 so that the check can say what is wrong.
import sys

# The first thing serve.py does: on Python 3.10 or older the imports below fail with a
# traceback that names sqlite3 or typing, not the interpreter. `python3` in a host's
# configuration is often an older system Python than the shell's.
if sys.version_info < (3, 11):
    sys.stderr.write(
        "notes-mcp: needs Python 3.11 or later; this is Python %d.%d.%d (%s)\n"
        % (sys.version_info[0], sys.version_info[1], sys.version_info[2], sys.executable or "python3")
    )
    raise SystemExit(2)

import argparse
import difflib
import math
import os
import re
import signal
import threading
from collections.abc import Sequence
from typing import Any, NoReturn
from urllib.parse import urlsplit

import assemble
import config as configuration
import frame
import main
import stores
from assemble import EXIT_STORE_LOST, EXIT_USAGE, LOG_PREFIX, say  # noqa: F401  (LOG_PREFIX: what this command prefixes its lines with)
from config import ConfigError

__all__ = ["serve"]

# streamable_http (and its engine) is imported only where HTTP is served: stdio starts
# without compiling either.

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


class Stop(BaseException):
    """SIGTERM or SIGINT: unwind and exit 0 (BaseException, so no `except Exception` eats it)."""


# =====================================================================================
# The start-up report
# =====================================================================================
#
# One short block on stderr once serving starts: what is served, to whom, from where, and
# what was left out. A list of lines; each component adds its own (the store's describe(),
# the transport's address), and nothing in it is a credential: principals by name, a
# PostgreSQL URL without its user or password.


def startup_report(
    server: frame.Server, config: dict[str, Any], args: argparse.Namespace, transport: str, extra: Sequence[str] = ()
) -> list[str]:
    """The start-up block: `transport`, principals, workspaces and counts, the store's describe() lines, confirmations, extensions, then `extra`.

    A component with something to say at start-up (a sandbox's status, say) passes its
    line in `extra`, or, for a store, returns it from describe().
    """
    principals = config["principals"]
    lines = [transport]
    if args.http and args.no_auth:
        lines.append(f"principals: no bearer token (--no-auth): every request acts as {config['stdioPrincipal']!r}")
    elif args.http:
        lines.append(f"principals: {', '.join(sorted(principals))} (each by its bearer token)")
    # The store's own lines first: a folder store counts each folder in the same walk.
    described = stores.store_of(server.services).describe()  # which lookup indexes serve; what a folder walk skipped
    if isinstance(described, str):  # the SQL stores: one line
        described = [described]
    if described:
        described = [f"notes store: {described[0]}", *described[1:]]
    owners: dict[str, list[str]] = {}
    for name in principals:
        for uri in server.policy.workspaces(name):
            owners.setdefault(uri, []).append(name)
    for uri, names in owners.items():
        lines.append(f"workspace {uri} ({', '.join(names)}): {assemble.note_count(stores.store_of(server.services), uri)}")
    if not owners:
        lines.append("workspaces: none granted, so every notes_delete call is refused")
    lines.extend(described)
    lines.append(f"consumed confirmations: {assemble.confirmations_home(config)}{relative_db(args)}")
    lines.append(f"extensions: {', '.join(extensions(config, args)) or 'none'}")
    lines.append(f"confirmation page: {confirmation_page(config, args)}")
    lines.extend(extra)
    return lines


def pages_on_loopback(args: argparse.Namespace) -> bool:
    """True when the pages would be served on a loopback address (always under --stdio; --host's under --http)."""
    import streamable_http

    return not args.http or streamable_http.is_loopback(args.host)


def pages_origin(config: dict[str, Any], listened: str) -> str:
    """Where people open the pages: publicUrl, else the loopback listener's `listened` (named localhost with passkeys)."""
    if not config.get("publicUrl") and config.get("passkeys", "off") != "off":
        # WebAuthn needs a domain RP ID in a secure context: an IP address is never one, and
        # http://localhost is both. The listener is on loopback (start() refused anything else).
        return f"http://localhost:{urlsplit(listened).port}"
    return str(config.get("publicUrl") or listened)


def serve_pages_at(pages: Any, policy: Any, config: dict[str, Any], listened: str, loopback: bool) -> str:
    """Give the pages their origin (pages_origin) and let the transport accept it; that origin."""
    public = config.get("publicUrl")
    pages.base_url = pages_origin(config, listened)
    if public:
        # The browser names the public origin in Origin and, through a proxy that keeps it, in Host.
        policy.allowed_origins = frozenset(policy.allowed_origins) | {public}
        if loopback and policy.allowed_hosts is not None:
            policy.allowed_hosts = frozenset(policy.allowed_hosts) | {public.split("://", 1)[1]}
    return pages.base_url  # type: ignore[no-any-return]


def relative_db(args: argparse.Namespace) -> str:
    """For a relative --db, what the report adds to the absolute path it resolved to at start-up; else ""."""
    # A host starts servers from whatever folder it likes: `--db notes.db` from two folders
    # is two databases, so a confirmation declined on one instance could be accepted on the
    # other. The path each instance really uses is said, and why it is that one.
    db = getattr(args, "db", None)
    if not db or os.path.isabs(db) or db.startswith(configuration.POSTGRES_SCHEMES):
        return ""
    return (f" (--db {db} is relative: resolved against the working directory at start-up; instances share "
            "confirmations only when they name this same file, so give hosts the absolute path)")


def confirmation_page(config: dict[str, Any], args: argparse.Namespace) -> str:
    """Whether hosts without a form can confirm a deletion on this server's page, and how."""
    browser = args.confirm_in_browser or config.get("confirmInBrowser", False)
    public = config.get("publicUrl")
    at = f"; links at {public} (publicUrl: the pages' Origin, Secure cookies when https)" if public else ""
    at += {"offer": "; passkeys offered (a passkey signs in instead of the token)",
           "require": "; passkeys required (every approval needs a passkey assertion)"}.get(config.get("passkeys", "off"), "")
    if browser:
        return f"on (--confirm-in-browser): a host without forms gets a link, and URL-mode hosts the page{at}"
    if args.publish or config.get("publish", False) or (args.http and (pages_on_loopback(args) or public)):
        return f"URL-mode hosts only (--confirm-in-browser is off: hosts with neither forms nor URL mode get -32021){at}"
    if args.http:
        return (f"off: --host {args.host} is not a loopback address and publicUrl is unset, so no page is served "
                "(hosts without forms get -32021)")
    return "off (hosts without forms get -32021; --confirm-in-browser turns it on)"


def extensions(config: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """The extensions this process serves, by name."""
    names = [] if args.no_legacy else ["2025-11-25 clients (loaded at their first initialize)"]
    if args.publish or config.get("publish", False):
        names.append("notes_publish and its connect pages")
    if args.notes_tools or config.get("notesTools", False):
        names.append("the note tools (notes_workspaces, notes_list, notes_search, notes_read, notes_create, notes_append, notes_update, notes_edit, notes_move)")
    if args.conformance_fixtures:
        names.append("conformance fixtures (testing only)")
    return names


def report(lines: Sequence[str]) -> None:
    """The start-up block, one say() per line."""
    for line in lines:
        say(line)


def store_waits(store: stores.NotesStore) -> bool:
    """False only for the memory store: its calls take microseconds and never wait on a disk, a lock or a peer."""
    return not isinstance(store, stores.MemoryStore)



# =====================================================================================
# Running a transport
# =====================================================================================


class LegacyOnDemand:
    """2025-11-25 HTTP sessions, loaded with the first request that may be one (as stdio loads them at `initialize`)."""

    def __init__(self, endpoint: Any, server: frame.Server) -> None:
        self.endpoint = endpoint
        self.server = server
        self.sessions: Any = None
        self.lock = threading.Lock()

    def route(self, request: Any, principal: str) -> Any:
        """legacy_http's answer; the first call imports it and hands the endpoint its router."""
        with self.lock:
            if self.sessions is None:
                import legacy_http

                self.sessions = legacy_http.install(self.endpoint, self.server, log=say)
        return self.sessions.route(request, principal)

    def close(self) -> None:
        """End every legacy session (there are none if no legacy client came)."""
        with self.lock:
            if self.sessions is not None:
                self.sessions.close()


def serve_http(server: frame.Server, config: dict[str, Any], args: argparse.Namespace, pages: Any) -> int:
    """Listen, print the URL line, serve until SIGTERM or SIGINT, then finish what is in flight."""
    import streamable_http

    tokens: dict[str, str] = {}
    if args.no_auth:
        say(
            f"warning: --no-auth: HTTP requests without a token act as principal {config['stdioPrincipal']!r}; "
            "for local development and conformance tests only (loopback addresses only)"
        )
    else:
        tokens = {name: entry["token"] for name, entry in config["principals"].items() if entry["token"]}
    policy = streamable_http.HttpPolicy(
        tokens, config["stdioPrincipal"] if args.no_auth else None, None, config.get("allowedOrigins", frozenset())
    )
    endpoint = streamable_http.McpEndpoint(server, policy, pages)
    endpoint.refused = streamable_http.RefusalLog(say)
    sessions = None
    if not args.no_legacy:
        # `--no-legacy` leaves `initialize` to the core's -32601.
        sessions = LegacyOnDemand(endpoint, server)
        endpoint.legacy = sessions.route
    try:
        httpd = streamable_http.listen(
            args.host.strip("[]"),
            args.port,
            endpoint,
            say,
            args.request_timeout or streamable_http.REQUEST_TIMEOUT_SECONDS,
            store_waits=store_waits(server.notes),
            refused=endpoint.refused,
        )
    except OSError as exc:
        say(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
        return 1
    if streamable_http.is_loopback(args.host):
        # Known only once bound (--port 0): the names a loopback client may put in Host.
        port = httpd.address[1]
        policy.allowed_hosts = frozenset(f"{name}:{port}" for name in streamable_http.LOOPBACK_NAMES)
        if port == 80:
            policy.allowed_hosts |= frozenset(streamable_http.LOOPBACK_NAMES)
    if pages is not None:
        serve_pages_at(pages, policy, config, httpd.url(""), streamable_http.is_loopback(args.host))

    # Counted before confinement (a walk of each folder); printed after it, the listening line first.
    lines = startup_report(server, config, args, f"listening on {httpd.url(streamable_http.ENDPOINT)}")
    confined = confine(config, args, [httpd.address[1]])
    if confined is None:
        return EXIT_USAGE

    def stop(signum: int, frame: Any) -> None:
        # Stop accepting, let requests in flight finish and send their responses, then
        # return from serve_forever: a deletion that committed is never left unanswered.
        # Legacy sessions end first, so a stream waiting for a form does not hold shutdown.
        def finish() -> None:
            if sessions is not None:
                sessions.close()
            httpd.shutdown()

        threading.Thread(target=finish, name="shutdown", daemon=True).start()

    stop_on_signals(stop)
    report([*lines, confined])
    httpd.serve_forever()
    return 0


def serve_stdio(server: frame.Server, config: dict[str, Any], args: argparse.Namespace, pages: Any) -> int:
    """stdio; with --publish or --confirm-in-browser, plus a loopback-only listener that serves nothing but the pages."""
    import stdio_transport

    lines = startup_report(server, config, args, f"serving on stdio as principal {config['stdioPrincipal']!r}")
    if pages is None:
        confined = confine(config, args, [])
        if confined is None:
            return EXIT_USAGE
        report([*lines, confined])
        return stdio_transport.serve_stdio(server, config["stdioPrincipal"], not args.no_legacy)
    kept = (f"; links kept by process {args.keeper.pid} once this one exits, until each is decided or expires"
            if args.keeper is not None else "; links live as long as this process (the memory store shares no decision)")
    if isinstance(pages, PagesOnDemand):
        confined = confine(config, args, [pages.port])
        if confined is None:
            return EXIT_USAGE
        listening = f"http://127.0.0.1:{pages.port}"
        where = "" if pages.base_url == listening else f" (listening on {listening})"
        report([*lines, f"confirmation pages on {pages.base_url}{PagesOnDemand.prefix}" + where + kept, confined])
        try:
            return stdio_transport.serve_stdio(server, config["stdioPrincipal"], not args.no_legacy)
        finally:
            pages.close()
    listener, base = page_listener(server, config, args, pages, say)
    port = listener.address[1]
    confined = confine(config, args, [port])
    if confined is None:
        return EXIT_USAGE
    where = "" if base == listener.url("") else f" (listening on {listener.url('')})"
    report([*lines, "; ".join(f"{member.title} on {base}{member.prefix}" for member in pages.members) + where + kept, confined])
    thread = threading.Thread(target=listener.serve_forever, name="connect-pages", daemon=True)
    thread.start()
    try:
        return stdio_transport.serve_stdio(server, config["stdioPrincipal"], not args.no_legacy)
    finally:
        listener.shutdown(0)
        thread.join()


class PagesOnDemand:
    """Under --stdio, the confirmation pages until a link is given out: then the real pages and their listener start.

    The socket is bound at start-up (its port is in the sandbox plan and the start-up report);
    the HTTP engine and the pages are loaded only by a process that gives out a link, so a
    host that starts a process per call waits for none of it on calls that need no page.
    """

    prefix = "/confirm/"

    def __init__(self, server: frame.Server, config: dict[str, Any], args: argparse.Namespace, tokens: dict[str, str]) -> None:
        self.server, self.config, self.args, self.tokens = server, config, args, tokens
        self.port = args.pages_socket.getsockname()[1]
        self.base_url = pages_origin(config, f"http://127.0.0.1:{self.port}")
        self.on_issue: Any = lambda handle, expires_at: None
        self._started: tuple[Any, threading.Thread] | None = None
        self._lock = threading.Lock()

    def serves(self, principal: str) -> bool:
        """As ConfirmPages.serves: `principal` has a token to sign in with."""
        return principal in self.tokens

    def url(self, handle: str) -> str:
        """The link to `handle`, once the real pages serve it (started here, once)."""
        with self._lock:
            if self._started is None:
                import confirm_pages
                import web_pages

                # The tools hold the real pages from now on, in the operator's passkey mode.
                real = confirm_pages.install(self.server, self.tokens, passkeys=self.config.get("passkeys", "off"))
                real.on_issue = self.on_issue
                listener, _ = page_listener(self.server, self.config, self.args, web_pages.PageSet([real]), say)
                thread = threading.Thread(target=listener.serve_forever, name="confirm-pages", daemon=True)
                thread.start()
                self._started = (listener, thread)
        return f"{self.base_url}{self.prefix}{handle}"

    def issued(self, handle: str, expires_at: float) -> None:
        """As ConfirmPages.issued."""
        self.on_issue(handle, expires_at)

    def close(self) -> None:
        """Stop the listener if it was started."""
        with self._lock:
            if self._started is not None:
                listener, thread = self._started
                listener.shutdown(0)
                thread.join()


def page_listener(server: frame.Server, config: dict[str, Any], args: argparse.Namespace, pages: Any,
                  log: Any) -> tuple[Any, str]:
    """The loopback listener of the pages alone (no /mcp), on the socket bound at start-up; it and the pages' origin."""
    import streamable_http

    policy = streamable_http.HttpPolicy({}, None, None, frozenset())
    endpoint = streamable_http.McpEndpoint(server, policy, pages, mcp_endpoint=False)
    endpoint.refused = streamable_http.RefusalLog(say)
    listener = streamable_http.listen("127.0.0.1", 0, endpoint, log, args.request_timeout or streamable_http.REQUEST_TIMEOUT_SECONDS,
                                      refused=endpoint.refused, sock=args.pages_socket)
    port = listener.address[1]
    policy.allowed_hosts = frozenset(f"{name}:{port}" for name in streamable_http.LOOPBACK_NAMES)
    return listener, serve_pages_at(pages, policy, config, listener.url(""), True)


def shares_decisions(config: dict[str, Any]) -> bool:
    """True when the page's decisions live in a database other processes open (SQLite, PostgreSQL, the folders' one)."""
    return "db" in config or any(entry.get("notesDirs") for entry in config["principals"].values())


def hand_down_pages(config: dict[str, Any], args: argparse.Namespace, keys: Sequence[bytes]) -> tuple[Any, Any]:
    """Under --stdio: the pages' socket, bound now, and where decisions are shared, the keeper that serves it after this process."""
    import socket

    port = config.get("connectPort", 0)
    try:
        sock = socket.create_server(("127.0.0.1", port))  # SO_REUSEADDR and listening, as the HTTP engine's own
    except OSError as exc:
        say(f"cannot listen on 127.0.0.1:{port} for the pages: {exc.strerror or exc}")
        raise StartupRefused(1) from None
    args.pages_socket = sock  # before the fork: the keeper serves this very socket
    if not shares_decisions(config):
        return sock, None  # the memory store: a later process could not read a decision made here
    import page_keeper

    # Forked now: one thread, no database open yet (a fork after either is unsafe).
    return sock, page_keeper.fork(lambda links: keep_pages(config, args, keys, links))


def keep_pages(config: dict[str, Any], args: argparse.Namespace, keys: Sequence[bytes], links: dict[str, float]) -> int:
    """The keeper's work once the server ended: the confirmation pages of `links` alone, on the same socket, until done."""
    import confirm_pages
    import page_keeper
    import web_pages

    server, pages = build(config, args, keys)  # the shared store, opened afresh in this process
    confirm = next(member for member in pages.members if isinstance(member, confirm_pages.ConfirmPages))
    confirm.records = page_keeper.OnlyThese(confirm.records, set(links))
    listener, _ = page_listener(server, config, args, web_pages.PageSet([confirm]), lambda line: None)
    if confine(config, args, [listener.address[1]]) is None:  # the server's own sandbox plan
        return EXIT_USAGE
    thread = threading.Thread(target=listener.serve_forever, name="kept-pages", daemon=True)
    thread.start()
    try:
        page_keeper.keep_until_done(confirm.records, links, server.clock, threading.Event().wait)
    finally:
        listener.shutdown(0)
        thread.join()
        assemble.close_store(server.notes)
    return 0


def unsafe_for_sandbox(config: dict[str, Any], args: argparse.Namespace) -> str | None:
    """The line refusing a notes folder or database the sandbox would leave writable on the import path, or None.

    Checked before the store is opened (a refusal creates nothing), with or without
    Landlock on this machine (one configuration behaves alike everywhere); not with
    --no-sandbox, which promises nothing.
    """
    if args.sandbox == "off":
        return None
    import sandbox

    folders = [path for entry in config["principals"].values() for path in entry.get("notesDirs", [])]
    db = config.get("db")
    # The default confirmation database is always nonces.db: never a name Python imports.
    state = db if db and not db.startswith(configuration.POSTGRES_SCHEMES) else None
    return sandbox.unsafe_writes(folders, state, sandbox.import_roots(os.path.dirname(os.path.abspath(__file__))))


def confine(config: dict[str, Any], args: argparse.Namespace, ports: Sequence[int]) -> str | None:
    """Confine the process as --sandbox asks (code/sandbox.py); the start-up line saying how, or None if required and impossible.

    Called once the store is open and the listener bound, before any thread starts and
    before the line that says the server listens (clients may connect from then on).
    """
    if args.sandbox == "off":
        return "sandbox: off (--no-sandbox); serving unconfined"
    import sandbox

    folders = [path for entry in config["principals"].values() for path in entry.get("notesDirs", [])]
    db = config.get("db")
    url = db if db and db.startswith(configuration.POSTGRES_SCHEMES) else None
    state = None if url else db or (assemble.default_nonce_db() if folders else None)
    here = os.path.dirname(os.path.abspath(__file__))
    status = sandbox.confine(sandbox.server_plan(here, folders, state, url, args.config, ports))
    if args.sandbox == "require" and not status.complete:
        say(f"sandbox: required, but {status.reason or 'the metadata filter failed: ' + status.unfiltered}; not serving")
        return None
    return status.describe()


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


# Every variable the server reads, for --help (tests/test_package.py checks the code reads no other).
ENVIRONMENT = (
    ("NOTES_MCP_SECRET", "signing keys as hex, comma-separated, newest first (instead of the config's keys)"),
    ("NOTES_MCP_TOKEN", f"the token of principal {main.LESSON_PRINCIPAL!r} without --config: the bearer token for --http, the pages' sign-in for --publish and --confirm-in-browser"),
    ("XDG_STATE_HOME", "folders without --db keep consumed confirmations in $XDG_STATE_HOME/notes-mcp/nonces.db"),
    ("PGPASSWORD", "--db postgresql://...: the password, read by libpq (or ~/.pgpass)"),
    ("PGHOST, PGPORT", "--db postgresql://...: libpq's defaults for a URL without them (the sandbox allows them)"),
    ("PGPASSFILE, PGSERVICEFILE", "--db postgresql://...: libpq's password and service files (readable in the sandbox)"),
)


def version() -> str:
    """The package's version: the server's own (main.SERVER_INFO), which pyproject.toml repeats."""
    return str(main.SERVER_INFO["version"])


class CommandLine(argparse.ArgumentParser):
    """argparse with every mistake on one prefixed line; an unknown option names the nearest known one."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        """Refuse an unknown option first: argparse would otherwise report a missing --stdio/--http and drop the typo."""
        words = list(sys.argv[1:] if args is None else args)
        unknown = self.unknown_option(words)
        if unknown is not None:
            nearest = difflib.get_close_matches(unknown, self.long_options(), n=1, cutoff=SUGGEST_CUTOFF)
            self.error(f"unknown option {unknown}" + (f": did you mean {nearest[0]}?" if nearest else ""))
        return super().parse_known_args(args, namespace)

    def long_options(self) -> list[str]:
        """Every --option this command takes, in the order --help lists them."""
        return [name for action in self._actions for name in action.option_strings if name.startswith("--")]

    def unknown_option(self, words: Sequence[str]) -> str | None:
        """The first word that looks like an option but names none (nor abbreviates one, as argparse allows); else None."""
        for word in words:
            if word == "--":
                return None  # what follows is not an option
            if not word.startswith("-") or word == "-" or _NUMBER_RE.fullmatch(word):
                continue
            name = word.split("=", 1)[0]
            if name in self._option_string_actions:
                continue
            if name.startswith("--") and any(option.startswith(name) for option in self.long_options()):
                continue  # an abbreviation: argparse resolves it, or says it is ambiguous
            return name
        return None

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        """One line on stderr, then exit 2: the usage block would bury the one thing that is wrong."""
        say(f"{message} ({self.prog} --help lists every option)")
        raise SystemExit(EXIT_USAGE)


SUGGEST_CUTOFF = 0.6  # difflib's similarity an unknown option needs to a known one to be suggested
_NUMBER_RE = re.compile(r"-\d+(?:\.\d*)?")  # a negative number is a value, not an option


def parser(prog: str = "serve.py") -> argparse.ArgumentParser:
    """The serving command line; `prog` is how it was started (serve.py, or the installed notes-mcp)."""
    width = max(len(name) for name, _ in ENVIRONMENT)
    epilog = "\n".join(
        ["environment variables:", *(f"  {name.ljust(width)}  {meaning}" for name, meaning in ENVIRONMENT), "",
         "The audit subcommand lists consumed confirmations and restores a trashed note (audit --help); "
         "passkeys lists and removes the confirmation page's passkeys (passkeys --help)."]
    )  # fmt: skip
    if prog != "serve.py":
        epilog += f" {prog} demo runs the scripted demo (python3 code/main.py in a checkout)."
    p = CommandLine(
        prog=prog, description="Serve the notes MCP server (protocol 2026-07-28).", epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("--version", action="version", version=f"{prog} {version()} (MCP {main.PROTOCOL_VERSION})")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="newline-delimited JSON-RPC on stdin/stdout")
    mode.add_argument("--http", action="store_true", help="Streamable HTTP, POST to the endpoint URL printed at start")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"HTTP listen address (default {DEFAULT_HOST})")
    p.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT,
        help=f"HTTP port, 0 = any free port (default {DEFAULT_PORT})",
    )  # fmt: skip
    p.add_argument("--config", metavar="FILE", help="JSON config: principals, tokens, workspaces, notes, keys")
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="HTTP without bearer tokens, acting as the stdio principal (loopback hosts only; development and conformance tests)",
    )
    p.add_argument(
        "--no-legacy",
        action="store_true",
        help="serve 2026-07-28 only, on stdio and HTTP (initialize gets -32601 naming the supported versions)",
    )
    p.add_argument("--db", metavar="FILE|URL", help="SQLite file or postgresql:// URL shared by instances (overrides the config's db)")
    p.add_argument(
        "--public-url", metavar="URL",
        help="the address people open the pages at, e.g. https://notes.example.com behind a TLS proxy: the pages' links, "
             "Origin rule and Secure cookies (overrides the config's publicUrl; required for pages on a non-loopback --host)",
    )  # fmt: skip
    p.add_argument(
        "--notes-dir",
        metavar="DIR",
        action="append",
        default=[],
        help="a folder of Markdown notes for the stdio principal (repeatable)",
    )
    p.add_argument("--publish", action="store_true", help="also serve notes_publish and its URL-mode connect pages")
    p.add_argument(
        "--confirm-in-browser", action="store_true",
        help="hosts without forms confirm notes_delete (with --notes-tools also notes_update and notes_move) on this server's page: "
             "the first call returns a link (off by default)",
    )  # fmt: skip
    p.add_argument(
        "--passkeys", choices=configuration.PASSKEY_MODES, default=None,
        help="passkeys on the confirmation page: offer (sign in with one instead of the token) or require (every approval "
             "needs one); off by default (overrides the config's passkeys; needs pip install 'notes-mcp[passkeys]')",
    )  # fmt: skip
    p.add_argument(
        "--notes-tools", action="store_true",
        help="also serve the note tools: notes_workspaces, notes_list, notes_search, notes_read, notes_create, notes_append, notes_update, notes_edit, notes_move",
    )  # fmt: skip
    p.add_argument(
        "--conformance-fixtures",
        action="store_true",
        help="HTTP: also serve the conformance suite's test tools, prompts and resources (testing only; docs/conformance.md)",
    )
    confinement = p.add_mutually_exclusive_group()
    confinement.add_argument(
        "--sandbox", choices=("auto", "require"), default="auto",
        help="Landlock confinement after start-up: auto (default: on where the kernel has it) or require (refuse to start without it)",
    )  # fmt: skip
    confinement.add_argument("--no-sandbox", dest="sandbox", action="store_const", const="off", help="do not confine the process")
    # Testing only (docs/http.md, "Limits"): shortens the slow-client deadline so tests run fast.
    # Default (None): streamable_http.REQUEST_TIMEOUT_SECONDS, read where HTTP is served.
    p.add_argument("--request-timeout", type=timeout_seconds, default=None, help=argparse.SUPPRESS)
    return p


def serve(argv: Sequence[str], prog: str = "serve.py") -> int:
    """Parse, load the config, build the server, run one transport; returns the exit status."""
    if list(argv[:1]) == ["audit"]:
        import audit_cli  # the operator's command: serving never loads it

        return audit_cli.command(argv[1:], prog=f"{prog} audit")
    if list(argv[:1]) == ["passkeys"]:
        import audit_cli

        return audit_cli.passkeys_command(argv[1:], prog=f"{prog} passkeys")

    def stop(signum: int, frame: Any) -> None:
        raise Stop()

    # Set before anything can block (a locked database at start-up): SIGINT then ends
    # the start-up with one line, never a KeyboardInterrupt traceback.
    stop_on_signals(stop)
    try:
        server, config, args, pages = start(argv, prog, keep_pages=True)
    except Stop:
        say("interrupted during start-up; nothing was served")
        return EXIT_USAGE
    except StartupRefused as refused:
        return refused.status
    try:
        if args.stdio:
            status = serve_stdio(server, config, args, pages)
        else:
            status = serve_http(server, config, args, pages)
    except Stop:
        status = 0
    finally:
        assemble.close_store(stores.store_of(server.services))
    store = stores.store_of(server.services)
    return EXIT_STORE_LOST if isinstance(store, assemble.StopOnLoss) and store.lost else status


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def stop_on_signals(handler: Any) -> None:
    """Install `handler` for every signal that stops the server: SIGTERM, SIGINT and SIGHUP alike."""
    # SIGHUP (a closed terminal, a supervisor's reload) killed the process outright: no
    # graceful shutdown, no store close. It now ends the server exactly as SIGTERM does.
    for signum in STOP_SIGNALS:
        signal.signal(signum, handler)


class StartupRefused(Exception):
    """Start-up stopped with this exit status (the reason is already on stderr)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def start(argv: Sequence[str], prog: str = "serve.py",
          keep_pages: bool = False) -> tuple[frame.Server, dict[str, Any], argparse.Namespace, Any]:
    """Everything before serving: arguments, config, keys, store, server, extensions; or StartupRefused.

    With `keep_pages` (the command, not a test building a server in its own process), --stdio
    binds the pages' socket here and forks their keeper (code/page_keeper.py) before the store opens.
    """
    try:
        args = parser(prog).parse_args(list(argv))
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        raise StartupRefused(int(exc.code or 0)) from None
    status = refuse_flags(args)
    if status is not None:
        raise StartupRefused(status)
    environ = dict(os.environ)
    later: list[str] = []  # warnings said once start-up has succeeded: a refusal stays one line
    try:
        config = configuration.load_config(args.config, later.append) if args.config else configuration.lesson_config()
    except ConfigError as exc:
        say(f"config {args.config}: {exc}")
        raise StartupRefused(EXIT_USAGE) from None
    publish = args.publish or config.get("publish", False)
    browser = args.confirm_in_browser or config.get("confirmInBrowser", False)
    config["confirmInBrowser"] = browser
    try:
        if args.config and environ.get("NOTES_MCP_TOKEN"):
            say("warning: NOTES_MCP_TOKEN is ignored when --config is given (tokens come from the config)")
        if not args.config and args.http and not args.no_auth:
            config["principals"][main.LESSON_PRINCIPAL]["token"] = assemble.lesson_token(environ, "for --http (the bearer token clients send)")
        elif not args.config and (publish or browser):
            # stdio and --no-auth: the pages still need a sign-in (code/web_pages.py).
            why = "for --publish (the connect pages' sign-in)" if publish else "for --confirm-in-browser (the confirmation page's sign-in)"
            config["principals"][main.LESSON_PRINCIPAL]["token"] = assemble.lesson_token(environ, why)
        if browser and args.stdio and not config["principals"][config["stdioPrincipal"]].get("token"):
            # Without a token nobody can sign in to the page, and every link would be a dead end.
            raise ConfigError(f"principals.{config['stdioPrincipal']}.token", "is required for --confirm-in-browser (the page's sign-in)")
        keys = assemble.signing_keys(config, environ)
        if args.db is not None:
            # As typed in a shell: the working directory's (a config's db is its folder's).
            config["db"] = configuration.db_location(configuration.read_path(args.db, "--db"), "--db", os.getcwd())
        if args.public_url is not None:
            config["publicUrl"] = configuration.read_public_url(args.public_url, "--public-url")
        if args.passkeys is not None:
            config["passkeys"] = args.passkeys
        if args.http and (publish or browser) and not config.get("publicUrl") and not pages_on_loopback(args):
            # http://0.0.0.0:PORT/confirm/... opens nowhere, and a sign-in there sends the
            # bearer token across the network in clear text: people need the real address.
            raise ConfigError("publicUrl", f"is required to serve pages on --host {args.host}, which is not a loopback address: set "
                                           "publicUrl in the config or --public-url to the address people open them at (e.g. "
                                           "https://notes.example.com, a TLS proxy in front of this server); not serving")
    except ConfigError as exc:
        say(str(exc))
        raise StartupRefused(EXIT_USAGE) from None
    import passkey_pages

    refusal = passkey_pages.refusal(config.get("passkeys", "off"), config.get("publicUrl"))
    if refusal:
        say(refusal)
        raise StartupRefused(EXIT_USAGE)
    try:
        assemble.check_folders(config, args.config, args.notes_dir)
    except ConfigError as exc:
        say(str(exc))
        raise StartupRefused(EXIT_USAGE) from None
    assemble.add_notes_dirs(config, args.notes_dir, bool(args.config))
    refusal = unsafe_for_sandbox(config, args)
    if refusal:
        say(refusal)
        raise StartupRefused(EXIT_USAGE)
    stdio_pages = keep_pages and args.stdio and (publish or browser)
    args.pages_socket, args.keeper = hand_down_pages(config, args, keys) if stdio_pages else (None, None)
    try:
        server, pages = build(config, args, keys, on_demand=stdio_pages)
    except (ConfigError, assemble.StartupError) as exc:
        say(str(exc))
        raise StartupRefused(EXIT_USAGE) from None
    if args.keeper is not None and isinstance(pages, PagesOnDemand):
        pages.on_issue = args.keeper.issued
    elif args.keeper is not None:
        import confirm_pages

        for member in pages.members:
            if isinstance(member, confirm_pages.ConfirmPages):
                member.on_issue = args.keeper.issued
    for line in later:
        say(line)
    assemble.warn_weak_secrets(config, keys)  # once start-up has succeeded: a refusal stays one line
    return server, config, args, pages


def build(config: dict[str, Any], args: argparse.Namespace, keys: Sequence[bytes],
          on_demand: bool = False) -> tuple[frame.Server, Any]:
    """The server for a checked configuration, the extensions asked for, and its pages (None where none are served).

    `on_demand` (--stdio with the confirmation pages alone): a stand-in until the first link, see PagesOnDemand.
    """
    publish = args.publish or config.get("publish", False)
    browser = config["confirmInBrowser"]
    server = assemble.build_server(config, keys)
    server.log = say  # every line the running server logs carries the prefix, as the start-up block does
    if args.notes_tools or config.get("notesTools", False):
        import notes_tools  # imported only when asked for: the lesson's server lists notes_delete alone

        notes_tools.install(server)
    if args.conformance_fixtures:
        import conformance_fixtures  # imported only when asked for: test fixtures are not the product

        conformance_fixtures.install(server)
    tokens = {name: entry["token"] for name, entry in config["principals"].items() if entry["token"]}
    if on_demand and browser and not publish:
        demand = PagesOnDemand(server, config, args, tokens)
        server.tools[main.TOOL_NAME].pages = demand
        return server, demand
    members = []
    if publish:
        import connect

        members.append(connect.install(server, tokens))
    # Without a public address, a non-loopback HTTP server serves no pages (URL-mode hosts get -32021, as hosts without forms).
    if (args.http and (pages_on_loopback(args) or config.get("publicUrl"))) or publish or browser:
        # The confirmation pages wherever pages are served: URL-mode hosts get them without
        # --confirm-in-browser too. Under --stdio without either flag, no socket is opened.
        import confirm_pages
        import web_pages

        members.append(confirm_pages.install(server, tokens, passkeys=config.get("passkeys", "off")))
        pages = web_pages.PageSet(members)
    else:
        pages = None
    return server, pages


def refuse_flags(args: argparse.Namespace) -> int | None:
    """The exit status for a combination of flags that cannot work, after saying why; else None."""
    if args.stdio and args.no_auth:
        say("--no-auth applies to --http only (stdio has no tokens)")
        return EXIT_USAGE
    if args.stdio and args.conformance_fixtures:
        say("--conformance-fixtures applies to --http only (the suite drives HTTP)")
        return EXIT_USAGE
    if args.sandbox == "require":
        import sandbox

        abi = sandbox.kernel_abi()
        if isinstance(abi, str):
            say(f"sandbox: required, but {abi}; not serving")
            return EXIT_USAGE
    if args.http and args.no_auth:
        import streamable_http

        if not streamable_http.is_loopback(args.host):
            say(f"--no-auth refused: host {args.host!r} is not a loopback address")
            return EXIT_USAGE
    return None


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
