"""URL-mode elicitation: `notes_publish` and the out-of-band connect flow it needs.

Form mode must never carry a secret. When a tool needs the user to connect a
third-party account, the server sends the user to its *own* web page instead
(`elicitation/create` with `mode: "url"`), the user signs in there as the same
principal that made the MCP call, presses Allow or Deny, and the service credential is
stored server-side. It never crosses the MCP wire: not in `inputResponses`, results,
errors or URLs, and it is never logged.

    ReportService   the simulated third-party service (credentials, publications)
    ConnectStore    flow records, browser sessions and stored credentials (one lock)
    ConnectPages    the HTML pages: handle(method, path, headers, body) -> response,
                    framework-free, called by the HTTP transport and the stdio-side
                    loopback listener alike
    NotesPublish    the `notes_publish` tool, added with frame.Server.add_tool
    install()       wires the three together

`accept` on a URL-mode elicitation only means "the user agreed to open the page". On
each retry the server reads its own flow record: connected, so it publishes; not yet,
so it asks again for the same flow until that flow expires. Standard library only.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import hashlib
import html
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any, cast

import confirmations
import frame
import main
import stores
import web_pages
from web_pages import (  # noqa: F401  (the limits and style these pages share, named here too)
    CONTENT_SECURITY_POLICY,
    MAX_FORM_BYTES,
    MAX_FORM_FIELDS,
    MAX_SESSIONS_PER_PRINCIPAL,
    SESSION_TTL_SECONDS,
    STYLE,
    Headers,
    Response,
    Session,
)

__all__ = ["install"]

# =====================================================================================
# Names and limits
# =====================================================================================

TOOL_NAME = "notes_publish"
CHOICE_KEY = "publish_choice"  # inputRequests key of the "which note?" form
CONNECT_KEY = "connect_report_service"  # inputRequests key of the URL-mode elicitation
PHASE_CHOOSE = "choose_publish"
PHASE_CONNECT = "connect_report_service"
SERVICE_NAME = "Report service"
CONNECT_MESSAGE = "Connect the report service to continue."
PATH_PREFIX = "/connect/"
SESSION_COOKIE = "connect_session"
LOGIN_COOKIE = "connect_login"  # the pre-session that the sign-in form's login token is bound to
DISCONNECT_PATH = f"{PATH_PREFIX}disconnect"

FLOW_TTL_SECONDS = 600.0  # a connect link works for ten minutes, then a fresh one is issued
MAX_PENDING_FLOWS_PER_PRINCIPAL = 20  # unfinished connect links one principal may hold
MAX_REPORTS_KEPT_PER_PRINCIPAL = 100  # publications the service remembers per account; the oldest go

PUBLISH_TOOL: dict[str, Any] = {
    "name": TOOL_NAME,
    "title": "Publish a note",
    "description": (
        "Publish one note whose title matches, inside the workspace folder you name, to the report "
        "service. The first time, the user connects the report service on this server's web page."
    ),
    "inputSchema": copy.deepcopy(main.NOTES_DELETE_TOOL["inputSchema"]),
    "outputSchema": {
        "type": "object",
        "properties": {
            "published": {"type": "boolean"},
            "noteId": {"type": "string"},
            "reportId": {"type": "string"},
            "reason": {"type": "string", "enum": ["declined", "cancelled", "denied"]},
        },
        "required": ["published"],
        "additionalProperties": False,
    },
    "annotations": {
        "title": "Publish a note",
        "readOnlyHint": False,
        "destructiveHint": False,
        "idempotentHint": False,
        "openWorldHint": True,
    },
}


def supports_url_elicitation(capabilities: Mapping[str, Any]) -> bool:
    """True when this request declares URL-mode elicitation (`{"url": {}}`)."""
    elicitation = capabilities.get("elicitation")
    return isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)


def fingerprint(secret: str) -> str:
    """What the tables key on instead of a secret itself (credentials)."""
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


# =====================================================================================
# The simulated report service (a third party in real life)
# =====================================================================================


class ReportService:
    """Issues an access credential per account and records what each account published."""

    def __init__(self) -> None:
        self._accounts: dict[str, str] = {}  # fingerprint(credential) -> principal
        # A long-running server publishing in a loop must not grow without bound: only the
        # newest MAX_REPORTS_KEPT_PER_PRINCIPAL are kept, while report numbers keep counting.
        self._published: dict[str, collections.deque[dict[str, Any]]] = {}
        self._issued: dict[str, int] = {}  # principal -> reports ever published
        self._lock = threading.Lock()

    def authorize(self, principal: str) -> str:
        """The credential the service grants when `principal` presses Allow (a new one each time)."""
        credential = secrets.token_urlsafe(32)
        with self._lock:
            self._accounts[fingerprint(credential)] = principal
        return credential

    def revoke(self, credential: str) -> None:
        """The credential stops working (Disconnect, or replaced by a newer Allow)."""
        with self._lock:
            self._accounts.pop(fingerprint(credential), None)

    def publish(self, credential: str, note: main.Note) -> str:
        """Record `note` for the account the credential belongs to; the new report id."""
        with self._lock:
            principal = self._accounts.get(fingerprint(credential))
            if principal is None:
                raise PermissionError("unknown credential")
            reports = self._published.setdefault(principal, collections.deque(maxlen=MAX_REPORTS_KEPT_PER_PRINCIPAL))
            self._issued[principal] = self._issued.get(principal, 0) + 1
            report_id = f"report-{self._issued[principal]}"
            reports.append({"reportId": report_id, "noteId": note.id, "title": note.title, "revision": note.revision})
            return report_id

    def published(self, principal: str) -> list[dict[str, Any]]:
        """Copies of the newest MAX_REPORTS_KEPT_PER_PRINCIPAL publications of `principal`, oldest first."""
        with self._lock:
            return copy.deepcopy(list(self._published.get(principal, ())))


# =====================================================================================
# Flow records, sessions, stored credentials
# =====================================================================================

PENDING, ALLOWED, DENIED = "pending", "allowed", "denied"


@dataclasses.dataclass
class Flow:
    """One connect link: who it is for, where it stands, until when it works."""

    principal: str
    created: float
    expires: float
    state: str = PENDING
    tool: str = TOOL_NAME  # the MCP request that asked, shown on the consent page
    note_title: str = ""


class ConnectStore:
    """Everything the connect flow keeps server-side, under one lock, on the injected clock."""

    def __init__(self, service: ReportService, clock: Callable[[], float]) -> None:
        self.service = service
        self.clock = clock
        self._flows: dict[str, Flow] = {}  # handle -> flow
        self._credentials: dict[str, str] = {}  # principal -> service credential
        self._lock = threading.Lock()

    def _prune(self, now: float) -> None:
        for handle in [h for h, flow in self._flows.items() if not now < flow.expires]:
            del self._flows[handle]

    # ---------------------------------------------------------------- flows (MCP side)

    def start_flow(self, principal: str, tool: str = TOOL_NAME, note_title: str = "") -> str | None:
        """A new pending flow's handle (remembering which request asked), or None when the principal holds too many."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            pending = sum(1 for flow in self._flows.values() if flow.principal == principal and flow.state == PENDING)
            # A client calling in a loop would otherwise grow the table without bound.
            if pending >= MAX_PENDING_FLOWS_PER_PRINCIPAL:
                return None
            handle = secrets.token_urlsafe(32)
            self._flows[handle] = Flow(principal, now, now + FLOW_TTL_SECONDS, tool=tool, note_title=note_title)
            return handle

    def flow_state(self, handle: Any, principal: str) -> str | None:
        """PENDING, ALLOWED or DENIED for this principal's live flow; None if unknown or expired."""
        with self._lock:
            self._prune(self.clock())
            flow = self._flows.get(handle) if isinstance(handle, str) else None
            return flow.state if flow is not None and flow.principal == principal else None

    def discard_flow(self, handle: Any, principal: str) -> None:
        """Forget a flow once its MCP request completed (its link is dead from now on)."""
        with self._lock:
            flow = self._flows.get(handle) if isinstance(handle, str) else None
            if flow is not None and flow.principal == principal:
                del self._flows[handle]

    def credential(self, principal: str) -> str | None:
        """The stored service credential for `principal` (server-side use only)."""
        with self._lock:
            return self._credentials.get(principal)

    # ---------------------------------------------------------------- flows (page side)

    def open_flow(self, handle: str) -> Flow | None:
        """A copy of the flow if its link may still be used: known, pending and unexpired."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            flow = self._flows.get(handle)
            return dataclasses.replace(flow) if flow is not None and flow.state == PENDING else None

    def decide(self, handle: str, principal: str, allow: bool) -> bool:
        """Record Allow (store a fresh credential) or Deny, once; False if the link is no longer usable."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            flow = self._flows.get(handle)
            # Checked again under the lock: two tabs pressing Allow and Deny race here.
            if flow is None or flow.state != PENDING or flow.principal != principal:
                return False
            if allow:
                old = self._credentials.get(principal)
                self._credentials[principal] = self.service.authorize(principal)
                if old is not None:
                    self.service.revoke(old)  # one live credential per principal, not one per Allow
            flow.state = ALLOWED if allow else DENIED
            return True

    def disconnect(self, principal: str) -> bool:
        """Remove and revoke the stored credential; False if there was none."""
        with self._lock:
            credential = self._credentials.pop(principal, None)
        if credential is None:
            return False
        self.service.revoke(credential)
        return True


