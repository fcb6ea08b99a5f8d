"""Passkeys on the confirmation page, in a real headless Chromium with a virtual WebAuthn authenticator
(code/passkey_pages.py).

The pages run on a real loopback listener linked as http://localhost:PORT (a secure context
with a domain RP ID); the MCP calls go to the servers in process, two instances over one
SQLite file. The authenticator is the W3C WebAuthn WebDriver extension's (CTAP2, internal,
resident keys, user verification), so every assertion is a real browser's over a real key.
Skipped in one line where Chromium or the optional extra (notes-mcp[passkeys]) is absent.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import sys
import tempfile
import time
import unittest
from contextlib import redirect_stdout
from typing import Any
from unittest import mock

from helpers import (  # noqa: E402
    procs,
    support,  # first: it puts code/ on the import path
    webdriver,
)
from helpers.support import KEY, tps  # noqa: E402

import audit  # noqa: E402
import audit_cli  # noqa: E402
import browser_confirm  # noqa: E402
import confirm_pages  # noqa: E402
import frame  # noqa: E402
import main  # noqa: E402
import passkey_pages  # noqa: E402
import serve  # noqa: E402
import sqlite_store  # noqa: E402
import stores  # noqa: E402
import test_browser  # noqa: E402
import test_browser_confirm  # noqa: E402
import test_notes_tools_browser  # noqa: E402
from test_browser_confirm import TOKENS, Client  # noqa: E402
from test_connect import ALICE_TOKEN, config_file, grants, notes  # noqa: E402

SCREENSHOTS = os.environ.get("NOTES_MCP_SCREENSHOTS") or os.path.join(tempfile.gettempdir(), "notes-mcp-screenshots")
load_tests = webdriver.load_tests_for(__file__)  # the run's one browser is kept open for this module's tests
HAS_EXTRA = importlib.util.find_spec("fido2") is not None
SKIP_EXTRA = "the optional WebAuthn library is not installed (pip install 'notes-mcp[passkeys]'; .ci/setup-passkeys.sh)"

# A hostile script in the page (what a model driving the browser can run): one assertion over
# `challenge`, its fields put in the form `selector`, then `then`: "submit" sends the form as
# it is, "hold" keeps the fields in sessionStorage, "choose:VALUE" picks another note and
# approves it. It never runs the page's own script, and it may ask for no user verification.
HOSTILE = """
const [selector, challenge, verification, then, done] = arguments;
const dec = t => Uint8Array.from(atob(t.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((t.length + 3) % 4)),
                                 c => c.charCodeAt(0));
const enc = b => btoa(String.fromCharCode(...new Uint8Array(b)))
  .replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
const asked = {challenge: dec(challenge), rpId: "localhost", userVerification: verification};
navigator.credentials.get({publicKey: asked}).then(c => {
  const form = document.querySelector(selector);
  const fields = [["credential", c.id], ["client_data", enc(c.response.clientDataJSON)],
                  ["authenticator_data", enc(c.response.authenticatorData)], ["signature", enc(c.response.signature)]];
  if (then === "hold") {
    const login = form.querySelector("input[name=login]");
    if (login) { fields.push(["login", login.value]); }
    window.sessionStorage.setItem("held", JSON.stringify(fields)); done("held"); return;
  }
  for (const [name, value] of fields) {
    const input = document.createElement("input");
    input.type = "hidden"; input.name = name; input.value = value; form.appendChild(input);
  }
  if (then.startsWith("choose:")) {
    form.querySelector('input[name=note][value="' + then.slice(7) + '"]').checked = true;
    const decision = document.createElement("input");
    decision.type = "hidden"; decision.name = "decision"; decision.value = "approve";
    form.appendChild(decision);
  }
  form.submit();
  done("sent");
}, e => done("refused: " + e.name));
"""
# The held fields, sent in the page's form `selector` (else a new form to `action`), with
# decision=approve and the note `note` chosen when given.
REPLAY = """
const [selector, action, note] = arguments;
let form = selector && document.querySelector(selector);
if (!form) {
  form = document.createElement("form"); form.method = "post"; form.action = action; document.body.appendChild(form);
}
const fields = JSON.parse(window.sessionStorage.getItem("held"));
if (note) {
  form.querySelector('input[name=note][value="' + note + '"]').checked = true;
  fields.push(["decision", "approve"]);
}
for (const [name, value] of fields) {
  const input = document.createElement("input");
  input.type = "hidden"; input.name = name; input.value = value; form.appendChild(input);
}
form.submit();
"""
SIGN_IN_FORM = "form[data-passkey=sign-in]"
DECISION_FORM = "form[action$='/decision']"


def build(clock: support.Clock, store: Any, mode: str) -> tuple[frame.Server, confirm_pages.ConfirmPages]:
    """The product's server over `store` with --confirm-in-browser and the confirmation pages in passkey `mode`."""
    records = browser_confirm.records_for(store, clock)
    links = browser_confirm.PageLinks(None, TOKENS)  # at the address serve_on_localhost gives the pages
    server = frame.notes_server(
        keys=[KEY],
        notes=store,
        replay=None,
        policy=main.AuthorizationPolicy(grants()),
        clock=clock,
        log=support.Log(),
        tool=lambda services: browser_confirm.ConfirmedNotesDelete(services, records, True, links),
    )
    audit.install(server)
    return server, confirm_pages.install(server, TOKENS, passkeys=mode)


