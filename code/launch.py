"""From the resolved settings to a served transport: each part built once, from what it needs.

    built = build(settings, bind=True)            sockets, keeper, store, server, tools, pages
    status = run(built)                           the start-up block, then one transport until a signal

The construction order (docs/architecture.md, "Built by construction"): the settings
(code/settings.py); the sockets (under --http the listener, under --stdio with pages the
pages' socket, and the page keeper forked while this process is one thread with no
database open); the store and the server (assemble.build_server, given its log, the
--confirm-in-browser choice and the keeper's view of the page's decisions); the
extensions' tools; the pages, given their origin (the publicUrl, or the bound socket's
address); then the transport: the HTTP policy (its Host names from the bound port, its
Origins from the settings), the endpoint (with its refusal log and legacy router) and the
engine on the bound socket. Nothing is set on a part once it is built
(tests/test_construction.py). Extension modules are imported only when asked for.
Standard library only.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import assemble
import browser_confirm
import config as configuration
import frame
import stores
from assemble import EXIT_USAGE, say
from config import ConfigError
from settings import Refused, Settings

if TYPE_CHECKING:  # imported where a socket is bound or a keeper forked: --stdio without pages loads neither
    import socket

    import page_keeper

__all__ = ["Built", "build", "run", "stop_on_signals"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # every signal that stops the server


class Built(NamedTuple):
    """What build() made: the server, the settings it was built from, its pages, the bound socket, the page keeper."""

    server: frame.Server
    settings: Settings
    pages: Any  # web_pages.PageSet, a PagesOnDemand, or None where no page is served
    sock: socket.socket | None  # --http: the listener's; --stdio with pages: the pages'; else None
    keeper: page_keeper.Keeper | None  # --stdio with pages over a shared store: who serves them after this process

    def close(self) -> None:
        """Close the store and the socket (a process that built but will not serve)."""
        assemble.close_store(stores.store_of(self.server.services))
        if self.sock is not None:
            self.sock.close()


# =====================================================================================
# Building
# =====================================================================================


def build(settings: Settings, bind: bool = False) -> Built:
    """Every part, in order (see the module's docstring); Refused after one line if a socket or the store cannot be had.

    With `bind` (the command, not a test building a server in its own process) the sockets are
    bound here, and under --stdio the pages' keeper (code/page_keeper.py) is forked before the store opens;
    without it no socket is bound and the pages are not served (their origin is unknown).
    """
    sock = keeper = None
    if settings.http and bind:
        import http_server

        try:
            sock = http_server.bind(settings.host.strip("[]"), settings.port)
        except OSError as exc:
            say(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}")
            raise Refused(1) from None
    elif bind and settings.serves_pages:
        import socket

        port = settings.connect_port
        try:
            sock = socket.create_server(("127.0.0.1", port))  # SO_REUSEADDR and listening, as the HTTP engine's own
        except OSError as exc:
            say(f"cannot listen on 127.0.0.1:{port} for the pages: {exc.strerror or exc}")
            raise Refused(1) from None
        if settings.shares_decisions:  # the memory store: a later process could not read a decision made here
            import page_keeper

            # Forked now: one thread, no database open yet (a fork after either is unsafe).
            keeper = page_keeper.fork(lambda links: keep_pages_after(settings, sock, links))
    links = page_links(settings, sock)  # before the tools that give them out and the pages that serve them
    try:
        server = build_server(settings, None if keeper is None else keeper.issued, links=links)
    except (ConfigError, assemble.StartupError) as exc:
        if sock is not None:
            sock.close()
        say(str(exc))
        raise Refused(EXIT_USAGE) from None
    return Built(server, settings, build_pages(server, settings, sock, links), sock, keeper)


def page_links(settings: Settings, sock: socket.socket | None) -> browser_confirm.PageLinks:
    """The confirmation pages' links: at their origin (the publicUrl, or the bound socket's address), else none."""
    if sock is None or not settings.serves_pages:
        return browser_confirm.PageLinks()
    return browser_confirm.PageLinks(
        pages_origin(settings.public_url, settings.passkeys, listened(settings, sock)), settings.tokens
    )


def build_server(
    settings: Settings,
    issued: Callable[[str, float], None] | None = None,
    kept: set[str] | None = None,
    links: browser_confirm.PageLinks | None = None,
) -> frame.Server:
    """The server with the tools asked for; `issued` hears of each link given out, `kept` limits the pages to those.

    `links` are the confirmation pages' links (none: the tools give out none).
    """

    def confirmations(records: stores.Confirmations) -> stores.Confirmations:
        if kept is not None:
            import page_keeper  # only where a keeper serves pages: a server alone never loads it

            return page_keeper.OnlyThese(records, kept)
        if issued is not None:
            import page_keeper

            return page_keeper.Announcing(records, issued)
        return records

    server = assemble.build_server(
        settings.store,
        settings.keys,
        log=say,
        browser=settings.confirm_in_browser,
        confirmations=confirmations,
        links=links,
    )
    if settings.notes_tools:
        import notes_tools  # imported only when asked for: the lesson's server lists notes_delete alone

        notes_tools.install(server)
    if settings.conformance_fixtures:
        import conformance_fixtures  # imported only when asked for: test fixtures are not the product

        conformance_fixtures.install(server)
    return server


def build_pages(
    server: frame.Server, settings: Settings, sock: socket.socket | None, links: browser_confirm.PageLinks
) -> Any:
    """The pages this server serves, at its `links`' origin (None: not served until bound); None where none are."""
    if not settings.serves_pages:
        return None
    if sock is not None and not settings.http and settings.confirm_in_browser and not settings.publish:
        return PagesOnDemand(server, settings, sock, links)
    import confirm_pages
    import web_pages

    members: list[Any] = []
    if settings.publish:
        import connect

        members.append(connect.install(server, settings.tokens, base_url=links.base_url))
    # The confirmation pages wherever pages are served: URL-mode hosts get them without --confirm-in-browser too.
    members.append(confirm_pages.install(server, settings.tokens, passkeys=settings.passkeys))
    return web_pages.PageSet(members)


