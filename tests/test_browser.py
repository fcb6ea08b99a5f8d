"""The connect pages in a real headless Chromium (W3C WebDriver, tests/helpers/webdriver.py) against `serve --http`."""

from __future__ import annotations

import http.server
import os
import threading
import unittest
from typing import Any

from helpers import support  # first: it puts code/ on the import path
import connect  # noqa: E402
from helpers import procs  # noqa: E402
from helpers import webdriver  # noqa: E402
from helpers.support import tps  # noqa: E402
from test_connect import ALICE_TOKEN, BOB_TOKEN, RealHttpServer, answer, connect_request  # noqa: E402

SCREENSHOTS = os.path.join(support.ROOT, "docs", "img")
PROBE = "<!DOCTYPE html><title>probe</title><p id=p>script off</p><script>document.getElementById('p').textContent='script on'</script>"
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

    def driver(self, prefs: dict[str, Any] | None = None) -> webdriver.Driver:
        driver = webdriver.Driver(prefs)
        self.addCleanup(driver.close)
        return driver

    def first_link(self) -> tuple[dict[str, Any], str]:
        """A real first tools/call notes_publish: its result and the link it carries."""
        first = self.alice.call(tps("TPS report 2025"))["result"]
        self.assertEqual(first["resultType"], "input_required")
        return first, connect_request(first)["params"]["url"]

    def sign_in(self, driver: webdriver.Driver, url: str, token: str) -> str:
        """Open the link, paste the token, press Sign in; the page source after it."""
        driver.get(url)
        self.assertIn("Sign in", driver.source())
        driver.send_keys(driver.find("input[name=token]"), token)
        driver.submit(driver.find("form button[type=submit]"))
        return driver.source()

    def save(self, driver: webdriver.Driver, name: str) -> None:
        os.makedirs(SCREENSHOTS, exist_ok=True)
        png = driver.screenshot()
        self.assertTrue(png.startswith(b"\x89PNG\r\n\x1a\n"))
        with open(os.path.join(SCREENSHOTS, name), "wb") as handle:
            handle.write(png)

    def complete_flow(self, driver: webdriver.Driver, screenshots: bool) -> None:
        first, url = self.first_link()
        driver.get(url)
        if screenshots:
            self.save(driver, "connect-sign-in.png")
        consent = self.sign_in(driver, url, ALICE_TOKEN)
        self.assertEqual(driver.current_url(), url)  # the 303 led back to the link
        for part in ("<strong>alice</strong>", connect.TOOL_NAME, "TPS report 2025", "standing connection"):
            self.assertIn(part, consent)
        if screenshots:
            self.save(driver, "connect-consent.png")
        driver.submit(driver.find("button[value=allow]"))
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
        driver = self.driver(webdriver.JAVASCRIPT_OFF)
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
        attacker = Pages(self, {"/ours": f'<iframe src="{url}"></iframe>', "/control": f'<iframe src="{plain.url("/plain")}"></iframe>'})
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


if __name__ == "__main__":
    unittest.main()
