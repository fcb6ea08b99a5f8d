"""Legacy 2025-11-25 Streamable HTTP sessions: real `serve.py --http` processes for the wire, in process for the
bounds."""

from __future__ import annotations

import http.client
import json
import threading
import unittest
from typing import Any

from helpers import procs, shared_servers, support
from helpers.legacy_client import CLIENT_INFO, FORM_CLIENT, AuditedStore, HttpLegacyClient, SseReader, accepted, choices
from helpers.support import call, request, tps

import conformance_fixtures as fixtures
import frame
import http_server
import legacy
import legacy_http
import main
import stores
import streamable_http

BOB_TOKEN = "bob-token-0123456789abcdefgh"
BOB_WORKSPACE = "file:///Users/bob/Notes"
ALL_LESSON_NOTES = ["note-3", "note-7", "note-14"]


def modern_choices(port: int, test: unittest.TestCase, token: str = procs.TOKEN) -> list[str]:
    """The notes a modern, stateless tools/call would offer now (nothing is consumed)."""
    message = call(tps(), id="count")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=procs.GUARD)
    test.addCleanup(conn.close)
    status, _, body = procs.post(conn, message, procs.mcp_headers(message, token=token))
    test.assertEqual(status, 200)
    return choices(json.loads(body)["result"]["inputRequests"][main.INPUT_KEY])


def texts(result: dict[str, Any]) -> str:
    return " ".join(block["text"] for block in result["content"])


def alice_and_bob(scope: Any, notes: list[dict[str, str]]) -> procs.HttpServer:
    """`serve --http` with alice (the lesson's workspace, holding `notes`) and bob, stopped at `scope`'s clean-up."""
    path = procs.write_config(scope, {
        "principals": {
            "alice": {"token": procs.TOKEN, "workspaces": [support.WORKSPACE]},
            "bob": {"token": BOB_TOKEN, "workspaces": [BOB_WORKSPACE]},
        },
        "stdioPrincipal": "alice",
        "notes": notes,
        "keys": [procs.SECRET],
    })  # fmt: skip
    return procs.HttpServer(scope, "--config", path, env=procs.server_env())


def lesson_and_bob(scope: Any) -> procs.HttpServer:
    """`serve --http` as the lesson serves alice (its notes), and bob, whose workspace holds none."""
    return alice_and_bob(scope, [{"id": note.id, "title": note.title, "uri": note.uri} for note in main.lesson_notes()])


# One server for the tests of this module that delete no note, open their own sessions and
# send fewer wrong tokens than an address may guess for free; a test that deletes a note, or
# reads the whole log, starts a server of its own.
LESSON_SERVER = shared_servers.Shared(lesson_and_bob)


def lesson_server() -> procs.HttpServer:
    """The module's shared lesson server (started at the first test that asks, stopped after the last)."""
    return LESSON_SERVER.get(shared_servers.ModuleScope())


class LegacyHttpFlowTests(unittest.TestCase):
    """initialize → initialized → tools/list → tools/call → elicitation on the stream → POSTed answer → result."""

    def setUp(self) -> None:
        self.begin(lesson_server())

    def begin(self, server: procs.HttpServer) -> None:
        """A legacy session on `server`."""
        self.server = server
        self.client = HttpLegacyClient(self, self.server.port)
        result = self.client.initialize()
        self.assertEqual(result["protocolVersion"], legacy.LATEST_LEGACY_VERSION)
        self.assertNotIn("resultType", result)

    def ask(self) -> tuple[dict[str, Any], Any, dict[str, Any]]:
        """tools/list, then a delete call whose first event must be the form."""
        tools = self.client.call("tools/list")["result"]["tools"]
        self.assertIn(main.TOOL_NAME, [tool["name"] for tool in tools])
        message, stream = self.client.delete()
        form = stream.message()
        self.assertEqual((form["method"], form["id"]), ("elicitation/create", main.INPUT_KEY))
        self.assertEqual(choices(form), ALL_LESSON_NOTES)
        return message, stream, form

    def test_accept_deletes_exactly_the_chosen_note(self) -> None:
        self.begin(procs.HttpServer(self))  # it deletes a note: a server of its own
        message, stream, form = self.ask()
        self.assertEqual(self.client.answer(form, accepted("note-14")), 202)
        response = stream.event()
        self.assertEqual(response["id"], message["id"])
        self.assertEqual(response["result"]["structuredContent"], {"deleted": True, "noteId": "note-14"})
        self.assertNotIn("resultType", response["result"])
        self.assertIsNone(stream.event())  # the stream ends with the result
        self.assertEqual(modern_choices(self.server.port, self), ["note-3", "note-7"])

    def test_decline_deletes_nothing(self) -> None:
        _, stream, form = self.ask()
        self.assertEqual(self.client.answer(form, {"action": "decline"}), 202)
        self.assertEqual(stream.event()["result"]["structuredContent"], {"deleted": False, "reason": "declined"})
        self.assertEqual(modern_choices(self.server.port, self), ALL_LESSON_NOTES)

    def test_cancel_deletes_nothing(self) -> None:
        _, stream, form = self.ask()
        self.assertEqual(self.client.answer(form, {"action": "cancel"}), 202)
        self.assertEqual(stream.event()["result"]["structuredContent"], {"deleted": False, "reason": "cancelled"})
        self.assertEqual(modern_choices(self.server.port, self), ALL_LESSON_NOTES)

    def test_a_replayed_answer_is_ignored_and_one_note_is_deleted(self) -> None:
        self.begin(procs.HttpServer(self))  # it deletes a note: a server of its own
        _, stream, form = self.ask()
        self.assertEqual(self.client.answer(form, accepted("note-14")), 202)
        self.assertTrue(stream.event()["result"]["structuredContent"]["deleted"])
        # The same JSON-RPC response once more, then aimed at another note: nobody waits for it.
        self.assertEqual(self.client.answer(form, accepted("note-14")), 202)
        self.assertEqual(self.client.answer(form, accepted("note-7")), 202)
        self.assertEqual(self.client.call("ping")["result"], {})
        self.assertEqual(modern_choices(self.server.port, self), ["note-3", "note-7"])
        self.assertTrue(
            self.server.wait_for_line("ignored a response to no pending request")
        )  # stderr is read by another thread

    def test_a_call_needing_no_form_is_answered_with_json(self) -> None:
        response = self.client.call(
            "tools/call", {"name": main.TOOL_NAME, "arguments": {"workspaceUri": support.WORKSPACE}}
        )
        self.assertTrue(response["result"]["isError"])
        self.assertEqual(modern_choices(self.server.port, self), ALL_LESSON_NOTES)

    def test_a_client_without_elicitation_gets_a_tool_error_and_nothing_is_deleted(self) -> None:
        bare = HttpLegacyClient(self, self.server.port)
        bare.initialize(capabilities={})
        result = bare.call("tools/call", {"name": main.TOOL_NAME, "arguments": tps()})["result"]
        self.assertTrue(result["isError"])
        self.assertIn("did not declare", texts(result))
        self.assertEqual(modern_choices(self.server.port, self), ALL_LESSON_NOTES)


