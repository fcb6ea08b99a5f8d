"""The connect and confirmation pages in a real headless Chromium (W3C WebDriver, tests/helpers/webdriver.py).

The connect pages run in `serve --http`; the confirmation pages run on a real loopback HTTP
listener in this process, so an injected clock can expire a link without waiting.
"""

from __future__ import annotations

import http.server
import os
import tempfile
import threading
import unittest
from typing import Any

from helpers import (
    procs,  # noqa: E402
    support,  # first: it puts code/ on the import path
    webdriver,  # noqa: E402
)
from helpers.support import tps  # noqa: E402

import browser_confirm  # noqa: E402
import connect  # noqa: E402
import main  # noqa: E402
import sqlite_store  # noqa: E402
import streamable_http  # noqa: E402
import web_pages  # noqa: E402
from test_browser_confirm import URL_ONLY, Client, build  # noqa: E402
from test_connect import ALICE_TOKEN, BOB_TOKEN, BOB_WORKSPACE, RealHttpServer, answer, connect_request, notes  # noqa: E402
from test_notes_tools_browser import Client as NotesClient  # noqa: E402
from test_notes_tools_browser import build as notes_page_server  # noqa: E402

# Where the pages' screenshots go: a scratch folder, so a run never changes the checkout;
# `NOTES_MCP_SCREENSHOTS=docs/img python3 -m unittest tests.test_browser` refreshes the
# committed ones the docs show.
SCREENSHOTS = os.environ.get("NOTES_MCP_SCREENSHOTS") or os.path.join(tempfile.gettempdir(), "notes-mcp-screenshots")
load_tests = webdriver.load_tests_for(__file__)  # the run's one browser is kept open for this module's tests
PROBE = (
    "<!DOCTYPE html><title>probe</title><p id=p>script "
    "off</p><script>document.getElementById('p').textContent='script on'</script>"
)
FRAMED_MARKER = "plain page that allows framing"


