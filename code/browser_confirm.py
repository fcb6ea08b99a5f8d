"""The one confirmation cycle: how every confirmed tool asks a person, on any channel; and notes_delete on it.

A confirmed tool (notes_delete here; notes_update, notes_edit and notes_move in
code/notes_tools.py) is one subclass of `Confirmed` that states its arguments, its form, its
review and its apply step. The cycle does the rest, once for every tool:

    channel  `Confirmed.channel` chooses from what the request declares and the operator's
             option: form (the host shows the form), url (URL-mode elicitation: this server's
             page, through `input_required`), browser (--confirm-in-browser: a link, an
             expiry and a signed `confirmation` token in a normal result; the second call,
             with the same arguments and the token, acts); else -32021, nothing changed.
    answer   form and URL answers are read by confirmations.Confirmations.answer, the one reader.
    page     code/confirm_pages.py serves every tool's page from the tool's `review` (what
             the page shows, which note and version an approval names).
    record   the page's decision and the state's consumption are one record: a decline in the
             host closes the page (`close`) before the state is consumed, Keep and approval
             close it as they are pressed, and expiry closes it for every instance alike.

The page's token is a requestState in all but name: main.new_state signs it (principal,
tool, arguments digest, phase, nonce, expiry, the page's handle and link) and
main.verify_state checks it. Neither the token nor the link approves anything: only a POST
from the page, signed in as the same principal, records `approved(note id, version, by, at)`
on the nonce in a table every instance shares. The next call reads that record and, through
the tool's apply step (main.consume: the store's atomic step, with its audit entry),
re-checks, changes and consumes the nonce: once.

    Confirmed              the cycle (a confirmed tool subclasses it)
    ConfirmedNotesDelete   notes_delete on it (registered by assemble.build_server); its form
                           flow is the lesson's own `main.NotesDelete.call`
    records_for            where a store keeps the page's decisions: its ledger's (stores.Ledger.decisions)

Standard library only.
"""

from __future__ import annotations

import contextlib
import copy
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import audit
import confirmations
import ledger
import main
import stores
from stores import MAX_PENDING_PER_PRINCIPAL as MAX_PENDING_PER_PRINCIPAL  # the bound on undecided pages, named here
from stores import Confirmations

__all__ = [
    "APPROVED",
    "CONFIRMATION",
    "CONFIRMATION_PROPERTY",
    "CONFIRM_FIELD",
    "DECLINED",
    "PENDING",
    "Choice",
    "Confirmed",
    "ConfirmedNotesDelete",
    "NeedsPage",
    "Opening",
    "PageFlow",
    "PageLinks",
    "Record",
    "Review",
    "person_uri",
    "records_for",
    "visible",
]

PHASE_BROWSER = "confirm_in_browser"  # the phase of a `confirmation` token (second call with the argument)
PHASE_URL = "confirm_on_page"  # the phase of a URL-mode requestState
URL_KEY = "confirm_on_page"  # the inputRequests key of the URL-mode elicitation
CONFIRMATION = "confirmation"  # the argument the second call carries the token in
PENDING, APPROVED, DECLINED = stores.DECISION_PENDING, "approved", "declined"
AWAITING = "awaiting_approval"  # the reason of the first call's result: nothing deleted yet
LINK = "link"  # the claim holding the link a confirmation was issued with

NOTHING_DELETED = (
    "Nothing was deleted: deleting needs a host that shows forms, or this server's operator turning on "
    "--confirm-in-browser."
)
REFUSAL = "Server requires form elicitation for this request. " + NOTHING_DELETED
URL_MESSAGE = "Choose the note to delete and confirm on this server's page."


CONFIRMATION_PROPERTY = {
    "type": "string", "maxLength": main.MAX_STATE_LENGTH,
    "description": "Leave it out, or send an empty string, on the first call (both mean absent). On the second call: "
                   "the confirmation token the first call returned, unchanged.",
}  # fmt: skip
ISSUED, STILL_PENDING = (
    "issued",
    "pending",
)  # the `status` of the first call's result, and of a second call before any decision