def session_server(test: Any) -> procs.HttpServer:
    """`serve --http` with alice and bob, one note of alice's (nothing here deletes it)."""
    return alice_and_bob(test, [{"id": "a1", "title": "TPS report", "uri": support.WORKSPACE + "/a1.md"}])


class LegacyHttpSessionTests(unittest.TestCase):
    """Session ids: minted at random, required, bound to the principal, ended by DELETE.

    The module's shared server: each test opens its own session, and none deletes a note or
    sends enough wrong tokens to make the address wait (that test has a server of its own).
    """

    server: procs.HttpServer

    def setUp(self) -> None:
        self.server = lesson_server()
        self.client = HttpLegacyClient(self, self.server.port)
        self.client.initialize()

    def test_each_initialize_mints_a_new_unguessable_session_id(self) -> None:
        other = HttpLegacyClient(self, self.server.port)
        other.initialize()
        ids = {self.client.session_id, other.session_id}
        self.assertEqual(len(ids), 2)
        for session_id in ids:
            assert session_id is not None
            self.assertGreaterEqual(len(session_id), 43)  # 32 random bytes
            self.assertTrue(all(0x21 <= ord(char) <= 0x7E for char in session_id))

    def test_another_principals_token_on_a_session_gets_404_and_changes_nothing(self) -> None:
        headers = self.client.headers() | {"Authorization": f"Bearer {BOB_TOKEN}"}
        status, _, body = self.client.post(
            self.client.request("tools/call", {"name": main.TOOL_NAME, "arguments": tps()}), headers
        )
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(body)["error"]["code"], main.INVALID_REQUEST)
        status, _, _ = self.client.post(b"", headers, method="DELETE")
        self.assertEqual(status, 404)  # nor can bob end it
        self.assertEqual(self.client.call("ping")["result"], {})  # still alice's, still live
        unknown = self.client.headers() | {"Mcp-Session-Id": "no-such-session"}
        self.assertEqual(self.client.post(self.client.request("ping"), unknown)[0], 404)  # told apart from nothing

    def test_a_deleted_session_gets_404_and_a_new_initialize_works(self) -> None:
        status, _, _ = self.client.post(b"", method="DELETE")
        self.assertEqual(status, 200)
        status, _, _ = self.client.post(self.client.request("ping"))
        self.assertEqual(status, 404)
        self.assertEqual(self.client.post(b"", method="DELETE")[0], 404)  # ended once
        self.client.initialize()
        self.assertEqual(self.client.call("ping")["result"], {})

    def test_a_legacy_request_without_a_session_id_is_400(self) -> None:
        headers = self.client.headers(session=False) | {"MCP-Protocol-Version": legacy.LATEST_LEGACY_VERSION}
        status, _, body = self.client.post(self.client.request("tools/list"), headers)
        self.assertEqual((status, json.loads(body)["error"]["code"]), (400, main.INVALID_REQUEST))
        self.assertIn(b"Mcp-Session-Id", body)
        status, _, _ = self.client.post(
            {"jsonrpc": "2.0", "id": main.INPUT_KEY, "result": accepted("a1")}, self.client.headers(session=False)
        )
        self.assertEqual(status, 400)

    def test_two_session_ids_are_400(self) -> None:
        headers = [*self.client.headers().items(), ("Mcp-Session-Id", "another")]
        status, _, _ = procs.post(self.client.connection(), self.client.request("ping"), headers)
        self.assertEqual(status, 400)

    def test_a_wrong_protocol_version_header_on_a_session_is_400(self) -> None:
        headers = self.client.headers() | {"MCP-Protocol-Version": "2025-06-18"}
        self.assertEqual(self.client.post(self.client.request("ping"), headers)[0], 400)

    def test_a_get_for_a_standalone_stream_is_405(self) -> None:
        status, headers, _ = self.client.post(b"", method="GET")
        self.assertEqual(status, 405)
        self.assertEqual(headers["allow"], "POST")
        # Even carrying a request the session would answer: only DELETE and POST reach it.
        self.assertEqual(self.client.post(self.client.request("ping"), method="GET")[0], 405)
        self.assertEqual(self.client.post(self.client.request("ping"))[0], 200)  # the session is still there

    def test_a_bad_token_is_401_before_any_session_lookup(self) -> None:
        headers = self.client.headers() | {"Authorization": "Bearer wrong-token-0123456789abcdef"}
        self.assertEqual(self.client.post(self.client.request("ping"), headers)[0], 401)


class LegacyHttpSessionBackOffTests(unittest.TestCase):
    """A session's own token is served while wrong tokens from its address wait (a server of its own: it spends the free
    guesses)."""

    def setUp(self) -> None:
        self.server = session_server(self)
        self.client = HttpLegacyClient(self, self.server.port)
        self.client.initialize()

    def test_a_session_is_served_and_ended_while_wrong_tokens_from_its_address_wait(self) -> None:
        wrong = self.client.headers() | {"Authorization": "Bearer wrong-token-0123456789abcdef"}
        statuses = [
            self.client.post(self.client.request("ping"), wrong)[0] for _ in range(streamable_http.MAX_FREE_GUESSES + 5)
        ]
        self.assertEqual(statuses[: streamable_http.MAX_FREE_GUESSES], [401] * streamable_http.MAX_FREE_GUESSES)
        self.assertIn(429, statuses)  # the address backs off ...
        self.assertEqual(self.client.post(self.client.request("ping"))[0], 200)  # ... and the session's token is served
        self.assertEqual(self.client.post(b"", method="DELETE")[0], 200)
        self.assertEqual(self.client.post(b"", method="DELETE")[0], 404)  # ended once