def listened(settings: Settings, sock: socket.socket) -> str:
    """The http:// address a bound socket listens on (the pages' socket is always 127.0.0.1's)."""
    if settings.http:
        import http_server

        return http_server.url_of(sock.getsockname(), "")
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


def pages_origin(public_url: str | None, passkeys: str, listened: str) -> str:
    """Where people open the pages: publicUrl, else the loopback listener's `listened` (localhost with passkeys)."""
    if not public_url and passkeys != "off":
        # WebAuthn needs a domain RP ID in a secure context: an IP address is never one, and
        # http://localhost is both. The listener is on loopback (start() refused anything else).
        from urllib.parse import urlsplit

        return f"http://localhost:{urlsplit(listened).port}"
    return public_url or listened


def loopback_hosts(port: int, public_url: str | None) -> frozenset[str]:
    """The Host values a loopback listener on `port` accepts: its loopback names, and the publicUrl's host."""
    import streamable_http

    names = {f"{name}:{port}" for name in streamable_http.LOOPBACK_NAMES}
    if port == 80:
        names |= set(streamable_http.LOOPBACK_NAMES)
    if public_url:
        # The browser names the public origin in Origin and, through a proxy that keeps it, in Host.
        names.add(public_url.split("://", 1)[1])
    return frozenset(names)


def store_waits(store: stores.NotesStore) -> bool:
    """False only for the memory store: its calls take microseconds and never wait on a disk, a lock or a peer."""
    return not isinstance(store, stores.MemoryStore)


# =====================================================================================
# The start-up report
# =====================================================================================
#
# One short block on stderr once serving starts: what is served, to whom, from where, and
# what was left out. A list of lines; each component adds its own (the store's describe(),
# the transport's address), and nothing in it is a credential: principals by name, a
# PostgreSQL URL without its user or password.