def refused_confirmation(tool: str) -> str:
    """The one message for a `confirmation` token refused for any reason: it names the argument and the next step."""
    # One message for every reason (forged, altered, used, expired, another's, other
    # arguments), as the lesson keeps one for requestState: the refusal tells a prober nothing.
    return (
        f"Invalid params: confirmation is not valid (it is used, expired or was made for other arguments); nothing was "
        f"changed. Call {tool} again without confirmation to get a new link."
    )


def absent_if_empty(call: main.ToolCall) -> main.ToolCall:
    """The call with an empty `confirmation` left out: "" is the first call (some clients send every property)."""
    arguments = call.arguments
    if isinstance(arguments, dict) and arguments.get(CONFIRMATION) == "":
        return call._replace(arguments={name: value for name, value in arguments.items() if name != CONFIRMATION})
    return call


def product_descriptor() -> dict[str, Any]:
    """notes_delete's descriptor with the `confirmation` argument and the page's outcomes (a copy of main's)."""
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
    "description": f"With a link: {ISSUED!r} on the first call, {STILL_PENDING!r} when called again before the user "
    "decided.",
}}  # fmt: skip


PRODUCT_TOOL = product_descriptor()


# =====================================================================================
# What the page decided, on the nonce, shared by every instance
# =====================================================================================


Record = stores.Decision  # one confirmation page: whose, for which arguments, until when, what the person decided
SqlConfirmations = ledger.SqlConfirmations  # the page's decisions in the store's database (SQLite, PostgreSQL, folders)


def records_for(store: stores.Store, clock: Callable[[], float]) -> Confirmations:
    """Where a store keeps the page's decisions: beside its nonces, in its ledger (the folder store's own database)."""
    return store.ledger.decisions(clock)


# =====================================================================================
# The tool
# =====================================================================================


# Characters a person cannot see, or cannot tell from others, in a form or on the page:
# written out once here, and escaped by `visible` wherever either shows text. The person
# approves what they see, so a character that renders as nothing, or that lays itself
# over the character before it, would let "pay 100 to account 12345" plus hidden bytes
# read exactly as the line it replaces. Python's str.isprintable() already refuses the
# categories Cc, Cf, Cs, Co, Cn, Zs (but U+0020), Zl and Zp; this table adds what it lets
# through. Ranges are inclusive; the data is the Unicode Character Database 14.0.0 (the
# version of Python 3.11's unicodedata), and tests/test_hidden_text.py checks the table
# against that data.
HIDDEN_RANGES: tuple[tuple[int, int, str], ...] = (
    # Default_Ignorable_Code_Point, every range of DerivedCoreProperties.txt (UCD 14.0.0):
    # variation selectors, joiners, fillers, bidi and tag characters, and the reserved rest.
    (0x00AD, 0x00AD, "soft hyphen"),
    (0x034F, 0x034F, "combining grapheme joiner"),
    (0x061C, 0x061C, "Arabic letter mark"),
    (0x115F, 0x1160, "Hangul choseong and jungseong fillers"),
    (0x17B4, 0x17B5, "Khmer inherent vowels"),
    (0x180B, 0x180F, "Mongolian variation selectors and vowel separator"),
    (0x200B, 0x200F, "zero-width space, joiners, direction marks"),
    (0x202A, 0x202E, "bidi embeddings and overrides"),
    (0x2060, 0x206F, "word joiner, invisible operators, bidi isolates"),
    (0x3164, 0x3164, "Hangul filler"),
    (0xFE00, 0xFE0F, "variation selectors"),
    (0xFEFF, 0xFEFF, "zero-width no-break space"),
    (0xFFA0, 0xFFA0, "halfwidth Hangul filler"),
    (0xFFF0, 0xFFF8, "reserved specials"),
    (0x1BCA0, 0x1BCA3, "shorthand format controls"),
    (0x1D173, 0x1D17A, "musical beam and phrase controls"),
    (0xE0000, 0xE0FFF, "tags, variation selectors supplement, reserved"),
    # Canonical_Combining_Class 1 (Overlay): drawn over the character before them, so
    # "1\u0338" reads as a struck-out 1 in one font and as 1 in another.
    (0x0334, 0x0338, "combining overlays"),
    (0x1CD4, 0x1CD4, "Vedic overlay"),
    (0x1CE2, 0x1CE8, "Vedic overlays"),
    (0x20D2, 0x20D3, "combining long and short vertical line overlays"),
    (0x20D8, 0x20DA, "combining ring and clockwise ring overlays"),
    (0x20E5, 0x20E6, "combining reverse solidus and double vertical stroke overlays"),
    (0x20EA, 0x20EB, "combining leftwards arrow and long double solidus overlays"),
    (0x10A39, 0x10A39, "Kharoshthi cauda"),
    (0x16AF0, 0x16AF4, "Bassa Vah combining tones"),
    (0x1BC9E, 0x1BC9E, "Duployan double mark"),
    (0x1D167, 0x1D169, "musical tremolo overlays"),
    # Printable characters whose glyph is blank.
    (0x2800, 0x2800, "Braille pattern blank"),
    (0x16FE4, 0x16FE4, "Khitan small script filler"),
    (0x1D159, 0x1D159, "musical symbol null notehead"),
)
HIDDEN = frozenset(chr(point) for first, last, _ in HIDDEN_RANGES for point in range(first, last + 1))