class DualEraHttpTests(unittest.TestCase):
    """Legacy sessions and modern requests on one endpoint: the modern wire is unchanged."""

    def test_modern_requests_ignore_a_session_id_while_a_legacy_form_is_open(self) -> None:
        server = procs.HttpServer(self)
        client = HttpLegacyClient(self, server.port)
        client.initialize()
        _, stream = client.delete()
        form = stream.message()
        # A modern request that carries the legacy session id: served statelessly, no id minted.
        modern = request("server/discover", id="d")
        status, headers, body = procs.post(
            server.connect(self), modern, procs.mcp_headers(modern) | {"Mcp-Session-Id": str(client.session_id)}
        )
        self.assertEqual(status, 200)
        self.assertNotIn("mcp-session-id", headers)
        self.assertEqual(json.loads(body)["result"]["resultType"], "complete")
        # A modern MRTR delete completes beside it.
        first = call(tps(), id="m1")
        status, _, body = procs.post(
            server.connect(self), first, procs.mcp_headers(first) | {"Mcp-Session-Id": str(client.session_id)}
        )
        state = json.loads(body)["result"]["requestState"]
        retry = call(tps(), id="m2", requestState=state, inputResponses=support.accept("note-3"))
        status, _, body = procs.post(server.connect(self), retry)
        self.assertEqual(json.loads(body)["result"]["structuredContent"], {"deleted": True, "noteId": "note-3"})
        # The legacy form offered note-3 before; choosing it now deletes nothing more.
        self.assertEqual(client.answer(form, accepted("note-3")), 202)
        result = stream.message()["result"]
        self.assertTrue(result["isError"])
        self.assertIn("nothing was deleted", texts(result))
        self.assertEqual(modern_choices(server.port, self), ["note-7", "note-14"])

    def test_a_modern_initialize_still_gets_404_method_not_found(self) -> None:
        server = lesson_server()
        message = request("initialize", id="i")
        status, headers, body = procs.post(server.connect(self), message)
        self.assertEqual((status, json.loads(body)["error"]["code"]), (404, main.METHOD_NOT_FOUND))
        self.assertNotIn("mcp-session-id", headers)


SHORT_RUNS = 100  # command-line runs of another client of the host's principal, none ending with DELETE


class LongLivedHostTests(unittest.TestCase):
    """A host's session outlives short runs of its principal that never DELETE; an evicted one is 404, re-initialize
    works.

    `GET /mcp` is 405 here, so a host streams only on a call's POST: the streaming host
    holds an open form. The two hosts that outlive short runs share a server: together they
    open fewer sessions than the bound, and only one deletes a note. The eviction test fills the
    table to the bound on a server of its own.
    """

    SHARED = shared_servers.Shared(procs.HttpServer)

    def setUp(self) -> None:
        self.begin(self.SHARED.get(procs.ClassScope(type(self))))

    def begin(self, server: procs.HttpServer) -> None:
        """A host's session on `server`."""
        self.server = server
        self.host = HttpLegacyClient(self, self.server.port)
        self.host.initialize()
        self.assertEqual(self.tool_names(self.host), [main.TOOL_NAME])

    def tool_names(self, client: HttpLegacyClient) -> list[str]:
        return [tool["name"] for tool in client.call("tools/list")["result"]["tools"]]

    def short_runs(self, count: int) -> list[HttpLegacyClient]:
        """`count` whole runs of a command-line client: initialize, tools/list, exit without DELETE."""
        runs = []
        for _ in range(count):
            run = HttpLegacyClient(self, self.server.port)
            run.initialize(client_info={"name": "notes-cli", "version": "0.9"})
            self.assertEqual(self.tool_names(run), [main.TOOL_NAME])
            runs.append(run)
        return runs

    def ping(self, client: HttpLegacyClient) -> int:
        return client.post(client.request("ping"))[0]

    def test_an_idle_hosts_session_outlives_a_hundred_short_runs_of_its_principal(self) -> None:
        runs = self.short_runs(SHORT_RUNS)
        self.assertEqual(self.tool_names(self.host), [main.TOOL_NAME])  # a JSON 200: the session is live
        self.assertEqual([self.ping(run) for run in runs], [200] * SHORT_RUNS)  # below the bound nothing gave way

    def test_a_streaming_hosts_session_outlives_a_hundred_short_runs_and_its_form_completes(self) -> None:
        _, stream = self.host.delete()
        form = stream.message()
        self.assertEqual(form["method"], "elicitation/create")
        self.short_runs(SHORT_RUNS)
        self.assertEqual(self.host.answer(form, accepted("note-14")), 202)
        self.assertEqual(stream.message()["result"]["structuredContent"], {"deleted": True, "noteId": "note-14"})
        self.assertEqual(self.tool_names(self.host), [main.TOOL_NAME])
        self.assertEqual(modern_choices(self.server.port, self), ["note-3", "note-7"])

    def test_a_session_evicted_at_the_bound_gets_404_and_its_client_starts_a_new_one(self) -> None:
        self.begin(procs.HttpServer(self))  # it counts every session up to the bound: a server of its own
        # Handshake-only sessions (a client that initialized and vanished) give way first,
        # oldest first: `victim` is the oldest once the table is full.
        victim, *rest = [
            HttpLegacyClient(self, self.server.port) for _ in range(legacy_http.MAX_SESSIONS_PER_PRINCIPAL - 1)
        ]
        conn = self.server.connect(self)  # one keep-alive connection for the many handshakes
        params = {
            "protocolVersion": legacy.LATEST_LEGACY_VERSION,
            "capabilities": FORM_CLIENT,
            "clientInfo": CLIENT_INFO,
        }
        for client in (victim, *rest):
            status, headers, body = procs.post(
                conn, client.request("initialize", params), client.headers(session=False)
            )
            self.assertEqual(status, 200, body)
            client.session_id = headers["mcp-session-id"]
        newcomer = HttpLegacyClient(self, self.server.port)
        newcomer.initialize()  # one session over the bound
        status, _, body = victim.post(victim.request("ping"))
        self.assertEqual((status, json.loads(body)["error"]["code"]), (404, main.INVALID_REQUEST))
        self.assertIn(b"send initialize again", body)
        self.assertEqual(victim.post(b"", method="DELETE")[0], 404)  # ended once, by eviction
        self.assertEqual([self.ping(client) for client in (self.host, rest[-1], newcomer)], [200] * 3)  # (now used)
        victim.initialize()  # the client starts over, as the spec tells it to
        self.assertEqual(self.tool_names(victim), [main.TOOL_NAME])
        self.assertEqual(self.ping(rest[0]), 404)  # ... which pushed out the next oldest handshake-only session