def serve_on_localhost(test: unittest.TestCase, server: frame.Server, pages: confirm_pages.ConfirmPages) -> None:
    """`pages` on a real loopback listener linked as http://localhost:PORT (a secure context, a domain RP ID) until the
    test ends."""
    test_browser.serve_pages(test, server, pages, "localhost")


class NeedsChromiumAndTheExtra:
    """Mixed into a TestCase: skipped, in one line, where Chromium or the passkeys extra is absent."""

    @classmethod
    def setUpClass(cls) -> None:
        if not webdriver.available():
            raise unittest.SkipTest("Chromium or chromedriver not installed (run .ci/setup-chromium.sh)")
        if not HAS_EXTRA:
            raise unittest.SkipTest(SKIP_EXTRA)
        super().setUpClass()  # type: ignore[misc]


class PasskeysInChromium(NeedsChromiumAndTheExtra, unittest.TestCase):
    """Two instances over one SQLite file, each serving its pages; one Chromium with one virtual authenticator."""

    mode = passkey_pages.OFFER
    javascript = True  # whether the pages' scripts run

    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.clock = support.Clock()
        path = os.path.join(folder.name, "notes.db")
        self.stores = [sqlite_store.open_store(path, clock=self.clock, seed_notes=notes()) for _ in range(2)]
        for store in self.stores:
            self.addCleanup(store.close)
        (self.server, self.pages), (self.other, self.other_pages) = [
            build(self.clock, store, self.mode) for store in self.stores
        ]
        serve_on_localhost(self, self.server, self.pages)
        serve_on_localhost(self, self.other, self.other_pages)
        self.driver = webdriver.shared(self, self.javascript)  # the run's browser, wiped: no cookie, no authenticator
        self.authenticator = self.driver.add_authenticator()

    # ---------------------------------------------------------------- steps

    def first(self, server: frame.Server | None = None) -> tuple[dict[str, Any], str]:
        result = Client(server or self.server, "alice").call(tps("TPS report"))["result"]
        return result, result["structuredContent"]["url"]

    def second(self, first: dict[str, Any], server: frame.Server | None = None) -> dict[str, Any]:
        arguments = {**tps("TPS report"), "confirmation": first["structuredContent"]["confirmation"]}
        return Client(server or self.server, "alice").call(arguments)

    def sign_in_with_token(self, url: str) -> str:
        self.driver.get(url)
        self.driver.paste("input[name=token]", ALICE_TOKEN)
        self.driver.submit("form[action$='/sign-in'] button[type=submit]")
        return self.driver.source()

    def register(self, label: str = "Test laptop") -> str:
        self.driver.paste("input[name=label]", label)
        self.save("passkey-register.png")
        self.driver.submit("form[data-passkey=register] button[type=submit]")
        return self.driver.source()

    def sign_in_with_passkey(self, url: str) -> str:
        self.driver.get(url)
        self.driver.submit("form[data-passkey=sign-in] button[type=submit]")
        return self.driver.source()

    def save(self, name: str) -> None:
        os.makedirs(SCREENSHOTS, exist_ok=True)
        with open(os.path.join(SCREENSHOTS, name), "wb") as handle:
            handle.write(self.driver.screenshot())

    def ids(self) -> list[str]:
        return [note.id for note in self.stores[1].all()]

    def status(self, first: dict[str, Any]) -> str:
        record = self.pages.records.by_handle(first["structuredContent"]["url"].rsplit("/", 1)[1])
        assert record is not None
        return record.status

    def keys(self) -> list[stores.Passkey]:
        return self.stores[1].ledger.passkeys().of("alice")

    def hostile(self, selector: str, challenge: str, then: str = "submit", verification: str = "required") -> str:
        """Run the hostile script; when it sent the form, wait for the page that answers it."""
        old = self.driver.find("html")
        said = str(self.driver.execute_async(HOSTILE, selector, challenge, verification, then))
        if said == "sent":
            self.arrived(old)
        return said

    def replay(self, action: str = "", selector: str = "", note: str = "") -> str:
        """Send the held assertion in the form `selector` (else to `action`), approving `note` when given; the page that
        answers."""
        old = self.driver.find("html")
        self.driver.execute(REPLAY, selector, action, note)
        self.arrived(old)
        return self.driver.source()

    def arrived(self, old: str) -> None:
        deadline = time.monotonic() + webdriver.COMMAND_GUARD_SECONDS
        while self.driver.current_root() in (old, None):
            if time.monotonic() > deadline:
                raise webdriver.WebDriverError("no page answered the form")
            time.sleep(webdriver.NAVIGATION_POLL_SECONDS)

    def said(self, form: str) -> str:
        """What the page's script wrote under `form` once its ceremony ended (it fails asynchronously)."""
        deadline = time.monotonic() + webdriver.COMMAND_GUARD_SECONDS
        while not (
            text := str(
                self.driver.execute(
                    "return document.querySelector(arguments[0] + ' .passkey-status').textContent", form
                )
            )
        ):
            if time.monotonic() > deadline:
                raise webdriver.WebDriverError("the page's script said nothing")
            time.sleep(webdriver.NAVIGATION_POLL_SECONDS)
        return text

    def challenge_of(self, css: str) -> str:
        return str(self.driver.execute("return document.querySelector(arguments[0]).dataset.challenge", css))


