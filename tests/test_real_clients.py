"""Real MCP clients complete a confirmed notes_update over stdio: the official Python SDK and fastmcp.

Each client runs in its own process (the clients are not this project's code and the
tests import neither): it searches, reads, asks for an update, answers the diff form the
server sends with accept, and prints what it saw. The clients are optional peers: without
them each class skips with one line (`.ci/run` installs both, so CI runs them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from helpers import support

FRONT = "---\ntags: [work]\n---\n"
BODY = "# Launch plan\n\nShip on Friday.\n"

# The driver each client runs: argv = repository, notes folder, confirmations database.
SDK_DRIVER = """
import asyncio, json, os, sys
from mcp import Client, StdioServerParameters
from mcp.types import ElicitResult, Implementation
repo, notes, db = sys.argv[1:4]
ws = "file://" + notes
shown = []
async def answer(context, params):
    shown.append(params.message)
    return ElicitResult(action="accept", content={"confirm": True})
async def main():
    server = StdioServerParameters(command=sys.executable, args=[os.path.join(repo, "code", "serve.py"), "--stdio",
        "--notes-dir", notes, "--db", db, "--notes-tools"])
    info = Implementation(name="sdk-client", version="1")
    async with Client(server, client_info=info, elicitation_callback=answer) as client:
        found = await client.call_tool("notes_search", {"workspaceUri": ws, "query": "friday"})
        note_id = found.structured_content["results"][0]["noteId"]
        read = await client.call_tool("notes_read", {"workspaceUri": ws, "noteId": note_id})
        body = read.structured_content["text"].replace("Friday", "Monday")
        done = await client.call_tool("notes_update", {"workspaceUri": ws, "noteId": note_id, "body": body,
                                                       "version": read.structured_content["version"]})
        print(json.dumps({"forms": shown, "result": done.structured_content}))
asyncio.run(main())
"""

# A "model" that is given only the text content of each result (as openai-agents, agno and
# autogen-ext give theirs): it finds the fields it needs for the next call in that text alone.
TEXT_ONLY_DRIVER = """
import asyncio, json, os, sys
from mcp import Client, StdioServerParameters
from mcp.types import ElicitResult, Implementation
repo, notes, db = sys.argv[1:4]
ws = "file://" + notes
shown, seen = [], []
async def answer(context, params):
    shown.append(params.message)
    return ElicitResult(action="accept", content={"confirm": True})
def text_of(result):
    text = "\\n".join(block.text for block in result.content if block.type == "text")
    seen.append(text)
    return text
def fields_in(text):
    for line in reversed(text.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise SystemExit("the text names no fields: " + text)
async def main():
    server = StdioServerParameters(command=sys.executable, args=[os.path.join(repo, "code", "serve.py"), "--stdio",
        "--notes-dir", notes, "--db", db, "--notes-tools"])
    info = Implementation(name="text-only", version="1")
    async with Client(server, client_info=info, elicitation_callback=answer) as client:
        found = fields_in(text_of(await client.call_tool("notes_search", {"workspaceUri": ws, "query": "friday"})))
        note_id = found["results"][0]["noteId"]
        read = fields_in(text_of(await client.call_tool("notes_read", {"workspaceUri": ws, "noteId": note_id})))
        done = await client.call_tool("notes_update", {"workspaceUri": ws, "noteId": read["noteId"],
                                                       "body": read["text"].replace("Friday", "Monday"),
                                                       "version": read["version"]})
        print(json.dumps({"forms": shown, "seen": seen, "result": fields_in(text_of(done))}))
asyncio.run(main())
"""

FASTMCP_DRIVER = """
import asyncio, json, os, sys
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
repo, notes, db = sys.argv[1:4]
ws = "file://" + notes
shown = []
async def answer(message, response_type, params, context):
    shown.append(message)
    return {"confirm": True}
async def main():
    transport = StdioTransport(command=sys.executable, args=[os.path.join(repo, "code", "serve.py"), "--stdio",
        "--notes-dir", notes, "--db", db, "--notes-tools"])
    async with Client(transport, elicitation_handler=answer) as client:
        found = await client.call_tool("notes_search", {"workspaceUri": ws, "query": "friday"})
        note_id = found.structured_content["results"][0]["noteId"]
        read = await client.call_tool("notes_read", {"workspaceUri": ws, "noteId": note_id})
        body = read.structured_content["text"].replace("Friday", "Monday")
        done = await client.call_tool("notes_update", {"workspaceUri": ws, "noteId": note_id, "body": body,
                                                       "version": read.structured_content["version"]})
        print(json.dumps({"forms": shown, "result": done.structured_content}))
asyncio.run(main())
"""


def installed(package: str) -> bool:
    """True when `package` can be imported by this interpreter (looked up, not imported)."""
    return importlib.util.find_spec(package) is not None


class RealClientUpdate(support.ContractCase):
    """Mixed into one TestCase per client: its driver, and the package it needs."""

    driver = ""

    def setUp(self) -> None:
        self.base = tempfile.mkdtemp(prefix="real-client-")
        self.addCleanup(shutil.rmtree, self.base, ignore_errors=True)
        self.notes = os.path.join(self.base, "Notes")
        os.makedirs(self.notes)
        self.plan = os.path.join(self.notes, "plan.md")
        with open(self.plan, "w", encoding="utf-8") as handle:
            handle.write(FRONT + BODY)

    def test_the_client_answers_the_diff_form_and_exactly_the_shown_bytes_are_written_frontmatter_kept(self) -> None:
        db = os.path.join(self.base, "nonces.db")
        done = subprocess.run(
            [sys.executable, "-c", self.driver, support.ROOT, self.notes, db],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.base,
        )
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        (form,) = seen["forms"]  # one form: the diff, shown before anything was written
        self.assertIn("-Ship on Friday.", form)
        self.assertIn("+Ship on Monday.", form)
        self.assertTrue(seen["result"]["updated"])
        with open(self.plan, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), FRONT + BODY.replace("Friday", "Monday"))
        trash = os.path.join(self.notes, ".trash")
        (kept,) = os.listdir(trash)  # the old text, restorable
        with open(os.path.join(trash, kept), encoding="utf-8") as handle:
            self.assertEqual(handle.read(), FRONT + BODY)


@unittest.skipUnless(
    installed("mcp"), "the official MCP Python SDK is not installed (pip install mcp==2.3.0; .ci/run installs it)"
)
class OfficialPythonSdk(RealClientUpdate, unittest.TestCase):
    driver = SDK_DRIVER


@unittest.skipUnless(
    installed("mcp"), "the official MCP Python SDK is not installed (pip install mcp==2.3.0; .ci/run installs it)"
)
class TextOnlyModel(RealClientUpdate, unittest.TestCase):
    """The official SDK, with a model that reads only each result's text: the version notes_update needs is in it."""

    driver = TEXT_ONLY_DRIVER


@unittest.skipUnless(installed("fastmcp"), "fastmcp is not installed (pip install fastmcp==4.2.3; .ci/run installs it)")
class FastMcp(RealClientUpdate, unittest.TestCase):
    driver = FASTMCP_DRIVER


if __name__ == "__main__":
    unittest.main()