class LegacyHttpAuditTests(unittest.TestCase):
    """The audit names each 2025-11-25 session's client (its initialize's clientInfo) and the client's own call id."""

    def test_each_sessions_audit_entries_name_its_client_and_its_own_calls(self) -> None:
        store = AuditedStore(self, NOTES_MCP_TOKEN=procs.TOKEN)
        server = procs.HttpServer(self, "--db", store.db, env=store.env)
        host, cli = HttpLegacyClient(self, server.port), HttpLegacyClient(self, server.port)
        host.initialize()
        cli.initialize(client_info={"name": "notes-cli", "version": "0.9"})
        for client, call_id, answer in ((host, "host-call-7", accepted("note-14")), (cli, 41, {"action": "decline"})):
            message = client.request("tools/call", {"name": main.TOOL_NAME, "arguments": tps()}) | {"id": call_id}
            status, _, response = client.open(message)
            self.assertEqual(status, 200)
            stream = SseReader(response)
            self.assertEqual(client.answer(stream.message(), answer), 202)
            self.assertEqual(stream.message()["id"], call_id)
        server.stop()  # the database as the server left it
        host_name = f"{CLIENT_INFO['name']}/{CLIENT_INFO['version']}"
        entries = [
            (e["principal"], e["outcome"], e["note_id"], e["request_id"], e["client_name"]) for e in store.entries()
        ]
        self.assertEqual(entries, [
            (support.PRINCIPAL, "deleted", "note-14", '"host-call-7"', host_name),
            (support.PRINCIPAL, "declined", None, "41", "notes-cli/0.9"),
        ])  # fmt: skip
        header, *lines = store.listing()
        self.assertIn("CLIENT (self-reported)", header)
        columns = [line.split()[-3:-1] for line in lines]  # REQUEST and CLIENT (TRASH is last)
        self.assertEqual(columns, [['"host-call-7"', host_name], ["41", "notes-cli/0.9"]])
        self.assertNotIn(legacy.INTERNAL_ID_PREFIX, "\n".join(lines))


class LoadedOnDemandTests(unittest.TestCase):
    """Like stdio, HTTP loads the legacy adapter with the first request that may be legacy, not at start."""

    VERBOSE = "import 'legacy_http'"  # what PYTHONVERBOSE=1 prints to stderr when the module loads

    def server(self) -> procs.HttpServer:
        return procs.HttpServer(
            self, env=procs.server_env(NOTES_MCP_TOKEN=procs.TOKEN, NOTES_MCP_SECRET=procs.SECRET, PYTHONVERBOSE="1")
        )

    def test_modern_requests_never_load_the_legacy_adapter(self) -> None:
        server = self.server()
        self.assertEqual(modern_choices(server.port, self), ALL_LESSON_NOTES)
        server.stop()  # every stderr line is in once the process has ended
        self.assertFalse(any(self.VERBOSE in line for line in server.stderr_lines))
        self.assertTrue(any("import 'streamable_http'" in line for line in server.stderr_lines))  # the probe works

    def test_the_first_initialize_loads_it_and_opens_a_session(self) -> None:
        server = self.server()
        self.assertEqual(
            HttpLegacyClient(self, server.port).initialize()["protocolVersion"], legacy.LATEST_LEGACY_VERSION
        )
        self.assertTrue(server.wait_for_line(self.VERBOSE))

    def test_a_gate_passes_exactly_what_may_be_legacy(self) -> None:
        def request(body: bytes, *headers: tuple[str, str]) -> http_server.Request:
            return http_server.Request(
                "POST",
                "/mcp",
                "HTTP/1.1",
                support.engine_headers(list(headers)),
                body,
                ("127.0.0.1", 1),
                threading.Event(),
            )

        modern = json.dumps(call(tps())).encode()
        self.assertFalse(
            streamable_http.may_be_legacy(request(modern, ("MCP-Protocol-Version", main.PROTOCOL_VERSION)))
        )
        self.assertFalse(streamable_http.may_be_legacy(request(modern)))
        self.assertTrue(streamable_http.may_be_legacy(request(modern, ("Mcp-Session-Id", "s"))))
        self.assertTrue(
            streamable_http.may_be_legacy(request(modern, ("MCP-Protocol-Version", legacy.LATEST_LEGACY_VERSION)))
        )
        self.assertTrue(streamable_http.may_be_legacy(request(b'{"method":"initialize"}')))


class NoLegacyHttpTests(unittest.TestCase):
    """--no-legacy: HTTP serves 2026-07-28 only."""

    def test_initialize_gets_404_method_not_found_naming_the_supported_version(self) -> None:
        server = procs.HttpServer(self, "--no-legacy")
        client = HttpLegacyClient(self, server.port)
        params = {
            "protocolVersion": legacy.LATEST_LEGACY_VERSION,
            "capabilities": FORM_CLIENT,
            "clientInfo": {"name": "x", "version": "1"},
        }
        status, headers, body = client.post(client.request("initialize", params), client.headers(session=False))
        error = json.loads(body)["error"]
        self.assertEqual((status, error["code"]), (404, main.METHOD_NOT_FOUND))
        self.assertEqual(error["data"], {"supported": list(main.SUPPORTED_VERSIONS)})
        self.assertNotIn("mcp-session-id", headers)
        client.session_id = "made-up"
        status, _, body = client.post(client.request("ping"))
        self.assertEqual(json.loads(body)["error"]["code"], main.METHOD_NOT_FOUND)  # the core's, not a session's
        self.assertEqual(client.post(b"", method="DELETE")[0], 405)  # no session to end: the plain 405