def startup_report(server: frame.Server, settings: Settings, transport: str, extra: Sequence[str] = ()) -> list[str]:
    """The start-up block: `transport`, principals, workspaces, the store's lines, confirmations, extensions, `extra`.

    A component with something to say at start-up (a sandbox's status, say) passes its
    line in `extra`, or, for a store, returns it from describe().
    """
    principals = settings.store["principals"]
    lines = [transport]
    if settings.http and settings.no_auth:
        lines.append(f"principals: no bearer token (--no-auth): every request acts as {settings.stdio_principal!r}")
    elif settings.http:
        lines.append(f"principals: {', '.join(sorted(principals))} (each by its bearer token)")
    # The store's own lines first: a folder store counts each folder in the same walk.
    store = stores.store_of(server.services)
    described = store.describe()  # which lookup indexes serve; what a folder walk skipped
    if isinstance(described, str):  # the SQL stores: one line
        described = [described]
    if described:
        described = [f"notes store: {described[0]}", *described[1:]]
    owners: dict[str, list[str]] = {}
    for name in principals:
        for uri in server.policy.workspaces(name):
            owners.setdefault(uri, []).append(name)
    for uri, names in owners.items():
        lines.append(f"workspace {uri} ({', '.join(names)}): {assemble.note_count(store, uri)}")
    if not owners:
        lines.append("workspaces: none granted, so every notes_delete call is refused")
    lines.extend(described)
    lines.append(f"consumed confirmations: {assemble.confirmations_home(settings.store)}{relative_db(settings)}")
    lines.append(f"extensions: {', '.join(extensions(settings)) or 'none'}")
    lines.append(f"confirmation page: {confirmation_page(settings)}")
    lines.extend(extra)
    return lines


def relative_db(settings: Settings) -> str:
    """For a relative --db, what the report adds to the absolute path it resolved to at start-up; else ""."""
    # A host starts servers from whatever folder it likes: `--db notes.db` from two folders
    # is two databases, so a confirmation declined on one instance could be accepted on the
    # other. The path each instance really uses is said, and why it is that one.
    if settings.relative_db is None:
        return ""
    return (
        f" (--db {settings.relative_db} is relative: resolved against the working directory at start-up; instances "
        "share confirmations only when they name this same file, so give hosts the absolute path)"
    )


def confirmation_page(settings: Settings) -> str:
    """Whether hosts without a form can confirm a deletion on this server's page, and how."""
    public = settings.public_url
    at = f"; links at {public} (publicUrl: the pages' Origin, Secure cookies when https)" if public else ""
    at += {
        "offer": "; passkeys offered (a passkey signs in instead of the token)",
        "require": "; passkeys required (every approval needs a passkey assertion)",
    }.get(settings.passkeys, "")
    if settings.confirm_in_browser:
        return f"on (--confirm-in-browser): a host without forms gets a link, and URL-mode hosts the page{at}"
    if settings.serves_pages:
        return (
            f"URL-mode hosts only (--confirm-in-browser is off: hosts with neither forms nor URL mode get -32021){at}"
        )
    if settings.http:
        return (
            f"off: --host {settings.host} is not a loopback address and publicUrl is unset, so no page is served "
            "(hosts without forms get -32021)"
        )
    return "off (hosts without forms get -32021; --confirm-in-browser turns it on)"


def extensions(settings: Settings) -> list[str]:
    """The extensions this process serves, by name."""
    names = ["2025-11-25 clients (loaded at their first initialize)"] if settings.legacy else []
    if settings.publish:
        names.append("notes_publish and its connect pages")
    if settings.notes_tools:
        names.append(
            "the note tools (notes_workspaces, notes_list, notes_search, notes_read, notes_create, "
            "notes_append, notes_update, notes_edit, notes_move)"
        )
    if settings.conformance_fixtures:
        names.append("conformance fixtures (testing only)")
    return names


def report(lines: Sequence[str]) -> None:
    """The start-up block, one say() per line."""
    for line in lines:
        say(line)


# =====================================================================================
# Running a transport
# =====================================================================================


def run(built: Built) -> int:
    """Serve the built server on its transport until a signal stops it; the exit status."""
    return serve_http(built) if built.settings.http else serve_stdio(built)


def stop_on_signals(handler: Any) -> None:
    """Install `handler` for every signal that stops the server: SIGTERM, SIGINT and SIGHUP alike."""
    # SIGHUP (a closed terminal, a supervisor's reload) killed the process outright: no
    # graceful shutdown, no store close. It now ends the server exactly as SIGTERM does.
    for signum in STOP_SIGNALS:
        signal.signal(signum, handler)


