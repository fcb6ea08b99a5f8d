"""`notes_delete` for hosts that show no form: the person confirms on this server's own page.

The lesson's tool (code/main.py, section 7) needs a form the host shows; without one it
refuses with -32021. The product's `notes_delete` is this subclass, which keeps that flow
for every request that declares form elicitation and adds two channels for the rest:

    url      the request declares URL-mode elicitation: `input_required` sends the person to
             this server's confirmation page (the notes_publish pattern); each retry reads
             the server's own record of what the person did there.
    browser  the operator turned on --confirm-in-browser: the first call returns a normal,
             non-error result (nothing deleted, a link, an expiry, a signed single-use
             `confirmation` token); the second call, with the same arguments and the token,
             deletes what the person approved on the page.

Where neither applies, the lesson's -32021 stands, saying what would make deletion possible.

The token is a requestState in all but name: main.new_state signs it (principal, tool,
arguments digest, phase, nonce, expiry, and the page's handle) and main.verify_state checks
it. Neither the token nor the link approves anything: only a POST from the page, signed in
as the same principal with the bearer token typed there, records `approved(note id,
version, by, at)` on the nonce in a table every instance shares. The second call reads that
record and, through main.consume (the store's atomic step, with its audit entry), re-reads
and re-checks the chosen note (layers 1 and 2), deletes it and consumes the nonce: once.

    ConfirmedNotesDelete   the tool (registered by assemble.build_server)
    records_for            where a store keeps the page's decisions: its ledger's (stores.Ledger.decisions),
                           in memory for the memory store, else in the store's database
                           (SQLite, PostgreSQL, the folder store's confirmation database)

The pages themselves are code/confirm_pages.py. Standard library only.
"""

from __future__ import annotations

import contextlib
import copy
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

import audit
import ledger
import main
import stores
from stores import MAX_PENDING_PER_PRINCIPAL, Confirmations  # the bound on undecided pages, named where the pages are

__all__ = [
    "APPROVED", "CONFIRMATION", "CONFIRMATION_PROPERTY", "DECLINED", "ISSUED", "PENDING", "PHASE_BROWSER", "PHASE_URL",
    "STILL_PENDING", "URL_KEY", "ConfirmedNotesDelete", "PageFlow", "Record", "Review", "Reviewer",
    "absent_if_empty", "records_for", "supports_url_elicitation",
]

PHASE_BROWSER = "confirm_in_browser"  # the phase of a `confirmation` token (second call with the argument)
PHASE_URL = "confirm_on_page"  # the phase of a URL-mode requestState
URL_KEY = "confirm_on_page"  # the inputRequests key of the URL-mode elicitation
CONFIRMATION = "confirmation"  # the argument the second call carries the token in
PENDING, APPROVED, DECLINED = stores.DECISION_PENDING, "approved", "declined"
AWAITING = "awaiting_approval"  # the reason of the first call's result: nothing deleted yet
LINK = "link"  # the claim holding the link a confirmation was issued with

NOTHING_DELETED = (
    "Nothing was deleted: deleting needs a host that shows forms, or this server's operator turning on --confirm-in-browser."
)
REFUSAL = "Server requires form elicitation for this request. " + NOTHING_DELETED
URL_MESSAGE = "Choose the note to delete and confirm on this server's page."


CONFIRMATION_PROPERTY = {
    "type": "string", "maxLength": main.MAX_STATE_LENGTH,
    "description": "Leave it out, or send an empty string, on the first call (both mean absent). On the second call: "
                   "the confirmation token the first call returned, unchanged.",
}  # fmt: skip
ISSUED, STILL_PENDING = "issued", "pending"  # the `status` of the first call's result, and of a second call before any decision


def refused_confirmation(tool: str) -> str:
    """The one message for a `confirmation` token refused for any reason: it names the argument and the next step."""
    # One message for every reason (forged, altered, used, expired, another's, other
    # arguments), as the lesson keeps one for requestState: the refusal tells a prober nothing.
    return (f"Invalid params: confirmation is not valid (it is used, expired or was made for other arguments); nothing was "
            f"changed. Call {tool} again without confirmation to get a new link.")


def absent_if_empty(call: main.ToolCall) -> main.ToolCall:
    """The call with an empty `confirmation` left out: "" is the first call (some clients send every property)."""
    arguments = call.arguments
    if isinstance(arguments, dict) and arguments.get(CONFIRMATION) == "":
        return call._replace(arguments={name: value for name, value in arguments.items() if name != CONFIRMATION})
    return call