class LegacyStreamsDoNotStarveTests(unittest.TestCase):
    """With every legacy stream slot held by an open form, modern requests and form answers still get through."""

    def test_modern_requests_are_served_while_the_stream_limit_is_reached(self) -> None:
        self.assertLess(legacy_http.MAX_LEGACY_STREAMS, http_server.WORKER_THREADS)
        tokens = {"alice": procs.TOKEN, "bob": "bob-token-0123456789abcdefgh", "carol": "carol-token-0123456789abcdef"}
        path = procs.write_config(self, {
            "principals": {name: {"token": token, "workspaces": [support.WORKSPACE]} for name, token in tokens.items()},
            "stdioPrincipal": "alice",
            "notes": [{"id": note.id, "title": note.title, "uri": note.uri} for note in main.lesson_notes()],
            "keys": [procs.SECRET],
        })  # fmt: skip
        server = procs.HttpServer(self, "--config", path, env=procs.server_env())
        open_forms: list[Any] = []
        per_session = legacy_http.MAX_PENDING_PER_SESSION
        for name in ("alice", "bob"):  # one principal alone may not take every slot
            mine = 0
            while (
                mine < legacy_http.MAX_LEGACY_STREAMS_PER_PRINCIPAL and len(open_forms) < legacy_http.MAX_LEGACY_STREAMS
            ):
                client = HttpLegacyClient(self, server.port, token=tokens[name])
                client.initialize()
                for _ in range(
                    min(
                        per_session,
                        legacy_http.MAX_LEGACY_STREAMS_PER_PRINCIPAL - mine,
                        legacy_http.MAX_LEGACY_STREAMS - len(open_forms),
                    )
                ):
                    _, stream = client.delete()
                    open_forms.append((client, stream, stream.event()))
                    mine += 1
        self.assertEqual(len(open_forms), legacy_http.MAX_LEGACY_STREAMS)
        extra = HttpLegacyClient(self, server.port, token=tokens["carol"])
        extra.initialize()
        busy = extra.call("tools/call", {"name": main.TOOL_NAME, "arguments": tps()})["result"]
        self.assertTrue(busy["isError"])
        self.assertIn("Too many forms are open", texts(busy))
        self.assertEqual(modern_choices(server.port, self), ALL_LESSON_NOTES)  # modern: not starved
        for client, stream, form in open_forms:
            self.assertEqual(client.answer(form, {"action": "cancel"}), 202)
            self.assertFalse(stream.event()["result"]["structuredContent"]["deleted"])
        _, stream = extra.delete()  # slots are free again
        self.assertEqual(stream.message()["method"], "elicitation/create")


# ------------------------------------------------------------------ in process: the bounds and the clean-up


class InProcess:
    """A LegacyHttp over an in-memory lesson server, driven with engine Request objects."""

    def __init__(
        self, test: unittest.TestCase, answer_timeout: float = procs.GUARD, server: frame.Server | None = None
    ) -> None:
        self.clock = support.Clock()  # the sessions' idle clock; the core keeps its own
        self.server = server or support.make_server()
        self.sessions = legacy_http.LegacyHttp(
            self.server, clock=self.clock, answer_timeout=answer_timeout, log=support.Log()
        )
        test.addCleanup(self.sessions.close)
        self.test = test
        self.ids = 0

    def route(
        self,
        message: dict[str, Any] | bytes,
        session_id: str | None = None,
        principal: str = support.PRINCIPAL,
        method: str = "POST",
    ) -> Any:
        headers = [("Content-Type", "application/json")]
        if session_id is not None:
            headers.append(("Mcp-Session-Id", session_id))
        body = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.last = http_server.Request(
            method, "/mcp", "HTTP/1.1", support.engine_headers(headers), body, ("127.0.0.1", 1), threading.Event()
        )
        return self.sessions.route(self.last, principal)

    def live(self, session_id: str) -> legacy.LegacySession:
        """The session `session_id` names, which must still be open."""
        core = self.sessions.session(session_id)
        if core is None:
            raise AssertionError(f"session {session_id!r} is gone")
        return core

    def initialize(self, principal: str = support.PRINCIPAL, capabilities: dict[str, Any] = FORM_CLIENT) -> str:
        params = {
            "protocolVersion": legacy.LATEST_LEGACY_VERSION,
            "capabilities": capabilities,
            "clientInfo": {"name": "t", "version": "1"},
        }
        response = self.route(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}, principal=principal
        )
        session_id = dict(response.headers)["Mcp-Session-Id"]
        self.test.assertEqual(
            self.route({"jsonrpc": "2.0", "method": "notifications/initialized"}, session_id, principal).status, 202
        )
        return session_id

    def ping(self, session_id: str, principal: str = support.PRINCIPAL) -> int:
        return self.route({"jsonrpc": "2.0", "id": "p", "method": "ping"}, session_id, principal).status

    def open_form(self, session_id: str, principal: str = support.PRINCIPAL) -> tuple[Any, dict[str, Any]]:
        """A delete call that must become a stream: (the stream, its first event's message)."""
        self.ids += 1
        message = {
            "jsonrpc": "2.0",
            "id": self.ids,
            "method": "tools/call",
            "params": {"name": main.TOOL_NAME, "arguments": tps()},
        }
        response = self.route(message, session_id, principal)
        self.test.assertIsInstance(response, http_server.StreamResponse)
        self.test.addCleanup(response.stream.close)
        return response.stream, event(next(response.stream))

    def call_result(self, session_id: str, principal: str = support.PRINCIPAL) -> dict[str, Any]:
        """A delete call expected to be answered at once with JSON: its result."""
        self.ids += 1
        message = {
            "jsonrpc": "2.0",
            "id": self.ids,
            "method": "tools/call",
            "params": {"name": main.TOOL_NAME, "arguments": tps()},
        }
        response = self.route(message, session_id, principal)
        self.test.assertIsInstance(response, http_server.Response)
        return json.loads(response.body)["result"]