# =====================================================================================
# The pages: plain server-rendered HTML behind a framework-free handler
# =====================================================================================

GONE = "This link is not valid: it is unknown, already used or expired. Start again from your MCP client."
WRONG_ACCOUNT = "This connection request was started by another account. Sign in as that account; nothing was changed."


class ConnectPages(web_pages.SignedInPages):
    """GET /connect/<handle>; POST /connect/<handle>/sign-in, /connect/<handle>/decision and /connect/disconnect."""

    prefix = PATH_PREFIX  # what the HTTP transport routes here
    title = "connect pages"
    session_cookie = SESSION_COOKIE
    login_cookie = LOGIN_COOKIE
    login_ttl = FLOW_TTL_SECONDS

    def __init__(
        self, store: ConnectStore, tokens: Mapping[str, str], log: Callable[[str], None], base_url: str | None = None
    ) -> None:
        super().__init__(tokens, log, web_pages.Sessions(store.clock), base_url)
        self.store = store

    def flow_url(self, handle: str) -> str:
        """The absolute link for a flow (the server's own page, nothing else in it)."""
        return self.url(handle)

    def handle(self, method: str, path: str, headers: Headers, body: bytes, peer: str = "") -> Response:
        """One HTTP request under /connect/ from `peer` to (status, headers, body); never raises for client input."""
        parts = path.partition("?")[0].split("/")
        if path.partition("?")[0] == DISCONNECT_PATH:
            if method != "POST":
                return self.page(405, "Method not allowed", "Use the Disconnect button.", [("Allow", "POST")])
            return self.check_post(headers, body) or self.disconnect(headers, body)
        # ["", "connect", handle] or ["", "connect", handle, action]
        request = self.page_request(method, parts, headers, body, GONE)
        if not isinstance(request, web_pages.PageRequest):
            return request
        handle, action = request
        flow = self.store.open_flow(handle)
        if flow is None:
            # Forged, replayed (already decided) and expired handles all read the same.
            return self.page(404, "Link not valid", GONE)
        session_id, session = self.session_of(headers)
        if action == "sign-in":
            return self.sign_in(handle, flow, headers, session_id, body, peer)
        if session is None:
            # A decision without a live session: sign in first (and nothing is stored).
            return (
                self.sign_in_page(handle, headers)
                if action == ""
                else self.sign_in_page(handle, headers, 403, "Sign in first.")
            )
        # The URL alone grants nothing: the browser must be signed in as the flow's principal.
        if session.principal != flow.principal:
            self.log(f"connect page: principal {session.principal!r} refused on another principal's flow")
            return self.page(403, "Wrong account", WRONG_ACCOUNT)
        if action == "":
            return self.consent_page(handle, flow, session)
        return self.decision(handle, session, body)

    def sign_in(
        self, handle: str, flow: Flow, headers: Headers, old_session: str | None, body: bytes, peer: str = ""
    ) -> Response:
        """Check the login token and the bearer token, bind a fresh session to its principal, go back to the flow
        page."""
        principal = self.signed_in_principal(handle, headers, body, peer)
        if not isinstance(principal, str):
            return principal
        if principal != flow.principal:
            self.log(f"connect page: sign-in as {principal!r} refused on another principal's flow")
            return self.page(403, "Wrong account", WRONG_ACCOUNT)
        return self.start_session(principal, old_session, handle)

    def decision(self, handle: str, session: Session, body: bytes) -> Response:
        """Allow or Deny, only with this session's CSRF token."""
        fields = self.form(body)
        # Cross-site request forgery: only our own page knows this session's token.
        if not self.csrf_ok(session, fields):
            self.log("connect page: decision refused: missing or wrong CSRF token")
            return self.page(
                403, "Forbidden", "The form expired or did not come from this page. Reload it and try again."
            )
        choice = fields.get("decision") if fields is not None else None
        if choice not in ("allow", "deny"):
            return self.page(400, "Bad request", "Choose Allow or Deny.")
        if not self.store.decide(handle, session.principal, choice == "allow"):
            return self.page(404, "Link not valid", GONE)
        self.log(f"connect flow for principal {session.principal!r}: {'allowed' if choice == 'allow' else 'denied'}")
        if choice == "allow":
            return self.connected_page(session)
        return self.page(
            200,
            "Not connected",
            f"You denied the request; {SERVICE_NAME} was not connected. Return to your MCP client.",
        )

    def disconnect(self, headers: Headers, body: bytes) -> Response:
        """Remove the signed-in principal's stored credential, only with the session's CSRF token."""
        _, session = self.session_of(headers)
        if session is None:
            return self.page(403, "Sign in first", "Your sign-in here has expired. Nothing was changed.")
        if not self.csrf_ok(session, self.form(body)):
            self.log("connect page: disconnect refused: missing or wrong CSRF token")
            return self.page(403, "Forbidden", "The form expired or did not come from this page. Nothing was changed.")
        removed = self.store.disconnect(session.principal)
        if removed:
            self.log(f"connect: principal {session.principal!r} disconnected the report service")
        who, service = html.escape(session.principal), html.escape(SERVICE_NAME)
        text = (
            f"<p><strong>{service}</strong> is no longer connected to <strong>{who}</strong>. "
            "The next publish will ask you to connect again.</p>"
            if removed
            else f"<p><strong>{service}</strong> was not connected to <strong>{who}</strong>; nothing was changed.</p>"
        )
        return self.page(200, "Disconnected", "", raw=text)

    # ---------------------------------------------------------------- rendering

    def sign_in_intro(self) -> str:
        """What the sign-in is for: connecting the service."""
        return f"<p>To connect <strong>{html.escape(SERVICE_NAME)}</strong>, first sign in to this notes server.</p>"

    def disconnect_form(self, session: Session) -> str:
        """The Disconnect button (a CSRF-protected POST)."""
        return (
            f'<form method="post" action="{html.escape(DISCONNECT_PATH)}">'
            f'<input type="hidden" name="csrf" value="{html.escape(session.csrf)}">'
            '<button type="submit" name="disconnect" value="1">Disconnect</button></form>'
        )

    def consent_page(self, handle: str, flow: Flow, session: Session) -> Response:
        """Which service, which principal, which request asked, what Allow means; Allow or Deny."""
        action = html.escape(f"{PATH_PREFIX}{handle}/decision")
        who, service = html.escape(session.principal), html.escape(SERVICE_NAME)
        note = (
            f" the note <strong>&ldquo;{html.escape(flow.note_title)}&rdquo;</strong>" if flow.note_title else " a note"
        )
        connected = self.store.credential(session.principal) is not None
        body = (
            f"<p>Signed in as <strong>{who}</strong>.</p>"
            f'<div class="request"><p>Your MCP client called the tool <strong>{html.escape(flow.tool)}</strong> '
            f"to publish{note} to <strong>{service}</strong>.</p></div>"
            f"<p><strong>Allow</strong> connects <strong>{service}</strong> to the account <strong>{who}</strong>. "
            "This is a standing connection: later publishes need no new prompt, until you disconnect it. "
            "The access it receives stays on this server; your MCP client never sees it.</p>"
            f'<form method="post" action="{action}">'
            f'<input type="hidden" name="csrf" value="{html.escape(session.csrf)}">'
            '<button type="submit" name="decision" value="allow" class="primary">Allow</button>'
            '<button type="submit" name="decision" value="deny">Deny</button></form>'
        )
        if connected:
            body += (
                f"<hr><p>{service} is already connected for {who}. To remove that connection:</p>"
                + self.disconnect_form(session)
            )
        return self.page(200, f"Connect {SERVICE_NAME}", "", raw=body)

    def connected_page(self, session: Session) -> Response:
        """After Allow: what now, what it means, and the Disconnect button."""
        who, service = html.escape(session.principal), html.escape(SERVICE_NAME)
        body = (
            f"<p><strong>{service}</strong> is connected to <strong>{who}</strong>. "
            "Return to your MCP client to continue: it will publish the note.</p>"
            "<p>Later publishes need no new prompt. To revoke this connection now:</p>" + self.disconnect_form(session)
        )
        return self.page(200, "Connected", "", raw=body)


