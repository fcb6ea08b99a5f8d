"""`publicUrl` (and `--public-url`): the address people open the pages at, behind a TLS proxy.

The confirmation page's links name it, the pages' Origin rule accepts exactly its origin,
cookies are `Secure` when it is https; serving pages on a non-loopback address without it
is refused at start-up with one line naming the setting. Real server processes, real
sockets, loopback only: the test plays the proxy by sending what a browser on the public
address sends (its Origin) to the loopback listener.
"""

from __future__ import annotations

import json
import os
import secrets
import unittest
from typing import Any
from urllib.parse import urlsplit

from helpers import (
    procs,  # noqa: E402
    support,  # noqa: F401  (first: it puts code/ on the import path)
)
from helpers.support import request, tps  # noqa: E402

import browser_confirm  # noqa: E402
import config as configuration  # noqa: E402
import launch  # noqa: E402
import main  # noqa: E402
import serve  # noqa: E402
from test_browser_confirm import NO_FORM, ConfirmBrowser, config_file  # noqa: E402
from test_config import StartupRefusalCase  # noqa: E402
from test_connect import ALICE_TOKEN, http_pages  # noqa: E402

PUBLIC = "https://notes.example.com"
SECRET = secrets.token_hex(32)


def with_origin(send: Any, origin: str) -> Any:
    """A browser backend whose form posts name `origin`, as a browser on that page does."""

    def sending(method: str, path: str, headers: list[tuple[str, str]], body: bytes) -> Any:
        return send(method, path, [*headers, ("Origin", origin)] if method == "POST" else headers, body)

    return sending


class ProxyCase(unittest.TestCase):
    """An HTTP server on loopback with publicUrl `public`, reached as a proxy in front of it would reach it."""

    public = PUBLIC
    server: procs.HttpServer

    @classmethod
    def setUpClass(cls) -> None:
        # One server per class: each test gives out its own link, and what one deletes (note-3,
        # once) leaves another test's link to the notes still offered.
        scope: Any = procs.ClassScope(cls)
        config = config_file(scope, confirmInBrowser=True, publicUrl=cls.public)
        cls.server = procs.HttpServer(scope, "--config", config, env=procs.server_env())

    def call(self, arguments: dict[str, Any], id: int) -> dict[str, Any]:
        message = request("tools/call", {"name": main.TOOL_NAME, "arguments": arguments}, id=id, capabilities=NO_FORM)
        _, _, body = procs.post(self.server.connect(self), message, procs.mcp_headers(message, token=ALICE_TOKEN))
        return json.loads(body)

    def browser(self, origin: str) -> ConfirmBrowser:
        return ConfirmBrowser(with_origin(http_pages(self, self.server.port), origin))

    def link(self) -> tuple[dict[str, Any], str]:
        first = self.call(tps(), 1)["result"]
        return first, first["structuredContent"]["url"]


class OverHttps(ProxyCase):
    def test_the_link_names_the_public_url_and_the_report_says_so(self) -> None:
        _, url = self.link()
        self.assertTrue(url.startswith(f"{self.public}/confirm/"), url)
        self.assertTrue(self.server.wait_for_line(f"links at {self.public}"), self.server.stderr_text())

    def test_the_origin_rule_accepts_exactly_the_public_origin(self) -> None:
        _, url = self.link()
        path = urlsplit(url).path
        listener = f"http://127.0.0.1:{self.server.port}"
        for origin in (listener, "http://notes.example.com", f"{self.public}:8443", "https://evil.example", "null"):
            with self.subTest(origin=origin):
                self.assertEqual(self.browser(origin).sign_in(path, ALICE_TOKEN), 403)
        self.assertEqual(self.browser(self.public).sign_in(path, ALICE_TOKEN), 303)
        self.assertEqual(
            self.browser(self.public.upper()).sign_in(path, ALICE_TOKEN), 303
        )  # an origin's case is not its own

    def test_behind_the_proxy_the_whole_flow_deletes_once_with_secure_cookies(self) -> None:
        first, url = self.link()
        path = urlsplit(url).path
        browser = self.browser(self.public)
        self.assertEqual(browser.sign_in(path, ALICE_TOKEN), 303)
        self.assertTrue(browser.set_cookies)
        for cookie in browser.set_cookies:
            self.assertIn("; Secure", cookie)
            self.assertIn("HttpOnly; SameSite=Strict", cookie)
        self.assertEqual(browser.choose(path, "note-3")[0], 200)
        arguments = {**tps(), "confirmation": first["structuredContent"]["confirmation"]}
        self.assertEqual(self.call(arguments, 2)["result"]["structuredContent"], {"deleted": True, "noteId": "note-3"})
        self.assertEqual(
            self.call(arguments, 3)["error"]["message"], browser_confirm.refused_confirmation(main.TOOL_NAME)
        )