def fill_streams(side: InProcess, principals: list[str], streams: list[Any], total: int) -> None:
    """Open forms as `principals` in turn, each up to its share, until `total` streams are open."""
    for principal in principals:
        session_id, in_session = side.initialize(principal), 0
        for _ in range(legacy_http.MAX_LEGACY_STREAMS_PER_PRINCIPAL):
            if len(streams) == total:
                return
            if in_session == legacy_http.MAX_PENDING_PER_SESSION:
                session_id, in_session = side.initialize(principal), 0
            streams.append(side.open_form(session_id, principal)[0])
            in_session += 1


def shared_workspace_server(principals: list[str]) -> frame.Server:
    """The lesson server with every one of `principals` allowed on the lesson workspace."""
    return frame.notes_server(
        keys=[support.KEY],
        notes=stores.MemoryStore(main.lesson_notes(), main.MemoryReplayStore(support.Clock())),
        policy=main.AuthorizationPolicy({name: [support.WORKSPACE] for name in principals}),
        clock=support.Clock(),
        log=support.Log(),
    )


def event(chunk: bytes) -> dict[str, Any]:
    """The message of one SSE event chunk (exactly `event: message`, one data line, a blank line)."""
    head, data, blank = chunk.split(b"\n", 2)[0], chunk.split(b"\n")[1], chunk[-2:]
    assert head == b"event: message" and data.startswith(b"data: ") and blank == b"\n\n", chunk
    return json.loads(data[len(b"data: ") :])


class SessionBoundsTests(unittest.TestCase):
    """Sessions per principal and idle expiry, each on both sides."""

    def test_sessions_up_to_the_per_principal_limit_all_stay_live(self) -> None:
        legacy_side = InProcess(self)
        ids = [legacy_side.initialize() for _ in range(legacy_http.MAX_SESSIONS_PER_PRINCIPAL)]
        self.assertEqual([legacy_side.ping(session_id) for session_id in ids], [200] * len(ids))
        self.assertEqual(legacy_side.sessions.session_count(support.PRINCIPAL), legacy_http.MAX_SESSIONS_PER_PRINCIPAL)

    def test_one_session_over_the_limit_evicts_the_least_recently_used_of_that_principal_only(self) -> None:
        side = InProcess(self)
        bobs = side.initialize(principal="bob")
        ids = []
        for _ in range(legacy_http.MAX_SESSIONS_PER_PRINCIPAL):
            ids.append(side.initialize())
            side.clock.now += 1
        self.assertEqual(side.ping(ids[0]), 200)  # the first is now the most recently used
        side.clock.now += 1
        newest = side.initialize()
        self.assertEqual(side.ping(ids[1]), 404)  # evicted
        self.assertEqual(
            [side.ping(session_id) for session_id in [ids[0], *ids[2:], newest]],
            [200] * legacy_http.MAX_SESSIONS_PER_PRINCIPAL,
        )
        self.assertEqual(side.ping(bobs, principal="bob"), 200)
        self.assertEqual(side.sessions.session_count(support.PRINCIPAL), legacy_http.MAX_SESSIONS_PER_PRINCIPAL)

    def test_a_used_session_outlasts_a_full_table_of_handshake_only_sessions_of_its_principal(self) -> None:
        side = InProcess(self)
        host = side.initialize()
        self.assertEqual(side.ping(host), 200)  # in use
        side.clock.now += 60
        runs = []
        for _ in range(legacy_http.MAX_SESSIONS_PER_PRINCIPAL):  # short runs: initialize, exit without DELETE
            side.clock.now += 1
            runs.append(side.initialize())
        self.assertEqual(side.ping(host), 200)  # still live, though least recently used
        self.assertEqual(side.ping(runs[0]), 404)  # the oldest handshake-only session gave way
        self.assertEqual([side.ping(session_id) for session_id in runs[1:]], [200] * (len(runs) - 1))
        self.assertEqual(side.sessions.session_count(support.PRINCIPAL), legacy_http.MAX_SESSIONS_PER_PRINCIPAL)

    def test_a_session_with_a_form_open_outlasts_a_full_table_of_used_sessions(self) -> None:
        side = InProcess(self)
        host = side.initialize()
        stream, form = side.open_form(host)  # least recently used from here on
        for _ in range(legacy_http.MAX_SESSIONS_PER_PRINCIPAL):
            side.clock.now += 1
            self.assertEqual(side.ping(side.initialize()), 200)
        self.assertEqual(
            side.route({"jsonrpc": "2.0", "id": form["id"], "result": accepted("note-7")}, host).status, 202
        )
        self.assertEqual(event(next(stream))["result"]["structuredContent"], {"deleted": True, "noteId": "note-7"})
        self.assertEqual(side.ping(host), 200)

    def test_when_every_session_was_used_the_least_recently_used_gives_way(self) -> None:
        side = InProcess(self)
        used = []
        for _ in range(legacy_http.MAX_SESSIONS_PER_PRINCIPAL):
            used.append(side.initialize())
            self.assertEqual(side.ping(used[-1]), 200)
            side.clock.now += 1
        self.assertEqual(side.ping(used[0]), 200)  # now the most recently used
        side.initialize()
        self.assertEqual(side.ping(used[1]), 404)
        self.assertEqual(side.ping(used[0]), 200)

    def test_a_session_idle_exactly_the_limit_is_still_live(self) -> None:
        side = InProcess(self)
        session_id = side.initialize()
        side.clock.now += legacy_http.SESSION_IDLE_SECONDS
        self.assertEqual(side.ping(session_id), 200)

    def test_a_session_idle_past_the_limit_is_404_and_gone(self) -> None:
        side = InProcess(self)
        session_id = side.initialize()
        core = side.live(session_id)
        side.clock.now += legacy_http.SESSION_IDLE_SECONDS + 1
        self.assertEqual(side.ping(session_id), 404)
        self.assertIsNone(side.sessions.session(session_id))
        self.assertTrue(core.closed)

    def test_a_session_with_a_form_open_does_not_expire(self) -> None:
        side = InProcess(self)
        session_id = side.initialize()
        stream, form = side.open_form(session_id)
        side.clock.now += legacy_http.SESSION_IDLE_SECONDS + 1
        side.initialize()  # sweeps expired sessions
        self.assertEqual(
            side.route({"jsonrpc": "2.0", "id": form["id"], "result": accepted("note-7")}, session_id).status, 202
        )
        self.assertEqual(event(next(stream))["result"]["structuredContent"], {"deleted": True, "noteId": "note-7"})