def escape(ch: str) -> str:
    """One character spelled as the \\u (or \\U) escape a person reads in a form or on the page."""
    return f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"


def visible(text: str) -> str:
    """`text` with the backslash doubled and every non-printable or HIDDEN character as a \\u (or \\U) escape."""
    # The backslash is doubled so that "\\u200b" typed in a note cannot pass for an escape.
    if text.isprintable() and "\\" not in text and HIDDEN.isdisjoint(text):
        return text
    return "".join("\\\\" if ch == "\\" else escape(ch) if ch in HIDDEN or not ch.isprintable() else ch for ch in text)


def person_uri(uri: str) -> str:
    """A file:// URI as a person reads it: percent-escapes decoded (`My Notes`, not `My%20Notes`), made `visible`."""
    # Decoded, a %0A or %E2%80%AE would be a line break or a bidi override in front of a
    # person deciding: `visible` spells every such character as an escape instead.
    return visible(urllib.parse.unquote(uri, errors="replace"))


# =====================================================================================
# What a tool's page shows, and what the cycle needs of the pages
# =====================================================================================

CONFIRM_FIELD = "confirm"  # every confirmation form's checkbox
ANSWER_MISMATCH = "Invalid params: the answer does not match the form"


class PageLinks:
    """The tools' handle on the confirmation pages, built before the tools and the pages: the links they give out.

    The pages (code/confirm_pages.py) are built later, over these links: they serve the
    address the links name, so a tool never needs the pages themselves, only this.
    """

    prefix = "/confirm/"

    def __init__(self, base_url: str | None = None, signs_in: Iterable[str] = ()) -> None:
        self.base_url = base_url  # where people open the pages; None: not served, so no link is given out
        self.signs_in = frozenset(signs_in)  # the principals with a token to sign in to the pages with
        self.given = threading.Event()  # set at the first link given out (under --stdio the pages start then)

    def serves(self, principal: str) -> bool:
        """True when the pages are served and `principal` can sign in to them."""
        return self.base_url is not None and principal in self.signs_in

    def url(self, handle: str) -> str:
        """The absolute link to a handle's page."""
        if self.base_url is None:
            raise RuntimeError("the confirmation pages are not being served (no base_url)")
        self.given.set()
        return f"{self.base_url}{self.prefix}{handle}"


