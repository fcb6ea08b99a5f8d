"""A minimal W3C WebDriver client (http.client only) driving headless Chromium through chromedriver.

Only what the browser tests need: start chromedriver on a free loopback port, open one
session, navigate, find by CSS, read text, paste into a field, click, read the source and URL, switch into a
frame, take a PNG screenshot, run a script, add a virtual WebAuthn authenticator (the W3C
WebAuthn WebDriver extension), and tear everything down (session, driver, profile dir).

Starting Chromium is most of a browser test's cost, so `shared()` keeps one browser for
the whole run and wipes it between tests (every cookie, the cache, the page, every virtual
authenticator and so its passkeys, JavaScript back on, the window back to its size): each
test starts signed out, on a blank page, with no passkey, as in a new browser. A test that
needs JavaScript off or another window size asks `shared()` for it; the same browser
switches (JavaScript through the DevTools protocol, for every page it loads after).

A module that drives the browser says so when it is loaded (its `load_tests` is `load_tests_for`'s, by file).
When its tests end, the browser is closed unless a module loaded after it will drive it too;
then it is frozen (SIGSTOP to its process group) while the modules in between run, so it
spends no CPU there, and thawed by the next `shared()`. It is closed when the last such
module ends, or when this process exits, whichever comes first.
"""

from __future__ import annotations

import atexit
import base64
import http.client
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
from collections.abc import Callable
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
WINDOW = (412, 915)  # a phone's screen (headless Chromium widens the window to its 500 px minimum)


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
            start_new_session=True,  # its own process group, with the browser it starts: frozen and thawed together
        )
        self.frozen = False
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

    def paste(self, css: str, text: str) -> None:
        """Put `text` into the top document's first field matching a CSS selector as a paste does: the field focused,
        the text inserted as one edit (through the DevTools protocol, no script in the page; typing it took a key event
        per character, about 0.2 s of CPU for a token)."""
        self.cdp("DOM.focus", {"nodeId": self._node(css)})
        self.cdp("Input.insertText", {"text": text})

    def _node(self, css: str) -> int:
        root = self.cdp("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        node = int(self.cdp("DOM.querySelector", {"nodeId": root, "selector": css})["nodeId"])
        if not node:
            raise WebDriverError(f"no such element: {css}")
        return node

    def click(self, css: str) -> None:
        """Click the top document's first element matching a CSS selector as a person does: scrolled into view, the left
        mouse button pressed and released over its centre (WebDriverError where another element covers that point).

        The mouse events go through the DevTools protocol, as chromedriver's own click sends them, without the scripts
        chromedriver runs around them: half the CPU of a WebDriver click (about 0.06 s of 0.12 s)."""
        target = self._node(css)
        self.cdp("DOM.scrollIntoViewIfNeeded", {"nodeId": target})
        quad = self.cdp("DOM.getContentQuads", {"nodeId": target})["quads"][0]
        x, y = sum(quad[0::2]) / 4, sum(quad[1::2]) / 4
        view = self.cdp("Page.getLayoutMetrics")["cssVisualViewport"]  # the hit test takes the document's coordinates
        hit = self.cdp("DOM.getNodeForLocation", {"x": round(x + view["pageX"]), "y": round(y + view["pageY"])})
        inside = _backend_ids(self.cdp("DOM.describeNode", {"nodeId": target, "depth": -1})["node"])
        if hit["backendNodeId"] not in inside:
            raise WebDriverError(f"element click intercepted: another element covers {css}")
        for kind in ("mousePressed", "mouseReleased"):
            self.cdp("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})

    def submit(self, css: str) -> None:
        """Click a form's submit button (a CSS selector) and wait until the page it leads to is the current document.

        The click returns before the navigation it starts has replaced the document. The old document's root element
        goes stale once the new one is loaded, which needs no JavaScript to see.
        """
        old_root = self.find("html")
        self.click(css)
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

    def freeze(self) -> None:
        """Stop chromedriver and the browser where they are (SIGSTOP): no CPU spent until `thaw()`."""
        if self.process is not None and not self.frozen:
            os.killpg(self.process.pid, signal.SIGSTOP)
            self.frozen = True

    def thaw(self) -> None:
        """Let a frozen chromedriver and browser run again (SIGCONT)."""
        if self.process is not None and self.frozen:
            os.killpg(self.process.pid, signal.SIGCONT)
            self.frozen = False

    def close(self) -> None:
        """Delete the session, stop chromedriver, remove the profile directory (idempotent)."""
        self.thaw()
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


def _backend_ids(node: dict[str, Any]) -> set[int]:
    """The DevTools backend ids of a described node and of everything under it."""
    return {node["backendNodeId"]}.union(*(_backend_ids(child) for child in node.get("children", [])))


_USERS: list[
    str
] = []  # the files of the test modules loaded for this run that drive the browser, in the order they run
_BROWSER: list[Driver] = []  # the run's browser, while it has one
_RELEASING: list[str] = []  # the module whose end releases the browser (a module cleanup is registered for it)


def load_tests_for(path: str) -> Callable[[unittest.TestLoader, unittest.TestSuite, str | None], unittest.TestSuite]:
    """The `load_tests` of a test module that drives the browser (`path` is its `__file__`): its tests as found, and
    the record that it runs in this run, so that a module before it leaves it the browser, frozen, instead of closing
    it."""

    def load_tests(loader: unittest.TestLoader, tests: unittest.TestSuite, pattern: str | None) -> unittest.TestSuite:
        # By file, once: a test that loads a module again in this process, under this name or a shorter one, adds
        # nothing (else the last module would leave the browser frozen to a module that has run already).
        if os.path.realpath(path) not in _USERS:
            _USERS.append(os.path.realpath(path))
        return tests

    return load_tests


def _close() -> None:
    while _BROWSER:
        _BROWSER.pop().close()


def _release(module: str) -> None:
    """The tests of the module in file `module` have ended: freeze the browser for a later module that drives it, else
    close it."""
    _RELEASING.clear()
    later = _USERS[_USERS.index(module) + 1 :] if module in _USERS else []
    if _BROWSER and later:
        _BROWSER[0].freeze()
    else:
        _close()


def shared(test: unittest.TestCase, javascript: bool = True, window: tuple[int, int] = WINDOW) -> Driver:
    """The run's browser for `test`, wiped, running pages' scripts or not, its window this size; released when `test`'s
    module ends."""
    module = os.path.realpath(inspect.getfile(type(test)))
    if _RELEASING != [module]:
        _RELEASING[:] = [module]
        unittest.addModuleCleanup(_release, module)
    if _BROWSER:
        try:
            _BROWSER[0].thaw()
            _BROWSER[0].wipe()
        except (OSError, WebDriverError):  # the last test left it unusable: a new one
            _close()
    if not _BROWSER:
        _BROWSER.append(Driver())
    driver = _BROWSER[0]
    driver.set_javascript(javascript)
    driver.set_window(window)
    return driver


atexit.register(_close)  # a run that ended early, or left out the module that would have closed it
