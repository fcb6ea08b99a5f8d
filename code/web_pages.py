"""What every page a person signs in to shares: sessions, the sign-in, CSRF, the Origin rule, the HTML.

Two sets of pages build on it: the URL-mode connect pages of `notes_publish`
(code/connect.py) and the confirmation pages of `notes_delete`, `notes_update` and
`notes_move` (code/confirm_pages.py).
Each is a `SignedInPages` under its own path prefix, behind a framework-free
`handle(method, path, headers, body, peer) -> (status, headers, body)`; `PageSet` puts
several behind one listener (the HTTP endpoint, or the loopback listener under --stdio).

    sign-in     the principal's bearer token typed into our own form, which carries a login
                token MACed over a pre-session cookie (login CSRF), throttled per peer
    sessions    random ids, kept server-side by fingerprint, bounded per principal, each
                optionally bound to one link (`scope`) so it acts on that link alone
    posts       a foreign or opaque `Origin` refused, one media type, bounded bodies, and
                the session's CSRF token compared in constant time
    pages       plain server-rendered HTML, one inline style pinned by hash, and no script but the
                confirmation pages' passkey script, pinned by hash too (code/passkey_pages.py)

Standard library only.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import html
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from typing import NamedTuple
from urllib.parse import parse_qsl

import streamable_http

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "MAX_FORM_BYTES",
    "MAX_FORM_FIELDS",
    "MAX_SESSIONS_PER_PRINCIPAL",
    "SESSION_TTL_SECONDS",
    "STYLE",
    "Headers",
    "PageRequest",
    "PageSet",
    "Response",
    "Session",
    "Sessions",
    "SignedInPages",
]

SESSION_TTL_SECONDS = 900.0  # a browser sign-in lasts fifteen minutes
MAX_SESSIONS_PER_PRINCIPAL = 8  # browser sessions per principal; the oldest is dropped beyond
MAX_FORM_BYTES = 4096  # one urlencoded form body (sign-in or decision)
MAX_FORM_FIELDS = 8  # fields in one form body
HANDLE_LENGTH = 43  # characters of secrets.token_urlsafe(32): link handles and session ids

_URLSAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

Headers = Sequence[tuple[str, str]]
Response = tuple[int, list[tuple[str, str]], bytes]


def fingerprint(secret: str) -> str:
    """What the tables key on instead of a secret itself (session ids, credentials)."""
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def is_handle(text: str) -> bool:
    """The exact shape of a handle we issue; anything else is refused before any lookup."""
    return len(text) == HANDLE_LENGTH and set(text) <= _URLSAFE


# =====================================================================================
# Sessions
# =====================================================================================


@dataclasses.dataclass(frozen=True)
class Session:
    """A signed-in browser: the principal it proved to be, its CSRF token, its expiry, and the one link it may act on
    ("" any)."""

    principal: str
    csrf: str
    expires: float
    scope: str = ""
    via: str = "token"  # how it signed in: "token" (typed) or "passkey"
    started: float = 0.0
    credential: str = ""  # the passkey it signed in with (its credential id)


class Sessions:
    """Browser sessions under one lock, on the injected clock; ids are random and stored only by fingerprint."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._sessions: dict[str, Session] = {}  # fingerprint(session id) -> session
        self._lock = threading.Lock()

    def _prune(self, now: float) -> None:
        for key in [k for k, session in self._sessions.items() if not now < session.expires]:
            del self._sessions[key]

    def sign_in(self, principal: str, scope: str = "", via: str = "token", credential: str = "") -> str:
        """A fresh random session id for `principal`, acting on `scope` alone when given (never an id the browser
        chose)."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            mine = [key for key, session in self._sessions.items() if session.principal == principal]  # oldest first
            # Repeated sign-ins cannot grow the table: the oldest session of *this* principal goes.
            for key in mine[: max(0, len(mine) - MAX_SESSIONS_PER_PRINCIPAL + 1)]:
                del self._sessions[key]
            session_id = secrets.token_urlsafe(32)
            self._sessions[fingerprint(session_id)] = Session(
                principal, secrets.token_urlsafe(32), now + SESSION_TTL_SECONDS, scope, via, now, credential
            )
            return session_id

    def session(self, session_id: str | None) -> Session | None:
        """The live session for this id, or None."""
        if session_id is None or not is_handle(session_id):
            return None
        with self._lock:
            self._prune(self.clock())
            return self._sessions.get(fingerprint(session_id))

    def sign_out(self, session_id: str | None) -> None:
        """Drop a session (its id is replaced at every sign-in)."""
        if session_id is not None and is_handle(session_id):
            with self._lock:
                self._sessions.pop(fingerprint(session_id), None)


# =====================================================================================
# The page base: checks and rendering
# =====================================================================================

# Readable at phone width; inline, allowed by the CSP through its hash alone (no external sheet).
STYLE = (
    "body{font:17px/1.5 system-ui,sans-serif;max-width:34rem;margin:0 auto;padding:1rem;color:#1b1b1b;background:#fff}"
    "h1{font-size:1.45rem;margin:.5rem 0 1rem}"
    "label{display:block;font-weight:600}"
    "input[type=password],input[type=text]{display:block;width:100%;box-sizing:border-box;font-size:1rem;"
    "padding:.6rem;margin:.3rem 0 .8rem}"
    "button{font-size:1rem;padding:.6rem 1.2rem;margin:.2rem .5rem .2rem 0;border-radius:.35rem;border:1px solid #555;"
    "background:#f2f2f2;color:#1b1b1b}"
    "button.primary{background:#0b5cad;border-color:#0b5cad;color:#fff}"
    "button.danger{background:#a31515;border-color:#a31515;color:#fff}"
    ".request{background:#f3f5f8;border-left:4px solid #0b5cad;padding:.4rem .9rem;margin:1rem 0}"
    ".hint{color:#444;font-size:.95rem;margin:.2rem 0}"
    ".alert{color:#9b0000;font-weight:600}"
    "hr{border:0;border-top:1px solid #ccc;margin:1.5rem 0}"
    "fieldset{border:0;padding:0;margin:0 0 1rem}"
    ".note{display:block;border:1px solid #ccc;border-radius:.35rem;padding:.5rem .7rem;margin:.5rem 0;font-weight:400}"
    ".note input{margin-right:.5rem}"
    ".note pre{white-space:pre-wrap;font-size:.9rem;color:#333;margin:.3rem 0 0;max-height:6.5rem;overflow:hidden}"
    "pre.change{white-space:pre-wrap;overflow-wrap:anywhere;font-size:.9rem;border:1px solid #ccc;border-radius:.35rem;"
    "padding:.5rem .7rem;background:#fafafa}"
)
STYLE_HASH = "'sha256-" + base64.b64encode(hashlib.sha256(STYLE.encode("utf-8")).digest()).decode("ascii") + "'"
CONTENT_SECURITY_POLICY = (
    # Nothing loads from anywhere (no script: policy_with_script adds the passkeys' one, by hash); the one stylesheet is
    # pinned by hash.
    f"default-src 'none'; style-src {STYLE_HASH}; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def policy_with_script(script_hash: str) -> str:
    """The CSP of a page that runs one inline script, allowed by its hash alone (the passkey pages)."""
    return f"{CONTENT_SECURITY_POLICY}; script-src {script_hash}"


PAGE_HEADERS: tuple[tuple[str, str], ...] = (
    ("Content-Type", "text/html; charset=utf-8"),
    ("X-Frame-Options", "DENY"),  # clickjacking: no one may frame a button that acts
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("Cache-Control", "no-store"),  # a shared or back-button cache must not keep the CSRF token
    # The handle in our URL never leaves in a Referer to another origin, while our own
    # form posts still carry our real Origin (no-referrer made browsers send `Origin: null`).
    ("Referrer-Policy", "same-origin"),
    ("X-Content-Type-Options", "nosniff"),
)
NULL_ORIGIN = (
    "Your browser sent this form as `Origin: null` (from a sandboxed frame, a local file or a page that hides its"
    " origin), so it cannot be told apart from a forged one. Open the link directly in a browser tab and try again."
)


class PageRequest(NamedTuple):
    """A well-formed request for a flow's page: its handle, and "" (the page), "sign-in" or "decision"."""

    handle: str
    action: str


