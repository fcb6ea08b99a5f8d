"""Passkeys on the confirmation page: sign in with one, register one, approve each change with one.

The operator's `--passkeys` (config "passkeys") chooses the mode:

    off      the page as before: the bearer token signs in, the CSRF-checked button approves
    offer    after a token sign-in the page offers to register a passkey; a principal with
             one signs in with it instead of typing the token
    require  every approval carries a passkey assertion made with user verification for that
             one change; a token sign-in alone can register a passkey but cannot approve

Each ceremony's challenge is a MAC, under a key that never leaves this object, over what
the response may do, so it does that and nothing else:

    sign in   ("sign-in", the link's handle, the browser's pre-session cookie)
    register  ("register", the handle, the session's CSRF token: this session alone)
    approve   ("approve", the record's nonce and handle, the tool, the note's id and version,
               SHA-256 of what the page shows of the change: the update's new text, the
               move's destination)

The WebAuthn checks themselves (origin, RP ID hash, user presence and verification, the
signature) are code/passkeys.py's, on the optional `fido2` library; `Gate.load` imports it
and says in one line how to install it when it is absent. The sign count is compared
here, in the one conditional write of the shared store (stores.Passkeys.use). The page's
script is one static inline script pinned by hash in the CSP. Standard library only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import ipaddress
import json
import secrets
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import stores

__all__ = ["ALREADY", "OFF", "REGISTER_WINDOW_SECONDS", "SCRIPT", "SCRIPT_HASH", "Gate", "refusal"]

OFF, OFFER, REQUIRE = "off", "offer", "require"
MODES = (OFF, OFFER, REQUIRE)
INSTALL = "pip install 'notes-mcp[passkeys]'"
MAX_LABEL_CHARS = 64  # what a person names a passkey ("Laptop fingerprint")
REGISTER_WINDOW_SECONDS = 120.0  # a passkey is registered within two minutes of typing the token, in that session
ASSERTION_FIELDS = ("credential", "client_data", "authenticator_data", "signature")

NEEDS_PASSKEY = (
    "Approving here needs a passkey: press the button in a browser with JavaScript on, and confirm with your "
    "fingerprint, face or device PIN. Nothing was approved."
)

NO_SCRIPT = (
    "Approving here needs a passkey, and a passkey needs JavaScript: turn it on for this page, then confirm with "
    "your fingerprint, face or device PIN. Keep works without it."
)
ALREADY = (
    "This account already has a passkey, and approving needs it. If it is lost, ask the server's operator to remove it "
    "(notes-mcp passkeys remove); then sign in with your token and register a new one here. Nothing was registered."
)

# The page's one script (the CSP allows it by its hash and nothing else). It reads what it
# needs from the forms' data- attributes, runs one WebAuthn ceremony per press, puts the
# response in hidden fields and submits the form; Keep and the token sign-in never reach it.
SCRIPT = r"""(function () {
"use strict";
function enc(buf) {
  var s = "", b = new Uint8Array(buf);
  for (var i = 0; i < b.length; i++) { s += String.fromCharCode(b[i]); }
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
function dec(text) {
  var t = text.replace(/-/g, "+").replace(/_/g, "/");
  while (t.length % 4) { t += "="; }
  var s = atob(t), b = new Uint8Array(s.length);
  for (var i = 0; i < s.length; i++) { b[i] = s.charCodeAt(i); }
  return b;
}
function put(form, name, value) {
  var input = document.createElement("input");
  input.type = "hidden"; input.name = name; input.value = value;
  form.appendChild(input);
}
function say(form, text) {
  var out = form.querySelector(".passkey-status");
  if (out) { out.textContent = text; }
}
function ids(text) {
  return (text || "").split(" ").filter(Boolean).map(function (id) { return {type: "public-key", id: dec(id)}; });
}
function assertion(form, challenge, then) {
  navigator.credentials.get({publicKey: {challenge: dec(challenge), rpId: form.dataset.rp,
                                         userVerification: "required", allowCredentials: ids(form.dataset.allow),
                                         timeout: 120000}}).then(function (c) {
    put(form, "credential", c.id);
    put(form, "client_data", enc(c.response.clientDataJSON));
    put(form, "authenticator_data", enc(c.response.authenticatorData));
    put(form, "signature", enc(c.response.signature));
    then();
    form.submit();
  }, function (e) { say(form, "No passkey was used (" + e.name + "); nothing was sent."); });
}
document.querySelectorAll("[data-passkey]").forEach(function (form) {
  form.hidden = false;
  form.addEventListener("submit", function (event) {
    var kind = form.dataset.passkey;
    if (kind === "approve" && !(event.submitter && event.submitter.value === "approve")) { return; }
    event.preventDefault();
    if (kind === "sign-in") { assertion(form, form.dataset.challenge, function () {}); return; }
    if (kind === "approve") {
      var chosen = form.querySelector("input[name=note]:checked")
        || form.querySelector("input[type=hidden][name=note]");
      if (!chosen) { say(form, "Choose a note first."); return; }
      assertion(form, chosen.dataset.challenge, function () { put(form, "decision", "approve"); });
      return;
    }
    navigator.credentials.create({publicKey: {
      rp: {id: form.dataset.rp, name: "notes-mcp"},
      user: {id: dec(form.dataset.user), name: form.dataset.name, displayName: form.dataset.name},
      challenge: dec(form.dataset.challenge),
      pubKeyCredParams: [{type: "public-key", alg: -7}, {type: "public-key", alg: -8}, {type: "public-key", alg: -257}],
      authenticatorSelection: {residentKey: "required", requireResidentKey: true, userVerification: "required"},
      excludeCredentials: ids(form.dataset.allow), attestation: "none", timeout: 120000
    }}).then(function (c) {
      put(form, "client_data", enc(c.response.clientDataJSON));
      put(form, "attestation", enc(c.response.attestationObject));
      form.submit();
    }, function (e) { say(form, "No passkey was registered (" + e.name + ")."); });
  });
});
}());"""
SCRIPT_HASH = "'sha256-" + base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii") + "'"


def refusal(mode: str, base_url: str | None) -> str | None:
    """The one line refusing to start passkeys where WebAuthn cannot run or the library is absent; None if they can."""
    if mode == OFF:
        return None
    try:
        import passkeys  # noqa: F401  (the optional library, imported by its own module alone)
    except ImportError:
        return f"passkeys: --passkeys {mode} needs the optional WebAuthn library: {INSTALL}; not serving"
    if base_url is None:
        return None  # on loopback: the pages are linked as http://localhost:PORT, a secure context
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    try:
        ipaddress.ip_address(host)
        return (
            f"passkeys: publicUrl {base_url} names an IP address, which cannot be a WebAuthn RP ID: use a domain name; "
            "not serving"
        )
    except ValueError:
        pass
    if parts.scheme != "https" and host != "localhost":
        return (
            f"passkeys: publicUrl {base_url} is not https: browsers offer passkeys only in a secure context "
            "(put a TLS proxy in front and use https://...); not serving"
        )
    return None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


class Gate:
    """The confirmation page's passkeys in one mode: the challenges, the ceremonies' checks, the shared credentials."""

    def __init__(
        self,
        mode: str,
        keys: stores.Passkeys,
        clock: Callable[[], float],
        log: Callable[[str], None],
        origin: Callable[[], str | None],
    ) -> None:
        self.mode = mode
        self.keys = keys
        self.clock = clock
        self.log = log
        self.origin = origin  # the pages' origin, known once they are served
        self._key = secrets.token_bytes(32)  # MACs every challenge; never leaves this object

    @property
    def required(self) -> bool:
        """True when every approval needs an assertion."""
        return self.mode == REQUIRE

    @property
    def base_url(self) -> str:
        """The pages' origin: what clientDataJSON must name ("" before they are served: then nothing matches it)."""
        return self.origin() or ""

    @property
    def rp_id(self) -> str:
        """The WebAuthn RP ID: the host of the pages' origin (localhost on loopback, publicUrl's behind a proxy)."""
        return urlsplit(self.base_url).hostname or ""

    # ---------------------------------------------------------------- challenges

    def challenge(self, *parts: str) -> bytes:
        """The MAC over `parts` (JSON: no two different lists encode alike)."""
        return hmac.new(self._key, json.dumps(list(parts)).encode("utf-8"), hashlib.sha256).digest()

    def approval_challenge(self, record: stores.Decision, note_id: str, version: str) -> bytes:
        """The challenge of approving this record's change to this note at this version, and nothing else."""
        shown = hashlib.sha256((record.detail or "").encode("utf-8")).hexdigest()  # the new text or the destination
        return self.challenge("approve", record.nonce, record.handle, record.tool, note_id, version, shown)

    # ---------------------------------------------------------------- ceremonies

    def assertion(self, fields: Mapping[str, str], challenge: bytes, principal: str | None) -> stores.Passkey | str:
        """The passkey whose assertion in `fields` verifies for `challenge` (by `principal` if given); else why not."""
        if any(not fields.get(name) for name in ASSERTION_FIELDS):
            return NEEDS_PASSKEY
        key = self.keys.get(fields["credential"])
        if key is None or (principal is not None and key.principal != principal):
            return "That passkey is not registered for this account on this server. Nothing was approved."
        import passkeys  # the fido2 checks (serve.py's refusal() said how to install them)

        try:
            count = passkeys.asserted(
                passkeys.decode(fields["client_data"]),
                passkeys.decode(fields["authenticator_data"]),
                passkeys.decode(fields["signature"]),
                challenge,
                self.base_url,
                self.rp_id,
                key.public_key,
            )
        except passkeys.Refused as refused:
            self.log(f"confirm page: passkey assertion refused: {refused}")
            return "The passkey's answer did not verify for this page and this change. Nothing was approved."
        # A cloned authenticator or a replayed assertion: the count must grow (one conditional write, any instance).
        if not self.keys.use(key.credential_id, count, self.clock()):
            self.log("confirm page: passkey assertion refused: the sign count did not increase (replayed or cloned)")
            return "That passkey answer was already used. Nothing was approved."
        return key

    def register(self, principal: str, handle: str, csrf: str, fields: Mapping[str, str]) -> stores.Passkey | str:
        """Keep the credential a registration in `fields` attests, for `principal`; else why not."""
        label = fields.get("label", "").strip()
        if not 0 < len(label) <= MAX_LABEL_CHARS or not label.isprintable():
            return f"Name the passkey (1 to {MAX_LABEL_CHARS} characters) so you can tell it apart later."
        import passkeys

        try:
            credential_id, public_key, count = passkeys.registered(
                passkeys.decode(fields.get("client_data", "")),
                passkeys.decode(fields.get("attestation", "")),
                self.challenge("register", handle, csrf),
                self.base_url,
                self.rp_id,
            )
        except passkeys.Refused as refused:
            self.log(f"confirm page: passkey registration refused: {refused}")
            return (
                "The passkey could not be registered: the browser's answer did not verify (user verification is "
                "required)."
            )
        now = self.clock()
        key = stores.Passkey(credential_id, principal, public_key, count, now, None, label)
        if not self.keys.add(key):
            held = stores.MAX_PASSKEYS_PER_PRINCIPAL
            return f"Not registered: that passkey is already registered, or this account holds {held}."
        self.log(f"confirm page: principal {principal!r} registered a passkey")
        return key

    # ---------------------------------------------------------------- markup

    def allow(self, principal: str) -> str:
        """The principal's credential ids, space-separated (allowCredentials, excludeCredentials)."""
        return " ".join(key.credential_id for key in self.keys.of(principal))

    def sign_in_form(self, action: str, login: str, handle: str, pre_session: str) -> str:
        """The passkey sign-in button (hidden until the script runs: without JavaScript there is no passkey)."""
        challenge = _b64(self.challenge("sign-in", handle, pre_session))
        return (
            f'<form method="post" action="{html.escape(action)}" data-passkey="sign-in" '
            f'data-rp="{html.escape(self.rp_id)}" '
            f'data-challenge="{challenge}" hidden><input type="hidden" name="login" value="{html.escape(login)}">'
            '<p class="hint">Or, with a passkey registered here:</p>'
            '<button type="submit" class="primary">Sign in with a passkey</button>'
            '<p class="hint passkey-status"></p></form>'
        )

    def register_form(self, action: str, principal: str, handle: str, csrf: str) -> str:
        """The offer to register a passkey (a token sign-in's session only)."""
        user = _b64(hashlib.sha256(f"notes-mcp principal\n{principal}".encode()).digest()[:16])  # no name in the handle
        held = len(self.keys.of(principal))
        if self.required and held:
            return f'<hr><p class="hint">{html.escape(ALREADY.replace(" Nothing was registered.", ""))}</p>'
        return (
            f'<hr><form method="post" action="{html.escape(action)}" data-passkey="register" '
            f'data-rp="{html.escape(self.rp_id)}" data-challenge="{_b64(self.challenge("register", handle, csrf))}" '
            f'data-user="{user}" data-name="{html.escape(principal)}" '
            f'data-allow="{html.escape(self.allow(principal))}" hidden>'
            f'<input type="hidden" name="csrf" value="{html.escape(csrf)}">'
            f"<p><strong>Passkeys</strong>: {held} registered for {html.escape(principal)}. "
            + ("Approving here needs one. " if self.required else "Next time, sign in with one instead of the token. ")
            + "Your device asks for your fingerprint, face or PIN.</p>"
            '<label for="label">Name for a new passkey</label>'
            f'<input type="text" name="label" id="label" maxlength="{MAX_LABEL_CHARS}" required>'
            '<button type="submit">Register a passkey</button><p class="hint passkey-status"></p></form>'
        )

    def approve_attributes(self, principal: str) -> str:
        """The decision form's attributes in require mode: the script runs one assertion when approving is pressed."""
        if not self.required:
            return ""
        allow = html.escape(self.allow(principal))
        return f' data-passkey="approve" data-rp="{html.escape(self.rp_id)}" data-allow="{allow}"'

    def note_attributes(self, record: stores.Decision, note_id: str, version: str) -> str:
        """A note choice's own challenge (require mode): an assertion for it approves that note at that version only."""
        if not self.required:
            return ""
        return f' data-challenge="{_b64(self.approval_challenge(record, note_id, version))}"'

    def approve_notice(self) -> str:
        """What the decision form says in require mode (the noscript line is the no-JavaScript page's whole story)."""
        if not self.required:
            return ""
        return f'<noscript><p class="alert">{html.escape(NO_SCRIPT)}</p></noscript><p class="hint passkey-status"></p>'
