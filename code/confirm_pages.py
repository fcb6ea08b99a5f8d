"""The confirmation pages: where a person without a form approves notes_delete, notes_update or notes_move.

    GET  /confirm/<handle>            sign in, or (signed in as the link's principal) the request
    POST /confirm/<handle>/sign-in    the bearer token typed here; a session for this link alone
    POST /confirm/<handle>/decision   approve (Move to trash, Apply) or Keep, with the CSRF token
    POST /confirm/<handle>/passkey    (--passkeys offer|require) sign in with a passkey's assertion
    POST /confirm/<handle>/register   (--passkeys offer|require) register a passkey, just after a token sign-in

The link comes from the tool's result (code/browser_confirm.py); it grants nothing. The
sign-in, sessions, CSRF and the Origin rule are code/web_pages.py's, shared with the connect
pages. One page serves every confirmed tool: the tool that asked says what it shows
(browser_confirm.Confirmed.review), read live inside the workspace (layer 2) and only while
the principal is still granted it (layer 1): for notes_delete the matching notes to choose
from, with what the store knows of each (title, folder, last change, the first lines); for a
note tool the whole diff, or where the note goes, at the version the request was made at. A
decision is written on the nonce in the confirmations table every instance shares; the
change itself happens on the model's next call, in the store's atomic step. Standard
library only.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from typing import Any

import browser_confirm
import main
import passkey_pages
import stores
import web_pages
from web_pages import Headers, Response, Session

__all__ = ["install"]

PATH_PREFIX = browser_confirm.PageLinks.prefix  # where the links point
SESSION_COOKIE = "confirm_session"
LOGIN_COOKIE = "confirm_login"

GONE = (
    "This link is not valid: it is unknown, already decided or expired. Nothing was changed. "
    "Start again from your MCP client."
)
WRONG_ACCOUNT = "This confirmation was asked for by another account. Sign in as that account; nothing was changed."
CHANGED = (
    "That note changed or is no longer offered since this page was shown; nothing was approved. "
    "Reload the page and choose again."
)


class ConfirmPages(web_pages.SignedInPages):
    """GET /confirm/<handle>; POST /confirm/<handle>/sign-in and /confirm/<handle>/decision."""

    prefix = PATH_PREFIX
    title = "confirmation pages"
    session_cookie = SESSION_COOKIE
    login_cookie = LOGIN_COOKIE
    actions = ("sign-in", "decision", "passkey", "register")

    def __init__(
        self,
        flow: browser_confirm.PageFlow,
        server: Any,
        tokens: Mapping[str, str],
        log: Callable[[str], None],
        passkeys: str = passkey_pages.OFF,
    ) -> None:
        self.links = flow.links  # built before the tools: the pages serve the address their links name
        super().__init__(tokens, log, web_pages.Sessions(server.clock), flow.links.base_url)
        self.records = flow.records
        self.tools = server.tools  # the tools by name, read at each request: each confirmed tool's page is its review
        self.clock = server.clock
        self.passkeys: passkey_pages.Gate | None = None  # --passkeys offer|require
        if passkeys != passkey_pages.OFF:
            keys = stores.store_of(server.services).ledger.passkeys()
            self.passkeys = passkey_pages.Gate(passkeys, keys, server.clock, log, lambda: self.links.base_url)

    @property  # the base's plain field, here the links' own: the tools link where the pages are served
    def base_url(self) -> str | None:
        """The pages' origin: the one their links name (None: not served)."""
        return self.links.base_url

    @base_url.setter
    def base_url(self, value: str | None) -> None:
        self.links.base_url = value

    def handle(self, method: str, path: str, headers: Headers, body: bytes, peer: str = "") -> Response:
        """One HTTP request under /confirm/ from `peer` to (status, headers, body); never raises for client input."""
        parts = path.partition("?")[0].split("/")
        # ["", "confirm", handle] or ["", "confirm", handle, action]
        request = self.page_request(method, parts, headers, body, GONE)
        if not isinstance(request, web_pages.PageRequest):
            return request
        handle, action = request
        record = self.records.by_handle(handle)
        tool = self.tools.get(record.tool or main.TOOL_NAME) if record is not None else None
        if (
            record is None
            or record.status != browser_confirm.PENDING
            or not isinstance(tool, browser_confirm.Confirmed)
        ):
            # Forged, decided (on the page or in the host) and expired links all read the same (so does one no
            # tool here can show).
            return self.page(404, "Link not valid", GONE)
        if action in ("passkey", "register") and self.passkeys is None:
            return self.page(404, "Not found", GONE)
        session_id, session = self.session_of(headers)
        if action == "passkey":
            return self.passkey_sign_in(handle, record, session_id, headers, body)
        if action == "sign-in":
            principal = self.signed_in_principal(handle, headers, body, peer)
            if not isinstance(principal, str):
                return principal
            if principal != record.principal:
                self.log(f"confirm page: sign-in as {principal!r} refused on another principal's confirmation")
                return self.page(403, "Wrong account", WRONG_ACCOUNT)
            # The session acts on this link alone: an approval needs the token typed for it.
            return self.start_session(principal, session_id, handle, scope=handle)
        if session is None or session.scope != handle:
            return (
                self.sign_in_page(handle, headers)
                if action == ""
                else self.sign_in_page(handle, headers, 403, "Sign in first.")
            )
        if session.principal != record.principal:
            self.log(f"confirm page: principal {session.principal!r} refused on another principal's confirmation")
            return self.page(403, "Wrong account", WRONG_ACCOUNT)
        if action == "":
            return self.review_page(handle, record, session, tool)
        if action == "register":
            return self.register(handle, session, body)
        return self.decision(handle, record, session, body, tool)

    # ---------------------------------------------------------------- passkeys (code/passkey_pages.py)

    def page(  # type: ignore[override]  # the base's static page; this one reads the instance's passkeys
        self,
        status: int,
        title: str,
        text: str,
        extra: Any = (),
        raw: str = "",
        script: tuple[str, str] | None = None,
    ) -> Response:
        """Every page here, with the passkeys' script when they are on."""
        if self.passkeys is not None:
            script = (passkey_pages.SCRIPT, passkey_pages.SCRIPT_HASH)
        return web_pages.SignedInPages.page(status, title, text, extra, raw, script)

    def sign_in_other(self, handle: str, pre_session: str) -> str:
        """The passkey sign-in button beside the token form (offer and require)."""
        if self.passkeys is None:
            return ""
        return self.passkeys.sign_in_form(
            f"{PATH_PREFIX}{handle}/passkey", self.login_token(pre_session, handle), handle, pre_session
        )

    def passkey_sign_in(
        self, handle: str, record: browser_confirm.Record, old: str | None, headers: Headers, body: bytes
    ) -> Response:
        """A session for the link's principal from a passkey assertion over this link and this browser's sign-in."""
        assert self.passkeys is not None
        fields = self.form(body) or {}
        pre_session = self.pre_session(handle, headers, fields)
        if not isinstance(pre_session, str):
            return pre_session
        key = self.passkeys.assertion(fields, self.passkeys.challenge("sign-in", handle, pre_session), None)
        if isinstance(key, str):
            return self.sign_in_page(
                handle, headers, 403, key.replace("Nothing was approved.", "You are not signed in.")
            )
        if key.principal != record.principal:
            self.log(f"confirm page: passkey sign-in as {key.principal!r} refused on another principal's confirmation")
            return self.page(403, "Wrong account", WRONG_ACCOUNT)
        return self.start_session(key.principal, old, handle, scope=handle, via="passkey", credential=key.credential_id)

    def register(self, handle: str, session: Session, body: bytes) -> Response:
        """Register a passkey for the principal, only in a session its token signed in moments ago."""
        assert self.passkeys is not None
        fields = self.form(body)
        if not self.csrf_ok(session, fields):
            self.log("confirm page: passkey registration refused: missing or wrong CSRF token")
            return self.page(
                403, "Forbidden", "The form expired or did not come from this page. Reload it and try again."
            )
        assert fields is not None
        # A passkey session cannot add another key, and a stale one must type the token again:
        # registering is what the token proves, moments before.
        if session.via != "token" or not self.clock() - session.started <= passkey_pages.REGISTER_WINDOW_SECONDS:
            return self.page(
                403,
                "Sign in with the token",
                "Registering a passkey needs a sign-in with your token just before. Nothing was registered.",
            )
        # Require: the token alone must not add a key beside the person's, or a model holding
        # the token (and a virtual authenticator) could approve with its own. A lost passkey is
        # removed by the operator; then the token registers the new one.
        if self.passkeys.required and self.passkeys.keys.of(session.principal):
            return self.page(403, "Already registered", passkey_pages.ALREADY)
        key = self.passkeys.register(session.principal, handle, session.csrf, fields)
        if isinstance(key, str):
            return self.page(400, "Not registered", key)
        return self.page(
            303, "Passkey registered", "Continue to the request.", [("Location", f"{PATH_PREFIX}{handle}")]
        )

    def passkey_markup(self, handle: str, session: Session) -> str:
        """After the decision form: the offer to register a passkey (a fresh token sign-in's session only)."""
        if self.passkeys is None or session.via != "token":
            return ""
        return self.passkeys.register_form(f"{PATH_PREFIX}{handle}/register", session.principal, handle, session.csrf)

    def approve_attributes(self, session: Session) -> str:
        """The decision form's attributes: in require mode the script asks the passkey when approving."""
        return self.passkeys.approve_attributes(session.principal) if self.passkeys is not None else ""

    def note_attributes(self, record: browser_confirm.Record, note_id: str, version: str) -> str:
        """A choice's own approval challenge (require mode)."""
        return self.passkeys.note_attributes(record, note_id, version) if self.passkeys is not None else ""

    def approve_notice(self) -> str:
        """Require mode: approving needs a passkey (said without JavaScript too)."""
        return self.passkeys.approve_notice() if self.passkeys is not None else ""

    def approving_passkey(
        self, record: browser_confirm.Record, session: Session, fields: dict[str, str], note_id: str, version: str
    ) -> str | Response | None:
        """The credential approving (require: this request's assertion; else a passkey sign-in's), or the refusal."""
        if self.passkeys is None:
            return None
        if not self.passkeys.required:
            return session.credential or None
        # Require: a model holding the cookie and the CSRF token (driving the browser, or with
        # a shell) still has no user-verified assertion over this one change.
        key = self.passkeys.assertion(
            fields, self.passkeys.approval_challenge(record, note_id, version), session.principal
        )
        if isinstance(key, str):
            self.log(f"confirm page: approval for principal {session.principal!r} refused: no valid passkey assertion")
            return self.page(403, "Not approved", key)
        return key.credential_id

    def sign_in_intro(self) -> str:
        """What the sign-in is for: confirming a change (it names no note: the page after the sign-in does)."""
        return (
            "<p>Your MCP client asked to delete, edit or move a note. To review and confirm, first sign in to this "
            "notes server.</p>"
        )

    def review_page(
        self,
        handle: str,
        record: browser_confirm.Record,
        session: Session,
        tool: browser_confirm.Confirmed,
        error: str = "",
    ) -> Response:
        """The tool's review as it reads now (the change, or the notes to choose from), its approving button, Keep."""
        review = tool.review(record)
        if isinstance(review, str):
            # Changed, moved, gone or no longer granted: nothing to approve, but Keep still ends it.
            error, title, change, apply = review, "Nothing to approve", "", ""
        else:
            title = review.heading
            if review.legend:  # a choice between notes: each at the version shown
                items = "".join(self.choice_item(record, choice, len(review.choices) == 1) for choice in review.choices)
                choices = (
                    f"<fieldset><legend>{html.escape(review.legend)}</legend>{items}</fieldset>"
                    if items
                    else "<p>No note matches any more.</p>"
                )
            else:  # the one note the change is for, at the version it was asked at
                choices = "".join(
                    f'<input type="hidden" name="note" value="{html.escape(f"{c.version}:{c.note_id}")}"'
                    f"{self.note_attributes(record, c.note_id, c.version)}>"
                    for c in review.choices
                )
            change = (
                f'<div class="request"><p>{html.escape(review.request)}</p></div>'
                + (f'<pre class="change">{html.escape(review.shown)}</pre>' if review.shown else "")
                + choices
                + f'<p class="hint">{html.escape(review.hint)} Nothing happens until your MCP client calls again.</p>'
                + self.approve_notice()
            )
            label = html.escape(tool.apply_label)
            approve = f'<button type="submit" name="decision" value="approve" class="danger">{label}</button>'
            apply = approve if review.choices else ""
        action = html.escape(f"{PATH_PREFIX}{handle}/decision")
        body = (
            (f'<p class="alert" role="alert">{html.escape(error)}</p>' if error else "")
            + f"<p>Signed in as <strong>{html.escape(session.principal)}</strong>.</p>"
            f'<form method="post" action="{action}"{self.approve_attributes(session)}>'
            f'<input type="hidden" name="csrf" value="{html.escape(session.csrf)}">{change}{apply}'
            # Keep needs no choice: the browser must not hold it back for the unticked radio buttons.
            '<button type="submit" name="decision" value="keep" formnovalidate>Keep</button></form>'
            + self.passkey_markup(handle, session)
        )
        return self.page(200, title, "", raw=body)

    def choice_item(self, record: browser_confirm.Record, choice: browser_confirm.Choice, only: bool) -> str:
        """One note to choose: title, where it lies and when it changed, first lines; the version shown is approved."""
        value = html.escape(f"{choice.version}:{choice.note_id}")  # the version shown is approved, never a later one
        lines = f"<pre>{html.escape(choice.lines)}</pre>" if choice.lines else ""
        attributes = self.note_attributes(record, choice.note_id, choice.version)
        return (
            f'<label class="note"><input type="radio" name="note" value="{value}" required{" checked" if only else ""}'
            f"{attributes}><strong>{html.escape(choice.title)}</strong><br>"
            f'<span class="hint">{html.escape(choice.about)}</span>{lines}</label>'
        )

    def decision(
        self,
        handle: str,
        record: browser_confirm.Record,
        session: Session,
        body: bytes,
        tool: browser_confirm.Confirmed,
    ) -> Response:
        """Approve (a note the review offers, at the version it shows) or Keep, only with this session's CSRF token."""
        fields = self.form(body)
        # Cross-site request forgery: only our own page knows this session's token.
        if not self.csrf_ok(session, fields):
            self.log("confirm page: decision refused: missing or wrong CSRF token")
            return self.page(
                403, "Forbidden", "The form expired or did not come from this page. Reload it and try again."
            )
        assert fields is not None
        choice = fields.get("decision")
        if choice == "keep":
            if not self.records.decide(handle, session.principal, browser_confirm.DECLINED, None, None):
                return self.page(404, "Link not valid", GONE)
            self.log(f"confirmation for principal {session.principal!r}: kept")
            return self.page(200, "Kept", f"Nothing will be {tool.noun}. Return to your MCP client.")
        if choice != "approve":
            return self.page(400, "Bad request", f"Choose {tool.apply_label} or Keep.")
        version, _, note_id = fields.get("note", "").partition(":")
        review = tool.review(record)
        # Only a note the page offers, as it reads now, at the version it showed: an id typed in, or one changed
        # since, is refused.
        if isinstance(review, str) or (note_id, version) not in [(c.note_id, c.version) for c in review.choices]:
            return self.review_page(handle, record, session, tool, CHANGED)
        credential = self.approving_passkey(record, session, fields, note_id, version)
        if not isinstance(credential, (str, type(None))):
            return credential
        if not self.records.decide(handle, session.principal, browser_confirm.APPROVED, note_id, version, credential):
            return self.page(404, "Link not valid", GONE)
        self.log(f"confirmation for principal {session.principal!r}: approved")
        return self.page(
            200,
            "Approved",
            f"Return to your MCP client: {tool.effect} when it calls {tool.name} again. "
            f"Nothing has been {tool.noun} yet.",
        )


def install(server: Any, tokens: Mapping[str, str], passkeys: str = passkey_pages.OFF) -> ConfirmPages:
    """The confirmation pages of the server's notes_delete (the product's), at the address of its links.

    The tool holds the links (browser_confirm.PageLinks, built before it); the pages serve
    them, reading its decisions table, so nothing is added to the tool. With `passkeys` offer
    or require the optional WebAuthn library must be installed (serve.py says so first).
    """
    tool = server.tools[main.TOOL_NAME]
    if not isinstance(tool, browser_confirm.ConfirmedNotesDelete) or tool.flow is None:
        raise TypeError("the confirmation pages need the product's notes_delete (browser_confirm.ConfirmedNotesDelete)")
    return ConfirmPages(tool.flow, server, tokens, server.say, passkeys)
