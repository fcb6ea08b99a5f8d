"""notes_update and notes_move confirmed on this server's page (code/notes_tools.py on code/browser_confirm.py's
PageFlow).

The note tools share notes_delete's confirmation page: a host without forms gets a link and
a signed token where the operator turned the page on (URL-mode hosts the page through
`input_required`); the person reviews the whole change there; the second call writes what
was shown, once. With the page off, the refusals say nothing changed and name both ways.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
import unittest
from typing import Any

from helpers import support  # first: it puts code/ on the import path
from helpers.sql_stores import SCRATCH, new_database  # noqa: E402
from helpers.support import KEY, WORKSPACE, Clock, Log, request  # noqa: E402

import audit  # noqa: E402
import browser_confirm  # noqa: E402
import confirm_pages  # noqa: E402
import frame  # noqa: E402
import main  # noqa: E402
import notes_tools  # noqa: E402
import sqlite_store  # noqa: E402
from test_browser_confirm import BASE, TOKENS, ConfirmBrowser  # noqa: E402
from test_connect import ALICE_TOKEN, BOB_TOKEN, BOB_WORKSPACE, grants  # noqa: E402

NO_FORM: dict[str, Any] = {}
URL_ONLY: dict[str, Any] = {"elicitation": {"url": {}}}
FORM_ONLY: dict[str, Any] = {"elicitation": {"form": {}}}
GROCERIES = "milk\neggs\u200b\n"  # a zero-width space the page must show


def build(clock: Clock, log: Log, path: str, browser: bool = True, pages: bool = True) -> tuple[frame.Server, Any, Any]:
    """The product's server over the SQLite file at `path`, the note tools installed, the confirmation pages at BASE."""
    store = sqlite_store.open_store(path, clock=clock)
    records = browser_confirm.records_for(store, clock)
    links = browser_confirm.PageLinks(BASE if pages else None, TOKENS)  # made first: the tools give them out
    server = frame.notes_server(
        keys=[KEY],
        notes=store,
        policy=main.AuthorizationPolicy(grants()),
        clock=clock,
        log=log,
        tool=lambda services: browser_confirm.ConfirmedNotesDelete(services, records, browser, links),
    )
    audit.install(server)
    notes_tools.install(server)
    served = confirm_pages.install(server, TOKENS) if pages else None
    return server, served, store


class Client:
    """An MCP client that keeps every byte it sent and was sent."""

    def __init__(self, server: frame.Server, principal: str) -> None:
        self.server, self.principal = server, principal
        self.wire: list[str] = []
        self.next_id = 1

    def call(self, name: str, arguments: dict[str, Any], capabilities: Any = NO_FORM, **extra: Any) -> dict[str, Any]:
        message = request(
            "tools/call", {"name": name, "arguments": arguments, **extra}, id=self.next_id, capabilities=capabilities
        )
        self.next_id += 1
        response = self.server.handle(message, self.principal)
        assert response is not None
        self.wire += [json.dumps(message), json.dumps(response)]
        return response


