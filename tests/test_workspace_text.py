"""Text no file name can hold, sent as `workspaceUri` over real HTTP: refused as invalid params by every tool and
store."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import unittest
from typing import Any

from helpers import procs
from helpers.support import WORKSPACE

import audit
import main

LONE_SURROGATES = ("\ud800", "\udfff", "a\udc80b")  # a high half alone, a low half alone, one inside a name


def value_for(schema: dict[str, Any]) -> Any:
    """A value the argument's schema accepts, so only workspaceUri is at fault."""
    if schema.get("type") == "integer":
        return schema.get("minimum", 1)
    return "x" * max(1, schema.get("minLength", 1))


class LoneSurrogateInProcess(unittest.TestCase):
    def test_parse_file_uri_refuses_a_lone_surrogate_as_a_scope_error_and_keeps_real_non_ascii_names(self) -> None:
        for text in LONE_SURROGATES:
            with self.subTest(text=ascii(text)):
                with self.assertRaises(main.ScopeError) as refused:
                    main.parse_file_uri(f"{WORKSPACE}/{text}")
                self.assertEqual(str(refused.exception), "must be valid UTF-8 text")
        self.assertEqual(main.parse_file_uri(f"{WORKSPACE}/caf\u00e9 \U0001f4dd")[-1], "caf\u00e9 \U0001f4dd")

    def test_the_audit_records_a_workspace_it_cannot_normalize_as_absent(self) -> None:
        for text in LONE_SURROGATES:
            with self.subTest(text=ascii(text)):
                params = {"name": main.TOOL_NAME, "arguments": {"workspaceUri": f"{WORKSPACE}/{text}", "title": "x"}}
                context = audit.context_of(main.Envelope(1, "tools/call", params))
                self.assertIsNone(context.workspace)
                self.assertEqual(context.tool, main.TOOL_NAME)  # the rest of the entry is still recorded
        params = {"name": main.TOOL_NAME, "arguments": {"workspaceUri": WORKSPACE + "/./", "title": "x"}}
        self.assertEqual(audit.context_of(main.Envelope(1, "tools/call", params)).workspace, WORKSPACE)


class LoneSurrogateOverHttp(unittest.TestCase):
    def serve(self, *args: str) -> procs.HttpServer:
        return procs.HttpServer(self, "--notes-tools", "--publish", *args)

    def tools_with_a_workspace(self, server: procs.HttpServer) -> list[dict[str, Any]]:
        conn = server.connect(self)
        message = {"jsonrpc": "2.0", "id": "list", "method": "tools/list", "params": {"_meta": main.request_meta({})}}
        status, _, body = procs.post(conn, message)
        self.assertEqual(status, 200, body)
        tools = [
            tool for tool in json.loads(body)["result"]["tools"] if "workspaceUri" in tool["inputSchema"]["properties"]
        ]
        self.assertGreaterEqual(len(tools), 7)  # notes_delete, the note tools, notes_publish
        return tools

    def check_every_tool(self, server: procs.HttpServer) -> None:
        conn = server.connect(self)
        for tool in self.tools_with_a_workspace(server):
            schema = tool["inputSchema"]
            for text in LONE_SURROGATES:
                with self.subTest(tool=tool["name"], text=ascii(text)):
                    arguments = {name: value_for(schema["properties"][name]) for name in schema.get("required", [])}
                    arguments["workspaceUri"] = f"{WORKSPACE}/{text}"
                    message = {
                        "jsonrpc": "2.0",
                        "id": 7,
                        "method": "tools/call",
                        "params": {"_meta": main.request_meta(), "name": tool["name"], "arguments": arguments},
                    }
                    status, _, body = procs.post(conn, message)
                    self.assertNotEqual(status, 500)
                    reply = json.loads(body)
                    self.assertEqual(reply.get("error", {}).get("code"), main.INVALID_PARAMS, reply)
                    self.assertNotIn("result", reply)
        self.assertEqual([line for line in server.stderr_lines if "Traceback" in line or "internal error" in line], [])

    def test_a_lone_surrogate_in_workspace_uri_is_32602_for_every_tool_in_the_memory_store_with_no_traceback(
        self,
    ) -> None:
        self.check_every_tool(self.serve())

    def test_a_lone_surrogate_in_workspace_uri_is_32602_for_every_tool_in_the_sqlite_store_with_no_traceback(
        self,
    ) -> None:
        folder = tempfile.mkdtemp(prefix="surrogate-")
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        self.check_every_tool(self.serve("--db", os.path.join(folder, "notes.db")))

    def test_a_lone_surrogate_in_workspace_uri_is_32602_for_every_tool_in_the_folder_store_with_no_traceback(
        self,
    ) -> None:
        folder = tempfile.mkdtemp(prefix="surrogate-")
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        notes = os.path.join(folder, "Notes")
        os.makedirs(notes)
        with open(os.path.join(notes, "tps.md"), "w", encoding="utf-8") as handle:
            handle.write("# TPS report\n")
        self.check_every_tool(self.serve("--notes-dir", notes, "--db", os.path.join(folder, "nonces.db")))


if __name__ == "__main__":
    unittest.main()