def product_descriptor() -> dict[str, Any]:
    """notes_delete's descriptor with the `confirmation` argument and the page's outcomes (a copy; main's is unchanged)."""
    tool = copy.deepcopy(main.NOTES_DELETE_TOOL)
    tool["description"] = (
        "Delete one note whose title matches, inside the workspace folder you name. The user chooses the note and "
        "confirms in a form before anything is deleted; a host that shows no forms gets a link instead: the user "
        "confirms on this server's page, then call again with the same arguments and the confirmation token."
    )
    tool["inputSchema"]["properties"][CONFIRMATION] = copy.deepcopy(CONFIRMATION_PROPERTY)
    output = tool["outputSchema"]["properties"]
    output["reason"]["enum"] = [*output["reason"]["enum"], AWAITING]
    output["url"] = {"type": "string", "description": "The page where the user chooses and confirms."}
    output["expiresAt"] = {"type": "string", "description": "When the link and the token stop working (UTC)."}
    output[CONFIRMATION] = {"type": "string", "description": "Pass back unchanged on the second call."}
    output.update(STATUS_PROPERTY)
    return tool


STATUS_PROPERTY = {"status": {
    "type": "string", "enum": [ISSUED, STILL_PENDING],
    "description": f"With a link: {ISSUED!r} on the first call, {STILL_PENDING!r} when called again before the user decided.",
}}  # fmt: skip


PRODUCT_TOOL = product_descriptor()


# =====================================================================================
# What the page decided, on the nonce, shared by every instance
# =====================================================================================


Record = stores.Decision  # one confirmation page: whose, for which arguments, until when, what the person decided
SqlConfirmations = ledger.SqlConfirmations  # the page's decisions in the store's database (SQLite, PostgreSQL, folders)


def records_for(store: stores.Store, clock: Callable[[], float]) -> Confirmations:
    """Where a store keeps the page's decisions: beside its nonces, in its ledger (the folder store's confirmation database)."""
    return store.ledger.decisions(clock)


# =====================================================================================
# The tool
# =====================================================================================


class Pages(Protocol):
    """What the tool needs of the confirmation pages (code/confirm_pages.py)."""

    def url(self, handle: str) -> str:
        """The absolute link to a handle's page."""
        ...

    def serves(self, principal: str) -> bool:
        """True when the pages are being served and `principal` can sign in to them."""
        ...

    def issued(self, handle: str, expires_at: float) -> None:
        """A link to `handle` was given out: it must answer until `expires_at`, whatever becomes of this process."""
        ...


class Review(NamedTuple):
    """What a tool's confirmation page shows (plain text; the page escapes it) and which note, at which version, it approves."""

    heading: str  # the page's title, a question
    request: str  # what the MCP client asked for, in one sentence
    shown: str  # the change itself, whole (an update's diff, a move's from and to)
    hint: str  # what happens to what is replaced
    apply: str  # the label of the button that approves
    note_id: str
    version: str


class Reviewer(Protocol):
    """A tool whose confirmation page shows one change (code/notes_tools.py's notes_update and notes_move)."""

    def review(self, record: Record) -> Review | str:
        """The change a pending record asks for, read live (layers 1 and 2, the version it was asked at); else why not."""
        ...


