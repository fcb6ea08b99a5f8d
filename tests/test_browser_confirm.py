"""notes_delete confirmed on this server's page: the link, the sign-in, the choice, the second call
(code/browser_confirm.py, code/confirm_pages.py)."""

from __future__ import annotations

import copy
import json
import os
import re
import secrets
import tempfile
import threading
import unittest
from typing import Any
from urllib.parse import urlsplit

from helpers import support  # first: it puts code/ on the import path

import audit  # noqa: E402
import browser_confirm  # noqa: E402
import confirm_pages  # noqa: E402
import frame  # noqa: E402
import legacy  # noqa: E402
import main  # noqa: E402
import sqlite_store  # noqa: E402
import stores  # noqa: E402

REFUSED_DELETE = browser_confirm.refused_confirmation(main.TOOL_NAME)  # the one refusal of a confirmation token
from helpers import procs  # noqa: E402
from helpers.procs import GUARD  # noqa: E402
from helpers.support import KEY, WORKSPACE, Clock, Log, request, tps  # noqa: E402

import web_pages  # noqa: E402
from test_connect import ALICE_TOKEN, BOB_TOKEN, BOB_WORKSPACE, Browser, grants, http_pages, note_entry, notes  # noqa: E402

BASE = "http://127.0.0.1:5555"
NO_FORM: dict[str, Any] = {}  # a host that declares no elicitation at all
URL_ONLY: dict[str, Any] = {"elicitation": {"url": {}}}
FORM_ONLY: dict[str, Any] = {"elicitation": {"form": {}}}
TOKENS = {"alice": ALICE_TOKEN, "bob": BOB_TOKEN}
ALICE_NOTES = ["note-14", "note-3", "note-7", "note-99"]


class ConfirmBrowser(Browser):
    """test_connect's browser on the confirmation pages' cookies."""

    def login_token(self, path: str) -> str:
        status, _, text = self.open("GET", path, omit=confirm_pages.SESSION_COOKIE)
        match = re.search(r'name="login" value="([^"]+)"', text)
        assert status == 200 and match, (status, text)
        return match.group(1)

    def choose(
        self, path: str, note_id: str | None, decision: str = "approve", csrf: str | None = "from-page"
    ) -> tuple[int, str]:
        """Press Move to trash with `note_id` chosen (as the page offers it), or Keep; (status, page)."""
        status, _, text = self.get(path)
        assert status == 200, (status, text)
        token = re.search(r'name="csrf" value="([^"]+)"', text)
        assert token is not None, text
        fields = [("csrf", token.group(1) if csrf == "from-page" else csrf or "")]
        if note_id is not None:
            value = re.search(r'name="note" value="([0-9a-f]+:' + re.escape(note_id) + '")', text)
            assert value, text
            fields.append(("note", value.group(1)[:-1]))
        fields.append(("decision", decision))
        page = self.open("POST", f"{path}/decision", fields)
        return page[0], page[2]


def build(
    clock: Clock, log: Log, store: Any = None, browser: bool = True, tokens: dict[str, str] = TOKENS
) -> tuple[frame.Server, confirm_pages.ConfirmPages]:
    """The product's server over `store` (memory by default) with the confirmation pages at BASE."""
    store = store or stores.MemoryStore(notes(), main.MemoryReplayStore(clock))
    records = browser_confirm.records_for(store, clock)
    links = browser_confirm.PageLinks(BASE, tokens)  # made first: the tool gives them out, the pages serve them
    server = frame.notes_server(
        keys=[KEY],
        notes=store,
        replay=getattr(store, "replay", None),
        policy=main.AuthorizationPolicy(grants()),
        clock=clock,
        log=log,
        tool=lambda services: browser_confirm.ConfirmedNotesDelete(services, records, browser, links),
    )
    audit.install(server)
    return server, confirm_pages.install(server, tokens)


class Client:
    """An MCP client that keeps every byte it sent and was sent."""

    def __init__(self, server: frame.Server, principal: str) -> None:
        self.server, self.principal = server, principal
        self.wire: list[str] = []
        self.next_id = 1

    def call(self, arguments: dict[str, Any], capabilities: Any = NO_FORM, **extra: Any) -> dict[str, Any]:
        message = request(
            "tools/call",
            {"name": main.TOOL_NAME, "arguments": arguments, **extra},
            id=self.next_id,
            capabilities=capabilities,
        )
        self.next_id += 1
        response = self.server.handle(message, self.principal)
        assert response is not None
        self.wire += [json.dumps(message), json.dumps(response)]
        return response