class StreamBoundsTests(unittest.TestCase):
    """Forms waiting per session and legacy streams per server, each on both sides."""

    def test_forms_up_to_the_per_session_limit_each_get_a_stream(self) -> None:
        side = InProcess(self)
        session_id = side.initialize()
        forms = [side.open_form(session_id)[1] for _ in range(legacy_http.MAX_PENDING_PER_SESSION)]
        self.assertEqual(len({form["id"] for form in forms}), legacy_http.MAX_PENDING_PER_SESSION)
        self.assertEqual(side.live(session_id).pending(), legacy_http.MAX_PENDING_PER_SESSION)

    def test_one_form_over_the_per_session_limit_is_a_tool_error_and_asks_nothing(self) -> None:
        side = InProcess(self)
        session_id = side.initialize()
        for _ in range(legacy_http.MAX_PENDING_PER_SESSION):
            side.open_form(session_id)
        result = side.call_result(session_id)
        self.assertTrue(result["isError"])
        self.assertIn("Too many forms are waiting", texts(result))
        self.assertEqual(side.live(session_id).pending(), legacy_http.MAX_PENDING_PER_SESSION)
        self.assertEqual(len(support.note_ids(side.server)), len(main.lesson_notes()))

    def test_streams_up_to_the_server_limit_open_and_one_more_is_refused_until_one_ends(self) -> None:
        side, streams = InProcess(self, server=shared_workspace_server(["alice", "bob", "carol"])), list[Any]()
        fill_streams(side, ["alice", "bob"], streams, legacy_http.MAX_LEGACY_STREAMS)
        self.assertEqual(len(streams), legacy_http.MAX_LEGACY_STREAMS)
        last = "carol"
        fresh = side.initialize(last)
        busy = side.call_result(fresh, last)
        self.assertIn("Too many forms are open on this server", texts(busy))
        self.assertEqual(side.live(fresh).pending(), 0)
        streams[0].close()  # as the engine does when the client goes away
        self.assertEqual(side.open_form(fresh, last)[1]["method"], "elicitation/create")

    def test_one_principal_holds_at_most_its_share_and_another_still_opens_a_form(self) -> None:
        self.assertLess(legacy_http.MAX_LEGACY_STREAMS_PER_PRINCIPAL, legacy_http.MAX_LEGACY_STREAMS)
        side = InProcess(self, server=shared_workspace_server(["alice", "bob"]))
        alices = [side.initialize("alice") for _ in range(2)]  # the share spans sessions
        streams = [
            side.open_form(alices[k % 2], "alice")[0] for k in range(legacy_http.MAX_LEGACY_STREAMS_PER_PRINCIPAL)
        ]
        busy = side.call_result(alices[0], "alice")
        self.assertTrue(busy["isError"])
        self.assertEqual(texts(busy), legacy_http.PRINCIPAL_STREAMS_BUSY)
        self.assertEqual(sum(side.live(sid).pending() for sid in alices), legacy_http.MAX_LEGACY_STREAMS_PER_PRINCIPAL)
        bobs = side.initialize("bob")
        self.assertEqual(side.open_form(bobs, "bob")[1]["method"], "elicitation/create")  # not locked out
        streams[0].close()
        self.assertEqual(side.open_form(alices[0], "alice")[1]["method"], "elicitation/create")  # her share is back
        self.assertEqual(len(support.note_ids(side.server)), len(main.lesson_notes()))  # nothing was deleted


class AbandonedFormTests(unittest.TestCase):
    """An unanswered form, a vanished client and a DELETE mid-form: nothing consumed, nothing left behind."""

    def test_an_unanswered_form_ends_the_stream_with_a_tool_error_and_frees_everything(self) -> None:
        side = InProcess(self, answer_timeout=0)
        session_id = side.initialize()
        stream, form = side.open_form(session_id)
        withdrawn = event(next(stream))
        self.assertEqual(
            (withdrawn["method"], withdrawn["params"]["requestId"]), ("notifications/cancelled", form["id"])
        )
        result = event(next(stream))["result"]
        self.assertTrue(result["isError"])
        self.assertIn("form was not answered", texts(result))
        self.assertEqual(list(stream), [])  # the stream ends
        self.assertEqual(side.live(session_id).pending(), 0)
        self.assertEqual(side.route({"jsonrpc": "2.0", "id": form["id"], "result": accepted()}, session_id).status, 202)
        self.assertEqual(
            len(support.note_ids(side.server)), len(main.lesson_notes())
        )  # the late answer consumed nothing

    def test_a_client_gone_mid_form_ends_the_stream_unanswered_and_frees_everything(self) -> None:
        side = InProcess(self)
        session_id = side.initialize()
        stream, form = side.open_form(session_id)
        side.last.gone.set()  # what the engine does when the peer closes its connection
        self.assertEqual(list(stream), [])  # no result: nobody is there to read it
        stream.close()
        self.assertEqual(side.live(session_id).pending(), 0)
        self.assertEqual(side.route({"jsonrpc": "2.0", "id": form["id"], "result": accepted()}, session_id).status, 202)
        self.assertEqual(len(support.note_ids(side.server)), len(main.lesson_notes()))

    def test_the_engine_closing_a_stream_abandons_its_form(self) -> None:
        side = InProcess(self)
        session_id = side.initialize()
        stream, form = side.open_form(session_id)
        stream.close()
        stream.close()  # idempotent: the slot is given back once
        self.assertEqual(side.live(session_id).pending(), 0)
        side.route({"jsonrpc": "2.0", "id": form["id"], "result": accepted()}, session_id)
        self.assertEqual(len(support.note_ids(side.server)), len(main.lesson_notes()))

    def test_delete_mid_form_ends_its_stream_unanswered(self) -> None:
        side = InProcess(self)
        session_id = side.initialize()
        stream, _ = side.open_form(session_id)
        self.assertEqual(side.route(b"", session_id, method="DELETE").status, 200)
        self.assertEqual(list(stream), [])
        self.assertEqual(side.ping(session_id), 404)
        self.assertEqual(len(support.note_ids(side.server)), len(main.lesson_notes()))


