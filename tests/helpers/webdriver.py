"""A minimal W3C WebDriver client (http.client only) driving headless Chromium through chromedriver.

Only what the browser tests need: start chromedriver on a free loopback port, open one
session, navigate, find by CSS, read text, type, click, read the source and URL, switch into a
frame, take a PNG screenshot, run a script, add a virtual WebAuthn authenticator (the W3C
WebAuthn WebDriver extension), and tear everything down (session, driver, profile dir).

Starting Chromium is most of a browser test's cost, so `shared()` keeps one browser for
the test module that asks, and wipes it between tests (every cookie, the cache, the page,
every virtual authenticator and so its passkeys, JavaScript back on, the window back to its
size): each test starts signed out, on a blank page, with no passkey, as in a new browser.
A test that needs JavaScript off or another window size asks `shared()` for it; the same
browser switches (JavaScript through the DevTools protocol, for every page it loads after).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER_NAMES = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
ELEMENT_KEY = "element-6066-11e4-a52e-4f735466cecf"  # the W3C web element identifier
STARTUP_GUARD_SECONDS = 30.0  # only a failure guard for chromedriver to listen
COMMAND_GUARD_SECONDS = 60.0  # only a failure guard for one WebDriver command
NAVIGATION_POLL_SECONDS = 0.02  # how often submit() asks whether the new page has replaced the old
CHROME_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
    # No back/forward cache: the tests never go back, and keeping the page left in it makes
    # the next navigation start a new renderer process, about 0.1 s of CPU each time.
    "--disable-back-forward-cache",
)
WINDOW = (412, 915)  # a phone's viewport, the narrowest the pages are read in


def chromedriver() -> str | None:
    """The chromedriver executable, or None when it is not installed."""
    return next((path for path in CHROMEDRIVER_NAMES if os.access(path, os.X_OK)), None)


def available() -> bool:
    """True when both Chromium and chromedriver are installed."""
    return os.access(CHROMIUM, os.X_OK) and chromedriver() is not None


def free_port() -> int:
    """A loopback port nobody listens on right now (chromedriver cannot be told port 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class WebDriverError(Exception):
    """A WebDriver command failed: the W3C error name and message."""


class Driver:
    """chromedriver plus one browser session; `close()` ends both and removes the profile."""

    def __init__(self, window: tuple[int, int] = WINDOW) -> None:
        self.profile = tempfile.mkdtemp(prefix="webdriver-profile-")
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = subprocess.Popen(
            [chromedriver() or "chromedriver", f"--port={self.port}", "--allowed-ips=127.0.0.1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.session: str | None = None
        self.authenticators: list[str] = []  # the virtual authenticators added, which wipe() removes
        self.javascript = True
        self.window = window
        self.listening = threading.Event()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        try:
            self._wait_listening()
            options: dict[str, Any] = {
                "binary": CHROMIUM,
                "args": [*CHROME_ARGS, f"--user-data-dir={self.profile}", f"--window-size={window[0]},{window[1]}"],
            }
            value = self._command(
                "POST", "/session", {"capabilities": {"alwaysMatch": {"goog:chromeOptions": options}}}
            )
            self.session = value["sessionId"]
        except BaseException:
            self.close()
            raise

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            if b"started successfully" in line:
                self.listening.set()
        self.listening.set()  # EOF: it exited (the next command then fails loudly)

    def _wait_listening(self) -> None:
        if not self.listening.wait(STARTUP_GUARD_SECONDS) or self.process is None or self.process.poll() is not None:
            raise WebDriverError("chromedriver did not start listening")

    def _command(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=COMMAND_GUARD_SECONDS)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json; charset=utf-8"} if data is not None else {}
            conn.request(method, path, data, headers)
            response = conn.getresponse()
            payload = json.loads(response.read() or b"{}")
        finally:
            conn.close()
        value = payload.get("value")
        if response.status != 200:
            detail = value if isinstance(value, dict) else {}
            raise WebDriverError(f"{detail.get('error', response.status)}: {str(detail.get('message', ''))[:200]}")
        return value

    def _session(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        if self.session is None:
            raise WebDriverError("no session")
        return self._command(method, f"/session/{self.session}{path}", body)

    # ------------------------------------------------------------------ commands

    def get(self, url: str) -> None:
        """Navigate and wait for the page load."""
        self._session("POST", "/url", {"url": url})

    def current_url(self) -> str:
        """The top-level browsing context's URL."""
        return self._session("GET", "/url")

    def source(self) -> str:
        """The current document's serialized DOM."""
        return self._session("GET", "/source")

    def find(self, css: str) -> str:
        """The element id of the first match for a CSS selector (WebDriverError if none)."""
        return self._session("POST", "/element", {"using": "css selector", "value": css})[ELEMENT_KEY]

    def text(self, element: str) -> str:
        """An element's rendered text."""
        return self._session("GET", f"/element/{element}/text")

    def send_keys(self, element: str, text: str) -> None:
        """Type text into an element."""
        self._session("POST", f"/element/{element}/value", {"text": text})

    def click(self, element: str) -> None:
        """Click an element."""
        self._session("POST", f"/element/{element}/click", {})

    def submit(self, button: str) -> None:
        """Click a form's submit button and wait until the page it leads to is the current document.

        A click may return before the navigation it starts has replaced the document
        (chromedriver does not always wait for a form POST). The old document's root
        element goes stale once the new one is loaded, which needs no JavaScript to see.
        """
        old_root = self.find("html")
        self.click(button)
        deadline = time.monotonic() + COMMAND_GUARD_SECONDS
        while self.current_root() in (old_root, None):
            if time.monotonic() > deadline:
                raise WebDriverError("the form was submitted but no new page arrived")
            time.sleep(NAVIGATION_POLL_SECONDS)

    def current_root(self) -> str | None:
        """The current document's root element, or None while a navigation has no document yet."""
        try:
            return self.find("html")
        except WebDriverError:
            return None

    def cdp(self, command: str, params: dict[str, Any] | None = None) -> Any:
        """A Chrome DevTools Protocol command through chromedriver."""
        return self._session("POST", "/goog/cdp/execute", {"cmd": command, "params": params or {}})

    def wipe(self) -> None:
        """Back to a new browser's state: a blank top page, no cookie of any site, nothing cached, no authenticator,
        JavaScript on, the window at its first size."""
        self.switch_to_frame(None)
        self.get("about:blank")
        self.cdp("Network.clearBrowserCookies")
        self.cdp("Network.clearBrowserCache")
        while self.authenticators:  # its passkeys go with it
            self._session("DELETE", f"/webauthn/authenticator/{self.authenticators.pop()}")
        self.set_javascript(True)
        self.set_window(WINDOW)

    def set_javascript(self, enabled: bool) -> None:
        """Whether the pages loaded from now on run their scripts (`<noscript>` is shown when they do not)."""
        if enabled != self.javascript:
            self.cdp("Emulation.setScriptExecutionDisabled", {"value": not enabled})
            self.javascript = enabled

    def set_window(self, size: tuple[int, int]) -> None:
        """The window's width and height in CSS pixels."""
        if size != self.window:
            self._session("POST", "/window/rect", {"width": size[0], "height": size[1]})
            self.window = size

    def switch_to_frame(self, index: int | None) -> None:
        """Enter the index-th child frame, or the top document with None."""
        self._session("POST", "/frame", {"id": index})

    def execute(self, script: str, *args: Any) -> Any:
        """Run `script` (a function body; `arguments` holds args) in the page; its return value."""
        return self._session("POST", "/execute/sync", {"script": script, "args": list(args)})

    def execute_async(self, script: str, *args: Any) -> Any:
        """Run `script` in the page; it calls `arguments[arguments.length - 1](value)` when done; that value."""
        return self._session("POST", "/execute/async", {"script": script, "args": list(args)})

    def add_authenticator(self, user_verified: bool = True) -> str:
        """A virtual platform authenticator (CTAP2, internal, resident keys, user verification) in this session; its
        id."""
        added = str(
            self._session(
                "POST",
                "/webauthn/authenticator",
                {
                    "protocol": "ctap2",
                    "transport": "internal",
                    "hasResidentKey": True,
                    "hasUserVerification": True,
                    "isUserVerified": user_verified,
                    "automaticPresenceSimulation": True,
                },
            )
        )
        self.authenticators.append(added)
        return added

    def set_user_verified(self, authenticator: str, verified: bool) -> None:
        """Whether the virtual authenticator's user verification (fingerprint, PIN) succeeds from now on."""
        self._session("POST", f"/webauthn/authenticator/{authenticator}/uv", {"isUserVerified": verified})

    def authenticator_credentials(self, authenticator: str) -> list[dict[str, Any]]:
        """The credentials the virtual authenticator holds (id, rpId, signCount, ...)."""
        return list(self._session("GET", f"/webauthn/authenticator/{authenticator}/credentials"))

    def screenshot(self) -> bytes:
        """A PNG of the viewport."""
        return base64.b64decode(self._session("GET", "/screenshot"))

    def view(self) -> bytes:
        """The viewport's pixels as a PNG encoded for speed, not size: for comparing what is shown (a third of a
        screenshot's CPU)."""
        shot = self.cdp("Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True})
        return base64.b64decode(shot["data"])

    def close(self) -> None:
        """Delete the session, stop chromedriver, remove the profile directory (idempotent)."""
        if self.session is not None:
            try:
                self._command("DELETE", f"/session/{self.session}")
            except (OSError, WebDriverError):
                pass
            self.session = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(STARTUP_GUARD_SECONDS)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(STARTUP_GUARD_SECONDS)
            self.process.stdout.close()  # type: ignore[union-attr]
            self._reader.join(STARTUP_GUARD_SECONDS)
            self.process = None
        shutil.rmtree(self.profile, ignore_errors=True)


_SHARED: list[Driver] = []  # the current module's browser, while it has one


def _close_shared() -> None:
    while _SHARED:
        _SHARED.pop().close()


def shared(javascript: bool = True, window: tuple[int, int] = WINDOW) -> Driver:
    """The current test module's browser, wiped, running pages' scripts or not, its window this size; closed when the
    module's tests end."""
    if _SHARED:
        try:
            _SHARED[0].wipe()
        except (OSError, WebDriverError):  # the last test left it unusable: a new one
            _SHARED.pop().close()
            _SHARED.append(Driver())
    else:
        unittest.addModuleCleanup(_close_shared)
        _SHARED.append(Driver())
    driver = _SHARED[0]
    driver.set_javascript(javascript)
    driver.set_window(window)
    return driver
