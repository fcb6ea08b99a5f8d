"""The stdio transport, through a real `serve.py --stdio` subprocess."""

from __future__ import annotations

import json
import signal
import subprocess
import unittest

from helpers import procs, support
from helpers.support import accept, call, request, tps

import frame
import main


def padded(message: dict, size: int) -> bytes:
    """`message` as JSON padded with spaces to exactly `size` bytes (still one valid line)."""
    data = json.dumps(message).encode()
    return data + b" " * (size - len(data))


class StdioFramingTests(unittest.TestCase):
    """One compact JSON message per line, nothing else on stdout, bad lines do not kill it.

    One server for the class: each test reads every line it causes and changes no note.
    """

    server: procs.StdioServer

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = procs.StdioServer(procs.ClassScope(cls))  # type: ignore[arg-type]

    def test_a_line_over_the_limit_gets_one_error_and_the_server_keeps_serving(self) -> None:
        self.server.send(padded(request("server/discover", id="big"), frame.MAX_MESSAGE_BYTES + 1) + b"\n")
        error = self.server.receive()
        self.assertEqual(error["error"]["code"], main.INVALID_REQUEST)
        self.assertNotIn("id", error)
        self.assertEqual(self.server.exchange(request("server/discover", id=2))["id"], 2)

    def test_a_line_far_over_the_limit_is_discarded_to_its_end(self) -> None:
        self.server.send(b"[" * (5 * frame.MAX_MESSAGE_BYTES) + b"\n")
        self.assertEqual(self.server.receive()["error"]["code"], main.INVALID_REQUEST)
        self.assertEqual(self.server.exchange(request("server/discover", id=2))["id"], 2)

    def test_a_line_exactly_at_the_limit_is_served(self) -> None:
        self.server.send(padded(request("server/discover", id="edge"), frame.MAX_MESSAGE_BYTES) + b"\n")
        response = self.server.receive()
        self.assertEqual(response["id"], "edge")
        self.assertIn("result", response)

    def test_a_crlf_line_at_the_limit_is_served_like_an_lf_line_and_one_byte_more_is_refused(self) -> None:
        self.server.send(padded(request("server/discover", id="crlf"), frame.MAX_MESSAGE_BYTES) + b"\r\n")
        self.assertIn("result", self.server.receive())
        self.server.send(padded(request("server/discover", id="over"), frame.MAX_MESSAGE_BYTES + 1) + b"\r\n")
        self.assertEqual(self.server.receive()["error"]["code"], main.INVALID_REQUEST)

    def test_a_non_json_line_gets_a_parse_error_without_id(self) -> None:
        self.server.send(b"this is not json\n")
        self.assertEqual(
            self.server.receive(),
            {"jsonrpc": "2.0", "error": {"code": frame.PARSE_ERROR, "message": "Parse error: invalid JSON"}},
        )

    def test_blank_lines_are_ignored(self) -> None:
        self.server.send(b"\n   \n\r\n")
        self.assertEqual(self.server.exchange(request("server/discover", id=7))["id"], 7)

    def test_notifications_and_id_less_requests_get_no_reply(self) -> None:
        self.server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        self.server.send({"jsonrpc": "2.0", "method": "tools/call", "params": call(tps())["params"]})
        # The next line on stdout answers the next request: nothing came in between.
        self.assertEqual(self.server.exchange(request("server/discover", id=8))["id"], 8)
        # And the id-less tools/call never ran: all three TPS notes are still offered.
        form = self.server.exchange(call(tps(), id=9))["result"]
        self.assertEqual(
            len(form["inputRequests"][main.INPUT_KEY]["params"]["requestedSchema"]["properties"]["note_id"]["oneOf"]), 3
        )


class StdioFramingOwnServerTests(unittest.TestCase):
    """The framing tests that delete a note or end the process: a server each."""

    def setUp(self) -> None:
        self.server = procs.StdioServer(self)

    def test_a_full_confirmation_flow_deletes_the_chosen_note_once(self) -> None:
        first = self.server.exchange(call(tps(), id=1))["result"]
        self.assertEqual(first["resultType"], "input_required")
        retry = call(tps(), id=2, requestState=first["requestState"], inputResponses=accept("note-14"))
        done = self.server.exchange(retry)["result"]
        self.assertEqual(done["structuredContent"], {"deleted": True, "noteId": "note-14"})
        replay = dict(retry, id=3)
        self.assertEqual(self.server.exchange(replay)["error"]["code"], main.INVALID_PARAMS)
        again = self.server.exchange(call(tps(), id=4))["result"]
        offered = [
            o["const"]
            for o in again["inputRequests"][main.INPUT_KEY]["params"]["requestedSchema"]["properties"]["note_id"][
                "oneOf"
            ]
        ]
        self.assertEqual(offered, ["note-3", "note-7"])

    def test_stdout_carries_nothing_but_json_lines_and_eof_exits_zero(self) -> None:
        self.server.send(b"garbage\n\n")
        self.server.send(request("initialize", id=1))
        self.server.send(call(tps(), id=2))
        self.server.send(b"[1,2]\n")
        self.server.close_stdin()
        self.assertEqual(self.server.wait(), 0)
        lines = self.server.remaining_stdout()
        self.assertEqual(len(lines), 4)
        for line in lines:
            self.assertTrue(line.endswith(b"\n"))
            self.assertIsInstance(json.loads(line), dict)
        self.assertNotIn("Traceback", self.server.stderr_text())