class RoutingTests(unittest.TestCase):
    """Which messages are legacy: decided without touching the modern path's answers."""

    def test_modern_and_sessionless_messages_are_left_to_the_core(self) -> None:
        side = InProcess(self)
        session_id = side.initialize()
        self.assertIsNone(side.route(request("server/discover"), session_id))  # modern _meta wins
        self.assertIsNone(side.route(request("initialize")))
        self.assertIsNone(side.route({"jsonrpc": "2.0", "id": 1, "method": "ping"}))  # no session, no legacy header
        self.assertIsNone(side.route(b"{not json", session_id))  # the core's parse error
        self.assertIsNone(side.route(b"", method="DELETE"))  # the core's 405

    def test_a_failed_initialize_creates_no_session(self) -> None:
        side = InProcess(self)
        response = side.route(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
        )
        self.assertEqual(json.loads(response.body)["error"]["code"], main.INVALID_PARAMS)
        self.assertNotIn("Mcp-Session-Id", dict(response.headers))
        self.assertEqual(side.sessions.session_count(), 0)

    def test_roots_are_asked_on_the_stream_of_a_failing_call_and_only_suggest(self) -> None:
        side = InProcess(self)
        params = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}, "roots": {}},
            "clientInfo": {"name": "t", "version": "1"},
        }
        session_id = dict(side.route({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}).headers)[
            "Mcp-Session-Id"
        ]
        side.route({"jsonrpc": "2.0", "method": "notifications/initialized"}, session_id)
        evil = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": main.TOOL_NAME, "arguments": tps(workspace=support.WORKSPACE + "-evil")},
        }
        stream = side.route(evil, session_id).stream
        self.addCleanup(stream.close)
        asked = event(next(stream))
        self.assertEqual((asked["method"], asked["id"]), ("roots/list", "roots/list"))
        answer = {"jsonrpc": "2.0", "id": "roots/list", "result": {"roots": [{"uri": support.WORKSPACE}]}}
        self.assertEqual(side.route(answer, session_id).status, 202)
        result = event(next(stream))["result"]
        self.assertTrue(result["isError"])
        self.assertIn(f"roots include {support.WORKSPACE},", texts(result))
        self.assertIn("evil-1", support.note_ids(side.server))  # the hint ran nothing


if __name__ == "__main__":
    unittest.main()


class FixtureStreamTests(unittest.TestCase):
    """With the conformance fixtures: notifications and live sampling on the POST's stream, other methods as JSON."""

    def setUp(self) -> None:
        server = support.make_server()
        fixtures.install(server)
        self.app = InProcess(self, server=server)
        self.session_id = self.app.initialize(capabilities={"sampling": {}, "elicitation": {}})

    def open(self, name: str, arguments: dict[str, Any], **meta: Any) -> Any:
        """A tools/call that must become a stream: the stream."""
        message = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": meta},
        }
        response = self.app.route(message, self.session_id)
        self.assertIsInstance(response, http_server.StreamResponse)
        self.addCleanup(response.stream.close)
        return response.stream

    def test_a_tools_progress_goes_on_its_stream_ahead_of_the_result(self) -> None:
        events = [event(chunk) for chunk in self.open("test_tool_with_progress", {}, progressToken="t-1")]
        self.assertEqual([e.get("method") for e in events], ["notifications/progress"] * 3 + [None])
        self.assertEqual({e["params"]["progressToken"] for e in events[:3]}, {"t-1"})
        self.assertEqual(events[3]["id"], 9)
        self.assertNotIn("resultType", events[3]["result"])

    def test_a_call_without_notifications_is_still_plain_json(self) -> None:
        message = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "test_tool_with_progress", "arguments": {}},
        }
        response = self.app.route(message, self.session_id)
        self.assertIsInstance(response, http_server.Response)
        self.assertEqual(json.loads(response.body)["result"]["content"][0]["text"], "Progress complete.")

    def test_sampling_is_asked_on_the_calls_stream_and_answered_by_a_post(self) -> None:
        stream = self.open("test_sampling", {"prompt": "Test prompt for sampling"})
        asked = event(next(stream))
        self.assertEqual((asked["method"], asked["params"]["maxTokens"]), ("sampling/createMessage", 100))
        answer = {"role": "assistant", "content": {"type": "text", "text": "Hi"}, "model": "m", "stopReason": "endTurn"}
        self.assertEqual(
            self.app.route({"jsonrpc": "2.0", "id": asked["id"], "result": answer}, self.session_id).status, 202
        )
        final = event(next(stream))
        self.assertEqual(final["result"]["content"][0]["text"], "LLM response: Hi")
        self.assertEqual(list(stream), [])
        self.assertEqual(self.app.sessions.session(self.session_id).pending(), 0)  # type: ignore[union-attr]

    def test_forwarded_methods_and_set_level_are_answered_with_json(self) -> None:
        for method, params, expected in (
            ("logging/setLevel", {"level": "info"}, {}),
            ("resources/subscribe", {"uri": "test://watched-resource"}, {}),
            (
                "prompts/get",
                {"name": "test_simple_prompt"},
                {
                    "description": "A prompt without arguments.",
                    "messages": [
                        {"role": "user", "content": {"type": "text", "text": "This is a simple prompt for testing."}}
                    ],
                },
            ),
        ):
            with self.subTest(method=method):
                response = self.app.route(
                    {"jsonrpc": "2.0", "id": 3, "method": method, "params": params}, self.session_id
                )
                self.assertEqual((response.status, json.loads(response.body)["result"]), (200, expected))
