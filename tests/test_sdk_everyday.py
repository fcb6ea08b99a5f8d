"""The official MCP Python SDK's client runs the everyday tools over stdio: list, search, read on, edit, move with link
rewrite.

The client (the `mcp` package, not this project's code: the test imports none of it) runs
in its own process against `serve.py --stdio --notes-tools` over a Markdown folder: it
lists the workspace, searches, reads a note in two windows, asks for an exact
find-and-replace and answers the diff form with accept, then moves the note and answers
that form, which lists the note whose [[link]] the move rewrites, ticking both boxes; it
prints what it saw. Without the package the class skips with one line
(`.ci/run` installs it).
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

PLAN = "---\ntags: [work]\n---\n# Launch plan\n\nShip on Friday.\nTell the Friday crew.\n"
INDEX = "# Index\n\nSee [[plan]].\n"

DRIVER = """
import asyncio, json, os, sys
from mcp import Client, StdioServerParameters
from mcp.types import ElicitResult, Implementation
repo, notes, db = sys.argv[1:4]
ws = "file://" + notes
forms, seen = [], {}
async def answer(context, params):
    forms.append(params.message)
    boxes = params.requested_schema["properties"]
    return ElicitResult(action="accept", content={name: True for name in boxes})
async def main():
    server = StdioServerParameters(command=sys.executable, args=[os.path.join(repo, "code", "serve.py"), "--stdio",
        "--notes-dir", notes, "--db", db, "--notes-tools"])
    info = Implementation(name="sdk-client", version="1")
    async with Client(server, client_info=info, elicitation_callback=answer) as client:
        listed = await client.call_tool("notes_list", {"workspaceUri": ws, "limit": 1})
        cursor = listed.structured_content["nextCursor"]
        more = await client.call_tool("notes_list", {"workspaceUri": ws, "cursor": cursor})
        seen["listed"] = listed.structured_content["entries"] + more.structured_content["entries"]
        found = await client.call_tool("notes_search", {"workspaceUri": ws, "query": "friday"})
        note_id = found.structured_content["results"][0]["noteId"]
        head = await client.call_tool("notes_read", {"workspaceUri": ws, "noteId": note_id, "length": 10})
        tail = await client.call_tool("notes_read", {"workspaceUri": ws, "noteId": note_id,
                                                     "offset": head.structured_content["nextOffset"]})
        seen["read"] = [head.structured_content, tail.structured_content]
        edit = await client.call_tool("notes_edit", {"workspaceUri": ws, "noteId": note_id, "oldText": "Friday",
                                                     "newText": "Monday", "expectedMatches": 2,
                                                     "version": tail.structured_content["version"]})
        seen["edit"] = edit.structured_content
        move = await client.call_tool("notes_move",
                                      {"workspaceUri": ws, "noteId": note_id, "newPath": "projects/launch.md"})
        seen["move"] = move.structured_content
    print(json.dumps({"forms": forms, **seen}))
asyncio.run(main())
"""


@unittest.skipUnless(
    importlib.util.find_spec("mcp") is not None,
    "the official MCP Python SDK is not installed (pip install mcp==2.3.0; .ci/run installs it)",
)
class OfficialSdkEverydayTools(unittest.TestCase):
    def setUp(self) -> None:
        self.base = tempfile.mkdtemp(prefix="sdk-everyday-")
        self.addCleanup(shutil.rmtree, self.base, ignore_errors=True)
        self.notes = os.path.join(self.base, "Notes")
        os.makedirs(os.path.join(self.notes, "projects"))
        for name, text in (("plan.md", PLAN), ("projects/index.md", INDEX)):
            with open(os.path.join(self.notes, name), "w", encoding="utf-8") as handle:
                handle.write(text)

    def test_list_search_read_on_edit_with_a_form_and_move_rewriting_links_with_a_form(self) -> None:
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, support.ROOT, self.notes, os.path.join(self.base, "nonces.db")],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.base,
        )
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        self.assertEqual(
            [(e["kind"], e["name"]) for e in seen["listed"]], [("folder", "projects"), ("note", "plan.md")]
        )
        head, tail = seen["read"]
        self.assertEqual((head["offset"], len(head["text"]), tail["offset"]), (0, 10, 10))
        self.assertEqual(
            head["text"] + tail["text"], PLAN.split("---\n", 2)[2]
        )  # the text after the frontmatter, whole
        self.assertEqual(head["length"], len(head["text"] + tail["text"]))
        edit_form, move_form = seen["forms"]  # one form each, shown before anything was written
        self.assertIn("-Ship on Friday.", edit_form)
        self.assertIn("+Tell the Monday crew.", edit_form)
        self.assertTrue(seen["edit"]["updated"])
        self.assertIn("projects/launch.md", move_form)
        self.assertIn(
            '"Index" (projects/index.md): [[plan]] \u2192 [[launch]]', move_form
        )  # the link rewrite, in the same form
        self.assertTrue(seen["move"]["moved"], seen["move"])
        with open(os.path.join(self.notes, "projects", "index.md"), encoding="utf-8") as handle:
            self.assertEqual(handle.read(), INDEX.replace("[[plan]]", "[[launch]]"))
        self.assertFalse(os.path.exists(os.path.join(self.notes, "plan.md")))
        with open(os.path.join(self.notes, "projects", "launch.md"), encoding="utf-8") as handle:
            self.assertEqual(handle.read(), PLAN.replace("Friday", "Monday"))


if __name__ == "__main__":
    unittest.main()