class PageCase(unittest.TestCase):
    """A SQLite store with one note of alice's and one of bob's; the page on unless a test builds otherwise."""

    browser_on = True

    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory(dir=SCRATCH)
        self.addCleanup(folder.cleanup)
        self.db = new_database(os.path.join(folder.name, "notes.db"))
        self.clock, self.log = Clock(), Log()
        self.server, self.pages, self.store = build(self.clock, self.log, self.db, self.browser_on)
        self.addCleanup(self.store.close)
        self.alice, self.bob = Client(self.server, "alice"), Client(self.server, "bob")
        self.note = self.created(self.alice, WORKSPACE, "Groceries", GROCERIES)
        self.bobs = self.created(self.bob, BOB_WORKSPACE, "Bob's list", "bread\n")

    @staticmethod
    def created(client: Client, workspace: str, title: str, body: str) -> dict[str, Any]:
        done = client.call("notes_create", {"workspaceUri": workspace, "title": title, "body": body})["result"]
        assert not done["isError"], done
        return done["structuredContent"]

    def update_args(self, body: str, **changes: Any) -> dict[str, Any]:
        return {
            "workspaceUri": WORKSPACE,
            "noteId": self.note["noteId"],
            "body": body,
            "version": self.note["version"],
            **changes,
        }

    def move_args(self, new_path: str = "archive/groceries.md") -> dict[str, Any]:
        return {"workspaceUri": WORKSPACE, "noteId": self.note["noteId"], "newPath": new_path}

    def text(self) -> str | None:
        """alice's note's text, read behind the tools' back."""
        found = self.store.note_text(self.note["noteId"], main.parse_file_uri(WORKSPACE))
        return found[1] if found else None

    def browser(self) -> ConfirmBrowser:
        pages = self.pages

        def send(
            method: str, path: str, headers: list[tuple[str, str]], body: bytes
        ) -> tuple[int, list[tuple[str, str]], bytes]:
            return pages.handle(method, path, support.engine_headers(headers), body, "127.0.0.1")

        return ConfirmBrowser(send)

    @staticmethod
    def path(result: dict[str, Any]) -> str:
        return result["structuredContent"]["url"][len(BASE) :]

    def first(self, name: str, arguments: dict[str, Any], capabilities: Any = NO_FORM) -> dict[str, Any]:
        result = self.alice.call(name, arguments, capabilities)["result"]
        self.assertEqual(result["structuredContent"]["reason"], browser_confirm.AWAITING, result)
        return result

    def signed_in(self, first: dict[str, Any], token: str = ALICE_TOKEN) -> tuple[ConfirmBrowser, str]:
        """A browser signed in on the link; (the browser, the page it shows)."""
        browser = self.browser()
        self.assertEqual(browser.sign_in(self.path(first), token), 303)
        status, _, page = browser.get(self.path(first))
        self.assertEqual(status, 200, page)
        return browser, page

    def press(self, browser: ConfirmBrowser, first: dict[str, Any], decision: str) -> tuple[int, str]:
        """Press Apply or Keep with the fields the page carries (its CSRF token and the note it shows)."""
        _, _, page = browser.get(self.path(first))
        fields = [
            (name, value)
            for name, value in re.findall(r'<input type="hidden" name="(csrf|note)" value="([^"]+)">', page)
        ]
        status, _, answer = browser.open("POST", f"{self.path(first)}/decision", [*fields, ("decision", decision)])
        return status, answer

    def second(
        self, name: str, arguments: dict[str, Any], first: dict[str, Any], client: Client | None = None
    ) -> dict[str, Any]:
        return (client or self.alice).call(
            name, {**arguments, "confirmation": first["structuredContent"]["confirmation"]}
        )

    def record(self, first: dict[str, Any]) -> browser_confirm.Record:
        found = self.pages.records.by_handle(self.path(first).rsplit("/", 1)[1])
        assert found is not None
        return found

    def last_entry(self) -> dict[str, Any]:
        return self.store.audit_entries()[-1]


# =====================================================================================
# The first call
# =====================================================================================