class OfferTests(PasskeysInChromium):
    mode = passkey_pages.OFFER

    def test_register_after_a_token_sign_in_then_sign_in_with_the_passkey_approve_and_the_next_call_deletes(
        self,
    ) -> None:
        first, url = self.first()
        page = self.sign_in_with_token(url)
        self.assertIn("Register a passkey", page)
        page = self.register()
        self.assertIn("1 registered for alice", page)
        [key] = self.keys()
        self.assertEqual((key.label, key.principal), ("Test laptop", "alice"))
        self.assertEqual([c["rpId"] for c in self.driver.authenticator_credentials(self.authenticator)], ["localhost"])
        self.driver.submit("button[value=keep]")  # this one is kept; the next is approved by passkey
        first, url = self.first()
        self.driver.get(url)
        self.save("passkey-sign-in.png")
        page = self.sign_in_with_passkey(url)
        self.assertIn("Signed in as <strong>alice</strong>", page)
        self.assertNotIn("Register a passkey", page)  # a passkey session adds no passkey
        self.driver.click("input[value$=':note-7']")
        self.driver.submit("button[value=approve]")
        self.assertIn("<h1>Approved</h1>", self.driver.source())
        self.assertIn("note-7", self.ids())
        done = self.second(first, self.other)["result"]
        self.assertEqual(done["structuredContent"], {"deleted": True, "noteId": "note-7"})
        entry = self.stores[1].audit_entries(outcome=audit.DELETED)[-1]
        self.assertEqual(
            (entry["channel"], entry["approved_by"], entry["approved_with"]), ("browser", "alice", key.credential_id)
        )

    def test_without_user_verification_no_passkey_is_registered_and_none_signs_in(self) -> None:
        self.driver.set_user_verified(self.authenticator, False)
        first, url = self.first()
        self.sign_in_with_token(url)
        self.driver.paste("input[name=label]", "No fingerprint")
        self.driver.click("form[data-passkey=register] button[type=submit]")
        self.assertEqual(self.said("form[data-passkey=register]"), "No passkey was registered (NotAllowedError).")
        self.assertEqual(self.keys(), [])

    def test_a_passkey_answer_without_user_verification_signs_in_to_nothing(self) -> None:
        first, url = self.first()
        self.sign_in_with_token(url)
        self.register()
        count = self.keys()[0].sign_count
        _, url = self.first()
        self.driver.get(url)
        self.driver.set_user_verified(self.authenticator, False)
        # The page asks for verification and the browser refuses; a script asking for none gets an answer without UV.
        self.assertEqual(self.hostile(SIGN_IN_FORM, self.challenge_of(SIGN_IN_FORM), "submit", "discouraged"), "sent")
        page = self.driver.source()
        self.assertIn("did not verify", page)
        self.assertNotIn("Signed in as", page)
        self.assertEqual(self.keys()[0].sign_count, count)  # a refused answer records nothing

    def test_a_replayed_sign_in_assertion_is_refused_by_its_sign_count(self) -> None:
        first, url = self.first()
        self.sign_in_with_token(url)
        self.register()
        _, url = self.first()
        self.driver.get(url)
        # Held back: an assertion made for this very sign-in form and not sent; then a newer one signs in.
        self.assertEqual(self.hostile(SIGN_IN_FORM, self.challenge_of(SIGN_IN_FORM), "hold"), "held")
        page = self.sign_in_with_passkey(url)
        self.assertIn("Signed in as <strong>alice</strong>", page)
        used = self.keys()[0].sign_count
        page = self.replay(
            action=f"{url}/passkey"
        )  # the held answer, with its login token and this browser's login cookie
        self.assertIn("already used", page)
        self.assertNotIn("Signed in as", page)
        self.assertEqual(self.keys()[0].sign_count, used)

    def test_two_instances_on_one_sqlite_file_share_the_credentials(self) -> None:
        first, url = self.first()
        self.sign_in_with_token(url)  # instance one's pages
        self.register()
        first, url = self.first(self.other)  # instance two's pages, another port
        page = self.sign_in_with_passkey(url)
        self.assertIn("Signed in as <strong>alice</strong>", page)
        self.driver.click("input[value$=':note-3']")
        self.driver.submit("button[value=approve]")
        self.assertEqual(self.second(first)["result"]["structuredContent"], {"deleted": True, "noteId": "note-3"})