class SignedInPages:
    """The shared half of a set of pages a person signs in to; a subclass names its prefix and cookies and renders its
    pages."""

    prefix = "/"  # what the HTTP transport routes here (a subclass's own)
    title = "pages"  # how the start-up report names them
    max_body = MAX_FORM_BYTES
    session_cookie = "session"
    login_cookie = "login"
    login_ttl = SESSION_TTL_SECONDS  # how long a sign-in form's pre-session cookie lives
    actions: tuple[str, ...] = ("sign-in", "decision")  # the POST actions under a handle

    def __init__(
        self, tokens: Mapping[str, str], log: Callable[[str], None], sessions: Sessions, base_url: str | None = None
    ) -> None:
        self.log = log
        self.sessions = sessions
        self.tokens = streamable_http.BearerTokens(tokens)  # sign-in uses the MCP bearer tokens
        self.signs_in = frozenset(tokens)  # the principals that have a token to sign in with
        self.base_url = base_url  # the pages' origin: the publicUrl, else http://host:port of the listener once bound
        self._login_key = secrets.token_bytes(32)  # MACs login tokens; never leaves this object

    def owns(self, path: str) -> bool:
        """True when `path` is one of these pages'."""
        return path.startswith(self.prefix)

    def handle(self, method: str, path: str, headers: Headers, body: bytes, peer: str = "") -> Response:
        """The answer to a request for a path these pages own; each set of pages renders its own."""
        raise NotImplementedError(f"{type(self).__name__} renders no pages")

    def url(self, handle: str) -> str:
        """The absolute link to a handle's page (the server's own page, nothing else in it)."""
        if self.base_url is None:
            raise RuntimeError("the pages are not being served (base_url is unset)")
        return f"{self.base_url}{self.prefix}{handle}"

    # ---------------------------------------------------------------- checks

    def page_request(
        self, method: str, parts: list[str], headers: Headers, body: bytes, gone: str
    ) -> PageRequest | Response:
        """A request for a flow's page: GET the page, POST its sign-in or decision (CSRF and Origin checked); else the
        refusal."""
        # ["", prefix, handle] or ["", prefix, handle, action]: one spelling per page, no trailing slash.
        if len(parts) not in (3, 4) or parts[1] != self.prefix.strip("/") or not is_handle(parts[2]):
            return self.page(404, "Not found", gone)
        handle, action = parts[2], (parts[3] if len(parts) == 4 else "")
        if len(parts) == 4 and action not in self.actions:
            return self.page(404, "Not found", gone)
        expected = "GET" if action == "" else "POST"
        if method != expected:
            return self.page(405, "Method not allowed", "Use the buttons on the page.", [("Allow", expected)])
        if expected == "POST":
            refusal = self.check_post(headers, body)
            if refusal is not None:
                return refusal
        return PageRequest(handle, action)

    def check_post(self, headers: Headers, body: bytes) -> Response | None:
        """Cross-site form posts, odd media types and oversized bodies stop here."""
        origins = streamable_http.header_values(headers, "origin")
        # Login CSRF and forged decisions from another site: a browser names the page's origin.
        # `Origin: null` is refused too: a forging page can make its browser send exactly that
        # (sandboxed frame, data: URL, its own no-referrer policy), while our pages' same-origin
        # policy makes a browser name our origin. A request without Origin is left to the tokens.
        if origins and (len(origins) != 1 or self.base_url is None or origins[0].lower() != self.base_url.lower()):
            self.log(f"{self.prefix.strip('/')} page: form refused: foreign or opaque Origin")
            return self.refusal(
                403, NULL_ORIGIN if origins == ["null"] else "This form may only be sent from this server's own page."
            )
        types = streamable_http.header_values(headers, "content-type")
        if len(types) != 1 or types[0].split(";")[0].strip().lower() != "application/x-www-form-urlencoded":
            return self.page(415, "Unsupported form", "Send the form from this server's page.")
        if len(body) > MAX_FORM_BYTES:
            return self.page(413, "Form too large", f"A form here is at most {MAX_FORM_BYTES} bytes.")
        return None

    @staticmethod
    def form(body: bytes) -> dict[str, str] | None:
        """An urlencoded body as fields, or None if malformed, too many fields or repeated names."""
        try:
            pairs = parse_qsl(
                body.decode("ascii"), keep_blank_values=True, strict_parsing=bool(body), max_num_fields=MAX_FORM_FIELDS
            )
        except (UnicodeDecodeError, ValueError):
            return None
        fields = dict(pairs)
        # Two values for one name: which one counts differs between parsers, so neither does.
        return fields if len(fields) == len(pairs) else None

    @staticmethod
    def cookie(headers: Headers, name: str) -> str | None:
        """The named cookie's value if it appears exactly once, else None."""
        found = []
        for header in streamable_http.header_values(headers, "cookie"):
            for item in header.split(";"):
                key, eq, value = item.strip().partition("=")
                if eq and key == name:
                    found.append(value)
        return found[0] if len(found) == 1 else None

    def session_of(self, headers: Headers) -> tuple[str | None, Session | None]:
        """The browser's session cookie and the live session it names (or None)."""
        session_id = self.cookie(headers, self.session_cookie)
        return session_id, self.sessions.session(session_id)

    def login_token(self, pre_session: str, handle: str) -> str:
        """The sign-in form's token: a MAC over the browser's pre-session cookie and this link."""
        return hmac.new(self._login_key, f"{pre_session}\n{handle}".encode("ascii"), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: Session, fields: dict[str, str] | None) -> bool:
        """The form carries this session's CSRF token (compared in constant time)."""
        given = fields.get("csrf", "") if fields is not None else ""
        return hmac.compare_digest(given.encode("utf-8", "replace"), session.csrf.encode("ascii"))

    def pre_session(self, handle: str, headers: Headers, fields: Mapping[str, str]) -> str | Response:
        """The browser's pre-session cookie when the sign-in form carries its login token; else the page refusing it."""
        pre_session = self.cookie(headers, self.login_cookie)
        expected = self.login_token(pre_session, handle) if pre_session is not None and is_handle(pre_session) else ""
        # Login CSRF: another page could otherwise sign this browser in as the attacker's
        # account. Only our sign-in page, read with this browser's pre-session cookie, has the token.
        if not expected or not hmac.compare_digest(
            fields.get("login", "").encode("utf-8", "replace"), expected.encode("ascii")
        ):
            self.log(f"{self.prefix.strip('/')} page: sign-in refused: missing or wrong login token")
            return self.sign_in_page(
                handle, headers, 403, "The sign-in form expired or did not come from this page. Try again."
            )
        assert pre_session is not None
        return pre_session

    def signed_in_principal(self, handle: str, headers: Headers, body: bytes, peer: str) -> str | Response:
        """The principal whose bearer token this sign-in form carries, or the page refusing it (nothing stored)."""
        fields = self.form(body) or {}
        checked = self.pre_session(handle, headers, fields)
        if not isinstance(checked, str):
            return checked
        try:
            principal = self.tokens.principal_from(fields["token"], peer) if fields.get("token") else None
        except streamable_http.Throttled as wait:
            return self.sign_in_page(
                handle, headers, 429, f"Too many wrong tokens. Try again in {wait.retry_after} seconds."
            )
        if principal is None:
            return self.sign_in_page(handle, headers, 403, "That token is not valid for this server.")
        return principal

    def start_session(
        self,
        principal: str,
        old_session: str | None,
        handle: str,
        scope: str = "",
        via: str = "token",
        credential: str = "",
    ) -> Response:
        """Replace the browser's session with a fresh one for `principal` and go back to the handle's page."""
        # Session fixation: whatever id the browser had is dropped and a new one issued.
        self.sessions.sign_out(old_session)
        session_id = self.sessions.sign_in(principal, scope, via, credential)
        cookie = (
            f"{self.session_cookie}={session_id}; Path={self.prefix}; Max-Age={int(SESSION_TTL_SECONDS)};"
            f" {self.cookie_flags()}"
        )
        return self.page(
            303,
            "Signed in",
            "Continue to the request.",
            [("Location", f"{self.prefix}{handle}"), ("Set-Cookie", cookie)],
        )

    def cookie_flags(self) -> str:
        """HttpOnly and SameSite=Strict on every cookie, and Secure where people open the pages over https."""
        # Behind a TLS proxy (publicUrl https://...) a session cookie must never be sent
        # over a plain-http request to the same name, where anyone on the path could read it.
        return "HttpOnly; SameSite=Strict" + ("; Secure" if (self.base_url or "").startswith("https://") else "")

    # ---------------------------------------------------------------- rendering

    def sign_in_intro(self) -> str:
        """The sentence above the sign-in form, as markup (a subclass says what the sign-in is for)."""
        return "<p>Sign in to this notes server.</p>"

    def sign_in_other(self, handle: str, pre_session: str) -> str:
        """Markup after the token form: another way to sign in (a subclass's; none here)."""
        return ""

    def sign_in_page(self, handle: str, headers: Headers, status: int = 200, error: str = "") -> Response:
        """The sign-in form (it names neither the principal nor anything about the request) and its pre-session
        cookie."""
        pre_session = self.cookie(headers, self.login_cookie)
        if pre_session is None or not is_handle(pre_session):
            pre_session = secrets.token_urlsafe(32)
        action = html.escape(f"{self.prefix}{handle}/sign-in")
        body = (
            (f'<p class="alert" role="alert">{html.escape(error)}</p>' if error else "")
            + self.sign_in_intro()
            + f'<form method="post" action="{action}">'
            '<label for="token">Access token</label>'
            '<p class="hint" id="token-hint">Paste the bearer token this server\'s operator gave you for MCP: '
            "the same token your MCP client sends.</p>"
            '<input type="password" name="token" id="token" aria-describedby="token-hint" autocomplete="off" required>'
            f'<input type="hidden" name="login" value="{self.login_token(pre_session, handle)}">'
            '<button type="submit" class="primary">Sign in</button></form>'
            + self.sign_in_other(handle, pre_session)
            + '<p class="hint">This link alone grants nothing: only the account that asked can continue.</p>'
        )
        cookie = (
            f"{self.login_cookie}={pre_session}; Path={self.prefix}; Max-Age={int(self.login_ttl)};"
            f" {self.cookie_flags()}"
        )
        return self.page(status, "Sign in", "", [("Set-Cookie", cookie)], raw=body)

    @staticmethod
    def refusal(status: int, message: str) -> Response:
        """The HTML page for any refusal under the pages (transport or page): a pure function of status and message."""
        try:
            title = HTTPStatus(status).phrase
        except ValueError:
            title = "Refused"
        return SignedInPages.page(status, title, message)

    @staticmethod
    def page(
        status: int,
        title: str,
        text: str,
        extra: Sequence[tuple[str, str]] = (),
        raw: str = "",
        script: tuple[str, str] | None = None,
    ) -> Response:
        """A complete page with the security headers; `raw` is markup already escaped; `script` (its text, its CSP hash)
        runs at the end."""
        content = raw or f"<p>{html.escape(text)}</p>"
        document = (
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
            f"<body><h1>{html.escape(title)}</h1>{content}"
            f"{f'<script>{script[0]}</script>' if script else ''}</body></html>"
        )
        headers = [
            (name, policy_with_script(script[1]) if script and name == "Content-Security-Policy" else value)
            for name, value in PAGE_HEADERS
        ]
        return status, [*headers, *extra], document.encode("utf-8")


class PageSet:
    """Several sets of pages behind one listener: each request goes to the set that owns its path."""

    def __init__(self, members: Sequence[SignedInPages]) -> None:
        self.members = list(members)
        self.max_body = max(member.max_body for member in self.members)
        self.prefix = self.members[0].prefix  # the first set's, for the start-up line

    @property
    def base_url(self) -> str | None:
        """The listener's http://host:port, shared by every member."""
        return self.members[0].base_url

    @base_url.setter
    def base_url(self, value: str | None) -> None:
        for member in self.members:
            member.base_url = value

    def owns(self, path: str) -> bool:
        """True when a member owns `path`."""
        return any(member.owns(path) for member in self.members)

    def handle(self, method: str, path: str, headers: Headers, body: bytes, peer: str = "") -> Response:
        """The owning member's answer (the transport routes here only what some member owns)."""
        for member in self.members:
            if member.owns(path):
                return member.handle(method, path, headers, body, peer)
        return SignedInPages.refusal(404, "Not found.")

    refusal = staticmethod(SignedInPages.refusal)
