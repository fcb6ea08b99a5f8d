"""The lesson as a learner meets it: the demo, the file's section order, the shipped skill."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unittest

from support import CODE, PRINCIPAL, ROOT, call, make_server, tps

import main

SECTIONS = [
    "Protocol constants and named error codes",
    "The one error type and the one exception-to-response boundary",
    "JSON-RPC envelope",
    "Request _meta",
    "Scope: workspace URIs, containment, authorization",
    "The sealed requestState",
    "The in-memory TTL replay store",
    "The in-memory notes store",
    "The notes_delete tool",
    "server/discover",
    "tools/list",
    "handle()",
    "The demo",
    "The CLI",
]


class Demo(unittest.TestCase):
    def test_the_demo_prints_the_two_call_flow_and_the_notes_left_in_under_80_lines(self) -> None:
        done = subprocess.run(
            [sys.executable, os.path.join(CODE, "main.py")], capture_output=True, text=True, timeout=60, cwd=ROOT
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = done.stdout.splitlines()
        self.assertLessEqual(len(lines), 80)
        out = done.stdout
        for expected in ('"method":"server/discover"', '"method":"tools/list"', '"resultType":"input_required"',
                         '"id":2', '"structuredContent":{"deleted":true,"noteId":"note-14"}', "Notes left"):
            self.assertIn(expected, out)
        left = out.split("Notes left", 1)[1]
        self.assertNotIn("note-14", left)
        for kept in ("note-3", "note-7", "note-99", "evil-1", "tmp-1"):
            self.assertIn(kept, left)
        self.assertNotIn("Traceback", done.stderr)


class FileShape(unittest.TestCase):
    def test_main_py_presents_the_lesson_sections_in_order(self) -> None:
        with open(os.path.join(CODE, "main.py"), encoding="utf-8") as handle:
            source = handle.read()
        positions = []
        for number, title in enumerate(SECTIONS, start=1):
            match = re.search(rf"^\s*# (?:-+ )?{number}\. {re.escape(title)}", source, re.MULTILINE)
            self.assertIsNotNone(match, title)
            positions.append(match.start())
        self.assertEqual(positions, sorted(positions))

    def test_every_public_function_has_a_one_line_docstring(self) -> None:
        import inspect

        for name, value in vars(main).items():
            if name.startswith("_") or not (inspect.isfunction(value) or inspect.isclass(value)):
                continue
            if getattr(value, "__module__", None) != "main":
                continue
            with self.subTest(name=name):
                self.assertTrue(value.__doc__ and value.__doc__.strip(), name)

    def test_no_internal_detail_reaches_the_wire_on_an_unexpected_error(self) -> None:
        server = make_server()
        server.notes.candidates = lambda workspace, title: 1 / 0  # type: ignore[method-assign]
        response = server.handle(call(tps()), PRINCIPAL)
        self.assertEqual(response, {"jsonrpc": "2.0", "id": 1, "error": {"code": main.INTERNAL_ERROR, "message": "Internal error"}})
        self.assertTrue(any("ZeroDivisionError" in line for line in server.log))


class ShippedSkill(unittest.TestCase):
    def test_the_skill_covers_scope_authorization_mrtr_branches_binding_and_its_refusals(self) -> None:
        with open(os.path.join(ROOT, "outputs", "skill-elicitation-form-designer.md"), encoding="utf-8") as handle:
            text = handle.read().lower()
        for topic in ("workspaceuri", "authoriz", "containment", "input_required", "requeststate", "accept",
                      "decline", "cancel", "nonce", "expiry", "roots", "sandbox", "url mode", "password"):
            with self.subTest(topic=topic):
                self.assertIn(topic, text)


if __name__ == "__main__":
    unittest.main()