class LegacyOnDemand:
    """2025-11-25 HTTP sessions, loaded with the first request that may be one (as stdio loads them at `initialize`)."""

    def __init__(self, server: frame.Server) -> None:
        self.server = server
        self.sessions: Any = None
        self.lock = threading.Lock()

    def route(self, request: Any, principal: str) -> Any:
        """legacy_http's answer; the first call imports it."""
        with self.lock:
            if self.sessions is None:
                import legacy_http

                self.sessions = legacy_http.LegacyHttp(self.server, log=say)
        return self.sessions.route(request, principal)

    def close(self) -> None:
        """End every legacy session (there are none if no legacy client came)."""
        with self.lock:
            if self.sessions is not None:
                self.sessions.close()


def serve_http(built: Built) -> int:
    """Listen on the bound socket, print the URL line, serve until SIGTERM or SIGINT, then finish what is in flight."""
    import streamable_http

    server, settings, sock = built.server, built.settings, built.sock
    assert sock is not None
    tokens: dict[str, str] = {}
    if settings.no_auth:
        say(
            f"warning: --no-auth: HTTP requests without a token act as principal {settings.stdio_principal!r}; "
            "for local development and conformance tests only (loopback addresses only)"
        )
    else:
        tokens = settings.tokens
    port = sock.getsockname()[1]
    # Known only once bound (--port 0): the names a loopback client may put in Host.
    hosts = loopback_hosts(port, settings.public_url) if settings.pages_on_loopback else None
    policy = streamable_http.HttpPolicy(
        tokens, settings.stdio_principal if settings.no_auth else None, hosts, settings.allowed_origins
    )
    sessions = (
        LegacyOnDemand(server) if settings.legacy else None
    )  # `--no-legacy` leaves `initialize` to the core's -32601
    refused = streamable_http.RefusalLog(say)
    endpoint = streamable_http.McpEndpoint(
        server, policy, built.pages, refused=refused, legacy=None if sessions is None else sessions.route
    )
    httpd = streamable_http.listen(
        settings.host.strip("[]"), port, endpoint, say,
        settings.request_timeout or streamable_http.REQUEST_TIMEOUT_SECONDS,
        store_waits=store_waits(server.notes), refused=refused, sock=sock,
    )  # fmt: skip

    # Counted before confinement (a walk of each folder); printed after it, the listening line first.
    lines = startup_report(server, settings, f"listening on {httpd.url(streamable_http.ENDPOINT)}")
    confined = confine(settings, [port])
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


def serve_stdio(built: Built) -> int:
    """stdio; with --publish or --confirm-in-browser, plus a loopback-only listener serving nothing but the pages."""
    import stdio_transport

    server, settings, pages, keeper = built.server, built.settings, built.pages, built.keeper
    principal = settings.stdio_principal
    lines = startup_report(server, settings, f"serving on stdio as principal {principal!r}")
    if pages is None or built.sock is None:
        confined = confine(settings, [])
        if confined is None:
            return EXIT_USAGE
        report([*lines, confined])
        return stdio_transport.serve_stdio(server, principal, settings.legacy)
    kept = (
        f"; links kept by process {keeper.pid} once this one exits, until each is decided or expires"
        if keeper is not None
        else "; links live as long as this process (the memory store shares no decision)"
    )
    port = built.sock.getsockname()[1]
    at = f"http://127.0.0.1:{port}"
    where = "" if pages.base_url == at else f" (listening on {at})"
    if isinstance(pages, PagesOnDemand):
        confined = confine(settings, [port])
        if confined is None:
            return EXIT_USAGE
        report([*lines, f"confirmation pages on {pages.base_url}{PagesOnDemand.prefix}" + where + kept, confined])
        pages.start()
        try:
            return stdio_transport.serve_stdio(server, principal, settings.legacy)
        finally:
            pages.close()
    listener = pages_listener(server, settings, pages, built.sock, say)
    confined = confine(settings, [port])
    if confined is None:
        return EXIT_USAGE
    served = "; ".join(f"{member.title} on {pages.base_url}{member.prefix}" for member in pages.members)
    report([*lines, served + where + kept, confined])
    thread = threading.Thread(target=listener.serve_forever, name="connect-pages", daemon=True)
    thread.start()
    try:
        return stdio_transport.serve_stdio(server, principal, settings.legacy)
    finally:
        listener.shutdown(0)
        thread.join()