class StdioShutdownTests(unittest.TestCase):
    """The process ends promptly and quietly: EOF, a closed stdout, or a signal."""

    def test_eof_on_stdin_exits_zero(self) -> None:
        server = procs.StdioServer(self)
        server.close_stdin()
        self.assertEqual(server.wait(), 0)
        self.assertEqual(server.remaining_stdout(), [])

    def test_a_broken_pipe_on_stdout_exits_zero_without_traceback(self) -> None:
        server = procs.StdioServer(self, read_stdout=False)  # stdout closed, stdin kept open
        server.send(request("server/discover", id=1))
        self.assertEqual(server.wait(), 0)
        self.assertNotIn("Traceback", server.stderr_text())
        self.assertNotIn("Exception ignored", server.stderr_text())

    def test_a_broken_pipe_first_met_by_a_legacy_call_ends_the_process_with_zero(self) -> None:
        from helpers import legacy_client

        import legacy

        server = procs.Process(
            self, ["--stdio"], procs.server_env(NOTES_MCP_SECRET=procs.SECRET), stdin=subprocess.PIPE
        )
        initialize = {
            "protocolVersion": legacy.LATEST_LEGACY_VERSION,
            "capabilities": legacy_client.FORM_CLIENT,
            "clientInfo": legacy_client.CLIENT_INFO,
        }
        assert server.proc.stdin is not None and server.proc.stdout is not None  # both piped above
        server.proc.stdin.write(
            json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize}).encode() + b"\n"
        )
        server.proc.stdin.flush()
        self.assertIn(b'"result"', server.proc.stdout.readline())
        server.proc.stdout.close()  # the client stops reading
        # The call's worker is the one to write next (its form request): it meets the broken pipe.
        params = {"name": main.TOOL_NAME, "arguments": tps()}
        server.proc.stdin.write(
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode() + b"\n"
        )
        server.proc.stdin.flush()
        self.assertEqual(server.wait(), 0)  # stdin is still open: the broken pipe alone ended it
        self.assertNotIn("Traceback", server.stderr_text())

    def test_sigterm_exits_zero_without_traceback(self) -> None:
        server = procs.StdioServer(self)
        self.assertEqual(server.exchange(request("server/discover", id=1))["id"], 1)  # it is serving
        server.proc.send_signal(signal.SIGTERM)
        self.assertEqual(server.wait(), 0)
        self.assertNotIn("Traceback", server.stderr_text())

    def test_sigint_exits_zero_without_traceback(self) -> None:
        server = procs.StdioServer(self)
        self.assertEqual(server.exchange(request("server/discover", id=1))["id"], 1)
        server.proc.send_signal(signal.SIGINT)
        self.assertEqual(server.wait(), 0)
        self.assertNotIn("Traceback", server.stderr_text())


class StdioPrincipalTests(unittest.TestCase):
    """stdio acts as the configured stdioPrincipal, and only within that principal's grants."""

    def test_stdio_acts_as_the_configured_stdio_principal(self) -> None:
        path = procs.write_config(
            self,
            {
                "principals": {
                    "alice": {"token": "a" * 20, "workspaces": [support.WORKSPACE]},
                    "bob": {"token": "b" * 20, "workspaces": ["file:///Users/bob/Notes"]},
                },
                "stdioPrincipal": "bob",
                "notes": [{"id": "n1", "title": "TPS report", "uri": support.WORKSPACE + "/n1.md"}],
            },
        )
        server = procs.StdioServer(self, "--config", path)
        refused = server.exchange(call(tps(), id=1))["result"]
        self.assertTrue(refused["isError"])
        self.assertNotIn("n1", json.dumps(refused))


if __name__ == "__main__":
    unittest.main()