class InProcess(unittest.TestCase):
    """The server and its pages in process, an injected clock, a captured log."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.log = Log()
        self.server, self.pages = build(self.clock, self.log)
        self.alice = Client(self.server, "alice")
        self.bob = Client(self.server, "bob")

    def browser(self) -> ConfirmBrowser:
        def send(
            method: str, path: str, headers: list[tuple[str, str]], body: bytes
        ) -> tuple[int, list[tuple[str, str]], bytes]:
            return self.pages.handle(method, path, support.engine_headers(headers), body, "127.0.0.1")

        return ConfirmBrowser(send)

    def first(self, title: str = "TPS report") -> dict[str, Any]:
        result = self.alice.call(tps(title))["result"]
        self.assertEqual(result["structuredContent"]["reason"], browser_confirm.AWAITING, result)
        return result

    def path(self, result: dict[str, Any]) -> str:
        url = result["structuredContent"]["url"]
        self.assertTrue(url.startswith(BASE + confirm_pages.PATH_PREFIX), url)
        return url[len(BASE) :]

    def approved(self, first: dict[str, Any], note_id: str = "note-7") -> ConfirmBrowser:
        browser = self.browser()
        self.assertEqual(browser.sign_in(self.path(first), ALICE_TOKEN), 303)
        status, page = browser.choose(self.path(first), note_id)
        self.assertEqual((status, "Approved" in page), (200, True), page)
        return browser

    def second(
        self, first: dict[str, Any], title: str = "TPS report", client: Client | None = None, **changes: Any
    ) -> dict[str, Any]:
        arguments = {**tps(title), "confirmation": first["structuredContent"]["confirmation"], **changes}
        return (client or self.alice).call(arguments)

    def ids(self) -> list[str]:
        return support.note_ids(self.server)


# =====================================================================================
# The first call, the descriptor, and who gets which channel
# =====================================================================================


class FirstCallTests(InProcess):
    def test_the_first_call_deletes_nothing_and_returns_a_link_an_expiry_and_a_signed_token_naming_no_note(
        self,
    ) -> None:
        result = self.first()
        self.assertFalse(result["isError"])
        structured = result["structuredContent"]
        self.assertEqual(set(structured), {"deleted", "reason", "status", "url", "expiresAt", "confirmation"})
        self.assertEqual(structured["status"], browser_confirm.ISSUED)
        self.assertFalse(structured["deleted"])
        self.assertEqual(structured["expiresAt"], browser_confirm.iso(self.clock.now + main.DEFAULT_STATE_TTL_SECONDS))
        claims = support.claims_of(structured["confirmation"])
        self.assertEqual(
            (claims["sub"], claims["tool"], claims["phase"], claims["cands"]),
            ("alice", main.TOOL_NAME, browser_confirm.PHASE_BROWSER, []),
        )
        self.assertEqual(claims["extra"]["handle"], self.path(result).rsplit("/", 1)[1])
        text = json.dumps(result)
        for note in main.lesson_notes():
            self.assertNotIn(note.id, text)  # the choosing happens on the page
            self.assertNotIn(note.uri, text)
        self.assertEqual(self.ids(), sorted(n.id for n in notes()))

    def test_no_matching_note_is_the_lessons_error_and_opens_no_page(self) -> None:
        result = self.alice.call(tps("no such note"))["result"]
        self.assertTrue(result["isError"])
        self.assertIn("No note titled like", result["content"][0]["text"])
        self.assertNotIn("url", result.get("structuredContent") or {})

    def test_an_unauthorized_or_escaping_workspace_is_refused_before_any_page(self) -> None:
        for workspace in (BOB_WORKSPACE, WORKSPACE + "-evil", WORKSPACE + "/%2e%2e/x"):
            with self.subTest(workspace=workspace):
                result = self.alice.call(tps("TPS", workspace))["result"]
                self.assertTrue(result["isError"])
                self.assertNotIn(confirm_pages.PATH_PREFIX, json.dumps(result))

    def test_the_product_descriptor_gains_an_optional_confirmation_and_mains_stays_unchanged(self) -> None:
        before = copy.deepcopy(main.NOTES_DELETE_TOOL)
        tool = self.server.handle(request("tools/list"), "alice")["result"]["tools"][0]  # type: ignore[index]
        schema = tool["inputSchema"]
        self.assertEqual(schema["properties"]["confirmation"]["type"], "string")
        self.assertEqual(schema["required"], ["workspaceUri", "title"])
        self.assertEqual(main.NOTES_DELETE_TOOL, before)
        self.assertNotIn("confirmation", main.NOTES_DELETE_TOOL["inputSchema"]["properties"])
        off, _ = build(self.clock, self.log, browser=False)
        self.assertEqual(off.handle(request("tools/list"), "alice")["result"]["tools"][0], before)  # type: ignore[index]

    def test_a_form_client_still_gets_the_lessons_form_and_its_deletion_is_audited_as_form(self) -> None:
        first = self.alice.call(tps(), FORM_ONLY)["result"]
        self.assertEqual(first["resultType"], "input_required")
        self.assertIn(main.INPUT_KEY, first["inputRequests"])

    def test_with_the_option_off_a_host_without_forms_is_refused_saying_nothing_was_deleted_and_what_would_help(
        self,
    ) -> None:
        server, _ = build(self.clock, self.log, browser=False)
        error = Client(server, "alice").call(tps())["error"]
        self.assertEqual(error["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)
        self.assertEqual(error["data"], {"requiredCapabilities": {"elicitation": {"form": {}}}})
        self.assertIn("Nothing was deleted", error["message"])
        self.assertIn("host that shows forms", error["message"])
        self.assertIn("--confirm-in-browser", error["message"])
        self.assertEqual(support.note_ids(server), sorted(n.id for n in notes()))

    def test_the_2025_11_25_tool_error_says_the_same_sentence(self) -> None:
        text = legacy.needs_text({"requiredCapabilities": {"elicitation": {"form": {}}}}, browser_confirm.REFUSAL)
        self.assertTrue(text.endswith(browser_confirm.NOTHING_DELETED), text)
        self.assertNotIn("Use a client that supports it", text)
        self.assertIn(
            "Use a client that supports it",
            legacy.needs_text({"requiredCapabilities": {"elicitation": {"url": {}}}}, "x"),
        )

    def test_a_principal_without_a_sign_in_token_is_refused_rather_than_sent_to_a_page_it_cannot_open(self) -> None:
        server, _ = build(self.clock, self.log, tokens={"bob": BOB_TOKEN})
        error = Client(server, "alice").call(tps())["error"]
        self.assertEqual(error["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)

    def test_pending_pages_per_principal_up_to_the_bound_then_an_error_for_that_principal_only(self) -> None:
        for _ in range(browser_confirm.MAX_PENDING_PER_PRINCIPAL):
            self.first()
        refused = self.alice.call(tps())["result"]
        self.assertTrue(refused["isError"])
        self.assertEqual(
            self.bob.call(tps("TPS", BOB_WORKSPACE))["result"]["structuredContent"]["reason"], browser_confirm.AWAITING
        )
        self.clock.now += main.DEFAULT_STATE_TTL_SECONDS
        self.first()


# =====================================================================================
# The page and the second call
# =====================================================================================


class SecondCallTests(InProcess):
    def test_approve_then_the_second_call_deletes_exactly_that_note_and_a_second_use_is_refused(self) -> None:
        first = self.first()
        self.approved(first, "note-7")
        done = self.second(first)["result"]
        self.assertEqual(done["structuredContent"], {"deleted": True, "noteId": "note-7"})
        self.assertEqual(self.ids(), sorted(set(n.id for n in notes()) - {"note-7"}))
        again = self.second(first)["error"]
        self.assertEqual((again["code"], again["message"]), (main.INVALID_PARAMS, REFUSED_DELETE))
        self.assertEqual(len(self.ids()), len(notes()) - 1)

    def test_before_the_page_is_decided_the_second_call_says_not_approved_yet_with_the_same_token(self) -> None:
        first = self.first()
        pending = self.second(first)["result"]
        self.assertFalse(pending["isError"])
        self.assertTrue(pending["content"][0]["text"].startswith("Not approved yet."))
        # The same token and link; only the status says it is still waiting (a client showing structured results sees
        # it).
        self.assertEqual(
            pending["structuredContent"], {**first["structuredContent"], "status": browser_confirm.STILL_PENDING}
        )
        self.assertEqual(first["structuredContent"]["status"], browser_confirm.ISSUED)
        self.approved(first, "note-14")
        self.assertEqual(self.second(first)["result"]["structuredContent"], {"deleted": True, "noteId": "note-14"})

    def test_keep_deletes_nothing_and_consumes_the_confirmation(self) -> None:
        first = self.first()
        browser = self.browser()
        browser.sign_in(self.path(first), ALICE_TOKEN)
        status, page = browser.choose(self.path(first), None, "keep")
        self.assertEqual((status, "Kept" in page), (200, True))
        result = self.second(first)["result"]
        self.assertEqual(result["structuredContent"], {"deleted": False, "reason": "declined"})
        self.assertEqual(self.second(first)["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(self.ids(), sorted(n.id for n in notes()))
        self.assertEqual(browser.get(self.path(first))[0], 404)  # decided: the link is dead

    def test_expiry_ends_the_page_and_the_token_approved_or_not(self) -> None:
        first = self.first()
        browser = self.approved(first)
        self.clock.now += main.DEFAULT_STATE_TTL_SECONDS - 0.001
        other = self.first("TPS report 2025")
        self.clock.now += 0.001
        self.assertEqual(self.second(first)["error"]["message"], REFUSED_DELETE)
        self.assertEqual(browser.get(self.path(other))[0], 200)  # a fresh link still opens (a sign-in page)
        self.clock.now += main.DEFAULT_STATE_TTL_SECONDS
        self.assertEqual(self.browser().get(self.path(other))[0], 404)
        self.assertEqual(self.ids(), sorted(n.id for n in notes()))

    def test_other_arguments_a_forged_token_or_another_principal_get_the_one_refusal(self) -> None:
        first = self.first()
        self.approved(first)
        token = first["structuredContent"]["confirmation"]
        forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
        cases = [
            ("other title", lambda: self.second(first, "TPS report 2025")),
            ("forged", lambda: self.alice.call({**tps(), "confirmation": forged})),
            ("bob", lambda: self.bob.call({**tps("TPS", BOB_WORKSPACE), "confirmation": token})),
            ("a form state", lambda: self.alice.call(tps(), FORM_ONLY, requestState=token, inputResponses={})),
        ]
        for name, send in cases:
            with self.subTest(name):
                error = send()["error"]
                # The message names what the model sent: `confirmation`, or the form's requestState.
                expected = main.STATE_INVALID if name == "a form state" else REFUSED_DELETE
                self.assertEqual((error["code"], error["message"]), (main.INVALID_PARAMS, expected))
        self.assertEqual(self.ids(), sorted(n.id for n in notes()))
        self.assertEqual(
            self.second(first)["result"]["structuredContent"]["deleted"], True
        )  # still usable by its owner

    def test_a_note_edited_after_approval_is_not_deleted_and_the_confirmation_is_used(self) -> None:
        first = self.first()
        self.approved(first, "note-7")
        store = self.server.notes
        store.put(store.get("note-7")._replace(revision=1))
        result = self.second(first)["result"]
        self.assertTrue(result["isError"])
        self.assertIn("note-7", self.ids())
        self.assertEqual(self.second(first)["error"]["code"], main.INVALID_PARAMS)

    def test_a_grant_revoked_after_approval_deletes_nothing(self) -> None:
        first = self.first()
        self.approved(first, "note-7")
        self.server.services.policy._grants["alice"] = ()  # noqa: SLF001 - the operator revoked the grant
        self.assertTrue(self.second(first)["result"]["isError"])
        self.assertIn("note-7", self.ids())


class PageTests(InProcess):
    def test_the_page_lists_the_matching_notes_inside_the_workspace_and_nothing_else(self) -> None:
        first = self.first()
        browser = self.browser()
        browser.sign_in(self.path(first), ALICE_TOKEN)
        status, headers, page = browser.get(self.path(first))
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-security-policy"], web_pages.CONTENT_SECURITY_POLICY)
        for shown in ("TPS report 2023", "TPS report 2024", "TPS report 2025", "Move to trash", "Keep", WORKSPACE):
            self.assertIn(shown, page)
        for hidden in ("evil-1", "tmp-1", "shopping list", "Notes-evil"):
            self.assertNotIn(hidden, page)

    def test_another_principal_signing_in_is_refused_and_alices_confirmation_stays_pending(self) -> None:
        first = self.first()
        browser = self.browser()
        self.assertEqual(browser.sign_in(self.path(first), BOB_TOKEN), 403)
        self.assertIsNone(browser.jar.get(confirm_pages.SESSION_COOKIE))
        bob_first = self.bob.call(tps("TPS", BOB_WORKSPACE))["result"]
        self.assertEqual(browser.sign_in(self.path(bob_first), BOB_TOKEN), 303)
        self.assertIn("Sign in", browser.get(self.path(first))[2])  # bob's session is for bob's link alone
        self.assertEqual(self.second(first)["result"]["content"][0]["text"][:16], "Not approved yet")

    def test_a_session_acts_on_its_own_link_only(self) -> None:
        one, two = self.first(), self.first("TPS report 2025")
        browser = self.browser()
        browser.sign_in(self.path(one), ALICE_TOKEN)
        self.assertIn("Sign in", browser.get(self.path(two))[2])

    def test_a_note_id_the_page_did_not_offer_or_a_version_it_did_not_show_is_not_approved(self) -> None:
        first = self.first()
        browser = self.browser()
        browser.sign_in(self.path(first), ALICE_TOKEN)
        status, _, text = browser.get(self.path(first))
        csrf = re.search(r'name="csrf" value="([^"]+)"', text).group(1)  # type: ignore[union-attr]
        seven = self.server.notes.get("note-7")
        for value in (
            f"{main.Note('evil-1', 'TPS report', 'file:///Users/alice/Documents/Notes-evil/secret.md').version}:evil-1",
            f"{'0' * 32}:note-7",
            "note-7",
            "",
        ):
            with self.subTest(value=value):
                status, _, page = browser.open(
                    "POST", f"{self.path(first)}/decision", [("csrf", csrf), ("note", value), ("decision", "approve")]
                )
                self.assertIn("nothing was approved", page)
        self.assertEqual(
            (self.pages.records.by_handle(self.path(first).rsplit("/", 1)[1]) or self.fail("no record")).status,
            browser_confirm.PENDING,
        )
        self.assertEqual(seven, self.server.notes.get("note-7"))


# =====================================================================================
# URL mode: the same page through input_required
# =====================================================================================


class UrlModeTests(InProcess):
    def setUp(self) -> None:
        super().setUp()
        self.server, self.pages = build(self.clock, self.log, browser=False)  # the option does not matter
        self.alice = Client(self.server, "alice")

    def test_a_url_only_request_gets_the_page_as_input_required_and_deletes_once_after_approval(self) -> None:
        first = self.alice.call(tps(), URL_ONLY)["result"]
        self.assertEqual(first["resultType"], "input_required")
        asked = first["inputRequests"][browser_confirm.URL_KEY]["params"]
        self.assertEqual(asked["mode"], "url")
        path = asked["url"][len(BASE) :]
        early = self.alice.call(
            tps(),
            URL_ONLY,
            requestState=first["requestState"],
            inputResponses={browser_confirm.URL_KEY: {"action": "accept"}},
        )
        self.assertEqual(early["result"], first)  # not yet: the same question and state
        browser = self.browser()
        browser.sign_in(path, ALICE_TOKEN)
        browser.choose(path, "note-3")
        retry = {
            "requestState": first["requestState"],
            "inputResponses": {browser_confirm.URL_KEY: {"action": "accept"}},
        }
        done = self.alice.call(tps(), URL_ONLY, **retry)["result"]
        self.assertEqual(done["structuredContent"], {"deleted": True, "noteId": "note-3"})
        self.assertEqual(self.alice.call(tps(), URL_ONLY, **retry)["error"]["message"], main.STATE_INVALID)

    def test_decline_in_the_host_consumes_and_cancel_leaves_the_state_usable(self) -> None:
        first = self.alice.call(tps(), URL_ONLY)["result"]
        for action, reason in (("cancel", "cancelled"), ("decline", "declined")):
            retry = {
                "requestState": first["requestState"],
                "inputResponses": {browser_confirm.URL_KEY: {"action": action}},
            }
            self.assertEqual(
                self.alice.call(tps(), URL_ONLY, **retry)["result"]["structuredContent"],
                {"deleted": False, "reason": reason},
            )
        self.assertEqual(self.alice.call(tps(), URL_ONLY, **retry)["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(self.ids(), sorted(n.id for n in notes()))

    def test_a_decline_in_the_host_closes_the_page_so_approving_there_says_the_link_is_no_longer_valid(self) -> None:
        first = self.alice.call(tps(), URL_ONLY)["result"]
        path = first["inputRequests"][browser_confirm.URL_KEY]["params"]["url"][len(BASE) :]
        browser = self.browser()
        browser.sign_in(path, ALICE_TOKEN)
        status, _, page = browser.get(path)  # the page open in the person's browser, before the host's decline
        self.assertEqual((status, "Move to trash" in page), (200, True))
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
        value = re.search(r'name="note" value="([0-9a-f]+:note-7)"', page).group(1)  # type: ignore[union-attr]
        declining = {browser_confirm.URL_KEY: {"action": "decline"}}
        retry = {"requestState": first["requestState"], "inputResponses": declining}
        declined = self.alice.call(tps(), URL_ONLY, **retry)["result"]["structuredContent"]
        self.assertEqual(declined, {"deleted": False, "reason": "declined"})
        fields = [("csrf", csrf), ("note", value), ("decision", "approve")]
        status, _, page = browser.open("POST", f"{path}/decision", fields)
        self.assertEqual((status, "Link not valid" in page, "Approved" in page), (404, True, False), page)
        self.assertEqual(browser.get(path)[0], 404)  # reloaded: closed too
        nonce = main.StatePayload.parse(self.server.services.signer.verify(first["requestState"])).nonce
        record = self.pages.records.by_nonce(nonce) or self.fail("no record")
        self.assertEqual((record.status, record.note_id), (browser_confirm.DECLINED, None))
        again = self.alice.call(tps(), URL_ONLY, **retry)
        self.assertEqual(again["error"]["message"], main.STATE_INVALID)  # consumed, once
        self.assertEqual(self.ids(), sorted(n.id for n in notes()))


# =====================================================================================
# The model: every byte it saw, any HTTP request it likes, and still no approval
# =====================================================================================


class ModelCannotApproveTests(InProcess):
    def test_a_client_holding_every_byte_of_every_result_cannot_approve_by_any_request(self) -> None:
        first = self.first()
        self.alice.call(tps())  # and a second link, for good measure
        path = self.path(first)
        handle = path.rsplit("/", 1)[1]
        token = first["structuredContent"]["confirmation"]
        wire = "\n".join(self.alice.wire)
        model = self.browser()  # the model's fetch tool: it keeps cookies too
        self.assertIn("Sign in", model.get(path)[2])
        login = re.search(r'name="login" value="([^"]+)"', model.pages[-1][2]).group(1)  # type: ignore[union-attr]
        seen = set(re.findall(r"[A-Za-z0-9_\-.]{20,}", wire)) | {handle, token, login}
        invented = secrets.token_urlsafe(32)
        attempts: list[tuple[str, str, list[tuple[str, str]], list[tuple[str, str]]]] = [
            ("GET", f"{path}?confirmation={token}", [], []),
            ("POST", path, [("confirmation", token)], []),
        ]
        for secret in sorted(seen):
            attempts += [
                ("POST", f"{path}/sign-in", [("token", secret), ("login", login)], []),
                (
                    "POST",
                    f"{path}/decision",
                    [("csrf", secret), ("note", "x:note-7"), ("decision", "approve")],
                    [("Cookie", f"{confirm_pages.SESSION_COOKIE}={secret if len(secret) == 43 else invented}")],
                ),
            ]
        attempts.append(
            (
                "POST",
                f"{path}/decision",
                [("csrf", invented), ("decision", "approve")],
                [("Cookie", f"{confirm_pages.SESSION_COOKIE}={invented}")],
            )
        )
        for method, target, fields, headers in attempts:
            status, _, page = model.open(method, target, fields or None, headers)
            self.assertNotIn("Approved", page, (method, target, fields))
            self.assertNotEqual(status, 303, (method, target, fields))  # never signed in
        self.assertIsNone(model.jar.get(confirm_pages.SESSION_COOKIE))
        self.assertEqual(
            (self.pages.records.by_handle(handle) or self.fail("no record")).status, browser_confirm.PENDING
        )
        self.assertTrue(self.second(first)["result"]["content"][0]["text"].startswith("Not approved yet"))
        self.assertEqual(self.ids(), sorted(n.id for n in notes()))
        self.assertNotIn(ALICE_TOKEN, wire + "\n".join(self.log))  # the credential never reached the model or the log


# =====================================================================================
# Shared stores: two instances, one SQLite database
# =====================================================================================


class SharedSqliteTests(unittest.TestCase):
    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        path = os.path.join(folder.name, "notes.db")
        self.clock = Clock()
        self.stores = [sqlite_store.open_store(path, clock=self.clock, seed_notes=notes()) for _ in range(2)]
        for store in self.stores:
            self.addCleanup(store.close)
        self.servers = [build(self.clock, Log(), store) for store in self.stores]

    def test_approved_on_one_instance_deleted_by_the_other_once_and_audited_with_channel_and_approver(self) -> None:
        (one, pages_one), (two, _) = self.servers
        first = Client(one, "alice").call(tps())["result"]
        path = first["structuredContent"]["url"][len(BASE) :]
        browser = ConfirmBrowser(lambda m, p, h, b: pages_one.handle(m, p, support.engine_headers(h), b, "127.0.0.1"))
        browser.sign_in(path, ALICE_TOKEN)
        browser.choose(path, "note-14")
        arguments = {**tps(), "confirmation": first["structuredContent"]["confirmation"]}
        barrier = threading.Barrier(2)
        results: list[dict[str, Any]] = []

        def call(server: frame.Server) -> None:
            barrier.wait(GUARD)
            results.append(Client(server, "alice").call(arguments))

        threads = [threading.Thread(target=call, args=(server,)) for server in (one, two)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(GUARD)
        deleted = [r for r in results if "result" in r and r["result"]["structuredContent"].get("deleted")]
        refused = [r for r in results if "error" in r]
        self.assertEqual((len(deleted), len(refused)), (1, 1), results)
        self.assertEqual(refused[0]["error"]["message"], REFUSED_DELETE)
        self.assertNotIn("note-14", [n.id for n in self.stores[1].all()])
        self.assertEqual(len(self.stores[0].all()), len(notes()) - 1)
        (entry,) = self.stores[0].audit_entries(outcome=audit.DELETED)
        self.assertEqual(
            (entry["channel"], entry["approved_by"], entry["approved_at"]), ("browser", "alice", self.clock.now)
        )

    def test_the_table_and_the_audit_columns_are_added_to_a_database_that_lacks_them(self) -> None:
        import sqlite3

        path = self.stores[0]._path  # noqa: SLF001 - the file under test
        for store in self.stores:
            store.close()
        conn = sqlite3.connect(path)
        conn.execute("DROP TABLE browser_confirmations")
        conn.execute("ALTER TABLE audit DROP COLUMN channel")
        conn.commit()
        conn.close()
        reopened = sqlite_store.open_store(path, clock=self.clock)
        self.addCleanup(reopened.close)
        columns = [row[1] for row in reopened.read_with(lambda c: c.execute("PRAGMA table_info(audit)").fetchall())]
        self.assertIn("channel", columns)
        self.assertEqual(
            reopened.read_with(lambda c: c.execute("SELECT COUNT(*) FROM browser_confirmations").fetchone()), (0,)
        )


class FolderStoreTests(unittest.TestCase):
    def test_the_page_shows_the_first_lines_read_through_the_folder_store_and_the_trash_takes_the_chosen_file(
        self,
    ) -> None:
        import folder_paths
        import markdown_store

        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        notes_dir = os.path.join(folder.name, "Notes")
        os.mkdir(notes_dir)
        for name, text in (
            ("plan.md", "# Trip plan\n\nBook the train\nPack the tent\n"),
            ("plan-old.md", "# Trip plan 2020\nold\n"),
        ):
            with open(os.path.join(notes_dir, name), "w", encoding="utf-8") as handle:
                handle.write(text)
        clock = Clock()
        nonces = sqlite_store.open_ledger(os.path.join(folder.name, "nonces.db"), clock=clock)
        store = markdown_store.MarkdownNotesStore([notes_dir], nonces, watch=False)
        self.addCleanup(store.close)
        uri = main.format_file_uri(folder_paths.root_path(notes_dir))
        records = browser_confirm.records_for(store, clock)
        self.assertIsInstance(records, browser_confirm.SqlConfirmations)  # in the confirmation database, shared
        links = browser_confirm.PageLinks(BASE, TOKENS)
        server = frame.notes_server(
            keys=[KEY],
            notes=store,
            policy=main.AuthorizationPolicy({"alice": [uri]}),
            clock=clock,
            log=Log(),
            tool=lambda each: browser_confirm.ConfirmedNotesDelete(each, records, True, links),
        )
        pages = confirm_pages.install(server, TOKENS)
        first = Client(server, "alice").call({"workspaceUri": uri, "title": "trip"})["result"]
        path = first["structuredContent"]["url"][len(BASE) :]
        browser = ConfirmBrowser(lambda m, p, h, b: pages.handle(m, p, support.engine_headers(h), b, "127.0.0.1"))
        browser.sign_in(path, ALICE_TOKEN)
        page = browser.get(path)[2]
        self.assertIn("Book the train\nPack the tent", page)
        self.assertIn("last changed", page)
        self.assertNotIn("# Trip plan", page)  # the heading is the title, not a preview line
        browser.choose(path, "plan.md")
        done = Client(server, "alice").call(
            {"workspaceUri": uri, "title": "trip", "confirmation": first["structuredContent"]["confirmation"]}
        )
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": "plan.md"})
        self.assertEqual(sorted(os.listdir(notes_dir)), [".trash", "plan-old.md"])


# =====================================================================================
# Real processes: stdio with the loopback pages, and HTTP
# =====================================================================================


def config_file(test: unittest.TestCase, **extra: Any) -> str:
    return procs.write_config(
        test,
        {
            "principals": {
                "alice": {"token": ALICE_TOKEN, "workspaces": [WORKSPACE]},
                "bob": {"token": BOB_TOKEN, "workspaces": [BOB_WORKSPACE]},
            },
            "stdioPrincipal": "alice",
            "notes": [note_entry(note) for note in notes()],
            "keys": [KEY.hex()],
            **extra,
        },
    )


def process_flow(test: unittest.TestCase, send: Any, port_of: Any) -> None:
    """The whole flow against a real process: link, sign-in, choose, approve, delete once."""

    def call(arguments: dict[str, Any], id: int) -> dict[str, Any]:
        return send(
            request("tools/call", {"name": main.TOOL_NAME, "arguments": arguments}, id=id, capabilities=NO_FORM)
        )

    first = call(tps(), 1)["result"]
    url = urlsplit(first["structuredContent"]["url"])
    test.assertEqual(url.hostname, "127.0.0.1")
    browser = ConfirmBrowser(http_pages(test, port_of(url)))
    test.assertEqual(browser.sign_in(url.path, ALICE_TOKEN), 303)
    test.assertEqual(browser.choose(url.path, "note-3")[0], 200)
    arguments = {**tps(), "confirmation": first["structuredContent"]["confirmation"]}
    test.assertEqual(call(arguments, 2)["result"]["structuredContent"], {"deleted": True, "noteId": "note-3"})
    test.assertEqual(call(arguments, 3)["error"]["message"], REFUSED_DELETE)


class ProcessTests(unittest.TestCase):
    def test_over_stdio_the_loopback_listener_serves_the_page_and_the_second_call_deletes_once(self) -> None:
        server = procs.StdioServer(self, "--config", config_file(self), "--confirm-in-browser", env=procs.server_env())
        process_flow(self, server.exchange, lambda url: url.port)
        self.assertTrue(server.wait_for_line("confirmation page: on (--confirm-in-browser)"))
        self.assertNotIn(ALICE_TOKEN, server.stderr_text())

    def test_over_http_the_page_beside_the_endpoint_and_the_second_call_deletes_once(self) -> None:
        server = procs.HttpServer(self, "--config", config_file(self, confirmInBrowser=True), env=procs.server_env())

        def send(message: dict[str, Any]) -> dict[str, Any]:
            _, _, body = procs.post(server.connect(self), message, procs.mcp_headers(message, token=ALICE_TOKEN))
            return json.loads(body)

        process_flow(self, send, lambda url: server.port)
        self.assertNotIn(ALICE_TOKEN, server.stderr_text())

    def test_stdio_with_the_option_refuses_to_start_when_its_principal_has_no_token(self) -> None:
        config = procs.write_config(self, {"principals": {"alice": {"workspaces": [WORKSPACE]}}, "keys": [KEY.hex()]})
        server = procs.StdioServer(self, "--config", config, "--confirm-in-browser", env=procs.server_env())
        self.assertEqual(server.wait(), 2)
        self.assertIn("principals.alice.token", server.stderr_text())


if __name__ == "__main__":
    unittest.main()