class Choice(NamedTuple):
    """A note the page may approve, at the version it shows (plain text; the page escapes it)."""

    note_id: str
    version: str
    title: str = ""  # a choice among several: its title, where it lies and when it changed, its first lines
    about: str = ""
    lines: str = ""


class Review(NamedTuple):
    """What a tool's page shows now (plain text; the page escapes it), and the notes an approval may name."""

    heading: str  # the page's title, a question
    request: str  # what the MCP client asked for, in one sentence
    shown: str  # the change itself, whole (an update's diff, a move's from and to); "" for a choice
    hint: str  # what happens to what is changed
    choices: tuple[Choice, ...]  # one: the change's note; several: the person picks one (`legend` names the list)
    legend: str = ""


class Opening(NamedTuple):
    """What a tool binds into a new page's state and record, read when the page is opened."""

    cands: list[tuple[str, str]]  # the note and version the change was asked at (none: the page lists them live)
    extra: dict[str, Any]  # more claims the state binds (a move's link rewrites)
    title: str  # the record's title (the note's, or the one asked for)
    detail: str | None = None  # JSON: what the page shows, kept with the record (the new text, the new place)


class NeedsPage(main.ToolError):
    """A change too large for a form: refused, unless the page, which shows it whole, is on."""


class PageFlow:
    """The pages' side every confirmed tool of a server shares: one table of decisions, one option, one set of pages."""

    def __init__(self, records: Confirmations, browser: bool = False, links: PageLinks | None = None) -> None:
        self.records = records
        self.browser = browser  # the operator's --confirm-in-browser
        self.links = PageLinks() if links is None else links  # the pages' links (none given out where not served)


