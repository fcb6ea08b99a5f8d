"""The confirmation pages: where a person without a form approves notes_delete, notes_update or notes_move.

    GET  /confirm/<handle>            sign in, or (signed in as the link's principal) the request
    POST /confirm/<handle>/sign-in    the bearer token typed here; a session for this link alone
    POST /confirm/<handle>/decision   approve (Move to trash, Apply) or Keep, with the CSRF token
    POST /confirm/<handle>/passkey    (--passkeys offer|require) sign in with a passkey's assertion
    POST /confirm/<handle>/register   (--passkeys offer|require) register a passkey, just after a token sign-in

The link comes from the tool's result (code/browser_confirm.py); it grants nothing. The
sign-in, sessions, CSRF and the Origin rule are code/web_pages.py's, shared with the connect
pages. For notes_delete the page lists the notes matching the request live, inside its
workspace (layer 2) and only while the principal is still granted it (layer 1), with what
the store knows of each: title, folder, last change, and for the folder store the first
lines of the note. For notes_update and notes_move the tool itself says what the page shows
(browser_confirm.Reviewer): the whole diff, or where the note goes, read live under the same
layers and at the version the request was made at. A decision is written on the nonce in the
confirmations table every instance shares; the change itself happens on the model's second
call, in the store's atomic step. Standard library only.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import browser_confirm
import main
import notes_tools
import passkey_pages
import stores
import web_pages
from web_pages import Headers, Response, Session

__all__ = ["install"]

PATH_PREFIX = "/confirm/"
SESSION_COOKIE = "confirm_session"
LOGIN_COOKIE = "confirm_login"

GONE = "This link is not valid: it is unknown, already decided or expired. Nothing was changed. Start again from your MCP client."
WRONG_ACCOUNT = "This confirmation was asked for by another account. Sign in as that account; nothing was changed."
CHANGED = "That note changed or is no longer offered since this page was shown; nothing was approved. Reload the page and choose again."


class ConfirmPages(web_pages.SignedInPages):
    """GET /confirm/<handle>; POST /confirm/<handle>/sign-in and /confirm/<handle>/decision."""

    prefix = PATH_PREFIX
    title = "confirmation pages"
    session_cookie = SESSION_COOKIE
    login_cookie = LOGIN_COOKIE
    actions = ("sign-in", "decision", "passkey", "register")

    def __init__(
        self,
        records: Any,
        server: Any,
        tokens: Mapping[str, str],
        log: Callable[[str], None],
        base_url: str | None = None,
    ) -> None:
        super().__init__(tokens, log, web_pages.Sessions(server.clock), base_url)
        self.records = records
        self.tools = server.tools  # the tools by name, read at each request: a note tool's page is its own (Reviewer)
        self.notes = stores.store_of(server.services)
        self.policy = server.policy
        self.clock = server.clock
        self.passkeys: passkey_pages.Gate | None = None  # --passkeys offer|require (install())
        # Told of each link given out (handle, expiry): under --stdio, the page keeper that
        # serves it after this process exits (code/page_keeper.py); nothing elsewhere.
        self.on_issue: Callable[[str, float], None] = lambda handle, expires_at: None

    def serves(self, principal: str) -> bool:
        """True once the listener is bound and `principal` has a token to sign in with."""
        return self.base_url is not None and principal in self.signs_in

    def issued(self, handle: str, expires_at: float) -> None:
        """A link to `handle` was given out: whoever keeps these pages alive is told until when."""
        self.on_issue(handle, expires_at)

    def handle(self, method: str, path: str, headers: Headers, body: bytes, peer: str = "") -> Response:
        """One HTTP request under /confirm/ from `peer` to (status, headers, body); never raises for client input."""
        parts = path.partition("?")[0].split("/")
        # ["", "confirm", handle] or ["", "confirm", handle, action]
        request = self.page_request(method, parts, headers, body, GONE)
        if not isinstance(request, web_pages.PageRequest):
            return request
        handle, action = request
        record = self.records.by_handle(handle)
        reviewer = self.reviewer(record)
        if record is None or record.status != browser_confirm.PENDING or reviewer is False:
            # Forged, already decided and expired links all read the same (and one this server cannot show).
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
            return self.sign_in_page(handle, headers) if action == "" else self.sign_in_page(handle, headers, 403, "Sign in first.")
        if session.principal != record.principal:
            self.log(f"confirm page: principal {session.principal!r} refused on another principal's confirmation")
            return self.page(403, "Wrong account", WRONG_ACCOUNT)
        if action == "":
            return self.choice_page(handle, record, session) if reviewer is None else self.review_page(handle, record, session, reviewer)
        if action == "register":
            return self.register(handle, record, session, body, reviewer)
        return self.decision(handle, record, session, body, reviewer)

    # ---------------------------------------------------------------- passkeys (code/passkey_pages.py)

    def page(self, status: int, title: str, text: str, extra: Any = (), raw: str = "",  # type: ignore[override]
             script: tuple[str, str] | None = None) -> Response:
        """Every page here, with the passkeys' script when they are on."""
        if self.passkeys is not None:
            script = (passkey_pages.SCRIPT, passkey_pages.SCRIPT_HASH)
        return web_pages.SignedInPages.page(status, title, text, extra, raw, script)

    def sign_in_other(self, handle: str, pre_session: str) -> str:
        """The passkey sign-in button beside the token form (offer and require)."""
        if self.passkeys is None:
            return ""
        return self.passkeys.sign_in_form(f"{PATH_PREFIX}{handle}/passkey", self.login_token(pre_session, handle), handle, pre_session)

    def passkey_sign_in(self, handle: str, record: browser_confirm.Record, old: str | None, headers: Headers, body: bytes) -> Response:
        """A session for the link's principal from a passkey assertion over this link and this browser's sign-in form."""
        assert self.passkeys is not None
        fields = self.form(body) or {}
        pre_session = self.pre_session(handle, headers, fields)
        if not isinstance(pre_session, str):
            return pre_session
        key = self.passkeys.assertion(fields, self.passkeys.challenge("sign-in", handle, pre_session), None)
        if isinstance(key, str):
            return self.sign_in_page(handle, headers, 403, key.replace("Nothing was approved.", "You are not signed in."))
        if key.principal != record.principal:
            self.log(f"confirm page: passkey sign-in as {key.principal!r} refused on another principal's confirmation")
            return self.page(403, "Wrong account", WRONG_ACCOUNT)
        return self.start_session(key.principal, old, handle, scope=handle, via="passkey", credential=key.credential_id)

    def register(self, handle: str, record: browser_confirm.Record, session: Session, body: bytes,
                 reviewer: browser_confirm.Reviewer | None) -> Response:
        """Register a passkey for the principal, only in a session its token signed in moments ago."""
        assert self.passkeys is not None
        fields = self.form(body)
        if not self.csrf_ok(session, fields):
            self.log("confirm page: passkey registration refused: missing or wrong CSRF token")
            return self.page(403, "Forbidden", "The form expired or did not come from this page. Reload it and try again.")
        assert fields is not None
        # A passkey session cannot add another key, and a stale one must type the token again:
        # registering is what the token proves, moments before.
        if session.via != "token" or not self.clock() - session.started <= passkey_pages.REGISTER_WINDOW_SECONDS:
            return self.page(403, "Sign in with the token", "Registering a passkey needs a sign-in with your token just before. "
                             "Nothing was registered.")
        # Require: the token alone must not add a key beside the person's, or a model holding
        # the token (and a virtual authenticator) could approve with its own. A lost passkey is
        # removed by the operator; then the token registers the new one.
        if self.passkeys.required and self.passkeys.keys.of(session.principal):
            return self.page(403, "Already registered", passkey_pages.ALREADY)
        key = self.passkeys.register(session.principal, handle, session.csrf, fields)
        if isinstance(key, str):
            return self.page(400, "Not registered", key)
        return self.page(303, "Passkey registered", "Continue to the request.", [("Location", f"{PATH_PREFIX}{handle}")])

    def passkey_markup(self, handle: str, record: browser_confirm.Record, session: Session) -> str:
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

    def approving_passkey(self, record: browser_confirm.Record, session: Session, fields: dict[str, str],
                          note_id: str, version: str) -> str | Response | None:
        """The credential an approval is made with (require: this request's assertion; a passkey sign-in's); else the refusal."""
        if self.passkeys is None:
            return None
        if not self.passkeys.required:
            return session.credential or None
        # Require: a model holding the cookie and the CSRF token (driving the browser, or with
        # a shell) still has no user-verified assertion over this one change.
        key = self.passkeys.assertion(fields, self.passkeys.approval_challenge(record, note_id, version), session.principal)
        if isinstance(key, str):
            self.log(f"confirm page: approval for principal {session.principal!r} refused: no valid passkey assertion")
            return self.page(403, "Not approved", key)
        return key.credential_id

    def reviewer(self, record: browser_confirm.Record | None) -> browser_confirm.Reviewer | None | Literal[False]:
        """None for notes_delete's own page; the tool that shows a note tool's record; False when no tool here can show it."""
        if record is None or (record.tool or main.TOOL_NAME) == main.TOOL_NAME:
            return None
        tool = self.tools.get(record.tool)
        return tool if callable(getattr(tool, "review", None)) else False

    def sign_in_intro(self) -> str:
        """What the sign-in is for: confirming a change (it names no note: the page after the sign-in does)."""
        return "<p>Your MCP client asked to delete, edit or move a note. To review and confirm, first sign in to this notes server.</p>"

    def offered(self, record: browser_confirm.Record) -> list[main.Note] | None:
        """The notes this page may offer now: matching, inside the workspace, while it is granted; None if it no longer is."""
        workspace = main.parse_file_uri(record.workspace)
        if not self.policy.allows(record.principal, workspace):  # layer 1 again: a grant may have been revoked
            return None
        found = self.notes.candidates(workspace, record.title)  # layer 2: the store lists only notes inside it
        return [note for note in found if main.inside_workspace(note, workspace)][: main.MAX_CANDIDATES]

    def choice_page(self, handle: str, record: browser_confirm.Record, session: Session, error: str = "") -> Response:
        """The workspace, the matching notes to choose from, what deleting does, Move to trash and Keep."""
        notes = self.offered(record)
        if notes is None:
            return self.page(403, "Not authorized", "That workspace is no longer authorized for you; nothing can be deleted here.")
        who = html.escape(session.principal)
        items = "".join(self.note_item(note, k == 0 and len(notes) == 1, self.note_attributes(record, note.id, note.version))
                        for k, note in enumerate(notes))
        listing = f"<fieldset><legend>Note to delete</legend>{items}</fieldset>" if notes else "<p>No note matches any more.</p>"
        body = (
            (f'<p class="alert" role="alert">{html.escape(error)}</p>' if error else "")
            + f"<p>Signed in as <strong>{who}</strong>.</p>"
            f'<div class="request"><p>Your MCP client called <strong>{main.TOOL_NAME}</strong> for notes titled like '
            f"<strong>&ldquo;{html.escape(record.title)}&rdquo;</strong> in <strong>{html.escape(notes_tools.person_uri(record.workspace))}</strong>.</p></div>"
            f'<form method="post" action="{html.escape(f"{PATH_PREFIX}{handle}/decision")}"{self.approve_attributes(session)}>'
            f'<input type="hidden" name="csrf" value="{html.escape(session.csrf)}">{listing}'
            f'<p class="hint">{html.escape(self.notes.deletion)} Nothing happens until your MCP client calls again.</p>'
            + self.approve_notice()
            + ('<button type="submit" name="decision" value="approve" class="danger">Move to trash</button>' if notes else "")
            # Keep needs no choice: the browser must not hold it back for the unticked radio buttons.
            + '<button type="submit" name="decision" value="keep" formnovalidate>Keep</button></form>'
            + self.passkey_markup(handle, record, session)
        )
        return self.page(200, "Delete a note?", "", raw=body)

    def note_item(self, note: main.Note, only: bool, attributes: str = "") -> str:
        """One choice: title, folder, last change, the first lines where the store has them."""
        folder = notes_tools.person_uri(main.format_file_uri(note.path[:-1]))
        seen = self.notes.preview(note)
        changed = f"last changed {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(seen[0]))}" if seen else f"revision {note.revision}"
        lines = f"<pre>{html.escape(chr(10).join(seen[1]))}</pre>" if seen and seen[1] else ""
        value = html.escape(f"{note.version}:{note.id}")  # the version shown is approved, never a later one
        return (
            f'<label class="note"><input type="radio" name="note" value="{value}" required{" checked" if only else ""}{attributes}>'
            f"<strong>{html.escape(note.title)}</strong><br><span class=\"hint\">{html.escape(folder)} &middot; {changed}</span>"
            f"{lines}</label>"
        )

    def review_page(self, handle: str, record: browser_confirm.Record, session: Session, reviewer: browser_confirm.Reviewer,
                    error: str = "") -> Response:
        """A note tool's change, whole, as the tool reads it now; Apply (when it still applies) and Keep."""
        shown = reviewer.review(record)
        if isinstance(shown, str):
            # Changed, moved, gone or no longer granted: nothing to approve, but Keep still ends it.
            error, title, change, apply = shown, "Nothing to approve", "", ""
        else:
            title = shown.heading
            change = (f'<div class="request"><p>{html.escape(shown.request)}</p></div>'
                      f'<pre class="change">{html.escape(shown.shown)}</pre><p class="hint">{html.escape(shown.hint)} '
                      "Nothing happens until your MCP client calls again.</p>"
                      f'<input type="hidden" name="note" value="{html.escape(f"{shown.version}:{shown.note_id}")}"'
                      f'{self.note_attributes(record, shown.note_id, shown.version)}>' + self.approve_notice())
            apply = f'<button type="submit" name="decision" value="approve" class="danger">{html.escape(shown.apply)}</button>'
        body = (
            (f'<p class="alert" role="alert">{html.escape(error)}</p>' if error else "")
            + f"<p>Signed in as <strong>{html.escape(session.principal)}</strong>.</p>"
            f'<form method="post" action="{html.escape(f"{PATH_PREFIX}{handle}/decision")}"{self.approve_attributes(session)}>'
            f'<input type="hidden" name="csrf" value="{html.escape(session.csrf)}">{change}{apply}'
            '<button type="submit" name="decision" value="keep" formnovalidate>Keep</button></form>'
            + self.passkey_markup(handle, record, session)
        )
        return self.page(200, title, "", raw=body)

    def decision(self, handle: str, record: browser_confirm.Record, session: Session, body: bytes,
                 reviewer: browser_confirm.Reviewer | None = None) -> Response:
        """Approve (the chosen note, or the change, as shown) or Keep, only with this session's CSRF token."""
        fields = self.form(body)
        # Cross-site request forgery: only our own page knows this session's token.
        if not self.csrf_ok(session, fields):
            self.log("confirm page: decision refused: missing or wrong CSRF token")
            return self.page(403, "Forbidden", "The form expired or did not come from this page. Reload it and try again.")
        assert fields is not None
        choice = fields.get("decision")
        if choice == "keep":
            if not self.records.decide(handle, session.principal, browser_confirm.DECLINED, None, None):
                return self.page(404, "Link not valid", GONE)
            self.log(f"confirmation for principal {session.principal!r}: kept")
            return self.page(200, "Kept", f"Nothing will be {'deleted' if reviewer is None else 'changed'}. Return to your MCP client.")
        if choice != "approve":
            return self.page(400, "Bad request", "Choose Move to trash or Keep." if reviewer is None else "Choose Apply or Keep.")
        version, _, note_id = fields.get("note", "").partition(":")
        if reviewer is None:
            notes = self.offered(record) or []
            # Only a note this page offers, at the version it showed: an id typed in, or one edited since, is refused.
            if not any(note.id == note_id and note.version == version for note in notes):
                return self.choice_page(handle, record, session, CHANGED)
        else:
            shown = reviewer.review(record)
            # Only the change as it reads now, at the version it was asked at: edited since, it is refused.
            if isinstance(shown, str) or (shown.note_id, shown.version) != (note_id, version):
                return self.review_page(handle, record, session, reviewer, CHANGED)
        credential = self.approving_passkey(record, session, fields, note_id, version)
        if not isinstance(credential, (str, type(None))):
            return credential
        if not self.records.decide(handle, session.principal, browser_confirm.APPROVED, note_id, version, credential):
            return self.page(404, "Link not valid", GONE)
        self.log(f"confirmation for principal {session.principal!r}: approved")
        if reviewer is not None:
            return self.page(200, "Approved", f"Return to your MCP client: the change is made when it calls {record.tool} again. "
                             "Nothing has been changed yet.")
        return self.page(
            200, "Approved", "Return to your MCP client: the note is deleted when it calls notes_delete again. Nothing has been deleted yet."
        )


def install(server: Any, tokens: Mapping[str, str], base_url: str | None = None, passkeys: str = passkey_pages.OFF) -> ConfirmPages:
    """The confirmation pages of the server's notes_delete (which must be the product's), attached to it (and so to the note tools).

    With `passkeys` offer or require the optional WebAuthn library must be installed (serve.py says so first).
    """
    tool = server.tools[main.TOOL_NAME]
    if not isinstance(tool, browser_confirm.ConfirmedNotesDelete):
        raise TypeError("the confirmation pages need the product's notes_delete (browser_confirm.ConfirmedNotesDelete)")
    pages = ConfirmPages(tool.records, server, tokens, server.say, base_url)
    if passkeys != passkey_pages.OFF:
        keys = stores.store_of(server.services).ledger.passkeys()
        pages.passkeys = passkey_pages.Gate(passkeys, keys, server.clock, server.say, lambda: pages.base_url)
    tool.pages = pages
    return pages