class RequireTests(PasskeysInChromium):
    mode = passkey_pages.REQUIRE

    def registered(self) -> tuple[dict[str, Any], str]:
        """alice signed in by token on a new confirmation, a passkey registered; (first result, link)."""
        first, url = self.first()
        self.sign_in_with_token(url)
        self.register()
        return first, url

    def value(self, note_id: str) -> str:
        return str(
            self.driver.execute("return document.querySelector(arguments[0]).value", f"input[value$=':{note_id}']")
        )

    def test_register_then_approve_with_an_assertion_and_the_next_call_deletes_once_audited_with_the_credential(
        self,
    ) -> None:
        first, url = self.registered()
        [key] = self.keys()
        self.driver.click("input[value$=':note-7']")
        self.save("passkey-approve.png")
        self.driver.submit("button[value=approve]")  # the page's script asks the passkey, then sends
        self.assertIn("<h1>Approved</h1>", self.driver.source())
        self.save("passkey-approved.png")
        self.assertGreater(self.keys()[0].sign_count, key.sign_count)
        self.assertEqual(
            self.second(first, self.other)["result"]["structuredContent"], {"deleted": True, "noteId": "note-7"}
        )
        self.assertEqual(self.second(first)["error"]["message"], browser_confirm.refused_confirmation(main.TOOL_NAME))
        entry = self.stores[1].audit_entries(outcome=audit.DELETED)[-1]
        self.assertEqual((entry["approved_by"], entry["approved_with"]), ("alice", key.credential_id))
        line = audit_cli.table([entry], {key.credential_id: key.label})[1]
        self.assertIn(
            f"alice at {audit_cli.stamp(entry['approved_at'])} with passkey {key.credential_id} (Test laptop)", line
        )

    def test_a_token_session_with_javascript_cannot_approve_by_sending_the_form_itself(self) -> None:
        first, url = self.first()
        page = self.sign_in_with_token(url)  # the cookie and the CSRF token in hand, as a model driving the browser
        self.assertIn("Register a passkey", page)
        self.driver.click("input[value$=':note-7']")
        self.driver.click("button[value=approve]")  # no passkey registered: the ceremony fails, nothing is sent
        status = self.said(DECISION_FORM)
        self.assertTrue(status.startswith("No passkey was used"), status)
        old = self.driver.find("html")
        self.driver.execute(
            """const form = document.querySelector(arguments[0]);
            const d = document.createElement('input'); d.type = 'hidden'; d.name = 'decision'; d.value = 'approve';
            form.appendChild(d); form.submit();""",
            DECISION_FORM,
        )
        self.arrived(old)
        page = self.driver.source()
        self.assertIn("<h1>Not approved</h1>", page)
        self.assertIn("needs a passkey", page)
        self.assertEqual(self.status(first), browser_confirm.PENDING)
        self.assertTrue(self.second(first)["result"]["content"][0]["text"].startswith("Not approved yet."))
        self.assertEqual(sorted(self.ids()), sorted(n.id for n in notes()))

    def test_an_assertion_for_one_note_cannot_approve_another(self) -> None:
        first, url = self.registered()
        other = self.value("note-3")
        said = self.hostile(DECISION_FORM, self.challenge_of("input[value$=':note-7']"), f"choose:{other}")
        self.assertEqual(said, "sent")
        self.assertIn("did not verify", self.driver.source())
        self.assertEqual(self.status(first), browser_confirm.PENDING)
        self.assertEqual(sorted(self.ids()), sorted(n.id for n in notes()))

    def test_an_assertion_for_one_version_cannot_approve_another(self) -> None:
        first, url = self.registered()
        self.assertEqual(self.hostile(DECISION_FORM, self.challenge_of("input[value$=':note-7']"), "hold"), "held")
        store = self.stores[0]
        store.put(
            next(n for n in store.all() if n.id == "note-7")._replace(revision=41)
        )  # edited since: the page now offers another version
        self.driver.get(url)
        newer = self.value("note-7")
        page = self.replay(selector=DECISION_FORM, note=newer)
        self.assertIn("did not verify", page)
        self.assertEqual(self.status(first), browser_confirm.PENDING)

    def test_an_assertion_for_one_confirmation_cannot_approve_another(self) -> None:
        first, url = self.registered()
        value = self.value("note-7")
        self.assertEqual(self.hostile(DECISION_FORM, self.challenge_of("input[value$=':note-7']"), "hold"), "held")
        second_first, second_url = self.first()
        self.sign_in_with_token(second_url)
        page = self.replay(selector=DECISION_FORM, note=value)  # the same note and version, another confirmation
        self.assertIn("did not verify", page)
        self.assertEqual(
            (self.status(first), self.status(second_first)), (browser_confirm.PENDING, browser_confirm.PENDING)
        )


