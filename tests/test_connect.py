"""URL-mode elicitation: notes_publish, the connect flow and its pages (code/connect.py)."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import secrets
import unittest
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

from helpers import procs, shared_servers, support
from helpers.procs import GUARD
from helpers.support import KEY, WORKSPACE, Clock, ContractCase, Log, request, tps

import config as configuration
import connect
import main
import streamable_http
import web_pages

ALICE_TOKEN = "alice-token-0123456789abcdef"
BOB_TOKEN = "bob-token-0123456789abcdefgh"
BOB_WORKSPACE = "file:///Users/bob/Notes"
BASE = "http://127.0.0.1:5555"
BOTH: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}
URL_ONLY: dict[str, Any] = {"elicitation": {"url": {}}}
FORM_ONLY: dict[str, Any] = {"elicitation": {"form": {}}}
URL_REQUIRED: dict[str, Any] = {"requiredCapabilities": {"elicitation": {"url": {}}}}
EXPECTED_PAGE_HEADERS = {
    "content-type": "text/html; charset=utf-8",
    "x-frame-options": "DENY",
    "content-security-policy": connect.CONTENT_SECURITY_POLICY,
    "cache-control": "no-store",
    "referrer-policy": "same-origin",
}
FORM_TYPE = ("Content-Type", "application/x-www-form-urlencoded")
STYLE_RE = re.compile(r"<style>(.*?)</style>", re.S)
Send = Callable[[str, str, list[tuple[str, str]], bytes], tuple[int, list[tuple[str, str]], bytes]]


def notes() -> list[main.Note]:
    """The lesson notes plus one of bob's."""
    return main.lesson_notes() + [main.Note("bob-1", "TPS report bob", f"{BOB_WORKSPACE}/tps.md")]


def grants() -> dict[str, list[str]]:
    return {"alice": [WORKSPACE], "bob": [BOB_WORKSPACE]}


def connect_request(result: dict[str, Any]) -> dict[str, Any]:
    """The URL-mode elicitation in an input_required result."""
    return result["inputRequests"][connect.CONNECT_KEY]


def answer(action: str, key: str = connect.CONNECT_KEY, content: dict[str, Any] | None = None) -> dict[str, Any]:
    """inputResponses carrying one elicitation result."""
    result: dict[str, Any] = {"action": action}
    if content is not None:
        result["content"] = content
    return {key: result}