class FirstCallTests(PageCase):
    def test_an_update_without_forms_returns_a_link_and_a_token_bound_like_the_forms_state_and_changes_nothing(
        self,
    ) -> None:
        entries = len(self.store.audit_entries())
        result = self.first("notes_update", self.update_args("milk\nbread\n"))
        self.assertFalse(result["isError"])
        structured = result["structuredContent"]
        self.assertEqual(set(structured), {"updated", "reason", "status", "url", "expiresAt", "confirmation"})
        self.assertFalse(structured["updated"])
        claims = support.claims_of(structured["confirmation"])
        self.assertEqual(
            (claims["sub"], claims["tool"], claims["phase"]), ("alice", "notes_update", browser_confirm.PHASE_BROWSER)
        )
        self.assertEqual(claims["cands"], [[self.note["noteId"], self.note["version"]]])
        self.assertEqual(claims["extra"]["sha256"], notes_tools.text_sha256("milk\nbread\n"))
        self.assertEqual(claims["extra"]["handle"], self.path(result).rsplit("/", 1)[1])
        self.assertEqual(claims["exp"], self.clock.now + main.DEFAULT_STATE_TTL_SECONDS)
        self.assertEqual(self.text(), GROCERIES)
        self.assertEqual(len(self.store.audit_entries()), entries)  # opening a page writes nothing

    def test_the_descriptors_gain_confirmation_only_when_the_page_is_on(self) -> None:
        def listed(server: frame.Server) -> dict[str, Any]:
            return {tool["name"]: tool for tool in server.handle(request("tools/list"), "alice")["result"]["tools"]}  # type: ignore[index]

        on = listed(self.server)
        off_server, _, off_store = build(self.clock, self.log, self.db, browser=False)
        self.addCleanup(off_store.close)
        off = listed(off_server)
        for name in ("notes_update", "notes_move"):
            self.assertEqual(
                on[name]["inputSchema"]["properties"]["confirmation"], browser_confirm.CONFIRMATION_PROPERTY
            )
            self.assertNotIn("confirmation", on[name]["inputSchema"]["required"])
            self.assertNotIn("confirmation", off[name]["inputSchema"]["properties"])
            self.assertEqual(
                off[name], getattr(notes_tools, "NotesUpdate" if name == "notes_update" else "NotesMove").descriptor
            )
        self.assertNotIn(
            "confirmation", notes_tools.NotesUpdate.descriptor["inputSchema"]["properties"]
        )  # the class's stays unchanged

    def test_a_stale_version_the_same_text_a_bad_path_or_another_workspace_opens_no_page(self) -> None:
        def count() -> int:
            return self.store.read_with(lambda c: c.execute("SELECT COUNT(*) FROM browser_confirmations").fetchone()[0])

        refused = [
            ("notes_update", self.update_args("x", version="0" * 64)),
            ("notes_update", self.update_args(GROCERIES)),
            ("notes_move", self.move_args("../out.md")),
            ("notes_update", self.update_args("x", workspaceUri=BOB_WORKSPACE)),
            ("notes_move", {**self.move_args(), "workspaceUri": WORKSPACE + "/%2e%2e/bob"}),
        ]
        for name, arguments in refused:
            with self.subTest(name=name, arguments=arguments):
                result = self.alice.call(name, arguments)["result"]
                self.assertTrue(result["isError"], result)
                self.assertNotIn(confirm_pages.PATH_PREFIX, json.dumps(result))
        self.assertEqual(count(), 0)
        self.assertEqual(self.text(), GROCERIES)


# =====================================================================================
# The page and the second call
# =====================================================================================