class RequireWithoutJavaScriptTests(PasskeysInChromium):
    mode = passkey_pages.REQUIRE
    javascript = False

    def test_without_javascript_the_page_says_approval_needs_a_passkey_and_approves_nothing(self) -> None:
        first, url = self.first()
        page = self.sign_in_with_token(url)
        self.assertIn("<noscript>", page)
        self.assertIn(passkey_pages.NO_SCRIPT, page)
        self.driver.click("input[value$=':note-7']")
        self.save("passkey-no-javascript.png")
        self.driver.submit("button[value=approve]")
        page = self.driver.source()
        self.assertIn("<h1>Not approved</h1>", page)
        self.assertEqual(self.status(first), browser_confirm.PENDING)
        self.assertEqual(sorted(self.ids()), sorted(n.id for n in notes()))
        self.driver.get(url)
        self.driver.submit("button[value=keep]")  # Keep needs no gesture
        self.assertIn("<h1>Kept</h1>", self.driver.source())
        self.assertEqual(self.second(first)["result"]["structuredContent"], {"deleted": False, "reason": "declined"})


class UpdateRequireTests(PasskeysInChromium):
    """notes_update's page in require mode: Apply runs one assertion over that very change."""

    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.clock = support.Clock()
        self.server, self.pages, store = test_notes_tools_browser.build(
            self.clock, support.Log(), os.path.join(folder.name, "notes.db")
        )
        self.addCleanup(store.close)
        self.store = store
        keys = store.ledger.passkeys()
        self.pages.passkeys = passkey_pages.Gate(
            passkey_pages.REQUIRE, keys, self.clock, support.Log(), lambda: self.pages.base_url
        )
        serve_on_localhost(self, self.server, self.pages)
        self.driver = webdriver.shared(self)
        self.authenticator = self.driver.add_authenticator()

    def test_an_update_applied_with_a_passkey_assertion_is_written_by_the_second_call(self) -> None:
        alice = test_notes_tools_browser.Client(self.server, "alice")
        made = alice.call(
            "notes_create", {"workspaceUri": main.LESSON_WORKSPACE, "title": "Groceries", "body": "milk\neggs\n"}
        )
        note = made["result"]["structuredContent"]
        arguments = {
            "workspaceUri": main.LESSON_WORKSPACE,
            "noteId": note["noteId"],
            "body": "milk\nbread\n",
            "version": note["version"],
        }
        first = alice.call("notes_update", arguments)["result"]
        self.sign_in_with_token(first["structuredContent"]["url"])
        self.register()
        self.driver.submit("button[value=approve]")  # Apply: the script asks the passkey first
        self.assertIn("<h1>Approved</h1>", self.driver.source())
        done = alice.call("notes_update", {**arguments, "confirmation": first["structuredContent"]["confirmation"]})[
            "result"
        ]
        self.assertFalse(done.get("isError"), done)
        read = alice.call("notes_read", {"workspaceUri": main.LESSON_WORKSPACE, "noteId": note["noteId"]})["result"]
        self.assertIn("bread", json.dumps(read))
        self.assertEqual(
            self.store.audit_entries(outcome=audit.UPDATED)[-1]["approved_with"],
            self.store.ledger.passkeys().of("alice")[0].credential_id,
        )