def iso(at: float) -> str:
    """A time as ISO 8601 UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def supports_url_elicitation(capabilities: Any) -> bool:
    """True when this request declares URL-mode elicitation (`{"url": {}}`)."""
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    return isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)


@contextlib.contextmanager
def refused_as_confirmation(tool: str) -> Iterator[None]:
    """Inside: a refused token reads as `refused_confirmation(tool)`, naming the argument sent (still -32602)."""
    try:
        yield
    except main.McpError as exc:
        if exc.code == main.INVALID_PARAMS and exc.message == main.STATE_INVALID:
            raise main.McpError(main.INVALID_PARAMS, refused_confirmation(tool)) from None
        raise


# =====================================================================================
# The cycle
# =====================================================================================


class Confirmed:
    """One confirmed tool's whole cycle on every channel; a subclass states its arguments, form, review, apply step."""

    name: str
    heading: str  # the page's title, a question
    key: str  # the form's inputRequests key
    phase: str  # the form state's phase
    noun: str  # what did not happen: "Declined; nothing was <noun>."
    done_field: str  # the structured result's flag ("deleted", "updated", "moved")
    apply_label: str  # the page's approving button
    effect: str  # what an approval does when the client calls again
    asks: str  # what the person does on the page, as the link's result says it
    same: str  # what the second call repeats
    url_message: str  # the URL-mode elicitation's message
    refusal: str  # -32021's message: no channel for this request

    def __init__(self, services: main.Services, flow: PageFlow | None) -> None:
        self.services = services
        self.confirmations = confirmations.Confirmations(services)
        self.flow = flow  # the pages every confirmed tool shares; None where the server has none

    # ---------------------------------------------------------------- what a tool states

    def read(self, arguments: Any) -> Any:
        """The arguments checked against the inputSchema (-32602 or a ToolError), before any channel is chosen."""
        raise NotImplementedError

    def begin(self, call: main.ToolCall, arguments: Any = None) -> tuple[Any, main.Scope]:
        """Checked arguments (the call's, or `arguments`) and the authorized scope (layer 1)."""
        raise NotImplementedError

    def digest_of(self, scope: main.Scope, args: Any) -> str:
        """The digest every state of this request binds."""
        raise NotImplementedError

    def ask_form(
        self, call: main.ToolCall, scope: main.Scope, args: Any, follows: main.StatePayload | None
    ) -> dict[str, Any]:
        """The form over the live note with its signed state (NeedsPage when a form cannot show the change)."""
        raise NotImplementedError

    def opening(self, call: main.ToolCall, scope: main.Scope, args: Any) -> Opening:
        """The form's checks, then what a new page's state and record bind."""
        raise NotImplementedError

    def review(self, record: Record) -> Review | str:
        """What a pending record's page shows, read live (layers 1 and 2); else why nothing can be approved."""
        raise NotImplementedError

    def apply(
        self,
        principal: str,
        scope: main.Scope,
        args: Any,
        state: main.StatePayload,
        target: tuple[str, str],
        answer: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The confirmed change to `target` in the store's atomic step that consumes the state; its result."""
        raise NotImplementedError

    def shown(self, args: Any) -> dict[str, Any]:
        """The arguments the page shows, kept with its record: an approval is for these alone."""
        return {}

    # ---------------------------------------------------------------- the channel

    def page_on(self) -> bool:
        """True when the operator turned on --confirm-in-browser (the second call's `confirmation` is accepted)."""
        return self.flow is not None and self.flow.browser

    def served(self, principal: str) -> bool:
        """True when the pages are served and `principal` can sign in to them."""
        return self.flow is not None and self.flow.links.serves(principal)

    def channel(self, call: main.ToolCall) -> str | None:
        """The one choice of channel, from the request and the operator's option: form, url, browser; else None."""
        capabilities = call.meta.capabilities
        if main.supports_form_elicitation(capabilities):
            return "form"
        if self.served(call.principal) and supports_url_elicitation(capabilities):
            return "url"
        if self.served(call.principal) and self.page_on() and call.state is None:
            return "browser"
        return None

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """The page's second call; else the chosen channel; else -32021 naming the form capability, nothing changed."""
        if self.page_on():
            call = absent_if_empty(call)
            if isinstance(call.arguments, dict) and CONFIRMATION in call.arguments:
                return self.confirmed(call)
        self.read(call.arguments)
        channel = self.channel(call)
        if channel == "url":
            return self.by_url(call)
        if channel == "browser":
            return self.first_call(call)
        if channel is None:
            # No form, no knowledge of the notes and no change, unless a person can confirm on the page.
            data: dict[str, Any] = {"requiredCapabilities": {"elicitation": {"form": {}}}}
            raise main.McpError(main.MISSING_REQUIRED_CLIENT_CAPABILITY, self.refusal, data)
        try:
            return self.by_form(call)
        except NeedsPage:
            if call.state is None and self.page_on() and self.served(call.principal):
                return self.first_call(call)  # too large for a form: the page shows it whole
            raise

    def not_done(self, reason: str, text: str) -> dict[str, Any]:
        """The complete, non-error answer when the person said no, declined or cancelled (the audit reads `reason`)."""
        return main.tool_result(text, {self.done_field: False, "reason": reason})

    def said_no(self, reply: confirmations.Reply) -> dict[str, Any]:
        """A cancel (the state stays usable) or a decline (consumed by the reader) in the host: nothing changed."""
        said = "Cancelled" if reply is confirmations.Reply.CANCELLED else "Declined"
        return self.not_done(reply.value, f"{said}; nothing was {self.noun}.")

    # ---------------------------------------------------------------- form

    def by_form(self, call: main.ToolCall) -> dict[str, Any]:
        """The form, the signed state, the one answer reader, the consumed change."""
        args, scope = self.begin(call)
        if call.state is None:
            return self.ask_form(call, scope, args, None)
        state = self.confirmations.verify(call, self.digest_of(scope, args), {self.phase})
        answered = self.confirmations.answer(call, state, [self.key])
        if answered.reply is confirmations.Reply.ASK_AGAIN:
            return self.ask_form(call, scope, args, state)
        if answered.reply is not confirmations.Reply.ACCEPTED:
            return self.said_no(answered.reply)
        content = answered.content[self.key]
        confirm = content.get(CONFIRM_FIELD)
        if not isinstance(confirm, bool) or len(state.cands) != 1:
            raise main.McpError(main.INVALID_PARAMS, ANSWER_MISMATCH)
        if not confirm:
            self.confirmations.consume(call.principal, state)
            return self.not_done("not_confirmed", f"Not confirmed; nothing was {self.noun}.")
        audit.mark("form")  # the person confirmed in the host's form: the entry says so
        (note_id, version) = state.cands[0]
        return self.apply(call.principal, scope, args, state, (note_id, version), content)

    def consume_writing(
        self, principal: str, state: main.StatePayload, write: Callable[[str, str, float], tuple[main.Settlement, Any]]
    ) -> Any:
        """Run `write` (the store's claim, re-check, change: one transaction) and read its outcome through main.settled.

        main.settled is the one reading every confirmed tool shares with notes_delete: a used
        state is -32602, the replay bound isError. What the write returns comes back.
        """
        settlement, done = write(principal, state.nonce, state.exp)
        main.settled(self.services, principal, settlement)
        return done

    # ---------------------------------------------------------------- the page: URL mode and --confirm-in-browser

    def open_page(self, call: main.ToolCall, scope: main.Scope, args: Any, phase: str) -> tuple[str, str, float]:
        """The tool's checks, a pending record, and its signed state, link and expiry."""
        opening = self.opening(call, scope, args)
        assert self.flow is not None
        handle = secrets.token_urlsafe(32)
        link = self.flow.links.url(handle)
        # The handle is signed into the state: a token presented with another page's record is refused.
        # So is the link itself: every later call, on any process, names the very link the person got.
        claims = main.new_state(
            self.services,
            call.principal,
            self.name,
            self.digest_of(scope, args),
            phase,
            opening.cands,
            extra={**opening.extra, "handle": handle, LINK: link},
        )
        record = Record(
            handle,
            claims["nonce"],
            call.principal,
            scope.arguments["workspaceUri"],
            opening.title,
            claims["exp"],
            tool=self.name,
            detail=opening.detail,
        )
        if not self.flow.records.open(record):
            raise main.ToolError("Too many confirmation pages are waiting for you; finish one or let it expire.")
        self.services.log(f"confirmation page opened for principal {call.principal!r}")
        return self.services.signer.sign(claims), link, claims["exp"]

    def link(self, state: main.StatePayload) -> str:
        """The link a confirmation was issued with (signed into its state), else this server's link to its handle."""
        given = state.extra.get(LINK)
        assert self.flow is not None
        return given if isinstance(given, str) else self.flow.links.url(str(state.extra.get("handle")))

    def url_request(self, link: str) -> dict[str, Any]:
        """The URL-mode elicitation naming this server's page at `link`."""
        return {"method": "elicitation/create", "params": {"mode": "url", "message": self.url_message, "url": link}}

    def by_url(self, call: main.ToolCall) -> dict[str, Any]:
        """input_required naming the page; each retry: the one answer reader, then the server's record decides."""
        args, scope = self.begin(call)
        if call.state is None:
            token, link, _ = self.open_page(call, scope, args, PHASE_URL)
            return main.input_required({URL_KEY: self.url_request(link)}, token)
        state = self.confirmations.verify(call, self.digest_of(scope, args), {PHASE_URL})
        audit.mark("url")
        answered = self.confirmations.answer(call, state, [URL_KEY], consume=self.close)
        if answered.reply in (confirmations.Reply.CANCELLED, confirmations.Reply.DECLINED):
            return self.said_no(answered.reply)
        asked = main.input_required({URL_KEY: self.url_request(self.link(state))}, call.state)  # the very same state
        return self.settle_page(call.principal, scope, args, state, "url", lambda record: asked)

    def close(self, principal: str, state: main.StatePayload) -> main.Settlement:
        """Consume a declined state, its page closed first on the same record: no instance shows it open again."""
        handle = state.extra.get("handle")
        if self.flow is not None and isinstance(handle, str):
            self.flow.records.decide(handle, principal, DECLINED, None, None)
        return self.confirmations.consume(principal, state)

    def first_call(self, call: main.ToolCall) -> dict[str, Any]:
        """Nothing changed: the link, its expiry and the signed confirmation token (never a sign-in secret)."""
        args, scope = self.begin(call)
        token, link, expires_at = self.open_page(call, scope, args, PHASE_BROWSER)
        return self.awaiting(token, link, expires_at, ISSUED)

    def awaiting(self, token: str, link: str, expires_at: float, status: str) -> dict[str, Any]:
        """The non-error result saying nothing changed yet, what the user does, and what to call next."""
        until = iso(expires_at)
        text = (
            f"Nothing was {self.noun} yet. Ask the user to open {link} in their browser, sign in, {self.asks} "
            f"and press {self.apply_label} (or Keep). Then call {self.name} again with {self.same} and with "
            f"confirmation set to the token below. The link and the token stop working at {until}."
            f"\nconfirmation: {token}"
        )
        if status == STILL_PENDING:
            text = "Not approved yet. " + text
        return main.tool_result(
            text,
            {
                self.done_field: False,
                "reason": AWAITING,
                "status": status,
                "url": link,
                "expiresAt": until,
                CONFIRMATION: token,
            },
        )

    def confirmed(self, call: main.ToolCall) -> dict[str, Any]:
        """The second call: layer 1 again, the token verified (main.verify_state), then the page's record decides."""
        rest = dict(call.arguments)
        token = rest.pop(CONFIRMATION)
        if not isinstance(token, str) or not 0 < len(token) <= main.MAX_STATE_LENGTH:
            raise main.ToolError(
                f"Invalid arguments for tool {self.name}: confirmation must be the token the first call "
                "returned; leave it out to get a new link."
            )
        args, scope = self.begin(call, rest)
        with refused_as_confirmation(self.name):
            state = main.verify_state(
                self.services, token, call.principal, self.name, self.digest_of(scope, args), {PHASE_BROWSER}
            )
            return self.settle_page(
                call.principal,
                scope,
                args,
                state,
                "browser",
                lambda record: self.awaiting(token, self.link(state), record.expires_at, STILL_PENDING),
            )

    def settle_page(
        self,
        principal: str,
        scope: main.Scope,
        args: Any,
        state: main.StatePayload,
        channel: str,
        ask_again: Callable[[Record], dict[str, Any]],
    ) -> dict[str, Any]:
        """What the page recorded decides: pending asks again, Keep consumes, an approval applies in the atomic step."""
        record = self.flow.records.by_nonce(state.nonce) if self.flow is not None else None
        # The page's record of this very state: its own nonce, principal, handle and tool.
        if (
            record is None
            or record.principal != principal
            or record.handle != state.extra.get("handle")
            or (record.tool or main.TOOL_NAME) != self.name
        ):
            self.services.log("refused requestState: no confirmation page for it")
            raise main.McpError(main.INVALID_PARAMS, main.STATE_INVALID)
        if record.status == PENDING:
            return ask_again(record)
        audit.mark(channel, record.decided_by, record.decided_at, record.decided_with)
        if (
            record.status != APPROVED
            or record.decided_by != principal
            or record.note_id is None
            or record.version is None
        ):
            self.confirmations.consume(principal, state)
            return self.not_done(
                "declined", f"The user pressed Keep on the confirmation page; nothing was {self.noun}."
            )
        # The page approved this note at this version, showing these very bytes: anything else is not that approval.
        target, detail = (record.note_id, record.version), json.loads(record.detail or "{}")
        if (state.cands and [list(target)] != [list(cand) for cand in state.cands]) or any(
            detail.get(name) != value for name, value in self.shown(args).items()
        ):
            self.services.log("refused requestState: the page approved another change")
            raise main.McpError(main.INVALID_PARAMS, main.STATE_INVALID)
        return self.apply(principal, scope, args, state, target, None)


# =====================================================================================
# notes_delete
# =====================================================================================


class ConfirmedNotesDelete(Confirmed, main.NotesDelete):
    """The product's notes_delete: the lesson's form flow; the page (URL mode, --confirm-in-browser) for the rest."""

    name, key, phase, noun, done_field = main.TOOL_NAME, main.INPUT_KEY, main.PHASE_CONFIRM, "deleted", "deleted"
    heading, apply_label = "Delete a note?", "Move to trash"
    effect, asks, same = "the note is deleted", "choose the note", "the same workspaceUri and title"
    url_message, refusal = URL_MESSAGE, REFUSAL

    def __init__(
        self, services: main.Services, records: Confirmations, browser: bool = False, links: PageLinks | None = None
    ) -> None:
        main.NotesDelete.__init__(self, services)
        Confirmed.__init__(self, services, PageFlow(records, browser, links))
        self.records = records
        self.descriptor = PRODUCT_TOOL if browser else main.NOTES_DELETE_TOOL

    def by_form(self, call: main.ToolCall) -> dict[str, Any]:
        """Every request that declares forms: the lesson's own flow, unchanged."""
        audit.mark("form")
        return main.NotesDelete.call(self, call)

    def read(self, arguments: Any) -> main.ScopeArgs:
        """workspaceUri and title, as the lesson reads them."""
        return main.read_scope_args(arguments)

    def begin(self, call: main.ToolCall, arguments: Any = None) -> tuple[main.ScopeArgs, main.Scope]:
        """The lesson's arguments and layer 1."""
        args = self.read(call.arguments if arguments is None else arguments)
        return args, main.authorize(self.policy, call.principal, args, self.log)

    def digest_of(self, scope: main.Scope, args: Any) -> str:
        """The lesson's digest of the scope."""
        return scope.digest

    def opening(self, call: main.ToolCall, scope: main.Scope, args: Any) -> Opening:
        """Notes must match (none: the lesson's error); the page lists them live, so the state binds none."""
        main.lookup(self.notes, scope)
        return Opening([], {}, scope.arguments["title"])

    def review(self, record: Record) -> Review | str:
        """The notes matching now, inside the workspace (layer 2), while granted (layer 1), with what a store knows."""
        workspace = main.parse_file_uri(record.workspace)
        if not self.policy.allows(record.principal, workspace):  # layer 1 again: a grant may have been revoked
            return "That workspace is no longer authorized for you; nothing can be deleted here."
        store = stores.store_of(self.services)
        found = [note for note in store.candidates(workspace, record.title) if main.inside_workspace(note, workspace)]
        request = (
            f"Your MCP client called {self.name} for notes titled like \u201c{record.title}\u201d in "
            f"{person_uri(record.workspace)}."
        )
        return Review(
            self.heading,
            request,
            "",
            store.deletion,
            tuple(self.choice(store, note) for note in found[: main.MAX_CANDIDATES]),
            "Note to delete",
        )

    @staticmethod
    def choice(store: stores.Store, note: main.Note) -> Choice:
        """One note to choose: title, folder, last change, the first lines where the store has them."""
        seen = store.preview(note)
        changed = (
            f"last changed {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(seen[0]))}"
            if seen
            else f"revision {note.revision}"
        )
        about = f"{person_uri(main.format_file_uri(note.path[:-1]))} \u00b7 {changed}"
        return Choice(note.id, note.version, note.title, about, "\n".join(seen[1]) if seen else "")

    def apply(
        self,
        principal: str,
        scope: main.Scope,
        args: Any,
        state: main.StatePayload,
        target: tuple[str, str],
        answer: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The lesson's deletion: re-read and re-check the chosen note, delete it and consume the nonce, once."""
        return self.delete(principal, scope, state, target)