class Pages(http.server.ThreadingHTTPServer):
    """A second loopback origin serving fixed pages by path (the framing attacker, the JS probe)."""

    def __init__(self, test: unittest.TestCase, routes: dict[str, str]) -> None:
        super().__init__(("127.0.0.1", 0), PagesHandler)
        self.routes = routes
        thread = threading.Thread(target=self.serve_forever, daemon=True)
        thread.start()
        test.addCleanup(thread.join, procs.GUARD)
        test.addCleanup(self.server_close)
        test.addCleanup(self.shutdown)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class PagesHandler(http.server.BaseHTTPRequestHandler):
    server: Pages

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's naming
        body = self.server.routes.get(self.path, "not found").encode()
        self.send_response(200 if self.path in self.server.routes else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass


class BrowserFlowTests(RealHttpServer, unittest.TestCase):
    """A person with a browser completes, refuses or is refused the connect flow."""

    @classmethod
    def setUpClass(cls) -> None:
        # The class skips, in one line, rather than the module at import: a module that
        # raises SkipTest while loading becomes a stand-in test named after where discovery began.
        if not webdriver.available():
            raise unittest.SkipTest("Chromium or chromedriver not installed (run .ci/setup-chromium.sh)")
        super().setUpClass()

    def driver(self, javascript: bool = True) -> webdriver.Driver:
        return webdriver.shared(self, javascript)

    def first_link(self) -> tuple[dict[str, Any], str]:
        """A real first tools/call notes_publish: its result and the link it carries."""
        first = self.alice.call(tps("TPS report 2025"))["result"]
        self.assertEqual(first["resultType"], "input_required")
        return first, connect_request(first)["params"]["url"]

    def sign_in(self, driver: webdriver.Driver, url: str, token: str, screenshot: str = "") -> str:
        """Open the link (its picture saved as `screenshot` when named), paste the token, press Sign in; the page source
        after it."""
        driver.get(url)
        self.assertIn("Sign in", driver.source())
        if screenshot:
            self.save(driver, screenshot)
        driver.paste("input[name=token]", token)
        driver.submit("form button[type=submit]")
        return driver.source()

    def save(self, driver: webdriver.Driver, name: str) -> None:
        os.makedirs(SCREENSHOTS, exist_ok=True)
        png = driver.screenshot()
        self.assertTrue(png.startswith(b"\x89PNG\r\n\x1a\n"))
        with open(os.path.join(SCREENSHOTS, name), "wb") as handle:
            handle.write(png)

    def complete_flow(self, driver: webdriver.Driver, screenshots: bool) -> None:
        first, url = self.first_link()
        consent = self.sign_in(driver, url, ALICE_TOKEN, "connect-sign-in.png" if screenshots else "")
        self.assertEqual(driver.current_url(), url)  # the 303 led back to the link
        for part in ("<strong>alice</strong>", connect.TOOL_NAME, "TPS report 2025", "standing connection"):
            self.assertIn(part, consent)
        if screenshots:
            self.save(driver, "connect-consent.png")
        driver.submit("button[value=allow]")
        connected = driver.source()
        self.assertIn("<h1>Connected</h1>", connected)
        self.assertIn("Disconnect", connected)
        if screenshots:
            self.save(driver, "connect-connected.png")
        done = self.alice.retry(tps("TPS report 2025"), first, answer("accept"))["result"]
        self.assertEqual(done["structuredContent"], {"published": True, "noteId": "note-14", "reportId": "report-1"})
        self.assertNotIn("refused", self.server.stderr_text())  # no Origin, CSRF or login token refusal on the way

    def test_sign_in_and_allow_in_chromium_then_the_retry_publishes(self) -> None:
        self.complete_flow(self.driver(), screenshots=True)

    def test_the_same_flow_works_with_javascript_disabled(self) -> None:
        driver = self.driver(javascript=False)
        probe = Pages(self, {"/probe": PROBE})
        driver.get(probe.url("/probe"))
        self.assertIn("script off", driver.source())  # the preference really holds
        self.complete_flow(driver, screenshots=False)

    def test_bob_signing_in_on_alices_link_sees_wrong_account_and_alice_stays_unconnected(self) -> None:
        driver = self.driver()
        first, url = self.first_link()
        page = self.sign_in(driver, url, BOB_TOKEN)
        self.assertIn("Wrong account", page)
        self.assertNotIn("Allow", page)
        self.save(driver, "connect-wrong-account.png")
        again = self.alice.retry(tps("TPS report 2025"), first, answer("accept"))["result"]
        self.assertEqual(again["resultType"], "input_required")
        self.assertEqual(connect_request(again), connect_request(first))

    def test_another_origin_cannot_frame_the_page(self) -> None:
        _, url = self.first_link()
        plain = Pages(self, {"/plain": f"<!DOCTYPE html><p>{FRAMED_MARKER}</p>"})
        attacker = Pages(
            self,
            {"/ours": f'<iframe src="{url}"></iframe>', "/control": f'<iframe src="{plain.url("/plain")}"></iframe>'},
        )
        driver = self.driver()
        # Control: the same method does see a cross-origin page that allows framing.
        driver.get(attacker.url("/control"))
        driver.switch_to_frame(0)
        self.assertIn(FRAMED_MARKER, driver.source())
        driver.switch_to_frame(None)
        driver.get(attacker.url("/ours"))
        driver.switch_to_frame(0)
        framed = driver.source()
        self.assertNotIn("Sign in", framed)
        self.assertNotIn('name="token"', framed)
        driver.switch_to_frame(None)
        self.assertEqual(driver.current_url(), attacker.url("/ours"))


def serve_pages(test: unittest.TestCase, server: Any, pages: Any, name: str = "127.0.0.1") -> None:
    """`pages` on a real loopback listener, linked as http://NAME:PORT, until the test ends (the MCP calls go to the
    server in process)."""
    policy = streamable_http.HttpPolicy({}, None, None, frozenset())
    endpoint = streamable_http.McpEndpoint(server, policy, web_pages.PageSet([pages]), mcp_endpoint=False)
    listener = streamable_http.listen("127.0.0.1", 0, endpoint, support.Log())
    port = listener.address[1]
    policy.allowed_hosts = frozenset(f"{name}:{port}" for name in streamable_http.LOOPBACK_NAMES)
    pages.base_url = f"http://{name}:{port}"
    thread = threading.Thread(target=listener.serve_forever, daemon=True)
    thread.start()
    test.addCleanup(thread.join, procs.GUARD)
    test.addCleanup(listener.shutdown, 0)


class ConfirmInChromiumTests(unittest.TestCase):
    """A person confirms notes_delete in Chromium; the model's second call deletes what they chose, once."""

    @classmethod
    def setUpClass(cls) -> None:
        if not webdriver.available():
            raise unittest.SkipTest("Chromium or chromedriver not installed (run .ci/setup-chromium.sh)")
        super().setUpClass()

    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.clock = support.Clock()
        path = os.path.join(folder.name, "notes.db")
        # Two instances over one SQLite database, as two processes behind a load balancer.
        self.stores = [sqlite_store.open_store(path, clock=self.clock, seed_notes=notes()) for _ in range(2)]
        for store in self.stores:
            self.addCleanup(store.close)
        (self.server, pages), (self.other, _) = [build(self.clock, support.Log(), store) for store in self.stores]
        self.listen(pages)
        self.alice = Client(self.server, "alice")
        self.driver = webdriver.shared(self)

    def listen(self, pages: Any) -> None:
        """The pages on a real loopback listener (the MCP calls go to the servers in process)."""
        serve_pages(self, self.server, pages)

    def first(self) -> tuple[dict[str, Any], str]:
        result = self.alice.call(tps("TPS report"))["result"]
        return result, result["structuredContent"]["url"]

    def second(self, first: dict[str, Any], server: Any = None) -> dict[str, Any]:
        arguments = {**tps("TPS report"), "confirmation": first["structuredContent"]["confirmation"]}
        return Client(server or self.server, "alice").call(arguments)

    def sign_in(self, url: str, token: str, screenshot: str = "") -> str:
        self.driver.get(url)
        self.assertIn("Sign in", self.driver.source())
        if screenshot:
            self.save(screenshot)
        self.driver.paste("input[name=token]", token)
        self.driver.submit("form button[type=submit]")
        return self.driver.source()

    def save(self, name: str) -> None:
        os.makedirs(SCREENSHOTS, exist_ok=True)
        with open(os.path.join(SCREENSHOTS, name), "wb") as handle:
            handle.write(self.driver.screenshot())

    def ids(self) -> list[str]:
        return [note.id for note in self.stores[1].all()]

    def test_link_sign_in_choose_move_to_trash_then_the_second_call_deletes_that_note_once(self) -> None:
        first, url = self.first()
        page = self.sign_in(url, ALICE_TOKEN, "confirm-sign-in.png")
        self.assertEqual(self.driver.current_url(), url)
        for shown in (
            "<strong>alice</strong>",
            "TPS report 2023",
            "TPS report 2024",
            "TPS report 2025",
            "Move to trash",
        ):
            self.assertIn(shown, page)
        self.driver.click("input[value$=':note-7']")
        self.save("confirm-choose.png")
        self.driver.submit("button[value=approve]")
        self.assertIn("<h1>Approved</h1>", self.driver.source())
        self.save("confirm-approved.png")
        self.assertIn("note-7", self.ids())  # the page alone deletes nothing
        done = self.second(first, self.other)["result"]  # the other instance reads the shared decision
        self.assertEqual(done["structuredContent"], {"deleted": True, "noteId": "note-7"})
        self.assertEqual(sorted(self.ids()), sorted(n.id for n in notes() if n.id != "note-7"))
        self.assertEqual(self.second(first)["error"]["message"], browser_confirm.refused_confirmation(main.TOOL_NAME))
        self.driver.get(url)
        self.assertIn("Link not valid", self.driver.source())

    def test_keep_in_chromium_deletes_nothing_and_ends_the_confirmation(self) -> None:
        first, url = self.first()
        self.sign_in(url, ALICE_TOKEN)
        self.driver.submit("button[value=keep]")
        self.assertIn("<h1>Kept</h1>", self.driver.source())
        self.assertEqual(self.second(first)["result"]["structuredContent"], {"deleted": False, "reason": "declined"})
        self.assertEqual(sorted(self.ids()), sorted(n.id for n in notes()))

    def test_an_expired_link_is_refused_in_chromium_and_its_token_too(self) -> None:
        first, url = self.first()
        self.sign_in(url, ALICE_TOKEN)
        self.clock.now += main.DEFAULT_STATE_TTL_SECONDS
        self.driver.click("input[value$=':note-7']")
        self.driver.submit("button[value=approve]")
        self.assertIn("Link not valid", self.driver.source())
        self.assertEqual(self.second(first)["error"]["message"], browser_confirm.refused_confirmation(main.TOOL_NAME))
        self.assertEqual(sorted(self.ids()), sorted(n.id for n in notes()))

    def test_a_decline_in_a_url_mode_host_closes_the_page_open_in_chromium_on_every_instance(self) -> None:
        first = self.alice.call(tps("TPS report"), URL_ONLY)["result"]
        url = first["inputRequests"][browser_confirm.URL_KEY]["params"]["url"]
        self.assertIn("Move to trash", self.sign_in(url, ALICE_TOKEN))
        self.driver.click("input[value$=':note-7']")
        # The person declines in the host, through the other instance, while the page is open here.
        declining = {browser_confirm.URL_KEY: {"action": "decline"}}
        retry = {"requestState": first["requestState"], "inputResponses": declining}
        declined = Client(self.other, "alice").call(tps("TPS report"), URL_ONLY, **retry)["result"]
        self.assertEqual(declined["structuredContent"], {"deleted": False, "reason": "declined"})
        self.driver.submit("button[value=approve]")
        page = self.driver.source()
        self.assertIn("Link not valid", page)
        self.assertNotIn("Approved", page)
        self.driver.get(url)
        self.assertIn("Link not valid", self.driver.source())
        self.assertEqual(self.alice.call(tps("TPS report"), URL_ONLY, **retry)["error"]["message"], main.STATE_INVALID)
        self.assertEqual(sorted(self.ids()), sorted(n.id for n in notes()))

    def test_another_principals_browser_is_refused_and_alices_confirmation_stays_pending(self) -> None:
        first, url = self.first()
        page = self.sign_in(url, BOB_TOKEN)
        self.assertIn("Wrong account", page)
        self.assertNotIn("Move to trash", page)
        self.save("confirm-wrong-account.png")
        bob = Client(self.server, "bob").call(tps("TPS", BOB_WORKSPACE))["result"]
        self.sign_in(bob["structuredContent"]["url"], BOB_TOKEN)
        self.driver.get(url)
        self.assertIn("Sign in", self.driver.source())  # bob's session is for bob's link alone
        self.assertTrue(self.second(first)["result"]["content"][0]["text"].startswith("Not approved yet"))


class UpdateInChromiumTests(unittest.TestCase):
    """A person reviews a notes_update's whole diff in Chromium and applies it; the second call writes those bytes,
    once."""

    @classmethod
    def setUpClass(cls) -> None:
        if not webdriver.available():
            raise unittest.SkipTest("Chromium or chromedriver not installed (run .ci/setup-chromium.sh)")
        super().setUpClass()

    def test_an_update_reviewed_and_applied_on_the_page_is_written_by_the_second_call_once(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        clock = support.Clock()
        server, pages, store = notes_page_server(clock, support.Log(), os.path.join(folder.name, "notes.db"))
        self.addCleanup(store.close)
        serve_pages(self, server, pages)
        alice = NotesClient(server, "alice")
        note = alice.call(
            "notes_create", {"workspaceUri": main.LESSON_WORKSPACE, "title": "Groceries", "body": "milk\neggs\n"}
        )
        note = note["result"]["structuredContent"]
        body = "milk\nbread\u200b\n"
        arguments = {
            "workspaceUri": main.LESSON_WORKSPACE,
            "noteId": note["noteId"],
            "body": body,
            "version": note["version"],
        }
        first = alice.call("notes_update", arguments)["result"]
        url = first["structuredContent"]["url"]
        driver = webdriver.shared(self)
        driver.get(url)
        driver.paste("input[name=token]", ALICE_TOKEN)
        driver.submit("form button[type=submit]")
        page = driver.source()
        for shown in ("<strong>alice</strong>", "-eggs", "+bread\\u200b", ">Apply</button>"):
            self.assertIn(shown, page)
        os.makedirs(SCREENSHOTS, exist_ok=True)
        with open(os.path.join(SCREENSHOTS, "confirm-update.png"), "wb") as handle:
            handle.write(driver.screenshot())
        driver.submit("button[value=approve]")
        self.assertIn("<h1>Approved</h1>", driver.source())
        self.assertEqual(store.note_text(note["noteId"], main.parse_file_uri(main.LESSON_WORKSPACE))[1], "milk\neggs\n")
        second = {**arguments, "confirmation": first["structuredContent"]["confirmation"]}
        done = alice.call("notes_update", second)["result"]
        self.assertTrue(done["structuredContent"]["updated"], done)
        self.assertEqual(store.note_text(note["noteId"], main.parse_file_uri(main.LESSON_WORKSPACE))[1], body)
        self.assertEqual(
            alice.call("notes_update", second)["error"]["message"], browser_confirm.refused_confirmation("notes_update")
        )


if __name__ == "__main__":
    unittest.main()