class DecisionTests(PageCase):
    def test_approve_then_the_second_call_writes_exactly_the_shown_bytes_once_audited_as_browser(self) -> None:
        body = "milk\u202e\nbread\\n\n"  # a bidi override and a literal backslash-n: both shown, neither disguised
        arguments = self.update_args(body)
        first = self.first("notes_update", arguments)
        browser, page = self.signed_in(first)
        diff = notes_tools.whole_diff(GROCERIES, body)[0]
        self.assertIn("\\u200b", diff)
        self.assertIn("\\u202e", diff)
        self.assertIn(diff, page.replace("&quot;", '"').replace("&#x27;", "'"))
        self.assertIn(">Apply</button>", page)
        self.assertEqual(self.press(browser, first, "approve")[0], 200)
        self.assertEqual(self.text(), GROCERIES)  # the page alone writes nothing
        done = self.second("notes_update", arguments, first)["result"]
        self.assertEqual(done["structuredContent"]["updated"], True, done)
        self.assertEqual(self.text(), body)
        entry = self.last_entry()
        self.assertEqual(
            (entry["outcome"], entry["channel"], entry["approved_by"], entry["approved_at"]),
            (audit.UPDATED, "browser", "alice", self.clock.now),
        )
        again = self.second("notes_update", arguments, first)
        self.assertEqual(again["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(again["error"]["message"], browser_confirm.refused_confirmation("notes_update"))
        self.assertEqual(self.text(), body)
        self.assertEqual(browser.get(self.path(first))[0], 404)  # decided: the link is gone

    def test_keep_changes_nothing_and_ends_the_confirmation(self) -> None:
        arguments = self.update_args("bread\n")
        first = self.first("notes_update", arguments)
        browser, _ = self.signed_in(first)
        status, page = self.press(browser, first, "keep")
        self.assertEqual((status, "Nothing will be changed" in page), (200, True))
        done = self.second("notes_update", arguments, first)["result"]
        self.assertEqual(done["structuredContent"], {"updated": False, "reason": "declined"})
        self.assertEqual(self.text(), GROCERIES)
        entry = self.last_entry()
        self.assertEqual((entry["outcome"], entry["channel"], entry["approved_by"]), ("declined", "browser", "alice"))
        self.assertEqual(
            self.second("notes_update", arguments, first)["error"]["message"],
            browser_confirm.refused_confirmation("notes_update"),
        )

    def test_pending_says_not_approved_yet_with_the_same_token_and_link(self) -> None:
        arguments = self.update_args("bread\n")
        first = self.first("notes_update", arguments)
        self.signed_in(first)  # signed in, nothing pressed
        pending = self.second("notes_update", arguments, first)["result"]
        self.assertFalse(pending["isError"])
        self.assertTrue(pending["content"][0]["text"].startswith("Not approved yet"), pending)
        self.assertEqual(
            pending["structuredContent"], {**first["structuredContent"], "status": browser_confirm.STILL_PENDING}
        )
        self.assertEqual(self.text(), GROCERIES)
        self.assertEqual(self.record(first).status, browser_confirm.PENDING)

    def test_a_diff_too_large_for_a_form_goes_to_the_page_whole_and_is_applied_after_approval(self) -> None:
        big = "".join(f"line {k}\n" for k in range(notes_tools.MAX_DIFF_LINES + 50))
        self.assertIsNone(notes_tools.unified_diff(GROCERIES, big))  # more than any form shows
        arguments = self.update_args(big)
        for capabilities in (FORM_ONLY, NO_FORM):
            with self.subTest(capabilities=capabilities):
                self.first("notes_update", arguments, capabilities)  # a form host too: the page, not a refusal
        first = self.first("notes_update", arguments)
        browser, page = self.signed_in(first)
        shown = page.split('<pre class="change">', 1)[1].split("</pre>", 1)[0].split("\n")
        for k in range(notes_tools.MAX_DIFF_LINES + 50):
            self.assertIn(f"+line {k}", shown)  # every line, none cut
        self.assertEqual(shown[2], f"@@ -1,2 +1,{notes_tools.MAX_DIFF_LINES + 50} @@")  # the lines there are, none more
        self.press(browser, first, "approve")
        done = self.second("notes_update", arguments, first)["result"]
        self.assertTrue(done["structuredContent"]["updated"], done)
        self.assertEqual(self.text(), big)

    def test_a_move_shows_from_and_to_and_moves_after_approval(self) -> None:
        arguments = self.move_args("archive/groceries.md")
        first = self.first("notes_move", arguments)
        self.assertEqual(
            set(first["structuredContent"]), {"moved", "reason", "status", "url", "expiresAt", "confirmation"}
        )
        browser, page = self.signed_in(first)
        self.assertIn(f"to:   {WORKSPACE}/archive/groceries.md", page)
        self.assertIn("never replaced", page)
        self.press(browser, first, "approve")
        done = self.second("notes_move", arguments, first)["result"]
        self.assertTrue(done["structuredContent"]["moved"], done)
        entry = self.last_entry()
        self.assertEqual((entry["outcome"], entry["channel"], entry["approved_by"]), (audit.MOVED, "browser", "alice"))
        self.assertEqual(
            self.second("notes_move", arguments, first)["error"]["message"],
            browser_confirm.refused_confirmation("notes_move"),
        )

    def test_other_arguments_other_bytes_a_forged_token_or_an_expired_one_are_the_one_32602_and_change_nothing(
        self,
    ) -> None:
        arguments = self.update_args("bread\n")
        first = self.first("notes_update", arguments)
        browser, _ = self.signed_in(first)
        self.press(browser, first, "approve")
        token = first["structuredContent"]["confirmation"]
        forged = token[:-2] + ("AA" if token[-2:] != "AA" else "BB")
        move = self.first("notes_move", self.move_args())
        attempts = [
            {**self.update_args("bread!\n"), "confirmation": token},  # other bytes
            {**self.update_args("bread\n", noteId="other"), "confirmation": token},  # another note
            {**arguments, "confirmation": forged},
            {**arguments, "confirmation": move["structuredContent"]["confirmation"]},  # another tool's token
        ]
        for attempt in attempts:
            with self.subTest(attempt=attempt):
                error = self.alice.call("notes_update", attempt)["error"]
                self.assertEqual(
                    (error["code"], error["message"]),
                    (main.INVALID_PARAMS, browser_confirm.refused_confirmation("notes_update")),
                )
        self.assertEqual(self.text(), GROCERIES)
        self.clock.now += main.DEFAULT_STATE_TTL_SECONDS
        self.assertEqual(
            self.second("notes_update", arguments, first)["error"]["message"],
            browser_confirm.refused_confirmation("notes_update"),
        )
        self.assertEqual(self.text(), GROCERIES)

    def test_a_note_edited_after_the_request_cannot_be_approved_and_after_approval_is_not_written(self) -> None:
        arguments = self.update_args("bread\n")
        first = self.first("notes_update", arguments)
        browser, _ = self.signed_in(first)
        self.press(browser, first, "approve")
        appended = self.alice.call(
            "notes_append",
            {
                "workspaceUri": WORKSPACE,
                "noteId": self.note["noteId"],
                "text": "tea\n",
                "version": self.note["version"],
            },
        )["result"]
        self.assertFalse(appended["isError"])
        done = self.second("notes_update", arguments, first)["result"]
        self.assertTrue(done["isError"])  # the store's re-check: changed since; consumed, nothing written
        self.assertEqual(self.text(), GROCERIES + "tea\n")
        self.assertEqual(self.last_entry()["outcome"], audit.REFUSED)
        self.assertEqual(
            self.second("notes_update", arguments, first)["error"]["message"],
            browser_confirm.refused_confirmation("notes_update"),
        )
        # Edited between the request and the page: nothing to approve there.
        later = self.first(
            "notes_update", self.update_args("bread\n", version=appended["structuredContent"]["version"])
        )
        other, _ = self.signed_in(later)
        self.alice.call(
            "notes_append",
            {
                "workspaceUri": WORKSPACE,
                "noteId": self.note["noteId"],
                "text": "jam\n",
                "version": appended["structuredContent"]["version"],
            },
        )
        status, page = self.press(other, later, "approve")
        self.assertIn("changed", page)
        self.assertNotIn(">Apply</button>", page)
        self.assertEqual(self.record(later).status, browser_confirm.PENDING)

    def test_a_url_mode_host_gets_the_page_through_input_required_and_the_audit_says_url(self) -> None:
        arguments = self.update_args("bread\n")
        first = self.alice.call("notes_update", arguments, URL_ONLY)["result"]
        self.assertEqual(first["resultType"], "input_required", first)
        elicitation = first["inputRequests"][browser_confirm.URL_KEY]["params"]
        self.assertEqual(elicitation["mode"], "url")
        retry = {
            "requestState": first["requestState"],
            "inputResponses": {browser_confirm.URL_KEY: {"action": "accept"}},
        }
        asked = self.alice.call("notes_update", arguments, URL_ONLY, **retry)["result"]
        self.assertEqual(asked["requestState"], first["requestState"])  # pending: the same state again
        browser = self.browser()
        path = elicitation["url"][len(BASE) :]
        self.assertEqual(browser.sign_in(path, ALICE_TOKEN), 303)
        self.press(browser, {"structuredContent": {"url": elicitation["url"]}}, "approve")
        done = self.alice.call("notes_update", arguments, URL_ONLY, **retry)["result"]
        self.assertTrue(done["structuredContent"]["updated"], done)
        self.assertEqual(self.text(), "bread\n")
        entry = self.last_entry()
        self.assertEqual((entry["outcome"], entry["channel"], entry["approved_by"]), (audit.UPDATED, "url", "alice"))

    def test_a_decline_in_a_url_mode_host_closes_the_page_and_apply_there_says_the_link_is_not_valid(self) -> None:
        arguments = self.update_args("bread\n")
        first = self.alice.call("notes_update", arguments, URL_ONLY)["result"]
        link = {"structuredContent": {"url": first["inputRequests"][browser_confirm.URL_KEY]["params"]["url"]}}
        browser, page = self.signed_in(link)
        self.assertIn(">Apply</button>", page)
        fields = re.findall(r'<input type="hidden" name="(csrf|note)" value="([^"]+)">', page)
        declining = {browser_confirm.URL_KEY: {"action": "decline"}}
        retry = {"requestState": first["requestState"], "inputResponses": declining}
        declined = self.alice.call("notes_update", arguments, URL_ONLY, **retry)["result"]["structuredContent"]
        self.assertEqual(declined, {"updated": False, "reason": "declined"})
        status, _, answer = browser.open("POST", f"{self.path(link)}/decision", [*fields, ("decision", "approve")])
        self.assertEqual((status, "Link not valid" in answer, "Approved" in answer), (404, True, False), answer)
        self.assertEqual((self.record(link).status, self.record(link).decided_by), (browser_confirm.DECLINED, "alice"))
        self.assertEqual((self.last_entry()["outcome"], self.last_entry()["channel"]), ("declined", "url"))
        again = self.alice.call("notes_update", arguments, URL_ONLY, **retry)
        self.assertEqual(again["error"]["message"], main.STATE_INVALID)
        self.assertEqual(self.text(), GROCERIES)


# =====================================================================================
# Who can approve
# =====================================================================================


class WhoCanApproveTests(PageCase):
    def test_another_principal_cannot_approve_and_the_change_stays_pending(self) -> None:
        arguments = self.update_args("bread\n")
        first = self.first("notes_update", arguments)
        browser = self.browser()
        self.assertEqual(browser.sign_in(self.path(first), BOB_TOKEN), 403)
        self.assertIn("Wrong account", browser.pages[-1][2])
        self.assertNotIn("bread", browser.pages[-1][2])
        self.assertNotIn(">Apply</button>", browser.get(self.path(first))[2])
        self.assertEqual(self.record(first).status, browser_confirm.PENDING)
        # bob holding alice's token: its subject is alice, so it is not bob's to use.
        refused = self.bob.call(
            "notes_update", {**arguments, "confirmation": first["structuredContent"]["confirmation"]}
        )["result"]
        self.assertTrue(refused["isError"], refused)  # layer 1 first: alice's workspace is not bob's
        self.assertTrue(
            self.second("notes_update", arguments, first)["result"]["content"][0]["text"].startswith("Not approved yet")
        )
        self.assertEqual(self.text(), GROCERIES)

    def test_a_client_holding_every_byte_it_was_sent_cannot_approve(self) -> None:
        arguments = self.update_args("bread\n")
        first = self.first("notes_update", arguments)
        self.alice.call("notes_move", self.move_args())  # a second page, for good measure
        path = self.path(first)
        wire = "\n".join(self.alice.wire)
        self.assertNotIn(ALICE_TOKEN, wire)  # no sign-in token ever appears in a tool result
        model = self.browser()
        self.assertIn("Sign in", model.get(path)[2])
        login = re.search(r'name="login" value="([^"]+)"', model.pages[-1][2]).group(1)  # type: ignore[union-attr]
        for secret in sorted(set(re.findall(r"[A-Za-z0-9_\-.]{20,}", wire)) | {login}):
            status, _, page = model.open("POST", f"{path}/sign-in", [("token", secret), ("login", login)])
            self.assertNotEqual(status, 303, secret)
            status, _, page = model.open(
                "POST",
                f"{path}/decision",
                [("csrf", secret), ("decision", "approve")],
                [("Cookie", f"{confirm_pages.SESSION_COOKIE}={secret}")],
            )
            self.assertNotIn("Approved", page)
        self.assertIsNone(model.jar.get(confirm_pages.SESSION_COOKIE))
        self.assertEqual(self.record(first).status, browser_confirm.PENDING)
        self.assertTrue(
            self.second("notes_update", arguments, first)["result"]["content"][0]["text"].startswith("Not approved yet")
        )
        self.assertEqual(self.text(), GROCERIES)
        self.assertNotIn(ALICE_TOKEN, "\n".join(self.log))


# =====================================================================================
# The page off
# =====================================================================================


class PageOffTests(PageCase):
    browser_on = False

    def test_without_forms_update_and_move_are_32021_saying_nothing_changed_and_naming_both_ways(self) -> None:
        for name, arguments in (("notes_update", self.update_args("bread\n")), ("notes_move", self.move_args())):
            with self.subTest(name=name):
                error = self.alice.call(name, arguments)["error"]
                self.assertEqual(error["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)
                self.assertEqual(error["data"], {"requiredCapabilities": {"elicitation": {"form": {}}}})
                for said in ("Nothing was changed", "host that shows forms", "--confirm-in-browser"):
                    self.assertIn(said, error["message"])
                with_token = self.alice.call(name, {**arguments, "confirmation": "x" * 40})["result"]
                self.assertTrue(with_token["isError"])  # no such argument while the page is off
        self.assertEqual(self.text(), GROCERIES)
        self.assertEqual(
            self.store.read_with(lambda c: c.execute("SELECT COUNT(*) FROM browser_confirmations").fetchone()), (0,)
        )

    def test_a_diff_too_large_for_a_form_stays_refused_naming_confirm_in_browser(self) -> None:
        big = "".join(f"line {k}\n" for k in range(notes_tools.MAX_DIFF_LINES + 1))
        done = self.alice.call("notes_update", self.update_args(big), FORM_ONLY)["result"]
        self.assertTrue(done["isError"])
        self.assertEqual(done["content"][0]["text"], notes_tools.TOO_LARGE)
        self.assertIn("--confirm-in-browser", notes_tools.TOO_LARGE)
        self.assertEqual(self.text(), GROCERIES)
        fits = "".join(f"line {k}\n" for k in range(notes_tools.MAX_DIFF_LINES - 10))
        self.assertEqual(
            self.alice.call("notes_update", self.update_args(fits), FORM_ONLY)["result"]["resultType"], "input_required"
        )


class OneCycleTests(unittest.TestCase):
    def test_every_confirmed_tool_takes_its_channel_its_answers_and_its_page_from_the_one_cycle(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        server, pages, store = build(Clock(), Log(), os.path.join(folder.name, "notes.db"))
        self.addCleanup(store.close)
        confirmed = {name: tool for name, tool in server.tools.items() if isinstance(tool, browser_confirm.Confirmed)}
        self.assertEqual(sorted(confirmed), [main.TOOL_NAME, "notes_edit", "notes_move", "notes_update"])
        for name, tool in confirmed.items():
            for step in ("call", "channel", "by_url", "first_call", "confirmed", "settle_page", "open_page", "close"):
                with self.subTest(tool=name, step=step):
                    self.assertIs(getattr(type(tool), step), getattr(browser_confirm.Confirmed, step))
            # One table of decisions, one option, one set of pages.
            self.assertIs(tool.flow, server.tools[main.TOOL_NAME].flow)
        self.assertFalse(hasattr(pages, "reviewer"))  # the page asks the tool for its review, whichever tool it is


class OlderDatabaseTests(unittest.TestCase):
    def test_the_decisions_table_gains_its_tool_and_detail_columns_and_old_rows_read_as_notes_delete(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        path = os.path.join(folder.name, "notes.db")
        clock = Clock()
        sqlite_store.open_store(path, clock=clock).close()
        conn = sqlite3.connect(path)
        conn.execute("DROP TABLE browser_confirmations")
        conn.execute(
            "CREATE TABLE browser_confirmations (nonce TEXT PRIMARY KEY, handle TEXT NOT NULL UNIQUE, principal TEXT "
            "NOT NULL,"
            " workspace TEXT NOT NULL, title TEXT NOT NULL, expires_at REAL NOT NULL, status TEXT NOT "
            "NULL, note_id TEXT,"
            " version TEXT, decided_by TEXT, decided_at REAL)"
        )
        conn.execute(
            "INSERT INTO browser_confirmations VALUES ('n', ?, 'alice', ?, 'TPS', ?, 'pending', NULL, NULL, NULL, "
            "NULL)",
            ("h" * 43, WORKSPACE, clock.now + 60),
        )
        conn.commit()
        conn.close()
        store = sqlite_store.open_store(path, clock=clock)
        self.addCleanup(store.close)
        record = browser_confirm.records_for(store, clock).by_handle("h" * 43)
        assert record is not None
        self.assertEqual((record.tool, record.detail, record.title), (main.TOOL_NAME, None, "TPS"))


if __name__ == "__main__":
    unittest.main()