class RealServerTests(NeedsChromiumAndTheExtra, unittest.TestCase):
    """A real `serve.py --http --confirm-in-browser --passkeys require` process (sandboxed), Chromium on its localhost
    link."""

    def call(self, server: procs.HttpServer, arguments: dict[str, Any]) -> dict[str, Any]:
        message = support.request("tools/call", {"name": main.TOOL_NAME, "arguments": arguments}, id=1, capabilities={})
        _, _, body = procs.post(server.connect(self), message, procs.mcp_headers(message, token=ALICE_TOKEN))
        return dict(json.loads(body))

    def test_the_served_pages_are_linked_at_localhost_and_a_passkey_approval_deletes(self) -> None:
        config = config_file(self, confirmInBrowser=True, passkeys="require")
        server = procs.HttpServer(self, "--config", config, env=procs.server_env(), site=True)  # site: fido2
        first = self.call(server, tps("TPS report"))["result"]
        url = first["structuredContent"]["url"]
        self.assertTrue(url.startswith(f"http://localhost:{server.port}/confirm/"), url)
        driver = webdriver.shared(self)
        driver.add_authenticator()
        driver.get(url)
        driver.paste("input[name=token]", ALICE_TOKEN)
        driver.submit("form[action$='/sign-in'] button[type=submit]")
        driver.paste("input[name=label]", "Laptop")
        driver.submit("form[data-passkey=register] button[type=submit]")
        self.assertIn("already has a passkey", driver.source())
        driver.click("input[value$=':note-7']")
        driver.submit("button[value=approve]")
        self.assertIn("<h1>Approved</h1>", driver.source())
        done = self.call(server, {**tps("TPS report"), "confirmation": first["structuredContent"]["confirmation"]})[
            "result"
        ]
        self.assertEqual(done["structuredContent"], {"deleted": True, "noteId": "note-7"})


class PerCallStdioTests(NeedsChromiumAndTheExtra, unittest.TestCase):
    """A host that starts `serve.py --stdio --passkeys require` per call: the kept link, on localhost, needs the passkey
    too."""

    def test_the_kept_page_of_a_per_call_host_registers_and_approves_by_passkey_and_the_next_process_deletes(
        self,
    ) -> None:
        import test_per_call_hosts

        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        db = os.path.join(folder.name, "notes.db")
        host = test_per_call_hosts.PerCallHost(self, config_file(self), db, "--passkeys", "require")
        first = host.call(main.TOOL_NAME, tps("TPS report"))["result"]["structuredContent"]
        self.assertTrue(first["url"].startswith("http://localhost:"), first["url"])
        driver = webdriver.shared(self)
        driver.add_authenticator()
        driver.get(first["url"])  # the process that gave it out has exited: its keeper serves it
        driver.paste("input[name=token]", ALICE_TOKEN)
        driver.submit("form[action$='/sign-in'] button[type=submit]")
        driver.paste("input[name=label]", "Laptop")
        driver.submit("form[data-passkey=register] button[type=submit]")
        driver.click("input[value$=':note-7']")
        driver.submit("button[value=approve]")
        self.assertIn("<h1>Approved</h1>", driver.source())
        done = host.call(main.TOOL_NAME, {**tps("TPS report"), "confirmation": first["confirmation"]})["result"]
        self.assertEqual(done["structuredContent"], {"deleted": True, "noteId": "note-7"})
        store = sqlite_store.open_store(db, clock=time.time)
        self.addCleanup(store.close)
        self.assertEqual([key.label for key in store.ledger.passkeys().of("alice")], ["Laptop"])
        self.assertEqual(
            store.audit_entries(outcome=audit.DELETED)[-1]["approved_with"],
            store.ledger.passkeys().of("alice")[0].credential_id,
        )


# =====================================================================================
# In process: the start-up rules, the operator's commands, what the pages refuse
# =====================================================================================


class StartupTests(unittest.TestCase):
    def test_without_the_extra_offer_and_require_refuse_in_one_line_naming_the_install_command(self) -> None:
        with mock.patch.dict(sys.modules, {"passkeys": None}):  # as if fido2 were not installed
            for mode in (passkey_pages.OFFER, passkey_pages.REQUIRE):
                line = passkey_pages.refusal(mode, None)
                self.assertEqual(
                    line,
                    f"passkeys: --passkeys {mode} needs the optional WebAuthn library: "
                    "pip install 'notes-mcp[passkeys]'; not serving",
                )
            self.assertIsNone(
                passkey_pages.refusal(passkey_pages.OFF, "http://notes.example.com")
            )  # off: nothing changes

    @unittest.skipUnless(HAS_EXTRA, SKIP_EXTRA)
    def test_a_public_url_must_be_https_with_a_domain_name(self) -> None:
        self.assertIn("is not https", passkey_pages.refusal(passkey_pages.REQUIRE, "http://notes.example.com") or "")
        self.assertIn("names an IP address", passkey_pages.refusal(passkey_pages.OFFER, "https://192.0.2.7") or "")
        self.assertIsNone(passkey_pages.refusal(passkey_pages.REQUIRE, "https://notes.example.com"))
        self.assertIsNone(passkey_pages.refusal(passkey_pages.REQUIRE, None))  # loopback: linked as http://localhost

    def test_on_loopback_the_pages_are_linked_as_localhost_with_passkeys_and_as_the_address_without(self) -> None:
        import launch

        self.assertEqual(launch.pages_origin(None, "require", "http://127.0.0.1:4321"), "http://localhost:4321")
        self.assertEqual(launch.pages_origin(None, "off", "http://127.0.0.1:4321"), "http://127.0.0.1:4321")
        self.assertEqual(
            launch.pages_origin("https://notes.example.com", "offer", "http://127.0.0.1:4321"),
            "https://notes.example.com",
        )

    def test_the_config_accepts_the_three_modes_and_refuses_anything_else(self) -> None:
        import config

        for mode in config.PASSKEY_MODES:
            self.assertEqual(config.read_passkeys(mode, "passkeys"), mode)
        for wrong in ("on", True, None, "REQUIRE"):
            with self.assertRaises(config.ConfigError):
                config.read_passkeys(wrong, "passkeys")

    def test_serve_refuses_an_http_public_url_with_passkeys_before_serving(self) -> None:
        out = io.StringIO()
        with (
            mock.patch.object(serve, "say", out.write),
            mock.patch("assemble.say"),
            mock.patch("passkey_pages.refusal", return_value="passkeys: refused"),
        ):
            with self.assertRaises(serve.StartupRefused) as refused:
                serve.start(
                    [
                        "--http",
                        "--port",
                        "0",
                        "--no-auth",
                        "--passkeys",
                        "require",
                        "--public-url",
                        "http://notes.example.com",
                    ]
                )
        self.assertEqual((refused.exception.status, out.getvalue()), (2, "passkeys: refused"))