# =====================================================================================
# The notes_publish tool
# =====================================================================================


def not_published(reason: str, text: str) -> dict[str, Any]:
    """The complete, non-error answer when nothing was published."""
    return main.tool_result(text, {"published": False, "reason": reason})


def choice_form(workspace_uri: str, title: str, notes: list[main.Note]) -> dict[str, Any]:
    """The form asking which of several matching notes to publish (a titled single-select)."""
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": f'{len(notes)} notes match "{title}" in {workspace_uri}. Choose the note to publish.',
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "note_id": {"type": "string", "title": "Note to publish", "oneOf": main.choice_options(notes)}
                },
                "required": ["note_id"],
            },
        },
    }


class NotesPublish:
    """`notes_publish`: scope like notes_delete, then connect (URL mode) once, then publish.

    One flow, one consumption: every state issued for one request (the "which note?"
    form's, and each connect state asked again while the page is unfinished) carries
    the same nonce and expiry, so the flow's terminal outcome (published, declined,
    denied on the page) consumes all of them at once, and none can publish again.
    """

    descriptor = PUBLISH_TOOL

    def __init__(
        self,
        *,
        policy: main.AuthorizationPolicy,
        notes: stores.NotesStore,
        confirmations: confirmations.Confirmations,
        log: Callable[[str], None],
        store: ConnectStore,
        pages: ConnectPages,
    ) -> None:
        self.policy = policy
        self.notes = notes
        self.confirmations = confirmations
        self.log = log
        self.store = store
        self.pages = pages

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """First call: scope, look up, choose/connect/publish. Retry: verify, read the answer, act on its Reply."""
        args = main.read_scope_args(call.arguments, TOOL_NAME)
        # Capability before any lookup, as for notes_delete: a client that cannot open the
        # page learns nothing about notes. Declarations count for this request only.
        if (
            call.state is None
            and self.store.credential(call.principal) is None
            and not supports_url_elicitation(call.meta.capabilities)
        ):
            raise url_required()
        scope = main.authorize(self.policy, call.principal, args, self.log)
        if call.state is None:
            return self.start(call, scope)
        state = self.confirmations.verify(call, scope.digest, (PHASE_CHOOSE, PHASE_CONNECT))
        choosing = state.phase == PHASE_CHOOSE
        if not choosing and (len(state.cands) != 1 or not isinstance(state.extra.get("flow"), str)):
            self.log("refused requestState: a connect state names one note and one flow")
            raise main.McpError(main.INVALID_PARAMS, main.STATE_INVALID)
        if choosing:
            answered = self.confirmations.answer(call, state, [CHOICE_KEY], choice="note_id")
        else:
            answered = self.confirmations.answer(call, state, [CONNECT_KEY])
        if answered.reply is confirmations.Reply.CANCELLED:
            return not_published("cancelled", "Cancelled; nothing was published.")
        if answered.reply is confirmations.Reply.DECLINED:
            self.store.discard_flow(state.extra.get("flow"), call.principal)  # answer() consumed the state
            return not_published("declined", "Declined; nothing was published.")
        if choosing and answered.reply is confirmations.Reply.ASK_AGAIN:
            return self.choose(call, scope, self.lookup(scope), state)  # the same flow
        if choosing:
            assert answered.chosen is not None
            return self.connect(call, scope, answered.chosen, state, None)
        # A connect state, answered or not: the server's own records decide, never the answer.
        return self.connect(call, scope, state.cands[0], state, state.extra["flow"])

    def lookup(self, scope: main.Scope) -> list[main.Note]:
        """The lesson's lookup (its errors for none and for too many) over this server's store."""
        # main.lookup reads only `candidates`, which every stores.NotesStore has.
        return main.lookup(cast(main.MemoryNotesStore, self.notes), scope)

    def start(self, call: main.ToolCall, scope: main.Scope) -> dict[str, Any]:
        """Look up candidates: none is an error, several ask which one, one goes on."""
        found = self.lookup(scope)
        if len(found) == 1:
            return self.connect(call, scope, (found[0].id, found[0].version), None, None)
        if not main.supports_form_elicitation(call.meta.capabilities):
            # No guessing between notes: without a form the caller must name one.
            raise main.ToolError(
                f"{len(found)} notes match; use a title that matches only one (this client cannot show a choice form)."
            )
        return self.choose(call, scope, found, None)

    def choose(
        self, call: main.ToolCall, scope: main.Scope, found: list[main.Note], follows: main.StatePayload | None
    ) -> dict[str, Any]:
        """The "which note?" form."""
        form = choice_form(scope.arguments["workspaceUri"], scope.arguments["title"], found)
        cands = [(n.id, n.version) for n in found]
        return self.confirmations.ask(call, scope.digest, PHASE_CHOOSE, {CHOICE_KEY: form}, cands, follows=follows)

    def connect(
        self,
        call: main.ToolCall,
        scope: main.Scope,
        target: tuple[str, str],
        follows: main.StatePayload | None,
        handle: str | None,
    ) -> dict[str, Any]:
        """Decide from the server's own records: denied, connected (publish), pending (ask again), or a new flow."""
        principal = call.principal
        flow = self.store.flow_state(handle, principal) if handle is not None else None
        if flow == DENIED:
            self.store.discard_flow(handle, principal)
            self.consume(principal, follows)
            return not_published("denied", f"The user denied connecting {SERVICE_NAME}; nothing was published.")
        if self.store.credential(principal) is not None:
            self.store.discard_flow(handle, principal)
            return self.publish(principal, scope, target, follows)
        # A new URL elicitation needs URL mode declared on *this* request.
        if not supports_url_elicitation(call.meta.capabilities):
            raise url_required()
        if flow != PENDING or handle is None:
            # First time, or the old link expired. The page names the note that will be published.
            chosen = [
                n.title for n in self.notes.candidates(scope.workspace, scope.arguments["title"]) if n.id == target[0]
            ]
            handle = self.store.start_flow(principal, TOOL_NAME, chosen[0] if chosen else scope.arguments["title"])
            if handle is None:
                raise main.ToolError("Too many connection requests are pending for you; finish one or try later.")
            self.log(f"connect flow started for principal {principal!r}")
        request = {
            "method": "elicitation/create",
            "params": {"mode": "url", "message": CONNECT_MESSAGE, "url": self.pages.flow_url(handle)},
        }
        return self.confirmations.ask(
            call, scope.digest, PHASE_CONNECT, {CONNECT_KEY: request}, [target], {"flow": handle}, follows=follows
        )

    def publish(
        self, principal: str, scope: main.Scope, target: tuple[str, str], follows: main.StatePayload | None
    ) -> dict[str, Any]:
        """Consume the flow (if any), re-read and re-check the note, publish it with the stored credential."""
        self.consume(principal, follows)
        note_id, version = target
        # Time of check to time of use: the note may have changed, moved or the grant gone.
        live = [
            n
            for n in self.notes.candidates(scope.workspace, scope.arguments["title"])
            if n.id == note_id and n.version == version
        ]
        credential = self.store.credential(principal)
        if not live or credential is None or not self.policy.allows(principal, scope.workspace):
            raise main.ToolError("The note changed, moved or was deleted; nothing was published.")
        report_id = self.store.service.publish(credential, live[0])
        return main.tool_result(
            f"Published note {note_id} to the {SERVICE_NAME.lower()} as {report_id}.",
            {"published": True, "noteId": note_id, "reportId": report_id},
        )

    def consume(self, principal: str, state: main.StatePayload | None) -> None:
        """Consume the flow's nonce in the shared replay store (a first call has none)."""
        if state is not None:
            self.confirmations.consume(principal, state)


def url_required() -> main.McpError:
    """-32021 naming exactly the URL-mode capability."""
    return main.McpError(
        main.MISSING_REQUIRED_CLIENT_CAPABILITY,
        "Server requires URL-mode elicitation for this request",
        {"requiredCapabilities": {"elicitation": {"url": {}}}},
    )


def install(
    server: frame.Server, tokens: Mapping[str, str], service: ReportService | None = None, base_url: str | None = None
) -> ConnectPages:
    """Add `notes_publish` to the server; the pages that complete its flows (the transport sets base_url)."""
    store = ConnectStore(service or ReportService(), server.clock)
    pages = ConnectPages(store, tokens, server.say, base_url)
    tool = NotesPublish(
        policy=server.policy,
        notes=server.notes,
        confirmations=server.confirmations,
        log=server.say,
        store=store,
        pages=pages,
    )
    server.add_tool(tool)
    return pages