def iso(at: float) -> str:
    """A time as ISO 8601 UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


class PageFlow:
    """The page's half of a confirmation, for any tool: open a page, the link result, the token back, the decision read.

    notes_delete (below) and the note tools' notes_update and notes_move (code/notes_tools.py)
    share one of these per server: one table of decisions, one set of pages, one option.
    """

    def __init__(self, services: main.Services, records: Confirmations, browser: bool = False) -> None:
        self.services, self.records = services, records
        self.browser = browser  # the operator's --confirm-in-browser
        self.pages: Pages | None = None  # set when the confirmation pages are served

    def serves(self, principal: str) -> bool:
        """True when the pages are served and `principal` can sign in to them."""
        return self.pages is not None and self.pages.serves(principal)

    def open(self, principal: str, tool: str, args_digest: str, phase: str, cands: list[tuple[str, str]],
             extra: dict[str, Any], workspace: str, title: str, detail: str | None = None) -> tuple[str, dict[str, Any]]:
        """Keep a new pending record for `tool` and return its handle and the claims of its signed state."""
        handle = secrets.token_urlsafe(32)
        # The handle is signed into the state: a token presented with another page's record is refused.
        # So is the link itself: every later call, on any process, names the very link the person got.
        claims = main.new_state(self.services, principal, tool, args_digest, phase, cands,
                                extra={**extra, "handle": handle, LINK: self.url(handle)})
        record = Record(handle, claims["nonce"], principal, workspace, title, claims["exp"], tool=tool, detail=detail)
        if not self.records.open(record):
            raise main.ToolError("Too many confirmation pages are waiting for you; finish one or let it expire.")
        assert self.pages is not None
        self.pages.issued(handle, claims["exp"])
        self.services.log(f"confirmation page opened for principal {principal!r}")
        return handle, claims

    def link(self, state: main.StatePayload | dict[str, Any], handle: str) -> str:
        """The link a confirmation was issued with (signed into its state), else this server's link to `handle`."""
        extra = state.get("extra", state) if isinstance(state, dict) else state.extra
        given = extra.get(LINK) if isinstance(extra, dict) else None
        return given if isinstance(given, str) else self.url(handle)

    def url(self, handle: str) -> str:
        """The page's absolute link."""
        assert self.pages is not None
        return self.pages.url(handle)

    def url_request(self, link: str, message: str) -> dict[str, Any]:
        """The URL-mode elicitation naming this server's page at `link`."""
        return {"method": "elicitation/create", "params": {"mode": "url", "message": message, "url": link}}

    def awaiting(self, token: str, link: str, expires_at: float, says: Callable[[str, str], str],
                 structured: dict[str, Any], status: str = ISSUED) -> dict[str, Any]:
        """The non-error result saying nothing changed yet: `says(url, until)`, then the token; the link, expiry and token structured."""
        until = iso(expires_at)
        text = f"{says(link, until)}\nconfirmation: {token}"
        if status == STILL_PENDING:
            text = "Not approved yet. " + text
        return main.tool_result(text, {**structured, "reason": AWAITING, "status": status, "url": link, "expiresAt": until,
                                       CONFIRMATION: token})

    @staticmethod
    def token_of(arguments: dict[str, Any], tool: str) -> tuple[str, dict[str, Any]]:
        """The second call's `confirmation` token and the other arguments; a token of the wrong shape is the tool's error."""
        rest = dict(arguments)
        token = rest.pop(CONFIRMATION)
        if not isinstance(token, str) or not 0 < len(token) <= main.MAX_STATE_LENGTH:
            raise main.ToolError(f"Invalid arguments for tool {tool}: confirmation must be the token the first call returned; "
                                 "leave it out to get a new link.")
        return token, rest

    @staticmethod
    @contextlib.contextmanager
    def refused_as_confirmation(tool: str) -> Iterator[None]:
        """Inside: a refused token reads as `refused_confirmation(tool)`, naming the argument the model sent (still -32602)."""
        try:
            yield
        except main.McpError as exc:
            if exc.code == main.INVALID_PARAMS and exc.message == main.STATE_INVALID:
                raise main.McpError(main.INVALID_PARAMS, refused_confirmation(tool)) from None
            raise

    def decided(self, principal: str, state: main.StatePayload, tool: str) -> Record:
        """The page's record of a verified state: its own nonce, principal, handle and tool; else the one -32602."""
        record = self.records.by_nonce(state.nonce)
        if record is None or record.principal != principal or record.handle != state.extra.get("handle") or (record.tool or main.TOOL_NAME) != tool:
            self.services.log("refused requestState: no confirmation page for it")
            raise main.McpError(main.INVALID_PARAMS, main.STATE_INVALID)
        return record

    @staticmethod
    def approved(record: Record, principal: str) -> bool:
        """True when the page recorded an approval by the principal itself, with the note and version it showed."""
        return (record.status == APPROVED and record.decided_by == principal
                and record.note_id is not None and record.version is not None)