class PasskeyCommandTests(unittest.TestCase):
    """`notes-mcp passkeys list|remove` over the database every instance shares."""

    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.path = os.path.join(folder.name, "notes.db")
        store = sqlite_store.open_store(self.path, clock=time.time, seed_notes=notes())
        keys = store.ledger.passkeys()
        keys.add(stores.Passkey("cred-A", "alice", "key", 3, 1_700_000_000.0, None, "Laptop"))
        keys.add(stores.Passkey("cred-B", "bob", "key", 0, 1_700_000_100.0, 1_700_000_200.0, "Phone"))
        store.close()

    def run_command(self, *argv: str) -> tuple[int, str]:
        out = io.StringIO()
        with redirect_stdout(out):
            status = serve.serve(["passkeys", "--db", self.path, *argv])
        return status, out.getvalue()

    def test_list_shows_every_passkey_with_its_principal_label_dates_and_count(self) -> None:
        status, text = self.run_command("list")
        lines = text.splitlines()
        self.assertEqual(status, 0)
        self.assertEqual(
            lines[0].split(),
            ["CREDENTIAL", "PRINCIPAL", "LABEL", "CREATED", "(UTC)", "LAST", "USED", "(UTC)", "SIGN", "COUNT"],
        )
        self.assertEqual(lines[1].split(), ["cred-A", "alice", "Laptop", "2023-11-14T22:13:20Z", "-", "3"])
        self.assertEqual(
            lines[2].split(), ["cred-B", "bob", "Phone", "2023-11-14T22:15:00Z", "2023-11-14T22:16:40Z", "0"]
        )
        status, text = self.run_command("list", "--principal", "bob", "--json")
        self.assertEqual([json.loads(line)["credential_id"] for line in text.splitlines()], ["cred-B"])

    def test_remove_forgets_one_passkey_once_and_leaves_the_others(self) -> None:
        self.assertEqual(
            self.run_command("remove", "cred-A"),
            (
                0,
                "removed passkey cred-A (Laptop) of alice; its principal's token registers a new one on "
                "the confirmation page\n",
            ),
        )
        status, text = self.run_command("remove", "cred-A")
        self.assertEqual(
            (status, text), (audit_cli.EXIT_REFUSED, "refused: no passkey cred-A (passkeys list shows every one)\n")
        )
        self.assertEqual([line.split()[0] for line in self.run_command("list")[1].splitlines()[1:]], ["cred-B"])


class MigrationTests(unittest.TestCase):
    def test_an_older_database_gains_the_passkeys_table_and_the_columns_naming_the_passkey_that_approved(self) -> None:
        import sqlite3

        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        path = os.path.join(folder.name, "notes.db")
        sqlite_store.open_store(path, clock=time.time, seed_notes=notes()).close()
        conn = sqlite3.connect(path)  # as a server from before passkeys left it
        conn.execute("DROP TABLE passkeys")
        conn.execute("ALTER TABLE audit DROP COLUMN approved_with")
        conn.execute("ALTER TABLE browser_confirmations DROP COLUMN decided_with")
        conn.commit()
        conn.close()
        reopened = sqlite_store.open_store(path, clock=time.time)
        self.addCleanup(reopened.close)

        def columns(table: str) -> list[str]:
            return [row[1] for row in reopened.read_with(lambda c: c.execute(f"PRAGMA table_info({table})").fetchall())]

        self.assertIn("approved_with", columns("audit"))
        self.assertIn("decided_with", columns("browser_confirmations"))
        self.assertEqual(
            columns("passkeys"),
            ["credential_id", "principal", "public_key", "sign_count", "created_at", "last_used_at", "label"],
        )
        self.assertEqual(reopened.ledger.passkeys().of(), [])
        self.assertEqual(len(reopened.all()), len(notes()))  # the notes are as they were