class PagesOnDemand:
    """Under --stdio, the confirmation pages started once a link is given out: the real pages and their listener.

    The socket is bound at start-up (its port is in the sandbox plan and the start-up report);
    the HTTP engine and the pages are loaded only by a process that gives out a link, so a
    host that starts a process per call waits for none of it on calls that need no page. A
    browser that opens the link at once waits in the bound socket's backlog until they serve.
    """

    prefix = browser_confirm.PageLinks.prefix

    def __init__(
        self, server: frame.Server, settings: Settings, sock: socket.socket, links: browser_confirm.PageLinks
    ) -> None:
        self.server, self.settings, self.sock, self.links = server, settings, sock, links
        self.base_url = str(links.base_url)
        self._waiter = threading.Thread(target=self._serve_once_linked, name="confirm-pages", daemon=True)
        self._listener: Any = None
        self._closing = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Wait, on a thread of its own, for the first link the tools give out (call once the process is confined)."""
        self._waiter.start()

    def _serve_once_linked(self) -> None:
        self.links.given.wait()
        with self._lock:
            if self._closing:
                return
            import confirm_pages
            import web_pages

            # In the operator's passkey mode, over the links the tools give out.
            real = confirm_pages.install(self.server, self.settings.tokens, passkeys=self.settings.passkeys)
            self._listener = pages_listener(self.server, self.settings, web_pages.PageSet([real]), self.sock, say)
        self._listener.serve_forever()

    def close(self) -> None:
        """Stop the listener if it was started, and the thread waiting for a link if not."""
        with self._lock:
            self._closing = True
            listener = self._listener
        self.links.given.set()  # wakes a waiter that saw no link: it finds the pages closing
        if listener is not None:
            listener.shutdown(0)
        if self._waiter.is_alive():
            self._waiter.join()


def pages_listener(
    server: frame.Server, settings: Settings, pages: Any, sock: socket.socket, log: Callable[[str], None]
) -> Any:
    """The loopback listener of the pages alone (no /mcp), on the socket bound at start-up."""
    import streamable_http

    refused = streamable_http.RefusalLog(say)
    # The pages alone: the publicUrl is their one extra Origin (allowedOrigins is for the MCP endpoint's callers).
    origins = frozenset({settings.public_url} if settings.public_url else ())
    policy = streamable_http.HttpPolicy({}, None, loopback_hosts(sock.getsockname()[1], settings.public_url), origins)
    endpoint = streamable_http.McpEndpoint(server, policy, pages, mcp_endpoint=False, refused=refused)
    timeout = settings.request_timeout or streamable_http.REQUEST_TIMEOUT_SECONDS
    return streamable_http.listen("127.0.0.1", 0, endpoint, log, timeout, refused=refused, sock=sock)


def keep_pages_after(settings: Settings, sock: socket.socket, links: dict[str, float]) -> int:
    """The keeper's work once the server ended: the pages of `links` alone, on the same socket, until done."""
    import confirm_pages
    import page_keeper
    import web_pages

    # The shared store, opened afresh in this process; the links at the origin the server gave them out at.
    server = build_server(settings, kept=set(links), links=page_links(settings, sock))
    confirm = confirm_pages.install(server, settings.tokens, passkeys=settings.passkeys)
    listener = pages_listener(server, settings, web_pages.PageSet([confirm]), sock, lambda line: None)
    if confine(settings, [listener.address[1]]) is None:  # the server's own sandbox plan
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


def confine(settings: Settings, ports: Sequence[int]) -> str | None:
    """Confine the process as --sandbox asks (code/sandbox.py); the line saying how, or None if required and impossible.

    Called once the store is open and the listener bound, before any thread starts and
    before the line that says the server listens (clients may connect from then on).
    """
    if settings.sandbox == "off":
        return "sandbox: off (--no-sandbox); serving unconfined"
    import sandbox

    folders, db = settings.folders, settings.db
    url = db if db and db.startswith(configuration.POSTGRES_SCHEMES) else None
    state = None if url else db or (assemble.default_nonce_db() if folders else None)
    here = os.path.dirname(os.path.abspath(__file__))
    status = sandbox.confine(sandbox.server_plan(here, folders, state, url, settings.config_path, ports))
    if settings.sandbox == "require" and not status.complete:
        say(
            f"sandbox: required, but {status.reason or 'the metadata filter failed: ' + status.unfiltered}; not serving"
        )
        return None
    return status.describe()