class Client:
    """An MCP client over any transport; keeps every message it sent and received."""

    def __init__(self, send: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.send = send
        self.wire: list[str] = []
        self.next_id = 1

    def call(self, arguments: dict[str, Any], capabilities: Any = BOTH, **extra: Any) -> dict[str, Any]:
        """tools/call notes_publish with a fresh id; the response (result or error)."""
        message = request(
            "tools/call",
            {"name": connect.TOOL_NAME, "arguments": arguments, **extra},
            id=self.next_id,
            capabilities=capabilities,
        )
        self.next_id += 1
        response = self.send(message)
        self.wire += [json.dumps(message), json.dumps(response)]
        return response

    def retry(
        self, arguments: dict[str, Any], first: dict[str, Any], responses: dict[str, Any], capabilities: Any = BOTH
    ) -> dict[str, Any]:
        """The MRTR retry of `first` (a result) with these inputResponses."""
        return self.call(arguments, capabilities, requestState=first["requestState"], inputResponses=responses)


class Browser:
    """A browser driving the pages: a cookie jar, GET, form POST; over any backend."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.jar: dict[str, str] = {}
        self.pages: list[tuple[int, dict[str, str], str]] = []
        self.set_cookies: list[str] = []  # every Set-Cookie value received

    @property
    def cookie(self) -> str | None:
        """The session cookie as sent ("connect_session=..."), or None before a sign-in."""
        value = self.jar.get(connect.SESSION_COOKIE)
        return None if value is None else f"{connect.SESSION_COOKIE}={value}"

    @cookie.setter
    def cookie(self, text: str) -> None:
        name, _, value = text.partition("=")
        self.jar[name] = value

    def open(
        self,
        method: str,
        path: str,
        fields: list[tuple[str, str]] | None = None,
        headers: list[tuple[str, str]] | None = None,
        omit: str = "",
    ) -> tuple[int, dict[str, str], str]:
        sent = list(headers or [])
        body = b""
        if fields is not None:
            body = urlencode(fields).encode("ascii")
            sent.append(FORM_TYPE)
        cookies = "; ".join(f"{name}={value}" for name, value in self.jar.items() if name != omit)
        if cookies:
            sent.append(("Cookie", cookies))
        status, raw_headers, data = self.send(method, path, sent, body)
        for name, value in raw_headers:
            if name.lower() == "set-cookie":
                self.set_cookies.append(value)
                key, _, rest = value.split(";")[0].partition("=")
                self.jar[key] = rest
        got = {name.lower(): value for name, value in raw_headers}
        page = (status, got, data.decode("utf-8"))
        self.pages.append(page)
        return page

    def get(self, path: str) -> tuple[int, dict[str, str], str]:
        return self.open("GET", path)

    def login_token(self, path: str) -> str:
        """Load the sign-in page as this browser would (without its session) and read its login token."""
        status, _, text = self.open("GET", path, omit=connect.SESSION_COOKIE)
        match = re.search(r'name="login" value="([^"]+)"', text)
        assert status == 200 and match, (status, text)
        return match.group(1)

    def sign_in(self, path: str, token: str, headers: list[tuple[str, str]] | None = None) -> int:
        """Open the sign-in page, paste the token, submit: the status of the POST."""
        login = self.login_token(path)
        return self.open("POST", f"{path}/sign-in", [("token", token), ("login", login)], headers)[0]

    def csrf(self, path: str) -> str:
        """The CSRF token from the consent page (the page must be showing it)."""
        status, _, text = self.get(path)
        match = re.search(r'name="csrf" value="([^"]+)"', text)
        assert status == 200 and match, (status, text)
        return match.group(1)

    def decide(
        self, path: str, decision: str, csrf: str | None = "from-page", headers: list[tuple[str, str]] | None = None
    ) -> int:
        """Press Allow or Deny; csrf "from-page" reads it from the page, None leaves it out."""
        fields = [("decision", decision)]
        if csrf is not None:
            fields.insert(0, ("csrf", self.csrf(path) if csrf == "from-page" else csrf))
        return self.open("POST", f"{path}/decision", fields, headers)[0]


class InProcess(unittest.TestCase):
    """The server and its pages in process, with an injected clock and a captured log."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.log = Log()
        self.server = support.server_over(notes(), self.clock, grants(), log=self.log)
        self.pages = connect.install(self.server, {"alice": ALICE_TOKEN, "bob": BOB_TOKEN}, base_url=BASE)
        self.store = self.pages.store
        self.service = self.store.service
        self.alice = Client(lambda message: support.answered(self.server, message, "alice"))
        self.bob = Client(lambda message: support.answered(self.server, message, "bob"))

    def browser(self, peer: str = "127.0.0.1") -> Browser:
        def send(
            method: str, path: str, headers: list[tuple[str, str]], body: bytes
        ) -> tuple[int, list[tuple[str, str]], bytes]:
            return self.pages.handle(method, path, support.engine_headers(headers), body, peer)

        return Browser(send)

    def first(
        self, client: Client | None = None, title: str = "TPS report 2025", capabilities: Any = BOTH
    ) -> dict[str, Any]:
        """A first call that must return the URL elicitation; its result."""
        client = client or self.alice
        workspace = BOB_WORKSPACE if client is self.bob else WORKSPACE
        result = client.call(tps(title, workspace), capabilities)["result"]
        self.assertEqual(result["resultType"], "input_required")
        return result

    def connect_path(self, result: dict[str, Any]) -> str:
        url = connect_request(result)["params"]["url"]
        self.assertTrue(url.startswith(BASE + connect.PATH_PREFIX), url)
        return url[len(BASE) :]

    def signed_in(self, path: str, token: str = ALICE_TOKEN) -> Browser:
        browser = self.browser()
        self.assertEqual(browser.sign_in(path, token), 303)
        return browser

    def retry(
        self,
        first: dict[str, Any],
        responses: dict[str, Any],
        title: str = "TPS report 2025",
        client: Client | None = None,
        capabilities: Any = BOTH,
    ) -> dict[str, Any]:
        client = client or self.alice
        workspace = BOB_WORKSPACE if client is self.bob else WORKSPACE
        return client.retry(tps(title, workspace), first, responses, capabilities)

    def secrets_seen(self, browsers: list[Browser]) -> list[str]:
        """Every credential, bearer token, session id and CSRF token the flows produced."""
        found = [ALICE_TOKEN, BOB_TOKEN]
        found += [c for c in (self.store.credential("alice"), self.store.credential("bob")) if c]
        for browser in browsers:
            found += [value.split(";")[0].split("=", 1)[1] for value in browser.set_cookies]
            for _, _, text in browser.pages:
                found += re.findall(r'name="(?:csrf|login)" value="([^"]+)"', text)
        return found


class CapabilityTests(InProcess):
    """URL mode is asked for only when declared on this very request."""

    def test_form_only_declaration_gets_the_exact_32021_naming_url_mode(self) -> None:
        capabilities: Any  # values of several types, on purpose
        for capabilities in (FORM_ONLY, {"elicitation": {}}, {}):
            with self.subTest(capabilities=capabilities):
                response = self.alice.call(tps("TPS report 2025"), capabilities)
                self.assertEqual(response["error"]["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)
                self.assertEqual(response["error"]["data"], URL_REQUIRED)
        self.assertEqual(self.service.published("alice"), [])
        self.assertFalse(any("connect flow started" in line for line in self.log))

    def test_the_capability_is_checked_before_any_lookup(self) -> None:
        unknown = self.alice.call(tps("no such note"), FORM_ONLY)["error"]
        foreign = self.alice.call(tps("TPS", BOB_WORKSPACE), FORM_ONLY)["error"]
        self.assertEqual(unknown, foreign)
        self.assertEqual(unknown["data"], URL_REQUIRED)

    def test_an_earlier_url_declaration_counts_for_nothing(self) -> None:
        self.first()
        response = self.alice.call(tps("TPS report 2025"), FORM_ONLY)
        self.assertEqual(response["error"]["data"], URL_REQUIRED)

    def test_a_retry_that_needs_the_link_again_without_declaring_url_gets_32021(self) -> None:
        first = self.first()
        response = self.retry(first, answer("accept"), capabilities=FORM_ONLY)
        self.assertEqual(response["error"]["code"], main.MISSING_REQUIRED_CLIENT_CAPABILITY)
        self.assertEqual(response["error"]["data"], URL_REQUIRED)
        self.assertEqual(self.retry(first, answer("accept"))["result"]["resultType"], "input_required")

    def test_a_connected_principal_needs_no_url_mode(self) -> None:
        path = self.connect_path(self.first())
        self.assertEqual(self.signed_in(path).decide(path, "allow"), 200)
        result = self.alice.call(tps("TPS report 2023"), {})["result"]
        self.assertEqual(result["structuredContent"], {"published": True, "noteId": "note-3", "reportId": "report-1"})


class ScopeTests(InProcess):
    """notes_publish scopes exactly like notes_delete and asks which note with a form."""

    def test_tools_list_describes_both_tools(self) -> None:
        tools = support.answered(self.server, request("tools/list"), "alice")["result"]["tools"]
        self.assertEqual([tool["name"] for tool in tools], [main.TOOL_NAME, connect.TOOL_NAME])
        self.assertEqual(tools[1]["inputSchema"], main.NOTES_DELETE_TOOL["inputSchema"])
        self.assertFalse(tools[1]["annotations"]["destructiveHint"])

    def test_bad_arguments_are_an_is_error_result_naming_notes_publish(self) -> None:
        result = self.alice.call({"workspaceUri": WORKSPACE})["result"]
        self.assertIs(result["isError"], True)
        self.assertIn(connect.TOOL_NAME, result["content"][0]["text"])
        self.assertNotIn(main.TOOL_NAME, result["content"][0]["text"])
        self.assertEqual(self.log.count("connect flow started for principal 'alice'"), 0)

    def test_unauthorized_and_escaping_workspaces_are_errors_that_start_no_flow(self) -> None:
        for workspace in (
            BOB_WORKSPACE,
            "file:///Users/alice/Documents/Notes-evil",
            f"{WORKSPACE}/%2e%2e/Notes-evil",
            "https://x/",
        ):
            with self.subTest(workspace=workspace):
                result = self.alice.call(tps("TPS", workspace))["result"]
                self.assertTrue(result["isError"])
        self.assertEqual(self.log.count("connect flow started for principal 'alice'"), 0)

    def test_look_alikes_outside_the_workspace_are_never_offered(self) -> None:
        result = self.alice.call(tps("TPS report"))["result"]
        options = result["inputRequests"][connect.CHOICE_KEY]["params"]["requestedSchema"]["properties"]["note_id"][
            "oneOf"
        ]
        self.assertEqual([option["const"] for option in options], ["note-3", "note-7", "note-14"])

    def test_several_matches_ask_which_note_with_a_form_when_form_is_declared(self) -> None:
        result = self.alice.call(tps("TPS report"))["result"]
        self.assertEqual(list(result["inputRequests"]), [connect.CHOICE_KEY])
        params = result["inputRequests"][connect.CHOICE_KEY]["params"]
        self.assertEqual(params["mode"], "form")
        self.assertEqual(params["requestedSchema"]["required"], ["note_id"])
        self.assertFalse(any("connect flow started" in line for line in self.log))

    def test_several_matches_without_form_mode_are_an_error_asking_for_one_title(self) -> None:
        result = self.alice.call(tps("TPS report"), URL_ONLY)["result"]
        self.assertTrue(result["isError"])
        self.assertIn("3 notes match", result["content"][0]["text"])

    def test_choosing_a_note_leads_to_the_connect_link_for_that_note(self) -> None:
        first = self.alice.call(tps("TPS report"))["result"]
        second = self.retry(first, answer("accept", connect.CHOICE_KEY, {"note_id": "note-7"}), "TPS report")["result"]
        path = self.connect_path(second)
        self.assertEqual(self.signed_in(path).decide(path, "allow"), 200)
        done = self.retry(second, answer("accept"), "TPS report")["result"]
        self.assertEqual(done["structuredContent"]["noteId"], "note-7")

    def test_a_choice_outside_the_form_is_invalid_params_and_the_state_stays_usable(self) -> None:
        first = self.alice.call(tps("TPS report"))["result"]
        for content in ({"note_id": "evil-1"}, {"note_id": 7}, {}):
            with self.subTest(content=content):
                error = self.retry(first, answer("accept", connect.CHOICE_KEY, content), "TPS report")["error"]
                self.assertEqual(error["code"], main.INVALID_PARAMS)
        again = self.retry(first, answer("accept", connect.CHOICE_KEY, {"note_id": "note-3"}), "TPS report")["result"]
        self.assertIn(connect.CONNECT_KEY, again["inputRequests"])

    def test_a_notes_delete_state_is_refused_by_notes_publish(self) -> None:
        delete = support.answered(self.server, support.call(tps()), "alice")["result"]
        error = self.retry(delete, answer("accept", connect.CHOICE_KEY, {"note_id": "note-3"}), "TPS report")["error"]
        self.assertEqual(error["code"], main.INVALID_PARAMS)
        self.assertEqual(self.service.published("alice"), [])


class UrlElicitationTests(InProcess):
    """What the client is sent: a plain URL-mode request and a signed state."""

    def test_the_url_request_has_exactly_the_2026_07_28_fields(self) -> None:
        result = self.first()
        request_ = connect_request(result)
        self.assertEqual(request_["method"], "elicitation/create")
        self.assertEqual(set(request_["params"]), {"mode", "message", "url"})
        self.assertEqual(request_["params"]["mode"], "url")
        self.assertEqual(request_["params"]["message"], connect.CONNECT_MESSAGE)
        handle = urlsplit(request_["params"]["url"]).path.rsplit("/", 1)[1]
        self.assertTrue(web_pages.is_handle(handle))
        self.assertIsInstance(result["requestState"], str)

    def test_the_state_is_signed_and_carries_the_flow_handle_and_bindings(self) -> None:
        result = self.first()
        claims = self.server.services.signer.verify(result["requestState"])
        handle = self.connect_path(result).rsplit("/", 1)[1]
        self.assertEqual(claims["extra"]["flow"], handle)
        self.assertEqual(
            (claims["sub"], claims["tool"], claims["phase"]), ("alice", connect.TOOL_NAME, connect.PHASE_CONNECT)
        )
        self.assertLess(self.clock.now, claims["exp"])

    def test_each_flow_gets_a_new_random_handle(self) -> None:
        urls = {connect_request(self.first())["params"]["url"] for _ in range(5)}
        self.assertEqual(len(urls), 5)

    def test_a_state_presented_by_bob_or_for_other_arguments_is_refused(self) -> None:
        first = self.first()
        self.assertEqual(self.retry(first, answer("accept"), client=self.bob)["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(
            self.retry(first, answer("accept"), title="TPS report 2023")["error"]["code"], main.INVALID_PARAMS
        )


class AtMostOnce(InProcess):
    """One consent, one flow, at most one publication: every state of a finished flow is refused."""

    def allow(self, result: dict[str, Any]) -> None:
        path = self.connect_path(result)
        self.assertEqual(self.signed_in(path).decide(path, "allow"), 200)

    def assert_refused(self, response: dict[str, Any]) -> None:
        self.assertEqual(response["error"], {"code": main.INVALID_PARAMS, "message": main.STATE_INVALID})

    def test_answer_less_retries_after_allow_publish_once_and_then_every_state_is_refused(self) -> None:
        first = self.first()
        self.allow(first)
        done = self.retry(first, {})["result"]  # no answer: the server's own record says connected
        self.assertEqual(done["structuredContent"]["reportId"], "report-1")
        for responses in ({}, {}, answer("accept")):
            self.assert_refused(self.retry(first, responses))
        self.assertEqual([r["reportId"] for r in self.service.published("alice")], ["report-1"])

    def test_an_earlier_state_of_the_same_flow_cannot_publish_again(self) -> None:
        first = self.first()
        second = self.retry(first, answer("accept"))["result"]  # accepted before the page was finished
        self.assertEqual(connect_request(second), connect_request(first))
        self.allow(second)
        self.assertTrue(self.retry(second, answer("accept"))["result"]["structuredContent"]["published"])
        self.assert_refused(self.retry(first, answer("accept")))
        self.assertEqual(len(self.service.published("alice")), 1)

    def test_the_choice_forms_state_is_consumed_with_the_flow_it_started(self) -> None:
        choice = self.alice.call(tps("TPS report"))["result"]
        connect_state = self.retry(choice, answer("accept", connect.CHOICE_KEY, {"note_id": "note-14"}), "TPS report")[
            "result"
        ]
        self.allow(connect_state)
        done = self.retry(connect_state, answer("accept"), "TPS report")["result"]
        self.assertEqual(done["structuredContent"]["noteId"], "note-14")
        self.assert_refused(
            self.retry(choice, answer("accept", connect.CHOICE_KEY, {"note_id": "note-7"}), "TPS report")
        )
        self.assertEqual([r["noteId"] for r in self.service.published("alice")], ["note-14"])

    def test_a_denial_on_the_page_ends_the_flow_for_every_state_it_issued(self) -> None:
        first = self.first()
        second = self.retry(first, answer("accept"))["result"]
        path = self.connect_path(second)
        self.assertEqual(self.signed_in(path).decide(path, "deny"), 200)
        self.assertEqual(self.retry(second, answer("accept"))["result"]["structuredContent"]["reason"], "denied")
        self.assert_refused(self.retry(first, answer("accept")))
        self.assertEqual(self.service.published("alice"), [])

    def test_a_flow_past_its_expiry_is_refused_even_after_allow(self) -> None:
        first = self.first()
        self.allow(first)
        self.clock.now += main.DEFAULT_STATE_TTL_SECONDS
        self.assert_refused(self.retry(first, answer("accept")))
        self.assertEqual(self.service.published("alice"), [])


class RetryTests(InProcess):
    """accept only means "the user agreed to open the page"; the server reads its own record."""

    def test_the_full_publish_flow_publishes_once_for_this_principal(self) -> None:
        first = self.first()
        path = self.connect_path(first)
        browser = self.browser()
        status, _, text = browser.get(path)
        self.assertEqual(status, 200)
        self.assertIn("Sign in", text)
        self.assertEqual(browser.sign_in(path, ALICE_TOKEN), 303)
        status, _, text = browser.get(path)
        self.assertIn("<strong>alice</strong>", text)
        self.assertIn(connect.SERVICE_NAME, text)
        self.assertEqual(browser.decide(path, "allow"), 200)
        result = self.retry(first, answer("accept"))["result"]
        self.assertEqual(result["resultType"], "complete")
        self.assertEqual(result["structuredContent"], {"published": True, "noteId": "note-14", "reportId": "report-1"})
        self.assertEqual([r["noteId"] for r in self.service.published("alice")], ["note-14"])
        self.assertEqual(self.service.published("bob"), [])
        replay = self.retry(first, answer("accept"))
        self.assertEqual(replay["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(len(self.service.published("alice")), 1)

    def test_accept_before_the_page_is_finished_asks_again_for_the_same_link(self) -> None:
        first = self.first()
        second = self.retry(first, answer("accept"))["result"]
        self.assertEqual(second["resultType"], "input_required")
        self.assertEqual(connect_request(second), connect_request(first))
        # Asked again within one flow: the same nonce and expiry, so one outcome consumes both.
        signer = self.server.services.signer
        self.assertEqual(signer.verify(second["requestState"])["nonce"], signer.verify(first["requestState"])["nonce"])
        self.assertEqual(self.service.published("alice"), [])
        path = self.connect_path(second)
        self.signed_in(path).decide(path, "allow")
        self.assertTrue(self.retry(second, answer("accept"))["result"]["structuredContent"]["published"])

    def test_a_missing_answer_asks_again_for_the_same_link(self) -> None:
        first = self.first()
        again = self.retry(first, {"unrelated": {"action": "accept"}})["result"]
        self.assertEqual(connect_request(again), connect_request(first))

    def test_a_flow_keeps_its_first_expiry_and_a_new_call_after_it_gets_a_fresh_link(self) -> None:
        first = self.first()
        self.clock.now += 250
        again = self.retry(first, answer("accept"))["result"]  # asked again: same link, same expiry
        self.assertEqual(connect_request(again), connect_request(first))
        self.clock.now += main.DEFAULT_STATE_TTL_SECONDS - 250  # the flow's state has expired
        self.assertEqual(self.retry(again, answer("accept"))["error"]["code"], main.INVALID_PARAMS)
        self.clock.now += connect.FLOW_TTL_SECONDS  # and its link too
        fresh = self.first()
        self.assertNotEqual(connect_request(fresh)["params"]["url"], connect_request(first)["params"]["url"])
        self.assertEqual(self.browser().get(self.connect_path(first))[0], 404)
        self.assertEqual(self.browser().get(self.connect_path(fresh))[0], 200)
        self.assertEqual(self.service.published("alice"), [])

    def test_decline_completes_with_nothing_published_and_is_terminal(self) -> None:
        first = self.first()
        path = self.connect_path(first)
        result = self.retry(first, answer("decline"))["result"]
        self.assertEqual(result["structuredContent"], {"published": False, "reason": "declined"})
        self.assertFalse(result["isError"])
        self.assertEqual(self.retry(first, answer("accept"))["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(self.browser().get(path)[0], 404)  # the link died with the request
        self.assertEqual(self.service.published("alice"), [])
        self.assertIsNone(self.store.credential("alice"))

    def test_cancel_completes_with_nothing_published_and_leaves_the_state_usable(self) -> None:
        first = self.first()
        result = self.retry(first, answer("cancel"))["result"]
        self.assertEqual(result["structuredContent"], {"published": False, "reason": "cancelled"})
        self.assertEqual(self.service.published("alice"), [])
        path = self.connect_path(first)
        self.assertEqual(self.signed_in(path).decide(path, "allow"), 200)
        self.assertTrue(self.retry(first, answer("accept"))["result"]["structuredContent"]["published"])

    def test_deny_on_the_page_leads_to_a_completed_not_published(self) -> None:
        first = self.first()
        path = self.connect_path(first)
        self.assertEqual(self.signed_in(path).decide(path, "deny"), 200)
        result = self.retry(first, answer("accept"))["result"]
        self.assertEqual(result["resultType"], "complete")
        self.assertEqual(result["structuredContent"], {"published": False, "reason": "denied"})
        self.assertIsNone(self.store.credential("alice"))
        self.assertEqual(self.service.published("alice"), [])
        self.assertEqual(self.retry(first, answer("accept"))["error"]["code"], main.INVALID_PARAMS)

    def test_decline_and_cancel_on_the_choice_form_publish_nothing(self) -> None:
        first = self.alice.call(tps("TPS report"))["result"]
        cancelled = self.retry(first, answer("cancel", connect.CHOICE_KEY), "TPS report")["result"]
        self.assertEqual(cancelled["structuredContent"]["reason"], "cancelled")
        declined = self.retry(first, answer("decline", connect.CHOICE_KEY), "TPS report")["result"]
        self.assertEqual(declined["structuredContent"]["reason"], "declined")
        self.assertEqual(
            self.retry(first, answer("decline", connect.CHOICE_KEY), "TPS report")["error"]["code"], main.INVALID_PARAMS
        )
        self.assertEqual(self.service.published("alice"), [])

    def test_a_note_changed_after_the_link_was_sent_is_not_published(self) -> None:
        first = self.first()
        path = self.connect_path(first)
        self.signed_in(path).decide(path, "allow")
        self.server.services.notes.put(main.Note("note-14", "TPS report 2025", f"{WORKSPACE}/tps-2025.md", revision=1))
        result = self.retry(first, answer("accept"))["result"]
        self.assertTrue(result["isError"])
        self.assertEqual(self.service.published("alice"), [])

    def test_a_malformed_answer_is_invalid_params(self) -> None:
        first = self.first()
        for bad in ("accept", {"action": "maybe"}, {}):
            with self.subTest(bad=bad):
                self.assertEqual(self.retry(first, {connect.CONNECT_KEY: bad})["error"]["code"], main.INVALID_PARAMS)


class PageBindingTests(InProcess):
    """The URL alone grants nothing: only the flow's principal, signed in, with CSRF, decides."""

    def test_the_link_alone_shows_only_a_sign_in_form_naming_nobody(self) -> None:
        status, headers, text = self.browser().get(self.connect_path(self.first()))
        self.assertEqual(status, 200)
        self.assertIn('type="password" name="token"', text)
        self.assertNotIn("alice", text)
        self.assertNotIn("TPS report", text)
        self.assertTrue(headers["set-cookie"].startswith(f"{connect.LOGIN_COOKIE}="))  # a pre-session, not a session
        self.assertNotIn(connect.SESSION_COOKIE, headers["set-cookie"])

    def test_a_wrong_token_is_refused_without_a_session(self) -> None:
        path = self.connect_path(self.first())
        browser = self.browser()
        for token in ("wrong-token-0123456789abcdef", "", ALICE_TOKEN + "x"):
            with self.subTest(token=token):
                self.assertEqual(browser.sign_in(path, token), 403)
        self.assertIsNone(browser.cookie)

    def test_past_the_free_guesses_a_peers_wrong_sign_ins_wait_and_its_right_token_signs_in(self) -> None:
        path = self.connect_path(self.first())
        guesser = self.browser("192.0.2.7")
        for k in range(streamable_http.MAX_FREE_GUESSES):
            self.assertEqual(guesser.sign_in(path, f"wrong-token-{k}"), 403)
        self.assertEqual(guesser.sign_in(path, "wrong-token-again"), 429)
        self.assertIn("Too many wrong tokens", guesser.pages[-1][2])
        self.assertIsNone(guesser.cookie)
        neighbour = self.browser("192.0.2.7")  # the same address: one machine, or behind one proxy
        self.assertEqual(neighbour.sign_in(path, ALICE_TOKEN), 303)
        self.assertIsNotNone(neighbour.cookie)
        self.assertIsNone(guesser.cookie)

    def test_the_session_cookie_is_http_only_strict_and_new_at_every_sign_in(self) -> None:
        path = self.connect_path(self.first())
        browser = self.browser()
        browser.sign_in(path, ALICE_TOKEN)
        cookie = browser.pages[-1][1]["set-cookie"]
        self.assertTrue(cookie.startswith(f"{connect.SESSION_COOKIE}="))
        for attribute in ("HttpOnly", "SameSite=Strict", f"Path={connect.PATH_PREFIX}"):
            self.assertIn(attribute, cookie)
        old = browser.cookie
        assert old is not None  # signed in
        browser.sign_in(path, ALICE_TOKEN)
        self.assertNotEqual(browser.cookie, old)
        stale = self.browser()
        stale.cookie = old
        self.assertIn("Sign in", stale.get(path)[2])  # the replaced session is gone

    def test_a_browser_chosen_session_id_is_never_accepted(self) -> None:
        path = self.connect_path(self.first())
        browser = self.browser()
        browser.cookie = f"{connect.SESSION_COOKIE}={secrets.token_urlsafe(32)}"
        self.assertIn("Sign in", browser.get(path)[2])
        self.assertEqual(browser.decide(path, "allow", csrf="x"), 403)
        self.assertIsNone(self.store.credential("alice"))

    def test_bob_cannot_complete_alices_flow(self) -> None:
        alice_path = self.connect_path(self.first())
        self.assertEqual(self.browser().sign_in(alice_path, BOB_TOKEN), 403)
        bob_path = self.connect_path(self.first(self.bob, "TPS report bob"))
        bob = self.signed_in(bob_path, BOB_TOKEN)
        bob_csrf = bob.csrf(bob_path)
        self.assertEqual(bob.get(alice_path)[0], 403)
        self.assertEqual(bob.decide(alice_path, "allow", csrf=bob_csrf), 403)
        self.assertEqual(bob.decide(alice_path, "deny", csrf=bob_csrf), 403)
        self.assertIsNone(self.store.credential("alice"))
        self.assertIsNone(self.store.credential("bob"))
        self.assertEqual(self.signed_in(alice_path).decide(alice_path, "allow"), 200)  # still alice's to finish
        self.assertIsNone(self.store.credential("bob"))

    def test_missing_or_wrong_csrf_token_is_refused_and_stores_nothing(self) -> None:
        path = self.connect_path(self.first())
        browser = self.signed_in(path)
        real = browser.csrf(path)
        for csrf in (None, "", real[:-1], real + "x", "é"):
            with self.subTest(csrf=csrf):
                self.assertEqual(browser.decide(path, "allow", csrf=csrf), 403)
        self.assertIsNone(self.store.credential("alice"))
        self.assertEqual(browser.decide(path, "allow", csrf=real), 200)

    def test_a_form_posted_from_another_origin_is_refused(self) -> None:
        path = self.connect_path(self.first())
        browser = self.signed_in(path)
        csrf = browser.csrf(path)
        for origin in ("https://evil.example", "null", BASE + ".evil.example"):
            with self.subTest(origin=origin):
                self.assertEqual(browser.decide(path, "allow", csrf=csrf, headers=[("Origin", origin)]), 403)
        self.assertIsNone(self.store.credential("alice"))
        self.assertEqual(browser.decide(path, "allow", csrf=csrf, headers=[("Origin", BASE)]), 200)

    def test_replayed_forged_and_malformed_handles_are_refused(self) -> None:
        path = self.connect_path(self.first())
        browser = self.signed_in(path)
        csrf = browser.csrf(path)
        self.assertEqual(browser.decide(path, "allow", csrf=csrf), 200)
        credential = self.store.credential("alice")
        self.assertEqual(browser.get(path)[0], 404)  # replayed: the link was used
        self.assertEqual(browser.decide(path, "deny", csrf=csrf), 404)
        self.assertEqual(self.store.credential("alice"), credential)
        forged = f"{connect.PATH_PREFIX}{secrets.token_urlsafe(32)}"
        for bad in (
            forged,
            path[:-1],
            path + "A",
            f"{connect.PATH_PREFIX}..%2f",
            f"{path}/other",
            f"{path}/",
            f"{path}/sign-in/x",
        ):
            with self.subTest(path=bad):
                self.assertEqual(browser.get(bad)[0], 404)

    def test_an_expired_handle_is_refused(self) -> None:
        path = self.connect_path(self.first())
        browser = self.signed_in(path)
        csrf = browser.csrf(path)
        self.clock.now += connect.FLOW_TTL_SECONDS
        self.assertEqual(browser.get(path)[0], 404)
        self.assertEqual(browser.decide(path, "allow", csrf=csrf), 404)
        self.assertIsNone(self.store.credential("alice"))

    def test_wrong_methods_and_media_types_are_refused(self) -> None:
        path = self.connect_path(self.first())
        browser = self.signed_in(path)
        self.assertEqual(browser.open("POST", path, [])[0], 405)
        self.assertEqual(browser.open("GET", f"{path}/decision")[0], 405)
        self.assertEqual(browser.open("DELETE", path)[0], 405)
        status = self.pages.handle("POST", f"{path}/sign-in", [("content-type", "application/json")], b'{"token":"x"}')[
            0
        ]
        self.assertEqual(status, 415)

    def test_every_page_is_escaped_plain_html_with_the_security_headers(self) -> None:
        self.server = support.server_over(notes(), self.clock, {"<b>eve</b>": [WORKSPACE]}, log=self.log)
        pages = connect.install(self.server, {"<b>eve</b>": ALICE_TOKEN}, base_url=BASE)
        self.pages = pages
        eve = Client(lambda message: support.answered(self.server, message, "<b>eve</b>"))
        path = self.connect_path(eve.call(tps("TPS report 2025"))["result"])
        browser = self.signed_in(path)
        browser.decide(path, "allow")
        browser.get(path)
        browser.get("/connect/nope")
        texts = [text for _, _, text in browser.pages]
        self.assertTrue(any("&lt;b&gt;eve&lt;/b&gt;" in text for text in texts))
        for status, headers, text in browser.pages:
            with self.subTest(status=status):
                for name, value in EXPECTED_PAGE_HEADERS.items():
                    self.assertEqual(headers[name], value)
                self.assertNotIn("<b>eve", text)
                self.assertNotRegex(text, r"(src|href)=")  # no external resources, no links


class ReadablePageTests(InProcess):
    """A person can tell what is asked, by whom, what Allow means and which token to paste."""

    def test_the_consent_page_names_service_principal_tool_and_note_and_says_the_connection_stands(self) -> None:
        path = self.connect_path(self.first())
        text = self.signed_in(path).get(path)[2]
        for part in (
            "<strong>alice</strong>",
            f"<strong>{connect.SERVICE_NAME}</strong>",
            f"<strong>{connect.TOOL_NAME}</strong>",
            "&ldquo;TPS report 2025&rdquo;",
            "standing connection",
            "until you disconnect it",
        ):
            self.assertIn(part, text)
        self.assertNotIn("Disconnect</button>", text)  # nothing to disconnect yet

    def test_the_sign_in_page_says_which_token_to_paste(self) -> None:
        text = self.browser().get(self.connect_path(self.first()))[2]
        self.assertIn("bearer token this server's operator gave you for MCP", text)
        self.assertIn("the same token your MCP client sends", text)

    def test_a_flow_started_without_request_details_still_renders(self) -> None:
        handle = self.store.start_flow("alice")
        self.assertIsNotNone(handle)
        path = f"{connect.PATH_PREFIX}{handle}"
        text = self.signed_in(path).get(path)[2]
        self.assertIn(f"<strong>{connect.TOOL_NAME}</strong> to publish a note", text)

    def test_the_only_style_is_inline_and_pinned_by_its_hash_in_the_csp(self) -> None:
        text = self.browser().get(self.connect_path(self.first()))[2]
        styles = STYLE_RE.findall(text)
        self.assertEqual(styles, [connect.STYLE])
        digest = base64.b64encode(hashlib.sha256(styles[0].encode()).digest()).decode()
        self.assertIn(f"style-src 'sha256-{digest}'", connect.CONTENT_SECURITY_POLICY)
        for loose in ("unsafe-inline", "http:", "https:", "*", "script-src"):
            self.assertNotIn(loose, connect.CONTENT_SECURITY_POLICY)
        self.assertIn("default-src 'none'", connect.CONTENT_SECURITY_POLICY)
        self.assertIn('name="viewport"', text)


class LoginCsrfTests(InProcess):
    """The sign-in form needs a login token bound to this browser's pre-session cookie and this link."""

    def test_a_sign_in_without_a_matching_login_token_is_refused_and_makes_no_session(self) -> None:
        path = self.connect_path(self.first())
        other_path = self.connect_path(self.first(title="TPS report 2024"))
        browser, other = self.browser(), self.browser()
        login, foreign = browser.login_token(path), other.login_token(path)
        for fields in (
            [("token", ALICE_TOKEN)],
            [("token", ALICE_TOKEN), ("login", foreign)],
            [("token", ALICE_TOKEN), ("login", login + "0")],
        ):
            with self.subTest(fields=fields):
                self.assertEqual(browser.open("POST", f"{path}/sign-in", fields)[0], 403)
        self.assertEqual(
            browser.open("POST", f"{other_path}/sign-in", [("token", ALICE_TOKEN), ("login", login)])[0], 403
        )
        cookieless = self.browser()
        self.assertEqual(cookieless.open("POST", f"{path}/sign-in", [("token", ALICE_TOKEN), ("login", login)])[0], 403)
        self.assertIsNone(browser.cookie)
        self.assertIsNone(cookieless.cookie)
        self.assertEqual(browser.open("POST", f"{path}/sign-in", [("token", ALICE_TOKEN), ("login", login)])[0], 303)

    def test_origin_null_is_refused_with_an_html_page_and_an_absent_origin_is_left_to_the_tokens(self) -> None:
        path = self.connect_path(self.first())
        browser = self.browser()
        self.assertEqual(browser.sign_in(path, ALICE_TOKEN, [("Origin", "null")]), 403)
        self.assertIsNone(browser.cookie)
        status, headers, text = browser.pages[-1]
        self.assertIn("Origin: null", text)
        for name, value in EXPECTED_PAGE_HEADERS.items():
            self.assertEqual(headers[name], value)
        self.assertEqual(browser.sign_in(path, ALICE_TOKEN, [("Origin", BASE)]), 303)
        csrf = browser.csrf(path)
        self.assertEqual(browser.decide(path, "allow", csrf=csrf, headers=[("Origin", "null")]), 403)
        self.assertIsNone(self.store.credential("alice"))
        self.assertEqual(browser.decide(path, "allow", csrf=csrf), 200)  # no Origin at all: the CSRF token decides


class DisconnectTests(InProcess):
    """Allow is a standing connection; Disconnect (POST with CSRF) removes and revokes it."""

    def connected(self) -> tuple[str, Browser, str]:
        path = self.connect_path(self.first())
        browser = self.signed_in(path)
        self.assertEqual(browser.decide(path, "allow"), 200)
        return path, browser, re.findall(r'name="csrf" value="([^"]+)"', browser.pages[-1][2])[0]

    def test_the_connected_page_offers_disconnect_and_disconnect_revokes_and_the_next_publish_asks_again(self) -> None:
        path, browser, csrf = self.connected()
        self.assertIn(f'action="{connect.DISCONNECT_PATH}"', browser.pages[-1][2])
        credential = self.store.credential("alice")
        assert credential is not None  # connected
        self.assertTrue(self.alice.call(tps("TPS report 2023"), {})["result"]["structuredContent"]["published"])
        status, _, text = browser.open("POST", connect.DISCONNECT_PATH, [("csrf", csrf)])
        self.assertEqual((status, "no longer connected" in text), (200, True))
        self.assertIsNone(self.store.credential("alice"))
        with self.assertRaises(PermissionError):
            self.service.publish(credential, main.lesson_notes()[0])  # revoked at the service too
        self.assertEqual(len(self.service.published("alice")), 1)
        self.assertEqual(self.first()["resultType"], "input_required")
        self.assertTrue(any("disconnected" in line for line in self.log))

    def test_disconnect_without_session_or_csrf_or_by_get_changes_nothing(self) -> None:
        _, browser, csrf = self.connected()
        credential = self.store.credential("alice")
        self.assertEqual(browser.open("POST", connect.DISCONNECT_PATH, [("csrf", csrf + "x")])[0], 403)
        self.assertEqual(browser.open("POST", connect.DISCONNECT_PATH, [])[0], 403)
        self.assertEqual(
            browser.open("POST", connect.DISCONNECT_PATH, [("csrf", csrf)], [("Origin", "https://evil.example")])[0],
            403,
        )
        self.assertEqual(self.browser().open("POST", connect.DISCONNECT_PATH, [("csrf", csrf)])[0], 403)
        self.assertEqual(browser.open("GET", connect.DISCONNECT_PATH)[0], 405)
        self.assertEqual(self.store.credential("alice"), credential)

    def test_bobs_disconnect_leaves_alice_connected(self) -> None:
        self.connected()
        bob_path = self.connect_path(self.first(self.bob, "TPS report bob"))
        bob = self.signed_in(bob_path, BOB_TOKEN)
        status, _, text = bob.open("POST", connect.DISCONNECT_PATH, [("csrf", bob.csrf(bob_path))])
        self.assertEqual((status, "nothing was changed" in text), (200, True))
        self.assertIsNotNone(self.store.credential("alice"))

    def test_the_consent_page_of_a_connected_principal_offers_disconnect_and_a_new_allow_revokes_the_old_credential(
        self,
    ) -> None:
        _, _, _ = self.connected()
        old = self.store.credential("alice")
        assert old is not None  # connected
        handle = self.store.start_flow("alice", connect.TOOL_NAME, "TPS report 2024")
        path = f"{connect.PATH_PREFIX}{handle}"
        browser = self.signed_in(path)
        self.assertIn("Disconnect</button>", browser.get(path)[2])
        self.assertEqual(browser.decide(path, "allow"), 200)
        self.assertNotEqual(self.store.credential("alice"), old)
        with self.assertRaises(PermissionError):
            self.service.publish(old, main.lesson_notes()[0])


class RefusalPageTests(unittest.TestCase):
    """ConnectPages.refusal: any status and message as a complete, escaped page with the page headers."""

    def test_refusal_is_an_html_page_with_the_page_headers_for_every_status(self) -> None:
        for status in (400, 403, 413, 431, 599):
            with self.subTest(status=status):
                code, headers, body = connect.ConnectPages.refusal(status, "<b>no</b> & more")
                self.assertEqual(code, status)
                got = {name.lower(): value for name, value in headers}
                for name, value in EXPECTED_PAGE_HEADERS.items():
                    self.assertEqual(got[name], value)
                text = body.decode("utf-8")
                self.assertTrue(text.startswith("<!DOCTYPE html>"))
                self.assertIn("&lt;b&gt;no&lt;/b&gt; &amp; more", text)
                self.assertNotIn("<b>no", text)

    def test_refusal_is_the_same_for_the_same_input(self) -> None:
        self.assertEqual(connect.ConnectPages.refusal(403, "x"), connect.ConnectPages.refusal(403, "x"))


class SecretTests(InProcess):
    """The credential stays server-side: never in an MCP message, a URL, a log line or a later page."""

    def test_no_mcp_message_or_log_line_contains_any_credential_or_session_secret(self) -> None:
        browsers = []
        # Choose, connect, accept too early, allow, publish; then bob: deny; then a cancel and a decline.
        first = self.alice.call(tps("TPS report"))["result"]
        second = self.retry(first, answer("accept", connect.CHOICE_KEY, {"note_id": "note-3"}), "TPS report")["result"]
        path = self.connect_path(second)
        self.retry(second, answer("accept"), "TPS report")
        browsers.append(self.signed_in(path))
        browsers[-1].decide(path, "allow")
        self.assertTrue(self.retry(second, answer("accept"), "TPS report")["result"]["structuredContent"]["published"])
        self.alice.call(tps("TPS report 2025"), {})
        bob_first = self.first(self.bob, "TPS report bob")
        bob_path = self.connect_path(bob_first)
        browsers.append(self.signed_in(bob_path, BOB_TOKEN))
        browsers[-1].decide(bob_path, "deny")
        self.retry(bob_first, answer("accept"), "TPS report bob", client=self.bob)
        again = self.first(self.bob, "TPS report bob")
        self.retry(again, answer("cancel"), "TPS report bob", client=self.bob)
        self.retry(again, answer("decline"), "TPS report bob", client=self.bob)
        found = self.secrets_seen(browsers)
        credential = self.store.credential("alice")
        self.assertIsNotNone(credential)
        self.assertIn(credential, found)
        wire = "\n".join(self.alice.wire + self.bob.wire)
        log = "\n".join(self.log)
        pages_after_allow = "\n".join(text for browser in browsers for _, _, text in browser.pages)
        for secret in found:
            self.assertNotIn(secret, wire)
            self.assertNotIn(secret, log)
        self.assertNotIn(credential, pages_after_allow)
        self.assertEqual(len(self.alice.wire) + len(self.bob.wire), 2 * (self.alice.next_id - 1 + self.bob.next_id - 1))

    def test_only_the_server_holds_the_credential_and_the_service_accepts_only_it(self) -> None:
        path = self.connect_path(self.first())
        self.signed_in(path).decide(path, "allow")
        with self.assertRaises(PermissionError):
            self.service.publish("forged-credential", main.lesson_notes()[0])


class LimitTests(InProcess):
    """Every connect-flow limit, on both sides."""

    def test_flow_ttl_just_inside_and_at_the_limit(self) -> None:
        path = self.connect_path(self.first())
        self.clock.now += connect.FLOW_TTL_SECONDS - 0.001
        self.assertEqual(self.browser().get(path)[0], 200)
        self.clock.now += 0.001
        self.assertEqual(self.browser().get(path)[0], 404)

    def test_session_ttl_just_inside_and_at_the_limit(self) -> None:
        browser = self.signed_in(self.connect_path(self.first()))
        self.clock.now += connect.SESSION_TTL_SECONDS - 0.001  # the first link has expired by now
        path = self.connect_path(self.first(title="TPS report 2024"))
        self.assertIn("Allow", browser.get(path)[2])
        self.clock.now += 0.001
        self.assertIn("Sign in", browser.get(path)[2])

    def test_pending_flows_per_principal_up_to_the_bound_then_an_error_for_that_principal_only(self) -> None:
        for _ in range(connect.MAX_PENDING_FLOWS_PER_PRINCIPAL):
            self.first()
        refused = self.alice.call(tps("TPS report 2025"))["result"]
        self.assertTrue(refused["isError"])
        self.first(self.bob, "TPS report bob")
        self.clock.now += connect.FLOW_TTL_SECONDS
        self.first()

    def test_sessions_per_principal_up_to_the_bound_then_the_oldest_is_dropped(self) -> None:
        path = self.connect_path(self.first())
        browsers = [self.signed_in(path) for _ in range(connect.MAX_SESSIONS_PER_PRINCIPAL)]
        for browser in browsers:
            self.assertIn("Allow", browser.get(path)[2])
        self.clock.now += 1
        self.signed_in(path)
        self.assertIn("Sign in", browsers[0].get(path)[2])
        self.assertIn("Allow", browsers[1].get(path)[2])

    def test_form_body_size_at_the_limit_and_one_byte_over(self) -> None:
        path = self.connect_path(self.first())
        browser = self.browser()
        fields = f"token={ALICE_TOKEN}&login={browser.login_token(path)}&pad="
        exact = (fields + "x" * (connect.MAX_FORM_BYTES - len(fields))).encode()
        self.assertEqual(len(exact), connect.MAX_FORM_BYTES)
        cookie = ("Cookie", f"{connect.LOGIN_COOKIE}={browser.jar[connect.LOGIN_COOKIE]}")
        self.assertEqual(
            self.pages.handle("POST", f"{path}/sign-in", support.engine_headers([FORM_TYPE, cookie]), exact + b"x")[0],
            413,
        )
        self.assertEqual(
            self.pages.handle("POST", f"{path}/sign-in", support.engine_headers([FORM_TYPE, cookie]), exact)[0], 303
        )

    def test_form_field_count_at_the_limit_and_one_over(self) -> None:
        path = self.connect_path(self.first())
        pad = [(f"p{i}", "") for i in range(connect.MAX_FORM_FIELDS - 2)]
        browser = self.browser()
        login = ("login", browser.login_token(path))
        self.assertEqual(
            browser.open("POST", f"{path}/sign-in", [("token", ALICE_TOKEN), login, *pad, ("p", "")])[0], 403
        )
        self.assertIsNone(browser.cookie)
        self.assertEqual(browser.open("POST", f"{path}/sign-in", [("token", ALICE_TOKEN), login, *pad])[0], 303)

    def test_reports_kept_per_principal_up_to_the_bound_then_the_oldest_is_dropped(self) -> None:
        service = connect.ReportService()
        alice, bob = service.authorize("alice"), service.authorize("bob")
        note = main.lesson_notes()[0]
        for _ in range(connect.MAX_REPORTS_KEPT_PER_PRINCIPAL):
            service.publish(alice, note)
        kept = service.published("alice")
        self.assertEqual(len(kept), connect.MAX_REPORTS_KEPT_PER_PRINCIPAL)
        self.assertEqual(kept[0]["reportId"], "report-1")
        self.assertEqual(service.publish(alice, note), f"report-{connect.MAX_REPORTS_KEPT_PER_PRINCIPAL + 1}")
        kept = service.published("alice")
        self.assertEqual(len(kept), connect.MAX_REPORTS_KEPT_PER_PRINCIPAL)
        self.assertEqual(kept[0]["reportId"], "report-2")
        self.assertEqual(kept[-1]["reportId"], f"report-{connect.MAX_REPORTS_KEPT_PER_PRINCIPAL + 1}")
        self.assertEqual(service.published("bob"), [])
        self.assertEqual(service.publish(bob, note), "report-1")  # numbering is per account

    def test_a_repeated_form_field_is_refused(self) -> None:
        path = self.connect_path(self.first())
        browser = self.browser()
        login = ("login", browser.login_token(path))
        self.assertEqual(
            browser.open("POST", f"{path}/sign-in", [("token", BOB_TOKEN), ("token", ALICE_TOKEN), login])[0], 403
        )
        self.assertIsNone(browser.cookie)


# =====================================================================================
# Over the real transports
# =====================================================================================


def http_pages(test: unittest.TestCase, port: int) -> Send:
    """A browser backend: http.client on one keep-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD)
    test.addCleanup(conn.close)

    def send(
        method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        if method == "POST":
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body if method == "POST" else None)
        response = conn.getresponse()
        return response.status, response.getheaders(), response.read()

    return send


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


def note_entry(note: main.Note) -> dict[str, Any]:
    return {"id": note.id, "title": note.title, "uri": note.uri}


def publish_server(scope: Any) -> procs.HttpServer:
    """A real `serve.py --http --publish` process for alice and bob, stopped at `scope`'s clean-up."""
    return procs.HttpServer(scope, "--config", config_file(scope, publish=True), env=procs.server_env())


class RealHttpServer(ContractCase):
    """Mixed into a TestCase: a real `serve.py --http --publish` process and an MCP client for alice and bob."""

    def setUp(self) -> None:
        self.use(self.start_server())

    def start_server(self) -> procs.HttpServer:
        """The test's server: here one of its own."""
        return publish_server(self)

    def use(self, server: procs.HttpServer) -> None:
        """Talk to `server` from now on, as alice and as bob."""
        self.server = server
        self.alice = self.client(ALICE_TOKEN)
        self.bob = self.client(BOB_TOKEN)

    def client(self, token: str) -> Client:
        def send(message: dict[str, Any]) -> dict[str, Any]:
            # A connection per message, as a client that may wait minutes between calls
            # must: the server closes a keep-alive connection idle past its head deadline.
            status, _, body = procs.post(self.server.connect(self), message, procs.mcp_headers(message, token=token))
            return json.loads(body)

        return Client(send)


class HttpTransportTests(RealHttpServer, unittest.TestCase):
    """`serve --http --port 0`: the pages live beside /mcp on the same loopback server.

    One server for the class: the tests sign in, deny and refuse, each on a flow of its own,
    and none connects a principal or publishes, but the full flow, which has a server of its own.
    """

    SHARED = shared_servers.Shared(publish_server)

    def start_server(self) -> procs.HttpServer:
        return self.SHARED.get(procs.ClassScope(type(self)))

    def assertRefusalPage(self, headers: list[tuple[str, str]], body: bytes) -> None:
        """A transport refusal under /connect/ is an HTML page with every page header, and ends the connection."""
        got = {name.lower(): value for name, value in headers}
        for name, value in EXPECTED_PAGE_HEADERS.items():
            self.assertEqual(got[name], value, name)
        self.assertEqual(got["connection"], "close")
        self.assertTrue(body.startswith(b"<!DOCTYPE html>"), body[:80])

    def path_of(self, result: dict[str, Any]) -> str:
        url = urlsplit(connect_request(result)["params"]["url"])
        self.assertEqual((url.scheme, url.hostname, url.port), ("http", "127.0.0.1", self.server.port))
        return url.path

    def test_the_full_publish_flow_through_a_browser_and_mcp_over_http(self) -> None:
        self.use(publish_server(self))  # it connects alice and publishes: a server of its own
        arguments = tps("TPS report")
        first = self.alice.call(arguments)["result"]
        second = self.alice.retry(arguments, first, answer("accept", connect.CHOICE_KEY, {"note_id": "note-7"}))[
            "result"
        ]
        path = self.path_of(second)
        early = self.alice.retry(arguments, second, answer("accept"))["result"]
        self.assertEqual(connect_request(early), connect_request(second))
        browser = Browser(http_pages(self, self.server.port))
        self.assertIn("Sign in", browser.get(path)[2])
        self.assertEqual(browser.sign_in(path, ALICE_TOKEN), 303)
        self.assertEqual(browser.decide(path, "allow"), 200)
        done = self.alice.retry(arguments, early, answer("accept"))["result"]
        self.assertEqual(done["structuredContent"], {"published": True, "noteId": "note-7", "reportId": "report-1"})
        for status, headers, _ in browser.pages:
            for name, value in EXPECTED_PAGE_HEADERS.items():
                self.assertEqual(headers[name], value, (status, name))
        session = browser.cookie.split("=", 1)[1]  # type: ignore[union-attr]
        csrf = re.findall(r'name="csrf" value="([^"]+)"', "".join(text for _, _, text in browser.pages))
        wire = "\n".join(self.alice.wire)
        for secret in [session, ALICE_TOKEN, *csrf]:
            self.assertNotIn(secret, wire)
        self.assertNotIn(ALICE_TOKEN, self.server.stderr_text())
        self.assertNotIn(session, self.server.stderr_text())

    def test_bob_signed_in_cannot_complete_alices_flow_over_http(self) -> None:
        first = self.alice.call(tps("TPS report 2025"))["result"]
        alice_path = self.path_of(first)
        bob_first = self.bob.call(tps("TPS report bob", BOB_WORKSPACE))["result"]
        bob_path = self.path_of(bob_first)
        bob = Browser(http_pages(self, self.server.port))
        self.assertEqual(bob.sign_in(bob_path, BOB_TOKEN), 303)
        csrf = bob.csrf(bob_path)
        self.assertEqual(bob.get(alice_path)[0], 403)
        self.assertEqual(bob.decide(alice_path, "allow", csrf=csrf), 403)
        again = self.alice.retry(tps("TPS report 2025"), first, answer("accept"))["result"]
        self.assertEqual(again["resultType"], "input_required")  # alice is still not connected

    def test_deny_over_http_completes_not_published(self) -> None:
        first = self.alice.call(tps("TPS report 2025"))["result"]
        path = self.path_of(first)
        browser = Browser(http_pages(self, self.server.port))
        browser.sign_in(path, ALICE_TOKEN)
        self.assertEqual(browser.decide(path, "deny"), 200)
        result = self.alice.retry(tps("TPS report 2025"), first, answer("accept"))["result"]
        self.assertEqual(result["structuredContent"], {"published": False, "reason": "denied"})
        self.assertEqual(browser.get(path)[0], 404)

    def test_form_only_gets_the_exact_32021_over_http(self) -> None:
        message = request(
            "tools/call", {"name": connect.TOOL_NAME, "arguments": tps("TPS report 2025")}, capabilities=FORM_ONLY
        )
        status, _, body = procs.post(self.server.connect(self), message, procs.mcp_headers(message, token=ALICE_TOKEN))
        self.assertEqual(status, 400)
        error = json.loads(body)["error"]
        self.assertEqual((error["code"], error["data"]), (main.MISSING_REQUIRED_CLIENT_CAPABILITY, URL_REQUIRED))

    def test_the_transport_refuses_an_oversized_form_before_reading_it(self) -> None:
        first = self.alice.call(tps("TPS report 2025"))["result"]
        path = self.path_of(first)
        browser = Browser(http_pages(self, self.server.port))
        exact = f"token={ALICE_TOKEN}&login={browser.login_token(path)}&pad=".encode()
        exact += b"x" * (connect.MAX_FORM_BYTES - len(exact))
        cookie = ("Cookie", f"{connect.LOGIN_COOKIE}={browser.jar[connect.LOGIN_COOKIE]}")
        status, headers, body = http_pages(self, self.server.port)(
            "POST", f"{path}/sign-in", [FORM_TYPE, cookie], exact + b"x"
        )
        self.assertEqual(status, 413)
        self.assertRefusalPage(headers, body)
        self.assertEqual(
            http_pages(self, self.server.port)("POST", f"{path}/sign-in", [FORM_TYPE, cookie], exact)[0], 303
        )

    def test_a_foreign_host_header_is_refused_on_the_pages(self) -> None:
        path = self.path_of(self.alice.call(tps("TPS report 2025"))["result"])
        send = http_pages(self, self.server.port)
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=GUARD)
        self.addCleanup(conn.close)
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", f"evil.example:{self.server.port}")
        conn.endheaders()
        response = conn.getresponse()
        self.assertEqual(response.status, 403)
        self.assertRefusalPage(response.getheaders(), response.read())
        self.assertEqual(send("GET", path, [], b"")[0], 200)

    def test_origin_null_and_bad_framing_get_html_refusals_and_change_nothing(self) -> None:
        path = self.path_of(self.alice.call(tps("TPS report 2025"))["result"])
        browser = Browser(http_pages(self, self.server.port))
        login = browser.login_token(path)
        cookie = ("Cookie", f"{connect.LOGIN_COOKIE}={browser.jar[connect.LOGIN_COOKIE]}")
        form = urlencode([("token", ALICE_TOKEN), ("login", login)]).encode()
        status, headers, body = http_pages(self, self.server.port)(
            "POST", f"{path}/sign-in", [FORM_TYPE, cookie, ("Origin", "null")], form
        )
        self.assertEqual(status, 403)
        self.assertRefusalPage(headers, body)
        self.assertFalse(
            any(value.startswith(connect.SESSION_COOKIE) for name, value in headers if name.lower() == "set-cookie")
        )
        raw = procs.raw_exchange(
            self.server.port,
            (
                f"POST {path}/sign-in HTTP/1.1\r\nHost: 127.0.0.1:{self.server.port}\r\nTransfer-Encoding: chunked\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\n\r\n0\r\n\r\n"
            ).encode(),
        )
        head, _, page = raw.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 411 "), head)  # a chunked body has no length up front
        self.assertIn(b"Content-Type: text/html; charset=utf-8", head)
        self.assertTrue(page.startswith(b"<!DOCTYPE html>"))
        self.assertEqual(
            browser.sign_in(path, ALICE_TOKEN, [("Origin", f"http://127.0.0.1:{self.server.port}")]), 303
        )  # still usable

    def test_refusals_on_the_mcp_endpoint_stay_json(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=GUARD)
        self.addCleanup(conn.close)
        message = request("server/discover")
        status, headers, body = procs.post(
            conn, message, {**procs.mcp_headers(message, token=ALICE_TOKEN), "Origin": "null"}
        )
        self.assertEqual(status, 403)
        self.assertEqual(headers["content-type"], "application/json")
        self.assertEqual(json.loads(body)["error"]["code"], main.INVALID_REQUEST)


class StdioTransportTests(unittest.TestCase):
    """`serve --stdio`: a loopback listener serves only the pages, on the configured port."""

    def test_the_full_publish_flow_over_stdio_with_the_loopback_pages(self) -> None:
        server = procs.StdioServer(
            self, "--config", config_file(self, connectPort=0, publish=True), env=procs.server_env()
        )
        client = Client(server.exchange)
        first = client.call(tps("TPS report 2025"))["result"]
        url = urlsplit(connect_request(first)["params"]["url"])
        self.assertEqual(url.hostname, "127.0.0.1")
        self.assertTrue(
            server.wait_for_line(f"connect pages on http://127.0.0.1:{url.port}/connect/")
        )  # stderr is read by another thread
        browser = Browser(http_pages(self, url.port))
        self.assertEqual(browser.sign_in(url.path, ALICE_TOKEN), 303)
        self.assertEqual(browser.decide(url.path, "allow"), 200)
        done = client.retry(tps("TPS report 2025"), first, answer("accept"))["result"]
        self.assertTrue(done["structuredContent"]["published"])
        conn = http.client.HTTPConnection("127.0.0.1", url.port, timeout=GUARD)
        self.addCleanup(conn.close)
        message = request("server/discover")
        self.assertEqual(
            procs.post(conn, message, procs.mcp_headers(message, token=ALICE_TOKEN))[0], 404
        )  # no MCP here

    def test_connect_port_must_be_a_port_number(self) -> None:
        base = {"principals": {"alice": {"token": ALICE_TOKEN, "workspaces": [WORKSPACE]}}}
        for value in (-1, 65536, "8080", True, 1.5):
            with self.subTest(value=value):
                with self.assertRaises(configuration.ConfigError):
                    configuration.parse_config(json.dumps({**base, "connectPort": value}))
        for value in (0, 65535):
            self.assertEqual(
                configuration.parse_config(json.dumps({**base, "connectPort": value}))["connectPort"], value
            )


if __name__ == "__main__":
    unittest.main()