@unittest.skipUnless(HAS_EXTRA, SKIP_EXTRA)
class PagesInProcessTests(test_browser_confirm.InProcess):
    """The pages' refusals that need no browser (require mode unless said)."""

    mode = passkey_pages.REQUIRE

    def setUp(self) -> None:
        super().setUp()
        keys = stores.store_of(self.server.services).ledger.passkeys()
        self.pages.passkeys = passkey_pages.Gate(self.mode, keys, self.clock, self.log, lambda: self.pages.base_url)

    def signed_in(self) -> tuple[test_browser_confirm.ConfirmBrowser, dict[str, Any], str]:
        first = self.first()
        browser = self.browser()
        self.assertEqual(browser.sign_in(self.path(first), ALICE_TOKEN), 303)
        return browser, first, self.path(first)

    def register(self, browser: test_browser_confirm.ConfirmBrowser, path: str, label: str = "Key") -> tuple[int, str]:
        _, _, page = browser.get(path)
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
        status, _, text = browser.open(
            "POST",
            f"{path}/register",
            [("csrf", csrf), ("label", label), ("client_data", "e30"), ("attestation", "oA")],
        )
        return status, text

    def test_a_token_session_holding_the_cookie_and_csrf_token_cannot_approve(self) -> None:
        browser, first, path = self.signed_in()
        status, page = browser.choose(path, "note-7")
        self.assertEqual(status, 403)
        self.assertIn("needs a passkey", page)
        self.assertEqual(
            (self.pages.records.by_handle(path.rsplit("/", 1)[1]) or self.fail("no record")).status,
            browser_confirm.PENDING,
        )
        status, page = browser.choose(path, None, "keep")  # Keep needs no gesture
        self.assertEqual((status, "Kept" in page), (200, True))

    def test_registering_needs_a_token_sign_in_moments_before(self) -> None:
        browser, first, path = self.signed_in()
        self.assertEqual(
            self.register(browser, path)[0], 400
        )  # in the window: the registration itself is checked (and fails)
        self.clock.now += passkey_pages.REGISTER_WINDOW_SECONDS + 1
        status, page = self.register(browser, path)
        self.assertEqual(status, 403)
        self.assertIn("needs a sign-in with your token", page)
        self.assertEqual(stores.store_of(self.server.services).ledger.passkeys().of(), [])

    def test_a_label_of_the_bound_is_taken_and_one_longer_or_unprintable_is_refused_before_any_check(self) -> None:
        browser, first, path = self.signed_in()
        status, page = self.register(browser, path, "k" * passkey_pages.MAX_LABEL_CHARS)
        self.assertEqual(status, 400)
        self.assertIn("did not verify", page)  # the label passed; the (junk) registration did not
        for label in ("k" * (passkey_pages.MAX_LABEL_CHARS + 1), "", "two\nlines"):
            status, page = self.register(browser, path, label)
            self.assertEqual(status, 400)
            self.assertIn("Name the passkey", page)

    def test_in_require_mode_the_token_registers_no_second_passkey_until_the_operator_removes_the_first(self) -> None:
        keys = stores.store_of(self.server.services).ledger.passkeys()
        keys.add(stores.Passkey("cred-A", "alice", "key", 1, self.clock.now, None, "Laptop"))
        browser, first, path = self.signed_in()
        self.assertNotIn("Register a passkey", browser.get(path)[2])
        status, page = self.register(browser, path)
        self.assertEqual(status, 403)
        self.assertIn("already has a passkey", page)
        self.assertEqual([k.credential_id for k in keys.of("alice")], ["cred-A"])
        keys.remove("cred-A")  # the operator's `passkeys remove`
        self.assertIn("Register a passkey", browser.get(path)[2])
        self.assertEqual(self.register(browser, path)[0], 400)  # now the registration itself is checked

    def test_pages_run_one_script_pinned_by_hash_and_with_passkeys_off_none_and_no_passkey_path(self) -> None:
        browser, first, path = self.signed_in()
        _, headers, page = browser.get(path)
        self.assertIn(f"script-src {passkey_pages.SCRIPT_HASH}", headers["content-security-policy"])
        self.assertEqual(page.count("<script>"), 1)
        self.pages.passkeys = None
        _, headers, page = browser.get(path)
        self.assertNotIn("script-src", headers["content-security-policy"])
        self.assertNotIn("<script>", page)
        for action in ("register", "passkey"):
            self.assertEqual(browser.open("POST", f"{path}/{action}", [("csrf", "x")])[0], 404)