class ConfirmedNotesDelete(main.NotesDelete):
    """The product's notes_delete: the lesson's form flow, and the page (URL mode, or --confirm-in-browser) where no form shows."""

    def __init__(self, services: main.Services, records: Confirmations, browser: bool = False) -> None:
        super().__init__(services)
        self.flow = PageFlow(services, records, browser)
        self.records = records
        self.browser = browser
        self.descriptor = PRODUCT_TOOL if browser else main.NOTES_DELETE_TOOL

    @property
    def pages(self) -> Pages | None:
        """The confirmation pages, once served (shared with the note tools through `flow`)."""
        return self.flow.pages

    @pages.setter
    def pages(self, pages: Pages | None) -> None:
        self.flow.pages = pages

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """Route by what this request declares: a form (the lesson's flow), URL mode, the browser link; else -32021."""
        if self.browser:
            call = absent_if_empty(call)
        if self.browser and isinstance(call.arguments, dict) and CONFIRMATION in call.arguments:
            return self.confirmed(call)
        capabilities = call.meta.capabilities
        if main.supports_form_elicitation(capabilities):
            audit.mark("form")
            return super().call(call)
        served = self.flow.serves(call.principal)
        if served and supports_url_elicitation(capabilities):
            return self.by_url(call)
        if served and self.browser and call.state is None:
            return self.first_call(call)
        try:
            return super().call(call)  # the lesson's checks in the lesson's order, ending in -32021
        except main.McpError as exc:
            if exc.code != main.MISSING_REQUIRED_CLIENT_CAPABILITY:
                raise
            raise main.McpError(exc.code, REFUSAL, exc.data) from None

    # ---------------------------------------------------------------- both channels

    def open_page(self, call: main.ToolCall, scope: main.Scope, phase: str) -> tuple[str, dict[str, Any]]:
        """Check the notes exist (none: the lesson's error), keep a pending record, and the claims of its signed state."""
        main.lookup(self.notes, scope)  # the same "no note" error; the page lists them live
        return self.flow.open(call.principal, main.TOOL_NAME, scope.digest, phase, [], {},
                              scope.arguments["workspaceUri"], scope.arguments["title"])

    def settle_page(self, principal: str, scope: main.Scope, state: main.StatePayload, channel: str,
                    ask_again: Callable[[Record], dict[str, Any]]) -> dict[str, Any]:
        """What the page recorded decides: pending asks again, declined consumes, approved deletes in the atomic step."""
        record = self.flow.decided(principal, state, main.TOOL_NAME)
        if record.status == PENDING:
            return ask_again(record)
        audit.mark(channel, record.decided_by, record.decided_at, record.decided_with)
        if not self.flow.approved(record, principal):
            main.consume(self.services, principal, state)
            return main.not_deleted("declined", "The user pressed Keep on the confirmation page; nothing was deleted.")
        assert record.note_id is not None and record.version is not None
        return self.delete(principal, scope, state, (record.note_id, record.version))  # re-check and delete, once

    # ---------------------------------------------------------------- URL mode

    def by_url(self, call: main.ToolCall) -> dict[str, Any]:
        """input_required sending the person to the page; each retry: the server's record decides, never the answer."""
        args = main.read_scope_args(call.arguments)
        scope = main.authorize(self.policy, call.principal, args, self.log)
        if call.state is None:
            handle, claims = self.open_page(call, scope, PHASE_URL)
            return main.input_required({URL_KEY: self.url_request(self.flow.link(claims, handle))}, self.services.signer.sign(claims))
        state = main.verify_state(self.services, call.state, call.principal, main.TOOL_NAME, scope.digest, {PHASE_URL})
        answer = main.read_answer(call.responses, URL_KEY)
        if answer is not None and answer.action == "cancel":
            return main.not_deleted("cancelled", "Cancelled; nothing was deleted.")  # the state stays usable
        if answer is not None and answer.action == "decline":
            audit.mark("url")
            main.consume(self.services, call.principal, state)
            return main.not_deleted("declined", "Declined; nothing was deleted.")
        token = call.state  # asked again: the very same state, so the same nonce and expiry
        return self.settle_page(call.principal, scope, state, "url",
                                lambda record: main.input_required({URL_KEY: self.url_request(self.flow.link(state, record.handle))}, token))

    def url_request(self, link: str) -> dict[str, Any]:
        """The URL-mode elicitation naming this server's page at `link`."""
        return self.flow.url_request(link, URL_MESSAGE)

    # ---------------------------------------------------------------- --confirm-in-browser

    def first_call(self, call: main.ToolCall) -> dict[str, Any]:
        """Nothing deleted: the link, its expiry and the signed confirmation token; the result names no note."""
        args = main.read_scope_args(call.arguments)
        scope = main.authorize(self.policy, call.principal, args, self.log)
        handle, claims = self.open_page(call, scope, PHASE_BROWSER)
        return self.awaiting(self.services.signer.sign(claims), self.flow.link(claims, handle), claims["exp"])

    def awaiting(self, token: str, link: str, expires_at: float, status: str = ISSUED) -> dict[str, Any]:
        """The non-error result saying nothing was deleted yet, what the user does, and what to call next."""
        return self.flow.awaiting(token, link, expires_at, lambda url, until: (
            f"Nothing was deleted yet. Ask the user to open {url} in their browser, sign in, choose the note and press "
            f"Move to trash (or Keep). Then call notes_delete again with the same workspaceUri and title and with "
            f"confirmation set to the token below. The link and the token stop working at {until}."), {"deleted": False}, status)

    def confirmed(self, call: main.ToolCall) -> dict[str, Any]:
        """The second call: verify the token (main.verify_state), then the page's record decides."""
        token, arguments = self.flow.token_of(call.arguments, main.TOOL_NAME)
        args = main.read_scope_args(arguments)
        scope = main.authorize(self.policy, call.principal, args, self.log)  # layer 1, on every call
        with self.flow.refused_as_confirmation(main.TOOL_NAME):
            state = main.verify_state(self.services, token, call.principal, main.TOOL_NAME, scope.digest, {PHASE_BROWSER})
            return self.settle_page(call.principal, scope, state, "browser",
                                    lambda record: self.awaiting(token, self.flow.link(state, record.handle), record.expires_at,
                                                                 STILL_PENDING))


def supports_url_elicitation(capabilities: Any) -> bool:
    """True when this request declares URL-mode elicitation (`{"url": {}}`)."""
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    return isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)