class OverHttpPlain(ProxyCase):
    """An http:// public URL: the same links and Origin rule, and no Secure flag (a browser would drop such cookies)."""

    public = "http://notes.example.com"

    def test_the_link_names_the_plain_public_url_its_origin_alone_is_accepted_and_no_cookie_is_secure(self) -> None:
        _, url = self.link()
        self.assertTrue(url.startswith(f"{self.public}/confirm/"), url)
        path = urlsplit(url).path
        self.assertEqual(self.browser("https://notes.example.com").sign_in(path, ALICE_TOKEN), 403)
        browser = self.browser(self.public)
        self.assertEqual(browser.sign_in(path, ALICE_TOKEN), 303)
        self.assertTrue(browser.set_cookies)
        self.assertTrue(all("Secure" not in cookie for cookie in browser.set_cookies))


class OverStdio(unittest.TestCase):
    def test_the_loopback_pages_of_a_stdio_server_link_to_the_public_url(self) -> None:
        server = procs.StdioServer(
            self, "--config", config_file(self), "--confirm-in-browser", "--public-url", PUBLIC, env=procs.server_env()
        )
        first = server.exchange(
            request("tools/call", {"name": main.TOOL_NAME, "arguments": tps()}, capabilities=NO_FORM)
        )["result"]
        self.assertTrue(first["structuredContent"]["url"].startswith(f"{PUBLIC}/confirm/"), first)
        self.assertTrue(
            server.wait_for_line(f"confirmation pages on {PUBLIC}/confirm/ (listening on http://127.0.0.1:"),
            server.stderr_text(),
        )
        server.close_stdin()
        self.assertEqual(server.wait(), 0)


class StartUp(StartupRefusalCase):
    """The refusals (checked before any socket is opened) and the checked setting."""

    def test_pages_on_a_non_loopback_host_without_a_public_url_are_refused_with_one_line_naming_it(self) -> None:
        for flags in (["--confirm-in-browser"], ["--publish"]):
            for host in ("0.0.0.0", "192.0.2.1", "::"):
                with self.subTest(flags=flags, host=host):
                    status, lines = self.serve(
                        "--http",
                        "--host",
                        host,
                        "--port",
                        "0",
                        *flags,
                        NOTES_MCP_SECRET=SECRET,
                        NOTES_MCP_TOKEN=ALICE_TOKEN,
                    )
                    self.assertEqual(status, serve.EXIT_USAGE)
                    self.assertEqual(len(lines), 1, lines)
                    self.assertTrue(
                        lines[0].startswith(
                            f"{serve.LOG_PREFIX}: publicUrl: is required to serve pages on --host {host}"
                        ),
                        lines,
                    )
                    self.assertIn("--public-url", lines[0])

    def test_the_config_s_confirm_in_browser_on_a_non_loopback_host_is_refused_likewise(self) -> None:
        path = config_file(self, confirmInBrowser=True)
        status, lines = self.serve("--http", "--host", "0.0.0.0", "--port", "0", "--config", path)
        self.assertEqual(status, serve.EXIT_USAGE)
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("publicUrl: is required", lines[0])

    def started(self, *argv: str) -> Any:
        saved = {name: os.environ.get(name) for name in ("NOTES_MCP_SECRET", "NOTES_MCP_TOKEN")}
        os.environ.update(NOTES_MCP_SECRET=SECRET, NOTES_MCP_TOKEN=ALICE_TOKEN)
        try:
            return serve.start(list(argv))
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def test_with_a_public_url_a_non_loopback_host_serves_the_pages_and_without_one_plain_http_serves_none(
        self,
    ) -> None:
        _, settings, pages, *_ = self.started(
            "--http", "--host", "0.0.0.0", "--port", "0", "--confirm-in-browser", "--public-url", PUBLIC
        )
        self.assertEqual(settings.public_url, PUBLIC)
        self.assertIsNotNone(pages)
        _, settings, pages, *_ = self.started("--http", "--host", "0.0.0.0", "--port", "0")
        self.assertIsNone(pages)  # links to http://0.0.0.0:PORT would open nowhere: URL-mode hosts get -32021
        self.assertIn("no page is served", launch.confirmation_page(settings))
        _, _, pages, *_ = self.started("--http", "--host", "127.0.0.1", "--port", "0")
        self.assertIsNotNone(pages)  # loopback: the pages as before

    def test_a_public_url_that_is_not_an_origin_is_refused_naming_the_setting(self) -> None:
        for value in (
            "notes.example.com",
            "https://notes.example.com/notes",
            "https://notes.example.com/",
            "ftp://notes.example.com",
            "https://user@notes.example.com",
            "https://notes.example.com?x=1",
            "",
        ):
            with self.subTest(value=value):
                status, lines = self.serve(
                    "--http", "--port", "0", "--public-url", value, NOTES_MCP_SECRET=SECRET, NOTES_MCP_TOKEN=ALICE_TOKEN
                )
                self.assertEqual(status, serve.EXIT_USAGE)
                self.assertEqual(len(lines), 1, lines)
                self.assertIn("--public-url: must be the address people open the pages at", lines[0])
                self.assert_refused(
                    {"principals": {"alice": {"token": ALICE_TOKEN, "workspaces": []}}, "publicUrl": value}, "publicUrl"
                )
        self.assertEqual(
            configuration.read_public_url("HTTPS://Notes.Example.com:8443", "publicUrl"),
            "https://notes.example.com:8443",
        )


if __name__ == "__main__":
    unittest.main()
