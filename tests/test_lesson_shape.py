"""The lesson as a learner meets it: the demo, the file's section order, the shipped skill."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unittest

from support import CODE, PRINCIPAL, ROOT, call, make_server, tps

import main

# The lesson's headings, in the lesson's order: the banners of code/main.py.
SECTIONS = [
    "The two problems, and explicit scope (Roots as a migration surface)",
    "The three-layer rule: authorization, containment, sandbox",
    "Elicitation delivered as input_required",
    "Capability negotiation per request",
    "Form mode",
    "Response branches",
    "Protecting destructive MRTR state: signing the state",
    "Protecting destructive MRTR state: the replay store",
    "Protecting destructive MRTR state: the live re-check",
    "The protocol frame: the JSON-RPC envelope",
    "The protocol frame: server/discover",
    "The protocol frame: tools/list",
    "The protocol frame: handle()",
    "The demo",
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
    def test_main_py_presents_the_lesson_headings_in_order_as_top_level_banners(self) -> None:
        with open(os.path.join(CODE, "main.py"), encoding="utf-8") as handle:
            source = handle.read()
        # A banner is a top-level comment between two rules of "=" (never indented in a class).
        banners = re.findall(r"^# =+\n# (\d+)\. (.+)\n# =+$", source, re.MULTILINE)
        self.assertEqual([title for _, title in banners], SECTIONS)
        self.assertEqual([int(number) for number, _ in banners], list(range(1, len(SECTIONS) + 1)))
        self.assertIsNone(re.search(r"^\s+# -+ \d+\.", source, re.MULTILINE))  # no section inside a class
        docstring_map = re.findall(r"^ +(\d+)\. (.+)$", main.__doc__ or "", re.MULTILINE)
        self.assertEqual([title for _, title in docstring_map], SECTIONS)

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
